//! The SSH transport against real OpenSSH servers in containers (issue 3): deploy, host keys,
//! ssh_config, one connection per host, PTYs outliving the connection, older daemons.
//!
//! Needs a Docker engine and the fixture image (`deploy/fixtures/build-images.sh`, built on
//! demand), and the workspace binaries (`cargo build --workspace --bins`).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use relay_connector::ssh::{AgentSource, DeployEvent, HostKeyPolicy, SshOptions, SshTransport};
use relay_connector::transport::{OpenFuture, Transport};
use relay_connector::{Error, Session};
use relay_protocol::{LeaseState, PaneKey, SpawnSpec};
use relay_tests::fixture::SshHost;
use relay_tests::{bins, read_until_text, Collected};

/// A private copy of this build's agent binary, so that a rebuild during the test run cannot
/// change what is deployed between two connects of one test.
fn agent_bin() -> &'static Path {
    static COPY: OnceLock<(tempfile::TempDir, PathBuf)> = OnceLock::new();
    &COPY
        .get_or_init(|| {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("relay-agent");
            std::fs::copy(&bins().agent, &path).unwrap();
            (dir, path)
        })
        .1
}

/// Options for `host` with only the fixture's key, an isolated ssh config (no user files, no
/// ssh-agent) and this build's agent binary.
fn options(host: &SshHost) -> SshOptions {
    let config = host.home().join(".ssh/base_config");
    std::fs::write(
        &config,
        format!(
            "Host *\n  UserKnownHostsFile {}\n  IdentitiesOnly yes\n  IdentityFile {}\n",
            host.known_hosts_path().display(),
            // Keeps OpenSSH's default keys (the real ~/.ssh/id_*) out of the tests.
            host.home().join(".ssh/no-default-key").display()
        ),
    )
    .unwrap();
    let mut opts = SshOptions {
        destination: host.destination(),
        agent: AgentSource::File(agent_bin().to_path_buf()),
        ..SshOptions::default()
    };
    opts.resolve.config_file = Some(config);
    opts.auth.identities = vec![host.key_path().to_path_buf()];
    opts.auth.no_agent = true;
    opts
}

/// A transport for `host` that trusts its host key.
fn trusted(host: &SshHost) -> SshTransport {
    host.write_known_hosts().unwrap();
    SshTransport::new(options(host))
}

/// Counts upload progress events.
fn counting(opts: &mut SshOptions) -> Arc<AtomicUsize> {
    let uploads = Arc::new(AtomicUsize::new(0));
    let n = uploads.clone();
    opts.progress = Some(Arc::new(move |ev: &DeployEvent| {
        if matches!(ev, DeployEvent::Uploading { .. }) {
            n.fetch_add(1, Ordering::SeqCst);
        }
    }));
    uploads
}

fn local_sha256(path: &Path) -> String {
    let out = std::process::Command::new("sha256sum")
        .arg(path)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap()
        .to_string()
}

/// sha256 of every file in ~relay/.relay/bin, as `name hash` lines (sorted).
async fn remote_bin(host: &SshHost) -> Vec<(String, String)> {
    let out = host
        .exec("cd ~/.relay/bin 2>/dev/null && for f in .* *; do [ -f \"$f\" ] && sha256sum \"$f\"; done; true")
        .await
        .unwrap();
    let mut v: Vec<(String, String)> = out
        .stdout
        .lines()
        .filter_map(|l| {
            let (h, f) = l.split_once("  ")?;
            Some((f.to_string(), h.to_string()))
        })
        .collect();
    v.sort();
    v
}

fn shell(cmd: &str) -> SpawnSpec {
    SpawnSpec {
        command: vec!["sh".into(), "-c".into(), cmd.into()],
        ..SpawnSpec::default()
    }
}

/// Creates and attaches a pane running `cmd`, and waits for `expect` in its output.
async fn pane_with(session: &Session, pane: &PaneKey, cmd: &str, expect: &str) -> u32 {
    let created = session.create(pane.clone(), shell(cmd)).await.unwrap();
    let mut handle = session
        .attach(pane.clone(), Some(created.binding.pty), Some(0))
        .await
        .unwrap();
    let mut out = Collected::default();
    read_until_text(&mut handle, &mut out, expect)
        .await
        .unwrap();
    let leases = session.list_leases().await.unwrap();
    leases
        .iter()
        .find(|l| l.binding == created.binding)
        .and_then(|l| l.pid)
        .expect("the new lease has a pid")
}

/// Established TCP connections to the container's port 22, from /proc/net/tcp{,6}.
async fn ssh_connections(host: &SshHost) -> usize {
    let out = host
        .exec("cat /proc/net/tcp /proc/net/tcp6 2>/dev/null")
        .await
        .unwrap();
    out.stdout
        .lines()
        .filter(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.len() > 3 && f[1].ends_with(":0016") && f[3] == "01"
        })
        .count()
}

async fn count_procs(host: &SshHost, pattern: &str) -> usize {
    let out = host
        .exec(&format!("pgrep -u relay -f -- '{pattern}' | wc -l"))
        .await
        .unwrap();
    out.out().parse().unwrap()
}

async fn eventually_async<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !check().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

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
    let transport = trusted(&host);
    drop(Session::connect(&transport, "ssh-tests").await.unwrap());
    let report = transport.last_deploy().unwrap();
    // The daemon started by the first bridge must not be what answers later: stop it.
    host.exec("pkill -u relay -f '[r]elay-agent-.* daemon'; true")
        .await
        .unwrap();
    // Junk that leaves evidence if it is ever executed.
    host.exec_ok(&format!(
        "printf '#!/bin/sh\\ntouch /tmp/corrupt-ran\\n' > ~/{0} && chmod 700 ~/{0}",
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
async fn unknown_host_key_is_refused_with_its_fingerprint() {
    let host = SshHost::start().await.unwrap();
    let transport = SshTransport::new(options(&host)); // empty known_hosts
    let err = Session::connect(&transport, "ssh-tests").await.unwrap_err();
    let Error::HostKey(msg) = &err else {
        panic!("expected a host key error, got {err:?}");
    };
    assert!(!err.is_transient());
    assert!(
        msg.contains("SHA256:") && msg.contains("--accept-new"),
        "{msg}"
    );
    let key_file = host.home().join("host_key.pub");
    std::fs::write(&key_file, &host.files().host_key).unwrap();
    let fp = std::process::Command::new("ssh-keygen")
        .arg("-lf")
        .arg(&key_file)
        .output()
        .unwrap();
    let fp = String::from_utf8_lossy(&fp.stdout);
    let fp = fp.split_whitespace().nth(1).unwrap();
    assert!(msg.contains(fp), "{msg} does not name {fp}");
    // Nothing happened on the host.
    assert_ne!(host.exec("test -e ~/.relay").await.unwrap().code, 0);
    assert!(!host.known_hosts_path().exists());
}

#[tokio::test(flavor = "multi_thread")]
async fn changed_host_key_is_refused_naming_file_and_line() {
    let host = SshHost::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let other = dir.path().join("k");
    let st = std::process::Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-f"])
        .arg(&other)
        .status()
        .unwrap();
    assert!(st.success());
    let other_pub = std::fs::read_to_string(other.with_extension("pub")).unwrap();
    let other_pub: Vec<&str> = other_pub.split_whitespace().collect();
    let kh = host.known_hosts_path();
    std::fs::write(
        &kh,
        format!(
            "# relay test\n[127.0.0.1]:{} {} {}\n",
            host.port(),
            other_pub[0],
            other_pub[1]
        ),
    )
    .unwrap();
    let mut opts = options(&host);
    opts.host_key_policy = Some(HostKeyPolicy::AcceptNew); // even accept-new refuses a change
    let err = Session::connect(&SshTransport::new(opts), "ssh-tests")
        .await
        .unwrap_err();
    let Error::HostKey(msg) = &err else {
        panic!("expected a host key error, got {err:?}");
    };
    assert!(msg.contains("CHANGED"), "{msg}");
    assert!(msg.contains(&format!("{} line 2", kh.display())), "{msg}");
    assert_ne!(host.exec("test -e ~/.relay").await.unwrap().code, 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn accept_new_records_the_key_once_then_strict_passes() {
    let host = SshHost::start().await.unwrap();
    let mut opts = options(&host);
    opts.host_key_policy = Some(HostKeyPolicy::AcceptNew);
    drop(
        Session::connect(&SshTransport::new(opts.clone()), "ssh-tests")
            .await
            .unwrap(),
    );
    let text = std::fs::read_to_string(host.known_hosts_path()).unwrap();
    assert_eq!(text.trim(), host.known_hosts_line(), "{text}");
    // Strict now passes, and accept-new adds nothing more.
    drop(
        Session::connect(&SshTransport::new(options(&host)), "ssh-tests")
            .await
            .unwrap(),
    );
    drop(
        Session::connect(&SshTransport::new(opts), "ssh-tests")
            .await
            .unwrap(),
    );
    let text2 = std::fs::read_to_string(host.known_hosts_path()).unwrap();
    assert_eq!(text, text2);
}

/// Counts how often the session opened the transport.
struct CountingTransport {
    inner: SshTransport,
    opens: AtomicUsize,
}

impl Transport for CountingTransport {
    fn open(&self) -> OpenFuture<'_> {
        self.opens.fetch_add(1, Ordering::SeqCst);
        self.inner.open()
    }

    fn describe(&self) -> String {
        self.inner.describe()
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn two_workspaces_share_one_ssh_connection_and_one_channel() {
    let host = SshHost::start().await.unwrap();
    let transport = CountingTransport {
        inner: trusted(&host),
        opens: AtomicUsize::new(0),
    };
    let session = Session::connect(&transport, "ssh-tests").await.unwrap();
    for ws in ["ws-a", "ws-b"] {
        for leaf in ["0", "1"] {
            let pane = PaneKey::new(ws, "tab", leaf);
            let marker = format!("up-{ws}-{leaf}");
            pane_with(
                &session,
                &pane,
                &format!("echo {marker}; sleep 1000"),
                &marker,
            )
            .await;
        }
    }
    assert_eq!(transport.opens.load(Ordering::SeqCst), 1);
    assert_eq!(ssh_connections(&host).await, 1, "one SSH connection");
    assert_eq!(
        count_procs(&host, "[r]elay-agent-.* bridge").await,
        1,
        "one exec channel running the bridge"
    );
    let leases = session.list_leases().await.unwrap();
    assert_eq!(leases.len(), 4);
    drop(session);
    eventually_async("the SSH connection to close", || async {
        ssh_connections(&host).await == 0
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn closing_the_ssh_connection_leaves_remote_ptys_running() {
    let host = SshHost::start().await.unwrap();
    let transport = trusted(&host);
    let session = Session::connect(&transport, "ssh-tests").await.unwrap();
    let pane = PaneKey::new("keep", "tab", "0");
    let pid = pane_with(&session, &pane, "echo alive; sleep 1000", "alive").await;
    drop(session);
    eventually_async("the SSH connection to close", || async {
        ssh_connections(&host).await == 0
    })
    .await;
    assert_eq!(count_procs(&host, "[r]elay-agent-.* bridge").await, 0);

    let session = Session::connect(&transport, "ssh-tests").await.unwrap();
    let leases = session.list_leases().await.unwrap();
    let lease = leases
        .iter()
        .find(|l| l.binding.pane == pane)
        .expect("the pane's lease survived");
    assert_eq!(lease.state, LeaseState::Detached);
    assert_eq!(lease.pid, Some(pid));
    host.exec_ok(&format!("kill -0 {pid}")).await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn ssh_config_alias_with_user_port_and_identity_file_is_honoured() {
    let host = SshHost::start().await.unwrap();
    host.write_known_hosts().unwrap();
    let config = host.write_ssh_config("fixture-box", "").unwrap();
    let opts = |config: PathBuf| {
        let mut o = SshOptions {
            destination: "fixture-box".into(),
            agent: AgentSource::File(agent_bin().to_path_buf()),
            ..SshOptions::default()
        };
        o.resolve.config_file = Some(config);
        o.auth.no_agent = true;
        o
    };
    let transport = SshTransport::new(opts(config));
    let cfg = transport.resolve().await.unwrap();
    assert_eq!(cfg.display(), format!("relay@127.0.0.1:{}", host.port()));
    let session = Session::connect(&transport, "ssh-tests").await.unwrap();
    session.list_leases().await.unwrap();

    // Control: the same alias without its IdentityFile cannot log in, and the error says who
    // and what was tried.
    let bare = host.home().join(".ssh/config-no-key");
    std::fs::write(
        &bare,
        format!(
            "Host fixture-box\n  HostName 127.0.0.1\n  User relay\n  Port {}\n  \
             IdentityFile /nonexistent/key\n  UserKnownHostsFile {}\n",
            host.port(),
            host.known_hosts_path().display()
        ),
    )
    .unwrap();
    let err = Session::connect(&SshTransport::new(opts(bare)), "ssh-tests")
        .await
        .unwrap_err();
    let Error::Auth(msg) = &err else {
        panic!("expected an auth error, got {err:?}");
    };
    assert!(!err.is_transient());
    assert!(
        msg.contains("\"relay\"") && msg.contains("127.0.0.1"),
        "{msg}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn older_daemon_keeps_its_ptys_when_a_newer_connector_connects() {
    let host = SshHost::start().await.unwrap();
    let transport = trusted(&host);
    // Deploy, then replace the daemon the bridge started with an "older" one.
    drop(Session::connect(&transport, "ssh-tests").await.unwrap());
    let remote = transport.last_deploy().unwrap().remote_path;
    host.exec("pkill -u relay -f '[r]elay-agent-.* daemon'; true")
        .await
        .unwrap();
    eventually_async("the first daemon to stop", || async {
        count_procs(&host, "[r]elay-agent-.* daemon").await == 0
    })
    .await;
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

    // --accept-new: recorded once, then the leases of the host (a pane made over SSH).
    let out = run_cli(
        &bins().relayctl,
        &host,
        &["--ssh", &dest, "--accept-new", "leases", "--json"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let session = Session::connect(&SshTransport::new(options(&host)), "ssh-tests")
        .await
        .unwrap();
    let pane = PaneKey::new("cli", "tab", "0");
    let pid = pane_with(&session, &pane, "echo cli-pane; sleep 1000", "cli-pane").await;
    drop(session);
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
}

/// Remote IPv4 addresses of established connections to port 22 in the container.
async fn ssh_peers(host: &SshHost) -> Vec<String> {
    let out = host.exec("cat /proc/net/tcp").await.unwrap();
    out.stdout
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.len() <= 3 || !f[1].ends_with(":0016") || f[3] != "01" {
                return None;
            }
            let hex = u32::from_str_radix(f[2].split(':').next()?, 16).ok()?;
            Some(std::net::Ipv4Addr::from(hex.swap_bytes()).to_string())
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn proxy_jump_reaches_a_host_through_another() {
    let (jump, target) = relay_tests::fixture::two_hosts().await.unwrap();
    let (jump_ip, target_ip) = (
        jump.bridge_ip().await.unwrap(),
        target.bridge_ip().await.unwrap(),
    );
    let kh = jump.known_hosts_path();
    std::fs::write(
        &kh,
        format!(
            "{}\n{target_ip} {}\n",
            jump.known_hosts_line(),
            jump.files().host_key
        ),
    )
    .unwrap();
    let config = jump.home().join(".ssh/jump_config");
    std::fs::write(
        &config,
        format!(
            "Host jumpbox\n  HostName 127.0.0.1\n  Port {}\nHost inner\n  HostName {target_ip}\n  \
             ProxyJump jumpbox\nHost *\n  User relay\n  IdentityFile {}\n  IdentitiesOnly yes\n  \
             UserKnownHostsFile {}\n",
            jump.port(),
            jump.key_path().display(),
            kh.display()
        ),
    )
    .unwrap();
    let mut opts = SshOptions {
        destination: "inner".into(),
        agent: AgentSource::File(agent_bin().to_path_buf()),
        ..SshOptions::default()
    };
    opts.resolve.config_file = Some(config);
    opts.auth.no_agent = true;
    let session = Session::connect(&SshTransport::new(opts), "ssh-tests")
        .await
        .unwrap();
    session.list_leases().await.unwrap();
    // The target's only SSH peer is the jump host, and the agent runs on the target.
    assert_eq!(ssh_peers(&target).await, vec![jump_ip]);
    assert_eq!(count_procs(&target, "[r]elay-agent-.* bridge").await, 1);
    assert_eq!(count_procs(&jump, "[r]elay-agent-.* bridge").await, 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn proxy_command_carries_the_connection() {
    let host = SshHost::start().await.unwrap();
    let kh = host.known_hosts_path();
    std::fs::write(&kh, format!("proxied.invalid {}\n", host.files().host_key)).unwrap();
    let config = host.home().join(".ssh/proxy_config");
    // The host name does not resolve: only the ProxyCommand can reach the host.
    std::fs::write(
        &config,
        format!(
            "Host proxied\n  HostName proxied.invalid\n  User relay\n  IdentityFile {}\n  \
             IdentitiesOnly yes\n  UserKnownHostsFile {}\n  ProxyCommand bash -c 'exec \
             3<>/dev/tcp/127.0.0.1/{}; cat <&3 & exec cat >&3' %h\n",
            host.key_path().display(),
            kh.display(),
            host.port()
        ),
    )
    .unwrap();
    let mut opts = SshOptions {
        destination: "proxied".into(),
        agent: AgentSource::File(agent_bin().to_path_buf()),
        ..SshOptions::default()
    };
    opts.resolve.config_file = Some(config);
    opts.auth.no_agent = true;
    let session = Session::connect(&SshTransport::new(opts), "ssh-tests")
        .await
        .unwrap();
    session.list_leases().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn encrypted_key_asks_the_passphrase_callback() {
    let host = SshHost::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("enc_key");
    let st = std::process::Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "s3cret", "-f"])
        .arg(&key)
        .status()
        .unwrap();
    assert!(st.success());
    let public = std::fs::read_to_string(key.with_extension("pub")).unwrap();
    host.exec_ok(&format!(
        "echo '{}' >> ~/.ssh/authorized_keys",
        public.trim()
    ))
    .await
    .unwrap();
    host.write_known_hosts().unwrap();

    // Without a prompt the key is skipped, and the error says so.
    let mut opts = options(&host);
    opts.auth.identities = vec![key.clone()];
    let err = Session::connect(&SshTransport::new(opts.clone()), "ssh-tests")
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::Auth(m) if m.contains("encrypted")),
        "{err:?}"
    );

    let asked = Arc::new(AtomicUsize::new(0));
    let n = asked.clone();
    opts.auth.passphrase = Some(Arc::new(move |path: &Path, attempt: u32| {
        n.fetch_add(1, Ordering::SeqCst);
        assert!(path.ends_with("enc_key"));
        Some(if attempt == 1 { "wrong" } else { "s3cret" }.to_string())
    }));
    let session = Session::connect(&SshTransport::new(opts), "ssh-tests")
        .await
        .unwrap();
    session.list_leases().await.unwrap();
    assert_eq!(asked.load(Ordering::SeqCst), 2);
}
