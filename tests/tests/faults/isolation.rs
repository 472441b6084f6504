//! Rule F: one host's outage, one workspace's flood and one workspace nobody reads leave the
//! others' keystroke echo as it was. Measured as the median echo round trip (a byte typed into a
//! raw `cat`, until it comes back) before and during the disturbance, on the same machine in the
//! same run; "as it was" is at most twice the undisturbed median.

use std::time::{Duration, Instant};

use relay_connector::{HostState, PaneEvent};
use relay_tests::StateLog;

use crate::rig::{leases, median_echo, sh, Echo, Pane, Rig, ECHO_LOOP};

/// Within twice the undisturbed median; 200 µs of slack absorb the scheduler's noise on a
/// two-core machine where everything shares the CPUs.
pub(crate) fn assert_within_twice(what: &str, idle: Duration, disturbed: Duration) {
    eprintln!("{what}: median echo {disturbed:?}, undisturbed {idle:?}");
    assert!(
        disturbed <= idle * 2 + Duration::from_micros(200),
        "{what}: median echo {disturbed:?}, undisturbed {idle:?}"
    );
}

/// Rule F across hosts: while one host is silently partitioned (its supervisor detecting the
/// dead link and retrying), the other host's echo stays within twice its undisturbed median.
pub async fn rule_f_a_partitioned_host_leaves_another_hosts_echo_as_it_was() {
    let (a, b) = relay_tests::fixture::two_hosts().await.unwrap();
    let down = Rig::connect(&a, |_| {});
    let _busy = down
        .workspace("w")
        .open("p", "0", sh("while sleep 0.05; do date; done"))
        .await
        .unwrap();
    let up = Rig::connect(&b, |_| {});
    let mut echo = Echo::open(&up, "w").await;
    echo.median(20, Duration::ZERO).await; // warm up
    let idle = echo.median(100, Duration::from_millis(20)).await;
    a.partition().await.unwrap();
    // Long enough to span the other host's detection and first retries.
    let disturbed = median_echo(
        std::slice::from_mut(&mut echo),
        200,
        Duration::from_millis(50),
        || !down.state().borrow().is_connected(),
    )
    .await;
    assert!(
        !down.state().borrow().is_connected(),
        "the partitioned host noticed meanwhile"
    );
    assert_within_twice("other host", idle, disturbed);
}

/// Rule F for connecting: one host is silently partitioned and its supervisor sits in an SSH
/// connect that cannot finish (`ConnectTimeout` 30 s); meanwhile another host's connection is
/// killed, and that host reconnects and resumes its pane within 10 s, while the first is still
/// in the same connect attempt. Connecting to one host never waits for another: a process-wide
/// lock around SSH connect would hold the second host here until the first timed out.
pub async fn rule_f_a_host_stuck_connecting_does_not_hold_up_another_hosts_reconnect() {
    let (a, b) = relay_tests::fixture::two_hosts().await.unwrap();
    let stuck = Rig::connect_within(&a, Duration::from_secs(30), |_| {});
    let stuck_states = StateLog::record(&stuck);
    stuck
        .workspace("w")
        .open("p", "0", sh("sleep 600"))
        .await
        .unwrap();
    let other = Rig::connect(&b, |_| {});
    let (created, handle) = other
        .workspace("w")
        .open("echo", "0", sh(ECHO_LOOP))
        .await
        .unwrap();
    let pane = Pane::watch(&other, created.binding, handle);
    pane.wait_text("start", Duration::from_secs(30)).await;

    let mark = stuck_states.len();
    a.partition().await.unwrap();
    // Lost (the heartbeat, within about 10 s), then in its next connect attempt, which hangs.
    stuck_states
        .wait_for(mark, "reconnecting", Duration::from_secs(30), |s| {
            matches!(s, HostState::Reconnecting { .. })
        })
        .await
        .unwrap();
    let connecting = stuck_states
        .wait_for(mark, "connecting again", Duration::from_secs(30), |s| {
            matches!(s, HostState::Connecting { .. })
        })
        .await
        .unwrap();
    let in_connect = stuck_states.len();

    let killed_at = Instant::now();
    assert_eq!(b.kill_ssh_connections().await.unwrap(), 1);
    pane.wait("resume on the other host", Duration::from_secs(10), |c| {
        !c.resumed.is_empty()
    })
    .await;
    let back_in = killed_at.elapsed();
    eprintln!("other host: back in {back_in:?} while the partitioned one was {connecting}");
    assert_eq!(
        stuck_states.len(),
        in_connect,
        "the partitioned host was still in the same connect attempt: {:?}",
        stuck_states.all()
    );
    pane.type_line("after");
    pane.wait_text("got:after", Duration::from_secs(10)).await;
    a.heal().await.unwrap();
}

/// About 2 MB/s of output for as long as the pane lives: a busy build log or a `tail -f` of a
/// chatty service. (An unthrottled `yes` saturates both CPUs of the test machine with the agent
/// draining it, so it would measure CPU starvation, not isolation; its effect on echo is in
/// docs/performance.md.)
const FLOOD_2MBPS: &str = "while :; do yes flood-flood-flood | head -c 65536; sleep 0.03; done";

/// Rule F across workspaces of one connection: one workspace floods (read as fast as it
/// comes), another floods and is never read (its window fills and the agent keeps draining it
/// into its replay ring); the third's echo stays within twice its median without them.
pub async fn rule_f_a_flooding_and_an_unread_workspace_leave_a_thirds_echo_as_it_was() {
    let rig = Rig::start(|_| {}).await;
    let mut echo = Echo::open(&rig.host, "quiet").await;
    echo.median(20, Duration::ZERO).await;
    let idle = echo.median(100, Duration::from_millis(20)).await;
    let (_, mut flood) = rig
        .host
        .workspace("flood")
        .open("out", "0", sh(FLOOD_2MBPS))
        .await
        .unwrap();
    let drained = tokio::spawn(async move {
        let mut bytes = 0u64;
        while let Some(ev) = flood.next().await {
            if let PaneEvent::Output { data, .. } = ev {
                bytes += data.len() as u64;
            }
        }
        bytes
    });
    let (_, stalled) = rig
        .host
        .workspace("stalled")
        .open("out", "0", sh(FLOOD_2MBPS))
        .await
        .unwrap();
    // Long enough for the unread pane to use up its credit window.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let disturbed = echo.median(200, Duration::from_millis(20)).await;
    assert!(!drained.is_finished(), "the flood went on");
    drained.abort();
    let leases = leases(&rig.host).await;
    let unread = leases
        .iter()
        .find(|l| l.binding == *stalled.binding())
        .unwrap();
    assert!(
        unread.bytes_out > 2 * (1 << 20),
        "the unread pane kept producing (drained by the agent): {} bytes",
        unread.bytes_out
    );
    assert_within_twice("flooding and unread neighbours", idle, disturbed);
}
