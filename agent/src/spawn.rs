//! Starting a program in a new PTY: what portable-pty's `spawn_command` did, without the cost
//! that grows with the daemon's descriptors.
//!
//! - The PTY pair is opened close-on-exec from the start (`posix_openpt(O_CLOEXEC)`, then the
//!   slave by name with `O_CLOEXEC | O_NOCTTY`), so a spawn running at the same time on another
//!   thread never inherits this pair.
//! - The child (std [`Command`] with a `pre_exec` hook, which runs between `fork` and `execve`
//!   and so may only make async-signal-safe calls: no allocation, no locks):
//!   1. gets the slave as stdin, stdout and stderr (std's `dup2`, which clears close-on-exec for
//!      0–2);
//!   2. starts with every signal at its default action and an empty signal mask (the daemon
//!      ignores `SIGHUP` and tokio installs handlers; a shell must see `SIGHUP` when its
//!      terminal goes, as with sshd);
//!   3. becomes a session leader (`setsid`) with the slave as its controlling terminal
//!      (`TIOCSCTTY`), so the shell does job control and its process group can be signalled;
//!   4. marks every descriptor from 3 up close-on-exec with one `close_range(3, ~0,
//!      CLOSE_RANGE_CLOEXEC)` (Linux 5.11). Older kernels (Debian 11, Ubuntu 20.04, RHEL 8)
//!      answer `ENOSYS` or `EINVAL`: the descriptors listed in `/proc/self/fd` are marked one
//!      by one instead, read with `getdents64` into a buffer on the stack. Marking rather than
//!      closing keeps std's own exec-error pipe working, so a program that cannot run is
//!      reported to the caller with its `errno`.
//!
//! portable-pty swept `/proc/self/fd` through `std::fs::read_dir` in the child (allocating
//! after `fork`) and closed each descriptor with its own system call: about 5 ms of each create
//! once the daemon held 1,000 PTYs (about 5 µs per descriptor; `docs/performance.md`, "Scale").

use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};

use nix::fcntl::{open, OFlag};
use nix::libc;
use nix::pty::{grantpt, posix_openpt, ptsname_r, unlockpt};
use nix::sys::signal::{SigSet, SigmaskHow};
use nix::sys::stat::Mode;
use nix::unistd::{access, AccessFlags};
use relay_protocol::TermSize;

use crate::pty_io;

/// A program running in a new PTY.
#[derive(Debug)]
pub struct Child {
    /// The PTY's master side (blocking, close-on-exec). The slave is closed in this process, so
    /// a read gives `EIO` once every process holding the terminal has closed it.
    pub master: OwnedFd,
    /// The child's pid: a session and process group leader whose controlling terminal is the
    /// PTY. Not reaped here (see [`crate::pty_io::reap`]).
    pub pid: u32,
}

/// Why [`spawn`] failed. Nothing keeps running after either.
#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    /// No PTY could be opened (`/dev/ptmx` missing, or the system's PTY limit reached:
    /// `/proc/sys/kernel/pty/max`).
    #[error("could not allocate a PTY: {0}")]
    Pty(io::Error),
    /// The program could not be started; the text says why and what to check.
    #[error("{0}")]
    Start(String),
}

/// Starts `command` in a new PTY of `size` (columns × rows) as described in the module docs.
/// `command`'s stdin, stdout and stderr are replaced by the PTY's slave. The command is
/// consumed: it holds the slave's descriptors, and the master reads end of file only once
/// every copy of the slave is closed.
///
/// # Errors
/// [`SpawnError::Pty`] when no PTY could be opened or sized; [`SpawnError::Start`] when the
/// program could not be started: missing, not executable, a directory, or its interpreter
/// missing, each named with its path or the `PATH` searched ([`explain`]).
pub fn spawn(mut command: Command, size: TermSize) -> Result<Child, SpawnError> {
    let (master, slave) = open_pair(size).map_err(SpawnError::Pty)?;
    let stdio = |fd: &OwnedFd| fd.try_clone().map(Stdio::from).map_err(SpawnError::Pty);
    command
        .stdin(stdio(&slave)?)
        .stdout(stdio(&slave)?)
        .stderr(Stdio::from(slave));
    // Safety: `child_setup` makes only async-signal-safe calls (see its docs).
    unsafe { command.pre_exec(child_setup) };
    let spawned = command.spawn();
    let child = spawned.map_err(|e| SpawnError::Start(explain(&command, &e)))?;
    // The slave's last copies in this process go with the command.
    drop(command);
    // std's handle is dropped without waiting: the daemon waits for the pid itself.
    Ok(Child {
        master,
        pid: child.id(),
    })
}

/// Opens a PTY pair, both sides close-on-exec, the slave without becoming this process's
/// controlling terminal, sized `size`.
fn open_pair(size: TermSize) -> io::Result<(OwnedFd, OwnedFd)> {
    let master = posix_openpt(OFlag::O_RDWR | OFlag::O_NOCTTY | OFlag::O_CLOEXEC)?;
    grantpt(&master)?;
    unlockpt(&master)?;
    let name = ptsname_r(&master)?;
    let slave = open(
        name.as_str(),
        OFlag::O_RDWR | OFlag::O_NOCTTY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )?;
    let master = OwnedFd::from(master);
    pty_io::set_size(master.as_fd(), size)?;
    Ok((master, slave))
}

/// Runs in the child between `fork` and `execve` (steps 2–4 of the module docs). Only
/// async-signal-safe calls: `rt_sigaction`, `sigprocmask`, `setsid`, `ioctl`, `syscall`, `open`,
/// `fcntl`, `close`, and parsing into stack memory.
fn child_setup() -> io::Result<()> {
    // Every signal 1–64, the real-time ones included (glibc's own sigaction refuses 32 and
    // 33, which it reserves; an ignored one would still be ignored after `execve`). The kernel's
    // `struct sigaction` all zero is SIG_DFL with no flags and an empty mask on every
    // architecture; the buffer is larger than any of them.
    let default = [0u64; 8];
    for signal in 1..=64i32 {
        if signal != libc::SIGKILL && signal != libc::SIGSTOP {
            // Safety: the kernel reads at most the size of its struct from `default`; setting
            // the default action installs no handler. An invalid number gives EINVAL.
            unsafe {
                libc::syscall(
                    libc::SYS_rt_sigaction,
                    signal as libc::c_long,
                    default.as_ptr(),
                    std::ptr::null_mut::<u64>(),
                    8 as libc::size_t, // the kernel's signal set: 64 bits
                )
            };
        }
    }
    nix::sys::signal::sigprocmask(SigmaskHow::SIG_SETMASK, Some(&SigSet::empty()), None)?;
    nix::unistd::setsid()?;
    // Safety: TIOCSCTTY on stdin (the slave, put there by std) with argument 0.
    if unsafe { libc::ioctl(0, libc::TIOCSCTTY, 0) } == -1 {
        return Err(io::Error::last_os_error());
    }
    mark_cloexec_from(3);
    Ok(())
}

/// Marks every descriptor `first` and above close-on-exec: `close_range` where the kernel has
/// `CLOSE_RANGE_CLOEXEC`, else [`mark_listed_cloexec`]. Async-signal-safe.
fn mark_cloexec_from(first: u32) {
    // Safety: a raw system call with integer arguments.
    let marked = unsafe {
        libc::syscall(
            libc::SYS_close_range,
            first,
            u32::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        )
    };
    if marked != 0 {
        mark_listed_cloexec(first);
    }
}

/// Marks each descriptor `first` and above that `/proc/self/fd` lists close-on-exec, reading
/// the directory with `getdents64` into a stack buffer (no allocation, so it may run after
/// `fork`). Without `/proc`, marks every number from `first` up to the descriptor limit (at
/// most 65,536). Async-signal-safe.
fn mark_listed_cloexec(first: u32) {
    let dir = c"/proc/self/fd";
    // Safety: a C string literal and plain flags.
    let dirfd = unsafe {
        libc::open(
            dir.as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    if dirfd < 0 {
        mark_numbers_cloexec(first);
        return;
    }
    let mut buf = [0u8; 2048];
    loop {
        // Safety: `buf` is writable for its length.
        let n = unsafe { libc::syscall(libc::SYS_getdents64, dirfd, buf.as_mut_ptr(), buf.len()) };
        if n <= 0 {
            break;
        }
        for fd in dirent_numbers(&buf[..n as usize]) {
            if fd >= first && fd as i32 != dirfd {
                // Safety: setting a flag on a descriptor number; a closed one gives EBADF.
                unsafe { libc::fcntl(fd as i32, libc::F_SETFD, libc::FD_CLOEXEC) };
            }
        }
    }
    // Safety: our own descriptor.
    unsafe { libc::close(dirfd) };
}

/// Marks every descriptor number from `first` below the soft `RLIMIT_NOFILE` (at most 65,536)
/// close-on-exec. Async-signal-safe.
fn mark_numbers_cloexec(first: u32) {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // Safety: `limit` is writable.
    let top = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0 {
        limit.rlim_cur.min(65_536) as u32
    } else {
        1024
    };
    for fd in first..top {
        // Safety: as in `mark_listed_cloexec`.
        unsafe { libc::fcntl(fd as i32, libc::F_SETFD, libc::FD_CLOEXEC) };
    }
}

/// The descriptor numbers named by the `linux_dirent64` records in `records` (`.` and `..`
/// and anything not a number are skipped). Record layout (getdents64(2)): inode u64, offset
/// i64, record length u16, type u8, then the NUL-terminated name.
fn dirent_numbers(records: &[u8]) -> impl Iterator<Item = u32> + '_ {
    const NAME: usize = 19;
    let mut at = 0;
    std::iter::from_fn(move || {
        while at + NAME <= records.len() {
            let len = u16::from_ne_bytes([records[at + 16], records[at + 17]]) as usize;
            if len < NAME || at + len > records.len() {
                return None;
            }
            let name = &records[at + NAME..at + len];
            at += len;
            if let Some(fd) = parse_number(name) {
                return Some(fd);
            }
        }
        None
    })
}

/// The decimal number at the start of `name` up to its NUL, or `None` if it is not one.
fn parse_number(name: &[u8]) -> Option<u32> {
    let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
    let digits = &name[..end];
    if digits.is_empty() || digits.len() > 9 {
        return None;
    }
    digits.iter().try_fold(0u32, |n, &b| {
        b.is_ascii_digit().then(|| n * 10 + u32::from(b - b'0'))
    })
}

/// Says why `command` could not be started with `error`, and what to check: a program that
/// does not exist (its path, or the `PATH` searched), a directory, a file without execute
/// permission, or a script whose interpreter is missing.
pub fn explain(command: &Command, error: &io::Error) -> String {
    let program = command.get_program();
    let shown = program.to_string_lossy();
    let cwd = command.get_current_dir().unwrap_or(Path::new("."));
    let path = if program.as_bytes().contains(&b'/') {
        Some(cwd.join(program))
    } else {
        search_path(command).and_then(|dirs| find_in(program, &dirs))
    };
    let search = || {
        search_path(command)
            .map(|dirs| dirs.to_string_lossy().into_owned())
            .unwrap_or_else(|| "unset".into())
    };
    let executable = |p: &Path| p.is_file() && access(p, AccessFlags::X_OK).is_ok();
    if access(cwd, AccessFlags::X_OK).is_err() {
        return format!(
            "could not enter the working directory {}: {error}; pass a directory you can enter \
             as cwd",
            cwd.display()
        );
    }
    match (error.kind(), &path) {
        (io::ErrorKind::NotFound, None) => format!(
            "{shown} was not found in PATH ({}); install it or give its full path",
            search()
        ),
        (io::ErrorKind::NotFound, Some(p)) if !p.exists() => format!(
            "{} does not exist; give the path of an installed program",
            p.display()
        ),
        (io::ErrorKind::NotFound, Some(p)) if executable(p) => format!(
            "{} exists but its interpreter (the #! line) or loader is missing: {error}",
            p.display()
        ),
        (io::ErrorKind::PermissionDenied, Some(p)) if p.is_dir() => {
            format!("{} is a directory, not a program", p.display())
        }
        (io::ErrorKind::PermissionDenied, Some(p)) if p.is_file() && !executable(p) => format!(
            "{} is not executable ({error}); check its mode (chmod +x) and that its file \
             system is not mounted noexec",
            p.display()
        ),
        _ => format!("{shown}: {error} (starting it in a new terminal session failed)"),
    }
}

/// The `PATH` the command's program is searched in: the command's own when it sets one, else
/// the daemon's.
fn search_path(command: &Command) -> Option<std::ffi::OsString> {
    let own = command
        .get_envs()
        .find(|(k, _)| *k == OsStr::new("PATH"))
        .map(|(_, v)| v.map(OsStr::to_os_string));
    match own {
        Some(value) => value,
        None => std::env::var_os("PATH"),
    }
}

/// The first entry of `dirs` (a `PATH` value) that holds a file or directory named
/// `program` (as `execvp` tries them: one that is not executable is reported as such).
fn find_in(program: &OsStr, dirs: &OsStr) -> Option<std::path::PathBuf> {
    if program.is_empty() {
        return None;
    }
    std::env::split_paths(dirs)
        .map(|d| d.join(program))
        .find(|p| p.exists())
}

#[cfg(test)]
#[path = "spawn_tests.rs"]
mod tests;
