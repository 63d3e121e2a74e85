//! The two demerit figures: Ruemmler and Wilkes' at every 1% step, and
//! DiskSim's own (`rms` over the bucketed distributions of its validation
//! `statdefs`), which the published DiskSim figures use.

use layoutd_hdd::{demerit_disksim_ms, demerit_ms, read_disksim_distribution};

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

/// A distribution as DiskSim prints it, read back, is the distribution of
/// the values it was printed from: each line's count lies below its bound
/// (1.304 ms holds 1.291 <= t < 1.304), so the read-back values are at no
/// distance from the originals, and a value one line higher would be.
#[test]
fn a_printed_distribution_reads_back_onto_its_own_buckets() {
    let original = [1.300, 1.2915, 1.303, 2.000, 2.0079, 15.0];
    let dir = tempfile::tempdir().unwrap();
    let listed = dir.path().join("listed.dist");
    std::fs::write(&listed, "# BOUND_MS COUNT\n1.304 3\n2.008 2\n15.012 1\n").unwrap();
    let values = read_disksim_distribution(&listed).unwrap();
    assert_eq!(values.len(), original.len());
    assert_eq!(demerit_disksim_ms(&original, &values), 0.0);
    let one_line_up: Vec<f64> = values.iter().map(|v| v + 0.013).collect();
    assert!(demerit_disksim_ms(&original, &one_line_up) > 0.0);

    // An .outv: only the lines after the physical access time header count.
    let outv = dir.path().join("run.outv");
    std::fs::write(
        &outv,
        "VALIDATE Trace access time distribution\n 1.304  \t      9  \t1.0  \t1.0\n\
         IOdriver Physical access time distribution\n 0.000  \t      0  \t0.000000  \t0.000000\n\
         1.304  \t      3  \t0.5  \t0.5\n 2.008  \t      2  \t0.3  \t0.8\n15.012  \t      1  \t0.2  \t1.0\n\
         IOdriver Physical access time average: 4.0\n 99.0  \t      7\n",
    )
    .unwrap();
    assert_eq!(read_disksim_distribution(&outv).unwrap(), values);

    let broken = dir.path().join("broken.dist");
    std::fs::write(&broken, "1.304 3\nnot a line\n").unwrap();
    let message = read_disksim_distribution(&broken).unwrap_err().to_string();
    assert!(message.contains(":2:"), "{message}");

    // A count is checked before it sizes the values (it was expanded as
    // given: capacity overflow, or an allocation of the count's size).
    let huge = dir.path().join("huge.dist");
    std::fs::write(
        &huge,
        "1.304 3
2.008 18446744073709551615
",
    )
    .unwrap();
    let message = read_disksim_distribution(&huge).unwrap_err().to_string();
    assert!(message.contains(":2:") && message.contains("add up past"), "{message}");
}
