//! Output ordering, offsets and replay.

use relay_protocol::message::Attached;

use crate::support::{contains, pane, Home};

/// Output of a created pane arrives in order with contiguous offsets from 0, and re-attaching
/// with `resume_from` in the middle replays exactly the bytes after it.
#[test]
fn output_arrives_in_order_and_resume_replays_exactly_the_missing_bytes() {
    let home = Home::new();
    home.start_daemon();
    let mut c = home.client();
    let p = pane("out");
    let script = "for i in 1 2 3 4 5 6 7 8 9; do printf \"line$i\\n\"; done; sleep 1000";
    let created = c.create(&p, &["sh", "-c", script]);
    assert!(!created.existed);
    let pty = created.binding.pty;

    let a = c.attach(&p, Some(pty), Some(0)).unwrap();
    assert_eq!((a.replay_from, a.lost), (0, 0));
    assert_eq!(a.binding, created.binding);
    let all = c.output_until(pty, 0, |b| contains(b, "line9\r\n"));
    let want: String = (1..=9).map(|i| format!("line{i}\r\n")).collect();
    assert_eq!(String::from_utf8_lossy(&all), want);

    // A second connection resumes from the middle and gets exactly the rest.
    let mut c2 = home.client();
    let mid = 17u64;
    let Attached {
        replay_from,
        end_offset,
        lost,
        ..
    } = c2.attach(&p, Some(pty), Some(mid)).unwrap();
    assert_eq!((replay_from, lost), (mid, 0));
    assert_eq!(end_offset, all.len() as u64);
    let rest = c2.output_until(pty, mid, |b| b.len() as u64 >= end_offset - mid);
    assert_eq!(rest, &all[mid as usize..]);

    // Re-attaching on the same connection restarts its stream at the new offset.
    let a = c.attach(&p, Some(pty), Some(40)).unwrap();
    assert_eq!(a.replay_from, 40);
    let again = c.output_until(pty, 40, |b| b.len() >= all.len() - 40);
    assert_eq!(again, &all[40..]);

    // Attaching without resume_from replays nothing: only new output would follow.
    let mut c3 = home.client();
    let a = c3.attach(&p, None, None).unwrap();
    assert_eq!(a.replay_from, all.len() as u64);
    assert!(c3.push(std::time::Duration::from_millis(300)).is_none());
}

/// Typed input reaches the shell and its echo comes back as output.
#[test]
fn typed_input_reaches_the_shell() {
    let home = Home::new();
    home.start_daemon();
    let mut c = home.client();
    let p = pane("typed");
    let created = c.create(&p, &["sh"]);
    let a = c.attach(&p, None, Some(0)).unwrap();
    c.input(&created.binding, "echo $((6*7))-done\n").unwrap();
    let out = c.output_until(created.binding.pty, a.replay_from, |b| {
        contains(b, "42-done")
    });
    assert!(contains(&out, "42-done"));
}

/// Rules E and F: without acks a subscription stops at the credit window while the PTY keeps
/// being drained; once it acks again after the ring dropped its bytes it gets an OutputGap (never
/// a silent jump) and then exactly the bytes still held. A late attach reports `lost`.
#[test]
fn credit_window_stops_forwarding_but_not_draining_and_gaps_are_reported() {
    use relay_protocol::message::Ack;
    use relay_protocol::{Push, Request};
    use std::time::Duration;

    let home = Home::new();
    home.start_daemon_with(&[
        ("RELAY_REPLAY_BYTES", "4096"),
        ("RELAY_WINDOW_BYTES", "1000"),
    ]);
    let mut c = home.client();
    let p = pane("flood");
    // Lines of 50 digits + CRLF (52 bytes): 30 after the first typed line, 300 after the second.
    let script = "p() { i=0; while [ $i -lt $1 ]; do printf '%050d\\n' $i; i=$((i+1)); done; }; \
                  read x; p 30; read y; p 300; sleep 1000";
    let created = c.create(&p, &["sh", "-c", script]);
    let pty = created.binding.pty;
    let a = c.attach(&p, Some(pty), Some(0)).unwrap();
    assert_eq!(a.replay_from, 0);
    c.input(&created.binding, "\n").unwrap();
    let first = 2 + 30 * 52; // The echoed CRLF of the typed line, then 30 lines.

    // Without acks: exactly one window arrives, though more is produced.
    let mut got = 0u64;
    while got < 1000 {
        match c.push(crate::support::WAIT) {
            Some(Push::Output(o)) => {
                assert_eq!(o.offset, got);
                got += o.data.len() as u64;
            }
            other => panic!("expected output, got {other:?}"),
        }
    }
    assert_eq!(got, 1000, "forwarding stops at the window");
    let drained = |c: &mut crate::support::Client, n| {
        crate::support::wait_until(crate::support::WAIT, || c.lease(pty).bytes_out == n)
    };
    assert!(drained(&mut c, first));
    assert!(
        c.push(Duration::from_millis(200)).is_none(),
        "nothing beyond the window"
    );

    // A flood while this consumer is stalled: the PTY is drained regardless, into the ring.
    c.input(&created.binding, "\n").unwrap();
    let total = first + 2 + 300 * 52;
    assert!(drained(&mut c, total));

    // Acking after the ring dropped our cursor: a gap, then exactly what is still held.
    let start = total - 4096;
    c.send(Request::Ack(Ack { pty, offset: got }));
    match c.push(crate::support::WAIT) {
        Some(Push::OutputGap(g)) => assert_eq!((g.from, g.to), (1000, start)),
        other => panic!("expected OutputGap, got {other:?}"),
    }
    let mut tail = Vec::new();
    while (start + tail.len() as u64) < total {
        match c.push(crate::support::WAIT) {
            Some(Push::Output(o)) => {
                assert_eq!(o.offset, start + tail.len() as u64);
                tail.extend_from_slice(&o.data);
                c.send(Request::Ack(Ack {
                    pty,
                    offset: o.offset + o.data.len() as u64,
                }));
            }
            other => panic!("expected output, got {other:?}"),
        }
    }
    let last_line = format!("{:050}\r\n", 299);
    assert!(tail.ends_with(last_line.as_bytes()));

    // A new attach from offset 0 is told how much it lost.
    let mut late = home.client();
    let a = late.attach(&p, Some(pty), Some(0)).unwrap();
    assert_eq!((a.replay_from, a.lost, a.end_offset), (start, start, total));
    let replay = late.output_until(pty, start, |b| b.len() as u64 == total - start);
    assert_eq!(replay, tail);
}
