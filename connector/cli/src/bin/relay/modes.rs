//! Which terminal modes the pane's program has left on, so that relay can give the user's
//! terminal back as it found it when it leaves (detach, the shell's exit, an error, a signal),
//! as tmux does on detach.
//!
//! [`Modes`] is fed every byte that reaches the terminal from the pane (live output and
//! snapshots) and answers with the bytes that undo what is still on: the alternate screen,
//! mouse tracking and its encodings, focus events, bracketed paste, application cursor keys,
//! application keypad, a hidden cursor and SGR attributes. No IO: the caller writes the bytes.
//!
//! Source for every sequence: xterm's "Control Sequences" (ctlseqs), sections "Functions using
//! CSI" (DECSET/DECRST, SGR, DECSTR) and "Controls beginning with ESC" (DECKPAM, DECKPNM, RIS).

/// DEC private modes turned off on leaving, in the order their resets are written (`CSI ? n l`).
/// The alternate screen (47, 1047, 1049) and the cursor (25, reset by *setting* it) are kept
/// apart.
const DEC_MODES: [u16; 11] = [
    1,    // DECCKM: application cursor keys.
    9,    // X10 mouse reporting.
    1000, // Mouse press and release.
    1002, // Mouse button-event (drag) tracking.
    1003, // Mouse any-event tracking.
    1004, // Focus in/out events.
    1005, // UTF-8 mouse encoding.
    1006, // SGR mouse encoding.
    1015, // urxvt mouse encoding.
    1016, // SGR mouse encoding in pixels.
    2004, // Bracketed paste.
];

/// The longest control sequence body (parameters and intermediates) kept; a longer one is only
/// ever an SGR with many colours, which is taken as "attributes set".
const MAX_BODY: usize = 64;

/// The terminal modes the program has set, tracked from its output (a stream that may be cut
/// anywhere: a sequence split across two writes is still seen whole).
///
/// Shape: [`Modes::feed`] the output as it goes to the terminal, then [`Modes::resets`] for
/// what to write on leaving.
#[derive(Debug, Default, Clone)]
pub struct Modes {
    parse: Parse,
    /// The body of the control sequence being read (bytes between `ESC [` and the final byte).
    body: Vec<u8>,
    /// `body` outgrew [`MAX_BODY`].
    overflow: bool,
    /// Bit `i` set: [`DEC_MODES`]`[i]` is on.
    on: u16,
    alternate: bool,
    keypad: bool,
    cursor_hidden: bool,
    /// An SGR other than a plain reset was the last one seen.
    attributes: bool,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum Parse {
    #[default]
    Ground,
    /// After ESC.
    Escape,
    /// ESC followed by intermediates (`ESC ( B`).
    Intermediate,
    /// Inside `ESC [ ... final`.
    Csi,
    /// Inside a string (OSC, DCS, SOS, PM, APC) until BEL or ST.
    Text,
    /// ESC inside a string (ST is `ESC \`).
    TextEscape,
}

/// CAN and SUB abort a sequence.
fn aborts(b: u8) -> bool {
    b == 0x18 || b == 0x1a
}

impl Modes {
    /// Takes in `data`, the next bytes written to the terminal.
    pub fn feed(&mut self, data: &[u8]) {
        for &b in data {
            self.next(b);
        }
    }

    /// The bytes that turn off what is on, in this order: leave the alternate screen
    /// (`CSI ? 1049 l`), each DEC mode that is on (`CSI ? n l`), numeric keypad (`ESC >`),
    /// show the cursor (`CSI ? 25 h`), default attributes (`CSI 0 m`, also after leaving the
    /// alternate screen, which restores the attributes saved on entering it). Empty when
    /// nothing is on.
    pub fn resets(&self) -> Vec<u8> {
        let mut out = Vec::new();
        if self.alternate {
            out.extend_from_slice(b"\x1b[?1049l");
        }
        for (i, mode) in DEC_MODES.iter().enumerate() {
            if self.on & (1 << i) != 0 {
                out.extend_from_slice(format!("\x1b[?{mode}l").as_bytes());
            }
        }
        if self.keypad {
            out.extend_from_slice(b"\x1b>");
        }
        if self.cursor_hidden {
            out.extend_from_slice(b"\x1b[?25h");
        }
        if self.attributes || self.alternate {
            out.extend_from_slice(b"\x1b[0m");
        }
        out
    }

    fn next(&mut self, b: u8) {
        use Parse::*;
        self.parse = match self.parse {
            _ if b == 0x1b && self.parse != Text => Escape,
            Ground => Ground,
            Escape => match b {
                b'[' => {
                    self.body.clear();
                    self.overflow = false;
                    Csi
                }
                b']' | b'P' | b'X' | b'^' | b'_' => Text,
                b'c' => {
                    // RIS: a full reset, the terminal as it starts.
                    *self = Modes::default();
                    Ground
                }
                b'=' => {
                    self.keypad = true;
                    Ground
                }
                b'>' => {
                    self.keypad = false;
                    Ground
                }
                0x20..=0x2F => Intermediate,
                _ if aborts(b) => Ground,
                // Other C0 controls are executed without leaving the sequence.
                0x00..=0x1F => Escape,
                _ => Ground,
            },
            Intermediate => match b {
                0x20..=0x2F => Intermediate,
                _ if aborts(b) => Ground,
                0x00..=0x1F => Intermediate,
                _ => Ground,
            },
            Csi => match b {
                0x20..=0x3F => {
                    if self.body.len() < MAX_BODY {
                        self.body.push(b);
                    } else {
                        self.overflow = true;
                    }
                    Csi
                }
                0x40..=0x7E => {
                    self.dispatch(b);
                    Ground
                }
                _ if aborts(b) => Ground,
                _ => Csi,
            },
            Text => match b {
                0x07 => Ground,
                0x1b => TextEscape,
                _ if aborts(b) => Ground,
                _ => Text,
            },
            TextEscape => match b {
                b'\\' => Ground,
                _ => {
                    // Not ST: the string ended and a new sequence starts with this byte.
                    self.parse = Escape;
                    return self.next(b);
                }
            },
        };
    }

    /// A whole control sequence: `self.body`, then `final_byte`.
    fn dispatch(&mut self, final_byte: u8) {
        let body = &self.body[..];
        let intermediates = body.iter().any(|b| (0x20..=0x2F).contains(b));
        match (body.first(), final_byte) {
            // DECSTR (`CSI ! p`), soft reset: cursor shown, normal cursor keys and keypad,
            // default attributes; mouse modes and the alternate screen stay.
            (Some(b'!'), b'p') if body.len() == 1 => {
                self.set(1, false); // DECCKM.
                self.keypad = false;
                self.cursor_hidden = false;
                self.attributes = false;
            }
            // Other sequences with intermediates (DECRQM `CSI ? n $ p`, ...) set nothing here.
            _ if intermediates => {}
            (Some(b'?'), b'h' | b'l') => {
                let set = final_byte == b'h';
                let numbers: Vec<u32> = body[1..].split(|&b| b == b';').map(number).collect();
                for n in numbers {
                    self.set(n, set);
                }
            }
            (Some(b'<' | b'=' | b'>' | b'?'), _) => {}
            (_, b'm') => {
                // Only `CSI m`, `CSI 0 m`, `CSI 0;0 m` reset everything; anything else may
                // leave an attribute on (a colour 0 is `38;5;0`, so "last parameter is 0" is
                // not enough).
                self.attributes = self.overflow || body.iter().any(|&b| b != b'0' && b != b';');
            }
            _ => {}
        }
    }

    fn set(&mut self, mode: u32, on: bool) {
        match mode {
            47 | 1047 | 1049 => self.alternate = on,
            25 => self.cursor_hidden = !on,
            _ => {
                if let Some(i) = DEC_MODES.iter().position(|&m| u32::from(m) == mode) {
                    if on {
                        self.on |= 1 << i;
                    } else {
                        self.on &= !(1 << i);
                    }
                }
            }
        }
    }
}

/// A decimal parameter; `u32::MAX` for one that is not a plain number (sub-parameters, junk),
/// which matches no mode.
fn number(digits: &[u8]) -> u32 {
    if digits.is_empty() || digits.len() > 9 || !digits.iter().all(u8::is_ascii_digit) {
        return u32::MAX;
    }
    digits.iter().fold(0, |n, &d| n * 10 + u32::from(d - b'0'))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds each chunk in turn; the resets afterwards.
    fn resets_after(chunks: &[&[u8]]) -> Vec<u8> {
        let mut modes = Modes::default();
        for chunk in chunks {
            modes.feed(chunk);
        }
        modes.resets()
    }

    /// One row: its name, what the program wrote (as separate writes), what relay writes on
    /// leaving.
    type Row<'a> = (&'a str, &'a [&'a [u8]], &'a [u8]);

    fn check(rows: &[Row]) {
        for (name, chunks, want) in rows {
            let got = resets_after(chunks);
            assert_eq!(
                String::from_utf8_lossy(&got),
                String::from_utf8_lossy(want),
                "{name}"
            );
            // The same bytes cut at every point give the same answer.
            let all: Vec<u8> = chunks.concat();
            for cut in 0..=all.len() {
                let got = resets_after(&[&all[..cut], &all[cut..]]);
                assert_eq!(got, *want, "{name}, cut at {cut}");
            }
        }
    }

    #[test]
    fn each_mode_left_on_is_turned_off() {
        check(&[
            ("nothing", &[b"plain text\r\n"], b""),
            ("alternate screen", &[b"\x1b[?1049h"], b"\x1b[?1049l\x1b[0m"),
            (
                "alternate screen 1047",
                &[b"\x1b[?1047h"],
                b"\x1b[?1049l\x1b[0m",
            ),
            (
                "alternate screen 47",
                &[b"\x1b[?47h"],
                b"\x1b[?1049l\x1b[0m",
            ),
            (
                "alternate screen left",
                &[b"\x1b[?1049hfull\x1b[?1049l"],
                b"",
            ),
            ("mouse", &[b"\x1b[?1000h"], b"\x1b[?1000l"),
            ("mouse drag", &[b"\x1b[?1002h"], b"\x1b[?1002l"),
            ("mouse any", &[b"\x1b[?1003h"], b"\x1b[?1003l"),
            ("x10 mouse", &[b"\x1b[?9h"], b"\x1b[?9l"),
            ("utf-8 mouse", &[b"\x1b[?1005h"], b"\x1b[?1005l"),
            ("sgr mouse", &[b"\x1b[?1006h"], b"\x1b[?1006l"),
            ("urxvt mouse", &[b"\x1b[?1015h"], b"\x1b[?1015l"),
            ("sgr pixel mouse", &[b"\x1b[?1016h"], b"\x1b[?1016l"),
            ("focus events", &[b"\x1b[?1004h"], b"\x1b[?1004l"),
            ("bracketed paste", &[b"\x1b[?2004h"], b"\x1b[?2004l"),
            ("cursor keys", &[b"\x1b[?1h"], b"\x1b[?1l"),
            ("keypad", &[b"\x1b="], b"\x1b>"),
            ("keypad back to numeric", &[b"\x1b=\x1b>"], b""),
            ("hidden cursor", &[b"\x1b[?25l"], b"\x1b[?25h"),
            ("hidden then shown", &[b"\x1b[?25l\x1b[?25h"], b""),
            ("bold", &[b"\x1b[1m"], b"\x1b[0m"),
            ("colour 0 is not a reset", &[b"\x1b[38;5;0m"], b"\x1b[0m"),
            ("attributes reset", &[b"\x1b[1;31mred\x1b[m"], b""),
            ("attributes reset with 0", &[b"\x1b[1m\x1b[0;0m"], b""),
            ("mode turned off again", &[b"\x1b[?1000h\x1b[?1000l"], b""),
            ("unknown mode", &[b"\x1b[?12h\x1b[?7l"], b""),
            ("not private: insert mode", &[b"\x1b[4h"], b""),
        ]);
    }

    #[test]
    fn several_modes_in_one_sequence_and_across_writes() {
        check(&[
            (
                "two parameters",
                &[b"\x1b[?1000;1006h"],
                b"\x1b[?1000l\x1b[?1006l",
            ),
            (
                "three parameters, one turned off",
                &[b"\x1b[?1049;2004;1h", b"\x1b[?1l"],
                b"\x1b[?1049l\x1b[?2004l\x1b[0m",
            ),
            (
                "split inside the parameters",
                &[b"\x1b[?10", b"00;10", b"06h"],
                b"\x1b[?1000l\x1b[?1006l",
            ),
            ("split after ESC", &[b"x\x1b", b"="], b"\x1b>"),
            (
                "a vim session left running",
                &[b"\x1b[?1049h\x1b[22;0;0t\x1b[?1h\x1b=\x1b[H\x1b[2J\x1b[?2004h\x1b[?1002h\x1b[?1006h\x1b[?25l\x1b[1;34m~"],
                b"\x1b[?1049l\x1b[?1l\x1b[?1002l\x1b[?1006l\x1b[?2004l\x1b>\x1b[?25h\x1b[0m",
            ),
            (
                "everything, in the order of the resets",
                &[b"\x1b[?2004;1016;1015;1006;1005;1004;1003;1002;1000;9;1h\x1b[?1049h"],
                b"\x1b[?1049l\x1b[?1l\x1b[?9l\x1b[?1000l\x1b[?1002l\x1b[?1003l\x1b[?1004l\
                  \x1b[?1005l\x1b[?1006l\x1b[?1015l\x1b[?1016l\x1b[?2004l\x1b[0m",
            ),
        ]);
    }

    #[test]
    fn a_full_reset_and_a_soft_reset_clear_what_they_reset() {
        check(&[
            (
                "RIS clears everything",
                &[
                    b"\x1b[?1049h\x1b[?1000;2004h\x1b=\x1b[?25l\x1b[7m",
                    b"\x1bc",
                ],
                b"",
            ),
            (
                "modes set after RIS count",
                &[b"\x1b[?2004h\x1bc\x1b[?1000h"],
                b"\x1b[?1000l",
            ),
            (
                "DECSTR keeps mouse and the alternate screen",
                &[b"\x1b[?1049;1000;1h\x1b=\x1b[?25l\x1b[1m", b"\x1b[!p"],
                b"\x1b[?1049l\x1b[?1000l\x1b[0m",
            ),
        ]);
    }

    #[test]
    fn look_alikes_inside_other_sequences_are_not_modes() {
        check(&[
            ("mode-like text in a title", &[b"\x1b]2;[?1000h=\x07"], b""),
            (
                "ESC ends a string (VT500 parser): a mode after it counts",
                &[b"\x1b]2;a\x1b[?1000h"],
                b"\x1b[?1000l",
            ),
            (
                "a title ended by ST, then a mode",
                &[b"\x1b]2;t\x1b\\\x1b[?2004h"],
                b"\x1b[?2004l",
            ),
            ("mode-like text in a DCS", &[b"\x1bP[?1000h=\x1b\\"], b""),
            ("DECRQM asks, does not set", &[b"\x1b[?1000$p"], b""),
            ("secondary DA is not keypad", &[b"\x1b[>c"], b""),
            ("modifyOtherKeys is not SGR", &[b"\x1b[>4;1m"], b""),
            ("CAN aborts a sequence", &[b"\x1b[?1000\x18h"], b""),
            (
                "ESC restarts a sequence",
                &[b"\x1b[?10\x1b[?2004h"],
                b"\x1b[?2004l",
            ),
            ("a charset designation", &[b"\x1b(B\x1b)0"], b""),
            ("a parameter with sub-parameters", &[b"\x1b[?1000:1h"], b""),
            (
                "a long SGR counts as attributes",
                &[b"\x1b[0;0;0;0;0;0;0;0;0;0;0;0;0;0;0;0;0;0;0;0;0;0;0;0;0;0;0;0;0;0;0;0;0;0m"],
                b"\x1b[0m",
            ),
            ("UTF-8 text", &["é€𝄞".as_bytes()], b""),
        ]);
    }
}
