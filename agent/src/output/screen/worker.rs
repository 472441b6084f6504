//! The one thread that keeps every PTY's terminal model caught up with its ring.
//!
//! PTY readers hand it work after each append ([`request_catch_up`]); at most one job per PTY is
//! queued at a time, and a job parses what the ring holds when it runs (while output keeps flowing,
//! all but a short tail; see below). With one thread for
//! the whole daemon, 1,000 idle panes cost no threads here. A flood that outruns it is parsed by
//! the reader itself before bytes would be dropped ([`PtyScreen::before_append`]).
//!
//! The thread lets work gather for [`BATCH_DELAY`] before it parses: a flood then reaches the
//! model in pieces of hundreds of kilobytes, whose early rows it need not keep as scrollback
//! (they scroll out again), which costs far less CPU than parsing every read as it comes. The
//! model is at most that much behind the output when nobody asks; a snapshot, a resize and an
//! exit each catch it up first. While output keeps flowing, the thread leaves the last rows of a
//! batch (those it would have to keep as scrollback) for the next batch, which usually pushes
//! them out again ([`PtyScreen::catch_up_flowing`]); it queues the PTY again itself, so the tail
//! is parsed a batch later even when nothing more is written. An event in such a tail is
//! recorded a few batches late at most (while the flood goes on: about 256 KiB / 64 KiB + 1).

use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::thread;
use std::time::Duration;

use super::pty_screen::{CaughtUp, PtyScreen, ScreenFeed};
use crate::output::ring::Ring;

type Job = (Weak<PtyScreen>, Weak<Mutex<Ring>>);

/// How long work gathers before the thread parses it (also the longest an event waits, unless
/// it is in a flowing flood's tail: [`PtyScreen::catch_up_flowing`]).
pub const BATCH_DELAY: Duration = Duration::from_millis(50);

static WORKER: OnceLock<Option<mpsc::Sender<Job>>> = OnceLock::new();

fn worker() -> Option<&'static mpsc::Sender<Job>> {
    WORKER
        .get_or_init(|| {
            let (tx, rx) = mpsc::channel::<Job>();
            let own = tx.clone();
            let spawned = thread::Builder::new()
                .name("relay-screen".into())
                .spawn(move || {
                    let mut again = Vec::new();
                    while let Ok(first) = rx.recv() {
                        thread::sleep(BATCH_DELAY);
                        let jobs: Vec<Job> = std::iter::once(first).chain(rx.try_iter()).collect();
                        for (weak_screen, weak_ring) in jobs {
                            let (Some(screen), Some(ring)) =
                                (weak_screen.upgrade(), weak_ring.upgrade())
                            else {
                                continue;
                            };
                            screen.clear_queued();
                            if screen.catch_up_flowing(&ring) == CaughtUp::TailLeft
                                && screen.mark_queued()
                            {
                                again.push((weak_screen, weak_ring));
                            }
                        }
                        // Queued after the round, so the tail waits for the next batch even
                        // when nothing more is written.
                        for job in again.drain(..) {
                            // Cannot fail: this thread holds the receiver.
                            let _ = own.send(job);
                        }
                    }
                });
            match spawned {
                Ok(_) => Some(tx),
                Err(e) => {
                    tracing::error!("could not start the terminal model thread ({e}); PTY readers parse their output themselves");
                    None
                }
            }
        })
        .as_ref()
}

/// Asks the worker to parse what `feed`'s ring holds beyond its model (no-op when a job for it is
/// already queued). Without a worker thread, parses here.
pub fn request_catch_up(feed: &ScreenFeed) {
    if !feed.screen.mark_queued() {
        return;
    }
    let job = (Arc::downgrade(&feed.screen), Arc::downgrade(&feed.ring));
    let sent = worker().is_some_and(|w| w.send(job).is_ok());
    if !sent {
        feed.screen.clear_queued();
        feed.screen.catch_up(&feed.ring);
    }
}
