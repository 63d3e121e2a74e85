//! `BlockMap`: a map from upper block ranges to locations, kept as extents
//! (runs of blocks whose locations advance with the blocks), for every
//! target that puts blocks somewhere other than their home: a log's slots,
//! a replica, an OPT-region copy, a snapshot's exception.
//!
//! Semantics are those of a per-block map (`block -> location`), which is
//! what the property test checks it against; extents are the
//! representation. `insert` overwrites whatever was mapped in its range and
//! returns it, `remove` unmaps a range and returns what was there, `range`
//! walks a range piece by piece (mapped or not), and iteration is in
//! address order (deterministic). Adjacent extents whose locations continue
//! each other are merged, so sequential data costs one entry.
//!
//! Memory: one `BTreeMap` entry per extent: the key (8 bytes), the length
//! (8) and the value (8 for a `u64` location), in nodes of up to 11 entries
//! kept at least half full: between 24 and about 56 bytes per extent for
//! `u64` values, whatever the extent's length. A target that needs less per
//! block (dcd's per-sector table, the 4-bytes-per-block goal of `log`) uses
//! a denser representation behind the same operations.

use std::collections::BTreeMap;
use std::fmt::Debug;

/// A location blocks map to. `advance(n)` is the location of the block `n`
/// blocks after the one at `self` within one extent: for an offset, `+ n`.
pub trait MapValue: Copy + Eq + Debug {
    /// The location `n` blocks further along.
    fn advance(self, n: u64) -> Self;
}

impl MapValue for u64 {
    fn advance(self, n: u64) -> u64 {
        self.checked_add(n).expect("a location past u64::MAX")
    }
}

/// One extent: `length` blocks from `start`, the first at `value`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Extent<V> {
    /// First upper block.
    pub start: u64,
    /// Blocks.
    pub length: u64,
    /// Where the first block is.
    pub value: V,
}

impl<V: MapValue> Extent<V> {
    fn end(&self) -> u64 {
        self.start + self.length
    }

    /// The part of the extent within `[a, b)` (which must overlap it).
    fn clip(&self, a: u64, b: u64) -> Extent<V> {
        let s = self.start.max(a);
        let e = self.end().min(b);
        assert!(s < e, "clip of a non-overlapping extent");
        Extent { start: s, length: e - s, value: self.value.advance(s - self.start) }
    }
}

/// The parts `(start, length)` of `[s, e)` outside the sorted, disjoint
/// ranges `taken` (`[start, end)` each): the gaps a set of ranges leaves.
pub fn outside(s: u64, e: u64, taken: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let mut pos = s;
    for &(a, b) in taken.iter().filter(|&&(a, b)| a < e && s < b) {
        if a > pos {
            out.push((pos, a - pos));
        }
        pos = pos.max(b);
    }
    if pos < e {
        out.push((pos, e - pos));
    }
    out
}

/// `[start, start + length)` piece by piece from the mapped extents within
/// it (in order, clipped): mapped runs and the gaps between them. Shared
/// by every map that answers in extents.
pub fn with_gaps<V: MapValue>(mapped: Vec<Extent<V>>, start: u64, length: u64) -> Vec<(u64, u64, Option<V>)> {
    let mut out = Vec::new();
    let mut pos = start;
    for e in mapped {
        if e.start > pos {
            out.push((pos, e.start - pos, None));
        }
        out.push((e.start, e.length, Some(e.value)));
        pos = e.end();
    }
    if pos < start + length {
        out.push((pos, start + length - pos, None));
    }
    out
}

/// The map; see the module docs.
#[derive(Clone, Debug, Default)]
pub struct BlockMap<V> {
    /// start -> (length, value); extents never overlap.
    extents: BTreeMap<u64, (u64, V)>,
    mapped_blocks: u64,
}

impl<V: MapValue> BlockMap<V> {
    /// An empty map.
    pub fn new() -> BlockMap<V> {
        BlockMap { extents: BTreeMap::new(), mapped_blocks: 0 }
    }

    /// Blocks mapped.
    pub fn mapped_blocks(&self) -> u64 {
        self.mapped_blocks
    }

    /// Extents held (the memory cost is per extent).
    pub fn extent_count(&self) -> usize {
        self.extents.len()
    }

    /// Where `block` is, if mapped.
    pub fn get(&self, block: u64) -> Option<V> {
        let (&s, &(n, v)) = self.extents.range(..=block).next_back()?;
        (block < s + n).then(|| v.advance(block - s))
    }

    /// The extents overlapping `[start, start + length)`, clipped to it, in
    /// order (unmapped gaps are skipped).
    pub fn overlapping(&self, start: u64, length: u64) -> Vec<Extent<V>> {
        let Some(end) = start.checked_add(length).filter(|_| length > 0) else { return Vec::new() };
        let mut out = Vec::new();
        // The extent that starts before `start` may reach into the range.
        if let Some((&s, &(n, v))) = self.extents.range(..start).next_back() {
            if s + n > start {
                out.push(Extent { start: s, length: n, value: v }.clip(start, end));
            }
        }
        for (&s, &(n, v)) in self.extents.range(start..end) {
            out.push(Extent { start: s, length: n, value: v }.clip(start, end));
        }
        out
    }

    /// The extent holding `pos`, else the first one after it (a scan that
    /// walks the map an extent at a time).
    pub fn extent_at_or_after(&self, pos: u64) -> Option<Extent<V>> {
        if let Some((&s, &(n, v))) = self.extents.range(..=pos).next_back() {
            if s + n > pos {
                return Some(Extent { start: s, length: n, value: v });
            }
        }
        self.extents.range(pos..).next().map(|(&s, &(n, v))| Extent { start: s, length: n, value: v })
    }

    /// Unmaps `[start, end)`, handing each removed piece to `removed`, in
    /// order; no allocation.
    fn cut(&mut self, start: u64, end: u64, mut removed: impl FnMut(Extent<V>)) {
        let mut pos = start;
        while pos < end {
            let Some(e) = self.extent_at_or_after(pos).filter(|e| e.start < end) else { break };
            self.extents.remove(&e.start);
            if e.start < start {
                self.extents.insert(e.start, (start - e.start, e.value));
            }
            if e.end() > end {
                self.extents.insert(end, (e.end() - end, e.value.advance(end - e.start)));
            }
            let piece = e.clip(start, end);
            self.mapped_blocks -= piece.length;
            removed(piece);
            pos = e.end();
        }
    }

    /// `[start, start + length)` piece by piece: `(start, length, Some(value))`
    /// for mapped runs, `(start, length, None)` for gaps; the pieces cover
    /// the range exactly.
    pub fn range(&self, start: u64, length: u64) -> Vec<(u64, u64, Option<V>)> {
        with_gaps(self.overlapping(start, length), start, length)
    }

    /// Unmaps `[start, start + length)`; returns what was mapped there.
    pub fn remove(&mut self, start: u64, length: u64) -> Vec<Extent<V>> {
        let mut removed = Vec::new();
        if let Some(end) = start.checked_add(length).filter(|_| length > 0) {
            self.cut(start, end, |e| removed.push(e));
        }
        removed
    }

    /// Maps `[start, start + length)` to `value` onwards, replacing what was
    /// mapped there (returned), merging with neighbours that continue it.
    pub fn insert(&mut self, start: u64, length: u64, value: V) -> Vec<Extent<V>> {
        let mut replaced = Vec::new();
        self.insert_with(start, length, value, |e| replaced.push(e));
        replaced
    }

    fn insert_with(&mut self, start: u64, length: u64, value: V, replaced: impl FnMut(Extent<V>)) {
        assert!(length > 0, "an empty extent");
        let end = start.checked_add(length).expect("a range past u64::MAX");
        let _ = value.advance(length); // the locations must not overflow either
        if self.insert_into_gap(start, length, value) {
            return;
        }
        self.cut(start, end, replaced);
        let (mut s, mut n, mut v) = (start, length, value);
        if let Some((&ps, &(pn, pv))) = self.extents.range(..start).next_back() {
            if ps + pn == start && pv.advance(pn) == value {
                self.extents.remove(&ps);
                (s, n, v) = (ps, pn + n, pv);
            }
        }
        if let Some(&(nn, nv)) = self.extents.get(&end) {
            if value.advance(length) == nv {
                self.extents.remove(&end);
                n += nn;
            }
        }
        self.extents.insert(s, (n, v));
        self.mapped_blocks += length;
    }

    /// [`BlockMap::insert`] when nothing is mapped in `[start, start +
    /// length)` (true; else nothing changes): the last extent starting
    /// before the range's end, found in one search, is then the one before
    /// it and grows in place if it continues into it; the one at the end
    /// is merged if the new extent continues into it. A first mapping
    /// (a thin pool's new chunk) costs two or three searches, not six.
    fn insert_into_gap(&mut self, start: u64, length: u64, value: V) -> bool {
        let end = start + length;
        let next = self.extents.get(&end).copied().filter(|&(_, nv)| value.advance(length) == nv);
        match self.extents.range_mut(..end).next_back() {
            Some((&ps, pe)) if ps + pe.0 > start => return false,
            Some((&ps, pe)) if ps + pe.0 == start && pe.1.advance(pe.0) == value => {
                pe.0 += length + next.map_or(0, |(nn, _)| nn);
            }
            _ => {
                self.extents.insert(start, (length + next.map_or(0, |(nn, _)| nn), value));
            }
        }
        if next.is_some() {
            self.extents.remove(&end);
        }
        self.mapped_blocks += length;
        true
    }

    /// Every extent, in address order.
    pub fn iter(&self) -> impl Iterator<Item = Extent<V>> + '_ {
        self.extents.iter().map(|(&s, &(n, v))| Extent { start: s, length: n, value: v })
    }

    /// Checks the representation: no overlaps, no empty extents, no
    /// mergeable neighbours, and the mapped count. For tests.
    pub fn check_invariants(&self) {
        let mut prev: Option<Extent<V>> = None;
        let mut total = 0;
        for e in self.iter() {
            assert!(e.length > 0, "empty extent at {}", e.start);
            if let Some(p) = prev {
                assert!(p.end() <= e.start, "extents overlap at {}", e.start);
                assert!(
                    !(p.end() == e.start && p.value.advance(p.length) == e.value),
                    "mergeable extents at {}",
                    e.start
                );
            }
            total += e.length;
            prev = Some(e);
        }
        assert_eq!(total, self.mapped_blocks, "mapped count");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inserts_split_merge_and_report_what_they_replace() {
        let mut m: BlockMap<u64> = BlockMap::new();
        assert!(m.insert(10, 10, 1000).is_empty());
        assert!(m.insert(20, 5, 1010).is_empty(), "continues the extent: merged");
        assert_eq!(m.extent_count(), 1);
        assert_eq!(m.get(24), Some(1014));
        let replaced = m.insert(12, 2, 7);
        assert_eq!(replaced, vec![Extent { start: 12, length: 2, value: 1002 }]);
        assert_eq!(m.extent_count(), 3);
        assert_eq!(
            m.range(8, 10),
            vec![(8, 2, None), (10, 2, Some(1000)), (12, 2, Some(7)), (14, 4, Some(1004))]
        );
        assert_eq!(m.remove(0, 100).len(), 3);
        assert_eq!(m.mapped_blocks(), 0);
        m.check_invariants();
    }
}
