//! `--matrix`: every cell is byte-identical to the single run with the same
//! flags, whatever the thread count, and shards merged with `--summarize`
//! give the unsharded summary byte for byte. Drives the command module
//! the CLI compiles.

mod cli;

use std::fmt::Write as _;
use std::path::Path;

fn sim(args: &[&str]) {
    cli::run(args).unwrap();
}

/// A small DiskSim trace: `count` requests, mixed reads and writes.
fn trace(dir: &Path, name: &str, count: u64, seed: u64) -> String {
    let mut x = seed | 1;
    let mut text = String::new();
    for i in 0..count {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        writeln!(text, "{}.{:03} 0 {} {} {}", i * 3, x % 1000, (x >> 10) % 1_000_000, 8 * (1 + x % 4), x & 1)
            .unwrap();
    }
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

#[test]
fn matrix_cells_equal_single_runs_and_shards_merge_to_the_same_summary() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let t1 = trace(d, "t1.txt", 400, 11);
    let t2 = trace(d, "t2.txt", 300, 23);
    let dcd = d.join("dcd.toml");
    std::fs::write(&dcd, "version = 1\n[[layer]]\ntarget = \"dcd\"\nlog_length = \"64MiB\"\n").unwrap();
    let matrix = format!(
        "common = [\"--seed\", \"5\"]\n\
         [[trace]]\nname = \"t1\"\nargs = [\"--trace\", \"{t1}\", \"--format\", \"disksim\"]\n\
         [[trace]]\nname = \"t2\"\nargs = [\"--trace\", \"{t2}\", \"--format\", \"disksim\", \"--closed-loop\"]\n\
         [[stack]]\nname = \"plain\"\n\
         [[stack]]\nname = \"dcd\"\nargs = [\"--config\", \"{}\"]\n\
         [[disk]]\nname = \"wd800\"\nargs = [\"--disk\", \"wd800\"]\n\
         [[disk]]\nname = \"modern\"\nargs = [\"--disk\", \"modern7200\", \"--scheduler\", \"sptf\"]\n",
        dcd.display()
    );
    let m = d.join("m.toml");
    std::fs::write(&m, matrix).unwrap();
    let m = m.display().to_string();
    let out = |name: &str| d.join(name).display().to_string();
    sim(&["--matrix", &m, "--out", &out("all1"), "--jobs", "1"]);
    sim(&["--matrix", &m, "--out", &out("all3"), "--jobs", "3"]);
    for shard in ["0/3", "1/3", "2/3"] {
        sim(&["--matrix", &m, "--out", &out("sharded"), "--shard", shard]);
    }
    assert!(!d.join("sharded/summary.json").exists(), "a shard writes no summary");
    sim(&["--matrix", &m, "--out", &out("sharded"), "--summarize"]);
    let summary = std::fs::read(d.join("all1/summary.json")).unwrap();
    assert_eq!(summary, std::fs::read(d.join("all3/summary.json")).unwrap(), "thread count changes nothing");
    assert_eq!(
        summary,
        std::fs::read(d.join("sharded/summary.json")).unwrap(),
        "shards merge to the same bytes"
    );
    let v: serde_json::Value = serde_json::from_slice(&summary).unwrap();
    let cells = v["cells"].as_array().unwrap();
    assert_eq!(cells.len(), 8);
    assert_eq!((cells[0]["trace"].as_str(), cells[2]["stack"].as_str()), (Some("t1"), Some("dcd")));
    assert_eq!(cells[0]["response_mean_vs_first_stack"], 1.0);
    // Every cell is byte-identical to the single run with its flags.
    for c in cells {
        let args: Vec<String> =
            c["args"].as_array().unwrap().iter().map(|a| a.as_str().unwrap().to_string()).collect();
        let single = d.join("single.json").display().to_string();
        let mut argv: Vec<&str> = args.iter().map(String::as_str).collect();
        argv.extend(["--json", &single, "--no-progress"]);
        sim(&argv);
        let cell = std::fs::read(d.join("all3").join(c["file"].as_str().unwrap())).unwrap();
        assert_eq!(cell, std::fs::read(&single).unwrap(), "cell {}", c["index"]);
    }
    // Summarizing before every shard ran names the missing cells.
    let partial = out("partial");
    sim(&["--matrix", &m, "--out", &partial, "--shard", "0/2"]);
    let e = cli::run(&["--matrix", &m, "--out", &partial, "--summarize"]).unwrap_err();
    assert!(e.contains("4 of 8 cells have no JSON yet"), "{e}");
}

#[test]
fn matrix_files_and_shards_are_checked() {
    use layoutd_sim::matrix::{Matrix, Shard};
    assert_eq!(Shard::parse("1/4"), Ok(Shard { index: 1, count: 4 }));
    for bad in ["4/4", "1", "a/2", "0/0"] {
        assert!(Shard::parse(bad).unwrap_err().contains("--shard must be I/N"), "{bad}");
    }
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("m.toml");
    let check = |text: &str| {
        std::fs::write(&p, text).unwrap();
        format!("{:#}", Matrix::load(&p).unwrap_err())
    };
    let e = check("[[trace]]\nname = \"a\"\n[[stack]]\nname = \"s\"\n");
    assert!(e.contains("not a matrix file") || e.contains("needs at least one [[disk]]"), "{e}");
    let e = check("trace = []\nstack = [{name = \"s\"}]\ndisk = [{name = \"d\"}]\n");
    assert!(e.contains("needs at least one [[trace]]"), "{e}");
    let e = check("[[trace]]\nname = \"a/b\"\n[[stack]]\nname = \"s\"\n[[disk]]\nname = \"d\"\n");
    assert!(e.contains("name \"a/b\" must be letters"), "{e}");
    let e = check(
        "[[trace]]\nname = \"a\"\n[[trace]]\nname = \"a\"\n[[stack]]\nname = \"s\"\n[[disk]]\nname = \"d\"\n",
    );
    assert!(e.contains("two [[trace]] entries are named \"a\""), "{e}");
}
