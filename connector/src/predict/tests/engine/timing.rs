//! When predictions show, how they are underlined, and when they are withdrawn.

use super::*;

#[test]
fn on_a_fast_link_nothing_is_predicted_or_drawn() {
    let mut rig = Rig::new(PredictMode::Adaptive, Some(5));
    let mut shell = Shell::default();
    let mut script = Script::default();
    script.output(0, PROMPT.as_bytes());
    let last = script.typing(&mut shell, 100, 100, 5, &chars("echo hi"));
    script.typing(
        &mut shell,
        last + 100,
        100,
        5,
        &[b"\r", b"l", b"s", b"\x7f"],
    );
    rig.run(&script, |rig| assert!(rig.overlay().is_empty()));
    assert_eq!(rig.predictor.stats(), Stats::default());
    assert!(
        rig.painted.is_empty(),
        "the painter wrote {:?}",
        rig.painted
    );
    rig.assert_same_as_without_prediction();
}

#[test]
fn on_a_slow_link_keys_show_at_once_after_an_echo_confirms_the_epoch() {
    let mut rig = at_prompt(PredictMode::Adaptive, Some(200));
    rig.at(1000);
    rig.input(b"e");
    assert!(
        rig.overlay().is_empty(),
        "the first key of an epoch waits for its echo"
    );
    rig.at(1100);
    rig.input(b"c");
    assert!(rig.overlay().is_empty());
    assert_eq!(rig.terminal_row(0), "user@h:~$ ");

    rig.at(1200);
    rig.output(b"e");
    let want = Overlay {
        cells: vec![cell(0, 11, 'c', true)],
        cursor: Some((0, 12)),
    };
    assert_eq!(
        rig.overlay(),
        want,
        "the echo of `e` confirms the epoch: `c` shows"
    );
    rig.input(b"h");
    assert_eq!(rig.shown(), "ch", "a later key of the epoch shows at once");
    assert_eq!(rig.overlay().cursor, Some((0, 13)));
    assert_eq!(rig.terminal_row(0), "user@h:~$ ech");
    assert_eq!(rig.terminal.screen().cursor_position(), (0, 13));
    assert!(rig.terminal.screen().cell(0, 12).unwrap().underline());

    rig.at(1300);
    rig.output(b"c");
    let want = Overlay {
        cells: vec![cell(0, 12, 'h', true)],
        cursor: Some((0, 13)),
    };
    assert_eq!(rig.overlay(), want, "the echoed cell leaves the overlay");
    rig.at(1400);
    rig.output(b"h");
    rig.assert_same_as_without_prediction();
    assert!(!rig.terminal.screen().cell(0, 12).unwrap().underline());

    rig.at(1500);
    rig.input(b"o");
    assert_eq!(
        rig.shown(),
        "o",
        "the epoch stays confirmed between guesses"
    );
    let stats = rig.predictor.stats();
    assert_eq!(
        (stats.predicted, stats.shown, stats.confirmed),
        (4, 3, 3),
        "{stats:?}"
    );
}

#[test]
fn underlining_follows_the_round_trip_and_a_late_echo() {
    let mut rig = at_prompt(PredictMode::Adaptive, Some(40));
    rig.at(1000);
    rig.input(b"a");
    rig.at(1040);
    rig.output(b"a");
    rig.input(b"b");
    assert_eq!(
        rig.overlay().cells,
        [cell(0, 11, 'b', false)],
        "40 ms: not underlined"
    );
    rig.at(1289);
    assert!(!rig.overlay().cells[0].underline);
    assert_eq!(
        rig.predictor.next_deadline(),
        Some(rig.start + ms(1040 + 250))
    );
    rig.at(1290);
    assert!(
        rig.overlay().cells[0].underline,
        "waiting 250 ms for an echo is a glitch"
    );
    rig.output(b"b");
    for (i, key) in chars("cdefghijkl").into_iter().enumerate() {
        let t = 1300 + 50 * i as u64;
        rig.at(t);
        rig.input(key);
        assert!(
            rig.overlay().cells[0].underline,
            "still flagged before 10 quick echoes"
        );
        rig.at(t + 40);
        rig.output(key);
    }
    rig.at(1900);
    rig.input(b"m");
    assert_eq!(
        rig.overlay().cells,
        [cell(0, 22, 'm', false)],
        "ten quick echoes end it"
    );
}

#[test]
fn between_the_thresholds_predictions_neither_start_nor_stop() {
    let mut rig = at_prompt(PredictMode::Adaptive, Some(200));
    for i in 0..200 {
        rig.predictor.rtt_sample(ms(25 + i % 4));
    }
    let srtt = rig.predictor.srtt().unwrap();
    assert!(srtt > ms(20) && srtt < ms(30), "{srtt:?}");
    rig.at(1000);
    rig.input(b"e");
    rig.at(1030);
    rig.output(b"e");
    rig.input(b"c");
    assert_eq!(
        rig.shown(),
        "c",
        "25..28 ms after being above 30 ms: still on"
    );

    for _ in 0..40 {
        rig.predictor.rtt_sample(ms(5));
    }
    rig.draw();
    assert!(
        rig.overlay().is_empty(),
        "below 20 ms: off, and what was pending goes"
    );
    assert_eq!(rig.predictor.stats().withdrawn, 1);
    rig.at(1060);
    rig.output(b"c");
    rig.input(b"h");
    assert_eq!(
        rig.predictor.stats().predicted,
        2,
        "nothing predicted while off"
    );
    rig.at(1070);
    rig.output(b"h");

    for i in 0..200 {
        rig.predictor.rtt_sample(ms(25 + i % 4));
    }
    rig.input(b"o");
    assert_eq!(
        rig.predictor.stats().predicted,
        2,
        "25..28 ms from below: still off"
    );
    rig.output(b"o");
    rig.assert_same_as_without_prediction();
}

#[test]
fn unconfirmed_predictions_are_withdrawn_by_tick() {
    let mut rig = at_prompt(PredictMode::Always, Some(200));
    rig.at(1000);
    rig.input(b"l");
    rig.at(1200);
    rig.output(b"l");
    rig.at(1300);
    rig.input(b"s");
    assert_eq!(rig.shown(), "s");
    // The host went quiet: echo wait 250 ms, withdrawn after max(1 s, 500 ms).
    assert_eq!(
        rig.predictor.next_deadline(),
        Some(rig.start + ms(1300 + 250))
    );
    rig.at(1550);
    assert_eq!(rig.predictor.next_deadline(), Some(rig.start + ms(2300)));
    rig.at(2299);
    assert_eq!(rig.shown(), "s");
    rig.at(2300);
    assert!(rig.overlay().is_empty());
    assert_eq!(rig.predictor.next_deadline(), None);
    let stats = rig.predictor.stats();
    assert_eq!((stats.withdrawn, stats.mispredicted), (1, 0), "{stats:?}");
    rig.assert_same_as_without_prediction();
    rig.at(2400);
    rig.input(b"x");
    assert!(rig.overlay().is_empty(), "a new epoch after a withdrawal");
}
