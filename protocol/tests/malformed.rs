//! Malformed input: truncated, corrupt, oversized and random bytes must give typed errors, never a
//! panic, and the few deliberate leniencies (unknown ops, appended body fields) must hold.
//!
//! The random tests are the protocol's fuzzing for now (cargo-fuzz needs a nightly toolchain):
//! seeded, so a failure reproduces exactly.

use bytes::BytesMut;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use relay_protocol::frame::FrameError;
use relay_protocol::message::{Created, Ping};
use relay_protocol::{
    DecodeError, Envelope, ErrorReply, FrameCodec, Message, Op, PaneKey, Request, Response,
    DEFAULT_MAX_FRAME,
};
use tokio_util::codec::Decoder;

use relay_protocol_golden::cases;

/// Decoding must not panic; whatever decodes must survive its own round trip. Returns whether the
/// bytes decoded.
fn decode_is_sound(bytes: &[u8]) -> bool {
    let Ok(message) = Message::from_bytes(bytes) else {
        return false;
    };
    let again = Message::from_bytes(&message.to_bytes()).unwrap_or_else(|e| {
        panic!("{message:?} decoded from {bytes:02x?} but not re-encoded: {e}")
    });
    assert_eq!(again, message, "round trip of bytes {bytes:02x?}");
    true
}

fn envelope(id: u64, op: u16, body: &[u8]) -> Vec<u8> {
    Envelope {
        id,
        op,
        body: body.to_vec(),
    }
    .to_bytes()
}

// ---- (a) truncation ----

#[test]
fn every_strict_prefix_of_every_golden_message_is_an_error() {
    for case in cases() {
        let bytes = case.bytes();
        for len in 0..bytes.len() {
            let result = Message::from_bytes(&bytes[..len]);
            assert!(
                matches!(result, Err(DecodeError::Envelope(_))),
                "{}: prefix of {len}/{} bytes gave {result:?}",
                case.name,
                bytes.len()
            );
        }
        assert_eq!(
            Message::from_bytes(&bytes).unwrap(),
            case.message,
            "{}",
            case.name
        );
    }
}

#[test]
fn every_strict_prefix_of_every_body_in_a_whole_envelope_is_a_body_error() {
    for case in cases() {
        let env = case.message.to_envelope();
        for len in 0..env.body.len() {
            let result = Message::from_bytes(&envelope(env.id, env.op, &env.body[..len]));
            match result {
                Err(DecodeError::Body { id, op, source }) => {
                    assert_eq!((id, op), (env.id, env.op), "{}", case.name);
                    assert_eq!(
                        source,
                        postcard::Error::DeserializeUnexpectedEnd,
                        "{}",
                        case.name
                    );
                }
                other => panic!("{}: body prefix of {len} bytes gave {other:?}", case.name),
            }
        }
    }
}

// ---- (b) random bytes ----

#[test]
fn random_bytes_never_panic_the_message_decoder() {
    let mut rng = StdRng::seed_from_u64(0x5eed_0001);
    for _ in 0..4000 {
        let len = rng.random_range(0..=96usize);
        let mut bytes = vec![0u8; len];
        rng.fill(&mut bytes[..]);
        decode_is_sound(&bytes);
    }
}

#[test]
fn mutated_golden_messages_never_panic_the_message_decoder() {
    // Pure noise rarely gets past the envelope; mutations of real messages reach every body
    // decoder with almost-valid bytes.
    let goldens: Vec<Vec<u8>> = cases().iter().map(|c| c.bytes()).collect();
    let mut rng = StdRng::seed_from_u64(0x5eed_0002);
    let mut decoded = 0;
    for _ in 0..4000 {
        let mut bytes = goldens[rng.random_range(0..goldens.len())].clone();
        for _ in 0..rng.random_range(1..=3) {
            let at = rng.random_range(0..bytes.len());
            match rng.random_range(0..4) {
                0 => bytes[at] ^= 1 << rng.random_range(0..8),
                1 => bytes[at] = rng.random(),
                2 => bytes.insert(at, rng.random()),
                _ if bytes.len() > 1 => {
                    bytes.remove(at);
                }
                _ => {}
            }
        }
        decoded += usize::from(decode_is_sound(&bytes));
    }
    // Both outcomes occur, so the mutations reach the body decoders and the round trip check.
    assert!(
        (100..3900).contains(&decoded),
        "{decoded} of 4000 mutations decoded"
    );
}

#[test]
fn random_streams_never_panic_the_frame_decoder() {
    const MAX: u32 = 48;
    let mut rng = StdRng::seed_from_u64(0x5eed_0003);
    let (mut frames, mut refused) = (0, 0);
    for _ in 0..4000 {
        let len = rng.random_range(0..=128usize);
        let mut stream = vec![0u8; len];
        rng.fill(&mut stream[..]);
        // Bias half of the streams towards plausible small length prefixes.
        if len >= 4 && rng.random_bool(0.5) {
            stream[..4].copy_from_slice(&rng.random_range(0..=MAX + 2).to_be_bytes());
        }
        let mut codec = FrameCodec::new(MAX);
        let mut buf = BytesMut::new();
        let mut rest = &stream[..];
        'feed: while !rest.is_empty() {
            let n = rng.random_range(1..=rest.len());
            buf.extend_from_slice(&rest[..n]);
            rest = &rest[n..];
            loop {
                match codec.decode(&mut buf) {
                    Ok(Some(frame)) => {
                        assert!(frame.len() <= MAX as usize, "frame over the maximum");
                        frames += 1;
                        decode_is_sound(&frame);
                    }
                    Ok(None) => break,
                    Err(FrameError::TooLarge { len, max }) => {
                        assert!(len > max as u64 && max == MAX);
                        refused += 1;
                        break 'feed;
                    }
                    Err(e) => panic!("unexpected frame error {e}"),
                }
            }
        }
    }
    assert!(
        frames > 500 && refused > 500,
        "{frames} frames, {refused} refusals"
    );
}

// ---- (c) unknown op codes ----

#[test]
fn unknown_op_in_a_well_formed_envelope_reports_id_and_op() {
    for (id, op) in [
        (77, 0x0000),
        (1, 0x0003),
        (300, 0x3FFF),
        (0, 0x4000),
        (0, 0x4FFF),
        (5, 0x7FFF),
        (u64::MAX, 0x8003),
        (9, 0xFFFE),
    ] {
        assert!(
            Op::from_code(op).is_none(),
            "{op:#06x} is a known op now; pick another"
        );
        for body in [&[][..], &[1, 2, 3][..], &[0xFF; 40][..]] {
            match Message::from_bytes(&envelope(id, op, body)) {
                Err(DecodeError::UnknownOp {
                    id: got_id,
                    op: got_op,
                }) => {
                    assert_eq!((got_id, got_op), (id, op))
                }
                other => panic!("id {id} op {op:#06x}: {other:?}"),
            }
        }
    }
    // Written out by hand: id 0x4d, op 0x0042 (varint 42), body length 2, body 0xabcd.
    match Message::from_bytes(&[0x4d, 0x42, 0x02, 0xab, 0xcd]) {
        Err(DecodeError::UnknownOp { id: 0x4d, op: 0x42 }) => {}
        other => panic!("{other:?}"),
    }
}

// ---- (d) known op, corrupt body ----

#[test]
fn known_op_with_corrupt_body_is_a_body_error() {
    let pane = PaneKey::new("api", "t1", "l2");
    let mut created = postcard::to_stdvec(&Created {
        binding: relay_protocol::Binding {
            pane: pane.clone(),
            pty: relay_protocol::PtyId {
                incarnation: relay_protocol::Incarnation(1),
                counter: 1,
            },
        },
        existed: true,
    })
    .unwrap();
    *created.last_mut().unwrap() = 2; // `existed` is a bool: only 0 and 1 are valid.

    let table: Vec<(&str, Op, Vec<u8>, postcard::Error)> = vec![
        (
            "empty ping",
            Op::Ping,
            vec![],
            postcard::Error::DeserializeUnexpectedEnd,
        ),
        (
            "bool 2",
            Op::Created,
            created,
            postcard::Error::DeserializeBadBool,
        ),
        // Attach: pane key, then Option tag 2 (only 0 = None and 1 = Some are valid).
        (
            "option tag 2",
            Op::Attach,
            hex::decode("03617069027431026c32 02".replace(' ', "")).unwrap(),
            postcard::Error::DeserializeBadOption,
        ),
        // Kill: workspace "a" with an invalid UTF-8 byte.
        (
            "bad utf-8",
            Op::Kill,
            vec![0x01, 0xFF],
            postcard::Error::DeserializeBadUtf8,
        ),
        // Hello: magic, then a u16 major whose 3-byte varint overflows 16 bits.
        (
            "u16 overflow",
            Op::Hello,
            hex::decode("d982b19205 ffff07".replace(' ', "")).unwrap(),
            postcard::Error::DeserializeBadVarint,
        ),
        // InputSeq: binding, then a u64 writer whose 11-byte varint overflows 64 bits.
        (
            "u64 overflow",
            Op::InputSeq,
            hex::decode(
                "03617069027431026c32 ef9bafcdf8acd1910107 ffffffffffffffffffff01".replace(' ', ""),
            )
            .unwrap(),
            postcard::Error::DeserializeBadVarint,
        ),
        // Error: kind 10 does not exist (10 kinds, 0..=9).
        (
            "unknown error kind",
            Op::Error,
            vec![0x0a],
            postcard::Error::SerdeDeCustom,
        ),
        // Exited: binding, exit status, then EndReason 5 (5 reasons, 0..=4).
        (
            "unknown end reason",
            Op::Exited,
            hex::decode("03617069027431026c32 01 01 00 00 05 00".replace(' ', "")).unwrap(),
            postcard::Error::SerdeDeCustom,
        ),
        // EndReport: one result, binding, then EndOutcome 5 (5 outcomes, 0..=4).
        (
            "unknown end outcome",
            Op::EndReport,
            hex::decode("01 03617069027431026c32 01 01 05".replace(' ', "")).unwrap(),
            postcard::Error::SerdeDeCustom,
        ),
    ];
    for (name, op, body, expected) in table {
        match Message::from_bytes(&envelope(31, op as u16, &body)) {
            Err(DecodeError::Body {
                id: 31,
                op: got,
                source,
            }) if got == op as u16 => assert_eq!(source, expected, "{name}"),
            other => panic!("{name}: {other:?}"),
        }
    }
}

// ---- (e) oversized frames ----

#[test]
fn oversized_length_prefix_is_refused_before_the_body_arrives() {
    for len in [DEFAULT_MAX_FRAME + 1, 16 * 1024 * 1024, u32::MAX] {
        let mut codec = FrameCodec::default();
        // Only the 4-byte prefix has arrived.
        let mut buf = BytesMut::from(&len.to_be_bytes()[..]);
        match codec.decode(&mut buf) {
            Err(FrameError::TooLarge { len: got, max }) => {
                assert_eq!((got, max), (len as u64, DEFAULT_MAX_FRAME))
            }
            other => panic!("length {len}: {other:?}"),
        }
        assert!(buf.capacity() < 1024, "nothing reserved for a refused body");
    }
}

#[test]
fn frame_of_exactly_the_maximum_is_accepted() {
    let mut codec = FrameCodec::default();
    let mut buf = BytesMut::from(&DEFAULT_MAX_FRAME.to_be_bytes()[..]);
    assert!(
        codec.decode(&mut buf).unwrap().is_none(),
        "waits for the body"
    );
    buf.extend_from_slice(&vec![0u8; DEFAULT_MAX_FRAME as usize]);
    let frame = codec.decode(&mut buf).unwrap().unwrap();
    assert_eq!(frame.len(), DEFAULT_MAX_FRAME as usize);
    assert!(buf.is_empty());
}

// ---- (f) trailing bytes ----

#[test]
fn trailing_bytes_after_a_body_are_ignored_for_forward_compatibility() {
    // A newer peer appended fields to these bodies; this reader keeps what it knows.
    let appended = [0xDE, 0xAD, 0xBE, 0xEF, 0x00, 0x01];
    for case in cases() {
        let env = case.message.to_envelope();
        let mut body = env.body.clone();
        body.extend_from_slice(&appended);
        let decoded = Message::from_bytes(&envelope(env.id, env.op, &body))
            .unwrap_or_else(|e| panic!("{}: appended field refused: {e}", case.name));
        assert_eq!(decoded, case.message, "{}", case.name);
    }
    // Spelled out for one message: Ping{nonce: 7} with one appended varint field (300).
    let bytes = [0x02, 0x02, 0x03, 0x07, 0xac, 0x02];
    assert_eq!(
        Message::from_bytes(&bytes).unwrap(),
        Message::Request(2, Request::Ping(Ping { nonce: 7 }))
    );
    let error = envelope(
        3,
        Op::Error as u16,
        &[0x00, 0x01, b'a', 0x01, b'b', 0x01, b'c', 0x63],
    );
    assert_eq!(
        Message::from_bytes(&error).unwrap(),
        Message::Response(
            3,
            Response::Error(ErrorReply::NotFound {
                pane: PaneKey::new("a", "b", "c")
            })
        )
    );
}

#[test]
fn trailing_bytes_after_the_envelope_are_an_error() {
    // Unlike a body, the envelope is exactly one frame body: extra bytes mean the framing is off.
    let mut bytes = Message::Request(2, Request::Ping(Ping { nonce: 7 })).to_bytes();
    bytes.extend_from_slice(&[0x00, 0x00]);
    assert!(matches!(
        Message::from_bytes(&bytes),
        Err(DecodeError::TrailingBytes { count: 2 })
    ));
}
