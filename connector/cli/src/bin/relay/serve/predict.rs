//! Prediction overlays for the app's own renderer: a pane opened or attached with `predict`
//! gets the library's engine ([`relay_connector::predict`]), the same one `relay shell` draws
//! with, and `pane.predict` notifications saying which cells to draw on top of the real screen
//! and which to show as they are again (docs/embedding.md, "Typing on a slow link").
//!
//! One task per such pane owns its [`Predictor`]. It is fed, in one ordered queue, everything
//! that changes the app's screen or the pane's keys: the pump's output, snapshots and gaps
//! (each after the notification that carried it, so a `pane.predict` never refers to output the
//! app has not been sent), the app's `pane.input` and `pane.resize`; and round trips from the
//! host's pinger ([`relay_connector::Host::round_trips`], one per host). It sends a
//! `pane.predict` whenever the overlay changes.
//!
//! The engine's model must show what the app's terminal shows, so its stream has to start from
//! a screen the sidecar knows: a new pane's first byte, or a snapshot. `pane.attach` with
//! `resume_from` continues a screen only the app has: `predict` is refused there.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use relay_connector::predict::{Overlay, PredictMode, Predictor};
use relay_connector::{LockExt, PaneEvent, RoundTrips};
use relay_protocol::TermSize;
use serde_json::{json, Value};
use tokio::sync::mpsc;

use super::params::Params;
use super::rpc::{Out, RpcError};

/// The largest side (columns or rows) the engine's model takes: the agent's own limit
/// (`MAX_COLS`, `MAX_ROWS` in `agent/src/limits.rs`), so a size the host refuses costs no
/// memory here. A larger `pane.resize` keeps the model's size and drops what is pending.
const MAX_SIDE: u16 = 1000;

/// Changes queued for one pane's engine; beyond this, keystrokes are not predicted (see
/// [`Prediction::input`]) and output waits.
const QUEUE: usize = 1024;

/// The `predict` parameter of `pane.open` / `pane.attach`: `"adaptive"`, `"always"` or
/// `"never"` (the default: nothing is predicted and no engine runs).
///
/// # Errors
/// `invalid_params` for anything else, naming the choices.
pub fn mode(p: &Params<'_>) -> Result<PredictMode, RpcError> {
    match p.opt_str("predict")? {
        None => Ok(PredictMode::Never),
        Some(text) => text
            .parse()
            .map_err(|e| RpcError::params(format!("`predict`: {e}"))),
    }
}

/// What one pane's engine is told, in order.
enum Feed {
    Event(PaneEvent),
    Input(Vec<u8>, Instant),
    Resize(TermSize),
}

/// The engine of one pane, running on its own task; cheap to clone. Dropping every clone (the
/// pane's entry and its pump) ends the task.
#[derive(Clone)]
pub struct Prediction {
    tx: mpsc::Sender<Feed>,
    /// Set when a keystroke could not be queued: the engine drops its pending predictions
    /// (they no longer know every key).
    missed: Arc<AtomicBool>,
    shown: Arc<Mutex<Shown>>,
    task: tokio::task::AbortHandle,
}

/// What the app was last sent, shared by the engine's task and the pane's entry.
#[derive(Default)]
struct Shown {
    /// The overlay last queued for the app.
    overlay: Overlay,
    /// Set by [`Prediction::retire`]: the engine queues nothing more.
    retired: bool,
}

impl Prediction {
    /// Starts the engine of the pane of binding `binding` (its JSON), whose app terminal is
    /// `size` (columns × rows) and blank or about to be cleared by the stream's first snapshot;
    /// `round_trips` are its host's; `before` is the overlay the app still shows from a stream
    /// of the same pane this one replaces (taken back with the first `pane.predict`). Returns
    /// `None` for [`PredictMode::Never`].
    pub fn start(
        out: Out,
        binding: Value,
        (mode, size): (PredictMode, TermSize),
        round_trips: RoundTrips,
        before: Overlay,
    ) -> Option<Prediction> {
        if mode == PredictMode::Never {
            return None;
        }
        let (tx, rx) = mpsc::channel(QUEUE);
        let missed = Arc::new(AtomicBool::new(false));
        let shown = Arc::new(Mutex::new(Shown {
            overlay: before,
            retired: false,
        }));
        let size = capped(size).unwrap_or_default();
        let engine = Engine {
            predictor: Predictor::new(size.cols, size.rows, mode),
            shown: shown.clone(),
            offset: 0,
            missed: missed.clone(),
        };
        let task = tokio::spawn(engine.run(rx, out, binding, round_trips));
        Some(Prediction {
            tx,
            missed,
            shown,
            task: task.abort_handle(),
        })
    }

    /// Ends this engine's `pane.predict`s (a new stream of the pane replaces it) and returns
    /// the overlay the app was last sent: every one queued before is in it, none follows.
    pub fn retire(&self) -> Overlay {
        let mut shown = self.shown.lock_unpoisoned();
        shown.retired = true;
        shown.overlay.clone()
    }

    /// The engine's task (aborting it stops the engine).
    pub fn task(&self) -> tokio::task::AbortHandle {
        self.task.clone()
    }

    /// Stops the engine at once: no `pane.predict` follows (the app detached).
    pub fn stop(&self) {
        self.task.abort();
    }

    /// The pump sent `ev` to the app: output, a snapshot or a gap changes its screen (other
    /// events are not passed on). Waits while the engine is behind.
    pub async fn sent(&self, ev: PaneEvent) {
        if matches!(
            ev,
            PaneEvent::Output { .. } | PaneEvent::Snapshot { .. } | PaneEvent::Gap { .. }
        ) {
            let _ = self.tx.send(Feed::Event(ev)).await;
        }
    }

    /// The app sent keystrokes `data` to the pane. Never waits: when the engine is
    /// [`QUEUE`] changes behind, the keys are not predicted (and what was pending is dropped).
    pub fn input(&self, data: &[u8]) {
        let fed = self.tx.try_send(Feed::Input(data.to_vec(), Instant::now()));
        if fed.is_err() {
            self.missed.store(true, Ordering::Release);
        }
    }

    /// The app's terminal is now `size`. Never waits (see [`Prediction::input`]).
    pub fn resize(&self, size: TermSize) {
        if self.tx.try_send(Feed::Resize(size)).is_err() {
            self.missed.store(true, Ordering::Release);
        }
    }
}

/// The task's state.
struct Engine {
    predictor: Predictor,
    shown: Arc<Mutex<Shown>>,
    /// The output offset the engine has seen up to.
    offset: u64,
    missed: Arc<AtomicBool>,
}

impl Engine {
    async fn run(
        mut self,
        mut rx: mpsc::Receiver<Feed>,
        out: Out,
        binding: Value,
        mut round_trips: RoundTrips,
    ) {
        loop {
            let deadline = self.predictor.next_deadline();
            tokio::select! {
                feed = rx.recv() => match feed {
                    Some(feed) => self.take(feed),
                    None => return,
                },
                Some(rtt) = round_trips.next() => self.predictor.rtt_sample(rtt),
                () = until(deadline) => self.predictor.tick(Instant::now()),
            }
            if self.missed.swap(false, Ordering::AcqRel) {
                // A keystroke went unseen: what is pending no longer matches the keys.
                self.resize(self.size());
            }
            let overlay = self.predictor.overlay();
            if overlay == self.shown.lock_unpoisoned().overlay {
                continue;
            }
            // The overlay is recorded as shown only as its message is queued, and never after
            // `retire`: the stream replacing this one takes back exactly what the app was sent.
            out.notify_if("pane.predict", || {
                let mut shown = self.shown.lock_unpoisoned();
                if shown.retired || overlay == shown.overlay {
                    return None;
                }
                let params = overlay_json(&binding, self.offset, &overlay, &shown.overlay);
                shown.overlay = overlay;
                Some(params)
            })
            .await;
        }
    }

    fn take(&mut self, feed: Feed) {
        let now = Instant::now();
        match feed {
            Feed::Event(PaneEvent::Output { offset, data }) => {
                self.predictor.output(&data, now);
                self.offset = offset + data.len() as u64;
            }
            Feed::Event(PaneEvent::Snapshot { offset, size, data }) => {
                // The app writes it to a terminal of `size`; so does the model.
                self.resize(size);
                self.predictor.output(&data, now);
                self.offset = offset;
            }
            Feed::Event(PaneEvent::Gap { to, .. }) => {
                // The app's screen jumps as the model's does (both see the same bytes next);
                // what was pending cannot be judged across the jump.
                self.resize(self.size());
                self.offset = to;
            }
            Feed::Event(_) => {}
            Feed::Input(data, at) => self.predictor.input(&data, at),
            Feed::Resize(size) => self.resize(size),
        }
    }

    /// Resizes the model (dropping what is pending); a size over the host's limit is refused
    /// there, so the pane, and the model, keep theirs.
    fn resize(&mut self, size: TermSize) {
        let size = capped(size).unwrap_or_else(|| self.size());
        self.predictor.resize(size.cols, size.rows);
    }

    /// The model's size.
    fn size(&self) -> TermSize {
        let (rows, cols) = self.predictor.screen().size();
        TermSize {
            cols: cols.get(),
            rows: rows.get(),
        }
    }
}

/// `size` when neither side is over [`MAX_SIDE`].
fn capped(size: TermSize) -> Option<TermSize> {
    (size.cols <= MAX_SIDE && size.rows <= MAX_SIDE).then_some(size)
}

/// The `pane.predict` params that take back `before`, the overlay the app still shows of a
/// stream being replaced by one without an engine; `None` when it shows none.
pub fn clearing(binding: &Value, offset: u64, before: &Overlay) -> Option<Value> {
    (!before.is_empty()).then(|| overlay_json(binding, offset, &Overlay::default(), before))
}

/// `pane.predict`'s params: the whole overlay now (`cells`, `cursor`) and the cells of the one
/// before that it no longer covers (`restore`), after the output up to `offset`.
fn overlay_json(binding: &Value, offset: u64, now: &Overlay, before: &Overlay) -> Value {
    let cells: Vec<Value> = now
        .cells
        .iter()
        .map(|c| json!({"row": c.row, "col": c.col, "ch": c.ch.to_string(), "underline": c.underline}))
        .collect();
    let restore: Vec<Value> = before
        .cells
        .iter()
        .filter(|b| !now.cells.iter().any(|c| (c.row, c.col) == (b.row, b.col)))
        .map(|c| json!({"row": c.row, "col": c.col}))
        .collect();
    let cursor = now.cursor.map(|(row, col)| json!({"row": row, "col": col}));
    json!({
        "binding": binding,
        "offset": offset,
        "cells": cells,
        "cursor": cursor,
        "restore": restore,
    })
}

/// Resolves at `deadline`; never when there is none.
async fn until(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}
