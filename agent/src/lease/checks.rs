//! The lease table's rule checks (rules B and C), which read and never change it: the exact
//! lease a mutation, an attach or an end may act on, and the `Forgotten` answer for a PTY the
//! table keeps no record of.

use relay_protocol::{Binding, EndReason, ErrorReply, PaneKey, PtyId};

use super::{Lease, LeaseTable, Phase};

impl LeaseTable {
    /// Rule C: the lease a mutation may act on. The pane's live PTY must be exactly
    /// `binding.pty`.
    ///
    /// # Errors
    /// [`ErrorReply::NotFound`] for an unknown pane; [`ErrorReply::Ended`] when the named PTY
    /// ended and the pane has no live PTY; [`ErrorReply::Mismatch`] otherwise.
    pub fn check_binding(&self, binding: &Binding) -> Result<&Lease, ErrorReply> {
        let pane = &binding.pane;
        let Some(leases) = self.panes.get(pane) else {
            return Err(self
                .forgotten(pane, binding.pty)
                .unwrap_or_else(|| ErrorReply::NotFound { pane: pane.clone() }));
        };
        let live = self.live(pane);
        if let Some(live) = live.filter(|l| l.binding.pty == binding.pty) {
            return Ok(live);
        }
        if live.is_none() {
            let named = leases.iter().find(|l| l.binding.pty == binding.pty);
            if let Some(err) = named.and_then(Lease::ended_error) {
                return Err(err);
            }
            if named.is_none() {
                if let Some(err) = self.forgotten(pane, binding.pty) {
                    return Err(err);
                }
            }
        }
        Err(ErrorReply::Mismatch {
            pane: pane.clone(),
            expected: binding.pty,
            current: live.map(|l| l.binding.pty),
        })
    }

    /// Rule B: the live lease an attach may subscribe to. Never creates anything.
    ///
    /// # Errors
    /// [`ErrorReply::NotFound`] for an unknown pane; [`ErrorReply::Ended`] when the pane has no
    /// live PTY (for the expected PTY when it names an ended lease of this pane, else for the
    /// newest); [`ErrorReply::Mismatch`] when `expect` names another PTY than the live one.
    pub fn check_attach(
        &self,
        pane: &PaneKey,
        expect: Option<PtyId>,
    ) -> Result<&Lease, ErrorReply> {
        let Some(leases) = self.panes.get(pane) else {
            let forgotten = expect.and_then(|pty| self.forgotten(pane, pty));
            return Err(forgotten.unwrap_or_else(|| ErrorReply::NotFound { pane: pane.clone() }));
        };
        match (self.live(pane), expect) {
            (Some(live), None) => Ok(live),
            (Some(live), Some(want)) if live.binding.pty == want => Ok(live),
            (Some(live), Some(want)) => Err(ErrorReply::Mismatch {
                pane: pane.clone(),
                expected: want,
                current: Some(live.binding.pty),
            }),
            (None, want) => {
                let named = match want {
                    Some(w) => match leases.iter().find(|l| l.binding.pty == w) {
                        Some(l) => l.ended_error(),
                        None => self.forgotten(pane, w),
                    },
                    None => None,
                };
                let newest = leases.iter().rev().find_map(Lease::ended_error);
                Err(named.or(newest).unwrap_or_else(|| ErrorReply::Mismatch {
                    pane: pane.clone(),
                    expected: want.unwrap_or(leases[leases.len() - 1].binding.pty),
                    current: None,
                }))
            }
        }
    }

    /// The `Ended { reason: Forgotten }` answer for a PTY this table has no record of but that
    /// is known not to run here: one of an earlier incarnation (all of whose leases were ended
    /// when this one started), or one this incarnation minted whose ended lease was evicted from
    /// the bounded history or forgotten by an operator. `None` for an id this incarnation never
    /// minted.
    pub fn forgotten(&self, pane: &PaneKey, pty: PtyId) -> Option<ErrorReply> {
        let ours = pty.incarnation == self.incarnation;
        let existed = !ours || (pty.counter >= 1 && pty.counter <= self.counter);
        (existed && self.get(&pty).is_none()).then(|| ErrorReply::Ended {
            pane: pane.clone(),
            pty,
            exit: None,
            reason: EndReason::Forgotten,
        })
    }

    /// The lease an end (kill, `End`, protect) may act on: exactly `binding`, live or superseded
    /// (a superseded PTY still runs and can be ended by its id).
    ///
    /// # Errors
    /// As [`LeaseTable::check_binding`] for anything else.
    pub fn check_target(&self, binding: &Binding) -> Result<&Lease, ErrorReply> {
        match self.get(&binding.pty) {
            Some(l) if l.binding.pane == binding.pane && l.phase == Phase::Superseded => Ok(l),
            _ => self.check_binding(binding),
        }
    }
}
