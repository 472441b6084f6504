//! Malformed input closes only the offending connection (with a logged reason); unknown ops are
//! answered; incompatible peers are told what to upgrade.

use std::io::Write;
use std::net::Shutdown;

use relay_protocol::{Envelope, ErrorReply, Hello, Request, Response};

use crate::support::{contains, pane, wait_until, Client, Home, WAIT};

/// An oversized frame, a truncated frame and random bytes each close only their connection,
/// with a reason in agent.log; another client keeps working and its pane's output continues.
#[test]
fn bad_frames_close_only_their_connection() {
    let home = Home::new();
    home.start_daemon();
    let mut good = home.client();
    let p = pane("bystander");
    let b = good.create(&p, &["sh"]).binding;
    let a = good.attach(&p, Some(b.pty), None).unwrap();
    let mut offset = a.replay_from;

    let cases: [(&str, &[u8], &str); 3] = [
        (
            "oversized",
            &[0xff, 0xff, 0xff, 0xff, 1, 2, 3],
            "exceeds the maximum",
        ),
        (
            "truncated",
            &[0, 0, 0, 100, 1, 2, 3, 4, 5],
            "closed by the peer inside a frame",
        ),
        (
            "random",
            &[
                0, 0, 0, 12, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
            ],
            "undecodable message",
        ),
    ];
    for (i, (name, bytes, reason)) in cases.iter().enumerate() {
        let mut raw = Client::socket(&home);
        let mut bad = Client::hello(Client::over(
            raw.try_clone().unwrap(),
            raw.try_clone().unwrap(),
        ));
        raw.write_all(bytes).unwrap();
        raw.shutdown(Shutdown::Write).unwrap(); // EOF after the bytes (matters for "truncated").
        assert!(bad.closed_within(WAIT), "{name}: connection closed");
        assert!(
            home.wait_log(reason),
            "{name}: agent.log names the reason {reason:?}"
        );

        good.ping(i as u64);
        let marker = format!("alive-{i}-{}", i * 11);
        good.input(&b, &format!("echo alive-{i}-$(({i}*11))\n"))
            .unwrap();
        let out = good.output_until(b.pty, offset, |o| contains(o, &marker));
        offset += out.len() as u64;
    }
    // Bytes that are not a Hello at all, before Hello.
    let closed = || home.log().matches("closing connection").count();
    let before = closed();
    let mut raw = Client::socket(&home);
    raw.write_all(b"SSH-2.0-banner\r\nnot relay at all")
        .unwrap();
    raw.shutdown(Shutdown::Write).unwrap();
    let mut bad = Client::over(raw.try_clone().unwrap(), std::io::sink());
    assert!(bad.closed_within(WAIT));
    assert!(
        wait_until(WAIT, || closed() > before),
        "agent.log names why it closed the connection: {}",
        home.log()
    );
    good.ping(99);
}

/// An unknown op code gets an Unsupported reply and the connection stays usable.
#[test]
fn unknown_op_is_answered_unsupported_and_the_connection_stays() {
    let home = Home::new();
    home.start_daemon();
    let mut c = home.client();
    let env = Envelope {
        id: 4242,
        op: 0x7777,
        body: vec![1, 2, 3],
    };
    c.send_frame(&env.to_bytes());
    assert_eq!(
        c.reply(4242),
        Response::Error(ErrorReply::Unsupported { op: 0x7777 })
    );
    c.ping(7);
    assert_eq!(c.status().connections, 1);
}

/// A Hello with another protocol major gets Incompatible naming both versions, then close.
#[test]
fn incompatible_hello_is_refused_with_versions_and_a_fix() {
    let home = Home::new();
    home.start_daemon();
    let mut c = Client::connect(&home);
    let mut hello = Hello::new("future", "9.0.0");
    hello.major = 99;
    match c.request(Request::Hello(hello)) {
        Response::Error(ErrorReply::Incompatible { message }) => {
            let ours = format!(
                "{}.{}",
                relay_protocol::PROTOCOL_MAJOR,
                relay_protocol::PROTOCOL_MINOR
            );
            assert!(message.contains("protocol 99."), "{message}");
            assert!(message.contains(&ours), "{message}");
            assert!(message.contains("upgrade the agent"), "{message}");
        }
        other => panic!("expected Incompatible, got {other:?}"),
    }
    assert!(c.closed_within(WAIT));
}
