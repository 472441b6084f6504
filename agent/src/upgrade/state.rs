//! The state side of a live upgrade (see [`crate::upgrade`]): accepting the order, the cut —
//! a consistent stop of every PTY with its state written and the new binary checked — and, in
//! the new code, resuming from what was handed over.
//!
//! The cut holds the journal lock (no change can be journaled: no end, no create, no policy
//! end) and every PTY's reap lock (no child can be reaped, so every pid stays ours and every
//! lease stays live) from the moment the state is taken until `execve`. Before it, the daemon
//! waits (bounded) until nothing is in flight: no create, no end, no input queued but unwritten.
//! If anything fails before `execve` succeeds, the readers start again and everything resumes.

use std::collections::{HashMap, HashSet};
use std::os::fd::{AsFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use relay_protocol::message::{AgentBinary, Upgrade, UpgradeReport, UpgradeStarted};
use relay_protocol::{EndReason, ErrorReply, PtyId};

use crate::config::Config;
use crate::fault;
use crate::lease::counters::CounterNote;
use crate::lease::journal;
use crate::lease::{LeaseTable, Phase};
use crate::now_ms;
use crate::output::hold::HoldGate;
use crate::output::ring::Ring;
use crate::output::screen::PtyScreen;
use crate::paths::Paths;
use crate::pty::io as pty_io;
use crate::pty::io::set_cloexec;
use crate::pty::{Pty, PtyParts, Spawned};
use crate::runtime::LockExt;
use crate::state::State;
use crate::upgrade::version::{self, Version};
use crate::upgrade::{self as format, probe, rescue, HandedPty, Handover};

/// How long the daemon waits for creates, ends and queued input to finish before a cut.
const SETTLE: Duration = Duration::from_secs(5);
/// Pause between looks while settling.
const SETTLE_STEP: Duration = Duration::from_millis(20);

/// The daemon's own descriptors that cross `execve`.
#[derive(Debug, Clone, Copy)]
pub struct DaemonFds {
    /// The listening socket.
    pub listener: RawFd,
    /// The flocked daemon lock.
    pub lock: RawFd,
}

impl State {
    /// Tells the state where the daemon's files are (`$RELAY_HOME`); needed for upgrades.
    pub fn set_paths(&self, paths: &Paths) {
        let _ = self.inner.upgrade.paths.set(paths.clone());
    }

    /// Waits for an accepted upgrade order; returns the binary to hand over to.
    pub async fn upgrade_ordered(&self) -> PathBuf {
        loop {
            let notified = self.inner.upgrade.notify.notified();
            if let Some(bin) = self.lock_order().take() {
                return bin;
            }
            notified.await;
        }
    }

    fn lock_order(&self) -> std::sync::MutexGuard<'_, Option<PathBuf>> {
        self.inner.upgrade.order.lock_unpoisoned()
    }

    fn running_binary() -> AgentBinary {
        let path = std::fs::read_link("/proc/self/exe")
            .map(|p| p.display().to_string())
            .unwrap_or_else(|_| "(unknown)".into());
        AgentBinary {
            path,
            version: env!("CARGO_PKG_VERSION").to_string(),
        }
    }

    /// `UpgradeInfo`: what runs, what is installed, how the last upgrade went.
    pub fn upgrade_report(&self) -> UpgradeReport {
        let running = Self::running_binary();
        let newest = self
            .inner
            .upgrade
            .paths
            .get()
            .and_then(|p| version::newest_installed(&p.agent_bin_dir()));
        let newer = match (&newest, Version::parse(&running.version)) {
            (Some(n), Some(r)) => n.version > r,
            _ => false,
        };
        UpgradeReport {
            running,
            state_version: format::STATE_VERSION,
            newest_installed: newest.map(|n| AgentBinary {
                path: n.path.display().to_string(),
                version: n.version.to_string(),
            }),
            newer_installed: newer,
            last_failure: self.inner.upgrade.last_failure.lock_unpoisoned().clone(),
            in_progress: self.upgrading(),
            upgraded_from: self.inner.upgrade.upgraded_from.get().cloned(),
        }
    }

    /// `Upgrade`: picks and probes the binary (version rules in [`version::decide`]) and, when
    /// accepted, orders the daemon loop to hand over once the reply is out.
    ///
    /// # Errors
    /// `BadRequest` for a relative path; `UpgradeRefused` naming the cause (no binary
    /// installed, it cannot run, it cannot read the state, a downgrade, nothing newer, an
    /// upgrade already under way).
    pub async fn upgrade(&self, req: Upgrade) -> Result<UpgradeStarted, ErrorReply> {
        let result = self.accept_upgrade(req).await;
        if let Err(e) = &result {
            tracing::warn!("{e}");
            *self.inner.upgrade.last_failure.lock_unpoisoned() = Some(e.to_string());
        }
        result
    }

    async fn accept_upgrade(&self, req: Upgrade) -> Result<UpgradeStarted, ErrorReply> {
        let refused = |message: String| ErrorReply::UpgradeRefused { message };
        let named = req.to.is_some();
        let bin = match req.to {
            Some(to) if !Path::new(&to).is_absolute() => {
                return Err(ErrorReply::BadRequest {
                    message: format!("--to {to:?}: give the binary's absolute path on the host"),
                })
            }
            Some(to) => PathBuf::from(to),
            None => {
                let dir = self.inner.upgrade.paths.get().map(Paths::agent_bin_dir);
                let dir = dir.unwrap_or_default();
                version::newest_installed(&dir)
                    .ok_or_else(|| {
                        refused(format!(
                            "no agent is installed in {} (relay installs one there when it \
                             connects over SSH); name a binary with --to",
                            dir.display()
                        ))
                    })?
                    .path
            }
        };
        let probed = bin.clone();
        let candidate = tokio::task::spawn_blocking(move || probe::info(&probed))
            .await
            .map_err(|e| refused(format!("probe task failed: {e}")))?
            .map_err(refused)?;
        let running = Self::running_binary();
        let running_version = Version::parse(&running.version).ok_or_else(|| {
            refused(format!(
                "the running version {} does not parse",
                running.version
            ))
        })?;
        version::decide(
            &running_version,
            format::STATE_VERSION,
            &candidate,
            named,
            req.force,
        )
        .map_err(|r| refused(r.to_string()))?;
        if self.inner.upgrade.under_way.swap(true, Ordering::SeqCst) {
            return Err(refused("an upgrade is already under way".into()));
        }
        // What `/proc/self/exe` will name once it runs (a symlink resolved).
        let bin = std::fs::canonicalize(&bin).unwrap_or(bin);
        self.inner
            .upgrade
            .stop_requested
            .store(false, Ordering::SeqCst);
        *self.lock_order() = Some(bin.clone());
        let started = UpgradeStarted {
            from: running,
            to: AgentBinary {
                path: bin.display().to_string(),
                version: candidate.version.to_string(),
            },
            ptys: self.inner.ptys.len() as u32,
        };
        tracing::info!(from = %started.from.version, to = %started.to.version, path = %started.to.path, "upgrade accepted");
        Ok(started)
    }

    /// A stop signal arrived during a handover: the cut does not `execve` (checked last, with
    /// the signals blocked in the cutting thread), and the daemon stops.
    pub fn note_stop_signal(&self) {
        self.inner
            .upgrade
            .stop_requested
            .store(true, Ordering::SeqCst);
    }

    /// Records why a handover did not happen (for [`State::upgrade_report`]), and logs it.
    pub fn note_upgrade_failure(&self, why: String) {
        tracing::error!("upgrade failed; this agent keeps serving: {why}");
        *self.inner.upgrade.last_failure.lock_unpoisoned() = Some(why);
    }

    /// Lets the daemon loop pick up the accepted order (called once the reply is queued, so it
    /// reaches the client before connections close).
    pub fn release_upgrade_order(&self) {
        self.inner.upgrade.notify.notify_one();
    }

    /// The cut and `execve` of `bin` (module docs). Returns only when the upgrade did not
    /// happen, with why; everything runs as before then. Blocking: run it off the runtime.
    pub fn hand_over(&self, bin: &Path, fds: DaemonFds) -> String {
        let why = self.try_hand_over(bin, fds);
        tracing::error!(
            "upgrade to {} failed; this agent keeps serving: {why}",
            bin.display()
        );
        *self.inner.upgrade.last_failure.lock_unpoisoned() = Some(why.clone());
        self.inner.upgrade.under_way.store(false, Ordering::SeqCst);
        why
    }

    fn try_hand_over(&self, bin: &Path, fds: DaemonFds) -> String {
        let deadline = Instant::now() + SETTLE;
        loop {
            let unsettled = self.unsettled();
            let Some(why) = unsettled else { break };
            if Instant::now() > deadline {
                return format!("{why} after {SETTLE:?}; try again");
            }
            std::thread::sleep(SETTLE_STEP);
        }
        let exe = match std::fs::File::open("/proc/self/exe") {
            Ok(f) => OwnedFd::from(f),
            Err(e) => return format!("could not open the running binary for a fall-back: {e}"),
        };
        while Instant::now() <= deadline + SETTLE {
            let journal = self.journal();
            let ptys: Vec<Arc<Pty>> = self
                .inner
                .ptys
                .iter()
                .map(|e| Arc::clone(e.value()))
                .collect();
            let held: Vec<_> = ptys.iter().map_while(|p| p.hold_unreaped()).collect();
            if held.len() == ptys.len() && self.unsettled().is_none() {
                let why = self.cut(bin, &ptys, fds, exe.as_fd());
                drop(held);
                drop(journal);
                return why;
            }
            // A child was reaped and its end waits for the journal: let it finish.
            drop(held);
            drop(journal);
            std::thread::sleep(SETTLE_STEP);
        }
        "PTYs kept ending while the state was taken; try again".into()
    }

    /// What is in flight that a cut must not cut through, if anything.
    fn unsettled(&self) -> Option<String> {
        if !self.inner.gates.lock_unpoisoned().is_empty() {
            return Some("a pane is being created".into());
        }
        for entry in self.inner.ptys.iter() {
            let pty = entry.value();
            if pty.is_ending() {
                return Some(format!("PTY {} is being ended", pty.binding()));
            }
            if pty.pending_input() > 0 {
                return Some(format!(
                    "PTY {} has {} bytes of input its program has not read",
                    pty.binding(),
                    pty.pending_input()
                ));
            }
        }
        None
    }

    /// With the journal and every reap lock held: stop readers, write and check the state,
    /// `execve`. On failure undoes it all and returns why.
    fn cut(&self, bin: &Path, ptys: &[Arc<Pty>], fds: DaemonFds, exe: BorrowedFd<'_>) -> String {
        pty_io::pause_io();
        for pty in ptys {
            pty.fence_io();
        }
        let (since_ms, last_counter) = {
            let book = self.book();
            let since_ms = ptys
                .iter()
                .filter_map(|p| {
                    let pty = p.binding().pty;
                    Some((pty, book.get(&pty)?.since_ms))
                })
                .collect();
            (since_ms, book.last_minted())
        };
        let handover = Handover {
            from_version: env!("CARGO_PKG_VERSION").to_string(),
            incarnation: self.inner.incarnation,
            started_ms: self.inner.started_ms,
            listener_fd: fds.listener,
            lock_fd: fds.lock,
            ptys: ptys.iter().map(|p| p.parts_for_handover()).collect(),
            since_ms,
            added_in_2: Some(format::AddedIn2 { last_counter }),
            added_in_3: Some(format::AddedIn3 {
                holds: ptys
                    .iter()
                    .map(|p| (p.binding().pty, p.holds().held()))
                    .filter(|(_, held)| !held.is_empty())
                    .collect(),
            }),
        };
        let bytes = format::encode(&handover);
        let run_dir = self.inner.upgrade.paths.get().map(Paths::run_dir);
        let why = match probe::write_state(&bytes, &run_dir.unwrap_or_default()) {
            Err(e) => format!("could not write the handover state: {e}"),
            Ok(state) => match probe::check(bin, state.as_fd(), ptys.len()) {
                Err(e) => format!("the new binary cannot take over: {e}"),
                Ok(()) => {
                    tracing::info!(
                        ptys = ptys.len(),
                        bytes = bytes.len(),
                        "handing over to {}",
                        bin.display()
                    );
                    let crossing = crossing_fds(ptys, fds, exe, state.as_fd());
                    let home = self.inner.upgrade.paths.get().map(Paths::home);
                    let prepared =
                        inheritable(&crossing, true).and_then(|()| blocking_masters(ptys, true));
                    let why = match (prepared, home) {
                        (Err(e), _) => format!("could not prepare the descriptors: {e}"),
                        (Ok(()), None) => "the daemon's home is not known".into(),
                        (Ok(()), Some(home)) => self.exec_unless_stopping(bin, &state, exe, home),
                    };
                    let _ = inheritable(&crossing, false);
                    let _ = blocking_masters(ptys, false);
                    why
                }
            },
        };
        pty_io::resume_io();
        why
    }

    /// `execve` with SIGTERM/SIGINT blocked in this thread (the mask and pending signals cross
    /// `execve`, and the new code unblocks them once its handlers are in place), unless a stop
    /// signal arrived meanwhile. Returns why it did not happen; the mask is restored then.
    fn exec_unless_stopping(
        &self,
        bin: &Path,
        state: &OwnedFd,
        exe: BorrowedFd<'_>,
        home: &Path,
    ) -> String {
        use nix::sys::signal::{SigSet, SigmaskHow, Signal};
        let mut stops = SigSet::empty();
        stops.add(Signal::SIGTERM);
        stops.add(Signal::SIGINT);
        let mut old = SigSet::empty();
        let _ =
            nix::sys::signal::pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&stops), Some(&mut old));
        let why = if self.inner.upgrade.stop_requested.load(Ordering::SeqCst) {
            "a stop signal arrived during the handover: the daemon stops instead".to_string()
        } else {
            format!(
                "execve {} failed: {}",
                bin.display(),
                probe::exec(bin, state.as_fd(), exe, home)
            )
        };
        let _ = nix::sys::signal::pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&old), None);
        why
    }

    /// The new code's start: the lease book from the journal with the incarnation kept, the
    /// handed PTYs adopted with their IO paused and nothing started ([`Resumed::start`] starts
    /// readers, writers, waiters and timers), leases whose PTY did not come along ended as
    /// `AgentRestarted`. `fell_back`: this is the old code taking its shells back
    /// from a new binary that could not resume, and why (recorded as the upgrade's failure).
    ///
    /// # Errors
    /// The journal's IO errors.
    pub fn resume(
        config: Config,
        journal_path: &Path,
        handover: Handover,
        fell_back: Option<String>,
    ) -> std::io::Result<Resumed> {
        // The new code of an upgrade, not the old code taking its shells back.
        let new_code = fell_back.is_none();
        let loaded = journal::load(journal_path)?;
        let mut table = LeaseTable::new(handover.incarnation, config.max_ended);
        let report = loaded.apply(&mut table);
        match handover.added_in_2 {
            Some(added) => table.minted_through(added.last_counter),
            None => tracing::warn!(
                from = %handover.from_version,
                "the state does not carry the PTY counter: ids are minted above the journal's"
            ),
        }
        for (pty, since) in &handover.since_ms {
            table.restore_since(pty, *since);
        }
        let handed: HashSet<PtyId> = handover.ptys.iter().map(|p| p.binding.pty).collect();
        let lost: Vec<PtyId> = table
            .leases()
            .filter(|l| !matches!(l.phase, Phase::Ended { .. }) && !handed.contains(&l.binding.pty))
            .map(|l| l.binding.pty)
            .collect();
        for pty in &lost {
            tracing::warn!(%pty, "the journal has this PTY running but it was not handed over; ended");
            table.end(pty, None, EndReason::AgentRestarted, now_ms());
        }
        table.end_previous_incarnations(now_ms());
        let state = State::with_table(config, table, journal_path, handover.started_ms)?;
        match fell_back {
            // The old code took the shells back: this is no upgrade, and the attempt failed.
            Some(why) => state.note_upgrade_failure(format!(
                "the new binary could not resume, so this agent took its shells back: {why}"
            )),
            None => {
                let _ = state
                    .inner
                    .upgrade
                    .upgraded_from
                    .set(handover.from_version.clone());
            }
        }
        tracing::info!(
            from = %handover.from_version,
            ptys = handover.ptys.len(),
            records = report.records,
            "resumed after a live upgrade"
        );
        let mut holds: HashMap<PtyId, Vec<(String, u64)>> = handover
            .added_in_3
            .map(|a| a.holds.into_iter().collect())
            .unwrap_or_default();
        // Adopted first, started after: until every PTY is adopted, nothing is read, written,
        // reaped or ended, so a new binary that fails half-way returns to the old code with a
        // state that is still exactly true (`upgrade::rescue`).
        pty_io::pause_io();
        let total = handover.ptys.len();
        let mut adopted = Vec::with_capacity(total);
        for handed in handover.ptys {
            let held = holds.remove(&handed.binding.pty).unwrap_or_default();
            // The test fault: the second PTY cannot be served.
            let refuse = new_code && adopted.len() == 1 && fault::at("resume-serve");
            adopted.extend(state.adopt(handed, held, refuse));
            if new_code && adopted.len() == total.div_ceil(2) && fault::at("resume-adopt") {
                // Long enough for a reader started too early to have read what was waiting.
                std::thread::sleep(Duration::from_millis(300));
                std::process::abort();
            }
        }
        Ok(Resumed { state, adopted })
    }

    /// Takes a handed-over PTY into the book, its IO paused by the caller; `None` (logged) when
    /// it cannot be served and there is no old binary to return to. `refuse`: fail as if it
    /// could not be served (a test fault point).
    fn adopt(&self, h: HandedPty, held: Vec<(String, u64)>, refuse: bool) -> Option<Spawned> {
        let pty_id = h.binding.pty;
        // Safety: the descriptor number came from the old code, which kept it open for us;
        // nothing else in this process owns it.
        let master = unsafe { OwnedFd::from_raw_fd(h.master_fd) };
        let _ = set_cloexec(master.as_fd(), true);
        let screen = h.screen.map(|s| PtyScreen::resume(pty_id, h.size, s));
        let parts = PtyParts {
            binding: h.binding.clone(),
            pid: h.pid,
            master,
            size: h.size,
            ring: Ring::resume(h.ring_capacity as usize, h.ring_start, &h.ring),
            screen,
            start_ticks: h.start_ticks,
            last_output_ms: h.last_output_ms,
            last_input_ms: h.last_input_ms,
            superseded: h.superseded,
            input_seq: h.input_seq,
            holds: HoldGate::resumed(held, self.inner.config.hold_grace),
        };
        let counters = Arc::new(CounterNote::new(pty_id, self.inner.counters.clone()));
        let assembled = if refuse {
            let e = std::io::Error::other("test fault resume-serve");
            Err((e, parts.master))
        } else {
            Pty::assemble(parts, counters)
        };
        let spawned = match assembled {
            Ok(s) => s,
            Err((e, master)) => {
                // The master stays open until the old binary has it again.
                let why = format!("could not serve the handed-over PTY {}: {e}", h.binding);
                let e = rescue::fall_back(&why);
                tracing::error!(binding = %h.binding, "{e:#}");
                drop(master);
                return None;
            }
        };
        self.inner.ptys.insert(pty_id, Arc::clone(&spawned.pty));
        Some(spawned)
    }

    /// Starts what an adopted PTY's lease needs: its waiter and its policy timer.
    fn start_adopted(&self, spawned: Spawned) {
        let pty_id = spawned.pty.binding.pty;
        let state = self.clone();
        spawned.start_waiter(self.inner.config.exit_output_grace, move |status| {
            state.on_exit(pty_id, status)
        });
        self.arm(pty_id);
    }
}

/// The new code's state after [`State::resume`]: every handed-over PTY adopted, none started.
pub struct Resumed {
    state: State,
    adopted: Vec<Spawned>,
}

impl Resumed {
    /// Commits the upgrade ([`rescue::commit`]: failures are the new code's own from now on) and
    /// starts every adopted PTY: IO resumes, waiters and policy timers start. Call once the
    /// daemon is ready to serve.
    pub fn start(self) -> State {
        rescue::commit();
        pty_io::resume_io();
        for spawned in self.adopted {
            self.state.start_adopted(spawned);
        }
        self.state
    }
}

/// Every descriptor that crosses `execve`.
fn crossing_fds<'a>(
    ptys: &'a [Arc<Pty>],
    fds: DaemonFds,
    exe: BorrowedFd<'a>,
    state: BorrowedFd<'a>,
) -> Vec<BorrowedFd<'a>> {
    // Safety: the daemon's listener and lock stay open for its whole life.
    let own = unsafe {
        [
            BorrowedFd::borrow_raw(fds.listener),
            BorrowedFd::borrow_raw(fds.lock),
        ]
    };
    ptys.iter()
        .map(|p| p.master())
        .chain(own)
        .chain([exe, state])
        .collect()
}

/// Puts every master in blocking mode (`on`) or back to non-blocking: a handover passes them
/// blocking, as older agents read them (this version makes them non-blocking again).
fn blocking_masters(ptys: &[Arc<Pty>], on: bool) -> std::io::Result<()> {
    ptys.iter()
        .try_for_each(|p| pty_io::set_nonblocking(p.master(), !on))
}

/// Clears (`cross`) or sets `FD_CLOEXEC` on each descriptor.
fn inheritable(fds: &[BorrowedFd<'_>], cross: bool) -> std::io::Result<()> {
    fds.iter().try_for_each(|fd| set_cloexec(*fd, !cross))
}
