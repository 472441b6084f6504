//! The producer's end of one pane's event queue ([`PaneSink`]), shared by the session reader
//! task (output, gaps, exit) and, for panes of a [`Host`](crate::Host), by the host supervisor
//! (interruptions and resumes). It never blocks and never waits for the app.
//!
//! The queue is bounded in bytes ([`queue_cap`]); output that arrives while it is over the cap is
//! dropped, and the hole is reported as one [`PaneEvent::Gap`] when output is queued again, so
//! the app never sees a silent jump (rule E). The sink remembers the offset just past what it
//! queued ([`PaneSink::resume_point`]): a re-attach after a reconnect resumes there, which also
//! fetches again what the cap dropped, while the agent still holds it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use relay_protocol::{EndReason, ExitStatus, ScreenEvent, TermSize, MAX_OUTPUT_CHUNK};
use tokio::sync::mpsc;

use super::PaneEvent;
use crate::sync::LockExt;

/// Hard cap of a pane's queue in bytes for a given credit window, in bytes: twice the window
/// plus one output chunk (64 KiB). Without credit (an agent that does not throttle) the window
/// is taken to be at least 1 MiB.
pub fn queue_cap(window: u64, credit: bool) -> u64 {
    let window = if credit { window } else { window.max(1 << 20) };
    2 * window + MAX_OUTPUT_CHUNK as u64
}

/// The producer's end of one pane's queue. Shared (`Arc`) between whoever may push into it; the
/// stream ends when the last `Arc` is dropped.
pub(crate) struct PaneSink {
    /// Tells subscriptions apart (a newer attach of the same PTY takes over).
    pub(crate) id: u64,
    state: Mutex<SinkState>,
    /// Bytes of output in the queue, shared with the app's end.
    queued: Arc<AtomicU64>,
}

struct SinkState {
    tx: mpsc::UnboundedSender<PaneEvent>,
    cap: u64,
    /// Offset just past the last output or gap queued; `None` until the first attach reply.
    next: Option<u64>,
    /// A final event was queued (the stream ends after it).
    finished: bool,
    /// Pieces of a snapshot received so far: (offset, size, bytes).
    snapshot: Option<(u64, TermSize, Vec<u8>)>,
    /// Key of the last typed event queued (0: none); lower keys are repeats.
    last_event: u64,
}

/// Largest snapshot assembled from pieces, in bytes (the agent's are far smaller: a screen and
/// 1,000 lines of scrollback); a larger one is dropped with a warning.
const MAX_SNAPSHOT_BYTES: usize = 64 << 20;

/// The app's end of a pane's queue.
pub(crate) struct PaneQueue {
    pub(crate) rx: mpsc::UnboundedReceiver<PaneEvent>,
    pub(crate) queued: Arc<AtomicU64>,
}

impl PaneQueue {
    /// The app took `ev` out of the queue: its bytes no longer count against the cap.
    pub(crate) fn taken(&self, ev: &PaneEvent) {
        if let PaneEvent::Output { data, .. } = ev {
            self.queued.fetch_sub(data.len() as u64, Ordering::AcqRel);
        }
    }
}

impl PaneSink {
    /// A new queue of at most `cap` bytes of output, with an id unique in this process.
    pub(crate) fn new(cap: u64) -> (Arc<PaneSink>, PaneQueue) {
        static NEXT_ID: AtomicU64 = AtomicU64::new(1);
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::unbounded_channel();
        let queued = Arc::new(AtomicU64::new(0));
        let sink = PaneSink {
            id,
            state: Mutex::new(SinkState {
                tx,
                cap,
                next: None,
                finished: false,
                snapshot: None,
                last_event: 0,
            }),
            queued: queued.clone(),
        };
        (Arc::new(sink), PaneQueue { rx, queued })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, SinkState> {
        // Every update below is a single assignment or send: a panic cannot leave it torn.
        self.state.lock_unpoisoned()
    }

    /// Whether the stream has nothing more to say: a final event was queued or the app's end
    /// is gone.
    pub(crate) fn is_finished(&self) -> bool {
        let st = self.state();
        st.finished || st.tx.is_closed()
    }

    /// The first attach reply: output follows from `replay_from`; `lost` bytes before it are no
    /// longer held by the agent (reported as a gap, unless a snapshot stands for them:
    /// `snapshot`).
    pub(crate) fn started(&self, replay_from: u64, lost: u64, snapshot: bool) {
        let mut st = self.state();
        if st.next.is_none() {
            st.next = Some(replay_from);
            if lost > 0 && !snapshot {
                let _ = st.tx.send(PaneEvent::Gap {
                    from: replay_from - lost.min(replay_from),
                    to: replay_from,
                });
            }
        }
    }

    /// Offset to resume from after a reconnect: just past what was queued (so bytes the cap
    /// dropped are asked for again). `None` before the first attach reply.
    pub(crate) fn resume_point(&self) -> Option<u64> {
        self.state().next
    }

    /// Key of the last typed event queued (0: none): a re-attach asks for the events after it.
    pub(crate) fn last_event_key(&self) -> u64 {
        self.state().last_event
    }

    /// A re-attach succeeded and output continues at `replay_from`: queues
    /// [`PaneEvent::Resumed`], then a gap if the agent no longer holds everything since the
    /// resume point — unless a snapshot follows (`snapshot`), which stands for those bytes.
    /// `cap` is the new connection's queue cap.
    pub(crate) fn resumed(&self, replay_from: u64, cap: u64, snapshot: bool) -> bool {
        let mut st = self.state();
        st.cap = cap;
        st.snapshot = None;
        let next = st.next.unwrap_or(replay_from);
        let mut ok = st.tx.send(PaneEvent::Resumed { from: replay_from }).is_ok();
        if snapshot {
            st.next = Some(replay_from);
            return ok;
        }
        if replay_from > next {
            ok &= st
                .tx
                .send(PaneEvent::Gap {
                    from: next,
                    to: replay_from,
                })
                .is_ok();
        }
        st.next = Some(next.max(replay_from));
        ok
    }

    /// Queues output, or drops it when the queue is over its cap (the hole is reported before
    /// the next output that fits). Returns `false` when the app's end is gone.
    pub(crate) fn output(&self, offset: u64, data: Vec<u8>) -> bool {
        let len = data.len() as u64;
        let mut st = self.state();
        if self.queued.load(Ordering::Acquire) + len > st.cap {
            return !st.tx.is_closed();
        }
        let next = st.next.unwrap_or(offset);
        let end = offset + len;
        if end <= next {
            // A repeat (replayed after a re-attach): already queued.
            return !st.tx.is_closed();
        }
        if offset > next
            && st
                .tx
                .send(PaneEvent::Gap {
                    from: next,
                    to: offset,
                })
                .is_err()
        {
            return false;
        }
        st.next = Some(end);
        self.queued.fetch_add(len, Ordering::AcqRel);
        st.tx.send(PaneEvent::Output { offset, data }).is_ok()
    }

    /// Queues a gap reported by the agent (merged with a hole the cap left before it).
    pub(crate) fn gap(&self, from: u64, to: u64) -> bool {
        let mut st = self.state();
        let from = st.next.map_or(from, |n| n.min(from));
        if to <= from {
            return !st.tx.is_closed();
        }
        st.next = Some(to);
        st.tx.send(PaneEvent::Gap { from, to }).is_ok()
    }

    /// Adds a piece of a snapshot; the last piece queues [`PaneEvent::Snapshot`] and output
    /// continues from its offset. Returns `false` when the app's end is gone.
    pub(crate) fn snapshot_piece(
        &self,
        offset: u64,
        size: TermSize,
        data: Vec<u8>,
        last: bool,
    ) -> bool {
        let mut st = self.state();
        // Pieces of another snapshot (cut short by a reconnect) are discarded.
        let (offset, size, mut bytes) = match st.snapshot.take() {
            Some(pending) if pending.0 == offset => pending,
            _ => (offset, size, Vec::new()),
        };
        if bytes.len() + data.len() > MAX_SNAPSHOT_BYTES {
            tracing::warn!(
                offset,
                "snapshot larger than {MAX_SNAPSHOT_BYTES} bytes dropped; the screen resumes with the next output"
            );
            return !st.tx.is_closed();
        }
        bytes.extend_from_slice(&data);
        if !last {
            st.snapshot = Some((offset, size, bytes));
            return !st.tx.is_closed();
        }
        st.next = Some(offset);
        st.tx
            .send(PaneEvent::Snapshot {
                offset,
                size,
                data: bytes,
            })
            .is_ok()
    }

    /// Queues a typed event unless its key was queued already (a repeat after a re-attach).
    pub(crate) fn screen_event(&self, key: u64, offset: u64, event: ScreenEvent) -> bool {
        let mut st = self.state();
        if key <= st.last_event {
            return !st.tx.is_closed();
        }
        st.last_event = key;
        st.tx.send(PaneEvent::Event { key, offset, event }).is_ok()
    }

    /// Queues the exit (after a hole the cap left before it). The stream ends after it.
    pub(crate) fn exited(&self, exit: ExitStatus, reason: EndReason, event_key: u64) {
        let mut st = self.state();
        st.finished = true;
        if let Some(next) = st.next {
            if next < event_key {
                let _ = st.tx.send(PaneEvent::Gap {
                    from: next,
                    to: event_key,
                });
            }
        }
        let _ = st.tx.send(PaneEvent::Exited {
            exit,
            reason,
            event_key,
        });
    }

    /// Queues an event that carries no output (connection state, an end proven on re-attach).
    pub(crate) fn event(&self, ev: PaneEvent) -> bool {
        let mut st = self.state();
        if st.finished {
            return false;
        }
        st.finished = ev.is_final();
        st.tx.send(ev).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn out(offset: u64, data: &[u8]) -> PaneEvent {
        PaneEvent::Output {
            offset,
            data: data.to_vec(),
        }
    }

    #[test]
    fn over_the_cap_output_is_dropped_and_the_exact_hole_reported() {
        let (sink, mut q) = PaneSink::new(10);
        sink.started(0, 0, false);
        assert!(sink.output(0, vec![b'a'; 8]));
        assert!(sink.output(8, vec![b'b'; 8]), "dropped, over cap");
        assert!(sink.output(16, vec![b'c'; 4]), "still over cap");
        let first = q.rx.try_recv().unwrap();
        q.taken(&first);
        assert_eq!(first, out(0, &[b'a'; 8]));
        assert_eq!(
            sink.resume_point(),
            Some(8),
            "a re-attach asks for 8.. again"
        );
        assert!(sink.output(20, vec![b'd'; 2]));
        assert_eq!(q.rx.try_recv().unwrap(), PaneEvent::Gap { from: 8, to: 20 });
        assert_eq!(q.rx.try_recv().unwrap(), out(20, b"dd"));
    }

    #[test]
    fn a_hole_left_by_the_cap_is_reported_before_the_exit() {
        let (sink, mut q) = PaneSink::new(4);
        sink.started(0, 0, false);
        assert!(sink.output(0, vec![0; 8]));
        sink.exited(
            ExitStatus {
                code: 0,
                signal: None,
            },
            EndReason::Exited,
            8,
        );
        assert_eq!(q.rx.try_recv().unwrap(), PaneEvent::Gap { from: 0, to: 8 });
        assert!(matches!(
            q.rx.try_recv().unwrap(),
            PaneEvent::Exited { event_key: 8, .. }
        ));
    }

    #[test]
    fn a_resume_replays_what_the_cap_dropped_without_repeats_or_empty_gaps() {
        let (sink, mut q) = PaneSink::new(10);
        sink.started(0, 0, false);
        assert!(sink.output(0, b"abcdefgh".to_vec()));
        assert!(sink.output(8, b"ijklmnop".to_vec()), "dropped");
        let ev = q.rx.try_recv().unwrap();
        q.taken(&ev);
        // Reconnect: resume from 8; the agent still holds everything.
        assert_eq!(sink.resume_point(), Some(8));
        assert!(sink.resumed(8, 100, false));
        assert!(sink.output(4, b"efghijkl".to_vec()), "overlap with 4..8");
        let got: Vec<_> = std::iter::from_fn(|| q.rx.try_recv().ok()).collect();
        assert_eq!(
            got,
            vec![PaneEvent::Resumed { from: 8 }, out(4, b"efghijkl")],
            "the sink forwards the overlap; the handle trims it"
        );
        assert_eq!(sink.resume_point(), Some(12));
    }

    #[test]
    fn a_resume_past_the_resume_point_is_an_explicit_gap() {
        let (sink, mut q) = PaneSink::new(100);
        sink.started(0, 0, false);
        assert!(sink.output(0, b"ab".to_vec()));
        assert!(sink.resumed(50, 100, false));
        let got: Vec<_> = std::iter::from_fn(|| q.rx.try_recv().ok()).collect();
        assert_eq!(
            got,
            vec![
                out(0, b"ab"),
                PaneEvent::Resumed { from: 50 },
                PaneEvent::Gap { from: 2, to: 50 }
            ]
        );
    }

    #[test]
    fn snapshot_pieces_are_assembled_and_output_continues_from_their_offset() {
        let (sink, mut q) = PaneSink::new(100);
        let size = TermSize { cols: 80, rows: 24 };
        sink.started(1000, 900, true);
        assert!(sink.snapshot_piece(1000, size, b"\x1b[H".to_vec(), false));
        assert!(sink.snapshot_piece(1000, size, b"screen".to_vec(), true));
        assert!(sink.output(1000, b"live".to_vec()));
        let got: Vec<_> = std::iter::from_fn(|| q.rx.try_recv().ok()).collect();
        assert_eq!(
            got,
            vec![
                PaneEvent::Snapshot {
                    offset: 1000,
                    size,
                    data: b"\x1b[Hscreen".to_vec()
                },
                out(1000, b"live"),
            ],
            "no gap for the bytes the snapshot stands for"
        );
        assert_eq!(sink.resume_point(), Some(1004));
    }

    #[test]
    fn a_resume_with_a_snapshot_reports_no_gap_and_events_are_delivered_once() {
        let (sink, mut q) = PaneSink::new(100);
        sink.started(0, 0, false);
        assert!(sink.output(0, b"ab".to_vec()));
        assert!(sink.screen_event(1, 2, ScreenEvent::Bell));
        assert_eq!(sink.last_event_key(), 1);
        // Reconnect: the agent no longer holds 2..50 and sends a snapshot at 50, then resends
        // event 1 (it was asked for events after 1, but a repeat must not pass anyway).
        assert!(sink.resumed(50, 100, true));
        let size = TermSize { cols: 10, rows: 2 };
        assert!(sink.snapshot_piece(50, size, b"s".to_vec(), true));
        assert!(sink.screen_event(1, 2, ScreenEvent::Bell));
        assert!(sink.screen_event(2, 50, ScreenEvent::Title("t".into())));
        let got: Vec<_> = std::iter::from_fn(|| q.rx.try_recv().ok()).collect();
        assert_eq!(
            got,
            vec![
                out(0, b"ab"),
                PaneEvent::Event {
                    key: 1,
                    offset: 2,
                    event: ScreenEvent::Bell
                },
                PaneEvent::Resumed { from: 50 },
                PaneEvent::Snapshot {
                    offset: 50,
                    size,
                    data: b"s".to_vec()
                },
                PaneEvent::Event {
                    key: 2,
                    offset: 50,
                    event: ScreenEvent::Title("t".into())
                },
            ]
        );
    }

    #[test]
    fn queue_cap_is_bounded_by_the_window() {
        assert_eq!(queue_cap(1000, true), 2000 + MAX_OUTPUT_CHUNK as u64);
        assert!(queue_cap(1000, false) >= 2 << 20);
    }
}
