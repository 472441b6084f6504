//! Unit tests of [`Shared`](super::Shared): replies, pushes, routes and closing, fed frame by
//! frame without a connection.

use super::*;
use crate::pane::PaneEvent;
use relay_protocol::message::{Attached, Exited, Output};
use relay_protocol::{Binding, EndReason, ExitStatus, Incarnation, PaneKey, Request, TermSize};

fn binding(counter: u64) -> Binding {
    Binding {
        pane: PaneKey::new("w", "t", "l"),
        pty: PtyId {
            incarnation: Incarnation(7),
            counter,
        },
    }
}

fn shared() -> Shared {
    let (tx, _rx) = mpsc::channel(1);
    Shared::new(tx.downgrade(), 1 << 20)
}

fn frame(m: Message) -> Vec<u8> {
    m.to_bytes()
}

/// The agent's `Attached` reply to request `id` for `b`, from offset 0.
fn attached_reply(id: u64, b: &Binding) -> Vec<u8> {
    frame(Message::Response(
        id,
        Response::Attached(Attached {
            binding: b.clone(),
            replay_from: 0,
            end_offset: 0,
            lost: 0,
            size: TermSize::default(),
        }),
    ))
}

#[test]
fn attach_reply_installs_the_subscriber_before_the_next_push() {
    let shared = shared();
    let (tx, mut rx) = oneshot::channel();
    let (sink, mut q) = PaneSink::new(1 << 20);
    shared
        .register(5, Pending::Attach(tx, Route::session(sink)))
        .unwrap();
    let b = binding(1);
    shared.dispatch(&attached_reply(5, &b));
    shared.dispatch(&frame(Message::Push(Push::Output(Output {
        pty: b.pty,
        offset: 0,
        data: b"hi".to_vec(),
    }))));
    assert!(matches!(rx.try_recv(), Ok(Ok(Response::Attached(_)))));
    assert_eq!(
        q.rx.try_recv().unwrap(),
        PaneEvent::Output {
            offset: 0,
            data: b"hi".to_vec()
        }
    );
}

#[test]
fn open_reply_installs_the_subscriber_before_the_next_push() {
    let shared = shared();
    let (tx, mut rx) = oneshot::channel();
    let (sink, mut q) = PaneSink::new(1 << 20);
    shared
        .register(6, Pending::Attach(tx, Route::session(sink)))
        .unwrap();
    let b = binding(3);
    let attached = Attached {
        binding: b.clone(),
        replay_from: 0,
        end_offset: 0,
        lost: 0,
        size: TermSize::default(),
    };
    let created = relay_protocol::message::Created {
        binding: b.clone(),
        existed: false,
    };
    shared.dispatch(&frame(Message::Response(
        6,
        Response::Opened(relay_protocol::message::Opened { created, attached }),
    )));
    shared.dispatch(&frame(Message::Push(Push::Exited(Exited {
        binding: b.clone(),
        exit: ExitStatus {
            code: 3,
            signal: None,
        },
        reason: EndReason::Exited,
        event_key: 0,
    }))));
    assert!(matches!(rx.try_recv(), Ok(Ok(Response::Opened(_)))));
    assert!(
        matches!(q.rx.try_recv(), Ok(PaneEvent::Exited { .. })),
        "the exit right after the reply reaches the new subscriber"
    );
}

#[test]
fn exit_for_a_stale_binding_is_dropped() {
    let shared = shared();
    let (tx, _rx) = oneshot::channel();
    let (sink, mut q) = PaneSink::new(1 << 20);
    shared
        .register(5, Pending::Attach(tx, Route::session(sink)))
        .unwrap();
    let b = binding(2);
    shared.dispatch(&attached_reply(5, &b));
    let mut stale = b.clone();
    stale.pane = PaneKey::new("other", "t", "l");
    shared.dispatch(&frame(Message::Push(Push::Exited(Exited {
        binding: stale,
        exit: ExitStatus {
            code: 0,
            signal: None,
        },
        reason: EndReason::Exited,
        event_key: 0,
    }))));
    assert!(q.rx.try_recv().is_err(), "nothing delivered");
}

#[test]
fn closing_fails_pending_requests_and_refuses_new_ones() {
    let shared = shared();
    let (tx, mut rx) = oneshot::channel();
    shared.register(9, Pending::Reply(tx)).unwrap();
    shared.close("bridge exited".into());
    let err = rx.try_recv().unwrap().unwrap_err();
    assert!(err.is_connection_lost(), "{err}");
    let (tx2, _rx2) = oneshot::channel();
    let err = shared.register(10, Pending::Reply(tx2)).unwrap_err();
    assert!(err.to_string().contains("bridge exited"), "{err}");
    assert!(shared.cancel.is_cancelled());
}

#[test]
fn agent_error_reply_becomes_a_typed_error() {
    let shared = shared();
    let (tx, mut rx) = oneshot::channel();
    shared.register(3, Pending::Reply(tx)).unwrap();
    shared.dispatch(&frame(Message::Response(
        3,
        Response::Error(relay_protocol::ErrorReply::NotFound {
            pane: PaneKey::new("w", "t", "l"),
        }),
    )));
    assert!(rx.try_recv().unwrap().unwrap_err().is_not_found());
    // A request from the agent is ignored rather than crashing the reader.
    shared.dispatch(&frame(Message::Request(
        4,
        Request::Ping(relay_protocol::message::Ping { nonce: 1 }),
    )));
}

/// A late re-attach reply (a host resuming an old handle) must not take the PTY's
/// subscription away from a newer attach on the same connection.
#[test]
fn a_resume_reply_never_takes_over_a_newer_subscription() {
    let shared = shared();
    let b = binding(4);
    let (newer, mut newer_q) = PaneSink::new(1 << 20);
    let (tx, _rx) = oneshot::channel();
    shared
        .register(5, Pending::Attach(tx, Route::session(newer)))
        .unwrap();
    shared.dispatch(&attached_reply(5, &b));
    let (older, mut older_q) = PaneSink::new(1 << 20);
    older.started(0, 0, false);
    let (tx, _rx) = oneshot::channel();
    let resume = Route::host(older, RouteStart::Resume { cap: 1 << 20 });
    shared.register(6, Pending::Attach(tx, resume)).unwrap();
    shared.dispatch(&attached_reply(6, &b));
    shared.dispatch(&frame(Message::Push(Push::Output(Output {
        pty: b.pty,
        offset: 0,
        data: b"x".to_vec(),
    }))));
    assert!(
        matches!(newer_q.rx.try_recv(), Ok(PaneEvent::Output { .. })),
        "the newer subscription keeps the output"
    );
    assert!(
        older_q.rx.try_recv().is_err(),
        "the late resume got nothing"
    );
}
