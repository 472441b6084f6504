//! [`SshTransport`]: the agent over SSH. Each [`Transport::open`] makes one SSH connection to the
//! host, deploys the agent if needed, and opens ONE exec channel running
//! `~/.relay/bin/relay-agent-<version>-<hash> bridge`; every workspace and pane of the host then
//! goes through that channel (the session layer multiplexes them).
//!
//! A transport remembers the agent its last connect ran (name, size, sha256) once the agent
//! welcomed it: a reconnect skips the probe and runs the bridge command at once, which still
//! checks the file's size and sha256 before running it. A missing or changed file, a local
//! agent binary that changed since (a newer build is deployed), or any failure of the fast
//! path other than the network's sends the connect (or the next one) through the probe and,
//! if needed, the upload. The session's hello is written right behind the bridge command
//! ([`Transport::open_and_send`]), so after the SSH handshake a reconnect costs two round trips
//! (channel open; bridge command with hello → welcome), as `ssh host true` does.
//!
//! The returned reader must be read continuously (the connector's session reader task does):
//! an unread channel stalls the whole SSH connection. Dropping the [`AgentStream`]'s guard closes
//! the channel and disconnects; it never touches the agent daemon, whose PTYs keep running.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use russh::client::Msg;
use russh::{Channel, ChannelWriteHalf};

use super::auth::AuthOptions;
use super::bridge::BridgeReader;
use super::config::{self, HostConfig, ResolveOptions};
use super::connect::{self, ConnectContext, Connection};
use super::deploy::{self, AgentSource, DeployEvent, DeployReport, Installed, ProgressCallback};
use super::exec;
use super::handler::russh_error;
use super::known_hosts::{HostKeyPolicy, HostKeyPrompt};
use crate::sync::LockExt;
use crate::transport::{
    AgentStream, ExitCodeFuture, OpenFuture, OpenOptions, StreamGuard, Transport,
};
use crate::Error;

/// Everything needed to reach one host's agent over SSH.
#[derive(Clone, Default)]
pub struct SshOptions {
    /// `[user@]host[:port]`, `ssh://...` or an ssh_config alias.
    pub destination: String,
    /// `-F`, `-p`, `-l` overrides.
    pub resolve: ResolveOptions,
    /// Keys, ssh-agent use and the passphrase prompt.
    pub auth: AuthOptions,
    /// Host key policy; `None` follows `StrictHostKeyChecking` from the config (OpenSSH's
    /// default `ask`: the [`SshOptions::host_key_prompt`] decides, strict without one).
    /// `Some(HostKeyPolicy::AcceptNew)` is `--accept-new`.
    pub host_key_policy: Option<HostKeyPolicy>,
    /// Asked about an unknown host key under [`HostKeyPolicy::Ask`] (the CLI asks on the
    /// terminal, as `ssh` does); `None` refuses unknown keys.
    pub host_key_prompt: Option<HostKeyPrompt>,
    /// Where the agent binaries come from.
    pub agent: AgentSource,
    /// Deploy progress events.
    pub progress: Option<ProgressCallback>,
    /// Overrides `ConnectTimeout` (default 15 s): TCP connect, proxy and key exchange.
    pub connect_timeout: Option<Duration>,
}

impl std::fmt::Debug for SshOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SshOptions")
            .field("destination", &self.destination)
            .field("resolve", &self.resolve)
            .field("auth", &self.auth)
            .field("host_key_policy", &self.host_key_policy)
            .field("host_key_prompt", &self.host_key_prompt.is_some())
            .field("agent", &self.agent)
            .field("progress", &self.progress.is_some())
            .field("connect_timeout", &self.connect_timeout)
            .finish()
    }
}

/// Reaches a host's agent through SSH (see the module documentation).
pub struct SshTransport {
    opts: SshOptions,
    last_deploy: Mutex<Option<DeployReport>>,
    /// The agent the last connect ran, once it welcomed us: the next connect runs it without
    /// a probe.
    known: Arc<Mutex<Option<Known>>>,
}

/// What a transport remembers of the agent its last connect ran.
#[derive(Clone)]
struct Known {
    agent: Installed,
    report: DeployReport,
    /// Size and modification time of each local candidate binary for the host's target at
    /// that connect: when one changed, the next connect probes (and deploys a newer build).
    local: Vec<(PathBuf, Option<(u64, SystemTime)>)>,
}

/// Size and modification time of each local agent binary `source` offers for `target`.
fn local_stamps(source: &AgentSource, target: &str) -> Vec<(PathBuf, Option<(u64, SystemTime)>)> {
    source
        .host_candidates(target)
        .unwrap_or_default()
        .into_iter()
        .map(|path| {
            let stamp = std::fs::metadata(&path)
                .ok()
                .and_then(|m| Some((m.len(), m.modified().ok()?)));
            (path, stamp)
        })
        .collect()
}

/// Keeps the SSH connection alive while the stream is used; closes the bridge channel and
/// disconnects (target and jump hosts) on drop.
struct SshGuard {
    conn: Option<Arc<Connection>>,
    write: Option<ChannelWriteHalf<Msg>>,
    /// The bridge command's exit status, once the reader has seen it.
    exit: Arc<OnceLock<u32>>,
    /// Stored in the transport once the agent welcomed us.
    remember: Option<(Arc<Mutex<Option<Known>>>, Known)>,
}

impl Drop for SshGuard {
    fn drop(&mut self) {
        let (Some(conn), write) = (self.conn.take(), self.write.take()) else {
            return;
        };
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            // Bounded: over a dead link (the reason we may be closing) the goodbye may never
            // be written; the connection's keepalive ends what is left.
            rt.spawn(tokio::time::timeout(CLOSE_GRACE, async move {
                if let Some(w) = write {
                    let _ = w.close().await;
                }
                conn.disconnect().await;
            }));
        }
    }
}

/// The SSH bridge reader explains a failure itself; the guard only knows the exit status.
impl StreamGuard for SshGuard {
    /// Known by the time the reader ended: sshd sends the exit status before closing.
    fn exit_code(&mut self) -> ExitCodeFuture<'_> {
        let code = self.exit.get().map(|c| *c as i32);
        Box::pin(async move { code })
    }

    /// The agent answered: the next connect may run it without a probe.
    fn ready(&mut self) {
        if let Some((cell, known)) = self.remember.take() {
            *cell.lock_unpoisoned() = Some(known);
        }
    }
}

/// How long closing the bridge channel and disconnecting may take before they are abandoned.
const CLOSE_GRACE: Duration = Duration::from_secs(2);

impl SshTransport {
    /// A transport for `opts.destination`. Nothing is resolved or contacted until
    /// [`Transport::open`] (rule I: no probe of a host nobody asked for).
    pub fn new(opts: SshOptions) -> Self {
        SshTransport {
            opts,
            last_deploy: Mutex::new(None),
            known: Arc::default(),
        }
    }

    /// What the most recent successful open's deploy step did.
    pub fn last_deploy(&self) -> Option<DeployReport> {
        self.last_deploy.lock_unpoisoned().clone()
    }

    /// Resolves the destination with the ssh config (see [`config::resolve`]).
    ///
    /// # Errors
    /// [`Error::Config`] as [`config::resolve`].
    pub async fn resolve(&self) -> Result<HostConfig, Error> {
        config::resolve(&self.opts.destination, &self.opts.resolve).await
    }

    /// Connects, deploys and opens the bridge channel (which starts the daemon unless
    /// `options.start_agent` is off); returns the stream and the deploy report. On a reconnect
    /// without a probe (see the module documentation) the report is the earlier one's, with
    /// `uploaded` off and `elapsed` zero.
    ///
    /// # Errors
    /// [`Error::HostKey`], [`Error::HostKeyChanged`], [`Error::Auth`] and [`Error::Config`] (a
    /// retry cannot fix them),
    /// [`Error::Deploy`], and [`Error::ConnectRefused`], [`Error::ConnectTimeout`] and
    /// [`Error::Ssh`] for network failures (transient).
    pub async fn open_with_report(
        &self,
        options: OpenOptions,
    ) -> Result<(AgentStream, DeployReport), Error> {
        self.open_sending(options, Bytes::new()).await
    }

    /// [`SshTransport::open_with_report`], with `first` written to the bridge right behind its
    /// command.
    async fn open_sending(
        &self,
        options: OpenOptions,
        first: Bytes,
    ) -> Result<(AgentStream, DeployReport), Error> {
        let cfg = self.resolve().await?;
        let ctx = ConnectContext {
            config_file: self.opts.resolve.config_file.clone(),
            policy: self.opts.host_key_policy,
            prompt: self.opts.host_key_prompt.clone(),
            connect_timeout: self.opts.connect_timeout,
        };
        let conn = connect::connect(&cfg, &ctx, &self.opts.auth, 0).await?;
        match self.start_bridge(&cfg, &conn, options, &first).await {
            Ok((reader, write, known)) => {
                let report = known.report.clone();
                *self.last_deploy.lock_unpoisoned() = Some(report.clone());
                let writer = Box::pin(write.make_writer());
                let guard = SshGuard {
                    conn: Some(Arc::new(conn)),
                    write: Some(write),
                    exit: reader.exit_cell(),
                    remember: Some((self.known.clone(), known)),
                };
                Ok((
                    AgentStream {
                        reader: Box::pin(reader),
                        writer,
                        guard: Box::new(guard),
                    },
                    report,
                ))
            }
            Err(e) => {
                conn.disconnect().await;
                Err(e)
            }
        }
    }

    /// Starts the bridge: at once with the agent the last connect ran, else after the probe
    /// and deploy ([`deploy::ensure_agent`]); returns what the guard remembers on success.
    async fn start_bridge(
        &self,
        cfg: &HostConfig,
        conn: &Connection,
        options: OpenOptions,
        first: &Bytes,
    ) -> Result<(BridgeReader, ChannelWriteHalf<Msg>, Known), Error> {
        let progress = self.opts.progress.as_ref();
        // Taken: only a connect the agent welcomes remembers it again (`SshGuard::ready`).
        let known = self.known.lock_unpoisoned().take();
        let known = known.filter(|k| k.local == local_stamps(&self.opts.agent, &k.report.target));
        if let Some(known) = known {
            match self
                .run_bridge(cfg, conn, &known.agent, options, first, None)
                .await
            {
                Ok((reader, write)) => {
                    if let Some(cb) = progress {
                        cb(&DeployEvent::AlreadyPresent {
                            path: format!("~/{}", known.report.remote_path),
                        });
                    }
                    let mut known = known;
                    known.report = DeployReport {
                        uploaded: false,
                        replaced_corrupt: false,
                        bytes: 0,
                        elapsed: Duration::ZERO,
                        ..known.report
                    };
                    return Ok((reader, write, known));
                }
                Err(BridgeFailure::HashMismatch(e)) => tracing::info!(
                    error = %e,
                    "the agent installed earlier is not there as it was; deploying again"
                ),
                // The network failing says nothing about the agent.
                Err(BridgeFailure::Other(
                    e @ (Error::Ssh { .. }
                    | Error::ConnectRefused { .. }
                    | Error::ConnectTimeout(_)),
                )) => {
                    *self.known.lock_unpoisoned() = Some(known);
                    return Err(e);
                }
                Err(BridgeFailure::Other(e)) => return Err(e),
            }
        }
        // The bridge's channel opens while the probe (and upload) run: one round trip less.
        let (deployed, opened) = tokio::join!(
            deploy::ensure_agent(
                &conn.handle,
                &self.opts.agent,
                progress,
                options.start_agent,
            ),
            open_channel(conn)
        );
        let mut deployed = match deployed {
            Ok(deployed) => deployed,
            Err(e) => {
                if let Ok(channel) = opened {
                    let _ = channel.close().await;
                }
                return Err(e);
            }
        };
        let opened = opened?;
        let agent = deployed.installed();
        let started = match self
            .run_bridge(cfg, conn, &agent, options, first, Some(opened))
            .await
        {
            Err(BridgeFailure::HashMismatch(_)) if !deployed.report.uploaded => {
                deployed.replace_corrupt(&conn.handle, progress).await?;
                self.run_bridge(cfg, conn, &agent, options, first, None)
                    .await
            }
            other => other,
        };
        match started {
            Ok((reader, write)) => {
                let local = local_stamps(&self.opts.agent, &deployed.report.target);
                let known = Known {
                    agent,
                    report: deployed.report,
                    local,
                };
                Ok((reader, write, known))
            }
            Err(BridgeFailure::HashMismatch(e) | BridgeFailure::Other(e)) => Err(e),
        }
    }

    /// Runs the bridge command on `opened` (else a new session channel), writes `first` right
    /// behind it (the bridge reads it once it runs) and waits for its sentinel.
    async fn run_bridge(
        &self,
        cfg: &HostConfig,
        conn: &Connection,
        agent: &Installed,
        options: OpenOptions,
        first: &Bytes,
        opened: Option<Channel<Msg>>,
    ) -> Result<(BridgeReader, ChannelWriteHalf<Msg>), BridgeFailure> {
        let channel = match opened {
            Some(channel) => channel,
            None => open_channel(conn).await?,
        };
        let sentinel = deploy::new_sentinel();
        let (read, write) = channel.split();
        write
            .exec(
                true,
                deploy::bridge_command(agent, &sentinel, options.start_agent),
            )
            .await
            .map_err(|e| russh_error("starting the agent bridge", e))?;
        if !first.is_empty() {
            // The bridge command's checks read the file, not stdin, so the bridge is the first
            // reader (unless a login shell's startup file reads stdin: then the handshake
            // fails with the hint about startup files). A failed write is no error here: the
            // channel has ended, and reading it says why.
            if let Err(e) = write.data(&first[..]).await {
                tracing::debug!(error = %e, "sending the hello and policy to the agent bridge failed");
            }
        }
        let mut reader = BridgeReader::new(read, conn.lost.clone());
        let timeout = self
            .opts
            .connect_timeout
            .or(cfg.connect_timeout)
            .unwrap_or(connect::DEFAULT_CONNECT_TIMEOUT);
        match tokio::time::timeout(timeout, reader.wait_ready(&sentinel)).await {
            Ok(Ok(())) => Ok((reader, write)),
            Ok(Err(e)) => {
                let _ = write.close().await;
                if reader.exit_status() == Some(deploy::BRIDGE_HASH_MISMATCH) {
                    return Err(BridgeFailure::HashMismatch(e));
                }
                Err(e.into())
            }
            Err(_) => {
                let _ = write.close().await;
                Err(Error::ssh(format!(
                    "the agent bridge on {} did not start within {} s",
                    cfg.display(),
                    timeout.as_secs()
                ))
                .into())
            }
        }
    }
}

/// Opens the session channel the bridge command will run on.
///
/// # Errors
/// [`Error::Ssh`] when the host refuses it or the connection fails.
async fn open_channel(conn: &Connection) -> Result<Channel<Msg>, Error> {
    exec::open(&conn.handle, "the agent channel").await
}

/// Why the bridge command did not start.
enum BridgeFailure {
    /// The installed agent's sha256 was wrong; it was not executed.
    HashMismatch(Error),
    /// Anything else.
    Other(Error),
}

impl From<Error> for BridgeFailure {
    fn from(e: Error) -> Self {
        BridgeFailure::Other(e)
    }
}

impl Transport for SshTransport {
    fn open(&self, options: OpenOptions) -> OpenFuture<'_> {
        self.open_and_send(options, Bytes::new())
    }

    /// Writes `first` right behind the bridge command, before the bridge said it is ready.
    fn open_and_send(&self, options: OpenOptions, first: Bytes) -> OpenFuture<'_> {
        Box::pin(async move {
            self.open_sending(options, first)
                .await
                .map(|(stream, _)| stream)
        })
    }

    fn describe(&self) -> String {
        self.opts.destination.clone()
    }
}
