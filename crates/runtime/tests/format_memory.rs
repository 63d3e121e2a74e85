//! Memory of formatting a large device: every persistent target's example
//! config is formatted and brought up over a 64 GiB `NullDevice` (writes go
//! nowhere, reads give zeroes), and the peak of live allocation during it
//! stays within the log's stated RAM bound, 4 bytes per 4 KiB block of the
//! device (the issue: "a 1 TiB volume in ≤ 1 GiB"). Before the log
//! streamed its format writes it built the whole list first: 223 MiB here,
//! 3.5 GiB at 1 TiB.
//!
//! Allocation is counted by a global allocator in this test binary (live
//! bytes and their peak); nothing is timed. One test per binary, so no
//! other test's allocations are counted.

use layoutd_core::config::StackConfig;
use layoutd_core::OpenMode;
use layoutd_disk::{BlockDevice, NullDevice};
use layoutd_runtime::det::{Harness, ZeroLatency};
use std::sync::Arc;

#[path = "../../core/tests/support/counting_alloc.rs"]
mod counting_alloc;

const DEVICE_BYTES: u64 = 64 << 30;

/// The stated bound: 4 bytes of RAM per 4 KiB block of the device.
const PEAK_BYTES_MAX: usize = (DEVICE_BYTES / 4096 * 4) as usize;

#[test]
fn formatting_64_gib_peaks_within_4_bytes_a_block() {
    let examples = [
        ("dcd", include_str!("../../../examples/dcd.toml")),
        ("log", include_str!("../../../examples/log.toml")),
        ("opt", include_str!("../../../examples/opt.toml")),
        ("pool", include_str!("../../../examples/pool.toml")),
        ("replica", include_str!("../../../examples/replica.toml")),
    ];
    for (name, text) in examples {
        let cfg = StackConfig::parse(text, name).expect("example parses");
        let base = counting_alloc::live_bytes();
        counting_alloc::reset_peak();
        let stack = layoutd_targets::build_stack(&cfg, DEVICE_BYTES, OpenMode::format(1)).expect("builds");
        let dev = Arc::new(NullDevice::new(DEVICE_BYTES)) as Arc<dyn BlockDevice>;
        let mut h = Harness::new(Box::new(stack), dev, ZeroLatency::default(), 5);
        h.bring_up().unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(h.read(0, 4096).result.is_ok(), "{name} serves");
        let peak = counting_alloc::peak_bytes() - base;
        assert!(peak <= PEAK_BYTES_MAX, "{name}: format peaked at {peak} bytes, more than {PEAK_BYTES_MAX}");
        drop(h);
    }
}
