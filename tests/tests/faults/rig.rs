//! What every fault scenario starts from: a real OpenSSH host in a container, a [`Host`] of the
//! connector supervising it, and panes whose output is read all the time by background readers.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use relay_connector::ssh::SshTransport;
use relay_connector::{Host, HostOptions, HostState, InputWriter, PaneEvent, PaneHandle};
use relay_protocol::{Binding, EndReason, ExitStatus, LeaseInfo, SpawnSpec};
use relay_tests::fixture::SshHost;
use relay_tests::fleet::RAW_CAT;
use relay_tests::{agent_copy, Collected, StateLog};

/// `sh -c script`.
pub fn sh(script: &str) -> SpawnSpec {
    SpawnSpec {
        command: vec!["sh".into(), "-c".into(), script.into()],
        ..SpawnSpec::default()
    }
}

/// Prints `start`, then `got:<line>` for every input line.
pub const ECHO_LOOP: &str = "echo start; while read l; do echo \"got:$l\"; done";

/// About 1 MB/s of numbered lines (`line-N` and 1000 bytes of padding).
pub const FLOOD_1MBPS: &str = "echo start; i=0; pad=$(printf '%01000d' 0); while :; do \
     echo \"line-$i $pad\"; i=$((i+1)); [ $((i % 100)) = 0 ] && sleep 0.1; done";

/// A container host and the connector's supervisor of it.
pub struct Rig {
    pub ssh: SshHost,
    pub host: Host,
    pub states: StateLog,
}

impl Rig {
    /// Starts a host container and a [`Host`] on it (SSH `ConnectTimeout` 5 s, the fixture's
    /// key, its host key trusted), adjusted by `tune`; waits for the first connection.
    pub async fn start(tune: impl FnOnce(&mut HostOptions)) -> Rig {
        let ssh = SshHost::start().await.unwrap();
        let host = Self::connect(&ssh, tune);
        let states = StateLog::record(&host);
        tokio::time::timeout(Duration::from_secs(60), host.session())
            .await
            .expect("first connection within 60 s")
            .unwrap();
        Rig { ssh, host, states }
    }

    /// A [`Host`] on `ssh` (not waited for).
    pub fn connect(ssh: &SshHost, tune: impl FnOnce(&mut HostOptions)) -> Host {
        Self::connect_within(ssh, Duration::from_secs(5), tune)
    }

    /// [`Rig::connect`] with SSH `ConnectTimeout` `timeout`.
    pub fn connect_within(
        ssh: &SshHost,
        timeout: Duration,
        tune: impl FnOnce(&mut HostOptions),
    ) -> Host {
        ssh.write_known_hosts().unwrap();
        let mut opts = ssh.options(agent_copy()).unwrap();
        opts.connect_timeout = Some(timeout);
        let mut options = HostOptions::new("fault-suite");
        tune(&mut options);
        Host::open(SshTransport::new(opts), options)
    }

    /// Opens pane `ws/name/0` running `script` and waits for `ready` in its output.
    pub async fn pane(&self, ws: &str, name: &str, script: &str, ready: &str) -> Pane {
        let (created, handle) = self
            .host
            .workspace(ws)
            .open(name, "0", sh(script))
            .await
            .unwrap();
        let pane = Pane::watch(&self.host, created.binding, handle);
        pane.wait_text(ready, Duration::from_secs(30)).await;
        pane
    }

    /// Opens `n` panes `ws/p0/0 ...` running [`ECHO_LOOP`], each waited for.
    pub async fn echo_panes(&self, ws: &str, n: usize) -> Vec<Pane> {
        let mut panes = Vec::with_capacity(n);
        for i in 0..n {
            panes.push(self.pane(ws, &format!("p{i}"), ECHO_LOOP, "start").await);
        }
        panes
    }

    /// Waits (at most `within`) for a state matching `pred` recorded after `mark`.
    pub async fn wait_state(
        &self,
        mark: usize,
        what: &str,
        within: Duration,
        pred: impl Fn(&HostState) -> bool,
    ) -> HostState {
        self.states
            .wait_for(mark, what, within, pred)
            .await
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// The agent's shells as seen on the host (pids of the daemon's children), sorted.
    pub async fn shells(&self) -> Vec<u32> {
        self.ssh.shell_pids().await.unwrap()
    }
}

/// A pane whose events a background task collects all the time.
pub struct Pane {
    pub binding: Binding,
    pub input: InputWriter,
    out: Arc<Mutex<Collected>>,
    error: Arc<Mutex<Option<String>>>,
    ended: Arc<Mutex<bool>>,
    _reader: tokio::task::JoinHandle<()>,
}

impl Pane {
    /// Starts reading `handle` in the background.
    pub fn watch(host: &Host, binding: Binding, mut handle: PaneHandle) -> Pane {
        let out = Arc::new(Mutex::new(Collected::default()));
        let error = Arc::new(Mutex::new(None));
        let ended = Arc::new(Mutex::new(false));
        let reader = tokio::spawn({
            let (out, error, ended) = (out.clone(), error.clone(), ended.clone());
            async move {
                while let Some(ev) = handle.next().await {
                    if let Err(e) = out.lock().unwrap().apply(ev) {
                        *error.lock().unwrap() = Some(e);
                    }
                }
                *ended.lock().unwrap() = true;
            }
        });
        Pane {
            input: host.input_writer(&binding),
            binding,
            out,
            error,
            ended,
            _reader: reader,
        }
    }

    /// A look at what was collected so far; panics if the stream broke a rule (out of order,
    /// an unexpected event).
    pub fn read<T>(&self, f: impl FnOnce(&Collected) -> T) -> T {
        if let Some(e) = self.error.lock().unwrap().as_ref() {
            panic!("pane {}: {e}", self.binding);
        }
        f(&self.out.lock().unwrap())
    }

    /// Whether the stream has ended.
    pub fn ended(&self) -> bool {
        *self.ended.lock().unwrap()
    }

    /// Waits until `done` holds for the collected output, at most `within`.
    pub async fn wait(&self, what: &str, within: Duration, done: impl Fn(&Collected) -> bool) {
        let deadline = Instant::now() + within;
        while !self.read(&done) {
            assert!(
                Instant::now() < deadline,
                "pane {}: no {what} within {within:?}; interrupted {:?}, resumed {:?}, \
                 unresolved {:?}, ended {:?}, tail {:?}",
                self.binding,
                self.read(|c| c.interrupted.clone()),
                self.read(|c| c.resumed.clone()),
                self.read(|c| c.unresolved.clone()),
                self.read(|c| c.ended.clone()),
                self.read(|c| tail(&c.text())),
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits until `text` appears in the output.
    pub async fn wait_text(&self, text: &str, within: Duration) {
        self.wait(&format!("{text:?}"), within, |c| c.text().contains(text))
            .await;
    }

    /// Types `line` and a newline.
    pub fn type_line(&self, line: &str) {
        self.input.push(format!("{line}\n").into_bytes()).unwrap();
    }
}

/// A pane running a raw, echo-less `cat`, read directly by a measuring loop: a byte typed comes
/// back as that byte and nothing else.
pub struct Echo {
    handle: PaneHandle,
    input: InputWriter,
}

impl Echo {
    /// Opens pane `ws/echo/0` on `host` and waits (at most 30 s) until `cat` runs.
    pub async fn open(host: &Host, ws: &str) -> Echo {
        let (created, mut handle) = host
            .workspace(ws)
            .open("echo", "0", sh(RAW_CAT))
            .await
            .unwrap();
        let mut seen = String::new();
        while !seen.contains("ready") {
            match tokio::time::timeout(Duration::from_secs(30), handle.next()).await {
                Ok(Some(PaneEvent::Output { data, .. })) => {
                    seen.push_str(&String::from_utf8_lossy(&data))
                }
                other => panic!("echo pane not ready: {other:?}"),
            }
        }
        Echo {
            input: host.input_writer(&created.binding),
            handle,
        }
    }

    /// The pane's binding.
    pub fn binding(&self) -> &Binding {
        self.handle.binding()
    }

    /// The median of `n` round trips, `pause` apart.
    pub async fn median(&mut self, n: usize, pause: Duration) -> Duration {
        median_echo(std::slice::from_mut(self), n, pause, || true).await
    }

    /// One round trip on a steady connection: a byte in, the same byte out within 30 s. Panics
    /// on any other event (an interruption is not steady).
    pub async fn round_trip(&mut self, byte: u8) -> Duration {
        self.echoed(byte, Duration::from_secs(30), false).await
    }

    /// A round trip across an outage: the byte comes back within `within`, however many times
    /// the stream is interrupted and resumed meanwhile (the pane's own shell, re-attached).
    /// Panics when the pane ends or the byte does not come back in time.
    pub async fn comes_back(&mut self, byte: u8, within: Duration) -> Duration {
        self.echoed(byte, within, true).await
    }

    async fn echoed(&mut self, byte: u8, within: Duration, across_outages: bool) -> Duration {
        let start = Instant::now();
        let deadline = tokio::time::Instant::now() + within;
        self.input.push(vec![byte]).unwrap();
        loop {
            match tokio::time::timeout_at(deadline, self.handle.next()).await {
                Ok(Some(PaneEvent::Output { data, .. })) if data.contains(&byte) => {
                    return start.elapsed()
                }
                Ok(Some(PaneEvent::Output { .. })) => {}
                Ok(Some(PaneEvent::Interrupted { .. } | PaneEvent::Resumed { .. }))
                    if across_outages => {}
                other => panic!(
                    "pane {}: no echo of {:?} within {within:?}: {other:?}",
                    self.binding(),
                    byte as char
                ),
            }
        }
    }

    /// Waits (at most `within`) for the pane's end, past interruptions and resumes; returns the
    /// reason and exit status the stream gave. Panics on output or when no end comes.
    pub async fn end(&mut self, within: Duration) -> (EndReason, Option<ExitStatus>) {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            match tokio::time::timeout_at(deadline, self.handle.next()).await {
                Ok(Some(PaneEvent::Ended { reason, exit })) => return (reason, exit),
                Ok(Some(PaneEvent::Interrupted { .. } | PaneEvent::Resumed { .. })) => {}
                other => panic!(
                    "pane {}: no end within {within:?}: {other:?}",
                    self.binding()
                ),
            }
        }
    }
}

/// The median of at least `n` round trips over `echoes` in turn, `pause` apart, going on until
/// `seen` has held for 20 more (so the samples span that event however late a loaded machine
/// makes it); at most 60 s of them.
pub async fn median_echo(
    echoes: &mut [Echo],
    n: usize,
    pause: Duration,
    seen: impl Fn() -> bool,
) -> Duration {
    let limit = Instant::now() + Duration::from_secs(60);
    let mut samples = Vec::with_capacity(n);
    let mut seen_at = None;
    loop {
        if seen_at.is_none() && seen() {
            seen_at = Some(samples.len());
        }
        let enough = samples.len() >= n && seen_at.is_some_and(|at| samples.len() >= at + 20);
        if enough || Instant::now() > limit {
            break;
        }
        let i = samples.len();
        let echo = &mut echoes[i % echoes.len()];
        samples.push(echo.round_trip(b'a' + (i % 26) as u8).await);
        tokio::time::sleep(pause).await;
    }
    samples.sort();
    samples[samples.len() / 2]
}

/// Every lease the agent of `host` lists, over the host's current connection.
pub async fn leases(host: &Host) -> Vec<LeaseInfo> {
    host.session().await.unwrap().list_leases().await.unwrap()
}

/// The last 300 characters of `text`.
pub fn tail(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    chars[chars.len().saturating_sub(300)..].iter().collect()
}

/// The numbers of the complete `line-N` lines in `text`, in order.
pub fn line_numbers(text: &str) -> Vec<u64> {
    text.split('\n')
        .filter_map(|l| {
            let rest = l.trim_end_matches('\r').strip_prefix("line-")?;
            let (n, pad) = rest.split_once(' ')?;
            (pad.len() == 1000).then(|| n.parse().ok()).flatten()
        })
        .collect()
}

/// Whether `numbers` only ever increase (no repeat, no reordering).
pub fn strictly_increasing(numbers: &[u64]) -> bool {
    numbers.windows(2).all(|w| w[0] < w[1])
}
