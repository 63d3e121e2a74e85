//! Stream detection: which [`StreamId`] a request belongs to, the same in
//! the simulator and live, so a target's per-stream histories mean the same
//! thing in both.
//!
//! The base stream is, in the simulator, the trace's process id where the
//! format has one, else its device; live, the NBD connection. Within a base stream the detector splits interleaved
//! sequential runs (two files read at once by one process): it keeps, per
//! base stream, the last [`RUN_SLOTS`] runs it saw (where each is expected to
//! continue). A request that continues a run (starts where it ended, or up
//! to [`RUN_GAP_BYTES`] beyond) belongs to it; a run is promoted to its own
//! stream at its second request. Requests that continue nothing stay on the
//! base stream's own id (run 0), so a random pattern keeps one history.
//!
//! Ids: `StreamId(base_index * RUN_SLOTS + run)`, where `base_index` counts
//! base streams in order of first appearance. Memory is bounded by the
//! number of distinct base streams.

use crate::StreamId;
use rustc_hash::FxHashMap;

/// Runs tracked per base stream; also the id stride of a base stream.
pub const RUN_SLOTS: u32 = 8;
/// The base stream of an id the detector gave: `StreamId(base_index)`.
/// What a trace records (docs/trace-format.md: the connection live, the
/// process in replays), so that a replay of the trace detects the runs
/// again instead of pacing each detected run as a stream of its own.
pub fn base_of(id: StreamId) -> StreamId {
    StreamId(id.0 / RUN_SLOTS)
}

/// How far past a run's end a request may start and still continue it.
pub const RUN_GAP_BYTES: u64 = 64 << 10;

#[derive(Clone, Copy, Default)]
struct Run {
    next_bytes: u64,
    /// 0 until promoted; then 1..RUN_SLOTS.
    run: u32,
    last_use: u64,
}

#[derive(Default)]
struct Base {
    index: u32,
    runs: [Run; RUN_SLOTS as usize - 1],
    next_run: u32,
}

/// Assigns stream ids to requests; see the module docs.
pub struct Detector {
    enabled: bool,
    bases: FxHashMap<u64, Base>,
    clock: u64,
}

impl Detector {
    /// A detector; with `enabled` false every request gets its base stream's id.
    pub fn new(enabled: bool) -> Detector {
        Detector { enabled, bases: FxHashMap::default(), clock: 0 }
    }

    /// Distinct base streams seen.
    pub fn base_count(&self) -> usize {
        self.bases.len()
    }

    fn base(&mut self, base: u64) -> &mut Base {
        let next_index = self.bases.len() as u32;
        let b = self.bases.entry(base).or_insert_with(|| Base { index: next_index, ..Base::default() });
        assert!(b.index <= next_index);
        b
    }

    /// The stream of a request of base stream `base` at `[offset, offset + length)`.
    pub fn classify(&mut self, base: u64, offset_bytes: u64, length_bytes: u64) -> StreamId {
        self.clock += 1;
        if !self.enabled || length_bytes == 0 {
            return StreamId(self.base(base).index.wrapping_mul(RUN_SLOTS));
        }
        let clock = self.clock;
        let b = self.base(base);
        let base_id = b.index.wrapping_mul(RUN_SLOTS);
        let end = offset_bytes + length_bytes;
        let hit = b.runs.iter().position(|r| {
            r.last_use > 0 && offset_bytes >= r.next_bytes && offset_bytes - r.next_bytes <= RUN_GAP_BYTES
        });
        let Some(i) = hit else {
            let lru = (0..b.runs.len()).min_by_key(|&i| b.runs[i].last_use).expect("slots");
            b.runs[lru] = Run { next_bytes: end, run: 0, last_use: clock };
            return StreamId(base_id);
        };
        let run = &mut b.runs[i];
        if run.run == 0 {
            run.run = 1 + b.next_run % (RUN_SLOTS - 1);
            b.next_run += 1;
        }
        run.next_bytes = end;
        run.last_use = clock;
        assert!(run.run >= 1 && run.run < RUN_SLOTS);
        StreamId(base_id + run.run)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interleaved_sequential_runs_get_their_own_streams() {
        let mut d = Detector::new(true);
        let a0 = d.classify(7, 0, 4096);
        let b0 = d.classify(7, 1 << 30, 4096);
        assert_eq!(a0, StreamId(0));
        assert_eq!(b0, StreamId(0));
        let a1 = d.classify(7, 4096, 4096);
        let b1 = d.classify(7, (1 << 30) + 4096, 4096);
        assert_ne!(a1, b1);
        assert_eq!(d.classify(7, 8192, 4096), a1);
        assert_eq!(d.classify(7, (1 << 30) + 8192, 4096), b1);
        assert_eq!(d.classify(7, 123 << 20, 4096), StreamId(0), "random stays on the base stream");
        assert_eq!(d.classify(9, 0, 4096), StreamId(RUN_SLOTS), "second base stream");
        let mut off = Detector::new(false);
        assert_eq!(off.classify(7, 0, 4096), off.classify(7, 4096, 4096));
    }

    #[test]
    fn every_run_of_a_base_stream_maps_back_to_its_base() {
        let mut d = Detector::new(true);
        let mut seen = Vec::new();
        for k in 0..6u64 {
            for f in 0..4u64 {
                seen.push((7, d.classify(7, (f << 30) + k * 4096, 4096)));
                seen.push((9, d.classify(9, (f << 30) + k * 4096, 4096)));
            }
        }
        assert!(
            seen.iter()
                .filter(|(b, _)| *b == 7)
                .map(|(_, s)| s)
                .collect::<std::collections::BTreeSet<_>>()
                .len()
                > 1
        );
        for (base, id) in seen {
            assert_eq!(base_of(id), StreamId(if base == 7 { 0 } else { 1 }), "{id:?} of base {base}");
        }
    }
}
