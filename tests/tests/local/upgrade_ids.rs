//! A PTY id is never given out twice (DESIGN §2), whatever live upgrades the daemon went
//! through: an id copied before them (`relayctl kill ID`, an app's hydrated binding) can never
//! name another shell afterwards.

use relay_protocol::{PaneKey, PtyId};
use relay_tests::{TestHome, LIVENESS};

use super::sh;
use super::upgrade::{agent_copy_in, half_agent, text};

/// Waits until every one of `ptys` is listed as ended.
async fn until_ended(home: &TestHome, ptys: &[PtyId]) {
    let deadline = tokio::time::Instant::now() + LIVENESS;
    loop {
        let rows = home.leases_json();
        let ended = |p: &PtyId| {
            rows.iter()
                .any(|l| l["pty"] == p.to_string() && l["state"] == "ended")
        };
        if ptys.iter().all(ended) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{ptys:?} did not end: {rows:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

fn upgrade(home: &TestHome, bin: &std::path::Path) -> std::process::Output {
    home.relayctl(&["upgrade", "--to", bin.to_str().unwrap(), "--yes"])
}

/// Regression: one live shell and two ended ones; the ended ones are
/// forgotten, so the journal no longer names the highest ids; a refused upgrade and two live
/// upgrades later, a new pane once got the id of a forgotten one. The counter is handed over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_pty_id_is_given_out_twice_across_forgets_and_upgrades() {
    let home = TestHome::new();
    let session = home.session().await;
    let pane = |leaf: &str| PaneKey::new("ids", leaf, "0");
    let live = session
        .create(pane("live"), sh("exec sleep 1000"))
        .await
        .unwrap()
        .binding;
    let mut given = vec![live.pty];
    for leaf in ["a", "b"] {
        let b = session
            .create(pane(leaf), sh("true"))
            .await
            .unwrap()
            .binding;
        given.push(b.pty);
    }
    until_ended(&home, &given[1..]).await;
    let out = home.relayctl(&["forget", "--all"]);
    assert!(out.status.success(), "{}", text(&out));
    drop(session);

    // A refused upgrade (cut, then undone), then two that happen.
    let out = upgrade(&home, &half_agent(&home));
    assert!(!out.status.success(), "{}", text(&out));
    for name in ["copy-a", "copy-b"] {
        let out = upgrade(&home, &agent_copy_in(&home, name));
        assert!(out.status.success(), "{name}: {}", text(&out));
    }

    let session = home.session().await;
    let fresh = session
        .create(pane("after"), sh("exit 0"))
        .await
        .unwrap()
        .binding;
    assert_eq!(fresh.pty.incarnation, live.pty.incarnation, "no restart");
    assert!(
        !given.contains(&fresh.pty),
        "{} was given out before the upgrades: {given:?}",
        fresh.pty
    );
    let highest = given.iter().map(|p| p.counter).max().unwrap();
    assert_eq!(
        fresh.pty.counter,
        highest + 1,
        "{} after {given:?}",
        fresh.pty
    );

    // A forgotten id is still known as one this agent gave out: ended, not "never existed".
    let e = session
        .attach(pane("b"), Some(given[2]), None)
        .await
        .expect_err("a forgotten PTY cannot be attached");
    assert!(e.is_ended(), "{e}");
}
