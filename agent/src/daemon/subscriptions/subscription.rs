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
//!
//! A screen subscription (`AttachScreen`/`OpenScreen`, capability `screen`) may start with a
//! snapshot, never sends `OutputGap` (a reader that fell behind the ring gets a new snapshot and
//! continues from its offset: rule E), and forwards the PTY's typed events, each after the output
//! up to its offset. Snapshot bytes are not output offsets and take no credit.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use relay_protocol::message::{Exited, Output, OutputGap, Snapshot};
use relay_protocol::{Message, Push};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tracing::Instrument;

use crate::output::credit::Credit;
use crate::output::hold::Hold;
use crate::output::ring::ReadFrom;
use crate::output::screen::TakenSnapshot;
use crate::pty::Pty;
use crate::runtime::LockExt;
use crate::state::Attachment;

/// Where a subscription starts.
#[derive(Debug)]
pub enum Start {
    /// Output bytes from this offset.
    Bytes(u64),
    /// This snapshot, then output bytes from its offset.
    Snapshot(TakenSnapshot),
}

impl Start {
    /// Offset of the first output byte the subscription forwards.
    pub fn offset(&self) -> u64 {
        match self {
            Start::Bytes(o) => *o,
            Start::Snapshot(s) => s.offset,
        }
    }
}

/// What kind of subscription: the base protocol's, a lossless one, or a screen one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Gaps are reported as `OutputGap`; no events.
    Bytes,
    /// As `Bytes`, and the subscription holds the PTY (see [`crate::output::hold`]): its ring never
    /// drops a byte this consumer has not acknowledged, so a gap can only precede the attach.
    Lossless,
    /// Gaps become snapshots; events with a key above `events_after` are forwarded.
    Screen {
        /// Key of the last event the client already has.
        events_after: u64,
    },
}

/// A running subscription; dropping it stops the forwarding task, and nothing it forwards
/// reaches the connection after the drop returns.
pub struct Subscription {
    task: JoinHandle<()>,
    /// Whether the task may still hand pushes to the connection (see [`Forwarder::send`]).
    open: Arc<Mutex<bool>>,
    /// This subscriber's count on the lease; dropped with the subscription (after the task is
    /// aborted), it detaches.
    attachment: Attachment,
    acks: watch::Sender<u64>,
    /// Offset up to which output was handed to the connection (or skipped as a gap).
    sent: Arc<AtomicU64>,
    /// A lossless subscription's hold on the PTY, moved by its acks.
    hold: Option<Hold>,
}

impl Subscription {
    /// Whether its task returned: nothing more will be forwarded.
    pub fn is_finished(&self) -> bool {
        self.task.is_finished()
    }

    /// Whether the PTY it follows has ended (its exit was published).
    pub fn pty_ended(&self) -> bool {
        self.attachment.pty().has_ended()
    }

    /// Starts forwarding the attached PTY's output from `start` into `out`, in chunks of at most `chunk`
    /// bytes, within `credit` (starting at `start`'s offset). `hold` is a lossless
    /// subscription's hold, taken when its start offset was decided.
    pub fn start(
        attachment: Attachment,
        start: Start,
        mode: Mode,
        credit: Credit,
        chunk: usize,
        out: mpsc::Sender<Message>,
        hold: Option<Hold>,
    ) -> Self {
        let first = start.offset();
        debug_assert_eq!(
            credit.cursor(),
            first,
            "the credit starts where the output does"
        );
        let (acks, acks_rx) = watch::channel(first);
        let sent = Arc::new(AtomicU64::new(first));
        let open = Arc::new(Mutex::new(true));
        let forwarder = Forwarder {
            open: Arc::clone(&open),
            pty: Arc::clone(attachment.pty()),
            credit,
            chunk: chunk.max(1),
            out,
            acks: acks_rx,
            sent: Arc::clone(&sent),
            mode,
        };
        let task = tokio::spawn(forwarder.run(start).in_current_span());
        Subscription {
            task,
            open,
            attachment,
            acks,
            sent,
            hold,
        }
    }

    /// The peer consumed output up to `offset`; clamped to what was sent, ignored when not above
    /// the current ack.
    pub fn ack(&self, offset: u64) {
        let offset = offset.min(self.sent.load(Ordering::Acquire));
        let newer = self.acks.send_if_modified(|acked| {
            let newer = offset > *acked;
            if newer {
                *acked = offset;
            }
            newer
        });
        if let (true, Some(hold)) = (newer, &self.hold) {
            hold.advance(offset);
        }
    }

    /// The consumer detached: a lossless subscription's hold ends now instead of lapsing later.
    pub fn release_hold(&mut self) {
        if let Some(hold) = self.hold.take() {
            hold.release();
        }
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        // Closed first: an abort takes effect only at the task's next await, and a push it
        // completes meanwhile would follow the reply of the attach that replaced it, where the
        // client would take it for the new subscription's output.
        *self.open.lock_unpoisoned() = false;
        self.task.abort();
    }
}

struct Forwarder {
    open: Arc<Mutex<bool>>,
    pty: Arc<Pty>,
    credit: Credit,
    chunk: usize,
    out: mpsc::Sender<Message>,
    acks: watch::Receiver<u64>,
    sent: Arc<AtomicU64>,
    mode: Mode,
}

impl Forwarder {
    async fn run(mut self, start: Start) {
        if let Start::Snapshot(snapshot) = start {
            if self.send_snapshot(snapshot).await.is_err() {
                return;
            }
        }
        let _ = self.forward().await;
    }

    /// Sends `snapshot` in pieces of at most the chunk size.
    async fn send_snapshot(&self, snapshot: TakenSnapshot) -> Result<(), Closed> {
        let id = self.pty.binding().pty;
        let mut pieces = snapshot.data.chunks(self.chunk).peekable();
        if pieces.peek().is_none() {
            return self
                .send(snapshot_piece(id, &snapshot, Vec::new(), true))
                .await;
        }
        while let Some(piece) = pieces.next() {
            let last = pieces.peek().is_none();
            self.send(snapshot_piece(id, &snapshot, piece.to_vec(), last))
                .await?;
        }
        Ok(())
    }

    /// Hands `push` to the connection once it has room, unless the subscription was dropped
    /// meanwhile (checked under the same lock the drop takes, so nothing follows it).
    async fn send(&self, push: Push) -> Result<(), Closed> {
        let permit = self.out.reserve().await.map_err(|_| Closed)?;
        let open = self.open.lock_unpoisoned();
        if !*open {
            return Err(Closed);
        }
        permit.send(Message::Push(push));
        Ok(())
    }

    /// Forwards held events with a key above `events_after` whose offset the output reached.
    async fn send_events(&mut self) -> Result<(), Closed> {
        let Mode::Screen { events_after } = self.mode else {
            return Ok(());
        };
        let Some(screen) = self.pty.screen() else {
            return Ok(());
        };
        let events = screen.events(events_after, self.credit.cursor());
        for event in events {
            let key = event.key;
            self.send(Push::Event(event)).await?;
            self.mode = Mode::Screen { events_after: key };
        }
        Ok(())
    }

    async fn forward(&mut self) -> Result<(), Closed> {
        let id = self.pty.binding().pty;
        let mut progress = self.pty.watch();
        let screen_mode = matches!(self.mode, Mode::Screen { .. });
        let mut keys = self
            .pty
            .screen()
            .filter(|_| screen_mode)
            .map(|s| s.watch_keys());
        loop {
            let exit = progress.borrow_and_update().exit.clone();
            if let Some(keys) = keys.as_mut() {
                keys.borrow_and_update();
            }
            self.credit.on_ack(*self.acks.borrow_and_update());
            self.send_events().await?;
            let cursor = self.credit.cursor();
            // After the exit, output up to the exit's end offset is sent, then `Exited`.
            let limit = exit.as_ref().map(|e| e.event_key);
            if let Some(exit) = exit.as_ref().filter(|e| cursor >= e.event_key) {
                let push = Push::Exited(Exited {
                    binding: exit.binding.clone(),
                    exit: exit.status.clone(),
                    reason: exit.reason.clone(),
                    event_key: exit.event_key,
                });
                return self.send(push).await;
            }
            let allowance = self.credit.allowance();
            if allowance == 0 {
                // Output may or may not be waiting; a window that grows counts this only when
                // the ring has bytes past the cursor.
                if self.pty.ring().lock_unpoisoned().end() > cursor {
                    self.credit.on_starved();
                }
                self.acks.changed().await.map_err(|_| Closed)?;
                continue;
            }
            let max = (self.chunk as u64)
                .min(allowance)
                .min(limit.map_or(u64::MAX, |l| l - cursor)) as usize;
            let read = self.pty.ring().lock_unpoisoned().read_from(cursor, max);
            let push = match read {
                ReadFrom::Data(data) => {
                    self.credit.on_sent(data.len() as u64);
                    Push::Output(Output {
                        pty: id,
                        offset: cursor,
                        data,
                    })
                }
                ReadFrom::Gap { from, to } if screen_mode && self.pty.screen().is_some() => {
                    // Rule E: a reader that fell behind gets the screen, never a silent jump.
                    let snapshot = take_snapshot(&self.pty).await.ok_or(Closed)?;
                    self.credit.on_gap(from, snapshot.offset.max(to));
                    self.send_snapshot(snapshot).await?;
                    self.sent.store(self.credit.cursor(), Ordering::Release);
                    continue;
                }
                ReadFrom::Gap { from, to } => {
                    let to = limit.map_or(to, |l| to.min(l));
                    self.credit.on_gap(from, to);
                    Push::OutputGap(OutputGap { pty: id, from, to })
                }
                ReadFrom::End => {
                    let keys_changed = async {
                        match keys.as_mut() {
                            Some(k) => k.changed().await,
                            None => std::future::pending().await,
                        }
                    };
                    tokio::select! {
                        changed = progress.changed() => changed.map_err(|_| Closed)?,
                        changed = self.acks.changed() => changed.map_err(|_| Closed)?,
                        changed = keys_changed => changed.map_err(|_| Closed)?,
                    }
                    continue;
                }
                ReadFrom::Beyond { end } => {
                    tracing::error!(pty = %id, cursor, end, "subscription cursor beyond the output end");
                    return Err(Closed);
                }
            };
            self.send(push).await?;
            self.sent.store(self.credit.cursor(), Ordering::Release);
        }
    }
}

/// The connection (or the subscription) is gone.
struct Closed;

fn snapshot_piece(
    pty: relay_protocol::PtyId,
    snapshot: &TakenSnapshot,
    data: Vec<u8>,
    last: bool,
) -> Push {
    Push::Snapshot(Snapshot {
        pty,
        offset: snapshot.offset,
        size: snapshot.size,
        data,
        last,
    })
}

/// Takes a snapshot of `pty` off the async threads (it may parse the model's lag first).
pub async fn take_snapshot(pty: &Arc<Pty>) -> Option<TakenSnapshot> {
    let pty = Arc::clone(pty);
    tokio::task::spawn_blocking(move || pty.screen().map(|s| s.snapshot(pty.ring())))
        .await
        .ok()
        .flatten()
}
