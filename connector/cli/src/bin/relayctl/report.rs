//! What `kill`, `gc` and `forget` print: the shells about to be ended, and afterwards what
//! became of each, in the words of the summary (`targets N, ended N, already gone N, refused N
//! (why), kept N, unverified N`). No IO.

use relay_connector::{GcPlan, KillSummary};
use relay_protocol::message::{EndOutcome, EndResult, Forgot, LeaseRow, Tag};

use crate::render::{align, cell, clean, command, tag_text};
use crate::Outcome;

/// The shells a command is about to end: PANE PTY PID STATE COMMAND TAG, the tag saying what
/// the operator would end (`protected`, `kept: has children`) as of `now_ms` (ms since the
/// Unix epoch); without tags (an older agent) no TAG column.
pub fn targets_table(rows: &[&LeaseRow], now_ms: u64) -> String {
    let tags: Vec<Option<String>> = rows
        .iter()
        .map(|r| (r.tag != Tag::None).then(|| tag_text(r, now_ms)))
        .collect();
    table(
        rows.iter().zip(&tags).map(|(r, t)| (*r, t.as_deref())),
        "TAG",
    )
}

/// The shells `gc` would end, with why: PANE PTY PID STATE COMMAND WHY.
pub fn gc_table(plan: &GcPlan) -> String {
    table(
        plan.candidates
            .iter()
            .map(|c| (&c.row, Some(c.why.as_str()))),
        "WHY",
    )
}

fn table<'a>(rows: impl Iterator<Item = (&'a LeaseRow, Option<&'a str>)>, last: &str) -> String {
    let mut lines = vec![["PANE", "PTY", "PID", "STATE", "COMMAND", last]
        .map(String::from)
        .to_vec()];
    let mut with_why = false;
    for (row, why) in rows {
        let l = &row.info;
        with_why |= why.is_some();
        lines.push(vec![
            l.binding.pane.to_string(),
            l.binding.pty.to_string(),
            l.pid.map_or("-".into(), |p| p.to_string()),
            l.state.to_string(),
            command(&l.command),
            why.unwrap_or_default().to_string(),
        ]);
    }
    if !with_why {
        lines.iter_mut().for_each(|line| drop(line.pop()));
    }
    align(&lines)
}

/// After `kill`: the count line, then one line per target that was not ended now (already
/// gone, refused, kept, unverified) with the reason.
pub fn kill_report(summary: &KillSummary) -> String {
    let mut out = counts(summary);
    for r in summary
        .results
        .iter()
        .filter(|r| !matches!(r.outcome, EndOutcome::Ended { .. }))
    {
        out.push_str(&format!("  {}\n", outcome_line(r)));
    }
    out
}

/// After `gc`: one line per target (`ended`, `kept ...: checked again and kept: now has
/// children`), then the count line.
pub fn gc_report(summary: &KillSummary) -> String {
    let mut out: String = summary
        .results
        .iter()
        .map(|r| format!("{}\n", outcome_line(r)))
        .collect();
    out.push_str(&counts(summary));
    out
}

/// `kill` did everything requested when every target ended now or had already ended.
pub fn kill_outcome(summary: &KillSummary) -> Outcome {
    Outcome::of(summary.complete())
}

/// `gc` did everything requested unless a target was refused or could not be verified: a
/// shell the agent checked again and kept is the answer asked for, not a failure.
pub fn gc_outcome(summary: &KillSummary) -> Outcome {
    Outcome::of(summary.refused() == 0 && summary.unverified() == 0)
}

/// `targets 3, ended 1, already gone 1, refused 1 (protected), kept 0, unverified 0`.
fn counts(s: &KillSummary) -> String {
    let mut reasons: Vec<&str> = Vec::new();
    for r in &s.results {
        if let EndOutcome::Refused { why } = &r.outcome {
            if !reasons.contains(&why.as_str()) {
                reasons.push(why);
            }
        }
    }
    let refused_why = if reasons.is_empty() {
        String::new()
    } else {
        format!(" ({})", cell(&reasons.join("; ")))
    };
    format!(
        "targets {}, ended {}, already gone {}, refused {}{refused_why}, kept {}, unverified {}\n",
        s.targets(),
        s.ended(),
        s.already_gone(),
        s.refused(),
        s.kept(),
        s.unverified()
    )
}

/// `refused       w/t/0 (ab.3): protected`.
fn outcome_line(r: &EndResult) -> String {
    let (word, why) = match &r.outcome {
        EndOutcome::Ended { exit, detail } => match exit {
            Some(status) => ("ended", format!("{status}; {detail}")),
            None => ("ended", detail.clone()),
        },
        EndOutcome::AlreadyGone { reason } => (
            "already gone",
            reason
                .as_ref()
                .map_or("ended before".into(), |r| r.to_string()),
        ),
        EndOutcome::Refused { why } => ("refused", why.clone()),
        EndOutcome::Kept { why } => ("kept", why.clone()),
        EndOutcome::Unverified { why } => ("unverified", why.clone()),
    };
    format!(
        "{word:<12}  {} ({}): {}",
        cell(&r.binding.pane.to_string()),
        r.binding.pty,
        clean(&why)
    )
}

/// After `forget`: how many were forgotten, and each named PTY that was not.
pub fn forget_report(f: &Forgot) -> String {
    let mut out = format!("forgot {} ended lease(s)\n", f.forgotten);
    for pty in &f.not_ended {
        out.push_str(&format!(
            "  kept {pty}: not ended (end it first: `relayctl kill {pty}`)\n"
        ));
    }
    for pty in &f.unknown {
        out.push_str(&format!("  unknown {pty}: the agent has no record of it\n"));
    }
    out
}

#[cfg(test)]
mod tests;
