//! The journal across daemon restarts and failures: torn lines, a full disk, PTY processes that
//! outlive a killed daemon, graceful stops, and private state files.

use std::fs;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use relay_protocol::message::Create;
use relay_protocol::{EndReason, ErrorReply, LeaseState, Request, Response};

use crate::support::{alive, contains, pane, pids_with, spec, wait_until, Home, WAIT};

pub(crate) fn signal_and_wait(pid: u32, sig: Signal) {
    kill(Pid::from_raw(pid as i32), sig).unwrap();
    assert!(
        wait_until(WAIT, || !alive(pid)),
        "pid {pid} ended after {sig}"
    );
}

pub(crate) fn journal(home: &Home) -> PathBuf {
    home.path().join("state/leases.journal")
}

/// Regression: a journal line cut inside a multi-byte UTF-8 character (kill -9 mid-append) made
/// every later daemon start fail with "stream did not contain valid UTF-8". The line is skipped
/// and logged with its number; the lease before it is still reported.
#[test]
fn torn_utf8_journal_line_does_not_stop_the_daemon() {
    let home = Home::new();
    home.start_daemon();
    let mut c = home.client();
    let b = c
        .create(&pane("wörk-é"), &["sh", "-c", "sleep 1000"])
        .binding;
    let daemon = c.status().pid;
    drop(c);
    signal_and_wait(daemon, Signal::SIGKILL);
    let mut bytes = fs::read(journal(&home)).unwrap();
    let cut = bytes.iter().position(|&b| b == 0xc3).unwrap() + 1;
    let torn = bytes[..cut].to_vec();
    bytes.extend(torn);
    fs::write(journal(&home), bytes).unwrap();

    home.start_daemon();
    let mut c = home.client();
    let lease = c.lease(b.pty);
    assert_eq!(lease.state, LeaseState::Ended);
    assert_eq!(lease.reason, Some(EndReason::AgentRestarted));
    assert!(home.wait_log("line 2: skipped"), "{}", home.log());
}

/// A tmpfs mounted for one test, lazily unmounted when dropped.
pub(crate) struct Tmpfs(PathBuf);

impl Tmpfs {
    /// Mounts a tmpfs of `size` at `at`; `None` when not root or mounting fails.
    pub(crate) fn mount(at: &Path, size: &str) -> Option<Tmpfs> {
        if !nix::unistd::geteuid().is_root() {
            return None;
        }
        let status = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0700"),
                "tmpfs",
            ])
            .arg(at)
            .status();
        status.is_ok_and(|s| s.success()).then(|| Tmpfs(at.into()))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// Regression: on a full disk Create still succeeded (the journal error was only logged), a
/// partial line stayed in the journal and the next record was glued onto it, so leases were lost
/// after a restart. Now the create fails naming the journal, the OS error and the fix, the
/// spawned process is ended, the journal keeps only whole lines, and after space is freed the
/// next create is recorded and survives a restart.
///
/// Needs root to mount a small tmpfs on `state/`; otherwise it checks
/// nothing and says so (`relay_testkit::skip`: a failure under `RELAY_TESTS_REQUIRE_PRIVILEGED=1`).
#[test]
fn full_disk_fails_create_cleanly_and_keeps_the_journal_whole() {
    let home = Home::new();
    let state = home.path().join("state");
    fs::create_dir_all(&state).unwrap();
    let Some(_tmpfs) = Tmpfs::mount(&state, "256k") else {
        relay_testkit::skip(
            "full_disk_fails_create_cleanly_and_keeps_the_journal_whole",
            "root and a mountable tmpfs",
        );
        return;
    };
    home.start_daemon();
    let mut c = home.client();
    let kept = c.create(&pane("kept"), &["sh", "-c", "sleep 1000"]).binding;

    let filler = state.join("filler");
    let mut f = fs::File::create(&filler).unwrap();
    while f.write_all(&[0u8; 4096]).is_ok() {}
    drop(f);
    // Longer than what is left in the journal's last page, so the write is cut part-way.
    let token = format!("relay-full-disk-{}", std::process::id());
    let script = format!("while :; do sleep 1; done # {token} {}", "x".repeat(8000));
    let req = Create {
        pane: pane("refused"),
        spec: spec(&["sh", "-c", &script]),
    };
    match c.request(Request::Create(req)) {
        Response::Error(ErrorReply::SpawnFailed { message }) => {
            for part in [
                "nothing was started",
                "leases.journal",
                "No space left on device",
                "free disk space in",
            ] {
                assert!(message.contains(part), "{part:?} missing in: {message}");
            }
        }
        other => panic!("expected SpawnFailed, got {other:?}"),
    }
    assert!(
        pids_with(&token).is_empty(),
        "the unrecorded process was ended"
    );
    assert!(c.leases().iter().all(|l| l.binding.pane.leaf != "refused"));
    let text = fs::read(journal(&home)).unwrap();
    for line in text.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        assert!(
            serde_json::from_slice::<serde_json::Value>(line).is_ok(),
            "partial line left in the journal: {}",
            String::from_utf8_lossy(&line[..line.len().min(120)])
        );
    }

    fs::remove_file(&filler).unwrap();
    let after = c
        .create(&pane("after"), &["sh", "-c", "sleep 1000"])
        .binding;
    let daemon = c.status().pid;
    drop(c);
    signal_and_wait(daemon, Signal::SIGTERM);
    home.start_daemon();
    let mut c = home.client();
    for b in [&kept, &after] {
        let lease = c.lease(b.pty);
        assert_eq!(lease.state, LeaseState::Ended, "{b}");
        assert_eq!(lease.reason, Some(EndReason::AgentRestarted), "{b}");
    }
    let starts = || home.log().matches("daemon starting").count();
    assert!(wait_until(WAIT, || starts() == 2), "{}", home.log());
    let log = home.log();
    let second_start = log
        .lines()
        .filter(|l| l.contains("daemon starting"))
        .nth(1)
        .unwrap();
    assert!(
        second_start.contains("skipped=0"),
        "no unreadable journal line: {second_start}"
    );
}

/// Regression: after the daemon was SIGKILLed, a PTY child that ignores SIGHUP kept running,
/// yet the next daemon reported its lease "ended (agent restarted)" — proven dead, which was a
/// lie. The next daemon now ends such an orphan (identified by pid and start time) before it
/// reports the lease as ended.
#[test]
fn orphan_ignoring_sighup_is_ended_before_its_lease_is_reported_ended() {
    let home = Home::new();
    let (mut bridge, mut c) = home.bridge();
    let b = c
        .create(
            &pane("nohup"),
            &[
                "sh",
                "-c",
                "trap '' HUP; echo trap-set; while :; do sleep 1; done",
            ],
        )
        .binding;
    // The daemon must not die before the shell has run `trap`: a hangup that arrives
    // earlier ends the shell, and there is no orphan to test.
    assert!(wait_until(WAIT, || c.lease(b.pty).bytes_out > 0));
    let pid = c.lease(b.pty).pid.unwrap();
    let daemon = c.status().pid;
    drop(c);
    signal_and_wait(daemon, Signal::SIGKILL);
    let _ = bridge.wait();
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        alive(pid),
        "the shell ignores the hangup and outlives its daemon"
    );

    let (_bridge, mut c) = home.bridge();
    assert!(
        !alive(pid),
        "the orphan was ended before the new daemon answered"
    );
    let lease = c.lease(b.pty);
    assert_eq!(lease.state, LeaseState::Ended);
    assert_eq!(lease.reason, Some(EndReason::AgentRestarted));
    assert!(home.log().contains("outlived the previous daemon"));
}

/// A graceful stop logs the PTYs it ends with the reason the next incarnation reports
/// (`agent restarted`, never `exited`), and their output figures survive the restart.
#[test]
fn graceful_stop_records_agent_restarted_with_output_figures() {
    let home = Home::new();
    home.start_daemon();
    let mut c = home.client();
    let b = c
        .create(
            &pane("chatty"),
            &["sh", "-c", "echo said-something; exec sleep 1000"],
        )
        .binding;
    // All of it: the line and its CRLF may arrive in two reads.
    let said = "said-something\r\n".len() as u64;
    assert!(wait_until(WAIT, || c.lease(b.pty).bytes_out == said));
    let before = c.lease(b.pty);
    let daemon = c.status().pid;
    drop(c);
    signal_and_wait(daemon, Signal::SIGTERM);
    let ended: Vec<String> = home
        .log()
        .lines()
        .filter(|l| l.contains("PTY ended") && l.contains(&b.to_string()))
        .map(str::to_string)
        .collect();
    assert_eq!(ended.len(), 1, "{ended:?}");
    assert!(ended[0].contains("reason=agent restarted"), "{}", ended[0]);

    home.start_daemon();
    let mut c = home.client();
    let lease = c.lease(b.pty);
    assert_eq!(lease.reason, Some(EndReason::AgentRestarted));
    assert_eq!(lease.exit, None);
    assert_eq!(lease.bytes_out, before.bytes_out);
    assert_eq!(lease.last_output_ms, before.last_output_ms);
}

/// The journal holds command lines: state/ and log/ are 0700, the journal and the log 0600.
#[test]
fn state_and_log_files_are_private() {
    let home = Home::new();
    home.start_daemon();
    let mut c = home.client();
    c.create(&pane("private"), &["sh", "-c", "sleep 1000"]);
    let mode = |p: &str| {
        fs::metadata(home.path().join(p))
            .unwrap()
            .permissions()
            .mode()
            & 0o777
    };
    let got: Vec<(&str, u32)> = [
        "run",
        "state",
        "log",
        "state/leases.journal",
        "log/agent.log",
    ]
    .into_iter()
    .map(|p| (p, mode(p)))
    .collect();
    assert_eq!(
        got,
        [
            ("run", 0o700),
            ("state", 0o700),
            ("log", 0o700),
            ("state/leases.journal", 0o600),
            ("log/agent.log", 0o600)
        ]
    );
}

/// The `output` records of `pty` in the journal.
fn output_records(home: &Home, pty: relay_protocol::PtyId) -> usize {
    let want = serde_json::to_value(pty).unwrap();
    fs::read_to_string(journal(home))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|r| r["event"] == "output" && r["pty"] == want)
        .count()
}

/// Regression ("counters lost on crash"): after `kill -9` and a restart, an ended
/// lease showed 0 bytes and no last output, because output counters were journaled only when a
/// PTY ended. Now they are journaled when a lease becomes detached and, while output flows, at
/// most every few seconds — for a pane that was attached and one that never was.
#[test]
fn output_counters_survive_a_killed_daemon() {
    let home = Home::new();
    home.start_daemon();
    let mut c = home.client();
    let attached = c
        .open(
            &pane("attached"),
            &["sh", "-c", "echo attached-output; exec sleep 1000"],
            Some(0),
        )
        .unwrap()
        .created
        .binding;
    c.output_until(attached.pty, 0, |o| contains(o, "attached-output\r\n"));
    let flowing = c
        .create(
            &pane("flowing"),
            &["sh", "-c", "echo flowing-output-too; exec sleep 1000"],
        )
        .binding;
    let said = "flowing-output-too\r\n".len() as u64;
    assert!(wait_until(WAIT, || c.lease(flowing.pty).bytes_out == said));
    let before = [c.lease(attached.pty), c.lease(flowing.pty)];
    let daemon = c.status().pid;
    drop(c); // Detaches `attached`.
             // Both are written within a few seconds (on detach; after the flow's first output).
    wait_until(WAIT, || {
        output_records(&home, attached.pty) > 0 && output_records(&home, flowing.pty) > 0
    });
    signal_and_wait(daemon, Signal::SIGKILL);

    home.start_daemon();
    let mut c = home.client();
    for want in before {
        let lease = c.lease(want.binding.pty);
        assert_eq!(lease.state, LeaseState::Ended);
        assert_eq!(lease.reason, Some(EndReason::AgentRestarted));
        assert_eq!(lease.bytes_out, want.bytes_out, "{}", want.binding);
        assert!(lease.bytes_out > 0);
        assert_eq!(
            lease.last_output_ms, want.last_output_ms,
            "{}",
            want.binding
        );
    }
}

/// A flood of output is journaled as a few `output` records, never one per chunk.
#[test]
fn flowing_output_writes_a_bounded_number_of_counter_records() {
    let home = Home::new();
    home.start_daemon();
    let mut c = home.client();
    let b = c
        .create(
            &pane("flood"),
            &["sh", "-c", "i=0; while [ $i -lt 3000 ]; do echo line-$i; i=$((i+1)); sleep 0.002; done; exec sleep 1000"],
        )
        .binding;
    assert!(wait_until(Duration::from_secs(30), || contains(
        &fs::read(journal(&home)).unwrap_or_default(),
        "\"event\":\"output\""
    )));
    std::thread::sleep(Duration::from_secs(6));
    let records = output_records(&home, b.pty);
    let lease = c.lease(b.pty);
    // Seconds of output in thousands of chunks: a record per 5 s at most (and one more).
    assert!((1..=4).contains(&records), "{records} output records");
    assert!(lease.bytes_out > 0);
}
