//! The connector's error type: kinds an app can match, classified for retry decisions, with
//! the underlying error kept as the source.
//!
//! A reconnect loop (the [`Host`](crate::Host) supervisor) must tell "try again" from "a retry
//! cannot fix this". [`Error::is_transient`] draws that line:
//!
//! | try again (transient) | a retry cannot fix it (permanent) |
//! |---|---|
//! | [`Error::ConnectRefused`], [`Error::ConnectTimeout`] | [`Error::HostKey`] (unknown, not accepted) |
//! | [`Error::Ssh`] (unreachable, keepalive timeout, dropped) | [`Error::Auth`] |
//! | [`Error::ConnectionLost`], [`Error::Io`] | [`Error::NoAgentBinary`] (none for the host's platform, or none locally) |
//! | [`Error::HandshakeTimeout`] (the agent did not answer the hello) | [`Error::AgentCannotRun`] (the host cannot execute it) |
//! | [`Error::BridgeExited`] (the agent bridge ended before answering) | [`Error::Incompatible`] (another protocol major) |
//! | [`Error::Deploy`] (an upload or its verification failed) | [`Error::Handshake`] (the stream is not relay: shell startup output), [`Error::Config`] |
//! | [`Error::Timeout`], [`Error::Spawn`], [`Error::InputFull`] | [`Error::HostKeyChanged`] (changed or revoked) |
//! | | [`Error::Policy`] (the agent refused the stated cleanup policy) |
//! | | [`Error::NoAgent`] (no daemon runs and the caller asked not to start one) |
//!
//! Typed refusals of the agent ([`Error::Agent`]) are answers, not failures of the link: neither
//! class applies (`is_transient()` is `false`).
//!
//! Causes are not flattened into text: the [`russh::Error`] or [`std::io::Error`] behind an
//! [`Error::Ssh`], [`Error::ConnectRefused`], [`Error::HostKey`], [`Error::Config`], ... is its
//! [`source`](std::error::Error::source), and `Display` is the connector's own sentence only
//! (the usual Rust convention, so that a reporter does not print a cause twice).
//! [`Error::report`] joins both into the line a person should see.

use relay_protocol::{DecodeError, ErrorReply};

/// An underlying error kept as the [`source`](std::error::Error::source) of an [`Error`]: a
/// [`std::io::Error`], a [`russh::Error`], a task's `JoinError`, ... Downcast it to look at the
/// cause (`err.source().and_then(|s| s.downcast_ref::<std::io::Error>())`).
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Everything that can go wrong in the connector.
///
/// Each variant is a kind an app can match on. Its `Display` is one human sentence (what happened
/// and what to do); the error it stems from, if any, is its [`source`](std::error::Error::source)
/// and not repeated in that text. Show a user [`Error::report`] (or `{:#}` of an
/// `anyhow::Error`), which appends the causes: `ssh: cannot connect to h:22: Connection refused
/// (os error 111)`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The agent refused the request with a typed error (not found, ended, mismatch, ...): an
    /// answer, not a failure of the link. Decide on the reply ([`Error::agent_reply`],
    /// [`Error::is_not_found`], ...). Boxed to keep `Result<_, Error>` small on the keystroke
    /// path.
    #[error(transparent)]
    Agent(Box<ErrorReply>),
    /// The connection to the agent is gone (EOF, reset, bridge exited, declared dead by the
    /// heartbeat). Nothing on the host is known to have changed (rule A): reconnect and
    /// re-attach. The source is the IO error that ended the stream, when one did.
    #[error("connection to the agent lost: {message}")]
    ConnectionLost {
        /// Why, and on which destination.
        message: String,
        /// The IO error that ended the stream, if one did.
        #[source]
        source: Option<BoxError>,
    },
    /// The agent's first reply was not a relay welcome (e.g. a shell startup file printed text
    /// into the stream), or it refused the hello. The message says what to fix (usually: make
    /// the shell startup files print nothing for non-interactive shells). Not transient.
    #[error("handshake failed: {0}")]
    Handshake(String),
    /// The agent did not answer the hello in time (a slow or frozen host). Transient: try again.
    #[error("handshake timed out: {0}")]
    HandshakeTimeout(String),
    /// The agent bridge ended before answering the hello; the message quotes its exit status and
    /// what it printed, the source is the IO error reading the stream, if any. Transient (a
    /// daemon that was starting, a host that was going down).
    #[error("the agent bridge exited: {message}")]
    BridgeExited {
        /// The bridge's exit status and output.
        message: String,
        /// The IO error reading the welcome, if any.
        #[source]
        source: Option<BoxError>,
    },
    /// The peer sent bytes that are not a valid message (the source says how). A bug or a
    /// corrupted stream: reconnecting resets it.
    #[error("protocol error")]
    Protocol(#[from] DecodeError),
    /// The agent answered with a reply of the wrong kind (a bug in the agent or the connector).
    #[error("unexpected reply: {0}")]
    UnexpectedReply(String),
    /// The agent did not advertise the capability this operation needs (rule H): upgrade the
    /// agent.
    #[error("the agent does not support {0}; upgrade the agent")]
    Unsupported(String),
    /// Starting the local agent bridge failed: the process could not be spawned (the source is
    /// the IO error). Transient (e.g. a binary being replaced).
    #[error("cannot start the agent: {message}")]
    Spawn {
        /// What could not be started.
        message: String,
        /// Why, usually a [`std::io::Error`].
        #[source]
        source: Option<BoxError>,
    },
    /// There is no agent binary to run or deploy: none found locally, or none built for the
    /// host's platform, or the local one is not a valid executable (then the source says why).
    /// The message lists where it looked and how to provide one. A retry cannot fix it.
    #[error("no agent binary: {message}")]
    NoAgentBinary {
        /// Where it looked and how to provide one.
        message: String,
        /// Why a binary found is not usable, if that is the cause.
        #[source]
        source: Option<BoxError>,
    },
    /// The host cannot run the agent binary (wrong platform or C library, `noexec` home, no
    /// sha256 tool). The message names the cause and the fix; a retry cannot fix it.
    #[error("the agent cannot run on the host: {0}")]
    AgentCannotRun(String),
    /// The TCP connection to the SSH server was refused (nothing listens on the port, or a
    /// firewall rejects it). The source is the [`std::io::Error`] (kind
    /// [`ConnectionRefused`](std::io::ErrorKind::ConnectionRefused)). Transient: sshd may be
    /// restarting; check the host and port if it persists.
    #[error("ssh: {message}")]
    ConnectRefused {
        /// Which address was refused.
        message: String,
        /// The refusal.
        #[source]
        source: std::io::Error,
    },
    /// Connecting to the SSH server (TCP and the SSH handshake) took longer than `ConnectTimeout`
    /// (ssh_config) or [`SshOptions::connect_timeout`](crate::ssh::SshOptions::connect_timeout).
    /// Transient: the host may be down or the network partitioned.
    #[error("ssh: {0}")]
    ConnectTimeout(String),
    /// Another SSH-level failure that retrying might fix (cannot resolve or reach the host, the
    /// connection dropped, keepalive timeout, a channel refused). The source is the
    /// [`russh::Error`] or [`std::io::Error`] when there is one.
    #[error("ssh: {message}")]
    Ssh {
        /// What was being done.
        message: String,
        /// The russh or IO error, if any.
        #[source]
        source: Option<BoxError>,
    },
    /// The host key is unknown (not in known_hosts, and not accepted), or known_hosts could not
    /// be read or written (then the source is the IO or parse error); retrying cannot fix it.
    /// Accepting the key (`--accept-new`, or a yes from the
    /// [`HostKeyPrompt`](crate::ssh::HostKeyPrompt)) can, after checking its fingerprint.
    #[error("host key: {message}")]
    HostKey {
        /// The fingerprint and files, or the file that could not be used.
        message: String,
        /// The IO or parse error of a known_hosts file, if that is the cause.
        #[source]
        source: Option<BoxError>,
    },
    /// The host presents a key other than the one known_hosts records for it, or a key marked
    /// `@revoked`; retrying cannot fix it and nobody is asked (as OpenSSH refuses a changed key
    /// even under `StrictHostKeyChecking=accept-new`). The message names the file and line: if
    /// the change is expected, remove that line.
    #[error("host key: {0}")]
    HostKeyChanged(String),
    /// The server refused every authentication method tried (keys from ssh-agent, identity
    /// files). The message names the user, the keys tried and the methods the server accepts;
    /// retrying cannot fix it: add the right key to ssh-agent or pass it with `-i`.
    #[error("authentication failed: {0}")]
    Auth(String),
    /// ssh configuration could not be read or resolved (a bad destination, `ssh -G` failing, an
    /// unreadable config file, no common algorithm with the server, a ProxyCommand that cannot
    /// start). The source is the underlying error when there is one. Fix the configuration.
    #[error("ssh config: {message}")]
    Config {
        /// What is wrong and where.
        message: String,
        /// The IO, parse or russh error, if any.
        #[source]
        source: Option<BoxError>,
    },
    /// Deploying the agent to the host failed (reading the local binary, upload, verification);
    /// a retry may succeed. The source is the underlying error when there is one.
    #[error("deploy: {message}")]
    Deploy {
        /// What failed and how to check the host.
        message: String,
        /// The IO or task error, if any.
        #[source]
        source: Option<BoxError>,
    },
    /// Local IO failed; the source is the [`std::io::Error`]. Transient.
    #[error("io")]
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
    /// send to any more. Open or attach the pane again.
    #[error("pane gone: {0}")]
    PaneGone(String),
    /// The [`Host`](crate::Host) stopped for good ([`HostState::Failed`](crate::HostState)) or
    /// was closed. Its failure says why; open a new one after fixing it.
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
            Error::ConnectionLost { .. }
                | Error::HandshakeTimeout(_)
                | Error::BridgeExited { .. }
                | Error::ConnectRefused { .. }
                | Error::ConnectTimeout(_)
                | Error::Ssh { .. }
                | Error::Io(_)
                | Error::Spawn { .. }
                | Error::Deploy { .. }
                | Error::Timeout(_)
                | Error::InputFull(_)
        )
    }

    /// The text to show a person: this error's message followed by each cause in its
    /// [`source`](std::error::Error::source) chain, joined by `": "` (like `{:#}` of an
    /// `anyhow::Error`, but a cause whose text the message already ends with is not repeated).
    /// `Display` alone leaves the causes out.
    pub fn report(&self) -> String {
        report(self)
    }

    /// [`Error::ConnectionLost`] without a source.
    pub fn connection_lost(message: impl Into<String>) -> Self {
        Error::ConnectionLost {
            message: message.into(),
            source: None,
        }
    }

    /// [`Error::BridgeExited`] without a source.
    pub fn bridge_exited(message: impl Into<String>) -> Self {
        Error::BridgeExited {
            message: message.into(),
            source: None,
        }
    }

    /// [`Error::Spawn`] without a source.
    pub fn spawn(message: impl Into<String>) -> Self {
        Error::Spawn {
            message: message.into(),
            source: None,
        }
    }

    /// [`Error::NoAgentBinary`] without a source.
    pub fn no_agent_binary(message: impl Into<String>) -> Self {
        Error::NoAgentBinary {
            message: message.into(),
            source: None,
        }
    }

    /// [`Error::Ssh`] without a source.
    pub fn ssh(message: impl Into<String>) -> Self {
        Error::Ssh {
            message: message.into(),
            source: None,
        }
    }

    /// [`Error::HostKey`] without a source.
    pub fn host_key(message: impl Into<String>) -> Self {
        Error::HostKey {
            message: message.into(),
            source: None,
        }
    }

    /// [`Error::Config`] without a source.
    pub fn config(message: impl Into<String>) -> Self {
        Error::Config {
            message: message.into(),
            source: None,
        }
    }

    /// [`Error::Deploy`] without a source.
    pub fn deploy(message: impl Into<String>) -> Self {
        Error::Deploy {
            message: message.into(),
            source: None,
        }
    }

    /// Sets the cause of a variant that carries an optional `source` (built by [`Error::ssh`],
    /// [`Error::config`], ...); other variants are returned unchanged.
    pub(crate) fn caused_by(mut self, cause: impl Into<BoxError>) -> Self {
        match &mut self {
            Error::ConnectionLost { source, .. }
            | Error::BridgeExited { source, .. }
            | Error::Spawn { source, .. }
            | Error::NoAgentBinary { source, .. }
            | Error::Ssh { source, .. }
            | Error::HostKey { source, .. }
            | Error::Config { source, .. }
            | Error::Deploy { source, .. } => *source = Some(cause.into()),
            other => debug_assert!(false, "{other:?} carries no source"),
        }
        self
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
        matches!(self, Error::ConnectionLost { .. })
    }

    /// The agent's typed refusal, if this is one.
    pub fn agent_reply(&self) -> Option<&ErrorReply> {
        match self {
            Error::Agent(e) => Some(e.as_ref()),
            _ => None,
        }
    }
}

/// The text to show a person for any error: its message followed by each cause of its
/// [`source`](std::error::Error::source) chain, joined by `": "`, skipping a cause whose text
/// the text so far already ends with (some errors repeat their source in their own message).
/// [`Error::report`] is this for the connector's errors; the CLI prints its `anyhow` errors with
/// it.
pub fn report(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut next = error.source();
    while let Some(cause) = next {
        let part = cause.to_string();
        if !part.is_empty() && !text.ends_with(&part) {
            if !text.is_empty() {
                text.push_str(": ");
            }
            text.push_str(&part);
        }
        next = cause.source();
    }
    text
}

impl From<ErrorReply> for Error {
    fn from(e: ErrorReply) -> Self {
        Error::Agent(Box::new(e))
    }
}

#[cfg(test)]
mod tests;
