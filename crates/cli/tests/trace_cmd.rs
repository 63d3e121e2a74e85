//! `layoutd trace stats | cut | convert`: the one reader of trace files the
//! bench scripts use. No server, no root.

mod common;

use common::{layoutd, refused_line};
use std::path::{Path, PathBuf};

const HEADER: &str = "# layoutd-trace v1: submit_ns complete_ns stream op offset_bytes length_bytes flags";
/// Marker 0 of a 1 GiB export, as the bench harness places it (export - 8 MiB).
const BASE: u64 = (1 << 30) - (8 << 20);
const STRIDE: u64 = 64 << 10;

fn data(name: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../sim/tests/data").join(name);
    p.to_str().unwrap().to_string()
}

fn write(dir: &Path, name: &str, lines: &[String]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, format!("{HEADER}\n{}", lines.iter().map(|l| format!("{l}\n")).collect::<String>()))
        .unwrap();
    p
}

/// A layoutd line with times in ms.
fn line(submit_ms: u64, complete_ms: u64, stream: u32, op: char, offset: u64, length: u64) -> String {
    format!("{} {} {stream} {op} {offset} {length} -", submit_ms * 1_000_000, complete_ms * 1_000_000)
}

fn marker(k: u64, t: u64) -> String {
    line(t, t + 100, 0, 'R', BASE + k * STRIDE, 4096)
}

/// Runs `layoutd trace ARGS`, expects success; its stdout.
fn ok(args: &[&str]) -> String {
    let out = layoutd().arg("trace").args(args).output().unwrap();
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

fn stats_json(args: &[&str]) -> serde_json::Value {
    let mut a = vec!["stats", "--json"];
    a.extend_from_slice(args);
    serde_json::from_str(&ok(&a)).unwrap()
}

/// The bench harness's selftest trace: a write, marker 0, two reads and a
/// write (one overlapping a read), markers 1 and 2, a flush, a read in the
/// marker area that is not on a marker slot (data), marker 3.
fn phased(dir: &Path) -> PathBuf {
    let lines = [
        line(0, 10, 0, 'W', 0, 4096),
        marker(0, 20),
        line(30, 40, 0, 'R', 8192, 4096),
        line(45, 60, 0, 'R', 12288, 8192),
        line(50, 70, 0, 'W', 4096, 4096),
        marker(1, 80),
        marker(2, 90),
        line(100, 110, 0, 'F', 0, 0),
        line(111, 112, 0, 'R', BASE + 512, 4096),
        marker(3, 120),
    ];
    write(dir, "phased.trace", &lines)
}

/// `args` followed by the harness's marker flags for the window (from, to).
fn cut_args(args: &[&str], from: u64, to: u64) -> Vec<String> {
    let (base, from, to) = (BASE.to_string(), from.to_string(), to.to_string());
    let flags = ["--marker-base", &base, "--from-marker", &from, "--to-marker", &to];
    args.iter().chain(flags.iter()).map(|s| s.to_string()).collect()
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

#[test]
fn stats_counts_bytes_span_streams_and_response_times() {
    let dir = tempfile::tempdir().unwrap();
    let lines = [
        line(0, 4, 0, 'R', 0, 4096),
        line(1, 9, 1, 'W', 1 << 20, 8192),
        line(10, 12, 0, 'R', 4096, 4096), // sequential after the first read
        line(20, 21, 2, 'T', 0, 65536),
        line(22, 23, 2, 'Z', 0, 512),
        line(30, 32, 0, 'F', 0, 0),
    ];
    let t = write(dir.path(), "t.trace", &lines);
    let s = stats_json(&[t.to_str().unwrap()]);
    let n = |k: &str| s[k].as_u64().unwrap_or_else(|| panic!("{k}: {s}"));
    let f = |k: &str| s[k].as_f64().unwrap_or_else(|| panic!("{k}: {s}"));
    assert_eq!(
        (n("requests"), n("reads"), n("writes"), n("trims"), n("zeroes"), n("flushes")),
        (6, 2, 1, 1, 1, 1)
    );
    assert_eq!(
        (n("read_bytes"), n("written_bytes"), n("trimmed_bytes"), n("zeroed_bytes")),
        (8192, 8704, 65536, 512)
    );
    assert_eq!(n("streams"), 3);
    assert_eq!(f("span_seconds"), 0.032);
    assert_eq!(f("sequential_read_share"), 0.5);
    assert_eq!(f("mean_read_kib"), 4.0);
    // busy: [0,9] + [10,12] + [20,21] + [22,23] + [30,32] = 15 ms of the 32 ms span
    assert_eq!((f("busy_seconds"), f("idle_seconds")), (0.015, 0.017));
    assert_eq!(n("overlapped_requests"), 0, "streams are counted apart");
    // response ms without the trim: 4 8 2 1 2 -> sorted 1 2 2 4 8
    let r = &s["response_ms"];
    assert_eq!((r["mean"].as_f64(), r["p50"].as_f64(), r["max"].as_f64()), (Some(3.4), Some(2.0), Some(8.0)));
    assert_eq!(s["response_ms_by_op"]["trim"]["max"].as_f64(), Some(1.0));
    assert_eq!(s["response_ms_by_op"]["read"]["mean"].as_f64(), Some(3.0));
    assert_eq!((n("first_submit_ns"), n("last_complete_ns")), (0, 32_000_000));
    let text = ok(&["stats", t.to_str().unwrap()]);
    assert!(text.contains("6 requests, 3 streams"), "{text}");
}

#[test]
fn cut_keeps_what_lies_between_two_markers_as_the_harness_did() {
    let dir = tempfile::tempdir().unwrap();
    let t = phased(dir.path());
    let ts = t.to_str().unwrap();
    let out = dir.path().join("a.trace");
    ok(&strs(&cut_args(&["cut", ts, "-o", out.to_str().unwrap()], 0, 1)));
    let expect = [
        line(30, 40, 0, 'R', 8192, 4096),
        line(45, 60, 0, 'R', 12288, 8192),
        line(50, 70, 0, 'W', 4096, 4096),
    ];
    assert_eq!(std::fs::read_to_string(&out).unwrap(), format!("{HEADER}\n{}\n", expect.join("\n")));
    // markers 2..3: the flush and the read beside the marker slots, which is data
    let jsonl = ok(&strs(&cut_args(&["cut", ts, "--to", "jsonl"], 2, 3)));
    let ops: Vec<String> = jsonl
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["op"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(ops, ["F", "R"]);
    // stats of a window are the stats of the cut
    let mut windowed = stats_json(&strs(&cut_args(&[ts], 0, 1)));
    let markers: Vec<u64> =
        windowed["markers"].as_array().unwrap().iter().map(|m| m["index"].as_u64().unwrap()).collect();
    assert_eq!(markers, [0, 1, 2, 3]);
    windowed.as_object_mut().unwrap().remove("markers");
    assert_eq!(windowed, stats_json(&[out.to_str().unwrap()]));
    assert_eq!(windowed["span_seconds"].as_f64(), Some(0.04));
    assert_eq!(windowed["busy_seconds"].as_f64(), Some(0.035));
    assert_eq!(windowed["overlapped_requests"].as_u64(), Some(1));
}

/// A pool's snapshot volume lies beyond the origin's export, so beyond the
/// marker area: its 4 KiB reads on 64 KiB boundaries look like marker reads
/// of slots past the area. With --marker-count they stay in the phase.
#[test]
fn reads_past_the_marker_count_are_data_not_markers() {
    let dir = tempfile::tempdir().unwrap();
    let snapshot_read = line(30, 40, 0, 'R', BASE + 200 * STRIDE, 4096);
    let t = write(dir.path(), "pool.trace", &[marker(0, 20), snapshot_read.clone(), marker(1, 50)]);
    let ts = t.to_str().unwrap();
    let found = |extra: &[&str]| {
        let mut a = cut_args(&[ts], 0, 1);
        a.extend(extra.iter().map(|s| s.to_string()));
        let j = stats_json(&strs(&a));
        let ks: Vec<u64> =
            j["markers"].as_array().unwrap().iter().map(|m| m["index"].as_u64().unwrap()).collect();
        (ks, j["requests"].as_u64().unwrap())
    };
    assert_eq!(found(&[]), (vec![0, 200, 1], 0), "without a count the read is taken for marker 200");
    assert_eq!(found(&["--marker-count", "128"]), (vec![0, 1], 1));
    let mut a = cut_args(&["cut", ts, "--to", "jsonl"], 0, 1);
    a.extend(["--marker-count".to_string(), "128".to_string()]);
    let jsonl = ok(&strs(&a));
    assert_eq!(jsonl.lines().count(), 1, "{jsonl}");
    refused_line(&["trace", "stats", ts, "--marker-base", "0", "--marker-count", "0"], &["--marker-count"]);
}

#[test]
fn a_missing_or_reversed_marker_is_a_clear_error_and_leaves_no_output() {
    let dir = tempfile::tempdir().unwrap();
    let t = phased(dir.path());
    let ts = t.to_str().unwrap();
    let out = dir.path().join("out.trace");
    let os = out.to_str().unwrap();
    let args = cut_args(&["trace", "cut", ts, "-o", os], 0, 7);
    refused_line(&strs(&args), &["phased.trace", "marker 7 is not in the trace", "found: 0 1 2 3"]);
    assert!(!out.exists(), "a failed cut leaves no output");
    let args = cut_args(&["trace", "cut", ts, "-o", os], 3, 1);
    refused_line(&strs(&args), &["phased.trace:7", "marker 1 is read before marker 3"]);
    assert!(!out.exists());
    refused_line(&["trace", "cut", ts, "-o", os], &["--marker-base", "--from-marker"]);
    refused_line(&["trace", "convert", ts, "-o", ts], &["would overwrite the input"]);
}

#[test]
fn convert_layoutd_to_layoutd_is_identical() {
    let dir = tempfile::tempdir().unwrap();
    let t = phased(dir.path());
    let a = dir.path().join("a.trace");
    ok(&["convert", t.to_str().unwrap(), "-o", a.to_str().unwrap()]);
    assert_eq!(std::fs::read(&a).unwrap(), std::fs::read(&t).unwrap());
    // the simulator's sample (a blank line, FUA): records kept, text canonical
    let b = dir.path().join("b.trace");
    ok(&["convert", &data("sample.layoutd.txt"), "-o", b.to_str().unwrap()]);
    let records = |p: &str| -> Vec<String> {
        std::fs::read_to_string(p)
            .unwrap()
            .lines()
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .map(String::from)
            .collect()
    };
    assert_eq!(records(b.to_str().unwrap()), records(&data("sample.layoutd.txt")));
    let c = dir.path().join("c.trace");
    ok(&["convert", b.to_str().unwrap(), "-o", c.to_str().unwrap()]);
    assert_eq!(std::fs::read(&c).unwrap(), std::fs::read(&b).unwrap());
}

#[test]
fn convert_msr_to_layoutd() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("msr.trace");
    ok(&["convert", &data("sample.msr.csv"), "--format", "msr", "--rebase", "-o", out.to_str().unwrap()]);
    // MSR: 100 ns ticks, response time in ticks, disk number as the stream
    let expect = [
        "0 266300 1 R 3551498240 4096 -",
        "1332052600 1332178800 1 W 2124075008 8192 -",
        "2332061600 2332101600 0 R 4096 512 -",
        "3332061600 3332161600 1 W 2124083200 4096 -",
    ];
    assert_eq!(std::fs::read_to_string(&out).unwrap(), format!("{HEADER}\n{}\n", expect.join("\n")));
    // without --rebase the trace's own clock is kept
    let text = ok(&["convert", &data("sample.msr.csv"), "--format", "msr"]);
    assert!(
        text.lines().nth(1).unwrap().starts_with("12816637200306162900 12816637200306429200 1 R "),
        "{text}"
    );
    // and the result reads back as layoutd
    let s = stats_json(&[out.to_str().unwrap()]);
    assert_eq!((s["requests"].as_u64(), s["streams"].as_u64()), (Some(4), Some(2)));
}

#[test]
fn convert_to_disksim_reads_back() {
    let dir = tempfile::tempdir().unwrap();
    let t = phased(dir.path());
    let d = dir.path().join("t.disksim");
    let out = layoutd()
        .args(["trace", "convert", t.to_str().unwrap(), "--to", "disksim", "-o", d.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("1 flushes, trims and write-zeroes left out"));
    let text = std::fs::read_to_string(&d).unwrap();
    assert_eq!(text.lines().next(), Some("0.000000 0 0 8 0"));
    let back = ok(&["convert", d.to_str().unwrap(), "--format", "disksim", "--to", "jsonl"]);
    let original = ok(&["convert", t.to_str().unwrap(), "--to", "jsonl"]);
    let key = |l: &str| {
        let v: serde_json::Value = serde_json::from_str(l).unwrap();
        (
            v["submit_ns"].as_u64(),
            v["op"].as_str().map(String::from),
            v["offset_bytes"].as_u64(),
            v["length_bytes"].as_u64(),
        )
    };
    let rw: Vec<_> = original.lines().map(key).filter(|k| k.1.as_deref() != Some("F")).collect();
    assert_eq!(back.lines().map(key).collect::<Vec<_>>(), rw);
}

#[test]
fn malformed_input_is_named_by_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let lines = [line(0, 1, 0, 'R', 0, 4096), "5 6 0 X 0 512 -".to_string(), line(9, 10, 0, 'W', 0, 512)];
    let t = write(dir.path(), "bad.trace", &lines);
    let ts = t.to_str().unwrap();
    let out = dir.path().join("out.trace");
    let os = out.to_str().unwrap();
    for args in [vec!["trace", "stats", ts], vec!["trace", "convert", ts, "-o", os]] {
        refused_line(&args, &["bad.trace:3:", "unknown op"]);
    }
    assert!(!out.exists());
    refused_line(&strs(&cut_args(&["trace", "cut", ts, "-o", os], 0, 1)), &["bad.trace:3:"]);
    let msr = write(dir.path(), "bad.csv", &["128166372003061629,hm,1,Read,3551498240,4096".to_string()]);
    refused_line(&["trace", "stats", msr.to_str().unwrap(), "--format", "msr"], &["bad.csv:2:"]);
    refused_line(&["trace", "stats", "/nonexistent/x.trace"], &["/nonexistent/x.trace", "cannot open"]);
    refused_line(&["trace", "stats", ts, "--format", "nope"], &["unknown trace format", "msr"]);
}
