//! The replay ring: the last `capacity` bytes of one PTY's output, addressed by absolute offsets.
//!
//! Sans-IO. The PTY reader task appends everything it reads (it never waits for a client), and
//! each subscription reads from its own cursor. Offsets count bytes since the PTY was created and
//! never reset (DESIGN §2 "offset"), so a reader that fell behind the oldest byte still held learns
//! exactly which range it lost ([`ReadFrom::Gap`]) instead of silently jumping (rule E).

use std::collections::VecDeque;

/// Default ring size per PTY, in bytes (4 MiB). Overridden by env `RELAY_REPLAY_BYTES`.
pub const DEFAULT_REPLAY_BYTES: usize = 4 * 1024 * 1024;

/// What [`Ring::read_from`] found at an offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadFrom {
    /// Bytes starting exactly at the requested offset (never empty, at most `max` long).
    Data(Vec<u8>),
    /// Bytes `from..to` were dropped from the ring before this reader got them; continue at `to`
    /// (the oldest byte still held).
    Gap {
        /// The requested offset (first lost byte).
        from: u64,
        /// Oldest offset still held.
        to: u64,
    },
    /// The offset is the current end: nothing to read yet.
    End,
    /// The offset lies beyond the end of the stream: the caller holds a cursor from elsewhere.
    Beyond {
        /// The current end offset.
        end: u64,
    },
}

/// A bounded byte ring with absolute `u64` offsets.
#[derive(Debug, Clone)]
pub struct Ring {
    buf: VecDeque<u8>,
    capacity: usize,
    /// Absolute offset of `buf[0]`.
    start: u64,
}

impl Ring {
    /// An empty ring that keeps at most `capacity` bytes (at least 1).
    pub fn new(capacity: usize) -> Self {
        Ring {
            buf: VecDeque::new(),
            capacity: capacity.max(1),
            start: 0,
        }
    }

    /// A ring of `capacity` bytes holding `bytes` from absolute offset `start` (what a
    /// handover carried); bytes beyond the capacity are dropped from the front.
    pub fn resume(capacity: usize, start: u64, bytes: &[u8]) -> Self {
        let mut ring = Ring {
            buf: VecDeque::new(),
            capacity: capacity.max(1),
            start,
        };
        ring.append(bytes);
        ring
    }

    /// A copy of the held bytes, oldest first.
    pub fn to_vec(&self) -> Vec<u8> {
        let (a, b) = self.buf.as_slices();
        [a, b].concat()
    }

    /// Offset of the oldest byte still held.
    pub fn start(&self) -> u64 {
        self.start
    }

    /// Offset one past the newest byte (total bytes ever appended).
    pub fn end(&self) -> u64 {
        self.start + self.buf.len() as u64
    }

    /// Capacity in bytes.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Appends `data`, dropping the oldest bytes beyond the capacity.
    pub fn append(&mut self, data: &[u8]) {
        if data.len() >= self.capacity {
            let skip = data.len() - self.capacity;
            self.start = self.end() + skip as u64;
            self.buf.clear();
            self.buf.extend(&data[skip..]);
            return;
        }
        let overflow = (self.buf.len() + data.len()).saturating_sub(self.capacity);
        if overflow > 0 {
            self.buf.drain(..overflow);
            self.start += overflow as u64;
        }
        self.buf.extend(data);
    }

    /// How many times `byte` occurs in the held bytes from `offset` (or the oldest held) to the
    /// end, counting at most to `limit` (the scan stops there). No copy.
    pub fn count_from(&self, offset: u64, byte: u8, limit: usize) -> usize {
        let first = offset.saturating_sub(self.start).min(self.buf.len() as u64) as usize;
        let (a, b) = self.buf.as_slices();
        let (a, b) = if first < a.len() {
            (&a[first..], b)
        } else {
            (&b[first - a.len()..], &[][..])
        };
        a.iter()
            .chain(b)
            .filter(|&&x| x == byte)
            .take(limit)
            .count()
    }

    /// Reads at most `max` bytes (at least 1 is assumed) starting at `offset`.
    pub fn read_from(&self, offset: u64, max: usize) -> ReadFrom {
        let end = self.end();
        if offset > end {
            return ReadFrom::Beyond { end };
        }
        if offset < self.start {
            return ReadFrom::Gap {
                from: offset,
                to: self.start,
            };
        }
        if offset == end {
            return ReadFrom::End;
        }
        let first = (offset - self.start) as usize;
        let last = (first + max.max(1)).min(self.buf.len());
        let (a, b) = self.buf.as_slices();
        let mut out = Vec::with_capacity(last - first);
        if first < a.len() {
            out.extend_from_slice(&a[first..last.min(a.len())]);
        }
        if last > a.len() {
            out.extend_from_slice(&b[first.saturating_sub(a.len())..last - a.len()]);
        }
        ReadFrom::Data(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Builds a ring of `cap` bytes from `chunks`, then checks `read_from(offset, max)`.
    fn check(cap: usize, chunks: &[&[u8]], offset: u64, max: usize, want: ReadFrom) {
        let mut ring = Ring::new(cap);
        for c in chunks {
            ring.append(c);
        }
        assert_eq!(
            ring.read_from(offset, max),
            want,
            "cap {cap} chunks {chunks:?} offset {offset} max {max}"
        );
    }

    #[test]
    fn reads_are_addressed_by_absolute_offsets() {
        let data = |s: &str| ReadFrom::Data(s.as_bytes().to_vec());
        #[rustfmt::skip]
        type Case<'a> = (usize, &'a [&'a [u8]], u64, usize, ReadFrom);
        let cases: &[Case] = &[
            // Nothing written yet.
            (8, &[], 0, 4, ReadFrom::End),
            (8, &[], 1, 4, ReadFrom::Beyond { end: 0 }),
            // Within capacity: everything is held.
            (8, &[b"abc"], 0, 10, data("abc")),
            (8, &[b"abc"], 1, 1, data("b")),
            (8, &[b"abc", b"de"], 2, 10, data("cde")),
            (8, &[b"abc"], 3, 10, ReadFrom::End),
            (8, &[b"abc"], 4, 10, ReadFrom::Beyond { end: 3 }),
            // Overflow drops the oldest bytes; offsets keep counting.
            (
                4,
                &[b"abc", b"def"],
                0,
                10,
                ReadFrom::Gap { from: 0, to: 2 },
            ),
            (
                4,
                &[b"abc", b"def"],
                1,
                10,
                ReadFrom::Gap { from: 1, to: 2 },
            ),
            (4, &[b"abc", b"def"], 2, 10, data("cdef")),
            (4, &[b"abc", b"def"], 5, 10, data("f")),
            // A single append larger than the capacity keeps its tail.
            (4, &[b"0123456789"], 6, 10, data("6789")),
            (4, &[b"0123456789"], 5, 10, ReadFrom::Gap { from: 5, to: 6 }),
            (4, &[b"ab", b"0123456789"], 8, 2, data("67")),
            (4, &[b"ab", b"0123456789"], 12, 2, ReadFrom::End),
            // Exactly the capacity.
            (4, &[b"abcd"], 0, 4, data("abcd")),
        ];
        for (cap, chunks, offset, max, want) in cases {
            check(*cap, chunks, *offset, *max, want.clone());
        }
    }

    #[test]
    fn wrapped_storage_reads_back_in_order() {
        // Many small appends make the deque wrap internally; reads must still be contiguous.
        let mut ring = Ring::new(7);
        let mut all = Vec::new();
        for i in 0..100u8 {
            let chunk = [i, i.wrapping_mul(3)];
            ring.append(&chunk);
            all.extend_from_slice(&chunk);
            let end = ring.end();
            assert_eq!(end, all.len() as u64);
            assert_eq!(ring.start(), end.saturating_sub(7));
            for offset in ring.start()..end {
                let ReadFrom::Data(got) = ring.read_from(offset, 5) else {
                    panic!("offset {offset} should be held");
                };
                let want = &all[offset as usize..(offset as usize + 5).min(all.len())];
                assert_eq!(got, want, "offset {offset}");
            }
        }
    }

    #[test]
    fn count_from_counts_across_the_wrap() {
        let mut ring = Ring::new(8);
        ring.append(b"a\nb\nc\n");
        ring.append(b"d\ne\n"); // holds "b\nc\nd\ne\n" from offset 2
        let all = usize::MAX;
        assert_eq!(
            ring.count_from(0, b'\n', all),
            4,
            "from before the start: all held"
        );
        assert_eq!(ring.count_from(3, b'\n', all), 4);
        assert_eq!(ring.count_from(4, b'\n', all), 3);
        assert_eq!(ring.count_from(4, b'\n', 2), 2, "stops at the limit");
        assert_eq!(ring.count_from(9, b'\n', all), 1);
        assert_eq!(ring.count_from(10, b'\n', all), 0);
        assert_eq!(ring.count_from(99, b'\n', all), 0);
    }

    #[test]
    fn zero_capacity_is_raised_to_one() {
        let mut ring = Ring::new(0);
        ring.append(b"xy");
        assert_eq!(ring.capacity(), 1);
        assert_eq!(ring.read_from(1, 8), ReadFrom::Data(b"y".to_vec()));
    }
}
