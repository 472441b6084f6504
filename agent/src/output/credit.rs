//! Credit accounting for one (connection, PTY) subscription.
//!
//! Sans-IO. The agent forwards a pane's output only while the bytes sent but not yet acknowledged
//! stay below the window; the connector sends `Ack{pty, offset}` as the app consumes output. The
//! PTY itself is always drained into the ring regardless of credit, so a slow consumer only delays
//! *its own* forwarding (rule F), and when it falls behind the ring it gets an `OutputGap`.
//!
//! Gap bytes were never sent, so they must not count as in flight: a connector that acknowledged
//! everything it received before a gap must get credit again even though its acks are still below
//! the gap's end. The pending gaps are kept (a few entries) until acks pass them.
//!
//! A connector that did not list the `credit` capability never sends `Ack`; its subscriptions use
//! [`Credit::unlimited`], where everything sent counts as acknowledged (the connection's bounded
//! queue still limits what is buffered).
//!
//! A lossless subscription's window grows ([`Credit::growing`], protocol 1.8, capability
//! `window-growth`): one window per round trip caps an every-byte consumer at `window / RTT`, so
//! each ack that arrives after the window ran full ([`Credit::on_starved`]) widens it by the bytes
//! the ack freed — TCP's slow start, about doubling per round trip while the window is what holds
//! output back — up to a maximum (the replay ring) and within the connection's
//! [`WindowBudget`]. A consumer that stalls sends no acks, so its window stops growing.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Most unacknowledged gaps kept; beyond this the subscription waits for acks (bounded memory).
pub const MAX_PENDING_GAPS: usize = 64;

/// How far the windows of one connection's subscriptions may grow together beyond their
/// starting window, in bytes (env `RELAY_WINDOW_BUDGET_BYTES`): what the peer may be sent beyond
/// its acks stays bounded however many lossless panes it follows.
#[derive(Debug)]
pub struct WindowBudget {
    free: AtomicU64,
}

impl WindowBudget {
    /// A budget of `bytes`.
    pub fn new(bytes: u64) -> Arc<WindowBudget> {
        Arc::new(WindowBudget {
            free: AtomicU64::new(bytes),
        })
    }

    /// Bytes not granted to any window.
    pub fn free(&self) -> u64 {
        self.free.load(Ordering::Acquire)
    }

    /// Grants up to `want` bytes; returns how many.
    fn take(&self, want: u64) -> u64 {
        let before = self
            .free
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |free| {
                Some(free - free.min(want))
            })
            .unwrap_or(0);
        before.min(want)
    }

    fn give(&self, n: u64) {
        self.free.fetch_add(n, Ordering::AcqRel);
    }
}

/// A growing window's state: what it was granted from the budget goes back when it is dropped.
#[derive(Debug)]
struct Growth {
    max: u64,
    budget: Arc<WindowBudget>,
    granted: u64,
    /// The window ran full since the last ack: the window, not output, held the sender back.
    starved: bool,
}

impl Drop for Growth {
    fn drop(&mut self) {
        self.budget.give(self.granted);
    }
}

/// Flow-control state of one subscription. Offsets are absolute PTY output offsets.
#[derive(Debug)]
pub struct Credit {
    window: u64,
    /// Offset of the next byte to forward (everything before it was sent or skipped as a gap).
    sent: u64,
    /// Highest offset the peer acknowledged (never above `sent`).
    acked: u64,
    /// Skipped ranges `from..to` not yet fully passed by `acked`, oldest first.
    gaps: VecDeque<(u64, u64)>,
    /// No acks will come: what is sent counts as acknowledged.
    implicit_acks: bool,
    /// Set for a window that grows with the link ([`Credit::growing`]).
    growth: Option<Growth>,
}

impl Credit {
    /// A subscription that starts forwarding at `start` with a window of `window` bytes (at
    /// least 1).
    pub fn new(window: u64, start: u64) -> Self {
        Credit {
            window: window.max(1),
            sent: start,
            acked: start,
            gaps: VecDeque::new(),
            implicit_acks: false,
            growth: None,
        }
    }

    /// This window grows with the link (see the module docs) up to `max` bytes (never below
    /// where it starts), taking what it grows by from `budget` and giving it back when dropped.
    pub fn growing(self, max: u64, budget: Arc<WindowBudget>) -> Self {
        Credit {
            growth: Some(Growth {
                max: max.max(self.window),
                budget,
                granted: 0,
                starved: false,
            }),
            ..self
        }
    }

    /// The window now, in bytes.
    pub fn window(&self) -> u64 {
        self.window
    }

    /// The sender found no allowance ([`Credit::allowance`] was 0) with output waiting: the next
    /// ack may widen a growing window.
    pub fn on_starved(&mut self) {
        if let Some(g) = self.growth.as_mut() {
            g.starved = true;
        }
    }

    /// A subscription without flow control (the peer does not send acks), starting at `start`.
    pub fn unlimited(start: u64) -> Self {
        Credit {
            window: u64::MAX,
            implicit_acks: true,
            ..Credit::new(1, start)
        }
    }

    /// Offset of the next byte to forward.
    pub fn cursor(&self) -> u64 {
        self.sent
    }

    /// Bytes of output sent and not yet acknowledged (gap bytes excluded).
    pub fn in_flight(&self) -> u64 {
        let skipped: u64 = self
            .gaps
            .iter()
            .map(|&(from, to)| to.saturating_sub(from.max(self.acked)))
            .sum();
        (self.sent - self.acked) - skipped
    }

    /// How many more bytes may be sent now.
    pub fn allowance(&self) -> u64 {
        if self.gaps.len() >= MAX_PENDING_GAPS {
            return 0;
        }
        self.window.saturating_sub(self.in_flight())
    }

    /// Records that `n` bytes were sent at the cursor.
    pub fn on_sent(&mut self, n: u64) {
        self.sent += n;
        if self.implicit_acks {
            self.acked = self.sent;
        }
    }

    /// Records that `from..to` was skipped (reported as a gap). `from` must be the cursor.
    pub fn on_gap(&mut self, from: u64, to: u64) {
        debug_assert_eq!(from, self.sent, "a gap starts at the cursor");
        if to > from {
            self.sent = to;
            if self.implicit_acks {
                self.acked = to;
            } else {
                self.gaps.push_back((from, to));
            }
        }
    }

    /// Applies an acknowledgement. Stale acks (at or below an earlier one) are ignored; an ack
    /// beyond what was sent is clamped to the cursor. Returns whether credit changed.
    pub fn on_ack(&mut self, offset: u64) -> bool {
        let offset = offset.min(self.sent);
        if offset <= self.acked {
            return false;
        }
        let freed = offset - self.acked;
        if let Some(g) = self.growth.as_mut().filter(|g| g.starved) {
            g.starved = false;
            let got = g.budget.take(freed.min(g.max.saturating_sub(self.window)));
            g.granted += got;
            self.window += got;
        }
        self.acked = offset;
        while self.gaps.front().is_some_and(|&(_, to)| to <= self.acked) {
            self.gaps.pop_front();
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Clone, Copy)]
    enum Step {
        Sent(u64),
        Gap(u64, u64),
        Ack(u64),
    }
    use Step::*;

    /// Runs `steps` on a fresh credit (window 10, start 100) and checks (cursor, in_flight,
    /// allowance) after the last step.
    fn check(steps: &[Step], want: (u64, u64, u64)) {
        let mut c = Credit::new(10, 100);
        for s in steps {
            match *s {
                Sent(n) => c.on_sent(n),
                Gap(f, t) => c.on_gap(f, t),
                Ack(o) => {
                    c.on_ack(o);
                }
            }
        }
        assert_eq!(
            (c.cursor(), c.in_flight(), c.allowance()),
            want,
            "steps {steps:?}"
        );
    }

    #[test]
    fn window_accounting() {
        #[rustfmt::skip]
        type Case<'a> = (&'a [Step], (u64, u64, u64));
        let cases: &[Case] = &[
            (&[], (100, 0, 10)),
            (&[Sent(4)], (104, 4, 6)),
            (&[Sent(10)], (110, 10, 0)),
            (&[Sent(10), Ack(105)], (110, 5, 5)),
            (&[Sent(10), Ack(110)], (110, 0, 10)),
            // Stale and repeated acks change nothing.
            (&[Sent(10), Ack(108), Ack(103)], (110, 2, 8)),
            (&[Sent(10), Ack(99)], (110, 10, 0)),
            // Acks beyond what was sent are clamped.
            (&[Sent(4), Ack(500)], (104, 0, 10)),
            (&[Sent(4), Ack(500), Sent(3)], (107, 3, 7)),
            // Gap bytes are not in flight.
            (&[Sent(4), Gap(104, 1000)], (1000, 4, 6)),
            (&[Sent(4), Gap(104, 1000), Sent(6)], (1006, 10, 0)),
            // Acking everything before the gap frees the credit of those bytes.
            (&[Sent(4), Gap(104, 1000), Sent(6), Ack(104)], (1006, 6, 4)),
            // An ack inside the gap (peer processed the gap partially) counts the same.
            (&[Sent(4), Gap(104, 1000), Sent(6), Ack(500)], (1006, 6, 4)),
            (&[Sent(4), Gap(104, 1000), Sent(6), Ack(1003)], (1006, 3, 7)),
            (
                &[Sent(4), Gap(104, 1000), Sent(6), Ack(1006)],
                (1006, 0, 10),
            ),
            // Two gaps.
            (
                &[Gap(100, 200), Sent(2), Gap(202, 300), Sent(3)],
                (303, 5, 5),
            ),
            (
                &[Gap(100, 200), Sent(2), Gap(202, 300), Sent(3), Ack(201)],
                (303, 4, 6),
            ),
            // An empty gap is ignored.
            (&[Gap(100, 100), Sent(1)], (101, 1, 9)),
        ];
        for (steps, want) in cases {
            check(steps, *want);
        }
    }

    #[test]
    fn too_many_pending_gaps_stop_forwarding_until_acked() {
        let mut c = Credit::new(1_000, 0);
        let mut at = 0;
        for _ in 0..MAX_PENDING_GAPS {
            c.on_gap(at, at + 10);
            c.on_sent(1);
            at += 11;
        }
        assert_eq!(c.allowance(), 0, "gap list is full");
        assert!(c.on_ack(at));
        assert_eq!(c.allowance(), 1_000);
    }

    /// Without the credit capability nothing is ever in flight: no window, and gaps do not pile
    /// up (a peer that never acks must not stall after `MAX_PENDING_GAPS` gaps).
    #[test]
    fn unlimited_credit_never_stops_forwarding() {
        let mut c = Credit::unlimited(10);
        let mut at = 10;
        for _ in 0..(2 * MAX_PENDING_GAPS) {
            c.on_sent(1 << 20);
            at += 1 << 20;
            c.on_gap(at, at + 100);
            at += 100;
        }
        assert_eq!(c.cursor(), at);
        assert_eq!(c.in_flight(), 0);
        assert_eq!(c.allowance(), u64::MAX);
        assert!(!c.on_ack(5), "acks change nothing");
    }

    /// A window that ran full grows by what the next ack frees (doubling per round trip when
    /// the consumer acks everything), never past its maximum; an ack that comes while the
    /// window had room, or a window that does not grow, stays as it was.
    #[test]
    fn a_growing_window_widens_only_after_running_full() {
        let budget = WindowBudget::new(1 << 30);
        let mut c = Credit::new(10, 0).growing(35, budget.clone());
        c.on_sent(4);
        c.on_ack(4);
        assert_eq!(c.window(), 10, "the window had room: no growth");
        let mut windows = Vec::new();
        for _ in 0..4 {
            let allowance = c.allowance();
            c.on_sent(allowance);
            assert_eq!(c.allowance(), 0);
            c.on_starved();
            c.on_ack(c.cursor());
            windows.push(c.window());
        }
        assert_eq!(
            windows,
            [20, 35, 35, 35],
            "doubles, then stops at the maximum"
        );
        assert_eq!(budget.free(), (1 << 30) - 25);

        let mut fixed = Credit::new(10, 0);
        fixed.on_sent(10);
        fixed.on_starved();
        fixed.on_ack(10);
        assert_eq!(fixed.window(), 10, "a window that does not grow");
    }

    /// The connection's budget caps the growth of its windows together, and a dropped
    /// subscription gives back what its window took.
    #[test]
    fn windows_grow_within_their_connections_budget() {
        let budget = WindowBudget::new(15);
        let mut a = Credit::new(10, 0).growing(100, budget.clone());
        let mut b = Credit::new(10, 0).growing(100, budget.clone());
        for c in [&mut a, &mut b] {
            c.on_sent(10);
            c.on_starved();
            c.on_ack(10);
        }
        assert_eq!((a.window(), b.window(), budget.free()), (20, 15, 0));
        drop(a);
        assert_eq!(
            budget.free(),
            10,
            "the dropped window's growth is free again"
        );
        b.on_sent(15);
        b.on_starved();
        b.on_ack(25);
        assert_eq!((b.window(), budget.free()), (25, 0));
        drop(b);
        assert_eq!(budget.free(), 15);
    }

    #[test]
    fn zero_window_is_raised_to_one_byte() {
        let c = Credit::new(0, 0);
        assert_eq!(c.allowance(), 1);
    }
}
