//! A test app for `relay serve --stdio`: spawns the real sidecar, writes JSON-RPC lines to its
//! stdin and reads its stdout on a thread, keeping notifications (and the sidecar's own
//! questions) until a test asks for them.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{json, Value};

use crate::LIVENESS;

/// A running `relay serve --stdio`.
pub struct Sidecar {
    child: Child,
    stdin: Option<ChildStdin>,
    rx: Receiver<Value>,
    /// Messages read but not taken yet (notifications, questions, stray answers).
    kept: VecDeque<Value>,
    next_id: u64,
}

/// Base64 of `data` (standard alphabet), as the sidecar reads and writes bytes.
pub fn b64(data: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(data)
}

/// The bytes of base64 text; panics on bad base64 (the sidecar must not send any).
pub fn unb64(text: &str) -> Vec<u8> {
    base64::engine::general_purpose::STANDARD
        .decode(text)
        .expect("the sidecar sends valid base64")
}

impl Sidecar {
    /// Starts `cmd serve --stdio` (`cmd` is the `relay` binary with the test's environment).
    pub fn spawn(mut cmd: Command) -> Sidecar {
        let mut child = cmd
            .args(["serve", "--stdio"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("starting relay serve --stdio");
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                let v: Value = serde_json::from_str(&line)
                    .unwrap_or_else(|e| panic!("sidecar wrote a non-JSON line ({e}): {line}"));
                if tx.send(v).is_err() {
                    return;
                }
            }
        });
        Sidecar {
            stdin: child.stdin.take(),
            child,
            rx,
            kept: VecDeque::new(),
            next_id: 1,
        }
    }

    /// Starts `relay serve --stdio` of this build with `home`'s environment (its local agent).
    pub fn local(home: &crate::TestHome) -> Sidecar {
        Sidecar::spawn(home.command(&crate::bins().relay))
    }

    /// `host.open` of `"local"`; returns the host id.
    pub fn open_local(&mut self) -> String {
        let r = self
            .call("host.open", json!({"destination": "local"}))
            .expect("host.open of local");
        r["host"].as_str().expect("a host id").to_string()
    }

    /// Writes one raw line (a newline is appended).
    pub fn send_line(&mut self, line: &[u8]) {
        let stdin = self.stdin.as_mut().expect("stdin still open");
        // One write per line: a line of at most 4 KiB then reaches the pipe whole, even beside
        // another writer (`stdin_clone`).
        let mut whole = Vec::with_capacity(line.len() + 1);
        whole.extend_from_slice(line);
        whole.push(b'\n');
        stdin.write_all(&whole).expect("writing to the sidecar");
        stdin.flush().expect("writing to the sidecar");
    }

    /// Sends request `method` and returns its id.
    pub fn request(&mut self, method: &str, params: Value) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        let msg = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        self.send_line(msg.to_string().as_bytes());
        id
    }

    /// Calls `method`: `Ok(result)` or `Err(error object)`.
    pub fn call(&mut self, method: &str, params: Value) -> Result<Value, Value> {
        let id = self.request(method, params);
        self.answer(&json!(id))
    }

    /// Calls `method` and returns the error's stable code (`error.data.code`); panics when the
    /// call succeeded.
    pub fn error_code(&mut self, method: &str, params: Value) -> String {
        match self.call(method, params) {
            Ok(v) => panic!("{method} succeeded ({v}); an error was expected"),
            Err(e) => e["data"]["code"].as_str().unwrap_or_default().to_string(),
        }
    }

    /// The answer to request `id`.
    pub fn answer(&mut self, id: &Value) -> Result<Value, Value> {
        let msg = self.take("an answer", |m| m.get("method").is_none() && m["id"] == *id);
        match msg.get("error") {
            Some(e) => Err(e.clone()),
            None => Ok(msg["result"].clone()),
        }
    }

    /// The first message (kept or new) `pick` accepts, waiting up to [`LIVENESS`]; panics naming
    /// `what` when none comes.
    pub fn take(&mut self, what: &str, pick: impl FnMut(&Value) -> bool) -> Value {
        self.take_within(what, LIVENESS, pick)
    }

    /// [`Sidecar::take`], waiting up to `within`.
    pub fn take_within(
        &mut self,
        what: &str,
        within: Duration,
        mut pick: impl FnMut(&Value) -> bool,
    ) -> Value {
        if let Some(i) = self.kept.iter().position(&mut pick) {
            return self.kept.remove(i).expect("index in range");
        }
        let deadline = Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.rx.recv_timeout(left) {
                Ok(m) if pick(&m) => return m,
                Ok(m) => self.kept.push_back(m),
                Err(RecvTimeoutError::Timeout) => {
                    panic!("no {what} within {within:?}; {}", self.kept_summary())
                }
                Err(RecvTimeoutError::Disconnected) => {
                    panic!(
                        "the sidecar closed stdout before {what}; {}",
                        self.kept_summary()
                    )
                }
            }
        }
    }

    /// The first message (kept or new) `pick` accepts, waiting up to `within`; `None` when
    /// none came.
    pub fn poll_within(
        &mut self,
        within: Duration,
        mut pick: impl FnMut(&Value) -> bool,
    ) -> Option<Value> {
        if let Some(i) = self.kept.iter().position(&mut pick) {
            return self.kept.remove(i);
        }
        let deadline = Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.rx.recv_timeout(left) {
                Ok(m) if pick(&m) => return Some(m),
                Ok(m) => self.kept.push_back(m),
                Err(_) => return None,
            }
        }
    }

    /// The messages kept, for a failure message: all of them when few, else how many and the
    /// last 20 that are not answers (a flood's answers would bury the rest).
    fn kept_summary(&self) -> String {
        const SHOWN: usize = 20;
        if self.kept.len() <= SHOWN {
            return format!("kept: {:?}", self.kept);
        }
        let mut notes: Vec<&Value> = self
            .kept
            .iter()
            .rev()
            .filter(|m| m.get("method").is_some())
            .take(SHOWN)
            .collect();
        notes.reverse();
        format!(
            "kept {} messages; the last notifications or questions: {notes:?}",
            self.kept.len()
        )
    }

    /// The first message read so far that `pick` accepts, without waiting.
    pub fn try_take(&mut self, mut pick: impl FnMut(&Value) -> bool) -> Option<Value> {
        while let Ok(m) = self.rx.try_recv() {
            self.kept.push_back(m);
        }
        let i = self.kept.iter().position(&mut pick)?;
        self.kept.remove(i)
    }

    /// The next notification `method` (for the pane of PTY `pty`, when given).
    pub fn notification(&mut self, method: &str, pty: Option<&str>) -> Value {
        let what = format!("{method} notification");
        self.take(&what, |m| {
            m["method"] == method
                && m.get("id").is_none()
                && pty.is_none_or(|p| m["params"]["binding"]["pty"] == p)
        })["params"]
            .clone()
    }

    /// Reads pane `binding`'s stream until its text contains `needle`, acking as it goes; returns
    /// the text read and the next offset. Panics on a gap or a final event first.
    pub fn read_until(&mut self, binding: &Value, needle: &str) -> (String, u64) {
        let pty = binding["pty"].as_str().expect("binding.pty").to_string();
        let mut text = Vec::new();
        let mut next = 0;
        loop {
            let what = format!("output of {pty} containing {needle:?}");
            let m = self.take(&what, |m| {
                m.get("id").is_none()
                    && m["params"]["binding"]["pty"] == pty.as_str()
                    && m["method"].as_str().is_some_and(|s| s.starts_with("pane."))
            });
            let p = &m["params"];
            match m["method"].as_str().unwrap_or_default() {
                "pane.output" => {
                    let data = unb64(p["data"].as_str().unwrap_or_default());
                    next = p["offset"].as_u64().unwrap_or_default() + data.len() as u64;
                    text.extend_from_slice(&data);
                    self.notify("pane.ack", json!({"binding": binding, "offset": next}));
                }
                "pane.snapshot" => {
                    next = p["offset"].as_u64().unwrap_or_default();
                    text.extend_from_slice(&unb64(p["data"].as_str().unwrap_or_default()));
                }
                "pane.event" | "pane.resumed" | "pane.interrupted" => {}
                other => panic!("{other} while reading {pty}: {p}"),
            }
            let s = String::from_utf8_lossy(&text).into_owned();
            if s.contains(needle) {
                return (s, next);
            }
        }
    }

    /// How many messages read so far (kept, none taken) `pick` accepts, without waiting.
    pub fn count_read(&mut self, pick: impl FnMut(&&Value) -> bool) -> usize {
        while let Ok(m) = self.rx.try_recv() {
            self.kept.push_back(m);
        }
        self.kept.iter().filter(pick).count()
    }

    /// Sends notification `method` (no answer comes).
    pub fn notify(&mut self, method: &str, params: Value) {
        let msg = json!({"jsonrpc": "2.0", "method": method, "params": params});
        self.send_line(msg.to_string().as_bytes());
    }

    /// Answers the sidecar's question `id` with `result`.
    pub fn reply(&mut self, id: &Value, result: Value) {
        let msg = json!({"jsonrpc": "2.0", "id": id, "result": result});
        self.send_line(msg.to_string().as_bytes());
    }

    /// The sidecar's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// A second handle on the sidecar's stdin, for a thread that writes beside the test (each
    /// line in one `write` of at most 4 KiB, so lines of two writers never mix).
    pub fn stdin_clone(&self) -> std::fs::File {
        use std::os::fd::AsFd;
        let stdin = self.stdin.as_ref().expect("stdin still open");
        std::fs::File::from(stdin.as_fd().try_clone_to_owned().expect("dup stdin"))
    }

    /// Closes stdin (the app quit) and waits up to [`LIVENESS`] for the sidecar's exit code.
    pub fn close(mut self) -> Option<i32> {
        self.close_stdin();
        self.wait_exit()
    }

    /// Closes stdin (the app quit); answers already on their way can still be read.
    pub fn close_stdin(&mut self) {
        self.stdin = None;
    }

    /// Waits up to [`LIVENESS`] for the sidecar's exit code.
    pub fn wait_exit(mut self) -> Option<i32> {
        let deadline = Instant::now() + LIVENESS;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status.code();
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        None
    }

    /// Kills the sidecar (SIGKILL: an app crash takes its sidecar with it).
    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Sidecar {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
