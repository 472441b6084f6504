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

/// `cat` of a 200 MB text file (2 MB in smoke mode) on the host: relay next to `ssh -tt`.
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
    for i in 0..runs(THROUGHPUT_RUNS) {
        let pane = PaneKey::new("bench", "ssh-cat", i.to_string());
        let t = Instant::now();
        let mut handle = open(session, pane, &cat).await?;
        let bytes = read_to(&mut handle, |_, exited| exited).await?;
        relay_rate.push(rate(bytes, t.elapsed()));

        let t = Instant::now();
        let out = host.plain_ssh(&["-tt", cat[0], cat[1]]).output()?;
        anyhow::ensure!(out.status.success(), "plain ssh failed");
        plain_rate.push(rate(out.stdout.len() as u64, t.elapsed()));
    }
    rows.push(rate_row(
        &format!("ssh `cat` of a {} MB file throughput", size / 1_000_000),
        &relay_rate,
        &plain_rate,
        "`ssh -tt host cat file`",
    ));
    host.exec_ok("rm -f /tmp/big.txt").await?;
    Ok(())
}
