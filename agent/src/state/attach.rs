//! Attachments and the fenced per-PTY operations (input, resize, signal, protect).
//!
//! An [`Attachment`] is the count of one subscriber on a PTY's lease: taken under the book lock
//! by attach/open, given back when it drops, so "attached / detached since" stays exact however
//! a subscription ends (detach, re-attach, connection drop, a refused resume).

use std::sync::Arc;

use relay_protocol::message::{Input, InputSeq, Protect, Resize, Signal as SignalReq};
use relay_protocol::{Binding, EndReason, ErrorReply, LeaseState, PaneKey, PtyId};

use super::State;
use crate::lease::journal::Record;
use crate::lease::LeaseTable;
use crate::now_ms;
use crate::pty::input_seq::Applied;
use crate::pty::Pty;
use crate::runtime::LockExt;

/// One subscriber's count on a PTY's lease; dropping it detaches (rule A: never ends anything)
/// and, when it was the last, arms the lease's lifecycle timer.
pub struct Attachment {
    state: State,
    pty: Arc<Pty>,
}

impl Attachment {
    /// The PTY attached to.
    pub fn pty(&self) -> &Arc<Pty> {
        &self.pty
    }
}

impl Drop for Attachment {
    fn drop(&mut self) {
        self.state.detached(&self.pty.binding().pty);
    }
}

impl State {
    /// Counts one more subscriber on the pane's live PTY (the `expect` one, if given), in the
    /// caller's book section. Shared by attach and open.
    pub(super) fn attach_in(
        &self,
        book: &mut LeaseTable,
        pane: &PaneKey,
        expect: Option<PtyId>,
    ) -> Result<Attachment, ErrorReply> {
        let pty_id = book.check_attach(pane, expect)?.binding.pty;
        let pty = self.pty(&pty_id).ok_or_else(|| ErrorReply::Internal {
            message: format!("lease {pane}@{pty_id} is live but its PTY is not registered"),
        })?;
        book.attach(&pty_id, now_ms());
        self.inner.timers.clear(&pty_id);
        Ok(Attachment {
            state: self.clone(),
            pty,
        })
    }

    /// Rule B: one more subscriber on the pane's live PTY. Never spawns.
    ///
    /// # Errors
    /// `NotFound`, `Ended` or `Mismatch` as [`LeaseTable::check_attach`].
    pub fn attach(&self, pane: &PaneKey, expect: Option<PtyId>) -> Result<Attachment, ErrorReply> {
        self.attach_in(&mut self.book(), pane, expect)
    }

    /// Rule E after an absence: `refusal` is what [`State::attach`] answered for `pane` with
    /// `expect`; when it is `Ended` for exactly the `expect` PTY (not forgotten), and that PTY's
    /// output from `from` on is still kept ([`tails`](super::tails)), an attachment to the ended
    /// PTY, whose subscription sends that output and then `Exited`. Otherwise `refusal`.
    ///
    /// # Errors
    /// `refusal`, when no tail serves.
    pub fn attach_ended(
        &self,
        expect: Option<PtyId>,
        from: Option<u64>,
        refusal: ErrorReply,
    ) -> Result<Attachment, ErrorReply> {
        let ErrorReply::Ended { pty, reason, .. } = &refusal else {
            return Err(refusal);
        };
        let (Some(want), Some(from)) = (expect, from) else {
            return Err(refusal);
        };
        if *pty != want || *reason == EndReason::Forgotten {
            return Err(refusal);
        }
        let kept = self.inner.tails.lock_unpoisoned().get(&want);
        match kept {
            Some(pty) if from < pty.end_offset() => Ok(Attachment {
                state: self.clone(),
                pty,
            }),
            _ => Err(refusal),
        }
    }

    /// One subscriber stopped (see [`Attachment`]).
    fn detached(&self, pty: &PtyId) {
        let now_detached = {
            let mut book = self.book();
            book.detach(pty, now_ms());
            book.get(pty)
                .is_some_and(|l| l.state() == LeaseState::Detached)
        };
        if now_detached {
            self.journal_counters(pty);
            self.arm(*pty);
        }
    }

    /// Rule C: the live PTY of exactly this binding. The hot path (input, resize) finds it in
    /// the concurrent map without the book lock; only a refusal reads the book for its reason.
    ///
    /// # Errors
    /// `NotFound`, `Ended` or `Mismatch` as [`LeaseTable::check_binding`].
    pub fn fenced(&self, binding: &Binding) -> Result<Arc<Pty>, ErrorReply> {
        if let Some(pty) = self.pty(&binding.pty) {
            if pty.binding() == binding && !pty.is_superseded() {
                return Ok(pty);
            }
        }
        self.book().check_binding(binding)?;
        Err(ErrorReply::Internal {
            message: format!("lease {binding} is live but its PTY is not registered; retry"),
        })
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
        self.book().set_size(&req.binding.pty, req.size);
        Ok(())
    }

    /// Signals the exact binding's foreground process group.
    ///
    /// # Errors
    /// Fencing errors, or `BadRequest` for an unknown signal.
    pub fn signal(&self, req: SignalReq) -> Result<(), ErrorReply> {
        self.fenced(&req.binding)?.signal(req.signal)
    }

    /// Sets the protect flag of the exact binding (live or superseded), journaled first; re-arms
    /// or clears its lifecycle timer.
    ///
    /// # Errors
    /// Fencing errors; `Internal` naming the journal problem when it cannot be recorded (the
    /// flag is then unchanged).
    pub fn protect(&self, req: Protect) -> Result<(), ErrorReply> {
        let mut journal = self.journal();
        self.book().check_target(&req.binding)?;
        journal
            .append(&Record::Protect {
                pty: req.binding.pty,
                protected: req.protected,
            })
            .map_err(|e| ErrorReply::Internal {
                message: format!("protect not changed: could not record it ({e})"),
            })?;
        self.book().set_protected(&req.binding.pty, req.protected);
        drop(journal);
        self.arm(req.binding.pty);
        Ok(())
    }
}
