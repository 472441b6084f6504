//! What the engine answers: the cells to draw over the real screen, and its counters.

/// Cells to draw on top of the real screen and where the cursor should appear; empty when
/// nothing is shown. Coordinates are 0-based (row, column) on the pane's screen, as
/// [`vt100::Screen::cell`] takes them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Overlay {
    /// Cells whose predicted content differs from the real screen, in row and column order.
    pub cells: Vec<OverlayCell>,
    /// The predicted cursor (row, column), `None` when the real cursor stands.
    pub cursor: Option<(u16, u16)>,
}

impl Overlay {
    /// Whether nothing is predicted on screen: no cell and no cursor.
    pub fn is_empty(&self) -> bool {
        self.cells.is_empty() && self.cursor.is_none()
    }
}

/// One predicted cell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OverlayCell {
    /// Row, 0-based.
    pub row: u16,
    /// Column, 0-based.
    pub col: u16,
    /// The character predicted there: always one column wide; a space for an erased cell.
    pub ch: char,
    /// Whether to underline it, marking it as not yet confirmed: set while the smoothed round
    /// trip is high (above 80 ms, until it falls below 50 ms) or after a prediction waited more
    /// than 250 ms for its echo (mosh's glitch threshold).
    pub underline: bool,
}

/// Counters for benchmarks, counted in keystrokes except `mispredicted`. Every predicted
/// keystroke ends up either `confirmed` or `withdrawn`, or is still pending.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Keystrokes the engine predicted (printable characters, backspaces, left and right
    /// arrows it could model).
    pub predicted: u64,
    /// Predicted keystrokes that were part of an overlay at least once (their epoch had been
    /// confirmed and predictions were on).
    pub shown: u64,
    /// Predicted keystrokes the host's output bore out (the echo matched, or the keystroke was
    /// overtaken by later ones whose echo matched).
    pub confirmed: u64,
    /// Times output contradicted a prediction that was on screen: the overlay was dropped and
    /// a new epoch began. Contradicted predictions nobody saw (a tentative epoch, such as the
    /// first keystroke at a password prompt) are not counted here but in `withdrawn`.
    pub mispredicted: u64,
    /// Predicted keystrokes dropped unconfirmed: contradicted, timed out, or abandoned because
    /// the screen stopped allowing predictions (alternate screen, resize, a slow link becoming
    /// fast).
    pub withdrawn: u64,
}
