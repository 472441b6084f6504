//! The command line of `relay-agent bridge`: the part of the connector ⇄ bridge contract that is
//! not frames. A connector runs the bridge (over SSH or as a child) and reads its exit status
//! when the stream ends before the agent's welcome.
//!
//! Compatibility (rule H): a connector only passes [`NO_START_FLAG`] for tools that must not
//! start a daemon (`relayctl`); apps never pass it, so every older bridge keeps working for
//! them. An older bridge that does not know the flag exits with [`EXIT_USAGE`] (clap's usage
//! error) instead of starting a daemon, which the connector reports as an incompatible agent.

/// `relay-agent bridge --no-start`: connect to a running daemon only; when none answers, exit
/// with [`EXIT_NO_AGENT`] instead of starting one.
pub const NO_START_FLAG: &str = "--no-start";

/// Exit status of `relay-agent bridge --no-start` when no daemon answers on its socket (the
/// value of `EX_UNAVAILABLE` in BSD's sysexits).
pub const EXIT_NO_AGENT: i32 = 69;

/// Exit status of a bridge that did not understand its command line (clap's usage error), e.g.
/// an agent older than [`NO_START_FLAG`].
pub const EXIT_USAGE: i32 = 2;
