//! `relay shell` and `relay attach`: reach the host (through a [`Host`], which reconnects by
//! itself), attach to the pane's shell (or open it), then pump keystrokes, window sizes and
//! output until the shell exits or the user detaches with `~.`.
//!
//! Rule G: once attached, the terminal loop never waits for the agent. Keystrokes go through the
//! library's input writer, resizes through their own task; so `~.`, SIGTERM and SIGHUP are
//! handled at once even when the agent is stopped or the link is down. A detach restores the
//! terminal first (the program's modes undone, see [`crate::modes`], then raw mode left) and then
//! spends at most [`DETACH_GRACE`] delivering typed input and the `Detach`.
//!
//! When the link drops, the pane's stream is interrupted, not ended: the status line (see
//! [`crate::status`]) says what is happening, and output continues from the last offset once the
//! host re-attached the same shell.

use std::io::IsTerminal;
use std::time::Duration;

use anyhow::Context;
use relay_cli::destination::Destination;
use relay_cli::sys;
use relay_connector::predict::PredictMode;
use relay_connector::{
    Host, HostOptions, HostState, InputFailures, PaneEvent, PaneHandle, Session,
};
use relay_protocol::{Binding, EndReason, ExitStatus, TermSize};
use tokio::sync::{mpsc, watch};

use crate::cli::PaneArgs;
use crate::escape::{Action, Escapes, HELP};
use crate::input::InputQueue;
use crate::pane::{attach, not_attachable, open_pane};
use crate::screen::Screen;
use crate::status;
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

/// Exit status when relay could not connect, a retry cannot fix the connection, the shell's own
/// status could not be learned, or output into a file or pipe was lost (as ssh uses 255 for its
/// own failures).
pub const UNREACHABLE: u8 = 255;

/// Runs the command; returns the process exit code.
pub async fn run(args: &PaneArgs, mode: Mode) -> anyhow::Result<u8> {
    let destination = args.destination()?;
    let transport = destination.transport_with(&args.ssh)?;
    let client_id = format!("relay-cli/{}", std::process::id());
    let mut options = HostOptions::new(client_id);
    options.policy = Some(crate::policy::from_env());
    let host = Host::open(transport, options);
    let session = first_connection(&host, &destination).await?;
    let pane = args.pane_key();
    let size = terminal::size();
    // Into a file or pipe the output is data: every byte, held back at the agent rather than
    // skipped to the current screen.
    let lossless = !std::io::stdout().is_terminal();
    // The handle lives until the input is finished (below): dropping it releases the pane, and
    // input still on its way would then be dropped (and miscounted) instead of delivered.
    let mut handle = match mode {
        Mode::Attach => match attach(&host, &pane, size, lossless).await {
            Ok(h) => h,
            Err(e) if e.is_not_found() || e.is_ended() => {
                return Err(Failure {
                    code: 2,
                    message: not_attachable(&e, &pane, &destination),
                }
                .into());
            }
            Err(e) => return Err(e).with_context(|| format!("cannot attach to pane {pane}")),
        },
        Mode::Shell => {
            open_pane(&host, &session, args, &pane, &destination, size, lossless).await?
        }
    };
    let binding = handle.binding().clone();
    // From here on SIGTERM and SIGHUP are ours: they end relay promptly, terminal restored.
    let mut stops = Stops::new()?;
    // The pane may have been created by a terminal of another size.
    let resize = start_resizer(
        &host,
        &binding,
        size.filter(|s| *s != handle.attached().size),
    );
    let raw = RawMode::enter().context("cannot put the terminal in raw mode")?;
    let tty = raw.is_some();
    let mut writer = host.input_writer(&binding);
    let mut failures = writer.failures();
    let mut input = InputQueue::new(writer);
    let outcome = pump(
        &host,
        &mut handle,
        &mut input,
        &mut failures,
        &resize,
        &mut stops,
        tty,
        args.predict,
    )
    .await;
    drop(raw);
    if tty && !matches!(outcome, Ok((Outcome::Exited { .. }, _))) {
        // The cursor is wherever the shell left it (usually after a prompt).
        eprintln!();
    }
    let (outcome, loss) = outcome?;
    match outcome {
        Outcome::Detached => {
            if let Some(loss) = loss {
                eprintln!("[relay: {loss}]");
            }
            eprintln!(
                "[detached from pane {pane}; {}]",
                args.reattach_hint(&pane, &destination)
            );
            // Local-first: the terminal is already back. Typed input and the detach are
            // delivered best effort and briefly; a stopped agent treats the dropped connection
            // as a detach anyway (rule A: nothing ends).
            let unsent = tokio::select! {
                unsent = async {
                    let unsent = input.finish_within(DETACH_GRACE).await;
                    if let Some(session) = host.try_session() {
                        let _ = tokio::time::timeout(DETACH_GRACE, session.detach(&binding)).await;
                    }
                    unsent
                } => unsent,
                _ = stops.recv() => 0,
            };
            if unsent > 0 {
                // Not confirmed is all relay knows: a frozen agent may still read the dropped
                // connection's last bytes when it continues.
                let what = match unsent {
                    1 => "1 byte of your input was".to_string(),
                    n => format!("{n} bytes of your input were"),
                };
                eprintln!(
                    "[relay: {what} not confirmed by the agent before the detach; the shell may \
                     not have got them]"
                );
            }
            host.close();
            Ok(0)
        }
        Outcome::Exited { exit, reason } => {
            if reason != EndReason::Exited {
                eprintln!("[the shell of pane {pane} ended: {reason}, {exit}]");
            }
            host.close();
            if let Some(loss) = loss {
                return Err(Failure {
                    code: UNREACHABLE,
                    message: format!(
                        "{loss}: the output of pane {pane} is incomplete (the command exited \
                         with {exit})"
                    ),
                }
                .into());
            }
            Ok(exit_code(&exit))
        }
    }
}

/// How long a detach waits to deliver typed input and the `Detach` request.
const DETACH_GRACE: Duration = Duration::from_secs(2);

/// Waits for the host's first connection. relay does not retry a host it could never reach
/// (a typo, a host that is down): the first failure ends it with status 255, as in ssh. After a
/// first connection, the host reconnects by itself.
async fn first_connection(host: &Host, destination: &Destination) -> anyhow::Result<Session> {
    let mut states = host.state();
    loop {
        if let Some(session) = host.try_session() {
            return Ok(session);
        }
        let failed = match &*states.borrow_and_update() {
            HostState::Reconnecting { last_error, .. } => Some(last_error.report()),
            HostState::Failed { error } => Some(error.report()),
            HostState::Closed => Some("closed".to_string()),
            _ => None,
        };
        if let Some(error) = failed {
            host.close();
            return Err(Failure {
                code: UNREACHABLE,
                message: format!("cannot reach the relay agent ({destination}): {error}"),
            }
            .into());
        }
        if states.changed().await.is_err() {
            anyhow::bail!("cannot reach the relay agent ({destination}): the host was closed");
        }
    }
}

/// Sends the latest window size to the pane from its own task, so a stopped agent cannot hold up
/// the terminal loop. Starts with `initial` when given; ends when the sender is dropped.
fn start_resizer(
    host: &Host,
    binding: &Binding,
    initial: Option<TermSize>,
) -> watch::Sender<Option<TermSize>> {
    let (tx, mut rx) = watch::channel(initial);
    let (host, binding) = (host.clone(), binding.clone());
    tokio::spawn(async move {
        loop {
            let size = *rx.borrow_and_update();
            if let Some(size) = size {
                let _ = host.resize(&binding, size).await;
            }
            if rx.changed().await.is_err() {
                return;
            }
        }
    });
    tx
}

/// SIGTERM and SIGHUP (on Windows: the console closed, logoff, shutdown): leave like a detach
/// (terminal restored, shell left running).
struct Stops(sys::Stops);

impl Stops {
    fn new() -> anyhow::Result<Stops> {
        Ok(Stops(
            sys::Stops::new().context("cannot watch for SIGTERM and SIGHUP")?,
        ))
    }

    /// Resolves with the error to exit with when a stop request arrives.
    async fn recv(&mut self) -> anyhow::Error {
        let stop = self.0.recv().await;
        Failure {
            code: stop.code,
            message: format!(
                "stopped by {}; the shell keeps running: run the same command to reattach",
                stop.name
            ),
        }
        .into()
    }
}

/// Moves bytes until the shell exits or the user detaches, then writes out what the terminal
/// has not taken yet (all of it after an exit; at most [`DETACH_GRACE`] otherwise) and clears
/// the status line. Signals end the wait. Returns how it ended and what output was lost on the
/// way (see [`Screen::loss`]).
#[allow(clippy::too_many_arguments)]
async fn pump(
    host: &Host,
    handle: &mut PaneHandle,
    input: &mut InputQueue,
    failures: &mut InputFailures,
    resize: &watch::Sender<Option<TermSize>>,
    stops: &mut Stops,
    tty: bool,
    predict: PredictMode,
) -> anyhow::Result<(Outcome, Option<String>)> {
    let size = terminal::size().map(|s| (s.cols, s.rows));
    let predict = crate::predict::for_terminal(predict, std::env::var("TERM").ok().as_deref());
    let mut screen = Screen::start(tty, predict, size);
    let outcome = pump_loop(
        host,
        handle,
        input,
        failures,
        resize,
        stops,
        &mut screen,
        tty,
    )
    .await;
    let bound = match outcome {
        Ok(Outcome::Exited { .. }) => Duration::MAX,
        _ => DETACH_GRACE,
    };
    let loss = screen.loss();
    tokio::select! {
        _ = tokio::time::timeout(bound, screen.finish()) => {}
        err = stops.recv() => return Err(err),
    }
    Ok((outcome?, loss))
}

/// The loop of [`pump`]. Never waits for the agent or for stdout: input and resizes go through
/// their own tasks, output through the screen's writer task, so escapes and signals are always
/// handled, also while the host reconnects or the terminal is not taking output.
#[allow(clippy::too_many_arguments)]
async fn pump_loop(
    host: &Host,
    handle: &mut PaneHandle,
    input: &mut InputQueue,
    failures: &mut InputFailures,
    resize: &watch::Sender<Option<TermSize>>,
    stops: &mut Stops,
    screen: &mut Screen,
    tty: bool,
) -> anyhow::Result<Outcome> {
    let mut stdin = Some(terminal::spawn_stdin_reader());
    let mut escapes = Escapes::new(tty);
    let mut resizes = sys::Resizes::new().context("cannot watch the window size (SIGWINCH)")?;
    let mut states = host.state();
    let mut second = tokio::time::interval(Duration::from_secs(1));
    let pane = handle.binding().pane.clone();
    let destination = host.destination().to_string();
    let cols = || terminal::size().map_or(80, |s| s.cols);
    let room = screen.room();
    let mut pings = screen.predicts().then(|| host.round_trips());
    loop {
        if screen.is_broken() {
            anyhow::bail!("cannot write to the terminal (stdout was closed)");
        }
        tokio::select! {
            ev = handle.next(), if screen.takes_output() => match ev {
                Some(PaneEvent::Output { data, .. }) => screen.output(data),
                // The screen as it is (on attach, or instead of a gap): drawn over ours.
                Some(PaneEvent::Snapshot { data, .. }) => screen.snapshot(data),
                Some(PaneEvent::Gap { from, to }) => screen.gap(from, to),
                Some(PaneEvent::Exited { exit, reason, .. }) => {
                    return Ok(Outcome::Exited { exit, reason })
                }
                Some(PaneEvent::Ended { reason, exit }) => {
                    let how = exit.as_ref().map(|x| format!(", {x}")).unwrap_or_default();
                    return Err(Failure {
                        code: exit.as_ref().map_or(UNREACHABLE, exit_code),
                        message: format!(
                            "the shell of pane {pane} ended: {reason}{how} (learned when relay \
                             reconnected)"
                        ),
                    }
                    .into());
                }
                Some(PaneEvent::Mismatch { current }) => {
                    let now = current.map_or("no shell".to_string(), |p| format!("PTY {p}"));
                    return Err(Failure {
                        code: 1,
                        message: format!(
                            "pane {pane} now has {now}, not the shell you were typing into; run \
                             the same command to attach to it"
                        ),
                    }
                    .into());
                }
                Some(PaneEvent::Unresolved { reason }) => {
                    return Err(Failure {
                        code: UNREACHABLE,
                        message: format!(
                            "after reconnecting, the host could not say what became of pane \
                             {pane} ({reason}); nothing was ended; run the same command to try \
                             again"
                        ),
                    }
                    .into());
                }
                // The host reconnects by itself; the status line follows its state.
                Some(_) => {}
                None => anyhow::bail!(
                    "the pane's output stream ended; run the same command to reattach"
                ),
            },
            () = room.wait(), if !screen.has_room() => {}
            changed = states.changed() => {
                if changed.is_err() {
                    anyhow::bail!("the host was closed");
                }
                let state = states.borrow_and_update().clone();
                if let HostState::Failed { error } = &state {
                    return Err(Failure {
                        code: UNREACHABLE,
                        message: format!("cannot reconnect to {destination}: {}", error.report()),
                    }
                    .into());
                }
                screen.status(status::message(&state, &destination, tty), cols());
            }
            _ = second.tick(), if screen.status_shown() => {
                let state = states.borrow().clone();
                if status::ticking(&state) {
                    screen.status(status::message(&state, &destination, tty), cols());
                }
            }
            chunk = recv(&mut stdin), if input.accepting() => match chunk {
                // EOF on stdin (piped input): deliver it, keep showing output until the shell
                // exits.
                None => {
                    stdin = None;
                    input.close();
                }
                Some(mut bytes) => {
                    screen.take_answer(&mut bytes);
                    for action in escapes.feed(&bytes) {
                        match action {
                            Action::Send(data) => {
                                screen.typed(&data);
                                input.push(data);
                            }
                            Action::Detach => return Ok(Outcome::Detached),
                            Action::Help => screen.note(HELP),
                        }
                    }
                }
            },
            () = input.make_room(), if !input.accepting() => {}
            err = failures.next() => match err {
                // The pane's stream says why (ended while away, another shell now).
                relay_connector::Error::PaneGone(_) => {}
                err => return Err(input_failure(err)),
            },
            err = stops.recv() => return Err(err),
            () = resizes.changed() => {
                if let Some(size) = terminal::size() {
                    // On Windows this runs at every poll: only a new size goes to the agent.
                    let new = resize.send_if_modified(|last| {
                        let new = *last != Some(size);
                        *last = Some(size);
                        new
                    });
                    if new {
                        screen.resize(size.cols, size.rows);
                    }
                }
            }
            () = until(screen.deadline()) => screen.tick(),
            Some(rtt) = recv_rtt(&mut pings) => screen.rtt(rtt),
        }
    }
}

fn input_failure(e: relay_connector::Error) -> anyhow::Error {
    if e.is_mismatch() {
        Failure {
            code: 1,
            message: format!(
                "{}; run the same command to attach to the pane's current shell",
                e.report()
            ),
        }
        .into()
    } else {
        anyhow::Error::from(e).context("cannot send your input to the pane")
    }
}

/// The next round-trip sample; never when prediction is off.
async fn recv_rtt(rx: &mut Option<relay_connector::RoundTrips>) -> Option<Duration> {
    match rx {
        Some(rx) => rx.next().await,
        None => std::future::pending().await,
    }
}

/// Resolves at `deadline`; never when there is none.
async fn until(deadline: Option<std::time::Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
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
        Some(name) => {
            relay_protocol::signal::parse(name).map_or(1, |s| 128u8.saturating_add(s.number as u8))
        }
    }
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
