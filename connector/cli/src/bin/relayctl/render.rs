//! Output formats of `relayctl`: a `kubectl get`-style table and a stable JSON shape.
//!
//! The JSON field names are a public interface for scripts; they are built here by hand (not
//! derived from the wire types) so a protocol change cannot silently rename them.
//!
//! `relayctl leases --json` prints an array of objects with exactly these fields:
//! `pane{workspace,tab,leaf}`, `pty` (string `<incarnation>.<counter>`), `pid` (number or null),
//! `state` (`attached|detached|ended|superseded`), `since_ms` and `last_output_ms` (ms since the
//! Unix epoch; the latter may be null), `bytes_out`, `command` (array of strings),
//! `exit{code,signal}` (or null), `reason` (`exited|killed|agent_restarted|expired|forgotten`
//! or null), `protected` (bool), `attached` (number of connections), `tag` (null, or
//! `{kind: protected|cleanup|suggested|kept}` with `at_ms` for `cleanup` (deadline, ms since the
//! Unix epoch) and `why` for `cleanup`, `suggested` and `kept`), `detail` (how an ended lease
//! ended, or null). `tag` and `detail` are null with an agent without the lifecycle policy.
//!
//! The table is for eyes: a cell longer than [`MAX_CELL`] characters is cut with `…`, and control
//! characters in names are shown as `�` (a pane name must not drive the terminal). The JSON is
//! for scripts and always complete.

use std::time::{SystemTime, UNIX_EPOCH};

use relay_protocol::message::{LeaseRow, PolicyInfo, Status, Tag, UpgradeReport};
use relay_protocol::{EndReason, ExitStatus};

use crate::targets::{is_live, Lifecycle};
use serde_json::{json, Value};

/// Longest table cell, in characters; longer ones end in `…`.
pub const MAX_CELL: usize = 64;

/// Milliseconds since the Unix epoch now.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// The leases as a JSON array (see the module docs for the shape).
pub fn leases_json(rows: &[&LeaseRow]) -> String {
    let rows: Vec<Value> = rows.iter().map(|r| lease_json(r)).collect();
    serde_json::to_string_pretty(&rows).expect("JSON values always serialize")
}

fn lease_json(row: &LeaseRow) -> Value {
    let l = &row.info;
    json!({
        "pane": {
            "workspace": l.binding.pane.workspace.0,
            "tab": l.binding.pane.tab,
            "leaf": l.binding.pane.leaf,
        },
        "pty": l.binding.pty.to_string(),
        "pid": l.pid,
        "state": l.state.to_string(),
        "since_ms": l.since_ms,
        "last_output_ms": l.last_output_ms,
        "bytes_out": l.bytes_out,
        "command": l.command,
        "exit": l.exit.as_ref().map(|e| json!({ "code": e.code, "signal": e.signal })),
        "reason": l.reason.as_ref().map(reason_token),
        "protected": l.protected,
        "attached": l.attached,
        "tag": tag_json(&row.tag),
        "detail": row.detail,
    })
}

fn tag_json(tag: &Tag) -> Value {
    match tag {
        Tag::None => Value::Null,
        Tag::Protected => json!({ "kind": "protected" }),
        Tag::CleanupAt { at_ms, why } => json!({ "kind": "cleanup", "at_ms": at_ms, "why": why }),
        Tag::Suggested { why } => json!({ "kind": "suggested", "why": why }),
        Tag::Kept { why } => json!({ "kind": "kept", "why": why }),
    }
}

/// The TAG cell: what the policy will do with a live lease (`protected`, `cleanup in 4m`,
/// `cleanup due`, `suggested`, `kept: has children`), how an ended one ended, else `-`.
pub fn tag_text(row: &LeaseRow, now_ms: u64) -> String {
    match &row.tag {
        Tag::Protected => "protected".into(),
        Tag::CleanupAt { at_ms, .. } if *at_ms > now_ms => {
            format!("cleanup in {}", span(at_ms - now_ms))
        }
        Tag::CleanupAt { .. } => "cleanup due".into(),
        Tag::Suggested { .. } => "suggested".into(),
        Tag::Kept { why } => format!("kept: {why}"),
        Tag::None => row.detail.clone().unwrap_or_else(|| "-".into()),
    }
}

fn reason_token(r: &EndReason) -> &'static str {
    match r {
        EndReason::Exited => "exited",
        EndReason::Killed => "killed",
        EndReason::AgentRestarted => "agent_restarted",
        EndReason::Expired => "expired",
        EndReason::Forgotten => "forgotten",
    }
}

/// The leases as an aligned table with a header line; with `tags` (an agent with the lifecycle
/// policy) a TAG column, which also says which lease is protected.
pub fn leases_table(leases: &[&LeaseRow], tags: bool, now_ms: u64) -> String {
    let mut header = vec![
        "PANE",
        "PTY",
        "PID",
        "STATE",
        "SINCE",
        "LAST OUTPUT",
        "BYTES",
        "COMMAND",
        "EXIT",
    ];
    if tags {
        header.push("TAG");
    }
    let mut rows: Vec<Vec<String>> = vec![header.iter().map(|s| s.to_string()).collect()];
    for row in leases {
        let l = &row.info;
        let mut state = l.state.to_string();
        if l.protected && !tags {
            state.push_str(",protected");
        }
        let mut cells = vec![
            l.binding.pane.to_string(),
            l.binding.pty.to_string(),
            l.pid.map_or("-".into(), |p| p.to_string()),
            state,
            ago(now_ms, l.since_ms),
            l.last_output_ms.map_or("-".into(), |t| ago(now_ms, t)),
            bytes(l.bytes_out),
            command(&l.command),
            exit(l.exit.as_ref(), l.reason.as_ref()),
        ];
        if tags {
            cells.push(tag_text(row, now_ms));
        }
        rows.push(cells);
    }
    align(&rows)
}

/// Rows as aligned columns (the first row is the header); cells are cut by [`cell`].
pub fn align(rows: &[Vec<String>]) -> String {
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|r| r.iter().map(|c| cell(c)).collect())
        .collect();
    let cols = rows[0].len();
    let widths: Vec<usize> = (0..cols)
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in &rows {
        let mut line = String::new();
        for (c, cell) in row.iter().enumerate() {
            line.push_str(cell);
            if c + 1 < cols {
                // Padding by hand: `{:<w$}` panics for widths above 65535.
                let pad = widths[c] - cell.chars().count() + 3;
                line.extend(std::iter::repeat_n(' ', pad));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// A table cell: control characters replaced, at most [`MAX_CELL`] characters.
pub fn cell(text: &str) -> String {
    if text.chars().count() > MAX_CELL {
        let mut cut: String = clean(text).chars().take(MAX_CELL - 1).collect();
        cut.push('…');
        cut
    } else {
        clean(text)
    }
}

/// `text` with control characters and bidirectional formatting characters shown as `�` (text
/// from the agent must not drive the terminal, nor make a pane key or command read in another
/// order than it is stored: [`relay_protocol::is_bidi_control`]).
pub fn clean(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_control() || relay_protocol::is_bidi_control(c) {
                '\u{fffd}'
            } else {
                c
            }
        })
        .collect()
}

/// Time from `then_ms` to `now_ms` as a [`span`] (0 when `then_ms` is later).
pub fn ago(now_ms: u64, then_ms: u64) -> String {
    span(now_ms.saturating_sub(then_ms))
}

/// A duration in ms, compactly, in at most two units, the second left out when zero: `42s`,
/// `4m`, `1h 5m`, `2d 3h`.
pub fn span(ms: u64) -> String {
    let s = ms / 1000;
    let (m, h, d) = (s / 60, s / 3600, s / 86_400);
    let two = |big: u64, big_unit: &str, small: u64, small_unit: &str| {
        if small == 0 {
            format!("{big}{big_unit}")
        } else {
            format!("{big}{big_unit} {small}{small_unit}")
        }
    };
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{m}m"),
        3600..=86_399 => two(h, "h", m % 60, "m"),
        _ => two(d, "d", h % 24, "h"),
    }
}

/// The agent's cleanup settings: `unused 10m, idle off, suggest after 1d`.
pub fn policy_text(p: &PolicyInfo) -> String {
    let setting = |ms: Option<u64>| ms.map_or_else(|| "off".to_string(), span);
    format!(
        "unused {}, idle {}, suggest after {}",
        setting(p.unused_grace_ms),
        setting(p.idle_expiry_ms),
        span(p.suggest_after_ms)
    )
}

/// Live leases by tag.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TagCounts {
    /// Protected.
    pub protected: usize,
    /// With a cleanup deadline.
    pub cleanup: usize,
    /// Cleanup suggested.
    pub suggested: usize,
    /// Kept by the policy.
    pub kept: usize,
}

impl TagCounts {
    /// Counts the live rows.
    pub fn of(rows: &[LeaseRow]) -> TagCounts {
        let mut c = TagCounts::default();
        for row in rows.iter().filter(|r| is_live(r.info.state)) {
            match row.tag {
                Tag::Protected => c.protected += 1,
                Tag::CleanupAt { .. } => c.cleanup += 1,
                Tag::Suggested { .. } => c.suggested += 1,
                Tag::Kept { .. } => c.kept += 1,
                Tag::None => {}
            }
        }
        c
    }
}

/// Byte count with a binary suffix: `512`, `1.5K`, `3.0M`, `2.2G`.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["K", "M", "G", "T"];
    if n < 1024 {
        return n.to_string();
    }
    let mut v = n as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.1}{}", UNITS[unit])
}

/// A command line for a table cell (`(login shell)` when empty), at most 40 characters.
pub fn command(argv: &[String]) -> String {
    let s = if argv.is_empty() {
        "(login shell)".to_string()
    } else {
        argv.join(" ")
    };
    if s.chars().count() > 40 {
        let cut: String = s.chars().take(39).collect();
        format!("{cut}…")
    } else {
        s
    }
}

/// How a lease ended: `exit 0`, `signal Hangup (killed)`, `agent restarted`, or `-`.
pub fn exit(exit: Option<&ExitStatus>, reason: Option<&EndReason>) -> String {
    match (exit, reason) {
        (Some(e), Some(EndReason::Exited) | None) => e.to_string(),
        (Some(e), Some(r)) => format!("{e} ({r})"),
        (None, Some(r)) => r.to_string(),
        (None, None) => "-".into(),
    }
}

/// What `relayctl status` adds for an agent with the lifecycle policy.
pub type StatusLifecycle<'a> = Option<(&'a Lifecycle, TagCounts)>;

/// Status as JSON: agent_version, incarnation, pid, started_ms, uptime_ms,
/// leases{attached,detached,ended,superseded}, connections, and policy{unused_grace_ms,
/// idle_expiry_ms,suggest_after_ms}, tags{protected,cleanup,suggested,kept}, rss_bytes (null
/// without the lifecycle policy), and agent_path, newest_installed{path,version} (null when none
/// is installed), newer_installed (null, like agent_path, without live upgrade).
pub fn status_json(
    s: &Status,
    lifecycle: StatusLifecycle,
    upgrade: Option<&UpgradeReport>,
) -> String {
    let policy = lifecycle.map(|(l, _)| {
        json!({
            "unused_grace_ms": l.policy.unused_grace_ms,
            "idle_expiry_ms": l.policy.idle_expiry_ms,
            "suggest_after_ms": l.policy.suggest_after_ms,
        })
    });
    let tags = lifecycle.map(|(_, t)| {
        json!({
            "protected": t.protected,
            "cleanup": t.cleanup,
            "suggested": t.suggested,
            "kept": t.kept,
        })
    });
    let v = json!({
        "agent_version": s.agent_version,
        "incarnation": s.incarnation.to_string(),
        "pid": s.pid,
        "started_ms": s.started_ms,
        "uptime_ms": s.uptime_ms,
        "leases": {
            "attached": s.leases.attached,
            "detached": s.leases.detached,
            "ended": s.leases.ended,
            "superseded": s.leases.superseded,
        },
        "connections": s.connections,
        "policy": policy,
        "tags": tags,
        "rss_bytes": lifecycle.map(|(l, _)| l.rss_bytes),
        "agent_path": upgrade.map(|u| &u.running.path),
        "newest_installed": upgrade.and_then(|u| u.newest_installed.as_ref()).map(|n| {
            json!({ "path": n.path, "version": n.version })
        }),
        "newer_installed": upgrade.map(|u| u.newer_installed),
    });
    serde_json::to_string_pretty(&v).expect("JSON values always serialize")
}

/// Status as `key: value` lines; policy, tags and memory only with the lifecycle policy; the
/// running binary and the newest installed agent only with live upgrade.
pub fn status_text(
    s: &Status,
    lifecycle: StatusLifecycle,
    upgrade: Option<&UpgradeReport>,
) -> String {
    let l = &s.leases;
    let mut out = format!(
        "agent version: {}\nincarnation:   {}\npid:           {}\nuptime:        {}\nleases:        \
         {} attached, {} detached, {} ended, {} superseded\nconnections:   {}\n",
        s.agent_version,
        s.incarnation,
        s.pid,
        span(s.uptime_ms),
        l.attached,
        l.detached,
        l.ended,
        l.superseded,
        s.connections
    );
    if let Some((l, t)) = lifecycle {
        let memory = match l.rss_bytes {
            0 => "unknown".to_string(),
            n => bytes(n),
        };
        out.push_str(&format!(
            "policy:        {}\ntags:          {} protected, {} cleanup scheduled, {} suggested, \
             {} kept\nmemory:        {memory} (daemon RSS)\n",
            policy_text(&l.policy),
            t.protected,
            t.cleanup,
            t.suggested,
            t.kept
        ));
    }
    if let Some(u) = upgrade {
        out.push_str(&format!(
            "agent binary:  {}
",
            clean(&u.running.path)
        ));
        let installed = match (&u.newest_installed, u.newer_installed) {
            (Some(n), true) => format!(
                "{} at {} is newer: `relayctl upgrade` hands the shells to it",
                clean(&n.version),
                clean(&n.path)
            ),
            (Some(n), false) => format!("{} (nothing newer)", clean(&n.version)),
            (None, _) => "none".to_string(),
        };
        out.push_str(&format!(
            "installed:     {installed}
"
        ));
        if let Some(from) = &u.upgraded_from {
            out.push_str(&format!(
                "upgraded from: {} (live)
",
                clean(from)
            ));
        }
        if let Some(why) = &u.last_failure {
            out.push_str(&format!(
                "last upgrade:  failed: {}
",
                clean(why)
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests;
