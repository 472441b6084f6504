//! Output: what happens to a PTY's bytes between its reader and a subscriber (sans-IO cores).
//!
//! - [`ring`]: the replay ring with absolute offsets, which the reader always drains into;
//! - [`credit`]: per-subscription credit window (a slow consumer delays only its own forwarding);
//! - [`hold`]: lossless consumers' holds, which keep the ring from dropping bytes they have not
//!   acknowledged (the PTY is read no further instead);
//! - [`screen`]: a terminal model per PTY (snapshots with scrollback and alternate screen,
//!   events), fed from the ring.
//!
//! Below the PTY layer: nothing here knows processes, connections or the daemon's state.

pub mod credit;
pub mod hold;
pub mod ring;
pub mod screen;
