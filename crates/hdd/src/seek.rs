//! Seek time as a function of distance in cylinders.

use crate::params::SeekCurve;

/// Seek time for a move of `distance_cyl` cylinders (0 for no move).
///
/// A table is interpolated linearly between points and extrapolated along its
/// last segment, as DiskSim does; the formula follows Ruemmler and Wilkes.
pub fn seek_ns(curve: &SeekCurve, distance_cyl: u64) -> u64 {
    if distance_cyl == 0 {
        return 0;
    }
    let ms = match curve {
        SeekCurve::Table { distance_cyl: distances, seek_ms } => table_ms(distances, seek_ms, distance_cyl),
        SeekCurve::Formula { boundary_cyl, short_a_ms, short_b_ms, long_c_ms, long_e_ms, first_ten_ms } => {
            let d = distance_cyl as f64;
            if distance_cyl <= 10 && !first_ten_ms.is_empty() {
                first_ten_ms[distance_cyl as usize - 1]
            } else if distance_cyl < u64::from(*boundary_cyl) {
                short_a_ms + short_b_ms * d.sqrt()
            } else {
                long_c_ms + long_e_ms * d
            }
        }
    };
    (ms.max(0.0) * 1.0e6) as u64
}

fn table_ms(distances: &[u32], seek_ms: &[f64], distance_cyl: u64) -> f64 {
    assert!(distances.len() >= 2);
    assert_eq!(distances.len(), seek_ms.len());
    let index = distances.partition_point(|d| u64::from(*d) < distance_cyl);
    if index < distances.len() && u64::from(distances[index]) == distance_cyl {
        return seek_ms[index];
    }
    // Below the first point: interpolate from (0, 0); past the last: extrapolate.
    let (d0, t0, d1, t1) = if index == 0 {
        (0.0, 0.0, f64::from(distances[0]), seek_ms[0])
    } else {
        let hi = index.min(distances.len() - 1);
        let lo = hi - 1;
        (f64::from(distances[lo]), seek_ms[lo], f64::from(distances[hi]), seek_ms[hi])
    };
    assert!(d1 > d0);
    t0 + (distance_cyl as f64 - d0) * (t1 - t0) / (d1 - d0)
}

/// Fit Ruemmler-Wilkes coefficients to three datasheet figures: track-to-track,
/// full-stroke and average seek (average over uniformly random cylinder
/// pairs). The sqrt and linear parts meet with equal value and slope at the
/// boundary; the boundary is chosen (by bisection) so the average matches.
pub fn fit_formula(
    cylinder_count: u32,
    track_to_track_ms: f64,
    full_stroke_ms: f64,
    average_ms: f64,
) -> SeekCurve {
    assert!(cylinder_count >= 100);
    assert!(track_to_track_ms < average_ms && average_ms < full_stroke_ms);
    let full_cyl = f64::from(cylinder_count - 1);
    let curve_at = |boundary: f64| {
        let root = boundary.sqrt();
        let b = (full_stroke_ms - track_to_track_ms) / (root / 2.0 + full_cyl / (2.0 * root) - 1.0);
        let a = track_to_track_ms - b;
        let e = b / (2.0 * root);
        let c = a + b * root / 2.0;
        SeekCurve::Formula {
            boundary_cyl: boundary.round() as u32,
            short_a_ms: a,
            short_b_ms: b,
            long_c_ms: c,
            long_e_ms: e,
            first_ten_ms: Vec::new(),
        }
    };
    // A boundary near the far end makes the curve more sqrt-like (higher
    // average); near 1 it is almost linear (average near a third of a stroke).
    let (mut lo, mut hi) = (2.0f64, full_cyl);
    for _ in 0..60 {
        let mid = (lo * hi).sqrt();
        if average_seek_ms(&curve_at(mid), cylinder_count) < average_ms {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    curve_at(lo)
}

/// Mean seek time over uniformly random (start, end) cylinder pairs with
/// start != end: distance d has weight proportional to (N - d).
pub fn average_seek_ms(curve: &SeekCurve, cylinder_count: u32) -> f64 {
    let n = u64::from(cylinder_count);
    assert!(n >= 2);
    // Sample at most ~4096 distances so this stays cheap for big drives.
    let step = (n / 4096).max(1);
    let (mut sum, mut weight_sum) = (0.0f64, 0.0f64);
    let mut d = 1u64;
    while d < n {
        let weight = (n - d) as f64;
        sum += weight * seek_ns(curve, d) as f64 / 1.0e6;
        weight_sum += weight;
        d += step;
    }
    sum / weight_sum
}
