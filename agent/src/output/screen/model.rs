//! A sans-IO terminal model per PTY: fed the PTY's output in order, it yields typed events (bell,
//! title, cwd, command finished) and, on demand, a snapshot — bytes that redraw the terminal as
//! the programs left it (rule E: a reader that lost bytes gets a snapshot, never a silent jump).
//!
//! [`Vt100Model`] implements [`TerminalModel`] over the `vt100` crate. Design choices, driven by
//! measurements:
//! - vt100's own scrollback is off (capacity 0): it keeps scrolled rows as cells, 32 B each
//!   (3.8 MB for 1000 rows of 120 columns). Rows leaving the primary screen are kept instead as
//!   formatted text (SGR codes and characters) in a `Scrollback` bounded by a line count, so
//!   memory follows the text (9 KB for 1000 lines of `seq`). Formatting a row costs about what
//!   vt100's own scrollback costs in time (it compares every cell of the row); the `measure`
//!   module prints both.
//! - vt100 keeps the primary grid while the alternate screen is active but only shows the active
//!   one; a snapshot copies the screen into a scratch parser and leaves the alternate screen there
//!   to draw the primary, so feeding costs nothing extra at alternate-screen switches.
//! - A few sequences vt100 handles silently (`CSI 3 J` erases scrollback, `ESC c` resets) or not
//!   at all (`CSI ? 1047 h/l`) are found by a `Matcher` that survives splits between feeds; the
//!   bytes are cut right after each so its effect lands in PTY order.
//!
//! Not reproduced, because vt100 does not keep them: the scroll region and origin mode, the saved
//! cursor outside the alternate screen, charsets (DEC line drawing shows as ASCII letters), tab
//! stops, insert and no-autowrap modes, blink, strikethrough, hidden text, underline styles and
//! colours, OSC 8 links. Growing the height after output scrolled leaves blank rows at the top
//! (vt100 "pulls back" rows it did not keep); those lines stay in the scrollback above them.

use std::collections::VecDeque;
use std::fmt;
use std::num::NonZeroU16;

use vt100::capture::{BasicFormattedCaptureState, RowContents};

use super::plain_lines::{self, ScrollRegion};
use super::unfinished::Unfinished;

/// Default number of scrolled-off primary-screen lines a model keeps for snapshots.
pub const DEFAULT_SCROLLBACK_LINES: usize = 1000;

/// Typed events are the wire's: bell, title (OSC 0/2), working directory (OSC 7) and command
/// finished (OSC 133;D), as documented on [`ScreenEvent`].
pub use relay_protocol::ScreenEvent;

/// A terminal model fed with a PTY's output in order; swappable (vt100 today).
pub trait TerminalModel: Send {
    /// Feeds output bytes in PTY order; any bytes, split anywhere (even inside an escape sequence
    /// or a UTF-8 character). Events found are appended to `events` in order.
    fn feed(&mut self, bytes: &[u8], events: &mut Vec<ScreenEvent>);
    /// The PTY was resized (columns × rows, both ≥ 1; 0 is taken as 1).
    fn resize(&mut self, cols: u16, rows: u16);
    /// Size the model has now: (columns, rows).
    fn size(&self) -> (u16, u16);
    /// Bytes that, written to a terminal of `size()` (xterm-compatible, fresh or not), reproduce
    /// the state: the bounded scrollback (into the terminal's scrollback), the primary screen
    /// (characters, colours and attributes, cursor), then — while a full-screen program runs —
    /// `CSI ? 1049 h` and the alternate screen on top, so that the program's own exit shows the
    /// primary screen again; last the input modes (keypad, cursor keys, bracketed paste, mouse
    /// mode and encoding, focus events), cursor visibility and style, and the title (OSC 2);
    /// at the very end the escape sequence or UTF-8 character the output stopped inside, so the
    /// output that follows completes it on the client as it did in the model.
    fn snapshot(&self) -> Vec<u8>;
    /// `true` while a full-screen program has the alternate screen active.
    fn alternate_screen(&self) -> bool;
    /// Whether rows leaving the primary screen are kept as scrollback (on by default). A caller
    /// that knows far more lines follow than the scrollback keeps turns it off while it feeds
    /// the earlier part of a long backlog: those rows would be dropped again anyway, and keeping
    /// them is most of the cost of parsing short lines; plain text lines are then not drawn at
    /// all (only where they leave the cursor). Turning it off forgets the scrollback
    /// held; if fewer rows than the scrollback holds arrive after it is turned on again, the
    /// snapshot's scrollback starts with a line saying that earlier lines were not kept (never
    /// a silent hole).
    fn set_scrollback_capture(&mut self, on: bool);
}

/// [`TerminalModel`] over a `vt100` parser, with its own text scrollback.
pub struct Vt100Model {
    parser: vt100::Parser<Hooks>,
    matcher: Matcher,
    unfinished: Unfinished,
    region: ScrollRegion,
    /// Bytes that [`Vt100Model::scroll_past`] stood in for (not drawn).
    skipped: u64,
}

impl Vt100Model {
    /// A blank model of `cols` × `rows` cells (0 is taken as 1) keeping the last
    /// `scrollback_lines` rows that scroll off the primary screen (0 keeps none).
    pub fn new(cols: u16, rows: u16, scrollback_lines: usize) -> Self {
        let hooks = Hooks {
            events: Vec::new(),
            title: None,
            focus_events: false,
            scrollback: Scrollback::new(scrollback_lines),
        };
        Self {
            parser: vt100::Parser::new_with_callbacks(cells(rows), cells(cols), 0, hooks),
            matcher: Matcher::default(),
            unfinished: Unfinished::default(),
            region: ScrollRegion::default(),
            skipped: 0,
        }
    }

    fn apply(&mut self, action: Action) {
        let in_alternate = self.parser.screen().alternate_screen();
        match action {
            Action::ClearScrollback => self.parser.callbacks_mut().scrollback.clear(),
            Action::FullReset => self.parser.callbacks_mut().focus_events = false,
            // xterm's 1047 is 47 that also clears the alternate screen on leaving; vt100 only
            // knows 47 (and 1049), so replay the switch as 47 right after the 1047.
            Action::EnterAlternate if !in_alternate => self.parser.process(b"\x1b[?47h"),
            Action::LeaveAlternate if in_alternate => self.parser.process(b"\x1b[?47l"),
            Action::EnterAlternate | Action::LeaveAlternate => {}
        }
    }
}

impl Vt100Model {
    /// With scrollback capture off (the caller knows far more lines follow), the length of the
    /// start of `bytes` that [`Vt100Model::scroll_past`] may stand in for ([`plain_lines`]):
    /// only at a sequence boundary, on the primary screen, with no scroll region set.
    fn replaceable(&self, bytes: &[u8]) -> Option<usize> {
        let screen = self.parser.screen();
        if self.parser.callbacks().scrollback.capture
            || screen.alternate_screen()
            || self.region.may_be_partial()
            || !self.unfinished.prefix().is_empty()
            || !self.matcher.tail.is_empty()
        {
            return None;
        }
        plain_lines::replaceable(bytes, usize::from(screen.size().0.get()))
    }

    /// What feeding `lines` (found by [`Vt100Model::replaceable`]) leaves: their SGR sequences
    /// applied in order, column 0, then a screen's height of line feeds.
    fn scroll_past(&mut self, lines: &[u8]) {
        const LINE_FEEDS: &[u8; 64] = &[b'\n'; 64];
        for sgr in plain_lines::sgr_sequences(lines) {
            self.parser.process(sgr);
        }
        let mut rows = usize::from(self.parser.screen().size().0.get());
        self.parser.process(b"\r");
        while rows > 0 {
            let n = rows.min(LINE_FEEDS.len());
            self.parser.process(&LINE_FEEDS[..n]);
            rows -= n;
        }
        self.skipped += lines.len() as u64;
    }
}

impl TerminalModel for Vt100Model {
    fn feed(&mut self, bytes: &[u8], events: &mut Vec<ScreenEvent>) {
        // The region as it was before this read decides; then this read's sequences count.
        let replaced = self.replaceable(bytes);
        let carried = self.unfinished.prefix().to_vec();
        let alternate_before = self.parser.screen().alternate_screen();
        let whole = bytes;
        let bytes = match replaced {
            Some(end) => {
                self.scroll_past(&bytes[..end]);
                &bytes[end..]
            }
            None => bytes,
        };
        self.unfinished.feed(bytes);
        let mut done = 0;
        while let Some((end, action)) = self.matcher.find(bytes, done) {
            self.parser.process(&bytes[done..end]);
            self.apply(action);
            done = end;
        }
        self.parser.process(&bytes[done..]);
        events.append(&mut self.parser.callbacks_mut().events);
        let screen = self.parser.screen();
        let on_primary = !alternate_before && !screen.alternate_screen();
        self.region
            .follow(&carried, whole, screen.size().0.get(), on_primary);
    }

    fn resize(&mut self, cols: u16, rows: u16) {
        // Rows pushed off the top when the height shrinks reach `on_scroll` like scrolled ones.
        // vt100 resizes the primary grid too while the alternate screen is active, and a
        // change of size sets both grids' scroll regions to the whole screen.
        if (cols.max(1), rows.max(1)) != self.size() {
            self.region = ScrollRegion::default();
        }
        self.parser.set_size(cells(rows), cells(cols));
    }

    fn size(&self) -> (u16, u16) {
        let (rows, cols) = self.parser.screen().size();
        (cols.get(), rows.get())
    }

    fn snapshot(&self) -> Vec<u8> {
        let screen = self.parser.screen();
        let hooks = self.parser.callbacks();
        let rows = usize::from(screen.size().0.get());
        let mut out = Vec::with_capacity(hooks.scrollback.text.len() + 16 * 1024);
        out.extend_from_slice(RESET_TERMINAL);
        if hooks.scrollback.write_to(&mut out) {
            // The cursor is at the start of the line after the last one: scrolling rows − 1 more
            // lines moves every printed line into the terminal's scrollback, so drawing the
            // screen (which starts by erasing it) keeps them.
            out.extend(std::iter::repeat_n(b'\n', rows - 1));
        }
        if screen.alternate_screen() {
            let primary = leave_alternate_screen(screen);
            out.extend_from_slice(primary.screen().contents_formatted().as_bytes());
            out.extend_from_slice(b"\x1b[?1049h");
        }
        out.extend_from_slice(screen.contents_formatted().as_bytes());
        out.extend_from_slice(screen.input_mode_formatted().as_bytes());
        if hooks.focus_events {
            out.extend_from_slice(b"\x1b[?1004h");
        }
        if let Some(title) = &hooks.title {
            out.extend_from_slice(b"\x1b]2;");
            let printable: String = title.chars().filter(|c| !c.is_control()).collect();
            out.extend_from_slice(printable.as_bytes());
            out.push(0x07);
        }
        // Last: the sequence the output stopped inside, which the output after the snapshot's
        // offset completes.
        out.extend_from_slice(self.unfinished.prefix());
        out
    }

    fn alternate_screen(&self) -> bool {
        self.parser.screen().alternate_screen()
    }

    fn set_scrollback_capture(&mut self, on: bool) {
        self.parser.callbacks_mut().scrollback.set_capture(on);
    }
}

impl fmt::Debug for Vt100Model {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (cols, rows) = self.size();
        f.debug_struct("Vt100Model")
            .field("cols", &cols)
            .field("rows", &rows)
            .field("alternate_screen", &self.alternate_screen())
            .field("skipped_bytes", &self.skipped)
            .field(
                "scrollback_lines",
                &self.parser.callbacks().scrollback.line_lens.len(),
            )
            .finish_non_exhaustive()
    }
}

/// Puts a terminal that may hold anything (a user's terminal on re-attach) into a known state
/// before the snapshot draws: leave the alternate screen (elsewhere `?1049l` only restores the
/// cursor, which is then moved), default colours and attributes, whole-screen scroll region,
/// absolute origin, autowrap on, insert mode off, ASCII charset in G0 and selected, mouse
/// tracking, mouse encodings and focus events off, default cursor style, home and erase, and a
/// saved cursor (DECSC) at home with default attributes as on a fresh terminal. Modes the
/// snapshot sets later are written in both states by vt100, so they need no reset here. The
/// terminal's own scrollback (the user's history) is left alone.
const RESET_TERMINAL: &[u8] = b"\x1b[?1049l\x1b[m\x1b[r\x1b[?6l\x1b[?7h\x1b[4l\x1b(B\x0f\
    \x1b[?9l\x1b[?1000l\x1b[?1002l\x1b[?1003l\x1b[?1005l\x1b[?1006l\x1b[?1004l\
    \x1b[0 q\x1b[H\x1b[2J\x1b7";

/// A copy of `screen` after the full-screen program leaves the alternate screen with `?1049l`:
/// the primary grid vt100 kept meanwhile, with the cursor and attributes saved on entering.
fn leave_alternate_screen(screen: &vt100::Screen) -> vt100::Parser {
    let mut scratch = vt100::Parser::new(NonZeroU16::MIN, NonZeroU16::MIN, 0);
    *scratch.screen_mut() = screen.clone();
    scratch.process(b"\x1b[?1049l");
    scratch
}

fn cells(n: u16) -> NonZeroU16 {
    NonZeroU16::new(n).unwrap_or(NonZeroU16::MIN)
}

/// The parser's callbacks: events, the state vt100 does not keep, and the scrollback.
struct Hooks {
    /// Found since the last `feed` returned.
    events: Vec<ScreenEvent>,
    title: Option<String>,
    /// DEC mode 1004, which vt100 leaves to `unhandled_csi`.
    focus_events: bool,
    scrollback: Scrollback,
}

impl Hooks {
    fn set_title(&mut self, title: &[u8]) {
        let title = String::from_utf8_lossy(title).into_owned();
        self.events.push(ScreenEvent::Title(title.clone()));
        self.title = Some(title);
    }
}

impl vt100::Callbacks for Hooks {
    fn audible_bell(&mut self, _: &mut vt100::Screen) {
        self.events.push(ScreenEvent::Bell);
    }

    fn set_window_title(&mut self, _: &mut vt100::Screen, title: &[u8]) {
        self.set_title(title);
    }

    fn unhandled_csi(
        &mut self,
        _: &mut vt100::Screen,
        i1: Option<u8>,
        _: Option<u8>,
        params: &[&[u16]],
        c: char,
    ) {
        // vt100 calls this once per mode it does not know, with all the sequence's parameters.
        let set = match c {
            'h' => true,
            'l' => false,
            _ => return,
        };
        if i1 == Some(b'?') && params.iter().any(|p| *p == [1004]) {
            self.focus_events = set;
        }
    }

    fn unhandled_osc(&mut self, _: &mut vt100::Screen, params: &[&[u8]]) {
        // vte splits an OSC at every `;`: vt100 reports OSC 0 and 2 with exactly one text part
        // itself, so a title containing `;` arrives here in pieces.
        match params {
            [b"0" | b"2", text @ ..] if text.len() > 1 => self.set_title(&text.join(&b';')),
            [b"7", url @ ..] if !url.is_empty() => {
                let url = String::from_utf8_lossy(&url.join(&b';')).into_owned();
                self.events.push(ScreenEvent::Cwd(url));
            }
            [b"133", b"D", rest @ ..] => {
                let exit_code = rest
                    .first()
                    .and_then(|code| std::str::from_utf8(code).ok()?.parse().ok());
                self.events.push(ScreenEvent::CommandFinished { exit_code });
            }
            _ => {}
        }
    }

    fn on_scroll(&mut self, row: RowContents<'_>, alternate_screen: bool) {
        if !alternate_screen {
            self.scrollback.push(&row);
        }
    }
}

/// The last `max_lines` rows that left the primary screen, as text ready to print: each row is
/// self-contained (SGR codes relative to the default attributes, reset at its end if it set any)
/// and ends with `\r\n` unless the terminal wrapped it onto the next row.
#[derive(Debug)]
struct Scrollback {
    text: VecDeque<u8>,
    /// Length in `text` of each row, oldest first.
    line_lens: VecDeque<u32>,
    /// Whether the newest row continues on the next one (its text has no `\r\n`).
    last_wrapped: bool,
    max_lines: usize,
    /// Reused for formatting one row.
    line: String,
    /// Rows are kept (see [`TerminalModel::set_scrollback_capture`]).
    capture: bool,
    /// Rows left the screen while capture was off, and the store has not filled up since: the
    /// oldest line kept is not the one right after what the terminal showed before.
    hole: bool,
}

/// First line of a snapshot's scrollback when rows before it were not kept.
const NOT_KEPT: &[u8] = b"\x1b[2m[relay: earlier lines were not kept]\x1b[m\r\n";

impl Scrollback {
    fn new(max_lines: usize) -> Self {
        Self {
            text: VecDeque::new(),
            line_lens: VecDeque::new(),
            last_wrapped: false,
            max_lines,
            line: String::new(),
            capture: true,
            hole: false,
        }
    }

    fn set_capture(&mut self, on: bool) {
        self.capture = on;
    }

    fn push(&mut self, row: &RowContents<'_>) {
        if self.max_lines == 0 {
            return;
        }
        if !self.capture {
            if !self.hole {
                self.clear();
                self.hole = true;
            }
            return;
        }
        self.line.clear();
        // A fresh state per row makes its codes independent of the rows before it, which may be
        // dropped. Writing into a String cannot fail.
        let mut state = BasicFormattedCaptureState::new();
        let _ = row.write_formatted_basic(&mut self.line, &mut state);
        if self.line.as_bytes().contains(&0x1b) {
            self.line.push_str("\x1b[m");
        }
        self.last_wrapped = continues_on_next_row(row, &mut state);
        if !self.last_wrapped {
            self.line.push_str("\r\n");
        }
        if self.line_lens.len() == self.max_lines {
            let oldest = self.line_lens.pop_front().unwrap_or(0);
            self.text.drain(..oldest as usize);
        }
        self.text.extend(self.line.as_bytes());
        self.line_lens
            .push_back(u32::try_from(self.line.len()).unwrap_or(u32::MAX));
        if self.line_lens.len() == self.max_lines {
            // The rows that were not kept would have been dropped by now anyway.
            self.hole = false;
        }
    }

    fn clear(&mut self) {
        self.text.clear();
        self.line_lens.clear();
        self.last_wrapped = false;
        self.hole = false;
    }

    /// Appends the rows to `out`, ending at the start of a line; `false` if there are none.
    fn write_to(&self, out: &mut Vec<u8>) -> bool {
        if self.hole {
            out.extend_from_slice(NOT_KEPT);
        }
        if self.line_lens.is_empty() {
            return self.hole;
        }
        let (front, back) = self.text.as_slices();
        out.extend_from_slice(front);
        out.extend_from_slice(back);
        if self.last_wrapped {
            out.extend_from_slice(b"\r\n");
        }
        true
    }
}

/// Whether the row just written with `state` continues on the next row. vt100 does not expose a
/// row's wrap flag, but its capture state then has no newline pending, and a pending newline is
/// the first thing a second write emits: probe with a writer that stops at the first character.
fn continues_on_next_row(row: &RowContents<'_>, state: &mut BasicFormattedCaptureState) -> bool {
    struct FirstChar(Option<char>);
    impl fmt::Write for FirstChar {
        fn write_str(&mut self, s: &str) -> fmt::Result {
            self.0 = s.chars().next();
            Err(fmt::Error)
        }
    }
    let mut probe = FirstChar(None);
    let _ = row.write_formatted_basic(&mut probe, state);
    probe.0 != Some('\n')
}

/// What the model does itself after a sequence in [`WATCHED`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    /// `CSI 3 J` (as in `clear`): vt100 has no scrollback of its own to erase, ours must go.
    ClearScrollback,
    /// `ESC c` (RIS): vt100 resets its screen; reset the modes kept here.
    FullReset,
    /// `CSI ? 1047 h`, ignored by vt100.
    EnterAlternate,
    /// `CSI ? 1047 l`, ignored by vt100.
    LeaveAlternate,
}

/// The sequences the model acts on, all starting with ESC. vte starts a new sequence at every ESC
/// (it also ends OSC, DCS and APC strings), so an ESC in the output always begins one.
const WATCHED: [(&[u8], Action); 5] = [
    (b"\x1b[3J", Action::ClearScrollback),
    (b"\x1b[?3J", Action::ClearScrollback),
    (b"\x1bc", Action::FullReset),
    (b"\x1b[?1047h", Action::EnterAlternate),
    (b"\x1b[?1047l", Action::LeaveAlternate),
];

/// Length of the longest sequence in [`WATCHED`].
const WATCHED_MAX_LEN: usize = 8;

enum Watched {
    /// The candidate starts with this sequence, of this length.
    Whole(Action, usize),
    /// The candidate is a proper prefix of a sequence (more bytes are needed).
    Prefix,
    None,
}

fn watched(candidate: &[u8]) -> Watched {
    let mut prefix = false;
    for &(sequence, action) in &WATCHED {
        if candidate.starts_with(sequence) {
            return Watched::Whole(action, sequence.len());
        }
        prefix |= sequence.starts_with(candidate);
    }
    if prefix {
        Watched::Prefix
    } else {
        Watched::None
    }
}

/// Finds [`WATCHED`] sequences in the output, also when a feed ends inside one.
#[derive(Debug, Default)]
struct Matcher {
    /// The end of the previous feed when it is a proper prefix of a watched sequence.
    tail: Vec<u8>,
}

impl Matcher {
    /// The next watched sequence that ends in `bytes[from..]`, as (index just after it, action).
    /// `from` is 0 on the first call for a feed (which may complete the previous feed's tail),
    /// then the end of the previous match.
    fn find(&mut self, bytes: &[u8], from: usize) -> Option<(usize, Action)> {
        if from == 0 && !self.tail.is_empty() {
            let carried = self.tail.len();
            self.tail
                .extend_from_slice(&bytes[..bytes.len().min(WATCHED_MAX_LEN)]);
            match watched(&self.tail) {
                Watched::Whole(action, len) => {
                    self.tail.clear();
                    return Some((len - carried, action));
                }
                // Still short of a whole sequence: all of `bytes` went into the tail.
                Watched::Prefix => return None,
                Watched::None => self.tail.clear(),
            }
        }
        let mut at = from;
        while let Some(esc) = bytes[at..].iter().position(|&b| b == 0x1b) {
            let start = at + esc;
            let candidate = &bytes[start..bytes.len().min(start + WATCHED_MAX_LEN)];
            match watched(candidate) {
                Watched::Whole(action, len) => return Some((start + len, action)),
                Watched::Prefix => {
                    self.tail.clear();
                    self.tail.extend_from_slice(candidate);
                    return None;
                }
                Watched::None => at = start + 1,
            }
        }
        None
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod measure;
