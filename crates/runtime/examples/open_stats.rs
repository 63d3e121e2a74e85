//! Opens a volume as `serve` does and prints what its bring-up read from
//! the devices and what its commit wrote (the recording overlay's bytes),
//! then flushes the stack and marks the volume clean.
//!
//!   cargo run --release -p layoutd-runtime --example open_stats -- DEVICE...

use layoutd_runtime::det::{Harness, ZeroLatency};
use layoutd_runtime::volume;
use std::path::PathBuf;
use std::time::Instant;

fn main() {
    let paths: Vec<PathBuf> = std::env::args_os().skip(1).map(PathBuf::from).collect();
    assert!(!paths.is_empty(), "usage: open_stats DEVICE...");
    let t = Instant::now();
    let vol = volume::open(&paths, false).unwrap_or_else(|e| {
        eprintln!("{e}");
        std::process::exit(1)
    });
    let s = vol.bring_up;
    println!(
        "open {:.2} s, was clean {}: read {} bytes in {} reads; commit {} bytes in {} entries ({} flushes)",
        t.elapsed().as_secs_f64(),
        vol.superblock.clean,
        s.base_read_bytes,
        s.base_reads,
        s.log_bytes,
        s.log_entries,
        s.log_flushes
    );
    let mut h = Harness::new(vol.stack, vol.data.clone(), ZeroLatency::default(), 0);
    assert_eq!(h.flush().result, Ok(()), "flush");
    h.settle();
    volume::mark_clean(&vol.members).expect("mark clean");
}
