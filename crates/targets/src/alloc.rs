//! Free-space allocation shared by the targets that place data: extents of
//! free *units* (blocks, chunks or segments; the caller picks the unit),
//! a placement policy behind one trait, and a segment usage table.
//!
//! - [`FreeSpace`]: the free extents, merged, in address order; allocating
//!   takes a contiguous run a [`Placement`] chooses, releasing gives it back.
//!   Double allocation and double release are caught by assertions (they
//!   are bugs, not conditions); running out is `None`.
//! - [`Placement`] policies: [`NextFit`] (a cursor that moves on, as a log's
//!   head does), [`Nearest`] (as close to a hint as possible: a replica or a
//!   snapshot copy next to its origin), [`Largest`] (the largest free
//!   extent: fewest future seeks for a long sequential run).
//! - [`SegmentUsage`]: valid units and last-write time per segment, what
//!   cleaning policies (greedy, cost-benefit, age) choose victims by.
//! - [`SegmentRing`]: the allocator of a circular log (`dcd`): segments are
//!   handed out in sequence order, sequence `s` at unit `s mod count`, and
//!   come back oldest first. Where [`FreeSpace`] plus a [`Placement`] lets a
//!   log reuse any segment (the `log` target picks victims by usage), the
//!   ring is the special case whose free space is always one extent that
//!   starts at the head: it needs no map, only two counters.
//!
//! Memory: one `BTreeMap` entry per free extent (about 24-56 bytes), not per
//! unit; `SegmentUsage` is 16 bytes per segment; `SegmentRing` 24 bytes.

use std::collections::BTreeMap;

/// Free space over units `0..total_units`.
#[derive(Clone, Debug)]
pub struct FreeSpace {
    /// start -> length of each free extent; never overlapping or adjacent.
    free: BTreeMap<u64, u64>,
    free_units: u64,
    total_units: u64,
}

impl FreeSpace {
    /// Everything free.
    pub fn new(total_units: u64) -> FreeSpace {
        let mut free = BTreeMap::new();
        if total_units > 0 {
            free.insert(0, total_units);
        }
        FreeSpace { free, free_units: total_units, total_units }
    }

    /// Nothing free (recovery then releases what it finds unused).
    pub fn all_used(total_units: u64) -> FreeSpace {
        FreeSpace { free: BTreeMap::new(), free_units: 0, total_units }
    }

    /// Units in all.
    pub fn total_units(&self) -> u64 {
        self.total_units
    }

    /// Units free.
    pub fn free_units(&self) -> u64 {
        self.free_units
    }

    /// The free extents `(start, length)`, in address order.
    pub fn extents(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.free.iter().map(|(&s, &n)| (s, n))
    }

    /// Whether every unit of `[start, start + length)` is free.
    pub fn is_free(&self, start: u64, length: u64) -> bool {
        match self.free.range(..=start).next_back() {
            Some((&s, &n)) => start + length <= s + n,
            None => false,
        }
    }

    /// The free unit closest to `hint` within `[lo, hi)` (ties: the lower
    /// one), in two map lookups: the last free unit at or below the hint
    /// and the first above it.
    pub fn nearest_unit(&self, hint: u64, lo: u64, hi: u64) -> Option<u64> {
        let hint = hint.clamp(lo, hi.max(lo + 1) - 1);
        let below = self
            .free
            .range(..=hint)
            .next_back()
            .map(|(&s, &n)| (s + n - 1).min(hint))
            .filter(|&u| u >= lo && u < hi);
        let above = self.free.range(hint + 1..).next().map(|(&s, _)| s).filter(|&u| u >= lo && u < hi);
        match (below, above) {
            (Some(b), Some(a)) => Some(if hint - b <= a - hint { b } else { a }),
            (b, a) => b.or(a),
        }
    }

    /// Takes `length` contiguous units where `placement` chooses, near
    /// `hint` where the policy cares; `None` if no free extent is long enough.
    pub fn allocate(&mut self, length: u64, hint: u64, placement: &mut dyn Placement) -> Option<u64> {
        assert!(length > 0, "an empty allocation");
        let start = placement.choose(self, length, hint)?;
        self.take(start, length);
        Some(start)
    }

    /// Marks `[start, start + length)` used; it must be free (recovery
    /// rebuilding the map, or a policy's choice). Two map searches at most:
    /// the extent holding it is shortened in place, the rest after it
    /// inserted.
    pub fn take(&mut self, start: u64, length: u64) {
        let (s, n) = match self.free.range_mut(..=start).next_back() {
            Some((&s, n)) if start + length <= s + *n => {
                let whole = *n;
                if s < start {
                    *n = start - s;
                }
                (s, whole)
            }
            _ => panic!("allocating [{start}, +{length}), which is not free"),
        };
        if s == start {
            self.free.remove(&s);
        }
        if start + length < s + n {
            self.free.insert(start + length, s + n - (start + length));
        }
        self.free_units -= length;
    }

    /// Gives `[start, start + length)` back; it must be in use. Merges with
    /// the free extents either side.
    pub fn release(&mut self, start: u64, length: u64) {
        assert!(self.release_if_used(start, length), "releasing [{start}, +{length}), which is partly free");
    }

    /// [`FreeSpace::release`] if no unit of the range is free (true); else
    /// changes nothing (false). The last extent starting at or before the
    /// range's end decides it in one search: before the range and not
    /// reaching it (insert; one more search), ending where it starts (grown
    /// in place), or starting at its end (merged with what precedes).
    fn release_if_used(&mut self, start: u64, length: u64) -> bool {
        assert!(
            length > 0 && start + length <= self.total_units,
            "releasing [{start}, +{length}) outside the space"
        );
        let end = start + length;
        match self.free.range_mut(..=end).next_back() {
            Some((&s, n)) if s < start => {
                if s + *n > start {
                    return false;
                }
                if s + *n == start {
                    *n += length;
                } else {
                    self.free.insert(start, length);
                }
            }
            Some((&s, _)) if s == end => {
                let before = self.free.range(..end).next_back().map(|(&ps, &pn)| (ps, pn));
                if before.is_some_and(|(ps, pn)| ps >= start || ps + pn > start) {
                    return false;
                }
                let n = length + self.free.remove(&end).expect("just found");
                match before {
                    Some((ps, pn)) if ps + pn == start => {
                        *self.free.get_mut(&ps).expect("just found") += n;
                    }
                    _ => {
                        self.free.insert(start, n);
                    }
                }
            }
            Some(_) => return false,
            None => {
                self.free.insert(start, length);
            }
        }
        self.free_units += length;
        assert!(self.free_units <= self.total_units);
        true
    }

    /// The free parts of `[start, start + length)`, in order.
    pub fn free_parts(&self, start: u64, length: u64) -> Vec<(u64, u64)> {
        let end = start.saturating_add(length);
        let mut out = Vec::new();
        if end <= start || self.free_units == 0 {
            return out;
        }
        let first = self.free.range(..=start).next_back().map(|(&s, &n)| (s, n));
        for (s, n) in first.into_iter().chain(self.free.range(start + 1..end).map(|(&s, &n)| (s, n))) {
            let (a, b) = (s.max(start), (s + n).min(end));
            if a < b {
                out.push((a, b - a));
            }
        }
        out
    }

    /// Marks every unit of `[start, start + length)` used, whatever was
    /// free of it; returns the units that were free (a file system taking
    /// back blocks it had declared free).
    pub fn take_range(&mut self, start: u64, length: u64) -> u64 {
        if self.free_units == 0 {
            return 0; // (the common case of a set nothing has been released to yet)
        }
        let parts = self.free_parts(start, length);
        let n = parts.iter().map(|p| p.1).sum();
        for (s, l) in parts {
            self.take(s, l);
        }
        n
    }

    /// Marks every unit of `[start, start + length)` free, whatever was
    /// used of it; returns the units that were used. When none of it was
    /// free (a block written for the first time, in a set of written
    /// blocks) this is one [`FreeSpace::release`]: one or two searches.
    pub fn release_range(&mut self, start: u64, length: u64) -> u64 {
        let end = (start + length).min(self.total_units);
        if start >= end {
            return 0;
        }
        if self.release_if_used(start, end - start) {
            return end - start;
        }
        let mut pos = start;
        let mut n = 0;
        for (s, l) in self.free_parts(start, end - start) {
            if s > pos {
                self.release(pos, s - pos);
                n += s - pos;
            }
            pos = s + l;
        }
        if pos < end {
            self.release(pos, end - pos);
            n += end - pos;
        }
        n
    }

    /// Free extents held (the memory cost is per extent).
    pub fn extent_count(&self) -> usize {
        self.free.len()
    }
}

/// Where an allocation goes: a free start with `length` free units from it.
pub trait Placement {
    /// A start such that `[start, start + length)` is free, or `None`.
    fn choose(&mut self, free: &FreeSpace, length: u64, hint: u64) -> Option<u64>;
}

/// The first fit at or after a cursor that moves past each allocation,
/// wrapping once: a log's head.
#[derive(Clone, Debug, Default)]
pub struct NextFit {
    /// Where the next search starts.
    pub cursor: u64,
}

impl Placement for NextFit {
    fn choose(&mut self, free: &FreeSpace, length: u64, _hint: u64) -> Option<u64> {
        let fits = |(s, n): (u64, u64), from: u64| {
            let a = s.max(from);
            (a + length <= s + n).then_some(a)
        };
        // The extent holding the cursor, then those after it, then from 0.
        let holding = free.free.range(..=self.cursor).next_back().map(|(&s, &n)| (s, n));
        let after = free.free.range(self.cursor + 1..).map(|(&s, &n)| (s, n));
        let found = holding
            .into_iter()
            .chain(after)
            .find_map(|e| fits(e, self.cursor))
            .or_else(|| free.extents().find_map(|e| fits(e, 0)))?;
        self.cursor = found + length;
        Some(found)
    }
}

/// As close to the hint as possible, on either side.
#[derive(Clone, Debug, Default)]
pub struct Nearest;

impl Placement for Nearest {
    fn choose(&mut self, free: &FreeSpace, length: u64, hint: u64) -> Option<u64> {
        // In each fitting extent the closest start to the hint; the closest overall.
        free.extents()
            .filter(|&(_, n)| n >= length)
            .map(|(s, n)| hint.clamp(s, s + n - length))
            .min_by_key(|&start| (start.abs_diff(hint), start))
    }
}

/// The start of the largest free extent (ties: the lowest address).
#[derive(Clone, Debug, Default)]
pub struct Largest;

impl Placement for Largest {
    fn choose(&mut self, free: &FreeSpace, length: u64, _hint: u64) -> Option<u64> {
        let (s, n) = free.extents().max_by_key(|&(s, n)| (n, std::cmp::Reverse(s)))?;
        (n >= length).then_some(s)
    }
}

/// Per segment: valid units and when it was last written (any clock the
/// caller keeps: a write sequence number or nanoseconds).
#[derive(Clone, Debug)]
pub struct SegmentUsage {
    valid: Vec<u32>,
    written_at: Vec<u64>,
    units_per_segment: u32,
}

impl SegmentUsage {
    /// `segments` empty segments of `units_per_segment` units.
    pub fn new(segments: usize, units_per_segment: u32) -> SegmentUsage {
        SegmentUsage { valid: vec![0; segments], written_at: vec![0; segments], units_per_segment }
    }

    /// Segments.
    pub fn len(&self) -> usize {
        self.valid.len()
    }

    /// Whether there are no segments.
    pub fn is_empty(&self) -> bool {
        self.valid.is_empty()
    }

    /// Bytes of RAM it holds (its allocations).
    pub fn ram_bytes(&self) -> u64 {
        (4 * self.valid.capacity() + 8 * self.written_at.capacity()) as u64
    }

    /// Valid units of segment `i`.
    pub fn valid(&self, i: usize) -> u32 {
        self.valid[i]
    }

    /// When segment `i` was last written.
    pub fn written_at(&self, i: usize) -> u64 {
        self.written_at[i]
    }

    /// `n` units of segment `i` became valid at `now`.
    pub fn add(&mut self, i: usize, n: u32, now: u64) {
        self.valid[i] += n;
        assert!(self.valid[i] <= self.units_per_segment, "segment {i}: more valid units than it holds");
        self.written_at[i] = self.written_at[i].max(now);
    }

    /// `n` units of segment `i` were overwritten or trimmed.
    pub fn sub(&mut self, i: usize, n: u32) {
        self.valid[i] = self.valid[i]
            .checked_sub(n)
            .unwrap_or_else(|| panic!("segment {i}: more invalidated than valid"));
    }

    /// Segment `i` was cleaned or reused: empty again.
    pub fn reset(&mut self, i: usize) {
        self.valid[i] = 0;
        self.written_at[i] = 0;
    }

    /// Share of valid units in segment `i`, 0..=1.
    pub fn utilization(&self, i: usize) -> f64 {
        f64::from(self.valid[i]) / f64::from(self.units_per_segment)
    }
}

/// A circular log's allocator over `count` segments. Sequence numbers grow
/// without bound; sequence `s` lives at unit `s % count`. The live
/// sequences are `tail..head`; allocation takes `head`, release gives back
/// everything below a new tail. Invariant: `tail <= head <= tail + count`,
/// so no unit is live twice.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SegmentRing {
    tail: u64,
    head: u64,
    count: u64,
}

impl SegmentRing {
    /// A ring of `count` segments whose live sequences are `tail..head`
    /// (an empty ring: `tail == head`; recovery passes what it replayed).
    pub fn new(count: u64, tail: u64, head: u64) -> SegmentRing {
        assert!(count > 0, "a ring of no segments");
        assert!(tail <= head && head - tail <= count, "live {tail}..{head} does not fit {count} segments");
        SegmentRing { tail, head, count }
    }

    /// Segments in the ring.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The oldest live sequence (everything older was given back).
    pub fn tail(&self) -> u64 {
        self.tail
    }

    /// The sequence the next allocation gets.
    pub fn head(&self) -> u64 {
        self.head
    }

    /// Live segments: allocated and not given back.
    pub fn in_use(&self) -> u64 {
        self.head - self.tail
    }

    /// Segments free for allocation.
    pub fn free_count(&self) -> u64 {
        self.count - self.in_use()
    }

    /// The unit sequence `seq` lives at.
    pub fn unit(&self, seq: u64) -> u64 {
        seq % self.count
    }

    /// The next sequence and its unit, unless `limit` segments (at most
    /// the ring's count) are already live.
    pub fn allocate(&mut self, limit: u64) -> Option<(u64, u64)> {
        assert!(limit <= self.count, "limit {limit} is past the ring's {} segments", self.count);
        if self.in_use() >= limit {
            return None;
        }
        let seq = self.head;
        self.head += 1;
        Some((seq, self.unit(seq)))
    }

    /// Gives back every sequence below `tail` (which may not pass the head
    /// nor go back).
    pub fn release_below(&mut self, tail: u64) {
        assert!(
            tail >= self.tail && tail <= self.head,
            "tail {tail} outside the live {}..{}",
            self.tail,
            self.head
        );
        self.tail = tail;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies_place_where_they_say() {
        let mut f = FreeSpace::new(100);
        f.take(10, 20); // free: [0,10) [30,100)
        f.take(50, 5); // free: [0,10) [30,50) [55,100)
        assert_eq!(Nearest.choose(&f, 4, 28), Some(30));
        assert_eq!(Nearest.choose(&f, 4, 12), Some(6), "the closest fit: the end of [0, 10)");
        assert_eq!(Largest.choose(&f, 4, 0), Some(55));
        let mut nf = NextFit { cursor: 40 };
        assert_eq!(nf.choose(&f, 15, 0), Some(55), "[40,50) is too short");
        assert_eq!(nf.cursor, 70);
        let mut nf = NextFit { cursor: 95 };
        assert_eq!(nf.choose(&f, 8, 0), Some(0), "wraps");
        assert_eq!(Largest.choose(&f, 46, 0), None);
        assert_eq!(f.nearest_unit(12, 0, 100), Some(9));
        assert_eq!(f.nearest_unit(12, 10, 100), Some(30));
        assert_eq!(f.nearest_unit(52, 0, 100), Some(49));
        assert_eq!(f.nearest_unit(52, 50, 56), Some(55));
        assert_eq!(f.nearest_unit(52, 50, 55), None);
        f.release(10, 20);
        assert_eq!(f.extents().collect::<Vec<_>>(), vec![(0, 50), (55, 45)]);
    }

    #[test]
    fn ranges_take_and_release_whatever_part_is_free_or_used() {
        let mut f = FreeSpace::all_used(100);
        assert_eq!(f.release_range(10, 10), 10);
        assert_eq!(f.release_range(15, 10), 5, "[15, 20) was free already");
        assert_eq!(f.free_parts(0, 100), vec![(10, 15)]);
        assert_eq!(f.free_parts(12, 3), vec![(12, 3)]);
        assert_eq!(f.take_range(0, 12), 2);
        assert_eq!(f.take_range(20, 30), 5);
        assert_eq!(f.extents().collect::<Vec<_>>(), vec![(12, 8)]);
        assert_eq!(f.release_range(95, 10), 5, "clipped to the space");
        assert_eq!((f.free_units(), f.extent_count()), (13, 2));
    }

    #[test]
    fn the_ring_hands_out_in_order_and_takes_back_oldest_first() {
        let mut r = SegmentRing::new(3, 5, 5);
        assert_eq!(r.allocate(3), Some((5, 2)));
        assert_eq!(r.allocate(3), Some((6, 0)));
        assert_eq!(r.allocate(2), None, "the limit keeps one segment back");
        assert_eq!(r.allocate(3), Some((7, 1)));
        assert_eq!((r.in_use(), r.free_count()), (3, 0));
        assert_eq!(r.allocate(3), None, "full");
        r.release_below(6);
        assert_eq!(r.allocate(3), Some((8, 2)), "the unit sequence 5 gave back");
        assert_eq!((r.tail(), r.head()), (6, 9));
    }

    #[test]
    #[should_panic(expected = "outside the live")]
    fn the_ring_refuses_to_give_back_what_it_never_handed_out() {
        let mut r = SegmentRing::new(4, 0, 2);
        r.release_below(3);
    }
}
