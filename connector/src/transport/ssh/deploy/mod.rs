//! Auto-deploy of `relay-agent` to a host over exec channels (the steps: `ensure`).
//!
//! 1. **Probe** (one exec): `uname -sm` after a sentinel line (login shells may print banners,
//!    motd or `.bashrc` noise first), the sha256 tool found (none: refused, nothing uploaded),
//!    whether `gzip` is there,
//!    the C library and its version, the mount options where `~/.relay/bin` lives, plus the
//!    names of the installed `~/.relay/bin/relay-agent-<version>-*`.
//! 2. Map the platform to a Rust target (`Linux x86_64` → `x86_64-unknown-linux-gnu`) and find the
//!    local agent binary for it ([`AgentSource`]). Its sha256 names the remote file:
//!    `~/.relay/bin/relay-agent-<connector version>-<first 16 hex digits of sha256>`. Check that
//!    the host can run it ([`host_check`]): a host whose glibc is older than
//!    the binary needs, a musl host or a `noexec` install directory is refused here with the
//!    cause and the fix, before anything is uploaded or executed.
//! 3. If that file is absent: **upload** (one exec, module `upload`): gzip-compressed when the
//!    probe found `gzip` on the host, written to a unique temp name in the same directory,
//!    hashed on the host, and only if the hash matches `chmod 700` and `mv -f` over the final
//!    name (atomic rename; two connectors deploying at once each write their own temp file and
//!    the last rename wins with identical content). Stale temp files older than an hour are
//!    removed.
//! 4. The bridge command checks the file right before `exec`: a regular file of the expected
//!    size (so a huge file is never hashed), then its sha256 (read from stdin: GNU `sha256sum`
//!    escapes odd file names); it refuses to run it on a mismatch (exit status
//!    [`BRIDGE_HASH_MISMATCH`]), and the transport then replaces the corrupt file as in step 3
//!    and starts the bridge once more. A hash tool that fails is reported as such
//!    ([`BRIDGE_HASH_FAILED`](ensure::BRIDGE_HASH_FAILED)), never taken for corruption; a verified file that lost its
//!    execute bit gets it back. So an unverified binary is never executed, and an
//!    installed one is hashed once per connect, not twice. The bridge never stops or replaces a
//!    running daemon: it connects to whatever daemon answers on the version-independent socket
//!    and Hello/Welcome negotiates.
//!
//! Steps 1–3 run on a transport's first connect, and again only when step 4 finds the file it
//! installed gone or changed: a reconnect runs the bridge command alone (`Installed` is what
//! it needs to know), which saves the probe's two round trips.
//!
//! Parts: `ensure` (the steps above and the bridge command), `upload` (step 3), `agent_source`
//! (where the local agent binary comes from, [`AgentSource`], and reading and hashing it),
//! [`host_check`] (can the host run it) and `events` (what a deploy reports, [`DeployEvent`] and
//! [`DeployReport`]: a leaf that the steps and the upload both speak).

mod agent_source;
mod ensure;
mod events;
pub mod host_check;
mod upload;

pub use agent_source::{local_target, target_for, AgentSource};
pub(crate) use ensure::{
    bridge_command, ensure_agent, new_sentinel, Installed, BRIDGE_HASH_MISMATCH,
};
pub use events::{DeployEvent, DeployReport, ProgressCallback};

/// Connector version; deployed agents are named after it.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
