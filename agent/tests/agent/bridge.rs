//! The bridge: starting exactly one daemon, and never taking it down.

use std::sync::{Arc, Barrier};
use std::thread;

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use relay_protocol::LeaseState;

use crate::support::{alive, contains, pane, wait_until, Home, WAIT};

/// Two bridges started at the same instant end with exactly one daemon, which both talk to.
#[test]
fn two_bridges_at_once_start_exactly_one_daemon() {
    let home = Arc::new(Home::new());
    let barrier = Arc::new(Barrier::new(2));
    let runs: Vec<_> = (0..2)
        .map(|_| {
            let (home, barrier) = (Arc::clone(&home), Arc::clone(&barrier));
            thread::spawn(move || {
                barrier.wait();
                let (child, mut c) = home.bridge();
                let status = c.status();
                (child, c, status)
            })
        })
        .collect();
    let results: Vec<_> = runs.into_iter().map(|r| r.join().unwrap()).collect();
    let (a, b) = (&results[0].2, &results[1].2);
    assert_eq!(
        a.incarnation, b.incarnation,
        "both bridges reach the same daemon"
    );
    assert_eq!(a.pid, b.pid);
    assert_eq!(home.daemons(), vec![a.pid], "exactly one daemon process");
    assert!(home.wait_log("daemon starting"));
    assert!(
        home.log().matches("daemon starting").count() == 1,
        "{}",
        home.log()
    );
    for (mut child, c, _) in results {
        drop(c); // EOF on the bridge's stdin: it exits once the daemon closed its side.
        child.wait().unwrap();
    }
}

/// Killing the bridge's whole process group (what an SSH disconnect or a killed connector does)
/// leaves the daemon and its PTYs running.
#[test]
fn daemon_and_pty_survive_killing_the_bridge_process_group() {
    let home = Home::new();
    let (mut bridge, mut c) = home.bridge();
    let daemon = c.status().pid;
    let p = pane("keep");
    let created = c.create(&p, &["sh"]);
    c.attach(&p, Some(created.binding.pty), None).unwrap();
    let shell = c.lease(created.binding.pty).pid.unwrap();

    killpg(Pid::from_raw(bridge.id() as i32), Signal::SIGKILL).unwrap();
    let _ = bridge.wait();
    drop(c);

    let mut c = home.client();
    assert!(wait_until(WAIT, || c.lease(created.binding.pty).state
        == LeaseState::Detached));
    assert!(alive(daemon), "daemon survived");
    assert!(alive(shell), "shell survived");
    assert_eq!(c.status().pid, daemon);
    // And the shell still works.
    let a = c.attach(&p, Some(created.binding.pty), None).unwrap();
    c.input(&created.binding, "echo still-$((1+1))\n").unwrap();
    let out = c.output_until(created.binding.pty, a.replay_from, |o| {
        contains(o, "still-2")
    });
    assert!(contains(&out, "still-2"));
}

/// Regression: a bridge whose binary file was replaced (another connector's atomic rename of
/// the same content) while it waited for the spawn lock started the daemon from
/// `current_exe()`, which then read `... (deleted)`: "No such file or directory". It now starts
/// the daemon from its own running image.
#[test]
fn bridge_starts_the_daemon_after_its_file_was_replaced() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    use std::process::{Command, Stdio};

    use nix::fcntl::{Flock, FlockArg};

    let home = Home::new();
    let private = |dir: &std::path::Path| {
        std::fs::create_dir(dir).unwrap();
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    };
    let bin_dir = home.path().join("bin");
    private(&bin_dir);
    let exe = bin_dir.join("relay-agent");
    std::fs::copy(crate::support::BIN, &exe).unwrap();
    private(&home.path().join("run"));
    let lock_file = std::fs::File::create(home.path().join("run/spawn.lock")).unwrap();
    let lock = Flock::lock(lock_file, FlockArg::LockExclusive).unwrap();

    // The copy, with the environment the test home gives the built binary.
    let template = home.command(&["bridge"]);
    let mut command = Command::new(&exe);
    command
        .arg("bridge")
        .envs(template.get_envs().filter_map(|(k, v)| Some((k, v?))))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let mut bridge = crate::support::spawn_fresh_file(&mut command);
    // Let it reach the lock, then replace its file by an identical copy (atomic rename).
    std::thread::sleep(std::time::Duration::from_millis(300));
    let fresh = bin_dir.join(".relay-agent.new");
    std::fs::copy(&exe, &fresh).unwrap();
    std::fs::rename(&fresh, &exe).unwrap();
    drop(lock);

    let w = bridge.stdin.take().unwrap();
    let r = bridge.stdout.take().unwrap();
    let mut c = crate::support::Client::hello(crate::support::Client::over(r, w));
    let daemon = c.status().pid;
    assert_eq!(
        home.daemons(),
        vec![daemon],
        "one daemon, named after the file"
    );
    drop(c);
    let _ = bridge.wait();
}

/// `bridge --no-start` (what relayctl runs) never starts a daemon: without one it
/// exits with `EXIT_NO_AGENT`, says so, and creates nothing under `RELAY_HOME`; while another
/// bridge is starting the daemon (holding `run/spawn.lock`) it waits and then connects.
#[test]
fn a_no_start_bridge_starts_no_daemon_but_waits_for_one_being_started() {
    use std::os::unix::fs::PermissionsExt;
    use std::process::Stdio;

    use nix::fcntl::{Flock, FlockArg};
    use relay_protocol::bridge::{EXIT_NO_AGENT, NO_START_FLAG};

    let home = Home::new();
    let out = home
        .command(&["bridge", NO_START_FLAG])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(EXIT_NO_AGENT), "{stderr}");
    assert!(stderr.contains("no agent running"), "{stderr}");
    assert!(out.stdout.is_empty(), "stdout carries frames only");
    assert!(home.daemons().is_empty(), "no daemon was started");
    assert!(!home.path().join("run").exists(), "nothing was created");

    // A start under way: the connect-only bridge waits for the lock instead of giving up.
    let run = home.path().join("run");
    std::fs::create_dir(&run).unwrap();
    std::fs::set_permissions(&run, std::fs::Permissions::from_mode(0o700)).unwrap();
    let lock_file = std::fs::File::create(run.join("spawn.lock")).unwrap();
    let lock = Flock::lock(lock_file, FlockArg::LockExclusive).unwrap();
    let mut bridge = home
        .command(&["bridge", NO_START_FLAG])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    thread::sleep(std::time::Duration::from_millis(300));
    assert!(
        bridge.try_wait().unwrap().is_none(),
        "it waits while another bridge starts the daemon"
    );
    home.start_daemon();
    drop(lock);
    let w = bridge.stdin.take().unwrap();
    let r = bridge.stdout.take().unwrap();
    let mut c = crate::support::Client::hello(crate::support::Client::over(r, w));
    assert_eq!(home.daemons(), vec![c.status().pid]);
    drop(c);
    bridge.wait().unwrap();
}
