//! SSH figures against a fixture container: deploy to a fresh host, re-connect when
//! deployed, and throughput (`seq`, `cat` of a 200 MB file) next to plain `ssh` on the same
//! container.

use super::*;
use relay_tests::fixture::SshHost;

pub async fn run(rows: &mut Vec<Row>) -> anyhow::Result<()> {
    let host = SshHost::start().await?;
    let transport = host.transport(&relay_tests::bins().agent)?;

    let t = Instant::now();
    let session = Session::connect(&transport, "relay-bench").await?;
    let deploy = t.elapsed();
    drop(session);
    rows.push(row(
        "ssh first connect incl. deploy to a fresh host",
        &[deploy],
        &[],
        "—",
    ));

    let mut reconnect = Vec::new();
    for _ in 0..runs(5) {
        let t = Instant::now();
        let s = Session::connect(&transport, "relay-bench").await?;
        // Connected: the agent welcomed us and took the cleanup policy; the ping only checks.
        reconnect.push(t.elapsed());
        s.ping().await?;
    }
    let mut plain_connect = Vec::new();
    for _ in 0..runs(5) {
        let t = Instant::now();
        let out = host.plain_ssh(&["true"]).output()?;
        anyhow::ensure!(out.status.success(), "plain ssh failed: {out:?}");
        plain_connect.push(t.elapsed());
    }
    rows.push(row(
        "ssh re-connect (already deployed) → agent answers",
        &reconnect,
        &plain_connect,
        "`ssh host true`",
    ));

    let session = Session::connect(&transport, "relay-bench").await?;
    let mut relay_rate = Vec::new();
    let mut plain_rate = Vec::new();
    for i in 0..runs(THROUGHPUT_RUNS) {
        let pane = PaneKey::new("bench", "ssh-seq", i.to_string());
        let t = Instant::now();
        let mut handle = open(&session, pane, &seq()).await?;
        let bytes = read_to(&mut handle, |_, exited| exited).await?;
        relay_rate.push(rate(bytes, t.elapsed()));

        let t = Instant::now();
        let mut plain = vec!["-tt"];
        plain.extend(seq());
        let out = host.plain_ssh(&plain).output()?;
        anyhow::ensure!(out.status.success(), "plain ssh failed");
        plain_rate.push(rate(out.stdout.len() as u64, t.elapsed()));
    }
    rows.push(rate_row(
        &format!("ssh `{}` throughput", seq().join(" ")),
        &relay_rate,
        &plain_rate,
        "`ssh -tt host seq ...`",
    ));
    cat_big_file(&host, &session, rows).await?;
    Ok(())
}

/// Relay runs of the `cat` row repeated at most after a gap, each.
const MAX_REPEATS: usize = 2;

/// `cat` of a 200 MB text file (2 MB in smoke mode) on the host: relay next to `ssh -tt`. A
/// relay run with a gap is repeated (at most [`MAX_REPEATS`] times) and the row says how many
/// were.
async fn cat_big_file(
    host: &SshHost,
    session: &Session,
    rows: &mut Vec<Row>,
) -> anyhow::Result<()> {
    let size: u64 = if stats::smoke() {
        2_000_000
    } else {
        200_000_000
    };
    host.exec_ok(&format!("seq 1 40000000 | head -c {size} > /tmp/big.txt"))
        .await?;
    let cat = ["cat", "/tmp/big.txt"];
    let (mut relay_rate, mut plain_rate) = (Vec::new(), Vec::new());
    let mut repeated = 0;
    for i in 0..runs(THROUGHPUT_RUNS) {
        let mut attempt = 0;
        let (bytes, elapsed) = loop {
            let pane = PaneKey::new("bench", "ssh-cat", format!("{i}-{attempt}"));
            let t = Instant::now();
            let mut handle = open(session, pane, &cat).await?;
            // A gap: `cat` got a replay ring ahead of this client while it was descheduled;
            // the agent allows that rather than stop the program (`ssh -tt` would stop `cat`).
            match read_to(&mut handle, |_, exited| exited).await {
                Ok(bytes) => break (bytes, t.elapsed()),
                Err(e) if e.downcast_ref::<super::Gap>().is_none() => return Err(e),
                Err(_) if attempt < MAX_REPEATS => {
                    let _ = session.kill(handle.binding()).await;
                    attempt += 1;
                    repeated += 1;
                }
                Err(_) => anyhow::bail!("every one of {} `cat` runs had a gap", MAX_REPEATS + 1),
            }
        };
        relay_rate.push(rate(bytes, elapsed));

        let t = Instant::now();
        let out = host.plain_ssh(&["-tt", cat[0], cat[1]]).output()?;
        anyhow::ensure!(out.status.success(), "plain ssh failed");
        plain_rate.push(rate(out.stdout.len() as u64, t.elapsed()));
    }
    let repeats = match repeated {
        0 => String::new(),
        n => format!(" ({n} relay runs repeated after a gap)"),
    };
    rows.push(rate_row(
        &format!(
            "ssh `cat` of a {} MB file throughput{repeats}",
            size / 1_000_000
        ),
        &relay_rate,
        &plain_rate,
        "`ssh -tt host cat file`",
    ));
    host.exec_ok("rm -f /tmp/big.txt").await?;
    Ok(())
}
