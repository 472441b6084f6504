//! Opening a PTY pair (pty(7)).

use std::io;
use std::os::fd::OwnedFd;

use nix::fcntl::{open, OFlag};
use nix::pty::{grantpt, posix_openpt, ptsname_r, unlockpt};
use nix::sys::stat::Mode;

/// A new PTY pair `(master, slave)`, both close-on-exec from the start (`posix_openpt` with
/// `O_CLOEXEC`, then the slave by name, `ptsname_r`), so a spawn running at the same time on
/// another thread never inherits it; the slave is opened with `O_NOCTTY`, so it does not become
/// this process's controlling terminal. The size is the kernel's default (0×0).
///
/// # Errors
/// No PTY left (`/proc/sys/kernel/pty/max`), no descriptor left (`EMFILE`, `ENFILE`), or
/// `/dev/pts` not mounted.
pub fn open_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    let master = posix_openpt(OFlag::O_RDWR | OFlag::O_NOCTTY | OFlag::O_CLOEXEC)?;
    grantpt(&master)?;
    unlockpt(&master)?;
    let name = ptsname_r(&master)?;
    let slave = open(
        name.as_str(),
        OFlag::O_RDWR | OFlag::O_NOCTTY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )?;
    Ok((OwnedFd::from(master), slave))
}
