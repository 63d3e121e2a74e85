//! The six DiskSim validation drives load and replay from their `.parv`;
//! bad files are reported by file and line.

use layoutd_hdd::{validate, write_cdf_svg, DiskParams, HddError};
use std::path::PathBuf;

fn validation_dir() -> PathBuf {
    std::env::var_os("LAYOUTD_DISK_VALIDATION_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/disk-validation"))
}

/// Each drive's `.parv` and trace, and the sectors its zones map (DiskSim
/// replaces the declared `Block count` by this; the Barracuda, Atlas and
/// Cheetah declare fewer).
const DRIVES: [(&str, &str, u64); 6] = [
    ("barracuda.parv", "barracuda.trace", 4_217_670),
    ("atlas_III.parv", "atlas_III.trace", 17_797_944),
    ("cheetah9LP.parv", "cheetah9LP.trace", 17_918_387),
    ("hp_c2247a.parv", "hp_c2247a.trace", 2_054_864),
    ("hp_c2490a.parv", "hp_c2490a.trace", 4_165_272),
    ("dec_rz26.parv", "dec_rz26.trace", 2_050_860),
];

#[test]
fn validation_drives_load_and_replay() {
    let dir = validation_dir();
    assert!(dir.is_dir(), "validation data not found at {} (set LAYOUTD_DISK_VALIDATION_DIR)", dir.display());
    for (specs, trace, sector_count) in DRIVES {
        let params = DiskParams::from_diskspecs(&dir.join(specs)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(params.sector_count, sector_count, "{specs}");
        assert_eq!(params.mapped_sector_count(), sector_count, "{specs}");
        let report = validate(&params, &dir.join(trace)).unwrap_or_else(|e| panic!("{e}"));
        assert!(report.request_count >= 7_900);
        assert!(report.demerit_ms.is_finite() && report.demerit_ms > 0.0);
        assert!(report.demerit_disksim_ms.is_finite() && report.demerit_disksim_ms > 0.0);
        assert!(report.demerit_disksim_ms <= report.demerit_ms * 1.5, "{specs}: {report}");
        // Loose sanity bound, not the goal (the goal is a benchmark).
        assert!(report.demerit_relative < 0.25, "{specs}: {report}");
        assert!((report.model_mean_ms / report.measured_mean_ms - 1.0).abs() < 0.25, "{specs}: {report}");
        // The per-request records are the trace in order, beside the model.
        assert_eq!(report.requests.len() as u64, report.request_count);
        let first = std::fs::read_to_string(dir.join(trace)).unwrap();
        let fields: Vec<&str> = first.lines().next().unwrap().split_whitespace().collect();
        assert_eq!(report.requests[0].write, fields[0] == "W");
        assert_eq!(report.requests[0].lba, fields[2].parse::<u64>().unwrap());
        let mut model: Vec<f64> = report.requests.iter().map(|request| request.model_ms).collect();
        model.sort_by(f64::total_cmp);
        assert_eq!(model, report.model_sorted_ms);
    }
}

#[test]
fn plot_is_an_svg_with_two_curves() {
    let dir = validation_dir();
    let params = DiskParams::from_diskspecs(&dir.join("cheetah9LP.diskspecs")).unwrap();
    let report = validate(&params, &dir.join("cheetah9LP.trace")).unwrap();
    let out = tempfile::tempdir().unwrap();
    let path = out.path().join("cdf.svg");
    write_cdf_svg(&report, &path).unwrap();
    let svg = std::fs::read_to_string(&path).unwrap();
    assert!(svg.starts_with("<svg"));
    assert_eq!(svg.matches("<polyline").count(), 2);
}

fn write_files(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (name, text) in files {
        std::fs::write(dir.path().join(name), text).unwrap();
    }
    dir
}

#[test]
fn a_missing_key_is_reported_with_file_and_line() {
    let source = std::fs::read_to_string(validation_dir().join("barracuda.model")).unwrap();
    let broken = source.replace("   Rotation speed (in rpms) = 7200,\n", "");
    assert_ne!(broken, source);
    let specs = std::fs::read_to_string(validation_dir().join("barracuda.diskspecs")).unwrap();
    let seek = std::fs::read_to_string(validation_dir().join("barracuda.seek")).unwrap();
    let dir = write_files(&[
        ("barracuda.diskspecs", &specs),
        ("barracuda.model", &broken),
        ("barracuda.seek", &seek),
    ]);
    let error = DiskParams::from_diskspecs(&dir.path().join("barracuda.diskspecs")).unwrap_err();
    let message = error.to_string();
    assert!(matches!(error, HddError::Parse { line, .. } if line > 0), "{message}");
    assert!(message.contains("barracuda.model:") && message.contains("Rotation speed"), "{message}");
}

#[test]
fn syntax_errors_and_bad_traces_name_the_line() {
    let dir = write_files(&[
        ("bad.diskspecs", "disksim_disk X {\n  Model = source m.model,\n  Oops 3\n}\n"),
        ("bad.trace", "R Hit 0 4 100.0 10.0\nR Hit zero 4 100.0 10.0\n"),
    ]);
    let message = DiskParams::from_diskspecs(&dir.path().join("bad.diskspecs")).unwrap_err().to_string();
    assert!(message.contains("bad.diskspecs:3:"), "{message}");
    let params = DiskParams::preset("barracuda4g").unwrap();
    let message = validate(&params, &dir.path().join("bad.trace")).unwrap_err().to_string();
    assert!(message.contains("bad.trace:2:") && message.contains("block number"), "{message}");
    let missing = DiskParams::from_diskspecs(&dir.path().join("absent.diskspecs")).unwrap_err().to_string();
    assert!(missing.contains("absent.diskspecs"), "{missing}");
}
