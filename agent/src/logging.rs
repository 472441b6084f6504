//! Daemon logging: `$RELAY_HOME/log/agent.log` through tracing-appender, filtered by env
//! `RELAY_LOG` (default `info`). The bridge never logs to stdout (it carries frames).

use anyhow::Context;
use tracing_appender::non_blocking::WorkerGuard;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{fmt, EnvFilter, Layer};

use crate::paths::Paths;

/// Installs the global subscriber. Keep the guard alive: dropping it flushes the log.
///
/// # Errors
/// When the log directory cannot be used or a subscriber is already installed.
pub fn init(paths: &Paths, also_stderr: bool) -> anyhow::Result<WorkerGuard> {
    let appender = tracing_appender::rolling::never(paths.log_dir(), "agent.log");
    let (writer, guard) = tracing_appender::non_blocking(appender);
    let filter = || EnvFilter::try_from_env("RELAY_LOG").unwrap_or_else(|_| EnvFilter::new("info"));
    let file = fmt::layer()
        .with_ansi(false)
        .with_writer(writer)
        .with_filter(filter());
    let stderr = also_stderr.then(|| {
        fmt::layer()
            .with_writer(std::io::stderr)
            .with_filter(filter())
    });
    tracing_subscriber::registry()
        .with(file)
        .with(stderr)
        .try_init()
        .context("installing the log subscriber")?;
    Ok(guard)
}
