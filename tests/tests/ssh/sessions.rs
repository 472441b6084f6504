//! One SSH connection and one exec channel per host; PTYs outlive the SSH connection (rule A).

use super::*;

/// Counts how often the session opened the transport.
struct CountingTransport {
    inner: SshTransport,
    opens: AtomicUsize,
}

impl Transport for CountingTransport {
    fn open(&self, options: OpenOptions) -> OpenFuture<'_> {
        self.opens.fetch_add(1, Ordering::SeqCst);
        self.inner.open(options)
    }

    fn describe(&self) -> String {
        self.inner.describe()
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn two_workspaces_share_one_ssh_connection_and_one_channel() {
    let host = SshHost::start().await.unwrap();
    let transport = CountingTransport {
        inner: trusted(&host),
        opens: AtomicUsize::new(0),
    };
    let session = Session::connect(&transport, "ssh-tests").await.unwrap();
    for ws in ["ws-a", "ws-b"] {
        for leaf in ["0", "1"] {
            let pane = PaneKey::new(ws, "tab", leaf);
            let marker = format!("up-{ws}-{leaf}");
            pane_with(
                &session,
                &pane,
                &format!("echo {marker}; sleep 1000"),
                &marker,
            )
            .await;
        }
    }
    assert_eq!(transport.opens.load(Ordering::SeqCst), 1);
    assert_eq!(ssh_connections(&host).await, 1, "one SSH connection");
    assert_eq!(
        count_procs(&host, "[r]elay-agent-.* bridge").await,
        1,
        "one exec channel running the bridge"
    );
    let leases = session.list_leases().await.unwrap();
    assert_eq!(leases.len(), 4);
    drop(session);
    eventually_async("the SSH connection to close", || async {
        ssh_connections(&host).await == 0
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn closing_the_ssh_connection_leaves_remote_ptys_running() {
    let host = SshHost::start().await.unwrap();
    let transport = trusted(&host);
    let session = Session::connect(&transport, "ssh-tests").await.unwrap();
    let pane = PaneKey::new("keep", "tab", "0");
    let pid = pane_with(&session, &pane, "echo alive; sleep 1000", "alive").await;
    drop(session);
    eventually_async("the SSH connection to close", || async {
        ssh_connections(&host).await == 0
    })
    .await;
    eventually_async("the bridge to exit", || async {
        count_procs(&host, "[r]elay-agent-.* bridge").await == 0
    })
    .await;

    let session = Session::connect(&transport, "ssh-tests").await.unwrap();
    let leases = session.list_leases().await.unwrap();
    let lease = leases
        .iter()
        .find(|l| l.binding.pane == pane)
        .expect("the pane's lease survived");
    assert_eq!(lease.state, LeaseState::Detached);
    assert_eq!(lease.pid, Some(pid));
    host.exec_ok(&format!("kill -0 {pid}")).await.unwrap();
}

/// Whether the agent behind `session` runs its terminal models (`RELAY_SCREEN_MODEL`).
fn screen_model_on(session: &Session) -> bool {
    session
        .welcome()
        .capabilities
        .iter()
        .any(|c| c.0 == relay_protocol::Capability::SCREEN)
}

/// README ("Agent settings"): a daemon on a host is started by the first connection's bridge,
/// which sshd runs with the user's login shell, so `RELAY_*` settings go at the top of
/// `~/.bashrc` (bash reads it for a command sshd runs; Debian's returns early when not
/// interactive, so a line appended at its end is never read), and take effect when the daemon
/// next starts.
#[tokio::test(flavor = "multi_thread")]
async fn settings_at_the_top_of_bashrc_reach_a_daemon_started_over_ssh() {
    let host = SshHost::start().await.unwrap();
    let transport = trusted(&host);
    let stop_daemon = || async {
        host.exec_ok("pkill -u relay -f -- '[r]elay-agent-.* daemon'; true")
            .await
            .unwrap();
        eventually_async("the daemon to stop", || async {
            count_procs(&host, "[r]elay-agent-.* daemon").await == 0
        })
        .await;
    };

    host.exec_ok("echo 'export RELAY_SCREEN_MODEL=off' >> /home/relay/.bashrc")
        .await
        .unwrap();
    let session = Session::connect(&transport, "ssh-tests").await.unwrap();
    assert!(
        screen_model_on(&session),
        "a setting after the skeleton's early return is not read (the README's warning)"
    );
    drop(session);
    stop_daemon().await;

    host.exec_ok("sed -i '1i export RELAY_SCREEN_MODEL=off' /home/relay/.bashrc")
        .await
        .unwrap();
    let session = Session::connect(&transport, "ssh-tests").await.unwrap();
    assert!(
        !screen_model_on(&session),
        "a setting at the top of ~/.bashrc reaches the daemon the bridge starts"
    );
}
