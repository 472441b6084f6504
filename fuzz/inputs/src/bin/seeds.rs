//! Writes the seed corpora of every fuzz target, built from the golden vectors of
//! `protocol/golden` (one sample of every message), into `DIR/<target>/`:
//!
//! ```text
//! cargo run --manifest-path fuzz/Cargo.toml -p relay-fuzz-inputs --bin seeds -- DIR
//! ```
//!
//! `fuzz/run.sh` does this before every run, so the seeds follow the golden table.

use std::path::{Path, PathBuf};

use relay_fuzz_inputs::{AgentInput, BodyInput, FrameInput, HELLO_ID, PLACEHOLDER_INCARNATION};
use relay_protocol::message::{
    Ack, Attach, AttachScreen, Create, Detach, End, EndWhen, Forget, Input, InputSeq, Inspect,
    Kill, ListLeases, ListWorkspace, Open, OpenScreen, Ping, Protect, Replace, Resize, SetPolicy,
    Signal, StatusRequest,
};
use relay_protocol::{
    Binding, Envelope, Message, PaneKey, PtyId, Request, Resume, SpawnSpec, TermSize, WorkspaceId,
};

fn main() -> std::io::Result<()> {
    let Some(dir) = std::env::args_os().nth(1).map(PathBuf::from) else {
        eprintln!("usage: seeds DIR (writes DIR/frame, DIR/message, DIR/body, DIR/agent)");
        std::process::exit(2);
    };
    assert_eq!(
        relay_protocol_golden::INCARNATION,
        PLACEHOLDER_INCARNATION,
        "the agent target's placeholder is the golden vectors' incarnation"
    );
    let cases = relay_protocol_golden::cases();
    let mut all_frames = Vec::new();
    for case in &cases {
        let bytes = case.bytes();
        let name = &format!("golden-{}", case.name);
        let env = Envelope::from_bytes(&bytes).expect("golden bytes are an envelope");
        let op = relay_protocol::Op::from_code(env.op).expect("golden ops are known");
        write(&dir, "message", name, &bytes)?;
        write(&dir, "body", name, &BodyInput::build(op, env.id, &env.body))?;
        write(&dir, "frame", name, &FrameInput::build(0, &frame(&bytes)))?;
        all_frames.extend(frame(&bytes));
        if let Message::Request(_, request) = &case.message {
            if !matches!(request, Request::Hello(_)) {
                write(&dir, "agent", name, &AgentInput::build(&frame(&bytes)))?;
            }
        }
    }
    write(
        &dir,
        "frame",
        "all_in_7_byte_pieces",
        &FrameInput::build(7, &all_frames),
    )?;

    let script = session_script();
    write(&dir, "agent", "script", &AgentInput::build(&script))?;
    // Mode 0: a Hello without credit or lifecycle (output not windowed, replies downgraded).
    write(&dir, "agent", "script_no_capabilities", &{
        let mut input = vec![0];
        input.extend_from_slice(&script);
        input
    })?;
    write(&dir, "agent", "flood", &AgentInput::build(&flood_script()))?;
    let hello = cases.iter().find(|c| c.name == "hello").expect("a hello");
    let ping = cases.iter().find(|c| c.name == "ping").expect("a ping");
    let mut raw = frame(&hello.bytes());
    raw.extend(frame(&ping.bytes()));
    write(
        &dir,
        "agent",
        "raw_hello_ping",
        &AgentInput::build_raw(&raw),
    )?;
    Ok(())
}

fn write(dir: &Path, target: &str, name: &str, bytes: &[u8]) -> std::io::Result<()> {
    let dir = dir.join(target);
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join(name), bytes)
}

/// One frame: `u32` big-endian length, then the body.
fn frame(body: &[u8]) -> Vec<u8> {
    let mut out = (body.len() as u32).to_be_bytes().to_vec();
    out.extend_from_slice(body);
    out
}

fn pane(leaf: &str) -> PaneKey {
    PaneKey::new("api", "t1", leaf)
}

/// PTY `counter` of the agent under test (the target swaps in its incarnation).
fn pty(counter: u64) -> PtyId {
    PtyId {
        incarnation: PLACEHOLDER_INCARNATION,
        counter,
    }
}

fn binding(leaf: &str, counter: u64) -> Binding {
    Binding {
        pane: pane(leaf),
        pty: pty(counter),
    }
}

fn spec() -> SpawnSpec {
    SpawnSpec {
        command: vec!["sh".into()],
        size: TermSize { cols: 80, rows: 24 },
        ..SpawnSpec::default()
    }
}

/// Frames of `requests`, numbered from 2 (1 is the driver's Hello).
fn frames(requests: Vec<Request>) -> Vec<u8> {
    let mut out = Vec::new();
    for (i, request) in requests.into_iter().enumerate() {
        out.extend(frame(
            &Message::Request(HELLO_ID + 1 + i as u64, request).to_bytes(),
        ));
    }
    out
}

/// Every request kind on one connection, in an order that finds a live PTY: the first create
/// mints PTY 1 of the pane `l1`, the replace PTY 2, the open and open-screen PTYs 3 and 4.
fn session_script() -> Vec<u8> {
    let mut script = frames(vec![
        Request::Create(Create {
            pane: pane("l1"),
            spec: spec(),
        }),
        Request::Attach(Attach {
            pane: pane("l1"),
            expect: Some(pty(1)),
            resume_from: Some(0),
        }),
        Request::Input(Input {
            binding: binding("l1", 1),
            data: b"hello\r".to_vec(),
        }),
        Request::InputSeq(InputSeq {
            binding: binding("l1", 1),
            writer: 1,
            seq: 1,
            data: b"\x1b]0;title\x07\x1b[?1049h\r".to_vec(),
        }),
        Request::Resize(Resize {
            binding: binding("l1", 1),
            size: TermSize {
                cols: 100,
                rows: 30,
            },
        }),
        Request::Ack(Ack {
            pty: pty(1),
            offset: 6,
        }),
        Request::Protect(Protect {
            binding: binding("l1", 1),
            protected: true,
        }),
        Request::ListLeases(ListLeases {}),
        Request::ListWorkspace(ListWorkspace {
            workspace: WorkspaceId("w".into()),
        }),
        Request::Status(StatusRequest {}),
        Request::SetPolicy(SetPolicy {
            spec: "unused=10m;idle=off".into(),
        }),
        Request::Inspect(Inspect {}),
        Request::AttachScreen(AttachScreen {
            pane: pane("l1"),
            expect: Some(pty(1)),
            resume: Resume::Snapshot,
            events_after: 0,
        }),
        Request::Signal(Signal {
            binding: binding("l1", 1),
            signal: 28,
        }),
        Request::Detach(Detach {
            binding: binding("l1", 1),
        }),
        Request::Replace(Replace {
            old: binding("l1", 1),
            spec: spec(),
        }),
        Request::Open(Open {
            pane: pane("l2"),
            spec: spec(),
            resume_from: None,
        }),
        Request::OpenScreen(OpenScreen {
            pane: pane("l3"),
            spec: spec(),
            resume: Resume::Now,
            events_after: 0,
        }),
        Request::OpenLossless(Open {
            pane: pane("l4"),
            spec: spec(),
            resume_from: Some(0),
        }),
        Request::AttachLossless(Attach {
            pane: pane("l4"),
            expect: Some(pty(4)),
            resume_from: Some(0),
        }),
        Request::End(End {
            targets: vec![binding("l1", 1), binding("l2", 3)],
            when: EndWhen::Always,
        }),
        Request::Kill(Kill {
            binding: binding("l1", 2),
        }),
        Request::Forget(Forget { ptys: Vec::new() }),
        Request::Ping(Ping { nonce: 7 }),
    ]);
    // An op this build does not know: answered `Unsupported`, the connection stays.
    script.extend(frame(
        &Envelope {
            id: 99,
            op: 0x0fff,
            body: Vec::new(),
        }
        .to_bytes(),
    ));
    script
}

/// A PTY that echoes more than the credit window and the replay ring of the target's agent.
fn flood_script() -> Vec<u8> {
    let line: Vec<u8> = b"0123456789abcdefghijklmnopqrstuvwxyz\r".repeat(400);
    frames(vec![
        Request::Open(Open {
            pane: pane("flood"),
            spec: spec(),
            resume_from: Some(0),
        }),
        Request::Input(Input {
            binding: binding("flood", 1),
            data: line.clone(),
        }),
        Request::Input(Input {
            binding: binding("flood", 1),
            data: line,
        }),
        Request::Ack(Ack {
            pty: pty(1),
            offset: 4096,
        }),
        Request::AttachScreen(AttachScreen {
            pane: pane("flood"),
            expect: Some(pty(1)),
            resume: Resume::From(1),
            events_after: 0,
        }),
    ])
}
