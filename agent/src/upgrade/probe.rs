//! Running the new binary before handing over, writing the state, and the `execve` itself.
//!
//! The binary is asked twice, each time as a child with a deadline, so a binary that does not
//! start, hangs or cannot read the state costs nothing: `handover-info` prints
//! `relay-agent <version> handover-state <oldest>-<newest>`, and `handover-check --fd N` decodes
//! the written state and exits 0.

use std::ffi::{CString, OsStr};
use std::io::{self, Read};
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::version::{Candidate, Version};
use crate::pty::io::set_cloexec;

/// How long the new binary may take to answer a probe.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// The line `handover-info` prints for this build.
pub fn info_line() -> String {
    format!(
        "relay-agent {} handover-state {}-{}",
        env!("CARGO_PKG_VERSION"),
        super::OLDEST_READABLE,
        super::STATE_VERSION
    )
}

/// Runs `bin handover-info` and parses its answer.
///
/// # Errors
/// A message naming the binary and what went wrong (it does not exist or run, timed out,
/// failed, or answered something else: not a relay agent, or one without live upgrade).
pub fn info(bin: &Path) -> Result<Candidate, String> {
    let out = run(bin, &[OsStr::new("handover-info")])?;
    parse_info(bin, &out)
}

fn parse_info(bin: &Path, out: &str) -> Result<Candidate, String> {
    let words: Vec<&str> = out.split_whitespace().collect();
    let not_agent = || {
        format!(
            "{} answered {:?} to handover-info: not a relay agent with live upgrade",
            bin.display(),
            out.trim()
        )
    };
    let ["relay-agent", version, "handover-state", range] = words[..] else {
        return Err(not_agent());
    };
    let version = Version::parse(version).ok_or_else(not_agent)?;
    let (a, b) = range.split_once('-').ok_or_else(not_agent)?;
    let (a, b) = (
        a.parse().map_err(|_| not_agent())?,
        b.parse().map_err(|_| not_agent())?,
    );
    Ok(Candidate {
        path: bin.to_path_buf(),
        version,
        reads: a..=b,
    })
}

/// The line `handover-check` prints for a state holding `ptys` PTYs.
pub fn check_line(ptys: usize) -> String {
    format!("handover state readable: {ptys} PTYs")
}

/// Runs `bin handover-check --fd N` on the written state (`state`, made inheritable for it),
/// which must answer that it read all `ptys` PTYs.
///
/// # Errors
/// A message naming the binary and its complaint (or its wrong answer).
pub fn check(bin: &Path, state: BorrowedFd<'_>, ptys: usize) -> Result<(), String> {
    set_cloexec(state, false).map_err(|e| format!("preparing the state for {bin:?}: {e}"))?;
    let fd = state.as_raw_fd().to_string();
    let result = run(
        bin,
        &[
            OsStr::new("handover-check"),
            OsStr::new("--fd"),
            OsStr::new(&fd),
        ],
    );
    let _ = set_cloexec(state, true);
    let out = result?;
    if out.trim() != check_line(ptys) {
        return Err(format!(
            "{} answered {:?} to handover-check, expected {:?}",
            bin.display(),
            out.trim(),
            check_line(ptys)
        ));
    }
    Ok(())
}

/// Runs `bin args`, stdin from /dev/null, with [`PROBE_TIMEOUT`]; returns its stdout.
fn run(bin: &Path, args: &[&OsStr]) -> Result<String, String> {
    let shown = bin.display();
    if let Ok(meta) = std::fs::metadata(bin) {
        use std::os::unix::fs::PermissionsExt;
        if meta.is_dir() {
            return Err(format!("{shown} is a directory, not an agent binary"));
        }
        if meta.permissions().mode() & 0o111 == 0 {
            return Err(format!(
                "{shown} is not executable (chmod +x it if it is an agent)"
            ));
        }
    }
    let mut child = Command::new(bin)
        .args(args)
        // Its own group, so a timeout ends what it started too.
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("could not run {shown}: {e}"))?;
    let deadline = Instant::now() + PROBE_TIMEOUT;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
            Ok(None) => {
                let group = nix::unistd::Pid::from_raw(child.id() as i32);
                let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL);
                let _ = child.wait();
                return Err(format!("{shown} did not answer within {PROBE_TIMEOUT:?}"));
            }
            Err(e) => return Err(format!("waiting for {shown}: {e}")),
        }
    };
    let mut stdout = String::new();
    let mut stderr = String::new();
    if let Some(mut s) = child.stdout.take() {
        let _ = s.read_to_string(&mut stdout);
    }
    if let Some(mut s) = child.stderr.take() {
        let _ = s.read_to_string(&mut stderr);
    }
    if !status.success() {
        let said = stderr.trim();
        let said = if said.is_empty() { stdout.trim() } else { said };
        let said = if said.is_empty() { "(no output)" } else { said };
        return Err(format!(
            "{shown} failed ({status}): {}",
            crate::log::plain(said)
        ));
    }
    Ok(stdout)
}

/// Writes the encoded state to a file that lives only in memory, close-on-exec until the
/// handover clears that ([`crate::sys::memory_file`]).
///
/// # Errors
/// Creating or writing the file (no memory, disk full).
pub fn write_state(bytes: &[u8], run_dir: &Path) -> io::Result<OwnedFd> {
    let file = std::fs::File::from(crate::sys::memory_file::create(c"relay-handover", run_dir)?);
    file.write_all_at(bytes, 0)?;
    Ok(OwnedFd::from(file))
}

/// Reads a whole state file from offset 0 (positional reads: the probe shared the offset).
///
/// # Errors
/// IO errors.
pub fn read_state(fd: BorrowedFd<'_>) -> io::Result<Vec<u8>> {
    let file = std::fs::File::from(fd.try_clone_to_owned()?);
    let mut out = Vec::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        match file.read_at(&mut buf, out.len() as u64) {
            Ok(0) => return Ok(out),
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// The arguments a resuming daemon runs with: `daemon --resume-fd N` and either
/// `--fallback-fd M` (the old binary, for the new code to return to) or `--fallback-reason WHY`
/// (the old code taking the shells back: why the new one could not).
pub(super) fn resume_args(state: BorrowedFd<'_>, fallback: Fallback<'_>) -> Vec<CString> {
    let mut args = vec![
        "relay-agent".as_bytes().to_vec(),
        b"daemon".to_vec(),
        b"--resume-fd".to_vec(),
        state.as_raw_fd().to_string().into_bytes(),
    ];
    match fallback {
        Fallback::To(fd) => args.extend([
            b"--fallback-fd".to_vec(),
            fd.as_raw_fd().to_string().into_bytes(),
        ]),
        Fallback::Because(why) => args.extend([
            b"--fallback-reason".to_vec(),
            why.replace('\0', " ").into_bytes(),
        ]),
    }
    args.into_iter()
        .map(|a| CString::new(a).expect("NULs were replaced"))
        .collect()
}

/// What a resuming daemon is told about the old binary.
pub(super) enum Fallback<'a> {
    /// The old binary, open, for the new code to return to.
    To(BorrowedFd<'a>),
    /// This is the old code taking its shells back, and why.
    Because(&'a str),
}

/// This process's environment with `RELAY_HOME` set to `home` (absolute): the daemon runs in
/// `/`, so a relative `RELAY_HOME` it was started with would name another directory; and with
/// the original descriptor limit ([`crate::pty::nofile::handover_env`]) when it raised its own.
pub(super) fn environment(home: &Path) -> Vec<CString> {
    let limit = crate::pty::nofile::handover_env().map(|(k, v)| (k.into(), v.into()));
    std::env::vars_os()
        .filter(|(k, _)| k != "RELAY_HOME" && k != crate::pty::nofile::ORIGINAL_ENV)
        .chain([("RELAY_HOME".into(), home.as_os_str().to_owned())])
        .chain(limit)
        .filter_map(|(k, v)| {
            let mut kv = k.as_bytes().to_vec();
            kv.push(b'=');
            kv.extend_from_slice(v.as_bytes());
            CString::new(kv).ok()
        })
        .collect()
}

/// Replaces this process's code with `bin` resuming from `state` (same pid; the environment
/// with `RELAY_HOME` = `home`); `fallback` is the old binary, open, for the new code to return
/// to if it cannot resume. Returns only when `execve` failed, with its error.
pub fn exec(bin: &Path, state: BorrowedFd<'_>, fallback: BorrowedFd<'_>, home: &Path) -> io::Error {
    let Ok(path) = CString::new(bin.as_os_str().as_bytes()) else {
        return io::Error::new(io::ErrorKind::InvalidInput, "binary path contains NUL");
    };
    let args = resume_args(state, Fallback::To(fallback));
    match nix::unistd::execve(&path, &args, &environment(home)) {
        Err(e) => e.into(),
        Ok(never) => match never {},
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_info_line_parses_back_and_strangers_are_named() {
        let c = parse_info(Path::new("/b"), &info_line()).unwrap();
        assert_eq!(c.version.to_string(), env!("CARGO_PKG_VERSION"));
        assert!(c.reads.contains(&super::super::STATE_VERSION));
        for bad in [
            "",
            "relay-agent 0.1.0",
            "bash 5.1 handover-state 1-1",
            "relay-agent x handover-state 1-1",
        ] {
            let e = parse_info(Path::new("/b"), bad).unwrap_err();
            assert!(
                e.contains("not a relay agent with live upgrade"),
                "{bad:?}: {e}"
            );
        }
    }

    #[test]
    fn a_state_file_reads_back_whole_from_any_offset() {
        use std::os::fd::AsFd;
        let dir = tempfile::tempdir().unwrap();
        let bytes: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
        let fd = write_state(&bytes, dir.path()).unwrap();
        assert_eq!(read_state(fd.as_fd()).unwrap(), bytes);
    }
}
