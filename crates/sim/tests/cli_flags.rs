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
