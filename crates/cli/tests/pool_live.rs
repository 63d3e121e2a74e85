//! The `pool` target served for real: named exports for qemu-io and
//! nbdcopy, snapshot commands offline and online, and ext4 on the origin
//! with a snapshot taken online while files are being written.

mod common;
use common::*;
use std::path::Path;
use std::process::{Child, Command};
use std::time::Duration;

const POOL: &str = r#"version = 1
[[layer]]
target = "pool"
chunk_size = "64KiB"
volumes_max = 4
copy_share_percent = 40
"#;

fn snapshot(args: &[&str]) -> String {
    let o = layoutd().arg("snapshot").args(args).output().unwrap();
    assert!(o.status.success(), "layoutd snapshot {args:?}: {}", text(&o));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn named_exports_serve_each_volume_to_qemu_io_and_nbdcopy() {
    if !(require("nbdkit plugin", plugin_built()) && tools(&["nbdkit", "qemu-io", "nbdcopy", "nbdinfo"])) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let dev = formatted(dir.path(), "p.img", "96M", Some(POOL));
    let d = dev.to_str().unwrap();
    // Offline: data first, then a read-only snapshot of it.
    let out = serve_run(&dev, "qemu-io -f raw -c 'write -P 0x11 0 256k' \"$uri\"", &[]);
    assert!(out.status.success(), "{}", text(&out));
    snapshot(&["create", "--device", d, "before", "--ro"]);
    let list = snapshot(&["list", "--device", d]);
    assert!(list.contains("before slot=1") && list.contains("mode=ro"), "{list}");
    let refused = layoutd().args(["snapshot", "delete", "--device", d, "origin"]).output().unwrap();
    assert!(!refused.status.success() && text(&refused).contains("origin cannot be deleted"));
    // Online: list the exports, write the origin, snapshot it online,
    // write again, and read each export back.
    let run = r#"set -e
S="nbd+unix:///before?socket=$unixsocket"
qemu-io -f raw -c 'write -P 0x22 0 64k' "$uri"
layoutd snapshot create --socket "$unixsocket" online
qemu-io -f raw -c 'write -P 0x33 0 4k' "$uri"
qemu-io -f raw -r -c 'read -P 0x11 0 256k' "$S"
qemu-io -f raw -r -c 'read -P 0x22 0 64k' -c 'read -P 0x11 64k 192k' "nbd+unix:///online?socket=$unixsocket"
qemu-io -f raw -c 'read -P 0x33 0 4k' -c 'read -P 0x22 4k 60k' "$uri"
nbdcopy "$S" before.raw
if qemu-io -f raw -c 'write -P 1 0 4k' "$S" 2>/dev/null; then echo WROTE-RO; exit 1; fi
nbdinfo --list "$uri" | grep -c '^export=' > exports.txt
"#;
    let path = format!("{}:{}", std::env::var("PATH").unwrap_or_default(), layoutd_dir());
    let o = Command::new(env!("CARGO_BIN_EXE_layoutd"))
        .args(["serve", "--device", d, "--run", run])
        .current_dir(dir.path())
        .env("PATH", path)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(std::fs::read_to_string(dir.path().join("exports.txt")).unwrap().trim(), "3");
    let copied = std::fs::read(dir.path().join("before.raw")).unwrap();
    assert!(copied[..256 << 10].iter().all(|&b| b == 0x11), "nbdcopy of the snapshot export");
    assert!(copied[256 << 10..].iter().all(|&b| b == 0), "never written: zeroes");
}

fn layoutd_dir() -> String {
    Path::new(env!("CARGO_BIN_EXE_layoutd")).parent().unwrap().display().to_string()
}

/// A named export attached as a loop device (nbdfuse on its URI).
struct Attached {
    fuse_dir: std::path::PathBuf,
    fuse: Child,
    loop_dev: String,
}

impl Attached {
    fn new(uri: &str, dir: &Path) -> Attached {
        std::fs::create_dir_all(dir).unwrap();
        let file = dir.join("nbd");
        let mut fuse = Command::new("nbdfuse").arg(&file).arg(uri).spawn().unwrap();
        assert!(wait_for_path(&file, Some(&mut fuse)), "nbdfuse did not expose {}", file.display());
        let loop_dev = sh_ok(&format!("losetup -f --show '{}'", file.display())).trim().to_string();
        Attached { fuse_dir: dir.to_path_buf(), fuse, loop_dev }
    }
}

impl Drop for Attached {
    fn drop(&mut self) {
        let _ = sh(&format!("losetup -d {}", self.loop_dev));
        let _ = sh(&format!(
            "fusermount3 -u '{}' || fusermount3 -uz '{}'",
            self.fuse_dir.display(),
            self.fuse_dir.display()
        ));
        let _ = self.fuse.kill();
        let _ = self.fuse.wait();
    }
}

#[test]
fn ext4_snapshot_taken_online_during_writes_is_consistent_and_the_origin_moves_on() {
    if !block_rig_available() {
        return;
    }
    // The default (the origin's shared writes redirected), then copy-out.
    ext4_snapshot_online(POOL);
    ext4_snapshot_online(&format!("{POOL}origin_shared_write = \"copy-out\"\n"));
}

fn ext4_snapshot_online(config: &str) {
    let dir = tempfile::tempdir().unwrap();
    let dev = formatted(dir.path(), "e.img", "320M", Some(config));
    let mut rig = BlockRig::start(&dev, dir.path());
    rig.mkfs();
    rig.mount();
    let before = write_tree(&rig.mnt.join("a"), 120, 3);
    sh_ok("sync");
    let root = rig.mnt.join("b");
    let writer = std::thread::spawn(move || write_tree(&root, 500, 5));
    let b = rig.mnt.join("b");
    for _ in 0..6000 {
        let n = sh(&format!("find '{}' -type f 2>/dev/null | wc -l", b.display()));
        if String::from_utf8_lossy(&n.stdout).trim().parse::<u64>().unwrap_or(0) >= 100
            || writer.is_finished()
        {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(!writer.is_finished(), "the writes ended before the snapshot; make them longer");
    let sock = rig.server.as_ref().unwrap().socket.clone();
    snapshot(&["create", "--socket", sock.to_str().unwrap(), "live"]);
    let during = writer.join().unwrap();
    let after = write_tree(&rig.mnt.join("c"), 40, 7);
    sh_ok("sync");
    // The snapshot (writable): mounting replays its journal, then e2fsck -fn
    // finds it clean, and read-only it holds what was synced before it.
    {
        let uri = format!("nbd+unix:///live?socket={}", sock.display());
        let snap = Attached::new(&uri, &dir.path().join("snapfuse"));
        let mnt = dir.path().join("snapmnt");
        std::fs::create_dir_all(&mnt).unwrap();
        sh_ok(&format!("mount {} '{}' && umount '{}'", snap.loop_dev, mnt.display(), mnt.display()));
        let fsck = sh(&format!("e2fsck -fn {}", snap.loop_dev));
        assert!(fsck.status.success(), "the snapshot's file system:\n{}", text(&fsck));
        sh_ok(&format!("mount -o ro {} '{}'", snap.loop_dev, mnt.display()));
        verify_tree(&mnt.join("a"), &before);
        assert!(!mnt.join("c").exists(), "files written after the snapshot are not in it");
        sh_ok(&format!("umount '{}'", mnt.display()));
    }
    // The origin kept changing.
    verify_tree(&rig.mnt.join("b"), &during);
    verify_tree(&rig.mnt.join("c"), &after);
    rig.umount();
    rig.fsck();
}
