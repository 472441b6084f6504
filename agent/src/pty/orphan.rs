//! PTY processes that outlived a daemon which was killed (SIGKILL, OOM killer, crash).
//!
//! When a daemon dies without its shutdown, its PTY masters close and the kernel hangs up the
//! terminals; most shells exit then, but a program that ignores SIGHUP keeps running. Nobody can
//! ever reattach it (its master is gone), so reporting its lease as ended with
//! `AgentRestarted` would be a lie while it runs. The next daemon therefore ends such orphans
//! before it records their leases as ended: SIGHUP to the process group, SIGKILL after the grace
//! if still there, then SIGKILL to whatever is left in the shell's session (a job that ignores
//! SIGHUP outlives its shell, whose pid still names the session).
//!
//! Identity: a pid alone may have been reused by now. The journal records each child's start time
//! (field 22 of `/proc/<pid>/stat`, clock ticks since boot); a process counts as the orphan only
//! when both pid and start time match, checked again right before every signal. Leases without a
//! recorded start time (older journals) are never signalled.

use std::time::{Duration, Instant};

use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::Pid;
use relay_protocol::PtyId;

use crate::sys::procfs::{self, stat, Stat};

/// How often the orphans are checked while waiting for them to end.
const POLL: Duration = Duration::from_millis(50);
/// How long to wait for the kernel to finish a SIGKILL.
const KILL_WAIT: Duration = Duration::from_secs(1);

/// A process that a lease of an earlier incarnation started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Process {
    /// The lease's PTY.
    pub pty: PtyId,
    /// Child pid.
    pub pid: u32,
    /// Child start time, clock ticks since boot.
    pub start_ticks: u64,
}

/// The start time of process `pid` in clock ticks since boot, if it exists.
pub fn start_ticks(pid: u32) -> Option<u64> {
    stat(pid).map(|s| s.start_ticks)
}

/// Whether `p` still runs: same pid, same start time, not a zombie.
fn running(p: &Process) -> Option<Stat> {
    stat(p.pid).filter(|s| s.start_ticks == p.start_ticks && !s.is_gone())
}

/// Sends `sig` to `p`'s process group (it leads one: PTY children call `setsid`), or to `p`
/// alone if it does not lead its group, only if `p` is still the same process.
fn signal(p: &Process, sig: Signal) -> bool {
    let Some(st) = running(p) else {
        return false;
    };
    let pid = Pid::from_raw(p.pid as i32);
    if st.pgrp == p.pid as i32 {
        killpg(pid, sig).is_ok()
    } else {
        kill(pid, sig).is_ok()
    }
}

/// Waits until none of `ps` runs, at most `limit`. Returns those still running.
fn wait_gone(ps: Vec<Process>, limit: Duration) -> Vec<Process> {
    let deadline = Instant::now() + limit;
    let mut left = ps;
    loop {
        left.retain(|p| running(p).is_some() || !members(p).is_empty());
        if left.is_empty() || Instant::now() >= deadline {
            return left;
        }
        std::thread::sleep(POLL);
    }
}

/// Ends what is left of `candidates`: SIGHUP to each shell's process group, SIGKILL after
/// `grace` to those still there, then SIGKILL to whatever else is left in each shell's session
/// (a background job that ignores SIGHUP outlives its shell and the hang-up; its session id is
/// the shell's pid, which cannot be reused while the session has members). Blocks for at most
/// about `grace` + 1 s. Returns the PTYs of which some process was found running (each logged);
/// the others were already gone.
pub fn end_orphans(candidates: &[Process], grace: Duration) -> Vec<PtyId> {
    let found: Vec<Process> = candidates
        .iter()
        .copied()
        .filter(|p| running(p).is_some() || !members(p).is_empty())
        .collect();
    if found.is_empty() {
        return Vec::new();
    }
    for p in &found {
        tracing::warn!(
            pty = %p.pty,
            pid = p.pid,
            "PTY processes outlived the previous daemon and can never be reattached; ending them \
             (SIGHUP, SIGKILL after {grace:?})"
        );
        signal(p, Signal::SIGHUP);
    }
    let stubborn = wait_gone(found.clone(), grace);
    for p in &stubborn {
        if signal(p, Signal::SIGKILL) {
            tracing::warn!(pty = %p.pty, pid = p.pid, "orphan ignored SIGHUP; sent SIGKILL");
        }
    }
    for p in &found {
        let killed = procfs::kill_session(p.pid, p.start_ticks);
        if killed > 0 {
            tracing::warn!(
                pty = %p.pty,
                "{killed} process(es) left in the orphan's session (ignoring SIGHUP) got SIGKILL"
            );
        }
    }
    for p in wait_gone(found.clone(), KILL_WAIT) {
        tracing::error!(
            pty = %p.pty,
            pid = p.pid,
            "orphan processes still run {KILL_WAIT:?} after SIGKILL (stuck in the kernel?); its \
             lease is recorded as ended anyway since it can never be reattached"
        );
    }
    found.into_iter().map(|p| p.pty).collect()
}

/// The processes left in `p`'s session.
fn members(p: &Process) -> Vec<u32> {
    procfs::session_members(p.pid, p.start_ticks)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    #[test]
    fn own_start_time_is_stable_and_a_reused_pid_is_not_signalled() {
        let me = std::process::id();
        let t = start_ticks(me).expect("own stat");
        assert_eq!(start_ticks(me), Some(t));
        let mut child = Command::new("sleep").arg("30").spawn().unwrap();
        let pid = child.id();
        let real = start_ticks(pid).unwrap();
        let pty = PtyId {
            incarnation: relay_protocol::Incarnation(1),
            counter: 1,
        };
        // Another start time: a different process that reuses the pid. Left alone.
        let impostor = Process {
            pty,
            pid,
            start_ticks: real + 1,
        };
        assert!(end_orphans(&[impostor], Duration::from_millis(100)).is_empty());
        assert!(child.try_wait().unwrap().is_none(), "not signalled");
        // The real one is ended.
        let orphan = Process {
            pty,
            pid,
            start_ticks: real,
        };
        assert_eq!(end_orphans(&[orphan], Duration::from_secs(3)), vec![pty]);
        let status = child.wait().unwrap();
        assert!(!status.success());
    }
}
