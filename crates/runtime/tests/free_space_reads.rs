//! `layoutd free-space` brings the stack up once: its scan runs over the
//! recording overlay before anything is written, so the dry run's
//! answer (a file system error writes nothing) costs no second bring-up.
//! Before session 30 it brought the stack up twice (a dry run over an
//! overlay, then the real pass), reading a log's map area twice.
//! Counted with the process's own read counter (`rchar` in
//! /proc/self/io), as `bringup_reads.rs` counts an open's, so this file
//! holds one test: no other thread reads meanwhile.

use layoutd_core::config::StackConfig;
use layoutd_core::Status;
use layoutd_runtime::det::{Harness, ZeroLatency};
use layoutd_runtime::volume::{self, FormatOptions};
use std::path::PathBuf;
use std::process::Command;

mod rchar;
use rchar::read_by;

/// The free-space scan's error in the statuses (as `layoutd free-space`
/// reads it).
fn scan_error(st: &[Status]) -> Option<String> {
    st.iter().flat_map(|s| s.config.iter()).find(|c| c.0 == "fs_scan_error").map(|c| c.1.clone())
}

fn counter(st: &[Status], name: &str) -> u64 {
    st.iter().flat_map(|s| s.counters.iter()).find(|c| c.0 == name).map_or(0, |c| c.1)
}

#[test]
fn free_space_brings_the_stack_up_once() {
    if Command::new("mkfs.ext4").arg("-V").output().is_err() {
        eprintln!("e2fsprogs not installed: skipped");
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("replica-over-log");
    std::fs::File::create(&path).and_then(|f| f.set_len(1 << 30)).expect("device file");
    let paths: Vec<PathBuf> = vec![path];
    let toml = "version = 1\n[[layer]]\ntarget = \"replica\"\n[[layer]]\ntarget = \"log\"\n";
    let cfg = StackConfig::parse(toml, "test").expect("config");
    volume::format(&paths, &cfg, &FormatOptions { uuid: [7; 16], ..FormatOptions::default() })
        .expect("format");

    // A volume without a file system: the scan's error, nothing written.
    let before = std::fs::read(&paths[0]).expect("read");
    let refused =
        volume::drain_checked(&paths, "free-space", &scan_error).expect("opens").expect_err("no file system");
    assert!(refused.contains("no ext2/3/4 superblock"), "{refused}");
    assert!(std::fs::read(&paths[0]).expect("read") == before, "a refused scan writes nothing");

    // An ext4 made on a side file, written through the stack (its
    // non-zero blocks).
    let vol = volume::open(&paths, false).expect("open");
    let side = dir.path().join("side.img");
    std::fs::File::create(&side).and_then(|f| f.set_len(vol.stack.size_bytes())).expect("side file");
    let st = Command::new("mkfs.ext4").args(["-q", "-F"]).arg(&side).status().expect("mkfs.ext4");
    assert!(st.success());
    let fs = std::fs::read(&side).expect("side");
    let members = vol.members;
    let mut h = Harness::new(vol.stack, vol.data, ZeroLatency::default(), 0);
    for (i, b) in fs.chunks(4096).enumerate().filter(|(_, b)| b.iter().any(|&x| x != 0)) {
        assert_eq!(h.write(i as u64 * 4096, b.to_vec()).result, Ok(()));
    }
    assert_eq!(h.flush().result, Ok(()));
    h.settle();
    drop(h);
    volume::mark_clean(&members).expect("mark clean");
    drop(members);

    // Twice, so the second finds the first one's writes as any later
    // run does.
    for round in 0..2 {
        let (inspected, once) = read_by(|| volume::inspect_stack(&paths));
        inspected.expect("inspect");
        let (done, scanned) = read_by(|| volume::drain_checked(&paths, "free-space", &scan_error));
        let (_, statuses) = done.expect("opens").expect("an ext4 to scan");
        let declared = counter(&statuses, "fs_scan_declared_blocks");
        let found = counter(&statuses, "fs_scan_free_blocks");
        eprintln!("free-space, round {round}: inspect read {once} bytes, free-space {scanned}; {found} free, {declared} declared");
        assert!(found > 0 && (round > 0 || declared > 0), "round {round}: the scan found free blocks");
        assert!(once > 256 << 10, "one bring-up reads the stack's metadata ({once} bytes)");
        // The scan reads the file system's superblock, descriptors and
        // bitmaps too (about 100 KiB here), and the open the superblocks.
        assert!(
            scanned < once * 3 / 2,
            "round {round}: free-space read {scanned} bytes, one bring-up reads {once}: the stack was brought \
             up more than once"
        );
    }
}
