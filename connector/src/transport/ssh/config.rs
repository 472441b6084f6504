//! Resolving a destination (`[user@]host[:port]`, `ssh://user@host:port` or an ssh_config alias)
//! into the settings used to connect, the way OpenSSH does.
//!
//! # Sources, in order of preference
//!
//! 1. `ssh -G [-F FILE] [-p PORT] [-l USER] HOST` when an OpenSSH client is installed. It prints
//!    OpenSSH's fully evaluated configuration (Include, Match, wildcards, defaults), so relay
//!    resolves exactly what `ssh HOST` would. Note that OpenSSH reads the *passwd* home directory,
//!    not `$HOME`: pass an explicit config file ([`ResolveOptions::config_file`]) to isolate it.
//!    `$RELAY_SSH` names another ssh binary (default `ssh` on `PATH`).
//! 2. Without an `ssh` binary: the `ssh2-config` parser over the given file or `$HOME/.ssh/config`
//!    (Include and wildcard `Host` patterns work; `Match` blocks in the file are skipped with a
//!    warning, as the parser cannot evaluate their conditions).
//!
//! # Fields honoured
//!
//! `HostName`, `User`, `Port`, `IdentityFile` (all of them, `~` expanded with `$HOME`),
//! `IdentitiesOnly`, `ProxyJump` (any number of hops), `ProxyCommand` (`%h %p %r %n %%` expanded),
//! `UserKnownHostsFile` (all files), `StrictHostKeyChecking`, `ConnectTimeout`,
//! `ServerAliveInterval`, `ServerAliveCountMax`. Everything else (ciphers, `HostKeyAlias`,
//! `CertificateFile`, forwardings, `ControlMaster`, ...) is ignored.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

pub use super::destination::Destination;
use super::destination::{check_user, shell_word};
pub(crate) use crate::sys::{home_dir, local_user};
use crate::Error;

/// What the caller typed, plus command-line overrides (like `ssh -p`, `-l`, `-F`).
#[derive(Debug, Clone, Default)]
pub struct ResolveOptions {
    /// ssh_config file to read instead of the user's (`ssh -F`).
    pub config_file: Option<PathBuf>,
    /// Port override (`-p`); wins over the config and over `host:port` in the destination.
    pub port: Option<u16>,
    /// User override (`-l`); wins over the config and over `user@` in the destination.
    pub user: Option<String>,
}

/// `StrictHostKeyChecking` as configured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StrictHostKeyChecking {
    /// `yes`: unknown keys are refused.
    Yes,
    /// `ask` (OpenSSH's default): relay cannot ask in the middle of a connection, so it refuses
    /// unknown keys like `yes` and tells the user how to accept them.
    #[default]
    Ask,
    /// `accept-new`: unknown keys are recorded, changed keys refused.
    AcceptNew,
    /// `no`/`off`: unknown keys are accepted without recording them (with a warning). Changed keys
    /// are still refused.
    No,
}

impl StrictHostKeyChecking {
    fn parse(value: &str) -> Option<Self> {
        match value.to_ascii_lowercase().as_str() {
            "yes" | "true" => Some(Self::Yes),
            "ask" => Some(Self::Ask),
            "accept-new" => Some(Self::AcceptNew),
            "no" | "false" | "off" => Some(Self::No),
            _ => None,
        }
    }
}

/// The settings to connect to one host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostConfig {
    /// Name as typed (alias or host name), for messages.
    pub alias: String,
    /// Host name or address to connect to (`HostName`).
    pub hostname: String,
    /// Remote user (`User`).
    pub user: String,
    /// TCP port (`Port`).
    pub port: u16,
    /// Private key files to try, in order, `~` expanded (`IdentityFile`). Missing files are kept
    /// here and skipped when authenticating.
    pub identity_files: Vec<PathBuf>,
    /// `IdentitiesOnly yes`: offer only agent keys that match an identity file.
    pub identities_only: bool,
    /// Jump hosts, first hop first (`ProxyJump`); empty when none.
    pub proxy_jump: Vec<String>,
    /// Command whose stdio carries the connection (`ProxyCommand`), tokens not yet expanded.
    pub proxy_command: Option<String>,
    /// known_hosts files, first one is the one `accept-new` writes to (`UserKnownHostsFile`).
    pub known_hosts_files: Vec<PathBuf>,
    /// `StrictHostKeyChecking`.
    pub strict_host_key_checking: StrictHostKeyChecking,
    /// `ConnectTimeout`; `None` means relay's default.
    pub connect_timeout: Option<Duration>,
    /// `ServerAliveInterval`; `None` (or 0 in the config) means relay's default.
    pub server_alive_interval: Option<Duration>,
    /// `ServerAliveCountMax`; `None` means relay's default.
    pub server_alive_count_max: Option<usize>,
}

impl HostConfig {
    /// `user@hostname:port`, for messages.
    pub fn display(&self) -> String {
        format!("{}@{}:{}", self.user, self.hostname, self.port)
    }

    /// `ProxyCommand` with `%h`, `%p`, `%r`, `%n` and `%%` expanded, if one is configured.
    /// Substituted values are quoted for the shell when they hold anything but letters, digits
    /// and `._-:@/+%` (see [`shell_word`]), so a host or user name can never add a command;
    /// plain names are substituted as they are, so `"%h"` in a config keeps working.
    pub fn expanded_proxy_command(&self) -> Option<String> {
        let cmd = self.proxy_command.as_deref()?;
        let mut out = String::with_capacity(cmd.len());
        let mut chars = cmd.chars();
        while let Some(c) = chars.next() {
            if c != '%' {
                out.push(c);
                continue;
            }
            match chars.next() {
                Some('h') => out.push_str(&shell_word(&self.hostname)),
                Some('p') => out.push_str(&self.port.to_string()),
                Some('r') => out.push_str(&shell_word(&self.user)),
                Some('n') => out.push_str(&shell_word(&self.alias)),
                Some('%') => out.push('%'),
                Some(other) => {
                    out.push('%');
                    out.push(other);
                }
                None => out.push('%'),
            }
        }
        Some(out)
    }
}

/// Resolves `destination` with OpenSSH's `ssh -G` when available, else with the `ssh2-config`
/// parser. Overrides in `opts` win over what the destination string says, which wins over the
/// config file.
///
/// # Errors
/// [`Error::Config`] when the destination is malformed or names a host or user that no real
/// one has (shell metacharacters, a leading `-`: checked before anything runs, as OpenSSH
/// does), `ssh -G` rejects it, or the config file cannot be read or parsed.
pub async fn resolve(destination: &str, opts: &ResolveOptions) -> Result<HostConfig, Error> {
    let dest = Destination::parse(destination)?;
    if let Some(user) = &opts.user {
        check_user(user)?;
    }
    let user = opts.user.clone().or(dest.user.clone());
    let port = opts.port.or(dest.port);
    if let Some(file) = &opts.config_file {
        if !file.is_file() {
            return Err(Error::config(format!(
                "ssh config file {} does not exist or is not a file",
                file.display()
            )));
        }
    }
    match ssh_g(
        &dest.host,
        opts.config_file.as_deref(),
        port,
        user.as_deref(),
    )
    .await?
    {
        Some(text) => parse_ssh_g(&dest.host, &text),
        None => {
            let file = opts.config_file.clone();
            let host = dest.host.clone();
            tokio::task::spawn_blocking(move || fallback(&host, file.as_deref(), port, user))
                .await
                .map_err(|e| Error::config("config parser task failed").caused_by(e))?
        }
    }
}

/// Runs `ssh -G`. `Ok(None)` when no `ssh` binary is installed.
async fn ssh_g(
    host: &str,
    file: Option<&Path>,
    port: Option<u16>,
    user: Option<&str>,
) -> Result<Option<String>, Error> {
    let mut cmd =
        tokio::process::Command::new(std::env::var_os("RELAY_SSH").unwrap_or("ssh".into()));
    cmd.arg("-G");
    if let Some(f) = file {
        cmd.arg("-F").arg(f);
    }
    if let Some(p) = port {
        cmd.arg("-p").arg(p.to_string());
    }
    if let Some(u) = user {
        cmd.arg("-l").arg(u);
    }
    cmd.arg("--").arg(host);
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let out = match cmd.output().await {
        Ok(out) => out,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::config(format!("cannot run `ssh -G {host}`")).caused_by(e)),
    };
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        return Err(Error::config(format!(
            "`ssh -G {host}` failed ({}): {}",
            out.status,
            stderr.trim()
        )));
    }
    Ok(Some(String::from_utf8_lossy(&out.stdout).into_owned()))
}

/// Parses the output of `ssh -G` (lower-case keyword, space, value; one line per value).
///
/// # Errors
/// [`Error::Config`] when a required field (hostname, user, port) is missing or malformed.
pub fn parse_ssh_g(alias: &str, text: &str) -> Result<HostConfig, Error> {
    let mut cfg = HostConfig {
        alias: alias.to_string(),
        hostname: String::new(),
        user: String::new(),
        port: 0,
        identity_files: Vec::new(),
        identities_only: false,
        proxy_jump: Vec::new(),
        proxy_command: None,
        known_hosts_files: Vec::new(),
        strict_host_key_checking: StrictHostKeyChecking::default(),
        connect_timeout: None,
        server_alive_interval: None,
        server_alive_count_max: None,
    };
    for line in text.lines() {
        let Some((key, value)) = line.split_once(' ') else {
            continue;
        };
        let value = value.trim();
        match key.to_ascii_lowercase().as_str() {
            "hostname" => cfg.hostname = value.to_string(),
            "user" => cfg.user = value.to_string(),
            "port" => {
                cfg.port = value
                    .parse()
                    .map_err(|_| Error::config(format!("ssh -G printed port {value:?}")))?
            }
            "identityfile" => cfg.identity_files.push(expand_tilde(value)),
            "identitiesonly" => cfg.identities_only = is_yes(value),
            "proxyjump" => cfg.proxy_jump = parse_jump_list(value),
            "proxycommand" if !value.eq_ignore_ascii_case("none") => {
                cfg.proxy_command = Some(value.to_string())
            }
            "userknownhostsfile" => {
                cfg.known_hosts_files = value
                    .split_whitespace()
                    .filter(|f| !f.eq_ignore_ascii_case("none"))
                    .map(expand_tilde)
                    .collect()
            }
            "stricthostkeychecking" => {
                if let Some(s) = StrictHostKeyChecking::parse(value) {
                    cfg.strict_host_key_checking = s;
                }
            }
            "connecttimeout" => cfg.connect_timeout = parse_secs(value),
            "serveraliveinterval" => cfg.server_alive_interval = parse_secs(value),
            "serveralivecountmax" => cfg.server_alive_count_max = value.parse().ok(),
            _ => {}
        }
    }
    if cfg.hostname.is_empty() || cfg.user.is_empty() || cfg.port == 0 {
        return Err(Error::config(format!(
            "ssh -G {alias} printed no hostname, user or port; is the ssh client OpenSSH?"
        )));
    }
    if cfg.known_hosts_files.is_empty() {
        cfg.known_hosts_files = default_known_hosts();
    }
    Ok(cfg)
}

/// `text` (an ssh_config file) with every `Match` block blanked — from a `Match` line to the next
/// `Host` or `Match` line, lines kept so numbers in parse errors still match the file — and
/// whether there was one. `ssh2-config` does not evaluate `Match` conditions (its settings
/// would apply to every host, `Match exec false` included); skipping them is the smaller
/// surprise. Keywords are case-insensitive and may be followed by `=` (ssh_config(5)).
fn without_match_blocks(text: &str) -> (String, bool) {
    let mut out = String::with_capacity(text.len());
    let mut in_match = false;
    let mut skipped = false;
    for line in text.split_inclusive('\n') {
        let keyword = line
            .trim_start()
            .split(|c: char| c.is_whitespace() || c == '=')
            .next()
            .unwrap_or("");
        if keyword.eq_ignore_ascii_case("match") {
            in_match = true;
            skipped = true;
        } else if keyword.eq_ignore_ascii_case("host") {
            in_match = false;
        }
        if in_match {
            out.push_str(if line.ends_with('\n') { "\n" } else { "" });
        } else {
            out.push_str(line);
        }
    }
    (out, skipped)
}

/// Resolution without an `ssh` binary, with `ssh2-config`.
fn fallback(
    host: &str,
    file: Option<&Path>,
    port: Option<u16>,
    user: Option<String>,
) -> Result<HostConfig, Error> {
    use ssh2_config::{ParseRule, SshConfig};
    let path = match file {
        Some(f) => Some(f.to_path_buf()),
        None => home_dir()
            .map(|h| h.join(".ssh").join("config"))
            .filter(|p| p.is_file()),
    };
    let config = match &path {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|e| {
                Error::config(format!("cannot read {}", path.display())).caused_by(e)
            })?;
            let (text, skipped) = without_match_blocks(&text);
            if skipped {
                tracing::warn!(
                    "{}: Match blocks are not evaluated without an ssh binary, so their settings                      are skipped; install OpenSSH's client (ssh) to have them applied",
                    path.display()
                );
            }
            let mut reader = std::io::Cursor::new(text);
            let mut config = SshConfig::default();
            if let Some(home) = home_dir() {
                config = config.home_dir(home);
            }
            config
                .parse(
                    &mut reader,
                    ParseRule::ALLOW_UNKNOWN_FIELDS | ParseRule::ALLOW_UNSUPPORTED_FIELDS,
                )
                .map_err(|e| {
                    Error::config(format!("cannot parse {}", path.display())).caused_by(e)
                })?
        }
        None => SshConfig::default(),
    };
    let p = config.query(host);
    let field = |name: &str| -> Option<String> {
        p.unsupported_fields
            .get(name)
            .or_else(|| p.ignored_fields.get(name))
            .map(|args| args.join(" "))
    };
    let mut identity_files: Vec<PathBuf> = p
        .identity_file
        .clone()
        .unwrap_or_default()
        .iter()
        .map(|f| expand_tilde(&f.to_string_lossy()))
        .collect();
    if identity_files.is_empty() {
        identity_files = ["id_rsa", "id_ecdsa", "id_ed25519"]
            .iter()
            .filter_map(|n| home_dir().map(|h| h.join(".ssh").join(n)))
            .collect();
    }
    let known_hosts_files = match field("userknownhostsfile") {
        Some(v) => v.split_whitespace().map(expand_tilde).collect(),
        None => default_known_hosts(),
    };
    Ok(HostConfig {
        alias: host.to_string(),
        hostname: p.host_name.clone().unwrap_or_else(|| host.to_string()),
        user: user
            .or(p.user.clone())
            .or_else(local_user)
            .ok_or_else(|| Error::config("cannot tell the local user name; pass user@host"))?,
        port: port.or(p.port).unwrap_or(22),
        identity_files,
        identities_only: field("identitiesonly").is_some_and(|v| is_yes(&v)),
        proxy_jump: p
            .proxy_jump
            .clone()
            .unwrap_or_default()
            .into_iter()
            .filter(|h| !h.eq_ignore_ascii_case("none"))
            .collect(),
        proxy_command: field("proxycommand").filter(|c| !c.eq_ignore_ascii_case("none")),
        known_hosts_files,
        strict_host_key_checking: field("stricthostkeychecking")
            .and_then(|v| StrictHostKeyChecking::parse(&v))
            .unwrap_or_default(),
        connect_timeout: p.connect_timeout.filter(|d| !d.is_zero()),
        server_alive_interval: p.server_alive_interval,
        server_alive_count_max: field("serveralivecountmax").and_then(|v| v.parse().ok()),
    })
}

fn parse_jump_list(value: &str) -> Vec<String> {
    if value.eq_ignore_ascii_case("none") {
        return Vec::new();
    }
    value
        .split(',')
        .map(str::trim)
        .filter(|h| !h.is_empty())
        .map(str::to_string)
        .collect()
}

fn parse_secs(value: &str) -> Option<Duration> {
    value
        .parse::<u64>()
        .ok()
        .filter(|s| *s > 0)
        .map(Duration::from_secs)
}

fn is_yes(value: &str) -> bool {
    matches!(value.to_ascii_lowercase().as_str(), "yes" | "true")
}

fn default_known_hosts() -> Vec<PathBuf> {
    home_dir()
        .map(|h| {
            vec![
                h.join(".ssh").join("known_hosts"),
                h.join(".ssh").join("known_hosts2"),
            ]
        })
        .unwrap_or_default()
}

/// Expands a leading `~` or `~/` with the home directory (`$HOME`; `%USERPROFILE%` on Windows); other paths are returned as they are.
pub fn expand_tilde(path: &str) -> PathBuf {
    match (path, home_dir()) {
        ("~", Some(home)) => home,
        (p, Some(home)) if p.starts_with("~/") => home.join(&p[2..]),
        (p, _) => PathBuf::from(p),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ssh_g_output_is_parsed() {
        let text = "user bob\nhostname 10.1.2.3\nport 2200\nidentityfile /k1\nidentityfile /k2\n\
                    proxyjump a@j1:2022,j2\nproxycommand nc %h %p\nuserknownhostsfile /kh1 /kh2\n\
                    stricthostkeychecking accept-new\nconnecttimeout 7\nserveraliveinterval 0\n\
                    serveralivecountmax 5\n";
        let c = parse_ssh_g("foo", text).unwrap();
        assert_eq!(c.display(), "bob@10.1.2.3:2200");
        assert_eq!(
            c.identity_files,
            vec![PathBuf::from("/k1"), PathBuf::from("/k2")]
        );
        assert_eq!(
            c.proxy_jump,
            vec!["a@j1:2022".to_string(), "j2".to_string()]
        );
        assert_eq!(c.expanded_proxy_command().unwrap(), "nc 10.1.2.3 2200");
        assert_eq!(c.known_hosts_files.len(), 2);
        assert_eq!(c.strict_host_key_checking, StrictHostKeyChecking::AcceptNew);
        assert_eq!(c.connect_timeout, Some(Duration::from_secs(7)));
        assert_eq!(c.server_alive_interval, None);
        assert_eq!(c.server_alive_count_max, Some(5));
    }

    #[test]
    fn fallback_parser_reads_the_fields_ssh_g_would() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("config");
        std::fs::write(
            &file,
            "Host box\n  HostName 10.0.0.9\n  User alice\n  Port 2022\n  IdentityFile /keys/a\n\
             ProxyCommand nc %h %p\n  UserKnownHostsFile /kh\n  StrictHostKeyChecking no\n\
             ServerAliveCountMax 4\n  ProxyJump j1,j2\n",
        )
        .unwrap();
        let c = fallback("box", Some(&file), None, None).unwrap();
        assert_eq!(c.display(), "alice@10.0.0.9:2022");
        assert_eq!(c.identity_files, vec![PathBuf::from("/keys/a")]);
        assert_eq!(c.proxy_command.as_deref(), Some("nc %h %p"));
        assert_eq!(c.known_hosts_files, vec![PathBuf::from("/kh")]);
        assert_eq!(c.strict_host_key_checking, StrictHostKeyChecking::No);
        assert_eq!(c.server_alive_count_max, Some(4));
        assert_eq!(c.proxy_jump, vec!["j1".to_string(), "j2".to_string()]);
        let other = fallback("other", Some(&file), Some(99), Some("zed".into())).unwrap();
        assert_eq!(other.display(), "zed@other:99");
    }

    /// Without an ssh binary, a `Match` block's settings apply to no host (they would apply to
    /// every host, whatever the condition); the `Host` blocks around it still count.
    #[test]
    fn fallback_parser_skips_match_blocks() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("config");
        std::fs::write(
            &file,
            "Match host other\n  Port 1\nHost box\n  HostName 10.0.0.9\nmatch=exec \"false\"\n  \
             User mallory\n  Port 2\nHost *\n  User alice\n",
        )
        .unwrap();
        let c = fallback("box", Some(&file), None, None).unwrap();
        assert_eq!(c.display(), "alice@10.0.0.9:22");
    }

    /// `%h`, `%r`, `%n` cannot inject a command into a ProxyCommand, and `%%` and `%p` expand as
    /// before. The command is run by a real `sh`: what reaches its argv is exactly the value.
    // POSIX quoting, checked by a real `sh`; Windows runs ProxyCommand through `cmd`.
    #[cfg(unix)]
    #[test]
    fn proxy_command_tokens_are_quoted_for_the_shell() {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("injected");
        let evil = format!("h$(touch {m});touch {m}", m = marker.display());
        let cfg = parse_ssh_g(
            "alias",
            &format!(
                "hostname {evil}\nuser u`touch {}`\nport 2200\nproxycommand printf '%%s|' %h %r \
                 %n %p\n",
                marker.display()
            ),
        )
        .unwrap();
        let cmd = cfg.expanded_proxy_command().unwrap();
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(&cmd)
            .output()
            .unwrap();
        assert!(out.status.success(), "{cmd}: {out:?}");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            format!("{evil}|u`touch {}`|alias|2200|", marker.display())
        );
        assert!(!marker.exists(), "a substituted value ran a command: {cmd}");
    }
}
