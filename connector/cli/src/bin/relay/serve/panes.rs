//! `pane.*` methods and each held pane's stream: the pump that turns its events into
//! notifications under the app's own credit (`pane.ack`), and the resizer.
//!
//! Output credit: the pump sends at most [`APP_WINDOW`] bytes of a pane's output beyond the
//! offset the app last acked. A renderer that stops acking stops its pump; the pane's queue in
//! the library then fills, the agent stops forwarding that pane (its credit window) and keeps
//! draining the PTY into its replay ring. No other pane, workspace or host notices (rule F).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use futures_util::FutureExt as _;
use relay_connector::predict::PredictMode;
use relay_connector::{Host, InputFailures, PaneEvent, PaneHandle};
use relay_protocol::{Binding, Resume, SpawnSpec, TermSize};
use serde_json::{json, Value};
use tokio::sync::{oneshot, watch, Notify};

use super::params::Params;
use super::predict::{self, Prediction};
use super::rpc::RpcError;
use super::wire;
use super::workspace::within;
use super::{done, Answer, Outcome, PaneEntry, Server};
use relay_connector::LockExt;

/// Bytes of output the sidecar sends for one pane beyond the app's last `pane.ack`: 1 MiB.
pub const APP_WINDOW: u64 = 1 << 20;

/// One pane's output credit from the app.
pub struct AppCredit {
    /// `(end, acked)`: the offset after the last byte sent, and the app's last ack (raised over
    /// bytes a snapshot or gap stands for).
    offsets: Mutex<(u64, u64)>,
    /// Set by `pane.detach`: the pump sends nothing more.
    muted: AtomicBool,
    room: Notify,
}

impl AppCredit {
    fn new(start: u64) -> AppCredit {
        AppCredit {
            offsets: Mutex::new((start, start)),
            muted: AtomicBool::new(false),
            room: Notify::new(),
        }
    }

    fn offsets(&self) -> std::sync::MutexGuard<'_, (u64, u64)> {
        self.offsets.lock_unpoisoned()
    }

    fn has_room(&self) -> bool {
        let (end, acked) = *self.offsets();
        !self.muted.load(Ordering::Acquire) && end.saturating_sub(acked) < APP_WINDOW
    }

    /// Sends nothing more (the app detached).
    fn mute(&self) {
        self.muted.store(true, Ordering::Release);
        self.room.notify_waiters();
    }

    /// Waits until less than [`APP_WINDOW`] bytes are unacked.
    async fn room(&self) {
        loop {
            let notified = self.room.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.has_room() {
                return;
            }
            notified.await;
        }
    }

    /// Output up to `end` is being sent to the app.
    fn sent_to(&self, end: u64) {
        let mut o = self.offsets();
        o.0 = o.0.max(end);
    }

    /// `ev` (not output: see [`AppCredit::sent_to`]) is being sent to the app: a snapshot or a
    /// gap stands for the bytes before its offset, which need no ack.
    fn sent(&self, ev: &PaneEvent) {
        if let PaneEvent::Snapshot { offset, .. } | PaneEvent::Gap { to: offset, .. } = ev {
            let mut o = self.offsets();
            o.0 = o.0.max(*offset);
            o.1 = o.1.max(*offset);
        }
    }

    /// The app consumed output up to `offset`.
    pub fn ack(&self, offset: u64) {
        {
            let mut o = self.offsets();
            o.1 = o.1.max(offset.min(o.0));
        }
        self.room.notify_waiters();
    }
}

impl Server {
    /// `pane.open {host, pane, command?, cwd?, env?, term?, size?, lossless?}` → `{binding,
    /// created}`; the stream starts from offset 0 after the reply. The only method that may
    /// spawn; idempotent by pane key (a live pane is attached, rule D). `lossless`: every byte,
    /// the program held back at the agent instead of a snapshot (see
    /// [`Host::open_pane_lossless`]).
    pub(super) async fn pane_open(self: &Arc<Self>, p: Params<'_>) -> Outcome {
        p.only(&[
            "host",
            "pane",
            "command",
            "cwd",
            "env",
            "term",
            "size",
            "lossless",
            "predict",
            "timeout_ms",
        ])?;
        let host_id = p.str("host")?;
        let host = self.host(host_id)?;
        let pane = p.pane("pane")?;
        let env = match p.0.get("env") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Object(vars)) => vars
                .iter()
                .map(|(k, v)| match v.as_str() {
                    Some(v) => Ok((k.clone(), v.to_string())),
                    None => Err(RpcError::params(format!("`env.{k}` must be a string"))),
                })
                .collect::<Result<_, _>>()?,
            Some(_) => return Err(RpcError::params("`env` must be an object of strings")),
        };
        let spec = SpawnSpec {
            command: p.argv("command")?,
            cwd: p.opt_str("cwd")?.map(str::to_string),
            term: p.opt_str("term")?.map(str::to_string),
            size: p.size("size")?,
            env,
        };
        let lossless = p.flag("lossless")?;
        let predict = (predict::mode(&p)?, spec.size);
        let opening = async {
            if lossless {
                host.open_pane_lossless(pane, spec, 0).await
            } else {
                host.open_pane(pane, spec, Resume::From(0)).await
            }
        };
        let opened = within(&p, host_id, &host, opening).await?;
        let (created, handle) = opened.map_err(|e| self.host_error(&host, e))?;
        let (binding, start) = self.hold(host_id, &host, handle, predict)?;
        Ok(Answer {
            result: json!({"binding": binding, "created": !created.existed}),
            then: Some(start),
        })
    }

    /// `pane.attach {host, pane, pty, resume_from?, lossless?}` → `{binding, replay_from,
    /// lost}`; never creates (rule B). Attaches only when the host's lease for exactly this
    /// pane key has exactly this PTY; else `not_found`, `ended` or `mismatch`. Without
    /// `resume_from` the stream starts with a snapshot of the screen — or, `lossless`, with the
    /// oldest byte the agent holds (then every byte, never a snapshot).
    pub(super) async fn pane_attach(self: &Arc<Self>, p: Params<'_>) -> Outcome {
        p.only(&[
            "host",
            "pane",
            "pty",
            "resume_from",
            "lossless",
            "predict",
            "timeout_ms",
        ])?;
        let host_id = p.str("host")?;
        let host = self.host(host_id)?;
        let pane = p.pane("pane")?;
        let pty = p.pty("pty")?;
        let from = p.opt_u64("resume_from")?;
        let lossless = p.flag("lossless")?;
        let mode = predict::mode(&p)?;
        if mode != PredictMode::Never && from.is_some() {
            return Err(RpcError::params(
                "`predict` needs the stream to start from a screen the sidecar knows, and \
                 `resume_from` continues one only the app has: attach without `resume_from` \
                 (a snapshot comes first) to predict",
            ));
        }
        let attaching = async {
            if lossless {
                return host
                    .attach_pane_lossless(pane, Some(pty), from.unwrap_or(0))
                    .await;
            }
            let resume = from.map_or(Resume::Snapshot, Resume::From);
            host.attach_pane(pane, Some(pty), resume).await
        };
        let attached = within(&p, host_id, &host, attaching).await?;
        let handle = attached.map_err(|e| self.host_error(&host, e))?;
        let attached = handle.attached().clone();
        // Without `resume_from` the snapshot stands for every byte before `replay_from`
        // (docs/embedding.md); the agent counts only from an offset it was given.
        let lost = match (from, lossless) {
            (None, false) => attached.replay_from,
            _ => attached.lost,
        };
        // The snapshot that starts the stream sets the model's size.
        let (binding, start) = self.hold(host_id, &host, handle, (mode, attached.size))?;
        Ok(Answer {
            result: json!({
                "binding": binding,
                "replay_from": attached.replay_from,
                "end": attached.end_offset,
                "lost": lost,
                "size": wire::size_json(attached.size),
            }),
            then: Some(start),
        })
    }

    /// Keeps `handle`: its pump (started by the returned sender, after the reply), input
    /// writer, resizer and, unless `predict` is [`PredictMode::Never`], its prediction engine
    /// for an app terminal of the given size. Replaces an earlier hold of the same PTY.
    /// Returns the binding JSON.
    ///
    /// # Errors
    /// `unknown_host` when the host was closed meanwhile.
    fn hold(
        self: &Arc<Self>,
        host_id: &str,
        host: &Host,
        handle: PaneHandle,
        (mode, size): (PredictMode, TermSize),
    ) -> Result<(Value, oneshot::Sender<()>), RpcError> {
        let binding = handle.binding().clone();
        let json = wire::binding_json(host_id, &binding);
        let round_trips = match mode {
            PredictMode::Never => None,
            _ => Some(self.round_trips(host_id)?),
        };
        let key = (host_id.to_string(), binding.pty);
        // One lock for the swap: an input arriving meanwhile finds the old entry or the new one.
        let mut panes = self.panes();
        // A second hold of the same binding keeps its input writer: what was queued for the
        // PTY (during an outage, or while this attach was under way) is delivered, in order,
        // through the new attachment.
        let mut replaced = panes.remove(&key);
        // The overlay the app still shows of the stream replaced (whose engine sends nothing
        // more from here): the new engine (or, without one, the new pump) takes it back first.
        let before = replaced
            .as_ref()
            .and_then(|old| old.predict.as_ref())
            .map(Prediction::retire)
            .unwrap_or_default();
        let clear = predict::clearing(&json, handle.next_offset(), &before);
        let predict = round_trips.and_then(|rtts| {
            Prediction::start(self.out.clone(), json.clone(), (mode, size), rtts, before)
        });
        let kept = replaced
            .as_mut()
            .filter(|old| old.binding == binding)
            .and_then(|old| Some((old.input.take()?, old.failures.clone())));
        let (input, failures) = kept.unwrap_or_else(|| {
            let mut input = host.input_writer(&binding);
            let failures = Arc::new(tokio::sync::Mutex::new(input.failures()));
            (input, failures)
        });
        let credit = Arc::new(AppCredit::new(handle.next_offset()));
        let (size, sizes) = watch::channel(None);
        let generation = self.next_id();
        let (start, started) = oneshot::channel();
        let pump = tokio::spawn(pump(
            self.clone(),
            key.clone(),
            generation,
            Stream {
                handle,
                credit: credit.clone(),
                binding: json.clone(),
                predict: predict.clone(),
                clear: clear.filter(|_| predict.is_none()),
            },
            failures.clone(),
            started,
        ));
        let resizer = tokio::spawn(resizer(
            self.out.clone(),
            host.clone(),
            (binding.clone(), json.clone()),
            sizes,
        ));
        let entry = PaneEntry {
            binding,
            generation,
            input: Some(input),
            failures,
            size,
            credit,
            tasks: [pump.abort_handle(), resizer.abort_handle()]
                .into_iter()
                .chain(predict.as_ref().map(|p| p.task()))
                .collect(),
            predict,
        };
        panes.insert(key, entry);
        drop(panes);
        // Dropping a replaced entry aborts its tasks; its handle's release cannot touch the new
        // subscription (the library keys it by its own sink).
        drop(replaced);
        Ok((json, start))
    }

    /// Runs `f` on the entry of the binding in `p.binding`.
    fn with_pane<T>(
        &self,
        p: &Params<'_>,
        f: impl FnOnce(&PaneEntry) -> Result<T, RpcError>,
    ) -> Result<T, RpcError> {
        let (host, binding) = p.binding("binding")?;
        let panes = self.panes();
        match panes.get(&(host.clone(), binding.pty)) {
            Some(entry) if entry.binding == binding => f(entry),
            _ => Err(RpcError::new(
                "unknown_binding",
                format!(
                    "this sidecar holds no pane {binding} on host {host:?} (never attached, \
                     detached, or its stream ended); hydrate and attach again"
                ),
            )),
        }
    }

    /// `pane.input {binding, data}` (base64): queued in order for the PTY; `input_full` when
    /// the pane's queue is over its bound (1 MiB) while the host is away.
    pub(super) fn pane_input(&self, p: Params<'_>) -> Result<Value, RpcError> {
        p.only(&["binding", "data"])?;
        let data = p.bytes("data")?;
        self.with_pane(&p, |e| {
            let Some(input) = e.input.as_ref() else {
                let why = format!("pane {} is detaching", e.binding);
                return Err(RpcError::new("pane_gone", why));
            };
            let keys = e.predict.as_ref().map(|_| data.clone());
            input.push(data).map_err(|e| wire::from_error(&e))?;
            if let (Some(predict), Some(keys)) = (&e.predict, keys) {
                predict.input(&keys);
            }
            Ok(done())
        })
    }

    /// `pane.ack {binding, offset}`: output up to `offset` was consumed.
    pub(super) fn pane_ack(&self, p: Params<'_>) -> Result<Value, RpcError> {
        p.only(&["binding", "offset"])?;
        let offset = p
            .opt_u64("offset")?
            .ok_or_else(|| RpcError::params("`offset` (an output offset) is missing"))?;
        self.with_pane(&p, |e| {
            e.credit.ack(offset);
            Ok(done())
        })
    }

    /// `pane.resize {binding, cols, rows}`: applied in order, the latest size winning; again
    /// after every re-attach.
    pub(super) fn pane_resize(&self, p: Params<'_>) -> Result<Value, RpcError> {
        p.only(&["binding", "cols", "rows"])?;
        let size = p.size_fields()?;
        self.with_pane(&p, |e| {
            e.size.send_replace(Some(size));
            if let Some(predict) = &e.predict {
                predict.resize(size);
            }
            Ok(done())
        })
    }

    /// `pane.detach {binding}`: stops the stream and detaches; the PTY keeps running. Input
    /// already queued is still delivered (bounded).
    pub(super) fn pane_detach(&self, p: Params<'_>) -> Result<Value, RpcError> {
        p.only(&["binding"])?;
        self.with_pane(&p, |_| Ok(()))?;
        let (host, binding) = p.binding("binding")?;
        let Some(mut entry) = self.panes().remove(&(host, binding.pty)) else {
            return Ok(done());
        };
        // No more notifications; the handle (and so the pane's attachment, which queued input
        // is delivered through) lives until the input is delivered or the grace is over.
        entry.credit.mute();
        if let Some(predict) = &entry.predict {
            predict.stop();
        }
        let input = entry.input.take();
        self.calls.spawn(async move {
            if let Some(input) = input {
                let _ = tokio::time::timeout(DETACH_GRACE, input.finish()).await;
            }
            drop(entry);
        });
        Ok(done())
    }

    /// `pane.signal {binding, signal}`: a name (`"INT"`, `"SIGINT"`) or a Linux number, to the
    /// PTY's foreground process group.
    pub(super) async fn pane_signal(&self, p: Params<'_>) -> Result<Value, RpcError> {
        p.only(&["binding", "signal", "timeout_ms"])?;
        let signal = match p.0.get("signal") {
            Some(Value::Number(n)) => n.as_i64().and_then(|n| i32::try_from(n).ok()),
            Some(Value::String(s)) => relay_protocol::signal::parse(s).map(|s| s.number),
            _ => None,
        }
        .ok_or_else(|| RpcError::params("`signal` must be a signal name (\"INT\") or number"))?;
        let (host_id, host, binding) = self.held(&p)?;
        let session = within(&p, &host_id, &host, host.session()).await?;
        let session = session.map_err(|e| self.host_error(&host, e))?;
        session
            .signal(&binding, signal)
            .await
            .map_err(|e| wire::from_error(&e))?;
        Ok(done())
    }

    /// `pane.kill {binding}`: ends the PTY (SIGHUP, then SIGKILL after the agent's grace); the
    /// stream then ends with `pane.exited`.
    pub(super) async fn pane_kill(&self, p: Params<'_>) -> Result<Value, RpcError> {
        p.only(&["binding", "timeout_ms"])?;
        let (host_id, host, binding) = self.held(&p)?;
        let session = within(&p, &host_id, &host, host.session()).await?;
        let session = session.map_err(|e| self.host_error(&host, e))?;
        session
            .kill(&binding)
            .await
            .map_err(|e| wire::from_error(&e))?;
        Ok(done())
    }

    /// The host id, host and binding of a held pane.
    fn held(&self, p: &Params<'_>) -> Result<(String, Host, Binding), RpcError> {
        let binding = self.with_pane(p, |e| Ok(e.binding.clone()))?;
        let (host_id, _) = p.binding("binding")?;
        let host = self.host(&host_id)?;
        Ok((host_id, host, binding))
    }

    /// The pump of `key` ended after a final event: forget the pane unless a newer hold of the
    /// same PTY replaced it.
    fn stream_ended(&self, key: &(String, relay_protocol::PtyId), generation: u64) {
        let mut panes = self.panes();
        if panes.get(key).is_some_and(|e| e.generation == generation) {
            let entry = panes.remove(key);
            drop(panes);
            drop(entry);
        }
    }
}

/// How long a detached pane's queued input may take to be delivered.
const DETACH_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// What a pane's pump reads and writes.
struct Stream {
    handle: PaneHandle,
    credit: Arc<AppCredit>,
    binding: Value,
    /// Told of what the app was sent, after it was sent.
    predict: Option<Prediction>,
    /// A `pane.predict` to send first: it takes back the overlay of a replaced stream.
    clear: Option<Value>,
}

/// Most output bytes one `pane.output` carries when several chunks are ready at once.
const COALESCE_BYTES: usize = 256 * 1024;

impl Stream {
    /// The next event within the app's credit; output chunks that are already queued and
    /// contiguous are merged into one (fewer, larger lines), within the credit too. `stash`
    /// keeps an event read ahead that could not be merged.
    async fn next(&mut self, stash: &mut Option<PaneEvent>) -> Option<PaneEvent> {
        self.credit.room().await;
        let first = match stash.take() {
            Some(ev) => ev,
            None => self.handle.next().await?,
        };
        let PaneEvent::Output { offset, mut data } = first else {
            self.credit.sent(&first);
            return Some(first);
        };
        let mut end = offset + data.len() as u64;
        self.credit.sent_to(end);
        while data.len() < COALESCE_BYTES && self.credit.has_room() {
            match self.handle.next().now_or_never() {
                Some(Some(PaneEvent::Output {
                    offset: o,
                    data: more,
                })) if o == end => {
                    end += more.len() as u64;
                    self.credit.sent_to(end);
                    data.extend_from_slice(&more);
                }
                Some(Some(other)) => {
                    *stash = Some(other);
                    break;
                }
                // Nothing ready, or the stream ended (seen again by the next call).
                Some(None) | None => break,
            }
        }
        Some(PaneEvent::Output { offset, data })
    }
}

/// Sends the pane's events as notifications, within the app's credit, until a final event.
async fn pump(
    server: Arc<Server>,
    key: (String, relay_protocol::PtyId),
    generation: u64,
    mut s: Stream,
    failures: Arc<tokio::sync::Mutex<InputFailures>>,
    started: oneshot::Receiver<()>,
) {
    // After the reply naming the binding (or at once if the reply could not be sent).
    let _ = started.await;
    // Free once a replaced pump of the same binding is gone.
    let mut failures = failures.lock().await;
    let binding_text = s.binding.to_string();
    if let Some(clear) = s.clear.take() {
        server.out.notify("pane.predict", clear).await;
    }
    let mut stash = None;
    loop {
        let event = tokio::select! {
            ev = s.next(&mut stash) => Ok(ev),
            err = failures.next() => Err(err),
        };
        match event {
            Ok(None) => break,
            Ok(Some(ev @ PaneEvent::Output { .. })) => {
                if let PaneEvent::Output { offset, data } = &ev {
                    let line = wire::output_line(&binding_text, *offset, data);
                    server.out.send_line(line).await;
                }
                if let Some(predict) = &s.predict {
                    predict.sent(ev).await;
                }
            }
            Ok(Some(ev)) => {
                let (method, params) = wire::event_json(&s.binding, &ev);
                server.out.notify(method, params).await;
                if ev.is_final() {
                    break;
                }
                if let Some(predict) = &s.predict {
                    predict.sent(ev).await;
                }
            }
            Err(err) => {
                let error = wire::error_json(&wire::from_error(&err));
                let params = json!({"binding": s.binding, "error": error});
                server.out.notify("pane.input_failed", params).await;
            }
        }
    }
    server.stream_ended(&key, generation);
}

/// Applies the latest size asked for, in order; says so when the host refuses one.
async fn resizer(
    out: super::rpc::Out,
    host: Host,
    (binding, json): (Binding, Value),
    mut sizes: watch::Receiver<Option<TermSize>>,
) {
    while sizes.changed().await.is_ok() {
        let Some(size) = *sizes.borrow_and_update() else {
            continue;
        };
        if let Err(e) = host.resize(&binding, size).await {
            tracing::info!(%binding, "resize failed: {e}");
            let params = json!({
                "binding": json,
                "size": wire::size_json(size),
                "error": wire::error_json(&wire::from_error(&e)),
            });
            out.notify("pane.resize_failed", params).await;
        }
    }
}
