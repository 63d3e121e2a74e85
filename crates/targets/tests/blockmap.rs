//! `BlockMap` against the obvious model, a `BTreeMap` from each block to its
//! location, under random sequences of inserts and removes: every query
//! agrees, what an insert or remove reports as replaced is exactly what the
//! model held there, and the representation stays canonical (no overlaps,
//! no mergeable neighbours), so sequential data costs one extent.

use layoutd_targets::blockmap::BlockMap;
use proptest::prelude::*;
use std::collections::BTreeMap;

#[derive(Clone, Debug)]
enum Op {
    Insert { start: u64, length: u64, value: u64 },
    Remove { start: u64, length: u64 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0..200u64, 1..40u64, prop_oneof![0..64u64, 1000..1064u64]).prop_map(|(start, length, value)| Op::Insert { start, length, value }),
        1 => (0..220u64, 0..60u64).prop_map(|(start, length)| Op::Remove { start, length }),
    ]
}

/// The model's blocks of `[start, start + length)` as `(block, value)`.
fn model_range(model: &BTreeMap<u64, u64>, start: u64, length: u64) -> Vec<(u64, u64)> {
    model.range(start..start + length).map(|(&b, &v)| (b, v)).collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn the_block_map_is_a_per_block_map(ops in prop::collection::vec(op(), 1..60)) {
        let mut m: BlockMap<u64> = BlockMap::new();
        let mut model: BTreeMap<u64, u64> = BTreeMap::new();
        for op in ops {
            let (start, length, replaced) = match op {
                Op::Insert { start, length, value } => {
                    let r = m.insert(start, length, value);
                    let before = model_range(&model, start, length);
                    for b in start..start + length {
                        model.insert(b, value + (b - start));
                    }
                    (start, length, (r, before))
                }
                Op::Remove { start, length } => {
                    let r = m.remove(start, length);
                    let before = model_range(&model, start, length);
                    for b in start..start + length {
                        model.remove(&b);
                    }
                    (start, length, (r, before))
                }
            };
            // What was replaced, block by block.
            let (got, want) = replaced;
            let got: Vec<(u64, u64)> =
                got.iter().flat_map(|e| (0..e.length).map(move |i| (e.start + i, e.value + i))).collect();
            prop_assert_eq!(got, want, "replaced in [{}, +{})", start, length);
            m.check_invariants();
            prop_assert_eq!(m.mapped_blocks(), model.len() as u64);
            for b in 0..260u64 {
                prop_assert_eq!(m.get(b), model.get(&b).copied(), "block {}", b);
            }
            // range() covers exactly and agrees.
            let pieces = m.range(5, 200);
            prop_assert_eq!(pieces.iter().map(|p| p.1).sum::<u64>(), 200);
            for (s, n, v) in pieces {
                for i in 0..n {
                    prop_assert_eq!(v.map(|v| v + i), model.get(&(s + i)).copied());
                }
            }
        }
        // Canonical: as many extents as the model has maximal runs.
        let mut runs = 0;
        let mut prev: Option<(u64, u64)> = None;
        for (&b, &v) in &model {
            if prev != Some((b.wrapping_sub(1), v.wrapping_sub(1))) {
                runs += 1;
            }
            prev = Some((b, v));
        }
        prop_assert_eq!(m.extent_count(), runs);
    }
}
