//! `Open` (create-or-attach in one step): a command that ends at once is seen whole, with its
//! exit; a live pane is attached, never respawned (rule D).

use relay_protocol::message::Detach;
use relay_protocol::{EndReason, ErrorReply, ExitStatus, LeaseState, Request};

use crate::support::{children, contains, pane, Home};

const QUICK: &[&str] = &["sh", "-c", "printf quick-output; exit 3"];

/// A command that exits within milliseconds: `Open` from offset 0 delivers exactly its output,
/// then `Exited` with its code — every time, whether the PTY ends before or after the
/// subscription's task first runs. (Create then Attach loses this race: Attach on the ended pane
/// is `Ended`, rule B.)
#[test]
fn open_delivers_a_quick_commands_whole_output_and_exit_code() {
    let home = Home::new();
    home.start_daemon();
    let mut c = home.client();
    for i in 0..20 {
        let p = pane(&format!("quick-{i}"));
        let opened = c.open(&p, QUICK, Some(0)).unwrap();
        assert!(!opened.created.existed, "round {i}: a new PTY");
        let a = &opened.attached;
        assert_eq!(a.binding, opened.created.binding, "round {i}");
        assert_eq!((a.replay_from, a.lost), (0, 0), "round {i}");
        let pty = a.binding.pty;
        let (out, exited) = c.output_until_exit(pty, 0);
        assert_eq!(String::from_utf8_lossy(&out), "quick-output", "round {i}");
        assert_eq!(
            exited.exit,
            ExitStatus {
                code: 3,
                signal: None
            },
            "round {i}"
        );
        assert_eq!(exited.reason, EndReason::Exited, "round {i}");
        assert_eq!(exited.event_key, out.len() as u64, "round {i}");
        assert_eq!(exited.binding, opened.created.binding, "round {i}");
        // The ended pane stays ended for Attach (rule B), and the lease is not left attached.
        assert!(matches!(
            c.attach(&p, None, Some(0)),
            Err(ErrorReply::Ended { .. })
        ));
        assert_eq!(c.lease(pty).state, LeaseState::Ended, "round {i}");
    }
}

/// `Open` on a pane with a live PTY attaches it with `existed: true` and spawns nothing (rule D),
/// whatever spec it carries; the subscription then gets replay, new output and the exit.
#[test]
fn open_on_a_live_pane_attaches_it_and_spawns_nothing() {
    let home = Home::new();
    home.start_daemon();
    let daemon = home.daemons()[0];
    let mut c = home.client();
    let p = pane("live");
    let created = c.create(
        &p,
        &[
            "sh",
            "-c",
            "printf ready; read x; printf \"got-$x\"; exit 4",
        ],
    );
    let kids = children(daemon);
    assert_eq!(kids.len(), 1);

    let mut c2 = home.client();
    let opened = c2.open(&p, QUICK, Some(0)).unwrap();
    assert!(opened.created.existed, "the live PTY is reused");
    assert_eq!(opened.created.binding, created.binding);
    assert_eq!(opened.attached.binding, created.binding);
    assert_eq!(children(daemon), kids, "no second process");
    assert_eq!(c2.leases().len(), 1, "no second lease");
    assert_eq!(c2.lease(created.binding.pty).state, LeaseState::Attached);

    // Subscribed while live; the PTY ends afterwards: replay, new output, then Exited.
    let pty = created.binding.pty;
    let early = c2.output_until(pty, 0, |b| contains(b, "ready"));
    c.input(&created.binding, "yes\n").unwrap();
    let (rest, exited) = c2.output_until_exit(pty, early.len() as u64);
    let all = [early, rest].concat();
    assert!(
        contains(&all, "got-yes"),
        "{:?}",
        String::from_utf8_lossy(&all)
    );
    assert!(
        !contains(&all, "quick-output"),
        "the Open's spec did not run"
    );
    assert_eq!(exited.exit.code, 4);
    assert_eq!(exited.event_key, all.len() as u64);
}

/// `Open` after the pane's PTY ended creates a new one (like Create; the old lease stays as
/// history); a failed spawn is `SpawnFailed` and records nothing; Detach of an opened binding
/// works like after Attach.
#[test]
fn open_respawns_an_ended_pane_reports_spawn_failures_and_detaches() {
    let home = Home::new();
    home.start_daemon();
    let mut c = home.client();
    let p = pane("again");
    let first = c.open(&p, QUICK, Some(0)).unwrap();
    let (_, _) = c.output_until_exit(first.created.binding.pty, 0);

    let second = c
        .open(&p, &["sh", "-c", "printf second; exec sleep 1000"], Some(0))
        .unwrap();
    assert!(!second.created.existed);
    assert_ne!(second.created.binding.pty, first.created.binding.pty);
    let b = second.created.binding.clone();
    let out = c.output_until(b.pty, 0, |o| contains(o, "second"));
    assert_eq!(out, b"second");
    assert_eq!(c.leases().len(), 2, "the ended lease stays as history");

    c.mutate(Request::Detach(Detach { binding: b.clone() }))
        .unwrap();
    assert_eq!(c.lease(b.pty).state, LeaseState::Detached);

    let missing = pane("nowhere");
    let mut bad = crate::support::spec(&["sh"]);
    bad.cwd = Some("/no/such/dir".into());
    let reply = c.request(Request::Open(relay_protocol::message::Open {
        pane: missing.clone(),
        spec: bad,
        resume_from: Some(0),
    }));
    assert!(
        matches!(
            reply,
            relay_protocol::Response::Error(ErrorReply::SpawnFailed { .. })
        ),
        "{reply:?}"
    );
    assert!(matches!(
        c.attach(&missing, None, None),
        Err(ErrorReply::NotFound { .. })
    ));
}
