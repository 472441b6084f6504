//! Measurement of the vt100 model, not a check: parse speed, snapshot time and memory. Run it by
//! hand in release mode:
//! `cargo test --release -p relay-agent --lib screen::model::measure -- --ignored --nocapture`.

use super::tests::{feed, full_screen_session, numbered_lines};
use super::*;
use std::time::Instant;

#[test]
#[ignore = "measurement; run by hand in release mode"]
fn print_figures() {
    let seq = numbered_lines(1..=3_000_000);
    let log: Vec<u8> = (0..300_000u32)
        .flat_map(|n| {
            let (s, ms, shard) = (n % 60, n % 997, n % 128);
            format!(
                "\x1b[2m12:00:{s:02}\x1b[m \x1b[32mINFO\x1b[m request {n:>8} served in {ms:>4} \
                 ms from cache shard {shard:>3} ok\r\n"
            )
            .into_bytes()
        })
        .collect();
    for (output_name, output) in [("seq", &seq), ("log", &log)] {
        let chunks = || output.chunks(16 * 1024);
        let report = |what: String, start: Instant| {
            let mb_per_s = output.len() as f64 / start.elapsed().as_secs_f64() / 1e6;
            println!("{output_name}: {what}: {mb_per_s:.1} MB/s");
        };
        for capacity in [0, DEFAULT_SCROLLBACK_LINES] {
            let mut parser = vt100::Parser::new(cells(40), cells(120), capacity);
            let start = Instant::now();
            chunks().for_each(|chunk| parser.process(chunk));
            report(format!("vt100 alone, its scrollback {capacity}"), start);
        }
        let mut model = Vt100Model::new(80, 24, DEFAULT_SCROLLBACK_LINES);
        model.set_scrollback_capture(false);
        let start = Instant::now();
        chunks().for_each(|chunk| model.feed(chunk, &mut Vec::new()));
        report("model 80×24, capture off (a long backlog)".into(), start);
        for lines in [0, DEFAULT_SCROLLBACK_LINES] {
            let mut model = Vt100Model::new(120, 40, lines);
            let start = Instant::now();
            chunks().for_each(|chunk| model.feed(chunk, &mut Vec::new()));
            report(format!("model, {lines} lines"), start);
            let scrollback = &model.parser.callbacks().scrollback;
            let (text, lens) = (scrollback.text.len(), scrollback.line_lens.len() * 4);
            println!(
                "  memory: scrollback {text} + {lens} B, grid {} B",
                32 * 120 * 40
            );
            let start = Instant::now();
            let bytes = model.snapshot().len();
            println!("  snapshot: {:?}, {bytes} B", start.elapsed());
            feed(&mut model, &full_screen_session(b"\x1b[?1049h"));
            let start = Instant::now();
            let bytes = model.snapshot().len();
            println!(
                "  alternate-screen snapshot: {:?}, {bytes} B",
                start.elapsed()
            );
        }
    }
}
