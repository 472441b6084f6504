//! Timer arithmetic under `tokio::time::pause`, with an owner whose facts the test sets. The
//! oracle for rule A5: advancing time alone never ends a shell whose facts changed.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use relay_protocol::Incarnation;

use super::*;
use crate::lifecycle::policy::{Children, LeasePolicy, DEFAULT_SUGGEST_AFTER};
use crate::lifecycle::PolicyEnd;

const GRACE: u64 = 10 * 60_000;

#[derive(Clone, Default)]
struct Fake {
    inner: Arc<FakeInner>,
}

#[derive(Default)]
struct FakeInner {
    start: Mutex<Option<tokio::time::Instant>>,
    facts: Mutex<HashMap<PtyId, Facts>>,
    ended: Mutex<Vec<(PtyId, Rule)>>,
    journal_full: Mutex<bool>,
    timers: Timers,
}

impl Fake {
    fn set(&self, pty: PtyId, f: impl FnOnce(&mut Facts)) {
        let mut all = self.inner.facts.lock().unwrap();
        f(all.get_mut(&pty).expect("known pty"));
    }
    fn ended(&self) -> Vec<(PtyId, Rule)> {
        self.inner.ended.lock().unwrap().clone()
    }
}

impl Owner for Fake {
    fn facts(&self, pty: &PtyId, read_children: bool) -> Option<Facts> {
        let mut f = *self.inner.facts.lock().unwrap().get(pty)?;
        if !read_children {
            f.children = Children::NotRead;
        }
        Some(f)
    }
    fn end_by_policy(&self, pty: &PtyId, rule: Rule, seen: &Facts) -> PolicyEnd {
        if *self.inner.journal_full.lock().unwrap() {
            return PolicyEnd::Failed;
        }
        let mut all = self.inner.facts.lock().unwrap();
        let now = all.get_mut(pty).unwrap();
        if now.attached != seen.attached || now.used != seen.used || now.protected != seen.protected
        {
            return PolicyEnd::Changed;
        }
        now.running = false;
        self.inner.ended.lock().unwrap().push((*pty, rule));
        PolicyEnd::Started
    }
    fn now_ms(&self) -> u64 {
        let start = *self
            .inner
            .start
            .lock()
            .unwrap()
            .get_or_insert_with(tokio::time::Instant::now);
        start.elapsed().as_millis() as u64
    }
    fn suggest_after(&self) -> Duration {
        DEFAULT_SUGGEST_AFTER
    }
    fn timers(&self) -> &Timers {
        &self.inner.timers
    }
}

fn pty(n: u64) -> PtyId {
    PtyId {
        incarnation: Incarnation(1),
        counter: n,
    }
}

/// A detached, never used shell detached at `since_ms` under a 10-minute grace.
fn detached(owner: &Fake, id: PtyId, since_ms: u64) {
    let facts = Facts {
        running: true,
        attached: 0,
        superseded: false,
        since_ms,
        used: false,
        command: false,
        last_input_ms: None,
        last_output_ms: None,
        protected: false,
        alternate_screen: Some(false),
        children: Children::Count(0),
        policy: Some(LeasePolicy {
            unused_grace_ms: Some(GRACE),
            idle_expiry_ms: None,
        }),
    };
    owner.inner.facts.lock().unwrap().insert(id, facts);
}

/// Advances the paused clock. Tokio rounds a sleep's deadline up to its next millisecond tick,
/// so tests look 1 ms before a deadline and 1 ms after it.
async fn advance_ms(ms: u64) {
    tokio::time::advance(Duration::from_millis(ms)).await;
    // Let woken timer tasks run.
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
}

#[tokio::test(start_paused = true)]
async fn an_unused_shell_ends_at_its_deadline_and_not_before() {
    let owner = Fake::default();
    let a = pty(1);
    detached(&owner, a, owner.now_ms());
    owner.timers().arm(&owner, a);
    assert!(owner.timers().is_armed(&a));
    advance_ms(GRACE - 1).await;
    assert!(owner.ended().is_empty(), "not before the grace");
    advance_ms(2).await;
    assert_eq!(owner.ended(), vec![(a, Rule::Unused(GRACE))]);
    assert!(owner.timers().is_empty(), "cleared after the end");
}

#[tokio::test(start_paused = true)]
async fn time_alone_never_ends_a_shell_whose_facts_changed() {
    // Each change happens while the timer is armed and is not announced to the timers (as if
    // the event that should re-arm them were missed): the re-check at the deadline must see it.
    type Change = (&'static str, fn(&mut Facts));
    let changes: [Change; 5] = [
        ("attached", |f| f.attached = 1),
        ("typed into", |f| {
            f.used = true;
            f.last_input_ms = Some(60_000);
        }),
        ("protected", |f| f.protected = true),
        ("started a child", |f| f.children = Children::Count(1)),
        ("opened a full-screen program", |f| {
            f.alternate_screen = Some(true)
        }),
    ];
    for (name, change) in changes {
        let owner = Fake::default();
        let a = pty(1);
        detached(&owner, a, owner.now_ms());
        owner.timers().arm(&owner, a);
        advance_ms(60_000).await;
        owner.set(a, change);
        // Far beyond every deadline, in steps.
        for _ in 0..100 {
            advance_ms(GRACE).await;
        }
        assert!(owner.ended().is_empty(), "{name}: ended by time alone");
    }
}

#[tokio::test(start_paused = true)]
async fn a_busy_shell_is_looked_at_again_hourly_and_ends_once_idle() {
    let owner = Fake::default();
    let a = pty(1);
    detached(&owner, a, owner.now_ms());
    owner.set(a, |f| f.children = Children::Count(1));
    owner.timers().arm(&owner, a);
    advance_ms(GRACE + 1).await;
    assert!(owner.ended().is_empty());
    assert!(owner.timers().is_armed(&a), "re-armed for a later look");
    owner.set(a, |f| f.children = Children::Count(0));
    advance_ms(RECHECK_BUSY.as_millis() as u64 - 2).await;
    assert!(owner.ended().is_empty(), "no look before the hour");
    advance_ms(3).await;
    assert_eq!(owner.ended(), vec![(a, Rule::Unused(GRACE))]);
}

#[tokio::test(start_paused = true)]
async fn clearing_and_re_arming_follow_the_latest_detach() {
    let owner = Fake::default();
    let a = pty(1);
    detached(&owner, a, owner.now_ms());
    owner.timers().arm(&owner, a);
    advance_ms(GRACE / 2).await;
    // Attached: the timer is cleared.
    owner.set(a, |f| f.attached = 1);
    owner.timers().clear(&a);
    advance_ms(GRACE).await;
    assert!(owner.ended().is_empty());
    // Detached again: a fresh grace from the new detach.
    let since = owner.now_ms();
    owner.set(a, |f| {
        f.attached = 0;
        f.since_ms = since;
    });
    owner.timers().arm(&owner, a);
    advance_ms(GRACE - 1).await;
    assert!(owner.ended().is_empty(), "the grace restarts at the detach");
    advance_ms(2).await;
    assert_eq!(owner.ended().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn leases_without_a_policy_or_used_ones_arm_nothing() {
    let owner = Fake::default();
    let (a, b) = (pty(1), pty(2));
    detached(&owner, a, 0);
    owner.set(a, |f| f.policy = None);
    detached(&owner, b, 0);
    owner.set(b, |f| f.used = true);
    owner.timers().arm(&owner, a);
    owner.timers().arm(&owner, b);
    assert!(owner.timers().is_empty());
    advance_ms(100 * GRACE).await;
    assert!(owner.ended().is_empty());
}

#[tokio::test(start_paused = true)]
async fn an_end_that_could_not_be_recorded_is_tried_again_later() {
    let owner = Fake::default();
    let a = pty(1);
    detached(&owner, a, owner.now_ms());
    *owner.inner.journal_full.lock().unwrap() = true;
    owner.timers().arm(&owner, a);
    advance_ms(GRACE + 1).await;
    assert!(owner.ended().is_empty());
    assert!(
        owner.timers().is_armed(&a),
        "not dropped: tried again later"
    );
    *owner.inner.journal_full.lock().unwrap() = false;
    advance_ms(RETRY_FAILED.as_millis() as u64 + 1).await;
    assert_eq!(owner.ended(), vec![(a, Rule::Unused(GRACE))]);
}
