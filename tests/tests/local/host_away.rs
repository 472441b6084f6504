//! What a host's re-attach learns when the pane changed while the host was away, against a real
//! agent over the local transport: the pane was given another shell (rule B: a re-attach binds
//! only the same PTY). The connector's side is `connector/src/host/panes.rs`; the answers a
//! real agent never gives a re-attach (not found, internal, no answer) are in its unit tests.

use relay_connector::Session;
use relay_protocol::LeaseState;
use relay_tests::{read_until, read_until_text, Collected, TestHome, LIVENESS};

use super::{sh, ECHO_LOOP};

/// Rule B: while the host is away, another client replaces the pane's shell. The re-attach asks
/// for the exact PTY it held and learns that the pane has another one now: the stream ends
/// with `Mismatch` naming the new PTY, nothing resumes, and the new shell is left alone for
/// whoever created it. A re-attach by pane key alone would resume the new shell here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pane_replaced_while_the_host_was_away_ends_with_mismatch() {
    let home = TestHome::new();
    let host = home.host_slow_to_retry();
    let (created, mut pane) = host
        .workspace("w")
        .open("swapped", "0", sh(ECHO_LOOP))
        .await
        .unwrap();
    let mut out = Collected::default();
    read_until_text(&mut pane, &mut out, "start").await.unwrap();
    assert_eq!(home.kill_bridges(), 1, "one connection per host");
    read_until(&mut pane, &mut out, LIVENESS, |c| !c.interrupted.is_empty())
        .await
        .unwrap();

    let other = Session::connect(&home.transport(), "another-app")
        .await
        .unwrap();
    let replacement = other
        .replace(&created.binding, sh("echo replacement; sleep 600"))
        .await
        .unwrap()
        .binding;
    drop(other);
    host.retry_now();

    read_until(&mut pane, &mut out, LIVENESS, |c| c.mismatch.is_some())
        .await
        .unwrap();
    assert_eq!(out.mismatch, Some(Some(replacement.pty)));
    assert!(out.resumed.is_empty(), "nothing resumed: {:?}", out.resumed);
    assert!(out.ended.is_none() && out.exit.is_none());
    assert!(!out.text().contains("replacement"), "{:?}", out.text());
    assert!(
        pane.next().await.is_none(),
        "the stream ends after Mismatch"
    );

    let mut leases = host.session().await.unwrap().list_leases().await.unwrap();
    leases.sort_by_key(|l| l.binding.pty.counter);
    let states: Vec<_> = leases.iter().map(|l| (l.binding.pty, l.state)).collect();
    assert_eq!(
        states,
        [
            (created.binding.pty, LeaseState::Superseded),
            (replacement.pty, LeaseState::Detached),
        ],
        "nothing created, the replacement not attached by the host"
    );
}
