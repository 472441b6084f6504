//! Predictive local echo in `relay shell`, on a real pseudo-terminal whose test side plays the
//! terminal (a vt100 model that answers relay's cursor question), against the fixture sshd
//! through the link shaper: typed keys appear before their echo on a 200 ms link, a password is
//! never drawn, the final screen and scrollback are the same cell for cell as without
//! prediction, and on a fast link nothing is predicted.

use std::time::Duration;

use relay_tests::pty_run::{has_row, PtyRun};
use relay_tests::shaper::{Link, Shaper};
use relay_tests::TestHome;

use super::*;

/// The prompt the script sets (`PR` then `2` from arithmetic, so the typed text never contains
/// it).
const PROMPT: &str = "PR2> ";

/// `relay VERB` (shell or attach) on a fresh terminal to `host` through `port`, pane `pane`,
/// with `extra` arguments.
fn relay(
    verb: &str,
    host: &SshHost,
    port: u16,
    home: &TestHome,
    pane: &str,
    extra: &[&str],
) -> PtyRun {
    PtyRun::relay_via(
        host,
        port,
        home,
        verb,
        &[&["--pane", pane], extra].concat(),
        &[],
    )
}

fn relay_shell(host: &SshHost, port: u16, home: &TestHome, pane: &str, extra: &[&str]) -> PtyRun {
    relay("shell", host, port, home, pane, extra)
}

/// Waits until the terminal satisfies `check` (at most 60 s).
fn wait_terminal(run: &PtyRun, what: &str, check: impl Fn(&vt100::Screen) -> bool) {
    run.wait_screen(what, check)
        .unwrap_or_else(|e| panic!("{e}"));
}

/// How a typed key first appeared on the terminal.
#[derive(Debug, Default)]
struct Typing {
    keys: usize,
    /// Keys first seen underlined: drawn by relay before the host's echo (bash's echo is plain).
    drawn_early: usize,
}

/// Types `text` one key every `gap` after `PROMPT`, each on the cursor's cell, and records
/// whether each appeared underlined (a prediction) or plain (the echo).
fn type_watching(run: &mut PtyRun, text: &str, gap: Duration, typing: &mut Typing) {
    for ch in text.chars() {
        let (row, col) = run.terminal().screen().cursor_position();
        run.type_text(&ch.to_string());
        let shown = |s: &vt100::Screen| {
            s.cell(row, col)
                .is_some_and(|c| c.contents() == ch.to_string())
        };
        wait_terminal(run, &format!("{ch:?} at ({row}, {col})"), shown);
        typing.keys += 1;
        if run.terminal().screen().cell(row, col).unwrap().underline() {
            typing.drawn_early += 1;
        }
        std::thread::sleep(gap);
    }
}

/// The keystroke script, the same with prediction on and off: a prompt, a command typed with
/// a typo and backspaces, a password at a prompt that does not echo, output that scrolls.
/// Returns how the command's keys appeared.
fn run_script(run: &mut PtyRun) -> Typing {
    wait_terminal(run, "the shell's prompt", |s| {
        s.contents().lines().any(|l| l.trim_end().ends_with(":~$"))
    });
    run.type_text("PS1=PR$((1+1))'> '\r");
    wait_terminal(run, "the prompt", |s| has_row(s, PROMPT));
    // Time for the round-trip samples that turn predictions on (three, about 2 s here).
    std::thread::sleep(Duration::from_secs(3));
    let mut typing = Typing::default();
    let gap = Duration::from_millis(60);
    type_watching(run, "echo the quick brwn", gap, &mut typing);
    run.type_text("\x7f\x7f\x7f");
    wait_terminal(run, "three backspaces", |s| {
        has_row(s, "PR2> echo the quick b") && s.cursor_position().1 == 21
    });
    type_watching(run, "rown fox", gap, &mut typing);
    run.type_text("\r");
    wait_terminal(run, "the command's output", |s| {
        has_row(s, "the quick brown fox")
    });
    run.type_text("read -s -p 'pw: ' PW; echo \"len=${#PW}\"\r");
    wait_terminal(run, "the password prompt", |s| has_row(s, "pw: "));
    for key in ["z", "k", "v", "j"] {
        run.type_text(key);
        std::thread::sleep(gap);
    }
    run.type_text("\r");
    // `read -s` ends no line: the length follows the prompt.
    wait_terminal(run, "the password's length", |s| has_row(s, "pw: len=4"));
    run.type_text("seq 1 40\r");
    wait_terminal(run, "the last number", |s| {
        has_row(s, "40") && has_row(s, PROMPT)
    });
    typing
}

/// Every line of the terminal's scrollback and screen from the shell's first prompt on (what
/// came before differs: the first run deploys the agent), oldest first, with attributes.
fn script_lines(run: &PtyRun) -> Vec<String> {
    let mut lines = run.lines();
    let first = lines
        .iter()
        .position(|l| l.contains(":~$"))
        .expect("the shell's first prompt");
    lines.split_off(first)
}

/// A fixture host and a link shaper in front of it with a 200 ms round trip.
pub(super) fn host_behind_a_200ms_link(rt: &tokio::runtime::Runtime) -> (SshHost, Shaper) {
    let host = rt.block_on(SshHost::start()).unwrap();
    let target = format!("127.0.0.1:{}", host.port()).parse().unwrap();
    let shaper = rt
        .block_on(Shaper::start(target, Link::rtt_ms(200)))
        .unwrap();
    (host, shaper)
}

/// On a 200 ms link, keys of a line appear before their echo (underlined, as unconfirmed);
/// the password is never drawn; and the terminal ends cell for cell, scrollback included, as
/// with `--predict=never` for the same keystrokes.
#[test]
fn on_a_slow_link_keys_show_before_their_echo_and_the_screen_ends_the_same() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let _in_runtime = rt.enter();
    let (host, shaper) = host_behind_a_200ms_link(&rt);
    let home = TestHome::new();

    let mut on = relay_shell(&host, shaper.port(), &home, "typing-on", &[]);
    let typing = run_script(&mut on);
    assert!(
        on.cursor_questions() >= 1,
        "relay asked where the cursor is"
    );
    eprintln!("with prediction: {typing:?}");
    // Keys typed before predictions turned on, and the first key after a backspace (a new
    // epoch waits for one echo), show plain; most others are drawn at once.
    assert!(
        typing.drawn_early * 2 >= typing.keys,
        "at most half the keys waited for their echo: {typing:?}"
    );
    let bytes = on.bytes();
    let text = String::from_utf8_lossy(&bytes);
    assert!(
        has_cursor_position(&text),
        "positive control: relay drew predictions"
    );
    let asked = text.rfind("pw: ").expect("the password prompt");
    let answered = text[asked..].find("len=4").expect("the length") + asked;
    for key in ['z', 'k', 'v', 'j'] {
        assert!(
            !text[asked..answered].contains(key),
            "the password's {key:?} was drawn: {:?}",
            &text[asked..answered]
        );
    }

    let mut off = relay_shell(
        &host,
        shaper.port(),
        &home,
        "typing-off",
        &["--predict", "never"],
    );
    let plain = run_script(&mut off);
    assert_eq!(plain.drawn_early, 0, "never means never: {plain:?}");
    // Both shells' last output is in; the screens (and scrollback) must match cell for cell.
    let (with, without) = (script_lines(&on), script_lines(&off));
    assert!(with.len() > 24, "the output scrolled: {}", with.len());
    assert_eq!(with, without, "the terminal with prediction vs without");
    assert_eq!(
        on.terminal().screen().cursor_position(),
        off.terminal().screen().cursor_position()
    );

    // Re-attached, the agent's snapshot redraws the screen (home, erase, contents): the model
    // follows it, and predictions land at the cursor again.
    on.type_text("\r~.");
    assert_eq!(on.wait_exit(), 0, "a detach");
    let mut back = relay("attach", &host, shaper.port(), &home, "typing-on", &[]);
    wait_terminal(&back, "the screen redrawn", |s| {
        has_row(s, "40") && has_row(s, PROMPT)
    });
    std::thread::sleep(Duration::from_secs(3));
    let mut typing = Typing::default();
    type_watching(
        &mut back,
        "echo back again",
        Duration::from_millis(60),
        &mut typing,
    );
    back.type_text("\r");
    wait_terminal(&back, "the output", |s| has_row(s, "back again"));
    assert!(
        typing.drawn_early >= 5,
        "keys drawn before their echo after a re-attach: {typing:?}"
    );
}

/// On a link without added delay, adaptive prediction draws nothing: the terminal gets the
/// pane's bytes and no cursor move of relay's.
#[test]
fn on_a_fast_link_nothing_is_predicted() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let _in_runtime = rt.enter();
    let host = rt.block_on(SshHost::start()).unwrap();
    let home = TestHome::new();
    let mut run = relay_shell(&host, host.port(), &home, "fast", &[]);
    wait_terminal(&run, "the shell's prompt", |s| {
        s.contents().lines().any(|l| l.trim_end().ends_with(":~$"))
    });
    run.type_text("PS1=PR$((1+1))'> '\r");
    wait_terminal(&run, "the prompt", |s| has_row(s, PROMPT));
    std::thread::sleep(Duration::from_secs(3));
    let start = run.bytes().len();
    let mut typing = Typing::default();
    type_watching(
        &mut run,
        "echo fast link",
        Duration::from_millis(60),
        &mut typing,
    );
    run.type_text("\r");
    wait_terminal(&run, "the output", |s| has_row(s, "fast link"));
    assert!(
        run.cursor_questions() >= 1,
        "relay asked where the cursor is"
    );
    assert_eq!(typing.drawn_early, 0, "{typing:?}");
    let bytes = run.bytes();
    let after = String::from_utf8_lossy(&bytes[start..]);
    assert!(
        !has_cursor_position(&after),
        "no cursor positioning by relay: {after:?}"
    );
}

/// Whether `text` holds a cursor position sequence (CUP, `ESC [ row ; col H`): what relay's
/// painter writes for every prediction, and bash's line editing never does.
fn has_cursor_position(text: &str) -> bool {
    text.match_indices("\x1b[").any(|(i, _)| {
        let rest = &text[i + 2..];
        let params = rest
            .find(|c: char| !(c.is_ascii_digit() || c == ';'))
            .unwrap_or(rest.len());
        rest[..params].contains(';') && rest[params..].starts_with('H')
    })
}
