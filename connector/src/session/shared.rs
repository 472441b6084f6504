//! State shared by a session's handles and its reader and writer tasks: the table of pending
//! requests, the per-PTY routes to pane queues, the coalesced credit acks, and the one place
//! requests are encoded into frames ([`Shared::encode`]).
//!
//! Everything here is synchronous (std mutexes, never held across an `.await`), so the reader can
//! apply a frame without waiting for anyone: replies go to oneshot senders and pushes to the
//! never-blocking [`PaneSink`]s.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use relay_protocol::message::{Attached, Created, Detach};
use relay_protocol::{Binding, DecodeError, Message, Op, PtyId, Push, Request, Response};
use tokio::sync::{mpsc, oneshot, Notify};
use tokio_util::sync::CancellationToken;

use crate::pane::{PaneLink, PaneSink};
use crate::sync::LockExt;
use crate::Error;

/// Where a reply goes.
pub(crate) type ReplyTx = oneshot::Sender<Result<Response, Error>>;

/// A request waiting for its reply.
pub(crate) enum Pending {
    /// A plain request.
    Reply(ReplyTx),
    /// An attach or open: on `Attached` (or `Opened`), the route is installed for the PTY before
    /// the next frame is read, so no output push after the reply can be missed.
    Attach(ReplyTx, Route),
}

/// Where a PTY's pushes go on this connection.
pub(crate) struct Route {
    pub(crate) sink: Arc<PaneSink>,
    /// Set when the attach reply arrives.
    binding: Option<Binding>,
    /// The pane belongs to a [`Host`](crate::Host), which outlives this connection: a lost
    /// connection does not end its stream (the host reports and re-attaches it).
    survives: bool,
    start: RouteStart,
}

/// What the attach reply means to the route's queue.
#[derive(Debug, Clone, Copy)]
pub(crate) enum RouteStart {
    /// A new stream: it starts at the reply's `replay_from`.
    Fresh,
    /// A stream that continues after a reconnect: the queue gets
    /// [`PaneEvent::Resumed`](crate::PaneEvent::Resumed) (and a gap if bytes were lost) before
    /// any output of the new subscription, and the new connection's byte cap.
    Resume {
        /// The new queue cap, in bytes.
        cap: u64,
    },
}

impl Route {
    /// A route for a pane of a plain session (its stream ends with the connection).
    pub(crate) fn session(sink: Arc<PaneSink>) -> Route {
        Route {
            sink,
            binding: None,
            survives: false,
            start: RouteStart::Fresh,
        }
    }

    /// A route for a pane of a host (its stream outlives the connection).
    pub(crate) fn host(sink: Arc<PaneSink>, start: RouteStart) -> Route {
        Route {
            sink,
            binding: None,
            survives: true,
            start,
        }
    }
}

struct State {
    pending: HashMap<u64, Pending>,
    routes: HashMap<PtyId, Route>,
    closed: Option<String>,
}

/// Shared state of one connection.
pub(crate) struct Shared {
    state: Mutex<State>,
    acks: Mutex<HashMap<PtyId, u64>>,
    /// Woken when an ack is waiting to be written.
    pub(crate) ack_ready: Notify,
    /// Cancelled when the connection is closed (by either task, by the last handle going away,
    /// or by [`Shared::close`] from a supervisor that declared the link dead).
    pub(crate) cancel: CancellationToken,
    /// Frames received so far: a heartbeat compares two readings to tell silence from traffic
    /// without a clock read per frame (rule I).
    pub(crate) frames: AtomicU64,
    /// The writer's queue, for requests sent from synchronous code (a dropped pane's `Detach`).
    /// Weak: the writer ends when every [`Session`](crate::Session) handle is gone.
    requests: mpsc::WeakSender<Bytes>,
    /// Largest frame the agent accepts, in bytes.
    max_frame: usize,
    next_id: AtomicU64,
}

impl Shared {
    /// Fresh state; request ids start after the hello's id 1 and the policy's id 2
    /// ([`super::handshake::POLICY_ID`]).
    pub(crate) fn new(requests: mpsc::WeakSender<Bytes>, max_frame: usize) -> Self {
        Shared {
            state: Mutex::new(State {
                pending: HashMap::new(),
                routes: HashMap::new(),
                closed: None,
            }),
            acks: Mutex::new(HashMap::new()),
            ack_ready: Notify::new(),
            cancel: CancellationToken::new(),
            frames: AtomicU64::new(0),
            requests,
            max_frame,
            next_id: AtomicU64::new(super::handshake::POLICY_ID + 1),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave the maps half-updated in a way that matters.
        self.state.lock_unpoisoned()
    }

    /// A fresh non-zero request id.
    pub(crate) fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// The frame of request `id`: the one place requests are encoded.
    ///
    /// # Errors
    /// [`ErrorReply::LimitExceeded`](relay_protocol::ErrorReply::LimitExceeded) when the frame
    /// is larger than the agent accepts (nothing is sent).
    pub(crate) fn encode(&self, id: u64, req: Request) -> Result<Bytes, Error> {
        let op = req.op();
        let bytes = Bytes::from(Message::Request(id, req).to_bytes());
        if bytes.len() > self.max_frame {
            return Err(relay_protocol::ErrorReply::LimitExceeded {
                what: format!("{op:?} request of {} bytes", bytes.len()),
                limit: self.max_frame as u64,
            }
            .into());
        }
        Ok(bytes)
    }

    /// Records a pending request.
    ///
    /// # Errors
    /// [`Error::ConnectionLost`] when the connection is already closed (the request is not sent).
    pub(crate) fn register(&self, id: u64, pending: Pending) -> Result<(), Error> {
        let mut st = self.state();
        if let Some(reason) = &st.closed {
            return Err(Error::connection_lost(reason.clone()));
        }
        st.pending.insert(id, pending);
        Ok(())
    }

    /// Forgets a pending request (it could not be sent).
    pub(crate) fn unregister(&self, id: u64) {
        self.state().pending.remove(&id);
    }

    /// Forgets every pending request whose caller stopped waiting (a request timeout dropped its
    /// receiver), so a late reply is dropped instead of being applied: in particular a late
    /// `Attached` must not install a subscriber nobody reads.
    pub(crate) fn forget_abandoned(&self) {
        self.state().pending.retain(|_, p| {
            let (Pending::Reply(tx) | Pending::Attach(tx, _)) = p;
            !tx.is_closed()
        });
    }

    /// Why the connection closed, if it did.
    pub(crate) fn closed_reason(&self) -> Option<String> {
        self.state().closed.clone()
    }

    /// The error for requests on a closed connection.
    pub(crate) fn lost(&self) -> Error {
        Error::connection_lost(
            self.closed_reason()
                .unwrap_or_else(|| "the session was closed".to_string()),
        )
    }

    /// Closes the connection's state: every pending request fails with
    /// [`Error::ConnectionLost`], every session pane's stream gets
    /// [`PaneEvent::Disconnected`](crate::PaneEvent::Disconnected) and ends (host panes are
    /// left to their host), and both tasks are told to stop. Idempotent; the first reason wins.
    pub(crate) fn close(&self, reason: String) {
        let (pending, routes) = {
            let mut st = self.state();
            if st.closed.is_some() {
                return;
            }
            st.closed = Some(reason.clone());
            (
                std::mem::take(&mut st.pending),
                std::mem::take(&mut st.routes),
            )
        };
        tracing::debug!(%reason, "agent connection closed");
        for (_, p) in pending {
            let (Pending::Reply(tx) | Pending::Attach(tx, _)) = p;
            let _ = tx.send(Err(Error::connection_lost(reason.clone())));
        }
        for (_, route) in routes {
            if !route.survives {
                route.sink.event(crate::PaneEvent::Disconnected {
                    reason: reason.clone(),
                });
            }
        }
        self.cancel.cancel();
    }

    /// Removes the route of `pty` if it still leads to the sink `sink_id`. Returns whether it
    /// was removed.
    pub(crate) fn remove_route(&self, pty: PtyId, sink_id: u64) -> bool {
        let mut st = self.state();
        if st.routes.get(&pty).is_some_and(|r| r.sink.id == sink_id) {
            st.routes.remove(&pty);
            true
        } else {
            false
        }
    }

    /// Ends the stream of `pty` (after an explicit detach).
    pub(crate) fn end_route(&self, pty: PtyId) {
        self.state().routes.remove(&pty);
    }

    /// A handle whose queue is `sink_id` is gone: removes its route and, if it was still the
    /// PTY's subscription, sends `Detach` without waiting (best effort: with a full queue the
    /// agent keeps the subscription until the connection ends, and stops forwarding once the
    /// window is used).
    pub(crate) fn release(&self, binding: &Binding, sink_id: u64) {
        if !self.remove_route(binding.pty, sink_id) {
            return;
        }
        let Some(tx) = self.requests.upgrade() else {
            return;
        };
        let req = Request::Detach(Detach {
            binding: binding.clone(),
        });
        if let Ok(frame) = self.encode(self.next_id(), req) {
            let _ = tx.try_send(frame);
        }
    }

    /// Records that output of `pty` was consumed up to `offset`; the writer sends the ack.
    pub(crate) fn ack(&self, pty: PtyId, offset: u64) {
        {
            let mut acks = self.acks.lock_unpoisoned();
            let e = acks.entry(pty).or_insert(offset);
            *e = (*e).max(offset);
        }
        self.ack_ready.notify_one();
    }

    /// Takes the acks waiting to be written (at most one per PTY).
    pub(crate) fn take_acks(&self) -> Vec<(PtyId, u64)> {
        let mut acks = self.acks.lock_unpoisoned();
        acks.drain().collect()
    }

    /// Applies one frame from the agent. Never waits.
    pub(crate) fn dispatch(&self, frame: &[u8]) {
        match Message::from_bytes(frame) {
            Ok(Message::Response(id, resp)) => self.complete(id, resp),
            Ok(Message::Push(push)) => self.push(push),
            Ok(Message::Request(id, req)) => {
                tracing::warn!(id, op = ?req.op(), "agent sent a request; ignored");
            }
            Err(DecodeError::UnknownOp { id, op }) if id != 0 => {
                self.fail(
                    id,
                    Error::UnexpectedReply(format!(
                        "reply with unknown op code {op:#06x}; upgrade the connector"
                    )),
                );
            }
            Err(e @ DecodeError::Body { id, .. }) if id != 0 => {
                self.fail(id, Error::Protocol(e));
            }
            Err(e) => {
                // An unknown push from a newer agent, or a malformed one: skip it, keep the rest.
                tracing::warn!(error = %e, "undecodable frame from the agent skipped");
            }
        }
    }

    fn fail(&self, id: u64, err: Error) {
        let pending = self.state().pending.remove(&id);
        match pending {
            Some(Pending::Reply(tx) | Pending::Attach(tx, _)) => {
                let _ = tx.send(Err(err));
            }
            None => tracing::warn!(id, error = %err, "bad reply to an unknown request"),
        }
    }

    fn complete(&self, id: u64, resp: Response) {
        let mut st = self.state();
        let Some(pending) = st.pending.remove(&id) else {
            // Detach sent by a dropped handle, or a caller that gave up waiting.
            tracing::debug!(id, op = ?resp.op(), "reply to a request nobody waits for");
            return;
        };
        let tx = match pending {
            Pending::Reply(tx) => tx,
            Pending::Attach(tx, mut route) => {
                if let Some((a, snapshot)) = attached_of(&resp) {
                    let pty = a.binding.pty;
                    // A resume never takes over another subscription of the PTY on this
                    // connection (a newer attach by the app wins over a late re-attach).
                    let taken = matches!(route.start, RouteStart::Resume { .. })
                        && st
                            .routes
                            .get(&pty)
                            .is_some_and(|r| r.sink.id != route.sink.id);
                    if !taken {
                        match route.start {
                            RouteStart::Fresh => {
                                route.sink.started(a.replay_from, a.lost, snapshot);
                            }
                            RouteStart::Resume { cap } => {
                                route.sink.resumed(a.replay_from, cap, snapshot);
                            }
                        }
                        route.binding = Some(a.binding.clone());
                        // A previous subscription of this PTY on this session is taken over;
                        // its stream ends when its sink is dropped here (unless a host still
                        // holds it).
                        st.routes.insert(pty, route);
                    }
                }
                tx
            }
        };
        drop(st);
        let result = match resp {
            Response::Error(e) => Err(Error::from(e)),
            other => Ok(other),
        };
        let _ = tx.send(result);
    }

    fn push(&self, push: Push) {
        let pty = match &push {
            Push::Output(o) => o.pty,
            Push::OutputGap(g) => g.pty,
            Push::Exited(e) => e.binding.pty,
            Push::Snapshot(s) => s.pty,
            Push::Event(e) => e.pty,
        };
        let mut st = self.state();
        let Some(route) = st.routes.get(&pty) else {
            tracing::trace!(%pty, "push for a PTY without subscriber dropped");
            return;
        };
        let keep = match push {
            Push::Output(o) => route.sink.output(o.offset, o.data),
            Push::OutputGap(g) => route.sink.gap(g.from, g.to),
            Push::Snapshot(s) => route.sink.snapshot_piece(s.offset, s.size, s.data, s.last),
            Push::Event(e) => route.sink.screen_event(e.key, e.offset, e.event),
            Push::Exited(e) => {
                if route.binding.as_ref() != Some(&e.binding) {
                    // Rule C: an exit for a binding this subscription does not hold.
                    tracing::debug!(binding = %e.binding, "exit for a stale binding dropped");
                    return;
                }
                route.sink.exited(e.exit, e.reason, e.event_key);
                false
            }
        };
        if !keep {
            st.routes.remove(&pty);
        }
    }
}

/// The subscription an attach-like reply describes, and whether a snapshot starts it.
pub(crate) fn attached_of(resp: &Response) -> Option<(&Attached, bool)> {
    match resp {
        Response::Attached(a) => Some((a, false)),
        Response::Opened(o) => Some((&o.attached, false)),
        Response::ScreenAttached(a) => Some((&a.attached, a.snapshot)),
        Response::ScreenOpened(o) => Some((&o.attached, o.snapshot)),
        _ => None,
    }
}

/// The parts of an open-like reply: what was created, the subscription, and whether a snapshot
/// starts it; for any other reply, its op.
pub(crate) fn opened_of(resp: Response) -> Result<(Created, Attached, bool), Op> {
    match resp {
        Response::Opened(o) => Ok((o.created, o.attached, false)),
        Response::ScreenOpened(o) => Ok((o.created, o.attached, o.snapshot)),
        other => Err(other.op()),
    }
}

/// The link of a pane attached through a plain [`Session`](crate::Session): acks and release
/// go to that connection.
pub(crate) struct SessionLink {
    pub(crate) shared: Arc<Shared>,
    pub(crate) binding: Binding,
    pub(crate) sink_id: u64,
}

impl PaneLink for SessionLink {
    fn ack(&self, pty: PtyId, offset: u64) {
        self.shared.ack(pty, offset);
    }

    fn release(&self) {
        self.shared.release(&self.binding, self.sink_id);
    }
}

#[cfg(test)]
mod tests;
