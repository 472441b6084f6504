//! The terminal model's cost and what it buys: throughput with the model on next to the
//! same agent with it off (`RELAY_SCREEN_MODEL=off`), agent RSS per idle pane on and off, and the
//! time from a re-attach to a correct screen after 50 MB of missed output.

use std::time::{Duration, Instant};

use relay_connector::{PaneEvent, Session};
use relay_protocol::{PaneKey, Resume};
use relay_tests::TestHome;

use super::stats::{rate_row, row, runs, smoke, Row};
use super::{open, rate, read_to, seq, THROUGHPUT_RUNS};

const IDLE_PANES: usize = 100;
const REATTACH_RUNS: usize = 5;

fn idle_panes() -> usize {
    if smoke() {
        3
    } else {
        IDLE_PANES
    }
}

pub async fn run(rows: &mut Vec<Row>) -> anyhow::Result<()> {
    let on = TestHome::new();
    let off = TestHome::with_env(&[("RELAY_SCREEN_MODEL", "off")]);
    let (s_on, s_off) = (on.session().await, off.session().await);

    // Throughput, alternating model on and off.
    let (mut with, mut without) = (Vec::new(), Vec::new());
    for i in 0..runs(THROUGHPUT_RUNS) {
        for (session, into) in [(&s_on, &mut with), (&s_off, &mut without)] {
            let pane = PaneKey::new("bench", "seq", i.to_string());
            let t = Instant::now();
            let mut handle = open(session, pane, &seq()).await?;
            let bytes = read_to(&mut handle, |_, exited| exited).await?;
            into.push(rate(bytes, t.elapsed()));
        }
    }
    rows.push(rate_row(
        &format!("local `{}`, terminal model on", seq().join(" ")),
        &with,
        &without,
        "same agent build, model off",
    ));

    // Agent CPU while a pane prints ~2 MB/s of short lines that are read as they come.
    let cpu_on = flood_cpu(&on, &s_on).await?;
    let cpu_off = flood_cpu(&off, &s_off).await?;
    rows.push(Row::text(
        "agent CPU, 5 s of a ~2 MB/s flood of 16-byte lines (read)",
        format!("{cpu_on:.0} % of a core"),
        format!("{cpu_off:.0} % of a core"),
        "model off",
    ));

    // Agent RSS with idle panes (a shell prompt each), model on and off.
    let rss_on = idle_rss(&on, &s_on).await?;
    let rss_off = idle_rss(&off, &s_off).await?;
    rows.push(Row::text(
        &format!(
            "agent RSS growth per idle pane ({} `sh` panes, 80×24)",
            idle_panes()
        ),
        format!("{:.0} KiB", rss_on),
        format!("{:.0} KiB", rss_off),
        "model off",
    ));

    // Re-attach to a correct screen after 50 MB (smoke: 6 MB, still more than the 4 MiB ring)
    // of output the client missed.
    let missed: u64 = if smoke() { 6_000_000 } else { 50_000_000 };
    let pane = PaneKey::new("bench", "missed", "0");
    let script = format!(
        "read go; head -c {missed} /dev/zero | tr '\\0' 'x' | fold -w 79; printf 'end-marker'; read end"
    );
    let (created, first) = s_on
        .open_screen(pane.clone(), super::sh(&script), Resume::From(0), 0)
        .await?;
    drop(first);
    s_on.input(&created.binding, b"go\n").await?;
    wait_output(&s_on, &pane, missed).await?;
    // The end marker comes after the 50 MB (and the PTY's added carriage returns): wait for it.
    let deadline = Instant::now() + Duration::from_secs(120);
    while !snapshot_text(&s_on, &pane, created.binding.pty)
        .await?
        .contains("end-marker")
    {
        anyhow::ensure!(Instant::now() < deadline, "the 50 MB were not written");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let mut reattach = Vec::new();
    for _ in 0..runs(REATTACH_RUNS) {
        let t = Instant::now();
        let mut handle = s_on
            .attach_screen(pane.clone(), Some(created.binding.pty), Resume::From(0), 0)
            .await?;
        loop {
            match tokio::time::timeout(Duration::from_secs(30), handle.next()).await? {
                Some(PaneEvent::Snapshot { data, .. }) => {
                    anyhow::ensure!(
                        String::from_utf8_lossy(&data).contains("end-marker"),
                        "snapshot without the end marker"
                    );
                    break;
                }
                Some(PaneEvent::Event { .. }) => {}
                other => anyhow::bail!("expected a snapshot, got {other:?}"),
            }
        }
        reattach.push(t.elapsed());
    }
    rows.push(row(
        &format!(
            "re-attach → correct screen after {} MB missed (local)",
            missed / 1_000_000
        ),
        &reattach,
        &[],
        "—",
    ));
    Ok(())
}

/// The text of a snapshot of `pane` taken now.
async fn snapshot_text(
    session: &Session,
    pane: &PaneKey,
    pty: relay_protocol::PtyId,
) -> anyhow::Result<String> {
    let mut handle = session
        .attach_screen(pane.clone(), Some(pty), Resume::Snapshot, 0)
        .await?;
    loop {
        match tokio::time::timeout(Duration::from_secs(30), handle.next()).await? {
            Some(PaneEvent::Snapshot { data, .. }) => {
                return Ok(String::from_utf8_lossy(&data).into_owned())
            }
            Some(PaneEvent::Event { .. }) => {}
            other => anyhow::bail!("expected a snapshot, got {other:?}"),
        }
    }
}

/// The daemon's CPU use (user + system, % of one core) while a pane floods for 5 s.
async fn flood_cpu(home: &TestHome, session: &Session) -> anyhow::Result<f64> {
    const FLOOD: &str = "while :; do yes flood-flood-flood | head -c 65536; sleep 0.03; done";
    let pid = home
        .daemon_pid()
        .ok_or_else(|| anyhow::anyhow!("no daemon"))?;
    let pane = PaneKey::new("bench", "flood", "0");
    let (created, mut handle) = session
        .open_screen(pane, super::sh(FLOOD), Resume::Now, 0)
        .await?;
    let reader = tokio::spawn(async move { while handle.next().await.is_some() {} });
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (t0, c0) = (Instant::now(), cpu_ticks(pid)?);
    tokio::time::sleep(Duration::from_secs(5)).await;
    let (t1, c1) = (Instant::now(), cpu_ticks(pid)?);
    session.kill(&created.binding).await?;
    reader.abort();
    // Clock ticks are 1/100 s on Linux.
    Ok((c1 - c0) as f64 / (t1 - t0).as_secs_f64())
}

/// utime + stime of `pid`, in clock ticks.
pub(super) fn cpu_ticks(pid: i32) -> anyhow::Result<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the command name (which is in parentheses and may contain spaces).
    let rest = stat
        .rsplit_once(')')
        .ok_or_else(|| anyhow::anyhow!("bad /proc stat"))?
        .1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // utime and stime are fields 14 and 15 of the line: indexes 11 and 12 after the name.
    Ok(field(11) + field(12))
}

/// KiB of daemon RSS added per idle pane.
async fn idle_rss(home: &TestHome, session: &Session) -> anyhow::Result<f64> {
    let pid = home
        .daemon_pid()
        .ok_or_else(|| anyhow::anyhow!("no daemon"))?;
    let before = rss_kib(pid)?;
    let mut handles = Vec::new();
    for i in 0..idle_panes() {
        let pane = PaneKey::new("bench", "idle", i.to_string());
        let mut h = open(session, pane, &["sh", "-i"]).await?;
        read_to(&mut h, |text, _| text.contains('$') || text.contains('#')).await?;
        handles.push(h);
    }
    // Let every model catch up with its prompt.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = rss_kib(pid)?;
    Ok((after - before) / idle_panes() as f64)
}

fn rss_kib(pid: i32) -> anyhow::Result<f64> {
    Ok(relay_tests::usage::Usage::of(pid as u32)?.rss_kib as f64)
}

async fn wait_output(session: &Session, pane: &PaneKey, bytes: u64) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let done = session
            .list_leases()
            .await?
            .iter()
            .any(|l| &l.binding.pane == pane && l.bytes_out >= bytes);
        if done {
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "{pane} did not write {bytes} bytes"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
