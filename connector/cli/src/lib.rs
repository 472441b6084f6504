//! What the `relay` and `relayctl` binaries share: start-up, the destination argument and the
//! SSH flags with their terminal callbacks.
//!
//! The binaries live in this crate (`src/bin/relay`, `src/bin/relayctl`) and not in
//! `relay-connector`, so that an app embedding the library builds no argument parser, log
//! subscriber or terminal prompt.
#![deny(missing_docs)]

pub mod destination;
pub mod ssh_args;
pub mod sys;

use std::future::Future;
use std::io::IsTerminal;

/// Sets up logging to stderr (filter from `RELAY_LOG`, default `warn`: a terminal client prints
/// only what the user should see) and runs `main` on a tokio runtime of `workers` threads (1:
/// the current thread only, as a terminal client needs; `relay serve` uses two, so that
/// encoding one pane's output and reading the app's next line run side by side).
///
/// # Errors
/// The runtime could not be built, or `main`'s own error.
pub fn run_on<T>(
    workers: usize,
    main: impl Future<Output = anyhow::Result<T>>,
) -> anyhow::Result<T> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("RELAY_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .init();
    let runtime = if workers <= 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(workers)
            .enable_all()
            .build()?
    };
    let result = runtime.block_on(main);
    // A write to a stdout nobody reads blocks a thread of the runtime's pool; leaving must not
    // wait for it (rule G: SIGTERM ends relay at once).
    runtime.shutdown_timeout(std::time::Duration::from_millis(100));
    result
}
