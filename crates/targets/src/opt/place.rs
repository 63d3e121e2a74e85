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

/// What a recommended `opt_offset` is a multiple of (a multiple of every
/// valid `block_bytes`, which is at most 1 MiB).
pub const PLACE_ALIGN_BYTES: u64 = 1 << 20;

/// The `opt_offset` for a profile: `reads` are `(volume byte, weight)`
/// (the volume's own addresses, the region left out), `volume_bytes` the
/// device minus the region's length. The weighted median volume byte,
/// rounded down to [`PLACE_ALIGN_BYTES`] and at most `volume_bytes`
/// rounded down, so the region fits in front of the volume's rest. `None`
/// when the reads weigh nothing (keep the config's or the default place).
/// `reads` is sorted in place.
pub fn region_offset(reads: &mut [(u64, u64)], volume_bytes: u64) -> Option<u64> {
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
    let last = volume_bytes / PLACE_ALIGN_BYTES * PLACE_ALIGN_BYTES;
    Some((median / PLACE_ALIGN_BYTES * PLACE_ALIGN_BYTES).min(last))
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
        assert_eq!(region_offset(&mut r, volume), Some(10 * GIB));
        // Another 50 reads up high move the median into the 12 GiB cluster.
        let mut r = reads_at(&[(10.0, 60, 1), (12.0, 30, 1), (70.0, 70, 1)]);
        assert_eq!(region_offset(&mut r, volume), Some(12 * GIB));
    }

    #[test]
    fn weights_count_not_the_number_of_entries() {
        let volume = 79 * GIB;
        let mut light = reads_at(&[(5.0, 10, 1), (60.0, 3, 1)]);
        assert_eq!(region_offset(&mut light, volume), Some(5 * GIB));
        let mut heavy = reads_at(&[(5.0, 10, 1), (60.0, 3, 4)]);
        assert_eq!(region_offset(&mut heavy, volume), Some(60 * GIB));
    }

    #[test]
    fn the_order_of_the_profile_does_not_matter() {
        let volume = 79 * GIB;
        let mut a = reads_at(&[(3.0, 5, 2), (33.3, 7, 1), (20.5, 4, 3), (50.0, 1, 9)]);
        let mut b = a.clone();
        b.reverse();
        b.rotate_left(5);
        assert_eq!(region_offset(&mut a, volume), region_offset(&mut b, volume));
    }

    #[test]
    fn the_offset_is_aligned_and_the_region_always_fits() {
        let length = GIB;
        for lower in [80 * GIB + 12345 * 512, 3 * GIB, 2 * GIB + 4096] {
            let volume = lower - length;
            for at in [0, 1, 17 * (1 << 20) + 4095, volume / 2 + 777, volume - 1] {
                let mut r = vec![(at, 1)];
                let p = region_offset(&mut r, volume).expect("a read");
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
    fn a_profile_that_weighs_nothing_keeps_the_configured_place() {
        assert_eq!(region_offset(&mut [], 79 * GIB), None);
        assert_eq!(region_offset(&mut [(5 * GIB, 0), (7 * GIB, 0)], 79 * GIB), None);
    }
}
