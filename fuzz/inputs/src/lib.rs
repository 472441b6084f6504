//! How each fuzz target reads its input bytes, shared by the targets (which parse) and the seed
//! generator (which builds inputs from the golden vectors of `protocol/tests`).
//!
//! Every layout starts with one or two selector bytes and hands the rest unchanged to the real
//! decoder, so a mutation of the payload is a mutation of real wire bytes:
//!
//! - `frame`: `[max, chunk, stream..]` — the [`FrameCodec`](relay_protocol::FrameCodec) maximum
//!   and the size of the pieces the stream arrives in ([`FrameInput`]).
//! - `message`: the bytes of one frame body, unchanged (no layout).
//! - `body`: `[op, id, body..]` — one known op code chosen by index, so every message body is
//!   reached without the fuzzer having to learn op codes ([`BodyInput`]).
//! - `agent`: `[mode, stream..]` — the Hello the driver sends first (or none: the stream starts
//!   with its own), then the bytes of the connection ([`AgentInput`]).

use std::sync::OnceLock;

use relay_protocol::{Capability, Hello, Incarnation, Op, DEFAULT_MAX_FRAME};

/// The incarnation of every PTY id in the golden vectors. The agent target replaces it in the
/// requests it sends with the incarnation of the agent it runs (a random number per start), so
/// that fenced requests built from seeds can name a live PTY.
pub const PLACEHOLDER_INCARNATION: Incarnation = Incarnation(0x0123_4567_89ab_cdef);

/// Every op code this build knows, in code order.
pub fn known_ops() -> &'static [Op] {
    static OPS: OnceLock<Vec<Op>> = OnceLock::new();
    OPS.get_or_init(|| (0..=u16::MAX).filter_map(Op::from_code).collect())
}

/// Input of the `frame` target.
#[derive(Debug, Clone, Copy)]
pub struct FrameInput<'a> {
    /// The codec's maximum frame body: the protocol default, or a small one (0..=508 bytes) so
    /// that oversized lengths are reached often.
    pub max: u32,
    /// Bytes per piece the stream is handed to the decoder in; `None`: all at once.
    pub chunk: Option<usize>,
    /// The byte stream.
    pub stream: &'a [u8],
}

impl<'a> FrameInput<'a> {
    /// Reads the layout; `None` for inputs shorter than the two selector bytes.
    pub fn parse(data: &'a [u8]) -> Option<Self> {
        let (&[max, chunk], stream) = data.split_first_chunk::<2>()?;
        Some(FrameInput {
            max: if max < 0x80 {
                DEFAULT_MAX_FRAME
            } else {
                u32::from(max & 0x7f) * 4
            },
            chunk: (chunk != 0).then_some(usize::from(chunk)),
            stream,
        })
    }

    /// An input with the default maximum that hands `stream` over in `chunk`-byte pieces
    /// (0: all at once).
    pub fn build(chunk: u8, stream: &[u8]) -> Vec<u8> {
        let mut out = vec![0, chunk];
        out.extend_from_slice(stream);
        out
    }
}

/// Input of the `body` target.
#[derive(Debug, Clone, Copy)]
pub struct BodyInput<'a> {
    /// The op, one of [`known_ops`].
    pub op: Op,
    /// The envelope's request id.
    pub id: u64,
    /// The body bytes.
    pub body: &'a [u8],
}

impl<'a> BodyInput<'a> {
    /// Reads the layout; `None` for inputs shorter than the two selector bytes.
    pub fn parse(data: &'a [u8]) -> Option<Self> {
        let (&[op, id], body) = data.split_first_chunk::<2>()?;
        let ops = known_ops();
        Some(BodyInput {
            op: ops[usize::from(op) % ops.len()],
            id: u64::from(id),
            body,
        })
    }

    /// The input for `op` with request id `id` (cut to a byte) and `body`.
    pub fn build(op: Op, id: u64, body: &[u8]) -> Vec<u8> {
        let index = known_ops()
            .iter()
            .position(|&o| o == op)
            .expect("op is known");
        let mut out = vec![index as u8, id as u8];
        out.extend_from_slice(body);
        out
    }
}

/// Request id of the Hello the `agent` target sends for the input.
pub const HELLO_ID: u64 = 1;

/// Input of the `agent` target.
#[derive(Debug, Clone)]
pub struct AgentInput<'a> {
    /// The Hello the driver sends before the stream, or `None` when the stream brings its own.
    pub hello: Option<Hello>,
    /// The bytes of the connection (frames, possibly malformed).
    pub stream: &'a [u8],
}

impl<'a> AgentInput<'a> {
    /// Reads the layout. A mode byte below `0x80` is a mask over [`Capability::all`] for a
    /// protocol-default Hello (see [`hello_with`]); `0x80` and above sends none.
    pub fn parse(data: &'a [u8]) -> Option<Self> {
        let (&mode, stream) = data.split_first()?;
        Some(AgentInput {
            hello: (mode < 0x80).then(|| hello_with(mode)),
            stream,
        })
    }

    /// An input whose driver sends a Hello with every capability before `stream`.
    pub fn build(stream: &[u8]) -> Vec<u8> {
        let mut out = vec![0x7f];
        out.extend_from_slice(stream);
        out
    }

    /// An input whose `stream` brings its own Hello.
    pub fn build_raw(stream: &[u8]) -> Vec<u8> {
        let mut out = vec![0x80];
        out.extend_from_slice(stream);
        out
    }
}

/// A current Hello with the capabilities selected by `mask`: bit `i` keeps
/// [`Capability::all`]`[i + 1]` (from `credit` to `lifecycle`); the first, `pty`, is always kept.
pub fn hello_with(mask: u8) -> Hello {
    let mut hello = Hello::new("relay-fuzz", "0.0.0");
    hello.capabilities = Capability::all()
        .into_iter()
        .enumerate()
        .filter(|(i, _)| *i == 0 || (*i <= 7 && mask & (1 << (i - 1)) != 0))
        .map(|(_, c)| c)
        .collect();
    hello
}
