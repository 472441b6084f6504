//! How PTYs end: the process's own exit, kills and `End` requests with their honest outcome,
//! and daemon shutdown.
//!
//! Every requested end is journaled (`Ending`, with its reason) *before* the first signal, so a
//! kill never answers "killed" and then loses its reason: when the journal cannot be written
//! (disk full) nothing is signalled and the request is refused naming the journal problem.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use nix::sys::signal::Signal;
use relay_protocol::message::{End, EndOutcome, EndReport, EndResult, EndWhen, Kill};
use relay_protocol::{Binding, EndReason, ErrorReply, ExitStatus, PtyId};

use super::State;
use crate::lease::journal::Record;
use crate::lease::Lease;
use crate::now_ms;
use crate::pty::kill::KillWatch;
use crate::pty::Pty;
use crate::runtime::LockExt;

/// Beyond the kill grace, how long an end may take to be confirmed (SIGKILL, reaping, the
/// session sweep) before it is reported unverified.
const CONFIRM_SLACK: Duration = Duration::from_secs(3);

/// An end whose signals went out.
pub(super) struct Ending {
    pty: Arc<Pty>,
    outcome: KillWatch,
    detail: String,
}

impl State {
    /// Called by a PTY's waiter once it ended: records the end, then tells subscribers. While the
    /// daemon stops, the end reason is `AgentRestarted` (what the next incarnation reports), with
    /// the exit status left out of the journal (as for any restart) but output figures kept.
    pub(crate) fn on_exit(&self, pty_id: PtyId, status: ExitStatus) {
        let stopping = self.inner.stopping.load(Ordering::Acquire);
        let mut journal = self.journal();
        let Some((_, pty)) = self.inner.ptys.remove(&pty_id) else {
            return;
        };
        let (bytes, last) = (pty.end_offset(), pty.last_output_ms());
        let default = if stopping {
            EndReason::AgentRestarted
        } else {
            EndReason::Exited
        };
        let (reason, detail, away) = {
            let mut book = self.book();
            // No client held it when it ended: whoever comes back gets the rest (`tails`).
            let away = book.get(&pty_id).is_some_and(|l| l.info().attached == 0);
            book.set_output(&pty_id, bytes, last);
            match book.end(&pty_id, Some(status.clone()), default.clone(), now_ms()) {
                Some(l) => (l.info().reason.unwrap_or(default), l.detail.clone(), away),
                None => (default, None, away),
            }
        };
        let exit = (reason != EndReason::AgentRestarted).then(|| status.clone());
        let record = Record::Ended {
            pty: pty_id,
            exit,
            reason: reason.clone(),
            bytes_out: bytes,
            last_output_ms: last,
            at_ms: now_ms(),
            detail,
        };
        Self::append_or_log(&mut journal, &record);
        self.compact_if_needed(&mut journal);
        drop(journal);
        self.inner.timers.clear(&pty_id);
        tracing::info!(binding = %pty.binding(), %status, %reason, "PTY ended");
        pty.publish_exit(status, reason);
        if away && !stopping {
            self.inner.tails.lock_unpoisoned().keep(pty);
        }
    }

    /// `Kill`: ends the exact binding (live or superseded) with reason `Killed` (see
    /// [`State::end`] for what an end does). Answers once the signals went out; what the end did
    /// is recorded on the lease when known.
    ///
    /// # Errors
    /// Fencing errors; `Internal` naming the journal problem when the end cannot be recorded
    /// (nothing was signalled then).
    pub fn kill(&self, req: Kill) -> Result<(), ErrorReply> {
        self.book().check_target(&req.binding)?;
        let begun = self.begin_end(
            &req.binding,
            EndReason::Killed,
            "killed by operator",
            |_| Ok(()),
        );
        match begun {
            Ok(Some(ending)) => {
                let state = self.clone();
                tokio::spawn(async move { state.finish_end(ending).await });
                Ok(())
            }
            Ok(None) | Err(EndOutcome::AlreadyGone { .. }) => Ok(()),
            Err(outcome) => Err(ErrorReply::Internal {
                message: format!("not killed: {}", describe_refusal(&outcome)),
            }),
        }
    }

    /// `End`: ends exactly the named targets, each fenced on its binding: SIGHUP to the process
    /// group, SIGKILL after the kill grace only while the shell is still the agent's own
    /// unreaped child, then SIGKILL to what is left in the PTY's session. Nothing but the targets
    /// is touched (no list-and-sweep). With [`EndWhen::Eligible`] each target is re-verified
    /// against the policy now and kept if it changed. Returns one result per target, in order,
    /// once each end is confirmed or could not be (bounded by about the grace + 3 s).
    pub async fn end(&self, req: End) -> EndReport {
        let mut begun: Vec<(Binding, Result<Option<Ending>, EndOutcome>)> = Vec::new();
        for binding in req.targets {
            let outcome = self.begin_target(&binding, req.when);
            begun.push((binding, outcome));
        }
        let mut results = Vec::with_capacity(begun.len());
        for (binding, begun) in begun {
            let outcome = match begun {
                Ok(Some(ending)) => self.finish_end(ending).await,
                Ok(None) => EndOutcome::AlreadyGone { reason: None },
                Err(outcome) => outcome,
            };
            results.push(EndResult { binding, outcome });
        }
        EndReport { results }
    }

    /// Starts ending one `End` target.
    fn begin_target(&self, binding: &Binding, when: EndWhen) -> Result<Option<Ending>, EndOutcome> {
        match when {
            EndWhen::Always => {
                self.begin_end(binding, EndReason::Killed, "killed by operator", |_| Ok(()))
            }
            EndWhen::Unprotected => {
                self.begin_end(binding, EndReason::Killed, "killed by operator", |l| {
                    if l.protected {
                        Err(EndOutcome::Refused {
                        why: "protected; end it by its id (relayctl kill ID) or unprotect it first"
                            .into(),
                    })
                    } else {
                        Ok(())
                    }
                })
            }
            EndWhen::Eligible => self.begin_eligible_end(binding),
        }
    }

    /// Journals the requested end, then — if the lease is still exactly `binding` (live or
    /// superseded) and `check` accepts it, in one book section — marks it and sends SIGHUP.
    /// `Ok(None)` when the shell had already been reaped (nothing signalled).
    pub(super) fn begin_end(
        &self,
        binding: &Binding,
        reason: EndReason,
        detail: &str,
        check: impl FnOnce(&Lease) -> Result<(), EndOutcome>,
    ) -> Result<Option<Ending>, EndOutcome> {
        let mut journal = self.journal();
        // Fenced before anything is written; checked again below, atomically with the signal.
        self.book().check_target(binding).map_err(gone_or_refused)?;
        let pty_id = binding.pty;
        journal
            .append(&Record::Ending {
                pty: pty_id,
                reason: reason.clone(),
                detail: detail.to_string(),
            })
            .map_err(|e| EndOutcome::Refused {
                why: format!("the end could not be recorded, so nothing was signalled: {e}"),
            })?;
        let started = {
            let mut book = self.book();
            let checked = book
                .check_target(binding)
                .map_err(gone_or_refused)
                .and_then(check);
            checked.map(|()| {
                let pty = self.pty(&pty_id);
                match pty
                    .as_ref()
                    .and_then(|p| p.kill(self.inner.config.kill_grace))
                {
                    Some(outcome) => {
                        book.mark_ending(&pty_id, reason.clone(), detail.to_string());
                        Some((pty.expect("signalled"), outcome))
                    }
                    None => None,
                }
            })
        };
        if !matches!(started, Ok(Some(_))) {
            State::append_or_log(&mut journal, &Record::EndCancelled { pty: pty_id });
        }
        drop(journal);
        self.inner.timers.clear(&pty_id);
        let started = started?;
        Ok(started.map(|(pty, outcome)| {
            tracing::info!(binding = %binding, %reason, detail, "ending: SIGHUP sent");
            Ending {
                pty,
                outcome,
                detail: detail.to_string(),
            }
        }))
    }

    /// Waits until an end is confirmed (the shell reaped, its session swept), records what it
    /// did on the lease, and says so.
    pub(super) async fn finish_end(&self, ending: Ending) -> EndOutcome {
        let grace = self.inner.config.kill_grace;
        let limit = grace + CONFIRM_SLACK;
        let mut outcome = ending.outcome;
        let outcome = tokio::time::timeout(limit, outcome.wait_for(|o| o.is_some()))
            .await
            .ok()
            .and_then(|r| r.ok().and_then(|o| *o));
        let mut watch = ending.pty.watch();
        let exit = tokio::time::timeout(CONFIRM_SLACK, watch.wait_for(|p| p.exit.is_some()))
            .await
            .ok()
            .and_then(|r| r.ok())
            .and_then(|p| p.exit.clone());
        let pty_id = ending.pty.binding().pty;
        let done = match (outcome, &exit) {
            (Some(done), Some(_)) => done,
            _ => {
                let why = format!(
                    "signals sent, but the end was not confirmed within {}s (pid {}); check \
                     `relayctl leases --all` later",
                    limit.as_secs(),
                    ending.pty.pid()
                );
                tracing::warn!(binding = %ending.pty.binding(), "{why}");
                return EndOutcome::Unverified { why };
            }
        };
        let detail = format!("{}; {}", ending.detail, done.describe(grace));
        let mut journal = self.journal();
        State::append_or_log(
            &mut journal,
            &Record::Detail {
                pty: pty_id,
                detail: detail.clone(),
            },
        );
        {
            let mut book = self.book();
            book.set_detail(&pty_id, detail.clone());
            book.confirm_end(&pty_id);
        }
        drop(journal);
        if done.left.is_some_and(|n| n > 0) {
            // The shell ended, but processes of its session would not die: say so.
            return EndOutcome::Unverified { why: detail };
        }
        EndOutcome::Ended {
            exit: exit.map(|e| e.status),
            detail,
        }
    }

    /// Daemon shutdown: ends every PTY (SIGHUP to each process group, SIGKILL to those still
    /// unreaped after `grace`, then what is left in their sessions; waits at most about twice
    /// `grace`), recording each end with reason `AgentRestarted` and its output figures, then
    /// flushes and seals the journal. A PTY that does not end in time stays unended in the
    /// journal; the next incarnation ends it.
    pub async fn shutdown(&self, grace: Duration) {
        self.inner.stopping.store(true, Ordering::Release);
        let ptys: Vec<Arc<Pty>> = self
            .inner
            .ptys
            .iter()
            .map(|p| Arc::clone(p.value()))
            .collect();
        if !ptys.is_empty() {
            tracing::info!(count = ptys.len(), "ending PTYs because the daemon stops");
            let outcomes: Vec<_> = ptys.iter().filter_map(|p| p.kill(grace)).collect();
            if !wait_all_ended(&ptys, grace).await {
                for pty in &ptys {
                    if pty.signal_group_if_ours(Signal::SIGKILL) {
                        tracing::warn!(binding = %pty.binding(), "PTY ignored SIGHUP; sent SIGKILL");
                    }
                }
                wait_all_ended(&ptys, grace).await;
            }
            // The kill threads sweep the sessions at the grace; wait for them (bounded).
            let sweeps = futures_util::future::join_all(
                outcomes
                    .into_iter()
                    .map(|mut o| async move { o.wait_for(|o| o.is_some()).await.is_ok() }),
            );
            let _ = tokio::time::timeout(grace + CONFIRM_SLACK, sweeps).await;
        }
        if let Err(e) = self.journal().seal() {
            tracing::error!("could not flush the lease journal: {e}");
        }
    }
}

/// A fencing error as an `End` outcome: an ended (or forgotten) lease is already gone; anything
/// else (mismatch, unknown pane) is refused with the error's own words.
pub(super) fn gone_or_refused(e: ErrorReply) -> EndOutcome {
    match e {
        ErrorReply::Ended { reason, .. } => EndOutcome::AlreadyGone {
            reason: Some(reason),
        },
        other => EndOutcome::Refused {
            why: other.to_string(),
        },
    }
}

fn describe_refusal(outcome: &EndOutcome) -> String {
    match outcome {
        EndOutcome::Refused { why } | EndOutcome::Kept { why } | EndOutcome::Unverified { why } => {
            why.clone()
        }
        other => format!("{other:?}"),
    }
}

/// Waits until every PTY announced its exit, at most `limit`. Returns whether all did.
async fn wait_all_ended(ptys: &[Arc<Pty>], limit: Duration) -> bool {
    let all = async {
        for pty in ptys {
            let mut rx = pty.watch();
            let _ = rx.wait_for(|p| p.exit.is_some()).await;
        }
    };
    tokio::time::timeout(limit, all).await.is_ok()
}
