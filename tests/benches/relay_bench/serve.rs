//! `--serve`: the desktop-app sidecar (`relay serve --stdio`, docs/embedding.md) next to the
//! library it wraps, same agent, same run: `seq` throughput to the exit, and keystroke echo on
//! a `cat` pane. The sidecar side includes what an app pays: JSON lines, base64, acks.

use std::time::{Duration, Instant};

use relay_connector::{Host, HostOptions, PaneEvent};
use relay_protocol::SpawnSpec;
use relay_tests::sidecar::{b64, unb64, Sidecar};
use relay_tests::{bins, TestHome};
use serde_json::{json, Value};

use crate::stats::{rate_row, row, runs, Row};
use crate::{rate, seq, LATENCY_RUNS, THROUGHPUT_RUNS};

pub async fn run(rows: &mut Vec<Row>) -> anyhow::Result<()> {
    let home = TestHome::new();
    let host = Host::open(home.transport(), HostOptions::new("bench"));
    let ws = host.workspace("bench-lib");
    let relay = home.command(&bins().relay);
    let mut app = tokio::task::spawn_blocking(move || {
        let mut app = Sidecar::spawn(relay);
        let r = app
            .call("host.open", json!({"destination": "local"}))
            .unwrap();
        assert_eq!(r["host"], "h1");
        app
    })
    .await?;

    let mut lib_rate = Vec::new();
    let mut app_rate = Vec::new();
    for i in 0..runs(THROUGHPUT_RUNS) {
        let spec = command(&seq());
        let t = Instant::now();
        let (_, mut pane) = ws.open("seq", &i.to_string(), spec).await?;
        let mut bytes = 0u64;
        loop {
            match pane.next().await {
                Some(PaneEvent::Output { data, .. }) => bytes += data.len() as u64,
                Some(PaneEvent::Exited { .. }) => break,
                // As on the sidecar side: a ring behind, the screen stands for lost bytes.
                Some(PaneEvent::Snapshot { .. }) => {
                    eprintln!("note: the library's seq run {i} fell a ring behind (a snapshot)");
                }
                Some(other) => anyhow::bail!("unexpected {other:?} in a benchmark"),
                None => anyhow::bail!("the pane's stream ended before its exit"),
            }
        }
        lib_rate.push(rate(bytes, t.elapsed()));
        let (a, r) = tokio::task::spawn_blocking(move || {
            let t = Instant::now();
            let bytes = sidecar_seq(&mut app, i);
            (app, rate(bytes, t.elapsed()))
        })
        .await?;
        app = a;
        app_rate.push(r);
    }
    rows.push(rate_row(
        &format!("sidecar `{}` throughput", seq().join(" ")),
        &app_rate,
        &lib_rate,
        "the library directly (same agent)",
    ));

    // Echo: one byte into `cat`'s PTY, until the terminal echoes it.
    let (_, mut pane) = ws.open("echo", "0", command(&["cat"])).await?;
    let input = host.input_writer(pane.binding());
    let mut lib = Vec::new();
    for _ in 0..runs(LATENCY_RUNS) {
        let t = Instant::now();
        input.push(b"e".to_vec())?;
        loop {
            match tokio::time::timeout(Duration::from_secs(20), pane.next()).await? {
                Some(PaneEvent::Output { data, .. }) if data.contains(&b'e') => break,
                Some(PaneEvent::Output { .. }) => {}
                other => anyhow::bail!("unexpected {other:?} in a benchmark"),
            }
        }
        lib.push(t.elapsed());
    }
    let sidecar = tokio::task::spawn_blocking(move || sidecar_echo(&mut app)).await?;
    rows.push(row(
        "sidecar keystroke echo (local `cat`)",
        &sidecar,
        &lib,
        "the library directly",
    ));
    Ok(())
}

fn command(argv: &[&str]) -> SpawnSpec {
    SpawnSpec {
        command: argv.iter().map(|s| s.to_string()).collect(),
        ..SpawnSpec::default()
    }
}

fn pane_json(tab: &str, leaf: &str) -> Value {
    json!({"workspace": "bench-app", "tab": tab, "leaf": leaf})
}

/// Runs `seq` in a new pane through the sidecar, acking as an app would; returns the bytes
/// delivered.
fn sidecar_seq(app: &mut Sidecar, i: usize) -> u64 {
    let r = app
        .call(
            "pane.open",
            json!({"host": "h1", "pane": pane_json("seq", &i.to_string()),
                                  "command": seq()}),
        )
        .unwrap();
    let binding = r["binding"].clone();
    let pty = binding["pty"].clone();
    let mut bytes = 0u64;
    loop {
        let m = app.take("seq output", |m| m["params"]["binding"]["pty"] == pty);
        match m["method"].as_str() {
            Some("pane.output") => {
                let data = unb64(m["params"]["data"].as_str().unwrap());
                bytes += data.len() as u64;
                let next = m["params"]["offset"].as_u64().unwrap() + data.len() as u64;
                app.notify("pane.ack", json!({"binding": binding, "offset": next}));
            }
            // A consumer a ring behind gets the screen instead of the lost bytes (the host keeps
            // draining the PTY): only delivered bytes count.
            Some("pane.snapshot") => {
                eprintln!("note: the sidecar's seq run {i} fell a ring behind (a snapshot)");
            }
            Some("pane.exited") => return bytes,
            other => panic!("unexpected {other:?} in a benchmark"),
        }
    }
}

fn sidecar_echo(app: &mut Sidecar) -> Vec<Duration> {
    let r = app
        .call(
            "pane.open",
            json!({"host": "h1", "pane": pane_json("echo", "0"),
                                  "command": ["cat"]}),
        )
        .unwrap();
    let binding = r["binding"].clone();
    let pty = binding["pty"].clone();
    let mut samples = Vec::new();
    for _ in 0..runs(LATENCY_RUNS) {
        let t = Instant::now();
        app.notify("pane.input", json!({"binding": binding, "data": b64(b"e")}));
        loop {
            let m = app.take("echo", |m| {
                m["method"] == "pane.output" && m["params"]["binding"]["pty"] == pty
            });
            let data = unb64(m["params"]["data"].as_str().unwrap());
            let next = m["params"]["offset"].as_u64().unwrap() + data.len() as u64;
            app.notify("pane.ack", json!({"binding": binding, "offset": next}));
            if data.contains(&b'e') {
                break;
            }
        }
        samples.push(t.elapsed());
    }
    samples
}
