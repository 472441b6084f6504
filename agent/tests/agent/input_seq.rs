//! `InputSeq` (protocol 1.2, capability `input-seq`): input resent after a reconnect reaches the
//! program once. A duplicate `(writer, seq)` is answered `Done` without writing, on the same or
//! another connection; a refused request does not use up its seq; fencing is as for `Input`.

use std::io::Write;
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use relay_protocol::message::Kill;
use relay_protocol::{Binding, Capability, ErrorReply, PtyId, Request};

use crate::support::{contains, pane, wait_until, Client, Home, WAIT};

/// A random-looking writer id, as a connector picks once per pane handle.
const WRITER: u64 = 0x5eed_f00d_cafe_0001;

/// Reads two lines and echoes each back marked, then exits: a line typed twice shows up as a
/// second `got-` of the same text (and the program exits before the next line).
const TWO_LINES: &[&str] = &["sh", "-c", "read a; echo got-$a; read b; echo got-$b"];

fn count(hay: &[u8], needle: &str) -> usize {
    hay.windows(needle.len())
        .filter(|w| *w == needle.as_bytes())
        .count()
}

/// Opens `leaf` running `command` from offset 0 and returns its binding.
fn open(c: &mut Client, leaf: &str, command: &[&str]) -> Binding {
    c.open(&pane(leaf), command, Some(0))
        .unwrap()
        .created
        .binding
}

/// The whole output of `pty` (attached from 0) up to its exit, as text.
fn output_to_exit(c: &mut Client, pty: PtyId) -> String {
    let (out, _) = c.output_until_exit(pty, 0);
    String::from_utf8_lossy(&out).into_owned()
}

/// The same `(writer, seq)` sent twice on one connection is written once; the next seq is
/// written. The agent advertises the capability.
#[test]
fn input_seq_sent_twice_reaches_the_program_once() {
    let home = Home::new();
    home.start_daemon();
    let mut c = home.client();
    assert!(c.welcome.as_ref().unwrap().has(Capability::INPUT_SEQ));
    let b = open(&mut c, "twice", TWO_LINES);

    c.input_seq(&b, WRITER, 1, b"one\r").unwrap();
    c.input_seq(&b, WRITER, 1, b"one\r").unwrap();
    c.input_seq(&b, WRITER, 2, b"two\r").unwrap();
    let out = output_to_exit(&mut c, b.pty);
    assert_eq!(count(out.as_bytes(), "got-one"), 1, "{out:?}");
    assert_eq!(count(out.as_bytes(), "got-two"), 1, "{out:?}");
}

/// After a reconnect the connector resends the request whose reply it never saw: the copy
/// arriving on the new connection is dropped, and later seqs are written.
#[test]
fn input_seq_resent_on_a_second_connection_is_dropped() {
    let home = Home::new();
    home.start_daemon();
    let p = pane("reconnect");
    let b = {
        let mut first = home.client();
        let b = open(&mut first, "reconnect", TWO_LINES);
        first.input_seq(&b, WRITER, 1, b"one\r").unwrap();
        b
    }; // The first connection is lost here.

    let mut second = home.client();
    let attached = second.attach(&p, Some(b.pty), Some(0)).unwrap();
    assert_eq!(attached.lost, 0);
    second.input_seq(&b, WRITER, 1, b"one\r").unwrap();
    second.input_seq(&b, WRITER, 2, b"two\r").unwrap();
    let out = output_to_exit(&mut second, b.pty);
    assert_eq!(count(out.as_bytes(), "got-one"), 1, "{out:?}");
    assert_eq!(count(out.as_bytes(), "got-two"), 1, "{out:?}");
}

/// A request refused because the program does not read (LimitExceeded: the PTY's input queue is
/// full) does not use up its seq: retried with the same seq it is written, exactly once, and in
/// order with the writer's other requests.
#[test]
fn refused_input_seq_is_written_once_when_retried_with_the_same_seq() {
    const CHUNK: usize = 1_000_000;
    let home = Home::new();
    home.start_daemon();
    let mut c = home.client();
    let go = home.path().join("go");
    // Five chunks and a 4-byte tail, once each and in order, are exactly what `head` reads.
    let total = 5 * CHUNK + 4;
    let script = format!(
        "stty raw -echo; echo armed; while [ ! -e '{}' ]; do sleep 0.05; done; \
         head -c {total} | cksum",
        go.display()
    );
    let b = open(&mut c, "full", &["sh", "-c", &script]);
    let armed = c.output_until(b.pty, 0, |o| contains(o, "armed"));
    let chunk = |seq: u64| vec![b'a' + seq as u8; CHUNK];

    // The program does not read: the agent queues 4 MB (its limit is 4 MiB), then refuses.
    for seq in 1..=4 {
        c.input_seq(&b, WRITER, seq, &chunk(seq)).unwrap();
    }
    for _ in 0..2 {
        match c.input_seq(&b, WRITER, 5, &chunk(5)) {
            Err(ErrorReply::LimitExceeded { .. }) => {}
            other => panic!("expected LimitExceeded, got {other:?}"),
        }
    }

    // The program starts reading; the retry of seq 5 is written once the queue drains.
    std::fs::File::create(&go).unwrap();
    let deadline = Instant::now() + WAIT;
    loop {
        match c.input_seq(&b, WRITER, 5, &chunk(5)) {
            Ok(()) => break,
            Err(ErrorReply::LimitExceeded { .. }) if Instant::now() < deadline => {
                thread::sleep(Duration::from_millis(50))
            }
            other => panic!("retry of seq 5: {other:?}"),
        }
    }
    c.input_seq(&b, WRITER, 5, &chunk(5)).unwrap(); // A duplicate: not written.
    c.input_seq(&b, WRITER, 6, b"TAIL").unwrap();

    let mut expected: Vec<u8> = (1..=5).flat_map(chunk).collect();
    expected.extend_from_slice(b"TAIL");
    let want = cksum(&expected);
    let (out, _) = c.output_until_exit(b.pty, armed.len() as u64);
    let out = String::from_utf8_lossy(&out);
    assert!(
        out.contains(&want),
        "checksum {want:?} of chunks 1-5 and the tail, each once; got {out:?}"
    );
}

/// Fencing as for `Input` (rule C): a stale binding (the pane's earlier PTY, or a PTY id it never
/// had) is refused with Mismatch and nothing is written; the refusal does not use up the seq.
#[test]
fn input_seq_with_a_stale_binding_is_refused_with_mismatch() {
    let home = Home::new();
    home.start_daemon();
    let mut c = home.client();
    let p = pane("fenced");
    let old = c.create(&p, &["sh"]).binding;
    c.mutate(Request::Kill(Kill {
        binding: old.clone(),
    }))
    .unwrap();
    assert!(wait_until(WAIT, || c.lease(old.pty).reason.is_some()));
    let b = open(&mut c, "fenced", TWO_LINES);
    assert_ne!(b.pty, old.pty);

    let never = Binding {
        pane: p.clone(),
        pty: PtyId {
            counter: b.pty.counter + 100,
            ..b.pty
        },
    };
    for stale in [&old, &never] {
        assert_eq!(
            c.input_seq(stale, WRITER, 1, b"STALE\r"),
            Err(ErrorReply::Mismatch {
                pane: p.clone(),
                expected: stale.pty,
                current: Some(b.pty),
            })
        );
    }
    c.input_seq(&b, WRITER, 1, b"one\r").unwrap();
    c.input_seq(&b, WRITER, 2, b"two\r").unwrap();
    let out = output_to_exit(&mut c, b.pty);
    assert!(!out.contains("STALE"), "{out:?}");
    assert_eq!(count(out.as_bytes(), "got-one"), 1, "{out:?}");
    assert_eq!(count(out.as_bytes(), "got-two"), 1, "{out:?}");
}

/// Two connections (an old one whose requests are still arriving, say after a frozen host
/// resumed, and its replacement) send the same writer's seqs at the same time: each seq is
/// written exactly once and in seq order, because check and write are one step.
#[test]
fn two_connections_racing_the_same_seqs_write_each_once_in_order() {
    const SEQS: u64 = 200;
    let home = Home::new();
    home.start_daemon();
    let mut c = home.client();
    let len = 4 * SEQS;
    // Keeps running after END, so the slower racer's requests still find it live.
    let script =
        format!("stty raw -echo; echo armed; head -c {len}; echo; echo END; exec cat >/dev/null");
    let b = open(&mut c, "race", &["sh", "-c", &script]);
    let armed = c.output_until(b.pty, 0, |o| contains(o, "armed"));

    let mut racers = [home.client(), home.client()];
    thread::scope(|s| {
        for r in &mut racers {
            let b = &b;
            s.spawn(move || {
                for seq in 1..=SEQS {
                    r.input_seq(b, WRITER, seq, format!("{seq:04}").as_bytes())
                        .unwrap();
                }
            });
        }
    });

    let rest = c.output_until(b.pty, armed.len() as u64, |o| contains(o, "END"));
    let expected: String = (1..=SEQS).map(|seq| format!("{seq:04}")).collect();
    let rest = String::from_utf8_lossy(&rest);
    assert!(
        rest.contains(&format!("{expected}\n")),
        "each seq once, in order; got {rest:?}"
    );
}

/// `cksum`'s line for `data` ("CRC SIZE").
fn cksum(data: &[u8]) -> String {
    let mut child = Command::new("cksum")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("cksum");
    let mut stdin = child.stdin.take().unwrap();
    let data = data.to_vec();
    let writer = thread::spawn(move || stdin.write_all(&data));
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}
