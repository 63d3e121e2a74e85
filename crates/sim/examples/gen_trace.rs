//! A synthetic block trace on standard output, generated on the fly (so
//! benchmarks need no committed multi-gigabyte files).
//!
//! ```text
//! gen_trace COUNT [FORMAT=layoutd|spc] [MEAN_GAP_US=20000] [STREAMS=8] [SPAN_GIB=64] [SEED=1]
//! ```
//! Each request picks a stream; half continue that stream's sequential run,
//! half jump to a random 4 KiB-aligned address in the span. Sizes are 4 to
//! 64 KiB, 70 % reads, exponential gaps with the given mean. Streams are
//! synchronous in the layoutd format (complete = submit + 1 ms).

use std::io::Write;

struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

fn arg<T: std::str::FromStr>(args: &[String], i: usize, default: T) -> T {
    args.get(i)
        .map(|s| s.parse().unwrap_or_else(|_| panic!("argument {i} {s:?} is not valid")))
        .unwrap_or(default)
}

fn main() -> std::io::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let count: u64 = arg(&args, 1, 1_000_000);
    let format: String = arg(&args, 2, "layoutd".to_string());
    let mean_gap_us: f64 = arg(&args, 3, 20_000.0);
    let streams: u64 = arg(&args, 4, 8);
    let span_bytes: u64 = arg::<u64>(&args, 5, 64) << 30;
    let mut rng = SplitMix(arg(&args, 6, 1));
    let mut next_offset = vec![0u64; streams as usize];
    let mut out = std::io::BufWriter::with_capacity(1 << 20, std::io::stdout().lock());
    if format == "layoutd" {
        writeln!(out, "# layoutd-trace v1: submit_ns complete_ns stream op offset_bytes length_bytes flags")?;
    }
    let mut t_ns = 0u64;
    for _ in 0..count {
        t_ns += (-(1.0 - rng.unit()).ln() * mean_gap_us * 1000.0) as u64;
        let s = (rng.next() % streams) as usize;
        let length = 4096 * (1 + rng.next() % 16);
        let offset = if rng.next().is_multiple_of(2) && next_offset[s] + length <= span_bytes {
            next_offset[s]
        } else {
            (rng.next() % (span_bytes / 4096 - 16)) * 4096
        };
        next_offset[s] = offset + length;
        let read = rng.next() % 10 < 7;
        match format.as_str() {
            "spc" => {
                let op = if read { 'r' } else { 'w' };
                writeln!(
                    out,
                    "{s},{},{length},{op},{}.{:09}",
                    offset / 512,
                    t_ns / 1_000_000_000,
                    t_ns % 1_000_000_000
                )?
            }
            _ => {
                let op = if read { 'R' } else { 'W' };
                writeln!(out, "{t_ns} {} {s} {op} {offset} {length} -", t_ns + 1_000_000)?
            }
        }
    }
    out.flush()
}
