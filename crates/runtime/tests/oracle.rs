//! Oracle property tests and crash tests for every target of this build.
//! Add each new target's stacks to `STACKS`.

use layoutd_core::Op;
use layoutd_runtime::testkit::{crash_check, oracle_check, random_ops, OpSpec};
use proptest::prelude::*;
use rand::SeedableRng;

const DEVICE_BYTES: u64 = 1 << 20;

/// An `opt` stack with a tiny OPT region and a plan every 8 requests,
/// followed by `extra` keys (a string literal).
macro_rules! opt_tiny {
    ($extra:literal) => {
        concat!(
            r#"version = 1
[[layer]]
target = "opt"
opt_offset = "512K"
opt_length = "96K"
journal_blocks = 2
edge_weight_min = 0
plan_interval_requests = 8
copy_blocks_per_step = 4
idle_ms = 0
"#,
            $extra
        )
    };
}

/// Stacks under test: (name, config). Every target appears at least once.
const STACKS: &[(&str, &str)] = &[
    ("linear-default", "version = 1\n[[layer]]\ntarget = \"linear\"\n"),
    (
        "linear-three-segments-reversed",
        r#"version = 1
[[layer]]
target = "linear"
[[layer.segment]]
offset = "768K"
length = "256K"
[[layer.segment]]
offset = "100K"
length = "300K"
[[layer.segment]]
offset = 0
length = "100K"
"#,
    ),
    (
        "trace-over-linear-over-linear",
        r#"version = 1
[[layer]]
target = "trace"
[[layer]]
target = "linear"
[[layer.segment]]
offset = "512K"
[[layer.segment]]
offset = 0
length = "256K"
[[layer]]
target = "linear"
"#,
    ),
    (
        "pool-origin-only-8k-chunks",
        "version = 1\n[[layer]]\ntarget = \"pool\"\nchunk_size = \"8K\"\nvolumes_max = 1\njournal_blocks = 8\n",
    ),
    (
        "pool-origin-only-8k-chunks-fresh-partial",
        "version = 1\n[[layer]]\ntarget = \"pool\"\nchunk_size = \"8K\"\nvolumes_max = 1\njournal_blocks = 8\n\
         zero_new_chunks_with = \"partial\"\n",
    ),
    (
        "opt-tiny-region-frequent-plans-writes-home",
        opt_tiny!("absorb_writes = false\n"),
    ),
    (
        "opt-extra-copies-following-streams",
        opt_tiny!(
            r#"copies_max = 3
follow_streams = true
"#
        ),
    ),
    (
        "opt-padded-stream-plans-extra-copies-partial-reads-home",
        opt_tiny!(
            r#"copies_max = 4
plan_streams = true
plan_pad_blocks = 3
partial_reads_home = true
"#
        ),
    ),
    (
        "opt-1k-blocks-at-the-end-over-linear",
        r#"version = 1
[[layer]]
target = "opt"
opt_offset = "992K"
opt_length = "32K"
block_bytes = 1024
journal_blocks = 1
edge_weight_min = 0
plan_interval_requests = 5
absorb_writes = false
[[layer]]
target = "linear"
"#,
    ),
    (
        // bench/results/opt/opt-dcd-near.toml's shape: the dcd's log mapped
        // by a linear layer to the device right before the OPT region.
        "opt-over-dcd-log-beside-the-region-over-linear",
        concat!(
            opt_tiny!("absorb_writes = false\nplan_streams = true\ncopies_max = 2\n"),
            r#"[[layer]]
target = "dcd"
log_length = "64K"
segment_bytes = 4096
slot_bytes = 512
buffer_count = 3
buffer_delay_ms = 5
bypass_bytes = 4096
idle_ms_max = 20
idle_ms_min = 1
[[layer]]
target = "linear"
[[layer.segment]]
offset = "512K"
length = "64K"
[[layer.segment]]
offset = 0
length = "512K"
[[layer.segment]]
offset = "576K"
"#
        ),
    ),
    (
        "opt-1k-blocks-absorbing-writes",
        r#"version = 1
[[layer]]
target = "opt"
opt_offset = "512K"
opt_length = "32K"
block_bytes = 1024
journal_blocks = 1
edge_weight_min = 0
plan_interval_requests = 5
absorb_writes = true
"#,
    ),
    (
        "replica-512-byte-blocks-small-constants",
        r#"version = 1
[[layer]]
target = "replica"
block_bytes = 512
meta_record_bytes = 4096
history_count = 4
close_blocks = 4
pass_through_close_count = 2
queue_commit_count = 2
queue_sequential_cancel_count = 2
replicate_after_commit_count = 4
free_extent_blocks_min = 8
reclaim_range_blocks = 16
reclaim_candidates_min = 4
reclaim_wait_divisor = 4
"#,
    ),
    (
        "replica-4k-blocks-over-linear",
        r#"version = 1
[[layer]]
target = "replica"
meta_record_bytes = 4096
close_blocks = 2
pass_through_close_count = 2
queue_commit_count = 2
queue_sequential_cancel_count = 2
free_extent_blocks_min = 2
reclaim_range_blocks = 4
reclaim_candidates_min = 1
propagate_bytes_max = "8KiB"
replica_choice = "longest"
[[layer]]
target = "linear"
"#,
    ),
    (
        "log-greedy-4k-blocks",
        "version = 1\n[[layer]]\ntarget = \"log\"\nsegment_bytes = \"32KiB\"\nover_provision_pct = 20\npolicy = \"greedy\"\n\
         clean_batch_segments = 2\nfree_segments_min = 1\ncheckpoint_segments = 8\n",
    ),
    (
        "log-adaptive-1k-blocks",
        "version = 1\n[[layer]]\ntarget = \"log\"\nblock_bytes = 1024\nsegment_bytes = \"8KiB\"\nover_provision_pct = 15\n\
         clean_batch_segments = 2\nfree_segments_min = 1\ncheckpoint_segments = 16\n",
    ),
    (
        "log-ssr-sliding-compaction",
        "version = 1\n[[layer]]\ntarget = \"log\"\nsegment_bytes = \"16KiB\"\nover_provision_pct = 25\npolicy = \"ssr\"\n\
         clean_batch_segments = 2\nfree_segments_min = 1\ncheckpoint_segments = 8\nresequence_sliding = true\n\
         resequence_idle_ms = 0\n",
    ),
    (
        "log-adaptive-batched-packing",
        "version = 1\n[[layer]]\ntarget = \"log\"\nsegment_bytes = \"16KiB\"\nover_provision_pct = 25\npolicy = \"adaptive\"\n\
         clean_batch_segments = 2\nfree_segments_min = 1\ncheckpoint_segments = 8\nresequence_sliding = false\n\
         resequence_batch_groups = 4\nresequence_idle_ms = 0\n",
    ),
];

fn op_strategy() -> impl Strategy<Value = OpSpec> {
    let op = prop_oneof![
        4 => Just(Op::Write),
        3 => Just(Op::Read),
        1 => Just(Op::Flush),
        1 => Just(Op::Trim),
        1 => Just(Op::WriteZeroes),
    ];
    (op, 0u64..2048, prop_oneof![8 => 1u32..16, 1 => 16u32..600], any::<bool>(), 0u32..4).prop_map(
        |(op, sector, sectors, fua, stream)| OpSpec {
            op,
            sector,
            sectors,
            fua: fua && sector % 5 == 0,
            stream,
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn every_stack_reads_back_what_a_byte_array_would(
        ops in prop::collection::vec(op_strategy(), 1..200),
        depth in 1usize..8,
        seed in any::<u64>(),
    ) {
        for (name, cfg) in STACKS {
            eprintln!("stack {name} seed {seed}");
            let mut h = oracle_check(cfg, DEVICE_BYTES, seed, &ops, depth);
            prop_assert_eq!(h.upper_outstanding_count(), 0);
            prop_assert_eq!(h.lower_in_flight_count(), 0);
            let _ = h.take_records();
        }
    }
}

#[test]
fn crash_at_every_flush_and_random_points_keeps_flushed_data() {
    // A long campaign: LAYOUTD_CRASH_SEEDS=6..200 (a range of seeds).
    let seeds = std::env::var("LAYOUTD_CRASH_SEEDS").map_or(0..6u64, |v| {
        let (a, b) = v.split_once("..").expect("LAYOUTD_CRASH_SEEDS is a range, e.g. 6..200");
        a.parse().expect("a seed")..b.parse().expect("a seed")
    });
    for (name, cfg) in STACKS {
        for seed in seeds.clone() {
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
            let ops = random_ops(&mut rng, 300, DEVICE_BYTES / 512, 200);
            let cuts = crash_check(cfg, DEVICE_BYTES, seed, &ops, 4, 40);
            eprintln!("stack {name} seed {seed}: {cuts} cut points checked");
            assert!(cuts > 20, "too few cut points to mean anything: {cuts}");
        }
    }
}

#[test]
fn a_32_mib_request_round_trips_and_one_past_it_is_einval() {
    let cfg = STACKS[0].1;
    let dev = 64 << 20;
    let mut h = oracle_check(cfg, dev, 1, &[], 1);
    let data: Vec<u8> = (0..(32u32 << 20)).map(|i| (i % 251) as u8).collect();
    assert_eq!(h.write(4096, data.clone()).result, Ok(()));
    let back = h.read(4096, 32 << 20);
    assert_eq!(back.data.as_deref(), Some(&data[..]));
    let too_big = h.read(0, (32 << 20) + 512);
    assert_eq!(too_big.result, Err(layoutd_core::IoError::Invalid));
    let misaligned = h.read(1, 512);
    assert_eq!(misaligned.result, Err(layoutd_core::IoError::Invalid));
    let past_end = h.read(dev, 512);
    assert_eq!(past_end.result, Err(layoutd_core::IoError::Invalid));
}

#[test]
fn trace_target_records_every_request_in_submit_order() {
    let cfg = STACKS[2].1;
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(9);
    let ops = random_ops(&mut rng, 100, DEVICE_BYTES / 512, 64);
    let mut h = oracle_check(cfg, DEVICE_BYTES, 9, &ops, 6);
    let records = h.take_records();
    assert_eq!(records.len(), ops.len());
    for (r, spec) in records.iter().zip(&ops) {
        assert_eq!(r.op, spec.op);
        // The record names the base stream, not the detector's id
        // (`base * RUN_SLOTS + run`) the request came with.
        assert_eq!(r.stream.0, spec.stream);
        assert!(r.complete >= r.submit);
        let parsed = layoutd_core::TraceRecord::parse_line(&r.to_line()).expect("line parses");
        assert_eq!(&parsed, r);
    }
}
