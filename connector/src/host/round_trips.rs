//! [`Host::round_trips`]: the round trip to a host's agent, measured in the background for the
//! prediction engine ([`crate::predict::Predictor::rtt_sample`]).

use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::{Host, HostInner};

/// Pings per round-trip sample; the quickest counts.
const PINGS_PER_SAMPLE: u32 = 3;
/// Samples taken [`QUICK_EVERY`] apart at the start (the engine turns predictions on after three
/// slow ones, [`crate::predict::SHOW_AFTER_SAMPLES`]).
const QUICK_SAMPLES: u32 = 3;
/// The pause between the first [`QUICK_SAMPLES`] samples: 100 ms.
const QUICK_EVERY: Duration = Duration::from_millis(100);
/// The pause between later samples: 1 s.
const SAMPLE_EVERY: Duration = Duration::from_secs(1);

/// Round trips to the agent, one sample at a time; see [`Host::round_trips`]. Clones share one
/// pinger; it stops when every clone is dropped or the host is closed.
#[derive(Debug, Clone)]
pub struct RoundTrips(watch::Receiver<Option<Duration>>);

impl RoundTrips {
    /// The next sample (a round trip, application to agent and back), waiting for it. A clone
    /// sees samples taken after it was made, at most the newest one when it reads late.
    /// `None` once the host was closed: no sample comes any more.
    pub async fn next(&mut self) -> Option<Duration> {
        loop {
            self.0.changed().await.ok()?;
            if let Some(rtt) = *self.0.borrow_and_update() {
                return Some(rtt);
            }
        }
    }
}

impl Host {
    /// Starts measuring the round trip to the agent, for the prediction engine. Each sample is
    /// the quickest of 3 pings in a row on the live connection, so a moment of local load (a
    /// busy core, a cold code path) does not pass for a slow link; the first 3 samples come
    /// 100 ms apart, so predictions can turn on within about a second on a slow link, then one
    /// a second. While the host has no connection
    /// nothing is sampled. The pings are the agent's `Ping` request: a few dozen bytes each
    /// way, answered ahead of no other work.
    ///
    /// The pinger does not keep the host open: it stops when the host is closed or every
    /// [`RoundTrips`] clone is gone. Must be called inside a tokio runtime.
    pub fn round_trips(&self) -> RoundTrips {
        let (tx, rx) = watch::channel(None);
        let shutdown = self.inner.shutdown.clone();
        tokio::spawn(ping(Arc::downgrade(&self.inner), shutdown, tx));
        RoundTrips(rx)
    }
}

/// The pinger. It holds the host's state only for a moment each round, never the last
/// reference across an await: the host is dropped where it would be without a pinger.
async fn ping(
    inner: Weak<HostInner>,
    shutdown: CancellationToken,
    tx: watch::Sender<Option<Duration>>,
) {
    let mut samples = 0u32;
    loop {
        let Some(live) = inner.upgrade().map(|inner| inner.live()) else {
            return;
        };
        if let Some(live) = live {
            let mut best: Option<Duration> = None;
            for _ in 0..PINGS_PER_SAMPLE {
                if let Ok(rtt) = live.session.ping().await {
                    best = Some(best.map_or(rtt, |b| b.min(rtt)));
                }
            }
            if let Some(rtt) = best {
                samples += 1;
                if tx.send(Some(rtt)).is_err() {
                    return;
                }
            }
        }
        let pause = if samples < QUICK_SAMPLES {
            QUICK_EVERY
        } else {
            SAMPLE_EVERY
        };
        tokio::select! {
            () = tokio::time::sleep(pause) => {}
            () = tx.closed() => return,
            () = shutdown.cancelled() => return,
        }
    }
}
