//! The painter's key property, over whole sessions: whenever nothing is predicted, the user's
//! terminal (fed exactly what `relay shell` writes) equals a terminal that got the output
//! alone, and its scrollback holds the same lines — also when output scrolls the screen while
//! predictions are drawn.

use super::*;

/// A coloured prompt that leaves the pen yellow for the typed command, 10 columns wide.
const COLOURED: &str = "\x1b[1;32muser@h\x1b[0m:\x1b[1;34m~\x1b[0m$ \x1b[33m";

/// Round trip of the sessions here, ms.
const RTT: u64 = 200;

/// A session on a 6-row pane at 200 ms: typos fixed with backspace, a word inserted with left
/// and right, and enough commands to scroll the screen several times. Checks the property
/// after every step.
pub(super) fn busy_session() -> Rig {
    let mut rig = Rig::sized(COLS, 6, PredictMode::Adaptive, Some(RTT));
    let mut shell = Shell {
        prompt: COLOURED,
        ..Shell::default()
    };
    let mut script = Script::default();
    script.output(0, COLOURED.as_bytes());
    let lines: Vec<Vec<&[u8]>> = vec![
        [chars("echo hellp"), vec![b"\x7f"], chars("o"), vec![b"\r"]].concat(),
        [
            chars("echo abc"),
            vec![b"\x1b[D", b"\x1b[D"],
            chars("X"),
            vec![b"\x1b[C", b"\r"],
        ]
        .concat(),
        [chars("echo one"), vec![b"\r"]].concat(),
        [chars("echo  two  spaces"), vec![b"\x1bOD", b"\x7f", b"\r"]].concat(),
        [
            chars("ech"),
            vec![b"\x7f", b"\x7f", b"\x7f", b"\x7f"],
            chars("echo three"),
            vec![b"\r"],
        ]
        .concat(),
        [chars("echo four"), vec![b"\r"]].concat(),
    ];
    let mut at = 1000;
    for keys in &lines {
        at = script.typing(&mut shell, at, 80, RTT, keys) + 700;
    }
    rig.run(&script, |rig| {
        if rig.overlay().is_empty() {
            rig.assert_same_as_without_prediction();
        }
    });
    rig
}

#[test]
fn whenever_nothing_is_predicted_the_terminal_equals_one_without_prediction() {
    let mut rig = busy_session();
    rig.assert_same_as_without_prediction();
    rig.assert_same_scrollback();
    let lines = scrollback(&mut rig.plain).len();
    assert!(lines >= 5, "the session scrolled {lines} lines");
    let drawn = rig.frames.iter().filter(|o| !o.cells.is_empty()).count();
    assert!(drawn > 20, "predictions were drawn in {drawn} frames");
    let stats = rig.predictor.stats();
    assert_eq!(stats.mispredicted, 0, "{stats:?}");
    assert!(stats.shown * 10 >= stats.predicted * 7, "{stats:?}");
}

#[test]
fn output_that_scrolls_while_predictions_are_drawn_leaves_the_scrollback_identical() {
    let mut rig = Rig::sized(COLS, 4, PredictMode::Adaptive, Some(RTT));
    let mut shell = Shell {
        prompt: COLOURED,
        ..Shell::default()
    };
    let mut script = Script::default();
    script.output(0, COLOURED.as_bytes());
    let mut at = 100;
    for _ in 0..3 {
        at = script.typing(&mut shell, at, 10, 20, &[b"\r"]) + 100;
    }
    rig.run(&script, |_| {});
    assert_eq!(
        rig.predictor.screen().cursor_position(),
        (3, 10),
        "the prompt is at the bottom"
    );

    let mut script = Script::default();
    // `e` is echoed at 1200 and confirms the epoch; `c`, `h`, `o` show before their echoes.
    script.typing(&mut shell, 1000, 100, RTT, &chars("echo"));
    // A job's notice, and the line redrawn below it: four rows scroll, the one being edited
    // into the scrollback.
    script.output(
        1320,
        format!("\r\n[1]+  Done   sleep 1\r\n\r\n\r\n\r\n{COLOURED}ec").as_bytes(),
    );
    let (mut drawn, mut checked) = (false, false);
    rig.run(&script, |rig| {
        if rig.ms() == 1300 && rig.overlay().cells.len() == 2 {
            assert_eq!(rig.shown(), "ho");
            assert_eq!(rig.terminal_row(3), "user@h:~$ echo");
            drawn = true;
        }
        if rig.ms() == 1320 {
            rig.assert_same_as_without_prediction();
            rig.assert_same_scrollback();
            checked = true;
        }
    });
    assert!(drawn && checked);
    let sb = scrollback(&mut rig.terminal);
    assert!(sb.iter().all(|line| !line.contains("echo")), "{sb:?}");
    rig.assert_same_as_without_prediction();
    rig.assert_same_scrollback();
}
