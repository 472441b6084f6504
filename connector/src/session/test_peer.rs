//! A scripted agent for unit tests of [`Session`] and what is built on it: a session over an
//! in-memory pipe whose far end the test drives frame by frame (no real agent; that one is
//! exercised in `tests/tests/local/`).

use std::sync::Mutex;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use relay_protocol::message::Done;
use relay_protocol::{
    Binding, Capability, ErrorReply, FrameCodec, Incarnation, Limits, Message, PaneKey, PtyId,
    Request, Response, Welcome, MAGIC, PROTOCOL_MAJOR,
};
use tokio_util::codec::Framed;

use super::{ConnectOptions, Session};
use crate::transport::{AgentStream, OpenFuture, OpenOptions, Transport};
use crate::Error;

/// A transport that hands out one pre-made stream.
struct Scripted(Mutex<Option<AgentStream>>);

impl Transport for Scripted {
    fn open(&self, _: OpenOptions) -> OpenFuture<'_> {
        let stream = self.0.lock().unwrap().take();
        Box::pin(async move { stream.ok_or_else(|| Error::spawn("opened twice")) })
    }

    fn describe(&self) -> String {
        "scripted".into()
    }
}

/// The agent's end of the pipe.
pub(crate) type Peer = Framed<tokio::io::DuplexStream, FrameCodec>;

/// Connects a session (default [`ConnectOptions`]) to a peer that answers the hello with
/// `capabilities` and accepts a stated policy.
pub(crate) async fn connect(capabilities: &[&str]) -> (Session, Peer) {
    let (session, peer) = connect_with(capabilities, &ConnectOptions::new("t"), |_| {
        Response::Done(Done {})
    })
    .await;
    (session.unwrap(), peer)
}

/// Connects with `options` to a peer that answers the hello with `capabilities`; the `SetPolicy`
/// the session sends behind its hello is answered with `on_policy(spec)`, or, without the
/// `lifecycle` capability, with `Unsupported` as an agent that does not know the op does.
pub(crate) async fn connect_with(
    capabilities: &[&str],
    options: &ConnectOptions,
    on_policy: impl FnOnce(&str) -> Response,
) -> (Result<Session, Error>, Peer) {
    let (client, server) = tokio::io::duplex(1 << 16);
    let (r, w) = tokio::io::split(client);
    let transport = Scripted(Mutex::new(Some(AgentStream {
        reader: Box::pin(r),
        writer: Box::pin(w),
        guard: Box::new(()),
    })));
    let mut peer = Framed::new(server, FrameCodec::default());
    let welcome = welcome(capabilities);
    let lifecycle = welcome.has(Capability::LIFECYCLE);
    let (session, ()) = tokio::join!(Session::connect_with(&transport, options), async {
        let (id, hello) = next_request(&mut peer).await;
        assert!(matches!((id, hello), (1, Request::Hello(_))));
        // The policy rides with the hello: it arrives before the welcome was sent.
        let policy = match options.policy {
            Some(_) => {
                let rides = tokio::time::timeout(Duration::from_secs(5), next_request(&mut peer));
                Some(
                    rides
                        .await
                        .expect("the policy is sent without waiting for the welcome"),
                )
            }
            None => None,
        };
        reply(&mut peer, 1, Response::Welcome(welcome)).await;
        if let Some(policy) = policy {
            match policy {
                (2, Request::SetPolicy(p)) if lifecycle => {
                    reply(&mut peer, 2, on_policy(&p.spec)).await
                }
                (2, Request::SetPolicy(_)) => {
                    let op = relay_protocol::Op::SetPolicy as u16;
                    let refusal = Response::Error(ErrorReply::Unsupported { op });
                    reply(&mut peer, 2, refusal).await
                }
                other => panic!("the policy comes right after the hello, got {other:?}"),
            }
        }
    });
    (session, peer)
}

/// The scripted agent's welcome: incarnation 1, `capabilities`, default limits.
pub(crate) fn welcome(capabilities: &[&str]) -> Welcome {
    Welcome {
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
    }
}

/// A transport whose every `open` is a new in-memory pipe, its agent's end sent to the test:
/// what a [`Host`](crate::Host) reconnecting to a scripted agent needs.
pub(crate) struct Pipes(pub(crate) tokio::sync::mpsc::UnboundedSender<Peer>);

impl Transport for Pipes {
    fn open(&self, _: OpenOptions) -> OpenFuture<'_> {
        let (client, server) = tokio::io::duplex(1 << 16);
        let sent = self.0.send(Framed::new(server, FrameCodec::default()));
        Box::pin(async move {
            sent.map_err(|_| Error::spawn("the test stopped taking connections"))?;
            let (r, w) = tokio::io::split(client);
            Ok(AgentStream {
                reader: Box::pin(r),
                writer: Box::pin(w),
                guard: Box::new(()),
            })
        })
    }

    fn describe(&self) -> String {
        "pipes".into()
    }
}

/// The next request the session sent.
pub(crate) async fn next_request(peer: &mut Peer) -> (u64, Request) {
    let frame = peer.next().await.expect("a request").expect("a frame");
    match Message::from_bytes(&frame).unwrap() {
        Message::Request(id, req) => (id, req),
        other => panic!("expected a request, got {other:?}"),
    }
}

/// Sends `resp` as the answer to request `id`.
pub(crate) async fn reply(peer: &mut Peer, id: u64, resp: Response) {
    let frame = Message::Response(id, resp).to_bytes();
    peer.send(frame.into()).await.unwrap();
}

/// A binding of pane `w/t/<leaf>` to PTY `1.<counter>`.
pub(crate) fn binding_of(leaf: &str, counter: u64) -> Binding {
    Binding {
        pane: PaneKey::new("w", "t", leaf),
        pty: PtyId {
            incarnation: Incarnation(1),
            counter,
        },
    }
}
