//! Bodies of the lifecycle operations (protocol 1.4, capability `lifecycle`): a connection's
//! cleanup policy, the per-lease lifecycle view, exact ends with an honest per-target outcome,
//! supersede and pruning of ended history. See `docs/protocol.md` §6b.

use serde::{Deserialize, Serialize};

use crate::types::{Binding, EndReason, ExitStatus, LeaseInfo, PtyId, SpawnSpec};

/// The cleanup policy for the PTYs this connection creates from now on. Sent once, right after
/// `Welcome`, by a connector that states a policy; PTYs created by a connection that stated none
/// are never ended by a timer.
///
/// `spec` is `;`-separated `condition=value` pairs, e.g. `unused=10m;idle=off`. Conditions:
/// `unused` (grace after which a detached PTY that never received input is ended) and `idle`
/// (idle expiry of a used detached PTY). Values: `off`, `default` (the agent's own setting), or a
/// duration `<n>s|m|h|d` from 1 s to 90 days. An empty spec states the agent's defaults. An
/// unknown condition or a value out of bounds is refused with `BadRequest` (never read as
/// unconditional) and nothing changes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SetPolicy {
    /// The policy text.
    pub spec: String,
}

/// Ask for every lease with its lifecycle view, the policy in force and the agent's memory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Inspect {}

/// The agent's cleanup settings (its configuration; a connection's stated policy applies to the
/// PTYs it creates and is shown per lease).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolicyInfo {
    /// Grace after which a detached, never used PTY is ended, in ms; `None` = off.
    pub unused_grace_ms: Option<u64>,
    /// Idle time after which a used detached PTY is ended, in ms; `None` = off (the default).
    pub idle_expiry_ms: Option<u64>,
    /// Idle time after which a used detached PTY is tagged "cleanup suggested", in ms.
    pub suggest_after_ms: u64,
}

/// What the lifecycle policy says about one lease now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Tag {
    /// Nothing to say (attached and not protected, or ended).
    None,
    /// Protected: never ended by the policy or `gc`.
    Protected,
    /// Will be ended at `at_ms` (ms since the Unix epoch) after re-verifying every condition then;
    /// `why` names the rule (`never used, detached 10m`).
    CleanupAt {
        /// Deadline, ms since the Unix epoch.
        at_ms: u64,
        /// The rule.
        why: String,
    },
    /// Eligible for `gc` (end all eligible, with confirmation); never ended automatically.
    Suggested {
        /// Why (`used, idle 1d 2h`).
        why: String,
    },
    /// Kept by the policy (`has children`, `full-screen program`, `no policy`).
    Kept {
        /// Why.
        why: String,
    },
}

/// One lease with its lifecycle facts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseRow {
    /// What `ListLeases` reports.
    pub info: LeaseInfo,
    /// The policy's answer now.
    pub tag: Tag,
    /// Detail of the end (`policy: never used, detached 10m`, `killed by operator; 1 process
    /// in its session ignored SIGHUP and got SIGKILL`), when ended.
    pub detail: Option<String>,
    /// The PTY received input, or was started with an explicit command.
    pub used: bool,
    /// Last input time, ms since the Unix epoch.
    pub last_input_ms: Option<u64>,
    /// The policy the creating connection stated, resolved (`unused=10m;idle=off`); `None` when
    /// it stated none (never ended by a timer).
    pub policy: Option<String>,
}

/// Answer to [`Inspect`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Inspected {
    /// The agent's settings.
    pub policy: PolicyInfo,
    /// Resident memory of the daemon, in bytes (0 when unknown).
    pub rss_bytes: u64,
    /// Leases sorted by pane key then PTY id; cut to fit the frame (oldest ended ones first).
    pub leases: Vec<LeaseRow>,
    /// Leases left out to fit the frame.
    pub left_out: u32,
}

/// Which of the named targets may be ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum EndWhen {
    /// Every target (an explicit, confirmed kill), protected ones included.
    Always,
    /// Every target except protected ones (`kill --all`).
    Unprotected,
    /// Only targets the policy finds eligible when re-verified now (`gc`); others are kept with
    /// the reason.
    Eligible,
}

/// End exactly these leases, each fenced on its binding (rule C): SIGHUP to the process group,
/// SIGKILL after the kill grace (3 s) if the shell is still the agent's own unreaped child, then
/// SIGKILL to whatever is left in the PTY's session. The reply comes when every target ended or
/// could not be verified (bounded by about twice the grace).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct End {
    /// The exact targets (a snapshot the caller took; nothing else is touched).
    pub targets: Vec<Binding>,
    /// Which of them may be ended.
    pub when: EndWhen,
}

/// What became of one target of [`End`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum EndOutcome {
    /// Ended by this request.
    Ended {
        /// Exit status.
        exit: Option<ExitStatus>,
        /// What was done and left (`SIGHUP`, `1 process left in its session got SIGKILL`).
        detail: String,
    },
    /// Had already ended (or was forgotten) before this request.
    AlreadyGone {
        /// Why it had ended, when known.
        reason: Option<EndReason>,
    },
    /// Not ended: the binding is not the pane's (mismatch), it is protected, or the journal
    /// could not record the end.
    Refused {
        /// Why, and what to do.
        why: String,
    },
    /// Not ended: re-verified and kept (`checked again and kept: now has children`).
    Kept {
        /// Why.
        why: String,
    },
    /// Signals were sent but the end could not be confirmed in time.
    Unverified {
        /// What is known.
        why: String,
    },
}

/// One target's outcome.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndResult {
    /// The target as requested.
    pub binding: Binding,
    /// What became of it.
    pub outcome: EndOutcome,
}

/// Answer to [`End`]: one result per target, in request order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndReport {
    /// Results.
    pub results: Vec<EndResult>,
}

/// Replace a pane's shell (the app's "restart terminal"; rule D): the old lease becomes
/// `superseded` (its process keeps running; losing a lease is no proof it died, and a superseded
/// detached shell is eligible for cleanup under the same re-verification) and a new PTY is
/// spawned for the pane. Answered with `Created` (`existed: false`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Replace {
    /// The pane's live binding now (rule C; `Mismatch` otherwise).
    pub old: Binding,
    /// What to run.
    pub spec: SpawnSpec,
}

/// Forget ended leases (prune history). Live and superseded leases are never forgotten.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Forget {
    /// The PTYs to forget; empty = every ended lease.
    pub ptys: Vec<PtyId>,
}

/// Answer to [`Forget`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Forgot {
    /// Ended leases forgotten.
    pub forgotten: u32,
    /// Named PTYs that are not ended (kept).
    pub not_ended: Vec<PtyId>,
    /// Named PTYs this agent has no record of.
    pub unknown: Vec<PtyId>,
}
