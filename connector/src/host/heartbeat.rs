//! Dead-link detection (sans-IO): decides from periodic observations of "frames received so
//! far" whether the link is alive, needs a ping, looks unresponsive, or is dead.
//!
//! Silence is what counts, not ping replies: any frame (output, a reply, a pong) proves the link.
//! After [`HeartbeatPolicy::ping_after`] of silence the supervisor pings (so an idle link is not
//! mistaken for a dead one); after [`HeartbeatPolicy::dead_after`] of silence the link is dead.
//!
//! **Clock jumps** (laptop sleep, a stopped process): when the time between two observations is
//! far longer than the tick, the silence was not observed, it happened while we were not running.
//! The first observation after a jump therefore starts the silence afresh and probes at once;
//! only silence *after* the probe can declare the link dead. So a wake-up is one probe, not a
//! timeout storm. The monotonic clock misses suspend on Linux, so both it and the boot-time clock
//! (which counts suspend) are compared. Declaring a link dead never ends anything on the host
//! (rule A); it only closes our side and reconnects.

use std::time::{Duration, Instant};

/// Settings of the detector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeartbeatPolicy {
    /// How often the link is observed (default 500 ms).
    pub tick: Duration,
    /// Silence after which a ping is sent (again every `ping_after` while silent; default 2 s).
    pub ping_after: Duration,
    /// Silence after which the link is reported unresponsive (typed keys get no echo; default
    /// 3 s).
    pub unresponsive_after: Duration,
    /// Silence after which the link is declared dead and the connection closed (default 8 s, so a
    /// silent partition is detected within 10 s).
    pub dead_after: Duration,
}

impl Default for HeartbeatPolicy {
    fn default() -> Self {
        HeartbeatPolicy {
            tick: Duration::from_millis(500),
            ping_after: Duration::from_secs(2),
            unresponsive_after: Duration::from_secs(3),
            dead_after: Duration::from_secs(8),
        }
    }
}

/// A reading of both clocks.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Now {
    /// Monotonic (stops during suspend on Linux).
    pub(crate) mono: Instant,
    /// Time since boot including suspend ([`crate::sys::boot_time`]).
    pub(crate) boot: Duration,
}

impl Now {
    /// Reads both clocks.
    pub(crate) fn read() -> Now {
        Now {
            mono: Instant::now(),
            boot: crate::sys::boot_time(),
        }
    }
}

/// What the supervisor should do after an observation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Beat {
    /// Frames arrived since the last observation (or silence is still short).
    Alive,
    /// Send a ping. `unresponsive` says whether the silence is long enough to tell the user.
    Ping {
        /// Silence so far.
        silent: Duration,
        /// Whether to report the link unresponsive.
        unresponsive: bool,
    },
    /// Still silent; a ping is out. `unresponsive` as for [`Beat::Ping`].
    Waiting {
        /// Silence so far.
        silent: Duration,
        /// Whether to report the link unresponsive.
        unresponsive: bool,
    },
    /// Dead: nothing arrived for `silent`.
    Dead {
        /// Silence so far.
        silent: Duration,
    },
}

/// The detector's state for one connection.
#[derive(Debug, Clone)]
pub(crate) struct Heartbeat {
    policy: HeartbeatPolicy,
    frames: u64,
    last_contact: Instant,
    last_seen: Now,
    pinged: Option<Instant>,
}

impl Heartbeat {
    /// A detector for a connection that just received its welcome at `now`.
    pub(crate) fn new(policy: HeartbeatPolicy, now: Now, frames: u64) -> Heartbeat {
        Heartbeat {
            policy,
            frames,
            last_contact: now.mono,
            last_seen: now,
            pinged: None,
        }
    }

    /// When the last frame was seen (as of the last observation).
    pub(crate) fn last_contact(&self) -> Instant {
        self.last_contact
    }

    /// One observation: `frames` is the connection's count of received frames at `now`.
    pub(crate) fn observe(&mut self, now: Now, frames: u64) -> Beat {
        let gap = now
            .mono
            .saturating_duration_since(self.last_seen.mono)
            .max(now.boot.saturating_sub(self.last_seen.boot));
        self.last_seen = now;
        if frames != self.frames {
            self.frames = frames;
            self.last_contact = now.mono;
            self.pinged = None;
            return Beat::Alive;
        }
        if gap > self.policy.tick * 4 + Duration::from_secs(1) {
            // A clock jump: we were not running. Probe once, then judge only what follows.
            tracing::debug!(?gap, "clock jump: probing the link before judging it");
            self.last_contact = now.mono;
            self.pinged = Some(now.mono);
            return Beat::Ping {
                silent: Duration::ZERO,
                unresponsive: false,
            };
        }
        let silent = now.mono.saturating_duration_since(self.last_contact);
        if silent >= self.policy.dead_after {
            return Beat::Dead { silent };
        }
        let unresponsive = silent >= self.policy.unresponsive_after;
        let ping_due = silent >= self.policy.ping_after
            && self
                .pinged
                .is_none_or(|p| now.mono.saturating_duration_since(p) >= self.policy.ping_after);
        if ping_due {
            self.pinged = Some(now.mono);
            return Beat::Ping {
                silent,
                unresponsive,
            };
        }
        if silent >= self.policy.ping_after {
            Beat::Waiting {
                silent,
                unresponsive,
            }
        } else {
            Beat::Alive
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A scripted clock: `at(ms)` is `ms` after the start on both clocks unless told otherwise.
    struct Clock {
        start: Instant,
    }

    impl Clock {
        fn new() -> Clock {
            Clock {
                start: Instant::now(),
            }
        }

        fn at(&self, ms: u64) -> Now {
            self.split(ms, ms)
        }

        /// Monotonic at `mono` ms, boot time at `boot` ms (they differ after a suspend).
        fn split(&self, mono: u64, boot: u64) -> Now {
            Now {
                mono: self.start + Duration::from_millis(mono),
                boot: Duration::from_secs(1000) + Duration::from_millis(boot),
            }
        }
    }

    fn kind(b: Beat) -> &'static str {
        match b {
            Beat::Alive => "alive",
            Beat::Ping {
                unresponsive: false,
                ..
            } => "ping",
            Beat::Ping {
                unresponsive: true, ..
            } => "ping+unresponsive",
            Beat::Waiting {
                unresponsive: false,
                ..
            } => "waiting",
            Beat::Waiting {
                unresponsive: true, ..
            } => "waiting+unresponsive",
            Beat::Dead { .. } => "dead",
        }
    }

    /// Runs observations every 500 ms from 500 to `until` ms with a frame count from `frames`,
    /// returning the first tick (ms) of each verdict kind change.
    fn run(frames: impl Fn(u64) -> u64, until: u64) -> Vec<(u64, &'static str)> {
        let clock = Clock::new();
        let mut hb = Heartbeat::new(HeartbeatPolicy::default(), clock.at(0), frames(0));
        let mut out: Vec<(u64, &'static str)> = Vec::new();
        let mut t = 500;
        while t <= until {
            let k = kind(hb.observe(clock.at(t), frames(t)));
            if out.last().map(|(_, last)| *last) != Some(k) {
                out.push((t, k));
            }
            if k == "dead" {
                break;
            }
            t += 500;
        }
        out
    }

    #[test]
    fn traffic_keeps_the_link_alive_without_pings() {
        assert_eq!(run(|t| t / 500, 60_000), vec![(500, "alive")]);
    }

    #[test]
    fn silence_pings_then_warns_then_declares_death_within_ten_seconds() {
        assert_eq!(
            run(|_| 0, 60_000),
            vec![
                (500, "alive"),
                (2000, "ping"),
                (2500, "waiting"),
                (3000, "waiting+unresponsive"),
                (4000, "ping+unresponsive"),
                (4500, "waiting+unresponsive"),
                (6000, "ping+unresponsive"),
                (6500, "waiting+unresponsive"),
                (8000, "dead"),
            ]
        );
    }

    #[test]
    fn a_pong_after_the_first_ping_keeps_an_idle_link_alive() {
        // The agent answers each ping within the next tick.
        let events = run(
            |t| if t >= 2500 { 1 + (t - 2500) / 2500 } else { 0 },
            30_000,
        );
        assert!(events.iter().all(|(_, k)| *k != "dead"), "{events:?}");
        assert!(
            events.iter().all(|(_, k)| !k.contains("unresponsive")),
            "{events:?}"
        );
    }

    /// A process stopped for 60 s (SIGSTOP) sees a 60 s gap on the monotonic clock; a suspended
    /// laptop sees it only on the boot clock. Either way: probe, not death.
    #[test]
    fn a_clock_jump_probes_once_before_judging() {
        let clock = Clock::new();
        for (mono, boot) in [(61_000, 61_000), (1_000, 61_000)] {
            let mut hb = Heartbeat::new(HeartbeatPolicy::default(), clock.at(0), 0);
            assert_eq!(kind(hb.observe(clock.at(500), 0)), "alive");
            let after = hb.observe(clock.split(mono, boot), 0);
            assert_eq!(
                kind(after),
                "ping",
                "the jump probes (mono {mono}, boot {boot})"
            );
            // The probe is answered: alive.
            assert_eq!(
                kind(hb.observe(clock.split(mono + 500, boot + 500), 1)),
                "alive"
            );
        }
        // Unanswered, the probe leads to death only after a full `dead_after` of silence.
        let mut hb = Heartbeat::new(HeartbeatPolicy::default(), clock.at(0), 0);
        hb.observe(clock.at(500), 0);
        assert_eq!(kind(hb.observe(clock.at(61_000), 0)), "ping");
        let mut t = 61_500;
        while kind(hb.observe(clock.at(t), 0)) != "dead" {
            t += 500;
        }
        assert_eq!(t, 69_000, "dead 8 s after the probe, not at once");
    }
}
