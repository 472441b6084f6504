//! Terminal screens: a model per PTY, snapshots at exact offsets, typed events (rule E).
//!
//! - [`model`]: the [`TerminalModel`] trait and its vt100 implementation (sans-IO);
//! - [`plain_lines`]: far behind a flood, which plain lines need not be drawn;
//! - [`pty_screen`]: one PTY's model fed from its ring, snapshots, the bounded event list;
//! - [`unfinished`]: the escape sequence the output stopped inside (ends every snapshot);
//! - [`worker`]: the daemon's one thread that keeps models caught up.

mod model;
mod plain_lines;
pub mod pty_screen;
pub mod unfinished;
pub mod worker;

#[cfg(test)]
mod tests;

pub use model::*;
pub use pty_screen::{PtyScreen, ScreenFeed, TakenSnapshot, MAX_EVENTS};
