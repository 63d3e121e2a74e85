//! The `log` target's map (`SlotMap`, groups held as runs or flat) against
//! the flat map (the same type with `extents` off: every group flat) and
//! a plain `Vec<u32>`, under random sequences of sequential writes, single
//! block updates and trims: every lookup and every walk of mapped blocks
//! agrees, the representation stays canonical (runs sorted, disjoint,
//! maximal; run counts right), and it never holds more than the flat map.

use layoutd_targets::log::map::{SlotMap, GROUP_BLOCKS, UNMAPPED};
use proptest::prelude::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

#[derive(Clone, Debug)]
enum Op {
    /// Blocks `start..start + length` into slots `sid..` (a sequential write).
    Seq { start: u64, length: u64, sid: u32 },
    /// One block into one slot.
    One { block: u64, sid: u32 },
    /// Blocks `start..start + length` unmapped.
    Trim { start: u64, length: u64 },
}

const BLOCKS: u64 = 300;
const SLOTS: u32 = 1000;

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        2 => (0..BLOCKS, 1..80u64, 0..SLOTS - 80).prop_map(|(start, length, sid)| Op::Seq { start, length, sid }),
        4 => (0..BLOCKS, 0..SLOTS).prop_map(|(block, sid)| Op::One { block, sid }),
        1 => (0..BLOCKS, 1..100u64).prop_map(|(start, length)| Op::Trim { start, length }),
    ]
}

/// Applies `op` through `set(block, slot)`.
fn apply(op: &Op, mut set: impl FnMut(u64, u32)) {
    match *op {
        Op::Seq { start, length, sid } => {
            for i in 0..length.min(BLOCKS - start) {
                set(start + i, sid + i as u32);
            }
        }
        Op::One { block, sid } => set(block, sid),
        Op::Trim { start, length } => {
            for b in start..(start + length).min(BLOCKS) {
                set(b, UNMAPPED);
            }
        }
    }
}

fn mapped(m: &SlotMap, start: u64, end: u64) -> Vec<(u64, u32)> {
    let mut v = Vec::new();
    m.for_each_mapped(start..end, |b, s| v.push((b, s)));
    v
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn the_map_with_extents_answers_as_the_flat_map(
        ops in prop::collection::vec(op(), 1..120),
        group_shift in 2u32..8,
        walk in (0..BLOCKS + 10, 0..BLOCKS + 10),
    ) {
        let group_blocks = 1u64 << group_shift;
        let mut m = SlotMap::with_groups(BLOCKS, SLOTS, group_blocks, true);
        let mut flat = SlotMap::with_groups(BLOCKS, SLOTS, group_blocks, false);
        let mut model = vec![UNMAPPED; BLOCKS as usize];
        let flat_ram = flat.ram_bytes();
        for op in &ops {
            apply(op, |b, s| m.set(b, s));
            apply(op, |b, s| flat.set(b, s));
            apply(op, |b, s| model[b as usize] = s);
            m.check_invariants();
            prop_assert!(m.ram_bytes() <= flat_ram, "{} bytes with extents, {} flat", m.ram_bytes(), flat_ram);
            prop_assert_eq!(flat.ram_bytes(), flat_ram);
        }
        flat.check_invariants();
        for b in 0..BLOCKS {
            prop_assert_eq!(m.get(b), model[b as usize], "block {}", b);
            prop_assert_eq!(flat.get(b), model[b as usize], "block {} flat", b);
        }
        let (a, z) = (walk.0.min(walk.1), walk.0.max(walk.1));
        let want: Vec<(u64, u32)> = (a..z.min(BLOCKS))
            .filter(|&b| model[b as usize] != UNMAPPED)
            .map(|b| (b, model[b as usize]))
            .collect();
        prop_assert_eq!(mapped(&m, a, z), want.clone());
        prop_assert_eq!(mapped(&flat, a, z), want);
    }
}

/// Sequential data costs a few runs a group; random updates turn groups
/// flat (never more than the flat map); trimming everything frees it all.
#[test]
fn sequential_data_is_held_in_runs_and_random_updates_in_flat_groups() {
    let blocks = 64 * GROUP_BLOCKS;
    let slots = (blocks * 10 / 9) as u32;
    let mut m = SlotMap::new(blocks, slots, true);
    let flat_ram = SlotMap::new(blocks, slots, false).ram_bytes();
    let empty_ram = m.ram_bytes();
    for b in 0..blocks {
        m.set(b, b as u32 + 7);
    }
    m.check_invariants();
    assert_eq!((m.flat_group_count(), m.run_count()), (0, m.group_count()));
    assert_eq!(m.ram_bytes(), empty_ram + 8 * m.group_count());
    // A seeded permutation of a third of the blocks into the spare slots
    // and back: every group holds more runs than it may.
    let mut rng = ChaCha8Rng::seed_from_u64(24);
    for i in 0..blocks / 3 {
        let b = rng.gen_range(0..blocks);
        let spare = blocks + 7 + i % (u64::from(slots) - blocks - 7);
        m.set(b, spare as u32);
    }
    m.check_invariants();
    assert_eq!(m.flat_group_count(), m.group_count());
    assert_eq!(m.ram_bytes(), flat_ram);
    // Written back in order: the groups turn back into runs.
    for b in 0..blocks {
        m.set(b, b as u32);
    }
    m.check_invariants();
    assert_eq!((m.flat_group_count(), m.run_count()), (0, m.group_count()));
    for b in 0..blocks {
        m.set(b, UNMAPPED);
    }
    m.check_invariants();
    assert_eq!((m.ram_bytes(), m.run_count()), (empty_ram, 0));
}
