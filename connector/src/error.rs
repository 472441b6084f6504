//! The connector's error type.

use relay_protocol::{DecodeError, ErrorReply};

/// Everything that can go wrong in the connector.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The agent refused the request with a typed error (not found, ended, mismatch, ...).
    /// Boxed to keep `Result<_, Error>` small on the keystroke path.
    #[error(transparent)]
    Agent(Box<ErrorReply>),
    /// The connection to the agent is gone (EOF, reset, bridge exited). Nothing on the host is
    /// known to have changed (rule A): reconnect and re-attach.
    #[error("connection to the agent lost: {0}")]
    ConnectionLost(String),
    /// The agent's first reply was not a relay welcome (e.g. a shell banner was printed into the
    /// stream), or its protocol major version differs.
    #[error("handshake failed: {0}")]
    Handshake(String),
    /// The peer sent bytes that are not a valid message.
    #[error("protocol error: {0}")]
    Protocol(#[from] DecodeError),
    /// The agent answered with a reply of the wrong kind.
    #[error("unexpected reply: {0}")]
    UnexpectedReply(String),
    /// The agent did not advertise the capability this operation needs (rule H).
    #[error("the agent does not support {0}; upgrade the agent")]
    Unsupported(String),
    /// Starting or reaching the agent failed (spawn of the bridge, missing binary, ...).
    #[error("cannot start the agent: {0}")]
    Spawn(String),
    /// SSH-level failure that retrying might fix (connect refused, timeout, dropped).
    #[error("ssh: {0}")]
    Ssh(String),
    /// The host key is unknown or changed; retrying cannot fix it.
    #[error("host key: {0}")]
    HostKey(String),
    /// Authentication failed; retrying cannot fix it.
    #[error("authentication failed: {0}")]
    Auth(String),
    /// ssh configuration could not be read or resolved.
    #[error("ssh config: {0}")]
    Config(String),
    /// Deploying the agent to the host failed.
    #[error("deploy: {0}")]
    Deploy(String),
    /// Local IO failed.
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
    /// The agent speaks another protocol major version (rule H). The message says which versions
    /// and what to upgrade.
    #[error("incompatible agent: {0}")]
    Incompatible(String),
    /// The requested feature is not available in this build of the connector (e.g. an SSH
    /// destination before the SSH transport exists).
    #[error("{0}")]
    Unavailable(String),
    /// The agent did not answer a request within the session's request timeout (see
    /// [`Session::with_request_timeout`](crate::Session::with_request_timeout)). The agent may be
    /// stopped or overloaded; the request may still take effect later (rule A: unknown, not
    /// failed). The message names the request, the destination and the bound.
    #[error("{0}")]
    Timeout(String),
}

impl Error {
    /// Whether retrying later may succeed (connection problems) as opposed to errors a retry cannot
    /// fix (host key, authentication, configuration, typed refusals).
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            Error::ConnectionLost(_)
                | Error::Ssh(_)
                | Error::Io(_)
                | Error::Spawn(_)
                | Error::Timeout(_)
        )
    }

    /// Whether a request timed out ([`Error::Timeout`]): the agent did not answer in time.
    pub fn is_timeout(&self) -> bool {
        matches!(self, Error::Timeout(_))
    }

    /// Whether the agent answered that the pane has never existed ([`ErrorReply::NotFound`]).
    pub fn is_not_found(&self) -> bool {
        matches!(self.agent_reply(), Some(ErrorReply::NotFound { .. }))
    }

    /// Whether the agent answered that the pane's PTY has ended ([`ErrorReply::Ended`]).
    pub fn is_ended(&self) -> bool {
        matches!(self.agent_reply(), Some(ErrorReply::Ended { .. }))
    }

    /// Whether the agent rejected a stale binding ([`ErrorReply::Mismatch`], rule C).
    pub fn is_mismatch(&self) -> bool {
        matches!(self.agent_reply(), Some(ErrorReply::Mismatch { .. }))
    }

    /// Whether the connection to the agent is gone ([`Error::ConnectionLost`]).
    pub fn is_connection_lost(&self) -> bool {
        matches!(self, Error::ConnectionLost(_))
    }

    /// The agent's typed refusal, if this is one.
    pub fn agent_reply(&self) -> Option<&ErrorReply> {
        match self {
            Error::Agent(e) => Some(e.as_ref()),
            _ => None,
        }
    }
}

impl From<ErrorReply> for Error {
    fn from(e: ErrorReply) -> Self {
        Error::Agent(Box::new(e))
    }
}
