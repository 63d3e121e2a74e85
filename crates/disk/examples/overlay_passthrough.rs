//! Benchmark, not a test: what a committed overlay costs. Every open
//! serves its stack over the recording overlay it was brought up on
//! (`OverlayDevice::commit`, then pass-through). This measures 4 KiB
//! random reads and writes on one file (in the page cache: the software
//! path only), straight to the `FileDevice` and through a committed
//! overlay, on T threads, interleaved over the repeats.
//!
//! Usage: `cargo run --release -p layoutd-disk --example overlay_passthrough
//! -- FILE [threads=4] [ops_per_thread=200000] [repeats=5]`. FILE is
//! created (64 MiB) if missing; `null` measures on a `NullDevice` instead
//! (no I/O: the overlay's own cost per request). Prints ns per request
//! (median over the repeats) for each way and op.

use layoutd_disk::{BlockDevice, FileDevice, NullDevice, OverlayDevice};
use std::sync::Arc;
use std::time::Instant;

const BLOCK: u64 = 4096;
const FILE_BYTES: u64 = 64 << 20;

fn run(dev: &Arc<dyn BlockDevice>, threads: u64, ops: u64, write: bool) -> f64 {
    let t = Instant::now();
    std::thread::scope(|s| {
        for th in 0..threads {
            let dev = dev.clone();
            s.spawn(move || {
                let mut buf = vec![th as u8; BLOCK as usize];
                let mut x = 0x9E37_79B9_7F4A_7C15u64 ^ th;
                for _ in 0..ops {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let at = (x % (FILE_BYTES / BLOCK)) * BLOCK;
                    if write {
                        dev.write_at(&buf, at).expect("write");
                    } else {
                        dev.read_at(&mut buf, at).expect("read");
                    }
                }
            });
        }
    });
    t.elapsed().as_nanos() as f64 / (threads * ops) as f64
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let path = std::path::PathBuf::from(args.first().expect("FILE"));
    let threads: u64 = args.get(1).map_or(4, |a| a.parse().expect("threads"));
    let ops: u64 = args.get(2).map_or(200_000, |a| a.parse().expect("ops"));
    let repeats: usize = args.get(3).map_or(5, |a| a.parse().expect("repeats"));
    let direct: Arc<dyn BlockDevice> = if path.as_os_str() == "null" {
        Arc::new(NullDevice::new(FILE_BYTES))
    } else {
        let file =
            std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(false).open(&path);
        file.and_then(|f| f.set_len(FILE_BYTES)).expect("file");
        Arc::new(FileDevice::open(&path, false, false).expect("open"))
    };
    let overlay = Arc::new(OverlayDevice::recording(direct.clone()));
    overlay.write_at(&[1; 4096], 0).expect("a bring-up write");
    overlay.flush().expect("flush");
    overlay.commit().expect("commit");
    let through: Arc<dyn BlockDevice> = overlay;
    // Fill the page cache.
    run(&direct, 1, FILE_BYTES / BLOCK, true);
    for (op, write) in [("read", false), ("write", true)] {
        let (mut a, mut b) = (Vec::new(), Vec::new());
        for _ in 0..repeats {
            a.push(run(&direct, threads, ops, write));
            b.push(run(&through, threads, ops, write));
        }
        let median = |v: &mut Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        let (a, b) = (median(&mut a), median(&mut b));
        println!(
            "4 KiB {op}, {threads} threads: direct {a:.0} ns, through a committed overlay {b:.0} ns ({:+.1} %)",
            (b / a - 1.0) * 100.0
        );
    }
}
