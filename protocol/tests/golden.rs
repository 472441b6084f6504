//! Golden byte vectors: every message, and one frame, pinned to exact bytes.
//!
//! Each row of [`relay_protocol_golden::cases`] is checked both ways by [`check`]: the message must encode to the
//! frozen hex, and the frozen hex must decode to the message. A failure here means the wire shape
//! changed, which old peers cannot read (see `docs/protocol.md`, "Compatibility").

use std::collections::BTreeSet;

use bytes::{Bytes, BytesMut};
use relay_protocol::message::{EndOutcome, EndWhen, Ping, Tag};
use relay_protocol::{
    EndReason, ErrorReply, FrameCodec, LeaseState, Message, Op, Push, Request, Response, MAGIC,
};
use tokio_util::codec::{Decoder, Encoder};

use relay_protocol_golden::{cases, Golden};

/// Encodes `case.message` and compares with `case.hex`, then decodes `case.hex` and compares with
/// `case.message`. Returns a description of every difference (empty when the row holds).
fn check(case: &Golden) -> Vec<String> {
    let mut problems = Vec::new();
    let expected = case.bytes();
    let actual = case.message.to_bytes();
    if actual != expected {
        problems.push(format!(
            "{}: encodes to\n    {}\n  expected\n    {}",
            case.name,
            hex::encode(&actual),
            hex::encode(&expected)
        ));
    }
    match Message::from_bytes(&expected) {
        Ok(decoded) if decoded == case.message => {}
        Ok(decoded) => problems.push(format!(
            "{}: expected bytes decode to {decoded:?}, not {:?}",
            case.name, case.message
        )),
        Err(e) => problems.push(format!("{}: expected bytes do not decode: {e}", case.name)),
    }
    problems
}

#[test]
fn every_message_matches_its_golden_bytes() {
    let problems: Vec<String> = cases().iter().flat_map(check).collect();
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn golden_names_are_unique() {
    let cases = cases();
    let names: BTreeSet<&str> = cases.iter().map(|c| c.name).collect();
    assert_eq!(names.len(), cases.len(), "duplicate golden names");
}

fn op_of(message: &Message) -> Op {
    match message {
        Message::Request(_, r) => r.op(),
        Message::Response(_, r) => r.op(),
        Message::Push(p) => p.op(),
    }
}

#[test]
fn every_op_code_has_a_golden_vector() {
    let covered: BTreeSet<u16> = cases().iter().map(|c| op_of(&c.message) as u16).collect();
    let known: BTreeSet<u16> = (0..=u16::MAX)
        .filter(|&code| Op::from_code(code).is_some())
        .collect();
    let missing: Vec<String> = known
        .difference(&covered)
        .map(|op| format!("{op:#06x}"))
        .collect();
    assert!(
        missing.is_empty(),
        "ops without a golden vector: {missing:?}"
    );
}

/// Index of an error kind. The match is exhaustive on purpose: a new kind does not compile until
/// it gets an index here, and then `every_enum_variant_has_a_golden_vector` asks for its vector.
fn error_kind(e: &ErrorReply) -> usize {
    match e {
        ErrorReply::NotFound { .. } => 0,
        ErrorReply::Ended { .. } => 1,
        ErrorReply::Mismatch { .. } => 2,
        ErrorReply::Unsupported { .. } => 3,
        ErrorReply::LimitExceeded { .. } => 4,
        ErrorReply::BadRequest { .. } => 5,
        ErrorReply::SpawnFailed { .. } => 6,
        ErrorReply::Incompatible { .. } => 7,
        ErrorReply::Internal { .. } => 8,
        ErrorReply::UpgradeRefused { .. } => 9,
    }
}
const ERROR_KINDS: usize = 10;

fn end_reason(r: &EndReason) -> usize {
    match r {
        EndReason::Exited => 0,
        EndReason::Killed => 1,
        EndReason::AgentRestarted => 2,
        EndReason::Expired => 3,
        EndReason::Forgotten => 4,
    }
}
const END_REASONS: usize = 5;

fn lease_state(s: &LeaseState) -> usize {
    match s {
        LeaseState::Attached => 0,
        LeaseState::Detached => 1,
        LeaseState::Ended => 2,
        LeaseState::Superseded => 3,
    }
}
const LEASE_STATES: usize = 4;

fn tag(t: &Tag) -> usize {
    match t {
        Tag::None => 0,
        Tag::Protected => 1,
        Tag::CleanupAt { .. } => 2,
        Tag::Suggested { .. } => 3,
        Tag::Kept { .. } => 4,
    }
}
const TAGS: usize = 5;

fn end_when(w: &EndWhen) -> usize {
    match w {
        EndWhen::Always => 0,
        EndWhen::Unprotected => 1,
        EndWhen::Eligible => 2,
    }
}
const END_WHENS: usize = 3;

fn end_outcome(o: &EndOutcome) -> usize {
    match o {
        EndOutcome::Ended { .. } => 0,
        EndOutcome::AlreadyGone { .. } => 1,
        EndOutcome::Refused { .. } => 2,
        EndOutcome::Kept { .. } => 3,
        EndOutcome::Unverified { .. } => 4,
    }
}
const END_OUTCOMES: usize = 5;

#[test]
fn every_enum_variant_has_a_golden_vector() {
    let mut errors = BTreeSet::new();
    let mut reasons = BTreeSet::new();
    let mut states = BTreeSet::new();
    let mut tags = BTreeSet::new();
    let mut whens = BTreeSet::new();
    let mut outcomes = BTreeSet::new();
    for case in cases() {
        match &case.message {
            Message::Response(_, Response::Error(e)) => {
                errors.insert(error_kind(e));
                if let ErrorReply::Ended { reason, .. } = e {
                    reasons.insert(end_reason(reason));
                }
            }
            Message::Push(Push::Exited(x)) => {
                reasons.insert(end_reason(&x.reason));
            }
            Message::Response(_, Response::Leases(l)) => {
                for lease in &l.leases {
                    states.insert(lease_state(&lease.state));
                    if let Some(r) = &lease.reason {
                        reasons.insert(end_reason(r));
                    }
                }
            }
            Message::Response(_, Response::Inspected(i)) => {
                for row in &i.leases {
                    tags.insert(tag(&row.tag));
                }
            }
            Message::Request(_, Request::End(e)) => {
                whens.insert(end_when(&e.when));
            }
            Message::Response(_, Response::EndReport(r)) => {
                for result in &r.results {
                    outcomes.insert(end_outcome(&result.outcome));
                }
            }
            _ => {}
        }
    }
    assert_eq!(errors, (0..ERROR_KINDS).collect(), "ErrorReply kinds");
    assert_eq!(reasons, (0..END_REASONS).collect(), "EndReason variants");
    assert_eq!(states, (0..LEASE_STATES).collect(), "LeaseState variants");
    assert_eq!(tags, (0..TAGS).collect(), "Tag variants");
    assert_eq!(whens, (0..END_WHENS).collect(), "EndWhen variants");
    assert_eq!(outcomes, (0..END_OUTCOMES).collect(), "EndOutcome variants");
}

#[test]
fn enum_discriminants_are_declaration_order_varints() {
    // postcard writes an enum as a varint of the variant's index; the first body byte of every
    // error reply is therefore its kind's index (all below 128, so one byte).
    for case in cases() {
        if let Message::Response(_, Response::Error(e)) = &case.message {
            let env = case.message.to_envelope();
            assert_eq!(env.body[0] as usize, error_kind(e), "{}", case.name);
        }
    }
}

#[test]
fn magic_is_rlay_and_encodes_as_a_varint() {
    assert_eq!(MAGIC.to_be_bytes(), *b"RLAY");
    assert_eq!(MAGIC, 0x524c_4159);
    // u32 is a varint in postcard, not 4 raw bytes: 0x524c4159 takes 5 bytes.
    assert_eq!(
        hex::encode(postcard::to_stdvec(&MAGIC).unwrap()),
        "d982b19205"
    );
}

/// A frame is the u32 big-endian body length, then the body.
const PING_FRAME: &str = "00000006 2a 02 03 80c001";

fn ping_message() -> Message {
    Message::Request(42, Request::Ping(Ping { nonce: 0x6000 }))
}

#[test]
fn frame_golden_bytes() {
    let expected = hex::decode(PING_FRAME.split_whitespace().collect::<String>()).unwrap();

    let mut out = BytesMut::new();
    FrameCodec::default()
        .encode(Bytes::from(ping_message().to_bytes()), &mut out)
        .unwrap();
    assert_eq!(hex::encode(&out), hex::encode(&expected));

    let mut input = BytesMut::from(&expected[..]);
    let body = FrameCodec::default().decode(&mut input).unwrap().unwrap();
    assert!(input.is_empty(), "the whole frame is consumed");
    assert_eq!(Message::from_bytes(&body).unwrap(), ping_message());
}

#[test]
fn open_is_advertised_from_minor_1() {
    use relay_protocol::{Capability, PROTOCOL_MINOR};
    // `Open` (0x001B) / `Opened` (0x801B) came with protocol 1.1 and are gated by "open".
    const { assert!(PROTOCOL_MINOR >= 1, "Open needs minor 1") };
    assert!(Capability::all().contains(&Capability(Capability::OPEN.into())));
    assert_eq!(Op::from_code(0x001B), Some(Op::Open));
    assert_eq!(Op::from_code(0x801B), Some(Op::Opened));
}

#[test]
fn input_seq_is_advertised_from_minor_2() {
    use relay_protocol::{Capability, PROTOCOL_MINOR};
    // `InputSeq` (0x001C, answered by `Done`) came with protocol 1.2 and is gated by "input-seq".
    const { assert!(PROTOCOL_MINOR >= 2, "InputSeq needs minor 2") };
    assert_eq!(Capability::INPUT_SEQ, "input-seq");
    assert!(Capability::all().contains(&Capability(Capability::INPUT_SEQ.into())));
    assert_eq!(Op::from_code(0x001C), Some(Op::InputSeq));
}

#[test]
fn screen_is_advertised_from_minor_3() {
    use relay_protocol::{Capability, PROTOCOL_MINOR};
    // Screen-aware attach/open, snapshots and events came with protocol 1.3, gated by "screen".
    const { assert!(PROTOCOL_MINOR >= 3, "AttachScreen needs minor 3") };
    assert_eq!(Capability::SCREEN, "screen");
    assert!(Capability::all().contains(&Capability(Capability::SCREEN.into())));
    for (code, op) in [
        (0x001D, Op::AttachScreen),
        (0x001E, Op::OpenScreen),
        (0x801D, Op::ScreenAttached),
        (0x801E, Op::ScreenOpened),
        (0x4004, Op::Snapshot),
        (0x4005, Op::Event),
    ] {
        assert_eq!(Op::from_code(code), Some(op));
    }
}

#[test]
fn upgrade_is_advertised_from_minor_5() {
    use relay_protocol::{Capability, PROTOCOL_MINOR};
    // Live upgrade and `ErrorReply::UpgradeRefused` came with protocol 1.5, gated by "upgrade".
    const { assert!(PROTOCOL_MINOR >= 5, "Upgrade needs minor 5") };
    assert_eq!(Capability::UPGRADE, "upgrade");
    assert!(Capability::all().contains(&Capability(Capability::UPGRADE.into())));
    for (code, op) in [
        (0x0024, Op::UpgradeInfo),
        (0x0025, Op::Upgrade),
        (0x8024, Op::UpgradeReport),
        (0x8025, Op::UpgradeStarted),
    ] {
        assert_eq!(Op::from_code(code), Some(op));
    }
}

#[test]
fn lossless_is_advertised_from_minor_6() {
    use relay_protocol::{Capability, PROTOCOL_MINOR};
    // Lossless delivery came with protocol 1.6, gated by "lossless".
    const { assert!(PROTOCOL_MINOR >= 6, "OpenLossless needs minor 6") };
    assert_eq!(Capability::LOSSLESS, "lossless");
    assert!(Capability::all().contains(&Capability(Capability::LOSSLESS.into())));
    assert_eq!(Op::from_code(0x0026), Some(Op::OpenLossless));
    assert_eq!(Op::from_code(0x0027), Some(Op::AttachLossless));
}

#[test]
fn window_growth_is_advertised_from_minor_8() {
    use relay_protocol::{Capability, PROTOCOL_MINOR};
    // Growing lossless windows came with protocol 1.8, gated by "window-growth" (no new op).
    const { assert!(PROTOCOL_MINOR >= 8, "window-growth needs minor 8") };
    assert_eq!(Capability::WINDOW_GROWTH, "window-growth");
    assert!(Capability::all().contains(&Capability(Capability::WINDOW_GROWTH.into())));
}

#[test]
fn lifecycle_is_advertised_from_minor_4() {
    use relay_protocol::{Capability, PROTOCOL_MINOR};
    // The lifecycle ops and `EndReason::Forgotten` came with protocol 1.4, gated by "lifecycle".
    const { assert!(PROTOCOL_MINOR >= 4, "SetPolicy needs minor 4") };
    assert_eq!(Capability::LIFECYCLE, "lifecycle");
    assert!(Capability::all().contains(&Capability(Capability::LIFECYCLE.into())));
    for (code, op) in [
        (0x001F, Op::SetPolicy),
        (0x0020, Op::Inspect),
        (0x0021, Op::End),
        (0x0022, Op::Replace),
        (0x0023, Op::Forget),
        (0x8020, Op::Inspected),
        (0x8021, Op::EndReport),
        (0x8023, Op::Forgot),
    ] {
        assert_eq!(Op::from_code(code), Some(op));
    }
}
