//! The golden table shared by `golden.rs` and `malformed.rs`: one deterministic sample of every
//! message and the exact bytes it must encode to.
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
        // ---- responses ----
        golden("done", resp(6, Response::Done(Done {})), "06 808002 00"),
        golden(
            "welcome",
            resp(
                1,
                Response::Welcome(Welcome {
                    magic: MAGIC,
                    major: 1,
                    minor: 0,
                    agent_version: "0.1.0".into(),
                    incarnation: INCARNATION,
                    capabilities: caps(&[Capability::PTY, Capability::CREDIT]),
                    limits: Limits {
                        max_frame: 1024 * 1024,
                        window: 1024 * 1024,
                        max_chunk: 64 * 1024,
                        replay_bytes: 4 * 1024 * 1024,
                    },
                }),
            ),
            concat!(
                "01 818002 2f d982b19205 01 00 05302e312e30 ",
                "ef9bafcdf8acd19101 02 03707479 06637265646974 808040 808040 ",
                "808004 80808002",
            ),
        ),
        golden(
            "pong",
            resp(2, Response::Pong(Pong { nonce: 0xfeed })),
            "02 828002 03 edfd03",
        ),
        golden(
            "created",
            resp(
                3,
                Response::Created(Created {
                    binding: binding(),
                    existed: false,
                }),
            ),
            "03 908002 15 03617069027431026c32ef9bafcdf8acd1910107 00",
        ),
        golden(
            "attached",
            resp(
                4,
                Response::Attached(Attached {
                    binding: binding(),
                    replay_from: 300,
                    end_offset: 4096,
                    lost: 0,
                    size: size(),
                }),
            ),
            concat!(
                "04 918002 1c 03617069027431026c32ef9bafcdf8acd1910107 ac02 ",
                "8020 00 c80132",
            ),
        ),
        golden(
            "leases_attached_ended",
            resp(
                11,
                Response::Leases(Leases {
                    leases: vec![
                        LeaseInfo {
                            pid: Some(4100),
                            bytes_out: 10,
                            exit: Some(ExitStatus {
                                code: 0,
                                signal: None,
                            }),
                            reason: Some(EndReason::Exited),
                            ..lease(6, LeaseState::Ended)
                        },
                        LeaseInfo {
                            pid: Some(4242),
                            last_output_ms: Some(1_700_000_000_500),
                            bytes_out: 4096,
                            command: strings(&["bash", "-l"]),
                            protected: true,
                            attached: 2,
                            size: size(),
                            ..lease(7, LeaseState::Attached)
                        },
                    ],
                }),
            ),
            concat!(
                "0b 978002 62 02 03617069027431026c32ef9bafcdf8acd1910106 02 ",
                "018420 80d095ffbc31 00 0a 00 0100 00 0100 00 00 5018 ",
                "03617069027431026c32ef9bafcdf8acd1910107 00 019221 ",
                "80d095ffbc31 01f4d395ffbc31 8020 02 0462617368 022d6c 00 00 ",
                "01 02 c80132",
            ),
        ),
        golden(
            "leases_detached_superseded",
            resp(
                11,
                Response::Leases(Leases {
                    leases: vec![
                        lease(8, LeaseState::Detached),
                        lease(9, LeaseState::Superseded),
                    ],
                }),
            ),
            concat!(
                "0b 978002 4b 02 03617069027431026c32ef9bafcdf8acd1910108 01 ",
                "00 80d095ffbc31 00 00 00 00 00 00 00 5018 ",
                "03617069027431026c32ef9bafcdf8acd1910109 03 00 80d095ffbc31 ",
                "00 00 00 00 00 00 00 5018",
            ),
        ),
        golden(
            "leases_empty",
            resp(11, Response::Leases(Leases { leases: vec![] })),
            "0b 978002 01 00",
        ),
        golden(
            "status_reply",
            resp(
                13,
                Response::StatusReply(Status {
                    agent_version: "0.1.0".into(),
                    incarnation: INCARNATION,
                    pid: 4000,
                    started_ms: 1_700_000_000_000,
                    uptime_ms: 61_000,
                    leases: LeaseCounts {
                        attached: 1,
                        detached: 2,
                        ended: 3,
                        superseded: 0,
                    },
                    connections: 1,
                }),
            ),
            concat!(
                "0d 998002 1f 05302e312e30 ef9bafcdf8acd19101 a01f ",
                "80d095ffbc31 c8dc03 01 02 03 00 01",
            ),
        ),
        golden(
            "opened",
            resp(
                16,
                Response::Opened(Opened {
                    created: Created {
                        binding: binding(),
                        existed: false,
                    },
                    attached: Attached {
                        binding: binding(),
                        replay_from: 0,
                        end_offset: 12,
                        lost: 0,
                        size: size(),
                    },
                }),
            ),
            concat!(
                "10 9b8002 2f 03617069027431026c32ef9bafcdf8acd1910107 00 ",
                "03617069027431026c32ef9bafcdf8acd1910107 00 0c 00 c80132",
            ),
        ),
    ]
    .into_iter()
    .chain(errors::error_cases())
    .chain(push_cases())
    .collect()
}

/// Push samples (request id 0).
fn push_cases() -> Vec<Golden> {
    vec![
        // ---- pushes (request id 0) ----
        golden(
            "output",
            push(Push::Output(Output {
                pty: pty(7),
                offset: 300,
                data: b"hi\r\n".to_vec(),
            })),
            "00 818001 11 ef9bafcdf8acd1910107 ac02 0468690d0a",
        ),
        golden(
            "output_gap",
            push(Push::OutputGap(OutputGap {
                pty: pty(7),
                from: 300,
                to: 1024,
            })),
            "00 828001 0e ef9bafcdf8acd1910107 ac02 8008",
        ),
        golden(
            "exited",
            push(Push::Exited(Exited {
                binding: binding(),
                exit: ExitStatus {
                    code: 0,
                    signal: None,
                },
                reason: EndReason::Exited,
                event_key: 4096,
            })),
            concat!(
                "00 838001 19 03617069027431026c32ef9bafcdf8acd1910107 00 00 ",
                "00 8020",
            ),
        ),
        golden(
            "exited_killed",
            push(Push::Exited(Exited {
                binding: binding(),
                exit: ExitStatus {
                    code: 1,
                    signal: Some("Killed".into()),
                },
                reason: EndReason::Killed,
                event_key: 4096,
            })),
            concat!(
                "00 838001 20 03617069027431026c32ef9bafcdf8acd1910107 01 ",
                "01064b696c6c6564 01 8020",
            ),
        ),
        golden(
            "screen_attached",
            resp(
                20,
                Response::ScreenAttached(ScreenAttached {
                    attached: Attached {
                        binding: binding(),
                        replay_from: 5000,
                        end_offset: 5000,
                        lost: 4700,
                        size: size(),
                    },
                    snapshot: true,
                }),
            ),
            "14 9d8002 1e 03617069027431026c32ef9bafcdf8acd1910107 8827 8827 dc24 c80132 01",
        ),
        golden(
            "screen_opened",
            resp(
                23,
                Response::ScreenOpened(ScreenOpened {
                    created: Created {
                        binding: binding(),
                        existed: true,
                    },
                    attached: Attached {
                        binding: binding(),
                        replay_from: 0,
                        end_offset: 12,
                        lost: 0,
                        size: size(),
                    },
                    snapshot: false,
                }),
            ),
            "17 9e8002 30 03617069027431026c32ef9bafcdf8acd1910107 01 03617069027431026c32ef9bafcdf8acd1910107 00 0c 00 c80132 00",
        ),
        golden(
            "snapshot",
            push(Push::Snapshot(Snapshot {
                pty: pty(7),
                offset: 5000,
                size: size(),
                data: b"\x1b[Hhi".to_vec(),
                last: true,
            })),
            "00 848001 16 ef9bafcdf8acd1910107 8827 c80132 051b5b486869 01",
        ),
        golden(
            "event_bell",
            push(Push::Event(Event {
                pty: pty(7),
                key: 1,
                offset: 300,
                event: ScreenEvent::Bell,
            })),
            "00 858001 0e ef9bafcdf8acd1910107 01 ac02 00",
        ),
        golden(
            "event_title",
            push(Push::Event(Event {
                pty: pty(7),
                key: 2,
                offset: 300,
                event: ScreenEvent::Title("vim".into()),
            })),
            "00 858001 12 ef9bafcdf8acd1910107 02 ac02 01 0376696d",
        ),
        golden(
            "event_cwd",
            push(Push::Event(Event {
                pty: pty(7),
                key: 3,
                offset: 301,
                event: ScreenEvent::Cwd("file://h/tmp".into()),
            })),
            "00 858001 1b ef9bafcdf8acd1910107 03 ad02 02 0c66696c653a2f2f682f746d70",
        ),
        golden(
            "event_command_finished",
            push(Push::Event(Event {
                pty: pty(7),
                key: 4,
                offset: 302,
                event: ScreenEvent::CommandFinished { exit_code: Some(-1) },
            })),
            "00 858001 10 ef9bafcdf8acd1910107 04 ae02 03 0101",
        ),
        golden(
            "event_command_finished_no_code",
            push(Push::Event(Event {
                pty: pty(7),
                key: 5,
                offset: 302,
                event: ScreenEvent::CommandFinished { exit_code: None },
            })),
            "00 858001 0f ef9bafcdf8acd1910107 05 ae02 03 00",
        ),
    ]
}
