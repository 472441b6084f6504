//! JSON-RPC 2.0 over stdio, one JSON object per line (docs/embedding.md, "Framing"): reading
//! bounded lines, telling requests from notifications and from the app's answers, the one
//! writer of stdout, and requests the sidecar itself sends to the app.
//!
//! Nothing but JSON-RPC messages is ever written to stdout; logs go to stderr.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::BytesMut;
use relay_connector::LockExt;
use serde_json::value::RawValue;
use serde_json::{json, Value};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio_util::codec::{Decoder, LinesCodec, LinesCodecError};

/// Longest line the sidecar reads, in bytes (newline excluded): 4 MiB, room for 3 MiB of
/// base64-encoded input in one `pane.input`. A longer line gets a `line_too_long` error (with
/// `id: null`, as its id cannot be read) and is skipped; the next line is read normally.
pub const MAX_LINE: usize = 4 << 20;

/// Messages queued for stdout before producers wait (each is one line).
const OUT_QUEUE: usize = 1024;

/// How long a question to the app (`host_key.confirm`, `auth.passphrase`) waits for its answer;
/// no answer counts as "no".
pub const APP_ANSWER_WITHIN: Duration = Duration::from_secs(120);

/// JSON-RPC 2.0 error codes (§5.1 of the specification) used next to the stable string code in
/// `error.data.code`.
pub mod codes {
    /// Invalid JSON.
    pub const PARSE_ERROR: i64 = -32700;
    /// Not a request object.
    pub const INVALID_REQUEST: i64 = -32600;
    /// No such method.
    pub const METHOD_NOT_FOUND: i64 = -32601;
    /// Bad parameters.
    pub const INVALID_PARAMS: i64 = -32602;
    /// Every error of relay itself (the string code says which).
    pub const RELAY: i64 = -32000;
}

/// An error reply: the JSON-RPC `code`, relay's stable string code (`error.data.code`), a
/// message with the fix, and extra fields merged into `error.data`.
#[derive(Debug, Clone)]
pub struct RpcError {
    /// JSON-RPC code ([`codes`]).
    pub rpc_code: i64,
    /// Stable string code (`not_found`, `mismatch`, `invalid_params`, ...).
    pub code: &'static str,
    /// What went wrong and how to fix it.
    pub message: String,
    /// Further fields of `error.data` (e.g. `current` for `mismatch`).
    pub data: serde_json::Map<String, Value>,
}

impl RpcError {
    /// A relay error (`rpc_code` [`codes::RELAY`]).
    pub fn new(code: &'static str, message: impl Into<String>) -> RpcError {
        RpcError {
            rpc_code: codes::RELAY,
            code,
            message: message.into(),
            data: serde_json::Map::new(),
        }
    }

    /// Bad parameters (`invalid_params`).
    pub fn params(message: impl Into<String>) -> RpcError {
        RpcError {
            rpc_code: codes::INVALID_PARAMS,
            ..RpcError::new("invalid_params", message)
        }
    }

    /// Adds `key: value` to `error.data`.
    pub fn with(mut self, key: &str, value: Value) -> RpcError {
        self.data.insert(key.to_string(), value);
        self
    }

    fn to_json(&self) -> Value {
        let mut data = self.data.clone();
        data.insert("code".into(), json!(self.code));
        json!({"code": self.rpc_code, "message": self.message, "data": data})
    }
}

/// One line from the app, classified.
#[derive(Debug)]
pub enum Incoming {
    /// A call: answer with a result or an error under `id`.
    Request {
        /// The app's id, echoed back.
        id: Value,
        /// Method name.
        method: String,
        /// Parameters, still as text: an object, or `{}` when absent.
        params: Box<RawValue>,
    },
    /// A call without id: no answer is sent, not even for errors (JSON-RPC §4.1).
    Notification {
        /// Method name.
        method: String,
        /// Parameters, still as text.
        params: Box<RawValue>,
    },
    /// The app's answer to a question the sidecar asked.
    Answer {
        /// The sidecar's id.
        id: u64,
        /// `result`, or `error`.
        outcome: Result<Value, Value>,
    },
}

/// Classifies one line. `Err` carries the error reply and the id to send it under (`null` when
/// the line's id could not be read).
///
/// Only the top level is read into memory here; `params` stays text until the call runs (a
/// parsed JSON tree takes up to ~20× its text, and a call may wait for its turn).
pub fn parse(line: &[u8]) -> Result<Incoming, (Value, RpcError)> {
    let parse_error = |e: serde_json::Error| {
        let err = RpcError {
            rpc_code: codes::PARSE_ERROR,
            ..RpcError::new(
                "parse_error",
                format!("the line is not valid JSON ({e}); send one JSON-RPC object per line"),
            )
        };
        (Value::Null, err)
    };
    let invalid = |id: Value, why: &str| {
        let err = RpcError {
            rpc_code: codes::INVALID_REQUEST,
            ..RpcError::new(
                "invalid_request",
                format!("not a JSON-RPC 2.0 request: {why}"),
            )
        };
        (id, err)
    };
    // Any JSON is read first, so that bad JSON is told apart from JSON that is not an object.
    let top: &RawValue = serde_json::from_slice(line).map_err(parse_error)?;
    let Ok(mut obj) = serde_json::from_str::<HashMap<String, &RawValue>>(top.get()) else {
        return Err(invalid(Value::Null, "expected an object"));
    };
    let value = |raw: &RawValue| serde_json::from_str::<Value>(raw.get()).unwrap_or_default();
    let id = obj.remove("id").map(value);
    if obj.get("jsonrpc").map(|raw| value(raw)) != Some(json!("2.0")) {
        return Err(invalid(id.unwrap_or_default(), "`jsonrpc` must be \"2.0\""));
    }
    let answers = obj.contains_key("result") || obj.contains_key("error");
    if obj.contains_key("method") && answers {
        return Err(invalid(
            id.unwrap_or_default(),
            "a message has both `method` and `result`/`error`; a request has `method`, an \
             answer has `result` or `error`",
        ));
    }
    if answers {
        let Some(id) = id.as_ref().and_then(Value::as_u64) else {
            return Err(invalid(
                Value::Null,
                "an answer whose id the sidecar never sent",
            ));
        };
        let outcome = match obj.remove("error") {
            Some(e) => Err(value(e)),
            None => Ok(obj.remove("result").map(value).unwrap_or_default()),
        };
        return Ok(Incoming::Answer { id, outcome });
    }
    let Some(Value::String(method)) = obj.remove("method").map(value) else {
        return Err(invalid(id.unwrap_or_default(), "`method` must be a string"));
    };
    let params = match obj.remove("params") {
        None => empty_params(),
        Some(raw) if raw.get() == "null" => empty_params(),
        Some(raw) if raw.get().starts_with('{') => raw.to_owned(),
        Some(_) => {
            let err = RpcError::params("`params` must be an object (named parameters)");
            return Err((id.unwrap_or_default(), err));
        }
    };
    match id {
        None => Ok(Incoming::Notification { method, params }),
        Some(Value::Number(n)) if !(n.is_u64() || n.is_i64()) => Err(invalid(
            Value::Null,
            "a numeric `id` must be an integer of at most 64 bits (no fraction, no exponent), \
             so that it comes back exactly; use a string id otherwise",
        )),
        Some(id @ (Value::String(_) | Value::Number(_))) => {
            Ok(Incoming::Request { id, method, params })
        }
        Some(_) => Err(invalid(Value::Null, "`id` must be a string or an integer")),
    }
}

/// `{}` as parameters.
fn empty_params() -> Box<RawValue> {
    RawValue::from_string("{}".to_string()).expect("{} is JSON")
}

/// Parameters as a JSON tree, read when the call runs.
///
/// # Errors
/// `parse_error` for JSON that [`parse`]'s skim let through but a full read refuses (a lone
/// UTF-16 surrogate escape, a number out of range, nesting over 128 levels).
pub fn params_value(params: &RawValue) -> Result<Value, RpcError> {
    serde_json::from_str(params.get()).map_err(|e| RpcError {
        rpc_code: codes::PARSE_ERROR,
        ..RpcError::new(
            "parse_error",
            format!("`params` is not valid JSON ({e}); send one JSON-RPC object per line"),
        )
    })
}

/// Reads lines of at most [`MAX_LINE`] bytes. An over-long line is reported once and skipped;
/// reading goes on with the next line.
pub struct LineReader<R> {
    input: R,
    buf: BytesMut,
    codec: LinesCodec,
    eof: bool,
}

/// One read: a line, or a line that was too long.
pub enum Line {
    /// A complete line (without the newline).
    Text(String),
    /// A line longer than [`MAX_LINE`] (its rest is skipped), or one that is not UTF-8.
    Refused(RpcError),
}

impl<R: AsyncRead + Unpin> LineReader<R> {
    /// Reads from `input`.
    pub fn new(input: R) -> Self {
        LineReader {
            input,
            buf: BytesMut::with_capacity(64 * 1024),
            codec: LinesCodec::new_with_max_length(MAX_LINE),
            eof: false,
        }
    }

    /// The next line; `None` at the end of the input (the app closed stdin).
    pub async fn next(&mut self) -> Option<Line> {
        loop {
            // The codec is used directly, not through `FramedRead`, which ends the stream
            // after the first error: an over-long line must not end the sidecar.
            let decoded = if self.eof {
                self.codec.decode_eof(&mut self.buf)
            } else {
                self.codec.decode(&mut self.buf)
            };
            match decoded {
                Ok(Some(line)) => return Some(Line::Text(line)),
                Ok(None) if self.eof => return None,
                Ok(None) => {}
                Err(LinesCodecError::MaxLineLengthExceeded) => {
                    let err = RpcError {
                        rpc_code: codes::INVALID_REQUEST,
                        ..RpcError::new(
                            "line_too_long",
                            format!(
                                "a line is longer than {MAX_LINE} bytes and was skipped; split \
                                 large input into several pane.input calls"
                            ),
                        )
                    };
                    return Some(Line::Refused(err.with("limit", json!(MAX_LINE))));
                }
                Err(LinesCodecError::Io(e)) => {
                    let err = RpcError {
                        rpc_code: codes::PARSE_ERROR,
                        ..RpcError::new(
                            "parse_error",
                            format!("the line is not UTF-8 ({e}); send JSON text"),
                        )
                    };
                    return Some(Line::Refused(err));
                }
            }
            match self.input.read_buf(&mut self.buf).await {
                Ok(0) | Err(_) => self.eof = true,
                Ok(_) => {}
            }
        }
    }
}

/// `msg` as one line, newline included.
fn line_of(msg: &Value) -> Vec<u8> {
    let mut line = serde_json::to_vec(msg).unwrap_or_default();
    line.push(b'\n');
    line
}

/// The stdout side: every reply, notification and question goes through one writer task, one
/// line each. Cheap to clone.
#[derive(Clone)]
pub struct Out {
    tx: mpsc::Sender<Outgoing>,
    asked: Arc<Asked>,
}

/// What the writer task takes.
enum Outgoing {
    /// One serialized message, newline included.
    Line(Vec<u8>),
    /// Answered once everything queued before it is written and flushed.
    Flush(tokio::sync::oneshot::Sender<()>),
}

/// Questions to the app awaiting an answer.
struct Asked {
    next: AtomicU64,
    waiting: Mutex<HashMap<u64, std::sync::mpsc::Sender<Result<Value, Value>>>>,
}

impl Out {
    /// Starts the writer task on `output`; it ends when every `Out` is dropped or a write fails
    /// (the app closed stdout: `closed` is then cancelled).
    pub fn start(
        output: impl AsyncWrite + Unpin + Send + 'static,
        closed: tokio_util::sync::CancellationToken,
    ) -> Out {
        let (tx, mut rx) = mpsc::channel::<Outgoing>(OUT_QUEUE);
        tokio::spawn(async move {
            let mut output = tokio::io::BufWriter::with_capacity(256 * 1024, output);
            let mut flushed = Vec::new();
            while let Some(first) = rx.recv().await {
                // Write what is queued as one batch, then flush once.
                let mut next = Some(first);
                let mut ok = true;
                while let (true, Some(msg)) = (ok, next.take()) {
                    match msg {
                        Outgoing::Line(line) => ok = output.write_all(&line).await.is_ok(),
                        Outgoing::Flush(done) => flushed.push(done),
                    }
                    next = rx.try_recv().ok();
                }
                if !ok || output.flush().await.is_err() {
                    tracing::info!("stdout closed; the app is gone");
                    closed.cancel();
                    return;
                }
                for done in flushed.drain(..) {
                    let _ = done.send(());
                }
            }
        });
        Out {
            tx,
            asked: Arc::new(Asked {
                next: AtomicU64::new(1),
                waiting: Mutex::new(HashMap::new()),
            }),
        }
    }

    async fn send(&self, msg: Value) {
        self.send_line(line_of(&msg)).await;
    }

    /// Queues one serialized message (newline included) for stdout.
    pub async fn send_line(&self, line: Vec<u8>) {
        // Fails only when the writer stopped (stdout closed); the sidecar is ending then.
        let _ = self.tx.send(Outgoing::Line(line)).await;
    }

    /// Waits until everything queued so far is written to stdout (or the writer stopped).
    pub async fn flush(&self) {
        let (done, written) = tokio::sync::oneshot::channel();
        if self.tx.send(Outgoing::Flush(done)).await.is_ok() {
            let _ = written.await;
        }
    }

    /// Answers request `id`.
    pub async fn reply(&self, id: Value, outcome: Result<Value, RpcError>) {
        let msg = match outcome {
            Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
            Err(e) => json!({"jsonrpc": "2.0", "id": id, "error": e.to_json()}),
        };
        self.send(msg).await;
    }

    /// Sends notification `method`. Waits while stdout's queue is full (the app reads slowly).
    pub async fn notify(&self, method: &str, params: Value) {
        self.send(json!({"jsonrpc": "2.0", "method": method, "params": params}))
            .await;
    }

    /// Sends notification `method` with the params `make` returns, or nothing when it returns
    /// `None`. Waits for room in stdout's queue first, then calls `make` and queues its message
    /// without waiting again: a task aborted here has either not called `make` or has queued
    /// what it made, so state `make` changes never disagrees with what the app is sent.
    pub async fn notify_if(&self, method: &str, make: impl FnOnce() -> Option<Value>) {
        // Fails only when the writer stopped (stdout closed); the sidecar is ending then.
        let Ok(permit) = self.tx.reserve().await else {
            return;
        };
        if let Some(params) = make() {
            let msg = json!({"jsonrpc": "2.0", "method": method, "params": params});
            permit.send(Outgoing::Line(line_of(&msg)));
        }
    }

    /// Asks the app `method` and waits (this thread) up to [`APP_ANSWER_WITHIN`] for its
    /// answer. `None` when it did not answer in time, answered with an error, or is gone. Call
    /// it only on a blocking thread: the SSH transport runs its callbacks there.
    pub fn ask_blocking(&self, method: &str, params: Value) -> Option<Value> {
        let id = self.asked.next.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = std::sync::mpsc::channel();
        self.waiting().insert(id, tx);
        let msg = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let answer = match self.tx.blocking_send(Outgoing::Line(line_of(&msg))) {
            Ok(()) => rx.recv_timeout(APP_ANSWER_WITHIN).ok(),
            Err(_) => None,
        };
        self.waiting().remove(&id);
        match answer {
            Some(Ok(result)) => Some(result),
            Some(Err(error)) => {
                tracing::info!(%method, %error, "the app answered a question with an error");
                None
            }
            None => {
                tracing::warn!(%method, "the app did not answer in time; taken as no");
                None
            }
        }
    }

    /// Hands the app's answer to the question that waits for it; `false` for an unknown id.
    pub fn answered(&self, id: u64, outcome: Result<Value, Value>) -> bool {
        match self.waiting().remove(&id) {
            Some(tx) => tx.send(outcome).is_ok(),
            None => false,
        }
    }

    fn waiting(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<u64, std::sync::mpsc::Sender<Result<Value, Value>>>>
    {
        // Whole-map operations only: a panic cannot leave it torn.
        self.asked.waiting.lock_unpoisoned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_classified_and_bad_ones_named() {
        let ok = parse(br#"{"jsonrpc":"2.0","id":7,"method":"host.open","params":{"a":1}}"#);
        assert!(matches!(ok, Ok(Incoming::Request { ref method, .. }) if method == "host.open"));
        let big = parse(br#"{"jsonrpc":"2.0","id":18446744073709551615,"method":"x"}"#);
        assert!(matches!(big, Ok(Incoming::Request { id, .. }) if id == json!(u64::MAX)));
        let negative = parse(br#"{"jsonrpc":"2.0","id":-9223372036854775808,"method":"x"}"#);
        assert!(matches!(negative, Ok(Incoming::Request { id, .. }) if id == json!(i64::MIN)));
        let note = parse(br#"{"jsonrpc":"2.0","method":"pane.ack"}"#);
        assert!(matches!(note, Ok(Incoming::Notification { .. })));
        let answer = parse(br#"{"jsonrpc":"2.0","id":3,"result":{"accept":true}}"#);
        assert!(matches!(
            answer,
            Ok(Incoming::Answer {
                id: 3,
                outcome: Ok(_)
            })
        ));
        for (line, code, id) in [
            (&b"{not json"[..], "parse_error", Value::Null),
            (b"[1,2]", "invalid_request", Value::Null),
            (br#"{"id":1,"method":"x"}"#, "invalid_request", json!(1)),
            (
                br#"{"jsonrpc":"2.0","id":2,"method":5}"#,
                "invalid_request",
                json!(2),
            ),
            (
                br#"{"jsonrpc":"2.0","id":"a","method":"x","params":[1]}"#,
                "invalid_params",
                json!("a"),
            ),
            // Would come back as 1.8446744073709552e19, an id the app never sent.
            (
                br#"{"jsonrpc":"2.0","id":18446744073709551616,"method":"x"}"#,
                "invalid_request",
                Value::Null,
            ),
            (
                br#"{"jsonrpc":"2.0","id":1.5,"method":"x"}"#,
                "invalid_request",
                Value::Null,
            ),
            // Neither a request to run nor an answer to take.
            (
                br#"{"jsonrpc":"2.0","id":4,"method":"pane.kill","result":{}}"#,
                "invalid_request",
                json!(4),
            ),
        ] {
            let (got_id, err) = parse(line).unwrap_err();
            assert_eq!(err.code, code, "{}", String::from_utf8_lossy(line));
            assert_eq!(got_id, id);
        }
    }

    #[tokio::test]
    async fn an_over_long_line_is_refused_and_the_next_one_read() {
        let mut input = vec![b'x'; MAX_LINE + 10];
        input.extend_from_slice(b"\n{\"ok\":1}\nlast");
        let mut lines = LineReader::new(&input[..]);
        assert!(matches!(lines.next().await, Some(Line::Refused(e)) if e.code == "line_too_long"));
        assert!(matches!(lines.next().await, Some(Line::Text(t)) if t == "{\"ok\":1}"));
        assert!(matches!(lines.next().await, Some(Line::Text(t)) if t == "last"));
        assert!(lines.next().await.is_none());
    }
}
