//! Daemon settings, read once from the environment at start.

use std::time::Duration;

use crate::lease::DEFAULT_MAX_ENDED;
use crate::lifecycle::{policy, HostPolicy};
use crate::output::ring::DEFAULT_REPLAY_BYTES;

/// Default per-pane credit window in bytes (1 MiB). Overridden by env `RELAY_WINDOW_BYTES`.
pub const DEFAULT_WINDOW_BYTES: u32 = 1024 * 1024;

/// Default room for lossless windows to grow on one connection, in bytes (16 MiB). Overridden
/// by env `RELAY_WINDOW_BUDGET_BYTES`.
pub const DEFAULT_WINDOW_BUDGET_BYTES: u64 = 16 * 1024 * 1024;

/// Daemon settings.
#[derive(Debug, Clone)]
pub struct Config {
    /// Replay ring size per PTY, in bytes (env `RELAY_REPLAY_BYTES`).
    pub replay_bytes: usize,
    /// Credit window per subscription, in bytes (env `RELAY_WINDOW_BYTES`).
    pub window: u32,
    /// How far the windows of one connection's lossless subscriptions may grow beyond
    /// [`Config::window`] together, in bytes (env `RELAY_WINDOW_BUDGET_BYTES`; see
    /// [`crate::output::credit`]).
    pub window_budget: u64,
    /// Version advertised in Welcome/Status (env `RELAY_AGENT_ADVERTISE_VERSION`, else the crate
    /// version).
    pub advertise_version: String,
    /// Ended leases remembered.
    pub max_ended: usize,
    /// Time between SIGHUP and SIGKILL when a PTY is killed (env `RELAY_KILL_GRACE_MS`, default
    /// 3 s); also when what is left in its session is swept.
    pub kill_grace: Duration,
    /// How long, after the child exited, the PTY reader may take to reach end-of-file before
    /// `Exited` is sent anyway (env `RELAY_EXIT_OUTPUT_GRACE_MS`, default 500 ms). End-of-file
    /// normally comes at once; it waits this long only when a background process still holds
    /// the terminal, and output after `Exited` is kept in the ring but not forwarded.
    pub exit_output_grace: Duration,
    /// How long a lossless consumer's hold outlives its connection (env
    /// `RELAY_HOLD_GRACE_MS`, default 120 s): time for the client to reconnect and resume with
    /// every byte; after it the PTY is read on and the hold released (see [`crate::output::hold`]).
    pub hold_grace: Duration,
    /// Input bytes queued for one PTY before `Input` is refused with `LimitExceeded`.
    pub max_pending_input: usize,
    /// Pushes/replies queued per connection before producers wait.
    pub connection_queue: usize,
    /// Scrollback lines each PTY's terminal model keeps for snapshots (env
    /// `RELAY_SCROLLBACK_LINES`, default 1,000); `None` when the model is off (env
    /// `RELAY_SCREEN_MODEL=off`: no snapshots, no events, the `screen` capability is not
    /// advertised — for measuring the model's cost).
    pub scrollback_lines: Option<usize>,
    /// Time a request frame may take to arrive once its first byte did (env
    /// `RELAY_FRAME_TIMEOUT_MS`, default [`crate::limits::DEFAULT_FRAME_TIMEOUT`]).
    pub frame_timeout: Duration,
    /// Memory the bodies of incomplete request frames of all connections may hold together, in
    /// bytes (env `RELAY_INCOMPLETE_FRAMES_BYTES`, default
    /// [`crate::limits::DEFAULT_INCOMPLETE_FRAMES_BYTES`]; at least the 1 MiB frame maximum).
    pub incomplete_frames_bytes: usize,
    /// Lifecycle cleanup settings (env `RELAY_UNUSED_GRACE`: `off` or a duration, default `10m`;
    /// `RELAY_IDLE_EXPIRY`: default `off`; `RELAY_SUGGEST_AFTER`: default `1d`). They govern the
    /// PTYs of connections that state a policy (see [`crate::lifecycle`]).
    pub policy: HostPolicy,
    /// Whether a bridge may hand its stdin and stdout to the daemon (env `RELAY_PASS_STDIO`:
    /// `on`, the default, or `off`: every bridge copies); see [`crate::daemon::stdio_pass`].
    pub pass_stdio: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            replay_bytes: DEFAULT_REPLAY_BYTES,
            window: DEFAULT_WINDOW_BYTES,
            window_budget: DEFAULT_WINDOW_BUDGET_BYTES,
            advertise_version: env!("CARGO_PKG_VERSION").to_string(),
            max_ended: DEFAULT_MAX_ENDED,
            kill_grace: Duration::from_secs(3),
            exit_output_grace: Duration::from_millis(500),
            hold_grace: Duration::from_secs(120),
            max_pending_input: 4 * 1024 * 1024,
            connection_queue: 64,
            scrollback_lines: Some(crate::output::screen::DEFAULT_SCROLLBACK_LINES),
            frame_timeout: crate::limits::DEFAULT_FRAME_TIMEOUT,
            incomplete_frames_bytes: crate::limits::DEFAULT_INCOMPLETE_FRAMES_BYTES,
            policy: HostPolicy::default(),
            pass_stdio: true,
        }
    }
}

impl Config {
    /// Defaults overridden by the `RELAY_*` environment variables.
    ///
    /// # Errors
    /// A variable that is set but not a positive number, naming it.
    pub fn from_env() -> Result<Self, String> {
        let mut c = Config::default();
        if let Some(n) = number("RELAY_REPLAY_BYTES")? {
            c.replay_bytes = usize::try_from(n).map_err(|e| e.to_string())?;
        }
        if let Some(n) = number("RELAY_WINDOW_BYTES")? {
            c.window = u32::try_from(n)
                .map_err(|_| format!("RELAY_WINDOW_BYTES={n} is above {}", u32::MAX))?;
        }
        if let Some(n) = number("RELAY_WINDOW_BUDGET_BYTES")? {
            c.window_budget = n;
        }
        if let Some(ms) = number("RELAY_EXIT_OUTPUT_GRACE_MS")? {
            c.exit_output_grace = Duration::from_millis(ms);
        }
        if let Some(ms) = number("RELAY_HOLD_GRACE_MS")? {
            c.hold_grace = Duration::from_millis(ms);
        }
        if let Some(ms) = number("RELAY_KILL_GRACE_MS")? {
            c.kill_grace = Duration::from_millis(ms);
        }
        if let Some(ms) = number("RELAY_FRAME_TIMEOUT_MS")? {
            c.frame_timeout = Duration::from_millis(ms);
        }
        if let Some(n) = number("RELAY_INCOMPLETE_FRAMES_BYTES")? {
            let min = u64::from(relay_protocol::DEFAULT_MAX_FRAME);
            if n < min {
                return Err(format!(
                    "RELAY_INCOMPLETE_FRAMES_BYTES={n} is below one maximal frame ({min} bytes); \
                     unset it or give at least {min}"
                ));
            }
            c.incomplete_frames_bytes = usize::try_from(n).map_err(|e| e.to_string())?;
        }
        if let Ok(v) = std::env::var("RELAY_SCROLLBACK_LINES") {
            c.scrollback_lines = Some(scrollback_lines(&v)?);
        }
        if !switch("RELAY_SCREEN_MODEL")? {
            c.scrollback_lines = None;
        }
        c.pass_stdio = switch("RELAY_PASS_STDIO")?;
        if let Some(v) = setting("RELAY_UNUSED_GRACE")? {
            c.policy.unused_grace = v;
        }
        if let Some(v) = setting("RELAY_IDLE_EXPIRY")? {
            c.policy.idle_expiry = v;
        }
        match std::env::var("RELAY_SUGGEST_AFTER") {
            Ok(v) if !v.trim().is_empty() => {
                c.policy.suggest_after = policy::parse_duration(&v)
                    .map_err(|e| format!("RELAY_SUGGEST_AFTER: {e} (it cannot be off)"))?;
            }
            _ => {}
        }
        if let Ok(v) = std::env::var("RELAY_AGENT_ADVERTISE_VERSION") {
            if !v.is_empty() {
                c.advertise_version = v;
            }
        }
        Ok(c)
    }
}

/// An on/off variable whose default is on: unset, empty or `on` is true, `off` false.
///
/// # Errors
/// Any other value, naming the variable and the two it takes.
fn switch(name: &str) -> Result<bool, String> {
    match std::env::var(name).as_deref() {
        Err(_) | Ok("" | "on") => Ok(true),
        Ok("off") => Ok(false),
        Ok(other) => Err(format!(
            "{name}={other:?} is not valid; use \"on\" (default) or \"off\""
        )),
    }
}

/// Most scrollback lines a snapshot may carry (env `RELAY_SCROLLBACK_LINES`).
pub const MAX_SCROLLBACK_LINES: usize = 100_000;

/// `RELAY_SCROLLBACK_LINES`: 0 (no scrollback in snapshots) up to [`MAX_SCROLLBACK_LINES`].
fn scrollback_lines(v: &str) -> Result<usize, String> {
    match v.trim().parse::<usize>() {
        Ok(n) if n <= MAX_SCROLLBACK_LINES => Ok(n),
        _ => Err(format!(
            "RELAY_SCROLLBACK_LINES={v:?} is not a number of lines from 0 to \
             {MAX_SCROLLBACK_LINES}; unset it or give e.g. 1000"
        )),
    }
}

/// A lifecycle duration setting: unset → `None`; `off` → `Some(None)`; a duration → its value.
fn setting(var: &str) -> Result<Option<Option<Duration>>, String> {
    match std::env::var(var) {
        // Set but empty counts as unset (as `relay` reads these variables too).
        Err(_) => Ok(None),
        Ok(v) if v.trim().is_empty() => Ok(None),
        Ok(v) => policy::parse_setting(&v)
            .map(Some)
            .map_err(|e| format!("{var}: {e}")),
    }
}

fn number(var: &str) -> Result<Option<u64>, String> {
    match std::env::var(var) {
        Err(_) => Ok(None),
        Ok(v) => match v.trim().parse::<u64>() {
            Ok(n) if n > 0 => Ok(Some(n)),
            _ => Err(format!(
                "{var}={v:?} is not a positive number; unset it or give e.g. {}",
                if var.ends_with("_MS") {
                    "500"
                } else {
                    "4194304"
                }
            )),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scrollback_lines_take_zero_to_the_maximum() {
        assert_eq!(scrollback_lines("0"), Ok(0));
        assert_eq!(scrollback_lines(" 1000 "), Ok(1000));
        assert_eq!(scrollback_lines("100000"), Ok(MAX_SCROLLBACK_LINES));
        for bad in ["", "abc", "-5", "100001", "99999999999999999999"] {
            let err = scrollback_lines(bad).unwrap_err();
            assert!(
                err.contains("RELAY_SCROLLBACK_LINES") && err.contains("e.g. 1000"),
                "{err}"
            );
        }
    }
}
