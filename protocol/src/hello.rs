//! The first exchange of every connection: the connector sends [`Hello`], the agent answers
//! [`Welcome`] (or [`ErrorReply::Incompatible`](crate::ErrorReply::Incompatible)).
//!
//! Version rule: peers with the same [`PROTOCOL_MAJOR`] can talk; the minor version and the
//! capability list tell which optional operations each side has. An operation the peer did not
//! advertise is not sent (rule H).

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::types::Incarnation;

/// Magic number at the start of [`Hello`] and [`Welcome`]: ASCII `RLAY`. A peer that reads another
/// value is not talking to relay (e.g. a shell banner was printed into the stream).
pub const MAGIC: u32 = u32::from_be_bytes(*b"RLAY");

/// Protocol major version; a change here means old and new peers cannot talk.
pub const PROTOCOL_MAJOR: u16 = 1;

/// Protocol minor version; raised when ops or capabilities are added. 1.1 added `Open`/`Opened`
/// (capability [`Capability::OPEN`]); 1.2 added `InputSeq`, input applied at most once across
/// reconnects (capability [`Capability::INPUT_SEQ`]); 1.3 added `AttachScreen`/`OpenScreen`,
/// snapshots and typed events (capability [`Capability::SCREEN`]); 1.4 added the lifecycle ops
/// `SetPolicy`, `Inspect`, `End`, `Replace`, `Forget` (capability [`Capability::LIFECYCLE`]);
/// 1.5 added live upgrade, `UpgradeInfo`/`Upgrade` and `ErrorReply::UpgradeRefused`
/// (capability [`Capability::UPGRADE`]); 1.6 added lossless delivery, `OpenLossless`/
/// `AttachLossless` (capability [`Capability::LOSSLESS`]); 1.7 added `ListWorkspace`, one
/// workspace's leases (capability [`Capability::LIST_WORKSPACE`]); 1.8 added lossless windows
/// that grow with the link (capability [`Capability::WINDOW_GROWTH`]).
pub const PROTOCOL_MINOR: u16 = 8;

/// Name of an optional feature a peer supports, e.g. `"protect"`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Capability(pub String);

impl Capability {
    /// PTY panes: create, attach, input, resize, signal, kill, detach, list (the base set).
    pub const PTY: &'static str = "pty";
    /// Per-pane credit windows with `Ack` (the agent stops forwarding at the window).
    pub const CREDIT: &'static str = "credit";
    /// `Protect` of a lease against lifecycle expiry.
    pub const PROTECT: &'static str = "protect";
    /// `Status` of the agent.
    pub const STATUS: &'static str = "status";
    /// `Open`: create-or-attach in one step, so a quick command's output and exit are never lost
    /// (protocol 1.1).
    pub const OPEN: &'static str = "open";
    /// `InputSeq`: input sequenced per writer, so a request resent after a reconnect is written
    /// at most once (protocol 1.2).
    pub const INPUT_SEQ: &'static str = "input-seq";
    /// `AttachScreen`/`OpenScreen`, `Snapshot` and `Event` pushes: a reader that fell behind
    /// gets the screen instead of a gap, and typed events are delivered once (protocol 1.3). An
    /// agent started with its terminal model off does not advertise it.
    pub const SCREEN: &'static str = "screen";
    /// `SetPolicy`, `Inspect`, `End`, `Replace`, `Forget` and the `Forgotten` end reason: cleanup
    /// policy per connection, exact ends with per-target outcomes, supersede, history pruning
    /// (protocol 1.4).
    pub const LIFECYCLE: &'static str = "lifecycle";
    /// Live upgrade: `UpgradeInfo`, `Upgrade` (protocol 1.5).
    pub const UPGRADE: &'static str = "upgrade";
    /// Lossless delivery: `OpenLossless`, `AttachLossless` — the agent reads the PTY no further
    /// than its ring can hold without dropping a byte the subscriber has not acknowledged
    /// (protocol 1.6).
    pub const LOSSLESS: &'static str = "lossless";
    /// `ListWorkspace`: the leases of one workspace, without listing every lease the agent
    /// ever held (protocol 1.7).
    pub const LIST_WORKSPACE: &'static str = "list-workspace";
    /// Growing windows: when both peers list it, the credit window of a lossless subscription
    /// grows from [`Limits::window`] toward the replay ring ([`Limits::replay_bytes`]) while its
    /// consumer's acks keep emptying it, so an every-byte consumer is not held to one window per
    /// round trip on a long link; the connector sizes its pane queues for the ring (protocol
    /// 1.8).
    pub const WINDOW_GROWTH: &'static str = "window-growth";

    /// Everything this build implements.
    pub fn all() -> Vec<Capability> {
        [
            Self::PTY,
            Self::CREDIT,
            Self::PROTECT,
            Self::STATUS,
            Self::OPEN,
            Self::INPUT_SEQ,
            Self::SCREEN,
            Self::LIFECYCLE,
            Self::UPGRADE,
            Self::LOSSLESS,
            Self::LIST_WORKSPACE,
            Self::WINDOW_GROWTH,
        ]
        .into_iter()
        .map(|c| Capability(c.to_string()))
        .collect()
    }
}

impl fmt::Display for Capability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Sent by the connector as the first request of a connection.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    /// Must be [`MAGIC`].
    pub magic: u32,
    /// Connector's [`PROTOCOL_MAJOR`].
    pub major: u16,
    /// Connector's [`PROTOCOL_MINOR`].
    pub minor: u16,
    /// Free-form id of the client (app name and instance), for logs and `relayctl`.
    pub client_id: String,
    /// Connector version (crate version).
    pub client_version: String,
    /// What the connector supports.
    pub capabilities: Vec<Capability>,
    /// Largest frame body the connector accepts, in bytes.
    pub max_frame: u32,
}

impl Hello {
    /// A hello for this build with the given client id.
    pub fn new(client_id: impl Into<String>, client_version: impl Into<String>) -> Self {
        Hello {
            magic: MAGIC,
            major: PROTOCOL_MAJOR,
            minor: PROTOCOL_MINOR,
            client_id: client_id.into(),
            client_version: client_version.into(),
            capabilities: Capability::all(),
            max_frame: crate::DEFAULT_MAX_FRAME,
        }
    }
}

/// Limits the agent applies to this connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    /// Largest frame body the agent accepts, in bytes.
    pub max_frame: u32,
    /// Per-pane credit window, in bytes: the agent forwards at most this many output bytes of one
    /// pane beyond the last `Ack`.
    pub window: u32,
    /// Largest output payload in one push, in bytes.
    pub max_chunk: u32,
    /// Replay ring size per PTY, in bytes.
    pub replay_bytes: u64,
}

/// The agent's answer to [`Hello`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Welcome {
    /// Always [`MAGIC`].
    pub magic: u32,
    /// Agent's [`PROTOCOL_MAJOR`].
    pub major: u16,
    /// Agent's [`PROTOCOL_MINOR`].
    pub minor: u16,
    /// Agent build version (crate version, possibly with a suffix).
    pub agent_version: String,
    /// This daemon start's incarnation.
    pub incarnation: Incarnation,
    /// What the agent supports.
    pub capabilities: Vec<Capability>,
    /// Limits in force.
    pub limits: Limits,
}

impl Welcome {
    /// Whether the agent advertised `cap`.
    pub fn has(&self, cap: &str) -> bool {
        self.capabilities.iter().any(|c| c.0 == cap)
    }
}
