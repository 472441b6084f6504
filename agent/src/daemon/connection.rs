//! One client connection: the Hello/Welcome exchange, the request read loop and the writer task.
//!
//! Frames go out through a bounded queue drained by a writer task, so replies and every
//! subscription's output share the connection fairly and a peer that stops reading only stalls
//! itself. Anything malformed (an oversized or truncated frame, an undecodable envelope or body,
//! a first message that is not Hello) closes *this* connection with a reason logged at warn level
//! (rate-limited: [`crate::log::limit::CLOSING`]);
//! an unknown op code is answered with `Unsupported` and the connection stays open (rule H).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use futures_util::SinkExt;
use relay_protocol::{
    Capability, DecodeError, ErrorReply, FrameCodec, Hello, Limits, Message, Request, Response,
    Welcome, DEFAULT_MAX_FRAME, MAGIC, MAX_OUTPUT_CHUNK, PROTOCOL_MAJOR, PROTOCOL_MINOR,
};
use tokio::net::UnixStream;
use tokio::sync::mpsc;
use tokio_util::codec::FramedWrite;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::daemon::dispatch::dispatch;
use crate::daemon::inbound::{FrameReader, ReadError};
use crate::daemon::stdio_pass::{self, Transport, Writer};
use crate::daemon::subscriptions::{PeerTerms, Session};
use crate::log::limit::{CLIENTS, CLOSING};
use crate::state::State;

/// How long a new connection may take to send Hello.
const HELLO_TIMEOUT: Duration = Duration::from_secs(30);
/// How long queued frames may take to drain when a connection closes.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(2);
/// Room for the envelope around an output chunk.
const ENVELOPE_SLACK: u32 = 64;

static NEXT_CONNECTION: AtomicU64 = AtomicU64::new(1);

type Frames = FrameReader;

/// Serves one accepted connection until it closes or `cancel` fires. Everything it logs carries
/// the span `conn{id, client}` (client id once Hello arrived).
pub async fn serve(stream: UnixStream, state: State, cancel: CancellationToken) {
    let conn = NEXT_CONNECTION.fetch_add(1, Ordering::Relaxed);
    let span = tracing::info_span!("conn", id = conn, client = tracing::field::Empty);
    serve_in_span(stream, state, cancel).instrument(span).await;
}

async fn serve_in_span(stream: UnixStream, state: State, cancel: CancellationToken) {
    let _counted = state.connection();
    let config = state.config();
    let hello_by = tokio::time::Instant::now() + HELLO_TIMEOUT;
    let accepted = tokio::select! {
        _ = cancel.cancelled() => return,
        accepted = tokio::time::timeout_at(hello_by, stdio_pass::accept(stream, config.pass_stdio)) => accepted,
    };
    let Transport {
        reader,
        writer: wr,
        bridge,
    } = match accepted {
        Ok(Ok(transport)) => transport,
        Ok(Err(e)) => {
            warn_close(format!("before the Hello: {e}"));
            return;
        }
        Err(_) => {
            warn_close(format!("no Hello within {HELLO_TIMEOUT:?}"));
            return;
        }
    };
    let mut frames = FrameReader::new(
        reader,
        DEFAULT_MAX_FRAME,
        config.frame_timeout,
        state.frame_budget().clone(),
    );

    let first = tokio::select! {
        _ = cancel.cancelled() => return,
        first = tokio::time::timeout_at(hello_by, frames.next()) => first,
        () = bridge_closed(bridge.as_ref()) => return,
    };
    let (id, hello) = match read_hello(first) {
        Ok(h) => h,
        Err(reason) => {
            if CLOSING.admit() {
                tracing::warn!("closing connection: {reason}");
            }
            return;
        }
    };
    tracing::Span::current().record("client", tracing::field::debug(short(&hello.client_id)));
    // Never send more than the peer accepts; a Hello below the protocol's minimum is refused.
    let peer_max = hello.max_frame.max(DEFAULT_MAX_FRAME);
    let chunk = (MAX_OUTPUT_CHUNK as u32).min(peer_max - ENVELOPE_SLACK) as usize;
    let (out, out_rx) = mpsc::channel(state.config().connection_queue);
    let writer = tokio::spawn(write_loop(wr, out_rx, peer_max).in_current_span());

    if let Err(refusal) = check_hello(&hello, &state) {
        if CLOSING.admit() {
            tracing::warn!("closing connection: {refusal}");
        }
        let _ = out
            .send(Message::Response(id, Response::Error(refusal)))
            .await;
        finish(out, writer).await;
        return;
    }
    let credit = hello.capabilities.iter().any(|c| c.0 == Capability::CREDIT);
    if CLIENTS.admit() {
        tracing::info!(
            "client version {} protocol {}.{}{}",
            short(&hello.client_version),
            hello.major,
            hello.minor,
            if credit {
                ""
            } else {
                " without credit (output is not windowed)"
            }
        );
    }
    let welcome = welcome(&state, chunk);
    if out
        .send(Message::Response(id, Response::Welcome(welcome)))
        .await
        .is_err()
    {
        return;
    }

    let lifecycle = hello
        .capabilities
        .iter()
        .any(|c| c.0 == Capability::LIFECYCLE);
    let window_growth = hello
        .capabilities
        .iter()
        .any(|c| c.0 == Capability::WINDOW_GROWTH);
    let terms = PeerTerms {
        chunk,
        max_frame: peer_max,
        credit,
        lifecycle,
        window_growth,
    };
    // A client id only names the peer's holds (see `crate::output::hold`): 256 bytes tell clients
    // apart.
    let client = hello.client_id.chars().take(256).collect();
    let mut session = Session::new(state, out.clone(), terms, client);
    let reason = tokio::select! {
        _ = cancel.cancelled() => "daemon shutting down".to_string(),
        reason = read_loop(&mut frames, &mut session, &out) => reason,
        () = bridge_closed(bridge.as_ref()) => "the bridge that passed its stdin and stdout exited".into(),
    };
    tracing::debug!("connection ends: {reason}");
    drop(session);
    finish(out, writer).await;
    // The passed stdin and stdout close before the bridge's socket: the bridge exits once the
    // session's output has ended.
    drop(frames);
    drop(bridge);
}

/// Resolves when the bridge behind a passed stdin and stdout is gone; never for a socket.
async fn bridge_closed(bridge: Option<&UnixStream>) {
    match bridge {
        Some(socket) => stdio_pass::closed(socket).await,
        None => std::future::pending().await,
    }
}

/// A peer-supplied string cut for logging (at most 64 characters).
fn short(s: &str) -> String {
    const MAX: usize = 64;
    match s.char_indices().nth(MAX) {
        Some((at, _)) => format!("{}…", &s[..at]),
        None => s.to_string(),
    }
}

/// How often a connection lets go of the subscriptions of PTYs that ended.
const PRUNE_EVERY: Duration = Duration::from_secs(1);

/// Reads and dispatches requests until the connection must close; returns why. Malformed input is
/// logged here at warn level.
async fn read_loop(
    frames: &mut Frames,
    session: &mut Session,
    out: &mpsc::Sender<Message>,
) -> String {
    let mut prune = tokio::time::interval(PRUNE_EVERY);
    prune.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let next = tokio::select! {
            next = frames.next() => next,
            _ = prune.tick() => {
                session.prune_finished();
                continue;
            }
            Some(opened) = session.next_opened() => {
                // Subscribed here, before the reply, so later requests see the subscription.
                let (id, reply) = session.finish_open(opened);
                if out.send(Message::Response(id, reply)).await.is_err() {
                    return "writer closed".into();
                }
                session.start_staged();
                continue;
            }
        };
        let frame = match next {
            None => return "closed by the peer".into(),
            Some(Err(e)) => return warn_close(format!("bad frame: {e}")),
            Some(Ok(frame)) => frame,
        };
        let (id, req) = match Message::from_bytes(&frame) {
            Ok(Message::Request(id, req)) if id != 0 || matches!(req, Request::Ack(_)) => (id, req),
            Ok(Message::Request(_, req)) => {
                return warn_close(format!(
                    "request {:?} with id 0 (ids must be non-zero)",
                    req.op()
                ))
            }
            Ok(other) => {
                return warn_close(format!(
                    "peer sent {:?}, which is not a request",
                    msg_op(&other)
                ))
            }
            Err(DecodeError::UnknownOp { id, op }) => {
                tracing::debug!("unsupported op {op:#06x} (request {id})");
                if id != 0 {
                    let reply = Response::Error(ErrorReply::Unsupported { op });
                    if out.send(Message::Response(id, reply)).await.is_err() {
                        return "writer closed".into();
                    }
                }
                continue;
            }
            Err(e) => return warn_close(format!("undecodable message: {e}")),
        };
        // Its room in the frame budget was given back when it completed: free it now, not
        // after a dispatch that may take long (a create).
        drop(frame);
        if let Some(reply) = dispatch(session, id, req).await {
            if out.send(Message::Response(id, reply)).await.is_err() {
                return "writer closed".into();
            }
        }
        session.start_staged();
    }
}

fn warn_close(reason: String) -> String {
    if CLOSING.admit() {
        tracing::warn!("closing connection: {reason}");
    }
    reason
}

fn msg_op(m: &Message) -> relay_protocol::Op {
    match m {
        Message::Request(_, r) => r.op(),
        Message::Response(_, r) => r.op(),
        Message::Push(p) => p.op(),
    }
}

type FirstFrame = Result<Option<Result<Bytes, ReadError>>, tokio::time::error::Elapsed>;

/// The first frame must be a Hello request.
fn read_hello(first: FirstFrame) -> Result<(u64, Hello), String> {
    let frame = match first {
        Err(_) => return Err(format!("no Hello within {HELLO_TIMEOUT:?}")),
        Ok(None) => return Err("closed before Hello".into()),
        Ok(Some(Err(e))) => return Err(format!("bad first frame: {e}")),
        Ok(Some(Ok(frame))) => frame,
    };
    match Message::from_bytes(&frame) {
        Ok(Message::Request(id, Request::Hello(h))) => Ok((id, h)),
        Ok(other) => Err(format!(
            "expected Hello as the first message, got {:?}; is something else writing to this stream?",
            msg_op(&other)
        )),
        Err(e) => Err(format!(
            "expected Hello as the first message, got undecodable bytes ({e}); is something else writing to this stream?"
        )),
    }
}

/// Magic and major version must match, and `max_frame` must be at least the protocol's minimum
/// (the 1 MiB default: docs/protocol.md §2).
fn check_hello(hello: &Hello, state: &State) -> Result<(), ErrorReply> {
    let agent = &state.config().advertise_version;
    if hello.magic != MAGIC {
        return Err(ErrorReply::Incompatible {
            message: format!(
                "the peer is not speaking the relay protocol (magic {:#010x}, expected {MAGIC:#010x}); connect with a relay connector",
                hello.magic
            ),
        });
    }
    if hello.major != PROTOCOL_MAJOR {
        let fix = if hello.major < PROTOCOL_MAJOR {
            "upgrade the connector (relay) to a version that speaks this protocol"
        } else {
            "upgrade the agent: let the connector deploy its matching relay-agent"
        };
        return Err(ErrorReply::Incompatible {
            message: format!(
                "connector {} speaks protocol {}.{}, agent {agent} speaks {PROTOCOL_MAJOR}.{PROTOCOL_MINOR}; {fix}",
                short(&hello.client_version), hello.major, hello.minor
            ),
        });
    }
    if hello.max_frame < DEFAULT_MAX_FRAME {
        return Err(ErrorReply::Incompatible {
            message: format!(
                "the connector announced max_frame {} bytes, below the minimum of \
                 {DEFAULT_MAX_FRAME} bytes every peer must accept; fix or upgrade the connector",
                hello.max_frame
            ),
        });
    }
    Ok(())
}

fn welcome(state: &State, chunk: usize) -> Welcome {
    let config = state.config();
    Welcome {
        magic: MAGIC,
        major: PROTOCOL_MAJOR,
        minor: PROTOCOL_MINOR,
        agent_version: config.advertise_version.clone(),
        incarnation: state.incarnation(),
        capabilities: Capability::all()
            .into_iter()
            .filter(|c| c.0 != Capability::SCREEN || config.scrollback_lines.is_some())
            .collect(),
        limits: Limits {
            max_frame: DEFAULT_MAX_FRAME,
            window: config.window,
            max_chunk: chunk as u32,
            replay_bytes: config.replay_bytes as u64,
        },
    }
}

/// Lets the writer drain what is queued (bounded), then returns.
async fn finish(out: mpsc::Sender<Message>, writer: tokio::task::JoinHandle<()>) {
    drop(out);
    let abort = writer.abort_handle();
    if tokio::time::timeout(DRAIN_TIMEOUT, writer).await.is_err() {
        abort.abort();
    }
}

/// Writes queued messages as frames, flushing whenever the queue runs empty.
async fn write_loop(wr: Writer, mut rx: mpsc::Receiver<Message>, max: u32) {
    let mut sink = FramedWrite::new(wr, FrameCodec::new(max));
    while let Some(msg) = rx.recv().await {
        let mut batch = vec![msg];
        while batch.len() < 64 {
            match rx.try_recv() {
                Ok(m) => batch.push(m),
                Err(_) => break,
            }
        }
        for msg in batch {
            let Some(bytes) = encode(msg, max) else {
                continue;
            };
            if let Err(e) = sink.feed(bytes).await {
                tracing::debug!("write failed: {e}");
                return;
            }
        }
        if let Err(e) = sink.flush().await {
            tracing::debug!("flush failed: {e}");
            return;
        }
    }
}

/// Encodes a message; a reply too large for the peer becomes a `LimitExceeded` error reply.
fn encode(msg: Message, max: u32) -> Option<Bytes> {
    let bytes = msg.to_bytes();
    if bytes.len() <= max as usize {
        return Some(Bytes::from(bytes));
    }
    match msg {
        Message::Response(id, r) => {
            let err = ErrorReply::LimitExceeded {
                what: format!("{:?} reply of {} bytes", r.op(), bytes.len()),
                limit: u64::from(max),
            };
            Some(Bytes::from(
                Message::Response(id, Response::Error(err)).to_bytes(),
            ))
        }
        other => {
            tracing::error!(
                "dropping a {:?} push larger than {max} bytes",
                msg_op(&other)
            );
            None
        }
    }
}
