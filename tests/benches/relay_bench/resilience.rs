//! Reconnect figures against fixture containers, each next to what plain OpenSSH does
//! in the same run where OpenSSH has an equivalent: dead-link detection after a silent partition,
//! network restored → first new output, re-attach of 10 and 100 panes after a reconnect, and
//! keystroke echo idle, next to a flood on the host that relay does not serve, next to a
//! flooding neighbour and next to an unread one.
//!
//! Needs Docker and root (a silent partition drops packets in the container's network
//! namespace with `nsenter` + `iptables`).

use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use relay_connector::ssh::SshTransport;
use relay_connector::{Host, HostOptions, HostState, InputWriter};
use relay_tests::fixture::SshHost;
use relay_tests::fleet::RAW_CAT;
use tokio::io::AsyncReadExt;

use super::fleet::PlainCat;
use super::*;

const RUNS: usize = 3;
const ECHO_SAMPLES: usize = 300;

/// The echo scenario alone (`--echo`).
pub async fn run_echo(rows: &mut Vec<Row>) -> anyhow::Result<()> {
    echo(rows).await
}

pub async fn run(rows: &mut Vec<Row>) -> anyhow::Result<()> {
    let ssh = SshHost::start().await?;
    detection(&ssh, rows).await?;
    restore(&ssh, rows).await?;
    for n in if stats::smoke() { [2, 3] } else { [10, 100] } {
        reattach(n, rows).await?;
    }
    echo(rows).await?;
    Ok(())
}

/// A supervised host on `ssh` with default settings (SSH ConnectTimeout 5 s).
fn host(ssh: &SshHost) -> anyhow::Result<Host> {
    host_via(ssh, ssh.port())
}

/// The same, connecting to local `port` (a shaping proxy in front of `ssh`, or its own port).
pub(super) fn host_via(ssh: &SshHost, port: u16) -> anyhow::Result<Host> {
    let mut opts = ssh.options_via(&relay_tests::bins().agent, port)?;
    opts.connect_timeout = Some(Duration::from_secs(5));
    Ok(Host::open(
        SshTransport::new(opts),
        HostOptions::new("relay-bench"),
    ))
}

/// Waits until the host's state satisfies `pred`.
async fn until(host: &Host, pred: impl Fn(&HostState) -> bool) -> anyhow::Result<()> {
    let mut rx = host.state();
    tokio::time::timeout(Duration::from_secs(120), async {
        loop {
            if pred(&rx.borrow_and_update()) {
                return Ok(());
            }
            rx.changed().await?;
        }
    })
    .await?
}

fn connected(s: &HostState) -> bool {
    matches!(s, HostState::Connected { .. })
}

fn reconnecting(s: &HostState) -> bool {
    matches!(s, HostState::Reconnecting { .. })
}

/// Silent partition → the link is declared dead. Baseline: OpenSSH with keepalives of the same
/// aggressiveness (`ServerAliveInterval=2`, `ServerAliveCountMax=3`) running `sleep`, until it
/// exits.
async fn detection(ssh: &SshHost, rows: &mut Vec<Row>) -> anyhow::Result<()> {
    let host = host(ssh)?;
    let (_c, _idle) = host
        .workspace("bench")
        .open("idle", "0", sh("exec sleep 100000"))
        .await?;
    let mut relay = Vec::new();
    for _ in 0..runs(RUNS) {
        until(&host, connected).await?;
        let t = Instant::now();
        ssh.partition().await?;
        until(&host, reconnecting).await?;
        relay.push(t.elapsed());
        ssh.heal().await?;
        host.retry_now();
    }
    let mut plain = Vec::new();
    for _ in 0..runs(RUNS) {
        let mut child = tokio::process::Command::from(ssh.plain_ssh(&[
            "-o",
            "ServerAliveInterval=2",
            "-o",
            "ServerAliveCountMax=3",
            "sleep",
            "1000",
        ]))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
        tokio::time::sleep(Duration::from_secs(2)).await;
        let t = Instant::now();
        ssh.partition().await?;
        child.wait().await?;
        plain.push(t.elapsed());
        ssh.heal().await?;
    }
    rows.push(row(
        "dead link detected after a silent partition",
        &relay,
        &plain,
        "`ssh -o ServerAliveInterval=2 -o ServerAliveCountMax=3` exits",
    ));
    Ok(())
}

/// A pane printing every 100 ms; a 15 s silent partition; from `heal` to the first output the
/// pane delivers afterwards (the host reconnects on its own schedule: no `retry_now`). Plain
/// ssh does not come back.
async fn restore(ssh: &SshHost, rows: &mut Vec<Row>) -> anyhow::Result<()> {
    let host = host(ssh)?;
    let (_c, mut pane) = host
        .workspace("bench")
        .open("ticks", "0", sh("while :; do echo tick; sleep 0.1; done"))
        .await?;
    let mut relay = Vec::new();
    for _ in 0..runs(RUNS) {
        until(&host, connected).await?;
        ssh.partition().await?;
        until(&host, reconnecting).await?;
        tokio::time::sleep(Duration::from_secs(7)).await;
        // Drop what arrived before the partition.
        while tokio::time::timeout(Duration::from_millis(1), pane.next())
            .await
            .is_ok()
        {}
        ssh.heal().await?;
        let t = Instant::now();
        let mut resumed = false;
        loop {
            match tokio::time::timeout(Duration::from_secs(120), pane.next()).await? {
                Some(PaneEvent::Resumed { .. }) => resumed = true,
                Some(PaneEvent::Output { .. }) if resumed => break,
                Some(_) => {}
                None => anyhow::bail!("pane stream ended"),
            }
        }
        relay.push(t.elapsed());
    }
    rows.push(row(
        "network restored → first new output (automatic reconnect)",
        &relay,
        &[],
        "plain ssh does not come back",
    ));
    Ok(())
}

/// `n` panes attached; the host kills the SSH connection; until every pane has resumed.
/// Baseline: a fresh `ssh host true`.
async fn reattach(n: usize, rows: &mut Vec<Row>) -> anyhow::Result<()> {
    let ssh = SshHost::start().await?;
    let host = host(&ssh)?;
    let (relay, passes) = reattach_times(&ssh, &host, n).await?;
    let mut plain = Vec::new();
    for _ in 0..runs(RUNS) {
        let t = Instant::now();
        let out = ssh.plain_ssh(&["true"]).output()?;
        anyhow::ensure!(out.status.success(), "plain ssh failed: {out:?}");
        plain.push(t.elapsed());
    }
    rows.push(row(
        &format!("killed connection → {n} panes re-attached"),
        &relay,
        &plain,
        "`ssh host true` (a fresh connect)",
    ));
    rows.push(row(
        &format!("of which the re-attach pass of {n} panes (connected → all resumed)"),
        &passes,
        &[],
        "—",
    ));
    Ok(())
}

/// Opens `n` panes on `host`, then, per round, kills the SSH connection on `ssh` and times
/// until every pane resumed, and the re-attach pass alone (connected → all resumed).
pub(super) async fn reattach_times(
    ssh: &SshHost,
    host: &Host,
    n: usize,
) -> anyhow::Result<(Vec<Duration>, Vec<Duration>)> {
    let resumed = Arc::new(AtomicUsize::new(0));
    let mut readers = Vec::new();
    for i in 0..n {
        let (_c, mut pane) = host
            .workspace("bench")
            .open("many", &i.to_string(), sh("exec sleep 100000"))
            .await?;
        let resumed = resumed.clone();
        readers.push(tokio::spawn(async move {
            while let Some(ev) = pane.next().await {
                if matches!(ev, PaneEvent::Resumed { .. }) {
                    resumed.fetch_add(1, Ordering::SeqCst);
                }
            }
        }));
    }
    let mut relay = Vec::new();
    let mut passes = Vec::new();
    for round in 1..=runs(RUNS) {
        until(host, connected).await?;
        let mut states = host.state();
        let t = Instant::now();
        ssh.kill_ssh_connections().await?;
        // When the new connection is up (its welcome in), to time the re-attach pass alone.
        let connected_at = tokio::spawn(async move {
            let mut down = false;
            loop {
                let now_connected = connected(&states.borrow_and_update());
                if down && now_connected {
                    return Instant::now();
                }
                down |= !now_connected;
                if states.changed().await.is_err() {
                    return Instant::now();
                }
            }
        });
        let all = tokio::time::timeout(Duration::from_secs(120), async {
            while resumed.load(Ordering::SeqCst) < n * round {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        })
        .await;
        anyhow::ensure!(
            all.is_ok(),
            "round {round}: {} of {} resumes after 120 s; host state {:?}",
            resumed.load(Ordering::SeqCst),
            n * round,
            *host.state().borrow()
        );
        let done = Instant::now();
        relay.push(done - t);
        passes.push(done.saturating_duration_since(connected_at.await?));
    }
    for r in readers {
        r.abort();
    }
    Ok((relay, passes))
}

/// A raw, echo-less `cat`: one byte in, the same byte out.
pub(super) struct Echo {
    pub(super) pane: PaneHandle,
    pub(super) input: InputWriter,
}

impl Echo {
    pub(super) async fn samples(&mut self, n: usize) -> anyhow::Result<Vec<Duration>> {
        let mut out = Vec::with_capacity(n);
        for i in 0..n {
            let byte = b'a' + (i % 26) as u8;
            let t = Instant::now();
            self.input.push(vec![byte])?;
            loop {
                match tokio::time::timeout(Duration::from_secs(30), self.pane.next()).await? {
                    Some(PaneEvent::Output { data, .. }) if data.contains(&byte) => break,
                    Some(_) => {}
                    None => anyhow::bail!("echo pane ended"),
                }
            }
            out.push(t.elapsed());
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Ok(out)
    }
}

/// Echo round trip, p50 and p99: idle; next to a `yes` in a PTY on the host that neither tool
/// serves (what the flood costs the host by itself); next to a pane flooding with `yes` whose
/// output is read as fast as it comes; next to one whose output nobody reads. Baselines:
/// `ssh -tt host` running the same raw `cat`, idle and next to the unserved `yes`, and next to a
/// `yes` read as fast as it comes on another channel of the same SSH connection (OpenSSH
/// connection sharing, `ControlMaster`).
async fn echo(rows: &mut Vec<Row>) -> anyhow::Result<()> {
    let ssh = SshHost::start().await?;
    let host = host(&ssh)?;
    let (c, mut pane) = host
        .workspace("quiet")
        .open("echo", "0", sh(RAW_CAT))
        .await?;
    read_to(&mut pane, |text, _| text.contains("ready")).await?;
    let mut echo = Echo {
        input: host.input_writer(&c.binding),
        pane,
    };
    echo.samples(20).await?;
    let idle = echo.samples(runs(ECHO_SAMPLES)).await?;

    let plain = plain_echo(&ssh).await?;
    rows.push(row(
        "ssh echo round trip, idle",
        &idle,
        &plain,
        "`ssh -tt host` raw cat, idle",
    ));

    // What the same flood does to both tools when neither serves it: `yes` in a PTY of its own
    // that `script` reads and throws away (CPU, PTY and scheduler contention, no traffic).
    ssh.exec_ok("nohup script -qfc 'yes flood-flood-flood' /dev/null > /dev/null 2>&1 &")
        .await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let busy = echo.samples(runs(ECHO_SAMPLES)).await?;
    let plain_busy = plain_echo(&ssh).await?;
    ssh.exec_ok("pkill -x script; pkill -x yes; true").await?;
    rows.push(row(
        "ssh echo next to a `yes` PTY on the host that neither tool serves",
        &busy,
        &plain_busy,
        "`ssh -tt host` raw cat, the same flood",
    ));
    rows.push(row(
        "  the same against relay idle",
        &busy,
        &idle,
        "relay idle (above)",
    ));
    rows.push(row(
        "  `ssh -tt` next to it against `ssh -tt` idle",
        &plain_busy,
        &plain,
        "`ssh -tt` idle (above)",
    ));

    let (flooding_pane, mut flood) = host
        .workspace("flood")
        .open("yes", "0", sh("exec yes flood-flood-flood"))
        .await?;
    let drained = Arc::new(AtomicUsize::new(0));
    let counted = drained.clone();
    let drain = tokio::spawn(async move {
        while let Some(event) = flood.next().await {
            if let PaneEvent::Output { data, .. } = event {
                counted.fetch_add(data.len(), Ordering::Relaxed);
            }
        }
    });
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (t, before) = (Instant::now(), drained.load(Ordering::Relaxed));
    let flooding = echo.samples(runs(ECHO_SAMPLES)).await?;
    let relay_rate = (drained.load(Ordering::Relaxed) - before) as f64 / t.elapsed().as_secs_f64();
    drain.abort();
    // Detaching leaves `yes` running into the agent's ring: end it, so it does not take CPU
    // from the rows after this one.
    let _ = host.session().await?.kill(&flooding_pane.binding).await;
    rows.push(row(
        "ssh echo next to a `yes` pane read as fast as it comes",
        &flooding,
        &idle,
        "relay idle (above)",
    ));
    let (plain_flooding, plain_rate) = plain_echo_next_to_flood(&ssh).await?;
    rows.push(row(
        "ssh echo next to a `yes` pane read as fast as it comes, vs ssh",
        &flooding,
        &plain_flooding,
        "`ssh -tt` raw cat next to `ssh yes` on one ControlMaster connection",
    ));
    rows.push(rate_row(
        "the `yes` pane's throughput meanwhile",
        &[relay_rate],
        &[plain_rate],
        "the `ssh yes` channel meanwhile",
    ));

    let (c, stalled) = host
        .workspace("stalled")
        .open("yes", "0", sh("exec yes stalled-stalled"))
        .await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let unread = echo.samples(runs(ECHO_SAMPLES)).await?;
    rows.push(row(
        "ssh echo next to a `yes` pane nobody reads",
        &unread,
        &idle,
        "relay idle (above)",
    ));
    drop(stalled);
    let _ = host.session().await?.kill(&c.binding).await;
    Ok(())
}

/// Plain OpenSSH: `ssh -tt host 'stty raw -echo; cat'`, a byte in, the byte out.
async fn plain_echo(ssh: &SshHost) -> anyhow::Result<Vec<Duration>> {
    plain_echo_via(ssh, ssh.port(), runs(ECHO_SAMPLES)).await
}

/// Plain OpenSSH next to a flood on the same connection: a `ControlMaster` connection, one
/// channel running `yes` whose output is read as fast as it comes, and the echo on another.
/// Returns the echo samples and the `yes` channel's rate meanwhile (bytes per second).
async fn plain_echo_next_to_flood(ssh: &SshHost) -> anyhow::Result<(Vec<Duration>, f64)> {
    let dir = tempfile::tempdir()?;
    let control = dir.path().join("control");
    let control = control.to_str().expect("a UTF-8 temp path");
    let shared = ["-S", control];
    let master_args = ["-M", "-S", control, "-N", "-o", "ControlPersist=no"];
    let mut master = tokio::process::Command::from(ssh.plain_ssh_via(ssh.port(), &master_args))
        .stderr(Stdio::null()) // the master's notes about the channels' terminals
        .kill_on_drop(true)
        .spawn()?;
    let deadline = Instant::now() + Duration::from_secs(10);
    while !std::path::Path::new(control).exists() {
        anyhow::ensure!(
            Instant::now() < deadline,
            "no ControlMaster socket after 10 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // A client that cannot use the master would silently open its own connection.
    let check = ssh
        .plain_ssh_via(ssh.port(), &["-S", control, "-O", "check"])
        .stderr(Stdio::null())
        .status()?;
    anyhow::ensure!(
        check.success(),
        "the ControlMaster connection does not answer"
    );
    let flood_args = ["-S", control, "-tt", "exec yes flood-flood-flood"];
    let mut flood = tokio::process::Command::from(ssh.plain_ssh_via(ssh.port(), &flood_args))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let mut out = flood.stdout.take().expect("piped");
    let drained = Arc::new(AtomicUsize::new(0));
    let counted = drained.clone();
    let drain = tokio::spawn(async move {
        let mut buf = vec![0u8; 64 * 1024];
        while let Ok(n @ 1..) = out.read(&mut buf).await {
            counted.fetch_add(n, Ordering::Relaxed);
        }
    });
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (t, before) = (Instant::now(), drained.load(Ordering::Relaxed));
    let samples = plain_echo_with(ssh, ssh.port(), &shared, runs(ECHO_SAMPLES)).await;
    let rate = (drained.load(Ordering::Relaxed) - before) as f64 / t.elapsed().as_secs_f64();
    drain.abort();
    let _ = flood.kill().await;
    let _ = master.kill().await;
    Ok((samples?, rate))
}

/// The same through local `port`, `samples` times (after 20 to warm up).
pub(super) async fn plain_echo_via(
    ssh: &SshHost,
    port: u16,
    samples: usize,
) -> anyhow::Result<Vec<Duration>> {
    plain_echo_with(ssh, port, &[], samples).await
}

/// [`plain_echo_via`] with `ssh` options `extra` (given after the destination).
async fn plain_echo_with(
    ssh: &SshHost,
    port: u16,
    extra: &[&str],
    samples: usize,
) -> anyhow::Result<Vec<Duration>> {
    let args = [extra, &["-tt", RAW_CAT]].concat();
    let mut cat = PlainCat::spawn(ssh.plain_ssh_via(port, &args)).await?;
    let mut out = Vec::with_capacity(samples);
    for i in 0..samples + 20 {
        let sample = cat.round_trip(b'a' + (i % 26) as u8).await?;
        if i >= 20 {
            out.push(sample);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok(out)
}
