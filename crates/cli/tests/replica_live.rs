//! The `replica` target served for real under ext4: free space from
//! mkfs's discard, `fstrim` and the bitmap reader; repeated reads of many
//! small files replicate and are then served from replicas, across a clean
//! restart (snapshot); every file's checksum is right and `e2fsck -fn` is
//! clean after a clean stop and after a SIGKILL. `layoutd free-space`
//! refuses a volume without a file system in one line.

mod common;
use common::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

const REPLICA: &str = r#"version = 1
[[layer]]
target = "replica"
free_extent_blocks_min = 256
reclaim_range_blocks = 256
reclaim_candidates_min = 128
"#;

/// [`BlockRig::start`] with the server's stderr (where its final status
/// goes) in `log`.
fn start_rig(dev: &Path, work: &Path, log: &Path) -> BlockRig {
    std::fs::create_dir_all(work).unwrap();
    let socket = dev.with_extension("sock");
    let _ = std::fs::remove_file(&socket);
    let child = layoutd()
        .args(["serve", "--device"])
        .arg(dev)
        .arg("--socket")
        .arg(&socket)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .unwrap();
    assert!(
        wait_for_path(&socket, None),
        "serve did not start: {}",
        std::fs::read_to_string(log).unwrap_or_default()
    );
    let fuse_dir = work.join("fuse");
    let mnt = work.join("mnt");
    std::fs::create_dir_all(&fuse_dir).unwrap();
    std::fs::create_dir_all(&mnt).unwrap();
    let mut rig = BlockRig {
        server: Some(Server { child, socket: socket.clone() }),
        fuse_dir,
        fuse: None,
        loop_dev: None,
        mnt,
        mounted: false,
    };
    let file = rig.fuse_dir.join("nbd");
    rig.fuse = Some(Command::new("nbdfuse").arg(&file).arg("--unix").arg(&socket).spawn().unwrap());
    assert!(wait_for_path(&file, rig.fuse.as_mut()), "nbdfuse did not expose {}", file.display());
    let out = sh_ok(&format!("losetup -f --show --direct-io=on '{}'", file.display()));
    rig.loop_dev = Some(out.trim().to_string());
    rig
}

/// The server's final status line in `log`.
fn final_status(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap();
    text.lines()
        .rev()
        .find(|l| l.contains("final status:"))
        .unwrap_or_else(|| panic!("no final status in {text}"))
        .to_string()
}

/// A counter from the server's final status line in `log`.
fn final_counter(log: &Path, key: &str) -> u64 {
    let line = final_status(log);
    let kv = line
        .split(' ')
        .find_map(|w| w.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("no {key}"));
    kv.parse().unwrap()
}

/// Reads every file in a fixed scattered order (a repeated pattern).
fn read_scattered(root: &Path, files: &[(PathBuf, u32)]) {
    let n = files.len();
    for i in 0..n {
        let (rel, crc) = &files[(i * 7919) % n];
        let data = std::fs::read(root.join(rel)).unwrap();
        assert_eq!(crc32c::crc32c(&data), *crc, "{}", rel.display());
    }
}

fn remount_cold(rig: &mut BlockRig) {
    rig.umount();
    sh_ok("sync; echo 3 > /proc/sys/vm/drop_caches");
    rig.mount();
}

#[test]
fn ext4_on_replica_reads_from_replicas_across_a_clean_restart_and_survives_sigkill() {
    if !(block_rig_available() && require("`fstrim`", have_cmd("fstrim"))) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let dev = formatted(dir.path(), "r.img", "256M", Some(REPLICA));
    let log = |n: u32| dir.path().join(format!("serve{n}.log"));
    // 1. mkfs (discards the device), files, fstrim, two cold rounds of the pattern.
    let mut rig = start_rig(&dev, &dir.path().join("w1"), &log(1));
    rig.mkfs();
    rig.mount();
    let files = write_tree(&rig.mnt.join("a"), 600, 7);
    sh_ok(&format!("sync; fstrim '{}'", rig.mnt.display()));
    for _ in 0..2 {
        remount_cold(&mut rig);
        read_scattered(&rig.mnt.join("a"), &files);
    }
    rig.umount();
    drop(rig);
    eprintln!("run 1: {}", final_status(&log(1)));
    for key in ["discards_count", "replicas_created_blocks", "reads_replica_count", "queues_committed_count"]
    {
        let v = final_counter(&log(1), key);
        eprintln!("run 1: {key}={v}");
        assert!(v > 0, "{key} = 0 in run 1");
    }
    let v = inspect_json(&dev);
    assert_eq!(v["clean"], true);
    let kept = top_counter(&v, "replica_blocks");
    assert!(kept > 0, "the replicas were saved at the clean stop");
    // 2. Clean restart: the bitmap reader runs in idle time before the
    // mount, the replicas come back and serve the pattern.
    let mut rig = start_rig(&dev, &dir.path().join("w2"), &log(2));
    std::thread::sleep(Duration::from_millis(500));
    rig.mount();
    read_scattered(&rig.mnt.join("a"), &files);
    rig.umount();
    let report = rig.fsck();
    eprintln!("{report}");
    drop(rig);
    let status = std::fs::read_to_string(log(2)).unwrap();
    assert!(!status.contains("fs_scan_error"), "the bitmap reader read the unmounted ext4: {status}");
    for key in ["snapshot_loaded_blocks", "reads_replica_count", "fs_scan_runs_count", "fs_scan_free_blocks"]
    {
        let v = final_counter(&log(2), key);
        eprintln!("run 2: {key}={v}");
        assert!(v > 0, "{key} = 0 after the clean restart");
    }
    // 3. SIGKILL during reads and writes; then every synced file is right.
    let mut rig = start_rig(&dev, &dir.path().join("w3"), &log(3));
    rig.mount();
    let more = write_tree(&rig.mnt.join("b"), 150, 9);
    sh_ok("sync");
    read_scattered(&rig.mnt.join("a"), &files);
    let _ = write_tree(&rig.mnt.join("c"), 100, 11);
    rig.server.as_mut().unwrap().kill();
    rig.detach();
    drop(rig);
    assert_eq!(inspect_json(&dev)["clean"], false);
    let mut rig = start_rig(&dev, &dir.path().join("w4"), &log(4));
    rig.mount();
    verify_tree(&rig.mnt.join("a"), &files);
    verify_tree(&rig.mnt.join("b"), &more);
    read_scattered(&rig.mnt.join("a"), &files);
    rig.umount();
    let report = rig.fsck();
    eprintln!("{report}");
    drop(rig);
    assert_eq!(final_counter(&log(4), "snapshot_loaded_blocks"), 0, "never a snapshot after an unclean stop");
}

#[test]
fn free_space_refuses_a_volume_without_a_file_system_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let dev = formatted(dir.path(), "n.img", "64M", Some(REPLICA));
    let before = std::fs::read(&dev).unwrap();
    let o = layoutd().args(["free-space", "--device"]).arg(&dev).output().unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("no ext2/3/4 superblock") && err.contains("nothing written"), "{err}");
    assert!(std::fs::read(&dev).unwrap() == before, "nothing written");
}

/// A replica volume of `size` whose volume holds a fresh ext4 (made on a
/// side file, optionally with group 0's block bitmap damaged, then copied
/// in at the data area); `None` without e2fsprogs.
fn ext4_volume(dir: &Path, size: &str, damage: bool) -> Option<PathBuf> {
    ext4_volume_with(dir, size, damage, 4096)
}

/// [`ext4_volume`] whose ext4 has `fs_block_bytes` blocks.
fn ext4_volume_with(dir: &Path, size: &str, damage: bool, fs_block_bytes: usize) -> Option<PathBuf> {
    if !(have_cmd("mkfs.ext4") && have_cmd("dumpe2fs")) {
        eprintln!("e2fsprogs not installed: skipped");
        return None;
    }
    let dev = formatted(dir, "e.img", size, Some(REPLICA));
    let volume = inspect_json(&dev)["volume_size_bytes"].as_u64().unwrap();
    let side = dir.join("side.img");
    std::fs::File::create(&side).unwrap().set_len(volume).unwrap();
    sh_ok(&format!("mkfs.ext4 -q -F -b {fs_block_bytes} '{}'", side.display()));
    let mut fs = std::fs::read(&side).unwrap();
    if damage {
        let info = sh_ok(&format!("dumpe2fs '{}' 2>/dev/null", side.display()));
        let at = info.lines().find_map(|l| l.trim().strip_prefix("Block bitmap at ")).expect("a bitmap");
        let block: usize = at.split(|c: char| !c.is_ascii_digit()).next().unwrap().parse().unwrap();
        fs[block * fs_block_bytes + 3] ^= 0x10;
    }
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new().write(true).open(&dev).unwrap();
    f.write_all_at(&fs, 1 << 20).unwrap(); // the data area starts after the 1 MiB header
    Some(dev)
}

#[test]
fn free_space_reads_an_unmounted_ext4_and_refuses_a_corrupt_bitmap_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let Some(dev) = ext4_volume(dir.path(), "96M", false) else { return };
    let o = layoutd().args(["free-space", "--device"]).arg(&dev).output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("free block(s) declared"));
    let v = inspect_json(&dev);
    assert_eq!(v["clean"], true);
    assert!(top_counter(&v, "declared_free_blocks") > 10_000, "the free map was saved (snapshot): {v}");
    let dir = tempfile::tempdir().unwrap();
    let Some(dev) = ext4_volume(dir.path(), "96M", true) else { return };
    let before = std::fs::read(&dev).unwrap();
    let o = layoutd().args(["free-space", "--device"]).arg(&dev).output().unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("checksum") && err.contains("nothing written"), "{err}");
    assert!(std::fs::read(&dev).unwrap() == before, "nothing written");
}

#[test]
fn free_space_on_an_ext4_of_smaller_blocks_says_why_its_reads_pass_through() {
    let dir = tempfile::tempdir().unwrap();
    let Some(dev) = ext4_volume_with(dir.path(), "96M", false, 1024) else { return };
    let o = layoutd().args(["free-space", "--device"]).arg(&dev).output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("fs_block_bytes=1024"), "{out}");
    assert!(out.contains("fs_block_note=") && out.contains("block_bytes = 1024"), "{out}");
    let dir = tempfile::tempdir().unwrap();
    let Some(dev) = ext4_volume(dir.path(), "96M", false) else { return };
    let o = layoutd().args(["free-space", "--device"]).arg(&dev).output().unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("fs_block_bytes=4096") && !out.contains("fs_block_note"), "{out}");
}
