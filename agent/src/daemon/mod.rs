//! `relay-agent daemon`: one per user, owns the PTYs, serves the Unix socket.
//!
//! Start-up: create the private `run/` dir; take an exclusive flock on `run/daemon.lock` for the
//! daemon's whole life (if another daemon holds it, exit 0 quietly); remove a stale socket (only
//! while holding the lock) and bind `run/agent.sock`; replay the lease journal.
//!
//! First it closes every descriptor above stdio that it inherited (a FIFO or pipe writer kept by
//! a daemon would block its reader until the daemon stops). Without `--foreground` the daemon
//! then detaches: fork, `setsid`, fork again (so it is not a session leader and can never acquire
//! a controlling terminal), stdio to `/dev/null`, cwd `/`.
//! The original process waits until the daemon reports ready (listening, or another daemon is
//! already running: exit 0) or failed (exit 1 with the reason on stderr). Killing whoever started
//! it (a bridge, its process group, the SSH session) cannot reach the daemon or its PTYs.
//!
//! Shutdown (SIGTERM/SIGINT): stop accepting, close connections, then **end the PTYs** (SIGHUP to
//! each process group, SIGKILL to survivors after the kill grace), recording each end with reason
//! `AgentRestarted` (exit status left out, output figures kept), and seal the journal. A PTY cannot
//! be reattached once its daemon is gone (the master side closes), so ending them is explicit and
//! bounded. After a SIGKILL of the daemon nothing is recorded; the next incarnation ends any PTY
//! process still running (see [`crate::pty::orphan`]) and reports those leases the same way.
//!
//! Live upgrade (`Upgrade` request, [`crate::upgrade`]): the serve loop stops accepting, closes
//! connections, and hands the PTYs to the new binary by `execve` in this same process; the new
//! code starts in [`resume`] with the listening socket, the lock and the PTYs it was given. If
//! the handover does not happen, the loop serves again.

pub mod connection;
pub mod dispatch;
pub mod inbound;
pub mod server;
pub mod stdio_pass;
pub mod subscriptions;

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context};
use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};
use nix::sys::signal::{signal, SigHandler, Signal};
use nix::unistd::{fork, setsid, ForkResult};
use tokio::net::UnixListener;
use tokio::signal::unix::{signal as tokio_signal, Signal as TokioSignal, SignalKind};

use crate::config::Config;
use crate::fault;
use crate::log;
use crate::paths::{annotate, Paths};
use crate::pty::io::set_cloexec;
use crate::state::State;
use crate::upgrade::{self, probe, rescue, DaemonFds};

/// Runs the daemon (see the module docs). Returns the process exit code.
///
/// # Errors
/// Start-up failures: directories, lock file, logging, socket, journal.
pub fn main(paths: &Paths, foreground: bool) -> anyhow::Result<ExitCode> {
    crate::sys::process::close_inherited_fds();
    paths.prepare_run_dir()?;
    paths.prepare_data_dirs()?;
    if foreground {
        run(paths, None, true)?;
        return Ok(ExitCode::SUCCESS);
    }
    let (ready_rd, ready_wr) =
        crate::sys::process::pipe_cloexec().context("creating the readiness pipe")?;
    // Safety: no other thread exists yet (nothing before this point starts one).
    match unsafe { fork() }.context("fork")? {
        ForkResult::Parent { child } => {
            drop(ready_wr);
            let mut report = String::new();
            File::from(ready_rd).read_to_string(&mut report).ok();
            let _ = nix::sys::wait::waitpid(child, None);
            match report.trim() {
                "ready" | "busy" => Ok(ExitCode::SUCCESS),
                "" => bail!(
                    "the daemon exited before it was ready; see {}",
                    paths.log_dir().join("agent.log").display()
                ),
                other => bail!("{other}"),
            }
        }
        ForkResult::Child => {
            drop(ready_rd);
            let _ = setsid();
            // Safety: still single-threaded.
            match unsafe { fork() } {
                Ok(ForkResult::Child) => {}
                Ok(ForkResult::Parent { .. }) => unsafe { nix::libc::_exit(0) },
                Err(e) => {
                    notify(Some(ready_wr), &format!("second fork failed: {e}"));
                    unsafe { nix::libc::_exit(1) }
                }
            }
            detach_stdio()?;
            let ready = Some(ready_wr);
            run(paths, ready, false)?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// Points stdio at /dev/null and leaves the caller's working directory.
fn detach_stdio() -> anyhow::Result<()> {
    let null = OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")?;
    for fd in 0..=2 {
        // Safety: dup2 onto the standard descriptors of this process.
        if unsafe { nix::libc::dup2(std::os::fd::AsRawFd::as_raw_fd(&null), fd) } < 0 {
            return Err(std::io::Error::last_os_error()).context("redirecting stdio to /dev/null");
        }
    }
    std::env::set_current_dir("/")?;
    Ok(())
}

/// Writes the readiness report and closes the pipe.
fn notify(ready: Option<OwnedFd>, report: &str) {
    if let Some(fd) = ready {
        let _ = File::from(fd).write_all(format!("{report}\n").as_bytes());
    }
}

fn run(paths: &Paths, mut ready: Option<OwnedFd>, also_stderr: bool) -> anyhow::Result<()> {
    let lock_path = paths.daemon_lock();
    let lock_file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(|e| annotate(e, "open", &lock_path))?;
    let _lock = match Flock::lock(lock_file, FlockArg::LockExclusiveNonblock) {
        Ok(lock) => lock,
        Err((_, Errno::EWOULDBLOCK)) => {
            notify(ready.take(), "busy");
            return Ok(());
        }
        Err((_, e)) => bail!("could not lock {}: {e}", lock_path.display()),
    };
    log::init(paths, also_stderr)?;
    // Safety: setting a signal disposition; no handler code runs.
    unsafe { signal(Signal::SIGHUP, SigHandler::SigIgn) }.context("ignoring SIGHUP")?;
    log_descriptor_limit(crate::pty::nofile::raise(false));
    let result = (|| {
        let config = Config::from_env().map_err(anyhow::Error::msg)?;
        let rt = runtime()?;
        let result = rt.block_on(serve(paths, config, &mut ready, _lock.as_raw_fd()));
        rt.shutdown_timeout(std::time::Duration::from_secs(1));
        result
    })();
    if let Err(e) = &result {
        tracing::error!("daemon failed: {e:#}");
        notify(ready.take(), &format!("daemon failed: {e:#}"));
    }
    result
}

async fn serve(
    paths: &Paths,
    config: Config,
    ready: &mut Option<OwnedFd>,
    lock_fd: RawFd,
) -> anyhow::Result<()> {
    // Before anything that others can observe (the socket): a SIGTERM sent as soon as the socket
    // answers must reach the orderly shutdown, not the default action.
    let term = tokio_signal(SignalKind::terminate())?;
    let int = tokio_signal(SignalKind::interrupt())?;
    let (state, report) = State::open(config, &paths.journal())?;
    tracing::info!(
        incarnation = %state.incarnation(),
        pid = std::process::id(),
        records = report.records,
        skipped = report.skipped,
        restarted = report.restarted.len(),
        "daemon starting"
    );
    log_settings(&state);
    let sock = paths.socket();
    match std::fs::remove_file(&sock) {
        Ok(()) => tracing::info!("removed stale socket {}", sock.display()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(annotate(e, "remove stale socket", &sock).into()),
    }
    let listener = UnixListener::bind(&sock).map_err(|e| annotate(e, "bind", &sock))?;
    std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o600))?;
    tracing::info!("listening on {}", sock.display());
    notify(ready.take(), "ready");
    serve_until_stopped(paths, state, listener, lock_fd, term, int).await
}

/// Logs what raising the soft descriptor limit did ([`crate::pty::nofile::raise`]); a failure only
/// costs the panes beyond the old limit, so the daemon runs on.
fn log_descriptor_limit(raised: std::io::Result<crate::pty::nofile::Raised>) {
    match raised {
        Ok(r) => tracing::info!(
            soft = r.soft,
            programs_get = r.original,
            "descriptor limit (RLIMIT_NOFILE)"
        ),
        Err(e) => tracing::warn!("could not raise the descriptor limit (RLIMIT_NOFILE): {e}"),
    }
}

fn log_settings(state: &State) {
    let settings = state.config();
    tracing::info!(
        replay_bytes = settings.replay_bytes,
        window = settings.window,
        window_budget = settings.window_budget,
        scrollback_lines = ?settings.scrollback_lines,
        pass_stdio = settings.pass_stdio,
        unused_grace = ?settings.policy.unused_grace,
        idle_expiry = ?settings.policy.idle_expiry,
        suggest_after = ?settings.policy.suggest_after,
        "settings (scrollback_lines None: terminal model off; a None duration: off)"
    );
}

/// Why the accept loop stopped.
enum Stop {
    Signal(&'static str),
    Upgrade(PathBuf),
}

/// Serves until SIGTERM/SIGINT, handing over on an accepted upgrade (and serving on when it
/// does not happen); then ends the PTYs and removes the socket.
async fn serve_until_stopped(
    paths: &Paths,
    state: State,
    listener: UnixListener,
    lock_fd: RawFd,
    mut term: TokioSignal,
    mut int: TokioSignal,
) -> anyhow::Result<()> {
    state.set_paths(paths);
    let grace = state.config().kill_grace;
    loop {
        let stop = async {
            tokio::select! {
                _ = term.recv() => Stop::Signal("SIGTERM"),
                _ = int.recv() => Stop::Signal("SIGINT"),
                bin = state.upgrade_ordered() => Stop::Upgrade(bin),
            }
        };
        match server::run(&listener, state.clone(), stop).await {
            Stop::Signal(which) => {
                tracing::info!("{which} received; shutting down");
                break;
            }
            Stop::Upgrade(bin) => {
                let fds = DaemonFds {
                    listener: listener.as_raw_fd(),
                    lock: lock_fd,
                };
                let st = state.clone();
                // Returns only when the handover did not happen: serve again (or stop, when a
                // stop signal came meanwhile: the cut checks for it last).
                let handover = tokio::task::spawn_blocking(move || st.hand_over(&bin, fds));
                tokio::pin!(handover);
                let mut stop = None;
                loop {
                    tokio::select! {
                        _ = &mut handover => break,
                        _ = term.recv() => stop = Some("SIGTERM"),
                        _ = int.recv() => stop = Some("SIGINT"),
                    }
                    state.note_stop_signal();
                }
                if let Some(which) = stop {
                    tracing::info!("{which} received during the upgrade; shutting down");
                    break;
                }
            }
        }
    }
    state.shutdown(grace).await;
    let _ = std::fs::remove_file(paths.socket());
    tracing::info!("daemon stopped");
    Ok(())
}

/// `relay-agent daemon --resume-fd N [--fallback-fd M | --fallback-reason WHY]`: the new code
/// after a live upgrade's `execve`, in the old daemon's process (already detached; stdio is
/// `/dev/null`; SIGTERM/SIGINT blocked, and pending if they came, until the handlers are in
/// place). Reads the state at descriptor `state_fd`; when it cannot, returns the process to the
/// old binary open at `fallback_fd` with the same state (so no shell is lost to a binary that
/// cannot resume). `fallback_reason`: this is that old binary, taking its shells back.
///
/// # Errors
/// The state cannot be read and there is no old binary to return to (or it did not start);
/// logging, journal or runtime start-up failures.
pub fn resume(
    paths: &Paths,
    state_fd: RawFd,
    fallback_fd: Option<RawFd>,
    fallback_reason: Option<String>,
) -> anyhow::Result<ExitCode> {
    // Safety: descriptor numbers the old code passed for descriptors it left open for us.
    let state_fd = unsafe { OwnedFd::from_raw_fd(state_fd) };
    let fallback = fallback_fd.map(|fd| unsafe { OwnedFd::from_raw_fd(fd) });
    // Neither may reach a shell or a later upgrade's new code; both are closed once resumed.
    let _ = set_cloexec(state_fd.as_fd(), true);
    if let Some(fd) = &fallback {
        let _ = set_cloexec(fd.as_fd(), true);
    }
    // First: a return to the old binary below must carry the original limit on (see `nofile`).
    let raised = crate::pty::nofile::raise(true);
    // The new code (it has an old binary to return to): any failure from here until every PTY
    // is adopted returns the process to the old code (`upgrade::rescue`).
    let new_code = fallback.is_some();
    if let Some(exe) = &fallback {
        rescue::arm(exe.as_fd(), state_fd.as_fd(), paths.home());
    }
    if new_code && fault::at("resume-start") {
        panic!("test fault resume-start: a crash before the state is read");
    }
    let back = |why: String| rescue::fall_back(&why);
    let mut bytes = probe::read_state(state_fd.as_fd()).map_err(|e| back(e.to_string()))?;
    if new_code && fault::at("resume-state") {
        bytes.truncate(bytes.len() / 2);
    }
    let handover = upgrade::decode(&bytes).map_err(|e| back(e.to_string()))?;
    drop(bytes);
    rescue::cover(&handover);
    log::init(paths, false).map_err(|e| back(format!("{e:#}")))?;
    // Safety: setting a signal disposition; no handler code runs.
    unsafe { signal(Signal::SIGHUP, SigHandler::SigIgn) }
        .map_err(|e| back(format!("ignoring SIGHUP: {e}")))?;
    log_descriptor_limit(raised);
    let config = Config::from_env().map_err(back)?;
    let rt = runtime().map_err(|e| back(format!("starting the runtime: {e}")))?;
    let mut handed = Some((state_fd, fallback));
    let result = rt.block_on(async {
        let term = tokio_signal(SignalKind::terminate())
            .map_err(|e| back(format!("the SIGTERM handler: {e}")))?;
        let int = tokio_signal(SignalKind::interrupt())
            .map_err(|e| back(format!("the SIGINT handler: {e}")))?;
        let (listener_fd, lock_fd) = (handover.listener_fd, handover.lock_fd);
        let resumed = State::resume(config, &paths.journal(), handover, fallback_reason)
            .map_err(|e| back(e.to_string()))?;
        // Safety: the listener and the lock were handed over by number and are ours alone.
        let listener = unsafe { std::os::unix::net::UnixListener::from_raw_fd(listener_fd) };
        let lock = unsafe { File::from_raw_fd(lock_fd) };
        let ready = || -> anyhow::Result<_> {
            set_cloexec(listener.as_fd(), true)?;
            set_cloexec(lock.as_fd(), true)?;
            listener.set_nonblocking(true)?;
            Ok(())
        };
        ready().map_err(|e| back(format!("the handed-over listener or lock: {e:#}")))?;
        // The same open file: the lock is held already, this keeps it with the process.
        let lock = Flock::lock(lock, FlockArg::LockExclusiveNonblock)
            .map_err(|(_, e)| back(format!("the handed-over daemon lock: {e}")))?;
        let listener = UnixListener::from_std(listener)
            .map_err(|e| back(format!("the handed-over listener: {e}")))?;
        // Committed: the shells are this code's now; what the old code kept open can close.
        let state = resumed.start();
        drop(handed.take());
        unblock_stop_signals();
        tracing::info!(pid = std::process::id(), "serving after the upgrade");
        serve_until_stopped(paths, state, listener, lock.as_raw_fd(), term, int).await
    });
    rt.shutdown_timeout(std::time::Duration::from_secs(1));
    if let Err(e) = &result {
        tracing::error!("daemon failed: {e:#}");
    }
    result.map(|()| ExitCode::SUCCESS)
}

/// Unblocks SIGTERM and SIGINT in this thread (the old code blocked them across `execve`; one
/// that arrived meanwhile is delivered now, to the handlers just installed).
fn unblock_stop_signals() {
    use nix::sys::signal::{SigSet, SigmaskHow};
    let mut stops = SigSet::empty();
    stops.add(Signal::SIGTERM);
    stops.add(Signal::SIGINT);
    let _ = nix::sys::signal::pthread_sigmask(SigmaskHow::SIG_UNBLOCK, Some(&stops), None);
}

/// Runtime threads at most, whatever the host's core count: the daemon's work is IO and short
/// bursts, and PTYs cost no threads of their own (`pty/mod.rs`).
const MAX_WORKERS: usize = 4;
/// Blocking-pool threads at most: spawns, reaps, exits, snapshots, upgrade probes — each short;
/// more queue (tokio's default, 512, would let a mass exit start hundreds of threads).
const MAX_BLOCKING: usize = 32;

/// The daemon's runtime: a bounded number of threads however many PTYs it serves.
fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .worker_threads(cores.clamp(1, MAX_WORKERS))
        .max_blocking_threads(MAX_BLOCKING)
        .thread_name("relay-agent")
        .build()
}
