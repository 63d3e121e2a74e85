//! The two demerit figures: Ruemmler and Wilkes' at every 1% step, and
//! DiskSim's own (`rms` over the bucketed distributions of its validation
//! `statdefs`), which the published DiskSim figures use.

use layoutd_hdd::{demerit_disksim_ms, demerit_ms};

fn sorted(mut values: Vec<f64>) -> Vec<f64> {
    values.sort_by(f64::total_cmp);
    values
}

/// 10,000 service times spread over 2..22 ms.
fn spread() -> Vec<f64> {
    (0..10_000).map(|i| 2.0 + f64::from(i % 1000) * 0.02 + f64::from(i / 1000) * 0.001).collect()
}

#[test]
fn identical_distributions_have_no_demerit() {
    let values = spread();
    assert_eq!(demerit_disksim_ms(&values, &values), 0.0);
    assert_eq!(demerit_ms(&sorted(values.clone()), &sorted(values)), 0.0);
}

#[test]
fn a_constant_shift_is_the_demerit_within_a_bucket() {
    let values = spread();
    let shifted: Vec<f64> = values.iter().map(|v| v + 1.0).collect();
    // Buckets are about 1% wide here (0.02 to 0.22 ms).
    let figure = demerit_disksim_ms(&values, &shifted);
    assert!((figure - 1.0).abs() < 0.05, "{figure}");
}

#[test]
fn the_slowest_request_weighs_one_step_in_ten_thousand() {
    let values = spread();
    let mut slower = values.clone();
    let last = slower.len() - 1;
    slower[last] += 10.0;
    // 1% steps: the maximum is one step in 100, 10 ms off.
    let percent = demerit_ms(&sorted(values.clone()), &sorted(slower.clone()));
    assert!((percent - 1.0).abs() < 1e-9, "{percent}");
    // DiskSim's: one step in 10,000 (about 10 / sqrt(10,000) = 0.1 ms).
    let disksim = demerit_disksim_ms(&values, &slower);
    assert!(disksim > 0.05 && disksim < 0.15, "{disksim}");
}

#[test]
fn values_in_one_bucket_are_not_told_apart() {
    // DiskSim's buckets: 1 us wide below 0.1 ms, then each 1% wider than
    // the last, rounded down to whole microseconds: 100, 102, 104 us, ...
    let one = vec![0.1005; 100];
    let same_bucket = vec![0.1015; 100];
    assert_eq!(demerit_disksim_ms(&one, &same_bucket), 0.0);
    let next_bucket = vec![0.1025; 100];
    assert!(demerit_disksim_ms(&one, &next_bucket) > 0.0);
    let below = vec![0.0995; 100];
    assert!(demerit_disksim_ms(&one, &below) > 0.0);
}
