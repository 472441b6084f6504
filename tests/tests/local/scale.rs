//! A PTY costs the agent no thread and one descriptor: many panes on one daemon keep
//! its thread count bounded, every one of them still streams output, takes input and reports
//! its exit, and ending them all at once (more exits than the daemon's blocking threads) loses
//! no exit.

use std::time::Duration;

use relay_connector::PaneEvent;
use relay_protocol::PaneKey;
use relay_tests::{read_until_text, Collected, TestHome, LIVENESS};

use super::sh;

/// More panes than the daemon has runtime and blocking threads together (4 + 32), so one
/// thread per PTY, or a blocking thread held per PTY, would show.
const PANES: usize = 80;

/// `Threads:` and the number of open descriptors of `pid`.
fn usage(pid: i32) -> (usize, usize) {
    let usage = relay_tests::usage::Usage::of(pid as u32).expect("the daemon's /proc entries");
    (usage.threads as usize, usage.fds)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_panes_cost_no_thread_each_and_all_of_them_work() {
    let home = TestHome::new();
    let session = home.session().await;
    let pid = home.daemon_pid().expect("daemon running");
    let (threads_before, fds_before) = usage(pid);

    let mut panes = Vec::new();
    for i in 0..PANES {
        let pane = PaneKey::new("scale", "t", i.to_string());
        let script = "echo up; while read l; do echo \"got $l\"; done";
        let (created, mut handle) = session.open(pane, sh(script), Some(0)).await.unwrap();
        let mut out = Collected::default();
        read_until_text(&mut handle, &mut out, "up").await.unwrap();
        panes.push((created.binding, handle, out));
    }
    // Blocking threads used by the spawns linger a while; they are bounded by the pool's size.
    let (threads, fds) = usage(pid);
    assert!(
        threads <= threads_before + 36,
        "{threads} daemon threads with {PANES} panes (was {threads_before}): a thread per PTY?"
    );
    assert!(
        fds <= fds_before + PANES + 8,
        "{fds} descriptors with {PANES} panes (was {fds_before}): more than one per PTY"
    );

    // Every pane still takes input and answers, the last one first.
    for (i, (binding, handle, out)) in panes.iter_mut().enumerate().rev() {
        session
            .input(binding, format!("n{i}\n").as_bytes())
            .await
            .unwrap();
        read_until_text(handle, out, &format!("got n{i}"))
            .await
            .unwrap();
    }

    // End them all at once: every exit arrives.
    let kills = panes.iter().map(|(b, _, _)| session.kill(b));
    for result in futures_util::future::join_all(kills).await {
        result.unwrap();
    }
    for (binding, handle, _) in panes.iter_mut() {
        let exited = tokio::time::timeout(LIVENESS, async {
            while let Some(ev) = handle.next().await {
                if matches!(ev, PaneEvent::Exited { .. }) {
                    return true;
                }
            }
            false
        })
        .await;
        assert_eq!(exited, Ok(true), "no exit event for {binding}");
    }
    // And the descriptors go with them once the client lets go of the streams.
    drop(panes);
    let deadline = tokio::time::Instant::now() + LIVENESS;
    loop {
        let (_, fds_after) = usage(pid);
        if fds_after <= fds_before + 8 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{fds_after} descriptors after all {PANES} panes ended (was {fds_before})"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
