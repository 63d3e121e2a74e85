//! Dense replica maps: about 24 bytes per replicated block, whatever the
//! length of the reads that made them (the extent map costs about 80 bytes
//! per extent, so 80 per block for single-block reads).
//!
//! - [`Forward`]: replica block -> [`Rep`], in slabs of [`SLAB_BLOCKS`]
//!   blocks allocated when the first replica lands in one and freed when
//!   the last goes (replicas are written contiguously, so slabs fill):
//!   10 bytes per block (original `u32`, last use `u32`, age, layer/flags).
//! - [`HashLayer`]: original -> replica block, one hash entry per block
//!   (`u32` keys and values: 8 bytes plus the table's control byte and
//!   slack, 9–18 bytes per block).
//!
//! Both answer in extents ([`Extent`]) so callers read them as they would
//! a [`crate::blockmap::BlockMap`]. Block numbers are `u32`: the config
//! refuses volumes of 2^32 blocks or more.

use super::space::Rep;
use crate::blockmap::{Extent, MapValue};
use rustc_hash::FxHashMap;
use std::collections::BTreeMap;

/// Blocks per slab.
pub(crate) const SLAB_BLOCKS: u64 = 1024;
const NONE: u32 = u32::MAX;
const EVER_USED: u8 = 0x80;

struct Slab {
    orig: Box<[u32]>,
    used: Box<[u32]>,
    age: Box<[u8]>,
    /// layer (low 4 bits) | EVER_USED.
    flags: Box<[u8]>,
    count: u32,
}

impl Slab {
    fn new() -> Slab {
        let n = SLAB_BLOCKS as usize;
        Slab {
            orig: vec![NONE; n].into_boxed_slice(),
            used: vec![0; n].into_boxed_slice(),
            age: vec![0; n].into_boxed_slice(),
            flags: vec![0; n].into_boxed_slice(),
            count: 0,
        }
    }

    fn rep(&self, i: usize) -> Option<Rep> {
        (self.orig[i] != NONE).then(|| Rep {
            orig: u64::from(self.orig[i]),
            used: self.used[i],
            age: self.age[i],
            layer: self.flags[i] & 0x0F,
            ever_used: self.flags[i] & EVER_USED != 0,
        })
    }
}

/// Replica block -> original; see the module docs.
#[derive(Default)]
pub(crate) struct Forward {
    slabs: BTreeMap<u64, Slab>,
    mapped: u64,
}

/// Joins per-block values into extents (a run continues while the value
/// advances by one per block).
fn push_run(out: &mut Vec<Extent<Rep>>, block: u64, rep: Rep) {
    if let Some(last) = out.last_mut() {
        if last.start + last.length == block && last.value.advance(last.length) == rep {
            last.length += 1;
            return;
        }
    }
    out.push(Extent { start: block, length: 1, value: rep });
}

impl Forward {
    pub fn mapped_blocks(&self) -> u64 {
        self.mapped
    }

    /// Estimated bytes.
    pub fn bytes(&self) -> u64 {
        self.slabs.len() as u64 * (SLAB_BLOCKS * 10 + 64)
    }

    pub fn get(&self, block: u64) -> Option<Rep> {
        let s = self.slabs.get(&(block / SLAB_BLOCKS))?;
        s.rep((block % SLAB_BLOCKS) as usize)
    }

    /// The mapped extents within `[start, start + length)`, clipped, in order.
    pub fn overlapping(&self, start: u64, length: u64) -> Vec<Extent<Rep>> {
        let mut out = Vec::new();
        let end = start.saturating_add(length);
        if length == 0 {
            return out;
        }
        for (&si, s) in self.slabs.range(start / SLAB_BLOCKS..=(end - 1) / SLAB_BLOCKS) {
            let base = si * SLAB_BLOCKS;
            let (a, b) = (start.max(base), end.min(base + SLAB_BLOCKS));
            for block in a..b {
                if let Some(r) = s.rep((block - base) as usize) {
                    push_run(&mut out, block, r);
                }
            }
        }
        out
    }

    /// `[start, start + length)` piece by piece, mapped or not.
    pub fn range(&self, start: u64, length: u64) -> Vec<(u64, u64, Option<Rep>)> {
        crate::blockmap::with_gaps(self.overlapping(start, length), start, length)
    }

    /// Every extent, in address order.
    pub fn iter(&self) -> impl Iterator<Item = Extent<Rep>> + '_ {
        self.slabs.keys().flat_map(move |&si| self.overlapping(si * SLAB_BLOCKS, SLAB_BLOCKS))
    }

    /// Maps `[start, start + length)` to `rep` onwards (replacing).
    pub fn insert(&mut self, start: u64, length: u64, rep: Rep) {
        for i in 0..length {
            let block = start + i;
            let r = rep.advance(i);
            let orig = u32::try_from(r.orig).ok().filter(|&o| o != NONE).expect("originals fit 32 bits");
            let s = self.slabs.entry(block / SLAB_BLOCKS).or_insert_with(Slab::new);
            let j = (block % SLAB_BLOCKS) as usize;
            if s.orig[j] == NONE {
                s.count += 1;
                self.mapped += 1;
            }
            s.orig[j] = orig;
            s.used[j] = r.used;
            s.age[j] = r.age;
            s.flags[j] = (r.layer & 0x0F) | if r.ever_used { EVER_USED } else { 0 };
        }
    }

    /// Unmaps `[start, start + length)`; returns what was there.
    pub fn remove(&mut self, start: u64, length: u64) -> Vec<Extent<Rep>> {
        let removed = self.overlapping(start, length);
        for e in &removed {
            for block in e.start..e.start + e.length {
                let si = block / SLAB_BLOCKS;
                let s = self.slabs.get_mut(&si).expect("mapped");
                s.orig[(block % SLAB_BLOCKS) as usize] = NONE;
                s.count -= 1;
                self.mapped -= 1;
                if s.count == 0 {
                    self.slabs.remove(&si);
                }
            }
        }
        removed
    }

    /// Checks the counts (tests).
    pub fn check_invariants(&self) {
        let mut total = 0;
        for s in self.slabs.values() {
            let n = s.orig.iter().filter(|&&o| o != NONE).count() as u32;
            assert_eq!(n, s.count, "slab count");
            assert!(n > 0, "no empty slab is kept");
            total += u64::from(n);
        }
        assert_eq!(total, self.mapped, "mapped count");
    }
}

/// Original -> replica block for one layer; see the module docs.
#[derive(Default)]
pub(crate) struct HashLayer {
    map: FxHashMap<u32, u32>,
}

fn key(b: u64) -> u32 {
    u32::try_from(b).ok().filter(|&k| k != NONE).expect("block numbers fit 32 bits")
}

impl HashLayer {
    pub fn mapped_blocks(&self) -> u64 {
        self.map.len() as u64
    }

    /// Estimated bytes (entries, control bytes, empty slots).
    pub fn bytes(&self) -> u64 {
        self.map.capacity() as u64 * 9
    }

    pub fn get(&self, orig: u64) -> Option<u64> {
        self.map.get(&key(orig)).map(|&l| u64::from(l))
    }

    /// The mapped runs within `[start, start + length)`, in order.
    pub fn overlapping(&self, start: u64, length: u64) -> Vec<Extent<u64>> {
        let mut out: Vec<Extent<u64>> = Vec::new();
        if self.map.is_empty() {
            return out;
        }
        for b in start..start + length {
            let Some(loc) = self.get(b) else { continue };
            match out.last_mut() {
                Some(e) if e.start + e.length == b && e.value + e.length == loc => e.length += 1,
                _ => out.push(Extent { start: b, length: 1, value: loc }),
            }
        }
        out
    }

    pub fn insert(&mut self, start: u64, length: u64, loc: u64) {
        for i in 0..length {
            self.map.insert(key(start + i), key(loc + i));
        }
    }

    pub fn remove(&mut self, start: u64, length: u64) -> Vec<Extent<u64>> {
        let removed = self.overlapping(start, length);
        for e in &removed {
            for b in e.start..e.start + e.length {
                self.map.remove(&key(b));
            }
        }
        if self.map.capacity() > 64 && self.map.len() * 4 < self.map.capacity() {
            self.map.shrink_to_fit();
        }
        removed
    }

    pub fn check_invariants(&self) {
        assert!(self.map.keys().all(|&k| k != NONE));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

        /// Both maps behave as per-block maps, whatever the extents.
        #[test]
        fn dense_maps_match_a_per_block_model(
            ops in prop::collection::vec((any::<bool>(), 0u64..3000, 1u64..40, 0u64..100_000, 0u32..9), 1..80)
        ) {
            let (mut f, mut h) = (Forward::default(), HashLayer::default());
            let (mut fm, mut hm) = (BTreeMap::new(), BTreeMap::new());
            for (insert, start, n, orig, used) in ops {
                if insert {
                    let rep = Rep { orig, used, age: (used % 3) as u8, layer: (used % 4) as u8, ever_used: used % 2 == 0 };
                    f.insert(start, n, rep);
                    h.insert(orig, n, start);
                    for i in 0..n {
                        fm.insert(start + i, rep.advance(i));
                        hm.insert(orig + i, start + i);
                    }
                } else {
                    let got: u64 = f.remove(start, n).iter().map(|e| e.length).sum();
                    let want = (start..start + n).filter(|b| fm.remove(b).is_some()).count() as u64;
                    prop_assert_eq!(got, want);
                    let got: u64 = h.remove(start, n).iter().map(|e| e.length).sum();
                    let want = (start..start + n).filter(|b| hm.remove(b).is_some()).count() as u64;
                    prop_assert_eq!(got, want);
                }
                f.check_invariants();
                prop_assert_eq!(f.mapped_blocks(), fm.len() as u64);
                prop_assert_eq!(h.mapped_blocks(), hm.len() as u64);
            }
            let mut blocks = 0;
            for e in f.iter() {
                for i in 0..e.length {
                    prop_assert_eq!(fm.get(&(e.start + i)), Some(&e.value.advance(i)));
                }
                blocks += e.length;
            }
            prop_assert_eq!(blocks, fm.len() as u64);
            for (&o, &l) in &hm {
                prop_assert_eq!(h.get(o), Some(l));
            }
        }
    }
}
