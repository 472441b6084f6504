//! `relay serve --stdio` under a buggy or hostile app (docs/embedding.md, "Limits"): a flood
//! of calls is refused `busy` instead of queued, so memory stays bounded and keystrokes are not
//! held up behind it; a call still waiting when the app quits is answered; shapes that would
//! be misread (ids beyond 64 bits, a request that is also an answer, stray fields in a pane
//! key or binding, bidirectional formatting characters) are refused.

use std::io::Write;
use std::time::{Duration, Instant};

use relay_tests::sidecar::{b64, Sidecar};
use relay_tests::TestHome;
use serde_json::{json, Value};

fn pane(ws: &str, tab: &str) -> Value {
    json!({"workspace": ws, "tab": tab, "leaf": "0"})
}

fn open(app: &mut Sidecar, host: &str, ws: &str, tab: &str, command: &[&str]) -> Value {
    let r = app
        .call(
            "pane.open",
            json!({"host": host, "pane": pane(ws, tab), "command": command}),
        )
        .unwrap();
    r["binding"].clone()
}

/// Types `echo WORD-$((n+1))` and returns how long the answer `WORD-<n+1>` took to appear.
fn echo(app: &mut Sidecar, binding: &Value, word: &str, n: u32) -> Duration {
    let started = Instant::now();
    let line = format!("echo {word}-$(({n}+1))\n");
    app.notify(
        "pane.input",
        json!({"binding": binding, "data": b64(line.as_bytes())}),
    );
    app.read_until(binding, &format!("{word}-{}", n + 1));
    started.elapsed()
}

/// `(peak, now)` resident memory of `pid` in KiB (`VmHWM`, `VmRSS` of /proc/PID/status).
fn memory_kib(pid: u32) -> (u64, u64) {
    let usage = relay_tests::usage::Usage::of(pid).unwrap();
    (usage.peak_kib, usage.rss_kib)
}

/// A hostile app writes 60,000 `workspace.hydrate` calls without waiting for any answer (before
/// the limit it started a task per line: 100,000 such calls took the sidecar from 10 MB to
/// 855 MB, and a keystroke typed meanwhile waited seconds behind the hydrates queued at the
/// agent). Now every call is answered — a list, or `busy` — the sidecar's peak memory stays
/// under 128 MiB, and a keystroke typed in the middle of the flood is echoed within 2 s: it
/// waits behind at most 4 lease lists at the agent, each of a workspace with 100 ended leases
/// (0.6 s at most here in a debug build; 6.5 s with every admitted list sent at once).
#[test]
fn a_flood_of_calls_is_answered_busy_memory_stays_bounded_and_keystrokes_pass() {
    const FLOOD: usize = 60_000;
    let home = TestHome::new();
    let mut app = Sidecar::local(&home);
    let host = app.open_local();
    for i in 0..100 {
        let gone = open(&mut app, &host, "w", &format!("t{i}"), &["true"]);
        app.notification("pane.exited", gone["pty"].as_str());
    }
    let shell = open(&mut app, &host, "w", "shell", &["sh", "-i"]);
    let idle = (0..3).map(|n| echo(&mut app, &shell, "idle", n)).min();
    let (base_kib, _) = memory_kib(app.pid());

    let mut flood_in = app.stdin_clone();
    let host_id = host.clone();
    let writer = std::thread::spawn(move || {
        for i in 0..FLOOD {
            let line = json!({"jsonrpc": "2.0", "id": format!("f{i}"),
                              "method": "workspace.hydrate",
                              "params": {"host": host_id, "workspace": "w"}});
            let mut line = line.to_string().into_bytes();
            line.push(b'\n');
            flood_in.write_all(&line).expect("writing the flood");
        }
    });
    // Typed while the flood is being written (each line is one atomic pipe write).
    let mut during = Vec::new();
    let mut answers = 0;
    while !writer.is_finished() || during.is_empty() {
        let n = during.len() as u32;
        during.push(echo(&mut app, &shell, "busy", n));
        answers = answers.max(count_flood_answers(&mut app));
    }
    writer.join().unwrap();
    assert!(
        answers > 0,
        "the keystrokes were typed while the flood was being answered"
    );

    let (mut listed, mut busy) = (0, 0);
    let mut seen = std::collections::HashSet::new();
    while seen.len() < FLOOD {
        let m = app.take("an answer to a flood call", is_flood_answer);
        let id = m["id"].as_str().unwrap().to_string();
        assert!(seen.insert(id.clone()), "{id} answered twice");
        match m.get("error") {
            None => {
                assert!(m["result"]["panes"].is_array(), "{m}");
                listed += 1;
            }
            Some(e) => {
                assert_eq!(e["data"]["code"], "busy", "{e}");
                assert_eq!(e["data"]["transient"], true, "{e}");
                busy += 1;
            }
        }
    }
    let (peak_kib, now_kib) = memory_kib(app.pid());
    let slowest = during.iter().max().unwrap();
    eprintln!(
        "flood of {FLOOD}: {listed} listed, {busy} busy; memory {base_kib} KiB before, peak \
         {peak_kib} KiB, {now_kib} KiB after; echo idle {idle:?}, during the flood {} \
         keystrokes, slowest {slowest:?}",
        during.len()
    );
    assert_eq!(listed + busy, FLOOD, "every call answered once");
    assert!(busy > 0, "a flood this size goes over the limit of 256");
    assert!(listed > 0, "calls within the limit are carried out");
    assert!(
        peak_kib < 128 * 1024,
        "peak memory {peak_kib} KiB during the flood"
    );
    assert!(
        *slowest < Duration::from_secs(2),
        "a keystroke typed during the flood took {slowest:?} (idle: {idle:?})"
    );
    // Nothing was lost meanwhile: the shell still answers.
    echo(&mut app, &shell, "after", 7);
}

/// Flood answers read so far (without waiting).
fn count_flood_answers(app: &mut Sidecar) -> usize {
    app.count_read(|m| is_flood_answer(m))
}

/// An answer to one of the flood's calls (ids `f0`, `f1`, …).
fn is_flood_answer(m: &Value) -> bool {
    m.get("method").is_none() && m["id"].as_str().is_some_and(|id| id.starts_with('f'))
}

/// An app that floods calls and stops reading stdout feels it on its own pipe: once the
/// answers waiting for it fill the sidecar's queue, the sidecar stops reading stdin, so the
/// app's writes block, and the sidecar's memory stays flat (before the bounds, 1.38 GB for
/// 100,000 hydrates). When the app reads again, every call is answered.
#[test]
fn an_app_that_stops_reading_is_held_back_on_its_own_pipe() {
    use std::io::{BufRead, BufReader};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    const FLOOD: usize = 100_000;
    let home = TestHome::new();
    let mut child = home
        .command(&relay_tests::bins().relay)
        .args(["serve", "--stdio"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let guard = KillOnDrop(&mut child);
    let mut stdin = guard.0.stdin.take().unwrap();
    let stdout = guard.0.stdout.take().unwrap();
    let pid = guard.0.id();
    let written = Arc::new(AtomicUsize::new(0));
    let counter = written.clone();
    let writer = std::thread::spawn(move || {
        let open = json!({"jsonrpc": "2.0", "id": "open", "method": "host.open",
                          "params": {"destination": "local"}});
        stdin.write_all(format!("{open}\n").as_bytes()).unwrap();
        for i in 0..FLOOD {
            let line = json!({"jsonrpc": "2.0", "id": i, "method": "workspace.hydrate",
                              "params": {"host": "h1", "workspace": "w"}});
            stdin.write_all(format!("{line}\n").as_bytes()).unwrap();
            counter.store(i + 1, Ordering::Relaxed);
        }
    });
    // Held back: the count of lines written stops growing well before the end.
    let mut last = usize::MAX;
    let held = relay_tests::eventually("the app's writes to be held back", || {
        std::thread::sleep(Duration::from_millis(500));
        let now = written.load(Ordering::Relaxed);
        let still = now == last;
        last = now;
        still.then_some(now)
    });
    let (peak_kib, _) = memory_kib(pid);
    eprintln!("held back after {held} of {FLOOD} lines; peak {peak_kib} KiB");
    assert!(held < FLOOD / 2, "held back only after {held} lines");
    assert!(peak_kib < 64 * 1024, "peak memory {peak_kib} KiB");

    // Reading again: every call answered, once.
    let mut answered = std::collections::HashSet::new();
    for line in BufReader::new(stdout).lines() {
        let m: Value = serde_json::from_str(&line.unwrap()).unwrap();
        if let Some(id) = m["id"].as_u64() {
            assert!(answered.insert(id), "{id} answered twice");
            if answered.len() == FLOOD {
                break;
            }
        }
    }
    writer.join().unwrap();
    assert_eq!(answered.len(), FLOOD);
}

/// Kills the child when the test ends, however it ends.
struct KillOnDrop<'a>(&'a mut std::process::Child);

impl Drop for KillOnDrop<'_> {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Large calls are bounded by the bytes of their lines: 16 `workspace.kill_all` calls of
/// ~3 MB each (30,000 bindings), sent at a host that never answers so none of them finishes
/// soon. Each held ~60 MB of parsed parameters while it waited; before the bounds the sidecar
/// took them all (~1 GB). Now one runs at a time, the rest are answered `busy`, a waiting call
/// holds its bindings but not their JSON tree, the sidecar's peak memory stays under 128 MiB,
/// and what it parsed is given back (under 48 MiB once the calls are answered; 117 MiB before
/// `malloc_trim`).
#[test]
fn large_calls_at_a_host_that_never_answers_are_bounded_by_their_bytes() {
    const CALLS: usize = 16;
    let home = TestHome::new();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let (mut app, host) = open_silent_host(&home, &listener);
    let bindings: Vec<Value> = (0..30_000)
        .map(|i| {
            json!({"host": host, "pane": pane("w", &format!("t{i}")),
                   "pty": format!("00000000000000ab.{i}")})
        })
        .collect();
    let mut ids = Vec::new();
    for _ in 0..CALLS {
        ids.push(app.request(
            "workspace.kill_all",
            json!({"host": host, "panes": bindings, "timeout_ms": 4_000}),
        ));
    }
    let mut busy = 0;
    for id in &ids {
        let e = app.answer(&json!(id)).unwrap_err();
        match e["data"]["code"].as_str() {
            Some("busy") => busy += 1,
            Some("timeout") => {}
            _ => panic!("{e}"),
        }
    }
    let (peak_kib, now_kib) = memory_kib(app.pid());
    eprintln!(
        "{CALLS} kill_all calls of ~3 MB: {busy} busy; peak {peak_kib} KiB, {now_kib} KiB after"
    );
    assert!(busy >= CALLS / 2, "{busy} of {CALLS} refused");
    assert!(peak_kib < 128 * 1024, "peak memory {peak_kib} KiB");
    assert!(
        now_kib < 48 * 1024,
        "memory kept after the calls: {now_kib} KiB"
    );
}

/// A sidecar with one host open: an SSH destination whose address is `listener`, which
/// accepts and never speaks. Returns the sidecar and the host id.
fn open_silent_host(home: &TestHome, listener: &std::net::TcpListener) -> (Sidecar, String) {
    let config = home.path().join("ssh_config");
    let port = listener.local_addr().unwrap().port();
    std::fs::write(
        &config,
        format!("Host silent\n  HostName 127.0.0.1\n  Port {port}\n  User nobody\n"),
    )
    .unwrap();
    let mut app = Sidecar::local(home);
    let r = app
        .call(
            "host.open",
            json!({"destination": "silent", "ssh_config": config}),
        )
        .unwrap();
    (app, r["host"].as_str().unwrap().to_string())
}

/// The app quits while a call waits on a host that never answers (a listener that accepts and
/// stays silent): the call is answered with `timeout` within the exit grace (5 s), not dropped,
/// and the sidecar exits 0.
#[test]
fn a_call_still_waiting_when_the_app_quits_is_answered_with_a_timeout() {
    let home = TestHome::new();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let (mut app, host) = open_silent_host(&home, &listener);
    let id = app.request(
        "workspace.hydrate",
        json!({"host": host, "workspace": "w", "timeout_ms": 120_000}),
    );
    // Held by the silent listener, not refused.
    let (_held, _) = listener.accept().unwrap();
    let quit = Instant::now();
    app.close_stdin();
    let e = app.answer(&json!(id)).unwrap_err();
    assert_eq!(e["data"]["code"], "timeout", "{e}");
    assert!(e["message"].as_str().unwrap().contains("exiting"), "{e}");
    let answered = quit.elapsed();
    assert_eq!(app.wait_exit(), Some(0));
    assert!(
        answered >= Duration::from_secs(4),
        "answered after the grace, not before: {answered:?}"
    );
}

/// Shapes an app could send by mistake, or to confuse another reader, are refused with a coded
/// error and change nothing: numeric ids beyond 64 bits (they would come back as a float), a
/// line that is both a request and an answer, unknown fields inside a pane key or a binding,
/// and pane keys holding a right-to-left override. An attach without `resume_from` counts the
/// bytes its snapshot stands for as `lost`.
#[test]
fn misleading_shapes_are_refused_and_lost_counts_what_a_snapshot_stands_for() {
    let home = TestHome::new();
    let mut app = Sidecar::local(&home);
    let host = app.open_local();
    let shell = open(&mut app, &host, "w", "a", &["sh", "-i"]);
    echo(&mut app, &shell, "ready", 1);

    app.send_line(br#"{"jsonrpc":"2.0","id":18446744073709551616,"method":"host.retry","params":{"host":"h1"}}"#);
    let e = app.answer(&Value::Null).unwrap_err();
    assert_eq!(e["data"]["code"], "invalid_request", "{e}");
    assert!(e["message"].as_str().unwrap().contains("64 bits"), "{e}");
    app.send_line(br#"{"jsonrpc":"2.0","id":18446744073709551615,"method":"host.retry","params":{"host":"h1"}}"#);
    assert_eq!(app.answer(&json!(u64::MAX)), Ok(json!({})));

    let kill = json!({"jsonrpc": "2.0", "id": 77, "method": "pane.kill",
                      "params": {"binding": shell}, "result": {}});
    app.send_line(kill.to_string().as_bytes());
    let e = app.answer(&json!(77)).unwrap_err();
    assert_eq!(e["data"]["code"], "invalid_request", "{e}");

    // JSON that only a full read refuses (a lone surrogate) is a parse error, not a call.
    app.send_line(br#"{"jsonrpc":"2.0","id":78,"method":"pane.open","params":{"host":"\ud800"}}"#);
    let e = app.answer(&json!(78)).unwrap_err();
    assert_eq!(e["data"]["code"], "parse_error", "{e}");

    let mut stray = shell.clone();
    stray["pane"]["pty"] = json!("someone else's");
    let e = app
        .call("pane.signal", json!({"binding": stray, "signal": "INT"}))
        .unwrap_err();
    assert_eq!(e["data"]["code"], "invalid_params", "{e}");
    assert!(e["message"].as_str().unwrap().contains("pty"), "{e}");
    let mut extra = shell.clone();
    extra["note"] = json!(1);
    let e = app
        .call("pane.signal", json!({"binding": extra, "signal": "INT"}))
        .unwrap_err();
    assert!(e["message"].as_str().unwrap().contains("note"), "{e}");

    let spoof = json!({"workspace": "w", "tab": "main\u{202e}gol.exe", "leaf": "0"});
    let e = app
        .call("pane.open", json!({"host": host, "pane": spoof}))
        .unwrap_err();
    assert_eq!(e["data"]["code"], "invalid_params", "{e}");
    assert!(e["message"].as_str().unwrap().contains("U+202E"), "{e}");
    let e = app
        .call(
            "workspace.hydrate",
            json!({"host": host, "workspace": "w\u{2066}"}),
        )
        .unwrap_err();
    assert_eq!(e["data"]["code"], "invalid_params", "{e}");
    let rows = app
        .call("workspace.hydrate", json!({"host": host, "workspace": "w"}))
        .unwrap();
    assert_eq!(rows["panes"].as_array().unwrap().len(), 1, "{rows}");

    // The shell lived through all of it; an attach without `resume_from` starts with a
    // snapshot that stands for every byte before `replay_from`.
    echo(&mut app, &shell, "still", 2);
    let attached = app
        .call(
            "pane.attach",
            json!({"host": host, "pane": shell["pane"], "pty": shell["pty"]}),
        )
        .unwrap();
    let replay_from = attached["replay_from"].as_u64().unwrap();
    assert!(replay_from > 0, "{attached}");
    assert_eq!(attached["lost"].as_u64(), Some(replay_from), "{attached}");
}
