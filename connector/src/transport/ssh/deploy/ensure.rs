//! The deploy steps: probe the host, check that it can run the local agent, upload it when it
//! is absent, and the bridge command that verifies the installed file before running it (see
//! the [module documentation](super) for the whole sequence).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use russh::client::Handle;

use super::agent_source::{is_older, static_target, target_for, AgentSource, LocalAgent};
use super::events::{DeployEvent, DeployReport, ProgressCallback};
use super::host_check::{self, HostFacts, HostLibc};
use super::upload::{self, hash_of, Packing};
use super::VERSION;
use crate::transport::ssh::destination::sh_quote;
use crate::transport::ssh::exec::{self, after_sentinel, sentinel, sh_command};
use crate::transport::ssh::handler::ClientHandler;
use crate::Error;

/// Exit status of the bridge command when the installed agent's sha256 is not the expected one
/// (the file is not executed).
pub(crate) const BRIDGE_HASH_MISMATCH: u32 = 97;

/// What the bridge command needs to check and run an installed agent: its file name in
/// `~/.relay/bin`, size and sha256. Small, so a transport keeps it between connections and
/// a reconnect runs the bridge without probing the host again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Installed {
    /// `relay-agent-<version>-<16 hex>`.
    name: String,
    /// Size in bytes.
    size: u64,
    /// sha256, hex.
    sha256: String,
}

/// An agent installed on the host (uploaded and verified, or found by name: the bridge command
/// verifies it), with the local binary kept for replacing a corrupt file.
pub(crate) struct Deployed {
    agent: Arc<LocalAgent>,
    /// How an upload to this host travels.
    packing: Packing,
    /// What was done.
    pub(crate) report: DeployReport,
    started: Instant,
}

impl Deployed {
    /// Replaces the installed file, which the bridge command found corrupt
    /// ([`BRIDGE_HASH_MISMATCH`]): uploads and verifies the local binary again.
    ///
    /// # Errors
    /// As [`ensure_agent`]'s upload.
    pub(crate) async fn replace_corrupt(
        &mut self,
        handle: &Handle<ClientHandler>,
        progress: Option<&ProgressCallback>,
    ) -> Result<(), Error> {
        tracing::warn!(
            file = %self.report.remote_path,
            expected = %self.agent.sha256,
            "deployed agent has the wrong sha256 (corrupt); replacing it"
        );
        self.report.replaced_corrupt = true;
        upload::install(
            handle,
            &self.agent,
            self.packing,
            progress,
            &mut self.report,
        )
        .await?;
        self.report.elapsed = self.started.elapsed();
        Ok(())
    }

    /// What the bridge command checks and runs.
    pub(crate) fn installed(&self) -> Installed {
        Installed {
            name: self.agent.name.clone(),
            size: self.agent.bytes.len() as u64,
            sha256: self.agent.sha256.clone(),
        }
    }
}

/// Exit status of the bridge command when the host could not hash the installed agent (not a
/// sign of corruption: nothing is replaced).
pub(crate) const BRIDGE_HASH_FAILED: u32 = 98;

/// The probe's line saying a daemon may be running.
const DAEMON_SOCKET: &str = "daemon-socket=yes";

/// Probe snippet for connect-only opens: prints [`DAEMON_SOCKET`] when `~/.relay/run/agent.sock`
/// exists and its daemon may be running: the daemon holds an exclusive `flock` on
/// `run/daemon.lock` for its whole life, so a lock that `flock -n` can take means the socket is a
/// leftover (a killed daemon, a reboot). Without `flock(1)` the socket alone counts.
const DAEMON_CHECK: &str = "r=\"$HOME/.relay/run\"; if [ -S \"$r/agent.sock\" ]; then \
     if command -v flock >/dev/null 2>&1 && [ -f \"$r/daemon.lock\" ] && \
     flock -n \"$r/daemon.lock\" true 2>/dev/null; then :; else echo daemon-socket=yes; fi; fi;";

/// Prefix of the probe's line naming the host's sha256 tool.
const HASH_TOOL: &str = "hash-tool=";

/// The probe's line saying the host can unpack a gzip upload.
const GZIP: &str = "unpack=gzip";

/// What the probe found on the host.
#[derive(Debug, PartialEq, Eq)]
struct Probe {
    /// `uname -sm` output.
    platform: String,
    /// Rust target for it.
    target: &'static str,
    /// What decides whether the host can run an agent binary.
    facts: HostFacts,
    /// Whether a daemon socket exists (`~/.relay/run/agent.sock`): a daemon of any version may
    /// be running.
    daemon_socket: bool,
    /// Whether the host has `gzip` (an upload is then compressed).
    gzip: bool,
    /// Path of every installed agent of this connector version.
    installed: Vec<String>,
}

/// Parses the probe's output after its sentinel: the `uname -sm` line, the hash tool line, the
/// keyed lines of [`host_check::PROBE_SNIPPET`], then one path per installed agent (absolute).
///
/// # Errors
/// [`Error::NoAgentBinary`] for an unsupported platform, [`Error::AgentCannotRun`] for a host with
/// no sha256 tool (an upload could never be verified there).
fn parse_probe(answer: &str) -> Result<Probe, Error> {
    let mut lines = answer.lines();
    let platform = lines.next().unwrap_or_default().trim().to_string();
    let mut parts = platform.split_whitespace();
    let (os, machine) = (
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
    );
    let Some(target) = target_for(os, machine) else {
        return Err(Error::no_agent_binary(format!(
            "no agent for the host's platform {platform:?} (`uname -sm`); relay has agents \
             for Linux x86_64 and aarch64 only (deploy/build-agents.sh)"
        )));
    };
    let tool = lines.next().unwrap_or_default().trim();
    match tool.strip_prefix(HASH_TOOL) {
        Some("sha256sum" | "shasum") => {}
        _ => {
            return Err(Error::AgentCannotRun(
                "the host has neither sha256sum nor shasum, so relay cannot verify the agent \
                 binary it would upload; install coreutils (or perl's shasum) on the host"
                    .to_string(),
            ))
        }
    }
    let (paths, keyed): (Vec<&str>, Vec<&str>) = lines
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .partition(|l| l.starts_with('/'));
    Ok(Probe {
        platform,
        target,
        daemon_socket: keyed.contains(&DAEMON_SOCKET),
        gzip: keyed.contains(&GZIP),
        facts: host_check::facts_from_probe(keyed.into_iter()),
        installed: paths.into_iter().map(str::to_string).collect(),
    })
}

/// Makes sure the agent is installed on the host; uploads and verifies it when it is absent.
/// With `start_agent` off (connect to a running daemon only), nothing is uploaded to a host that
/// has neither this agent nor a daemon socket.
///
/// # Errors
/// [`Error::Deploy`] for an unsupported platform, a missing local binary, or a failed upload or
/// verification; [`Error::AgentCannotRun`] when the host can run none of the local candidates;
/// [`Error::NoAgent`] as above; [`Error::Ssh`] when the connection fails meanwhile.
pub(crate) async fn ensure_agent(
    handle: &Handle<ClientHandler>,
    source: &AgentSource,
    progress: Option<&ProgressCallback>,
    start_agent: bool,
) -> Result<Deployed, Error> {
    let started = Instant::now();
    let emit = |ev: DeployEvent| {
        if let Some(cb) = progress {
            cb(&ev);
        }
    };

    // 1. Probe.
    let mark = sentinel();
    let probe = format!(
        "echo {mark}; uname -sm; if command -v sha256sum >/dev/null 2>&1; then echo {HASH_TOOL}sha256sum; \
         elif command -v shasum >/dev/null 2>&1; then echo {HASH_TOOL}shasum; \
         else echo {HASH_TOOL}none; fi; command -v gzip >/dev/null 2>&1 && echo {GZIP}; \
         {facts}; {daemon_check} for f in \"$HOME/.relay/bin\"/relay-agent-{VERSION}-*; do \
         [ -f \"$f\" ] && echo \"$f\"; done; exit 0",
        facts = host_check::PROBE_SNIPPET,
        daemon_check = if start_agent { "" } else { DAEMON_CHECK },
    );
    let out = exec::run(handle, &sh_command(&probe), None, &mut |_, _| {}).await?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let Some(answer) = after_sentinel(&stdout, &mark) else {
        return Err(Error::deploy(format!(
            "the host did not run the probe command ({}; stderr: {:?}); is `sh` \
             available and does the login shell allow running commands?",
            exec::status_text(out.status),
            out.stderr_text()
        )));
    };
    let probe = parse_probe(answer)?;
    let (platform, target) = (probe.platform, probe.target);
    emit(DeployEvent::Probed {
        platform: platform.clone(),
        target: target.to_string(),
    });

    // 2. The local binary for that target: the first candidate the host can run. Where the
    // probe did not find glibc, a static agent goes first: a glibc-linked one could not start.
    let paths = match source.host_candidates(target) {
        Ok(paths) => paths,
        Err(e) => return Err(no_local_agent(e, source, &probe.facts, target)),
    };
    let mut loaded = Vec::new();
    for path in &paths {
        let agent = LocalAgent::load(path).await;
        loaded.push((path, agent));
    }
    if !matches!(probe.facts.libc, HostLibc::Glibc(_)) {
        loaded.sort_by_key(|(_, agent)| !matches!(agent, Ok(a) if a.glibc.is_none()));
    }
    let mut refused: Option<Error> = None;
    let mut chosen = None;
    for (path, agent) in loaded {
        // An unreadable or broken candidate is skipped like one the host cannot run.
        let checked = agent.and_then(|agent| {
            host_check::check(&probe.facts, agent.glibc, path, target).map(|()| agent)
        });
        match checked {
            Ok(agent) => {
                warn_if_stale(path, &paths, refused.as_ref());
                chosen = Some(agent);
                break;
            }
            Err(e) => refused = refused.or(Some(e)),
        }
    }
    let Some(agent) = chosen else {
        return Err(refused.expect("candidates is never empty"));
    };
    let remote_path = format!(".relay/bin/{}", agent.name);
    let mut report = DeployReport {
        platform,
        target: target.to_string(),
        remote_path: remote_path.clone(),
        sha256: agent.sha256.clone(),
        uploaded: false,
        replaced_corrupt: false,
        bytes: 0,
        elapsed: Duration::ZERO,
    };

    // 3. Present (the bridge command verifies it), or upload.
    let packing = if probe.gzip {
        Packing::Gzip
    } else {
        Packing::Plain
    };
    let suffix = format!("/{}", agent.name);
    if probe.installed.iter().any(|file| file.ends_with(&suffix)) {
        emit(DeployEvent::AlreadyPresent {
            path: format!("~/{remote_path}"),
        });
    } else if !start_agent && !probe.daemon_socket {
        return Err(Error::NoAgent(
            "no agent running there: no daemon socket in ~/.relay/run and no agent of this \
             version installed (nothing was uploaded)"
                .to_string(),
        ));
    } else {
        upload::install(handle, &agent, packing, progress, &mut report).await?;
    }
    report.elapsed = started.elapsed();
    Ok(Deployed {
        agent,
        packing,
        report,
        started,
    })
}

/// Warns when the agent about to be deployed, `chosen` of `candidates`, is not the first choice
/// (`refused` says why that one could not run) or is older than the native `relay-agent` build
/// among them: the sources changed since `deploy/build-agents.sh` last ran.
fn warn_if_stale(chosen: &Path, candidates: &[PathBuf], refused: Option<&Error>) {
    let newer_native = candidates
        .iter()
        .find(|p| p.file_name().is_some_and(|n| n == "relay-agent") && is_older(chosen, p));
    match (refused, newer_native) {
        (Some(e), _) => tracing::warn!(
            "deploying {} instead: {}; run deploy/build-agents.sh if it is out of date",
            chosen.display(),
            e.report()
        ),
        (None, Some(native)) => tracing::warn!(
            "deploying {}, which is older than the native build {} (the sources changed since \
             deploy/build-agents.sh ran?); run deploy/build-agents.sh if it is out of date",
            chosen.display(),
            native.display()
        ),
        (None, None) => {}
    }
}

/// The error for a host for which no local agent exists: `search` (the search for `target`'s
/// own agents), or, on a host without glibc, the search for the static agent it needs.
fn no_local_agent(search: Error, source: &AgentSource, facts: &HostFacts, target: &str) -> Error {
    let what = match facts.libc {
        HostLibc::Musl => "uses musl libc",
        HostLibc::Absent => "has no glibc",
        _ => return search,
    };
    let Some(Err(static_search)) = static_target(target).map(|t| source.candidates(t)) else {
        return search;
    };
    let st = static_target(target).unwrap_or_default();
    Error::no_agent_binary(format!(
        "the host {what}, so it needs the static agent: {}; deploy/build-agents.sh builds it \
         once `rustup target add {st}` is done",
        match static_search {
            Error::NoAgentBinary { message, .. } => message,
            other => other.to_string(),
        }
    ))
}

/// The command that runs the deployed agent's bridge: verify the hash, print `sentinel` on its
/// own line (so shell noise before it can be skipped), then `exec` the bridge (with
/// `--no-start` unless `start_agent`).
pub(crate) fn bridge_command(agent: &Installed, sentinel: &str, start_agent: bool) -> String {
    // Size first: a huge or non-regular file at the name is refused without hashing it. A file
    // with the right content but no execute bit gets it back.
    let script = format!(
        "f=\"$HOME/.relay/bin\"/{name}; \
         if [ ! -f \"$f\" ] || [ $(($(wc -c < \"$f\"))) -ne {size} ]; then \
         echo \"relay: $f is not the agent relay installed (missing, not a file, or of the \
         wrong size); refusing to run it\" >&2; exit {BRIDGE_HASH_MISMATCH}; fi; \
         h={h}; if [ -z \"$h\" ]; then echo \"relay: cannot compute the sha256 of $f \
         (sha256sum and shasum failed); refusing to run it\" >&2; exit {BRIDGE_HASH_FAILED}; fi; \
         if [ \"$h\" != {expected} ]; then \
         echo \"relay: $f does not have the expected sha256; refusing to run it\" >&2; \
         exit {BRIDGE_HASH_MISMATCH}; fi; [ -x \"$f\" ] || chmod 700 \"$f\" || exit 96; \
         echo {sentinel}; exec \"$f\" bridge{flag}",
        name = sh_quote(&agent.name),
        size = agent.size,
        h = hash_of("$f"),
        expected = sh_quote(&agent.sha256),
        flag = if start_agent {
            String::new()
        } else {
            format!(" {}", relay_protocol::bridge::NO_START_FLAG)
        },
    );
    sh_command(&script)
}

/// Makes a new random sentinel line for a bridge command.
pub(crate) fn new_sentinel() -> String {
    sentinel()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::ssh::deploy::local_target;
    use host_check::GlibcVersion;

    #[test]
    fn platforms_map_to_targets() {
        assert_eq!(
            target_for("Linux", "x86_64"),
            Some("x86_64-unknown-linux-gnu")
        );
        assert_eq!(
            target_for("Linux", "aarch64"),
            Some("aarch64-unknown-linux-gnu")
        );
        assert_eq!(target_for("FreeBSD", "amd64"), None);
        // Only a Linux desktop has a native agent build to fall back on.
        assert_eq!(local_target().is_some(), cfg!(target_os = "linux"));
    }

    #[test]
    fn probe_output_is_parsed_and_a_missing_hash_tool_refused() {
        let probe = parse_probe(
            "Linux x86_64\nhash-tool=sha256sum\nunpack=gzip\nlibc=glibc 2.31\n\
             install-mount=/home rw,noexec\n/home/u/.relay/bin/relay-agent-1-x\n\n",
        )
        .unwrap();
        assert!(probe.gzip);
        assert!(
            !parse_probe("Linux x86_64\nhash-tool=sha256sum\n")
                .unwrap()
                .gzip
        );
        assert_eq!(probe.target, "x86_64-unknown-linux-gnu");
        assert_eq!(probe.installed, vec!["/home/u/.relay/bin/relay-agent-1-x"]);
        assert_eq!(
            probe.facts.libc,
            host_check::HostLibc::Glibc(GlibcVersion {
                major: 2,
                minor: 31
            })
        );
        assert_eq!(
            probe.facts.install_mount,
            Some(("/home".to_string(), "rw,noexec".to_string()))
        );
        assert!(parse_probe("Darwin arm64\nhash-tool=shasum\n").is_ok());
        let err = parse_probe("Linux x86_64\nhash-tool=none\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("neither sha256sum nor shasum"), "{err}");
        assert!(err.contains("coreutils"), "{err}");
        let err = parse_probe("Plan9 mips\nhash-tool=sha256sum\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("Plan9"), "{err}");
        assert!(err.contains("Linux x86_64 and aarch64"), "{err}");
    }

    #[test]
    fn missing_binaries_are_reported_with_the_places_searched() {
        let dir = tempfile::tempdir().unwrap();
        let err = AgentSource::Dir(dir.path().to_path_buf())
            .find("aarch64-unknown-linux-gnu")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("relay-agent-aarch64-unknown-linux-gnu"),
            "{err}"
        );
        std::fs::write(
            dir.path().join("relay-agent-aarch64-unknown-linux-gnu"),
            b"x",
        )
        .unwrap();
        assert!(AgentSource::Dir(dir.path().to_path_buf())
            .find("aarch64-unknown-linux-gnu")
            .is_ok());
    }
}
