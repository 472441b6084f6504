//! Turning a [`SpawnSpec`] into a portable-pty [`CommandBuilder`].
//!
//! - Empty command: the user's login shell (passwd entry, else `$SHELL`, else `/bin/sh`), started
//!   as a login shell (argv0 `-bash` style, which portable-pty does for its default program).
//! - `cwd`: must be an existing directory. portable-pty silently falls back to `$HOME` for a
//!   missing or non-directory cwd, so it is checked here and refused with
//!   [`ErrorReply::SpawnFailed`] naming the path. `~` and `~/...` expand to the home directory;
//!   relative paths are taken from the home directory.
//! - `TERM` from the spec (default `xterm-256color`, also for an empty one), then the extra
//!   environment.

use std::path::{Path, PathBuf};

use nix::unistd::{access, AccessFlags, Uid, User};
use portable_pty::CommandBuilder;
use relay_protocol::{ErrorReply, SpawnSpec};

/// `TERM` when the spec gives none.
pub const DEFAULT_TERM: &str = "xterm-256color";

/// A command ready to spawn, and the command line to record on the lease.
#[derive(Debug)]
pub struct Prepared {
    /// What portable-pty spawns.
    pub builder: CommandBuilder,
    /// Command line for the lease record (`[shell, "-l"]` for the login shell).
    pub command: Vec<String>,
    /// The working directory the process starts in.
    pub cwd: PathBuf,
}

/// Builds the command for `spec`.
///
/// # Errors
/// [`ErrorReply::SpawnFailed`] for a cwd that is not an existing directory, and
/// [`ErrorReply::BadRequest`] for an environment variable name that is empty or contains `=`
/// or NUL.
pub fn prepare(spec: &SpawnSpec) -> Result<Prepared, ErrorReply> {
    let user = User::from_uid(Uid::current()).ok().flatten();
    let home = user
        .as_ref()
        .map(|u| u.dir.clone())
        .filter(|d| d.is_dir())
        .or_else(|| std::env::var_os("HOME").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("/"));
    let cwd = resolve_cwd(spec.cwd.as_deref(), &home)?;

    let (mut builder, command) = if spec.command.is_empty() {
        let shell = login_shell(user.as_ref().map(|u| u.shell.as_path()));
        let mut b = CommandBuilder::new_default_prog();
        // portable-pty runs the builder's $SHELL with argv0 "-<basename>" (a login shell).
        b.env("SHELL", &shell);
        (b, vec![shell.to_string_lossy().into_owned(), "-l".into()])
    } else {
        (
            CommandBuilder::from_argv(spec.command.iter().map(Into::into).collect()),
            spec.command.clone(),
        )
    };
    builder.cwd(&cwd);
    let term = spec.term.as_deref().filter(|t| !t.is_empty());
    builder.env("TERM", term.unwrap_or(DEFAULT_TERM));
    if std::env::var_os("HOME").is_none() {
        builder.env("HOME", &home);
    }
    for (key, value) in &spec.env {
        if key.is_empty() || key.contains('=') || key.contains('\0') || value.contains('\0') {
            return Err(ErrorReply::BadRequest {
                message: format!(
                    "environment variable {key:?} is not a valid name/value; names must be non-empty without '=' or NUL"
                ),
            });
        }
        builder.env(key, value);
    }
    Ok(Prepared {
        builder,
        command,
        cwd,
    })
}

/// The login shell: passwd entry, else `$SHELL`, else `/bin/sh`; each only if executable.
fn login_shell(passwd: Option<&Path>) -> PathBuf {
    let env_shell = std::env::var_os("SHELL").map(PathBuf::from);
    [passwd.map(Path::to_path_buf), env_shell]
        .into_iter()
        .flatten()
        .find(|p| !p.as_os_str().is_empty() && access(p.as_path(), AccessFlags::X_OK).is_ok())
        .unwrap_or_else(|| PathBuf::from("/bin/sh"))
}

/// Checks and resolves the requested working directory.
fn resolve_cwd(cwd: Option<&str>, home: &Path) -> Result<PathBuf, ErrorReply> {
    let path = match cwd {
        None | Some("") | Some("~") => home.to_path_buf(),
        Some(c) => match c.strip_prefix("~/") {
            Some(rest) => home.join(rest),
            None => home.join(c), // An absolute `c` replaces `home`.
        },
    };
    match std::fs::metadata(&path) {
        Ok(m) if m.is_dir() => Ok(path),
        Ok(_) => Err(ErrorReply::SpawnFailed {
            message: format!(
                "working directory {} is not a directory; pass an existing directory as cwd",
                path.display()
            ),
        }),
        Err(e) => Err(ErrorReply::SpawnFailed {
            message: format!(
                "working directory {} is not usable ({e}); pass an existing directory as cwd",
                path.display()
            ),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cwd_resolution() {
        let home = std::env::temp_dir();
        let file = home.join(format!("relay-shell-test-{}", std::process::id()));
        std::fs::write(&file, b"").unwrap();
        let file_name = file.file_name().unwrap().to_str().unwrap().to_string();
        let cases: Vec<(Option<String>, Result<PathBuf, &str>)> = vec![
            (None, Ok(home.clone())),
            (Some("~".into()), Ok(home.clone())),
            (Some("/".into()), Ok(PathBuf::from("/"))),
            (
                Some("/definitely/not/here".into()),
                Err("/definitely/not/here"),
            ),
            (Some(file.display().to_string()), Err("is not a directory")),
            (Some(format!("~/{file_name}")), Err("is not a directory")),
        ];
        for (cwd, want) in cases {
            let got = resolve_cwd(cwd.as_deref(), &home);
            match (got, want) {
                (Ok(p), Ok(w)) => assert_eq!(p, w),
                (Err(ErrorReply::SpawnFailed { message }), Err(w)) => {
                    assert!(message.contains(w), "{message} should contain {w}")
                }
                (got, want) => panic!("cwd {cwd:?}: got {got:?}, want {want:?}"),
            }
        }
        std::fs::remove_file(&file).unwrap();
    }

    /// Regression: `term: ""` started programs with an empty TERM.
    #[test]
    fn empty_term_means_the_default() {
        for (term, want) in [
            (None, DEFAULT_TERM),
            (Some(""), DEFAULT_TERM),
            (Some("vt100"), "vt100"),
        ] {
            let spec = SpawnSpec {
                term: term.map(str::to_string),
                command: vec!["true".into()],
                ..SpawnSpec::default()
            };
            let prepared = prepare(&spec).unwrap();
            assert_eq!(
                prepared.builder.get_env("TERM").and_then(|t| t.to_str()),
                Some(want),
                "term {term:?}"
            );
        }
    }

    #[test]
    fn bad_env_names_are_refused() {
        let spec = SpawnSpec {
            env: vec![("A=B".into(), "x".into())],
            ..SpawnSpec::default()
        };
        assert!(matches!(prepare(&spec), Err(ErrorReply::BadRequest { .. })));
    }
}
