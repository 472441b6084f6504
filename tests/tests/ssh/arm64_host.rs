//! An aarch64 host: Debian 12 arm64 in a container whose binaries run under qemu-user-static
//! (`deploy/fixtures/build-images.sh --arch arm64`). relay probes the host, deploys the aarch64
//! agent that `deploy/build-agents.sh` built, and a shell there lives through a detach, a new
//! connection and a live upgrade exactly as on an x86_64 host.
//!
//! Emulated: nothing here measures speed, and limits on start-ups are scaled
//! ([`SshHost::start_limit`]).

use std::path::Path;

use relay_tests::fixture::{portable_agents, Arch, HostSpec};
use relay_tests::TestHome;

use super::*;

const AARCH64_TARGET: &str = "aarch64-unknown-linux-gnu";
const X86_64_TARGET: &str = "x86_64-unknown-linux-gnu";

/// ELF `e_machine` of a binary (bytes 18..20, little-endian): 183 is aarch64, 62 x86_64.
fn elf_machine(path: &Path) -> u16 {
    let bytes = std::fs::read(path).unwrap();
    assert_eq!(
        &bytes[..4],
        b"\x7fELF",
        "{} is not an ELF file",
        path.display()
    );
    u16::from_le_bytes([bytes[18], bytes[19]])
}

/// The whole path on one emulated host: the probe picks the aarch64 agent (not this machine's
/// x86_64 one, which sits in the same directory), the daemon runs under qemu and the fault
/// suite's inspection finds it, a login shell there says `aarch64`, and a shell variable set
/// before survives both a detach plus reconnect and `relayctl upgrade` (same pid, same PTY,
/// same daemon process).
#[tokio::test(flavor = "multi_thread")]
async fn an_aarch64_host_gets_the_aarch64_agent_and_keeps_its_shell() {
    let agents = tokio::task::spawn_blocking(portable_agents)
        .await
        .unwrap()
        .unwrap();
    let aarch64 = agents.join(format!("relay-agent-{AARCH64_TARGET}"));
    assert!(
        aarch64.is_file(),
        "deploy/build-agents.sh built no aarch64 agent ({} is missing): \
         rustup target add {AARCH64_TARGET}",
        aarch64.display()
    );
    assert_eq!(elf_machine(&aarch64), 183, "an aarch64 ELF binary");
    let x86_64 = agents.join(format!("relay-agent-{X86_64_TARGET}"));

    let host = SshHost::start_with(HostSpec {
        arch: Arch::Arm64,
        ..HostSpec::default()
    })
    .await
    .unwrap();
    let machine = host.exec_ok("uname -m").await.unwrap();
    assert_eq!(machine.out(), "aarch64", "the fixture is an aarch64 host");

    // Deploy by probe: the directory holds agents for several targets and the host's
    // `uname -sm` decides.
    host.write_known_hosts().unwrap();
    let (transport, session, uploaded) = connect_deploying(&host, &agents, "arm64", &aarch64).await;
    if x86_64.is_file() {
        assert_ne!(uploaded[0].1, local_sha256(&x86_64), "not the x86_64 one");
    }

    // A login shell in a pane.
    let pane = PaneKey::new("arm64", "tab", "0");
    let (binding, pid, mut handle) = login_pane(&session, &pane).await;
    // The typed line is echoed too; only the shell's answer has the expanded values.
    run_line(
        &host,
        &session,
        &binding,
        &mut handle,
        "MARK=kept-$((6*7)); echo arch=$(uname -m) pid=$$",
        &format!("arch=aarch64 pid={pid}"),
    )
    .await;

    // The daemon runs under qemu (the process name is the interpreter's); host-side
    // inspection still finds it by its command line, and the shell as its child.
    let daemon = host
        .agent_daemon_pid()
        .await
        .unwrap()
        .expect("inspection finds the agent daemon run by qemu");
    assert_eq!(host.shell_pids().await.unwrap(), vec![pid]);

    // Detach, close the connection, come back on a new one: the same shell.
    detach_and_come_back(&host, &transport, "arm64", (session, handle), &binding, pid).await;

    // Live upgrade to the installed aarch64 agent (named, so the same version is allowed),
    // with relayctl over SSH as an operator would run it.
    let remote_home = host.exec_ok("echo $HOME").await.unwrap();
    let installed = format!("{}/.relay/bin/{}", remote_home.out(), uploaded[0].0);
    let home = TestHome::new();
    let config = host.base_config().unwrap();
    let relayctl = |args: &[&str]| {
        let mut cmd = home.command(&bins().relayctl);
        cmd.args(["--ssh", &host.destination(), "-F"])
            .arg(&config)
            .arg("-i")
            .arg(host.key_path())
            .args(args)
            .env("SSH_AUTH_SOCK", "")
            .env("RELAY_AGENT_DIR", &agents)
            .stdin(std::process::Stdio::null());
        async move { tokio::process::Command::from(cmd).output().await }
    };
    let out = relayctl(&["upgrade", "--to", &installed, "--yes"])
        .await
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{said}");
    assert!(said.contains("1 shell(s) handed over"), "{said}");
    let status = relayctl(&["status"]).await.unwrap();
    let status = String::from_utf8_lossy(&status.stdout).into_owned();
    assert!(status.contains("upgraded from:"), "{status}");
    assert_eq!(
        host.agent_daemon_pid().await.unwrap(),
        Some(daemon),
        "the upgrade ran in the daemon's own process"
    );

    let (session, mut handle) = reattach(&host, &transport, "arm64", &binding, pid).await;
    run_line(
        &host,
        &session,
        &binding,
        &mut handle,
        "echo mark=$MARK pid=$$ upgraded",
        &format!("mark=kept-42 pid={pid} upgraded"),
    )
    .await;
    assert_eq!(
        remote_bin(&host).await,
        uploaded,
        "nothing else was deployed"
    );
}
