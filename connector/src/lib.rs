//! relay's connector: the library a desktop app embeds to get terminals that outlive their
//! connection. The `relay` and `relayctl` command-line tools built on it are the `relay-cli`
//! crate (`connector/cli`), so embedding the library builds no argument parser.
//!
//! An app opens one [`Host`] per SSH destination (or this machine) and keeps it. The host owns a
//! [`Transport`] (a local child process running `relay-agent bridge`, or an SSH exec channel)
//! and runs a supervisor that keeps one connection to the host's agent alive: it notices a dead
//! link, reconnects with bounded backoff, and re-attaches every pane to the same PTY — it never
//! creates a shell when it meant to re-attach. Every [`Workspace`] and pane of the host is
//! multiplexed on that one connection.
//!
//! Panes are named by the app ([`PaneKey`](relay_protocol::PaneKey)); the agent owns the PTYs and
//! hands out exact [`Binding`](relay_protocol::Binding)s. **Open** (create-or-attach) is the only
//! operation that spawns; **attach** binds to what exists and fails with
//! `NotFound`/`Ended`/`Mismatch` otherwise (rule B); every mutation names the exact binding it
//! was meant for (rule C).
//!
//! The key design choice is that nothing on the connection's read path ever waits for the app:
//! replies go to per-request oneshot channels, output goes to per-pane queues bounded by the
//! agent's credit window (see [`pane`] for the slow-consumer policy), so a pane nobody reads
//! throttles only itself, and a host that is away only holds up its own panes.
//!
//! # Layout
//!
//! - [`host`]: [`Host`] (supervisor: states, heartbeat, backoff, re-attach), [`Workspace`],
//!   [`HostState`]. Start here.
//! - [`session`]: [`Session`] — one connection: hello/welcome (and the stated cleanup policy,
//!   [`ConnectOptions`]), the reader and writer tasks, the table of pending requests, every
//!   operation (`open`, `attach`, `input`, `resize`, `signal`, `kill`, `detach`, `protect`,
//!   `list_leases`, `status`, `ping`; with `lifecycle`: `set_policy`, `inspect`, `end`,
//!   `replace`, `forget`). A host uses one at a time; tools that want exactly one connection
//!   (`relayctl`) use it directly.
//! - [`lifecycle`]: operator actions for an app's buttons and `relayctl`: end an exact snapshot
//!   of shells with an honest [`KillSummary`] (`kill_all`), end all eligible ([`GcPlan`], `gc`).
//! - [`pane`]: [`PaneHandle`] and [`PaneEvent`]: one pane's ordered event stream, credit acks
//!   and the slow-consumer policy; it knows nothing of connections.
//! - [`host::input`]: [`InputWriter`], ordered and bounded keystroke delivery across reconnects
//!   (also reachable as `relay_connector::input`).
//! - [`predict`]: predictive local echo for slow links, sans-IO: the [`Predictor`] engine
//!   (fed a pane's output, keystrokes and round trips; answers what to draw on top of the
//!   screen) and the [`Painter`](predict::Painter) that draws it on a terminal without
//!   touching its scrollback.
//! - [`transport`]: the [`Transport`] trait and the byte stream ([`AgentStream`]) it yields;
//!   [`transport::local`] ([`LocalTransport`]) and [`transport::ssh`]
//!   ([`SshTransport`](ssh::SshTransport)) implement it; both are also reachable at the crate root
//!   (`relay_connector::local`, `relay_connector::ssh`). Apps give the SSH transport callbacks
//!   for passphrases, unknown host keys and deploy progress.
//! - [`Error`]: one error type, with [`Error::is_transient`] telling "try again" from "a retry
//!   cannot fix this"; its variants are kinds to match on (unknown or changed host key, refused
//!   authentication, refused or timed-out connect, an agent that cannot run, ...), the russh or
//!   IO error behind one is its `source()`, and [`Error::report`] is the text for a person.
//!
//! Architecture invariant: nothing in this crate ends a PTY or forgets a lease because a
//! connection was lost (rule A). Only [`Session::kill`] and [`Session::end`] (and
//! [`Session::kill_all`] and [`Session::gc`] built on them) end shells, and only the exact bindings
//! they name.
//!
//! # Example
//!
//! ```no_run
//! use relay_connector::{Host, HostOptions, LocalTransport, PaneEvent};
//! use relay_protocol::SpawnSpec;
//!
//! # async fn demo() -> Result<(), relay_connector::Error> {
//! let host = Host::open(LocalTransport::new(), HostOptions::new("my-app"));
//! let spec = SpawnSpec {
//!     command: vec!["sh".into(), "-c".into(), "echo hello".into()],
//!     ..SpawnSpec::default()
//! };
//! // Create-or-attach in one step: even a command that exits at once delivers all its output
//! // from offset 0, then its exit. The stream survives reconnects.
//! let (_created, mut pane) = host.workspace("my-project").open("tab-1", "0", spec).await?;
//! host.resize(pane.binding(), relay_protocol::TermSize { cols: 120, rows: 40 }).await?;
//! while let Some(event) = pane.next().await {
//!     match event {
//!         PaneEvent::Output { data, .. } => print!("{}", String::from_utf8_lossy(&data)),
//!         PaneEvent::Gap { from, to } => eprintln!("[{} bytes lost]", to - from),
//!         PaneEvent::Exited { exit, .. } => println!("[{exit}]"),
//!         PaneEvent::Interrupted { reason } => eprintln!("[reconnecting: {reason}]"),
//!         other => eprintln!("[{other:?}]"),
//!     }
//! }
//! # Ok(())
//! # }
//! ```
#![deny(missing_docs)]

mod error;
pub mod host;
pub mod lifecycle;
pub mod pane;
pub mod predict;
pub mod session;
mod sync;
pub mod sys;
pub mod transport;

pub use host::input;
pub use transport::{local, ssh};

pub use error::{report, BoxError, Error};
pub use host::{Host, HostOptions, HostState, RoundTrips, Workspace};
pub use input::{InputFailures, InputWriter};
pub use lifecycle::{GcCandidate, GcPlan, KillSummary};
pub use local::{BridgeStderr, LocalConfig, LocalTransport};
pub use pane::{PaneEvent, PaneHandle};
pub use predict::{PredictMode, Predictor};
pub use session::{ConnectOptions, Session};
pub use sync::LockExt;
pub use transport::{AgentStream, OpenOptions, Transport};
