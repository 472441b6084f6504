//! Every message with its op code.
//!
//! Three kinds of message share the envelope:
//! - a [`Request`] from the connector (non-zero request id; [`Request::Ack`] is the one request that
//!   is never answered),
//! - a [`Response`] from the agent, carrying the id of the request it answers,
//! - a [`Push`] from the agent, unsolicited, with request id [`PUSH_ID`].
//!
//! Op codes are explicit and never reused: requests `0x0001..`, responses `0x8000..`, pushes
//! `0x4000..`, error `0xFFFF`. A changed message gets a new op code; the old one stays decodable.

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::envelope::{Envelope, PUSH_ID};
use crate::error::{DecodeError, ErrorReply};
use crate::hello::{Hello, Welcome};

mod bodies;
mod lifecycle;
mod upgrade;
pub use bodies::*;
pub use lifecycle::*;
pub use upgrade::*;

macro_rules! ops {
    ($( $variant:ident = $code:literal ),* $(,)?) => {
        /// Op codes. Explicit, never reused.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[repr(u16)]
        pub enum Op {
            $(
                #[allow(missing_docs)]
                $variant = $code,
            )*
        }

        impl Op {
            /// The op for a code, if this build knows it.
            pub fn from_code(code: u16) -> Option<Op> {
                match code {
                    $( $code => Some(Op::$variant), )*
                    _ => None,
                }
            }
        }
    };
}

ops! {
    Hello = 0x0001,
    Ping = 0x0002,
    Create = 0x0010,
    Attach = 0x0011,
    Input = 0x0012,
    Resize = 0x0013,
    Signal = 0x0014,
    Kill = 0x0015,
    Detach = 0x0016,
    ListLeases = 0x0017,
    Ack = 0x0018,
    Status = 0x0019,
    Protect = 0x001A,
    Open = 0x001B,
    InputSeq = 0x001C,
    AttachScreen = 0x001D,
    OpenScreen = 0x001E,
    SetPolicy = 0x001F,
    Inspect = 0x0020,
    End = 0x0021,
    Replace = 0x0022,
    Forget = 0x0023,
    UpgradeInfo = 0x0024,
    Upgrade = 0x0025,
    OpenLossless = 0x0026,
    AttachLossless = 0x0027,
    ListWorkspace = 0x0028,
    Done = 0x8000,
    Welcome = 0x8001,
    Pong = 0x8002,
    Created = 0x8010,
    Attached = 0x8011,
    Leases = 0x8017,
    StatusReply = 0x8019,
    Opened = 0x801B,
    ScreenAttached = 0x801D,
    ScreenOpened = 0x801E,
    Inspected = 0x8020,
    EndReport = 0x8021,
    Forgot = 0x8023,
    UpgradeReport = 0x8024,
    UpgradeStarted = 0x8025,
    Output = 0x4001,
    OutputGap = 0x4002,
    Exited = 0x4003,
    Snapshot = 0x4004,
    Event = 0x4005,
    Error = 0xFFFF,
}

macro_rules! message_enum {
    ($(#[$meta:meta])* $name:ident { $( $variant:ident($ty:ty) ),* $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub enum $name {
            $(
                #[allow(missing_docs)]
                $variant($ty),
            )*
        }

        impl $name {
            /// The op code of this message.
            pub fn op(&self) -> Op {
                match self {
                    $( $name::$variant(_) => Op::$variant, )*
                }
            }

            fn encode_body(&self) -> Vec<u8> {
                match self {
                    $( $name::$variant(m) => to_vec(m), )*
                }
            }

            fn decode_body(op: Op, id: u64, body: &[u8]) -> Option<Result<Self, DecodeError>> {
                match op {
                    $( Op::$variant => Some(from_body::<$ty>(id, op, body).map($name::$variant)), )*
                    #[allow(unreachable_patterns)]
                    _ => None,
                }
            }
        }
    };
}

message_enum! {
    /// A request from connector to agent.
    Request {
        Hello(Hello),
        Ping(Ping),
        Create(Create),
        Attach(Attach),
        Input(Input),
        Resize(Resize),
        Signal(Signal),
        Kill(Kill),
        Detach(Detach),
        ListLeases(ListLeases),
        Ack(Ack),
        Status(StatusRequest),
        Protect(Protect),
        Open(Open),
        InputSeq(InputSeq),
        AttachScreen(AttachScreen),
        OpenScreen(OpenScreen),
        SetPolicy(SetPolicy),
        Inspect(Inspect),
        End(End),
        Replace(Replace),
        Forget(Forget),
        UpgradeInfo(UpgradeInfo),
        Upgrade(Upgrade),
        OpenLossless(Open),
        AttachLossless(Attach),
        ListWorkspace(ListWorkspace),
    }
}

message_enum! {
    /// A reply from agent to connector.
    Response {
        Done(Done),
        Welcome(Welcome),
        Pong(Pong),
        Created(Created),
        Attached(Attached),
        Leases(Leases),
        StatusReply(Status),
        Opened(Opened),
        ScreenAttached(ScreenAttached),
        ScreenOpened(ScreenOpened),
        Inspected(Inspected),
        EndReport(EndReport),
        Forgot(Forgot),
        UpgradeReport(UpgradeReport),
        UpgradeStarted(UpgradeStarted),
        Error(ErrorReply),
    }
}

message_enum! {
    /// An unsolicited message from agent to connector.
    Push {
        Output(Output),
        OutputGap(OutputGap),
        Exited(Exited),
        Snapshot(Snapshot),
        Event(Event),
    }
}

/// Any message, with the request id it travels under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    /// A request and its id (non-zero).
    Request(u64, Request),
    /// A reply to the request with that id.
    Response(u64, Response),
    /// A push (travels with id 0).
    Push(Push),
}

impl Message {
    /// Encodes to the bytes of one frame body.
    pub fn to_bytes(&self) -> Vec<u8> {
        self.to_envelope().to_bytes()
    }

    /// Builds the envelope of this message.
    pub fn to_envelope(&self) -> Envelope {
        let (id, op, body) = match self {
            Message::Request(id, m) => (*id, m.op(), m.encode_body()),
            Message::Response(id, m) => (*id, m.op(), m.encode_body()),
            Message::Push(m) => (PUSH_ID, m.op(), m.encode_body()),
        };
        Envelope {
            id,
            op: op as u16,
            body,
        }
    }

    /// Decodes one frame body.
    ///
    /// # Errors
    /// [`DecodeError::UnknownOp`] (with the id, so it can be answered) for an op code this build
    /// does not know; other [`DecodeError`]s for malformed bytes.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, DecodeError> {
        Self::from_envelope(&Envelope::from_bytes(bytes)?)
    }

    /// Decodes a message from an already decoded envelope.
    ///
    /// # Errors
    /// As [`Message::from_bytes`].
    pub fn from_envelope(env: &Envelope) -> Result<Self, DecodeError> {
        let unknown = DecodeError::UnknownOp {
            id: env.id,
            op: env.op,
        };
        let Some(op) = Op::from_code(env.op) else {
            return Err(unknown);
        };
        if let Some(r) = Request::decode_body(op, env.id, &env.body) {
            return r.map(|m| Message::Request(env.id, m));
        }
        if let Some(r) = Response::decode_body(op, env.id, &env.body) {
            return r.map(|m| Message::Response(env.id, m));
        }
        if let Some(r) = Push::decode_body(op, env.id, &env.body) {
            return r.map(Message::Push);
        }
        Err(unknown)
    }
}

fn to_vec<T: Serialize>(m: &T) -> Vec<u8> {
    postcard::to_stdvec(m).expect("encoding into a Vec cannot fail")
}

fn from_body<T: DeserializeOwned>(id: u64, op: Op, body: &[u8]) -> Result<T, DecodeError> {
    // Trailing bytes are allowed: a newer peer may have appended fields (see docs/protocol.md).
    postcard::take_from_bytes::<T>(body)
        .map(|(m, _rest)| m)
        .map_err(|source| DecodeError::Body {
            id,
            op: op as u16,
            source,
        })
}

impl From<ErrorReply> for Response {
    fn from(e: ErrorReply) -> Self {
        Response::Error(e)
    }
}
