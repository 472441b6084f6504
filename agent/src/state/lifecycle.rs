//! The daemon's side of the lifecycle policy: gathering a lease's facts (in-memory ones under
//! the book lock, `/proc` and the terminal model outside it), the timers' owner, policy ends,
//! "end all eligible" re-verification, and the `Inspect` rows.

use std::time::Duration;

use relay_protocol::message::{EndOutcome, Inspected, LeaseRow, PolicyInfo, Tag};
use relay_protocol::{Binding, EndReason, LeaseState, PtyId};

use super::end::{gone_or_refused, Ending};
use super::State;
use crate::lease::{Lease, Phase};
use crate::lifecycle::policy::known_busy;
use crate::lifecycle::{decide, Children, Facts, Keep, Owner, PolicyEnd, Rule, Timers, Verdict};
use crate::pty::Pty;
use crate::sys::procfs;
use crate::{limits, now_ms};

/// A read of the process table, or why it failed.
type Procs = std::io::Result<Vec<(u32, procfs::Stat)>>;

impl State {
    /// (Re-)arms `pty`'s lifecycle timer from its facts now.
    pub(crate) fn arm(&self, pty: PtyId) {
        self.inner.timers.arm(self, pty);
    }

    /// The facts of a lease that only events change, read under the book lock.
    fn memory_facts(lease: &Lease, pty: Option<&Pty>) -> Facts {
        let (running, attached) = match lease.phase {
            Phase::Live { attached } => (true, attached),
            Phase::Superseded => (true, 0),
            Phase::Ended { .. } => (false, 0),
        };
        let last_input_ms = pty.and_then(Pty::last_input_ms);
        Facts {
            running: running && pty.is_some(),
            attached,
            superseded: lease.phase == Phase::Superseded,
            since_ms: lease.since_ms,
            used: lease.explicit_command || last_input_ms.is_some(),
            command: lease.explicit_command,
            last_input_ms,
            last_output_ms: pty.and_then(Pty::last_output_ms).or(lease.last_output_ms),
            protected: lease.protected,
            alternate_screen: None,
            children: Children::NotRead,
            policy: lease.policy,
        }
    }

    /// A lease's facts now. The terminal model and, with `procs` (a [`procfs::snapshot`],
    /// `Err` when `/proc` could not be read; `None` to skip), the work its shell holds are read
    /// after the book lock is released.
    fn facts_of(&self, pty_id: &PtyId, procs: Option<&Procs>) -> Option<Facts> {
        let pty = self.pty(pty_id);
        let (mut facts, pid, program) = {
            let book = self.book();
            let lease = book.get(pty_id)?;
            let program = (!lease.explicit_command)
                .then(|| lease.command.first().map(std::path::PathBuf::from))
                .flatten();
            (
                Self::memory_facts(lease, pty.as_deref()),
                lease.pid,
                program,
            )
        };
        if facts.running {
            facts.alternate_screen = pty
                .as_ref()
                .and_then(|p| p.screen())
                .map(|s| s.alternate_screen());
            if let Some(procs) = procs {
                facts.children = match (pid, procs) {
                    (Some(pid), Ok(all)) => {
                        let ticks = pty.as_ref().and_then(|p| p.start_ticks());
                        Children::Count(procfs::work_count(all, pid, ticks))
                    }
                    _ => Children::Unreadable,
                };
                // A login shell that `exec`ed a program (`exec ssh host`) now runs a command.
                if let (Some(pid), Some(program)) = (pid, program) {
                    facts.command |= procfs::runs_other_program(pid, &program) == Some(true);
                }
            }
        }
        Some(facts)
    }

    /// Whether the facts only events change are still those in `seen`.
    fn unchanged(lease: &Lease, pty: Option<&Pty>, seen: &Facts) -> bool {
        let now = Self::memory_facts(lease, pty);
        now.running
            && now.attached == seen.attached
            && now.protected == seen.protected
            && now.used == seen.used
            && now.last_input_ms == seen.last_input_ms
            && now.superseded == seen.superseded
            && now.since_ms == seen.since_ms
    }

    /// `End{when: Eligible}` for one target: re-verifies the policy now (children included) and
    /// ends it only if it is eligible and nothing changed in between.
    pub(super) fn begin_eligible_end(
        &self,
        binding: &Binding,
    ) -> Result<Option<Ending>, EndOutcome> {
        self.book().check_target(binding).map_err(gone_or_refused)?;
        let gone = EndOutcome::AlreadyGone { reason: None };
        let Some(facts) = self.facts_of(&binding.pty, Some(&procfs::snapshot())) else {
            return Err(gone);
        };
        let why = match decide(&facts, self.inner.config.policy.suggest_after, now_ms()) {
            Verdict::End(rule) => rule.to_string(),
            Verdict::Suggest(why) => why.to_string(),
            Verdict::Keep(Keep::Ended) => return Err(gone),
            Verdict::Keep(keep) | Verdict::Busy(keep, _) => {
                return Err(EndOutcome::Kept {
                    why: format!("checked again and kept: {}", keep),
                })
            }
            Verdict::Wait { at_ms, rule } => {
                return Err(EndOutcome::Kept {
                    why: format!(
                        "checked again and kept: not eligible yet ({rule} at {})",
                        crate::lifecycle::policy::human_ms(at_ms.saturating_sub(now_ms()))
                    ),
                })
            }
        };
        let detail = format!("ended as eligible by operator ({why})");
        let pty = self.pty(&binding.pty);
        self.begin_end(binding, EndReason::Killed, &detail, |lease| {
            if Self::unchanged(lease, pty.as_deref(), &facts) {
                Ok(())
            } else {
                Err(EndOutcome::Kept {
                    why: "checked again and kept: it changed while being ended".into(),
                })
            }
        })
    }

    /// `Inspect`: every lease with the policy's answer now, cut to fit `max_frame`.
    pub fn inspect(&self, max_frame: u32) -> Inspected {
        let now = now_ms();
        let infos = self.leases();
        let mut rows: Vec<LeaseRow> = Vec::with_capacity(infos.len());
        // One read of the process table for every lease, not one per lease.
        let procs = procfs::snapshot();
        for info in infos {
            // Only a detached shell's work matters to the policy: read it for those.
            let detached = matches!(info.state, LeaseState::Detached | LeaseState::Superseded);
            let facts = self.facts_of(&info.binding.pty, detached.then_some(&procs));
            let (tag, used, last_input_ms) = match &facts {
                Some(f) => (self.tag(f, now), f.used, f.last_input_ms),
                None => (Tag::None, false, None),
            };
            let (detail, policy) = {
                let book = self.book();
                let lease = book.get(&info.binding.pty);
                (
                    lease.and_then(|l| l.detail.clone()),
                    lease.and_then(|l| l.policy).map(|p| p.to_string()),
                )
            };
            rows.push(LeaseRow {
                info,
                tag,
                detail,
                used,
                last_input_ms,
                policy,
            });
        }
        let p = &self.inner.config.policy;
        let (leases, left_out) = limits::fit_rows(rows, max_frame);
        Inspected {
            policy: PolicyInfo {
                unused_grace_ms: p.unused_grace.map(|d| d.as_millis() as u64),
                idle_expiry_ms: p.idle_expiry.map(|d| d.as_millis() as u64),
                suggest_after_ms: p.suggest_after.as_millis() as u64,
            },
            rss_bytes: procfs::own_rss_bytes(),
            leases,
            left_out: left_out as u32,
        }
    }

    /// The tag `relayctl leases` shows for facts read at `now`.
    fn tag(&self, f: &Facts, now: u64) -> Tag {
        if f.protected && f.running {
            return Tag::Protected;
        }
        let busy_now = known_busy(f);
        match decide(f, self.inner.config.policy.suggest_after, now) {
            // Holding work now: it will be kept at its deadline unless that changes; say so
            // rather than count down.
            Verdict::Wait { .. } if busy_now.is_some() => Tag::Kept {
                why: busy_now.map(|k| k.to_string()).unwrap_or_default(),
            },
            Verdict::Wait { at_ms, rule } => Tag::CleanupAt {
                at_ms,
                why: rule.to_string(),
            },
            Verdict::End(rule) => Tag::CleanupAt {
                at_ms: now,
                why: rule.to_string(),
            },
            Verdict::Suggest(why) => Tag::Suggested {
                why: why.to_string(),
            },
            Verdict::Busy(keep, _) => Tag::Kept {
                why: keep.to_string(),
            },
            Verdict::Keep(keep) if keep.is_busy() => Tag::Kept {
                why: keep.to_string(),
            },
            Verdict::Keep(_) => Tag::None,
        }
    }
}

impl Owner for State {
    fn facts(&self, pty: &PtyId, read_children: bool) -> Option<Facts> {
        let procs = read_children.then(procfs::snapshot);
        self.facts_of(pty, procs.as_ref())
    }

    fn end_by_policy(&self, pty_id: &PtyId, rule: Rule, seen: &Facts) -> PolicyEnd {
        let Some(binding) = self.book().get(pty_id).map(|l| l.binding.clone()) else {
            return PolicyEnd::Changed;
        };
        let pty = self.pty(pty_id);
        let detail = format!("policy: {rule}");
        let begun = self.begin_end(&binding, EndReason::Expired, &detail, |lease| {
            if Self::unchanged(lease, pty.as_deref(), seen) {
                Ok(())
            } else {
                Err(EndOutcome::Kept {
                    why: "changed".into(),
                })
            }
        });
        match begun {
            Ok(Some(ending)) => {
                let state = self.clone();
                tokio::spawn(async move { state.finish_end(ending).await });
                PolicyEnd::Started
            }
            Ok(None) | Err(EndOutcome::AlreadyGone { .. }) => PolicyEnd::Started,
            Err(EndOutcome::Refused { why }) => {
                tracing::error!(%binding, "lifecycle: could not end by policy (tried again later): {why}");
                PolicyEnd::Failed
            }
            Err(_) => PolicyEnd::Changed,
        }
    }

    fn now_ms(&self) -> u64 {
        now_ms()
    }

    fn suggest_after(&self) -> Duration {
        self.inner.config.policy.suggest_after
    }

    fn timers(&self) -> &Timers {
        &self.inner.timers
    }
}
