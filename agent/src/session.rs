//! Per-connection state: this connection's subscriptions and the queue its frames go out on.
//!
//! Dropping a session (connection closed for any reason) only unsubscribes: the PTYs keep
//! running and their leases become `detached` (rule A).
//!
//! `Open` spawns off the read loop (like `Create`, so a slow spawn holds up no other request);
//! its result comes back through [`Session::next_opened`] and is turned into a subscription and
//! the reply by [`Session::finish_open`] on the read loop, so every later request of the
//! connection sees the subscription.

use std::collections::HashMap;
use std::sync::Arc;

use relay_protocol::message::{Ack, Attach, Attached, Create, Created, Detach, Open, Opened};
use relay_protocol::{ErrorReply, Message, PtyId, Response};
use tokio::sync::mpsc;

use crate::pty::Pty;
use crate::state::State;
use crate::subscription::Subscription;

/// How many finished opens may wait for the read loop.
const OPENED_QUEUE: usize = 16;

/// A subscription accepted by `Attach` whose forwarding starts after the reply is queued, so the
/// `Attached` reply precedes its output.
struct Staged {
    pty: Arc<Pty>,
    start: u64,
}

/// A finished `Open` on its way back to the read loop.
pub struct OpenDone {
    id: u64,
    resume_from: Option<u64>,
    result: Result<(Created, Counted), ErrorReply>,
}

/// A PTY with one attach count taken by `Open` for this connection. [`Session::finish_open`]
/// hands the count to a subscription; dropped any other way (the connection closed before the
/// open finished), it gives the count back.
struct Counted {
    state: State,
    pty: Option<Arc<Pty>>,
}

impl Counted {
    fn take(mut self) -> Arc<Pty> {
        self.pty.take().expect("a counted PTY is taken once")
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        if let Some(pty) = self.pty.take() {
            self.state.detached(&pty.binding().pty);
        }
    }
}

/// State of one client connection.
pub struct Session {
    state: State,
    out: mpsc::Sender<Message>,
    chunk: usize,
    subs: HashMap<PtyId, Subscription>,
    staged: Vec<Staged>,
    opened_tx: mpsc::Sender<OpenDone>,
    opened_rx: mpsc::Receiver<OpenDone>,
}

impl Session {
    /// A session sending on `out`, with output chunks of at most `chunk` bytes.
    pub fn new(state: State, out: mpsc::Sender<Message>, chunk: usize) -> Self {
        let (opened_tx, opened_rx) = mpsc::channel(OPENED_QUEUE);
        Session {
            state,
            out,
            chunk,
            subs: HashMap::new(),
            staged: Vec::new(),
            opened_tx,
            opened_rx,
        }
    }

    /// The daemon state.
    pub fn state(&self) -> &State {
        &self.state
    }

    /// The connection's outgoing queue.
    pub fn out(&self) -> &mpsc::Sender<Message> {
        &self.out
    }

    /// Attach (rule B: never spawns). Re-attaching a PTY this connection already receives
    /// restarts its output at the new offset.
    ///
    /// # Errors
    /// `NotFound`, `Ended`, `Mismatch`; `BadRequest` for a `resume_from` beyond the output end.
    pub fn attach(&mut self, req: Attach) -> Result<Attached, ErrorReply> {
        let pty = self.state.attach(&req.pane, req.expect)?;
        self.subscribe(pty, req.resume_from)
    }

    /// Starts an `Open` with request id `id` in its own task (create under the pane gate, which
    /// may wait for a spawn). Its result arrives on [`Session::next_opened`].
    pub fn open(&self, id: u64, req: Open) {
        let state = self.state.clone();
        let done = self.opened_tx.clone();
        tokio::spawn(async move {
            let create = Create {
                pane: req.pane,
                spec: req.spec,
            };
            let result = state.create_attached(create).await.map(|(created, pty)| {
                let counted = Counted {
                    state: state.clone(),
                    pty: Some(pty),
                };
                (created, counted)
            });
            let finished = OpenDone {
                id,
                resume_from: req.resume_from,
                result,
            };
            // Fails only when the session is gone; dropping `finished` gives the count back.
            let _ = done.send(finished).await;
        });
    }

    /// The next finished `Open` (pending forever while none is in flight).
    pub async fn next_opened(&mut self) -> Option<OpenDone> {
        self.opened_rx.recv().await
    }

    /// Subscribes a finished `Open` like an attach; returns its request id and reply. Call
    /// [`Session::start_staged`] after queuing the reply.
    pub fn finish_open(&mut self, done: OpenDone) -> (u64, Response) {
        let reply = match done.result {
            Ok((created, counted)) => self
                .subscribe(counted.take(), done.resume_from)
                .map(|attached| Response::Opened(Opened { created, attached })),
            Err(e) => Err(e),
        };
        (done.id, reply.unwrap_or_else(Response::Error))
    }

    /// Stages this connection's subscription to `pty`, whose attach count the caller already
    /// took, from `resume_from` (see `Attach`). Works on a PTY that has ended meanwhile: the
    /// subscription delivers what the ring holds, then `Exited`. Shared by `Attach` and `Open`.
    ///
    /// # Errors
    /// `BadRequest` for a `resume_from` beyond the output end (the attach count is given back).
    fn subscribe(
        &mut self,
        pty: Arc<Pty>,
        resume_from: Option<u64>,
    ) -> Result<Attached, ErrorReply> {
        let id = pty.binding().pty;
        if self.subs.remove(&id).is_some() {
            self.state.detached(&id);
        }
        let (start, end) = {
            let ring = pty.ring().lock().unwrap_or_else(|p| p.into_inner());
            (ring.start(), ring.end())
        };
        let (replay_from, lost) = match resume_from {
            None => (end, 0),
            Some(r) if r > end => {
                self.state.detached(&id);
                return Err(ErrorReply::BadRequest {
                    message: format!(
                        "resume_from {r} is beyond the output end {end} of {}; resume from an offset this PTY produced",
                        pty.binding()
                    ),
                });
            }
            Some(r) if r < start => (start, start - r),
            Some(r) => (r, 0),
        };
        let attached = Attached {
            binding: pty.binding().clone(),
            replay_from,
            end_offset: end,
            lost,
            size: pty.size(),
        };
        self.staged.push(Staged {
            pty,
            start: replay_from,
        });
        Ok(attached)
    }

    /// Starts the subscriptions staged by [`Session::attach`]; call after queuing its reply.
    pub fn start_staged(&mut self) {
        let window = self.state.config().window;
        for s in self.staged.drain(..) {
            let id = s.pty.binding().pty;
            let sub = Subscription::start(s.pty, s.start, window, self.chunk, self.out.clone());
            self.subs.insert(id, sub);
        }
    }

    /// Detach: fenced on the exact binding; stops this connection's output of that PTY.
    ///
    /// # Errors
    /// `NotFound`, `Ended`, `Mismatch`.
    pub fn detach(&mut self, req: Detach) -> Result<(), ErrorReply> {
        self.state.fenced(&req.binding)?;
        if self.subs.remove(&req.binding.pty).is_some() {
            self.state.detached(&req.binding.pty);
        }
        Ok(())
    }

    /// Credit returned by the peer. Unknown PTYs are ignored (the ack may race a detach).
    pub fn ack(&mut self, req: Ack) {
        if let Some(sub) = self.subs.get(&req.pty) {
            sub.ack(req.offset);
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        for s in self.staged.drain(..) {
            self.state.detached(&s.pty.binding().pty);
        }
        for (id, sub) in self.subs.drain() {
            drop(sub);
            self.state.detached(&id);
        }
    }
}
