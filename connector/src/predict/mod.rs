//! Predictive local echo (sans-IO): shows typed keys at once on a slow link, before the host's
//! echo arrives, and takes them back when the host says otherwise.
//!
//! A [`Predictor`] per pane is fed three things, each with the time it happened: the pane's
//! output ([`Predictor::output`], byte for byte, in order), the user's keystrokes
//! ([`Predictor::input`], the bytes sent to the PTY) and measured round trips
//! ([`Predictor::rtt_sample`]). It keeps its own model of the pane's screen (a `vt100`
//! parser) and answers with an [`Overlay`]: the cells to draw on top of the real screen and
//! where the cursor should appear. A [`Painter`] turns overlays into terminal bytes that never
//! repaint the screen and never touch the terminal's scrollback: the pane's own output still
//! reaches the terminal byte for byte. Neither does IO or reads a clock.
//!
//! # Decisions (learnt from mosh's design; the code is ours)
//!
//! - **Adaptive display.** In [`PredictMode::Adaptive`] nothing is predicted until the smoothed
//!   round trip (RFC 6298, α = 1/8) exceeds [`SHOW_ABOVE`] (30 ms) and so did each of the last
//!   [`SHOW_AFTER_SAMPLES`] samples (one slow ping is no evidence), and predicting stops when
//!   it falls below [`HIDE_BELOW`] (20 ms); unconfirmed predictions are underlined above
//!   [`UNDERLINE_ABOVE`] (80 ms) until below [`PLAIN_BELOW`] (50 ms), and for a while after a
//!   prediction waited more than 250 ms for its echo (mosh's glitch threshold; ten quick
//!   confirmations end it). Thresholds are mosh's.
//! - **Epochs.** A new, tentative epoch starts at Enter, at any key or escape sequence the
//!   engine does not model, at a cursor position or scroll the engine did not predict, and
//!   after every misprediction or withdrawal. Nothing of an epoch is shown until the host's
//!   echo confirms one of its predictions; after that, further keys of the epoch show at once.
//!   A password typed at a prompt that does not echo is therefore never drawn: its first key
//!   is never confirmed.
//! - **What is predicted:** narrow printable characters, inserted at the cursor (the rest of
//!   the line moves right, as line editors insert), backspace, left and right, on the cursor's
//!   row (see `guess.rs` for the editing model and its limits). Nothing in the alternate
//!   screen, with the cursor hidden, in origin or insert mode, with a graphics character set,
//!   with an SGR attribute on that the model does not keep (blink, conceal, strike-through,
//!   overline, underline colour or style), or into the last column.
//! - **Judging.** A keystroke's echo is due one echo wait after it was sent: SRTT +
//!   max(4·RTTVAR, 50 ms), 1 s before any round trip was measured. Output that shows the
//!   predicted character where and when expected confirms it; output that shows something
//!   else once the echo is due (or once the cursor left the row) is a misprediction: every
//!   prediction is dropped, the epoch ends, [`Stats::mispredicted`] counts it if it was on
//!   screen. A prediction still unconfirmed max(1 s, 2 × echo wait) after its keystroke is
//!   withdrawn ([`Predictor::tick`]; [`Predictor::next_deadline`] says when to call it).
//!
//! # Seeding
//!
//! The model starts blank. A pane that already has a screen (attach, reconnect) is seeded by
//! passing the agent's screen snapshot to [`Predictor::output`]: a snapshot is a byte stream
//! that resets a terminal and reproduces the screen, so it reproduces the model too.

mod guess;
mod keys;
mod mode;
mod overlay;
pub mod paint;
mod rtt;
mod term_modes;

use std::fmt;
use std::num::NonZeroU16;
use std::time::{Duration, Instant};

use guess::{holds, Broken, Edit, Guess};
use keys::{Key, KeyDecoder};
use rtt::Rtt;
use term_modes::TermModes;

pub use mode::{ParseModeError, PredictMode};
pub use overlay::{Overlay, OverlayCell, Stats};
pub use paint::Painter;
pub use rtt::{HIDE_BELOW, PLAIN_BELOW, SHOW_ABOVE, SHOW_AFTER_SAMPLES, UNDERLINE_ABOVE};

/// A shown prediction waiting longer than this for its echo turns underlining on (250 ms,
/// mosh's `GLITCH_THRESHOLD`).
pub const GLITCH_AFTER: Duration = Duration::from_millis(250);
/// Confirmations quicker than [`GLITCH_AFTER`] that end the underlining a glitch turned on
/// (mosh's `GLITCH_REPAIR_COUNT`).
const GLITCH_REPAIR: u8 = 10;

/// The prediction engine of one pane. See the [module docs](self).
pub struct Predictor {
    parser: vt100::Parser<Scrolls>,
    modes: TermModes,
    mode: PredictMode,
    rtt: Rtt,
    decoder: KeyDecoder,
    /// The epoch new predictions belong to.
    epoch: u64,
    /// The newest epoch an echo confirmed; epochs up to it are shown.
    confirmed_epoch: u64,
    guess: Option<Guess>,
    /// Where editing on the current row began: backspace and left stop there.
    edit_start: Option<(u16, u16)>,
    next_key: u64,
    /// The model's cursor after the last output.
    last_cursor: (u16, u16),
    /// Confirmations still needed to end glitch underlining; 0 when none.
    glitch: u8,
    stats: Stats,
}

impl Predictor {
    /// An engine for a pane of `cols` columns × `rows` rows (0 counts as 1), with a blank
    /// model screen.
    pub fn new(cols: u16, rows: u16, mode: PredictMode) -> Predictor {
        Predictor {
            parser: vt100::Parser::new_with_callbacks(cells(rows), cells(cols), 0, Scrolls(0)),
            modes: TermModes::default(),
            mode,
            rtt: Rtt::default(),
            decoder: KeyDecoder::default(),
            epoch: 1,
            confirmed_epoch: 0,
            guess: None,
            edit_start: None,
            next_key: 0,
            last_cursor: (0, 0),
            glitch: 0,
            stats: Stats::default(),
        }
    }

    /// The mode it was made with.
    pub fn mode(&self) -> PredictMode {
        self.mode
    }

    /// The smoothed round trip, `None` before the first sample.
    pub fn srtt(&self) -> Option<Duration> {
        self.rtt.srtt()
    }

    /// Takes one measured round trip (a keystroke to its echo, or a ping to its reply). In
    /// adaptive mode this may turn predictions on or off (off drops what is pending), and it
    /// may change underlining: draw the overlay again afterwards.
    pub fn rtt_sample(&mut self, rtt: Duration) {
        self.rtt.sample(rtt);
        if !self.predicting() {
            self.drop_guess(None);
        }
    }

    /// Takes keystrokes the user typed: the raw bytes as sent to the PTY, at `now`.
    pub fn input(&mut self, bytes: &[u8], now: Instant) {
        if self.mode == PredictMode::Never {
            return;
        }
        let mut keys = Vec::new();
        self.decoder.feed(bytes, &mut keys);
        for key in keys {
            self.key(key, now);
        }
        self.note_shown();
    }

    /// Takes the pane's output (every byte, in order) that arrived at `now`, and judges the
    /// pending predictions against it.
    pub fn output(&mut self, bytes: &[u8], now: Instant) {
        if self.mode != PredictMode::Never {
            self.modes.advance(bytes);
        }
        self.parser.callbacks_mut().0 = 0;
        self.parser.process(bytes);
        let scrolled = std::mem::take(&mut self.parser.callbacks_mut().0);
        self.judge(scrolled, now, false);
        self.last_cursor = self.screen().cursor_position();
        self.expire(now);
        self.note_shown();
    }

    /// The pane now has `cols` columns × `rows` rows: what is pending is dropped.
    pub fn resize(&mut self, cols: u16, rows: u16) {
        self.parser.set_size(cells(rows), cells(cols));
        self.drop_guess(None);
        self.edit_start = None;
        self.last_cursor = self.screen().cursor_position();
    }

    /// Lets time pass: judges keystrokes whose echo is now due against the screen as it is
    /// (an echo that differs is taken back then, even when no more output comes), withdraws
    /// predictions unconfirmed for too long and turns glitch underlining on. Call it at
    /// [`Predictor::next_deadline`].
    pub fn tick(&mut self, now: Instant) {
        let due = self
            .guess
            .as_ref()
            .and_then(|g| g.next_due(self.rtt.echo_wait()))
            .is_some_and(|at| at <= now);
        if due {
            self.judge(0, now, true);
        }
        self.expire(now);
        self.note_shown();
    }

    /// When [`Predictor::tick`] has something to do, `None` while nothing is pending.
    pub fn next_deadline(&self) -> Option<Instant> {
        let guess = self.guess.as_ref()?;
        let oldest = guess.oldest()?;
        let mut at = oldest + self.rtt.withdraw_after();
        if let Some(due) = guess.next_due(self.rtt.echo_wait()) {
            at = at.min(due);
        }
        if self.glitch == 0 && self.shown_now() {
            at = at.min(oldest + GLITCH_AFTER);
        }
        Some(at)
    }

    /// What to draw on top of the real screen now; empty when nothing is shown.
    pub fn overlay(&self) -> Overlay {
        let Some(guess) = self.guess.as_ref().filter(|_| self.shown_now()) else {
            return Overlay::default();
        };
        let underline = self.rtt.underlining() || self.glitch > 0;
        let screen = self.screen();
        let cells = guess
            .cells()
            .filter(|(col, cell)| !holds(screen, guess.row, *col, cell.expected))
            .map(|(col, cell)| OverlayCell {
                row: guess.row,
                col,
                ch: cell.expected,
                underline,
            })
            .collect();
        Overlay {
            cells,
            cursor: Some((guess.row, guess.cursor())),
        }
    }

    /// The model: the pane's real screen as its output made it, without predictions.
    pub fn screen(&self) -> &vt100::Screen {
        self.parser.screen()
    }

    /// The counters so far.
    pub fn stats(&self) -> Stats {
        self.stats
    }

    fn predicting(&self) -> bool {
        match self.mode {
            PredictMode::Never => false,
            PredictMode::Always => true,
            PredictMode::Adaptive => self.rtt.showing(),
        }
    }

    /// Whether the real screen is in a state where a painted character lands where and as
    /// predicted.
    fn screen_allows(&self) -> bool {
        let screen = self.screen();
        let cols = screen.size().1.get();
        let (_, col) = screen.cursor_position();
        !screen.alternate_screen() && !screen.hide_cursor() && self.modes.plain() && col + 1 < cols
    }

    /// Whether the pending guess is on screen now.
    fn shown_now(&self) -> bool {
        self.guess
            .as_ref()
            .is_some_and(|g| g.epoch <= self.confirmed_epoch)
            && self.predicting()
            && self.screen_allows()
    }

    fn note_shown(&mut self) {
        if self.shown_now() {
            if let Some(guess) = &mut self.guess {
                self.stats.shown += guess.mark_shown();
            }
        }
    }

    /// Starts a new epoch; the pending guess takes no more keystrokes.
    fn new_epoch(&mut self) {
        self.epoch += 1;
        if let Some(guess) = &mut self.guess {
            guess.seal();
        }
    }

    /// Drops every prediction (counted withdrawn) and starts a new epoch; `broken` says why
    /// when output contradicted them.
    fn drop_guess(&mut self, broken: Option<Broken>) {
        if let Some(guess) = self.guess.take() {
            if broken == Some(Broken::Mispredicted) && guess.any_shown() {
                self.stats.mispredicted += 1;
            }
            self.stats.withdrawn += guess.len();
        }
        self.new_epoch();
    }

    fn key(&mut self, key: Key, now: Instant) {
        let edit = match key {
            Key::Print(ch) => Edit::Print(ch),
            Key::Backspace => Edit::Backspace,
            Key::Left => Edit::Left,
            Key::Right => Edit::Right,
            Key::Enter => {
                self.edit_start = None;
                self.new_epoch();
                return;
            }
            Key::Other => {
                self.new_epoch();
                return;
            }
        };
        if !self.predict(edit, now) {
            self.new_epoch();
        }
    }

    /// Adds `edit` to the guess, starting one at the real cursor if none is pending. Returns
    /// whether it was predicted.
    fn predict(&mut self, edit: Edit, now: Instant) -> bool {
        if !self.predicting() || !self.screen_allows() {
            return false;
        }
        let screen = self.parser.screen();
        if self.guess.is_none() {
            let (row, col) = screen.cursor_position();
            if !matches!(self.edit_start, Some((r, c)) if r == row && c <= col) {
                self.edit_start = Some((row, col));
            }
            self.guess = Some(Guess::new(row, col, self.epoch));
        }
        let Some(guess) = self.guess.as_mut() else {
            return false;
        };
        let edit_start = match self.edit_start {
            Some((row, col)) if row == guess.row => col,
            _ => guess.cursor(),
        };
        let added = guess.apply(edit, screen, edit_start, self.next_key, now);
        if added {
            self.next_key += 1;
            self.stats.predicted += 1;
        } else if guess.is_empty() {
            self.guess = None;
        }
        added
    }

    /// Judges the pending guess after output that scrolled the screen `scrolled` rows, or,
    /// `quiet`, when time passed without output.
    fn judge(&mut self, scrolled: u32, now: Instant, quiet: bool) {
        let cursor = self.screen().cursor_position();
        if !self.predicting() || !self.screen_allows() {
            if self.guess.is_some() {
                self.drop_guess(None);
            } else if cursor != self.last_cursor {
                self.new_epoch();
            }
            return;
        }
        if scrolled > 0 {
            // The text moved: cautious again, and where editing began is not known.
            self.edit_start = None;
            self.new_epoch();
        }
        let Some(mut guess) = self.guess.take() else {
            if cursor != self.last_cursor {
                self.new_epoch();
            }
            return;
        };
        if scrolled > 0 && !guess.scrolled(scrolled) {
            self.stats.withdrawn += guess.len();
            return;
        }
        if !guess.expects_cursor(cursor) {
            self.new_epoch();
            guess.seal();
        }
        let verdict = guess.judge(self.parser.screen(), now, self.rtt.echo_wait(), quiet);
        self.stats.confirmed += verdict.confirmed;
        if let Some(sent) = verdict.echo_of {
            self.confirmed_epoch = self.confirmed_epoch.max(guess.epoch);
            if now.saturating_duration_since(sent) < GLITCH_AFTER {
                self.glitch = self.glitch.saturating_sub(1);
            }
        }
        self.guess = Some(guess);
        match verdict.broken {
            Some(broken) => self.drop_guess(Some(broken)),
            None if self.guess.as_ref().is_some_and(Guess::is_empty) => self.guess = None,
            None => {}
        }
    }

    /// Withdraws a guess unconfirmed for too long; flags a shown one waiting past the glitch
    /// threshold.
    fn expire(&mut self, now: Instant) {
        let Some(oldest) = self.guess.as_ref().and_then(Guess::oldest) else {
            return;
        };
        let waited = now.saturating_duration_since(oldest);
        if waited >= self.rtt.withdraw_after() {
            self.drop_guess(None);
        } else if waited >= GLITCH_AFTER && self.shown_now() {
            self.glitch = GLITCH_REPAIR;
        }
    }
}

impl fmt::Debug for Predictor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (rows, cols) = self.screen().size();
        f.debug_struct("Predictor")
            .field("cols", &cols)
            .field("rows", &rows)
            .field("mode", &self.mode)
            .field("srtt", &self.rtt.srtt())
            .field("epoch", &self.epoch)
            .field("confirmed_epoch", &self.confirmed_epoch)
            .field("guess", &self.guess)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

/// Counts rows scrolled off the top of the model's primary screen.
struct Scrolls(u32);

impl vt100::Callbacks for Scrolls {
    fn on_scroll(&mut self, _: vt100::capture::RowContents<'_>, alternate_screen: bool) {
        if !alternate_screen {
            self.0 += 1;
        }
    }
}

fn cells(n: u16) -> NonZeroU16 {
    NonZeroU16::new(n).unwrap_or(NonZeroU16::MIN)
}

#[cfg(test)]
mod tests;
