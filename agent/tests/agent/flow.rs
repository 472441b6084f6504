//! Flow control edge cases: hostile acks, peers without the `credit` capability, and refused
//! re-attaches that must leave a working subscription alone.

use std::time::{Duration, Instant};

use relay_protocol::message::Ack;
use relay_protocol::{Capability, ErrorReply, Hello, PtyId, Push, Request};

use crate::support::{contains, pane, Client, Home, WAIT};

const WINDOW: u64 = 64 * 1024;

/// Output bytes of `pty` received during `span` sending no acks, and the offset after them.
fn received_without_acks(c: &mut Client, pty: PtyId, span: Duration) -> (u64, u64) {
    let deadline = Instant::now() + span;
    let (mut got, mut next) = (0, 0);
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        match c.push(left) {
            Some(Push::Output(o)) if o.pty == pty => {
                got += o.data.len() as u64;
                next = o.offset + o.data.len() as u64;
            }
            Some(_) => {}
            None => break,
        }
    }
    (got, next)
}

/// Regression: one `Ack{offset: u64::MAX}` was stored unclamped, so every later window check
/// passed and a flood was forwarded without limit. The ack is clamped to what was sent: after
/// it, at most about one more window arrives until the peer acks again.
#[test]
fn one_huge_ack_does_not_disable_flow_control() {
    let home = Home::new();
    home.start_daemon_with(&[("RELAY_WINDOW_BYTES", &WINDOW.to_string())]);
    let mut c = home.client();
    let p = pane("flood");
    let b = c.create(&p, &["yes"]).binding;
    let a = c.attach(&p, Some(b.pty), None).unwrap();
    c.output_until(b.pty, a.replay_from, |o| !o.is_empty());
    c.send(Request::Ack(Ack {
        pty: b.pty,
        offset: u64::MAX,
    }));
    let (got, next) = received_without_acks(&mut c, b.pty, Duration::from_millis(1500));
    assert!(
        got <= 3 * WINDOW,
        "{got} bytes arrived without acks; the window is {WINDOW}"
    );
    // Flow control still works the normal way: acking (output and gaps) resumes the output.
    let ack = |c: &mut Client, offset| {
        c.send(Request::Ack(Ack { pty: b.pty, offset }));
    };
    ack(&mut c, next);
    let mut more = 0;
    let deadline = Instant::now() + WAIT;
    while more < 4 * WINDOW && Instant::now() < deadline {
        match c.push(WAIT) {
            Some(Push::Output(o)) if o.pty == b.pty => {
                more += o.data.len() as u64;
                ack(&mut c, o.offset + o.data.len() as u64);
            }
            Some(Push::OutputGap(g)) if g.pty == b.pty => ack(&mut c, g.to),
            other => panic!("expected output, got {other:?}"),
        }
    }
    assert!(more >= 4 * WINDOW, "output resumed with acks: {more} bytes");
}

/// Regression: a connector that did not list `credit` never acks, so it stalled after one
/// window. Such a connection gets output without a window.
#[test]
fn client_without_credit_capability_is_not_windowed() {
    let home = Home::new();
    home.start_daemon_with(&[("RELAY_WINDOW_BYTES", &WINDOW.to_string())]);
    let mut hello = Hello::new("agent-tests-no-credit", "0.0.0");
    hello.capabilities = vec![Capability(Capability::PTY.into())];
    let mut c = Client::hello_with(Client::connect(&home), hello);
    let p = pane("flood-no-credit");
    let b = c.create(&p, &["yes"]).binding;
    c.attach(&p, Some(b.pty), None).unwrap();
    // A windowed peer stalls at about one window for good; read until well past it (the
    // deadline only bounds a failure, it is not a throughput target).
    let deadline = Instant::now() + WAIT;
    let mut got = 0;
    while got <= 8 * WINDOW {
        let Some(left) = deadline.checked_duration_since(Instant::now()) else {
            break;
        };
        match c.push(left) {
            Some(Push::Output(o)) if o.pty == b.pty => got += o.data.len() as u64,
            Some(_) => {}
            None => break,
        }
    }
    assert!(
        got > 8 * WINDOW,
        "only {got} bytes arrived without acks; a peer without `credit` must not be held to the \
         {WINDOW}-byte window"
    );
}

/// Regression: a refused re-attach (here `resume_from` beyond the output end) on the same
/// connection removed its working subscription first. The refusal now changes nothing: output
/// keeps arriving and the lease still counts the connection.
#[test]
fn refused_reattach_keeps_the_working_subscription() {
    let home = Home::new();
    home.start_daemon();
    let mut c = home.client();
    let p = pane("ticker");
    let b = c
        .create(&p, &["sh", "-c", "while :; do echo tick; sleep 0.1; done"])
        .binding;
    c.attach(&p, Some(b.pty), Some(0)).unwrap();
    let first = c.output_until(b.pty, 0, |o| contains(o, "tick"));
    match c.attach(&p, Some(b.pty), Some(1 << 40)) {
        Err(ErrorReply::BadRequest { message }) => {
            assert!(message.contains("beyond the output end"), "{message}")
        }
        other => panic!("expected BadRequest, got {other:?}"),
    }
    let count = |o: &[u8]| o.windows(4).filter(|w| w == b"tick").count();
    let more = c.output_until(b.pty, first.len() as u64, |o| count(o) >= 3);
    assert!(count(&more) >= 3);
    assert_eq!(c.lease(b.pty).attached, 1, "still attached once");
}
