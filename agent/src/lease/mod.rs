//! The lease table: which pane key owns which PTY, with history.
//!
//! Sans-IO: no processes, no files, no clock (callers pass `now_ms`). It enforces
//! - rule B: attach checks never create anything ([`LeaseTable::check_attach`]);
//! - rule C: every mutation names an exact binding ([`LeaseTable::check_binding`]);
//! - rule D: a pane has at most one live lease ([`LeaseTable::insert`] refuses a second);
//!
//! and mints [`PtyId`]s `(incarnation, counter)` that are never reused. Leases of a pane are kept
//! oldest first; ended ones stay as history, bounded to the newest `max_ended`.

mod checks;
pub mod counters;
pub mod journal;

use std::collections::{BTreeMap, HashMap, VecDeque};

use relay_protocol::message::LeaseCounts;

use crate::lifecycle::LeasePolicy;
use relay_protocol::{
    Binding, EndReason, ErrorReply, ExitStatus, Incarnation, LeaseInfo, LeaseState, PaneKey, PtyId,
    TermSize, WorkspaceId,
};

/// Default number of ended leases remembered.
pub const DEFAULT_MAX_ENDED: usize = 1000;

/// Where a lease is in its life.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Phase {
    /// The PTY runs; `attached` connections receive its output.
    Live {
        /// Number of connections subscribed now.
        attached: u32,
    },
    /// A newer binding replaced this one (`Replace`, rule D); the process was not killed by
    /// that and keeps running until it exits or is ended.
    Superseded,
    /// The PTY is gone.
    Ended {
        /// Exit status, when known.
        exit: Option<ExitStatus>,
        /// Why it ended.
        reason: EndReason,
    },
}

/// One lease: the record that a pane key owns (or owned) one PTY.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// Pane and PTY.
    pub binding: Binding,
    /// Life-cycle phase.
    pub phase: Phase,
    /// Process id of the PTY's child.
    pub pid: Option<u32>,
    /// The child's start time in clock ticks since boot (field 22 of `/proc/<pid>/stat`), so a
    /// later daemon can tell the child from another process that reuses its pid.
    pub start_ticks: Option<u64>,
    /// Command line that was started.
    pub command: Vec<String>,
    /// Current terminal size.
    pub size: TermSize,
    /// Exempt from lifecycle expiry.
    pub protected: bool,
    /// An end was requested (kill, `End`, the policy): the reason and detail the lease records
    /// when the process is reaped.
    pub ending: Option<(EndReason, String)>,
    /// The policy it was created under; `None` = never ended by a timer.
    pub policy: Option<LeasePolicy>,
    /// Started with an explicit command (a PTY given work counts as used).
    pub explicit_command: bool,
    /// Detail of the end (`policy: never used, detached 10m`, `killed by operator; SIGHUP`).
    pub detail: Option<String>,
    /// A requested end finished its sweep of the PTY's session (recorded by a `Detail` record);
    /// a killed lease without it may have left processes that the next daemon sweeps.
    pub end_confirmed: bool,
    /// When the PTY was created (ms since the Unix epoch).
    pub created_ms: u64,
    /// When the lease entered its current state (ms since the Unix epoch).
    pub since_ms: u64,
    /// Output bytes at the end (live leases take this from the PTY).
    pub bytes_out: u64,
    /// Last output time at the end (live leases take this from the PTY).
    pub last_output_ms: Option<u64>,
}

impl Lease {
    /// A live, detached lease.
    pub fn live(binding: Binding, pid: Option<u32>, command: Vec<String>, now_ms: u64) -> Self {
        Lease {
            binding,
            phase: Phase::Live { attached: 0 },
            pid,
            start_ticks: None,
            command,
            size: TermSize::default(),
            protected: false,
            ending: None,
            policy: None,
            explicit_command: false,
            detail: None,
            end_confirmed: false,
            created_ms: now_ms,
            since_ms: now_ms,
            bytes_out: 0,
            last_output_ms: None,
        }
    }

    /// Whether the PTY is still bound to its pane and running.
    pub fn is_live(&self) -> bool {
        matches!(self.phase, Phase::Live { .. })
    }

    /// The protocol's view of the state.
    pub fn state(&self) -> LeaseState {
        match self.phase {
            Phase::Live { attached: 0 } => LeaseState::Detached,
            Phase::Live { .. } => LeaseState::Attached,
            Phase::Superseded => LeaseState::Superseded,
            Phase::Ended { .. } => LeaseState::Ended,
        }
    }

    /// The `Ended` refusal for this lease, if it ended.
    pub fn ended_error(&self) -> Option<ErrorReply> {
        match &self.phase {
            Phase::Ended { exit, reason } => Some(ErrorReply::Ended {
                pane: self.binding.pane.clone(),
                pty: self.binding.pty,
                exit: exit.clone(),
                reason: reason.clone(),
            }),
            _ => None,
        }
    }

    /// The row `ListLeases` reports.
    pub fn info(&self) -> LeaseInfo {
        let (exit, reason) = match &self.phase {
            Phase::Ended { exit, reason } => (exit.clone(), Some(reason.clone())),
            _ => (None, None),
        };
        LeaseInfo {
            binding: self.binding.clone(),
            state: self.state(),
            pid: self.pid,
            since_ms: self.since_ms,
            last_output_ms: self.last_output_ms,
            bytes_out: self.bytes_out,
            command: self.command.clone(),
            exit,
            reason,
            protected: self.protected,
            attached: match self.phase {
                Phase::Live { attached } => attached,
                _ => 0,
            },
            size: self.size,
        }
    }
}

/// All leases of this agent, by pane.
#[derive(Debug, Clone)]
pub struct LeaseTable {
    incarnation: Incarnation,
    counter: u64,
    panes: BTreeMap<PaneKey, Vec<Lease>>,
    index: HashMap<PtyId, PaneKey>,
    ended_order: VecDeque<PtyId>,
    max_ended: usize,
}

impl LeaseTable {
    /// An empty table minting PTY ids of `incarnation`, remembering at most `max_ended` ended
    /// leases.
    pub fn new(incarnation: Incarnation, max_ended: usize) -> Self {
        LeaseTable {
            incarnation,
            counter: 0,
            panes: BTreeMap::new(),
            index: HashMap::new(),
            ended_order: VecDeque::new(),
            max_ended,
        }
    }

    /// This table's incarnation.
    pub fn incarnation(&self) -> Incarnation {
        self.incarnation
    }

    /// A fresh PTY id; never returned twice by this table.
    pub fn mint(&mut self) -> PtyId {
        self.counter += 1;
        PtyId {
            incarnation: self.incarnation,
            counter: self.counter,
        }
    }

    /// The highest counter [`LeaseTable::mint`] has given out (0: none yet).
    pub fn last_minted(&self) -> u64 {
        self.counter
    }

    /// Never mints up to `counter` again (handed over by a live upgrade: see `AddedIn2`).
    pub fn minted_through(&mut self, counter: u64) {
        self.counter = self.counter.max(counter);
    }

    /// The pane's live lease, if any.
    pub fn live(&self, pane: &PaneKey) -> Option<&Lease> {
        self.panes.get(pane)?.iter().rev().find(|l| l.is_live())
    }

    /// The lease of `pty`.
    pub fn get(&self, pty: &PtyId) -> Option<&Lease> {
        let pane = self.index.get(pty)?;
        self.panes.get(pane)?.iter().find(|l| l.binding.pty == *pty)
    }

    fn get_mut(&mut self, pty: &PtyId) -> Option<&mut Lease> {
        let pane = self.index.get(pty)?;
        self.panes
            .get_mut(pane)?
            .iter_mut()
            .find(|l| l.binding.pty == *pty)
    }

    /// Adds a lease (a new PTY, or one replayed from the journal).
    ///
    /// # Errors
    /// Refuses (rule D) when the lease is live and the pane already has a live lease, or when the
    /// PTY id is already recorded; nothing changes then.
    pub fn insert(&mut self, lease: Lease) -> Result<(), ErrorReply> {
        let pty = lease.binding.pty;
        if self.index.contains_key(&pty) {
            let message = format!("PTY {pty} is already recorded");
            return Err(ErrorReply::Internal { message });
        }
        if lease.is_live() {
            if let Some(live) = self.live(&lease.binding.pane) {
                return Err(ErrorReply::Internal {
                    message: format!(
                        "pane {} already has live PTY {}",
                        live.binding.pane, live.binding.pty
                    ),
                });
            }
        }
        let ended = matches!(lease.phase, Phase::Ended { .. });
        // A lease of this incarnation replayed after a live upgrade: never mint its id again.
        if pty.incarnation == self.incarnation {
            self.counter = self.counter.max(pty.counter);
        }
        self.index.insert(pty, lease.binding.pane.clone());
        self.panes
            .entry(lease.binding.pane.clone())
            .or_default()
            .push(lease);
        if ended {
            self.note_ended(pty);
        }
        Ok(())
    }

    /// Sets when `pty`'s lease entered its current state (a detach time a live upgrade carried:
    /// detaches are not journaled). Unknown PTYs are ignored.
    pub fn restore_since(&mut self, pty: &PtyId, since_ms: u64) {
        if let Some(lease) = self.get_mut(pty) {
            lease.since_ms = since_ms;
        }
    }

    /// Forgets a lease entirely (no history), e.g. a PTY whose creation could not be journaled and
    /// was ended again. Returns it, or `None` for an unknown PTY.
    pub fn remove(&mut self, pty: &PtyId) -> Option<Lease> {
        let pane = self.index.remove(pty)?;
        let leases = self.panes.get_mut(&pane)?;
        let at = leases.iter().position(|l| l.binding.pty == *pty)?;
        let lease = leases.remove(at);
        if leases.is_empty() {
            self.panes.remove(&pane);
        }
        self.ended_order.retain(|p| p != pty);
        Some(lease)
    }

    /// Notes that an end was requested: when `pty` is reaped its lease records `reason` and
    /// `detail` (the first request wins). Returns false when it is not running.
    pub fn mark_ending(&mut self, pty: &PtyId, reason: EndReason, detail: String) -> bool {
        match self.get_mut(pty) {
            Some(l) if !matches!(l.phase, Phase::Ended { .. }) => {
                l.ending.get_or_insert((reason, detail));
                true
            }
            _ => false,
        }
    }

    /// Takes back a requested end that was not carried out. Returns false for an unknown PTY.
    pub fn cancel_ending(&mut self, pty: &PtyId) -> bool {
        self.get_mut(pty).map(|l| l.ending = None).is_some()
    }

    /// Sets the detail of an ended lease (what its end did and left).
    pub fn set_detail(&mut self, pty: &PtyId, detail: String) {
        if let Some(l) = self.get_mut(pty) {
            l.detail = Some(detail);
        }
    }

    /// Notes that a requested end of `pty` finished (its session was swept). Returns false for
    /// an unknown PTY.
    pub fn confirm_end(&mut self, pty: &PtyId) -> bool {
        self.get_mut(pty).map(|l| l.end_confirmed = true).is_some()
    }

    /// Ended leases of earlier incarnations whose requested end (kill, policy) never finished
    /// its sweep: their daemon died in between, so processes of their sessions may be left.
    pub fn unswept(&self) -> impl Iterator<Item = &Lease> {
        self.leases().filter(|l| {
            l.binding.pty.incarnation != self.incarnation
                && !l.end_confirmed
                && matches!(
                    &l.phase,
                    Phase::Ended {
                        reason: EndReason::Killed | EndReason::Expired,
                        ..
                    }
                )
        })
    }

    /// Forgets ended leases: `ptys`, or every ended one when empty. Returns the forgotten ones;
    /// live and superseded leases are never forgotten.
    pub fn forget(&mut self, ptys: &[PtyId]) -> Vec<PtyId> {
        let ended: Vec<PtyId> = self
            .leases()
            .filter(|l| matches!(l.phase, Phase::Ended { .. }))
            .map(|l| l.binding.pty)
            .filter(|p| ptys.is_empty() || ptys.contains(p))
            .collect();
        for pty in &ended {
            self.remove(pty);
        }
        ended
    }

    /// One more connection subscribed to `pty`. Returns false when it is not live.
    pub fn attach(&mut self, pty: &PtyId, now_ms: u64) -> bool {
        let Some(lease) = self.get_mut(pty) else {
            return false;
        };
        let Phase::Live { attached } = &mut lease.phase else {
            return false;
        };
        *attached += 1;
        if *attached == 1 {
            lease.since_ms = now_ms;
        }
        true
    }

    /// One connection unsubscribed from `pty` (detach or connection drop; rule A: nothing ends).
    pub fn detach(&mut self, pty: &PtyId, now_ms: u64) {
        if let Some(lease) = self.get_mut(pty) {
            if let Phase::Live { attached } = &mut lease.phase {
                if *attached > 0 {
                    *attached -= 1;
                    if *attached == 0 {
                        lease.since_ms = now_ms;
                    }
                }
            }
        }
    }

    /// Marks a live lease superseded (the pane no longer counts it as its PTY). Returns false
    /// when it was not live.
    pub fn supersede(&mut self, pty: &PtyId, now_ms: u64) -> bool {
        match self.get_mut(pty) {
            Some(lease) if lease.is_live() => {
                lease.phase = Phase::Superseded;
                lease.since_ms = now_ms;
                true
            }
            _ => false,
        }
    }

    /// Records that `pty` ended. The reason and detail are those of a requested end
    /// ([`LeaseTable::mark_ending`]) if any, else `reason`. An already ended lease keeps its first
    /// record. Returns the ended lease.
    pub fn end(
        &mut self,
        pty: &PtyId,
        exit: Option<ExitStatus>,
        reason: EndReason,
        now_ms: u64,
    ) -> Option<&Lease> {
        let lease = self.get_mut(pty)?;
        if matches!(lease.phase, Phase::Ended { .. }) {
            return self.get(pty);
        }
        let reason = match lease.ending.take() {
            Some((reason, detail)) => {
                lease.detail = Some(detail);
                reason
            }
            None => reason,
        };
        lease.phase = Phase::Ended { exit, reason };
        lease.since_ms = now_ms;
        self.note_ended(*pty);
        self.get(pty)
    }

    /// Sets the activity figures of a lease (bytes, last output), e.g. when it ends.
    pub fn set_output(&mut self, pty: &PtyId, bytes_out: u64, last_output_ms: Option<u64>) {
        if let Some(lease) = self.get_mut(pty) {
            lease.bytes_out = bytes_out;
            lease.last_output_ms = last_output_ms;
        }
    }

    /// Sets the size recorded on the lease.
    pub fn set_size(&mut self, pty: &PtyId, size: TermSize) {
        if let Some(lease) = self.get_mut(pty) {
            lease.size = size;
        }
    }

    /// Sets the protect flag. Returns false for an unknown PTY.
    pub fn set_protected(&mut self, pty: &PtyId, protected: bool) -> bool {
        self.get_mut(pty).map(|l| l.protected = protected).is_some()
    }

    /// Leases of another incarnation that have no end: their daemon is gone, so nothing can reach
    /// their PTYs any more (the caller ends processes that outlived it before ending these).
    pub fn stale(&self) -> impl Iterator<Item = &Lease> {
        self.leases().filter(|l| {
            l.binding.pty.incarnation != self.incarnation && !matches!(l.phase, Phase::Ended { .. })
        })
    }

    /// Ends every [`LeaseTable::stale`] lease with [`EndReason::AgentRestarted`] (exit unknown).
    /// Returns them.
    pub fn end_previous_incarnations(&mut self, now_ms: u64) -> Vec<PtyId> {
        let stale: Vec<PtyId> = self.stale().map(|l| l.binding.pty).collect();
        for pty in &stale {
            self.end(pty, None, EndReason::AgentRestarted, now_ms);
        }
        stale
    }

    /// Every lease, sorted by pane key, then oldest first.
    pub fn leases(&self) -> impl Iterator<Item = &Lease> {
        self.panes.values().flatten()
    }

    /// The leases of `workspace`'s pane keys, in the order of [`LeaseTable::leases`]. Found by
    /// range (pane keys order by workspace first): the other workspaces' leases are not visited.
    pub fn workspace_leases<'a>(
        &'a self,
        workspace: &'a WorkspaceId,
    ) -> impl Iterator<Item = &'a Lease> + 'a {
        let first = PaneKey {
            workspace: workspace.clone(),
            tab: String::new(),
            leaf: String::new(),
        };
        self.panes
            .range(first..)
            .take_while(move |(key, _)| key.workspace == *workspace)
            .flat_map(|(_, leases)| leases)
    }

    /// Lease counts by state.
    pub fn counts(&self) -> LeaseCounts {
        let mut c = LeaseCounts::default();
        for l in self.leases() {
            match l.state() {
                LeaseState::Attached => c.attached += 1,
                LeaseState::Detached => c.detached += 1,
                LeaseState::Ended => c.ended += 1,
                LeaseState::Superseded => c.superseded += 1,
            }
        }
        c
    }

    /// Remembers the end order and forgets the oldest ended leases beyond the bound.
    fn note_ended(&mut self, pty: PtyId) {
        self.ended_order.push_back(pty);
        while self.ended_order.len() > self.max_ended {
            let Some(old) = self.ended_order.pop_front() else {
                break;
            };
            if let Some(pane) = self.index.remove(&old) {
                if let Some(leases) = self.panes.get_mut(&pane) {
                    leases.retain(|l| l.binding.pty != old);
                    if leases.is_empty() {
                        self.panes.remove(&pane);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
