//! What a live upgrade ([`crate::upgrade`]) needs of a PTY: holding off its reaping, stopping
//! and restarting its reader, and the parts that cross `execve`.

use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::Ordering;
use std::sync::MutexGuard;

use crate::pty::Pty;
use crate::runtime::LockExt;

impl Pty {
    /// Bytes of input queued and not yet written to the PTY.
    pub fn pending_input(&self) -> usize {
        self.pending_input.load(Ordering::Acquire)
    }

    /// The master descriptor (to hand across `execve`).
    pub fn master(&self) -> BorrowedFd<'_> {
        self.master.get_ref().as_fd()
    }

    /// Holds off reaping: the guard of the reap lock while the child is not reaped yet (its pid
    /// is still ours), `None` once it was reaped.
    pub fn hold_unreaped(&self) -> Option<MutexGuard<'_, bool>> {
        let reaped = self.reaped.lock_unpoisoned();
        (!*reaped).then_some(reaped)
    }

    /// Waits until this PTY's reader and writer are out of their current read or write, after
    /// [`crate::pty::io::pause_io`]: from then on neither touches the master until
    /// [`crate::pty::io::resume_io`]. Blocks only for one read or write; it needs no runtime
    /// thread (the tasks may all be blocked on locks the caller holds).
    pub fn fence_io(&self) {
        drop(self.io_gate.lock_unpoisoned());
    }

    /// What a handover carries of this PTY besides its lease (IO fenced: the ring is final). Copies the ring and renders the model's snapshot.
    pub fn parts_for_handover(&self) -> crate::upgrade::HandedPty {
        let (ring_start, ring_capacity, ring_bytes) = {
            let ring = self.ring.lock_unpoisoned();
            (ring.start(), ring.capacity() as u64, ring.to_vec())
        };
        let screen = self
            .screen
            .as_ref()
            .map(|feed| feed.screen.for_handover(&feed.ring));
        crate::upgrade::HandedPty {
            binding: self.binding.clone(),
            pid: self.pid,
            master_fd: std::os::fd::AsRawFd::as_raw_fd(self.master.get_ref()),
            size: self.size(),
            ring_start,
            ring_capacity,
            ring: ring_bytes,
            screen,
            start_ticks: self.start_ticks,
            last_output_ms: self.last_output_ms.load(Ordering::Relaxed),
            last_input_ms: self.last_input_ms.load(Ordering::Relaxed),
            superseded: self.is_superseded(),
            input_seq: self.input_seq.lock_unpoisoned().clone(),
        }
    }
}
