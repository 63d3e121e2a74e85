//! Per data chunk: how many volumes map it (its share count) and at which
//! lc (the reverse map). Every sharer of a data chunk maps it at the same
//! lc, so one lc per chunk names all of them: with it the defragmenter
//! can move whatever lies between a copy and its origin chunk
//! ([`super::Pool`]'s shift plans). 6 bytes of RAM per data chunk.

use crate::blockmap::BlockMap;

/// The lc of a chunk no volume maps.
const NO_LC: u32 = u32::MAX;

/// The most chunks a volume may have: an lc fits the reverse map's 32 bits
/// (with [`NO_LC`] left over).
pub const VOLUME_CHUNKS_MAX: u64 = NO_LC as u64;

/// Share counts and the reverse map; see the module docs.
#[derive(Debug, PartialEq, Eq)]
pub struct ChunkTable {
    refs: Vec<u16>,
    lcs: Vec<u32>,
}

impl ChunkTable {
    /// `chunks` data chunks, none mapped.
    pub fn new(chunks: u64) -> ChunkTable {
        ChunkTable { refs: vec![0; chunks as usize], lcs: vec![NO_LC; chunks as usize] }
    }

    /// How many volumes map `p`.
    pub fn refs(&self, p: u64) -> u16 {
        self.refs[p as usize]
    }

    /// The lc every volume that maps `p` maps it at; `None` if none does.
    pub fn lc(&self, p: u64) -> Option<u64> {
        let l = self.lcs[p as usize];
        (l != NO_LC).then_some(u64::from(l))
    }

    /// `p`, mapped by none, is now mapped by `sharers` volumes at `lc`.
    pub fn map(&mut self, p: u64, lc: u64, sharers: u16) {
        assert!(lc < VOLUME_CHUNKS_MAX, "lc {lc} past the reverse map's range");
        assert_eq!(self.refs[p as usize], 0, "data chunk {p} mapped twice");
        self.refs[p as usize] = sharers;
        self.lcs[p as usize] = if sharers > 0 { lc as u32 } else { NO_LC };
    }

    /// One more volume maps `p`, at the lc it has.
    pub fn share(&mut self, p: u64) {
        assert!(self.refs[p as usize] > 0, "sharing the unmapped chunk {p}");
        self.refs[p as usize] += 1;
    }

    /// One volume fewer maps `p`; the volumes left.
    pub fn unshare(&mut self, p: u64) -> u16 {
        let r = &mut self.refs[p as usize];
        *r = r.checked_sub(1).expect("unsharing an unmapped chunk");
        if *r == 0 {
            self.lcs[p as usize] = NO_LC;
        }
        *r
    }

    /// The table the maps give (a census); `Err((i, lc, p, other))` if
    /// map `i` maps `lc` to data chunk `p`, which another maps at `other`.
    pub fn census<'a>(
        chunks: u64,
        maps: impl Iterator<Item = &'a BlockMap<u64>>,
    ) -> Result<ChunkTable, (usize, u64, u64, u64)> {
        let mut t = ChunkTable::new(chunks);
        for (i, map) in maps.enumerate() {
            for e in map.iter() {
                for k in 0..e.length {
                    let (lc, p) = (e.start + k, e.value + k);
                    match t.lc(p) {
                        None => t.map(p, lc, 1),
                        Some(l) if l == lc => t.share(p),
                        Some(l) => return Err((i, lc, p, l)),
                    }
                }
            }
        }
        Ok(t)
    }

    /// Data chunks mapped by more than one volume.
    pub fn shared_count(&self) -> u64 {
        self.refs.iter().filter(|&&r| r > 1).count() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    #[derive(Debug, Clone)]
    enum Op {
        Map { p: u64, lc: u64, sharers: u16 },
        Share(u64),
        Unshare(u64),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0..64u64, 0..1000u64, 1..4u16).prop_map(|(p, lc, sharers)| Op::Map { p, lc, sharers }),
            (0..64u64).prop_map(Op::Share),
            (0..64u64).prop_map(Op::Unshare),
        ]
    }

    proptest! {
        /// Against a model (data chunk -> (lc, sharers)): the table's
        /// counts and lcs agree after any sequence of valid operations.
        #[test]
        fn the_table_agrees_with_a_model(ops in proptest::collection::vec(op(), 0..300)) {
            let mut t = ChunkTable::new(64);
            let mut model: BTreeMap<u64, (u64, u16)> = BTreeMap::new();
            for op in ops {
                match op {
                    Op::Map { p, lc, sharers } if !model.contains_key(&p) => {
                        t.map(p, lc, sharers);
                        model.insert(p, (lc, sharers));
                    }
                    Op::Share(p) if model.contains_key(&p) => {
                        t.share(p);
                        model.get_mut(&p).expect("in").1 += 1;
                    }
                    Op::Unshare(p) if model.contains_key(&p) => {
                        let e = model.get_mut(&p).expect("in");
                        e.1 -= 1;
                        let left = e.1;
                        if left == 0 {
                            model.remove(&p);
                        }
                        prop_assert_eq!(t.unshare(p), left);
                    }
                    _ => {}
                }
                for p in 0..64 {
                    let want = model.get(&p);
                    prop_assert_eq!(t.lc(p), want.map(|e| e.0), "lc of {}", p);
                    prop_assert_eq!(t.refs(p), want.map_or(0, |e| e.1), "refs of {}", p);
                }
                let shared = model.values().filter(|e| e.1 > 1).count() as u64;
                prop_assert_eq!(t.shared_count(), shared);
            }
        }
    }
}
