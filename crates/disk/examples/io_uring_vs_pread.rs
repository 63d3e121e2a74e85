//! Benchmark, not a test: does io_uring pay for the live runtime's lower
//! I/O? The runtime performs each lower request synchronously on the
//! thread that holds it (a client's NBD worker for its own I/O, one of four
//! executor threads for background I/O), with `pread`/`pwrite`. This
//! measures 4 KiB random reads and writes on one file three ways, at the
//! same concurrency:
//!
//! - `pread`: T threads, one `pread`/`pwrite` each at a time (what the
//!   runtime does);
//! - `uring-sync`: T threads, each with its own ring, one request submitted
//!   and waited for at a time (io_uring dropped in without restructuring);
//! - `uring-batch`: one thread keeping T requests in flight on one ring
//!   (what a runtime restructured around completions could do).
//!
//! Usage: `cargo run --release -p layoutd-disk --example io_uring_vs_pread --
//! FILE [threads=16] [seconds=3] [repeats=3] [size_mib=1024]`. FILE is
//! created (sparse) if missing; put it on tmpfs to measure the software path.
//! Prints one line per mode and op: median IOPS over the repeats, and every
//! run. Runs are interleaved (mode by mode within each repeat).

use io_uring::{opcode, types, IoUring};
use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const BLOCK: u64 = 4096;

/// A seeded xorshift: the offsets are the same in every run.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Pread,
    UringSync,
    UringBatch,
}

fn run(file: &Arc<std::fs::File>, mode: Mode, write: bool, threads: usize, secs: u64, blocks: u64) -> f64 {
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let workers = if mode == Mode::UringBatch { 1 } else { threads };
    let handles: Vec<_> = (0..workers)
        .map(|t| {
            let (file, stop, done) = (file.clone(), stop.clone(), done.clone());
            std::thread::spawn(move || {
                let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ (t as u64 + 1));
                let mut bufs = vec![vec![0x5au8; BLOCK as usize]; threads];
                let mut n = 0u64;
                match mode {
                    Mode::Pread => {
                        while !stop.load(Ordering::Relaxed) {
                            let off = rng.next() % blocks * BLOCK;
                            if write {
                                file.write_all_at(&bufs[0], off).expect("pwrite");
                            } else {
                                file.read_exact_at(&mut bufs[0], off).expect("pread");
                            }
                            n += 1;
                        }
                    }
                    Mode::UringSync | Mode::UringBatch => {
                        let depth = if mode == Mode::UringSync { 1 } else { threads };
                        let mut ring = IoUring::new(depth.next_power_of_two() as u32).expect("io_uring");
                        let fd = types::Fd(file.as_raw_fd());
                        let mut in_flight = 0usize;
                        let mut free: Vec<usize> = (0..depth).collect();
                        loop {
                            while in_flight < depth && !stop.load(Ordering::Relaxed) {
                                let i = free.pop().expect("a free buffer");
                                let off = rng.next() % blocks * BLOCK;
                                let p = bufs[i].as_mut_ptr();
                                let e = if write {
                                    opcode::Write::new(fd, p, BLOCK as u32).offset(off).build()
                                } else {
                                    opcode::Read::new(fd, p, BLOCK as u32).offset(off).build()
                                };
                                // SAFETY: the buffer lives until its completion is reaped below.
                                unsafe {
                                    ring.submission().push(&e.user_data(i as u64)).expect("queue room")
                                };
                                in_flight += 1;
                            }
                            if in_flight == 0 {
                                break;
                            }
                            ring.submit_and_wait(1).expect("submit");
                            for c in ring.completion() {
                                assert_eq!(c.result(), BLOCK as i32, "short or failed I/O");
                                free.push(c.user_data() as usize);
                                in_flight -= 1;
                                n += 1;
                            }
                        }
                    }
                }
                done.fetch_add(n, Ordering::Relaxed);
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs(secs));
    stop.store(true, Ordering::Relaxed);
    for h in handles {
        h.join().expect("worker");
    }
    done.load(Ordering::Relaxed) as f64 / start.elapsed().as_secs_f64()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let Some(path) = args.get(1) else {
        eprintln!("usage: io_uring_vs_pread FILE [threads=16] [seconds=3] [repeats=3] [size_mib=1024]");
        std::process::exit(2);
    };
    let num = |i: usize, d: u64| args.get(i).map_or(d, |s| s.parse().expect("a number"));
    let (threads, secs, repeats, size_mib) = (num(2, 16) as usize, num(3, 3), num(4, 3), num(5, 1024));
    let file =
        OpenOptions::new().read(true).write(true).create(true).truncate(false).open(path).expect("open FILE");
    file.set_len(size_mib << 20).expect("size FILE");
    let file = Arc::new(file);
    let blocks = (size_mib << 20) / BLOCK;
    let modes = [("pread", Mode::Pread), ("uring-sync", Mode::UringSync), ("uring-batch", Mode::UringBatch)];
    let mut results: Vec<(String, Vec<f64>)> = Vec::new();
    for _ in 0..repeats {
        for write in [false, true] {
            for (name, mode) in modes {
                let iops = run(&file, mode, write, threads, secs, blocks);
                let key = format!("{name} {}", if write { "write" } else { "read" });
                match results.iter_mut().find(|r| r.0 == key) {
                    Some(r) => r.1.push(iops),
                    None => results.push((key, vec![iops])),
                }
            }
        }
    }
    println!("4 KiB random I/O on {path}, {threads}-way, {secs} s x {repeats} runs (median IOPS; every run)");
    for (key, mut v) in results {
        let runs: Vec<String> = v.iter().map(|x| format!("{x:.0}")).collect();
        v.sort_by(f64::total_cmp);
        println!("{key:18} {:>10.0}   [{}]", v[v.len() / 2], runs.join(", "));
    }
}
