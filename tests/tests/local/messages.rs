//! What `relay` says when a pane cannot be attached or the connection goes away: one clean
//! sentence, and nothing it does not know (rule A).

use std::path::Path;
use std::process::Stdio;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use relay_protocol::PaneKey;
use relay_tests::{bins, read_until, Collected, TestHome, LIVENESS};

use super::piped_run::PipedRun;
use super::sh;

/// Regression: "pane X has ended (pane X ended (…); create it again…); use `relay shell`…".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_attach_to_an_ended_pane_says_so_in_one_sentence() {
    let home = TestHome::new();
    let session = home.session().await;
    let (_, mut handle) = session
        .open(PaneKey::new("w", "gone", "0"), sh("exit 3"), Some(0))
        .await
        .unwrap();
    read_until(&mut handle, &mut Collected::default(), LIVENESS, |c| {
        c.exit.is_some()
    })
    .await
    .unwrap();
    let out = home
        .command(&bins().relay)
        .args(["attach", "--local", "-w", "w", "--pane", "gone"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim_end(),
        "relay: pane w/gone/0 has ended (exited, exit 3); use `relay shell` to start a new shell"
    );
}

/// Regression: after the daemon was terminated, relay claimed "the shell was not ended by
/// relay"; later it gave up with "connection lost; run the same command". Now it reconnects by
/// itself (the bridge starts a new daemon) and reports what the new daemon proves from its
/// journal: the shell ended because the agent restarted. Status 255: the shell's own exit status
/// cannot be known.
#[test]
fn a_restarted_agent_is_reported_as_the_shells_end_after_reconnecting() {
    let home = TestHome::new();
    let mut run = PipedRun::spawn(&home, &["shell", "--local", "--pane", "up"]);
    run.send("echo up-$((2+3))\n");
    run.wait_for_stdout("up-5");
    let pid = home.daemon_pid().expect("the daemon runs");
    kill(Pid::from_raw(pid), Signal::SIGTERM).unwrap();
    let status = run.exit_within(LIVENESS);
    let stderr = run.stderr();
    assert_eq!(status.and_then(|s| s.code()), Some(255), "{stderr}");
    assert!(!stderr.contains("not ended by relay"), "{stderr}");
    assert!(
        stderr.contains("[relay: connection lost; reconnecting in"),
        "{stderr}"
    );
    assert!(
        stderr.contains(
            "the shell of pane default/up/0 ended: agent restarted (learned when relay reconnected)"
        ),
        "{stderr}"
    );
}

/// `relayctl stop` (the README's way to stop the agent, no `jq` needed) refuses while shells run,
/// and with `--yes` stops the daemon, whose shells are then reported `agent restarted`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relayctl_stop_refuses_while_shells_run_and_stops_with_yes() {
    let home = TestHome::new();
    let session = home.session().await;
    let (created, _handle) = session
        .open(PaneKey::new("w", "live", "0"), sh("sleep 1000"), Some(0))
        .await
        .unwrap();
    drop(session);
    let pid = home.daemon_pid().expect("the daemon runs");
    let out = home.relayctl(&["stop"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("1 shell(s) are running") && stderr.contains("--yes"),
        "{stderr}"
    );
    assert!(home.daemon_running(), "refused: still running");
    let out = home.relayctl(&["stop", "--yes"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("stopped relay-agent (pid {pid})")
    );
    assert!(!home.daemon_running());
    // relayctl never starts an agent: the next one is started as a connection would.
    home.start_daemon();
    let leases = home.leases_json();
    let lease = leases
        .iter()
        .find(|l| l["pty"] == created.binding.pty.to_string())
        .expect("the lease is remembered");
    assert_eq!(lease["reason"], "agent_restarted", "{lease}");
}

/// `relay shell` finds that the pane's previous shell ended (here: the agent restarted) and says
/// so before it starts a new one, instead of silently giving a fresh shell.
#[test]
fn relay_shell_says_when_the_previous_shell_ended_before_starting_a_new_one() {
    let home = TestHome::new();
    let mut first = PipedRun::spawn(&home, &["shell", "--local", "--pane", "again"]);
    first.send("echo one-$((1+1))\n");
    first.wait_for_stdout("one-2");
    let pid = home.daemon_pid().expect("the daemon runs");
    kill(Pid::from_raw(pid), Signal::SIGTERM).unwrap();
    assert_eq!(
        first.exit_within(LIVENESS).and_then(|s| s.code()),
        Some(255)
    );
    let mut second = PipedRun::spawn(&home, &["shell", "--local", "--pane", "again"]);
    second.send("echo two-$((1+2)); exit 6\n");
    assert_eq!(second.exit_within(LIVENESS).and_then(|s| s.code()), Some(6));
    let stderr = second.stderr();
    assert!(
        stderr.contains("[the previous shell of pane default/again/0 ended: agent restarted")
            && stderr.contains("s ago; starting a new shell]"),
        "{stderr}"
    );
    assert!(second.stdout().contains("two-3"));
}

/// `relay shell -- CMD` runs CMD in a pane of its own (never in the `main` shell) and exits with
/// its status, like `ssh -t host CMD`: the words are joined and run by a shell on the host, so
/// `$((...))` and `;` work as with ssh.
#[test]
fn relay_shell_runs_a_command_in_its_own_pane_with_its_exit_status() {
    let home = TestHome::new();
    let out = home
        .command(&bins().relay)
        .args([
            "shell",
            "--local",
            "--",
            "echo",
            "ran-$((6*7));",
            "exit",
            "7",
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(7), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("ran-42"),
        "{out:?}"
    );
    let leases = home.leases_json();
    assert_eq!(leases.len(), 1);
    let tab = leases[0]["pane"]["tab"].as_str().unwrap();
    assert!(tab.starts_with("run-"), "a pane of its own: {tab}");
}

/// `relay shell --local` run from a directory that was deleted starts the shell in the home
/// directory and says why, instead of moving the user silently.
#[test]
fn a_deleted_current_directory_is_named_and_the_shell_starts_at_home() {
    let home = TestHome::new();
    let gone = home.path().join("gone");
    std::fs::create_dir(&gone).unwrap();
    // relay starts in the directory, which is removed under it (a spawn cannot enter it).
    let mut cmd = home.command(Path::new("/bin/sh"));
    cmd.args([
        "-c",
        r#"cd "$1" && rmdir "$1" && exec "$2" shell --local -- pwd"#,
        "sh",
    ])
    .arg(&gone)
    .arg(&bins().relay)
    .stdin(Stdio::null());
    let home_dir = cmd
        .get_envs()
        .find(|(k, _)| *k == "HOME")
        .and_then(|(_, v)| v)
        .map(|v| v.to_string_lossy().into_owned())
        .or_else(|| std::env::var("HOME").ok())
        .unwrap();
    let out = cmd.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(
        stderr.contains("cannot read the current directory")
            && stderr.contains("the shell starts in your home directory"),
        "{stderr}"
    );
    assert!(
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .any(|l| l.trim_end() == home_dir),
        "{out:?}"
    );
}

/// Exit status 255 when relay cannot reach the host at all, as ssh does; the message names the
/// destination and the cause.
#[test]
fn relay_exits_255_when_it_cannot_connect() {
    let home = TestHome::new();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let out = home
        .command(&bins().relay)
        .args(["shell", &format!("nobody@127.0.0.1:{port}")])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(255), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "cannot reach the relay agent (nobody@127.0.0.1:{port})"
        )),
        "{stderr}"
    );
}

/// A command word that is not UTF-8 cannot cross the protocol: `relay` says so and how to make
/// the bytes on the host instead, exits 255 like ssh's usage errors (never 2, `relay attach`'s
/// "no such pane"), and starts nothing.
#[test]
fn a_command_that_is_not_utf8_is_refused_with_a_way_to_pass_the_bytes() {
    use std::os::unix::ffi::OsStrExt;
    let home = TestHome::new();
    let out = home
        .command(&bins().relay)
        .args(["shell", "--local", "--", "printf"])
        .arg(std::ffi::OsStr::from_bytes(b"\xff"))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(255), "stderr: {stderr}");
    assert!(
        stderr.contains("not valid UTF-8") && stderr.contains("printf '\\377'"),
        "{stderr}"
    );
    assert!(home.daemon_pid().is_none(), "no agent was started");

    let out = home
        .command(&bins().relay)
        .args(["shell", "--no-such-flag"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(255), "{out:?}");
    let out = home.command(&bins().relay).arg("--help").output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
}
