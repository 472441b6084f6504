//! `relay-agent bridge`: a byte pipe between stdin/stdout (the SSH exec channel, or a local
//! connector's pipes) and the daemon's Unix socket, starting the daemon if none answers.
//!
//! Start-up is race-free: connect; on failure take the flock on `run/spawn.lock`, connect again
//! (another bridge may have started the daemon meanwhile), and only then start `relay-agent
//! daemon`, which detaches itself into its own session (see [`crate::daemon`]) and returns once it
//! listens; the lock is released after connecting. So two bridges started at once end with
//! exactly one daemon (the daemon's own lock is the second line of defence).
//!
//! With `--no-start` ([`connect_only`]; what `relayctl` asks for) the bridge never starts a
//! daemon and creates nothing: when none answers it fails with [`NoAgent`], which `relay-agent`
//! turns into exit status [`EXIT_NO_AGENT`] (tmux's "no server running"). A bridge that is
//! starting the daemon at that moment holds `run/spawn.lock`; a connect-only bridge waits for it
//! (bounded by that bridge's own start timeout) before it concludes that no agent runs.
//!
//! Once connected, the bridge hands its stdin and stdout to the daemon when it runs the same
//! executable ([`crate::daemon::stdio_pass`]): frames then go between the daemon and the pipes
//! without a copy here, and the bridge only waits for the daemon to close the connection (it must
//! live as long as the session does). Otherwise it copies.
//!
//! The bridge never writes anything but daemon bytes to stdout; diagnostics go to stderr. A
//! copying bridge exits when either side closes: stdin EOF half-closes the socket and the bridge
//! exits once the daemon has closed its side; socket EOF or a stdout error exits at once.

use std::io::{self, Read, Write};
use std::net::Shutdown;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use nix::fcntl::{Flock, FlockArg};

use crate::paths::{annotate, Paths};

pub use relay_protocol::bridge::EXIT_NO_AGENT;

/// How long the bridge waits for a daemon it started (it may first end PTY processes a killed
/// daemon left behind, which takes up to the kill grace of 3 s).
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// Runs the bridge until either side closes, starting the daemon when none answers.
///
/// # Errors
/// When no daemon answers and none could be started, naming the socket and the log.
pub fn main(paths: &Paths) -> anyhow::Result<()> {
    let stream = connect_or_start(paths)?;
    pump(stream)
}

/// `relay-agent bridge --no-start`: runs the bridge until either side closes, but only if a
/// daemon answers; never starts one and creates no file or directory.
///
/// # Errors
/// [`NoAgent`] (downcast the error) when nothing listens on the socket; other errors (e.g. no
/// permission on the socket) name the path.
pub fn main_connect_only(paths: &Paths) -> anyhow::Result<()> {
    let stream = connect_only(paths)?;
    pump(stream)
}

/// No daemon answers on the socket and the bridge was told not to start one (`--no-start`).
#[derive(Debug, thiserror::Error)]
#[error("no agent running (nothing listens on {}); `relay` starts one", socket.display())]
pub struct NoAgent {
    /// The socket nobody listens on.
    pub socket: PathBuf,
}

/// Whether a connect error means that no daemon listens: no socket (or no `run/` at all), or a
/// socket left behind by a daemon that is gone.
fn nobody_listens(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::NotFound | io::ErrorKind::ConnectionRefused
    )
}

/// Connects to a running daemon; waits for a start under way (another bridge holding
/// `run/spawn.lock`) but never starts one itself.
fn connect_only(paths: &Paths) -> anyhow::Result<UnixStream> {
    let sock = paths.socket();
    let no_agent = || NoAgent {
        socket: sock.clone(),
    };
    match UnixStream::connect(&sock) {
        Ok(s) => return Ok(s),
        Err(e) if nobody_listens(&e) => {}
        Err(e) => return Err(annotate(e, "connect to", &sock).into()),
    }
    // Opened without creating it: a connect-only bridge leaves no trace.
    let Ok(file) = std::fs::File::open(paths.spawn_lock()) else {
        return Err(no_agent().into());
    };
    // Shared: waits only while a starting bridge holds it exclusively (at most its
    // START_TIMEOUT), and never blocks another connect-only bridge.
    let _lock = Flock::lock(file, FlockArg::LockShared).map_err(|(_, e)| {
        anyhow::anyhow!("could not lock {}: {e}", paths.spawn_lock().display())
    })?;
    match UnixStream::connect(&sock) {
        Ok(s) => Ok(s),
        Err(e) if nobody_listens(&e) => Err(no_agent().into()),
        Err(e) => Err(annotate(e, "connect to", &sock).into()),
    }
}

/// Connects to the daemon, starting it when needed.
fn connect_or_start(paths: &Paths) -> anyhow::Result<UnixStream> {
    let sock = paths.socket();
    if let Ok(s) = UnixStream::connect(&sock) {
        return Ok(s);
    }
    paths.prepare_run_dir()?;
    let lock_path = paths.spawn_lock();
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(|e| annotate(e, "open", &lock_path))?;
    let _lock = Flock::lock(file, FlockArg::LockExclusive)
        .map_err(|(_, e)| anyhow::anyhow!("could not lock {}: {e}", lock_path.display()))?;
    if let Ok(s) = UnixStream::connect(&sock) {
        return Ok(s);
    }
    let deadline = Instant::now() + START_TIMEOUT;
    start_daemon(paths, deadline)?;
    loop {
        match UnixStream::connect(&sock) {
            Ok(s) => return Ok(s),
            Err(e) if Instant::now() >= deadline => bail!(
                "the agent daemon did not answer on {} within {START_TIMEOUT:?} ({e}); see {}",
                sock.display(),
                paths.log_dir().join("agent.log").display()
            ),
            Err(_) => thread::sleep(Duration::from_millis(20)),
        }
    }
}

/// Runs `relay-agent daemon` (which detaches itself) and waits for it to report.
fn start_daemon(paths: &Paths, deadline: Instant) -> anyhow::Result<()> {
    let exe = std::env::current_exe().context("locating the relay-agent executable")?;
    // Another connector may have replaced our file meanwhile (an atomic rename of identical
    // content): on Linux, /proc/self/exe still runs this inode, and argv[0] keeps the file's
    // name (without the " (deleted)" that Linux appends to a replaced executable's path).
    let self_exe = Path::new("/proc/self/exe");
    let mut command = if self_exe.exists() {
        let mut c = Command::new(self_exe);
        let name = exe.to_string_lossy();
        c.arg0(name.strip_suffix(" (deleted)").unwrap_or(&name));
        c
    } else {
        Command::new(&exe)
    };
    let mut child = command
        .arg("daemon")
        .env("RELAY_HOME", paths.home())
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {} daemon", exe.display()))?;
    loop {
        if let Some(status) = child.try_wait()? {
            if status.success() {
                return Ok(());
            }
            let mut why = String::new();
            if let Some(mut err) = child.stderr.take() {
                let _ = err.read_to_string(&mut why);
            }
            let why = why.trim();
            let why = why.strip_prefix("relay-agent: error: ").unwrap_or(why);
            bail!("the agent daemon could not start ({status}): {why}");
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            bail!(
                "the agent daemon did not get ready within {START_TIMEOUT:?}; see {}",
                paths.log_dir().join("agent.log").display()
            );
        }
        thread::sleep(Duration::from_millis(10));
    }
}

/// Hands stdin and stdout to the daemon and waits for the connection to end, or, where the
/// daemon does not take them ([`crate::daemon::stdio_pass`]), copies stdin → socket and socket →
/// stdout until one side closes.
fn pump(stream: UnixStream) -> anyhow::Result<()> {
    use crate::daemon::stdio_pass::{offer, wait_for_close, Offer};
    match offer(&stream).context("handing stdin and stdout to the agent daemon")? {
        Offer::Passed => {
            wait_for_close(&stream);
            return Ok(());
        }
        Offer::Ended => return Ok(()),
        Offer::Copy => {}
    }
    let mut to_daemon = stream.try_clone()?;
    thread::Builder::new()
        .name("stdin-to-daemon".into())
        .spawn(move || {
            let mut stdin = io::stdin().lock();
            let _ = copy(&mut stdin, &mut to_daemon);
            // Let the daemon finish its replies; it closes when it sees EOF.
            let _ = to_daemon.shutdown(Shutdown::Write);
        })?;
    let mut from_daemon = stream;
    let mut stdout = io::stdout().lock();
    let _ = copy(&mut from_daemon, &mut stdout);
    Ok(())
}

/// Copies until EOF or an error, flushing after every read.
fn copy(from: &mut impl Read, to: &mut impl Write) -> io::Result<()> {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        to.write_all(&buf[..n])?;
        to.flush()?;
    }
}
