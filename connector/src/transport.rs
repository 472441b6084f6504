//! Transports: how the connector reaches an agent bridge's byte stream.
//!
//! A transport yields one [`AgentStream`]: a reader and writer that carry relay frames to and from
//! `relay-agent bridge` (and through it, the agent daemon). The session layer does not know whether
//! the bytes go through a local child process or an SSH exec channel.

use std::any::Any;
use std::future::Future;
use std::pin::Pin;

use tokio::io::{AsyncRead, AsyncWrite};

use crate::Error;

/// Boxed reader half of an agent stream.
pub type BoxReader = Pin<Box<dyn AsyncRead + Send>>;
/// Boxed writer half of an agent stream.
pub type BoxWriter = Pin<Box<dyn AsyncWrite + Send>>;
/// Boxed future returned by [`Transport::open`].
pub type OpenFuture<'a> = Pin<Box<dyn Future<Output = Result<AgentStream, Error>> + Send + 'a>>;

/// A byte stream to an agent, plus whatever must stay alive while it is used.
pub struct AgentStream {
    /// Frames from the agent.
    pub reader: BoxReader,
    /// Frames to the agent.
    pub writer: BoxWriter,
    /// Resources owned by the stream (a child process, an SSH session, ...). Dropped when the
    /// session ends; dropping it must close the stream but never touch the agent daemon.
    pub guard: Box<dyn Any + Send>,
}

/// Opens streams to one host's agent.
pub trait Transport: Send + Sync + 'static {
    /// Opens a new stream (deploying or starting the agent if the transport does that).
    ///
    /// # Errors
    /// [`Error`] describing why the agent could not be reached; see [`Error::is_transient`].
    fn open(&self) -> OpenFuture<'_>;

    /// Human-readable name of the destination, for messages (`"local"`, `"relay@db1:22"`).
    fn describe(&self) -> String;
}
