//! Byte-mutation fuzzing of the DiskSim importer (`layoutd serve
//! --emulate-diskspecs FILE`, `layoutd disk --diskspecs FILE`: a file the
//! user hands in), and of the validation-trace reader behind `layoutd disk
//! validate --trace FILE` (the first lines of the Barracuda's trace,
//! mutated the same way: refused with its line, or replayed). The corpus: the Barracuda's three files the preset
//! embeds, one of them mutated by hostile numbers written over its
//! numbers, random bytes, and truncation. The property: the importer
//! refuses with an error or gives parameters a disk model serves requests
//! with; no panic, no overflow, no hang.
//!
//! A bounded pass in the default suite; `PROPTEST_CASES=100000 cargo test
//! -p layoutd-hdd --test fuzz_diskspecs` for a long one.

use layoutd_hdd::{validate, Disk, DiskOp, DiskParams, DiskRequest, HddError, Scheduler};
use proptest::prelude::*;

#[path = "../../core/tests/support/fuzz.rs"]
mod fuzz;
use fuzz::{config, hostile_text_number, mutate_text};

const FILES: [(&str, &str); 3] = [
    ("barracuda.diskspecs", include_str!("../data/barracuda.diskspecs")),
    ("barracuda.model", include_str!("../data/barracuda.model")),
    ("barracuda.seek", include_str!("../data/barracuda.seek")),
];

/// The disk model serves a few requests across the disk with `params`.
fn serve(params: DiskParams) {
    let sectors = params.sector_count.max(1);
    let mut disk = Disk::new(params, Scheduler::Sptf, 4, 1);
    let mut now = 0u64;
    for (i, lba) in [0, sectors / 3, sectors - 1, sectors / 2, 7].into_iter().enumerate() {
        let op = if i % 2 == 0 { DiskOp::Read } else { DiskOp::Write };
        let n = (sectors - lba).min(64) as u32;
        if disk.try_submit(now, DiskRequest { id: i as u64, op, lba, sectors: n.max(1) }).is_err() {
            continue;
        }
        for _ in 0..16 {
            let Some(t) = disk.next_completion_ns() else { break };
            now = now.max(t);
            if disk.complete(now).is_some() {
                break;
            }
        }
    }
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn the_importer_refuses_or_gives_a_disk_that_serves(
        which in 0..FILES.len(),
        numbers in prop::collection::vec((any::<usize>(), hostile_text_number()), 0..4),
        raw in prop::collection::vec((any::<usize>(), any::<u8>()), 0..4),
        cut in prop::option::weighted(0.1, any::<usize>()),
    ) {
        let mut bytes = FILES[which].1.as_bytes().to_vec();
        mutate_text(&mut bytes, &numbers, &raw, cut);
        let dir = tempfile::tempdir().unwrap();
        for (i, (name, text)) in FILES.iter().enumerate() {
            let b = if i == which { &bytes[..] } else { text.as_bytes() };
            std::fs::write(dir.path().join(name), b).unwrap();
        }
        if let Ok(params) = DiskParams::from_diskspecs(&dir.path().join("barracuda.diskspecs")) {
            serve(params);
        }
    }
}

/// The first lines of the Barracuda's validation trace (DiskSim's
/// `R|W action block count service_us gap_us`).
const TRACE: &str = "R Hit    2992396   4  13670.00000  35942.00000
R Hit    2992400   4    874.00000  37426.00000
W Hit    3865568   8   1971.00000  29108.00000
R Miss   1000000  16  11023.00000   1200.00000
W Miss         0   1   9000.00000      0.00000
";

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn the_trace_reader_refuses_with_a_line_or_replays(
        numbers in prop::collection::vec((any::<usize>(), hostile_text_number()), 0..4),
        raw in prop::collection::vec((any::<usize>(), any::<u8>()), 0..4),
        cut in prop::option::weighted(0.1, any::<usize>()),
    ) {
        let mut bytes = TRACE.as_bytes().to_vec();
        mutate_text(&mut bytes, &numbers, &raw, cut);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("mutated.trace");
        std::fs::write(&path, &bytes).unwrap();
        let params = DiskParams::preset("barracuda4g").unwrap();
        match validate(&params, &path) {
            Ok(report) => prop_assert!(report.requests.len() <= 5),
            Err(HddError::Parse { path: named, .. } | HddError::Io { path: named, .. }) => {
                prop_assert_eq!(named, path)
            }
            Err(other) => prop_assert!(false, "not a parse error: {other}"),
        }
    }
}

/// Found by reading: block numbers were read as floating point (a
/// fraction was accepted, and the last block past 2^64 wrapped the range
/// check), and a gap of 1e300 µs overflowed the replay clock.
#[test]
fn hostile_trace_numbers_are_refused_with_their_line() {
    let dir = tempfile::tempdir().unwrap();
    let params = DiskParams::preset("barracuda4g").unwrap();
    for (line, expect) in [
        ("R Hit 18446744073709551615 4 100.0 10.0", "runs past"),
        ("R Hit 1.5 4 100.0 10.0", "block number"),
        ("R Hit 99999999999999999999999 4 100.0 10.0", "block number"),
        ("R Hit 0 4.5 100.0 10.0", "block count"),
        ("R Hit 0 4 100.0 1e300", "gap"),
        ("R Hit 0 4 nan 10.0", "service time"),
    ] {
        let path = dir.path().join("hostile.trace");
        std::fs::write(&path, format!("R Hit 0 4 100.0 10.0\n\n{line}\n")).unwrap();
        let message = validate(&params, &path).unwrap_err().to_string();
        assert!(message.contains("hostile.trace:3:") && message.contains(expect), "{line}: {message}");
    }
}

/// The unmutated corpus imports and serves (the fuzz starts from files
/// that reach the model).
#[test]
fn the_corpus_imports() {
    let dir = tempfile::tempdir().unwrap();
    for (name, text) in FILES {
        std::fs::write(dir.path().join(name), text).unwrap();
    }
    let params = DiskParams::from_diskspecs(&dir.path().join("barracuda.diskspecs")).expect("imports");
    assert!(params.sector_count > 1_000_000);
    serve(params);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("corpus.trace"), TRACE).unwrap();
    let report =
        validate(&DiskParams::preset("barracuda4g").unwrap(), &dir.path().join("corpus.trace")).unwrap();
    assert_eq!(report.requests.len(), 5);
}
