//! Running one command on the host over an exec channel and collecting its output and exit
//! status (deploy steps). The channel is always drained while input is sent (an unread channel
//! would stall the whole SSH session) and always closed afterwards (sshd's `MaxSessions`).

use russh::client::Handle;
use russh::ChannelMsg;

use super::handler::{russh_error, ClientHandler};
use crate::Error;

/// Most output kept per stream; more is counted but dropped (deploy commands print little).
const MAX_KEEP: usize = 1024 * 1024;

/// Size of one data write when sending input, in bytes.
const CHUNK: usize = 64 * 1024;

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

/// Quotes `s` for a POSIX shell (single quotes).
pub(crate) fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// Wraps a POSIX sh script so that it runs under `sh` whatever the user's login shell is.
pub(crate) fn sh_command(script: &str) -> String {
    format!("sh -c {}", sh_quote(script))
}

/// Runs `command` (passed to the user's shell by sshd), sending `stdin` (then EOF) and reporting
/// bytes sent through `progress`.
///
/// # Errors
/// [`Error::Ssh`] when the channel cannot be opened or the connection drops.
pub(crate) async fn run(
    handle: &Handle<ClientHandler>,
    command: &str,
    stdin: Option<&[u8]>,
    progress: &mut (dyn FnMut(u64, u64) + Send),
) -> Result<ExecOutput, Error> {
    let channel = handle
        .channel_open_session()
        .await
        .map_err(|e| russh_error("opening an exec channel", e))?;
    let (mut read, write) = channel.split();
    write
        .exec(true, command)
        .await
        .map_err(|e| russh_error("starting a remote command", e))?;

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
                sent += chunk.len() as u64;
                progress(sent, total);
            }
        }
        write
            .eof()
            .await
            .map_err(|e| russh_error("sending EOF to the host", e))
    };
    let receive = async {
        let mut out = ExecOutput::default();
        let mut refused = false;
        while let Some(msg) = read.wait().await {
            match msg {
                ChannelMsg::Data { data } => keep(&mut out.stdout, &data),
                ChannelMsg::ExtendedData { data, .. } => keep(&mut out.stderr, &data),
                ChannelMsg::ExitStatus { exit_status } => out.status = Some(exit_status),
                ChannelMsg::Failure => {
                    refused = true;
                    break;
                }
                ChannelMsg::Close => break,
                _ => {}
            }
        }
        (out, refused)
    };
    let (sent, (out, refused)) = tokio::join!(send, receive);
    let _ = write.close().await;
    if refused {
        return Err(Error::Ssh(format!(
            "the host refused to run a command over exec: {command}"
        )));
    }
    // A send error with a reported exit status means the command ended early; let the caller
    // judge by the status. Without a status the connection broke.
    match (sent, out.status) {
        (Err(e), None) => Err(e),
        _ if out.status.is_none() => Err(Error::Ssh(format!(
            "connection lost while running a remote command (no exit status): {}",
            out.stderr_text()
        ))),
        _ => Ok(out),
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
