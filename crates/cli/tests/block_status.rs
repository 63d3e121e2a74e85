//! NBD block status (issue 9, item 7): never-written and trimmed ranges are
//! reported as zero holes, so nbdcopy and qemu-img convert skip them.

mod common;
use common::*;

/// `nbdinfo --map` lines as `(offset, length, is_hole)`.
fn map(out: &str) -> Vec<(u64, u64, bool)> {
    out.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let (o, n, t) =
                (f.first()?.parse().ok()?, f.get(1)?.parse().ok()?, f.get(2)?.parse::<u32>().ok()?);
            Some((o, n, t & 1 == 1))
        })
        .collect()
}

/// Whether every byte of `[a, b)` is reported with `hole`.
fn all(m: &[(u64, u64, bool)], a: u64, b: u64, hole: bool) -> bool {
    m.iter().filter(|(o, n, _)| *o < b && o + n > a).all(|x| x.2 == hole)
}

#[test]
fn nbdinfo_map_shows_never_written_and_trimmed_ranges_as_holes() {
    if !tools(&["nbdkit", "nbdinfo", "qemu-io"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    const M: u64 = 1 << 20;
    // A stack with a trace layer over two linear segments, the second before the first.
    let cfg = "version = 1\n[[layer]]\ntarget = \"trace\"\n[[layer]]\ntarget = \"linear\"\n\
               [[layer.segment]]\noffset = \"32M\"\nlength = \"31M\"\n[[layer.segment]]\noffset = 0\nlength = \"32M\"\n";
    let dev = formatted(dir.path(), "m.img", "64M", Some(cfg));
    let run = "qemu-io -f raw -c 'write -P 1 0 1M' -c 'write -P 2 30M 2M' -c 'write -P 3 40M 2M' \
               -c 'discard 40M 1M' -c 'flush' \"$uri\" >/dev/null && nbdinfo --map \"$uri\"";
    let out = serve_run(&dev, run, &[]);
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    let m = map(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(m.iter().map(|x| x.1).sum::<u64>(), 63 * M, "the map covers the export:\n{t}");
    assert!(all(&m, 0, M, false), "written: data\n{t}");
    assert!(all(&m, 2 * M, 30 * M, true), "never written: hole\n{t}");
    assert!(all(&m, 30 * M, 32 * M, false), "written across the segment boundary: data\n{t}");
    assert!(all(&m, 40 * M, 41 * M, true), "trimmed: hole\n{t}");
    assert!(all(&m, 41 * M, 42 * M, false), "written, not trimmed: data\n{t}");
    assert!(all(&m, 43 * M, 63 * M, true), "never written: hole\n{t}");
}

#[test]
fn a_dcd_stack_reports_log_data_as_data_and_the_rest_by_the_file() {
    if !tools(&["nbdkit", "nbdinfo", "qemu-io"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // The 4 KiB write lives in the dcd log: data. The discarded and the
    // never-written ranges are holes at home.
    let cfg =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/dcd.toml")).unwrap();
    let dev = formatted(dir.path(), "d.img", "256M", Some(&cfg));
    let run = "qemu-io -f raw -c 'write -P 1 0 4k' -c 'discard 1M 1M' \"$uri\" >/dev/null && nbdinfo --map \"$uri\"";
    let out = serve_run(&dev, run, &[]);
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    let m = map(&String::from_utf8_lossy(&out.stdout));
    const M: u64 = 1 << 20;
    assert!(all(&m, 0, 4096, false), "in the log: data\n{t}");
    assert!(all(&m, M, 2 * M, true), "trimmed: hole\n{t}");
    assert!(all(&m, 2 * M, 100 * M, true), "never written: hole\n{t}");
}
