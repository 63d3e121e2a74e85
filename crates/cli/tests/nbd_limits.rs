//! Requests past the 32 MiB request limit are split by the server, and the
//! NBD block-size limits are advertised (issue 9, item 4).

mod common;
use common::*;

#[test]
fn nbdinfo_shows_the_block_size_limits() {
    if !tools(&["nbdkit", "nbdinfo"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let dev = formatted(dir.path(), "bs.img", "16M", None);
    let out = serve_run(&dev, "nbdinfo \"$uri\"", &[]);
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    for want in ["block_size_minimum: 512", "block_size_preferred: 4096", "block_size_maximum: 33554432"] {
        assert!(t.contains(want), "nbdinfo lacks {want:?}:\n{t}");
    }
}

#[test]
fn write_zeroes_of_64_mib_succeed_and_read_back_as_zeroes() {
    if !tools(&["nbdkit", "qemu-io", "nbdcopy"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let dev = formatted(dir.path(), "z.img", "130M", None);
    let size = 129u64 << 20; // the export: the device less its first MiB
    let sparse = dir.path().join("sparse.img");
    std::fs::File::create(&sparse).unwrap().set_len(size).unwrap();
    // qemu-io splits zeroes at 32 MiB itself; nbdcopy (libnbd) sends a sparse
    // source's holes as write-zeroes of up to the whole hole, so it reaches the
    // plugin's splitting.
    let run = format!(
        "qemu-io -f raw -c 'write -P 0x5a 0 96M' -c 'write -z 0 64M' -c 'read -P 0 0 64M' -c 'read -P 0x5a 64M 32M' \"$uri\" \
         && nbdcopy {} \"$uri\" && qemu-io -f raw -c 'read -P 0 0 {size}' \"$uri\"",
        sparse.display()
    );
    let out = serve_run(&dev, &run, &[]);
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert!(!t.contains("verification failed") && !t.contains("EINVAL"), "{t}");
    assert_eq!(t.matches("read ").count(), 3, "every read ran:\n{t}");
}

#[test]
fn a_client_ignoring_the_maximum_gets_its_48_mib_requests_served() {
    if !tools(&["nbdkit", "fio"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let dev = formatted(dir.path(), "f.img", "128M", None);
    // fio's nbd engine (libnbd) sends 48 MiB reads and writes as they are.
    let run = "fio --name=big --ioengine=nbd --uri=\"$uri\" --rw=write --bs=48M --size=96M \
               --verify=crc32c --do_verify=1 --verify_state_save=0";
    let out = serve_run(&dev, run, &[]);
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert!(t.contains("err= 0") && !t.contains("verify:"), "{t}");
}
