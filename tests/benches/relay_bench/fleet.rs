//! `--fleet`: one connector process, the app sidecar (`relay serve --stdio`), holding a raw
//! `cat` pane on each of 20 and then 50 hosts (containers; 3 in a smoke run): its threads,
//! resident memory and descriptors, and keystroke echo over the hosts in turn. Baseline in the
//! same run: what a terminal app running plain OpenSSH holds for the same panes, one
//! `ssh -tt host cat` process per host, summed, and the echo through them.
//!
//! Needs Docker.

use std::process::Stdio;

use relay_tests::fixture::SshHost;
use relay_tests::fleet::{AppFleet, RAW_CAT};
use relay_tests::usage::Usage;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, ChildStdin, ChildStdout};

use super::stats::{row, runs, smoke, Row};
use super::*;

/// Echo samples per size, spread over the hosts in turn.
const ECHO_SAMPLES: usize = 200;

pub async fn run(rows: &mut Vec<Row>) -> anyhow::Result<()> {
    let sizes: &[usize] = if smoke() { &[3] } else { &[20, 50] };
    let most = *sizes.iter().max().expect("a size");
    let first = SshHost::start().await?;
    let mut fleet = vec![first];
    for host in futures_util::future::join_all((1..most).map(|_| SshHost::start())).await {
        fleet.push(host?);
    }
    for &n in sizes {
        let hosts: Vec<&SshHost> = fleet[..n].iter().collect();
        let samples = runs(ECHO_SAMPLES).max(n);
        let (app_usage, app_echo) = tokio::task::block_in_place(|| {
            let mut app = AppFleet::start(&hosts, Duration::from_secs(5));
            app.samples(0..n, n, Duration::ZERO); // warm up
            let echo = app.samples(0..n, samples, Duration::from_millis(10));
            (Usage::of(app.sidecar.pid()), echo)
        });
        let app_usage = app_usage?;
        let mut plain = Vec::new();
        for host in &hosts {
            plain.push(PlainCat::start(host).await?);
        }
        let mut plain_usage = (0, 0, 0);
        for p in &plain {
            let u = Usage::of(p.child.id().expect("running"))?;
            plain_usage.0 += u.threads;
            plain_usage.1 += u.rss_kib;
            plain_usage.2 += u.fds;
        }
        let mut plain_echo = Vec::with_capacity(samples);
        for k in 0..n {
            plain[k % n].round_trip(b'a').await?; // warm up
        }
        for k in 0..samples {
            plain_echo.push(plain[k % n].round_trip(b'a' + (k % 26) as u8).await?);
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        rows.push(Row::text(
            &format!("connector threads / RSS / fds holding a pane on each of {n} hosts"),
            app_usage.show(),
            format!(
                "{} threads, {:.1} MiB, {} fds",
                plain_usage.0,
                plain_usage.1 as f64 / 1024.0,
                plain_usage.2
            ),
            &format!("{n} `ssh -tt host cat` processes, summed"),
        ));
        rows.push(row(
            &format!("keystroke echo over {n} hosts in turn (sidecar)"),
            &app_echo,
            &plain_echo,
            "`ssh -tt` per host",
        ));
    }
    Ok(())
}

/// Plain OpenSSH running [`RAW_CAT`] (`ssh -tt host ...`), started and ready.
pub(super) struct PlainCat {
    child: Child,
    stdin: ChildStdin,
    stdout: ChildStdout,
}

impl PlainCat {
    /// `ssh -tt host RAW_CAT` to `host`.
    async fn start(host: &SshHost) -> anyhow::Result<PlainCat> {
        Self::spawn(host.plain_ssh(&["-tt", RAW_CAT])).await
    }

    /// Starts `ssh` (a command running [`RAW_CAT`]) and waits until its `cat` is ready.
    pub(super) async fn spawn(ssh: std::process::Command) -> anyhow::Result<PlainCat> {
        let mut child = tokio::process::Command::from(ssh)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()?;
        let stdin = child.stdin.take().expect("piped");
        let mut stdout = child.stdout.take().expect("piped");
        let mut seen = Vec::new();
        let mut buf = [0u8; 4096];
        while !String::from_utf8_lossy(&seen).contains("ready") {
            let n = stdout.read(&mut buf).await?;
            anyhow::ensure!(n > 0, "ssh ended before its cat was ready");
            seen.extend_from_slice(&buf[..n]);
        }
        Ok(PlainCat {
            child,
            stdin,
            stdout,
        })
    }

    /// A byte in, until the same byte comes out.
    pub(super) async fn round_trip(&mut self, byte: u8) -> anyhow::Result<Duration> {
        let t = Instant::now();
        self.stdin.write_all(&[byte]).await?;
        self.stdin.flush().await?;
        let mut buf = [0u8; 4096];
        loop {
            let n = self.stdout.read(&mut buf).await?;
            anyhow::ensure!(n > 0, "ssh ended");
            if buf[..n].contains(&byte) {
                return Ok(t.elapsed());
            }
        }
    }
}
