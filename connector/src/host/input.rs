//! [`InputWriter`]: keystrokes and pastes for one pane of a [`Host`], delivered in order, across
//! reconnects, with bounded memory.
//!
//! - **Order.** One task per pane keeps at most one input request in flight; queued chunks are
//!   coalesced into requests of up to 64 KiB (one round trip per 64 KiB of paste).
//! - **Program not reading.** When the agent refuses input because it already holds its limit of
//!   queued input for the PTY (`LimitExceeded`), the same bytes are retried with a backoff from
//!   [`FIRST_BACKOFF`] doubling to [`MAX_BACKOFF`], before anything typed later.
//! - **Outages.** While the pane waits for its connection, input stays queued (at most
//!   [`HostOptions::input_queue_bytes`](crate::HostOptions::input_queue_bytes); beyond it
//!   [`InputWriter::push`] refuses with [`Error::InputFull`], never dropping silently) and goes to
//!   the *same* PTY after the re-attach, fenced on the exact binding (rule C). A request whose
//!   connection died before its answer is sent again after the re-attach under the same
//!   sequence number, which an agent with the `input-seq` capability applies at most once: no
//!   keystroke is lost or doubled. An older agent cannot tell a resend from new input, so there a
//!   request whose answer was lost is not resent (it may or may not have arrived; logged).
//! - **Never to another shell.** If the pane turns out to have another PTY (`Mismatch`), delivery
//!   stops and [`InputFailures`] says so. When the app attaches the *same* binding again (a new
//!   handle takes the pane over), delivery moves to the new handle, keeping order and sequence.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use relay_protocol::{Binding, Capability, MAX_OUTPUT_CHUNK};
use tokio::sync::{mpsc, Notify};
use tokio::task::JoinHandle;

use crate::host::PaneSlot;
use crate::{Error, Host};

/// First wait after the agent refused input because its queue for the PTY is full.
pub const FIRST_BACKOFF: Duration = Duration::from_millis(10);

/// Longest wait between retries of refused input.
pub const MAX_BACKOFF: Duration = Duration::from_millis(500);

/// An ordered, bounded input writer for one pane of a [`Host`]; see the module docs. Dropping it
/// stops delivery of what is still queued.
pub struct InputWriter {
    /// `None` once closed.
    tx: Option<mpsc::UnboundedSender<Vec<u8>>>,
    state: Arc<Shared>,
    /// Taken by [`InputWriter::failures`].
    failure: Option<mpsc::Receiver<Error>>,
    task: JoinHandle<()>,
}

/// The error that ends an [`InputWriter`]'s delivery, readable apart from the writer.
pub struct InputFailures {
    rx: mpsc::Receiver<Error>,
}

impl InputFailures {
    /// Resolves with the error that ended delivery (the pane has another PTY now, ...). Pending
    /// forever while delivery goes on, or when it ended without an error. Cancel-safe.
    pub async fn next(&mut self) -> Error {
        match self.rx.recv().await {
            Some(e) => e,
            None => std::future::pending().await,
        }
    }
}

struct Shared {
    /// Bytes queued or being delivered.
    queued: AtomicUsize,
    cap: usize,
    /// Woken when queued bytes were delivered.
    room: Notify,
}

impl InputWriter {
    pub(crate) fn start(host: Host, binding: Binding) -> InputWriter {
        let state = Arc::new(Shared {
            queued: AtomicUsize::new(0),
            cap: host.options().input_queue_bytes,
            room: Notify::new(),
        });
        let (tx, rx) = mpsc::unbounded_channel();
        let (fail_tx, failure) = mpsc::channel(1);
        let task = tokio::spawn(drain(host, binding, rx, state.clone(), fail_tx));
        InputWriter {
            tx: Some(tx),
            state,
            failure: Some(failure),
            task,
        }
    }

    /// Queues `data` without waiting.
    ///
    /// # Errors
    /// [`Error::InputFull`] when the queued bytes would exceed the bound (nothing of `data` is
    /// queued: wait with [`InputWriter::room`] and push again); [`Error::PaneGone`] when
    /// delivery has ended ([`InputFailures`] says why).
    pub fn push(&self, data: Vec<u8>) -> Result<(), Error> {
        let Some(tx) = &self.tx else {
            return Err(Error::PaneGone("the input writer was closed".into()));
        };
        let len = data.len();
        let before = self.state.queued.fetch_add(len, Ordering::AcqRel);
        if before > 0 && before + len > self.state.cap {
            self.state.queued.fetch_sub(len, Ordering::AcqRel);
            return Err(Error::InputFull(format!(
                "{} bytes of input are waiting to be delivered (bound {} bytes); the pane is \
                 not reading or its host is not connected",
                before, self.state.cap
            )));
        }
        tx.send(data)
            .map_err(|_| Error::PaneGone("input delivery has ended".into()))
    }

    /// Whether `len` more bytes fit in the queue now (an empty queue takes any size).
    pub fn has_room(&self, len: usize) -> bool {
        let queued = self.state.queued.load(Ordering::Acquire);
        queued == 0 || queued + len <= self.state.cap
    }

    /// Waits until `len` more bytes fit in the queue. Cancel-safe.
    pub async fn room(&self, len: usize) {
        loop {
            let notified = self.state.room.notified();
            if self.has_room(len) || self.task.is_finished() {
                return;
            }
            notified.await;
        }
    }

    /// Bytes queued and not yet acknowledged by the agent (a piece whose delivery failed stays
    /// counted).
    pub fn pending(&self) -> usize {
        self.state.queued.load(Ordering::Acquire)
    }

    /// The error that ends delivery (see [`InputFailures`]), to be read apart from the writer.
    /// Can be taken once; later calls get a stream that never yields.
    pub fn failures(&mut self) -> InputFailures {
        match self.failure.take() {
            Some(rx) => InputFailures { rx },
            None => InputFailures {
                rx: mpsc::channel(1).1,
            },
        }
    }

    /// No more input: what is queued is still delivered.
    pub fn close(&mut self) {
        self.tx = None;
    }

    /// Delivers everything queued, then returns. Unbounded (a pane whose host is away waits for
    /// it): the caller puts a time limit on it.
    pub async fn finish(mut self) {
        self.tx = None;
        let _ = (&mut self.task).await;
    }
}

impl Drop for InputWriter {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The delivery task: takes chunks in order, coalesces them up to one request, delivers each.
async fn drain(
    host: Host,
    binding: Binding,
    mut rx: mpsc::UnboundedReceiver<Vec<u8>>,
    state: Arc<Shared>,
    failure: mpsc::Sender<Error>,
) {
    let mut slot = match host.slot_of(&binding) {
        Ok(slot) => slot,
        Err(e) => {
            let _ = failure.send(e).await;
            return;
        }
    };
    // One sequence per writer: a second writer on the same pane gets its own id, so the agent
    // never takes its first requests for repeats of the first writer's.
    let writer: u64 = rand::random();
    let mut seq = 0u64;
    let mut carry: Option<Vec<u8>> = None;
    loop {
        let Some(mut batch) = (match carry.take() {
            Some(data) => Some(data),
            None => rx.recv().await,
        }) else {
            return;
        };
        while batch.len() < MAX_OUTPUT_CHUNK {
            match rx.try_recv() {
                Ok(more) if batch.len() + more.len() <= MAX_OUTPUT_CHUNK => batch.extend(more),
                Ok(more) => {
                    carry = Some(more);
                    break;
                }
                Err(_) => break,
            }
        }
        for piece in batch.chunks(MAX_OUTPUT_CHUNK) {
            seq += 1;
            let result = loop {
                match deliver(&slot, writer, seq, piece).await {
                    // The app attached the same binding again: that took the pane over with a
                    // new slot. Deliver there (the same `seq`: the agent applies it once).
                    Err(Error::PaneGone(why)) => match host.slot_of(&binding) {
                        Ok(next) if !Arc::ptr_eq(&next, &slot) => slot = next,
                        _ => break Err(Error::PaneGone(why)),
                    },
                    other => break other,
                }
            };
            // A piece that failed stays counted: `pending` is what the agent never confirmed.
            if result.is_ok() {
                state.queued.fetch_sub(piece.len(), Ordering::AcqRel);
            }
            state.room.notify_waiters();
            if let Err(e) = result {
                let _ = failure.send(e).await;
                return;
            }
        }
    }
}

/// Delivers one request: waits for the pane's connection, retries while the PTY's input queue is
/// full, and resends under the same `seq` after a reconnect (see the module docs).
async fn deliver(slot: &PaneSlot, writer: u64, seq: u64, data: &[u8]) -> Result<(), Error> {
    let binding = &slot.binding;
    let mut after = 0;
    let mut wait = FIRST_BACKOFF;
    loop {
        let live = slot.attached_after(after).await?;
        let session = &live.session;
        let once = session.welcome().has(Capability::INPUT_SEQ);
        let result = if once {
            session.input_seq(binding, writer, seq, data).await
        } else {
            session.input(binding, data).await
        };
        match result {
            Ok(()) => return Ok(()),
            Err(e) if e.is_limit_exceeded() => {
                tracing::debug!(error = %e, ?wait, "pane input queue full; retrying");
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(MAX_BACKOFF);
            }
            Err(e) if e.is_connection_lost() || e.is_timeout() => {
                if !once {
                    tracing::warn!(
                        %binding,
                        bytes = data.len(),
                        "the connection dropped before the agent confirmed this input; an agent \
                         without input-seq cannot take it again safely, so it is not resent"
                    );
                    return Ok(());
                }
                after = live.generation;
            }
            // The shell is ending: its exit follows on the pane's stream.
            Err(e) if e.is_ended() => return Ok(()),
            Err(e) => return Err(e),
        }
    }
}
