//! The overlap gate under random submissions and completions (completed in
//! random order, as a device may): two overlapping writes are never in
//! flight together, overlapping writes are issued in submission order, a
//! write that overlaps nothing earlier is never held, and everything is
//! issued once everything has completed.

use layoutd_targets::gate::OverlapGate;
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Step {
    Submit {
        start: u64,
        length: u64,
    },
    /// Complete the `k`-th in-flight request (modulo their count).
    Complete {
        k: usize,
    },
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        (0..100u64, 1..20u64).prop_map(|(start, length)| Step::Submit { start, length }),
        any::<usize>().prop_map(|k| Step::Complete { k }),
    ]
}

fn overlaps((a, b): (u64, u64), (c, d): (u64, u64)) -> bool {
    a < d && c < b
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn overlapping_writes_are_serialized_in_order_and_others_pass(steps in prop::collection::vec(step(), 1..120)) {
        let mut gate: OverlapGate<usize> = OverlapGate::new();
        let mut ranges: Vec<(u64, u64)> = Vec::new(); // by submission index
        let mut in_flight: Vec<(u64, usize)> = Vec::new(); // (lower id, item)
        let mut issued_order: Vec<usize> = Vec::new();
        let mut next_id = 0u64;
        let mut issue = |item: usize, gate: &mut OverlapGate<usize>, ranges: &Vec<(u64, u64)>,
                         in_flight: &mut Vec<(u64, usize)>, issued_order: &mut Vec<usize>| {
            for &(_, other) in in_flight.iter() {
                assert!(!overlaps(ranges[item], ranges[other]), "items {item} and {other} overlap in flight");
            }
            gate.issued(next_id, ranges[item]);
            in_flight.push((next_id, item));
            next_id += 1;
            issued_order.push(item);
        };
        let drain = |gate: &mut OverlapGate<usize>, ranges: &Vec<(u64, u64)>, in_flight: &mut Vec<(u64, usize)>,
                     issued_order: &mut Vec<usize>, issue: &mut dyn FnMut(usize, &mut OverlapGate<usize>, &Vec<(u64, u64)>, &mut Vec<(u64, usize)>, &mut Vec<usize>)| {
            while let Some((_, item)) = gate.pop_ready() {
                issue(item, gate, ranges, in_flight, issued_order);
            }
        };
        for s in steps {
            match s {
                Step::Submit { start, length } => {
                    let item = ranges.len();
                    ranges.push((start, start + length));
                    let blocked_by_flight = in_flight.iter().any(|&(_, o)| overlaps(ranges[o], ranges[item]));
                    let queued_before: Vec<usize> =
                        (0..item).filter(|i| !issued_order.contains(i)).collect();
                    let blocked_by_queue = queued_before.iter().any(|&o| overlaps(ranges[o], ranges[item]));
                    match gate.submit(ranges[item], item) {
                        Some(i) => {
                            prop_assert!(!blocked_by_flight && !blocked_by_queue, "item {} passed an overlap", item);
                            issue(i, &mut gate, &ranges, &mut in_flight, &mut issued_order);
                        }
                        None => prop_assert!(blocked_by_flight || blocked_by_queue, "item {} held for nothing", item),
                    }
                }
                Step::Complete { k } if !in_flight.is_empty() => {
                    let (id, _) = in_flight.swap_remove(k % in_flight.len());
                    prop_assert!(gate.completed(id));
                    drain(&mut gate, &ranges, &mut in_flight, &mut issued_order, &mut issue);
                }
                Step::Complete { .. } => {}
            }
        }
        while let Some((id, _)) = in_flight.pop() {
            prop_assert!(gate.completed(id));
            drain(&mut gate, &ranges, &mut in_flight, &mut issued_order, &mut issue);
        }
        prop_assert_eq!(gate.waiting_count(), 0, "everything issued in the end");
        prop_assert_eq!(issued_order.len(), ranges.len());
        // Overlapping items were issued in submission order.
        for (x, &a) in issued_order.iter().enumerate() {
            for &b in &issued_order[x + 1..] {
                if overlaps(ranges[a], ranges[b]) {
                    prop_assert!(a < b, "item {} issued before overlapping item {}", b, a);
                }
            }
        }
    }
}
