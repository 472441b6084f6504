//! Host key verification against OpenSSH known_hosts files.
//!
//! Strict by default: an unknown key is refused with its SHA256 fingerprint and the way to accept
//! it (`--accept-new`); a changed key is always refused, naming the file and line to fix.
//!
//! Entries are looked up with russh's known_hosts reader: plain and hashed (`|1|...`) host names,
//! `[host]:port` for ports other than 22, comma-separated name lists. It does NOT understand
//! wildcards, `!` negation, `@cert-authority` or tab-separated fields: such lines never match (so
//! the key is reported as unknown, never silently trusted; a `@cert-authority` line is never a
//! plain trust because its first field, the marker, is not a host name).
//!
//! `@revoked` lines are read here: a key listed in any of them is refused under every policy,
//! whatever the line's host patterns (like OpenSSH, which refuses revoked keys for every host).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use russh::keys::{HashAlg, PublicKey};

use super::config::StrictHostKeyChecking;
use crate::{sys, Error};

/// What to do with a host key that is not in any known_hosts file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HostKeyPolicy {
    /// Refuse unknown keys (OpenSSH's `yes`).
    Strict,
    /// Ask the [`HostKeyPrompt`] about an unknown key; record it and connect when it accepts,
    /// refuse as [`HostKeyPolicy::Strict`] when it declines or there is none (OpenSSH's `ask`,
    /// its default). An app without a way to ask gets strict checking.
    #[default]
    Ask,
    /// Record unknown keys in the first known_hosts file and connect (`accept-new`).
    AcceptNew,
    /// Connect without recording the key, logging a warning (`StrictHostKeyChecking no`).
    AcceptUnrecorded,
}

impl HostKeyPolicy {
    /// The policy `StrictHostKeyChecking` asks for. Changed keys are refused under every policy.
    pub fn from_config(value: StrictHostKeyChecking) -> Self {
        match value {
            StrictHostKeyChecking::Yes => HostKeyPolicy::Strict,
            StrictHostKeyChecking::Ask => HostKeyPolicy::Ask,
            StrictHostKeyChecking::AcceptNew => HostKeyPolicy::AcceptNew,
            StrictHostKeyChecking::No => HostKeyPolicy::AcceptUnrecorded,
        }
    }
}

/// An unknown host key, as shown to a [`HostKeyPrompt`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownHostKey {
    /// The host as known_hosts names it: `host`, or `[host]:port` for ports other than 22.
    pub host: String,
    /// Key algorithm, e.g. `ssh-ed25519`.
    pub algorithm: String,
    /// SHA256 fingerprint as OpenSSH prints it (`SHA256:...`).
    pub fingerprint: String,
    /// The known_hosts file an accepted key is recorded in.
    pub file: PathBuf,
}

/// Decides about an unknown host key under [`HostKeyPolicy::Ask`]: `true` trusts and records
/// it. Called on a blocking thread, so it may ask a person (the `relay` CLI asks on the
/// terminal like `ssh`).
pub type HostKeyPrompt = Arc<dyn Fn(&UnknownHostKey) -> bool + Send + Sync>;

/// Where a known_hosts lookup found the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// A line records exactly this key.
    Known,
    /// No line records a key of this type for the host.
    Unknown,
    /// A line records a different key of the same type for the host.
    Changed {
        /// The file.
        file: PathBuf,
        /// 1-based line number in that file.
        line: usize,
    },
}

/// The name known_hosts uses for `host` on `port`: `host` for 22, else `[host]:port`.
pub fn host_entry_name(host: &str, port: u16) -> String {
    if port == 22 {
        host.to_string()
    } else {
        format!("[{host}]:{port}")
    }
}

/// Looks `key` up for `host:port` in `files` (missing files count as empty).
///
/// A match in any file wins over a mismatch in another (like OpenSSH); otherwise the first
/// mismatching line is reported.
///
/// # Errors
/// [`Error::HostKey`] when a file cannot be read or a matching line holds an unparsable key.
pub fn lookup(host: &str, port: u16, key: &PublicKey, files: &[PathBuf]) -> Result<Verdict, Error> {
    let mut changed = None;
    for file in files {
        let entries =
            russh::keys::known_hosts::known_host_keys_path(host, port, file).map_err(|e| {
                Error::host_key(format!(
                    "cannot read known_hosts file {} (fix or remove the broken line)",
                    file.display()
                ))
                .caused_by(e)
            })?;
        for (logical_line, recorded) in entries {
            if recorded == *key {
                return Ok(Verdict::Known);
            }
            if recorded.algorithm() == key.algorithm() && changed.is_none() {
                changed = Some(Verdict::Changed {
                    file: file.clone(),
                    line: physical_line(file, logical_line),
                });
            }
        }
    }
    Ok(changed.unwrap_or(Verdict::Unknown))
}

/// The first `@revoked <patterns> <type> <base64>` line (file, 1-based line) listing `key`,
/// whatever its host patterns. Missing files count as empty; unparsable revoked lines are
/// logged and skipped.
///
/// # Errors
/// [`Error::HostKey`] when a file exists but cannot be read.
pub fn revoked(key: &PublicKey, files: &[PathBuf]) -> Result<Option<(PathBuf, usize)>, Error> {
    for file in files {
        let text = match std::fs::read_to_string(file) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => {
                return Err(Error::host_key(format!(
                    "cannot read known_hosts file {} (fix its permissions)",
                    file.display()
                ))
                .caused_by(e))
            }
        };
        for (i, line) in text.lines().enumerate() {
            let mut fields = line.split_whitespace();
            if fields.next() != Some("@revoked") {
                continue;
            }
            let (_patterns, kind, b64) = (fields.next(), fields.next(), fields.next());
            let (Some(kind), Some(b64)) = (kind, b64) else {
                tracing::warn!(file = %file.display(), line = i + 1, "malformed @revoked line");
                continue;
            };
            match PublicKey::from_openssh(&format!("{kind} {b64}")) {
                Ok(listed) if listed.key_data() == key.key_data() => {
                    return Ok(Some((file.clone(), i + 1)))
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(file = %file.display(), line = i + 1, "unparsable @revoked key: {e}")
                }
            }
        }
    }
    Ok(None)
}

/// russh numbers known_hosts lines without counting `#` comment lines; map its number back to
/// the line number an editor shows.
fn physical_line(file: &Path, logical: usize) -> usize {
    let Ok(text) = std::fs::read_to_string(file) else {
        return logical;
    };
    text.split_inclusive('\n')
        .enumerate()
        .filter(|(_, l)| !l.starts_with('#'))
        .nth(logical.saturating_sub(1))
        .map(|(i, _)| i + 1)
        .unwrap_or(logical)
}

/// `SHA256:...` fingerprint of a key, as `ssh-keygen -l` prints it.
pub fn fingerprint(key: &PublicKey) -> String {
    key.fingerprint(HashAlg::Sha256).to_string()
}

/// Checks a server's key under `policy`, recording it when the policy says so (`prompt` is
/// consulted under [`HostKeyPolicy::Ask`]).
///
/// # Errors
/// [`Error::HostKey`] for an unknown key under [`HostKeyPolicy::Strict`] (or
/// [`HostKeyPolicy::Ask`] without a yes) and when an accepted key cannot be written to the
/// known_hosts file; [`Error::HostKeyChanged`] for any changed or revoked key.
pub fn verify(
    host: &str,
    port: u16,
    key: &PublicKey,
    files: &[PathBuf],
    policy: HostKeyPolicy,
    prompt: Option<&HostKeyPrompt>,
) -> Result<(), Error> {
    let name = host_entry_name(host, port);
    let alg = key.algorithm();
    if let Some((file, line)) = revoked(key, files)? {
        return Err(Error::HostKeyChanged(format!(
            "the {alg} host key of {name} ({fp}) is REVOKED: {file} line {line} marks this key \
             as revoked, so relay refuses it. Ask the host's administrator for the current key",
            fp = fingerprint(key),
            file = file.display(),
        )));
    }
    match lookup(host, port, key, files)? {
        Verdict::Known => Ok(()),
        Verdict::Changed { file, line } => Err(Error::HostKeyChanged(format!(
            "the {alg} host key of {name} has CHANGED: the server now presents {fp}, but {file} \
             line {line} records a different key. Someone may be intercepting the connection, or \
             the host was reinstalled. If you know why it changed, remove line {line} from {file} \
             (ssh-keygen -R '{name}' -f {file}) and connect again with --accept-new",
            fp = fingerprint(key),
            file = file.display(),
        ))),
        Verdict::Unknown => {
            let unknown = || {
                Error::host_key(format!(
                    "the {alg} host key of {name} is not known (fingerprint {fp}; looked in \
                     {files}). Check the fingerprint with the host's administrator, then run \
                     again with --accept-new to trust it (like StrictHostKeyChecking=accept-new)",
                    fp = fingerprint(key),
                    files = list_files(files),
                ))
            };
            match policy {
                HostKeyPolicy::Strict => Err(unknown()),
                HostKeyPolicy::Ask => {
                    let (Some(prompt), Some(file)) = (prompt, files.first()) else {
                        return Err(unknown());
                    };
                    let question = UnknownHostKey {
                        host: name.clone(),
                        algorithm: alg.to_string(),
                        fingerprint: fingerprint(key),
                        file: file.clone(),
                    };
                    if !prompt(&question) {
                        return Err(unknown());
                    }
                    accept(&name, key, files)
                }
                HostKeyPolicy::AcceptUnrecorded => {
                    tracing::warn!(
                        host = %name,
                        fingerprint = %fingerprint(key),
                        "StrictHostKeyChecking=no: accepting an unknown host key without \
                         recording it"
                    );
                    Ok(())
                }
                HostKeyPolicy::AcceptNew => accept(&name, key, files),
            }
        }
    }
}

/// Records an accepted unknown key in the first known_hosts file.
fn accept(name: &str, key: &PublicKey, files: &[PathBuf]) -> Result<(), Error> {
    let Some(file) = files.first() else {
        return Err(Error::host_key(format!(
            "cannot accept the host key of {name}: no UserKnownHostsFile is configured"
        )));
    };
    record(name, key, file)?;
    tracing::info!(
        host = %name,
        fingerprint = %fingerprint(key),
        file = %file.display(),
        "accepted new host key"
    );
    Ok(())
}

fn list_files(files: &[PathBuf]) -> String {
    if files.is_empty() {
        return "no known_hosts file".to_string();
    }
    files
        .iter()
        .map(|f| f.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Appends `name key` to `file`, creating its directory and the file if needed, private to the
/// user ([`sys::create_private_dir`], [`sys::append_private_file`]).
fn record(name: &str, key: &PublicKey, file: &Path) -> Result<(), Error> {
    let fail = |e: std::io::Error| {
        Error::host_key(format!(
            "cannot record the host key of {name} in {}",
            file.display()
        ))
        .caused_by(e)
    };
    if let Some(dir) = file.parent() {
        if !dir.as_os_str().is_empty() && !dir.exists() {
            sys::create_private_dir(dir).map_err(fail)?;
        }
    }
    let encoded = key
        .to_openssh()
        .map_err(|e| fail(std::io::Error::other(e)))?;
    let mut f = sys::append_private_file(file).map_err(fail)?;
    let len = f.metadata().map_err(fail)?.len();
    let needs_newline = len > 0 && {
        let text = std::fs::read(file).map_err(fail)?;
        text.last() != Some(&b'\n')
    };
    let mut line = String::new();
    if needs_newline {
        line.push('\n');
    }
    // `to_openssh` gives "alg base64 comment"; known_hosts wants "name alg base64".
    let mut parts = encoded.split_whitespace();
    let (alg, b64) = (
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
    );
    line.push_str(&format!("{name} {alg} {b64}\n"));
    f.write_all(line.as_bytes()).map_err(fail)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY_A: &str =
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHdUMi6vzviruIGWo/YjefQSSwxMWW+WQQZi3li2AviZ";
    const KEY_B: &str =
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKB2hs6uWZtbVlIrwGQ7NUFo29Pt9cBL4oXczUQTKXVg";

    fn key(s: &str) -> PublicKey {
        PublicKey::from_openssh(s).unwrap()
    }

    #[test]
    fn known_unknown_and_changed_keys_are_told_apart() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("known_hosts");
        std::fs::write(
            &file,
            format!("# a comment\n\n[h]:2222 {KEY_A}\nother {KEY_B}\n"),
        )
        .unwrap();
        let files = [file.clone()];
        assert_eq!(
            lookup("h", 2222, &key(KEY_A), &files).unwrap(),
            Verdict::Known
        );
        assert_eq!(
            lookup("h", 22, &key(KEY_A), &files).unwrap(),
            Verdict::Unknown
        );
        assert_eq!(
            lookup("h", 2222, &key(KEY_B), &files).unwrap(),
            Verdict::Changed { file, line: 3 }
        );
    }

    #[test]
    fn strict_refuses_unknown_with_fingerprint_and_accept_new_records_once() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("sub/known_hosts");
        let files = [file.clone()];
        let err = verify("h", 2222, &key(KEY_A), &files, HostKeyPolicy::Strict, None).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains(&fingerprint(&key(KEY_A))), "{msg}");
        assert!(msg.contains("--accept-new"), "{msg}");
        verify(
            "h",
            2222,
            &key(KEY_A),
            &files,
            HostKeyPolicy::AcceptNew,
            None,
        )
        .unwrap();
        verify("h", 2222, &key(KEY_A), &files, HostKeyPolicy::Strict, None).unwrap();
        verify(
            "h",
            2222,
            &key(KEY_A),
            &files,
            HostKeyPolicy::AcceptNew,
            None,
        )
        .unwrap();
        let text = std::fs::read_to_string(&file).unwrap();
        assert_eq!(text.lines().count(), 1, "{text}");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600);
        }
        // A changed key is refused even under accept-new, naming file and line.
        let err = verify(
            "h",
            2222,
            &key(KEY_B),
            &files,
            HostKeyPolicy::AcceptNew,
            None,
        )
        .unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("CHANGED") && msg.contains("line 1"), "{msg}");
        assert!(msg.contains(&file.display().to_string()), "{msg}");
    }

    #[test]
    fn revoked_keys_are_refused_under_every_policy_and_markers_never_trust() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("known_hosts");
        std::fs::write(
            &file,
            format!("h {KEY_A}\n# c\n@revoked * {KEY_A}\n@cert-authority ca-host {KEY_B}\n"),
        )
        .unwrap();
        let files = [file.clone()];
        for policy in [
            HostKeyPolicy::Strict,
            HostKeyPolicy::AcceptNew,
            HostKeyPolicy::AcceptUnrecorded,
        ] {
            let msg = verify("h", 22, &key(KEY_A), &files, policy, None)
                .unwrap_err()
                .to_string();
            assert!(msg.contains("REVOKED"), "{msg}");
            assert!(msg.contains(&format!("{} line 3", file.display())), "{msg}");
        }
        // Another host's key is revoked too (patterns do not matter).
        assert!(verify(
            "other",
            22,
            &key(KEY_A),
            &files,
            HostKeyPolicy::AcceptNew,
            None
        )
        .is_err());
        // A @cert-authority line is not a plain trust of its key.
        assert_eq!(
            lookup("ca-host", 22, &key(KEY_B), &files).unwrap(),
            Verdict::Unknown
        );
        let before = std::fs::read_to_string(&file).unwrap();
        assert_eq!(before.lines().count(), 4);
    }

    #[test]
    fn accept_unrecorded_writes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("known_hosts");
        verify(
            "h",
            22,
            &key(KEY_A),
            std::slice::from_ref(&file),
            HostKeyPolicy::AcceptUnrecorded,
            None,
        )
        .unwrap();
        assert!(!file.exists());
    }

    #[test]
    fn ask_records_what_the_prompt_accepts_and_refuses_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("known_hosts");
        let files = [file.clone()];
        let asked = Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = asked.clone();
        let no: HostKeyPrompt = Arc::new(move |q: &UnknownHostKey| {
            seen.lock().unwrap().push(q.clone());
            false
        });
        let err = verify(
            "h",
            2222,
            &key(KEY_A),
            &files,
            HostKeyPolicy::Ask,
            Some(&no),
        );
        assert!(err.unwrap_err().to_string().contains("not known"));
        let q = asked.lock().unwrap()[0].clone();
        assert_eq!(q.host, "[h]:2222");
        assert_eq!(q.fingerprint, fingerprint(&key(KEY_A)));
        assert_eq!(q.file, file);
        assert!(!file.exists(), "a declined key is not recorded");
        let err = verify("h", 2222, &key(KEY_A), &files, HostKeyPolicy::Ask, None);
        assert!(err.is_err(), "no prompt: strict");
        let yes: HostKeyPrompt = Arc::new(|_: &UnknownHostKey| true);
        verify(
            "h",
            2222,
            &key(KEY_A),
            &files,
            HostKeyPolicy::Ask,
            Some(&yes),
        )
        .unwrap();
        verify("h", 2222, &key(KEY_A), &files, HostKeyPolicy::Strict, None).unwrap();
        let err = verify(
            "h",
            2222,
            &key(KEY_B),
            &files,
            HostKeyPolicy::Ask,
            Some(&yes),
        );
        assert!(
            err.unwrap_err().to_string().contains("CHANGED"),
            "a changed key is never asked about"
        );
    }

    /// A known_hosts file that cannot be written is a host key error whose source is the IO
    /// error, and the report names the file and the cause as the message did before.
    #[test]
    fn an_unwritable_known_hosts_keeps_the_io_error_as_source() {
        use std::error::Error as _;
        let dir = tempfile::tempdir().unwrap();
        let not_a_dir = dir.path().join("file");
        std::fs::write(&not_a_dir, "").unwrap();
        let file = not_a_dir.join("known_hosts");
        let err = accept("h", &key(KEY_A), std::slice::from_ref(&file)).unwrap_err();
        assert!(matches!(err, Error::HostKey { .. }), "{err:?}");
        assert!(!err.is_transient());
        let io = err
            .source()
            .and_then(|s| s.downcast_ref::<std::io::Error>())
            .expect("the io error is the source");
        // Windows reports a file used as a directory as a path not found.
        let expected = match cfg!(windows) {
            true => std::io::ErrorKind::NotFound,
            false => std::io::ErrorKind::NotADirectory,
        };
        assert_eq!(io.kind(), expected, "{io}");
        assert_eq!(
            err.report(),
            format!(
                "host key: cannot record the host key of h in {}: {io}",
                file.display()
            )
        );
    }
}
