//! What a deploy tells its caller: progress events and the final report. A leaf: the deploy
//! steps and the upload both speak it.

use std::sync::Arc;
use std::time::Duration;

/// A deploy step the caller may show (a progress bar, a log line).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeployEvent {
    /// The host's platform was detected.
    Probed {
        /// `uname -sm` output, e.g. `Linux x86_64`.
        platform: String,
        /// Rust target, e.g. `x86_64-unknown-linux-gnu`.
        target: String,
    },
    /// An agent binary with the expected name is installed; nothing is uploaded. Its sha256 is
    /// checked by the bridge command before it runs (a corrupt file is then replaced, with
    /// [`DeployEvent::Uploading`] and [`DeployEvent::Installed`] following).
    AlreadyPresent {
        /// Remote path (with `~`).
        path: String,
    },
    /// Upload progress, in bytes as sent: compressed when the host has `gzip` (then `total` is
    /// about 40 % of the binary's size).
    Uploading {
        /// Bytes sent so far.
        sent: u64,
        /// Bytes to send.
        total: u64,
    },
    /// The binary was uploaded, verified and renamed into place.
    Installed {
        /// Remote path (with `~`).
        path: String,
    },
}

/// Receives [`DeployEvent`]s. Called on the connecting task: keep it quick.
pub type ProgressCallback = Arc<dyn Fn(&DeployEvent) + Send + Sync>;

/// What a deploy did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeployReport {
    /// `uname -sm` output.
    pub platform: String,
    /// Rust target of the host.
    pub target: String,
    /// Remote path of the agent, relative to the remote home (`.relay/bin/...`).
    pub remote_path: String,
    /// Full sha256 of the agent binary (hex).
    pub sha256: String,
    /// Whether the binary was uploaded (false: it was already present and its hash matched).
    pub uploaded: bool,
    /// Whether an existing file with the right name but a wrong hash was replaced.
    pub replaced_corrupt: bool,
    /// Bytes sent by the upload, compressed or not (0 when nothing was uploaded).
    pub bytes: u64,
    /// Time the deploy took (probe and upload).
    pub elapsed: Duration,
}
