//! Tests of the vt100 terminal model on real bytes. A snapshot is written into a second, fresh
//! vt100 parser (the "terminal"), which is compared with a plain vt100 parser fed the same output
//! (the "reference"); the raw bytes are checked for what vt100 cannot show.

use super::*;
use vt100::{Color, MouseProtocolEncoding, MouseProtocolMode};

/// Room for every scrollback line a test produces in the terminal the snapshot is written to.
const TERMINAL_SCROLLBACK: usize = 10_000;

/// What a terminal does with the sequences vt100 leaves to callbacks.
#[derive(Default)]
struct Extras {
    title: Option<Vec<u8>>,
    focus_events: bool,
}

impl vt100::Callbacks for Extras {
    fn set_window_title(&mut self, _: &mut vt100::Screen, title: &[u8]) {
        self.title = Some(title.to_vec());
    }

    fn unhandled_osc(&mut self, _: &mut vt100::Screen, params: &[&[u8]]) {
        // vt100 reports a title containing `;` in pieces.
        if let [b"2", text @ ..] = params {
            self.title = Some(text.join(&b';'));
        }
    }

    fn unhandled_csi(
        &mut self,
        _: &mut vt100::Screen,
        i1: Option<u8>,
        _: Option<u8>,
        params: &[&[u16]],
        c: char,
    ) {
        if i1 == Some(b'?') && params.iter().any(|p| *p == [1004]) && matches!(c, 'h' | 'l') {
            self.focus_events = c == 'h';
        }
    }
}

type Terminal = vt100::Parser<Extras>;

fn fed(cols: u16, rows: u16, scrollback: usize, bytes: &[u8]) -> Vt100Model {
    let mut model = Vt100Model::new(cols, rows, scrollback);
    feed(&mut model, bytes);
    model
}

pub(super) fn feed(model: &mut Vt100Model, bytes: &[u8]) -> Vec<ScreenEvent> {
    let mut events = Vec::new();
    model.feed(bytes, &mut events);
    events
}

/// A terminal of the model's size that first received `before`, then the model's snapshot.
fn render_onto(model: &Vt100Model, before: &[u8]) -> Terminal {
    let (cols, rows) = model.size();
    let mut terminal = Terminal::new_with_callbacks(
        cells(rows),
        cells(cols),
        TERMINAL_SCROLLBACK,
        Extras::default(),
    );
    terminal.process(before);
    terminal.process(&model.snapshot());
    terminal
}

fn render(model: &Vt100Model) -> Terminal {
    render_onto(model, b"")
}

fn reference(cols: u16, rows: u16, bytes: &[u8]) -> vt100::Parser {
    let mut parser = vt100::Parser::new(cells(rows), cells(cols), 0);
    parser.process(bytes);
    parser
}

/// Same characters, attributes, cursor, current colours and input modes on the visible screen.
fn assert_same_screen(terminal: &vt100::Screen, expected: &vt100::Screen) {
    assert_eq!(terminal.contents(), expected.contents());
    assert_eq!(terminal.contents_formatted(), expected.contents_formatted());
    assert_eq!(terminal.cursor_position(), expected.cursor_position());
    assert_eq!(
        terminal.input_mode_formatted(),
        expected.input_mode_formatted()
    );
    assert_eq!(terminal.alternate_screen(), expected.alternate_screen());
    assert_eq!(terminal.hide_cursor(), expected.hide_cursor());
    assert_eq!(
        (terminal.fgcolor(), terminal.bgcolor()),
        (expected.fgcolor(), expected.bgcolor())
    );
}

/// The terminal's scrollback rows, oldest first, as (text, wrapped onto the next row, colour of
/// the first cell).
fn scrollback_rows(terminal: &mut Terminal) -> Vec<(String, bool, Color)> {
    let screen = terminal.screen_mut();
    let len = screen.scrollback_len();
    let cols = screen.size().1.get();
    let rows = (0..len)
        .map(|i| {
            // With an offset of `len - i`, scrollback row `i` is the top visible row.
            screen.set_scrollback(len - i);
            let text = screen.rows(0, cols).next().unwrap_or_default();
            let colour = screen.cell(0, 0).map_or(Color::Default, |c| c.fgcolor());
            (text, screen.row_wrapped(0), colour)
        })
        .collect();
    screen.set_scrollback(0);
    rows
}

fn scrollback_text(terminal: &mut Terminal) -> Vec<String> {
    scrollback_rows(terminal)
        .into_iter()
        .map(|(text, _, _)| text)
        .collect()
}

pub(super) fn numbered_lines(range: std::ops::RangeInclusive<u32>) -> Vec<u8> {
    range
        .flat_map(|n| format!("{n}\r\n").into_bytes())
        .collect()
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

const PRIMARY: &[u8] = b"plain \x1b[31mred\x1b[0m \x1b[1;44mbold on blue\x1b[m\r\n\
    \xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e wide, e\xcc\x81 combined\r\n\
    \x1b[38;2;1;2;3mrgb \x1b[7minverse\x1b[m\r\n\
    0123456789012345678901234567890123456789wrapped here\
    \x1b[3;12H\x1b[32m";

#[test]
fn primary_screen_round_trips_with_colours_wide_chars_and_cursor() {
    let model = fed(40, 10, 100, PRIMARY);
    let terminal = render(&model);
    let expected = reference(40, 10, PRIMARY);
    assert_same_screen(terminal.screen(), expected.screen());
    let screen = terminal.screen();
    assert_eq!(screen.cursor_position(), (2, 11));
    assert_eq!(screen.cell(1, 0).unwrap().contents(), "日");
    assert!(screen.cell(1, 0).unwrap().is_wide());
    assert_eq!(screen.cell(0, 6).unwrap().fgcolor(), Color::Idx(1));
    assert!(screen.row_wrapped(3));
    assert!(!model.alternate_screen());
}

#[test]
fn scrollback_holds_the_last_lines_in_order_then_the_screen() {
    let output = numbered_lines(1..=3000);
    let model = fed(20, 5, 100, &output);
    let snapshot = model.snapshot();
    let mut terminal = render(&model);

    // 3000 lines and the cursor's empty row on a 5-row screen: 1..=2996 scrolled off.
    let expected: Vec<String> = (2897..=2996).map(|n| n.to_string()).collect();
    assert_eq!(scrollback_text(&mut terminal), expected);
    assert_same_screen(terminal.screen(), reference(20, 5, &output).screen());
    assert!(contains(&snapshot, b"2897\r\n2898\r\n"));
    assert!(!contains(&snapshot, b"2896\r\n"));
    assert_eq!(model.parser.callbacks().scrollback.line_lens.len(), 100);
}

#[test]
fn scrollback_of_zero_lines_keeps_none() {
    let output = numbered_lines(1..=50);
    let model = fed(20, 5, 0, &output);
    let mut terminal = render(&model);
    assert!(scrollback_text(&mut terminal).is_empty());
    assert!(!contains(&model.snapshot(), b"45\r\n"));
    assert_same_screen(terminal.screen(), reference(20, 5, &output).screen());
}

#[test]
fn scrollback_lines_keep_their_colours_and_wrapping_after_older_ones_are_dropped() {
    // Every line is red: rows formatted against the previous row would lose the colour once that
    // row is dropped.
    let output =
        b"\x1b[31mfirst\r\nsecond\r\nthird\x1b[m\r\nplain\r\nabcdefghijKLMNO\r\n1\r\n2\r\n";
    let model = fed(10, 3, 5, output);
    let mut terminal = render(&model);
    let rows = scrollback_rows(&mut terminal);
    let expected = [
        ("second", false, Color::Idx(1)),
        ("third", false, Color::Idx(1)),
        ("plain", false, Color::Default),
        ("abcdefghij", true, Color::Default),
        ("KLMNO", false, Color::Default),
    ];
    let expected: Vec<_> = expected
        .iter()
        .map(|&(t, w, c)| (t.to_string(), w, c))
        .collect();
    assert_eq!(rows, expected);
    assert_same_screen(terminal.screen(), reference(10, 3, output).screen());
}

#[test]
fn erasing_scrollback_drops_lines_before_it_even_when_split() {
    let before = numbered_lines(1..=40);
    let clear = b"\x1b[H\x1b[2J\x1b[3J";
    let after = numbered_lines(101..=110);
    for split in 0..=clear.len() {
        let mut model = Vt100Model::new(20, 5, 100);
        feed(&mut model, &[&before[..], &clear[..split]].concat());
        feed(&mut model, &[&clear[split..], &after[..]].concat());
        let mut terminal = render(&model);
        let expected: Vec<String> = (101..=106).map(|n| n.to_string()).collect();
        assert_eq!(scrollback_text(&mut terminal), expected, "split at {split}");
    }
    // The DEC private form erases it too, also when it comes byte by byte.
    let mut model = fed(20, 5, 100, &before);
    for byte in b"\x1b[?3J" {
        feed(&mut model, &[*byte]);
    }
    assert!(scrollback_text(&mut render(&model)).is_empty());
}

/// Output of a shell, then a full-screen program that draws with many cursor-addressed updates.
pub(super) fn full_screen_session(enter: &[u8]) -> Vec<u8> {
    let mut out = numbered_lines(1..=30);
    out.extend_from_slice(b"marker-primary\r\n\x1b[32m$ ");
    out.extend_from_slice(enter);
    out.extend_from_slice(b"\x1b[H\x1b[2J");
    for i in 0..600u32 {
        let (row, col) = (i % 10 + 1, i * 7 % 40 + 1);
        let colour = 31 + i % 7;
        out.extend_from_slice(format!("\x1b[{row};{col}H\x1b[{colour}m{}", i % 10).as_bytes());
    }
    out.extend_from_slice(b"\x1b[H\x1b[44mALT TOP\x1b[m\x1b[?25l\x1b[5;9H");
    out
}

#[test]
fn alternate_screen_is_drawn_over_the_primary_that_returns_when_the_program_exits() {
    let output = full_screen_session(b"\x1b[?1049h");
    let model = fed(40, 10, 100, &output);
    assert!(model.alternate_screen());
    let mut terminal = render(&model);
    let mut expected = reference(40, 10, &output);
    assert_same_screen(terminal.screen(), expected.screen());

    // The key property: the program's own exit shows the shell's screen with its colours.
    terminal.process(b"\x1b[?1049l");
    expected.process(b"\x1b[?1049l");
    assert!(terminal.screen().contents().contains("marker-primary"));
    assert_same_screen(terminal.screen(), expected.screen());
    assert_eq!(terminal.screen().fgcolor(), Color::Idx(2));
    let scrollback = scrollback_text(&mut terminal);
    assert_eq!(scrollback.first().map(String::as_str), Some("1"));
    assert_eq!(scrollback.last().map(String::as_str), Some("22"));
}

#[test]
fn primary_survives_every_alternate_screen_enter_split_across_feeds() {
    let enters: [&[u8]; 4] = [
        b"\x1b[?1049h",
        b"\x1b[?1049;1h",
        b"\x1b[?47h",
        b"\x1b[?1047h",
    ];
    for enter in enters {
        let output = full_screen_session(enter);
        let start = output.windows(enter.len()).position(|w| w == enter);
        let start = start.unwrap();
        for split in start..=start + enter.len() {
            let case = format!("{:?} split at {split}", String::from_utf8_lossy(enter));
            let mut model = Vt100Model::new(40, 10, 100);
            feed(&mut model, &output[..split]);
            feed(&mut model, &output[split..]);
            assert!(model.alternate_screen(), "{case}");
            let mut terminal = render(&model);
            let alternate = terminal.screen().contents();
            assert!(alternate.contains("ALT TOP"), "{case}: {alternate}");
            terminal.process(b"\x1b[?1049l");
            let primary = terminal.screen().contents();
            let shown = primary.contains("marker-primary") && !primary.contains("ALT");
            assert!(shown, "{case}: {primary}");
        }
    }
}

#[test]
fn leaving_a_1047_alternate_screen_shows_the_primary_again() {
    let mut model = fed(40, 10, 100, &full_screen_session(b"\x1b[?1047h"));
    for byte in b"\x1b[?1047l" {
        feed(&mut model, &[*byte]);
    }
    assert!(!model.alternate_screen());
    let contents = render(&model).screen().contents();
    assert!(
        contents.contains("marker-primary") && !contents.contains("ALT"),
        "{contents}"
    );
}

/// The input modes a terminal has, by the names used in [`MODES`].
fn modes(terminal: &Terminal) -> Vec<String> {
    let screen = terminal.screen();
    let flags = [
        (screen.bracketed_paste(), "bracketed paste"),
        (screen.application_cursor(), "application cursor"),
        (screen.application_keypad(), "application keypad"),
        (terminal.callbacks().focus_events, "focus events"),
        (screen.hide_cursor(), "hidden cursor"),
    ];
    let mouse = screen.mouse_protocol_mode();
    let encoding = screen.mouse_protocol_encoding();
    let flags = flags
        .iter()
        .filter(|(on, _)| *on)
        .map(|(_, name)| name.to_string());
    let mouse = (mouse != MouseProtocolMode::None).then(|| format!("mouse {mouse:?}"));
    let encoding =
        (encoding != MouseProtocolEncoding::Default).then(|| format!("mouse {encoding:?}"));
    flags.chain(mouse).chain(encoding).collect()
}

/// (name, sequence setting the mode, sequence resetting it).
const MODES: [(&str, &[u8], &[u8]); 11] = [
    ("bracketed paste", b"\x1b[?2004h", b"\x1b[?2004l"),
    ("application cursor", b"\x1b[?1h", b"\x1b[?1l"),
    ("application keypad", b"\x1b=", b"\x1b>"),
    ("focus events", b"\x1b[?1004h", b"\x1b[?1004l"),
    ("hidden cursor", b"\x1b[?25l", b"\x1b[?25h"),
    ("mouse Press", b"\x1b[?9h", b"\x1b[?9l"),
    ("mouse PressRelease", b"\x1b[?1000h", b"\x1b[?1000l"),
    ("mouse ButtonMotion", b"\x1b[?1002h", b"\x1b[?1002l"),
    ("mouse AnyMotion", b"\x1b[?1003h", b"\x1b[?1003l"),
    ("mouse Sgr", b"\x1b[?1006h", b"\x1b[?1006l"),
    ("mouse Utf8", b"\x1b[?1005h", b"\x1b[?1005l"),
];

#[test]
fn input_modes_and_cursor_visibility_are_reproduced_and_reset() {
    for (name, set, reset) in MODES {
        let mut model = fed(40, 10, 100, b"text");
        feed(&mut model, set);
        let snapshot = model.snapshot();
        assert!(contains(&snapshot, set), "{name} in {snapshot:?}");
        assert_eq!(modes(&render(&model)), [name]);
        feed(&mut model, reset);
        let snapshot = model.snapshot();
        assert!(!contains(&snapshot, set), "{name} in {snapshot:?}");
        assert!(modes(&render(&model)).is_empty(), "{name} after reset");
    }
}

#[test]
fn all_input_modes_together_and_in_one_sequence_are_reproduced() {
    let all = b"\x1b[?1003h\x1b[?1006h\x1b[?1h\x1b=\x1b[?25l\x1b[?1004;2004h";
    let expected = "bracketed paste, application cursor, application keypad, focus events, \
                    hidden cursor, mouse AnyMotion, mouse Sgr";
    assert_eq!(modes(&render(&fed(40, 10, 100, all))).join(", "), expected);
}

#[test]
fn full_reset_turns_focus_events_off() {
    let model = fed(40, 10, 100, b"\x1b[?1004htext\x1bc");
    assert!(!contains(&model.snapshot(), b"\x1b[?1004h"));
    assert!(!render(&model).callbacks().focus_events);
}

#[test]
fn titles_from_osc_0_and_2_appear_as_osc_2() {
    let cases: [(&[u8], &str); 5] = [
        (b"\x1b]0;zero\x07", "zero"),
        (b"\x1b]2;two\x1b\\", "two"),
        (b"\x1b]0;zero st\x1b\\", "zero st"),
        (b"\x1b]2;with;semicolons\x07", "with;semicolons"),
        (b"\x1b]2;first\x07\x1b]2;second\x07", "second"),
    ];
    for (bytes, title) in cases {
        let model = fed(40, 10, 100, bytes);
        let snapshot = model.snapshot();
        assert!(
            contains(&snapshot, format!("\x1b]2;{title}\x07").as_bytes()),
            "{title}"
        );
        assert_eq!(
            render(&model).callbacks().title.as_deref(),
            Some(title.as_bytes())
        );
    }
    assert!(!contains(
        &fed(40, 10, 100, b"no title").snapshot(),
        b"\x1b]"
    ));
}

#[test]
fn an_unterminated_osc_is_bounded() {
    let mut output = b"\x1b]2;".to_vec();
    output.extend(std::iter::repeat_n(b'a', 100_000));
    output.push(0x07);
    let mut model = Vt100Model::new(40, 10, 100);
    let events = feed(&mut model, &output);
    let [ScreenEvent::Title(title)] = &events[..] else {
        panic!("{events:?}")
    };
    assert!(title.len() <= 1024, "{}", title.len());
}

const EVENTS: &[u8] = b"a\x07b\x1b]0;t1\x07\x1b]7;file://host/tmp/x;y\x1b\\\x1b]133;A\x07\
    \x1b]133;D;0\x07\x1b]133;D\x07\x1b]133;D;130\x1b\\\x1b]133;D;x\x07\x1b]2;t2\x1b\\\x07";

fn finished(exit_code: Option<i32>) -> ScreenEvent {
    ScreenEvent::CommandFinished { exit_code }
}

fn expected_events() -> Vec<ScreenEvent> {
    vec![
        ScreenEvent::Bell,
        ScreenEvent::Title("t1".into()),
        ScreenEvent::Cwd("file://host/tmp/x;y".into()),
        finished(Some(0)),
        finished(None),
        finished(Some(130)),
        finished(None),
        ScreenEvent::Title("t2".into()),
        ScreenEvent::Bell,
    ]
}

#[test]
fn events_are_reported_once_in_order_even_split_anywhere() {
    for split in 0..=EVENTS.len() {
        let mut model = Vt100Model::new(40, 10, 100);
        let mut events = feed(&mut model, &EVENTS[..split]);
        events.extend(feed(&mut model, &EVENTS[split..]));
        assert_eq!(events, expected_events(), "split at {split}");
        assert_eq!(feed(&mut model, b"more text"), [], "split at {split}");
    }
    let mut model = Vt100Model::new(40, 10, 100);
    let events: Vec<_> = EVENTS
        .iter()
        .flat_map(|b| feed(&mut model, &[*b]))
        .collect();
    assert_eq!(events, expected_events(), "byte by byte");
}

#[test]
fn resize_changes_the_size_and_the_snapshot() {
    let mut model = fed(40, 10, 100, PRIMARY);
    let mut expected = reference(40, 10, PRIMARY);
    model.resize(60, 20);
    expected.set_size(cells(20), cells(60));
    assert_eq!(model.size(), (60, 20));
    let terminal = render(&model);
    assert_eq!(terminal.screen().size(), (cells(20), cells(60)));
    assert_same_screen(terminal.screen(), expected.screen());

    assert_eq!(Vt100Model::new(0, 0, 0).size(), (1, 1));
}

#[test]
fn shrinking_pushes_top_rows_into_the_scrollback() {
    let output = numbered_lines(1..=9);
    let mut model = fed(40, 10, 100, &output);
    model.resize(40, 5);
    let mut expected = reference(40, 10, &output);
    expected.set_size(cells(5), cells(40));
    let mut terminal = render(&model);
    let lines: Vec<String> = (1..=5).map(|n| n.to_string()).collect();
    assert_eq!(scrollback_text(&mut terminal), lines);
    assert_same_screen(terminal.screen(), expected.screen());
}

#[test]
fn resizing_in_the_alternate_screen_resizes_the_primary_too() {
    let output = full_screen_session(b"\x1b[?1049h");
    let mut model = fed(40, 10, 100, &output);
    let mut expected = reference(40, 10, &output);
    model.resize(50, 12);
    expected.set_size(cells(12), cells(50));
    let mut terminal = render(&model);
    assert_same_screen(terminal.screen(), expected.screen());
    terminal.process(b"\x1b[?1049l");
    expected.process(b"\x1b[?1049l");
    assert_same_screen(terminal.screen(), expected.screen());
}

/// What a user's terminal may be left with: alternate screen, a scroll region, origin mode,
/// colours, modes, a cursor style, a title and text.
const GARBAGE: &[u8] = b"junk\r\n\x1b[2;4r\x1b[?6h\x1b[33m\x1b[2;3H\x1b7\x1b[?1049h\x1b[3;6r\x1b[?6h\x1b[31;44mjunk\x1b[?2004h\
    \x1b[?1003h\x1b[?1005h\x1b=\x1b[?1h\x1b[?25l\x1b[4 q\x1b[?1004h\x1b]2;old\x07\x1b[2;2Hjunk";

#[test]
fn snapshot_over_a_non_fresh_terminal_gives_the_same_state() {
    let sessions = [
        [&numbered_lines(1..=30)[..], PRIMARY].concat(),
        [
            &full_screen_session(b"\x1b[?1049h")[..],
            b"\x1b[?2004h\x1b]2;vim\x07",
        ]
        .concat(),
    ];
    for output in sessions {
        let model = fed(40, 10, 100, &output);
        let mut fresh = render(&model);
        let mut reused = render_onto(&model, GARBAGE);
        assert_same_screen(reused.screen(), fresh.screen());
        assert_eq!(scrollback_text(&mut reused), scrollback_text(&mut fresh));
        assert_eq!(
            reused.callbacks().focus_events,
            fresh.callbacks().focus_events
        );
        fresh.process(b"\x1b[?1049l");
        reused.process(b"\x1b[?1049l");
        assert_same_screen(reused.screen(), fresh.screen());
    }
}

mod plain;
