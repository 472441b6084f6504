//! The daemon's descriptor limit: raised to the hard limit when it starts, the original given
//! back to every program it starts.
//!
//! Every PTY costs the daemon its master fd, and each connection one to three more (the socket,
//! and a bridge's stdin and stdout, [`crate::daemon::stdio_pass`]). The soft `RLIMIT_NOFILE` an
//! sshd session gets is usually 1024 (systemd's default since v240, which leaves the hard limit at
//! 524288 for programs that raise their own), so about a thousand panes would fail with
//! `EMFILE` although the hard limit allows far more. The daemon raises its soft limit to the
//! hard limit, as systemd.exec(5) recommends and the Go runtime does since 1.19, and every
//! program it starts gets the original soft limit back ([`original_for_children`]): `select(2)`
//! cannot watch descriptors of 1024 (`FD_SETSIZE`) and above, so programs that use it rely on
//! the low default.
//!
//! A live upgrade `execve`s the new code with the raised limit in force; the original travels
//! in the new code's environment as [`ORIGINAL_ENV`] ([`handover_env`]), so it is never lost,
//! also when the new code cannot resume and gives the process back to the old binary. An old
//! binary from before this module keeps the raised limit and gives it to its programs.

use crate::sys::nofile;
use std::sync::atomic::{AtomicU64, Ordering};

/// The environment variable that carries the original soft limit across a live upgrade's
/// `execve` (decimal). Read by [`raise`] only; shells never see it (their environment is built
/// from scratch, [`crate::pty::shell`]).
pub const ORIGINAL_ENV: &str = "RELAY_NOFILE_SOFT";

/// Highest soft limit asked for when the hard limit is unlimited and the kernel's ceiling
/// ([`nofile::ceiling`], above which `setrlimit` fails) cannot be read: Linux's default
/// `nr_open`, 1,048,576.
const UNLIMITED_CAP: u64 = 1 << 20;

/// An original soft limit below this, carried in [`ORIGINAL_ENV`], is not believed: no program
/// could start with it (the dynamic loader alone opens several files).
const LEAST_BELIEVED: u64 = 64;

/// The soft limit to give programs back, or `u64::MAX` when the daemon did not raise its own.
static ORIGINAL: AtomicU64 = AtomicU64::new(u64::MAX);

/// What [`raise`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Raised {
    /// The soft limit programs started by the daemon get (descriptors).
    pub original: u64,
    /// The daemon's soft limit now (descriptors).
    pub soft: u64,
}

/// Raises this process's soft `RLIMIT_NOFILE` to its hard limit (at most `fs.nr_open` when
/// the hard limit is unlimited) and remembers the original for [`original_for_children`]. The
/// original is the soft limit found, or, when `resumed` (this process is a live upgrade's new
/// code, or the old code taking its shells back), [`ORIGINAL_ENV`] if it holds a number from
/// 64 up to the soft limit found. Call once, at start, before anything can fail.
///
/// # Errors
/// `getrlimit` or `setrlimit` failed (the limit is then unchanged; the daemon runs with it).
pub fn raise(resumed: bool) -> std::io::Result<Raised> {
    let (soft, hard) = nofile::get()?;
    let original = std::env::var(ORIGINAL_ENV)
        .ok()
        .filter(|_| resumed)
        .and_then(|v| v.trim().parse::<u64>().ok())
        .filter(|&n| (LEAST_BELIEVED..=soft).contains(&n))
        .unwrap_or(soft);
    let target = if hard == nofile::UNLIMITED {
        nofile::ceiling().unwrap_or(UNLIMITED_CAP).max(soft)
    } else {
        hard
    };
    if target > soft {
        nofile::set(target, hard)?;
    }
    if original < target.max(soft) {
        ORIGINAL.store(original, Ordering::Relaxed);
    }
    Ok(Raised {
        original,
        soft: target.max(soft),
    })
}

/// The soft limit a program started by the daemon gets back, when the daemon raised its own.
/// Read when a spawn is planned; the child sets it between `clone` and `execve`
/// ([`crate::sys::spawn::Plan::nofile_soft`]).
pub fn original_for_children() -> Option<u64> {
    match ORIGINAL.load(Ordering::Relaxed) {
        u64::MAX => None,
        n => Some(n),
    }
}

/// The `(name, value)` a live upgrade adds to the new code's environment, when the daemon
/// raised its limit.
pub fn handover_env() -> Option<(&'static str, String)> {
    original_for_children().map(|n| (ORIGINAL_ENV, n.to_string()))
}
