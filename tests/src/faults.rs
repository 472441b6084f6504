//! Fault primitives for [`SshHost`] (the fault suite's building blocks).
//!
//! **Network faults** act inside the container's network namespace (entered with `nsenter` from
//! the container's pid as docker reports it), so they need root on the test machine (CI runs as
//! root) and the host tools `nsenter` (util-linux), `iptables` and `ss` (iproute2):
//!
//! - [`SshHost::partition`] / [`SshHost::heal`]: a *silent* partition. Two DROP rules, `INPUT
//!   --dport 22` and `OUTPUT --sport 22`, swallow every packet of sshd's connections in both
//!   directions: no RST, no FIN, no ICMP. A client sees silence (new connections time out in the
//!   banner exchange, established ones stall without EOF), unlike `docker network disconnect`,
//!   after which docker-proxy gives the client EOF at once. A partition is healed when the
//!   `SshHost` is dropped (a test failing half-way leaves no rules behind) and ends with
//!   [`SshHost::restart`] (the restarted container has fresh, empty netfilter tables).
//! - [`SshHost::flap`]: a background task toggling the partition (a flapping link); its guard
//!   [`Flapping`] heals when dropped.
//! - [`SshHost::kill_ssh_connections`]: the host's kernel aborts sshd's TCP connections (`ss -K`,
//!   it sends a RST), like a NAT or firewall dropping its state; processes are left alone.
//!   [`SshHost::kill_sshd_sessions`] instead kills the per-connection sshd processes (sshd dying
//!   under its sessions); it is also the fallback on kernels without `SOCK_DESTROY`.
//!
//! Host-side inspection for exact counts (the agent daemon, its shells) is in
//! [`crate::inspect`].

use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use tokio::task::JoinHandle;

use crate::fixture::{docker, ExecOut, SshHost};
use relay_connector::LockExt;

/// sshd's port inside the container.
const SSH_PORT: &str = "22";

/// The partition's rules: (chain, port match). Both directions, so that the host's own sends
/// (a flooding pane's output) are dropped as well as the client's packets.
const RULES: [(&str, &str); 2] = [("INPUT", "--dport"), ("OUTPUT", "--sport")];

/// Kills every sshd process but pid 1 (the listener) until none is left, and prints the number of
/// established connections to port 22 before and after. Process names: `sshd`, and since OpenSSH
/// 9.8 `sshd-session` and `sshd-auth`; zombies are dead already.
const KILL_SSHD_SESSIONS: &str = r#"
est() { cat /proc/net/tcp /proc/net/tcp6 2>/dev/null | awk '$2 ~ /:0016$/ && $4 == "01"' | wc -l; }
before=$(est)
rounds=0
while pids=$(ps -e -o pid=,stat=,comm= | awk '$1 != 1 && $2 !~ /^Z/ &&
        ($3 == "sshd" || $3 == "sshd-session" || $3 == "sshd-auth") { print $1 }')
      [ -n "$pids" ]; do
  rounds=$((rounds + 1))
  if [ "$rounds" -gt 100 ]; then echo "sshd processes keep coming:" $pids >&2; exit 1; fi
  kill -KILL $pids 2>/dev/null
  sleep 0.02
done
echo "$before $(est)"
"#;

/// Partition state of one container, shared with [`Flapping`] tasks. The mutex serialises rule
/// changes; its value is true while rules may be in place (set before adding them, cleared after
/// a successful heal), so drop knows whether it has anything to undo.
#[derive(Clone)]
pub(crate) struct NetFaults {
    container: String,
    maybe_partitioned: Arc<Mutex<bool>>,
}

impl NetFaults {
    pub(crate) fn new(container: &str) -> NetFaults {
        NetFaults {
            container: container.to_string(),
            maybe_partitioned: Arc::new(Mutex::new(false)),
        }
    }

    /// Adds (`on`) or removes the partition rules; blocking. Does nothing when `cancel` is set
    /// (checked under the lock, so a stopped flapper can never partition after its final heal).
    fn set(&self, on: bool, cancel: Option<&AtomicBool>) -> Result<()> {
        let mut maybe = self.maybe_partitioned.lock_unpoisoned();
        if cancel.is_some_and(|c| c.load(Ordering::SeqCst)) {
            return Ok(());
        }
        require_root(if on { "partition()" } else { "heal()" })?;
        let Some(pid) = container_pid(&self.container)? else {
            if on {
                bail!(
                    "cannot partition container {}: it is not running",
                    self.container
                );
            }
            // No process, no network namespace, no rules.
            *maybe = false;
            return Ok(());
        };
        if on {
            *maybe = true;
        }
        for (chain, dir) in RULES {
            let present = rule_present(pid, chain, dir)?;
            if on && !present {
                iptables(pid, "-A", chain, dir)?;
            }
            if !on && present {
                // Remove every copy: heal leaves none of our rules, however they got there.
                while rule_present(pid, chain, dir)? {
                    iptables(pid, "-D", chain, dir)?;
                }
            }
        }
        if !on {
            *maybe = false;
        }
        Ok(())
    }

    async fn set_async(&self, on: bool, cancel: Option<Arc<AtomicBool>>) -> Result<()> {
        let this = self.clone();
        tokio::task::spawn_blocking(move || this.set(on, cancel.as_deref())).await?
    }

    /// Heals if a partition may be in place; blocking, for `Drop`. Failures are printed, not
    /// raised (the container's removal clears its rules anyway).
    pub(crate) fn heal_on_drop(&self) {
        let maybe = *self.maybe_partitioned.lock_unpoisoned();
        if maybe {
            if let Err(e) = self.set(false, None) {
                eprintln!(
                    "fixture: healing container {} failed: {e:#}",
                    self.container
                );
            }
        }
    }

    /// Whether both partition rules are in place; blocking.
    fn partitioned(&self) -> Result<bool> {
        require_root("partitioned()")?;
        let Some(pid) = container_pid(&self.container)? else {
            return Ok(false);
        };
        for (chain, dir) in RULES {
            if !rule_present(pid, chain, dir)? {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

fn require_root(what: &str) -> Result<()> {
    if !nix::unistd::geteuid().is_root() {
        bail!(
            "{what} needs root: it enters the container's network namespace with nsenter \
             (run the tests as root, as CI does)"
        );
    }
    Ok(())
}

fn run(program: &str, args: &[&str]) -> Result<ExecOut> {
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {program} {} (is it installed?)", args.join(" ")))?;
    Ok(ExecOut {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    })
}

/// The container's init process as the machine sees it, `None` when it is not running.
fn container_pid(container: &str) -> Result<Option<u32>> {
    let out = run("docker", &["inspect", "-f", "{{.State.Pid}}", container])?;
    if out.code != 0 {
        bail!("docker inspect {container} failed: {}", out.stderr.trim());
    }
    let pid: u32 = out
        .out()
        .parse()
        .with_context(|| format!("docker inspect gave pid {:?}", out.out()))?;
    Ok((pid != 0).then_some(pid))
}

/// Runs `args` in the network namespace of `pid`.
fn in_netns(pid: u32, args: &[&str]) -> Result<ExecOut> {
    let pid = pid.to_string();
    let mut all = vec!["-t", &pid, "-n", "--"];
    all.extend_from_slice(args);
    run("nsenter", &all)
}

fn rule_args<'a>(op: &'a str, chain: &'a str, dir: &'a str) -> [&'a str; 10] {
    [
        "iptables", "-w", op, chain, "-p", "tcp", dir, SSH_PORT, "-j", "DROP",
    ]
}

fn rule_present(pid: u32, chain: &str, dir: &str) -> Result<bool> {
    let out = in_netns(pid, &rule_args("-C", chain, dir))?;
    match out.code {
        0 => Ok(true),
        // "Bad rule (does a matching rule exist in that chain?)"
        1 => Ok(false),
        _ => bail!(
            "iptables -C {chain} in the container's netns failed ({}): {}",
            out.code,
            out.stderr.trim()
        ),
    }
}

fn iptables(pid: u32, op: &str, chain: &str, dir: &str) -> Result<()> {
    let args = rule_args(op, chain, dir);
    let out = in_netns(pid, &args)?;
    if out.code != 0 {
        bail!(
            "nsenter -n {} failed: {}",
            args.join(" "),
            out.stderr.trim()
        );
    }
    Ok(())
}

/// Sockets of sshd in state established, as `ss` lines; with `kill`, aborts them (`ss -K`
/// prints only the sockets it destroyed).
fn ss_established(pid: u32, kill: bool) -> Result<usize> {
    let filter = format!("( sport = :{SSH_PORT} )");
    let mut args = vec!["ss"];
    if kill {
        args.push("-K");
    }
    args.extend(["-t", "-n", "-H", "state", "established", &filter]);
    let out = in_netns(pid, &args)?;
    if out.code != 0 {
        bail!(
            "nsenter -n {} failed: {}",
            args.join(" "),
            out.stderr.trim()
        );
    }
    Ok(out.stdout.lines().filter(|l| !l.trim().is_empty()).count())
}

impl SshHost {
    /// Starts a silent partition of sshd's port: every packet to or from port 22 in the
    /// container is dropped (see the module docs). Idempotent; [`SshHost::heal`] ends it, and so
    /// does dropping the host. Takes ~10–30 ms.
    ///
    /// # Errors
    /// When not root, when the container is not running, or when docker, `nsenter` or
    /// `iptables` fail.
    pub async fn partition(&self) -> Result<()> {
        self.net.set_async(true, None).await
    }

    /// Ends a partition: removes exactly the rules [`SshHost::partition`] adds (every copy of
    /// them, nothing else). Idempotent; a no-op when the container is not running.
    ///
    /// # Errors
    /// When not root, or when docker, `nsenter` or `iptables` fail.
    pub async fn heal(&self) -> Result<()> {
        self.net.set_async(false, None).await
    }

    /// Whether the partition rules are in place (both of them).
    ///
    /// # Errors
    /// When not root, or when docker, `nsenter` or `iptables` fail.
    pub async fn is_partitioned(&self) -> Result<bool> {
        let net = self.net.clone();
        tokio::task::spawn_blocking(move || net.partitioned()).await?
    }

    /// Link flapping: from now on, partitioned for `period`, healed for `period`, and so on
    /// until `total` has passed (the last phase is cut short at `total`), then healed. Runs in a
    /// background task (needs a tokio runtime); dropping the returned guard stops it and heals.
    /// E.g. `host.flap(Duration::from_secs(2), Duration::from_secs(60))`.
    ///
    /// # Errors
    /// When not root or `period` is zero. Failures of the task are reported by
    /// [`Flapping::wait`] and [`Flapping::stop`].
    pub fn flap(&self, period: Duration, total: Duration) -> Result<Flapping> {
        require_root("flap()")?;
        if period.is_zero() {
            bail!("flap(): the period must not be zero");
        }
        let net = self.net.clone();
        let cancel = Arc::new(AtomicBool::new(false));
        let task = tokio::spawn({
            let net = net.clone();
            let cancel = cancel.clone();
            async move {
                let end = tokio::time::Instant::now() + total;
                let mut partitions = 0u32;
                let result = async {
                    loop {
                        for on in [true, false] {
                            let now = tokio::time::Instant::now();
                            if now >= end {
                                return Ok(());
                            }
                            net.set_async(on, Some(cancel.clone())).await?;
                            partitions += u32::from(on);
                            tokio::time::sleep_until(end.min(now + period)).await;
                        }
                    }
                }
                .await;
                let healed = net.set_async(false, Some(cancel)).await;
                result.and(healed).map(|()| partitions)
            }
        });
        Ok(Flapping {
            net,
            cancel,
            task: Some(task),
        })
    }

    /// Aborts every established TCP connection of sshd from the host's side (`ss -K` in the
    /// container's netns: the kernel drops the socket and sends a RST), like a NAT or firewall
    /// losing its state: clients see the connection reset, sshd's session processes exit, and
    /// nothing else on the host is touched (the agent daemon, its shells, the listening sshd).
    /// On kernels without socket destruction it falls back to
    /// [`SshHost::kill_sshd_sessions`]. Returns how many connections were aborted.
    ///
    /// # Errors
    /// When not root, when the container is not running, or when docker, `nsenter` or `ss` fail.
    pub async fn kill_ssh_connections(&self) -> Result<usize> {
        kill_ssh_connections_of(self.id().to_string()).await
    }

    /// [`SshHost::kill_ssh_connections`] every `every`, from now until the returned guard is
    /// stopped or dropped. The background task holds the container's id, not the host: a test
    /// that fails while it runs drops the host (and removes its container) as usual, instead of
    /// leaving the removal to a task dropped while its runtime shuts down (which hangs).
    ///
    /// # Errors
    /// When not root. Failures of a kill are reported by [`KillingConnections::stop`].
    pub fn kill_ssh_connections_every(&self, every: Duration) -> Result<KillingConnections> {
        require_root("kill_ssh_connections_every()")?;
        let id = self.id().to_string();
        let cancel = Arc::new(AtomicBool::new(false));
        let task = tokio::spawn({
            let cancel = cancel.clone();
            async move {
                let mut killed = 0;
                while !cancel.load(Ordering::SeqCst) {
                    killed += kill_ssh_connections_of(id.clone()).await?;
                    tokio::time::sleep(every).await;
                }
                Ok(killed)
            }
        });
        Ok(KillingConnections {
            cancel,
            task: Some(task),
        })
    }

    /// Kills (SIGKILL) every sshd process except the listener (pid 1): the per-connection
    /// processes, as if sshd died under its sessions. The kernel then closes their connections.
    /// Processes started in those sessions (and the agent daemon, which detaches) keep running.
    /// Repeats until none is left, because a session's monitor may fork its post-auth child
    /// between a `ps` and the `kill`. Returns how many established connections to port 22 this
    /// ended.
    ///
    /// # Errors
    /// When docker fails, or sshd processes are still there after 100 rounds.
    pub async fn kill_sshd_sessions(&self) -> Result<usize> {
        kill_sshd_sessions_of(self.id()).await
    }
}

/// [`SshHost::kill_ssh_connections`] of the container `id`.
async fn kill_ssh_connections_of(id: String) -> Result<usize> {
    let (before, killed) = tokio::task::spawn_blocking({
        let id = id.clone();
        move || -> Result<(usize, usize)> {
            require_root("kill_ssh_connections()")?;
            let pid =
                container_pid(&id)?.ok_or_else(|| anyhow!("container {id} is not running"))?;
            let before = ss_established(pid, false)?;
            let killed = if before == 0 {
                0
            } else {
                ss_established(pid, true)?
            };
            Ok((before, killed))
        }
    })
    .await??;
    if before > 0 && killed == 0 {
        // `ss -K` prints nothing when the kernel cannot destroy sockets (no SOCK_DESTROY).
        return kill_sshd_sessions_of(&id).await;
    }
    Ok(killed)
}

/// [`SshHost::kill_sshd_sessions`] of the container `id`.
async fn kill_sshd_sessions_of(id: &str) -> Result<usize> {
    let out = docker(&["exec", "-u", "root", id, "sh", "-c", KILL_SSHD_SESSIONS]).await?;
    if out.code != 0 {
        bail!("killing the sshd sessions failed: {}", out.stderr.trim());
    }
    let counts: Vec<usize> = out
        .out()
        .split_whitespace()
        .map(str::parse)
        .collect::<Result<_, _>>()
        .with_context(|| format!("reading {:?}", out.out()))?;
    match counts[..] {
        [before, after] => Ok(before.saturating_sub(after)),
        _ => bail!("expected two counts, got {:?}", out.out()),
    }
}

/// A running [`SshHost::kill_ssh_connections_every`]. Dropping it stops the kills at once.
#[must_use = "dropping the guard stops the kills at once"]
pub struct KillingConnections {
    cancel: Arc<AtomicBool>,
    task: Option<JoinHandle<Result<usize>>>,
}

impl KillingConnections {
    /// Stops after the kill under way, if any; returns how many connections were killed in all.
    ///
    /// # Errors
    /// The first kill that failed.
    pub async fn stop(mut self) -> Result<usize> {
        self.cancel.store(true, Ordering::SeqCst);
        let task = self.task.take().expect("the task is only taken once");
        task.await?
    }
}

impl Drop for KillingConnections {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            self.cancel.store(true, Ordering::SeqCst);
            task.abort();
        }
    }
}

/// A running [`SshHost::flap`]. Dropping it stops the flapping and heals the host (blocking for
/// the few ms `iptables` takes); [`Flapping::wait`] and [`Flapping::stop`] also report errors.
#[must_use = "dropping the guard stops the flapping at once"]
pub struct Flapping {
    net: NetFaults,
    cancel: Arc<AtomicBool>,
    task: Option<JoinHandle<Result<u32>>>,
}

impl Flapping {
    /// Waits until the flapping is over (its `total` has passed and the host is healed) and
    /// returns how many times the host was partitioned.
    ///
    /// # Errors
    /// When adding or removing the rules failed (the host is healed anyway, best effort).
    pub async fn wait(mut self) -> Result<u32> {
        let task = self.task.take().expect("the task is only taken once");
        let result = task.await.map_err(anyhow::Error::from).and_then(|r| r);
        self.cancel.store(true, Ordering::SeqCst);
        self.net.set_async(false, None).await?;
        result
    }

    /// Stops flapping now and heals the host.
    ///
    /// # Errors
    /// When healing fails.
    pub async fn stop(mut self) -> Result<()> {
        self.cancel.store(true, Ordering::SeqCst);
        if let Some(task) = self.task.take() {
            task.abort();
        }
        self.net.set_async(false, None).await
    }
}

impl Drop for Flapping {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            self.cancel.store(true, Ordering::SeqCst);
            task.abort();
            self.net.heal_on_drop();
        }
    }
}
