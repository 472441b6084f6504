//! Operator actions on a host's shells, for an app's buttons and for `relayctl`: end an exact
//! snapshot of shells with an honest summary ([`Session::kill_all`]), and "end all eligible"
//! ([`Session::gc_plan`], then [`Session::gc`]). Protection is [`Session::protect`].
//!
//! Both follow the same discipline (DESIGN.md §5, "Kill-all"): the caller takes the snapshot of
//! targets once, before anything is ended; exactly those bindings are named, each fenced (rule
//! C); nothing created after the snapshot is touched and nothing is swept by listing again; and
//! the answer says, per target, what became of it. An outcome that is not known is reported as
//! unverified, never as ended (rule A).
//!
//! The requests underneath are the lifecycle ops of protocol 1.4 (`docs/protocol.md` §6b); an
//! app on a [`Host`](crate::Host) reaches them through [`Host::session`](crate::Host::session).

use std::collections::{HashMap, HashSet};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use relay_protocol::message::{EndOutcome, EndResult, EndWhen, LeaseRow, Tag};
use relay_protocol::{Binding, Capability, ErrorReply, LeaseState};

use crate::{Error, Session};

/// Targets per `End` request: a pane key is at most 3 × 256 bytes, so 256 bindings stay far
/// below the 1 MiB frame.
const END_BATCH: usize = 256;

/// How long an agent without `lifecycle` is watched for the ends of the PTYs it was sent `Kill`
/// for: its kill grace (3 s) twice, plus a margin.
const KILL_CONFIRM_WITHIN: Duration = Duration::from_secs(7);

/// Pause between two lease listings while confirming ends on an agent without `lifecycle`.
const KILL_CONFIRM_POLL: Duration = Duration::from_millis(250);

/// What became of each target of one exact end ([`Session::kill_all`], [`Session::gc`]).
///
/// `results` has one entry per distinct requested target, in request order. An outcome counts
/// as done when it is [`EndOutcome::Ended`] or [`EndOutcome::AlreadyGone`]; the others were
/// requested and not done, each with its reason ([`KillSummary::not_done`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KillSummary {
    /// One result per target, in request order.
    pub results: Vec<EndResult>,
}

impl KillSummary {
    /// Number of targets.
    pub fn targets(&self) -> usize {
        self.results.len()
    }

    /// Targets this request ended.
    pub fn ended(&self) -> usize {
        self.count(|o| matches!(o, EndOutcome::Ended { .. }))
    }

    /// Targets that had already ended (or been forgotten) before the request: nothing to do.
    pub fn already_gone(&self) -> usize {
        self.count(|o| matches!(o, EndOutcome::AlreadyGone { .. }))
    }

    /// Targets the agent refused to end (stale binding, protected, journal failure).
    pub fn refused(&self) -> usize {
        self.count(|o| matches!(o, EndOutcome::Refused { .. }))
    }

    /// Targets re-verified and kept (`gc`: the shell changed since the listing).
    pub fn kept(&self) -> usize {
        self.count(|o| matches!(o, EndOutcome::Kept { .. }))
    }

    /// Targets whose end could not be confirmed (signals sent, or the outcome is unknown).
    pub fn unverified(&self) -> usize {
        self.count(|o| matches!(o, EndOutcome::Unverified { .. }))
    }

    /// Whether everything requested was done: every target ended now or had already ended.
    pub fn complete(&self) -> bool {
        self.not_done().next().is_none()
    }

    /// The targets that were not ended, each with the agent's reason (refused, kept,
    /// unverified), in request order.
    pub fn not_done(&self) -> impl Iterator<Item = (&Binding, &str)> {
        self.results.iter().filter_map(|r| match &r.outcome {
            EndOutcome::Refused { why }
            | EndOutcome::Kept { why }
            | EndOutcome::Unverified { why } => Some((&r.binding, why.as_str())),
            EndOutcome::Ended { .. } | EndOutcome::AlreadyGone { .. } => None,
        })
    }

    fn count(&self, pick: impl Fn(&EndOutcome) -> bool) -> usize {
        self.results.iter().filter(|r| pick(&r.outcome)).count()
    }
}

/// One shell "end all eligible" would end, with the policy's reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GcCandidate {
    /// The lease as listed (binding, state, pid, command, tag, ...).
    pub row: LeaseRow,
    /// Why it is eligible: `cleanup due: never used, detached 10m` or `cleanup suggested: used,
    /// idle 1d 2h`.
    pub why: String,
}

/// The shells "end all eligible" would end, picked from one listing: exactly the live,
/// unprotected leases whose tag is `CleanupAt` with a deadline that has passed, or `Suggested`.
/// Show it, confirm it, then pass it to [`Session::gc`], which names exactly these bindings.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GcPlan {
    /// The eligible shells, in listing order (pane key, then PTY id).
    pub candidates: Vec<GcCandidate>,
}

impl GcPlan {
    /// Picks the eligible rows of one listing, judging `CleanupAt` deadlines against `now_ms`
    /// (ms since the Unix epoch, this machine's clock; the agent re-verifies each target with its
    /// own when ending). No IO.
    pub fn from_rows(rows: &[LeaseRow], now_ms: u64) -> GcPlan {
        let candidates = rows
            .iter()
            .filter(|r| !r.info.protected && r.info.state != LeaseState::Ended)
            .filter_map(|r| {
                let why = match &r.tag {
                    Tag::CleanupAt { at_ms, why } if *at_ms <= now_ms => {
                        format!("cleanup due: {why}")
                    }
                    Tag::Suggested { why } => format!("cleanup suggested: {why}"),
                    _ => return None,
                };
                Some(GcCandidate {
                    row: r.clone(),
                    why,
                })
            })
            .collect();
        GcPlan { candidates }
    }

    /// The bindings to name, in order.
    pub fn targets(&self) -> Vec<Binding> {
        self.candidates
            .iter()
            .map(|c| c.row.info.binding.clone())
            .collect()
    }

    /// Whether nothing is eligible.
    pub fn is_empty(&self) -> bool {
        self.candidates.is_empty()
    }
}

impl Session {
    /// Ends exactly `targets` — a snapshot the caller took before this call — and says what
    /// became of each. `when` is [`EndWhen::Always`] for shells an operator named and confirmed
    /// (protected ones included) and [`EndWhen::Unprotected`] for "kill all" (protected ones are
    /// refused); [`EndWhen::Eligible`] is what [`Session::gc`] sends. Duplicates are named once;
    /// large snapshots go out in several requests, still naming only these bindings.
    ///
    /// A connection lost or a timeout while a request is out leaves its targets
    /// [`EndOutcome::Unverified`] (their fate is unknown; list again). An agent without the
    /// `lifecycle` capability gets one exact `Kill` per target for [`EndWhen::Always`]; its lease
    /// list is then watched for up to 7 s to confirm each end.
    ///
    /// # Errors
    /// [`Error::Unsupported`] when the agent lacks `lifecycle` and `when` is not
    /// [`EndWhen::Always`] (nothing is sent).
    pub async fn kill_all(&self, targets: &[Binding], when: EndWhen) -> Result<KillSummary, Error> {
        let targets = distinct(targets);
        if when == EndWhen::Always && !self.welcome().has(Capability::LIFECYCLE) {
            return Ok(KillSummary {
                results: self.kill_each(&targets).await,
            });
        }
        self.end_in_batches(&targets, when).await
    }

    /// Lists the leases once and picks the shells "end all eligible" would end (see
    /// [`GcPlan::from_rows`]). Ends nothing: this is the dry run.
    ///
    /// # Errors
    /// As [`Session::inspect`] ([`Error::Unsupported`] without the `lifecycle` capability).
    pub async fn gc_plan(&self) -> Result<GcPlan, Error> {
        let inspected = self.inspect().await?;
        Ok(GcPlan::from_rows(&inspected.leases, now_ms()))
    }

    /// Ends the shells of `plan` that the agent, re-verifying each now, still finds eligible;
    /// the others come back [`EndOutcome::Kept`] with the reason (`checked again and kept: now
    /// has children`). Names exactly the plan's bindings; an empty plan sends nothing.
    ///
    /// # Errors
    /// [`Error::Unsupported`] without the `lifecycle` capability (nothing is sent); a lost
    /// connection or a timeout leaves targets unverified (see [`Session::kill_all`]).
    pub async fn gc(&self, plan: &GcPlan) -> Result<KillSummary, Error> {
        self.end_in_batches(&plan.targets(), EndWhen::Eligible)
            .await
    }

    async fn end_in_batches(
        &self,
        targets: &[Binding],
        when: EndWhen,
    ) -> Result<KillSummary, Error> {
        self.require(Capability::LIFECYCLE, "ending shells with a report")?;
        let mut results = Vec::with_capacity(targets.len());
        let mut failure: Option<String> = None;
        for batch in targets.chunks(END_BATCH) {
            if let Some(why) = &failure {
                results.extend(unknown(batch, why));
                continue;
            }
            match self.end(batch, when).await {
                Ok(report) => results.extend(reconcile(batch, report)),
                Err(e) => {
                    let why = format!("outcome unknown: {}", e.report());
                    results.extend(unknown(batch, &why));
                    failure = Some(why);
                }
            }
        }
        Ok(KillSummary { results })
    }

    /// `Kill` per target for an agent without `lifecycle`, then the lease list until each end
    /// is seen (bounded).
    async fn kill_each(&self, targets: &[Binding]) -> Vec<EndResult> {
        let replies = futures_util::future::join_all(targets.iter().map(|b| self.kill(b))).await;
        let mut outcomes: Vec<Option<EndOutcome>> = replies.into_iter().map(kill_outcome).collect();
        let deadline = tokio::time::Instant::now() + KILL_CONFIRM_WITHIN;
        let mut last_error = None;
        while outcomes.iter().any(Option::is_none) && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(KILL_CONFIRM_POLL).await;
            let leases = match self.list_leases().await {
                Ok(leases) => leases,
                Err(e) => {
                    last_error = Some(e.report());
                    break;
                }
            };
            for (outcome, target) in outcomes.iter_mut().zip(targets) {
                let ended = leases
                    .iter()
                    .find(|l| l.binding == *target && l.state == LeaseState::Ended);
                if let (None, Some(lease)) = (&outcome, ended) {
                    *outcome = Some(EndOutcome::Ended {
                        exit: lease.exit.clone(),
                        detail: "SIGHUP (seen ended in the agent's lease list)".into(),
                    });
                }
            }
        }
        let why = match last_error {
            Some(e) => format!("SIGHUP sent; its end could not be checked: {e}"),
            None => format!(
                "SIGHUP sent; not seen ended within {} s (agent {} cannot report ends: upgrade \
                 it)",
                KILL_CONFIRM_WITHIN.as_secs(),
                self.welcome().agent_version
            ),
        };
        targets
            .iter()
            .zip(outcomes)
            .map(|(binding, outcome)| EndResult {
                binding: binding.clone(),
                outcome: outcome.unwrap_or_else(|| EndOutcome::Unverified { why: why.clone() }),
            })
            .collect()
    }
}

/// What the answer to one `Kill` says; `None` when the signal was sent and the end is still to
/// be seen.
fn kill_outcome(reply: Result<(), Error>) -> Option<EndOutcome> {
    let e = match reply {
        Ok(()) => return None,
        Err(e) => e,
    };
    Some(match e.agent_reply() {
        Some(ErrorReply::Ended { reason, .. }) => EndOutcome::AlreadyGone {
            reason: Some(reason.clone()),
        },
        Some(ErrorReply::Mismatch { .. } | ErrorReply::NotFound { .. }) => {
            EndOutcome::Refused { why: e.to_string() }
        }
        _ => EndOutcome::Unverified {
            why: format!("outcome unknown: {}", e.report()),
        },
    })
}

/// The targets in order, each once.
fn distinct(targets: &[Binding]) -> Vec<Binding> {
    let mut seen = HashSet::new();
    targets
        .iter()
        .filter(|b| seen.insert(*b))
        .cloned()
        .collect()
}

/// One result per target of `batch`, in its order, from the agent's report; a target the report
/// does not mention is unverified (never counted as ended).
fn reconcile(batch: &[Binding], report: Vec<EndResult>) -> Vec<EndResult> {
    let mut by_binding: HashMap<Binding, EndOutcome> = HashMap::new();
    for r in report {
        by_binding.entry(r.binding).or_insert(r.outcome);
    }
    batch
        .iter()
        .map(|b| EndResult {
            binding: b.clone(),
            outcome: by_binding
                .remove(b)
                .unwrap_or_else(|| EndOutcome::Unverified {
                    why: "the agent's report does not mention it".into(),
                }),
        })
        .collect()
}

fn unknown<'a>(batch: &'a [Binding], why: &'a str) -> impl Iterator<Item = EndResult> + 'a {
    batch.iter().map(move |b| EndResult {
        binding: b.clone(),
        outcome: EndOutcome::Unverified { why: why.into() },
    })
}

/// Milliseconds since the Unix epoch on this machine.
fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[cfg(test)]
mod tests;
