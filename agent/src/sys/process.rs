//! Processes and descriptors: the descriptors the daemon inherited, who is on the other end of
//! a socket, waiting for a child without reaping it, running an open executable.

use std::ffi::c_char;
use std::fs;
use std::os::fd::{OwnedFd, RawFd};
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixStream;

use nix::sys::socket::{getsockopt, sockopt, MsgFlags};

/// Closes every descriptor above the standard streams that whoever started the daemon left
/// open (a pipe, a FIFO, a socket of an SSH session): the daemon lives for days, and a writer
/// end it kept would keep the reader on the other side from ever seeing end-of-file. The
/// descriptors are the entries of `/proc/self/fd` (proc(5)); nothing is closed when it cannot
/// be read. Call first, while nothing of the daemon's own is open and no other thread exists.
/// Shells started later get only their PTY as stdio ([`crate::sys::spawn`] marks everything
/// above 2 close-on-exec in the child).
pub fn close_inherited_fds() {
    let Ok(dir) = fs::read_dir("/proc/self/fd") else {
        return;
    };
    let fds: Vec<i32> = dir
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .filter(|&fd| fd > 2)
        .collect();
    // The directory's own descriptor is in the list and already closed: EBADF, harmless.
    for fd in fds {
        // Safety: nothing in this process owns these descriptors yet.
        unsafe { nix::libc::close(fd) };
    }
}

/// Whether the process on the other end of `stream` runs the same executable file as this one
/// (same device and inode): its pid from `SO_PEERCRED` (unix(7)), its file from
/// `/proc/PID/exe`. `false` when either cannot be read.
pub fn peer_runs_our_executable(stream: &UnixStream) -> bool {
    let Ok(peer) = getsockopt(stream, sockopt::PeerCredentials) else {
        return false;
    };
    let identity = |path: &str| fs::metadata(path).map(|m| (m.dev(), m.ino())).ok();
    let ours = identity("/proc/self/exe");
    ours.is_some() && ours == identity(&format!("/proc/{}/exe", peer.pid()))
}

/// A new pipe `(read end, write end)`, both close-on-exec from the start (`pipe2(O_CLOEXEC)`,
/// pipe(2)), so no program started meanwhile inherits either end.
///
/// # Errors
/// No descriptor left (`EMFILE`, `ENFILE`).
pub fn pipe_cloexec() -> std::io::Result<(OwnedFd, OwnedFd)> {
    Ok(nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?)
}

/// Whether our child `pid` has exited, leaving it unreaped (`waitid(P_PID, pid, WEXITED |
/// WNOHANG | WNOWAIT)`, waitid(2)); also `true` when `pid` is not our child (nothing more will
/// come), `false` when interrupted.
pub fn has_exited(pid: u32) -> bool {
    use nix::sys::wait::{waitid, Id, WaitPidFlag, WaitStatus};
    let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT;
    !matches!(
        waitid(Id::Pid(nix::unistd::Pid::from_raw(pid as i32)), flags),
        Ok(WaitStatus::StillAlive) | Err(nix::errno::Errno::EINTR)
    )
}

/// Runs the executable open at `exe` in this process (`fexecve(3)`: found even if its file was
/// replaced or removed since it was opened) with `args` and `env`. Async-signal-safe: nothing
/// is allocated (a live upgrade's way back runs it in a signal handler). Returns only on
/// failure, with `errno`.
///
/// # Safety
/// `args` and `env` must be NULL-terminated arrays of pointers to NUL-terminated strings, valid
/// for the call.
pub unsafe fn exec_open_file(
    exe: RawFd,
    args: *const *const c_char,
    env: *const *const c_char,
) -> std::io::Error {
    // Safety: as the caller promised.
    unsafe { nix::libc::fexecve(exe, args, env) };
    std::io::Error::last_os_error()
}

/// The `recvmsg` flag that makes descriptors received with `SCM_RIGHTS` close-on-exec as they
/// arrive (`MSG_CMSG_CLOEXEC`, unix(7)).
pub const RECEIVE_CLOEXEC: MsgFlags = MsgFlags::MSG_CMSG_CLOEXEC;
