//! relay benchmarks, each next to a baseline measured in the same run (a plain PTY locally,
//! plain `ssh` over SSH, a tmux server for resources held per pane).
//!
//! ```text
//! cargo build --release --workspace --bins
//! cargo bench -p relay-tests --bench relay_bench                      # local figures
//! cargo bench -p relay-tests --bench relay_bench -- --local --ssh      # and SSH figures (Docker)
//! cargo bench -p relay-tests --bench relay_bench -- --resilience       # reconnect figures only
//!                                                                      # (Docker and root)
//! cargo bench -p relay-tests --bench relay_bench -- --screen           # terminal model figures
//! cargo bench -p relay-tests --bench relay_bench -- --scale            # 0 / 100 / 1,000 panes
//! cargo bench -p relay-tests --bench relay_bench -- --link             # 50 / 200 ms links (Docker)
//! cargo bench -p relay-tests --bench relay_bench -- --serve            # the app sidecar vs the library
//! cargo bench -p relay-tests --bench relay_bench -- --agents           # static (musl) vs glibc agent
//! cargo bench -p relay-tests --bench relay_bench -- --fleet            # 20 / 50 hosts on one connector
//!                                                                      # (Docker)
//! cargo bench -p relay-tests --bench relay_bench -- --predict          # predictive echo, 50 / 200 ms
//!                                                                      # (Docker)
//! cargo bench -p relay-tests --bench relay_bench -- --all              # every group
//! cargo test -p relay-tests --bench relay_bench -- --smoke --all       # CI: one short round each
//! ```
//!
//! Figures are printed as a Markdown table to paste into `docs/performance.md`: median, p90, p99,
//! min–max and the sample count of each side, and relay / baseline of the medians. This is not a
//! test: nothing here asserts a speed (a smoke run only proves every scenario still runs).

use std::io::Read;
use std::time::{Duration, Instant};

use portable_pty::{native_pty_system, CommandBuilder, PtySize};
use relay_connector::{PaneEvent, PaneHandle, Session};
use relay_protocol::{PaneKey, SpawnSpec};
use relay_tests::TestHome;

mod agents;
mod fleet;
mod link;
mod predict;
mod resilience;
mod scale;
mod screen;
mod serve;
mod ssh;
mod stats;

use stats::{rate_row, row, runs, Row};

/// The throughput workload of the issue: about 20.9 MB of text; in smoke mode 1.3 MB, within
/// one replay ring (a debug build's client may fall a ring behind, which is a gap).
fn seq() -> [&'static str; 3] {
    [
        "seq",
        "1",
        if stats::smoke() { "200000" } else { "3000000" },
    ]
}
const LATENCY_RUNS: usize = 30;
const THROUGHPUT_RUNS: usize = 3;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let mut rows = Vec::new();

    let flag = |g: &str| args.iter().any(|a| a == g);
    stats::set_smoke(flag("--smoke"));
    let group = |g: &str| flag(g) || flag("--all");
    const GROUPS: [&str; 12] = [
        "--agents",
        "--predict",
        "--fleet",
        "--echo",
        "--ssh",
        "--serve",
        "--resilience",
        "--screen",
        "--scale",
        "--link",
        "--every-byte",
        "--all",
    ];
    // Local figures unless only other groups were asked for.
    if group("--local") || !GROUPS.iter().any(|g| flag(g)) {
        let home = TestHome::new();
        let session = home.session().await;
        local(&session, &mut rows).await?;
        drop(session);
    }

    if group("--ssh") {
        ssh::run(&mut rows).await?;
    }
    if group("--resilience") {
        resilience::run(&mut rows).await?;
    } else if flag("--echo") {
        resilience::run_echo(&mut rows).await?;
    }
    if group("--screen") {
        screen::run(&mut rows).await?;
    }
    if group("--scale") {
        scale::run(&mut rows).await?;
    }
    if group("--link") {
        link::run(&mut rows).await?;
    } else if flag("--every-byte") {
        link::run_every_byte(&mut rows).await?;
    }
    if group("--serve") {
        serve::run(&mut rows).await?;
    }
    if group("--agents") {
        agents::run(&mut rows).await?;
    }
    if group("--fleet") {
        fleet::run(&mut rows).await?;
    }
    if group("--predict") {
        predict::run(&mut rows).await?;
    }
    stats::print(&rows);
    Ok(())
}

/// Rounds of pane create and close in a smoke run: enough for a median the Rule I gate can
/// compare (`stats::gate`).
const SMOKE_CREATE_RUNS: usize = 7;

async fn local(session: &Session, rows: &mut Vec<Row>) -> anyhow::Result<()> {
    // Pane create: open a pane whose shell prints a marker, until the marker arrives.
    let mut create = Vec::new();
    let mut close = Vec::new();
    let rounds = if stats::smoke() {
        SMOKE_CREATE_RUNS
    } else {
        LATENCY_RUNS
    };
    for i in 0..rounds {
        let pane = PaneKey::new("bench", "create", i.to_string());
        let cmd = ["sh", "-c", "printf ready; exec cat"];
        let t = Instant::now();
        let mut handle = open(session, pane, &cmd).await?;
        read_to(&mut handle, |text, _| text.contains("ready")).await?;
        create.push(t.elapsed());
        let binding = handle.binding().clone();
        let t = Instant::now();
        session.kill(&binding).await?;
        read_to(&mut handle, |_, exited| exited).await?;
        close.push(t.elapsed());
    }
    let mut plain = Vec::new();
    let mut plain_close = Vec::new();
    for _ in 0..rounds {
        let t = Instant::now();
        plain_pty(&["sh", "-c", "printf ready"], Some(b"ready"))?;
        plain.push(t.elapsed());
        plain_close.push(plain_hangup()?);
    }
    rows.push(row(
        "local pane create → first output",
        &create,
        &plain,
        "plain PTY spawn → first output",
    ));
    rows.push(row(
        "local pane kill → exit event",
        &close,
        &plain_close,
        "SIGHUP to a plain PTY's program → reaped",
    ));
    // Rule I: a pane's create and close stay near what the OS itself costs.
    stats::gate("local pane create", &create, &plain)?;
    stats::gate("local pane kill", &close, &plain_close)?;

    // Throughput.
    let mut relay_rate = Vec::new();
    let mut plain_rate = Vec::new();
    for i in 0..runs(THROUGHPUT_RUNS) {
        let pane = PaneKey::new("bench", "seq", i.to_string());
        let t = Instant::now();
        let mut handle = open(session, pane, &seq()).await?;
        let bytes = read_to(&mut handle, |_, exited| exited).await?;
        relay_rate.push(rate(bytes, t.elapsed()));
        let t = Instant::now();
        let bytes = plain_pty(&seq(), None)?;
        plain_rate.push(rate(bytes, t.elapsed()));
    }
    rows.push(rate_row(
        &format!("local `{}` throughput", seq().join(" ")),
        &relay_rate,
        &plain_rate,
        "same command in a plain PTY",
    ));
    Ok(())
}

/// A spawn spec running `script` with `sh -c`.
fn sh(script: &str) -> SpawnSpec {
    SpawnSpec {
        command: vec!["sh".into(), "-c".into(), script.into()],
        ..SpawnSpec::default()
    }
}

/// Opens a pane running `cmd` and attaches from offset 0.
async fn open(session: &Session, pane: PaneKey, cmd: &[&str]) -> anyhow::Result<PaneHandle> {
    let spec = SpawnSpec {
        command: cmd.iter().map(|s| s.to_string()).collect(),
        ..SpawnSpec::default()
    };
    let (_, handle) = session.open(pane, spec, Some(0)).await?;
    Ok(handle)
}

/// The agent skipped output a benchmark was reading (`from..to`, offsets): the program got a
/// replay ring ahead of the client.
#[derive(Debug)]
struct Gap {
    from: u64,
    to: u64,
}

impl std::fmt::Display for Gap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "gap {}..{} in a benchmark", self.from, self.to)
    }
}

impl std::error::Error for Gap {}

/// Reads events until `done(text_so_far_tail, exited)`; returns the output byte count.
async fn read_to(
    handle: &mut PaneHandle,
    done: impl Fn(&str, bool) -> bool,
) -> anyhow::Result<u64> {
    let mut bytes = 0u64;
    let mut tail = String::new();
    let mut exited = false;
    while !done(&tail, exited) {
        match tokio::time::timeout(Duration::from_secs(120), handle.next()).await? {
            Some(PaneEvent::Output { data, .. }) => {
                bytes += data.len() as u64;
                if tail.len() < 64 {
                    tail.push_str(&String::from_utf8_lossy(&data));
                }
            }
            Some(PaneEvent::Exited { .. }) => exited = true,
            Some(PaneEvent::Gap { from, to }) => return Err(Gap { from, to }.into()),
            Some(PaneEvent::Disconnected { reason }) => anyhow::bail!("disconnected: {reason}"),
            Some(other) => anyhow::bail!("unexpected {other:?} in a benchmark"),
            None => anyhow::bail!("pane stream ended"),
        }
    }
    Ok(bytes)
}

/// Runs `cmd` in a plain PTY and reads until `until` is seen or EOF; returns bytes read.
fn plain_pty(cmd: &[&str], until: Option<&[u8]>) -> anyhow::Result<u64> {
    let pair = native_pty_system().openpty(PtySize::default())?;
    let mut builder = CommandBuilder::new(cmd[0]);
    builder.args(&cmd[1..]);
    let mut child = pair.slave.spawn_command(builder)?;
    drop(pair.slave);
    let mut reader = pair.master.try_clone_reader()?;
    let mut buf = vec![0u8; 64 * 1024];
    let mut seen = Vec::new();
    let mut total = 0u64;
    loop {
        let n = match reader.read(&mut buf) {
            Ok(0) | Err(_) => break, // EIO at hang-up is the PTY's EOF.
            Ok(n) => n,
        };
        total += n as u64;
        if let Some(needle) = until {
            seen.extend_from_slice(&buf[..n]);
            if seen.windows(needle.len()).any(|w| w == needle) {
                break;
            }
        }
    }
    child.wait()?;
    Ok(total)
}

/// Starts `cat` in a plain PTY, then times SIGHUP to it until it is reaped.
fn plain_hangup() -> anyhow::Result<Duration> {
    let pair = native_pty_system().openpty(PtySize::default())?;
    let mut child = pair.slave.spawn_command(CommandBuilder::new("cat"))?;
    drop(pair.slave);
    let pid = child
        .process_id()
        .ok_or_else(|| anyhow::anyhow!("no pid for cat"))?;
    let t = Instant::now();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGHUP,
    )?;
    child.wait()?;
    Ok(t.elapsed())
}

fn rate(bytes: u64, elapsed: Duration) -> f64 {
    bytes as f64 / elapsed.as_secs_f64()
}
