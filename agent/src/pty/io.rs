//! A PTY master as a plain descriptor: non-blocking reads and writes, the readers' stop signal
//! for a live upgrade, the window size, the foreground process group, and the child's exit
//! status.
//!
//! The daemon keeps only the master's descriptor and the child's pid, so that one code path
//! serves a PTY it spawned ([`crate::pty::spawn`]) and one it was handed across `execve` by the
//! daemon it replaced ([`crate::upgrade`]): `TIOCSWINSZ`, `tcgetpgrp`, exit statuses with
//! glibc `strsignal` names (the form portable-pty reported, which the wire keeps).

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::sync::OnceLock;

use nix::errno::Errno;
use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::Pid;
use relay_protocol::{ExitStatus, TermSize};
use tokio::sync::watch;

/// The daemon-wide pause of PTY IO (a live upgrade pauses it, so the rings are final while the
/// state is written and the masters can cross `execve`): `true` while readers and writers must
/// not touch a master. Each checks it under its PTY's IO gate before every read or write.
fn pause_flag() -> &'static watch::Sender<bool> {
    static PAUSE: OnceLock<watch::Sender<bool>> = OnceLock::new();
    PAUSE.get_or_init(|| watch::Sender::new(false))
}

/// Pauses every PTY's reader and writer before their next read or write (bytes not read stay in
/// the kernel's buffer, input not written stays queued). A PTY's IO is certainly paused once its
/// gate was taken after this call ([`crate::pty::Pty::fence_io`]).
pub fn pause_io() {
    pause_flag().send_replace(true);
}

/// Undoes [`pause_io`]: readers and writers carry on where they stopped.
pub fn resume_io() {
    pause_flag().send_replace(false);
}

/// What readers and writers watch (`true`: paused).
pub fn paused() -> watch::Receiver<bool> {
    pause_flag().subscribe()
}

/// Waits until IO is not paused (marking the value seen).
///
/// # Errors
/// Never in practice: the flag lives as long as the process.
pub async fn wait_unpaused(
    paused: &mut watch::Receiver<bool>,
) -> Result<(), watch::error::RecvError> {
    paused.wait_for(|p| !*p).await.map(|_| ())
}

/// One non-blocking read of `master` into `buf`.
///
/// # Errors
/// `WouldBlock` when nothing is there; other IO errors but `EIO`.
pub fn read(master: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<Read> {
    loop {
        return match nix::unistd::read(master, buf) {
            // EIO: every slave descriptor closed, the PTY's end of file.
            Ok(0) | Err(Errno::EIO) => Ok(Read::Eof),
            Ok(n) => Ok(Read::Data(n)),
            Err(Errno::EINTR) => continue,
            Err(e) => Err(e.into()),
        };
    }
}

/// What one [`read`] found.
#[derive(Debug, PartialEq, Eq)]
pub enum Read {
    /// `n` bytes were read into the buffer.
    Data(usize),
    /// The PTY's output is finished (every slave descriptor closed: `EIO`, or end of file).
    Eof,
}

/// One non-blocking write of a prefix of `data` to `master`; returns how many bytes it took.
///
/// # Errors
/// `WouldBlock` when the terminal's input buffer is full; other IO errors (the PTY is gone).
pub fn write(master: BorrowedFd<'_>, data: &[u8]) -> io::Result<usize> {
    loop {
        return match nix::unistd::write(master, data) {
            Ok(n) => Ok(n),
            Err(Errno::EINTR) => continue,
            Err(e) => Err(e.into()),
        };
    }
}

/// Sets or clears `O_NONBLOCK` on `fd` (it belongs to the open file: every duplicate shares it).
/// The daemon serves masters non-blocking; a handover passes them blocking, as older agents
/// expect.
///
/// # Errors
/// `fcntl`'s error.
pub fn set_nonblocking(fd: BorrowedFd<'_>, on: bool) -> io::Result<()> {
    use nix::fcntl::{fcntl, FcntlArg, OFlag};
    let flags = OFlag::from_bits_truncate(fcntl(fd, FcntlArg::F_GETFL)?);
    let flags = if on {
        flags | OFlag::O_NONBLOCK
    } else {
        flags - OFlag::O_NONBLOCK
    };
    fcntl(fd, FcntlArg::F_SETFL(flags))?;
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

/// Reaps our child `pid` (`waitpid(pid)`, never `-1`) and returns its status in the form the
/// wire keeps (portable-pty's): an exit code, or code 1 with the signal's glibc `strsignal(3)` name
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
                    signal: Some(super::wire_signal::description(signal as i32)),
                })
            }
            Ok(_) | Err(Errno::EINTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
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
