//! Errors: bytes that are not a valid message ([`DecodeError`]) and typed refusals the agent
//! sends back ([`ErrorReply`]).

use serde::{Deserialize, Serialize};

use crate::types::{EndReason, ExitStatus, PaneKey, PtyId};

/// Why bytes could not be decoded into a message.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// The frame body is not an envelope (garbage or truncation).
    #[error("malformed envelope: {0}")]
    Envelope(#[source] postcard::Error),
    /// A complete envelope was followed by extra bytes.
    #[error("{count} trailing bytes after the envelope")]
    TrailingBytes {
        /// Number of extra bytes.
        count: usize,
    },
    /// The envelope names an op code this build does not know. The receiver should answer
    /// [`ErrorReply::Unsupported`] (for requests) and keep the connection.
    #[error("unknown op code {op:#06x}")]
    UnknownOp {
        /// The request id of the envelope, so a reply can be addressed.
        id: u64,
        /// The unknown op code.
        op: u16,
    },
    /// The op is known but its body does not decode as that op's body.
    #[error("malformed body for op {op:#06x}: {source}")]
    Body {
        /// Request id of the envelope.
        id: u64,
        /// Op code of the envelope.
        op: u16,
        /// What postcard reported.
        #[source]
        source: postcard::Error,
    },
}

/// A typed refusal from the agent, sent as the reply to a request (op
/// [`Op::Error`](crate::Op::Error)).
///
/// Append-only: new kinds are added at the end; existing kinds never change fields. An old reader
/// cannot decode a new kind, so a new kind is only sent to peers that negotiated it (capability or
/// minor version); older peers get the closest existing kind.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum ErrorReply {
    /// No lease has ever been recorded for this pane (attach never creates: rule B).
    #[error("no pane {pane} on this host; create it first")]
    NotFound {
        /// The pane asked for.
        pane: PaneKey,
    },
    /// The pane's PTY is gone. `exit` is absent when the end is proven but the status unknown
    /// (e.g. the agent restarted).
    #[error("pane {pane} ended ({reason}{}); create it again to get a new shell", exit.as_ref().map(|e| format!(", {e}")).unwrap_or_default())]
    Ended {
        /// The pane.
        pane: PaneKey,
        /// The PTY that ended.
        pty: PtyId,
        /// How it ended, when known.
        exit: Option<ExitStatus>,
        /// Why it ended.
        reason: EndReason,
    },
    /// The request named a binding the pane no longer has (rule C): another PTY is bound now, or
    /// the PTY is another incarnation.
    #[error("binding mismatch for pane {pane}: request names PTY {expected}, pane has {}; re-attach to get the current binding", current.map(|c| c.to_string()).unwrap_or_else(|| "no live PTY".into()))]
    Mismatch {
        /// The pane.
        pane: PaneKey,
        /// The PTY id the request named.
        expected: PtyId,
        /// The PTY bound to the pane now, if any.
        current: Option<PtyId>,
    },
    /// The op code is not supported by this agent (rule H); nothing was done.
    #[error("operation {op:#06x} is not supported by this agent; upgrade the agent or avoid the operation")]
    Unsupported {
        /// The op code.
        op: u16,
    },
    /// A request exceeded a limit (sizes, counts).
    #[error("{what} exceeds the limit of {limit}")]
    LimitExceeded {
        /// What was too large.
        what: String,
        /// The limit.
        limit: u64,
    },
    /// The request is malformed or inconsistent.
    #[error("bad request: {message}")]
    BadRequest {
        /// What is wrong, and how to fix it.
        message: String,
    },
    /// The PTY or process could not be started; nothing was recorded.
    #[error("could not start the pane: {message}")]
    SpawnFailed {
        /// The OS error and what to fix.
        message: String,
    },
    /// The peer's protocol version cannot be served.
    #[error("incompatible protocol: {message}")]
    Incompatible {
        /// Versions and what to upgrade.
        message: String,
    },
    /// The agent failed internally; the request may not have taken effect.
    #[error("agent error: {message}")]
    Internal {
        /// What failed.
        message: String,
    },
    // New kinds go last: the variant index is the wire's tag.
    /// A live upgrade was refused before anything was handed over (protocol 1.5); the daemon
    /// keeps serving with its current code.
    #[error("upgrade refused: {message}")]
    UpgradeRefused {
        /// Why, and what to do.
        message: String,
    },
}
