//! One PTY and its process: spawning, the reader, writer and waiter tasks, input, resize,
//! signals, kill.
//!
//! A PTY is its master descriptor plus its child's pid ([`pty_io`] does the raw operations), so
//! one path serves a PTY spawned here and one handed over by the daemon this one replaced
//! ([`Pty::assemble`], [`crate::upgrade`]).
//!
//! A PTY costs no thread of its own (1,000 idle panes must not mean 3,000 threads): its master
//! is non-blocking and registered once with the daemon's tokio reactor ([`AsyncFd`]), and three
//! tasks serve it (`tasks.rs`):
//! - **reader**: always drains the PTY into the replay [`Ring`] and publishes the new end offset
//!   on a `watch` channel ([`Progress`]); it never waits for a client (rule F).
//! - **writer**: writes queued input when the terminal takes it, so a shell that does not read
//!   its input never blocks the daemon.
//! - **waiter**: waits for the child to exit *without reaping it* ([`crate::pty::reaper`], one
//!   `SIGCHLD` listener for all PTYs), then reaps it under the reap lock, waits for reader EOF
//!   (bounded by a short grace so a background process holding the terminal cannot delay it),
//!   and hands the status to the daemon.
//!
//! Killing is race-free against pid reuse: signals are only sent while holding the reap lock and
//! only if the child has not been reaped, so the pid (and its process group, whose leader it is)
//! still belongs to our child. `waitpid(-1)` is never used.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use relay_protocol::{Binding, EndReason, ErrorReply, ExitStatus, SpawnSpec, TermSize};
use tokio::io::unix::AsyncFd;
use tokio::sync::{mpsc, oneshot, watch};

use crate::lease::counters::CounterNote;
use crate::output::hold::HoldGate;
use crate::output::ring::Ring;
use crate::output::screen::{PtyScreen, ScreenFeed};
use crate::pty::io as pty_io;
use crate::runtime::LockExt;
use input_seq::{Applied, WriterTable};
use spawn::SpawnError;

pub mod input_seq;
pub mod io;
pub mod kill;
pub mod nofile;
pub mod orphan;
pub mod reaper;
pub mod shell;
pub mod spawn;
mod tasks;
pub mod wire_signal;

/// How an ended PTY is announced to subscribers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExitInfo {
    /// The binding that ended.
    pub binding: Binding,
    /// Exit status.
    pub status: ExitStatus,
    /// Why it ended.
    pub reason: EndReason,
    /// Output end offset at exit; `Exited` goes out after output up to here.
    pub event_key: u64,
}

/// What subscribers watch: the ring's end offset and, once ended, the exit.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Progress {
    /// End offset of the output.
    pub end: u64,
    /// Set once the PTY ended and its lease was updated.
    pub exit: Option<ExitInfo>,
}

/// A running (or just ended) PTY. Shared as `Arc<Pty>` by the daemon and subscriptions.
pub struct Pty {
    pub(crate) binding: Binding,
    pub(crate) pid: u32,
    /// The PTY's master side, non-blocking, registered with the reactor (the reader and writer
    /// tasks share it).
    pub(crate) master: Arc<AsyncFd<OwnedFd>>,
    input: mpsc::UnboundedSender<Vec<u8>>,
    pub(crate) pending_input: Arc<AtomicUsize>,
    /// Last `InputSeq` seq applied per writer; its lock also covers the enqueue of that input.
    pub(crate) input_seq: Mutex<WriterTable>,
    pub(crate) ring: Arc<Mutex<Ring>>,
    progress: watch::Sender<Progress>,
    /// `true` once the child was reaped; signals are only sent while this is `false`.
    pub(crate) reaped: Arc<Mutex<bool>>,
    pub(crate) last_output_ms: Arc<AtomicU64>,
    /// Last input time, ms since the Unix epoch; 0 = never.
    pub(crate) last_input_ms: AtomicU64,
    /// The child's start time (clock ticks since boot), naming its session for the sweep.
    pub(crate) start_ticks: Option<u64>,
    /// Replaced by a newer PTY for its pane (rule D); fenced requests refuse it.
    superseded: AtomicBool,
    /// An end was started ([`Pty::kill`]); later requests share its outcome.
    killing: AtomicBool,
    /// What the end did, once known.
    kill_outcome: watch::Sender<Option<kill::KillOutcome>>,
    size: Mutex<TermSize>,
    /// The terminal model, unless the daemon runs with it off.
    pub(crate) screen: Option<ScreenFeed>,
    /// Output counters changed since they were journaled (see [`crate::lease::counters`]).
    counters: Arc<CounterNote>,
    /// Held by the reader around each read and by the writer around each write; a live upgrade
    /// takes it once after pausing IO to know that neither touches the master any more.
    pub(crate) io_gate: Arc<Mutex<()>>,
    /// Lossless consumers' holds: the reader never drops a byte they have not acknowledged.
    holds: Arc<HoldGate>,
}

/// A PTY whose waiter is not started yet (the daemon first records the lease).
pub struct Spawned {
    /// The PTY.
    pub pty: Arc<Pty>,
    /// Recorded command line.
    pub command: Vec<String>,
    eof: oneshot::Receiver<()>,
}

/// What makes a running PTY: a fresh spawn's, or what a handover carried across `execve`.
pub struct PtyParts {
    /// The binding it serves.
    pub binding: Binding,
    /// The child's pid (our own child).
    pub pid: u32,
    /// The master side.
    pub master: OwnedFd,
    /// Current size.
    pub size: TermSize,
    /// The replay ring, holding output up to its end offset.
    pub ring: Ring,
    /// The terminal model, fed up to the ring's end; `None` with the model off.
    pub screen: Option<PtyScreen>,
    /// The child's start time (clock ticks since boot).
    pub start_ticks: Option<u64>,
    /// Last output time, ms since the Unix epoch; 0 = never.
    pub last_output_ms: u64,
    /// Last input time, ms since the Unix epoch; 0 = never.
    pub last_input_ms: u64,
    /// Replaced by a newer PTY for its pane.
    pub superseded: bool,
    /// Last `InputSeq` seq applied per writer.
    pub input_seq: WriterTable,
    /// Lossless consumers' holds (empty for a new PTY; carried by a handover).
    pub holds: Arc<HoldGate>,
}

impl Pty {
    /// Spawns `spec` in a new PTY for `binding`, with a replay ring of `ring_bytes` and, unless
    /// `scrollback` is `None` (model off), a terminal model keeping that many scrollback lines.
    /// The reader notes output on `counters` (at most one queue entry until it is taken).
    ///
    /// # Errors
    /// [`ErrorReply::SpawnFailed`] (bad cwd, program not found, PTY allocation failed) or
    /// [`ErrorReply::BadRequest`] (bad environment); nothing keeps running then.
    pub fn spawn(
        binding: Binding,
        spec: &SpawnSpec,
        ring_bytes: usize,
        scrollback: Option<usize>,
        counters: Arc<CounterNote>,
    ) -> Result<Spawned, ErrorReply> {
        let prepared = shell::prepare(spec)?;
        let size = if spec.size.cols == 0 || spec.size.rows == 0 {
            TermSize::default()
        } else {
            spec.size
        };
        let failed = |what: &str, e: anyhow::Error| ErrorReply::SpawnFailed {
            message: format!("{what}: {e:#}"),
        };
        let spawn::Child { master, pid } =
            spawn::spawn(&prepared.program, size).map_err(|e| match e {
                SpawnError::Pty(ref io) => {
                    let fix = match io.raw_os_error() {
                        Some(nix::libc::EMFILE | nix::libc::ENFILE) => {
                            "the descriptor limit is reached (ulimit -n, fs.file-max)"
                        }
                        _ => "check /dev/ptmx, /dev/pts and /proc/sys/kernel/pty/max",
                    };
                    ErrorReply::SpawnFailed {
                        message: format!("{e}; {fix}"),
                    }
                }
                SpawnError::Start(why) => ErrorReply::SpawnFailed {
                    message: format!(
                        "could not start {:?} in {}: {why}",
                        prepared.command,
                        prepared.cwd.display()
                    ),
                },
            })?;
        let screen = scrollback.map(|lines| PtyScreen::new(binding.pty, size, lines));
        let parts = PtyParts {
            binding,
            pid,
            master,
            size,
            ring: Ring::new(ring_bytes),
            screen,
            start_ticks: crate::sys::procfs::stat(pid).map(|st| st.start_ticks),
            last_output_ms: 0,
            last_input_ms: 0,
            superseded: false,
            input_seq: WriterTable::new(),
            holds: HoldGate::new(),
        };
        let mut spawned = Pty::assemble(parts, counters).map_err(|(e, _master)| {
            let _ = killpg(Pid::from_raw(pid as i32), Signal::SIGKILL);
            let _ = pty_io::reap(pid);
            failed("could not start the PTY's reader/writer", e.into())
        })?;
        spawned.command = prepared.command;
        Ok(spawned)
    }

    /// Starts the reader and writer tasks of a PTY made of `parts` (a fresh spawn, or one
    /// handed over: the reader continues at the ring's end offset). The waiter is started by
    /// [`Spawned::start_waiter`] once the lease is recorded. Must run within the daemon's tokio
    /// runtime.
    ///
    /// # Errors
    /// No runtime, or the master could not be made non-blocking or registered with the reactor;
    /// with the master, still open (a handed-over one must not close: its shell would hang up).
    pub fn assemble(
        parts: PtyParts,
        counters: Arc<CounterNote>,
    ) -> Result<Spawned, (std::io::Error, OwnedFd)> {
        let PtyParts {
            binding,
            pid,
            master,
            size,
            ring,
            screen,
            start_ticks,
            last_output_ms,
            last_input_ms,
            superseded,
            input_seq,
            holds,
        } = parts;
        if let Err(e) = tokio::runtime::Handle::try_current() {
            return Err((std::io::Error::other(e), master));
        }
        if let Err(e) = pty_io::set_nonblocking(master.as_fd(), true) {
            return Err((e, master));
        }
        // Safety: the `OwnedFd` is open and owned by the `AsyncFd` for its whole life; its
        // descriptor number does not change.
        let master = unsafe { AsyncFd::register(master) }.map_err(|e| {
            let (master, e) = e.into_parts();
            (e, master)
        })?;
        let master = Arc::new(master);
        let (input, input_rx) = mpsc::unbounded_channel::<Vec<u8>>();
        let (eof_tx, eof) = oneshot::channel::<()>();
        let ring = Arc::new(Mutex::new(ring));
        let screen = screen.map(|screen| ScreenFeed {
            screen: Arc::new(screen),
            ring: Arc::clone(&ring),
        });
        let end = ring.lock_unpoisoned().end();
        let pty = Arc::new(Pty {
            binding,
            pid,
            master,
            input,
            pending_input: Arc::new(AtomicUsize::new(0)),
            input_seq: Mutex::new(input_seq),
            ring,
            progress: watch::Sender::new(Progress { end, exit: None }),
            reaped: Arc::new(Mutex::new(false)),
            last_output_ms: Arc::new(AtomicU64::new(last_output_ms)),
            last_input_ms: AtomicU64::new(last_input_ms),
            start_ticks,
            superseded: AtomicBool::new(superseded),
            killing: AtomicBool::new(false),
            kill_outcome: watch::Sender::new(None),
            size: Mutex::new(size),
            screen,
            counters,
            io_gate: Arc::new(Mutex::new(())),
            holds,
        });
        pty.start_reader(eof_tx);
        pty.start_writer(input_rx);
        Ok(Spawned {
            pty,
            command: Vec::new(),
            eof,
        })
    }

    /// The binding this PTY serves.
    pub fn binding(&self) -> &Binding {
        &self.binding
    }

    /// Child process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The replay ring (locked briefly by readers; never across `.await`).
    pub fn ring(&self) -> &Mutex<Ring> {
        &self.ring
    }

    /// The terminal model, unless the daemon runs with it off.
    pub fn screen(&self) -> Option<&Arc<PtyScreen>> {
        self.screen.as_ref().map(|f| &f.screen)
    }

    /// The holds of lossless consumers on this PTY's output (see [`crate::output::hold`]).
    pub fn holds(&self) -> &Arc<HoldGate> {
        &self.holds
    }

    /// A receiver of output/exit progress.
    pub fn watch(&self) -> watch::Receiver<Progress> {
        self.progress.subscribe()
    }

    /// The current output end offset.
    pub fn end_offset(&self) -> u64 {
        self.progress.borrow().end
    }

    /// Whether the PTY ended (its exit was published to subscribers).
    pub fn has_ended(&self) -> bool {
        self.progress.borrow().exit.is_some()
    }

    /// Last output time (ms since the Unix epoch), if any output was seen.
    pub fn last_output_ms(&self) -> Option<u64> {
        Some(self.last_output_ms.load(Ordering::Relaxed)).filter(|&t| t > 0)
    }

    /// The note the reader sets when output arrived after the counters were journaled.
    pub fn counters(&self) -> &CounterNote {
        &self.counters
    }

    /// Last input time (ms since the Unix epoch), if any input was queued.
    pub fn last_input_ms(&self) -> Option<u64> {
        Some(self.last_input_ms.load(Ordering::Relaxed)).filter(|&t| t > 0)
    }

    /// The child's start time in clock ticks since boot, if it could be read at spawn.
    pub fn start_ticks(&self) -> Option<u64> {
        self.start_ticks
    }

    /// Whether a newer PTY replaced this one for its pane.
    pub fn is_superseded(&self) -> bool {
        self.superseded.load(Ordering::Acquire)
    }

    /// Whether an end was started ([`Pty::kill`]).
    pub fn is_ending(&self) -> bool {
        self.killing.load(Ordering::Acquire)
    }

    /// Marks this PTY superseded (its process keeps running).
    pub fn set_superseded(&self) {
        self.superseded.store(true, Ordering::Release);
    }

    /// Current size.
    pub fn size(&self) -> TermSize {
        *self.size.lock_unpoisoned()
    }

    /// Queues bytes for the PTY's input.
    ///
    /// # Errors
    /// [`ErrorReply::LimitExceeded`] when more than `max_pending` bytes are already queued (the
    /// program is not reading its input); [`ErrorReply::Internal`] when the writer is gone.
    pub fn write_input(&self, data: Vec<u8>, max_pending: usize) -> Result<(), ErrorReply> {
        let len = data.len();
        let before = self.pending_input.fetch_add(len, Ordering::AcqRel);
        if before > 0 && before + len > max_pending {
            self.pending_input.fetch_sub(len, Ordering::AcqRel);
            return Err(ErrorReply::LimitExceeded {
                what: format!(
                    "queued input for {} (the program is not reading)",
                    self.binding
                ),
                limit: max_pending as u64,
            });
        }
        self.input.send(data).map_err(|_| ErrorReply::Internal {
            message: format!("input writer of {} is gone", self.binding),
        })?;
        self.last_input_ms.store(crate::now_ms(), Ordering::Relaxed);
        Ok(())
    }

    /// `InputSeq`: queues bytes for the PTY's input unless `seq` is not above the last seq
    /// applied for `writer` (a resent duplicate: [`Applied::Duplicate`], nothing queued). The
    /// seq check and the enqueue happen under this PTY's writer-table lock, so two connections
    /// racing the same `(writer, seq)` queue it once, and one writer's input is queued in
    /// increasing seq order. No allocation or syscall beyond [`Pty::write_input`]'s.
    ///
    /// # Errors
    /// As [`Pty::write_input`]; the seq is then not recorded, so the same request can be
    /// retried.
    pub fn write_input_seq(
        &self,
        writer: u64,
        seq: u64,
        data: Vec<u8>,
        max_pending: usize,
    ) -> Result<Applied, ErrorReply> {
        let mut table = self.input_seq.lock_unpoisoned();
        table.apply(writer, seq, || self.write_input(data, max_pending))
    }

    /// Sets the terminal size.
    ///
    /// # Errors
    /// [`ErrorReply::BadRequest`] for a zero dimension; [`ErrorReply::LimitExceeded`] beyond
    /// [`MAX_COLS`](crate::limits::MAX_COLS) × [`MAX_ROWS`](crate::limits::MAX_ROWS);
    /// [`ErrorReply::Internal`] if the ioctl fails.
    pub fn resize(&self, size: TermSize) -> Result<(), ErrorReply> {
        if size.cols == 0 || size.rows == 0 {
            return Err(ErrorReply::BadRequest {
                message: format!("size {}x{} must be at least 1x1", size.cols, size.rows),
            });
        }
        crate::limits::check_size(size)?;
        pty_io::set_size(self.master.get_ref().as_fd(), size).map_err(|e| {
            ErrorReply::Internal {
                message: format!("resize of {} failed: {e}", self.binding),
            }
        })?;
        *self.size.lock_unpoisoned() = size;
        if let Some(feed) = &self.screen {
            feed.screen.resize(&feed.ring, size);
        }
        Ok(())
    }

    /// Sends `signal` to the PTY's foreground process group (the shell's group if none).
    ///
    /// # Errors
    /// [`ErrorReply::BadRequest`] for a number that is not a Linux signal number 1–31 (the
    /// wire's numbering, mapped by [`crate::pty::wire_signal::from_wire`]).
    pub fn signal(&self, signal: i32) -> Result<(), ErrorReply> {
        let sig = crate::pty::wire_signal::from_wire(signal)?;
        let reaped = self.reaped.lock_unpoisoned();
        if *reaped {
            return Ok(());
        }
        let group =
            pty_io::foreground_group(self.master.get_ref().as_fd()).unwrap_or(self.pid as i32);
        let _ = killpg(Pid::from_raw(group), sig);
        Ok(())
    }

    /// Sends `signal` to the child's process group if the child is not reaped yet. Returns
    /// whether it was sent.
    pub fn signal_group_if_ours(&self, signal: Signal) -> bool {
        let reaped = self.reaped.lock_unpoisoned();
        !*reaped && killpg(Pid::from_raw(self.pid as i32), signal).is_ok()
    }

    /// Announces the end to subscribers (after the lease was updated).
    pub fn publish_exit(&self, status: ExitStatus, reason: EndReason) {
        self.progress.send_modify(|p| {
            p.exit = Some(ExitInfo {
                binding: self.binding.clone(),
                status,
                reason,
                event_key: p.end,
            })
        });
    }
}
