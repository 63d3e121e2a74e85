//! Read-ahead, shared by `replica` (along a replica chain a stream
//! follows) and `opt` (along a planned sequence of the OPT region): a read
//! of lower blocks is extended by the blocks its target expects next (and,
//! for `opt`'s read-behind, back over the blocks it skipped), and the extra
//! bytes are held in memory, per key (a stream), until a read of them
//! comes or a lower write makes them stale.
//!
//! The target decides *what* to read ahead (its policy); this module keeps
//! what was read ahead and the one rule that makes it safe: **held bytes
//! always equal what is on disk**, so a read served from them never returns
//! data older than a write acknowledged before it. Every lower write (or
//! trim, write-zeroes) is reported twice: when it is about to be issued
//! ([`ReadAhead::forget`]: held bytes of its blocks go, and a read-ahead in
//! flight over them keeps none of its extra blocks) and when it completes
//! ([`ReadAhead::write_done`]: the same again, since a read-ahead issued
//! while the write was in flight may have read the old bytes).
//!
//! Blocks are the target's lower blocks (replica blocks, OPT slots); keys
//! are whatever the target keys its streams by. Memory: at most `per_key`
//! buffers a key (the oldest go first) and `bytes_max` held in all (the
//! oldest anywhere go first); a key's buffers go with the key
//! ([`ReadAhead::forget_key`]). Bytes are counted by blocks, so timing-only
//! runs (no data) hold and drop exactly as live ones.

use bytes::Bytes;
use rustc_hash::FxHashMap;
use std::hash::Hash;

/// Lower blocks `[start, end)` read ahead and their bytes (`None` in
/// timing-only runs).
#[derive(Clone, Debug)]
struct Ahead {
    start: u64,
    end: u64,
    data: Option<Bytes>,
    /// Fill order (the oldest goes first past `bytes_max`).
    seq: u64,
}

impl Ahead {
    /// The bytes of blocks `[loc, loc + n)` if held: `Some(None)` in
    /// timing-only runs.
    fn get(&self, loc: u64, n: u64, block_bytes: u64) -> Option<Option<Bytes>> {
        if loc < self.start || loc + n > self.end {
            return None;
        }
        let at = ((loc - self.start) * block_bytes) as usize;
        Some(self.data.as_ref().map(|d| d.slice(at..at + (n * block_bytes) as usize)))
    }
}

/// A read in flight of blocks `[from, end)` whose own blocks (what its
/// request asked for) are `[own_start, own_end)`: the blocks before them
/// are read behind, those after them ahead, both for `key`.
#[derive(Clone, Copy, Debug)]
struct InFlight<K> {
    key: K,
    from: u64,
    own_start: u64,
    own_end: u64,
    end: u64,
}

/// What was read ahead, held and in flight, and the lower writes in flight.
pub(crate) struct ReadAhead<K> {
    held: FxHashMap<K, Vec<Ahead>>,
    block_bytes: u64,
    per_key: usize,
    bytes_max: u64,
    held_blocks: u64,
    seq: u64,
    /// Reads registered by [`ReadAhead::read_issued`], by lower id.
    reads: FxHashMap<u64, InFlight<K>>,
    /// Lower writes in flight, by lower id: their blocks.
    writes: FxHashMap<u64, (u64, u64)>,
    /// Buffers dropped and read-aheads in flight cut by a write.
    pub dropped_count: u64,
    /// Buffers dropped for memory (`per_key`, `bytes_max`).
    pub evicted_count: u64,
}

impl<K: Copy + Eq + Hash> ReadAhead<K> {
    /// Empty; blocks of `block_bytes`, at most `per_key` buffers a key and
    /// `bytes_max` bytes held in all.
    pub fn new(block_bytes: u64, per_key: usize, bytes_max: u64) -> ReadAhead<K> {
        assert!(block_bytes > 0 && per_key > 0);
        ReadAhead {
            held: FxHashMap::default(),
            block_bytes,
            per_key,
            bytes_max,
            held_blocks: 0,
            seq: 0,
            reads: FxHashMap::default(),
            writes: FxHashMap::default(),
            dropped_count: 0,
            evicted_count: 0,
        }
    }

    /// The bytes of blocks `[loc, loc + n)` if a buffer of one of `keys`
    /// holds them (the keys in order, each key's newest buffer first).
    pub fn get(&self, keys: impl IntoIterator<Item = K>, loc: u64, n: u64) -> Option<Option<Bytes>> {
        keys.into_iter().find_map(|k| {
            self.held.get(&k).and_then(|v| v.iter().rev().find_map(|h| h.get(loc, n, self.block_bytes)))
        })
    }

    /// Blocks held in all keys' buffers.
    pub fn held_blocks(&self) -> u64 {
        self.held_blocks
    }

    /// A read of blocks `[from, end)` is issued as lower request `id`; its
    /// request's own blocks are `own` (`[from, own.0)` is read behind and
    /// `[own.1, end)` ahead for `key`; none when both are empty: registered
    /// all the same, see [`ReadAhead::reads_overlapping`]).
    pub fn read_issued(&mut self, id: u64, key: K, from: u64, own: (u64, u64), end: u64) {
        assert!(from <= own.0 && own.0 <= own.1 && own.1 <= end);
        self.reads.insert(id, InFlight { key, from, own_start: own.0, own_end: own.1, end });
    }

    /// Where lower request `id`'s read-ahead ends now (a write may have cut
    /// it back to its own blocks' end), if it is registered.
    pub fn read_end(&self, id: u64) -> Option<u64> {
        self.reads.get(&id).map(|r| r.end)
    }

    /// Lower read `id` completed; if it succeeded, what it still reads
    /// behind and ahead is held for its key (`data`: the read's bytes, from
    /// block `from` on when it reads behind; the blocks ahead from byte
    /// `extra_at`). Returns whether it held any.
    pub fn read_done(&mut self, id: u64, ok: bool, data: Option<&Bytes>, extra_at: usize) -> bool {
        let Some(r) = self.reads.remove(&id) else { return false };
        if !ok {
            return false;
        }
        let bb = self.block_bytes;
        if r.from < r.own_start {
            let behind = data.map(|d| d.slice(..((r.own_start - r.from) * bb) as usize));
            self.put(r.key, r.from, r.own_start, behind);
        }
        if r.own_end < r.end {
            let ahead = data.map(|d| d.slice(extra_at..extra_at + ((r.end - r.own_end) * bb) as usize));
            self.put(r.key, r.own_end, r.end, ahead);
        }
        r.from < r.own_start || r.own_end < r.end
    }

    /// Holds blocks `[start, end)` for `key`, dropping the key's oldest
    /// past `per_key` and the oldest anywhere past `bytes_max`.
    fn put(&mut self, key: K, start: u64, end: u64, data: Option<Bytes>) {
        let n = end - start;
        if n * self.block_bytes > self.bytes_max {
            return;
        }
        self.seq += 1;
        let v = self.held.entry(key).or_default();
        if v.len() >= self.per_key {
            let old = v.remove(0);
            self.held_blocks -= old.end - old.start;
            self.evicted_count += 1;
        }
        v.push(Ahead { start, end, data, seq: self.seq });
        self.held_blocks += n;
        while self.held_blocks * self.block_bytes > self.bytes_max {
            self.evict_oldest();
        }
    }

    fn evict_oldest(&mut self) {
        let (&k, _) = self
            .held
            .iter()
            .filter(|(_, v)| !v.is_empty())
            .min_by_key(|(_, v)| v[0].seq)
            .expect("something is held");
        let v = self.held.get_mut(&k).expect("present");
        let old = v.remove(0);
        self.held_blocks -= old.end - old.start;
        self.evicted_count += 1;
        if v.is_empty() {
            self.held.remove(&k);
        }
    }

    /// Drops `key`'s buffers (its stream is no longer tracked).
    pub fn forget_key(&mut self, key: K) {
        if let Some(v) = self.held.remove(&key) {
            self.held_blocks -= v.iter().map(|h| h.end - h.start).sum::<u64>();
        }
    }

    /// A lower write of blocks `[a, b)` is about to be issued (or has
    /// completed): held bytes of those blocks go, and a read-ahead in
    /// flight over them holds nothing when it completes. Returns how many
    /// buffers and read-aheads it dropped (also added to `dropped_count`).
    pub fn forget(&mut self, a: u64, b: u64) -> u64 {
        let mut n = 0;
        let mut gone = 0;
        for v in self.held.values_mut() {
            let before = v.len();
            v.retain(|h| {
                let keep = !(h.start < b && a < h.end);
                if !keep {
                    gone += h.end - h.start;
                }
                keep
            });
            n += (before - v.len()) as u64;
        }
        self.held_blocks -= gone;
        self.held.retain(|_, v| !v.is_empty());
        // A side already empty (never read, or cut before) is not cut
        // again: `n` counts only what the write takes.
        for r in self.reads.values_mut() {
            if r.own_end < r.end && r.own_end < b && a < r.end {
                r.end = r.own_end;
                n += 1;
            }
            if r.from < r.own_start && r.from < b && a < r.own_start {
                r.from = r.own_start;
                n += 1;
            }
        }
        self.dropped_count += n;
        n
    }

    /// Lower write `id` of blocks `[a, b)` was issued (after [`ReadAhead::forget`]).
    pub fn write_issued(&mut self, id: u64, a: u64, b: u64) {
        self.writes.insert(id, (a, b));
    }

    /// Lower request `id` completed: if it is a write in flight, what was
    /// read ahead of its blocks meanwhile goes. Returns what it dropped.
    pub fn write_done(&mut self, id: u64) -> u64 {
        match self.writes.remove(&id) {
            Some((a, b)) => self.forget(a, b),
            None => 0,
        }
    }

    /// Registered reads in flight whose blocks (read-ahead included, as
    /// far as it still goes) overlap `[a, b)`.
    pub fn reads_overlapping(&self, a: u64, b: u64) -> u64 {
        self.reads.values().filter(|r| r.from < b && a < r.end).count() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(n: u64, fill: u8) -> Bytes {
        Bytes::from(vec![fill; (n * 512) as usize])
    }

    #[test]
    fn held_bytes_are_served_until_a_write_overlaps_them() {
        let mut ra: ReadAhead<u32> = ReadAhead::new(512, 4, u64::MAX);
        ra.read_issued(1, 7, 10, (10, 12), 20);
        let d = data(10, 3);
        assert!(ra.read_done(1, true, Some(&d), 2 * 512));
        assert_eq!(ra.held_blocks(), 8);
        assert_eq!(ra.get([7], 12, 2).unwrap().unwrap().len(), 1024);
        assert!(ra.get([7], 10, 2).is_none(), "the read's own blocks are not held");
        assert!(ra.get([8], 12, 2).is_none(), "another key's buffers are not searched");
        assert!(ra.get([8, 7], 19, 1).is_some());
        assert_eq!(ra.forget(19, 25), 1);
        assert!(ra.get([7], 12, 1).is_none(), "the whole buffer goes");
        assert_eq!(ra.held_blocks(), 0);
    }

    #[test]
    fn a_write_issued_or_completed_during_a_read_ahead_leaves_nothing_held() {
        // Issued while the read-ahead is in flight.
        let mut ra: ReadAhead<u32> = ReadAhead::new(512, 4, u64::MAX);
        ra.read_issued(1, 0, 0, (0, 2), 8);
        assert_eq!(ra.forget(5, 6), 1);
        assert!(!ra.read_done(1, true, None, 0));
        assert!(ra.get([0], 5, 1).is_none());
        // Issued before, completing after the read-ahead completed.
        ra.forget(5, 6);
        ra.write_issued(9, 5, 6);
        ra.read_issued(2, 0, 0, (0, 2), 8);
        assert!(ra.read_done(2, true, None, 0));
        assert!(ra.get([0], 3, 1).is_some());
        assert_eq!(ra.write_done(9), 1);
        assert!(ra.get([0], 3, 1).is_none(), "it may hold the bytes before the write");
        // A write elsewhere keeps it.
        ra.read_issued(3, 0, 0, (0, 2), 8);
        ra.forget(8, 9);
        assert!(ra.read_done(3, true, None, 0));
        assert!(ra.get([0], 7, 1).is_some());
        // A failed read holds nothing.
        ra.read_issued(4, 1, 20, (20, 21), 30);
        assert!(!ra.read_done(4, false, None, 0));
    }

    #[test]
    fn a_read_behind_holds_the_blocks_before_its_own_and_a_write_cuts_only_its_side() {
        let mut ra: ReadAhead<u32> = ReadAhead::new(512, 4, u64::MAX);
        // Blocks 10..20, its own 14..16: 10..14 behind, 16..20 ahead.
        ra.read_issued(1, 7, 10, (14, 16), 20);
        let d = Bytes::from((0..10u8).flat_map(|k| vec![k; 512]).collect::<Vec<_>>());
        assert!(ra.read_done(1, true, Some(&d), 6 * 512));
        assert_eq!(ra.held_blocks(), 8);
        assert_eq!(
            ra.get([7], 11, 2).unwrap().unwrap(),
            d.slice(512..3 * 512),
            "block 11 is the read's second"
        );
        assert_eq!(ra.get([7], 17, 1).unwrap().unwrap(), d.slice(7 * 512..8 * 512));
        assert!(ra.get([7], 14, 1).is_none(), "the read's own blocks are not held");
        assert!(ra.get([7], 13, 2).is_none(), "a piece spanning behind and own is not held");
        // A write over a block behind, issued while the read is in flight,
        // leaves the blocks ahead held; one over the read's own blocks cuts neither.
        ra.read_issued(2, 7, 30, (34, 36), 40);
        assert_eq!(ra.forget(31, 32), 1);
        assert_eq!(ra.forget(35, 36), 0);
        assert!(ra.read_done(2, true, None, 0));
        assert!(ra.get([7], 31, 1).is_none() && ra.get([7], 30, 1).is_none());
        assert!(ra.get([7], 36, 4).is_some());
        // Behind only: held; a failed read holds nothing.
        ra.read_issued(3, 8, 50, (52, 53), 53);
        assert!(ra.read_done(3, true, None, 0));
        assert!(ra.get([8], 50, 2).is_some());
        ra.read_issued(4, 8, 60, (62, 63), 63);
        assert!(!ra.read_done(4, false, None, 0));
        assert!(ra.get([8], 60, 1).is_none());
    }

    #[test]
    fn a_write_cuts_a_side_in_flight_only_where_it_overlaps_it_and_counts_only_what_it_cuts() {
        let mut ra: ReadAhead<u32> = ReadAhead::new(512, 4, u64::MAX);
        // Blocks 30..40, its own 34..36.
        ra.read_issued(1, 7, 30, (34, 36), 40);
        assert_eq!(ra.forget(29, 30), 0, "just before the blocks behind");
        assert_eq!(ra.forget(40, 41), 0, "just after the blocks ahead");
        assert_eq!(ra.forget(34, 36), 0, "the read's own blocks");
        assert_eq!(ra.forget(33, 34), 1, "the last block behind");
        assert_eq!(ra.read_end(1), Some(40), "the side ahead stays");
        assert_eq!(ra.forget(36, 37), 1, "the first block ahead");
        assert_eq!(ra.forget(30, 41), 0, "both sides are cut already");
        assert!(!ra.read_done(1, true, None, 0));
        assert_eq!(ra.held_blocks(), 0);
        // A read with neither side (replica registers every read): a write
        // over its first or last block cuts nothing.
        ra.read_issued(2, 7, 50, (50, 52), 52);
        assert_eq!(ra.forget(49, 51) + ra.forget(51, 53), 0);
        assert_eq!(ra.reads_overlapping(49, 51), 1, "still in flight over its blocks");
        assert_eq!(ra.dropped_count, 2);
    }

    #[test]
    fn memory_is_bounded_per_key_and_in_all() {
        let mut ra: ReadAhead<u32> = ReadAhead::new(512, 2, 10 * 512);
        for (id, start) in [(1, 0), (2, 4), (3, 8)] {
            ra.read_issued(id, 0, start, (start, start), start + 4);
            ra.read_done(id, true, None, 0);
        }
        assert!(ra.get([0], 0, 1).is_none(), "past per_key the oldest goes");
        assert!(ra.get([0], 4, 1).is_some() && ra.get([0], 8, 1).is_some());
        ra.read_issued(4, 1, 100, (100, 100), 104);
        ra.read_done(4, true, None, 0);
        assert_eq!(ra.held_blocks(), 8, "12 blocks past 10: the oldest (key 0's) went");
        assert!(ra.get([0], 4, 1).is_none() && ra.get([1], 100, 4).is_some());
        assert_eq!(ra.evicted_count, 2);
        ra.read_issued(5, 1, 200, (200, 200), 220);
        ra.read_done(5, true, None, 0);
        assert!(ra.get([1], 200, 1).is_none(), "a buffer larger than the cap is not held");
        ra.forget_key(1);
        ra.forget_key(0);
        assert_eq!(ra.held_blocks(), 0);
    }

    #[test]
    fn reads_in_flight_overlap_with_what_they_still_read_ahead() {
        let mut ra: ReadAhead<u32> = ReadAhead::new(512, 4, u64::MAX);
        ra.read_issued(1, 0, 0, (0, 2), 8);
        assert_eq!(ra.reads_overlapping(6, 7), 1);
        ra.forget(7, 8);
        assert_eq!(ra.reads_overlapping(6, 7), 0);
        assert_eq!(ra.reads_overlapping(1, 2), 1);
        assert_eq!(ra.read_end(1), Some(2));
    }
}
