//! Rule F at the size of a fleet: one connector holds a pane on each of 20 hosts, through the
//! library and through the app sidecar (`relay serve --stdio`, its own process) at once, while
//! four hosts suffer a different fault each: one frozen (`docker pause`), one silently
//! partitioned, one whose SSH connections are killed every 2 s, one restarted. The other
//! sixteen do not notice: their echo stays within twice its median without the faults, none of
//! them loses its connection, and one of them, its connections killed on purpose, reconnects
//! and resumes while the partitioned host is still unreachable. No shell is created anywhere,
//! and each faulted host comes back by itself (the restarted one reporting its panes ended).

use std::ops::Range;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use relay_connector::{Host, HostState};
use relay_protocol::{EndReason, LeaseState};
use relay_tests::fixture::SshHost;
use relay_tests::fleet::AppFleet;
use relay_tests::usage::Usage;
use relay_tests::{agent_copy, StateLog};

use crate::isolation::assert_within_twice;
use crate::rig::{leases, median_echo, Echo, Rig};

const HOSTS: usize = 20;
/// Frozen by `docker pause` (TCP up, nothing answers).
const PAUSED: usize = 0;
/// Every packet dropped in the host's network namespace, no RST.
const PARTITIONED: usize = 1;
/// Its SSH connections killed every [`KILL_EVERY`].
const KILLED: usize = 2;
/// `docker restart`: the agent and its shells really end.
const RESTARTED: usize = 3;
/// A steady host whose connections the test kills once, to see it reconnect meanwhile.
const FORCED: usize = 4;
/// Hosts nothing happens to; their echo is measured.
const STEADY: Range<usize> = 5..HOSTS;
/// The faulted hosts that must come back with the same shells.
const COME_BACK: [usize; 3] = [PAUSED, PARTITIONED, KILLED];
const KILL_EVERY: Duration = Duration::from_secs(2);
/// SSH `ConnectTimeout` on both sides. Long, as OpenSSH's default (the system's TCP timeout) is:
/// the frozen and the partitioned host then spend most of the fault inside connect attempts, so
/// a connect that waited for another host's (a process-wide lock) would hold up the steady
/// host's reconnect well past its 10 s bound.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);
/// How long a faulted host may take to come back once its fault is over: a connect attempt
/// that times out, the longest reconnect delay (30 s, jitter included), and a loaded machine.
const BACK_WITHIN: Duration = Duration::from_secs(120);

pub async fn rule_f_twenty_hosts_with_four_faulted_leave_the_others_as_they_were() {
    // The first host alone finds (or builds) the image; the others start together.
    let first = SshHost::start().await.unwrap();
    let others = join_all((1..HOSTS).map(|_| SshHost::start())).await;
    let fleet: Vec<Arc<SshHost>> = std::iter::once(first)
        .chain(others.into_iter().map(|h| h.unwrap()))
        .map(Arc::new)
        .collect();
    let started = Instant::now();
    let hosts: Vec<Host> = fleet
        .iter()
        .map(|s| Rig::connect_within(s, CONNECT_TIMEOUT, |_| {}))
        .collect();
    let states: Vec<StateLog> = hosts.iter().map(StateLog::record).collect();
    let mut lib: Vec<Echo> = join_all(hosts.iter().map(|h| Echo::open(h, "lib"))).await;
    let mut app = tokio::task::block_in_place(|| AppFleet::start(&fleet, CONNECT_TIMEOUT));
    eprintln!(
        "fleet: {HOSTS} hosts, a library pane and an app pane on each, in {:?}",
        started.elapsed()
    );
    let shells: Vec<Vec<u32>> = join_all(fleet.iter().map(|s| s.shell_pids()))
        .await
        .into_iter()
        .map(|s| s.unwrap())
        .collect();
    for (i, s) in shells.iter().enumerate() {
        assert_eq!(s.len(), 2, "host {i}: one shell per connector side: {s:?}");
    }
    let calm = Usage::of(app.sidecar.pid()).unwrap();

    // Undisturbed medians, library and sidecar, over the steady hosts in turn.
    median_echo(&mut lib[STEADY], 20, Duration::ZERO, || true).await; // warm up
    let lib_idle = median_echo(&mut lib[STEADY], 150, Duration::from_millis(20), || true).await;
    let app_idle = tokio::task::block_in_place(|| {
        app.median(STEADY, 20, Duration::ZERO);
        app.median(STEADY, 150, Duration::from_millis(20))
    });

    // The faults.
    let marks: Vec<usize> = states.iter().map(StateLog::len).collect();
    tokio::task::block_in_place(|| app.forget_states());
    let (paused, partitioned, restarted) = tokio::join!(
        fleet[PAUSED].pause(),
        fleet[PARTITIONED].partition(),
        fleet[RESTARTED].restart()
    );
    paused.unwrap();
    partitioned.unwrap();
    restarted.unwrap();
    let killing = fleet[KILLED]
        .kill_ssh_connections_every(KILL_EVERY)
        .unwrap();
    let away = |i: usize| !hosts[i].state().borrow().is_connected();

    // The library's echo, until the frozen and the partitioned host have both been noticed.
    let lib_disturbed = median_echo(&mut lib[STEADY], 200, Duration::from_millis(50), || {
        away(PAUSED) && away(PARTITIONED)
    })
    .await;
    assert!(
        away(PAUSED) && away(PARTITIONED),
        "the frozen and the partitioned host were noticed meanwhile"
    );

    // A steady host's connections killed: both sides reconnect and resume within 10 s, while
    // the partitioned host is still unreachable.
    let mark = states[FORCED].len();
    let killed_at = Instant::now();
    assert_eq!(
        fleet[FORCED].kill_ssh_connections().await.unwrap(),
        2,
        "one SSH connection per connector"
    );
    let deadline = killed_at + Duration::from_secs(10);
    tokio::task::block_in_place(|| app.resumed(FORCED, deadline));
    states[FORCED]
        .wait_for(
            mark,
            "the library's reconnect",
            deadline.saturating_duration_since(Instant::now()),
            |s| matches!(s, HostState::Connected { .. }),
        )
        .await
        .unwrap();
    let forced_back = killed_at.elapsed();
    lib[FORCED].comes_back(b'f', Duration::from_secs(10)).await;
    assert!(
        away(PARTITIONED),
        "the partitioned host was still away while the other reconnected"
    );

    // The sidecar's echo, the faults still on.
    let app_disturbed =
        tokio::task::block_in_place(|| app.median(STEADY, 200, Duration::from_millis(50)));
    let busy = Usage::of(app.sidecar.pid()).unwrap();
    assert!(
        away(PAUSED) && away(PARTITIONED),
        "the faults lasted through the sidecar's measurement"
    );
    eprintln!(
        "fleet: sidecar with {HOSTS} hosts: {} calm, {} with four hosts faulted (peak {:.1} MiB)",
        calm.show(),
        busy.show(),
        busy.peak_kib as f64 / 1024.0
    );
    eprintln!("fleet: a steady host's killed connections: both sides back in {forced_back:?}");
    // Twenty hosts connecting at once read the agent binary once, not once each (that took a
    // debug build's sidecar to a 1.1 GiB peak).
    let agent = std::fs::metadata(agent_copy()).unwrap().len() / 1024;
    assert!(
        busy.peak_kib <= calm.rss_kib + 4 * agent,
        "sidecar peak {} KiB with a {agent} KiB agent binary and {} KiB after the start",
        busy.peak_kib,
        calm.rss_kib
    );
    assert_within_twice("library, 16 steady hosts", lib_idle, lib_disturbed);
    assert_within_twice("sidecar, 16 steady hosts", app_idle, app_disturbed);

    // The faults end; each host comes back by itself.
    let kills = killing.stop().await.unwrap();
    assert!(
        kills >= 3,
        "the killed host's connections were killed again and again: {kills}"
    );
    let healed_at = Instant::now();
    let (unpaused, healed) = tokio::join!(fleet[PAUSED].unpause(), fleet[PARTITIONED].heal());
    unpaused.unwrap();
    healed.unwrap();
    for i in COME_BACK {
        lib[i].comes_back(b'b', BACK_WITHIN).await;
        eprintln!(
            "fleet: host {i}: the library's pane back {:?} after the faults",
            healed_at.elapsed()
        );
    }
    let (reason, exit) = lib[RESTARTED].end(BACK_WITHIN).await;
    assert_eq!((reason, exit), (EndReason::AgentRestarted, None));
    tokio::task::block_in_place(|| {
        for i in COME_BACK {
            app.comes_back(i, b'b', BACK_WITHIN);
            eprintln!(
                "fleet: host {i}: the app's pane back {:?} after the faults",
                healed_at.elapsed()
            );
        }
        let end = app.end(RESTARTED, BACK_WITHIN);
        assert_eq!(end["reason"], "agent_restarted", "{end}");
    });

    // Nothing created, nothing ended but on the restarted host; the steady hosts never noticed.
    for (i, ssh) in fleet.iter().enumerate() {
        let now = ssh.shell_pids().await.unwrap();
        if i == RESTARTED {
            assert_eq!(
                now,
                Vec::<u32>::new(),
                "host {i}: re-attach created nothing"
            );
        } else {
            assert_eq!(now, shells[i], "host {i}: the same two shells");
        }
        let leases = leases(&hosts[i]).await;
        if i == RESTARTED {
            assert!(
                leases.iter().all(|l| l.state == LeaseState::Ended),
                "host {i}: {leases:?}"
            );
            continue;
        }
        assert_eq!(leases.len(), 2, "host {i}: no lease created: {leases:?}");
        assert!(leases.iter().any(|l| l.binding == *lib[i].binding()));
        let app_pty = app.panes[i]["pty"].as_str().unwrap();
        assert!(leases.iter().any(|l| l.binding.pty.to_string() == app_pty));
    }
    for i in STEADY {
        let since = &states[i].all()[marks[i]..];
        assert!(
            since.iter().all(HostState::is_connected),
            "steady host {i} kept its connection: {since:?}"
        );
    }
    let lost = tokio::task::block_in_place(|| app.states_away(STEADY));
    assert_eq!(lost, 0, "no steady host left `connected` on the app's side");
}
