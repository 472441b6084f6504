//! `relayctl upgrade` swaps a running daemon's code under live shells: same pid, same PTY ids
//! and pids, continuous offsets, input and exits working afterwards; a binary that cannot take
//! over is refused (or, when it fails only at the last check, the old code resumes), and the
//! daemon keeps serving every shell.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use relay_connector::{Host, HostOptions, PaneHandle, Session};
use relay_protocol::{Binding, PaneKey, Resume};
use serde_json::Value;

use super::{sh, ECHO_LOOP};
use relay_tests::{bins, read_until, read_until_text, Collected, TestHome, LIVENESS};

pub(super) fn text(out: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A copy of the agent binary at a path of its own (what `--to` names).
pub(super) fn agent_copy_in(home: &TestHome, name: &str) -> PathBuf {
    let dir = home.path().join("next");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::copy(&bins().agent, &path).unwrap();
    path
}

/// An executable script at `name` in the home (a stranger pretending to be an agent).
pub(super) fn script(home: &TestHome, name: &str, body: &str) -> PathBuf {
    let path = home.path().join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// `relayctl upgrade --to BIN --yes` on a blocking thread, so the test's runtime keeps reading
/// panes (or sends a signal) meanwhile.
fn upgrade_in_background(
    home: &TestHome,
    bin: &Path,
) -> tokio::task::JoinHandle<std::process::Output> {
    let mut ctl = home.command(&bins().relayctl);
    ctl.arg("upgrade")
        .arg("--to")
        .arg(bin)
        .arg("--yes")
        .stdin(std::process::Stdio::null());
    tokio::task::spawn_blocking(move || ctl.output().unwrap())
}

/// The handover state versions this build's agent reads, as `handover-info` says them
/// (`1-2`): what a script pretending to be an agent claims when the test is not about them.
pub(super) fn states_read() -> String {
    let out = std::process::Command::new(&bins().agent)
        .arg("handover-info")
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    said.split_whitespace()
        .last()
        .unwrap_or_else(|| panic!("handover-info said {said:?}"))
        .to_string()
}

fn agent_log(home: &TestHome) -> String {
    std::fs::read_to_string(home.path().join("log/agent.log")).unwrap_or_default()
}

pub(super) fn exe_of(pid: i32) -> PathBuf {
    std::fs::read_link(format!("/proc/{pid}/exe")).unwrap()
}

/// The daemon's open descriptors other than sockets (connections come and go), as `/proc`
/// names their targets without inode numbers (sorted).
pub(super) fn fds_of(pid: i32) -> Vec<String> {
    let mut fds: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .map(|p| p.display().to_string())
        .filter(|p| !p.starts_with("socket:"))
        // Each process image makes its own pipes: their inode numbers differ.
        .map(|p| p.split(":[").next().unwrap_or_default().to_string())
        .collect();
    fds.sort();
    fds
}

fn alive(pid: i64) -> bool {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), None).is_ok()
}

/// (pty id, pid) of every live lease, sorted.
pub(super) fn live_leases(home: &TestHome) -> Vec<(String, i64)> {
    let mut rows: Vec<(String, i64)> = home
        .leases_json()
        .iter()
        .filter(|l| l["state"] != "ended")
        .map(|l| {
            (
                l["pty"].as_str().unwrap().to_string(),
                l["pid"].as_i64().unwrap(),
            )
        })
        .collect();
    rows.sort();
    rows
}

fn lease<'a>(rows: &'a [Value], b: &Binding) -> &'a Value {
    rows.iter()
        .find(|l| l["pty"] == b.pty.to_string())
        .unwrap_or_else(|| panic!("{b} listed"))
}

pub(super) async fn attach_from(session: &Session, b: &Binding, from: u64) -> PaneHandle {
    session
        .attach(b.pane.clone(), Some(b.pty), Some(from))
        .await
        .unwrap_or_else(|e| panic!("re-attach {b} at {from}: {e}"))
}

/// A shell with a background job that ignores SIGHUP, answering input lines until `quit`.
const JOB: &str = "(trap '' HUP; exec sleep 1000) & echo bg=$!; \
                   while read l; do echo got:$l; [ \"$l\" = quit ] && exit 7; done";
/// A program that is mid-output during the upgrade: 600 numbered lines over about 6 s.
const COUNTER: &str =
    "i=0; while [ $i -lt 600 ]; do echo line$i; i=$((i+1)); sleep 0.01; done; exit 3";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relayctl_upgrade_swaps_the_code_under_live_shells() {
    let home = TestHome::new();
    let session = home.session().await;
    let pane = |leaf: &str| PaneKey::new("up", leaf, "0");
    let job = session.create(pane("job"), sh(JOB)).await.unwrap().binding;
    let sleeper = session
        .create(pane("sleep"), sh("echo before-upgrade; exec sleep 1000"))
        .await
        .unwrap()
        .binding;
    let counter = session
        .create(pane("count"), sh(COUNTER))
        .await
        .unwrap()
        .binding;

    let mut job_out = Collected::default();
    let mut job_h = attach_from(&session, &job, 0).await;
    read_until_text(&mut job_h, &mut job_out, "bg=")
        .await
        .unwrap();
    let mut count_out = Collected::default();
    let mut count_h = attach_from(&session, &counter, 0).await;
    read_until_text(&mut count_h, &mut count_out, "line20\r")
        .await
        .unwrap();
    let mut sleep_out = Collected::default();
    let mut sleep_h = attach_from(&session, &sleeper, 0).await;
    read_until_text(&mut sleep_h, &mut sleep_out, "before-upgrade")
        .await
        .unwrap();
    let daemon = home.daemon_pid().expect("daemon running");
    let before = live_leases(&home);
    assert_eq!(before.len(), 3, "{before:?}");
    let bg: i64 = job_out
        .text()
        .split("bg=")
        .nth(1)
        .and_then(|s| s.lines().next())
        .and_then(|s| s.trim().parse().ok())
        .expect("background job pid");
    assert!(alive(bg));

    let next = agent_copy_in(&home, "relay-agent-next");
    let out = home.relayctl(&["upgrade", "--to", next.to_str().unwrap(), "--yes"]);
    let said = text(&out);
    assert!(out.status.success(), "{said}");
    assert!(said.contains(&format!("pid {daemon} kept")), "{said}");
    assert!(said.contains("3 shell(s) handed over"), "{said}");

    // The same process runs the new binary; every lease, PTY id and pid is the same.
    assert_eq!(home.daemon_pid(), Some(daemon));
    assert_eq!(exe_of(daemon), next, "the daemon's code is the new binary");
    assert_eq!(live_leases(&home), before);
    assert!(alive(bg), "the background job survived");
    let status = home.relayctl(&["status"]);
    let shown = text(&status);
    assert!(
        shown.contains(&format!("agent binary:  {}", next.display())),
        "{shown}"
    );
    assert!(shown.contains("upgraded from:"), "{shown}");

    // A second upgrade, named through a symlink: nothing piles up (the state file and the old
    // binary are closed once the new code runs), and the symlink's target runs.
    let after_one = fds_of(daemon);
    assert!(
        !after_one.iter().any(|f| f.contains("relay-handover")),
        "the handed state was closed: {after_one:?}"
    );
    let again = agent_copy_in(&home, "relay-agent-again");
    let link = home.path().join("next/current");
    std::os::unix::fs::symlink(&again, &link).unwrap();
    let out = home.relayctl(&["upgrade", "--to", link.to_str().unwrap(), "--yes"]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(exe_of(daemon), again);
    assert_eq!(live_leases(&home), before);
    let after_two = fds_of(daemon);
    assert_eq!(after_two, after_one, "nothing piles up across upgrades");

    // The old connection is gone; a new one continues each stream at exactly its offset.
    drop((job_h, count_h, sleep_h, session));
    let session = home.session().await;
    let mut count_h = attach_from(&session, &counter, count_out.end).await;
    read_until(&mut count_h, &mut count_out, LIVENESS, |c| c.exit.is_some())
        .await
        .unwrap();
    assert!(count_out.gaps.is_empty(), "{:?}", count_out.gaps);
    let expected: String = (0..600).map(|i| format!("line{i}\n")).collect();
    assert_eq!(
        count_out.text().replace('\r', ""),
        expected,
        "every line once, in order"
    );
    assert_eq!(
        count_out.exit,
        Some((3, None)),
        "the counter's own exit status"
    );

    // Input reaches the handed-over shell (a new writer) and its exit status is its own.
    let mut job_h = attach_from(&session, &job, job_out.end).await;
    session.input(&job, b"hello\n").await.unwrap();
    read_until_text(&mut job_h, &mut job_out, "got:hello")
        .await
        .unwrap();
    session.input(&job, b"quit\n").await.unwrap();
    read_until(&mut job_h, &mut job_out, LIVENESS, |c| c.exit.is_some())
        .await
        .unwrap();
    assert_eq!(job_out.exit, Some((7, None)));

    // The screen model came along: a snapshot still shows what was printed before the upgrade.
    let mut screen = session
        .attach_screen(sleeper.pane.clone(), Some(sleeper.pty), Resume::Snapshot, 0)
        .await
        .unwrap();
    let mut shot = Collected::default();
    read_until(&mut screen, &mut shot, LIVENESS, |c| {
        !c.snapshots.is_empty()
    })
    .await
    .unwrap();
    let (_, data) = &shot.snapshots[0];
    assert!(
        String::from_utf8_lossy(data).contains("before-upgrade"),
        "the rebuilt model's snapshot: {:?}",
        String::from_utf8_lossy(data)
    );
    // An exact end of the sleeper is reported with the signal that ended it.
    let out = home.relayctl(&["kill", &sleeper.pty.to_string(), "--yes"]);
    assert!(out.status.success(), "{}", text(&out));
    let rows = home.leases_json();
    let ended = lease(&rows, &sleeper);
    assert_eq!(ended["state"], "ended", "{ended}");
    assert_eq!(ended["reason"], "killed", "{ended}");
    assert_eq!(ended["exit"]["signal"], "Hangup", "{ended}");
    // New panes get fresh PTY ids of the same incarnation.
    let fresh = session
        .create(pane("fresh"), sh("exit 0"))
        .await
        .unwrap()
        .binding;
    assert_eq!(fresh.pty.incarnation, job.pty.incarnation);
    assert!(
        fresh.pty.counter > counter.pty.counter,
        "{fresh} after {counter}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_binary_that_cannot_take_over_leaves_the_old_daemon_serving() {
    let home = TestHome::new();
    let session = home.session().await;
    let echo = session
        .create(
            PaneKey::new("up", "echo", "0"),
            sh("while read l; do echo got:$l; done"),
        )
        .await
        .unwrap()
        .binding;
    let daemon = home.daemon_pid().expect("daemon running");
    let code = exe_of(daemon);
    let pid_of_shell = live_leases(&home)[0].1;

    let garbage = home.path().join("garbage");
    std::fs::write(&garbage, b"\x7fELF this is not a program").unwrap();
    std::fs::set_permissions(&garbage, std::fs::Permissions::from_mode(0o755)).unwrap();
    let other_state = script(
        &home,
        "other-state",
        "echo 'relay-agent 9.0.0 handover-state 7-9'",
    );
    let older = script(
        &home,
        "older",
        &format!("echo 'relay-agent 0.0.1 handover-state {}'", states_read()),
    );
    let plain = home.path().join("plain-file");
    std::fs::write(&plain, b"not a program").unwrap();
    let refusals: [(&Path, &[&str], &str); 6] = [
        (&garbage, &[], "could not run"),
        (home.path(), &[], "is a directory"),
        (&plain, &[], "is not executable"),
        (&other_state, &[], "reads handover states 7..=9"),
        (&older, &[], "pass --force"),
        // Relative to relayctl's directory (the test's): not there.
        (
            Path::new("relative/agent"),
            &[],
            "relative/agent: No such file",
        ),
    ];
    for (bin, extra, why) in refusals {
        let mut args = vec!["upgrade", "--to", bin.to_str().unwrap(), "--yes"];
        args.extend_from_slice(extra);
        let out = home.relayctl(&args);
        let said = text(&out);
        assert!(!out.status.success(), "{bin:?}: {said}");
        assert!(said.contains(why), "{bin:?}: wanted {why:?} in {said}");
    }
    // A binary that hangs is given up after the probe's 10 s, with what it started.
    let hang = script(&home, "hang", "sleep 61.25; echo late");
    let out = home.relayctl(&["upgrade", "--to", hang.to_str().unwrap(), "--yes"]);
    assert!(
        text(&out).contains("did not answer within"),
        "{}",
        text(&out)
    );
    assert!(
        std::process::Command::new("pgrep")
            .args(["-f", "sleep 61.25"])
            .output()
            .unwrap()
            .stdout
            .is_empty(),
        "the hung probe's children were ended"
    );

    // Nothing installed yet, then the running version installed: nothing newer to take.
    let out = home.relayctl(&["upgrade", "--yes"]);
    assert!(
        text(&out).contains("no agent is installed"),
        "{}",
        text(&out)
    );
    let installed = home.path().join("bin");
    std::fs::create_dir_all(&installed).unwrap();
    let name = format!("relay-agent-{}-0123456789abcdef", env!("CARGO_PKG_VERSION"));
    std::fs::copy(&bins().agent, installed.join(&name)).unwrap();
    let out = home.relayctl(&["upgrade", "--yes"]);
    assert!(
        text(&out).contains("already running the newest installed agent")
            && text(&out).contains("--force"),
        "{}",
        text(&out)
    );
    let status = text(&home.relayctl(&["status"]));
    assert!(status.contains("(nothing newer)"), "{status}");

    // A binary that answers the version probe but cannot read the state: the order is
    // accepted, the cut is undone, and the old code serves on (its readers restarted).
    let half = half_agent(&home);
    let out = home.relayctl(&["upgrade", "--to", half.to_str().unwrap(), "--yes"]);
    let said = text(&out);
    assert!(!out.status.success(), "{said}");
    assert!(said.contains("keeps serving every shell"), "{said}");
    assert!(said.contains("state unreadable here"), "{said}");

    assert_eq!(home.daemon_pid(), Some(daemon), "the same daemon");
    assert_eq!(exe_of(daemon), code, "its code unchanged");
    assert_eq!(live_leases(&home)[0].1, pid_of_shell, "the same shell");
    let status = text(&home.relayctl(&["status"]));
    assert!(status.contains("last upgrade:  failed:"), "{status}");
    assert!(
        agent_log(&home).contains("upgrade refused"),
        "refusals are logged"
    );
    drop(session);
    let session = home.session().await;
    still_answers(&session, &echo).await;
    let again = session
        .create(PaneKey::new("up", "again", "0"), sh("exit 4"))
        .await
        .expect("creates are accepted again after a failed upgrade");
    assert!(!again.existed);
}

/// Requires the echo shell `echo` (`while read l; do echo got:$l; done`) to answer a line,
/// its output from offset 0 without a gap.
pub(super) async fn still_answers(session: &Session, echo: &Binding) {
    let mut h = attach_from(session, echo, 0).await;
    let mut out = Collected::default();
    session.input(echo, b"still-here\n").await.unwrap();
    read_until_text(&mut h, &mut out, "got:still-here")
        .await
        .unwrap();
    assert!(out.gaps.is_empty(), "{echo}: {:?}", out.gaps);
}

/// A script that answers the version probe like a newer agent but cannot read the state: the
/// daemon accepts the order, cuts, then undoes the cut when the state check fails.
pub(super) fn half_agent(home: &TestHome) -> PathBuf {
    script(
        home,
        "half",
        &format!(
            "case $1 in handover-info) echo 'relay-agent 9.0.0 handover-state {}';; \
             *) echo 'state unreadable here' >&2; exit 1;; esac",
            states_read()
        ),
    )
}

/// What an app sees: a `Host` pane is interrupted by the upgrade and comes back by itself on
/// the same PTY, every line once and in order; input typed before and after reaches the shell
/// once each (the input-seq table came along).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_pane_comes_back_by_itself_after_an_upgrade() {
    let home = TestHome::new();
    let host = Host::open(home.transport(), HostOptions::new("relay-tests"));
    let ws = host.workspace("w");
    let script = "i=0; while :; do echo line-$i; i=$((i+1)); sleep 0.005; done";
    let (busy, mut pane) = ws.open("busy", "0", sh(script)).await.unwrap();
    let (echo, mut echo_pane) = ws.open("echo", "0", sh(ECHO_LOOP)).await.unwrap();
    let mut out = Collected::default();
    let mut echo_out = Collected::default();
    read_until_text(&mut echo_pane, &mut echo_out, "start")
        .await
        .unwrap();
    let input = host.input_writer(&echo.binding);
    input.push(b"before\n".to_vec()).unwrap();
    read_until_text(&mut echo_pane, &mut echo_out, "got:before")
        .await
        .unwrap();
    read_until(&mut pane, &mut out, LIVENESS, |c| c.text().len() > 2000)
        .await
        .unwrap();

    let next = agent_copy_in(&home, "relay-agent-next");
    let done = upgrade_in_background(&home, &next).await.unwrap();
    assert!(done.status.success(), "{}", text(&done));

    read_until(&mut pane, &mut out, LIVENESS, |c| c.resumed.len() == 1)
        .await
        .unwrap();
    let resumed_at = out.end;
    read_until(&mut pane, &mut out, LIVENESS, |c| c.end > resumed_at + 2000)
        .await
        .unwrap();
    assert!(out.gaps.is_empty(), "{:?}", out.gaps);
    let lines = super::host::numbered(&out.text());
    assert_eq!(
        lines,
        (0..lines.len() as u64).collect::<Vec<_>>(),
        "each line once, in order"
    );

    input.push(b"after\n".to_vec()).unwrap();
    read_until_text(&mut echo_pane, &mut echo_out, "got:after")
        .await
        .unwrap();
    let said = echo_out.text();
    assert_eq!(said.matches("got:before").count(), 1, "{said}");
    assert_eq!(said.matches("got:after").count(), 1, "{said}");
    let leases = host.session().await.unwrap().list_leases().await.unwrap();
    let mut ptys: Vec<_> = leases.iter().map(|l| l.binding.clone()).collect();
    ptys.sort_by_key(|b| b.pty);
    let mut want = vec![busy.binding, echo.binding];
    want.sort_by_key(|b| b.pty);
    assert_eq!(ptys, want, "the same two PTYs, nothing created");
}

/// A wrapper around the real agent whose `handover-check` first sleeps, so a signal can be sent
/// while the handover is under way.
fn slow_check(home: &TestHome) -> PathBuf {
    let real = agent_copy_in(home, "relay-agent-real");
    script(
        home,
        "slow-check",
        &format!(
            "[ \"$1\" = handover-check ] && sleep 2; exec {} \"$@\"",
            real.display()
        ),
    )
}

/// SIGTERM during a handover is not lost: the daemon stops as it would have (its shells end,
/// reported `agent restarted`), instead of handing over and forgetting the signal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigterm_during_the_handover_stops_the_daemon_in_order() {
    let home = TestHome::new();
    let session = home.session().await;
    let shell = session
        .create(PaneKey::new("up", "t", "0"), sh("sleep 1000"))
        .await
        .unwrap()
        .binding;
    let daemon = home.daemon_pid().expect("daemon running");
    let wrapper = slow_check(&home);
    let upgrade = upgrade_in_background(&home, &wrapper);
    relay_tests::eventually("the handover under way", || {
        agent_log(&home).contains("upgrade accepted").then_some(())
    });
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(daemon),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let out = upgrade.await.unwrap();
    assert!(!out.status.success(), "{}", text(&out));
    relay_tests::eventually("the daemon stopped", || {
        (!alive(daemon as i64)).then_some(())
    });
    let log = agent_log(&home);
    assert!(log.contains("SIGTERM received during the upgrade"), "{log}");
    assert!(log.contains("daemon stopped"), "an orderly stop: {log}");
    drop(session);
    home.start_daemon();
    let rows = home.leases_json();
    let row = lease(&rows, &shell);
    assert_eq!(row["state"], "ended", "{row}");
    assert_eq!(row["reason"], "agent_restarted", "{row}");
}

/// A daemon started with a relative `RELAY_HOME` (it runs in `/`) upgrades like any other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_started_with_a_relative_home_upgrades_too() {
    let home = TestHome::new();
    let (parent, name) = (
        home.path().parent().unwrap(),
        home.path().file_name().unwrap(),
    );
    let started = home
        .command(&bins().agent)
        .arg("daemon")
        .env("RELAY_HOME", name)
        .current_dir(parent)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(started.status.success(), "{}", text(&started));
    let session = home.session().await;
    let shell = session
        .create(PaneKey::new("up", "rel", "0"), sh("sleep 1000"))
        .await
        .unwrap()
        .binding;
    let daemon = home.daemon_pid().expect("daemon running");
    let pid = live_leases(&home)[0].1;
    let next = agent_copy_in(&home, "relay-agent-next");
    let out = home.relayctl(&["upgrade", "--to", next.to_str().unwrap(), "--yes"]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(exe_of(daemon), next);
    assert_eq!(live_leases(&home), vec![(shell.pty.to_string(), pid)]);
}
