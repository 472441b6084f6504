//! A live upgrade whose new binary fails after `execve`, while it resumes: it panics before
//! reading the state, it reads a damaged state, it cannot serve one of the PTYs, or it dies of
//! `SIGABRT` half-way through adopting them (the agent's test fault points, `agent/src/fault.rs`). Each time the old
//! code takes the process back (`agent/src/upgrade/rescue.rs`): the same pid serves every
//! shell with the same PTY ids and pids, every byte of output arrives once and in order,
//! input and exits work, and the failure is reported.

use relay_protocol::{Binding, PaneKey};
use relay_tests::{read_until, read_until_text, Collected, TestHome, LIVENESS};

use super::sh;
use super::upgrade::{
    agent_copy_in, attach_from, exe_of, fds_of, live_leases, still_answers, text,
};

/// 600 numbered lines over about 6 s, then exit 3: mid-output during the upgrade.
const COUNTER: &str =
    "i=0; while [ $i -lt 600 ]; do echo line$i; i=$((i+1)); sleep 0.01; done; exit 3";

/// Upgrades a daemon whose new code fails at `point`; requires `why` in what relayctl says.
async fn the_old_code_takes_the_shells_back(point: &str, why: &str) {
    let home = TestHome::with_env(&[("RELAY_TEST_FAULT_AT", point)]);
    let session = home.session().await;
    let pane = |leaf: &str| PaneKey::new("fault", leaf, "0");
    // Two programs mid-output, so that whichever PTYs are adopted before a failure, one of
    // them had output waiting that the new code must not have taken.
    let mut counters: Vec<(Binding, Collected)> = Vec::new();
    for leaf in ["a", "b"] {
        let b = session
            .create(pane(leaf), sh(COUNTER))
            .await
            .unwrap()
            .binding;
        counters.push((b, Collected::default()));
    }
    let echo = session
        .create(pane("echo"), sh("while read l; do echo got:$l; done"))
        .await
        .unwrap()
        .binding;
    for (b, out) in &mut counters {
        let mut h = attach_from(&session, b, 0).await;
        read_until_text(&mut h, out, "line20\r").await.unwrap();
    }
    let daemon = home.daemon_pid().expect("daemon running");
    let code = exe_of(daemon);
    let before = live_leases(&home);
    assert_eq!(before.len(), 3, "{before:?}");
    drop(session);

    let next = agent_copy_in(&home, "relay-agent-next");
    let out = home.relayctl(&["upgrade", "--to", next.to_str().unwrap(), "--yes"]);
    let said = text(&out);
    assert!(!out.status.success(), "{point}: {said}");
    assert!(
        said.contains("keeps serving every shell"),
        "{point}: {said}"
    );
    assert!(said.contains(why), "{point}: wanted {why:?} in {said}");

    assert_eq!(home.daemon_pid(), Some(daemon), "{point}: the same process");
    assert_eq!(exe_of(daemon), code, "{point}: the old code runs again");
    assert_eq!(
        live_leases(&home),
        before,
        "{point}: every shell, same ids and pids"
    );
    let status = text(&home.relayctl(&["status"]));
    assert!(status.contains("last upgrade:  failed:"), "{status}");
    assert!(
        !fds_of(daemon).iter().any(|f| f.contains("relay-handover")),
        "{point}: the state was closed once the old code resumed"
    );

    // Every line once and in order, across the failed upgrade, and each program's own exit.
    let session = home.session().await;
    let expected: String = (0..600).map(|i| format!("line{i}\n")).collect();
    for (b, out) in &mut counters {
        let mut h = attach_from(&session, b, out.end).await;
        read_until(&mut h, out, LIVENESS, |c| c.exit.is_some())
            .await
            .unwrap();
        assert!(out.gaps.is_empty(), "{point} {b}: {:?}", out.gaps);
        assert_eq!(
            out.text().replace('\r', ""),
            expected,
            "{point} {b}: every line once, in order"
        );
        assert_eq!(out.exit, Some((3, None)), "{point} {b}");
    }
    still_answers(&session, &echo).await;
    let fresh = session
        .create(pane("fresh"), sh("exit 0"))
        .await
        .unwrap()
        .binding;
    assert_eq!(fresh.pty.incarnation, echo.pty.incarnation, "{point}");
    assert!(
        fresh.pty.counter > echo.pty.counter,
        "{point}: {fresh} is a new id (the last was {echo})"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_binary_that_panics_before_reading_the_state_returns_the_shells() {
    the_old_code_takes_the_shells_back("resume-start", "panicked while resuming").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_binary_that_reads_a_damaged_state_returns_the_shells() {
    the_old_code_takes_the_shells_back("resume-state", "handover state is damaged").await;
}

/// Its master stays open until the old code has it again: closing it would hang up its shell.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_binary_that_cannot_serve_one_pty_returns_the_shells() {
    the_old_code_takes_the_shells_back("resume-serve", "could not serve the handed-over PTY").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_binary_that_dies_half_way_through_adopting_returns_the_shells() {
    the_old_code_takes_the_shells_back("resume-adopt", "died of SIGABRT while resuming").await;
}
