//! One attached pane: the event stream the app reads ([`PaneHandle`], [`PaneEvent`]) and the
//! reader task's side of it (`PaneSink`).
//!
//! # Slow-consumer policy (rule F)
//!
//! The session's reader task serves every pane of the connection, so it must never wait for one
//! pane's consumer (an unread channel must not freeze the connection). Each pane therefore gets
//! its own queue that the reader pushes into without waiting, and the queue is bounded in *bytes*:
//!
//! 1. Normally the agent's credit window bounds it: the agent forwards at most `window` bytes of a
//!    pane beyond the last [`Ack`](relay_protocol::message::Ack), and the handle acks only what the
//!    app has taken out of the queue (once at least half a window was consumed since the last
//!    ack). A slow app throttles its own pane at the agent, which keeps draining the PTY into its
//!    replay ring; other panes are unaffected.
//! 2. As a safety net against an agent without credit (or a misbehaving one), the queue has a hard
//!    cap of twice the window plus one chunk ([`queue_cap`]). Output that arrives while the queue is
//!    over the cap is dropped and reported to the app as one [`PaneEvent::Gap`] covering exactly
//!    the dropped offsets, in order, when the queue has room again: never a silent jump (rule E).
//!
//! The handle also drops repeats (output whose offsets it has already delivered, as can happen
//! after a re-attach) and turns a hole in the offsets into an explicit gap, so the app sees every
//! offset at most once and in order.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use relay_protocol::message::{Attached, Detach};
use relay_protocol::{Binding, EndReason, ExitStatus, Message, Request, MAX_OUTPUT_CHUNK};
use tokio::sync::mpsc;

use crate::session::shared::Shared;

/// Something that happened on an attached pane, in PTY order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PaneEvent {
    /// PTY output; `data[0]` is byte `offset` of the PTY's output stream.
    Output {
        /// Offset of the first byte, in bytes since the PTY was created.
        offset: u64,
        /// The bytes.
        data: Vec<u8>,
    },
    /// Bytes `from..to` of the output are lost (no longer held by the agent, or dropped by the
    /// connector's queue cap); the next output starts at `to`.
    Gap {
        /// First lost byte.
        from: u64,
        /// First byte that follows the gap.
        to: u64,
    },
    /// The PTY's process ended; the stream ends after this event.
    Exited {
        /// How it ended.
        exit: ExitStatus,
        /// Why it ended.
        reason: EndReason,
        /// Output end offset at exit; `(pty, event_key)` identifies this exit across replays.
        event_key: u64,
    },
    /// The connection to the agent was lost; the stream ends after this event. The PTY is most
    /// likely still running (rule A): reconnect and attach with `expect` set to this binding's PTY
    /// and `resume_from` set to [`PaneHandle::next_offset`].
    Disconnected {
        /// What happened to the connection.
        reason: String,
    },
}

/// Hard cap of a pane's queue in bytes for a given credit window (see the module docs).
pub fn queue_cap(window: u64, credit: bool) -> u64 {
    let window = if credit { window } else { window.max(1 << 20) };
    2 * window + MAX_OUTPUT_CHUNK as u64
}

/// The reader task's end of one pane's queue. Never blocks.
pub(crate) struct PaneSink {
    pub(crate) id: u64,
    pub(crate) binding: Option<Binding>,
    tx: mpsc::UnboundedSender<PaneEvent>,
    queued: Arc<AtomicU64>,
    cap: u64,
    overflow_from: Option<u64>,
}

/// What the app's side of a queue needs.
pub(crate) struct PaneQueue {
    pub(crate) rx: mpsc::UnboundedReceiver<PaneEvent>,
    pub(crate) queued: Arc<AtomicU64>,
}

impl PaneSink {
    pub(crate) fn new(id: u64, cap: u64) -> (PaneSink, PaneQueue) {
        let (tx, rx) = mpsc::unbounded_channel();
        let queued = Arc::new(AtomicU64::new(0));
        let sink = PaneSink {
            id,
            binding: None,
            tx,
            queued: queued.clone(),
            cap,
            overflow_from: None,
        };
        (sink, PaneQueue { rx, queued })
    }

    /// Queues output, or drops it (remembering the gap) when the queue is over its cap.
    /// Returns `false` when the app's end is gone.
    pub(crate) fn output(&mut self, offset: u64, data: Vec<u8>) -> bool {
        let len = data.len() as u64;
        if self.queued.load(Ordering::Acquire) + len > self.cap {
            self.overflow_from.get_or_insert(offset);
            return !self.tx.is_closed();
        }
        if let Some(from) = self.overflow_from.take() {
            if !self.send(PaneEvent::Gap { from, to: offset }) {
                return false;
            }
        }
        self.queued.fetch_add(len, Ordering::AcqRel);
        self.send(PaneEvent::Output { offset, data })
    }

    /// Queues a gap reported by the agent (merged with a pending overflow gap).
    pub(crate) fn gap(&mut self, from: u64, to: u64) -> bool {
        let from = self.overflow_from.take().map_or(from, |f| f.min(from));
        self.send(PaneEvent::Gap { from, to })
    }

    /// Queues the exit (after any pending overflow gap). The stream ends after it.
    pub(crate) fn exited(&mut self, exit: ExitStatus, reason: EndReason, event_key: u64) {
        if let Some(from) = self.overflow_from.take() {
            if from < event_key {
                self.send(PaneEvent::Gap {
                    from,
                    to: event_key,
                });
            }
        }
        self.send(PaneEvent::Exited {
            exit,
            reason,
            event_key,
        });
    }

    /// Tells the app the connection is gone. The stream ends after it.
    pub(crate) fn disconnected(&self, reason: String) {
        self.send(PaneEvent::Disconnected { reason });
    }

    fn send(&self, ev: PaneEvent) -> bool {
        self.tx.send(ev).is_ok()
    }
}

/// Credit bookkeeping of one pane (no IO): decides when consumption warrants an `Ack`.
#[derive(Debug, Clone)]
pub(crate) struct Credit {
    enabled: bool,
    window: u64,
    acked: u64,
}

impl Credit {
    pub(crate) fn new(enabled: bool, window: u64, start: u64) -> Self {
        Credit {
            enabled,
            window,
            acked: start,
        }
    }

    /// The app consumed output up to `end`; returns the offset to ack, if an ack is due (at least
    /// half a window consumed since the last ack).
    pub(crate) fn consumed(&mut self, end: u64) -> Option<u64> {
        if !self.enabled || end < self.acked + (self.window / 2).max(1) {
            return None;
        }
        self.acked = end;
        Some(end)
    }
}

/// Puts a pane's events in offset order, each offset at most once (no IO).
#[derive(Debug, Clone)]
struct Sequencer {
    /// Offset of the next byte to deliver.
    next: u64,
}

impl Sequencer {
    /// Drops repeats, trims overlaps and makes holes explicit, then appends the event to `ready`.
    fn admit(&mut self, ev: PaneEvent, ready: &mut VecDeque<PaneEvent>) {
        match ev {
            PaneEvent::Output { offset, mut data } => {
                let end = offset + data.len() as u64;
                if end <= self.next {
                    return;
                }
                let mut offset = offset;
                if offset < self.next {
                    data.drain(..(self.next - offset) as usize);
                    offset = self.next;
                } else if offset > self.next {
                    ready.push_back(PaneEvent::Gap {
                        from: self.next,
                        to: offset,
                    });
                }
                self.next = end;
                ready.push_back(PaneEvent::Output { offset, data });
            }
            PaneEvent::Gap { from, to } => {
                if to <= self.next {
                    return;
                }
                let from = from.max(self.next);
                self.next = to;
                ready.push_back(PaneEvent::Gap { from, to });
            }
            ev @ (PaneEvent::Exited { .. } | PaneEvent::Disconnected { .. }) => {
                ready.push_back(ev);
            }
        }
    }
}

/// An attached pane: its binding, the attach result, and its event stream.
///
/// Read events with [`PaneHandle::next`] (or as a `futures` `Stream`). Events come in PTY order;
/// each output offset is delivered at most once. Consuming events returns credit to the agent.
/// The stream ends (`None`) after [`PaneEvent::Exited`], [`PaneEvent::Disconnected`], an explicit
/// [`Session::detach`](crate::Session::detach), or a newer attach of the same PTY on the same
/// session (which takes over the subscription).
///
/// Dropping the handle detaches this connection from the pane (best effort); the PTY keeps running.
pub struct PaneHandle {
    binding: Binding,
    attached: Attached,
    queue: PaneQueue,
    sink_id: u64,
    ready: VecDeque<PaneEvent>,
    seq: Sequencer,
    credit: Credit,
    ended: bool,
    shared: Arc<Shared>,
    requests: mpsc::WeakSender<Bytes>,
}

impl PaneHandle {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        attached: Attached,
        queue: PaneQueue,
        sink_id: u64,
        credit_enabled: bool,
        window: u64,
        shared: Arc<Shared>,
        requests: mpsc::WeakSender<Bytes>,
    ) -> Self {
        let mut ready = VecDeque::new();
        if attached.lost > 0 {
            ready.push_back(PaneEvent::Gap {
                from: attached.replay_from.saturating_sub(attached.lost),
                to: attached.replay_from,
            });
        }
        PaneHandle {
            binding: attached.binding.clone(),
            seq: Sequencer {
                next: attached.replay_from,
            },
            credit: Credit::new(credit_enabled, window, attached.replay_from),
            attached,
            queue,
            sink_id,
            ready,
            ended: false,
            shared,
            requests,
        }
    }

    /// The binding this handle holds (pass it to input, resize, ...).
    pub fn binding(&self) -> &Binding {
        &self.binding
    }

    /// What the agent answered to the attach (replay start, end offset, lost bytes, size).
    pub fn attached(&self) -> &Attached {
        &self.attached
    }

    /// Offset of the next output byte this handle would deliver: the `resume_from` to use when
    /// re-attaching after a disconnect.
    pub fn next_offset(&self) -> u64 {
        self.seq.next
    }

    /// The next event, or `None` when the stream has ended.
    pub async fn next(&mut self) -> Option<PaneEvent> {
        std::future::poll_fn(|cx| self.poll_event(cx)).await
    }

    fn poll_event(&mut self, cx: &mut Context<'_>) -> Poll<Option<PaneEvent>> {
        loop {
            if let Some(ev) = self.ready.pop_front() {
                self.consume(&ev);
                return Poll::Ready(Some(ev));
            }
            if self.ended {
                return Poll::Ready(None);
            }
            match self.queue.rx.poll_recv(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(None) => self.ended = true,
                Poll::Ready(Some(ev)) => {
                    if let PaneEvent::Output { data, .. } = &ev {
                        self.queue
                            .queued
                            .fetch_sub(data.len() as u64, Ordering::AcqRel);
                    }
                    self.seq.admit(ev, &mut self.ready);
                }
            }
        }
    }

    /// The app took `ev`: return credit when due; end the stream after a final event.
    fn consume(&mut self, ev: &PaneEvent) {
        let end = match ev {
            PaneEvent::Output { offset, data } => offset + data.len() as u64,
            PaneEvent::Gap { to, .. } => *to,
            PaneEvent::Exited { .. } | PaneEvent::Disconnected { .. } => {
                self.ended = true;
                self.ready.clear();
                return;
            }
        };
        if let Some(offset) = self.credit.consumed(end) {
            self.shared.ack(self.binding.pty, offset);
        }
    }
}

impl futures_util::Stream for PaneHandle {
    type Item = PaneEvent;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<PaneEvent>> {
        self.get_mut().poll_event(cx)
    }
}

impl std::fmt::Debug for PaneHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PaneHandle")
            .field("binding", &self.binding)
            .field("next_offset", &self.seq.next)
            .field("ended", &self.ended)
            .finish_non_exhaustive()
    }
}

impl Drop for PaneHandle {
    fn drop(&mut self) {
        // Only if this handle still owns the subscription (not taken over, not ended).
        if !self.shared.remove_pane(self.binding.pty, self.sink_id) {
            return;
        }
        if let Some(tx) = self.requests.upgrade() {
            let id = self.shared.next_id();
            let detach = Request::Detach(Detach {
                binding: self.binding.clone(),
            });
            // Best effort: if the queue is full the agent keeps the subscription until the
            // connection ends, and stops forwarding once the window is used.
            let _ = tx.try_send(Bytes::from(Message::Request(id, detach).to_bytes()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credit_acks_after_half_a_window() {
        let mut c = Credit::new(true, 100, 1000);
        assert_eq!(c.consumed(1049), None);
        assert_eq!(c.consumed(1050), Some(1050));
        assert_eq!(c.consumed(1060), None);
        assert_eq!(c.consumed(1100), Some(1100));
        let mut off = Credit::new(false, 100, 0);
        assert_eq!(
            off.consumed(10_000),
            None,
            "no acks without the credit capability"
        );
    }

    #[test]
    fn sink_over_cap_drops_and_reports_the_exact_gap() {
        let (mut sink, mut q) = PaneSink::new(1, 10);
        assert!(sink.output(0, vec![b'a'; 8]));
        assert!(sink.output(8, vec![b'b'; 8]), "dropped, over cap");
        assert!(sink.output(16, vec![b'c'; 4]), "still over cap");
        // The app drains the queue.
        let first = q.rx.try_recv().unwrap();
        assert_eq!(
            first,
            PaneEvent::Output {
                offset: 0,
                data: vec![b'a'; 8]
            }
        );
        q.queued.fetch_sub(8, Ordering::AcqRel);
        assert!(sink.output(20, vec![b'd'; 2]));
        assert_eq!(q.rx.try_recv().unwrap(), PaneEvent::Gap { from: 8, to: 20 });
        assert_eq!(
            q.rx.try_recv().unwrap(),
            PaneEvent::Output {
                offset: 20,
                data: vec![b'd'; 2]
            }
        );
    }

    #[test]
    fn sink_reports_overflow_before_exit() {
        let (mut sink, mut q) = PaneSink::new(1, 4);
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

    fn out(offset: u64, data: &[u8]) -> PaneEvent {
        PaneEvent::Output {
            offset,
            data: data.to_vec(),
        }
    }

    #[test]
    fn sequencer_drops_repeats_trims_overlaps_and_makes_holes_explicit() {
        let mut seq = Sequencer { next: 10 };
        let mut ready = VecDeque::new();
        seq.admit(out(5, b"01234"), &mut ready); // 5..10 already delivered
        seq.admit(out(8, b"89ab"), &mut ready); // 8..12 overlaps: 10..12 is new
        seq.admit(out(14, b"ef"), &mut ready); // 12..14 missing
        seq.admit(PaneEvent::Gap { from: 12, to: 14 }, &mut ready); // already reported
        let got: Vec<_> = ready.into_iter().collect();
        assert_eq!(
            got,
            vec![
                out(10, b"ab"),
                PaneEvent::Gap { from: 12, to: 14 },
                out(14, b"ef")
            ]
        );
        assert_eq!(seq.next, 16);
    }

    #[test]
    fn queue_cap_is_bounded_by_the_window() {
        assert_eq!(queue_cap(1000, true), 2000 + MAX_OUTPUT_CHUNK as u64);
        assert!(queue_cap(1000, false) >= 2 << 20);
    }
}
