//! A PTY master as a plain descriptor: reading (stoppable for a live upgrade), writing, the
//! window size, the foreground process group, and the child's exit status.
//!
//! The daemon keeps only the master's descriptor (not portable-pty's handles) so that one code
//! path serves a PTY it spawned and one it was handed across `execve` by the daemon it replaced
//! ([`crate::handover`]). portable-pty still does the spawning (openpty, `setsid`, the
//! controlling terminal); these functions do what its `MasterPty`/`Child` did afterwards, the
//! same way (`TIOCSWINSZ`, `tcgetpgrp`, exit statuses with `strsignal` names).

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::OnceLock;

use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::Pid;
use relay_protocol::{ExitStatus, TermSize};

/// What one [`read`] found.
#[derive(Debug, PartialEq, Eq)]
pub enum Read {
    /// `n` bytes were read into the buffer.
    Data(usize),
    /// The PTY's output is finished (every slave descriptor closed: `EIO`, or end of file).
    Eof,
    /// [`stop_readers`] was called: the reader should return without reading.
    Stopped,
}

/// The daemon-wide stop signal of the PTY readers: a pipe whose read end every reader polls
/// beside its master. A byte in it (never read while readers should stay stopped) makes every
/// poll return at once; draining it lets them run again.
struct StopPipe {
    read: OwnedFd,
    write: OwnedFd,
}

fn stop_pipe() -> &'static StopPipe {
    static PIPE: OnceLock<StopPipe> = OnceLock::new();
    PIPE.get_or_init(|| {
        let (read, write) =
            nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC | nix::fcntl::OFlag::O_NONBLOCK)
                .expect("creating the PTY readers' stop pipe");
        StopPipe { read, write }
    })
}

/// Makes every PTY reader return [`Read::Stopped`] from its next (or current) [`read`].
pub fn stop_readers() {
    let _ = nix::unistd::write(&stop_pipe().write, b"s");
}

/// Undoes [`stop_readers`] (readers started after this call read normally again).
pub fn clear_stop() {
    let mut buf = [0u8; 64];
    while let Ok(n) = nix::unistd::read(&stop_pipe().read, &mut buf) {
        if n == 0 {
            break;
        }
    }
}

/// Waits for output on `master` and reads it into `buf`, unless the readers are stopped first.
/// Blocks (a reader thread's loop).
///
/// # Errors
/// IO errors other than `EINTR` (retried) and `EIO` (end of output).
pub fn read(master: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<Read> {
    let stop = stop_pipe().read.as_fd();
    loop {
        let mut fds = [
            PollFd::new(master, PollFlags::POLLIN),
            PollFd::new(stop, PollFlags::POLLIN),
        ];
        match poll(&mut fds, PollTimeout::NONE) {
            Ok(_) => {}
            Err(Errno::EINTR) => continue,
            Err(e) => return Err(e.into()),
        }
        if fds[1].revents().is_some_and(|r| !r.is_empty()) {
            return Ok(Read::Stopped);
        }
        if fds[0].revents().is_none_or(|r| r.is_empty()) {
            continue;
        }
        return match nix::unistd::read(master, buf) {
            Ok(0) | Err(Errno::EIO) => Ok(Read::Eof),
            Ok(n) => Ok(Read::Data(n)),
            Err(Errno::EINTR | Errno::EAGAIN) => continue,
            Err(e) => Err(e.into()),
        };
    }
}

/// Writes all of `data` to `master` (blocking while the terminal's input buffer is full).
///
/// # Errors
/// The write's IO error (the PTY is gone).
pub fn write_all(master: BorrowedFd<'_>, mut data: &[u8]) -> io::Result<()> {
    while !data.is_empty() {
        match nix::unistd::write(master, data) {
            Ok(n) => data = &data[n..],
            Err(Errno::EINTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Sets the terminal's window size (`TIOCSWINSZ`; the kernel sends `SIGWINCH` to the
/// foreground process group).
///
/// # Errors
/// The ioctl's error.
pub fn set_size(master: BorrowedFd<'_>, size: TermSize) -> io::Result<()> {
    let ws = nix::libc::winsize {
        ws_row: size.rows,
        ws_col: size.cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // Safety: TIOCSWINSZ reads one `winsize` from the pointer, which outlives the call.
    let rc = unsafe { nix::libc::ioctl(master.as_raw_fd(), nix::libc::TIOCSWINSZ, &ws) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The terminal's foreground process group (`tcgetpgrp`), if it has one.
pub fn foreground_group(master: BorrowedFd<'_>) -> Option<i32> {
    nix::unistd::tcgetpgrp(master)
        .ok()
        .map(Pid::as_raw)
        .filter(|&p| p > 0)
}

/// Reaps our child `pid` (`waitpid(pid)`, never `-1`) and returns its status in portable-pty's
/// form, which the wire keeps: an exit code, or code 1 with the signal's `strsignal(3)` name
/// ("Hangup", "Killed").
///
/// # Errors
/// `waitpid`'s error (`ECHILD`: not our child, or already reaped).
pub fn reap(pid: u32) -> io::Result<ExitStatus> {
    loop {
        match waitpid(Pid::from_raw(pid as i32), None) {
            Ok(WaitStatus::Exited(_, code)) => {
                return Ok(ExitStatus {
                    code: code as u32,
                    signal: None,
                })
            }
            Ok(WaitStatus::Signaled(_, signal, _)) => {
                return Ok(ExitStatus {
                    code: 1,
                    signal: Some(signal_name(signal as i32)),
                })
            }
            Ok(_) | Err(Errno::EINTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

fn signal_name(signal: i32) -> String {
    // Safety: strsignal returns a pointer to a static or thread-local string (or null).
    let name = unsafe { nix::libc::strsignal(signal) };
    if name.is_null() {
        return format!("Signal {signal}");
    }
    // Safety: a NUL-terminated string that lives until the next strsignal on this thread.
    unsafe { std::ffi::CStr::from_ptr(name) }
        .to_string_lossy()
        .into_owned()
}

/// Clears or sets `FD_CLOEXEC` on `fd`: a descriptor handed across `execve` must not have it.
///
/// # Errors
/// `fcntl`'s error.
pub fn set_cloexec(fd: BorrowedFd<'_>, on: bool) -> io::Result<()> {
    use nix::fcntl::{fcntl, FcntlArg, FdFlag};
    let flags = FdFlag::from_bits_truncate(fcntl(fd, FcntlArg::F_GETFD)?);
    let flags = if on {
        flags | FdFlag::FD_CLOEXEC
    } else {
        flags - FdFlag::FD_CLOEXEC
    };
    fcntl(fd, FcntlArg::F_SETFD(flags))?;
    Ok(())
}
