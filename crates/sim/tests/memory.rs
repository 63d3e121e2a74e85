//! Memory of timing-only replay: no target may hold payload memory for a
//! request when the simulator carries no data, so an open-loop overload
//! (requests arriving far faster than the disk serves them, the queue
//! growing to the whole trace) costs a bounded number of bytes per queued
//! request, whatever the requests' lengths.
//!
//! Allocation is counted by a global allocator in this test binary (live
//! bytes and their peak); nothing is timed. One test per binary, so no
//! other test's allocations are counted.

use layoutd_core::config::StackConfig;
use layoutd_hdd::DiskParams;
use layoutd_sim::{simulate, SimOptions, TraceFormat};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

#[path = "../../core/tests/support/counting_alloc.rs"]
mod counting_alloc;

/// Requests in the generated overload.
const REQUESTS: u64 = 200_000;

/// Stated bound: bytes of peak live allocation per request of the trace
/// above the allocation before the replay started, for the whole simulator
/// (reader, harness, disk queue, stack, histograms). A payload buffer per
/// outstanding read would be 64 KiB per request here. Measured: about 103
/// (per queued request: dcd's lower op 24, the harness's lower request 24,
/// the disk's host queue 32, the replay's 16, each table growing by an
/// eighth rather than doubling; the rest is dcd's state for the absorbed
/// writes and fixed buffers), plus about 10 %.
const BYTES_PER_QUEUED_REQUEST_MAX: usize = 114;

/// An open-loop overload in layoutd format: one request every 10 µs (the
/// disk serves one in several ms, so the queue grows to nearly the whole
/// trace), 7 of 8 reads of `length` bytes at scattered addresses, the rest
/// 4 KiB writes (absorbed by dcd).
fn overload_trace(dir: &Path, length: u64) -> PathBuf {
    let mut text = String::with_capacity(REQUESTS as usize * 40);
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for i in 0..REQUESTS {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let t = i * 10_000;
        let offset = (x % (1 << 30)) / 65536 * 65536;
        let (op, len) = if i % 8 == 7 { ('W', 4096) } else { ('R', length) };
        writeln!(text, "{t} {t} {} {op} {offset} {len} -", i % 16).unwrap();
    }
    let path = dir.join(format!("overload-{length}.trace"));
    std::fs::write(&path, text).unwrap();
    path
}

/// Peak live bytes during one open-loop replay above the live bytes before it,
/// and the largest number of requests outstanding.
fn peak_of_replay(trace: PathBuf, stack: &StackConfig) -> (usize, u64) {
    let mut o = SimOptions::new(trace, TraceFormat::Layoutd, DiskParams::preset("wd800").unwrap());
    o.stack = stack.clone();
    o.stack_origin = "dcd".into();
    o.samples_max = 1000;
    let before = counting_alloc::live_bytes();
    counting_alloc::reset_peak();
    let out = simulate(&o).unwrap();
    let peak = counting_alloc::peak_bytes() - before;
    assert_eq!(out.summary.requests, REQUESTS);
    assert!(out.summary.reads_count > REQUESTS * 3 / 4);
    // Arrivals end after REQUESTS x 10 us; the disk serves at a roughly
    // even pace until the end, so this share of the reads was still queued
    // when the last one arrived.
    let arrivals_s = REQUESTS as f64 * 1e-5;
    let queued = out.summary.reads_count as f64 * (1.0 - arrivals_s / out.summary.simulated_seconds);
    (peak, queued as u64)
}

#[test]
fn open_loop_dcd_overload_does_not_allocate_payload_memory() {
    let dir = tempfile::tempdir().unwrap();
    let stack =
        StackConfig::parse("version = 1\n[[layer]]\ntarget = \"dcd\"\nlog_length = \"64MiB\"\n", "test dcd")
            .unwrap();
    let (peak_small, queued_small) = peak_of_replay(overload_trace(dir.path(), 4096), &stack);
    let (peak_large, queued_large) = peak_of_replay(overload_trace(dir.path(), 65536), &stack);
    eprintln!(
        "peak live bytes: 4 KiB reads {peak_small} (~{queued_small} queued), \
         64 KiB reads {peak_large} (~{queued_large} queued)"
    );
    // The queue really grew: an overload, not a replay the disk kept up with.
    assert!(queued_large > REQUESTS / 2, "queue reached {queued_large}");
    // Within the stated bound per request of the trace.
    let bound = BYTES_PER_QUEUED_REQUEST_MAX * REQUESTS as usize;
    assert!(peak_large < bound, "peak {peak_large} bytes >= bound {bound}");
    // And independent of the requests' lengths: 16x longer reads may not
    // cost more than a little (different layouts of the same queue), where
    // a payload buffer per read would cost 16x.
    assert!(
        peak_large < peak_small + peak_small / 4,
        "64 KiB reads peak {peak_large} vs 4 KiB reads {peak_small}: memory grows with length"
    );
}
