//! Lossless delivery (`OpenLossless`/`AttachLossless`, `relay_agent::output::hold`): a consumer
//! that reads slowly gets every byte because the agent stops reading the PTY instead of overwriting
//! what that consumer has not acknowledged; the hold is released when the consumer detaches, or
//! a grace after its connection is gone; other panes keep flowing.

use std::time::{Duration, Instant};

use relay_protocol::message::{Ack, Attach, Detach, Kill, Open};
use relay_protocol::{
    Capability, ErrorReply, Hello, LeaseState, PaneKey, PtyId, Push, Request, Response,
};

use crate::support::{alive, pane, spec, wait_until, Client, Home, WAIT};

/// A ring far smaller than the command's output, so a consumer that pauses falls behind it.
const RING: u64 = 64 * 1024;
const WINDOW: &str = "16384";
/// `seq 1 100000` through a PTY (`\n` becomes `\r\n`): 688,894 bytes.
const SEQ: &str = "seq 1 100000";

fn seq_output() -> Vec<u8> {
    (1..=100_000)
        .flat_map(|i| format!("{i}\r\n").into_bytes())
        .collect()
}

fn daemon(env: &[(&str, &str)]) -> Home {
    let home = Home::new();
    let ring = RING.to_string();
    let mut all = vec![
        ("RELAY_REPLAY_BYTES", ring.as_str()),
        ("RELAY_WINDOW_BYTES", WINDOW),
    ];
    all.extend_from_slice(env);
    home.start_daemon_with(&all);
    home
}

fn open(c: &mut Client, pane: &PaneKey, command: &str, lossless: bool) -> PtyId {
    let body = Open {
        pane: pane.clone(),
        spec: spec(&["sh", "-c", command]),
        resume_from: Some(0),
    };
    let req = if lossless {
        Request::OpenLossless(body)
    } else {
        Request::Open(body)
    };
    match c.request(req) {
        Response::Opened(o) => {
            assert_eq!((o.attached.replay_from, o.attached.lost), (0, 0));
            o.created.binding.pty
        }
        other => panic!("expected Opened, got {other:?}"),
    }
}

/// What a consumer that acks everything it reads receives of `pty` until its exit: the bytes
/// (gaps left out) and how many bytes gaps skipped.
fn read_to_exit(c: &mut Client, pty: PtyId) -> (Vec<u8>, u64) {
    let (mut got, mut skipped) = (Vec::new(), 0);
    loop {
        match c.push(WAIT) {
            Some(Push::Output(o)) if o.pty == pty => {
                got.extend_from_slice(&o.data);
                let offset = o.offset + o.data.len() as u64;
                c.send(Request::Ack(Ack { pty, offset }));
            }
            Some(Push::OutputGap(g)) if g.pty == pty => {
                skipped += g.to - g.from;
                c.send(Request::Ack(Ack { pty, offset: g.to }));
            }
            Some(Push::Exited(e)) if e.binding.pty == pty => return (got, skipped),
            Some(_) => {}
            None => panic!("no exit of {pty}; {} bytes so far", got.len()),
        }
    }
}

/// The PTY's output end offset as the lease listing reports it.
fn bytes_out(c: &mut Client, pty: PtyId) -> u64 {
    c.lease(pty).bytes_out
}

/// The defect this fixes: a consumer that pauses (a `| less`, a slow link) lost everything the
/// ring could not hold. Held, the program waits for it and it gets every byte; the same command
/// read the same way without the hold loses most of its output (the control, which proves the
/// pause overflows the ring).
#[test]
fn a_lossless_consumer_that_pauses_gets_every_byte() {
    let home = daemon(&[]);
    let mut held = home.client();
    let mut plain = home.client();
    let held_pty = open(&mut held, &pane("held"), SEQ, true);
    let plain_pty = open(&mut plain, &pane("plain"), SEQ, false);

    // Neither reads for a while: the plain PTY runs to its end, the held one is read no further
    // than the ring holds.
    assert!(
        wait_until(WAIT, || bytes_out(&mut plain, plain_pty)
            == seq_output().len() as u64),
        "the unheld command ran to its end"
    );
    std::thread::sleep(Duration::from_millis(300));
    let held_end = bytes_out(&mut plain, held_pty);
    assert!(
        held_end <= RING,
        "the held PTY was read past its ring: {held_end} bytes"
    );

    let (got, skipped) = read_to_exit(&mut held, held_pty);
    assert_eq!(skipped, 0, "no gap for the lossless consumer");
    assert!(
        got == seq_output(),
        "every byte, in order ({} bytes)",
        got.len()
    );
    let (_, lost) = read_to_exit(&mut plain, plain_pty);
    assert!(
        lost > seq_output().len() as u64 / 2,
        "without the hold the pause loses output (control): {lost} bytes"
    );
}

/// A held PTY's exit waits for its output: a program that wrote a little more than the ring
/// into the terminal and exited while its consumer did not read has its last bytes waiting in
/// the kernel; the exit output grace (here 200 ms) does not run out while they wait for the
/// consumer, so `Exited` comes after every byte.
#[test]
fn the_exit_of_a_held_pty_comes_after_all_its_output() {
    let home = daemon(&[("RELAY_EXIT_OUTPUT_GRACE_MS", "200")]);
    let mut c = home.client();
    let n = RING + 3_000;
    let cmd = format!("head -c {n} /dev/zero | tr '\\0' x; exit 3");
    let pty = open(&mut c, &pane("exit"), &cmd, true);
    assert!(
        wait_until(WAIT, || c.lease(pty).pid.is_some_and(|pid| !alive(pid))),
        "the program wrote everything and exited"
    );
    std::thread::sleep(Duration::from_millis(1_000));
    let (got, skipped) = read_to_exit(&mut c, pty);
    assert_eq!(skipped, 0);
    assert_eq!(got.len() as u64, n, "every byte before the exit");
    assert!(got.iter().all(|&b| b == b'x'));
    assert_eq!(c.lease(pty).exit.map(|e| e.code), Some(3));
}

/// Rule G: a lossless consumer that vanished (its connection dropped) holds the PTY only for
/// the grace; a client that re-attaches within it (same client id, new connection) takes the
/// hold over and loses nothing; a `Detach` releases the hold at once.
#[test]
fn a_hold_outlives_its_connection_for_the_grace_only() {
    let home = daemon(&[("RELAY_HOLD_GRACE_MS", "1500")]);
    let yes = "yes relay-hold-test";
    let p = pane("lapse");
    let mut first = home.client();
    let pty = open(&mut first, &p, yes, true);
    assert!(wait_until(WAIT, || bytes_out(&mut first, pty) > RING / 2));
    drop(first);
    let mut observer = home.client();
    let held_at = bytes_out(&mut observer, pty);
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        bytes_out(&mut observer, pty) <= RING,
        "still held within the grace"
    );
    let t = Instant::now();
    assert!(
        wait_until(WAIT, || bytes_out(&mut observer, pty) > 4 * RING),
        "read on after the grace"
    );
    assert!(
        t.elapsed() >= Duration::from_millis(500),
        "not before the grace ({held_at} bytes held)"
    );

    // Re-attached within the grace by the same client: from offset 0, every byte.
    let q = pane("back");
    let mut again = home.client();
    let back = open(&mut again, &q, SEQ, true);
    drop(again);
    std::thread::sleep(Duration::from_millis(300));
    let mut again = home.client();
    let req = Request::AttachLossless(Attach {
        pane: q.clone(),
        expect: Some(back),
        resume_from: Some(0),
    });
    match again.request(req) {
        Response::Attached(a) => assert_eq!((a.replay_from, a.lost), (0, 0)),
        other => panic!("expected Attached, got {other:?}"),
    }
    std::thread::sleep(Duration::from_millis(2_000));
    let (got, skipped) = read_to_exit(&mut again, back);
    assert_eq!(skipped, 0);
    assert!(got == seq_output(), "every byte across the reconnect");

    // A detach lets go at once: the flood runs on while the client stays connected.
    let r = pane("detach");
    let mut c = home.client();
    let pty = open(&mut c, &r, yes, true);
    assert!(wait_until(WAIT, || bytes_out(&mut c, pty) > RING / 2));
    let binding = c.lease(pty).binding;
    c.mutate(Request::Detach(Detach { binding })).unwrap();
    assert!(
        wait_until(Duration::from_millis(1_000), || bytes_out(&mut c, pty)
            > 4 * RING),
        "released by the detach, well before the grace"
    );
}

/// Holding needs acks: a peer without the `credit` capability would hold the PTY for good, so
/// its lossless requests are refused and nothing is spawned.
#[test]
fn lossless_delivery_needs_the_credit_capability() {
    let home = daemon(&[]);
    let mut hello = Hello::new("agent-tests-no-credit", "0.0.0");
    hello.capabilities = vec![Capability(Capability::PTY.into())];
    let mut c = Client::hello_with(Client::connect(&home), hello);
    let p = pane("no-credit");
    let req = Request::OpenLossless(Open {
        pane: p.clone(),
        spec: spec(&["sh", "-c", "echo never"]),
        resume_from: Some(0),
    });
    match c.request(req) {
        Response::Error(ErrorReply::BadRequest { message }) => {
            assert!(message.contains("credit"), "{message}")
        }
        other => panic!("expected BadRequest, got {other:?}"),
    }
    assert!(c.leases().is_empty(), "nothing was spawned");
}

/// An end does not wait for a consumer: a held PTY that is killed while nobody reads ends
/// within the kill grace (its holds are released first), not after the hold grace.
#[test]
fn a_held_pty_that_is_killed_ends_without_its_consumer() {
    let home = daemon(&[]);
    let mut c = home.client();
    let pty = open(&mut c, &pane("killed"), "yes relay-kill-test", true);
    assert!(wait_until(WAIT, || bytes_out(&mut c, pty) >= RING));
    let binding = c.lease(pty).binding;
    c.mutate(Request::Kill(Kill { binding })).unwrap();
    assert!(
        wait_until(WAIT, || c.lease(pty).state == LeaseState::Ended),
        "ended although its consumer never read"
    );
}

/// The output bytes of `pty` a consumer gets while it sends no ack, until none comes for
/// 300 ms (the agent stopped at the window), and the offset after them.
fn one_window(c: &mut Client, pty: PtyId) -> (u64, u64) {
    let (mut got, mut next) = (0, 0);
    while let Some(push) = c.push(Duration::from_millis(300)) {
        match push {
            Push::Output(o) if o.pty == pty => {
                got += o.data.len() as u64;
                next = o.offset + o.data.len() as u64;
            }
            Push::OutputGap(g) if g.pty == pty => next = g.to,
            _ => {}
        }
    }
    (got, next)
}

/// How much of a `yes` opened on `c` arrives in each of five rounds of "read until the agent
/// stops at the window, then ack it all".
fn windows(c: &mut Client, name: &str, lossless: bool) -> Vec<u64> {
    let pty = open(c, &pane(name), "yes relay-window-test", lossless);
    let mut sizes = Vec::new();
    for _ in 0..5 {
        let (got, next) = one_window(c, pty);
        sizes.push(got);
        c.send(Request::Ack(Ack { pty, offset: next }));
    }
    sizes
}

/// Protocol 1.8 (`window-growth`): one window per round trip held an every-byte consumer to
/// `window / RTT` on a long link. A lossless window that runs full grows by what each ack
/// frees (doubling per round) up to the ring, within the connection's budget; a terminal's
/// window, and a lossless one for a peer that does not list `window-growth`, stay as they were.
#[test]
fn a_lossless_window_grows_toward_the_ring_while_its_consumer_acks() {
    let window: u64 = WINDOW.parse().unwrap();
    let home = daemon(&[]);
    let mut c = home.client();
    assert_eq!(
        windows(&mut c, "grows", true),
        [window, 2 * window, RING, RING, RING],
        "doubles per round up to the {RING}-byte ring"
    );
    let plain = windows(&mut c, "terminal", false);
    assert!(plain.iter().all(|&n| n == window), "{plain:?}");

    let mut hello = Hello::new("agent-tests-fixed-window", "0.0.0");
    hello
        .capabilities
        .retain(|c| c.0 != Capability::WINDOW_GROWTH);
    let mut old = Client::hello_with(Client::connect(&home), hello);
    let fixed = windows(&mut old, "old-peer", true);
    assert!(fixed.iter().all(|&n| n == window), "{fixed:?}");

    // A connection's lossless windows grow together by at most its budget.
    let budget = window + window / 2;
    let home = daemon(&[("RELAY_WINDOW_BUDGET_BYTES", &budget.to_string())]);
    let mut c = home.client();
    let first = windows(&mut c, "first", true);
    assert_eq!(first.last(), Some(&(window + budget)), "{first:?}");
    let second = windows(&mut c, "second", true);
    assert!(
        second.iter().all(|&n| n == window),
        "nothing left: {second:?}"
    );
}
