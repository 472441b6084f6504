//! The painter alone, on hand-made overlays over a model, with a second parser as the
//! terminal.

use super::super::OverlayCell;
use super::*;

/// A model and a terminal that both got `output`.
fn pair(cols: u16, rows: u16, output: &[u8]) -> (vt100::Parser, vt100::Parser) {
    let mut model = vt100::Parser::new(size(rows), size(cols), 0);
    let mut terminal = vt100::Parser::new(size(rows), size(cols), 0);
    model.process(output);
    terminal.process(output);
    (model, terminal)
}

fn overlay(cells: &[(u16, u16, char)], cursor: Option<(u16, u16)>) -> Overlay {
    Overlay {
        cells: cells
            .iter()
            .map(|&(row, col, ch)| OverlayCell {
                row,
                col,
                ch,
                underline: false,
            })
            .collect(),
        cursor,
    }
}

fn row(terminal: &vt100::Parser, row: u16) -> String {
    terminal.screen().rows(0, 40).nth(usize::from(row)).unwrap()
}

/// Whether `bytes` holds only CUP (`ESC [ n ; m H`), SGR (`ESC [ ... m`), the erasure of one
/// cell (`ESC [ X`) and printable text.
fn only_cup_sgr_and_text(bytes: &[u8]) -> Result<(), String> {
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            0x1b => {
                if bytes.get(i + 1) != Some(&b'[') {
                    return Err(format!("escape other than CSI at {i}"));
                }
                let params = bytes[i + 2..]
                    .iter()
                    .take_while(|b| b.is_ascii_digit() || **b == b';')
                    .count();
                match bytes.get(i + 2 + params) {
                    Some(b'H' | b'm') => i += 3 + params,
                    Some(b'X') if params == 0 => i += 3,
                    other => return Err(format!("CSI ending in {other:?} at {i}")),
                }
            }
            b if b < 0x20 || b == 0x7f => return Err(format!("control byte {b:#x} at {i}")),
            _ => i += 1,
        }
    }
    Ok(())
}

#[test]
fn the_painter_writes_only_cursor_moves_sgr_single_cell_erasures_and_text() {
    let rig = super::terminal::busy_session();
    assert!(rig.painted.len() > 500);
    only_cup_sgr_and_text(&rig.painted).unwrap();
    assert!(
        only_cup_sgr_and_text(b"\x1b7").is_err(),
        "the check can fail"
    );
    assert!(only_cup_sgr_and_text(b"\x1b[2K").is_err());
    assert!(only_cup_sgr_and_text(b"\x1b[5X").is_err());
    assert!(only_cup_sgr_and_text(b"\r").is_err());
}

#[test]
fn drawing_is_a_difference_and_restoring_keeps_attributes_and_the_pen() {
    // Red bold text, then the pen left underlined and blue for what comes next.
    let (model, mut terminal) = pair(40, 4, b"$ \x1b[1;31mred\x1b[0;4;38;5;27m");
    let model = model.screen();
    let mut painter = Painter::new();
    let first = overlay(&[(0, 2, 'x'), (0, 3, 'y')], Some((0, 4)));
    terminal.process(&painter.draw(&first, model));
    assert_eq!(row(&terminal, 0), "$ xyd");
    assert_eq!(terminal.screen().cursor_position(), (0, 4));
    assert!(
        painter.draw(&first, model).is_empty(),
        "nothing changed, nothing written"
    );

    let second = overlay(&[(0, 3, 'y')], Some((0, 4)));
    let bytes = painter.draw(&second, model);
    assert!(
        !bytes.windows(1).any(|b| b == b"y"),
        "only the dropped cell is written"
    );
    terminal.process(&bytes);
    assert_eq!(row(&terminal, 0), "$ ryd");

    terminal.process(&painter.before_output(model));
    assert!(painter.is_clear());
    assert_eq!(
        terminal.screen().contents_formatted(),
        model.contents_formatted()
    );
    assert!(painter.before_output(model).is_empty());
    assert!(painter.draw(&Overlay::default(), model).is_empty());
}

#[test]
fn nothing_is_drawn_on_the_reserved_row() {
    let (model, mut terminal) = pair(40, 4, b"\r\n\r\n\r\n$ ");
    let model = model.screen();
    let mut painter = Painter::new();
    painter.set_reserved_row(Some(3));
    let on_it = overlay(&[(3, 2, 'x')], Some((3, 3)));
    assert!(painter.draw(&on_it, model).is_empty());
    painter.set_reserved_row(None);
    terminal.process(&painter.draw(&on_it, model));
    assert_eq!(row(&terminal, 3), "$ x");
}

#[test]
fn wide_characters_next_to_predictions_stay_whole() {
    let (model, mut terminal) = pair(40, 4, "日本ab".as_bytes());
    let model = model.screen();
    let mut painter = Painter::new();
    // Column 1 is the second half of 日, column 2 the first half of 本: not drawn over.
    let cells = overlay(&[(0, 1, 'x'), (0, 2, 'y'), (0, 4, 'z'), (0, 5, '界')], None);
    terminal.process(&painter.draw(&cells, model));
    assert_eq!(row(&terminal, 0), "日本zb");
    terminal.process(&painter.before_output(model));
    assert_eq!(
        terminal.screen().contents_formatted(),
        model.contents_formatted()
    );
}

#[test]
fn a_cursor_in_or_waiting_after_the_last_column_is_never_moved() {
    for output in ["x".repeat(40), format!("{}\x1b[40G", "x".repeat(10))] {
        let (model, _) = pair(40, 4, output.as_bytes());
        let mut painter = Painter::new();
        let cells = overlay(&[(1, 0, 'q')], Some((1, 1)));
        assert!(
            painter.draw(&cells, model.screen()).is_empty(),
            "{output:?}"
        );
        assert!(painter.is_clear());
    }
}

#[test]
fn a_resize_forgets_what_was_drawn() {
    let (mut model, mut terminal) = pair(40, 4, b"$ ");
    let mut painter = Painter::new();
    terminal.process(&painter.draw(&overlay(&[(0, 2, 'x')], Some((0, 3))), model.screen()));
    model.set_size(size(4), size(30));
    assert!(painter.before_output(model.screen()).is_empty());
    assert!(painter.is_clear());
}
