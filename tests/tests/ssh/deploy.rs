//! Auto-deploy: first connect uploads, later ones verify in place, corrupt binaries are replaced,
//! noisy login shells are tolerated, and a running older daemon is never replaced (rule H).

use super::*;
use relay_connector::ConnectOptions;

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

/// Records the kind of every deploy event (one `uploading` per upload run, which starts at
/// `sent: 0`).
fn recording(opts: &mut SshOptions) -> Arc<std::sync::Mutex<Vec<&'static str>>> {
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let into = seen.clone();
    opts.progress = Some(Arc::new(move |ev: &DeployEvent| {
        let kind = match ev {
            DeployEvent::Probed { .. } => "probed",
            DeployEvent::AlreadyPresent { .. } => "present",
            DeployEvent::Uploading { sent: 0, .. } => "uploading",
            DeployEvent::Uploading { .. } => return,
            DeployEvent::Installed { .. } => "installed",
        };
        into.lock().unwrap().push(kind);
    }));
    seen
}

/// The `total` of each upload run `progress` reported.
fn upload_totals(opts: &mut SshOptions) -> Arc<std::sync::Mutex<Vec<u64>>> {
    let totals = Arc::new(std::sync::Mutex::new(Vec::new()));
    let into = totals.clone();
    opts.progress = Some(Arc::new(move |ev: &DeployEvent| {
        if let DeployEvent::Uploading { sent: 0, total } = ev {
            into.lock().unwrap().push(*total);
        }
    }));
    totals
}

/// Connects with `transport` and returns the deploy events of that connect.
async fn connect_seeing(
    transport: &SshTransport,
    seen: &std::sync::Mutex<Vec<&'static str>>,
) -> (Session, Vec<&'static str>) {
    seen.lock().unwrap().clear();
    let session = Session::connect(transport, "ssh-tests").await.unwrap();
    session.list_leases().await.unwrap();
    let events = std::mem::take(&mut *seen.lock().unwrap());
    (session, events)
}

/// A transport probes and uploads once (gzip-compressed: the fixture has gzip); its reconnects
/// run the bridge straight away, and a file that went missing or was corrupted meanwhile is
/// probed for and deployed again, never executed unverified.
#[tokio::test(flavor = "multi_thread")]
async fn one_transport_reconnects_without_probing_and_redeploys_what_went_missing() {
    let host = SshHost::start().await.unwrap();
    host.write_known_hosts().unwrap();
    let mut opts = options(&host);
    let seen = recording(&mut opts);
    let transport = SshTransport::new(opts);

    let (session, events) = connect_seeing(&transport, &seen).await;
    assert_eq!(events, ["probed", "uploading", "installed"]);
    let report = transport.last_deploy().unwrap();
    let size = std::fs::metadata(agent_bin()).unwrap().len();
    assert!(
        report.uploaded && report.bytes * 2 < size,
        "sent {} bytes of a {size}-byte agent: not compressed ({report:?})",
        report.bytes
    );
    let name = report.remote_path.replace(".relay/bin/", "");
    assert_eq!(remote_bin(&host).await, vec![(name, report.sha256.clone())]);
    drop(session);

    let (session, events) = connect_seeing(&transport, &seen).await;
    assert_eq!(events, ["present"], "a reconnect probed or uploaded");
    let again = transport.last_deploy().unwrap();
    assert!(!again.uploaded && again.remote_path == report.remote_path);
    drop(session);
    stop_agent(&host).await;

    // Corrupted behind the transport's back, at the same size (a script over the start of a
    // copy, so only the hash tells): found by the bridge's check, replaced.
    host.exec_ok(&format!(
        "f=~/{0}; cp $f $f.c && rm -f $f && printf '#!/bin/sh\\ntouch /tmp/corrupt-ran\\nexit 0\\n' \
         | dd of=$f.c conv=notrunc 2>/dev/null && chmod 700 $f.c && mv $f.c $f \
         && [ $(wc -c < $f) -eq {size} ]",
        report.remote_path
    ))
    .await
    .unwrap();
    let (session, events) = connect_seeing(&transport, &seen).await;
    assert_eq!(events, ["probed", "present", "uploading", "installed"]);
    assert!(transport.last_deploy().unwrap().replaced_corrupt);
    let ran = host.exec("test -e /tmp/corrupt-ran").await.unwrap();
    assert_ne!(ran.code, 0, "the corrupt binary was executed");
    let name = report.remote_path.replace(".relay/bin/", "");
    assert_eq!(remote_bin(&host).await, vec![(name, report.sha256.clone())]);
    drop(session);
    stop_agent(&host).await;

    // Connect-only (`--no-start`) with no daemon: nothing started, nothing uploaded.
    let connect_only = ConnectOptions {
        start_agent: false,
        ..ConnectOptions::new("ssh-tests")
    };
    let Err(err) = Session::connect_with(&transport, &connect_only).await else {
        panic!("a connect-only open found a daemon");
    };
    assert!(matches!(err, Error::NoAgent(_)), "{err:?}");
    assert_eq!(count_procs(&host, "[r]elay-agent-").await, 0);

    // Removed: probed for and uploaded again.
    host.exec_ok("rm -rf ~/.relay/bin").await.unwrap();
    let (_session, events) = connect_seeing(&transport, &seen).await;
    assert_eq!(events, ["probed", "uploading", "installed"]);
    assert_eq!(remote_bin(&host).await.len(), 1);
}

/// Without `gzip` on the host the plain binary is sent; with a `gzip` that fails, the plain
/// binary is sent after it. Either way the installed file is the verified agent.
#[tokio::test(flavor = "multi_thread")]
async fn hosts_without_a_working_gzip_get_the_plain_binary() {
    let size = std::fs::metadata(agent_bin()).unwrap().len();
    let sha = local_sha256(agent_bin());
    let broken = r"#!/bin/sh\necho gzip is out of order >&2\nexit 1\n";
    let setups = [
        ("no gzip", "mv /usr/bin/gzip /usr/bin/gzip.off".to_string()),
        (
            "a failing gzip",
            format!("mv /usr/bin/gzip /usr/bin/gzip.off && printf '{broken}' > /usr/bin/gzip && chmod 755 /usr/bin/gzip"),
        ),
    ];
    for (what, setup) in setups {
        let host = SshHost::start().await.unwrap();
        let done = host.exec_as("root", &setup).await.unwrap();
        assert_eq!(done.code, 0, "{what}: {done:?}");
        host.write_known_hosts().unwrap();
        let mut opts = options(&host);
        let totals = upload_totals(&mut opts);
        let transport = SshTransport::new(opts);
        let session = Session::connect(&transport, "ssh-tests")
            .await
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        session.list_leases().await.unwrap();
        let report = transport.last_deploy().unwrap();
        assert!(report.uploaded, "{what}: {report:?}");
        assert_eq!(report.bytes, size, "{what}: not the plain binary");
        let totals = totals.lock().unwrap().clone();
        match what {
            "no gzip" => assert_eq!(totals, [size], "{what}: one plain upload"),
            _ => assert!(
                totals.len() == 2 && totals[0] * 2 < size && totals[1] == size,
                "{what}: a compressed upload, then the plain one: {totals:?}"
            ),
        }
        let files = remote_bin(&host).await;
        assert_eq!(files.len(), 1, "{what}: {files:?}");
        assert_eq!(files[0].1, sha, "{what}");
    }
}
