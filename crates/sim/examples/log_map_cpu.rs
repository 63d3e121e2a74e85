//! The CPU cost and RAM of the `log` target's map (`log::map::SlotMap`),
//! with extents (groups of runs or flat entries) against the flat map
//! (`map_extents = false`), measured from outside (a target reads no
//! clock): a sequential fill of every block, lookups in block order and at
//! random, then random single-block updates into fresh slots (the log's
//! random-update phase: every write goes to the next slot), lookups again,
//! and a walk of every mapped block (the cleaner's map scan and recovery's
//! rebuild); and for comparison the same sets and random lookups on one
//! `Packed` entry a block (the map before session 24). Each timing is the fastest of `PASSES` passes over the same
//! operations (the cost without preemption by other work; the map ends in
//! the same state after each pass), in ns per operation; RAM is the map's
//! own count (`SlotMap::ram_bytes`) per mapped block.
//!
//!   cargo run --release -p layoutd-sim --example log_map_cpu -- [BLOCKS [UPDATES]]
//!
//! Defaults: 4,194,304 blocks (a 16 GiB volume of 4 KiB blocks) and as many
//! updates as blocks; slots = blocks / 0.9 (10% over-provisioning).

use layoutd_targets::log::map::{Packed, SlotMap, UNMAPPED};
use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::hint::black_box;
use std::time::Instant;

const PASSES: usize = 3;

/// The fastest of `PASSES` runs of `f` (which does `ops` operations), in
/// ns per operation; `f` gets a fresh copy of `m` each pass, and the last
/// pass's map is kept.
fn fastest(m: &mut SlotMap, ops: u64, mut f: impl FnMut(&mut SlotMap)) -> f64 {
    let mut best = f64::MAX;
    let start_state = m.clone();
    for _ in 0..PASSES {
        *m = start_state.clone();
        let t = Instant::now();
        f(m);
        best = best.min(t.elapsed().as_nanos() as f64 / ops as f64);
    }
    best
}

fn lookups(m: &mut SlotMap, blocks: &[u64]) -> f64 {
    fastest(m, blocks.len() as u64, |m| {
        let mut acc = 0u64;
        for &b in blocks {
            acc = acc.wrapping_add(u64::from(m.get(b)));
        }
        black_box(acc);
    })
}

fn walk(m: &mut SlotMap) -> f64 {
    let n = m.len();
    fastest(m, n, |m| {
        let mut acc = 0u64;
        m.for_each_mapped(0..n, |b, s| acc = acc.wrapping_add(b ^ u64::from(s)));
        black_box(acc);
    })
}

fn ram_per_block(m: &SlotMap, mapped: u64) -> f64 {
    m.ram_bytes() as f64 / mapped as f64
}

fn run(blocks: u64, updates: u64, extents: bool) {
    let slots = (blocks * 10 / 9) as u32;
    let mut m = SlotMap::new(blocks, slots, extents);
    let name = if extents { "extents" } else { "flat" };
    let in_order: Vec<u64> = (0..blocks).collect();
    let mut rng = ChaCha8Rng::seed_from_u64(24);
    let random: Vec<u64> = (0..blocks).map(|_| rng.next_u64() % blocks).collect();
    let fill = fastest(&mut m, blocks, |m| {
        for b in 0..blocks {
            m.set(b, b as u32);
        }
    });
    let seq_ram = ram_per_block(&m, blocks);
    let (get_seq, get_rand, walk_seq) = (lookups(&mut m, &in_order), lookups(&mut m, &random), walk(&mut m));
    println!(
        "{name:8} sequential fill: set {fill:6.1} ns, get in order {get_seq:5.1} ns, get random {get_rand:5.1} ns, \
         walk {walk_seq:5.1} ns a block; {seq_ram:.3} B a mapped block ({} of {} groups flat)",
        m.flat_group_count(),
        m.group_count()
    );
    // Random updates, each into the next slot (wrapping over the slots;
    // a slot still holding another block is not a concern of the map).
    let targets: Vec<u64> = (0..updates).map(|_| rng.next_u64() % blocks).collect();
    let upd = fastest(&mut m, updates, |m| {
        for (i, &b) in targets.iter().enumerate() {
            m.set(b, ((blocks + i as u64) % u64::from(slots)) as u32);
        }
    });
    assert!(m.get(targets[0]) != UNMAPPED);
    let rand_ram = ram_per_block(&m, blocks);
    let (get_seq, get_rand, walk_rand) = (lookups(&mut m, &in_order), lookups(&mut m, &random), walk(&mut m));
    println!(
        "{name:8} {updates} random updates: set {upd:6.1} ns, get in order {get_seq:5.1} ns, get random \
         {get_rand:5.1} ns, walk {walk_rand:5.1} ns a block; {rand_ram:.3} B a mapped block ({} of {} groups flat)",
        m.flat_group_count(),
        m.group_count()
    );
}

/// The map before session 24 for comparison: one packed entry a block
/// (`Packed`), no groups, no run counts.
fn run_packed(blocks: u64, updates: u64) {
    let slots = blocks * 10 / 9;
    let width = 64 - slots.leading_zeros();
    let mut m = Packed::new(blocks, width, true);
    let mut rng = ChaCha8Rng::seed_from_u64(24);
    let random: Vec<u64> = (0..blocks).map(|_| rng.next_u64() % blocks).collect();
    let time = |m: &mut Packed, ops: u64, f: &dyn Fn(&mut Packed)| {
        let mut best = f64::MAX;
        for _ in 0..PASSES {
            let t = Instant::now();
            f(m);
            best = best.min(t.elapsed().as_nanos() as f64 / ops as f64);
        }
        best
    };
    let fill = time(&mut m, blocks, &|m| (0..blocks).for_each(|b| m.set(b, b)));
    let get = |m: &mut Packed| {
        time(m, blocks, &|m| {
            black_box(random.iter().fold(0u64, |a, &b| a.wrapping_add(m.get(b))));
        })
    };
    let get_fill = get(&mut m);
    let targets: Vec<u64> = (0..updates).map(|_| rng.next_u64() % blocks).collect();
    let upd = time(&mut m, updates, &|m| {
        for (i, &b) in targets.iter().enumerate() {
            m.set(b, (blocks + i as u64) % slots);
        }
    });
    let get_upd = get(&mut m);
    println!(
        "packed   sequential fill: set {fill:6.1} ns, get random {get_fill:5.1} ns; {updates} random updates: set \
         {upd:6.1} ns, get random {get_upd:5.1} ns; {:.3} B a block",
        m.ram_bytes() as f64 / blocks as f64
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let blocks: u64 = args.get(1).map_or(1 << 22, |a| a.parse().expect("BLOCKS: a number"));
    let updates: u64 = args.get(2).map_or(blocks, |a| a.parse().expect("UPDATES: a number"));
    for extents in [true, false] {
        run(blocks, updates, extents);
    }
    run_packed(blocks, updates);
}
