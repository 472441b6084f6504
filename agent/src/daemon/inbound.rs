//! Reading request frames from one connection with bounded memory and bounded time.
//!
//! The protocol's codec reserves the announced length as soon as a frame's header arrives, so a
//! peer that announces 1 MiB and stalls holds 1 MiB for as long as it likes; 300 such
//! connections took a daemon to 343 MB. Here instead:
//! - **grow as bytes arrive:** a frame that fits the read-ahead ([`READ_AHEAD`], 8 KiB) is read
//!   in it; a larger one gets a body buffer that grows (doubling, never past the frame's length)
//!   only as its bytes come in;
//! - **one budget for all connections:** every body buffer's capacity is counted against
//!   [`FrameBudget`] (default
//!   [`DEFAULT_INCOMPLETE_FRAMES_BYTES`](crate::limits::DEFAULT_INCOMPLETE_FRAMES_BYTES), env
//!   `RELAY_INCOMPLETE_FRAMES_BYTES`). A connection that needs more waits for room, within its
//!   frame's deadline; the room returns when the frame is complete or the connection goes;
//! - **a deadline per frame:** once a frame's first byte arrived, the whole frame must arrive
//!   within the frame timeout (default
//!   [`DEFAULT_FRAME_TIMEOUT`](crate::limits::DEFAULT_FRAME_TIMEOUT), env
//!   `RELAY_FRAME_TIMEOUT_MS`), or the connection is closed with [`ReadError::Stalled`]. Between
//!   frames there is no deadline: an idle connection may stay, holding only its read-ahead.
//!
//! So a connection holds at most [`READ_AHEAD`] bytes of its own, and all incomplete frames
//! together at most the budget.

use std::fmt;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::AsyncReadExt;
use tokio::sync::Semaphore;
use tokio::time::Instant;

use crate::daemon::stdio_pass::Reader;
use crate::limits::FrameBudget;

/// Bytes a connection reads ahead; frames up to this size (with their 4-byte header) are read
/// in it without touching the budget.
pub const READ_AHEAD: usize = 8 * 1024;

/// Why reading a frame failed; the connection must close.
#[derive(Debug)]
pub enum ReadError {
    /// The header announced more than the maximum frame size.
    TooLarge {
        /// Announced length, bytes.
        len: u32,
        /// Maximum, bytes.
        max: u32,
    },
    /// The frame did not arrive within the frame timeout.
    Stalled {
        /// Announced length, bytes.
        len: usize,
        /// Bytes of it received.
        got: usize,
        /// The timeout.
        after: Duration,
        /// It was waiting for room in the budget (other connections' incomplete frames).
        waiting_for_memory: bool,
    },
    /// The peer closed the connection inside a frame.
    ClosedMidFrame {
        /// Bytes of the frame (header included) received.
        got: usize,
    },
    /// Reading failed.
    Io(io::Error),
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadError::TooLarge { len, max } => write!(
                f,
                "frame of {len} bytes exceeds the maximum of {max} bytes; the peer is misbehaving \
                 or a different program is writing to this stream"
            ),
            ReadError::Stalled {
                len,
                got,
                after,
                waiting_for_memory,
            } => {
                write!(
                    f,
                    "frame of {len} bytes incomplete after {after:?} ({got} bytes received)"
                )?;
                if *waiting_for_memory {
                    write!(
                        f,
                        "; it waited for memory held by other connections' incomplete frames \
                         (raise RELAY_INCOMPLETE_FRAMES_BYTES if this is not an attack)"
                    )?;
                }
                write!(
                    f,
                    "; a peer must send a frame whole (raise RELAY_FRAME_TIMEOUT_MS for very \
                     slow links)"
                )
            }
            ReadError::ClosedMidFrame { got } => {
                write!(
                    f,
                    "closed by the peer inside a frame ({got} bytes of it received)"
                )
            }
            ReadError::Io(e) => write!(f, "read error: {e}"),
        }
    }
}

/// Budget bytes held by one incomplete frame; given back on drop.
struct Held {
    room: Arc<Semaphore>,
    bytes: usize,
}

impl Drop for Held {
    fn drop(&mut self) {
        self.room.add_permits(self.bytes);
    }
}

/// A frame larger than the read-ahead, being received.
struct Partial {
    len: usize,
    buf: Vec<u8>,
    held: Held,
}

/// Reads frames (`u32` big-endian length + body) from a connection; see the module docs.
pub struct FrameReader {
    rd: Reader,
    max: u32,
    timeout: Duration,
    budget: FrameBudget,
    head: BytesMut,
    partial: Option<Partial>,
    /// Deadline of the frame being received (set by its first byte).
    deadline: Option<Instant>,
}

impl FrameReader {
    /// A reader of frames of at most `max` bytes, each due within `timeout` of its first byte,
    /// whose bodies beyond the read-ahead count against `budget`.
    pub fn new(rd: Reader, max: u32, timeout: Duration, budget: FrameBudget) -> Self {
        FrameReader {
            rd,
            max,
            timeout,
            budget,
            head: BytesMut::with_capacity(READ_AHEAD),
            partial: None,
            deadline: None,
        }
    }

    /// The next frame's body; `None` at a clean end of stream (between frames). Cancel-safe:
    /// dropping the future loses no bytes (everything read is kept in `self`).
    ///
    /// # Errors
    /// [`ReadError`]; the connection must close then.
    pub async fn next(&mut self) -> Option<Result<Bytes, ReadError>> {
        loop {
            match self.step() {
                Ok(Some(frame)) => return Some(Ok(frame)),
                Ok(None) => {}
                Err(e) => return Some(Err(e)),
            }
            match self.fill().await {
                Ok(true) => {}
                Ok(false) => return None,
                Err(e) => return Some(Err(e)),
            }
        }
    }

    /// A complete frame if one is buffered; moves a large frame's bytes to its body buffer.
    fn step(&mut self) -> Result<Option<Bytes>, ReadError> {
        if let Some(p) = &self.partial {
            if p.buf.len() < p.len {
                return Ok(None);
            }
            let p = self.partial.take().expect("checked above");
            self.deadline = (!self.head.is_empty()).then(|| Instant::now() + self.timeout);
            return Ok(Some(Bytes::from(p.buf))); // `p.held` returns the room here.
        }
        if self.head.len() < 4 {
            return Ok(None);
        }
        let len = u32::from_be_bytes([self.head[0], self.head[1], self.head[2], self.head[3]]);
        if len > self.max {
            return Err(ReadError::TooLarge { len, max: self.max });
        }
        let total = 4 + len as usize;
        if self.head.len() >= total {
            let mut frame = self.head.split_to(total);
            let _ = frame.split_to(4);
            self.deadline = (!self.head.is_empty()).then(|| Instant::now() + self.timeout);
            return Ok(Some(frame.freeze()));
        }
        if total > READ_AHEAD {
            // Only this frame's bytes are in the read-ahead: reads stop at its end.
            let mut buf = Vec::new();
            buf.extend_from_slice(&self.head[4..]);
            self.head.clear();
            let held = Held {
                room: Arc::clone(&self.budget.room),
                bytes: 0,
            };
            self.partial = Some(Partial {
                len: len as usize,
                buf,
                held,
            });
        }
        Ok(None)
    }

    /// Reads more bytes (into the read-ahead, or a large frame's body after making room for
    /// them in the budget), racing the frame's deadline. `Ok(false)`: clean end of stream.
    async fn fill(&mut self) -> Result<bool, ReadError> {
        let deadline = self.deadline;
        let read = async {
            let n = match &mut self.partial {
                Some(p) => {
                    grow(p, &self.budget).await;
                    // Spare capacity never goes past the frame's end: no over-read.
                    self.rd.read_buf(&mut p.buf).await
                }
                None => {
                    // Never more than the read-ahead: the rest stays in the socket.
                    let room = READ_AHEAD - self.head.len();
                    self.head.reserve(room);
                    let mut limited = (&mut self.rd).take(room as u64);
                    limited.read_buf(&mut self.head).await
                }
            };
            n.map_err(ReadError::Io)
        };
        let result = match deadline {
            None => Ok(read.await),
            Some(at) => tokio::time::timeout_at(at, read).await,
        };
        let Ok(n) = result else {
            return Err(self.stalled());
        };
        let n = n?;
        if n == 0 {
            let got = self.head.len() + self.partial.as_ref().map_or(0, |p| 4 + p.buf.len());
            return if got == 0 {
                Ok(false)
            } else {
                Err(ReadError::ClosedMidFrame { got })
            };
        }
        if self.deadline.is_none() {
            self.deadline = Some(Instant::now() + self.timeout);
        }
        Ok(true)
    }

    fn stalled(&self) -> ReadError {
        let (len, got, waiting_for_memory) = match &self.partial {
            Some(p) => (p.len, p.buf.len(), p.buf.len() == p.buf.capacity()),
            None if self.head.len() >= 4 => (
                u32::from_be_bytes([self.head[0], self.head[1], self.head[2], self.head[3]])
                    as usize,
                self.head.len() - 4,
                false,
            ),
            None => (0, self.head.len(), false),
        };
        ReadError::Stalled {
            len,
            got,
            after: self.timeout,
            waiting_for_memory,
        }
    }
}

/// Makes spare capacity in `p.buf` (doubling, at most up to the frame's length), first taking
/// the room for it from the budget — waiting while other connections hold it all.
async fn grow(p: &mut Partial, budget: &FrameBudget) {
    if p.buf.len() < p.buf.capacity() {
        return;
    }
    // Not `clamp`: a frame just over the read-ahead (4 + len > READ_AHEAD with len < READ_AHEAD)
    // has a maximum below the minimum, and `clamp` panics then.
    let want = (p.buf.capacity() * 2).max(READ_AHEAD).min(p.len);
    let more = want - p.held.bytes;
    let permits = u32::try_from(more).unwrap_or(u32::MAX);
    // Cancel-safe: a dropped acquire takes nothing; the closed case cannot happen (never closed).
    if let Ok(permit) = budget.room.acquire_many(permits).await {
        permit.forget();
        p.held.bytes += permits as usize;
        p.buf.reserve_exact(want - p.buf.len());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;
    use tokio::net::UnixStream;

    fn frame(body: &[u8]) -> Vec<u8> {
        let mut out = (body.len() as u32).to_be_bytes().to_vec();
        out.extend_from_slice(body);
        out
    }

    fn reader(budget: &FrameBudget, timeout: Duration) -> (FrameReader, UnixStream) {
        let (ours, theirs) = UnixStream::pair().unwrap();
        let (rd, _wr) = ours.into_split();
        std::mem::forget(_wr); // Keep our side open for the test's life.
        (
            FrameReader::new(Box::pin(rd), 1 << 20, timeout, budget.clone()),
            theirs,
        )
    }

    #[tokio::test]
    async fn small_and_large_frames_arrive_whole_and_the_budget_comes_back() {
        let budget = FrameBudget::new(2 << 20);
        let (mut frames, mut peer) = reader(&budget, Duration::from_secs(5));
        let large: Vec<u8> = (0..300_000u32).map(|i| i as u8).collect();
        let mut bytes = frame(b"tiny");
        bytes.extend(frame(&large));
        bytes.extend(frame(b""));
        bytes.extend(frame(b"after"));
        let writer = tokio::spawn(async move {
            for piece in bytes.chunks(7_001) {
                peer.write_all(piece).await.unwrap();
                tokio::task::yield_now().await;
            }
            peer
        });
        let mut got = Vec::new();
        for _ in 0..4 {
            got.push(frames.next().await.unwrap().unwrap());
        }
        assert_eq!(&got[0][..], b"tiny");
        assert_eq!(&got[1][..], &large[..]);
        assert_eq!(&got[2][..], b"");
        assert_eq!(&got[3][..], b"after");
        assert_eq!(budget.held(), 0, "counted only while incomplete");
        drop(writer.await.unwrap());
        assert!(frames.next().await.is_none(), "clean end between frames");
    }

    /// Regression: a frame whose header and body together just exceed the read-ahead (payload
    /// 8,189–8,191 bytes: an ordinary paste) panicked the connection's reader.
    #[tokio::test]
    async fn frames_around_the_read_ahead_size_arrive_whole() {
        let budget = FrameBudget::new(2 << 20);
        let (mut frames, mut peer) = reader(&budget, Duration::from_secs(5));
        let sizes: Vec<usize> = (READ_AHEAD - 6..=READ_AHEAD + 2).collect();
        let mut bytes = Vec::new();
        for &n in &sizes {
            bytes.extend(frame(&vec![n as u8; n]));
        }
        let writer = tokio::spawn(async move {
            for piece in bytes.chunks(3_000) {
                peer.write_all(piece).await.unwrap();
                tokio::task::yield_now().await;
            }
            peer
        });
        for &n in &sizes {
            let got = frames.next().await.unwrap().unwrap();
            assert_eq!(got.len(), n);
            assert!(got.iter().all(|b| *b == n as u8), "frame of {n} bytes");
        }
        assert_eq!(budget.held(), 0);
        drop(writer.await.unwrap());
    }

    #[tokio::test]
    async fn a_frame_that_stalls_is_an_error_after_the_timeout_and_returns_its_room() {
        let budget = FrameBudget::new(2 << 20);
        let (mut frames, mut peer) = reader(&budget, Duration::from_millis(200));
        peer.write_all(&(1u32 << 20).to_be_bytes()).await.unwrap();
        peer.write_all(&[7u8; 100_000]).await.unwrap();
        let started = std::time::Instant::now();
        let err = frames.next().await.unwrap().unwrap_err();
        assert!(started.elapsed() >= Duration::from_millis(190));
        assert!(
            matches!(
                err,
                ReadError::Stalled {
                    len: 1_048_576,
                    got: 100_000,
                    ..
                }
            ),
            "{err}"
        );
        assert!(err.to_string().contains("incomplete after 200ms"), "{err}");
        drop(frames);
        assert_eq!(budget.held(), 0);
    }

    #[tokio::test]
    async fn an_idle_connection_between_frames_has_no_deadline_and_oversize_is_refused() {
        let budget = FrameBudget::new(2 << 20);
        let (mut frames, mut peer) = reader(&budget, Duration::from_millis(50));
        peer.write_all(&frame(b"one")).await.unwrap();
        assert_eq!(&frames.next().await.unwrap().unwrap()[..], b"one");
        let idle = tokio::time::timeout(Duration::from_millis(300), frames.next()).await;
        assert!(idle.is_err(), "still waiting, no error: {idle:?}");
        peer.write_all(&(2u32 << 20).to_be_bytes()).await.unwrap();
        let err = frames.next().await.unwrap().unwrap_err();
        assert!(matches!(err, ReadError::TooLarge { .. }), "{err}");
    }
}
