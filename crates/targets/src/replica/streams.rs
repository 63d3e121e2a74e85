//! Per-stream state (§4.1.1): the recent read history, the candidate
//! queue, the commit window, congestion back-off and the replication
//! quota. Streams are the ids the runtime assigns (NBD connection or the
//! trace's process, refined by `layoutd_core::streams`); at most
//! `streams_max` are tracked, the least recently seen recycled.
//!
//! A run the detector split off its base stream (one thread's forward
//! walk among others behind one connection, or one file of two read at
//! once) refines only what "close" means: a read is judged against its
//! base stream's history, as without a detector, and also against its
//! run's own recent reads, which the base's history loses when other
//! threads' reads come in between. The run keeps its history and its
//! read-ahead (so each of 20 interleaved walks keeps the bytes read ahead
//! of it); the candidate queue, commit window, batches, quota and back-off
//! stay the base stream's, so replicas are written in the base's access
//! order, as the thesis's per-process streams did. Without a detector
//! every id is its own base and nothing changes.

use crate::readahead::ReadAhead;
use bytes::Bytes;
use layoutd_core::streams::{base_run, RUN_SLOTS};
use layoutd_core::{Instant, StreamId};
use rustc_hash::FxHashMap;
use std::collections::VecDeque;

/// A read whose blocks would be replicated, in access order.
#[derive(Clone, Debug)]
pub(crate) struct Candidate {
    pub orig: u64,
    pub blocks: u64,
    pub data: Option<Bytes>,
}

/// One stream.
#[derive(Default)]
pub(crate) struct Stream {
    /// Lower block ranges `[start, end)` of recent reads, newest last.
    pub history: VecDeque<(u64, u64)>,
    pub queue: Vec<Candidate>,
    pub queue_since: Option<Instant>,
    /// Reads still replicated unconditionally after a commit.
    pub committed_left: u32,
    /// Committed candidates waiting to be written together.
    pub batch: Vec<Candidate>,
    pub batch_since: Option<Instant>,
    /// Reads without replication left (congestion back-off).
    pub backoff_left: u32,
    pub created_blocks: u64,
    pub used_blocks: u64,
    pub last_seen: u64,
    /// The stream's own current replica extent `[cursor, end)`
    /// (`extent_per_stream`).
    pub extent: Option<(u64, u64)>,
}

/// Read-ahead buffers a stream keeps: a pattern whose replicas are split
/// between chains (a later round replicated what an earlier one missed)
/// returns to the chain it left.
pub(crate) const AHEAD_PER_STREAM: usize = 4;

/// Whether two block ranges are close: the gap between them is under
/// `close_blocks` (overlapping or adjacent ranges have gap 0).
pub(crate) fn close(a: (u64, u64), b: (u64, u64), close_blocks: u64) -> bool {
    let gap = if a.1 <= b.0 {
        b.0 - a.1
    } else if b.1 <= a.0 {
        a.0 - b.1
    } else {
        0
    };
    gap < close_blocks
}

impl Stream {
    /// History entries close to `r`.
    pub fn close_count(&self, r: (u64, u64), close_blocks: u64) -> u32 {
        self.history.iter().filter(|&&h| close(h, r, close_blocks)).count() as u32
    }

    /// Records a read of lower blocks `r`.
    pub fn push_history(&mut self, r: (u64, u64), history_count: u32) {
        if self.history.len() >= history_count as usize {
            self.history.pop_front();
        }
        self.history.push_back(r);
    }

    /// Sequential pairs in the queue (each candidate against the one before).
    pub fn queue_sequential_count(&self, close_blocks: u64) -> u32 {
        self.queue
            .windows(2)
            .filter(|w| {
                close(
                    (w[0].orig, w[0].orig + w[0].blocks),
                    (w[1].orig, w[1].orig + w[1].blocks),
                    close_blocks,
                )
            })
            .count() as u32
    }

    /// Whether the quota stopped this stream: it made at least
    /// `quota_blocks` replica blocks and read fewer than an eighth as many
    /// from replicas (a random stream hits a few replicas by chance).
    pub fn over_quota(&self, quota_blocks: u64) -> bool {
        quota_blocks > 0 && self.created_blocks >= quota_blocks && self.used_blocks * 8 < self.created_blocks
    }
}

/// The tracked streams.
pub(crate) struct Streams {
    map: FxHashMap<StreamId, Stream>,
    max: usize,
    clock: u64,
    /// Replica blocks read ahead of each stream's chains (the shared
    /// [`ReadAhead`]: at most [`AHEAD_PER_STREAM`] buffers a stream, gone
    /// with the stream when it is recycled; `readahead_blocks` bounds each).
    pub ahead: ReadAhead<StreamId>,
}

impl Streams {
    pub fn new(max: u32, block_bytes: u64) -> Streams {
        Streams {
            map: FxHashMap::default(),
            max: max as usize,
            clock: 0,
            ahead: ReadAhead::new(block_bytes, AHEAD_PER_STREAM, u64::MAX),
        }
    }

    /// The state of `id`, recycling the least recently seen past the limit.
    pub fn get(&mut self, id: StreamId) -> &mut Stream {
        self.clock += 1;
        if !self.map.contains_key(&id) && self.map.len() >= self.max {
            let lru = *self.map.iter().min_by_key(|(k, s)| (s.last_seen, **k)).expect("non-empty").0;
            self.map.remove(&lru);
            self.ahead.forget_key(lru);
        }
        let clock = self.clock;
        let s = self.map.entry(id).or_default();
        s.last_seen = clock;
        assert!(self.map.len() <= self.max);
        self.map.get_mut(&id).expect("just inserted")
    }

    /// Every stream, by id (deterministic order).
    pub fn ids(&self) -> Vec<StreamId> {
        let mut v: Vec<StreamId> = self.map.keys().copied().collect();
        v.sort_unstable();
        v
    }

    /// The bytes of replica blocks `[loc, loc + n)` if a read-ahead of `id`
    /// or of another stream of its base holds them (`id`'s own first).
    pub fn ahead_get(&self, id: StreamId, loc: u64, n: u64) -> Option<Option<Bytes>> {
        let first = base_run(id).0;
        let others = (first..first + RUN_SLOTS).map(StreamId).filter(move |&o| o != id);
        self.ahead.get(std::iter::once(id).chain(others), loc, n)
    }

    /// The stream `id` if tracked.
    pub fn peek_mut(&mut self, id: StreamId) -> Option<&mut Stream> {
        self.map.get_mut(&id)
    }

    /// The earliest queue deadline.
    pub fn deadline(&self, timeout_ms: u64) -> Option<Instant> {
        let since = self.map.values().flat_map(|s| [s.queue_since, s.batch_since]).flatten().min();
        since.map(|t| t.add_ms(timeout_ms))
    }

    /// Drops queued candidates whose originals overlap `[a, b)`.
    pub fn forget_candidates(&mut self, a: u64, b: u64) -> u64 {
        let mut n = 0;
        for s in self.map.values_mut() {
            let before = s.queue.len() + s.batch.len();
            s.queue.retain(|c| c.orig + c.blocks <= a || b <= c.orig);
            s.batch.retain(|c| c.orig + c.blocks <= a || b <= c.orig);
            n += (before - s.queue.len() - s.batch.len()) as u64;
            if s.queue.is_empty() {
                s.queue_since = None;
            }
        }
        n
    }

    /// Every stream's current replica extent `[cursor, end)`.
    pub fn extents(&self) -> Vec<(u64, u64)> {
        self.map.values().filter_map(|s| s.extent).collect()
    }

    /// Candidates queued in all streams.
    pub fn queued_count(&self) -> usize {
        self.map.values().map(|s| s.queue.len() + s.batch.len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn closeness_is_the_gap_and_history_is_bounded() {
        assert!(close((0, 10), (10, 20), 1));
        assert!(close((0, 10), (5, 6), 1));
        assert!(!close((0, 10), (1010, 1011), 1000));
        assert!(close((0, 10), (1009, 1011), 1000));
        assert!(close((1009, 1011), (0, 10), 1000));
        let mut s = Stream::default();
        for i in 0..100 {
            s.push_history((i * 5000, i * 5000 + 1), 64);
        }
        assert_eq!(s.history.len(), 64);
        assert_eq!(s.close_count((99 * 5000, 99 * 5000 + 1), 1000), 1);
        let mut st = Streams::new(2, 4096);
        st.get(StreamId(1));
        st.get(StreamId(2));
        st.get(StreamId(1));
        st.get(StreamId(3));
        assert_eq!(st.ids(), vec![StreamId(1), StreamId(3)], "the least recently seen is recycled");
    }
}
