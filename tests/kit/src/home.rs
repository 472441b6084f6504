//! A private `RELAY_HOME` for one test, whose processes end with it.

use std::ffi::OsString;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::procs::{self, Proc};

/// How long a daemon gets for its orderly shutdown (SIGTERM) when a [`TempHome`] drops, before
/// SIGKILL.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// A temporary `RELAY_HOME` under `/tmp` (short, so `run/agent.sock` fits the 108 bytes of a Unix
/// socket path), with an empty `home/` inside it that becomes the shells' `HOME`.
///
/// Dropping it ends every process whose environment carries `RELAY_HOME=<this home>`: clients
/// and bridges first (SIGKILL), so that no straggling bridge starts a new daemon in the removed
/// directory; the daemon gets SIGTERM and, after [`SHUTDOWN_GRACE`], SIGKILL.
pub struct TempHome {
    dir: tempfile::TempDir,
}

impl TempHome {
    /// A fresh, empty home whose directory name starts with `prefix`. Panics if `/tmp` is not
    /// writable (a test cannot run without it).
    pub fn new(prefix: &str) -> TempHome {
        let dir = tempfile::Builder::new()
            .prefix(prefix)
            .tempdir_in("/tmp")
            .expect("a temp dir under /tmp");
        std::fs::create_dir(dir.path().join("home")).expect("creating the shells' HOME");
        TempHome { dir }
    }

    /// The `RELAY_HOME` directory.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// The agent's socket, `run/agent.sock`.
    pub fn socket(&self) -> PathBuf {
        self.path().join("run/agent.sock")
    }

    /// The agent's log, `log/agent.log` (empty until it writes).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.path().join("log/agent.log")).unwrap_or_default()
    }

    /// What every relay process of this home gets besides `RELAY_HOME`:
    /// - `HOME` = the empty `home/`, so login shells read no dotfiles of the machine's user (a
    ///   slow or locking profile must not decide whether a test passes);
    /// - `RELAY_EXIT_OUTPUT_GRACE_MS=5000`: a loaded test machine may need longer than the
    ///   default 500 ms to drain a PTY that exited, and tests compare exact output before the
    ///   exit.
    pub fn env(&self) -> Vec<(OsString, OsString)> {
        vec![
            ("HOME".into(), self.path().join("home").into()),
            ("RELAY_EXIT_OUTPUT_GRACE_MS".into(), "5000".into()),
        ]
    }

    /// `program` with `RELAY_HOME` and [`TempHome::env`] set.
    pub fn command(&self, program: &Path) -> Command {
        let mut cmd = Command::new(program);
        cmd.env("RELAY_HOME", self.path()).envs(self.env());
        cmd
    }

    /// Runs `AGENT daemon` (it detaches and returns once it listens) with `extra` environment.
    /// Panics with the daemon's stderr when it cannot start.
    pub fn start_daemon(&self, agent: &Path, extra: &[(&str, &str)]) {
        let out = self
            .command(agent)
            .arg("daemon")
            .envs(extra.iter().copied())
            .stdin(Stdio::null())
            .output()
            .expect("running relay-agent daemon");
        assert!(
            out.status.success(),
            "relay-agent daemon failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Live processes of this home (daemon, bridges, clients), found by `RELAY_HOME` in their
    /// environment.
    pub fn processes(&self) -> Vec<Proc> {
        let marker = self.marker();
        procs::all()
            .into_iter()
            .filter(|p| p.has_env(&marker))
            .collect()
    }

    /// Pids of this home's processes whose first argument is `arg1` (`daemon`, `bridge`).
    pub fn pids_running(&self, arg1: &str) -> Vec<u32> {
        self.processes()
            .into_iter()
            .filter(|p| p.arg(1) == Some(arg1))
            .map(|p| p.pid)
            .collect()
    }

    /// Whether a daemon holds this home's `run/daemon.lock`.
    pub fn daemon_running(&self) -> bool {
        let Ok(file) = File::open(self.path().join("run/daemon.lock")) else {
            return false;
        };
        match nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockSharedNonblock) {
            Ok(lock) => {
                drop(lock);
                false
            }
            Err(_) => true,
        }
    }

    fn marker(&self) -> String {
        format!("RELAY_HOME={}", self.path().display())
    }
}

impl Drop for TempHome {
    fn drop(&mut self) {
        let deadline = Instant::now() + SHUTDOWN_GRACE;
        loop {
            let procs = self.processes();
            if procs.is_empty() {
                return;
            }
            for p in procs {
                let signal = if p.arg(1) == Some("daemon") && Instant::now() < deadline {
                    Signal::SIGTERM
                } else {
                    Signal::SIGKILL
                };
                let _ = kill(Pid::from_raw(p.pid as i32), signal);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_of_the_home_ends_when_it_drops_and_others_do_not() {
        let home = TempHome::new("rk-");
        let path = home.path().to_path_buf();
        assert!(path.join("home").is_dir());
        let sleep = Path::new("/bin/sleep");
        let mut ours = home.command(sleep).arg("30.5").spawn().unwrap();
        let mut other = Command::new(sleep).arg("30.5").spawn().unwrap();
        assert!(crate::procs::alive(ours.id()));
        assert_eq!(
            home.processes().iter().map(|p| p.pid).collect::<Vec<_>>(),
            vec![ours.id()]
        );
        drop(home);
        assert!(ours.wait().unwrap().code().is_none(), "killed by a signal");
        assert!(!path.exists());
        assert!(procs::alive(other.id()));
        other.kill().unwrap();
        other.wait().unwrap();
    }
}
