//! A host without glibc (`deploy/fixtures/build-noglibc-image.sh`): busybox for every user
//! program, and sshd running on a private copy of glibc that nothing else can load. This is what
//! relay meets on Alpine, busybox and distroless hosts: the glibc agents cannot start there, so
//! the probe must see that and deploy the static (musl) agent `deploy/build-agents.sh` builds.

use relay_tests::fixture::{portable_agents, HostSpec};
use relay_tests::TestHome;

use super::*;

const GNU_TARGET: &str = "x86_64-unknown-linux-gnu";
const STATIC_TARGET: &str = "x86_64-unknown-linux-musl";

/// Whether `readelf -l` lists a program interpreter for `path` (a dynamically linked binary).
fn has_interpreter(path: &Path) -> bool {
    let out = std::process::Command::new("readelf")
        .arg("-l")
        .arg(path)
        .output()
        .expect("readelf (binutils) runs");
    assert!(out.status.success(), "readelf -l {}", path.display());
    String::from_utf8_lossy(&out.stdout).contains("program interpreter")
}

/// The whole path on a host without glibc: an empty agent directory names the static agent the
/// host needs; a directory holding only the glibc agent is refused before any upload, naming the
/// cause and the static agent to build; with the static agent
/// next to it, the probe deploys that one, a login shell (busybox sh) answers in a pane and
/// lives through a detach and a new connection, and a piped `relay shell HOST -- CMD` there
/// delivers its output and exit status.
#[tokio::test(flavor = "multi_thread")]
async fn a_host_without_glibc_gets_the_static_agent_and_keeps_its_shell() {
    let agents = tokio::task::spawn_blocking(portable_agents)
        .await
        .unwrap()
        .unwrap();
    let gnu = agents.join(format!("relay-agent-{GNU_TARGET}"));
    let musl = agents.join(format!("relay-agent-{STATIC_TARGET}"));
    assert!(
        musl.is_file(),
        "deploy/build-agents.sh built no static agent ({} is missing): rustup target add \
         {STATIC_TARGET}",
        musl.display()
    );
    assert!(!has_interpreter(&musl), "the static agent needs no loader");
    assert!(has_interpreter(&gnu), "the gnu agent is dynamically linked");

    let host = SshHost::start_with(HostSpec {
        no_glibc: true,
        ..HostSpec::default()
    })
    .await
    .unwrap();
    // The fixture is what it claims: no C library where programs look for one.
    let look = host
        .exec_ok("ls -d /lib /lib64 /usr/lib 2>&1; command -v ldd getconf; echo done")
        .await
        .unwrap();
    assert_eq!(
        look.out().lines().last(),
        Some("done"),
        "no glibc tools: {look:?}"
    );
    assert!(
        look.out().matches("No such file or directory").count() == 3,
        "no library directories: {look:?}"
    );
    host.write_known_hosts().unwrap();

    // No agent at all: the error names the static agent this host needs, not the gnu one.
    let none = tempfile::tempdir().unwrap();
    let mut opts = options(&host);
    opts.agent = AgentSource::Dir(none.path().to_path_buf());
    let err = Session::connect(&SshTransport::new(opts), "no-glibc")
        .await
        .expect_err("no agent to deploy");
    let text = err.to_string();
    assert!(matches!(err, Error::NoAgentBinary { .. }), "{err:?}");
    assert!(
        text.contains("has no glibc, so it needs the static agent")
            && text.contains(&format!("relay-agent-{STATIC_TARGET}"))
            && text.contains(&format!("rustup target add {STATIC_TARGET}")),
        "{text}"
    );

    // Only the glibc agent on offer: refused with the cause and the fix, nothing uploaded.
    let only_gnu = tempfile::tempdir().unwrap();
    std::fs::copy(&gnu, only_gnu.path().join(gnu.file_name().unwrap())).unwrap();
    let mut opts = options(&host);
    opts.agent = AgentSource::Dir(only_gnu.path().to_path_buf());
    let err = Session::connect(&SshTransport::new(opts), "no-glibc")
        .await
        .expect_err("a glibc agent cannot run there");
    let text = err.to_string();
    assert!(matches!(err, Error::AgentCannotRun(_)), "{err:?}");
    assert!(!err.is_transient(), "a retry cannot fix it: {text}");
    assert!(text.contains("has no glibc"), "{text}");
    assert!(
        text.contains(&format!("relay-agent-{STATIC_TARGET}")),
        "{text}"
    );
    assert_eq!(remote_bin(&host).await, vec![], "nothing was uploaded");

    // Both agents on offer, the gnu one first by name: the probe picks the static one.
    let (transport, session, uploaded) = connect_deploying(&host, &agents, "no-glibc", &musl).await;

    // A login shell (busybox sh, found from /etc/passwd without NSS) in a pane.
    let pane = PaneKey::new("no-glibc", "tab", "0");
    let (binding, pid, mut handle) = login_pane(&session, &pane).await;
    // The typed line is echoed too; only the shell's answer has the expanded values.
    run_line(
        &host,
        &session,
        &binding,
        &mut handle,
        "MARK=kept-$((6*7)); echo shell=$(readlink /proc/$$/exe) pid=$$",
        &format!("shell=/bin/busybox pid={pid}"),
    )
    .await;
    // The suites' host inspection works with busybox's ps too.
    assert!(host.agent_daemon_pid().await.unwrap().is_some());
    assert_eq!(host.shell_pids().await.unwrap(), vec![pid]);

    // Detach, close the connection, come back on a new one: the same shell.
    detach_and_come_back(
        &host,
        &transport,
        "no-glibc",
        (session, handle),
        &binding,
        pid,
    )
    .await;

    // `relay shell HOST -- CMD` with piped stdio, finding the static agent by the default
    // search's RELAY_AGENT_DIR: output byte for byte, the command's exit status.
    let home = TestHome::new();
    let out = home
        .command(&bins().relay)
        .arg("shell")
        .arg(host.destination())
        .arg("-F")
        .arg(host.base_config().unwrap())
        .arg("-i")
        .arg(host.key_path())
        .args(["--", "seq 1 20000; exit 5"])
        .env("SSH_AUTH_SOCK", "")
        .env("RELAY_AGENT_BIN", "")
        .env("RELAY_AGENT_DIR", &agents)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let expected: String = (1..=20000).map(|n| format!("{n}\r\n")).collect();
    assert_eq!(
        out.status.code(),
        Some(5),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.stdout == expected.as_bytes(),
        "{} bytes, expected {}",
        out.stdout.len(),
        expected.len()
    );
    assert_eq!(remote_bin(&host).await, uploaded, "nothing else deployed");
}
