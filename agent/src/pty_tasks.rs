//! The tasks that serve one PTY on the daemon's runtime: the reader (PTY → ring), the writer
//! (queued input → PTY) and the waiter (child exit → lease). None holds the [`Pty`] itself, so
//! dropping the last `Arc<Pty>` ends the writer; the reader ends at the end of output.

use std::cell::RefCell;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use relay_protocol::ExitStatus;
use tokio::io::unix::AsyncFd;
use tokio::sync::{mpsc, oneshot};

use super::{Pty, Spawned};
use crate::pty_io;
use crate::screen::worker;

/// Bytes one read takes from a PTY at most.
const READ_CHUNK: usize = 64 * 1024;

thread_local! {
    /// The read buffer of the PTY readers running on this runtime thread: a read and its append
    /// to the ring happen with no `.await` between, so one buffer per thread serves every PTY
    /// (not 64 KiB per idle pane).
    static READ_BUF: RefCell<Vec<u8>> = RefCell::new(vec![0; READ_CHUNK]);
}

impl Pty {
    /// Starts the reader task. `eof` is dropped when the output ends (the waiter waits for
    /// that), or handed back by the task when it was stopped for a handover.
    pub(super) fn start_reader(&self, eof: oneshot::Sender<()>) {
        let master = Arc::clone(&self.master);
        let ring = Arc::clone(&self.ring);
        let progress = self.progress.clone();
        let last = Arc::clone(&self.last_output_ms);
        let screen = self.screen.clone();
        let counters = Arc::clone(&self.counters);
        let binding = self.binding.clone();
        let task = tokio::spawn(async move {
            let mut stop = pty_io::stop_watch();
            // This task is the ring's only writer: it knows the end without locking.
            let (capacity, mut end) = {
                let ring = ring.lock().unwrap_or_else(|p| p.into_inner());
                (ring.capacity(), ring.end())
            };
            loop {
                if *stop.borrow_and_update() {
                    return Some(eof);
                }
                let mut ready = tokio::select! {
                    biased;
                    changed = stop.changed() => {
                        if changed.is_err() {
                            return None;
                        }
                        continue;
                    }
                    ready = master.readable() => match ready {
                        Ok(ready) => ready,
                        Err(e) => {
                            tracing::warn!(%binding, "PTY reader stopped: {e}");
                            return None;
                        }
                    },
                };
                let read = ready.try_io(|fd| {
                    READ_BUF.with(|buf| {
                        let mut buf = buf.borrow_mut();
                        let read = pty_io::read(fd.get_ref().as_fd(), &mut buf)?;
                        if let pty_io::Read::Data(n) = read {
                            if let Some(feed) = &screen {
                                feed.screen.before_append(&ring, end, capacity, n);
                            }
                            let mut ring = ring.lock().unwrap_or_else(|p| p.into_inner());
                            ring.append(&buf[..n]);
                            end = ring.end();
                        }
                        Ok(read)
                    })
                });
                match read {
                    Ok(Ok(pty_io::Read::Data(_))) => {
                        last.store(crate::now_ms(), Ordering::Relaxed);
                        progress.send_modify(|p| p.end = end);
                        counters.note();
                        if let Some(feed) = &screen {
                            worker::request_catch_up(feed);
                        }
                    }
                    Ok(Ok(pty_io::Read::Eof)) => return None,
                    Ok(Err(e)) => {
                        tracing::warn!(%binding, "PTY read failed: {e}");
                        return None;
                    }
                    // Nothing there after all: readiness was cleared, wait again.
                    Err(_would_block) => {}
                }
            }
        });
        *self.reader.lock().unwrap_or_else(|p| p.into_inner()) = Some(task);
    }

    /// Starts the writer task: it writes each queued input in order, waiting while the
    /// terminal's input buffer is full, and ends when the [`Pty`] (the queue's sender) is gone.
    pub(super) fn start_writer(&self, mut input: mpsc::UnboundedReceiver<Vec<u8>>) {
        let master = Arc::clone(&self.master);
        let pending = Arc::clone(&self.pending_input);
        tokio::spawn(async move {
            while let Some(data) = input.recv().await {
                // A failed write means the PTY is gone; keep draining so accounting stays right.
                let _ = write_all(&master, &data).await;
                pending.fetch_sub(data.len(), Ordering::AcqRel);
            }
        });
    }
}

/// Writes all of `data` to the non-blocking `master`.
async fn write_all(master: &AsyncFd<OwnedFd>, mut data: &[u8]) -> std::io::Result<()> {
    while !data.is_empty() {
        let mut ready = master.writable().await?;
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
    /// It runs on the blocking pool (it journals), as does the reaping (it takes the reap lock,
    /// which a live upgrade holds while it hands over).
    pub fn start_waiter(
        self,
        output_grace: Duration,
        on_exit: impl FnOnce(ExitStatus) + Send + 'static,
    ) {
        let Spawned { pty, eof, .. } = self;
        tokio::spawn(async move {
            match crate::reaper::exited(pty.pid) {
                // Resolves (or fails: the reaper gave up on the pid) once the child exited.
                Ok(exited) => {
                    let _ = exited.await;
                }
                Err(e) => {
                    tracing::error!(binding = %pty.binding, "cannot learn of the shell's exit: {e}");
                    return;
                }
            }
            let reaping = Arc::clone(&pty);
            let status = tokio::task::spawn_blocking(move || {
                let mut reaped = reaping.reaped.lock().unwrap_or_else(|p| p.into_inner());
                let status = pty_io::reap(reaping.pid);
                *reaped = true;
                status
            })
            .await;
            let status = match status {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => {
                    tracing::warn!(binding = %pty.binding, "could not read the exit status: {e}");
                    ExitStatus {
                        code: 1,
                        signal: None,
                    }
                }
                Err(e) => {
                    tracing::error!(binding = %pty.binding, "reaping failed: {e}");
                    return;
                }
            };
            // Output finished (reader EOF: its sender dropped) or the grace passed.
            let _ = tokio::time::timeout(output_grace, eof).await;
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
