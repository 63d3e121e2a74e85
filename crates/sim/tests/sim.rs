//! Simulator tests: determinism, closed-loop replay of a recorded trace,
//! idle events, reports and comparison.

use layoutd_core::config::StackConfig;
use layoutd_hdd::DiskParams;
use layoutd_sim::{simulate, summary_json, SimOptions, TraceFormat};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// A layoutd-format trace of `count` requests over `streams` synchronous
/// streams: each stream's next request starts `think_ns` after its
/// previous recorded completion. Mixed sequential and random, reads and
/// writes, a few flushes and trims.
fn synthetic_trace(dir: &Path, count: u64, streams: u64) -> PathBuf {
    let mut text =
        String::from("# layoutd-trace v1: submit_ns complete_ns stream op offset_bytes length_bytes flags\n");
    let mut x = 0x1234_5678_9abc_def0u64;
    let mut rand = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut t_ns = vec![0u64; streams as usize];
    let mut next_offset = vec![0u64; streams as usize];
    let mut lines = Vec::new();
    for i in 0..count {
        let s = (i % streams) as usize;
        let length = 4096 * (1 + rand() % 8);
        let offset = if rand() % 2 == 0 { next_offset[s] } else { (rand() % (1 << 20)) * 4096 };
        next_offset[s] = offset + length;
        let (op, offset, length) = match rand() % 20 {
            0 => ('F', 0, 0),
            1 => ('T', offset, length),
            2..=13 => ('R', offset, length),
            _ => ('W', offset, length),
        };
        let submit = t_ns[s];
        let complete = submit + 2_000_000 + rand() % 10_000_000;
        t_ns[s] = complete + rand() % 3_000_000;
        lines.push((submit, format!("{submit} {complete} {s} {op} {offset} {length} -")));
    }
    lines.sort_by_key(|l| l.0);
    for (_, l) in lines {
        writeln!(text, "{l}").unwrap();
    }
    let path = dir.join("synthetic.trace");
    std::fs::write(&path, text).unwrap();
    path
}

fn options(trace: PathBuf, seed: u64) -> SimOptions {
    let mut o = SimOptions::new(trace, TraceFormat::Layoutd, DiskParams::preset("wd800").unwrap());
    o.seed = seed;
    o
}

#[test]
fn same_inputs_and_seed_give_identical_json() {
    let dir = tempfile::tempdir().unwrap();
    let trace = synthetic_trace(dir.path(), 3000, 4);
    for closed_loop in [false, true] {
        let mut o = options(trace.clone(), 7);
        o.closed_loop = closed_loop;
        let a = summary_json(&simulate(&o).unwrap().summary);
        let b = summary_json(&simulate(&o).unwrap().summary);
        assert_eq!(a, b, "byte-identical JSON (closed_loop={closed_loop})");
        let v: serde_json::Value = serde_json::from_str(&a).unwrap();
        assert_eq!(v["requests"], 3000);
        for key in ["mean", "p50", "p95", "p99", "max"] {
            assert!(v["response_ms"][key].as_f64().unwrap() > 0.0, "response_ms.{key}");
        }
        assert!(v["simulated_seconds"].as_f64().unwrap() > 0.0);
        assert!(v["disk_busy_seconds"].as_f64().unwrap() > 0.0);
        assert_eq!(v["stack"]["layers"][0]["target"], "linear");
        assert!(v["stack"]["layers"][0]["counters"]["reads_count"].as_u64().unwrap() > 0);
        let mut other = o.clone();
        other.seed = 8;
        let c = summary_json(&simulate(&other).unwrap().summary);
        assert_ne!(a, c, "the seed sets the platter's phase, so timings move");
    }
}

#[test]
fn closed_loop_replay_of_a_recorded_trace_sends_the_same_requests_to_the_disk() {
    let dir = tempfile::tempdir().unwrap();
    let input = synthetic_trace(dir.path(), 2000, 3);
    let recorded = dir.path().join("recorded.trace");
    // The "live run": a trace layer records what reaches the volume.
    let mut record = options(input, 3);
    record.closed_loop = true;
    record.log_disk = true;
    record.record_trace = Some(recorded.clone());
    record.stack = StackConfig::parse(
        "version = 1\n[[layer]]\ntarget = \"trace\"\n[[layer]]\ntarget = \"linear\"\n",
        "t",
    )
    .unwrap();
    let first = simulate(&record).unwrap();
    let trace_counters = &first.summary.stack.layers[0].counters;
    assert_eq!(trace_counters["records_count"], 2000);
    assert_eq!(trace_counters["records_dropped_count"], 0);
    // The recording names the input's streams (0, 1, 2), not the runs the
    // detector found inside them: the replay detects those again.
    let streams: std::collections::BTreeSet<String> = std::fs::read_to_string(&recorded)
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| l.split_whitespace().nth(2).unwrap().to_string())
        .collect();
    assert_eq!(streams, ["0", "1", "2"].map(String::from).into_iter().collect());
    // The replay: the recording, closed-loop, through the plain stack.
    let mut replay = options(recorded, 3);
    replay.closed_loop = true;
    replay.log_disk = true;
    let second = simulate(&replay).unwrap();
    let (a, b) = (first.disk_log.unwrap(), second.disk_log.unwrap());
    assert_eq!(a.len(), 2000);
    assert_eq!(a, b, "same request sequence at the disk");
    assert_eq!(first.summary.simulated_seconds, second.summary.simulated_seconds);
}

#[test]
fn open_loop_delivers_idle_in_gaps_and_reports_counters() {
    let dir = tempfile::tempdir().unwrap();
    // Two requests one second apart: the disk goes quiet in between.
    let path = dir.path().join("gap.trace");
    std::fs::write(&path, "0 0 0 R 0 4096 -\n1000000000 1000000000 0 W 8192 4096 -\n").unwrap();
    let out = simulate(&options(path, 0)).unwrap();
    let s = &out.summary;
    assert_eq!(s.requests, 2);
    assert!(s.harness.idle_events_count >= 2, "idle after bring-up and in the gap: {:?}", s.harness);
    assert!(s.simulated_seconds >= 1.0 && s.simulated_seconds < 1.1);
    assert!(s.disk_busy_seconds < 0.1);
    assert_eq!((s.reads_count, s.writes_count), (1, 1));
}

#[test]
fn report_and_compare() {
    let dir = tempfile::tempdir().unwrap();
    let trace = synthetic_trace(dir.path(), 500, 2);
    let out = simulate(&options(trace.clone(), 1)).unwrap();
    let page = layoutd_sim::report::write_report(&dir.path().join("report"), &out).unwrap();
    let html = std::fs::read_to_string(&page).unwrap();
    for svg in ["address_time.svg", "seek_profile.svg", "response_cdf.svg", "response_hist.svg"] {
        assert!(html.contains(svg));
        let text = std::fs::read_to_string(dir.path().join("report").join(svg)).unwrap();
        assert!(text.starts_with("<svg") && text.len() > 1000, "{svg} is a drawing");
    }
    assert!(html.contains("response_ms.p99"));
    let a = dir.path().join("a.json");
    let b = dir.path().join("b.json");
    std::fs::write(&a, summary_json(&out.summary)).unwrap();
    let mut closed = options(trace, 1);
    closed.closed_loop = true;
    std::fs::write(&b, summary_json(&simulate(&closed).unwrap().summary)).unwrap();
    let table = layoutd_sim::report::compare_table(&[a.clone(), b.clone()]).unwrap();
    let lines: Vec<&str> = table.lines().collect();
    assert!(
        lines[0].starts_with("A = ") && lines[0].ends_with("synthetic.trace · default linear · wd800)"),
        "{table}"
    );
    assert!(lines[1].starts_with("B = ") && lines[1].contains("b.json"));
    assert_eq!(
        lines[2].split_whitespace().collect::<Vec<_>>(),
        vec!["metric", "A", "B", "B/A"],
        "{}",
        lines[2]
    );
    assert!(lines
        .iter()
        .any(|l| l.starts_with("trace.mode") && l.contains("open-loop") && l.contains("closed-loop")));
    let requests: Vec<&str> =
        lines.iter().find(|l| l.starts_with("requests ")).unwrap().split_whitespace().collect();
    assert_eq!(requests, vec!["requests", "500", "500", "1.000"], "equal counts: ratio 1");
    assert!(lines.iter().any(|l| l.starts_with("response_ms.p99")));
    assert!(!table.contains("response_buckets"), "plot data stays out of the table");
    // Up to four runs fit in 100 columns.
    for n in 2..=4 {
        let runs: Vec<PathBuf> = [&a, &b, &a, &b][..n].iter().map(|p| (*p).clone()).collect();
        let t = layoutd_sim::report::compare_table(&runs).unwrap();
        let widest = t.lines().map(|l| l.chars().count()).max().unwrap();
        assert!(widest <= 100, "{n} runs: a line of {widest} characters");
    }
    // One page overlaying the runs.
    let cmp = dir.path().join("cmp");
    let page = layoutd_sim::report::write_compare_report(&cmp, &[a, b]).unwrap();
    let html = std::fs::read_to_string(page).unwrap();
    for svg in ["read_cdf.svg", "write_cdf.svg", "read_hist.svg", "write_hist.svg", "phases.svg", "busy.svg"]
    {
        assert!(html.contains(svg), "{svg}");
        let text = std::fs::read_to_string(cmp.join(svg)).unwrap();
        assert!(text.contains("A synthetic.trace · default linear · wd800"), "{svg} names each run");
        assert!(text.contains("B synthetic.trace"), "{svg} names each run");
    }
    assert!(html.contains("<th>B/A</th>"));
}

/// The text of every `<text>` element of an SVG.
fn svg_texts(svg: &str) -> Vec<String> {
    svg.split("<text")
        .skip(1)
        .filter_map(|t| Some(t.split_once('>')?.1.split_once("</text>")?.0.trim().to_string()))
        .collect()
}

#[test]
fn plots_name_the_run_split_reads_and_writes_and_show_zero_time_responses() {
    // dcd acknowledges small writes from RAM: responses of exactly 0.
    let dir = tempfile::tempdir().unwrap();
    let trace = synthetic_trace(dir.path(), 3000, 4);
    let mut o = options(trace, 2);
    let dcd = "version = 1\n[[layer]]\ntarget = \"dcd\"\nlog_length = \"64MiB\"\n";
    o.stack = layoutd_core::config::StackConfig::parse(dcd, "dcd").unwrap();
    o.stack_origin = "examples/dcd.toml".into();
    let out = simulate(&o).unwrap();
    assert!(out.summary.response_buckets.write.first().is_some_and(|b| b[0] == 0), "zero-time writes");
    let report = dir.path().join("r");
    layoutd_sim::report::write_report(&report, &out).unwrap();
    for svg in ["address_time.svg", "seek_profile.svg", "response_cdf.svg", "response_hist.svg", "phases.svg"]
    {
        let text = std::fs::read_to_string(report.join(svg)).unwrap();
        assert!(text.contains("synthetic.trace · dcd.toml · wd800"), "{svg} names trace, stack and disk");
    }
    // The same outcome draws the same bytes (no hash order, no clock).
    let again = dir.path().join("r2");
    layoutd_sim::report::write_report(&again, &simulate(&o).unwrap()).unwrap();
    for f in [
        "address_time.svg",
        "seek_profile.svg",
        "response_cdf.svg",
        "response_hist.svg",
        "phases.svg",
        "index.html",
    ] {
        assert_eq!(std::fs::read(report.join(f)).unwrap(), std::fs::read(again.join(f)).unwrap(), "{f}");
    }
    let hist = std::fs::read_to_string(report.join("response_hist.svg")).unwrap();
    let texts = svg_texts(&hist);
    assert!(texts.iter().any(|t| t == "reads") && texts.iter().any(|t| t == "writes"), "split: {texts:?}");
    // Zero-time responses have their own bar, labelled 0, beside the round
    // 1-2-5 labels (report.rs tests that every label is round).
    assert!(texts.iter().any(|t| t == "0") && texts.iter().any(|t| t == "0.001" || t == "1"), "{texts:?}");
    let cdf = std::fs::read_to_string(report.join("response_cdf.svg")).unwrap();
    assert!(
        svg_texts(&cdf).iter().any(|t| t.starts_with("writes (") && t.ends_with("% at 0 ms)")),
        "zero share named"
    );
}

#[test]
fn the_address_plot_stays_small_for_any_trace() {
    // 200,000 sampled points of scattered addresses: the plot keeps at most
    // one per pixel and a bounded number in all.
    let dir = tempfile::tempdir().unwrap();
    let mut text = String::new();
    let mut x = 0x2545_f491_4f6c_dd1du64;
    for i in 0..200_000u64 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let op = if i % 3 == 0 { 'W' } else { 'R' };
        writeln!(text, "{t} {t} 0 {op} {o} 4096 -", t = i * 1_000_000, o = (x % (70 << 30)) / 4096 * 4096)
            .unwrap();
    }
    let path = dir.path().join("wide.trace");
    std::fs::write(&path, text).unwrap();
    let out = simulate(&options(path, 0)).unwrap();
    assert!(out.addresses.len() > 100_000, "{} sampled", out.addresses.len());
    let report = dir.path().join("r");
    layoutd_sim::report::write_report(&report, &out).unwrap();
    let bytes = std::fs::metadata(report.join("address_time.svg")).unwrap().len();
    assert!(bytes < 2 << 20, "address_time.svg is {bytes} bytes");
    // The legend is drawn above the plot area, before any point.
    let svg = std::fs::read_to_string(report.join("address_time.svg")).unwrap();
    let first_point = svg.find("<circle").unwrap();
    let legend = svg_texts(&svg[..first_point]);
    assert!(legend.iter().any(|t| t == "reads") || svg_texts(&svg).iter().any(|t| t == "reads"));
}

#[test]
fn a_bad_trace_line_stops_the_simulation_with_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.trace");
    std::fs::write(&path, "0 0 0 R 0 4096 -\n5 5 0 Q 0 4096 -\n").unwrap();
    let e = simulate(&options(path, 0)).err().expect("bad line refused").to_string();
    assert!(e.ends_with("bad.trace:2: unknown op \"Q\" (R W F T Z) (reading as --format layoutd)"), "{e}");
}

#[test]
fn disk_busy_time_is_counted_over_the_trace_window_only() {
    // A dcd stack does disk work outside the trace: formatting its log
    // before the first request. Busy time in the window can never exceed the
    // window (it did, when bring-up was counted in); the rest is reported apart.
    let dir = tempfile::tempdir().unwrap();
    let path = synthetic_trace(dir.path(), 2000, 4);
    let mut o = options(path, 0);
    let dcd = "version = 1\n[[layer]]\ntarget = \"dcd\"\nlog_length = \"64MiB\"\n";
    o.stack = layoutd_core::config::StackConfig::parse(dcd, "dcd").unwrap();
    let s = simulate(&o).unwrap().summary;
    assert!(
        s.disk_busy_seconds <= s.simulated_seconds,
        "{} busy in {} s",
        s.disk_busy_seconds,
        s.simulated_seconds
    );
    assert!(s.disk_utilization <= 1.0);
    assert!(s.disk_busy_bringup_seconds > 0.0, "formatting the log costs disk time");
}

#[test]
fn timestamps_before_the_first_request_are_moved_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("early.trace");
    // The second request is recorded before the first; in open loop it was
    // moved to the origin without being counted.
    std::fs::write(&path, "1000000 1000000 0 R 0 4096 -\n500000 500000 1 R 1048576 4096 -\n").unwrap();
    for closed_loop in [false, true] {
        let mut o = options(path.clone(), 0);
        o.closed_loop = closed_loop;
        let s = simulate(&o).unwrap().summary;
        assert_eq!(s.requests, 2);
        assert_eq!(s.trace.timestamps_clamped_count, 1, "closed_loop={closed_loop}");
    }
}

#[test]
fn disk_utilization_counts_only_service_inside_the_window() {
    // A dcd stack absorbs writes in RAM and writes its log behind them: when
    // the last trace request completes, a log write is in service and runs
    // past the window. Only its part inside may be counted.
    let dir = tempfile::tempdir().unwrap();
    let mut text = String::new();
    for i in 0..4000u64 {
        writeln!(text, "{t} {t} 0 W {o} 4096 -", t = i * 20_000, o = (i * 7919 % 100_000) * 4096).unwrap();
    }
    let path = dir.path().join("writes.trace");
    std::fs::write(&path, text).unwrap();
    let mut o = options(path, 3);
    let dcd = "version = 1\n[[layer]]\ntarget = \"dcd\"\nlog_length = \"64MiB\"\n";
    o.stack = layoutd_core::config::StackConfig::parse(dcd, "dcd").unwrap();
    let s = simulate(&o).unwrap().summary;
    assert!(s.disk_utilization <= 1.0, "utilization {}", s.disk_utilization);
    assert!(s.disk_busy_seconds <= s.simulated_seconds);
    assert!(s.disk_utilization > 0.5, "the disk was kept busy: {}", s.disk_utilization);
    assert!(s.disk_busy_after_trace_seconds > 0.0, "log writes ran past the last completion");
}

#[test]
fn phases_follow_the_traces_clock_in_any_mode() {
    let dir = tempfile::tempdir().unwrap();
    let trace = synthetic_trace(dir.path(), 3000, 4);
    let open = simulate(&options(trace.clone(), 0)).unwrap().summary;
    let mut closed = options(trace, 0);
    closed.closed_loop = true;
    let closed = simulate(&closed).unwrap().summary;
    let (a, b) = (&open.phases, &closed.phases);
    assert!((8..=16).contains(&a.list.len()), "{} phases", a.list.len());
    assert_eq!((a.width_s, a.list.len()), (b.width_s, b.list.len()), "same trace, same phases");
    // Phases count by recorded time, so the split of requests is the same.
    let counts = |p: &layoutd_sim::phases::PhaseInfo| p.list.iter().map(|x| x.requests).collect::<Vec<_>>();
    assert_eq!(counts(a), counts(b));
    assert_eq!(counts(a).iter().sum::<u64>(), 3000);
    assert!(a.list.iter().any(|x| x.read_response_ms_mean > 0.0));
}

#[test]
fn messages_are_delivered_at_their_point_of_the_trace_and_a_refusal_stops_the_replay() {
    use layoutd_sim::messages::ScheduledMessage;
    let dir = tempfile::tempdir().unwrap();
    let trace = synthetic_trace(dir.path(), 3000, 4);
    // Requests of the trace before 2 s of trace time (the file is in time order).
    let text = std::fs::read_to_string(&trace).unwrap();
    let times: Vec<u64> =
        text.lines().skip(1).map(|l| l.split(' ').next().unwrap().parse().unwrap()).collect();
    let before_2s = times.iter().filter(|&&t| t - times[0] < 2_000_000_000).count() as u64;
    assert!(before_2s > 0 && before_2s < 3000);
    let dcd = "version = 1\n[[layer]]\ntarget = \"dcd\"\nlog_length = \"16MiB\"\nidle_ms_max = 100000\n";
    for closed_loop in [false, true] {
        let mut o = options(trace.clone(), 3);
        o.stack = StackConfig::parse(dcd, "test dcd").unwrap();
        o.closed_loop = closed_loop;
        o.messages = ["@1200:destage", "2s:destage", "@1000000:destage"]
            .iter()
            .map(|m| ScheduledMessage::parse(m).unwrap())
            .collect();
        let s = simulate(&o).unwrap().summary;
        let at: Vec<(&str, u64)> = s.messages.iter().map(|m| (m.spec.as_str(), m.before_request)).collect();
        assert_eq!(at.len(), 3, "every message delivered once: {at:?}");
        assert!(s.messages.iter().all(|m| m.reply.starts_with("destaging")), "{:?}", s.messages);
        assert!(at.contains(&("@1200:destage", 1200)), "{at:?}");
        assert_eq!(at[2], ("@1000000:destage", 3000), "past the end: after the last request");
        if !closed_loop {
            assert!(at.contains(&("2s:destage", before_2s)), "open loop issues in trace order: {at:?}");
        }
        assert!(summary_json(&s).contains("\"messages\""));
    }
    // Without messages the JSON has no such key (earlier summaries stay byte-identical).
    let plain = simulate(&options(trace.clone(), 3)).unwrap().summary;
    assert!(!summary_json(&plain).contains("\"messages\""));
    // A message the stack does not know stops the run and names it.
    let mut o = options(trace, 3);
    o.messages = vec![ScheduledMessage::parse("@10:snapshot create s1").unwrap()];
    let e = simulate(&o).err().expect("refused").to_string();
    assert!(e.contains("@10:snapshot create s1") && e.contains("refused"), "{e}");
}
