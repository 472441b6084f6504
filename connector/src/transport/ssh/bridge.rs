//! The agent bridge's exec channel as an [`AsyncRead`] of frame bytes.
//!
//! Unlike `Channel::into_stream`, this reader keeps what the bridge writes to stderr (logged, and
//! quoted in the error when the bridge ends before it starts) and skips login-shell noise printed
//! before the bridge command's sentinel line (see [`BridgeReader::wait_ready`]).
//!
//! The reader must be polled continuously by its owner (the connector's session reader task):
//! an unread channel stalls the whole SSH connection (see NOTES-deps.md, russh hazard).

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};

use bytes::{Buf, Bytes, BytesMut};
use russh::{ChannelMsg, ChannelReadHalf};
use tokio::io::{AsyncRead, ReadBuf};

use super::handler::{lost_reason, LostReason};
use crate::transport::{cannot_execute, BridgeEnd};
use crate::Error;

/// Most shell noise accepted before the sentinel line, in bytes.
const MAX_NOISE: usize = 256 * 1024;
/// Bytes of bridge stderr kept for error messages.
const STDERR_TAIL: usize = 4096;

type WaitFuture = Pin<Box<dyn Future<Output = (ChannelReadHalf, Option<ChannelMsg>)> + Send>>;

enum State {
    Idle(ChannelReadHalf),
    Waiting(WaitFuture),
    Done,
}

/// Reads the bridge's stdout from its exec channel.
pub(crate) struct BridgeReader {
    state: State,
    pending: Bytes,
    stderr_tail: Vec<u8>,
    exit_status: Option<u32>,
    /// The exit status again, for the stream's guard (which outlives the reader's borrow).
    exit_shared: Arc<OnceLock<u32>>,
    /// Why the SSH connection ended, once it has.
    lost: LostReason,
}

impl BridgeReader {
    pub(crate) fn new(read: ChannelReadHalf, lost: LostReason) -> Self {
        BridgeReader {
            state: State::Idle(read),
            pending: Bytes::new(),
            stderr_tail: Vec::new(),
            exit_status: None,
            exit_shared: Arc::default(),
            lost,
        }
    }

    /// The bridge command's exit status, once it has ended.
    pub(crate) fn exit_status(&self) -> Option<u32> {
        self.exit_status
    }

    /// A cell that holds the bridge command's exit status once it has ended, for the stream's
    /// guard ([`StreamGuard::exit_code`](crate::transport::StreamGuard::exit_code)).
    pub(crate) fn exit_cell(&self) -> Arc<OnceLock<u32>> {
        self.exit_shared.clone()
    }

    /// The bridge's stderr tail, trimmed, or `(none)`.
    fn stderr_text(&self) -> String {
        let text = String::from_utf8_lossy(&self.stderr_tail)
            .trim()
            .to_string();
        if text.is_empty() {
            "(no stderr)".to_string()
        } else {
            text
        }
    }

    /// How the channel ended: `None` for a clean end (exit status 0), else an error naming the
    /// SSH cause (connection lost) or the bridge's exit status and stderr tail.
    fn end_error(&self, channel_gone: bool) -> Option<io::Error> {
        if self.exit_status == Some(0) {
            return None;
        }
        if let Some(reason) = lost_reason(&self.lost) {
            return Some(io::Error::other(format!(
                "connection to the agent lost: {reason}"
            )));
        }
        let how = match self.exit_status {
            Some(s) => format!("exit status {s}"),
            None if channel_gone => "the ssh connection ended".to_string(),
            None => "no exit status".to_string(),
        };
        let stderr = self.stderr_text();
        Some(io::Error::other(BridgeEnd {
            cannot_run: cannot_execute(self.exit_status, &stderr),
            text: format!("the agent bridge ended ({how}); its stderr: {stderr}"),
        }))
    }

    async fn next_msg(&mut self) -> Option<ChannelMsg> {
        let State::Idle(read) = &mut self.state else {
            return None;
        };
        read.wait().await
    }

    /// Reads until the line `sentinel` and keeps the bytes after it for the first reads.
    ///
    /// # Errors
    /// [`Error::Deploy`] when the bridge command ends (or prints more than 256 KiB) before the
    /// sentinel, quoting its stderr and exit status.
    pub(crate) async fn wait_ready(&mut self, sentinel: &str) -> Result<(), Error> {
        let mut noise = BytesMut::new();
        loop {
            let Some(msg) = self.next_msg().await else {
                self.state = State::Done;
                return Err(self.ended_early());
            };
            match msg {
                ChannelMsg::Data { data } => {
                    noise.extend_from_slice(&data);
                    if let Some(end) = find_sentinel(&noise, sentinel.as_bytes()) {
                        if end > sentinel.len() + 1 {
                            tracing::debug!(
                                bytes = end - sentinel.len() - 1,
                                "skipped login shell output before the agent bridge"
                            );
                        }
                        noise.advance(end);
                        self.pending = noise.freeze();
                        return Ok(());
                    }
                    if noise.len() > MAX_NOISE {
                        return Err(Error::Handshake(format!(
                            "the host printed more than {MAX_NOISE} bytes before the agent bridge \
                             started; check the login shell's startup files (~/.bashrc, ...)"
                        )));
                    }
                }
                // Keep reading after EOF: the exit status and the close follow.
                ChannelMsg::Eof => {}
                other => {
                    if self.note(other) {
                        self.state = State::Done;
                        return Err(self.ended_early());
                    }
                }
            }
        }
    }

    /// Why the bridge command ended before its sentinel, classified for retries: the link was
    /// lost ([`Error::Ssh`]), the host cannot execute the agent (exit status 126 or 127, or the
    /// loader's words about the binary: [`Error::AgentCannotRun`]), or anything else
    /// ([`Error::BridgeExited`], e.g. a daemon that could not start yet).
    fn ended_early(&self) -> Error {
        let status = match self.exit_status {
            Some(s) => format!("exit status {s}"),
            None => "no exit status".to_string(),
        };
        let stderr = self.stderr_text();
        if let Some(lost) = lost_reason(&self.lost) {
            return Error::ssh(format!(
                "the connection was lost while the agent bridge started ({lost})"
            ));
        }
        let text = format!("the agent bridge ended before it started ({status}): {stderr}");
        if cannot_execute(self.exit_status, &stderr) {
            Error::AgentCannotRun(text)
        } else {
            Error::bridge_exited(text)
        }
    }

    /// Handles a non-data message; returns true when the channel is finished.
    fn note(&mut self, msg: ChannelMsg) -> bool {
        match msg {
            ChannelMsg::ExtendedData { data, .. } => {
                let text = String::from_utf8_lossy(&data);
                // Often login-shell noise: quoted in the error if the bridge fails.
                for line in text.lines().filter(|l| !l.trim().is_empty()) {
                    tracing::debug!("agent bridge stderr: {line}");
                }
                self.stderr_tail.extend_from_slice(&data);
                let excess = self.stderr_tail.len().saturating_sub(STDERR_TAIL);
                self.stderr_tail.drain(..excess);
                false
            }
            ChannelMsg::ExitStatus { exit_status } => {
                self.exit_status = Some(exit_status);
                let _ = self.exit_shared.set(exit_status);
                if exit_status != 0 {
                    tracing::debug!(exit_status, "agent bridge exited");
                }
                false
            }
            // After EOF the exit status and the close still follow: keep reading for them.
            ChannelMsg::Eof => false,
            ChannelMsg::Close => true,
            _ => false,
        }
    }
}

/// End offset of the first `sentinel` line (at the start or after a newline, followed by `\n`).
fn find_sentinel(buf: &[u8], sentinel: &[u8]) -> Option<usize> {
    let mut start = 0;
    while let Some(pos) = buf[start..]
        .windows(sentinel.len())
        .position(|w| w == sentinel)
    {
        let at = start + pos;
        let end = at + sentinel.len();
        let line_start = at == 0 || buf[at - 1] == b'\n';
        match buf.get(end) {
            Some(b'\n') if line_start => return Some(end + 1),
            Some(b'\r') if line_start && buf.get(end + 1) == Some(&b'\n') => return Some(end + 2),
            None => return None, // Maybe the newline has not arrived yet.
            _ => start = at + 1,
        }
    }
    None
}

impl AsyncRead for BridgeReader {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        loop {
            if !this.pending.is_empty() {
                let n = this.pending.len().min(buf.remaining());
                buf.put_slice(&this.pending[..n]);
                this.pending.advance(n);
                return Poll::Ready(Ok(()));
            }
            match std::mem::replace(&mut this.state, State::Done) {
                State::Done => return Poll::Ready(Ok(())),
                State::Idle(mut read) => {
                    this.state = State::Waiting(Box::pin(async move {
                        let msg = read.wait().await;
                        (read, msg)
                    }));
                }
                State::Waiting(mut fut) => match fut.as_mut().poll(cx) {
                    Poll::Pending => {
                        this.state = State::Waiting(fut);
                        return Poll::Pending;
                    }
                    Poll::Ready((_, None)) => {
                        return Poll::Ready(match this.end_error(true) {
                            Some(e) => Err(e),
                            None => Ok(()),
                        })
                    }
                    Poll::Ready((read, Some(msg))) => {
                        this.state = State::Idle(read);
                        match msg {
                            ChannelMsg::Data { data } => this.pending = data,
                            other => {
                                if this.note(other) {
                                    this.state = State::Done;
                                    if let Some(e) = this.end_error(false) {
                                        return Poll::Ready(Err(e));
                                    }
                                }
                            }
                        }
                    }
                },
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{cannot_execute, find_sentinel};

    #[test]
    fn sentinel_must_be_a_whole_line() {
        let s = b"RELAY-X";
        assert_eq!(find_sentinel(b"RELAY-X\nabc", s), Some(8));
        assert_eq!(
            find_sentinel(b"motd RELAY-X\nRELAY-X\n\x00\x01", s),
            Some(21)
        );
        assert_eq!(find_sentinel(b"noise\r\nRELAY-X\r\nab", s), Some(16));
        assert_eq!(find_sentinel(b"RELAY-X", s), None);
        assert_eq!(find_sentinel(b"RELAY-XY\n", s), None);
    }

    #[test]
    fn a_bridge_the_host_cannot_execute_is_told_apart_from_one_that_exited() {
        assert!(cannot_execute(Some(127), "sh: 1: relay-agent: not found"));
        assert!(cannot_execute(
            Some(1),
            "relay-agent: /lib/x86_64-linux-gnu/libc.so.6: version `GLIBC_2.34' not found"
        ));
        assert!(cannot_execute(Some(126), "Permission denied"));
        assert!(!cannot_execute(Some(1), "error: cannot create /ro/run"));
        // A login shell's own noise names no agent binary: not a reason to give up.
        assert!(!cannot_execute(
            Some(1),
            "starship: version `GLIBC_2.39' not found\nerror: cannot create ~/.relay/state"
        ));
        assert!(!cannot_execute(None, ""));
    }
}
