//! SSH figures against a fixture container: deploy to a fresh host, re-connect when
//! deployed, and throughput next to plain `ssh` on the same container.

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
        s.ping().await?;
        reconnect.push(t.elapsed());
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
    let _ = transport.describe();
    Ok(())
}
