//! How well a plan lays out the accesses it was trained for: trains the
//! `opt` analyzer on a trace's requests before TRAIN_NS, plans, and for the
//! later reads reports how many start exactly where the same stream's
//! previous read ended in the region (sequential), how many land in the
//! region at all, and how far the others jump.
//!
//!   cargo run --release -p layoutd-sim --example opt_layout -- TRACE TRAIN_NS [COPIES_MAX [follow]]
//!
//! With COPIES_MAX > 1 a block may sit in several places (the target's
//! extra copies); a read takes the copy nearest to where the stream's last
//! read ended, as the target does. `follow`: the plan's `follow_streams`.

use layoutd_core::TraceRecord;
use layoutd_targets::opt::analyze::{master_graph, plan, Analyzer, Limits, ProfileEntry, WEIGHT_UNIT};
use std::collections::HashMap;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let path = args.get(1).expect("usage: opt_layout TRACE TRAIN_NS");
    let train: u64 = args.get(2).expect("TRAIN_NS").parse().expect("a number");
    let text = std::fs::read_to_string(path).expect("readable trace");
    let recs: Vec<(bool, ProfileEntry)> = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| TraceRecord::parse_line(l).ok())
        .filter(|r| r.length_bytes > 0)
        .map(|r| {
            let block = r.offset_bytes / 4096;
            let end = (r.offset_bytes + u64::from(r.length_bytes)).div_ceil(4096);
            let e = ProfileEntry {
                time_ns: r.submit.as_ns(),
                block,
                blocks: (end - block) as u32,
                stream: r.stream.0,
                read: r.op == layoutd_core::Op::Read,
            };
            (r.op == layoutd_core::Op::Read, e)
        })
        .collect();
    let t0 = recs.first().map_or(0, |r| r.1.time_ns);
    let limits = Limits { think_ns: 100_000_000, vertices_max: 65_536, edges_max: 262_144, sightings: false };
    let mut a = Analyzer::new(limits);
    for (_, e) in recs.iter().filter(|r| r.1.time_ns - t0 < train) {
        a.add(*e);
    }
    let mut units = 0;
    let m = master_graph(&a, &mut units);
    let copies: u32 = args.get(3).map_or(1, |c| c.parse().expect("COPIES_MAX"));
    let follow = args.get(4).is_some_and(|f| f == "follow");
    let ranges = plan(&m, 262_144, WEIGHT_UNIT, copies, follow, &mut units);
    // Layer k: the (k+1)-th copy of each block.
    let (layers, slot) = layoutd_targets::opt::plan_layers(&ranges);
    let map = &layers[0];
    let (mut reads, mut mapped, mut seq, mut near) = (0, 0, 0, 0);
    let mut last: HashMap<u32, u64> = HashMap::new();
    for (_, e) in recs.iter().filter(|r| r.0 && r.1.time_ns - t0 >= train) {
        reads += 1;
        let pieces = map.range(e.block, u64::from(e.blocks));
        if pieces.iter().all(|p| p.2.is_some()) {
            mapped += 1;
            // The copy of the first block nearest the stream's last end.
            let l = last.get(&e.stream).copied();
            let first = layers
                .iter()
                .filter_map(|m| m.get(e.block))
                .min_by_key(|&s| l.map_or(0, |l| s.abs_diff(l)))
                .expect("mapped");
            match last.get(&e.stream) {
                Some(&l) if l == first => seq += 1,
                Some(&l) if l.abs_diff(first) <= 64 => near += 1,
                Some(&l) if std::env::var("SHOW").is_ok() => {
                    println!(
                        "break: stream {} read {:?} at slot {first}, previous ended at slot {l}",
                        e.stream,
                        (e.block, e.block + u64::from(e.blocks))
                    )
                }
                _ => {}
            }
            // Where the read ends: the copy of its last block nearest to
            // its first one's.
            let end = e.block + u64::from(e.blocks) - 1;
            let at = layers
                .iter()
                .filter_map(|m| m.get(end))
                .min_by_key(|&s| s.abs_diff(first + u64::from(e.blocks) - 1))
                .expect("mapped");
            last.insert(e.stream, at + 1);
        } else {
            last.remove(&e.stream);
        }
    }
    println!(
        "plan {} blocks in {} ranges; later reads {reads}: wholly mapped {mapped}, sequential {seq}, within 64 blocks {near}",
        slot,
        ranges.len()
    );
}
