//! `relayctl --ssh HOST` (leases, status, kill --all; "no agent running" without starting one)
//! and `relay attach HOST` over SSH.

use super::*;

/// Runs a binary with `args` against `host`'s isolated ssh config (no ssh-agent).
fn run_cli(bin: &Path, host: &SshHost, args: &[&str]) -> std::process::Output {
    let config = options(host).resolve.config_file.unwrap();
    std::process::Command::new(bin)
        .args(args)
        .arg("-F")
        .arg(&config)
        .arg("-i")
        .arg(host.key_path())
        .env_remove("SSH_AUTH_SOCK")
        .env("RELAY_AGENT_BIN", agent_bin())
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn relayctl_over_ssh_lists_the_hosts_leases_and_relay_attach_never_creates() {
    let host = SshHost::start().await.unwrap();
    let dest = host.destination();
    // Unknown host key: refused, nothing recorded.
    let out = run_cli(
        &bins().relayctl,
        &host,
        &["--ssh", &dest, "leases", "--json"],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("--accept-new"), "{stderr}");

    // --accept-new records the key; the host has no agent running, and relayctl starts none:
    // each command says so, fails, and leaves no daemon or bridge on the host.
    let out = run_cli(
        &bins().relayctl,
        &host,
        &["--ssh", &dest, "--accept-new", "leases", "--json"],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("no agent running on {dest}")),
        "{stderr}"
    );
    for args in [
        &["status"][..],
        &["kill", "--all", "--yes"],
        &["gc", "--yes"],
    ] {
        let out = run_cli(
            &bins().relayctl,
            &host,
            &[&["--ssh", &dest][..], args].concat(),
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "relayctl {args:?}: {stderr}");
        assert!(stderr.contains("no agent running"), "{stderr}");
        assert!(out.stdout.is_empty(), "relayctl {args:?}");
    }
    assert_eq!(host.agent_daemon_pid().await.unwrap(), None);
    assert_eq!(count_procs(&host, "[r]elay-agent").await, 0);
    assert_eq!(
        remote_bin(&host).await,
        vec![],
        "nothing was uploaded to a host with no agent"
    );

    // The leases of the host (a pane made over SSH; the connection starts the agent).
    let session = Session::connect(&SshTransport::new(options(&host)), "ssh-tests")
        .await
        .unwrap();
    let pane = PaneKey::new("cli", "tab", "0");
    let pid = pane_with(&session, &pane, "echo cli-pane; sleep 1000", "cli-pane").await;
    drop(session);
    // The lease turns detached once the old connection's bridge is gone on the host; that
    // teardown runs independently of relayctl's new connection.
    eventually_async("the session's bridge to exit", || async {
        count_procs(&host, "[r]elay-agent-.* bridge").await == 0
    })
    .await;
    let out = run_cli(
        &bins().relayctl,
        &host,
        &["--ssh", &dest, "leases", "--json"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let leases: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let lease = leases
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["pane"]["workspace"] == "cli")
        .unwrap_or_else(|| panic!("no lease of pane cli in {leases}"));
    assert_eq!(lease["pid"], pid);
    assert_eq!(lease["state"], "detached");

    // `relay attach` of an unknown pane over SSH fails with code 2 and creates nothing.
    let out = run_cli(&bins().relay, &host, &["attach", &dest, "-p", "nope"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let session = Session::connect(&SshTransport::new(options(&host)), "ssh-tests")
        .await
        .unwrap();
    assert_eq!(session.list_leases().await.unwrap().len(), 1);
    drop(session);

    // The lifecycle commands over SSH: the policy in force, then kill --all of the host's one
    // shell with an honest summary, then the lease's end reason.
    let out = run_cli(&bins().relayctl, &host, &["--ssh", &dest, "status"]);
    let status = String::from_utf8_lossy(&out.stdout);
    assert!(
        status.contains("policy:        unused 10m, idle off"),
        "{status}"
    );
    let out = run_cli(
        &bins().relayctl,
        &host,
        &["--ssh", &dest, "kill", "--all", "--yes"],
    );
    let summary = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{summary}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(summary.contains("targets 1, ended 1"), "{summary}");
    let out = run_cli(
        &bins().relayctl,
        &host,
        &["--ssh", &dest, "leases", "--all", "--json"],
    );
    let leases: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let lease = &leases.as_array().unwrap()[0];
    assert_eq!(lease["state"], "ended");
    assert_eq!(lease["reason"], "killed");
    assert!(
        lease["detail"]
            .as_str()
            .unwrap()
            .starts_with("killed by operator; SIGHUP"),
        "{lease}"
    );
}

/// A daemon killed with -9 (or a reboot) leaves its socket file behind. With no agent of this
/// version installed either, relayctl says no agent runs and uploads nothing: the probe sees the
/// daemon's lock is free, so the socket is a leftover.
#[tokio::test(flavor = "multi_thread")]
async fn relayctl_uploads_nothing_when_only_a_dead_daemons_socket_is_left() {
    let host = SshHost::start().await.unwrap();
    let dest = host.destination();
    host.write_known_hosts().unwrap();
    let session = Session::connect(&SshTransport::new(options(&host)), "ssh-tests")
        .await
        .unwrap();
    drop(session);
    let pid = host
        .agent_daemon_pid()
        .await
        .unwrap()
        .expect("the connection started a daemon");
    host.exec_ok(&format!("kill -9 {pid}")).await.unwrap();
    eventually_async("the daemon to be gone", || async {
        host.agent_daemon_pid().await.unwrap().is_none()
    })
    .await;
    host.exec_ok("rm -f ~/.relay/bin/*; test -S ~/.relay/run/agent.sock")
        .await
        .expect("the dead daemon's socket file is left");
    let out = run_cli(&bins().relayctl, &host, &["--ssh", &dest, "status"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("no agent running"), "{stderr}");
    assert_eq!(remote_bin(&host).await, vec![], "nothing was uploaded");
}
