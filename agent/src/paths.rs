//! The `$RELAY_HOME` layout (team convention; default `~/.relay`).
//!
//! ```text
//! $RELAY_HOME/run/          mode 0700: agent.sock, daemon.lock, spawn.lock
//! $RELAY_HOME/state/        mode 0700: leases.journal (0600: it holds command lines)
//! $RELAY_HOME/log/          mode 0700: agent.log (0600)
//! ```
//!
//! `run/` must be a real directory owned by this user: a symbolic link there is refused (never
//! followed and chmodded). `state/` and `log/` may be links (e.g. to another disk); they are
//! created 0700 and only tightened when they are real directories.
//!
//! The socket path does not depend on the agent version, so any connector reaches a running
//! daemon and negotiates (DESIGN §4).

use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
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

    /// `bin/`: where deploy installs agent binaries (`relay-agent-<version>-<hash>`), so where a
    /// live upgrade looks for the newest one.
    pub fn agent_bin_dir(&self) -> PathBuf {
        self.home.join("bin")
    }

    /// `log/`.
    pub fn log_dir(&self) -> PathBuf {
        self.home.join("log")
    }

    /// Creates `run/` with mode 0700 (tightening an existing one) and checks that it is a real
    /// directory belonging to this user.
    ///
    /// # Errors
    /// IO errors; a symbolic link, a non-directory or a directory owned by someone else at
    /// `run/`; a socket path too long for Unix sockets. Each names the path and the fix.
    pub fn prepare_run_dir(&self) -> io::Result<()> {
        let dir = self.run_dir();
        // Checked before creating too: a dangling link would otherwise fail as "File exists".
        refuse_link(&dir)?;
        create_private(&dir)?;
        refuse_link(&dir)?;
        let meta = fs::symlink_metadata(&dir).map_err(|e| annotate(e, "inspect", &dir))?;
        if !meta.is_dir() {
            return Err(io::Error::other(format!(
                "{} is not a directory; remove it (it is recreated as a private directory) or set \
                 RELAY_HOME elsewhere",
                dir.display()
            )));
        }
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

    /// Creates `state/` and `log/` with mode 0700, tightening existing real directories of this
    /// user to 0700 (links are left alone).
    ///
    /// # Errors
    /// IO errors, naming the directory.
    pub fn prepare_data_dirs(&self) -> io::Result<()> {
        let uid = nix::unistd::getuid().as_raw();
        for dir in [self.home.join("state"), self.log_dir()] {
            create_private(&dir)?;
            let meta = fs::symlink_metadata(&dir).map_err(|e| annotate(e, "inspect", &dir))?;
            if meta.is_dir() && meta.uid() == uid && meta.permissions().mode() & 0o077 != 0 {
                fs::set_permissions(&dir, fs::Permissions::from_mode(0o700))
                    .map_err(|e| annotate(e, "chmod 0700", &dir))?;
            }
        }
        Ok(())
    }
}

/// Refuses a symbolic link at `dir` (run/ is never followed), naming it and its target.
fn refuse_link(dir: &Path) -> io::Result<()> {
    match fs::symlink_metadata(dir) {
        Ok(m) if m.file_type().is_symlink() => {
            let target = fs::read_link(dir)
                .map(|t| t.display().to_string())
                .unwrap_or_else(|e| format!("unreadable: {e}"));
            Err(io::Error::other(format!(
                "{} is a symbolic link (to {target}); relay keeps its socket only in a real \
                 directory it owns: remove the link (it is recreated as a private directory) or \
                 set RELAY_HOME elsewhere",
                dir.display()
            )))
        }
        _ => Ok(()),
    }
}

/// Creates `dir` and missing parents with mode 0700 (an existing directory, or a link to one,
/// is left as it is).
fn create_private(dir: &Path) -> io::Result<()> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| annotate(e, "create", dir))
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

    /// Regression: a symlinked `run/` had its target chmodded 0700. It is refused, naming the
    /// link, and the target keeps its mode.
    #[test]
    fn symlinked_run_dir_is_refused_and_its_target_untouched() {
        let tmp = std::env::temp_dir().join(format!("relay-paths-link-{}", std::process::id()));
        let _ = fs::remove_dir_all(&tmp);
        let target = tmp.join("shared");
        fs::create_dir_all(&target).unwrap();
        fs::set_permissions(&target, fs::Permissions::from_mode(0o755)).unwrap();
        let p = Paths::new(tmp.join("home")).unwrap();
        fs::create_dir_all(p.home()).unwrap();
        std::os::unix::fs::symlink(&target, p.run_dir()).unwrap();
        let err = p.prepare_run_dir().unwrap_err().to_string();
        let mode = fs::metadata(&target).unwrap().permissions().mode() & 0o777;
        fs::remove_dir_all(&tmp).unwrap();
        assert!(err.contains("is a symbolic link"), "{err}");
        assert!(err.contains(&p.run_dir().display().to_string()), "{err}");
        assert_eq!(mode, 0o755, "the link's target was not chmodded");
    }

    #[test]
    fn data_dirs_are_created_private() {
        let tmp = std::env::temp_dir().join(format!("relay-paths-data-{}", std::process::id()));
        let _ = fs::remove_dir_all(&tmp);
        let p = Paths::new(&tmp).unwrap();
        fs::create_dir_all(p.log_dir()).unwrap();
        fs::set_permissions(p.log_dir(), fs::Permissions::from_mode(0o755)).unwrap();
        p.prepare_data_dirs().unwrap();
        let mode = |d: PathBuf| fs::metadata(d).unwrap().permissions().mode() & 0o777;
        let modes = (mode(tmp.join("state")), mode(p.log_dir()));
        fs::remove_dir_all(&tmp).unwrap();
        assert_eq!(modes, (0o700, 0o700));
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
