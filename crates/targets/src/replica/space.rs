//! What the `replica` target knows about blocks: which the file system
//! declared free, which of those are free for new replicas, which may hold
//! replica bytes on disk (the *region*, kept durable), and the replica map
//! itself (replica block -> original, original -> replica blocks).
//!
//! Invariants (checked by [`Space::check`]):
//! - `free` ⊆ `declared`, `region` ⊆ `declared`;
//! - every replica block is declared, not free, and in the region;
//! - `forward` and the `reverse` layers describe the same pairs.

use super::dense::{Forward, HashLayer};
use crate::alloc::FreeSpace;
use crate::blockmap::MapValue;

/// Where a replica block's original is, plus its LRU state. `advance`
/// moves the original along; the LRU fields are per extent.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) struct Rep {
    /// The original block.
    pub orig: u64,
    /// Read tick of the last use (or of creation).
    pub used: u32,
    /// Failed reclamations since the last use.
    pub age: u8,
    /// Which reverse layer holds the pair.
    pub layer: u8,
    /// Whether it has been read since it was created.
    pub ever_used: bool,
}

impl MapValue for Rep {
    fn advance(self, n: u64) -> Rep {
        Rep { orig: self.orig.checked_add(n).expect("an original past u64::MAX"), ..self }
    }
}

/// Block sets and the replica map; see the module docs.
pub(crate) struct Space {
    /// "Free" here = declared free by the file system (discard, zeroes, bitmap).
    pub declared: FreeSpace,
    /// "Free" here = declared, holding no replica and no replica write.
    pub free: FreeSpace,
    /// "Free" here = in the region: may hold replica bytes on disk.
    pub region: FreeSpace,
    /// Replica block -> original.
    pub forward: Forward,
    /// Per layer: original -> replica block.
    pub reverse: Vec<HashLayer>,
}

/// Bytes one `BTreeMap` extent entry of a block set costs, as the status
/// estimates it (key + value + a share of the node).
const SET_EXTENT_BYTES: u64 = 32;

impl Space {
    pub fn new(blocks: u64, layers: u32) -> Space {
        Space {
            declared: FreeSpace::all_used(blocks),
            free: FreeSpace::all_used(blocks),
            region: FreeSpace::all_used(blocks),
            forward: Forward::default(),
            reverse: (0..layers).map(|_| HashLayer::default()).collect(),
        }
    }

    /// Blocks holding replicas.
    pub fn replica_blocks(&self) -> u64 {
        self.forward.mapped_blocks()
    }

    /// Estimated bytes of the replica map (forward and reverse).
    pub fn map_bytes(&self) -> u64 {
        self.forward.bytes() + self.reverse.iter().map(|r| r.bytes()).sum::<u64>()
    }

    /// Estimated bytes of the block sets.
    pub fn sets_bytes(&self) -> u64 {
        let n = self.declared.extent_count() + self.free.extent_count() + self.region.extent_count();
        n as u64 * SET_EXTENT_BYTES
    }

    /// Removes the replicas *of* originals in `[a, a + n)`; returns their
    /// `(replica block, length)` pieces (released to `free`).
    pub fn drop_replicas_of(&mut self, a: u64, n: u64) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        // (Empty layers are skipped: most writes meet no replica, and the
        // layers past the first are mostly empty.)
        for layer in 0..self.reverse.len() {
            if self.reverse[layer].mapped_blocks() == 0 {
                continue;
            }
            for e in self.reverse[layer].remove(a, n) {
                let removed = self.forward.remove(e.value, e.length);
                assert_eq!(
                    removed.iter().map(|r| r.length).sum::<u64>(),
                    e.length,
                    "forward and reverse agree"
                );
                self.free.release(e.value, e.length);
                out.push((e.value, e.length));
            }
        }
        out
    }

    /// Removes the replicas *living in* `[a, a + n)`; returns the blocks
    /// dropped. The blocks are not released: the caller decides.
    pub fn drop_replicas_in(&mut self, a: u64, n: u64) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        if self.forward.mapped_blocks() == 0 {
            return out;
        }
        for e in self.forward.remove(a, n) {
            let removed = self.reverse[e.value.layer as usize].remove(e.value.orig, e.length);
            assert_eq!(removed.len(), 1, "one reverse extent per forward extent piece");
            out.push((e.start, e.length));
        }
        out
    }

    /// Records a replica of `[orig, orig + n)` at `loc` (the blocks were
    /// taken from `free` when the write was issued); `tick` is the read
    /// clock. If every layer already holds one for some of these
    /// originals, the last layer's are replaced (and released).
    pub fn add_replica(&mut self, orig: u64, n: u64, loc: u64, tick: u32) {
        assert!(self.region.is_free(loc, n), "a replica lives in the region");
        assert!(self.forward.overlapping(loc, n).is_empty(), "the blocks held no replica");
        let layers = self.reverse.len();
        let layer =
            (0..layers).find(|&l| self.reverse[l].overlapping(orig, n).is_empty()).unwrap_or(layers - 1);
        for e in self.reverse[layer].remove(orig, n) {
            self.forward.remove(e.value, e.length);
            self.free.release(e.value, e.length);
        }
        self.reverse[layer].insert(orig, n, loc);
        let rep = Rep { orig, used: tick, age: 0, layer: layer as u8, ever_used: false };
        self.forward.insert(loc, n, rep);
    }

    /// Marks the replica blocks `[loc, loc + n)` used at `tick`.
    pub fn touch(&mut self, loc: u64, n: u64, tick: u32) {
        for e in self.forward.remove(loc, n) {
            let rep = Rep { used: tick, age: 0, ever_used: true, ..e.value };
            self.forward.insert(e.start, e.length, rep);
        }
    }

    /// Replica chains covering `[a, a + n)` whole: `(layer, replica block)`.
    pub fn chains(&self, a: u64, n: u64) -> Vec<(usize, u64)> {
        let mut out = Vec::new();
        for (l, r) in self.reverse.iter().enumerate() {
            let o = r.overlapping(a, n);
            if o.len() == 1 && o[0].start == a && o[0].length == n {
                out.push((l, o[0].value));
            }
        }
        out
    }

    /// Checks the invariants (tests; O(size)).
    pub fn check(&self) {
        self.forward.check_invariants();
        for e in self.free.extents() {
            assert!(self.declared.is_free(e.0, e.1), "free blocks {e:?} are declared");
        }
        for e in self.region.extents() {
            assert!(self.declared.is_free(e.0, e.1), "region blocks {e:?} are declared");
        }
        let mut rev_blocks = 0;
        for r in &self.reverse {
            r.check_invariants();
            rev_blocks += r.mapped_blocks();
        }
        assert_eq!(rev_blocks, self.forward.mapped_blocks(), "forward and reverse hold the same pairs");
        for e in self.forward.iter() {
            assert!(self.region.is_free(e.start, e.length), "replica {e:?} lives in the region");
            assert!(self.free.free_parts(e.start, e.length).is_empty(), "replica {e:?} is not free");
            let back = self.reverse[e.value.layer as usize].get(e.value.orig);
            assert_eq!(back, Some(e.start), "reverse of {e:?}");
        }
    }
}
