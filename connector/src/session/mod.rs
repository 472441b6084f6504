//! [`Session`]: one connection to one agent, shared by every workspace and pane of the app.
//!
//! A session is an actor: [`Session::connect`] does the hello exchange (and states the cleanup
//! policy of [`ConnectOptions`] to an agent with `lifecycle`), then spawns a reader task
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
mod lifecycle;
mod reply;
pub(crate) mod shared;
mod subscribe;
mod upgrade;

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use relay_protocol::message::{
    Detach, Input, InputSeq, Kill, ListLeases, ListWorkspace, Ping, Protect, Resize, Signal,
    Status, StatusRequest,
};
use relay_protocol::{
    Binding, Capability, FrameCodec, LeaseInfo, PtyId, Request, Response, TermSize, Welcome,
    WorkspaceId, DEFAULT_MAX_FRAME, MAX_OUTPUT_CHUNK,
};
use tokio::sync::{mpsc, oneshot};
use tokio_util::codec::{FramedRead, FramedWrite};

use crate::pane::queue_cap;
use crate::transport::{AgentStream, OpenOptions, Transport};
use crate::Error;
pub(crate) use reply::unexpected;
use reply::{done, human_duration, op_name};
pub(crate) use shared::{attached_of, opened_of, Route, RouteStart};
use shared::{Pending, Shared};
pub(crate) use subscribe::legacy_resume;

/// Capacity of the writer's request queue, in messages.
const REQUEST_QUEUE: usize = 256;

/// How [`Session::connect_with`] introduces this client to the agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectOptions {
    /// Names this client in the agent's logs (e.g. `"my-editor/1234"`).
    pub client_id: String,
    /// The cleanup policy stated for the PTYs this connection creates (`docs/protocol.md`
    /// §6b.1): `Some("")` states the agent's defaults (the default), `Some("unused=10m;idle=off")`
    /// chooses, and `None` states none — for tools that never create (`relayctl`); PTYs created
    /// by a connection that stated none are never ended by a timer. Sent right after the hello,
    /// before any other request, and only to an agent with the `lifecycle` capability.
    pub policy: Option<String>,
    /// Start the agent daemon when none runs (`true`, the default: an app that opens shells
    /// wants one). `false` connects to a running daemon only and fails with
    /// [`Error::NoAgent`] otherwise, leaving nothing behind — for tools that only inspect or
    /// end shells (`relayctl`, like tmux's "no server running").
    pub start_agent: bool,
}

impl ConnectOptions {
    /// A client called `client_id` that starts the agent if needed and states the agent's
    /// default cleanup policy.
    pub fn new(client_id: impl Into<String>) -> ConnectOptions {
        ConnectOptions {
            client_id: client_id.into(),
            policy: Some(String::new()),
            start_agent: true,
        }
    }
}

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
    /// Opens a stream with `transport`, exchanges hello/welcome, starts the connection's tasks
    /// and states the agent's default cleanup policy (see [`ConnectOptions::new`]). `client_id`
    /// names this client in the agent's logs (e.g. `"my-editor/1234"`).
    ///
    /// Must be called inside a tokio runtime.
    ///
    /// # Errors
    /// As [`Session::connect_with`].
    pub async fn connect(transport: &dyn Transport, client_id: &str) -> Result<Session, Error> {
        Session::connect_with(transport, &ConnectOptions::new(client_id)).await
    }

    /// Opens a stream with `transport`, exchanges hello/welcome, starts the connection's tasks
    /// and, when `options.policy` is set, states that cleanup policy before any other request:
    /// it is written right behind the hello (no round trip of its own) and waited for with the
    /// welcome; an agent without the `lifecycle` capability answers `Unsupported`, which is
    /// ignored.
    ///
    /// Must be called inside a tokio runtime.
    ///
    /// # Errors
    /// The transport's errors ([`Error::Spawn`], SSH errors, ...); [`Error::NoAgent`] when no
    /// daemon runs and `options.start_agent` is off; [`Error::Handshake`] when the
    /// first reply is not a relay welcome; [`Error::Incompatible`] when the agent speaks another
    /// protocol major version; [`Error::Policy`] when the agent refuses the stated policy (the
    /// connection is closed); [`Error::Config`] for a client id too long for a hello (~1 MiB).
    pub async fn connect_with(
        transport: &dyn Transport,
        options: &ConnectOptions,
    ) -> Result<Session, Error> {
        let client_id = options.client_id.as_str();
        let policy = options.policy.as_deref();
        let destination = transport.describe();
        let AgentStream {
            reader,
            writer,
            mut guard,
        } = transport
            .open_and_send(
                OpenOptions {
                    start_agent: options.start_agent,
                },
                handshake::opening(client_id, policy)?,
            )
            .await?;
        let mut reader = FramedRead::new(reader, FrameCodec::new(DEFAULT_MAX_FRAME));
        let welcome = handshake::run(
            &mut reader,
            guard.as_mut(),
            &destination,
            options.start_agent,
        )
        .await?;
        let max_frame = welcome.limits.max_frame.min(DEFAULT_MAX_FRAME);
        let writer = FramedWrite::new(writer, FrameCodec::new(max_frame));
        tracing::debug!(
            %destination,
            agent_version = %welcome.agent_version,
            incarnation = %welcome.incarnation,
            "connected to agent"
        );
        let (requests, rx) = mpsc::channel(REQUEST_QUEUE);
        let shared = Arc::new(Shared::new(requests.downgrade(), max_frame as usize));
        // The policy went out behind the hello: its reply is registered before the read loop
        // starts, so the loop cannot deliver it to nobody.
        let policy_reply = match policy {
            Some(_) => {
                let (tx, rx) = oneshot::channel();
                shared.register(handshake::POLICY_ID, Pending::Reply(tx))?;
                Some(rx)
            }
            None => None,
        };
        tokio::spawn(conn::write_loop(writer, rx, shared.clone(), guard));
        tokio::spawn(conn::read_loop(reader, shared.clone()));
        let session = Session {
            inner: Arc::new(Inner {
                requests,
                shared,
                welcome,
                destination,
            }),
            timeout: None,
        };
        if let (Some(policy), Some(reply)) = (policy, policy_reply) {
            session.policy_stated(policy, reply).await?;
        }
        Ok(session)
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

    /// The byte cap of a pane queue on this connection (see [`queue_cap`]): for the largest
    /// window the agent may use, the replay ring when lossless windows grow (capability
    /// `window-growth`, protocol 1.8).
    pub(crate) fn queue_cap(&self) -> u64 {
        let welcome = &self.inner.welcome;
        let window = match welcome.has(Capability::WINDOW_GROWTH) {
            true => self.window().max(welcome.limits.replay_bytes),
            false => self.window(),
        };
        queue_cap(window, self.credit())
    }

    /// Whether the agent throttles output by credit windows.
    pub(crate) fn credit(&self) -> bool {
        self.inner.welcome.has(Capability::CREDIT)
    }

    /// The agent's credit window per pane, in bytes (what it may send beyond the last ack).
    pub(crate) fn window(&self) -> u64 {
        u64::from(self.inner.welcome.limits.window)
    }

    /// How much a pane's handle may consume before it must ack, in bytes: the credit window, at
    /// most the agent's replay ring — a lossless subscription holds its PTY at the last ack, so
    /// the agent never has more than a ring to send beyond it.
    pub(crate) fn ack_window(&self) -> u64 {
        match self.inner.welcome.limits.replay_bytes {
            0 => self.window(),
            ring => self.window().min(ring),
        }
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
            other => Err(unexpected("list leases", other.op())),
        }
    }

    /// The leases of `workspace`'s pane keys, including ended and superseded ones, sorted by
    /// pane key then PTY id. Asks for that workspace alone where the agent can
    /// (`ListWorkspace`, capability `list-workspace`, protocol 1.7), so the answer does not
    /// grow with the other workspaces' history; an older agent lists every lease and this
    /// keeps the workspace's. Never creates anything.
    ///
    /// # Errors
    /// As [`Session::list_leases`].
    pub async fn list_workspace_leases(
        &self,
        workspace: &WorkspaceId,
    ) -> Result<Vec<LeaseInfo>, Error> {
        if !self.inner.welcome.has(Capability::LIST_WORKSPACE) {
            let mut leases = self.list_leases().await?;
            leases.retain(|l| l.binding.pane.workspace == *workspace);
            return Ok(leases);
        }
        let request = Request::ListWorkspace(ListWorkspace {
            workspace: workspace.clone(),
        });
        match self.call(request).await? {
            Response::Leases(l) => Ok(l.leases),
            other => Err(unexpected("list a workspace's leases", other.op())),
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
            other => Err(unexpected("status", other.op())),
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
            other => Err(unexpected("ping", other.op())),
        }
    }

    pub(crate) fn require(&self, cap: &str, what: &str) -> Result<(), Error> {
        if self.inner.welcome.has(cap) {
            Ok(())
        } else {
            Err(Error::Unsupported(format!(
                "{what} (capability \"{cap}\"; agent {} on {})",
                self.inner.welcome.agent_version, self.inner.destination
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

#[cfg(test)]
pub(crate) mod test_peer;
#[cfg(test)]
mod tests;
