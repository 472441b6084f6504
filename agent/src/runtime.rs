//! Small helpers for running code on the daemon's tokio runtime, shared by every layer.

/// Runs `f`, which may block for a while, without stalling the runtime's other tasks.
pub(crate) fn blocking<T>(f: impl FnOnce() -> T) -> T {
    use tokio::runtime::{Handle, RuntimeFlavor};
    match Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(RuntimeFlavor::MultiThread) => tokio::task::block_in_place(f),
        _ => f(),
    }
}

/// [`Mutex::lock`](std::sync::Mutex::lock) for data that stays consistent even if a holder
/// panicked: every lock in the agent guards state that is valid between statements (a ring, a
/// table, a flag), so a panic in one PTY's task must not take the lock — and with it every other
/// pane — down too.
pub(crate) trait LockExt<T: ?Sized> {
    /// Locks, taking the guard of a poisoned mutex instead of failing (see
    /// [`PoisonError::into_inner`](std::sync::PoisonError::into_inner)).
    fn lock_unpoisoned(&self) -> std::sync::MutexGuard<'_, T>;
}

impl<T: ?Sized> LockExt<T> for std::sync::Mutex<T> {
    fn lock_unpoisoned(&self) -> std::sync::MutexGuard<'_, T> {
        self.lock().unwrap_or_else(|p| p.into_inner())
    }
}
