//! `relay shell` and `relay attach`: connect, open (create-or-attach; create then attach with an
//! agent before protocol 1.1) or attach, with full replay, then pump keystrokes, window sizes and
//! output until the shell exits or the user detaches with `~.`.

use anyhow::Context;
use relay_connector::{PaneEvent, PaneHandle, Session};
use relay_protocol::{Binding, Capability, ExitStatus, SpawnSpec};
use tokio::io::AsyncWriteExt;
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::mpsc;

use crate::cli::PaneArgs;
use crate::escape::{Action, Escapes, HELP};
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
    Exited(ExitStatus),
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
                relay_connector::Destination::Local => std::env::current_dir()
                    .ok()
                    .map(|d| d.to_string_lossy().into_owned()),
                relay_connector::Destination::Host(_) => None,
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
            let what = if e.is_ended() {
                format!("pane {pane} has ended ({e})")
            } else {
                format!("no pane {pane} on {destination}")
            };
            return Err(Failure {
                code: 2,
                message: format!("{what}; use `relay shell` to create it"),
            }
            .into());
        }
        Err(e) => return Err(e).with_context(|| format!("cannot attach to pane {pane}")),
    };
    let binding = handle.binding().clone();
    if let Some(size) = size.filter(|s| *s != handle.attached().size) {
        // The pane may have been created by a terminal of another size.
        let _ = session.resize(&binding, size).await;
    }
    let raw = RawMode::enter().context("cannot put the terminal in raw mode")?;
    let tty = raw.is_some();
    let outcome = pump(&session, handle, &binding, tty).await;
    drop(raw);
    if tty && !matches!(outcome, Ok(Outcome::Exited(_))) {
        // The cursor is wherever the shell left it (usually after a prompt).
        eprintln!();
    }
    match outcome? {
        Outcome::Detached => {
            eprintln!("[detached from pane {pane}; run the same command to reattach]");
            Ok(0)
        }
        Outcome::Exited(exit) => Ok(exit_code(&exit)),
    }
}

/// Moves bytes until the shell exits or the user detaches.
async fn pump(
    session: &Session,
    mut handle: PaneHandle,
    binding: &Binding,
    tty: bool,
) -> anyhow::Result<Outcome> {
    let mut stdin = Some(terminal::spawn_stdin_reader());
    let mut escapes = Escapes::new(tty);
    let mut winch = signal(SignalKind::window_change()).context("cannot watch SIGWINCH")?;
    // Terminated or hung up: leave like a detach (terminal restored, shell left running).
    let mut term = signal(SignalKind::terminate()).context("cannot watch SIGTERM")?;
    let mut hup = signal(SignalKind::hangup()).context("cannot watch SIGHUP")?;
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
                Some(PaneEvent::Exited { exit, .. }) => return Ok(Outcome::Exited(exit)),
                Some(PaneEvent::Disconnected { reason }) => {
                    // Rule A: a lost connection says nothing about the shell.
                    anyhow::bail!(
                        "connection to the agent lost ({reason}); the shell was not ended by \
                         relay: run the same command to reattach"
                    )
                }
                None => anyhow::bail!(
                    "the pane's output stream ended; run the same command to reattach"
                ),
            },
            chunk = recv(&mut stdin) => match chunk {
                // EOF on stdin (piped input): keep showing output until the shell exits.
                None => stdin = None,
                Some(bytes) => {
                    for action in escapes.feed(&bytes) {
                        match action {
                            Action::Send(data) => send_input(session, binding, &data).await?,
                            Action::Detach => {
                                let _ = session.detach(binding).await;
                                return Ok(Outcome::Detached);
                            }
                            Action::Help => {
                                out.write_all(HELP.as_bytes()).await?;
                                out.flush().await?;
                            }
                        }
                    }
                }
            },
            _ = term.recv() => return Err(stopped_by("SIGTERM", 15)),
            _ = hup.recv() => return Err(stopped_by("SIGHUP", 1)),
            _ = winch.recv() => {
                if let Some(size) = terminal::size() {
                    let _ = session.resize(binding, size).await;
                }
            }
        }
    }
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

async fn send_input(session: &Session, binding: &Binding, data: &[u8]) -> anyhow::Result<()> {
    match session.input(binding, data).await {
        Ok(()) => Ok(()),
        // The shell is ending: its exit event follows, keep reading.
        Err(e) if e.is_ended() => Ok(()),
        Err(e) if e.is_mismatch() => Err(Failure {
            code: 1,
            message: format!("{e}; run the same command to attach to the pane's current shell"),
        }
        .into()),
        Err(e) => Err(e.into()),
    }
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
