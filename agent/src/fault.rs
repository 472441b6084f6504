//! Fault points for tests, compiled into debug builds only: the release agents relay deploys
//! (`deploy/build-agents.sh`) have none, and a debug build fails at a point only when its
//! environment names it.
//!
//! A test starts the daemon with `RELAY_TEST_FAULT_AT=<point>`; the code at that point then
//! fails the way the point's documentation says (a panic, an abort, damaged data), so a
//! recovery path that real failures reach rarely runs in every test run.
//!
//! Points (all in the new code of a live upgrade, `daemon::resume`, never in the old code taking
//! its shells back):
//! - `resume-start`: a panic before the handed-over state is read;
//! - `resume-state`: the state read is cut to half its length (a damaged state);
//! - `resume-serve`: the second handed-over PTY cannot be served (as if registering its master
//!   with the reactor failed);
//! - `resume-adopt`: an abort (`SIGABRT`) half-way through adopting the handed-over PTYs, after
//!   a pause long enough for any PTY adopted so far to have output waiting.

/// Whether the environment names `point` as the fault to inject (debug builds; always `false`
/// in release builds).
pub fn at(point: &str) -> bool {
    #[cfg(debug_assertions)]
    {
        std::env::var("RELAY_TEST_FAULT_AT").ok().as_deref() == Some(point)
    }
    #[cfg(not(debug_assertions))]
    {
        let _ = point;
        false
    }
}
