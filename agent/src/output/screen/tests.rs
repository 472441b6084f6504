//! The model thread's catch-up while output keeps flowing ([`PtyScreen::catch_up_flowing`]):
//! the tail whose rows would be kept is left for the next batch, and nothing is lost by it.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use relay_protocol::{Incarnation, PtyId, TermSize};

use super::pty_screen::{CaughtUp, PtyScreen, ScreenFeed, TAIL_MAX};
use super::worker;
use super::ScreenEvent;
use crate::output::ring::Ring;

const SIZE: TermSize = TermSize { cols: 20, rows: 3 };

fn pty() -> PtyId {
    PtyId {
        incarnation: Incarnation(1),
        counter: 7,
    }
}

fn lines(from: u32, to: u32) -> Vec<u8> {
    (from..to)
        .flat_map(|i| format!("{i}\r\n").into_bytes())
        .collect()
}

/// Whether the model has parsed everything the ring holds.
fn caught_up(screen: &PtyScreen, ring: &Mutex<Ring>) -> bool {
    let end = ring.lock().unwrap().end();
    !screen.must_parse_before(end, 0, 0)
}

/// Lines `from..to`, with a bell after every 500th.
fn lines_with_bells(from: u32, to: u32) -> Vec<u8> {
    (from..to)
        .flat_map(|i| {
            let bell = if i % 500 == 499 { "\x07" } else { "" };
            format!("{i}{bell}\r\n").into_bytes()
        })
        .collect()
}

#[test]
fn a_flowing_flood_leaves_its_tail_for_the_next_batch_and_loses_nothing() {
    let ring = Mutex::new(Ring::new(4 << 20));
    let screen = PtyScreen::new(pty(), SIZE, 10);
    // A title set near the end of the first batch, in the tail that is left; bells throughout,
    // so a byte parsed twice or skipped shows in the events.
    let mut first = lines_with_bells(0, 50_000);
    first.extend_from_slice(b"\x1b]2;midway\x07");
    let title_end = first.len() as u64;
    first.extend_from_slice(&lines(50_000, 50_005));
    ring.lock().unwrap().append(&first);
    assert_eq!(screen.catch_up_flowing(&ring), CaughtUp::TailLeft);
    assert!(!caught_up(&screen, &ring), "the tail is left");
    let title = ScreenEvent::Title("midway".into());
    assert!(
        !screen.events(0, u64::MAX).iter().any(|e| e.event == title),
        "the title is in the tail"
    );

    // The next batch: the old tail is now far behind, a new one is left.
    let second = lines_with_bells(50_005, 100_000);
    ring.lock().unwrap().append(&second);
    assert_eq!(screen.catch_up_flowing(&ring), CaughtUp::TailLeft);
    let titles: Vec<_> = screen
        .events(0, u64::MAX)
        .into_iter()
        .filter(|e| e.event == title)
        .collect();
    assert_eq!(titles.len(), 1, "the title is recorded a batch later");
    assert!(titles[0].offset >= title_end, "{}", titles[0].offset);

    // Output slows (60 KB in a batch, under the 64 KiB that counts as flowing): everything is
    // parsed, rows kept.
    let third = lines(100_000, 107_500);
    ring.lock().unwrap().append(&third);
    assert_eq!(screen.catch_up_flowing(&ring), CaughtUp::Done);
    assert!(caught_up(&screen, &ring));

    let reference_ring = Mutex::new(Ring::new(4 << 20));
    let reference = PtyScreen::new(pty(), SIZE, 10);
    for part in [&first, &second, &third] {
        reference_ring.lock().unwrap().append(part);
    }
    let expected = reference.snapshot(&reference_ring);
    let got = screen.snapshot(&ring);
    assert_eq!(got.offset, expected.offset);
    assert_eq!(
        String::from_utf8_lossy(&got.data),
        String::from_utf8_lossy(&expected.data),
        "the same screen and scrollback as a model that parsed everything at once"
    );
    let text = String::from_utf8_lossy(&got.data);
    assert!(
        text.contains("107488\r\n") && !text.contains("not kept"),
        "{text:?}"
    );

    let events = screen.events(0, u64::MAX);
    let kinds = |events: &[relay_protocol::message::Event]| {
        events.iter().map(|e| e.event.clone()).collect::<Vec<_>>()
    };
    assert_eq!(
        events.len(),
        1 + 100_000 / 500,
        "every bell and the title, once"
    );
    assert_eq!(kinds(&events), kinds(&reference.events(0, u64::MAX)));
    assert!(events
        .windows(2)
        .all(|w| w[1].key == w[0].key + 1 && w[1].offset >= w[0].offset));
}

#[test]
fn a_tail_is_at_most_tail_max_even_when_many_rows_are_kept() {
    // 20,000 lines of scrollback: rows would be kept for the last ~280 KB, more than TAIL_MAX.
    let ring = Mutex::new(Ring::new(4 << 20));
    let screen = PtyScreen::new(pty(), SIZE, 20_000);
    ring.lock().unwrap().append(&lines(0, 200_000));
    assert_eq!(screen.catch_up_flowing(&ring), CaughtUp::TailLeft);
    let end = ring.lock().unwrap().end();
    assert!(
        !screen.must_parse_before(end, TAIL_MAX as usize, 0),
        "more than TAIL_MAX left unparsed"
    );
}

#[test]
fn output_without_newlines_is_parsed_to_the_end() {
    // A full-screen program redrawing fast: no rows leave the screen, so there is no backlog
    // to skip and no reason to leave anything.
    let ring = Mutex::new(Ring::new(4 << 20));
    let screen = PtyScreen::new(pty(), SIZE, 10);
    let redraws: Vec<u8> = (0..40_000)
        .flat_map(|i| format!("\x1b[H{i:>8}").into_bytes())
        .collect();
    ring.lock().unwrap().append(&redraws);
    assert_eq!(screen.catch_up_flowing(&ring), CaughtUp::Done);
    assert!(caught_up(&screen, &ring));
}

#[test]
fn the_model_thread_comes_back_for_a_tail_when_nothing_more_is_written() {
    let feed = ScreenFeed {
        screen: Arc::new(PtyScreen::new(pty(), SIZE, 10)),
        ring: Arc::new(Mutex::new(Ring::new(4 << 20))),
    };
    feed.ring.lock().unwrap().append(&lines(0, 50_000));
    worker::request_catch_up(&feed);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !caught_up(&feed.screen, &feed.ring) {
        assert!(
            Instant::now() < deadline,
            "the tail was never parsed after the flood stopped"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}
