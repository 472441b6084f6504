//! Network and host faults under a supervised host: killed TCP connections, a silent partition,
//! a frozen host, a restarted host, a flapping link, and a re-attach that is itself interrupted.
//! Each scenario counts the host's shells (pids of the agent daemon's children) before and after:
//! a fault may interrupt streams, never end or add a shell (rules A, B, D).

use std::time::{Duration, Instant};

use relay_connector::HostState;
use relay_protocol::{EndReason, LeaseState};

use crate::rig::{leases, line_numbers, strictly_increasing, Rig, ECHO_LOOP, FLOOD_1MBPS};

fn is_reconnecting(s: &HostState) -> bool {
    matches!(s, HostState::Reconnecting { .. })
}

fn is_connected(s: &HostState) -> bool {
    matches!(s, HostState::Connected { .. })
}

/// Rules A, B, D: the host side kills the SSH TCP connection 100 times with three panes
/// attached. After every cycle the set of shells on the host is exactly the first three (no
/// shell created, none ended) and every pane was re-attached (one more `Resumed` each).
/// A short stable period lets every reconnect start from the first delay; the flap rule has its
/// own scenario.
pub async fn rule_a_100_killed_connections_keep_exactly_the_same_three_shells() {
    let rig = Rig::start(|o| o.backoff.stable_after = Duration::ZERO).await;
    let panes = rig.echo_panes("kill", 3).await;
    let shells = rig.shells().await;
    assert_eq!(shells.len(), 3, "{shells:?}");
    for cycle in 1..=100 {
        let killed = rig.ssh.kill_ssh_connections().await.unwrap();
        assert_eq!(killed, 1, "cycle {cycle}: one SSH connection per host");
        for pane in &panes {
            pane.wait("a resume", Duration::from_secs(30), |c| {
                c.resumed.len() == cycle
            })
            .await;
        }
        assert_eq!(rig.shells().await, shells, "cycle {cycle}: the same shells");
    }
    for (i, pane) in panes.iter().enumerate() {
        pane.type_line(&format!("still-{i}"));
        pane.wait_text(&format!("got:still-{i}"), Duration::from_secs(30))
            .await;
        pane.read(|c| {
            assert_eq!(c.interrupted.len(), 100);
            assert!(c.gaps.is_empty() && c.ended.is_none(), "{:?}", c.gaps);
        });
    }
    let leases = leases(&rig.host).await;
    assert_eq!(leases.len(), 3, "no lease created after the first three");
    for pane in &panes {
        assert!(leases.iter().any(|l| l.binding == pane.binding));
    }
}

/// Rules A and E, with a silent partition (every packet dropped, no RST) of 45 s while one pane
/// prints ~1 MB/s and another is idle: the link is declared dead within 10 s, the host recovers
/// by itself after the partition heals, the flooding pane's lines arrive in order with no
/// repeat (a snapshot of the screen where the agent's replay ring could not hold 45 s of
/// output, never a gap), the
/// idle pane takes input again, and no shell on the host was touched.
pub async fn rule_a_a_45s_silent_partition_is_detected_and_healed_without_silent_loss() {
    let rig = Rig::start(|_| {}).await;
    let flood = rig.pane("part", "flood", FLOOD_1MBPS, "start").await;
    let idle = rig.pane("part", "idle", ECHO_LOOP, "start").await;
    flood
        .wait("output", Duration::from_secs(30), |c| c.end > 1_000_000)
        .await;
    let shells = rig.shells().await;
    let mark = rig.states.len();
    let cut = Instant::now();
    rig.ssh.partition().await.unwrap();
    // The bound counts from the rules being in place, not from the docker and nsenter processes
    // that put them there (seconds on a loaded machine; the call itself is printed too).
    let applied = Instant::now();
    rig.wait_state(
        mark,
        "reconnecting",
        Duration::from_secs(15),
        is_reconnecting,
    )
    .await;
    let detected = applied.elapsed();
    assert!(
        detected <= Duration::from_secs(10),
        "a silent partition is noticed within 10 s, took {detected:?} (partitioning took {:?})",
        applied - cut
    );
    tokio::time::sleep(Duration::from_secs(45).saturating_sub(cut.elapsed())).await;
    assert_eq!(
        rig.shells().await,
        shells,
        "nothing ended during the partition"
    );
    let mark = rig.states.len();
    rig.ssh.heal().await.unwrap();
    rig.wait_state(mark, "connected", Duration::from_secs(60), is_connected)
        .await;
    for pane in [&flood, &idle] {
        pane.wait("a resume", Duration::from_secs(30), |c| {
            !c.resumed.is_empty()
        })
        .await;
    }
    let resumed_at = flood.read(|c| c.end);
    flood
        .wait("output after the resume", Duration::from_secs(30), |c| {
            c.end > resumed_at + 500_000
        })
        .await;
    flood.read(|c| {
        let lines = line_numbers(&c.text());
        assert!(lines.len() > 1000, "{}", lines.len());
        assert!(strictly_increasing(&lines), "every line once, in order");
        // Lines are only missing where the stream says so: with the agent's `screen`
        // capability by a snapshot of the screen (rule E: a gap is resolved by resnapshot).
        // Rule E forbids a missing line without a snapshot, not a snapshot without a missing
        // line: CI once saw one snapshot and no line missing from the output (cause not found).
        let missing = lines.windows(2).any(|w| w[1] != w[0] + 1);
        assert!(c.gaps.is_empty(), "a snapshot, never a gap: {:?}", c.gaps);
        assert!(
            !missing || !c.snapshots.is_empty(),
            "lines are missing but no snapshot said so"
        );
    });
    idle.type_line("after");
    idle.wait_text("got:after", Duration::from_secs(30)).await;
    assert_eq!(rig.shells().await, shells, "the same shells after recovery");
}

/// Rule A: `docker pause` freezes the host for 30 s (TCP up, nothing answers). No shell ends;
/// after `docker unpause` the panes continue without any call from the test.
pub async fn rule_a_a_host_frozen_for_30s_continues_and_nothing_ended() {
    let rig = Rig::start(|_| {}).await;
    let panes = rig.echo_panes("pause", 2).await;
    let shells = rig.shells().await;
    let mark = rig.states.len();
    rig.ssh.pause().await.unwrap();
    rig.wait_state(
        mark,
        "reconnecting",
        Duration::from_secs(15),
        is_reconnecting,
    )
    .await;
    tokio::time::sleep(Duration::from_secs(25)).await;
    rig.ssh.unpause().await.unwrap();
    for (i, pane) in panes.iter().enumerate() {
        pane.type_line(&format!("thawed-{i}"));
        pane.wait_text(&format!("got:thawed-{i}"), Duration::from_secs(60))
            .await;
        pane.read(|c| assert!(c.ended.is_none() && c.exit.is_none()));
    }
    assert_eq!(rig.shells().await, shells, "no shell ended or was added");
}

/// Rule B: `docker restart` really ends the agent and its shells. Every pane is reported ended
/// with the reason the new agent proves from its journal (`agent restarted`), re-attach created
/// nothing (zero shells on the host afterwards), and the host is connected to the new agent.
pub async fn rule_b_a_restarted_host_ends_every_pane_with_proof_and_creates_no_shell() {
    let rig = Rig::start(|_| {}).await;
    let panes = rig.echo_panes("restart", 3).await;
    let first = panes[0].binding.pty.incarnation;
    rig.ssh.restart().await.unwrap();
    for pane in &panes {
        pane.wait("the end", Duration::from_secs(90), |c| c.ended.is_some())
            .await;
        pane.read(|c| assert_eq!(c.ended, Some((EndReason::AgentRestarted, None))));
        assert!(pane.ended(), "the stream ends after the proof");
    }
    let state = rig.host.state().borrow().clone();
    match state {
        HostState::Connected { incarnation, .. } => assert_ne!(incarnation, first),
        other => panic!("connected to the new agent, not {other:?}"),
    }
    assert_eq!(
        rig.shells().await,
        Vec::<u32>::new(),
        "re-attach created nothing"
    );
    let leases = leases(&rig.host).await;
    assert!(
        leases.iter().all(|l| l.state == LeaseState::Ended),
        "{leases:?}"
    );
}

/// Rule G and orca #12597: the link flaps (2 s partitioned, 2 s up) for 60 s with three panes.
/// The shells stay the same three, and the host recovers by itself afterwards, with the default
/// reconnect schedule (a flapping link does not get the fast start again and again).
pub async fn rule_g_a_link_flapping_every_2s_for_60s_keeps_three_shells_and_recovers() {
    let rig = Rig::start(|_| {}).await;
    let panes = rig.echo_panes("flap", 3).await;
    let shells = rig.shells().await;
    let flapping = rig
        .ssh
        .flap(Duration::from_secs(2), Duration::from_secs(60))
        .unwrap();
    let partitions = flapping.wait().await.unwrap();
    assert!(partitions >= 14, "{partitions}");
    assert_eq!(rig.shells().await, shells, "the same three shells");
    for (i, pane) in panes.iter().enumerate() {
        pane.type_line(&format!("calm-{i}"));
        pane.wait_text(&format!("got:calm-{i}"), Duration::from_secs(90))
            .await;
    }
    assert_eq!(rig.shells().await, shells);
    let attempts = rig
        .states
        .count(|s| matches!(s, HostState::Connecting { .. }));
    assert!(
        attempts < 30,
        "backoff, not a reconnect every 1-2 s: {attempts} attempts in ~60 s"
    );
}

/// Orca #12449: a re-attach that fails transiently. The host is frozen right after a reconnect,
/// while the re-attaches are in flight; they time out with the link, the next connection
/// re-attaches again, and the shells are the same three throughout.
pub async fn rule_a_a_reattach_interrupted_by_a_frozen_host_creates_nothing() {
    let rig = Rig::start(|o| o.backoff.stable_after = Duration::ZERO).await;
    let panes = rig.echo_panes("reattach", 3).await;
    let shells = rig.shells().await;
    let mark = rig.states.len();
    rig.ssh.kill_ssh_connections().await.unwrap();
    rig.wait_state(mark, "connected", Duration::from_secs(30), is_connected)
        .await;
    // The re-attaches were just sent; freeze the host under them.
    rig.ssh.pause().await.unwrap();
    tokio::time::sleep(Duration::from_secs(12)).await;
    rig.ssh.unpause().await.unwrap();
    for (i, pane) in panes.iter().enumerate() {
        pane.type_line(&format!("back-{i}"));
        pane.wait_text(&format!("got:back-{i}"), Duration::from_secs(60))
            .await;
    }
    assert_eq!(rig.shells().await, shells, "the same three shells");
    let leases = leases(&rig.host).await;
    assert_eq!(leases.len(), 3, "{leases:?}");
}
