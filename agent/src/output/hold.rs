//! Lossless delivery: the holds that keep a PTY's ring from overwriting bytes a consumer has not
//! acknowledged.
//!
//! Normally the PTY reader drains the terminal into the replay ring whatever the clients do
//! (rule F), and a reader that falls a whole ring behind gets a gap or a snapshot. A consumer
//! that needs every byte (output piped into a file, a recorder) subscribes *losslessly*
//! (`OpenLossless`/`AttachLossless`): it holds the PTY at its last acknowledged offset, and the
//! reader then reads no more than the ring can take without dropping a held byte. The program
//! blocks on its writes, exactly as under `ssh` with a slow reader. Memory stays bounded by the
//! ring; other PTYs are not affected.
//!
//! Holds are keyed by the client's id (from its `Hello`), so a client that re-attaches on a new
//! connection takes its own hold over even while the agent still thinks the old connection is
//! up (a silent partition). When a holding subscription goes away without a `Detach` (its
//! connection dropped), the hold stays for a grace period (`RELAY_HOLD_GRACE_MS`) so the client
//! can come back and resume without losing bytes; then it is released without the client's help
//! (rule G). A `Detach` releases it at once, and so does an end of the PTY (kill, `End`, the
//! cleanup policy): an end must not wait for a consumer.
//!
//! Sans-IO: [`Holds`] takes `now` and is table-tested; the PTY keeps one behind a mutex and
//! publishes its floor to the reader.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use crate::runtime::LockExt;
use tokio::sync::watch;

/// The holds on one PTY.
#[derive(Debug, Default)]
pub struct Holds {
    holders: Vec<Holder>,
    next_token: u64,
}

#[derive(Debug)]
struct Holder {
    client: String,
    token: u64,
    /// Lowest output offset this consumer still needs (its last ack).
    floor: u64,
    /// Set once the holding subscription went away: the hold lapses at this time.
    lapses_at: Option<Instant>,
}

/// Identifies one hold; a hold taken over by a newer subscription of the same client no longer
/// answers to the older token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HoldToken(u64);

impl Holds {
    /// `client` holds the output from offset `from` on. An earlier hold of the same client is
    /// replaced (its token no longer moves or releases anything).
    pub fn hold(&mut self, client: &str, from: u64) -> HoldToken {
        self.next_token += 1;
        let token = self.next_token;
        self.holders.retain(|h| h.client != client);
        self.holders.push(Holder {
            client: client.to_string(),
            token,
            floor: from,
            lapses_at: None,
        });
        HoldToken(token)
    }

    /// The consumer of `token` acknowledged output up to `offset`. Never moves a floor back.
    pub fn advance(&mut self, token: HoldToken, offset: u64) {
        if let Some(h) = self.holder(token) {
            h.floor = h.floor.max(offset);
        }
    }

    /// The consumer of `token` detached: its hold ends now.
    pub fn release(&mut self, token: HoldToken) {
        self.holders.retain(|h| h.token != token.0);
    }

    /// The subscription of `token` went away without detaching: its hold lapses `grace` after
    /// `now` unless the client takes it over first.
    pub fn orphan(&mut self, token: HoldToken, now: Instant, grace: Duration) {
        if let Some(h) = self.holder(token) {
            h.lapses_at = Some(now + grace);
        }
    }

    /// Ends every hold (the PTY is being ended).
    pub fn clear(&mut self) {
        self.holders.clear();
    }

    /// Drops the holds that lapsed by `now`.
    pub fn expire(&mut self, now: Instant) {
        self.holders
            .retain(|h| h.lapses_at.is_none_or(|at| at > now));
    }

    /// The lowest offset any consumer still needs; `None` when nothing is held.
    pub fn floor(&self) -> Option<u64> {
        self.holders.iter().map(|h| h.floor).min()
    }

    fn holder(&mut self, token: HoldToken) -> Option<&mut Holder> {
        self.holders.iter_mut().find(|h| h.token == token.0)
    }
}

/// Bytes the reader may append to a ring of `capacity` bytes ending at offset `end` without
/// dropping a byte at or above `floor`: everything when nothing is held.
pub fn room(floor: Option<u64>, end: u64, capacity: usize) -> usize {
    match floor {
        None => usize::MAX,
        Some(floor) => {
            let needed = end.saturating_sub(floor);
            (capacity as u64).saturating_sub(needed) as usize
        }
    }
}

/// A PTY's holds as its reader and its subscriptions share them: the floor is published on a
/// `watch` channel the reader waits on while the ring is full of held bytes.
#[derive(Debug)]
pub struct HoldGate {
    holds: Mutex<Holds>,
    floor: watch::Sender<Option<u64>>,
    held_back: AtomicBool,
}

impl HoldGate {
    /// A gate with nothing held.
    pub fn new() -> Arc<HoldGate> {
        Arc::new(HoldGate {
            holds: Mutex::new(Holds::default()),
            floor: watch::Sender::new(None),
            held_back: AtomicBool::new(false),
        })
    }

    /// `client` holds the output from `from` on (replacing its own earlier hold). The returned
    /// [`Hold`] lapses `grace` after it is dropped without [`Hold::release`].
    pub fn hold(self: &Arc<Self>, client: &str, from: u64, grace: Duration) -> Hold {
        let token = self.change(|h| h.hold(client, from));
        Hold {
            gate: Arc::clone(self),
            token,
            grace,
            released: false,
        }
    }

    /// A gate holding what a live upgrade carried: each `(client, floor)` held as if its
    /// subscription had just gone away (its client re-attaches on a new connection within
    /// `grace`, or the hold lapses). Call within the daemon's runtime.
    pub fn resumed(held: Vec<(String, u64)>, grace: Duration) -> Arc<HoldGate> {
        let gate = HoldGate::new();
        for (client, floor) in held {
            drop(gate.hold(&client, floor, grace));
        }
        gate
    }

    /// Ends every hold on the PTY: it is being ended, and nothing may wait for a consumer.
    pub fn release_all(&self) {
        self.change(Holds::clear);
    }

    /// Every hold as `(client, floor)`, for a live upgrade.
    pub fn held(&self) -> Vec<(String, u64)> {
        let holds = self.holds.lock_unpoisoned();
        holds
            .holders
            .iter()
            .map(|h| (h.client.clone(), h.floor))
            .collect()
    }

    /// Watches the floor (the reader's view).
    pub fn watch_floor(&self) -> watch::Receiver<Option<u64>> {
        self.floor.subscribe()
    }

    /// The reader notes whether it is waiting for a consumer (nothing read: the ring is full of
    /// held bytes).
    pub fn set_held_back(&self, held: bool) {
        self.held_back.store(held, Ordering::Release);
    }

    /// Whether the reader is waiting for a consumer: output is pending, not finished.
    pub fn is_held_back(&self) -> bool {
        self.held_back.load(Ordering::Acquire)
    }

    /// Applies `f` to the holds and publishes the floor if it moved.
    fn change<T>(&self, f: impl FnOnce(&mut Holds) -> T) -> T {
        let mut holds = self.holds.lock_unpoisoned();
        let out = f(&mut holds);
        let floor = holds.floor();
        self.floor.send_if_modified(|f| {
            let moved = *f != floor;
            *f = floor;
            moved
        });
        out
    }

    /// Arms the lapse of an orphaned hold: a timer that only lets go of holds whose time came.
    fn lapse_later(gate: Weak<HoldGate>, grace: Duration) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        runtime.spawn(async move {
            tokio::time::sleep(grace).await;
            if let Some(gate) = gate.upgrade() {
                gate.change(|h| h.expire(Instant::now()));
            }
        });
    }
}

/// One lossless subscription's hold on its PTY, moved by the consumer's acks.
///
/// Dropped without [`Hold::release`] (its connection went away), it lapses after its grace
/// unless the same client holds the PTY again first.
#[derive(Debug)]
pub struct Hold {
    gate: Arc<HoldGate>,
    token: HoldToken,
    grace: Duration,
    released: bool,
}

impl Hold {
    /// The consumer acknowledged output up to `offset`.
    pub fn advance(&self, offset: u64) {
        self.gate.change(|h| h.advance(self.token, offset));
    }

    /// The consumer detached: the hold ends now.
    pub fn release(mut self) {
        self.released = true;
        self.gate.change(|h| h.release(self.token));
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        let (token, grace) = (self.token, self.grace);
        self.gate.change(|h| h.orphan(token, Instant::now(), grace));
        HoldGate::lapse_later(Arc::downgrade(&self.gate), grace);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GRACE: Duration = Duration::from_secs(120);

    #[test]
    fn the_floor_is_the_slowest_consumers_ack() {
        let mut holds = Holds::default();
        assert_eq!(holds.floor(), None);
        let a = holds.hold("app-a", 100);
        let b = holds.hold("app-b", 50);
        assert_eq!(holds.floor(), Some(50));
        holds.advance(b, 400);
        assert_eq!(holds.floor(), Some(100));
        // An ack below the floor does not move it back.
        holds.advance(a, 10);
        assert_eq!(holds.floor(), Some(100));
        holds.release(a);
        assert_eq!(holds.floor(), Some(400));
        holds.release(b);
        assert_eq!(holds.floor(), None);
    }

    /// A client re-attaching on a new connection replaces its own hold, even while the old
    /// subscription still exists (a silent partition): the old token moves nothing.
    #[test]
    fn a_clients_new_hold_replaces_its_old_one() {
        let mut holds = Holds::default();
        let old = holds.hold("relay-cli/7", 10);
        let new = holds.hold("relay-cli/7", 500);
        assert_eq!(holds.floor(), Some(500));
        holds.advance(old, 900);
        holds.release(old);
        holds.orphan(old, Instant::now(), Duration::ZERO);
        holds.expire(Instant::now() + GRACE);
        assert_eq!(holds.floor(), Some(500), "the old token touched nothing");
        holds.advance(new, 800);
        assert_eq!(holds.floor(), Some(800));
    }

    /// Rule G: a consumer that vanished without detaching holds the PTY only for the grace.
    #[test]
    fn an_orphaned_hold_lapses_after_the_grace() {
        let mut holds = Holds::default();
        let t0 = Instant::now();
        let gone = holds.hold("gone", 10);
        holds.orphan(gone, t0, GRACE);
        holds.expire(t0 + GRACE - Duration::from_millis(1));
        assert_eq!(holds.floor(), Some(10), "held during the grace");
        holds.expire(t0 + GRACE);
        assert_eq!(holds.floor(), None, "released after it");
        // Taken over within the grace, the new hold does not lapse.
        let back = holds.hold("back", 10);
        holds.orphan(back, t0, GRACE);
        let again = holds.hold("back", 20);
        holds.expire(t0 + 2 * GRACE);
        assert_eq!(holds.floor(), Some(20));
        holds.release(again);
    }

    #[test]
    fn room_leaves_held_bytes_in_the_ring() {
        let cases = [
            // (floor, end, capacity) -> room
            (None, 1_000, 100, usize::MAX),
            (Some(1_000), 1_000, 100, 100),
            (Some(950), 1_000, 100, 50),
            (Some(900), 1_000, 100, 0),
            // A floor below what the ring holds (bytes already lost before the hold).
            (Some(0), 1_000, 100, 0),
            // A floor beyond the end (acked ahead of a resume) leaves the whole ring.
            (Some(2_000), 1_000, 100, 100),
        ];
        for (floor, end, capacity, want) in cases {
            assert_eq!(
                room(floor, end, capacity),
                want,
                "{floor:?} {end} {capacity}"
            );
        }
    }
}
