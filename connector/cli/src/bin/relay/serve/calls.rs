//! The calls the sidecar runs on tasks of their own (docs/embedding.md, "Limits"): how many may
//! be in flight, how many bytes of parameters they may hold, and the rule that each request is
//! answered exactly once — by its task, or at exit by a timeout error.
//!
//! A call over a limit is refused at once with `busy` instead of waiting: the reader then goes
//! on with the next line, so a flood of control calls never holds up the keystrokes and acks
//! behind it, and memory stays bounded whatever the app sends.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use relay_connector::LockExt;
use serde_json::{json, Value};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::rpc::RpcError;

/// Most calls in flight at once (requests and notifications that run on their own task: opens,
/// attaches, hydrates, kills, signals, host closes). Room for an app that restores a few
/// hundred panes in one go.
pub const MAX_CALLS: usize = 256;

/// Most bytes of request lines held by the calls in flight: 4 MiB, one line of the longest
/// kind ([`super::rpc::MAX_LINE`]), so such a line is always taken when nothing else runs.
/// A call holds its parameters as a JSON tree, up to ~20× its line (measured: a 3.2 MB
/// `workspace.kill_all` of bindings held ~60 MB), and ordinary calls are well under 1 KiB.
pub const MAX_CALL_BYTES: usize = super::rpc::MAX_LINE;

/// The calls in flight.
pub struct Calls {
    count: Arc<Semaphore>,
    bytes: Arc<Semaphore>,
    /// Requests in flight by serial: the id to answer under. Whoever removes an entry
    /// answers it.
    open: Mutex<HashMap<u64, Value>>,
    next: AtomicU64,
    tasks: tokio_util::task::TaskTracker,
}

/// One admitted call: its room under the limits, held until it is dropped.
pub struct Admitted {
    serial: u64,
    _count: OwnedSemaphorePermit,
    _bytes: OwnedSemaphorePermit,
}

impl Calls {
    /// No call in flight.
    pub fn new() -> Calls {
        Calls {
            count: Arc::new(Semaphore::new(MAX_CALLS)),
            bytes: Arc::new(Semaphore::new(MAX_CALL_BYTES)),
            open: Mutex::new(HashMap::new()),
            next: AtomicU64::new(1),
            tasks: tokio_util::task::TaskTracker::new(),
        }
    }

    /// Admits a call read from a line of `line_len` bytes, answered under `id` (`None`: a
    /// notification).
    ///
    /// # Errors
    /// `busy` (transient) when [`MAX_CALLS`] calls are in flight or their lines hold
    /// [`MAX_CALL_BYTES`]; nothing of the call was done.
    pub fn admit(&self, id: Option<&Value>, line_len: usize) -> Result<Admitted, RpcError> {
        let weight = u32::try_from(line_len.clamp(1, MAX_CALL_BYTES)).unwrap_or(u32::MAX);
        let count = self.count.clone().try_acquire_owned();
        let bytes = self.bytes.clone().try_acquire_many_owned(weight);
        let (count, bytes) = match (count, bytes) {
            (Ok(count), Ok(bytes)) => (count, bytes),
            (Err(_), _) => return Err(busy(format!("already runs {MAX_CALLS} calls"))),
            (_, Err(_)) => {
                return Err(busy(format!(
                    "already holds {} MiB of request lines in the calls it runs",
                    MAX_CALL_BYTES >> 20
                )))
            }
        };
        let serial = self.next.fetch_add(1, Ordering::Relaxed);
        if let Some(id) = id {
            self.open.lock_unpoisoned().insert(serial, id.clone());
        }
        Ok(Admitted {
            serial,
            _count: count,
            _bytes: bytes,
        })
    }

    /// Runs `call` on a task of its own, tracked until [`Calls::finish`].
    pub fn spawn(&self, call: impl std::future::Future<Output = ()> + Send + 'static) {
        self.tasks.spawn(call);
    }

    /// Takes the right to answer `call`: `Some(id)` for a request nobody answered yet,
    /// `None` for a notification or a request already answered at exit.
    pub fn claim(&self, call: &Admitted) -> Option<Value> {
        self.open.lock_unpoisoned().remove(&call.serial)
    }

    /// Waits for every call in flight to end, taking no more.
    pub async fn finish(&self) {
        self.tasks.close();
        self.tasks.wait().await;
    }

    /// Takes the right to answer every request still in flight (the sidecar is exiting):
    /// their ids.
    pub fn unanswered(&self) -> Vec<Value> {
        self.open
            .lock_unpoisoned()
            .drain()
            .map(|(_, id)| id)
            .collect()
    }

    /// Calls in flight now.
    #[cfg(test)]
    pub fn in_flight(&self) -> usize {
        MAX_CALLS - self.count.available_permits()
    }
}

/// The refusal of a call over a limit; `why` says which.
fn busy(why: String) -> RpcError {
    RpcError::new(
        "busy",
        format!(
            "the sidecar {why}, the most it runs at once; nothing of this call was done: wait \
             for answers, then send it again"
        ),
    )
    .with("transient", json!(true))
    .with("limit", json!(MAX_CALLS))
    .with("bytes_limit", json!(MAX_CALL_BYTES))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_over_either_limit_are_refused_and_room_comes_back() {
        let calls = Calls::new();
        let held: Vec<Admitted> = (0..MAX_CALLS)
            .map(|i| calls.admit(Some(&json!(i)), 10).unwrap())
            .collect();
        let e = calls.admit(Some(&json!("one more")), 10).err().unwrap();
        assert_eq!(e.code, "busy");
        assert_eq!(e.data["transient"], json!(true));
        assert_eq!(calls.in_flight(), MAX_CALLS);
        drop(held);
        assert_eq!(calls.in_flight(), 0);

        let big = super::super::rpc::MAX_LINE;
        let held: Vec<Admitted> = (0..MAX_CALL_BYTES / big)
            .map(|_| calls.admit(None, big).unwrap())
            .collect();
        assert_eq!(calls.admit(None, big).err().unwrap().code, "busy");
        // A refused call took no room of either kind.
        assert_eq!(calls.in_flight(), held.len());
        drop(held);
        calls.admit(None, big).unwrap();
    }

    #[test]
    fn each_request_is_answered_once_by_its_task_or_at_exit() {
        let calls = Calls::new();
        let a = calls.admit(Some(&json!(1)), 10).unwrap();
        let b = calls.admit(Some(&json!("b")), 10).unwrap();
        let note = calls.admit(None, 10).unwrap();
        assert_eq!(calls.claim(&a), Some(json!(1)));
        assert_eq!(calls.claim(&a), None, "answered once");
        assert_eq!(calls.claim(&note), None, "a notification gets no answer");
        assert_eq!(calls.unanswered(), vec![json!("b")]);
        assert_eq!(
            calls.claim(&b),
            None,
            "answered at exit, not again by its task"
        );
    }
}
