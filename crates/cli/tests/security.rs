//! Serving safely (issue 9, security): TLS-PSK authenticates clients, a
//! non-loopback listener without TLS is warned about, the default socket
//! lives in a private directory, and --record-trace never follows a link.

mod common;
use common::*;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

fn ready(names: &[&str]) -> bool {
    tools(&[&["nbdkit"], names].concat())
}

fn inspect_state(dev: &Path) -> String {
    let out = layoutd().args(["inspect", "--device"]).arg(dev).output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    String::from_utf8_lossy(&out.stdout).lines().find(|l| l.starts_with("state:")).unwrap().to_string()
}

#[test]
fn record_trace_never_follows_a_planted_symlink_nor_replaces_a_file_without_force() {
    if !ready(&[]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let dev = formatted(dir.path(), "s.img", "16M", None);
    let victim = dir.path().join("victim");
    std::fs::write(&victim, b"precious").unwrap();
    let link = dir.path().join("run.trace");
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    let out = serve_run(&dev, "true", &["--record-trace", link.to_str().unwrap()]);
    assert!(!out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("symbolic link"), "{}", text(&out));
    let out = serve_run(&dev, "true", &["--record-trace", link.to_str().unwrap(), "--force"]);
    assert!(!out.status.success() && text(&out).contains("symbolic link"), "{}", text(&out));
    assert_eq!(std::fs::read(&victim).unwrap(), b"precious");

    // A link planted after layoutd's own check: the plugin opens with O_NOFOLLOW.
    let sock = dir.path().join("p.sock");
    let plugin = Path::new(env!("CARGO_BIN_EXE_layoutd")).parent().unwrap().join("liblayoutd_nbd.so");
    let out = Command::new("nbdkit")
        .args(["--foreground", "--unix"])
        .arg(&sock)
        .args(["--run", "true"])
        .arg(&plugin)
        .arg(format!("device={}", dev.display()))
        .arg(format!("record-trace={}", link.display()))
        .arg("record-trace-overwrite=true")
        .output()
        .unwrap();
    assert!(!out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("symbolic link"), "{}", text(&out));
    assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
    assert!(inspect_state(&dev).contains("clean"), "a refused trace path left the volume dirty");

    // An existing regular file: refused without --force, replaced with it.
    let existing = dir.path().join("old.trace");
    std::fs::write(&existing, b"old").unwrap();
    let out = serve_run(&dev, "true", &["--record-trace", existing.to_str().unwrap()]);
    assert!(!out.status.success() && text(&out).contains("--force"), "{}", text(&out));
    assert_eq!(std::fs::read(&existing).unwrap(), b"old");
    let out = serve_run(&dev, "true", &["--record-trace", existing.to_str().unwrap(), "--force"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(std::fs::read_to_string(&existing).unwrap().starts_with("# layoutd-trace"));
}

/// `layoutd serve` with the default socket, TMPDIR and XDG_RUNTIME_DIR set
/// as given; returns the `$unixsocket` nbdkit served on and the output.
fn serve_default_socket(dev: &Path, tmp: &Path, xdg: Option<&Path>) -> (String, String) {
    let mut c = layoutd();
    c.args(["serve", "--device"])
        .arg(dev)
        .args(["--run", "echo \"SOCKET=$unixsocket\"; nbdinfo --size \"$uri\""]);
    c.env("TMPDIR", tmp).env_remove("XDG_RUNTIME_DIR");
    if let Some(x) = xdg {
        c.env("XDG_RUNTIME_DIR", x);
    }
    let out = c.output().unwrap();
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    let sock = t.lines().find_map(|l| l.strip_prefix("SOCKET=")).unwrap().to_string();
    (sock, t)
}

fn mode(p: &Path) -> u32 {
    std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777
}

#[test]
fn the_default_socket_is_in_a_private_directory_a_pre_created_one_cannot_block_or_capture() {
    if !ready(&["nbdinfo"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let dev = formatted(dir.path(), "v.img", "16M", None);
    let tmp = dir.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    // The old predictable path, pre-created by "another user": no effect.
    let squatter = std::os::unix::net::UnixListener::bind(tmp.join("layoutd-v.img.sock")).unwrap();
    let uid = unsafe { libc::geteuid() };
    let (sock, _) = serve_default_socket(&dev, &tmp, None);
    let private = tmp.join(format!("layoutd-{uid}"));
    assert_eq!(Path::new(&sock), private.join("v.img.sock"));
    assert_eq!(mode(&private), 0o700);
    // Served again: the stale socket nbdkit left is cleared, not a blocker.
    let (again, _) = serve_default_socket(&dev, &tmp, None);
    assert_eq!(again, sock);
    drop(squatter);

    // The private directory pre-created world-writable ("another user"): not used.
    std::fs::remove_dir_all(&private).unwrap();
    std::fs::create_dir(&private).unwrap();
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o777)).unwrap();
    let (sock, t) = serve_default_socket(&dev, &tmp, None);
    assert!(t.contains("is not a private directory"), "{t}");
    let parent = Path::new(&sock).parent().unwrap();
    assert_ne!(parent, private);
    assert_eq!(mode(parent), 0o700, "{sock}");

    // $XDG_RUNTIME_DIR wins when set.
    let xdg = dir.path().join("xdg");
    std::fs::create_dir(&xdg).unwrap();
    std::fs::set_permissions(&xdg, std::fs::Permissions::from_mode(0o700)).unwrap();
    let (sock, _) = serve_default_socket(&dev, &tmp, Some(&xdg));
    assert_eq!(Path::new(&sock), xdg.join("layoutd/v.img.sock"));
}

fn psk_file(dir: &Path, name: &str, user: &str) -> std::path::PathBuf {
    let p = dir.join(name);
    sh_ok(&format!("psktool -p {} -u {user} >/dev/null", p.display()));
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
    p
}

#[test]
fn tls_psk_admits_the_right_key_and_refuses_a_wrong_one_or_plaintext() {
    if !ready(&["nbdinfo", "psktool"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let dev = formatted(dir.path(), "t.img", "16M", None);
    let keys = psk_file(dir.path(), "keys.psk", "alice");
    let wrong = psk_file(dir.path(), "wrong.psk", "alice");
    let sock = dir.path().join("t.sock");
    let args = [&dev, Path::new("--socket"), &sock, Path::new("--tls-psk"), &keys];
    let (mut child, uri, _) =
        serve_until_banner(&[&["--device".as_ref()], &args.map(|p| p.as_os_str())[..]].concat());
    assert!(uri.starts_with("nbds+unix://alice@/?socket="), "{uri}");
    assert!(uri.contains("&tls-psk-file="), "{uri}");
    let size = sh(&format!("nbdinfo --size '{uri}'"));
    assert!(size.status.success(), "the right key was refused: {}", text(&size));
    assert_eq!(String::from_utf8_lossy(&size.stdout).trim(), (15u64 << 20).to_string());
    let bad = uri.replace(&keys.display().to_string(), &wrong.display().to_string());
    let out = sh(&format!("nbdinfo --size '{bad}'"));
    assert!(!out.status.success(), "a wrong key was accepted: {}", text(&out));
    let plain = format!("nbd+unix:///?socket={}", sock.display());
    let out = sh(&format!("nbdinfo --size '{plain}'"));
    assert!(!out.status.success(), "a client without TLS was accepted: {}", text(&out));
    signal(child.id(), libc::SIGTERM);
    assert!(child.wait().unwrap().success());
    assert!(inspect_state(&dev).contains("clean"));
    // With --run, the command's $uri carries the key file and user too.
    let out = serve_run(&dev, "nbdinfo --size \"$uri\"", &["--tls-psk", keys.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out));
}

#[test]
fn listening_beyond_loopback_without_tls_is_warned_about() {
    if !ready(&["psktool"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let dev = formatted(dir.path(), "w.img", "16M", None);
    let d = dev.to_str().unwrap();
    let keys = psk_file(dir.path(), "k.psk", "bob");
    let run = |args: &[&str]| {
        let out = layoutd().args(["serve", "--dry-run", "--device", d]).args(args).output().unwrap();
        assert!(out.status.success(), "{}", text(&out));
        text(&out)
    };
    let port = std::net::TcpListener::bind("0.0.0.0:0").unwrap().local_addr().unwrap().port();
    for open in [format!(":{port}"), format!("0.0.0.0:{port}")] {
        let open = open.as_str();
        let t = run(&["--listen", open]);
        assert!(t.contains("WARNING") && t.contains("WITHOUT TLS"), "{open}: {t}");
        let t = run(&["--listen", open, "--tls-psk", keys.to_str().unwrap()]);
        assert!(!t.contains("WARNING") && t.contains("--tls=require"), "{open}: {t}");
    }
    for lo in ["127.0.0.1", "[::1]", "localhost"] {
        let lo = format!("{lo}:{port}");
        assert!(!run(&["--listen", &lo]).contains("WARNING"), "{lo}");
    }
}

#[test]
fn tls_certificates_admit_a_client_trusting_the_ca_and_refuse_plaintext() {
    if !ready(&["nbdinfo", "certtool"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let dev = formatted(dir.path(), "c.img", "16M", None);
    let certs = dir.path().join("certs");
    std::fs::create_dir(&certs).unwrap();
    let c = certs.display();
    // A CA and a server certificate for localhost, as nbdkit-tls(1) shows.
    sh_ok(&format!(
        "cd {c} && certtool --generate-privkey > ca-key.pem 2>/dev/null \
         && printf 'cn = layoutd test CA\\nca\\ncert_signing_key\\nexpiration_days = 2\\n' > ca.info \
         && certtool --generate-self-signed --load-privkey ca-key.pem --template ca.info --outfile ca-cert.pem \
         && certtool --generate-privkey > server-key.pem 2>/dev/null \
         && printf 'cn = localhost\\ndns_name = localhost\\nip_address = 127.0.0.1\\ntls_www_server\\nencryption_key\\nsigning_key\\nexpiration_days = 2\\n' > server.info \
         && certtool --generate-certificate --load-ca-certificate ca-cert.pem --load-ca-privkey ca-key.pem \
            --load-privkey server-key.pem --template server.info --outfile server-cert.pem"
    ));
    let plain = format!("nbd+unix:///?socket={}", dev.with_extension("sock").display());
    let run = format!("nbdinfo --size \"$uri\" && ! nbdinfo --size '{plain}'");
    let out = serve_run(&dev, &run, &["--tls-certificates", certs.to_str().unwrap()]);
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert!(t.contains(&(15u64 << 20).to_string()) && t.contains("requires TLS"), "{t}");
    // A directory without the server's files is refused before nbdkit starts.
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    refused_line(
        &[
            "serve",
            "--device",
            dev.to_str().unwrap(),
            "--tls-certificates",
            empty.to_str().unwrap(),
            "--dry-run",
        ],
        &["empty", "ca-cert.pem"],
    );
}
