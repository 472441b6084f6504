//! `relay shell` and `relay attach`: connect, open (create-or-attach; create then attach with an
//! agent before protocol 1.1) or attach, with full replay, then pump keystrokes, window sizes and
//! output until the shell exits or the user detaches with `~.`.
//!
//! Rule G: once attached, the terminal loop never waits for the agent. Keystrokes go through a
//! bounded queue and their own task ([`crate::input`]), resizes through another; so `~.`, SIGTERM
//! and SIGHUP are handled at once even when the agent is stopped. A detach restores the terminal
//! first and then spends at most [`DETACH_GRACE`] delivering typed input and the `Detach`.

use std::fmt::Display;
use std::time::Duration;

use anyhow::Context;
use relay_connector::{PaneEvent, PaneHandle, Session};
use relay_protocol::{
    Binding, Capability, EndReason, ErrorReply, ExitStatus, PaneKey, SpawnSpec, TermSize,
};
use tokio::io::AsyncWriteExt;
use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio::sync::{mpsc, watch};

use crate::cli::PaneArgs;
use crate::escape::{Action, Escapes, HELP};
use crate::input::{InputFailures, InputQueue};
use crate::terminal::{self, RawMode};
use crate::Failure;

/// Whether a missing shell may be created.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// `relay shell`: create if needed, then attach.
    Shell,
    /// `relay attach`: attach only.
    Attach,
}

enum Outcome {
    Detached,
    Exited { exit: ExitStatus, reason: EndReason },
}

/// Runs the command; returns the process exit code.
pub async fn run(args: &PaneArgs, mode: Mode) -> anyhow::Result<u8> {
    let destination = args.destination()?;
    let transport = destination.transport_with(&args.ssh)?;
    let client_id = format!("relay-cli/{}", std::process::id());
    let session = Session::connect(transport.as_ref(), &client_id)
        .await
        .with_context(|| format!("cannot reach the relay agent ({destination})"))?;
    let pane = args.pane_key();
    let size = terminal::size();
    let mut opened = None;
    if mode == Mode::Shell {
        let spec = SpawnSpec {
            command: Vec::new(),
            cwd: match destination {
                crate::common::destination::Destination::Local => std::env::current_dir()
                    .ok()
                    .map(|d| d.to_string_lossy().into_owned()),
                crate::common::destination::Destination::Host(_) => None,
            },
            term: std::env::var("TERM").ok().filter(|t| !t.is_empty()),
            size: size.unwrap_or_default(),
            env: Vec::new(),
        };
        if session.welcome().has(Capability::OPEN) {
            // Create-or-attach in one step: a shell that exits at once is still seen whole.
            opened = Some(
                session
                    .open(pane.clone(), spec, Some(0))
                    .await
                    .with_context(|| format!("cannot open a shell for pane {pane}"))?
                    .1,
            );
        } else {
            // An agent before protocol 1.1: create, then attach below.
            session
                .create(pane.clone(), spec)
                .await
                .with_context(|| format!("cannot create a shell for pane {pane}"))?;
        }
    }
    let attached = match opened {
        Some(h) => Ok(h),
        None => session.attach(pane.clone(), None, Some(0)).await,
    };
    let handle = match attached {
        Ok(h) => h,
        Err(e) if mode == Mode::Attach && (e.is_not_found() || e.is_ended()) => {
            return Err(Failure {
                code: 2,
                message: not_attachable(&e, &pane, &destination),
            }
            .into());
        }
        Err(e) => return Err(e).with_context(|| format!("cannot attach to pane {pane}")),
    };
    let binding = handle.binding().clone();
    // From here on SIGTERM and SIGHUP are ours: they end relay promptly, terminal restored.
    let mut stops = Stops::new()?;
    // The pane may have been created by a terminal of another size.
    let resize = start_resizer(
        &session,
        &binding,
        size.filter(|s| *s != handle.attached().size),
    );
    let raw = RawMode::enter().context("cannot put the terminal in raw mode")?;
    let tty = raw.is_some();
    let (mut input, mut failures) = InputQueue::start(&session, &binding);
    let outcome = pump(handle, &mut input, &mut failures, &resize, &mut stops, tty).await;
    drop(raw);
    if tty && !matches!(outcome, Ok(Outcome::Exited { .. })) {
        // The cursor is wherever the shell left it (usually after a prompt).
        eprintln!();
    }
    match outcome? {
        Outcome::Detached => {
            eprintln!("[detached from pane {pane}; run the same command to reattach]");
            // Local-first: the terminal is already back. Typed input and the detach are
            // delivered best effort and briefly; a stopped agent treats the dropped connection
            // as a detach anyway (rule A: nothing ends).
            tokio::select! {
                _ = tokio::time::timeout(DETACH_GRACE, async {
                    input.finish().await;
                    let _ = session.detach(&binding).await;
                }) => {}
                _ = stops.recv() => {}
            }
            Ok(0)
        }
        Outcome::Exited { exit, reason } => {
            if reason != EndReason::Exited {
                eprintln!("[the shell of pane {pane} ended: {reason}, {exit}]");
            }
            Ok(exit_code(&exit))
        }
    }
}

/// How long a detach waits to deliver typed input and the `Detach` request.
const DETACH_GRACE: Duration = Duration::from_secs(2);

/// One sentence for `relay attach` to a pane that does not exist or has ended.
fn not_attachable(
    e: &relay_connector::Error,
    pane: &PaneKey,
    destination: &impl Display,
) -> String {
    match e.agent_reply() {
        Some(ErrorReply::Ended { exit, reason, .. }) => {
            let how = exit.as_ref().map(|x| format!(", {x}")).unwrap_or_default();
            format!("pane {pane} has ended ({reason}{how}); use `relay shell` to start a new shell")
        }
        _ => format!("no pane {pane} on {destination}; use `relay shell` to create it"),
    }
}

/// Sends the latest window size to the pane from its own task, so a stopped agent cannot hold up
/// the terminal loop. Starts with `initial` when given; ends when the sender is dropped.
fn start_resizer(
    session: &Session,
    binding: &Binding,
    initial: Option<TermSize>,
) -> watch::Sender<Option<TermSize>> {
    let (tx, mut rx) = watch::channel(initial);
    let (session, binding) = (session.clone(), binding.clone());
    tokio::spawn(async move {
        loop {
            let size = *rx.borrow_and_update();
            if let Some(size) = size {
                let _ = session.resize(&binding, size).await;
            }
            if rx.changed().await.is_err() {
                return;
            }
        }
    });
    tx
}

/// SIGTERM and SIGHUP: leave like a detach (terminal restored, shell left running).
struct Stops {
    term: Signal,
    hup: Signal,
}

impl Stops {
    fn new() -> anyhow::Result<Stops> {
        Ok(Stops {
            term: signal(SignalKind::terminate()).context("cannot watch SIGTERM")?,
            hup: signal(SignalKind::hangup()).context("cannot watch SIGHUP")?,
        })
    }

    /// Resolves with the error to exit with when one of the signals arrives.
    async fn recv(&mut self) -> anyhow::Error {
        tokio::select! {
            _ = self.term.recv() => stopped_by("SIGTERM", 15),
            _ = self.hup.recv() => stopped_by("SIGHUP", 1),
        }
    }
}

/// Moves bytes until the shell exits or the user detaches. Never waits for the agent: input and
/// resizes go through their own tasks, so escapes and signals are always handled.
async fn pump(
    mut handle: PaneHandle,
    input: &mut InputQueue,
    failures: &mut InputFailures,
    resize: &watch::Sender<Option<TermSize>>,
    stops: &mut Stops,
    tty: bool,
) -> anyhow::Result<Outcome> {
    let mut stdin = Some(terminal::spawn_stdin_reader());
    let mut escapes = Escapes::new(tty);
    let mut winch = signal(SignalKind::window_change()).context("cannot watch SIGWINCH")?;
    let mut out = tokio::io::stdout();
    loop {
        tokio::select! {
            ev = handle.next() => match ev {
                Some(PaneEvent::Output { data, .. }) => {
                    out.write_all(&data).await?;
                    out.flush().await?;
                }
                Some(PaneEvent::Gap { from, to }) => {
                    let marker = format!("\r\n[relay: {} bytes of output were lost]\r\n", to - from);
                    out.write_all(marker.as_bytes()).await?;
                    out.flush().await?;
                }
                Some(PaneEvent::Exited { exit, reason, .. }) => {
                    return Ok(Outcome::Exited { exit, reason })
                }
                // Rule A: a lost connection says nothing about the shell.
                Some(PaneEvent::Disconnected { reason }) => anyhow::bail!(lost(&reason)),
                Some(other) => tracing::debug!(?other, "pane event"),
                None => anyhow::bail!(
                    "the pane's output stream ended; run the same command to reattach"
                ),
            },
            chunk = recv(&mut stdin), if input.accepting() => match chunk {
                // EOF on stdin (piped input): deliver it, keep showing output until the shell
                // exits.
                None => {
                    stdin = None;
                    input.close();
                }
                Some(bytes) => {
                    for action in escapes.feed(&bytes) {
                        match action {
                            Action::Send(data) => input.push(data),
                            Action::Detach => return Ok(Outcome::Detached),
                            Action::Help => {
                                out.write_all(HELP.as_bytes()).await?;
                                out.flush().await?;
                            }
                        }
                    }
                }
            },
            () = input.make_room(), if !input.accepting() => {}
            err = failures.next() => return Err(err),
            err = stops.recv() => return Err(err),
            _ = winch.recv() => {
                if let Some(size) = terminal::size() {
                    resize.send_replace(Some(size));
                }
            }
        }
    }
}

/// What to say when the connection dropped while attached.
fn lost(reason: &str) -> String {
    format!(
        "connection to the agent lost ({reason}); the shell may still be running: run the same \
         command to reattach"
    )
}

fn stopped_by(name: &str, number: u8) -> anyhow::Error {
    Failure {
        code: 128 + number,
        message: format!(
            "stopped by {name}; the shell keeps running: run the same command to reattach"
        ),
    }
    .into()
}

async fn recv(rx: &mut Option<mpsc::Receiver<Vec<u8>>>) -> Option<Vec<u8>> {
    match rx {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

/// The shell's exit code; a signal death maps to 128 + the signal number (1 when unknown).
fn exit_code(exit: &ExitStatus) -> u8 {
    match &exit.signal {
        None => u8::try_from(exit.code).unwrap_or(1),
        Some(name) => signal_number(name).map_or(1, |n| 128u8.saturating_add(n as u8)),
    }
}

/// Signal number from a name as the agent reports it: `strsignal` text ("Hangup"), "SIGHUP",
/// "HUP" or a number.
fn signal_number(name: &str) -> Option<i32> {
    if let Ok(n) = name.parse::<i32>() {
        return Some(n);
    }
    nix::sys::signal::Signal::iterator().find_map(|sig| {
        let full = sig.as_str();
        let short = full.trim_start_matches("SIG");
        // SAFETY: strsignal returns a pointer to a NUL-terminated string valid until the next
        // call; it is copied immediately and this program calls it from one thread at a time.
        let text = unsafe {
            let p = nix::libc::strsignal(sig as i32);
            (!p.is_null()).then(|| std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned())
        };
        let matches = name.eq_ignore_ascii_case(full)
            || name.eq_ignore_ascii_case(short)
            || text.is_some_and(|t| t.eq_ignore_ascii_case(name));
        matches.then_some(sig as i32)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_follow_the_shell_convention() {
        let code = |code, signal: Option<&str>| {
            exit_code(&ExitStatus {
                code,
                signal: signal.map(str::to_string),
            })
        };
        assert_eq!(code(7, None), 7);
        assert_eq!(code(0, None), 0);
        assert_eq!(code(1, Some("Hangup")), 129);
        assert_eq!(code(1, Some("Killed")), 137);
        assert_eq!(code(1, Some("SIGTERM")), 143);
        assert_eq!(code(1, Some("no such signal")), 1);
    }
}
