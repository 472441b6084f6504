//! The local transport: runs `relay-agent bridge` as a child process and talks to it over the
//! child's stdin and stdout.
//!
//! This is the embedded default for `relay shell --local` and for fast tests: same protocol and
//! same daemon as over SSH, without SSH. The bridge starts the per-user daemon if none answers
//! (unless [`OpenOptions::start_agent`] is off);
//! the daemon is not our child's child in any sense that matters: dropping the stream kills only
//! the bridge process, never the daemon or its shells (rule A).
//!
//! The agent binary is found in this order (first hit wins; an explicit setting that points at a
//! missing file is an error, not a reason to fall back):
//! 1. [`LocalConfig::agent_bin`],
//! 2. the environment variable `RELAY_AGENT_BIN`,
//! 3. `relay-agent` next to the current executable, then one directory up (for test binaries in
//!    `target/debug/deps`),
//! 4. `relay-agent` on `PATH`.
//!
//! With [`BridgeStderr::Log`], what the bridge prints on stderr before the handshake completes is
//! held back: if the bridge exits without answering (an unwritable `RELAY_HOME`, a daemon that
//! cannot start), the handshake error quotes it, cleaned of terminal escape codes. After a
//! successful handshake the held lines, and every later one, are logged.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::watch;

use relay_protocol::bridge::NO_START_FLAG;

use crate::sync::LockExt;
use crate::sys;
use crate::transport::{
    AgentStream, ExitCodeFuture, FailureFuture, OpenFuture, OpenOptions, StreamGuard, Transport,
};
use crate::Error;

/// File name of the agent binary.
pub const AGENT_BIN_NAME: &str = "relay-agent";

/// Environment variable naming the agent binary explicitly.
pub const AGENT_BIN_ENV: &str = "RELAY_AGENT_BIN";

/// Bytes of bridge stderr held back for a handshake error (the tail is kept).
const STDERR_TAIL: usize = 4096;

/// How long a failed handshake waits for the bridge's stderr to end after its stdout did.
const STDERR_GRACE: Duration = Duration::from_millis(500);

/// What happens to the bridge's stderr (its diagnostics; it never carries frames).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum BridgeStderr {
    /// Each line is logged with `tracing` at warn level (target `relay_connector::bridge`);
    /// lines printed before the handshake completes are held back and quoted in the handshake
    /// error if the bridge does not answer (see the module docs). The default: a terminal in raw
    /// mode is not scribbled on.
    #[default]
    Log,
    /// The bridge writes to this process's stderr.
    Inherit,
    /// Discarded.
    Null,
}

/// Settings of a [`LocalTransport`].
#[derive(Debug, Clone, Default)]
pub struct LocalConfig {
    /// The agent binary to run; `None` means search (see the module docs).
    pub agent_bin: Option<PathBuf>,
    /// Value of `RELAY_HOME` for the bridge (and the daemon it may start); `None` passes this
    /// process's environment through unchanged.
    pub relay_home: Option<PathBuf>,
    /// Extra environment variables for the bridge (and the daemon it may start).
    pub env: Vec<(OsString, OsString)>,
    /// Where the bridge's stderr goes.
    pub stderr: BridgeStderr,
}

/// Reaches the agent on this machine by spawning `relay-agent bridge`.
#[derive(Debug, Clone, Default)]
pub struct LocalTransport {
    config: LocalConfig,
}

impl LocalTransport {
    /// A transport with default settings: agent binary searched, environment passed through.
    pub fn new() -> Self {
        LocalTransport::default()
    }

    /// A transport with the given settings.
    pub fn with_config(config: LocalConfig) -> Self {
        LocalTransport { config }
    }

    /// The settings.
    pub fn config(&self) -> &LocalConfig {
        &self.config
    }

    /// The agent binary this transport would run.
    ///
    /// # Errors
    /// [`Error::NoAgentBinary`] naming every place that was looked at.
    pub fn agent_path(&self) -> Result<PathBuf, Error> {
        locate_agent(self.config.agent_bin.as_deref())
    }

    async fn spawn(&self, options: OpenOptions) -> Result<AgentStream, Error> {
        if !sys::HAS_LOCAL_AGENT {
            // Not transient: no retry makes a local agent appear, so a `Host` fails at once.
            return Err(Error::no_agent_binary(sys::NO_LOCAL_AGENT));
        }
        let bin = self.agent_path()?;
        let mut cmd = Command::new(&bin);
        cmd.arg("bridge");
        if !options.start_agent {
            cmd.arg(NO_START_FLAG);
        }
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(match self.config.stderr {
                BridgeStderr::Log => Stdio::piped(),
                BridgeStderr::Inherit => Stdio::inherit(),
                BridgeStderr::Null => Stdio::null(),
            })
            // Only the bridge dies with the stream; the daemon it starts is its own session.
            .kill_on_drop(true);
        // A Ctrl-C typed at a cooked terminal must reach us, not kill the bridge under us.
        sys::own_process_group(&mut cmd);
        if let Some(home) = &self.config.relay_home {
            cmd.env("RELAY_HOME", home);
        }
        for (k, v) in &self.config.env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().map_err(|e| {
            Error::spawn(format!("cannot run `{} bridge`", bin.display())).caused_by(e)
        })?;
        let stdin = child.stdin.take().expect("stdin was piped");
        let stdout = child.stdout.take().expect("stdout was piped");
        let stderr = child.stderr.take().map(StderrTail::collect);
        tracing::debug!(bin = %bin.display(), pid = child.id(), "started agent bridge");
        Ok(AgentStream {
            reader: Box::pin(stdout),
            writer: Box::pin(stdin),
            guard: Box::new(BridgeGuard { child, stderr }),
        })
    }
}

impl Transport for LocalTransport {
    fn open(&self, options: OpenOptions) -> OpenFuture<'_> {
        Box::pin(self.spawn(options))
    }

    fn describe(&self) -> String {
        "local".to_string()
    }
}

/// Owns the bridge child. Dropping it kills the bridge (only the bridge: the daemon has its own
/// session and process group).
struct BridgeGuard {
    child: Child,
    /// The bridge's stderr, when it is piped ([`BridgeStderr::Log`]).
    stderr: Option<Arc<StderrTail>>,
}

/// The bridge's stderr: held back until the handshake is decided, logged afterwards.
struct StderrTail {
    state: Mutex<TailState>,
    /// Becomes `true` when the bridge closed its stderr.
    ended: watch::Receiver<bool>,
}

struct TailState {
    /// Lines are held (not logged) until [`StderrTail::release`].
    holding: bool,
    held: String,
}

impl StderrTail {
    /// Starts the task that reads `stderr` line by line.
    fn collect(stderr: impl AsyncRead + Send + Unpin + 'static) -> Arc<StderrTail> {
        let (ended_tx, ended) = watch::channel(false);
        let tail = Arc::new(StderrTail {
            state: Mutex::new(TailState {
                holding: true,
                held: String::new(),
            }),
            ended,
        });
        let sink = tail.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                sink.line(line);
            }
            let _ = ended_tx.send(true);
        });
        tail
    }

    fn state(&self) -> std::sync::MutexGuard<'_, TailState> {
        self.state.lock_unpoisoned()
    }

    fn line(&self, line: String) {
        let mut st = self.state();
        if !st.holding {
            drop(st);
            tracing::warn!(target: "relay_connector::bridge", "{line}");
            return;
        }
        st.held.push_str(&line);
        st.held.push('\n');
        if st.held.len() > STDERR_TAIL {
            let mut cut = st.held.len() - STDERR_TAIL;
            while !st.held.is_char_boundary(cut) {
                cut += 1;
            }
            st.held.drain(..cut);
        }
    }

    /// The handshake succeeded: log what was held, and every later line.
    fn release(&self) {
        let held = {
            let mut st = self.state();
            st.holding = false;
            std::mem::take(&mut st.held)
        };
        for line in held.lines() {
            tracing::warn!(target: "relay_connector::bridge", "{line}");
        }
    }

    /// The handshake failed: waits until `deadline` at most for stderr to end, then returns what
    /// was printed.
    async fn failure_text(&self, deadline: tokio::time::Instant) -> String {
        let mut ended = self.ended.clone();
        let _ = tokio::time::timeout_at(deadline, ended.wait_for(|e| *e)).await;
        strip_ansi(self.state().held.trim())
    }
}

impl StreamGuard for BridgeGuard {
    /// What the bridge printed on stderr and how it exited, if its stderr is collected and it
    /// said anything: ` (exit status: 1): <stderr>` (or `: <stderr>` when it had not exited
    /// within [`STDERR_GRACE`]).
    fn failure(&mut self) -> FailureFuture<'_> {
        Box::pin(async move {
            let deadline = tokio::time::Instant::now() + STDERR_GRACE;
            let said = self.stderr.as_ref()?.failure_text(deadline).await;
            if said.is_empty() {
                return None;
            }
            match tokio::time::timeout_at(deadline, self.child.wait()).await {
                Ok(Ok(status)) => Some(format!(" ({status}): {said}")),
                _ => Some(format!(": {said}")),
            }
        })
    }

    /// The bridge's exit code, once it has exited (within [`STDERR_GRACE`]).
    fn exit_code(&mut self) -> ExitCodeFuture<'_> {
        Box::pin(async move {
            let status = tokio::time::timeout(STDERR_GRACE, self.child.wait()).await;
            status.ok()?.ok()?.code()
        })
    }

    /// The local bridge's stderr is logged from now on.
    fn ready(&mut self) {
        if let Some(tail) = &self.stderr {
            tail.release();
        }
    }
}

/// `text` without terminal escape sequences (CSI such as colours, OSC such as titles, and
/// two-byte escapes) and without other control characters except newlines and tabs.
pub(crate) fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\u{1b}' => match chars.next() {
                // CSI: parameters and intermediates up to a final byte in @..~.
                Some('[') => {
                    for c in chars.by_ref() {
                        if ('@'..='~').contains(&c) {
                            break;
                        }
                    }
                }
                // OSC (and the other string sequences): up to BEL or ESC \.
                Some(']' | 'P' | '_' | '^' | 'X') => {
                    while let Some(c) = chars.next() {
                        if c == '\u{7}' {
                            break;
                        }
                        if c == '\u{1b}' {
                            if chars.peek() == Some(&'\\') {
                                chars.next();
                            }
                            break;
                        }
                    }
                }
                // A two-byte escape (ESC 7, ESC c, ...), or a lone ESC at the end.
                _ => {}
            },
            '\n' | '\t' => out.push(c),
            c if c.is_control() => {}
            c => out.push(c),
        }
    }
    out
}

impl Drop for BridgeGuard {
    fn drop(&mut self) {
        // `kill_on_drop` would do this too; being explicit documents that it is the bridge's pid
        // alone that is signalled. tokio reaps the zombie in the background.
        let _ = self.child.start_kill();
    }
}

/// Finds the agent binary: `explicit`, else `$RELAY_AGENT_BIN`, else next to the current
/// executable (and one directory up), else on `PATH`.
///
/// # Errors
/// [`Error::NoAgentBinary`] when an explicit setting names a missing file, or when no candidate
/// exists;
/// the message lists every place that was looked at and how to fix it.
pub fn locate_agent(explicit: Option<&Path>) -> Result<PathBuf, Error> {
    if let Some(path) = explicit {
        return check_explicit(path, "the configured agent binary");
    }
    if let Some(path) = std::env::var_os(AGENT_BIN_ENV).filter(|v| !v.is_empty()) {
        return check_explicit(Path::new(&path), AGENT_BIN_ENV);
    }
    let mut looked = Vec::new();
    if let Ok(exe) = std::env::current_exe() {
        let dir = exe.parent();
        for candidate in [dir, dir.and_then(Path::parent)].into_iter().flatten() {
            let path = candidate.join(AGENT_BIN_NAME);
            if sys::is_executable(&path) {
                return Ok(path);
            }
            looked.push(path.display().to_string());
        }
    }
    if let Some(paths) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&paths) {
            let path = dir.join(AGENT_BIN_NAME);
            if sys::is_executable(&path) {
                return Ok(path);
            }
        }
        looked.push("$PATH".to_string());
    }
    Err(Error::no_agent_binary(format!(
        "{AGENT_BIN_NAME} not found (looked in: {}); build it with `cargo build --workspace --bins`, \
         put it on PATH, or set {AGENT_BIN_ENV}",
        looked.join(", ")
    )))
}

fn check_explicit(path: &Path, source: &str) -> Result<PathBuf, Error> {
    if sys::is_executable(path) {
        Ok(path.to_path_buf())
    } else {
        Err(Error::no_agent_binary(format!(
            "{source} points at {}, which is not an executable file; fix the path or unset it",
            path.display()
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_codes_are_stripped_from_quoted_stderr() {
        assert_eq!(
            strip_ansi("\u{1b}[2m2026\u{1b}[0m \u{1b}[31mERROR\u{1b}[0m disk full\r"),
            "2026 ERROR disk full"
        );
        assert_eq!(
            strip_ansi("\u{1b}]0;title\u{7}ok\u{1b}]2;t\u{1b}\\!"),
            "ok!"
        );
        assert_eq!(strip_ansi("a\u{1b}7b\tc\nd\u{1b}"), "ab\tc\nd");
    }

    #[test]
    fn explicit_missing_binary_is_an_error_naming_the_path() {
        let err = locate_agent(Some(Path::new("/nonexistent/relay-agent"))).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("/nonexistent/relay-agent"), "{msg}");
        assert!(matches!(err, Error::NoAgentBinary { .. }));
    }

    #[cfg(unix)]
    #[test]
    fn explicit_executable_is_used_as_is() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("agent");
        std::fs::write(&path, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(locate_agent(Some(&path)).unwrap(), path);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(
            locate_agent(Some(&path)).is_err(),
            "a non-executable file is refused"
        );
    }

    /// Windows has no local agent: `--local` and the library say so instead of failing to spawn.
    #[cfg(windows)]
    #[tokio::test]
    async fn windows_has_no_local_agent() {
        let Err(err) = LocalTransport::new().open(OpenOptions::default()).await else {
            panic!("the local transport opened on Windows");
        };
        assert!(err.to_string().contains(sys::NO_LOCAL_AGENT), "{err}");
        assert!(!err.is_transient(), "a retry cannot fix it: {err:?}");
    }
}
