//! The relay wire protocol: everything that crosses the connection between a connector and an
//! agent, and nothing that does IO.
//!
//! # Layout
//!
//! - [`frame`]: length-prefixed framing (`u32` big-endian length, then that many bytes), with a
//!   hard maximum checked *before* any buffer for the body is allocated.
//! - [`envelope`]: the two-level envelope `(request id, op code, body)` inside every frame. The op
//!   code is read before the body, so a peer can answer an operation it does not know with a precise
//!   [`ErrorReply::Unsupported`] instead of dropping the connection.
//! - [`types`]: identities and records shared by messages: [`PaneKey`], [`PtyId`], [`Binding`],
//!   [`LeaseInfo`], ...
//! - [`message`]: every request, response and push, each with its own never-reused [`Op`] code.
//! - [`hello`]: the first exchange (magic, protocol version, capabilities, limits).
//! - [`bridge`]: the bridge's flags and exit statuses (the contract beyond frames).
//! - [`signal`]: signal numbers, names and descriptions as the wire uses them (Linux's).
//! - [`error`]: [`DecodeError`] (bytes that are not a valid message) and [`ErrorReply`] (a typed
//!   refusal sent by the agent).
//!
//! Architecture invariant: this crate does no IO and knows nothing about PTYs, sockets or SSH. It
//! is the single place where the byte shape of the protocol is decided, and `protocol/tests/golden.rs`
//! pins every message to a byte vector so that an accidental change of wire shape fails a test.
//!
//! Bodies are encoded with postcard. postcard enums are append-only (an old reader fails on a new
//! variant) and appended struct fields are invisible to old readers, which is why every message
//! is a separate op code and why changed messages get new op codes instead of new fields. The full
//! compatibility rules are in `docs/protocol.md`.
#![deny(missing_docs)]

pub mod bridge;
pub mod envelope;
pub mod error;
pub mod frame;
pub mod hello;
pub mod message;
pub mod names;
pub mod signal;
pub mod types;

pub use envelope::Envelope;
pub use error::{DecodeError, ErrorReply};
pub use frame::{FrameCodec, DEFAULT_MAX_FRAME, MAX_OUTPUT_CHUNK};
pub use hello::{Capability, Hello, Limits, Welcome, MAGIC, PROTOCOL_MAJOR, PROTOCOL_MINOR};
pub use message::{Message, Op, Push, Request, Response};
pub use names::{check_pane_part, is_bidi_control, PanePartError, MAX_PANE_PART, PANE_PART_FORM};
pub use types::*;
