//! Live agent upgrade (protocol 1.5, capability [`crate::Capability::UPGRADE`]): what the daemon
//! runs and has installed, and the order to hand its shells to another binary in the same
//! process (see `docs/protocol.md`, "Live upgrade").

use serde::{Deserialize, Serialize};

/// Ask what the daemon runs, what is installed, and how the last upgrade went.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UpgradeInfo {}

/// An agent binary on the host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentBinary {
    /// Absolute path on the host.
    pub path: String,
    /// Its version (for an installed binary: the version in its name,
    /// `relay-agent-<version>-<hash>`).
    pub version: String,
}

/// Answer to [`UpgradeInfo`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UpgradeReport {
    /// The running daemon's code.
    pub running: AgentBinary,
    /// Version of the state format it hands over.
    pub state_version: u32,
    /// The newest agent installed in `$RELAY_HOME/bin`, if any.
    pub newest_installed: Option<AgentBinary>,
    /// Whether that one is newer than the running one (`relayctl upgrade` would take it).
    pub newer_installed: bool,
    /// How the last upgrade this daemon tried went, if it tried one and it failed (the daemon
    /// kept serving): what went wrong, for people.
    pub last_failure: Option<String>,
    /// An accepted upgrade has not finished (nor failed) yet.
    pub in_progress: bool,
    /// When this process's code last changed by an upgrade: the version it came from.
    pub upgraded_from: Option<String>,
}

/// Hand every shell to another agent binary (same pid, same PTYs). Answered with
/// [`UpgradeStarted`] once the binary was probed and accepted; then every connection closes and
/// the new code serves (or, if it cannot start, the old code again). Refused with
/// `UpgradeRefused` when the binary cannot be run, cannot read the state, is older than the
/// running one (unless `force`), or is the running version and was not named.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Upgrade {
    /// Absolute path of the binary on the host; `None`: the newest installed one.
    pub to: Option<String>,
    /// Allow a downgrade (and the running version when not named).
    pub force: bool,
}

/// Answer to [`Upgrade`]: the handover begins.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UpgradeStarted {
    /// What runs now.
    pub from: AgentBinary,
    /// What will run.
    pub to: AgentBinary,
    /// Running PTYs (live or superseded) handed over.
    pub ptys: u32,
}
