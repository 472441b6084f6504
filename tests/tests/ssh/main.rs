//! The SSH transport against real OpenSSH servers in containers: deploy, host keys,
//! ssh_config, one connection per host, PTYs outliving the connection, older daemons, the
//! agent's peer-credential check, an emulated aarch64 host.
//!
//! Needs a Docker engine and the fixture image (`deploy/fixtures/build-images.sh`, built on
//! demand), and the workspace binaries (`cargo build --workspace --bins`).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use relay_connector::ssh::{
    AgentSource, DeployEvent, DeployReport, HostKeyPolicy, SshOptions, SshTransport,
};
use relay_connector::transport::{OpenFuture, OpenOptions, Transport};
use relay_connector::PaneHandle;
use relay_connector::{Error, Session};
use relay_protocol::Binding;
use relay_protocol::{LeaseState, PaneKey, SpawnSpec};
use relay_tests::fixture::SshHost;
use relay_tests::{bins, read_until, read_until_text, Collected};

mod arm64_host;
mod broken_hosts;
mod cli;
mod deploy;
mod faults;
mod fixture_faults;
mod host_keys;
mod lossless;
mod no_glibc_host;
mod older_hosts;
mod peer;
mod predict;
mod serve;
mod serve_predict;
mod sessions;
mod ssh_config;
mod windows;

/// This build's agent, copied once for the run.
fn agent_bin() -> &'static Path {
    relay_tests::agent_copy()
}

/// Options for `host` with only the fixture's key, an isolated ssh config (no user files, no
/// ssh-agent) and this build's agent binary.
fn options(host: &SshHost) -> SshOptions {
    host.options(agent_bin()).unwrap()
}

/// A transport for `host` that trusts its host key.
fn trusted(host: &SshHost) -> SshTransport {
    host.write_known_hosts().unwrap();
    SshTransport::new(options(host))
}

/// Options for `destination` that take everything (host, user, key, known_hosts) from the ssh
/// config file `config` alone, with no ssh-agent.
fn config_only(destination: &str, config: PathBuf) -> SshOptions {
    let mut opts = SshOptions {
        destination: destination.into(),
        agent: AgentSource::File(agent_bin().to_path_buf()),
        ..SshOptions::default()
    };
    opts.resolve.config_file = Some(config);
    opts.auth.no_agent = true;
    opts
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

/// Types `line` into the pane and reads its output until `expect` appears (start-up limits
/// scaled for the host, [`SshHost::start_limit`]).
async fn run_line(
    host: &SshHost,
    session: &Session,
    binding: &Binding,
    handle: &mut PaneHandle,
    line: &str,
    expect: &str,
) {
    session
        .input(binding, format!("{line}\r").as_bytes())
        .await
        .unwrap();
    let mut out = Collected::default();
    read_until(handle, &mut out, host.start_limit(20), |c| {
        c.text().contains(expect)
    })
    .await
    .unwrap_or_else(|e| panic!("waiting for {expect:?} after {line:?}: {e}"));
}

/// Connects a fresh session of `workspace` (a new SSH connection) and re-attaches to the pane of
/// `binding`, which must still be that PTY, run by process `pid`.
async fn reattach(
    host: &SshHost,
    transport: &SshTransport,
    workspace: &str,
    binding: &Binding,
    pid: u32,
) -> (Session, PaneHandle) {
    let session = Session::connect(transport, workspace).await.unwrap();
    let leases = session.list_leases().await.unwrap();
    let lease = leases
        .iter()
        .find(|l| l.binding.pane == binding.pane)
        .expect("the pane's lease survived");
    assert_eq!(lease.binding, *binding, "the same PTY, not a new one");
    assert_eq!(lease.pid, Some(pid), "the same shell process");
    host.exec_ok(&format!("kill -0 {pid}")).await.unwrap();
    let handle = session
        .attach(binding.pane.clone(), Some(binding.pty), None)
        .await
        .unwrap();
    (session, handle)
}

/// Creates a login shell in `pane` and attaches to it from offset 0: its binding, its pid (from
/// the lease) and the handle.
async fn login_pane(session: &Session, pane: &PaneKey) -> (Binding, u32, PaneHandle) {
    let created = session
        .create(pane.clone(), SpawnSpec::default())
        .await
        .unwrap();
    let binding = created.binding.clone();
    let pid = session
        .list_leases()
        .await
        .unwrap()
        .iter()
        .find(|l| l.binding == binding)
        .and_then(|l| l.pid)
        .expect("the new lease has a pid");
    let handle = session
        .attach(pane.clone(), Some(binding.pty), Some(0))
        .await
        .unwrap();
    (binding, pid, handle)
}

/// Detaches `binding`, closes `session`'s SSH connection, comes back on a new one
/// ([`reattach`]) and checks that the shell `pid` still has the `MARK=kept-42` set before.
async fn detach_and_come_back(
    host: &SshHost,
    transport: &SshTransport,
    workspace: &str,
    (session, handle): (Session, PaneHandle),
    binding: &Binding,
    pid: u32,
) {
    session.detach(binding).await.unwrap();
    drop((handle, session));
    eventually_async("the SSH connection to close", || async {
        ssh_connections(host).await == 0
    })
    .await;
    let (session, mut handle) = reattach(host, transport, workspace, binding, pid).await;
    run_line(
        host,
        &session,
        binding,
        &mut handle,
        "echo mark=$MARK pid=$$ back",
        &format!("mark=kept-42 pid={pid} back"),
    )
    .await;
}

/// Connects a session of `workspace` to `host` with the agents of directory `agents` on offer
/// and checks that the one file uploaded is `expected` (the probe's choice): the transport, the
/// session and the host's `~/.relay/bin` listing.
async fn connect_deploying(
    host: &SshHost,
    agents: &Path,
    workspace: &str,
    expected: &Path,
) -> (SshTransport, Session, Vec<(String, String)>) {
    let mut opts = options(host);
    opts.agent = AgentSource::Dir(agents.to_path_buf());
    let transport = SshTransport::new(opts);
    let session = Session::connect(&transport, workspace).await.unwrap();
    let uploaded = remote_bin(host).await;
    assert_eq!(uploaded.len(), 1, "{uploaded:?}");
    assert_eq!(
        uploaded[0].1,
        local_sha256(expected),
        "{} was deployed",
        expected.display()
    );
    (transport, session, uploaded)
}
