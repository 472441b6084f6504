//! End-to-end tests of the connector library, `relay` and `relayctl` against a real
//! `relay-agent` daemon and real shells, over the local transport.
//!
//! Run `cargo build --workspace --bins` first. Each test has its own `RELAY_HOME` and daemon.
//! Time bounds are generous liveness bounds, not performance measurements.

// Topic modules live next to this file in `local/`.
mod host;
mod host_away;
mod liveness;
mod lossless;
mod messages;
mod piped_run;
mod relayctl;
mod restore;
mod scale;
mod screen;
mod serve;
mod serve_hostile;
mod upgrade;
mod upgrade_faults;
mod upgrade_ids;
mod upgrade_limit;

use std::io::Write;
use std::path::Path;
use std::process::Stdio;

use relay_connector::{Error, PaneEvent, Session};
use relay_protocol::{ErrorReply, PaneKey, SpawnSpec};
use relay_tests::{bins, eventually, read_until, read_until_text, Collected, TestHome, LIVENESS};

use relay_tests::pty_run::PtyRun;

fn sh(script: &str) -> SpawnSpec {
    SpawnSpec {
        command: vec!["sh".into(), "-c".into(), script.into()],
        ..SpawnSpec::default()
    }
}

/// A line-echoing shell loop: prints `start`, then `got:<line>` for every input line.
const ECHO_LOOP: &str = "echo start; while read l; do echo \"got:$l\"; done";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_arrives_in_order_with_offsets_and_exit_status() {
    let home = TestHome::new();
    let session = home.session().await;
    let pane = PaneKey::new("w", "order", "0");
    // No wait for a go-ahead: open subscribes before the script can finish.
    let script = "i=0; while [ $i -lt 200 ]; do echo line-$i; i=$((i+1)); done; exit 3";
    let (created, mut handle) = session
        .open(pane.clone(), sh(script), Some(0))
        .await
        .unwrap();
    assert!(!created.existed);
    assert_eq!(handle.binding(), &created.binding);
    let mut got = Collected::default();
    read_until(&mut handle, &mut got, LIVENESS, |c| c.exit.is_some())
        .await
        .unwrap();
    assert_eq!(got.start, Some(0), "replay from 0 starts at offset 0");
    assert!(got.gaps.is_empty(), "{:?}", got.gaps);
    let text = got.text();
    let lines: Vec<&str> = text.lines().map(str::trim_end).collect();
    let expected: Vec<String> = (0..200).map(|i| format!("line-{i}")).collect();
    assert_eq!(lines, expected, "every line, in order");
    assert_eq!(got.exit, Some((3, None)));
    assert_eq!(handle.next().await, None, "the stream ends after the exit");
}

/// A command that ends within milliseconds: `open` delivers its whole output and exit code,
/// every time (create then attach may find the pane already ended, rule B). On a live pane,
/// `open` attaches without spawning.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_on_a_quick_command_gets_its_whole_output_and_exit_code() {
    let home = TestHome::new();
    let session = home.session().await;
    for i in 0..10 {
        let pane = PaneKey::new("w", "quick", i.to_string());
        let (created, mut handle) = session
            .open(pane, sh("printf quick-output; exit 7"), Some(0))
            .await
            .unwrap();
        assert!(!created.existed, "round {i}");
        let mut got = Collected::default();
        read_until(&mut handle, &mut got, LIVENESS, |c| c.exit.is_some())
            .await
            .unwrap();
        assert_eq!(got.start, Some(0), "round {i}");
        assert_eq!(got.text(), "quick-output", "round {i}");
        assert_eq!(got.exit, Some((7, None)), "round {i}");
    }

    let pane = PaneKey::new("w", "quick", "live");
    let first = session.create(pane.clone(), sh("exec cat")).await.unwrap();
    let (again, handle) = session
        .open(pane, sh("printf never-run"), Some(0))
        .await
        .unwrap();
    assert!(
        again.existed,
        "a live PTY is attached, not respawned (rule D)"
    );
    assert_eq!(again.binding, first.binding);
    assert_eq!(handle.binding(), &first.binding);
    let live: Vec<_> = session
        .list_leases()
        .await
        .unwrap()
        .into_iter()
        .filter(|l| l.binding.pane.leaf == "live")
        .collect();
    assert_eq!(live.len(), 1, "one lease for the live pane");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_is_idempotent_for_a_live_pane() {
    let home = TestHome::new();
    let session = home.session().await;
    let pane = PaneKey::new("w", "idem", "0");
    let first = session.create(pane.clone(), sh("exec cat")).await.unwrap();
    let second = session.create(pane.clone(), sh("exec cat")).await.unwrap();
    assert!(second.existed, "no second shell for a live pane (rule D)");
    assert_eq!(second.binding, first.binding);
    assert_eq!(session.list_leases().await.unwrap().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reattach_with_resume_from_replays_exactly_the_missing_bytes() {
    let home = TestHome::new();
    let session = home.session().await;
    let pane = PaneKey::new("w", "resume", "0");
    let binding = session
        .create(pane.clone(), sh(ECHO_LOOP))
        .await
        .unwrap()
        .binding;

    let mut first = session.attach(pane.clone(), None, Some(0)).await.unwrap();
    let mut seen = Collected::default();
    read_until_text(&mut first, &mut seen, "start")
        .await
        .unwrap();
    session.input(&binding, b"one\n").await.unwrap();
    read_until_text(&mut first, &mut seen, "got:one")
        .await
        .unwrap();
    let resume = first.next_offset();
    assert_eq!(resume, seen.end);
    drop(first);

    // Output produced while nobody is attached.
    session.input(&binding, b"two\n").await.unwrap();

    let mut second = session
        .attach(pane.clone(), Some(binding.pty), Some(resume))
        .await
        .unwrap();
    assert_eq!(second.attached().replay_from, resume);
    assert_eq!(second.attached().lost, 0);
    let mut missed = Collected::default();
    read_until_text(&mut second, &mut missed, "got:two")
        .await
        .unwrap();
    assert_eq!(
        missed.start,
        Some(resume),
        "replay starts where we left off"
    );
    drop(second);

    // The full stream, from a third attach, is exactly the first part followed by the replay.
    let mut full_handle = session.attach(pane, None, Some(0)).await.unwrap();
    let mut full = Collected::default();
    let want = missed.end;
    read_until(&mut full_handle, &mut full, LIVENESS, |c| c.end >= want)
        .await
        .unwrap();
    assert_eq!(&full.data[..resume as usize], &seen.data[..]);
    assert_eq!(&full.data[resume as usize..want as usize], &missed.data[..]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attach_to_an_unknown_pane_is_not_found_and_spawns_nothing() {
    let home = TestHome::new();
    let session = home.session().await;
    let pane = PaneKey::new("w", "never-created", "0");
    let err = session
        .attach(pane.clone(), None, Some(0))
        .await
        .unwrap_err();
    assert!(
        matches!(err.agent_reply(), Some(ErrorReply::NotFound { pane: p }) if *p == pane),
        "{err}"
    );
    assert!(session.list_leases().await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn input_with_a_stale_binding_is_rejected_with_mismatch() {
    let home = TestHome::new();
    let session = home.session().await;
    let pane = PaneKey::new("w", "stale", "0");
    let old = session
        .create(pane.clone(), sh("exec cat"))
        .await
        .unwrap()
        .binding;
    let mut h = session.attach(pane.clone(), None, None).await.unwrap();
    session.kill(&old).await.unwrap();
    let mut got = Collected::default();
    read_until(&mut h, &mut got, LIVENESS, |c| c.exit.is_some())
        .await
        .unwrap();

    let new = session
        .create(pane.clone(), sh("exec cat"))
        .await
        .unwrap()
        .binding;
    assert_ne!(new.pty, old.pty, "a new PTY incarnation");
    let err = session
        .input(&old, b"to the old shell\n")
        .await
        .unwrap_err();
    match err.agent_reply() {
        Some(ErrorReply::Mismatch {
            expected, current, ..
        }) => {
            assert_eq!(*expected, old.pty);
            assert_eq!(*current, Some(new.pty));
        }
        _ => panic!("expected Mismatch, got {err}"),
    }
    let err = session
        .attach(pane.clone(), Some(old.pty), Some(0))
        .await
        .unwrap_err();
    assert!(err.is_mismatch(), "{err}");
    session.input(&new, b"fresh\n").await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_session_leaves_the_shell_running_and_detached() {
    let home = TestHome::new();
    let pane = PaneKey::new("w", "survivor", "0");
    let pid = {
        let session = home.session().await;
        session
            .create(pane.clone(), sh("echo pid=$$; exec sleep 600"))
            .await
            .unwrap();
        let mut h = session.attach(pane.clone(), None, Some(0)).await.unwrap();
        let mut got = Collected::default();
        read_until(&mut h, &mut got, LIVENESS, |c| {
            c.text().contains("pid=") && c.text().contains('\n')
        })
        .await
        .unwrap();
        let text = got.text();
        let pid: u32 = text
            .split("pid=")
            .nth(1)
            .and_then(|s| s.split_whitespace().next())
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("no pid in {text:?}"));
        pid
        // Handle and session dropped here: the connection (and the bridge) go away.
    };
    let lease = tokio::task::spawn_blocking(move || {
        let lease = eventually("the lease to become detached", || {
            let leases = home.leases_json();
            assert_eq!(leases.len(), 1, "{leases:?}");
            (leases[0]["state"] == "detached").then(|| leases[0].clone())
        });
        let alive = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), None);
        assert!(
            alive.is_ok(),
            "shell {pid} must still run after the connection dropped"
        );
        lease
    })
    .await
    .unwrap();
    assert_eq!(lease["pid"], pid, "{lease}");
    assert_eq!(lease["pane"]["tab"], "survivor");
    assert_eq!(lease["attached"], 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_consumer_does_not_stall_another_pane() {
    let window = 64 * 1024;
    let home = TestHome::with_env(&[("RELAY_WINDOW_BYTES", &window.to_string())]);
    let session = home.session().await;
    let flood = PaneKey::new("w", "flood", "0");
    let echo = PaneKey::new("w", "echo", "0");
    // Created and subscribed in one step, so the flood's first bytes are still in the ring.
    let (_, mut flood_handle) = session
        .open(flood.clone(), sh("exec yes"), Some(0))
        .await
        .unwrap();
    // Nobody reads the flood for a while.
    let echo_binding = session
        .create(echo.clone(), sh(ECHO_LOOP))
        .await
        .unwrap()
        .binding;
    let mut echo_handle = session.attach(echo, None, Some(0)).await.unwrap();
    let mut got = Collected::default();
    read_until_text(&mut echo_handle, &mut got, "start")
        .await
        .unwrap();
    for i in 0..5 {
        let line = format!("ping-{i}\n");
        session.input(&echo_binding, line.as_bytes()).await.unwrap();
        read_until_text(&mut echo_handle, &mut got, &format!("got:ping-{i}"))
            .await
            .unwrap();
    }
    // The flood was throttled, not broken: reading it now keeps delivering far beyond one
    // window, because consumption returns credit.
    let mut flooded = Collected::default();
    read_until(&mut flood_handle, &mut flooded, LIVENESS, |c| {
        c.data.len() as u64 >= 8 * window
    })
    .await
    .unwrap();
    assert!(flooded.text().starts_with("y\r\ny\r\n"));
    session.kill(flood_handle.binding()).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shell_banner_before_the_welcome_gives_a_clear_hint() {
    let home = TestHome::new();
    let wrapper = home.path().join("noisy-agent");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\necho 'Welcome to the machine!'\nexec '{}' \"$@\"\n",
            bins().agent.display()
        ),
    )
    .unwrap();
    set_executable(&wrapper);
    // A test thread that forks between our write and close of the script holds it open for
    // writing until its child execs, and exec then fails with ETXTBSY: try again briefly.
    let mut tries = 0;
    let err = loop {
        let err = Session::connect(&home.transport_with(&wrapper), "t")
            .await
            .unwrap_err();
        tries += 1;
        // The spawn failure's cause is its source: the report shows it.
        if !err.report().contains("Text file busy") || tries == 20 {
            break err;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    assert!(matches!(err, Error::Handshake(_)), "{err}");
    assert!(
        err.to_string().contains("check your shell startup output"),
        "{err}"
    );
}

fn set_executable(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn relay_attach_to_a_missing_pane_fails_clearly_and_creates_nothing() {
    let home = TestHome::new();
    let out = home
        .command(&bins().relay)
        .args(["attach", "--local", "--workspace", "w", "--pane", "nope"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "stderr: {stderr}");
    assert!(stderr.contains("no pane w/nope/0"), "{stderr}");
    assert!(stderr.contains("relay shell"), "{stderr}");
    assert!(
        home.leases_json().is_empty(),
        "attach never creates (rule B)"
    );
}

#[test]
fn relay_shell_with_piped_stdin_runs_commands_and_returns_the_exit_code() {
    let home = TestHome::new();
    let mut child = home
        .command(&bins().relay)
        .args(["shell", "--local", "--pane", "piped"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"echo piped-$((40+2))\nexit 5\n")
        .unwrap();
    let out = wait_output(child);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("piped-42"), "{stdout}");
    assert_eq!(
        out.status.code(),
        Some(5),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn wait_output(child: std::process::Child) -> std::process::Output {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    rx.recv_timeout(LIVENESS)
        .expect("relay did not exit in time")
        .unwrap()
}

#[test]
fn relay_shell_detaches_with_tilde_dot_and_reattaches_with_replay() {
    let home = TestHome::new();
    let args = ["shell", "--local", "--workspace", "w", "--pane", "tty"];

    let mut first = PtyRun::spawn(&home, &args);
    first.type_text("echo marker-$((6*7))-zz\r");
    first.wait_for("marker-42-zz");
    first.type_text("\r~.");
    assert_eq!(first.wait_exit(), 0, "detach exits 0: {}", first.screen());
    assert!(first.screen().contains("[detached from pane w/tty/0"));

    // The shell keeps running; the lease turns detached once the agent has seen the detach
    // (or the dropped connection).
    let leases = eventually("the lease to turn detached", || {
        let leases = home.leases_json();
        (leases.len() == 1 && leases[0]["state"] == "detached").then_some(leases)
    });
    assert_eq!(leases[0]["pane"]["leaf"], "0", "{leases:?}");

    let mut second = PtyRun::spawn(&home, &args);
    second.wait_for("marker-42-zz"); // replayed from the agent's ring
    second.type_text("exit 7\r");
    assert_eq!(second.wait_exit(), 7, "{}", second.screen());
    let leases = home.leases_json();
    assert_eq!(leases[0]["state"], "ended");
    assert_eq!(leases[0]["exit"]["code"], 7);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pane_events_after_detach_end_the_stream() {
    let home = TestHome::new();
    let session = home.session().await;
    let pane = PaneKey::new("w", "detach", "0");
    session.create(pane.clone(), sh(ECHO_LOOP)).await.unwrap();
    let mut h = session.attach(pane.clone(), None, Some(0)).await.unwrap();
    let binding = h.binding().clone();
    let mut got = Collected::default();
    read_until_text(&mut h, &mut got, "start").await.unwrap();
    session.detach(&binding).await.unwrap();
    let rest = tokio::time::timeout(LIVENESS, async {
        let mut n = 0;
        while let Some(ev) = h.next().await {
            assert!(
                !matches!(ev, PaneEvent::Exited { .. }),
                "detach does not end the PTY"
            );
            n += 1;
        }
        n
    })
    .await
    .expect("the stream ends after detach");
    assert!(rest < 10);
    let leases = session.list_leases().await.unwrap();
    assert_eq!(leases[0].state, relay_protocol::LeaseState::Detached);
}
