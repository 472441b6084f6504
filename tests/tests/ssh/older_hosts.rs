//! Hosts people actually have: an older distribution (Debian 11, glibc 2.31) and a
//! home directory mounted `noexec`. The deploy tells the true cause before uploading anything;
//! the portable agent from `deploy/build-agents.sh` runs a shell where the native build cannot.

use std::time::{Duration, Instant};

use relay_connector::ssh::host_check::{glibc_needed, GlibcVersion};
use relay_tests::fixture::{portable_agents, HostSpec, Suite};
use relay_tests::pty_run::PtyRun;
use relay_tests::TestHome;

use super::*;

const BULLSEYE_GLIBC: GlibcVersion = GlibcVersion {
    major: 2,
    minor: 31,
};

/// The native agent of this build against a Debian 11 host: refused with both glibc versions
/// and the fix, nothing uploaded, no shell-startup hint, and not retried (permanent).
#[tokio::test(flavor = "multi_thread")]
async fn a_native_agent_is_refused_on_an_older_glibc_host_before_any_upload() {
    let needs = glibc_needed(&std::fs::read(agent_bin()).unwrap())
        .unwrap()
        .expect("the native agent is linked against glibc");
    assert!(
        needs > BULLSEYE_GLIBC,
        "this test needs a build machine whose glibc is newer than Debian 11's (the native \
         agent needs only {needs})"
    );
    let host = SshHost::start_with(HostSpec {
        suite: Suite::Bullseye,
        ..HostSpec::default()
    })
    .await
    .unwrap();
    let libc = host.exec_ok("getconf GNU_LIBC_VERSION").await.unwrap();
    assert_eq!(libc.out(), "glibc 2.31", "the fixture is a Debian 11 host");

    let err = Session::connect(&trusted(&host), "older-hosts")
        .await
        .expect_err("the native agent cannot run there");
    let text = err.to_string();
    assert!(matches!(err, Error::AgentCannotRun(_)), "{err:?}");
    assert!(!err.is_transient(), "a retry cannot fix it: {text}");
    assert!(text.contains("the host has glibc 2.31"), "{text}");
    assert!(text.contains(&format!("needs glibc {needs}")), "{text}");
    assert!(text.contains("deploy/build-agents.sh"), "{text}");
    assert!(!text.contains("bashrc"), "not a shell banner: {text}");
    assert_eq!(remote_bin(&host).await, vec![], "nothing was uploaded");
}

/// A host whose install directory (`~/.relay`) is on a `noexec` file system: refused with the
/// mount point and the fix, nothing uploaded.
#[tokio::test(flavor = "multi_thread")]
async fn a_noexec_install_directory_is_named_before_any_upload() {
    let host = SshHost::start_with(HostSpec {
        noexec_install_dir: true,
        ..HostSpec::default()
    })
    .await
    .unwrap();
    let err = Session::connect(&trusted(&host), "older-hosts")
        .await
        .expect_err("nothing can run from a noexec mount");
    let text = err.to_string();
    assert!(matches!(err, Error::AgentCannotRun(_)), "{err:?}");
    assert!(
        text.contains("/home/relay/.relay is mounted noexec"),
        "{text}"
    );
    assert!(text.contains("without noexec"), "{text}");
    assert_eq!(remote_bin(&host).await, vec![], "nothing was uploaded");
}

/// README's steps on a Debian 11 host: `deploy/build-agents.sh`, then `relay shell HOST` with no
/// agent setting at all finds the portable agent next to its own build, deploys it and runs a
/// shell there. The portable agent is made older than the native build first (sources changed
/// since the script ran): the native one is then preferred, and since this host cannot run it,
/// the portable one is deployed after all. Then a live upgrade on that host keeps the shell.
#[test]
fn relay_shell_runs_on_a_debian_11_host_with_the_portable_agent() {
    let agents = portable_agents().unwrap();
    let portable = agents.join("relay-agent-x86_64-unknown-linux-gnu");
    let native_time = std::fs::metadata(&bins().agent)
        .and_then(|m| m.modified())
        .unwrap();
    std::fs::File::options()
        .write(true)
        .open(&portable)
        .unwrap()
        .set_modified(native_time - Duration::from_secs(3600))
        .unwrap();
    let needs = glibc_needed(&std::fs::read(&portable).unwrap()).unwrap();
    assert!(
        needs
            <= Some(GlibcVersion {
                major: 2,
                minor: 17
            }),
        "the portable agent needs {needs:?}"
    );
    let rt = tokio::runtime::Runtime::new().unwrap();
    let _in_runtime = rt.enter();
    let host = rt
        .block_on(SshHost::start_with(HostSpec {
            suite: Suite::Bullseye,
            ..HostSpec::default()
        }))
        .unwrap();
    host.write_known_hosts().unwrap();
    let config = host.base_config().unwrap();
    let key = host.key_path().to_str().unwrap().to_string();
    let home = TestHome::new();
    // No RELAY_AGENT_BIN (empty counts as unset): the default search decides.
    let mut run = PtyRun::spawn_with(
        &home,
        &[
            "shell",
            &host.destination(),
            "-F",
            config.to_str().unwrap(),
            "-i",
            &key,
            "--pane",
            "older",
        ],
        &[("SSH_AUTH_SOCK", ""), ("RELAY_AGENT_BIN", "")],
    );
    run.type_text("echo libc=$(getconf GNU_LIBC_VERSION) sum=$((40+2))\r");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !run.screen().contains("libc=glibc 2.31 sum=42") {
        assert!(
            Instant::now() < deadline,
            "no answer from a shell on the Debian 11 host: {:?}",
            run.screen()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let uploaded = rt.block_on(remote_bin(&host));
    assert_eq!(uploaded.len(), 1, "{uploaded:?}");
    assert_eq!(
        uploaded[0].1,
        local_sha256(&portable),
        "the portable agent was deployed"
    );

    // Live upgrade there, over SSH, with `relay shell` attached: the daemon hands its shell to
    // the installed binary (named, so the same version is allowed) in the same process, and the
    // shell comes back in `relay shell` by itself.
    let remote_home = rt.block_on(host.exec("echo $HOME")).unwrap().stdout;
    let installed = format!("{}/.relay/bin/{}", remote_home.trim(), uploaded[0].0);
    let relayctl = |args: &[&str]| {
        let ssh = [
            "--ssh",
            &host.destination(),
            "-F",
            config.to_str().unwrap(),
            "-i",
            &key,
        ];
        home.command(&bins().relayctl)
            .args(ssh.iter().chain(args))
            .env("SSH_AUTH_SOCK", "")
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap()
    };
    let out = relayctl(&["upgrade", "--to", &installed, "--yes"]);
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{said}");
    assert!(said.contains("1 shell(s) handed over"), "{said}");
    let status = relayctl(&["status"]);
    let status = String::from_utf8_lossy(&status.stdout).into_owned();
    assert!(status.contains("upgraded from:"), "{status}");
    run.type_text("echo after=$((50+8))\r");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !run.screen().contains("after=58") {
        assert!(
            Instant::now() < deadline,
            "the shell did not come back after the upgrade: {:?}",
            run.screen()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
