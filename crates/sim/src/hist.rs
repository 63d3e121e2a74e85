//! A log-linear histogram in constant memory: exact below 128, then 64
//! buckets per power of two, so any percentile is within 1/64 (1.6 %) of
//! the true value, whatever the count. Like HdrHistogram with two
//! significant digits, without the dependency.

use serde::Serialize;

/// Linear buckets per power of two.
const SUB_BITS: u32 = 6;
const SUB_COUNT: u64 = 1 << SUB_BITS;
/// Values below this are counted exactly.
const LINEAR_MAX: u64 = 2 * SUB_COUNT;
/// Bucket count covering every u64.
const BUCKET_COUNT: usize = ((64 - SUB_BITS) as usize) * SUB_COUNT as usize + LINEAR_MAX as usize;
const _: () = assert!(BUCKET_COUNT < 4096);

/// Counts of values in log-linear buckets, with exact count, sum, min, max.
#[derive(Clone)]
pub struct Histogram {
    buckets: Box<[u64; BUCKET_COUNT]>,
    count: u64,
    sum: u128,
    min: u64,
    max: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram { buckets: Box::new([0; BUCKET_COUNT]), count: 0, sum: 0, min: u64::MAX, max: 0 }
    }
}

/// Summary statistics, in the histogram's unit divided by `unit`.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Summary {
    /// Arithmetic mean (exact).
    pub mean: f64,
    /// Median (bucket midpoint).
    pub p50: f64,
    /// 95th percentile (bucket midpoint).
    pub p95: f64,
    /// 99th percentile (bucket midpoint).
    pub p99: f64,
    /// Largest value (exact).
    pub max: f64,
}

fn bucket_index(v: u64) -> usize {
    if v < LINEAR_MAX {
        return v as usize;
    }
    let exponent = 63 - v.leading_zeros();
    let shift = exponent - SUB_BITS;
    let index = u64::from(shift) * SUB_COUNT + (v >> shift);
    index as usize
}

/// The lowest value and the width of bucket `index`.
fn bucket_range(index: usize) -> (u64, u64) {
    let index = index as u64;
    if index < LINEAR_MAX {
        return (index, 1);
    }
    let shift = index / SUB_COUNT - 1;
    let mantissa = index - shift * SUB_COUNT;
    (mantissa << shift, 1 << shift)
}

impl Histogram {
    /// Counts one value.
    pub fn record(&mut self, v: u64) {
        self.buckets[bucket_index(v)] += 1;
        self.count += 1;
        self.sum += u128::from(v);
        self.min = self.min.min(v);
        self.max = self.max.max(v);
    }

    /// Values counted.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Sum of the values counted.
    pub fn sum(&self) -> u128 {
        self.sum
    }

    /// The largest value counted (0 when empty).
    pub fn max(&self) -> u64 {
        self.max
    }

    /// The value at quantile `q` in [0, 1]: the midpoint of its bucket,
    /// clamped to [min, max]. 0 when empty.
    pub fn quantile(&self, q: f64) -> u64 {
        assert!((0.0..=1.0).contains(&q));
        if self.count == 0 {
            return 0;
        }
        let rank = ((q * self.count as f64).ceil() as u64).clamp(1, self.count);
        let mut seen = 0u64;
        for (i, &n) in self.buckets.iter().enumerate() {
            seen += n;
            if seen >= rank {
                let (low, width) = bucket_range(i);
                return (low + width / 2).clamp(self.min, self.max);
            }
        }
        unreachable!("rank {rank} within count {}", self.count)
    }

    /// Mean, percentiles and max, each divided by `unit` (e.g. 1e6 for ns → ms).
    pub fn summary(&self, unit: f64) -> Summary {
        let scale = |v: f64| round6(v / unit);
        let mean = if self.count == 0 { 0.0 } else { self.sum as f64 / self.count as f64 };
        Summary {
            mean: scale(mean),
            p50: scale(self.quantile(0.50) as f64),
            p95: scale(self.quantile(0.95) as f64),
            p99: scale(self.quantile(0.99) as f64),
            max: scale(self.max as f64),
        }
    }

    /// Non-empty buckets as (lowest value, width, count), ascending.
    pub fn buckets(&self) -> impl Iterator<Item = (u64, u64, u64)> + '_ {
        self.buckets.iter().enumerate().filter(|(_, n)| **n > 0).map(|(i, n)| {
            let (low, width) = bucket_range(i);
            (low, width, *n)
        })
    }
}

impl Histogram {
    /// Non-empty buckets merged to 8 per power of two (exact below 128):
    /// `[lowest value, width, count]`, ascending. What the JSON keeps for
    /// plots (a few hundred entries at most, where the full resolution has
    /// thousands).
    pub fn coarse_buckets(&self) -> Vec<[u64; 3]> {
        let mut out: Vec<[u64; 3]> = Vec::new();
        for (low, width, n) in self.buckets() {
            let (low, width) = if low < LINEAR_MAX {
                (low, width)
            } else {
                let shift = 63 - low.leading_zeros() - 3;
                (low >> shift << shift, 1 << shift)
            };
            match out.last_mut() {
                Some(last) if last[0] == low => last[2] += n,
                _ => out.push([low, width, n]),
            }
        }
        out
    }
}

/// Rounds to 6 decimals, so JSON figures are short and stable.
pub fn round6(v: f64) -> f64 {
    (v * 1e6).round() / 1e6
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_cover_every_value_in_order() {
        let mut last = 0;
        for v in (0..100_000u64).chain([u64::MAX / 3, u64::MAX - 1, u64::MAX]) {
            let i = bucket_index(v);
            assert!(i < BUCKET_COUNT);
            assert!(i >= last);
            last = i;
            let (low, width) = bucket_range(i);
            assert!(low <= v && v - low < width, "v={v} low={low} width={width}");
        }
    }

    #[test]
    fn percentiles_are_within_two_percent() {
        let mut h = Histogram::default();
        for v in 1..=100_000u64 {
            h.record(v * 1000);
        }
        for (q, want) in [(0.5, 50_000_000.0), (0.95, 95_000_000.0), (0.99, 99_000_000.0)] {
            let got = h.quantile(q) as f64;
            assert!((got - want).abs() / want < 0.02, "q={q} got={got}");
        }
        assert_eq!(h.max(), 100_000_000);
        assert_eq!(h.summary(1e6).mean, 50.0005);
        let coarse = h.coarse_buckets();
        assert_eq!(coarse.iter().map(|b| b[2]).sum::<u64>(), 100_000);
        assert!(coarse.windows(2).all(|w| w[0][0] + w[0][1] <= w[1][0]), "ascending, disjoint");
        assert!(coarse.len() < 200, "{} buckets", coarse.len());
    }
}
