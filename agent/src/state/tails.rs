//! Output of PTYs that ended, kept for a while: a client that was away when its pane ended
//! (the connection dropped, the laptop slept) re-attaches with `expect` = that PTY and the offset
//! it has seen, and gets the rest of the output, then the exit, instead of a bare `Ended` that
//! silently skips what the program wrote last (rule E).
//!
//! Only PTYs that ended while no client was attached are kept (an attached client got every
//! byte and the exit already), and only the most recent ends, bounded by count ([`MAX_TAILS`])
//! and by the bytes their rings hold ([`MAX_TAIL_BYTES`]); the oldest go first. A kept PTY
//! keeps its master descriptor (and its `/dev/pts` entry), its idle input task and its terminal
//! model until it is pushed out: at most [`MAX_TAILS`] of each, so the kept ends never cost more
//! than as many detached panes that are still running. Nothing polls and no timer runs: an end
//! pushes one out. A tail is served only while the lease is known as ended (not forgotten), and
//! only from an offset the client names (`Resume::From`); every other attach of an ended pane
//! is answered `Ended`, as before (rule B: nothing is ever spawned for it). Tails are not carried
//! across a live upgrade or a restart.

use std::collections::VecDeque;
use std::sync::Arc;

use relay_protocol::PtyId;

use crate::pty::Pty;
use crate::runtime::LockExt;

/// Most ended PTYs whose output is kept.
pub const MAX_TAILS: usize = 64;
/// Most bytes the kept rings may hold together (64 MiB): 16 full default rings.
pub const MAX_TAIL_BYTES: usize = 64 << 20;

/// The kept ends, oldest first.
#[derive(Default)]
pub(crate) struct Tails {
    kept: VecDeque<(Arc<Pty>, usize)>,
    bytes: usize,
}

impl Tails {
    /// Keeps `pty`'s ring (it just ended), dropping the oldest kept ones beyond the bounds.
    pub(super) fn keep(&mut self, pty: Arc<Pty>) {
        let held = {
            let ring = pty.ring().lock_unpoisoned();
            (ring.end() - ring.start()) as usize
        };
        if held == 0 || held > MAX_TAIL_BYTES {
            return;
        }
        self.kept.push_back((pty, held));
        self.bytes += held;
        while self.kept.len() > MAX_TAILS || self.bytes > MAX_TAIL_BYTES {
            if let Some((_, gone)) = self.kept.pop_front() {
                self.bytes -= gone;
            }
        }
    }

    /// The kept PTY `id`, if it is still kept.
    pub(super) fn get(&self, id: &PtyId) -> Option<Arc<Pty>> {
        self.kept
            .iter()
            .find(|(p, _)| p.binding().pty == *id)
            .map(|(p, _)| Arc::clone(p))
    }
}
