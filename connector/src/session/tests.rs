//! Session tests against a scripted peer over an in-memory pipe: what the connector sends and how
//! it reacts, without a real agent (the real agent is exercised in `tests/tests/local.rs`).

use std::sync::Mutex;

use futures_util::{SinkExt, StreamExt};
use relay_protocol::{
    Binding, Capability, FrameCodec, Incarnation, Limits, Message, PaneKey, PtyId, Response,
    Welcome, MAGIC, PROTOCOL_MAJOR,
};
use tokio_util::codec::Framed;

use super::Session;
use crate::transport::{AgentStream, OpenFuture, Transport};
use crate::Error;

/// A transport that hands out one pre-made stream.
struct Scripted(Mutex<Option<AgentStream>>);

impl Transport for Scripted {
    fn open(&self) -> OpenFuture<'_> {
        let stream = self.0.lock().unwrap().take();
        Box::pin(async move { stream.ok_or_else(|| Error::Spawn("opened twice".into())) })
    }

    fn describe(&self) -> String {
        "scripted".into()
    }
}

type Peer = Framed<tokio::io::DuplexStream, FrameCodec>;

/// Connects a session to a peer that answers the hello with `capabilities`.
async fn connect(capabilities: &[&str]) -> (Session, Peer) {
    let (client, server) = tokio::io::duplex(1 << 16);
    let (r, w) = tokio::io::split(client);
    let transport = Scripted(Mutex::new(Some(AgentStream {
        reader: Box::pin(r),
        writer: Box::pin(w),
        guard: Box::new(()),
    })));
    let mut peer = Framed::new(server, FrameCodec::default());
    let welcome = Welcome {
        magic: MAGIC,
        major: PROTOCOL_MAJOR,
        minor: 0,
        agent_version: "test".into(),
        incarnation: Incarnation(1),
        capabilities: capabilities
            .iter()
            .map(|c| Capability(c.to_string()))
            .collect(),
        limits: Limits {
            max_frame: 1 << 20,
            window: 1 << 20,
            max_chunk: 1 << 16,
            replay_bytes: 1 << 22,
        },
    };
    let (session, ()) = tokio::join!(
        async { Session::connect(&transport, "t").await.unwrap() },
        async {
            let hello = peer.next().await.unwrap().unwrap();
            assert!(matches!(
                Message::from_bytes(&hello).unwrap(),
                Message::Request(1, relay_protocol::Request::Hello(_))
            ));
            let reply = Message::Response(1, Response::Welcome(welcome));
            peer.send(reply.to_bytes().into()).await.unwrap();
        }
    );
    (session, peer)
}

fn binding() -> Binding {
    Binding {
        pane: PaneKey::new("w", "t", "l"),
        pty: PtyId {
            incarnation: Incarnation(1),
            counter: 1,
        },
    }
}

#[tokio::test]
async fn operations_the_agent_did_not_advertise_are_refused_without_sending() {
    let (session, mut peer) = connect(&[Capability::PTY]).await;
    let err = session.protect(&binding(), true).await.unwrap_err();
    assert!(matches!(err, Error::Unsupported(_)), "{err}");
    assert!(err.to_string().contains("protect"), "{err}");
    let err = session.status().await.unwrap_err();
    assert!(matches!(err, Error::Unsupported(_)), "{err}");
    // An agent before protocol 1.1 has no `open`: the caller falls back to create + attach.
    let err = session
        .open(
            binding().pane,
            relay_protocol::SpawnSpec::default(),
            Some(0),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Unsupported(_)), "{err}");
    assert!(err.to_string().contains("open"), "{err}");
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
