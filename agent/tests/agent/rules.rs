//! Oracle tests of rules A (unknown is not dead), B (attach never creates), C (exact-binding
//! fencing) and D (cardinality).

use relay_protocol::message::{Kill, Resize};
use relay_protocol::{
    Binding, EndReason, ErrorReply, Incarnation, LeaseState, PtyId, Request, TermSize,
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

/// Rule C: input, resize and kill naming a stale binding (wrong counter or wrong incarnation)
/// are refused with Mismatch, and the shell is unaffected.
#[test]
fn rule_c_stale_bindings_are_refused_and_the_shell_is_unaffected() {
    let home = Home::new();
    home.start_daemon();
    let mut c = home.client();
    let p = pane("fenced");
    let created = c.create(&p, &["sh"]);
    let good = created.binding.clone();
    let pid = c.lease(good.pty).pid.unwrap();
    let a = c.attach(&p, Some(good.pty), Some(0)).unwrap();

    let stale = [
        PtyId {
            counter: good.pty.counter + 1,
            ..good.pty
        },
        PtyId {
            incarnation: Incarnation(good.pty.incarnation.0 ^ 1),
            ..good.pty
        },
    ];
    for pty in stale {
        let bad = Binding {
            pane: p.clone(),
            pty,
        };
        let want = Err(ErrorReply::Mismatch {
            pane: p.clone(),
            expected: pty,
            current: Some(good.pty),
        });
        assert_eq!(c.input(&bad, "echo STALE-INPUT\n"), want);
        let size = TermSize { cols: 33, rows: 11 };
        let resize = Request::Resize(Resize {
            binding: bad.clone(),
            size,
        });
        assert_eq!(c.mutate(resize), want);
        assert_eq!(c.mutate(Request::Kill(Kill { binding: bad })), want);
    }

    // The shell still runs, kept its size, and never saw the stale input.
    c.input(&good, "stty size; echo fenced-$((2+3))\n").unwrap();
    let out = c.output_until(good.pty, a.replay_from, |b| contains(b, "fenced-5"));
    assert!(
        contains(&out, "30 100"),
        "size unchanged: {:?}",
        String::from_utf8_lossy(&out)
    );
    assert!(
        !contains(&out, "STALE"),
        "{:?}",
        String::from_utf8_lossy(&out)
    );
    assert!(alive(pid));
    assert_eq!(c.lease(good.pty).state, LeaseState::Attached);
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
