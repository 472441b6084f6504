//! [`Host`]: one host's agent, kept reachable for as long as the app holds the handle.
//!
//! A [`Session`] is one connection; when it drops, its panes end with
//! [`PaneEvent::Disconnected`]. A host outlives connections: it owns its transport, runs a
//! supervisor task that notices a dead link (an application heartbeat on top of SSH keepalive,
//! aware of laptop sleep), reconnects with bounded exponential backoff and jitter, and re-attaches
//! every pane it holds to the *same* PTY, resuming output at the first byte the pane has not
//! seen. Pane streams survive: they see [`PaneEvent::Interrupted`] and then
//! [`PaneEvent::Resumed`], and end only with a proof from the agent ([`PaneEvent::Exited`],
//! [`PaneEvent::Ended`], [`PaneEvent::Mismatch`]).
//!
//! - **States** ([`HostState`], via [`Host::state`]): `Connecting`, `Connected`, `Unresponsive`,
//!   `Reconnecting{attempt, next_retry_at, last_error}`, `Failed{error}` (only for what a retry
//!   cannot fix: see [`Error::is_transient`]), `Closed`. [`Host::retry_now`] skips a wait.
//! - **Never creates** (rule B): the supervisor only sends `Attach` with `expect` set. Only
//!   [`Host::open_pane`] (the app's explicit request) may spawn.
//! - **Unknown is not dead** (rule A): a lost link, a timeout or an unanswered re-attach leaves
//!   the pane waiting for the next connection; nothing on the host is touched.
//! - **Isolation** (rule F): each pane has its own queue and credit; a [`Workspace`] scopes panes
//!   and their errors; two hosts share nothing.
//! - **Input across outages**: an [`InputWriter`](crate::InputWriter) queues keystrokes (bounded)
//!   while the pane waits and delivers them, in order and exactly once with agents that have the
//!   `input-seq` capability, to the same PTY after the re-attach (rule C).
//!
//! # Example
//!
//! ```no_run
//! use relay_connector::{Host, HostOptions, HostState, LocalTransport, PaneEvent};
//! use relay_protocol::SpawnSpec;
//!
//! # async fn demo() -> Result<(), relay_connector::Error> {
//! let host = Host::open(LocalTransport::new(), HostOptions::new("my-app"));
//! let mut states = host.state();
//! tokio::spawn(async move {
//!     while states.changed().await.is_ok() {
//!         eprintln!("[host: {}]", *states.borrow());
//!     }
//! });
//! let workspace = host.workspace("my-project");
//! let (_created, mut pane) = workspace.open("tab-1", "0", SpawnSpec::default()).await?;
//! let input = host.input_writer(pane.binding());
//! input.push(b"echo hello\n".to_vec())?;
//! while let Some(event) = pane.next().await {
//!     match event {
//!         PaneEvent::Output { data, .. } => print!("{}", String::from_utf8_lossy(&data)),
//!         PaneEvent::Gap { from, to } => eprintln!("[{} bytes lost]", to - from),
//!         PaneEvent::Interrupted { reason } => eprintln!("[link lost: {reason}; reconnecting]"),
//!         PaneEvent::Resumed { from } => eprintln!("[back, from byte {from}]"),
//!         PaneEvent::Exited { exit, .. } => println!("[{exit}]"),
//!         PaneEvent::Ended { reason, .. } => println!("[ended while away: {reason}]"),
//!         other => eprintln!("[{other:?}]"),
//!     }
//! }
//! # Ok(())
//! # }
//! ```

mod backoff;
mod heartbeat;
pub mod input;
mod panes;
mod round_trips;
mod state;
mod supervisor;
#[cfg(test)]
mod tests;
mod workspace;

use std::sync::{Arc, Mutex, MutexGuard};

use relay_protocol::{Binding, PaneKey, PtyId, Request, Response, Resume, SpawnSpec, TermSize};
use tokio::sync::{watch, Notify};
use tokio_util::sync::CancellationToken;

pub use backoff::BackoffPolicy;
pub use heartbeat::HeartbeatPolicy;
pub(crate) use panes::{PaneSlot, SlotLink};
pub use round_trips::RoundTrips;
pub use state::HostState;
pub use workspace::Workspace;

use crate::pane::{PaneHandle, PaneSink};
use crate::session::{attached_of, opened_of, unexpected, ConnectOptions, Route, RouteStart};
use crate::sync::LockExt;
use crate::transport::Transport;
use crate::{Error, Session};
use panes::{Delivery, HostLink, Live, Registry};

/// Settings of a [`Host`].
#[derive(Debug, Clone)]
pub struct HostOptions {
    /// Names this client in the agent's logs (e.g. `"my-editor/1234"`).
    pub client_id: String,
    /// Dead-link detection (defaults: ping after 2 s of silence, unresponsive after 3 s, dead
    /// after 8 s).
    pub heartbeat: HeartbeatPolicy,
    /// Reconnect delays (defaults: first 250 ms, cap 30 s, a connection is healthy after 60 s).
    pub backoff: BackoffPolicy,
    /// Re-attaches in flight at once after a reconnect (default 64).
    pub reattach_concurrency: usize,
    /// Bytes of input an [`InputWriter`](crate::InputWriter) holds per pane while it waits for
    /// its connection (default 1 MiB); beyond it input is refused with
    /// [`Error::InputFull`](crate::Error::InputFull), never dropped silently.
    pub input_queue_bytes: usize,
    /// The cleanup policy every connection states for the PTYs it creates, as
    /// [`ConnectOptions::policy`](crate::session::ConnectOptions::policy): `Some("")` (the
    /// default) states the agent's defaults, `None` states none (its PTYs are never ended by a
    /// timer). A policy the agent refuses makes the host [`HostState::Failed`] with
    /// [`Error::Policy`](crate::Error::Policy).
    pub policy: Option<String>,
}

impl HostOptions {
    /// Default settings for a client called `client_id`.
    pub fn new(client_id: impl Into<String>) -> HostOptions {
        HostOptions {
            client_id: client_id.into(),
            heartbeat: HeartbeatPolicy::default(),
            backoff: BackoffPolicy::default(),
            reattach_concurrency: 64,
            input_queue_bytes: 1 << 20,
            policy: Some(String::new()),
        }
    }

    /// What each connection of the host says in its hello and right after it.
    pub(crate) fn connect_options(&self) -> ConnectOptions {
        ConnectOptions {
            client_id: self.client_id.clone(),
            policy: self.policy.clone(),
            // A host exists to hold shells: it starts its agent when none runs.
            start_agent: true,
        }
    }
}

/// One host's agent, reconnected for as long as the handle (or a pane of it) is held. Cheap to
/// clone; every clone drives the same supervisor and connection. See the module docs.
#[derive(Clone)]
pub struct Host {
    inner: Arc<HostInner>,
    keep: Arc<KeepRunning>,
}

/// Held by every [`Host`] clone and every host pane handle; when the last one goes, the
/// supervisor stops and the connection closes (the host's PTYs keep running: rule A).
pub(crate) struct KeepRunning(CancellationToken);

impl Drop for KeepRunning {
    fn drop(&mut self) {
        self.0.cancel();
    }
}

/// What the supervisor and the handles share.
pub(crate) struct HostInner {
    transport: Box<dyn Transport>,
    destination: String,
    options: HostOptions,
    state: watch::Sender<HostState>,
    registry: Mutex<Registry>,
    /// Woken by [`Host::retry_now`].
    wake: Notify,
    /// Woken when the live connection should re-attach waiting panes.
    reattach: Notify,
    shutdown: CancellationToken,
}

impl HostInner {
    fn set_state(&self, state: HostState) {
        tracing::debug!(destination = %self.destination, %state, "host state");
        self.state.send_replace(state);
    }

    pub(crate) fn registry(&self) -> MutexGuard<'_, Registry> {
        // Updates under this lock are whole map operations: a panic cannot leave them torn.
        self.registry.lock_unpoisoned()
    }

    pub(crate) fn slot(&self, pty: PtyId) -> Option<Arc<PaneSlot>> {
        self.registry().slots.get(&pty).cloned()
    }

    fn live(&self) -> Option<Live> {
        self.registry().live.clone()
    }
}

impl std::fmt::Debug for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Host")
            .field("destination", &self.inner.destination)
            .field("state", &*self.inner.state.borrow())
            .finish_non_exhaustive()
    }
}

impl Host {
    /// Starts supervising the agent reached through `transport`: the first connection attempt
    /// starts at once, in the background. Must be called inside a tokio runtime.
    pub fn open(transport: impl Transport, options: HostOptions) -> Host {
        let shutdown = CancellationToken::new();
        let inner = Arc::new(HostInner {
            destination: transport.describe(),
            transport: Box::new(transport),
            options,
            state: watch::Sender::new(HostState::Connecting { attempt: 1 }),
            registry: Mutex::new(Registry::default()),
            wake: Notify::new(),
            reattach: Notify::new(),
            shutdown: shutdown.clone(),
        });
        tokio::spawn(supervisor::run(inner.clone()));
        Host {
            inner,
            keep: Arc::new(KeepRunning(shutdown)),
        }
    }

    /// The transport's name of the destination (`"local"`, `"user@host:22"`).
    pub fn destination(&self) -> &str {
        &self.inner.destination
    }

    /// Watches the connection state (see [`HostState`]). The current value is available at
    /// once with `borrow()`.
    pub fn state(&self) -> watch::Receiver<HostState> {
        self.inner.state.subscribe()
    }

    /// Skips the wait before the next connection attempt ([`HostState::Reconnecting`]), tries
    /// again after a [`HostState::Failed`] (once its cause was fixed), and re-attaches panes
    /// whose re-attach was unresolved.
    pub fn retry_now(&self) {
        // No stored permit: a retry asked for while connected must not cut a later backoff
        // short. A second re-attach pass is harmless (each pane is re-attached once per
        // connection).
        self.inner.wake.notify_waiters();
        self.inner.reattach.notify_one();
    }

    /// Stops the supervisor and closes the connection. Pane streams end with
    /// [`PaneEvent::Disconnected`](crate::PaneEvent::Disconnected); nothing on the host ends (its
    /// PTYs keep running, detached).
    pub fn close(&self) {
        self.inner.shutdown.cancel();
    }

    /// A handle scoping panes to workspace `id`.
    pub fn workspace(&self, id: impl Into<String>) -> Workspace {
        Workspace::new(self.clone(), id.into())
    }

    /// The live connection, waiting for one while the host (re)connects. Use it for
    /// operations that are not about a held pane (`list_leases`, `status`, `kill`, ...).
    ///
    /// # Errors
    /// [`Error::HostDown`] when the host is [`HostState::Failed`] (with its error) or closed.
    pub async fn session(&self) -> Result<Session, Error> {
        let mut states = self.state();
        loop {
            if let Some(live) = self.inner.live() {
                return Ok(live.session);
            }
            match &*states.borrow_and_update() {
                HostState::Failed { error } => return Err(Error::HostDown(error.report())),
                HostState::Closed => return Err(Error::HostDown("the host was closed".into())),
                _ => {}
            }
            if states.changed().await.is_err() {
                return Err(Error::HostDown("the host was closed".into()));
            }
        }
    }

    /// The live connection now, if there is one.
    pub fn try_session(&self) -> Option<Session> {
        self.inner.live().map(|l| l.session)
    }

    /// Creates-or-attaches `pane` (see [`Session::open_screen`]) on the live connection, waiting
    /// for one. The only host call that may spawn; idempotent by pane key (rule D). The returned
    /// handle's stream survives reconnects; with an agent that has the `screen` capability, a
    /// re-attach the agent cannot serve bytes for gets a snapshot, never a gap, and typed events
    /// are delivered once.
    ///
    /// # Errors
    /// As [`Session::open`] and [`Host::session`]. A connection lost before the answer gives
    /// [`Error::ConnectionLost`]: the outcome is unknown, and opening again is safe (an existing
    /// PTY is attached, never duplicated).
    pub async fn open_pane(
        &self,
        pane: PaneKey,
        spec: SpawnSpec,
        resume: Resume,
    ) -> Result<(relay_protocol::message::Created, PaneHandle), Error> {
        self.open_as(pane, spec, resume, Delivery::Screen).await
    }

    /// Creates-or-attaches `pane` like [`Host::open_pane`] with lossless delivery (see
    /// [`Session::open_lossless`]): every byte from `resume_from` in order, never a snapshot;
    /// the agent holds the program back rather than drop what the app has not consumed, also
    /// across a reconnect (the re-attach is lossless too, from the next byte the app needs).
    /// For output that goes to a file, a pipe or a recorder.
    ///
    /// # Errors
    /// As [`Host::open_pane`].
    pub async fn open_pane_lossless(
        &self,
        pane: PaneKey,
        spec: SpawnSpec,
        resume_from: u64,
    ) -> Result<(relay_protocol::message::Created, PaneHandle), Error> {
        let resume = Resume::From(resume_from);
        self.open_as(pane, spec, resume, Delivery::Lossless).await
    }

    /// Attaches to `pane`'s PTY like [`Host::attach_pane`] with the lossless delivery of
    /// [`Host::open_pane_lossless`]. Never spawns (rule B).
    ///
    /// # Errors
    /// As [`Host::attach_pane`].
    pub async fn attach_pane_lossless(
        &self,
        pane: PaneKey,
        expect: Option<PtyId>,
        resume_from: u64,
    ) -> Result<PaneHandle, Error> {
        let resume = Resume::From(resume_from);
        self.attach_as(pane, expect, resume, Delivery::Lossless)
            .await
    }

    /// Attaches to `pane`'s PTY on the live connection, waiting for one. Never spawns (rule B).
    /// `expect` and `resume` as in [`Session::attach_screen`]. The returned handle's stream
    /// survives reconnects.
    ///
    /// # Errors
    /// As [`Session::attach`] and [`Host::session`].
    pub async fn attach_pane(
        &self,
        pane: PaneKey,
        expect: Option<PtyId>,
        resume: Resume,
    ) -> Result<PaneHandle, Error> {
        self.attach_as(pane, expect, resume, Delivery::Screen).await
    }

    /// [`Host::open_pane`] or [`Host::open_pane_lossless`], as `delivery` says.
    async fn open_as(
        &self,
        pane: PaneKey,
        spec: SpawnSpec,
        resume: Resume,
        delivery: Delivery,
    ) -> Result<(relay_protocol::message::Created, PaneHandle), Error> {
        let session = self.session().await?;
        let Some(req) = delivery.open_request(&session, pane.clone(), spec.clone(), resume) else {
            let created = session.create(pane.clone(), spec).await?;
            let expect = Some(created.binding.pty);
            let handle = self.attach_as(pane, expect, resume, delivery).await?;
            return Ok((created, handle));
        };
        let (resp, new) = self.subscribe(&session, req).await?;
        let (created, attached, snapshot) = opened_of(resp).map_err(|op| unexpected("open", op))?;
        Ok((created, self.handle(new, attached, snapshot, delivery)))
    }

    /// [`Host::attach_pane`] or [`Host::attach_pane_lossless`], as `delivery` says.
    async fn attach_as(
        &self,
        pane: PaneKey,
        expect: Option<PtyId>,
        resume: Resume,
        delivery: Delivery,
    ) -> Result<PaneHandle, Error> {
        let session = self.session().await?;
        let req = delivery.attach_request(&session, pane, expect, resume, 0);
        let (resp, new) = self.subscribe(&session, req).await?;
        match attached_of(&resp) {
            Some((a, snapshot)) => Ok(self.handle(new, a.clone(), snapshot, delivery)),
            None => Err(unexpected("attach", resp.op())),
        }
    }

    /// Sends a subscribing request whose pushes go to a new host queue.
    async fn subscribe(
        &self,
        session: &Session,
        req: Request,
    ) -> Result<(Response, NewPane), Error> {
        let live = self
            .inner
            .live()
            .filter(|l| l.session.same_connection(session))
            .ok_or_else(|| Error::connection_lost(self.inner.registry().last_loss.clone()))?;
        let (sink, queue) = PaneSink::new(session.queue_cap());
        let route = Route::host(sink.clone(), RouteStart::Fresh);
        let resp = session.subscribe_route(req, route).await?;
        Ok((resp, NewPane { sink, queue, live }))
    }

    /// Registers a subscribed pane with the host and makes its handle; `delivery` is how its
    /// re-attaches ask for output.
    fn handle(
        &self,
        pane: NewPane,
        attached: relay_protocol::message::Attached,
        snapshot: bool,
        delivery: Delivery,
    ) -> PaneHandle {
        let NewPane { sink, queue, live } = pane;
        let (credit, window) = (live.session.credit(), live.session.ack_window());
        let binding = attached.binding.clone();
        let sink_id = sink.id;
        let slot = PaneSlot::new(binding.clone(), sink, live, delivery);
        if self.inner.registry().register(slot) {
            // Its connection ended before the registration: re-attach on the next one.
            self.inner.reattach.notify_one();
        }
        let link = HostLink {
            inner: self.inner.clone(),
            pty: binding.pty,
            sink_id,
            _keep: self.keep.clone(),
        };
        PaneHandle::new(attached, snapshot, queue, credit, window, Box::new(link))
    }

    /// An ordered, bounded input writer for the pane of `binding` (see
    /// [`InputWriter`](crate::InputWriter)).
    pub fn input_writer(&self, binding: &Binding) -> crate::InputWriter {
        crate::InputWriter::start(self.clone(), binding.clone())
    }

    /// The slot of a pane this host holds.
    pub(crate) fn slot_of(&self, binding: &Binding) -> Result<Arc<PaneSlot>, Error> {
        self.inner
            .slot(binding.pty)
            .filter(|s| s.binding == *binding)
            .ok_or_else(|| {
                Error::PaneGone(format!("pane {binding} is not held by this host handle"))
            })
    }

    /// Sets the size of the pane of `binding` (columns × rows): now when it is attached, and
    /// again after every re-attach when the PTY's size differs.
    ///
    /// # Errors
    /// [`Error::PaneGone`] when this host does not hold the pane; the agent's fencing errors
    /// (rule C). A lost connection is not an error: the size is applied after the re-attach.
    pub async fn resize(&self, binding: &Binding, size: TermSize) -> Result<(), Error> {
        let slot = self.slot_of(binding)?;
        slot.want_size(size);
        if let SlotLink::Attached(live) = slot.link() {
            match live.session.resize(binding, size).await {
                Err(e) if e.is_connection_lost() => {}
                other => return other,
            }
        }
        Ok(())
    }

    /// Options the host was opened with.
    pub(crate) fn options(&self) -> &HostOptions {
        &self.inner.options
    }
}

/// A subscription whose reply is awaited: becomes a registered pane.
struct NewPane {
    sink: Arc<PaneSink>,
    queue: crate::pane::PaneQueue,
    live: Live,
}
