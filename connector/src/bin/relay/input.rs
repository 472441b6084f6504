//! Keystrokes to the pane: a bounded local queue drained by one task, so the terminal loop never
//! waits for the agent.
//!
//! - **Order.** The task keeps at most one `Input` request in flight. When the agent refuses
//!   input because it already holds its limit of queued input for the PTY (`LimitExceeded`: the
//!   program is not reading), the refused bytes are retried, with a backoff from
//!   [`FIRST_BACKOFF`] doubling up to [`MAX_BACKOFF`], before anything typed later: the agent's
//!   writer drains as the program reads, and keystroke order is kept.
//! - **Memory.** The queue holds at most [`QUEUE_CHUNKS`] chunks (one stdin read each, at most
//!   8 KiB). When it is full the terminal loop stops reading stdin, so pasting megabytes into a
//!   program that does not read cannot grow memory. The cost is inherent to a byte stream:
//!   whatever is typed meanwhile, a Ctrl-C or a `~.` included, waits behind the paste (SIGTERM
//!   and SIGHUP still end `relay` at once).
//! - **Throughput.** Queued chunks are coalesced into requests of up to one output chunk
//!   (64 KiB), so a paste costs one round trip per 64 KiB.

use std::collections::VecDeque;
use std::future::Future;
use std::time::Duration;

use relay_connector::{Error, Session};
use relay_protocol::{Binding, ErrorReply, MAX_OUTPUT_CHUNK};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::Failure;

/// Chunks the local queue holds before stdin is no longer read.
pub const QUEUE_CHUNKS: usize = 32;

/// First wait after the agent refused input because its queue for the PTY is full.
pub const FIRST_BACKOFF: Duration = Duration::from_millis(10);

/// Longest wait between retries of refused input.
pub const MAX_BACKOFF: Duration = Duration::from_millis(500);

/// The terminal loop's end of the input queue.
pub struct InputQueue {
    /// `None` once closed (stdin ended).
    tx: Option<mpsc::Sender<Vec<u8>>>,
    /// Chunks that did not fit in the queue yet, in order; stdin is not read while any are here.
    held: VecDeque<Vec<u8>>,
    /// Close the queue once `held` is empty.
    closing: bool,
    task: JoinHandle<()>,
}

/// Errors that end delivery, and with it `relay` (the pane has another shell now, ...).
pub struct InputFailures {
    /// `None` once the task ended without an error.
    rx: Option<mpsc::Receiver<anyhow::Error>>,
}

impl InputFailures {
    /// Resolves with the error that ended delivery. Cancel-safe; pending forever when the task
    /// ended without one.
    pub async fn next(&mut self) -> anyhow::Error {
        loop {
            match &mut self.rx {
                Some(rx) => match rx.recv().await {
                    Some(err) => return err,
                    None => self.rx = None,
                },
                None => return std::future::pending().await,
            }
        }
    }
}

impl InputQueue {
    /// Starts the task that delivers queued input to `binding`.
    pub fn start(session: &Session, binding: &Binding) -> (InputQueue, InputFailures) {
        let (tx, rx) = mpsc::channel(QUEUE_CHUNKS);
        let (fatal_tx, fatal) = mpsc::channel(1);
        let task = tokio::spawn(drain(session.clone(), binding.clone(), rx, fatal_tx));
        let queue = InputQueue {
            tx: Some(tx),
            held: VecDeque::new(),
            closing: false,
            task,
        };
        (queue, InputFailures { rx: Some(fatal) })
    }

    /// Whether more input may be read from stdin (nothing is held back).
    pub fn accepting(&self) -> bool {
        self.held.is_empty()
    }

    /// Queues `data` without waiting; holds it back (in order) when the queue is full.
    pub fn push(&mut self, data: Vec<u8>) {
        let Some(tx) = &self.tx else {
            return;
        };
        if !self.held.is_empty() {
            self.held.push_back(data);
            return;
        }
        match tx.try_send(data) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(data)) => self.held.push_back(data),
            // The task ended (fatal error or lost connection): the loop learns why elsewhere.
            Err(mpsc::error::TrySendError::Closed(_)) => {}
        }
    }

    /// Waits until the queue has room, then moves the oldest held chunk into it. Cancel-safe.
    /// Pending forever when nothing is held.
    pub async fn make_room(&mut self) {
        let (Some(tx), false) = (&self.tx, self.held.is_empty()) else {
            return std::future::pending().await;
        };
        match tx.reserve().await {
            Ok(permit) => {
                if let Some(data) = self.held.pop_front() {
                    permit.send(data);
                }
            }
            Err(_) => self.held.clear(),
        }
        if self.closing && self.held.is_empty() {
            self.tx = None;
        }
    }

    /// Stdin ended: deliver what is queued, then let the task end.
    pub fn close(&mut self) {
        self.closing = true;
        if self.held.is_empty() {
            self.tx = None;
        }
    }

    /// Delivers everything still queued or held, then waits for the task to end. Unbounded: the
    /// caller puts a time limit on it.
    pub async fn finish(mut self) {
        if let Some(tx) = self.tx.take() {
            for data in std::mem::take(&mut self.held) {
                if tx.send(data).await.is_err() {
                    break;
                }
            }
        }
        let _ = (&mut self.task).await;
    }
}

impl Drop for InputQueue {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The task: takes chunks in order, coalesces them up to one request, delivers each with retries.
async fn drain(
    session: Session,
    binding: Binding,
    mut rx: mpsc::Receiver<Vec<u8>>,
    fatal: mpsc::Sender<anyhow::Error>,
) {
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
        // One request at a time, so a refused request is retried before anything later.
        for piece in batch.chunks(MAX_OUTPUT_CHUNK) {
            match deliver(|| session.input(&binding, piece)).await {
                Ok(()) => {}
                // The shell is ending: its exit event follows; later input has nowhere to go.
                Err(e) if e.is_ended() => {}
                // The terminal loop sees the pane stream end with the reason.
                Err(e) if e.is_connection_lost() => return,
                Err(e) => {
                    let _ = fatal.send(input_failure(e)).await;
                    return;
                }
            }
        }
    }
}

/// Runs `send` (one input request); while the agent answers that the PTY's input queue is full,
/// waits (exponential backoff) and sends the same bytes again. Any other outcome is returned.
pub async fn deliver<F, Fut>(mut send: F) -> Result<(), Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(), Error>>,
{
    let mut wait = FIRST_BACKOFF;
    loop {
        match send().await {
            Err(e) if is_input_full(&e) => {
                tracing::debug!(error = %e, ?wait, "pane input queue full; retrying");
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(MAX_BACKOFF);
            }
            other => return other,
        }
    }
}

/// Whether the agent refused input because the PTY's input queue is full.
fn is_input_full(e: &Error) -> bool {
    matches!(e.agent_reply(), Some(ErrorReply::LimitExceeded { .. }))
}

fn input_failure(e: Error) -> anyhow::Error {
    if e.is_mismatch() {
        Failure {
            code: 1,
            message: format!("{e}; run the same command to attach to the pane's current shell"),
        }
        .into()
    } else {
        anyhow::Error::from(e).context("cannot send your input to the pane")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    fn full() -> Error {
        ErrorReply::LimitExceeded {
            what: "queued input for w/t/0 (the program is not reading)".into(),
            limit: 4 << 20,
        }
        .into()
    }

    /// Regression: `relay shell` exited with rc 1 when the agent refused input because the
    /// program had not read 4 MiB yet; the refused bytes must be retried until accepted.
    #[tokio::test(start_paused = true)]
    async fn refused_input_is_retried_with_backoff_until_accepted() {
        let attempts = Arc::new(Mutex::new(Vec::new()));
        let seen = attempts.clone();
        let started = tokio::time::Instant::now();
        let result = deliver(move || {
            let mut seen = seen.lock().unwrap();
            seen.push(started.elapsed());
            let refuse = seen.len() <= 8;
            async move {
                if refuse {
                    Err(full())
                } else {
                    Ok(())
                }
            }
        })
        .await;
        result.unwrap();
        let attempts = attempts.lock().unwrap();
        assert_eq!(attempts.len(), 9, "retried until accepted");
        let waits: Vec<Duration> = attempts.windows(2).map(|w| w[1] - w[0]).collect();
        assert_eq!(waits[0], FIRST_BACKOFF);
        assert_eq!(waits[1], FIRST_BACKOFF * 2);
        assert_eq!(*waits.last().unwrap(), MAX_BACKOFF, "capped: {waits:?}");
    }

    #[tokio::test]
    async fn other_errors_are_returned_at_once() {
        let mut calls = 0;
        let err = deliver(|| {
            calls += 1;
            async { Err(Error::ConnectionLost("gone".into())) }
        })
        .await
        .unwrap_err();
        assert!(err.is_connection_lost());
        assert_eq!(calls, 1);
    }
}
