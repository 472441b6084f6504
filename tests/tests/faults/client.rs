//! Faults on the user's side, with the real `relay` CLI on a real pseudo-terminal against a
//! container host: the connector process stopped (a laptop asleep), and a silent partition while
//! the user sits in `relay shell`.

use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use relay_tests::fixture::SshHost;
use relay_tests::pty_run::PtyRun;
use relay_tests::TestHome;

/// `relay shell` to `host` on a fresh terminal, with the test's isolated ssh config and key.
fn relay_shell(host: &SshHost, home: &TestHome, pane: &str) -> PtyRun {
    host.write_known_hosts().unwrap();
    let config = host.base_config().unwrap();
    let config = config.to_str().unwrap();
    let key = host.key_path().to_str().unwrap().to_string();
    let destination = host.destination();
    PtyRun::spawn_with(
        home,
        &[
            "shell",
            &destination,
            "-F",
            config,
            "-i",
            &key,
            "--pane",
            pane,
        ],
        &[("SSH_AUTH_SOCK", "")],
    )
}

/// Waits until `needle` shows on the terminal, at most `within`.
fn wait_screen(run: &PtyRun, needle: &str, within: Duration) {
    let deadline = Instant::now() + within;
    while !run.screen().contains(needle) {
        assert!(
            Instant::now() < deadline,
            "{needle:?} not on the terminal within {within:?}: {:?}",
            crate::rig::tail(&run.screen())
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The first number after `prefix` on the screen.
fn number_after(screen: &str, prefix: &str) -> Option<u32> {
    screen.match_indices(prefix).find_map(|(i, _)| {
        let digits: String = screen[i + prefix.len()..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        digits.parse().ok()
    })
}

/// Types `echo TAG-$$` and returns the shell's pid it prints.
fn shell_pid(run: &mut PtyRun, tag: &str, within: Duration) -> u32 {
    run.type_text(&format!("echo {tag}-$((0+$$))\r"));
    let deadline = Instant::now() + within;
    loop {
        if let Some(pid) = number_after(&run.screen(), &format!("{tag}-")) {
            return pid;
        }
        assert!(
            Instant::now() < deadline,
            "no {tag} from the shell within {within:?}: {:?}",
            crate::rig::tail(&run.screen())
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// How many SSH logins sshd accepted so far (its log, `docker logs`).
fn logins(host: &SshHost) -> usize {
    let out = std::process::Command::new("docker")
        .args(["logs", host.id()])
        .output()
        .unwrap();
    let log =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    log.matches("Accepted publickey for relay").count()
}

/// Rule A with a laptop asleep: the `relay` process is stopped (SIGSTOP) for 60 s and then
/// continued. The clock jump is one probe, not a timeout storm: relay reconnects at most once,
/// the same shell takes the next command, and nothing on the host ended.
pub fn rule_a_a_connector_stopped_for_60s_recovers_with_at_most_one_reconnect() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    // The container is removed on drop, which needs the runtime.
    let _in_runtime = rt.enter();
    let host = rt.block_on(SshHost::start()).unwrap();
    let home = TestHome::new();
    let mut run = relay_shell(&host, &home, "sleepy");
    let pid = shell_pid(&mut run, "before", Duration::from_secs(60));
    let shells = rt.block_on(host.shell_pids()).unwrap();
    let before = logins(&host);
    let relay = Pid::from_raw(run.pid());
    kill(relay, Signal::SIGSTOP).unwrap();
    std::thread::sleep(Duration::from_secs(60));
    kill(relay, Signal::SIGCONT).unwrap();
    let after = shell_pid(&mut run, "after", Duration::from_secs(60));
    assert_eq!(after, pid, "the same shell");
    let reconnects = logins(&host) - before;
    assert!(reconnects <= 1, "{reconnects} reconnects after one sleep");
    assert_eq!(
        rt.block_on(host.shell_pids()).unwrap(),
        shells,
        "nothing ended"
    );
    run.type_text("exit 3\r");
    assert_eq!(run.exit_within(Duration::from_secs(30)), Some(3));
}

/// Rule A from the user's chair: `relay shell` across a 20 s silent partition. relay says the
/// link is lost, and afterwards the same shell (same pid) takes typed input without the user
/// re-running anything.
pub fn rule_a_relay_shell_comes_back_to_the_same_shell_after_a_20s_partition() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let _in_runtime = rt.enter();
    let host = rt.block_on(SshHost::start()).unwrap();
    let home = TestHome::new();
    let mut run = relay_shell(&host, &home, "cut");
    let pid = shell_pid(&mut run, "before", Duration::from_secs(60));
    rt.block_on(host.partition()).unwrap();
    wait_screen(&run, "[relay: no answer from", Duration::from_secs(10));
    wait_screen(&run, "[relay: connection lost", Duration::from_secs(15));
    std::thread::sleep(Duration::from_secs(12));
    rt.block_on(host.heal()).unwrap();
    // Typed right away: delivered once the host has re-attached the pane.
    let after = shell_pid(&mut run, "after", Duration::from_secs(90));
    assert_eq!(after, pid, "the same shell, nothing re-run");
    run.type_text("exit 5\r");
    assert_eq!(run.exit_within(Duration::from_secs(30)), Some(5));
}
