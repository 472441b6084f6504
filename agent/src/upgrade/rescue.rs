//! The new code's way back: from the moment a live upgrade's new binary starts resuming (its
//! arguments parsed) until it has adopted every handed-over PTY and is about to serve, any
//! failure — an error it returns, a panic on any thread, or a fatal signal (`SIGSEGV`, `SIGBUS`,
//! `SIGILL`, `SIGFPE`, `SIGABRT`) — gives the process back to the old binary (`fexecve` of the
//! copy the old code kept open) with the same state, told why. The pid never changes, so the
//! shells stay its children and no PTY master is ever closed: a new binary that crashes while
//! resuming costs no shell.
//!
//! Until [`commit`] the new code reads no output, writes no input, reaps no child and runs no
//! policy timer (`State::resume` holds those back for `Resumed::start`), so the old code resumes
//! from a state that is still exactly true: nothing is lost or done twice. (The journal is
//! rewritten from the same book before that, as on any start.)
//!
//! A signal handler may not allocate or lock, so everything the way back needs (arguments,
//! environment, the descriptors to hand over again) is prepared by [`arm`] and [`cover`], and
//! the handler only calls async-signal-safe functions (`fcntl`, `pthread_sigmask`, `fexecve`;
//! signal-safety(7)).

use std::ffi::{c_char, c_int, CString};
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};

use nix::libc;
use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};

use super::probe::{self, Fallback};
use super::Handover;
use crate::sys::process::exec_open_file;

/// The signals that end a process by default because its code went wrong.
const FATAL: [Signal; 5] = [
    Signal::SIGSEGV,
    Signal::SIGBUS,
    Signal::SIGILL,
    Signal::SIGFPE,
    Signal::SIGABRT,
];

/// Whether a failure now returns the process to the old binary.
static ARMED: AtomicBool = AtomicBool::new(false);
/// The dispositions of [`FATAL`] before [`arm`], restored by [`commit`] (Rust's own
/// stack-overflow report is one of them).
static BEFORE: std::sync::Mutex<Vec<(Signal, SigAction)>> = std::sync::Mutex::new(Vec::new());
/// Longest reason passed to the old binary, in bytes: it goes on the command line (one argument
/// may hold at most 128 KiB, `MAX_ARG_STRLEN`, execve(2)), and a panic message can be anything.
const MAX_REASON: usize = 4096;
/// What the way back needs, prepared; replaced (never freed: a signal handler on another thread
/// may be reading it) when [`cover`] adds the handed-over descriptors. A few KiB per upgrade.
static WAY: AtomicPtr<Way> = AtomicPtr::new(std::ptr::null_mut());

/// C strings and the NULL-terminated pointer array `execve` takes (the pointers point into
/// `strings`, which never move once built).
struct CArgs {
    _strings: Vec<CString>,
    ptrs: Vec<*const c_char>,
}

impl CArgs {
    fn new(strings: Vec<CString>) -> Self {
        let ptrs = strings
            .iter()
            .map(|s| s.as_ptr())
            .chain([std::ptr::null()])
            .collect();
        CArgs {
            _strings: strings,
            ptrs,
        }
    }
}

struct Way {
    /// The old binary, open.
    exe: RawFd,
    /// The state file.
    state: RawFd,
    home: PathBuf,
    /// Every descriptor that must cross `execve` again: the state, the listener, the lock and
    /// the PTY masters.
    crossing: Vec<RawFd>,
    /// The PTY masters, handed back blocking as the old code handed them.
    masters: Vec<RawFd>,
    env: CArgs,
    /// The arguments for each of [`FATAL`], naming the signal as the reason.
    on_signal: Vec<(c_int, CArgs)>,
    /// `SIGTERM` and `SIGINT`: blocked across `execve`, as the old code's resume expects.
    stops: libc::sigset_t,
}

/// Arms the way back to the old binary open at `exe`, resuming from `state` with `RELAY_HOME`
/// = `home`: call first in the new code, once the descriptor limit is settled (the environment
/// is taken now). Installs a panic hook (once per process) and handlers for [`FATAL`].
pub fn arm(exe: BorrowedFd<'_>, state: BorrowedFd<'_>, home: &Path) {
    install(prepare(exe.as_raw_fd(), state.as_raw_fd(), home, None, &[]));
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if ARMED.load(Ordering::SeqCst) {
                // Back first: logging could be what panicked, holding its lock.
                let why = format!("the new agent panicked while resuming: {info}");
                let e = go_back(&why);
                tracing::error!("{why}; the old agent did not start again: {e}");
            }
            previous(info)
        }));
    });
    let handler = SigAction::new(
        SigHandler::Handler(on_fatal),
        // Its own stack (a stack overflow is one cause); the signal stays unblocked across
        // `execve`; a second fault while handling ends the process as usual.
        SaFlags::SA_ONSTACK | SaFlags::SA_NODEFER | SaFlags::SA_RESETHAND,
        SigSet::empty(),
    );
    let mut before = BEFORE.lock().unwrap_or_else(|p| p.into_inner());
    for signal in FATAL {
        // Safety: the handler calls only async-signal-safe functions.
        if let Ok(old) = unsafe { sigaction(signal, &handler) } {
            before.push((signal, old));
        }
    }
    ARMED.store(true, Ordering::SeqCst);
}

/// Adds what `handover` passed by number (listener, lock, PTY masters) to what goes back.
/// Does nothing unless armed.
pub fn cover(handover: &Handover) {
    let Some(way) = current() else { return };
    let masters: Vec<RawFd> = handover.ptys.iter().map(|p| p.master_fd).collect();
    install(prepare(
        way.exe,
        way.state,
        &way.home.clone(),
        Some((handover.listener_fd, handover.lock_fd)),
        &masters,
    ));
}

/// Returns the process to the old binary, telling it `why`. Returns only when that is
/// impossible (not armed: this is the old code, or the upgrade's new code committed), with an
/// error that says both.
pub fn fall_back(why: &str) -> anyhow::Error {
    if !ARMED.load(Ordering::SeqCst) {
        return anyhow::anyhow!("cannot resume: {why}");
    }
    let err = go_back(why);
    anyhow::anyhow!("cannot resume ({why}), and the old agent did not start again: {err}")
}

/// Every handed-over PTY is adopted and the daemon is about to serve: failures from now on are
/// the new code's own. Restores the handling of [`FATAL`] from before [`arm`]. Does nothing
/// unless armed.
pub fn commit() {
    if !ARMED.swap(false, Ordering::SeqCst) {
        return;
    }
    let before = std::mem::take(&mut *BEFORE.lock().unwrap_or_else(|p| p.into_inner()));
    for (signal, old) in before {
        // Safety: restoring the disposition `arm` replaced.
        let _ = unsafe { sigaction(signal, &old) };
    }
}

fn current() -> Option<&'static Way> {
    // Safety: a non-null pointer came from `Box::into_raw` and is never freed.
    unsafe { WAY.load(Ordering::SeqCst).as_ref() }
}

fn install(way: Way) {
    WAY.store(Box::into_raw(Box::new(way)), Ordering::SeqCst);
}

/// `own`: the listener and the lock, once the handover named them.
fn prepare(
    exe: RawFd,
    state: RawFd,
    home: &Path,
    own: Option<(RawFd, RawFd)>,
    masters: &[RawFd],
) -> Way {
    // Safety: the number of an open descriptor the caller keeps open while armed.
    let state_fd = unsafe { BorrowedFd::borrow_raw(state) };
    let on_signal = FATAL
        .iter()
        .map(|s| {
            let why = format!("the new agent died of {} while resuming", s.as_str());
            (
                *s as c_int,
                CArgs::new(probe::resume_args(state_fd, Fallback::Because(&why))),
            )
        })
        .collect();
    let mut crossing = vec![state];
    crossing.extend(
        own.into_iter()
            .flat_map(|(listener, lock)| [listener, lock]),
    );
    crossing.extend_from_slice(masters);
    let mut stops = SigSet::empty();
    stops.add(Signal::SIGTERM);
    stops.add(Signal::SIGINT);
    Way {
        exe,
        state,
        home: home.to_path_buf(),
        crossing,
        masters: masters.to_vec(),
        env: CArgs::new(probe::environment(home)),
        on_signal,
        stops: *stops.as_ref(),
    }
}

/// Hands the descriptors back as the old code handed them and `fexecve`s the old binary with
/// `args`. Async-signal-safe. Returns only on failure, with `errno`.
fn exec_back(way: &Way, args: &CArgs) -> std::io::Error {
    // Safety: plain descriptor and mask calls on numbers and a set owned by `way`; `fexecve`
    // gets NULL-terminated arrays of C strings that live as long as `way`.
    unsafe {
        for &fd in &way.crossing {
            libc::fcntl(fd, libc::F_SETFD, 0);
        }
        for &fd in &way.masters {
            let flags = libc::fcntl(fd, libc::F_GETFL);
            if flags >= 0 {
                libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK);
            }
        }
        let mut before: libc::sigset_t = std::mem::zeroed();
        libc::pthread_sigmask(libc::SIG_BLOCK, &way.stops, &mut before);
        let err = exec_open_file(way.exe, args.ptrs.as_ptr(), way.env.ptrs.as_ptr());
        libc::pthread_sigmask(libc::SIG_SETMASK, &before, std::ptr::null_mut());
        err
    }
}

/// The way back outside a signal handler: the reason may be anything (it is cut to
/// [`MAX_REASON`]). When `fexecve` fails, the descriptors are put back as they were, so the new
/// code can go on (blocking masters would stall its readers; inheritable ones would leak into
/// shells).
fn go_back(why: &str) -> std::io::Error {
    let Some(way) = current() else {
        return std::io::Error::other("the way back was not prepared");
    };
    let mut cut = why.len().min(MAX_REASON);
    while !why.is_char_boundary(cut) {
        cut -= 1;
    }
    // Safety: see `prepare`.
    let state = unsafe { BorrowedFd::borrow_raw(way.state) };
    let args = CArgs::new(probe::resume_args(state, Fallback::Because(&why[..cut])));
    // Safety: reading and restoring the flags of descriptors `way` names, open while armed.
    let flags: Vec<(RawFd, c_int, c_int)> = way
        .crossing
        .iter()
        .map(|&fd| unsafe {
            (
                fd,
                libc::fcntl(fd, libc::F_GETFD),
                libc::fcntl(fd, libc::F_GETFL),
            )
        })
        .collect();
    let err = exec_back(way, &args);
    for (fd, fd_flags, status_flags) in flags {
        // Safety: as above.
        unsafe {
            if fd_flags >= 0 {
                libc::fcntl(fd, libc::F_SETFD, fd_flags);
            }
            if status_flags >= 0 {
                libc::fcntl(fd, libc::F_SETFL, status_flags);
            }
        }
    }
    err
}

extern "C" fn on_fatal(signal: c_int) {
    if ARMED.load(Ordering::SeqCst) {
        if let Some(way) = current() {
            if let Some((_, args)) = way.on_signal.iter().find(|(s, _)| *s == signal) {
                exec_back(way, args);
            }
        }
    }
    // Not armed, or the old binary did not start: end as the signal would have (SA_RESETHAND
    // restored the default disposition on entry).
    // Safety: re-raising a signal whose disposition is the default.
    unsafe {
        libc::raise(signal);
    }
}
