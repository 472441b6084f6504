//! Terminal state that changes where or how a painted character lands but that the vt100
//! model does not report (origin mode) or does not keep at all (insert mode, character sets).
//!
//! The engine runs the pane's output through vte (the parser inside vt100) a second time and
//! keeps only these flags. While any of them is set, nothing is predicted or painted: in origin
//! mode a cursor address is relative to the scroll region, in insert mode a painted character
//! would shift the rest of the row, and with a graphics character set selected an ASCII
//! character would draw as something else.
//!
//! The same goes for SGR attributes vt100 0.18 does not keep: blink (5, 6), conceal (8),
//! strike-through (9), overline (53), underline colour (58) and underline styles (`4:2` to
//! `4:5`). The painter restores a cell and the pen from the model, so it would drop them; and
//! a concealed echo would show in the model as a plain character and confirm a prediction
//! the user never saw.

/// The flags, updated from the pane's output.
#[derive(Default)]
pub(crate) struct TermModes {
    parser: vte::Parser,
    state: Flags,
}

#[derive(Debug, Clone, Copy)]
struct Flags {
    /// DECOM (`CSI ? 6 h`).
    origin: bool,
    /// The origin flag saved by DECSC (`ESC 7`, and `CSI ? 1049 h` which saves the cursor).
    saved_origin: bool,
    /// IRM (`CSI 4 h`).
    insert: bool,
    /// G0 and G1 designate ASCII (`ESC ( B`, `ESC ) B`).
    g0_ascii: bool,
    g1_ascii: bool,
    /// SO (0x0e) selected G1; SI (0x0f) selects G0 again.
    shifted_out: bool,
    /// A locking shift to G2 or G3 (`ESC n`, `ESC o`, ...) is in effect.
    locked_other: bool,
    /// The SGR attributes the model does not keep.
    sgr: Sgr,
    /// Those saved by DECSC (`ESC 7`, `CSI ? 1049 h`).
    saved_sgr: Sgr,
}

/// SGR attributes the vt100 model does not keep, each on or off.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Sgr {
    blink: bool,
    conceal: bool,
    strike: bool,
    overline: bool,
    underline_color: bool,
    /// Double, curly, dotted or dashed underline (`4:2` to `4:5`).
    underline_style: bool,
}

impl Sgr {
    /// Follows one SGR sequence (`CSI ... m`).
    fn apply(&mut self, params: &vte::Params) {
        if params.is_empty() {
            *self = Sgr::default();
            return;
        }
        let mut params = params.iter();
        while let Some(param) = params.next() {
            match param {
                [0] => *self = Sgr::default(),
                [5 | 6] => self.blink = true,
                [25] => self.blink = false,
                [8] => self.conceal = true,
                [28] => self.conceal = false,
                [9] => self.strike = true,
                [29] => self.strike = false,
                [53] => self.overline = true,
                [55] => self.overline = false,
                [4] | [24] | [4, 0 | 1] => self.underline_style = false,
                [4, _, ..] => self.underline_style = true,
                [58] => {
                    self.underline_color = true;
                    skip_color(&mut params);
                }
                [58, ..] => self.underline_color = true,
                [59] => self.underline_color = false,
                // A colour in parameters of its own (`38;5;n`, `48;2;r;g;b`): its numbers
                // are no attributes.
                [38 | 48] => skip_color(&mut params),
                _ => {}
            }
        }
    }
}

/// Skips the rest of an extended colour given in separate parameters: `5;n` or `2;r;g;b`.
fn skip_color<'a>(params: &mut impl Iterator<Item = &'a [u16]>) {
    match params.next() {
        Some([5]) => {
            params.next();
        }
        Some([2]) => {
            params.next();
            params.next();
            params.next();
        }
        _ => {}
    }
}

impl Default for Flags {
    fn default() -> Self {
        Flags {
            origin: false,
            saved_origin: false,
            insert: false,
            g0_ascii: true,
            g1_ascii: true,
            shifted_out: false,
            locked_other: false,
            sgr: Sgr::default(),
            saved_sgr: Sgr::default(),
        }
    }
}

impl TermModes {
    /// Follows the pane's output, byte for byte, in order.
    pub(crate) fn advance(&mut self, bytes: &[u8]) {
        self.parser.advance(&mut self.state, bytes);
    }

    /// Whether a character painted at an absolute position lands there and looks as typed:
    /// no origin mode, no insert mode, an ASCII character set selected, no SGR attribute on
    /// that the model does not keep.
    pub(crate) fn plain(&self) -> bool {
        let s = &self.state;
        let ascii = if s.shifted_out {
            s.g1_ascii
        } else {
            s.g0_ascii
        };
        !s.origin && !s.insert && ascii && !s.locked_other && s.sgr == Sgr::default()
    }
}

impl vte::Perform for Flags {
    fn execute(&mut self, byte: u8) {
        match byte {
            0x0e => {
                self.shifted_out = true;
                self.locked_other = false;
            }
            0x0f => {
                self.shifted_out = false;
                self.locked_other = false;
            }
            _ => {}
        }
    }

    fn esc_dispatch(&mut self, intermediates: &[u8], _ignore: bool, byte: u8) {
        match (intermediates, byte) {
            ([], b'7') => {
                self.saved_origin = self.origin;
                self.saved_sgr = self.sgr;
            }
            ([], b'8') => {
                self.origin = self.saved_origin;
                self.sgr = self.saved_sgr;
            }
            ([], b'c') => *self = Flags::default(),
            ([], b'n' | b'o' | b'|' | b'}' | b'~') => self.locked_other = true,
            ([b'('], _) => self.g0_ascii = byte == b'B',
            ([b')'], _) => self.g1_ascii = byte == b'B',
            ([b'(' | b')', ..], _) => {
                // A multi-byte designation (`ESC ( % 5`, ...): not ASCII either way.
                if intermediates[0] == b'(' {
                    self.g0_ascii = false;
                } else {
                    self.g1_ascii = false;
                }
            }
            _ => {}
        }
    }

    fn csi_dispatch(&mut self, params: &vte::Params, intermediates: &[u8], _: bool, action: char) {
        let set = match action {
            'm' if intermediates.is_empty() => {
                self.sgr.apply(params);
                return;
            }
            'h' => true,
            'l' => false,
            'p' if intermediates == b"!" => {
                // DECSTR, the soft reset.
                *self = Flags {
                    saved_origin: self.saved_origin,
                    saved_sgr: self.saved_sgr,
                    ..Flags::default()
                };
                return;
            }
            _ => return,
        };
        for param in params.iter() {
            match (intermediates, param) {
                (b"?", [6]) => self.origin = set,
                (b"?", [1049]) if set => {
                    self.saved_origin = self.origin;
                    self.saved_sgr = self.sgr;
                }
                (b"?", [1049]) => {
                    self.origin = self.saved_origin;
                    self.sgr = self.saved_sgr;
                }
                (b"", [4]) => self.insert = set,
                _ => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_that_misplace_a_painted_character_are_followed() {
        let table: &[(&[u8], bool)] = &[
            (b"plain text\r\n\x1b[1;31m\x1b[?25l", true),
            (b"\x1b[?6h", false),
            (b"\x1b[?6h\x1b[?6l", true),
            (b"\x1b[?1;6h", false),
            (b"\x1b[4h", false),
            (b"\x1b[4h\x1b[4l", true),
            (b"\x1b(0", false),
            (b"\x1b(0\x1b(B", true),
            (b"\x1b)0", true),
            (b"\x1b)0\x0e", false),
            (b"\x1b)0\x0e\x0f", true),
            (b"\x1bn", false),
            (b"\x1b[?6h\x1b7\x1b[?6l\x1b8", false),
            (b"\x1b[?6h\x1b[?1049h\x1b[?6l\x1b[?1049l", false),
            (b"\x1b[?6h\x1b[4h\x1b(0\x1bc", true),
            (b"\x1b[?6h\x1b[4h\x1b(0\x1b[!p", true),
            // Cut anywhere, the same.
            (b"\x1b[?", true),
            // SGR attributes the model does not keep.
            (b"\x1b[8m", false),
            (b"\x1b[8m\x1b[28m", true),
            (b"\x1b[8m\x1b[m", true),
            (b"\x1b[1;5m", false),
            (b"\x1b[5m\x1b[0;1m", true),
            (b"\x1b[9m\x1b[29m", true),
            (b"\x1b[4:3m", false),
            (b"\x1b[4:3m\x1b[4m", true),
            (b"\x1b[4:3m\x1b[24m", true),
            (b"\x1b[4:1m", true),
            (b"\x1b[58;5;1m", false),
            (b"\x1b[58:2::1:2:3m\x1b[59m", true),
            (b"\x1b[53m", false),
            // The numbers of a colour are not attributes: 38;5;9 is no blink, 48;2;8;9;5
            // neither conceals, strikes nor blinks.
            (b"\x1b[38;5;9m\x1b[48;2;8;9;5m\x1b[58;5;8m\x1b[59m", true),
            (b"\x1b[8m\x1b7\x1b[m\x1b8", false),
            (b"\x1b[8m\x1b[!p", true),
        ];
        for (output, plain) in table {
            let mut modes = TermModes::default();
            modes.advance(output);
            assert_eq!(modes.plain(), *plain, "{}", String::from_utf8_lossy(output));
        }
        let mut modes = TermModes::default();
        for byte in b"\x1b[?6h" {
            modes.advance(&[*byte]);
        }
        assert!(!modes.plain(), "a sequence cut between reads still counts");
    }
}
