//! The `opt` target served for real, under ext4 and xfs: the file system
//! is read, a plan is forced online through the control socket while it
//! is mounted and copied in idle time, the volume survives a clean restart
//! with blocks in the OPT region, writes to them, and a SIGKILL of the
//! server mid-write. Automatic plans are off so that what is mapped when
//! a server stops does not depend on timing, and the test waits for the
//! forced reconfiguration to end (an event the status reports), not for a
//! length of time.

mod common;
use common::*;

/// A 16 MiB region learning from anything seen once; plans only when told.
const OPT: &str = r#"version = 1
[[layer]]
target = "opt"
opt_length = "16MiB"
edge_weight_min = 1
think_time_ms = 1000
plan_interval_requests = 0
plan_interval_ms = 0
"#;

use common::inspect_json as inspect;
use common::top_counter as opt_counter;

/// The rig again on `dev`, working in `dir/name`, mounted.
fn restart(dev: &std::path::Path, dir: &std::path::Path, name: &str) -> BlockRig {
    let work = dir.join(name);
    std::fs::create_dir_all(&work).unwrap();
    let mut rig = BlockRig::start(dev, &work);
    rig.mount();
    rig
}

/// Reads every file of `files` under `root` `rounds` times, dropping the
/// page cache in between so the reads reach the volume.
fn read_rounds(root: &std::path::Path, files: &[(std::path::PathBuf, u32)], rounds: u32) {
    for _ in 0..rounds {
        sh_ok("sync; echo 3 > /proc/sys/vm/drop_caches");
        verify_tree(root, files);
    }
}

/// The counter `name` in the status text of `opt status`.
fn status_counter(status: &str, name: &str) -> u64 {
    let key = format!("{name}=");
    let v = status.split_whitespace().find_map(|w| w.strip_prefix(key.as_str()));
    v.unwrap_or_else(|| panic!("no {name} in: {status}")).parse().unwrap()
}

/// Asks the server at `sock` for its status until the reconfiguration in
/// progress has ended (`job_active=0`); returns that status. The job runs
/// in idle time only, so this waits for an event, however long the
/// machine takes; the bound is a watchdog against a job that never ends.
fn until_job_ends(sock: &std::path::Path) -> String {
    for _ in 0..3000 {
        let o = layoutd().args(["opt", "status", "--socket"]).arg(sock).output().unwrap();
        let status = text(&o);
        assert!(o.status.success(), "{status}");
        if status_counter(&status, "job_active") == 0 {
            return status;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    panic!("the reconfiguration never ended: it got no idle time in 5 minutes");
}

/// mkfs, a tree written and read through reconfigurations, a clean
/// restart with blocks mapped, writes to mapped blocks, a kill mid-write,
/// recovery, and the checker (`fsck`) clean at the end.
fn through_reconfiguration_restart_and_kill(fs: &str) {
    if !block_rig_available() || !require(&format!("mkfs.{fs}"), have_cmd(&format!("mkfs.{fs}"))) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let dev = formatted(dir.path(), "o.img", "337M", Some(OPT));
    let mut rig = BlockRig::start(&dev, dir.path());
    // No lazy initialisation: ext4 would otherwise zero its inode tables
    // from a kernel thread after the mount, a write every ~100 ms (10x the
    // time the last one took), which leaves `opt` no idle time (`idle_ms`)
    // for as long as it runs.
    let opts = if fs == "xfs" { "-f" } else { "-F -E lazy_itable_init=0,lazy_journal_init=0" };
    sh_ok(&format!("mkfs.{fs} -q {opts} {}", rig.loop_dev()));
    rig.mount();
    let files = write_tree(&rig.mnt.join("a"), 200, 11);
    read_rounds(&rig.mnt.join("a"), &files, 3);
    // A plan forced online, through the control socket, while mounted.
    let sock = rig.server.as_ref().unwrap().socket.clone();
    let o = layoutd().args(["opt", "plan", "--socket"]).arg(&sock).output().unwrap();
    assert!(o.status.success() && text(&o).contains("plan:"), "{}", text(&o));
    let o = layoutd().args(["opt", "status", "--socket"]).arg(&sock).output().unwrap();
    assert!(o.status.success() && text(&o).contains("map generation"), "{}", text(&o));
    assert_eq!(status_counter(&text(&o), "plans_count"), 1, "{}", text(&o));
    // Idle time: the reconfiguration the plan started runs to the end,
    // while the file system is mounted.
    let done = until_job_ends(&sock);
    assert_eq!(status_counter(&done, "reconfigurations_count"), 1, "{done}");
    assert!(status_counter(&done, "mapped_blocks_count") > 0, "{done}");
    rig.umount();
    drop(rig);
    let v = inspect(&dev);
    assert_eq!(v["clean"], true, "serve did not shut down cleanly");
    let mapped = opt_counter(&v, "mapped_blocks_count");
    assert!(mapped > 0, "no reconfiguration happened while serving: {v}");
    eprintln!("{fs}: {mapped} blocks in the OPT region after the first run");

    // A clean restart: the map is back, reads are served from the copies,
    // and writes go to them (dirty) while the tree stays intact.
    let mut rig = restart(&dev, dir.path(), "second");
    read_rounds(&rig.mnt.join("a"), &files, 1);
    let more = write_tree(&rig.mnt.join("b"), 120, 12);
    sh_ok("sync");
    read_rounds(&rig.mnt.join("b"), &more, 2);
    let durable = [files.clone(), more.clone()];
    // A write-heavy phase, killed in the middle.
    let c = rig.mnt.join("c");
    kill_mid_write(&mut rig, c, 13, 200, fs);
    drop(rig);
    assert_eq!(inspect(&dev)["clean"], false, "a killed server leaves the device dirty");

    // Recovery: map plus journal; the file system's own journal on mount.
    let mut rig = restart(&dev, dir.path(), "third");
    verify_tree(&rig.mnt.join("a"), &durable[0]);
    verify_tree(&rig.mnt.join("b"), &durable[1]);
    rig.umount();
    if fs == "xfs" {
        let o = sh(&format!("xfs_repair -n {}", rig.loop_dev()));
        assert!(o.status.success(), "xfs_repair -n found problems:\n{}", text(&o));
    } else {
        eprintln!("{}", rig.fsck());
    }
    drop(rig);
    let v = inspect(&dev);
    assert!(opt_counter(&v, "mapped_blocks_count") > 0, "{v}");
    // Dropping the region copies the dirty copies home: the volume's home
    // area alone then holds the file system.
    let o = layoutd().args(["opt", "drop", "--device"]).arg(&dev).output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(opt_counter(&inspect(&dev), "mapped_blocks_count"), 0);
    let mut rig = restart(&dev, dir.path(), "fourth");
    verify_tree(&rig.mnt.join("a"), &durable[0]);
    verify_tree(&rig.mnt.join("b"), &durable[1]);
    rig.umount();
}

/// One test for both file systems: two block rigs at once (nbdfuse, loop
/// devices) are slow to come up on a loaded machine.
#[test]
fn ext4_and_xfs_on_opt_survive_reconfigurations_a_clean_restart_and_a_kill() {
    through_reconfiguration_restart_and_kill("ext4");
    through_reconfiguration_restart_and_kill("xfs");
}

/// An `opt` over a `dcd` opens again after a serve: at bring-up opt
/// writes its map with FUA, dcd sends it home and logs an invalidation
/// record, and the stack was ready while that segment write was still in
/// flight; every open after the first serve panicked ("lower requests
/// still in flight", exit 101, the device written). Found by the s28-ux
/// damage audit.
#[test]
fn opt_over_dcd_opens_again_after_a_serve() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = "version = 1\n[[layer]]\ntarget = \"opt\"\nopt_length = \"8MiB\"\n[[layer]]\ntarget = \"dcd\"\nlog_length = \"8MiB\"\n";
    let dev = formatted(dir.path(), "od.img", "64M", Some(cfg));
    for round in 0..2 {
        let o = serve_run(&dev, "true", &[]);
        assert!(o.status.success(), "serve {round}: {}", text(&o));
        let o = layoutd().args(["message", "--device"]).arg(&dev).arg("status").output().unwrap();
        assert!(o.status.success(), "offline open {round}: {}", text(&o));
    }
    let o = layoutd().args(["destage", "--device"]).arg(&dev).output().unwrap();
    assert!(o.status.success(), "destage: {}", text(&o));
}
