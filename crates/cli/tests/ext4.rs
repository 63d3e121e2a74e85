//! A real file system on a layoutd volume: serve → nbdfuse → losetup →
//! mkfs.ext4 → mount → write a tree → umount → e2fsck -fn clean → remount →
//! every checksum matches.

mod common;
use common::*;

fn ext4_round_trip(config: Option<&str>, name: &str) {
    if !block_rig_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let dev = formatted(dir.path(), name, "257M", config);
    let mut rig = BlockRig::start(&dev, dir.path());
    rig.mkfs();
    rig.mount();
    let files = write_tree(&rig.mnt, 300, 7);
    rig.umount();
    let report = rig.fsck();
    eprintln!("{report}");
    rig.mount();
    verify_tree(&rig.mnt, &files);
    rig.umount();
    drop(rig);
    let o = layoutd().args(["inspect", "--json", "--device"]).arg(&dev).output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["clean"], true, "serve did not shut down cleanly");
}

#[test]
fn ext4_on_a_linear_volume_fscks_clean_and_keeps_every_file() {
    ext4_round_trip(None, "lin.img");
}

#[test]
fn ext4_on_a_trace_over_linear_volume_fscks_clean_and_keeps_every_file() {
    ext4_round_trip(
        Some("version = 1\n[[layer]]\ntarget = \"trace\"\n[[layer]]\ntarget = \"linear\"\n"),
        "trace.img",
    );
}
