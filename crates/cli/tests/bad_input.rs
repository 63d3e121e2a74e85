//! Bad input ends with one clear line naming the problem, a non-zero exit,
//! and the device untouched.

mod common;

use common::layoutd;
use std::path::{Path, PathBuf};

fn device(dir: &Path, name: &str, bytes: u64) -> PathBuf {
    let p = dir.join(name);
    std::fs::File::create(&p).unwrap().set_len(bytes).unwrap();
    p
}

fn digest(p: &Path) -> u32 {
    crc32c::crc32c(&std::fs::read(p).unwrap())
}

/// Runs layoutd, expects failure with exactly one stderr line containing
/// every one of `needles`, and the device byte-identical afterwards.
fn refused(args: &[&str], dev: &Path, needles: &[&str]) {
    let before = digest(dev);
    common::refused_line(args, needles);
    assert_eq!(digest(dev), before, "{args:?} modified the device");
}

fn config(dir: &Path, text: &str) -> String {
    let p = dir.join("stack.toml");
    std::fs::write(&p, text).unwrap();
    p.to_str().unwrap().to_string()
}

#[test]
fn bad_configs_are_refused_naming_the_problem() {
    let dir = tempfile::tempdir().unwrap();
    let dev = device(dir.path(), "d.img", 8 << 20);
    let d = dev.to_str().unwrap();
    let c = config(dir.path(), "version = 1\n[[layer]]\ntarget = \"bogus\"\n");
    refused(&["format", "--device", d, "--config", &c], &dev, &["unknown target `bogus`", "linear"]);
    let c = config(
        dir.path(),
        "version = 1\n[[layer]]\ntarget = \"linear\"\n[[layer.segment]]\noffset = 0\nlength = \"2M\"\n[[layer.segment]]\noffset = \"1M\"\nlength = \"1M\"\n",
    );
    refused(&["format", "--device", d, "--config", &c], &dev, &["overlaps segment 1", "d.img"]);
    let c = config(
        dir.path(),
        "version = 1\n[[layer]]\ntarget = \"linear\"\n[[layer.segment]]\noffset = \"6M\"\nlength = \"2M\"\n",
    );
    refused(&["format", "--device", d, "--config", &c], &dev, &["past the end"]);
    let c = config(dir.path(), "version = 1\n[[layer]]\ntarget = \"linear\"\ntypo = 3\n");
    refused(&["format", "--device", d, "--config", &c], &dev, &["unknown key `typo`"]);
    let c = config(dir.path(), "version = 1\n[[layer]\n");
    refused(&["format", "--device", d, "--config", &c], &dev, &["stack.toml"]);
}

#[test]
fn too_small_missing_and_foreign_devices_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let small = device(dir.path(), "small.img", 1 << 20);
    refused(&["format", "--device", small.to_str().unwrap()], &small, &["small.img", "at least"]);
    let foreign = device(dir.path(), "foreign.img", 8 << 20);
    std::fs::write(&foreign, b"\x7fELF not a volume").unwrap();
    std::fs::File::options().write(true).open(&foreign).unwrap().set_len(8 << 20).unwrap();
    let f = foreign.to_str().unwrap();
    refused(&["format", "--device", f], &foreign, &["foreign.img", "foreign data", "--force"]);
    refused(&["serve", "--device", f, "--dry-run"], &foreign, &["foreign.img", "not a layoutd device"]);
    refused(&["inspect", "--device", f], &foreign, &["not a layoutd device"]);
    let blank = device(dir.path(), "blank.img", 8 << 20);
    refused(
        &["serve", "--device", blank.to_str().unwrap(), "--dry-run"],
        &blank,
        &["blank.img", "not formatted"],
    );
    // Named once: the device's own error already starts with its path.
    for cmd in ["inspect", "destage", "free-space"] {
        let out = layoutd().args([cmd, "--device", "/nonexistent/x.img"]).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success());
        assert_eq!(err.matches("/nonexistent/x.img").count(), 1, "{cmd}: {err}");
    }
}

#[test]
fn corrupt_superblock_is_refused_and_one_torn_copy_is_survived() {
    let dir = tempfile::tempdir().unwrap();
    let dev = device(dir.path(), "c.img", 8 << 20);
    let d = dev.to_str().unwrap();
    assert!(layoutd().args(["format", "--device", d]).status().unwrap().success());
    // Tear copy A only: the volume still opens from copy B.
    let mut bytes = std::fs::read(&dev).unwrap();
    bytes[100] ^= 0xff;
    std::fs::write(&dev, &bytes).unwrap();
    let ok = layoutd().args(["inspect", "--device", d]).output().unwrap();
    assert!(ok.status.success(), "{}", String::from_utf8_lossy(&ok.stderr));
    // Tear copy B too: refused.
    bytes[16384 + 100] ^= 0xff;
    std::fs::write(&dev, &bytes).unwrap();
    // Where both copies are, and what to do.
    let why =
        ["c.img", "superblock corrupt", "crc32c", "byte 0", "byte 16384", "restore the device from a copy"];
    refused(&["inspect", "--device", d], &dev, &why);
    refused(&["message", "--device", d, "destage"], &dev, &why);
    refused(&["serve", "--device", d, "--dry-run"], &dev, &["superblock corrupt"]);
    refused(&["format", "--device", d], &dev, &["--force"]);
}

#[test]
fn a_device_in_use_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let dev = device(dir.path(), "busy.img", 8 << 20);
    let d = dev.to_str().unwrap();
    assert!(layoutd().args(["format", "--device", d]).status().unwrap().success());
    let _held = layoutd_disk::FileDevice::open(&dev, false, true).unwrap();
    refused(&["serve", "--device", d, "--dry-run"], &dev, &["busy.img", "in use"]);
    refused(&["format", "--device", d, "--force"], &dev, &["busy.img", "in use"]);
    refused(&["destage", "--device", d], &dev, &["busy.img", "in use"]);
    refused(&["message", "--device", d, "destage"], &dev, &["busy.img", "in use"]);
}

#[test]
fn format_then_inspect_json_round_trips_the_config() {
    let dir = tempfile::tempdir().unwrap();
    let dev = dir.path().join("new.img");
    let d = dev.to_str().unwrap();
    let examples = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/linear.toml");
    let out =
        layoutd().args(["format", "--device", d, "--size", "1G", "--config", examples]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = layoutd().args(["inspect", "--device", d, "--json"]).output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["clean"], true);
    assert_eq!(v["volume_size_bytes"], (1u64 << 30) - (1 << 20) - (256 << 20));
    assert_eq!(v["config"]["layer"][0]["target"], "linear");
    // Re-formatting an existing volume needs --force.
    refused(&["format", "--device", d], &dev, &["already holds a layoutd volume", "--force"]);
}

#[test]
fn foreign_file_systems_and_swap_anywhere_are_named_and_refused_without_force() {
    if !common::require("`mkfs.btrfs` (apt-get install btrfs-progs)", common::have_cmd("mkfs.btrfs")) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // btrfs keeps its superblock at 64 KiB, past the 32 KiB layoutd's own check reads.
    let btrfs = device(dir.path(), "btrfs.img", 128 << 20);
    common::sh_ok(&format!("mkfs.btrfs -q {}", btrfs.display()));
    let b = btrfs.to_str().unwrap();
    refused(&["format", "--device", b], &btrfs, &["btrfs.img", "foreign data", "btrfs", "65600", "--force"]);
    let swap = device(dir.path(), "swap.img", 16 << 20);
    common::sh_ok(&format!("mkswap -q {}", swap.display()));
    refused(&["format", "--device", swap.to_str().unwrap()], &swap, &["swap.img", "swap", "--force"]);
    // A member of a multi-device volume is checked too.
    let blank = device(dir.path(), "blank.img", 8 << 20);
    let args = ["format", "--device", blank.to_str().unwrap(), "--device", b];
    refused(&args, &btrfs, &["btrfs.img", "btrfs"]);
    let out = layoutd().args(["format", "--device", b, "--force"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

/// A log whose checkpoint area is gone is refused at open by every command
/// that opens it, naming why (a failed log bring-up counted as ready: the
/// offline command said only "the final flush failed (EIO)"), and the
/// device is not written.
#[test]
fn a_log_without_a_checkpoint_is_refused_at_open_naming_why() {
    let dir = tempfile::tempdir().unwrap();
    let dev =
        common::formatted(dir.path(), "log.img", "64M", Some("version = 1\n[[layer]]\ntarget = \"log\"\n"));
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new().write(true).open(&dev).unwrap();
    f.write_all_at(&[0u8; 8192], 1 << 20).unwrap(); // both checkpoint copies, after the 1 MiB header
    drop(f);
    let dev_s = dev.to_str().unwrap();
    let why = ["log checkpoint at lower offsets 0 and 4096", "no valid checkpoint", "format the device"];
    refused(&["message", "--device", dev_s, "checkpoint"], &dev, &why);
    // One line: destage's progress note comes only once the volume is open.
    refused(&["destage", "--device", dev_s], &dev, &why);
}

/// A two-layer stack whose upper layer refuses the open (a pool over a log,
/// both pool checkpoint copies damaged) leaves the device untouched: the
/// log below had already recovered and written its bring-up checkpoint
/// before the pool refused, so the device changed although the pool said
/// "nothing was changed".
#[test]
fn an_upper_layer_refusing_the_open_leaves_the_device_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = "version = 1\n[[layer]]\ntarget = \"pool\"\n[[layer]]\ntarget = \"log\"\n";
    let dev = common::formatted(dir.path(), "stack.img", "64M", Some(cfg));
    // A snapshot writes the pool's second checkpoint copy; a log
    // checkpoint then covers the segments holding them (not replayed).
    for args in [&["snapshot", "create", "s1"][..], &["message", "checkpoint"]] {
        let o = layoutd().args(args).args(["--device", dev.to_str().unwrap()]).output().unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    let mut bytes = std::fs::read(&dev).unwrap();
    let mut damaged = 0;
    for off in (0..bytes.len()).step_by(512) {
        if &bytes[off..off + 8] == b"LDPOOLCH" {
            bytes[off + 40] ^= 0xff;
            damaged += 1;
        }
    }
    assert!(damaged >= 2, "both pool checkpoint copies are on the device ({damaged} found)");
    std::fs::write(&dev, &bytes).unwrap();
    let d = dev.to_str().unwrap();
    let why = ["stack.img", "pool: metadata checkpoint unreadable", "lower offset", "Restore the device"];
    refused(&["message", "--device", d, "snapshot list"], &dev, &why);
    refused(&["destage", "--device", d], &dev, &why);
    refused(&["snapshot", "list", "--device", d], &dev, &why);
}

/// The subcommands listed under "Commands:" in `layoutd ARGS --help`.
fn subcommands(args: &[String]) -> Vec<String> {
    let out = layoutd().args(args).arg("--help").output().unwrap();
    assert!(out.status.success(), "{args:?} --help failed");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let listed = text.lines().skip_while(|l| *l != "Commands:").skip(1).take_while(|l| !l.is_empty());
    // A command's line starts two spaces in; a wrapped description further.
    let names = listed.filter(|l| l.starts_with("  ") && !l.starts_with("   "));
    names.filter_map(|l| l.split_whitespace().next()).filter(|n| *n != "help").map(String::from).collect()
}

/// Every subcommand's --help teaches by example (`snapshot list`, `delete`
/// and `merge` had none), walking the whole command tree.
#[test]
fn every_subcommand_help_has_an_example() {
    let mut todo = vec![Vec::<String>::new()];
    let mut leaves = 0;
    while let Some(args) = todo.pop() {
        let subs = subcommands(&args);
        if !args.is_empty() && subs.is_empty() {
            let out = layoutd().args(&args).arg("--help").output().unwrap();
            assert!(
                String::from_utf8_lossy(&out.stdout).contains("Example"),
                "`layoutd {}` --help has no example",
                args.join(" ")
            );
            leaves += 1;
        }
        todo.extend(subs.into_iter().map(|s| args.iter().cloned().chain([s]).collect()));
    }
    assert!(leaves >= 15, "walked {leaves} subcommands");
}

/// A command the volume cannot take is refused naming the device, and the
/// device is not opened for writing: `opt status` on a volume without an
/// `opt` layer printed the log's status and succeeded; `snapshot list`
/// without a pool and an unknown message opened, recovered and marked the
/// device before the refusal.
#[test]
fn commands_the_volume_cannot_take_leave_it_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = "version = 1\n[[layer]]\ntarget = \"log\"\n";
    let dev = common::formatted(dir.path(), "plain.img", "64M", Some(cfg));
    let d = dev.to_str().unwrap();
    refused(&["opt", "status", "--device", d], &dev, &["plain.img", "no `opt` layer", "top first: log"]);
    refused(&["snapshot", "list", "--device", d], &dev, &["plain.img", "no `pool` layer", "top first: log"]);
    refused(&["free-space", "--device", d], &dev, &["plain.img", "no `replica` layer", "top first: log"]);
    let why = ["plain.img", "refused `bogus`", "unknown message", "known: checkpoint"];
    refused(&["message", "--device", d, "bogus"], &dev, &why);
    refused(&["message", "--device", d, "2:checkpoint"], &dev, &["plain.img", "no layer 2"]);
}

/// Members whose superblocks disagree on a member's size are refused in
/// one readable line (the message held a run of 22 spaces from a broken
/// line continuation).
#[test]
fn members_whose_superblocks_disagree_are_refused_in_one_line() {
    use layoutd_core::superblock::{Superblock, SUPERBLOCK_BYTES};
    use std::os::unix::fs::FileExt;
    let dir = tempfile::tempdir().unwrap();
    let a = device(dir.path(), "a.img", 8 << 20);
    let b = device(dir.path(), "b.img", 8 << 20);
    let (a_s, b_s) = (a.to_str().unwrap(), b.to_str().unwrap());
    let o = layoutd().args(["format", "--device", a_s, "--device", b_s]).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // Member 0 lists member 1 one sector larger than it is (a valid crc).
    let f = std::fs::OpenOptions::new().read(true).write(true).open(&a).unwrap();
    let mut both = vec![0u8; 2 * SUPERBLOCK_BYTES];
    f.read_exact_at(&mut both, 0).unwrap();
    let mut sb = Superblock::decode(&both).unwrap();
    sb.config.device[1].size_bytes += 512;
    sb.generation += 1;
    f.write_all_at(&sb.encode().unwrap(), Superblock::copy_offset_bytes(sb.generation)).unwrap();
    drop(f);
    let why = ["b.img", "the superblocks disagree (damaged metadata)", "refusing"];
    refused(&["inspect", "--device", a_s, "--device", b_s], &b, &why);
}
