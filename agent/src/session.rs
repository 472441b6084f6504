//! Per-connection state: this connection's subscriptions and the queue its frames go out on.
//!
//! Dropping a session (connection closed for any reason) only unsubscribes: the PTYs keep
//! running and their leases become `detached` (rule A).

use std::collections::HashMap;

use relay_protocol::message::{Ack, Attach, Attached, Detach};
use relay_protocol::{ErrorReply, Message, PtyId};
use tokio::sync::mpsc;

use crate::state::State;
use crate::subscription::Subscription;

/// A subscription accepted by `Attach` whose forwarding starts after the reply is queued, so the
/// `Attached` reply precedes its output.
struct Staged {
    pty: std::sync::Arc<crate::pty::Pty>,
    start: u64,
}

/// State of one client connection.
pub struct Session {
    state: State,
    out: mpsc::Sender<Message>,
    chunk: usize,
    subs: HashMap<PtyId, Subscription>,
    staged: Vec<Staged>,
}

impl Session {
    /// A session sending on `out`, with output chunks of at most `chunk` bytes.
    pub fn new(state: State, out: mpsc::Sender<Message>, chunk: usize) -> Self {
        Session {
            state,
            out,
            chunk,
            subs: HashMap::new(),
            staged: Vec::new(),
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
        let id = pty.binding().pty;
        if self.subs.remove(&id).is_some() {
            self.state.detached(&id);
        }
        let (start, end) = {
            let ring = pty.ring().lock().unwrap_or_else(|p| p.into_inner());
            (ring.start(), ring.end())
        };
        let (replay_from, lost) = match req.resume_from {
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
