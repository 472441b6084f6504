//! Screen states that stop predictions, and the model kept across resizes and snapshots.

use super::*;

#[test]
fn nothing_is_predicted_in_the_alternate_screen() {
    let mut rig = at_prompt(PredictMode::Always, Some(200));
    rig.at(1000);
    rig.input(b"v");
    rig.at(1200);
    rig.output(b"v");
    rig.output(b"\r\n\x1b[?1049h\x1b[H\x1b[2J~\r\n~\x1b[H");
    let painted = rig.painted.len();
    rig.at(1300);
    rig.input(b"ihello");
    rig.at(1500);
    rig.output(b"hello");
    assert_eq!(rig.predictor.stats().predicted, 1);
    assert!(rig.overlay().is_empty());
    assert_eq!(rig.painted.len(), painted, "nothing drawn over vim");

    rig.output(format!("\x1b[?1049l\r\n{PROMPT}").as_bytes());
    rig.at(1600);
    rig.input(b"l");
    assert_eq!(
        rig.predictor.stats().predicted,
        2,
        "back on the primary screen"
    );
}

#[test]
fn a_hidden_cursor_origin_or_insert_mode_graphics_or_unmodeled_sgr_stop_predictions() {
    for (mode_on, mode_off) in [
        (&b"\x1b[?25l"[..], &b"\x1b[?25h"[..]),
        (b"\x1b[?6h", b"\x1b[?6l"),
        (b"\x1b[4h", b"\x1b[4l"),
        (b"\x1b(0", b"\x1b(B"),
        // SGR attributes the model does not keep (reviewer's finding: the painter's pen
        // restore dropped them, and a concealed echo confirmed predictions).
        (b"\x1b[8m", b"\x1b[28m"),
        (b"\x1b[5m", b"\x1b[m"),
        (b"\x1b[9m", b"\x1b[29m"),
        (b"\x1b[4:3m", b"\x1b[24m"),
        (b"\x1b[58;5;1m", b"\x1b[59m"),
    ] {
        let mut rig = showing_b();
        rig.output(mode_on);
        assert!(rig.overlay().is_empty(), "{mode_on:?} drops what is shown");
        rig.input(b"c");
        assert_eq!(rig.predictor.stats().predicted, 2, "{mode_on:?}");
        rig.output(mode_off);
        rig.output(b"bc");
        rig.input(b"d");
        assert_eq!(rig.predictor.stats().predicted, 3, "{mode_off:?}");
    }
}

#[test]
fn never_predicts_nothing_and_keeps_the_model() {
    let mut rig = at_prompt(PredictMode::Never, Some(200));
    rig.at(1000);
    rig.input(b"ab");
    rig.output(b"ab");
    assert_eq!(rig.predictor.stats(), Stats::default());
    assert!(rig.painted.is_empty());
    rig.assert_same_as_without_prediction();
}

#[test]
fn a_resize_drops_what_is_pending() {
    let mut rig = showing_b();
    rig.predictor.resize(30, 6);
    assert!(rig.overlay().is_empty());
    assert_eq!(rig.predictor.stats().withdrawn, 1);
    assert_eq!(rig.predictor.screen().size().1.get(), 30);
}

#[test]
fn a_screen_snapshot_seeds_the_model_and_resets_its_modes() {
    let mut pane = vt100::Parser::new(size(ROWS), size(COLS), 0);
    pane.process(format!("\x1b[31mred\x1b[m\r\nsecond line\r\n{PROMPT}ls").as_bytes());
    let mut rig = Rig::new(PredictMode::Always, Some(200));
    // Whatever the pane printed before the connection dropped, origin and insert mode included.
    rig.output(b"junk\x1b[?6h\x1b[4h\x1b(0");
    rig.input(b"x");
    assert_eq!(rig.predictor.stats().predicted, 0);
    // A snapshot resets the terminal, then draws the screen.
    let reset = b"\x1b[?1049l\x1b[m\x1b[r\x1b[?6l\x1b[?7h\x1b[4l\x1b(B\x0f\x1b[H\x1b[2J";
    rig.output(&[&reset[..], pane.screen().contents_formatted().as_bytes()].concat());
    assert_eq!(
        rig.predictor.screen().contents_formatted(),
        pane.screen().contents_formatted()
    );
    rig.at(1000);
    rig.input(b"x");
    assert_eq!(
        rig.predictor.stats().predicted,
        1,
        "predicting again after the snapshot"
    );
}
