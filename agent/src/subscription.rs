//! Output forwarding for one (connection, PTY) subscription.
//!
//! A task per subscription reads the PTY's replay ring from its own cursor, in chunks of at most
//! the connection's chunk size, while its [`Credit`] allows; it reports an `OutputGap` when the
//! ring dropped bytes before they could be sent, and `Exited` after the last output. It sends into
//! the connection's bounded queue, so a slow connection only delays its own subscriptions: the
//! PTY reader writes to the ring and never waits for it (rule F).
//!
//! Acks are clamped to what was actually sent (gap bytes count as sent) when they arrive, and an
//! ack below the current one is ignored: one `Ack{offset: u64::MAX}` must not disable flow control
//! for the rest of the subscription.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use relay_protocol::message::{Exited, Output, OutputGap};
use relay_protocol::{Message, Push};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tracing::Instrument;

use crate::credit::Credit;
use crate::pty::Pty;
use crate::ring::ReadFrom;

/// A running subscription; dropping it stops the forwarding task.
pub struct Subscription {
    task: JoinHandle<()>,
    acks: watch::Sender<u64>,
    /// Offset up to which output was handed to the connection (or skipped as a gap).
    sent: Arc<AtomicU64>,
}

impl Subscription {
    /// Starts forwarding `pty`'s output from offset `start` into `out`, in chunks of at most
    /// `chunk` bytes, with a credit window of `window` bytes (`None`: the peer does not send
    /// acks, so no window applies).
    pub fn start(
        pty: Arc<Pty>,
        start: u64,
        window: Option<u32>,
        chunk: usize,
        out: mpsc::Sender<Message>,
    ) -> Self {
        let (acks, acks_rx) = watch::channel(start);
        let credit = match window {
            Some(w) => Credit::new(u64::from(w), start),
            None => Credit::unlimited(start),
        };
        let sent = Arc::new(AtomicU64::new(start));
        let task = tokio::spawn(
            forward(pty, credit, chunk.max(1), out, acks_rx, Arc::clone(&sent)).in_current_span(),
        );
        Subscription { task, acks, sent }
    }

    /// The peer consumed output up to `offset`; clamped to what was sent, ignored when not above
    /// the current ack.
    pub fn ack(&self, offset: u64) {
        let offset = offset.min(self.sent.load(Ordering::Acquire));
        self.acks.send_if_modified(|acked| {
            let newer = offset > *acked;
            if newer {
                *acked = offset;
            }
            newer
        });
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn forward(
    pty: Arc<Pty>,
    mut credit: Credit,
    chunk: usize,
    out: mpsc::Sender<Message>,
    mut acks: watch::Receiver<u64>,
    sent: Arc<AtomicU64>,
) {
    let id = pty.binding().pty;
    let mut progress = pty.watch();
    loop {
        let exit = progress.borrow_and_update().exit.clone();
        credit.on_ack(*acks.borrow_and_update());
        let cursor = credit.cursor();
        // After the exit, output up to the exit's end offset is sent, then `Exited`.
        let limit = exit.as_ref().map(|e| e.event_key);
        if let Some(exit) = exit.as_ref().filter(|e| cursor >= e.event_key) {
            let push = Push::Exited(Exited {
                binding: exit.binding.clone(),
                exit: exit.status.clone(),
                reason: exit.reason.clone(),
                event_key: exit.event_key,
            });
            let _ = out.send(Message::Push(push)).await;
            return;
        }
        let allowance = credit.allowance();
        if allowance == 0 {
            if acks.changed().await.is_err() {
                return;
            }
            continue;
        }
        let max = (chunk as u64)
            .min(allowance)
            .min(limit.map_or(u64::MAX, |l| l - cursor)) as usize;
        let read = pty
            .ring()
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .read_from(cursor, max);
        let push = match read {
            ReadFrom::Data(data) => {
                credit.on_sent(data.len() as u64);
                Push::Output(Output {
                    pty: id,
                    offset: cursor,
                    data,
                })
            }
            ReadFrom::Gap { from, to } => {
                let to = limit.map_or(to, |l| to.min(l));
                credit.on_gap(from, to);
                Push::OutputGap(OutputGap { pty: id, from, to })
            }
            ReadFrom::End => {
                tokio::select! {
                    changed = progress.changed() => if changed.is_err() { return },
                    changed = acks.changed() => if changed.is_err() { return },
                }
                continue;
            }
            ReadFrom::Beyond { end } => {
                tracing::error!(pty = %id, cursor, end, "subscription cursor beyond the output end");
                return;
            }
        };
        if out.send(Message::Push(push)).await.is_err() {
            return;
        }
        sent.store(credit.cursor(), Ordering::Release);
    }
}
