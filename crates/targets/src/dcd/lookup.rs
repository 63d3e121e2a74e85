//! The data lookup table: data sector -> where its newest copy is in the
//! log (segment location, slot, sector within the slot). Organised in
//! 4 KiB lines of 8 sectors (the paper's cache lines), so an aligned 4 KiB
//! request is one map lookup, while partial and overlapping requests are
//! still exact per sector. Lines sit in a hash map (the per-request cost
//! is a few probes, not a tree walk); range operations visit the range's
//! line keys in address order, or, when the range spans more lines than the
//! table holds, the table's own keys sorted, so every walk is in address
//! order and deterministic.

use crate::seglog::{SegLoc, Seq};
use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

const LINE_SECTORS: u64 = 8;

/// Where one data sector's newest copy lives.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Loc {
    /// The segment.
    pub seg: SegLoc,
    /// The slot within it.
    pub slot: u16,
    /// The sector within the slot.
    pub within: u8,
}

/// A [`Loc`] as the table stores it (never 0): destage keeps a run's
/// locations in this form (4 bytes a sector) and compares them with the
/// table's without unpacking. The sectors of one slot have consecutive
/// values (the sector within the slot is the low field).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct PackedLoc(u32);

impl PackedLoc {
    /// The location `w` sectors further on in the same slot (the slot
    /// must have that sector).
    pub fn within_plus(self, w: u32) -> PackedLoc {
        PackedLoc(self.0 + w)
    }
}

/// How a [`Loc`] packs into 32 bits (0: none): segment, slot and sector
/// fields of the widths the geometry needs, plus one.
#[derive(Copy, Clone, Debug)]
struct Packing {
    slot_bits: u32,
    within_bits: u32,
}

/// Bits needed to hold values below `n`.
fn bits_for(n: u64) -> u32 {
    u64::BITS - n.saturating_sub(1).leading_zeros()
}

impl Packing {
    fn pack(self, l: Loc) -> u32 {
        let v = (l.seg.0 << (self.slot_bits + self.within_bits))
            | (u32::from(l.slot) << self.within_bits)
            | u32::from(l.within);
        v + 1
    }

    fn unpack(self, v: u32) -> Option<Loc> {
        let x = v.checked_sub(1)?;
        Some(Loc {
            seg: SegLoc(x >> (self.slot_bits + self.within_bits)),
            slot: ((x >> self.within_bits) & ((1 << self.slot_bits) - 1)) as u16,
            within: (x & ((1 << self.within_bits) - 1)) as u8,
        })
    }
}

/// Runs of consecutive locations of one slot, gathered from values met in
/// sector order and handed on a run at a time (`f(first location, count)`):
/// a destage or an overwrite usually drops whole slots, and the caller
/// then does one step per run instead of one per sector.
struct SlotRuns {
    /// The run's first stored value and length (length 0: none yet).
    first: u32,
    n: u32,
}

impl SlotRuns {
    fn new() -> SlotRuns {
        SlotRuns { first: 0, n: 0 }
    }

    /// Adds stored value `v` (not 0).
    #[inline]
    fn add(&mut self, packing: Packing, v: u32, f: &mut impl FnMut(Loc, u32)) {
        self.add_n(packing, v, 1, f);
    }

    /// Adds the `n` consecutive stored values from `v` (not 0), all of one slot.
    #[inline]
    fn add_n(&mut self, packing: Packing, v: u32, n: u32, f: &mut impl FnMut(Loc, u32)) {
        let within_mask = (1u32 << packing.within_bits) - 1;
        // Consecutive values are consecutive sectors of one slot unless the
        // sector within the slot wraps to 0 (the next slot).
        if self.n > 0 && self.first + self.n == v && (v - 1) & within_mask != 0 {
            self.n += n;
            return;
        }
        self.finish(packing, f);
        (self.first, self.n) = (v, n);
    }

    /// Hands on the run being gathered, if any.
    fn finish(&mut self, packing: Packing, f: &mut impl FnMut(Loc, u32)) {
        if self.n > 0 {
            f(packing.unpack(self.first).expect("never 0"), self.n);
            self.n = 0;
        }
    }
}

/// A segment seq as a line stores it (0: none). Distinct for any two seqs
/// fewer than 2^32 - 1 apart, and the live part of the ring is far shorter.
fn visible_of(seq: Seq) -> u32 {
    (seq.0 % u64::from(u32::MAX)) as u32 + 1
}

/// One line: each sector's newest log location, and the seq of the newest
/// live segment with an entry for it, which is what replay would map: the
/// "replay-visible" map, which outlives the location once the sector is
/// destaged, until the tail passes the segment. Both live in one 64-byte
/// line so a logged write costs one map lookup and one cache line.
#[derive(Clone, Copy, Default)]
struct Line {
    locs: [u32; LINE_SECTORS as usize],
    visible: [u32; LINE_SECTORS as usize],
}

impl Line {
    fn is_empty(&self) -> bool {
        self.locs.iter().zip(&self.visible).fold(0, |acc, (&l, &v)| acc | l | v) == 0
    }
}

/// The indexes within line `key` of the sectors of `[start, end)` (the
/// line must overlap the range).
fn span(key: u64, start: u64, end: u64) -> std::ops::Range<usize> {
    let base = key * LINE_SECTORS;
    debug_assert!(base < end && start < base + LINE_SECTORS);
    (start.max(base) - base) as usize..(end.min(base + LINE_SECTORS) - base) as usize
}

/// Hashes a line key to itself in the low bits, so neighbouring lines sit
/// in neighbouring buckets (a run's lines share cache lines and the
/// prefetcher's stride, where a mixing hash scatters them), with the top
/// 7 bits mixed (the hash table's tag byte must tell keys apart).
#[derive(Default)]
struct LineHasher(u64);

impl Hasher for LineHasher {
    fn write(&mut self, _: &[u8]) {
        unreachable!("line keys are u64")
    }

    fn write_u64(&mut self, key: u64) {
        self.0 = key;
    }

    fn finish(&self) -> u64 {
        self.0 ^ (self.0.wrapping_mul(0x9e37_79b9_7f4a_7c15) & (0x7f << 57))
    }
}

type Lines = HashMap<u64, Line, BuildHasherDefault<LineHasher>>;

/// The table. Memory: one 64-byte line (plus the hash table's 8-byte key
/// and about 1/7 spare) per 8-sector line holding a logged or
/// replay-visible sector.
pub struct Lookup {
    lines: Lines,
    mapped_count: u64,
    packing: Packing,
}

/// The line keys of `[first, last]` that may hold a line, in order: the
/// range itself when it is no longer than the table, else the table's keys.
fn line_keys(lines: &Lines, first: u64, last: u64) -> LineKeys {
    if last - first < lines.len() as u64 {
        LineKeys::Range(first..=last)
    } else {
        let mut keys: Vec<u64> = lines.keys().copied().filter(|k| (first..=last).contains(k)).collect();
        keys.sort_unstable();
        LineKeys::Listed(keys.into_iter())
    }
}

enum LineKeys {
    Range(std::ops::RangeInclusive<u64>),
    Listed(std::vec::IntoIter<u64>),
}

impl Iterator for LineKeys {
    type Item = u64;
    fn next(&mut self) -> Option<u64> {
        match self {
            LineKeys::Range(r) => r.next(),
            LineKeys::Listed(k) => k.next(),
        }
    }
}

impl Lookup {
    /// A table for a log of `segment_count` segments of `slot_count` slots
    /// of `slot_sectors` sectors; `None` if a location does not fit in 32
    /// bits (a log of more than about 2^31 sectors).
    pub fn new(segment_count: u32, slot_count: u32, slot_sectors: u32) -> Option<Lookup> {
        let (seg_bits, slot_bits, within_bits) =
            (bits_for(segment_count.into()), bits_for(slot_count.into()), bits_for(slot_sectors.into()));
        (seg_bits + slot_bits + within_bits < 32).then_some(Lookup {
            lines: Lines::default(),
            mapped_count: 0,
            packing: Packing { slot_bits, within_bits },
        })
    }

    /// Sectors currently mapped into the log.
    pub fn mapped_count(&self) -> u64 {
        self.mapped_count
    }

    /// `loc` as the table stores it.
    pub fn pack(&self, loc: Loc) -> PackedLoc {
        PackedLoc(self.packing.pack(loc))
    }

    /// The location `p` stands for.
    pub fn unpack(&self, p: PackedLoc) -> Loc {
        self.packing.unpack(p.0).expect("a packed location is never 0")
    }

    /// Where `sector` lives, if in the log.
    pub fn get(&self, sector: u64) -> Option<Loc> {
        let line = self.lines.get(&(sector / LINE_SECTORS))?;
        self.packing.unpack(line.locs[(sector % LINE_SECTORS) as usize])
    }

    /// The locations of `count` sectors from `start` (one lookup per line).
    pub fn get_range(&self, start: u64, count: u64) -> Vec<Option<Loc>> {
        let mut out = vec![None; count as usize];
        let end = start + count;
        for key in line_keys(&self.lines, start / LINE_SECTORS, (end - 1) / LINE_SECTORS) {
            let Some(line) = self.lines.get(&key) else { continue };
            let at = key * LINE_SECTORS;
            for i in span(key, start, end) {
                out[(at + i as u64 - start) as usize] = self.packing.unpack(line.locs[i]);
            }
        }
        out
    }

    /// Whether any of `count` sectors from `start` is mapped (one probe per
    /// line, nothing allocated: the read path's common case).
    pub fn any_mapped(&self, start: u64, count: u64) -> bool {
        self.any_sector(start, count, |line, i| line.locs[i] != 0)
    }

    /// Whether `pred(line, index)` holds for any sector of `[start, start + count)`.
    fn any_sector(&self, start: u64, count: u64, pred: impl Fn(&Line, usize) -> bool) -> bool {
        let Some(end) = start.checked_add(count).filter(|_| count > 0) else { return false };
        line_keys(&self.lines, start / LINE_SECTORS, (end - 1) / LINE_SECTORS).any(|key| {
            let Some(line) = self.lines.get(&key) else { return false };
            span(key, start, end).any(|i| pred(line, i))
        })
    }

    /// The runs `(first sector, count)` of mapped sectors among `count`
    /// sectors from `start`, in order (one lookup per line).
    pub fn mapped_runs(&self, start: u64, count: u64) -> Vec<(u64, u64)> {
        let mut out: Vec<(u64, u64)> = Vec::new();
        let Some(end) = start.checked_add(count).filter(|_| count > 0) else { return out };
        for key in line_keys(&self.lines, start / LINE_SECTORS, (end - 1) / LINE_SECTORS) {
            let Some(line) = self.lines.get(&key) else { continue };
            for i in span(key, start, end).filter(|&i| line.locs[i] != 0) {
                let s = key * LINE_SECTORS + i as u64;
                match out.last_mut() {
                    Some((a, n)) if *a + *n == s => *n += 1,
                    _ => out.push((s, 1)),
                }
            }
        }
        out
    }

    /// Maps `sector` to `loc`; returns the location it replaces.
    #[cfg(test)]
    pub fn set(&mut self, sector: u64, loc: Loc) -> Option<Loc> {
        let mut old = None;
        self.set_run(sector, 1, loc, Seq(0), |l, n| old = Some(l).filter(|_| n == 1));
        old
    }

    /// Maps the `n` sectors from `start` to the consecutive sectors of one
    /// slot from `first` (`first.within + w` for sector `start + w`),
    /// written to the log in segment `seq` (which they are now
    /// replay-visible in), one map lookup per line; the locations replaced
    /// are passed to `replaced(first, count)` in runs of one slot, in
    /// sector order.
    pub fn set_run(&mut self, start: u64, n: u32, first: Loc, seq: Seq, mut replaced: impl FnMut(Loc, u32)) {
        assert!(u32::from(first.within) + n <= 1 << self.packing.within_bits, "one slot's sectors");
        let (packing, visible) = (self.packing, visible_of(seq));
        let end = start + u64::from(n);
        let mut v = packing.pack(first);
        let mut added = 0u64;
        let mut key = start / LINE_SECTORS;
        let mut runs = SlotRuns::new();
        while key * LINE_SECTORS < end {
            let line = self.lines.entry(key).or_default();
            for i in span(key, start, end) {
                line.visible[i] = visible;
                match std::mem::replace(&mut line.locs[i], v) {
                    0 => added += 1,
                    old => runs.add(packing, old, &mut replaced),
                }
                v += 1;
            }
            key += 1;
        }
        runs.finish(packing, &mut replaced);
        self.mapped_count += added;
        debug_assert!(
            (0..n)
                .all(|w| self.get(start + u64::from(w))
                    == Some(Loc { within: first.within + w as u8, ..first }))
        );
    }

    /// Calls `f(i, j)` for each maximal run `locs[i..j]` of the sectors
    /// from `first` (sector `first + k` at `locs[k]`) that still map to
    /// their location, in order; one map lookup per line.
    pub fn current_runs(&self, first: u64, locs: &[PackedLoc], mut f: impl FnMut(usize, usize)) {
        let end = first + locs.len() as u64;
        let (mut k, mut key) = (0, first / LINE_SECTORS);
        let mut run: Option<usize> = None;
        while k < locs.len() {
            let span = span(key, first, end);
            let n = span.len();
            let want = &locs[k..k + n];
            // Bit w set: sector k + w still maps to its location.
            let same = self.lines.get(&key).map_or(0u32, |line| {
                line.locs[span]
                    .iter()
                    .zip(want)
                    .enumerate()
                    .fold(0, |m, (w, (&v, p))| m | (u32::from(v == p.0) << w))
            });
            // The common case, the whole span still there: no per-sector step.
            if same == (1 << n) - 1 {
                run.get_or_insert(k);
                k += n;
                key += 1;
                continue;
            }
            for w in 0..n {
                match (same >> w & 1 != 0, run) {
                    (true, None) => run = Some(k + w),
                    (false, Some(r)) => {
                        f(r, k + w);
                        run = None;
                    }
                    _ => {}
                }
            }
            k += n;
            key += 1;
        }
        if let Some(r) = run {
            f(r, locs.len());
        }
    }

    /// Unmaps each sector from `first` (sector `first + k` at `locs[k]`)
    /// that still points at its location, one map lookup per line; the
    /// locations removed are passed to `removed(first, count)` in runs of
    /// one slot, in sector order.
    pub fn remove_if_run(&mut self, first: u64, locs: &[PackedLoc], mut removed: impl FnMut(Loc, u32)) {
        let end = first + locs.len() as u64;
        let packing = self.packing;
        let (mut k, mut key) = (0, first / LINE_SECTORS);
        let mut count = 0u64;
        let mut runs = SlotRuns::new();
        let within_mask = (1u32 << packing.within_bits) - 1;
        while k < locs.len() {
            let span = span(key, first, end);
            let n = span.len();
            if let Some(line) = self.lines.get_mut(&key) {
                let (have, want) = (&mut line.locs[span], &locs[k..k + n]);
                // The common case: the span is one slot's consecutive
                // sectors, all still mapped there; removed in one step.
                let p0 = want[0].0;
                let one_slot = ((p0 - 1) & within_mask) as usize + n <= within_mask as usize + 1;
                let whole =
                    have.iter().zip(want).enumerate().all(|(w, (&v, p))| v == p.0 && p.0 == p0 + w as u32);
                if one_slot && whole {
                    have.fill(0);
                    count += n as u64;
                    runs.add_n(packing, p0, n as u32, &mut removed);
                    if line.is_empty() {
                        self.lines.remove(&key);
                    }
                    k += n;
                    key += 1;
                    continue;
                }
                for (v, p) in have.iter_mut().zip(want) {
                    if *v == p.0 {
                        *v = 0;
                        count += 1;
                        runs.add(packing, p.0, &mut removed);
                    }
                }
                if line.is_empty() {
                    self.lines.remove(&key);
                }
            }
            k += n;
            key += 1;
        }
        runs.finish(packing, &mut removed);
        self.mapped_count -= count;
    }

    /// Applies `f(line, indexes within the line, line's first sector)` to
    /// each line of `[start, start + count)` that exists (with the indexes
    /// of the range's sectors in it), dropping lines left empty.
    fn each_in_range(
        &mut self,
        start: u64,
        count: u64,
        mut f: impl FnMut(&mut Line, std::ops::Range<usize>, u64),
    ) {
        let Some(end) = start.checked_add(count).filter(|_| count > 0) else { return };
        for key in line_keys(&self.lines, start / LINE_SECTORS, (end - 1) / LINE_SECTORS) {
            // One probe for the update and the removal.
            let Entry::Occupied(mut line) = self.lines.entry(key) else { continue };
            f(line.get_mut(), span(key, start, end), key * LINE_SECTORS);
            if line.get().is_empty() {
                line.remove();
            }
        }
    }

    /// Whether any sector of `[start, start + count)` is replay-visible.
    pub fn visible_in(&self, start: u64, count: u64) -> bool {
        self.any_sector(start, count, |line, i| line.visible[i] != 0)
    }

    /// No sector of `[start, start + count)` is replay-visible any more (an
    /// invalidation record for them was logged).
    pub fn clear_visible(&mut self, start: u64, count: u64) {
        self.each_in_range(start, count, |line, span, _| line.visible[span].fill(0));
    }

    /// The sectors of `[start, start + count)` replay-visible in segment
    /// `seq` are not any more (the tail passed it).
    pub fn clear_visible_in(&mut self, start: u64, count: u64, seq: Seq) {
        let visible = visible_of(seq);
        self.each_in_range(start, count, |line, span, _| {
            for v in &mut line.visible[span] {
                if *v == visible {
                    *v = 0;
                }
            }
        });
    }

    /// Unmaps every sector of `[start, start + count)` for which `keep`
    /// says false; returns the `(sector, loc)` pairs removed.
    pub fn remove_range(&mut self, start: u64, count: u64, keep: impl Fn(Loc) -> bool) -> Vec<(u64, Loc)> {
        assert!(count > 0);
        let mut removed = Vec::new();
        let packing = self.packing;
        self.each_in_range(start, count, |line, span, at| {
            for i in span {
                if let Some(loc) = packing.unpack(line.locs[i]).filter(|&l| !keep(l)) {
                    line.locs[i] = 0;
                    removed.push((at + i as u64, loc));
                }
            }
        });
        self.mapped_count -= removed.len() as u64;
        removed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookup_maps_unmaps_and_counts_per_sector() {
        let mut t = Lookup::new(16, 4096, 64).unwrap();
        assert!(Lookup::new(1 << 20, 4096, 64).is_none(), "2^38 sectors do not pack");
        let l = |seg, slot, within| Loc { seg: SegLoc(seg), slot, within };
        assert_eq!(t.set(7, l(1, 2, 3)), None);
        assert_eq!(t.set(8, l(1, 2, 4)), None);
        assert_eq!(t.set(7, l(9, 0, 0)), Some(l(1, 2, 3)));
        assert_eq!(t.mapped_count(), 2);
        assert_eq!(t.get_range(6, 4), vec![None, Some(l(9, 0, 0)), Some(l(1, 2, 4)), None]);
        let (mut gone, stale) = (Vec::new(), t.pack(l(1, 2, 3)));
        t.remove_if_run(7, &[stale], |l, n| gone.push((l, n)));
        assert!(gone.is_empty());
        let gone = t.remove_range(0, 100, |loc| loc.seg == SegLoc(9));
        assert_eq!(gone, vec![(8, l(1, 2, 4))]);
        let (mut gone, current) = (Vec::new(), t.pack(l(9, 0, 0)));
        t.remove_if_run(7, &[current], |l, n| gone.push((l, n)));
        assert_eq!(gone, vec![(l(9, 0, 0), 1)]);
        assert_eq!(t.mapped_count(), 0);
        assert_eq!(t.get(7), None);
    }

    #[test]
    fn runs_across_lines_replace_compare_and_remove_in_sector_order() {
        let mut t = Lookup::new(16, 64, 64).unwrap();
        let l = |seg, slot, within| Loc { seg: SegLoc(seg), slot, within };
        // Sectors 5..25: lines 0 to 3, the first and last partly.
        let mut old = Vec::new();
        t.set_run(5, 20, l(1, 0, 0), Seq(1), |o, n| old.push((o, n)));
        assert!(old.is_empty());
        t.set_run(10, 3, l(2, 3, 4), Seq(2), |o, n| old.push((o, n)));
        assert_eq!(old, vec![(l(1, 0, 5), 3)]);
        assert_eq!(t.mapped_count(), 20);
        let locs: Vec<PackedLoc> = (0..20).map(|w| t.pack(l(1, 0, w))).collect();
        let mut runs = Vec::new();
        t.current_runs(5, &locs, |i, j| runs.push((i, j)));
        assert_eq!(runs, vec![(0, 5), (8, 20)]);
        let mut gone = Vec::new();
        t.remove_if_run(5, &locs, |o, n| gone.push((o, n)));
        assert_eq!(gone, vec![(l(1, 0, 0), 5), (l(1, 0, 8), 12)]);
        assert_eq!(t.mapped_count(), 3);
        assert_eq!(t.get_range(9, 5), vec![None, Some(l(2, 3, 4)), Some(l(2, 3, 5)), Some(l(2, 3, 6)), None]);
        t.current_runs(5, &locs, |i, j| panic!("{i}..{j} was removed"));
        assert_eq!(t.mapped_runs(0, 64), vec![(10, 3)]);
    }

    #[test]
    fn a_run_of_replaced_locations_ends_where_the_next_slot_starts() {
        // 8 sectors a slot: slot 1's first value follows slot 0's last.
        let mut t = Lookup::new(16, 64, 8).unwrap();
        let l = |seg, slot, within| Loc { seg: SegLoc(seg), slot, within };
        t.set_run(0, 8, l(1, 0, 0), Seq(1), |_, _| panic!("nothing to replace"));
        t.set_run(8, 8, l(1, 1, 0), Seq(1), |_, _| panic!("nothing to replace"));
        let mut old = Vec::new();
        t.set_run(4, 8, l(2, 0, 0), Seq(2), |o, n| old.push((o, n)));
        assert_eq!(old, vec![(l(1, 0, 4), 4), (l(1, 1, 0), 4)]);
    }
}
