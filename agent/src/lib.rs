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
//! Sans-IO core (table-driven unit tests, no processes or sockets):
//! - [`ring`]: replay ring with absolute offsets;
//! - [`lease`]: lease table, PTY id minting, binding checks (rules B, C, D);
//! - [`credit`]: per-subscription credit window;
//! - [`hold`]: lossless consumers' holds, which keep the ring from dropping bytes they have not
//!   acknowledged (the PTY is read no further instead);
//! - [`input_seq`]: per-PTY last applied seq of each input writer (`InputSeq` written once);
//! - [`lifecycle`]: the cleanup policy as one pure function of observed facts, and the per-lease
//!   timers that only trigger its re-check;
//! - [`screen`]: a terminal model per PTY (snapshots with scrollback and alternate screen, events);
//! - [`limits`]: request size limits and fitting `ListLeases` into a frame;
//! - [`wire_signal`]: the wire's (Linux) signal numbers mapped to the host's signals.
//!
//! IO around it:
//! - [`pty`] and [`shell`]: spawning PTYs, reader/writer/waiter tasks, race-free kill with a
//!   sweep of the PTY's session; [`pty_io`]: the PTY master as a plain descriptor; [`procfs`]:
//!   what the agent reads from `/proc`;
//! - [`handover`]: live upgrade — the state handed to a new binary across `execve` in the same
//!   process, the version rules, the probes of the new binary;
//! - [`journal`]: the lease journal, replayed and compacted on start; [`counters`]: when a PTY's
//!   output counters are journaled (bounded, never per chunk);
//! - [`orphan`]: ending PTY processes that outlived a killed daemon, on the next start;
//! - [`state`]: the shared daemon state handle (lease book + PTYs + journal + timers);
//! - [`inbound`]: request frames read with bounded memory (all connections) and time;
//! - [`server`] → [`connection`] → [`dispatch`] / [`session`] → [`subscription`]: accept loop,
//!   per-connection task, the one exhaustive request `match`, per-connection subscriptions and
//!   their output forwarding tasks;
//! - [`daemon`], [`bridge`], [`logging`] ([`log_file`]: rotation, disk reserve, whole lines;
//!   [`log_limit`]: rate-limited warnings), [`paths`], [`config`]: process plumbing.
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
pub mod connection;
pub mod counters;
pub mod credit;
pub mod daemon;
pub mod dispatch;
pub mod handover;
pub mod hold;
pub mod inbound;
pub mod input_seq;
pub mod journal;
pub mod lease;
pub mod lifecycle;
pub mod limits;
pub mod log_file;
pub mod log_limit;
pub mod logging;
pub mod nofile;
pub mod orphan;
pub mod paths;
pub mod procfs;
pub mod pty;
pub mod pty_io;
pub mod reaper;
pub mod ring;
pub mod screen;
pub mod server;
pub mod session;
pub mod shell;
pub mod spawn;
pub mod state;
pub mod stdio_pass;
pub mod subscription;
pub mod wire_signal;

/// Milliseconds since the Unix epoch (0 if the clock is before it).
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
