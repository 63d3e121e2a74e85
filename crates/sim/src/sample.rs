//! A deterministic, bounded sample of (time, address, is-write) points for
//! the address-against-time plot. It keeps every `stride`-th point offered;
//! when full it drops every other kept point and doubles the stride, so
//! it always holds between half and all of `samples_max` points spread
//! evenly over the whole run, however long.

/// One sampled request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Point {
    /// When it was submitted to the disk, ns.
    pub time_ns: u64,
    /// Its byte offset on the disk.
    pub offset_bytes: u64,
    /// Write (true) or read.
    pub write: bool,
}

/// See the module docs.
pub struct Sampler {
    points: Vec<Point>,
    samples_max: usize,
    stride: u64,
    offered: u64,
}

impl Sampler {
    /// A sampler keeping at most `samples_max` points (at least 2).
    pub fn new(samples_max: usize) -> Sampler {
        let samples_max = samples_max.max(2);
        Sampler { points: Vec::new(), samples_max, stride: 1, offered: 0 }
    }

    /// Offers one point.
    pub fn offer(&mut self, time_ns: u64, offset_bytes: u64, write: bool) {
        self.offered += 1;
        if !(self.offered - 1).is_multiple_of(self.stride) {
            return;
        }
        if self.points.len() == self.samples_max {
            let mut keep = false;
            self.points.retain(|_| {
                keep = !keep;
                keep
            });
            self.stride *= 2;
            if !(self.offered - 1).is_multiple_of(self.stride) {
                return;
            }
        }
        self.points.push(Point { time_ns, offset_bytes, write });
        assert!(self.points.len() <= self.samples_max);
    }

    /// The points kept, in time order.
    pub fn points(&self) -> &[Point] {
        &self.points
    }

    /// Points offered in all.
    pub fn offered_count(&self) -> u64 {
        self.offered
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stays_bounded_and_even() {
        let mut s = Sampler::new(100);
        for i in 0..100_000u64 {
            s.offer(i, i, false);
        }
        assert!(s.points().len() <= 100 && s.points().len() >= 50);
        let gaps: Vec<u64> = s.points().windows(2).map(|w| w[1].time_ns - w[0].time_ns).collect();
        assert!(gaps.iter().all(|g| *g == gaps[0]), "evenly spaced");
    }
}
