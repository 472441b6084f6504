//! Locking that survives a panic elsewhere.

use std::sync::{Mutex, MutexGuard};

/// [`Mutex::lock`] for data that stays consistent even if a holder panicked: every lock in relay
/// guards state that is valid between statements (a map, a counter, a buffer), so a panic in one
/// task must not take the lock — and with it every other pane or host — down too.
pub trait LockExt<T: ?Sized> {
    /// Locks, taking the guard of a poisoned mutex instead of failing (see
    /// [`PoisonError::into_inner`](std::sync::PoisonError::into_inner)).
    fn lock_unpoisoned(&self) -> MutexGuard<'_, T>;
}

impl<T: ?Sized> LockExt<T> for Mutex<T> {
    fn lock_unpoisoned(&self) -> MutexGuard<'_, T> {
        self.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mutex_poisoned_by_a_panic_still_locks_with_its_data() {
        let m = std::sync::Arc::new(Mutex::new(7));
        let m2 = m.clone();
        let _ = std::thread::spawn(move || {
            let _g = m2.lock().unwrap();
            panic!("poison it");
        })
        .join();
        assert!(m.is_poisoned());
        assert_eq!(*m.lock_unpoisoned(), 7);
    }
}
