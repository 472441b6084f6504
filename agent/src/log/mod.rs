//! Daemon logging: `$RELAY_HOME/log/agent.log` (mode 0600), filtered by env `RELAY_LOG`
//! (default `info`). The bridge never logs to stdout (it carries frames).
//!
//! The file is a [`LogFile`]: rotated at 2 MiB to `agent.log.1` (at most 4 MiB on disk), written
//! only while the disk keeps a reserve free for the lease journal (errors may use the reserve),
//! and made of whole lines. tracing-appender's rolling appender rotates by time only, so it
//! cannot bound the size. Lines are written synchronously (one `write` per line, like the
//! journal); warnings a peer can trigger at will are rate-limited first (see
//! [`crate::log::limit`]).
//!
//! Colour: the file never gets ANSI escape codes; `--foreground` stderr only when it is a
//! terminal. Text printed to stderr that is read by a program (the connector shows the bridge's
//! stderr to the user) goes through [`plain`].

pub mod file;
pub mod limit;

use std::borrow::Cow;
use std::fs;
use std::io::{self, IsTerminal, Write};
use std::os::unix::fs::PermissionsExt;
use std::sync::{Arc, Mutex};

use anyhow::Context;
use tracing::{Level, Metadata};
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{fmt, EnvFilter, Layer};

use crate::log::file::{LogFile, MAX_LOG_BYTES};
use crate::paths::{annotate, Paths};
use crate::runtime::LockExt;

/// Name of the log file in the log directory.
pub const LOG_FILE: &str = "agent.log";

/// Installs the global subscriber.
///
/// # Errors
/// When the log file cannot be created or a subscriber is already installed.
pub fn init(paths: &Paths, also_stderr: bool) -> anyhow::Result<()> {
    let path = paths.log_dir().join(LOG_FILE);
    // Created private; an older, wider file is tightened.
    let log = LogFile::open(&path, MAX_LOG_BYTES).map_err(|e| annotate(e, "create", &path))?;
    let meta = fs::symlink_metadata(&path).map_err(|e| annotate(e, "inspect", &path))?;
    if meta.is_file() && meta.permissions().mode() & 0o077 != 0 {
        fs::set_permissions(&path, fs::Permissions::from_mode(0o600))
            .map_err(|e| annotate(e, "chmod 0600", &path))?;
    }
    let filter = || EnvFilter::try_from_env("RELAY_LOG").unwrap_or_else(|_| EnvFilter::new("info"));
    let file = fmt::layer()
        .with_ansi(false)
        .with_writer(SharedLog(Arc::new(Mutex::new(log))))
        .with_filter(filter());
    let stderr = also_stderr.then(|| {
        fmt::layer()
            .with_ansi(std::io::stderr().is_terminal())
            .with_writer(std::io::stderr)
            .with_filter(filter())
    });
    tracing_subscriber::registry()
        .with(file)
        .with(stderr)
        .try_init()
        .context("installing the log subscriber")?;
    Ok(())
}

/// The log file shared by every thread that logs; error lines are marked urgent.
struct SharedLog(Arc<Mutex<LogFile>>);

/// One event's writer: the formatter writes the whole line in one call.
struct LineWriter<'a> {
    log: &'a Mutex<LogFile>,
    urgent: bool,
}

impl<'a> MakeWriter<'a> for SharedLog {
    type Writer = LineWriter<'a>;

    fn make_writer(&'a self) -> Self::Writer {
        LineWriter {
            log: &self.0,
            urgent: false,
        }
    }

    fn make_writer_for(&'a self, meta: &Metadata<'_>) -> Self::Writer {
        LineWriter {
            log: &self.0,
            urgent: *meta.level() == Level::ERROR,
        }
    }
}

impl Write for LineWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let mut log = self.log.lock_unpoisoned();
        log.write_line(buf, self.urgent);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// `text` without ANSI escape sequences and other control characters (newlines and tabs stay),
/// for messages a program reads from stderr.
pub fn plain(text: &str) -> Cow<'_, str> {
    let clean = |c: char| !c.is_control() || c == '\n' || c == '\t';
    if text.chars().all(clean) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // CSI `ESC [ params final` or a two-character escape `ESC x`.
            if chars.next_if_eq(&'[').is_some() {
                while chars.next().is_some_and(|p| !('@'..='~').contains(&p)) {}
            } else {
                chars.next();
            }
        } else if clean(c) {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_strips_escape_sequences_and_controls() {
        let cases = [
            ("no colour\nhere", "no colour\nhere"),
            (
                "\u{1b}[2m2026\u{1b}[0m \u{1b}[31mERROR\u{1b}[0m daemon failed",
                "2026 ERROR daemon failed",
            ),
            ("bell\u{7} and \u{1b}M reverse", "bell and  reverse"),
            ("tab\tkept\r", "tab\tkept"),
            ("cut \u{1b}[", "cut "),
        ];
        for (input, want) in cases {
            assert_eq!(plain(input), want, "{input:?}");
        }
    }
}
