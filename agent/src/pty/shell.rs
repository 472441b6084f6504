//! Turning a [`SpawnSpec`] into the [`Program`] that [`crate::pty::spawn`] starts in a PTY.
//!
//! - Empty command: the user's login shell, started as a login shell (argv0 `-bash`, as
//!   `login` and sshd do). Which shell: `SHELL` in the spec's environment, else the passwd
//!   entry's, else the daemon's `$SHELL`, else `/bin/sh`; each only if it is executable.
//! - `cwd`: must be an existing directory, checked here and refused with
//!   [`ErrorReply::SpawnFailed`] naming the path (never a silent fall back to the home
//!   directory). `~` and `~/...` expand to the home directory; relative paths are taken from the
//!   home directory. The home directory is the program's `HOME` (below) when that is an
//!   absolute path to a directory it can enter, else the passwd entry's.
//! - A clean environment, like sshd gives a login (see [`clean_env`]): `HOME`, `USER`, `LOGNAME`,
//!   `SHELL`, `PATH`, `TERM` (from the spec; default `xterm-256color`, also for an empty one),
//!   `LANG` and `LC_*` and `XDG_RUNTIME_DIR` when the daemon has them, then the spec's extra
//!   environment. Nothing else of the daemon's own environment reaches a shell: not the
//!   `SSH_AUTH_SOCK` or `SSH_CONNECTION` of whichever connection happened to start the daemon
//!   (stale once it closed), not relay's `RELAY_*` settings.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use nix::unistd::{access, AccessFlags, Uid, User};
use relay_protocol::{ErrorReply, SpawnSpec};

use crate::pty::spawn::Program;

/// `TERM` when the spec gives none.
pub const DEFAULT_TERM: &str = "xterm-256color";

/// `PATH` when the daemon has none (sshd's default for users).
pub const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// A command ready to spawn, and the command line to record on the lease.
#[derive(Debug)]
pub struct Prepared {
    /// What [`crate::pty::spawn::spawn`] starts.
    pub program: Program,
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
    let passwd_home = user
        .as_ref()
        .map(|u| u.dir.clone())
        .filter(|d| d.is_dir())
        .or_else(|| std::env::var_os("HOME").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("/"));

    let requested = spec.env.iter().find(|(k, _)| k == "SHELL");
    let shell = login_shell(
        requested.map(|(_, v)| Path::new(v.as_str())),
        user.as_ref().map(|u| u.shell.as_path()),
    );
    let (program, argv, command) = if spec.command.is_empty() {
        let name = shell.file_name().unwrap_or(shell.as_os_str());
        let mut argv0 = OsString::from("-");
        argv0.push(name);
        (
            shell.clone().into_os_string(),
            vec![argv0],
            vec![shell.to_string_lossy().into_owned(), "-l".into()],
        )
    } else if spec.command[0].is_empty() {
        return Err(ErrorReply::BadRequest {
            message: "the command's program name is empty; give a program (e.g. \"sh\")".into(),
        });
    } else {
        (
            OsString::from(&spec.command[0]),
            spec.command.iter().map(OsString::from).collect(),
            spec.command.clone(),
        )
    };
    let login = Login {
        name: user.as_ref().map(|u| OsString::from(&u.name)),
        home: &passwd_home,
        shell: &shell,
        term: spec.term.as_deref(),
    };
    // Nothing of the daemon's own environment but what `clean_env` keeps.
    let mut env = clean_env(std::env::vars_os(), &login);
    for (key, value) in &spec.env {
        if key.is_empty() || key.contains('=') || key.contains('\0') || value.contains('\0') {
            return Err(ErrorReply::BadRequest {
                message: format!(
                    "environment variable {key:?} is not a valid name/value; names must be non-empty without '=' or NUL"
                ),
            });
        }
        env.retain(|(k, _)| k != key.as_str());
        env.push((key.into(), value.into()));
    }
    // The home the program is told of (`$HOME`) is the one it starts in and `~` names, so a
    // daemon started with an isolated HOME does not start shells elsewhere.
    let home = env
        .iter()
        .rev()
        .find(|(k, _)| k == "HOME")
        .map(|(_, v)| PathBuf::from(v))
        .filter(|d| d.is_absolute() && d.is_dir() && access(d.as_path(), AccessFlags::X_OK).is_ok())
        .unwrap_or(passwd_home);
    let cwd = resolve_cwd(spec.cwd.as_deref(), &home)?;
    Ok(Prepared {
        program: Program {
            program,
            argv,
            env,
            cwd: cwd.clone(),
        },
        command,
        cwd,
    })
}

/// What a shell's environment is made from, besides the daemon's own variables.
#[derive(Debug, Clone)]
pub struct Login<'a> {
    /// The user's name from the passwd entry (`None`: not found, the daemon's `USER` is used).
    pub name: Option<OsString>,
    /// Home directory from the passwd entry (used when the daemon has no `HOME`).
    pub home: &'a Path,
    /// The login shell.
    pub shell: &'a Path,
    /// `TERM` requested by the create (`None` or empty: [`DEFAULT_TERM`]).
    pub term: Option<&'a str>,
}

/// The environment a new shell starts with, as `(name, value)` pairs, before the create
/// request's own variables are added: what sshd gives a login, not the daemon's environment.
///
/// - `HOME`: the daemon's `HOME` if set (so an isolated home is kept), else `login.home`;
/// - `USER` and `LOGNAME`: the passwd name, else the daemon's `USER` / `LOGNAME`;
/// - `SHELL`: the login shell; `PATH`: the daemon's, else [`DEFAULT_PATH`]; `TERM`: requested;
/// - `LANG`, every `LC_*` and `XDG_RUNTIME_DIR` (per user, not per connection): copied when set.
///
/// Everything else in `daemon_env` is left out.
pub fn clean_env(
    daemon_env: impl IntoIterator<Item = (OsString, OsString)>,
    login: &Login<'_>,
) -> Vec<(OsString, OsString)> {
    let mut home = None;
    let mut path = None;
    let (mut user, mut logname) = (None, None);
    let mut copied = Vec::new();
    for (key, value) in daemon_env {
        match key.to_str() {
            Some("HOME") if !value.is_empty() => home = Some(value),
            Some("PATH") if !value.is_empty() => path = Some(value),
            Some("USER") => user = Some(value),
            Some("LOGNAME") => logname = Some(value),
            Some(k) if k == "LANG" || k.starts_with("LC_") || k == "XDG_RUNTIME_DIR" => {
                copied.push((key, value))
            }
            _ => {}
        }
    }
    let name = login.name.clone();
    let user = name.clone().or(user.clone()).or(logname.clone());
    let logname = name.or(logname).or(user.clone());
    let term = login.term.filter(|t| !t.is_empty()).unwrap_or(DEFAULT_TERM);
    let mut env = vec![
        (
            "HOME".into(),
            home.unwrap_or_else(|| login.home.as_os_str().to_owned()),
        ),
        ("SHELL".into(), login.shell.as_os_str().to_owned()),
        ("PATH".into(), path.unwrap_or_else(|| DEFAULT_PATH.into())),
        ("TERM".into(), term.into()),
    ];
    env.extend(user.map(|u| ("USER".into(), u)));
    env.extend(logname.map(|l| ("LOGNAME".into(), l)));
    env.extend(copied);
    env
}

/// The login shell: the one `requested` by the spec, else the passwd entry's, else the
/// daemon's `$SHELL`, else `/bin/sh`; each only if executable.
fn login_shell(requested: Option<&Path>, passwd: Option<&Path>) -> PathBuf {
    let env_shell = std::env::var_os("SHELL").map(PathBuf::from);
    [
        requested.map(Path::to_path_buf),
        passwd.map(Path::to_path_buf),
        env_shell,
    ]
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
        Ok(m) if m.is_dir() => match access(path.as_path(), AccessFlags::X_OK) {
            Ok(()) => Ok(path),
            Err(e) => Err(ErrorReply::SpawnFailed {
                message: format!(
                    "working directory {} cannot be entered ({e}); pass a directory you can \
                     enter as cwd",
                    path.display()
                ),
            }),
        },
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

    /// The directory a program starts in, and `~`, are its `HOME`: here one the create gives
    /// (a daemon started with an isolated `HOME` is the same case), not the passwd entry's.
    #[test]
    fn the_home_a_program_is_given_is_where_it_starts() {
        let home = tempfile::tempdir().unwrap();
        std::fs::create_dir(home.path().join("sub")).unwrap();
        let with = |cwd: Option<&str>| SpawnSpec {
            cwd: cwd.map(str::to_string),
            command: vec!["true".into()],
            env: vec![("HOME".into(), home.path().display().to_string())],
            ..SpawnSpec::default()
        };
        assert_eq!(prepare(&with(None)).unwrap().cwd, home.path());
        assert_eq!(
            prepare(&with(Some("~/sub"))).unwrap().cwd,
            home.path().join("sub")
        );
        assert_eq!(
            prepare(&with(Some("sub"))).unwrap().cwd,
            home.path().join("sub")
        );
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
            let got = prepared.program.env_var("TERM");
            assert_eq!(got.and_then(|v| v.to_str()), Some(want), "term {term:?}");
        }
    }

    #[test]
    fn shells_get_a_login_environment_not_the_daemons() {
        let daemon: Vec<(OsString, OsString)> = [
            ("HOME", "/tmp/isolated"),
            ("PATH", "/opt/bin:/usr/bin"),
            ("USER", "stale-user"),
            ("LANG", "C.UTF-8"),
            ("LC_TIME", "en_GB.UTF-8"),
            ("XDG_RUNTIME_DIR", "/run/user/1000"),
            ("SSH_AUTH_SOCK", "/tmp/ssh-gone/agent.1"),
            ("SSH_CONNECTION", "10.0.0.1 5 10.0.0.2 22"),
            ("RELAY_WINDOW_BYTES", "4096"),
            ("RELAY_LOG", "debug"),
            ("TERM", "dumb"),
        ]
        .into_iter()
        .map(|(k, v)| (k.into(), v.into()))
        .collect();
        let login = Login {
            name: Some("alice".into()),
            home: Path::new("/home/alice"),
            shell: Path::new("/bin/bash"),
            term: None,
        };
        let mut got: Vec<(String, String)> = clean_env(daemon, &login)
            .into_iter()
            .map(|(k, v)| (k.into_string().unwrap(), v.into_string().unwrap()))
            .collect();
        got.sort();
        let want: Vec<(String, String)> = [
            ("HOME", "/tmp/isolated"),
            ("LANG", "C.UTF-8"),
            ("LC_TIME", "en_GB.UTF-8"),
            ("LOGNAME", "alice"),
            ("PATH", "/opt/bin:/usr/bin"),
            ("SHELL", "/bin/bash"),
            ("TERM", DEFAULT_TERM),
            ("USER", "alice"),
            ("XDG_RUNTIME_DIR", "/run/user/1000"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        assert_eq!(got, want);

        // A bare daemon environment still gives a complete login.
        let bare = clean_env(
            Vec::new(),
            &Login {
                name: None,
                ..login
            },
        );
        let names: Vec<&str> = bare.iter().map(|(k, _)| k.to_str().unwrap()).collect();
        assert_eq!(names, ["HOME", "SHELL", "PATH", "TERM"]);
        assert_eq!(bare[0].1, "/home/alice");
        assert_eq!(bare[2].1, DEFAULT_PATH);
    }

    #[test]
    fn bad_env_names_are_refused() {
        let spec = SpawnSpec {
            env: vec![("A=B".into(), "x".into())],
            ..SpawnSpec::default()
        };
        assert!(matches!(prepare(&spec), Err(ErrorReply::BadRequest { .. })));
    }

    /// An empty command is the login shell, started as one (argv0 `-<name>`, as login and sshd
    /// do); a `SHELL` in the spec picks it and replaces the clean environment's value once.
    #[test]
    fn the_login_shell_gets_a_dash_argv0_and_spec_variables_win_once() {
        let spec = SpawnSpec {
            env: vec![
                ("SHELL".into(), "/bin/sh".into()),
                ("EXTRA".into(), "1".into()),
            ],
            ..SpawnSpec::default()
        };
        let prepared = prepare(&spec).unwrap();
        let program = &prepared.program;
        assert_eq!(program.program, OsString::from("/bin/sh"));
        assert_eq!(program.argv, [OsString::from("-sh")]);
        assert_eq!(prepared.command, ["/bin/sh", "-l"]);
        let shells: Vec<_> = program.env.iter().filter(|(k, _)| k == "SHELL").collect();
        assert_eq!(shells.len(), 1, "{:?}", program.env);
        assert_eq!(
            program.env_var("SHELL"),
            Some(std::ffi::OsStr::new("/bin/sh"))
        );
        assert_eq!(program.env_var("EXTRA"), Some(std::ffi::OsStr::new("1")));

        let command = SpawnSpec {
            command: vec!["printf".into(), "%s".into(), "a b".into()],
            ..SpawnSpec::default()
        };
        let prepared = prepare(&command).unwrap();
        assert_eq!(prepared.program.program, OsString::from("printf"));
        assert_eq!(
            prepared.program.argv,
            ["printf", "%s", "a b"].map(OsString::from)
        );
    }

    #[test]
    fn an_empty_program_name_is_refused() {
        let spec = SpawnSpec {
            command: vec![String::new(), "x".into()],
            ..SpawnSpec::default()
        };
        match prepare(&spec) {
            Err(ErrorReply::BadRequest { message }) => {
                assert!(message.contains("empty"), "{message}")
            }
            other => panic!("{other:?}"),
        }
    }
}
