//! Stream detection: which [`StreamId`] a request belongs to, the same in
//! the simulator and live, so a target's per-stream histories mean the same
//! thing in both.
//!
//! The base stream is, in the simulator, the trace's process id where the
//! format has one, else its device; live, the NBD connection. Within a base stream the detector splits interleaved
//! sequential runs (two files read at once by one process, or the threads
//! of one process each walking its own part of the disk forward, as `git
//! status` does with its preload index's 20 threads behind one NBD
//! connection): it keeps, per base stream, the last `RUN_SLOTS - 1` runs it
//! saw (where each is expected to continue). A request that continues a run
//! (starts where it ended, or up to [`RUN_GAP_BYTES`] beyond) belongs to it;
//! a run is promoted to its own stream at its second request. Requests that
//! continue nothing stay on the base stream's own id (run 0), so a random
//! pattern keeps one history.
//!
//! A run's id is its slot: `1 + slot`. Two runs alive at once never share
//! an id, however the threads interleave (ids handed out round-robin could
//! give a new run the id of one still running); a slot, and so its id, goes
//! to a new run only when its own run was the least recently seen.
//!
//! Ids: `StreamId(base_index * RUN_SLOTS + run)`, where `base_index` counts
//! base streams in order of first appearance. Memory is bounded by the
//! number of distinct base streams.

use crate::StreamId;
use rustc_hash::FxHashMap;

/// Runs tracked per base stream, plus one (run 0); also the id stride of a
/// base stream. Room for as many interleaved forward walks as a host's
/// reader threads commonly are (git's preload index uses up to 20); with 8
/// the 20 walks evicted each other before they were continued.
pub const RUN_SLOTS: u32 = 32;
/// The base stream of an id the detector gave: `StreamId(base_index)`.
/// What a trace records (docs/trace-format.md: the connection live, the
/// process in replays), so that a replay of the trace detects the runs
/// again instead of pacing each detected run as a stream of its own.
pub fn base_of(id: StreamId) -> StreamId {
    StreamId(id.0 / RUN_SLOTS)
}

/// The id the detector gives a base stream's own requests (run 0): the
/// stream a run was split off (`id` itself when it is run 0, or when no
/// detector split anything).
pub fn base_run(id: StreamId) -> StreamId {
    StreamId(base_of(id).0 * RUN_SLOTS)
}

/// How far past a run's end a request may start and still continue it.
pub const RUN_GAP_BYTES: u64 = 64 << 10;

#[derive(Clone, Copy, Default)]
struct Run {
    next_bytes: u64,
    last_use: u64,
}

#[derive(Default)]
struct Base {
    index: u32,
    runs: [Run; RUN_SLOTS as usize - 1],
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
            b.runs[lru] = Run { next_bytes: end, last_use: clock };
            return StreamId(base_id);
        };
        let run = &mut b.runs[i];
        run.next_bytes = end;
        run.last_use = clock;
        assert!(i + 1 < RUN_SLOTS as usize);
        StreamId(base_id + 1 + i as u32)
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

    /// A small seeded generator for the hand-made interleavings.
    fn lcg(x: &mut u64) -> u64 {
        *x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        *x >> 33
    }

    #[test]
    fn twenty_threads_walking_forward_in_a_changing_order_keep_one_id_each() {
        // 20 threads of one process behind one base stream, each walking
        // its own part of the disk forward with gaps (inode table blocks a
        // directory apart); each round they run in another order.
        let mut d = Detector::new(true);
        let mut x = 7;
        let threads = 20u64;
        let mut next: Vec<u64> = (0..threads).map(|t| t << 30).collect();
        let mut ids: Vec<Option<StreamId>> = vec![None; threads as usize];
        for round in 0..50 {
            let mut order: Vec<u64> = (0..threads).collect();
            for i in (1..order.len()).rev() {
                order.swap(i, lcg(&mut x) as usize % (i + 1));
            }
            for t in order {
                let len = 4096 * (1 + lcg(&mut x) % 4);
                let id = d.classify(3, next[t as usize], len);
                next[t as usize] += len + 4096 * (lcg(&mut x) % 16);
                if round == 0 {
                    assert_eq!(id, StreamId(0), "a thread's first request continues nothing");
                    continue;
                }
                assert_ne!(id, StreamId(0), "thread {t} round {round}");
                assert_eq!(
                    *ids[t as usize].get_or_insert(id),
                    id,
                    "thread {t} keeps its id in round {round}"
                );
            }
        }
        let distinct: std::collections::BTreeSet<_> = ids.iter().flatten().collect();
        assert_eq!(distinct.len(), threads as usize, "no two threads share an id");
    }

    #[test]
    fn threads_beyond_the_slots_and_random_reads_fall_back_to_the_base_stream() {
        let mut d = Detector::new(true);
        let mut x = 11;
        let mut on_base = 0;
        for _ in 0..10_000 {
            let off = (lcg(&mut x) % (1 << 18)) * 4096;
            on_base += u32::from(d.classify(5, off, 4096) == StreamId(0));
        }
        assert!(on_base > 9_900, "a random pattern keeps one history: {on_base} of 10000 on run 0");
        // One walk more than there are slots, round-robin: each is evicted
        // before it is continued, so none is told apart.
        let walks = u64::from(RUN_SLOTS);
        let mut e = Detector::new(true);
        for k in 0..10u64 {
            for w in 0..walks {
                assert_eq!(e.classify(5, (w << 30) + k * 4096, 4096), StreamId(0));
            }
        }
    }

    #[test]
    fn a_new_run_takes_the_id_of_the_run_it_evicts_only() {
        // Runs promoted one after another, more than the slots over time,
        // while run A stays alive: no later run is given A's id.
        let mut d = Detector::new(true);
        d.classify(1, 0, 4096);
        let a = d.classify(1, 4096, 4096);
        for k in 0..100u64 {
            let base = (k + 1) << 30;
            d.classify(1, base, 4096);
            let id = d.classify(1, base + 4096, 4096);
            assert_ne!(id, a, "run {k} took the id of a live run");
            assert_eq!(d.classify(1, 8192 + k * 4096, 4096), a, "run A continues");
        }
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
