//! One attached pane as the app sees it: its ordered event stream ([`PaneHandle`],
//! [`PaneEvent`]).
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
//!
//! # Layering
//!
//! This module knows nothing of connections. The queue's producer end (`sink`) is filled by a
//! session's reader task and, for panes of a [`Host`](crate::Host), by its supervisor; the handle
//! talks back through one small link (credit acks, release on drop) that the session or the host
//! implements.

mod order;
pub(crate) mod sink;

use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll};

use relay_protocol::message::Attached;
use relay_protocol::{Binding, EndReason, ExitStatus, PtyId, ScreenEvent, TermSize};

use order::{Credit, Sequencer};
pub use sink::queue_cap;
pub(crate) use sink::{PaneQueue, PaneSink};

/// Something that happened on an attached pane, in PTY order.
///
/// A [`Session`](crate::Session) pane's stream ends after `Exited` or `Disconnected`. A
/// [`Host`](crate::Host) pane's stream survives reconnects: it sees `Interrupted`, then
/// `Resumed` (or `Unresolved`, then later `Resumed`), and ends after `Exited`, `Ended` or
/// `Mismatch`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
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
    /// The screen as it was just before output byte `offset` (agents with the `screen`
    /// capability): `data`, written to a terminal of `size` (columns × rows), reproduces it —
    /// primary screen with a bounded scrollback, the alternate screen of a full-screen program on
    /// top, cursor, title and input modes. It begins by clearing the terminal. Output continues
    /// from `offset`. It comes first when a snapshot was asked for, and in place of a gap when the
    /// agent no longer held the bytes since the last one delivered (rule E: never a silent jump).
    Snapshot {
        /// Output offset the snapshot corresponds to.
        offset: u64,
        /// Size it was rendered at (the PTY's size then).
        size: TermSize,
        /// The bytes to write to the terminal.
        data: Vec<u8>,
    },
    /// A typed event the program caused (bell, title, working directory, command finished),
    /// after the output up to `offset`. Keys count up from 1 per PTY; a stream delivers each key
    /// at most once, also across re-attaches and snapshots.
    Event {
        /// Event key, unique per PTY.
        key: u64,
        /// Output offset by which it had happened.
        offset: u64,
        /// What happened.
        event: ScreenEvent,
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
    /// The connection of a [`Session`](crate::Session) was lost (or its [`Host`](crate::Host)
    /// was closed); the stream ends after this event. The PTY is most likely still running (rule A): reconnect and attach with `expect`
    /// set to this binding's PTY and `resume_from` set to [`PaneHandle::next_offset`] — or use a
    /// [`Host`](crate::Host), which does that by itself.
    Disconnected {
        /// What happened to the connection.
        reason: String,
    },
    /// A [`Host`](crate::Host) pane lost its connection; the host is reconnecting and will
    /// re-attach this pane to the same PTY. The stream continues; nothing on the host ended
    /// (rule A).
    Interrupted {
        /// What happened to the connection.
        reason: String,
    },
    /// A [`Host`](crate::Host) pane was re-attached to the same PTY after a reconnect; output
    /// continues from offset `from` (a [`PaneEvent::Gap`] follows when the agent no longer held
    /// everything since the last byte delivered).
    Resumed {
        /// Offset of the next output byte.
        from: u64,
    },
    /// A [`Host`](crate::Host) pane's re-attach proved nothing (the agent did not answer, or no
    /// longer knows the pane although its PTY was never reported ended). The pane is kept and
    /// re-attached on the next connection (rule A: unknown is not dead); the stream continues.
    Unresolved {
        /// Why the re-attach did not settle it.
        reason: String,
    },
    /// A [`Host`](crate::Host) pane's PTY ended while the pane was not attached (proven by the
    /// agent on re-attach: it exited, was killed, or the agent restarted). The stream ends after
    /// this event.
    Ended {
        /// Why it ended.
        reason: EndReason,
        /// How it ended, when known (absent after an agent restart).
        exit: Option<ExitStatus>,
    },
    /// A [`Host`](crate::Host) pane's key is bound to another PTY now (rule C): this handle's
    /// shell is no longer the pane's, and keystrokes are never sent to the other one. The stream
    /// ends after this event.
    Mismatch {
        /// The PTY the pane has now, if any.
        current: Option<PtyId>,
    },
}

impl PaneEvent {
    /// Whether the stream ends after this event.
    pub fn is_final(&self) -> bool {
        matches!(
            self,
            PaneEvent::Exited { .. }
                | PaneEvent::Disconnected { .. }
                | PaneEvent::Ended { .. }
                | PaneEvent::Mismatch { .. }
        )
    }
}

/// How a handle talks back to whoever fills its queue (a session, or a host).
pub(crate) trait PaneLink: Send + Sync {
    /// Output of `pty` was consumed up to `offset` (credit).
    fn ack(&self, pty: PtyId, offset: u64);
    /// The handle is gone: stop filling its queue and detach (best effort).
    fn release(&self);
}

/// An attached pane: its binding, the attach result, and its event stream.
///
/// Read events with [`PaneHandle::next`] (or as a `futures` `Stream`). Events come in PTY order;
/// each output offset is delivered at most once. Consuming events returns credit to the agent.
/// The stream ends (`None`) after a final event ([`PaneEvent::is_final`]), an explicit detach, or
/// a newer attach of the same PTY on the same session or host (which takes over the
/// subscription).
///
/// Dropping the handle detaches from the pane (best effort); the PTY keeps running.
pub struct PaneHandle {
    binding: Binding,
    attached: Attached,
    queue: PaneQueue,
    ready: VecDeque<PaneEvent>,
    seq: Sequencer,
    credit: Credit,
    ended: bool,
    link: Box<dyn PaneLink>,
}

impl PaneHandle {
    /// A handle over `queue`, whose sink was installed by the `attached` reply. `credit` says
    /// whether the agent throttles by a credit window of `window` bytes.
    /// `snapshot`: a snapshot starts the stream, standing for the `lost` bytes.
    pub(crate) fn new(
        attached: Attached,
        snapshot: bool,
        queue: PaneQueue,
        credit: bool,
        window: u64,
        link: Box<dyn PaneLink>,
    ) -> Self {
        // The sink reports bytes the agent no longer held as a gap ending at `replay_from`,
        // unless a snapshot stands for them.
        let start = if snapshot {
            attached.replay_from
        } else {
            attached.replay_from.saturating_sub(attached.lost)
        };
        PaneHandle {
            binding: attached.binding.clone(),
            seq: Sequencer { next: start },
            credit: Credit::new(credit, window, attached.replay_from),
            attached,
            queue,
            ready: VecDeque::new(),
            ended: false,
            link,
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
                    self.queue.taken(&ev);
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
            PaneEvent::Resumed { from } => {
                self.credit.restart(*from);
                return;
            }
            PaneEvent::Snapshot { offset, .. } => *offset,
            ev if ev.is_final() => {
                self.ended = true;
                self.ready.clear();
                return;
            }
            _ => return,
        };
        if let Some(offset) = self.credit.consumed(end) {
            self.link.ack(self.binding.pty, offset);
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
        self.link.release();
    }
}
