//! The "unclear errors and quirks" of issue 9: each ends with one clear line
//! naming the problem and its fix, and leaves nothing behind.

mod common;
use common::*;
use std::path::Path;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn state(dev: &Path) -> String {
    let out = layoutd().args(["inspect", "--json", "--device"]).arg(dev).output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    if v["clean"] == true { "clean" } else { "dirty" }.to_string()
}

#[test]
fn a_size_that_is_not_whole_sectors_is_named_not_blamed_on_a_segment() {
    let dir = tempfile::tempdir().unwrap();
    let dev = dir.path().join("odd.img");
    std::fs::File::create(&dev).unwrap().set_len(3_000_000).unwrap();
    let d = dev.to_str().unwrap();
    refused_line(
        &["format", "--device", d],
        &["odd.img", "3000000 bytes", "512-byte sectors", "truncate -s 2999808"],
    );
    assert_eq!(std::fs::metadata(&dev).unwrap().len(), 3_000_000);
}

#[test]
fn an_unusable_size_leaves_no_file_behind() {
    let dir = tempfile::tempdir().unwrap();
    for (size, needle) in [
        ("0", "at least 2097152"),
        ("16000000T", "larger than any file"),
        ("8000000T", "cannot make"),
        ("3000000", "512-byte sectors"),
    ] {
        let dev = dir.path().join(format!("s{size}.img"));
        refused_line(&["format", "--device", dev.to_str().unwrap(), "--size", size], &[needle]);
        assert!(!dev.exists(), "--size {size} left {} behind", dev.display());
    }
}

#[test]
fn the_same_device_twice_is_named_as_such() {
    let dir = tempfile::tempdir().unwrap();
    let dev = formatted(dir.path(), "x.img", "8M", None);
    let d = dev.to_str().unwrap();
    let dot = format!("{}/./x.img", dir.path().display());
    for cmd in ["format", "serve", "inspect", "destage"] {
        refused_line(&[cmd, "--device", d, "--device", &dot], &["x.img", "given twice"]);
    }
}

#[test]
fn listen_accepts_ipv6_and_every_address_and_refuses_bad_ports() {
    let dir = tempfile::tempdir().unwrap();
    let dev = formatted(dir.path(), "l.img", "8M", None);
    let d = dev.to_str().unwrap();
    let dry = |listen: &str, extra: &[&str]| {
        let out = layoutd()
            .args(["serve", "--dry-run", "--device", d, "--listen", listen])
            .args(extra)
            .output()
            .unwrap();
        assert!(out.status.success(), "{listen}: {}", text(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    // serve binds the address itself and hands the listener to nbdkit.
    let p = free_port();
    let cmd = dry(&format!("[::1]:{p}"), &[]);
    assert!(
        cmd.contains("LISTEN_FDS=\"1\"")
            && !cmd.contains("--ipaddr")
            && !cmd.contains("--port")
            && cmd.contains(&format!("announce-uri=nbd://[::1]:{p}/")),
        "{cmd}"
    );
    // With --run nbdkit binds it (it refuses socket activation with --run).
    let run = ["--run", "true"];
    let p = free_port();
    let cmd = dry(&format!("[::1]:{p}"), &run);
    assert!(
        !cmd.contains("LISTEN_FDS")
            && cmd.contains("\"--ipaddr\" \"::1\"")
            && cmd.contains(&format!("\"--port\" \"{p}\"")),
        "{cmd}"
    );
    let p = free_port();
    let cmd = dry(&format!(":{p}"), &run);
    assert!(!cmd.contains("--ipaddr") && cmd.contains(&format!("\"--port\" \"{p}\"")), "{cmd}");
    refused_line(
        &["serve", "--dry-run", "--device", d, "--listen", "127.0.0.1:99999"],
        &["99999", "1 to 65535"],
    );
    refused_line(
        &["serve", "--dry-run", "--device", d, "--listen", "127.0.0.1:0"],
        &["port 0", "choose one"],
    );
    refused_line(&["serve", "--dry-run", "--device", d, "--listen", "::1:80"], &["[::1]:80"]);
}

#[test]
fn a_port_in_use_is_refused_before_the_volume_is_touched_and_nothing_claims_to_serve() {
    if !tools(&[]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let dev = formatted(dir.path(), "b.img", "8M", None);
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = busy.local_addr().unwrap().to_string();
    let out =
        layoutd().args(["serve", "--device", dev.to_str().unwrap(), "--listen", &addr]).output().unwrap();
    let t = text(&out);
    assert!(!out.status.success(), "{t}");
    assert!(t.contains("cannot listen there") && !t.contains("serving"), "{t}");
    assert_eq!(state(&dev), "clean");
}

#[test]
fn a_socket_path_that_cannot_be_bound_is_refused_before_the_volume_is_touched() {
    let dir = tempfile::tempdir().unwrap();
    let dev = formatted(dir.path(), "u.img", "8M", None);
    let sock = dir.path().join("no such dir/u.sock");
    refused_line(
        &["serve", "--device", dev.to_str().unwrap(), "--socket", sock.to_str().unwrap()],
        &["u.sock", "cannot listen", "--socket"],
    );
    assert_eq!(state(&dev), "clean");
}

#[test]
fn a_client_that_connects_as_soon_as_the_socket_file_exists_is_served() {
    // serve binds the socket and hands it to nbdkit, so the file never exists
    // with nothing listening: a client that connects early waits in the backlog
    // until the volume is open (it used to get ENOENT or ECONNREFUSED).
    if !tools(&["qemu-io"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let dev = formatted(dir.path(), "early.img", "16M", None);
    for round in 0..5 {
        let sock = dir.path().join(format!("early{round}.sock"));
        let mut child = layoutd()
            .args(["serve", "--device", dev.to_str().unwrap(), "--socket", sock.to_str().unwrap()])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let mut polls = 0u64;
        while !sock.exists() {
            assert!(child.try_wait().unwrap().is_none(), "serve exited before its socket existed");
            polls += 1;
            assert!(polls < 60_000_000, "no socket file");
            std::hint::spin_loop();
        }
        let uri = format!("nbd+unix:///?socket={}", sock.display());
        let out = std::process::Command::new("qemu-io")
            .args(["-f", "raw", "-c", &format!("write -P {} 0 4k", round + 1), &uri])
            .output()
            .unwrap();
        assert!(out.status.success(), "round {round}: {}", text(&out));
        signal(child.id(), libc::SIGTERM);
        assert!(child.wait().unwrap().success(), "round {round}: serve did not stop cleanly");
    }
    assert_eq!(state(&dev), "clean");
}

#[test]
fn a_plugin_built_from_other_sources_than_the_binary_is_refused_before_the_volume_is_opened() {
    // What a stale plugin next to a rebuilt binary looks like to the plugin:
    // another source id (the real one comes first; a second one overrides).
    if !tools(&[]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let dev = formatted(dir.path(), "m.img", "8M", None);
    let sock = dir.path().join("m.sock");
    let out = layoutd()
        .args(["serve", "--device", dev.to_str().unwrap(), "--socket", sock.to_str().unwrap()])
        .args(["--plugin-arg", "source-id=0123456789abcdef"])
        .output()
        .unwrap();
    let t = text(&out);
    assert!(!out.status.success(), "{t}");
    assert!(
        t.contains("liblayoutd_nbd.so")
            && t.contains("built from other sources")
            && t.contains("cargo build --workspace")
            && !t.contains("serving"),
        "{t}"
    );
    // The rebuild hint names the plugin's own profile.
    let release_hint = t.contains("cargo build --workspace --release");
    assert_eq!(release_hint, !t.contains("/debug/liblayoutd_nbd.so"), "{t}");
    assert_eq!(state(&dev), "clean");
}

#[test]
fn the_banner_comes_after_binding_with_the_export_size_and_a_percent_encoded_uri() {
    if !tools(&["nbdinfo"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // One 4 MiB segment of a 16 MiB device: the export is 4 MiB, the data area 15.
    let cfg =
        "version = 1\n[[layer]]\ntarget = \"linear\"\n[[layer.segment]]\noffset = \"1M\"\nlength = \"4M\"\n";
    let dev = formatted(dir.path(), "e.img", "16M", Some(cfg));
    let spaced = dir.path().join("a dir & more");
    std::fs::create_dir(&spaced).unwrap();
    let sock = spaced.join("e.sock");
    let args = ["--device".as_ref(), dev.as_os_str(), "--socket".as_ref(), sock.as_os_str()];
    let (mut child, uri, banner) = serve_until_banner(&args);
    assert!(banner.contains("(4194304 bytes)"), "{banner}");
    assert!(uri.ends_with("/a%20dir%20%26%20more/e.sock"), "{uri}");
    let out = sh(&format!("nbdinfo --size '{uri}'"));
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "4194304");
    signal(child.id(), libc::SIGTERM);
    assert!(child.wait().unwrap().success());
}

#[test]
fn an_os_error_is_printed_once() {
    let out = layoutd()
        .args(["disk", "validate", "--diskspecs", "/nonexistent.diskspecs", "--trace", "/nonexistent.trace"])
        .output()
        .unwrap();
    let t = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(t.contains("/nonexistent.diskspecs"), "{t}");
    assert_eq!(t.matches("No such file or directory").count(), 1, "{t}");
}
