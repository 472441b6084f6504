//! What differs between the desktops the connector runs on (Linux, macOS, Windows): the one place
//! in the library with `cfg(unix)` / `cfg(windows)`.
//!
//! Everything else calls these functions and never names a platform. Each function says what it
//! does on each platform and where the rule comes from.

use std::path::{Path, PathBuf};
use std::time::Duration;

use russh::keys::agent::client::{AgentClient, AgentStream};

/// An ssh-agent connection, whatever carries it (a Unix socket, a Windows named pipe, Pageant).
pub(crate) type Agent = AgentClient<Box<dyn AgentStream + Send + Unpin>>;

/// Time since boot *including* time spent suspended, for telling a sleep from a silent link
/// (`host/heartbeat.rs`).
///
/// Linux: `CLOCK_BOOTTIME`. macOS: `CLOCK_MONOTONIC`, which on Darwin keeps counting during sleep
/// (it is `mach_continuous_time`, unlike Linux's). Windows: `GetTickCount64` (milliseconds since
/// boot, sleep and hibernation included). Zero if the clock cannot be read, which makes every
/// gap look like a silent link rather than a sleep.
pub(crate) fn boot_time() -> Duration {
    #[cfg(target_os = "linux")]
    let clock = nix::time::ClockId::CLOCK_BOOTTIME;
    #[cfg(all(unix, not(target_os = "linux")))]
    let clock = nix::time::ClockId::CLOCK_MONOTONIC;
    #[cfg(unix)]
    {
        nix::time::clock_gettime(clock)
            .map(Duration::from)
            .unwrap_or_default()
    }
    #[cfg(windows)]
    {
        // SAFETY: GetTickCount64 takes no arguments and cannot fail.
        let ms = unsafe { windows_sys::Win32::System::SystemInformation::GetTickCount64() };
        Duration::from_millis(ms)
    }
}

/// The user's home directory, where `.ssh/` lives: `$HOME` on Unix, `%USERPROFILE%` on Windows
/// (where OpenSSH for Windows looks for `.ssh\config`, `known_hosts` and keys). `None` when unset
/// or empty.
pub(crate) fn home_dir() -> Option<PathBuf> {
    #[cfg(unix)]
    const VAR: &str = "HOME";
    #[cfg(windows)]
    const VAR: &str = "USERPROFILE";
    std::env::var_os(VAR)
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
}

/// The local user name, OpenSSH's default remote user: `$USER`, else the password database entry
/// of this uid (Unix); `%USERNAME%` (Windows).
pub(crate) fn local_user() -> Option<String> {
    #[cfg(unix)]
    {
        std::env::var("USER")
            .ok()
            .filter(|u| !u.is_empty())
            .or_else(|| {
                nix::unistd::User::from_uid(nix::unistd::getuid())
                    .ok()
                    .flatten()
                    .map(|u| u.name)
            })
    }
    #[cfg(windows)]
    {
        std::env::var("USERNAME").ok().filter(|u| !u.is_empty())
    }
}

/// Creates `dir` and its parents, readable only by the user on Unix (mode 0700, as OpenSSH
/// creates `~/.ssh`). Windows: default ACLs (the user profile's, which already keep other users
/// out of `%USERPROFILE%`).
///
/// # Errors
/// The I/O error of the directory that could not be created.
pub(crate) fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir)
}

/// Opens `file` for appending, creating it readable and writable only by the user on Unix (mode
/// 0600, as OpenSSH creates `known_hosts`). Windows: default ACLs, as with
/// [`create_private_dir`].
///
/// # Errors
/// The I/O error of opening or creating the file.
pub(crate) fn append_private_file(file: &Path) -> std::io::Result<std::fs::File> {
    let mut options = std::fs::OpenOptions::new();
    options.create(true).append(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    options.open(file)
}

/// Whether `path` is a file this user could run: any execute bit on Unix; on Windows, any
/// existing file (Windows has no execute bit; the extension decides).
pub(crate) fn is_executable(path: &Path) -> bool {
    let Ok(meta) = std::fs::metadata(path) else {
        return false;
    };
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        meta.is_file() && meta.permissions().mode() & 0o111 != 0
    }
    #[cfg(windows)]
    {
        meta.is_file()
    }
}

/// Puts a child in a process group of its own (Unix), so that a Ctrl-C typed at a cooked terminal
/// reaches this process and not the child under it. Windows: no-op (a console Ctrl-C goes to the
/// console's processes, and the local transport does not exist there).
pub(crate) fn own_process_group(cmd: &mut tokio::process::Command) {
    #[cfg(unix)]
    cmd.process_group(0);
    #[cfg(windows)]
    let _ = cmd;
}

/// A command that runs `line` through the platform's shell, as OpenSSH runs `ProxyCommand`:
/// `sh -c LINE` on Unix; `cmd /C LINE` on Windows (OpenSSH for Windows has no POSIX shell), the
/// line passed to cmd.exe as written (`raw_arg`): cmd does not read the C runtime's `\"`
/// escapes, so a quoted program path (`"C:\Program Files\...\connect.exe" %h %p`) would break.
pub(crate) fn shell_command(line: &str) -> tokio::process::Command {
    #[cfg(unix)]
    {
        let mut cmd = tokio::process::Command::new("sh");
        cmd.arg("-c").arg(line);
        cmd
    }
    #[cfg(windows)]
    {
        let mut cmd = tokio::process::Command::new("cmd");
        cmd.arg("/C").raw_arg(line);
        cmd
    }
}

/// The Windows OpenSSH agent's named pipe, used when `SSH_AUTH_SOCK` is unset (as `ssh.exe`
/// does).
#[cfg(windows)]
const OPENSSH_AGENT_PIPE: &str = r"\\.\pipe\openssh-ssh-agent";

/// Connects to the user's ssh-agent, if there is one to ask.
///
/// Unix: the socket `SSH_AUTH_SOCK` names; `None` when it is unset or empty (OpenSSH's rule).
/// Windows: the named pipe `SSH_AUTH_SOCK` names, else the OpenSSH agent's pipe
/// `\\.\pipe\openssh-ssh-agent`, else Pageant (russh's Pageant client); `None` when none answers.
///
/// # Errors
/// `Some(Err(..))` when an agent was named but could not be reached (the caller reports it and
/// goes on with key files).
pub(crate) async fn connect_agent() -> Option<Result<Agent, russh::keys::Error>> {
    let named = std::env::var_os("SSH_AUTH_SOCK").filter(|s| !s.is_empty());
    #[cfg(unix)]
    {
        let path = named?;
        Some(
            AgentClient::connect_uds(path)
                .await
                .map(AgentClient::dynamic),
        )
    }
    #[cfg(windows)]
    {
        if let Some(pipe) = named {
            return Some(
                AgentClient::connect_named_pipe(pipe)
                    .await
                    .map(AgentClient::dynamic),
            );
        }
        if let Ok(agent) = AgentClient::connect_named_pipe(OPENSSH_AGENT_PIPE).await {
            return Some(Ok(agent.dynamic()));
        }
        AgentClient::connect_pageant()
            .await
            .ok()
            .map(|agent| Ok(agent.dynamic()))
    }
}

/// Gives memory the process has freed back to the OS, where the allocator keeps it otherwise:
/// `malloc_trim(0)` on glibc (its per-thread arenas hold on to freed pages, so a process that
/// once uploaded the agent to many hosts at once, or parsed a few large calls, would stay at its
/// peak: 127 MiB instead of 48 MiB for a sidecar after 20 uploads). Costs about a millisecond
/// per 100 MB of heap: call it after freeing something large, not per call. A no-op elsewhere
/// (musl, macOS and Windows return large blocks on `free`).
pub fn return_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks glibc's own heap under its locks; any pad is valid.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Whether this platform can run the local agent (`relay-agent bridge`): only Unix desktops.
pub(crate) const HAS_LOCAL_AGENT: bool = cfg!(unix);

/// Why `--local` fails on a platform without a local agent; shown to the user as is.
pub const NO_LOCAL_AGENT: &str = "no local agent on Windows; use an SSH host";

#[cfg(test)]
mod tests {
    use super::*;

    /// The ProxyCommand line reaches the platform's shell as written: quotes are the shell's to
    /// read (sh removes them; cmd.exe's `echo` prints them), never escaped on the way.
    #[tokio::test]
    async fn shell_command_passes_the_line_as_written() {
        let out = shell_command(r#"echo "quoted arg" x"#)
            .stdin(std::process::Stdio::null())
            .output()
            .await
            .expect("running the platform's shell");
        assert!(out.status.success(), "{out:?}");
        let text = String::from_utf8_lossy(&out.stdout);
        #[cfg(unix)]
        assert_eq!(text.trim_end(), "quoted arg x");
        #[cfg(windows)]
        assert_eq!(text.trim_end(), r#""quoted arg" x"#);
    }
}
