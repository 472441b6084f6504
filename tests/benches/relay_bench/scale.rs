//! Scale figures, local agent: pane create → first output on a warm connection with
//! 0 / 100 / 1,000 idle panes already open, and the agent daemon's threads, RSS and open
//! descriptors with that many idle panes. Baselines in the same run: a plain PTY spawn for the
//! create, and a tmux server holding as many windows of the same idle shell for the resources
//! (one process that owns many PTYs, like the agent).

use std::process::Command;

use relay_tests::usage::Usage;

use super::stats::{row, runs, smoke, Row};
use super::*;

const CREATE_RUNS: usize = 30;

pub async fn run(rows: &mut Vec<Row>) -> anyhow::Result<()> {
    let levels: [usize; 3] = if smoke() { [0, 5, 20] } else { [0, 100, 1000] };
    let home = TestHome::new();
    let session = home.session().await;
    let pid = home
        .daemon_pid()
        .ok_or_else(|| anyhow::anyhow!("no daemon"))?;
    let mut tmux = Tmux::start();
    let mut idle = Vec::new();
    let mut at_zero = None;
    for n in levels {
        while idle.len() < n {
            let pane = PaneKey::new("bench", "idle", idle.len().to_string());
            let mut h = open(&session, pane, &["sh", "-i"]).await?;
            read_to(&mut h, |text, _| text.contains('$') || text.contains('#')).await?;
            idle.push(h);
        }
        if let Some(t) = tmux.as_mut() {
            t.grow(n)?;
        }
        // Let every terminal model catch up with its prompt.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let relay = Usage::of(pid as u32)?;
        let base = match tmux.as_ref() {
            Some(t) => Some(Usage::of(t.pid as u32)?),
            None => None,
        };
        let base_cell = base.map_or("tmux not installed".into(), |b| b.show());
        rows.push(Row::text(
            &format!("agent threads / RSS / open fds with {n} idle `sh` panes"),
            relay.show(),
            base_cell,
            "tmux server with as many windows",
        ));
        let zero = *at_zero.get_or_insert((relay, base));
        if n > 0 {
            let per = |now: Usage, zero: Usage| {
                format!("{:.0} KiB", (now.rss_kib - zero.rss_kib) as f64 / n as f64)
            };
            let base_cell = match (base, zero.1) {
                (Some(b), Some(z)) => per(b, z),
                _ => "—".into(),
            };
            rows.push(Row::text(
                &format!("agent RSS growth per idle pane, 0 → {n} panes"),
                per(relay, zero.0),
                base_cell,
                "tmux server",
            ));
        }

        // The new panes are ended after the round, not one by one: an end's sweep of the
        // shell's session reads every process's stat, which would load the next create.
        let (mut create, mut plain, mut made) = (Vec::new(), Vec::new(), Vec::new());
        for i in 0..runs(CREATE_RUNS) {
            let pane = PaneKey::new("bench", "create", format!("{n}-{i}"));
            let t = Instant::now();
            let mut h = open(&session, pane, &["sh", "-c", "printf ready; exec cat"]).await?;
            read_to(&mut h, |text, _| text.contains("ready")).await?;
            create.push(t.elapsed());
            made.push(h);
            let t = Instant::now();
            plain_pty(&["sh", "-c", "printf ready"], Some(b"ready"))?;
            plain.push(t.elapsed());
        }
        for mut h in made {
            session.kill(h.binding()).await?;
            read_to(&mut h, |_, exited| exited).await?;
        }
        rows.push(row(
            &format!("pane create → first output, warm connection, {n} panes open"),
            &create,
            &plain,
            "plain PTY spawn → first output",
        ));
    }
    Ok(())
}

/// A private tmux server (its own socket, no config file) with `windows` idle `sh -i` windows.
struct Tmux {
    socket: String,
    pid: i32,
    windows: usize,
}

impl Tmux {
    /// `None` when tmux is not installed.
    fn start() -> Option<Tmux> {
        let socket = format!("relay-bench-{}", std::process::id());
        let ok = Command::new("tmux")
            .args(["-L", &socket, "-f", "/dev/null", "new-session", "-d"])
            .args(["-x", "80", "-y", "24", "sh", "-i"])
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            return None;
        }
        let out = Command::new("tmux")
            .args(["-L", &socket, "display-message", "-p", "#{pid}"])
            .output()
            .ok()?;
        let pid = String::from_utf8_lossy(&out.stdout).trim().parse().ok()?;
        Some(Tmux {
            socket,
            pid,
            windows: 1,
        })
    }

    /// Adds windows until there are `n` (at least the first one stays).
    fn grow(&mut self, n: usize) -> anyhow::Result<()> {
        while self.windows < n {
            let ok = Command::new("tmux")
                .args(["-L", &self.socket, "new-window", "-d", "sh", "-i"])
                .status()?
                .success();
            anyhow::ensure!(ok, "tmux new-window failed");
            self.windows += 1;
        }
        Ok(())
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["-L", &self.socket, "kill-server"])
            .status();
    }
}
