//! Starting a program in a new PTY: what portable-pty's `spawn_command` did, without the costs
//! that grow with the daemon (its descriptors and its memory).
//!
//! - The PTY pair is opened close-on-exec from the start (`posix_openpt(O_CLOEXEC)`, then the
//!   slave by name with `O_CLOEXEC | O_NOCTTY`), so a spawn running at the same time on another
//!   thread never inherits this pair.
//! - The child is started with `clone(CLONE_VM | CLONE_VFORK)` ([`crate::sys::spawn`]), like
//!   glibc's `posix_spawn`: no copy of the daemon's page tables (a `fork` of an agent holding
//!   1,000 PTYs copies ~80 MiB of mappings and then takes copy-on-write faults); `fork` on
//!   glibc before 2.24, whose `clone` wrapper breaks the caller with `CLONE_VM`. Before
//!   `execve`, the child, in order:
//!   1. sets every signal to its default action (the daemon ignores `SIGHUP`, and tokio
//!      installs handlers; a shell must see `SIGHUP` when its terminal goes, as with sshd);
//!   2. becomes a session leader (`setsid`), takes the slave as stdin, stdout and stderr and as
//!      its controlling terminal (`TIOCSCTTY`), so the shell does job control and its process
//!      group can be signalled;
//!   3. enters the working directory;
//!   4. marks every descriptor from 3 up close-on-exec with one `close_range(3, ~0,
//!      CLOSE_RANGE_CLOEXEC)` (Linux 5.11). Older kernels (Debian 11, Ubuntu 20.04, RHEL 8)
//!      answer `ENOSYS` or `EINVAL`: the descriptors listed in `/proc/self/fd` are marked one
//!      by one instead, read with `getdents64` into a buffer on the stack;
//!   5. unblocks every signal and runs the program, looked up in the environment's `PATH` as
//!      `execvp` does; a file the kernel cannot run (no `#!` line) is run by `/bin/sh`, as
//!      `execvp` does too.
//!
//! portable-pty forked, swept `/proc/self/fd` through `std::fs::read_dir` in the child
//! (allocating after `fork`) and closed each descriptor with its own system call (about 5 µs
//! per descriptor): a create at 1,000 PTYs took ~21 ms against ~2 ms at none
//! (`docs/perf-notes/scale.md`).

use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

use nix::libc;
use nix::unistd::{access, AccessFlags};
use relay_protocol::TermSize;

use crate::pty::io as pty_io;

use crate::sys::spawn as child;

pub use child::Stage;

/// `PATH` searched when the environment has none (glibc's `execvp` default).
const FALLBACK_PATH: &str = "/bin:/usr/bin";

/// What to start: a program, its whole argument vector and environment, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Program {
    /// A path (containing `/`, relative ones taken from `cwd`) or a name looked up in the
    /// `PATH` of `env`.
    pub program: OsString,
    /// The argument vector, `argv[0]` included (`-bash` for a login shell).
    pub argv: Vec<OsString>,
    /// The program's whole environment (nothing of the daemon's is added).
    pub env: Vec<(OsString, OsString)>,
    /// The working directory.
    pub cwd: PathBuf,
}

impl Program {
    /// The value of `name` in [`Program::env`], if set.
    pub fn env_var(&self, name: &str) -> Option<&OsStr> {
        self.env
            .iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_os_str())
    }
}

/// A program running in a new PTY.
#[derive(Debug)]
pub struct Child {
    /// The PTY's master side (blocking, close-on-exec). The slave is closed in this process, so
    /// a read gives `EIO` once every process holding the terminal has closed it.
    pub master: OwnedFd,
    /// The child's pid: a session and process group leader whose controlling terminal is the
    /// PTY. Not reaped here (see [`crate::pty::io::reap`]).
    pub pid: u32,
}

/// Why [`spawn`] failed. Nothing keeps running after either.
#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    /// No PTY could be opened (`/dev/ptmx` missing, or the system's PTY limit reached:
    /// `/proc/sys/kernel/pty/max`).
    #[error("could not allocate a PTY: {0}")]
    Pty(io::Error),
    /// The program could not be started; the text says why and what to check.
    #[error("{0}")]
    Start(String),
}

/// Starts `program` in a new PTY of `size` (columns × rows) as described in the module docs.
///
/// # Errors
/// [`SpawnError::Pty`] when no PTY could be opened or sized; [`SpawnError::Start`] when the
/// program could not be started: missing, not executable, a directory, its interpreter
/// missing, a working directory that cannot be entered, or a NUL byte in an argument, each
/// named with its path or the `PATH` searched ([`explain`]). Nothing keeps running then.
pub fn spawn(program: &Program, size: TermSize) -> Result<Child, SpawnError> {
    spawn_with(program, size, child::how())
}

/// [`spawn`], with the child created `how`.
fn spawn_with(program: &Program, size: TermSize, how: child::How) -> Result<Child, SpawnError> {
    let plan_of = |slave| plan(program, slave).map_err(SpawnError::Start);
    let (master, slave) = crate::sys::pty::open_pair().map_err(SpawnError::Pty)?;
    pty_io::set_size(master.as_fd(), size).map_err(SpawnError::Pty)?;
    let plan = plan_of(slave.as_raw_fd())?;
    let started = child::start(&plan, how);
    // The slave's last copy in this process: the master reads EIO once the child's are gone.
    drop(slave);
    match started {
        Ok(pid) => Ok(Child { master, pid }),
        Err((None, e)) => Err(SpawnError::Start(format!(
            "could not create a process ({e}); the user's process limit (ulimit -u) may be \
             reached"
        ))),
        Err((Some(stage), e)) => Err(SpawnError::Start(explain(program, stage, &e))),
    }
}

/// The child's plan for `program` with the PTY's `slave`.
///
/// # Errors
/// A message naming the argument, variable or path that holds a NUL byte.
fn plan(program: &Program, slave: std::os::fd::RawFd) -> Result<child::Plan, String> {
    let c = |what: &str, s: Vec<u8>| {
        CString::new(s).map_err(|_| format!("{what} contains a NUL byte; remove it"))
    };
    let name = program.program.as_bytes();
    if name.contains(&0) {
        return Err("the program name contains a NUL byte; remove it".into());
    }
    let candidates = if name.contains(&b'/') {
        vec![c("the program path", name.to_vec())?]
    } else if name.is_empty() {
        Vec::new()
    } else {
        let search = program.env_var("PATH").unwrap_or(OsStr::new(FALLBACK_PATH));
        let mut all = Vec::new();
        for dir in std::env::split_paths(search) {
            let dir = if dir.as_os_str().is_empty() {
                PathBuf::from(".")
            } else {
                dir
            };
            if let Ok(path) = CString::new(dir.join(&program.program).into_os_string().into_vec()) {
                all.push(path);
            }
        }
        all
    };
    let argv = program
        .argv
        .iter()
        .map(|a| c("an argument", a.as_bytes().to_vec()))
        .collect::<Result<Vec<_>, _>>()?;
    // One value per name, the last one given (as `Program::env_var` reads it).
    let mut env: Vec<&(OsString, OsString)> = Vec::new();
    for pair in program.env.iter().rev() {
        if !env.iter().any(|(k, _)| *k == pair.0) {
            env.push(pair);
        }
    }
    env.reverse();
    let envp = env
        .into_iter()
        .map(|(k, v)| {
            let mut pair = k.as_bytes().to_vec();
            pair.push(b'=');
            pair.extend_from_slice(v.as_bytes());
            c("an environment variable", pair)
        })
        .collect::<Result<Vec<_>, _>>()?;
    let cwd = c(
        "the working directory",
        program.cwd.as_os_str().as_bytes().to_vec(),
    )?;
    let nofile_soft = crate::pty::nofile::original_for_children();
    Ok(child::Plan::new(
        slave,
        cwd,
        candidates,
        argv,
        envp,
        nofile_soft,
    ))
}

/// Says why `program` could not be started: `error` at `stage` of the child's setup. For
/// the `execve` stage, what to check: a program that does not exist (its path, or the `PATH`
/// searched), a directory, a file without execute permission, or a script whose interpreter
/// is missing.
pub fn explain(program: &Program, stage: Stage, error: &io::Error) -> String {
    let cwd = program.cwd.as_path();
    match stage {
        Stage::Exec => {}
        Stage::Cwd => {
            return format!(
                "could not enter the working directory {}: {error}; pass a directory you can \
                 enter as cwd",
                cwd.display()
            )
        }
        Stage::Session | Stage::Stdio => {
            return format!("could not set up the terminal session: {error}")
        }
    }
    let name = program.program.as_os_str();
    let shown = name.to_string_lossy();
    let path = if name.as_bytes().contains(&b'/') {
        Some(cwd.join(name))
    } else {
        search_path(program).and_then(|dirs| find_in(name, dirs))
    };
    let search = || {
        search_path(program)
            .map(|dirs| dirs.to_string_lossy().into_owned())
            .unwrap_or_else(|| FALLBACK_PATH.into())
    };
    let executable = |p: &Path| p.is_file() && access(p, AccessFlags::X_OK).is_ok();
    match (error.kind(), &path) {
        (io::ErrorKind::NotFound, None) if name.is_empty() => {
            "the program name is empty; give a program".into()
        }
        (io::ErrorKind::NotFound, None) if search().is_empty() => format!(
            "{shown} was not found: PATH is empty; set PATH or give the program's full path"
        ),
        (io::ErrorKind::NotFound, None) => format!(
            "{shown} was not found in PATH ({}); install it or give its full path",
            search()
        ),
        (io::ErrorKind::NotFound, Some(p)) if !p.exists() && p.is_symlink() => format!(
            "{} is a symbolic link to {}, which does not exist; give the path of an \
             installed program",
            p.display(),
            std::fs::read_link(p).unwrap_or_default().display()
        ),
        (io::ErrorKind::NotFound, Some(p)) if !p.exists() => format!(
            "{} does not exist; give the path of an installed program",
            p.display()
        ),
        (io::ErrorKind::NotFound, Some(p)) if executable(p) => format!(
            "{} exists but its interpreter (the #! line) or loader is missing: {error}",
            p.display()
        ),
        _ if error.raw_os_error() == Some(libc::ENOEXEC) => format!(
            "{} is not a program this host can run ({error}), and /bin/sh could not run it as \
             a script; give a script a first line such as #!/bin/sh, or build the program for \
             this machine",
            path.as_deref().unwrap_or(Path::new(name)).display()
        ),
        (io::ErrorKind::PermissionDenied, Some(p)) if p.is_dir() => {
            format!("{} is a directory, not a program", p.display())
        }
        (io::ErrorKind::PermissionDenied, Some(p)) if p.is_file() && !executable(p) => format!(
            "{} is not executable ({error}); check its mode (chmod +x) and that its file \
             system is not mounted noexec",
            p.display()
        ),
        _ => format!("{shown}: {error}"),
    }
}

/// The `PATH` the program is searched in: its environment's, else [`FALLBACK_PATH`].
fn search_path(program: &Program) -> Option<&OsStr> {
    program.env_var("PATH").or(Some(OsStr::new(FALLBACK_PATH)))
}

/// The first entry of `dirs` (a `PATH` value) that holds a file, directory or symbolic link
/// named `program` (as `execvp` tries them: one that is not executable, or a link to nothing,
/// is reported as such).
fn find_in(program: &OsStr, dirs: &OsStr) -> Option<std::path::PathBuf> {
    if program.is_empty() {
        return None;
    }
    std::env::split_paths(dirs)
        .map(|d| d.join(program))
        .find(|p| p.exists() || p.is_symlink())
}

#[cfg(test)]
mod tests;
