//! Keystrokes out of the raw bytes a user typed (as they are sent to the PTY): the few the
//! engine can model, and everything else as [`Key::Other`].
//!
//! Only narrow characters are printable here: a character the terminal might draw two columns
//! wide (East Asian wide or ambiguous width), a combining mark or a control character is not
//! predicted. Left and right arrows come as `CSI C`/`CSI D` or, in application cursor mode,
//! `SS3 C`/`SS3 D`; any other escape sequence (modified arrows, Home, Delete, Alt+key, bracketed
//! paste) is `Other`. A sequence or character cut between two reads is completed by the next.

use unicode_width::UnicodeWidthChar;

/// One keystroke as the engine sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Key {
    /// A narrow printable character.
    Print(char),
    /// DEL (0x7f) or BS (0x08).
    Backspace,
    /// Cursor left, one column.
    Left,
    /// Cursor right, one column.
    Right,
    /// CR or LF.
    Enter,
    /// Anything else: control keys, other escape sequences, wide or invalid characters.
    Other,
}

/// The longest escape sequence kept while waiting for its end; a longer one is dropped as
/// [`Key::Other`] so that garbage cannot grow the buffer.
const MAX_PENDING: usize = 64;

/// Splits typed bytes into keys, keeping an unfinished sequence for the next call.
#[derive(Debug, Default)]
pub(crate) struct KeyDecoder {
    pending: Vec<u8>,
}

impl KeyDecoder {
    /// Appends the keys in `bytes` (after whatever was left unfinished) to `keys`.
    pub(crate) fn feed(&mut self, bytes: &[u8], keys: &mut Vec<Key>) {
        self.pending.extend_from_slice(bytes);
        let mut at = 0;
        while at < self.pending.len() {
            match decode(&self.pending[at..]) {
                Some((key, used)) => {
                    keys.push(key);
                    at += used;
                }
                None if self.pending.len() - at > MAX_PENDING => {
                    keys.push(Key::Other);
                    at = self.pending.len();
                }
                None => break,
            }
        }
        self.pending.drain(..at);
    }
}

/// The first key of `bytes` and how many bytes it took, or `None` when `bytes` is the start of
/// an unfinished sequence or character.
fn decode(bytes: &[u8]) -> Option<(Key, usize)> {
    let first = *bytes.first()?;
    match first {
        0x1b => escape(bytes),
        b'\r' | b'\n' => Some((Key::Enter, 1)),
        0x7f | 0x08 => Some((Key::Backspace, 1)),
        0x00..=0x1f => Some((Key::Other, 1)),
        0x20..=0x7e => Some((Key::Print(char::from(first)), 1)),
        _ => utf8(bytes),
    }
}

fn escape(bytes: &[u8]) -> Option<(Key, usize)> {
    match *bytes.get(1)? {
        b'[' => {
            // Parameters, then intermediates, then one final byte.
            let body = &bytes[2..];
            let params = body
                .iter()
                .take_while(|b| (0x30..=0x3f).contains(*b))
                .count();
            let inter = body[params..]
                .iter()
                .take_while(|b| (0x20..=0x2f).contains(*b))
                .count();
            let end = params + inter;
            let last = *body.get(end)?;
            let used = 2 + end + 1;
            if !(0x40..=0x7e).contains(&last) {
                // Not a sequence: count the escape as one key and read on from its last byte.
                return Some((Key::Other, used - 1));
            }
            let plain = inter == 0 && matches!(&body[..params], b"" | b"1");
            Some((arrow(plain, last), used))
        }
        b'O' => Some((arrow(true, *bytes.get(2)?), 3)),
        _ => Some((Key::Other, 2)),
    }
}

fn arrow(plain: bool, last: u8) -> Key {
    match (plain, last) {
        (true, b'C') => Key::Right,
        (true, b'D') => Key::Left,
        _ => Key::Other,
    }
}

fn utf8(bytes: &[u8]) -> Option<(Key, usize)> {
    let len = match bytes[0] {
        0xc2..=0xdf => 2,
        0xe0..=0xef => 3,
        0xf0..=0xf4 => 4,
        _ => return Some((Key::Other, 1)),
    };
    let Some(encoded) = bytes.get(..len) else {
        // Unfinished, unless a byte already seen cannot continue a character.
        if bytes[1..].iter().all(|b| (0x80..=0xbf).contains(b)) {
            return None;
        }
        return Some((Key::Other, 1));
    };
    match std::str::from_utf8(encoded)
        .ok()
        .and_then(|s| s.chars().next())
    {
        Some(c) if narrow(c) => Some((Key::Print(c), len)),
        Some(_) => Some((Key::Other, len)),
        None => Some((Key::Other, 1)),
    }
}

/// Whether `c` is printable and one column wide in every terminal: not a control character,
/// width 1 and width 1 in East Asian contexts too (ambiguous-width characters are left out).
pub(crate) fn narrow(c: char) -> bool {
    !c.is_control() && c.width() == Some(1) && c.width_cjk() == Some(1)
}

#[cfg(test)]
mod tests {
    use super::Key::*;
    use super::*;

    fn keys(chunks: &[&[u8]]) -> Vec<Key> {
        let mut decoder = KeyDecoder::default();
        let mut keys = Vec::new();
        for chunk in chunks {
            decoder.feed(chunk, &mut keys);
        }
        keys
    }

    #[test]
    fn typed_bytes_become_the_keys_the_engine_models() {
        let table: &[(&[&[u8]], &[Key])] = &[
            (
                &[b"ab 1~"],
                &[Print('a'), Print('b'), Print(' '), Print('1'), Print('~')],
            ),
            (
                &[b"\r\n\x7f\x08\t\x03"],
                &[Enter, Enter, Backspace, Backspace, Other, Other],
            ),
            (
                &[b"\x1b[D\x1b[C\x1bOD\x1bOC\x1b[1D"],
                &[Left, Right, Left, Right, Left],
            ),
            // Ctrl+arrows, Home, Delete, up, Alt+b, bracketed paste markers.
            (
                &[b"\x1b[1;5D\x1b[H\x1b[3~\x1b[A\x1bb"],
                &[Other, Other, Other, Other, Other],
            ),
            (&[b"\x1b[200~x\x1b[201~"], &[Other, Print('x'), Other]),
            // Split between reads.
            (
                &[b"\x1b", b"[", b"D", b"\xc3", b"\xa9"],
                &[Left, Print('é')],
            ),
            // Wide, ambiguous, combining: not predicted.
            (&["日·\u{301}".as_bytes()], &[Other, Other, Other]),
            (&[b"\xff\xc3x"], &[Other, Other, Print('x')]),
        ];
        for (chunks, want) in table {
            assert_eq!(keys(chunks), *want, "{chunks:?}");
        }
    }

    #[test]
    fn an_endless_sequence_is_dropped_instead_of_growing() {
        let mut decoder = KeyDecoder::default();
        let mut got = Vec::new();
        decoder.feed(b"\x1b[", &mut got);
        decoder.feed(&[b'1'; 100], &mut got);
        assert_eq!(got, [Other]);
        decoder.feed(b"a", &mut got);
        assert_eq!(got, [Other, Print('a')]);
    }
}
