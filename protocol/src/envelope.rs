//! The envelope inside every frame: `(request id, op code, body)`.
//!
//! The envelope is decoded first and never depends on the op code, so a receiver always learns the
//! request id and op of a message it cannot understand and can answer it precisely.
//!
//! Request ids: the requester picks a non-zero id per request and the reply carries the same id.
//! Id `0` marks an unsolicited push from the agent (output, exit, ...).

use serde::{Deserialize, Serialize};

use crate::error::DecodeError;

/// Request id used by pushes (messages that answer no request).
pub const PUSH_ID: u64 = 0;

/// One message as it travels in a frame: postcard of `(varint id, varint op, length-prefixed body)`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Envelope {
    /// Request id; [`PUSH_ID`] for pushes.
    pub id: u64,
    /// Operation code, see [`Op`](crate::Op). Unknown values are kept, not rejected, here.
    pub op: u16,
    /// postcard-encoded body whose type is determined by `op`.
    pub body: Vec<u8>,
}

impl Envelope {
    /// Encodes the envelope to the bytes of one frame body.
    pub fn to_bytes(&self) -> Vec<u8> {
        postcard::to_stdvec(self).expect("encoding an envelope into a Vec cannot fail")
    }

    /// Decodes one frame body.
    ///
    /// # Errors
    /// [`DecodeError::Envelope`] when the bytes are not an envelope (garbage, truncation), and
    /// [`DecodeError::TrailingBytes`] when bytes follow a complete envelope.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, DecodeError> {
        let (env, rest) =
            postcard::take_from_bytes::<Envelope>(bytes).map_err(DecodeError::Envelope)?;
        if !rest.is_empty() {
            return Err(DecodeError::TrailingBytes { count: rest.len() });
        }
        Ok(env)
    }
}
