//! Byte-mutation fuzzing of every trace reader (proptest; a bounded pass in
//! the default suite, `PROPTEST_CASES=20000 cargo test -p layoutd-sim
//! --test fuzz_readers` for a long one). The corpus: the hand-written
//! samples in `tests/data/` (and a generated VSCSI binary), mutated by
//! random bytes, by hostile numbers written over the numbers in the text,
//! and by truncation. The property: a reader never panics, whatever the
//! options; it yields requests or stops with an error naming the file.
//! The same for the four compressed containers (a sample compressed in the
//! test, its compressed bytes mutated), and for `sim --compare`, which loads
//! `--json` runs a user hands in (`tests/data/sample.run.json`, mutated).

use layoutd_sim::{Fit, ReadOptions, TraceFormat, TraceReader};
use proptest::prelude::*;
use std::path::{Path, PathBuf};

#[path = "../../core/tests/support/fuzz.rs"]
mod fuzz;
use fuzz::{config, hostile_text_number, mutate_text};

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data").join(name)
}

/// (format, sample bytes) for every format.
fn corpus() -> Vec<(TraceFormat, Vec<u8>)> {
    let text = [
        (TraceFormat::Msr, "sample.msr.csv"),
        (TraceFormat::Fiu, "sample.fiu.txt"),
        (TraceFormat::Blkparse, "sample.blkparse.txt"),
        (TraceFormat::Spc, "sample.spc.csv"),
        (TraceFormat::Disksim, "sample.disksim.txt"),
        (TraceFormat::Layoutd, "sample.layoutd.txt"),
        (TraceFormat::Systor, "sample.systor.csv"),
        (TraceFormat::Tencent, "sample.tencent.csv"),
        (TraceFormat::Alibaba, "sample.alibaba.csv"),
    ];
    let mut out: Vec<(TraceFormat, Vec<u8>)> =
        text.iter().map(|&(f, n)| (f, std::fs::read(data(n)).expect("sample"))).collect();
    out.push((TraceFormat::Vscsi, vscsi_sample()));
    out
}

/// Two VSCSI v2 records, laid out as in `readers.rs`: cmd u16, version
/// u16 (version << 8), sn u32, length u32, nSG u32, lbn u64, ts_us u64,
/// rt_us u64.
fn vscsi_sample() -> Vec<u8> {
    let mut out = Vec::new();
    for (i, cmd) in [(0u64, 0x28u16), (1, 0x2a)] {
        out.extend(cmd.to_le_bytes());
        out.extend((2u16 << 8).to_le_bytes());
        out.extend(7u32.to_le_bytes());
        out.extend(4096u32.to_le_bytes());
        out.extend(1u32.to_le_bytes());
        out.extend((1000 + i * 8).to_le_bytes());
        out.extend((5_000_000 + i * 100).to_le_bytes());
        out.extend(250u64.to_le_bytes());
    }
    out
}

fn options() -> impl Strategy<Value = (ReadOptions, u64)> {
    (
        prop_oneof![Just(Fit::None), Just(Fit::Modulo), Just(Fit::Scale), Just(Fit::Compact)],
        prop::option::of(0..4u64),
        prop_oneof![Just(512u64), Just(1 << 20), Just(1 << 40), Just(u64::MAX / 2)],
    )
        .prop_map(|(fit, device, volume)| (ReadOptions { fit, device, ..ReadOptions::default() }, volume))
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn no_reader_panics_on_mutated_input(
        which in 0..10usize,
        raw in prop::collection::vec((any::<usize>(), any::<u8>()), 0..8),
        numbers in prop::collection::vec((any::<usize>(), hostile_text_number()), 0..4),
        cut in prop::option::of(any::<usize>()),
        (opts, volume) in options(),
    ) {
        let (format, mut bytes) = corpus().swap_remove(which);
        mutate_text(&mut bytes, &numbers, &raw, cut);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fuzz.trace");
        std::fs::write(&path, &bytes).unwrap();
        if let Ok(mut r) = TraceReader::open(&path, format, opts, volume) {
            for _ in 0..10_000 {
                match r.next() {
                    Ok(Some(req)) => {
                        prop_assert!(
                            req.length_bytes > 0 || req.op == layoutd_core::Op::Flush,
                            "{format:?}: an empty request came out"
                        );
                    }
                    Ok(None) => break,
                    Err(e) => {
                        prop_assert!(e.to_string().contains("fuzz.trace"), "{format:?}: the error names the file: {e}");
                        break;
                    }
                }
            }
        }
    }
}

/// The MSR sample in each container the reader opens by its magic bytes.
fn compressed_corpus() -> Vec<Vec<u8>> {
    use std::io::Write;
    let plain = std::fs::read(data("sample.msr.csv")).expect("sample");
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&plain).unwrap();
    let mut bz = bzip2::write::BzEncoder::new(Vec::new(), bzip2::Compression::default());
    bz.write_all(&plain).unwrap();
    let mut xz = liblzma::write::XzEncoder::new(Vec::new(), 6);
    xz.write_all(&plain).unwrap();
    vec![
        gz.finish().unwrap(),
        bz.finish().unwrap(),
        xz.finish().unwrap(),
        zstd::encode_all(&plain[..], 3).unwrap(),
    ]
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn no_reader_panics_on_a_mutated_compressed_trace(
        which in 0..4usize,
        raw in prop::collection::vec((any::<usize>(), any::<u8>()), 0..8),
        cut in prop::option::of(any::<usize>()),
    ) {
        let mut bytes = compressed_corpus().swap_remove(which);
        // Raw bytes only: the container's own checks are what is tested.
        mutate_text(&mut bytes, &[], &raw, cut);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fuzz.trace");
        std::fs::write(&path, &bytes).unwrap();
        if let Ok(mut r) = TraceReader::open(&path, TraceFormat::Msr, ReadOptions::default(), 1 << 40) {
            for _ in 0..10_000 {
                match r.next() {
                    Ok(Some(_)) => {}
                    Ok(None) => break,
                    Err(e) => {
                        prop_assert!(e.to_string().contains("fuzz.trace"), "the error names the file: {e}");
                        break;
                    }
                }
            }
        }
    }

    #[test]
    fn compare_refuses_or_draws_mutated_runs(
        raw in prop::collection::vec((any::<usize>(), any::<u8>()), 0..4),
        numbers in prop::collection::vec((any::<usize>(), hostile_text_number()), 0..6),
        cut in prop::option::weighted(0.1, any::<usize>()),
    ) {
        let good = std::fs::read(data("sample.run.json")).expect("sample");
        let mut bytes = good.clone();
        mutate_text(&mut bytes, &numbers, &raw, cut);
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a.json"), dir.path().join("b.json"));
        std::fs::write(&a, &good).unwrap();
        std::fs::write(&b, &bytes).unwrap();
        let runs = [a, b.clone()];
        match layoutd_sim::report::compare_table(&runs) {
            Ok(table) => prop_assert!(table.starts_with("A = ")),
            Err(e) => prop_assert!(format!("{e:#}").contains("b.json"), "the error names the file: {e:#}"),
        }
        if let Err(e) = layoutd_sim::report::write_compare_report(&dir.path().join("page"), &runs) {
            prop_assert!(format!("{e:#}").contains("b.json"), "the error names the file: {e:#}");
        }
    }
}

/// The unmutated corpus reads: every container gives the sample's requests,
/// and the run sample compares (so the fuzz starts from inputs that work).
#[test]
fn the_compressed_and_run_samples_read() {
    let dir = tempfile::tempdir().unwrap();
    for (i, bytes) in compressed_corpus().into_iter().enumerate() {
        let path = dir.path().join(format!("sample{i}.trace"));
        std::fs::write(&path, &bytes).unwrap();
        let mut r = TraceReader::open(&path, TraceFormat::Msr, ReadOptions::default(), 1 << 40).unwrap();
        let mut n = 0;
        while r.next().unwrap().is_some() {
            n += 1;
        }
        assert_eq!(n, 4, "container {i}");
    }
    let runs = [data("sample.run.json"), data("sample.run.json")];
    let table = layoutd_sim::report::compare_table(&runs).unwrap();
    assert!(table.lines().any(|l| l.starts_with("requests ") && l.contains(" 4 ")), "{table}");
    layoutd_sim::report::write_compare_report(&dir.path().join("page"), &runs).unwrap();
}

/// Found by the fuzz above: a bucket whose end is past 2^64 ns overflowed
/// the CDF's sum in `--compare --report`, and a negative or huge figure
/// panicked the plots' axes; now refused naming the file.
#[test]
fn a_run_with_an_overflowing_bucket_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let good = std::fs::read_to_string(data("sample.run.json")).unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&good).unwrap();
    v["response_buckets"]["read"][0] = serde_json::json!([u64::MAX, 2, 1]);
    let (a, b) = (dir.path().join("a.json"), dir.path().join("b.json"));
    std::fs::write(&a, &good).unwrap();
    std::fs::write(&b, v.to_string()).unwrap();
    let e = layoutd_sim::report::write_compare_report(&dir.path().join("page"), &[a.clone(), b.clone()])
        .unwrap_err();
    let message = format!("{e:#}");
    assert!(message.contains("b.json") && message.contains("response_buckets.read"), "{message}");
    // And a phase's mean of -1e308 ms panicked plotters' axis.
    let mut v: serde_json::Value = serde_json::from_str(&good).unwrap();
    v["phases"]["list"][0]["response_ms_mean"] = serde_json::json!(-1e308);
    std::fs::write(&b, v.to_string()).unwrap();
    let e = layoutd_sim::report::write_compare_report(&dir.path().join("page"), &[a, b]).unwrap_err();
    let message = format!("{e:#}");
    assert!(message.contains("b.json") && message.contains("phases.response_ms_mean"), "{message}");
}
