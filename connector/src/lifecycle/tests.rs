//! The pure parts (which rows `gc` picks, how a summary counts) as tables, and what
//! `kill_all`/`gc` send and make of the answers against a scripted agent.

use relay_protocol::message::{
    Done, EndOutcome, EndReport, EndResult, EndWhen, LeaseRow, Leases, Tag,
};
use relay_protocol::{
    Binding, Capability, EndReason, ErrorReply, ExitStatus, LeaseInfo, LeaseState, Request,
    Response,
};

use super::{GcPlan, KillSummary};
use crate::session::test_peer::{binding_of, connect, next_request, reply};
use crate::Error;

fn info(leaf: &str, counter: u64, state: LeaseState) -> LeaseInfo {
    LeaseInfo {
        pid: Some(100 + counter as u32),
        ..relay_testkit::lease(binding_of(leaf, counter), state)
    }
}

fn row(leaf: &str, counter: u64, state: LeaseState, tag: Tag) -> LeaseRow {
    LeaseRow {
        info: info(leaf, counter, state),
        tag,
        detail: None,
        used: false,
        last_input_ms: None,
        policy: None,
    }
}

fn cleanup_at(at_ms: u64) -> Tag {
    Tag::CleanupAt {
        at_ms,
        why: "never used, detached 10m".into(),
    }
}

fn suggested() -> Tag {
    Tag::Suggested {
        why: "used, idle 1d 2h".into(),
    }
}

/// Exactly the unprotected live rows whose cleanup is due or suggested; each case says why.
#[test]
fn gc_picks_exactly_the_due_and_suggested_unprotected_live_shells() {
    const NOW: u64 = 1_000_000;
    let mut protected = row("protected", 7, LeaseState::Detached, suggested());
    protected.info.protected = true;
    let rows = [
        (row("due", 1, LeaseState::Detached, cleanup_at(NOW)), true),
        (
            row("overdue", 2, LeaseState::Detached, cleanup_at(NOW - 1)),
            true,
        ),
        (
            row("later", 3, LeaseState::Detached, cleanup_at(NOW + 1)),
            false,
        ),
        (row("suggested", 4, LeaseState::Detached, suggested()), true),
        (
            row("superseded", 5, LeaseState::Superseded, suggested()),
            true,
        ),
        (row("ended", 6, LeaseState::Ended, suggested()), false),
        (protected, false),
        (
            row("tagged-protected", 8, LeaseState::Detached, Tag::Protected),
            false,
        ),
        (
            row(
                "kept",
                9,
                LeaseState::Detached,
                Tag::Kept {
                    why: "has children".into(),
                },
            ),
            false,
        ),
        (row("attached", 10, LeaseState::Attached, Tag::None), false),
    ];
    let all: Vec<LeaseRow> = rows.iter().map(|(r, _)| r.clone()).collect();
    let plan = GcPlan::from_rows(&all, NOW);
    let picked: Vec<&str> = plan
        .candidates
        .iter()
        .map(|c| c.row.info.binding.pane.leaf.as_str())
        .collect();
    let expected: Vec<&str> = rows
        .iter()
        .filter(|(_, pick)| *pick)
        .map(|(r, _)| r.info.binding.pane.leaf.as_str())
        .collect();
    assert_eq!(picked, expected);
    assert_eq!(
        plan.candidates[0].why,
        "cleanup due: never used, detached 10m"
    );
    assert_eq!(
        plan.candidates[2].why,
        "cleanup suggested: used, idle 1d 2h"
    );
    assert_eq!(plan.targets()[0], binding_of("due", 1));
    assert!(GcPlan::from_rows(&[], NOW).is_empty());
}

fn result(counter: u64, outcome: EndOutcome) -> EndResult {
    EndResult {
        binding: binding_of("l", counter),
        outcome,
    }
}

fn ended() -> EndOutcome {
    EndOutcome::Ended {
        exit: None,
        detail: "SIGHUP".into(),
    }
}

#[test]
fn a_summary_counts_each_outcome_and_is_complete_only_when_all_ended_or_were_gone() {
    let done = KillSummary {
        results: vec![
            result(1, ended()),
            result(2, EndOutcome::AlreadyGone { reason: None }),
        ],
    };
    assert!(done.complete());
    assert_eq!(
        (done.targets(), done.ended(), done.already_gone()),
        (2, 1, 1)
    );
    let mixed = KillSummary {
        results: vec![
            result(1, ended()),
            result(
                2,
                EndOutcome::Refused {
                    why: "protected".into(),
                },
            ),
            result(
                3,
                EndOutcome::Kept {
                    why: "now has children".into(),
                },
            ),
            result(
                4,
                EndOutcome::Unverified {
                    why: "still running".into(),
                },
            ),
            result(
                5,
                EndOutcome::AlreadyGone {
                    reason: Some(EndReason::Exited),
                },
            ),
        ],
    };
    assert!(!mixed.complete());
    let counts = (
        mixed.targets(),
        mixed.ended(),
        mixed.already_gone(),
        mixed.refused(),
        mixed.kept(),
        mixed.unverified(),
    );
    assert_eq!(counts, (5, 1, 1, 1, 1, 1));
    let not_done: Vec<(u64, &str)> = mixed
        .not_done()
        .map(|(b, why)| (b.pty.counter, why))
        .collect();
    assert_eq!(
        not_done,
        [
            (2, "protected"),
            (3, "now has children"),
            (4, "still running")
        ]
    );
    assert!(
        KillSummary::default().complete(),
        "nothing asked, nothing missing"
    );
}

/// One `End` naming exactly the snapshot (each binding once), and one result per target in its
/// order; a target the report leaves out is unverified, never counted as ended.
#[tokio::test]
async fn kill_all_names_exactly_the_snapshot_and_reports_each_target() {
    let (session, mut peer) = connect(&[Capability::PTY, Capability::LIFECYCLE]).await;
    let snapshot = [
        binding_of("a", 1),
        binding_of("b", 2),
        binding_of("a", 1),
        binding_of("c", 3),
    ];
    let killing = tokio::spawn({
        let session = session.clone();
        async move { session.kill_all(&snapshot, EndWhen::Unprotected).await }
    });
    let (id, req) = next_request(&mut peer).await;
    let Request::End(end) = req else {
        panic!("one End, got {req:?}");
    };
    assert_eq!(end.when, EndWhen::Unprotected);
    assert_eq!(
        end.targets,
        [binding_of("a", 1), binding_of("b", 2), binding_of("c", 3)]
    );
    let report = EndReport {
        // Out of order, and without c.
        results: vec![
            EndResult {
                binding: binding_of("b", 2),
                outcome: EndOutcome::Refused {
                    why: "protected".into(),
                },
            },
            EndResult {
                binding: binding_of("a", 1),
                outcome: ended(),
            },
        ],
    };
    reply(&mut peer, id, Response::EndReport(report)).await;
    let summary = killing.await.unwrap().unwrap();
    let outcomes: Vec<(&str, &EndOutcome)> = summary
        .results
        .iter()
        .map(|r| (r.binding.pane.leaf.as_str(), &r.outcome))
        .collect();
    assert_eq!(outcomes[0], ("a", &ended()));
    assert_eq!(
        outcomes[1],
        (
            "b",
            &EndOutcome::Refused {
                why: "protected".into()
            }
        )
    );
    assert!(
        matches!(outcomes[2], ("c", EndOutcome::Unverified { why }) if why.contains("does not mention")),
        "{outcomes:?}"
    );
    assert_eq!(
        (summary.ended(), summary.refused(), summary.unverified()),
        (1, 1, 1)
    );
}

/// Rule A: a connection lost while the End is out means "unknown", not "ended".
#[tokio::test]
async fn kill_all_reports_targets_unverified_when_the_connection_drops() {
    let (session, mut peer) = connect(&[Capability::PTY, Capability::LIFECYCLE]).await;
    let killing = tokio::spawn({
        let session = session.clone();
        async move {
            session
                .kill_all(&[binding_of("a", 1)], EndWhen::Always)
                .await
        }
    });
    let (_, req) = next_request(&mut peer).await;
    assert!(matches!(req, Request::End(_)));
    drop(peer);
    let summary = killing.await.unwrap().unwrap();
    assert_eq!(summary.unverified(), 1);
    let (_, why) = summary.not_done().next().unwrap();
    assert!(
        why.starts_with("outcome unknown: connection to the agent lost"),
        "{why}"
    );
}

/// An agent without `lifecycle`: "kill all unprotected" cannot be done exactly, so nothing is
/// sent; named kills become one `Kill` each, and only the lease list listing a target as ended
/// confirms its end. A target the list still shows detached, or no longer lists at all, stays
/// unverified after the confirmation window (7 s, on tokio's paused clock): never ended.
#[tokio::test(start_paused = true)]
async fn without_lifecycle_named_kills_are_exact_kills_confirmed_by_the_lease_list() {
    let (session, mut peer) = connect(&[Capability::PTY]).await;
    let err = session
        .kill_all(&[binding_of("a", 1)], EndWhen::Unprotected)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Unsupported(_)), "{err}");

    let targets = [
        binding_of("a", 1),
        binding_of("b", 2),
        binding_of("c", 3),
        binding_of("still-detached", 4),
        binding_of("unlisted", 5),
    ];
    let mut killing = tokio::spawn({
        let session = session.clone();
        async move { session.kill_all(&targets, EndWhen::Always).await }
    });
    for _ in 0..5 {
        let (id, req) = next_request(&mut peer).await;
        let Request::Kill(kill) = req else {
            panic!("a Kill, got {req:?}");
        };
        let pane = kill.binding.pane.clone();
        let resp = match kill.binding.pty.counter {
            2 => Response::Error(ErrorReply::Ended {
                pane,
                pty: kill.binding.pty,
                exit: None,
                reason: EndReason::Killed,
            }),
            3 => Response::Error(ErrorReply::Mismatch {
                pane,
                expected: kill.binding.pty,
                current: None,
            }),
            _ => Response::Done(Done {}),
        };
        reply(&mut peer, id, resp).await;
    }
    // Every listing: `a` ended, `still-detached` detached, `unlisted` absent.
    let mut gone = info("a", 1, LeaseState::Ended);
    gone.exit = Some(ExitStatus {
        code: 1,
        signal: Some("Hangup".into()),
    });
    let listed = vec![gone, info("still-detached", 4, LeaseState::Detached)];
    let mut listings = 0;
    let summary = loop {
        tokio::select! {
            done = &mut killing => break done.unwrap().unwrap(),
            (id, req) = next_request(&mut peer) => {
                assert!(matches!(req, Request::ListLeases(_)), "{req:?}");
                listings += 1;
                let leases = Leases { leases: listed.clone() };
                reply(&mut peer, id, Response::Leases(leases)).await;
            }
        }
    };
    assert!(
        listings > 1,
        "the list was watched, not read once: {listings}"
    );
    assert!(
        matches!(&summary.results[0].outcome, EndOutcome::Ended { exit: Some(e), .. } if e.code == 1),
        "{summary:?}"
    );
    assert_eq!(
        summary.results[1].outcome,
        EndOutcome::AlreadyGone {
            reason: Some(EndReason::Killed)
        }
    );
    assert!(
        matches!(&summary.results[2].outcome, EndOutcome::Refused { why } if why.contains("binding mismatch")),
        "{summary:?}"
    );
    for unseen in &summary.results[3..] {
        assert!(
            matches!(&unseen.outcome, EndOutcome::Unverified { why } if why.contains("not seen ended within 7 s")),
            "{summary:?}"
        );
    }
    assert_eq!(
        (summary.ended(), summary.unverified()),
        (1, 2),
        "{summary:?}"
    );
}

/// `gc` names exactly the plan's bindings with `Eligible`; an empty plan sends nothing.
#[tokio::test]
async fn gc_ends_exactly_the_plan_when_eligible_and_an_empty_plan_sends_nothing() {
    let (session, mut peer) = connect(&[Capability::PTY, Capability::LIFECYCLE]).await;
    let empty = session.gc(&GcPlan::default()).await.unwrap();
    assert_eq!(empty.targets(), 0);
    let plan = GcPlan::from_rows(&[row("a", 1, LeaseState::Detached, suggested())], 0);
    let collecting = tokio::spawn({
        let session = session.clone();
        async move { session.gc(&plan).await }
    });
    let (id, req) = next_request(&mut peer).await;
    let Request::End(end) = req else {
        panic!("an End first (the empty plan sent nothing), got {req:?}");
    };
    assert_eq!(
        (end.targets.as_slice(), end.when),
        (&[binding_of("a", 1)][..], EndWhen::Eligible)
    );
    let kept = EndOutcome::Kept {
        why: "checked again and kept: now has children".into(),
    };
    let report = EndReport {
        results: vec![EndResult {
            binding: binding_of("a", 1),
            outcome: kept.clone(),
        }],
    };
    reply(&mut peer, id, Response::EndReport(report)).await;
    let summary = collecting.await.unwrap().unwrap();
    assert_eq!(summary.results[0].outcome, kept);
    let _: &Binding = &summary.results[0].binding;
}
