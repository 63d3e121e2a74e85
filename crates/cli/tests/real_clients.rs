//! Real NBD clients that are not ours: qemu-io, nbdinfo, nbdcopy; plus the
//! server's own guarantees (panics never cross FFI, SIGTERM shuts down
//! cleanly).

mod common;
use common::*;

#[test]
fn qemu_io_patterns_fua_zero_and_discard_read_back() {
    if !tools(&["nbdkit", "qemu-io"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let dev = formatted(dir.path(), "q.img", "64M", None);
    let cmds = [
        "write -P 0xab 0 64k",
        "read -P 0xab 0 64k",
        "write -f -P 0x11 1M 4k",
        "read -P 0x11 1M 4k",
        "write -P 0x22 2M 1M",
        "write -z 2M 64k",
        "read -P 0 2M 64k",
        "read -P 0x22 2112k 960k",
        "discard 3M 64k",
        "read -P 0 3M 64k",
        "flush",
        "read -P 0 10M 1M",
        "writev -P 0x33 5M 512 4k 512",
        "read -P 0x33 5M 5k",
    ];
    let run: String = cmds.iter().map(|c| format!(" -c '{c}'")).collect();
    let out = serve_run(&dev, &format!("qemu-io -f raw{run} \"$uri\""), &[]);
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert!(!t.contains("Pattern verification failed"), "{t}");
    assert_eq!(t.matches("read ").count(), 7, "every read ran:\n{t}");
    // And the data is still there after a clean shutdown and a new serve.
    let out = serve_run(&dev, "qemu-io -f raw -c 'read -P 0xab 0 64k' -c 'read -P 0x11 1M 4k' \"$uri\"", &[]);
    assert!(out.status.success() && !text(&out).contains("verification failed"), "{}", text(&out));
}

#[test]
fn nbdinfo_reports_the_volume_size() {
    if !tools(&["nbdkit", "nbdinfo"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let dev = formatted(dir.path(), "i.img", "48M", None);
    let out = serve_run(&dev, "nbdinfo --size \"$uri\"", &[]);
    assert!(out.status.success(), "{}", text(&out));
    let size: u64 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    assert_eq!(size, (48 << 20) - (1 << 20));
}

#[test]
fn nbdcopy_of_64_mib_random_data_in_and_out_is_identical() {
    if !tools(&["nbdkit", "nbdcopy"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let dev = formatted(dir.path(), "c.img", "65M", None);
    let input = dir.path().join("in.bin");
    let output = dir.path().join("out.bin");
    sh_ok(&format!("head -c 67108864 /dev/urandom > {}", input.display()));
    let copy_in = serve_run(&dev, &format!("nbdcopy {} \"$uri\"", input.display()), &[]);
    assert!(copy_in.status.success(), "{}", text(&copy_in));
    let copy_out = serve_run(&dev, &format!("nbdcopy \"$uri\" {}", output.display()), &[]);
    assert!(copy_out.status.success(), "{}", text(&copy_out));
    let a = sh_ok(&format!("sha256sum < {}", input.display()));
    let b = sh_ok(&format!("sha256sum < {}", output.display()));
    assert_eq!(a, b, "checksums differ");
}

#[test]
fn a_panic_in_the_plugin_fails_that_request_with_eio_and_the_server_lives_on() {
    if !tools(&["nbdkit", "qemu-io"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let dev = formatted(dir.path(), "p.img", "16M", None);
    let run = "qemu-io -f raw -c 'read 8192 4096' \"$uri\"; qemu-io -f raw -c 'write -P 5 0 4k' -c 'read -P 5 0 4k' \"$uri\"";
    let out = serve_run(&dev, run, &["--plugin-arg", "debug-panic-offset=8192"]);
    let t = text(&out);
    assert!(t.contains("internal error in pread"), "the panic was not logged:\n{t}");
    assert!(t.contains("Input/output error"), "the failed read did not report EIO:\n{t}");
    assert!(t.contains("read 4096/4096 bytes at offset 0"), "the server did not keep serving:\n{t}");
    assert!(out.status.success(), "{t}");
}

#[test]
fn sigterm_flushes_and_marks_clean_and_sigkill_leaves_dirty() {
    if !tools(&["nbdkit", "qemu-io"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let dev = formatted(dir.path(), "s.img", "16M", None);
    let inspect = |dev: &std::path::Path| -> serde_json::Value {
        let o = layoutd().args(["inspect", "--json", "--device"]).arg(dev).output().unwrap();
        serde_json::from_slice(&o.stdout).unwrap()
    };
    let mut s = Server::start(&dev);
    assert_eq!(inspect(&dev)["clean"], false, "a served device is marked dirty");
    sh_ok(&format!("qemu-io -f raw -c 'write -P 9 0 64k' '{}'", s.uri()));
    assert!(s.stop(), "serve did not exit cleanly on SIGTERM");
    assert_eq!(inspect(&dev)["clean"], true);
    let mut s = Server::start(&dev);
    sh_ok(&format!("qemu-io -f raw -c 'read -P 9 0 64k' '{}'", s.uri()));
    s.kill();
    assert_eq!(inspect(&dev)["clean"], false, "SIGKILL must leave the dirty mark");
}
