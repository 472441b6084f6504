//! The bridge hands its stdin and stdout to the daemon, so that frames go between the daemon and
//! sshd's pipes (or a local connector's) without a copy through the bridge.
//!
//! Without this, every byte of every pane crosses one more process: sshd → pipe → bridge → Unix
//! socket → daemon, and back. With it the bridge connects as before, then sends one byte,
//! [`MARKER`], carrying its fds 0 and 1 as `SCM_RIGHTS` (unix(7)). The daemon answers one byte:
//! [`ACCEPTED`] (from then on it reads requests from the passed stdin and writes frames to the
//! passed stdout; the bridge points its own fds 0 and 1 at `/dev/null` and waits for the socket
//! to close), or [`REFUSED`] (the socket goes on as an ordinary connection and the bridge copies,
//! as before). The bridge must stay alive meanwhile: OpenSSH stops writing to a session's stdin
//! once its command exited (session.c, `session_exit_message`), so the bridge is the session's
//! lifetime, and the daemon ends the connection when the bridge goes (socket EOF).
//!
//! The bridge offers only when both sides run the same executable file (the same device and
//! inode behind `/proc/self/exe` and `/proc/<daemon pid>/exe`, the pid from `SO_PEERCRED`), so a
//! daemon of an earlier version (before a live upgrade) never sees the marker, and only when fds
//! 0 and 1 are pipes or sockets (what sshd and a local connector give; a terminal or a file
//! cannot be polled). The marker, `0xFE`, cannot start a frame of an older peer either: as the
//! first byte of a frame's big-endian `u32` length it would announce more than 4 GiB. So a
//! marker that comes without fds is such a frame: the connection is closed as for any oversized
//! frame, with no answer byte in the peer's stream (found by the `agent` fuzz target). One race
//! is left: a bridge that checks while a live upgrade is falling back to an older binary may
//! offer to it; that daemon closes the connection as a bad frame, and the connector's next
//! connect copies.
//!
//! The daemon takes only what it can use unchanged: exactly two fds, a readable and a writable
//! pipe or socket; anything else (a terminal, a file, more fds) is closed and refused before any
//! flag is changed. If the daemon closes the socket before it answers (shutting down), the
//! bridge exits 0, as a copying bridge does on the daemon's EOF.
//!
//! `RELAY_PASS_STDIO=off` in the daemon's environment makes it refuse every offer (so bridges
//! copy); for measuring what the pass saves and for hosts where it misbehaves.

use std::fs;
use std::io::{self, IoSlice, IoSliceMut, Read};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::pin::Pin;
use std::task::{Context, Poll};

use nix::fcntl::{fcntl, FcntlArg, OFlag};
use nix::sys::socket::{recv, recvmsg, sendmsg, ControlMessage, ControlMessageOwned, MsgFlags};
use nix::sys::stat::{fstat, SFlag};
use tokio::io::{AsyncRead, AsyncWrite, Interest};
use tokio::net::UnixStream;

use crate::log::limit::Throttle;

/// The bridge's offer: one byte with fds 0 and 1 attached.
pub const MARKER: u8 = 0xFE;
/// Offers refused for what came with them (rate-limited: any local process of the user can
/// make them).
static REFUSED_OFFERS: Throttle = Throttle::new("refused a bridge's offer");

/// The daemon's answer when it took the fds.
pub const ACCEPTED: u8 = b'+';
/// The daemon's answer when it did not: the socket carries frames from then on.
pub const REFUSED: u8 = b'-';

/// What the daemon reads requests from: the socket, or the bridge's stdin.
pub type Reader = Pin<Box<dyn AsyncRead + Send>>;
/// What the daemon writes frames to: the socket, or the bridge's stdout.
pub type Writer = Pin<Box<dyn AsyncWrite + Send>>;

// ----- the bridge's side -----

/// What became of the bridge's offer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Offer {
    /// The daemon took fds 0 and 1; this process's fds 0 and 1 now point at `/dev/null`.
    Passed,
    /// Nothing was offered, or the daemon refused: the socket goes on as an ordinary connection.
    Copy,
    /// The daemon closed the connection before it answered (it was shutting down or being
    /// upgraded): the connection is over, as a copying bridge's would be on socket EOF.
    Ended,
}

/// Offers fds 0 and 1 to the daemon on `stream` when it runs the same executable and both fds
/// can be polled; see [`Offer`] for the outcomes.
///
/// # Errors
/// The socket failed, or the daemon answered something else (the socket is then unusable).
pub fn offer(stream: &std::os::unix::net::UnixStream) -> io::Result<Offer> {
    let (stdin, stdout) = (io::stdin(), io::stdout());
    if !pollable(stdin.as_fd())
        || !pollable(stdout.as_fd())
        || !crate::sys::process::peer_runs_our_executable(stream)
    {
        return Ok(Offer::Copy);
    }
    let fds = [stdin.as_raw_fd(), stdout.as_raw_fd()];
    let rights = [ControlMessage::ScmRights(&fds)];
    let sent = sendmsg::<()>(
        stream.as_raw_fd(),
        &[IoSlice::new(&[MARKER])],
        &rights,
        MsgFlags::empty(),
        None,
    );
    let mut answer = [0u8; 1];
    let answered = sent
        .map_err(io::Error::from)
        .and_then(|_| (&*stream).read_exact(&mut answer));
    match answered {
        Ok(()) => {}
        Err(e) if ended(&e) => return Ok(Offer::Ended),
        Err(e) => return Err(e),
    }
    match answer[0] {
        ACCEPTED => {
            // Our copies must go, or sshd would not see end-of-file when the daemon closes.
            let null = fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open("/dev/null")?;
            nix::unistd::dup2_stdin(&null)?;
            nix::unistd::dup2_stdout(&null)?;
            Ok(Offer::Passed)
        }
        REFUSED => Ok(Offer::Copy),
        other => Err(io::Error::other(format!(
            "the agent daemon answered {other:#04x} to the bridge's offer of its stdin and \
             stdout, which no relay-agent does: please report it; an agent daemon started with \
             RELAY_PASS_STDIO=off makes bridges copy instead"
        ))),
    }
}

/// Whether `e` only says that the daemon closed its side.
fn ended(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::UnexpectedEof | io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset
    )
}

/// Waits until the daemon closes the socket (the connection ended); what it sends is ignored.
pub fn wait_for_close(mut stream: &std::os::unix::net::UnixStream) {
    let mut buf = [0u8; 64];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return,
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return,
        }
    }
}

/// A pipe or a socket: what epoll can wait on and the daemon can read without blocking.
fn pollable(fd: BorrowedFd<'_>) -> bool {
    match fstat(fd) {
        Ok(st) => {
            let kind = SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT;
            kind == SFlag::S_IFIFO || kind == SFlag::S_IFSOCK
        }
        Err(_) => false,
    }
}

// ----- the daemon's side -----

/// Where an accepted connection's frames go.
pub struct Transport {
    /// Requests come from here.
    pub reader: Reader,
    /// Frames go here.
    pub writer: Writer,
    /// The bridge's socket when it passed its stdin and stdout: nothing more arrives on it, and
    /// its end ([`closed`]) means the bridge is gone.
    pub bridge: Option<UnixStream>,
}

impl Transport {
    fn socket(stream: UnixStream) -> Transport {
        let (rd, wr) = stream.into_split();
        Transport {
            reader: Box::pin(rd),
            writer: Box::pin(wr),
            bridge: None,
        }
    }
}

/// The transport of a connection accepted on `stream`: the bridge's stdin and stdout when its
/// first byte is an offer and `allow` (false with `RELAY_PASS_STDIO=off`), else the socket.
/// Waits for the first byte (the caller bounds the wait).
///
/// # Errors
/// The socket failed while the first byte was read or answered; `InvalidData` when the first
/// byte is the marker with no fds (another peer's oversized frame: close the connection).
pub async fn accept(stream: UnixStream, allow: bool) -> io::Result<Transport> {
    let mut first = [0u8; 1];
    let n = stream
        .async_io(Interest::READABLE, || {
            recv(stream.as_raw_fd(), &mut first, MsgFlags::MSG_PEEK).map_err(io::Error::from)
        })
        .await?;
    if n == 0 || first[0] != MARKER {
        return Ok(Transport::socket(stream));
    }
    let fds = stream
        .async_io(Interest::READABLE, || receive_fds(stream.as_raw_fd()))
        .await?;
    let passed = match (allow, fds) {
        // A checked fd that the runtime cannot take ends the connection (the bridge sees EOF).
        (true, Ok((input, output))) => halves(input, output)?,
        (true, Err(why)) => Err(why),
        (false, _) => Err(String::new()), // RELAY_PASS_STDIO=off: the daemon logged it.
    };
    let passed = passed
        .inspect_err(|why| {
            if !why.is_empty() && REFUSED_OFFERS.admit() {
                tracing::warn!("refused a bridge's offer of its stdin and stdout: {why}");
            }
        })
        .ok();
    let answer = if passed.is_some() { ACCEPTED } else { REFUSED };
    write_all(&stream, &[answer]).await?;
    Ok(match passed {
        Some((reader, writer)) => Transport {
            reader,
            writer,
            bridge: Some(stream),
        },
        None => Transport::socket(stream),
    })
}

/// The most fds one message can carry (Linux `SCM_MAX_FD`, include/net/scm.h); the control
/// buffer has room for them all, so that no fd the kernel installs is lost to truncation.
const SCM_MAX_FD: usize = 253;

/// Reads the marker byte and its fds (close-on-exec); `Ok(Err(why))` unless exactly two came.
/// Every fd that came is closed unless returned.
///
/// # Errors
/// `recvmsg`'s; `InvalidData` when no fd came at all (not an offer: the connection is closed),
/// unless the kernel truncated them (`MSG_CTRUNC`: refused, as an offer).
fn receive_fds(sock: RawFd) -> io::Result<Result<(OwnedFd, OwnedFd), String>> {
    let mut byte = [0u8; 1];
    let mut iov = [IoSliceMut::new(&mut byte)];
    let mut space = nix::cmsg_space!([RawFd; SCM_MAX_FD]);
    let msg = recvmsg::<()>(
        sock,
        &mut iov,
        Some(&mut space),
        crate::sys::process::RECEIVE_CLOEXEC,
    )?;
    let mut fds: Vec<OwnedFd> = Vec::new();
    for cmsg in msg.cmsgs()? {
        if let ControlMessageOwned::ScmRights(raw) = cmsg {
            // Safety: the kernel installed these fds in this process for us alone.
            fds.extend(
                raw.into_iter()
                    .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }),
            );
        }
    }
    if fds.is_empty() && msg.flags.contains(MsgFlags::MSG_CTRUNC) {
        // Fds came but the kernel could not install them (this process at its descriptor
        // limit): a bridge's offer all the same, which copies when refused.
        return Ok(Err(
            "its descriptors could not be received (the daemon is at its descriptor limit?)".into(),
        ));
    }
    if fds.is_empty() {
        // A bridge always attaches its fds, so this is another peer's first frame, whose length
        // would be over 4 GiB: refused as a bad frame is, by closing; an answer byte would be
        // garbage in that peer's stream.
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "its first byte (0xFE) is neither a bridge's offer (no descriptors came with it) \
             nor the start of a frame (its length would be over 4 GiB)",
        ));
    }
    if fds.len() != 2 {
        return Ok(Err(format!(
            "{} descriptors came with it, not 2",
            fds.len()
        )));
    } // Dropping closes whatever came.
    let mut fds = fds.into_iter();
    Ok(fds.next().zip(fds.next()).ok_or_else(String::new))
}

/// Async halves over the passed fds: tokio's pipe ends for pipes, a Unix stream per fd for
/// sockets (sshd built without `USE_PIPES` gives one socketpair end as both). `Ok(Err(why))`,
/// with nothing changed, unless `input` is a readable and `output` a writable pipe or socket.
///
/// # Errors
/// Registering a checked fd with the runtime failed.
fn halves(input: OwnedFd, output: OwnedFd) -> io::Result<Result<(Reader, Writer), String>> {
    let Some(input_kind) = kind(&input, true) else {
        return Ok(Err(
            "its stdin is not a pipe or socket open for reading".into()
        ));
    };
    let Some(output_kind) = kind(&output, false) else {
        return Ok(Err(
            "its stdout is not a pipe or socket open for writing".into()
        ));
    };
    let reader: Reader = match input_kind {
        Kind::Pipe => Box::pin(tokio::net::unix::pipe::Receiver::from_owned_fd(input)?),
        Kind::Socket => Box::pin(stream_of(input)?),
    };
    let writer: Writer = match output_kind {
        Kind::Pipe => Box::pin(tokio::net::unix::pipe::Sender::from_owned_fd(output)?),
        Kind::Socket => Box::pin(SocketWriter(stream_of(output)?)),
    };
    Ok(Ok((reader, writer)))
}

/// What a passed fd is.
enum Kind {
    Pipe,
    Socket,
}

/// A pipe or a socket open for reading (`read`) or writing; `None` for anything else (a
/// terminal, a file), whose flags must not be changed.
fn kind(fd: &OwnedFd, read: bool) -> Option<Kind> {
    let st = fstat(fd).ok()?;
    let kind = match SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT {
        SFlag::S_IFIFO => Kind::Pipe,
        SFlag::S_IFSOCK => Kind::Socket,
        _ => return None,
    };
    let flags = OFlag::from_bits_truncate(fcntl(fd, FcntlArg::F_GETFL).ok()?);
    let mode = flags & OFlag::O_ACCMODE;
    let usable = mode == OFlag::O_RDWR
        || (read && mode == OFlag::O_RDONLY)
        || (!read && mode == OFlag::O_WRONLY);
    usable.then_some(kind)
}

fn stream_of(fd: OwnedFd) -> io::Result<UnixStream> {
    let std = std::os::unix::net::UnixStream::from(fd);
    std.set_nonblocking(true)?;
    UnixStream::from_std(std)
}

/// A passed socket used only for writing: its shutdown must not end the reading side (the same
/// socket when sshd gave one socketpair end as stdin and stdout), so it only flushes.
struct SocketWriter(UnixStream);

impl AsyncWrite for SocketWriter {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }
}

async fn write_all(stream: &UnixStream, mut bytes: &[u8]) -> io::Result<()> {
    while !bytes.is_empty() {
        stream.writable().await?;
        match stream.try_write(bytes) {
            Ok(n) => bytes = &bytes[n..],
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Resolves when the bridge closed its socket (it exited or was killed): the connection over
/// its passed fds must end then, as it would have with a copying bridge.
pub async fn closed(stream: &UnixStream) {
    let mut buf = [0u8; 64];
    loop {
        if stream.readable().await.is_err() {
            return;
        }
        match stream.try_read(&mut buf) {
            Ok(0) => return,
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(_) => return,
        }
    }
}
