//! The `opt` target: the oracle and crash checks with a tiny OPT region and
//! frequent reconfigurations, each in-flight conflict driven by hand,
//! recovery after a crash, a corrupt map, and bad configs.

use layoutd_core::{Op, OpenMode, ReqId, Request, StreamId, Target};
use layoutd_disk::{BlockDevice, MemDevice};
use layoutd_runtime::det::{Harness, ZeroLatency};
use layoutd_runtime::testkit::{
    bring_up, crash_check_idle_with, oracle_check_idle_with, stack_from_toml, OpSpec,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::sync::Arc;

const DEVICE_BYTES: u64 = 1 << 20;
const B: u64 = 4096;

/// A 96 KiB region (20 slots of 4 KiB) in the middle of a 1 MiB device,
/// planning every `every` requests; writes absorbed (the default; with 2
/// slots, not half the region, kept for the plans); the
/// weights halving at every plan (not the default: with a plan every few
/// requests, what the plans place changes often).
fn tiny(every: u64) -> String {
    format!(
        "version = 1\n[[layer]]\ntarget = \"opt\"\nopt_offset = \"512K\"\nopt_length = \"96K\"\n\
         journal_blocks = 2\nedge_weight_min = 0\nplan_interval_requests = {every}\ncopy_blocks_per_step = 4\nidle_ms = 0\n\
         weight_half_life_ms = 0\nabsorb_reserve_pct = 10\n"
    )
}

/// [`tiny`] with every unmapped write going home (`absorb_writes = false`).
fn tiny_home(every: u64) -> String {
    tiny(every) + "absorb_writes = false\n"
}

/// No automatic plans: tests drive `plan` / `apply` / `drop` themselves;
/// unmapped writes go home (what these tests look at).
fn manual() -> String {
    manual_absorbing(false)
}

fn manual_absorbing(absorb: bool) -> String {
    tiny(0).replace("absorb_reserve_pct = 10", "absorb_reserve_pct = 50")
        + &format!("auto_apply = false\nplan_interval_ms = 0\nabsorb_writes = {absorb}\n")
}

/// Mostly a hot set read in a repeated order (what the planner learns),
/// writes into it (dirty copies), and some of everything elsewhere.
fn ops(rng: &mut ChaCha8Rng, count: usize) -> Vec<OpSpec> {
    let hot: Vec<u64> = (0..12).map(|_| rng.gen_range(0..1900)).collect();
    let mut i = 0;
    (0..count)
        .map(|_| {
            i += 1;
            let (op, sectors) = match rng.gen_range(0..100) {
                0..=49 => (Op::Read, rng.gen_range(1..=16)),
                50..=79 => (Op::Write, rng.gen_range(1..=16)),
                80..=87 => (Op::Flush, 0),
                88..=93 => (Op::Trim, rng.gen_range(1..=16)),
                _ => (Op::WriteZeroes, rng.gen_range(1..=16)),
            };
            let sector = if rng.gen_bool(0.8) { hot[i % hot.len()] } else { rng.gen_range(0..2048) };
            OpSpec { op, sector, sectors, fua: rng.gen_bool(0.05), stream: (i % 2) as u32 }
        })
        .collect()
}

fn counter(stack: &dyn Target, key: &str) -> u64 {
    let st = stack.layer_statuses().into_iter().find(|s| s.target == "opt").expect("an opt layer");
    st.counters.iter().find(|c| c.0 == key).map(|c| c.1).unwrap_or_else(|| panic!("no counter {key}"))
}

/// The oracle check over seeds 0..12: `count` requests of `ops` each, the
/// stack of `cfg(seed)`; returns each counter of `keys` summed over the
/// seeds (printed).
fn oracle_seeds(
    keys: &[&str],
    ops: fn(&mut ChaCha8Rng, usize) -> Vec<OpSpec>,
    count: usize,
    cfg: impl Fn(u64) -> String,
) -> Vec<u64> {
    let mut totals = vec![0u64; keys.len()];
    for seed in 0..12u64 {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let ops = ops(&mut rng, count);
        let cfg = cfg(seed);
        let make = |mode| stack_from_toml(&cfg, DEVICE_BYTES, mode);
        let mut h = oracle_check_idle_with(&make, DEVICE_BYTES, seed, &ops, 1 + seed as usize % 4, 3);
        assert_eq!(h.upper_outstanding_count(), 0);
        let verified = h.message("verify");
        assert!(verified.as_ref().is_ok_and(|r| r.starts_with("slots consistent")), "{verified:?}");
        for (t, k) in totals.iter_mut().zip(keys) {
            *t += counter(&*h.stack, k);
        }
    }
    eprintln!("{:?}", keys.iter().zip(&totals).collect::<Vec<_>>());
    totals
}

/// Each counter of `keys` (totals from [`oracle_seeds`]) counted at least
/// 12 times: the workload exercised every mechanism it names.
fn assert_each_exercised(keys: &[&str], totals: &[u64]) {
    for (t, k) in totals.iter().zip(keys) {
        assert!(*t >= 12, "{k} = {t}: the workload did not exercise it");
    }
}

/// The recorder crash check at every flush and random points over seeds
/// 0..4: 200 requests of `ops` each, the stack of `cfg(seed)`.
fn crash_seeds(ops: fn(&mut ChaCha8Rng, usize) -> Vec<OpSpec>, cfg: impl Fn(u64) -> String) {
    for seed in 0..4u64 {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let ops = ops(&mut rng, 200);
        let cfg = cfg(seed);
        let make = |mode| stack_from_toml(&cfg, DEVICE_BYTES, mode);
        let cuts = crash_check_idle_with(&make, DEVICE_BYTES, seed, &ops, 1 + seed as usize % 3, 30, 3);
        assert!(cuts > 20, "too few cut points: {cuts}");
    }
}

#[test]
fn opt_reads_back_what_a_byte_array_would_while_reconfiguring() {
    let keys = [
        "reconfigurations_count",
        "copies_count",
        "dirty_copies_count",
        "copied_home_bytes",
        "dropped_blocks_count",
        "read_opt_bytes",
        "written_opt_bytes",
        "journal_writes_count",
        "writes_held_count",
    ];
    let totals = oracle_seeds(&keys, ops, 400, |seed| tiny_home(6 + seed % 5));
    // Each mechanism ran many times: copy in, switch, write to a copy,
    // copy home, drop.
    assert_each_exercised(&keys, &totals);
}

#[test]
fn opt_crash_at_every_flush_and_random_points_keeps_flushed_data() {
    crash_seeds(ops, |_| tiny_home(6));
}

/// The tiny region with extra copies, stream-sequence plans (padded with
/// `pad` home neighbours each side) and partial reads from home; with
/// `relay`, sequences laid out anew (`plan_relay`) and reads following
/// them (`read_follow`); with `time`, each stream's plan in the order it
/// first made its requests (`plan_time_order`).
fn tiny_copies(every: u64, pad: u32, absorb: bool, relay: bool, time: bool) -> String {
    tiny(every)
        + &format!("absorb_writes = {absorb}\nplan_relay = {relay}\nread_follow = {relay}\n")
        + &format!("plan_time_order = {time}\n")
        + &format!("absorb_during_jobs = {relay}\n")
        + &format!(
            "copies_max = 3\nplan_streams = true\nplan_pad_blocks = {pad}\npartial_reads_home = true\n"
        )
}

/// Three streams, each reading its own sequence of six places, two of
/// them shared by all (libraries: the planner copies them into each
/// stream's sequence), writes into all of it (a write to a block with
/// extra copies drops them), and some of everything elsewhere.
fn shared_ops(rng: &mut ChaCha8Rng, count: usize) -> Vec<OpSpec> {
    let shared: Vec<u64> = (0..2).map(|_| rng.gen_range(0..1900)).collect();
    let seqs: Vec<Vec<u64>> = (0..3)
        .map(|_| {
            let own = |rng: &mut ChaCha8Rng| rng.gen_range(0..1900);
            vec![own(rng), shared[0], own(rng), own(rng), shared[1], own(rng)]
        })
        .collect();
    let mut at = [0usize; 3];
    (0..count)
        .map(|_| {
            let stream = rng.gen_range(0..3);
            let (op, sectors) = match rng.gen_range(0..100) {
                0..=81 => (Op::Read, 8),
                82..=89 => (Op::Write, rng.gen_range(1..=16)),
                90..=93 => (Op::Flush, 0),
                94..=96 => (Op::Trim, rng.gen_range(1..=16)),
                _ => (Op::WriteZeroes, rng.gen_range(1..=16)),
            };
            let seq = &seqs[stream];
            let sector = if rng.gen_bool(0.9) {
                at[stream] += 1;
                seq[at[stream] % seq.len()]
            } else {
                rng.gen_range(0..2048)
            };
            // Each pass over a sequence is a run of its own (a process).
            let run = (at[stream] / seq.len()) % 8;
            OpSpec { op, sector, sectors, fua: rng.gen_bool(0.05), stream: (stream + 3 * run) as u32 }
        })
        .collect()
}

#[test]
fn opt_with_extra_copies_reads_back_what_a_byte_array_would() {
    let keys = [
        "extra_copies_count",
        "read_extra_count",
        "extras_dropped_count",
        "dirty_copies_count",
        "partial_reads_home_count",
    ];
    // Odd seeds absorb writes, seeds 2, 3, 6, 7, ... lay sequences anew,
    // seeds 1, 4, 7, ... plan each stream by time.
    let totals = oracle_seeds(&keys, shared_ops, 800, |seed| {
        tiny_copies(6 + seed % 5, 0, seed % 2 == 1, seed % 4 >= 2, seed % 3 == 1)
    });
    let extra_copies_made = totals[0] + totals[2];
    // Extra copies were made, read from and dropped by writes, reads went
    // home whole, many times.
    assert!(extra_copies_made >= 12, "extra copies made: {extra_copies_made}");
    assert_each_exercised(&keys[1..], &totals[1..]);
}

#[test]
fn opt_with_extra_copies_crash_at_every_flush_and_random_points_keeps_flushed_data() {
    // Odd seeds pad the plans with home neighbours, seeds 2 and 3 absorb
    // writes, seeds 2, 5, 8, ... lay sequences anew and follow them, even
    // seeds plan each stream by time.
    crash_seeds(shared_ops, |seed| {
        tiny_copies(6, 2 * (seed % 2) as u32, seed / 2 == 1, seed % 3 == 2, seed % 2 == 0)
    });
}

/// A harness over a fresh device with the manual config, brought up.
fn harness(dev: &Arc<MemDevice>, mode: OpenMode) -> Harness {
    harness_with(dev, &manual(), mode)
}

fn harness_with(dev: &Arc<MemDevice>, cfg: &str, mode: OpenMode) -> Harness {
    let stack = stack_from_toml(cfg, DEVICE_BYTES, mode);
    let mut h = Harness::new(stack, dev.clone() as Arc<dyn BlockDevice>, ZeroLatency::default(), 1);
    bring_up(&mut h);
    h
}

fn block(tag: u8) -> Vec<u8> {
    vec![tag; B as usize]
}

fn message(h: &mut Harness, msg: &str) -> Result<String, String> {
    h.message(msg)
}

fn describe(h: &mut Harness) -> String {
    message(h, "status").expect("status")
}

/// Writes blocks 10..14, reads them in order twice, plans and applies,
/// and runs the job to the end: blocks 10..14 are in OPT.
fn mapped_harness(dev: &Arc<MemDevice>) -> Harness {
    mapped_harness_with(dev, &manual())
}

fn mapped_harness_with(dev: &Arc<MemDevice>, cfg: &str) -> Harness {
    mapped_harness_over(dev, cfg, 10..14)
}

/// [`mapped_harness_with`] for blocks `blocks` (each written with its
/// number as tag).
fn mapped_harness_over(dev: &Arc<MemDevice>, cfg: &str, blocks: std::ops::Range<u8>) -> Harness {
    let mut h = harness_with(dev, cfg, OpenMode::format(1));
    for b in blocks.clone() {
        assert_eq!(h.write(u64::from(b) * B, block(b)).result, Ok(()));
    }
    assert_eq!(h.flush().result, Ok(()));
    for _ in 0..2 {
        for b in blocks.clone() {
            assert_eq!(h.read(u64::from(b) * B, B as u32).result, Ok(()));
        }
    }
    let reply = message(&mut h, "apply").expect("apply");
    assert!(reply.contains("to copy"), "{reply}");
    h.settle();
    assert_eq!(counter(&*h.stack, "job_active"), 0, "{}", describe(&mut h));
    assert!(counter(&*h.stack, "mapped_blocks_count") >= blocks.len() as u64, "{}", describe(&mut h));
    h
}

/// Where each of blocks `blocks` lives on the lower device.
fn lower_of(h: &Harness, blocks: std::ops::Range<u64>) -> Vec<u64> {
    blocks.map(|b| h.stack.map_extent(b * B, B)[0].0.expect("known")).collect()
}

/// Whether the lower offsets are adjacent blocks (in some order).
fn adjacent(mut lower: Vec<u64>) -> bool {
    lower.sort_unstable();
    in_order(&lower)
}

/// Whether the lower offsets are adjacent blocks in this order.
fn in_order(lower: &[u64]) -> bool {
    lower.windows(2).all(|w| w[1] == w[0] + B)
}

/// Reads blocks `blocks` in order, twice.
fn read_twice(h: &mut Harness, blocks: std::ops::Range<u64>) {
    for _ in 0..2 {
        for b in blocks.clone() {
            assert_eq!(h.read(b * B, B as u32).result, Ok(()));
        }
    }
}

#[test]
fn a_replan_keeps_placed_blocks_in_their_slots_and_copies_only_new_ones() {
    let dev = Arc::new(MemDevice::new(DEVICE_BYTES));
    let mut h = mapped_harness(&dev);
    let before = lower_of(&h, 10..14);
    assert!(before.iter().all(|&o| (512 << 10..608 << 10).contains(&o)), "in OPT: {before:?}");
    let copied = counter(&*h.stack, "copied_bytes");
    // The same four blocks and four new ones, read as one sequence.
    read_twice(&mut h, 10..18);
    let reply = message(&mut h, "plan").expect("plan");
    let reply = reply + &message(&mut h, "apply").expect("apply");
    assert!(reply.contains("4 block(s) kept, 4 to copy"), "{reply}");
    h.settle();
    assert_eq!(counter(&*h.stack, "job_active"), 0, "{}", describe(&mut h));
    assert_eq!(lower_of(&h, 10..14), before, "kept blocks did not move");
    assert_eq!(counter(&*h.stack, "copied_bytes"), copied + 4 * B, "only the new blocks were copied");
    assert_eq!(counter(&*h.stack, "dropped_blocks_count"), 0);
    // The new blocks go next to the kept ones in the region.
    assert!(adjacent(lower_of(&h, 10..18)), "{:?}", lower_of(&h, 10..18));
    // The same plan again: nothing to do.
    read_twice(&mut h, 10..18);
    let reply = message(&mut h, "apply").expect("apply");
    assert!(reply.contains("nothing to do"), "{reply}");
    for b in 10..18u64 {
        let want = if b < 14 { block(b as u8) } else { vec![0; B as usize] };
        assert_eq!(read_block(&mut h, b), want);
    }
}

#[test]
fn a_client_that_never_leaves_idle_ms_of_quiet_holds_a_job_back_only_while_it_bursts() {
    let dev = Arc::new(MemDevice::new(DEVICE_BYTES));
    let cfg = manual().replace("idle_ms = 0", "idle_ms = 100");
    let mut h = harness_with(&dev, &cfg, OpenMode::format(1));
    read_twice(&mut h, 10..14);
    let reply = message(&mut h, "apply").expect("apply");
    assert!(reply.contains("to copy"), "{reply}");
    // A burst, a read every 2 ms for 3 s: the job waits for idle time,
    // starved or not.
    for i in 0..1500u64 {
        h.run_until(h.now.add_ms(2));
        assert_eq!(h.read((100 + i % 40) * B, B as u32).result, Ok(()));
    }
    assert_eq!(counter(&*h.stack, "copies_count"), 0, "{}", describe(&mut h));
    assert_eq!(counter(&*h.stack, "job_active"), 1);
    // A trickle, a read every 90 ms (never `idle_ms` of quiet): the
    // starved job takes its gaps.
    let mut reads = 0;
    while counter(&*h.stack, "job_active") == 1 && reads < 100 {
        h.run_until(h.now.add_ms(90));
        assert_eq!(h.read((100 + reads % 40) * B, B as u32).result, Ok(()));
        reads += 1;
    }
    assert_eq!(counter(&*h.stack, "job_active"), 0, "{}", describe(&mut h));
    assert_eq!(counter(&*h.stack, "reconfigurations_count"), 1);
    assert!(counter(&*h.stack, "mapped_blocks_count") >= 4, "{}", describe(&mut h));
}

#[test]
fn blocks_a_plan_leaves_out_stay_until_their_slots_are_needed() {
    // A threshold of two transitions: after a plan halves the weights,
    // blocks 10..14 (read twice before it) are no longer planned.
    let cfg = manual().replace("edge_weight_min = 0", "edge_weight_min = 2");
    let dev = Arc::new(MemDevice::new(DEVICE_BYTES));
    let mut h = mapped_harness_with(&dev, &cfg);
    let before = lower_of(&h, 10..14);
    read_twice(&mut h, 30..34);
    message(&mut h, "plan").expect("plan");
    let reply = message(&mut h, "apply").expect("apply");
    assert!(reply.contains("4 to copy in 1 run(s), 0 to drop"), "{reply}");
    h.settle();
    assert_eq!(lower_of(&h, 10..14), before, "left out but not needed: still in OPT");
    assert_eq!(counter(&*h.stack, "mapped_blocks_count"), 8);
    // Twenty new blocks need the whole region (20 slots): the left-out
    // ones go (and the region takes the new plan's first 20 blocks).
    read_twice(&mut h, 40..60);
    let reply = message(&mut h, "plan").expect("plan") + &message(&mut h, "apply").expect("apply");
    assert!(reply.contains("to drop"), "{reply}");
    h.settle();
    assert_eq!(counter(&*h.stack, "dropped_blocks_count"), 8, "{}", describe(&mut h));
    assert_eq!(counter(&*h.stack, "mapped_blocks_count"), 20);
    for b in 10..14u64 {
        assert_eq!(read_block(&mut h, b), block(b as u8), "home is current");
    }
}

#[test]
fn a_batch_of_copies_goes_to_adjacent_slots_in_fewer_writes() {
    let dev = Arc::new(MemDevice::new(DEVICE_BYTES));
    let mut h = harness(&dev, OpenMode::format(1));
    // Eight scattered blocks read in one order: eight runs, adjacent slots.
    let blocks = [90u64, 7, 150, 33, 120, 64, 3, 200];
    for &b in &blocks {
        assert_eq!(h.write(b * B, block(b as u8)).result, Ok(()));
    }
    for _ in 0..2 {
        for &b in &blocks {
            h.read(b * B, B as u32);
        }
    }
    message(&mut h, "apply").expect("apply");
    h.settle();
    assert_eq!(counter(&*h.stack, "copies_count"), 8);
    assert!(counter(&*h.stack, "copy_writes_count") < 8, "{}", describe(&mut h));
    let lower: Vec<u64> = blocks.iter().map(|&b| lower_of(&h, b..b + 1)[0]).collect();
    assert!(adjacent(lower.clone()), "{lower:?}");
    for &b in &blocks {
        assert_eq!(read_block(&mut h, b), block(b as u8));
    }
}

/// Steps until `pred` holds (bounded).
fn step_until(h: &mut Harness, what: &str, pred: impl Fn(&mut Harness) -> bool) {
    for _ in 0..10_000 {
        if pred(h) {
            return;
        }
        assert!(h.step(), "stalled before {what}: {}", describe(h));
    }
    panic!("never reached {what}");
}

fn read_block(h: &mut Harness, b: u64) -> Vec<u8> {
    let c = h.read(b * B, B as u32);
    assert_eq!(c.result, Ok(()));
    c.data.expect("data").to_vec()
}

#[test]
fn reads_of_mapped_blocks_come_from_the_copy_and_the_first_write_waits_for_its_dirty_bit() {
    let dev = Arc::new(MemDevice::new(DEVICE_BYTES));
    let mut h = mapped_harness(&dev);
    let before = counter(&*h.stack, "read_opt_bytes");
    assert_eq!(read_block(&mut h, 11), block(11));
    assert_eq!(counter(&*h.stack, "read_opt_bytes"), before + B);
    let (held, journal) =
        (counter(&*h.stack, "writes_held_count"), counter(&*h.stack, "journal_writes_count"));
    assert_eq!(h.write(11 * B, block(0x61)).result, Ok(()));
    assert_eq!(counter(&*h.stack, "writes_held_count"), held + 1, "held for the journal");
    assert_eq!(counter(&*h.stack, "journal_writes_count"), journal + 1);
    assert_eq!(counter(&*h.stack, "dirty_slots_count"), 1);
    // The second write to the now dirty slot goes straight through.
    assert_eq!(h.write(11 * B, block(0x62)).result, Ok(()));
    assert_eq!(counter(&*h.stack, "writes_held_count"), held + 1);
    assert_eq!(read_block(&mut h, 11), block(0x62));
    // Home still holds the old bytes: the copy is authoritative.
    let mut home = vec![0u8; B as usize];
    dev.read_at(&mut home, 11 * B).unwrap();
    assert_eq!(home, block(11));
}

#[test]
fn a_write_during_copy_in_makes_the_copy_stale_and_it_is_copied_again() {
    let dev = Arc::new(MemDevice::new(DEVICE_BYTES));
    let mut h = harness(&dev, OpenMode::format(1));
    for b in 10..14u64 {
        assert_eq!(h.write(b * B, block(b as u8)).result, Ok(()));
        h.read(b * B, B as u32);
    }
    message(&mut h, "apply").expect("apply");
    step_until(&mut h, "a copy read in flight", |h| {
        describe(h).contains("phase CopyIn") && h.lower_in_flight_count() > 0
    });
    let id = h.submit(Request::write(ReqId(0), 12 * B, block(0x77).into()));
    h.settle();
    assert_eq!(h.wait_for(id).result, Ok(()));
    assert!(counter(&*h.stack, "copies_stale_count") >= 1, "{}", describe(&mut h));
    assert_eq!(counter(&*h.stack, "mapped_blocks_count"), 4, "{}", describe(&mut h));
    let before = counter(&*h.stack, "read_opt_bytes");
    assert_eq!(read_block(&mut h, 12), block(0x77));
    assert_eq!(counter(&*h.stack, "read_opt_bytes"), before + B, "served from the fresh copy");
}

#[test]
fn a_write_during_copy_in_is_absorbed_beside_the_jobs_slots_unless_the_job_copies_its_block() {
    let during = |on: bool| manual_absorbing(true) + &format!("absorb_during_jobs = {on}\n");
    let start = |dev: &Arc<MemDevice>, cfg: &str| {
        let mut h = harness_with(dev, cfg, OpenMode::format(1));
        read_twice(&mut h, 10..14);
        message(&mut h, "apply").expect("apply");
        step_until(&mut h, "a copy read in flight", |h| {
            describe(h).contains("phase CopyIn") && h.lower_in_flight_count() > 0
        });
        h
    };
    // Off (the default): a write during a job goes home.
    let dev = Arc::new(MemDevice::new(DEVICE_BYTES));
    let mut h = start(&dev, &during(false));
    assert_eq!(h.write(30 * B, block(0x30)).result, Ok(()));
    assert_eq!(counter(&*h.stack, "absorbed_blocks_count"), 0);
    h.settle();
    assert_eq!(lower_of(&h, 30..31), vec![30 * B], "home");
    let dev = Arc::new(MemDevice::new(DEVICE_BYTES));
    let mut h = start(&dev, &during(true));
    // Block 30 is none of the job's: absorbed now, into a slot no copy
    // of the job goes to. Block 12 is the job's: it goes home (the job
    // copies it again and maps it).
    assert_eq!(h.write(30 * B, block(0x30)).result, Ok(()));
    assert_eq!(counter(&*h.stack, "absorbed_during_job_count"), 1);
    assert_eq!(counter(&*h.stack, "absorbed_blocks_count"), 1);
    assert_eq!(h.write(12 * B, block(0x77)).result, Ok(()));
    assert_eq!(counter(&*h.stack, "absorbed_blocks_count"), 1, "the job's block went home");
    h.settle();
    assert_eq!(counter(&*h.stack, "job_active"), 0, "{}", describe(&mut h));
    assert_eq!(counter(&*h.stack, "mapped_blocks_count"), 5, "{}", describe(&mut h));
    let at = lower_of(&h, 30..31)[0];
    assert_ne!(at, 30 * B, "in the region");
    let copies = lower_of(&h, 10..14);
    assert!(!copies.contains(&at), "{copies:?} and the absorbed slot {at}");
    assert!(adjacent(copies), "the job's slots stayed its own");
    assert_eq!(read_block(&mut h, 12), block(0x77));
    assert_eq!(read_block(&mut h, 30), block(0x30));
    assert_eq!(message(&mut h, "verify").map(|r| r.starts_with("slots consistent")), Ok(true));
    // Flushed, it survives a crash.
    assert_eq!(h.flush().result, Ok(()));
    drop(h);
    let unclean = OpenMode::Open { clean: false, accept_loss: false };
    let mut h = harness_with(&dev, &during(true), unclean);
    assert_eq!(read_block(&mut h, 30), block(0x30));
    assert_eq!(read_block(&mut h, 12), block(0x77));
    assert_eq!(lower_of(&h, 30..31)[0], at);
}

#[test]
fn a_write_during_copy_home_keeps_the_slot_dirty_until_copied_again() {
    let dev = Arc::new(MemDevice::new(DEVICE_BYTES));
    let mut h = mapped_harness(&dev);
    assert_eq!(h.write(11 * B, block(0x51)).result, Ok(()));
    message(&mut h, "drop").expect("drop");
    step_until(&mut h, "a copy-home read in flight", |h| {
        describe(h).contains("phase CopyHome") && h.lower_in_flight_count() > 0
    });
    // A read and a write of the block being copied home, at once.
    let r = h.submit(Request::new(ReqId(0), Op::Read, 11 * B, B as u32));
    let w = h.submit(Request::write(ReqId(0), 11 * B, block(0x52).into()));
    h.settle();
    assert_eq!(h.wait_for(r).data.expect("data").to_vec(), block(0x51), "the read saw the copy");
    assert_eq!(h.wait_for(w).result, Ok(()));
    assert_eq!(counter(&*h.stack, "mapped_blocks_count"), 0, "{}", describe(&mut h));
    assert_eq!(counter(&*h.stack, "copied_home_bytes"), 2 * B, "copied home twice");
    assert_eq!(read_block(&mut h, 11), block(0x52));
    let mut home = vec![0u8; B as usize];
    dev.read_at(&mut home, 11 * B).unwrap();
    assert_eq!(home, block(0x52), "home holds the newest bytes");
}

/// Steps to the job phase `phase`, writes block `b` then: the write is
/// held, and completes once the stack settles.
fn held_write_during(h: &mut Harness, phase: &str, b: u64, tag: u8) {
    step_until(h, phase, |h| describe(h).contains(phase));
    let held = counter(&*h.stack, "writes_held_count");
    let w = h.submit(Request::write(ReqId(0), b * B, block(tag).into()));
    assert_eq!(counter(&*h.stack, "writes_held_count"), held + 1, "held during {phase}");
    h.settle();
    assert_eq!(h.wait_for(w).result, Ok(()));
}

#[test]
fn writes_to_blocks_whose_mapping_a_map_write_changes_wait_for_it() {
    // Unmap: a write to a block being dropped waits, then goes home.
    let dev = Arc::new(MemDevice::new(DEVICE_BYTES));
    let mut h = mapped_harness(&dev);
    message(&mut h, "drop").expect("drop");
    held_write_during(&mut h, "phase UnmapWrite", 13, 0x31);
    let mut home = vec![0u8; B as usize];
    dev.read_at(&mut home, 13 * B).unwrap();
    assert_eq!(home, block(0x31), "went home after the unmap");
    // Commit: a write to a block being mapped waits, then goes to the copy.
    for _ in 0..2 {
        for b in 10..14u64 {
            h.read(b * B, B as u32);
        }
    }
    message(&mut h, "apply").expect("apply");
    held_write_during(&mut h, "phase CommitWrite", 10, 0x32);
    assert!(counter(&*h.stack, "mapped_blocks_count") >= 4);
    assert_eq!(counter(&*h.stack, "dirty_slots_count"), 1, "written to its copy");
    assert_eq!(read_block(&mut h, 10), block(0x32));
    assert_eq!(read_block(&mut h, 13), block(0x31));
}

#[test]
fn after_a_crash_only_the_slots_written_are_dirty_and_reads_see_flushed_data() {
    let dev = Arc::new(MemDevice::new(DEVICE_BYTES));
    let mut h = mapped_harness(&dev);
    assert_eq!(h.write(12 * B, block(0x41)).result, Ok(()));
    assert_eq!(h.flush().result, Ok(()));
    drop(h); // no clean shutdown: the journal alone knows the dirty bit
    let mut h = harness(&dev, OpenMode::Open { clean: false, accept_loss: false });
    assert_eq!(counter(&*h.stack, "recovered_dirty_slots_count"), 1);
    assert!(counter(&*h.stack, "mapped_blocks_count") >= 4);
    assert_eq!(read_block(&mut h, 12), block(0x41));
    assert_eq!(read_block(&mut h, 10), block(10));
    message(&mut h, "drop").expect("drop");
    h.settle();
    assert_eq!(counter(&*h.stack, "copied_home_bytes"), B, "copy-back proportional to what was written");
    assert_eq!(read_block(&mut h, 12), block(0x41));
}

/// A journal block whose crc holds but which this build cannot read (a
/// newer version's) is refused naming its offset, not skipped as torn:
/// skipping it would drop the dirty bit it holds, and reads would take the
/// home copy, older than the flushed write. `--accept-loss` skips it and
/// says so.
#[test]
fn a_journal_block_of_a_newer_version_is_refused_and_accept_loss_skips_it() {
    let dev = Arc::new(MemDevice::new(DEVICE_BYTES));
    let mut h = mapped_harness(&dev);
    assert_eq!(h.write(12 * B, block(0x41)).result, Ok(()));
    assert_eq!(h.flush().result, Ok(()));
    drop(h); // the journal alone knows the dirty bit
    let journal_at = (512 << 10) + 2 * 4096;
    let mut rewritten = Vec::new();
    for i in 0..16u64 {
        let at = journal_at + i * 4096;
        let mut b = vec![0u8; 4096];
        dev.read_at(&mut b, at).unwrap();
        if &b[0..8] == b"LDOPTJNL" {
            b[8..12].copy_from_slice(&2u32.to_le_bytes());
            b[28..32].fill(0);
            let crc = crc32c::crc32c(&b);
            b[28..32].copy_from_slice(&crc.to_le_bytes());
            dev.write_at(&b, at).unwrap();
            rewritten.push(at);
        }
    }
    assert!(!rewritten.is_empty(), "a journal block holds the dirty bit");
    let unclean = OpenMode::Open { clean: false, accept_loss: false };
    let stack = stack_from_toml(&manual(), DEVICE_BYTES, unclean);
    let mut h = Harness::new(stack, dev.clone() as Arc<dyn BlockDevice>, ZeroLatency::default(), 1);
    let e = h.bring_up().expect_err("refused");
    assert!(
        e.contains(&format!("opt journal block at lower offset {}", rewritten[0]))
            && e.contains("format version 2")
            && e.contains("newer layoutd")
            && e.contains("accept-loss"),
        "{e}"
    );
    let h = harness(&dev, OpenMode::Open { clean: false, accept_loss: true });
    let st = h.stack.layer_statuses().into_iter().find(|s| s.target == "opt").unwrap();
    let loss = st.config.iter().find(|(k, _)| k == "accepted_loss").map(|(_, v)| v.clone());
    assert!(loss.is_some_and(|l| l.contains("opt journal block")), "{:?}", st.config);
    assert_eq!(counter(&*h.stack, "journal_blocks_unreadable_count"), rewritten.len() as u64);
}

#[test]
fn a_corrupt_map_is_refused_by_name_and_accept_loss_falls_back_to_home() {
    let dev = Arc::new(MemDevice::new(DEVICE_BYTES));
    let h = mapped_harness(&dev);
    drop(h);
    // Both map copies (at the start of the region) damaged.
    for copy in 0..2u64 {
        let at = (512 << 10) + copy * 4096 + 100;
        dev.write_at(&[0xFF; 8], at).unwrap();
    }
    let stack = stack_from_toml(&manual(), DEVICE_BYTES, OpenMode::Open { clean: true, accept_loss: false });
    let mut h = Harness::new(stack, dev.clone() as Arc<dyn BlockDevice>, ZeroLatency::default(), 1);
    let e = h.bring_up().unwrap_err();
    assert!(
        e.contains("opt map at lower offset 524288") && e.contains("crc32c") && e.contains("accept-loss"),
        "{e}"
    );
    let mut h = harness(&dev, OpenMode::Open { clean: true, accept_loss: true });
    assert_eq!(counter(&*h.stack, "mapped_blocks_count"), 0);
    for b in 10..14u64 {
        assert_eq!(read_block(&mut h, b), block(b as u8), "home copies are current");
    }
    let st = h.stack.layer_statuses().into_iter().find(|s| s.target == "opt").unwrap();
    assert!(st.config.iter().any(|(k, _)| k == "accepted_loss"));
}

#[test]
fn bad_configs_say_what_is_wrong() {
    let cases = [
        ("opt_offset = \"1000K\"\nopt_length = \"96K\"\n", "runs past the end"),
        ("opt_offset = 0\nopt_length = \"1M\"\n", "leaves no volume"),
        ("opt_length = \"16K\"\njournal_blocks = 2\n", "too small for its map"),
        ("opt_offset = \"5K\"\nopt_length = \"96K\"\n", "`opt_offset`"),
        ("block_bytes = 3000\n", "power of two"),
        ("journal_blocks = 0\n", "journal_blocks"),
        ("opt_lenght = \"96K\"\n", "unknown key"),
        ("plan_pad_blocks = 4\n", "needs `plan_streams = true`"),
        ("plan_written = false\n", "needs `plan_streams = true`"),
        ("plan_relay = true\n", "needs `plan_streams = true`"),
        ("plan_time_order = true\n", "needs `plan_streams = true`"),
        ("graph_stream = \"process\"\n", "`graph_stream`"),
        ("readahead_bytes = 1000\n", "`readahead_bytes`"),
        ("readahead_bytes = \"64K\"\nreadahead_memory_bytes = \"32K\"\n", "`readahead_memory_bytes`"),
        ("readahead_when = \"sometimes\"\n", "`readahead_when`"),
        ("readbehind_bytes = 1000\n", "`readbehind_bytes`"),
        ("readbehind_bytes = \"64K\"\nreadahead_memory_bytes = \"32K\"\n", "`readahead_memory_bytes`"),
        ("absorb_reserve_pct = 101\n", "`absorb_reserve_pct`"),
    ];
    for (keys, want) in cases {
        let text = format!("version = 1\n[[layer]]\ntarget = \"opt\"\n{keys}");
        let cfg = layoutd_core::config::StackConfig::parse(&text, "t").unwrap();
        let e = layoutd_targets::build_stack(&cfg, DEVICE_BYTES, OpenMode::format(1)).err().expect(keys).0;
        assert!(e.contains(want), "{keys}: {e}");
    }
}

/// Stream `stream` (a base stream of the detector) reads block `b`.
fn read_as(h: &mut Harness, stream: u32, b: u64) -> Vec<u8> {
    let mut req = Request::new(ReqId(0), Op::Read, b * B, B as u32);
    req.stream = layoutd_core::StreamId(stream * layoutd_core::streams::RUN_SLOTS);
    let c = h.call(req);
    assert_eq!(c.result, Ok(()));
    c.data.expect("data").to_vec()
}

#[test]
fn graph_stream_keys_the_profile_by_the_connection_or_by_its_runs() {
    // One connection (base stream 0) whose reads the detector gave four
    // runs, read in turn twice: with `graph_stream = "base"` one graph, each
    // read linked to the next (7 edges); with `"run"` a graph per run, each
    // run's two reads linked (4 edges), none across the runs.
    for (key, edges) in [("base", 7), ("run", 4)] {
        let dev = Arc::new(MemDevice::new(DEVICE_BYTES));
        let cfg = manual() + &format!("graph_stream = \"{key}\"\n");
        let mut h = harness_with(&dev, &cfg, OpenMode::format(1));
        for round in 0..2u64 {
            for run in 1..=4u32 {
                let b = u64::from(run) * 40 + round;
                let mut req = Request::new(ReqId(0), Op::Read, b * B, B as u32);
                req.stream = layoutd_core::StreamId(run);
                assert_eq!(h.call(req).result, Ok(()));
            }
        }
        let reply = message(&mut h, "plan").expect("plan");
        assert!(reply.contains(&format!("from 8 atoms and {edges} edges")), "{key}: {reply}");
    }
}

#[test]
fn a_shared_block_gets_a_copy_in_each_sequence_and_a_write_drops_the_extra_one_durably() {
    let dev = Arc::new(MemDevice::new(DEVICE_BYTES));
    let cfg = manual().replace("edge_weight_min = 0", "edge_weight_min = 2")
        + "copies_max = 2\nfollow_streams = true\n";
    let mut h = harness_with(&dev, &cfg, OpenMode::format(1));
    for b in 10..20u8 {
        assert_eq!(h.write(u64::from(b) * B, block(b)).result, Ok(()));
    }
    assert_eq!(h.flush().result, Ok(()));
    // Program A reads 10 15 11 12, program B 16 15 17 18: 15 is shared.
    // Each run is its own stream (a process).
    let (a, b) = ([10u64, 15, 11, 12], [16u64, 15, 17, 18]);
    for round in 0..3 {
        for (s, seq) in [(1, a), (2, b)] {
            for x in seq {
                read_as(&mut h, 10 + 2 * round + s, x);
            }
        }
    }
    let reply = message(&mut h, "apply").expect("apply");
    assert!(reply.contains("to copy"), "{reply}");
    h.settle();
    assert_eq!(counter(&*h.stack, "job_active"), 0, "{}", describe(&mut h));
    assert_eq!(counter(&*h.stack, "extra_copies_count"), 1, "{}", describe(&mut h));
    // Each program reads 15 from the copy right after its previous block.
    let extra_reads = counter(&*h.stack, "read_extra_count");
    for (s, seq) in [(1, a), (2, b)] {
        for x in seq {
            assert_eq!(read_as(&mut h, s, x), block(x as u8));
        }
    }
    assert_eq!(counter(&*h.stack, "read_extra_count"), extra_reads + 1, "one program reads the extra copy");
    // A write to 15 goes to the primary once its dirty bit is durable, and
    // the extra copy goes with it: both programs read the new bytes.
    assert_eq!(h.write(15 * B, block(0x55)).result, Ok(()));
    assert_eq!(counter(&*h.stack, "extras_dropped_count"), 1);
    assert_eq!(counter(&*h.stack, "extra_copies_count"), 0);
    for s in [1, 2] {
        read_as(&mut h, s, 10);
        read_as(&mut h, s, 16);
        assert_eq!(read_as(&mut h, s, 15), block(0x55));
    }
    assert_eq!(h.flush().result, Ok(()));
    // A crash: the durable map still names the extra copy, but the journal
    // says its primary is dirty, so recovery drops it.
    drop(h);
    let mut h = harness_with(&dev, &cfg, OpenMode::Open { clean: false, accept_loss: false });
    assert_eq!(counter(&*h.stack, "recovered_dirty_slots_count"), 1);
    assert_eq!(counter(&*h.stack, "extra_copies_count"), 0);
    assert_eq!(counter(&*h.stack, "extras_dropped_count"), 1, "dropped at recovery");
    for s in [1, 2] {
        read_as(&mut h, s, 11);
        assert_eq!(read_as(&mut h, s, 15), block(0x55));
    }
}

#[test]
fn a_read_partly_in_opt_goes_wholly_home_while_its_copies_are_clean() {
    let dev = Arc::new(MemDevice::new(DEVICE_BYTES));
    let cfg = manual() + "partial_reads_home = true\n";
    let mut h = mapped_harness_with(&dev, &cfg);
    // Blocks 13..15: 13 is in OPT, 14 is not (its home holds block(0)).
    assert!(h.stack.map_extent(13 * B, B)[0].0 != Some(13 * B), "13 is mapped");
    assert_eq!(h.stack.map_extent(14 * B, B)[0].0, Some(14 * B), "14 is not");
    let c = h.read(13 * B, 2 * B as u32);
    assert_eq!(c.data.expect("data").to_vec(), [block(13), vec![0; B as usize]].concat());
    assert_eq!(counter(&*h.stack, "partial_reads_home_count"), 1);
    // Once 13's copy is dirty only it has the bytes: the read is split.
    assert_eq!(h.write(13 * B, block(0x31)).result, Ok(()));
    let c = h.read(13 * B, 2 * B as u32);
    assert_eq!(c.data.expect("data").to_vec(), [block(0x31), vec![0; B as usize]].concat());
    assert_eq!(counter(&*h.stack, "partial_reads_home_count"), 1);
}

#[test]
fn a_stream_plan_without_written_ranges_leaves_them_home_and_their_writes_need_no_journal_block() {
    for place in [true, false] {
        let dev = Arc::new(MemDevice::new(DEVICE_BYTES));
        let cfg = manual() + &format!("plan_streams = true\nplan_written = {place}\n");
        let mut h = harness_with(&dev, &cfg, OpenMode::format(1));
        // One stream reads 10..14 and writes block 20 between its reads, twice.
        for _ in 0..2 {
            for b in 10..14u64 {
                assert_eq!(h.read(b * B, B as u32).result, Ok(()));
                if b == 11 {
                    assert_eq!(h.write(20 * B, block(20)).result, Ok(()));
                }
            }
        }
        assert_eq!(h.flush().result, Ok(()));
        message(&mut h, "apply").expect("apply");
        h.settle();
        let mapped = |h: &Harness, b: u64| h.stack.map_extent(b * B, B)[0].0 != Some(b * B);
        assert!((10..14).all(|b| mapped(&h, b)), "{}", describe(&mut h));
        assert_eq!(mapped(&h, 20), place, "plan_written = {place}: {}", describe(&mut h));
        // A write to a clean copy waits for a journal block; one home does not.
        let journal = counter(&*h.stack, "journal_writes_count");
        assert_eq!(h.write(20 * B, block(0x21)).result, Ok(()));
        assert_eq!(counter(&*h.stack, "journal_writes_count") - journal, u64::from(place));
        assert_eq!(read_block(&mut h, 20), block(0x21));
    }
}

/// `ops` with every write made of whole 4 KiB blocks (what absorption takes).
fn block_ops(rng: &mut ChaCha8Rng, count: usize) -> Vec<OpSpec> {
    let mut ops = ops(rng, count);
    for o in ops.iter_mut().filter(|o| o.op == Op::Write) {
        o.sector = o.sector / 8 * 8;
        o.sectors = 8 * (1 + o.sectors % 2);
    }
    ops
}

/// The tiny region absorbing writes (said, though the default),
/// planning every `every` requests; `wide`: twice as many slots, and
/// writes absorbed while jobs run too (`absorb_during_jobs`), so that
/// they find free slots beside a running job's.
fn tiny_absorb(every: u64, wide: bool) -> String {
    let cfg = tiny(every) + "absorb_writes = true\n";
    if wide {
        return cfg.replace("opt_length = \"96K\"", "opt_length = \"192K\"") + "absorb_during_jobs = true\n";
    }
    cfg
}

#[test]
fn opt_absorbing_writes_reads_back_what_a_byte_array_would() {
    let keys = [
        "absorbed_writes_count",
        "absorbed_blocks_count",
        "absorbed_during_job_count",
        "reconfigurations_count",
        "copied_home_bytes",
        "journal_writes_count",
        "dropped_blocks_count",
    ];
    let totals = oracle_seeds(&keys, block_ops, 400, |seed| tiny_absorb(6 + seed % 5, seed % 4 != 0));
    // Writes were absorbed (while jobs ran too), journaled, copied home
    // and dropped by plans.
    assert_each_exercised(&keys, &totals);
}

#[test]
fn opt_absorbing_writes_crash_at_every_flush_and_random_points_keeps_flushed_data() {
    crash_seeds(block_ops, |seed| tiny_absorb(6, seed % 2 == 1));
}

#[test]
fn an_absorbed_write_goes_to_the_region_and_its_mapping_is_durable_after_the_next_flush() {
    let dev = Arc::new(MemDevice::new(DEVICE_BYTES));
    let cfg = manual_absorbing(true);
    let unclean = OpenMode::Open { clean: false, accept_loss: false };
    let mut h = harness_with(&dev, &cfg, OpenMode::format(1));
    assert_eq!(h.write(30 * B, block(0x30)).result, Ok(()));
    assert_eq!(counter(&*h.stack, "absorbed_writes_count"), 1);
    assert_ne!(h.stack.map_extent(30 * B, B)[0].0, Some(30 * B), "in the region");
    assert_eq!(read_block(&mut h, 30), block(0x30));
    // A crash before a flush forgets the mapping: home, as if never written.
    drop(h);
    let mut h = harness_with(&dev, &cfg, unclean);
    assert_eq!(read_block(&mut h, 30), vec![0; B as usize]);
    assert_eq!(counter(&*h.stack, "recovered_absorbed_blocks_count"), 0);
    // Written and flushed: one journal block names it, a crash keeps it.
    assert_eq!(h.write(30 * B, block(0x31)).result, Ok(()));
    let journal = counter(&*h.stack, "journal_writes_count");
    assert_eq!(h.flush().result, Ok(()));
    assert_eq!(counter(&*h.stack, "journal_writes_count"), journal + 1);
    // A FUA write to a block absorbed but not flushed waits for a flush
    // and a journal block of its own; a FUA write is never absorbed.
    assert_eq!(h.write(40 * B, block(0x40)).result, Ok(()));
    let fua = |b: u64, tag: u8| Request { fua: true, ..Request::write(ReqId(0), b * B, block(tag).into()) };
    assert_eq!(h.call(fua(40, 0x41)).result, Ok(()));
    assert_eq!(counter(&*h.stack, "journal_writes_count"), journal + 2);
    assert_eq!(h.call(fua(41, 0x42)).result, Ok(()));
    assert_eq!(h.stack.map_extent(41 * B, B)[0].0, Some(41 * B), "home");
    drop(h);
    let mut h = harness_with(&dev, &cfg, unclean);
    assert_eq!(counter(&*h.stack, "recovered_absorbed_blocks_count"), 2);
    assert_eq!(read_block(&mut h, 30), block(0x31));
    assert_eq!(read_block(&mut h, 40), block(0x41));
    assert_eq!(read_block(&mut h, 41), block(0x42));
    // Dropping the region copies it home.
    message(&mut h, "drop").expect("drop");
    h.settle();
    assert_eq!(h.stack.map_extent(30 * B, B)[0].0, Some(30 * B), "home again");
    assert_eq!(read_block(&mut h, 30), block(0x31));
}

/// One `OpSpec` as a request on a volume of `volume_sectors`.
fn spec_request(o: &OpSpec, volume_sectors: u64) -> Request {
    let sectors = u64::from(o.sectors).clamp(1, 64);
    let offset = (o.sector % (volume_sectors - sectors)) * 512;
    let len = (sectors * 512) as u32;
    let mut req = match o.op {
        Op::Write => Request::write(ReqId(0), offset, vec![o.sector as u8; len as usize].into()),
        Op::Flush => Request::new(ReqId(0), Op::Flush, 0, 0),
        op => Request::new(ReqId(0), op, offset, len),
    };
    req.fua = o.fua && o.op != Op::Read && o.op != Op::Flush;
    req.stream = layoutd_core::StreamId(o.stream);
    req
}

#[test]
fn the_free_slots_are_the_unmapped_ones_after_random_operations_and_recovery() {
    // Plans, copies, extra copies dropped by writes, absorbed writes, copy
    // home and drops, cut by crashes at random points (jobs in flight).
    let cfg = tiny_copies(6, 0, true, false, false);
    let unclean = OpenMode::Open { clean: false, accept_loss: false };
    let mut checked = 0;
    for seed in 0..6u64 {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut ops = shared_ops(&mut rng, 300);
        ops.extend(block_ops(&mut rng, 300));
        let dev = Arc::new(MemDevice::new(DEVICE_BYTES));
        let mut h = harness_with(&dev, &cfg, OpenMode::format(1));
        let volume_sectors = h.stack.size_bytes() / 512;
        for (i, o) in ops.iter().enumerate() {
            let c = h.call(spec_request(o, volume_sectors));
            assert_eq!(c.result, Ok(()));
            h.drive_bounded(rng.gen_range(0..40));
            if i % 7 == 0 {
                assert!(message(&mut h, "verify").is_ok_and(|r| r.starts_with("slots consistent")));
                checked += 1;
            }
            if rng.gen_bool(0.02) {
                drop(h);
                h = harness_with(&dev, &cfg, unclean);
                let reply = message(&mut h, "verify");
                assert!(reply.as_ref().is_ok_and(|r| r.starts_with("slots consistent")), "{reply:?}");
                checked += 1;
            }
        }
        h.settle();
        assert_eq!(message(&mut h, "verify").map(|r| r.starts_with("slots consistent")), Ok(true));
        for key in ["absorbed_blocks_count", "extras_dropped_count", "reconfigurations_count"] {
            assert!(counter(&*h.stack, key) > 0 || seed > 0, "{key} not exercised");
        }
    }
    assert!(checked > 500);
}

#[test]
fn weights_halve_by_virtual_time_not_by_plans_unless_the_half_life_is_zero() {
    // Four blocks read in order twice: 4 vertices of 2 accesses (2000
    // units), which 11 halvings take to zero.
    let vertices_after = |half_life_ms: u64, plans: u32, pause_ms: u64| {
        let dev = Arc::new(MemDevice::new(DEVICE_BYTES));
        let half_life = format!("weight_half_life_ms = {half_life_ms}");
        let cfg = manual().replace("weight_half_life_ms = 0", &half_life);
        let mut h = harness_with(&dev, &cfg, OpenMode::format(1));
        read_twice(&mut h, 10..14);
        for _ in 0..plans {
            let t = h.now.add_ms(pause_ms);
            h.run_until(t);
            message(&mut h, "plan").expect("plan");
        }
        counter(&*h.stack, "graph_vertices_count")
    };
    assert_eq!(vertices_after(0, 12, 1), 0, "each plan halves");
    assert_eq!(vertices_after(1000, 12, 1), 4, "12 ms: no half-life passed");
    assert_eq!(vertices_after(1000, 1, 5_500), 4, "5 halvings leave 62 units");
    assert_eq!(vertices_after(1000, 1, 12_000), 0, "12 half-lives passed");
    assert_eq!(vertices_after(1000, 12, 1_000), 0, "one halving at each of 12 plans");
}

/// `shared_ops` with every read of whole 4 KiB blocks (a read-ahead goes on
/// from a read that ends on a slot's end) and writes of one or two whole
/// blocks half the time.
fn aligned_shared_ops(rng: &mut ChaCha8Rng, count: usize) -> Vec<OpSpec> {
    let mut ops = shared_ops(rng, count);
    for o in ops.iter_mut() {
        if o.op == Op::Read || (o.op == Op::Write && o.sector % 2 == 0) {
            o.sector = o.sector / 8 * 8;
            o.sectors = 8 * (1 + o.sectors % 2);
        }
    }
    ops
}

/// [`tiny_copies`] reading ahead 8 KiB (two slots) along the sequences,
/// held in at most 24 KiB, for the reads `when` says.
fn tiny_ahead(every: u64, absorb: bool, when: &str) -> String {
    tiny_copies(every, 0, absorb, false, false)
        + &format!(
            "readahead_bytes = \"8K\"\nreadahead_memory_bytes = \"24K\"\nreadahead_when = \"{when}\"\n"
        )
}

const WHEN: [&str; 3] = ["following", "resumed", "always"];

#[test]
fn opt_reading_ahead_reads_back_what_a_byte_array_would() {
    let keys = [
        "readahead_reads_count",
        "readahead_hits_count",
        "readahead_dropped_count",
        "readahead_evicted_count",
        "dirty_copies_count",
        "reconfigurations_count",
    ];
    // Odd seeds absorb writes; each `readahead_when` on 4 seeds.
    let totals = oracle_seeds(&keys, aligned_shared_ops, 800, |seed| {
        tiny_ahead(6 + seed % 5, seed % 2 == 1, WHEN[(seed / 2 % 3) as usize])
    });
    // Reads went on from memory, writes dropped held and in-flight bytes,
    // memory ran full, all many times, and no read returned stale bytes.
    assert_each_exercised(&keys, &totals);
}

#[test]
fn opt_reading_ahead_crash_at_every_flush_and_random_points_keeps_flushed_data() {
    crash_seeds(aligned_shared_ops, |seed| tiny_ahead(6, seed % 2 == 1, WHEN[(seed % 3) as usize]));
}

#[test]
fn a_read_ahead_along_the_sequence_serves_the_next_reads_and_a_write_is_never_shadowed_by_it() {
    let dev = Arc::new(MemDevice::new(DEVICE_BYTES));
    let cfg = manual() + "readahead_bytes = \"8K\"\n";
    let mut h = mapped_harness_with(&dev, &cfg);
    assert!(adjacent(lower_of(&h, 10..14)), "one sequence: {}", describe(&mut h));
    let c = |h: &Harness, k| counter(&*h.stack, k);
    // The first read jumps into the sequence: no read-ahead.
    assert_eq!(read_block(&mut h, 10), block(10));
    assert_eq!(c(&h, "readahead_reads_count"), 0);
    // The next goes on: it reads on the two following slots (12, 13).
    assert_eq!(read_block(&mut h, 11), block(11));
    assert_eq!((c(&h, "readahead_reads_count"), c(&h, "readahead_read_blocks")), (1, 2));
    let lower = h.stats.lower_count;
    assert_eq!(read_block(&mut h, 12), block(12));
    assert_eq!(c(&h, "readahead_hits_count"), 1);
    assert_eq!(h.stats.lower_count, lower, "answered from memory");
    // A write to block 13 (its first: held for the journal block, then to
    // the slot) drops the held bytes: the read after it sees the write.
    assert_eq!(h.write(13 * B, block(0x71)).result, Ok(()));
    assert_eq!(c(&h, "readahead_dropped_count"), 1);
    assert_eq!(read_block(&mut h, 13), block(0x71));
    assert_eq!(c(&h, "readahead_hits_count"), 1, "not from the read-ahead");
    // Without the read-ahead the same bytes come back.
    let mut plain = mapped_harness(&Arc::new(MemDevice::new(DEVICE_BYTES)));
    assert_eq!(h.write(13 * B, block(0x72)).result, Ok(()));
    assert_eq!(plain.write(13 * B, block(0x72)).result, Ok(()));
    for b in 10..14 {
        assert_eq!(read_block(&mut h, b), read_block(&mut plain, b), "block {b}");
    }
}

#[test]
fn opt_moving_dirty_blocks_into_the_plans_order_reads_back_what_a_byte_array_would() {
    let keys = ["moved_blocks_count", "copied_home_bytes", "reconfigurations_count"];
    // Absorbing every seed (the blocks a plan moves), time order on odd seeds.
    let totals = oracle_seeds(&keys, shared_ops, 800, |seed| {
        tiny_copies(6 + seed % 5, 0, true, false, seed % 2 == 1) + "plan_moves_dirty = true\n"
    });
    // Dirty blocks out of the plan's order were copied home, dropped and
    // copied in again, many times; no read returned stale bytes.
    assert_each_exercised(&keys, &totals);
}

#[test]
fn opt_moving_dirty_blocks_crash_at_every_flush_and_random_points_keeps_flushed_data() {
    crash_seeds(shared_ops, |seed| {
        tiny_copies(6, 0, true, false, seed % 2 == 1) + "plan_moves_dirty = true\n"
    });
}

#[test]
fn an_absorbed_block_a_plan_places_is_moved_into_the_plans_order_only_with_plan_moves_dirty() {
    for moves in [false, true] {
        let dev = Arc::new(MemDevice::new(DEVICE_BYTES));
        let cfg = manual_absorbing(true) + &format!("plan_moves_dirty = {moves}\n");
        let mut h = harness_with(&dev, &cfg, OpenMode::format(1));
        // Block 42 written first: absorbed into the region's first free slot.
        assert_eq!(h.write(42 * B, block(0x42)).result, Ok(()));
        assert_eq!(h.flush().result, Ok(()));
        let region = 512 * 1024..(512 + 96) * 1024;
        assert!(region.contains(&lower_of(&h, 42..43)[0]), "absorbed: {}", describe(&mut h));
        for b in [40u64, 41, 43] {
            assert_eq!(h.write(b * B, block(b as u8)).result, Ok(()));
        }
        assert_eq!(h.flush().result, Ok(()));
        // Then read 40..44 in order, twice: the plan wants them in a row.
        read_twice(&mut h, 40..44);
        let reply = message(&mut h, "apply").expect("apply");
        h.settle();
        assert_eq!(counter(&*h.stack, "job_active"), 0, "{reply}: {}", describe(&mut h));
        let lower = lower_of(&h, 40..44);
        let in_row = in_order(&lower);
        assert_eq!(in_row, moves, "moves {moves}: {lower:?}, {}", describe(&mut h));
        assert_eq!(counter(&*h.stack, "moved_blocks_count") > 0, moves);
        for b in 40u64..44 {
            let want = if b == 42 { block(0x42) } else { block(b as u8) };
            assert_eq!(read_block(&mut h, b), want, "block {b}");
        }
    }
}

/// `aligned_shared_ops` in bursts (each window of 8 requests grouped by
/// stream, so a stream's reads often follow each other on the disk) with
/// a fifth of each stream's reads taken before the read before them
/// (swapped): the stream skips a place of its sequence, then reads it (a
/// read-behind's pattern).
fn skipping_ops(rng: &mut ChaCha8Rng, count: usize) -> Vec<OpSpec> {
    let mut ops = aligned_shared_ops(rng, count);
    for w in ops.chunks_mut(8) {
        w.sort_by_key(|o| o.stream % 3);
    }
    let mut prev: std::collections::HashMap<u32, usize> = Default::default();
    for i in 0..ops.len() {
        if ops[i].op != Op::Read {
            continue;
        }
        let s = ops[i].stream;
        match prev.insert(s, i) {
            Some(j) if rng.gen_bool(0.2) => {
                let (a, b) = (ops[j].sector, ops[i].sector);
                (ops[j].sector, ops[i].sector) = (b, a);
                prev.remove(&s);
            }
            _ => {}
        }
    }
    ops
}

#[test]
fn opt_reading_behind_reads_back_what_a_byte_array_would() {
    let keys =
        ["readbehind_reads_count", "readahead_hits_count", "readahead_dropped_count", "dirty_copies_count"];
    // Odd seeds absorb writes; seeds 2, 3, 6, 7, ... read ahead too.
    let totals = oracle_seeds(&keys, skipping_ops, 2000, |seed| {
        let ahead = if seed % 4 >= 2 { "readahead_bytes = \"8K\"\n" } else { "" };
        tiny_copies(6 + seed % 5, 0, seed % 2 == 1, false, seed % 3 == 1)
            + "readbehind_bytes = \"8K\"\nreadahead_memory_bytes = \"24K\"\n"
            + ahead
    });
    // Skipped slots were read with the read after them and served from
    // memory, writes dropped them, many times; no read returned stale bytes.
    assert_each_exercised(&keys, &totals);
}

#[test]
fn opt_reading_behind_crash_at_every_flush_and_random_points_keeps_flushed_data() {
    crash_seeds(skipping_ops, |seed| {
        tiny_copies(6, 0, seed % 2 == 1, false, false)
            + "readbehind_bytes = \"8K\"\nreadahead_memory_bytes = \"24K\"\n"
    });
}

#[test]
fn a_read_that_skips_slots_of_its_sequence_reads_them_too_and_serves_them_next_until_a_write() {
    let dev = Arc::new(MemDevice::new(DEVICE_BYTES));
    let cfg = manual() + "readbehind_bytes = \"8K\"\n";
    let mut h = mapped_harness_with(&dev, &cfg);
    let lower = lower_of(&h, 10..14);
    assert!(in_order(&lower), "laid out in order: {}", describe(&mut h));
    let c = |h: &Harness, k| counter(&*h.stack, k);
    // The first read jumps into the sequence: nothing behind it.
    assert_eq!(read_block(&mut h, 10), block(10));
    // The next skips block 11's slot: it reads it too.
    assert_eq!(read_block(&mut h, 12), block(12));
    assert_eq!((c(&h, "readbehind_reads_count"), c(&h, "readbehind_read_blocks")), (1, 1));
    let before = h.stats.lower_count;
    assert_eq!(read_block(&mut h, 11), block(11));
    assert_eq!(c(&h, "readahead_hits_count"), 1);
    assert_eq!(h.stats.lower_count, before, "answered from memory");
    // That read did not move the stream's place: the next goes on from
    // block 12's slot, with nothing to read behind.
    assert_eq!(read_block(&mut h, 13), block(13));
    assert_eq!(c(&h, "readbehind_reads_count"), 1, "{}", describe(&mut h));
    // Two slots skipped (8 KiB, the most): both read.
    assert_eq!(read_block(&mut h, 10), block(10));
    assert_eq!(read_block(&mut h, 13), block(13));
    assert_eq!((c(&h, "readbehind_reads_count"), c(&h, "readbehind_read_blocks")), (2, 3));
    // A write to block 11 drops the held bytes: the read after it sees the write.
    assert_eq!(h.write(11 * B, block(0x71)).result, Ok(()));
    assert!(c(&h, "readahead_dropped_count") >= 1);
    assert_eq!(read_block(&mut h, 11), block(0x71));
    assert_eq!(read_block(&mut h, 12), block(12), "the other block held went with the buffer, still right");
    // The disk went elsewhere in between (another connection read block
    // 13): reading behind would position the head for the skipped slots,
    // so only the read's own slot is read.
    assert_eq!(read_block(&mut h, 10), block(10));
    let other = Request { stream: StreamId(1 << 20), ..Request::new(ReqId(0), Op::Read, 13 * B, B as u32) };
    assert_eq!(h.call(other).result, Ok(()));
    assert_eq!(read_block(&mut h, 12), block(12));
    assert_eq!(c(&h, "readbehind_reads_count"), 2, "{}", describe(&mut h));
    // A gap wider than `readbehind_bytes` is not read.
    let mut narrow = mapped_harness_with(
        &Arc::new(MemDevice::new(DEVICE_BYTES)),
        &(manual() + "readbehind_bytes = \"4K\"\n"),
    );
    assert_eq!(read_block(&mut narrow, 10), block(10));
    assert_eq!(read_block(&mut narrow, 13), block(13));
    assert_eq!(c(&narrow, "readbehind_reads_count"), 0);
}

#[test]
fn a_failed_read_behind_or_ahead_is_read_again_as_the_piece_alone() {
    for keys in ["readbehind_bytes = \"8K\"\n", "readahead_bytes = \"8K\"\n"] {
        let dev = Arc::new(MemDevice::new(DEVICE_BYTES));
        let mut h = mapped_harness_with(&dev, &(manual() + keys));
        let c = |h: &Harness, k| counter(&*h.stack, k);
        // Block 12 reads 11 behind it, or block 11 reads 12 and 13 ahead,
        // after a read of block 10.
        let b = if keys.starts_with("readbehind") { 12 } else { 11 };
        (h.fail_lower_reads, h.lower_failures_left) = (true, Some(0));
        // The extended read fails, and the piece's own read again: the
        // read fails.
        assert_eq!(read_block(&mut h, 10), block(10));
        h.lower_failures_left = Some(2);
        assert!(h.read(b * B, B as u32).result.is_err(), "{keys}");
        // The extended read fails once: the piece alone is read again,
        // and nothing is held.
        assert_eq!(read_block(&mut h, 10), block(10));
        h.lower_failures_left = Some(1);
        let before = h.stats.lower_count;
        assert_eq!(read_block(&mut h, b), block(b as u8), "{keys}");
        assert_eq!(h.stats.lower_count, before + 2, "{keys}: the extended read, then the piece's own");
        assert_eq!(c(&h, "readahead_failed_count"), 2, "{keys}");
        assert_eq!(c(&h, "readbehind_reads_count") + c(&h, "readahead_reads_count"), 2, "{keys}");
        assert_eq!(c(&h, "readahead_held_blocks"), 0, "{keys}");
    }
}

#[test]
fn a_read_from_memory_leaves_the_streams_place_where_its_last_lower_read_ended() {
    let dev = Arc::new(MemDevice::new(DEVICE_BYTES));
    let mut h = mapped_harness_over(&dev, &(manual() + "readbehind_bytes = \"8K\"\n"), 10..16);
    let lower = lower_of(&h, 10..16);
    assert!(in_order(&lower), "laid out in order: {}", describe(&mut h));
    let c = |h: &Harness, k| counter(&*h.stack, k);
    assert_eq!(read_block(&mut h, 10), block(10));
    assert_eq!(read_block(&mut h, 12), block(12));
    assert_eq!(read_block(&mut h, 11), block(11));
    assert_eq!(c(&h, "readahead_hits_count"), 1);
    // The place is after block 12's slot, where the disk's last request
    // ended: block 13's slot, skipped, is read with block 14's.
    let before = h.stats.lower_count;
    assert_eq!(read_block(&mut h, 14), block(14));
    assert_eq!(
        (c(&h, "readbehind_reads_count"), c(&h, "readbehind_read_blocks")),
        (2, 2),
        "{}",
        describe(&mut h)
    );
    assert_eq!(read_block(&mut h, 13), block(13));
    assert_eq!(h.stats.lower_count, before + 1, "block 13 from memory");
}

/// Blocks of 1 MiB, so that one upper request spans many slots: the
/// region (56 MiB) at 64 MiB of a 128 MiB device, no automatic plans,
/// blocks 0..40 written (each sector tagged by its number, [`big_bytes`]),
/// read in order twice and laid out in that order.
fn big_blocks_mapped(keys: &str) -> Harness {
    const DEV: u64 = 128 << 20;
    let cfg = format!(
        "version = 1\n[[layer]]\ntarget = \"opt\"\nblock_bytes = \"1M\"\nopt_offset = \"64M\"\nopt_length = \"56M\"\n\
         journal_blocks = 2\nedge_weight_min = 0\nplan_interval_requests = 0\nplan_interval_ms = 0\nauto_apply = false\n\
         copy_blocks_per_step = 8\nidle_ms = 0\nweight_half_life_ms = 0\nabsorb_writes = false\n{keys}"
    );
    let stack = stack_from_toml(&cfg, DEV, OpenMode::format(1));
    let dev = Arc::new(MemDevice::new(DEV));
    let mut h = Harness::new(stack, dev as Arc<dyn BlockDevice>, ZeroLatency::default(), 1);
    bring_up(&mut h);
    for half in 0..2 {
        assert_eq!(h.write(half * 20 * MB, big_bytes(half * 20 * MB, 20 * MB)).result, Ok(()));
    }
    assert_eq!(h.flush().result, Ok(()));
    for _ in 0..2 {
        for b in 0..40 {
            assert_eq!(h.read(b * MB, MB as u32).result, Ok(()));
        }
    }
    let reply = message(&mut h, "apply").expect("apply");
    assert!(reply.contains("to copy"), "{reply}");
    h.settle();
    let lower: Vec<u64> = (0..40).map(|b| h.stack.map_extent(b * MB, MB)[0].0.expect("known")).collect();
    assert!(lower.windows(2).all(|w| w[1] == w[0] + MB), "laid out in order: {}", describe(&mut h));
    h
}

const MB: u64 = 1 << 20;

/// Bytes `[at, at + n)` of the volume as [`big_blocks_mapped`] writes them.
fn big_bytes(at: u64, n: u64) -> Vec<u8> {
    (at..at + n).map(|i| ((i / 512) % 251) as u8).collect()
}

#[test]
fn reading_behind_and_ahead_of_one_request_stays_within_one_lower_request() {
    let mut h = big_blocks_mapped(
        "readbehind_bytes = \"4M\"\nreadahead_bytes = \"16M\"\nreadahead_memory_bytes = \"32M\"\n",
    );
    let c = |h: &Harness, k| counter(&*h.stack, k);
    let read = |h: &mut Harness, at: u64, n: u64| {
        let r = h.read(at, n as u32);
        assert_eq!(r.result, Ok(()), "{at}+{n}");
        assert!(r.data.expect("data").as_ref() == big_bytes(at, n).as_slice(), "bytes {at}+{n}");
    };
    read(&mut h, 0, MB);
    // 24 blocks from block 4: the 3 skipped read behind, and ahead only
    // what one request of 32 MiB has room for (5 of the 16).
    let before = h.stats.lower_count;
    read(&mut h, 4 * MB, 24 * MB);
    assert_eq!(h.stats.lower_count, before + 1, "one lower request");
    assert_eq!((c(&h, "readbehind_read_blocks"), c(&h, "readahead_read_blocks")), (3, 5));
    // Both sides held, each at its own bytes.
    for (at, n) in [(MB, 3 * MB), (28 * MB, 5 * MB), (2 * MB + 512, 512), (32 * MB, MB)] {
        read(&mut h, at, n);
    }
    assert_eq!(h.stats.lower_count, before + 1, "the rest from memory");
    // The longest request on no slot's start or end spans 33 slots: no
    // room beside it, read as it is.
    read(&mut h, 5 * MB + 512, 32 * MB);
    assert_eq!((c(&h, "readbehind_read_blocks"), c(&h, "readahead_read_blocks")), (3, 5));
}

#[test]
fn only_writes_that_would_seek_at_home_are_absorbed_and_the_plans_share_stays_free() {
    let dev = Arc::new(MemDevice::new(DEVICE_BYTES));
    let mut h = harness_with(&dev, &manual_absorbing(true), OpenMode::format(1));
    let c = |h: &Harness, k| counter(&*h.stack, k);
    // A bulk write (more than absorb_blocks_max = 16 blocks) goes home.
    assert_eq!(h.write(0, vec![1; 32 * B as usize]).result, Ok(()));
    assert_eq!((c(&h, "absorbed_writes_count"), c(&h, "absorb_skipped_bulk_count")), (0, 1));
    // A sequential copy, one block a write: its first write is absorbed,
    // those going on from the one before go home.
    for b in 40..48u64 {
        assert_eq!(h.write(b * B, block(b as u8)).result, Ok(()));
    }
    assert_eq!((c(&h, "absorbed_writes_count"), c(&h, "absorb_skipped_sequential_count")), (1, 7));
    // Scattered writes are absorbed until half the 20 slots are left
    // (absorb_reserve_pct = 50), then go home.
    for i in 0..15u64 {
        let b = 60 + 3 * i;
        assert_eq!(h.write(b * B, block(0x80 + i as u8)).result, Ok(()));
    }
    assert_eq!(c(&h, "absorbed_blocks_count"), 10, "{}", describe(&mut h));
    assert_eq!(c(&h, "absorb_skipped_reserve_count"), 6);
    let verified = message(&mut h, "verify").expect("verify");
    assert!(verified.ends_with("10 mapped, 10 free"), "{verified}");
    // Every write reads back, wherever it went.
    assert_eq!(h.flush().result, Ok(()));
    assert_eq!(read_block(&mut h, 31), block(1));
    for b in 40..48u64 {
        assert_eq!(read_block(&mut h, b), block(b as u8));
    }
    for i in 0..15u64 {
        assert_eq!(read_block(&mut h, 60 + 3 * i), block(0x80 + i as u8));
    }
}

#[test]
fn status_names_the_place_the_reads_served_from_home_give_the_region() {
    // The tiny region sits at 512 KiB of a 1 MiB device (the volume is the
    // rest, 928 KiB). Before any read from home: the configured place.
    let dev = Arc::new(MemDevice::new(DEVICE_BYTES));
    let mut h = harness(&dev, OpenMode::format(1));
    assert_eq!(counter(&*h.stack, "home_reads_count"), 0);
    assert_eq!(counter(&*h.stack, "opt_offset_best"), 512 << 10);
    // Reads near the volume's start, one far up: the start's place.
    for b in [2u64, 3, 4, 2, 3, 200] {
        assert_eq!(h.read(b * B, B as u32).result, Ok(()));
    }
    assert_eq!(counter(&*h.stack, "home_reads_count"), 6);
    let best = counter(&*h.stack, "opt_offset_best");
    assert!((2 * B..=4 * B).contains(&best) && best % B == 0, "{best}: {}", describe(&mut h));
    // Blocks 10..14 read often and placed in the region: reads of them no
    // longer count; more reads up high move the place there.
    let mut h = mapped_harness(&Arc::new(MemDevice::new(DEVICE_BYTES)));
    let before = counter(&*h.stack, "home_reads_count");
    for _ in 0..5 {
        for b in 10..14u64 {
            assert_eq!(h.read(b * B, B as u32).result, Ok(()));
        }
    }
    assert_eq!(counter(&*h.stack, "home_reads_count"), before, "{}", describe(&mut h));
    for _ in 0..2 * before + 1 {
        assert_eq!(h.read(190 * B, B as u32).result, Ok(()));
    }
    let best = counter(&*h.stack, "opt_offset_best");
    assert!((189 * B..=190 * B).contains(&best), "{best}: {}", describe(&mut h));
}
