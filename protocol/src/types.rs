//! Identities and records shared by several messages.
//!
//! Every type here is part of the wire format and is nested inside message bodies (or repeated in
//! lists), so its shape is frozen: no field may be added, removed, reordered or retyped, because
//! an old reader would take appended bytes for the next field. Enum variants may only be appended,
//! and only sent to peers that negotiated them. A changed record is a new type carried by a new op
//! code (see `docs/protocol.md`, "Compatibility").

use std::fmt;

use serde::{Deserialize, Serialize};

/// Identifies one workspace of the app on one host (the app's worktree), e.g. `"api-server"`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct WorkspaceId(pub String);

impl fmt::Display for WorkspaceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The app's stable identity of one terminal surface: `(workspace, tab, leaf)`.
///
/// Printed as `workspace/tab/leaf`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct PaneKey {
    /// Workspace the pane belongs to.
    pub workspace: WorkspaceId,
    /// Tab inside the workspace.
    pub tab: String,
    /// Leaf of the tab's split tree.
    pub leaf: String,
}

impl PaneKey {
    /// Builds a pane key from its three parts.
    pub fn new(
        workspace: impl Into<String>,
        tab: impl Into<String>,
        leaf: impl Into<String>,
    ) -> Self {
        PaneKey {
            workspace: WorkspaceId(workspace.into()),
            tab: tab.into(),
            leaf: leaf.into(),
        }
    }
}

impl fmt::Display for PaneKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}", self.workspace, self.tab, self.leaf)
    }
}

/// Random id of one agent daemon start. A restarted daemon has a new incarnation, so PTY ids of
/// different daemon lifetimes never collide.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Incarnation(pub u64);

impl fmt::Display for Incarnation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

/// Agent-minted id of one PTY incarnation: `(agent incarnation, counter)`. Never reused.
///
/// Printed as `<incarnation hex>.<counter>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct PtyId {
    /// Incarnation of the daemon that created the PTY.
    pub incarnation: Incarnation,
    /// Per-incarnation counter, starting at 1.
    pub counter: u64,
}

impl fmt::Display for PtyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.incarnation, self.counter)
    }
}

impl std::str::FromStr for PtyId {
    type Err = ParsePtyIdError;

    /// Parses the printed form `<incarnation hex>.<counter>` (as `relayctl leases` shows it).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let parsed = s.split_once('.').and_then(|(inc, counter)| {
            Some(PtyId {
                incarnation: Incarnation(u64::from_str_radix(inc, 16).ok()?),
                counter: counter.parse().ok()?,
            })
        });
        parsed.ok_or_else(|| ParsePtyIdError(s.to_string()))
    }
}

/// A string that is not a PTY id (`<incarnation hex>.<counter>`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a PTY id (`<incarnation hex>.<counter>`, as `relayctl leases` prints it)")]
pub struct ParsePtyIdError(pub String);

/// What a mutation names: the pane key and the exact PTY the caller believes it holds (rule C).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Binding {
    /// The pane.
    pub pane: PaneKey,
    /// The PTY incarnation the caller saw bound to that pane.
    pub pty: PtyId,
}

impl fmt::Display for Binding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}", self.pane, self.pty)
    }
}

/// Terminal size in character cells (columns × rows).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TermSize {
    /// Columns.
    pub cols: u16,
    /// Rows.
    pub rows: u16,
}

impl Default for TermSize {
    fn default() -> Self {
        TermSize { cols: 80, rows: 24 }
    }
}

/// What to run in a new PTY.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct SpawnSpec {
    /// Program and arguments; empty means the user's login shell (from the passwd entry).
    pub command: Vec<String>,
    /// Working directory; `None` means the user's home. A directory that does not exist is an
    /// error ([`ErrorReply::SpawnFailed`](crate::ErrorReply::SpawnFailed)), never a silent fallback.
    pub cwd: Option<String>,
    /// Value of `TERM` for the process; `None` means `xterm-256color`.
    pub term: Option<String>,
    /// Initial size.
    pub size: TermSize,
    /// Extra environment variables, applied after the agent's own.
    pub env: Vec<(String, String)>,
}

/// How a PTY's process ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExitStatus {
    /// Exit code (for a signal death this is what the OS reported, usually 1).
    pub code: u32,
    /// Name of the signal that ended the process (`"Hangup"`, `"Killed"`, ...), if any.
    pub signal: Option<String>,
}

impl fmt::Display for ExitStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.signal {
            Some(sig) => write!(f, "signal {sig}"),
            None => write!(f, "exit {}", self.code),
        }
    }
}

/// Why a lease ended. Recorded on the lease and kept after the PTY is gone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum EndReason {
    /// The process exited by itself (or because of a signal nobody in relay sent).
    Exited,
    /// A `Kill` request ended it.
    Killed,
    /// The daemon that owned it stopped; the PTY cannot have survived (proven dead).
    AgentRestarted,
    /// The lifecycle policy ended a detached PTY after re-verifying it (unused past its grace,
    /// idle expiry, or superseded); the lease's detail names the rule.
    Expired,
    /// The agent no longer keeps this lease's record (ended-lease history is bounded, or an
    /// operator ran `relayctl forget`): the PTY is known not to run here, its exit is unknown
    /// (protocol 1.4; sent only to peers with capability `lifecycle`, older peers read `Exited`).
    Forgotten,
}

impl fmt::Display for EndReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            EndReason::Exited => "exited",
            EndReason::Killed => "killed",
            EndReason::AgentRestarted => "agent restarted",
            EndReason::Expired => "expired",
            EndReason::Forgotten => "forgotten",
        })
    }
}

/// State of a lease (DESIGN §2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum LeaseState {
    /// At least one live connection is attached.
    Attached,
    /// No connection is attached; the PTY is alive.
    Detached,
    /// The PTY is gone; reason and exit status are kept.
    Ended,
    /// A newer binding replaced this one for the pane; the process was not killed by that.
    Superseded,
}

impl fmt::Display for LeaseState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LeaseState::Attached => "attached",
            LeaseState::Detached => "detached",
            LeaseState::Ended => "ended",
            LeaseState::Superseded => "superseded",
        })
    }
}

/// One row of `relayctl leases`: everything the agent knows about one lease.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseInfo {
    /// The binding this lease records.
    pub binding: Binding,
    /// State now.
    pub state: LeaseState,
    /// Process id of the PTY's child (the shell), while it runs or was known.
    pub pid: Option<u32>,
    /// When the lease entered `state`, in milliseconds since the Unix epoch.
    pub since_ms: u64,
    /// When the PTY last produced output, in milliseconds since the Unix epoch.
    pub last_output_ms: Option<u64>,
    /// Total bytes the PTY has produced (the current end offset).
    pub bytes_out: u64,
    /// Command line that was started.
    pub command: Vec<String>,
    /// Exit status, once ended (absent when the end is known but the status is not, e.g. after an
    /// agent restart).
    pub exit: Option<ExitStatus>,
    /// Why it ended, once ended.
    pub reason: Option<EndReason>,
    /// Exempt from lifecycle expiry.
    pub protected: bool,
    /// Number of connections attached now.
    pub attached: u32,
    /// Current size.
    pub size: TermSize,
}

/// Where a screen-aware attach starts (capability `screen`, protocol 1.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Resume {
    /// Only output produced from now on; no replay, no snapshot.
    Now,
    /// Bytes from this offset if the agent still holds them all, else a snapshot of the screen
    /// and bytes from the snapshot's offset (never a gap: rule E).
    From(u64),
    /// A snapshot of the screen now, then bytes from its offset (for a client with no screen
    /// state, e.g. a new terminal window or an app after its own restart).
    Snapshot,
}

/// Something a program did that is not screen content, delivered as a typed event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ScreenEvent {
    /// BEL (0x07) outside a string sequence.
    Bell,
    /// Window title set by OSC 0 or OSC 2 (invalid UTF-8 replaced by U+FFFD).
    Title(String),
    /// Working directory reported by OSC 7, as given (usually `file://host/path`).
    Cwd(String),
    /// A command finished (OSC 133;D of the FinalTerm/iTerm2 shell-integration marks), with its
    /// exit code when the shell reported one.
    CommandFinished {
        /// Exit code, if reported.
        exit_code: Option<i32>,
    },
}
