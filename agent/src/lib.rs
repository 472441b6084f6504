//! relay's host-side agent: owns PTYs for pane-keyed leases and serves them over a Unix socket.
//!
//! # Roles
//!
//! - **daemon** (`relay-agent daemon`, [`daemon`]): one per user per host. Owns every PTY, keeps
//!   each PTY's recent output in a replay ring, records leases in a journal, and serves the relay
//!   protocol on `$RELAY_HOME/run/agent.sock` to processes of the same uid.
//! - **bridge** (`relay-agent bridge`, [`bridge`]): what the connector runs over SSH (or
//!   locally): a byte pipe from stdio to the socket that starts the daemon if none answers.
//!
//! The key design choice is this split: PTYs live in a detached daemon, not in the SSH session's
//! process tree, so a dropped connection, a killed bridge or an upgraded connector can never take
//! a shell with it (rule A: unknown is not dead).
//!
//! # Layout
//!
//! One folder per layer; a module imports only from its own layer or the layers below it (top
//! to bottom; checked by `tests/layers.rs`):
//!
//! - [`bridge`]: the bridge entry point (with `main.rs`);
//! - [`daemon`]: start-up, lock, the serve loop, shutdown; [`daemon::server`] →
//!   [`daemon::connection`] → [`daemon::dispatch`] / [`daemon::subscriptions`]: accept loop,
//!   per-connection task, the one exhaustive request `match`, per-connection subscriptions and
//!   their output forwarding tasks; [`daemon::inbound`]: request frames read with bounded
//!   memory and time; [`daemon::stdio_pass`]: the bridge's stdio handed to the daemon;
//! - [`upgrade`]: live upgrade — the state handed to a new binary across `execve` in the same
//!   process, the version rules, the probes of the new binary, the cut and resume of the
//!   daemon's state, what a PTY hands over;
//! - [`state`]: the shared daemon state handle (lease book + PTYs + journal + timers) and the
//!   lease table's transactions;
//! - [`config`]: env settings, whose defaults belong to the layers below;
//! - [`pty`]: spawning PTYs, reader/writer/waiter tasks, race-free kill with a sweep of the
//!   PTY's session, the reaper, `/proc`, orphans of a killed daemon, wire signals, input
//!   sequencing, the descriptor limit, login shells;
//! - [`output`]: the replay ring, credit windows, lossless holds, terminal screens (sans-IO);
//! - [`log`]: the log subscriber, the rotated log file, rate-limited warnings;
//! - [`lease`]: the lease table, PTY id minting, binding checks (rules B, C, D; sans-IO), the
//!   journal, replayed and compacted on start, and when output counters are journaled;
//! - [`lifecycle`]: the cleanup policy as one pure function of observed facts, and the per-lease
//!   timers that only trigger its re-check;
//! - [`limits`], [`paths`], [`runtime`]: request size and frame budgets, `$RELAY_HOME` layout,
//!   running blocking code on the runtime;
//! - [`pause`], [`fault`]: pause points that make a race deterministic in a test, and fault
//!   points that make a rare failure happen (debug builds only).
//!
//! Architecture invariant: nothing that learns a connection is gone (EOF, error, timeout) ends a
//! PTY or drops a lease; only `Kill`/`End`, the lifecycle policy after re-verifying every
//! condition, the process's own exit or the daemon's shutdown do.

// Handlers return the wire type `ErrorReply` (≈128 bytes) as their error so that it reaches the
// peer unchanged; it is only built on cold refusal paths, so boxing it would only add noise.
#![allow(clippy::result_large_err)]
#![deny(missing_docs)]

pub mod bridge;
pub mod config;
pub mod daemon;
pub mod fault;
pub mod lease;
pub mod lifecycle;
pub mod limits;
pub mod log;
pub mod output;
pub mod paths;
pub mod pause;
pub mod pty;
pub mod runtime;
pub mod state;
pub mod sys;
pub mod upgrade;

/// Milliseconds since the Unix epoch (0 if the clock is before it).
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
