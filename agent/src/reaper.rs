//! Exit notices for the daemon's own children (the PTYs' shells), without a thread per child.
//!
//! One task listens for `SIGCHLD`; on each signal (the kernel coalesces them, so one may stand for
//! several exits) it asks every waited-for pid whether it exited with
//! `waitid(P_PID, pid, WEXITED | WNOHANG | WNOWAIT)`. Nothing is reaped here: the PTY's waiter
//! reaps under its reap lock, so the pid stays ours while signals may still be sent to it
//! (`waitpid(-1)` is never used). Only the daemon's direct children send it `SIGCHLD`: the
//! shells, and the short-lived probes of a live upgrade. A pid is asked once more right after it
//! is registered, so an exit before the registration (or before the listener existed) is not
//! missed.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use nix::sys::wait::{waitid, Id, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::oneshot;

struct Reaper {
    /// Pid → who waits for its exit.
    waiting: Mutex<HashMap<u32, oneshot::Sender<()>>>,
    /// Whether a listener task runs (it is restarted when the runtime it ran on is gone).
    listening: Arc<AtomicBool>,
}

fn reaper() -> &'static Reaper {
    static REAPER: OnceLock<Reaper> = OnceLock::new();
    REAPER.get_or_init(|| Reaper {
        waiting: Mutex::new(HashMap::new()),
        listening: Arc::new(AtomicBool::new(false)),
    })
}

/// Resolves once our child `pid` has exited (it is left unreaped). Must be called within the
/// daemon's tokio runtime.
///
/// # Errors
/// The `SIGCHLD` handler could not be installed (then nothing would ever tell us of an exit).
pub fn exited(pid: u32) -> std::io::Result<oneshot::Receiver<()>> {
    let reaper = reaper();
    listen(reaper)?;
    let (tx, rx) = oneshot::channel();
    reaper
        .waiting
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(pid, tx);
    // It may have exited before it was registered: no later SIGCHLD would tell.
    scan(reaper);
    Ok(rx)
}

/// Starts the listener task unless one runs.
fn listen(reaper: &'static Reaper) -> std::io::Result<()> {
    if reaper.listening.swap(true, Ordering::AcqRel) {
        return Ok(());
    }
    let mut sigchld = match signal(SignalKind::child()) {
        Ok(s) => s,
        Err(e) => {
            reaper.listening.store(false, Ordering::Release);
            return Err(e);
        }
    };
    let running = Running(Arc::clone(&reaper.listening));
    tokio::spawn(async move {
        let _running = running;
        while sigchld.recv().await.is_some() {
            scan(reaper);
        }
    });
    Ok(())
}

/// Clears the listening flag when the listener task ends or is dropped with its runtime.
struct Running(Arc<AtomicBool>);

impl Drop for Running {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

/// Tells every waiter whose child exited (or is not our child: nothing more will come).
fn scan(reaper: &Reaper) {
    let mut waiting = reaper.waiting.lock().unwrap_or_else(|p| p.into_inner());
    let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT;
    let done: Vec<u32> = waiting
        .iter()
        .filter(|(&pid, tx)| {
            tx.is_closed()
                || !matches!(
                    waitid(Id::Pid(Pid::from_raw(pid as i32)), flags),
                    Ok(WaitStatus::StillAlive) | Err(nix::errno::Errno::EINTR)
                )
        })
        .map(|(&pid, _)| pid)
        .collect();
    for pid in done {
        if let Some(tx) = waiting.remove(&pid) {
            let _ = tx.send(());
        }
    }
}
