//! Oracle tests of rules A (unknown is not dead), B (attach never creates), C (exact-binding
//! fencing) and D (cardinality).

use relay_protocol::message::{Detach, Kill, Protect, Replace, Resize, Signal};
use relay_protocol::{
    Binding, EndReason, ErrorReply, Incarnation, LeaseState, PtyId, Request, Response, TermSize,
};

use crate::support::{alive, children, contains, pane, spec, wait_until, Home, WAIT};

/// Rule B: attaching to an unknown pane (or an ended one) answers NotFound / Ended and the
/// daemon spawns nothing.
#[test]
fn rule_b_attach_to_unknown_pane_is_not_found_and_spawns_nothing() {
    let home = Home::new();
    home.start_daemon();
    let mut c = home.client();
    let daemon = c.status().pid;
    let p = pane("known");
    c.create(&p, &["sh"]);
    let before = children(daemon);
    assert_eq!(before.len(), 1, "one shell: {before:?}");

    let unknown = pane("never-created");
    assert_eq!(
        c.attach(&unknown, None, Some(0)),
        Err(ErrorReply::NotFound {
            pane: unknown.clone()
        })
    );
    // An ended pane is reported as ended, not revived.
    let ended = pane("ended");
    let created = c.create(&ended, &["true"]);
    assert!(wait_until(WAIT, || c.lease(created.binding.pty).state
        == LeaseState::Ended));
    match c.attach(&ended, Some(created.binding.pty), None) {
        Err(ErrorReply::Ended {
            pty, reason, exit, ..
        }) => {
            assert_eq!(pty, created.binding.pty);
            assert_eq!(reason, EndReason::Exited);
            assert_eq!(exit.map(|e| e.code), Some(0));
        }
        other => panic!("expected Ended, got {other:?}"),
    }
    assert_eq!(children(daemon), before, "attach spawned nothing");
    assert!(c.leases().iter().all(|l| l.binding.pane != unknown));
}

/// Rule D: a second create for a pane with a live PTY returns the same binding with
/// `existed: true` and spawns nothing, also when two connections create at once.
#[test]
fn rule_d_second_create_returns_the_existing_binding() {
    let home = Home::new();
    home.start_daemon();
    let mut c = home.client();
    let daemon = c.status().pid;
    let p = pane("once");
    let first = c.create(&p, &["sh"]);
    assert!(!first.existed);
    let kids = children(daemon);
    assert_eq!(kids.len(), 1);

    let second = c.create(&p, &["sh", "-c", "echo other"]);
    assert!(second.existed);
    assert_eq!(second.binding, first.binding);
    assert_eq!(children(daemon), kids, "no second shell");

    // Concurrent creates of a new pane from two connections: one PTY.
    let q = pane("race");
    let mut c1 = home.client();
    let mut c2 = home.client();
    let send_create = |c: &mut crate::support::Client| {
        c.send(Request::Create(relay_protocol::message::Create {
            pane: q.clone(),
            // A shell that waits for input: the test machine's login shell and dotfiles must
            // not decide whether it stays alive.
            spec: spec(&["sh"]),
        }))
    };
    let (id1, id2) = (send_create(&mut c1), send_create(&mut c2));
    let (r1, r2) = (c1.reply(id1), c2.reply(id2));
    let (b1, b2) = match (r1, r2) {
        (relay_protocol::Response::Created(a), relay_protocol::Response::Created(b)) => {
            assert_ne!(a.existed, b.existed, "exactly one create spawned");
            (a.binding, b.binding)
        }
        other => panic!("expected two Created, got {other:?}"),
    };
    assert_eq!(b1, b2);
    assert_eq!(children(daemon).len(), 2);
}

/// Rule C: every mutation (input, resize, signal, kill, detach, protect) naming a binding that
/// is not the pane's live one is refused with Mismatch, and no shell is touched: a wrong
/// counter, a wrong incarnation, the right PTY under another pane's key, and a superseded
/// binding (which only protect and kill may name: they target live or superseded leases, and
/// name exactly that one). A mutation
/// that looked the PTY up by id instead of through the fence would signal, end, detach or
/// protect another pane's shell, and this test would see it.
#[test]
fn rule_c_stale_bindings_are_refused_and_the_shell_is_unaffected() {
    let home = Home::new();
    home.start_daemon();
    let mut c = home.client();
    let p = pane("fenced");
    let good = c.create(&p, &["sh"]).binding;
    let a = c.attach(&p, Some(good.pty), Some(0)).unwrap();
    let q = pane("neighbour");
    let neighbour = c.create(&q, &["sh"]).binding;
    c.attach(&q, Some(neighbour.pty), Some(0)).unwrap();
    let r = pane("replaced");
    let superseded = c.create(&r, &["sh"]).binding;
    let replacement = match c.request(Request::Replace(Replace {
        old: superseded.clone(),
        spec: spec(&["sh"]),
    })) {
        Response::Created(created) => created.binding,
        other => panic!("expected Created, got {other:?}"),
    };
    let pids: Vec<u32> = [&good, &neighbour, &superseded, &replacement]
        .iter()
        .map(|b| c.lease(b.pty).pid.unwrap())
        .collect();

    let mismatch = |bad: &Binding, current: &Binding| ErrorReply::Mismatch {
        pane: bad.pane.clone(),
        expected: bad.pty,
        current: Some(current.pty),
    };
    // (binding, what a mutation on it answers, whether protect and kill may target it)
    let stale: Vec<(Binding, ErrorReply, bool)> = [
        // A counter this incarnation never gave out.
        Binding {
            pane: p.clone(),
            pty: PtyId {
                counter: good.pty.counter + 1000,
                ..good.pty
            },
        },
        // Another incarnation's.
        Binding {
            pane: p.clone(),
            pty: PtyId {
                incarnation: Incarnation(good.pty.incarnation.0 ^ 1),
                ..good.pty
            },
        },
        // The right PTY under another pane's key.
        Binding {
            pane: q.clone(),
            pty: good.pty,
        },
    ]
    .into_iter()
    .map(|bad| {
        let current = if bad.pane == q { &neighbour } else { &good };
        let want = mismatch(&bad, current);
        (bad, want, false)
    })
    // Superseded: refused for every mutation but protect and kill.
    .chain([(
        superseded.clone(),
        mismatch(&superseded, &replacement),
        true,
    )])
    .collect();

    for (bad, want, targetable) in stale {
        let requests = [
            (
                "resize",
                Request::Resize(Resize {
                    binding: bad.clone(),
                    size: TermSize { cols: 33, rows: 11 },
                }),
            ),
            (
                "signal",
                Request::Signal(Signal {
                    binding: bad.clone(),
                    signal: 9,
                }),
            ),
            (
                "detach",
                Request::Detach(Detach {
                    binding: bad.clone(),
                }),
            ),
        ];
        assert_eq!(
            c.input(&bad, "echo STALE-INPUT\n"),
            Err(want.clone()),
            "input on {bad}"
        );
        for (what, req) in requests {
            assert_eq!(c.mutate(req), Err(want.clone()), "{what} on {bad}");
        }
        let targeted = if targetable { Ok(()) } else { Err(want) };
        let req = Request::Protect(Protect {
            binding: bad.clone(),
            protected: true,
        });
        assert_eq!(c.mutate(req), targeted, "protect on {bad}");
        let protected: Vec<PtyId> = c
            .leases()
            .into_iter()
            .filter(|l| l.protected)
            .map(|l| l.binding.pty)
            .collect();
        let named: &[PtyId] = if targetable { &[bad.pty] } else { &[] };
        assert_eq!(
            protected, named,
            "protect on {bad} protected exactly what it named"
        );
        let req = Request::Kill(Kill {
            binding: bad.clone(),
        });
        assert_eq!(c.mutate(req), targeted, "kill on {bad}");
    }

    // The superseded shell, named exactly, was ended; the others still run, the live ones kept
    // their size, attachment and protection, and never saw the stale input.
    assert!(
        wait_until(WAIT, || !alive(pids[2])),
        "the superseded shell ended"
    );
    for pid in [pids[0], pids[1], pids[3]] {
        assert!(alive(pid), "shell {pid} was signalled or ended");
    }
    c.input(&good, "stty size; echo fenced-$((2+3))\n").unwrap();
    let out = c.output_until(good.pty, a.replay_from, |b| contains(b, "fenced-5"));
    let text = String::from_utf8_lossy(&out);
    assert!(contains(&out, "30 100"), "size unchanged: {text:?}");
    assert!(!contains(&out, "STALE"), "{text:?}");
    for live in [&good, &neighbour] {
        let lease = c.lease(live.pty);
        assert_eq!(lease.state, LeaseState::Attached, "{live}");
        assert_eq!(lease.attached, 1, "{live}");
        assert!(!lease.protected, "{live}");
    }
    assert!(!c.lease(replacement.pty).protected);
}

/// Rule A: a dropped client connection kills nothing; the lease becomes detached.
#[test]
fn rule_a_dropped_connection_kills_nothing() {
    let home = Home::new();
    home.start_daemon();
    let mut observer = home.client();
    let p = pane("survivor");
    let pty;
    {
        let mut c = home.client();
        let created = c.create(&p, &["sh"]);
        pty = created.binding.pty;
        c.attach(&p, Some(pty), None).unwrap();
        assert_eq!(observer.lease(pty).state, LeaseState::Attached);
        assert_eq!(observer.lease(pty).attached, 1);
    } // The connection drops here without detaching.
    assert!(wait_until(WAIT, || observer.lease(pty).state == LeaseState::Detached));
    let lease = observer.lease(pty);
    assert_eq!(lease.attached, 0);
    assert!(alive(lease.pid.unwrap()), "shell still running");
    // And it can be attached again: the same PTY.
    let again = observer.attach(&p, Some(pty), None).unwrap();
    assert_eq!(again.binding.pty, pty);
}
