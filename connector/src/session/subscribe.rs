//! The subscribing operations of a [`Session`]: create, open and attach (with or without screen
//! restore), and the request each becomes for the agent at hand (rule H: only what it
//! advertised).

use relay_protocol::message::{Attach, AttachScreen, Attached, Create, Created, Open, OpenScreen};
use relay_protocol::{Capability, PaneKey, PtyId, Request, Response, Resume, SpawnSpec};
use tokio::sync::oneshot;

use super::reply::{op_name, unexpected};
use super::shared::{attached_of, opened_of, Pending, SessionLink};
use super::{Route, Session};
use crate::pane::{PaneHandle, PaneSink};
use crate::Error;

impl Session {
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
            other => Err(unexpected("create", other.op())),
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
        self.open_bytes(pane, spec, resume_from, false).await
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
        self.attach_bytes(pane, expect, resume_from, false).await
    }

    /// Creates-or-attaches like [`Session::open`] with lossless delivery: the agent reads the
    /// PTY no further than it can hold without dropping a byte this stream has not consumed
    /// (the program then waits, as under `ssh` with a slow reader), so the stream carries every
    /// byte from `resume_from` in order, never a snapshot. For output that goes to a file, a
    /// pipe or a recorder. Bytes the agent no longer held when the subscription began come as a
    /// [`PaneEvent::Gap`](crate::PaneEvent::Gap) first. With an agent that lacks the `lossless`
    /// capability (protocol 1.6) this is [`Session::open`]: a slow reader then gets gaps.
    ///
    /// # Errors
    /// As [`Session::open`].
    pub async fn open_lossless(
        &self,
        pane: PaneKey,
        spec: SpawnSpec,
        resume_from: Option<u64>,
    ) -> Result<(Created, PaneHandle), Error> {
        self.open_bytes(pane, spec, resume_from, true).await
    }

    /// Attaches like [`Session::attach`] with the lossless delivery of
    /// [`Session::open_lossless`].
    ///
    /// # Errors
    /// As [`Session::attach`].
    pub async fn attach_lossless(
        &self,
        pane: PaneKey,
        expect: Option<PtyId>,
        resume_from: Option<u64>,
    ) -> Result<PaneHandle, Error> {
        self.attach_bytes(pane, expect, resume_from, true).await
    }

    /// [`Session::open`], or with `lossless` [`Session::open_lossless`].
    async fn open_bytes(
        &self,
        pane: PaneKey,
        spec: SpawnSpec,
        resume_from: Option<u64>,
        lossless: bool,
    ) -> Result<(Created, PaneHandle), Error> {
        let req = if lossless {
            self.lossless_open_request(pane.clone(), spec.clone(), resume_from)
        } else {
            let open = Open {
                pane: pane.clone(),
                spec: spec.clone(),
                resume_from,
            };
            self.inner
                .welcome
                .has(Capability::OPEN)
                .then_some(Request::Open(open))
        };
        let Some(req) = req else {
            let created = self.create(pane.clone(), spec).await?;
            let handle = self
                .attach_bytes(pane, Some(created.binding.pty), resume_from, lossless)
                .await?;
            return Ok((created, handle));
        };
        let (resp, sub) = self.subscribe(req).await?;
        let (created, attached, snapshot) = opened_of(resp).map_err(|op| unexpected("open", op))?;
        Ok((created, sub.handle(self, attached, snapshot)))
    }

    /// [`Session::attach`], or with `lossless` [`Session::attach_lossless`].
    async fn attach_bytes(
        &self,
        pane: PaneKey,
        expect: Option<PtyId>,
        resume_from: Option<u64>,
        lossless: bool,
    ) -> Result<PaneHandle, Error> {
        self.require(Capability::PTY, "attach")?;
        let req = if lossless {
            self.lossless_attach_request(pane, expect, resume_from)
        } else {
            Request::Attach(Attach {
                pane,
                expect,
                resume_from,
            })
        };
        match self.subscribe(req).await? {
            (Response::Attached(attached), sub) => Ok(sub.handle(self, attached, false)),
            (other, _) => Err(unexpected("attach", other.op())),
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
            None => Err(unexpected("attach", resp.op())),
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
        let (created, attached, snapshot) = opened_of(resp).map_err(|op| unexpected("open", op))?;
        Ok((created, sub.handle(self, attached, snapshot)))
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

    /// The lossless attach request for this agent: `AttachLossless`, or `Attach` without the
    /// `lossless` capability (what a slow reader misses then comes as a gap, never a snapshot).
    pub(crate) fn lossless_attach_request(
        &self,
        pane: PaneKey,
        expect: Option<PtyId>,
        resume_from: Option<u64>,
    ) -> Request {
        let body = Attach {
            pane,
            expect,
            resume_from,
        };
        if self.inner.welcome.has(Capability::LOSSLESS) {
            Request::AttachLossless(body)
        } else {
            Request::Attach(body)
        }
    }

    /// The lossless open request for this agent (`OpenLossless`, or `Open` without the
    /// `lossless` capability); `None` without the `open` capability (create, then attach).
    pub(crate) fn lossless_open_request(
        &self,
        pane: PaneKey,
        spec: SpawnSpec,
        resume_from: Option<u64>,
    ) -> Option<Request> {
        let welcome = &self.inner.welcome;
        let body = Open {
            pane,
            spec,
            resume_from,
        };
        if welcome.has(Capability::LOSSLESS) {
            Some(Request::OpenLossless(body))
        } else {
            welcome.has(Capability::OPEN).then_some(Request::Open(body))
        }
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
            session.ack_window(),
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
