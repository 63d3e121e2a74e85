//! Where the OPT region goes: a decision from a profile, made at `format`
//! (`layoutd opt place`), since the region's place is fixed there.
//!
//! The volume is the device minus the region, 1:1 (`Geometry::home_bytes`),
//! so moving a formatted region would move every home block between its
//! old and new place: the position is the config's `opt_offset`, written
//! into the superblock's stack at `format` and never changed by the target.
//! What a plan leaves home (blocks the profile never read, written ranges
//! with `plan_written = false`, whatever does not fit) is read with a seek
//! out of the region and back; the region's place sets that distance. Its
//! start at the weighted median of the profile's reads (each read its
//! weight, one seek) minimises the expected seek distance between the
//! region and a read at home drawn from the profile: half the weight lies
//! below the region, half above it. The default, the device's middle, is
//! where nothing about the data is known.
//!
//! A running `opt` keeps the same decision for its own profile:
//! [`HomeReads`] counts the reads it serves from home (what the workload
//! still reads outside the region) by where they are, and `status` shows
//! the offset they give (`opt_offset_best`), for the next `format`.

/// What `layoutd opt place` rounds its `opt_offset` to (a multiple of
/// every valid `block_bytes`, which is at most 1 MiB).
pub const PLACE_ALIGN_BYTES: u64 = 1 << 20;

/// The `opt_offset` for a profile: `reads` are `(volume byte, weight)`
/// (the volume's own addresses, the region left out), `volume_bytes` the
/// device minus the region's length. The weighted median volume byte,
/// rounded down to `align` (a multiple of `block_bytes`) and at most
/// `volume_bytes` rounded down, so the region fits in front of the
/// volume's rest. `None` when the reads weigh nothing (keep the config's
/// or the default place). `reads` is sorted in place.
pub fn region_offset(reads: &mut [(u64, u64)], volume_bytes: u64, align: u64) -> Option<u64> {
    assert!(align > 0);
    let total: u128 = reads.iter().map(|&(_, w)| u128::from(w)).sum();
    if total == 0 {
        return None;
    }
    reads.sort_unstable();
    let mut below = 0u128;
    let median = reads
        .iter()
        .find(|&&(_, w)| {
            below += u128::from(w);
            2 * below >= total
        })
        .map(|&(at, _)| at)
        .expect("the weights sum to the total");
    let last = volume_bytes / align * align;
    Some((median / align * align).min(last))
}

/// Buckets of [`HomeReads`] (8 KiB of counts; 78 MiB each on an 80 GB
/// volume).
pub const HOME_READ_BUCKETS: u64 = 1024;

/// The reads a running `opt` served from home (wholly or in part), one per
/// request, counted by where they start, in [`HOME_READ_BUCKETS`] buckets
/// over the volume: fixed memory, one add per request.
#[derive(Clone, Debug)]
pub struct HomeReads {
    bucket_bytes: u64,
    counts: Vec<u64>,
    total: u64,
}

impl HomeReads {
    /// No reads yet, over a volume of `volume_bytes`.
    pub fn new(volume_bytes: u64) -> HomeReads {
        let bucket_bytes = volume_bytes.div_ceil(HOME_READ_BUCKETS).max(1);
        HomeReads { bucket_bytes, counts: vec![0; volume_bytes.div_ceil(bucket_bytes) as usize], total: 0 }
    }

    /// A read served from home at volume byte `at`.
    pub fn add(&mut self, at: u64) {
        let i = ((at / self.bucket_bytes) as usize).min(self.counts.len() - 1);
        self.counts[i] += 1;
        self.total += 1;
    }

    /// Reads counted.
    pub fn count(&self) -> u64 {
        self.total
    }

    /// The `opt_offset` these reads give ([`region_offset`], each bucket's
    /// reads at its middle, rounded down to `align`), or `None` before any.
    pub fn best_offset(&self, volume_bytes: u64, align: u64) -> Option<u64> {
        let mut reads: Vec<(u64, u64)> = (self.counts.iter().enumerate())
            .filter(|&(_, &n)| n > 0)
            .map(|(i, &n)| (i as u64 * self.bucket_bytes + self.bucket_bytes / 2, n))
            .collect();
        region_offset(&mut reads, volume_bytes, align)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::opt::config::Geometry;

    const GIB: u64 = 1 << 30;

    /// `n` reads at `at` GiB, weight `w` each.
    fn reads_at(at: &[(f64, usize, u64)]) -> Vec<(u64, u64)> {
        at.iter().flat_map(|&(g, n, w)| std::iter::repeat_n(((g * GIB as f64) as u64, w), n)).collect()
    }

    #[test]
    fn the_region_goes_where_most_reads_are_not_to_the_devices_middle() {
        // 80 GiB device, 1 GiB region: the default would be 39.5 GiB.
        let volume = 79 * GIB;
        let mut r = reads_at(&[(10.0, 60, 1), (12.0, 30, 1), (70.0, 20, 1)]);
        assert_eq!(region_offset(&mut r, volume, PLACE_ALIGN_BYTES), Some(10 * GIB));
        // Another 50 reads up high move the median into the 12 GiB cluster.
        let mut r = reads_at(&[(10.0, 60, 1), (12.0, 30, 1), (70.0, 70, 1)]);
        assert_eq!(region_offset(&mut r, volume, PLACE_ALIGN_BYTES), Some(12 * GIB));
    }

    #[test]
    fn weights_count_not_the_number_of_entries() {
        let volume = 79 * GIB;
        let mut light = reads_at(&[(5.0, 10, 1), (60.0, 3, 1)]);
        assert_eq!(region_offset(&mut light, volume, PLACE_ALIGN_BYTES), Some(5 * GIB));
        let mut heavy = reads_at(&[(5.0, 10, 1), (60.0, 3, 4)]);
        assert_eq!(region_offset(&mut heavy, volume, PLACE_ALIGN_BYTES), Some(60 * GIB));
    }

    #[test]
    fn the_order_of_the_profile_does_not_matter() {
        let volume = 79 * GIB;
        let mut a = reads_at(&[(3.0, 5, 2), (33.3, 7, 1), (20.5, 4, 3), (50.0, 1, 9)]);
        let mut b = a.clone();
        b.reverse();
        b.rotate_left(5);
        assert_eq!(region_offset(&mut a, volume, 4096), region_offset(&mut b, volume, 4096));
    }

    #[test]
    fn the_offset_is_aligned_and_the_region_always_fits() {
        let length = GIB;
        for lower in [80 * GIB + 12345 * 512, 3 * GIB, 2 * GIB + 4096] {
            let volume = lower - length;
            for at in [0, 1, 17 * (1 << 20) + 4095, volume / 2 + 777, volume - 1] {
                let mut r = vec![(at, 1)];
                let p = region_offset(&mut r, volume, PLACE_ALIGN_BYTES).expect("a read");
                assert_eq!(p % PLACE_ALIGN_BYTES, 0, "read at {at}");
                assert!(p <= at, "read at {at}: the region starts at or below it");
                assert!(at - p < PLACE_ALIGN_BYTES || p == volume / PLACE_ALIGN_BYTES * PLACE_ALIGN_BYTES);
                for block in [4096, 1 << 20] {
                    assert!(Geometry::new(p, length, lower, block, 16).is_ok(), "offset {p} on {lower}");
                }
            }
        }
    }

    #[test]
    fn the_home_reads_counted_give_their_median_bucket() {
        let volume = 79 * GIB;
        let mut h = HomeReads::new(volume);
        assert_eq!(h.best_offset(volume, 4096), None);
        for _ in 0..5 {
            h.add(3 * GIB);
        }
        for _ in 0..3 {
            h.add(70 * GIB);
        }
        h.add(volume - 1);
        assert_eq!(h.count(), 9);
        let p = h.best_offset(volume, 4096).expect("reads");
        let bucket = volume.div_ceil(HOME_READ_BUCKETS);
        assert!(p <= 3 * GIB + bucket && 3 * GIB < p + bucket, "{p} is in 3 GiB's bucket");
        // More reads up high move it there.
        for _ in 0..3 {
            h.add(70 * GIB);
        }
        let p = h.best_offset(volume, 4096).expect("reads");
        assert!(p <= 70 * GIB + bucket && 70 * GIB < p + bucket, "{p} is in 70 GiB's bucket");
    }

    #[test]
    fn a_profile_that_weighs_nothing_keeps_the_configured_place() {
        assert_eq!(region_offset(&mut [], 79 * GIB, 4096), None);
        assert_eq!(region_offset(&mut [(5 * GIB, 0), (7 * GIB, 0)], 79 * GIB, 4096), None);
    }
}
