//! The lower-request bookkeeping every target needs: why each lower
//! request was sent (looked up by id when it completes), and the queues the
//! runtime drains after every input. One entry per lower request in flight.
//!
//! [`IdTable`] holds values by request id for any component that numbers
//! its requests 0, 1, 2, ... (targets, the deterministic harness, the
//! simulator's replay).

use layoutd_core::{Completion, ReqId, Request};
use rustc_hash::FxHashMap;
use std::collections::VecDeque;

/// Values by id, for ids inserted in increasing order without gaps and
/// removed in any order (requests in flight): a ring from the oldest id
/// present, so an entry costs its value and no hashing. An entry left
/// behind while many newer ones come and go moves to a side map, so memory
/// follows the entries present, never the ids issued since the oldest.
/// Only [`IdTable::values`] and [`IdTable::values_mut`] visit entries, in
/// no promised order.
pub struct IdTable<V> {
    /// Id of `ring[0]`.
    base: u64,
    ring: VecDeque<Option<V>>,
    /// Entries of `ring` that are `Some`.
    ring_count: usize,
    /// Old entries moved out of the ring (ids below `base`).
    stragglers: FxHashMap<u64, V>,
}

impl<V> Default for IdTable<V> {
    fn default() -> Self {
        IdTable { base: 0, ring: VecDeque::new(), ring_count: 0, stragglers: FxHashMap::default() }
    }
}

/// Ring slots allowed per entry present before old entries move aside.
const RING_SLACK_PER_ENTRY: usize = 4;

impl<V> IdTable<V> {
    /// Adds `value` under `id`: the id after the newest inserted (any id
    /// once the table is empty).
    pub fn insert(&mut self, id: u64, value: V) {
        if self.ring.is_empty() {
            self.base = id;
        }
        assert_eq!(id, self.base + self.ring.len() as u64, "ids are inserted in order, without gaps");
        if self.ring.len() == self.ring.capacity() {
            // Grow by an eighth, not double: an open-loop overload keeps one
            // entry per queued request, and 200,000 of them would otherwise
            // hold room for 262,144 (the growth is rare and amortised).
            self.ring.reserve_exact(self.ring.len() / 8 + 64);
        }
        self.ring.push_back(Some(value));
        self.ring_count += 1;
        if self.ring.len() > RING_SLACK_PER_ENTRY * self.ring_count + 64 {
            self.move_oldest_aside();
        }
    }

    /// Removes and returns the value under `id`, if present.
    pub fn remove(&mut self, id: u64) -> Option<V> {
        if id < self.base {
            return self.stragglers.remove(&id);
        }
        let value = self.ring.get_mut((id - self.base) as usize)?.take()?;
        self.ring_count -= 1;
        self.pop_empty_front();
        Some(value)
    }

    /// Entries present.
    pub fn len(&self) -> usize {
        self.ring_count + self.stragglers.len()
    }

    /// Whether no entry is present.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every value present, in no promised order.
    pub fn values(&self) -> impl Iterator<Item = &V> {
        self.ring.iter().flatten().chain(self.stragglers.values())
    }

    /// Every value present, mutable, in no promised order.
    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut V> {
        self.ring.iter_mut().flatten().chain(self.stragglers.values_mut())
    }

    fn pop_empty_front(&mut self) {
        while self.ring.front().is_some_and(Option::is_none) {
            self.ring.pop_front();
            self.base += 1;
        }
    }

    /// Moves the oldest ring entries to the side map until the ring is at
    /// most twice as long as its entries (each entry moves at most once).
    fn move_oldest_aside(&mut self) {
        while self.ring.len() > 2 * self.ring_count + 64 {
            let oldest = self.ring.pop_front().expect("ring longer than its entries");
            let value = oldest.expect("the ring's first slot is an entry");
            self.stragglers.insert(self.base, value);
            self.base += 1;
            self.ring_count -= 1;
            self.pop_empty_front();
        }
    }
}

/// Lower requests in flight by id, with what each was for (`O`), and the
/// outgoing lower and upper queues.
pub struct LowerIo<O> {
    /// Why each lower request in flight was sent.
    pub lower: IdTable<O>,
    next_id: u64,
    /// Lower requests waiting for `poll_lower`.
    pub lower_q: VecDeque<Request>,
    /// Upper completions waiting for `poll_upper`.
    pub upper_q: VecDeque<Completion>,
}

impl<O> Default for LowerIo<O> {
    fn default() -> Self {
        LowerIo { lower: IdTable::default(), next_id: 0, lower_q: VecDeque::new(), upper_q: VecDeque::new() }
    }
}

impl<O> LowerIo<O> {
    /// Queues `req` below, marked `background` or not, remembering `op`;
    /// returns its id.
    pub fn emit(&mut self, op: O, background: bool, mut req: Request) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        req.id = ReqId(id);
        req.background = background;
        self.lower.insert(id, op);
        self.lower_q.push_back(req);
        id
    }

    /// Why lower request `id` was sent (it completed).
    pub fn take(&mut self, id: ReqId) -> O {
        self.lower.remove(id.0).expect("completion for a request this target sent")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn id_table_removes_in_any_order_and_moves_stragglers_aside() {
        let mut t = IdTable::default();
        t.insert(5, 'a');
        t.insert(6, 'b');
        t.insert(7, 'c');
        assert_eq!(t.remove(6), Some('b'));
        assert_eq!(t.remove(6), None);
        assert_eq!(t.remove(5), Some('a'));
        assert_eq!(t.remove(7), Some('c'));
        assert!(t.is_empty());
        // Empty: any id starts the ring again.
        t.insert(100, 'x');
        // One old entry while 10,000 newer ones come and go: the ring
        // stays short and the old one is still found.
        for id in 101..10_101 {
            t.insert(id, 'y');
            assert_eq!(t.remove(id), Some('y'));
            assert!(t.ring.len() <= RING_SLACK_PER_ENTRY * 2 + 64);
        }
        assert_eq!(t.len(), 1);
        assert_eq!(t.values().copied().collect::<Vec<_>>(), vec!['x']);
        t.values_mut().for_each(|v| *v = 'z');
        assert_eq!(t.remove(100), Some('z'));
        assert!(t.is_empty());
    }

    #[test]
    fn id_table_grows_by_an_eighth_not_double() {
        let mut t = IdTable::default();
        for id in 0..10_000u64 {
            t.insert(id, id);
        }
        // Doubling would hold room for 16,384.
        let room = t.ring.capacity();
        assert!(room >= 10_000 && room <= 10_000 + 10_000 / 8 + 64, "room for {room}");
        assert_eq!(t.remove(9_999), Some(9_999));
        assert_eq!(t.len(), 9_999);
    }
}
