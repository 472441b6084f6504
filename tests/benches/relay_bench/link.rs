//! Slow links: pane create → first output, keystroke echo, throughput and
//! the re-attach of 100 panes over 50 ms and 200 ms round trips, through the test crate's
//! shaping proxy (this kernel has no `netem`), each next to plain OpenSSH through the same proxy.
//!
//! Then every byte of a file into a pipe over a 200 ms, 100 Mbit/s link, and deploy to a fresh
//! host and re-connect to it over a 200 ms, 10 Mbit/s link.
//!
//! Needs Docker and root (the re-attach kills the SSH connection inside the container).

use std::process::Stdio;

use relay_connector::ssh::SshTransport;
use relay_tests::fixture::SshHost;
use relay_tests::shaper::{Link, Shaper};
use tokio::io::AsyncReadExt;

use relay_tests::fleet::RAW_CAT;

use super::resilience::{host_via, plain_echo_via, reattach_times, Echo};
use super::stats::{rate_row, row, runs, smoke, Row};
use super::*;

const CREATE_RUNS: usize = 10;
const ECHO_SAMPLES: usize = 50;

pub async fn run(rows: &mut Vec<Row>) -> anyhow::Result<()> {
    let ssh = SshHost::start().await?;
    let target = format!("127.0.0.1:{}", ssh.port()).parse()?;
    let rtts: &[u64] = if smoke() { &[50] } else { &[50, 200] };
    for &rtt in rtts {
        let shaper = Shaper::start(target, Link::rtt_ms(rtt)).await?;
        let port = shaper.port();
        let over = |what: &str| format!("{what}, {rtt} ms round trip");
        let host = host_via(&ssh, port)?;
        let ws = host.workspace("link");

        // Pane create → first output on a warm connection. Baseline: a new session channel with
        // a PTY on an OpenSSH master connection that is already up (ControlMaster).
        let _warm = ws.open("warm", &rtt.to_string(), sh("exec cat")).await?;
        let mut create = Vec::new();
        for i in 0..runs(CREATE_RUNS) {
            let t = Instant::now();
            let (_c, mut pane) = ws
                .open(
                    "create",
                    &format!("{rtt}-{i}"),
                    sh("printf ready; exec cat"),
                )
                .await?;
            read_to(&mut pane, |text, _| text.contains("ready")).await?;
            create.push(t.elapsed());
        }
        let mux = Mux::start(&ssh, port).await?;
        let mut plain = Vec::new();
        for _ in 0..runs(CREATE_RUNS) {
            plain.push(mux.first_output(&ssh, port, "printf ready").await?);
        }
        rows.push(row(
            &over("pane create → first output, warm connection"),
            &create,
            &plain,
            "new `ssh -tt` channel on a warm ControlMaster",
        ));
        rows.push(round_trips(
            &over("of which round trips"),
            &create,
            &plain,
            rtt,
        ));

        // Keystroke echo.
        let (c, mut pane) = ws.open("echo", &rtt.to_string(), sh(RAW_CAT)).await?;
        read_to(&mut pane, |text, _| text.contains("ready")).await?;
        let mut echo = Echo {
            input: host.input_writer(&c.binding),
            pane,
        };
        echo.samples(runs(5)).await?;
        let relay = echo.samples(runs(ECHO_SAMPLES)).await?;
        let plain = plain_echo_via(&ssh, port, runs(ECHO_SAMPLES)).await?;
        rows.push(row(
            &over("echo round trip"),
            &relay,
            &plain,
            "`ssh -tt host` raw cat",
        ));

        // Throughput: until the command's exit is on the screen. A host pane that falls a whole
        // ring behind resumes from a snapshot of the screen (as mosh does) rather than sending
        // every byte, so this counts the PTY's output offset reached, not bytes delivered.
        let lines = if smoke() { "200000" } else { "5000000" };
        let (mut relay, mut plain, mut skipped) = (Vec::new(), Vec::new(), 0u64);
        for i in 0..runs(3) {
            let t = Instant::now();
            let (_c, mut pane) = ws
                .open("seq", &format!("{rtt}-{i}"), sh(&format!("seq 1 {lines}")))
                .await?;
            let (end, snapshots) = until_exit(&mut pane).await?;
            relay.push(rate(end, t.elapsed()));
            skipped += snapshots;
            let t = Instant::now();
            let out = ssh
                .plain_ssh_via(port, &["-tt", "seq", "1", lines])
                .output()?;
            anyhow::ensure!(out.status.success(), "plain ssh seq failed");
            plain.push(rate(out.stdout.len() as u64, t.elapsed()));
        }
        rows.push(rate_row(
            &over(&format!(
                "`seq 1 {lines}` until its exit is on the screen ({skipped} snapshot skips)"
            )),
            &relay,
            &plain,
            "`ssh -tt host seq ...` (every byte)",
        ));

        // Re-attach after the connection is killed.
        let n = if smoke() { 3 } else { 100 };
        let (total, passes) = reattach_times(&ssh, &host, n).await?;
        rows.push(row(
            &over(&format!("killed connection → {n} panes re-attached")),
            &total,
            &[],
            "—",
        ));
        rows.push(row(
            &over(&format!("of which the re-attach pass of {n} panes")),
            &passes,
            &[],
            "—",
        ));
        rows.push(round_trips(
            &over(&format!("re-attach pass of {n} panes in round trips")),
            &passes,
            &[],
            rtt,
        ));
    }
    every_byte(&ssh, rows).await?;
    deploy(rows).await
}

/// Only the every-byte row of [`run`] (`--every-byte`).
pub async fn run_every_byte(rows: &mut Vec<Row>) -> anyhow::Result<()> {
    every_byte(&SshHost::start().await?, rows).await
}

/// `relay shell HOST -- cat FILE > out` (every byte, in order: the agent holds the program for
/// the link, and the window grows with it) against `ssh -tt HOST cat FILE > out`, over a
/// 200 ms / 100 Mbit/s link (smoke: 50 ms). Both pass the file through a PTY, so both write
/// the same bytes. Then relay again with the windows kept at `RELAY_WINDOW_BYTES`
/// (`RELAY_WINDOW_BUDGET_BYTES=1` in the host's `~/.bashrc`, the agent restarted): what the
/// growth is worth.
async fn every_byte(ssh: &SshHost, rows: &mut Vec<Row>) -> anyhow::Result<()> {
    let (rtt, mbit, lines) = if smoke() {
        (50, 100, 300_000)
    } else {
        (200, 100, 5_000_000)
    };
    let target = format!("127.0.0.1:{}", ssh.port()).parse()?;
    let shaper = Shaper::start(target, Link::rtt_ms(rtt).mbit(mbit)).await?;
    let port = shaper.port();
    let file = "/tmp/relay-bench-every-byte";
    let on_host = |script: &str| -> anyhow::Result<()> {
        let out = ssh.plain_ssh_via(port, &[script]).output()?;
        anyhow::ensure!(out.status.success(), "`{script}` on the host: {out:?}");
        Ok(())
    };
    on_host(&format!("seq 1 {lines} > {file}"))?;
    let config = ssh
        .options_via(&relay_tests::bins().agent, port)?
        .resolve
        .config_file
        .expect("the fixture's ssh config");
    let home = TestHome::new();
    let dir = tempfile::tempdir()?;
    let out = dir.path().join("out");
    let cat = format!("cat {file}");
    // Bytes per second of one `relay shell HOST -- cat FILE > out`, and the bytes written.
    let relay_cat = || -> anyhow::Result<(f64, u64)> {
        let t = Instant::now();
        let status = home
            .command(&relay_tests::bins().relay)
            .arg("shell")
            .arg(format!("relay@127.0.0.1:{port}"))
            .arg("-F")
            .arg(&config)
            .arg("-i")
            .arg(ssh.key_path())
            .args(["--", &cat])
            .env_remove("SSH_AUTH_SOCK")
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&out)?)
            .status()?;
        let took = t.elapsed();
        anyhow::ensure!(status.success(), "relay shell -- {cat}: {status}");
        let got = std::fs::metadata(&out)?.len();
        Ok((rate(got, took), got))
    };
    // Not timed: the first run deploys the agent and starts its daemon.
    relay_cat()?;
    let (mut relay, mut plain, mut sizes) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..runs(3) {
        let (r, got) = relay_cat()?;
        relay.push(r);
        let t = Instant::now();
        let status = ssh
            .plain_ssh_via(port, &["-tt", &cat])
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&out)?)
            .stderr(Stdio::null())
            .status()?;
        let took = t.elapsed();
        anyhow::ensure!(status.success(), "ssh -tt {cat}: {status}");
        let want = std::fs::metadata(&out)?.len();
        plain.push(rate(want, took));
        sizes.push((got, want));
    }
    // The agent reads its settings when it starts: set the variable, then stop it (the next
    // `relay` starts it again). `[r]` keeps pkill from matching this very command.
    on_host(
        "printf 'export RELAY_WINDOW_BUDGET_BYTES=1\\n' | cat - ~/.bashrc > ~/.bashrc.new \
         && mv ~/.bashrc.new ~/.bashrc && { pkill -f '[r]elay-agent'; sleep 1; }",
    )?;
    relay_cat()?;
    let mut fixed = Vec::new();
    for _ in 0..runs(3) {
        let (r, got) = relay_cat()?;
        fixed.push(r);
        sizes.push((got, sizes[0].1));
    }
    anyhow::ensure!(
        sizes.iter().all(|(got, want)| got == want),
        "relay and ssh wrote different sizes: {sizes:?}"
    );
    let what = format!(
        "every byte into a file: `cat` of {:.1} MB, {rtt} ms / {mbit} Mbit/s link",
        sizes[0].1 as f64 / 1e6
    );
    let base = "`ssh -tt host cat file > out`";
    rows.push(rate_row(&what, &relay, &plain, base));
    rows.push(rate_row(
        "the same, windows kept at `RELAY_WINDOW_BYTES` (growth off)",
        &fixed,
        &plain,
        base,
    ));
    Ok(())
}

/// Deploy to a fresh host, and re-connect once deployed, over a 200 ms / 10 Mbit/s link (smoke:
/// 50 ms / 100 Mbit/s). Baselines through the same link: uploading the same agent binary with
/// plain `ssh host 'cat > file'`, and `ssh host true` with relay's key exchange.
async fn deploy(rows: &mut Vec<Row>) -> anyhow::Result<()> {
    let (rtt, mbit) = if smoke() { (50, 100) } else { (200, 10) };
    let ssh = SshHost::start().await?;
    let target = format!("127.0.0.1:{}", ssh.port()).parse()?;
    let shaper = Shaper::start(target, Link::rtt_ms(rtt).mbit(mbit)).await?;
    let port = shaper.port();
    let agent = &relay_tests::bins().agent;
    let transport = SshTransport::new(ssh.options_via(agent, port)?);
    let over = |what: &str| format!("{what}, {rtt} ms / {mbit} Mbit/s link");

    let t = Instant::now();
    drop(Session::connect(&transport, "relay-bench").await?);
    let deploy = t.elapsed();
    let t = Instant::now();
    let upload = ssh
        .plain_ssh_via(port, &["cat > /tmp/agent-upload"])
        .stdin(std::fs::File::open(agent)?)
        .output()?;
    anyhow::ensure!(upload.status.success(), "plain upload failed: {upload:?}");
    let plain = t.elapsed();
    rows.push(row(
        &over(&format!(
            "first connect incl. deploy of the {:.1} MB agent",
            std::fs::metadata(agent)?.len() as f64 / 1e6
        )),
        &[deploy],
        &[plain],
        "`ssh host 'cat > file' < agent` (the upload alone)",
    ));

    let (mut relay, mut plain) = (Vec::new(), Vec::new());
    for _ in 0..runs(5) {
        let t = Instant::now();
        let s = Session::connect(&transport, "relay-bench").await?;
        // Connected: the agent welcomed us and took the cleanup policy; the ping only checks.
        relay.push(t.elapsed());
        s.ping().await?;
        let t = Instant::now();
        let out = ssh
            .plain_ssh_via(port, &["-o", "KexAlgorithms=curve25519-sha256", "true"])
            .output()?;
        anyhow::ensure!(out.status.success(), "plain ssh failed: {out:?}");
        plain.push(t.elapsed());
    }
    rows.push(row(
        &over("re-connect (already deployed) → agent answers"),
        &relay,
        &plain,
        "`ssh -o KexAlgorithms=curve25519-sha256 host true`",
    ));
    Ok(())
}

/// Reads a host pane until `Exited`; returns the output offset reached and how many times the
/// stream resumed from a snapshot instead of bytes.
async fn until_exit(pane: &mut PaneHandle) -> anyhow::Result<(u64, u64)> {
    let (mut end, mut snapshots) = (0, 0);
    loop {
        match tokio::time::timeout(Duration::from_secs(120), pane.next()).await? {
            Some(PaneEvent::Output { offset, data }) => end = offset + data.len() as u64,
            Some(PaneEvent::Snapshot { offset, .. }) => {
                end = offset;
                snapshots += 1;
            }
            Some(PaneEvent::Exited { .. }) => return Ok((end, snapshots)),
            Some(PaneEvent::Event { .. }) => {}
            other => anyhow::bail!("unexpected {other:?} while reading to the exit"),
        }
    }
}

/// Medians of `relay` and `base` as multiples of the round trip.
fn round_trips(what: &str, relay: &[Duration], base: &[Duration], rtt_ms: u64) -> Row {
    let trips = |d: &[Duration]| {
        d.iter()
            .map(|d| d.as_secs_f64() * 1e3 / rtt_ms as f64)
            .collect::<Vec<_>>()
    };
    Row::samples(what, &trips(relay), &trips(base), "RTT", 2, "same as above")
}

/// An OpenSSH master connection (`ControlMaster`), so each baseline sample opens only a channel.
struct Mux {
    socket: std::path::PathBuf,
    master: tokio::process::Child,
}

impl Mux {
    async fn start(ssh: &SshHost, port: u16) -> anyhow::Result<Mux> {
        let socket = ssh.home().join(format!("mux-{port}"));
        let sock = socket.to_string_lossy().into_owned();
        // Options after the destination are still options to OpenSSH, up to the command.
        let cmd = ssh.plain_ssh_via(port, &["-o", "ControlMaster=yes", "-S", &sock, "-N"]);
        let master = tokio::process::Command::from(cmd)
            .stderr(Stdio::null())
            .spawn()?;
        let deadline = Instant::now() + Duration::from_secs(30);
        while !socket.exists() {
            anyhow::ensure!(Instant::now() < deadline, "the ssh master did not start");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(Mux { socket, master })
    }

    /// From starting `ssh -S socket -tt host script` to its first output containing `ready`.
    async fn first_output(
        &self,
        ssh: &SshHost,
        port: u16,
        script: &str,
    ) -> anyhow::Result<Duration> {
        let sock = self.socket.to_string_lossy().into_owned();
        let cmd = ssh.plain_ssh_via(port, &["-S", &sock, "-tt", script]);
        let t = Instant::now();
        let mut child = tokio::process::Command::from(cmd)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()?;
        let mut stdout = child.stdout.take().expect("piped");
        let (mut seen, mut buf) = (Vec::new(), [0u8; 256]);
        while !String::from_utf8_lossy(&seen).contains("ready") {
            let n = stdout.read(&mut buf).await?;
            anyhow::ensure!(n > 0, "ssh ended before its output");
            seen.extend_from_slice(&buf[..n]);
        }
        let elapsed = t.elapsed();
        let _ = child.wait().await;
        Ok(elapsed)
    }
}

impl Drop for Mux {
    fn drop(&mut self) {
        let _ = self.master.start_kill();
    }
}
