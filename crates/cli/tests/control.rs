//! Runtime commands to a volume (`layoutd message`): online through a
//! running serve's control socket, offline on the devices, and refusals
//! with the reason.

mod common;
use common::*;

const DCD: &str = "version = 1\n[[layer]]\ntarget = \"dcd\"\nlog_length = \"16MiB\"\n";

#[test]
fn messages_reach_a_served_volume_through_its_control_socket_and_an_offline_one_directly() {
    if !tools(&["nbdkit", "qemu-io"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let dev = formatted(dir.path(), "c.img", "64M", Some(DCD));
    let mut server = Server::start(&dev);
    let control = dir.path().join("c.sock.ctl");
    assert!(wait_for_path(&control, None), "serve did not create {}", control.display());
    let mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&control).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o600, "only the owner may command the volume");
    let w = sh(&format!("qemu-io -f raw -c 'write -P 0x41 0 8k' -c flush '{}'", server.uri()));
    assert!(w.status.success(), "{}", text(&w));
    // Online, by the NBD socket or by the control socket itself.
    let o = layoutd().args(["message", "--socket"]).arg(&server.socket).arg("destage").output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stdout).starts_with("destaging "), "{}", text(&o));
    let o = layoutd().args(["message", "--control"]).arg(&control).args(["1:", "destage"]).output().unwrap();
    assert!(o.status.success(), "layer-addressed: {}", text(&o));
    // A message no target knows: refused, exit 1, the reason given.
    refused_line(
        &["message", "--control", control.to_str().unwrap(), "plan", "now"],
        &["refused `plan now`", "unknown message"],
    );
    // Offline on a served device: the lock refuses it.
    let o = layoutd().args(["message", "--device"]).arg(&dev).arg("destage").output().unwrap();
    assert!(!o.status.success(), "an offline command on a served device must be refused: {}", text(&o));
    assert!(server.stop(), "serve shut down cleanly");
    assert!(!control.exists(), "the control socket goes with the server");
    // Offline: delivered, the work finished, the volume left clean.
    let o = layoutd().args(["message", "--device"]).arg(&dev).arg("destage").output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(top_counter(&inspect_json(&dev), "dirty_segments_count"), 0);
    // Online with nothing listening: says what to check.
    refused_line(
        &["message", "--control", control.to_str().unwrap(), "destage"],
        &["cannot reach", "layoutd serve"],
    );
    refused_line(&["message", "destage"], &["--device", "--socket"]);
}
