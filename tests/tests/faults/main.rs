//! The fault suite: the connector's host supervisor against real OpenSSH hosts in
//! containers, under real faults — killed TCP connections, silent partitions (packets dropped
//! in the container's network namespace), frozen and restarted hosts, a flapping link, a
//! connector process stopped like a sleeping laptop. Every scenario counts the host's shells
//! before and after; the rule it checks is in its name.
//!
//! Most of a scenario's time is waiting (a 45 s partition, a 60 s flap), so the scenarios run
//! several at a time on their own containers (`--test-threads`, default 4). The three that
//! compare echo round trips (one of them a fleet of 20 hosts) run afterwards, one at a time, so
//! other scenarios do not skew their clocks.
//! Filtering works as with any test binary: `cargo test --test faults -- partition`.
//!
//! Needs Docker, root (for `nsenter`/`iptables`), the fixture image (built on demand) and the
//! workspace binaries (`cargo build --workspace --bins`).

mod client;
mod fleet;
mod isolation;
mod network;
mod rig;

use std::future::Future;

use libtest_mimic::{Arguments, Failed, Trial};

/// Scenarios that may share the machine.
fn concurrent() -> Vec<Trial> {
    vec![
        scenario(
            "network::rule_a_100_killed_connections_keep_exactly_the_same_three_shells",
            network::rule_a_100_killed_connections_keep_exactly_the_same_three_shells,
        ),
        scenario(
            "network::rule_a_a_45s_silent_partition_is_detected_and_healed_without_silent_loss",
            network::rule_a_a_45s_silent_partition_is_detected_and_healed_without_silent_loss,
        ),
        scenario(
            "network::rule_a_a_host_frozen_for_30s_continues_and_nothing_ended",
            network::rule_a_a_host_frozen_for_30s_continues_and_nothing_ended,
        ),
        scenario(
            "network::rule_b_a_restarted_host_ends_every_pane_with_proof_and_creates_no_shell",
            network::rule_b_a_restarted_host_ends_every_pane_with_proof_and_creates_no_shell,
        ),
        scenario(
            "network::rule_g_a_link_flapping_every_2s_for_60s_keeps_three_shells_and_recovers",
            network::rule_g_a_link_flapping_every_2s_for_60s_keeps_three_shells_and_recovers,
        ),
        scenario(
            "network::rule_a_a_reattach_interrupted_by_a_frozen_host_creates_nothing",
            network::rule_a_a_reattach_interrupted_by_a_frozen_host_creates_nothing,
        ),
        scenario(
            "isolation::rule_f_a_host_stuck_connecting_does_not_hold_up_another_hosts_reconnect",
            isolation::rule_f_a_host_stuck_connecting_does_not_hold_up_another_hosts_reconnect,
        ),
        blocking(
            "client::rule_a_a_connector_stopped_for_60s_recovers_with_at_most_one_reconnect",
            client::rule_a_a_connector_stopped_for_60s_recovers_with_at_most_one_reconnect,
        ),
        blocking(
            "client::rule_a_relay_shell_comes_back_to_the_same_shell_after_a_20s_partition",
            client::rule_a_relay_shell_comes_back_to_the_same_shell_after_a_20s_partition,
        ),
    ]
}

/// Scenarios that measure time: alone on the machine.
fn alone() -> Vec<Trial> {
    vec![
        scenario(
            "fleet::rule_f_twenty_hosts_with_four_faulted_leave_the_others_as_they_were",
            fleet::rule_f_twenty_hosts_with_four_faulted_leave_the_others_as_they_were,
        ),
        scenario(
            "isolation::rule_f_a_partitioned_host_leaves_another_hosts_echo_as_it_was",
            isolation::rule_f_a_partitioned_host_leaves_another_hosts_echo_as_it_was,
        ),
        scenario(
            "isolation::rule_f_a_flooding_and_an_unread_workspace_leave_a_thirds_echo_as_it_was",
            isolation::rule_f_a_flooding_and_an_unread_workspace_leave_a_thirds_echo_as_it_was,
        ),
    ]
}

/// An async scenario on its own multi-threaded runtime.
fn scenario<F, Fut>(name: &str, f: F) -> Trial
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = ()>,
{
    Trial::test(name, move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(|e| Failed::from(format!("runtime: {e}")))?;
        rt.block_on(f());
        Ok(())
    })
}

/// A scenario that drives blocking things itself (a pseudo-terminal).
fn blocking(name: &str, f: fn()) -> Trial {
    Trial::test(name, move || {
        f();
        Ok(())
    })
}

fn main() {
    let args = Arguments::from_args();
    let mut shared = args.clone();
    shared.test_threads = shared.test_threads.or(Some(4));
    let first = libtest_mimic::run(&shared, concurrent());
    let mut serial = args;
    serial.test_threads = Some(1);
    let second = libtest_mimic::run(&serial, alone());
    first.exit_if_failed();
    second.exit_if_failed();
}
