//! What the agent reads from `/proc` (Linux `proc(5)`): a process's state, group, session and
//! start time, a shell's child processes, the members of a PTY's session, and the daemon's own
//! resident memory. Read only on demand (a lifecycle re-check, a listing, an end): nothing here
//! polls.

use std::fs;
use std::io;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// What `/proc/<pid>/stat` says about a process (fields numbered as in `proc(5)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    /// Field 3: `R`, `S`, `D`, `Z`, ...
    pub state: char,
    /// Field 4: parent pid.
    pub ppid: u32,
    /// Field 5: process group id.
    pub pgrp: i32,
    /// Field 6: session id (the pid of the session leader; a PTY's shell leads its session).
    pub session: i32,
    /// Field 22: start time, clock ticks since boot.
    pub start_ticks: u64,
}

impl Stat {
    /// A zombie or dead process (exited, not yet reaped).
    pub fn is_gone(&self) -> bool {
        matches!(self.state, 'Z' | 'X')
    }
}

/// Parses the text of `/proc/<pid>/stat`. The command name (field 2) may contain spaces and
/// parentheses, so fields are counted after its last `)`.
pub fn parse_stat(text: &str) -> Option<Stat> {
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3 (state); field N is fields[N - 3].
    let field = |n: usize| fields.get(n - 3).copied();
    Some(Stat {
        state: field(3)?.chars().next()?,
        ppid: field(4)?.parse().ok()?,
        pgrp: field(5)?.parse().ok()?,
        session: field(6)?.parse().ok()?,
        start_ticks: field(22)?.parse().ok()?,
    })
}

/// The stat of process `pid`, if it exists.
pub fn stat(pid: u32) -> Option<Stat> {
    parse_stat(&fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// Every process with its stat (processes that vanish while reading are skipped).
///
/// # Errors
/// `/proc` itself could not be listed.
pub fn processes() -> io::Result<impl Iterator<Item = (u32, Stat)>> {
    Ok(fs::read_dir("/proc")?.filter_map(|e| {
        let pid: u32 = e.ok()?.file_name().to_str()?.parse().ok()?;
        Some((pid, stat(pid)?))
    }))
}

/// The live processes of the session led by `leader` other than the leader itself, started no
/// earlier than the leader (`leader_ticks`): what is left of a PTY's shell's session besides the
/// shell (which the caller signals only while it is its own unreaped child). A session id is not
/// reused while the session has members, and the start-time bound excludes processes of an
/// older session whose leader's pid was reused.
pub fn session_members(leader: u32, leader_ticks: u64) -> Vec<u32> {
    let Ok(all) = processes() else {
        return Vec::new();
    };
    all.filter(|(pid, st)| *pid != leader && is_member(st, leader, leader_ticks))
        .map(|(pid, _)| pid)
        .collect()
}

fn is_member(st: &Stat, leader: u32, leader_ticks: u64) -> bool {
    st.session == leader as i32 && st.start_ticks >= leader_ticks && !st.is_gone()
}

/// Every live process's stat, read once (for a listing that looks at many leases).
pub fn snapshot() -> io::Result<Vec<(u32, Stat)>> {
    Ok(processes()?.filter(|(_, st)| !st.is_gone()).collect())
}

/// The work a PTY's shell `leader` holds: the live processes of its session other than the shell
/// (what an end would SIGKILL; a job reparented by `nohup` or `(cmd &)` is still there) and its
/// live children (one that left the session with `setsid` still counts: conservative). `all` is
/// a [`snapshot`]; `leader_ticks` the shell's start time when known (without it, only the
/// children count).
pub fn work_count(all: &[(u32, Stat)], leader: u32, leader_ticks: Option<u64>) -> u32 {
    all.iter()
        .filter(|(pid, st)| {
            *pid != leader
                && (st.ppid == leader || leader_ticks.is_some_and(|t| is_member(st, leader, t)))
        })
        .count() as u32
}

/// Whether process `pid` now runs another program than `program` (it `exec`ed something, e.g.
/// `exec ssh host` typed into a login shell). `None` when either cannot be resolved.
pub fn runs_other_program(pid: u32, program: &std::path::Path) -> Option<bool> {
    let exe = fs::read_link(format!("/proc/{pid}/exe")).ok()?;
    let program = fs::canonicalize(program).ok()?;
    Some(exe != program)
}

/// SIGKILLs every member of the session led by `leader` (see [`session_members`]), checking each
/// process's session and start time again right before its signal. Returns how many were sent.
pub fn kill_session(leader: u32, leader_ticks: u64) -> u32 {
    let mut sent = 0;
    for pid in session_members(leader, leader_ticks) {
        let still = stat(pid).is_some_and(|st| is_member(&st, leader, leader_ticks));
        if still && kill(Pid::from_raw(pid as i32), Signal::SIGKILL).is_ok() {
            sent += 1;
        }
    }
    sent
}

/// The daemon's resident memory in bytes (`VmRSS` of `/proc/self/status`), 0 when unknown.
pub fn own_rss_bytes() -> u64 {
    let Ok(text) = fs::read_to_string("/proc/self/status") else {
        return 0;
    };
    text.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().strip_suffix("kB"))
        .and_then(|kb| kb.trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    #[test]
    fn stat_fields_are_counted_after_the_command_name() {
        let text = "4242 (a) b (c)) S 1 4242 4240 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 987654 \
                    1 2 3";
        assert_eq!(
            parse_stat(text),
            Some(Stat {
                state: 'S',
                ppid: 1,
                pgrp: 4242,
                session: 4240,
                start_ticks: 987654
            })
        );
        assert_eq!(parse_stat("1 (x) S 1"), None);
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn children_count_as_work_and_exited_ones_do_not() {
        let me = std::process::id();
        // Other tests spawn children too: count over this child's entry only.
        let work_of = |pid: u32| {
            let only: Vec<(u32, Stat)> = snapshot()
                .unwrap()
                .into_iter()
                .filter(|(p, _)| *p == pid)
                .collect();
            work_count(&only, me, None)
        };
        let mut child = Command::new("sleep").arg("30").spawn().unwrap();
        assert_eq!(work_of(child.id()), 1);
        child.kill().unwrap();
        // Killed but not reaped yet (WNOWAIT waits until it is a zombie and leaves it one): a
        // zombie is no work to keep a shell for.
        use nix::sys::wait::{waitid, Id, WaitPidFlag};
        let pid = nix::unistd::Pid::from_raw(child.id() as i32);
        waitid(Id::Pid(pid), WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT).unwrap();
        assert_eq!(work_of(child.id()), 0);
        child.wait().unwrap();
        assert!(own_rss_bytes() > 1024 * 1024);
    }

    #[test]
    fn work_counts_a_reparented_job_of_the_session_and_exec_is_seen() {
        use std::os::unix::process::CommandExt;
        // A session leader like a PTY's shell, whose job left it as a child: `(sleep &)`.
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "(sleep 1000 &); exec sleep 1001"]);
        // SAFETY: setsid is async-signal-safe and touches nothing of the parent.
        unsafe {
            cmd.pre_exec(|| nix::unistd::setsid().map(|_| ()).map_err(io::Error::from));
        }
        let mut leader = cmd.spawn().unwrap();
        let pid = leader.id();
        let ticks = stat(pid).unwrap().start_ticks;
        let mut found = 0;
        for _ in 0..50 {
            found = work_count(&snapshot().unwrap(), pid, Some(ticks));
            if found == 1 && runs_other_program(pid, std::path::Path::new("/bin/sh")) == Some(true)
            {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        assert_eq!(found, 1, "the reparented job counts as work");
        assert_eq!(
            work_count(&snapshot().unwrap(), pid, None),
            0,
            "no child of its own"
        );
        assert_eq!(
            runs_other_program(pid, std::path::Path::new("/bin/sh")),
            Some(true)
        );
        assert_eq!(kill_session(pid, ticks), 1);
        leader.kill().unwrap();
        leader.wait().unwrap();
    }
}
