//! PTY processes that outlived a daemon which was killed (SIGKILL, OOM killer, crash).
//!
//! When a daemon dies without its shutdown, its PTY masters close and the kernel hangs up the
//! terminals; most shells exit then, but a program that ignores SIGHUP keeps running. Nobody can
//! ever reattach it (its master is gone), so reporting its lease as ended with
//! `AgentRestarted` would be a lie while it runs. The next daemon therefore ends such orphans
//! before it records their leases as ended: SIGHUP to the process group, SIGKILL after the grace
//! if still there.
//!
//! Identity: a pid alone may have been reused by now. The journal records each child's start time
//! (field 22 of `/proc/<pid>/stat`, clock ticks since boot); a process counts as the orphan only
//! when both pid and start time match, checked again right before every signal. Leases without a
//! recorded start time (older journals) are never signalled.

use std::time::{Duration, Instant};

use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::Pid;
use relay_protocol::PtyId;

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

/// What `/proc/<pid>/stat` says about a process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stat {
    state: char,
    pgrp: i32,
    start_ticks: u64,
}

/// Parses the text of `/proc/<pid>/stat`. The command name (field 2) may contain spaces and
/// parentheses, so fields are counted after its last `)`.
fn parse_stat(text: &str) -> Option<Stat> {
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3 (state); field N is fields[N - 3].
    Some(Stat {
        state: fields.first()?.chars().next()?,
        pgrp: fields.get(5 - 3)?.parse().ok()?,
        start_ticks: fields.get(22 - 3)?.parse().ok()?,
    })
}

fn stat(pid: u32) -> Option<Stat> {
    parse_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// The start time of process `pid` in clock ticks since boot, if it exists.
pub fn start_ticks(pid: u32) -> Option<u64> {
    stat(pid).map(|s| s.start_ticks)
}

/// Whether `p` still runs: same pid, same start time, not a zombie.
fn running(p: &Process) -> Option<Stat> {
    stat(p.pid).filter(|s| s.start_ticks == p.start_ticks && !matches!(s.state, 'Z' | 'X'))
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
        left.retain(|p| running(p).is_some());
        if left.is_empty() || Instant::now() >= deadline {
            return left;
        }
        std::thread::sleep(POLL);
    }
}

/// Ends those of `candidates` that still run: SIGHUP to each process group, SIGKILL after
/// `grace` to those still there. Blocks for at most about `grace` + 1 s. Returns the PTYs whose
/// process was found running (each logged); the others were already gone.
pub fn end_orphans(candidates: &[Process], grace: Duration) -> Vec<PtyId> {
    let found: Vec<Process> = candidates
        .iter()
        .copied()
        .filter(|p| running(p).is_some())
        .collect();
    if found.is_empty() {
        return Vec::new();
    }
    for p in &found {
        tracing::warn!(
            pty = %p.pty,
            pid = p.pid,
            "PTY process outlived the previous daemon and can never be reattached; ending it \
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
    for p in wait_gone(stubborn, KILL_WAIT) {
        tracing::error!(
            pty = %p.pty,
            pid = p.pid,
            "orphan still runs {KILL_WAIT:?} after SIGKILL (stuck in the kernel?); its lease is \
             recorded as ended anyway since it can never be reattached"
        );
    }
    found.into_iter().map(|p| p.pty).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    #[test]
    fn stat_fields_are_counted_after_the_command_name() {
        let text = "4242 (a) b (c)) S 1 4242 4242 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 987654 \
                    1 2 3";
        assert_eq!(
            parse_stat(text),
            Some(Stat {
                state: 'S',
                pgrp: 4242,
                start_ticks: 987654
            })
        );
        assert_eq!(parse_stat("1 (x) S 1"), None);
        assert_eq!(parse_stat("garbage"), None);
    }

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
