//! The line-editing model: backspace, left and right, where editing began, the last column.

use super::*;

#[test]
fn backspace_left_and_right_are_predicted_within_the_line() {
    let mut rig = Rig::new(PredictMode::Always, Some(200));
    let mut shell = Shell::default();
    let mut script = Script::default();
    script.output(0, PROMPT.as_bytes());
    script.typing(&mut shell, 1000, 100, 200, &chars("echo hx"));
    rig.run(&script, |_| {});
    rig.assert_same_as_without_prediction();

    let mut script = Script::default();
    let keys: [&[u8]; 6] = [b"\x7f", b"i", b"\x1b[D", b"\x1bOD", b"X", b"\x1b[C"];
    script.typing(&mut shell, 3000, 10, 200, &keys);
    let mut steps = Vec::new();
    rig.run(&script, |rig| {
        if rig.ms() < 3200 {
            let overlay = rig.overlay();
            let cells: String = overlay
                .cells
                .iter()
                .map(|c| format!("{}{}", c.col, c.ch))
                .collect();
            steps.push((cells, overlay.cursor.map(|(_, col)| col)));
        }
    });
    let want = [
        ("16 ", 16),       // backspace erases `x`
        ("16i", 17),       // `i` replaces it
        ("16i", 16),       // left
        ("16i", 15),       // left (application cursor form)
        ("15X16h17i", 16), // `X` is inserted, `hi` moves right
        ("15X16h17i", 17), // right
    ];
    let want: Vec<_> = want
        .iter()
        .map(|(c, col)| (c.to_string(), Some(*col)))
        .collect();
    assert_eq!(steps, want);
    rig.assert_same_as_without_prediction();
    assert_eq!(rig.terminal_row(0), "user@h:~$ echo Xhi");
    let stats = rig.predictor.stats();
    assert_eq!(
        (stats.predicted, stats.mispredicted, stats.withdrawn),
        (13, 0, 0),
        "{stats:?}"
    );
}

#[test]
fn backspace_and_left_stop_where_editing_began() {
    let mut rig = at_prompt(PredictMode::Always, Some(200));
    rig.at(1000);
    rig.input(b"a");
    rig.at(1200);
    rig.output(b"a");
    rig.at(1300);
    rig.input(b"\x1b[D");
    assert_eq!(rig.overlay().cursor, Some((0, 10)));
    rig.input(b"\x1b[D\x7f");
    assert_eq!(
        rig.predictor.stats().predicted,
        2,
        "nothing left of the prompt's end"
    );
    assert_eq!(
        rig.overlay().cursor,
        Some((0, 10)),
        "the guess is sealed, still shown"
    );
}

#[test]
fn nothing_is_predicted_into_the_last_column() {
    let mut rig = Rig::sized(14, 4, PredictMode::Always, Some(200));
    rig.output(PROMPT.as_bytes());
    rig.at(1000);
    rig.input(b"a");
    rig.at(1200);
    rig.output(b"a");
    rig.input(b"bcd");
    assert_eq!(
        rig.shown(),
        "bc",
        "column 13 is the last: `d` is not predicted"
    );
    assert_eq!(rig.overlay().cursor, Some((0, 13)));
    assert_eq!(rig.predictor.stats().predicted, 3);
}
