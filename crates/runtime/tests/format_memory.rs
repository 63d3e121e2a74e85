//! Memory of formatting a large device: every persistent target's example
//! config is formatted and brought up over a 64 GiB device whose writes go
//! nowhere (reads give zeroes), and the peak of live allocation during it
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
use layoutd_disk::BlockDevice;
use layoutd_runtime::det::{Harness, ZeroLatency};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn add(n: usize) {
    let live = LIVE.fetch_add(n, Ordering::Relaxed) + n;
    PEAK.fetch_max(live, Ordering::Relaxed);
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        add(layout.size());
        System.alloc(layout)
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        add(layout.size());
        System.alloc_zeroed(layout)
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        System.dealloc(ptr, layout)
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size > layout.size() {
            add(new_size - layout.size());
        } else {
            LIVE.fetch_sub(layout.size() - new_size, Ordering::Relaxed);
        }
        System.realloc(ptr, layout, new_size)
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// A device of any size that keeps nothing: writes succeed, reads give
/// zeroes (what a fresh disk gives a format).
struct Discarding(u64);

impl BlockDevice for Discarding {
    fn size_bytes(&self) -> u64 {
        self.0
    }
    fn read_at(&self, buf: &mut [u8], _offset_bytes: u64) -> std::io::Result<()> {
        buf.fill(0);
        Ok(())
    }
    fn write_at(&self, _buf: &[u8], _offset_bytes: u64) -> std::io::Result<()> {
        Ok(())
    }
    fn flush(&self) -> std::io::Result<()> {
        Ok(())
    }
    fn trim(&self, _offset_bytes: u64, _length_bytes: u64) -> std::io::Result<()> {
        Ok(())
    }
    fn write_zeroes(&self, _offset_bytes: u64, _length_bytes: u64) -> std::io::Result<()> {
        Ok(())
    }
}

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
        let base = LIVE.load(Ordering::Relaxed);
        PEAK.store(base, Ordering::Relaxed);
        let stack = layoutd_targets::build_stack(&cfg, DEVICE_BYTES, OpenMode::Format).expect("builds");
        let dev = Arc::new(Discarding(DEVICE_BYTES)) as Arc<dyn BlockDevice>;
        let mut h = Harness::new(Box::new(stack), dev, ZeroLatency::default(), 5);
        h.bring_up().unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(h.read(0, 4096).result.is_ok(), "{name} serves");
        let peak = PEAK.load(Ordering::Relaxed) - base;
        assert!(peak <= PEAK_BYTES_MAX, "{name}: format peaked at {peak} bytes, more than {PEAK_BYTES_MAX}");
        drop(h);
    }
}
