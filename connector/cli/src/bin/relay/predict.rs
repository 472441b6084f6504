//! Predictive local echo on the user's terminal: the library's sans-IO engine
//! ([`relay_connector::predict`]) fed with what this terminal shows, and its overlays written
//! between the pane's output chunks.
//!
//! The engine models the pane's screen; its painter writes absolute cursor positions, so the
//! model's cursor must stand where the terminal's does. A snapshot (attach) makes them agree by
//! itself: it homes and clears the terminal. A new pane's output starts wherever the terminal's
//! cursor was, and a resize may reflow the terminal: then relay asks the terminal where its
//! cursor is (DSR, `ESC [ 6 n`; every VT100-compatible terminal answers `ESC [ row ; col R` on
//! its input) and holds the pane's output back until the answer comes, at most
//! [`ANSWER_WAIT`]. The answer moves the model's cursor there, on a model screen cleared of what
//! it can no longer vouch for. Without an answer nothing is predicted until the next resize asks
//! again, and a late answer is taken out of the input for [`LATE_ANSWER`] rather than typed into
//! the shell.
//!
//! Only the row a status line uses is kept free of predictions ([`Predictions::reserve_row`]).

use std::time::{Duration, Instant};

use relay_connector::predict::{Painter, PredictMode, Predictor};

/// How long pane output waits for the terminal to say where its cursor is (a local terminal
/// answers in microseconds; one reached over a slow ssh link needs its round trip).
pub const ANSWER_WAIT: Duration = Duration::from_secs(2);

/// How long after [`ANSWER_WAIT`] a cursor report is still taken as the late answer.
pub const LATE_ANSWER: Duration = Duration::from_secs(5);

/// The question "where is your cursor?" (DSR 6, ECMA-48 § 8.3.35).
const ASK_CURSOR: &[u8] = b"\x1b[6n";

/// The mode to use on a terminal of type `term` (`$TERM`): [`PredictMode::Never`] on a `dumb`
/// one, which cannot move its cursor or answer where it is; `mode` otherwise.
pub fn for_terminal(mode: PredictMode, term: Option<&str>) -> PredictMode {
    match term {
        Some("dumb") => PredictMode::Never,
        _ => mode,
    }
}

/// Whether the model's cursor is known to stand where the terminal's does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Anchor {
    /// It does: predictions may be drawn.
    Known,
    /// The terminal was asked; pane output waits until the answer or `until`.
    Asked { until: Instant },
    /// No answer came: nothing is drawn; a cursor report before `until` is the late answer.
    Lost { until: Instant },
}

/// The engine and painter of one terminal. See the [module docs](self).
pub struct Predictions {
    predictor: Predictor,
    painter: Painter,
    anchor: Anchor,
}

impl Predictions {
    /// For a terminal of `cols` columns × `rows` rows; `None` for [`PredictMode::Never`]
    /// (nothing to do).
    pub fn new(cols: u16, rows: u16, mode: PredictMode) -> Option<Predictions> {
        (mode != PredictMode::Never).then(|| Predictions {
            predictor: Predictor::new(cols, rows, mode),
            painter: Painter::new(),
            anchor: Anchor::Lost {
                until: Instant::now(),
            },
        })
    }

    /// The bytes that ask the terminal for its cursor; pane output is held from now on (see
    /// [`Predictions::holds_output`]) until the answer reaches [`Predictions::take_answer`] or
    /// [`ANSWER_WAIT`] passed.
    pub fn ask(&mut self, now: Instant) -> &'static [u8] {
        self.anchor = Anchor::Asked {
            until: now + ANSWER_WAIT,
        };
        ASK_CURSOR
    }

    /// Whether pane output must wait for the terminal's answer.
    pub fn holds_output(&self) -> bool {
        matches!(self.anchor, Anchor::Asked { .. })
    }

    /// Takes the terminal's cursor report out of `input` (what stdin gave) while one is awaited
    /// or late; the rest is the user's. With the awaited answer, the model's cursor goes there.
    pub fn take_answer(&mut self, input: &mut Vec<u8>, now: Instant) {
        let awaited = match self.anchor {
            Anchor::Asked { .. } => true,
            Anchor::Lost { until } if now < until => false,
            _ => return,
        };
        let Some((range, row, col)) = find_cursor_report(input) else {
            return;
        };
        input.drain(range);
        if awaited {
            // The model keeps its modes (alternate screen, ...); its contents may be stale.
            let moved = format!("\x1b[2J\x1b[{row};{col}H");
            self.predictor.output(moved.as_bytes(), now);
            self.painter.forget();
            self.anchor = Anchor::Known;
        } else {
            self.anchor = Anchor::Lost { until: now };
        }
    }

    /// The bytes to write before a chunk of pane output (or any other text relay writes on the
    /// terminal): what was drawn is restored, so the chunk lands on the screen the program
    /// expects.
    pub fn before_output(&mut self) -> Vec<u8> {
        self.painter.before_output(self.predictor.screen())
    }

    /// Feeds a chunk just written to the terminal; the bytes that draw the new overlay, empty
    /// unless `at_ground` (the output is between escape sequences, where drawing is safe).
    pub fn output(&mut self, data: &[u8], now: Instant, at_ground: bool) -> Vec<u8> {
        self.predictor.output(data, now);
        self.draw(at_ground)
    }

    /// Feeds keystrokes sent to the pane; the bytes that draw them when predicted.
    pub fn typed(&mut self, data: &[u8], now: Instant, at_ground: bool) -> Vec<u8> {
        if self.anchor != Anchor::Known {
            return Vec::new();
        }
        self.predictor.input(data, now);
        self.draw(at_ground)
    }

    /// Takes a measured round trip to the agent.
    pub fn rtt(&mut self, rtt: Duration, at_ground: bool) -> Vec<u8> {
        self.predictor.rtt_sample(rtt);
        self.draw(at_ground)
    }

    /// When [`Predictions::tick`] has something to do.
    pub fn deadline(&self) -> Option<Instant> {
        let asked = match self.anchor {
            Anchor::Asked { until } => Some(until),
            _ => None,
        };
        match (asked, self.predictor.next_deadline()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Lets time pass: withdraws stale predictions, gives up waiting for the terminal's answer.
    pub fn tick(&mut self, now: Instant, at_ground: bool) -> Vec<u8> {
        if let Anchor::Asked { until } = self.anchor {
            if now >= until {
                self.anchor = Anchor::Lost {
                    until: now + LATE_ANSWER,
                };
            }
        }
        self.predictor.tick(now);
        self.draw(at_ground)
    }

    /// The terminal is now `cols` × `rows`: what was drawn is restored, pending predictions are
    /// dropped, and the terminal is asked where its cursor went (it may have reflowed). The
    /// bytes to write, in order.
    pub fn resize(&mut self, cols: u16, rows: u16, now: Instant) -> Vec<u8> {
        let mut out = self.before_output();
        self.predictor.resize(cols, rows);
        self.painter.forget();
        out.extend_from_slice(self.ask(now));
        out
    }

    /// The engine's counters so far (keys predicted, shown, confirmed, withdrawn;
    /// mispredictions).
    pub fn stats(&self) -> relay_connector::predict::Stats {
        self.predictor.stats()
    }

    /// Keeps predictions off `row` (a status line's), or gives all rows back with `None`.
    pub fn reserve_row(&mut self, row: Option<u16>) {
        self.painter.set_reserved_row(row);
    }

    fn draw(&mut self, at_ground: bool) -> Vec<u8> {
        if !at_ground || self.anchor != Anchor::Known {
            return Vec::new();
        }
        let overlay = self.predictor.overlay();
        self.painter.draw(&overlay, self.predictor.screen())
    }
}

/// Finds a cursor position report (`ESC [ row ; col R`, 1-based, ECMA-48 CPR) in `input`: its
/// byte range, row and column. A report split across two reads is not recognised (terminals
/// write it in one piece).
fn find_cursor_report(input: &[u8]) -> Option<(std::ops::Range<usize>, u16, u16)> {
    let mut from = 0;
    while let Some(at) = input[from..].windows(2).position(|w| w == b"\x1b[") {
        let start = from + at;
        let rest = &input[start + 2..];
        if let Some((row, used)) = number(rest) {
            if rest.get(used) == Some(&b';') {
                if let Some((col, used2)) = number(&rest[used + 1..]) {
                    let end = start + 2 + used + 1 + used2;
                    if input.get(end) == Some(&b'R') {
                        return Some((start..end + 1, row, col));
                    }
                }
            }
        }
        from = start + 1;
    }
    None
}

/// A decimal number at the start of `bytes` (1 to 5 digits, at most 65535): its value and
/// length.
fn number(bytes: &[u8]) -> Option<(u16, usize)> {
    let len = bytes.iter().take_while(|b| b.is_ascii_digit()).count();
    if len == 0 || len > 5 {
        return None;
    }
    let text = std::str::from_utf8(&bytes[..len]).ok()?;
    Some((text.parse().ok()?, len))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursor_reports_are_found_among_typed_bytes() {
        assert_eq!(find_cursor_report(b"\x1b[12;40R"), Some((0..8, 12, 40)));
        assert_eq!(
            find_cursor_report(b"ab\x1b[A\x1b[3;1Rcd"),
            Some((5..11, 3, 1)),
            "after an arrow key"
        );
        assert_eq!(find_cursor_report(b"\x1b[12;40"), None, "cut short");
        assert_eq!(find_cursor_report(b"\x1b[;1R"), None);
        assert_eq!(find_cursor_report(b"\x1b[1;2A"), None, "Shift+Up");
        assert_eq!(find_cursor_report(b"plain"), None);
    }

    fn anchored(now: Instant) -> Predictions {
        let mut p = Predictions::new(80, 24, PredictMode::Always).unwrap();
        assert_eq!(p.ask(now), ASK_CURSOR);
        assert!(p.holds_output());
        let mut input = b"x\x1b[5;3Ry".to_vec();
        p.take_answer(&mut input, now);
        assert_eq!(input, b"xy", "the answer is not typed into the shell");
        assert!(!p.holds_output());
        p
    }

    #[test]
    fn the_answer_moves_the_models_cursor_and_releases_output() {
        let now = Instant::now();
        let p = anchored(now);
        assert_eq!(p.predictor.screen().cursor_position(), (4, 2));
        assert_eq!(p.anchor, Anchor::Known);
    }

    #[test]
    fn without_an_answer_output_goes_on_nothing_is_drawn_and_a_late_answer_is_swallowed() {
        let now = Instant::now();
        let mut p = Predictions::new(80, 24, PredictMode::Always).unwrap();
        p.ask(now);
        assert_eq!(p.deadline(), Some(now + ANSWER_WAIT));
        p.tick(now + ANSWER_WAIT, true);
        assert!(!p.holds_output());
        assert!(p.typed(b"a", now + ANSWER_WAIT, true).is_empty());
        let mut late = b"\x1b[5;3R".to_vec();
        p.take_answer(&mut late, now + ANSWER_WAIT + Duration::from_secs(1));
        assert!(late.is_empty(), "a late answer is swallowed");
        assert_ne!(
            p.anchor,
            Anchor::Known,
            "and does not anchor: output moved on"
        );
        let mut key = b"\x1b[1;2R".to_vec();
        p.take_answer(&mut key, now + ANSWER_WAIT + Duration::from_secs(2));
        assert_eq!(
            key, b"\x1b[1;2R",
            "after one late answer, Shift+F3 is a key again"
        );
    }

    #[test]
    fn an_echoed_prediction_is_drawn_at_the_terminals_cursor_and_restored_before_output() {
        let now = Instant::now();
        let mut p = anchored(now);
        let ms = Duration::from_millis;
        let at = |n| now + ms(n);
        // A prompt, one key and its echo (confirming the epoch), then a key ahead of its echo.
        p.output(b"$ ", at(0), true);
        p.typed(b"l", at(10), true);
        p.output(b"l", at(210), true);
        let drawn = p.typed(b"s", at(300), true);
        // Row 5, column 3 + "$ l" = column 6 (1-based): the `s`, underlined (no round trip was
        // measured yet), which leaves the cursor after it, then the model's pen again.
        let text = String::from_utf8(drawn).unwrap();
        assert_eq!(text, "\x1b[5;6H\x1b[m\x1b[4ms\x1b[m");
        // Before the next chunk: the cell is erased (ECH leaves the cursor at the model's).
        let restore = String::from_utf8(p.before_output()).unwrap();
        assert_eq!(restore, "\x1b[5;6H\x1b[0m\x1b[X\x1b[m");
    }

    #[test]
    fn nothing_is_drawn_inside_an_escape_sequence_or_on_a_reserved_row() {
        let now = Instant::now();
        let mut p = anchored(now);
        let ms = Duration::from_millis;
        p.output(b"$ ", now, true);
        p.typed(b"l", now, true);
        p.output(b"l", now + ms(200), true);
        assert!(p.typed(b"s", now + ms(250), false).is_empty());
        p.reserve_row(Some(4));
        assert!(p.typed(b"x", now + ms(260), true).is_empty());
    }
}
