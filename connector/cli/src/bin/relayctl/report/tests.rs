//! Summaries as printed, and the exit status they lead to.

use super::*;
use relay_connector::GcCandidate;
use relay_protocol::message::{LeaseRow, Tag};
use relay_protocol::{EndReason, ExitStatus, LeaseState, PtyId};

use crate::targets::tests::{info, pty};

fn result(pane: &str, counter: u64, outcome: EndOutcome) -> EndResult {
    EndResult {
        binding: info(pane, counter, LeaseState::Detached).binding,
        outcome,
    }
}

fn hangup() -> EndOutcome {
    EndOutcome::Ended {
        exit: Some(ExitStatus {
            code: 1,
            signal: Some("Hangup".into()),
        }),
        detail: "SIGHUP".into(),
    }
}

fn mixed() -> KillSummary {
    KillSummary {
        results: vec![
            result("w/t/0", 1, hangup()),
            result(
                "w/t/1",
                2,
                EndOutcome::AlreadyGone {
                    reason: Some(EndReason::Exited),
                },
            ),
            result(
                "w/t/2",
                3,
                EndOutcome::Refused {
                    why: "protected".into(),
                },
            ),
            result(
                "w/t/3",
                4,
                EndOutcome::Refused {
                    why: "binding mismatch: the pane has another shell now".into(),
                },
            ),
            result(
                "w/t/4",
                5,
                EndOutcome::Unverified {
                    why: "still running after SIGKILL".into(),
                },
            ),
        ],
    }
}

#[test]
fn the_kill_summary_counts_then_names_every_target_not_ended_now() {
    let text = kill_report(&mixed());
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[0],
        "targets 5, ended 1, already gone 1, refused 2 (protected; binding mismatch: the pane \
         has another shell now), kept 0, unverified 1"
    );
    assert_eq!(lines.len(), 5, "{text}");
    assert_eq!(
        lines[1],
        "  already gone  w/t/1 (00000000000000ab.2): exited"
    );
    assert_eq!(
        lines[2],
        "  refused       w/t/2 (00000000000000ab.3): protected"
    );
    assert!(lines[4].starts_with("  unverified    w/t/4") && lines[4].ends_with("after SIGKILL"));
    assert!(
        !text.contains("w/t/0"),
        "ended ones are counted, not listed: {text}"
    );
}

#[test]
fn exit_status_is_1_when_something_requested_was_not_done() {
    assert_eq!(kill_outcome(&mixed()), Outcome::NotAllDone);
    let done = KillSummary {
        results: vec![
            result("w/t/0", 1, hangup()),
            result("w/t/1", 2, EndOutcome::AlreadyGone { reason: None }),
        ],
    };
    assert_eq!(
        kill_outcome(&done),
        Outcome::Done,
        "already gone counts as done"
    );
    let kept = KillSummary {
        results: vec![
            result("w/t/0", 1, hangup()),
            result(
                "w/t/1",
                2,
                EndOutcome::Kept {
                    why: "checked again and kept: now has children".into(),
                },
            ),
        ],
    };
    assert_eq!(
        kill_outcome(&kept),
        Outcome::NotAllDone,
        "kill asked for this one to end"
    );
    assert_eq!(
        gc_outcome(&kept),
        Outcome::Done,
        "gc asked the agent to decide"
    );
    assert_eq!(gc_outcome(&mixed()), Outcome::NotAllDone);
}

#[test]
fn the_gc_report_says_per_target_ended_or_why_kept() {
    let summary = KillSummary {
        results: vec![
            result(
                "w/t/0",
                1,
                EndOutcome::Ended {
                    exit: None,
                    detail: "SIGHUP".into(),
                },
            ),
            result(
                "w/t/1",
                2,
                EndOutcome::Kept {
                    why: "checked again and kept: now has children".into(),
                },
            ),
        ],
    };
    let text = gc_report(&summary);
    assert_eq!(
        text,
        "ended         w/t/0 (00000000000000ab.1): SIGHUP\n\
         kept          w/t/1 (00000000000000ab.2): checked again and kept: now has children\n\
         targets 2, ended 1, already gone 0, refused 0, kept 1, unverified 0\n"
    );
}

#[test]
fn target_tables_show_what_will_end_and_gc_says_why() {
    let row = |counter, tag| LeaseRow {
        info: info("w/t/0", counter, LeaseState::Detached),
        tag,
        detail: None,
        used: false,
        last_input_ms: None,
        policy: None,
    };
    let named = row(1, Tag::None);
    let t = targets_table(&[&named], 0);
    assert_eq!(
        t.lines()
            .next()
            .unwrap()
            .split_whitespace()
            .collect::<Vec<_>>(),
        ["PANE", "PTY", "PID", "STATE", "COMMAND"]
    );
    assert!(
        t.contains("w/t/0   00000000000000ab.1   4001   detached   (login shell)"),
        "{t}"
    );
    let busy = row(
        3,
        Tag::Kept {
            why: "has children".into(),
        },
    );
    let t = targets_table(&[&named, &busy], 0);
    assert!(t.lines().next().unwrap().ends_with("TAG"), "{t}");
    assert!(
        t.contains("kept: has children"),
        "the operator sees what runs: {t}"
    );
    let plan = GcPlan {
        candidates: vec![GcCandidate {
            row: row(
                2,
                Tag::Suggested {
                    why: "used, idle 1d".into(),
                },
            ),
            why: "cleanup suggested: used, idle 1d".into(),
        }],
    };
    let t = gc_table(&plan);
    assert!(t.lines().next().unwrap().ends_with("WHY"), "{t}");
    assert!(t.contains("cleanup suggested: used, idle 1d"), "{t}");
}

#[test]
fn the_forget_report_names_what_was_not_forgotten() {
    let f = Forgot {
        forgotten: 2,
        not_ended: vec![pty(3)],
        unknown: vec![PtyId {
            counter: 9,
            ..pty(0)
        }],
    };
    let text = forget_report(&f);
    assert!(text.starts_with("forgot 2 ended lease(s)\n"), "{text}");
    assert!(
        text.contains(
            "kept 00000000000000ab.3: not ended (end it first: `relayctl kill 00000000000000ab.3`)"
        ),
        "{text}"
    );
    assert!(
        text.contains("unknown 00000000000000ab.9: the agent has no record of it"),
        "{text}"
    );
}
