//! agent.log cannot fill the disk: repeated warnings are rate-limited and summarized, the file
//! rotates, and the log leaves the journal its space.

use std::io::Write;
use std::os::unix::net::UnixStream;
use std::time::Duration;

use relay_agent::log::limit::BURST;
use relay_protocol::{LeaseState, Request, Response};

use crate::restart::Tmpfs;
use crate::support::{pane, spec, wait_until, Home};

/// Regression ("log flood fills the disk"): every connection that closed before
/// Hello wrote a WARN line with no rate limit; 12,000 connect/close cycles filled a 1 MiB home,
/// after which every create failed `No space left on device`. Now the warnings are summarized
/// and a create on the same 1 MiB home still works.
///
/// Needs root to mount a small tmpfs as the home; otherwise it checks
/// nothing and says so (`relay_testkit::skip`: a failure under `RELAY_TESTS_REQUIRE_PRIVILEGED=1`).
#[test]
fn a_connect_close_flood_is_summarized_and_creates_keep_working_on_a_1_mib_home() {
    let Some((home, _tmpfs)) = daemon_on_a_1_mib_home(
        "a_connect_close_flood_is_summarized_and_creates_keep_working_on_a_1_mib_home",
    ) else {
        return;
    };
    for _ in 0..12_000 {
        drop(UnixStream::connect(home.socket()).unwrap());
    }
    let mut c = home.client();
    let created = match c.request(Request::Create(relay_protocol::message::Create {
        pane: pane("after-flood"),
        spec: spec(&["sh", "-c", "sleep 1000"]),
    })) {
        Response::Created(created) => created,
        other => panic!("create after the flood: {other:?}\n{}", home.log()),
    };
    assert_eq!(c.lease(created.binding.pty).state, LeaseState::Detached);

    // A summary when each 10 s window ends, counting what was not written (a flood slowed
    // down by a loaded machine may span more than one window).
    assert!(
        wait_until(Duration::from_secs(40), || summarized(&home.log()).0
            >= 11_000),
        "{}",
        home.log()
    );
    let log = home.log();
    let (_, summaries) = summarized(&log);
    let written = log
        .lines()
        .filter(|l| l.contains("closing connection") && !l.contains("more like this"))
        .count();
    assert!(
        written <= BURST as usize * (summaries + 1),
        "{written} closing lines in {summaries}+1 windows:\n{log}"
    );
}

/// The lines the "closing connection" summaries say were not written, and how many summaries.
fn summarized(log: &str) -> (u64, usize) {
    let counts: Vec<u64> = log
        .lines()
        .filter(|l| l.contains("closing connection: … "))
        .filter_map(|l| {
            let n = l.split("… ").nth(1)?.split(' ').next()?;
            n.replace(',', "").parse().ok()
        })
        .collect();
    (counts.iter().sum(), counts.len())
}

/// Regression ("truncated log lines on a full disk"): on a full disk the error of a
/// refused create reached only the client, and log lines were cut. Now the error is logged too
/// once there is room (an error line may use the log's disk reserve), every line in agent.log is
/// whole, and lines that could not be written are counted in a note.
///
/// Needs root to mount a small tmpfs as the home; otherwise it checks
/// nothing and says so (`relay_testkit::skip`: a failure under `RELAY_TESTS_REQUIRE_PRIVILEGED=1`).
#[test]
fn on_a_full_disk_the_create_error_is_logged_whole_or_counted_never_cut() {
    let Some((home, _tmpfs)) = daemon_on_a_1_mib_home(
        "on_a_full_disk_the_create_error_is_logged_whole_or_counted_never_cut",
    ) else {
        return;
    };
    let mut c = home.client();
    let filler = home.path().join("filler");
    let mut f = std::fs::File::create(&filler).unwrap();
    while f.write_all(&[0u8; 512]).is_ok() {}
    drop(f);
    let script = format!("sleep 1000 # {}", "x".repeat(6000));
    let refused = c.request(Request::Create(relay_protocol::message::Create {
        pane: pane("refused"),
        spec: spec(&["sh", "-c", &script]),
    }));
    assert!(
        matches!(
            refused,
            Response::Error(relay_protocol::ErrorReply::SpawnFailed { .. })
        ),
        "{refused:?}"
    );
    std::fs::remove_file(&filler).unwrap();
    // Room again: the next lines are written, after a note if some were dropped.
    std::thread::sleep(Duration::from_millis(1100));
    c.create(&pane("after"), &["sh", "-c", "sleep 1000"]);
    let log = home.log();
    assert!(
        log.contains("create refused: nothing was started") || log.contains("were dropped"),
        "the refusal is logged or counted:\n{log}"
    );
    for line in log.lines() {
        let whole = line.starts_with("… ")
            || (line.starts_with("20")
                && [" INFO ", " WARN ", " ERROR ", " DEBUG "]
                    .iter()
                    .any(|l| line.contains(l)));
        assert!(whole, "cut line in agent.log: {line:?}\n{log}");
    }
}

/// A daemon (logging at info) whose home is a fresh 1 MiB tmpfs; `None`, saying the test was
/// skipped, without root or a mountable tmpfs.
fn daemon_on_a_1_mib_home(test: &str) -> Option<(Home, Tmpfs)> {
    let home = Home::new();
    let Some(tmpfs) = Tmpfs::mount(home.path(), "1m") else {
        relay_testkit::skip(test, "root and a mountable tmpfs");
        return None;
    };
    std::fs::create_dir(home.path().join("home")).unwrap();
    home.start_daemon_with(&[("RELAY_LOG", "info")]);
    Some((home, tmpfs))
}
