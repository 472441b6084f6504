//! Table-driven tests of the lease table (rules B, C, D and state transitions).

use super::*;

const INC: Incarnation = Incarnation(7);
const OLD: Incarnation = Incarnation(3);

fn pane(leaf: &str) -> PaneKey {
    PaneKey::new("ws", "tab", leaf)
}

fn pty(incarnation: Incarnation, counter: u64) -> PtyId {
    PtyId {
        incarnation,
        counter,
    }
}

fn binding(leaf: &str, id: PtyId) -> Binding {
    Binding {
        pane: pane(leaf),
        pty: id,
    }
}

/// A table with pane `a` (an ended lease of an older incarnation, then live `INC.1`) and pane `e`
/// (its only PTY `INC.2` exited with code 3).
fn fixture() -> LeaseTable {
    let mut t = LeaseTable::new(INC, 10);
    let mut old = Lease::live(binding("a", pty(OLD, 1)), Some(10), vec![], 0);
    old.phase = Phase::Ended {
        exit: None,
        reason: EndReason::AgentRestarted,
    };
    t.insert(old).unwrap();
    let a = t.mint();
    t.insert(Lease::live(binding("a", a), Some(11), vec![], 1))
        .unwrap();
    let e = t.mint();
    t.insert(Lease::live(binding("e", e), Some(12), vec![], 1))
        .unwrap();
    t.end(
        &e,
        Some(ExitStatus {
            code: 3,
            signal: None,
        }),
        EndReason::Exited,
        2,
    );
    t
}

fn ended(leaf: &str, id: PtyId, exit: Option<u32>, reason: EndReason) -> ErrorReply {
    ErrorReply::Ended {
        pane: pane(leaf),
        pty: id,
        exit: exit.map(|code| ExitStatus { code, signal: None }),
        reason,
    }
}

fn mismatch(leaf: &str, expected: PtyId, current: Option<PtyId>) -> ErrorReply {
    ErrorReply::Mismatch {
        pane: pane(leaf),
        expected,
        current,
    }
}

#[test]
fn mutations_are_fenced_on_the_exact_binding() {
    let t = fixture();
    let cases: Vec<(Binding, Result<PtyId, ErrorReply>)> = vec![
        // The live binding passes.
        (binding("a", pty(INC, 1)), Ok(pty(INC, 1))),
        // Wrong counter or wrong incarnation: mismatch naming the live PTY.
        (
            binding("a", pty(INC, 9)),
            Err(mismatch("a", pty(INC, 9), Some(pty(INC, 1)))),
        ),
        (
            binding("a", pty(OLD, 1)),
            Err(mismatch("a", pty(OLD, 1), Some(pty(INC, 1)))),
        ),
        // A PTY of another pane is a mismatch too (a PTY belongs to one pane).
        (
            binding("a", pty(INC, 2)),
            Err(mismatch("a", pty(INC, 2), Some(pty(INC, 1)))),
        ),
        // Unknown pane.
        (
            binding("zz", pty(INC, 1)),
            Err(ErrorReply::NotFound { pane: pane("zz") }),
        ),
        // Ended PTY and nothing live: ended with its record.
        (
            binding("e", pty(INC, 2)),
            Err(ended("e", pty(INC, 2), Some(3), EndReason::Exited)),
        ),
        // Unknown PTY on a pane with nothing live: mismatch with no current PTY.
        (
            binding("e", pty(INC, 5)),
            Err(mismatch("e", pty(INC, 5), None)),
        ),
    ];
    for (b, want) in cases {
        let got = t.check_binding(&b).map(|l| l.binding.pty);
        assert_eq!(got, want, "binding {b}");
    }
}

#[test]
fn attach_checks_never_create() {
    let mut t = fixture();
    let before = t.leases().count();
    let cases: Vec<(&str, Option<PtyId>, Result<PtyId, ErrorReply>)> = vec![
        ("a", None, Ok(pty(INC, 1))),
        ("a", Some(pty(INC, 1)), Ok(pty(INC, 1))),
        (
            "a",
            Some(pty(OLD, 1)),
            Err(mismatch("a", pty(OLD, 1), Some(pty(INC, 1)))),
        ),
        (
            "nope",
            None,
            Err(ErrorReply::NotFound { pane: pane("nope") }),
        ),
        (
            "e",
            None,
            Err(ended("e", pty(INC, 2), Some(3), EndReason::Exited)),
        ),
        (
            "e",
            Some(pty(INC, 2)),
            Err(ended("e", pty(INC, 2), Some(3), EndReason::Exited)),
        ),
        // Expecting an unknown PTY on an ended pane reports the newest end.
        (
            "e",
            Some(pty(INC, 8)),
            Err(ended("e", pty(INC, 2), Some(3), EndReason::Exited)),
        ),
    ];
    for (leaf, expect, want) in cases {
        let got = t.check_attach(&pane(leaf), expect).map(|l| l.binding.pty);
        assert_eq!(got, want, "pane {leaf} expect {expect:?}");
    }
    assert_eq!(t.leases().count(), before, "checks added no lease");
    assert_eq!(t.mint(), pty(INC, 3), "checks minted no id");
}

#[test]
fn a_pane_has_at_most_one_live_lease() {
    let mut t = fixture();
    let id = t.mint();
    let err = t
        .insert(Lease::live(binding("a", id), None, vec![], 5))
        .unwrap_err();
    assert!(matches!(err, ErrorReply::Internal { .. }), "{err:?}");
    assert_eq!(t.live(&pane("a")).unwrap().binding.pty, pty(INC, 1));
    // After the live PTY ends, a new one may be inserted; the old one stays as history.
    t.end(&pty(INC, 1), None, EndReason::Exited, 6);
    t.insert(Lease::live(binding("a", id), None, vec![], 7))
        .unwrap();
    assert_eq!(t.live(&pane("a")).unwrap().binding.pty, id);
    let history: Vec<_> = t
        .leases()
        .filter(|l| l.binding.pane == pane("a"))
        .map(|l| (l.binding.pty, l.state()))
        .collect();
    assert_eq!(
        history,
        vec![
            (pty(OLD, 1), LeaseState::Ended),
            (pty(INC, 1), LeaseState::Ended),
            (id, LeaseState::Detached)
        ]
    );
    // The same PTY id twice is refused.
    assert!(t
        .insert(Lease::live(binding("b", id), None, vec![], 8))
        .is_err());
}

#[test]
fn minted_ids_are_never_reused() {
    let mut t = LeaseTable::new(INC, 10);
    let ids: Vec<_> = (0..5).map(|_| t.mint()).collect();
    assert_eq!(
        ids.iter().map(|p| p.counter).collect::<Vec<_>>(),
        [1, 2, 3, 4, 5]
    );
    assert!(ids.iter().all(|p| p.incarnation == INC));
}

#[test]
fn state_transitions() {
    let mut t = fixture();
    let a = pty(INC, 1);
    let state = |t: &LeaseTable| {
        let l = t.get(&a).unwrap();
        (l.state(), l.info().attached, l.since_ms)
    };
    assert_eq!(state(&t), (LeaseState::Detached, 0, 1));
    assert!(t.attach(&a, 10));
    assert_eq!(state(&t), (LeaseState::Attached, 1, 10));
    assert!(t.attach(&a, 11));
    assert_eq!(state(&t), (LeaseState::Attached, 2, 10));
    t.detach(&a, 12);
    assert_eq!(state(&t), (LeaseState::Attached, 1, 10));
    t.detach(&a, 13);
    assert_eq!(state(&t), (LeaseState::Detached, 0, 13));
    t.detach(&a, 14);
    assert_eq!(state(&t), (LeaseState::Detached, 0, 13), "no underflow");
    // A requested end decides the reason and detail, whatever the caller saw; the first wins.
    assert!(t.mark_ending(&a, EndReason::Killed, "killed by operator".into()));
    assert!(t.mark_ending(&a, EndReason::Expired, "policy".into()));
    let exit = Some(ExitStatus {
        code: 1,
        signal: Some("Hangup".into()),
    });
    let l = t.end(&a, exit.clone(), EndReason::Exited, 20).unwrap();
    assert_eq!(
        l.phase,
        Phase::Ended {
            exit: exit.clone(),
            reason: EndReason::Killed
        }
    );
    assert_eq!(
        t.get(&a).unwrap().detail.as_deref(),
        Some("killed by operator")
    );
    assert!(
        !t.mark_ending(&a, EndReason::Killed, "again".into()),
        "ended"
    );
    // A second end keeps the first record; attach to an ended lease does nothing.
    t.end(&a, None, EndReason::AgentRestarted, 30);
    assert_eq!(t.get(&a).unwrap().info().reason, Some(EndReason::Killed));
    assert_eq!(t.get(&a).unwrap().info().exit, exit);
    assert!(!t.attach(&a, 31));
}

#[test]
fn superseded_leases_are_not_live_and_not_ended() {
    let mut t = fixture();
    let a = pty(INC, 1);
    assert!(t.supersede(&a, 5));
    assert_eq!(t.get(&a).unwrap().state(), LeaseState::Superseded);
    assert!(t.live(&pane("a")).is_none());
    assert!(!t.supersede(&a, 6), "only live leases can be superseded");
    assert_eq!(
        t.counts(),
        LeaseCounts {
            attached: 0,
            detached: 0,
            ended: 2,
            superseded: 1
        }
    );
    // Its process may still end later; that is recorded.
    t.end(&a, None, EndReason::Exited, 7);
    assert_eq!(t.get(&a).unwrap().state(), LeaseState::Ended);
}

#[test]
fn previous_incarnations_end_as_agent_restarted() {
    let mut t = LeaseTable::new(INC, 10);
    t.insert(Lease::live(binding("x", pty(OLD, 1)), Some(5), vec![], 0))
        .unwrap();
    let mut done = Lease::live(binding("y", pty(OLD, 2)), Some(6), vec![], 0);
    done.phase = Phase::Ended {
        exit: Some(ExitStatus {
            code: 0,
            signal: None,
        }),
        reason: EndReason::Exited,
    };
    t.insert(done).unwrap();
    let mine = t.mint();
    t.insert(Lease::live(binding("z", mine), Some(7), vec![], 0))
        .unwrap();
    assert_eq!(t.end_previous_incarnations(50), vec![pty(OLD, 1)]);
    let reasons: Vec<_> = t
        .leases()
        .map(|l| (l.binding.pty, l.info().reason, l.info().exit.is_some()))
        .collect();
    assert_eq!(
        reasons,
        vec![
            (pty(OLD, 1), Some(EndReason::AgentRestarted), false),
            (pty(OLD, 2), Some(EndReason::Exited), true),
            (mine, None, false),
        ]
    );
}

#[test]
fn ended_history_is_bounded() {
    let mut t = LeaseTable::new(INC, 3);
    for i in 0..5 {
        let id = t.mint();
        t.insert(Lease::live(binding(&format!("p{i}"), id), None, vec![], 0))
            .unwrap();
        t.end(&id, None, EndReason::Exited, i);
    }
    let live = t.mint();
    t.insert(Lease::live(binding("live", live), None, vec![], 0))
        .unwrap();
    let kept: Vec<u64> = t.leases().map(|l| l.binding.pty.counter).collect();
    assert_eq!(kept, vec![6, 3, 4, 5], "oldest ended forgotten, live kept");
    assert!(matches!(
        t.check_attach(&pane("p0"), None),
        Err(ErrorReply::NotFound { .. })
    ));
}

/// `remove` undoes an insert completely: no history row, the pane can get a new live lease, and
/// ended history bookkeeping is unaffected.
#[test]
fn removed_lease_leaves_no_trace() {
    let mut t = fixture();
    let before: Vec<PtyId> = t.leases().map(|l| l.binding.pty).collect();
    let id = t.mint();
    t.insert(Lease::live(binding("new", id), Some(20), vec![], 3))
        .unwrap();
    assert_eq!(t.remove(&id).map(|l| l.binding.pty), Some(id));
    assert!(t.remove(&id).is_none(), "removed once");
    assert!(t.get(&id).is_none());
    assert!(matches!(
        t.check_attach(&pane("new"), None),
        Err(ErrorReply::NotFound { .. })
    ));
    let after: Vec<PtyId> = t.leases().map(|l| l.binding.pty).collect();
    assert_eq!(after, before);
    // The pane can be created again.
    let again = t.mint();
    t.insert(Lease::live(binding("new", again), Some(21), vec![], 4))
        .unwrap();
    assert_eq!(t.live(&pane("new")).map(|l| l.binding.pty), Some(again));
}

/// A binding whose ended lease left the bounded history (or was forgotten) reads as ended with
/// reason `Forgotten`, never as "no such pane"; an id this incarnation never minted does not.
#[test]
fn an_evicted_or_forgotten_lease_reads_as_forgotten() {
    let mut t = LeaseTable::new(Incarnation(9), 1);
    let old = t.mint();
    t.insert(Lease::live(binding("a", old), None, vec![], 0))
        .unwrap();
    t.end(&old, None, EndReason::Exited, 1);
    let newer = t.mint();
    t.insert(Lease::live(binding("b", newer), None, vec![], 0))
        .unwrap();
    t.end(&newer, None, EndReason::Exited, 2); // evicts `old` (history of 1)
    let forgotten = |r: Result<&Lease, ErrorReply>| {
        matches!(
            r,
            Err(ErrorReply::Ended {
                reason: EndReason::Forgotten,
                exit: None,
                ..
            })
        )
    };
    assert!(forgotten(t.check_attach(&pane("a"), Some(old))));
    assert!(forgotten(t.check_binding(&binding("a", old))));
    // Without an expected PTY there is nothing to say about the pane: NotFound as before.
    assert!(matches!(
        t.check_attach(&pane("a"), None),
        Err(ErrorReply::NotFound { .. })
    ));
    // Never minted here: not forgotten.
    let never = PtyId {
        incarnation: Incarnation(9),
        counter: 99,
    };
    assert!(matches!(
        t.check_binding(&binding("a", never)),
        Err(ErrorReply::NotFound { .. })
    ));
    // Another incarnation's PTY cannot be running under this one.
    let earlier = PtyId {
        incarnation: Incarnation(8),
        counter: 1,
    };
    assert!(forgotten(t.check_binding(&binding("a", earlier))));
    // Forget prunes ended leases only.
    let live = t.mint();
    t.insert(Lease::live(binding("c", live), None, vec![], 3))
        .unwrap();
    assert_eq!(
        t.forget(&[live]),
        Vec::<PtyId>::new(),
        "live is never forgotten"
    );
    assert_eq!(t.forget(&[]), vec![newer]);
    assert!(forgotten(t.check_binding(&binding("b", newer))));
    assert!(t.check_binding(&binding("c", live)).is_ok());
}

/// A superseded lease can still be the target of an end by its exact binding, but not of input.
#[test]
fn a_superseded_lease_is_a_target_but_not_bound() {
    let mut t = LeaseTable::new(Incarnation(9), 10);
    let old = t.mint();
    t.insert(Lease::live(binding("a", old), None, vec![], 0))
        .unwrap();
    assert!(t.supersede(&old, 5));
    let new = t.mint();
    t.insert(Lease::live(binding("a", new), None, vec![], 5))
        .unwrap();
    assert_eq!(t.get(&old).unwrap().state(), LeaseState::Superseded);
    assert!(t.check_target(&binding("a", old)).is_ok());
    assert!(matches!(
        t.check_binding(&binding("a", old)),
        Err(ErrorReply::Mismatch { current: Some(c), .. }) if c == new
    ));
    assert!(
        t.check_target(&binding("b", old)).is_err(),
        "another pane's key"
    );
}

/// `workspace_leases` gives exactly the leases `leases` gives for that workspace, in the same
/// order, also next to workspaces whose names share a prefix or sort right before or after it.
#[test]
fn a_workspace_lists_exactly_its_own_leases() {
    let mut t = LeaseTable::new(INC, 100);
    for ws in ["w", "w ", "w/", "v~", "wx", "a", "w\u{7f}"] {
        for tab in ["", "t", "zz"] {
            let id = t.mint();
            let key = PaneKey::new(ws, tab, "0");
            t.insert(Lease::live(Binding { pane: key, pty: id }, None, vec![], 0))
                .unwrap();
            if tab == "t" {
                t.end(&id, None, EndReason::Exited, 1);
                let again = t.mint();
                let key = PaneKey::new(ws, tab, "0");
                t.insert(Lease::live(
                    Binding {
                        pane: key,
                        pty: again,
                    },
                    None,
                    vec![],
                    2,
                ))
                .unwrap();
            }
        }
    }
    for ws in ["w", "w ", "wx", "a", "v~", "absent", ""] {
        let id = WorkspaceId(ws.to_string());
        let got: Vec<PtyId> = t.workspace_leases(&id).map(|l| l.binding.pty).collect();
        let want: Vec<PtyId> = t
            .leases()
            .filter(|l| l.binding.pane.workspace == id)
            .map(|l| l.binding.pty)
            .collect();
        assert_eq!(got, want, "workspace {ws:?}");
        let expected = if ["absent", ""].contains(&ws) { 0 } else { 4 };
        assert_eq!(got.len(), expected, "workspace {ws:?}");
    }
}
