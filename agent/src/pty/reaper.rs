//! Exit notices for the daemon's own children (the PTYs' shells), without a thread per child.
//!
//! One thread (`relay-sigchld`, on a small runtime of its own, so it outlives whichever runtime
//! first asked, as tests and the fuzz driver make several) listens for `SIGCHLD`; on each signal
//! (the kernel coalesces them, so one may stand for several exits) it asks every waited-for pid
//! whether it exited with `waitid(P_PID, pid, WEXITED | WNOHANG | WNOWAIT)`. Nothing is reaped here: the PTY's waiter
//! reaps under its reap lock, so the pid stays ours while signals may still be sent to it
//! (`waitpid(-1)` is never used). Only the daemon's direct children send it `SIGCHLD`: the
//! shells, and the short-lived probes of a live upgrade. A pid is asked once more right after it
//! is registered, so an exit before the registration (or before the listener existed) is not
//! missed.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use crate::runtime::LockExt;
use crate::sys::process::has_exited;
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::oneshot;

struct Reaper {
    /// Pid → who waits for its exit.
    waiting: Mutex<HashMap<u32, oneshot::Sender<()>>>,
}

fn reaper() -> &'static Reaper {
    static REAPER: OnceLock<Reaper> = OnceLock::new();
    REAPER.get_or_init(|| Reaper {
        waiting: Mutex::new(HashMap::new()),
    })
}

/// How often a pid is asked directly when the `SIGCHLD` listener could not be started.
const POLL_WITHOUT_LISTENER: std::time::Duration = std::time::Duration::from_millis(200);

/// Resolves once our child `pid` has exited (it is left unreaped). Must be called within the
/// daemon's runtime. Should the `SIGCHLD` listener fail to start (no thread could be made), the
/// exit is still learnt, by asking every 200 ms, and the failure is logged.
pub fn exited(pid: u32) -> oneshot::Receiver<()> {
    let (tx, rx) = oneshot::channel();
    if let Err(e) = listening() {
        tracing::error!(
            pid,
            "{e}; checking for the exit every {POLL_WITHOUT_LISTENER:?}"
        );
        tokio::spawn(async move {
            while !has_exited(pid) {
                tokio::time::sleep(POLL_WITHOUT_LISTENER).await;
            }
            let _ = tx.send(());
        });
        return rx;
    }
    let mut waiting = reaper().waiting.lock_unpoisoned();
    // It may have exited before it was registered: no later SIGCHLD would tell.
    if has_exited(pid) {
        let _ = tx.send(());
    } else {
        waiting.insert(pid, tx);
    }
    rx
}

/// Starts the listener thread once and waits until its `SIGCHLD` handler is in place.
fn listening() -> std::io::Result<()> {
    static STARTED: OnceLock<Result<(), String>> = OnceLock::new();
    let started = STARTED.get_or_init(|| {
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let spawned = std::thread::Builder::new()
            .name("relay-sigchld".into())
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_io()
                    .build();
                let runtime = match runtime {
                    Ok(rt) => rt,
                    Err(e) => return drop(ready_tx.send(Err(e.to_string()))),
                };
                runtime.block_on(async move {
                    let mut sigchld = match signal(SignalKind::child()) {
                        Ok(s) => s,
                        Err(e) => return drop(ready_tx.send(Err(e.to_string()))),
                    };
                    let _ = ready_tx.send(Ok(()));
                    while sigchld.recv().await.is_some() {
                        scan();
                    }
                });
            });
        match spawned {
            Ok(_) => ready_rx
                .recv()
                .unwrap_or_else(|_| Err("the SIGCHLD listener ended".into())),
            Err(e) => Err(e.to_string()),
        }
    });
    started
        .clone()
        .map_err(|e| std::io::Error::other(format!("cannot listen for SIGCHLD: {e}")))
}

/// Tells every waiter whose child exited.
fn scan() {
    let mut waiting = reaper().waiting.lock_unpoisoned();
    let done: Vec<u32> = waiting
        .iter()
        .filter(|(&pid, tx)| tx.is_closed() || has_exited(pid))
        .map(|(&pid, _)| pid)
        .collect();
    for pid in done {
        if let Some(tx) = waiting.remove(&pid) {
            let _ = tx.send(());
        }
    }
}
