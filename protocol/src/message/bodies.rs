//! The body of every message: one struct per op code, fields in wire order (see
//! `docs/protocol.md` §5). Shapes are frozen once released; a changed body is a new struct under a
//! new op code.

use serde::{Deserialize, Serialize};

use crate::types::{
    Binding, EndReason, ExitStatus, Incarnation, LeaseInfo, PaneKey, PtyId, Resume, ScreenEvent,
    SpawnSpec, TermSize, WorkspaceId,
};

/// Keep-alive probe; the agent answers [`Pong`] with the same nonce.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ping {
    /// Echoed back.
    pub nonce: u64,
}

/// Answer to [`Ping`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pong {
    /// The ping's nonce.
    pub nonce: u64,
}

/// Create a PTY for a pane, or return the live one (idempotent; rule D). With [`Open`], the only
/// op that spawns.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Create {
    /// The pane.
    pub pane: PaneKey,
    /// What to run if a new PTY is needed. Ignored when the pane already has a live PTY.
    pub spec: SpawnSpec,
}

/// Answer to [`Create`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Created {
    /// The pane's live binding.
    pub binding: Binding,
    /// `true` when the pane already had a live PTY and nothing was spawned.
    pub existed: bool,
}

/// Subscribe this connection to a pane's output. Never spawns (rule B).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attach {
    /// The pane.
    pub pane: PaneKey,
    /// When set, the pane's PTY must be this one, else
    /// [`ErrorReply::Mismatch`](crate::ErrorReply::Mismatch) (used after reconnect so keystrokes
    /// reach the same shell as before).
    pub expect: Option<PtyId>,
    /// Output offset to resume from (bytes since the PTY was created). `None` means "from now":
    /// no replay. Replay starts at the oldest byte still held when this is older.
    pub resume_from: Option<u64>,
}

/// Answer to [`Attach`]. Output pushes follow from `replay_from` on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attached {
    /// The pane's live binding.
    pub binding: Binding,
    /// Offset of the first byte the following output pushes carry.
    pub replay_from: u64,
    /// Offset of the end of output at attach time.
    pub end_offset: u64,
    /// Bytes between `resume_from` and `replay_from` that the agent no longer holds (never a
    /// silent jump: rule E). Zero when nothing was lost.
    pub lost: u64,
    /// Current size.
    pub size: TermSize,
}

/// Create-or-attach in one step (capability `open`, protocol 1.1): under the pane's create gate,
/// spawn `spec` if the pane has no live PTY (exactly as [`Create`], rule D), then subscribe this
/// connection to the pane's PTY (as [`Attach`] with no `expect`). No output and no exit can fall
/// between the two, so even a command that ends at once is seen whole with `resume_from: Some(0)`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Open {
    /// The pane.
    pub pane: PaneKey,
    /// What to run if a new PTY is needed. Ignored when the pane already has a live PTY, which is
    /// attached instead (never respawned).
    pub spec: SpawnSpec,
    /// Output offset to replay from, as in [`Attach::resume_from`]. `Some(0)` delivers the whole
    /// output of a new PTY.
    pub resume_from: Option<u64>,
}

/// Answer to [`Open`]. Output pushes follow from `attached.replay_from` on, then `Exited` once
/// the PTY ends (also when it ended before this reply went out).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Opened {
    /// The pane's binding; `existed: true` when nothing was spawned.
    pub created: Created,
    /// The subscription, as an [`Attached`] reply would describe it.
    pub attached: Attached,
}

/// Attach with screen restore (capability `screen`, protocol 1.3): like [`Attach`], but a reader
/// that fell behind what the agent holds gets a [`Snapshot`] of the screen instead of a gap, and
/// the pane's typed [`Event`]s after `events_after` are delivered. From then on this subscription
/// never sends [`OutputGap`]: when the connection falls behind the ring it gets a new snapshot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttachScreen {
    /// The pane.
    pub pane: PaneKey,
    /// When set, the pane's PTY must be this one, else
    /// [`ErrorReply::Mismatch`](crate::ErrorReply::Mismatch).
    pub expect: Option<PtyId>,
    /// Where output starts (bytes from an offset, or a snapshot).
    pub resume: Resume,
    /// Deliver the pane's events whose key is above this (0: every event the agent still holds).
    pub events_after: u64,
}

/// Answer to [`AttachScreen`]. When `snapshot` is set, [`Snapshot`] pushes carrying the offset
/// `attached.replay_from` come first; output pushes follow from `attached.replay_from` on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScreenAttached {
    /// The subscription. `lost` counts the bytes after the requested offset that are not sent as
    /// bytes (a snapshot stands for them when `snapshot` is set).
    pub attached: Attached,
    /// Whether a snapshot precedes the output.
    pub snapshot: bool,
}

/// Create-or-attach with screen restore (capability `screen`, protocol 1.3): [`Open`] whose
/// subscription is that of [`AttachScreen`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpenScreen {
    /// The pane.
    pub pane: PaneKey,
    /// What to run if a new PTY is needed (ignored when the pane has a live PTY).
    pub spec: SpawnSpec,
    /// Where output starts; `Resume::From(0)` delivers the whole output of a new PTY.
    pub resume: Resume,
    /// As in [`AttachScreen::events_after`].
    pub events_after: u64,
}

/// Answer to [`OpenScreen`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScreenOpened {
    /// The pane's binding; `existed: true` when nothing was spawned.
    pub created: Created,
    /// The subscription, as in [`ScreenAttached`].
    pub attached: Attached,
    /// Whether a snapshot precedes the output.
    pub snapshot: bool,
}

/// Keystrokes or pasted bytes for the PTY.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Input {
    /// Exact binding (rule C).
    pub binding: Binding,
    /// Bytes to write to the PTY.
    pub data: Vec<u8>,
}

/// Keystrokes or pasted bytes for the PTY, applied at most once however often they are sent
/// (capability `input-seq`, protocol 1.2). A connector that lost its connection while an
/// [`Input`] was in flight cannot know whether the agent wrote it; with `InputSeq` it resends
/// the same request after reconnecting and the agent drops the copy it already applied.
///
/// The agent writes `data` to the PTY only if `seq` is greater than the last seq it applied for
/// `(PTY, writer)`; otherwise it answers [`Done`] without writing (a duplicate). A writer the
/// agent does not know yet, or no longer remembers, has its first seq applied whatever its
/// value. A refused request (`LimitExceeded` because the PTY's input queue is full, `Mismatch`,
/// `Ended`, ...) does not advance the seq, so the same seq can be retried. Check and write are
/// atomic per PTY: two connections racing the same `(writer, seq)` write it once.
///
/// The agent remembers at most 64 writers per PTY; beyond that the least recently used is
/// forgotten and treated as new when it sends again (so a duplicate from it would be written).
/// The memory lives as long as the PTY and is not carried across an agent restart (the PTY does
/// not survive one either).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InputSeq {
    /// Exact binding (rule C), checked as for [`Input`].
    pub binding: Binding,
    /// Random id the connector picks once per pane handle and keeps across its reconnects, so
    /// the agent can tell a resend from another writer's input.
    pub writer: u64,
    /// Sequence number of this request among `writer`'s requests: at least 1 more than the
    /// previous one (gaps are allowed), the same value when resending.
    pub seq: u64,
    /// Bytes to write to the PTY.
    pub data: Vec<u8>,
}

/// Change the PTY's size.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resize {
    /// Exact binding (rule C).
    pub binding: Binding,
    /// New size.
    pub size: TermSize,
}

/// Send a signal to the PTY's foreground process group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Signal {
    /// Exact binding (rule C).
    pub binding: Binding,
    /// Signal number (Linux numbering, e.g. 2 for SIGINT).
    pub signal: i32,
}

/// End the PTY: SIGHUP to its process group, SIGKILL after 3 s if the shell is still the agent's
/// own unreaped child, then SIGKILL to what is left in the PTY's session. Answered once the
/// signals went out (use [`End`] to wait for the confirmed outcome); refused with `Internal`
/// naming the journal when the end cannot be recorded (nothing is signalled then).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Kill {
    /// Exact binding (rule C).
    pub binding: Binding,
}

/// Stop receiving this pane's output on this connection; the PTY keeps running.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Detach {
    /// Exact binding (rule C).
    pub binding: Binding,
}

/// List every lease the agent knows, including ended ones and those of earlier incarnations.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListLeases {}

/// List the leases of one workspace, including ended ones and those of earlier incarnations
/// (protocol 1.7, capability `list-workspace`): what [`ListLeases`] lists, only the pane keys
/// of `workspace`, found without going through the others.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListWorkspace {
    /// The workspace.
    pub workspace: WorkspaceId,
}

/// Answer to [`ListLeases`] and [`ListWorkspace`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Leases {
    /// All leases, sorted by pane key then PTY id.
    pub leases: Vec<LeaseInfo>,
}

/// Credit: the connector has consumed this pane's output up to `offset`. Never answered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ack {
    /// The PTY.
    pub pty: PtyId,
    /// Offset up to which output was consumed.
    pub offset: u64,
}

/// Ask for the agent's status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusRequest {}

/// Lease counts by state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct LeaseCounts {
    /// Leases with a live connection.
    pub attached: u32,
    /// Live PTYs with no connection.
    pub detached: u32,
    /// Ended leases still remembered.
    pub ended: u32,
    /// Superseded leases.
    pub superseded: u32,
}

/// Answer to [`StatusRequest`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Status {
    /// Agent build version.
    pub agent_version: String,
    /// This daemon start's incarnation.
    pub incarnation: Incarnation,
    /// Process id of the daemon.
    pub pid: u32,
    /// Daemon start time, in milliseconds since the Unix epoch.
    pub started_ms: u64,
    /// Time since start, in milliseconds.
    pub uptime_ms: u64,
    /// Lease counts.
    pub leases: LeaseCounts,
    /// Number of client connections now.
    pub connections: u32,
}

/// Exempt a lease from lifecycle expiry, or take the exemption back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Protect {
    /// Exact binding (rule C).
    pub binding: Binding,
    /// New value.
    pub protected: bool,
}

/// Success with no data (answers input, input-seq, resize, signal, kill, detach, protect).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Done {}

/// PTY output: `data` starts at byte `offset` of the PTY's stream. Offsets of consecutive pushes
/// for one PTY are contiguous unless an [`OutputGap`] says otherwise.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Output {
    /// The PTY.
    pub pty: PtyId,
    /// Offset of `data[0]`.
    pub offset: u64,
    /// At most [`MAX_OUTPUT_CHUNK`](crate::MAX_OUTPUT_CHUNK) bytes.
    pub data: Vec<u8>,
}

/// Bytes `from..to` of a PTY's output are no longer held by the agent and will not be sent
/// (rule E: never a silent jump). The next output starts at `to`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutputGap {
    /// The PTY.
    pub pty: PtyId,
    /// First lost byte.
    pub from: u64,
    /// First byte that will be sent again.
    pub to: u64,
}

/// The PTY's process ended. Sent to every attached connection after the last output.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Exited {
    /// The binding that ended.
    pub binding: Binding,
    /// How it ended.
    pub exit: ExitStatus,
    /// Why.
    pub reason: EndReason,
    /// Event key: the output end offset at exit. `(pty, event_key)` is unique, so an app that saw
    /// it before a replay can drop the repeat.
    pub event_key: u64,
}

/// One piece of a screen snapshot (capability `screen`). The pieces of one snapshot are sent
/// back to back, in order, before any later output of the PTY; their `data` concatenated, written
/// to a terminal of `size`, reproduces the screen as it was after byte `offset - 1` of the output:
/// the primary screen with a bounded scrollback, the alternate screen on top when a full-screen
/// program had it, cursor, title and input modes. Output continues from `offset`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot {
    /// The PTY.
    pub pty: PtyId,
    /// Output offset the snapshot corresponds to (bytes since the PTY was created).
    pub offset: u64,
    /// Size the snapshot is rendered at: the PTY's size (columns × rows) when it was taken.
    pub size: TermSize,
    /// At most [`MAX_OUTPUT_CHUNK`](crate::MAX_OUTPUT_CHUNK) bytes of the snapshot.
    pub data: Vec<u8>,
    /// `true` on the last piece.
    pub last: bool,
}

/// A typed event a program caused (capability `screen`): bell, title, working directory,
/// command finished. Sent after the output up to `offset`. `(pty, key)` identifies it across
/// re-attaches, replays and snapshots: keys count up from 1 per PTY, so a client that applied
/// key `k` asks for `events_after: k` on its next attach and sees each event once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// The PTY.
    pub pty: PtyId,
    /// Event key: 1, 2, 3, ... per PTY.
    pub key: u64,
    /// Output offset by which the event had happened (the end of the output read with it).
    pub offset: u64,
    /// What happened.
    pub event: ScreenEvent,
}
