//! The model far behind a flood: plain lines it does not draw (`plain_lines.rs`) leave the
//! screen, colours and cursor a terminal fed every byte shows.

use super::*;

/// Plain lines fed while scrollback capture is off (the caller knows more lines follow), split
/// into reads as a flood arrives, then `tail` with capture on again: the model returned with how
/// many bytes it did not draw.
fn fed_far_behind(rows: u16, head: &[u8], flood: &[u8], tail: &[u8]) -> (Vt100Model, u64) {
    let mut model = Vt100Model::new(30, rows, 100);
    feed(&mut model, head);
    model.set_scrollback_capture(false);
    for chunk in flood.chunks(16 * 1024) {
        feed(&mut model, chunk);
    }
    model.set_scrollback_capture(true);
    feed(&mut model, tail);
    let skipped = model.skipped;
    (model, skipped)
}

/// Plain lines with SGR: underline and a magenta background set once early (so only the
/// skipped lines set them), the foreground and bold changed and reset line by line.
fn coloured_flood() -> Vec<u8> {
    (0..20_000u32)
        .map(|i| match i % 5 {
            _ if i == 100 => format!("\x1b[4;45m{i}\r\n"),
            0 => format!(
                "\x1b[3{}m{i} a line longer than thirty columns wraps\x1b[39m\r\n",
                i % 8
            ),
            1 => format!("{i}\tx\x08y\r\n"),
            2 => format!("{i} no carriage return\n"),
            _ => format!("\x1b[1m{i}\x1b[22m\r\n"),
        })
        .flat_map(String::into_bytes)
        .collect()
}

/// Far behind a flood, plain lines are not drawn, yet the screen, colours and cursor are the
/// ones a terminal fed every byte shows; also when what follows the flood never scrolls the
/// primary screen (a full-screen program that moves down with line feeds, then exits).
#[test]
fn plain_lines_far_behind_are_not_drawn_yet_leave_the_same_screen() {
    let flood = coloured_flood();
    let tails: [&[u8]; 2] = [
        b"\x1b[44mprompt$ \x1b[mx",
        b"\x1b[?1049h\x1b[H\n\n\n\n\n\n\n\nfull screen\x1b[?1049lback",
    ];
    for tail in tails {
        let (model, skipped) = fed_far_behind(6, b"before\r\n", &flood, tail);
        assert!(skipped > flood.len() as u64 / 2, "skipped {skipped} bytes");
        let all = [&b"before\r\n"[..], &flood, tail].concat();
        assert_same_screen(render(&model).screen(), reference(30, 6, &all).screen());
    }
}

/// With a scroll region set, a line feed outside it moves the cursor without scrolling the
/// region (above it: into it; below it: not at all), so plain lines are drawn and the rows
/// they write show what a terminal shows. A reset of the region at the end of a read counts
/// from the next read; one on the alternate screen does not reset the primary screen's. Once
/// the primary screen's region is the whole screen again, plain lines are skipped again.
#[test]
fn plain_lines_are_drawn_while_a_scroll_region_is_set() {
    let flood = [&coloured_flood()[..], b"\x1b[r"].concat();
    for head in [&b"\x1b[2;4r\x1b[H"[..], b"\x1b[1;3r\x1b[5Hbelow the region"] {
        let (model, skipped) = fed_far_behind(6, head, &flood, b"done");
        assert_eq!(skipped, 0, "{:?}", String::from_utf8_lossy(head));
        let all = [head, &flood, b"done"].concat();
        assert_same_screen(render(&model).screen(), reference(30, 6, &all).screen());
    }

    let mut model = Vt100Model::new(30, 6, 100);
    for read in [
        &b"\x1b[1;3r"[..],
        b"\x1b[?1049h",
        b"\x1b[r",
        b"\x1b[?1049l\x1b[5H",
    ] {
        feed(&mut model, read);
    }
    model.set_scrollback_capture(false);
    feed(&mut model, &coloured_flood()[..16 * 1024]);
    assert_eq!(model.skipped, 0, "the primary screen's region is still set");

    let (_, skipped) = fed_far_behind(6, b"\x1b[1;3r\x1b[r", &flood, b"done");
    assert!(skipped > 0, "the region is the whole screen again");
}

/// A small deterministic generator for the differential test below (xorshift64).
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// Output mixing bursts of plain lines with what could make skipping them wrong: colours,
/// cursor moves, erases, scroll regions (also split by read boundaries), screen switches,
/// tabs, backspaces, REP and lines without CR.
fn mixed_output(rng: &mut Rng, rows: u16) -> Vec<u8> {
    let mut out = Vec::new();
    for _ in 0..60 {
        match rng.below(12) {
            0..=4 => {
                for _ in 0..rng.below(400) {
                    let len = rng.below(45) as usize;
                    let text: String = (0..len)
                        .map(|_| (b' ' + rng.below(95) as u8) as char)
                        .collect();
                    out.extend_from_slice(text.as_bytes());
                    out.extend_from_slice(match rng.below(10) {
                        0 => b"\n",
                        1 => b"\t-\x08\r\n",
                        _ => b"\r\n",
                    });
                    if rng.below(20) == 0 {
                        let sgr =
                            [0, 1, 4, 7, 22, 24, 31, 34, 39, 42, 45, 49][rng.below(12) as usize];
                        out.extend_from_slice(format!("\x1b[{sgr}m").as_bytes());
                    }
                }
            }
            5 => {
                let top = 1 + rng.below(u64::from(rows));
                let bottom = top + rng.below(u64::from(rows) - top + 1);
                out.extend_from_slice(format!("\x1b[{top};{bottom}r").as_bytes());
            }
            6 => out.extend_from_slice(b"\x1b[r"),
            7 => {
                let (row, col) = (1 + rng.below(u64::from(rows)), 1 + rng.below(30));
                out.extend_from_slice(format!("\x1b[{row};{col}H").as_bytes());
            }
            8 => out.extend_from_slice(format!("\x1b[{}A", 1 + rng.below(4)).as_bytes()),
            9 => {
                out.extend_from_slice([&b"\x1b[?1049h"[..], b"\x1b[?1049l"][rng.below(2) as usize])
            }
            10 => out
                .extend_from_slice([&b"\x1b[2J"[..], b"\x1b[K", b"\x1b[3b"][rng.below(3) as usize]),
            _ => out.extend_from_slice(b"\x1b[1;3"), // completed by whatever comes next
        }
    }
    out
}

/// Differential check of the shortcut: for random output fed in random read sizes with
/// scrollback capture off, the visible screen (characters, attributes, cursor) is exactly the
/// one a terminal fed every byte shows, and the shortcut was taken.
#[test]
fn skipping_plain_lines_never_changes_the_visible_screen() {
    let mut skipped = 0;
    for seed in 1..=300u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let rows = 4 + rng.below(6) as u16;
        let output = mixed_output(&mut rng, rows);
        let mut model = Vt100Model::new(30, rows, 50);
        model.set_scrollback_capture(false);
        let mut expected = reference(30, rows, b"");
        let mut at = 0;
        // Compared after every read: a difference could be scrolled out again later.
        while at < output.len() {
            let n = (1 + rng.below(20_000) as usize).min(output.len() - at);
            feed(&mut model, &output[at..at + n]);
            expected.process(&output[at..at + n]);
            at += n;
            let (got, want) = (model.parser.screen(), expected.screen());
            let context = format!("seed {seed}, after {at} bytes");
            assert_eq!(
                got.contents_formatted(),
                want.contents_formatted(),
                "{context}"
            );
            assert_eq!(got.cursor_position(), want.cursor_position(), "{context}");
            assert_eq!(got.alternate_screen(), want.alternate_screen(), "{context}");
        }
        skipped += model.skipped;
    }
    assert!(skipped > 100_000, "the shortcut was taken: {skipped} bytes");
}
