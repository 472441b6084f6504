//! The connector's error type, classified for retry decisions.
//!
//! A reconnect loop (the [`Host`](crate::Host) supervisor) must tell "try again" from "a retry
//! cannot fix this". [`Error::is_transient`] draws that line:
//!
//! | try again (transient) | a retry cannot fix it (permanent) |
//! |---|---|
//! | [`Error::Ssh`] (connect refused or timed out, keepalive timeout, dropped) | [`Error::HostKey`] (unknown, not accepted) |
//! | [`Error::ConnectionLost`], [`Error::Io`] | [`Error::Auth`] |
//! | [`Error::HandshakeTimeout`] (the agent did not answer the hello) | [`Error::NoAgentBinary`] (none for the host's platform, or none locally) |
//! | [`Error::BridgeExited`] (the agent bridge ended before answering) | [`Error::AgentCannotRun`] (the host cannot execute it) |
//! | [`Error::Deploy`] (an upload or its verification failed) | [`Error::Incompatible`] (another protocol major) |
//! | [`Error::Timeout`], [`Error::Spawn`] | [`Error::Handshake`] (the stream is not relay: shell startup output), [`Error::Config`] |
//! | | [`Error::HostKeyChanged`] (changed or revoked) |
//! | | [`Error::Policy`] (the agent refused the stated cleanup policy) |
//! | | [`Error::NoAgent`] (no daemon runs and the caller asked not to start one) |
//!
//! Typed refusals of the agent ([`Error::Agent`]) are answers, not failures of the link: neither
//! class applies (`is_transient()` is `false`).

use relay_protocol::{DecodeError, ErrorReply};

/// Everything that can go wrong in the connector.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The agent refused the request with a typed error (not found, ended, mismatch, ...).
    /// Boxed to keep `Result<_, Error>` small on the keystroke path.
    #[error(transparent)]
    Agent(Box<ErrorReply>),
    /// The connection to the agent is gone (EOF, reset, bridge exited, declared dead by the
    /// heartbeat). Nothing on the host is known to have changed (rule A): reconnect and
    /// re-attach.
    #[error("connection to the agent lost: {0}")]
    ConnectionLost(String),
    /// The agent's first reply was not a relay welcome (e.g. a shell startup file printed text
    /// into the stream), or it refused the hello. The message says what to fix.
    #[error("handshake failed: {0}")]
    Handshake(String),
    /// The agent did not answer the hello in time (a slow or frozen host). Transient.
    #[error("handshake timed out: {0}")]
    HandshakeTimeout(String),
    /// The agent bridge ended before answering the hello; the message quotes its exit status and
    /// what it printed. Transient (a daemon that was starting, a host that was going down).
    #[error("the agent bridge exited: {0}")]
    BridgeExited(String),
    /// The peer sent bytes that are not a valid message.
    #[error("protocol error: {0}")]
    Protocol(#[from] DecodeError),
    /// The agent answered with a reply of the wrong kind.
    #[error("unexpected reply: {0}")]
    UnexpectedReply(String),
    /// The agent did not advertise the capability this operation needs (rule H).
    #[error("the agent does not support {0}; upgrade the agent")]
    Unsupported(String),
    /// Starting the local agent bridge failed (the process could not be spawned).
    #[error("cannot start the agent: {0}")]
    Spawn(String),
    /// There is no agent binary to run or deploy: none found locally, or none built for the
    /// host's platform. The message lists where it looked and how to provide one.
    #[error("no agent binary: {0}")]
    NoAgentBinary(String),
    /// The host cannot run the agent binary (wrong platform or C library, `noexec` home). The
    /// message names the cause and the fix.
    #[error("the agent cannot run on the host: {0}")]
    AgentCannotRun(String),
    /// SSH-level failure that retrying might fix (connect refused, timeout, dropped, keepalive).
    #[error("ssh: {0}")]
    Ssh(String),
    /// The host key is unknown (not in known_hosts, and not accepted), or known_hosts could not
    /// be read or written; retrying cannot fix it. Accepting the key (`--accept-new`, or a yes
    /// from the [`HostKeyPrompt`](crate::ssh::HostKeyPrompt)) can.
    #[error("host key: {0}")]
    HostKey(String),
    /// The host presents a key other than the one known_hosts records for it, or a key marked
    /// `@revoked`; retrying cannot fix it and nobody is asked (as OpenSSH refuses a changed key
    /// even under `StrictHostKeyChecking=accept-new`). The message names the file and line.
    #[error("host key: {0}")]
    HostKeyChanged(String),
    /// Authentication failed; retrying cannot fix it.
    #[error("authentication failed: {0}")]
    Auth(String),
    /// ssh configuration could not be read or resolved.
    #[error("ssh config: {0}")]
    Config(String),
    /// Deploying the agent to the host failed (upload, verification); a retry may succeed.
    #[error("deploy: {0}")]
    Deploy(String),
    /// Local IO failed.
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
    /// The agent refused the cleanup policy the connection stated
    /// ([`ConnectOptions::policy`](crate::session::ConnectOptions::policy),
    /// [`HostOptions::policy`](crate::HostOptions::policy)); a retry cannot fix it. The message
    /// quotes the policy and the agent's words naming the condition or value to fix.
    #[error("cleanup policy refused: {0}")]
    Policy(String),
    /// No agent daemon runs on the host and the connection was opened without starting one
    /// ([`ConnectOptions::start_agent`](crate::session::ConnectOptions::start_agent) off, as
    /// `relayctl` does). Not transient: only something that starts an agent (`relay`, an app)
    /// changes it. The message is `no agent running on <destination>`.
    #[error("{0}")]
    NoAgent(String),
    /// The agent speaks another protocol major version (rule H). The message says which versions
    /// and what to upgrade.
    #[error("incompatible agent: {0}")]
    Incompatible(String),
    /// The agent did not answer a request within the session's request timeout (see
    /// [`Session::with_request_timeout`](crate::Session::with_request_timeout)). The agent may be
    /// stopped or overloaded; the request may still take effect later (rule A: unknown, not
    /// failed). The message names the request, the destination and the bound.
    #[error("{0}")]
    Timeout(String),
    /// Queued input for a pane is over its bound while the pane waits for its connection
    /// (see [`InputWriter`](crate::InputWriter)): nothing of it was queued. Retry once the host
    /// is connected again.
    #[error("input refused: {0}")]
    InputFull(String),
    /// The pane's stream has ended (exited, ended, mismatch or detached): there is nothing to
    /// send to any more.
    #[error("pane gone: {0}")]
    PaneGone(String),
    /// The [`Host`](crate::Host) stopped for good ([`HostState::Failed`](crate::HostState)) or
    /// was closed.
    #[error("{0}")]
    HostDown(String),
}

impl Error {
    /// Whether retrying later may succeed (the link or the host's state may change) as opposed
    /// to errors a retry cannot fix (host key, authentication, no agent for the platform, an
    /// agent that cannot run, an incompatible protocol, configuration) and the agent's own
    /// typed answers. See the module docs for the table.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            Error::ConnectionLost(_)
                | Error::HandshakeTimeout(_)
                | Error::BridgeExited(_)
                | Error::Ssh(_)
                | Error::Io(_)
                | Error::Spawn(_)
                | Error::Deploy(_)
                | Error::Timeout(_)
                | Error::InputFull(_)
        )
    }

    /// Whether no agent daemon runs and none was to be started ([`Error::NoAgent`]).
    pub fn is_no_agent(&self) -> bool {
        matches!(self, Error::NoAgent(_))
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

    /// Whether the agent refused because a limit was reached ([`ErrorReply::LimitExceeded`]),
    /// e.g. the PTY's input queue is full because the program does not read.
    pub fn is_limit_exceeded(&self) -> bool {
        matches!(self.agent_reply(), Some(ErrorReply::LimitExceeded { .. }))
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The retry table of the module docs, row by row: a reconnect loop keeps trying exactly the
    /// transient ones.
    #[test]
    fn retry_classes_follow_the_table() {
        let s = || "x".to_string();
        let transient = [
            Error::ConnectionLost(s()),
            Error::HandshakeTimeout(s()),
            Error::BridgeExited(s()),
            Error::Ssh(s()),
            Error::Io(std::io::Error::other("x")),
            Error::Spawn(s()),
            Error::Deploy(s()),
            Error::Timeout(s()),
        ];
        let permanent = [
            Error::HostKey(s()),
            Error::HostKeyChanged(s()),
            Error::Auth(s()),
            Error::NoAgentBinary(s()),
            Error::AgentCannotRun(s()),
            Error::Incompatible(s()),
            Error::Handshake(s()),
            Error::Config(s()),
            Error::Policy(s()),
            Error::NoAgent(s()),
            Error::from(ErrorReply::BadRequest { message: s() }),
        ];
        for e in &transient {
            assert!(e.is_transient(), "{e:?} should be retried");
        }
        for e in &permanent {
            assert!(!e.is_transient(), "{e:?} cannot be fixed by a retry");
        }
    }
}
