//! The reconnect schedule (sans-IO): exponential delays with jitter from backon, capped, endless,
//! and a flap rule so a link that keeps dropping right after connecting does not get the fast
//! start again and again (orca issue #12597 reconnected every 1–2 s forever).

use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};

/// Settings of the schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BackoffPolicy {
    /// Delay before the first retry, before jitter (default 250 ms).
    pub first: Duration,
    /// Longest delay between two attempts, jitter included (default 30 s).
    pub cap: Duration,
    /// A connection that lived at least this long before it dropped was healthy: the next
    /// outage starts again at `first`. A shorter one continues the schedule where it was
    /// (default 60 s).
    pub stable_after: Duration,
}

impl Default for BackoffPolicy {
    fn default() -> Self {
        BackoffPolicy {
            first: Duration::from_millis(250),
            cap: Duration::from_secs(30),
            stable_after: Duration::from_secs(60),
        }
    }
}

/// Where the schedule stands.
pub(crate) struct Backoff {
    policy: BackoffPolicy,
    delays: ExponentialBackoff,
    seed: Option<u64>,
}

impl Backoff {
    /// A fresh schedule. `seed` fixes the jitter (tests); `None` draws it at random.
    pub(crate) fn new(policy: BackoffPolicy, seed: Option<u64>) -> Backoff {
        Backoff {
            delays: Self::build(policy, seed),
            policy,
            seed,
        }
    }

    fn build(policy: BackoffPolicy, seed: Option<u64>) -> ExponentialBackoff {
        // backon adds its jitter (up to 100 %) after its own cap, so the cap given to it is half
        // ours and `next_delay` clamps what comes out.
        let mut builder = ExponentialBuilder::default()
            .with_min_delay(policy.first)
            .with_max_delay((policy.cap / 2).max(policy.first))
            .with_factor(2.0)
            .with_jitter()
            .without_max_times();
        if let Some(seed) = seed {
            builder = builder.with_jitter_seed(seed);
        }
        builder.build()
    }

    /// The delay before the next attempt: never more than the cap, never exhausted.
    pub(crate) fn next_delay(&mut self) -> Duration {
        self.delays
            .next()
            .unwrap_or(self.policy.cap)
            .min(self.policy.cap)
    }

    /// A connection that lasted `lived` dropped: if it was healthy, start again from the first
    /// delay; if it flapped, keep climbing.
    pub(crate) fn connection_ended(&mut self, lived: Duration) {
        if lived >= self.policy.stable_after {
            self.reset();
        }
    }

    /// Starts again from the first delay (after a healthy connection, or a retry the user asked
    /// for after a permanent failure).
    pub(crate) fn reset(&mut self) {
        self.delays = Self::build(self.policy, self.seed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> BackoffPolicy {
        BackoffPolicy::default()
    }

    #[test]
    fn delays_start_fast_grow_and_never_pass_the_cap_or_run_out() {
        let mut b = Backoff::new(policy(), Some(7));
        let delays: Vec<Duration> = (0..40).map(|_| b.next_delay()).collect();
        let first = delays[0];
        assert!(
            first >= Duration::from_millis(250) && first <= Duration::from_millis(500),
            "first retry is fast: {first:?}"
        );
        assert!(delays[4] > delays[0], "grows: {delays:?}");
        assert!(
            delays.iter().all(|d| *d <= Duration::from_secs(30)),
            "{delays:?}"
        );
        assert!(
            delays[20..].iter().all(|d| *d >= Duration::from_secs(15)),
            "stays near the cap instead of giving up: {delays:?}"
        );
    }

    /// Rule G plus orca #12597: a link that drops again within the stable period does not get
    /// the fast start back; a healthy one does.
    #[test]
    fn a_flapping_link_keeps_climbing_and_a_healthy_one_starts_over() {
        let mut b = Backoff::new(policy(), Some(1));
        for _ in 0..6 {
            b.next_delay();
        }
        b.connection_ended(Duration::from_secs(2));
        assert!(
            b.next_delay() >= Duration::from_secs(8),
            "a 2 s connection is a flap: no reset"
        );
        b.connection_ended(Duration::from_secs(61));
        assert!(
            b.next_delay() <= Duration::from_millis(500),
            "after a healthy minute the schedule starts over"
        );
    }

    #[test]
    fn jitter_spreads_clients_apart() {
        let first = |seed| Backoff::new(policy(), Some(seed)).next_delay();
        let spread: std::collections::HashSet<Duration> = (0..8).map(first).collect();
        assert!(spread.len() > 1, "all clients would retry in lockstep");
    }
}
