//! Rate limits for warnings a peer can trigger at will (a connection closed before Hello, a bad
//! frame, a refused uid): without them 12,000 connect/close cycles wrote 12,000 lines in 0.1 s.
//!
//! A [`Throttle`] lets [`BURST`] lines through per [`WINDOW`]; the rest are counted, and one
//! summary line — "… 11,999 more like this in the last 10 s" — is written when the window ends
//! (by a one-shot timer armed at the first suppressed line, so a flood that stops is still
//! summarized). The counting core, [`Window`], is sans-IO.

use crate::runtime::LockExt;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Lines let through per window.
pub const BURST: u32 = 5;
/// Length of a window.
pub const WINDOW: Duration = Duration::from_secs(10);

/// Lines that close a connection (before or after Hello).
pub static CLOSING: Throttle = Throttle::new("closing connection");
/// Connections refused by the accept loop (wrong uid, accept errors).
pub static REFUSED: Throttle = Throttle::new("refused connection");
/// The informational line of each new client.
pub static CLIENTS: Throttle = Throttle::new("client connected");

/// What to do with one line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    /// Write it.
    Log,
    /// Count it; `first` when it is the first suppressed one of its window (arm the summary).
    Suppress {
        /// First suppressed line of the window.
        first: bool,
    },
}

/// One throttle's counting state (sans-IO: the caller passes `now`).
#[derive(Debug, Clone, Default)]
pub struct Window {
    start: Option<Instant>,
    logged: u32,
    suppressed: u64,
}

impl Window {
    /// Counts a line at `now`. A line after the window's end first closes it: the returned
    /// count (if any) is the summary of that window, to be written before this line.
    pub fn admit(&mut self, now: Instant) -> (Admit, Option<u64>) {
        let summary = match self.start {
            Some(start) if now.duration_since(start) >= WINDOW => self.close(),
            _ => None,
        };
        let start = *self.start.get_or_insert(now);
        debug_assert!(now >= start);
        if self.logged < BURST {
            self.logged += 1;
            return (Admit::Log, summary);
        }
        self.suppressed += 1;
        (
            Admit::Suppress {
                first: self.suppressed == 1,
            },
            summary,
        )
    }

    /// Ends the window: the number of lines it suppressed, if any.
    pub fn close(&mut self) -> Option<u64> {
        let n = std::mem::take(&mut self.suppressed);
        *self = Window::default();
        (n > 0).then_some(n)
    }
}

/// A named rate limit for one kind of warning; use one of the statics.
#[derive(Debug)]
pub struct Throttle {
    what: &'static str,
    window: Mutex<Option<Window>>,
}

impl Throttle {
    /// A throttle whose summary lines start with `what`.
    pub const fn new(what: &'static str) -> Self {
        Throttle {
            what,
            window: Mutex::new(None),
        }
    }

    /// Whether to write a line now. Writes the summary of an ended window first, and arms the
    /// summary of this one at its first suppressed line (when a tokio runtime is running).
    pub fn admit(&'static self) -> bool {
        let (admit, summary) = {
            let mut w = self.window.lock_unpoisoned();
            w.get_or_insert_with(Window::default).admit(Instant::now())
        };
        if let Some(n) = summary {
            self.summarize(n);
        }
        match admit {
            Admit::Log => true,
            Admit::Suppress { first } => {
                if first {
                    if let Ok(rt) = tokio::runtime::Handle::try_current() {
                        rt.spawn(async move {
                            tokio::time::sleep(WINDOW).await;
                            self.flush();
                        });
                    }
                }
                false
            }
        }
    }

    /// Closes the current window, writing its summary if it suppressed lines.
    pub fn flush(&self) {
        let n = {
            let mut w = self.window.lock_unpoisoned();
            w.as_mut().and_then(Window::close)
        };
        if let Some(n) = n {
            self.summarize(n);
        }
    }

    fn summarize(&self, n: u64) {
        tracing::warn!(
            "{}: … {} more like this in the last {} s",
            self.what,
            thousands(n),
            WINDOW.as_secs()
        );
    }
}

/// `11999` → `11,999`.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_passes_then_lines_are_counted_and_summarized_per_window() {
        let t0 = Instant::now();
        let mut w = Window::default();
        let mut logged = 0;
        let mut firsts = 0;
        for i in 0..12_000u64 {
            let at = t0 + Duration::from_micros(i * 10); // 0.12 s of flood
            match w.admit(at) {
                (Admit::Log, None) => logged += 1,
                (Admit::Suppress { first }, None) => firsts += u32::from(first),
                other => panic!("line {i}: {other:?}"),
            }
        }
        assert_eq!((logged, firsts), (BURST, 1));
        // The timer closes the window: one summary of everything suppressed.
        assert_eq!(w.close(), Some(12_000 - u64::from(BURST)));
        assert_eq!(w.close(), None);
        // A line after the window ends first reports the old window's count.
        let mut w = Window::default();
        for _ in 0..7 {
            w.admit(t0);
        }
        assert_eq!(w.admit(t0 + WINDOW), (Admit::Log, Some(2)));
    }

    #[test]
    fn counts_are_written_with_thousands_separators() {
        for (n, s) in [(0, "0"), (999, "999"), (1000, "1,000"), (11_999, "11,999")] {
            assert_eq!(thousands(n), s);
        }
        assert_eq!(thousands(1_234_567), "1,234,567");
    }
}
