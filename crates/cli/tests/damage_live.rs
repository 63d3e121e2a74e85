//! Issue 9, item 2, reproduced live: a dcd volume is written through NBD
//! and flushed, the server is killed, and one segment in the middle of the
//! log is damaged. `serve` used to cut the log short there and serve old
//! data for hundreds of flushed writes, exit 0, marking the volume clean.
//! Now it refuses, naming the segment and its offset, and changes nothing;
//! `--accept-loss` serves it anyway.

mod common;
use common::*;

/// Nothing destages during the test: the log holds every write.
const DCD: &str = r#"version = 1
[[layer]]
target = "dcd"
log_length = "16MiB"
idle_ms_max = 600000
idle_ms_min = 600000
"#;

/// Bytes before the dcd log on the device (the superblock area).
const DATA_START: u64 = 1 << 20;

#[test]
fn a_damaged_segment_before_flushed_ones_is_refused_by_name_and_accept_loss_serves_it() {
    if !(require("nbdkit plugin", plugin_built())
        && require("`qemu-io`", have_cmd("qemu-io"))
        && require("`nbdkit`", have_cmd("nbdkit")))
    {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let dev = formatted(dir.path(), "dmg.img", "64M", Some(DCD));
    let mut server = Server::start(&dev);
    // 400 4 KiB writes (logged: below bypass_bytes), then a flush.
    let mut cmds = String::new();
    for i in 0..400u64 {
        cmds.push_str(&format!(" -c 'write -P {} {} 4k'", i % 200 + 1, (i * 7919 % 8192) * 4096));
    }
    let out = sh(&format!("qemu-io -t writeback -f raw{cmds} -c flush '{}'", server.uri()));
    assert!(out.status.success(), "qemu-io: {}", text(&out));
    server.kill();
    // The default geometry: 128 KiB segments of 32 slots behind a 1536-byte
    // header; the log starts after two 4 KiB checkpoint copies.
    let geo = layoutd_targets::seglog::Geometry::new(0, 16 << 20, 4096, 32).unwrap();
    let loc = layoutd_targets::seglog::SegLoc(3);
    let at = DATA_START + geo.slot_offset_bytes(loc, 5);
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new().write(true).open(&dev).unwrap();
        f.write_at(&[0xA5; 64], at).unwrap();
    }
    let before = std::fs::read(&dev).unwrap();
    let out = serve_run(&dev, "true", &[]);
    let msg = text(&out);
    assert!(!out.status.success(), "a damaged log was served: {msg}");
    let lower = geo.segment_offset_bytes(loc);
    for needle in ["damaged", "segment 3 (seq 3)", &format!("lower offset {lower}"), "--accept-loss"] {
        assert!(msg.contains(needle), "the refusal lacks {needle:?}: {msg}");
    }
    assert!(std::fs::read(&dev).unwrap() == before, "a refused open changed the device");
    // Accepting the loss serves it, and says what was given up.
    let out = serve_run(&dev, "qemu-io -f raw -c 'read 0 4k' \"$uri\"", &["--accept-loss"]);
    assert!(out.status.success(), "--accept-loss: {}", text(&out));
    let o = layoutd().args(["inspect", "--json", "--device"]).arg(&dev).output().unwrap();
    assert!(o.status.success(), "inspect: {}", text(&o));
}
