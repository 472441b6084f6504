//! Rule G against a real agent: every refusal has a bounded way out. A stopped agent (SIGSTOP:
//! the socket accepts, nothing answers) must not trap `relay` or `relayctl`, and an agent that
//! refuses input because the program is not reading only slows a paste down.

use std::io::Read;
use std::process::Stdio;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use relay_protocol::PaneKey;
use relay_tests::{bins, eventually, read_until_text, Collected, TestHome, LIVENESS};

use super::piped_run::PipedRun;
use super::{sh, wait_output, PtyRun};

/// Keeps a process stopped (SIGSTOP) until dropped, then continues it (SIGCONT), also when the
/// test fails, so the home's cleanup can still reach the daemon. Declare it after the
/// [`TestHome`] so it is dropped first.
struct Stopped(Pid);

impl Stopped {
    fn stop(pid: i32) -> Stopped {
        let pid = Pid::from_raw(pid);
        kill(pid, Signal::SIGSTOP).expect("stopping the daemon");
        let stopped = Stopped(pid);
        eventually("the daemon to be stopped", || {
            (process_state(pid) == Some('T')).then_some(())
        });
        stopped
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        let _ = kill(self.0, Signal::SIGCONT);
    }
}

/// The state letter from `/proc/<pid>/stat` (`T` when stopped).
fn process_state(pid: Pid) -> Option<char> {
    relay_testkit::procs::Proc::read(pid.as_raw() as u32).map(|p| p.state)
}

/// `relay shell --local --pane PANE` in a real PTY, once its shell answers.
fn shell_in_pty(home: &TestHome, pane: &str) -> PtyRun {
    let mut run = PtyRun::spawn(home, &["shell", "--local", "--pane", pane]);
    run.type_text("echo ready-$((40+2))\r");
    run.wait_for("ready-42");
    run
}

/// Starts the home's daemon and returns its pid.
fn running_daemon(home: &TestHome) -> i32 {
    home.start_daemon();
    home.daemon_pid().expect("the daemon runs")
}

#[test]
fn relayctl_gives_up_on_a_stopped_agent_within_its_timeout() {
    let home = TestHome::new();
    let pid = running_daemon(&home);
    let _stopped = Stopped::stop(pid);
    let started = Instant::now();
    let child = home
        .command(&bins().relayctl)
        .args(["status", "--timeout", "1"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = wait_output(child);
    let elapsed = started.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr);
    // Bounded, not fast: 1 s of waiting plus start-up of relayctl and the bridge on a loaded
    // machine; a hang would run to the test harness's limit.
    assert!(
        elapsed < Duration::from_secs(15),
        "took {elapsed:?}: {stderr}"
    );
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    for part in [
        "(local)",
        "the agent did not answer within 1 s",
        "it may be stopped or overloaded (check `relayctl status` / the agent log)",
    ] {
        assert!(stderr.contains(part), "{part:?} missing: {stderr}");
    }
}

/// With the agent stopped, `Enter ~ .` detaches at once (terminal restored, exit 0) and SIGTERM
/// ends relay at once; neither waits for an answer that cannot come.
#[test]
fn relay_detaches_and_obeys_sigterm_while_the_agent_is_stopped() {
    let home = TestHome::new();
    let mut detacher = shell_in_pty(&home, "a");
    let mut terminated = shell_in_pty(&home, "b");
    let pid = home.daemon_pid().expect("the daemon runs");
    let _stopped = Stopped::stop(pid);

    detacher.type_text("\r~.");
    // Detach waits out its 2 s grace for an answer that cannot come; 15 s is the bound.
    let code = detacher.exit_within(Duration::from_secs(15));
    assert_eq!(
        code,
        Some(0),
        "~. must not wait for a stopped agent: {}",
        detacher.screen()
    );
    assert!(detacher
        .screen()
        .contains("[detached from pane default/a/0"));

    kill(Pid::from_raw(terminated.pid()), Signal::SIGTERM).unwrap();
    let code = terminated.exit_within(Duration::from_secs(15));
    assert_eq!(
        code,
        Some(128 + 15),
        "SIGTERM ends relay: {}",
        terminated.screen()
    );
    assert!(terminated.screen().contains("stopped by SIGTERM"));
}

/// Regression: piping more than the agent's 4 MiB input limit into a pane whose program is not
/// reading yet made `relay shell` exit 1 on `LimitExceeded`. The paste must arrive whole and in
/// order once the program reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_delivers_a_paste_beyond_the_agents_input_limit_in_order() {
    let home = TestHome::new();
    let session = home.session().await;
    let size = 6_000_000;
    let script = format!("stty raw -echo; echo armed; sleep 4; head -c {size} | cksum; exit 9");
    let (_, mut handle) = session
        .open(PaneKey::new("default", "paste", "0"), sh(&script), Some(0))
        .await
        .unwrap();
    read_until_text(&mut handle, &mut Collected::default(), "armed")
        .await
        .unwrap();
    let data: Vec<u8> = (0..)
        .flat_map(|i: u32| format!("{i:07}\n").into_bytes())
        .take(size)
        .collect();
    let expected = relay_tests::cksum(&data);

    let mut run = PipedRun::spawn(&home, &["shell", "--local", "--pane", "paste"]);
    run.feed_and_close(data);
    let status = tokio::task::spawn_blocking(move || {
        let status = run.exit_within(LIVENESS * 2);
        (status, run.stdout(), run.stderr())
    })
    .await
    .unwrap();
    let (status, stdout, stderr) = status;
    assert_eq!(status.and_then(|s| s.code()), Some(9), "stderr: {stderr}");
    assert!(
        stdout.contains(&expected),
        "checksum {expected:?} of the whole paste, in order; got {stdout:?}"
    );
}

/// Regression (rule G): with stdout not taking output (a pipe nobody reads), relay stopped
/// handling SIGTERM and SIGHUP: its loop was stuck writing. Output now goes through its own
/// task, bounded, and the signals end relay at once.
#[test]
fn relay_obeys_sigterm_while_its_stdout_is_not_read() {
    let home = TestHome::new();
    let mut child = home
        .command(&bins().relay)
        .args(["shell", "--local", "--", "yes", "x"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Output reaches stdout only after relay took over SIGTERM (a SIGTERM before that would
    // end it by the default action, however loaded the machine).
    let mut stdout = child.stdout.take().unwrap();
    stdout.read_exact(&mut [0u8; 1]).unwrap();
    // Let the pipe (64 KiB) and relay's own bound fill up; `stdout` stays open, unread.
    std::thread::sleep(Duration::from_secs(2));
    let started = Instant::now();
    kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM).unwrap();
    let status = eventually("relay to exit", || child.try_wait().unwrap());
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(status.code(), Some(128 + 15));
}

/// The status line is cleared when relay leaves while the host is away: nothing of it stays on
/// the user's terminal (here the agent is stopped, relay shows "no answer", the user types
/// `~.`).
#[test]
fn the_status_line_is_cleared_when_relay_detaches_during_an_outage() {
    let home = TestHome::new();
    let mut run = shell_in_pty(&home, "away");
    let pid = home.daemon_pid().expect("the daemon runs");
    let _stopped = Stopped::stop(pid);
    run.wait_for("[relay: no answer from local");
    run.type_text("\r~.");
    assert_eq!(run.exit_within(Duration::from_secs(15)), Some(0));
    let screen = run.screen();
    let drawn = screen.rfind("[relay: no answer from local").unwrap();
    let cleared = screen.rfind("\u{1b}7\u{1b}[1;1H\u{1b}[2K\u{1b}8");
    assert!(
        cleared.is_some_and(|c| c > drawn),
        "the top line was not cleared: {:?}",
        &screen[drawn..]
    );
}

/// Input typed while relay reconnects (the agent stopped and declared dead) and then left
/// behind by a detach is counted exactly: a line and `~.` in one keystroke burst. Before, the
/// pane's release dropped the line uncounted and relay said nothing. (Whether the agent still
/// reads the dropped connection's last bytes when it continues is a race, so the message says
/// "may not".)
#[test]
fn input_left_behind_by_a_detach_during_an_outage_is_counted_exactly() {
    let home = TestHome::new();
    let mut run = shell_in_pty(&home, "left");
    let pid = home.daemon_pid().expect("the daemon runs");
    let _stopped = Stopped::stop(pid);
    // Declared dead: the line waits for a connection rather than for the agent's answer.
    run.wait_for("reconnecting");
    run.type_text("echo never-$((6*7))\r~.");
    assert_eq!(run.exit_within(Duration::from_secs(15)), Some(0));
    run.wait_for(
        "[relay: 20 bytes of your input were not confirmed by the agent before the detach; \
         the shell may not have got them]",
    );
}
