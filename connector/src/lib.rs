//! relay's connector: the library a desktop app embeds to get terminals that outlive their
//! connection, plus the `relay` and `relayctl` command-line tools built on it (feature `cli`,
//! on by default; an app turns it off with `default-features = false`).
//!
//! An app opens one [`Session`] per host over a [`Transport`] (a local child process running
//! `relay-agent bridge`, or an SSH exec channel) and multiplexes every workspace and pane on it.
//! Panes are named by the app ([`PaneKey`](relay_protocol::PaneKey)); the agent owns the PTYs and hands out exact
//! [`Binding`](relay_protocol::Binding)s. **Create** (and **open**, create-or-attach in one step)
//! are the only operations that spawn; **attach** binds to what exists and
//! fails with `NotFound`/`Ended`/`Mismatch` otherwise (rule B); every mutation names the exact
//! binding it was meant for (rule C).
//!
//! The key design choice is that the session is an actor whose reader task never waits for the
//! app: replies go to per-request oneshot channels, output goes to per-pane queues bounded by the
//! agent's credit window (see [`pane`] for the slow-consumer policy), so a pane nobody reads
//! throttles only itself.
//!
//! # Layout
//!
//! - [`transport`]: the [`Transport`] trait and the byte stream ([`AgentStream`]) it yields.
//! - [`local`]: [`LocalTransport`], which runs `relay-agent bridge` as a child process, and how
//!   the agent binary is found.
//! - [`session`]: [`Session`] — hello/welcome, the reader and writer tasks, the table of pending
//!   requests, and every operation (`create`, `attach`, `open`, `input`, `resize`, `signal`,
//!   `kill`, `detach`, `protect`, `list_leases`, `status`, `ping`), and the optional per-handle
//!   request timeout ([`Session::with_request_timeout`]; none by default).
//! - [`pane`]: [`PaneHandle`] and [`PaneEvent`]: one attached pane's ordered event stream, credit
//!   acks and the slow-consumer policy.
//! - `bin/relay`: `relay shell` / `relay attach`, an ssh-like terminal client (feature `cli`).
//! - `bin/relayctl`: `relayctl leases|status|kill|protect` for operators.
//!
//! Architecture invariant: nothing in this crate ends a PTY or forgets a lease because a
//! connection was lost (rule A): a lost connection fails pending requests with
//! [`Error::ConnectionLost`] and ends pane streams with [`PaneEvent::Disconnected`], and that is
//! all. Only [`Session::kill`] ends a shell, and only for the exact binding it names.
//!
//! # Example
//!
//! ```no_run
//! use relay_connector::{LocalTransport, PaneEvent, Session};
//! use relay_protocol::{PaneKey, SpawnSpec};
//!
//! # async fn demo() -> Result<(), relay_connector::Error> {
//! let session = Session::connect(&LocalTransport::new(), "my-app").await?;
//! let pane = PaneKey::new("my-project", "tab-1", "0");
//! let spec = SpawnSpec {
//!     command: vec!["sh".into(), "-c".into(), "echo hello".into()],
//!     ..SpawnSpec::default()
//! };
//! // Create-or-attach in one step (agents with the `open` capability): even a command that
//! // exits at once delivers all its output from offset 0, then its exit.
//! let (_created, mut handle) = session.open(pane, spec, Some(0)).await?;
//! let binding = handle.binding().clone();
//! session.resize(&binding, relay_protocol::TermSize { cols: 120, rows: 40 }).await?;
//! while let Some(event) = handle.next().await {
//!     match event {
//!         PaneEvent::Output { data, .. } => print!("{}", String::from_utf8_lossy(&data)),
//!         PaneEvent::Gap { from, to } => eprintln!("[{} bytes lost]", to - from),
//!         PaneEvent::Exited { exit, .. } => println!("[{exit}]"),
//!         PaneEvent::Disconnected { reason } => eprintln!("[connection lost: {reason}]"),
//!         other => eprintln!("[{other:?}]"),
//!     }
//! }
//! # Ok(())
//! # }
//! ```
#![deny(missing_docs)]

mod error;
pub mod local;
pub mod pane;
pub mod session;
pub mod ssh;
pub mod transport;

pub use error::Error;
pub use local::{BridgeStderr, LocalConfig, LocalTransport};
pub use pane::{PaneEvent, PaneHandle};
pub use session::Session;
pub use transport::{AgentStream, Transport};
