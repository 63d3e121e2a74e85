//! A volume that spans two devices: a physical DCD (log on the first, data
//! on the second), served, destaged, inspected; and the member mistakes a
//! user can make, each refused in one line with every device untouched.

mod common;
use common::*;
use layoutd_core::superblock::{Superblock, SUPERBLOCK_BYTES};
use std::io::Read;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

const PHYSICAL_DCD: &str = "version = 1\n[[layer]]\ntarget = \"dcd\"\nlog_device = 0\ndata_device = 1\n";

fn two_members(dir: &Path) -> (PathBuf, PathBuf) {
    let (a, b) = (dir.join("log.img"), dir.join("data.img"));
    // The shipped example, as it is.
    let cfg = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/dcd-physical.toml"));
    std::fs::File::create(&a).unwrap().set_len(17 << 20).unwrap();
    std::fs::File::create(&b).unwrap().set_len(65 << 20).unwrap();
    let out = layoutd()
        .args(["format", "--device"])
        .arg(&a)
        .arg("--device")
        .arg(&b)
        .arg("--config")
        .arg(&cfg)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    (a, b)
}

fn inspect(devs: &[&Path]) -> serde_json::Value {
    let mut c = layoutd();
    c.args(["inspect", "--json"]);
    for d in devs {
        c.arg("--device").arg(d);
    }
    let o = c.output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
    serde_json::from_slice(&o.stdout).unwrap()
}

fn counter(v: &serde_json::Value, name: &str) -> u64 {
    let c = v["layers"][0]["counters"].as_array().unwrap();
    c.iter().find(|x| x[0] == name).unwrap()[1].as_u64().unwrap()
}

#[test]
fn a_physical_dcd_logs_on_one_device_and_destages_to_the_other() {
    if !(require("nbdkit plugin", plugin_built())
        && require("`nbdkit`", have_cmd("nbdkit"))
        && require("`qemu-io`", have_cmd("qemu-io")))
    {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = two_members(dir.path());
    let v = inspect(&[&a, &b]);
    assert_eq!(v["member_count"], 2);
    assert_eq!(v["volume_size_bytes"], 64u64 << 20, "the volume is the data member");
    let run = "qemu-io -f raw -t writeback -c 'write -P 0x41 0 8k' -c 'write -P 0x42 4M 128k' -c 'read -P 0x41 0 8k' -c 'flush' \"$uri\"";
    let out = layoutd()
        .args(["serve", "--emulate", "wd800", "--device"])
        .arg(&a)
        .arg("--device")
        .arg(&b)
        .arg("--socket")
        .arg(dir.path().join("s.sock"))
        .args(["--run", run])
        .output()
        .unwrap();
    assert!(out.status.success() && !text(&out).contains("verification failed"), "{}", text(&out));
    let before = inspect(&[&a, &b]);
    assert!(
        counter(&before, "dirty_segments_count") > 0,
        "the small write is in the log on the first device"
    );
    let out = layoutd().args(["destage", "--device"]).arg(&a).arg("--device").arg(&b).output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let after = inspect(&[&a, &b]);
    assert_eq!(counter(&after, "dirty_segments_count"), 0);
    // The second device alone is now a plain disk holding both writes.
    let raw = std::fs::read(&b).unwrap();
    let data = 1 << 20;
    assert!(raw[data..data + 8192].iter().all(|&x| x == 0x41), "the destaged small write");
    assert!(
        raw[data + (4 << 20)..data + (4 << 20) + 131072].iter().all(|&x| x == 0x42),
        "the bypassed large write"
    );
}

fn refused(args: &[&str], devs: &[&Path], needles: &[&str]) {
    let before: Vec<u32> = devs.iter().map(|d| crc32c::crc32c(&std::fs::read(d).unwrap())).collect();
    let out = layoutd().args(args).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{args:?} succeeded");
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "{args:?}: expected one line:\n{stderr}");
    for n in needles {
        assert!(lines[0].contains(n), "{:?} lacks {n:?}", lines[0]);
    }
    let after: Vec<u32> = devs.iter().map(|d| crc32c::crc32c(&std::fs::read(d).unwrap())).collect();
    assert_eq!(before, after, "{args:?} modified a device");
}

#[test]
fn missing_reordered_foreign_and_user_written_members_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = two_members(dir.path());
    let (sa, sb_path) = (a.to_str().unwrap(), b.to_str().unwrap());
    refused(
        &["serve", "--dry-run", "--device", sa],
        &[&a, &b],
        &["log.img", "spans 2 devices", "member 1 is missing"],
    );
    refused(
        &["serve", "--dry-run", "--device", sb_path, "--device", sa],
        &[&a, &b],
        &["data.img", "is member 1", "order"],
    );
    refused(&["destage", "--device", sa], &[&a, &b], &["spans 2 devices"]);
    let other = dir.path().join("other");
    std::fs::create_dir(&other).unwrap();
    let (c, _) = two_members(&other);
    let sc = c.to_str().unwrap();
    refused(&["inspect", "--device", sa, "--device", sc], &[&a, &c], &["belongs to another volume"]);
    // Member 0's superblock listing member 1 larger than member 1's own
    // superblock says (crc valid): the stack would be built over bytes
    // member 1 does not have.
    let mut head = vec![0u8; 2 * SUPERBLOCK_BYTES];
    std::fs::File::open(&a).unwrap().read_exact(&mut head).unwrap();
    let mut sb = Superblock::decode(&head).unwrap();
    sb.config.device[1].size_bytes += 64 << 20;
    sb.generation += 1;
    let at = Superblock::copy_offset_bytes(sb.generation);
    std::fs::OpenOptions::new()
        .write(true)
        .open(&a)
        .unwrap()
        .write_all_at(&sb.encode().unwrap(), at)
        .unwrap();
    refused(
        &["serve", "--dry-run", "--device", sa, "--device", sb_path],
        &[&a, &b],
        &["data.img", "own superblock says", "refusing"],
    );
    let cfg = dir.path().join("user.toml");
    std::fs::write(&cfg, format!("{PHYSICAL_DCD}[[device]]\nsize_bytes = 1\n")).unwrap();
    let fresh = dir.path().join("fresh.img");
    std::fs::File::create(&fresh).unwrap().set_len(8 << 20).unwrap();
    refused(
        &["format", "--device", fresh.to_str().unwrap(), "--config", cfg.to_str().unwrap()],
        &[&fresh],
        &["[[device]]", "written by `format`"],
    );
}
