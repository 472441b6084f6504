//! The host supervisor against a real agent over the local transport: connections killed under
//! it, an agent that stops answering, an agent that restarted, a transport that can never work.
//! The SSH versions of these faults (partitions, paused and restarted containers) are in
//! `tests/tests/ssh/resilience.rs`.

use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use relay_connector::{Error, Host, HostOptions, HostState, LocalConfig, LocalTransport};
use relay_protocol::{EndReason, LeaseState, Resume};
use relay_tests::{read_until, read_until_text, Collected, StateLog, TestHome, LIVENESS};

use super::{sh, ECHO_LOOP};

fn host(home: &TestHome) -> Host {
    Host::open(home.transport(), HostOptions::new("relay-tests"))
}

/// The lines `line-N` in `text`, as numbers, in order.
pub(super) fn numbered(text: &str) -> Vec<u64> {
    text.lines()
        .filter_map(|l| l.trim_end().strip_prefix("line-")?.parse().ok())
        .collect()
}

/// Rules A, B and E: killing the connection five times under a pane that prints all the time
/// interrupts its stream, never ends it. Each time the host reconnects and re-attaches the same
/// PTY from the first byte the pane had not seen: every line arrives once, in order, with no
/// gap; the agent holds exactly the one PTY it had (nothing was created, nothing ended).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule_a_killed_connections_resume_the_same_pty_with_every_byte_once() {
    let home = TestHome::new();
    let host = host(&home);
    let states = StateLog::record(&host);
    let ws = host.workspace("w");
    let script = "i=0; while :; do echo line-$i; i=$((i+1)); sleep 0.005; done";
    let (created, mut pane) = ws.open("busy", "0", sh(script)).await.unwrap();
    let mut out = Collected::default();
    for round in 1..=5 {
        read_until(&mut pane, &mut out, LIVENESS, |c| {
            c.text().len() > round * 2000
        })
        .await
        .unwrap();
        assert_eq!(home.kill_bridges(), 1, "one connection per host");
        read_until(&mut pane, &mut out, LIVENESS, |c| c.resumed.len() == round)
            .await
            .unwrap();
    }
    let resumed_at = out.end;
    read_until(&mut pane, &mut out, LIVENESS, |c| c.end > resumed_at + 2000)
        .await
        .unwrap();
    assert_eq!(out.interrupted.len(), 5, "{:?}", out.interrupted);
    assert!(out.gaps.is_empty(), "nothing lost: {:?}", out.gaps);
    let lines = numbered(&out.text());
    let expected: Vec<u64> = (0..lines.len() as u64).collect();
    assert_eq!(
        lines, expected,
        "each line once, in order, across five reconnects"
    );
    let leases = host.session().await.unwrap().list_leases().await.unwrap();
    assert_eq!(leases.len(), 1, "nothing created: {leases:?}");
    assert_eq!(leases[0].binding, created.binding, "the same PTY");
    assert_eq!(leases[0].state, LeaseState::Attached);
    assert!(
        states.count(|s| matches!(s, HostState::Reconnecting { .. })) >= 5,
        "each loss was visible: {:?}",
        states.all()
    );
}

/// Rules A, C and G: an agent that stops answering (SIGSTOP) is first reported unresponsive,
/// then declared dead by the heartbeat; a line typed meanwhile waits, and after the agent
/// continues it reaches the same shell exactly once, although the agent also finds it in the
/// dead connection's buffer (input-seq drops the resend).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule_c_input_typed_while_the_agent_is_away_reaches_the_same_shell_once() {
    let home = TestHome::new();
    let host = host(&home);
    let states = StateLog::record(&host);
    let (created, mut pane) = host
        .workspace("w")
        .open("echo", "0", sh(ECHO_LOOP))
        .await
        .unwrap();
    let mut out = Collected::default();
    read_until_text(&mut pane, &mut out, "start").await.unwrap();
    let input = host.input_writer(&created.binding);
    let daemon = Pid::from_raw(home.daemon_pid().expect("the daemon runs"));
    let mark = states.len();
    kill(daemon, Signal::SIGSTOP).unwrap();
    let stopped = scopeguard(daemon);
    input.push(b"one\n".to_vec()).unwrap();
    states
        .wait_for(mark, "unresponsive", Duration::from_secs(6), |s| {
            matches!(s, HostState::Unresponsive { .. })
        })
        .await
        .unwrap();
    let lost = states
        .wait_for(mark, "reconnecting", Duration::from_secs(12), |s| {
            matches!(s, HostState::Reconnecting { .. })
        })
        .await
        .unwrap();
    assert!(lost.to_string().contains("heartbeat"), "{lost}");
    drop(stopped);
    read_until_text(&mut pane, &mut out, "got:one")
        .await
        .unwrap();
    input.push(b"two\n".to_vec()).unwrap();
    read_until_text(&mut pane, &mut out, "got:two")
        .await
        .unwrap();
    let text = out.text();
    assert_eq!(text.matches("got:one").count(), 1, "exactly once: {text:?}");
    assert!(!out.resumed.is_empty(), "re-attached, not re-created");
    let leases = host.session().await.unwrap().list_leases().await.unwrap();
    assert_eq!(leases.len(), 1, "{leases:?}");
    assert_eq!(leases[0].binding, created.binding);
}

/// Continues a stopped process when dropped (also when the test fails).
struct Continue(Pid);

impl Drop for Continue {
    fn drop(&mut self) {
        let _ = kill(self.0, Signal::SIGCONT);
    }
}

fn scopeguard(pid: Pid) -> Continue {
    Continue(pid)
}

/// Rule B: when the agent restarted, the re-attach learns from the new agent's journal that the
/// PTY ended with the old one, and the pane's stream ends with that proof. Nothing is created
/// for the pane; the host is connected to the new incarnation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule_b_after_an_agent_restart_the_pane_ends_with_proof_and_nothing_is_created() {
    let home = TestHome::new();
    let host = host(&home);
    let (created, mut pane) = host
        .workspace("w")
        .open("gone", "0", sh(ECHO_LOOP))
        .await
        .unwrap();
    let mut out = Collected::default();
    read_until_text(&mut pane, &mut out, "start").await.unwrap();
    let first = created.binding.pty.incarnation;
    kill(Pid::from_raw(home.daemon_pid().unwrap()), Signal::SIGTERM).unwrap();
    // The daemon closes its connections before it ends its PTYs, so the pane learns of the
    // end only from the new agent.
    read_until(&mut pane, &mut out, LIVENESS, |c| c.ended.is_some())
        .await
        .unwrap();
    assert_eq!(out.ended, Some((EndReason::AgentRestarted, None)));
    assert_eq!(out.exit, None);
    assert_eq!(out.interrupted.len(), 1, "{:?}", out.interrupted);
    assert!(
        pane.next().await.is_none(),
        "the stream ends after the proof"
    );
    let session = host.session().await.unwrap();
    assert_ne!(session.welcome().incarnation, first, "a new agent");
    let leases = session.list_leases().await.unwrap();
    assert!(
        leases.iter().all(|l| l.state == LeaseState::Ended),
        "no shell was created for the pane: {leases:?}"
    );
    assert!(matches!(
        &*host.state().borrow(),
        HostState::Connected { incarnation, .. } if *incarnation != first
    ));
}

/// Rule G, the other side: what a retry cannot fix (here: no agent binary) puts the host in
/// `Failed` at once, with the fix in the error, instead of retrying forever; `retry_now` tries
/// again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permanent_failure_is_failed_with_the_fix_and_retry_now_tries_again() {
    let home = TestHome::new();
    let transport = LocalTransport::with_config(LocalConfig {
        agent_bin: Some(home.path().join("no-such-agent")),
        relay_home: Some(home.path().to_path_buf()),
        ..LocalConfig::default()
    });
    let host = Host::open(transport, HostOptions::new("relay-tests"));
    let states = StateLog::record(&host);
    let failed = states
        .wait_for(0, "failed", LIVENESS, |s| {
            matches!(s, HostState::Failed { .. })
        })
        .await
        .unwrap();
    let HostState::Failed { error } = failed else {
        unreachable!()
    };
    assert!(matches!(*error, Error::NoAgentBinary { .. }), "{error}");
    assert!(error.to_string().contains("no-such-agent"), "{error}");
    assert_eq!(
        states.count(|s| matches!(s, HostState::Reconnecting { .. })),
        0,
        "no retries of what cannot work"
    );
    let err = host.session().await.unwrap_err();
    assert!(matches!(err, Error::HostDown(_)), "{err}");
    // Another attempt (Connecting, then Failed again; the log may see only the latter).
    let mark = states.len();
    host.retry_now();
    states
        .wait_for(mark, "another attempt", LIVENESS, |s| {
            matches!(s, HostState::Connecting { .. } | HostState::Failed { .. })
        })
        .await
        .unwrap();
}

/// The first number that follows `prefix` in `text` (e.g. a pid printed as `pid-1234`).
fn number_after(text: &str, prefix: &str) -> Option<u32> {
    text.match_indices(prefix).find_map(|(i, _)| {
        let digits: String = text[i + prefix.len()..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        digits.parse().ok()
    })
}

/// `relay shell` on a real terminal: when its connection is killed it says so on the status
/// line and comes back by itself; the same shell (same pid) takes the next command, and the
/// agent still holds exactly one PTY.
#[test]
fn relay_shell_comes_back_to_the_same_shell_after_its_connection_is_killed() {
    let home = TestHome::new();
    let mut run = super::PtyRun::spawn(&home, &["shell", "--local", "--pane", "back"]);
    run.type_text("echo pid-$((0+$$))\r");
    run.wait_for("pid-");
    let pid = relay_tests::eventually("the shell's pid", || number_after(&run.screen(), "pid-"));
    assert_eq!(home.kill_bridges(), 1);
    run.wait_for("[relay: connection lost");
    run.type_text("echo again-$((0+$$))\r");
    run.wait_for(&format!("again-{pid}"));
    let leases = home.leases_json();
    assert_eq!(leases.len(), 1, "{leases:?}");
    assert_eq!(leases[0]["pid"].as_u64(), Some(u64::from(pid)));
    run.type_text("exit 4\r");
    assert_eq!(run.exit_within(LIVENESS), Some(4), "{}", run.screen());
}

/// Rule A on the app's side: closing the host ends its pane streams (`Disconnected`, then the
/// end), the supervisor stops (`Closed`), and the shell keeps running on the agent, detached.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_the_host_ends_its_streams_and_leaves_the_shell_running() {
    let home = TestHome::new();
    let host = host(&home);
    let states = StateLog::record(&host);
    let (created, mut pane) = host
        .workspace("w")
        .open("kept", "0", sh(ECHO_LOOP))
        .await
        .unwrap();
    read_until_text(&mut pane, &mut Collected::default(), "start")
        .await
        .unwrap();
    host.close();
    let last = tokio::time::timeout(LIVENESS, async {
        let mut last = None;
        while let Some(ev) = pane.next().await {
            last = Some(ev);
        }
        last
    })
    .await
    .expect("the stream ends");
    assert!(
        matches!(&last, Some(relay_connector::PaneEvent::Disconnected { reason }) if reason.contains("closed")),
        "{last:?}"
    );
    states
        .wait_for(0, "closed", LIVENESS, |s| matches!(s, HostState::Closed))
        .await
        .unwrap();
    let lease = home
        .session()
        .await
        .list_leases()
        .await
        .unwrap()
        .into_iter()
        .find(|l| l.binding == created.binding)
        .unwrap();
    assert_eq!(lease.state, LeaseState::Detached, "the shell runs on");
}

/// Regression (found by an adversarial tester): a second input writer on the same pane shared
/// the first one's input-seq id and restarted its numbers at 1, so the agent took its input for
/// repeats and dropped all of it, silently. Each writer has its own id now.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_input_writer_on_a_pane_is_not_taken_for_repeats_of_the_first() {
    let home = TestHome::new();
    let host = host(&home);
    let (created, mut pane) = host
        .workspace("w")
        .open("two", "0", sh(ECHO_LOOP))
        .await
        .unwrap();
    let mut out = Collected::default();
    read_until_text(&mut pane, &mut out, "start").await.unwrap();
    let first = host.input_writer(&created.binding);
    first.push(b"a1\na2\n".to_vec()).unwrap();
    read_until_text(&mut pane, &mut out, "got:a2")
        .await
        .unwrap();
    first.finish().await;
    let second = host.input_writer(&created.binding);
    second.push(b"b1\nb2\nb3\n".to_vec()).unwrap();
    read_until_text(&mut pane, &mut out, "got:b3")
        .await
        .unwrap();
    assert!(out.text().contains("got:b1"), "{:?}", out.text());
}

/// Regression: `retry_now` during an outage left a stored wake-up that made the next connection
/// run a second re-attach pass over panes whose first re-attach was in flight: several
/// `Resumed` per outage and output replayed each time. One outage, one resume.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_now_during_an_outage_resumes_each_pane_once() {
    let home = TestHome::new();
    let host = host(&home);
    let script = "i=0; while :; do echo line-$i; i=$((i+1)); sleep 0.01; done";
    let (_created, mut pane) = host
        .workspace("w")
        .open("r", "0", sh(script))
        .await
        .unwrap();
    let mut out = Collected::default();
    for round in 1..=5 {
        read_until(&mut pane, &mut out, LIVENESS, |c| {
            c.text().len() > round * 500
        })
        .await
        .unwrap();
        home.kill_bridges();
        for _ in 0..4 {
            host.retry_now();
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        read_until(&mut pane, &mut out, LIVENESS, |c| c.resumed.len() >= round)
            .await
            .unwrap();
    }
    // Whatever is still on its way is read, then the counts are compared.
    let end = out.end;
    read_until(&mut pane, &mut out, LIVENESS, |c| c.end > end + 2000)
        .await
        .unwrap();
    assert_eq!(out.interrupted.len(), 5);
    assert_eq!(
        out.resumed.len(),
        5,
        "one resume per outage: {:?}",
        out.resumed
    );
    let lines = numbered(&out.text());
    let expected: Vec<u64> = (0..lines.len() as u64).collect();
    assert_eq!(lines, expected);
}

/// Regression: an app attaching a pane again right after a reconnect raced the host's own
/// re-attach of the old handle; when the old re-attach's reply came last it took the
/// subscription back, and the new handle stayed silent for good. A re-attach never takes over a
/// newer subscription now.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attach_racing_the_reattach_pass_keeps_its_output() {
    let home = TestHome::new();
    let host = Host::open(home.transport(), {
        let mut o = HostOptions::new("relay-tests");
        o.backoff.stable_after = Duration::ZERO;
        o
    });
    let script = "while :; do echo tick; sleep 0.01; done";
    let ws = host.workspace("w");
    let (created, old) = ws.open("race", "0", sh(script)).await.unwrap();
    let _old = old;
    for round in 0..20 {
        let old = host.session().await.unwrap();
        assert_eq!(home.kill_bridges(), 1, "round {round}");
        old.closed().await;
        // Wait for the new connection, then attach at once: the re-attach pass is in flight.
        let session = loop {
            if let Some(s) = host.try_session() {
                if !s.is_closed() {
                    break s;
                }
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        };
        assert_eq!(session.welcome().incarnation, old.welcome().incarnation);
        let mut fresh = ws
            .attach("race", "0", Some(created.binding.pty), Resume::Now)
            .await
            .unwrap();
        let mut got = Collected::default();
        read_until_text(&mut fresh, &mut got, "tick")
            .await
            .unwrap_or_else(|e| panic!("round {round}: the new handle is silent: {e}"));
    }
}

/// A pane printing `HEAD`, then, once the host is away (its connection killed, the first retry
/// 3 s off), `line-0` … `line-{lines-1}`, `TAIL` and exit 3; read until the host sees the exit.
/// Returns what the pane's stream delivered and the pane's PTY id.
async fn ended_while_away(home: &TestHome, lines: u32) -> (Collected, String) {
    let host = home.host_slow_to_retry();
    let go = home.path().join("go");
    let script = format!(
        "echo HEAD; while [ ! -e {go} ]; do sleep 0.02; done; i=0; \
         while [ $i -lt {lines} ]; do echo line-$i; i=$((i+1)); done; echo TAIL; exit 3",
        go = go.display()
    );
    let ws = host.workspace("w");
    let (created, mut pane) = ws.open("away", "0", sh(&script)).await.unwrap();
    let mut out = Collected::default();
    read_until_text(&mut pane, &mut out, "HEAD").await.unwrap();
    assert_eq!(home.kill_bridges(), 1);
    read_until(&mut pane, &mut out, LIVENESS, |c| !c.interrupted.is_empty())
        .await
        .unwrap();
    std::fs::write(&go, "").unwrap(); // The program finishes while the host waits to retry.
    relay_tests::eventually("the pane's end", || {
        (home.leases_json()[0]["state"] == "ended").then_some(())
    });
    read_until(&mut pane, &mut out, LIVENESS, |c| c.exit.is_some())
        .await
        .unwrap();
    (out, created.binding.pty.to_string())
}

/// Rules E and B: a pane whose program ends while the host is away (here: between a killed
/// connection and the first retry) is re-attached from the first byte it had not seen; the
/// output the program wrote meanwhile arrives in order, then its exit, instead of a bare
/// `Ended`, and nothing is created.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule_e_output_written_while_away_by_a_pane_that_ended_arrives_before_its_exit() {
    let home = TestHome::new();
    let (out, pty) = ended_while_away(&home, 3000).await;
    assert_eq!(out.exit, Some((3, None)));
    assert!(out.ended.is_none(), "the exit itself, not a bare proof");
    assert!(out.gaps.is_empty() && out.snapshots.is_empty());
    let lines = numbered(&out.text());
    assert_eq!(lines, (0..3000).collect::<Vec<u64>>());
    assert!(out.text().trim_end().ends_with("TAIL"), "{}", out.text());
    let rows = home.leases_json();
    assert_eq!(rows.len(), 1, "nothing created: {rows:?}");
    assert_eq!(rows[0]["pty"], pty, "{rows:?}");
}

/// Rule E when the ended pane wrote more while the host was away than its ring holds: the
/// re-attach gets a snapshot of the screen the program left (never a silent jump), then the
/// rest, then the exit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule_e_an_ended_pane_that_overran_its_ring_while_away_comes_back_as_a_snapshot() {
    let home = TestHome::with_env(&[("RELAY_REPLAY_BYTES", "65536")]);
    let (out, _) = ended_while_away(&home, 30_000).await;
    assert_eq!(out.exit, Some((3, None)));
    assert!(out.ended.is_none(), "the exit itself, not a bare proof");
    assert_eq!(out.snapshots.len(), 1, "one snapshot for the overrun");
    let terminal = String::from_utf8_lossy(&out.terminal);
    assert!(
        terminal.contains("line-29999") && terminal.contains("TAIL"),
        "{terminal}"
    );
}
