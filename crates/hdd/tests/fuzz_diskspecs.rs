//! Byte-mutation fuzzing of the DiskSim importer (`layoutd serve
//! --emulate-diskspecs FILE`, `layoutd disk --diskspecs FILE`: a file the
//! user hands in). The corpus: the Barracuda's three files the preset
//! embeds, one of them mutated by hostile numbers written over its
//! numbers, random bytes, and truncation. The property: the importer
//! refuses with an error or gives parameters a disk model serves requests
//! with; no panic, no overflow, no hang.
//!
//! A bounded pass in the default suite; `PROPTEST_CASES=100000 cargo test
//! -p layoutd-hdd --test fuzz_diskspecs` for a long one.

use layoutd_hdd::{Disk, DiskOp, DiskParams, DiskRequest, Scheduler};
use proptest::prelude::*;

#[path = "../../core/tests/support/fuzz.rs"]
mod fuzz;
use fuzz::{config, mutate_text};

const FILES: [(&str, &str); 3] = [
    ("barracuda.diskspecs", include_str!("../data/barracuda.diskspecs")),
    ("barracuda.model", include_str!("../data/barracuda.model")),
    ("barracuda.seek", include_str!("../data/barracuda.seek")),
];

fn hostile() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("0".to_string()),
        Just("-1".to_string()),
        Just("0.000000".to_string()),
        Just("1e308".to_string()),
        Just("-1e308".to_string()),
        Just("nan".to_string()),
        Just("inf".to_string()),
        Just("4294967295".to_string()),
        Just("4294967296".to_string()),
        Just("18446744073709551615".to_string()),
        Just("99999999999999999999999".to_string()),
        Just("1e-300".to_string()),
        Just("".to_string()),
        any::<u32>().prop_map(|v| v.to_string()),
        any::<u16>().prop_map(|v| v.to_string()),
        (any::<u16>(), any::<u16>()).prop_map(|(a, b)| format!("{a}.{b}")),
    ]
}

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
        numbers in prop::collection::vec((any::<usize>(), hostile()), 0..4),
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
}
