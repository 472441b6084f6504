//! The smoothed round trip and the two switches that follow it with hysteresis: whether
//! predictions are shown (adaptive mode) and whether unconfirmed ones are underlined.
//!
//! Smoothing is RFC 6298's: the first sample R sets SRTT = R and RTTVAR = R/2; each later one
//! sets RTTVAR = 3/4·RTTVAR + 1/4·|SRTT − R| and SRTT = 7/8·SRTT + 1/8·R. The thresholds are
//! mosh's (`terminaloverlay.h`): show above 30 ms, stop below 20 ms; underline above 80 ms, stop
//! below 50 ms. Between the two values of a pair a switch keeps its state, so a round trip
//! wandering around one threshold does not make predictions flicker on and off.
//!
//! Turning predictions on takes evidence, not one sample: the first sample sets SRTT, so a
//! single slow ping (a loaded machine, a busy agent) would otherwise switch them on over a
//! fast link and make the screen flicker. Showing starts only once [`SHOW_AFTER_SAMPLES`] samples were
//! taken and each of the last [`SHOW_AFTER_SAMPLES`] was above [`SHOW_ABOVE`] as well as SRTT. Turning
//! off keeps mosh's rule (SRTT below [`HIDE_BELOW`]).

use std::time::Duration;

/// Predictions start being shown (adaptive mode) once the smoothed round trip exceeds this
/// (30 ms, mosh's `SRTT_TRIGGER_HIGH`).
pub const SHOW_ABOVE: Duration = Duration::from_millis(30);
/// Predictions stop being shown (adaptive mode) once the smoothed round trip falls below this
/// (20 ms, mosh's `SRTT_TRIGGER_LOW`).
pub const HIDE_BELOW: Duration = Duration::from_millis(20);
/// Unconfirmed predictions are underlined once the smoothed round trip exceeds this (80 ms,
/// mosh's `FLAG_TRIGGER_HIGH`).
pub const UNDERLINE_ABOVE: Duration = Duration::from_millis(80);
/// Underlining stops once the smoothed round trip falls below this (50 ms, mosh's
/// `FLAG_TRIGGER_LOW`).
pub const PLAIN_BELOW: Duration = Duration::from_millis(50);

/// How many samples, all of them slow, it takes to turn showing on (3).
pub const SHOW_AFTER_SAMPLES: usize = 3;

/// The floor of the variance term in [`Rtt::echo_wait`] (50 ms): a steady link has almost no
/// variance, and an echo a few milliseconds late must not read as a wrong prediction.
const ECHO_SLACK: Duration = Duration::from_millis(50);
/// How long a keystroke's echo is waited for before any round trip was measured (1 s).
const UNMEASURED_ECHO_WAIT: Duration = Duration::from_secs(1);
/// The shortest time an unconfirmed prediction stays before it is withdrawn (1 s, mosh's
/// order of magnitude).
const MIN_WITHDRAW_AFTER: Duration = Duration::from_secs(1);

/// Round-trip estimate plus the display switches.
#[derive(Debug, Clone, Default)]
pub(crate) struct Rtt {
    srtt: Option<Duration>,
    rttvar: Duration,
    /// The last [`SHOW_AFTER_SAMPLES`] samples, newest last.
    recent: Vec<Duration>,
    showing: bool,
    underlining: bool,
}

impl Rtt {
    /// Takes one measured round trip and updates both switches.
    pub(crate) fn sample(&mut self, rtt: Duration) {
        match self.srtt {
            None => {
                self.srtt = Some(rtt);
                self.rttvar = rtt / 2;
            }
            Some(srtt) => {
                self.rttvar = self.rttvar * 3 / 4 + srtt.abs_diff(rtt) / 4;
                self.srtt = Some(srtt * 7 / 8 + rtt / 8);
            }
        }
        if self.recent.len() == SHOW_AFTER_SAMPLES {
            self.recent.remove(0);
        }
        self.recent.push(rtt);
        let srtt = self.srtt.unwrap_or_default();
        let evidence =
            self.recent.len() == SHOW_AFTER_SAMPLES && self.recent.iter().all(|&r| r > SHOW_ABOVE);
        self.showing =
            switch(self.showing, srtt, HIDE_BELOW, SHOW_ABOVE) && (self.showing || evidence);
        self.underlining = switch(self.underlining, srtt, PLAIN_BELOW, UNDERLINE_ABOVE);
    }

    /// The smoothed round trip, `None` before the first sample.
    pub(crate) fn srtt(&self) -> Option<Duration> {
        self.srtt
    }

    /// Whether the link is slow enough to show predictions (adaptive mode).
    pub(crate) fn showing(&self) -> bool {
        self.showing
    }

    /// Whether unconfirmed predictions are underlined: the link is slow enough, or nothing was
    /// measured yet (`always` mode before the first round trip: a link not known to be fast).
    pub(crate) fn underlining(&self) -> bool {
        self.underlining || self.srtt.is_none()
    }

    /// How long after a keystroke its echo should have arrived: SRTT + max(4·RTTVAR, 50 ms)
    /// (RFC 6298's retransmission timeout with a 50 ms floor on the variance term); 1 s before
    /// any round trip was measured. Output arriving later that contradicts the keystroke's
    /// prediction proves it wrong.
    pub(crate) fn echo_wait(&self) -> Duration {
        match self.srtt {
            None => UNMEASURED_ECHO_WAIT,
            Some(srtt) => srtt + (self.rttvar * 4).max(ECHO_SLACK),
        }
    }

    /// How long a prediction may stay unconfirmed before it is withdrawn: max(1 s, 2 × echo
    /// wait).
    pub(crate) fn withdraw_after(&self) -> Duration {
        MIN_WITHDRAW_AFTER.max(self.echo_wait() * 2)
    }
}

/// A switch with hysteresis: turns on above `on_above`, off below `off_below`, else stays.
fn switch(on: bool, value: Duration, off_below: Duration, on_above: Duration) -> bool {
    if value > on_above {
        true
    } else if value < off_below {
        false
    } else {
        on
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn the_first_sample_sets_the_estimate_and_later_ones_move_it_by_an_eighth() {
        let mut rtt = Rtt::default();
        assert_eq!(rtt.srtt(), None);
        assert_eq!(rtt.echo_wait(), ms(1000));
        rtt.sample(ms(200));
        assert_eq!(rtt.srtt(), Some(ms(200)));
        assert_eq!(rtt.echo_wait(), ms(200 + 400));
        rtt.sample(ms(120));
        assert_eq!(rtt.srtt(), Some(ms(190)));
        // RTTVAR = 3/4·100 + 1/4·80 = 95.
        assert_eq!(rtt.echo_wait(), ms(190 + 380));
        assert_eq!(rtt.withdraw_after(), ms(1140));
        for _ in 0..100 {
            rtt.sample(ms(100));
        }
        assert_eq!(rtt.srtt().map(|d| d.as_millis()), Some(100));
        assert_eq!(
            rtt.echo_wait().as_millis(),
            150,
            "the variance term never falls below 50 ms"
        );
        assert_eq!(rtt.withdraw_after(), ms(1000));
    }

    #[test]
    fn both_switches_keep_their_state_between_their_two_thresholds() {
        let mut rtt = Rtt::default();
        rtt.sample(ms(25));
        assert!(
            !rtt.showing(),
            "between 20 and 30 ms a switch that is off stays off"
        );
        let mut rtt = Rtt::default();
        for _ in 0..SHOW_AFTER_SAMPLES {
            rtt.sample(ms(31));
        }
        assert!(rtt.showing(), "31 ms > 30 ms turns showing on");
        assert!(!rtt.underlining());
        rtt.sample(ms(25)); // 30.25
        rtt.sample(ms(25)); // 29.6
        rtt.sample(ms(21)); // 28.5
        assert!(rtt.showing(), "between 20 and 30 ms the switch stays on");
        for _ in 0..40 {
            rtt.sample(ms(10));
        }
        assert!(!rtt.showing(), "below 20 ms it turns off");
        for _ in 0..40 {
            rtt.sample(ms(25));
        }
        assert!(!rtt.showing(), "back between 20 and 30 ms it stays off");

        let mut rtt = Rtt::default();
        for _ in 0..SHOW_AFTER_SAMPLES {
            rtt.sample(ms(81));
        }
        assert!(rtt.underlining() && rtt.showing());
        for _ in 0..40 {
            rtt.sample(ms(55));
        }
        assert!(
            rtt.underlining(),
            "between 50 and 80 ms underlining stays on"
        );
        for _ in 0..40 {
            rtt.sample(ms(45));
        }
        assert!(!rtt.underlining() && rtt.showing());
        for _ in 0..40 {
            rtt.sample(ms(70));
        }
        assert!(!rtt.underlining(), "back between 50 and 80 ms it stays off");
    }

    /// Reviewer's finding: the first sample set SRTT, so one slow ping on a loaded machine
    /// turned predictions on over a fast link.
    #[test]
    fn one_slow_sample_does_not_turn_showing_on() {
        let mut rtt = Rtt::default();
        rtt.sample(ms(500));
        assert!(!rtt.showing(), "one sample is no evidence");
        for _ in 0..50 {
            rtt.sample(ms(2));
            assert!(
                !rtt.showing(),
                "SRTT still above 30 ms, but the link is fast"
            );
        }
        // Slow samples among fast ones are not enough either: all the recent ones must be.
        rtt.sample(ms(300));
        rtt.sample(ms(300));
        rtt.sample(ms(2));
        assert!(!rtt.showing());
    }

    #[test]
    fn a_slow_link_turns_showing_on_at_the_third_sample() {
        let mut rtt = Rtt::default();
        rtt.sample(ms(200));
        rtt.sample(ms(200));
        assert!(!rtt.showing());
        rtt.sample(ms(200));
        assert!(rtt.showing());
        rtt.sample(ms(5));
        assert!(
            rtt.showing(),
            "once on, one fast sample does not turn it off"
        );
    }

    #[test]
    fn unmeasured_predictions_are_underlined_until_a_fast_sample() {
        let mut rtt = Rtt::default();
        assert!(
            rtt.underlining(),
            "a link not measured is not known to be fast"
        );
        rtt.sample(ms(5));
        assert!(!rtt.underlining());
    }
}
