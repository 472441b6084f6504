//! One timer per detached lease. A timer is armed at the moment the lease could become eligible
//! (on detach, supersede, protection change, or after a re-check), and cleared on attach, exit
//! and end. It never ends anything by itself: when it fires, the owner reads every fact again
//! (child processes included) and the policy decides afresh; a fact that changed keeps the shell
//! and re-arms the timer for the new deadline. Nothing polls all leases or the process table.
//!
//! Timers are tokio sleeps, so tests drive them with `tokio::time::pause`.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use relay_protocol::PtyId;
use tokio::task::AbortHandle;

use super::policy::{decide, Facts, Rule, Verdict, RECHECK_BUSY};
use crate::runtime::LockExt;

/// How long after a policy end that could not be carried out (the journal could not record it)
/// it is tried again.
pub const RETRY_FAILED: Duration = Duration::from_secs(60);

/// What became of a policy end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolicyEnd {
    /// Signals went out (or the shell had just ended by itself).
    Started,
    /// A fact changed between the re-check and the end: decide again.
    Changed,
    /// It could not be carried out now (e.g. a full disk): try again after [`RETRY_FAILED`].
    Failed,
}

/// What the timers need from the daemon.
pub trait Owner: Clone + Send + Sync + 'static {
    /// The lease's facts now, `None` when it is unknown or ended. `read_children` asks for its
    /// shell's child processes (a `/proc` read); without it they are `Children::NotRead`.
    fn facts(&self, pty: &PtyId, read_children: bool) -> Option<Facts>;
    /// Ends the lease by `rule` if the facts that only events change (attached, protected,
    /// used, last input, policy) are still those in `seen`, atomically with those events.
    fn end_by_policy(&self, pty: &PtyId, rule: Rule, seen: &Facts) -> PolicyEnd;
    /// The clock the facts use (ms since the Unix epoch).
    fn now_ms(&self) -> u64;
    /// The host's "cleanup suggested" age.
    fn suggest_after(&self) -> Duration;
    /// The owner's timers.
    fn timers(&self) -> &Timers;
}

/// The armed timers, by PTY.
#[derive(Debug, Default)]
pub struct Timers {
    armed: Mutex<HashMap<PtyId, AbortHandle>>,
}

impl Timers {
    /// No timers.
    pub fn new() -> Self {
        Timers::default()
    }

    /// (Re-)arms `pty`'s timer from its facts now: at the deadline of the rule that could end it,
    /// or not at all when none could (attached, protected, no policy, used with idle expiry off).
    pub fn arm<O: Owner>(&self, owner: &O, pty: PtyId) {
        let Some(facts) = owner.facts(&pty, false) else {
            self.clear(&pty);
            return;
        };
        match decide(&facts, owner.suggest_after(), owner.now_ms()) {
            Verdict::Wait { at_ms, .. } => self.schedule(owner, pty, at_ms),
            _ => self.clear(&pty),
        }
    }

    /// Cancels `pty`'s timer, if any.
    pub fn clear(&self, pty: &PtyId) {
        if let Some(old) = self.lock().remove(pty) {
            old.abort();
        }
    }

    /// Whether `pty` has a timer armed.
    pub fn is_armed(&self, pty: &PtyId) -> bool {
        self.lock().contains_key(pty)
    }

    /// Number of armed timers.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no timer is armed.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<PtyId, AbortHandle>> {
        self.armed.lock_unpoisoned()
    }

    fn schedule<O: Owner>(&self, owner: &O, pty: PtyId, at_ms: u64) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::error!(%pty, "lifecycle timer not armed: no runtime (agent bug)");
            return;
        };
        // The deadline is fixed now, not when the task first runs.
        let delay = Duration::from_millis(at_ms.saturating_sub(owner.now_ms()));
        let deadline = tokio::time::Instant::now() + delay;
        let task_owner = owner.clone();
        let task = runtime.spawn(async move {
            tokio::time::sleep_until(deadline).await;
            fire(&task_owner, pty);
        });
        if let Some(old) = self.lock().insert(pty, task.abort_handle()) {
            old.abort();
        }
    }
}

/// A timer went off: read every fact again and let the policy decide.
fn fire<O: Owner>(owner: &O, pty: PtyId) {
    let timers = owner.timers();
    let Some(facts) = owner.facts(&pty, true) else {
        timers.lock().remove(&pty);
        return;
    };
    let now = owner.now_ms();
    match decide(&facts, owner.suggest_after(), now) {
        Verdict::End(rule) => {
            timers.lock().remove(&pty);
            // Anything can change here; the end re-checks the facts under the book lock.
            crate::pause::here("policy-end");
            match owner.end_by_policy(&pty, rule, &facts) {
                PolicyEnd::Started => {
                    tracing::info!(%pty, %rule, "lifecycle: ending by policy after re-verifying")
                }
                // Something changed between the read and the end: decide again from scratch.
                PolicyEnd::Changed => timers.arm(owner, pty),
                PolicyEnd::Failed => {
                    let at = now + RETRY_FAILED.as_millis() as u64;
                    timers.schedule(owner, pty, at);
                }
            }
        }
        Verdict::Busy(keep, rule) => {
            tracing::debug!(%pty, %rule, %keep, "lifecycle: due but kept; looking again later");
            timers.schedule(owner, pty, now + RECHECK_BUSY.as_millis() as u64);
        }
        Verdict::Wait { at_ms, .. } => timers.schedule(owner, pty, at_ms),
        Verdict::Keep(_) | Verdict::Suggest(_) => {
            timers.lock().remove(&pty);
        }
    }
}

#[cfg(test)]
mod tests;
