//! Pause points for tests, compiled into debug builds only: the release agents relay deploys
//! (`deploy/build-agents.sh`) have none, and a debug build does nothing at a point unless its
//! environment names it.
//!
//! A test starts the daemon with `RELAY_TEST_PAUSE_AT=<point>` and `RELAY_TEST_PAUSE_DIR=<dir>`.
//! The first time the daemon reaches that point it creates `<dir>/<point>.reached`, then waits
//! until the test creates `<dir>/<point>.go` (at most [`LONGEST`]), so the test can change
//! something at exactly that moment: a race made deterministic. Later passes do not stop.
//!
//! Points: `policy-end` (`lifecycle/timers.rs`: a timer has read the facts and the policy says
//! end; the end and its re-check under the book lock come next).

use std::time::Duration;

/// Longest wait at a point; then the daemon goes on as if told to.
pub const LONGEST: Duration = Duration::from_secs(60);

/// Waits at `point` if the environment names it (debug builds; nothing in release builds).
pub fn here(point: &str) {
    #[cfg(debug_assertions)]
    debug::here(point);
    #[cfg(not(debug_assertions))]
    let _ = point;
}

#[cfg(debug_assertions)]
mod debug {
    use std::path::PathBuf;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Instant;

    static PASSED: AtomicBool = AtomicBool::new(false);

    pub fn here(point: &str) {
        if std::env::var("RELAY_TEST_PAUSE_AT").ok().as_deref() != Some(point) {
            return;
        }
        let Some(dir) = std::env::var_os("RELAY_TEST_PAUSE_DIR").map(PathBuf::from) else {
            return;
        };
        if PASSED.swap(true, Ordering::SeqCst) {
            return;
        }
        tracing::warn!(point, "test pause point reached; waiting for {point}.go");
        let wait = || {
            let _ = std::fs::write(dir.join(format!("{point}.reached")), b"");
            let go = dir.join(format!("{point}.go"));
            let until = Instant::now() + super::LONGEST;
            while !go.exists() && Instant::now() < until {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
        };
        // Off the runtime's worker, so the requests the test sends meanwhile are served.
        match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
            Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(wait),
            _ => wait(),
        }
    }
}
