//! Exact ends with honest outcomes: kill-all from a snapshot, what is left in a PTY's session,
//! supersede, forgetting history, and a kill the journal cannot record.

use std::fs;
use std::io::Write;

use nix::sys::signal::Signal;
use relay_protocol::message::{End, EndOutcome, EndWhen, Forget, Kill, Protect, Replace};
use relay_protocol::{EndReason, ErrorReply, LeaseState, Request, Response};

use crate::policy::{end, row};
use crate::restart::{signal_and_wait, Tmpfs};
use crate::support::{alive, contains, pane, pids_with_arg, spec, wait_until, Home, WAIT};

/// A shell script whose background job ignores SIGHUP (so it outlives its shell's hang-up),
/// and a way to find that job.
///
/// The job's command line is `sh -c 'sleep N; : TOKEN'` and only the job has that exact
/// argument (the outer shell's argument merely contains it), so `pids` finds it only after the
/// trap is set and the job exec'd: a test that waits for it never races the trap.
struct StubbornJob {
    script: String,
    arg: String,
}

impl StubbornJob {
    fn new(name: &str) -> StubbornJob {
        let arg = format!("sleep 100001; : relay-{name}-{}", std::process::id());
        let script = format!("(trap '' HUP; exec sh -c '{arg}') & echo started; wait");
        StubbornJob { script, arg }
    }

    /// Live pids of the job (its `sh`; the `sleep` has another command line).
    fn pids(&self) -> Vec<u32> {
        pids_with_arg(&self.arg)
    }
}

/// Kill-all acts on the snapshot it was given: a pane created after it is spared, a target
/// that ended before is reported already gone, a protected one is refused with the way out.
#[test]
fn kill_all_ends_exactly_its_snapshot_and_says_what_happened() {
    let home = Home::new();
    home.start_daemon();
    let mut c = home.client();
    let a = c.create(&pane("a"), &["sh"]).binding;
    let gone = c.create(&pane("gone"), &["sh", "-c", "exit 0"]).binding;
    let guarded = c.create(&pane("guarded"), &["sh"]).binding;
    c.mutate(Request::Protect(Protect {
        binding: guarded.clone(),
        protected: true,
    }))
    .unwrap();
    assert!(wait_until(WAIT, || c.lease(gone.pty).state == LeaseState::Ended));
    let snapshot = vec![a.clone(), gone.clone(), guarded.clone()];
    let later = c.create(&pane("later"), &["sh"]).binding;

    let report = end(&mut c, snapshot, EndWhen::Unprotected);
    let outcomes: Vec<&EndOutcome> = report.results.iter().map(|r| &r.outcome).collect();
    assert!(
        matches!(outcomes[0], EndOutcome::Ended { detail, .. } if detail == "killed by operator; SIGHUP"),
        "{outcomes:?}"
    );
    assert_eq!(
        outcomes[1],
        &EndOutcome::AlreadyGone {
            reason: Some(EndReason::Exited)
        }
    );
    assert!(
        matches!(outcomes[2], EndOutcome::Refused { why } if why.contains("protected")),
        "{outcomes:?}"
    );
    assert_eq!(c.lease(a.pty).reason, Some(EndReason::Killed));
    assert_eq!(
        c.lease(later.pty).state,
        LeaseState::Detached,
        "created after: spared"
    );
    assert_eq!(c.lease(guarded.pty).state, LeaseState::Detached);
    // Named explicitly, a protected shell is ended.
    let report = end(&mut c, vec![guarded.clone()], EndWhen::Always);
    assert!(matches!(
        report.results[0].outcome,
        EndOutcome::Ended { .. }
    ));
}

/// A background job that ignores SIGHUP outlives its shell's hang-up; the end SIGKILLs what is
/// left in the PTY's session after the grace and says so, on the lease and in the outcome.
#[test]
fn an_end_leaves_nothing_behind_in_the_pty_session() {
    let home = Home::new();
    home.start_daemon_with(&[("RELAY_EXIT_OUTPUT_GRACE_MS", "30000")]);
    let mut c = home.client();
    let job = StubbornJob::new("sweep");
    let b = c.create(&pane("sweep"), &["sh", "-c", &job.script]).binding;
    assert!(wait_until(WAIT, || !job.pids().is_empty()));
    let stubborn = job.pids();
    let shell = c.lease(b.pty).pid.unwrap();
    // A second end while the first is in progress shares its outcome (not "already gone":
    // the job still runs until the sweep).
    let first = c.send(Request::End(End {
        targets: vec![b.clone()],
        when: EndWhen::Always,
    }));
    // In progress: the shell died of the SIGHUP, but the job holds the terminal, so the lease
    // stays live (the exit output grace is long here) until the sweep at the kill grace (3 s).
    assert!(wait_until(WAIT, || !alive(shell)), "the shell got SIGHUP");
    let mut other = home.client();
    let second = end(&mut other, vec![b.clone()], EndWhen::Always);
    let Response::EndReport(report) = c.reply(first) else {
        panic!("expected EndReport")
    };
    for outcome in [&report.results[0].outcome, &second.results[0].outcome] {
        match outcome {
            EndOutcome::Ended { detail, .. } => assert!(
                detail.starts_with("killed by operator; SIGHUP; ")
                    && detail.contains("left in its session got SIGKILL"),
                "{detail}"
            ),
            other => panic!("expected Ended, got {other:?}"),
        }
    }
    for pid in stubborn {
        assert!(
            wait_until(WAIT, || !alive(pid)),
            "the HUP-ignoring job {pid} is gone"
        );
    }
    let detail = row(&mut c, b.pty).detail.unwrap_or_default();
    assert!(detail.contains("got SIGKILL"), "{detail}");
    // The plain Kill op does the same.
    let b = c
        .create(&pane("sweep2"), &["sh", "-c", &job.script])
        .binding;
    assert!(wait_until(WAIT, || !job.pids().is_empty()));
    c.mutate(Request::Kill(Kill { binding: b.clone() }))
        .unwrap();
    assert!(
        wait_until(WAIT, || job.pids().is_empty()),
        "swept after kill"
    );
}

/// A daemon that dies after a killed shell ended but before its session was swept: the next
/// daemon sweeps it (the lease had no confirmed end).
#[test]
fn a_kill_interrupted_by_a_daemon_crash_is_finished_by_the_next_daemon() {
    let home = Home::new();
    // A grace long enough that the crash below surely comes before the sweep, even on a
    // loaded machine.
    home.start_daemon_with(&[
        ("RELAY_EXIT_OUTPUT_GRACE_MS", "100"),
        ("RELAY_KILL_GRACE_MS", "30000"),
    ]);
    let mut c = home.client();
    let job = StubbornJob::new("half-killed");
    let b = c.create(&pane("half"), &["sh", "-c", &job.script]).binding;
    assert!(wait_until(WAIT, || !job.pids().is_empty()));
    c.mutate(Request::Kill(Kill { binding: b.clone() }))
        .unwrap();
    // The shell ended at once; the sweep of its session is due at the grace.
    assert!(wait_until(WAIT, || c.lease(b.pty).state == LeaseState::Ended));
    assert!(!job.pids().is_empty(), "not swept yet");
    let daemon = c.status().pid;
    drop(c);
    signal_and_wait(daemon, Signal::SIGKILL);
    home.start_daemon();
    let mut c = home.client();
    assert!(job.pids().is_empty(), "swept by the next daemon");
    assert_eq!(c.lease(b.pty).reason, Some(EndReason::Killed));
}

/// A daemon killed with SIGKILL leaves a HUP-ignoring job in a dead shell's session; the next
/// daemon ends it before reporting the lease ended.
#[test]
fn a_restart_ends_what_a_killed_daemon_left_in_a_session() {
    let home = Home::new();
    let (mut bridge, mut c) = home.bridge();
    let job = StubbornJob::new("orphan-job");
    let b = c
        .create(&pane("orphan-job"), &["sh", "-c", &job.script])
        .binding;
    assert!(wait_until(WAIT, || !job.pids().is_empty()));
    let daemon = c.status().pid;
    drop(c);
    signal_and_wait(daemon, Signal::SIGKILL);
    let _ = bridge.wait();
    let (_bridge, mut c) = home.bridge();
    assert!(
        job.pids().is_empty(),
        "the job was ended before the daemon answered"
    );
    assert_eq!(c.lease(b.pty).state, LeaseState::Ended);
}

/// Replace supersedes: the old process keeps running and stays listed (endable by its id, not
/// writable), the pane's new PTY is live.
#[test]
fn replace_supersedes_without_killing_the_old_shell() {
    let home = Home::new();
    home.start_daemon();
    let mut c = home.client();
    let p = pane("restart-me");
    let old = c.create(&p, &["sh"]).binding;
    let old_pid = c.lease(old.pty).pid.unwrap();
    let new = match c.request(Request::Replace(Replace {
        old: old.clone(),
        spec: spec(&["sh"]),
    })) {
        Response::Created(created) => created.binding,
        other => panic!("expected Created, got {other:?}"),
    };
    assert_ne!(new.pty, old.pty);
    assert_eq!(c.lease(old.pty).state, LeaseState::Superseded);
    assert_eq!(c.lease(new.pty).state, LeaseState::Detached);
    assert!(alive(old_pid), "superseding never kills");
    assert!(matches!(
        c.input(&old, "x"),
        Err(ErrorReply::Mismatch { .. })
    ));
    let a = c.attach(&p, None, Some(0)).unwrap();
    assert_eq!(a.binding, new);
    // Replacing with a stale binding is refused and spawns nothing.
    let stale = c.request(Request::Replace(Replace {
        old: old.clone(),
        spec: spec(&["sh"]),
    }));
    assert!(
        matches!(stale, Response::Error(ErrorReply::Mismatch { .. })),
        "{stale:?}"
    );
    assert_eq!(c.leases().len(), 2);
    let report = end(&mut c, vec![old.clone()], EndWhen::Always);
    assert!(matches!(
        report.results[0].outcome,
        EndOutcome::Ended { .. }
    ));
    assert!(wait_until(WAIT, || !alive(old_pid)));
}

/// Forget prunes ended history only; a binding whose lease was forgotten reads as ended with
/// reason Forgotten, never as "no such pane".
#[test]
fn forgotten_history_reads_as_forgotten() {
    let home = Home::new();
    home.start_daemon();
    let mut c = home.client();
    let done = c.create(&pane("done"), &["sh", "-c", "exit 0"]).binding;
    let live = c.create(&pane("live"), &["sh"]).binding;
    assert!(wait_until(WAIT, || c.lease(done.pty).state == LeaseState::Ended));
    match c.request(Request::Forget(Forget {
        ptys: vec![done.pty, live.pty],
    })) {
        Response::Forgot(f) => {
            assert_eq!(f.forgotten, 1);
            assert_eq!(f.not_ended, vec![live.pty]);
        }
        other => panic!("expected Forgot, got {other:?}"),
    }
    assert!(c.leases().iter().all(|l| l.binding != done));
    assert!(matches!(
        c.attach(&pane("done"), Some(done.pty), None),
        Err(ErrorReply::Ended {
            reason: EndReason::Forgotten,
            ..
        })
    ));
    assert_eq!(c.lease(live.pty).state, LeaseState::Detached);
}

/// Regression: a kill requested while the journal could not be written answered "killed" and
/// later read `agent restarted`. Now nothing is signalled and the error names the journal.
/// Needs root to mount a small tmpfs on `state/`; otherwise it checks
/// nothing and says so (`relay_testkit::skip`: a failure under `RELAY_TESTS_REQUIRE_PRIVILEGED=1`).
#[test]
fn a_kill_the_journal_cannot_record_is_refused() {
    let home = Home::new();
    let state = home.path().join("state");
    fs::create_dir_all(&state).unwrap();
    let Some(_tmpfs) = Tmpfs::mount(&state, "256k") else {
        relay_testkit::skip(
            "a_kill_the_journal_cannot_record_is_refused",
            "root and a mountable tmpfs",
        );
        return;
    };
    home.start_daemon();
    let mut c = home.client();
    let b = c.create(&pane("precious"), &["sh"]).binding;
    let pid = c.lease(b.pty).pid.unwrap();
    let done = c.create(&pane("done"), &["true"]).binding;
    assert!(wait_until(WAIT, || c.lease(done.pty).state == LeaseState::Ended));
    let filler = state.join("filler");
    let mut f = fs::File::create(&filler).unwrap();
    while f.write_all(&[0u8; 4096]).is_ok() {}
    drop(f);
    // The journal's last page may still have room; fill it with blank lines (skipped on load;
    // a failed append cuts them off again, so this is repeated before each request).
    let fill_page = || {
        let path = crate::restart::journal(&home);
        let mut j = fs::OpenOptions::new().append(true).open(path).unwrap();
        while j.write_all(b"\n").is_ok() {}
    };
    fill_page();
    match c.mutate(Request::Kill(Kill { binding: b.clone() })) {
        Err(ErrorReply::Internal { message }) => {
            assert!(
                contains(message.as_bytes(), "could not be recorded"),
                "{message}"
            );
            assert!(contains(message.as_bytes(), "free disk space"), "{message}");
        }
        other => panic!("expected a journal error, got {other:?}"),
    }
    fill_page();
    let report = end(&mut c, vec![b.clone()], EndWhen::Always);
    assert!(
        matches!(&report.results[0].outcome, EndOutcome::Refused { why } if why.contains("nothing was signalled")),
        "{report:?}"
    );
    assert!(alive(pid), "nothing was signalled");
    assert_eq!(c.lease(b.pty).state, LeaseState::Detached);
    fs::remove_file(&filler).unwrap();
    c.mutate(Request::Kill(Kill { binding: b.clone() }))
        .unwrap();
    assert!(wait_until(WAIT, || c.lease(b.pty).state == LeaseState::Ended));
    assert_eq!(c.lease(b.pty).reason, Some(EndReason::Killed));
}
