//! How PTYs end: by themselves, by Kill, and by a daemon restart.

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use relay_protocol::message::Kill;
use relay_protocol::{EndReason, LeaseState, Push, Request};

use crate::support::{alive, contains, pane, pids_with, wait_until, Home, WAIT};

/// Kill ends the shell: Done at once, then Exited (reason Killed, exit status recorded) after the
/// last output, and the lease is ended with the same record.
#[test]
fn kill_ends_the_shell_and_records_reason_killed() {
    let home = Home::new();
    home.start_daemon();
    let mut c = home.client();
    let p = pane("victim");
    let created = c.create(&p, &["sh"]);
    let b = created.binding.clone();
    let pid = c.lease(b.pty).pid.unwrap();
    let a = c.attach(&p, Some(b.pty), Some(0)).unwrap();
    c.input(&b, "echo before-$((40+2))\n").unwrap();
    let out = c.output_until(b.pty, a.replay_from, |o| contains(o, "before-42"));

    c.mutate(Request::Kill(Kill { binding: b.clone() }))
        .unwrap();
    let exited = loop {
        match c.push(WAIT) {
            Some(Push::Exited(e)) => break e,
            Some(Push::Output(_)) => continue,
            other => panic!("expected Exited, got {other:?}"),
        }
    };
    assert_eq!(exited.binding, b);
    assert_eq!(exited.reason, EndReason::Killed);
    assert_eq!(exited.exit.signal.as_deref(), Some("Hangup"));
    assert!(exited.event_key >= out.len() as u64);
    assert!(wait_until(WAIT, || !alive(pid)), "shell gone");

    let lease = c.lease(b.pty);
    assert_eq!(lease.state, LeaseState::Ended);
    assert_eq!(lease.reason, Some(EndReason::Killed));
    assert_eq!(lease.exit, Some(exited.exit));
    // Further mutations of the ended binding report Ended.
    assert!(matches!(
        c.input(&b, "x"),
        Err(relay_protocol::ErrorReply::Ended { .. })
    ));
}

/// A shell that ignores SIGHUP is SIGKILLed after the grace.
#[test]
fn kill_escalates_to_sigkill_when_sighup_is_ignored() {
    let home = Home::new();
    home.start_daemon();
    let mut c = home.client();
    let p = pane("stubborn");
    let created = c.create(
        &p,
        &[
            "sh",
            "-c",
            "trap '' HUP; echo trapped; while :; do sleep 1; done",
        ],
    );
    let b = created.binding;
    let a = c.attach(&p, Some(b.pty), Some(0)).unwrap();
    c.output_until(b.pty, a.replay_from, |o| contains(o, "trapped"));
    c.mutate(Request::Kill(Kill { binding: b.clone() }))
        .unwrap();
    assert!(wait_until(WAIT, || c.lease(b.pty).state == LeaseState::Ended));
    let lease = c.lease(b.pty);
    assert_eq!(lease.reason, Some(EndReason::Killed));
    assert_eq!(lease.exit.unwrap().signal.as_deref(), Some("Killed"));
}

/// A process that exits by itself: its last output, then Exited with its exit code.
#[test]
fn exit_by_itself_is_pushed_after_the_last_output() {
    let home = Home::new();
    home.start_daemon();
    let mut c = home.client();
    let p = pane("short");
    let created = c.create(&p, &["sh", "-c", "read x; printf bye; exit 3"]);
    let b = created.binding;
    let a = c.attach(&p, Some(b.pty), Some(0)).unwrap();
    c.input(&b, "\n").unwrap();
    let out = c.output_until(b.pty, a.replay_from, |o| contains(o, "bye"));
    match c.push(WAIT) {
        Some(Push::Exited(e)) => {
            assert_eq!(e.exit.code, 3);
            assert_eq!(e.reason, EndReason::Exited);
            assert_eq!(e.event_key, out.len() as u64, "Exited after all output");
        }
        other => panic!("expected Exited, got {other:?}"),
    }
    let lease = c.lease(b.pty);
    assert_eq!(lease.reason, Some(EndReason::Exited));
    assert_eq!(lease.bytes_out, out.len() as u64);
}

/// A shell that exits while a background process it started still holds the terminal (so the
/// PTY never reaches end-of-file): `Exited` still arrives, after the output grace, with the output
/// written before it; the background process is not killed by relay.
#[test]
fn exit_is_reported_while_a_background_process_holds_the_terminal() {
    let home = Home::new();
    home.start_daemon_with(&[("RELAY_EXIT_OUTPUT_GRACE_MS", "300")]);
    let mut c = home.client();
    let p = pane("bg");
    let token = format!("relay-bg-{}", std::process::id());
    let script = format!(
        "trap '' HUP; sh -c 'sleep 30; : {token}' </dev/null & read x; printf left; exit 4"
    );
    let b = c.create(&p, &["sh", "-c", &script]).binding;
    let a = c.attach(&p, Some(b.pty), Some(0)).unwrap();
    assert!(wait_until(WAIT, || !pids_with(&token).is_empty()));
    c.input(&b, "\n").unwrap();
    let (out, exited) = c.output_until_exit(b.pty, a.replay_from);
    assert!(
        contains(&out, "left"),
        "{:?}",
        String::from_utf8_lossy(&out)
    );
    assert_eq!(exited.exit.code, 4);
    assert_eq!(exited.event_key, a.replay_from + out.len() as u64);
    let background = pids_with(&token);
    assert!(
        !background.is_empty(),
        "the background process keeps running"
    );
    for pid in background {
        let _ = kill(Pid::from_raw(pid as i32), Signal::SIGKILL);
    }
}

/// After a daemon restart, the leases of the old daemon are listed as ended with reason
/// AgentRestarted (exit unknown), and already ended ones keep their record.
#[test]
fn daemon_restart_reports_old_leases_as_agent_restarted() {
    let home = Home::new();
    let (mut bridge, mut c) = home.bridge();
    let first = c.status();
    let live = c.create(&pane("was-live"), &["sh"]).binding;
    let done = c.create(&pane("was-done"), &["sh", "-c", "exit 4"]).binding;
    assert!(wait_until(WAIT, || c.lease(done.pty).state == LeaseState::Ended));
    let shell = c.lease(live.pty).pid.unwrap();
    drop(c);
    kill(Pid::from_raw(first.pid as i32), Signal::SIGTERM).unwrap();
    assert!(wait_until(WAIT, || !alive(first.pid)), "old daemon stopped");
    assert!(wait_until(WAIT, || !alive(shell)), "its PTY was ended");
    let _ = bridge.wait();

    // A new bridge starts a new daemon.
    let (_bridge, mut c) = home.bridge();
    let second = c.status();
    assert_ne!(second.incarnation, first.incarnation);
    assert_ne!(second.pid, first.pid);
    let lease = c.lease(live.pty);
    assert_eq!(lease.state, LeaseState::Ended);
    assert_eq!(lease.reason, Some(EndReason::AgentRestarted));
    assert_eq!(lease.exit, None);
    let lease = c.lease(done.pty);
    assert_eq!(lease.reason, Some(EndReason::Exited));
    assert_eq!(lease.exit.map(|e| e.code), Some(4));
    // Attach says ended (proven dead), never "not found" and never a new shell.
    match c.attach(&live.pane, Some(live.pty), Some(0)) {
        Err(relay_protocol::ErrorReply::Ended { reason, .. }) => {
            assert_eq!(reason, EndReason::AgentRestarted)
        }
        other => panic!("expected Ended, got {other:?}"),
    }
    assert_eq!(second.leases.ended, 2);
}
