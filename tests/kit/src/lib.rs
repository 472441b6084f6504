//! What relay's tests share, so that each idea has one piece:
//!
//! - [`TempHome`]: a private `RELAY_HOME` (with an empty `HOME` for the shells) whose every
//!   process — daemon, bridges, clients — ends when it drops;
//! - [`procs`]: the one `/proc` walker the tests use (pids, states, argv, environment, children);
//! - [`lease`]: a [`LeaseInfo`](relay_protocol::LeaseInfo) to start a test row from;
//! - [`skip`]: the one way a test says it checked nothing on this machine (and fails instead
//!   under `RELAY_TESTS_REQUIRE_PRIVILEGED=1`).
//!
//! Used by the agent's integration tests, the workspace's end-to-end tests (`relay-tests`) and
//! the connector's and CLI's unit tests. Linux only for [`TempHome`] and [`procs`] (they read
//! `/proc`, `proc(5)`).

#[cfg(target_os = "linux")]
mod home;
mod lease;
#[cfg(target_os = "linux")]
pub mod procs;
mod skip;

#[cfg(target_os = "linux")]
pub use home::TempHome;
pub use lease::lease;
pub use skip::{skip, REQUIRE_PRIVILEGED, SKIP_LOG};
