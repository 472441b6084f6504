//! The daemon's shared state: the lease table, the live PTYs and the journal, behind a cheap-clone
//! [`State`] handle.
//!
//! Locking: one `std` mutex over the table and the PTY map (`Book`), held only for short,
//! non-blocking sections and never across `.await`; the journal mutex is only taken inside it
//! (lock order: book → journal → a PTY's own locks). Spawning happens outside the book lock,
//! serialized per pane by an async gate so two creates of one pane cannot both spawn (rule D)
//! while creates of other panes proceed (rule F). `Open` runs the same create under that gate and
//! counts its subscriber in the same book section, so no output or exit falls in between.
//!
//! A new PTY whose `Created` record cannot be journaled (disk full) is ended again and the create
//! fails with `SpawnFailed`: a PTY the journal does not know would be invisible to the next
//! incarnation (neither reported as ended nor ended as an orphan).

use std::collections::HashMap;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use relay_protocol::message::{
    Create, Created, Input, InputSeq, Kill, Protect, Resize, Signal as SignalReq, Status,
};
use relay_protocol::{
    Binding, EndReason, ErrorReply, ExitStatus, Incarnation, LeaseInfo, PaneKey, PtyId,
};

use crate::config::Config;
use crate::input_seq::Applied;
use crate::journal::{self, Journal, LoadReport, Record};
use crate::lease::{Lease, LeaseTable};
use crate::pty::{Pty, Spawned};
use crate::{limits, now_ms, orphan};

/// How long ending an unrecorded PTY may take.
const UNRECORDED_WAIT: Duration = Duration::from_secs(2);

/// Handle to the daemon's state; clones share it.
#[derive(Clone)]
pub struct State {
    inner: Arc<Inner>,
}

struct Inner {
    config: Config,
    incarnation: Incarnation,
    started_ms: u64,
    started: Instant,
    book: Mutex<Book>,
    journal: Mutex<Journal>,
    gates: Mutex<HashMap<PaneKey, Arc<tokio::sync::Mutex<()>>>>,
    connections: AtomicU32,
    /// Set by [`State::shutdown`]: PTYs ending now end because the daemon stops.
    stopping: AtomicBool,
}

struct Book {
    table: LeaseTable,
    ptys: HashMap<PtyId, Arc<Pty>>,
}

impl Book {
    /// Counts one more subscriber on the pane's live PTY (the `expect` one, if given) and returns
    /// it. Shared by `Attach` and `Open`.
    fn attach(&mut self, pane: &PaneKey, expect: Option<PtyId>) -> Result<Arc<Pty>, ErrorReply> {
        let pty_id = self.table.check_attach(pane, expect)?.binding.pty;
        let pty = self
            .ptys
            .get(&pty_id)
            .cloned()
            .ok_or_else(|| ErrorReply::Internal {
                message: format!("lease {pane}@{pty_id} is live but its PTY is not registered"),
            })?;
        self.table.attach(&pty_id, now_ms());
        Ok(pty)
    }
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
    /// are ended first (see [`crate::orphan`]); then those leases are ended as `AgentRestarted`.
    /// Blocks for up to about the kill grace + 1 s when such a process ignores SIGHUP.
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
        let orphans: Vec<orphan::Process> = table
            .stale()
            .filter_map(|l| {
                Some(orphan::Process {
                    pty: l.binding.pty,
                    pid: l.pid?,
                    start_ticks: l.start_ticks?,
                })
            })
            .collect();
        orphan::end_orphans(&orphans, config.kill_grace);
        report.restarted = table.end_previous_incarnations(now_ms());
        let journal = Journal::start(journal, &table)?;
        let state = State {
            inner: Arc::new(Inner {
                config,
                incarnation,
                started_ms: now_ms(),
                started: Instant::now(),
                book: Mutex::new(Book {
                    table,
                    ptys: HashMap::new(),
                }),
                journal: Mutex::new(journal),
                gates: Mutex::new(HashMap::new()),
                connections: AtomicU32::new(0),
                stopping: AtomicBool::new(false),
            }),
        };
        Ok((state, report))
    }

    /// This daemon start's incarnation.
    pub fn incarnation(&self) -> Incarnation {
        self.inner.incarnation
    }

    /// Settings.
    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    /// Registers a connection until the guard drops.
    pub fn connection(&self) -> ConnectionGuard {
        self.inner.connections.fetch_add(1, Ordering::Relaxed);
        ConnectionGuard(self.clone())
    }

    fn book(&self) -> MutexGuard<'_, Book> {
        self.inner.book.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Appends a record to the journal.
    fn journal(&self, rec: &Record) -> io::Result<()> {
        let mut j = self.inner.journal.lock().unwrap_or_else(|p| p.into_inner());
        j.append(rec)
    }

    /// Appends a record whose loss only costs detail after a restart (an end or protect flag:
    /// the next incarnation still reports the lease as ended); a failure is logged.
    fn journal_or_log(&self, rec: &Record) {
        if let Err(e) = self.journal(rec) {
            tracing::error!("could not record a lease event in the journal: {e}");
        }
    }

    /// Create (rule D): the pane's live binding, or a newly spawned PTY.
    ///
    /// # Errors
    /// [`ErrorReply::SpawnFailed`] / [`ErrorReply::BadRequest`] from spawning.
    pub async fn create(&self, req: Create) -> Result<Created, ErrorReply> {
        self.create_gated(req, false)
            .await
            .map(|(created, _)| created)
    }

    /// `Open`: [`State::create`], then one more subscriber on the pane's PTY (as
    /// [`State::attach`]), both under the pane's create gate and the subscriber counted under the
    /// same book lock that found or recorded the live lease. The PTY may end right after; the
    /// returned `Arc<Pty>` still holds its output and exit for the subscription.
    ///
    /// The caller owns one attach count on the PTY: it must call [`State::detached`] when the
    /// subscription ends or is never started.
    ///
    /// # Errors
    /// As [`State::create`].
    pub async fn create_attached(&self, req: Create) -> Result<(Created, Arc<Pty>), ErrorReply> {
        let (created, pty) = self.create_gated(req, true).await?;
        pty.map(|pty| (created, pty))
            .ok_or_else(|| ErrorReply::Internal {
                message: "open: the PTY was not subscribed (agent bug); retry".into(),
            })
    }

    /// Runs [`State::create_locked`] under the pane's gate, so two creates (or opens) of one pane
    /// cannot both spawn (rule D) while other panes proceed (rule F).
    async fn create_gated(
        &self,
        req: Create,
        attach: bool,
    ) -> Result<(Created, Option<Arc<Pty>>), ErrorReply> {
        limits::check_pane(&req.pane)?;
        limits::check_spec(&req.spec)?;
        let gate = {
            let mut gates = self.inner.gates.lock().unwrap_or_else(|p| p.into_inner());
            Arc::clone(gates.entry(req.pane.clone()).or_default())
        };
        let pane = req.pane.clone();
        let held = gate.lock().await;
        let result = self.create_locked(req, attach).await;
        drop(held);
        let mut gates = self.inner.gates.lock().unwrap_or_else(|p| p.into_inner());
        // Only the map and this task hold the gate: nobody waits, forget it.
        if Arc::strong_count(&gate) == 2 {
            gates.remove(&pane);
        }
        result
    }

    /// Create with the pane gate held. With `attach`, the PTY (live one or new one) is also
    /// subscribed once, in the same book section that found or recorded it, before its waiter can
    /// record an end.
    async fn create_locked(
        &self,
        req: Create,
        attach: bool,
    ) -> Result<(Created, Option<Arc<Pty>>), ErrorReply> {
        let pty_id = {
            let mut book = self.book();
            if let Some(live) = book.table.live(&req.pane) {
                let binding = live.binding.clone();
                let pty = if attach {
                    Some(book.attach(&req.pane, Some(binding.pty))?)
                } else {
                    None
                };
                let created = Created {
                    binding,
                    existed: true,
                };
                return Ok((created, pty));
            }
            book.table.mint()
        };
        let binding = Binding {
            pane: req.pane,
            pty: pty_id,
        };
        let ring = self.inner.config.replay_bytes;
        let scrollback = self.inner.config.scrollback_lines;
        let (b, spec) = (binding.clone(), req.spec);
        let spawned = tokio::task::spawn_blocking(move || Pty::spawn(b, &spec, ring, scrollback))
            .await
            .map_err(|e| ErrorReply::Internal {
                message: format!("spawn task failed: {e}"),
            })??;
        let pty = Arc::clone(&spawned.pty);
        let mut lease = Lease::live(
            binding.clone(),
            Some(pty.pid()),
            spawned.command.clone(),
            now_ms(),
        );
        lease.size = pty.size();
        lease.start_ticks = orphan::start_ticks(pty.pid());
        let recorded = self.record_new(lease, &pty, attach);
        let subscribed = match recorded {
            Ok(subscribed) => subscribed.transpose(),
            Err(e) => {
                tracing::error!(%binding, "{e}");
                end_unrecorded(spawned).await;
                return Err(e);
            }
        };
        tracing::info!(%binding, pid = pty.pid(), "created PTY");
        let state = self.clone();
        spawned.start_waiter(self.inner.config.exit_output_grace, move |status| {
            state.on_exit(pty_id, status)
        });
        let created = Created {
            binding,
            existed: false,
        };
        Ok((created, subscribed?))
    }

    /// Records a just-spawned PTY: its lease in the table, its `Created` record in the journal,
    /// the PTY in the map, and with `attach` one subscriber (whose error, impossible while the
    /// waiter has not started, is returned inside). On an error nothing stays recorded and the
    /// caller must end the PTY.
    fn record_new(
        &self,
        lease: Lease,
        pty: &Arc<Pty>,
        attach: bool,
    ) -> Result<Option<Result<Arc<Pty>, ErrorReply>>, ErrorReply> {
        let mut book = self.book();
        let (pane, pty_id) = (lease.binding.pane.clone(), lease.binding.pty);
        // Unreachable while the pane gate holds; the caller still ends the PTY.
        book.table.insert(lease.clone())?;
        if let Err(e) = self.journal(&journal::created_record(&lease)) {
            book.table.remove(&pty_id);
            return Err(ErrorReply::SpawnFailed {
                message: format!(
                    "nothing was started: the new PTY could not be recorded in the lease journal \
                     and was ended again ({e})"
                ),
            });
        }
        book.ptys.insert(pty_id, Arc::clone(pty));
        Ok(attach.then(|| book.attach(&pane, Some(pty_id))))
    }

    /// Called by a PTY's waiter once it ended: records the end, then tells subscribers. While the
    /// daemon stops, the end reason is `AgentRestarted` (what the next incarnation reports), with
    /// the exit status left out of the journal (as for any restart) but output figures kept.
    fn on_exit(&self, pty_id: PtyId, status: ExitStatus) {
        let stopping = self.inner.stopping.load(Ordering::Acquire);
        let (pty, reason) = {
            let mut book = self.book();
            let Some(pty) = book.ptys.remove(&pty_id) else {
                return;
            };
            let (bytes, last) = (pty.end_offset(), pty.last_output_ms());
            book.table.set_output(&pty_id, bytes, last);
            let default = if stopping {
                EndReason::AgentRestarted
            } else {
                EndReason::Exited
            };
            let reason = book
                .table
                .end(&pty_id, Some(status.clone()), default.clone(), now_ms())
                .and_then(|l| l.info().reason)
                .unwrap_or(default);
            let exit = (reason != EndReason::AgentRestarted).then(|| status.clone());
            self.journal_or_log(&Record::Ended {
                pty: pty_id,
                exit,
                reason: reason.clone(),
                bytes_out: bytes,
                last_output_ms: last,
                at_ms: now_ms(),
            });
            let mut journal = self.inner.journal.lock().unwrap_or_else(|p| p.into_inner());
            if journal.needs_compaction() {
                if let Err(e) = journal.compact(&book.table) {
                    tracing::error!("could not compact the lease journal: {e}");
                }
            }
            (pty, reason)
        };
        tracing::info!(binding = %pty.binding(), %status, %reason, "PTY ended");
        pty.publish_exit(status, reason);
    }

    /// Rule C: the live PTY of exactly this binding.
    ///
    /// # Errors
    /// `NotFound`, `Ended` or `Mismatch` as [`LeaseTable::check_binding`].
    pub fn fenced(&self, binding: &Binding) -> Result<Arc<Pty>, ErrorReply> {
        let book = self.book();
        book.table.check_binding(binding)?;
        book.ptys
            .get(&binding.pty)
            .cloned()
            .ok_or_else(|| ErrorReply::Internal {
                message: format!("lease {binding} is live but its PTY is not registered"),
            })
    }

    /// Rule B: subscribes one more connection to the pane's live PTY. Never spawns.
    ///
    /// # Errors
    /// `NotFound`, `Ended` or `Mismatch` as [`LeaseTable::check_attach`].
    pub fn attach(&self, pane: &PaneKey, expect: Option<PtyId>) -> Result<Arc<Pty>, ErrorReply> {
        self.book().attach(pane, expect)
    }

    /// One connection stopped receiving `pty` (detach or connection drop). Never ends anything
    /// (rule A).
    pub fn detached(&self, pty: &PtyId) {
        self.book().table.detach(pty, now_ms());
    }

    /// Writes input to the exact binding's PTY.
    ///
    /// # Errors
    /// Fencing errors, or `LimitExceeded` when the program does not read its input.
    pub fn input(&self, req: Input) -> Result<(), ErrorReply> {
        self.fenced(&req.binding)?
            .write_input(req.data, self.inner.config.max_pending_input)
    }

    /// `InputSeq`: writes input to the exact binding's PTY once per `(writer, seq)`; a duplicate
    /// (seq not above the writer's last applied one) succeeds without writing. Fenced exactly as
    /// [`State::input`].
    ///
    /// # Errors
    /// Fencing errors, or `LimitExceeded` when the program does not read its input; the seq is
    /// not recorded then, so the same request can be retried.
    pub fn input_seq(&self, req: InputSeq) -> Result<(), ErrorReply> {
        let pty = self.fenced(&req.binding)?;
        let applied = pty.write_input_seq(
            req.writer,
            req.seq,
            req.data,
            self.inner.config.max_pending_input,
        )?;
        if let Applied::Duplicate { last } = applied {
            tracing::debug!(
                binding = %req.binding,
                writer = req.writer,
                seq = req.seq,
                last,
                "duplicate input not written"
            );
        }
        Ok(())
    }

    /// Resizes the exact binding's PTY.
    ///
    /// # Errors
    /// Fencing errors, or `BadRequest` for a zero size.
    pub fn resize(&self, req: Resize) -> Result<(), ErrorReply> {
        self.fenced(&req.binding)?.resize(req.size)?;
        self.book().table.set_size(&req.binding.pty, req.size);
        Ok(())
    }

    /// Signals the exact binding's foreground process group.
    ///
    /// # Errors
    /// Fencing errors, or `BadRequest` for an unknown signal.
    pub fn signal(&self, req: SignalReq) -> Result<(), ErrorReply> {
        self.fenced(&req.binding)?.signal(req.signal)
    }

    /// Kill: SIGHUP to the process group now, SIGKILL after the grace if still ours. The lease
    /// ends with reason `Killed` when the child is reaped.
    ///
    /// # Errors
    /// Fencing errors.
    pub fn kill(&self, req: Kill) -> Result<(), ErrorReply> {
        let mut book = self.book();
        book.table.check_binding(&req.binding)?;
        if let Some(pty) = book.ptys.get(&req.binding.pty).cloned() {
            // Marked under the book lock, which the waiter needs to end the lease, so the end is
            // recorded as Killed exactly when this SIGHUP was sent to a still unreaped child.
            if pty.kill(self.inner.config.kill_grace) {
                book.table.mark_kill(&req.binding.pty);
                tracing::info!(binding = %req.binding, "kill: SIGHUP sent");
            }
        }
        Ok(())
    }

    /// Sets the protect flag of the exact binding (journaled).
    ///
    /// # Errors
    /// Fencing errors.
    pub fn protect(&self, req: Protect) -> Result<(), ErrorReply> {
        let mut book = self.book();
        book.table.check_binding(&req.binding)?;
        book.table.set_protected(&req.binding.pty, req.protected);
        self.journal_or_log(&Record::Protect {
            pty: req.binding.pty,
            protected: req.protected,
        });
        Ok(())
    }

    /// Every lease, live figures filled in, sorted by pane key then PTY id.
    pub fn leases(&self) -> Vec<LeaseInfo> {
        let book = self.book();
        let mut out: Vec<LeaseInfo> = book
            .table
            .leases()
            .map(|l| {
                let mut info = l.info();
                if let Some(pty) = book.ptys.get(&l.binding.pty) {
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

    /// The `Status` reply.
    pub fn status(&self) -> Status {
        Status {
            agent_version: self.inner.config.advertise_version.clone(),
            incarnation: self.inner.incarnation,
            pid: std::process::id(),
            started_ms: self.inner.started_ms,
            uptime_ms: self.inner.started.elapsed().as_millis() as u64,
            leases: self.book().table.counts(),
            connections: self.inner.connections.load(Ordering::Relaxed),
        }
    }

    /// Daemon shutdown: ends every PTY (SIGHUP to each process group, SIGKILL to those still
    /// unreaped after `grace`; waits at most about twice `grace`), recording each end with reason
    /// `AgentRestarted` and its output figures, then flushes and seals the journal. A PTY that
    /// does not end in time stays unended in the journal; the next incarnation ends it.
    pub async fn shutdown(&self, grace: Duration) {
        self.inner.stopping.store(true, Ordering::Release);
        let ptys: Vec<Arc<Pty>> = self.book().ptys.values().cloned().collect();
        if !ptys.is_empty() {
            tracing::info!(count = ptys.len(), "ending PTYs because the daemon stops");
            for pty in &ptys {
                pty.signal_group_if_ours(Signal::SIGHUP);
            }
            if !wait_all_ended(&ptys, grace).await {
                for pty in &ptys {
                    if pty.signal_group_if_ours(Signal::SIGKILL) {
                        tracing::warn!(binding = %pty.binding(), "PTY ignored SIGHUP; sent SIGKILL");
                    }
                }
                wait_all_ended(&ptys, grace).await;
            }
        }
        if let Err(e) = self
            .inner
            .journal
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .seal()
        {
            tracing::error!("could not flush the lease journal: {e}");
        }
    }
}

/// Ends a spawned PTY that could not be recorded (nobody knows it): SIGHUP and SIGKILL at once,
/// and waits (bounded) until its child is reaped.
async fn end_unrecorded(spawned: Spawned) {
    let pty = Arc::clone(&spawned.pty);
    pty.kill(Duration::ZERO);
    let (tx, rx) = tokio::sync::oneshot::channel();
    spawned.start_waiter(Duration::ZERO, move |status| {
        let _ = tx.send(status);
    });
    match tokio::time::timeout(UNRECORDED_WAIT, rx).await {
        Ok(Ok(status)) => {
            tracing::info!(binding = %pty.binding(), %status, "ended the unrecorded PTY")
        }
        _ => tracing::error!(
            binding = %pty.binding(),
            pid = pty.pid(),
            "the unrecorded PTY did not end within {UNRECORDED_WAIT:?} of SIGKILL"
        ),
    }
}

/// Waits until every PTY announced its exit, at most `limit`. Returns whether all did.
async fn wait_all_ended(ptys: &[Arc<Pty>], limit: Duration) -> bool {
    let all = async {
        for pty in ptys {
            let mut rx = pty.watch();
            let _ = rx.wait_for(|p| p.exit.is_some()).await;
        }
    };
    tokio::time::timeout(limit, all).await.is_ok()
}
