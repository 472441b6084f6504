//! Where the local agent binary for a host's platform comes from.
//!
//! # The default search ([`AgentSource::Default`])
//!
//! For a host of Rust target `T`, the first file that exists of:
//!
//! 1. `$RELAY_AGENT_DIR/relay-agent-T`;
//! 2. if `T` is this machine's own target: `$RELAY_AGENT_BIN`;
//! 3. `<directory of the current executable>/../agents/relay-agent-T`: the portable agents that
//!    `deploy/build-agents.sh` writes to `target/agents/` (x86_64 Linux agents there need only
//!    glibc 2.17), found from `target/debug/relay` and `target/release/relay` alike;
//! 4. if `T` is this machine's own target: `relay-agent` next to the current executable, then one
//!    directory up (cargo puts test binaries in `target/debug/deps`). Such a native build needs
//!    the glibc of the machine it was built on, so it reaches hosts of the same or a newer
//!    distribution only;
//! 5. `relay-agent-T` next to the current executable.
//!
//! For a Linux host, the static agents for its CPU (`relay-agent-<cpu>-unknown-linux-musl`, no C
//! library needed on the host: Alpine, busybox, distroless) are found the same way and offered
//! after the host's own target's ([`AgentSource::host_candidates`]); the deploy puts them first
//! when the probe did not find glibc on the host.
//!
//! A portable agent in `../agents` that is older than the native `relay-agent` next to the
//! executable (the sources changed since `deploy/build-agents.sh` last ran) comes after the native
//! build instead: [`AgentSource::candidates`] lists both, and the deploy takes the first one the
//! host can run (a stale portable agent only where the native one cannot run, with a warning).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};
use std::time::SystemTime;

use sha2::{Digest, Sha256};

use super::host_check::{self, GlibcVersion};
use super::VERSION;
use crate::Error;

/// Where to find agent binaries for a host's target.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum AgentSource {
    /// The search described in the module documentation.
    #[default]
    Default,
    /// A directory with `relay-agent-<target>` files (for the local target, a plain
    /// `relay-agent` there is used too).
    Dir(PathBuf),
    /// One binary, usable only for hosts of the connector machine's own target.
    File(PathBuf),
}

/// The Rust target for a `uname -s` / `uname -m` pair, if relay knows it.
pub fn target_for(os: &str, machine: &str) -> Option<&'static str> {
    Some(match (os, machine) {
        ("Linux", "x86_64" | "amd64") => "x86_64-unknown-linux-gnu",
        ("Linux", "aarch64" | "arm64") => "aarch64-unknown-linux-gnu",
        ("Darwin", "x86_64") => "x86_64-apple-darwin",
        ("Darwin", "arm64" | "aarch64") => "aarch64-apple-darwin",
        _ => return None,
    })
}

/// The static Linux target for the same CPU as the Linux `target`: its agent is linked with musl
/// statically, so it runs on any Linux host of that CPU whatever its C library (none, musl, or a
/// glibc older than the gnu agents' 2.17 floor). `None` for a target that is not Linux gnu.
pub fn static_target(target: &str) -> Option<&'static str> {
    match target {
        "x86_64-unknown-linux-gnu" => Some("x86_64-unknown-linux-musl"),
        "aarch64-unknown-linux-gnu" => Some("aarch64-unknown-linux-musl"),
        _ => None,
    }
}

/// The target of the machine the connector runs on.
pub fn local_target() -> Option<&'static str> {
    let os = match std::env::consts::OS {
        "linux" => "Linux",
        "macos" => "Darwin",
        other => other,
    };
    target_for(os, std::env::consts::ARCH)
}

impl AgentSource {
    /// Finds the local agent binary for `target`.
    ///
    /// # Errors
    /// [`Error::NoAgentBinary`] listing the places searched when no binary exists for `target`.
    pub fn find(&self, target: &str) -> Result<PathBuf, Error> {
        Ok(self.candidates(target)?.remove(0))
    }

    /// Every existing agent binary that can serve a host of `target`: [`AgentSource::candidates`]
    /// for `target`, then those for its [`static_target`] (never empty).
    ///
    /// # Errors
    /// [`Error::NoAgentBinary`] for `target`'s search when neither search found a binary.
    pub fn host_candidates(&self, target: &str) -> Result<Vec<PathBuf>, Error> {
        let statics = static_target(target)
            .and_then(|t| self.candidates(t).ok())
            .unwrap_or_default();
        match self.candidates(target) {
            Ok(mut found) => {
                for p in statics {
                    if !found.contains(&p) {
                        found.push(p);
                    }
                }
                Ok(found)
            }
            Err(_) if !statics.is_empty() => Ok(statics),
            Err(e) => Err(e),
        }
    }

    /// Every existing agent binary for `target`, best first (never empty): the deploy takes the
    /// first one the host can run.
    ///
    /// # Errors
    /// [`Error::NoAgentBinary`] listing the places searched when no binary exists for `target`.
    pub fn candidates(&self, target: &str) -> Result<Vec<PathBuf>, Error> {
        let is_local = local_target() == Some(target);
        let named = format!("relay-agent-{target}");
        let mut candidates: Vec<PathBuf> = Vec::new();
        match self {
            AgentSource::File(p) => {
                if !is_local {
                    return Err(Error::no_agent_binary(format!(
                        "the host needs an agent for {target}, but the configured agent binary \
                         {} is for this machine ({}); configure a directory with \
                         relay-agent-{target} in it",
                        p.display(),
                        local_target().unwrap_or("unknown")
                    )));
                }
                candidates.push(p.clone());
            }
            AgentSource::Dir(d) => {
                candidates.push(d.join(&named));
                if is_local {
                    candidates.push(d.join("relay-agent"));
                }
            }
            AgentSource::Default => {
                let exe_dir = std::env::current_exe()
                    .ok()
                    .and_then(|e| e.parent().map(Path::to_path_buf));
                return Self::search_default(&named, is_local, exe_dir.as_deref());
            }
        }
        pick(candidates, target)
    }

    /// The default search, from the executable's directory `exe_dir`.
    fn search_default(
        named: &str,
        is_local: bool,
        exe_dir: Option<&Path>,
    ) -> Result<Vec<PathBuf>, Error> {
        let target = named.trim_start_matches("relay-agent-");
        let mut candidates: Vec<PathBuf> = Vec::new();
        // An empty variable counts as unset.
        let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
        if let Some(d) = var("RELAY_AGENT_DIR") {
            candidates.push(PathBuf::from(d).join(named));
        }
        if is_local {
            if let Some(p) = var("RELAY_AGENT_BIN") {
                candidates.push(PathBuf::from(p));
            }
        }
        let portable = exe_dir
            .and_then(Path::parent)
            .map(|up| up.join("agents").join(named));
        candidates.extend(portable.clone());
        let mut native = Vec::new();
        if let (true, Some(d)) = (is_local, exe_dir) {
            native.push(d.join("relay-agent"));
            native.extend(d.parent().map(|up| up.join("relay-agent")));
        }
        candidates.extend(native.iter().cloned());
        candidates.extend(exe_dir.map(|d| d.join(named)));
        let mut found = pick(candidates, target)?;
        // A stale portable agent goes after the native build it is older than.
        if let (Some(portable), Some(native)) = (&portable, native.iter().find(|p| p.is_file())) {
            if let Some(at) = found.iter().position(|p| p == portable) {
                if is_older(portable, native) {
                    let stale = found.remove(at);
                    let native_at = found.iter().position(|p| p == native).unwrap_or(at);
                    found.insert(native_at + 1, stale);
                }
            }
        }
        Ok(found)
    }
}

/// The existing files of `candidates` (in order, no repeats), or the error listing them all.
fn pick(candidates: Vec<PathBuf>, target: &str) -> Result<Vec<PathBuf>, Error> {
    let mut found: Vec<PathBuf> = Vec::new();
    for p in candidates.iter().filter(|p| p.is_file()) {
        if !found.contains(p) {
            found.push(p.clone());
        }
    }
    if !found.is_empty() {
        return Ok(found);
    }
    Err(Error::no_agent_binary(format!(
        "no relay-agent binary for {target} (looked at {}); run deploy/build-agents.sh to \
         build the agents relay deploys, or set RELAY_AGENT_DIR to a directory holding \
         relay-agent-{target}",
        candidates
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    )))
}

/// Whether `a` was modified before `b` (false when either time is unknown).
pub(crate) fn is_older(a: &Path, b: &Path) -> bool {
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    matches!((modified(a), modified(b)), (Some(a), Some(b)) if a < b)
}

/// A local agent binary, read and hashed.
pub(crate) struct LocalAgent {
    pub(crate) bytes: Vec<u8>,
    pub(crate) sha256: String,
    /// The highest glibc symbol version it needs (`None`: static, or not glibc-linked).
    pub(crate) glibc: Option<GlibcVersion>,
    /// File name on the host: `relay-agent-<version>-<16 hex>`.
    pub(crate) name: String,
}

/// A file's size and modification time: when either changed, the file is read again.
type Stamp = (u64, Option<SystemTime>);

/// The agent binaries that connects in flight hold, shared: hosts connecting at once (a fleet
/// after the laptop wakes) read and hash each binary once instead of once per host. Only weak
/// references: a binary is freed when the last connect using it is done.
static LOADED: tokio::sync::Mutex<Vec<(PathBuf, Stamp, Weak<LocalAgent>)>> =
    tokio::sync::Mutex::const_new(Vec::new());

impl LocalAgent {
    /// The agent binary at `path`, read and hashed, or the copy a connect in flight already
    /// holds when the file's size and modification time are still the same.
    ///
    /// # Errors
    /// [`Error::Deploy`] when the file cannot be read; [`Error::NoAgentBinary`] when it is not
    /// an ELF executable the deploy can check.
    pub(crate) async fn load(path: &Path) -> Result<Arc<Self>, Error> {
        let unreadable =
            |e| Error::deploy(format!("cannot read agent binary {}", path.display())).caused_by(e);
        let meta = tokio::fs::metadata(path).await.map_err(unreadable)?;
        let stamp = (meta.len(), meta.modified().ok());
        // Held while reading: a second connect waits for the first read instead of its own.
        let mut loaded = LOADED.lock().await;
        loaded.retain(|(_, _, agent)| agent.strong_count() > 0);
        let held = loaded
            .iter()
            .find(|(p, s, _)| p == path && *s == stamp)
            .and_then(|(_, _, agent)| agent.upgrade());
        if let Some(agent) = held {
            return Ok(agent);
        }
        let bytes = tokio::fs::read(path).await.map_err(unreadable)?;
        let agent = Arc::new(Self::check(path, bytes).await?);
        loaded.push((path.to_path_buf(), stamp, Arc::downgrade(&agent)));
        Ok(agent)
    }

    /// Hashes `bytes`, read from `path`, and reads the glibc it needs.
    async fn check(path: &Path, bytes: Vec<u8>) -> Result<Self, Error> {
        let (bytes, sha256, glibc) = tokio::task::spawn_blocking(move || {
            let hash = hex::encode(Sha256::digest(&bytes));
            let glibc = host_check::glibc_needed(&bytes);
            (bytes, hash, glibc)
        })
        .await
        .map_err(|e| Error::deploy("hashing the agent binary failed").caused_by(e))?;
        let glibc = glibc.map_err(|e| {
            Error::no_agent_binary(format!(
                "{} is not a valid agent binary (rebuild it)",
                path.display()
            ))
            .caused_by(e)
        })?;
        let name = format!("relay-agent-{VERSION}-{}", &sha256[..16]);
        Ok(LocalAgent {
            bytes,
            sha256,
            glibc,
            name,
        })
    }
}

// Only a Linux desktop has a native build of the agent.
#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn a_linux_host_is_offered_its_own_agents_then_the_static_ones() {
        let dir = tempfile::tempdir().unwrap();
        let source = AgentSource::Dir(dir.path().to_path_buf());
        let gnu = dir.path().join("relay-agent-aarch64-unknown-linux-gnu");
        let musl = dir.path().join("relay-agent-aarch64-unknown-linux-musl");
        let err = source
            .host_candidates("aarch64-unknown-linux-gnu")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("relay-agent-aarch64-unknown-linux-gnu"),
            "{err}"
        );
        std::fs::write(&musl, b"static").unwrap();
        assert_eq!(
            source.host_candidates("aarch64-unknown-linux-gnu").unwrap(),
            vec![musl.clone()],
            "the static agent alone serves the host"
        );
        std::fs::write(&gnu, b"gnu").unwrap();
        assert_eq!(
            source.host_candidates("aarch64-unknown-linux-gnu").unwrap(),
            vec![gnu, musl]
        );
        assert_eq!(static_target("aarch64-apple-darwin"), None);
        assert!(source.host_candidates("aarch64-apple-darwin").is_err());
    }

    #[tokio::test]
    async fn hosts_connecting_at_once_share_one_read_of_the_agent() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("relay-agent");
        std::fs::copy("/bin/true", &path).unwrap();
        let (a, b) = tokio::join!(LocalAgent::load(&path), LocalAgent::load(&path));
        let (a, b) = (a.unwrap(), b.unwrap());
        assert!(Arc::ptr_eq(&a, &b), "one read for both connects");
        // A rebuilt binary is read again, while connects still hold the old one.
        let mut rebuilt = std::fs::read(&path).unwrap();
        rebuilt.extend_from_slice(b"rebuilt");
        std::fs::write(&path, &rebuilt).unwrap();
        let c = LocalAgent::load(&path).await.unwrap();
        assert!(!Arc::ptr_eq(&a, &c), "the new file, not the copy held");
        assert_ne!(a.sha256, c.sha256);
        assert_eq!(c.bytes, rebuilt);
        // Once no connect holds it, it is freed, not kept for the process's life.
        let weak = Arc::downgrade(&c);
        drop((a, b, c));
        assert!(weak.upgrade().is_none());
    }

    #[test]
    fn the_portable_agents_directory_wins_over_the_native_build() {
        let root = tempfile::tempdir().unwrap();
        let bin = root.path().join("debug");
        let agents = root.path().join("agents");
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::create_dir_all(&agents).unwrap();
        let t = local_target().unwrap();
        let named = format!("relay-agent-{t}");
        std::fs::write(bin.join("relay-agent"), b"native").unwrap();
        let found = AgentSource::search_default(&named, true, Some(&bin)).unwrap();
        assert_eq!(
            found,
            vec![bin.join("relay-agent")],
            "no portable agent: the native one"
        );
        let set_mtime = |p: &Path, secs: u64| {
            let t = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(secs);
            std::fs::File::options()
                .write(true)
                .open(p)
                .unwrap()
                .set_modified(t)
                .unwrap();
        };
        std::fs::write(agents.join(&named), b"portable").unwrap();
        set_mtime(&bin.join("relay-agent"), 1_000_000);
        set_mtime(&agents.join(&named), 2_000_000);
        let found = AgentSource::search_default(&named, true, Some(&bin)).unwrap();
        assert_eq!(found, vec![agents.join(&named), bin.join("relay-agent")]);
        // The agent's sources changed since build-agents.sh ran: the native build first.
        set_mtime(&agents.join(&named), 500_000);
        let found = AgentSource::search_default(&named, true, Some(&bin)).unwrap();
        assert_eq!(found, vec![bin.join("relay-agent"), agents.join(&named)]);
        // Another platform: never the native binary.
        std::fs::remove_file(agents.join(&named)).unwrap();
        let other = "relay-agent-aarch64-apple-darwin";
        let err = AgentSource::search_default(other, false, Some(&bin)).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("deploy/build-agents.sh"), "{text}");
        assert!(
            text.contains(&agents.join(other).display().to_string()),
            "{text}"
        );
    }
}
