//! The golden table of the wire format, shared by `protocol/tests/golden.rs`,
//! `protocol/tests/malformed.rs` and the fuzz seeds: one deterministic sample of every message and
//! the exact bytes it must encode to.
//!
//! Expected bytes are written as hex in four space-separated groups, `id op len body`: the
//! envelope's request id (varint), op code (varint), body length (varint), then the postcard body.
//! Spaces carry no meaning for the comparison; inside the body they separate fields where that
//! helps reading.
//!
//! These literals were produced once by the encoder, checked by hand, and frozen. If a test fails
//! because one of them changed, the wire shape changed: that needs a new op code or a major version
//! (see `docs/protocol.md`), not a new literal.

mod errors;
mod lifecycle;
mod lossless;
mod pushes;
mod responses;
mod upgrade;

use relay_protocol::message::{
    Ack, Attach, AttachScreen, Attached, Create, Created, Detach, Done, Event, Exited, Input,
    InputSeq, Kill, LeaseCounts, Leases, ListLeases, Open, OpenScreen, Opened, Output, OutputGap,
    Ping, Pong, Protect, Resize, ScreenAttached, ScreenOpened, Signal, Snapshot, Status,
    StatusRequest,
};
use relay_protocol::{
    Binding, Capability, EndReason, ErrorReply, ExitStatus, Hello, Incarnation, LeaseInfo,
    LeaseState, Limits, Message, PaneKey, PtyId, Push, Request, Response, Resume, ScreenEvent,
    SpawnSpec, TermSize, Welcome, MAGIC,
};

/// One row of the golden table.
pub struct Golden {
    /// Unique, human-readable name of the sample.
    pub name: &'static str,
    /// The message.
    pub message: Message,
    /// Its frame body as hex (whitespace ignored).
    pub hex: &'static str,
}

impl Golden {
    /// The expected bytes.
    pub fn bytes(&self) -> Vec<u8> {
        let compact: String = self.hex.split_whitespace().collect();
        hex::decode(&compact).unwrap_or_else(|e| panic!("{}: bad hex literal: {e}", self.name))
    }
}

fn golden(name: &'static str, message: Message, hex: &'static str) -> Golden {
    Golden { name, message, hex }
}

/// Incarnation used by every sample: large enough to need a 9-byte varint.
pub const INCARNATION: Incarnation = Incarnation(0x0123_4567_89ab_cdef);

fn pane() -> PaneKey {
    PaneKey::new("api", "t1", "l2")
}

fn pty(counter: u64) -> PtyId {
    PtyId {
        incarnation: INCARNATION,
        counter,
    }
}

fn binding() -> Binding {
    Binding {
        pane: pane(),
        pty: pty(7),
    }
}

/// 200 columns needs a 2-byte varint, 50 rows a 1-byte one.
fn size() -> TermSize {
    TermSize {
        cols: 200,
        rows: 50,
    }
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

fn caps(items: &[&str]) -> Vec<Capability> {
    items.iter().map(|s| Capability(s.to_string())).collect()
}

fn req(id: u64, r: Request) -> Message {
    Message::Request(id, r)
}

fn resp(id: u64, r: Response) -> Message {
    Message::Response(id, r)
}

fn err(id: u64, e: ErrorReply) -> Message {
    Message::Response(id, Response::Error(e))
}

fn push(p: Push) -> Message {
    Message::Push(p)
}

fn lease(pty_counter: u64, state: LeaseState) -> LeaseInfo {
    LeaseInfo {
        binding: Binding {
            pane: pane(),
            pty: pty(pty_counter),
        },
        state,
        pid: None,
        since_ms: 1_700_000_000_000,
        last_output_ms: None,
        bytes_out: 0,
        command: Vec::new(),
        exit: None,
        reason: None,
        protected: false,
        attached: 0,
        size: TermSize::default(),
    }
}

/// Every sample, in op-code order.
pub fn cases() -> Vec<Golden> {
    [
        // ---- requests ----
        golden(
            "hello",
            req(
                1,
                Request::Hello(Hello {
                    magic: MAGIC,
                    major: 1,
                    minor: 0,
                    client_id: "app-1".into(),
                    client_version: "0.1.0".into(),
                    capabilities: caps(&[
                        Capability::PTY,
                        Capability::CREDIT,
                        Capability::PROTECT,
                        Capability::STATUS,
                    ]),
                    max_frame: 1024 * 1024,
                }),
            ),
            concat!(
                "01 01 31 d982b19205 01 00 056170702d31 05302e312e30 04 ",
                "03707479 06637265646974 0770726f74656374 06737461747573 ",
                "808040",
            ),
        ),
        golden(
            "ping",
            req(2, Request::Ping(Ping { nonce: 0xfeed })),
            "02 02 03 edfd03",
        ),
        golden(
            "create",
            req(
                3,
                Request::Create(Create {
                    pane: pane(),
                    spec: SpawnSpec {
                        command: strings(&["bash", "-l"]),
                        cwd: Some("/home/u/proj".into()),
                        term: None,
                        size: size(),
                        env: vec![("LANG".into(), "C.UTF-8".into())],
                    },
                }),
            ),
            concat!(
                "03 10 33 03617069027431026c32 02 0462617368 022d6c ",
                "010c2f686f6d652f752f70726f6a 00 c80132 01 044c414e47 ",
                "07432e5554462d38",
            ),
        ),
        golden(
            "create_default_spec",
            req(
                3,
                Request::Create(Create {
                    pane: pane(),
                    spec: SpawnSpec::default(),
                }),
            ),
            "03 10 10 03617069027431026c32 00 00 00 5018 00",
        ),
        golden(
            "attach_resume",
            req(
                4,
                Request::Attach(Attach {
                    pane: pane(),
                    expect: Some(pty(7)),
                    resume_from: Some(300),
                }),
            ),
            "04 11 18 03617069027431026c32 01ef9bafcdf8acd1910107 01ac02",
        ),
        golden(
            "attach_from_now",
            req(
                5,
                Request::Attach(Attach {
                    pane: pane(),
                    expect: None,
                    resume_from: None,
                }),
            ),
            "05 11 0c 03617069027431026c32 00 00",
        ),
        golden(
            "input",
            req(
                6,
                Request::Input(Input {
                    binding: binding(),
                    data: b"ls\r".to_vec(),
                }),
            ),
            "06 12 18 03617069027431026c32ef9bafcdf8acd1910107 036c730d",
        ),
        golden(
            "resize",
            req(
                7,
                Request::Resize(Resize {
                    binding: binding(),
                    size: TermSize {
                        cols: 100,
                        rows: 30,
                    },
                }),
            ),
            "07 13 16 03617069027431026c32ef9bafcdf8acd1910107 641e",
        ),
        golden(
            "signal",
            req(
                8,
                Request::Signal(Signal {
                    binding: binding(),
                    signal: 2,
                }),
            ),
            "08 14 15 03617069027431026c32ef9bafcdf8acd1910107 04",
        ),
        golden(
            "kill",
            req(9, Request::Kill(Kill { binding: binding() })),
            "09 15 14 03617069027431026c32ef9bafcdf8acd1910107",
        ),
        golden(
            "detach",
            req(10, Request::Detach(Detach { binding: binding() })),
            "0a 16 14 03617069027431026c32ef9bafcdf8acd1910107",
        ),
        golden(
            "list_leases",
            req(11, Request::ListLeases(ListLeases {})),
            "0b 17 00",
        ),
        golden(
            "ack",
            req(
                12,
                Request::Ack(Ack {
                    pty: pty(7),
                    offset: 65_536,
                }),
            ),
            "0c 18 0d ef9bafcdf8acd1910107 808004",
        ),
        golden(
            "status",
            req(13, Request::Status(StatusRequest {})),
            "0d 19 00",
        ),
        golden(
            "protect",
            req(
                300,
                Request::Protect(Protect {
                    binding: binding(),
                    protected: true,
                }),
            ),
            "ac02 1a 15 03617069027431026c32ef9bafcdf8acd1910107 01",
        ),
        golden(
            "open",
            req(
                16,
                Request::Open(Open {
                    pane: pane(),
                    spec: SpawnSpec {
                        command: strings(&["sh", "-c", "make test"]),
                        cwd: None,
                        term: None,
                        size: size(),
                        env: vec![],
                    },
                    resume_from: Some(0),
                }),
            ),
            concat!(
                "10 1b 23 03617069027431026c32 03 027368 022d63 096d616b652074657374 ",
                "00 00 c80132 00 0100",
            ),
        ),
        golden(
            "open_from_now",
            req(
                17,
                Request::Open(Open {
                    pane: pane(),
                    spec: SpawnSpec::default(),
                    resume_from: None,
                }),
            ),
            "11 1b 11 03617069027431026c32 00 00 00 5018 00 00",
        ),
        golden(
            "input_seq",
            req(
                18,
                Request::InputSeq(InputSeq {
                    binding: binding(),
                    writer: 0xfedc_ba98_7654_3210,
                    seq: 300,
                    data: b"ls\r".to_vec(),
                }),
            ),
            concat!(
                "12 1c 24 03617069027431026c32ef9bafcdf8acd1910107 90e4d0b287d3aeeefe01 ac02 ",
                "036c730d",
            ),
        ),
        golden(
            "input_seq_empty",
            req(
                19,
                Request::InputSeq(InputSeq {
                    binding: binding(),
                    writer: 7,
                    seq: 1,
                    data: Vec::new(),
                }),
            ),
            "13 1c 17 03617069027431026c32ef9bafcdf8acd1910107 07 01 00",
        ),
        golden(
            "attach_screen_from",
            req(
                20,
                Request::AttachScreen(AttachScreen {
                    pane: pane(),
                    expect: Some(pty(7)),
                    resume: Resume::From(300),
                    events_after: 5,
                }),
            ),
            "14 1d 19 03617069027431026c32 01ef9bafcdf8acd1910107 01ac02 05",
        ),
        golden(
            "attach_screen_snapshot",
            req(
                21,
                Request::AttachScreen(AttachScreen {
                    pane: pane(),
                    expect: None,
                    resume: Resume::Snapshot,
                    events_after: 0,
                }),
            ),
            "15 1d 0d 03617069027431026c32 00 02 00",
        ),
        golden(
            "attach_screen_now",
            req(
                22,
                Request::AttachScreen(AttachScreen {
                    pane: pane(),
                    expect: None,
                    resume: Resume::Now,
                    events_after: 0,
                }),
            ),
            "16 1d 0d 03617069027431026c32 00 00 00",
        ),
        golden(
            "open_screen",
            req(
                23,
                Request::OpenScreen(OpenScreen {
                    pane: pane(),
                    spec: SpawnSpec::default(),
                    resume: Resume::From(0),
                    events_after: 0,
                }),
            ),
            "17 1e 13 03617069027431026c32 000000501800 0100 00",
        ),
    ]
    .into_iter()
    .chain(responses::response_cases())
    .chain(errors::error_cases())
    .chain(lifecycle::lifecycle_cases())
    .chain(upgrade::upgrade_cases())
    .chain(lossless::lossless_cases())
    .chain(pushes::push_cases())
    .collect()
}
