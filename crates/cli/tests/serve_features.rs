//! `serve --record-trace` and `serve --emulate`.

mod common;
use common::*;
use layoutd_core::{Op, TraceRecord};

fn ready() -> bool {
    require("nbdkit plugin liblayoutd_nbd.so (cargo build --workspace)", plugin_built())
        && require("`nbdkit` (apt-get install nbdkit)", have_cmd("nbdkit"))
        && require("`qemu-io` (apt-get install qemu-utils)", have_cmd("qemu-io"))
}

fn records(path: &std::path::Path) -> Vec<TraceRecord> {
    let text = std::fs::read_to_string(path).unwrap();
    assert!(text.starts_with("# layoutd-trace v1"), "header missing:\n{text}");
    text.lines().filter(|l| !l.starts_with('#')).map(|l| TraceRecord::parse_line(l).unwrap()).collect()
}

#[test]
fn record_trace_captures_what_the_client_sent_on_any_stack() {
    if !ready() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let dev = formatted(dir.path(), "r.img", "32M", None);
    let trace = dir.path().join("run.trace");
    let run = "qemu-io -f raw -t writeback -c 'write -P 1 8192 4096' -c 'write -f -P 2 1M 64k' -c 'read 8192 4096' -c 'flush' \"$uri\"";
    let out = serve_run(&dev, run, &["--record-trace", trace.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out));
    let r = records(&trace);
    let want =
        [(Op::Write, 8192, 4096, false), (Op::Write, 1 << 20, 65536, true), (Op::Read, 8192, 4096, false)];
    for (op, off, len, fua) in want {
        assert!(
            r.iter().any(|x| x.op == op && x.offset_bytes == off && x.length_bytes == len && x.fua == fua),
            "no {op:?} {off}+{len} fua={fua} in {r:?}"
        );
    }
    assert!(r.iter().any(|x| x.op == Op::Flush), "no flush recorded");
    assert!(r.windows(2).all(|w| w[0].submit <= w[1].submit), "records are in submit order");
}

#[test]
fn record_trace_on_a_stack_with_its_own_trace_layer_records_each_request_once() {
    if !ready() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let cfg = "version = 1\n[[layer]]\ntarget = \"trace\"\n[[layer]]\ntarget = \"linear\"\n";
    let dev = formatted(dir.path(), "t.img", "32M", Some(cfg));
    let trace = dir.path().join("once.trace");
    let run = "qemu-io -f raw -t writeback -c 'write -P 1 8192 4096' -c 'read 8192 4096' \"$uri\"";
    let out = serve_run(&dev, run, &["--record-trace", trace.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out));
    let r = records(&trace);
    let writes = r.iter().filter(|x| x.op == Op::Write && x.offset_bytes == 8192).count();
    assert_eq!(writes, 1, "the write was recorded {writes} times: {r:?}");
}

#[test]
fn emulate_holds_random_reads_back_by_at_least_the_model_service_time() {
    if !ready() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let dev = formatted(dir.path(), "e.img", "2G", None);
    let trace = dir.path().join("emu.trace");
    // 20 reads spread over the volume: each pays a seek and a rotation on the model.
    let cmds: String =
        (0..20u64).map(|i| format!(" -c 'read {} 4096'", (i * 7919 % 20) * (100 << 20))).collect();
    let out = serve_run(
        &dev,
        &format!("qemu-io -f raw{cmds} \"$uri\""),
        &["--emulate", "wd800", "--record-trace", trace.to_str().unwrap()],
    );
    assert!(out.status.success(), "{}", text(&out));
    let reads: Vec<_> = records(&trace).into_iter().filter(|r| r.op == Op::Read).collect();
    assert!(reads.len() >= 20, "{} reads recorded", reads.len());
    let mean_ns = reads.iter().map(|r| r.complete.ns_since(r.submit)).sum::<u64>() / reads.len() as u64;
    // The emulator sleeps until the model's completion instant, so this is a
    // lower bound by construction (a slow machine can only add to it).
    assert!(
        mean_ns > 2_000_000,
        "mean emulated read took {mean_ns} ns; the WD800 model charges milliseconds"
    );
    let bad = serve_run(&dev, "true", &["--emulate", "nosuchdisk"]);
    assert!(!bad.status.success());
    assert!(text(&bad).contains("wd800"), "an unknown preset lists the known ones: {}", text(&bad));
}

#[test]
fn record_disk_writes_each_request_the_emulated_disk_served_after_the_trace_request_it_served() {
    if !ready() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let dev = formatted(dir.path(), "d.img", "2G", None);
    let (trace, disk) = (dir.path().join("d.trace"), dir.path().join("d.disk"));
    let run = "qemu-io -f raw -c 'read 0 4096' -c 'read 1G 8192' -c 'write -P 3 64M 4096' \"$uri\"";
    let args = [
        "--emulate",
        "wd800",
        "--record-trace",
        trace.to_str().unwrap(),
        "--record-disk",
        disk.to_str().unwrap(),
    ];
    let out = serve_run(&dev, run, &args);
    assert!(out.status.success(), "{}", text(&out));
    let text_disk = std::fs::read_to_string(&disk).unwrap();
    assert!(text_disk.starts_with("# arrival_ns start_ns complete_ns op"), "header missing:\n{text_disk}");
    let rows: Vec<Vec<String>> = text_disk
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| l.split(' ').map(str::to_string).collect())
        .collect();
    // Each client request of the trace was served by the emulated disk
    // (linear stack: same offset and length), inside the client's request.
    for r in records(&trace).iter().filter(|r| r.op != Op::Flush) {
        let op = if r.op == Op::Read { "R" } else { "W" };
        let row = rows
            .iter()
            .find(|f| f[3] == op && f[4] == r.offset_bytes.to_string() && f[5] == r.length_bytes.to_string())
            .unwrap_or_else(|| panic!("{r:?} not in the disk record:\n{text_disk}"));
        let n: Vec<u64> = [0, 1, 2].iter().map(|&i| row[i].parse().unwrap()).collect();
        assert!(r.submit.as_ns() <= n[0] && n[0] <= n[1] && n[1] <= n[2], "{row:?} vs {r:?}");
        assert!(
            n[2] <= r.complete.as_ns(),
            "the client saw the completion before the model's: {row:?} vs {r:?}"
        );
    }
    // Without --emulate there is no emulated disk to record.
    let disk2 = dir.path().join("none.disk");
    let bad = serve_run(&dev, "true", &["--record-disk", disk2.to_str().unwrap()]);
    assert!(!bad.status.success());
    assert!(text(&bad).contains("--emulate"), "{}", text(&bad));
}
