//! Auto-deploy: first connect uploads, later ones verify in place, corrupt binaries are replaced,
//! noisy login shells are tolerated, and a running older daemon is never replaced (rule H).

use super::*;

#[tokio::test(flavor = "multi_thread")]
async fn fresh_host_gets_the_agent_deployed_once() {
    let host = SshHost::start().await.unwrap();
    host.write_known_hosts().unwrap();
    let mut opts = options(&host);
    let uploads = counting(&mut opts);
    let transport = SshTransport::new(opts.clone());

    let session = Session::connect(&transport, "ssh-tests").await.unwrap();
    assert_eq!(session.welcome().agent_version, env!("CARGO_PKG_VERSION"));
    let report = transport.last_deploy().unwrap();
    assert!(report.uploaded, "{report:?}");
    assert_eq!(report.target, "x86_64-unknown-linux-gnu");
    assert!(uploads.load(Ordering::SeqCst) > 0);

    let sha = local_sha256(agent_bin());
    let name = format!("relay-agent-{}-{}", env!("CARGO_PKG_VERSION"), &sha[..16]);
    assert_eq!(remote_bin(&host).await, vec![(name.clone(), sha.clone())]);
    let mode = host
        .exec_ok(&format!("stat -c %a ~/.relay/bin/{name}"))
        .await
        .unwrap();
    assert_eq!(mode.out(), "700");
    drop(session);

    // Second connect: verified in place, nothing uploaded.
    let mut opts2 = opts.clone();
    let uploads2 = counting(&mut opts2);
    let transport2 = SshTransport::new(opts2);
    let session2 = Session::connect(&transport2, "ssh-tests").await.unwrap();
    let report2 = transport2.last_deploy().unwrap();
    assert!(!report2.uploaded, "{report2:?}");
    assert_eq!(uploads2.load(Ordering::SeqCst), 0);
    assert_eq!(remote_bin(&host).await, vec![(name, sha)]);
    session2.list_leases().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn corrupted_binary_is_replaced_and_never_executed() {
    let host = SshHost::start().await.unwrap();
    // The daemon started by the first bridge must not be what answers later.
    let (_, report) = deploy_then_stop(&host).await;
    // Junk that leaves evidence if it is ever executed (`rm` first: writing over a binary that
    // is still running fails with "Text file busy").
    host.exec_ok(&format!(
        "rm -f ~/{0} && printf '#!/bin/sh\\ntouch /tmp/corrupt-ran\\n' > ~/{0} && chmod 700 ~/{0}",
        report.remote_path
    ))
    .await
    .unwrap();

    let transport2 = trusted(&host);
    let session = Session::connect(&transport2, "ssh-tests").await.unwrap();
    let report2 = transport2.last_deploy().unwrap();
    assert!(report2.uploaded && report2.replaced_corrupt, "{report2:?}");
    let files = remote_bin(&host).await;
    assert_eq!(files.len(), 1, "{files:?}");
    assert_eq!(files[0].1, report.sha256);
    let ran = host.exec("test -e /tmp/corrupt-ran").await.unwrap();
    assert_ne!(ran.code, 0, "the corrupt binary was executed");
    session.list_leases().await.unwrap();
}

/// Connects once to `host` (deploying the agent), disconnects, and stops the agent there;
/// returns the transport (host key trusted) and its deploy report.
async fn deploy_then_stop(host: &SshHost) -> (SshTransport, DeployReport) {
    let transport = trusted(host);
    drop(Session::connect(&transport, "ssh-tests").await.unwrap());
    let report = transport.last_deploy().unwrap();
    stop_agent(host).await;
    (transport, report)
}

/// Stops the host's daemon and waits until no agent process (daemon or bridge) runs there.
async fn stop_agent(host: &SshHost) {
    host.exec("pkill -u relay -f '[r]elay-agent-.* daemon'; true")
        .await
        .unwrap();
    eventually_async("the host's agent processes to stop", || async {
        count_procs(host, "[r]elay-agent-").await == 0
    })
    .await;
}

/// Regression: an installed file that is not a usable agent was either never repaired (right
/// content without the execute bit: every connect failed with a hint about ~/.bashrc), or
/// repaired wrongly (a directory at the name: the upload was moved *into* it and reported as
/// installed), or hashed at any size (a huge file: every connect timed out while the host kept
/// hashing). Each is now refused before it runs and replaced, and the connect succeeds.
#[tokio::test(flavor = "multi_thread")]
async fn unusable_files_at_the_agents_name_are_repaired() {
    let host = SshHost::start().await.unwrap();
    let (_, report) = deploy_then_stop(&host).await;
    let file = format!("~/{}", report.remote_path);
    let breakages = [
        ("no execute bit", format!("chmod 600 {file}"), false),
        ("a directory", format!("rm -f {file} && mkdir {file}"), true),
        (
            "a huge sparse file",
            format!("rm -rf {file} && truncate -s 40G {file}"),
            true,
        ),
    ];
    for (what, breakage, uploaded) in breakages {
        host.exec_ok(&breakage).await.unwrap();
        let transport = trusted(&host);
        let session = tokio::time::timeout(
            Duration::from_secs(30),
            Session::connect(&transport, "ssh-tests"),
        )
        .await
        .unwrap_or_else(|_| panic!("{what}: connect hung"))
        .unwrap_or_else(|e| panic!("{what}: {e}"));
        session.list_leases().await.unwrap();
        let again = transport.last_deploy().unwrap();
        assert_eq!(again.uploaded, uploaded, "{what}: {again:?}");
        assert_eq!(
            remote_bin(&host).await,
            vec![(
                report.remote_path.replace(".relay/bin/", ""),
                report.sha256.clone()
            )],
            "{what}: one verified agent, nothing else in ~/.relay/bin"
        );
        drop(session);
        stop_agent(&host).await;
    }
    assert_eq!(
        count_procs(&host, "[s]ha256sum").await,
        0,
        "no hash of the huge file left running"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn noisy_login_shell_still_deploys_and_connects() {
    let host = SshHost::start().await.unwrap();
    host.exec_ok(
        "{ echo 'echo noise from bashrc'; echo 'echo noise on stderr >&2'; cat ~/.bashrc; } > ~/.b \
         && mv ~/.b ~/.bashrc && echo 'echo noise from profile' >> ~/.profile",
    )
    .await
    .unwrap();
    host.exec_as("root", "echo 'Welcome to the noisy host' > /etc/motd")
        .await
        .unwrap();
    let transport = trusted(&host);
    // Control: OpenSSH's own client sees the noise on an exec channel's stdout.
    let config = host
        .write_ssh_config("noisy", "  IdentitiesOnly yes\n")
        .unwrap();
    let control = std::process::Command::new("ssh")
        .args([
            "-F".as_ref(),
            config.as_os_str(),
            "noisy".as_ref(),
            "true".as_ref(),
        ])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&control.stdout).contains("noise from bashrc"),
        "the fixture is not noisy: {control:?}"
    );

    let session = Session::connect(&transport, "ssh-tests").await.unwrap();
    assert!(transport.last_deploy().unwrap().uploaded);
    let pane = PaneKey::new("noisy", "t", "0");
    pane_with(
        &session,
        &pane,
        "echo hello-through-noise; sleep 100",
        "hello-through-noise",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn older_daemon_keeps_its_ptys_when_a_newer_connector_connects() {
    let host = SshHost::start().await.unwrap();
    // Deploy, then replace the daemon the bridge started with an "older" one.
    let (transport, report) = deploy_then_stop(&host).await;
    let remote = report.remote_path;
    host.exec_ok(&format!(
        "RELAY_AGENT_ADVERTISE_VERSION=0.0.1-old ~/{remote} daemon </dev/null >/dev/null 2>&1"
    ))
    .await
    .unwrap();
    eventually_async("the old daemon to run", || async {
        count_procs(&host, "[r]elay-agent-.* daemon").await == 1
    })
    .await;
    let daemon_pid = host
        .exec_ok("pgrep -u relay -f '[r]elay-agent-.* daemon'")
        .await
        .unwrap()
        .out()
        .to_string();

    let session = Session::connect(&transport, "ssh-tests").await.unwrap();
    assert_eq!(session.welcome().agent_version, "0.0.1-old");
    let pane = PaneKey::new("old", "tab", "0");
    let pid = pane_with(&session, &pane, "echo old-pane; sleep 1000", "old-pane").await;
    drop(session);

    // A newer connector connects through the normal path: same daemon, same PTY.
    let session = Session::connect(&trusted(&host), "ssh-tests")
        .await
        .unwrap();
    assert_eq!(session.welcome().agent_version, "0.0.1-old");
    let leases = session.list_leases().await.unwrap();
    let lease = leases.iter().find(|l| l.binding.pane == pane).unwrap();
    assert_eq!(lease.pid, Some(pid));
    assert_ne!(lease.state, LeaseState::Ended);
    let now = host
        .exec_ok("pgrep -u relay -f '[r]elay-agent-.* daemon'")
        .await
        .unwrap();
    assert_eq!(now.out(), daemon_pid, "the daemon was restarted");
    host.exec_ok(&format!("kill -0 {pid}")).await.unwrap();
}
