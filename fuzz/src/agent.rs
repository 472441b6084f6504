//! The `agent` target's driver: one fresh, real agent per input, and a peer that plays the
//! input's frames to it one request at a time.
//!
//! Per input: a new [`State`] (journal in a new temp dir, under `/dev/shm` when there is one) on
//! a new tokio runtime, and [`connection::serve`] — the function the daemon's accept loop runs
//! for every connection — on one end of a Unix socket pair. So everything after `accept` is the
//! agent's own code: hello checks, the read loop, [`dispatch`](relay_agent::daemon::dispatch),
//! sessions, subscriptions, the lease book, the journal, PTYs and their terminal models. The
//! daemon's process plumbing (fork, lock file, socket path, `SO_PEERCRED`) is not exercised.
//!
//! The peer splits the input into frames as the agent does and sends them one at a time,
//! waiting for the reply of each request that gets one (so a create has finished before the
//! input's next request, as with a real connector). It checks that:
//! - every request that should be answered is answered within [`REPLY_TIMEOUT`] (rule H: an
//!   unknown op gets `Unsupported`, never silence);
//! - everything the agent sends decodes, is a response or a push, and answers an id that was
//!   sent;
//! - input the agent must refuse (not a Hello first, a response, id 0, undecodable, oversized,
//!   truncated) closes the connection, and the agent ends the connection after the peer's EOF;
//! - nothing panics, in any thread (libFuzzer's panic hook aborts the process).
//!
//! Three bounds make this safe and fast enough to fuzz (the third: an `Upgrade` always names a
//! binary that does not exist, since the agent runs the binary it is given to probe it):
//! - **Spawning.** Every create, open and replace that would reach the spawn runs
//!   [`SPAWNED_PROGRAM`] (`/bin/cat`, which only echoes its input) instead of the requested
//!   command, and without `LD_*` variables; cwd, `TERM`, size and the rest of the environment are
//!   the input's. A request whose pane or spec the agent's limits refuse is sent unchanged, as the
//!   agent refuses those before spawning. So the spawn path (the agent's PTY spawn, reader,
//!   writer and waiter tasks, ring, screen model) is real, but no input runs a program of its choice.
//! - **Identity.** PTY ids carry a random incarnation per agent start, which no input can know:
//!   the peer replaces [`PLACEHOLDER_INCARNATION`] (the golden vectors') in every request with the
//!   agent's, so seeds and mutations can name live PTYs (the agent mints counters from 1).
//!
//! Timings are shortened (kill grace 100 ms, replay ring 16 KiB, credit window 4 KiB) so ends,
//! wraps and windows happen within an input. An input's PTYs are ended by [`State::shutdown`] and
//! its runtime dropped before the next input starts.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use bytes::BytesMut;
use futures_util::StreamExt;
use relay_agent::config::Config;
use relay_agent::daemon::connection;
use relay_agent::limits;
use relay_agent::state::State;
use relay_fuzz_inputs::{AgentInput, HELLO_ID, PLACEHOLDER_INCARNATION};
use relay_protocol::frame::FrameError;
use relay_protocol::{
    Binding, DecodeError, FrameCodec, Incarnation, Message, PaneKey, PtyId, Request, SpawnSpec,
    DEFAULT_MAX_FRAME,
};
use tokio::io::AsyncWriteExt;
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::UnixStream;
use tokio_util::codec::{Decoder, FramedRead};
use tokio_util::sync::CancellationToken;

/// The program every spawn runs, whatever the request asked for.
pub const SPAWNED_PROGRAM: &str = "/bin/cat";

/// How long a reply (or the close of the connection) may take before the input is a finding.
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(10);

/// SIGHUP → SIGKILL grace of the agent under test (the daemon's default is 3 s).
const KILL_GRACE: Duration = Duration::from_millis(100);

/// Runs one input against a fresh agent.
pub fn run(input: AgentInput<'_>) {
    let dir = tempfile::Builder::new()
        .prefix("relay-fuzz-agent-")
        .tempdir_in(scratch())
        .expect("a temp dir for the agent's journal");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    runtime.block_on(session(dir.path(), input));
    runtime.shutdown_timeout(Duration::from_secs(1));
}

/// `/dev/shm` when it is a writable directory (journal appends without a disk), else the
/// system's temp dir.
fn scratch() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let shm = PathBuf::from("/dev/shm");
        match tempfile::tempdir_in(&shm) {
            Ok(_) => shm,
            Err(_) => std::env::temp_dir(),
        }
    })
}

fn config() -> Config {
    Config {
        replay_bytes: 16 * 1024,
        window: 4096,
        kill_grace: KILL_GRACE,
        exit_output_grace: Duration::from_millis(50),
        max_pending_input: 64 * 1024,
        scrollback_lines: Some(100),
        ..Config::default()
    }
}

async fn session(dir: &Path, input: AgentInput<'_>) {
    let (state, _) =
        State::open(config(), &dir.join("journal")).expect("a journal in a new dir opens");
    let incarnation = state.incarnation();
    let (ours, theirs) = UnixStream::pair().expect("a socket pair");
    let server = tokio::spawn(connection::serve(
        theirs,
        state.clone(),
        CancellationToken::new(),
    ));
    let (rd, mut wr) = ours.into_split();
    let mut peer = Peer {
        // The agent never sends more than the peer's max_frame; a raw Hello may announce more.
        replies: FramedRead::new(rd, FrameCodec::new(u32::MAX)),
        sent: HashSet::new(),
        closed: false,
    };

    let mut first = true;
    if let Some(hello) = input.hello {
        let bytes = Message::Request(HELLO_ID, Request::Hello(hello)).to_bytes();
        peer.play(&mut wr, &bytes, Expect::Reply(HELLO_ID)).await;
        first = false;
    }
    // Split as the agent's own codec does; what is left (a truncated or oversized frame) goes
    // out as it is.
    let mut codec = FrameCodec::new(DEFAULT_MAX_FRAME);
    let mut rest = BytesMut::from(input.stream);
    while !peer.closed {
        let Ok(Some(frame)) = codec.decode(&mut rest) else {
            break;
        };
        let (bytes, expect) = prepare(&frame, incarnation, first);
        first = false;
        peer.play(&mut wr, &bytes, expect).await;
    }
    if !peer.closed {
        let _ = wr.write_all(&rest).await;
    }
    let _ = wr.shutdown().await;
    peer.await_close("after the peer's EOF").await;
    match tokio::time::timeout(REPLY_TIMEOUT, server).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => panic!("the connection task failed: {e}"),
        Err(_) => panic!("the connection task did not end within {REPLY_TIMEOUT:?} of EOF"),
    }
    state.shutdown(KILL_GRACE).await;
}

/// What the agent must do after a frame.
#[derive(Debug, Clone, Copy)]
enum Expect {
    /// Answer request `id`.
    Reply(u64),
    /// Nothing (an `Ack`, an unknown op with id 0).
    Nothing,
    /// Close the connection.
    Close,
}

/// The bytes to send for `frame` (changed only as the module docs say) and what must follow.
fn prepare(frame: &[u8], incarnation: Incarnation, first: bool) -> (Vec<u8>, Expect) {
    let unchanged = |expect| (frame.to_vec(), expect);
    match Message::from_bytes(frame) {
        Ok(Message::Request(id, Request::Hello(_))) if first => unchanged(Expect::Reply(id)),
        _ if first => unchanged(Expect::Close),
        // Id 0 is for pushes; the agent answers no request under it (an `Ack` needs no answer).
        Ok(Message::Request(0, request)) if !matches!(request, Request::Ack(_)) => {
            unchanged(Expect::Close)
        }
        Ok(Message::Request(id, request)) => {
            let expect = match request {
                Request::Ack(_) => Expect::Nothing,
                _ => Expect::Reply(id),
            };
            let mut fixed = request.clone();
            confine(&mut fixed, incarnation);
            if fixed == request {
                unchanged(expect)
            } else {
                (Message::Request(id, fixed).to_bytes(), expect)
            }
        }
        Ok(_) => unchanged(Expect::Close),
        Err(DecodeError::UnknownOp { id: 0, .. }) => unchanged(Expect::Nothing),
        Err(DecodeError::UnknownOp { id, .. }) => unchanged(Expect::Reply(id)),
        Err(_) => unchanged(Expect::Close),
    }
}

/// Applies the bounds of the module docs to a request. Exhaustive on purpose: a new request
/// does not compile here until it is decided whether it can spawn or names a PTY.
fn confine(request: &mut Request, incarnation: Incarnation) {
    let inc = incarnation;
    match request {
        Request::Create(c) => confine_spawn(&c.pane, &mut c.spec),
        Request::Open(o) => confine_spawn(&o.pane, &mut o.spec),
        Request::OpenScreen(o) => confine_spawn(&o.pane, &mut o.spec),
        Request::OpenLossless(o) => confine_spawn(&o.pane, &mut o.spec),
        Request::Replace(r) => {
            rebind(&mut r.old, inc);
            confine_spawn(&r.old.pane, &mut r.spec);
        }
        Request::Attach(a) => a.expect.iter_mut().for_each(|p| rebind_pty(p, inc)),
        Request::AttachScreen(a) => a.expect.iter_mut().for_each(|p| rebind_pty(p, inc)),
        Request::AttachLossless(a) => a.expect.iter_mut().for_each(|p| rebind_pty(p, inc)),
        Request::Input(r) => rebind(&mut r.binding, inc),
        Request::InputSeq(r) => rebind(&mut r.binding, inc),
        Request::Resize(r) => rebind(&mut r.binding, inc),
        Request::Signal(r) => rebind(&mut r.binding, inc),
        Request::Kill(r) => rebind(&mut r.binding, inc),
        Request::Detach(r) => rebind(&mut r.binding, inc),
        Request::Protect(r) => rebind(&mut r.binding, inc),
        Request::Ack(r) => rebind_pty(&mut r.pty, inc),
        Request::End(e) => e.targets.iter_mut().for_each(|b| rebind(b, inc)),
        Request::Forget(f) => f.ptys.iter_mut().for_each(|p| rebind_pty(p, inc)),
        // The agent runs the named binary to probe it: never let fuzzed bytes pick a program.
        // The rules and the refusal paths still run (the probe of a missing binary fails).
        Request::Upgrade(u) => u.to = Some(MISSING_AGENT.to_string()),
        Request::Hello(_)
        | Request::UpgradeInfo(_)
        | Request::Ping(_)
        | Request::ListLeases(_)
        | Request::ListWorkspace(_)
        | Request::Status(_)
        | Request::SetPolicy(_)
        | Request::Inspect(_) => {}
    }
}

/// What a fuzzed `Upgrade` names: no such file.
const MISSING_AGENT: &str = "/nonexistent/relay-fuzz/relay-agent";

/// Runs [`SPAWNED_PROGRAM`] instead of the requested command. A pane or spec over the agent's
/// limits is left alone: `State::gated` refuses those before anything is spawned.
fn confine_spawn(pane: &PaneKey, spec: &mut SpawnSpec) {
    if limits::check_pane(pane).is_err() || limits::check_spec(spec).is_err() {
        return;
    }
    spec.command = vec![SPAWNED_PROGRAM.to_string()];
    spec.env.retain(|(name, _)| !name.starts_with("LD_"));
}

fn rebind(binding: &mut Binding, incarnation: Incarnation) {
    rebind_pty(&mut binding.pty, incarnation);
}

fn rebind_pty(pty: &mut PtyId, incarnation: Incarnation) {
    if pty.incarnation == PLACEHOLDER_INCARNATION {
        pty.incarnation = incarnation;
    }
}

/// The connector's side of the socket pair.
struct Peer {
    replies: FramedRead<OwnedReadHalf, FrameCodec>,
    /// Request ids sent so far (replies must answer one of them).
    sent: HashSet<u64>,
    /// The agent closed the connection.
    closed: bool,
}

impl Peer {
    /// Sends one frame body and waits for what `expect` says.
    async fn play(&mut self, wr: &mut OwnedWriteHalf, body: &[u8], expect: Expect) {
        let mut frame = (body.len() as u32).to_be_bytes().to_vec();
        frame.extend_from_slice(body);
        if let Expect::Reply(id) = expect {
            self.sent.insert(id);
        }
        if wr.write_all(&frame).await.is_err() {
            // The agent closed first (it refused an earlier frame, or is closing): see why.
            self.await_close("after a failed write").await;
            return;
        }
        match expect {
            Expect::Reply(id) => self.await_reply(id).await,
            Expect::Nothing => {}
            Expect::Close => self.await_close("after a frame it must refuse").await,
        }
    }

    async fn await_reply(&mut self, id: u64) {
        while !self.closed {
            match tokio::time::timeout(REPLY_TIMEOUT, self.next()).await {
                Err(_) => panic!("no reply to request {id} within {REPLY_TIMEOUT:?}"),
                Ok(Some(Message::Response(answered, _))) if answered == id => return,
                Ok(_) => {}
            }
        }
    }

    async fn await_close(&mut self, when: &str) {
        while !self.closed {
            if tokio::time::timeout(REPLY_TIMEOUT, self.next())
                .await
                .is_err()
            {
                panic!("the agent kept the connection open {when} for {REPLY_TIMEOUT:?}");
            }
        }
    }

    /// The agent's next message; `None` once the connection is closed.
    async fn next(&mut self) -> Option<Message> {
        let frame = match self.replies.next().await {
            None => {
                self.closed = true;
                return None;
            }
            // A Unix socket closed with unread input resets its peer: that is a close too.
            Some(Err(FrameError::Io(e))) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                self.closed = true;
                return None;
            }
            Some(Err(e)) => panic!("the agent sent a bad frame: {e}"),
            Some(Ok(frame)) => frame,
        };
        let message = Message::from_bytes(&frame)
            .unwrap_or_else(|e| panic!("the agent sent a frame it cannot decode itself: {e}"));
        match &message {
            Message::Response(id, _) => assert!(
                self.sent.contains(id),
                "the agent answered request {id}, which was never sent: {message:?}"
            ),
            Message::Push(_) => {}
            Message::Request(..) => panic!("the agent sent a request: {message:?}"),
        }
        Some(message)
    }
}
