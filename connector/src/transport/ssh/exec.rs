//! Running one command on the host over an exec channel and collecting its output and exit
//! status (deploy steps). The channel is always drained while input is sent (an unread channel
//! would stall the whole SSH session) and always closed afterwards (sshd's `MaxSessions`).

use std::sync::Mutex;
use std::time::{Duration, Instant};

use rand::Rng;
use russh::client::{Handle, Msg};
use russh::{Channel, ChannelMsg};

use super::destination::sh_quote;
use super::handler::{russh_error, ClientHandler};
use crate::sync::LockExt;
use crate::Error;

/// Most output kept per stream; more is counted but dropped (deploy commands print little).
const MAX_KEEP: usize = 1024 * 1024;

/// Size of one data write when sending input, in bytes.
const CHUNK: usize = 64 * 1024;

/// A command that neither accepts input nor prints anything for this long is abandoned.
const NO_PROGRESS: Duration = Duration::from_secs(60);

/// How long to wait for the channel close after the command ended (exit status or EOF).
const CLOSE_GRACE: Duration = Duration::from_secs(5);

/// What a remote command printed and how it ended.
#[derive(Debug, Default)]
pub(crate) struct ExecOutput {
    /// Standard output (at most 1 MiB).
    pub(crate) stdout: Vec<u8>,
    /// Standard error (at most 1 MiB).
    pub(crate) stderr: Vec<u8>,
    /// Exit status, when the server reported one.
    pub(crate) status: Option<u32>,
}

impl ExecOutput {
    /// Standard error as trimmed text, for messages.
    pub(crate) fn stderr_text(&self) -> String {
        String::from_utf8_lossy(&self.stderr).trim().to_string()
    }
}

/// A random line that cannot come from a login shell's noise, printed before a command's own
/// output.
pub(crate) fn sentinel() -> String {
    format!("RELAY-SENTINEL-{:016x}", rand::rng().random::<u64>())
}

/// Wraps a POSIX sh script so that it runs under `sh` whatever the user's login shell is.
pub(crate) fn sh_command(script: &str) -> String {
    format!("sh -c {}", sh_quote(script))
}

/// Runs `command` (passed to the user's shell by sshd), sending `stdin` (then EOF) and reporting
/// bytes sent through `progress`.
///
/// Input stops as soon as the command ends (exit status or EOF from the host): a command that
/// fails before reading all of it (full disk, permissions) is reported by its exit status instead
/// of waiting forever for window space.
///
/// # Errors
/// [`Error::Ssh`] when the channel cannot be opened or the connection drops; [`Error::Deploy`]
/// when the command makes no progress (accepts no input, prints nothing) for 60 s.
pub(crate) async fn run(
    handle: &Handle<ClientHandler>,
    command: &str,
    stdin: Option<&[u8]>,
    progress: &mut (dyn FnMut(u64, u64) + Send),
) -> Result<ExecOutput, Error> {
    run_on(
        open(handle, "an exec channel").await?,
        command,
        stdin,
        progress,
    )
    .await
}

/// Opens a session channel for [`run_on`] or the bridge (so that it can open while something
/// else is prepared); `what` names it in the error ("an exec channel").
///
/// # Errors
/// [`Error::Ssh`] when the host refuses it or the connection fails.
pub(crate) async fn open(
    handle: &Handle<ClientHandler>,
    what: &str,
) -> Result<Channel<Msg>, Error> {
    handle
        .channel_open_session()
        .await
        .map_err(|e| russh_error(&format!("opening {what}"), e))
}

/// [`run`] on a channel [`open`]ed before.
///
/// # Errors
/// As [`run`].
pub(crate) async fn run_on(
    channel: Channel<Msg>,
    command: &str,
    stdin: Option<&[u8]>,
    progress: &mut (dyn FnMut(u64, u64) + Send),
) -> Result<ExecOutput, Error> {
    let (mut read, write) = channel.split();
    write
        .exec(true, command)
        .await
        .map_err(|e| russh_error("starting a remote command", e))?;

    // Time of the last sign of life: window space taken by a write, or any message received.
    let last_progress = Mutex::new(Instant::now());
    let touch = || *last_progress.lock_unpoisoned() = Instant::now();
    let send = async {
        if let Some(data) = stdin {
            let total = data.len() as u64;
            let mut sent = 0u64;
            progress(0, total);
            for chunk in data.chunks(CHUNK) {
                write
                    .data(chunk)
                    .await
                    .map_err(|e| russh_error("sending data to the host", e))?;
                touch();
                sent += chunk.len() as u64;
                progress(sent, total);
            }
        }
        write
            .eof()
            .await
            .map_err(|e| russh_error("sending EOF to the host", e))
    };
    tokio::pin!(send);
    let mut sent: Option<Result<(), Error>> = None;
    let mut out = ExecOutput::default();
    let mut refused = false;
    // Set once the remote side has ended (exit status or EOF): input is then pointless (nobody
    // reads it; a write would wait for window space forever), so sending stops.
    let mut ended_at: Option<Instant> = None;
    loop {
        let idle_deadline = *last_progress.lock_unpoisoned() + NO_PROGRESS;
        let deadline = match ended_at {
            Some(t) => idle_deadline.min(t + CLOSE_GRACE),
            None => idle_deadline,
        };
        tokio::select! {
            result = &mut send, if sent.is_none() && ended_at.is_none() => sent = Some(result),
            msg = read.wait() => {
                touch();
                match msg {
                    Some(ChannelMsg::Data { data }) => keep(&mut out.stdout, &data),
                    Some(ChannelMsg::ExtendedData { data, .. }) => keep(&mut out.stderr, &data),
                    Some(ChannelMsg::ExitStatus { exit_status }) => {
                        out.status = Some(exit_status);
                        ended_at.get_or_insert_with(Instant::now);
                    }
                    Some(ChannelMsg::Eof) => {
                        ended_at.get_or_insert_with(Instant::now);
                    }
                    Some(ChannelMsg::Failure) => {
                        refused = true;
                        break;
                    }
                    Some(ChannelMsg::Close) | None => break,
                    Some(_) => {}
                }
            }
            _ = tokio::time::sleep_until(deadline.into()) => {
                if ended_at.is_some() {
                    break; // Ended, but the close never came: judge by what we have.
                }
                let _ = write.close().await;
                return Err(Error::deploy(format!(
                    "a deploy command on the host made no progress for {} s (no data accepted, \
                     no output); the host or the network is stuck. stderr so far: {:?}",
                    NO_PROGRESS.as_secs(),
                    out.stderr_text()
                )));
            }
        }
    }
    let _ = write.close().await;
    if refused {
        return Err(Error::ssh(format!(
            "the host refused to run a command over exec: {command}"
        )));
    }
    // A send error (or an unfinished send) with a reported exit status means the command ended
    // early; let the caller judge by the status. Without a status the connection broke.
    match (sent, out.status) {
        (Some(Err(e)), None) => Err(e),
        (_, None) => Err(Error::ssh(format!(
            "connection lost while running a remote command (no exit status){}",
            match out.stderr_text() {
                t if t.is_empty() => String::new(),
                t => format!("; its stderr: {t}"),
            }
        ))),
        _ => Ok(out),
    }
}

/// `exit 4`, or `no exit status`, for messages.
pub(crate) fn status_text(status: Option<u32>) -> String {
    match status {
        Some(s) => format!("exit {s}"),
        None => "no exit status".to_string(),
    }
}

fn keep(buf: &mut Vec<u8>, data: &[u8]) {
    let room = MAX_KEEP.saturating_sub(buf.len());
    buf.extend_from_slice(&data[..data.len().min(room)]);
}

/// The text after the first line that equals `sentinel`, or `None` if no such line was printed
/// (login shells may print banners, motd or `.bashrc` noise before our output).
pub(crate) fn after_sentinel<'a>(stdout: &'a str, sentinel: &str) -> Option<&'a str> {
    let mut offset = 0;
    for line in stdout.split_inclusive('\n') {
        offset += line.len();
        if line.trim_end_matches(['\n', '\r']) == sentinel {
            return Some(&stdout[offset..]);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting_survives_single_quotes() {
        assert_eq!(sh_quote("a'b"), r"'a'\''b'");
        assert_eq!(sh_command("echo 'x'"), r"sh -c 'echo '\''x'\'''");
    }

    #[test]
    fn sentinel_skips_noise() {
        let out = "Welcome!\nnoise RELAY-S\nRELAY-S\nLinux x86_64\n";
        assert_eq!(after_sentinel(out, "RELAY-S"), Some("Linux x86_64\n"));
        assert_eq!(after_sentinel("no marker\n", "RELAY-S"), None);
    }
}
