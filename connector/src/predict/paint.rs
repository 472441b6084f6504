//! Draws overlays on a real terminal (sans-IO): the bytes to write so that predictions appear
//! on top of the pane's output and disappear again, without repainting the screen and without
//! touching the terminal's scrollback.
//!
//! The pane's output goes to the terminal byte for byte, as without prediction. The painter
//! only adds bytes between chunks, in two steps:
//!
//! 1. [`Painter::before_output`], before each output chunk is written: every cell it drew is
//!    written again as the model has it (character and attributes; an empty cell is erased with
//!    ECH, `CSI X`, which empties that one cell and moves nothing), then the cursor goes back
//!    to the model's cursor and the pen to the model's attributes. From there on the terminal
//!    equals the model, so the chunk lands exactly where the program means it to, and a chunk
//!    that scrolls pushes the real lines into the scrollback.
//! 2. [`Painter::draw`], after the chunk was written and given to the engine (and after each
//!    keystroke): the overlay is drawn, as a difference from what is already drawn, and the
//!    cursor goes to the predicted cursor. With nothing predicted and nothing drawn it writes
//!    nothing.
//!
//! **Architecture invariant:** the painter writes only absolute cursor moves (CUP), SGR,
//! printable characters and the erasure of single cells it restores (ECH). No save/restore of
//! the cursor (DECSC/DECRC would overwrite the program's own saved cursor), no erasing of
//! lines or the display, no scrolling, nothing in the last column, and only
//! while the model's cursor is left of the last column (a cursor waiting to wrap after a
//! character in the last column would lose that state to a cursor move). The engine predicts
//! nothing in origin mode, insert mode or with a graphics character set, where a painted
//! character would land elsewhere or look different; the painter relies on that.
//!
//! Attributes: a predicted character is drawn with the model's current pen (what the program
//! would echo with), underlined when the overlay says so. A restored cell gets its own
//! attributes from the model. A cell on line-drawing characters written under another
//! character set is restored as its ASCII form (the model keeps no character sets).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::keys::narrow;
use super::overlay::Overlay;

/// What is drawn on a terminal beyond the pane's own output. See the [module docs](self).
#[derive(Debug, Default)]
pub struct Painter {
    /// Cells showing a prediction: (row, column) → (character, underlined).
    drawn: BTreeMap<(u16, u16), (char, bool)>,
    /// Where the terminal's cursor stands when it is not at the model's cursor.
    moved_to: Option<(u16, u16)>,
    /// The model's (rows, columns) when it last drew.
    size: Option<(u16, u16)>,
    reserved_row: Option<u16>,
}

impl Painter {
    /// A painter that has drawn nothing.
    pub fn new() -> Painter {
        Painter::default()
    }

    /// Keeps predictions off `row` (0-based), where the caller draws a status line; `None`
    /// gives it back. Cells already drawn there are forgotten, not restored: the row is the
    /// caller's now.
    pub fn set_reserved_row(&mut self, row: Option<u16>) {
        self.reserved_row = row;
        if let Some(row) = row {
            self.drawn.retain(|(r, _), _| *r != row);
        }
    }

    /// Whether the terminal shows exactly the model: nothing drawn, cursor and pen where the
    /// model has them.
    pub fn is_clear(&self) -> bool {
        self.drawn.is_empty() && self.moved_to.is_none()
    }

    /// Forgets what it drew without restoring it: for a terminal that was redrawn or reflowed
    /// (a resize does this by itself).
    pub fn forget(&mut self) {
        self.drawn.clear();
        self.moved_to = None;
    }

    /// The bytes to write before the next output chunk: what was drawn is restored from
    /// `model` (which must not have seen that chunk yet), cursor and pen put back. Empty when
    /// nothing is drawn.
    pub fn before_output(&mut self, model: &vt100::Screen) -> Vec<u8> {
        self.follow_size(model);
        if self.is_clear() {
            return Vec::new();
        }
        let mut out = Out::new(model);
        for &(row, col) in self.drawn.keys() {
            out.restore(model, row, col);
        }
        out.settle(model, model.cursor_position());
        self.forget();
        out.bytes
    }

    /// The bytes that make the terminal show `overlay` on top of `model` (which has seen all
    /// output written so far): cells no longer predicted restored, new ones drawn, the cursor
    /// at the predicted cursor. Empty when nothing changes.
    pub fn draw(&mut self, overlay: &Overlay, model: &vt100::Screen) -> Vec<u8> {
        self.follow_size(model);
        let (rows, cols) = size(model);
        let cursor = model.cursor_position();
        let drawable = cursor.1 + 1 < cols;
        let reserved = self.reserved_row;
        let usable =
            |row: u16, col: u16| drawable && row < rows && col < cols && Some(row) != reserved;
        let want: BTreeMap<(u16, u16), (char, bool)> = overlay
            .cells
            .iter()
            .filter(|c| {
                usable(c.row, c.col + 1) && narrow(c.ch) && narrow_cell(model, c.row, c.col)
            })
            .map(|c| ((c.row, c.col), (c.ch, c.underline)))
            .collect();
        let target = overlay
            .cursor
            .filter(|&(row, col)| usable(row, col) || (row, col) == cursor)
            .unwrap_or(cursor);
        let stale: Vec<(u16, u16)> = self
            .drawn
            .keys()
            .filter(|pos| !want.contains_key(pos))
            .copied()
            .collect();
        let fresh: Vec<((u16, u16), (char, bool))> = want
            .iter()
            .filter(|(pos, cell)| self.drawn.get(pos) != Some(cell))
            .map(|(pos, cell)| (*pos, *cell))
            .collect();
        if stale.is_empty() && fresh.is_empty() && target == self.moved_to.unwrap_or(cursor) {
            return Vec::new();
        }
        let mut out = Out::new(model);
        for (row, col) in stale {
            out.restore(model, row, col);
        }
        let pen = model.attributes_formatted();
        for ((row, col), (ch, underline)) in fresh {
            out.goto(row, col);
            if underline {
                out.pen(&format!("{pen}\x1b[4m"));
            } else {
                out.pen(&pen);
            }
            out.put(ch.encode_utf8(&mut [0; 4]), 1);
        }
        out.settle(model, target);
        self.drawn = want;
        self.moved_to = (target != cursor).then_some(target);
        out.bytes
    }

    /// A terminal of another size reflowed: what was drawn is gone or elsewhere.
    fn follow_size(&mut self, model: &vt100::Screen) {
        let now = size(model);
        if self.size.is_some_and(|before| before != now) {
            self.forget();
        }
        self.size = Some(now);
    }
}

/// Bytes being written, with what is known of the terminal's cursor and pen.
struct Out {
    bytes: Vec<u8>,
    cols: u16,
    /// The terminal's cursor, when known.
    at: Option<(u16, u16)>,
    /// The last SGR written, when one was.
    pen: Option<String>,
}

impl Out {
    fn new(model: &vt100::Screen) -> Out {
        Out {
            bytes: Vec::new(),
            cols: size(model).1,
            at: None,
            pen: None,
        }
    }

    fn goto(&mut self, row: u16, col: u16) {
        if self.at != Some((row, col)) {
            let mut cup = String::new();
            let _ = write!(cup, "\x1b[{};{}H", row + 1, col + 1);
            self.bytes.extend_from_slice(cup.as_bytes());
            self.at = Some((row, col));
        }
    }

    fn pen(&mut self, sgr: &str) {
        if self.pen.as_deref() != Some(sgr) {
            self.bytes.extend_from_slice(sgr.as_bytes());
            self.pen = Some(sgr.to_owned());
        }
    }

    /// Writes `text`, `width` columns wide, at the cursor.
    fn put(&mut self, text: &str, width: u16) {
        self.bytes.extend_from_slice(text.as_bytes());
        self.at = self
            .at
            .map(|(row, col)| (row, col + width))
            .filter(|&(_, col)| col < self.cols);
    }

    /// Writes the model's cell at (row, col) again: its character (the whole of a wide one)
    /// with its attributes, or erases it with them (ECH, the cursor stays) when it is empty.
    fn restore(&mut self, model: &vt100::Screen, row: u16, mut col: u16) {
        let Some(mut cell) = model.cell(row, col) else {
            return;
        };
        if cell.is_wide_continuation() && col > 0 {
            col -= 1;
            match model.cell(row, col) {
                Some(first) => cell = first,
                None => return,
            }
        }
        self.goto(row, col);
        self.pen(&cell_sgr(cell));
        match cell.contents() {
            // An empty cell is erased, not written with a space: terminals tell the two apart
            // (a selection's trailing blanks, reflow on resize), and so does the model.
            "" => self.bytes.extend_from_slice(b"\x1b[X"),
            text => self.put(text, if cell.is_wide() { 2 } else { 1 }),
        }
    }

    /// Ends with the cursor at `cursor` and, if any SGR was written, the model's pen.
    fn settle(&mut self, model: &vt100::Screen, cursor: (u16, u16)) {
        let col = cursor.1.min(self.cols.saturating_sub(1));
        self.goto(cursor.0, col);
        if self.pen.is_some() {
            self.pen(&model.attributes_formatted());
        }
    }
}

/// The SGR that sets exactly a cell's attributes.
fn cell_sgr(cell: &vt100::Cell) -> String {
    let mut sgr = String::from("\x1b[0");
    for (on, code) in [
        (cell.bold(), ";1"),
        (cell.dim(), ";2"),
        (cell.italic(), ";3"),
        (cell.underline(), ";4"),
        (cell.inverse(), ";7"),
    ] {
        if on {
            sgr.push_str(code);
        }
    }
    color(&mut sgr, cell.fgcolor(), 30);
    color(&mut sgr, cell.bgcolor(), 40);
    sgr.push('m');
    sgr
}

/// Appends the parameters for a foreground (`base` 30) or background (40) colour.
fn color(sgr: &mut String, color: vt100::Color, base: u16) {
    let _ = match color {
        vt100::Color::Default => Ok(()),
        vt100::Color::Idx(i) if i < 8 => write!(sgr, ";{}", base + u16::from(i)),
        vt100::Color::Idx(i) if i < 16 => write!(sgr, ";{}", base + 60 + u16::from(i - 8)),
        vt100::Color::Idx(i) => write!(sgr, ";{};5;{i}", base + 8),
        vt100::Color::Rgb(r, g, b) => write!(sgr, ";{};2;{r};{g};{b}", base + 8),
    };
}

/// Whether the model's cell is neither half of a wide character.
fn narrow_cell(model: &vt100::Screen, row: u16, col: u16) -> bool {
    model
        .cell(row, col)
        .is_some_and(|c| !c.is_wide() && !c.is_wide_continuation())
}

/// (rows, columns).
fn size(model: &vt100::Screen) -> (u16, u16) {
    let (rows, cols) = model.size();
    (rows.get(), cols.get())
}
