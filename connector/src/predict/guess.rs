//! The pending predictions on one row: what each keystroke changed, where it left the
//! cursor, and how the host's output confirms or contradicts them.
//!
//! **Editing model.** A printable character is inserted at the cursor and the text after it
//! moves right one column, as readline, zle and fish insert. A backspace deletes the character
//! before the cursor and the text after it moves left. Left and right move the cursor within
//! the line being edited. "The text after the cursor" stops at the first two blank cells in a
//! row: a right prompt or other text further along the row stays where it is. Typing the
//! character that is already under the cursor (an autosuggestion's ghost text) moves over it.
//! The cells a keystroke typed or erased are *hard* predictions, judged against the echo; the
//! cells it only moved are *soft*: drawn, but when the host puts something else there they are
//! quietly dropped, because where a line editor redraws the rest of a line (ghost text of an
//! autosuggestion, a right prompt) is its own choice.
//!
//! Nothing is predicted when it would put anything into the last column (the line editor
//! wraps there), on a row that continues on the next one, next to a character this model
//! cannot place (wide, combining, ambiguous width), or left of where editing on this row began.
//!
//! **Judging.** Echoes come back in the order keys were typed. After each output:
//! - *confirmed prefix*: the latest keystroke after which the real cursor stands where the
//!   engine put it, with every hard cell of it and the keystrokes before it showing its
//!   character. Those keystrokes are done; if one of their cells changed to the predicted
//!   character since it was predicted, this is evidence of an echo and the epoch is confirmed.
//!   Requiring the cursor as well is what keeps a prompt printed over typed-ahead keys (a
//!   `Password:` over a typed `P`) from confirming anything by chance.
//! - *due cells*: once a keystroke's echo should have arrived (its send time plus the echo
//!   wait), or the real cursor left the row, each of its hard cells either shows the
//!   predicted character (done) or not (the guess is broken).
//! - *the cursor*: once the last keystroke is due, the real cursor must be where it predicts.
//!   A guess sealed by a keystroke the engine could not model (Tab, Ctrl-U, Enter) skips this
//!   check, and a cell still showing what it showed before counts as overtaken by that
//!   keystroke rather than wrong.

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

use super::keys::narrow;

/// A keystroke the engine can model.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Edit {
    Print(char),
    Backspace,
    Left,
    Right,
}

/// A predicted cell.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Cell {
    /// What the host should show there.
    pub(crate) expected: char,
    /// The real cell when the keystroke was predicted.
    original: char,
    /// The keystroke that set it last.
    key: u64,
    /// Typed or erased (judged), not only moved.
    hard: bool,
}

#[derive(Debug, Clone, Copy)]
struct Pending {
    id: u64,
    sent: Instant,
    cursor_after: u16,
    shown: bool,
}

/// How a guess broke.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Broken {
    /// Output showed something else where a keystroke's echo should be.
    Mispredicted,
    /// A cell was left as it was before the guess, after a keystroke the engine could not
    /// model and which may have undone it: nothing proven wrong.
    Overtaken,
}

/// What one look at the real screen decided.
#[derive(Debug, Default)]
pub(crate) struct Judgement {
    /// Keystrokes done and borne out.
    pub(crate) confirmed: u64,
    /// An echo changed a cell to its predicted character: the epoch is confirmed. Holds the
    /// send time of the newest keystroke so confirmed.
    pub(crate) echo_of: Option<Instant>,
    /// The guess is broken: drop it.
    pub(crate) broken: Option<Broken>,
}

/// The pending predictions on one row, all of one epoch.
#[derive(Debug)]
pub(crate) struct Guess {
    pub(crate) row: u16,
    pub(crate) epoch: u64,
    /// The cursor before the first pending keystroke.
    base_col: u16,
    cells: BTreeMap<u16, Cell>,
    keys: VecDeque<Pending>,
    /// A keystroke the engine could not model followed: nothing more is added, and the cursor
    /// is not judged.
    sealed: bool,
    /// Keystrokes up to this id were judged when due without output (late echoes kept).
    judged_quiet: Option<u64>,
}

impl Guess {
    /// An empty guess starting at the real cursor.
    pub(crate) fn new(row: u16, col: u16, epoch: u64) -> Guess {
        Guess {
            row,
            epoch,
            base_col: col,
            cells: BTreeMap::new(),
            keys: VecDeque::new(),
            sealed: false,
            judged_quiet: None,
        }
    }

    /// Where the cursor is after every pending keystroke.
    pub(crate) fn cursor(&self) -> u16 {
        self.keys.back().map_or(self.base_col, |k| k.cursor_after)
    }

    /// Whether no keystroke is pending (then no cell is either).
    pub(crate) fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Pending keystrokes.
    pub(crate) fn len(&self) -> u64 {
        self.keys.len() as u64
    }

    /// The send time of the oldest pending keystroke.
    pub(crate) fn oldest(&self) -> Option<Instant> {
        self.keys.front().map(|k| k.sent)
    }

    /// When the next keystroke that still has cells to judge is due (sent + `wait`); `None`
    /// when none has.
    pub(crate) fn next_due(&self, wait: Duration) -> Option<Instant> {
        self.keys
            .iter()
            .filter(|k| self.judged_quiet.is_none_or(|j| k.id > j))
            .find(|k| self.cells.values().any(|c| c.key == k.id))
            .map(|k| k.sent + wait)
    }

    /// Marks a keystroke the engine could not model: this guess takes no more keystrokes.
    pub(crate) fn seal(&mut self) {
        self.sealed = true;
    }

    /// Predicted cells, by column.
    pub(crate) fn cells(&self) -> impl Iterator<Item = (u16, &Cell)> {
        self.cells.iter().map(|(col, cell)| (*col, cell))
    }

    /// Whether `(row, col)` is a cursor position this guess accounts for: before or after one
    /// of its keystrokes.
    pub(crate) fn expects_cursor(&self, (row, col): (u16, u16)) -> bool {
        row == self.row && (col == self.base_col || self.keys.iter().any(|k| k.cursor_after == col))
    }

    /// Whether a pending keystroke has been shown.
    pub(crate) fn any_shown(&self) -> bool {
        self.keys.iter().any(|k| k.shown)
    }

    /// Follows `rows` rows of scrolling: the row moved up with its text. Returns `false` when
    /// it left the screen.
    pub(crate) fn scrolled(&mut self, rows: u32) -> bool {
        match u16::try_from(rows)
            .ok()
            .and_then(|n| self.row.checked_sub(n))
        {
            Some(row) => {
                self.row = row;
                true
            }
            None => false,
        }
    }

    /// Counts the keystrokes not shown before and marks them shown.
    pub(crate) fn mark_shown(&mut self) -> u64 {
        let mut fresh = 0;
        for key in self.keys.iter_mut().filter(|k| !k.shown) {
            key.shown = true;
            fresh += 1;
        }
        fresh
    }

    /// Adds keystroke `id`, sent at `sent`, if it can be modeled; `edit_start` is the leftmost
    /// column backspace and left may reach. Returns whether it was added.
    pub(crate) fn apply(
        &mut self,
        edit: Edit,
        screen: &vt100::Screen,
        edit_start: u16,
        id: u64,
        sent: Instant,
    ) -> bool {
        if self.sealed || screen.row_wrapped(self.row) {
            return false;
        }
        let cols = screen.size().1.get();
        let at = self.cursor();
        let Some(tail) = self.tail(screen, at, cols) else {
            return false;
        };
        let (writes, cursor_after) = match edit {
            Edit::Print(ch) => {
                // Nothing may reach the last column: the cursor stays left of it, so does the
                // moved text.
                let end = tail.map_or(at, |end| end + 1);
                if !narrow(ch) || end + 1 >= cols {
                    return false;
                }
                if self.shown(screen, at) == Some(ch) {
                    // Typing what is already there (an autosuggestion's ghost text, a blank at
                    // the end of the line) moves over it.
                    return self.add(screen, &[(at, ch, true)], id, sent, at + 1);
                }
                let mut writes = vec![(at, ch, true)];
                for col in at..end {
                    writes.push((col + 1, self.shown(screen, col).unwrap_or(' '), false));
                }
                (writes, at + 1)
            }
            Edit::Backspace => {
                if at <= edit_start || self.shown(screen, at - 1).is_none() {
                    return false;
                }
                let writes = match tail {
                    None => vec![(at - 1, ' ', true)],
                    Some(end) => (at - 1..=end)
                        .map(|col| {
                            let from = if col == end {
                                None
                            } else {
                                self.shown(screen, col + 1)
                            };
                            (col, from.unwrap_or(' '), false)
                        })
                        .collect(),
                };
                (writes, at - 1)
            }
            Edit::Left => {
                if at <= edit_start || self.shown(screen, at - 1).is_none() {
                    return false;
                }
                (Vec::new(), at - 1)
            }
            Edit::Right => {
                if tail.is_none() || at + 2 >= cols {
                    return false;
                }
                (Vec::new(), at + 1)
            }
        };
        self.add(screen, &writes, id, sent, cursor_after)
    }

    /// Records keystroke `id`: the cells it writes (column, character, hard) and the cursor
    /// after it.
    fn add(
        &mut self,
        screen: &vt100::Screen,
        writes: &[(u16, char, bool)],
        id: u64,
        sent: Instant,
        cursor_after: u16,
    ) -> bool {
        for &(col, expected, hard) in writes {
            let original = model_char(screen, self.row, col).unwrap_or(' ');
            self.cells.insert(
                col,
                Cell {
                    expected,
                    original,
                    key: id,
                    hard,
                },
            );
        }
        self.keys.push_back(Pending {
            id,
            sent,
            cursor_after,
            shown: false,
        });
        true
    }

    /// The last column of the text after `at` (up to two blanks in a row), `Some(None)` when
    /// there is none, `None` when a cell there cannot be modeled.
    fn tail(&self, screen: &vt100::Screen, at: u16, cols: u16) -> Option<Option<u16>> {
        let mut end = None;
        let mut blanks = 0;
        for col in at..cols {
            match self.shown(screen, col)? {
                ' ' => {
                    blanks += 1;
                    if blanks == 2 {
                        break;
                    }
                }
                _ => {
                    blanks = 0;
                    end = Some(col);
                }
            }
        }
        Some(end)
    }

    /// What the cell at `col` shows with the predictions on: `None` when it is not one
    /// narrow character (or blank).
    fn shown(&self, screen: &vt100::Screen, col: u16) -> Option<char> {
        match self.cells.get(&col) {
            Some(cell) => Some(cell.expected),
            None => model_char(screen, self.row, col),
        }
    }

    /// Compares the guess with the real screen after output arrived at `now`; a keystroke is
    /// due `wait` after it was sent. `quiet`: no output arrived, time passed: a due cell that
    /// still shows what it showed before is a late echo, kept for later, not a contradiction.
    pub(crate) fn judge(
        &mut self,
        screen: &vt100::Screen,
        now: Instant,
        wait: Duration,
        quiet: bool,
    ) -> Judgement {
        let mut verdict = Judgement::default();
        let (row, col) = screen.cursor_position();
        let away = row != self.row;
        if !away {
            self.confirm_prefix(screen, col, &mut verdict);
        }
        let due_ids: Vec<u64> = self
            .keys
            .iter()
            .filter(|k| away || k.sent + wait <= now)
            .map(|k| k.id)
            .collect();
        let mut broken = None;
        self.cells.retain(|&at, cell| {
            if !due_ids.contains(&cell.key) {
                return true;
            }
            if quiet && holds(screen, self.row, at, cell.original) {
                return true;
            }
            if cell.hard && !holds(screen, self.row, at, cell.expected) {
                let unchanged = holds(screen, self.row, at, cell.original);
                let why = if self.sealed && unchanged {
                    Broken::Overtaken
                } else {
                    Broken::Mispredicted
                };
                broken = Some(broken.map_or(why, |b: Broken| b.max_with(why)));
            }
            false
        });
        if quiet {
            self.judged_quiet = due_ids.iter().max().copied().or(self.judged_quiet);
        }
        if broken.is_none() && !away && !self.sealed && !quiet {
            if let Some(last) = self.keys.back() {
                if due_ids.contains(&last.id) && last.cursor_after != col {
                    broken = Some(Broken::Mispredicted);
                }
            }
        }
        if broken.is_some() {
            verdict.broken = broken;
        } else if away || (self.sealed && self.cells.is_empty()) {
            // Every cell is resolved and nothing contradicted them.
            verdict.confirmed += self.len();
            self.keys.clear();
        }
        verdict
    }

    fn confirm_prefix(&mut self, screen: &vt100::Screen, col: u16, verdict: &mut Judgement) {
        let first_wrong = self
            .cells
            .iter()
            .filter(|(at, cell)| cell.hard && !holds(screen, self.row, **at, cell.expected))
            .map(|(_, cell)| cell.key)
            .min()
            .unwrap_or(u64::MAX);
        let Some(last) = self
            .keys
            .iter()
            .rposition(|k| k.id < first_wrong && k.cursor_after == col)
        else {
            return;
        };
        let done = self.keys[last];
        let echoed = self
            .cells
            .values()
            .any(|c| c.hard && c.key <= done.id && c.expected != c.original);
        self.cells.retain(|_, cell| cell.key > done.id);
        self.base_col = done.cursor_after;
        verdict.confirmed += (last + 1) as u64;
        self.keys.drain(..=last);
        if echoed {
            verdict.echo_of = Some(done.sent);
        }
    }
}

impl Broken {
    /// The worse of two: a misprediction outweighs an overtaken cell.
    fn max_with(self, other: Broken) -> Broken {
        if self == Broken::Mispredicted || other == Broken::Mispredicted {
            Broken::Mispredicted
        } else {
            Broken::Overtaken
        }
    }
}

/// The model's cell as one narrow character, a space when blank; `None` when it is part of a
/// wide character or holds more than one character.
pub(crate) fn model_char(screen: &vt100::Screen, row: u16, col: u16) -> Option<char> {
    let cell = screen.cell(row, col)?;
    if cell.is_wide() || cell.is_wide_continuation() {
        return None;
    }
    let mut chars = cell.contents().chars();
    match (chars.next(), chars.next()) {
        (None, _) => Some(' '),
        (Some(c), None) if narrow(c) => Some(c),
        _ => None,
    }
}

/// Whether the model's cell shows `ch` (a blank cell shows a space).
pub(crate) fn holds(screen: &vt100::Screen, row: u16, col: u16, ch: char) -> bool {
    model_char(screen, row, col) == Some(ch)
}
