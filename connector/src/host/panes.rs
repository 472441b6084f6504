//! The panes a [`Host`](super::Host) keeps across connections: one [`PaneSlot`] per PTY, the
//! registry that ties them to the live connection, the link their handles talk back through, and
//! the re-attach of one slot after a reconnect.
//!
//! Architecture invariant: nothing here creates. A re-attach is an `Attach` with
//! `expect = the slot's PTY` (rule B); its answers decide the slot's fate: `Attached` resumes
//! the stream, `Ended` and `Mismatch` end it (proofs from the agent), anything else leaves the
//! slot waiting for the next connection (rule A: unknown is not dead).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use relay_protocol::{Binding, ErrorReply, PaneKey, PtyId, Request, Resume, SpawnSpec, TermSize};
use tokio::sync::watch;

use crate::pane::{PaneLink, PaneSink};
use crate::session::{attached_of, legacy_resume, Route, RouteStart};
use crate::sync::LockExt;
use crate::{Error, PaneEvent, Session};

/// The live connection and its generation (a counter of connections of this host).
#[derive(Clone)]
pub(crate) struct Live {
    pub(crate) generation: u64,
    pub(crate) session: Session,
}

/// Where a slot stands with respect to the connection.
#[derive(Clone)]
pub(crate) enum SlotLink {
    /// Attached on this live connection: requests for the pane may go there.
    Attached(Live),
    /// Not attached: waiting for the next connection (or the next pass) to re-attach it.
    Waiting,
    /// A re-attach is in flight on the connection of this generation (so another pass does not
    /// send a second one).
    Reattaching(u64),
    /// The pane's stream has ended (exited, ended, mismatch) or its handle let go.
    Gone(String),
}

/// How a pane's output is asked for, at first and on every re-attach.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Delivery {
    /// For a terminal: what the agent no longer holds comes back as the screen (a snapshot).
    Screen,
    /// Every byte in order: the agent holds the PTY back instead (`AttachLossless`).
    Lossless,
}

impl Delivery {
    /// The attach request for this delivery and the agent behind `session`; a lossless one
    /// resumes from `resume`'s offset (`Now`: the end; `Snapshot`: the oldest byte held).
    pub(crate) fn attach_request(
        self,
        session: &Session,
        pane: PaneKey,
        expect: Option<PtyId>,
        resume: Resume,
        events_after: u64,
    ) -> Request {
        match self {
            Delivery::Screen => session.attach_request(pane, expect, resume, events_after),
            Delivery::Lossless => {
                session.lossless_attach_request(pane, expect, legacy_resume(resume))
            }
        }
    }

    /// The open request for this delivery, `None` when the agent cannot open in one step
    /// (create, then attach).
    pub(crate) fn open_request(
        self,
        session: &Session,
        pane: PaneKey,
        spec: SpawnSpec,
        resume: Resume,
    ) -> Option<Request> {
        match self {
            Delivery::Screen => session.open_request(pane, spec, resume, 0),
            Delivery::Lossless => session.lossless_open_request(pane, spec, legacy_resume(resume)),
        }
    }
}

/// One pane of the host: its binding, its queue, and its link to the connection.
pub(crate) struct PaneSlot {
    pub(crate) binding: Binding,
    pub(crate) sink: Arc<PaneSink>,
    delivery: Delivery,
    link: watch::Sender<SlotLink>,
    /// The size the app asked for last; applied again after a re-attach when it differs.
    size: Mutex<Option<TermSize>>,
}

impl PaneSlot {
    /// A slot attached on `live`.
    pub(crate) fn new(
        binding: Binding,
        sink: Arc<PaneSink>,
        live: Live,
        delivery: Delivery,
    ) -> Arc<PaneSlot> {
        Arc::new(PaneSlot {
            binding,
            sink,
            delivery,
            link: watch::Sender::new(SlotLink::Attached(live)),
            size: Mutex::new(None),
        })
    }

    /// The slot's link now.
    pub(crate) fn link(&self) -> SlotLink {
        self.link.borrow().clone()
    }

    /// Watches the slot's link.
    pub(crate) fn watch(&self) -> watch::Receiver<SlotLink> {
        self.link.subscribe()
    }

    /// Waits until the slot is attached on a connection newer than generation `after` (use 0
    /// for any), and returns it.
    ///
    /// # Errors
    /// [`Error::PaneGone`] when the pane's stream ended meanwhile.
    pub(crate) async fn attached_after(&self, after: u64) -> Result<Live, Error> {
        let mut rx = self.watch();
        loop {
            match &*rx.borrow_and_update() {
                SlotLink::Attached(live) if live.generation > after => return Ok(live.clone()),
                SlotLink::Gone(why) => {
                    return Err(Error::PaneGone(format!("pane {}: {why}", self.binding)))
                }
                _ => {}
            }
            if rx.changed().await.is_err() {
                return Err(Error::PaneGone(format!("pane {}: released", self.binding)));
            }
        }
    }

    /// Remembers the size the app wants.
    pub(crate) fn want_size(&self, size: TermSize) {
        *self.size.lock_unpoisoned() = Some(size);
    }

    fn wanted_size(&self) -> Option<TermSize> {
        *self.size.lock_unpoisoned()
    }

    fn set_link(&self, link: SlotLink) {
        self.link.send_replace(link);
    }

    /// Ends the slot's stream with `event` (a final one) and marks it gone.
    fn finish(&self, event: PaneEvent, why: String) {
        self.sink.event(event);
        self.set_link(SlotLink::Gone(why));
    }
}

/// The host's panes and the live connection, under one lock so that a connection switch and a
/// pane registration never interleave.
#[derive(Default)]
pub(crate) struct Registry {
    pub(crate) live: Option<Live>,
    pub(crate) slots: HashMap<PtyId, Arc<PaneSlot>>,
    /// Why the last connection ended (told to a pane registered just after it ended).
    pub(crate) last_loss: String,
}

impl Registry {
    /// Installs a new live connection. Returns the slots to re-attach on it.
    pub(crate) fn connected(&mut self, live: Live) -> Vec<Arc<PaneSlot>> {
        self.live = Some(live);
        self.pending()
    }

    /// The slots that wait for the live connection, marked as being re-attached on it (each is
    /// handed out once per connection, however many passes ask).
    pub(crate) fn pending(&mut self) -> Vec<Arc<PaneSlot>> {
        self.slots.retain(|_, s| !s.sink.is_finished());
        let Some(live) = &self.live else {
            return Vec::new();
        };
        let generation = live.generation;
        let due: Vec<Arc<PaneSlot>> = self
            .slots
            .values()
            .filter(|s| match s.link() {
                SlotLink::Attached(l) => l.generation != generation,
                SlotLink::Reattaching(g) => g != generation,
                SlotLink::Waiting => true,
                SlotLink::Gone(_) => false,
            })
            .cloned()
            .collect();
        for slot in &due {
            slot.set_link(SlotLink::Reattaching(generation));
        }
        due
    }

    /// Whether `slot` is still the registered slot of its PTY (not taken over or released).
    fn holds(&self, slot: &Arc<PaneSlot>) -> bool {
        self.slots
            .get(&slot.binding.pty)
            .is_some_and(|s| Arc::ptr_eq(s, slot))
    }

    /// The live connection ended with `reason`: every attached slot waits for the next one and
    /// its stream says so (rule A: the stream does not end).
    pub(crate) fn lost(&mut self, reason: &str) {
        if self.live.take().is_none() {
            return;
        }
        self.last_loss = reason.to_string();
        for slot in self.slots.values() {
            match slot.link() {
                SlotLink::Attached(_) => {
                    slot.set_link(SlotLink::Waiting);
                    slot.sink.event(PaneEvent::Interrupted {
                        reason: reason.to_string(),
                    });
                }
                // Its stream was told at the previous loss.
                SlotLink::Reattaching(_) => slot.set_link(SlotLink::Waiting),
                SlotLink::Waiting | SlotLink::Gone(_) => {}
            }
        }
    }

    /// The host is closed for good: every pane's stream ends with
    /// [`PaneEvent::Disconnected`] (nothing on the host ends).
    pub(crate) fn close(&mut self, reason: &str) {
        self.live = None;
        for (_, slot) in self.slots.drain() {
            slot.finish(
                PaneEvent::Disconnected {
                    reason: reason.to_string(),
                },
                reason.to_string(),
            );
        }
    }

    /// Adds a slot attached on `slot`'s connection. A slot of the same PTY is taken over (its
    /// stream ends). Returns whether the slot must be re-attached because its connection
    /// already ended.
    pub(crate) fn register(&mut self, slot: Arc<PaneSlot>) -> bool {
        let pty = slot.binding.pty;
        let stale = match (slot.link(), &self.live) {
            (SlotLink::Attached(l), Some(live)) => l.generation != live.generation,
            _ => true,
        };
        if stale {
            slot.set_link(SlotLink::Waiting);
            slot.sink.event(PaneEvent::Interrupted {
                reason: self.last_loss.clone(),
            });
        }
        if let Some(old) = self.slots.insert(pty, slot) {
            old.set_link(SlotLink::Gone("taken over by a newer attach".into()));
        }
        stale
    }

    /// Removes the slot of `pty` if it still has the queue `sink_id`.
    pub(crate) fn remove(&mut self, pty: PtyId, sink_id: u64) -> Option<Arc<PaneSlot>> {
        if self.slots.get(&pty).is_some_and(|s| s.sink.id == sink_id) {
            self.slots.remove(&pty)
        } else {
            None
        }
    }
}

/// Re-attaches one slot on `live` (never creates: `expect` is the slot's PTY) and settles its
/// fate from the answer. `registry` is consulted so a connection that ended meanwhile is not
/// recorded as the slot's.
pub(crate) async fn reattach(registry: &Mutex<Registry>, slot: Arc<PaneSlot>, live: Live) {
    let lock = || registry.lock_unpoisoned();
    let Some(resume_from) = slot.sink.resume_point() else {
        return;
    };
    if !lock().holds(&slot) {
        return;
    }
    let session = &live.session;
    // A screen pane (with the `screen` capability) gets what the agent no longer holds as a
    // snapshot, and only events its stream has not delivered yet; a lossless one is held from
    // the next byte the app needs (the agent kept the hold while we were away).
    let req = slot.delivery.attach_request(
        session,
        slot.binding.pane.clone(),
        Some(slot.binding.pty),
        Resume::From(resume_from),
        slot.sink.last_event_key(),
    );
    let route = Route::host(
        slot.sink.clone(),
        RouteStart::Resume {
            cap: session.queue_cap(),
        },
    );
    let result = session.subscribe_route(req, route).await;
    let binding = &slot.binding;
    // Settles the slot only if it is still the pane's and still being re-attached on `live`
    // (not taken over by a newer attach, released, or overtaken by another connection).
    let settle = |link: SlotLink| {
        let reg = lock();
        let ours = reg.holds(&slot)
            && matches!(slot.link(), SlotLink::Reattaching(g) if g == live.generation)
            && reg
                .live
                .as_ref()
                .is_some_and(|l| l.generation == live.generation);
        if ours {
            slot.set_link(link);
        }
        ours
    };
    match result.as_ref().map(attached_of) {
        Ok(Some((attached, _))) => {
            if !settle(SlotLink::Attached(live.clone())) {
                return;
            }
            tracing::debug!(%binding, from = attached.replay_from, "re-attached");
            if let Some(size) = slot.wanted_size().filter(|s| *s != attached.size) {
                let _ = session.resize(binding, size).await;
            }
        }
        Ok(None) => {
            tracing::warn!(%binding, "unexpected re-attach reply");
            settle(SlotLink::Waiting);
        }
        Err(e) => match e.agent_reply() {
            Some(ErrorReply::Ended { exit, reason, .. }) => {
                tracing::info!(%binding, %reason, "the pane's PTY ended while detached");
                slot.finish(
                    PaneEvent::Ended {
                        reason: reason.clone(),
                        exit: exit.clone(),
                    },
                    format!("ended ({reason})"),
                );
            }
            Some(ErrorReply::Mismatch { current, .. }) => {
                tracing::info!(%binding, ?current, "the pane has another PTY now");
                slot.finish(
                    PaneEvent::Mismatch { current: *current },
                    "the pane has another PTY now".into(),
                );
            }
            // The connection went down during the re-attach: the next one tries again.
            _ if e.is_connection_lost() => {
                settle(SlotLink::Waiting);
            }
            _ => {
                tracing::info!(%binding, error = %e.report(), "re-attach unresolved; kept for the next connection");
                if settle(SlotLink::Waiting) {
                    slot.sink
                        .event(PaneEvent::Unresolved { reason: e.report() });
                }
            }
        },
    }
}

/// The link of a pane held by a [`Host`](super::Host): acks go to whatever connection the pane
/// is attached on now; release forgets the pane and detaches it.
pub(crate) struct HostLink {
    pub(crate) inner: Arc<super::HostInner>,
    pub(crate) pty: PtyId,
    pub(crate) sink_id: u64,
    /// Keeps the supervisor running while the app holds a pane.
    pub(crate) _keep: Arc<super::KeepRunning>,
}

impl PaneLink for HostLink {
    fn ack(&self, pty: PtyId, offset: u64) {
        let slot = self.inner.slot(pty);
        if let Some(SlotLink::Attached(live)) = slot.map(|s| s.link()) {
            live.session.ack(pty, offset);
        }
    }

    fn release(&self) {
        let removed = self.inner.registry().remove(self.pty, self.sink_id);
        if let Some(slot) = removed {
            if let SlotLink::Attached(live) = slot.link() {
                live.session.release(&slot.binding, self.sink_id);
            }
            slot.set_link(SlotLink::Gone("the pane's handle was dropped".into()));
        }
    }
}
