//! A latency and bandwidth shaping TCP proxy, for measuring relay over slow links on a kernel
//! without `netem`: it listens on `127.0.0.1`, forwards each connection to a target, and delays
//! every byte by half the round trip in each direction, optionally at a capped rate.
//!
//! Each direction is a pump: a reader stamps each chunk with the time it may leave (now + one-way
//! delay, later when the rate cap is still sending earlier bytes) and queues it; a writer sleeps
//! until that time and writes it. The queue is bounded (like a router's buffer), so a sender
//! faster than the cap is held back by TCP flow control rather than buffered without end.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context, Result};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// What the link does to traffic.
#[derive(Debug, Clone, Copy)]
pub struct Link {
    /// Round-trip time added (half each way).
    pub rtt: Duration,
    /// Bytes per second each direction carries at most; `None`: no cap.
    pub rate: Option<u64>,
}

impl Link {
    /// A link adding `rtt_ms` of round trip, uncapped.
    pub fn rtt_ms(rtt_ms: u64) -> Link {
        Link {
            rtt: Duration::from_millis(rtt_ms),
            rate: None,
        }
    }

    /// The same link capped at `mbit` megabits per second each way.
    pub fn mbit(self, mbit: u64) -> Link {
        Link {
            rate: Some(mbit * 1_000_000 / 8),
            ..self
        }
    }
}

/// Chunk size of one read (bytes).
const CHUNK: usize = 16 * 1024;
/// Chunks queued per direction at most (4 MiB): the link's buffer.
const QUEUE: usize = 256;

/// A running proxy; stops accepting (and drops its connections) when dropped.
pub struct Shaper {
    port: u16,
    accept: JoinHandle<()>,
}

impl Shaper {
    /// Starts a proxy to `target` shaping traffic as `link` says.
    ///
    /// # Errors
    /// Binding the listening socket failed.
    pub async fn start(target: SocketAddr, link: Link) -> Result<Shaper> {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .context("binding the shaping proxy")?;
        let port = listener.local_addr()?.port();
        let accept = tokio::spawn(async move {
            let mut conns = tokio::task::JoinSet::new();
            while let Ok((client, _)) = listener.accept().await {
                conns.spawn(async move {
                    if let Ok(server) = TcpStream::connect(target).await {
                        let _ = client.set_nodelay(true);
                        let _ = server.set_nodelay(true);
                        let (cr, cw) = client.into_split();
                        let (sr, sw) = server.into_split();
                        tokio::join!(pump(cr, sw, link), pump(sr, cw, link));
                    }
                });
            }
        });
        Ok(Shaper { port, accept })
    }

    /// The local port to connect to instead of the target's.
    pub fn port(&self) -> u16 {
        self.port
    }
}

impl Drop for Shaper {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// Moves bytes from `from` to `to`, each leaving one-way delay after it arrived, no faster than
/// the link's rate. Ends (shutting `to` down) at end of input or on an error either side.
async fn pump(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, link: Link) {
    let one_way = link.rtt / 2;
    let (tx, mut rx) = mpsc::channel::<(Instant, Vec<u8>)>(QUEUE);
    let reader = async move {
        // When the link has finished sending what was queued before.
        let mut free_at = Instant::now();
        let mut buf = vec![0u8; CHUNK];
        loop {
            let n = match from.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            let now = Instant::now();
            let mut leaves = now;
            if let Some(rate) = link.rate {
                free_at = free_at.max(now) + Duration::from_secs_f64(n as f64 / rate as f64);
                leaves = free_at;
            }
            if tx
                .send((leaves + one_way, buf[..n].to_vec()))
                .await
                .is_err()
            {
                break;
            }
        }
    };
    let writer = async move {
        while let Some((due, data)) = rx.recv().await {
            tokio::time::sleep_until(due).await;
            if to.write_all(&data).await.is_err() {
                break;
            }
        }
        let _ = to.shutdown().await;
    };
    tokio::join!(reader, writer);
}
