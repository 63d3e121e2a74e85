//! `format`, `serve` and `inspect`.

use crate::endpoint;
use anyhow::{bail, Context, Result};
use clap::Args;
use layoutd_core::config::{parse_size_str, StackConfig};
use layoutd_core::superblock::Superblock;
use layoutd_core::SECTOR_BYTES;
use layoutd_runtime::volume;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};

#[derive(Args)]
#[command(
    after_help = "Examples:\n  layoutd format --device vol.img --size 4G              # create a 4 GiB file, default linear stack\n  layoutd format --device /dev/sdb --config examples/linear.toml --force\n\nWithout --config the stack is one `linear` target over the whole device. The device must be at least 2 MiB; its first MiB holds the superblock. A device holding data is refused unless --force is given: another layoutd volume, any non-zero byte in its first 32 KiB, or anything libblkid recognises anywhere on it (file systems, partition tables, LVM, RAID, swap, LUKS; what `wipefs DEVICE` lists). The device size must be a whole number of 512-byte sectors; a bad config is refused before anything is written."
)]
pub struct FormatArgs {
    /// The file or block device to format. Repeat it to make one volume span several devices
    /// (members, in this order; e.g. a physical DCD: log on the first, data on the second).
    #[arg(long, value_name = "PATH", required = true)]
    device: Vec<PathBuf>,
    /// Stack description (TOML). Default: one linear target over the whole device.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Create the file with this size if it does not exist (e.g. 1G, 512M).
    #[arg(long, value_name = "SIZE")]
    size: Option<String>,
    /// Overwrite a device that already holds data.
    #[arg(long)]
    force: bool,
    /// Use O_DIRECT for the formatting I/O.
    #[arg(long)]
    direct: bool,
}

pub fn format(a: FormatArgs) -> Result<()> {
    distinct(&a.device)?;
    let cfg = match &a.config {
        None => StackConfig::default_linear(),
        Some(p) => {
            let text = std::fs::read_to_string(p)
                .with_context(|| format!("{}: cannot read the config", p.display()))?;
            StackConfig::parse(&text, &p.display().to_string())?
        }
    };
    // Files this command creates are removed again if the format fails.
    let mut created = Vec::new();
    let result = (|| -> Result<Superblock> {
        for d in &a.device {
            if let Some(size) = &a.size {
                if create_sized(d, size)? {
                    created.push(d.clone());
                }
            }
            check_whole_sectors(d)?;
        }
        let opts = volume::FormatOptions { force: a.force, direct: a.direct, uuid: random_uuid()? };
        Ok(volume::format(&a.device, &cfg, &opts)?)
    })();
    let sb = result.inspect_err(|_| {
        for d in &created {
            let _ = std::fs::remove_file(d);
        }
    })?;
    println!(
        "formatted {}: {} bytes, stack: {}",
        names(&a.device),
        sb.device_size_bytes,
        cfg.layer.iter().map(|l| l.target.as_str()).collect::<Vec<_>>().join(" > ")
    );
    Ok(())
}

/// A random volume id from the OS.
fn random_uuid() -> Result<[u8; 16]> {
    use std::io::Read;
    let mut u = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut u))
        .context("reading /dev/urandom")?;
    Ok(u)
}

/// Creates `path` with `size` bytes unless it exists (then its size must
/// match); returns whether it created the file. A size layoutd cannot use is
/// refused before anything is created, and a file that cannot be sized is
/// removed again.
fn create_sized(path: &Path, size: &str) -> Result<bool> {
    let bytes = parse_size_str(size).map_err(|e| anyhow::anyhow!("--size {size}: {e}"))?;
    let min = layoutd_core::superblock::DEVICE_BYTES_MIN;
    if bytes < min {
        bail!(
            "--size {size}: {bytes} bytes; layoutd needs at least {min} (1 MiB of header plus 1 MiB of data)"
        );
    }
    if bytes % SECTOR_BYTES != 0 {
        bail!(
            "--size {size}: {bytes} bytes is not a whole number of 512-byte sectors; give a multiple of 512"
        );
    }
    if i64::try_from(bytes).is_err() {
        bail!("--size {size}: {bytes} bytes is larger than any file can be (at most {} bytes)", i64::MAX);
    }
    if path.exists() {
        let have = std::fs::metadata(path)?.len();
        if have != bytes && std::fs::metadata(path)?.is_file() {
            bail!("{}: exists with {have} bytes, not {bytes}; remove it or drop --size", path.display());
        }
        return Ok(false);
    }
    let f = std::fs::File::create(path).with_context(|| format!("{}: cannot create", path.display()))?;
    if let Err(e) = f.set_len(bytes) {
        let _ = std::fs::remove_file(path);
        bail!("{}: cannot make a {bytes}-byte file here ({e}); give a smaller --size", path.display());
    }
    Ok(true)
}

/// A regular file whose size is not a whole number of sectors is refused
/// naming its size (block devices always are).
fn check_whole_sectors(path: &Path) -> Result<()> {
    let Ok(meta) = std::fs::metadata(path) else { return Ok(()) };
    let sector = SECTOR_BYTES;
    if meta.is_file() && meta.len() % sector != 0 {
        bail!(
            "{}: {} bytes is not a whole number of 512-byte sectors; resize it (truncate -s {} {})",
            path.display(),
            meta.len(),
            meta.len() / sector * sector,
            path.display()
        );
    }
    Ok(())
}

#[derive(Args)]
#[command(
    after_help = "Examples:\n  layoutd serve --device vol.img                          # private Unix socket, prints the NBD URI\n  layoutd serve --device vol.img --listen 127.0.0.1:10809\n  layoutd serve --device vol.img --listen :10809 --tls-psk keys.psk   # beyond loopback: TLS (psktool -p keys.psk -u USER)\n  layoutd serve --device vol.img --run 'qemu-io -f raw -c \"write -P 7 0 1M\" \"$uri\"'\n  layoutd serve --device vol.ssd --emulate wd800 --record-trace run.trace\n\nWith --run, nbdkit runs the command once the export is ready ($uri, $nbd, $unixsocket are set) and stops when it exits (captive mode); the exit status is the command's. SIGINT or SIGTERM flush the volume and write the clean-shutdown mark. Anyone who can connect can read and overwrite the volume: on a TCP address other than loopback use --tls-psk or --tls-certificates (a warning says so otherwise). Block sizes are advertised as 512 minimum, 4096 preferred, 32 MiB maximum. nbdkit must be installed; the plugin (liblayoutd_nbd.so) is looked up next to this binary or in $LAYOUTD_NBD_PLUGIN, and must come from the same build (a plugin built from other sources is refused: rebuild both)."
)]
pub struct ServeArgs {
    /// A device formatted with `layoutd format` (repeat, in order, for every member of a
    /// multi-device volume).
    #[arg(long, value_name = "PATH", required = true)]
    device: Vec<PathBuf>,
    /// Unix socket to listen on (default: <device name>.sock in a private directory:
    /// $XDG_RUNTIME_DIR/layoutd, else <temp dir>/layoutd-<uid>, mode 0700).
    #[arg(long, value_name = "PATH", conflicts_with = "listen")]
    socket: Option<PathBuf>,
    /// Listen on TCP instead: 127.0.0.1:10809, [::1]:10809, or :10809 (every address).
    /// Anyone who can connect can read and overwrite the volume: use TLS beyond loopback.
    #[arg(long, value_name = "ADDR")]
    listen: Option<String>,
    /// Require TLS with X.509 certificates (from nbdkit's default directory, or
    /// --tls-certificates); see nbdkit-tls(1).
    #[arg(long)]
    tls: bool,
    /// Require TLS with the certificates in DIR (ca-cert.pem, server-cert.pem,
    /// server-key.pem).
    #[arg(long, value_name = "DIR", conflicts_with = "tls_psk")]
    tls_certificates: Option<PathBuf>,
    /// Require TLS with pre-shared keys: FILE holds `username:hexkey` lines
    /// (`psktool -p FILE -u USER` makes one; keep it mode 0600).
    #[arg(long, value_name = "FILE", conflicts_with = "tls")]
    tls_psk: Option<PathBuf>,
    /// With certificates: accept only clients presenting a certificate signed by the CA.
    #[arg(long, conflicts_with = "tls_psk")]
    tls_verify_peer: bool,
    /// Run this shell command against the export, then stop (nbdkit captive mode).
    #[arg(long, value_name = "CMD")]
    run: Option<String>,
    /// Record every request to FILE in layoutd's trace format (for `layoutd sim --closed-loop`).
    /// FILE must not exist (an existing regular file is replaced with --force; a symbolic
    /// link is never followed).
    #[arg(long, value_name = "FILE")]
    record_trace: Option<PathBuf>,
    /// Replace an existing --record-trace file.
    #[arg(long)]
    force: bool,
    /// Open the device with O_DIRECT.
    #[arg(long)]
    direct: bool,
    /// Serve even if recovery finds damaged metadata that costs data a client was told
    /// was safe (a dcd or log damaged before its last flushed segment, a log map page
    /// written before the checkpoint with no readable copy or with its current copy damaged:
    /// that page is unmapped, or, when the map's digests cannot single it out, every page
    /// that could be stale). Without it such a volume is refused,
    /// naming the damage; with it the loss is counted (`lost_segments_count`,
    /// `lost_map_pages_count`) and described in `layoutd inspect`. Copy the device first.
    #[arg(long)]
    accept_loss: bool,
    /// Hold every completion back by the HDD model's service time on one simulated arm, so a
    /// file system on a fast device behaves like this disk (presets: `layoutd disk show`).
    #[arg(long, value_name = "PRESET", conflicts_with = "emulate_diskspecs")]
    emulate: Option<String>,
    /// The same as --emulate, with a DiskSim parameter file.
    #[arg(long, value_name = "FILE")]
    emulate_diskspecs: Option<PathBuf>,
    /// With --emulate: record every request the emulated disk serves to FILE, one line each
    /// (arrival, start and completion ns on the runtime's clock, op, offset, length, cache hit,
    /// seek and rotation ns, seek distance): `layoutd sim --record-disk`'s format, so a live run
    /// and its replay compare request by request. Written when the server stops; replaced like
    /// --record-trace with --force.
    #[arg(long, value_name = "FILE")]
    record_disk: Option<PathBuf>,
    /// Control socket for runtime commands (`layoutd message`):
    /// default <NBD socket>.ctl (with --listen: <device name>.ctl in the private directory).
    /// Mode 0600: only its owner may command the volume.
    #[arg(long, value_name = "PATH")]
    control: Option<PathBuf>,
    /// nbdkit worker threads.
    #[arg(long, default_value_t = 16)]
    threads: u32,
    /// Extra KEY=VALUE passed to the plugin (testing: debug-panic-offset=N).
    #[arg(long, hide = true, value_name = "KEY=VALUE")]
    plugin_arg: Vec<String>,
    /// Print what would be run instead of running it.
    #[arg(long, hide = true)]
    dry_run: bool,
}

fn plugin_path() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("LAYOUTD_NBD_PLUGIN") {
        return Ok(PathBuf::from(p));
    }
    let exe = std::env::current_exe().context("cannot find the layoutd binary's own path")?;
    let dir = exe.parent().context("binary has no directory")?;
    for cand in [
        dir.join("liblayoutd_nbd.so"),
        dir.join("../lib/layoutd/liblayoutd_nbd.so"),
        dir.join("../liblayoutd_nbd.so"),
    ] {
        if cand.exists() {
            return Ok(cand);
        }
    }
    bail!(
        "cannot find the nbdkit plugin liblayoutd_nbd.so next to {} (build it with `cargo build --release`, or set LAYOUTD_NBD_PLUGIN)",
        exe.display()
    )
}

/// The devices' paths, comma-separated, for messages.
fn names(devices: &[PathBuf]) -> String {
    devices.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(", ")
}

fn default_socket(device: &Path) -> Result<PathBuf> {
    let name =
        device.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "volume".into());
    Ok(endpoint::private_runtime_dir()?.join(format!("{name}.sock")))
}

/// Refuses a `--record-trace` path that is a symbolic link, or an existing
/// file without `--force`. (The plugin opens it with O_NOFOLLOW, and O_EXCL
/// without --force, so a link planted after this check is refused too.)
fn check_trace_path(p: &Path, force: bool) -> Result<()> {
    let Ok(meta) = std::fs::symlink_metadata(p) else { return Ok(()) };
    if meta.file_type().is_symlink() {
        bail!(
            "--record-trace {}: is a symbolic link; refusing to follow it (give a new file name)",
            p.display()
        );
    }
    if !meta.is_file() {
        bail!("--record-trace {}: exists and is not a regular file; give a new file name", p.display());
    }
    if !force {
        bail!(
            "--record-trace {}: exists; remove it, give a new name, or pass --force to replace it",
            p.display()
        );
    }
    Ok(())
}

/// nbdkit leaves its socket file behind when it exits. Remove such a stale
/// socket; refuse one that something still listens on.
/// The control socket that goes with NBD socket `sock`.
fn control_path_of(sock: &Path) -> PathBuf {
    let mut p = sock.as_os_str().to_owned();
    p.push(".ctl");
    PathBuf::from(p)
}

fn clear_stale_socket(sock: &Path) -> Result<()> {
    use std::os::unix::fs::FileTypeExt;
    let Ok(meta) = std::fs::symlink_metadata(sock) else { return Ok(()) };
    if !meta.file_type().is_socket() {
        bail!("{}: exists and is not a socket; choose another --socket", sock.display());
    }
    if std::os::unix::net::UnixStream::connect(sock).is_ok() {
        bail!(
            "{}: another server is listening on this socket; stop it or choose another --socket",
            sock.display()
        );
    }
    std::fs::remove_file(sock).with_context(|| format!("{}: cannot remove the stale socket", sock.display()))
}

pub fn serve(a: ServeArgs) -> Result<()> {
    distinct(&a.device)?;
    // Check the devices ourselves first, so the common mistakes get one clear line.
    volume::check(&a.device)?;
    for d in &a.device {
        drop(layoutd_disk::FileDevice::open(d, false, true).map_err(|e| anyhow::anyhow!("{e}"))?);
    }
    if let Some(t) = &a.record_trace {
        check_trace_path(t, a.force)?;
    }
    let tls = endpoint::Tls::new(a.tls, a.tls_certificates.clone(), a.tls_psk.clone(), a.tls_verify_peer)?;
    let plugin = plugin_path()?;
    let mut cmd = std::process::Command::new("nbdkit");
    cmd.arg("--foreground").arg("--threads").arg(a.threads.to_string());
    cmd.args(tls.nbdkit_args());
    let mut nbd_socket = None;
    // Without --run, serve binds the address and hands the listener to nbdkit
    // (socket activation), so the socket accepts connections from the moment
    // it exists: a client that connects early waits in the backlog until the
    // volume is open. nbdkit refuses activation together with --run; there
    // nbdkit binds the address itself and starts the command once it has.
    let activate = a.run.is_none();
    let mut listener: Option<std::os::fd::OwnedFd> = None;
    // The socket file serve bound, removed again if serve fails before nbdkit runs.
    let mut bound_path = RemoveOnDrop(None);
    let uri = match &a.listen {
        Some(addr) => {
            let l = endpoint::Listen::parse(addr)?;
            let bound = l.bind()?;
            if activate {
                listener = Some(std::os::fd::OwnedFd::from(bound));
            } else {
                drop(bound);
                if let Some(host) = &l.host {
                    cmd.arg("--ipaddr").arg(host);
                }
                cmd.arg("--port").arg(l.port.to_string());
            }
            if !tls.is_on() && !l.is_loopback() {
                eprintln!(
                    "layoutd: WARNING: listening on {} WITHOUT TLS: anyone who can reach it can read and \
                     overwrite this volume. Use --tls-psk FILE or --tls-certificates DIR (README: \"Serving over TCP\").",
                    l.describe()
                );
            }
            endpoint::tcp_uri(&l, &tls)
        }
        None => {
            let sock = match &a.socket {
                Some(s) => s.clone(),
                None => default_socket(&a.device[0])?,
            };
            clear_stale_socket(&sock)?;
            // Bound here, so an unusable path is refused before nbdkit opens the volume.
            let bound = std::os::unix::net::UnixListener::bind(&sock).with_context(|| {
                format!("{}: cannot listen on this socket path; choose another --socket", sock.display())
            })?;
            if activate {
                listener = Some(std::os::fd::OwnedFd::from(bound));
                bound_path.0 = Some(sock.clone());
            } else {
                drop(bound);
                std::fs::remove_file(&sock)
                    .with_context(|| format!("{}: cannot remove the probe socket", sock.display()))?;
                cmd.arg("--unix").arg(&sock);
            }
            nbd_socket = Some(sock.clone());
            endpoint::unix_uri(&sock, &tls)
        }
    };
    let control = match (&a.control, &nbd_socket) {
        (Some(c), _) => c.clone(),
        (None, Some(sock)) => control_path_of(sock),
        (None, None) => control_path_of(&default_socket(&a.device[0])?),
    };
    clear_stale_socket(&control).map_err(|e| anyhow::anyhow!("--control: {e}"))?;
    if let Some(run) = &a.run {
        // nbdkit's own $uri carries no TLS key file or user: give the command ours.
        let run =
            if tls.is_on() { format!("uri={}; {run}", endpoint::shell_quote(&uri)) } else { run.clone() };
        cmd.arg("--run").arg(run);
    }
    // Advertise the NBD block-size limits (the nbdkit crate has no block_size
    // callback): 512-byte sectors, 4 KiB preferred, 32 MiB per request. Larger
    // requests from clients that ignore the maximum are still split by the plugin.
    cmd.arg("--filter=blocksize-policy");
    cmd.arg(&plugin);
    cmd.args([
        "blocksize-minimum=512".to_string(),
        "blocksize-preferred=4096".to_string(),
        format!("blocksize-maximum={}", layoutd_core::REQUEST_BYTES_MAX),
    ]);
    for d in &a.device {
        cmd.arg(format!("device={}", d.display()));
    }
    cmd.arg(format!("control={}", control.display()));
    if a.direct {
        cmd.arg("direct=true");
    }
    if a.accept_loss {
        cmd.arg("accept-loss=true");
    }
    if let Some(t) = &a.record_trace {
        cmd.arg(format!("record-trace={}", t.display()));
        if a.force {
            cmd.arg("record-trace-overwrite=true");
        }
    }
    if let Some(p) = &a.emulate {
        layoutd_hdd::DiskParams::preset(p)?; // refuse an unknown preset here, with the list
        cmd.arg(format!("emulate={p}"));
    }
    if let Some(p) = &a.emulate_diskspecs {
        layoutd_hdd::DiskParams::from_diskspecs(p)?;
        cmd.arg(format!("emulate-diskspecs={}", p.display()));
    }
    if let Some(p) = &a.record_disk {
        if a.emulate.is_none() && a.emulate_diskspecs.is_none() {
            bail!("--record-disk records the emulated disk: give --emulate or --emulate-diskspecs too");
        }
        check_trace_path(p, a.force)?;
        cmd.arg(format!("record-disk={}", p.display()));
        if a.force {
            cmd.arg("record-trace-overwrite=true");
        }
    }
    // The plugin prints "serving ... at URI" once nbdkit has bound the socket.
    cmd.arg(format!("announce-uri={uri}"));
    // The plugin refuses to start if it was built from other sources than this binary.
    cmd.arg(format!("source-id={}", layoutd_runtime::SOURCE_ID));
    cmd.args(&a.plugin_arg);
    if listener.is_some() {
        cmd.env("LISTEN_FDS", "1")
            .env("LISTEN_PID", std::process::id().to_string())
            .env_remove("LISTEN_FDNAMES");
    }
    if a.dry_run {
        println!("{cmd:?}");
        return Ok(());
    }
    if let Some(fd) = listener {
        listen_fd_3(fd)?;
    }
    let err = cmd.exec();
    bail!("cannot start nbdkit: {err} (install it: apt-get install nbdkit)")
}

/// Socket activation (nbdkit-service(1)): the listener becomes file
/// descriptor 3 of this process, which `exec` turns into nbdkit; the caller
/// sets `LISTEN_FDS=1` and `LISTEN_PID` to this process (exec keeps the pid).
fn listen_fd_3(fd: std::os::fd::OwnedFd) -> Result<()> {
    use std::os::fd::{AsRawFd, IntoRawFd};
    const FIRST_LISTEN_FD: i32 = 3;
    let raw = fd.as_raw_fd();
    // SAFETY: plain descriptor calls on a descriptor this function owns; dup2
    // onto 3 replaces whatever was there (exec closes it anyway unless inherited).
    let ok = unsafe {
        if raw == FIRST_LISTEN_FD {
            let flags = libc::fcntl(raw, libc::F_GETFD);
            flags >= 0 && libc::fcntl(raw, libc::F_SETFD, flags & !libc::FD_CLOEXEC) == 0
        } else {
            libc::dup2(raw, FIRST_LISTEN_FD) == FIRST_LISTEN_FD
        }
    };
    if !ok {
        bail!("cannot hand the listening socket to nbdkit: {}", std::io::Error::last_os_error());
    }
    if raw == FIRST_LISTEN_FD {
        let _ = fd.into_raw_fd(); // stays open across exec as nbdkit's listener
    }
    Ok(())
}

/// Removes a path when dropped: a socket file `serve` bound but never handed
/// over (an error before exec, or `--dry-run`).
struct RemoveOnDrop(Option<PathBuf>);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        if let Some(p) = self.0.take() {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// Refuses the same device given twice (the second open would find the
/// first one's lock and blame another process).
fn distinct(devices: &[PathBuf]) -> Result<()> {
    let mut seen: Vec<(PathBuf, &Path)> = Vec::new();
    for d in devices {
        let key = std::fs::canonicalize(d).unwrap_or_else(|_| d.clone());
        if let Some((_, first)) = seen.iter().find(|(k, _)| *k == key) {
            bail!(
                "--device {}: given twice (also as {}); give each member once",
                d.display(),
                first.display()
            );
        }
        seen.push((key, d));
    }
    Ok(())
}

#[derive(Args)]
#[command(
    after_help = "Examples:\n  layoutd inspect --device vol.img\n  layoutd inspect --device vol.img --json | jq .config\n\nReads only; safe while the device is served."
)]
pub struct InspectArgs {
    /// The device to inspect (repeat, in order, for every member of a multi-device volume).
    #[arg(long, value_name = "PATH", required = true)]
    device: Vec<PathBuf>,
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
}

fn uuid_string(u: &[u8; 16]) -> String {
    let h: String = u.iter().map(|b| format!("{b:02x}")).collect();
    format!("{}-{}-{}-{}-{}", &h[0..8], &h[8..12], &h[12..16], &h[16..20], &h[20..32])
}

pub fn inspect(a: InspectArgs) -> Result<()> {
    distinct(&a.device)?;
    let (sb, stack): (Superblock, _) = volume::inspect_stack(&a.device)?;
    let layers = stack.layer_statuses();
    if a.json {
        let v = serde_json::json!({
            "device": names(&a.device),
            "member_count": volume::member_data_bytes(&sb).len(),
            "format_version": layoutd_core::superblock::FORMAT_VERSION,
            "uuid": uuid_string(&sb.uuid),
            "generation": sb.generation,
            "clean": sb.clean,
            "device_size_bytes": sb.device_size_bytes,
            "data_start_bytes": sb.data_start_bytes,
            "volume_size_bytes": stack.size_bytes(),
            "config": sb.config,
            "layers": layers,
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    println!("device:            {}", names(&a.device));
    println!("format version:    {}", layoutd_core::superblock::FORMAT_VERSION);
    println!("uuid:              {}", uuid_string(&sb.uuid));
    println!("generation:        {}", sb.generation);
    println!(
        "state:             {}",
        if sb.clean { "clean" } else { "dirty (not shut down cleanly, or being served)" }
    );
    if sb.config.device.is_empty() {
        println!("device size:       {} bytes", sb.device_size_bytes);
    } else {
        for (i, (m, path)) in sb.config.device.iter().zip(&a.device).enumerate() {
            println!("member {i}:          {} ({} bytes)", path.display(), m.size_bytes);
        }
    }
    println!("data starts at:    {} bytes", sb.data_start_bytes);
    println!("volume size:       {} bytes", stack.size_bytes());
    println!("stack (top first; persistent state such as a dcd log is recovered, request counters start at this open):");
    for l in &layers {
        println!("  {l}");
    }
    println!(
        "config:\n{}",
        sb.config.to_toml().lines().map(|l| format!("  {l}")).collect::<Vec<_>>().join("\n")
    );
    Ok(())
}

#[derive(Args)]
#[command(
    after_help = "Examples:\n  layoutd destage --device vol.img\n\nOpens the device (it must not be served), lets every target finish its background work with no foreground load (a `dcd` target destages its whole log to the data region), flushes, checks that no dirty log segment is left, and writes the clean mark. After this a `dcd` volume's data region alone is a plain disk with the file system's layout."
)]
pub struct DestageArgs {
    /// The device to drain (repeat, in order, for every member of a multi-device volume).
    #[arg(long, value_name = "PATH", required = true)]
    device: Vec<PathBuf>,
}

pub fn destage(a: DestageArgs) -> Result<()> {
    distinct(&a.device)?;
    volume::check(&a.device)?;
    let statuses = volume::destage(&a.device, || eprintln!("layoutd: draining {} ...", names(&a.device)))?;
    println!("drained {}; stack now:", names(&a.device));
    for s in statuses {
        println!("  {s}");
    }
    Ok(())
}

#[derive(Args)]
#[command(
    after_help = "Examples:\n  layoutd message --device vol.img destage                 # offline: opens, delivers, finishes the work, marks clean\n  layoutd message --socket /run/user/0/layoutd/vol.img.sock destage   # online: a running `layoutd serve`\n  layoutd message --control vol.ctl 2:destage                # to layer 2 only (layers count from the top)\n\nA message is a runtime command to the volume's targets (device-mapper's `message`): `destage` (dcd), and what each target documents in docs/<target>.md. Without a layer number every layer is offered it, top first, and the first that knows it answers. Online, the command runs between requests: every write completed before it is seen, none after. Exit status 1 if a target refuses it, with the reason."
)]
pub struct MessageArgs {
    #[command(flatten)]
    to: CommandFlags,
    /// The message, e.g. `destage` or `snapshot create s1` (words are joined by spaces).
    #[arg(required = true, num_args = 1.., value_name = "TEXT")]
    text: Vec<String>,
}

/// Where a runtime command goes, as flags (shared by `message` and the
/// target commands built on it, such as `opt`).
#[derive(Args)]
pub struct CommandFlags {
    /// Offline: a device formatted with `layoutd format` (repeat for each member); it must not be served.
    #[arg(long, value_name = "PATH", conflicts_with_all = ["socket", "control"])]
    device: Vec<PathBuf>,
    /// Online: the NBD Unix socket of a running `layoutd serve` (its control socket is <PATH>.ctl).
    #[arg(long, value_name = "PATH", conflicts_with = "control")]
    socket: Option<PathBuf>,
    /// Online: the control socket of a running `layoutd serve` (its --control).
    #[arg(long, value_name = "PATH")]
    control: Option<PathBuf>,
}

impl CommandFlags {
    /// The [`CommandTarget`] these flags name.
    pub fn target(&self) -> Result<CommandTarget> {
        CommandTarget::from_flags(&self.device, &self.socket, &self.control)
    }
}

/// Where a command for a volume goes: online to a control socket, or
/// offline to the devices.
pub enum CommandTarget {
    /// A running `layoutd serve`'s control socket.
    Online(PathBuf),
    /// The devices themselves (not served).
    Offline(Vec<PathBuf>),
}

impl CommandTarget {
    /// From `--device` / `--socket` / `--control`.
    pub fn from_flags(
        device: &[PathBuf],
        socket: &Option<PathBuf>,
        control: &Option<PathBuf>,
    ) -> Result<Self> {
        match (device.is_empty(), socket, control) {
            (_, _, Some(c)) => Ok(CommandTarget::Online(c.clone())),
            (_, Some(s), None) => Ok(CommandTarget::Online(control_path_of(s))),
            (false, None, None) => {
                distinct(device)?;
                Ok(CommandTarget::Offline(device.to_vec()))
            }
            (true, None, None) => bail!(
                "give --device PATH (offline), or --socket / --control of a running `layoutd serve` (online)"
            ),
        }
    }

    /// Offline, refuses a volume without a `target` layer before opening
    /// it, naming the stack (an `opt status` on a log volume printed the
    /// log's status and succeeded; a `snapshot` command opened the volume
    /// before the log refused the message). Online, the running stack
    /// refuses the command itself.
    pub fn require_layer(&self, target: &str) -> Result<()> {
        let CommandTarget::Offline(paths) = self else { return Ok(()) };
        let sb = volume::check(paths)?;
        if sb.config.layer.iter().any(|l| l.target == target) {
            return Ok(());
        }
        let stack: Vec<&str> = sb.config.layer.iter().map(|l| l.target.as_str()).collect();
        bail!(
            "{}: this volume has no `{target}` layer (its stack, top first: {}); `layoutd message` sends what its targets take",
            names(paths),
            stack.join(", ")
        )
    }

    /// Delivers `text`: the target's reply, or an error with its refusal.
    pub fn send(&self, text: &str) -> Result<String> {
        let reply = match self {
            CommandTarget::Online(path) => layoutd_runtime::control::send(path, text).map_err(|e| {
                anyhow::anyhow!(
                    "{}: cannot reach the control socket ({e}); is `layoutd serve` running with this --socket/--control?",
                    path.display()
                )
            })?,
            CommandTarget::Offline(paths) => volume::message(paths, text)?,
        };
        let named = match self {
            CommandTarget::Online(path) => path.display().to_string(),
            CommandTarget::Offline(paths) => names(paths),
        };
        reply.map_err(|why| anyhow::anyhow!("{named}: the volume refused `{text}`: {why}"))
    }
}

pub fn message(a: MessageArgs) -> Result<()> {
    let target = a.to.target()?;
    let reply = target.send(&a.text.join(" "))?;
    println!("{reply}");
    Ok(())
}

#[derive(Args)]
#[command(
    after_help = "Examples:\n  layoutd free-space --device vol.img\n\nOpens the device (it must not be served) and has its `replica` layer read the ext2/3/4 superblock, group descriptors and block bitmaps of the file system on the volume; the free blocks become free space for replicas (and read back as zeroes, as after a discard). The scan runs before anything is written (the volume is brought up once, its writes held in memory): an unknown or corrupt file system, or one whose journal needs recovery (mounted, or not cleanly unmounted), is reported in one line and nothing is written. Otherwise the recovery's and the scan's writes are made, the result is flushed, saved in the layer's snapshot when it has one, and the device marked clean."
)]
pub struct FreeSpaceArgs {
    /// The device (repeat, in order, for every member of a multi-device volume).
    #[arg(long, value_name = "PATH", required = true)]
    device: Vec<PathBuf>,
}

/// The scan's result in a layer's status: (error, blocks declared).
fn scan_result(statuses: &[layoutd_core::Status]) -> (Option<String>, u64) {
    let error = statuses.iter().flat_map(|s| s.config.iter()).find(|c| c.0 == "fs_scan_error");
    let declared = statuses.iter().flat_map(|s| s.counters.iter()).find(|c| c.0 == "fs_scan_declared_blocks");
    (error.map(|e| e.1.clone()), declared.map_or(0, |d| d.1))
}

pub fn free_space(a: FreeSpaceArgs) -> Result<()> {
    distinct(&a.device)?;
    CommandTarget::Offline(a.device.clone()).require_layer("replica")?;
    // One bring-up: the scan runs before anything is written, and its
    // error (a dry run's answer) leaves the device as it was.
    let (_, statuses) = match volume::drain_checked(&a.device, "free-space", &|st| scan_result(st).0)? {
        Ok(done) => done,
        Err(e) => bail!("{}: {e}; nothing written", names(&a.device)),
    };
    let (_, declared) = scan_result(&statuses);
    println!("{}: {declared} free block(s) declared; stack now:", names(&a.device));
    let no_snapshot =
        statuses.iter().flat_map(|s| s.config.iter()).any(|c| c.0 == "snapshot_bytes" && c.1 == "0");
    if no_snapshot {
        println!("  (snapshot_bytes = 0: the free map is not saved; the next open starts without it)");
    }
    for s in statuses {
        println!("  {s}");
    }
    Ok(())
}
