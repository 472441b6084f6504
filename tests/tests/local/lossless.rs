//! `relay` into a file or pipe: every byte of the pane's output in order, or a loud error —
//! never a skip to the current screen (the agent holds the program back instead).

use std::io::Read;
use std::process::Stdio;
use std::time::Duration;

use relay_protocol::PaneKey;
use relay_tests::{bins, eventually, TestHome};

use super::sh;

/// `seq 1 n` as a terminal shows it (the PTY turns `\n` into `\r\n`).
fn seq_through_a_pty(n: u32) -> Vec<u8> {
    (1..=n)
        .flat_map(|i| format!("{i}\r\n").into_bytes())
        .collect()
}

/// A small ring, so a reader that pauses falls a whole ring behind the command.
const RING: &str = "1048576";

/// Regression: `relay shell -- 'seq 1 3000000' | (sleep 3; wc -c)` counted 911,952
/// of 22,888,896 bytes and exited 0 — the pipe's reader paused, relay fell behind the ring and
/// skipped to a snapshot of the screen, written into the pipe. Now the program waits for the
/// reader, and every byte arrives.
#[test]
fn a_piped_command_gives_every_byte_to_a_reader_that_pauses() {
    let home = TestHome::with_env(&[("RELAY_REPLAY_BYTES", RING)]);
    let mut relay = home
        .command(&bins().relay)
        .args(["shell", "--local", "--pane", "piped", "--", "seq 1 1000000"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = relay.stdout.take().unwrap();
    // The reader pauses like `| less` before anyone scrolls: long enough for the command to
    // write several rings of output if nothing held it back.
    std::thread::sleep(Duration::from_secs(3));
    let mut got = Vec::new();
    stdout.read_to_end(&mut got).unwrap();
    let out = relay.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains("lost"), "{stderr}");
    let want = seq_through_a_pty(1_000_000);
    assert_eq!(got.len(), want.len(), "every byte ({stderr})");
    assert!(
        got == want,
        "in order, and nothing else (no screen redraws)"
    );
}

/// Output the agent no longer held when relay attached into a pipe is said on stderr, never
/// replaced by a snapshot on stdout, and relay exits 255 although the command succeeded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_lost_before_relay_attached_is_said_and_fails_the_run() {
    let home = TestHome::with_env(&[("RELAY_REPLAY_BYTES", "65536")]);
    let session = home.session().await;
    let pane = PaneKey::new("default", "overflowed", "0");
    let script = "seq 1 100000; read go; echo after-$go";
    let created = session.create(pane.clone(), sh(script)).await.unwrap();
    let total = seq_through_a_pty(100_000).len() as u64;
    eventually("the command's output to pass the ring", || {
        let rows = home.leases_json();
        let row = rows
            .iter()
            .find(|l| l["pty"] == created.binding.pty.to_string())?;
        (row["bytes_out"].as_u64()? >= total).then_some(())
    });
    drop(session);

    let mut relay = home
        .command(&bins().relay)
        .args(["attach", "--local", "--pane", "overflowed"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    relay.stdin.take().unwrap().write_all(b"now\n").unwrap();
    let out = relay.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(255), "{stderr}");
    assert!(
        stderr.contains("bytes of output were lost") && stderr.contains("incomplete"),
        "{stderr}"
    );
    assert!(
        stdout.ends_with("99999\r\n100000\r\nnow\r\nafter-now\r\n"),
        "the bytes after the loss, in order: {:?}",
        &stdout[stdout.len().saturating_sub(80)..]
    );
    assert!(
        !stdout.contains('\x1b'),
        "no snapshot was written into the pipe"
    );
    assert!(
        !stdout.contains("lost"),
        "relay's notes stay out of the data"
    );
}
