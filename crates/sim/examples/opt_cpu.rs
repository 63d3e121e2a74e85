//! The real CPU cost of the `opt` target's analysis, planning and
//! indirection (a target reads no clock; this measures the same code from
//! outside): reads a layoutd trace, takes every read and write into the
//! analyzer, builds the master graph and plans, timing each stage and
//! relating it to the work units the target counts; then times the piece
//! walk over the plan's map (`opt::for_each_piece`, the indirection of
//! every request; with COPIES_MAX > 1 the plan is `plan_streams` and a
//! read takes the copy nearest to the stream's last read, `nearest_copy`,
//! as the target does): the fastest of many short passes (the cost without
//! preemption by other work) and their median.
//!
//!   cargo run --release -p layoutd-sim --example opt_cpu -- TRACE [CAPACITY_BLOCKS [COPIES_MAX [time]]]

use layoutd_core::TraceRecord;
use layoutd_targets::blockmap::BlockMap;
use layoutd_targets::opt::analyze::{
    master_graph, plan, plan_streams, Analyzer, Limits, ProfileEntry, StreamPlan, WEIGHT_UNIT,
};
use layoutd_targets::opt::{for_each_piece, nearest_copy};
use std::time::Instant;

/// Timed passes of the indirection over the whole trace.
const PASSES: usize = 200;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let path = args.get(1).expect("usage: opt_cpu TRACE [CAPACITY_BLOCKS]");
    let capacity: u64 = args.get(2).map_or(262_144, |c| c.parse().expect("a number"));
    let copies: u32 = args.get(3).map_or(1, |c| c.parse().expect("a number"));
    let text = std::fs::read_to_string(path).expect("readable trace");
    let entries: Vec<ProfileEntry> = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| TraceRecord::parse_line(l).ok())
        .filter(|r| r.length_bytes > 0)
        .map(|r| ProfileEntry {
            time_ns: r.submit.as_ns(),
            block: r.offset_bytes / 4096,
            blocks: ((r.offset_bytes + u64::from(r.length_bytes)).div_ceil(4096) - r.offset_bytes / 4096)
                as u32,
            stream: r.stream.0,
            read: r.op == layoutd_core::Op::Read,
        })
        .collect();
    let time_order = args.get(4).is_some_and(|o| o == "time");
    let limits =
        Limits { think_ns: 100_000_000, vertices_max: 65_536, edges_max: 262_144, sightings: time_order };
    let mut best = [f64::MAX; 3];
    let mut units = (0, 0);
    let mut ranges = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        let mut a = Analyzer::new(limits);
        for e in &entries {
            a.add(*e);
        }
        let t_analysis = t.elapsed().as_secs_f64();
        let t = Instant::now();
        let mut planning = 0;
        ranges = if copies > 1 {
            plan_streams(
                &a,
                &StreamPlan {
                    capacity_blocks: capacity,
                    weight_min: WEIGHT_UNIT,
                    copies_max: copies,
                    pad_blocks: 0,
                    place_written: true,
                    relay: false,
                    time_order,
                },
                &mut planning,
            )
        } else {
            let m = master_graph(&a, &mut planning);
            plan(&m, capacity, WEIGHT_UNIT, 1, false, &mut planning)
        };
        let t_planning = t.elapsed().as_secs_f64();
        units = (a.units, planning);
        best[0] = best[0].min(t_analysis);
        best[1] = best[1].min(t_planning);
    }
    // Layer 0: the primaries; layer k: the (k+1)-th copies.
    let (layers, slot) = layoutd_targets::opt::plan_layers(&ranges);
    let (map, extras) = layers.split_first().map_or((BlockMap::new(), &[][..]), |(m, x)| (m.clone(), x));
    // Slot -> home block (the target's slot table).
    let mut slot_home = vec![u64::MAX; slot as usize];
    for l in &layers {
        for e in l.iter() {
            (0..e.length).for_each(|i| slot_home[(e.value + i) as usize] = e.start + i);
        }
    }
    let home_of = |s: u64| slot_home.get(s as usize).copied().filter(|&h| h != u64::MAX);
    // One pass over the trace takes well under a scheduler time slice, so
    // the fastest of many passes is the walk's own cost on a machine that
    // other work preempts; the median shows how much that work costs.
    let mut pieces = 0usize;
    let mut passes = Vec::with_capacity(PASSES);
    for _ in 0..PASSES {
        let t = Instant::now();
        // As the target's reads: a mapped piece takes the copy nearest to
        // where the stream's last read ended.
        let mut last: std::collections::HashMap<u32, u64> = std::collections::HashMap::new();
        for e in &entries {
            let mut end = None;
            let l = last.get(&e.stream).copied();
            for_each_piece(&map, e.block, u64::from(e.blocks), |start, n, slot| {
                let Some(s) = slot else {
                    pieces += 1;
                    end = None;
                    return;
                };
                let mut pos = start;
                while pos < start + n {
                    let (at, k) = match (extras.is_empty(), end.or(l)) {
                        (false, Some(l)) => {
                            nearest_copy(home_of, extras, pos, start + n - pos, s + (pos - start), l, false)
                        }
                        _ => (s + (pos - start), start + n - pos),
                    };
                    pieces += 1;
                    end = Some(at + k);
                    pos += k;
                }
            });
            match end {
                Some(x) => last.insert(e.stream, x),
                None => last.remove(&e.stream),
            };
        }
        passes.push(t.elapsed().as_secs_f64() / entries.len() as f64);
    }
    std::hint::black_box(pieces);
    passes.sort_by(f64::total_cmp);
    best[2] = passes[0];
    let median = passes[PASSES / 2];
    println!(
        "{} requests; analysis {:.6} s ({} units, {:.1} ns/unit); planning {:.6} s ({} units, {:.1} ns/unit); \
         plan {} blocks in {} map runs; indirection {:.1} ns/request fastest of {PASSES} passes, {:.1} median \
         ({:.2} pieces/request)",
        entries.len(),
        best[0],
        units.0,
        best[0] * 1e9 / units.0 as f64,
        best[1],
        units.1,
        best[1] * 1e9 / units.1.max(1) as f64,
        slot,
        map.extent_count(),
        best[2] * 1e9,
        median * 1e9,
        pieces as f64 / (PASSES * entries.len()) as f64
    );
}
