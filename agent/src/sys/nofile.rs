//! The descriptor limit (`RLIMIT_NOFILE`, getrlimit(2)) as system calls only, so the child of a
//! spawn may call [`get`] and [`set`] between `clone` and `execve` (async-signal-safe: no
//! allocation, no locks). What the daemon does with the limit is [`crate::pty::nofile`].

use nix::libc;

/// The value `getrlimit` reports for "no limit" (`RLIM_INFINITY`).
pub const UNLIMITED: u64 = libc::RLIM_INFINITY;

/// This process's `(soft, hard)` descriptor limits (descriptors).
///
/// # Errors
/// `getrlimit`'s error.
pub fn get() -> std::io::Result<(u64, u64)> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // Safety: the kernel writes one `rlimit` we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok((limit.rlim_cur, limit.rlim_max))
}

/// Sets this process's descriptor limits to `soft` and `hard` (descriptors).
///
/// # Errors
/// `setrlimit`'s error: `EINVAL` above the kernel's ceiling ([`ceiling`]), `EPERM` when raising
/// the hard limit.
pub fn set(soft: u64, hard: u64) -> std::io::Result<()> {
    let limit = libc::rlimit {
        rlim_cur: soft,
        rlim_max: hard,
    };
    // Safety: the kernel reads one `rlimit` we own.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// The highest soft limit the kernel accepts when the hard limit is unlimited: Linux's
/// `fs.nr_open` (`/proc/sys/fs/nr_open`, proc(5)). `None` when it cannot be read.
pub fn ceiling() -> Option<u64> {
    std::fs::read_to_string("/proc/sys/fs/nr_open")
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
}
