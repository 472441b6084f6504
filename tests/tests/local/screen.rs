//! Screens that come back exactly (rule E): snapshots instead of gaps, checked with an
//! independent terminal model (asciinema's `avt`, not the agent's vt100), and typed events
//! delivered once.

use relay_connector::PaneEvent;
use relay_protocol::{PaneKey, Resume, ScreenEvent};
use relay_tests::{read_until, read_until_text, Collected, TestHome, LIVENESS};

use super::sh;

/// A terminal of `cols`×`rows` that was given `bytes`.
fn terminal(cols: usize, rows: usize, bytes: &[u8]) -> avt::Terminal {
    let mut vt = avt::Terminal::new(cols, rows).unwrap();
    vt.feed(String::from_utf8_lossy(bytes).as_ref());
    vt
}

fn visible(vt: &avt::Terminal) -> Vec<String> {
    vt.screen().visible_lines().map(|l| l.text()).collect()
}

/// Waits until the lease of `pane` has produced at least `bytes` of output.
async fn wait_for_output(session: &relay_connector::Session, pane: &PaneKey, bytes: u64) {
    let deadline = tokio::time::Instant::now() + LIVENESS;
    loop {
        let leases = session.list_leases().await.unwrap();
        let out = leases
            .iter()
            .find(|l| &l.binding.pane == pane)
            .map_or(0, |l| l.bytes_out);
        if out >= bytes {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{pane} produced only {out} of {bytes} bytes"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// The oracle of rule E: a full-screen program draws a marker, then writes far more than the
/// ring holds while nobody is attached. A client that resumes from where it left gets a
/// snapshot, not a gap: its terminal shows the alternate screen with the marker and the final
/// counter, mouse and bracketed-paste modes are on, and when the program leaves the alternate
/// screen the shell's earlier screen is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_far_behind_gets_the_screen_back_exactly() {
    // A 64 KiB ring; the program writes ~390 KB while detached.
    let home = TestHome::with_env(&[("RELAY_REPLAY_BYTES", "65536")]);
    let session = home.session().await;
    let pane = PaneKey::new("w", "vim-like", "0");
    let script = concat!(
        "printf 'primary-marker\\r\\n'; read go; ",
        "printf '\\033[?1049h\\033[H\\033[2JALT-MARKER'; ",
        "awk 'BEGIN { for (i = 1; i <= 20000; i++) printf \"\\033[24;1Hcounter %d\", i }'; ",
        "printf '\\033[?1000h\\033[?1006h\\033[?2004h'; ",
        "read leave; printf '\\033[?1049l'; printf 'after-exit\\r\\n'; read end",
    );
    let (_, mut first) = session
        .open_screen(pane.clone(), sh(script), Resume::From(0), 0)
        .await
        .unwrap();
    let mut seen = Collected::default();
    read_until_text(&mut first, &mut seen, "primary-marker")
        .await
        .unwrap();
    let binding = first.binding().clone();
    let left_at = seen.end;
    drop(first);
    session.input(&binding, b"go\n").await.unwrap();
    // Everything the script writes before `read leave` (a snapshot parses up to the ring's end):
    // the marker line, the echo of "go", the alternate screen's marker, awk's counters
    // (`ESC[24;1H` and "counter " are 15 bytes, then the digits) and the modes.
    let counters: u64 = (1..=20000u64)
        .map(|i| 15 + i.to_string().len() as u64)
        .sum();
    wait_for_output(&session, &pane, 16 + 4 + 25 + counters + 24).await;

    let mut back = session
        .attach_screen(pane.clone(), Some(binding.pty), Resume::From(left_at), 0)
        .await
        .unwrap();
    assert!(
        back.attached().lost > 0,
        "the ring no longer held the bytes"
    );
    let mut got = Collected::default();
    read_until(&mut back, &mut got, LIVENESS, |c| !c.snapshots.is_empty())
        .await
        .unwrap();
    assert!(
        got.gaps.is_empty(),
        "a snapshot, never a gap: {:?}",
        got.gaps
    );
    let (offset, snapshot) = &got.snapshots[0];
    assert!(*offset > 388_000, "snapshot at offset {offset}");
    let text = String::from_utf8_lossy(snapshot);
    for mode in ["\x1b[?1000h", "\x1b[?1006h", "\x1b[?2004h"] {
        assert!(text.contains(mode), "snapshot lacks {mode:?}: {text:?}");
    }
    let vt = terminal(80, 24, &got.terminal);
    let screen = visible(&vt);
    assert_eq!(vt.active_screen_kind(), avt::ScreenKind::Alternate);
    assert_eq!(screen[0].trim_end(), "ALT-MARKER", "{screen:#?}");
    assert_eq!(screen[23].trim_end(), "counter 20000", "{screen:#?}");

    // The program leaves the alternate screen: the shell's screen from before is back.
    session.input(&binding, b"x\n").await.unwrap();
    read_until_text(&mut back, &mut got, "after-exit")
        .await
        .unwrap();
    let vt = terminal(80, 24, &got.terminal);
    let screen = visible(&vt);
    assert_eq!(vt.active_screen_kind(), avt::ScreenKind::Primary);
    assert_eq!(screen[0].trim_end(), "primary-marker", "{screen:#?}");
    assert_eq!(
        screen[1].trim_end(),
        "go",
        "the echo of the input: {screen:#?}"
    );
    assert_eq!(screen[2].trim_end(), "after-exit", "{screen:#?}");
}

/// A snapshot asked for outright (a new window, an app after its restart) reproduces the screen
/// and a scrollback; one larger than a frame's output chunk (64 KiB) arrives whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_larger_than_a_frame_arrives_whole() {
    let home = TestHome::new();
    let session = home.session().await;
    let pane = PaneKey::new("w", "long", "0");
    // 1,000 lines of 79 characters: well over 64 KiB of scrollback, under the ring.
    let script = "awk 'BEGIN { for (i = 1; i <= 1000; i++) printf \"line-%04d %069d\\r\\n\", i, 0 }'; printf done; read x";
    let (_, mut first) = session
        .open_screen(pane.clone(), sh(script), Resume::From(0), 0)
        .await
        .unwrap();
    let mut seen = Collected::default();
    read_until_text(&mut first, &mut seen, "done")
        .await
        .unwrap();
    let pty = first.binding().pty;
    drop(first);

    let mut again = session
        .attach_screen(pane, Some(pty), Resume::Snapshot, 0)
        .await
        .unwrap();
    let mut got = Collected::default();
    read_until(&mut again, &mut got, LIVENESS, |c| !c.snapshots.is_empty())
        .await
        .unwrap();
    let (offset, snapshot) = &got.snapshots[0];
    assert_eq!(*offset, seen.end, "the snapshot is of the screen now");
    assert!(snapshot.len() > 64 * 1024, "{} bytes", snapshot.len());
    let mut vt = avt::Terminal::with_scrollback(80, 24, Some(2000)).unwrap();
    vt.feed(String::from_utf8_lossy(snapshot).as_ref());
    let lines: Vec<String> = vt.screen().text();
    let numbered: Vec<&String> = lines.iter().filter(|l| l.starts_with("line-")).collect();
    assert_eq!(
        numbered.len(),
        1000,
        "scrollback (1,000 lines) and screen hold every line"
    );
    assert!(numbered[0].starts_with("line-0001"));
    assert!(numbered[999].starts_with("line-1000"));
    assert!(lines.iter().any(|l| l.trim_end() == "done"));
}

/// Events are typed and delivered once: a bell, a title, a working directory and a finished
/// command emitted while nobody is attached come with the first attach; an attach that says it
/// has them already does not get them again; a later event comes live with the next key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_from_while_detached_are_delivered_once() {
    let home = TestHome::new();
    let session = home.session().await;
    let pane = PaneKey::new("w", "events", "0");
    let script = concat!(
        "read go; printf '\\a\\033]2;build\\007\\033]7;file://h/tmp\\033\\\\\\033]133;D;3\\007'; ",
        "printf 'emitted\\r\\n'; read more; printf '\\033]0;second\\007'; read end",
    );
    let binding = detached_pane(&session, &pane, script).await;
    session.input(&binding, b"go\n").await.unwrap();
    wait_for_output(&session, &pane, 10).await;
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;

    let mut one = session
        .attach_screen(pane.clone(), Some(binding.pty), Resume::Snapshot, 0)
        .await
        .unwrap();
    let mut got = Collected::default();
    read_until(&mut one, &mut got, LIVENESS, |c| c.events.len() >= 4)
        .await
        .unwrap();
    assert_eq!(
        got.events,
        vec![
            (1, ScreenEvent::Bell),
            (2, ScreenEvent::Title("build".into())),
            (3, ScreenEvent::Cwd("file://h/tmp".into())),
            (4, ScreenEvent::CommandFinished { exit_code: Some(3) }),
        ]
    );
    drop(one);

    // Second attach: the app says it has applied key 4; a snapshot comes, the old events not.
    let mut two = session
        .attach_screen(pane.clone(), Some(binding.pty), Resume::Snapshot, 4)
        .await
        .unwrap();
    let mut again = Collected::default();
    read_until(&mut two, &mut again, LIVENESS, |c| !c.snapshots.is_empty())
        .await
        .unwrap();
    session.input(&binding, b"more\n").await.unwrap();
    read_until(&mut two, &mut again, LIVENESS, |c| !c.events.is_empty())
        .await
        .unwrap();
    assert_eq!(
        again.events,
        vec![(5, ScreenEvent::Title("second".into()))],
        "only the new event, with the next key"
    );
    // Nothing else is pending: no repeat of 1..4 arrives after the live one.
    let extra = tokio::time::timeout(std::time::Duration::from_millis(300), two.next()).await;
    assert!(
        !matches!(extra, Ok(Some(PaneEvent::Event { .. }))),
        "{extra:?}"
    );
}

/// A snapshot taken while the output stopped inside an escape sequence or a UTF-8 character
/// ends with that prefix, so the output after it completes the sequence on the client: the cursor
/// moves instead of `10H` being printed, `€` is whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_taken_inside_a_sequence_is_completed_by_the_output() {
    let home = TestHome::new();
    let session = home.session().await;
    let pane = PaneKey::new("w", "split", "0");
    let script = concat!(
        "stty -echo; printf 'top\\033[5;'; read a; ",
        "printf '10HX\\342\\202'; read b; printf '\\254.'; read c",
    );
    let binding = detached_pane(&session, &pane, script).await;
    // Two clients on two connections (a second attach on one connection takes over the first).
    let other = home.session().await;
    let attach = |session: relay_connector::Session| {
        let (pane, pty) = (pane.clone(), binding.pty);
        async move { snapshot_client(&session, pane, pty).await }
    };
    wait_for_output(&session, &pane, 7).await;
    let (mut one, mut got_one) = attach(session.clone()).await;
    session.input(&binding, b"a\n").await.unwrap();
    wait_for_output(&session, &pane, 13).await;
    let (mut two, mut got_two) = attach(other.clone()).await;
    session.input(&binding, b"b\n").await.unwrap();
    for (h, got) in [(&mut one, &mut got_one), (&mut two, &mut got_two)] {
        read_until(h, got, LIVENESS, |c| c.end >= 15).await.unwrap();
        let vt = terminal(80, 24, &got.terminal);
        let screen = visible(&vt);
        assert_eq!(screen[0].trim_end(), "top", "{screen:#?}");
        assert_eq!(screen[4].trim_end(), "         X€.", "{screen:#?}");
    }
}

/// A client that attaches to `pty` of `pane` with a snapshot, once the snapshot arrived.
async fn snapshot_client(
    session: &relay_connector::Session,
    pane: PaneKey,
    pty: relay_protocol::PtyId,
) -> (relay_connector::PaneHandle, Collected) {
    let mut handle = session
        .attach_screen(pane, Some(pty), Resume::Snapshot, 0)
        .await
        .unwrap();
    let mut got = Collected::default();
    read_until(&mut handle, &mut got, LIVENESS, |c| !c.snapshots.is_empty())
        .await
        .unwrap();
    (handle, got)
}

/// Regression: a pane size of 65535×65535 made the terminal model allocate ~137 GB and the
/// daemon died with every shell. Sizes beyond 1000×1000 are refused, and nothing else changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_terminal_size_is_refused_and_harms_nothing() {
    let home = TestHome::new();
    let session = home.session().await;
    let huge = relay_protocol::TermSize {
        cols: 65535,
        rows: 65535,
    };
    let spec = relay_protocol::SpawnSpec {
        size: huge,
        ..sh("echo never")
    };
    let err = session
        .create(PaneKey::new("w", "huge", "0"), spec)
        .await
        .unwrap_err();
    assert!(
        matches!(
            err.agent_reply(),
            Some(relay_protocol::ErrorReply::LimitExceeded { limit: 1000, .. })
        ),
        "{err}"
    );
    let (created, mut handle) = session
        .open_screen(
            PaneKey::new("w", "ok", "0"),
            sh(super::ECHO_LOOP),
            Resume::From(0),
            0,
        )
        .await
        .unwrap();
    let err = session.resize(&created.binding, huge).await.unwrap_err();
    assert!(err.to_string().contains("1000"), "{err}");
    let mut got = Collected::default();
    session.input(&created.binding, b"still\n").await.unwrap();
    read_until_text(&mut handle, &mut got, "got:still")
        .await
        .unwrap();
}

/// Real full-screen programs: `less` and `vim` (with the mouse on) are drawn back by a snapshot
/// exactly as an independent terminal fed their whole output shows them, with their modes, and
/// the shell's screen is back when they quit. `.ci/run` installs both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn less_and_vim_come_back_exactly_from_a_snapshot() {
    let home = TestHome::new();
    let session = home.session().await;
    let file = home.path().join("numbers.txt");
    let text: String = (1..=500)
        .map(|i| format!("line {i} of the file\n"))
        .collect();
    std::fs::write(&file, text).unwrap();
    let file = file.display().to_string();
    let programs = [
        (
            "less",
            format!("less {file}"),
            "line 1 of the file",
            &["\x1b[?1049h"][..],
        ),
        (
            "vim",
            format!("vim -u NONE -N -c 'set mouse=a' {file}"),
            // The file's name in the last line, drawn after the text.
            "numbers.txt\"",
            // vim asks for button-motion tracking in SGR encoding on an xterm.
            &["\x1b[?1049h", "\x1b[?1002h", "\x1b[?1006h"][..],
        ),
    ];
    for (name, command, ready, modes) in programs {
        let pane = PaneKey::new("w", name, "0");
        let script = format!(
            "printf 'shell-before\\r\\n'; read go; {command}; printf 'shell-after\\r\\n'; read end"
        );
        let (created, mut whole) = session
            .open_screen(pane.clone(), sh(&script), Resume::From(0), 0)
            .await
            .unwrap();
        let mut all = Collected::default();
        read_until_text(&mut whole, &mut all, "shell-before")
            .await
            .unwrap();
        session.input(&created.binding, b"go\n").await.unwrap();
        read_until_text(&mut whole, &mut all, ready).await.unwrap();
        let other = home.session().await;
        let (mut back, mut got) = snapshot_client(&other, pane, created.binding.pty).await;
        // Compare at the same offset: the whole output up to the snapshot's offset, and the
        // snapshot alone.
        let offset = got.snapshots[0].0;
        read_until(&mut whole, &mut all, LIVENESS, |c| c.end >= offset)
            .await
            .unwrap();
        let reference = terminal(80, 24, &all.data[..offset as usize]);
        let restored = terminal(80, 24, &got.snapshots[0].1);
        assert_eq!(visible(&restored), visible(&reference), "{name}");
        assert_eq!(
            restored.active_screen_kind(),
            avt::ScreenKind::Alternate,
            "{name}"
        );
        assert_eq!(restored.cursor(), reference.cursor(), "{name}");
        let snapshot = String::from_utf8_lossy(&got.snapshots[0].1).into_owned();
        for mode in modes {
            assert!(
                snapshot.contains(mode),
                "{name}: no {mode:?} in the snapshot"
            );
        }
        // Quit: the shell's screen comes back on the restored terminal too.
        let quit: &[u8] = if name == "vim" { b":q\r" } else { b"q" };
        session.input(&created.binding, quit).await.unwrap();
        read_until_text(&mut back, &mut got, "shell-after")
            .await
            .unwrap();
        let restored = terminal(80, 24, &got.terminal);
        let screen = visible(&restored);
        assert_eq!(
            restored.active_screen_kind(),
            avt::ScreenKind::Primary,
            "{name}"
        );
        assert_eq!(screen[0].trim_end(), "shell-before", "{name}: {screen:#?}");
        assert!(
            screen.iter().any(|l| l.trim_end() == "shell-after"),
            "{name}: {screen:#?}"
        );
    }
}

/// Opens `pane` running `script` and detaches from it at once; returns its binding.
async fn detached_pane(
    session: &relay_connector::Session,
    pane: &PaneKey,
    script: &str,
) -> relay_protocol::Binding {
    let (created, handle) = session
        .open_screen(pane.clone(), sh(script), Resume::From(0), 0)
        .await
        .unwrap();
    drop(handle);
    created.binding
}
