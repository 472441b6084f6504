//! The daemon's descriptor limit across a live upgrade (`relay_agent::pty::nofile`): the new code
//! keeps the raised limit, and programs it starts still get the one the daemon was first
//! started with.

use relay_protocol::PaneKey;
use relay_tests::{bins, read_until_text, Collected, TestHome};

use super::sh;
use super::upgrade::{agent_copy_in, attach_from, exe_of, text};

/// `(soft, hard)` "Max open files" of `pid`, from `/proc/<pid>/limits`.
fn nofile_of(pid: i32) -> (u64, u64) {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .expect("a Max open files line");
    let mut numbers = line.split_whitespace().filter_map(|w| w.parse().ok());
    (numbers.next().unwrap(), numbers.next().unwrap())
}

/// The daemon raised its descriptor limit when it started (`relay_agent::pty::nofile`); after an
/// upgrade, which runs the new code with the raised limit, programs it starts still get the
/// soft limit the daemon was first started with, and the daemon keeps the raised one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn programs_started_after_an_upgrade_get_the_original_descriptor_limit() {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    use std::os::unix::process::CommandExt;

    const SOFT: u64 = 256;
    let hard = getrlimit(Resource::RLIMIT_NOFILE).unwrap().1.min(4096);
    if hard <= SOFT {
        relay_testkit::skip(
            "programs_started_after_an_upgrade_get_the_original_descriptor_limit",
            &format!("a hard descriptor limit above {SOFT}"),
        );
        return;
    }
    let home = TestHome::new();
    let mut daemon_cmd = home.command(&bins().agent);
    daemon_cmd.arg("daemon").stdin(std::process::Stdio::null());
    // Safety: only setrlimit, async-signal-safe, between fork and exec.
    unsafe {
        daemon_cmd.pre_exec(move || {
            setrlimit(Resource::RLIMIT_NOFILE, SOFT, hard).map_err(std::io::Error::from)
        });
    }
    let started = daemon_cmd.output().unwrap();
    assert!(started.status.success(), "{}", text(&started));
    let daemon = home.daemon_pid().expect("daemon running");
    assert_eq!(nofile_of(daemon), (hard, hard));

    let next = agent_copy_in(&home, "relay-agent-next");
    let out = home.relayctl(&["upgrade", "--to", next.to_str().unwrap(), "--yes"]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(exe_of(daemon), next);
    assert_eq!(nofile_of(daemon), (hard, hard), "the new code keeps it");

    let session = home.session().await;
    let probe = "echo soft=$(ulimit -Sn) hard=$(ulimit -Hn); exec sleep 1000";
    let shell = session
        .create(PaneKey::new("up", "limit", "0"), sh(probe))
        .await
        .unwrap()
        .binding;
    let mut out = Collected::default();
    let mut h = attach_from(&session, &shell, 0).await;
    let want = format!("soft={SOFT} hard={hard}");
    read_until_text(&mut h, &mut out, &want).await.unwrap();
}
