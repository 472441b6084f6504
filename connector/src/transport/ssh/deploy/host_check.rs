//! Can the host run this agent? Checked before anything is uploaded or executed.
//!
//! The deploy probe reports the host's C library ([`HostLibc`], from `getconf
//! GNU_LIBC_VERSION`, else `ldd --version`) and the mount options of the file system that holds
//! `~/.relay/bin` (from `/proc/self/mounts`). The local agent binary says what it needs: the
//! highest `GLIBC_x.y` symbol version in its ELF version-needs section (`.gnu.version_r`, as
//! `readelf -V` prints it; glibc's dynamic loader refuses a binary that needs a newer version
//! with "version `GLIBC_2.34' not found"). [`check`] compares the two and names the cause and the
//! fix, so a deploy to an older distribution fails before the upload with "the host has glibc
//! 2.31, this agent needs 2.34" instead of a bridge that dies on start.
//!
//! Whatever the probe could not tell (a macOS host, an unreadable `/proc`) is not guessed: the
//! check passes and the bridge's own failure is classified as before
//! ([`Error::AgentCannotRun`](crate::Error::AgentCannotRun)).

use std::fmt;
use std::path::Path;

use object::read::elf::ElfFile64;
use object::Endianness;

use crate::Error;

/// A glibc version, `major.minor` (glibc numbers releases `2.N`; a third part, as in symbol
/// versions like `GLIBC_2.2.5`, is ignored: no release needs it to be compared).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct GlibcVersion {
    /// Major version (2 for every glibc since 1997).
    pub major: u32,
    /// Minor version (17 for 2.17).
    pub minor: u32,
}

impl GlibcVersion {
    /// Parses `2.31`, `2.2.5` or `2.31-13+deb11u5` (a distribution suffix after the numbers).
    pub fn parse(text: &str) -> Option<GlibcVersion> {
        let numeric: &str = text
            .split(|c: char| !(c.is_ascii_digit() || c == '.'))
            .next()?;
        let mut parts = numeric.split('.');
        let major = parts.next()?.parse().ok()?;
        let minor = parts.next()?.parse().ok()?;
        Some(GlibcVersion { major, minor })
    }
}

impl fmt::Display for GlibcVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// The host's C library as the deploy probe saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostLibc {
    /// GNU libc of this version.
    Glibc(GlibcVersion),
    /// musl libc (Alpine and other small distributions): a glibc-linked agent cannot run.
    Musl,
    /// No glibc: neither `getconf` nor `ldd` answered and no glibc dynamic loader
    /// (`ld-linux*.so.*`) exists in `/lib*` or `/usr/lib*` (busybox or distroless hosts).
    Absent,
    /// The probe could not tell (not Linux, or neither `getconf` nor `ldd` answered but a
    /// glibc loader exists).
    Unknown,
}

impl HostLibc {
    /// Reads the probe's `libc=` value: `getconf GNU_LIBC_VERSION` (`glibc 2.31`) or, when that
    /// printed nothing, the first line of `ldd --version` (`ldd (Debian GLIBC 2.31-13) 2.31`,
    /// `musl libc (x86_64)`), or [`NO_GLIBC`] when neither named a C library and no glibc loader
    /// exists.
    pub fn from_probe(value: &str) -> HostLibc {
        let value = value.trim();
        if value == NO_GLIBC {
            return HostLibc::Absent;
        }
        if value.to_ascii_lowercase().contains("musl") {
            return HostLibc::Musl;
        }
        if let Some(v) = value.strip_prefix("glibc ") {
            return GlibcVersion::parse(v.trim()).map_or(HostLibc::Unknown, HostLibc::Glibc);
        }
        // ldd's first line ends with the version: "ldd (GNU libc) 2.17".
        let first = value.lines().next().unwrap_or_default();
        if first.contains("GLIBC") || first.contains("GNU libc") {
            if let Some(v) = first
                .split_whitespace()
                .last()
                .and_then(GlibcVersion::parse)
            {
                return HostLibc::Glibc(v);
            }
        }
        HostLibc::Unknown
    }
}

/// What the deploy probe found about running programs from `~/.relay/bin`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostFacts {
    /// The C library.
    pub libc: HostLibc,
    /// Mount point and options (`rw,nosuid,noexec,...`) of the file system holding
    /// `~/.relay/bin`, when `/proc/self/mounts` was readable.
    pub install_mount: Option<(String, String)>,
}

/// The highest glibc symbol version an ELF binary needs, or `None` when it needs none (a static
/// or musl binary) or is not a 64-bit ELF file (a macOS agent).
///
/// # Errors
/// A description when the file claims to be ELF but its headers or version sections are corrupt.
pub fn glibc_needed(binary: &[u8]) -> Result<Option<GlibcVersion>, String> {
    // 64-bit ELF only: every target relay builds agents for is 64-bit.
    if binary.len() < 5 || &binary[..4] != b"\x7fELF" || binary[4] != 2 {
        return Ok(None);
    }
    let file = ElfFile64::<Endianness>::parse(binary).map_err(|e| e.to_string())?;
    let endian = file.endian();
    let sections = file.elf_section_table();
    let Some((mut needs, link)) = sections
        .gnu_verneed(endian, binary)
        .map_err(|e| e.to_string())?
    else {
        return Ok(None);
    };
    let strings = sections
        .strings(endian, binary, link)
        .map_err(|e| e.to_string())?;
    let mut highest = None;
    while let Some((_, mut aux)) = needs.next().map_err(|e| e.to_string())? {
        while let Some(entry) = aux.next().map_err(|e| e.to_string())? {
            let name = entry.name(endian, strings).map_err(|e| e.to_string())?;
            let version = std::str::from_utf8(name)
                .ok()
                .and_then(|n| n.strip_prefix("GLIBC_"))
                .and_then(GlibcVersion::parse);
            highest = highest.max(version);
        }
    }
    Ok(highest)
}

/// Refuses an agent the host cannot run, before it is uploaded or executed.
///
/// `needs` is [`glibc_needed`] of the local binary at `agent` (for the error message), `target`
/// the host's Rust target.
///
/// # Errors
/// [`Error::AgentCannotRun`] naming the cause and the fix: the host's glibc is older than the
/// agent needs, the host uses musl while the agent is linked against glibc, or `~/.relay/bin` is
/// on a `noexec` file system.
pub fn check(
    facts: &HostFacts,
    needs: Option<GlibcVersion>,
    agent: &Path,
    target: &str,
) -> Result<(), Error> {
    if let Some((mount, options)) = &facts.install_mount {
        if options.split(',').any(|o| o == "noexec") {
            return Err(Error::AgentCannotRun(format!(
                "the host's file system at {mount} is mounted noexec ({options}), so no program \
                 in ~/.relay/bin can run there; relay installs its agent in ~/.relay/bin: ask the \
                 host's administrator to mount {mount} without noexec, or use a host whose home \
                 directory allows running programs"
            )));
        }
    }
    let Some(needs) = needs else {
        return Ok(());
    };
    let rebuild = format!(
        "run deploy/build-agents.sh to build agents that need only glibc 2.17 (the default \
         search finds them in target/agents/), or set RELAY_AGENT_DIR to a directory holding \
         such a relay-agent-{target}"
    );
    match facts.libc {
        HostLibc::Glibc(has) if has < needs => Err(Error::AgentCannotRun(format!(
            "the host has glibc {has}, but the agent {} needs glibc {needs} (it was built \
             against a newer C library than the host's); {rebuild}",
            agent.display()
        ))),
        HostLibc::Musl | HostLibc::Absent => Err(Error::AgentCannotRun(format!(
            "the host {}, but the agent {} is linked against glibc {needs}; build \
             the static agent for the host (rustup target add {static_target}; \
             deploy/build-agents.sh), or set RELAY_AGENT_DIR to a directory holding \
             relay-agent-{static_target}",
            if facts.libc == HostLibc::Musl {
                "uses musl libc"
            } else {
                "has no glibc (no getconf, no ldd, no glibc dynamic loader)"
            },
            agent.display(),
            static_target = target.replace("-gnu", "-musl")
        ))),
        _ => Ok(()),
    }
}

/// The awk program that picks, from `/proc/self/mounts` lines, the mount in effect for the
/// directory `d` (a physical path ending in `/`): the longest mount point that contains it, and of
/// stacked mounts on the same point the last one (the one on top). Mount points with spaces are
/// written `\040` there and decoded here. Prints `install-mount=<mount point> <options>`.
macro_rules! mount_awk {
    () => {
        "BEGIN { best = -1 } { m = $2; gsub(/\\\\040/, \" \", m); p = m; \
         if (p != \"/\") p = p \"/\"; \
         if (index(d, p) == 1 && length(p) >= best) { best = length(p); mp = m; o = $4 } } \
         END { if (best >= 0) print \"install-mount=\" mp \" \" o }"
    };
}

/// The probe's `libc=` value for a host where neither `getconf` nor `ldd` named a C library and
/// no glibc dynamic loader exists.
pub(crate) const NO_GLIBC: &str = "no-glibc";

/// Shell snippet for the probe: prints `libc=<what getconf or ldd said, or no-glibc>` and, where
/// `/proc/self/mounts` is readable, `install-mount=<mount point> <options>` for the mount in
/// effect where the agent will live: the deepest of `~/.relay/bin`, `~/.relay`, `~` that exists,
/// resolved with `pwd -P` (mount points are physical paths; a symlinked `~/.relay` counts where
/// it points).
pub(crate) const PROBE_SNIPPET: &str = concat!(
    "v=$(getconf GNU_LIBC_VERSION 2>/dev/null) || v=; \
     [ -n \"$v\" ] || v=$(ldd --version 2>&1 | head -n 1); \
     case \"$v\" in glibc*|*GLIBC*|*'GNU libc'*|*musl*) ;; *) g=; \
     for l in /lib*/ld-linux*.so.* /lib*/*/ld-linux*.so.* /usr/lib*/ld-linux*.so.* \
     /usr/lib*/*/ld-linux*.so.*; do [ -e \"$l\" ] && g=1; done; \
     [ -n \"$g\" ] || v=no-glibc;; esac; echo \"libc=$v\"; \
     if [ -r /proc/self/mounts ]; then d=; \
     for c in \"$HOME/.relay/bin\" \"$HOME/.relay\" \"$HOME\"; do \
     if [ -d \"$c\" ]; then d=$(cd \"$c\" 2>/dev/null && pwd -P) && break; fi; done; \
     awk -v d=\"$d/\" '",
    mount_awk!(),
    "' /proc/self/mounts; fi"
);

/// Reads [`HostFacts`] from the probe's keyed lines (`libc=`, `install-mount=`).
pub(crate) fn facts_from_probe<'a>(lines: impl Iterator<Item = &'a str>) -> HostFacts {
    let mut facts = HostFacts {
        libc: HostLibc::Unknown,
        install_mount: None,
    };
    for line in lines {
        if let Some(v) = line.strip_prefix("libc=") {
            facts.libc = HostLibc::from_probe(v);
        } else if let Some(v) = line.strip_prefix("install-mount=") {
            if let Some((mount, options)) = v.trim().rsplit_once(' ') {
                facts.install_mount = Some((mount.to_string(), options.to_string()));
            }
        }
    }
    facts
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(major: u32, minor: u32) -> GlibcVersion {
        GlibcVersion { major, minor }
    }

    #[test]
    fn versions_parse_from_getconf_ldd_and_symbol_names() {
        assert_eq!(GlibcVersion::parse("2.31"), Some(v(2, 31)));
        assert_eq!(GlibcVersion::parse("2.2.5"), Some(v(2, 2)));
        assert_eq!(GlibcVersion::parse("2.31-13+deb11u5"), Some(v(2, 31)));
        assert_eq!(GlibcVersion::parse("PRIVATE"), None);
        assert!(v(2, 9) < v(2, 17) && v(2, 17) < v(2, 34));
        assert_eq!(
            HostLibc::from_probe("glibc 2.31"),
            HostLibc::Glibc(v(2, 31))
        );
        assert_eq!(
            HostLibc::from_probe("ldd (Debian GLIBC 2.31-13+deb11u5) 2.31 Copyright (C) 2020"),
            HostLibc::Unknown,
            "only the first line counts, and it must end with the version"
        );
        assert_eq!(
            HostLibc::from_probe("ldd (Debian GLIBC 2.31-13+deb11u5) 2.31\nCopyright (C) 2020"),
            HostLibc::Glibc(v(2, 31))
        );
        assert_eq!(
            HostLibc::from_probe("musl libc (x86_64) Version 1.2.4 "),
            HostLibc::Musl
        );
        assert_eq!(
            HostLibc::from_probe("sh: ldd: not found "),
            HostLibc::Unknown
        );
        assert_eq!(HostLibc::from_probe(NO_GLIBC), HostLibc::Absent);
    }

    #[test]
    fn the_probe_lines_give_the_facts() {
        let facts = facts_from_probe(
            [
                "libc=glibc 2.28",
                "install-mount=/home rw,nosuid,noexec,relatime",
            ]
            .into_iter(),
        );
        assert_eq!(facts.libc, HostLibc::Glibc(v(2, 28)));
        assert_eq!(
            facts.install_mount,
            Some(("/home".into(), "rw,nosuid,noexec,relatime".into()))
        );
    }

    /// The mount probe's awk program against a mounts table: the longest containing mount
    /// point, the top one of stacked mounts, and a mount point with a space.
    // The reference is the host's own `awk`, as the probe runs it there.
    #[cfg(unix)]
    #[test]
    fn the_mount_in_effect_is_found_in_a_mounts_table() {
        let table = "/dev/root / ext4 rw,relatime 0 0\n\
                     /dev/sdb /home ext4 rw,noexec 0 0\n\
                     tmpfs /home tmpfs rw,nosuid 0 0\n\
                     /dev/sdc /mnt/my\\040home ext4 rw,noexec 0 0\n\
                     /dev/sdd /homely ext4 rw,noexec 0 0\n";
        let dir = tempfile::tempdir().unwrap();
        let mounts = dir.path().join("mounts");
        std::fs::write(&mounts, table).unwrap();
        let probe = |d: &str| {
            let out = std::process::Command::new("awk")
                .arg("-v")
                .arg(format!("d={d}"))
                .arg(mount_awk!())
                .arg(&mounts)
                .output()
                .unwrap();
            String::from_utf8(out.stdout).unwrap().trim().to_string()
        };
        assert_eq!(
            probe("/home/u/.relay/bin/"),
            "install-mount=/home rw,nosuid",
            "the top of two stacked mounts"
        );
        assert_eq!(
            probe("/mnt/my home/u/.relay/bin/"),
            "install-mount=/mnt/my home rw,noexec"
        );
        assert_eq!(probe("/srv/u/"), "install-mount=/ rw,relatime");
        let facts = facts_from_probe([probe("/mnt/my home/u/").as_str()].into_iter());
        assert_eq!(
            facts.install_mount,
            Some(("/mnt/my home".to_string(), "rw,noexec".to_string()))
        );
    }

    #[test]
    fn an_older_glibc_a_musl_host_and_a_noexec_home_are_refused_with_the_fix() {
        let agent = Path::new("/x/relay-agent");
        let t = "x86_64-unknown-linux-gnu";
        let host = |libc, mount: Option<(&str, &str)>| HostFacts {
            libc,
            install_mount: mount.map(|(m, o)| (m.to_string(), o.to_string())),
        };
        let old = host(HostLibc::Glibc(v(2, 31)), Some(("/", "rw,relatime")));
        let err = check(&old, Some(v(2, 34)), agent, t)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("glibc 2.31") && err.contains("needs glibc 2.34"),
            "{err}"
        );
        assert!(err.contains("deploy/build-agents.sh"), "{err}");
        assert!(!err.contains("bashrc"), "{err}");
        check(&old, Some(v(2, 17)), agent, t).expect("2.17 runs on 2.31");
        check(&old, Some(v(2, 31)), agent, t).expect("equal versions run");
        check(&old, None, agent, t).expect("a static agent runs anywhere");

        let musl = host(HostLibc::Musl, None);
        let err = check(&musl, Some(v(2, 17)), agent, t)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("musl")
                && err.contains("relay-agent-x86_64-unknown-linux-musl")
                && err.contains("deploy/build-agents.sh"),
            "{err}"
        );
        check(&musl, None, agent, t).expect("a static agent runs on musl");
        let busybox = host(HostLibc::Absent, None);
        let err = check(&busybox, Some(v(2, 17)), agent, t)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("has no glibc") && err.contains("relay-agent-x86_64-unknown-linux-musl"),
            "{err}"
        );
        check(&busybox, None, agent, t).expect("a static agent runs without a C library");

        let noexec = host(HostLibc::Unknown, Some(("/home", "rw,noexec")));
        let err = check(&noexec, None, agent, t).unwrap_err().to_string();
        assert!(err.contains("noexec") && err.contains("/home"), "{err}");
        check(&host(HostLibc::Unknown, None), Some(v(2, 99)), agent, t)
            .expect("what the probe could not tell is not guessed");
    }

    // Needs a glibc-linked binary and binutils' readelf: a Linux desktop.
    #[cfg(target_os = "linux")]
    #[test]
    fn the_glibc_needs_of_a_binary_are_what_readelf_lists() {
        // This test binary is linked like the native agent: against this machine's glibc.
        let exe = std::env::current_exe().unwrap();
        let needs = glibc_needed(&std::fs::read(&exe).unwrap())
            .unwrap()
            .expect("a glibc-linked binary");
        // The oracle: binutils' readelf, the highest GLIBC_x.y it lists.
        let out = std::process::Command::new("readelf")
            .args(["-V", "--wide"])
            .arg(&exe)
            .output()
            .expect("readelf (binutils) is needed for this test");
        let text = String::from_utf8_lossy(&out.stdout);
        let listed = text
            .split(|c: char| c.is_whitespace())
            .filter_map(|w| w.strip_prefix("GLIBC_"))
            .filter_map(GlibcVersion::parse)
            .max();
        assert_eq!(Some(needs), listed, "readelf -V {}", exe.display());
        assert_eq!(glibc_needed(b"#!/bin/sh\n").unwrap(), None);
        assert!(glibc_needed(b"\x7fELF\x02\x01\x01garbage").is_err());
    }
}
