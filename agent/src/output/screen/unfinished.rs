//! The escape sequence (or UTF-8 character) the output stopped in the middle of.
//!
//! A snapshot is taken wherever the PTY's last read ended, which may be inside `CSI 5;` or in
//! the first two bytes of `€`. The model has parsed that prefix, but a terminal that receives
//! the snapshot has not: without it, the rest of the sequence (which arrives as output after the
//! snapshot's offset) would be drawn as text (`10HX` instead of moving the cursor). The snapshot
//! therefore ends with the unfinished prefix, so the output after it completes the sequence on
//! the client exactly as it did in the model.
//!
//! States follow the VT500-series parser that vte implements (<https://vt100.net/emu/dec_ansi_parser>):
//! escape, CSI, control strings (OSC, DCS, SOS, PM, APC), and UTF-8 in the ground state. C0
//! controls inside a sequence are executed at once by the parser, so they are not part of the
//! prefix (the snapshot already shows their effect). Sans-IO.

/// Longest prefix kept, in bytes; longer control strings keep their first bytes (vt100 keeps
/// only 1 KiB of an OSC anyway).
pub const MAX_UNFINISHED: usize = 4096;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum State {
    #[default]
    Ground,
    Escape,
    Csi,
    /// A control string until `ESC \`: OSC (`osc`, which BEL ends too), DCS, SOS, PM or APC
    /// (vte puts a BEL in those into the string).
    String {
        osc: bool,
    },
    /// Inside a UTF-8 character: continuation bytes still expected.
    Utf8(u8),
}

/// Tracks the unfinished sequence at the end of the output fed so far.
#[derive(Debug, Default)]
pub struct Unfinished {
    state: State,
    bytes: Vec<u8>,
}

impl Unfinished {
    /// Follows `bytes` of output.
    pub fn feed(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.byte(b);
        }
    }

    /// The unfinished prefix (empty at a sequence boundary).
    pub fn prefix(&self) -> &[u8] {
        &self.bytes
    }

    fn ground(&mut self) {
        self.state = State::Ground;
        self.bytes.clear();
    }

    fn push(&mut self, b: u8) {
        if self.bytes.len() < MAX_UNFINISHED {
            self.bytes.push(b);
        }
    }

    fn byte(&mut self, b: u8) {
        match (self.state, b) {
            // CAN and SUB abort any sequence.
            (_, 0x18 | 0x1a) => self.ground(),
            (State::String { osc: true }, 0x07) => self.ground(),
            (_, 0x1b) => {
                self.bytes.clear();
                self.bytes.push(b);
                self.state = State::Escape;
            }
            (State::Ground, 0xc2..=0xf4) => {
                self.bytes.clear();
                self.bytes.push(b);
                self.state = State::Utf8(match b {
                    0xc2..=0xdf => 1,
                    0xe0..=0xef => 2,
                    _ => 3,
                });
            }
            (State::Ground, _) => {}
            (State::Utf8(n), 0x80..=0xbf) => {
                if n == 1 {
                    self.ground();
                } else {
                    self.push(b);
                    self.state = State::Utf8(n - 1);
                }
            }
            (State::Utf8(_), _) => {
                // An invalid character ends; the byte starts afresh.
                self.ground();
                self.byte(b);
            }
            // Executed at once inside sequences; not part of the prefix.
            (State::Escape | State::Csi, 0x00..=0x1f | 0x7f) => {}
            (State::Escape, b'[') => {
                self.push(b);
                self.state = State::Csi;
            }
            (State::Escape, b']' | b'P' | b'X' | b'^' | b'_') => {
                self.push(b);
                self.state = State::String { osc: b == b']' };
            }
            (State::Escape, 0x20..=0x2f) => self.push(b),
            (State::Escape, _) => self.ground(),
            (State::Csi, 0x20..=0x3f) => self.push(b),
            (State::Csi, _) => self.ground(),
            (State::String { .. }, _) => self.push(b),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_prefix_is_what_the_output_stopped_inside() {
        #[rustfmt::skip]
        let cases: &[(&[u8], &[u8])] = &[
            (b"plain text\r\n", b""),
            (b"top\x1b[5;", b"\x1b[5;"),
            (b"\x1b[5;10H", b""),
            (b"\x1b[1;3", b"\x1b[1;3"),
            (b"\x1b[1;31mRED", b""),
            (b"pre\x1b]2;my-ti", b"\x1b]2;my-ti"),
            (b"\x1b]2;title\x07", b""),
            (b"\x1b]2;title\x1b\\", b""),
            (b"\x1b]2;title\x1b", b"\x1b"),
            (b"euro:\xe2\x82", b"\xe2\x82"),
            (b"euro:\xe2\x82\xac", b""),
            (b"\xf0\x9f\x98", b"\xf0\x9f\x98"),
            (b"\xe2\x82A", b""),
            (b"\x1b(", b"\x1b("),
            (b"\x1b(B", b""),
            (b"\x1b[5\n;", b"\x1b[5;"),
            (b"\x1b[5\x18", b""),
            (b"\x1bP1$r", b"\x1bP1$r"),
            (b"\x1bP1$r\x07q", b"\x1bP1$r\x07q"),
            (b"\x1b_app\x07", b"\x1b_app\x07"),
            (b"\x1b[?1049", b"\x1b[?1049"),
            (b"\x1b", b"\x1b"),
            (b"\x1b7", b""),
        ];
        for (input, want) in cases {
            // Whole and split at every byte: the state carries across feeds.
            for at in 0..=input.len() {
                let mut u = Unfinished::default();
                u.feed(&input[..at]);
                u.feed(&input[at..]);
                assert_eq!(
                    u.prefix(),
                    *want,
                    "{:?} split at {at}",
                    String::from_utf8_lossy(input)
                );
            }
        }
    }

    #[test]
    fn a_long_control_string_keeps_its_first_bytes() {
        let mut u = Unfinished::default();
        u.feed(b"\x1b]2;");
        u.feed(&[b'x'; 10_000]);
        assert_eq!(u.prefix().len(), MAX_UNFINISHED);
        assert!(u.prefix().starts_with(b"\x1b]2;xxx"));
        u.feed(b"\x07");
        assert!(u.prefix().is_empty());
    }
}
