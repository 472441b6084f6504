//! Ending a PTY completely: SIGHUP to the shell's process group, SIGKILL after the grace only
//! while the shell is still our own unreaped child, then SIGKILL to whatever is left in the
//! PTY's session (e.g. a background job that ignores SIGHUP: `(trap '' HUP; exec sleep 1e5) &`).
//! The session is ours: the shell leads it ([`crate::pty::spawn`] runs `setsid`), and its id, the
//! shell's pid, is not reused while the session has members; members are also checked to have
//! started no earlier than the shell (see [`crate::sys::procfs::kill_session`]).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use tokio::sync::watch;

use super::Pty;
use crate::runtime::LockExt;
use crate::sys::procfs;

/// How often a kill in progress looks whether the shell is reaped and its session empty.
const POLL: Duration = Duration::from_millis(50);
/// How long the sweep keeps SIGKILLing what is in the session (a job may fork while it runs)
/// before what is still there counts as left.
const KILL_WAIT: Duration = Duration::from_secs(1);

/// The outcome of an end, `None` until it is known.
pub type KillWatch = watch::Receiver<Option<KillOutcome>>;

/// What an end did, for the lease's detail and the kill summary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct KillOutcome {
    /// The shell ignored SIGHUP for the whole grace and got SIGKILL.
    pub shell_sigkill: bool,
    /// Other processes left in the PTY's session after the grace that got SIGKILL.
    pub session_killed: u32,
    /// Processes still in the session after that (stuck in the kernel), or `None` when the
    /// session could not be identified (the shell's start time was unreadable at spawn).
    pub left: Option<u32>,
}

impl KillOutcome {
    /// A short account for people: `SIGHUP`, `SIGKILL after 3s; 1 process left in its session
    /// got SIGKILL`, `...; 2 processes still in its session`.
    pub fn describe(&self, grace: Duration) -> String {
        let mut s = if self.shell_sigkill {
            format!("SIGHUP, SIGKILL after {}s", grace.as_secs())
        } else {
            "SIGHUP".to_string()
        };
        if self.session_killed > 0 {
            s += &format!(
                "; {} left in its session got SIGKILL",
                processes(self.session_killed)
            );
        }
        match self.left {
            Some(0) => {}
            Some(n) => s += &format!("; {} still in its session", processes(n)),
            None => s += "; its session could not be checked",
        }
        s
    }
}

fn processes(n: u32) -> String {
    if n == 1 {
        "1 process".into()
    } else {
        format!("{n} processes")
    }
}

impl Pty {
    /// Ends the PTY (see the module docs). Returns at once: `None` when the shell had already
    /// been reaped and no end was in progress (nothing was signalled), else a watch of what the
    /// end did, set once the shell is reaped and its session empty, or after the grace and the
    /// SIGKILLs. A second call while an end is in progress shares that end's outcome.
    pub fn kill(self: &Arc<Self>, grace: Duration) -> Option<KillWatch> {
        let outcome = self.kill_outcome.subscribe();
        if self.killing.swap(true, Ordering::AcqRel) {
            return Some(outcome);
        }
        // An end is asked for: nothing waits for a lossless consumer any more (what it has not
        // read is then lost and reported to it as a gap), so the exit is seen within the grace.
        self.holds.release_all();
        if !self.signal_group_if_ours(Signal::SIGHUP) {
            self.killing.store(false, Ordering::Release);
            return None;
        }
        let pty = Arc::clone(self);
        // A task, not the blocking pool: the reaping this waits for runs there.
        tokio::spawn(async move {
            let done = pty.finish_kill(grace).await;
            pty.kill_outcome.send_replace(Some(done));
        });
        Some(outcome)
    }

    /// The rest of [`Pty::kill`], on its own task (it reads /proc between sleeps).
    async fn finish_kill(&self, grace: Duration) -> KillOutcome {
        let deadline = Instant::now() + grace;
        let pid = self.pid;
        loop {
            let empty = match self.start_ticks {
                Some(ticks) if self.is_reaped() => {
                    off_runtime(move || procfs::session_members(pid, ticks).is_empty())
                        .await
                        .unwrap_or(false)
                }
                _ => false,
            };
            if empty {
                return KillOutcome {
                    left: Some(0),
                    ..KillOutcome::default()
                };
            }
            if Instant::now() >= deadline {
                break;
            }
            tokio::time::sleep(POLL).await;
        }
        let shell_sigkill = self.signal_group_if_ours(Signal::SIGKILL);
        if shell_sigkill {
            tracing::info!(binding = %self.binding, "escalated to SIGKILL after {grace:?}");
        }
        let Some(ticks) = self.start_ticks else {
            return KillOutcome {
                shell_sigkill,
                session_killed: 0,
                left: None,
            };
        };
        // Repeated: a job may fork while it is being killed.
        let mut session_killed = 0;
        let until = Instant::now() + KILL_WAIT;
        let left = loop {
            session_killed += off_runtime(move || procfs::kill_session(pid, ticks))
                .await
                .unwrap_or(0);
            tokio::time::sleep(POLL).await;
            let left = off_runtime(move || procfs::session_members(pid, ticks).len() as u32)
                .await
                .unwrap_or(0);
            if left == 0 || Instant::now() >= until {
                break left;
            }
        };
        if session_killed > 0 {
            tracing::warn!(
                binding = %self.binding,
                left,
                "{session_killed} process(es) left in the PTY's session after {grace:?} got SIGKILL"
            );
        }
        KillOutcome {
            shell_sigkill,
            session_killed,
            left: Some(left),
        }
    }

    fn is_reaped(&self) -> bool {
        // (Held only briefly, or by a live upgrade while it hands over.)
        *self.reaped.lock_unpoisoned()
    }
}

/// Runs `scan` (a walk of every process's `/proc` stat: milliseconds with thousands of
/// processes) on the blocking pool, so many ends at once do not hold up the runtime.
async fn off_runtime<T: Send + 'static>(scan: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    tokio::task::spawn_blocking(scan).await.ok()
}
