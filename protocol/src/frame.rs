//! Length-prefixed framing.
//!
//! A frame is a `u32` big-endian length followed by exactly that many bytes of
//! [`Envelope`](crate::Envelope). The length is checked against the negotiated maximum before any
//! buffer for the body is reserved, so a hostile or corrupt length cannot make a peer allocate.
//! An incomplete frame is a normal state ("need more bytes"), not an error.
//!
//! [`FrameCodec`] is a `tokio_util::codec` `Decoder`/`Encoder`; it does no IO by itself, the caller
//! wraps a reader/writer with `FramedRead`/`FramedWrite`. It is stateless between calls: "is a whole
//! frame here?" is answered from the buffer alone.

use bytes::{Buf, BufMut};
use bytes::{Bytes, BytesMut};
use tokio_util::codec::{Decoder, Encoder};

/// Default hard maximum of one frame body, in bytes (1 MiB). Both sides announce their limit in
/// [`Hello`](crate::Hello)/[`Welcome`](crate::Welcome); each side must accept frames up to this size.
pub const DEFAULT_MAX_FRAME: u32 = 1024 * 1024;

/// Largest PTY output payload the agent puts in one [`Push::Output`](crate::Push::Output), in bytes
/// (64 KiB), so that one pane's burst never holds the channel for long (DESIGN §5 "Mux").
pub const MAX_OUTPUT_CHUNK: usize = 64 * 1024;

/// Errors of the framing layer.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// The length prefix announced a frame larger than the maximum; the connection must be closed
    /// because the stream can no longer be trusted.
    #[error("frame of {len} bytes exceeds the maximum of {max} bytes; the peer is misbehaving or a different program is writing to this stream")]
    TooLarge {
        /// Announced length in bytes.
        len: u64,
        /// Maximum accepted, in bytes.
        max: u32,
    },
    /// Reading from or writing to the underlying stream failed.
    #[error("stream error: {0}")]
    Io(#[from] std::io::Error),
}

/// Codec for relay frames (u32 big-endian length prefix, maximum enforced before allocation).
#[derive(Debug, Clone, Copy)]
pub struct FrameCodec {
    max: u32,
}

impl FrameCodec {
    /// A codec that accepts frames of at most `max` bytes (body only, without the 4-byte prefix).
    pub fn new(max: u32) -> Self {
        FrameCodec { max }
    }

    /// The maximum frame body size in bytes.
    pub fn max(&self) -> u32 {
        self.max
    }
}

impl Default for FrameCodec {
    fn default() -> Self {
        FrameCodec::new(DEFAULT_MAX_FRAME)
    }
}

impl Decoder for FrameCodec {
    type Item = BytesMut;
    type Error = FrameError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<BytesMut>, FrameError> {
        if src.len() < 4 {
            return Ok(None);
        }
        let len = u32::from_be_bytes([src[0], src[1], src[2], src[3]]);
        if len > self.max {
            return Err(FrameError::TooLarge {
                len: len as u64,
                max: self.max,
            });
        }
        let total = 4 + len as usize;
        if src.len() < total {
            // Safe to reserve now: `len` was checked against the maximum.
            src.reserve(total - src.len());
            return Ok(None);
        }
        src.advance(4);
        Ok(Some(src.split_to(len as usize)))
    }
}

impl Encoder<Bytes> for FrameCodec {
    type Error = FrameError;

    fn encode(&mut self, item: Bytes, dst: &mut BytesMut) -> Result<(), FrameError> {
        if item.len() > self.max as usize {
            return Err(FrameError::TooLarge {
                len: item.len() as u64,
                max: self.max,
            });
        }
        dst.reserve(4 + item.len());
        dst.put_u32(item.len() as u32);
        dst.extend_from_slice(&item);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn incomplete_frame_is_not_an_error() {
        let mut codec = FrameCodec::new(16);
        let mut buf = BytesMut::from(&[0u8, 0, 0, 5, b'a', b'b'][..]);
        assert!(codec.decode(&mut buf).unwrap().is_none());
        buf.extend_from_slice(b"cde");
        assert_eq!(&codec.decode(&mut buf).unwrap().unwrap()[..], b"abcde");
    }

    #[test]
    fn oversized_length_is_refused_before_the_body_arrives() {
        let mut codec = FrameCodec::new(16);
        let mut buf = BytesMut::from(&[0u8, 0, 0, 17][..]);
        let err = codec.decode(&mut buf).unwrap_err();
        assert!(
            matches!(err, FrameError::TooLarge { len: 17, max: 16 }),
            "{err}"
        );
        // Nothing was reserved for the announced body.
        assert!(buf.capacity() < 1024);
    }

    #[test]
    fn encoder_refuses_oversized_items() {
        let mut codec = FrameCodec::new(4);
        let mut dst = BytesMut::new();
        assert!(codec
            .encode(Bytes::from_static(b"12345"), &mut dst)
            .is_err());
        codec.encode(Bytes::from_static(b"1234"), &mut dst).unwrap();
        assert_eq!(&dst[..], &[0, 0, 0, 4, b'1', b'2', b'3', b'4']);
    }
}
