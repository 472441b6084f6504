//! [`SshTransport`]: the agent over SSH. Each [`Transport::open`] makes one SSH connection to the
//! host, deploys the agent if needed, and opens ONE exec channel running
//! `~/.relay/bin/relay-agent-<version>-<hash> bridge`; every workspace and pane of the host then
//! goes through that channel (the session layer multiplexes them).
//!
//! The returned reader must be read continuously (the connector's session reader task does):
//! an unread channel stalls the whole SSH connection. Dropping the [`AgentStream`]'s guard closes
//! the channel and disconnects; it never touches the agent daemon, whose PTYs keep running.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use russh::client::Msg;
use russh::ChannelWriteHalf;

use super::auth::AuthOptions;
use super::bridge::BridgeReader;
use super::config::{self, HostConfig, ResolveOptions};
use super::connect::{self, ConnectContext, Connection};
use super::deploy::{self, AgentSource, DeployReport, ProgressCallback};
use super::handler::russh_error;
use super::known_hosts::{HostKeyPolicy, HostKeyPrompt};
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
}

/// Keeps the SSH connection alive while the stream is used; closes the bridge channel and
/// disconnects (target and jump hosts) on drop.
struct SshGuard {
    conn: Option<Arc<Connection>>,
    write: Option<ChannelWriteHalf<Msg>>,
    /// The bridge command's exit status, once the reader has seen it.
    exit: Arc<OnceLock<u32>>,
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
        }
    }

    /// What the most recent successful open's deploy step did.
    pub fn last_deploy(&self) -> Option<DeployReport> {
        self.last_deploy
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Resolves the destination with the ssh config (see [`config::resolve`]).
    ///
    /// # Errors
    /// [`Error::Config`] as [`config::resolve`].
    pub async fn resolve(&self) -> Result<HostConfig, Error> {
        config::resolve(&self.opts.destination, &self.opts.resolve).await
    }

    /// Connects, deploys and opens the bridge channel (which starts the daemon unless
    /// `options.start_agent` is off); returns the stream and the deploy report.
    ///
    /// # Errors
    /// [`Error::HostKey`], [`Error::HostKeyChanged`], [`Error::Auth`] and [`Error::Config`] (a
    /// retry cannot fix them),
    /// [`Error::Deploy`], and [`Error::Ssh`] for network failures (transient).
    pub async fn open_with_report(
        &self,
        options: OpenOptions,
    ) -> Result<(AgentStream, DeployReport), Error> {
        let cfg = self.resolve().await?;
        let ctx = ConnectContext {
            config_file: self.opts.resolve.config_file.clone(),
            policy: self.opts.host_key_policy,
            prompt: self.opts.host_key_prompt.clone(),
            connect_timeout: self.opts.connect_timeout,
        };
        let conn = connect::connect(&cfg, &ctx, &self.opts.auth, 0).await?;
        match self.start_bridge(&cfg, &conn, options).await {
            Ok((reader, write, report)) => {
                *self.last_deploy.lock().unwrap_or_else(|e| e.into_inner()) = Some(report.clone());
                let writer = Box::pin(write.make_writer());
                let guard = SshGuard {
                    conn: Some(Arc::new(conn)),
                    write: Some(write),
                    exit: reader.exit_cell(),
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

    async fn start_bridge(
        &self,
        cfg: &HostConfig,
        conn: &Connection,
        options: OpenOptions,
    ) -> Result<(BridgeReader, ChannelWriteHalf<Msg>, DeployReport), Error> {
        let progress = self.opts.progress.as_ref();
        let mut deployed = deploy::ensure_agent(
            &conn.handle,
            &self.opts.agent,
            progress,
            options.start_agent,
        )
        .await?;
        match self.run_bridge(cfg, conn, &deployed, options).await {
            Err(BridgeFailure::HashMismatch(_)) if !deployed.report.uploaded => {
                deployed.replace_corrupt(&conn.handle, progress).await?;
            }
            Err(BridgeFailure::HashMismatch(e) | BridgeFailure::Other(e)) => return Err(e),
            Ok((reader, write)) => return Ok((reader, write, deployed.report)),
        }
        match self.run_bridge(cfg, conn, &deployed, options).await {
            Ok((reader, write)) => Ok((reader, write, deployed.report)),
            Err(BridgeFailure::HashMismatch(e) | BridgeFailure::Other(e)) => Err(e),
        }
    }

    /// Runs the bridge command on a new exec channel and waits for its sentinel.
    async fn run_bridge(
        &self,
        cfg: &HostConfig,
        conn: &Connection,
        deployed: &deploy::Deployed,
        options: OpenOptions,
    ) -> Result<(BridgeReader, ChannelWriteHalf<Msg>), BridgeFailure> {
        let channel = conn
            .handle
            .channel_open_session()
            .await
            .map_err(|e| russh_error("opening the agent channel", e))?;
        let sentinel = deploy::new_sentinel();
        let (read, write) = channel.split();
        write
            .exec(
                true,
                deploy::bridge_command(deployed, &sentinel, options.start_agent),
            )
            .await
            .map_err(|e| russh_error("starting the agent bridge", e))?;
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
                Err(Error::Ssh(format!(
                    "the agent bridge on {} did not start within {} s",
                    cfg.display(),
                    timeout.as_secs()
                ))
                .into())
            }
        }
    }
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
        Box::pin(async move {
            self.open_with_report(options)
                .await
                .map(|(stream, _)| stream)
        })
    }

    fn describe(&self) -> String {
        self.opts.destination.clone()
    }
}
