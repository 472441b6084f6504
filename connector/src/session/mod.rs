//! [`Session`]: one connection to one agent, shared by every workspace and pane of the app.
//!
//! A session is an actor: [`Session::connect`] does the hello exchange, then spawns a reader task
//! (replies by request id to a table of pending oneshot senders; output pushes to per-PTY queues)
//! and a writer task fed by a bounded queue. [`Session`] is a cheap-clone handle; the connection
//! closes when the last clone is dropped. When the connection drops, every pending request fails
//! with [`Error::ConnectionLost`] and every pane stream ends with
//! [`PaneEvent::Disconnected`](crate::PaneEvent::Disconnected); nothing on the host is touched
//! (rule A).
//!
//! Every mutation takes the exact [`Binding`] (rule C), and every operation checks that the agent
//! advertised the capability it needs before anything is sent (rule H).
//!
//! Requests wait for their reply as long as the connection lives, by default: an app's session
//! notices a dead agent through the connection closing. A stopped (`SIGSTOP`) or wedged agent
//! keeps the connection open, though, so tools that must answer promptly bound every request with
//! [`Session::with_request_timeout`] (`relayctl` uses 10 s); an expired request fails with
//! [`Error::Timeout`] and may still take effect later (rule A).

mod conn;
pub(crate) mod handshake;
mod reply;
pub(crate) mod shared;

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use relay_protocol::message::{
    Attach, AttachScreen, Attached, Create, Created, Detach, Input, InputSeq, Kill, ListLeases,
    Open, OpenScreen, Ping, Protect, Resize, Signal, Status, StatusRequest,
};
use relay_protocol::{
    Binding, Capability, FrameCodec, LeaseInfo, PaneKey, PtyId, Request, Response, Resume,
    SpawnSpec, TermSize, Welcome, DEFAULT_MAX_FRAME, MAX_OUTPUT_CHUNK,
};
use tokio::sync::{mpsc, oneshot};
use tokio_util::codec::{FramedRead, FramedWrite};

use crate::pane::{queue_cap, PaneHandle, PaneSink};
use crate::transport::{AgentStream, Transport};
use crate::Error;
use reply::{done, human_duration, op_name, unexpected};
pub(crate) use shared::{attached_of, Route, RouteStart};
use shared::{Pending, SessionLink, Shared};

/// Capacity of the writer's request queue, in messages.
const REQUEST_QUEUE: usize = 256;

/// A connection to one agent. Cheap to clone; every clone talks over the same connection.
///
/// Each handle carries its own request timeout (none by default; see
/// [`Session::with_request_timeout`]).
#[derive(Clone)]
pub struct Session {
    inner: Arc<Inner>,
    timeout: Option<Duration>,
}

struct Inner {
    requests: mpsc::Sender<Bytes>,
    shared: Arc<Shared>,
    welcome: Welcome,
    destination: String,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("destination", &self.inner.destination)
            .field("agent_version", &self.inner.welcome.agent_version)
            .field("incarnation", &self.inner.welcome.incarnation)
            .field("request_timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl Session {
    /// Opens a stream with `transport`, exchanges hello/welcome and starts the connection's tasks.
    /// `client_id` names this client in the agent's logs (e.g. `"my-editor/1234"`).
    ///
    /// Must be called inside a tokio runtime.
    ///
    /// # Errors
    /// The transport's errors ([`Error::Spawn`], SSH errors, ...); [`Error::Handshake`] when the
    /// first reply is not a relay welcome; [`Error::Incompatible`] when the agent speaks another
    /// protocol major version.
    pub async fn connect(transport: &dyn Transport, client_id: &str) -> Result<Session, Error> {
        let destination = transport.describe();
        let AgentStream {
            reader,
            writer,
            mut guard,
        } = transport.open().await?;
        let mut reader = FramedRead::new(reader, FrameCodec::new(DEFAULT_MAX_FRAME));
        let mut writer = FramedWrite::new(writer, FrameCodec::new(DEFAULT_MAX_FRAME));
        let welcome = handshake::run(
            &mut reader,
            &mut writer,
            guard.as_mut(),
            client_id,
            &destination,
        )
        .await?;
        let max_frame = welcome.limits.max_frame.min(DEFAULT_MAX_FRAME);
        let writer = FramedWrite::new(writer.into_inner(), FrameCodec::new(max_frame));
        tracing::debug!(
            %destination,
            agent_version = %welcome.agent_version,
            incarnation = %welcome.incarnation,
            "connected to agent"
        );
        let (requests, rx) = mpsc::channel(REQUEST_QUEUE);
        let shared = Arc::new(Shared::new(requests.downgrade(), max_frame as usize));
        tokio::spawn(conn::write_loop(writer, rx, shared.clone(), guard));
        tokio::spawn(conn::read_loop(reader, shared.clone()));
        Ok(Session {
            inner: Arc::new(Inner {
                requests,
                shared,
                welcome,
                destination,
            }),
            timeout: None,
        })
    }

    /// A handle on the same connection whose requests fail with [`Error::Timeout`] when the
    /// agent has not answered within `timeout` (`None`: wait as long as the connection lives,
    /// the default). The bound covers queueing the request and waiting for its reply; it does
    /// not close the connection, and a request that expired may still take effect on the agent
    /// (its late reply is dropped). Other clones keep their own setting.
    ///
    /// Meant for tools that must answer promptly (`relayctl`); an app usually keeps the default
    /// and relies on [`Session::closed`] and [`PaneEvent::Disconnected`](crate::PaneEvent).
    pub fn with_request_timeout(&self, timeout: Option<Duration>) -> Session {
        Session {
            inner: self.inner.clone(),
            timeout,
        }
    }

    /// This handle's request timeout (see [`Session::with_request_timeout`]).
    pub fn request_timeout(&self) -> Option<Duration> {
        self.timeout
    }

    /// What the agent said in its welcome: version, incarnation, capabilities and limits.
    pub fn welcome(&self) -> &Welcome {
        &self.inner.welcome
    }

    /// The transport's name of the destination (`"local"`, `"user@host:22"`).
    pub fn destination(&self) -> &str {
        &self.inner.destination
    }

    /// Whether the connection is closed (requests fail with [`Error::ConnectionLost`]).
    pub fn is_closed(&self) -> bool {
        self.inner.shared.cancel.is_cancelled()
    }

    /// Closes the connection now (as when the link is declared dead): pending requests fail
    /// with [`Error::ConnectionLost`] carrying `reason`, pane streams end with
    /// [`PaneEvent::Disconnected`](crate::PaneEvent::Disconnected). Nothing on the host changes
    /// (rule A): the agent sees a closed connection and keeps every PTY.
    pub fn close(&self, reason: impl Into<String>) {
        self.inner.shared.close(reason.into());
    }

    /// Whether `other` is a handle on the same connection.
    pub(crate) fn same_connection(&self, other: &Session) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// Frames received from the agent so far (a liveness signal: compare two readings).
    pub fn frames_received(&self) -> u64 {
        self.inner
            .shared
            .frames
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Resolves when the connection is closed; returns why.
    pub async fn closed(&self) -> String {
        self.inner.shared.cancel.cancelled().await;
        self.inner
            .shared
            .closed_reason()
            .unwrap_or_else(|| "the session was closed".into())
    }

    /// Creates a PTY for `pane` running `spec`, or returns the pane's live PTY without spawning
    /// (`existed: true`; rule D). Does not attach.
    ///
    /// # Errors
    /// [`Error::Agent`] with `SpawnFailed` (bad command or cwd) or `BadRequest`;
    /// [`Error::ConnectionLost`]; [`Error::Unsupported`] without the `pty` capability.
    pub async fn create(&self, pane: PaneKey, spec: SpawnSpec) -> Result<Created, Error> {
        self.require(Capability::PTY, "create")?;
        match self.call(Request::Create(Create { pane, spec })).await? {
            Response::Created(c) => Ok(c),
            other => Err(unexpected("create", &other)),
        }
    }

    /// Creates-or-attaches in one step: spawns `spec` for `pane` unless the pane has a live PTY
    /// (then nothing is spawned and `existed` is `true`; rule D), and attaches this connection to
    /// the pane's PTY from `resume_from` (as [`Session::attach`]).
    ///
    /// With an agent that has the `open` capability (protocol 1.1) both happen under one lock,
    /// so with `Some(0)` even a command that exits at once delivers its whole output and then
    /// [`PaneEvent::Exited`](crate::PaneEvent::Exited). An older agent gets `Create` then
    /// `Attach`, where such a command may already be gone when the attach arrives (the attach
    /// then fails with `Ended`).
    ///
    /// # Errors
    /// [`Error::Agent`] with `SpawnFailed` (bad command or cwd), `BadRequest` (e.g.
    /// `resume_from` beyond the output of a live PTY), or, with an older agent, the attach's
    /// refusals; [`Error::ConnectionLost`].
    pub async fn open(
        &self,
        pane: PaneKey,
        spec: SpawnSpec,
        resume_from: Option<u64>,
    ) -> Result<(Created, PaneHandle), Error> {
        if !self.inner.welcome.has(Capability::OPEN) {
            let created = self.create(pane.clone(), spec).await?;
            let handle = self
                .attach(pane, Some(created.binding.pty), resume_from)
                .await?;
            return Ok((created, handle));
        }
        let req = Request::Open(Open {
            pane,
            spec,
            resume_from,
        });
        match self.subscribe(req).await? {
            (Response::Opened(o), sub) => Ok((o.created, sub.handle(self, o.attached, false))),
            (other, _) => Err(unexpected("open", &other)),
        }
    }

    /// Attaches this connection to `pane`'s PTY. Never spawns (rule B).
    ///
    /// `expect`: the PTY the caller believes the pane has (after a reconnect), or `None` for
    /// whatever is live. `resume_from`: output offset to replay from (`Some(0)` replays everything
    /// the agent still holds; `None` delivers only new output).
    ///
    /// # Errors
    /// [`Error::Agent`] with `NotFound` (no such pane), `Ended` (its PTY is gone; exit status
    /// and reason included) or `Mismatch` (not the expected PTY); [`Error::ConnectionLost`].
    pub async fn attach(
        &self,
        pane: PaneKey,
        expect: Option<PtyId>,
        resume_from: Option<u64>,
    ) -> Result<PaneHandle, Error> {
        self.require(Capability::PTY, "attach")?;
        let req = Request::Attach(Attach {
            pane,
            expect,
            resume_from,
        });
        match self.subscribe(req).await? {
            (Response::Attached(attached), sub) => Ok(sub.handle(self, attached, false)),
            (other, _) => Err(unexpected("attach", &other)),
        }
    }

    /// Attaches like [`Session::attach`], with screen restore: with `Resume::From(offset)` a
    /// reader the agent can no longer serve bytes from gets a
    /// [`PaneEvent::Snapshot`](crate::PaneEvent::Snapshot) instead of a gap; `Resume::Snapshot`
    /// starts with the screen as it is now (for a new terminal window); the stream delivers
    /// [`PaneEvent::Event`](crate::PaneEvent::Event)s and never a gap from the agent. With an
    /// agent that lacks the `screen` capability this is [`Session::attach`] (`Snapshot` then
    /// replays what the agent holds, a gap may come, no events). `events_after`: key of the last
    /// event the app already applied (0: every event the agent holds), so an app that re-attaches
    /// after its own restart sees each event once.
    ///
    /// # Errors
    /// As [`Session::attach`].
    pub async fn attach_screen(
        &self,
        pane: PaneKey,
        expect: Option<PtyId>,
        resume: Resume,
        events_after: u64,
    ) -> Result<PaneHandle, Error> {
        self.require(Capability::PTY, "attach")?;
        let req = self.attach_request(pane, expect, resume, events_after);
        let (resp, sub) = self.subscribe(req).await?;
        match attached_of(&resp) {
            Some((a, snapshot)) => Ok(sub.handle(self, a.clone(), snapshot)),
            None => Err(unexpected("attach", &resp)),
        }
    }

    /// Creates-or-attaches like [`Session::open`], with the screen restore of
    /// [`Session::attach_screen`] (`Resume::From(0)` delivers a new PTY's whole output).
    ///
    /// # Errors
    /// As [`Session::open`].
    pub async fn open_screen(
        &self,
        pane: PaneKey,
        spec: SpawnSpec,
        resume: Resume,
        events_after: u64,
    ) -> Result<(Created, PaneHandle), Error> {
        let Some(req) = self.open_request(pane.clone(), spec.clone(), resume, events_after) else {
            let created = self.create(pane.clone(), spec).await?;
            let handle = self
                .attach_screen(pane, Some(created.binding.pty), resume, events_after)
                .await?;
            return Ok((created, handle));
        };
        let (resp, sub) = self.subscribe(req).await?;
        match resp {
            Response::Opened(o) => Ok((o.created, sub.handle(self, o.attached, false))),
            Response::ScreenOpened(o) => Ok((o.created, sub.handle(self, o.attached, o.snapshot))),
            other => Err(unexpected("open", &other)),
        }
    }

    /// The attach request for this agent: `AttachScreen` when it has the `screen` capability,
    /// else `Attach` (`Resume::Snapshot` becomes a replay of everything held).
    pub(crate) fn attach_request(
        &self,
        pane: PaneKey,
        expect: Option<PtyId>,
        resume: Resume,
        events_after: u64,
    ) -> Request {
        if self.inner.welcome.has(Capability::SCREEN) {
            return Request::AttachScreen(AttachScreen {
                pane,
                expect,
                resume,
                events_after,
            });
        }
        Request::Attach(Attach {
            pane,
            expect,
            resume_from: legacy_resume(resume),
        })
    }

    /// The open request for this agent (`OpenScreen`, or `Open` without the `screen`
    /// capability); `None` when the agent has no `open` capability (create, then attach).
    pub(crate) fn open_request(
        &self,
        pane: PaneKey,
        spec: SpawnSpec,
        resume: Resume,
        events_after: u64,
    ) -> Option<Request> {
        let welcome = &self.inner.welcome;
        if welcome.has(Capability::SCREEN) {
            return Some(Request::OpenScreen(OpenScreen {
                pane,
                spec,
                resume,
                events_after,
            }));
        }
        welcome.has(Capability::OPEN).then(|| {
            Request::Open(Open {
                pane,
                spec,
                resume_from: legacy_resume(resume),
            })
        })
    }

    /// Sends a request that subscribes this connection (attach, open) with a fresh pane queue,
    /// which the reader installs for the PTY as soon as the reply arrives.
    async fn subscribe(&self, req: Request) -> Result<(Response, NewPane), Error> {
        let (sink, queue) = PaneSink::new(self.queue_cap());
        let sink_id = sink.id;
        let resp = self.subscribe_route(req, Route::session(sink)).await?;
        Ok((resp, NewPane { queue, sink_id }))
    }

    /// Sends a subscribing request (attach, open) whose pushes go to `route` once the reply
    /// arrives (the reader installs it before reading the next frame).
    pub(crate) async fn subscribe_route(
        &self,
        req: Request,
        route: Route,
    ) -> Result<Response, Error> {
        let shared = &self.inner.shared;
        let (tx, rx) = oneshot::channel();
        let id = shared.next_id();
        let what = op_name(&req);
        shared.register(id, Pending::Attach(tx, route))?;
        self.bounded(what, async {
            self.send(id, req).await?;
            rx.await.unwrap_or_else(|_| Err(shared.lost()))
        })
        .await
    }

    /// The byte cap of a pane queue on this connection (see [`queue_cap`]).
    pub(crate) fn queue_cap(&self) -> u64 {
        queue_cap(self.window(), self.credit())
    }

    /// Whether the agent throttles output by credit windows.
    pub(crate) fn credit(&self) -> bool {
        self.inner.welcome.has(Capability::CREDIT)
    }

    /// The agent's credit window per pane, in bytes.
    pub(crate) fn window(&self) -> u64 {
        u64::from(self.inner.welcome.limits.window)
    }

    /// Records that output of `pty` was consumed up to `offset` (the writer sends the ack).
    pub(crate) fn ack(&self, pty: PtyId, offset: u64) {
        self.inner.shared.ack(pty, offset);
    }

    /// Stops routing `pty` to the queue `sink_id` and detaches it, without waiting.
    pub(crate) fn release(&self, binding: &Binding, sink_id: u64) {
        self.inner.shared.release(binding, sink_id);
    }

    /// Writes `data` to the PTY of `binding` (keystrokes, pastes). Large inputs are split into
    /// several requests, sent back to back.
    ///
    /// # Errors
    /// [`Error::Agent`] with `Mismatch` when the pane has another PTY now (rule C) or `Ended`;
    /// `LimitExceeded` when the agent already holds its limit of queued input for the PTY (the
    /// program is not reading; nothing of that request was queued: retry later, and keep at most
    /// one input in flight if the order of retried bytes matters); [`Error::ConnectionLost`];
    /// [`Error::Timeout`] (see [`Session::with_request_timeout`]).
    pub async fn input(&self, binding: &Binding, data: &[u8]) -> Result<(), Error> {
        self.require(Capability::PTY, "input")?;
        self.bounded("input", async {
            let mut replies = Vec::new();
            for chunk in data.chunks(MAX_OUTPUT_CHUNK).chain(
                // An empty input still names the binding (a cheap fencing probe).
                data.is_empty().then_some(&[][..]),
            ) {
                let req = Request::Input(Input {
                    binding: binding.clone(),
                    data: chunk.to_vec(),
                });
                let (id, rx) = self.register()?;
                self.send(id, req).await?;
                replies.push(rx);
            }
            for rx in replies {
                let resp = rx.await.unwrap_or_else(|_| Err(self.inner.shared.lost()))?;
                done("input", resp)?;
            }
            Ok(())
        })
        .await
    }

    /// Writes `data` to the PTY of `binding` at most once (capability `input-seq`, protocol
    /// 1.2): the agent applies it only if `seq` is greater than the last sequence number it
    /// applied for `(PTY, writer)`, and answers a repeat with success without writing. So after
    /// a reconnect a request whose answer was lost can be sent again under the same `seq`
    /// without typing it twice. `writer` is a random id chosen once per pane handle; `seq`
    /// grows by at least 1 per request. At most one output chunk (64 KiB) per request.
    ///
    /// # Errors
    /// [`Error::Unsupported`] without the capability (nothing is sent); otherwise as
    /// [`Session::input`] (a refused request does not consume `seq`: retry with the same one).
    pub async fn input_seq(
        &self,
        binding: &Binding,
        writer: u64,
        seq: u64,
        data: &[u8],
    ) -> Result<(), Error> {
        self.require(Capability::INPUT_SEQ, "sequenced input")?;
        let req = Request::InputSeq(InputSeq {
            binding: binding.clone(),
            writer,
            seq,
            data: data.to_vec(),
        });
        done("input", self.call(req).await?)
    }

    /// Resizes the PTY of `binding`.
    ///
    /// # Errors
    /// As [`Session::input`].
    pub async fn resize(&self, binding: &Binding, size: TermSize) -> Result<(), Error> {
        self.require(Capability::PTY, "resize")?;
        let req = Request::Resize(Resize {
            binding: binding.clone(),
            size,
        });
        done("resize", self.call(req).await?)
    }

    /// Sends signal number `signal` (Linux numbering, e.g. 2 = SIGINT) to the PTY's foreground
    /// process group.
    ///
    /// # Errors
    /// As [`Session::input`]; `BadRequest` for an invalid signal.
    pub async fn signal(&self, binding: &Binding, signal: i32) -> Result<(), Error> {
        self.require(Capability::PTY, "signal")?;
        let req = Request::Signal(Signal {
            binding: binding.clone(),
            signal,
        });
        done("signal", self.call(req).await?)
    }

    /// Ends the PTY of exactly `binding` (SIGHUP to its process group, SIGKILL after 3 s). An
    /// attached handle then receives [`PaneEvent::Exited`](crate::PaneEvent::Exited).
    ///
    /// # Errors
    /// As [`Session::input`].
    pub async fn kill(&self, binding: &Binding) -> Result<(), Error> {
        self.require(Capability::PTY, "kill")?;
        let req = Request::Kill(Kill {
            binding: binding.clone(),
        });
        done("kill", self.call(req).await?)
    }

    /// Stops this connection's subscription to `binding`; the PTY keeps running. The pane's
    /// handle stream ends.
    ///
    /// # Errors
    /// As [`Session::input`].
    pub async fn detach(&self, binding: &Binding) -> Result<(), Error> {
        self.require(Capability::PTY, "detach")?;
        let req = Request::Detach(Detach {
            binding: binding.clone(),
        });
        let result = self.call(req).await;
        self.inner.shared.end_route(binding.pty);
        done("detach", result?)
    }

    /// Exempts the lease of `binding` from lifecycle expiry (`protected: true`) or takes the
    /// exemption back.
    ///
    /// # Errors
    /// [`Error::Unsupported`] when the agent lacks the `protect` capability (nothing is sent);
    /// otherwise as [`Session::input`].
    pub async fn protect(&self, binding: &Binding, protected: bool) -> Result<(), Error> {
        self.require(Capability::PROTECT, "protect")?;
        let req = Request::Protect(Protect {
            binding: binding.clone(),
            protected,
        });
        done("protect", self.call(req).await?)
    }

    /// Every lease the agent knows, including ended and superseded ones. Never creates anything.
    ///
    /// # Errors
    /// [`Error::ConnectionLost`]; [`Error::Unsupported`] without the `pty` capability.
    pub async fn list_leases(&self) -> Result<Vec<LeaseInfo>, Error> {
        self.require(Capability::PTY, "list leases")?;
        match self.call(Request::ListLeases(ListLeases {})).await? {
            Response::Leases(l) => Ok(l.leases),
            other => Err(unexpected("list leases", &other)),
        }
    }

    /// The agent's status: version, incarnation, pid, uptime, lease counts, connections.
    ///
    /// # Errors
    /// [`Error::Unsupported`] without the `status` capability; [`Error::ConnectionLost`].
    pub async fn status(&self) -> Result<Status, Error> {
        self.require(Capability::STATUS, "status")?;
        match self.call(Request::Status(StatusRequest {})).await? {
            Response::StatusReply(s) => Ok(s),
            other => Err(unexpected("status", &other)),
        }
    }

    /// Round trip to the agent; returns the time it took.
    ///
    /// # Errors
    /// [`Error::ConnectionLost`]; [`Error::UnexpectedReply`] for a wrong nonce.
    pub async fn ping(&self) -> Result<Duration, Error> {
        let start = Instant::now();
        let nonce = self.inner.shared.next_id();
        match self.call(Request::Ping(Ping { nonce })).await? {
            Response::Pong(p) if p.nonce == nonce => Ok(start.elapsed()),
            other => Err(unexpected("ping", &other)),
        }
    }

    fn require(&self, cap: &str, what: &str) -> Result<(), Error> {
        if self.inner.welcome.has(cap) {
            Ok(())
        } else {
            Err(Error::Unsupported(format!(
                "{what} (capability \"{cap}\", agent {})",
                self.inner.welcome.agent_version
            )))
        }
    }

    fn register(&self) -> Result<(u64, oneshot::Receiver<Result<Response, Error>>), Error> {
        let (tx, rx) = oneshot::channel();
        let id = self.inner.shared.next_id();
        self.inner.shared.register(id, Pending::Reply(tx))?;
        Ok((id, rx))
    }

    async fn call(&self, req: Request) -> Result<Response, Error> {
        let what = op_name(&req);
        let (id, rx) = self.register()?;
        self.bounded(what, async {
            self.send(id, req).await?;
            rx.await.unwrap_or_else(|_| Err(self.inner.shared.lost()))
        })
        .await
    }

    /// Runs one request/reply exchange under this handle's request timeout. On expiry the
    /// exchange is dropped (and with it the reply receivers) and the abandoned pending entries are
    /// forgotten, so a late reply is ignored.
    async fn bounded<T>(
        &self,
        what: &str,
        exchange: impl Future<Output = Result<T, Error>>,
    ) -> Result<T, Error> {
        let Some(limit) = self.timeout else {
            return exchange.await;
        };
        match tokio::time::timeout(limit, exchange).await {
            Ok(result) => result,
            Err(_) => {
                self.inner.shared.forget_abandoned();
                Err(Error::Timeout(format!(
                    "{what} on {}: the agent did not answer within {}; it may be stopped or \
                     overloaded (check `relayctl status` / the agent log)",
                    self.inner.destination,
                    human_duration(limit)
                )))
            }
        }
    }

    async fn send(&self, id: u64, req: Request) -> Result<(), Error> {
        let frame = match self.inner.shared.encode(id, req) {
            Ok(frame) => frame,
            Err(e) => {
                self.inner.shared.unregister(id);
                return Err(e);
            }
        };
        if self.inner.requests.send(frame).await.is_err() {
            self.inner.shared.unregister(id);
            return Err(self.inner.shared.lost());
        }
        Ok(())
    }
}

/// The app's end of a subscription whose reply arrived: becomes a [`PaneHandle`].
struct NewPane {
    queue: crate::pane::PaneQueue,
    sink_id: u64,
}

impl NewPane {
    fn handle(self, session: &Session, attached: Attached, snapshot: bool) -> PaneHandle {
        let link = SessionLink {
            shared: session.inner.shared.clone(),
            binding: attached.binding.clone(),
            sink_id: self.sink_id,
        };
        PaneHandle::new(
            attached,
            snapshot,
            self.queue,
            session.credit(),
            session.window(),
            Box::new(link),
        )
    }
}

/// `Resume` for an agent without the `screen` capability: `Snapshot` replays what it holds.
pub(crate) fn legacy_resume(resume: Resume) -> Option<u64> {
    match resume {
        Resume::Now => None,
        Resume::From(offset) => Some(offset),
        Resume::Snapshot => Some(0),
    }
}

#[cfg(test)]
mod tests;
