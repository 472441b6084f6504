//! Keeping a PTY's output counters (bytes out, last output time) in the lease journal, so a
//! daemon that is killed (`kill -9`, OOM, a crash) still leaves them for its next incarnation,
//! which reports the ended lease with what was known instead of 0 bytes and no last output.
//!
//! Bound (never a journal write per output chunk): the counters are journaled
//! - when a lease becomes detached (its last subscriber went),
//! - when the PTY ends (in its `ended` record),
//! - and, while output flows, at most once per [`JOURNAL_COUNTERS_EVERY`] per PTY: the reader
//!   thread only flips a flag on the first chunk after a write ([`CounterNote::note`]); the
//!   daemon writes the counters [`JOURNAL_COUNTERS_EVERY`] later and clears the flag.
//!
//! So after a crash the journal is at most [`JOURNAL_COUNTERS_EVERY`] behind the PTY's real
//! counters (plus whatever the write itself took).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use relay_protocol::PtyId;
use tokio::sync::mpsc::UnboundedSender;

/// Most time the journaled counters of a PTY with flowing output lag behind (5 s).
pub const JOURNAL_COUNTERS_EVERY: Duration = Duration::from_secs(5);

/// One PTY's "counters changed since they were journaled" flag and the daemon's queue of PTYs
/// whose counters are due. Shared by the PTY's reader task and the daemon.
#[derive(Debug)]
pub struct CounterNote {
    pty: PtyId,
    due: AtomicBool,
    queue: UnboundedSender<PtyId>,
}

impl CounterNote {
    /// A note for `pty` that queues it on `queue` (read by the daemon's counter task).
    pub fn new(pty: PtyId, queue: UnboundedSender<PtyId>) -> Self {
        CounterNote {
            pty,
            due: AtomicBool::new(false),
            queue,
        }
    }

    /// Output arrived: queues the PTY once until [`CounterNote::take`]. Costs one relaxed load
    /// per chunk while a write is already due.
    pub fn note(&self) {
        if !self.due.load(Ordering::Relaxed) && !self.due.swap(true, Ordering::AcqRel) {
            // The daemon is stopping when the queue is gone: nothing left to write then.
            let _ = self.queue.send(self.pty);
        }
    }

    /// The daemon is about to read and journal the counters: later output queues the PTY again.
    pub fn take(&self) {
        self.due.store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use relay_protocol::Incarnation;

    #[test]
    fn a_flow_of_chunks_queues_the_pty_once_until_taken() {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let pty = PtyId {
            incarnation: Incarnation(7),
            counter: 3,
        };
        let note = CounterNote::new(pty, tx);
        for _ in 0..1000 {
            note.note();
        }
        assert_eq!(rx.try_recv(), Ok(pty));
        assert!(rx.try_recv().is_err(), "one entry for a thousand chunks");
        note.take();
        note.note();
        note.note();
        assert_eq!(rx.try_recv(), Ok(pty));
        assert!(rx.try_recv().is_err());
    }
}
