//! `relay serve --stdio`: the sidecar a desktop app spawns (docs/embedding.md). JSON-RPC 2.0,
//! one object per line on stdin/stdout; logs on stderr.
//!
//! It is a thin shell over the library: one [`Host`] per destination (supervisor, reconnects,
//! re-attach), one [`PaneHandle`](relay_connector::PaneHandle) per pane the app holds, an
//! [`InputWriter`] per pane for ordered input. The host is the source of truth: the app
//! rebuilds its terminals from `workspace.hydrate`, which asks the host and never answers from
//! what the sidecar remembers; only `pane.open` may spawn.
//!
//! - [`rpc`]: framing, bounded lines, the stdout writer, questions to the app.
//! - [`calls`]: the calls in flight, bounded in number and bytes, each answered once.
//! - [`params`]: reading a call's parameters; [`wire`]: JSON shapes and error codes.
//! - `hosts`, `panes`, `workspace`: the methods.
//!
//! A bad line (not JSON, unknown method, bad parameters, bad base64, over [`rpc::MAX_LINE`])
//! gets an error reply and nothing else happens. When stdin closes (the app quit or crashed)
//! the sidecar exits; nothing on any host ends (rule A).

pub mod calls;
mod hosts;
mod panes;
pub mod params;
mod predict;
pub mod rpc;
pub mod wire;
mod workspace;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use relay_connector::{Host, InputWriter};
use relay_protocol::{Binding, PtyId, TermSize};
use serde_json::value::RawValue;
use serde_json::{json, Value};
use tokio::sync::{oneshot, watch};
use tokio_util::sync::CancellationToken;

use params::Params;
use relay_connector::LockExt;
use rpc::{Incoming, Line, LineReader, Out, RpcError};

/// Runs the sidecar until stdin closes; returns the exit code (0).
pub async fn run() -> anyhow::Result<u8> {
    let closed = CancellationToken::new();
    let out = Out::start(tokio::io::stdout(), closed.clone());
    let server = Arc::new(Server::new(out.clone()));
    let mut lines = LineReader::new(tokio::io::stdin());
    tracing::info!("relay serve: reading JSON-RPC from stdin");
    loop {
        let line = tokio::select! {
            line = lines.next() => line,
            () = closed.cancelled() => None,
        };
        match line {
            None => break,
            Some(Line::Refused(err)) => out.reply(Value::Null, Err(err)).await,
            Some(Line::Text(text)) if text.trim().is_empty() => {}
            Some(Line::Text(text)) => server.handle(text.as_bytes()).await,
        }
    }
    // The app is gone. What it was told was accepted is still carried out (bounded): calls
    // under way are answered, queued input is delivered. Then its hosts' connections close
    // with the process; every PTY keeps running on its host (rule A), for the next sidecar to
    // hydrate and attach.
    tracing::info!("stdin closed; finishing accepted work, then relay serve exits");
    if tokio::time::timeout(EXIT_GRACE, server.finish())
        .await
        .is_err()
    {
        server.answer_unfinished().await;
    }
    Ok(0)
}

/// Longest time the sidecar spends, after stdin closed, answering calls under way and
/// delivering input it accepted.
const EXIT_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// Everything the sidecar holds: hosts by id, panes by `(host id, PTY)`.
pub struct Server {
    out: Out,
    hosts: Mutex<HashMap<String, HostEntry>>,
    panes: Mutex<HashMap<(String, PtyId), PaneEntry>>,
    next_id: AtomicU64,
    /// The number of the next host opened: `h1`, `h2`, … in the order of the `host.open`
    /// lines (docs/embedding.md).
    next_host: AtomicU64,
    /// Calls running on their own tasks.
    calls: calls::Calls,
}

/// One opened host.
struct HostEntry {
    /// The `destination` the app gave (a second `host.open` of it returns this host).
    destination: String,
    host: Host,
    /// Turns to ask the host for its lease list ([`LISTS_PER_HOST`]).
    listing: Arc<tokio::sync::Semaphore>,
    /// Round trips to the agent, measured from the first pane opened with `predict` until the
    /// host is closed.
    round_trips: std::sync::OnceLock<relay_connector::RoundTrips>,
}

/// A call whose line is at least this long (1 MiB) gives the memory of its parameters back to
/// the OS when it ends ([`relay_cli::sys::return_freed_memory`]).
const LARGE_CALL: usize = 1 << 20;

/// Lease lists (`workspace.hydrate`, `workspace.kill_all` of a workspace) asked of one host at
/// once. The agent answers a connection's requests in order, so a keystroke sent behind a
/// burst of lists waits for at most this many; the other calls wait in the sidecar.
const LISTS_PER_HOST: usize = 4;

/// One pane the app holds.
struct PaneEntry {
    binding: Binding,
    /// Distinguishes this hold from a later one of the same PTY (a second attach replaces it).
    generation: u64,
    /// Taken when the app detaches (queued input is still delivered).
    input: Option<InputWriter>,
    /// Why `input` stopped delivering; read by the pane's pump (one pump at a time).
    failures: Arc<tokio::sync::Mutex<relay_connector::InputFailures>>,
    size: watch::Sender<Option<TermSize>>,
    credit: Arc<panes::AppCredit>,
    /// The prediction engine, for a pane opened or attached with `predict`.
    predict: Option<predict::Prediction>,
    tasks: Vec<tokio::task::AbortHandle>,
}

impl Drop for PaneEntry {
    fn drop(&mut self) {
        // The pump owns the pane handle: aborting it detaches (best effort); the PTY runs on.
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// A method's answer, and what to start once the answer is on its way (a pane's stream starts
/// after the reply that names its binding).
pub struct Answer {
    result: Value,
    then: Option<oneshot::Sender<()>>,
}

impl From<Value> for Answer {
    fn from(result: Value) -> Self {
        Answer { result, then: None }
    }
}

type Outcome = Result<Answer, RpcError>;

/// Methods answered on the reader loop itself, in the order they arrive (input must keep its
/// order; these never wait). `host.open` is one so that a call naming its host may follow it
/// without waiting for its answer: the host exists before the next line is read.
const INLINE: &[&str] = &[
    "host.open",
    "pane.input",
    "pane.ack",
    "pane.resize",
    "pane.detach",
    "host.retry",
];

impl Server {
    fn new(out: Out) -> Server {
        Server {
            out,
            hosts: Mutex::new(HashMap::new()),
            panes: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            next_host: AtomicU64::new(1),
            calls: calls::Calls::new(),
        }
    }

    /// After stdin closed: waits for the calls under way, delivers every pane's queued input,
    /// and writes what is queued for stdout.
    async fn finish(&self) {
        self.calls.finish().await;
        let inputs: Vec<InputWriter> = self
            .panes()
            .values_mut()
            .filter_map(|e| e.input.take())
            .collect();
        futures_util::future::join_all(inputs.into_iter().map(InputWriter::finish)).await;
        self.out.flush().await;
    }

    /// After [`EXIT_GRACE`]: answers every request still in flight with `timeout` (the app
    /// may be reading still), waiting at most a second for stdout.
    async fn answer_unfinished(&self) {
        let unanswered = self.calls.unanswered();
        tracing::info!(
            calls = unanswered.len(),
            "calls still in flight at exit answered with a timeout"
        );
        let answering = async {
            for id in unanswered {
                let err = RpcError::new(
                    "timeout",
                    format!(
                        "relay serve is exiting (its stdin closed) and this call did not finish \
                         within {} s; nothing is known of its outcome: ask the host again from \
                         the next sidecar",
                        EXIT_GRACE.as_secs()
                    ),
                )
                .with("transient", json!(true));
                self.out.reply(id, Err(err)).await;
            }
            self.out.flush().await;
        };
        let _ = tokio::time::timeout(std::time::Duration::from_secs(1), answering).await;
    }

    fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    fn hosts(&self) -> MutexGuard<'_, HashMap<String, HostEntry>> {
        // Whole-map operations only: a panic cannot leave the map torn.
        self.hosts.lock_unpoisoned()
    }

    fn panes(&self) -> MutexGuard<'_, HashMap<(String, PtyId), PaneEntry>> {
        self.panes.lock_unpoisoned()
    }

    /// The host of id `id`.
    fn host(&self, id: &str) -> Result<Host, RpcError> {
        self.host_listing(id).map(|(host, _)| host)
    }

    /// The round trips of host `id` (started on first use), for prediction engines.
    fn round_trips(&self, id: &str) -> Result<relay_connector::RoundTrips, RpcError> {
        let hosts = self.hosts();
        let entry = hosts.get(id).ok_or_else(|| unknown_host(id))?;
        Ok(entry
            .round_trips
            .get_or_init(|| entry.host.round_trips())
            .clone())
    }

    /// The host of id `id` and its turns to list leases ([`LISTS_PER_HOST`]).
    fn host_listing(&self, id: &str) -> Result<(Host, Arc<tokio::sync::Semaphore>), RpcError> {
        self.hosts()
            .get(id)
            .map(|h| (h.host.clone(), h.listing.clone()))
            .ok_or_else(|| unknown_host(id))
    }

    /// One line from the app.
    async fn handle(self: &Arc<Self>, line: &[u8]) {
        match rpc::parse(line) {
            Err((id, err)) => self.out.reply(id, Err(err)).await,
            Ok(Incoming::Answer { id, outcome }) => {
                if !self.out.answered(id, outcome) {
                    tracing::warn!(id, "an answer to no open question of the sidecar");
                }
            }
            Ok(Incoming::Request { id, method, params }) => {
                self.run_call(Some(id), method, params, line.len()).await
            }
            Ok(Incoming::Notification { method, params }) => {
                self.run_call(None, method, params, line.len()).await
            }
        }
    }

    /// Runs one call inline (see [`INLINE`]) or on its own task, and answers it when it has an
    /// id. A call over the limits of [`calls`] is answered `busy` at once; `line_len` is the
    /// length of its line in bytes.
    async fn run_call(
        self: &Arc<Self>,
        id: Option<Value>,
        method: String,
        params: Box<RawValue>,
        line_len: usize,
    ) {
        if INLINE.contains(&method.as_str()) {
            let outcome = rpc::params_value(&params)
                .and_then(|params| self.call_inline(&method, Params(&params)))
                .map(Answer::from);
            answer(&self.out, id, outcome).await;
            return;
        }
        let admitted = match self.calls.admit(id.as_ref(), line_len) {
            Ok(admitted) => admitted,
            Err(busy) => return answer(&self.out, id, Err(busy)).await,
        };
        let request = id.is_some();
        let server = self.clone();
        self.calls.spawn(async move {
            let outcome = server.call(&method, params).await;
            // Its parameters were a large JSON tree, freed by now.
            if line_len >= LARGE_CALL {
                relay_cli::sys::return_freed_memory();
            }
            match server.calls.claim(&admitted) {
                Some(id) => answer(&server.out, Some(id), outcome).await,
                // Already answered with a timeout at exit.
                None if request => {}
                None => answer(&server.out, None, outcome).await,
            }
        });
    }

    fn call_inline(&self, method: &str, p: Params<'_>) -> Result<Value, RpcError> {
        match method {
            "host.open" => self.host_open(p),
            "pane.input" => self.pane_input(p),
            "pane.ack" => self.pane_ack(p),
            "pane.resize" => self.pane_resize(p),
            "pane.detach" => self.pane_detach(p),
            "host.retry" => self.host_retry(p),
            _ => unreachable!("INLINE lists only these"),
        }
    }

    /// Runs a call that may wait; `params` are read as they are needed (and freed before it
    /// waits, where they can be large).
    async fn call(self: &Arc<Self>, method: &str, params: Box<RawValue>) -> Outcome {
        if method == "workspace.kill_all" {
            return self.kill_all(params).await.map(Answer::from);
        }
        let params = rpc::params_value(&params)?;
        let p = Params(&params);
        match method {
            "host.close" => self.host_close(p).await.map(Answer::from),
            "workspace.hydrate" => self.hydrate(p).await.map(Answer::from),
            "pane.open" => self.pane_open(p).await,
            "pane.attach" => self.pane_attach(p).await,
            "pane.signal" => self.pane_signal(p).await.map(Answer::from),
            "pane.kill" => self.pane_kill(p).await.map(Answer::from),
            other => Err(RpcError {
                rpc_code: rpc::codes::METHOD_NOT_FOUND,
                ..RpcError::new(
                    "method_not_found",
                    format!("no method {other:?}; see docs/embedding.md for the methods"),
                )
            }),
        }
    }
}

/// Sends the answer of a call with an id; a notification's outcome is only logged. Starts
/// what waits for the answer.
async fn answer(out: &Out, id: Option<Value>, outcome: Outcome) {
    let (result, then) = match outcome {
        Ok(Answer { result, then }) => (Ok(result), then),
        Err(e) => (Err(e), None),
    };
    match id {
        Some(id) => out.reply(id, result).await,
        None => {
            if let Err(e) = result {
                tracing::info!(code = e.code, "a notification failed: {}", e.message);
            }
        }
    }
    if let Some(start) = then {
        let _ = start.send(());
    }
}

/// The error for a host id this sidecar did not open.
fn unknown_host(id: &str) -> RpcError {
    RpcError::new(
        "unknown_host",
        format!("no host {id:?} is open in this sidecar; call host.open first"),
    )
}

/// `{}`: the result of a call that returns nothing.
fn done() -> Value {
    json!({})
}
