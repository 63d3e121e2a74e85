//! The `replica` target: the oracle and the crash check under a workload
//! that declares free space by discards and repeats read patterns (so
//! replicas are created, used, invalidated and reclaimed many times per
//! case), every cell of the thesis's Table 4.1 built by hand in the det
//! harness with negative controls for RR and B, and bad input.

use bytes::Bytes;
use layoutd_core::{Instant, Op, OpenMode, ReqId, Request, StreamId};
use layoutd_runtime::det::{Harness, Timing};
use layoutd_runtime::testkit::{bring_up, crash_check, oracle_check, stack_from_toml, OpSpec};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;
use std::sync::Arc;

const DEVICE_BYTES: u64 = 1 << 20;

/// 512-byte blocks, small constants: patterns of a few reads replicate,
/// and a few hundred free blocks fill up so reclamation runs.
const SMALL: &str = r#"version = 1
[[layer]]
target = "replica"
block_bytes = 512
meta_record_bytes = 4096
history_count = 4
close_blocks = 4
pass_through_close_count = 3
queue_commit_count = 3
queue_sequential_cancel_count = 2
replicate_after_commit_count = 4
free_extent_blocks_min = 8
reclaim_range_blocks = 16
reclaim_candidates_min = 6
reclaim_bottom_pct = 30
reclaim_age_max = 3
reclaim_wait_divisor = 8
snapshot_bytes = "16KiB"
snapshot_interval_ms = 1
"#;

/// A file-system-like workload: discards declare the top of the volume
/// free (some of it is written again: the file system allocating), and
/// several patterns of scattered small reads repeat, with writes over
/// some of their blocks in between.
fn pattern_ops(rng: &mut ChaCha8Rng, rounds: usize) -> Vec<OpSpec> {
    let total = (DEVICE_BYTES - 8192) / 512;
    let free_from = total - 96;
    let op = |op, sector, sectors, stream| OpSpec { op, sector, sectors, fua: false, stream };
    let mut ops: Vec<OpSpec> = (0..3).map(|i| op(Op::Trim, free_from + i * 32, 32, 0)).collect();
    let patterns: Vec<Vec<(u64, u32)>> = (0..6)
        .map(|_| {
            (0..rng.gen_range(6..12))
                .map(|_| (rng.gen_range(0..free_from - 8), rng.gen_range(1..4)))
                .collect()
        })
        .collect();
    for round in 0..rounds {
        for (p, pat) in patterns.iter().enumerate() {
            if (round + p) % 3 == 0 && round > 0 {
                continue;
            }
            for &(s, n) in pat {
                ops.push(op(Op::Read, s, n, p as u32 + 1));
            }
            let k = rng.gen_range(0..pat.len());
            match rng.gen_range(0..10) {
                0..=3 => ops.push(op(Op::Write, pat[k].0, pat[k].1, 0)),
                4 => ops.push(op(Op::Flush, 0, 0, 0)),
                5 => ops.push(op(Op::Write, free_from + rng.gen_range(0..96), rng.gen_range(1..9), 0)),
                6 => ops.push(op(Op::Trim, free_from + rng.gen_range(0..90), rng.gen_range(1..20), 0)),
                9 => ops.push(op(Op::Read, free_from - 4 + rng.gen_range(0..96), rng.gen_range(1..9), 0)),
                7 => ops.push(OpSpec { fua: true, ..op(Op::Write, pat[k].0, 1, 0) }),
                _ => ops.push(op(Op::WriteZeroes, free_from + rng.gen_range(0..90), rng.gen_range(1..9), 0)),
            }
        }
    }
    ops
}

fn counter(h: &Harness<impl Timing>, key: &str) -> u64 {
    let layers = h.stack.layer_statuses();
    let found = layers.iter().flat_map(|st| st.counters.iter()).find(|c| c.0 == key);
    found.unwrap_or_else(|| panic!("no counter {key}")).1
}

#[test]
fn replica_patterns_read_back_what_a_byte_array_would_and_replicas_live_and_die() {
    let mut totals = BTreeMap::new();
    for seed in 0..6u64 {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let ops = pattern_ops(&mut rng, 14);
        for depth in [1, 4] {
            let mut h = oracle_check(SMALL, DEVICE_BYTES, seed, &ops, depth);
            assert_eq!(h.stack.message(h.now, "1:verify"), Ok("maps consistent".into()));
            for key in [
                "replicas_created_blocks",
                "replicas_used_blocks",
                "replicas_invalidated_blocks",
                "replicas_reclaimed_blocks",
                "replicas_dropped_by_allocation_blocks",
                "queues_committed_count",
                "reads_zero_bytes",
            ] {
                *totals.entry(key).or_insert(0) += counter(&h, key);
            }
        }
    }
    eprintln!("{totals:?}");
    for (key, v) in &totals {
        assert!(*v >= 12, "{key} = {v}: the workload should exercise it many times (twice per case)");
    }
}

#[test]
fn with_readahead_and_write_batches_patterns_read_back_what_a_byte_array_would_after_any_crash() {
    let text = format!("{SMALL}readahead_blocks = 8\nwrite_batch_count = 5\npropagate_bytes_max = 1024\n");
    let mut totals = BTreeMap::new();
    for seed in 0..6u64 {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let ops = pattern_ops(&mut rng, 14);
        for depth in [1, 4] {
            let mut h = oracle_check(&text, DEVICE_BYTES, seed, &ops, depth);
            assert_eq!(h.stack.message(h.now, "1:verify"), Ok("maps consistent".into()));
            for key in ["reads_readahead_count", "readahead_dropped_count", "replicas_propagated_blocks"] {
                *totals.entry(key).or_insert(0) += counter(&h, key);
            }
        }
        let cuts = crash_check(&text, DEVICE_BYTES, seed, &ops[..ops.len() / 2], 4, 20);
        assert!(cuts > 10, "too few cut points: {cuts}");
    }
    eprintln!("{totals:?}");
    for (key, v) in &totals {
        assert!(*v >= 12, "{key} = {v}: the workload should exercise it many times");
    }
}

#[test]
fn replica_crash_at_every_flush_and_random_points_keeps_flushed_data() {
    for seed in 0..4u64 {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let ops = pattern_ops(&mut rng, 8);
        let cuts = crash_check(SMALL, DEVICE_BYTES, seed, &ops, 4, 30);
        assert!(cuts > 20, "too few cut points: {cuts}");
    }
}

// ---------------------------------------------------------------- Table 4.1

/// Completes lower requests after a latency by kind, in submission order
/// among equal instants: reads, foreground writes and the target's own
/// (background) writes each get their own, so a test decides which of two
/// overlapping requests lands first.
struct Scripted {
    read_ns: u64,
    write_ns: u64,
    background_ns: u64,
    queue: BTreeMap<(Instant, u64), u64>,
}

impl Scripted {
    fn new(read_ms: u64, write_ms: u64, background_ms: u64) -> Scripted {
        let ms = 1_000_000;
        Scripted {
            read_ns: read_ms * ms,
            write_ns: write_ms * ms,
            background_ns: background_ms * ms,
            queue: BTreeMap::new(),
        }
    }
}

impl Timing for Scripted {
    fn submit(&mut self, now: Instant, req: &Request, tag: u64, _rng: &mut ChaCha8Rng) {
        let ns = match (req.background, req.op) {
            (true, _) => self.background_ns,
            (false, Op::Read) => self.read_ns,
            _ => self.write_ns,
        };
        self.queue.insert((now.add_ns(ns), tag), tag);
    }

    fn next_completion(&self) -> Option<Instant> {
        self.queue.keys().next().map(|k| k.0)
    }

    fn complete(&mut self, now: Instant, _rng: &mut ChaCha8Rng) -> Option<u64> {
        let ((at, _), tag) = self.queue.pop_first()?;
        assert!(at <= now);
        Some(tag)
    }

    fn busy(&self) -> bool {
        !self.queue.is_empty()
    }
}

const B: u64 = 4096;
/// Originals far apart (more than `close_blocks`), and where their
/// replicas land: the free extent starts at block 128.
const A: u64 = 10;
const BB: u64 = 40;
const D: u64 = 70;
const E: u64 = 100;
const L_A: u64 = 128;
const L_D: u64 = 130;

fn cell_config(checks: bool) -> String {
    format!(
        "version = 1\n[[layer]]\ntarget = \"replica\"\nmeta_record_bytes = 4096\nhistory_count = 4\n\
         close_blocks = 2\npass_through_close_count = 2\nqueue_commit_count = 2\n\
         queue_sequential_cancel_count = 2\nreplicate_after_commit_count = 0\nfree_extent_blocks_min = 4\n\
         reclaim_range_blocks = 8\nreclaim_candidates_min = 4\nconflict_checks = \"{}\"\n\
         [[layer]]\ntarget = \"trace\"\n",
        if checks { "on" } else { "off-unsafe-for-tests" }
    )
}

/// Base stream `k` (a process, or a connection live): the stream
/// detector's ids are `base * RUN_SLOTS + run`, and run 0 is the base's own.
fn base_stream(k: u32) -> StreamId {
    StreamId(k * layoutd_core::streams::RUN_SLOTS)
}

fn read(block: u64, stream: u32) -> Request {
    read_on(block, base_stream(stream))
}

fn read_on(block: u64, stream: StreamId) -> Request {
    Request { stream, ..Request::new(ReqId(0), Op::Read, block * B, B as u32) }
}

fn write(block: u64, fill: u8, fua: bool) -> Request {
    Request { fua, ..Request::write(ReqId(0), block * B, Bytes::from(vec![fill; B as usize])) }
}

fn fill_of(c: &layoutd_core::Completion) -> u8 {
    assert_eq!(c.result, Ok(()));
    let d = c.data.as_ref().expect("data");
    assert!(d.iter().all(|&x| x == d[0]), "one fill per block");
    d[0]
}

fn fill(block: u64) -> u8 {
    (block % 250) as u8 + 1
}

/// Blocks 128.. declared free; A, B, D, E written; A and B replicated
/// (at 128 and 129) by two reads on stream 0; every latency 1 ms. Then the
/// timing is set to `timing` for the cell.
fn setup(checks: bool, timing: Scripted) -> Harness<Scripted> {
    let dev = Arc::new(layoutd_disk::MemDevice::new(DEVICE_BYTES));
    let stack = stack_from_toml(&cell_config(checks), DEVICE_BYTES, OpenMode::format(1));
    let mut h = Harness::new(stack, dev, Scripted::new(1, 1, 1), 1);
    bring_up(&mut h);
    let volume_blocks = h.stack.size_bytes() / B;
    let trim = Request::new(ReqId(0), Op::Trim, 128 * B, ((volume_blocks - 128) * B) as u32);
    assert_eq!(h.call(trim).result, Ok(()));
    for blk in [A, BB, D, E] {
        assert_eq!(h.call(write(blk, fill(blk), false)).result, Ok(()));
    }
    assert_eq!(fill_of(&h.call(read(A, 0))), fill(A));
    assert_eq!(fill_of(&h.call(read(BB, 0))), fill(BB));
    h.settle();
    assert_eq!(h.stack.message(h.now, "1:map"), Ok("replica blocks 2: 128+1->10 129+1->40".into()));
    h.timing = timing;
    h
}

/// Starts the replication of D and E (to 130 and 131) and returns once
/// their replica writes are in flight.
fn replicate_d_e(h: &mut Harness<Scripted>) {
    assert_eq!(fill_of(&h.call(read(D, 0))), fill(D));
    assert_eq!(fill_of(&h.call(read(E, 0))), fill(E));
    assert_eq!(counter(h, "pending_replica_writes"), 2, "D and E's replica writes are in flight");
}

fn map(h: &mut Harness<Scripted>) -> String {
    h.stack.message(h.now, "1:map").expect("map")
}

#[test]
fn table_4_1_in_flight_read_of_an_original() {
    // new R: OK.
    let mut h = setup(true, Scripted::new(10, 1, 1));
    let (r1, r2) = (h.submit(read(D, 3)), h.submit(read(D, 4)));
    assert_eq!((fill_of(&h.wait_for(r1)), fill_of(&h.wait_for(r2))), (fill(D), fill(D)));
    // new W of the original: RC, the file system's own race; the read
    // completes, and no replica of the old bytes survives the write.
    let mut h = setup(true, Scripted::new(10, 1, 1));
    let r = h.submit(read(A, 0)); // close to stream 0's history: the original
    let w = h.submit(write(A, 0xAA, false));
    assert_eq!(h.wait_for(w).result, Ok(()));
    assert!(h.wait_for(r).result.is_ok());
    assert_eq!(counter(&h, "conflicts_rc_count"), 1);
    assert_eq!(fill_of(&h.call(read(A, 9))), 0xAA);
    // new W of a block holding a replica of it (the file system allocates
    // it): INV, the replica is dropped and the read is untouched.
    let mut h = setup(true, Scripted::new(10, 1, 1));
    let r = h.submit(read(A, 0));
    let w = h.submit(write(L_A, 0x77, false));
    assert_eq!(h.wait_for(w).result, Ok(()));
    assert_eq!(fill_of(&h.wait_for(r)), fill(A));
    assert_eq!(counter(&h, "replicas_dropped_by_allocation_blocks"), 1);
    assert_eq!(fill_of(&h.call(read(A, 9))), fill(A));
    assert_eq!(fill_of(&h.call(read(L_A, 9))), 0x77);
    assert_eq!(counter(&h, "reads_replica_count"), 0);
}

/// RR: a replica read in flight when the file system writes the block
/// holding that replica. Returns the bytes the read got.
fn rr_case(checks: bool) -> u8 {
    let mut h = setup(checks, Scripted::new(10, 1, 1));
    let r = h.submit(read(A, 7)); // a fresh stream: served from the replica at L_A
    let w = h.submit(write(L_A, 0xEE, false));
    let got = fill_of(&h.wait_for(r));
    assert_eq!(h.wait_for(w).result, Ok(()));
    assert_eq!(counter(&h, "reads_replica_count"), 1);
    assert_eq!(fill_of(&h.call(read(L_A, 9))), 0xEE);
    if checks {
        assert_eq!(counter(&h, "conflicts_rr_count"), 1);
    }
    got
}

#[test]
fn table_4_1_in_flight_read_of_a_replica() {
    // new R: OK, both from the replica.
    let mut h = setup(true, Scripted::new(10, 1, 1));
    let (r1, r2) = (h.submit(read(A, 3)), h.submit(read(A, 4)));
    assert_eq!((fill_of(&h.wait_for(r1)), fill_of(&h.wait_for(r2))), (fill(A), fill(A)));
    assert_eq!(counter(&h, "reads_replica_count"), 2);
    // new W of the original: RC; afterwards the replica is gone.
    let mut h = setup(true, Scripted::new(10, 1, 1));
    let r = h.submit(read(A, 3));
    let w = h.submit(write(A, 0xAA, false));
    assert_eq!(h.wait_for(w).result, Ok(()));
    assert!(h.wait_for(r).result.is_ok());
    assert_eq!(fill_of(&h.call(read(A, 9))), 0xAA, "never the stale replica");
    assert_eq!(counter(&h, "reads_replica_count"), 1);
    // new W of the replica's block: RR, the write waits for the read.
    assert_eq!(rr_case(true), fill(A));
}

#[test]
fn negative_control_without_rr_handling_the_replica_read_returns_the_file_systems_bytes() {
    assert_eq!(rr_case(false), 0xEE, "the check above would fail without the RR handling");
}

#[test]
fn table_4_1_in_flight_write_of_an_original() {
    // new R: RC; the replica was invalidated when the write arrived, so
    // the read goes to the original (old or new bytes: the race is the
    // file system's), and afterwards the new bytes are read.
    let mut h = setup(true, Scripted::new(1, 10, 1));
    let w = h.submit(write(A, 0xAA, false));
    let r = h.submit(read(A, 5));
    assert!(h.wait_for(r).result.is_ok());
    assert_eq!(h.wait_for(w).result, Ok(()));
    assert_eq!(counter(&h, "reads_replica_count"), 0);
    assert_eq!(fill_of(&h.call(read(A, 6))), 0xAA);
    // new W of the original: RC, both complete, in order here.
    let mut h = setup(true, Scripted::new(1, 10, 1));
    let (w1, w2) = (h.submit(write(A, 0xA1, false)), h.submit(write(A, 0xA2, false)));
    assert_eq!((h.wait_for(w1).result, h.wait_for(w2).result), (Ok(()), Ok(())));
    assert_eq!(fill_of(&h.call(read(A, 6))), 0xA2);
    // new W of a replica of it: "-", impossible: the replica was dropped
    // when the write arrived, so the block is plainly free.
    let mut h = setup(true, Scripted::new(1, 10, 1));
    let w1 = h.submit(write(A, 0xA1, false));
    let w2 = h.submit(write(L_A, 0x55, false));
    assert_eq!((h.wait_for(w1).result, h.wait_for(w2).result), (Ok(()), Ok(())));
    assert_eq!(counter(&h, "conflicts_b_count") + counter(&h, "conflicts_rr_count"), 0);
    assert_eq!((fill_of(&h.call(read(A, 6))), fill_of(&h.call(read(L_A, 6)))), (0xA1, 0x55));
}

/// B: a replica write in flight when the file system writes (FUA) the
/// block it goes to. Returns what the block holds afterwards, and the
/// trace of the lower writes to it: (submit, complete, fua, background).
fn b_case(checks: bool) -> (u8, Vec<(u64, u64, bool, bool)>) {
    let mut h = setup(checks, Scripted::new(1, 1, 10));
    h.take_records();
    replicate_d_e(&mut h);
    let w = h.submit(write(L_D, 0xBB, true));
    assert_eq!(h.wait_for(w).result, Ok(()));
    let f = h.flush();
    assert_eq!(f.result, Ok(()));
    h.settle();
    if checks {
        assert_eq!(counter(&h, "conflicts_b_count"), 1);
    }
    assert!(!map(&mut h).contains("130+"), "the file system took block 130: no replica there");
    let got = fill_of(&h.call(read(L_D, 9)));
    let trace: Vec<(u64, u64, bool, bool)> = h
        .take_records()
        .iter()
        .filter(|r| r.op == Op::Write && r.offset_bytes == L_D * B)
        .map(|r| (r.submit.as_ns(), r.complete.as_ns(), r.fua, r.length_bytes == B as u32))
        .collect();
    (got, trace)
}

#[test]
fn table_4_1_in_flight_write_of_a_replica() {
    // new R of the original: OK, not held.
    let mut h = setup(true, Scripted::new(1, 1, 10));
    replicate_d_e(&mut h);
    assert_eq!(fill_of(&h.call(read(D, 9))), fill(D));
    assert_eq!(counter(&h, "pending_replica_writes"), 2, "answered while the replica writes are in flight");
    // new W of the original: INV, the replica is never recorded.
    let mut h = setup(true, Scripted::new(1, 1, 10));
    replicate_d_e(&mut h);
    assert_eq!(h.call(write(D, 0xDD, false)).result, Ok(()));
    h.settle();
    assert_eq!(counter(&h, "conflicts_inv_count"), 1);
    assert_eq!(map(&mut h), "replica blocks 3: 128+1->10 129+1->40 131+1->100");
    assert_eq!(fill_of(&h.call(read(D, 9))), 0xDD);
    // new W of the replica's block: B, held until the replica write is
    // done, then issued with its FUA; the block ends with the file
    // system's bytes.
    let (got, trace) = b_case(true);
    assert_eq!(got, 0xBB);
    assert_eq!(trace.len(), 2, "the replica write, then the file system's");
    let (replica, fs) = (trace[0], trace[1]);
    assert!(fs.0 >= replica.1, "the file system's write went below after the replica write completed");
    assert!(fs.2, "with its FUA");
}

#[test]
fn negative_control_without_b_handling_the_replica_write_clobbers_the_file_system() {
    let (got, _) = b_case(false);
    assert_eq!(got, fill(D), "the check above would fail without the B handling");
}

// ------------------------------------------------- streams, queue, window

/// The cell setup's stack with extra keys, formatted, blocks 128.. free,
/// blocks 0..128 written with their fill; every latency 1 ms.
fn streams_setup(extra: &str) -> Harness<Scripted> {
    let mut text = cell_config(true);
    for line in extra.lines() {
        let key = line.split('=').next().expect("key").trim();
        let old = text.lines().find(|l| l.starts_with(&format!("{key} ="))).map(|l| format!("{l}\n"));
        text = text.replace(&old.unwrap_or_default(), "");
    }
    let text = text.replace("conflict_checks", &format!("{extra}\nconflict_checks"));
    let dev = Arc::new(layoutd_disk::MemDevice::new(DEVICE_BYTES));
    let stack = stack_from_toml(&text, DEVICE_BYTES, OpenMode::format(1));
    let mut h = Harness::new(stack, dev, Scripted::new(1, 1, 1), 1);
    bring_up(&mut h);
    let volume_blocks = h.stack.size_bytes() / B;
    let trim = Request::new(ReqId(0), Op::Trim, 128 * B, ((volume_blocks - 128) * B) as u32);
    assert_eq!(h.call(trim).result, Ok(()));
    for blk in 0..128 {
        assert_eq!(h.call(write(blk, fill(blk), false)).result, Ok(()));
    }
    h
}

#[test]
fn reads_close_to_enough_history_pass_through_and_a_mostly_sequential_queue_is_cancelled() {
    let mut h = streams_setup("");
    // 3 then 4: the second is close to one entry (pass-through needs 2).
    for (blk, stream) in [(3, 1), (4, 1), (5, 1)] {
        assert_eq!(fill_of(&h.call(read(blk, stream))), fill(blk));
    }
    // 5 is close to 3 and 4: passes through without being a candidate.
    assert_eq!(counter(&h, "reads_sequential_count"), 1);
    assert_eq!(counter(&h, "candidates_count"), 2);
    // The queue (3, 4) had one sequential pair of one: >= 2 needed to
    // cancel, so it committed.
    assert_eq!(counter(&h, "queues_committed_count"), 1);
    let mut h = streams_setup("queue_sequential_cancel_count = 1");
    for blk in [3, 4] {
        h.call(read(blk, 1));
    }
    h.settle();
    assert_eq!(counter(&h, "queues_cancelled_noise_count"), 1);
    assert_eq!(counter(&h, "replicas_created_blocks"), 0);
}

#[test]
fn a_queue_that_does_not_fill_in_time_is_cancelled_and_a_commit_keeps_replicating() {
    let mut h = streams_setup("queue_commit_count = 3\nqueue_timeout_ms = 2000");
    h.call(read(10, 1));
    let t = h.now; // the queue's first candidate
    h.call(read(40, 1));
    h.run_until(t.add_ms(1999));
    assert_eq!(counter(&h, "queues_cancelled_timeout_count"), 0);
    h.run_until(t.add_ms(2001));
    assert_eq!(counter(&h, "queues_cancelled_timeout_count"), 1);
    assert_eq!(counter(&h, "candidates_queued"), 0);
    // Committed: the next replicate_after_commit_count reads are
    // replicated whatever they are (here sequential ones).
    let mut h = streams_setup("replicate_after_commit_count = 3");
    for blk in [10, 40, 41, 42, 43, 44] {
        h.call(read(blk, 1));
    }
    h.settle();
    assert_eq!(counter(&h, "queues_committed_count"), 1);
    assert_eq!(counter(&h, "replicas_created_blocks"), 2 + 3, "the queue, then the next 3 reads");
}

#[test]
fn congestion_backs_off_for_the_configured_reads() {
    // One replica write in flight counts as congested: the second commit
    // backs off for 4 reads.
    let mut h = streams_setup("congestion_in_flight_max = 1\ncongestion_backoff_reads = 5");
    h.timing = Scripted::new(1, 1, 50);
    for blk in [10, 40] {
        h.call(read(blk, 1));
    }
    assert_eq!(counter(&h, "congestion_backoffs_count"), 1);
    assert_eq!(counter(&h, "candidates_count"), 2);
    for blk in [70, 100, 13, 43, 73] {
        h.call(read(blk, 1));
    }
    assert_eq!(counter(&h, "candidates_count"), 2, "backing off for 5 reads: no candidates");
    h.call(read(103, 1));
    assert_eq!(counter(&h, "candidates_count"), 3, "the back-off is over");
    h.settle();
}

#[test]
fn the_defaults_are_the_thesis_constants() {
    let dev = Arc::new(layoutd_disk::MemDevice::new(64 << 20));
    let stack =
        stack_from_toml("version = 1\n[[layer]]\ntarget = \"replica\"\n", 64 << 20, OpenMode::format(1));
    let mut h = Harness::new(stack, dev, Scripted::new(1, 1, 1), 1);
    bring_up(&mut h);
    let st = h.stack.status();
    let get = |k: &str| st.config.iter().find(|c| c.0 == k).map(|c| c.1.clone()).unwrap();
    for (k, v) in [
        ("history_count", "64"),
        ("close_blocks", "1000"),
        ("pass_through_close_count", "8"),
        ("queue_commit_count", "8"),
        ("queue_sequential_cancel_count", "4"),
        ("replicate_after_commit_count", "64"),
        ("queue_timeout_ms", "2000"),
        ("free_extent_blocks_min", "1024"),
        ("congestion_backoff_reads", "256"),
        ("reclaim_range_blocks", "1024"),
        ("reclaim_candidates_min", "512"),
        ("reclaim_bottom_pct", "10"),
        ("reclaim_age_max", "250"),
        ("reclaim_wait_divisor", "250"),
        ("replica_choice", "lowest"),
        ("replication", "inline"),
        ("write_batch_count", "0"),
        ("readahead_blocks", "0"),
        ("extent_per_stream", "false"),
    ] {
        assert_eq!(get(k), v, "{k}");
    }
}

// ------------------------------------------------------------- bad input

fn build(text: &str, device_bytes: u64, mode: OpenMode) -> Result<layoutd_core::Stack, String> {
    let cfg = layoutd_core::config::StackConfig::parse(text, "t.toml").map_err(|e| e.0)?;
    layoutd_targets::build_stack(&cfg, device_bytes, mode).map_err(|e| e.0)
}

#[test]
fn impossible_constants_fail_naming_the_key() {
    let base = "version = 1\n[[layer]]\ntarget = \"replica\"\n";
    let cases = [
        ("block_bytes = 1000", "`block_bytes`"),
        ("history_count = 0", "`history_count`"),
        ("reclaim_candidates_min = 1024", "`reclaim_candidates_min`"),
        ("free_extent_blocks_min = 4096", "`free_extent_blocks_min`"),
        ("queue_sequential_cancel_count = 9", "`queue_sequential_cancel_count`"),
        ("reclaim_bottom_pct = 0", "`reclaim_bottom_pct`"),
        ("replica_choice = \"best\"", "`replica_choice`"),
        ("conflict_checks = \"off\"", "`conflict_checks`"),
        ("propagate_bytes_max = 100", "`propagate_bytes_max`"),
        ("readahead_blocks = 5000", "`readahead_blocks`"),
        ("write_batch_count = 5000", "`write_batch_count`"),
        ("write_run_bytes_max = \"64MiB\"", "`write_run_bytes_max`"),
        ("write_run_bytes_max = 100", "`write_run_bytes_max`"),
        // A record goes down as one request (fuzz_configs: 40012 KiB panicked in bring-up).
        ("meta_record_bytes = \"40012KiB\"", "`meta_record_bytes`"),
        ("typo = 1", "`typo`"),
    ];
    for (line, want) in cases {
        let e = build(&format!("{base}{line}\n"), 64 << 20, OpenMode::format(1))
            .err()
            .unwrap_or_else(|| panic!("accepted: {line}"));
        assert!(e.contains(want) && e.contains("replica"), "{e:?} should name {want}");
        assert_eq!(e.lines().count(), 1, "one line: {e}");
    }
    let e = build(base, 64 << 10, OpenMode::format(1)).err().expect("too small");
    assert!(e.contains("too small"), "{e}");
}

#[test]
fn the_example_configs_format_and_serve() {
    for name in ["replica.toml", "replica-all-goals.toml"] {
        let path = format!("{}/../../examples/{name}", env!("CARGO_MANIFEST_DIR"));
        let text = std::fs::read_to_string(path).expect("example");
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let ops = pattern_ops(&mut rng, 2);
        let h = oracle_check(&text, 16 << 20, 3, &ops, 4);
        assert_eq!(
            counter(&h, "replica_blocks"),
            0,
            "512-byte reads: below the 4 KiB block, never replicated"
        );
    }
}

/// Opens `image` (unclean) and returns the open's error, if it failed.
fn open_error(image: Arc<layoutd_disk::MemDevice>, text: &str) -> Option<String> {
    use layoutd_disk::BlockDevice;
    let contents = |d: &layoutd_disk::MemDevice| {
        let mut v = vec![0u8; DEVICE_BYTES as usize];
        d.read_at(&mut v, 0).expect("read");
        v
    };
    let stack = stack_from_toml(text, DEVICE_BYTES, OpenMode::Open { clean: false, accept_loss: false });
    let mut h = Harness::new(stack, image.clone(), Scripted::new(1, 1, 1), 1);
    let before = contents(&image);
    let r = h.bring_up().err().or_else(|| {
        let st = h.stack.layer_statuses();
        st.iter().flat_map(|s| s.config.iter()).find(|c| c.0 == "error").map(|c| c.1.clone())
    });
    assert!(contents(&image) == before, "nothing written while refusing");
    r
}

#[test]
fn a_device_without_a_region_record_or_with_a_corrupt_one_is_refused_in_one_line() {
    use layoutd_disk::BlockDevice;
    let text = cell_config(true);
    let blank = Arc::new(layoutd_disk::MemDevice::new(DEVICE_BYTES));
    let e = open_error(blank, &text).expect("refused");
    assert!(e.contains("no readable region record") && e.contains("layoutd format"), "{e}");
    assert_eq!(e.lines().count(), 1);
    // Format, then damage both copies.
    let dev = Arc::new(layoutd_disk::MemDevice::new(DEVICE_BYTES));
    let stack = stack_from_toml(&text, DEVICE_BYTES, OpenMode::format(1));
    let mut h = Harness::new(stack, dev.clone(), Scripted::new(1, 1, 1), 1);
    bring_up(&mut h);
    let meta = h.stack.size_bytes();
    assert_eq!(open_error(dev.clone(), &text), None, "a formatted device opens");
    for copy in 0..2u64 {
        dev.write_at(&[0xFF; 16], meta + copy * 4096 + 100).unwrap();
    }
    let e = open_error(dev, &text).expect("refused");
    assert!(e.contains("crc32c") && e.contains(&meta.to_string()), "{e}");
}

// ------------------------------------------------------------ persistence

fn persist_config() -> String {
    cell_config(true).replace(
        "conflict_checks",
        "snapshot_bytes = \"16KiB\"\nsnapshot_interval_ms = 60000\nconflict_checks",
    )
}

fn open_on(dev: &Arc<layoutd_disk::MemDevice>, mode: OpenMode) -> Harness<Scripted> {
    let stack = stack_from_toml(&persist_config(), DEVICE_BYTES, mode);
    let mut h = Harness::new(stack, dev.clone(), Scripted::new(1, 1, 1), 1);
    bring_up(&mut h);
    h
}

/// Formats, declares 128.. free, replicates A and B, and flushes twice
/// (the second, with no modify since the first, takes the snapshot).
fn persisted() -> Arc<layoutd_disk::MemDevice> {
    let dev = Arc::new(layoutd_disk::MemDevice::new(DEVICE_BYTES));
    let mut h = open_on(&dev, OpenMode::format(1));
    let volume_blocks = h.stack.size_bytes() / B;
    let trim = Request::new(ReqId(0), Op::Trim, 128 * B, ((volume_blocks - 128) * B) as u32);
    assert_eq!(h.call(trim).result, Ok(()));
    for blk in [A, BB] {
        assert_eq!(h.call(write(blk, fill(blk), false)).result, Ok(()));
    }
    h.call(read(A, 0));
    h.call(read(BB, 0));
    h.settle();
    assert_eq!(counter(&h, "replica_blocks"), 2);
    assert_eq!(h.flush().result, Ok(()));
    assert_eq!(counter(&h, "snapshots_written_count"), 0, "writes came before this flush");
    assert_eq!(h.flush().result, Ok(()));
    assert_eq!(counter(&h, "snapshots_written_count"), 1);
    h.settle();
    dev
}

#[test]
fn snapshots_are_taken_in_idle_time_at_most_every_interval() {
    let dev = Arc::new(layoutd_disk::MemDevice::new(DEVICE_BYTES));
    let mut h = open_on(&dev, OpenMode::format(1));
    let t = h.now;
    assert_eq!(h.call(write(A, 1, false)).result, Ok(()));
    h.run_until(t.add_ms(59_000));
    assert_eq!(counter(&h, "snapshots_written_count"), 0);
    h.run_until(t.add_ms(61_000));
    assert_eq!(h.call(read(A, 1)).result, Ok(())); // a request: the runtime reports idle after it
    h.settle();
    assert_eq!(counter(&h, "snapshots_written_count"), 1);
    assert!(counter(&h, "snapshot_current_generation") > 0);
}

/// Snapshots written while a request arrives every 50 ms for 500 ms after
/// a map change (interval 100 ms), and in all once the stack settles,
/// under `extra`.
fn snapshots_under_a_trickle(extra: &str) -> (u64, u64) {
    let cfg = persist_config()
        .replace("snapshot_interval_ms = 60000", &format!("snapshot_interval_ms = 100\n{extra}"));
    let dev = Arc::new(layoutd_disk::MemDevice::new(DEVICE_BYTES));
    let stack = stack_from_toml(&cfg, DEVICE_BYTES, OpenMode::format(1));
    let mut h = Harness::new(stack, dev, Scripted::new(1, 1, 1), 1);
    bring_up(&mut h);
    h.settle();
    let before = counter(&h, "snapshots_written_count");
    assert_eq!(h.call(write(A, 1, false)).result, Ok(()));
    for _ in 0..10 {
        let t = h.now.add_ms(50);
        h.run_until(t);
        assert_eq!(fill_of(&h.call(read(A, 1))), 1);
    }
    let during = counter(&h, "snapshots_written_count") - before;
    h.settle();
    (during, counter(&h, "snapshots_written_count") - before)
}

#[test]
fn a_periodic_snapshot_waits_for_the_replica_writes_quiet() {
    // No threshold: any gap between requests is idle time, so the
    // trickle's gaps take the snapshot (inline replication alike).
    assert_eq!(snapshots_under_a_trickle(""), (1, 1));
    assert_eq!(snapshots_under_a_trickle("replication = \"idle\""), (1, 1));
    // With replication_idle_ms the snapshot waits for that much quiet, as
    // the replica writes do: a snapshot taken inside a burst is stale at
    // the burst's next map change, so it would be a write for nothing.
    assert_eq!(
        snapshots_under_a_trickle("replication = \"idle\"\nreplication_idle_ms = 100"),
        (0, 1),
        "50 ms gaps are not 100 ms of quiet"
    );
}

#[test]
fn replicas_outlive_a_clean_restart_and_never_an_unclean_one() {
    let dev = persisted();
    let mut h = open_on(&dev, OpenMode::Open { clean: true, accept_loss: false });
    assert_eq!((counter(&h, "replica_blocks"), counter(&h, "snapshot_loaded_blocks")), (2, 2));
    assert_eq!(fill_of(&h.call(read(A, 7))), fill(A));
    assert_eq!(counter(&h, "reads_replica_count"), 1, "served from the replica after the restart");
    assert_eq!(h.stack.message(h.now, "1:verify"), Ok("maps consistent".into()));
    // The declared-free map came back too: a free block reads zeroes.
    assert_eq!(fill_of_or_zero(&h.call(read(200, 7))), 0);
    // Unclean: the snapshot is never trusted; the region still is.
    let dev = persisted();
    let h = open_on(&dev, OpenMode::Open { clean: false, accept_loss: false });
    assert_eq!(counter(&h, "replica_blocks"), 0);
    assert!(counter(&h, "region_blocks") >= 2, "the blocks that may hold replica bytes stay free");
}

fn fill_of_or_zero(c: &layoutd_core::Completion) -> u8 {
    let d = c.data.as_ref().expect("data");
    assert!(d.iter().all(|&x| x == d[0]));
    d[0]
}

#[test]
fn a_write_after_the_snapshot_unvouches_it_so_a_clean_restart_serves_nothing_stale() {
    let dev = persisted();
    let mut h = open_on(&dev, OpenMode::Open { clean: true, accept_loss: false });
    assert_eq!(h.call(write(A, 0xA5, false)).result, Ok(()));
    assert_eq!(h.flush().result, Ok(())); // the runtime's final flush before the clean mark
    h.settle();
    let mut h = open_on(&dev, OpenMode::Open { clean: true, accept_loss: false });
    assert_eq!(counter(&h, "replica_blocks"), 0, "the record no longer vouches for the snapshot");
    assert_eq!(fill_of(&h.call(read(A, 7))), 0xA5);
    // Damage the snapshot copy a record vouches for: refused, replicas dropped, the volume serves.
    let dev = persisted();
    use layoutd_disk::BlockDevice;
    let snap0 = DEVICE_BYTES - 16384;
    for copy in 0..2u64 {
        dev.write_at(&[0xFF; 8], snap0 + copy * 8192 + 200).unwrap();
    }
    let mut h = open_on(&dev, OpenMode::Open { clean: true, accept_loss: false });
    assert_eq!(counter(&h, "replica_blocks"), 0);
    let st = h.stack.layer_statuses();
    let err =
        st.iter().flat_map(|s| s.config.iter()).find(|c| c.0 == "snapshot_load_error").expect("said why");
    assert!(err.1.contains("crc32c"), "{}", err.1);
    assert_eq!(fill_of(&h.call(read(A, 7))), fill(A));
}

// ------------------------------------------------------ ext2/3/4 bitmaps

const EXT_DEVICE_BYTES: u64 = 32 << 20;

fn ext_config() -> String {
    "version = 1\n[[layer]]\ntarget = \"replica\"\nmeta_record_bytes = 4096\n".to_string()
}

/// A formatted replica volume whose volume holds `mkfs.ext4 opts`, written
/// below the stack (as if before the layer existed); `None` without
/// e2fsprogs. Returns the device and dumpe2fs's free block count.
fn ext_volume(opts: &[&str], damage_bitmap: bool) -> Option<(Arc<layoutd_disk::MemDevice>, u64)> {
    use layoutd_disk::BlockDevice;
    use std::process::Command;
    if Command::new("mkfs.ext4").arg("-V").output().is_err() {
        eprintln!("e2fsprogs not installed: skipped");
        return None;
    }
    let dev = Arc::new(layoutd_disk::MemDevice::new(EXT_DEVICE_BYTES));
    let volume_bytes = {
        let mut h = Harness::new(
            stack_from_toml(&ext_config(), EXT_DEVICE_BYTES, OpenMode::format(1)),
            dev.clone(),
            Scripted::new(1, 1, 1),
            1,
        );
        bring_up(&mut h);
        h.stack.size_bytes()
    };
    let img = std::env::temp_dir().join(format!(
        "layoutd-replica-ext-{}-{}.img",
        std::process::id(),
        opts.join("")
    ));
    std::fs::File::create(&img).unwrap().set_len(volume_bytes).unwrap();
    let st = Command::new("mkfs.ext4").args(["-q", "-F"]).args(opts).arg(&img).status().unwrap();
    assert!(st.success());
    let out = Command::new("dumpe2fs").arg("-h").arg(&img).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let free: u64 =
        text.lines().find_map(|l| l.strip_prefix("Free blocks:")).unwrap().trim().parse().unwrap();
    let mut bytes = std::fs::read(&img).unwrap();
    std::fs::remove_file(&img).ok();
    if damage_bitmap {
        let bs = 4096usize;
        let geo = layoutd_targets::replica::ext::parse_superblock(&bytes[1024..2048]).unwrap();
        let gdt = &bytes[geo.gdt_offset_bytes() as usize..];
        let groups = layoutd_targets::replica::ext::parse_descriptors(&geo, gdt).unwrap();
        let g = groups.iter().find(|g| !g.block_uninit).unwrap();
        bytes[g.block_bitmap as usize * bs + 7] ^= 0x01;
    }
    dev.write_at(&bytes, 0).unwrap();
    Some((dev, free))
}

fn open_ext(dev: &Arc<layoutd_disk::MemDevice>) -> Harness<Scripted> {
    open_ext_with(dev, "")
}

fn open_ext_with(dev: &Arc<layoutd_disk::MemDevice>, extra: &str) -> Harness<Scripted> {
    let stack = stack_from_toml(
        &format!("{}{extra}", ext_config()),
        EXT_DEVICE_BYTES,
        OpenMode::Open { clean: true, accept_loss: false },
    );
    let mut h = Harness::new(stack, dev.clone(), Scripted::new(1, 1, 1), 1);
    bring_up(&mut h);
    h
}

fn config_value(h: &Harness<Scripted>, key: &str) -> Option<String> {
    let st = h.stack.layer_statuses();
    st.iter().flat_map(|s| s.config.iter()).find(|c| c.0 == key).map(|c| c.1.clone())
}

#[test]
fn the_idle_scan_declares_the_ext4_free_blocks_except_those_written_since_open() {
    let Some((dev, free)) = ext_volume(&["-b", "4096"], false) else { return };
    // Old bytes in a free block (a deleted file's, say).
    let volume_blocks = (EXT_DEVICE_BYTES - 8192 - EXT_DEVICE_BYTES / 64) / B;
    layoutd_disk::BlockDevice::write_at(&*dev, &[0x5A; 4096], (volume_blocks - 3) * B).unwrap();
    let mut h = open_ext(&dev);
    assert_eq!(h.stack.size_bytes() / B, volume_blocks);
    // Before the first idle event: the file system "allocates" a free block.
    let last = h.stack.size_bytes() / B - 1;
    assert_eq!(h.call(write(last, 0x42, false)).result, Ok(()));
    h.settle();
    assert_eq!(config_value(&h, "fs_scan_error"), None);
    assert_eq!(counter(&h, "fs_scan_runs_count"), 1);
    assert_eq!(
        counter(&h, "fs_scan_declared_blocks"),
        free - 1,
        "dumpe2fs's free blocks but the one written"
    );
    assert_eq!(fill_of(&h.call(read(last, 0))), 0x42);
    assert_eq!(fill_of_or_zero(&h.call(read(last - 1, 0))), 0, "a free block reads zeroes");
    assert_eq!(fill_of_or_zero(&h.call(read(last - 2, 0))), 0, "old bytes in a free block read as zeroes");
    // A write over part of it: the rest still reads zeroes.
    let part = Request::write(ReqId(0), (last - 2) * B, Bytes::from(vec![0x11; 512]));
    assert_eq!(h.call(part).result, Ok(()));
    let whole = h.call(read(last - 2, 0)).data.unwrap();
    assert!(whole[..512].iter().all(|&x| x == 0x11) && whole[512..].iter().all(|&x| x == 0), "zero-filled");
    // The superblock is in use: read as it is.
    let sb = h.call(Request::new(ReqId(0), Op::Read, 1024, 1024));
    assert_eq!(&sb.data.unwrap()[56..58], &[0x53, 0xEF]);
}

#[test]
fn the_written_set_counts_in_memory_bytes_max_and_past_it_no_scan_declares_anything() {
    let Some((dev, free)) = ext_volume(&["-b", "4096"], false) else { return };
    let last = |h: &Harness<Scripted>| h.stack.size_bytes() / B - 1;
    // Room for the written set's one 4 KiB page: the scan runs as always,
    // and the page is counted.
    let mut h = open_ext_with(&dev, "memory_bytes_max = \"64KiB\"\n");
    let before = counter(&h, "memory_bytes");
    assert_eq!(h.call(write(last(&h), 0x42, false)).result, Ok(()));
    assert!(counter(&h, "memory_bytes") >= before + 4096, "the written set's page is in the budget");
    h.settle();
    assert_eq!(config_value(&h, "fs_scan_error"), None);
    assert_eq!(counter(&h, "fs_scan_declared_blocks"), free - 1);
    // No room: the first write drops the set; the scan is given up (it
    // could declare the written block free: its bitmap bit is not on disk).
    let mut h = open_ext_with(&dev, "memory_bytes_max = 4096\n");
    assert_eq!(h.call(write(last(&h), 0x42, false)).result, Ok(()));
    h.settle();
    let e = config_value(&h, "fs_scan_error").expect("an error");
    assert!(e.contains("memory_bytes_max") && e.lines().count() == 1, "{e}");
    assert_eq!(counter(&h, "fs_scan_declared_blocks"), 0, "nothing declared");
    assert!(counter(&h, "sets_bytes") < 4096, "the set's page is freed");
    assert_eq!(fill_of(&h.call(read(last(&h), 0))), 0x42);
    let asked = h.stack.message(h.now, "free-space");
    assert!(asked.is_err_and(|e| e.contains("memory_bytes_max")), "on demand too");
}

#[test]
fn an_unknown_or_corrupt_file_system_is_reported_once_and_declares_nothing() {
    let dev = Arc::new(layoutd_disk::MemDevice::new(EXT_DEVICE_BYTES));
    let mut h = Harness::new(
        stack_from_toml(&ext_config(), EXT_DEVICE_BYTES, OpenMode::format(1)),
        dev.clone(),
        Scripted::new(1, 1, 1),
        1,
    );
    bring_up(&mut h);
    for blk in 0..4 {
        h.call(read(blk, 0));
        h.settle();
    }
    let e = config_value(&h, "fs_scan_error").expect("reported");
    assert!(e.contains("no ext2/3/4 superblock"), "{e}");
    assert_eq!(e.lines().count(), 1);
    assert_eq!((counter(&h, "fs_scan_runs_count"), counter(&h, "fs_scan_declared_blocks")), (1, 0));
    let Some((dev, _)) = ext_volume(&["-b", "4096"], true) else { return };
    let mut h = open_ext(&dev);
    h.settle();
    let e = config_value(&h, "fs_scan_error").expect("reported");
    assert!(e.contains("checksum"), "{e}");
    assert_eq!(counter(&h, "fs_scan_declared_blocks"), 0);
}

// ------------------------------------------- beyond the thesis, each option

#[test]
fn update_propagation_keeps_replicas_of_small_writes_and_the_baseline_drops_them() {
    for propagate in [false, true] {
        let extra = if propagate { "propagate_bytes_max = \"4KiB\"" } else { "propagate_bytes_max = 0" };
        let mut h = streams_setup(extra);
        h.call(read(10, 1));
        h.call(read(40, 1));
        h.settle();
        assert_eq!(counter(&h, "replica_blocks"), 2);
        assert_eq!(h.call(write(10, 0xAB, false)).result, Ok(()));
        assert_eq!(fill_of(&h.call(read(10, 9))), 0xAB, "never stale, either way");
        let (kept, used) = (counter(&h, "replica_blocks"), counter(&h, "reads_replica_count"));
        if propagate {
            assert_eq!((counter(&h, "replicas_propagated_blocks"), kept, used), (1, 2, 1));
        } else {
            assert_eq!((counter(&h, "replicas_invalidated_blocks"), kept, used), (1, 1, 0));
        }
    }
}

/// Stream 1 reads `pattern` (`(block, blocks)`: the first two are a queue
/// of 2 that commits, the rest the window), replicated in that order from
/// 128; stream 2 replays it, every read checked. Returns the stack, the
/// map and stream 2's lower reads `(block, blocks)`.
fn replayed(extra: &str, pattern: &[(u64, u64)]) -> (Harness<Scripted>, String, Vec<(u64, u64)>) {
    let mut h = streams_setup(&format!("replicate_after_commit_count = 4\n{extra}"));
    let read_n = |blk: u64, n: u64, stream: u32| Request {
        stream: base_stream(stream),
        ..Request::new(ReqId(0), Op::Read, blk * B, (n * B) as u32)
    };
    for &(blk, n) in pattern {
        h.call(read_n(blk, n, 1));
    }
    h.settle();
    let m = map(&mut h);
    h.take_records();
    for &(blk, n) in pattern {
        let c = h.call(read_n(blk, n, 2));
        let want: Vec<u8> = (blk..blk + n).flat_map(|x| vec![fill(x); B as usize]).collect();
        assert_eq!(c.data.as_deref(), Some(&want[..]), "read of {blk}+{n}");
    }
    let reads = h
        .take_records()
        .iter()
        .filter(|r| r.op == Op::Read)
        .map(|r| (r.offset_bytes / B, r.length_bytes as u64 / B))
        .collect();
    (h, m, reads)
}

const SIX: [(u64, u64); 6] = [(10, 1), (40, 1), (70, 1), (100, 1), (20, 1), (50, 1)];

#[test]
fn readahead_answers_a_chain_from_memory_and_the_baseline_reads_each_block() {
    let (h, m, reads) = replayed("readahead_blocks = 0", &SIX);
    assert_eq!(m, "replica blocks 6: 128+1->10 129+1->40 130+1->70 131+1->100 132+1->20 133+1->50");
    assert_eq!(reads, [(128, 1), (129, 1), (130, 1), (131, 1), (132, 1), (133, 1)]);
    assert_eq!(counter(&h, "reads_readahead_count"), 0);
    let (h, _, reads) = replayed("readahead_blocks = 3", &SIX);
    // 128 jumps into the chain (no read-ahead); 129 follows it: it and the
    // 3 replicas after it; 133 and nothing after it (the chain ends).
    assert_eq!(reads, [(128, 1), (129, 4), (133, 1)]);
    assert_eq!(counter(&h, "reads_readahead_count"), 3);
    assert_eq!(counter(&h, "reads_replica_count"), 6);
    assert_eq!(counter(&h, "readahead_read_blocks"), 3);
    // A read-ahead ends where a replicated read ends, not inside it: 3
    // blocks after 129 would split 100+2 (at 132..134), so it stops at 131.
    let (h, m, reads) =
        replayed("readahead_blocks = 3", &[(5, 1), (10, 1), (40, 1), (70, 1), (100, 2), (20, 1)]);
    assert_eq!(m, "replica blocks 7: 128+1->5 129+1->10 130+1->40 131+1->70 132+2->100 134+1->20");
    assert_eq!(reads, [(128, 1), (129, 3), (132, 3)]);
    assert_eq!(counter(&h, "reads_readahead_count"), 3);
}

#[test]
fn a_read_that_jumps_into_a_chain_reads_nothing_ahead_and_one_that_follows_it_does() {
    // Stream 3 reads single blocks that have replicas, in no chain order
    // (a random reader, or a noise process): each read is close to nothing
    // it read before, so it takes a replica but reads only its own block;
    // a read-ahead would cost a transfer nobody uses, and the next request
    // of every stream would wait behind it. Then it follows the chain.
    let (mut h, _, _) = replayed("readahead_blocks = 8", &SIX);
    h.take_records();
    let before = counter(&h, "readahead_read_blocks");
    for blk in [100, 10, 50, 70] {
        assert_eq!(fill_of(&h.call(read(blk, 3))), fill(blk));
    }
    let lower = |h: &mut Harness<Scripted>| -> Vec<(u64, u64)> {
        h.take_records()
            .iter()
            .filter(|r| r.op == Op::Read)
            .map(|r| (r.offset_bytes / B, r.length_bytes as u64 / B))
            .collect()
    };
    assert_eq!(lower(&mut h), [(131, 1), (128, 1), (133, 1), (130, 1)], "jumps: each replica alone");
    assert_eq!(counter(&h, "readahead_read_blocks"), before);
    // 20's replica (132) follows 70's (130): read on to the chain's end.
    assert_eq!(fill_of(&h.call(read(20, 3))), fill(20));
    assert_eq!(lower(&mut h), [(132, 2)]);
    assert_eq!(counter(&h, "readahead_read_blocks"), before + 1);
}

/// The lower reads of replica blocks (128 on) since the last call.
fn replica_reads(h: &mut Harness<Scripted>) -> Vec<(u64, u64)> {
    h.take_records()
        .iter()
        .filter(|r| r.op == Op::Read && r.offset_bytes / B >= 128)
        .map(|r| (r.offset_bytes / B, r.length_bytes as u64 / B))
        .collect()
}

/// Two threads behind one connection (the runtime's base stream 0): A
/// reads 10, 40, 70, whose replicas are a chain at 128..; B's reads of
/// other blocks come in between. `ids` gives the stream of A's and B's
/// reads: the detector's runs 1 and 2 of base 0, or base 0 for both.
fn two_threads(a: StreamId, b: StreamId) -> (Harness<Scripted>, Vec<(u64, u64)>) {
    let (mut h, m, _) =
        replayed("readahead_blocks = 8\nhistory_count = 1\npass_through_close_count = 1", &SIX);
    assert_eq!(m, "replica blocks 6: 128+1->10 129+1->40 130+1->70 131+1->100 132+1->20 133+1->50");
    h.take_records();
    for (blk, s) in [(10, a), (90, b), (40, a), (60, b), (70, a), (30, b)] {
        assert_eq!(fill_of(&h.call(read_on(blk, s))), fill(blk));
    }
    let reads = replica_reads(&mut h);
    (h, reads)
}

#[test]
fn a_thread_told_apart_from_others_follows_its_chain_and_shares_its_read_ahead() {
    // Run 1 jumps into the chain at 128; its next read, 40, comes after
    // one of B's far reads, so it is close to nothing in the connection's
    // history, but close to run 1's own last read (128): it follows the
    // chain and reads on; 70 is then answered from memory.
    let (mut h, reads) = two_threads(StreamId(1), StreamId(2));
    assert_eq!(reads, [(128, 1), (129, 5)]);
    // Another run of the same connection finds those bytes too.
    assert_eq!(fill_of(&h.call(read_on(100, StreamId(3)))), fill(100));
    assert_eq!(replica_reads(&mut h), []);
    // Without the detector's runs (both threads on the base stream) each
    // of A's reads jumps into the chain and reads nothing ahead.
    let (_, reads) = two_threads(base_stream(0), base_stream(0));
    assert_eq!(reads, [(128, 1), (129, 1), (130, 1)]);
}

#[test]
fn a_lower_write_over_read_ahead_blocks_drops_them_so_nothing_stale_is_served() {
    // Propagation keeps 70's replica (130) valid and rewrites it: the bytes
    // read ahead at 130 are old and must not answer the next read.
    let (mut h, _, _) = replayed("readahead_blocks = 8\npropagate_bytes_max = \"4KiB\"", &SIX);
    assert_eq!(fill_of(&h.call(read(10, 3))), fill(10), "reads 128 (jumping into the chain)");
    assert_eq!(fill_of(&h.call(read(40, 3))), fill(40), "reads 129 and 130..134 ahead");
    assert_eq!(h.call(write(70, 0xAB, false)).result, Ok(()));
    assert_eq!(counter(&h, "replicas_propagated_blocks"), 1);
    assert!(counter(&h, "readahead_dropped_count") >= 1);
    h.take_records();
    assert_eq!(fill_of(&h.call(read(70, 3))), 0xAB);
    let lower: Vec<u64> =
        h.take_records().iter().filter(|r| r.op == Op::Read).map(|r| r.offset_bytes / B).collect();
    assert_eq!(lower, [130], "read again from the replica, which holds the new bytes");
    // The drop took the whole read-ahead: the next read reads on again.
    assert_eq!(fill_of(&h.call(read(100, 3))), fill(100));
}

#[test]
fn larger_write_batches_visit_the_replica_extent_less_often() {
    let writes = |extra: &str| {
        let mut h = streams_setup(&format!("replicate_after_commit_count = 8\n{extra}"));
        h.take_records();
        for blk in [10, 40, 70, 100, 20, 50, 80, 110, 5, 35] {
            h.call(read(blk, 1));
        }
        h.settle();
        assert_eq!(counter(&h, "replicas_created_blocks"), 10);
        h.take_records()
            .iter()
            .filter(|r| {
                r.op == Op::Write && r.offset_bytes / B >= 128 && r.offset_bytes < h.stack.size_bytes()
            })
            .count()
    };
    // Batches of queue_commit_count (2): the queue, then 4 batches of the window.
    assert_eq!(writes(""), 5);
    // Batches of 8: the queue, then the window in one.
    assert_eq!(writes("write_batch_count = 8"), 2);
    // A batch's replicas follow each other below; they merge into lower
    // writes of at most write_run_bytes_max: one block each (2 + 8), two
    // blocks (1 + 4), or the whole batch (the default 1 MiB, as above).
    assert_eq!(writes("write_batch_count = 8\nwrite_run_bytes_max = \"4KiB\""), 10);
    assert_eq!(writes("write_batch_count = 8\nwrite_run_bytes_max = \"8KiB\""), 5);
}

#[test]
fn with_an_extent_per_stream_concurrent_streams_do_not_interleave_their_replicas() {
    let maps: Vec<String> = ["false", "true"]
        .iter()
        .map(|on| {
            let mut h = streams_setup(&format!("extent_per_stream = {on}\nreplicate_after_commit_count = 4"));
            // Two streams, reads alternating; each queue of 2 commits, then
            // each stream's window replicates its next reads.
            for (a, b) in [(10, 12), (40, 42), (70, 72), (100, 102)] {
                h.call(read(a, 1));
                h.call(read(b, 2));
            }
            h.settle();
            map(&mut h)
        })
        .collect();
    assert_eq!(
        maps[0],
        "replica blocks 8: 128+1->10 129+1->40 130+1->12 131+1->42 132+1->70 133+1->100 134+1->72 135+1->102",
        "one current extent: the streams' chains interleave"
    );
    assert_eq!(
        maps[1],
        "replica blocks 8: 128+1->10 129+1->40 130+1->70 131+1->100 192+1->12 193+1->42 194+1->72 195+1->102",
        "stream 2 takes the largest free extent outside stream 1's"
    );
}

#[test]
fn idle_replication_waits_for_idle_time() {
    let mut h = streams_setup("replication = \"idle\"");
    h.call(read(10, 1));
    h.call(read(40, 1));
    assert_eq!(counter(&h, "deferred_replica_writes"), 2, "committed, not yet written");
    assert_eq!(counter(&h, "replicas_created_blocks"), 0);
    h.settle(); // idle: the scheduler grants the Replication class
    assert_eq!(counter(&h, "replicas_created_blocks"), 2);
    let st = h.stack.status();
    let steps = st.counters.iter().find(|c| c.0 == "background_replication_steps_count").expect("scheduler");
    assert!(steps.1 >= 1);
}

/// Replica writes made while requests arrive every 50 ms, before the
/// stack settles, under `extra`.
fn replicas_made_under_a_trickle(extra: &str) -> u64 {
    let mut h = streams_setup(&format!("replication = \"idle\"\n{extra}"));
    h.call(read(10, 1));
    h.call(read(40, 1));
    assert_eq!(counter(&h, "deferred_replica_writes"), 2, "committed, not yet written");
    for _ in 0..10 {
        let t = h.now.add_ms(50);
        h.run_until(t);
        assert_eq!(h.flush().result, Ok(()));
    }
    let made = counter(&h, "replicas_created_blocks");
    h.settle(); // a quiet end: the threshold passes
    assert_eq!(counter(&h, "replicas_created_blocks"), 2, "written once idle");
    made
}

#[test]
fn idle_replication_with_a_threshold_waits_for_that_long_without_a_request() {
    assert_eq!(
        replicas_made_under_a_trickle("replication_idle_ms = 100"),
        0,
        "50 ms gaps are not 100 ms of quiet"
    );
    assert_eq!(replicas_made_under_a_trickle("replication_idle_ms = 20"), 2, "50 ms gaps are 20 ms of quiet");
    assert_eq!(replicas_made_under_a_trickle(""), 2, "no threshold: any gap");
    assert_eq!(
        replicas_made_under_a_trickle("replication_idle_ms = 100\nreplication_wait_max_ms = 200"),
        2,
        "after 200 ms of waiting they go out in a 50 ms gap"
    );
    assert_eq!(
        replicas_made_under_a_trickle("replication_idle_ms = 100\nreplication_wait_max_ms = 1000"),
        0,
        "the trickle lasts 500 ms: not yet overdue"
    );
}

#[test]
fn replica_writes_holding_too_many_bytes_count_as_congestion() {
    // Two one-block candidates commit; the second finds the first's bytes
    // at the cap of one block: congestion, the thesis's back-off.
    let held = |cap: &str| {
        let mut h = streams_setup(&format!("replication = \"idle\"\npending_bytes_max = \"{cap}\""));
        h.call(read(10, 1));
        h.call(read(40, 1));
        (counter(&h, "pending_replica_bytes"), counter(&h, "congestion_backoffs_count"))
    };
    assert_eq!(held("4KiB"), (B, 1), "capped at one block");
    assert_eq!(held("8KiB"), (2 * B, 0), "both fit");
}

#[test]
fn the_quota_stops_a_stream_whose_replicas_are_never_used() {
    let mut h = streams_setup("stream_quota_blocks = 2");
    for blk in [10, 40] {
        h.call(read(blk, 1));
    }
    h.settle();
    assert_eq!(counter(&h, "replicas_created_blocks"), 2);
    for blk in [70, 100] {
        h.call(read(blk, 1));
    }
    assert_eq!(counter(&h, "candidates_count"), 2, "stopped: 2 blocks made, none used");
    assert!(counter(&h, "quota_stops_count") >= 2);
    // Another stream is not stopped.
    h.call(read(70, 2));
    assert_eq!(counter(&h, "candidates_count"), 3);
}

/// Block 10 with replicas at 129 (chain run 1 after a write drops 130)
/// and 131 (run 3), 129 used last; returns the block a fresh stream's read
/// of 10 went to under `choice`.
fn chosen(choice: &str) -> u64 {
    let mut h = streams_setup(&format!("replica_choice = \"{choice}\""));
    // Pairs: a queue commits at 2 (settling lets the 2 s timeout pass).
    for pair in [[(11, 2), (10, 2)], [(9, 1), (10, 1)], [(40, 1), (70, 1)]] {
        for (blk, stream) in pair {
            h.call(read(blk, stream));
        }
        h.settle();
    }
    assert_eq!(map(&mut h), "replica blocks 6: 128+1->11 129+1->10 130+1->9 131+1->10 132+1->40 133+1->70");
    h.call(write(9, 0x99, false));
    h.call(read(11, 6)); // the chain at 128
    h.call(read(10, 6)); // close to it: 129, now the most recently used
    h.settle();
    h.take_records();
    assert_eq!(fill_of(&h.call(read(10, 7))), fill(10));
    let r = h.take_records();
    let last = r.iter().rev().find(|r| r.op == Op::Read).expect("a lower read");
    last.offset_bytes / B
}

#[test]
fn replica_choice_lowest_longest_and_mru_pick_different_chains() {
    assert_eq!(chosen("lowest"), 129);
    assert_eq!(chosen("longest"), 131);
    assert_eq!(chosen("mru"), 129);
}

#[test]
fn the_memory_cap_stops_replication() {
    let mut h = streams_setup("memory_bytes_max = 4096");
    let mut blk = 0;
    while counter(&h, "memory_cap_stops_count") == 0 {
        assert!(blk < 64, "the cap never bit");
        h.call(read(blk, 10 + blk as u32)); // a stream per pair: no history
        h.call(read(blk + 64, 10 + blk as u32));
        h.settle();
        blk += 1;
    }
    let memory = counter(&h, "map_bytes") + counter(&h, "sets_bytes");
    assert!(memory >= 4096, "{memory}");
    let made = counter(&h, "replicas_created_blocks");
    h.call(read(blk, 200));
    h.call(read(blk + 64, 200));
    h.settle();
    assert_eq!(counter(&h, "replicas_created_blocks"), made, "nothing more past the cap");
}

// ------------------------------------------------------------ reclamation

/// Free blocks 128..250 full of replicas (pair k of originals k, k + 64
/// at 128 + 2k, 129 + 2k), then pairs 0..30 read again (used): the
/// replicas of pairs 30..61 (blocks 188..250) are the least recently used.
fn full_of_replicas(extra: &str) -> Harness<Scripted> {
    let base = "free_extent_blocks_min = 8\nreclaim_range_blocks = 8\nreclaim_candidates_min = 4\nreclaim_bottom_pct = 50";
    let keys: Vec<&str> = extra.lines().filter_map(|l| l.split('=').next()).map(str::trim).collect();
    let base: Vec<&str> =
        base.lines().filter(|l| !keys.contains(&l.split('=').next().unwrap().trim())).collect();
    let mut h = streams_setup(&format!("{}\n{extra}", base.join("\n")));
    for k in 0..61u64 {
        h.call(read(k, 1000 + k as u32));
        h.call(read(k + 64, 1000 + k as u32));
        h.settle();
    }
    assert_eq!((counter(&h, "replica_blocks"), counter(&h, "free_blocks_known")), (122, 0));
    for k in 0..30u64 {
        h.call(read(k, 2000 + k as u32));
        h.call(read(k + 64, 2000 + k as u32));
    }
    assert_eq!(counter(&h, "reads_replica_count"), 60);
    h.settle();
    h
}

/// A new pattern (originals 61 and 125) that needs room.
fn new_pattern(h: &mut Harness<Scripted>, stream: u32) {
    h.call(read(61, stream));
    h.call(read(125, stream));
    h.settle();
}

#[test]
fn reclamation_takes_a_range_of_least_recently_used_replicas_and_keeps_the_used_ones() {
    let mut h = full_of_replicas("");
    new_pattern(&mut h, 3000);
    assert_eq!(counter(&h, "replicas_reclaimed_blocks"), 8);
    assert_eq!(counter(&h, "replica_blocks"), 122 - 8 + 2, "the new pattern went into the reclaimed range");
    for k in 0..30u64 {
        h.call(read(k, 4000 + k as u32));
    }
    assert_eq!(counter(&h, "reads_replica_count"), 60 + 30, "every recently used replica survived");
}

#[test]
fn too_few_candidates_in_any_range_ages_everything_and_waits() {
    // The bottom 1% (2 blocks): no 8-block range has more than 4.
    let mut h = full_of_replicas("reclaim_bottom_pct = 1\nreclaim_age_max = 1");
    new_pattern(&mut h, 3000);
    assert_eq!(counter(&h, "replicas_reclaimed_blocks"), 0);
    assert_eq!(counter(&h, "reclaim_failures_count"), 1);
    assert!(counter(&h, "no_space_count") >= 1);
    // Two more failures age every replica past reclaim_age_max = 1: then
    // all are candidates and a range goes.
    for s in 0..3 {
        new_pattern(&mut h, 3001 + s);
    }
    assert_eq!(counter(&h, "reclaim_failures_count"), 2);
    assert_eq!(counter(&h, "replicas_reclaimed_blocks"), 8);
}

#[test]
fn gradual_growth_doubles_the_bottom_share_after_each_failure() {
    let mut h = full_of_replicas("reclaim_bottom_pct = 8\nreclaim_growth = true");
    assert_eq!(counter(&h, "reclaim_bottom_permille"), 20, "a quarter of 8%");
    new_pattern(&mut h, 3000);
    assert_eq!(counter(&h, "reclaim_failures_count"), 1, "2% of 122: 3 blocks, not enough");
    assert_eq!(counter(&h, "reclaim_bottom_permille"), 40);
    new_pattern(&mut h, 3001);
    new_pattern(&mut h, 3002);
    assert_eq!(counter(&h, "replicas_reclaimed_blocks"), 8, "at 8%: 10 blocks, 8 of them in a row");
    assert_eq!(counter(&h, "reclaim_bottom_permille"), 20, "back to the start after a success");
}

#[test]
fn the_thrash_guard_refuses_to_reclaim_replicas_in_use() {
    // Every replica used since the last attempt: the active set is larger
    // than free space.
    for guard in [false, true] {
        let mut h = full_of_replicas(&format!("thrash_guard = {guard}"));
        for k in 30..61u64 {
            h.call(read(k, 5000 + k as u32));
            h.call(read(k + 64, 5000 + k as u32));
        }
        h.settle();
        new_pattern(&mut h, 3000);
        let (reclaimed, guarded) =
            (counter(&h, "replicas_reclaimed_blocks"), counter(&h, "thrash_guard_count"));
        assert_eq!((reclaimed, guarded), if guard { (0, 1) } else { (8, 0) }, "guard {guard}");
    }
}

/// RC with a candidate: the read of D returns its old bytes after the
/// write of D arrived (the write lands later). Those bytes must never
/// become a replica.
#[test]
fn a_candidate_read_overtaken_by_a_write_is_never_replicated() {
    let mut h = setup(true, Scripted::new(5, 10, 1));
    let r = h.submit(read(D, 0)); // a candidate: stream 0's history is far
    let w = h.submit(write(D, 0xDD, false));
    assert_eq!(fill_of(&h.wait_for(r)), fill(D), "the read went first below");
    assert_eq!(h.wait_for(w).result, Ok(()));
    h.call(read(E, 0)); // completes the queue
    h.settle();
    assert_eq!(counter(&h, "conflicts_rc_count"), 1);
    assert_eq!(fill_of(&h.call(read(D, 9))), 0xDD, "never the old bytes");
}
