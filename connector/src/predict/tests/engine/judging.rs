//! How the echo confirms or contradicts predictions: epochs, passwords, mispredictions.

use super::*;

/// Issue 30: a password typed at a prompt that does not echo is never drawn, not one
/// character, at any moment — also when it was typed ahead of a prompt that starts like it.
#[test]
fn a_password_at_a_prompt_without_echo_is_never_drawn() {
    let mut rig = Rig::new(PredictMode::Always, Some(200));
    let mut shell = Shell::default();
    let mut script = Script::default();
    script.output(0, PROMPT.as_bytes());
    // An epoch is confirmed first, so that predictions are showing when the prompt comes.
    let last = script.typing(&mut shell, 1000, 100, 200, &chars("sudo ls"));
    let prompt_at = last + 300;
    script.key(last + 100, b"\r");
    script.output(prompt_at, b"\r\n[sudo] password for user: ");
    shell.line.clear();
    shell.cursor = 0;
    shell.silent = true;
    let mut keys = chars("secret");
    keys.push(b"\r");
    let last = script.typing(&mut shell, prompt_at + 500, 100, 200, &keys);

    // Then a prompt typed ahead: `Passw0rd` goes out before `Password: ` arrives.
    let enter = last + 500;
    script.key(enter, b"\r");
    script.output(enter + 200, b"\r\n");
    for (i, key) in chars("Passw0rd\r").into_iter().enumerate() {
        script.key(enter + 250 + 20 * i as u64, key);
    }
    script.output(enter + 450, b"Password: ");
    script.output(enter + 700, format!("\r\n{PROMPT}").as_bytes());

    let mut painted_at_prompt = None;
    rig.run(&script, |rig| {
        if rig.ms() < prompt_at {
            return;
        }
        assert!(
            rig.overlay().is_empty(),
            "at {} ms: {:?}",
            rig.ms(),
            rig.overlay()
        );
        assert!(rig.painter.is_clear());
        let painted = rig.painted.len();
        assert_eq!(
            *painted_at_prompt.get_or_insert(painted),
            painted,
            "at {} ms",
            rig.ms()
        );
    });
    assert!(
        rig.predictor.stats().shown > 0,
        "predictions were on before the prompt"
    );
    assert!(
        rig.predictor.stats().predicted > 8 + 6,
        "the password keys were predicted, hidden"
    );
    assert_eq!(rig.predictor.stats().mispredicted, 0);
    rig.assert_same_as_without_prediction();
}

#[test]
fn an_echo_that_differs_is_a_misprediction_erased_to_the_real_screen() {
    let mut rig = Rig::new(PredictMode::Adaptive, Some(200));
    let mut shell = Shell {
        upcase_after: Some(5),
        ..Shell::default()
    };
    let mut script = Script::default();
    script.output(0, PROMPT.as_bytes());
    script.typing(&mut shell, 1000, 100, 200, &chars("echo hi"));
    let mut seen = Vec::new();
    rig.run(&script, |rig| seen.push((rig.ms(), rig.shown())));
    assert!(seen.contains(&(1600, "hi".to_string())), "{seen:?}");
    let stats = rig.predictor.stats();
    assert_eq!(stats.mispredicted, 1, "{stats:?}");
    assert_eq!(
        (stats.predicted, stats.confirmed, stats.withdrawn),
        (7, 5, 2)
    );
    rig.assert_same_as_without_prediction();
    assert_eq!(rig.terminal_row(0), "user@h:~$ echo HI");

    rig.at(1900);
    rig.input(b"x");
    assert!(
        rig.overlay().is_empty(),
        "a misprediction makes the engine cautious again"
    );
    assert_eq!(rig.predictor.stats().predicted, 8);
}

/// An echo that differs and no output after it: the prediction drawn over it is taken back
/// when its echo is due, not when it would be withdrawn.
#[test]
fn an_echo_that_differs_is_taken_back_when_due_even_if_nothing_follows() {
    let mut rig = Rig::new(PredictMode::Always, Some(200));
    let mut shell = Shell {
        upcase_after: Some(2),
        ..Shell::default()
    };
    let mut script = Script::default();
    script.output(0, PROMPT.as_bytes());
    script.typing(&mut shell, 1000, 10, 200, &chars("abc"));
    rig.run(&script, |_| {});
    // `a` (echoed at 1200) confirmed the epoch; `C` came at 1220 where `c` is drawn.
    assert_eq!(
        rig.terminal_row(0),
        "user@h:~$ abc",
        "the prediction covers the echo"
    );
    assert_eq!(
        rig.predictor.next_deadline(),
        Some(rig.start + ms(1020 + 250)),
        "`c` is due one echo wait after it was typed"
    );
    rig.at(1269);
    assert_eq!(rig.shown(), "c");
    rig.at(1270);
    assert!(rig.overlay().is_empty(), "{:?}", rig.overlay());
    assert_eq!(rig.terminal_row(0), "user@h:~$ abC");
    assert_eq!(rig.predictor.stats().mispredicted, 1);
    rig.assert_same_as_without_prediction();
}

#[test]
fn enter_and_unmodeled_keys_start_a_new_epoch() {
    for key in [&b"\r"[..], b"\t", b"\x1b[A", b"\x15"] {
        let mut rig = showing_b();
        rig.input(key);
        rig.input(b"c");
        assert_eq!(
            rig.shown(),
            "b",
            "{key:?}: keys after it wait for the guess to settle"
        );
        rig.at(1400);
        rig.output(b"b");
        rig.at(1500);
        rig.input(b"d");
        assert!(
            rig.overlay().is_empty(),
            "{key:?}: a new epoch waits for an echo"
        );
    }
}

/// A prompt written concealed (`SGR 8`): what is typed there is never drawn, even when the
/// echo (concealed too) comes back as the model sees it, plain.
#[test]
fn typing_after_a_concealed_prompt_is_never_predicted() {
    let mut rig = at_prompt(PredictMode::Always, Some(200));
    rig.output(b"\x1b[8m");
    for (i, key) in ["s", "e", "c", "r"].into_iter().enumerate() {
        let t = 1000 + 300 * i as u64;
        rig.at(t);
        rig.input(key.as_bytes());
        assert!(rig.overlay().is_empty(), "{key}");
        rig.at(t + 200);
        rig.output(key.as_bytes());
    }
    assert_eq!(rig.predictor.stats().predicted, 0);
}
