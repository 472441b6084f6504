//! The static (musl) agent next to the glibc 2.17 one, both as `deploy/build-agents.sh` builds
//! them (release, zig), each run as this machine's local agent in the same run, twice in the
//! order glibc, static, static, glibc: keystroke echo through a `cat` pane, `seq` throughput, and
//! the daemon's RSS with idle `sh` panes (from each agent's first round). The figures decide which
//! agent a glibc host gets (docs/performance.md).

use relay_connector::Session;
use relay_tests::fixture::portable_agents;

use super::stats::{rate_row, row, runs, smoke, Row};
use super::*;
use relay_tests::usage::Usage;

const ECHO_RUNS: usize = 200;
const GNU: &str = "relay-agent-x86_64-unknown-linux-gnu";
const STATIC: &str = "relay-agent-x86_64-unknown-linux-musl";

/// What one agent did.
struct Figures {
    echo: Vec<Duration>,
    rate: Vec<f64>,
    rss_idle: Usage,
    rss_panes: Usage,
}

impl Figures {
    /// Adds the samples of another round of the same agent; the resources stay the first
    /// round's (each round is a fresh daemon, so they are alike).
    fn absorb(&mut self, other: Figures) {
        self.echo.extend(other.echo);
        self.rate.extend(other.rate);
    }
}

pub async fn run(rows: &mut Vec<Row>) -> anyhow::Result<()> {
    let dir = tokio::task::spawn_blocking(portable_agents).await??;
    let (gnu, musl) = (dir.join(GNU), dir.join(STATIC));
    if !musl.is_file() {
        anyhow::bail!(
            "no static agent at {} (rustup target add x86_64-unknown-linux-musl; \
             deploy/build-agents.sh)",
            musl.display()
        );
    }
    // ABBA, so that neither side is always the first (cold caches) or the last.
    let mut g = measure(&gnu).await?;
    let mut m = measure(&musl).await?;
    m.absorb(measure(&musl).await?);
    g.absorb(measure(&gnu).await?);
    let base = "glibc 2.17 agent";
    rows.push(row(
        "static (musl) agent: keystroke echo in a `cat` pane",
        &m.echo,
        &g.echo,
        base,
    ));
    rows.push(rate_row(
        &format!("static (musl) agent: `{}` throughput", seq().join(" ")),
        &m.rate,
        &g.rate,
        base,
    ));
    rows.push(Row::text(
        "static (musl) agent: daemon with one attached pane",
        m.rss_idle.show(),
        g.rss_idle.show(),
        base,
    ));
    rows.push(Row::text(
        &format!(
            "static (musl) agent: daemon with {} idle `sh` panes",
            panes()
        ),
        m.rss_panes.show(),
        g.rss_panes.show(),
        base,
    ));
    Ok(())
}

fn panes() -> usize {
    if smoke() {
        5
    } else {
        100
    }
}

/// Runs the three scenarios against a fresh daemon of `agent`.
async fn measure(agent: &std::path::Path) -> anyhow::Result<Figures> {
    let home = TestHome::new();
    let session = Session::connect(&home.transport_with(agent), "bench").await?;
    let pid = home
        .daemon_pid()
        .ok_or_else(|| anyhow::anyhow!("no daemon for {}", agent.display()))?;

    // Echo: one byte into `cat` on a PTY, until it comes back.
    let mut handle = open(&session, PaneKey::new("bench", "echo", "0"), &["cat"]).await?;
    let binding = handle.binding().clone();
    let mut echo = Vec::new();
    for i in 0..runs(ECHO_RUNS) {
        let key = [b'a' + (i % 26) as u8];
        let t = Instant::now();
        session.input(&binding, &key).await?;
        let want = (key[0] as char).to_string();
        read_to(&mut handle, |text, _| text.ends_with(&want)).await?;
        echo.push(t.elapsed());
    }
    let rss_idle = Usage::of(pid as u32)?;

    let mut rates = Vec::new();
    for i in 0..runs(THROUGHPUT_RUNS) {
        let pane = PaneKey::new("bench", "seq", i.to_string());
        let t = Instant::now();
        let mut h = open(&session, pane, &seq()).await?;
        let bytes = read_to(&mut h, |_, exited| exited).await?;
        rates.push(rate(bytes, t.elapsed()));
    }

    let mut idle = Vec::new();
    for i in 0..panes() {
        let pane = PaneKey::new("bench", "idle", i.to_string());
        let mut h = open(&session, pane, &["sh", "-i"]).await?;
        read_to(&mut h, |text, _| text.contains('$') || text.contains('#')).await?;
        idle.push(h);
    }
    // Let every terminal model catch up with its prompt.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rss_panes = Usage::of(pid as u32)?;
    Ok(Figures {
        echo,
        rate: rates,
        rss_idle,
        rss_panes,
    })
}
