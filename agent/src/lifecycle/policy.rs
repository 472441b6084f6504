//! The lifecycle policy as one pure function: facts the agent observed about a lease, plus the
//! policy it was created under, decide whether the policy may end it, when, or why not
//! (DESIGN §4; the reasoning comes from the session-lifecycle design in `shared/reference/002`).
//!
//! Sans-IO: no clock, no `/proc`; callers pass `now_ms` and facts they read. Unknown facts
//! (children that could not be read, a screen model that is off) always keep the shell.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Default grace before a detached, never used PTY is ended (10 min).
pub const DEFAULT_UNUSED_GRACE: Duration = Duration::from_secs(10 * 60);
/// Default idle age after which a used detached PTY is tagged "cleanup suggested" (1 day).
pub const DEFAULT_SUGGEST_AFTER: Duration = Duration::from_secs(24 * 60 * 60);
/// Shortest duration a policy may state (1 s).
pub const MIN_DURATION: Duration = Duration::from_secs(1);
/// Longest duration a policy may state (90 days).
pub const MAX_DURATION: Duration = Duration::from_secs(90 * 24 * 60 * 60);
/// How often a lease kept for holding work (children, a full-screen program) is looked at again
/// while its rule would otherwise be due (1 h).
pub const RECHECK_BUSY: Duration = Duration::from_secs(60 * 60);

/// The agent's own cleanup settings (env `RELAY_UNUSED_GRACE`, `RELAY_IDLE_EXPIRY`,
/// `RELAY_SUGGEST_AFTER`; see [`crate::config`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostPolicy {
    /// Grace for unused detached PTYs; `None` = off.
    pub unused_grace: Option<Duration>,
    /// Idle expiry of used detached PTYs; `None` = off (the default).
    pub idle_expiry: Option<Duration>,
    /// Idle age after which a used detached PTY is suggested for cleanup.
    pub suggest_after: Duration,
}

impl Default for HostPolicy {
    fn default() -> Self {
        HostPolicy {
            unused_grace: Some(DEFAULT_UNUSED_GRACE),
            idle_expiry: None,
            suggest_after: DEFAULT_SUGGEST_AFTER,
        }
    }
}

/// The policy one lease is governed by: what its creating connection stated, resolved against
/// the host's settings. Journaled with the lease; a lease without one is never ended by a timer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct LeasePolicy {
    /// Grace for an unused detached PTY, in ms; `None` = off.
    pub unused_grace_ms: Option<u64>,
    /// Idle expiry of a used detached PTY, in ms; `None` = off.
    pub idle_expiry_ms: Option<u64>,
}

impl fmt::Display for LeasePolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let show = |v: Option<u64>| v.map_or("off".to_string(), human_ms);
        write!(
            f,
            "unused={};idle={}",
            show(self.unused_grace_ms),
            show(self.idle_expiry_ms)
        )
    }
}

/// One condition's value in a stated policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Value {
    Off,
    Default,
    After(Duration),
}

/// Parses a policy a connection states (`SetPolicy`): `;`-separated `condition=value` with
/// conditions `unused` and `idle`, values `off`, `default` or a duration (see [`parse_duration`]).
/// A condition not named keeps the host's setting; an empty spec states the host's settings.
///
/// # Errors
/// An unknown condition, a repeated one, or a bad or out-of-bounds value, with what to send
/// instead. An unknown condition is refused, never read as unconditional.
pub fn resolve_spec(spec: &str, host: &HostPolicy) -> Result<LeasePolicy, String> {
    let mut unused = Value::Default;
    let mut idle = Value::Default;
    let mut seen = Vec::new();
    for part in spec.split(';').map(str::trim).filter(|p| !p.is_empty()) {
        let Some((name, value)) = part.split_once('=') else {
            return Err(format!(
                "policy condition {part:?} has no value; write e.g. unused=10m;idle=off"
            ));
        };
        let (name, value) = (name.trim(), value.trim());
        if seen.contains(&name) {
            return Err(format!("policy condition {name:?} is given twice"));
        }
        let slot = match name {
            "unused" => &mut unused,
            "idle" => &mut idle,
            other => {
                return Err(format!(
                    "unknown policy condition {other:?}; this agent knows unused and idle \
                     (upgrade the agent for newer conditions)"
                ))
            }
        };
        *slot = match value {
            "off" => Value::Off,
            "default" => Value::Default,
            v => Value::After(
                parse_duration(v).map_err(|e| format!("policy {name}: {e}, or off, or default"))?,
            ),
        };
        seen.push(name);
    }
    let pick = |v: Value, host: Option<Duration>| match v {
        Value::Off => None,
        Value::Default => host.map(|d| d.as_millis() as u64),
        Value::After(d) => Some(d.as_millis() as u64),
    };
    Ok(LeasePolicy {
        unused_grace_ms: pick(unused, host.unused_grace),
        idle_expiry_ms: pick(idle, host.idle_expiry),
    })
}

/// Parses `off` (→ `None`) or a duration (see [`parse_duration`]), for the env settings.
///
/// # Errors
/// As [`parse_duration`].
pub fn parse_setting(v: &str) -> Result<Option<Duration>, String> {
    match v.trim() {
        "off" => Ok(None),
        other => parse_duration(other)
            .map(Some)
            .map_err(|e| format!("{e}, or off")),
    }
}

/// Parses a duration `<n>s`, `<n>m`, `<n>h` or `<n>d` (e.g. `90s`, `10m`, `1h`, `7d`) between
/// [`MIN_DURATION`] and [`MAX_DURATION`].
///
/// # Errors
/// A missing or unknown unit, a non-number, or a value out of bounds, with an example.
pub fn parse_duration(v: &str) -> Result<Duration, String> {
    let v = v.trim();
    let bad = || format!("{v:?} is not a duration; write e.g. 90s, 10m, 1h or 7d");
    let unit = v.chars().last().ok_or_else(bad)?;
    let secs_per = match unit {
        's' => 1,
        'm' => 60,
        'h' => 3600,
        'd' => 86_400,
        _ => return Err(bad()),
    };
    let digits = &v[..v.len() - unit.len_utf8()];
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    let n: u64 = digits.parse().map_err(|_| bad())?;
    let d = Duration::from_secs(n.checked_mul(secs_per).ok_or_else(bad)?);
    if d < MIN_DURATION || d > MAX_DURATION {
        return Err(format!("{v:?} is out of bounds; use 1s to 90d"));
    }
    Ok(d)
}

/// A duration in ms as people read it: `45s`, `10m`, `1h 5m`, `2d 3h`.
pub fn human_ms(ms: u64) -> String {
    let s = ms / 1000;
    let (d, h, m) = (s / 86_400, s % 86_400 / 3600, s % 3600 / 60);
    match (d, h, m, s % 60) {
        (0, 0, 0, s) => format!("{s}s"),
        (0, 0, m, 0) => format!("{m}m"),
        (0, 0, m, s) => format!("{m}m {s}s"),
        (0, h, 0, _) => format!("{h}h"),
        (0, h, m, _) => format!("{h}h {m}m"),
        (d, 0, _, _) => format!("{d}d"),
        (d, h, _, _) => format!("{d}d {h}h"),
    }
}

/// What is known about a lease's shell's child processes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Children {
    /// Not looked at (only timings are being computed).
    NotRead,
    /// Read: this many (0 = none).
    Count(u32),
    /// `/proc` could not be read: counts as "has children".
    Unreadable,
}

/// Facts the agent observed about one lease. Times are ms since the Unix epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Facts {
    /// The PTY still runs (not ended).
    pub running: bool,
    /// Connections attached now.
    pub attached: u32,
    /// Replaced by a newer PTY for its pane (rule D); the process was not killed by that.
    pub superseded: bool,
    /// Since when it is detached (or superseded).
    pub since_ms: u64,
    /// Received input, or was started with an explicit command.
    pub used: bool,
    /// Started with an explicit command (`relay shell -- CMD`, an app's task pane): the PTY's
    /// own process is the work, so it counts as running something while it runs.
    pub command: bool,
    /// Last input, if any.
    pub last_input_ms: Option<u64>,
    /// Last output, if any.
    pub last_output_ms: Option<u64>,
    /// Protected by an operator.
    pub protected: bool,
    /// A full-screen program has the alternate screen; `None` when unknown (model off).
    pub alternate_screen: Option<bool>,
    /// The shell's child processes.
    pub children: Children,
    /// The policy the lease was created under; `None` = never ended by a timer.
    pub policy: Option<LeasePolicy>,
}

/// A rule that can end a lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    /// Detached and never used, past the unused grace (ms).
    Unused(u64),
    /// Used, detached and idle past the idle expiry (ms).
    Idle(u64),
    /// Superseded and detached, past the unused grace (ms).
    Superseded(u64),
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rule::Unused(g) => write!(f, "never used, detached {}", human_ms(*g)),
            Rule::Idle(e) => write!(f, "used, idle {}", human_ms(*e)),
            Rule::Superseded(g) => write!(f, "superseded, detached {}", human_ms(*g)),
        }
    }
}

/// Why the policy keeps a lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keep {
    /// It ended already.
    Ended,
    /// A connection is attached.
    Attached,
    /// Protected.
    Protected,
    /// The shell has child processes (running work, a background job, `sleep`).
    HasChildren,
    /// Its child processes could not be read.
    ChildrenUnknown,
    /// A full-screen program has the alternate screen.
    FullScreen,
    /// The PTY runs an explicit command (its own process is the work).
    RunningCommand,
    /// Whether a full-screen program runs is unknown (terminal model off).
    ScreenUnknown,
    /// Created by a connection that stated no policy.
    NoPolicy,
    /// Used; idle expiry is off and it is not idle long enough to suggest.
    Used,
    /// Never used, but the unused grace is off.
    GraceOff,
}

impl Keep {
    /// Whether the lease is kept for holding work (looked at again at most hourly while its
    /// rule would be due), rather than by a fact that only an event changes.
    pub fn is_busy(self) -> bool {
        matches!(
            self,
            Keep::HasChildren
                | Keep::ChildrenUnknown
                | Keep::FullScreen
                | Keep::ScreenUnknown
                | Keep::RunningCommand
        )
    }
}

impl fmt::Display for Keep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Keep::Ended => "ended",
            Keep::Attached => "attached",
            Keep::Protected => "protected",
            Keep::HasChildren => "has children",
            Keep::ChildrenUnknown => "children unreadable",
            Keep::FullScreen => "full-screen program",
            Keep::RunningCommand => "running its command",
            Keep::ScreenUnknown => "screen unknown",
            Keep::NoPolicy => "no policy ends it",
            Keep::Used => "active recently",
            Keep::GraceOff => "cleanup off",
        })
    }
}

/// The policy's answer for one lease now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Never ended now; see why.
    Keep(Keep),
    /// Would be kept for holding work now, but `rule` is due: look again later.
    Busy(Keep, Rule),
    /// `rule` becomes due at `at_ms`; then every condition is checked again.
    Wait {
        /// Deadline, ms since the Unix epoch.
        at_ms: u64,
        /// The rule.
        rule: Rule,
    },
    /// End it now (every condition holds).
    End(Rule),
    /// Eligible for "end all eligible" (with confirmation), never ended automatically.
    Suggest(SuggestWhy),
}

/// Why a lease is suggested for cleanup.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SuggestWhy {
    /// Used and idle for this long (ms), past the host's suggest age.
    Idle(u64),
    /// Superseded and detached (no policy ends it by itself).
    Superseded,
    /// Never used, detached this long (ms), but no timer may end it (no policy, or grace off).
    Unused(u64),
}

impl fmt::Display for SuggestWhy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SuggestWhy::Idle(ms) => write!(f, "used, idle {}", human_ms(*ms)),
            SuggestWhy::Superseded => f.write_str("superseded, detached"),
            SuggestWhy::Unused(ms) => write!(f, "never used, detached {}", human_ms(*ms)),
        }
    }
}

/// Decides what the policy says about a lease with `facts` at `now_ms`, given the host's
/// `suggest_after`. The order matters: ended, attached and protected leases are kept before any
/// rule is looked at; child processes and the alternate screen keep a lease whose rule is due
/// (unknown counts as busy); with [`Children::NotRead`] a due rule is reported as
/// [`Verdict::Wait`] at its deadline, so callers computing timers never end on partial facts.
pub fn decide(facts: &Facts, suggest_after: Duration, now_ms: u64) -> Verdict {
    if !facts.running {
        return Verdict::Keep(Keep::Ended);
    }
    if facts.attached > 0 {
        return Verdict::Keep(Keep::Attached);
    }
    if facts.protected {
        return Verdict::Keep(Keep::Protected);
    }
    let idle_since = [facts.last_input_ms, facts.last_output_ms]
        .into_iter()
        .flatten()
        .fold(facts.since_ms, u64::max);
    let idle_for = now_ms.saturating_sub(idle_since);
    let detached_for = now_ms.saturating_sub(facts.since_ms);
    let timed = match facts.policy {
        None => None,
        Some(p) if facts.superseded => p
            .unused_grace_ms
            .map(|g| (facts.since_ms + g, Rule::Superseded(g))),
        Some(p) if !facts.used => p
            .unused_grace_ms
            .map(|g| (facts.since_ms + g, Rule::Unused(g))),
        Some(p) => p.idle_expiry_ms.map(|e| (idle_since + e, Rule::Idle(e))),
    };
    if let Some((at_ms, rule)) = timed {
        if now_ms < at_ms || facts.children == Children::NotRead {
            return Verdict::Wait { at_ms, rule };
        }
        return match busy(facts) {
            Some(keep) => Verdict::Busy(keep, rule),
            None => Verdict::End(rule),
        };
    }
    // No timer may end it: at most a suggestion, never while it holds work.
    let suggest = if facts.superseded {
        Some(SuggestWhy::Superseded)
    } else if !facts.used && detached_for >= suggest_after.as_millis() as u64 {
        Some(SuggestWhy::Unused(detached_for))
    } else if facts.used && idle_for >= suggest_after.as_millis() as u64 {
        Some(SuggestWhy::Idle(idle_for))
    } else {
        None
    };
    match (suggest, busy(facts)) {
        (Some(_), Some(keep)) if facts.children != Children::NotRead => Verdict::Keep(keep),
        (Some(why), _) => Verdict::Suggest(why),
        (None, _) if facts.policy.is_none() => Verdict::Keep(Keep::NoPolicy),
        (None, _) if facts.used => Verdict::Keep(Keep::Used),
        (None, _) => Verdict::Keep(Keep::GraceOff),
    }
}

/// The work a lease holds as far as its facts tell, if any (unknown counts as work; children
/// not read count as none).
pub fn busy(facts: &Facts) -> Option<Keep> {
    if facts.command {
        return Some(Keep::RunningCommand);
    }
    match facts.children {
        Children::Count(n) if n > 0 => return Some(Keep::HasChildren),
        Children::Unreadable => return Some(Keep::ChildrenUnknown),
        _ => {}
    }
    match facts.alternate_screen {
        Some(true) => Some(Keep::FullScreen),
        None => Some(Keep::ScreenUnknown),
        Some(false) => None,
    }
}

/// As [`busy`], but only for facts that were actually read (children read, screen known): what
/// a listing can honestly say keeps a lease before its deadline.
pub fn known_busy(facts: &Facts) -> Option<Keep> {
    match busy(facts)? {
        Keep::ScreenUnknown => None,
        keep => Some(keep),
    }
}

#[cfg(test)]
mod tests;
