//! Journaling a live PTY's output counters (see [`crate::lease::counters`] for when and the bound).

use std::sync::Arc;

use relay_protocol::{LeaseState, PtyId};
use tokio::sync::mpsc::UnboundedReceiver;

use super::State;
use crate::lease::counters::JOURNAL_COUNTERS_EVERY;
use crate::lease::journal::Record;

impl State {
    /// Starts the task that journals the counters of each PTY its reader queued, once
    /// [`JOURNAL_COUNTERS_EVERY`] after the first unjournaled output. Needs a tokio runtime;
    /// without one (never in the daemon) counters are journaled only on detach and end.
    pub(super) fn start_counter_task(&self, mut queue: UnboundedReceiver<PtyId>) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        // Weak: the queue's senders live in the state, so a strong handle would keep it forever.
        let weak = Arc::downgrade(&self.inner);
        runtime.spawn(async move {
            while let Some(pty) = queue.recv().await {
                let weak = weak.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(JOURNAL_COUNTERS_EVERY).await;
                    if let Some(inner) = weak.upgrade() {
                        State { inner }.journal_counters(&pty);
                    }
                });
            }
        });
    }

    /// Appends `pty`'s current output counters to the journal when they changed since they were
    /// last journaled and its lease has not ended (an `ended` record carries the final ones). A
    /// failed append is logged; the next one tries again.
    pub(super) fn journal_counters(&self, pty_id: &PtyId) {
        let mut journal = self.journal();
        // Under the journal lock: `on_exit` removes the PTY and writes `ended` under it too, so
        // this record can never land after the final one.
        let Some(pty) = self.pty(pty_id) else {
            return;
        };
        pty.counters().take();
        let (bytes_out, last_output_ms) = (pty.end_offset(), pty.last_output_ms());
        {
            let mut book = self.book();
            let changed = book.get(pty_id).is_some_and(|l| {
                l.state() != LeaseState::Ended
                    && (l.bytes_out, l.last_output_ms) != (bytes_out, last_output_ms)
            });
            if !changed {
                return;
            }
            // The book keeps what the journal has, so a compaction writes it again.
            book.set_output(pty_id, bytes_out, last_output_ms);
        }
        Self::append_or_log(
            &mut journal,
            &Record::Output {
                pty: *pty_id,
                bytes_out,
                last_output_ms,
            },
        );
        self.compact_if_needed(&mut journal);
    }
}
