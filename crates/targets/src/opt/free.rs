//! The region's free slots: one [`FreeSlots`] kept beside `Opt::slots`,
//! always equal to the slots no home block is mapped to (`Slot::home` is
//! `None`). Every place a slot's `home` changes updates it: a job's commit
//! takes the copied runs' slots, its unmap and an extra copy's drop give
//! slots back, an absorbed write takes its run, and recovery takes the
//! runs of the map and journal it loads (the map's decoder refuses a slot
//! mapped twice; a journal's run must find its slots free). The
//! planner plans on a copy of it (the slots it reclaims are freed there
//! before the job unmaps them); the absorber takes from it directly.
//!
//! It is the shared extent allocator ([`FreeSpace`]) with its next-fit
//! policy ([`NextFit`]): a slot run is taken where asked, else at the first
//! fit from the cursor on (the extent holding the cursor first, wrapping to
//! slot 0), else (the planner) from the longest extent.

use super::Slot;
use crate::alloc::{FreeSpace, Largest, NextFit, Placement};

/// Free slots of the region, with a next-fit cursor.
#[derive(Clone, Debug)]
pub(super) struct FreeSlots {
    space: FreeSpace,
    next: NextFit,
}

impl FreeSlots {
    /// `slot_count` slots, all free (a formatted region).
    pub(super) fn new(slot_count: u32) -> FreeSlots {
        FreeSlots { space: FreeSpace::new(u64::from(slot_count)), next: NextFit::default() }
    }

    /// The slots of `slots` no block is mapped to; the cursor at slot 0.
    pub(super) fn unmapped(slots: &[Slot]) -> FreeSlots {
        let mut space = FreeSpace::all_used(slots.len() as u64);
        let mut start = None;
        for (s, slot) in slots.iter().enumerate() {
            match (slot.home, start) {
                (None, None) => start = Some(s as u64),
                (Some(_), Some(a)) => {
                    space.release(a, s as u64 - a);
                    start = None;
                }
                _ => {}
            }
        }
        if let Some(a) = start {
            space.release(a, slots.len() as u64 - a);
        }
        FreeSlots { space, next: NextFit::default() }
    }

    /// A copy to plan on, its cursor at slot 0 (a plan fills from there).
    pub(super) fn for_plan(&self) -> FreeSlots {
        FreeSlots { space: self.space.clone(), next: NextFit::default() }
    }

    /// A copy without the slots of `runs` (a job's copies go there), its
    /// cursor kept: the slots absorption may take while the job runs.
    pub(super) fn without(&self, runs: impl Iterator<Item = (u32, u32)>) -> FreeSlots {
        let mut f = self.clone();
        for (s, n) in runs {
            f.space.take_range(u64::from(s), u64::from(n));
        }
        f
    }

    /// Frees `[start, start + len)` (it must be taken).
    pub(super) fn add(&mut self, start: u32, len: u32) {
        self.space.release(u64::from(start), u64::from(len));
    }

    /// Takes `[start, start + len)` (it must be free); the cursor stays.
    pub(super) fn remove(&mut self, start: u32, len: u32) {
        self.space.take(u64::from(start), u64::from(len));
    }

    /// The free extents, in slot order.
    pub(super) fn extents(&self) -> Vec<(u32, u32)> {
        self.space.extents().map(|(s, l)| (s as u32, l as u32)).collect()
    }

    /// Slots free.
    pub(super) fn free_count(&self) -> u64 {
        self.space.free_units()
    }

    /// Takes `[at, at + n)`; the next fit is looked for after it.
    fn cut(&mut self, at: u32, n: u32) {
        self.remove(at, n);
        self.next.cursor = u64::from(at + n);
    }

    /// Takes `[at, at + n)` if all of it is free.
    pub(super) fn take_at(&mut self, at: u32, n: u32) -> bool {
        let free = u64::from(at) + u64::from(n) <= self.space.total_units()
            && self.space.is_free(u64::from(at), u64::from(n));
        if free {
            self.cut(at, n);
        }
        free
    }

    /// Takes `n` adjacent free slots, next fit from the cursor.
    pub(super) fn take_fit(&mut self, n: u32) -> Option<u32> {
        self.space.allocate(u64::from(n), 0, &mut self.next).map(|s| s as u32)
    }

    /// Takes `n` adjacent free slots, next fit from `skip` slots past the
    /// cursor (the region's end wraps to slot 0).
    /// The cursor stays where it was when none fits.
    pub(super) fn take_fit_after(&mut self, skip: u64, n: u32) -> Option<u32> {
        let cursor = self.next.cursor;
        self.next.cursor = (cursor + skip) % self.space.total_units();
        let s = self.take_fit(n);
        if s.is_none() {
            self.next.cursor = cursor;
        }
        s
    }

    /// Takes up to `n` adjacent free slots from the longest extent.
    pub(super) fn take_longest(&mut self, n: u32) -> Option<(u32, u32)> {
        let s = Largest.choose(&self.space, 1, 0)? as u32;
        let l = self.extents().into_iter().find(|e| e.0 == s).expect("Largest chose an extent start").1;
        let m = l.min(n);
        self.cut(s, m);
        Some((s, m))
    }

    /// Whether it holds exactly the slots of `slots` no block is mapped to.
    pub(super) fn matches(&self, slots: &[Slot]) -> bool {
        self.extents() == FreeSlots::unmapped(slots).extents()
    }
}

#[cfg(test)]
mod tests {
    use super::FreeSlots;
    use crate::opt::Slot;

    #[test]
    fn free_slots_merge_and_are_taken_where_asked_then_next_fit_then_longest() {
        let mut f = FreeSlots::new(16);
        f.remove(0, 16);
        f.add(0, 4);
        f.add(10, 6);
        f.add(4, 2); // merges with [0, 4)
        assert_eq!(f.extents(), vec![(0, 6), (10, 6)]);
        assert!(f.take_at(2, 3));
        assert!(!f.take_at(5, 2), "slot 6 is not free");
        // The cursor is at 5: the next fit of 2 is [5, 6)? Too short; [10, 12).
        assert_eq!(f.take_fit(2), Some(10));
        assert_eq!(f.take_fit(9), None);
        assert_eq!(f.take_longest(9), Some((12, 4)));
        assert_eq!(f.extents(), vec![(0, 2), (5, 1)]);
    }

    #[test]
    fn a_jobs_view_leaves_out_its_runs_free_parts_and_keeps_the_cursor() {
        let mut f = FreeSlots::new(16);
        assert!(f.take_at(4, 2)); // slots 4-5 mapped; the cursor at 6
                                  // The job copies to [2, 5) (slot 4 is one it reclaims) and [10, 12).
        let mut j = f.without([(2, 3), (10, 2)].into_iter());
        assert_eq!(j.extents(), vec![(0, 2), (6, 4), (12, 4)]);
        assert_eq!(f.extents(), vec![(0, 4), (6, 10)], "the region's own free slots are untouched");
        // Next fit from the kept cursor (6), not from slot 0.
        assert_eq!(j.take_fit(3), Some(6));
        assert_eq!(j.take_fit(2), Some(12));
    }

    #[test]
    fn a_fit_after_the_cursor_starts_inside_a_free_extent_and_wraps_at_the_end() {
        let mut f = FreeSlots::new(16);
        assert_eq!(f.take_fit(2), Some(0));
        // Cursor 2, skip 4: slots 6 and 7, inside the free extent [2, 16).
        assert_eq!(f.take_fit_after(4, 2), Some(6));
        // Cursor 8, skip 7: slot 15 has one slot to the end; wraps to [2, 6).
        assert_eq!(f.take_fit_after(7, 3), Some(2));
        assert_eq!(f.extents(), vec![(5, 1), (8, 8)]);
        let mut slots = vec![Slot { home: Some(1), ..Slot::default() }; 16];
        for s in [5, 8, 9, 10, 11, 12, 13, 14, 15] {
            slots[s].home = None;
        }
        assert!(f.matches(&slots));
        slots[9].home = Some(3);
        assert!(!f.matches(&slots), "a mapped slot counted free");
    }
}
