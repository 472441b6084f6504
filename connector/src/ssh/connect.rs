//! Establishing one authenticated SSH connection to a host: TCP, `ProxyCommand` (its stdio is the
//! transport) or `ProxyJump` (a `direct-tcpip` channel through the jump host's own connection,
//! any number of hops), then key exchange with host key verification, then authentication.

use std::pin::Pin;
use std::process::Stdio;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use russh::client::{Config, Handle};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, ReadBuf};
use tokio::process::{Child, ChildStdin, ChildStdout};

use super::auth::{self, AuthOptions};
use super::config::{self, HostConfig, ResolveOptions};
use super::handler::{ClientHandler, HandlerError};
use super::known_hosts::HostKeyPolicy;
use crate::Error;

/// Connect timeout when `ConnectTimeout` is not set.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(15);
/// SSH keepalive interval when `ServerAliveInterval` is not set.
pub const DEFAULT_KEEPALIVE_INTERVAL: Duration = Duration::from_secs(15);
/// Unanswered keepalives before the connection is declared dead, when `ServerAliveCountMax` is
/// not set.
pub const DEFAULT_KEEPALIVE_MAX: usize = 3;
/// Most nested jump hosts followed.
const MAX_HOPS: usize = 8;

/// Settings shared by the target and its jump hosts.
#[derive(Clone, Debug, Default)]
pub(crate) struct ConnectContext {
    /// Config file for resolving jump hosts.
    pub(crate) config_file: Option<std::path::PathBuf>,
    /// `--accept-new` and the like; `None` follows `StrictHostKeyChecking`.
    pub(crate) policy: Option<HostKeyPolicy>,
    /// Overrides `ConnectTimeout`.
    pub(crate) connect_timeout: Option<Duration>,
}

/// An authenticated connection, with the jump host connections it runs through.
pub(crate) struct Connection {
    /// The connection to the host.
    pub(crate) handle: Handle<ClientHandler>,
    /// Jump host connections, nearest hop first; they must live as long as `handle`.
    pub(crate) jumps: Vec<Handle<ClientHandler>>,
}

impl Connection {
    /// Disconnects this connection and its jump hosts.
    pub(crate) async fn disconnect(&self) {
        let _ = self
            .handle
            .disconnect(russh::Disconnect::ByApplication, "relay: closing", "en")
            .await;
        for j in &self.jumps {
            let _ = j
                .disconnect(russh::Disconnect::ByApplication, "relay: closing", "en")
                .await;
        }
    }
}

fn client_config(cfg: &HostConfig) -> Arc<Config> {
    Arc::new(Config {
        nodelay: true,
        keepalive_interval: Some(
            cfg.server_alive_interval
                .unwrap_or(DEFAULT_KEEPALIVE_INTERVAL),
        ),
        keepalive_max: cfg.server_alive_count_max.unwrap_or(DEFAULT_KEEPALIVE_MAX),
        inactivity_timeout: None,
        ..Config::default()
    })
}

/// Connects and authenticates to `cfg`, through its `ProxyJump`/`ProxyCommand` if any.
///
/// # Errors
/// [`Error::HostKey`] / [`Error::Auth`] (a retry cannot fix them), [`Error::Config`] for a bad
/// jump host or proxy, [`Error::Ssh`] for network failures and timeouts.
pub(crate) fn connect<'a>(
    cfg: &'a HostConfig,
    ctx: &'a ConnectContext,
    auth: &'a AuthOptions,
    depth: usize,
) -> Pin<Box<dyn std::future::Future<Output = Result<Connection, Error>> + Send + 'a>> {
    Box::pin(async move {
        if depth > MAX_HOPS {
            return Err(Error::Config(format!(
                "more than {MAX_HOPS} nested jump hosts for {}; is there a ProxyJump loop?",
                cfg.alias
            )));
        }
        let handler = ClientHandler {
            host: cfg.hostname.clone(),
            port: cfg.port,
            known_hosts: cfg.known_hosts_files.clone(),
            policy: ctx
                .policy
                .unwrap_or_else(|| HostKeyPolicy::from_config(cfg.strict_host_key_checking)),
        };
        let timeout = ctx
            .connect_timeout
            .or(cfg.connect_timeout)
            .unwrap_or(DEFAULT_CONNECT_TIMEOUT);
        let what = cfg.display();
        let config = client_config(cfg);

        let mut jumps = Vec::new();
        let handshake = async {
            if let Some((last, rest)) = cfg.proxy_jump.split_last() {
                let opts = ResolveOptions {
                    config_file: ctx.config_file.clone(),
                    ..ResolveOptions::default()
                };
                let mut hop = config::resolve(last, &opts).await?;
                if !rest.is_empty() {
                    // Earlier hops of the list lead to this hop (like `ssh -J a,b`).
                    hop.proxy_jump = rest.to_vec();
                    hop.proxy_command = None;
                }
                let hop_auth = AuthOptions {
                    identities: Vec::new(),
                    ..auth.clone()
                };
                let via = connect(&hop, ctx, &hop_auth, depth + 1).await?;
                let channel = via
                    .handle
                    .channel_open_direct_tcpip(
                        cfg.hostname.clone(),
                        cfg.port.into(),
                        "127.0.0.1",
                        0,
                    )
                    .await
                    .map_err(|e| {
                        Error::Ssh(format!(
                            "jump host {} could not open a connection to {}:{}: {e}",
                            hop.display(),
                            cfg.hostname,
                            cfg.port
                        ))
                    })?;
                let handle = russh::client::connect_stream(config, channel.into_stream(), handler)
                    .await
                    .map_err(|e: HandlerError| e.into_error(&format!("connecting to {what}")))?;
                jumps.push(via.handle);
                jumps.extend(via.jumps);
                Ok(handle)
            } else if let Some(command) = cfg.expanded_proxy_command() {
                let stream = ProxyStream::spawn(&command)?;
                russh::client::connect_stream(config, stream, handler)
                    .await
                    .map_err(|e: HandlerError| {
                        e.into_error(&format!("connecting to {what} through ProxyCommand"))
                    })
            } else {
                let socket = tokio::net::TcpStream::connect((cfg.hostname.as_str(), cfg.port))
                    .await
                    .map_err(|e| {
                        Error::Ssh(format!(
                            "cannot connect to {}:{}: {e}",
                            cfg.hostname, cfg.port
                        ))
                    })?;
                let _ = socket.set_nodelay(true);
                russh::client::connect_stream(config, socket, handler)
                    .await
                    .map_err(|e: HandlerError| e.into_error(&format!("connecting to {what}")))
            }
        };
        let mut handle = tokio::time::timeout(timeout, handshake)
            .await
            .map_err(|_| {
                Error::Ssh(format!(
                    "connecting to {what} timed out after {} s (ConnectTimeout)",
                    timeout.as_secs()
                ))
            })??;
        auth::authenticate(&mut handle, cfg, auth).await?;
        Ok(Connection { handle, jumps })
    })
}

/// A `ProxyCommand` child whose stdout/stdin carry the SSH connection. The child is killed when
/// the stream is dropped; its stderr is logged.
struct ProxyStream {
    io: tokio::io::Join<ChildStdout, ChildStdin>,
    _child: Child,
}

impl ProxyStream {
    fn spawn(command: &str) -> Result<Self, Error> {
        let mut child = tokio::process::Command::new("sh")
            .arg("-c")
            .arg(command)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| Error::Config(format!("cannot start ProxyCommand {command:?}: {e}")))?;
        let (Some(stdout), Some(stdin)) = (child.stdout.take(), child.stdin.take()) else {
            return Err(Error::Config("ProxyCommand stdio was not captured".into()));
        };
        if let Some(stderr) = child.stderr.take() {
            let command = command.to_string();
            tokio::spawn(async move {
                let mut lines = tokio::io::BufReader::new(stderr).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    tracing::warn!(proxy_command = %command, "{line}");
                }
            });
        }
        Ok(ProxyStream {
            io: tokio::io::join(stdout, stdin),
            _child: child,
        })
    }
}

impl AsyncRead for ProxyStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl AsyncWrite for ProxyStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}
