//! Far behind a flood, the model need not draw lines that scroll out within the same output.
//!
//! A run of plain lines (printable ASCII, CR, LF, TAB, BS, and colour or attribute changes:
//! SGR, `CSI ... m`; nothing else, not even a bell) moves the cursor down one row per line
//! feed and scrolls the scroll region once the cursor is on its last row. If such a run holds
//! a screen's height of line feeds, then a boundary after a CR LF, then another screen's height
//! of line feeds, the lines before the boundary leave only this behind: the attributes their
//! SGR sequences set, the cursor at column 0 of the region's last row, and rows that the lines
//! after the boundary replace before the run ends. Applying those SGR sequences, a CR and a
//! screen's height of line feeds leaves the same screen, cursor and attributes, whatever
//! follows the run. Only the rows that scroll off differ, which is why this is done only while
//! the caller does not keep them (scrollback capture off).
//!
//! That holds when the cursor is inside (or above) the scroll region: a line feed below the
//! region's last row does not scroll, and the lines would overwrite one row. vt100 does not
//! tell the region, so [`ScrollRegion`] follows the output's `CSI Pt ; Pb r` and the shortcut
//! is not taken while a region other than the whole screen may be set. Sans-IO.

/// The end of the lines at the start of `bytes` that may be replaced (see the module docs):
/// `bytes[..end]` is plain, ends with CR LF and holds at least `rows` line feeds, and at least
/// `rows` more line feeds follow it in the same plain run, and a character is printed after it.
/// `None` when there is no such end.
pub fn replaceable(bytes: &[u8], rows: usize) -> Option<usize> {
    let mut total = 0;
    walk(bytes, |_, b| {
        if b == b'\n' {
            total += 1;
        }
    });
    if total < 2 * rows {
        return None;
    }
    // vt100 repeats the last character printed for `CSI b` (REP): one must be printed after
    // the lines replaced, or the one they printed would be missing.
    let (mut line_feeds, mut boundary, mut end) = (0, None, None);
    walk(bytes, |i, b| {
        if b == b'\n' {
            line_feeds += 1;
            let crlf = i > 0 && bytes[i - 1] == b'\r';
            if crlf && line_feeds >= rows && total - line_feeds >= rows {
                boundary = Some(i + 1);
            }
        } else if (0x20..=0x7e).contains(&b) {
            end = end.max(boundary);
        }
    });
    end
}

/// Calls `each(index, byte)` for every byte of the plain run at the start of `bytes`, SGR
/// sequences skipped; stops at the first byte that is not plain.
fn walk(bytes: &[u8], mut each: impl FnMut(usize, u8)) {
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        match b {
            b'\n' | b'\r' | b'\t' | 0x08 | 0x20..=0x7e => each(i, b),
            0x1b => match sgr_len(&bytes[i..]) {
                Some(len) => i += len - 1,
                None => return,
            },
            _ => return,
        }
        i += 1;
    }
}

/// The SGR sequences in `lines` (plain lines as [`replaceable`] accepts them), in order.
pub fn sgr_sequences(lines: &[u8]) -> impl Iterator<Item = &[u8]> + '_ {
    let mut at = 0;
    std::iter::from_fn(move || {
        let start = at + lines[at..].iter().position(|&b| b == 0x1b)?;
        let len = sgr_len(&lines[start..]).unwrap_or(1);
        at = start + len;
        Some(&lines[start..start + len])
    })
}

/// The length of the SGR sequence (`ESC [`, parameters of digits, `;` and `:`, then `m`) at
/// the start of `bytes`, or `None` when they start with anything else or it is cut off.
fn sgr_len(bytes: &[u8]) -> Option<usize> {
    if bytes.first() != Some(&0x1b) || bytes.get(1) != Some(&b'[') {
        return None;
    }
    let params = bytes[2..]
        .iter()
        .take_while(|b| b.is_ascii_digit() || **b == b';' || **b == b':')
        .count();
    (bytes.get(2 + params) == Some(&b'm')).then_some(3 + params)
}

/// Whether the primary screen may have a scroll region other than the whole screen (DECSTBM,
/// `CSI Pt ; Pb r`), as far as the output followed tells. Errs on "may": a region set on the
/// alternate screen counts too, a sequence it cannot read counts as a partial region, and a
/// region is forgotten only by a `CSI r` for the whole screen in a read that stayed on the
/// primary screen and holds no screen switch, or by a change of size.
#[derive(Debug, Default)]
pub struct ScrollRegion {
    may_be_partial: bool,
}

impl ScrollRegion {
    /// Whether a region other than the whole screen may be set.
    pub fn may_be_partial(&self) -> bool {
        self.may_be_partial
    }

    /// Follows a read of output, `bytes`, on a screen of `rows` rows. `carried` is the escape
    /// sequence the output before them stopped inside (the model's unfinished prefix), which
    /// `bytes` may complete; `on_primary` says the primary screen was active before and after.
    pub fn follow(&mut self, carried: &[u8], bytes: &[u8], rows: u16, on_primary: bool) {
        // The carried sequence with the start of this read (a sequence it completes, or a
        // screen switch split across the two), without copying the whole read.
        let head = match carried {
            [] => Vec::new(),
            _ => [carried, &bytes[..bytes.len().min(64)]].concat(),
        };
        // Looked for only when a reset is found (rare; the scan costs as much as the rest).
        let switches = || {
            [&head[..], bytes].iter().any(|text| {
                [&b"1049"[..], b"1047", b"?47"]
                    .iter()
                    .any(|s| text.windows(s.len()).any(|w| w == *s))
            })
        };
        let mut saw = |found: Option<(usize, Option<(u32, u32)>)>| {
            let (len, params) = found?;
            let whole = params.is_some_and(|(top, bottom)| {
                top <= 1 && (bottom == 0 || bottom >= u32::from(rows))
            });
            if !whole {
                self.may_be_partial = true;
            } else if on_primary && !switches() {
                self.may_be_partial = false;
            }
            Some(len)
        };
        if !carried.is_empty() {
            saw(decstbm(&head));
        }
        let mut at = 0;
        while let Some(esc) = bytes[at..].iter().position(|&b| b == 0x1b) {
            let start = at + esc;
            at = start + saw(decstbm(&bytes[start..])).unwrap_or(1);
        }
    }
}

/// The `CSI ... r` (DECSTBM) at the start of `bytes`, if one is: its length and, when its
/// parameters read as `Pt ; Pb` (missing ones 0), the two. C0 controls inside are skipped, as
/// the parser executes them (the parameters are then not read: `None`); a sequence with a
/// private marker (`CSI ? ... r`) or an intermediate byte is another one. `(len, None)`:
/// DECSTBM with parameters not understood.
fn decstbm(bytes: &[u8]) -> Option<(usize, Option<(u32, u32)>)> {
    if !bytes.starts_with(b"\x1b[") {
        return None;
    }
    let mut controls = false;
    for (i, &b) in bytes.iter().enumerate().skip(2) {
        match b {
            0x30..=0x3f => {}
            0x1b | 0x18 | 0x1a => return None,
            0x00..=0x1f => controls = true,
            b'r' if bytes.get(2).is_some_and(|b| (0x3c..=0x3f).contains(b)) => return None,
            b'r' => {
                let params = if controls {
                    None
                } else {
                    top_bottom(&bytes[2..i])
                };
                return Some((i + 1, params));
            }
            _ => return None,
        }
    }
    None
}

/// `Pt ; Pb` from DECSTBM parameters of digits and `;` (missing or empty ones 0); `None` for
/// anything else (sub-parameters, more than two).
fn top_bottom(params: &[u8]) -> Option<(u32, u32)> {
    let mut numbers = params.split(|&b| b == b';').map(|p| {
        if p.is_empty() {
            Some(0)
        } else {
            std::str::from_utf8(p).ok()?.parse::<u32>().ok()
        }
    });
    let top = numbers.next().unwrap_or(Some(0))?;
    let bottom = numbers.next().unwrap_or(Some(0))?;
    numbers.next().is_none().then_some((top, bottom))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_boundary_leaves_a_screen_of_line_feeds_on_each_side() {
        let lines = b"a\r\nb\r\nc\r\nd\r\ne\r\nf\r\n";
        assert_eq!(replaceable(lines, 2), Some(12), "after d: e and f follow");
        assert_eq!(replaceable(lines, 3), Some(9), "after c: d, e, f follow");
        assert_eq!(replaceable(lines, 4), None, "not two screens of lines");
        // LF without CR is no boundary (the column carries on); a bell ends the run.
        assert_eq!(replaceable(b"a\nb\nc\r\nd\ne\nf\n", 2), Some(7));
        assert_eq!(replaceable(b"a\r\nb\r\n\x07c\r\nd\r\n", 1), Some(3));
        // SGR is part of the run; other sequences end it; a cut-off SGR ends it.
        let coloured = b"\x1b[31ma\r\n\x1b[1;4:3mb\r\nc\r\n";
        assert_eq!(replaceable(coloured, 1), Some(19));
        assert_eq!(replaceable(b"a\r\n\x1b[Ab\r\nc\r\n", 1), None);
        assert_eq!(replaceable(b"a\r\nb\r\n\x1b[3", 1), Some(3));
        assert_eq!(
            replaceable(b"a\r\nb\r\n\r\n", 1),
            Some(3),
            "b is printed after"
        );
        assert_eq!(
            replaceable(b"a\r\n\r\n\r\n", 1),
            None,
            "nothing printed after"
        );
        assert_eq!(
            sgr_sequences(coloured).collect::<Vec<_>>(),
            [&b"\x1b[31m"[..], b"\x1b[1;4:3m"]
        );
    }

    #[test]
    fn a_scroll_region_is_followed_even_when_split() {
        let mut region = ScrollRegion::default();
        let mut follow = |carried: &[u8], bytes: &[u8], on_primary| {
            region.follow(carried, bytes, 5, on_primary);
            region.may_be_partial()
        };
        assert!(follow(b"", b"text\x1b[2;4r", true));
        assert!(!follow(b"", b"\x1b[r", true), "CSI r: the whole screen");
        assert!(follow(b"", b"\x1b[1;3r", true));
        assert!(
            !follow(b"", b"\x1b[0;5r", true),
            "0 ; rows: the whole screen"
        );
        assert!(
            follow(b"\x1b[2;", b"3r more", true),
            "completed from the carried prefix"
        );
        assert!(!follow(b"", b"\x1b[r", true));
        assert!(follow(b"\x1b", b"[1;3r", true), "split right after ESC");
        assert!(
            follow(b"", b"\x1b[?1;1049h\x1b[r", true),
            "a reset while switching"
        );
        assert!(
            follow(b"", b"\x1b[r", false),
            "a reset on the alternate screen"
        );
        assert!(follow(b"", b"\x1b[?5r", true), "CSI ? r is not DECSTBM");
        assert!(!follow(b"", b"\x1b[r", true));
        assert!(follow(b"", b"\x1b[1;3\nr", true), "a control inside");
        assert!(!follow(b"", b"\x1b[r", true));
        assert!(
            follow(b"", b"\x1b[1:2;3r", true),
            "sub-parameters: not understood"
        );
    }
}
