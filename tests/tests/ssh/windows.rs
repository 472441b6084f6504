//! The Windows build of `relay` (x86_64-pc-windows-gnu), run under Debian's wine64, against the
//! fixture SSH host: the Node app plays its crash-and-rebuild contract against `relay.exe serve
//! --stdio`, `relay.exe shell HOST -- CMD` moves piped stdin and stdout byte for byte, and on a
//! console `relay.exe shell` asks about an unknown host key, runs a shell and detaches.
//!
//! Ignored in a plain `cargo test`: `deploy/check-desktops.sh` builds `relay.exe` (with the wine
//! shim next to it) and runs these with `--ignored`, naming the binary in `RELAY_WINDOWS_RELAY`
//! and wine in `RELAY_WINE`. Wine is slow to start a process (seconds): bounds here are generous
//! and say nothing about speed. check-desktops.sh runs them one at a time: run side by side under
//! one wineserver and a loaded machine, the piped run has hung past 60 s and once ended with
//! status 0 instead of the command's 7 — not seen one at a time (issue 29's notes).

use std::io::{Read, Write};
use std::process::Stdio;

use relay_tests::images::{portable_agents, Arch, HostSpec};
use relay_tests::pty_run::PtyRun;
use relay_tests::TestHome;

use super::*;

/// `relay.exe` and the wine that runs it, from the environment check-desktops.sh sets.
fn windows_relay() -> (PathBuf, PathBuf) {
    let exe = std::env::var_os("RELAY_WINDOWS_RELAY")
        .map(PathBuf::from)
        .expect(
            "RELAY_WINDOWS_RELAY is not set: run these tests through deploy/check-desktops.sh, \
         which builds relay.exe",
        );
    assert!(exe.is_file(), "{} does not exist", exe.display());
    let wine = std::env::var_os("RELAY_WINE")
        .map_or_else(|| PathBuf::from("/usr/lib/wine/wine64"), PathBuf::from);
    (exe, wine)
}

/// The Node app (tests/clients/node/app_test.mjs) against `relay.exe serve --stdio`: open the
/// host (its key put to the app), panes in two workspaces, a sidecar crash, hydrate, attach from
/// the last offsets with no duplicate and no hole, input, kill_all of one workspace; and "local"
/// fails with the reason, as a Windows desktop has no local agent. One shell is left on the host.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs relay.exe and wine: run by deploy/check-desktops.sh"]
async fn the_windows_sidecar_passes_the_node_apps_contract() {
    node_apps_contract(HostSpec::default()).await;
}

/// The same contract against a host without glibc, where the static agent runs.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs relay.exe and wine: run by deploy/check-desktops.sh"]
async fn the_windows_sidecar_passes_the_node_apps_contract_on_a_host_without_glibc() {
    node_apps_contract(HostSpec {
        no_glibc: true,
        ..HostSpec::default()
    })
    .await;
}

/// The same contract against an aarch64 host run under qemu (`tests/tests/ssh/arm64_host.rs`),
/// where relay.exe's probe picks the aarch64 agent. Emulation makes it slow, not different.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs relay.exe and wine: run by deploy/check-desktops.sh"]
async fn the_windows_sidecar_passes_the_node_apps_contract_on_an_arm64_host() {
    node_apps_contract(HostSpec {
        arch: Arch::Arm64,
        ..HostSpec::default()
    })
    .await;
}

async fn node_apps_contract(spec: HostSpec) {
    let (exe, wine) = windows_relay();
    let host = SshHost::start_with(spec).await.unwrap();
    let agents = portable_agents().unwrap();
    let stderr = super::serve::run_node_app(
        &host,
        &exe,
        &[
            ("RELAY_AGENT_DIR", agents.as_os_str()),
            ("RELAY_RUNNER", wine.as_os_str()),
            ("RELAY_NO_LOCAL", "1".as_ref()),
        ],
    )
    .await;
    assert!(stderr.contains("no local agent here"), "{stderr}");
}

/// `relay.exe shell HOST -- CMD` as a script on Windows runs it: stdin, stdout and stderr are
/// pipes. Every byte of stdin reaches the command (checked by sha256sum on the host, which
/// busybox has too), every byte of
/// its output reaches stdout in order, and relay exits with the command's status.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs relay.exe and wine: run by deploy/check-desktops.sh"]
async fn the_windows_relay_runs_a_piped_command_byte_for_byte() {
    piped_command_byte_for_byte(HostSpec::default()).await;
}

/// The same on a host without glibc (busybox; `tests/tests/ssh/no_glibc_host.rs`): relay.exe's
/// probe picks the static agent there too.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs relay.exe and wine: run by deploy/check-desktops.sh"]
async fn the_windows_relay_runs_a_piped_command_on_a_host_without_glibc() {
    piped_command_byte_for_byte(HostSpec {
        no_glibc: true,
        ..HostSpec::default()
    })
    .await;
}

/// The same on an aarch64 host run under qemu (`tests/tests/ssh/arm64_host.rs`): relay.exe's
/// probe picks the aarch64 agent.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs relay.exe and wine: run by deploy/check-desktops.sh"]
async fn the_windows_relay_runs_a_piped_command_on_an_arm64_host() {
    piped_command_byte_for_byte(HostSpec {
        arch: Arch::Arm64,
        ..HostSpec::default()
    })
    .await;
}

async fn piped_command_byte_for_byte(spec: HostSpec) {
    let (exe, wine) = windows_relay();
    let host = SshHost::start_with(spec).await.unwrap();
    let home = TestHome::new();
    host.write_known_hosts().unwrap();
    let config = options(&host).resolve.config_file.unwrap();
    const INPUT: usize = 300_000;
    const LINES: u32 = 20_000;
    // Raw and silent first, so that the PTY passes stdin through unchanged and echoes nothing.
    let script =
        format!("stty raw -echo; echo armed; head -c {INPUT} | sha256sum; seq 1 {LINES}; exit 7");
    let mut child = home
        .command(&wine)
        .arg(&exe)
        .arg("shell")
        .arg(host.destination())
        .arg("-F")
        .arg(&config)
        .arg("-i")
        .arg(host.key_path())
        .args(["--pane", "windows-piped", "--", &script])
        .env_remove("SSH_AUTH_SOCK")
        .env("RELAY_AGENT_DIR", portable_agents().unwrap())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting relay.exe under wine");
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let err_reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    let data: Vec<u8> = (0u32..)
        .flat_map(|i| format!("{i:07}\n").into_bytes())
        .take(INPUT)
        .collect();
    let expected_sum = relay_tests::sha256sum(&data);
    let (out, status) = tokio::task::spawn_blocking(move || {
        // Input only once the PTY is raw: before that the line discipline would echo it.
        let mut out = Vec::new();
        let mut buf = [0u8; 8192];
        while !String::from_utf8_lossy(&out).contains("armed") {
            match stdout.read(&mut buf) {
                Ok(n) if n > 0 => out.extend_from_slice(&buf[..n]),
                // Ended before the command started: the checks below show relay.exe's stderr.
                _ => return (out, child.wait().unwrap()),
            }
        }
        stdin.write_all(&data).unwrap();
        drop(stdin);
        stdout.read_to_end(&mut out).unwrap();
        (out, child.wait().unwrap())
    })
    .await
    .unwrap();
    let stderr = err_reader.join().unwrap();
    assert_eq!(
        status.code(),
        Some(7),
        "the command's status; {} bytes out, ending {:?}; stderr: {stderr}",
        out.len(),
        String::from_utf8_lossy(&out[out.len().saturating_sub(200)..])
    );
    // Raw mode is `-opost` too: lines end in "\n" alone.
    let want: Vec<u8> = format!("armed\n{expected_sum}\n")
        .into_bytes()
        .into_iter()
        .chain((1..=LINES).flat_map(|i| format!("{i}\n").into_bytes()))
        .collect();
    assert_eq!(out.len(), want.len(), "every byte; stderr: {stderr}");
    assert!(out == want, "in order and nothing else; stderr: {stderr}");
}

/// `relay.exe shell HOST` on a console, as a Windows user runs it the first time: the unknown
/// host key is asked about on the console (`CONIN$`/`CONOUT$`, not `/dev/tty`), `yes` records it
/// in the config's known_hosts file, the agent is deployed, the shell answers typed input, and
/// `~.` detaches with exit status 0.
///
/// The status is read the Windows way, by the `cmd` that runs relay.exe (`!errorlevel!`): wine
/// sometimes ends a process whose console reader thread is still blocked in a read with SIGKILL
/// once it has called ExitProcess, so the Linux-side status of `wine64` would say "killed" for an
/// exit code of 0 (seen with builds from before and after prediction, at varying rates).
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs relay.exe and wine: run by deploy/check-desktops.sh"]
async fn the_windows_relay_asks_about_an_unknown_host_key_on_the_console() {
    let (exe, wine) = windows_relay();
    let host = SshHost::start().await.unwrap();
    let home = TestHome::new();
    let config = options(&host).resolve.config_file.unwrap();
    let known_hosts = host.known_hosts_path();
    let _ = std::fs::remove_file(&known_hosts);
    let agents = portable_agents().unwrap();
    // Wine maps the Linux root to drive Z:.
    let exe_windows = format!("Z:{}", exe.to_str().unwrap().replace('/', "\\"));
    let line = format!(
        "{exe_windows} shell {} -F {} -i {} --pane windows-console & echo relay-exit=!errorlevel!",
        host.destination(),
        config.to_str().unwrap(),
        host.key_path().to_str().unwrap(),
    );
    let args = ["cmd", "/v:on", "/c", &line].map(str::to_string);
    let mut run = tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut run = PtyRun::spawn_program(
            &home,
            &wine,
            &args,
            &[
                ("RELAY_AGENT_DIR", agents.to_str().unwrap()),
                ("SSH_AUTH_SOCK", ""),
            ],
        );
        run.wait_for("Are you sure you want to continue connecting (yes/no)?");
        // Wine's console reads the answer once it has put the terminal in raw mode; "\r" typed
        // before that would reach it as "\n", which it takes for Ctrl+J rather than Enter.
        run.wait_for_echo_off();
        run.type_text("yes\r");
        run.wait_for("Recording the key");
        // The shell's prompt (the fixture's bash: `relay@HOST:~$`): relay is attached, raw.
        run.wait_for("~$");
        run.type_text("echo answer-$((6*7))\r");
        run.wait_for("answer-42");
        run.type_text("\r~.");
        run.wait_for("detached from pane");
        run.wait_for("relay-exit=");
        run
    })
    .await
    .unwrap();
    run.wait_exit();
    let screen = run.screen();
    assert!(screen.contains("relay-exit=0"), "{screen}");
    let recorded = std::fs::read_to_string(&known_hosts).unwrap_or_default();
    assert!(
        recorded.contains(host.known_hosts_line().split_whitespace().nth(2).unwrap()),
        "the key was recorded in {}: {recorded:?}",
        known_hosts.display()
    );
}

/// The Windows archive of `deploy/bundle.sh` (named by `RELAY_WINDOWS_BUNDLE`), unpacked as an app
/// would ship it: its SHA256SUMS check, and its `relay.exe`, with no agent setting at all, finds
/// the bundle's own agents beside its `bin/` and deploys the static one to a host without glibc,
/// where a command runs and gives its output and status.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs relay.exe and wine: run by deploy/check-desktops.sh"]
async fn the_windows_bundle_deploys_its_own_agents() {
    let (built_exe, wine) = windows_relay();
    let archive = std::env::var_os("RELAY_WINDOWS_BUNDLE")
        .map(PathBuf::from)
        .expect("RELAY_WINDOWS_BUNDLE is not set: run this through deploy/check-desktops.sh");
    let unpacked = tempfile::tempdir().unwrap();
    let tar = std::process::Command::new("tar")
        .arg("-xzf")
        .arg(&archive)
        .arg("-C")
        .arg(unpacked.path())
        .status()
        .unwrap();
    assert!(tar.success(), "tar -xzf {}", archive.display());
    let root = std::fs::read_dir(unpacked.path())
        .unwrap()
        .next()
        .expect("the archive holds one directory")
        .unwrap()
        .path();
    let sums = std::process::Command::new("sha256sum")
        .args(["--check", "--quiet", "SHA256SUMS"])
        .current_dir(&root)
        .output()
        .unwrap();
    assert!(sums.status.success(), "{sums:?}");
    let exe = root.join("bin/relay.exe");
    let static_agent = root.join("agents/relay-agent-x86_64-unknown-linux-musl");
    assert!(static_agent.is_file(), "the bundle holds the static agent");
    // Test glue, never shipped: wine 8's missing ProcessPrng (deploy/fixtures/wine).
    let shim = built_exe.with_file_name("bcryptprimitives.dll");
    std::fs::copy(&shim, root.join("bin/bcryptprimitives.dll")).unwrap();

    let host = SshHost::start_with(HostSpec {
        no_glibc: true,
        ..HostSpec::default()
    })
    .await
    .unwrap();
    host.write_known_hosts().unwrap();
    let config = options(&host).resolve.config_file.unwrap();
    let home = TestHome::new();
    let out = home
        .command(&wine)
        .arg(&exe)
        .arg("shell")
        .arg(host.destination())
        .arg("-F")
        .arg(&config)
        .arg("-i")
        .arg(host.key_path())
        .args(["--", "echo bundle-$((40+2)); exit 3"])
        .env_remove("SSH_AUTH_SOCK")
        .env_remove("RELAY_AGENT_DIR")
        .env_remove("RELAY_AGENT_BIN")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "stderr: {stderr}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("bundle-42"),
        "{out:?}"
    );
    let uploaded = remote_bin(&host).await;
    assert_eq!(uploaded.len(), 1, "{uploaded:?}");
    assert_eq!(
        uploaded[0].1,
        local_sha256(&static_agent),
        "the bundle's static agent"
    );
}
