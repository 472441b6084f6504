//! relayctl's output. A reader that goes away (`relayctl leases | head -1`) is not a failure of
//! relayctl: a listing's write to a closed stdout becomes [`StdoutClosed`], which `main` turns
//! into exit status 0, as ripgrep does. A command that acts (kill, gc, protect, forget) goes on
//! without its reader ([`show`]): its exit status says how the action went. SIGPIPE stays ignored (Rust's default) so that a write to a gone
//! agent bridge is an error relayctl reports, not a silent death. Notes on stderr never fail.

use std::fmt::Display;
use std::io::{self, Write};

/// Standard output was closed by its reader (EPIPE).
#[derive(Debug, thiserror::Error)]
#[error("standard output was closed")]
pub struct StdoutClosed;

/// Writes `text` to stdout and flushes it.
///
/// # Errors
/// [`StdoutClosed`] when the reader has gone; any other write error, with context.
pub fn print(text: impl Display) -> anyhow::Result<()> {
    let mut out = io::stdout().lock();
    write!(out, "{text}")
        .and_then(|()| out.flush())
        .map_err(|e| match e.kind() {
            io::ErrorKind::BrokenPipe => anyhow::Error::new(StdoutClosed),
            _ => anyhow::Error::new(e).context("writing to standard output"),
        })
}

/// Like [`print`] for commands that act: a closed stdout is ignored, so the action is not
/// abandoned half-way because nobody reads what it prints.
///
/// # Errors
/// Write errors other than a closed stdout.
pub fn show(text: impl Display) -> anyhow::Result<()> {
    match print(text) {
        Err(e) if e.downcast_ref::<StdoutClosed>().is_some() => Ok(()),
        other => other,
    }
}

/// `eprintln!` that ignores a closed or failing stderr (a note must never end relayctl).
macro_rules! note {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr().lock(), $($arg)*);
    }};
}
pub(crate) use note;
