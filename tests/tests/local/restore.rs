//! relay gives the user's terminal back as it found it: whatever way it leaves
//! (`~.`, the shell's exit, a signal), the modes a full-screen program left on are turned off
//! after its output and before relay's own message, as tmux does on detach. A pipe gets the
//! output as it is.

use std::process::Stdio;

use relay_tests::pty_run::PtyRun;
use relay_tests::{bins, TestHome};

/// What relay wrote after the last `marker` and before `until` (to the end when absent), without
/// the line breaks that end it.
fn written_after<'a>(screen: &'a str, marker: &str, until: Option<&str>) -> &'a str {
    let start = screen
        .rfind(marker)
        .unwrap_or_else(|| panic!("{marker:?} never appeared: {screen:?}"))
        + marker.len();
    let rest = &screen[start..];
    let end = until.and_then(|u| rest.find(u)).unwrap_or(rest.len());
    rest[..end].trim_end_matches(['\r', '\n'])
}

/// A full-screen program (as vim starts): the alternate screen, mouse press/release reporting,
/// bracketed paste and application cursor keys, then it waits.
const FULL_SCREEN: &str =
    r"printf '\033[?1049h\033[?1000h\033[?2004h\033[?1hFULL-SCREEN-READY'; exec cat >/dev/null";

/// What relay writes on leaving while [`FULL_SCREEN`] runs.
const FULL_SCREEN_RESETS: &str = "\x1b[?1049l\x1b[?1l\x1b[?1000l\x1b[?2004l\x1b[0m";

#[test]
fn detach_turns_off_the_modes_the_program_left_on_and_reattach_sets_them_again() {
    let home = TestHome::new();
    let pane = ["--local", "--workspace", "w", "--pane", "restore"];
    let mut first = PtyRun::spawn(
        &home,
        &[&["shell"], &pane[..], &["--", FULL_SCREEN]].concat(),
    );
    first.wait_for("FULL-SCREEN-READY");
    first.type_text("\r~.");
    assert_eq!(first.wait_exit(), 0, "{:?}", first.screen());
    let screen = first.screen();
    let tail = written_after(&screen, "FULL-SCREEN-READY", Some("[detached from pane"));
    assert!(
        tail.ends_with(FULL_SCREEN_RESETS),
        "the resets come after the output, before the message: {tail:?}"
    );

    // The program still runs with its modes: the snapshot on attach sets them again, and the
    // next detach turns them off again.
    let mut second = PtyRun::spawn(&home, &[&["attach"], &pane[..]].concat());
    second.wait_for("FULL-SCREEN-READY");
    second.type_text("\r~.");
    assert_eq!(second.wait_exit(), 0, "{:?}", second.screen());
    let screen = second.screen();
    let drawn = &screen[..screen.rfind("FULL-SCREEN-READY").unwrap()];
    assert!(drawn.contains("\x1b[?1049h"), "{screen:?}");
    let tail = written_after(&screen, "FULL-SCREEN-READY", Some("[detached from pane"));
    for mode in ["\x1b[?1000h", "\x1b[?2004h"] {
        assert!(
            tail.contains(mode),
            "the snapshot sets {mode:?}: {screen:?}"
        );
    }
    assert!(tail.ends_with(FULL_SCREEN_RESETS), "{tail:?}");
}

#[test]
fn a_shell_that_exits_in_the_alternate_screen_leaves_the_terminal_restored() {
    let home = TestHome::new();
    let script = r"printf '\033[?1049h\033[?2004h\033[?25lALT-THEN-EXIT'; read x; exit 3";
    let mut run = PtyRun::spawn(
        &home,
        &["shell", "--local", "--pane", "exits", "--", script],
    );
    run.wait_for("ALT-THEN-EXIT");
    run.type_text("\r");
    assert_eq!(run.wait_exit(), 3, "{:?}", run.screen());
    let screen = run.screen();
    let tail = written_after(&screen, "ALT-THEN-EXIT", None);
    assert!(
        tail.ends_with("\x1b[?1049l\x1b[?2004l\x1b[?25h\x1b[0m"),
        "{tail:?}"
    );
}

#[test]
fn sigterm_leaves_the_terminal_restored() {
    let home = TestHome::new();
    let script = r"printf '\033[?1049h\033[?1006h\033=\033[1;31mSIGNAL-READY'; exec sleep 600";
    let mut run = PtyRun::spawn(
        &home,
        &["shell", "--local", "--pane", "signalled", "--", script],
    );
    run.wait_for("SIGNAL-READY");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(run.pid()),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    assert_eq!(run.wait_exit(), 143, "{:?}", run.screen());
    let screen = run.screen();
    let tail = written_after(&screen, "SIGNAL-READY", Some("relay: stopped by SIGTERM"));
    assert!(
        tail.ends_with("\x1b[?1049l\x1b[?1006l\x1b>\x1b[0m"),
        "{tail:?}"
    );
}

#[test]
fn output_into_a_pipe_gets_no_resets() {
    let home = TestHome::new();
    let child = home
        .command(&bins().relay)
        .args([
            "shell",
            "--local",
            "--pane",
            "piped-modes",
            "--",
            r"printf '\033[?2004hpiped-done'",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = super::wait_output(child);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.ends_with("\x1b[?2004hpiped-done"), "{stdout:?}");
}
