//! Sans-IO bookkeeping of one pane's stream on the app's side: the [`Sequencer`] that puts
//! events in offset order (each offset at most once, holes explicit) and the [`Credit`] that
//! decides when consumption warrants an `Ack`.

use std::collections::VecDeque;

use super::PaneEvent;

/// Credit bookkeeping of one pane: decides when consumption warrants an `Ack`.
#[derive(Debug, Clone)]
pub(crate) struct Credit {
    enabled: bool,
    window: u64,
    acked: u64,
}

impl Credit {
    /// Credit for a window of `window` bytes starting at offset `start`; `enabled` is whether
    /// the agent throttles by credit at all.
    pub(crate) fn new(enabled: bool, window: u64, start: u64) -> Self {
        Credit {
            enabled,
            window,
            acked: start,
        }
    }

    /// A new subscription (after a re-attach) starts its window at `start`.
    pub(crate) fn restart(&mut self, start: u64) {
        self.acked = start;
    }

    /// The app consumed output up to `end`; returns the offset to ack, if an ack is due (at least
    /// half a window consumed since the last ack).
    pub(crate) fn consumed(&mut self, end: u64) -> Option<u64> {
        if !self.enabled || end < self.acked + (self.window / 2).max(1) {
            return None;
        }
        self.acked = end;
        Some(end)
    }
}

/// Puts a pane's events in offset order, each offset at most once.
#[derive(Debug, Clone)]
pub(crate) struct Sequencer {
    /// Offset of the next byte to deliver.
    pub(crate) next: u64,
}

impl Sequencer {
    /// Drops repeats, trims overlaps and makes holes explicit, then appends the event to `ready`.
    /// Events without offsets pass through in order.
    pub(crate) fn admit(&mut self, ev: PaneEvent, ready: &mut VecDeque<PaneEvent>) {
        match ev {
            PaneEvent::Output { offset, mut data } => {
                let end = offset + data.len() as u64;
                if end <= self.next {
                    return;
                }
                let mut offset = offset;
                if offset < self.next {
                    data.drain(..(self.next - offset) as usize);
                    offset = self.next;
                } else if offset > self.next {
                    ready.push_back(PaneEvent::Gap {
                        from: self.next,
                        to: offset,
                    });
                }
                self.next = end;
                ready.push_back(PaneEvent::Output { offset, data });
            }
            PaneEvent::Gap { from, to } => {
                if to <= self.next {
                    return;
                }
                let from = from.max(self.next);
                self.next = to;
                ready.push_back(PaneEvent::Gap { from, to });
            }
            // The screen as of `offset` replaces everything before it: output continues there.
            PaneEvent::Snapshot { offset, .. } => {
                self.next = offset;
                ready.push_back(ev);
            }
            other => ready.push_back(other),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credit_acks_after_half_a_window() {
        let mut c = Credit::new(true, 100, 1000);
        assert_eq!(c.consumed(1049), None);
        assert_eq!(c.consumed(1050), Some(1050));
        assert_eq!(c.consumed(1060), None);
        assert_eq!(c.consumed(1100), Some(1100));
        c.restart(5000);
        assert_eq!(
            c.consumed(5049),
            None,
            "the new window starts at the resume"
        );
        assert_eq!(c.consumed(5050), Some(5050));
        let mut off = Credit::new(false, 100, 0);
        assert_eq!(
            off.consumed(10_000),
            None,
            "no acks without the credit capability"
        );
    }

    fn out(offset: u64, data: &[u8]) -> PaneEvent {
        PaneEvent::Output {
            offset,
            data: data.to_vec(),
        }
    }

    #[test]
    fn sequencer_drops_repeats_trims_overlaps_and_makes_holes_explicit() {
        let mut seq = Sequencer { next: 10 };
        let mut ready = VecDeque::new();
        seq.admit(out(5, b"01234"), &mut ready); // 5..10 already delivered
        seq.admit(out(8, b"89ab"), &mut ready); // 8..12 overlaps: 10..12 is new
        seq.admit(PaneEvent::Resumed { from: 12 }, &mut ready);
        seq.admit(out(14, b"ef"), &mut ready); // 12..14 missing
        seq.admit(PaneEvent::Gap { from: 12, to: 14 }, &mut ready); // already reported
        let got: Vec<_> = ready.into_iter().collect();
        assert_eq!(
            got,
            vec![
                out(10, b"ab"),
                PaneEvent::Resumed { from: 12 },
                PaneEvent::Gap { from: 12, to: 14 },
                out(14, b"ef")
            ]
        );
        assert_eq!(seq.next, 16);
    }
}
