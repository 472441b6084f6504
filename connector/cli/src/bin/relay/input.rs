//! Keystrokes to the pane through the library's [`InputWriter`] (ordered, bounded, exactly once
//! across reconnects), without ever making the terminal loop wait.
//!
//! When the writer's queue is full (a paste into a program that does not read, or a long outage)
//! the chunk that did not fit is held here, in order, and the terminal loop stops reading stdin
//! until there is room again: pasting megabytes cannot grow memory and nothing is dropped. The
//! cost is inherent to a byte stream: whatever is typed meanwhile, a Ctrl-C or a `~.` included,
//! waits behind the paste (SIGTERM and SIGHUP still end `relay` at once).

use std::collections::VecDeque;

use relay_connector::InputWriter;

/// The terminal loop's end of the pane's input.
pub struct InputQueue {
    writer: InputWriter,
    /// Chunks that did not fit yet, in order; stdin is not read while any are here.
    held: VecDeque<Vec<u8>>,
    /// Stdin ended: close the writer once `held` is empty.
    closing: bool,
}

impl InputQueue {
    /// Wraps the pane's writer.
    pub fn new(writer: InputWriter) -> InputQueue {
        InputQueue {
            writer,
            held: VecDeque::new(),
            closing: false,
        }
    }

    /// Whether more input may be read from stdin (nothing is held back).
    pub fn accepting(&self) -> bool {
        self.held.is_empty()
    }

    /// Queues `data` without waiting; holds it back (in order) when the writer is full.
    pub fn push(&mut self, data: Vec<u8>) {
        if !self.held.is_empty() {
            self.held.push_back(data);
            return;
        }
        self.offer(data);
    }

    fn offer(&mut self, data: Vec<u8>) {
        if !self.writer.has_room(data.len()) {
            self.held.push_front(data);
            return;
        }
        if let Err(e) = self.writer.push(data) {
            // Delivery ended: the loop learns why from `failed`.
            tracing::debug!(error = %e, "input after delivery ended dropped");
        }
    }

    /// Waits until the writer has room, then hands it the oldest held chunk. Cancel-safe.
    /// Pending forever when nothing is held.
    pub async fn make_room(&mut self) {
        let Some(len) = self.held.front().map(Vec::len) else {
            return std::future::pending().await;
        };
        self.writer.room(len).await;
        if let Some(data) = self.held.pop_front() {
            self.offer(data);
        }
        if self.closing && self.held.is_empty() {
            self.writer.close();
        }
    }

    /// Stdin ended: deliver what is queued, then let delivery end.
    pub fn close(&mut self) {
        self.closing = true;
        if self.held.is_empty() {
            self.writer.close();
        }
    }

    /// Delivers what is still held or queued for at most `bound`; returns how many bytes were
    /// not delivered by then (the rest is dropped with the writer, and the caller says so).
    pub async fn finish_within(mut self, bound: std::time::Duration) -> usize {
        let deadline = tokio::time::Instant::now() + bound;
        let _ = tokio::time::timeout_at(deadline, async {
            while let Some(data) = self.held.pop_front() {
                self.writer.room(data.len()).await;
                if self.writer.push(data).is_err() {
                    break;
                }
            }
            self.writer.close();
            while self.writer.pending() > 0 {
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            }
        })
        .await;
        self.held.iter().map(Vec::len).sum::<usize>() + self.writer.pending()
    }
}
