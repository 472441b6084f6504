//! A file with no name that lives in memory: the live upgrade's state travels in one across
//! `execve` ([`crate::upgrade::probe::write_state`]).

use std::ffi::CStr;
use std::io;
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::Path;

/// A new, empty, close-on-exec file named `name` (shown only in `/proc/PID/fd`): a memory file
/// (`memfd_create(2)`, Linux 3.17), or where the kernel has none an unlinked file created in
/// `fallback_dir`.
///
/// # Errors
/// Creating the file (no memory; in `fallback_dir`, a full disk or no permission).
pub fn create(name: &CStr, fallback_dir: &Path) -> io::Result<OwnedFd> {
    // The system call, not glibc's wrapper (glibc 2.27+): the agent runs on glibc 2.17.
    // Safety: a NUL-terminated name and flags; the result is a new descriptor or -1.
    let raw = unsafe {
        nix::libc::syscall(
            nix::libc::SYS_memfd_create,
            name.as_ptr(),
            nix::libc::MFD_CLOEXEC,
        )
    };
    if raw >= 0 {
        // Safety: a descriptor the kernel just returned, owned by nobody else.
        return Ok(unsafe { OwnedFd::from_raw_fd(raw as i32) });
    }
    let path = fallback_dir.join(format!("{}.{}", name.to_string_lossy(), std::process::id()));
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)?;
    std::fs::remove_file(&path)?;
    Ok(OwnedFd::from(file))
}
