//! The tests' one `/proc` walker (Linux `proc(5)`): which processes run, in which state, with
//! which arguments and environment, and whose children they are.
//!
//! Processes that end while being read are skipped, never an error: a test asks again.

use std::fs;

/// One process as `/proc/<pid>` showed it.
#[derive(Debug, Clone)]
pub struct Proc {
    /// Its pid.
    pub pid: u32,
    /// Field 3 of `/proc/<pid>/stat`: `R`, `S`, `D`, `Z`, ...
    pub state: char,
    /// `/proc/<pid>/cmdline`, split at NULs (lossy UTF-8).
    pub argv: Vec<String>,
    environ: Vec<u8>,
}

impl Proc {
    /// Reads `/proc/<pid>`; `None` once the process is gone (or its stat is unreadable).
    pub fn read(pid: u32) -> Option<Proc> {
        let state = state(pid)?;
        Some(Proc {
            pid,
            state,
            argv: nul_list(&fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default()),
            environ: fs::read(format!("/proc/{pid}/environ")).unwrap_or_default(),
        })
    }

    /// Whether it has not wholly exited, as [`alive`] says.
    pub fn is_live(&self) -> bool {
        !matches!(self.state, 'Z' | 'X') || threads(self.pid) > 1
    }

    /// Argument `i` (0 is the program).
    pub fn arg(&self, i: usize) -> Option<&str> {
        self.argv.get(i).map(String::as_str)
    }

    /// Whether its environment holds exactly `entry` (`NAME=value`). Readable only for processes
    /// of the same user.
    pub fn has_env(&self, entry: &str) -> bool {
        self.environ
            .split(|&b| b == 0)
            .any(|e| e == entry.as_bytes())
    }
}

/// Every live process (zombies left out).
pub fn all() -> Vec<Proc> {
    pids()
        .into_iter()
        .filter_map(Proc::read)
        .filter(Proc::is_live)
        .collect()
}

/// Whether `pid` exists and has not wholly exited. A zombie has, unless other threads of its
/// process still run: a multi-threaded process killed with SIGKILL shows its main thread as a
/// zombie while the others are still exiting, and until the last one is gone the process's
/// descriptors (a listening socket, a lock) are still open (Linux `exit_notify`: the group leader
/// is a "delayed" zombie while its thread group is not empty).
pub fn alive(pid: u32) -> bool {
    Proc::read(pid).is_some_and(|p| p.is_live())
}

/// How many threads of `pid` are listed in `/proc/PID/task` (0 when it is gone).
fn threads(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task")).map_or(0, |d| d.count())
}

/// Pids of live processes one of whose arguments contains `needle`.
pub fn pids_with(needle: &str) -> Vec<u32> {
    pids_where(|proc| proc.argv.iter().any(|a| a.contains(needle)))
}

/// Pids of live processes one of whose arguments is exactly `arg`.
pub fn pids_with_arg(arg: &str) -> Vec<u32> {
    pids_where(|proc| proc.argv.iter().any(|a| a == arg))
}

/// Pids of live processes for which `wanted` holds.
pub fn pids_where(wanted: impl Fn(&Proc) -> bool) -> Vec<u32> {
    all()
        .into_iter()
        .filter(|p| wanted(p))
        .map(|p| p.pid)
        .collect()
}

/// Live children of `pid`, sorted (from `/proc/<pid>/task/*/children`).
pub fn children(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    if let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) {
        for task in tasks.flatten() {
            let text = fs::read_to_string(task.path().join("children")).unwrap_or_default();
            out.extend(
                text.split_whitespace()
                    .filter_map(|p| p.parse::<u32>().ok()),
            );
        }
    }
    out.retain(|&c| alive(c));
    out.sort_unstable();
    out
}

fn pids() -> Vec<u32> {
    fs::read_dir("/proc")
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Field 3 of `/proc/<pid>/stat`. The command name (field 2) may hold spaces and parentheses,
/// so the state is read after its last `)`.
fn state(pid: u32) -> Option<char> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

fn nul_list(bytes: &[u8]) -> Vec<String> {
    bytes
        .split(|&c| c == 0)
        .filter(|s| !s.is_empty())
        .map(|s| String::from_utf8_lossy(s).into_owned())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_found_with_its_arguments_and_a_child_with_its_parent() {
        let me = Proc::read(std::process::id()).expect("this process");
        assert!(me.is_live());
        assert_eq!(me.argv, std::env::args().collect::<Vec<_>>());

        let mut child = std::process::Command::new("sleep")
            .arg("30.25")
            .env("RELAY_TESTKIT_PROBE", "yes")
            .spawn()
            .expect("sleep");
        let pid = child.id();
        assert!(children(std::process::id()).contains(&pid));
        assert!(pids_with_arg("30.25").contains(&pid));
        assert!(Proc::read(pid).unwrap().has_env("RELAY_TESTKIT_PROBE=yes"));
        child.kill().unwrap();
        // Killed but not reaped: a zombie, which is not alive.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while alive(pid) {
            assert!(std::time::Instant::now() < deadline, "{pid} still alive");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(!pids_with_arg("30.25").contains(&pid));
        child.wait().unwrap();
        assert!(Proc::read(pid).is_none());
    }
}
