//! Terminal state that changes where or how a painted character lands but that the vt100
//! model does not report (origin mode) or does not keep at all (insert mode, character sets).
//!
//! The engine runs the pane's output through vte (the parser inside vt100) a second time and
//! keeps only these flags. While any of them is set, nothing is predicted or painted: in origin
//! mode a cursor address is relative to the scroll region, in insert mode a painted character
//! would shift the rest of the row, and with a graphics character set selected an ASCII
//! character would draw as something else.

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
        }
    }
}

impl TermModes {
    /// Follows the pane's output, byte for byte, in order.
    pub(crate) fn advance(&mut self, bytes: &[u8]) {
        self.parser.advance(&mut self.state, bytes);
    }

    /// Whether a character painted at an absolute position lands there and looks as typed:
    /// no origin mode, no insert mode, an ASCII character set selected.
    pub(crate) fn plain(&self) -> bool {
        let s = &self.state;
        let ascii = if s.shifted_out {
            s.g1_ascii
        } else {
            s.g0_ascii
        };
        !s.origin && !s.insert && ascii && !s.locked_other
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
            ([], b'7') => self.saved_origin = self.origin,
            ([], b'8') => self.origin = self.saved_origin,
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
            'h' => true,
            'l' => false,
            'p' if intermediates == b"!" => {
                // DECSTR, the soft reset.
                *self = Flags {
                    saved_origin: self.saved_origin,
                    ..Flags::default()
                };
                return;
            }
            _ => return,
        };
        for param in params.iter() {
            match (intermediates, param) {
                (b"?", [6]) => self.origin = set,
                (b"?", [1049]) if set => self.saved_origin = self.origin,
                (b"?", [1049]) => self.origin = self.saved_origin,
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
