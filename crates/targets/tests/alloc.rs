//! The allocator under random sequences of allocations and releases, with
//! each placement policy, against a per-unit model: no unit is ever handed
//! out twice, the free count and free extents always match the model, what
//! a policy returns is free and of the asked length, and releasing
//! everything leaves one whole free extent (no leak). The range operations
//! (`take_range`, `release_range`: whatever part is free or used) against
//! the same model.

use layoutd_targets::alloc::{FreeSpace, Largest, Nearest, NextFit, Placement, SegmentRing};
use proptest::prelude::*;
use std::collections::VecDeque;

const UNITS: u64 = 300;

#[derive(Clone, Debug)]
enum Op {
    Alloc {
        length: u64,
        hint: u64,
    },
    /// Release the `k`-th live allocation (modulo their count).
    Release {
        k: usize,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (1..40u64, 0..UNITS).prop_map(|(length, hint)| Op::Alloc { length, hint }),
        2 => any::<usize>().prop_map(|k| Op::Release { k }),
    ]
}

fn policy(i: usize) -> Box<dyn Placement> {
    match i {
        0 => Box::new(NextFit::default()),
        1 => Box::new(Nearest),
        _ => Box::new(Largest),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn no_double_allocation_and_no_leak(which in 0..3usize, ops in prop::collection::vec(op(), 1..80)) {
        let mut placement = policy(which);
        let mut f = FreeSpace::new(UNITS);
        let mut used = vec![false; UNITS as usize];
        let mut live: Vec<(u64, u64)> = Vec::new();
        for op in ops {
            match op {
                Op::Alloc { length, hint } => {
                    let longest_free_run = {
                        let (mut best, mut run) = (0u64, 0u64);
                        for &u in &used {
                            run = if u { 0 } else { run + 1 };
                            best = best.max(run);
                        }
                        best
                    };
                    match f.allocate(length, hint, &mut *placement) {
                        Some(start) => {
                            for u in start..start + length {
                                prop_assert!(!used[u as usize], "unit {} handed out twice", u);
                                used[u as usize] = true;
                            }
                            live.push((start, length));
                        }
                        None => prop_assert!(longest_free_run < length, "refused {} units with a free run of {}", length, longest_free_run),
                    }
                }
                Op::Release { k } if !live.is_empty() => {
                    let (start, length) = live.swap_remove(k % live.len());
                    f.release(start, length);
                    for u in start..start + length {
                        used[u as usize] = false;
                    }
                }
                Op::Release { .. } => {}
            }
            prop_assert_eq!(f.free_units(), used.iter().filter(|&&u| !u).count() as u64);
            // The free extents are exactly the model's maximal free runs.
            let mut runs = Vec::new();
            let mut u = 0u64;
            while u < UNITS {
                if used[u as usize] { u += 1; continue; }
                let s = u;
                while u < UNITS && !used[u as usize] { u += 1; }
                runs.push((s, u - s));
            }
            prop_assert_eq!(f.extents().collect::<Vec<_>>(), runs);
        }
        for (start, length) in live {
            f.release(start, length);
        }
        prop_assert_eq!(f.extents().collect::<Vec<_>>(), vec![(0, UNITS)]);
    }

    /// `take_range` / `release_range` over ranges that may be partly free,
    /// wholly free or wholly used, from an all-used or all-free start:
    /// each returns the units it changed, and the free extents stay the
    /// model's maximal free runs (merged, never adjacent).
    #[test]
    fn range_operations_match_a_per_unit_model(
        start_free in any::<bool>(),
        ops in prop::collection::vec((any::<bool>(), 0..UNITS + 20, 0..40u64), 1..120),
    ) {
        let mut f = if start_free { FreeSpace::new(UNITS) } else { FreeSpace::all_used(UNITS) };
        let mut free = vec![start_free; UNITS as usize];
        for (release, start, length) in ops {
            let end = (start + length).min(UNITS);
            let changed = (start.min(end)..end).filter(|&u| free[u as usize] != release).count() as u64;
            let got = if release { f.release_range(start, length) } else { f.take_range(start, length.min(UNITS.saturating_sub(start))) };
            prop_assert_eq!(got, changed);
            for u in start.min(end)..end {
                free[u as usize] = release;
            }
            prop_assert_eq!(f.free_units(), free.iter().filter(|&&u| u).count() as u64);
            let mut runs = Vec::new();
            let mut u = 0u64;
            while u < UNITS {
                if !free[u as usize] { u += 1; continue; }
                let s = u;
                while u < UNITS && free[u as usize] { u += 1; }
                runs.push((s, u - s));
            }
            prop_assert_eq!(f.extents().collect::<Vec<_>>(), runs);
        }
    }

    /// The ring (dcd's allocator) against a queue of live units: every
    /// allocation is a unit not live, in sequence order, refused only at
    /// the limit; giving back the oldest `k` frees exactly those; after
    /// giving back everything the whole ring is free again.
    #[test]
    fn the_ring_never_hands_out_a_live_unit(count in 1..20u64, start in 0..1000u64, ops in prop::collection::vec((any::<bool>(), 0..25u64, 0..25u64), 1..120)) {
        let mut r = SegmentRing::new(count, start, start);
        let mut live: VecDeque<(u64, u64)> = VecDeque::new();
        for (alloc, limit, k) in ops {
            if alloc {
                let limit = limit.min(count);
                match r.allocate(limit) {
                    Some((seq, unit)) => {
                        prop_assert!(live.iter().all(|&(_, u)| u != unit), "unit {} handed out while live", unit);
                        prop_assert_eq!(seq, live.back().map_or(r.tail(), |&(s, _)| s + 1), "sequence order");
                        prop_assert!(unit < count);
                        live.push_back((seq, unit));
                    }
                    None => prop_assert!(live.len() as u64 >= limit, "refused with {} live under a limit of {}", live.len(), limit),
                }
            } else {
                let k = k.min(live.len() as u64);
                live.drain(..k as usize);
                r.release_below(live.front().map_or(r.head(), |&(s, _)| s));
            }
            prop_assert_eq!(r.in_use(), live.len() as u64);
            prop_assert_eq!(r.free_count(), count - live.len() as u64);
        }
        let head = r.head();
        r.release_below(head);
        prop_assert_eq!(r.free_count(), count);
    }
}
