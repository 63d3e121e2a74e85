//! The nbdkit plugin that serves a layoutd volume.
//!
//! `nbdkit liblayoutd_nbd.so device=PATH [device=PATH ...] [direct=true]
//! [accept-loss=true] [record-trace=FILE] [emulate=PRESET] [control=SOCKET]` (normally started
//! for you by `layoutd serve`, which also adds the blocksize-policy filter). The volume is opened and
//! recovered in `config_complete`, so a bad device stops nbdkit before it
//! listens; the live runtime's threads start in `after_fork`. On shutdown
//! (`unload`: SIGINT, SIGTERM, or the end of `--run`) the stack is flushed
//! and the clean-shutdown mark is written.
//!
//! `control=SOCKET`: a Unix socket (mode 0600, created after the volume
//! starts, removed on unload) on which runtime commands reach the stack
//! (`layoutd message`; protocol in [`layoutd_runtime::control`]).
//!
//! Every callback runs inside `catch_unwind`: a panic never crosses the FFI
//! boundary; the request fails with EIO and the panic is logged. After a
//! panic inside the stack, every later request fails with EIO.
//!
//! Each NBD connection is a base stream (the live runtime's stream detector
//! splits interleaved sequential runs within it). Multi-conn is advertised: the stack is
//! shared by all connections and a flush (or FUA) makes every completed
//! write from every connection durable before it replies.

mod allocation;

use allocation::Allocation;
use layoutd_core::{Completion, IoError, Op, ReqId, Request, StreamId, REQUEST_BYTES_MAX};
use layoutd_runtime::emulate::MemberEmulators;
use layoutd_runtime::live::{LiveVolume, RecordSink};
use layoutd_runtime::volume;
use nbdkit::{Error, ExtentHandle, ExtentType, Flags, FuaFlags, Result, Server, ThreadModel};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

#[derive(Default)]
struct Settings {
    devices: Vec<PathBuf>,
    direct: bool,
    /// Open a volume whose recovery finds damage that costs flushed data.
    accept_loss: bool,
    record_trace: Option<PathBuf>,
    /// Replace an existing record-trace file (never through a symbolic link).
    record_trace_overwrite: bool,
    /// The URI `layoutd serve` computed, printed once nbdkit has bound it.
    announce_uri: Option<String>,
    /// Fault injection for tests: a read at exactly this offset panics.
    debug_panic_offset: Option<u64>,
    /// Emulate this HDD preset (or DiskSim specs file) on completions.
    emulate: Option<String>,
    emulate_diskspecs: Option<PathBuf>,
    /// Record every request the emulated disk serves here (`emulate`'s
    /// `DiskRecord`, the format of `layoutd sim --record-disk`).
    record_disk: Option<PathBuf>,
    /// The control socket to create.
    control: Option<PathBuf>,
}

/// What `config_complete` opened, waiting for `after_fork` to start serving.
struct Opened {
    members: Vec<volume::Member>,
    /// The stack and its bottom device, until `after_fork` starts them.
    pending: Option<(Box<dyn layoutd_core::Target>, Arc<dyn layoutd_disk::BlockDevice>)>,
    /// Each member's extent on the bottom device, for per-disk emulation.
    extents: Vec<(u64, u64)>,
    data_start_bytes: u64,
    /// The record-trace file, opened before nbdkit listens.
    trace_file: Option<std::fs::File>,
    /// The record-disk file, likewise.
    disk_file: Option<std::fs::File>,
    /// Whether the volume was shut down cleanly before this open.
    was_clean: bool,
    /// Read-only descriptors of the members, for block status (holes).
    allocation: Option<Allocation>,
}

static SETTINGS: Mutex<Settings> = Mutex::new(Settings {
    devices: Vec::new(),
    direct: false,
    accept_loss: false,
    record_trace: None,
    record_trace_overwrite: false,
    announce_uri: None,
    debug_panic_offset: None,
    emulate: None,
    emulate_diskspecs: None,
    record_disk: None,
    control: None,
});
static CONTROL: Mutex<Option<layoutd_runtime::control::ControlServer>> = Mutex::new(None);
static OPENED: Mutex<Option<Opened>> = Mutex::new(None);
static LIVE: OnceLock<Arc<LiveVolume>> = OnceLock::new();
static ALLOCATION: OnceLock<Allocation> = OnceLock::new();
static NEXT_STREAM: AtomicU32 = AtomicU32::new(0);

/// The member devices' paths, comma-separated, for messages.
fn member_names(members: &[volume::Member]) -> String {
    members.iter().map(|m| m.path.display().to_string()).collect::<Vec<_>>().join(", ")
}

/// Refuses to serve with a plugin built from other sources than the
/// `layoutd` binary that started it: the two could disagree on the on-disk
/// formats (a stale plugin once took a newer build's journal block for a
/// torn tail and dropped a snapshot).
fn check_source_id(theirs: &str) -> Result<()> {
    let ours = layoutd_runtime::SOURCE_ID;
    if theirs != ours {
        let me = plugin_file().unwrap_or_else(|| "liblayoutd_nbd.so".into());
        // The profile the plugin sits in (cargo's target/debug or target/release).
        let build = if me.contains("/debug/") {
            "cargo build --workspace"
        } else {
            "cargo build --workspace --release"
        };
        return Err(Error::new(
            libc::EINVAL,
            format!(
                "the plugin {me} was built from other sources (source id {ours}) than the layoutd binary \
                 that started it ({theirs}); a mismatched pair can misread the volume's metadata: \
                 rebuild both with `{build}`"
            ),
        ));
    }
    Ok(())
}

/// This plugin's own file, for messages.
fn plugin_file() -> Option<String> {
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: dladdr reads the loader's tables for an address inside this library.
    let found = unsafe { libc::dladdr(plugin_file as *const libc::c_void, &mut info) } != 0;
    if !found || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: dli_fname is a NUL-terminated path owned by the loader.
    Some(unsafe { std::ffi::CStr::from_ptr(info.dli_fname) }.to_string_lossy().into_owned())
}

fn parse_bool(key: &str, value: &str) -> Result<bool> {
    value.parse().map_err(|_| Error::new(libc::EINVAL, format!("{key}={value}: use true or false")))
}

/// Creates the file of parameter `key` (record-trace, record-disk) without
/// following a symbolic link at `path` (O_NOFOLLOW), and without replacing
/// an existing file (O_EXCL) unless `overwrite`.
fn create_record_file(key: &str, path: &std::path::Path, overwrite: bool) -> Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut o = std::fs::OpenOptions::new();
    o.write(true).custom_flags(libc::O_NOFOLLOW).mode(0o644);
    if overwrite {
        o.create(true).truncate(true);
    } else {
        o.create_new(true);
    }
    o.open(path).map_err(|e| {
        let why = match e.raw_os_error() {
            Some(libc::ELOOP) => {
                "is a symbolic link; refusing to follow it (give a new file name)".to_string()
            }
            Some(libc::EEXIST) => "exists; remove it or replace it with `layoutd serve --force`".to_string(),
            _ => format!("cannot create the file: {e}"),
        };
        Error::new(libc::EINVAL, format!("{key}={}: {why}", path.display()))
    })
}

fn eio(msg: impl Into<String>) -> Error {
    Error::new(libc::EIO, msg.into())
}

/// Runs `f`, turning a panic into an EIO error that names the callback.
fn guarded<T>(what: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(p) => {
            let msg = layoutd_runtime::live::panic_message(&*p);
            eprintln!("layoutd: internal error in {what}: {msg}; failing the request with EIO");
            Err(eio(format!("layoutd internal error in {what}: {msg}")))
        }
    }
}

fn to_result(c: Completion) -> Result<Completion> {
    match c.result {
        Ok(()) => Ok(c),
        Err(e @ IoError::Invalid) => Err(Error::new(libc::EINVAL, e.to_string())),
        Err(e @ IoError::NoSpace) => Err(Error::new(libc::ENOSPC, e.to_string())),
        // nbdkit sends EROFS as NBD_EPERM, as it does for its own refusal
        // of a write to a read-only export.
        Err(e @ IoError::ReadOnly) => Err(Error::new(libc::EROFS, e.to_string())),
        Err(e @ IoError::Io) => Err(eio(e.to_string())),
    }
}

struct Connection {
    debug_panic_offset: Option<u64>,
    live: Arc<LiveVolume>,
    stream: StreamId,
    /// The export's range of the stack (a volume of a `pool`; else all of it).
    base_bytes: u64,
    size_bytes: u64,
    /// A read-only snapshot's export.
    read_only: bool,
}

impl Connection {
    fn call(&self, op: Op, offset: u64, count: u32, fua: bool, data: Option<&[u8]>) -> Result<Completion> {
        let offset = if op == Op::Flush { 0 } else { self.base_bytes + offset };
        let mut req = Request::new(ReqId(0), op, offset, count);
        req.fua = fua;
        req.stream = self.stream;
        req.data = data.map(bytes::Bytes::copy_from_slice);
        to_result(self.live.submit(req))
    }

    /// NBD allows trims and zeroes up to 4 GiB and reads and writes up to
    /// nbdkit's 64 MiB; the request model caps requests at 32 MiB
    /// (`REQUEST_BYTES_MAX`, also advertised as the maximum block size), so
    /// split larger ones. FUA is kept on every piece: each piece must be
    /// durable when the whole request is acknowledged.
    fn call_ranged(&self, op: Op, offset: u64, count: u32, fua: bool) -> Result<()> {
        for (at, n) in pieces(count) {
            self.call(op, offset + u64::from(at), n, fua, None)?;
        }
        Ok(())
    }
}

/// `(start, length)` pieces of at most `REQUEST_BYTES_MAX` covering `0..count`.
fn pieces(count: u32) -> impl Iterator<Item = (u32, u32)> {
    (0..count).step_by(REQUEST_BYTES_MAX as usize).map(move |at| (at, (count - at).min(REQUEST_BYTES_MAX)))
}

impl Server for Connection {
    fn name() -> &'static str {
        "layoutd"
    }

    fn description() -> Option<&'static str> {
        Some("layoutd: a self-optimizing block storage layer (serves a formatted layoutd device)")
    }

    fn config_help() -> Option<&'static str> {
        Some(
            "device=PATH        (required) a device formatted with `layoutd format`; repeat, in order,\n\
                    for each member of a multi-device volume\n\
             direct=true|false  open with O_DIRECT (default false)\n\
             record-trace=FILE  record every request in layoutd's trace format (FILE must not exist;\n\
                    a symbolic link is never followed)\n\
             record-trace-overwrite=true  replace an existing record-trace file\n\
             announce-uri=URI   print this URI in the \"serving\" line (layoutd serve sets it)\n\
             emulate=PRESET     hold completions back by the HDD model's service time (wd800, ...)\n\
             emulate-diskspecs=FILE  the same, with a DiskSim parameter file\n\
             record-disk=FILE   with emulate: record every request the emulated disk serves (arrival,\n\
                    start, completion, hit, seek, rotation; `layoutd sim --record-disk`'s format;\n\
                    replaced with record-trace-overwrite=true)\n\
             control=SOCKET     accept runtime commands (`layoutd message`) on this Unix socket\n\
             source-id=ID       refuse to start unless built from the same sources as the layoutd\n\
                    binary that passes it (layoutd serve sets it)",
        )
    }

    fn thread_model() -> Result<ThreadModel> {
        Ok(ThreadModel::Parallel)
    }

    fn config(key: &str, value: &str) -> Result<()> {
        guarded("config", || {
            let mut s = SETTINGS.lock().map_err(|_| eio("settings lock"))?;
            match key {
                "device" | "file" => s.devices.push(PathBuf::from(value)),
                "direct" => s.direct = parse_bool("direct", value)?,
                "accept-loss" => s.accept_loss = parse_bool("accept-loss", value)?,
                "record-trace" => s.record_trace = Some(PathBuf::from(value)),
                "record-trace-overwrite" => s.record_trace_overwrite = parse_bool("record-trace-overwrite", value)?,
                "announce-uri" => s.announce_uri = Some(value.to_string()),
                "emulate" => s.emulate = Some(value.to_string()),
                "emulate-diskspecs" => s.emulate_diskspecs = Some(PathBuf::from(value)),
                "record-disk" => s.record_disk = Some(PathBuf::from(value)),
                "control" => s.control = Some(PathBuf::from(value)),
                "source-id" => check_source_id(value)?,
                "debug-panic-offset" => {
                    s.debug_panic_offset = Some(
                        value
                            .parse()
                            .map_err(|_| Error::new(libc::EINVAL, "debug-panic-offset: a number"))?,
                    )
                }
                other => {
                    return Err(Error::new(
                        libc::EINVAL,
                        format!("unknown parameter `{other}` (known: device, direct, accept-loss, record-trace, record-trace-overwrite, announce-uri, emulate, emulate-diskspecs, record-disk, control, source-id)"),
                    ))
                }
            }
            Ok(())
        })
    }

    fn config_complete() -> Result<()> {
        guarded("config_complete", || {
            let s = SETTINGS.lock().map_err(|_| eio("settings lock"))?;
            if s.devices.is_empty() {
                return Err(Error::new(
                    libc::EINVAL,
                    "device=PATH is required (repeat it for each member of a multi-device volume)",
                ));
            }
            // The trace file first: a refused path must not leave the volume marked dirty.
            let trace_file = match &s.record_trace {
                Some(p) => Some(create_record_file("record-trace", p, s.record_trace_overwrite)?),
                None => None,
            };
            let disk_file = match &s.record_disk {
                Some(_) if s.emulate.is_none() && s.emulate_diskspecs.is_none() => {
                    return Err(Error::new(libc::EINVAL, "record-disk needs emulate or emulate-diskspecs"))
                }
                Some(p) => Some(create_record_file("record-disk", p, s.record_trace_overwrite)?),
                None => None,
            };
            let vol = volume::open_with(&s.devices, s.direct, s.accept_loss)
                .map_err(|e| Error::new(libc::EINVAL, e.to_string()))?;
            let extents = vol.member_extents();
            let data_start_bytes = vol.superblock.data_start_bytes;
            let was_clean = vol.superblock.clean;
            // Best effort: without these descriptors every range is reported as data.
            let files: std::io::Result<Vec<std::fs::File>> =
                s.devices.iter().map(std::fs::File::open).collect();
            let allocation = files.ok().map(|f| Allocation::new(f, extents.clone(), data_start_bytes));
            let volume::Volume { members, data, stack, .. } = vol;
            *OPENED.lock().map_err(|_| eio("lock"))? = Some(Opened {
                members,
                pending: Some((stack, data)),
                extents,
                data_start_bytes,
                trace_file,
                disk_file,
                was_clean,
                allocation,
            });
            Ok(())
        })
    }

    fn after_fork() -> Result<()> {
        guarded("after_fork", || {
            let settings = SETTINGS.lock().map_err(|_| eio("settings lock"))?;
            let announce_uri = settings.announce_uri.clone();
            let control = settings.control.clone();
            let params = layoutd_hdd::DiskParams::named(
                settings.emulate.as_deref(),
                settings.emulate_diskspecs.as_deref(),
            )
            .map_err(|e| Error::new(libc::EINVAL, e.to_string()))?;
            drop(settings);
            let mut opened = OPENED.lock().map_err(|_| eio("lock"))?;
            let o = opened.as_mut().ok_or_else(|| eio("after_fork before config_complete"))?;
            let sink: Option<RecordSink> =
                o.trace_file.take().map(|f| Box::new(std::io::BufWriter::new(f)) as RecordSink);
            let (mut stack, data) = o.pending.take().ok_or_else(|| eio("volume already started"))?;
            if sink.is_some() {
                stack = layoutd_targets::trace::recording(stack);
            }
            // One emulated disk (one arm) per member device.
            let record = o.disk_file.take().map(|f| {
                Arc::new(Mutex::new(layoutd_runtime::emulate::DiskRecord::new(Box::new(
                    std::io::BufWriter::new(f),
                ))))
            });
            let delay = params.map(|p| {
                Arc::new(MemberEmulators::recording(&p, &o.extents, o.data_start_bytes, record))
                    as Arc<dyn layoutd_runtime::live::Delay>
            });
            let size = stack.size_bytes();
            let live = LiveVolume::start(stack, data, sink, delay);
            LIVE.set(live.clone()).map_err(|_| eio("volume started twice"))?;
            if let Some(path) = &control {
                let server = layoutd_runtime::control::ControlServer::start(
                    path,
                    Box::new(move |text: &str| live.message(text)),
                )
                .map_err(|e| {
                    Error::new(libc::EINVAL, format!("control={}: cannot listen: {e}", path.display()))
                })?;
                *CONTROL.lock().map_err(|_| eio("lock"))? = Some(server);
            }
            if let Some(a) = o.allocation.take() {
                let _ = ALLOCATION.set(a);
            }
            // nbdkit calls after_fork once its sockets are bound: only now is the volume served.
            eprintln!(
                "layoutd: serving {} ({size} bytes{}){}",
                member_names(&o.members),
                if o.was_clean { "" } else { ", recovered after an unclean shutdown" },
                announce_uri.map(|u| format!(" at {u}")).unwrap_or_default()
            );
            if let Some(path) = &control {
                eprintln!(
                    "layoutd: control socket {} (`layoutd message --control {}` TEXT)",
                    path.display(),
                    path.display()
                );
            }
            Ok(())
        })
    }

    fn unload() {
        let _ = guarded("unload", || {
            // No commands during shutdown; the socket file goes.
            drop(CONTROL.lock().map_err(|_| eio("lock"))?.take());
            let mut opened = OPENED.lock().map_err(|_| eio("lock"))?;
            let Some(o) = opened.as_mut() else { return Ok(()) };
            let live = match (LIVE.get(), o.pending.take()) {
                (Some(live), _) => live.clone(),
                // Opened but never served (nbdkit could not bind, say): shut the
                // stack down exactly as after a serve with no clients, so the
                // volume is not left marked dirty.
                (None, Some((stack, data))) => LiveVolume::start(stack, data, None, None),
                (None, None) => return Ok(()),
            };
            let flushed = live.submit(Request::new(ReqId(0), Op::Flush, 0, 0));
            // The counters of the whole run, once (they live in memory only).
            if let Some(st) = live.status() {
                eprintln!("layoutd: final status: {st}");
            }
            live.stop();
            let names = member_names(&o.members);
            match flushed.result {
                Ok(()) => match volume::mark_clean(&o.members) {
                    Ok(()) => eprintln!("layoutd: {names}: flushed and marked clean"),
                    Err(e) => eprintln!("layoutd: could not write the clean mark: {e}"),
                },
                Err(e) => eprintln!("layoutd: {names}: final flush failed ({e}); left marked dirty"),
            }
            Ok(())
        });
    }

    fn open(_readonly: bool) -> Result<Box<dyn Server>> {
        guarded("open", || {
            let live = LIVE.get().ok_or_else(|| eio("volume not started"))?.clone();
            let (base_bytes, size_bytes, read_only) = match exports::volumes(&live) {
                Some(vols) => {
                    let name = nbdkit::export_name().unwrap_or_default();
                    exports::find(&vols, &name).ok_or_else(|| {
                        let names: Vec<&str> = vols.iter().map(|v| v.0.as_str()).collect();
                        Error::new(
                            libc::ENOENT,
                            format!("no export `{name}` (exports: {})", names.join(", ")),
                        )
                    })?
                }
                None => (0, live.size_bytes(), false),
            };
            let stream = StreamId(NEXT_STREAM.fetch_add(1, Ordering::Relaxed));
            let debug_panic_offset = SETTINGS.lock().map_err(|_| eio("settings lock"))?.debug_panic_offset;
            Ok(Box::new(Connection { debug_panic_offset, live, stream, base_bytes, size_bytes, read_only })
                as Box<dyn Server>)
        })
    }

    fn get_size(&self) -> Result<i64> {
        Ok(self.size_bytes as i64)
    }

    fn can_write(&self) -> Result<bool> {
        Ok(!self.read_only)
    }
    fn can_flush(&self) -> Result<bool> {
        Ok(true)
    }
    fn can_trim(&self) -> Result<bool> {
        Ok(true)
    }
    fn can_zero(&self) -> Result<bool> {
        Ok(true)
    }
    fn can_fua(&self) -> Result<FuaFlags> {
        Ok(FuaFlags::Native)
    }
    fn can_multi_conn(&self) -> Result<bool> {
        Ok(true)
    }
    fn can_extents(&self) -> Result<bool> {
        Ok(true)
    }

    /// Holes (never written or trimmed, where the stack keeps the bytes
    /// unchanged on the member files) are reported as zero holes; anything
    /// the stack cannot map (`Target::map_extent` is `None`) as data.
    fn extents(&self, count: u32, offset: u64, _flags: Flags, h: &mut ExtentHandle) -> Result<()> {
        guarded("extents", || {
            let mut runs: Vec<(u64, bool)> = Vec::new();
            for (lower, n) in self.live.map_extent(self.base_bytes + offset, u64::from(count)) {
                match (ALLOCATION.get(), lower) {
                    (Some(a), Some(o)) => runs.extend(a.runs_of(&[(o, n)])),
                    _ => runs.push((n, false)),
                }
            }
            let mut pos = offset;
            for (n, hole) in runs {
                h.add(pos, n, if hole { ExtentType::HoleZero } else { ExtentType::Allocated })?;
                pos += n;
            }
            Ok(())
        })
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<()> {
        guarded("pread", || {
            if self.debug_panic_offset == Some(offset) {
                panic!("debug-panic-offset={offset} reached (fault injection)");
            }
            for (at, n) in pieces(buf.len() as u32) {
                let part = &mut buf[at as usize..(at + n) as usize];
                let c = self.call(Op::Read, offset + u64::from(at), n, false, None)?;
                let data = c.data.ok_or_else(|| eio("read returned no data"))?;
                if data.len() != part.len() {
                    return Err(eio(format!("read returned {} bytes, wanted {}", data.len(), part.len())));
                }
                part.copy_from_slice(&data);
            }
            Ok(())
        })
    }

    fn write_at(&self, buf: &[u8], offset: u64, flags: Flags) -> Result<()> {
        guarded("pwrite", || {
            let fua = flags.contains(Flags::FUA);
            for (at, n) in pieces(buf.len() as u32) {
                let part = &buf[at as usize..(at + n) as usize];
                self.call(Op::Write, offset + u64::from(at), n, fua, Some(part))?;
            }
            Ok(())
        })
    }

    fn flush(&self) -> Result<()> {
        guarded("flush", || self.call(Op::Flush, 0, 0, false, None).map(|_| ()))
    }

    fn trim(&self, count: u32, offset: u64, flags: Flags) -> Result<()> {
        guarded("trim", || self.call_ranged(Op::Trim, offset, count, flags.contains(Flags::FUA)))
    }

    fn zero(&self, count: u32, offset: u64, flags: Flags) -> Result<()> {
        guarded("zero", || self.call_ranged(Op::WriteZeroes, offset, count, flags.contains(Flags::FUA)))
    }
}

mod exports;

// The crate's `plugin!` registration, extended by `exports` with the
// export-list callbacks the crate does not know.
#[no_mangle]
pub extern "C" fn plugin_init() -> *const nbdkit::Plugin {
    let mut plugin = nbdkit::Builder::new();
    plugin.thread_model = true;
    plugin.config = true;
    plugin.config_complete = true;
    plugin.config_help = true;
    plugin.after_fork = true;
    plugin.unload = true;
    plugin.write_at = true;
    plugin.flush = true;
    plugin.trim = true;
    plugin.zero = true;
    plugin.can_write = true;
    plugin.can_flush = true;
    plugin.can_trim = true;
    plugin.can_zero = true;
    plugin.can_fua = true;
    plugin.can_multi_conn = true;
    plugin.can_extents = true;
    plugin.extents = true;
    exports::extend(plugin.into_ptr::<Connection>())
}
