//! Establishing one authenticated SSH connection to a host: TCP, `ProxyCommand` (its stdio is the
//! transport) or `ProxyJump` (a `direct-tcpip` channel through the jump host's own connection,
//! any number of hops), then key exchange with host key verification, then authentication.

use std::borrow::Cow;
use std::path::PathBuf;
use std::pin::Pin;
use std::process::Stdio;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use russh::client::{Config, Handle};
use russh::keys::Algorithm;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, ReadBuf};
use tokio::process::{Child, ChildStdin, ChildStdout};

use super::auth::{self, AuthOptions};
use super::config::{self, HostConfig, ResolveOptions};
use super::handler::{ClientHandler, HandlerError, LostReason};
use super::known_hosts::{HostKeyPolicy, HostKeyPrompt};
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
#[derive(Clone, Default)]
pub(crate) struct ConnectContext {
    /// Config file for resolving jump hosts.
    pub(crate) config_file: Option<std::path::PathBuf>,
    /// `--accept-new` and the like; `None` follows `StrictHostKeyChecking`.
    pub(crate) policy: Option<HostKeyPolicy>,
    /// Asked about unknown host keys under [`HostKeyPolicy::Ask`].
    pub(crate) prompt: Option<HostKeyPrompt>,
    /// Overrides `ConnectTimeout`.
    pub(crate) connect_timeout: Option<Duration>,
}

/// An authenticated connection, with the jump host connections it runs through.
pub(crate) struct Connection {
    /// The connection to the host.
    pub(crate) handle: Handle<ClientHandler>,
    /// Jump host connections, nearest hop first; they must live as long as `handle`.
    pub(crate) jumps: Vec<Handle<ClientHandler>>,
    /// Why the connection to the host ended, once it has.
    pub(crate) lost: LostReason,
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
    let recorded = known_key_algorithms(&cfg.hostname, cfg.port, &cfg.known_hosts_files);
    let mut preferred = russh::Preferred::default();
    preferred.key = Cow::Owned(prefer_recorded(&preferred.key, &recorded));
    Arc::new(Config {
        preferred,
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

/// Key types known_hosts records for `host:port` (unreadable files count as empty: the host key
/// check reports them).
fn known_key_algorithms(host: &str, port: u16, files: &[PathBuf]) -> Vec<Algorithm> {
    files
        .iter()
        .filter_map(|f| russh::keys::known_hosts::known_host_keys_path(host, port, f).ok())
        .flatten()
        .map(|(_, key)| key.algorithm())
        .collect()
}

/// `default` with the algorithms of `recorded` keys first (like OpenSSH, so that a host known by
/// its ECDSA or RSA key is not reported as unknown because it also has an ed25519 key). RSA
/// keys are recorded as `ssh-rsa` but negotiated as `rsa-sha2-*`: every RSA variant matches.
fn prefer_recorded(default: &[Algorithm], recorded: &[Algorithm]) -> Vec<Algorithm> {
    let matches = |a: &Algorithm| {
        recorded.iter().any(|r| {
            r == a || (matches!(r, Algorithm::Rsa { .. }) && matches!(a, Algorithm::Rsa { .. }))
        })
    };
    let (mut first, rest): (Vec<_>, Vec<_>) = default.iter().cloned().partition(|a| matches(a));
    first.extend(rest);
    first
}

/// Connects and authenticates to `cfg`, through its `ProxyJump`/`ProxyCommand` if any.
///
/// # Errors
/// [`Error::HostKey`] / [`Error::HostKeyChanged`] / [`Error::Auth`] (a retry cannot fix them), [`Error::Config`] for a bad
/// jump host or proxy, [`Error::ConnectRefused`] when nothing accepts the TCP connection,
/// [`Error::ConnectTimeout`] past `ConnectTimeout`, [`Error::Ssh`] for other network failures.
pub(crate) fn connect<'a>(
    cfg: &'a HostConfig,
    ctx: &'a ConnectContext,
    auth: &'a AuthOptions,
    depth: usize,
) -> Pin<Box<dyn std::future::Future<Output = Result<Connection, Error>> + Send + 'a>> {
    Box::pin(async move {
        if depth > MAX_HOPS {
            return Err(Error::config(format!(
                "more than {MAX_HOPS} nested jump hosts for {}; is there a ProxyJump loop?",
                cfg.alias
            )));
        }
        let lost = LostReason::default();
        let asking = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let keepalive_interval = cfg
            .server_alive_interval
            .unwrap_or(DEFAULT_KEEPALIVE_INTERVAL);
        let keepalive_max = cfg.server_alive_count_max.unwrap_or(DEFAULT_KEEPALIVE_MAX);
        let handler = ClientHandler {
            keepalive_budget: keepalive_interval * keepalive_max.max(1) as u32,
            lost: lost.clone(),
            host: cfg.hostname.clone(),
            port: cfg.port,
            known_hosts: cfg.known_hosts_files.clone(),
            policy: ctx
                .policy
                .unwrap_or_else(|| HostKeyPolicy::from_config(cfg.strict_host_key_checking)),
            prompt: ctx.prompt.clone(),
            asking: asking.clone(),
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
                        Error::ssh(format!(
                            "jump host {} could not open a connection to {}:{}",
                            hop.display(),
                            cfg.hostname,
                            cfg.port
                        ))
                        .caused_by(e)
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
                    .map_err(|e| tcp_connect_error(&cfg.hostname, cfg.port, e))?;
                let _ = socket.set_nodelay(true);
                russh::client::connect_stream(config, socket, handler)
                    .await
                    .map_err(|e: HandlerError| e.into_error(&format!("connecting to {what}")))
            }
        };
        // ConnectTimeout bounds the network, not a person deciding about an unknown host key:
        // while the prompt is open the clock restarts, so the full timeout follows the answer.
        let mut handle = {
            let mut handshake = std::pin::pin!(handshake);
            let mut deadline = tokio::time::Instant::now() + timeout;
            loop {
                tokio::select! {
                    result = &mut handshake => break result?,
                    () = tokio::time::sleep_until(deadline) => {
                        if asking.load(std::sync::atomic::Ordering::Acquire) {
                            deadline = tokio::time::Instant::now() + timeout;
                            continue;
                        }
                        return Err(Error::ConnectTimeout(format!(
                            "connecting to {what} timed out after {} s (ConnectTimeout)",
                            timeout.as_secs()
                        )));
                    }
                }
            }
        };
        auth::authenticate(&mut handle, cfg, auth).await?;
        Ok(Connection {
            handle,
            jumps,
            lost,
        })
    })
}

/// The error of a failed TCP connect to `host:port`: [`Error::ConnectRefused`] when nothing
/// accepted it, else [`Error::Ssh`] (unreachable, no such name, ...); the IO error is the source
/// either way.
fn tcp_connect_error(host: &str, port: u16, e: std::io::Error) -> Error {
    let message = format!("cannot connect to {host}:{port}");
    if e.kind() == std::io::ErrorKind::ConnectionRefused {
        Error::ConnectRefused { message, source: e }
    } else {
        Error::ssh(message).caused_by(e)
    }
}

/// A `ProxyCommand` child whose stdout/stdin carry the SSH connection. The child is killed when
/// the stream is dropped; its stderr is logged.
struct ProxyStream {
    io: tokio::io::Join<ChildStdout, ChildStdin>,
    _child: Child,
}

impl ProxyStream {
    fn spawn(command: &str) -> Result<Self, Error> {
        let mut child = crate::sys::shell_command(command)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| {
                Error::config(format!("cannot start ProxyCommand {command:?}")).caused_by(e)
            })?;
        let (Some(stdout), Some(stdin)) = (child.stdout.take(), child.stdin.take()) else {
            return Err(Error::config("ProxyCommand stdio was not captured"));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recorded_key_types_are_preferred() {
        let default = russh::Preferred::default().key.to_vec();
        let ecdsa = Algorithm::Ecdsa {
            curve: russh::keys::EcdsaCurve::NistP256,
        };
        let got = prefer_recorded(&default, std::slice::from_ref(&ecdsa));
        assert_eq!(got[0], ecdsa);
        assert_eq!(got[1], Algorithm::Ed25519);
        assert_eq!(got.len(), default.len());
        let got = prefer_recorded(&default, &[Algorithm::Rsa { hash: None }]);
        assert!(matches!(got[0], Algorithm::Rsa { .. }));
        assert!(matches!(got[2], Algorithm::Rsa { .. }));
        assert_eq!(prefer_recorded(&default, &[]), default);
    }

    /// A refused TCP connect is its own kind, keeps the IO error as its source, and reads as it
    /// did when the cause was formatted into the message.
    #[tokio::test]
    async fn refused_connect_keeps_the_io_error() {
        use std::error::Error as _;
        // A port that was just free: nothing listens on it any more.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let io = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .unwrap_err();
        assert_eq!(io.kind(), std::io::ErrorKind::ConnectionRefused, "{io}");
        let before = format!("ssh: cannot connect to 127.0.0.1:{port}: {io}");
        let err = tcp_connect_error("127.0.0.1", port, io);
        assert!(matches!(err, Error::ConnectRefused { .. }), "{err:?}");
        assert!(err.is_transient());
        let source = err.source().expect("the refusal is the source");
        let io = source
            .downcast_ref::<std::io::Error>()
            .expect("an io::Error");
        assert_eq!(io.kind(), std::io::ErrorKind::ConnectionRefused);
        assert_eq!(
            err.to_string(),
            format!("ssh: cannot connect to 127.0.0.1:{port}")
        );
        assert_eq!(err.report(), before);
    }

    /// Other TCP failures stay [`Error::Ssh`] (transient), with the IO error as the source.
    #[test]
    fn other_connect_failures_are_ssh_errors_with_their_cause() {
        use std::error::Error as _;
        let io = std::io::Error::new(std::io::ErrorKind::HostUnreachable, "no route to host");
        let err = tcp_connect_error("h", 22, io);
        assert!(matches!(err, Error::Ssh { .. }), "{err:?}");
        assert!(err.is_transient());
        let io = err
            .source()
            .and_then(|s| s.downcast_ref::<std::io::Error>());
        assert_eq!(
            io.map(|e| e.kind()),
            Some(std::io::ErrorKind::HostUnreachable)
        );
        assert_eq!(
            err.report(),
            "ssh: cannot connect to h:22: no route to host"
        );
    }
}
