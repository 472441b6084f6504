//! State shared by a session's handles and its reader and writer tasks: the table of pending
//! requests, the per-PTY subscribers, and the coalesced credit acks.
//!
//! Everything here is synchronous (std mutexes, never held across an `.await`), so the reader can
//! apply a frame without waiting for anyone: replies go to oneshot senders and pushes to the
//! never-blocking [`PaneSink`]s.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use relay_protocol::{DecodeError, Message, PtyId, Push, Response};
use tokio::sync::{oneshot, Notify};
use tokio_util::sync::CancellationToken;

use crate::pane::PaneSink;
use crate::Error;

/// Where a reply goes.
pub(crate) type ReplyTx = oneshot::Sender<Result<Response, Error>>;

/// A request waiting for its reply.
pub(crate) enum Pending {
    /// A plain request.
    Reply(ReplyTx),
    /// An attach or open: on `Attached` (or `Opened`), the sink is installed for the PTY before
    /// the next frame is read, so no output push after the reply can be missed.
    Attach(ReplyTx, PaneSink),
}

struct State {
    pending: HashMap<u64, Pending>,
    panes: HashMap<PtyId, PaneSink>,
    closed: Option<String>,
}

/// Shared state of one connection.
pub(crate) struct Shared {
    state: Mutex<State>,
    acks: Mutex<HashMap<PtyId, u64>>,
    /// Woken when an ack is waiting to be written.
    pub(crate) ack_ready: Notify,
    /// Cancelled when the connection is closed (by either task, or by the last handle going away).
    pub(crate) cancel: CancellationToken,
    next_id: AtomicU64,
    next_sink: AtomicU64,
}

impl Shared {
    /// Fresh state; request ids start after the hello's id 1.
    pub(crate) fn new() -> Self {
        Shared {
            state: Mutex::new(State {
                pending: HashMap::new(),
                panes: HashMap::new(),
                closed: None,
            }),
            acks: Mutex::new(HashMap::new()),
            ack_ready: Notify::new(),
            cancel: CancellationToken::new(),
            next_id: AtomicU64::new(2),
            next_sink: AtomicU64::new(1),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave the maps half-updated in a way that matters.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A fresh non-zero request id.
    pub(crate) fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// A fresh id telling subscriptions apart.
    pub(crate) fn next_sink_id(&self) -> u64 {
        self.next_sink.fetch_add(1, Ordering::Relaxed)
    }

    /// Records a pending request.
    ///
    /// # Errors
    /// [`Error::ConnectionLost`] when the connection is already closed (the request is not sent).
    pub(crate) fn register(&self, id: u64, pending: Pending) -> Result<(), Error> {
        let mut st = self.state();
        if let Some(reason) = &st.closed {
            return Err(Error::ConnectionLost(reason.clone()));
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
        Error::ConnectionLost(
            self.closed_reason()
                .unwrap_or_else(|| "the session was closed".to_string()),
        )
    }

    /// Closes the connection's state: every pending request fails with
    /// [`Error::ConnectionLost`], every pane stream gets [`PaneEvent::Disconnected`] and ends,
    /// and both tasks are told to stop. Idempotent; the first reason wins.
    ///
    /// [`PaneEvent::Disconnected`]: crate::PaneEvent::Disconnected
    pub(crate) fn close(&self, reason: String) {
        let (pending, panes) = {
            let mut st = self.state();
            if st.closed.is_some() {
                return;
            }
            st.closed = Some(reason.clone());
            (
                std::mem::take(&mut st.pending),
                std::mem::take(&mut st.panes),
            )
        };
        tracing::debug!(%reason, "agent connection closed");
        for (_, p) in pending {
            let (Pending::Reply(tx) | Pending::Attach(tx, _)) = p;
            let _ = tx.send(Err(Error::ConnectionLost(reason.clone())));
        }
        for (_, sink) in panes {
            sink.disconnected(reason.clone());
        }
        self.cancel.cancel();
    }

    /// Removes the subscription of `pty` if it is still the one with `sink_id`. Returns whether
    /// it was removed.
    pub(crate) fn remove_pane(&self, pty: PtyId, sink_id: u64) -> bool {
        let mut st = self.state();
        if st.panes.get(&pty).is_some_and(|s| s.id == sink_id) {
            st.panes.remove(&pty);
            true
        } else {
            false
        }
    }

    /// Ends the stream of `pty` (after an explicit detach).
    pub(crate) fn end_pane(&self, pty: PtyId) {
        self.state().panes.remove(&pty);
    }

    /// Records that output of `pty` was consumed up to `offset`; the writer sends the ack.
    pub(crate) fn ack(&self, pty: PtyId, offset: u64) {
        {
            let mut acks = self.acks.lock().unwrap_or_else(|e| e.into_inner());
            let e = acks.entry(pty).or_insert(offset);
            *e = (*e).max(offset);
        }
        self.ack_ready.notify_one();
    }

    /// Takes the acks waiting to be written (at most one per PTY).
    pub(crate) fn take_acks(&self) -> Vec<(PtyId, u64)> {
        let mut acks = self.acks.lock().unwrap_or_else(|e| e.into_inner());
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
            Pending::Attach(tx, mut sink) => {
                let attached = match &resp {
                    Response::Attached(a) => Some(a),
                    Response::Opened(o) => Some(&o.attached),
                    _ => None,
                };
                if let Some(a) = attached {
                    sink.binding = Some(a.binding.clone());
                    // A previous subscription of this PTY on this session is taken over; its
                    // stream ends when its sink is dropped here.
                    st.panes.insert(a.binding.pty, sink);
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
        };
        let mut st = self.state();
        let Some(sink) = st.panes.get_mut(&pty) else {
            tracing::trace!(%pty, "push for a PTY without subscriber dropped");
            return;
        };
        let keep = match push {
            Push::Output(o) => sink.output(o.offset, o.data),
            Push::OutputGap(g) => sink.gap(g.from, g.to),
            Push::Exited(e) => {
                if sink.binding.as_ref() != Some(&e.binding) {
                    // Rule C: an exit for a binding this subscription does not hold.
                    tracing::debug!(binding = %e.binding, "exit for a stale binding dropped");
                    return;
                }
                sink.exited(e.exit, e.reason, e.event_key);
                false
            }
        };
        if !keep {
            st.panes.remove(&pty);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pane::PaneEvent;
    use relay_protocol::message::{Attached, Exited, Output};
    use relay_protocol::{Binding, EndReason, ExitStatus, Incarnation, PaneKey, Request, TermSize};

    fn binding(counter: u64) -> Binding {
        Binding {
            pane: PaneKey::new("w", "t", "l"),
            pty: PtyId {
                incarnation: Incarnation(7),
                counter,
            },
        }
    }

    fn frame(m: Message) -> Vec<u8> {
        m.to_bytes()
    }

    /// The agent's `Attached` reply to request `id` for `b`, from offset 0.
    fn attached_reply(id: u64, b: &Binding) -> Vec<u8> {
        frame(Message::Response(
            id,
            Response::Attached(Attached {
                binding: b.clone(),
                replay_from: 0,
                end_offset: 0,
                lost: 0,
                size: TermSize::default(),
            }),
        ))
    }

    #[test]
    fn attach_reply_installs_the_subscriber_before_the_next_push() {
        let shared = Shared::new();
        let (tx, mut rx) = oneshot::channel();
        let (sink, mut q) = PaneSink::new(1, 1 << 20);
        shared.register(5, Pending::Attach(tx, sink)).unwrap();
        let b = binding(1);
        shared.dispatch(&attached_reply(5, &b));
        shared.dispatch(&frame(Message::Push(Push::Output(Output {
            pty: b.pty,
            offset: 0,
            data: b"hi".to_vec(),
        }))));
        assert!(matches!(rx.try_recv(), Ok(Ok(Response::Attached(_)))));
        assert_eq!(
            q.rx.try_recv().unwrap(),
            PaneEvent::Output {
                offset: 0,
                data: b"hi".to_vec()
            }
        );
    }

    #[test]
    fn open_reply_installs_the_subscriber_before_the_next_push() {
        let shared = Shared::new();
        let (tx, mut rx) = oneshot::channel();
        let (sink, mut q) = PaneSink::new(1, 1 << 20);
        shared.register(6, Pending::Attach(tx, sink)).unwrap();
        let b = binding(3);
        let attached = Attached {
            binding: b.clone(),
            replay_from: 0,
            end_offset: 0,
            lost: 0,
            size: TermSize::default(),
        };
        let created = relay_protocol::message::Created {
            binding: b.clone(),
            existed: false,
        };
        shared.dispatch(&frame(Message::Response(
            6,
            Response::Opened(relay_protocol::message::Opened { created, attached }),
        )));
        shared.dispatch(&frame(Message::Push(Push::Exited(Exited {
            binding: b.clone(),
            exit: ExitStatus {
                code: 3,
                signal: None,
            },
            reason: EndReason::Exited,
            event_key: 0,
        }))));
        assert!(matches!(rx.try_recv(), Ok(Ok(Response::Opened(_)))));
        assert!(
            matches!(q.rx.try_recv(), Ok(PaneEvent::Exited { .. })),
            "the exit right after the reply reaches the new subscriber"
        );
    }

    #[test]
    fn exit_for_a_stale_binding_is_dropped() {
        let shared = Shared::new();
        let (tx, _rx) = oneshot::channel();
        let (sink, mut q) = PaneSink::new(1, 1 << 20);
        shared.register(5, Pending::Attach(tx, sink)).unwrap();
        let b = binding(2);
        shared.dispatch(&attached_reply(5, &b));
        let mut stale = b.clone();
        stale.pane = PaneKey::new("other", "t", "l");
        shared.dispatch(&frame(Message::Push(Push::Exited(Exited {
            binding: stale,
            exit: ExitStatus {
                code: 0,
                signal: None,
            },
            reason: EndReason::Exited,
            event_key: 0,
        }))));
        assert!(q.rx.try_recv().is_err(), "nothing delivered");
    }

    #[test]
    fn closing_fails_pending_requests_and_refuses_new_ones() {
        let shared = Shared::new();
        let (tx, mut rx) = oneshot::channel();
        shared.register(9, Pending::Reply(tx)).unwrap();
        shared.close("bridge exited".into());
        let err = rx.try_recv().unwrap().unwrap_err();
        assert!(err.is_connection_lost(), "{err}");
        let (tx2, _rx2) = oneshot::channel();
        let err = shared.register(10, Pending::Reply(tx2)).unwrap_err();
        assert!(err.to_string().contains("bridge exited"), "{err}");
        assert!(shared.cancel.is_cancelled());
    }

    #[test]
    fn agent_error_reply_becomes_a_typed_error() {
        let shared = Shared::new();
        let (tx, mut rx) = oneshot::channel();
        shared.register(3, Pending::Reply(tx)).unwrap();
        shared.dispatch(&frame(Message::Response(
            3,
            Response::Error(relay_protocol::ErrorReply::NotFound {
                pane: PaneKey::new("w", "t", "l"),
            }),
        )));
        assert!(rx.try_recv().unwrap().unwrap_err().is_not_found());
        // A request from the agent is ignored rather than crashing the reader.
        shared.dispatch(&frame(Message::Request(
            4,
            Request::Ping(relay_protocol::message::Ping { nonce: 1 }),
        )));
    }
}
