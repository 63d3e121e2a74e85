//! The `log` target served for real: ext4 mounted with `-o discard` on a
//! log small enough that the workload wraps it (so cleaning or SSR reuse
//! space), a SIGKILL of the server mid-write, recovery on the next open,
//! every file written before the last sync intact, and `e2fsck -fn` clean.

mod common;
use common::*;

const LOG: &str = r#"version = 1
[[layer]]
target = "log"
segment_bytes = "256KiB"
over_provision_pct = 15
policy = "adaptive"
checkpoint_segments = 32
"#;

#[test]
fn ext4_with_discard_on_log_survives_an_unclean_kill_mid_write() {
    if !block_rig_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let dev = formatted(dir.path(), "l.img", "80M", Some(LOG));
    let mut rig = BlockRig::start(&dev, dir.path());
    rig.mkfs();
    sh_ok(&format!("mount -o discard {} '{}'", rig.loop_dev(), rig.mnt.display()));
    rig.mounted = true;
    let durable = write_tree(&rig.mnt.join("a"), 120, 3);
    // Churn: write and delete (discarded) more than the log holds, so its
    // space comes back through cleaning or SSR.
    for round in 0..4 {
        let _ = write_tree(&rig.mnt.join("churn"), 200, 10 + round);
        sh_ok("sync");
        sh_ok(&format!("rm -rf '{}'", rig.mnt.join("churn").display()));
        sh_ok("sync");
    }
    sh_ok("sync");
    // A write-heavy phase, killed in the middle.
    let root = rig.mnt.join("b");
    let writer = std::thread::spawn(move || {
        let _ = std::panic::catch_unwind(|| write_tree(&root, 2000, 5));
    });
    let b = rig.mnt.join("b");
    for _ in 0..6000 {
        let written = sh(&format!("find '{}' -type f 2>/dev/null | wc -l", b.display()));
        let n: u64 = String::from_utf8_lossy(&written.stdout).trim().parse().unwrap_or(0);
        if n >= 150 || writer.is_finished() {
            eprintln!("killing the server with {n} files of the second phase written");
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(!writer.is_finished(), "the workload ended before the kill; make it longer");
    rig.server.as_mut().unwrap().kill();
    rig.detach();
    let _ = writer.join();
    drop(rig);
    let after_kill = inspect_json(&dev);
    assert_eq!(after_kill["clean"], false, "a killed server leaves the device dirty");
    eprintln!("after the kill: {}", after_kill["layers"][0]);
    // The log wrapped: more segments written than it has, so space was reused.
    let (seq, segments) = (top_counter(&after_kill, "next_seq"), top_counter(&after_kill, "segment_count"));
    assert!(seq > segments, "the workload should wrap the log: next_seq {seq}, {segments} segments");
    assert!(top_counter(&after_kill, "recovered_segments_count") > 0, "recovery rolled forward");
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
