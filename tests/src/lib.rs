//! Harness for relay's integration tests: the real binaries, a private `RELAY_HOME` per test, and
//! helpers to read pane output with generous liveness bounds.
//!
//! The binaries (`relay-agent`, `relay`, `relayctl`) are taken from the cargo target directory the
//! test executable lives in (`target/<profile>/deps/..`). Cargo does not build other packages'
//! binaries for `cargo test -p relay-tests`, so run `cargo build --workspace --bins` first (the
//! README and CI do).
//!
//! Each [`TestHome`] is a temporary `RELAY_HOME`; its daemon (started on demand by the first
//! bridge), bridges and clients end when the `TestHome` is dropped (see `relay_testkit::TempHome`).
//! Tests never share a daemon.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use relay_connector::{
    BridgeStderr, Host, HostOptions, HostState, LocalConfig, LocalTransport, PaneEvent, PaneHandle,
    Session,
};
use relay_testkit::TempHome;

/// Generous bound for things that should take milliseconds (liveness, not performance).
pub const LIVENESS: Duration = Duration::from_secs(20);

/// Paths of the built binaries.
#[derive(Debug)]
pub struct Bins {
    /// `relay-agent`.
    pub agent: PathBuf,
    /// `relay`.
    pub relay: PathBuf,
    /// `relayctl`.
    pub relayctl: PathBuf,
}

/// The binaries next to this test executable; panics with the fix when one is missing.
pub fn bins() -> &'static Bins {
    static BINS: OnceLock<Bins> = OnceLock::new();
    BINS.get_or_init(|| {
        let exe = std::env::current_exe().expect("current test executable");
        // target/<profile>/deps/<test> → target/<profile>
        let dir = exe
            .parent()
            .and_then(Path::parent)
            .expect("test executable lives in target/<profile>/deps");
        let find = |name: &str| {
            let p = dir.join(name);
            assert!(
                p.is_file(),
                "{} is missing: run `cargo build --workspace --bins` before `cargo test` \
                 (cargo test does not build other packages' binaries)",
                p.display()
            );
            p
        };
        Bins {
            agent: find("relay-agent"),
            relay: find("relay"),
            relayctl: find("relayctl"),
        }
    })
}

/// A private copy of this build's agent binary, so that a rebuild during the test run cannot
/// change what is deployed between two connects of one test.
pub fn agent_copy() -> &'static Path {
    static COPY: OnceLock<(tempfile::TempDir, PathBuf)> = OnceLock::new();
    &COPY
        .get_or_init(|| {
            let dir = tempfile::tempdir().expect("a temp dir for the agent copy");
            let path = dir.path().join("relay-agent");
            std::fs::copy(&bins().agent, &path).expect("copying the agent binary");
            (dir, path)
        })
        .1
}

/// A private `RELAY_HOME` (a [`TempHome`]: every process of it ends when it drops) with the
/// environment its daemon gets.
pub struct TestHome {
    home: TempHome,
    env: Vec<(OsString, OsString)>,
}

impl TestHome {
    /// A fresh, empty `RELAY_HOME`.
    pub fn new() -> Self {
        Self::with_env(&[])
    }

    /// A fresh `RELAY_HOME` whose daemon gets these extra environment variables (e.g.
    /// `RELAY_WINDOW_BYTES`) besides [`TempHome::env`] (an empty `HOME` for the shells, a long
    /// exit-output grace for a loaded machine).
    pub fn with_env(env: &[(&str, &str)]) -> Self {
        let _ = bins();
        let home = TempHome::new("relay-test-");
        let mut vars = home.env();
        vars.extend(
            env.iter()
                .map(|(k, v)| (OsString::from(k), OsString::from(v))),
        );
        TestHome { home, env: vars }
    }

    /// The `RELAY_HOME` directory.
    pub fn path(&self) -> &Path {
        self.home.path()
    }

    /// A local transport running this build's agent with this home.
    pub fn transport(&self) -> LocalTransport {
        self.transport_with(&bins().agent)
    }

    /// A [`Host`] on this home's local agent whose first reconnect attempt waits 3 s, so a
    /// test can act on the host while the host is away (its connection killed).
    pub fn host_slow_to_retry(&self) -> Host {
        let mut options = HostOptions::new("relay-tests");
        options.backoff.first = Duration::from_secs(3);
        Host::open(self.transport(), options)
    }

    /// A local transport running `agent_bin` (e.g. a wrapper script) with this home.
    pub fn transport_with(&self, agent_bin: &Path) -> LocalTransport {
        LocalTransport::with_config(LocalConfig {
            agent_bin: Some(agent_bin.to_path_buf()),
            relay_home: Some(self.path().to_path_buf()),
            env: self.env.clone(),
            stderr: BridgeStderr::Inherit,
        })
    }

    /// A connected session.
    pub async fn session(&self) -> Session {
        Session::connect(&self.transport(), "relay-tests")
            .await
            .expect("connecting to the agent")
    }

    /// A command for one of the binaries with this home and agent in its environment.
    pub fn command(&self, program: &Path) -> Command {
        let mut cmd = Command::new(program);
        self.apply_env(|k, v| {
            cmd.env(k, v);
        });
        cmd
    }

    /// Calls `set` for every environment variable a relay process of this home needs.
    pub fn apply_env(&self, mut set: impl FnMut(&OsString, &OsString)) {
        set(&"RELAY_HOME".into(), &self.path().as_os_str().to_owned());
        set(
            &"RELAY_AGENT_BIN".into(),
            &bins().agent.as_os_str().to_owned(),
        );
        for (k, v) in &self.env {
            set(k, v);
        }
    }

    /// Starts this home's agent daemon (`relay-agent daemon`, which detaches and returns once
    /// it listens), as a connection's bridge would; relayctl never starts one. Panics with the
    /// daemon's stderr when it cannot start.
    pub fn start_daemon(&self) {
        let out = self
            .command(&bins().agent)
            .arg("daemon")
            .stdin(Stdio::null())
            .output()
            .expect("running relay-agent daemon");
        assert!(
            out.status.success(),
            "relay-agent daemon failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Runs `relayctl ARGS` to completion (stdin closed) and returns its output.
    pub fn relayctl(&self, args: &[&str]) -> Output {
        self.command(&bins().relayctl)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("running relayctl")
    }

    /// `relayctl leases --all --json` (ended leases included), parsed; panics with relayctl's
    /// stderr on failure.
    pub fn leases_json(&self) -> Vec<serde_json::Value> {
        let out = self.relayctl(&["leases", "--all", "--json"]);
        assert!(
            out.status.success(),
            "relayctl leases --all --json failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("relayctl leases --json prints a JSON array")
    }

    /// Pids of the `relay-agent bridge` processes of this home (one per connection over the
    /// local transport), found by their `RELAY_HOME` in `/proc/<pid>/environ`.
    pub fn bridge_pids(&self) -> Vec<i32> {
        let pids = self.home.pids_running("bridge");
        pids.into_iter().map(|p| p as i32).collect()
    }

    /// Pids of every process of this home (daemon, bridges, shells, clients), found by their
    /// `RELAY_HOME` in `/proc/<pid>/environ`.
    pub fn pids(&self) -> Vec<i32> {
        let procs = self.home.processes();
        procs.into_iter().map(|p| p.pid as i32).collect()
    }

    /// Kills (SIGKILL) this home's bridges: every local connection to the daemon drops at once,
    /// as a killed SSH connection would; the daemon and its shells stay. Returns how many.
    pub fn kill_bridges(&self) -> usize {
        let pids = self.bridge_pids();
        for pid in &pids {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(*pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        pids.len()
    }

    /// Whether a daemon holds this home's `run/daemon.lock`.
    pub fn daemon_running(&self) -> bool {
        self.home.daemon_running()
    }

    /// The daemon's pid from `relayctl status --json`, if a daemon runs.
    pub fn daemon_pid(&self) -> Option<i32> {
        if !self.daemon_running() {
            return None;
        }
        let out = self.relayctl(&["status", "--json"]);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
        v["pid"].as_i64().map(|p| p as i32)
    }
}

impl Default for TestHome {
    fn default() -> Self {
        Self::new()
    }
}

/// Output read from a pane, checked for order: every output starts where the previous ended.
#[derive(Debug, Default)]
pub struct Collected {
    /// Offset of the first byte in `data`.
    pub start: Option<u64>,
    /// Concatenated output.
    pub data: Vec<u8>,
    /// Gaps seen, `(from, to)`.
    pub gaps: Vec<(u64, u64)>,
    /// The exit event, if seen: `(code, signal)`.
    pub exit: Option<(u32, Option<String>)>,
    /// Offset after the last byte seen.
    pub end: u64,
    /// Reasons of the host pane's interruptions ([`PaneEvent::Interrupted`]), in order.
    pub interrupted: Vec<String>,
    /// Offsets the host pane resumed from ([`PaneEvent::Resumed`]), in order.
    pub resumed: Vec<u64>,
    /// Re-attaches that proved nothing ([`PaneEvent::Unresolved`]).
    pub unresolved: Vec<String>,
    /// Snapshots received ([`PaneEvent::Snapshot`]): offset and bytes, in order.
    pub snapshots: Vec<(u64, Vec<u8>)>,
    /// Typed events received ([`PaneEvent::Event`]): key and event, in order.
    pub events: Vec<(u64, relay_protocol::ScreenEvent)>,
    /// Everything a terminal showing this pane was given: snapshots and output, in order.
    pub terminal: Vec<u8>,
    /// The end proven on a re-attach ([`PaneEvent::Ended`]): reason and exit, if seen.
    pub ended: Option<(
        relay_protocol::EndReason,
        Option<relay_protocol::ExitStatus>,
    )>,
    /// The pane's PTY now, when a re-attach found the pane holds another one
    /// ([`PaneEvent::Mismatch`]); `Some(None)`: it holds none.
    pub mismatch: Option<Option<relay_protocol::PtyId>>,
}

impl Collected {
    /// The output as text (lossy).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.data).into_owned()
    }

    /// Records one event; an error for output out of order or an event that should not come.
    pub fn apply(&mut self, ev: PaneEvent) -> Result<(), String> {
        match ev {
            PaneEvent::Output { offset, data } => {
                match self.start {
                    None => {
                        self.start = Some(offset);
                        self.end = offset;
                    }
                    Some(_) if offset != self.end => {
                        return Err(format!(
                            "output at offset {offset}, expected {} (out of order)",
                            self.end
                        ))
                    }
                    Some(_) => {}
                }
                self.end = offset + data.len() as u64;
                self.data.extend_from_slice(&data);
                self.terminal.extend_from_slice(&data);
            }
            PaneEvent::Snapshot { offset, data, .. } => {
                self.start.get_or_insert(offset);
                self.end = offset;
                self.terminal.extend_from_slice(&data);
                self.snapshots.push((offset, data));
            }
            PaneEvent::Event { key, event, .. } => self.events.push((key, event)),
            PaneEvent::Gap { from, to } => {
                self.gaps.push((from, to));
                self.start.get_or_insert(to);
                self.end = to;
            }
            PaneEvent::Exited { exit, .. } => self.exit = Some((exit.code, exit.signal)),
            PaneEvent::Disconnected { reason } => return Err(format!("disconnected: {reason}")),
            PaneEvent::Interrupted { reason } => self.interrupted.push(reason),
            PaneEvent::Resumed { from } => self.resumed.push(from),
            PaneEvent::Unresolved { reason } => self.unresolved.push(reason),
            PaneEvent::Ended { reason, exit } => self.ended = Some((reason, exit)),
            PaneEvent::Mismatch { current } => self.mismatch = Some(current),
            other => return Err(format!("unexpected event {other:?}")),
        }
        Ok(())
    }
}

/// Reads `handle` into `into` until `done(into)` holds; fails after `within` or when the stream
/// ends first.
pub async fn read_until(
    handle: &mut PaneHandle,
    into: &mut Collected,
    within: Duration,
    done: impl Fn(&Collected) -> bool,
) -> Result<(), String> {
    let deadline = tokio::time::Instant::now() + within;
    while !done(into) {
        match tokio::time::timeout_at(deadline, handle.next()).await {
            Err(_) => {
                return Err(format!(
                    "timed out after {within:?}; output so far: {:?}",
                    into.text()
                ))
            }
            Ok(None) => return Err(format!("stream ended; output so far: {:?}", into.text())),
            Ok(Some(ev)) => into.apply(ev)?,
        }
    }
    Ok(())
}

/// Reads until the output contains `needle`.
pub async fn read_until_text(
    handle: &mut PaneHandle,
    into: &mut Collected,
    needle: &str,
) -> Result<(), String> {
    read_until(handle, into, LIVENESS, |c| c.text().contains(needle)).await
}

/// Polls `check` every 20 ms until it returns `Some`, or panics after [`LIVENESS`] with `what`.
pub fn eventually<T>(what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + LIVENESS;
    loop {
        if let Some(v) = check() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `cksum`'s line for `data` ("CRC SIZE"), from the machine's `cksum` (POSIX CRC), so a test
/// can compare what a remote `cksum` printed about the bytes it received.
///
/// # Panics
/// When `cksum` cannot run.
pub fn cksum(data: &[u8]) -> String {
    digest_line("cksum", data)
}

/// The SHA-256 of `data` as `sha256sum` prints it for stdin (`HEX  -`), from the machine's
/// `sha256sum`: what a host prints about bytes it received where it has no `cksum` (busybox).
///
/// # Panics
/// When `sha256sum` cannot run.
pub fn sha256sum(data: &[u8]) -> String {
    digest_line("sha256sum", data)
}

/// What the digest `tool` prints for `data` on its stdin, trimmed.
fn digest_line(tool: &str, data: &[u8]) -> String {
    use std::io::Write;
    use std::process::Stdio;
    let mut child = std::process::Command::new(tool)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{tool}: {e}"));
    let mut stdin = child.stdin.take().unwrap();
    let data = data.to_vec();
    let writer = std::thread::spawn(move || stdin.write_all(&data));
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

pub mod faults;
pub mod fixture;
pub mod fleet;
pub mod images;
pub mod inspect;
pub mod pty_run;
pub mod shaper;
pub mod sidecar;
pub mod usage;

/// Every state a [`Host`] went through, recorded by a background task (a watch channel alone
/// would let a test miss short states such as `Unresponsive`).
#[derive(Clone)]
pub struct StateLog {
    states: std::sync::Arc<std::sync::Mutex<Vec<HostState>>>,
}

impl StateLog {
    /// Starts recording `host`'s states (the current one first).
    pub fn record(host: &Host) -> StateLog {
        let mut rx = host.state();
        let states =
            std::sync::Arc::new(std::sync::Mutex::new(vec![rx.borrow_and_update().clone()]));
        let log = states.clone();
        tokio::spawn(async move {
            while rx.changed().await.is_ok() {
                let state = rx.borrow_and_update().clone();
                log.lock().unwrap().push(state);
            }
        });
        StateLog { states }
    }

    /// The states so far.
    pub fn all(&self) -> Vec<HostState> {
        self.states.lock().unwrap().clone()
    }

    /// How many recorded states match `pred`.
    pub fn count(&self, pred: impl Fn(&HostState) -> bool) -> usize {
        self.all().iter().filter(|s| pred(s)).count()
    }

    /// How many states were recorded so far (a mark for [`StateLog::wait_for`]).
    pub fn len(&self) -> usize {
        self.states.lock().unwrap().len()
    }

    /// Whether nothing was recorded (never: the first state is recorded at once).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Waits until a state matching `pred` was recorded at index `since` or later (returns it),
    /// or fails after `within` with the states seen.
    pub async fn wait_for(
        &self,
        since: usize,
        what: &str,
        within: Duration,
        pred: impl Fn(&HostState) -> bool,
    ) -> Result<HostState, String> {
        let deadline = Instant::now() + within;
        loop {
            if let Some(s) = self.all().into_iter().skip(since).find(|s| pred(s)) {
                return Ok(s);
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "no {what} within {within:?}; states: {:?}",
                    self.all()
                ));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}
