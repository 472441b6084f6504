//! One PTY's terminal model as the daemon uses it: fed from the replay ring, snapshots at an exact
//! offset, and the bounded list of typed events with their keys.
//!
//! The model is fed from the ring, not by the PTY reader directly: the reader appends to the ring
//! and asks the shared [`worker`](super::worker) to catch the model up (in batches, at most
//! [`BATCH_DELAY`](super::worker::BATCH_DELAY) late, a few batches for a flowing flood's tail),
//! so parsing runs beside the reader instead
//! of slowing it down. Only when the model lags so far that the next append
//! would drop bytes it has not parsed does the reader parse them itself first
//! ([`PtyScreen::before_append`]); the model therefore sees every byte, in order (rule E), and the
//! reader never waits for a client (rule F).
//!
//! Lock order: the screen lock, then the ring lock (held only to copy bytes out).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use relay_protocol::message::Event;
use relay_protocol::{PtyId, TermSize};
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use super::model::{ScreenEvent, TerminalModel, Vt100Model};
use crate::output::ring::{ReadFrom, Ring};
use crate::runtime::LockExt;

/// Events kept per PTY for clients that attach later (the oldest are dropped first).
pub const MAX_EVENTS: usize = 256;

/// Bytes the model thread parses per hold of the screen lock.
const LOCK_STEP: u64 = 256 * 1024;

/// Bytes parsed per ring read while catching up (also the unit of the look-ahead decision).
const CATCH_UP_CHUNK: usize = 16 * 1024;

/// A lag beyond which the model looks ahead: rows leaving the screen early in a long backlog are
/// not kept when at least [`LOOKAHEAD_FACTOR`] × (scrollback + rows) newlines follow them.
const LOOKAHEAD_LAG: u64 = 64 * 1024;

/// Safety margin on newlines counted ahead (cursor movement can undo some of them).
const LOOKAHEAD_FACTOR: usize = 2;

/// The most the model thread leaves unparsed at the ring's end while output keeps flowing
/// ([`PtyScreen::catch_up_flowing`]), in bytes.
pub(super) const TAIL_MAX: u64 = 256 * 1024;

/// What a catch-up did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CaughtUp {
    /// Everything up to the target was parsed (or the ring had less).
    Done,
    /// A tail was left unparsed because output keeps flowing; it must be parsed later.
    TailLeft,
}

/// A catch-up that may leave the tail while output flows: whether it has parsed backlog
/// without keeping rows yet (only then is a tail left).
struct LeaveTail {
    skipped_rows: bool,
}

/// A snapshot taken at an exact output offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TakenSnapshot {
    /// Output offset it corresponds to; output continues from here.
    pub offset: u64,
    /// Size it is rendered at (the model's size: the PTY's).
    pub size: TermSize,
    /// The bytes that reproduce the screen on a fresh terminal of `size`.
    pub data: Vec<u8>,
}

/// The terminal model of one PTY and its events. Shared as `Arc<PtyScreen>`.
pub struct PtyScreen {
    pty: PtyId,
    scrollback_lines: usize,
    inner: Mutex<Inner>,
    /// Mirror of `Inner::fed` readable without the lock (the reader's lag check).
    fed: AtomicU64,
    /// Set while a catch-up is queued on the worker, so a flood queues one job, not thousands.
    queued: AtomicBool,
    /// The ring's end when the model thread last caught up (whether output keeps flowing).
    worker_seen: AtomicU64,
    /// Highest event key recorded (0: none yet); subscriptions wait on it.
    keys: watch::Sender<u64>,
}

struct Inner {
    model: Box<dyn TerminalModel>,
    /// Output offset up to which the model has parsed.
    fed: u64,
    events: VecDeque<Event>,
    found: Vec<ScreenEvent>,
}

impl PtyScreen {
    /// A model of `size` (columns × rows) keeping `scrollback_lines` lines of scrollback.
    pub fn new(pty: PtyId, size: TermSize, scrollback_lines: usize) -> Self {
        let model = Vt100Model::new(size.cols, size.rows, scrollback_lines);
        PtyScreen {
            pty,
            scrollback_lines,
            inner: Mutex::new(Inner {
                model: Box::new(model),
                fed: 0,
                events: VecDeque::new(),
                found: Vec::new(),
            }),
            fed: AtomicU64::new(0),
            queued: AtomicBool::new(false),
            worker_seen: AtomicU64::new(0),
            keys: watch::Sender::new(0),
        }
    }

    /// A model that continues where a handed-over one stopped: a fresh model of `size` fed the
    /// old model's snapshot (vt100 has no serializer; the snapshot reproduces screen, scrollback,
    /// modes and an unfinished sequence), positioned at the snapshot's offset, with the old
    /// model's recent events and event keys (so keys are never reused).
    pub fn resume(pty: PtyId, size: TermSize, handed: HandedScreen) -> Self {
        let screen = PtyScreen::new(pty, size, handed.scrollback_lines);
        {
            let mut inner = screen.inner.lock_unpoisoned();
            let mut ignored = Vec::new();
            inner.model.feed(&handed.snapshot, &mut ignored);
            inner.fed = handed.offset;
            inner.events = handed.events.into_iter().collect();
        }
        screen.fed.store(handed.offset, Ordering::Release);
        screen.keys.send_replace(handed.last_key);
        screen
    }

    /// What a handover carries of this model: a snapshot at the ring's end (the readers are
    /// stopped, so that is the end of the output), the held events and the last event key.
    pub fn for_handover(&self, ring: &Mutex<Ring>) -> HandedScreen {
        let taken = self.snapshot(ring);
        let inner = self.inner.lock_unpoisoned();
        HandedScreen {
            scrollback_lines: self.scrollback_lines,
            offset: taken.offset,
            snapshot: taken.data,
            events: inner.events.iter().cloned().collect(),
            last_key: *self.keys.borrow(),
        }
    }

    /// Called by the PTY reader before appending `incoming` bytes to `ring` (whose end is
    /// `ring_end` and capacity `capacity`, in bytes): when the append would drop bytes the model
    /// has not parsed yet, parse enough of them now, in the reader (off the runtime's worker), to
    /// make room. Usually one atomic load and nothing else.
    pub fn before_append(
        &self,
        ring: &Mutex<Ring>,
        ring_end: u64,
        capacity: usize,
        incoming: usize,
    ) {
        if self.must_parse_before(ring_end, capacity, incoming) {
            let needed = ring_end + incoming as u64;
            // Only what makes room, plus a chunk: the reader is held up briefly and often rather
            // than for a whole ring at once.
            let upto = needed - capacity as u64 + CATCH_UP_CHUNK as u64;
            let mut inner = self.inner.lock_unpoisoned();
            self.catch_up_locked(&mut inner, ring, upto, None);
        }
    }

    /// Whether appending `incoming` bytes to a ring ending at `ring_end` would drop bytes the model
    /// has not parsed yet, so that [`PtyScreen::before_append`] parses (milliseconds of CPU) rather
    /// than returning at once. One atomic load.
    pub fn must_parse_before(&self, ring_end: u64, capacity: usize, incoming: usize) -> bool {
        let fed = self.fed.load(Ordering::Acquire);
        ring_end + incoming as u64 - fed > capacity as u64
    }

    /// Marks a catch-up as queued; returns `false` when one already is (the caller then need not
    /// queue another: the queued one will read up to the ring's end when it runs).
    pub(super) fn mark_queued(&self) -> bool {
        !self.queued.swap(true, Ordering::AcqRel)
    }

    /// Clears the queued mark; called by the worker right before it catches up, so bytes appended
    /// meanwhile queue a new job.
    pub(super) fn clear_queued(&self) {
        self.queued.store(false, Ordering::Release);
    }

    /// Parses what the ring holds beyond what the model has seen, up to the ring's end when
    /// called (bounded work even while the PTY keeps writing). The lock is taken per
    /// [`LOCK_STEP`] bytes, so a snapshot or a resize waits for at most one step, not a whole
    /// backlog.
    pub fn catch_up(&self, ring: &Mutex<Ring>) {
        let target = ring.lock_unpoisoned().end();
        self.catch_up_to(ring, target, None);
    }

    /// The model thread's catch-up: like [`PtyScreen::catch_up`], except while output keeps
    /// flowing (the ring grew by more than [`LOOKAHEAD_LAG`] since the thread's previous
    /// catch-up of this PTY). Once it has parsed backlog without keeping rows, it then stops at
    /// the first chunk whose rows would be kept and after which at most [`TAIL_MAX`] bytes (a
    /// quarter of a smaller ring) are left: the next batch usually pushes those rows out again,
    /// so they are parsed once, the cheap way, instead of formatted into the scrollback at the
    /// end of every batch. Returns [`CaughtUp::TailLeft`] then, and the caller must come back
    /// for the tail. An event in it is recorded when a later batch parses it: while the flood
    /// goes on, within about `TAIL_MAX / LOOKAHEAD_LAG + 1` batches; once it stops, in the next.
    /// Snapshots, resizes and exits parse everything, as before.
    pub fn catch_up_flowing(&self, ring: &Mutex<Ring>) -> CaughtUp {
        let target = ring.lock_unpoisoned().end();
        let seen = self.worker_seen.swap(target, Ordering::AcqRel);
        let flowing = target.saturating_sub(seen) > LOOKAHEAD_LAG;
        let mut tail = LeaveTail {
            skipped_rows: false,
        };
        self.catch_up_to(ring, target, flowing.then_some(&mut tail))
    }

    fn catch_up_to(
        &self,
        ring: &Mutex<Ring>,
        target: u64,
        mut tail: Option<&mut LeaveTail>,
    ) -> CaughtUp {
        loop {
            let mut inner = self.inner.lock_unpoisoned();
            if inner.fed >= target {
                return CaughtUp::Done;
            }
            let step = (inner.fed + LOCK_STEP).min(target);
            let caught_up = self.catch_up_locked(&mut inner, ring, step, tail.as_deref_mut());
            if caught_up == CaughtUp::TailLeft {
                return caught_up;
            }
            if inner.fed < step {
                return CaughtUp::Done; // The ring had less than expected (a gap was logged).
            }
        }
    }

    /// Parses ring bytes from the model's offset up to `upto` (or the ring's end).
    ///
    /// With a long backlog (a flood the model fell behind), rows that leave the screen while it
    /// parses the early part are not kept as scrollback when enough newlines follow to push them
    /// out again; parsing short lines is then several times faster, and plain lines that the
    /// same read scrolls out again are not drawn at all (`plain_lines.rs`), which leaves the
    /// same screen.
    ///
    /// With `tail` (see [`PtyScreen::catch_up_flowing`]) it stops before the first chunk whose
    /// rows would be kept, once it has skipped keeping some, if at most [`TAIL_MAX`] bytes (a
    /// quarter of a smaller ring) are left, and returns [`CaughtUp::TailLeft`].
    fn catch_up_locked(
        &self,
        inner: &mut Inner,
        ring: &Mutex<Ring>,
        upto: u64,
        mut tail: Option<&mut LeaveTail>,
    ) -> CaughtUp {
        let rows = usize::from(inner.model.size().1);
        let needed = LOOKAHEAD_FACTOR * (self.scrollback_lines + rows);
        while inner.fed < upto {
            let max = (upto - inner.fed).min(CATCH_UP_CHUNK as u64) as usize;
            let (read, far_behind) = {
                let ring = ring.lock_unpoisoned();
                // Counted to the ring's end even when parsing stops at `upto`: every byte held
                // is parsed before any snapshot is taken. The scan stops at `needed`.
                let left = ring.end().saturating_sub(inner.fed);
                let far_behind = left > LOOKAHEAD_LAG
                    && ring.count_from(inner.fed + max as u64, b'\n', needed) >= needed;
                // In a small ring a longer tail would soon make the reader parse it.
                if !far_behind
                    && left <= TAIL_MAX.min(ring.capacity() as u64 / 4)
                    && tail.as_deref().is_some_and(|t| t.skipped_rows)
                {
                    drop(ring);
                    inner.model.set_scrollback_capture(true);
                    return CaughtUp::TailLeft;
                }
                (ring.read_from(inner.fed, max), far_behind)
            };
            match read {
                ReadFrom::Data(data) => {
                    let Inner {
                        model, found, fed, ..
                    } = &mut *inner;
                    let keep_rows = !far_behind || data.len() < max;
                    if let Some(tail) = tail.as_deref_mut() {
                        tail.skipped_rows |= !keep_rows;
                    }
                    model.set_scrollback_capture(keep_rows);
                    model.feed(&data, found);
                    *fed += data.len() as u64;
                    self.fed.store(*fed, Ordering::Release);
                    self.record_events(inner);
                }
                ReadFrom::Gap { from, to } => {
                    // Cannot happen while the reader calls `before_append`; if it does, say so
                    // rather than parse from the middle silently.
                    tracing::error!(pty = %self.pty, from, to, "terminal model missed output; its screen may be wrong until the program redraws");
                    inner.fed = to;
                    self.fed.store(to, Ordering::Release);
                }
                ReadFrom::End | ReadFrom::Beyond { .. } => break,
            }
        }
        inner.model.set_scrollback_capture(true);
        CaughtUp::Done
    }

    fn record_events(&self, inner: &mut Inner) {
        if inner.found.is_empty() {
            return;
        }
        let mut key = *self.keys.borrow();
        for found in inner.found.drain(..) {
            key += 1;
            inner.events.push_back(Event {
                pty: self.pty,
                key,
                offset: inner.fed,
                event: found,
            });
        }
        while inner.events.len() > MAX_EVENTS {
            inner.events.pop_front();
        }
        self.keys.send_replace(key);
    }

    /// Catches up and takes a snapshot at the ring's end as seen now (the PTY may write on; the
    /// snapshot's offset says where its output continues). Costs a parse of the lag (normally
    /// small; at most a ring) plus the rendering (well under a millisecond for 120×40).
    pub fn snapshot(&self, ring: &Mutex<Ring>) -> TakenSnapshot {
        // Most of the lag is parsed without holding the lock against the model thread's steps;
        // the rest, up to the end seen now, under it.
        self.catch_up(ring);
        let target = ring.lock_unpoisoned().end();
        let mut inner = self.inner.lock_unpoisoned();
        self.catch_up_locked(&mut inner, ring, target, None);
        let (cols, rows) = inner.model.size();
        TakenSnapshot {
            offset: inner.fed,
            size: TermSize { cols, rows },
            data: inner.model.snapshot(),
        }
    }

    /// The PTY was resized: output read so far is parsed at the old size, then the model takes
    /// the new one.
    pub fn resize(&self, ring: &Mutex<Ring>, size: TermSize) {
        self.catch_up(ring);
        let target = ring.lock_unpoisoned().end();
        let mut inner = self.inner.lock_unpoisoned();
        self.catch_up_locked(&mut inner, ring, target, None);
        inner.model.resize(size.cols, size.rows);
    }

    /// Whether a full-screen program has the alternate screen (as far as the model has parsed).
    pub fn alternate_screen(&self) -> bool {
        let inner = self.inner.lock_unpoisoned();
        inner.model.alternate_screen()
    }

    /// A receiver of the highest event key (changes whenever events are recorded).
    pub fn watch_keys(&self) -> watch::Receiver<u64> {
        self.keys.subscribe()
    }

    /// Held events with a key above `after` and an offset at most `upto`, in key order.
    pub fn events(&self, after: u64, upto: u64) -> Vec<Event> {
        if *self.keys.borrow() <= after {
            return Vec::new();
        }
        let inner = self.inner.lock_unpoisoned();
        inner
            .events
            .iter()
            .filter(|e| e.key > after && e.offset <= upto)
            .cloned()
            .collect()
    }
}

/// Shared handles the worker needs to catch one PTY's model up.
#[derive(Clone)]
pub struct ScreenFeed {
    /// The model.
    pub screen: Arc<PtyScreen>,
    /// The PTY's ring.
    pub ring: Arc<Mutex<Ring>>,
}

/// A terminal model's state.
#[derive(Debug, Serialize, Deserialize)]
pub struct HandedScreen {
    /// Scrollback lines kept.
    pub scrollback_lines: usize,
    /// Output offset the snapshot corresponds to.
    pub offset: u64,
    /// Bytes that reproduce screen and scrollback on a fresh terminal of the PTY's size.
    pub snapshot: Vec<u8>,
    /// Held events, oldest first.
    pub events: Vec<Event>,
    /// Highest event key given out.
    pub last_key: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use relay_protocol::Incarnation;

    fn pty() -> PtyId {
        PtyId {
            incarnation: Incarnation(1),
            counter: 1,
        }
    }

    /// What the PTY reader does per read: check the lag, append, (worker not running here).
    fn read(screen: &PtyScreen, ring: &Mutex<Ring>, data: &[u8]) {
        let (end, capacity) = {
            let r = ring.lock().unwrap();
            (r.end(), r.capacity())
        };
        screen.before_append(ring, end, capacity, data.len());
        ring.lock().unwrap().append(data);
    }

    #[test]
    fn a_model_that_never_gets_a_worker_still_sees_every_byte() {
        // A ring of 64 bytes and reads of up to 40: without `before_append` the ring would drop
        // bytes the model never parsed.
        let ring = Mutex::new(Ring::new(64));
        let screen = PtyScreen::new(pty(), TermSize { cols: 20, rows: 3 }, 10);
        let mut total = 0u64;
        for i in 0..500 {
            let line = format!("line {i}\r\n");
            read(&screen, &ring, line.as_bytes());
            total += line.len() as u64;
        }
        read(&screen, &ring, b"\x07\x1b]2;done\x07last");
        total += 14;
        let snapshot = screen.snapshot(&ring);
        assert_eq!(snapshot.offset, total, "the snapshot is at the ring's end");
        let text = String::from_utf8_lossy(&snapshot.data);
        assert!(text.contains("line 499"), "{text:?}");
        assert!(
            text.contains("line 490"),
            "scrollback holds the last lines: {text:?}"
        );
        assert!(!text.contains("line 487"), "bounded scrollback: {text:?}");
        let events = screen.events(0, total);
        assert_eq!(
            events.iter().map(|e| e.event.clone()).collect::<Vec<_>>(),
            vec![ScreenEvent::Bell, ScreenEvent::Title("done".into())]
        );
        assert_eq!(events[0].key, 1);
        assert_eq!(events[1].key, 2);
        assert!(events.iter().all(|e| e.offset == total));
        assert!(screen.events(2, total).is_empty(), "nothing after key 2");
        assert!(
            screen.events(0, total - 1).is_empty(),
            "not before their offset"
        );
    }

    #[test]
    fn a_long_backlog_keeps_exactly_the_last_scrollback_lines() {
        // 400 KB of short lines behind the model: the early rows are not kept (too many
        // newlines follow), yet the snapshot's scrollback is the last 10 lines, as if every row
        // had been kept, and no "not kept" note appears.
        let ring = Mutex::new(Ring::new(1 << 20));
        let screen = PtyScreen::new(pty(), TermSize { cols: 20, rows: 3 }, 10);
        let mut all = Vec::new();
        for i in 0..50_000 {
            all.extend_from_slice(format!("{i}\r\n").as_bytes());
        }
        ring.lock().unwrap().append(&all);
        let snapshot = screen.snapshot(&ring);
        let text = String::from_utf8_lossy(&snapshot.data);
        for i in 49_988..50_000 {
            assert!(text.contains(&format!("{i}\r\n")), "line {i}: {text:?}");
        }
        assert!(!text.contains("49987"), "{text:?}");
        assert!(!text.contains("not kept"), "{text:?}");
    }

    /// A long backlog of plain lines (the model skips drawing them, see
    /// `Vt100Model::plain_lines`) with colours, wrapped lines, tabs, backspaces and a scroll
    /// region among them gives the screen, attributes and cursor that a terminal fed every
    /// byte shows.
    #[test]
    fn a_long_plain_backlog_leaves_the_screen_a_terminal_shows() {
        let size = TermSize { cols: 20, rows: 5 };
        for region in [&b""[..], b"\x1b[2;4r\x1b[3H"] {
            let mut all = region.to_vec();
            for i in 0..60_000u32 {
                // Colours set early (inside the backlog the model skips) and in the last lines.
                match i {
                    10_000 | 59_990 => all.extend_from_slice(b"\x1b[31m"),
                    20_000 => all.extend_from_slice(b"\x1b[m\x1b[44;1m"),
                    30_000 => all.extend_from_slice(b"\x1b[4m"),
                    _ if i % 100 == 0 => all.extend_from_slice(b"\x1b[3m\x1b[23m"),
                    _ => {}
                }
                let line = match i % 7 {
                    0 => format!("{i} a line longer than twenty columns wraps\r\n"),
                    1 => format!("{i}\tx\x08y\r\n"),
                    2 => format!("{i} no carriage return\n"),
                    _ => format!("{i}\r\n"),
                };
                all.extend_from_slice(line.as_bytes());
            }
            all.extend_from_slice(b"tail\r\n\x1b[1mprompt$ \x1b[mx");
            let ring = Mutex::new(Ring::new(4 << 20));
            let screen = PtyScreen::new(pty(), size, 10);
            ring.lock().unwrap().append(&all);
            let snapshot = screen.snapshot(&ring);

            let nz = |n: u16| std::num::NonZeroU16::new(n).unwrap();
            let mut expected = vt100::Parser::new(nz(size.rows), nz(size.cols), 0);
            expected.process(&all);
            let mut shown = vt100::Parser::new(nz(size.rows), nz(size.cols), 0);
            shown.process(&snapshot.data);
            let region = String::from_utf8_lossy(region);
            assert_eq!(
                shown.screen().contents_formatted(),
                expected.screen().contents_formatted(),
                "region {region:?}"
            );
            assert_eq!(
                shown.screen().cursor_position(),
                expected.screen().cursor_position(),
                "region {region:?}"
            );
        }
    }

    #[test]
    fn rows_not_kept_and_not_pushed_out_again_are_said_to_be_missing() {
        let ring = Mutex::new(Ring::new(1 << 20));
        let screen = PtyScreen::new(pty(), TermSize { cols: 20, rows: 3 }, 10);
        let mut all = Vec::new();
        for i in 0..50_000 {
            all.extend_from_slice(format!("{i}\r\n").as_bytes());
        }
        // The newlines that follow are cursor-up + newline pairs: they scroll nothing.
        // Enough of them that the model is still far behind when it parses the last numbers.
        for _ in 0..200_000 {
            all.extend_from_slice(b"\x1b[A\n");
        }
        ring.lock().unwrap().append(&all);
        let snapshot = screen.snapshot(&ring);
        let text = String::from_utf8_lossy(&snapshot.data);
        assert!(
            text.contains("[relay: earlier lines were not kept]"),
            "{text:?}"
        );
    }

    #[test]
    fn the_event_list_is_bounded_and_keys_keep_counting() {
        let ring = Mutex::new(Ring::new(1 << 16));
        let screen = PtyScreen::new(pty(), TermSize { cols: 20, rows: 3 }, 10);
        read(&screen, &ring, &[0x07; MAX_EVENTS + 10]);
        screen.catch_up(&ring);
        let events = screen.events(0, u64::MAX);
        assert_eq!(events.len(), MAX_EVENTS);
        assert_eq!(events[0].key, 11, "the oldest were dropped");
        assert_eq!(events.last().unwrap().key, (MAX_EVENTS + 10) as u64);
        assert_eq!(*screen.watch_keys().borrow(), (MAX_EVENTS + 10) as u64);
    }

    #[test]
    fn a_resize_applies_after_the_output_read_before_it() {
        let ring = Mutex::new(Ring::new(1 << 16));
        let screen = PtyScreen::new(pty(), TermSize { cols: 20, rows: 3 }, 10);
        read(&screen, &ring, b"abc");
        screen.resize(&ring, TermSize { cols: 30, rows: 5 });
        let snapshot = screen.snapshot(&ring);
        assert_eq!(snapshot.size, TermSize { cols: 30, rows: 5 });
        assert_eq!(snapshot.offset, 3);
        assert!(String::from_utf8_lossy(&snapshot.data).contains("abc"));
    }
}
