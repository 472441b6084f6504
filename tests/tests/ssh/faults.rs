//! Faults of a host that the connector cannot tell from death: a frozen host is reported as a
//! lost connection with its cause, and its shells are still there afterwards (rule A).

use relay_connector::PaneEvent;

use super::*;

/// `docker pause` freezes the host with its TCP connection up: nothing answers. The connector
/// notices through ssh keepalives (here 2 s × 3 from ssh_config) and tells every pane, with the
/// cause; the error is transient (a retry may succeed). Nothing on the host is touched: after
/// `docker unpause` a new connection finds the same shell with all its output.
#[tokio::test(flavor = "multi_thread")]
async fn a_frozen_host_is_a_lost_connection_and_its_shell_survives() {
    let host = SshHost::start().await.unwrap();
    host.write_known_hosts().unwrap();
    let config = host
        .write_ssh_config(
            "frozen-box",
            "  ServerAliveInterval 2\n  ServerAliveCountMax 3\n",
        )
        .unwrap();
    let transport = SshTransport::new(config_only("frozen-box", config));
    let session = Session::connect(&transport, "ssh-tests").await.unwrap();
    let pane = PaneKey::new("faults", "tab", "0");
    let script = "echo before-$((6*7)); read x; echo after-$x; sleep 1000";
    let (created, mut handle) = session
        .open(pane.clone(), shell(script), Some(0))
        .await
        .unwrap();
    let mut out = Collected::default();
    read_until_text(&mut handle, &mut out, "before-42")
        .await
        .unwrap();
    let pid = session
        .list_leases()
        .await
        .unwrap()
        .into_iter()
        .find(|l| l.binding == created.binding)
        .and_then(|l| l.pid)
        .unwrap();

    host.pause().await.unwrap();
    let reason = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            match handle.next().await {
                Some(PaneEvent::Disconnected { reason }) => return reason,
                Some(_) => {}
                None => panic!("the pane's stream ended without saying why"),
            }
        }
    })
    .await
    .expect("the frozen host was noticed within 30 s");
    assert!(reason.contains("keepalive"), "the cause is named: {reason}");
    let err = session.list_leases().await.unwrap_err();
    assert!(err.is_transient(), "a retry may succeed: {err:?}");
    drop(session);

    host.unpause().await.unwrap();
    let session = Session::connect(&transport, "ssh-tests").await.unwrap();
    let lease = session
        .list_leases()
        .await
        .unwrap()
        .into_iter()
        .find(|l| l.binding.pane == pane)
        .expect("the lease survived the freeze");
    assert_eq!(
        lease.binding, created.binding,
        "the same PTY, not a new one"
    );
    assert_eq!(lease.pid, Some(pid));
    assert_ne!(lease.state, LeaseState::Ended);
    host.exec_ok(&format!("kill -0 {pid}")).await.unwrap();

    // Re-attach from where the old connection stopped: the same shell takes keystrokes.
    let mut handle = session
        .attach(pane, Some(created.binding.pty), Some(handle.next_offset()))
        .await
        .unwrap();
    session.input(&created.binding, b"thawed\n").await.unwrap();
    let mut out = Collected::default();
    read_until_text(&mut handle, &mut out, "after-thawed")
        .await
        .unwrap();
    assert!(
        !out.text().contains("before-42"),
        "resumed from the last offset, not replayed from 0: {:?}",
        out.text()
    );
}
