//! The two tasks of a connection: the reader demultiplexes frames into the [`Shared`] state, the
//! writer drains the bounded request queue and the coalesced acks into the stream.
//!
//! Shutdown: the writer ends when every [`Session`](crate::Session) handle is gone (its queue
//! closes) or the connection is closed; it then shuts the stream down and drops the transport's
//! guard (which, for the local transport, kills the bridge — never the daemon). The reader ends at
//! EOF, on a stream error, or when the connection is closed. Whoever ends first closes the
//! [`Shared`] state, which fails pending requests and tells the other task to stop.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use relay_protocol::message::Ack;
use relay_protocol::{FrameCodec, Request};
use tokio::sync::mpsc;
use tokio_util::codec::{FramedRead, FramedWrite};

use super::shared::Shared;
use crate::transport::{BoxReader, BoxWriter, StreamGuard};

/// Reads frames until EOF, an error, or cancellation; never waits for a consumer.
pub(crate) async fn read_loop(mut frames: FramedRead<BoxReader, FrameCodec>, shared: Arc<Shared>) {
    let reason = loop {
        let next = tokio::select! {
            _ = shared.cancel.cancelled() => break "the session was closed".to_string(),
            next = frames.next() => next,
        };
        match next {
            None => break "the agent closed the connection".to_string(),
            Some(Err(e)) => break format!("reading from the agent failed: {e}"),
            Some(Ok(frame)) => {
                shared.frames.fetch_add(1, Ordering::Relaxed);
                shared.dispatch(&frame);
            }
        }
    };
    shared.close(reason);
}

/// Writes queued requests and acks until the queue closes or the connection is closed.
pub(crate) async fn write_loop(
    mut sink: FramedWrite<BoxWriter, FrameCodec>,
    mut requests: mpsc::Receiver<Bytes>,
    shared: Arc<Shared>,
    guard: Box<dyn StreamGuard>,
) {
    loop {
        tokio::select! {
            biased;
            _ = shared.cancel.cancelled() => break,
            _ = shared.ack_ready.notified() => {
                for (pty, offset) in shared.take_acks() {
                    let ack = Request::Ack(Ack { pty, offset });
                    let Ok(frame) = shared.encode(shared.next_id(), ack) else {
                        continue;
                    };
                    if let Err(e) = sink.send(frame).await {
                        shared.close(format!("writing to the agent failed: {e}"));
                        break;
                    }
                }
            }
            next = requests.recv() => match next {
                None => {
                    shared.close("the session was closed".to_string());
                    break;
                }
                Some(frame) => {
                    if let Err(e) = sink.send(frame).await {
                        shared.close(format!("writing to the agent failed: {e}"));
                        break;
                    }
                }
            },
        }
    }
    // Half-close first so the agent sees a clean EOF, then release the transport.
    let _ = tokio::time::timeout(std::time::Duration::from_secs(1), sink.close()).await;
    drop(sink);
    drop(guard);
}
