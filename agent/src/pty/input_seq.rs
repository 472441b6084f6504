//! Per-PTY memory of sequenced input (`InputSeq`, protocol 1.2): the last seq applied for each
//! writer, so a request resent after a reconnect is written at most once.
//!
//! Sans-IO. A [`WriterTable`] belongs to one PTY and is used under that PTY's lock together with
//! the enqueue of the input ([`WriterTable::apply`] takes the write as a closure), so checking a
//! seq and writing its bytes are one step: two connections racing the same `(writer, seq)` write
//! it once, and a lower seq can never be written after a higher one.
//!
//! Rules (`docs/protocol.md`, `InputSeq`):
//! - a writer the table does not hold (new, or evicted) has its seq applied whatever its value;
//! - a known writer's seq is applied only when it is greater than the last one applied;
//!   otherwise the request is a duplicate and nothing is written;
//! - a write that fails (the PTY's input queue is full, ...) records nothing, so the same seq can
//!   be retried;
//! - at most [`MAX_WRITERS`] writers are held; a new one evicts the least recently used.
//!
//! Cost (rule I): a linear scan of at most [`MAX_WRITERS`] entries per request, no allocation
//! once the table has grown to the number of writers the PTY sees (usually one or two).

/// Most writers remembered per PTY. A connector uses one writer id per pane handle, so more than
/// a handful on one PTY means clients that come and go; the least recently used is forgotten.
pub const MAX_WRITERS: usize = 64;

/// What [`WriterTable::apply`] did with a request that was not refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    /// The seq was new: the bytes were written (queued) and the seq recorded.
    Written,
    /// The writer's last applied seq is `last`, at or above the request's: nothing was written.
    Duplicate {
        /// The writer's last applied seq.
        last: u64,
    },
}

#[derive(Debug, Clone, Copy, serde::Serialize, serde::Deserialize)]
struct Entry {
    writer: u64,
    /// Last seq applied for this writer.
    last: u64,
    /// Value of the table's clock when this writer was last seen (larger = more recent).
    used: u64,
}

/// The last applied seq of each writer of one PTY, bounded to [`MAX_WRITERS`] writers.
/// Serializable so a live upgrade hands it to the new daemon ([`crate::upgrade`]).
#[derive(Debug, Default, Clone, serde::Serialize, serde::Deserialize)]
pub struct WriterTable {
    entries: Vec<Entry>,
    /// Counts requests; orders the entries by recency for eviction.
    clock: u64,
}

impl WriterTable {
    /// An empty table (allocates nothing until the first write).
    pub fn new() -> Self {
        Self::default()
    }

    /// Applies `(writer, seq)`: calls `write` when `seq` is new for `writer` and records it if
    /// `write` succeeds; answers [`Applied::Duplicate`] without calling it otherwise.
    ///
    /// # Errors
    /// `write`'s error, unchanged; the table then records nothing, so the same seq can be retried.
    pub fn apply<E>(
        &mut self,
        writer: u64,
        seq: u64,
        write: impl FnOnce() -> Result<(), E>,
    ) -> Result<Applied, E> {
        self.clock += 1;
        let now = self.clock;
        let found = self.entries.iter_mut().position(|e| e.writer == writer);
        if let Some(i) = found {
            let entry = &mut self.entries[i];
            entry.used = now;
            if seq <= entry.last {
                return Ok(Applied::Duplicate { last: entry.last });
            }
            write()?;
            entry.last = seq;
            return Ok(Applied::Written);
        }
        write()?;
        let entry = Entry {
            writer,
            last: seq,
            used: now,
        };
        if self.entries.len() < MAX_WRITERS {
            self.entries.push(entry);
        } else if let Some(oldest) = self.entries.iter_mut().min_by_key(|e| e.used) {
            *oldest = entry;
        }
        Ok(Applied::Written)
    }

    /// The last seq applied for `writer`, if the table holds it.
    pub fn last(&self, writer: u64) -> Option<u64> {
        self.entries
            .iter()
            .find(|e| e.writer == writer)
            .map(|e| e.last)
    }

    /// Number of writers held (at most [`MAX_WRITERS`]).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no writer is held.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One request: `(writer, seq, whether the write succeeds)`.
    type Step = (u64, u64, bool);

    /// What a step must give.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Want {
        /// The write was called and succeeded.
        Written,
        /// The write was called and failed (nothing recorded).
        Refused,
        /// The write was not called; the writer's last seq is this.
        Duplicate(u64),
    }
    use Want::*;

    /// Runs `steps` on a fresh table and compares each outcome, and whether the write was called,
    /// with `want`.
    fn check(name: &str, steps: &[Step], want: &[Want]) -> WriterTable {
        assert_eq!(steps.len(), want.len(), "{name}: table row is malformed");
        let mut table = WriterTable::new();
        for (i, (&(writer, seq, ok), &want)) in steps.iter().zip(want).enumerate() {
            let mut called = false;
            let got = table.apply(writer, seq, || {
                called = true;
                if ok {
                    Ok(())
                } else {
                    Err("queue full")
                }
            });
            let got = match got {
                Ok(Applied::Written) => Written,
                Ok(Applied::Duplicate { last }) => Duplicate(last),
                Err(_) => Refused,
            };
            assert_eq!(got, want, "{name}: step {i} ({writer}, {seq}, ok={ok})");
            assert_eq!(
                called,
                !matches!(want, Duplicate(_)),
                "{name}: step {i}: write called"
            );
        }
        table
    }

    #[test]
    fn seqs_are_applied_once_in_increasing_order_per_writer() {
        #[rustfmt::skip]
        let cases: &[(&str, &[Step], &[Want])] = &[
            ("new writer, any first seq", &[(1, 5, true)], &[Written]),
            ("new writer, seq 0", &[(1, 0, true)], &[Written]),
            ("next seq", &[(1, 1, true), (1, 2, true)], &[Written, Written]),
            ("duplicate", &[(1, 1, true), (1, 1, true)], &[Written, Duplicate(1)]),
            ("duplicate of seq 0", &[(1, 0, true), (1, 0, true)], &[Written, Duplicate(0)]),
            ("lower seq", &[(1, 5, true), (1, 3, true)], &[Written, Duplicate(5)]),
            ("gap in seq", &[(1, 1, true), (1, 10, true), (1, 9, true), (1, 11, true)],
                &[Written, Written, Duplicate(10), Written]),
            ("u64::MAX, then nothing more", &[(1, u64::MAX, true), (1, u64::MAX, true)],
                &[Written, Duplicate(u64::MAX)]),
            ("writers are independent",
                &[(1, 5, true), (2, 1, true), (2, 5, true), (1, 5, true), (2, 5, true)],
                &[Written, Written, Written, Duplicate(5), Duplicate(5)]),
            ("refused write of a new writer records nothing",
                &[(1, 1, false), (1, 1, true), (1, 1, true)],
                &[Refused, Written, Duplicate(1)]),
            ("refused write keeps the last seq",
                &[(1, 1, true), (1, 2, false), (1, 2, false), (1, 2, true), (1, 2, true)],
                &[Written, Refused, Refused, Written, Duplicate(2)]),
            ("a duplicate is not written even when writing would fail",
                &[(1, 3, true), (1, 3, false)], &[Written, Duplicate(3)]),
        ];
        for (name, steps, want) in cases {
            check(name, steps, want);
        }
    }

    #[test]
    fn refused_new_writer_takes_no_slot() {
        let table = check("refused", &[(1, 1, false)], &[Refused]);
        assert!(table.is_empty());
        assert_eq!(table.last(1), None);
    }

    #[test]
    fn the_least_recently_used_writer_is_evicted_and_then_treated_as_new() {
        let max = MAX_WRITERS as u64;
        // Writers 0..max each write seq 1; writer 0 is seen again (a duplicate) so writer 1 is
        // now the least recently used.
        let mut steps: Vec<Step> = (0..max).map(|w| (w, 1, true)).collect();
        let mut want = vec![Written; MAX_WRITERS];
        steps.push((0, 1, true));
        want.push(Duplicate(1));
        // A new writer evicts writer 1, whose seq 1 is then applied again (treated as new),
        // evicting writer 2.
        steps.extend([(max, 1, true), (1, 1, true)]);
        want.extend([Written, Written]);
        let table = check("eviction", &steps, &want);
        assert_eq!(table.len(), MAX_WRITERS);
        assert_eq!(table.last(0), Some(1), "recently seen: kept");
        assert_eq!(
            table.last(2),
            None,
            "least recently used after writer 1: evicted"
        );
        assert_eq!(table.last(max), Some(1));
        assert_eq!(table.last(3), Some(1));
    }
}
