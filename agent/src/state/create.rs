//! Create, open and replace: the only paths that spawn a PTY.
//!
//! A new PTY whose `Created` record cannot be journaled (disk full) is ended again and the create
//! fails with `SpawnFailed`: a PTY the journal does not know would be invisible to the next
//! incarnation (neither reported as ended nor ended as an orphan).

use std::sync::Arc;
use std::time::Duration;

use relay_protocol::message::{Create, Created, Replace};
use relay_protocol::{Binding, ErrorReply, PaneKey, SpawnSpec};

use super::{Attachment, State};
use crate::lease::counters::CounterNote;
use crate::lease::journal::{self, Record};
use crate::lease::Lease;
use crate::lifecycle::LeasePolicy;
use crate::pty::{Pty, Spawned};
use crate::runtime::LockExt;
use crate::{limits, now_ms};

/// How long ending an unrecorded PTY may take.
const UNRECORDED_WAIT: Duration = Duration::from_secs(2);

/// What a create does besides spawning.
#[derive(Clone, Copy)]
enum Mode<'a> {
    /// `Create`: the live binding or a new PTY.
    Create,
    /// `Open`: as `Create`, plus one attachment, taken in the same book section.
    Open,
    /// `Replace`: supersede exactly this live binding and spawn a new PTY.
    Replace(&'a Binding),
}

impl State {
    /// Create (rule D): the pane's live binding, or a newly spawned PTY governed by `policy`
    /// (the creating connection's stated policy; `None` = never ended by a timer).
    ///
    /// # Errors
    /// [`ErrorReply::SpawnFailed`] / [`ErrorReply::BadRequest`] from spawning.
    pub async fn create(
        &self,
        req: Create,
        policy: Option<LeasePolicy>,
    ) -> Result<Created, ErrorReply> {
        let (created, _) = self.gated(req.pane, req.spec, policy, Mode::Create).await?;
        Ok(created)
    }

    /// `Open`: [`State::create`], then one attachment to the pane's PTY, both under the pane's
    /// create gate, the attachment counted in the same book section that found or recorded the
    /// live lease. The PTY may end right after; the attachment's `Arc<Pty>` still holds its
    /// output and exit for the subscription.
    ///
    /// # Errors
    /// As [`State::create`].
    pub async fn create_attached(
        &self,
        req: Create,
        policy: Option<LeasePolicy>,
    ) -> Result<(Created, Attachment), ErrorReply> {
        let (created, attachment) = self.gated(req.pane, req.spec, policy, Mode::Open).await?;
        attachment
            .map(|a| (created, a))
            .ok_or_else(|| ErrorReply::Internal {
                message: "open: the PTY was not subscribed (agent bug); retry".into(),
            })
    }

    /// `Replace` (rule D, "restart terminal"): spawns a new PTY for the pane of `req.old` and
    /// marks the old lease superseded in the same book section; the old process is not signalled
    /// (losing a lease is no proof a shell died) and stays listed, endable by its id, and
    /// eligible for cleanup under the same re-verification.
    ///
    /// # Errors
    /// Fencing errors when `req.old` is not the pane's live binding (checked before and after
    /// the spawn; a spawned PTY is ended again then); spawn errors as [`State::create`].
    pub async fn replace(
        &self,
        req: Replace,
        policy: Option<LeasePolicy>,
    ) -> Result<Created, ErrorReply> {
        let old = req.old;
        let (created, _) = self
            .gated(old.pane.clone(), req.spec, policy, Mode::Replace(&old))
            .await?;
        Ok(created)
    }

    /// Runs [`State::create_locked`] under the pane's gate, so two creates (or opens, or
    /// replaces) of one pane cannot both spawn (rule D) while other panes proceed (rule F).
    async fn gated(
        &self,
        pane: PaneKey,
        spec: SpawnSpec,
        policy: Option<LeasePolicy>,
        mode: Mode<'_>,
    ) -> Result<(Created, Option<Attachment>), ErrorReply> {
        limits::check_pane(&pane)?;
        limits::check_spec(&spec)?;
        let gate = {
            let mut gates = self.inner.gates.lock_unpoisoned();
            Arc::clone(gates.entry(pane.clone()).or_default())
        };
        let held = gate.lock().await;
        let result = self.create_locked(pane.clone(), spec, policy, mode).await;
        drop(held);
        let mut gates = self.inner.gates.lock_unpoisoned();
        // Only the map and this task hold the gate: nobody waits, forget it.
        if Arc::strong_count(&gate) == 2 {
            gates.remove(&pane);
        }
        result
    }

    /// Create with the pane gate held.
    async fn create_locked(
        &self,
        pane: PaneKey,
        spec: SpawnSpec,
        policy: Option<LeasePolicy>,
        mode: Mode<'_>,
    ) -> Result<(Created, Option<Attachment>), ErrorReply> {
        // Checked with the pane's gate registered, which the upgrade's cut waits for.
        if self.upgrading() {
            return Err(ErrorReply::Internal {
                message: "the agent is being upgraded; nothing was started: retry in a moment"
                    .into(),
            });
        }
        let pty_id = {
            let mut book = self.book();
            match mode {
                Mode::Replace(old) => {
                    book.check_binding(old)?;
                }
                Mode::Create | Mode::Open => {
                    if let Some(live) = book.live(&pane) {
                        let binding = live.binding.clone();
                        let attachment = match mode {
                            Mode::Open => {
                                Some(self.attach_in(&mut book, &pane, Some(binding.pty))?)
                            }
                            _ => None,
                        };
                        let created = Created {
                            binding,
                            existed: true,
                        };
                        return Ok((created, attachment));
                    }
                }
            }
            book.mint()
        };
        let binding = Binding { pane, pty: pty_id };
        let explicit_command = !spec.command.is_empty();
        let (ring, scrollback) = (
            self.inner.config.replay_bytes,
            self.inner.config.scrollback_lines,
        );
        let b = binding.clone();
        let counters = Arc::new(CounterNote::new(b.pty, self.inner.counters.clone()));
        let spawned =
            tokio::task::spawn_blocking(move || Pty::spawn(b, &spec, ring, scrollback, counters))
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
        lease.start_ticks = pty.start_ticks();
        lease.policy = policy;
        lease.explicit_command = explicit_command;
        let attachment = match self.record_new(lease, &pty, mode) {
            Ok(attachment) => attachment,
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
        if let Mode::Replace(old) = mode {
            tracing::info!(old = %old, new = %binding, "superseded; the old process keeps running");
            self.arm(old.pty);
        }
        // A new PTY starts detached: its unused grace runs until someone attaches.
        if attachment.is_none() {
            self.arm(pty_id);
        }
        let created = Created {
            binding,
            existed: false,
        };
        Ok((created, attachment))
    }

    /// Records a just-spawned PTY: its `Created` record in the journal (first: a PTY the journal
    /// does not know must not run), then its lease in the table and the PTY in the map; for
    /// `Open` one attachment, for `Replace` the old lease superseded (journaled), all in one book
    /// section. On an error nothing stays recorded and the caller must end the PTY.
    fn record_new(
        &self,
        lease: Lease,
        pty: &Arc<Pty>,
        mode: Mode<'_>,
    ) -> Result<Option<Attachment>, ErrorReply> {
        let (pane, pty_id) = (lease.binding.pane.clone(), lease.binding.pty);
        let unrecorded = |e: std::io::Error| {
            let message = format!(
                "nothing was started: the new PTY could not be recorded in the lease journal and \
                 was ended again ({e})"
            );
            // The client gets it; the log too, space permitting (an error line may use the
            // space the log otherwise leaves free, and is written whole or not at all).
            tracing::error!(pane = %pane, "create refused: {message}");
            ErrorReply::SpawnFailed { message }
        };
        let mut journal = self.journal();
        let now = now_ms();
        if let Mode::Replace(old) = mode {
            // Checked again (under the journal lock nothing else journals): the spawn took time.
            self.book().check_binding(old)?;
            journal
                .append(&Record::Superseded {
                    pty: old.pty,
                    at_ms: now,
                })
                .map_err(unrecorded)?;
        }
        journal
            .append(&journal::created_record(&lease))
            .map_err(unrecorded)?;
        self.inner.ptys.insert(pty_id, Arc::clone(pty));
        let mut book = self.book();
        if let Mode::Replace(old) = mode {
            book.supersede(&old.pty, now);
            if let Some(old_pty) = self.pty(&old.pty) {
                old_pty.set_superseded();
            }
        }
        // Unreachable while the pane gate holds; the caller still ends the PTY.
        if let Err(e) = book.insert(lease) {
            self.inner.ptys.remove(&pty_id);
            return Err(e);
        }
        match mode {
            Mode::Open => self.attach_in(&mut book, &pane, Some(pty_id)).map(Some),
            Mode::Create | Mode::Replace(_) => Ok(None),
        }
    }
}

/// Ends a spawned PTY that could not be recorded (nobody knows it): SIGHUP and SIGKILL at once,
/// and waits (bounded) until its child is reaped.
async fn end_unrecorded(spawned: Spawned) {
    let pty = Arc::clone(&spawned.pty);
    let _ = pty.kill(Duration::ZERO);
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
