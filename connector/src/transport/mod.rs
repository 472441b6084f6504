//! Transports: how the connector reaches an agent bridge's byte stream.
//!
//! A transport yields one [`AgentStream`]: a reader and writer that carry relay frames to and from
//! `relay-agent bridge` (and through it, the agent daemon). The session layer does not know whether
//! the bytes go through a local child process or an SSH exec channel.
//!
//! This module has the [`Transport`] trait and the stream plumbing every transport shares; the
//! implementations are [`local`] (the bridge as a child process) and [`ssh`] (an exec channel,
//! deploying the agent when the host lacks it).

pub mod local;
pub mod ssh;

use std::future::Future;
use std::pin::Pin;

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

use crate::Error;

/// Boxed reader half of an agent stream.
pub type BoxReader = Pin<Box<dyn AsyncRead + Send>>;
/// Boxed writer half of an agent stream.
pub type BoxWriter = Pin<Box<dyn AsyncWrite + Send>>;
/// Boxed future returned by [`Transport::open`].
pub type OpenFuture<'a> = Pin<Box<dyn Future<Output = Result<AgentStream, Error>> + Send + 'a>>;

/// Boxed future returned by [`StreamGuard::failure`].
pub type FailureFuture<'a> = Pin<Box<dyn Future<Output = Option<String>> + Send + 'a>>;

/// Boxed future returned by [`StreamGuard::exit_code`].
pub type ExitCodeFuture<'a> = Pin<Box<dyn Future<Output = Option<i32>> + Send + 'a>>;

/// What a caller asks of [`Transport::open`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenOptions {
    /// Start the agent daemon when none runs (the default, what an app wants). `false` only
    /// connects to a running daemon: tools that inspect or end shells (`relayctl`) must not
    /// leave a daemon behind that nobody asked for. The stream then ends before the welcome
    /// and the handshake reports [`Error::NoAgent`].
    pub start_agent: bool,
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions { start_agent: true }
    }
}

/// What keeps a stream's resources alive (a child process, an SSH connection) and can explain
/// a stream that ended before the handshake. Dropping it must close the stream but never touch
/// the agent daemon.
pub trait StreamGuard: Send {
    /// After the stream ended before the agent's welcome: why the far end stopped, when the
    /// transport knows (the local bridge's exit status and stderr), as text that follows
    /// "exited", e.g. ` (exit status: 1): cannot create /ro/run`. Waits briefly at most.
    fn failure(&mut self) -> FailureFuture<'_> {
        Box::pin(async { None })
    }

    /// After the stream ended before the agent's welcome: the agent bridge's exit status, when
    /// the transport knows it (the local bridge's, or the bridge command's over SSH). Waits
    /// briefly at most. Tells "no agent running"
    /// ([`EXIT_NO_AGENT`](relay_protocol::bridge::EXIT_NO_AGENT)) from other failures.
    fn exit_code(&mut self) -> ExitCodeFuture<'_> {
        Box::pin(async { None })
    }

    /// The handshake succeeded (a transport may, e.g., start logging the far end's stderr).
    fn ready(&mut self) {}
}

/// A guard with nothing to keep or explain (in-memory streams in tests).
impl StreamGuard for () {}

/// Why a transport's bridge ended, carried inside the [`std::io::Error`] its stream reader
/// returns (`io::Error::other(BridgeEnd {..})`), so the handshake can tell a bridge the host
/// cannot execute (a retry cannot fix it: [`Error::AgentCannotRun`]) from one that exited
/// ([`Error::BridgeExited`], transient) without guessing from a shell banner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BridgeEnd {
    /// What ended and how: exit status and the bridge's stderr tail.
    pub text: String,
    /// Whether the host could not execute the agent at all ([`cannot_execute`]).
    pub cannot_run: bool,
}

impl std::fmt::Display for BridgeEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

impl std::error::Error for BridgeEnd {}

/// Whether a bridge that ended with exit `status` and `stderr` could not execute the agent
/// binary: POSIX shells exit 126 for "found but not executable" and 127 for "not found"; glibc's
/// dynamic loader names a missing symbol version (`version `GLIBC_2.34' not found`); the kernel
/// says "Exec format error" for another architecture. Only stderr lines that name the agent
/// binary (`relay-agent`) count: the tail also holds what the login shell's startup files
/// printed, which must not turn a retryable failure into a permanent one.
pub fn cannot_execute(status: Option<u32>, stderr: &str) -> bool {
    matches!(status, Some(126 | 127))
        || stderr.lines().any(|line| {
            line.contains("relay-agent")
                && (line.contains("GLIBC_")
                    || line.contains("cannot execute")
                    || line.contains("Exec format error"))
        })
}

/// A byte stream to an agent, plus whatever must stay alive while it is used.
pub struct AgentStream {
    /// Frames from the agent.
    pub reader: BoxReader,
    /// Frames to the agent.
    pub writer: BoxWriter,
    /// Resources owned by the stream (a child process, an SSH session, ...). Dropped when the
    /// session ends; dropping it must close the stream but never touch the agent daemon.
    pub guard: Box<dyn StreamGuard>,
}

/// Opens streams to one host's agent.
pub trait Transport: Send + Sync + 'static {
    /// Opens a new stream (deploying the agent if the transport does that, and starting its
    /// daemon unless `options` say not to: then the agent bridge is run with
    /// [`NO_START_FLAG`](relay_protocol::bridge::NO_START_FLAG)).
    ///
    /// # Errors
    /// [`Error`] describing why the agent could not be reached; see [`Error::is_transient`].
    fn open(&self, options: OpenOptions) -> OpenFuture<'_>;

    /// Opens a stream as [`Transport::open`] does, with `first` (the session's opening
    /// frames: the hello and the cleanup policy) written to it before anything else. The default opens, then writes. A transport whose
    /// far end accepts input before it reports ready overrides it to send `first` at once:
    /// over SSH the hello then travels right behind the bridge command instead of a round trip
    /// later. A failed write is no error here: the bridge has ended, and reading says why.
    ///
    /// # Errors
    /// As [`Transport::open`].
    fn open_and_send(&self, options: OpenOptions, first: Bytes) -> OpenFuture<'_> {
        Box::pin(async move {
            let mut stream = self.open(options).await?;
            let written = match stream.writer.write_all(&first).await {
                Ok(()) => stream.writer.flush().await,
                Err(e) => Err(e),
            };
            if let Err(e) = written {
                tracing::debug!(error = %e, "writing the hello failed; the read side says why");
            }
            Ok(stream)
        })
    }

    /// Human-readable name of the destination, for messages (`"local"`, `"relay@db1:22"`).
    fn describe(&self) -> String;
}

/// A boxed transport is a transport (the CLI picks local or SSH at run time).
impl<T: Transport + ?Sized> Transport for Box<T> {
    fn open(&self, options: OpenOptions) -> OpenFuture<'_> {
        (**self).open(options)
    }

    fn open_and_send(&self, options: OpenOptions, first: Bytes) -> OpenFuture<'_> {
        (**self).open_and_send(options, first)
    }

    fn describe(&self) -> String {
        (**self).describe()
    }
}
