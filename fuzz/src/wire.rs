//! Properties of the protocol decoders, checked on arbitrary bytes.

use bytes::{Bytes, BytesMut};
use relay_fuzz_inputs::{BodyInput, FrameInput};
use relay_protocol::frame::FrameError;
use relay_protocol::{DecodeError, Envelope, FrameCodec, Message, Response};
use tokio_util::codec::{Decoder, Encoder};

/// How decoding a whole stream ended.
#[derive(Debug, PartialEq, Eq)]
enum End {
    /// Every byte was part of a complete frame.
    Clean,
    /// The stream ended inside a frame; that many bytes were left.
    Truncated(usize),
    /// A length prefix announced `len` bytes, more than the maximum.
    TooLarge(u64),
}

/// The frames decoded from a stream and how the stream ended.
#[derive(Debug, PartialEq, Eq)]
struct Decoded {
    frames: Vec<BytesMut>,
    end: End,
}

/// The `frame` target: [`FrameCodec`] as `FramedRead` drives it (append what arrived, decode
/// until it needs more, `decode_eof` at the end). The frames must not depend on how the stream
/// was cut, must re-encode to exactly the bytes they were read from, and the codec may only
/// reserve room for lengths it accepted. Every frame also goes through [`Message::from_bytes`],
/// as in the agent's and the connector's read loops.
pub fn check_frames(input: FrameInput<'_>) {
    let whole = decode(input.max, input.stream, None);
    let pieces = decode(input.max, input.stream, input.chunk);
    assert_eq!(whole, pieces, "frames depend on how the stream was cut");

    let mut encoder = FrameCodec::new(input.max);
    let mut again = BytesMut::new();
    for frame in &whole.frames {
        encoder
            .encode(Bytes::copy_from_slice(frame), &mut again)
            .expect("a decoded frame is within the maximum");
        describe(Message::from_bytes(frame));
    }
    let consumed = again.len();
    assert_eq!(
        &again[..],
        &input.stream[..consumed],
        "frames re-encode to other bytes"
    );
    let rest = &input.stream[consumed..];
    match whole.end {
        End::Clean => assert!(rest.is_empty()),
        End::Truncated(left) => {
            assert_eq!(left, rest.len());
            let announced = rest
                .get(..4)
                .map(|p| u32::from_be_bytes([p[0], p[1], p[2], p[3]]) as usize);
            assert!(
                announced.is_none_or(|len| len > rest.len() - 4),
                "a complete frame was left undecoded"
            );
        }
        End::TooLarge(len) => {
            assert!(
                len > u64::from(input.max),
                "refused a frame within the maximum"
            );
            assert_eq!(
                u64::from(u32::from_be_bytes(rest[..4].try_into().unwrap())),
                len
            );
        }
    }
}

fn decode(max: u32, stream: &[u8], chunk: Option<usize>) -> Decoded {
    let mut codec = FrameCodec::new(max);
    let mut buf = BytesMut::new();
    let mut frames = Vec::new();
    // Room the codec may reserve: what arrived plus one frame of the maximum, doubled for the
    // buffer's own growth policy; never anything derived from a refused length.
    let bound = 2 * (stream.len() + 4 + max as usize) + 64;
    for piece in stream.chunks(chunk.unwrap_or(stream.len()).max(1)) {
        buf.extend_from_slice(piece);
        loop {
            match codec.decode(&mut buf) {
                Ok(Some(frame)) => frames.push(frame),
                Ok(None) => break,
                Err(FrameError::TooLarge { len, .. }) => {
                    return Decoded {
                        frames,
                        end: End::TooLarge(len),
                    }
                }
                Err(e) => panic!("decode failed with {e}"),
            }
            assert!(buf.capacity() <= bound, "reserved {} bytes", buf.capacity());
        }
        assert!(buf.capacity() <= bound, "reserved {} bytes", buf.capacity());
    }
    let end = match codec.decode_eof(&mut buf) {
        Ok(None) => End::Clean,
        Ok(Some(frame)) => panic!("decode_eof found a frame decode had not: {frame:?}"),
        Err(FrameError::Io(_)) => End::Truncated(buf.len()),
        Err(e) => panic!("decode_eof failed with {e}"),
    };
    Decoded { frames, end }
}

/// The `message` target: one frame body through [`Envelope::from_bytes`] and
/// [`Message::from_bytes`]. They must agree, and whatever decodes must survive its round trip.
pub fn check_message(bytes: &[u8]) {
    let envelope = Envelope::from_bytes(bytes);
    let message = Message::from_bytes(bytes);
    match (&envelope, &message) {
        (Err(_), Err(DecodeError::Envelope(_) | DecodeError::TrailingBytes { .. })) => {}
        (Err(e), other) => panic!("envelope refused ({e}) but the message gave {other:?}"),
        (Ok(env), Ok(m)) => {
            let again = m.to_envelope();
            assert_eq!(again.op, env.op, "the op changed");
            if !matches!(m, Message::Push(_)) {
                assert_eq!(again.id, env.id, "the request id changed");
            }
        }
        (Ok(env), Err(DecodeError::UnknownOp { id, op } | DecodeError::Body { id, op, .. })) => {
            assert_eq!(
                (*id, *op),
                (env.id, env.op),
                "the error names another request"
            );
        }
        (Ok(_), Err(e)) => panic!("envelope decoded but the message gave {e:?}"),
    }
    if let Ok(env) = &envelope {
        let bytes = env.to_bytes();
        assert_eq!(&Envelope::from_bytes(&bytes).expect("re-decodes"), env);
    }
    if let Ok(m) = &message {
        round_trip(m);
    }
    describe(message);
}

/// The `body` target: `input.body` as the body of `input.op`. Whatever decodes must survive its
/// round trip, and an appended field (bytes after the body) must not change it.
pub fn check_body(input: BodyInput<'_>) {
    let envelope = Envelope {
        id: input.id,
        op: input.op as u16,
        body: input.body.to_vec(),
    };
    let message = Message::from_envelope(&envelope);
    if let Ok(m) = &message {
        assert_eq!(m.to_envelope().op, input.op as u16, "decoded as another op");
        round_trip(m);
        let mut longer = envelope.clone();
        longer.body.extend_from_slice(&[0x01, 0xff, 0x00]);
        assert_eq!(
            Message::from_envelope(&longer).as_ref().ok(),
            Some(m),
            "an appended field changed the message"
        );
    }
    describe(message);
}

/// Encode → decode gives the same message, and encoding is deterministic.
fn round_trip(m: &Message) {
    let bytes = m.to_bytes();
    let again = Message::from_bytes(&bytes)
        .unwrap_or_else(|e| panic!("{m:?} encodes to bytes that do not decode: {e}"));
    assert_eq!(&again, m, "round trip changed the message");
    assert_eq!(again.to_bytes(), bytes, "encoding is not canonical");
}

/// Formats the result as logs and error messages do (peer-supplied strings in `Display`).
fn describe(result: Result<Message, DecodeError>) {
    let text = match result {
        Ok(Message::Response(_, Response::Error(e))) => format!("{e} {e:?}"),
        Ok(m) => format!("{m:?}"),
        Err(e) => format!("{e} {e:?}"),
    };
    std::hint::black_box(text);
}
