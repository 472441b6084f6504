//! What the engine predicts and shows, and when it stops.

use std::time::Duration;

mod editing;
mod judging;
mod screen;
mod timing;

use super::super::{OverlayCell, Stats};
use super::*;

fn cell(row: u16, col: u16, ch: char, underline: bool) -> OverlayCell {
    OverlayCell {
        row,
        col,
        ch,
        underline,
    }
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A rig showing the prompt on row 0 (cursor at column 10).
fn at_prompt(mode: PredictMode, rtt_ms: Option<u64>) -> Rig {
    let mut rig = Rig::new(mode, rtt_ms);
    rig.output(PROMPT.as_bytes());
    rig
}

/// At the prompt, `Always`, 200 ms round trip: `a` typed and echoed at 1200 ms, then `b` typed
/// and shown as a prediction.
fn showing_b() -> Rig {
    let mut rig = at_prompt(PredictMode::Always, Some(200));
    rig.at(1000);
    rig.input(b"a");
    rig.at(1200);
    rig.output(b"a");
    rig.input(b"b");
    assert_eq!(rig.shown(), "b");
    rig
}
