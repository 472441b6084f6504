//! Host-side inspection of an [`SshHost`] for exact counts in the fault suite: the agent
//! daemon's pid, its shells (the daemon's children), the container's PTYs and established SSH
//! connections. Everything goes through `docker exec`, so it works without root and while the
//! host is partitioned (not while it is paused: docker refuses to exec into a paused
//! container). Pids are the container's own, as the agent reports them in leases.

use anyhow::{anyhow, bail, Context, Result};

use crate::fixture::{SshHost, USER};

/// A process in the container, from `ps`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Proc {
    pid: u32,
    ppid: u32,
    /// State `Z`: exited, not yet reaped by its parent.
    zombie: bool,
    user: String,
    comm: String,
    args: String,
}

/// What inspection reads in one `docker exec`: the process table and the pids holding flocks.
struct Snapshot {
    procs: Vec<Proc>,
    flock_holders: Vec<u32>,
}

impl Snapshot {
    /// `relay-agent daemon` processes of [`USER`] that hold a flock (the daemon holds
    /// `run/daemon.lock` for its whole life; its start-up forks do not).
    fn daemons(&self) -> Vec<&Proc> {
        self.procs
            .iter()
            .filter(|p| p.user == USER && is_daemon_args(&p.args))
            .filter(|p| self.flock_holders.contains(&p.pid))
            .collect()
    }

    fn daemon(&self) -> Result<Option<&Proc>> {
        match self.daemons().as_slice() {
            [] => Ok(None),
            [one] => Ok(Some(one)),
            many => bail!(
                "several relay-agent daemons run as {USER}: {:?}",
                many.iter().map(|p| (p.pid, &p.args)).collect::<Vec<_>>()
            ),
        }
    }

    /// See [`SshHost::shell_pids`].
    fn shells(&self) -> Result<Vec<u32>> {
        let Some(daemon) = self.daemon()? else {
            return Ok(Vec::new());
        };
        let mut pids: Vec<u32> = self
            .procs
            .iter()
            .filter(|p| p.ppid == daemon.pid && !p.zombie && p.args != daemon.args)
            .map(|p| p.pid)
            .collect();
        pids.sort_unstable();
        Ok(pids)
    }
}

/// `.../relay-agent[-suffix] daemon ...`, also when run by qemu-user on an emulated host.
///
/// There the kernel's binfmt_misc handler starts the interpreter with the program's path in
/// front: `qemu-aarch64-static /path/relay-agent-X daemon`, or, with the handler's P flag
/// (Debian's), `/usr/libexec/qemu-binfmt/aarch64-binfmt-P /path/relay-agent-X relay-agent-X
/// daemon` (the path, then the original `argv[0]`). So the process name (`comm`) is the
/// interpreter's and only the command line tells.
fn is_daemon_args(args: &str) -> bool {
    let mut words = args.split_whitespace().peekable();
    let base = |w: &str| w.rsplit('/').next().unwrap_or(w).to_string();
    let is_agent = |w: &str| base(w).starts_with("relay-agent");
    if words.peek().is_some_and(|w| is_qemu(&base(w))) {
        words.next();
        // The program's path; with the P flag its original argv[0] follows.
        if !words.next().is_some_and(is_agent) {
            return false;
        }
        if words.peek().is_some_and(|w| is_agent(w)) {
            words.next();
        }
        return words.next() == Some("daemon");
    }
    words.next().is_some_and(is_agent) && words.next() == Some("daemon")
}

/// A qemu-user interpreter: `qemu-aarch64`, `qemu-aarch64-static`, or a binfmt wrapper such
/// as Debian's `aarch64-binfmt-P`.
fn is_qemu(name: &str) -> bool {
    name.starts_with("qemu-") || name.contains("-binfmt")
}

/// `args` without the `{comm} ` that busybox's `ps` puts in front when the process name is not
/// the first argument's base name.
fn without_busybox_comm(args: &str) -> &str {
    match args.strip_prefix('{').and_then(|a| a.split_once("} ")) {
        Some((_, rest)) => rest,
        None => args,
    }
}

/// procps' `ps`, else busybox's (on the host without glibc), which knows neither `-e` (it lists
/// every process anyway) nor `=` or `:32`, so its header line is dropped; it may put `{comm}`
/// before the arguments.
const PS_LOCKS: &str = "ps -e -o pid=,ppid=,stat=,user:32=,comm=,args= 2>/dev/null || \
     ps -o pid,ppid,stat,user,comm,args | tail -n +2; echo '--locks--'; cat /proc/locks";

fn parse_snapshot(text: &str) -> Result<Snapshot> {
    let (ps, locks) = text
        .split_once("--locks--")
        .ok_or_else(|| anyhow!("no locks marker in {text:?}"))?;
    let mut procs = Vec::new();
    for line in ps.lines().filter(|l| !l.trim().is_empty()) {
        let mut f = line.split_whitespace();
        let (Some(pid), Some(ppid), Some(stat), Some(user), Some(comm)) =
            (f.next(), f.next(), f.next(), f.next(), f.next())
        else {
            bail!("unexpected ps line {line:?}");
        };
        procs.push(Proc {
            pid: pid.parse().with_context(|| format!("ps line {line:?}"))?,
            ppid: ppid.parse().with_context(|| format!("ps line {line:?}"))?,
            zombie: stat.starts_with('Z'),
            user: user.to_string(),
            comm: comm.to_string(),
            args: without_busybox_comm(&f.collect::<Vec<_>>().join(" ")).to_string(),
        });
    }
    // `1: FLOCK  ADVISORY  WRITE 123 00:2b:456 0 EOF`; blocked waiters have `->` after `1:`.
    let flock_holders = locks
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.get(1) == Some(&"FLOCK")).then(|| f.get(4)?.parse().ok())?
        })
        .collect();
    Ok(Snapshot {
        procs,
        flock_holders,
    })
}

impl SshHost {
    /// Established TCP connections to sshd (port 22), read from the container's
    /// `/proc/net/tcp{,6}` (works while partitioned: the sockets stay established).
    ///
    /// # Errors
    /// When docker fails.
    pub async fn ssh_connection_count(&self) -> Result<usize> {
        let out = self
            .exec("cat /proc/net/tcp /proc/net/tcp6 2>/dev/null")
            .await?;
        Ok(out
            .stdout
            .lines()
            .filter(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                // local address `IP:0016` (port 22), state `01` (ESTABLISHED)
                f.len() > 3 && f[1].ends_with(":0016") && f[3] == "01"
            })
            .count())
    }

    async fn snapshot(&self) -> Result<Snapshot> {
        let out = self.exec_as("root", PS_LOCKS).await?;
        if out.code != 0 {
            bail!("`{PS_LOCKS}` exited {}: {}", out.code, out.stderr.trim());
        }
        parse_snapshot(&out.stdout)
    }

    /// Pid (in the container) of the `relay-agent daemon` of user `relay`: the `relay-agent*
    /// daemon` process that holds a flock (its `run/daemon.lock`), so the short-lived start-up
    /// forks are not taken for it. `None` when no daemon runs (or it has not locked yet).
    ///
    /// # Errors
    /// When docker fails, or when several daemons run as `relay` (several `RELAY_HOME`s).
    pub async fn agent_daemon_pid(&self) -> Result<Option<u32>> {
        Ok(self.snapshot().await?.daemon()?.map(|d| d.pid))
    }

    /// Pids (in the container, ascending) of the agent daemon's direct children: the processes
    /// it started on its PTYs, i.e. the live shells. Empty when no daemon runs. Not counted: a
    /// child that exited and is not reaped yet (a zombie), and one that still shows the daemon's
    /// own command line (forked, not yet exec'd).
    ///
    /// # Errors
    /// As [`SshHost::agent_daemon_pid`].
    pub async fn shell_pids(&self) -> Result<Vec<u32>> {
        self.snapshot().await?.shells()
    }

    /// Pseudo-terminals allocated in the container (the numbered entries of its private
    /// `/dev/pts`): the agent's PTYs plus those of `ssh -t` sessions.
    ///
    /// # Errors
    /// When docker fails.
    pub async fn pts_count(&self) -> Result<usize> {
        let out = self.exec("ls /dev/pts").await?;
        if out.code != 0 {
            bail!("ls /dev/pts exited {}: {}", out.code, out.stderr.trim());
        }
        Ok(out
            .stdout
            .split_whitespace()
            .filter(|n| n.chars().all(|c| c.is_ascii_digit()))
            .count())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_daemon_is_the_flock_holder_and_shells_are_its_children() {
        let text = "\
      1       0 Ss   root      sshd             sshd: /usr/sbin/sshd -D -e [listener] 0 of 10-100 startups
     40       1 Ssl  relay     relay-agent-0.1  /home/relay/.relay/bin/relay-agent-0.1.0-abc daemon
     41      40 Ss+  relay     sh               sh -c sleep 1000
     42      40 S    relay     relay-agent-0.1  /home/relay/.relay/bin/relay-agent-0.1.0-abc daemon
     43      40 Z    relay     sh               [sh] <defunct>
     44      40 Ss+  relay     bash             -bash
     50      20 S    relay     relay-agent-0.1  /home/relay/.relay/bin/relay-agent-0.1.0-abc daemon
     51       1 S    relay     relay-agent-0.1  /home/relay/.relay/bin/relay-agent-0.1.0-abc bridge
--locks--
1: FLOCK  ADVISORY  WRITE 40 00:2b:1234 0 EOF
1: -> FLOCK  ADVISORY  WRITE 50 00:2b:1234 0 EOF
2: POSIX  ADVISORY  WRITE 51 00:2b:99 0 EOF
";
        let snap = parse_snapshot(text).unwrap();
        assert_eq!(snap.flock_holders, vec![40]);
        assert_eq!(snap.daemon().unwrap().map(|d| d.pid), Some(40));
        assert_eq!(snap.procs[2].args, "sh -c sleep 1000");
        assert_eq!(snap.shells().unwrap(), vec![41, 44]);
        assert!(!is_daemon_args("sleep daemon"));
        assert!(is_daemon_args("relay-agent daemon --foreground"));
    }

    /// busybox's `ps` (the host without glibc): `{comm}` before the arguments of a daemon
    /// started through `/proc/self/exe`, short user names, no header (dropped by the command).
    #[test]
    fn busybox_ps_lines_give_the_same_daemon_and_shells() {
        let text = "    1     0 S    root     ld.so            /opt/sshd/lib/ld.so
   28     1 S    relay    exe              {exe} /home/relay/.relay/bin/relay-agent-0.1.0-abc daemon
   30    28 S    relay    sh               -sh
   33    19 R    relay    exe              {exe} tail -n +2
--locks--
8: FLOCK  ADVISORY  WRITE 28 00:8f:1123312 0 EOF
";
        let snap = parse_snapshot(text).unwrap();
        assert_eq!(snap.daemon().unwrap().map(|d| d.pid), Some(28));
        assert_eq!(snap.shells().unwrap(), vec![30]);
        assert_eq!(snap.procs[3].args, "tail -n +2");
        assert_eq!(without_busybox_comm("{a b"), "{a b");
    }

    #[test]
    fn a_daemon_run_by_qemu_user_is_found_by_its_command_line() {
        let agent = "/home/relay/.relay/bin/relay-agent-0.1.0-abc";
        // Debian's handler (P flag): the path, then the original argv[0].
        let p_flag = format!("/usr/libexec/qemu-binfmt/aarch64-binfmt-P {agent} {agent} daemon");
        let plain = format!("/usr/bin/qemu-aarch64-static {agent} daemon");
        assert!(is_daemon_args(&p_flag));
        assert!(is_daemon_args(&plain));
        assert!(!is_daemon_args(&format!(
            "/usr/bin/qemu-aarch64-static {agent} bridge"
        )));
        assert!(!is_daemon_args(
            "/usr/bin/qemu-aarch64-static /bin/sleep daemon"
        ));
        assert!(!is_daemon_args(
            "/usr/libexec/qemu-binfmt/aarch64-binfmt-P /bin/bash -bash"
        ));

        let text = format!(
            "\
      1       0 Ss   root      aarch64-binfmt- /usr/libexec/qemu-binfmt/aarch64-binfmt-P /usr/sbin/sshd /usr/sbin/sshd -D -e
     40       1 Ssl  relay     aarch64-binfmt- {p_flag}
     44      40 Ss+  relay     aarch64-binfmt- /usr/libexec/qemu-binfmt/aarch64-binfmt-P /bin/bash -bash
--locks--
1: FLOCK  ADVISORY  WRITE 40 00:2b:1234 0 EOF
"
        );
        let snap = parse_snapshot(&text).unwrap();
        assert_eq!(snap.daemon().unwrap().map(|d| d.pid), Some(40));
        assert_eq!(snap.shells().unwrap(), vec![44]);
    }
}
