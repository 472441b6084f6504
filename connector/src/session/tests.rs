//! Session tests against a scripted peer over an in-memory pipe: what the connector sends and how
//! it reacts, without a real agent (the real agent is exercised in `tests/tests/local/`).

use futures_util::{SinkExt, StreamExt};
use relay_protocol::{Binding, Capability, Message, Response};

use super::test_peer::{binding_of, connect, connect_with, next_request, reply};
use super::ConnectOptions;
use crate::Error;
use relay_protocol::message::{Done, EndWhen};
use relay_protocol::{ErrorReply, Request};

fn binding() -> Binding {
    binding_of("l", 1)
}

#[tokio::test]
async fn operations_the_agent_did_not_advertise_are_refused_without_sending() {
    let (session, mut peer) = connect(&[Capability::PTY]).await;
    let err = session.protect(&binding(), true).await.unwrap_err();
    assert!(matches!(err, Error::Unsupported(_)), "{err}");
    assert!(err.to_string().contains("protect"), "{err}");
    let err = session.status().await.unwrap_err();
    assert!(matches!(err, Error::Unsupported(_)), "{err}");
    let err = session.input_seq(&binding(), 1, 1, b"x").await.unwrap_err();
    assert!(matches!(err, Error::Unsupported(_)), "{err}");
    let lifecycle = [
        session.set_policy("").await.unwrap_err(),
        session.inspect().await.unwrap_err(),
        session
            .end(&[binding()], EndWhen::Always)
            .await
            .unwrap_err(),
        session
            .replace(&binding(), relay_protocol::SpawnSpec::default())
            .await
            .unwrap_err(),
        session.forget(&[]).await.unwrap_err(),
    ];
    for err in lifecycle {
        assert!(matches!(err, Error::Unsupported(_)), "{err}");
        let msg = err.to_string();
        assert!(
            msg.contains("\"lifecycle\"; agent test on scripted") && msg.contains("upgrade"),
            "{msg}"
        );
    }
    drop(session);
    // The peer sees the stream end without any request after the hello.
    assert!(peer.next().await.is_none(), "nothing was sent");
}

#[tokio::test]
async fn a_dropped_connection_fails_pending_requests_with_connection_lost() {
    let (session, mut peer) = connect(
        &Capability::all()
            .iter()
            .map(|c| c.0.as_str())
            .collect::<Vec<_>>(),
    )
    .await;
    let pending = tokio::spawn({
        let session = session.clone();
        async move { session.list_leases().await }
    });
    // The request reaches the peer, which then goes away without answering.
    let req = peer.next().await.unwrap().unwrap();
    assert!(matches!(
        Message::from_bytes(&req).unwrap(),
        Message::Request(_, relay_protocol::Request::ListLeases(_))
    ));
    drop(peer);
    let err = pending.await.unwrap().unwrap_err();
    assert!(err.is_connection_lost(), "{err}");
    assert!(err.is_transient());
    session.closed().await;
    let err = session.ping().await.unwrap_err();
    assert!(err.is_connection_lost(), "later requests fail fast: {err}");
}

/// Rule G: with a request timeout, an agent that accepts requests but never answers (stopped
/// with SIGSTOP, wedged) fails the request in bounded time with a message saying what to check;
/// the connection stays usable and the late reply is ignored.
#[tokio::test]
async fn a_request_the_agent_never_answers_times_out_with_a_hint() {
    let (session, mut peer) = connect(&[Capability::PTY, Capability::STATUS]).await;
    assert_eq!(session.request_timeout(), None, "no timeout by default");
    let bounded = session.with_request_timeout(Some(std::time::Duration::from_millis(200)));
    let started = std::time::Instant::now();
    let err = bounded.status().await.unwrap_err();
    assert!(err.is_timeout() && err.is_transient(), "{err}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(5),
        "bounded: {:?}",
        started.elapsed()
    );
    let msg = err.to_string();
    assert!(
        msg.contains("status on scripted: the agent did not answer within 200 ms"),
        "{msg}"
    );
    assert!(msg.contains("may be stopped or overloaded"), "{msg}");
    assert_eq!(
        bounded.request_timeout(),
        Some(std::time::Duration::from_millis(200))
    );
    assert_eq!(session.request_timeout(), None, "clones keep their own");

    // The late reply to the status is dropped; the next request gets its own answer.
    let req = peer.next().await.unwrap().unwrap();
    let Message::Request(late_id, _) = Message::from_bytes(&req).unwrap() else {
        panic!("a request");
    };
    let late = Message::Response(late_id, Response::Done(relay_protocol::message::Done {}));
    peer.send(late.to_bytes().into()).await.unwrap();
    let answered = tokio::spawn({
        let bounded = bounded.clone();
        async move { bounded.kill(&binding()).await }
    });
    let req = peer.next().await.unwrap().unwrap();
    let Message::Request(id, relay_protocol::Request::Kill(_)) = Message::from_bytes(&req).unwrap()
    else {
        panic!("a kill request");
    };
    assert_ne!(id, late_id);
    let done = Message::Response(id, Response::Done(relay_protocol::message::Done {}));
    peer.send(done.to_bytes().into()).await.unwrap();
    answered.await.unwrap().unwrap();
    assert!(!session.is_closed());
}

/// An agent before protocol 1.1 has no `open`: `Session::open` creates, then attaches to exactly
/// the PTY it created (`expect`), so an app needs no second code path.
#[tokio::test]
async fn open_falls_back_to_create_then_attach_without_the_capability() {
    let (session, mut peer) = connect(&[Capability::PTY, Capability::CREDIT]).await;
    let opening = tokio::spawn({
        let session = session.clone();
        async move {
            session
                .open(
                    binding().pane,
                    relay_protocol::SpawnSpec::default(),
                    Some(0),
                )
                .await
        }
    });
    let req = peer.next().await.unwrap().unwrap();
    let Message::Request(id, relay_protocol::Request::Create(c)) =
        Message::from_bytes(&req).unwrap()
    else {
        panic!("create first, got {req:?}");
    };
    assert_eq!(c.pane, binding().pane);
    let created = relay_protocol::message::Created {
        binding: binding(),
        existed: false,
    };
    peer.send(
        Message::Response(id, Response::Created(created))
            .to_bytes()
            .into(),
    )
    .await
    .unwrap();
    let req = peer.next().await.unwrap().unwrap();
    let Message::Request(id, relay_protocol::Request::Attach(a)) =
        Message::from_bytes(&req).unwrap()
    else {
        panic!("then attach, got {req:?}");
    };
    assert_eq!(
        a.expect,
        Some(binding().pty),
        "the PTY just created, no other"
    );
    assert_eq!(a.resume_from, Some(0));
    let attached = relay_protocol::message::Attached {
        binding: binding(),
        replay_from: 0,
        end_offset: 0,
        lost: 0,
        size: relay_protocol::TermSize::default(),
    };
    peer.send(
        Message::Response(id, Response::Attached(attached))
            .to_bytes()
            .into(),
    )
    .await
    .unwrap();
    let (created, handle) = opening.await.unwrap().unwrap();
    assert!(!created.existed);
    assert_eq!(handle.binding(), &binding());
}

/// Every connection states the connector's cleanup policy right after the hello, before any
/// other request, when the agent has `lifecycle`.
#[tokio::test]
async fn the_stated_policy_is_the_first_request_after_the_hello() {
    let options = ConnectOptions {
        policy: Some("unused=10m;idle=off".into()),
        ..ConnectOptions::new("t")
    };
    let mut seen = None;
    let (session, mut peer) = connect_with(
        &[Capability::PTY, Capability::LIFECYCLE],
        &options,
        |spec| {
            seen = Some(spec.to_string());
            Response::Done(Done {})
        },
    )
    .await;
    assert_eq!(seen.as_deref(), Some("unused=10m;idle=off"));
    let session = session.unwrap();
    // Nothing else was sent: the next request is the test's own.
    let listing = tokio::spawn(async move { session.list_leases().await });
    let (id, req) = next_request(&mut peer).await;
    assert!(matches!(req, Request::ListLeases(_)), "{req:?}");
    reply(
        &mut peer,
        id,
        Response::Leases(relay_protocol::message::Leases { leases: vec![] }),
    )
    .await;
    assert!(listing.await.unwrap().unwrap().is_empty());
}

/// `relayctl` never creates, so it states no policy: nothing but the hello is sent.
#[tokio::test]
async fn a_connection_without_a_policy_states_none() {
    let options = ConnectOptions {
        policy: None,
        ..ConnectOptions::new("relayctl")
    };
    let (session, mut peer) =
        connect_with(&[Capability::PTY, Capability::LIFECYCLE], &options, |_| {
            panic!("no policy may be stated")
        })
        .await;
    drop(session.unwrap());
    assert!(
        peer.next().await.is_none(),
        "nothing was sent after the hello"
    );
}

/// A refused policy fails the connect with the agent's words, as an error a retry cannot fix.
#[tokio::test]
async fn a_refused_policy_fails_the_connect_with_the_agents_message() {
    let options = ConnectOptions {
        policy: Some("unused=1y".into()),
        ..ConnectOptions::new("t")
    };
    let (session, _peer) =
        connect_with(&[Capability::PTY, Capability::LIFECYCLE], &options, |_| {
            Response::Error(ErrorReply::BadRequest {
                message: "unused=1y: unknown unit \"y\"; use s, m, h or d".into(),
            })
        })
        .await;
    let err = session.unwrap_err();
    assert!(matches!(err, Error::Policy(_)), "{err:?}");
    assert!(!err.is_transient());
    let msg = err.to_string();
    assert!(
        msg.contains("the agent on scripted refused the cleanup policy \"unused=1y\"")
            && msg.contains("unknown unit"),
        "{msg}"
    );
}

/// One workspace's leases: asked as `ListWorkspace` of an agent with `list-workspace`, so its
/// answer does not carry the other workspaces' history; of an older agent, as `ListLeases`,
/// keeping that workspace's rows.
#[tokio::test]
async fn a_workspace_is_listed_alone_where_the_agent_can() {
    use relay_protocol::message::Leases;
    use relay_protocol::{LeaseState, PaneKey, WorkspaceId};
    let lease = |ws: &str, counter| {
        let mut b = binding_of("l", counter);
        b.pane = PaneKey::new(ws, "t", "l");
        relay_testkit::lease(b, LeaseState::Detached)
    };
    let w = WorkspaceId("w".into());

    let (session, mut peer) = connect(&[Capability::PTY, Capability::LIST_WORKSPACE]).await;
    let asking = tokio::spawn({
        let (session, w) = (session.clone(), w.clone());
        async move { session.list_workspace_leases(&w).await }
    });
    let (id, req) = next_request(&mut peer).await;
    match req {
        Request::ListWorkspace(l) => assert_eq!(l.workspace, w),
        other => panic!("expected ListWorkspace, got {:?}", other.op()),
    }
    let rows = vec![lease("w", 1), lease("w", 2)];
    let leases = Response::Leases(Leases {
        leases: rows.clone(),
    });
    reply(&mut peer, id, leases).await;
    assert_eq!(asking.await.unwrap().unwrap(), rows);

    let (session, mut peer) = connect(&[Capability::PTY]).await;
    let asking = tokio::spawn({
        let (session, w) = (session.clone(), w.clone());
        async move { session.list_workspace_leases(&w).await }
    });
    let (id, req) = next_request(&mut peer).await;
    assert!(matches!(req, Request::ListLeases(_)), "{:?}", req.op());
    let all = vec![lease("v", 1), lease("w", 2), lease("wx", 3), lease("w", 4)];
    reply(&mut peer, id, Response::Leases(Leases { leases: all })).await;
    let got = asking.await.unwrap().unwrap();
    assert_eq!(got, vec![lease("w", 2), lease("w", 4)]);
}

/// A lossless window may grow up to the agent's ring when both list `window-growth` (protocol
/// 1.8): the pane queues take twice the ring plus a chunk, as they took twice the window, so the
/// grown window's bytes are never dropped as over the cap. Without it they stay sized for the
/// window.
#[tokio::test]
async fn pane_queues_are_sized_for_windows_that_grow_to_the_ring() {
    let chunk = relay_protocol::MAX_OUTPUT_CHUNK as u64;
    let (fixed, _peer) = connect(&[Capability::PTY, Capability::CREDIT]).await;
    assert_eq!(fixed.queue_cap(), 2 * (1 << 20) + chunk);
    let (growing, _peer) = connect(&[
        Capability::PTY,
        Capability::CREDIT,
        Capability::WINDOW_GROWTH,
    ])
    .await;
    assert_eq!(growing.queue_cap(), 2 * (1 << 22) + chunk);
}
