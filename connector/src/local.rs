//! The local transport: runs `relay-agent bridge` as a child process and talks to it over the
//! child's stdin and stdout.
//!
//! This is the embedded default for `relay shell --local` and for fast tests: same protocol and
//! same daemon as over SSH, without SSH. The bridge starts the per-user daemon if none answers;
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

use std::ffi::OsString;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::transport::{AgentStream, OpenFuture, Transport};
use crate::Error;

/// File name of the agent binary.
pub const AGENT_BIN_NAME: &str = "relay-agent";

/// Environment variable naming the agent binary explicitly.
pub const AGENT_BIN_ENV: &str = "RELAY_AGENT_BIN";

/// What happens to the bridge's stderr (its diagnostics; it never carries frames).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum BridgeStderr {
    /// Each line is logged with `tracing` at warn level (target `relay_connector::bridge`).
    /// The default: a terminal in raw mode is not scribbled on.
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
    /// [`Error::Spawn`] naming every place that was looked at.
    pub fn agent_path(&self) -> Result<PathBuf, Error> {
        locate_agent(self.config.agent_bin.as_deref())
    }

    async fn spawn(&self) -> Result<AgentStream, Error> {
        let bin = self.agent_path()?;
        let mut cmd = Command::new(&bin);
        cmd.arg("bridge")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(match self.config.stderr {
                BridgeStderr::Log => Stdio::piped(),
                BridgeStderr::Inherit => Stdio::inherit(),
                BridgeStderr::Null => Stdio::null(),
            })
            // Only the bridge dies with the stream; the daemon it starts is its own session.
            .kill_on_drop(true)
            // A Ctrl-C typed at a cooked terminal must reach us, not kill the bridge under us.
            .process_group(0);
        if let Some(home) = &self.config.relay_home {
            cmd.env("RELAY_HOME", home);
        }
        for (k, v) in &self.config.env {
            cmd.env(k, v);
        }
        let mut child = cmd
            .spawn()
            .map_err(|e| Error::Spawn(format!("cannot run `{} bridge`: {e}", bin.display())))?;
        let stdin = child.stdin.take().expect("stdin was piped");
        let stdout = child.stdout.take().expect("stdout was piped");
        if let Some(stderr) = child.stderr.take() {
            tokio::spawn(async move {
                let mut lines = BufReader::new(stderr).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    tracing::warn!(target: "relay_connector::bridge", "{line}");
                }
            });
        }
        tracing::debug!(bin = %bin.display(), pid = child.id(), "started agent bridge");
        Ok(AgentStream {
            reader: Box::pin(stdout),
            writer: Box::pin(stdin),
            guard: Box::new(BridgeGuard { child }),
        })
    }
}

impl Transport for LocalTransport {
    fn open(&self) -> OpenFuture<'_> {
        Box::pin(self.spawn())
    }

    fn describe(&self) -> String {
        "local".to_string()
    }
}

/// Owns the bridge child. Dropping it kills the bridge (only the bridge: the daemon has its own
/// session and process group).
struct BridgeGuard {
    child: Child,
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
/// [`Error::Spawn`] when an explicit setting names a missing file, or when no candidate exists;
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
            if is_executable(&path) {
                return Ok(path);
            }
            looked.push(path.display().to_string());
        }
    }
    if let Some(paths) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&paths) {
            let path = dir.join(AGENT_BIN_NAME);
            if is_executable(&path) {
                return Ok(path);
            }
        }
        looked.push("$PATH".to_string());
    }
    Err(Error::Spawn(format!(
        "{AGENT_BIN_NAME} not found (looked in: {}); build it with `cargo build --workspace --bins`, \
         put it on PATH, or set {AGENT_BIN_ENV}",
        looked.join(", ")
    )))
}

fn check_explicit(path: &Path, source: &str) -> Result<PathBuf, Error> {
    if is_executable(path) {
        Ok(path.to_path_buf())
    } else {
        Err(Error::Spawn(format!(
            "{source} points at {}, which is not an executable file; fix the path or unset it",
            path.display()
        )))
    }
}

fn is_executable(path: &Path) -> bool {
    path.metadata()
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn explicit_missing_binary_is_an_error_naming_the_path() {
        let err = locate_agent(Some(Path::new("/nonexistent/relay-agent"))).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("/nonexistent/relay-agent"), "{msg}");
        assert!(matches!(err, Error::Spawn(_)));
    }

    #[test]
    fn explicit_executable_is_used_as_is() {
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
}
