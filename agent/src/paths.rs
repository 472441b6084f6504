//! The `$RELAY_HOME` layout (team convention; default `~/.relay`).
//!
//! ```text
//! $RELAY_HOME/run/          mode 0700: agent.sock, daemon.lock, spawn.lock
//! $RELAY_HOME/state/        leases.journal
//! $RELAY_HOME/log/          agent.log
//! ```
//!
//! The socket path does not depend on the agent version, so any connector reaches a running
//! daemon and negotiates (DESIGN §4).

use std::fs;
use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Longest Unix socket path Linux accepts (`sun_path` is 108 bytes including the NUL).
const MAX_SOCKET_PATH: usize = 107;

/// Paths under one `$RELAY_HOME`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Paths {
    home: PathBuf,
}

impl Paths {
    /// Paths under `home` (made absolute against the current directory).
    pub fn new(home: impl AsRef<Path>) -> io::Result<Self> {
        Ok(Paths {
            home: std::path::absolute(home.as_ref())?,
        })
    }

    /// `$RELAY_HOME`, else `$HOME/.relay`.
    ///
    /// # Errors
    /// When neither `RELAY_HOME` nor `HOME` is set.
    pub fn from_env() -> io::Result<Self> {
        if let Some(home) = std::env::var_os("RELAY_HOME").filter(|h| !h.is_empty()) {
            return Paths::new(home);
        }
        match std::env::var_os("HOME").filter(|h| !h.is_empty()) {
            Some(home) => Paths::new(Path::new(&home).join(".relay")),
            None => Err(io::Error::other(
                "neither RELAY_HOME nor HOME is set; set RELAY_HOME to the agent's state directory",
            )),
        }
    }

    /// `$RELAY_HOME`.
    pub fn home(&self) -> &Path {
        &self.home
    }

    /// `run/` (mode 0700).
    pub fn run_dir(&self) -> PathBuf {
        self.home.join("run")
    }

    /// `run/agent.sock`, the daemon's Unix socket.
    pub fn socket(&self) -> PathBuf {
        self.run_dir().join("agent.sock")
    }

    /// `run/daemon.lock`, flocked by the running daemon for its whole life.
    pub fn daemon_lock(&self) -> PathBuf {
        self.run_dir().join("daemon.lock")
    }

    /// `run/spawn.lock`, flocked by a bridge while it starts a daemon.
    pub fn spawn_lock(&self) -> PathBuf {
        self.run_dir().join("spawn.lock")
    }

    /// `state/leases.journal`.
    pub fn journal(&self) -> PathBuf {
        self.home.join("state").join("leases.journal")
    }

    /// `log/`.
    pub fn log_dir(&self) -> PathBuf {
        self.home.join("log")
    }

    /// Creates `run/` with mode 0700 (tightening an existing one) and checks that it belongs to
    /// this user.
    ///
    /// # Errors
    /// IO errors, a directory owned by someone else, or a socket path too long for Unix sockets.
    pub fn prepare_run_dir(&self) -> io::Result<()> {
        let dir = self.run_dir();
        fs::create_dir_all(&dir).map_err(|e| annotate(e, "create", &dir))?;
        let meta = fs::metadata(&dir).map_err(|e| annotate(e, "inspect", &dir))?;
        let uid = nix::unistd::getuid().as_raw();
        if meta.uid() != uid {
            return Err(io::Error::other(format!(
                "{} belongs to uid {}, not to this user (uid {uid}); remove it or set RELAY_HOME",
                dir.display(),
                meta.uid()
            )));
        }
        if meta.permissions().mode() & 0o777 != 0o700 {
            fs::set_permissions(&dir, fs::Permissions::from_mode(0o700))
                .map_err(|e| annotate(e, "chmod 0700", &dir))?;
        }
        let sock = self.socket();
        if sock.as_os_str().len() > MAX_SOCKET_PATH {
            return Err(io::Error::other(format!(
                "socket path {} is longer than {MAX_SOCKET_PATH} bytes; choose a shorter RELAY_HOME",
                sock.display()
            )));
        }
        Ok(())
    }

    /// Creates `state/` and `log/`.
    ///
    /// # Errors
    /// IO errors, naming the directory.
    pub fn prepare_data_dirs(&self) -> io::Result<()> {
        for dir in [self.home.join("state"), self.log_dir()] {
            fs::create_dir_all(&dir).map_err(|e| annotate(e, "create", &dir))?;
        }
        Ok(())
    }
}

/// Adds what was being done and to which path to an IO error.
pub fn annotate(e: io::Error, what: &str, path: &Path) -> io::Error {
    io::Error::new(e.kind(), format!("{what} {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_is_fixed_under_home() {
        let p = Paths::new("/h").unwrap();
        let got = [
            p.socket(),
            p.daemon_lock(),
            p.spawn_lock(),
            p.journal(),
            p.log_dir(),
        ];
        let want = [
            "/h/run/agent.sock",
            "/h/run/daemon.lock",
            "/h/run/spawn.lock",
            "/h/state/leases.journal",
            "/h/log",
        ];
        for (g, w) in got.iter().zip(want) {
            assert_eq!(g, Path::new(w));
        }
    }

    #[test]
    fn run_dir_is_created_private() {
        let tmp = std::env::temp_dir().join(format!("relay-paths-{}", std::process::id()));
        let p = Paths::new(&tmp).unwrap();
        fs::create_dir_all(p.run_dir()).unwrap();
        fs::set_permissions(p.run_dir(), fs::Permissions::from_mode(0o755)).unwrap();
        p.prepare_run_dir().unwrap();
        let mode = fs::metadata(p.run_dir()).unwrap().permissions().mode() & 0o777;
        fs::remove_dir_all(&tmp).unwrap();
        assert_eq!(mode, 0o700);
    }
}
