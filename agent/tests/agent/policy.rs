//! The lifecycle policy with real shells and short durations: what it ends (after re-verifying),
//! what it keeps, and what it only suggests.

use std::time::Duration;

use relay_protocol::message::{
    Detach, End, EndOutcome, EndReport, EndWhen, Inspect, Inspected, LeaseRow, Protect, SetPolicy,
    Tag,
};
use relay_protocol::{Binding, EndReason, ErrorReply, LeaseState, PtyId, Request, Response};

use crate::support::{alive, children, contains, pane, wait_until, Client, Home, WAIT};

/// A grace long enough for a test to act before it, short enough to wait for.
const GRACE_S: u64 = 2;

/// States `spec` as this connection's policy.
#[allow(clippy::result_large_err)] // the wire error, compared directly
pub fn set_policy(c: &mut Client, spec: &str) -> Result<(), ErrorReply> {
    c.mutate(Request::SetPolicy(SetPolicy { spec: spec.into() }))
}

pub fn inspect(c: &mut Client) -> Inspected {
    match c.request(Request::Inspect(Inspect {})) {
        Response::Inspected(i) => i,
        other => panic!("expected Inspected, got {other:?}"),
    }
}

pub fn row(c: &mut Client, pty: PtyId) -> LeaseRow {
    inspect(c)
        .leases
        .into_iter()
        .find(|r| r.info.binding.pty == pty)
        .unwrap_or_else(|| panic!("no row for {pty}"))
}

pub fn end(c: &mut Client, targets: Vec<Binding>, when: EndWhen) -> EndReport {
    let req = Request::End(End { targets, when });
    match c.request(req) {
        Response::EndReport(r) => r,
        other => panic!("expected EndReport, got {other:?}"),
    }
}

/// The user's login shell (no explicit command), never typed into, detached once it sits at its
/// prompt (printed something, no children left).
///
/// Its grace starts at that detach. Created detached, a login shell whose profile still ran
/// programs when a short grace ran out (a loaded machine) would be found busy and looked at
/// again only an hour later, and the test would hang on a premise, not on the policy.
fn unused_shell(c: &mut Client, leaf: &str) -> Binding {
    let b = c.open(&pane(leaf), &[], None).unwrap().created.binding;
    let pid = c.lease(b.pty).pid.unwrap();
    assert!(
        wait_until(WAIT, || c.lease(b.pty).bytes_out > 0
            && children(pid).is_empty()),
        "{b} reached its prompt"
    );
    c.mutate(Request::Detach(Detach { binding: b.clone() }))
        .unwrap();
    c.forget_output(b.pty);
    b
}

fn ended_by_policy(c: &mut Client, b: &Binding, within: Duration) -> bool {
    wait_until(within, || c.lease(b.pty).state == LeaseState::Ended)
}

/// An unused detached shell ends after the grace, with the reason recorded; one re-attached
/// before its deadline is kept, and its grace restarts at the next detach.
#[test]
fn an_unused_detached_shell_ends_after_the_grace_and_reattach_cancels() {
    let home = Home::new();
    home.start_daemon();
    let mut c = home.client();
    set_policy(&mut c, &format!("unused={GRACE_S}s")).unwrap();
    let gone = unused_shell(&mut c, "abandoned");
    let kept = unused_shell(&mut c, "came-back");
    let pid = c.lease(gone.pty).pid.unwrap();
    // A login shell runs programs while it starts (its profile): busy until it sits at its
    // prompt, then due for cleanup.
    let mut tag = row(&mut c, gone.pty).tag;
    wait_until(WAIT, || {
        tag = row(&mut c, gone.pty).tag;
        matches!(&tag, Tag::CleanupAt { .. })
    });
    assert!(
        matches!(&tag, Tag::CleanupAt { why, .. } if why == "never used, detached 2s"),
        "{tag:?}"
    );
    // Attach the second one before its deadline and stay past it.
    let a = c.attach(&pane("came-back"), Some(kept.pty), None).unwrap();
    assert!(
        ended_by_policy(&mut c, &gone, WAIT),
        "the unused shell ended"
    );
    assert!(wait_until(WAIT, || !alive(pid)), "its process is gone");
    let lease = c.lease(gone.pty);
    assert_eq!(lease.reason, Some(EndReason::Expired));
    // What the end did is added once it is confirmed.
    let detail = |c: &mut Client, pty| row(c, pty).detail.unwrap_or_default();
    assert!(
        wait_until(WAIT, || detail(&mut c, gone.pty)
            == "policy: never used, detached 2s; SIGHUP"),
        "{}",
        detail(&mut c, gone.pty)
    );
    std::thread::sleep(Duration::from_secs(GRACE_S + 1));
    assert_eq!(
        c.lease(kept.pty).state,
        LeaseState::Attached,
        "attached: kept"
    );
    // Detached again: a fresh grace from now, then it ends too.
    c.mutate(Request::Detach(Detach {
        binding: a.binding.clone(),
    }))
    .unwrap();
    std::thread::sleep(Duration::from_millis(GRACE_S * 1000 / 2));
    assert_eq!(
        c.lease(kept.pty).state,
        LeaseState::Detached,
        "not before its new grace"
    );
    assert!(ended_by_policy(&mut c, &kept, WAIT));
}

/// Shells created by a connection that stated no policy (an older connector) are never ended by
/// a timer; nor are protected ones, until the protection is taken back.
#[test]
fn no_policy_and_protected_shells_are_never_ended_by_a_timer() {
    let home = Home::new();
    home.start_daemon_with(&[("RELAY_UNUSED_GRACE", "1s")]);
    let mut old = home.client();
    let legacy = unused_shell(&mut old, "legacy");
    let mut c = home.client();
    set_policy(&mut c, "").unwrap(); // the agent's defaults: unused=1s here
    let guarded = unused_shell(&mut c, "guarded");
    c.mutate(Request::Protect(Protect {
        binding: guarded.clone(),
        protected: true,
    }))
    .unwrap();
    assert_eq!(row(&mut c, guarded.pty).tag, Tag::Protected);
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(
        c.lease(legacy.pty).state,
        LeaseState::Detached,
        "no policy: kept"
    );
    assert!(
        matches!(row(&mut c, legacy.pty).tag, Tag::None),
        "nothing to say"
    );
    assert_eq!(row(&mut c, legacy.pty).policy, None);
    assert_eq!(
        c.lease(guarded.pty).state,
        LeaseState::Detached,
        "protected: kept"
    );
    // Unprotected long after its grace: re-armed, re-checked and ended at once.
    c.mutate(Request::Protect(Protect {
        binding: guarded.clone(),
        protected: false,
    }))
    .unwrap();
    assert!(ended_by_policy(&mut c, &guarded, WAIT));
    assert_eq!(c.lease(legacy.pty).state, LeaseState::Detached);
}

/// A login shell that was typed into.
fn typed(c: &mut Client, leaf: &str, line: &str) -> Binding {
    let b = unused_shell(c, leaf);
    c.input(&b, line).unwrap();
    b
}

/// Used shells holding work are kept even under an opted-in idle expiry: a foreground
/// `sleep`, a background job, `vi`, a pane whose own process is its command. An idle used shell at its prompt is ended under the same
/// policy (so "kept" above is the policy's doing), and a shell waiting in `read` is kept by the
/// default policy (idle expiry off).
#[test]
fn shells_holding_work_are_kept_and_an_idle_one_is_not() {
    let home = Home::new();
    home.start_daemon();
    let mut c = home.client();
    set_policy(&mut c, "unused=1s;idle=2s").unwrap();
    let sleeping = typed(&mut c, "sleep", "sleep 3600\n");
    let job = typed(&mut c, "job", "sleep 3601 &\n");
    let vi = typed(&mut c, "vi", "vi\n");
    let idle = typed(&mut c, "idle", "echo hi\n");
    let command = c.create(&pane("command"), &["sleep", "3603"]).binding;
    // A job reparented away from the shell (`nohup`, `(cmd &)`) is still in its session.
    let reparented = typed(&mut c, "reparented", "(sleep 3604 &)\n");
    // A login shell that exec'd a program now runs a command.
    let execed = typed(&mut c, "execed", "exec sleep 3605\n");
    for b in [&sleeping, &job, &vi] {
        let pid = c.lease(b.pty).pid.unwrap();
        assert!(
            wait_until(WAIT, || !children(pid).is_empty()),
            "{b} started work"
        );
    }
    let mut reader = home.client();
    set_policy(&mut reader, "unused=1s").unwrap();
    let waiting = typed(&mut reader, "read", "read answer\n");

    assert!(
        ended_by_policy(&mut c, &idle, WAIT),
        "idle used shell ended by idle expiry"
    );
    let detail = row(&mut c, idle.pty).detail.unwrap_or_default();
    assert!(detail.starts_with("policy: used, idle 2s"), "{detail}");
    std::thread::sleep(Duration::from_secs(2));
    for b in [
        &sleeping,
        &job,
        &vi,
        &waiting,
        &command,
        &reparented,
        &execed,
    ] {
        assert_eq!(c.lease(b.pty).state, LeaseState::Detached, "{b} kept");
    }
    for (b, why) in [
        (&command, "running its command"),
        (&execed, "running its command"),
        (&reparented, "has children"),
        (&sleeping, "has children"),
        (&job, "has children"),
        (&vi, "has children"),
    ] {
        let tag = row(&mut c, b.pty).tag;
        assert!(
            matches!(&tag, Tag::Kept { why: w } if w == why),
            "{b}: {tag:?}"
        );
    }
    let all = vec![sleeping, job, vi, waiting, command, reparented, execed];
    end(&mut c, all, EndWhen::Always);
}

/// "End all eligible" re-verifies each target when it ends it: a shell that started work between
/// the listing and the end is kept with the reason; an unchanged one is ended.
#[test]
fn end_all_eligible_keeps_a_shell_that_became_busy() {
    let home = Home::new();
    home.start_daemon_with(&[("RELAY_SUGGEST_AFTER", "1s")]);
    let mut c = home.client();
    set_policy(&mut c, "").unwrap();
    let quiet = typed(&mut c, "quiet", "echo hi\n");
    let busy = typed(&mut c, "busy", "echo hi\n");
    let suggested =
        |c: &mut Client, b: &Binding| matches!(row(c, b.pty).tag, Tag::Suggested { .. });
    assert!(wait_until(WAIT, || suggested(&mut c, &quiet)
        && suggested(&mut c, &busy)));
    // Listed as eligible; now one starts work before the end arrives.
    c.input(&busy, "sleep 3602\n").unwrap();
    let pid = c.lease(busy.pty).pid.unwrap();
    assert!(wait_until(WAIT, || !children(pid).is_empty()));
    // Idle again past the suggest age, so only the child can keep it.
    std::thread::sleep(Duration::from_millis(1500));
    let report = end(&mut c, vec![quiet.clone(), busy.clone()], EndWhen::Eligible);
    assert!(
        matches!(&report.results[0].outcome, EndOutcome::Ended { detail, .. }
            if detail.starts_with("ended as eligible by operator (used, idle")),
        "{report:?}"
    );
    assert_eq!(
        report.results[1].outcome,
        EndOutcome::Kept {
            why: "checked again and kept: has children".into()
        }
    );
    assert_eq!(c.lease(busy.pty).state, LeaseState::Detached);
    assert!(alive(pid));
    end(&mut c, vec![busy], EndWhen::Always);
}

/// A policy with an unknown condition or an unbounded value is refused, never read as
/// unconditional, and the connection's PTYs stay unmanaged.
#[test]
fn an_unknown_policy_condition_is_refused() {
    let home = Home::new();
    home.start_daemon();
    let mut c = home.client();
    for (bad, says) in [
        ("kill=always", "unknown policy condition \"kill\""),
        ("unused=0s", "use 1s to 90d"),
        ("unused=soon", "write e.g. 90s"),
    ] {
        match set_policy(&mut c, bad) {
            Err(ErrorReply::BadRequest { message }) => assert!(message.contains(says), "{message}"),
            other => panic!("{bad}: expected BadRequest, got {other:?}"),
        }
    }
    let b = unused_shell(&mut c, "unmanaged");
    assert_eq!(row(&mut c, b.pty).policy, None, "nothing was stated");
    let out = c.attach(&pane("unmanaged"), Some(b.pty), Some(0)).unwrap();
    c.input(&b, "echo $((6*7))\n").unwrap();
    assert!(contains(
        &c.output_until(b.pty, out.replay_from, |o| contains(o, "42")),
        "42"
    ));
}

/// A5: between the timer's read of the facts and the end, a fact changes — the shell is typed
/// into, or protected. The end re-checks under the book lock, sees the change and does not end
/// the shell (`Changed`: the timer decides again from the new facts, which keep it). The daemon
/// is stopped at that exact moment by its `policy-end` pause point (debug builds,
/// `agent/src/pause.rs`), so the race is not left to timing.
#[test]
fn a_fact_that_changes_between_the_timer_and_the_end_keeps_the_shell() {
    type Change = fn(&mut Client, &Binding);
    let typed: Change = |c, b| c.input(b, "echo back\n").unwrap();
    let protected: Change = |c, b| {
        c.mutate(Request::Protect(Protect {
            binding: b.clone(),
            protected: true,
        }))
        .unwrap()
    };
    for (what, change) in [("typed into", typed), ("protected", protected)] {
        let home = Home::new();
        let dir = home.path().join("pause");
        std::fs::create_dir_all(&dir).unwrap();
        let dir_text = dir.to_str().unwrap();
        home.start_daemon_with(&[
            ("RELAY_TEST_PAUSE_AT", "policy-end"),
            ("RELAY_TEST_PAUSE_DIR", dir_text),
        ]);
        let mut c = home.client();
        set_policy(&mut c, "unused=1s").unwrap();
        let b = unused_shell(&mut c, "raced");
        assert!(
            wait_until(WAIT, || dir.join("policy-end.reached").exists()),
            "the timer reached the end of {b}"
        );
        change(&mut c, &b);
        std::fs::write(dir.join("policy-end.go"), b"").unwrap();
        // The end would be immediate; the timer, re-armed, now finds a shell to keep.
        std::thread::sleep(Duration::from_secs(2));
        assert_eq!(
            c.lease(b.pty).state,
            LeaseState::Detached,
            "a shell {what} while being ended is kept"
        );
        let tag = row(&mut c, b.pty).tag;
        assert!(
            !matches!(tag, Tag::CleanupAt { .. }),
            "{what}: no cleanup due any more: {tag:?}"
        );
        assert!(home.log().contains("test pause point reached"));
    }
}
