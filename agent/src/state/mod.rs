//! The daemon's shared state behind a cheap-clone [`State`] handle: the lease book, the running
//! PTYs, the journal and the lifecycle timers.
//!
//! Split by responsibility:
//! - here: opening (journal replay, orphans), accessors, listing, status;
//! - `create`: create, open and replace (the only paths that spawn);
//! - `attach`: attachments (a guard per subscriber) and the fenced per-PTY operations;
//! - `end`: a PTY's exit, kills and ends with their outcome, daemon shutdown;
//! - `lifecycle`: facts for the policy, timers, policy ends, `Inspect` rows;
//! - `counters`: journaling live PTYs' output counters (on detach, and bounded while output
//!   flows).
//!
//! Locking (rule F, no global lock on the hot paths):
//! - `ptys`, a sharded concurrent map (dashmap) from PTY id to running PTY: the keystroke,
//!   resize and output paths look PTYs up there and never wait on the book. Its guards are never
//!   held across `.await` or while taking another lock.
//! - `book`, one `std` mutex over the lease table, held only for short in-memory sections.
//! - `journal`, the journal's mutex. Every change that is journaled takes it *first* and holds
//!   it across its book section and its append, so records land in the order of the changes,
//!   while the book lock is never held across journal IO (lock order: journal → book → a PTY's
//!   own locks). Attach, detach and listing never touch the journal.
//!
//! Spawning happens outside every lock, serialized per pane by an async gate so two creates of
//! one pane cannot both spawn (rule D) while creates of other panes proceed (rule F).

mod attach;
mod counters;
mod create;
mod end;
mod lifecycle;
pub mod tails;

use std::collections::HashMap;
use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Instant;

use dashmap::DashMap;
use relay_protocol::message::{Forgot, Status};
use relay_protocol::{ErrorReply, Incarnation, LeaseInfo, LeaseState, PaneKey, PtyId, WorkspaceId};

pub use attach::Attachment;

use crate::config::Config;
use crate::lease::journal::{self, Journal, LoadReport, Record};
use crate::lease::{Lease, LeaseTable};
use crate::lifecycle::Timers;
use crate::limits::FrameBudget;
use crate::now_ms;
use crate::paths::Paths;
use crate::pty::orphan;
use crate::pty::Pty;
use crate::runtime::LockExt;

/// Handle to the daemon's state; clones share it.
#[derive(Clone)]
pub struct State {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) config: Config,
    pub(crate) incarnation: Incarnation,
    pub(crate) started_ms: u64,
    started: Instant,
    book: Mutex<LeaseTable>,
    pub(crate) ptys: DashMap<PtyId, Arc<Pty>>,
    journal: Mutex<Journal>,
    pub(crate) gates: Mutex<HashMap<PaneKey, Arc<tokio::sync::Mutex<()>>>>,
    timers: Timers,
    connections: AtomicU32,
    /// Set by [`State::shutdown`]: PTYs ending now end because the daemon stops.
    stopping: AtomicBool,
    /// PTYs whose output counters are due for the journal (see [`crate::lease::counters`]).
    pub(crate) counters: tokio::sync::mpsc::UnboundedSender<PtyId>,
    /// Memory of all connections' incomplete request frames (see [`crate::daemon::inbound`]).
    frame_budget: FrameBudget,
    /// Live upgrade: the order for the daemon loop, whether one is under way (creates are
    /// refused meanwhile) and how the last one went (see [`crate::upgrade`]).
    pub(crate) upgrade: UpgradeSlot,
    /// Rings of recently ended PTYs, for clients that were away (see [`tails`]).
    tails: Mutex<tails::Tails>,
}

/// The live-upgrade corner of the state.
#[derive(Default)]
pub(crate) struct UpgradeSlot {
    /// Where the daemon's files are (set once by the daemon at start).
    pub(crate) paths: OnceLock<Paths>,
    /// The accepted order, taken by the daemon loop.
    pub(crate) order: Mutex<Option<PathBuf>>,
    pub(crate) notify: tokio::sync::Notify,
    /// Set from the order until the cut failed (creates are refused meanwhile).
    pub(crate) under_way: AtomicBool,
    /// Why the last attempt failed.
    pub(crate) last_failure: Mutex<Option<String>>,
    /// The version this code was handed over from.
    pub(crate) upgraded_from: OnceLock<String>,
    /// SIGTERM/SIGINT arrived while a handover was under way: stop instead of handing over.
    pub(crate) stop_requested: AtomicBool,
}

/// Counts a connection while it lives (for `Status`).
pub struct ConnectionGuard(State);

impl Drop for ConnectionGuard {
    fn drop(&mut self) {
        self.0.inner.connections.fetch_sub(1, Ordering::Relaxed);
    }
}

impl State {
    /// A new incarnation whose table is loaded from (and compacts) the journal at `journal`.
    /// Processes of earlier incarnations' leases that are still running (their daemon was killed)
    /// are ended first, with whatever is left in their sessions (see [`crate::pty::orphan`]); then
    /// those leases are ended as `AgentRestarted` (or with the reason of an end that was
    /// requested before the restart). Blocks for up to about the kill grace + 1 s when such a
    /// process ignores SIGHUP.
    ///
    /// # Errors
    /// IO errors of the journal, naming its path and the fix. Unreadable lines are not errors.
    pub fn open(config: Config, journal: &std::path::Path) -> io::Result<(State, LoadReport)> {
        let loaded = journal::load(journal)?;
        // A new random incarnation; re-rolled in the (unlikely) case the journal knows it.
        let known = loaded.incarnations();
        let incarnation = loop {
            let candidate = Incarnation(rand::random());
            if !known.contains(&candidate) {
                break candidate;
            }
        };
        let mut table = LeaseTable::new(incarnation, config.max_ended);
        let mut report = loaded.apply(&mut table);
        // Still running (their daemon was killed), or killed by a daemon that died before its
        // sweep of their sessions finished.
        let orphans: Vec<orphan::Process> = table
            .stale()
            .chain(table.unswept())
            .filter_map(|l| {
                Some(orphan::Process {
                    pty: l.binding.pty,
                    pid: l.pid?,
                    start_ticks: l.start_ticks?,
                })
            })
            .collect();
        orphan::end_orphans(&orphans, config.kill_grace);
        for p in &orphans {
            table.confirm_end(&p.pty);
        }
        report.restarted = table.end_previous_incarnations(now_ms());
        let state = State::with_table(config, table, journal, now_ms())?;
        Ok((state, report))
    }

    /// A state over `table` (journal rewritten from it), started at `started_ms`.
    pub(crate) fn with_table(
        config: Config,
        table: LeaseTable,
        journal: &std::path::Path,
        started_ms: u64,
    ) -> io::Result<State> {
        let incarnation = table.incarnation();
        let journal = Journal::start(journal, &table)?;
        let (counters, counters_due) = tokio::sync::mpsc::unbounded_channel();
        let frame_budget = FrameBudget::new(config.incomplete_frames_bytes);
        let started = Instant::now()
            .checked_sub(std::time::Duration::from_millis(
                now_ms().saturating_sub(started_ms),
            ))
            .unwrap_or_else(Instant::now);
        let state = State {
            inner: Arc::new(Inner {
                config,
                incarnation,
                started_ms,
                started,
                book: Mutex::new(table),
                ptys: DashMap::new(),
                journal: Mutex::new(journal),
                gates: Mutex::new(HashMap::new()),
                timers: Timers::new(),
                connections: AtomicU32::new(0),
                stopping: AtomicBool::new(false),
                counters,
                frame_budget,
                upgrade: UpgradeSlot::default(),
                tails: Mutex::new(tails::Tails::default()),
            }),
        };
        state.start_counter_task(counters_due);
        Ok(state)
    }

    /// This daemon start's incarnation.
    pub fn incarnation(&self) -> Incarnation {
        self.inner.incarnation
    }

    /// Settings.
    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    /// The budget all connections' incomplete request frames share.
    pub fn frame_budget(&self) -> &FrameBudget {
        &self.inner.frame_budget
    }

    /// Whether an upgrade is under way (creates are refused with a retryable error).
    pub fn upgrading(&self) -> bool {
        self.inner.upgrade.under_way.load(Ordering::SeqCst)
    }

    /// Registers a connection until the guard drops.
    pub fn connection(&self) -> ConnectionGuard {
        self.inner.connections.fetch_add(1, Ordering::Relaxed);
        ConnectionGuard(self.clone())
    }

    pub(crate) fn book(&self) -> MutexGuard<'_, LeaseTable> {
        self.inner.book.lock_unpoisoned()
    }

    pub(crate) fn journal(&self) -> MutexGuard<'_, Journal> {
        self.inner.journal.lock_unpoisoned()
    }

    /// The running PTY `pty` (live or superseded), from the concurrent map.
    fn pty(&self, pty: &PtyId) -> Option<Arc<Pty>> {
        self.inner.ptys.get(pty).map(|p| Arc::clone(p.value()))
    }

    /// Appends a record whose loss only costs detail after a restart; a failure is logged.
    fn append_or_log(journal: &mut Journal, rec: &Record) {
        if let Err(e) = journal.append(rec) {
            tracing::error!("could not record a lease event in the journal: {e}");
        }
    }

    /// Rewrites the journal from the table when enough was appended. Takes the book briefly to
    /// copy the records; the write happens outside it.
    fn compact_if_needed(&self, journal: &mut Journal) {
        if journal.needs_compaction() {
            let records = journal::records_of(&self.book());
            if let Err(e) = journal.compact(&records) {
                tracing::error!("could not compact the lease journal: {e}");
            }
        }
    }

    /// Every lease, live figures filled in, sorted by pane key then PTY id.
    pub fn leases(&self) -> Vec<LeaseInfo> {
        let book = self.book();
        self.infos(book.leases())
    }

    /// The leases of `workspace`'s pane keys, as [`State::leases`] lists them
    /// (`ListWorkspace`); the book's other workspaces are not visited.
    pub fn workspace_leases(&self, workspace: &WorkspaceId) -> Vec<LeaseInfo> {
        let book = self.book();
        self.infos(book.workspace_leases(workspace))
    }

    /// The infos of `leases` with their PTYs' live figures, sorted by pane key then PTY id.
    fn infos<'a>(&self, leases: impl Iterator<Item = &'a Lease>) -> Vec<LeaseInfo> {
        let mut out: Vec<LeaseInfo> = leases
            .map(|l| {
                let mut info = l.info();
                if let Some(pty) = self.pty(&l.binding.pty) {
                    info.bytes_out = pty.end_offset();
                    info.last_output_ms = pty.last_output_ms();
                    info.size = pty.size();
                }
                info
            })
            .collect();
        out.sort_by(|a, b| (&a.binding.pane, a.binding.pty).cmp(&(&b.binding.pane, b.binding.pty)));
        out
    }

    /// `Forget`: prunes ended leases (`ptys`, or all ended ones when empty), journaled first. A
    /// binding of a forgotten lease then reads as ended with reason `Forgotten`.
    ///
    /// # Errors
    /// `Internal` naming the journal problem when it cannot be recorded (nothing is forgotten:
    /// it would come back after a restart).
    pub fn forget(&self, ptys: &[PtyId]) -> Result<Forgot, ErrorReply> {
        let mut journal = self.journal();
        let (ended, not_ended, unknown) = {
            let book = self.book();
            let ended: Vec<PtyId> = book
                .leases()
                .filter(|l| l.state() == LeaseState::Ended)
                .map(|l| l.binding.pty)
                .filter(|p| ptys.is_empty() || ptys.contains(p))
                .collect();
            let (mut not_ended, mut unknown) = (Vec::new(), Vec::new());
            for p in ptys.iter().filter(|p| !ended.contains(p)) {
                match book.get(p) {
                    Some(_) => not_ended.push(*p),
                    None => unknown.push(*p),
                }
            }
            (ended, not_ended, unknown)
        };
        if !ended.is_empty() {
            journal
                .append(&Record::Forget {
                    ptys: ended.clone(),
                })
                .map_err(|e| ErrorReply::Internal {
                    message: format!("nothing forgotten: it could not be recorded ({e})"),
                })?;
            self.book().forget(&ended);
        }
        tracing::info!(count = ended.len(), "forgot ended leases");
        Ok(Forgot {
            forgotten: ended.len() as u32,
            not_ended,
            unknown,
        })
    }

    /// The `Status` reply.
    pub fn status(&self) -> Status {
        Status {
            agent_version: self.inner.config.advertise_version.clone(),
            incarnation: self.inner.incarnation,
            pid: std::process::id(),
            started_ms: self.inner.started_ms,
            uptime_ms: self.inner.started.elapsed().as_millis() as u64,
            leases: self.book().counts(),
            connections: self.inner.connections.load(Ordering::Relaxed),
        }
    }
}
