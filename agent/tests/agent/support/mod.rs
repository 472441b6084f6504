//! Helpers for agent integration tests: a temp `RELAY_HOME` whose processes end on drop, a
//! small raw-protocol client (over the Unix socket or a bridge's stdio), and the /proc probes of
//! `relay_testkit::procs`.
#![allow(dead_code)]
// The client returns the wire's `ErrorReply` so tests compare it directly.
#![allow(clippy::result_large_err)]

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use relay_protocol::message::*;
use relay_protocol::{
    Binding, ErrorReply, Hello, LeaseInfo, Message, PaneKey, PtyId, Push, Request, Response,
    SpawnSpec, TermSize, Welcome,
};
pub use relay_testkit::procs::{alive, children, pids_with, pids_with_arg};
use relay_testkit::TempHome;

/// The agent binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_relay-agent");
/// Default wait for anything the daemon should do promptly.
pub const WAIT: Duration = Duration::from_secs(10);

/// A private `RELAY_HOME` (a [`TempHome`]: every process of it ends when it drops).
pub struct Home {
    home: TempHome,
}

impl Home {
    /// A fresh home under /tmp (short, so the socket path fits).
    pub fn new() -> Home {
        Home {
            home: TempHome::new("ra-"),
        }
    }

    pub fn path(&self) -> &Path {
        self.home.path()
    }

    pub fn socket(&self) -> PathBuf {
        self.home.socket()
    }

    pub fn log(&self) -> String {
        self.home.log()
    }

    /// `relay-agent <args>` with this home (and [`TempHome::env`]), logging at debug level.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut c = self.home.command(Path::new(BIN));
        c.args(args).env("RELAY_LOG", "debug");
        c
    }

    /// Runs `relay-agent daemon` (it detaches and returns once listening).
    pub fn start_daemon(&self) {
        self.start_daemon_with(&[]);
    }

    /// Runs `relay-agent daemon` with extra environment variables.
    pub fn start_daemon_with(&self, env: &[(&str, &str)]) {
        let out = self
            .command(&["daemon"])
            .envs(env.iter().copied())
            .output()
            .expect("run daemon");
        assert!(
            out.status.success(),
            "daemon start failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// A client connected to the socket, after Hello/Welcome.
    pub fn client(&self) -> Client {
        Client::hello(Client::connect(self))
    }

    /// A bridge process (own process group) and a client over its stdio.
    pub fn bridge(&self) -> (Child, Client) {
        let (child, client, _) = self.bridge_over_pipes();
        (child, client)
    }

    /// [`Home::bridge`], and the inode numbers of the pipes that are its stdin and stdout.
    pub fn bridge_over_pipes(&self) -> (Child, Client, [u64; 2]) {
        let mut child = self
            .command(&["bridge"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .process_group(0)
            .spawn()
            .expect("spawn bridge");
        let w = child.stdin.take().unwrap();
        let r = child.stdout.take().unwrap();
        let inode = |fd: std::os::fd::BorrowedFd<'_>| nix::sys::stat::fstat(fd).unwrap().st_ino;
        let pipes = [inode(w.as_fd()), inode(r.as_fd())];
        (child, Client::hello(Client::over(r, w)), pipes)
    }

    /// Pids of `relay-agent daemon` processes running for this home.
    pub fn daemons(&self) -> Vec<u32> {
        self.home.pids_running("daemon")
    }

    /// Waits until agent.log contains `needle`.
    pub fn wait_log(&self, needle: &str) -> bool {
        wait_until(WAIT, || self.log().contains(needle))
    }
}

/// A raw protocol client. Pushes that arrive while waiting for a reply are buffered.
pub struct Client {
    w: Box<dyn Write + Send>,
    rx: mpsc::Receiver<Message>,
    next_id: u64,
    pushes: VecDeque<Push>,
    pub welcome: Option<Welcome>,
    closer: Option<UnixStream>,
}

impl Drop for Client {
    fn drop(&mut self) {
        if let Some(s) = &self.closer {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
    }
}

impl Client {
    /// A raw connected socket (no Hello).
    pub fn socket(home: &Home) -> UnixStream {
        UnixStream::connect(home.socket()).expect("connect to agent socket")
    }

    /// A client over the socket (no Hello yet); dropping it closes the connection.
    pub fn connect(home: &Home) -> Client {
        let s = Client::socket(home);
        let mut c = Client::over(s.try_clone().expect("clone socket"), s.try_clone().unwrap());
        c.closer = Some(s);
        c
    }

    /// A client over any byte stream (no Hello yet).
    pub fn over(r: impl Read + Send + 'static, w: impl Write + Send + 'static) -> Client {
        let (tx, rx) = mpsc::channel();
        thread::spawn(move || {
            let mut r = r;
            while let Some(body) = read_frame(&mut r) {
                let msg = Message::from_bytes(&body).expect("agent sent an undecodable message");
                if tx.send(msg).is_err() {
                    return;
                }
            }
        });
        Client {
            w: Box::new(w),
            rx,
            next_id: 1,
            pushes: VecDeque::new(),
            welcome: None,
            closer: None,
        }
    }

    /// Sends Hello on `c` and expects Welcome.
    pub fn hello(c: Client) -> Client {
        Client::hello_with(c, Hello::new("agent-tests", "0.0.0"))
    }

    /// Sends `hello` on `c` and expects Welcome.
    pub fn hello_with(mut c: Client, hello: Hello) -> Client {
        match c.request(Request::Hello(hello)) {
            Response::Welcome(w) => c.welcome = Some(w),
            other => panic!("expected Welcome, got {other:?}"),
        }
        c
    }

    /// Writes one frame with `body`.
    pub fn send_frame(&mut self, body: &[u8]) {
        let mut buf = (body.len() as u32).to_be_bytes().to_vec();
        buf.extend_from_slice(body);
        self.w.write_all(&buf).expect("write frame");
        self.w.flush().unwrap();
    }

    /// Sends a request; returns its id.
    pub fn send(&mut self, req: Request) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.send_frame(&Message::Request(id, req).to_bytes());
        id
    }

    /// Waits for the reply with `id`, buffering pushes.
    pub fn reply(&mut self, id: u64) -> Response {
        let deadline = Instant::now() + WAIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.rx.recv_timeout(left) {
                Ok(Message::Response(rid, r)) if rid == id => return r,
                Ok(Message::Response(rid, r)) => panic!("unexpected reply {rid}: {r:?}"),
                Ok(Message::Push(p)) => self.pushes.push_back(p),
                Ok(m) => panic!("agent sent a request: {m:?}"),
                Err(e) => panic!("no reply to request {id}: {e}"),
            }
        }
    }

    /// Sends a request and waits for its reply.
    pub fn request(&mut self, req: Request) -> Response {
        let id = self.send(req);
        self.reply(id)
    }

    /// The next push (buffered first), or `None` after `timeout`.
    pub fn push(&mut self, timeout: Duration) -> Option<Push> {
        if let Some(p) = self.pushes.pop_front() {
            return Some(p);
        }
        match self.rx.recv_timeout(timeout) {
            Ok(Message::Push(p)) => Some(p),
            Ok(m) => panic!("expected a push, got {m:?}"),
            Err(_) => None,
        }
    }

    /// Drops the buffered output of `pty` (of a subscription this client detached from, so that
    /// a later attach reads only its own).
    pub fn forget_output(&mut self, pty: PtyId) {
        self.pushes.retain(|p| match p {
            Push::Output(o) => o.pty != pty,
            Push::OutputGap(g) => g.pty != pty,
            _ => true,
        });
    }

    /// Whether the agent closed the connection within `timeout` (nothing else may arrive).
    pub fn closed_within(&mut self, timeout: Duration) -> bool {
        match self.rx.recv_timeout(timeout) {
            Err(mpsc::RecvTimeoutError::Disconnected) => true,
            Err(mpsc::RecvTimeoutError::Timeout) => false,
            Ok(m) => panic!("expected the connection to close, got {m:?}"),
        }
    }

    pub fn ping(&mut self, nonce: u64) {
        match self.request(Request::Ping(Ping { nonce })) {
            Response::Pong(p) => assert_eq!(p.nonce, nonce),
            other => panic!("expected Pong, got {other:?}"),
        }
    }

    pub fn create(&mut self, pane: &PaneKey, command: &[&str]) -> Created {
        let spec = spec(command);
        match self.request(Request::Create(Create {
            pane: pane.clone(),
            spec,
        })) {
            Response::Created(c) => c,
            other => panic!("expected Created, got {other:?}"),
        }
    }

    /// `Open` (create-or-attach) of `pane` running `command` when a spawn is needed.
    pub fn open(
        &mut self,
        pane: &PaneKey,
        command: &[&str],
        resume_from: Option<u64>,
    ) -> Result<Opened, ErrorReply> {
        let req = Request::Open(Open {
            pane: pane.clone(),
            spec: spec(command),
            resume_from,
        });
        match self.request(req) {
            Response::Opened(o) => Ok(o),
            Response::Error(e) => Err(e),
            other => panic!("expected Opened, got {other:?}"),
        }
    }

    /// Collects `pty`'s output pushes (contiguous from `from`, no gaps) until its `Exited`.
    pub fn output_until_exit(&mut self, pty: PtyId, from: u64) -> (Vec<u8>, Exited) {
        let mut got = Vec::new();
        loop {
            match self.push(WAIT) {
                Some(Push::Output(o)) if o.pty == pty => {
                    assert_eq!(o.offset, from + got.len() as u64, "contiguous offsets");
                    got.extend_from_slice(&o.data);
                }
                Some(Push::Exited(e)) if e.binding.pty == pty => return (got, e),
                other => panic!(
                    "expected output or Exited of {pty}, got {other:?} after {:?}",
                    String::from_utf8_lossy(&got)
                ),
            }
        }
    }

    pub fn attach(
        &mut self,
        pane: &PaneKey,
        expect: Option<PtyId>,
        resume_from: Option<u64>,
    ) -> Result<Attached, ErrorReply> {
        let req = Request::Attach(Attach {
            pane: pane.clone(),
            expect,
            resume_from,
        });
        match self.request(req) {
            Response::Attached(a) => Ok(a),
            Response::Error(e) => Err(e),
            other => panic!("expected Attached, got {other:?}"),
        }
    }

    /// Sends a mutation; `Ok` for Done, `Err` for an error reply.
    pub fn mutate(&mut self, req: Request) -> Result<(), ErrorReply> {
        match self.request(req) {
            Response::Done(_) => Ok(()),
            Response::Error(e) => Err(e),
            other => panic!("expected Done, got {other:?}"),
        }
    }

    pub fn input(&mut self, binding: &Binding, text: &str) -> Result<(), ErrorReply> {
        self.mutate(Request::Input(Input {
            binding: binding.clone(),
            data: text.as_bytes().to_vec(),
        }))
    }

    /// `InputSeq` of `data` as `(writer, seq)`; `Ok` for Done, `Err` for an error reply.
    pub fn input_seq(
        &mut self,
        binding: &Binding,
        writer: u64,
        seq: u64,
        data: &[u8],
    ) -> Result<(), ErrorReply> {
        self.mutate(Request::InputSeq(InputSeq {
            binding: binding.clone(),
            writer,
            seq,
            data: data.to_vec(),
        }))
    }

    pub fn status(&mut self) -> Status {
        match self.request(Request::Status(StatusRequest {})) {
            Response::StatusReply(s) => s,
            other => panic!("expected Status, got {other:?}"),
        }
    }

    pub fn leases(&mut self) -> Vec<LeaseInfo> {
        match self.request(Request::ListLeases(ListLeases {})) {
            Response::Leases(l) => l.leases,
            other => panic!("expected Leases, got {other:?}"),
        }
    }

    pub fn lease(&mut self, pty: PtyId) -> LeaseInfo {
        self.leases()
            .into_iter()
            .find(|l| l.binding.pty == pty)
            .unwrap_or_else(|| panic!("no lease for {pty}"))
    }

    /// Collects `pty`'s output pushes, which must be contiguous from `from`, until `done` holds
    /// for the bytes so far. Other pushes are kept for later. Panics on a gap, exit or timeout.
    pub fn output_until(&mut self, pty: PtyId, from: u64, done: impl Fn(&[u8]) -> bool) -> Vec<u8> {
        let mut got = Vec::new();
        let mut other = VecDeque::new();
        let deadline = Instant::now() + WAIT;
        while !done(&got) {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.push(left) {
                Some(Push::Output(o)) if o.pty == pty => {
                    assert_eq!(
                        o.offset,
                        from + got.len() as u64,
                        "output offsets must be contiguous"
                    );
                    got.extend_from_slice(&o.data);
                    self.send(Request::Ack(Ack {
                        pty,
                        offset: from + got.len() as u64,
                    }));
                }
                Some(Push::Output(o)) if o.pty != pty => other.push_back(Push::Output(o)),
                Some(p) => panic!(
                    "unexpected push {p:?} after {:?}",
                    String::from_utf8_lossy(&got)
                ),
                None => panic!(
                    "timed out; output so far: {:?}",
                    String::from_utf8_lossy(&got)
                ),
            }
        }
        other.extend(self.pushes.drain(..));
        self.pushes = other;
        got
    }
}

/// A spawn spec running `command` in `/` at 100x30.
pub fn spec(command: &[&str]) -> SpawnSpec {
    SpawnSpec {
        command: command.iter().map(|s| s.to_string()).collect(),
        cwd: Some("/".into()),
        size: TermSize {
            cols: 100,
            rows: 30,
        },
        ..SpawnSpec::default()
    }
}

/// Whether `hay` contains `needle`.
pub fn contains(hay: &[u8], needle: &str) -> bool {
    hay.windows(needle.len()).any(|w| w == needle.as_bytes())
}

/// A pane key with a unique leaf.
pub fn pane(leaf: &str) -> PaneKey {
    PaneKey::new("ws", "tab", leaf)
}

fn read_frame(r: &mut impl Read) -> Option<Vec<u8>> {
    let mut len = [0u8; 4];
    r.read_exact(&mut len).ok()?;
    let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
    r.read_exact(&mut body).ok()?;
    Some(body)
}

/// Polls `cond` every 20 ms until it holds or `timeout` passes.
pub fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        thread::sleep(Duration::from_millis(20));
    }
}

/// Spawns `command`, whose program file was just written by this process.
///
/// A test thread that forked while the file was open for writing holds that descriptor until
/// its child execs, and exec fails with ETXTBSY meanwhile: try again briefly (20 × 50 ms).
pub fn spawn_fresh_file(command: &mut Command) -> Child {
    let mut tries = 0;
    loop {
        match command.spawn() {
            Err(e) if e.raw_os_error() == Some(nix::libc::ETXTBSY) && tries < 20 => {
                tries += 1;
                std::thread::sleep(Duration::from_millis(50));
            }
            spawned => return spawned.expect("spawn"),
        }
    }
}
