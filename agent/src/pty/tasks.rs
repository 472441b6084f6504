//! The tasks that serve one PTY on the daemon's runtime: the reader (PTY → ring), the writer
//! (queued input → PTY) and the waiter (child exit → lease). None holds the [`Pty`] itself, so
//! dropping the last `Arc<Pty>` ends the writer; the reader ends at the end of output.

use std::cell::RefCell;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use relay_protocol::ExitStatus;
use tokio::io::unix::AsyncFd;
use tokio::sync::{mpsc, oneshot, watch};

use super::{Pty, Spawned};
use crate::output::hold;
use crate::output::screen::worker;
use crate::pty::io as pty_io;
use crate::runtime::LockExt;

/// Bytes one read takes from a PTY at most.
const READ_CHUNK: usize = 64 * 1024;

thread_local! {
    /// The read buffer of the PTY readers running on this runtime thread: a read and its append
    /// to the ring happen with no `.await` between, so one buffer per thread serves every PTY
    /// (not 64 KiB per idle pane).
    static READ_BUF: RefCell<Vec<u8>> = RefCell::new(vec![0; READ_CHUNK]);
}

impl Pty {
    /// Starts the reader task. `eof` is dropped when the output ends (the waiter waits for that).
    /// While [`pty_io::pause_io`] is in force the task reads nothing (see [`Pty::fence_io`]).
    pub(super) fn start_reader(&self, eof: oneshot::Sender<()>) {
        let master = Arc::clone(&self.master);
        let gate = Arc::clone(&self.io_gate);
        let ring = Arc::clone(&self.ring);
        let progress = self.progress.clone();
        let last = Arc::clone(&self.last_output_ms);
        let screen = self.screen.clone();
        let counters = Arc::clone(&self.counters);
        let binding = self.binding.clone();
        let holds = Arc::clone(&self.holds);
        tokio::spawn(async move {
            // Dropped on return at the end of output: tells the waiter that output is finished.
            let _eof = eof;
            let mut paused = pty_io::paused();
            let mut floor = holds.watch_floor();
            // This task is the ring's only writer: it knows the end without locking.
            let (capacity, mut end) = {
                let ring = ring.lock_unpoisoned();
                (ring.capacity(), ring.end())
            };
            loop {
                if pty_io::wait_unpaused(&mut paused).await.is_err() {
                    return;
                }
                // A lossless consumer has not acknowledged a whole ring: read nothing (the
                // program blocks on its writes) until it does or its hold ends.
                let held = hold::room(*floor.borrow_and_update(), end, capacity) == 0;
                holds.set_held_back(held);
                if held {
                    tokio::select! {
                        biased;
                        _ = paused.changed() => {}
                        // The gate lives as long as this task: its sender cannot be gone.
                        _ = floor.changed() => {}
                    }
                    continue;
                }
                let mut ready = tokio::select! {
                    biased;
                    _ = paused.changed() => continue,
                    ready = master.readable() => match ready {
                        Ok(ready) => ready,
                        Err(e) => {
                            tracing::warn!(%binding, "PTY reader stopped: {e}");
                            return;
                        }
                    },
                };
                let read = {
                    let _gate = gate.lock_unpoisoned();
                    if *paused.borrow() {
                        continue;
                    }
                    // Held bytes are never dropped, also when a hold began since the check.
                    let room = hold::room(*floor.borrow(), end, capacity).min(READ_CHUNK);
                    if room == 0 {
                        continue;
                    }
                    ready.try_io(|fd| {
                        READ_BUF.with(|buf| {
                            let mut buf = buf.borrow_mut();
                            let read = pty_io::read(fd.get_ref().as_fd(), &mut buf[..room])?;
                            if let pty_io::Read::Data(n) = read {
                                if let Some(feed) = &screen {
                                    // Parsing is CPU work: off the runtime's worker while it
                                    // runs, so other PTYs and connections are not held up.
                                    if feed.screen.must_parse_before(end, capacity, n) {
                                        crate::runtime::blocking(|| {
                                            feed.screen.before_append(&ring, end, capacity, n)
                                        });
                                    }
                                }
                                let mut ring = ring.lock_unpoisoned();
                                ring.append(&buf[..n]);
                                end = ring.end();
                            }
                            Ok(read)
                        })
                    })
                };
                match read {
                    Ok(Ok(pty_io::Read::Data(_))) => {
                        last.store(crate::now_ms(), Ordering::Relaxed);
                        progress.send_modify(|p| p.end = end);
                        counters.note();
                        if let Some(feed) = &screen {
                            worker::request_catch_up(feed);
                        }
                        // Let the subscriptions just woken forward this chunk before the next
                        // read: without it the reader runs a whole coop budget (128 reads,
                        // megabytes) ahead of them on a busy worker, and a fast client would
                        // see a gap where the ring wrapped.
                        tokio::task::yield_now().await;
                    }
                    Ok(Ok(pty_io::Read::Eof)) => return,
                    Ok(Err(e)) => {
                        tracing::warn!(%binding, "PTY read failed: {e}");
                        return;
                    }
                    // Nothing there after all: readiness was cleared, wait again.
                    Err(_would_block) => {}
                }
            }
        });
    }

    /// Starts the writer task: it writes each queued input in order, waiting while the
    /// terminal's input buffer is full or IO is paused, and ends when the [`Pty`] (the queue's
    /// sender) is gone.
    pub(super) fn start_writer(&self, mut input: mpsc::UnboundedReceiver<Vec<u8>>) {
        let master = Arc::clone(&self.master);
        let gate = Arc::clone(&self.io_gate);
        let pending = Arc::clone(&self.pending_input);
        tokio::spawn(async move {
            let mut paused = pty_io::paused();
            while let Some(data) = input.recv().await {
                // A failed write means the PTY is gone; keep draining so accounting stays right.
                let _ = write_all(&master, &gate, &mut paused, &data).await;
                pending.fetch_sub(data.len(), Ordering::AcqRel);
            }
        });
    }
}

/// Writes all of `data` to the non-blocking `master`, each write under `gate` and never while
/// IO is paused (a live upgrade may have made the master blocking meanwhile).
async fn write_all(
    master: &AsyncFd<OwnedFd>,
    gate: &Mutex<()>,
    paused: &mut watch::Receiver<bool>,
    mut data: &[u8],
) -> std::io::Result<()> {
    while !data.is_empty() {
        pty_io::wait_unpaused(paused)
            .await
            .map_err(std::io::Error::other)?;
        let mut ready = tokio::select! {
            biased;
            _ = paused.changed() => continue,
            ready = master.writable() => ready?,
        };
        let _gate = gate.lock_unpoisoned();
        if *paused.borrow() {
            continue;
        }
        match ready.try_io(|fd| pty_io::write(fd.get_ref().as_fd(), data)) {
            Ok(Ok(n)) => data = &data[n..],
            Ok(Err(e)) => return Err(e),
            Err(_would_block) => {}
        }
    }
    Ok(())
}

impl Spawned {
    /// Starts the waiter task. `on_exit` runs once, after the child was reaped and its output
    /// finished (or the grace passed); it must update the lease and call [`Pty::publish_exit`].
    /// It runs on the blocking pool (it journals).
    pub fn start_waiter(
        self,
        output_grace: Duration,
        on_exit: impl FnOnce(ExitStatus) + Send + 'static,
    ) {
        let Spawned { pty, eof, .. } = self;
        tokio::spawn(async move {
            // Resolves once the child exited (an error: the reaper gave up on the pid, which
            // is not our child any more; reaping then reports why).
            let _ = crate::pty::reaper::exited(pty.pid).await;
            let status = match reap(&pty).await {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(binding = %pty.binding, "could not read the exit status: {e}");
                    ExitStatus {
                        code: 1,
                        signal: None,
                    }
                }
            };
            // Output finished (reader EOF: its sender dropped) or the grace passed — time the
            // reader spends waiting for a lossless consumer does not count: that output is not
            // finished, and it is delivered before `Exited`.
            let mut eof = eof;
            while tokio::time::timeout(output_grace, &mut eof).await.is_err()
                && pty.holds.is_held_back()
            {}
            let _ = tokio::task::spawn_blocking(move || {
                // Events up to the exit are recorded before `Exited` can go out.
                if let Some(feed) = &pty.screen {
                    feed.screen.catch_up(&feed.ring);
                }
                on_exit(status);
            })
            .await;
        });
    }
}

/// Reaps the exited child under the reap lock. The lock is only ever held briefly (a signal
/// being sent) or while a live upgrade hands over; this waits for it without holding a thread.
async fn reap(pty: &Pty) -> std::io::Result<ExitStatus> {
    loop {
        if let Some(status) = try_reap(pty) {
            return status;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Reaps the exited child unless the reap lock is held elsewhere (`None`).
fn try_reap(pty: &Pty) -> Option<std::io::Result<ExitStatus>> {
    let mut reaped = match pty.reaped.try_lock() {
        Ok(held) => held,
        Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
        Err(std::sync::TryLockError::WouldBlock) => return None,
    };
    // Immediate: the child has exited.
    let status = pty_io::reap(pty.pid);
    *reaped = true;
    Some(status)
}
