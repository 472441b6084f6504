//! Which binary an upgrade may hand over to: versions, the rules, and the installed agents.
//!
//! Rules (checked before anything is handed over):
//! - the new binary must read this daemon's state format ([`super::STATE_VERSION`]); no
//!   `--force` overrides that, since a binary that cannot read the state would lose the shells;
//! - a lower version than the running one is a downgrade: refused unless forced;
//! - the same version is refused when relay picked the binary itself ("already running the
//!   newest installed agent") but allowed for a binary named with `--to` (a rebuilt binary).

use std::cmp::Ordering;
use std::fmt;
use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};

/// A semantic version `major.minor.patch[-pre]` as Cargo writes it (build metadata ignored).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Version {
    numbers: [u64; 3],
    pre: String,
}

impl Version {
    /// Parses `1.2.3` or `1.2.3-rc.1`; `None` for anything else.
    pub fn parse(s: &str) -> Option<Version> {
        let s = s.split('+').next()?;
        let (core, pre) = s.split_once('-').unwrap_or((s, ""));
        let mut numbers = [0u64; 3];
        let mut parts = core.split('.');
        for n in &mut numbers {
            *n = parts.next()?.parse().ok()?;
        }
        parts.next().is_none().then(|| Version {
            numbers,
            pre: pre.to_string(),
        })
    }
}

impl Ord for Version {
    /// SemVer precedence, simplified: numbers first; a pre-release sorts before its release;
    /// two pre-releases compare as strings.
    fn cmp(&self, other: &Self) -> Ordering {
        self.numbers.cmp(&other.numbers).then_with(|| {
            match (self.pre.is_empty(), other.pre.is_empty()) {
                (true, true) => Ordering::Equal,
                (true, false) => Ordering::Greater,
                (false, true) => Ordering::Less,
                (false, false) => self.pre.cmp(&other.pre),
            }
        })
    }
}

impl PartialOrd for Version {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let [a, b, c] = self.numbers;
        write!(f, "{a}.{b}.{c}")?;
        if !self.pre.is_empty() {
            write!(f, "-{}", self.pre)?;
        }
        Ok(())
    }
}

/// What a candidate binary said about itself (`handover-info`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    /// The binary.
    pub path: PathBuf,
    /// Its version.
    pub version: Version,
    /// State format versions it reads.
    pub reads: RangeInclusive<u32>,
}

/// Why an upgrade is refused (nothing was handed over; the daemon keeps serving).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The candidate cannot read this daemon's state.
    #[error(
        "{path} (agent {version}) reads handover states {first}..={last}, but this daemon writes \
         version {ours}: it could not take over the shells; install an agent that reads it"
    )]
    CannotRead {
        /// Candidate path.
        path: String,
        /// Candidate version.
        version: String,
        /// Oldest it reads.
        first: u32,
        /// Newest it reads.
        last: u32,
        /// What this daemon writes.
        ours: u32,
    },
    /// Lower than the running version.
    #[error(
        "{path} is agent {version}, older than the running {running}: a downgrade; pass --force \
         to do it anyway"
    )]
    Downgrade {
        /// Candidate path.
        path: String,
        /// Candidate version.
        version: String,
        /// Running version.
        running: String,
    },
    /// Relay picked the newest installed binary and it is what runs.
    #[error(
        "already running the newest installed agent: {path} is agent {running}, the running \
         version; name another binary with --to, or pass --force to hand over to it anyway"
    )]
    NothingNewer {
        /// The installed binary (its own answer, not its name, gave the version).
        path: String,
        /// Running version.
        running: String,
    },
}

/// Applies the rules (module docs) to `candidate` for a daemon of version `running` writing
/// state version `ours`. `named`: the user named the binary (`--to`).
///
/// # Errors
/// The [`Refusal`].
pub fn decide(
    running: &Version,
    ours: u32,
    candidate: &Candidate,
    named: bool,
    force: bool,
) -> Result<(), Refusal> {
    let path = candidate.path.display().to_string();
    if !candidate.reads.contains(&ours) {
        return Err(Refusal::CannotRead {
            path,
            version: candidate.version.to_string(),
            first: *candidate.reads.start(),
            last: *candidate.reads.end(),
            ours,
        });
    }
    match candidate.version.cmp(running) {
        Ordering::Less if !force => Err(Refusal::Downgrade {
            path,
            version: candidate.version.to_string(),
            running: running.to_string(),
        }),
        Ordering::Equal if !named && !force => Err(Refusal::NothingNewer {
            path,
            running: running.to_string(),
        }),
        _ => Ok(()),
    }
}

/// An agent binary deploy installed: `<bin dir>/relay-agent-<version>-<hash>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Installed {
    /// Its path.
    pub path: PathBuf,
    /// The version in its name.
    pub version: Version,
}

/// The installed agent with the highest version in `dir` (ties: the newest file), if any.
/// Names that do not parse are ignored; an unreadable directory counts as empty.
pub fn newest_installed(dir: &Path) -> Option<Installed> {
    let entries = std::fs::read_dir(dir).ok()?;
    entries
        .filter_map(|e| {
            let e = e.ok()?;
            let name = e.file_name().into_string().ok()?;
            let version = version_in_name(&name)?;
            let modified = e.metadata().ok()?.modified().ok()?;
            Some((version, modified, e.path()))
        })
        .max_by(|a, b| a.0.cmp(&b.0).then(a.1.cmp(&b.1)))
        .map(|(version, _, path)| Installed { path, version })
}

/// The version in `relay-agent-<version>-<hash>` (the hash has no `-`; a pre-release may).
fn version_in_name(name: &str) -> Option<Version> {
    let rest = name.strip_prefix("relay-agent-")?;
    let (version, hash) = rest.rsplit_once('-')?;
    (!hash.is_empty() && hash.chars().all(|c| c.is_ascii_hexdigit()))
        .then(|| Version::parse(version))
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> Version {
        Version::parse(s).unwrap()
    }

    fn candidate(version: &str, reads: RangeInclusive<u32>) -> Candidate {
        Candidate {
            path: "/h/.relay/bin/relay-agent-x".into(),
            version: v(version),
            reads,
        }
    }

    #[test]
    fn versions_order_like_semver() {
        assert!(v("0.10.0") > v("0.9.9"));
        assert!(v("1.0.0") > v("1.0.0-rc.1"));
        assert!(v("1.0.0-rc.2") > v("1.0.0-rc.1"));
        assert_eq!(v("1.2.3+build"), v("1.2.3"));
        for bad in ["", "1.2", "1.2.3.4", "a.b.c", "1..3"] {
            assert_eq!(Version::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn the_rules_refuse_what_they_must_and_force_only_overrides_a_downgrade() {
        let running = v("0.2.0");
        // (candidate, reads, named, force, expected: Ok or the refusal's kind)
        let cases: &[(&str, RangeInclusive<u32>, bool, bool, &str)] = &[
            ("0.3.0", 1..=1, false, false, "ok"),
            ("0.3.0", 2..=3, false, false, "cannot-read"),
            ("0.3.0", 2..=3, true, true, "cannot-read"),
            ("0.1.0", 1..=1, true, false, "downgrade"),
            ("0.1.0", 1..=1, true, true, "ok"),
            ("0.2.0", 1..=1, false, false, "nothing-newer"),
            ("0.2.0", 1..=1, true, false, "ok"),
            ("0.2.0", 1..=1, false, true, "ok"),
        ];
        for (version, reads, named, force, want) in cases {
            let got = decide(
                &running,
                1,
                &candidate(version, reads.clone()),
                *named,
                *force,
            );
            let kind = match got {
                Ok(()) => "ok",
                Err(Refusal::CannotRead { .. }) => "cannot-read",
                Err(Refusal::Downgrade { .. }) => "downgrade",
                Err(Refusal::NothingNewer { .. }) => "nothing-newer",
            };
            assert_eq!(
                kind, *want,
                "{version} reads {reads:?} named={named} force={force}"
            );
        }
    }

    #[test]
    fn the_newest_installed_agent_is_found_by_its_name() {
        let dir = tempfile::tempdir().unwrap();
        for name in [
            "relay-agent-0.1.0-0123456789abcdef",
            "relay-agent-0.10.0-fedcba9876543210",
            "relay-agent-0.9.0-aaaaaaaaaaaaaaaa",
            "relay-agent-99.0.0-not-hex",
            ".relay-agent-tmp.123",
        ] {
            std::fs::write(dir.path().join(name), b"x").unwrap();
        }
        let newest = newest_installed(dir.path()).unwrap();
        assert_eq!(newest.version, v("0.10.0"));
        assert!(newest.path.ends_with("relay-agent-0.10.0-fedcba9876543210"));
        assert_eq!(newest_installed(&dir.path().join("missing")), None);
    }
}
