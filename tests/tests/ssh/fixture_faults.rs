//! Self-tests of the fixture's fault primitives (`relay_tests::faults`) against a real container
//! with plain OpenSSH (and, for the inspection, a real agent): each fails if its primitive broke.
//! They need root (CI runs as root) for `nsenter`.

use std::io::BufRead;
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::Instant;

use super::*;

/// `ssh ... true` with a 3 s connect timeout: (exit ok, stderr, time taken).
async fn ssh_true(host: &SshHost) -> (bool, String, Duration) {
    let mut cmd = host.plain_ssh(&["-o", "ConnectTimeout=3", "true"]);
    let start = Instant::now();
    let out = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        start.elapsed(),
    )
}

async fn assert_ssh_works(host: &SshHost, when: &str) {
    let (ok, err, _) = ssh_true(host).await;
    assert!(ok, "ssh works {when}: {err}");
}

/// A plain ssh session running `cmd`, with each stdout line (and finally EOF as `None`) sent to
/// the returned channel by a reader thread.
fn streaming_ssh(host: &SshHost, cmd: &str) -> (Child, mpsc::Receiver<Option<String>>) {
    let mut child = host
        .plain_ssh(&[cmd])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(Some(line)).is_err() {
                return;
            }
        }
        let _ = tx.send(None);
    });
    (child, rx)
}

/// Waits up to `limit` for the ssh client to exit.
async fn exits_within(child: &mut Child, limit: Duration) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return Some(status);
        }
        if Instant::now() > deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The command line of the container's pid 1 (the listening sshd).
async fn pid1(host: &SshHost) -> String {
    host.exec_ok("ps -o args= -p 1")
        .await
        .unwrap()
        .out()
        .to_string()
}

/// Command lines of the processes of user relay in the container, one a line.
async fn relay_processes(host: &SshHost) -> String {
    host.exec_as("root", "ps -u relay -o args=")
        .await
        .unwrap()
        .out()
        .to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn partition_times_out_new_connections_and_heal_restores_them() {
    let host = SshHost::start().await.unwrap();
    assert_ssh_works(&host, "before the partition").await;
    assert!(!host.is_partitioned().await.unwrap());

    for round in 0..2 {
        host.partition().await.unwrap();
        host.partition().await.unwrap(); // idempotent: no second copy of the rules
        assert!(host.is_partitioned().await.unwrap());
        let (ok, err, took) = ssh_true(&host).await;
        assert!(!ok, "round {round}: ssh must fail while partitioned");
        assert!(
            err.contains("timed out") && !err.contains("refused"),
            "round {round}: a timeout, not a refusal or EOF: {err}"
        );
        assert!(
            took >= Duration::from_millis(2500),
            "round {round}: silence until the 3 s timeout, not a quick failure ({took:?}): {err}"
        );

        host.heal().await.unwrap();
        host.heal().await.unwrap(); // idempotent
        assert!(!host.is_partitioned().await.unwrap());
        assert_ssh_works(&host, &format!("after heal {round}")).await;
    }
}

/// The remote loop keeps writing while partitioned: the OUTPUT rule must drop its packets too.
#[tokio::test(flavor = "multi_thread")]
async fn partition_silences_an_established_session_until_healed() {
    let host = SshHost::start().await.unwrap();
    let (mut child, rx) = streaming_ssh(&host, "while sleep 0.2; do echo x; done");
    for _ in 0..3 {
        let line = rx.recv_timeout(Duration::from_secs(20)).unwrap();
        assert_eq!(line.as_deref(), Some("x"), "the session is streaming");
    }

    host.partition().await.unwrap();
    // What was already on the way may still arrive: drain until a quiet second (the remote
    // writes every 0.2 s).
    while let Ok(line) = rx.recv_timeout(Duration::from_secs(1)) {
        assert!(line.is_some(), "no EOF on a partition");
    }
    match rx.recv_timeout(Duration::from_secs(3)) {
        Err(mpsc::RecvTimeoutError::Timeout) => {}
        Ok(Some(_)) => panic!("output got through the partition"),
        Ok(None) => panic!("the client saw EOF: the partition is not silent"),
        Err(e) => panic!("{e}"),
    }
    assert!(
        child.try_wait().unwrap().is_none(),
        "the client is still waiting"
    );
    assert_eq!(
        host.ssh_connection_count().await.unwrap(),
        1,
        "the connection is still established on the host"
    );

    host.heal().await.unwrap();
    let line = rx.recv_timeout(Duration::from_secs(20)).unwrap();
    assert_eq!(line.as_deref(), Some("x"), "the session resumes after heal");
    child.kill().unwrap();
    child.wait().unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn flapping_toggles_the_partition_and_heals_when_over_or_dropped() {
    let host = SshHost::start().await.unwrap();

    // Partitioned at 0 and 4 s, healed at 2 and 6 s, over at 8 s. Each sample runs docker and
    // nsenter (up to a second on a loaded machine), so a phase lasts several samples.
    let flapping = host
        .flap(Duration::from_secs(2), Duration::from_secs(8))
        .unwrap();
    let mut seen = Vec::new();
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(7000) {
        let on = host.is_partitioned().await.unwrap();
        if seen.last() != Some(&on) {
            seen.push(on);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The task may not have started at the first sample.
    let from_first: Vec<bool> = seen.iter().copied().skip_while(|on| !on).collect();
    assert!(
        from_first.starts_with(&[true, false, true]),
        "partitioned, healed, partitioned again: {seen:?}"
    );
    assert_eq!(flapping.wait().await.unwrap(), 2, "partitioned twice");
    assert!(!host.is_partitioned().await.unwrap(), "healed at the end");
    assert_ssh_works(&host, "after flapping").await;

    // Dropping the guard mid-way heals at once.
    let flapping = host
        .flap(Duration::from_secs(30), Duration::from_secs(60))
        .unwrap();
    eventually_async("the flapping to partition", || async {
        host.is_partitioned().await.unwrap()
    })
    .await;
    drop(flapping);
    assert!(!host.is_partitioned().await.unwrap(), "healed on drop");
    assert_ssh_works(&host, "after dropping the flapping guard").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn killing_ssh_connections_resets_sessions_and_spares_sshd() {
    let host = SshHost::start().await.unwrap();
    let listener = pid1(&host).await;
    assert!(listener.starts_with("sshd"), "pid 1 is sshd: {listener}");
    let mut child = host
        .plain_ssh(&["sleep", "100"])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    eventually_async("the ssh session to run its command", || async {
        relay_processes(&host)
            .await
            .lines()
            .any(|l| l == "sleep 100")
    })
    .await;
    assert_eq!(host.ssh_connection_count().await.unwrap(), 1);

    assert_eq!(host.kill_ssh_connections().await.unwrap(), 1);
    let status = exits_within(&mut child, Duration::from_secs(5))
        .await
        .expect("the client noticed within 5 s");
    assert!(!status.success(), "the session failed: {status}");
    assert_eq!(host.ssh_connection_count().await.unwrap(), 0);
    assert_eq!(pid1(&host).await, listener, "the listener is untouched");
    assert_eq!(
        host.kill_ssh_connections().await.unwrap(),
        0,
        "nothing left"
    );
    assert_ssh_works(&host, "after the reset").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn killing_sshd_sessions_ends_sessions_and_spares_the_listener() {
    let host = SshHost::start().await.unwrap();
    let listener = pid1(&host).await;
    let mut child = host
        .plain_ssh(&["sleep", "100"])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    eventually_async("the ssh session to run its command", || async {
        relay_processes(&host)
            .await
            .lines()
            .any(|l| l == "sleep 100")
    })
    .await;
    assert_eq!(host.ssh_connection_count().await.unwrap(), 1);

    assert_eq!(host.kill_sshd_sessions().await.unwrap(), 1);
    let status = exits_within(&mut child, Duration::from_secs(5))
        .await
        .expect("the client noticed within 5 s");
    assert!(!status.success(), "the session failed: {status}");
    assert_eq!(pid1(&host).await, listener, "the listener is untouched");
    assert_eq!(
        relay_processes(&host).await,
        "sleep 100",
        "the session's own process outlives its sshd (which is gone)"
    );
    assert_ssh_works(&host, "after sshd's session died").await;
}

/// A real agent over SSH: the inspection sees its daemon and exactly its shells, and they are
/// the same after the connection is reset and while the host is partitioned.
#[tokio::test(flavor = "multi_thread")]
async fn inspection_sees_the_agents_shells_through_faults() {
    let host = SshHost::start().await.unwrap();
    assert_eq!(host.agent_daemon_pid().await.unwrap(), None);
    assert_eq!(host.shell_pids().await.unwrap(), Vec::<u32>::new());
    let pts_before = host.pts_count().await.unwrap();

    let transport = trusted(&host);
    let session = Session::connect(&transport, "ssh-tests").await.unwrap();
    let daemon = host
        .agent_daemon_pid()
        .await
        .unwrap()
        .expect("the session started a daemon");
    let mut shells = Vec::new();
    for leaf in ["0", "1"] {
        let pane = PaneKey::new("inspect", "tab", leaf);
        let marker = format!("up-{leaf}");
        shells.push(
            pane_with(
                &session,
                &pane,
                &format!("echo {marker}; sleep 1000"),
                &marker,
            )
            .await,
        );
    }
    shells.sort_unstable();
    assert_eq!(host.shell_pids().await.unwrap(), shells, "the leases' pids");
    assert_eq!(
        host.pts_count().await.unwrap(),
        pts_before + 2,
        "one PTY each"
    );

    assert!(host.kill_ssh_connections().await.unwrap() >= 1);
    drop(session);
    host.partition().await.unwrap();
    assert_eq!(host.agent_daemon_pid().await.unwrap(), Some(daemon));
    assert_eq!(
        host.shell_pids().await.unwrap(),
        shells,
        "same shells, partitioned"
    );
    host.heal().await.unwrap();

    host.exec_ok(&format!("kill -KILL {}", shells[0]))
        .await
        .unwrap();
    eventually_async("the killed shell to disappear", || async {
        host.shell_pids().await.unwrap() == shells[1..]
    })
    .await;
    assert_eq!(host.agent_daemon_pid().await.unwrap(), Some(daemon));
}
