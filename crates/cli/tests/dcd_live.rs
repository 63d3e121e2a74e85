//! The `dcd` target served for real: offline destage leaves a plain disk,
//! and ext4 survives an unclean kill of the server mid-write.

mod common;
use common::*;

const DCD: &str = r#"version = 1
[[layer]]
target = "dcd"
log_length = "32MiB"
"#;

use common::inspect_json as inspect;
use common::top_counter as dcd_counter;

#[test]
fn destage_drains_the_log_and_leaves_a_plain_data_region() {
    if !(require("nbdkit plugin", plugin_built())
        && require("`qemu-io`", have_cmd("qemu-io"))
        && require("`nbdkit`", have_cmd("nbdkit")))
    {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let dev = formatted(dir.path(), "d.img", "96M", Some(DCD));
    let run =
        "qemu-io -f raw -t writeback -c 'write -P 0x37 0 16k' -c 'write -P 0x38 1M 4k' -c 'flush' \"$uri\"";
    let out = serve_run(&dev, run, &[]);
    assert!(out.status.success(), "{}", text(&out));
    let before = inspect(&dev);
    assert!(
        dcd_counter(&before, "dirty_segments_count") > 0,
        "the small writes should be in the log: {before}"
    );
    let out = layoutd().args(["destage", "--device"]).arg(&dev).output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let after = inspect(&dev);
    assert_eq!(dcd_counter(&after, "dirty_segments_count"), 0);
    assert_eq!(dcd_counter(&after, "log_utilization_pct"), 0);
    assert_eq!(after["clean"], true);
    // The data region alone (device offset 1 MiB header + 32 MiB log) now holds the writes.
    let raw = std::fs::read(&dev).unwrap();
    let data = (1 << 20) + (32 << 20);
    assert!(raw[data..data + 16384].iter().all(|&b| b == 0x37));
    assert!(raw[data + (1 << 20)..data + (1 << 20) + 4096].iter().all(|&b| b == 0x38));
}

#[test]
fn ext4_on_dcd_survives_an_unclean_kill_mid_write() {
    if !block_rig_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let dev = formatted(dir.path(), "k.img", "289M", Some(DCD));
    let mut rig = BlockRig::start(&dev, dir.path());
    rig.mkfs();
    rig.mount();
    let durable = write_tree(&rig.mnt.join("a"), 150, 3);
    sh_ok("sync");
    // A write-heavy phase, killed once it is well under way.
    let b = rig.mnt.join("b");
    kill_mid_write(&mut rig, b, 5, 300, "dcd");
    drop(rig);
    assert_eq!(inspect(&dev)["clean"], false, "a killed server leaves the device dirty");
    // Recovery on open, then the journal replays on mount.
    let second = dir.path().join("after-crash");
    std::fs::create_dir_all(&second).unwrap();
    let mut rig = BlockRig::start(&dev, &second);
    rig.mount();
    verify_tree(&rig.mnt.join("a"), &durable);
    rig.umount();
    let report = rig.fsck();
    eprintln!("{report}");
}
