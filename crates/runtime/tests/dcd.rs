//! The `dcd` target under the oracle and the recorder crash check, with
//! tiny segments so that buffers fill, the ring wraps, destage and
//! recovery all happen many times per case. Prefix and stale-resurrection
//! checks live in `dcd_crash.rs`.

use layoutd_core::Op;
use layoutd_runtime::testkit::{crash_check, oracle_check, OpSpec};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const DEVICE_BYTES: u64 = 1 << 20;

/// A tiny logical DCD: 64 KiB log of 4 KiB segments (8 slots of 512 B),
/// 12 segments in the ring; writes under 4 KiB are logged.
pub fn tiny(extra: &str) -> String {
    format!(
        "version = 1\n[[layer]]\ntarget = \"dcd\"\nlog_length = \"64KiB\"\nsegment_bytes = 4096\nslot_bytes = 512\n\
         buffer_count = 2\nbuffer_delay_ms = 5\nbypass_bytes = 4096\nidle_ms_max = 20\nidle_ms_min = 1\n{extra}"
    )
}

fn stacks() -> Vec<(&'static str, String)> {
    vec![
        ("dcd-tiny", tiny("")),
        ("dcd-tiny-fua-log-fewest", tiny("fua = \"log\"\ndestage_policy = \"fewest-valid-first\"\n")),
        (
            "dcd-1k-slots-oldest-4-buffers",
            tiny("")
                .replace("segment_bytes = 4096\nslot_bytes = 512", "segment_bytes = 8192\nslot_bytes = 1024")
                .replace("buffer_count = 2", "buffer_count = 4")
                + "destage_policy = \"oldest-first\"\n",
        ),
        ("dcd-tiny-read-destage", tiny("read_fragmented = \"destage\"\n")),
        (
            "trace-over-dcd-log-at-the-end",
            "version = 1\n[[layer]]\ntarget = \"trace\"\n".to_string()
                + &tiny("log_offset = \"960KiB\"\ndata_offset = 0\ndata_length = \"960KiB\"\n")
                    .replace("version = 1\n", ""),
        ),
    ]
}

/// A file-system-like workload: mostly small writes to a hot range (so
/// they overwrite each other in RAM and in the log), reads of the same
/// range, some large writes, trims, flushes and FUA writes.
pub fn dcd_ops(rng: &mut ChaCha8Rng, count: usize, hot_sectors: u64, sectors_total: u64) -> Vec<OpSpec> {
    (0..count)
        .map(|_| {
            let (op, sectors) = match rng.gen_range(0..100) {
                0..=44 => (Op::Write, rng.gen_range(1..=7)),
                45..=49 => (Op::Write, rng.gen_range(8..=64)),
                50..=79 => (Op::Read, rng.gen_range(1..=32)),
                80..=89 => (Op::Flush, 0),
                90..=95 => (Op::Trim, rng.gen_range(1..=24)),
                _ => (Op::WriteZeroes, rng.gen_range(1..=24)),
            };
            let hot = rng.gen_bool(0.9);
            let sector = if hot { rng.gen_range(0..hot_sectors) } else { rng.gen_range(0..sectors_total) };
            OpSpec { op, sector, sectors, fua: rng.gen_bool(0.08), stream: rng.gen_range(0..4) }
        })
        .collect()
}

#[test]
fn dcd_reads_back_what_a_byte_array_would() {
    for (name, cfg) in stacks() {
        for seed in 0..24u64 {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let ops = dcd_ops(&mut rng, 500, 96 + seed * 16, DEVICE_BYTES / 512);
            let h = oracle_check(&cfg, DEVICE_BYTES, seed, &ops, 1 + (seed as usize % 6));
            assert_eq!(h.upper_outstanding_count(), 0, "{name} seed {seed}");
            let st = h.stack.layer_statuses().into_iter().find(|s| s.target == "dcd").expect("dcd layer");
            let get = |k: &str| st.counters.iter().find(|c| c.0 == k).map(|c| c.1).expect(k);
            if seed == 0 {
                eprintln!("{name}: {st}");
            }
            assert_eq!(get("dirty_segments_count"), 0, "settled means destaged ({name} seed {seed})");
            assert_eq!(get("log_sectors_mapped_count"), 0);
        }
    }
}

#[test]
fn dcd_crash_at_every_flush_and_random_points_keeps_flushed_data() {
    for (name, cfg) in stacks() {
        for seed in 0..4u64 {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let ops = dcd_ops(&mut rng, 250, 128, DEVICE_BYTES / 512);
            let cuts = crash_check(&cfg, DEVICE_BYTES, seed, &ops, 4, 30);
            eprintln!("{name} seed {seed}: {cuts} cut points checked");
            assert!(cuts > 20, "too few cut points: {cuts}");
        }
    }
}

/// `DCD_DEBUG=<stack index>,<seed> cargo test --test dcd dcd_debug_one -- --nocapture`
/// reruns one oracle case and prints the dcd status even if it fails.
#[test]
fn dcd_debug_one() {
    use layoutd_runtime::det::{Harness, ZeroLatency};
    use layoutd_runtime::testkit::{bring_up, run_oracle, stack_from_toml};
    let Ok(spec) = std::env::var("DCD_DEBUG") else { return };
    let v: Vec<u64> = spec.split(',').map(|x| x.parse().expect("index,seed")).collect();
    let (i, seed) = (v[0] as usize, v[1]);
    let cfg = &stacks()[i].1;
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let ops = dcd_ops(&mut rng, 500, 96 + seed * 16, DEVICE_BYTES / 512);
    let dev = std::sync::Arc::new(layoutd_disk::MemDevice::new(DEVICE_BYTES));
    let stack = stack_from_toml(cfg, DEVICE_BYTES, layoutd_core::OpenMode::Format);
    let mut h = Harness::new(stack, dev, ZeroLatency::reordering(), seed);
    bring_up(&mut h);
    let depth = 1 + (seed as usize % 6);
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run_oracle(&mut h, &ops, depth, None)));
    for s in h.stack.layer_statuses() {
        eprintln!("{s}");
    }
    assert!(r.is_ok());
}
