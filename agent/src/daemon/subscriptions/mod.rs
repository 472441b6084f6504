//! Per-connection state: this connection's subscriptions and the queue its frames go out on.
//!
//! Dropping a session (connection closed for any reason) only unsubscribes: the PTYs keep
//! running and their leases become `detached` (rule A).
//!
//! `Open` spawns off the read loop (like `Create`, so a slow spawn holds up no other request);
//! its result comes back through [`Session::next_opened`] and is turned into a subscription and
//! the reply by [`Session::finish_open`] on the read loop, so every later request of the
//! connection sees the subscription.

pub mod subscription;

use std::collections::HashMap;
use std::sync::Arc;

use relay_protocol::message::{
    Ack, Attach, AttachScreen, Attached, Create, Created, Detach, Open, OpenScreen, Opened,
    ScreenAttached, ScreenOpened,
};
use relay_protocol::{ErrorReply, LeaseInfo, Message, PtyId, Response, Resume, WorkspaceId};
use tokio::sync::mpsc;
use tracing::Instrument;

use crate::lifecycle::{policy, LeasePolicy};
use crate::limits;
use crate::output::credit::{Credit, WindowBudget};
use crate::output::hold::Hold;
use crate::runtime::blocking;
use crate::runtime::LockExt;
use crate::state::{Attachment, State};
use subscription::{Mode, Start, Subscription};

/// How many finished opens may wait for the read loop.
const OPENED_QUEUE: usize = 16;

/// A subscription accepted by `Attach` whose forwarding starts after the reply is queued, so the
/// `Attached` reply precedes its output. Its attachment counts it from acceptance on.
struct Staged {
    attachment: Attachment,
    start: Start,
    mode: Mode,
    /// A lossless subscription's hold, taken when its start was decided.
    hold: Option<Hold>,
}

/// A finished `Open` or `OpenScreen` on its way back to the read loop.
pub struct OpenDone {
    id: u64,
    resume: Resume,
    /// `Bytes` for `Open`, `Lossless` for `OpenLossless`, `Screen` for `OpenScreen`.
    mode: Mode,
    /// The attachment `Open` took; [`Session::finish_open`] hands it to a subscription, and
    /// dropped any other way (the connection closed first) it detaches.
    result: Result<(Created, Attachment), ErrorReply>,
}

/// What the peer announced in its Hello that shapes this connection's traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerTerms {
    /// Largest output payload per push, in bytes.
    pub chunk: usize,
    /// Largest frame body the peer accepts, in bytes.
    pub max_frame: u32,
    /// The peer listed the `credit` capability, so it sends acks; without it output is forwarded
    /// without a window (only the connection's bounded queue applies).
    pub credit: bool,
    /// The peer listed `lifecycle` (protocol 1.4): it can read `EndReason::Forgotten`.
    pub lifecycle: bool,
    /// The peer listed `window-growth` (protocol 1.8): its pane queues take a lossless
    /// subscription's window grown up to the replay ring.
    pub window_growth: bool,
}

/// State of one client connection.
pub struct Session {
    state: State,
    out: mpsc::Sender<Message>,
    terms: PeerTerms,
    subs: HashMap<PtyId, Subscription>,
    staged: Vec<Staged>,
    opened_tx: mpsc::Sender<OpenDone>,
    opened_rx: mpsc::Receiver<OpenDone>,
    /// The cleanup policy this connection stated (`SetPolicy`); `None`: the PTYs it creates are
    /// never ended by a timer.
    policy: Option<LeasePolicy>,
    /// The client id of the peer's `Hello`: its lossless holds are its own across connections.
    client: String,
    /// What this connection's lossless windows may grow by together.
    window_budget: Arc<WindowBudget>,
}

impl Session {
    /// A session of the peer `client` (its `Hello` client id) sending on `out` within `terms`.
    pub fn new(state: State, out: mpsc::Sender<Message>, terms: PeerTerms, client: String) -> Self {
        let (opened_tx, opened_rx) = mpsc::channel(OPENED_QUEUE);
        let window_budget = WindowBudget::new(state.config().window_budget);
        Session {
            window_budget,
            client,
            state,
            out,
            terms,
            subs: HashMap::new(),
            staged: Vec::new(),
            opened_tx,
            opened_rx,
            policy: None,
        }
    }

    /// The cleanup policy this connection stated, if any.
    pub fn policy(&self) -> Option<LeasePolicy> {
        self.policy
    }

    /// `SetPolicy`: the policy for the PTYs this connection creates from now on, resolved
    /// against the agent's settings.
    ///
    /// # Errors
    /// `BadRequest` for an unknown condition or a value out of bounds; nothing changes then.
    pub fn set_policy(&mut self, spec: &str) -> Result<(), ErrorReply> {
        let resolved = policy::resolve_spec(spec, &self.state.config().policy)
            .map_err(|message| ErrorReply::BadRequest { message })?;
        tracing::info!(policy = %resolved, "connection stated a cleanup policy");
        self.policy = Some(resolved);
        Ok(())
    }

    /// Largest frame body the peer accepts, in bytes.
    pub fn max_frame(&self) -> u32 {
        self.terms.max_frame
    }

    /// The peer announced the `lifecycle` capability (it can read `EndReason::Forgotten`).
    pub fn knows_lifecycle(&self) -> bool {
        self.terms.lifecycle
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
    /// restarts its output at the new offset; a refused re-attach changes nothing. An attach
    /// naming an ended PTY (`expect`) from an offset before its end gets the rest of its output
    /// and then `Exited`, while the agent keeps it ([`State::attach_ended`]).
    ///
    /// # Errors
    /// `NotFound`, `Ended`, `Mismatch`; `BadRequest` for a `resume_from` beyond the output end or
    /// a malformed pane key, `LimitExceeded` for an oversized one.
    pub fn attach(&mut self, req: Attach) -> Result<Attached, ErrorReply> {
        self.attach_as(req, Mode::Bytes)
    }

    /// `AttachLossless` (capability `lossless`): an attach whose subscription holds the PTY
    /// (see [`crate::output::hold`]) instead of letting its ring drop bytes this peer has not
    /// acknowledged.
    ///
    /// # Errors
    /// As [`Session::attach`]; `BadRequest` for a peer without the `credit` capability (it
    /// never acknowledges, so it would hold the PTY for good).
    pub fn attach_lossless(&mut self, req: Attach) -> Result<Attached, ErrorReply> {
        self.require_credit()?;
        self.attach_as(req, Mode::Lossless)
    }

    fn attach_as(&mut self, req: Attach, mode: Mode) -> Result<Attached, ErrorReply> {
        limits::check_pane(&req.pane)?;
        let attachment = self
            .state
            .attach(&req.pane, req.expect)
            .or_else(|e| self.state.attach_ended(req.expect, req.resume_from, e))?;
        let (attached, _) = self.subscribe(attachment, legacy_resume(req.resume_from), mode)?;
        Ok(attached)
    }

    fn require_credit(&self) -> Result<(), ErrorReply> {
        if self.terms.credit {
            return Ok(());
        }
        Err(ErrorReply::BadRequest {
            message: "lossless delivery needs the `credit` capability: without acks the PTY \
                      would be held for good; list `credit` in Hello"
                .into(),
        })
    }

    /// `AttachScreen` (capability `screen`): attach whose start may be a snapshot, and whose
    /// subscription forwards events and resnapshots instead of reporting gaps.
    ///
    /// # Errors
    /// As [`Session::attach`]; `Unsupported` when this daemon runs with its terminal model off.
    pub fn attach_screen(&mut self, req: AttachScreen) -> Result<ScreenAttached, ErrorReply> {
        self.require_screen()?;
        limits::check_pane(&req.pane)?;
        let from = match req.resume {
            Resume::From(r) => Some(r),
            Resume::Now | Resume::Snapshot => None,
        };
        let attachment = self
            .state
            .attach(&req.pane, req.expect)
            .or_else(|e| self.state.attach_ended(req.expect, from, e))?;
        let mode = Mode::Screen {
            events_after: req.events_after,
        };
        let (attached, snapshot) = self.subscribe(attachment, req.resume, mode)?;
        Ok(ScreenAttached { attached, snapshot })
    }

    fn require_screen(&self) -> Result<(), ErrorReply> {
        match self.state.config().scrollback_lines {
            Some(_) => Ok(()),
            None => Err(ErrorReply::Unsupported {
                op: relay_protocol::Op::AttachScreen as u16,
            }),
        }
    }

    /// Starts an `Open` with request id `id` in its own task (create under the pane gate, which
    /// may wait for a spawn). Its result arrives on [`Session::next_opened`].
    pub fn open(&self, id: u64, req: Open) {
        let create = Create {
            pane: req.pane,
            spec: req.spec,
        };
        self.start_open(id, create, legacy_resume(req.resume_from), Mode::Bytes);
    }

    /// Starts an `OpenLossless` like [`Session::open`]; its subscription holds the PTY as
    /// [`Session::attach_lossless`] describes.
    ///
    /// # Errors
    /// As [`Session::attach_lossless`] (nothing is spawned).
    pub fn open_lossless(&self, id: u64, req: Open) -> Result<(), ErrorReply> {
        self.require_credit()?;
        let create = Create {
            pane: req.pane,
            spec: req.spec,
        };
        self.start_open(id, create, legacy_resume(req.resume_from), Mode::Lossless);
        Ok(())
    }

    /// Starts an `OpenScreen` like [`Session::open`]; its reply is `ScreenOpened`.
    ///
    /// # Errors
    /// `Unsupported` when this daemon runs with its terminal model off (nothing is spawned).
    pub fn open_screen(&self, id: u64, req: OpenScreen) -> Result<(), ErrorReply> {
        self.require_screen()?;
        let create = Create {
            pane: req.pane,
            spec: req.spec,
        };
        let mode = Mode::Screen {
            events_after: req.events_after,
        };
        self.start_open(id, create, req.resume, mode);
        Ok(())
    }

    fn start_open(&self, id: u64, create: Create, resume: Resume, mode: Mode) {
        let state = self.state.clone();
        let done = self.opened_tx.clone();
        let policy = self.policy;
        let task = async move {
            let result = state.create_attached(create, policy).await;
            let finished = OpenDone {
                id,
                resume,
                mode,
                result,
            };
            // Fails only when the session is gone; dropping `finished` detaches.
            let _ = done.send(finished).await;
        };
        tokio::spawn(task.in_current_span());
    }

    /// The next finished `Open` (pending forever while none is in flight).
    pub async fn next_opened(&mut self) -> Option<OpenDone> {
        self.opened_rx.recv().await
    }

    /// Subscribes a finished `Open` like an attach; returns its request id and reply. Call
    /// [`Session::start_staged`] after queuing the reply.
    pub fn finish_open(&mut self, done: OpenDone) -> (u64, Response) {
        let mode = done.mode;
        let reply = match done.result {
            Ok((created, attachment)) => {
                self.subscribe(attachment, done.resume, mode)
                    .map(|(attached, snapshot)| match mode {
                        Mode::Screen { .. } => Response::ScreenOpened(ScreenOpened {
                            created,
                            attached,
                            snapshot,
                        }),
                        Mode::Bytes | Mode::Lossless => {
                            Response::Opened(Opened { created, attached })
                        }
                    })
            }
            Err(e) => Err(e),
        };
        (done.id, reply.unwrap_or_else(Response::Error))
    }

    /// Stages this connection's subscription through `attachment` (the count the caller took),
    /// from `resume` (see `Attach` and `AttachScreen`). Works on a PTY that has ended
    /// meanwhile: the subscription delivers what the ring holds, then `Exited`. Shared by
    /// `Attach`, `Open` and their screen forms. An earlier subscription of this connection to the
    /// PTY is replaced, but only once the new one is accepted. Returns the reply's `Attached` and
    /// whether a snapshot starts the output (only in [`Mode::Screen`]; the snapshot is taken
    /// here, after parsing what the model has not seen yet).
    ///
    /// # Errors
    /// `BadRequest` for a resume offset beyond the output end (the attachment is dropped; an
    /// earlier subscription keeps running).
    fn subscribe(
        &mut self,
        attachment: Attachment,
        resume: Resume,
        mode: Mode,
    ) -> Result<(Attached, bool), ErrorReply> {
        let pty = Arc::clone(attachment.pty());
        let id = pty.binding().pty;
        let (start, end) = {
            let ring = pty.ring().lock_unpoisoned();
            (ring.start(), ring.end())
        };
        let screen = pty.screen().filter(|_| matches!(mode, Mode::Screen { .. }));
        let wants_snapshot = match resume {
            Resume::Snapshot => true,
            Resume::From(r) => r < start,
            Resume::Now => false,
        };
        let (first, end_offset, lost, size) = match screen.filter(|_| wants_snapshot) {
            Some(screen) => {
                // Parsing the model's lag may take a while under a flood: keep the other tasks
                // of this worker thread moving meanwhile.
                let snapshot = blocking(|| screen.snapshot(pty.ring()));
                let lost = match resume {
                    Resume::From(r) => snapshot.offset - r,
                    _ => 0,
                };
                let (offset, size) = (snapshot.offset, snapshot.size);
                (Start::Snapshot(snapshot), offset, lost, size)
            }
            None => {
                let (replay_from, lost) = match resume {
                    Resume::Now | Resume::Snapshot => (end, 0),
                    Resume::From(r) if r > end => {
                        return Err(ErrorReply::BadRequest {
                            message: format!(
                                "resume_from {r} is beyond the output end {end} of {}; resume from an offset this PTY produced",
                                pty.binding()
                            ),
                        });
                    }
                    Resume::From(r) if r < start => (start, start - r),
                    Resume::From(r) => (r, 0),
                };
                (Start::Bytes(replay_from), end, lost, pty.size())
            }
        };
        // Replaced: the earlier subscription and its attachment end here.
        self.subs.remove(&id);
        let attached = Attached {
            binding: pty.binding().clone(),
            replay_from: first.offset(),
            end_offset,
            lost,
            size,
        };
        let snapshot = matches!(first, Start::Snapshot(_));
        // Held from the first byte it will send: taken now, before the reply goes out, so the
        // reader already leaves those bytes in the ring.
        let hold = (mode == Mode::Lossless).then(|| {
            let grace = self.state.config().hold_grace;
            pty.holds().hold(&self.client, first.offset(), grace)
        });
        self.staged.push(Staged {
            attachment,
            start: first,
            mode,
            hold,
        });
        Ok((attached, snapshot))
    }

    /// Starts the subscriptions staged by [`Session::attach`]; call after queuing its reply.
    pub fn start_staged(&mut self) {
        for s in std::mem::take(&mut self.staged) {
            let id = s.attachment.pty().binding().pty;
            let credit = self.credit(s.mode, s.start.offset());
            let sub = Subscription::start(
                s.attachment,
                s.start,
                s.mode,
                credit,
                self.terms.chunk,
                self.out.clone(),
                s.hold,
            );
            // Two stagings of one PTY in one request cannot happen; the replaced one detaches.
            self.subs.insert(id, sub);
        }
    }

    /// The flow control of a subscription in `mode` starting at offset `first`: none for a peer
    /// that sends no acks; a lossless one's window grows up to the replay ring when the peer
    /// takes that (see [`crate::output::credit`]); others keep the configured window.
    fn credit(&self, mode: Mode, first: u64) -> Credit {
        let config = self.state.config();
        if !self.terms.credit {
            return Credit::unlimited(first);
        }
        let credit = Credit::new(u64::from(config.window), first);
        if mode == Mode::Lossless && self.terms.window_growth {
            credit.growing(config.replay_bytes as u64, self.window_budget.clone())
        } else {
            credit
        }
    }

    /// `ListLeases`: every lease, cut to fit the peer's frame maximum (live leases and the newest
    /// ended ones first; how many were left out is logged).
    pub fn list_leases(&self) -> Vec<LeaseInfo> {
        self.fit("ListLeases", self.state.leases())
    }

    /// `ListWorkspace`: the leases of one workspace, cut as [`Session::list_leases`] cuts.
    pub fn list_workspace(&self, workspace: &WorkspaceId) -> Vec<LeaseInfo> {
        self.fit("ListWorkspace", self.state.workspace_leases(workspace))
    }

    /// `all` cut to fit the peer's frame maximum; logs how many were left out.
    fn fit(&self, op: &str, all: Vec<LeaseInfo>) -> Vec<LeaseInfo> {
        let count = all.len();
        let (leases, left_out) = limits::fit_leases(all, self.terms.max_frame);
        if left_out > 0 {
            tracing::warn!(
                "{op} reply cut to {} of {count} leases to fit the frame maximum of {} bytes \
                 (oldest ended leases left out first)",
                leases.len(),
                self.terms.max_frame
            );
        }
        leases
    }

    /// Detach: fenced on the exact binding; stops this connection's output of that PTY.
    ///
    /// # Errors
    /// `NotFound`, `Ended`, `Mismatch`.
    pub fn detach(&mut self, req: Detach) -> Result<(), ErrorReply> {
        self.state.fenced(&req.binding)?;
        if let Some(mut sub) = self.subs.remove(&req.binding.pty) {
            sub.release_hold();
        }
        Ok(())
    }

    /// Drops the subscriptions of ended PTYs whose stream is over (`Exited` went out), with
    /// their hold on the PTY: an ended PTY's master, ring and model are freed although the client
    /// never detaches from an ended pane. A live PTY's subscription stays even if its stream
    /// stopped: dropping it would detach a pane the client believes attached.
    pub fn prune_finished(&mut self) {
        self.subs
            .retain(|_, sub| !(sub.is_finished() && sub.pty_ended()));
    }

    /// Credit returned by the peer. Unknown PTYs are ignored (the ack may race a detach).
    pub fn ack(&mut self, req: Ack) {
        if let Some(sub) = self.subs.get(&req.pty) {
            sub.ack(req.offset);
        }
    }
}

/// The base protocol's `resume_from` as a [`Resume`].
fn legacy_resume(resume_from: Option<u64>) -> Resume {
    resume_from.map_or(Resume::Now, Resume::From)
}
