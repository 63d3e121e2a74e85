//! Flags of `layoutd sim` as the CLI parses them (the command module the
//! binary compiles): the reproductions end to end.

mod cli;

use cli::run;

#[test]
fn a_timestamp_near_2_pow_64_ns_is_refused_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let t = dir.path().join("wrap.txt");
    std::fs::write(&t, "0 0 100 8 1\n18446744073709.551 0 200 8 0\n").unwrap();
    let json = dir.path().join("out.json");
    let e = run(&[
        "--trace",
        t.to_str().unwrap(),
        "--format",
        "disksim",
        "--disk",
        "wd800",
        "--json",
        json.to_str().unwrap(),
    ])
    .unwrap_err();
    assert!(e.contains("wrap.txt:2: timestamp is 18446744074 s after the trace's first request"), "{e}");
    assert!(!json.exists(), "no result for a refused trace");
}

#[test]
fn units_are_for_disksim_shaped_traces_only() {
    let dir = tempfile::tempdir().unwrap();
    let t = dir.path().join("mqsim.txt");
    // MQSim: arrival in ns, sizes in sectors; 3 ms apart.
    std::fs::write(&t, "0 1 524288 16 0\n3000000 1 524304 16 1\n").unwrap();
    let json = dir.path().join("out.json");
    let (t, json_s) = (t.to_str().unwrap(), json.to_str().unwrap());
    run(&["--trace", t, "--format", "disksim", "--time-unit", "ns", "--disk", "wd800", "--json", json_s])
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(v["requests"], 2);
    assert!(v["simulated_seconds"].as_f64().unwrap() < 1.0, "ns, not ms: {}", v["simulated_seconds"]);
    let e = run(&["--trace", t, "--format", "spc", "--time-unit", "ns", "--disk", "wd800"]).unwrap_err();
    assert!(e.contains("--time-unit and --size-unit apply to --format disksim"), "{e}");
    let e = run(&["--trace", t, "--format", "disksim", "--size-unit", "kb", "--disk", "wd800"]).unwrap_err();
    assert!(e.contains("--size-unit must be sectors or bytes"), "{e}");
    let e = run(&["--trace", t, "--format", "disksim", "--fit", "squeeze", "--disk", "wd800"]).unwrap_err();
    assert!(e.contains("--fit must be none, modulo, scale or compact"), "{e}");
}

#[test]
fn volume_is_the_device_selection_and_must_match() {
    let data = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/sample.tencent.csv");
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("v.json");
    let json_s = json.to_str().unwrap();
    run(&[
        "--trace", data, "--format", "tencent", "--volume", "21", "--fit", "compact", "--disk", "wd800",
        "--json", json_s,
    ])
    .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(
        (v["requests"].as_u64(), v["trace"]["counts"]["other_device_count"].as_u64()),
        (Some(1), Some(3))
    );
    let e = run(&["--trace", data, "--format", "tencent", "--volume", "22", "--disk", "wd800"]).unwrap_err();
    assert!(
        e.contains("--device (--volume) 22 matches none of the 4 requests; the trace's devices are 1283 21"),
        "{e}"
    );
}

/// A replay of a live run needs the live geometry and its own record: the
/// stack on the volume file's data area (`--device-bytes`, `--device-offset`)
/// and a record even when the config has no `trace` layer.
#[test]
fn device_bytes_bound_the_stack_and_record_trace_needs_no_trace_layer() {
    let dir = tempfile::tempdir().unwrap();
    let t = dir.path().join("run.trace");
    std::fs::write(&t, "0 1000000 0 R 4096 4096 -\n2000000 3000000 0 R 1044480 4096 -\n").unwrap();
    let (json, rec, disk) = (dir.path().join("out.json"), dir.path().join("rec"), dir.path().join("disk"));
    let (t_s, json_s, rec_s, disk_s) =
        (t.to_str().unwrap(), json.to_str().unwrap(), rec.to_str().unwrap(), disk.to_str().unwrap());
    let base = ["--trace", t_s, "--format", "layoutd", "--disk", "wd800", "--closed-loop", "--json", json_s];
    let bound = ["--device-bytes", "1MiB", "--device-offset", "1MiB"];
    run(&[&base[..], &bound[..], &["--record-trace", rec_s, "--record-disk", disk_s]].concat()).unwrap();
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!((v["requests"].as_u64(), v["errors_count"].as_u64()), (Some(2), Some(0)));
    assert_eq!(v["stack"]["layers"][0]["target"], "trace", "put on top for the record");
    // The record holds what the stack received, not just a header.
    let recorded: Vec<String> = std::fs::read_to_string(&rec)
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| l.split_whitespace().skip(3).take(3).collect::<Vec<_>>().join(" "))
        .collect();
    assert_eq!(recorded, ["R 4096 4096", "R 1044480 4096"]);
    // The disk served them 1 MiB further on.
    let offsets: Vec<u64> = std::fs::read_to_string(&disk)
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with('#') && l.contains(" R "))
        .map(|l| l.split_whitespace().nth(4).unwrap().parse().unwrap())
        .collect();
    assert_eq!(offsets, [(1 << 20) + 4096, (1 << 20) + 1044480]);
    // The stack is 1 MiB: a read past it is refused by name.
    std::fs::write(&t, "0 1000000 0 R 1048576 4096 -\n").unwrap();
    let e = run(&[&base[..], &bound[..]].concat()).unwrap_err();
    assert!(e.contains("runs past the end of the volume (1048576 bytes)"), "{e}");
    run(&base).unwrap(); // the whole disk: no bound
    let e = run(&[&base[..], &["--device-bytes", "100GiB"]].concat()).unwrap_err();
    assert!(e.contains("must lie inside the disk's 80026361856 bytes"), "{e}");
}

/// A request the replayed stack fails is named in the JSON (and on stderr):
/// a pool snapshot's read replayed without the message that creates it.
#[test]
fn failed_requests_are_named_and_the_snapshot_message_prevents_them() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("pool.toml");
    std::fs::write(
        &cfg,
        "version = 1\n[[layer]]\ntarget = \"pool\"\nvolumes_max = 2\nvolume_size = \"4MiB\"\nplacement = \"contiguous\"\n",
    )
    .unwrap();
    let t = dir.path().join("run.trace");
    // A write to the origin, then a read of slot 1 (the snapshot's export).
    std::fs::write(&t, "0 1000000 0 W 0 65536 -\n2000000 3000000 0 R 4194304 4096 -\n").unwrap();
    let json = dir.path().join("out.json");
    let (t_s, json_s, cfg_s) = (t.to_str().unwrap(), json.to_str().unwrap(), cfg.to_str().unwrap());
    let base = [
        "--trace",
        t_s,
        "--format",
        "layoutd",
        "--disk",
        "wd800",
        "--closed-loop",
        "--config",
        cfg_s,
        "--json",
        json_s,
    ];
    run(&base).unwrap();
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(v["errors_count"], 1);
    assert_eq!(v["first_errors"][0]["op"], "R");
    assert_eq!(v["first_errors"][0]["trace_s"], 0.002);
    assert!(v["first_errors"][0]["error"].as_str().unwrap().contains("EINVAL"), "{}", v["first_errors"]);
    run(&[&base[..], &["--message", "@1:snapshot create s ro"]].concat()).unwrap();
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(v["errors_count"], 0);
    assert!(v.get("first_errors").is_none(), "absent when nothing failed (JSON unchanged)");
}
