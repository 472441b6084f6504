//! Output formats of `relayctl`: a `kubectl get`-style table and a stable JSON shape.
//!
//! The JSON field names are a public interface for scripts; they are built here by hand (not
//! derived from the wire types) so a protocol change cannot silently rename them.
//!
//! `relayctl leases --json` prints an array of objects with exactly these fields:
//! `pane{workspace,tab,leaf}`, `pty` (string `<incarnation>.<counter>`), `pid` (number or null),
//! `state` (`attached|detached|ended|superseded`), `since_ms` and `last_output_ms` (ms since the
//! Unix epoch; the latter may be null), `bytes_out`, `command` (array of strings),
//! `exit{code,signal}` (or null), `reason` (`exited|killed|agent_restarted|expired` or null),
//! `protected` (bool), `attached` (number of connections).
//!
//! The table is for eyes: a cell longer than [`MAX_CELL`] characters is cut with `…`, and control
//! characters in names are shown as `�` (a pane name must not drive the terminal). The JSON is
//! for scripts and always complete.

use std::time::{SystemTime, UNIX_EPOCH};

use relay_protocol::message::Status;
use relay_protocol::{EndReason, ExitStatus, LeaseInfo};
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
pub fn leases_json(leases: &[LeaseInfo]) -> String {
    let rows: Vec<Value> = leases.iter().map(lease_json).collect();
    serde_json::to_string_pretty(&rows).expect("JSON values always serialize")
}

fn lease_json(l: &LeaseInfo) -> Value {
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
    })
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

/// The leases as an aligned table with a header line.
pub fn leases_table(leases: &[LeaseInfo], now_ms: u64) -> String {
    let header = [
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
    let mut rows: Vec<Vec<String>> = vec![header.iter().map(|s| s.to_string()).collect()];
    for l in leases {
        let mut state = l.state.to_string();
        if l.protected {
            state.push_str(",protected");
        }
        rows.push(vec![
            l.binding.pane.to_string(),
            l.binding.pty.to_string(),
            l.pid.map_or("-".into(), |p| p.to_string()),
            state,
            ago(now_ms, l.since_ms),
            l.last_output_ms.map_or("-".into(), |t| ago(now_ms, t)),
            bytes(l.bytes_out),
            command(&l.command),
            exit(l.exit.as_ref(), l.reason.as_ref()),
        ]);
    }
    align(&rows)
}

fn align(rows: &[Vec<String>]) -> String {
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
fn cell(text: &str) -> String {
    let clean = text
        .chars()
        .map(|c| if c.is_control() { '\u{fffd}' } else { c });
    if text.chars().count() > MAX_CELL {
        let mut cut: String = clean.take(MAX_CELL - 1).collect();
        cut.push('…');
        cut
    } else {
        clean.collect()
    }
}

/// Age like `kubectl`: `42s`, `5m`, `3h`, `2d`.
pub fn ago(now_ms: u64, then_ms: u64) -> String {
    let s = now_ms.saturating_sub(then_ms) / 1000;
    match s {
        0..=119 => format!("{s}s"),
        120..=7199 => format!("{}m", s / 60),
        7200..=172_799 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86_400),
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

fn command(argv: &[String]) -> String {
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

fn exit(exit: Option<&ExitStatus>, reason: Option<&EndReason>) -> String {
    match (exit, reason) {
        (Some(e), Some(EndReason::Exited) | None) => e.to_string(),
        (Some(e), Some(r)) => format!("{e} ({r})"),
        (None, Some(r)) => r.to_string(),
        (None, None) => "-".into(),
    }
}

/// Status as JSON: agent_version, incarnation, pid, started_ms, uptime_ms,
/// leases{attached,detached,ended,superseded}, connections.
pub fn status_json(s: &Status) -> String {
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
    });
    serde_json::to_string_pretty(&v).expect("JSON values always serialize")
}

/// Status as `key: value` lines.
pub fn status_text(s: &Status) -> String {
    let l = &s.leases;
    format!(
        "agent version: {}\nincarnation:   {}\npid:           {}\nuptime:        {}\nleases:        \
         {} attached, {} detached, {} ended, {} superseded\nconnections:   {}\n",
        s.agent_version,
        s.incarnation,
        s.pid,
        ago(s.uptime_ms, 0),
        l.attached,
        l.detached,
        l.ended,
        l.superseded,
        s.connections
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use relay_protocol::{Binding, Incarnation, LeaseState, PaneKey, PtyId, TermSize};

    fn lease() -> LeaseInfo {
        LeaseInfo {
            binding: Binding {
                pane: PaneKey::new("ws", "main", "0"),
                pty: PtyId {
                    incarnation: Incarnation(0xab),
                    counter: 3,
                },
            },
            state: LeaseState::Ended,
            pid: Some(4242),
            since_ms: 1_000_000,
            last_output_ms: None,
            bytes_out: 2048,
            command: vec!["sh".into(), "-c".into(), "exit 3".into()],
            exit: Some(ExitStatus {
                code: 3,
                signal: None,
            }),
            reason: Some(EndReason::AgentRestarted),
            protected: true,
            attached: 0,
            size: TermSize::default(),
        }
    }

    #[test]
    fn json_shape_is_the_documented_one() {
        let v: Value = serde_json::from_str(&leases_json(&[lease()])).unwrap();
        let row = &v[0];
        assert_eq!(row["pane"]["workspace"], "ws");
        assert_eq!(row["pane"]["tab"], "main");
        assert_eq!(row["pane"]["leaf"], "0");
        assert_eq!(row["pty"], "00000000000000ab.3");
        assert_eq!(row["pid"], 4242);
        assert_eq!(row["state"], "ended");
        assert_eq!(row["since_ms"], 1_000_000);
        assert!(row["last_output_ms"].is_null());
        assert_eq!(row["bytes_out"], 2048);
        assert_eq!(row["command"][2], "exit 3");
        assert_eq!(row["exit"]["code"], 3);
        assert!(row["exit"]["signal"].is_null());
        assert_eq!(row["reason"], "agent_restarted");
        assert_eq!(row["protected"], true);
        assert_eq!(row["attached"], 0);
        assert_eq!(row.as_object().unwrap().len(), 12, "no undocumented fields");
    }

    #[test]
    fn table_has_the_columns_and_relative_times() {
        let t = leases_table(&[lease()], 1_000_000 + 5 * 60_000);
        let mut lines = t.lines();
        let header = lines.next().unwrap();
        for col in [
            "PANE",
            "PTY",
            "PID",
            "STATE",
            "SINCE",
            "LAST OUTPUT",
            "BYTES",
            "COMMAND",
            "EXIT",
        ] {
            assert!(header.contains(col), "{header}");
        }
        let row = lines.next().unwrap();
        assert!(
            row.contains("ws/main/0") && row.contains(" 5m ") && row.contains("2.0K"),
            "{row}"
        );
        assert!(row.contains("ended,protected"), "{row}");
    }

    /// Regression: a pane key part longer than 65535 characters made `relayctl leases` panic
    /// ("Formatting argument out of range", exit 101).
    #[test]
    fn huge_and_hostile_names_are_cut_in_the_table_and_complete_in_json() {
        let mut l = lease();
        l.binding.pane = PaneKey::new("W".repeat(400_000), "t\u{1b}]0;x\u{7}", "0");
        let t = leases_table(&[l.clone(), lease()], 1_000_000);
        let row = t.lines().nth(1).unwrap();
        let pane = row.split("   ").next().unwrap();
        assert_eq!(pane.chars().count(), MAX_CELL, "{pane}");
        assert!(pane.ends_with('…'), "{pane}");
        assert!(t.lines().all(|line| line.chars().count() < 400), "{t}");
        assert!(!t.contains('\u{1b}'));
        let short = PaneKey::new("ws", "t\u{1b}]0;x\u{7}", "0");
        let mut l2 = lease();
        l2.binding.pane = short;
        let t = leases_table(&[l2], 1_000_000);
        assert!(t.contains("ws/t\u{fffd}]0;x\u{fffd}/0"), "{t}");
        let v: Value = serde_json::from_str(&leases_json(&[l])).unwrap();
        assert_eq!(v[0]["pane"]["workspace"].as_str().unwrap().len(), 400_000);
        assert_eq!(v[0]["pane"]["tab"], "t\u{1b}]0;x\u{7}");
    }

    #[test]
    fn human_units() {
        assert_eq!(ago(10_000, 0), "10s");
        assert_eq!(ago(3 * 3_600_000, 0), "3h");
        assert_eq!(ago(3 * 86_400_000, 0), "3d");
        assert_eq!(bytes(512), "512");
        assert_eq!(bytes(3 * 1024 * 1024), "3.0M");
    }
}
