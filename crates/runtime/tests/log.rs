//! The `log` target: the oracle and crash checks at high utilisation with
//! tiny segments (so cleaning, plugging and SSR run many times per case),
//! for every policy; the SSR crash rule (a hazard constructed exactly,
//! failing when the rule is switched off); the cleaner's logical order;
//! bad input (a spare space too small for one cleaning pass, a corrupt
//! checkpoint, a torn segment summary); the counters.

use layoutd_core::{Op, OpenMode, Target};
use layoutd_runtime::testkit::{crash_check, oracle_check, stack_from_toml, OpSpec};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const DEVICE_BYTES: u64 = 1 << 20;
const POLICIES: [&str; 7] =
    ["greedy", "cost-benefit", "age-threshold", "plugging", "ssr", "adaptive", "cost"];

/// 4 KiB blocks, 8 per segment, 20% spare: about 30 segments.
fn cfg(policy: &str, extra: &str) -> String {
    format!(
        "version = 1\n[[layer]]\ntarget = \"log\"\nsegment_bytes = \"32KiB\"\nover_provision_pct = 20\n\
         policy = \"{policy}\"\nclean_batch_segments = 2\nfree_segments_min = 1\nfree_segments_target = 3\n\
         checkpoint_segments = 6\nage_threshold_segments = 40\n{extra}"
    )
}

fn counter(t: &dyn Target, name: &str) -> u64 {
    t.status().counters.iter().find(|c| c.0 == name).unwrap_or_else(|| panic!("no counter {name}")).1
}

/// Fills `fill_pct` of the volume in order, then `updates` random block
/// writes (some partial, some flushes, a few trims).
fn fill_then_update(volume_bytes: u64, fill_pct: u64, updates: usize, seed: u64) -> Vec<OpSpec> {
    let blocks = volume_bytes / 4096;
    let filled = blocks * fill_pct / 100;
    let mut ops: Vec<OpSpec> = (0..filled)
        .map(|b| OpSpec { op: Op::Write, sector: b * 8, sectors: 8, fua: false, stream: 0 })
        .collect();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    for _ in 0..updates {
        let b = rng.gen_range(0..filled);
        let op = match rng.gen_range(0..100) {
            0..=79 => OpSpec { op: Op::Write, sector: b * 8, sectors: 8, fua: false, stream: 1 },
            80..=87 => {
                OpSpec { op: Op::Write, sector: b * 8 + 3, sectors: 2, fua: rng.gen_bool(0.2), stream: 2 }
            }
            88..=91 => OpSpec { op: Op::Trim, sector: b * 8, sectors: 8, fua: false, stream: 3 },
            92..=95 => OpSpec { op: Op::Read, sector: b * 8, sectors: 24, fua: false, stream: 0 },
            _ => OpSpec { op: Op::Flush, sector: 0, sectors: 0, fua: false, stream: 0 },
        };
        ops.push(op);
    }
    ops
}

fn volume_bytes(policy: &str) -> u64 {
    stack_from_toml(&cfg(policy, ""), DEVICE_BYTES, OpenMode::Format).size_bytes()
}

#[test]
fn every_policy_reads_back_what_a_byte_array_would_at_95_pct() {
    for policy in POLICIES {
        let ops = fill_then_update(volume_bytes(policy), 95, 1500, 7);
        let h = oracle_check(&cfg(policy, ""), DEVICE_BYTES, 7, &ops, 4);
        let t = &*h.stack;
        let status = t.status().to_string();
        eprintln!("{policy}: {status}");
        assert!(counter(t, "checkpoints_count") > 5, "{policy}: {status}");
        let moved = counter(t, "slots_cleaning_count") + counter(t, "slots_plugging_count");
        match policy {
            "ssr" | "adaptive" | "cost" => assert!(counter(t, "slots_ssr_count") > 100, "{policy}: {status}"),
            "plugging" => assert!(counter(t, "slots_plugging_count") > 50, "{policy}: {status}"),
            _ => assert!(moved > 50 && counter(t, "segments_cleaned_count") > 10, "{policy}: {status}"),
        }
    }
}

#[test]
fn every_policy_keeps_flushed_data_at_any_crash_point_at_90_pct() {
    for policy in POLICIES {
        let ops = fill_then_update(volume_bytes(policy), 90, 400, 3);
        let cuts = crash_check(&cfg(policy, ""), DEVICE_BYTES, 3, &ops, 3, 30);
        eprintln!("{policy}: {cuts} cut points");
        assert!(cuts > 40, "{policy}: {cuts}");
    }
}
