//! `layoutd opt place`: the OPT region's place chosen from a trace before
//! `format`. No server, no root.

mod common;

use common::layoutd;
use std::path::Path;

const GIB: u64 = 1 << 30;
const HEADER: &str = "# layoutd-trace v1: submit_ns complete_ns stream op offset_bytes length_bytes flags";

/// A trace of `(submit ms, op, offset)` requests of 4 KiB.
fn trace(dir: &Path, reqs: &[(u64, char, u64)]) -> String {
    let p = dir.join("t.trace");
    let body: String =
        reqs.iter().map(|&(ms, op, off)| format!("{0} {0} 1 {op} {off} 4096 -\n", ms * 1_000_000)).collect();
    std::fs::write(&p, format!("{HEADER}\n{body}")).unwrap();
    p.to_str().unwrap().to_string()
}

fn config(dir: &Path) -> String {
    let p = dir.join("opt.toml");
    std::fs::write(
        &p,
        "version = 1\n[[layer]]\ntarget = \"opt\"\nopt_length = \"1GiB\"\nplan_streams = true\n",
    )
    .unwrap();
    p.to_str().unwrap().to_string()
}

/// Runs `layoutd opt place ARGS`: (success, stdout, stderr).
fn place(args: &[&str]) -> (bool, String, String) {
    let o = layoutd().args(["opt", "place"]).args(args).output().unwrap();
    (o.status.success(), String::from_utf8(o.stdout).unwrap(), String::from_utf8(o.stderr).unwrap())
}

fn offset_of(stdout: &str) -> u64 {
    stdout.strip_prefix("opt_offset = ").and_then(|s| s.split_whitespace().next()).unwrap().parse().unwrap()
}

#[test]
fn the_region_goes_to_the_median_of_the_training_reads_and_the_config_written_takes_it() {
    let dir = tempfile::tempdir().unwrap();
    let c = config(dir.path());
    // Training (before 1000 ms): three reads near 10 GiB, one at 60 GiB, a
    // write at 70 GiB (not a read); then held-out reads at 50 GiB.
    let mut reqs =
        vec![(1, 'R', 10 * GIB), (2, 'R', 10 * GIB + 4096), (3, 'R', 11 * GIB), (4, 'R', 60 * GIB)];
    reqs.extend([(5, 'W', 70 * GIB), (6, 'W', 70 * GIB), (7, 'W', 70 * GIB)]);
    reqs.extend((0..10).map(|i| (2000 + i, 'R', 50 * GIB)));
    let t = trace(dir.path(), &reqs);
    let out = dir.path().join("placed.toml");
    let (ok, stdout, stderr) = place(&[
        "--config",
        &c,
        "--trace",
        &t,
        "--size",
        "80G",
        "--until-ms",
        "1000",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(ok, "{stderr}");
    assert_eq!(offset_of(&stdout), 10 * GIB, "{stdout}");
    // Without --until-ms the held-out reads count too.
    let (ok, stdout, stderr) = place(&["--config", &c, "--trace", &t, "--size", "80G"]);
    assert!(ok, "{stderr}");
    assert_eq!(offset_of(&stdout), 50 * GIB, "{stdout}");
    // The written config is the stack with opt_offset set, and `format` takes it.
    let written = std::fs::read_to_string(&out).unwrap();
    assert!(written.contains(&format!("opt_offset = {}", 10 * GIB)), "{written}");
    assert!(written.contains("plan_streams = true"), "{written}");
    let dev = dir.path().join("vol.img");
    let f = layoutd()
        .args([
            "format",
            "--device",
            dev.to_str().unwrap(),
            "--size",
            "80G",
            "--config",
            out.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(f.status.success(), "{}", String::from_utf8_lossy(&f.stderr));
}

#[test]
fn no_read_to_place_by_or_no_opt_layer_at_the_bottom_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let c = config(dir.path());
    let t = trace(dir.path(), &[(1, 'W', GIB), (5000, 'R', GIB)]);
    let (ok, stdout, stderr) = place(&["--config", &c, "--trace", &t, "--size", "80G", "--until-ms", "1000"]);
    assert!(!ok && stdout.is_empty(), "{stdout}");
    assert!(stderr.contains("no read to place the region by"), "{stderr}");
    let linear = dir.path().join("linear.toml");
    std::fs::write(&linear, "version = 1\n[[layer]]\ntarget = \"linear\"\n").unwrap();
    let (ok, _, stderr) = place(&["--config", linear.to_str().unwrap(), "--trace", &t, "--size", "80G"]);
    assert!(!ok && stderr.contains("the bottom layer is not `opt`"), "{stderr}");
    let (ok, _, stderr) = place(&["--config", &c, "--size", "80G"]);
    assert!(!ok && stderr.contains("needs --config FILE, --trace FILE and --size SIZE"), "{stderr}");
}
