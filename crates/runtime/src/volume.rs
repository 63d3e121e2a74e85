//! Formatting, opening, closing and inspecting a layoutd volume.
//!
//! A volume lives on one device, or spans several member devices laid end to
//! end (for example a physical DCD: the log on one disk, the data on
//! another). Every member holds the superblock (two copies) in its first MiB
//! with the volume's uuid, its member index and the whole stack config; the
//! stack's address space is the members' data areas, in order. `format`
//! validates the config by building the stack *before* writing anything, so
//! bad input leaves every device untouched; `open` refuses unformatted,
//! foreign, corrupt, shrunken, locked, missing, extra or misordered members
//! with a message naming the device; it marks the members dirty until
//! [`Volume::mark_clean`] writes the clean-shutdown mark.

use crate::det::{Harness, Timing, ZeroLatency};
use layoutd_core::config::{MemberConfig, StackConfig};
use layoutd_core::superblock::{
    Superblock, SuperblockError, DATA_START_BYTES, DEVICE_BYTES_MIN, SUPERBLOCK_BYTES,
};
use layoutd_core::{OpenMode, Target};
use layoutd_disk::{BlockDevice, ConcatDevice, FileDevice, OverlayDevice, OverlayStats, SliceDevice};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Why a volume operation failed; the message names the device.
#[derive(Debug, thiserror::Error)]
#[error("{}: {msg}", path.display())]
pub struct VolumeError {
    /// The device.
    pub path: PathBuf,
    /// What is wrong, and what to do.
    pub msg: String,
}

fn err(path: &Path, msg: impl Into<String>) -> VolumeError {
    VolumeError { path: path.to_path_buf(), msg: msg.into() }
}

/// Options for `format`.
#[derive(Clone, Debug, Default)]
pub struct FormatOptions {
    /// Overwrite devices that already hold data (layoutd or foreign).
    pub force: bool,
    /// Open with O_DIRECT.
    pub direct: bool,
    /// The volume's uuid (random bytes supplied by the caller).
    pub uuid: [u8; 16],
}

/// One member device of an open volume.
pub struct Member {
    /// Where it was opened from.
    pub path: PathBuf,
    /// The device (locked while open).
    pub device: Arc<FileDevice>,
}

/// An open volume: its members, the superblock, and a ready stack.
pub struct Volume {
    /// The member devices, in order (one for a one-device volume).
    pub members: Vec<Member>,
    /// The stack's bottom device: the members' data areas, end to end,
    /// behind the overlay the stack was brought up on, committed: it passes
    /// every request through.
    pub data: Arc<dyn BlockDevice>,
    /// Member 0's superblock as read (with `clean` as found on open).
    pub superblock: Superblock,
    /// The stack, recovered and ready.
    pub stack: Box<dyn Target>,
    /// What its bring-up read from the devices and wrote to them (the
    /// commit of its overlay).
    pub bring_up: OverlayStats,
}

impl Volume {
    /// Writes the clean-shutdown mark on every member. Call after the stack
    /// has been flushed.
    pub fn mark_clean(&self) -> Result<(), VolumeError> {
        mark_clean(&self.members)
    }

    /// Where each member's data area starts on the volume's bottom device,
    /// with its length: for per-disk emulation.
    pub fn member_extents(&self) -> Vec<(u64, u64)> {
        extents(&member_data_bytes(&self.superblock))
    }
}

/// The data-area size of every member, from member 0's superblock.
pub fn member_data_bytes(sb: &Superblock) -> Vec<u64> {
    if sb.config.device.is_empty() {
        vec![sb.device_size_bytes - sb.data_start_bytes]
    } else {
        sb.config.device.iter().map(|m| m.size_bytes - sb.data_start_bytes).collect()
    }
}

fn extents(sizes: &[u64]) -> Vec<(u64, u64)> {
    let mut start = 0;
    sizes
        .iter()
        .map(|&n| {
            start += n;
            (start - n, n)
        })
        .collect()
}

fn read_superblock(path: &Path, dev: &FileDevice) -> Result<Superblock, VolumeError> {
    if dev.size_bytes() < 2 * SUPERBLOCK_BYTES as u64 {
        return Err(err(
            path,
            format!("device is {} bytes: too small to hold a layoutd superblock", dev.size_bytes()),
        ));
    }
    let mut buf = vec![0u8; 2 * SUPERBLOCK_BYTES];
    dev.read_at(&mut buf, 0).map_err(|e| err(path, format!("cannot read the superblock: {e}")))?;
    Superblock::decode(&buf).map_err(|e| match e {
        SuperblockError::Corrupt(why) => err(
            path,
            format!(
                "superblock corrupt (copy A at byte 0, copy B at byte {SUPERBLOCK_BYTES}): {why}; the stack config \
                 is lost with them: restore the device from a copy, or `layoutd format --force` it to start over \
                 (erases the volume)"
            ),
        ),
        e => err(path, e.to_string()),
    })
}

fn write_superblock(path: &Path, dev: &FileDevice, sb: &Superblock) -> Result<(), VolumeError> {
    let bytes = sb.encode().map_err(|e| err(path, e.to_string()))?;
    dev.write_at(&bytes, Superblock::copy_offset_bytes(sb.generation))
        .and_then(|()| dev.flush())
        .map_err(|e| err(path, format!("cannot write the superblock: {e}")))
}

/// A device error as a [`VolumeError`], naming `path` once (the device's
/// own message already starts with it).
fn device_err(path: &Path, e: std::io::Error) -> VolumeError {
    err(path, e.to_string().replace(&format!("{}: ", path.display()), ""))
}

/// Opens and locks `path`, naming it in any error.
fn open_locked(path: &Path, direct: bool) -> Result<FileDevice, VolumeError> {
    FileDevice::open(path, direct, true).map_err(|e| device_err(path, e))
}

/// Opens `path` read-only without locking it, naming it in any error.
fn open_read_only(path: &Path) -> Result<FileDevice, VolumeError> {
    FileDevice::open_read_only(path).map_err(|e| device_err(path, e))
}

/// Rewrites every member's superblock with `clean`, bumping its generation.
fn mark_all(members: &[Member], clean: bool) -> Result<(), VolumeError> {
    for m in members {
        let mut sb = read_superblock(&m.path, &m.device)?;
        sb.generation += 1;
        sb.clean = clean;
        write_superblock(&m.path, &m.device, &sb)?;
    }
    Ok(())
}

/// Writes the clean-shutdown mark on every member.
pub fn mark_clean(members: &[Member]) -> Result<(), VolumeError> {
    mark_all(members, true)
}

/// Drives a stack in the deterministic runtime over `data` until it is
/// ready (formatting or recovering its metadata), with no lower request
/// left in flight, then returns it; or why it is refused.
pub fn bring_up_on<T: Timing>(
    stack: Box<dyn Target>,
    data: Arc<dyn BlockDevice>,
    timing: T,
    seed: u64,
) -> Result<Box<dyn Target>, String> {
    if stack.is_ready() {
        return Ok(stack);
    }
    let mut h = Harness::new(stack, data, timing, seed);
    h.bring_up().map_err(|e| {
        format!(
            "{e} (refusing to serve; lower offsets count from the device's data area, which starts at byte \
             {DATA_START_BYTES})"
        )
    })?;
    // A stack can be ready while a lower write is still in flight (opt over
    // dcd: opt's bring-up map write, FUA, goes home through dcd, which then
    // logs an invalidation record): finish those, starting nothing else
    // (no idle, so no background work), before handing the stack on.
    let mut steps = 0u64;
    while h.lower_in_flight_count() > 0 && steps < 10_000_000 && h.step() {
        steps += 1;
    }
    if h.lower_in_flight_count() > 0 {
        return Err("the stack's bring-up writes did not complete; refusing to serve".into());
    }
    Ok(h.into_stack())
}

/// The device a stack is brought up over before it is kept: a recording
/// copy-on-write overlay of the volume's bottom device.
pub type StagedDevice = OverlayDevice<Arc<dyn BlockDevice>>;

/// Brings `stack` up once over a recording overlay of `data`
/// ([`bring_up_on`]): nothing reaches `data` yet. Every open does this: a
/// layer that refuses (damaged metadata) may do so after the layers below
/// it have recovered and written (a log's bring-up checkpoint), and a
/// refusal must leave the device as it was; the overlay is then dropped.
/// To keep the stack, [`StagedDevice::commit`] replays the bring-up's
/// writes onto `data` in their order with their flushes, exactly the
/// requests a direct bring-up makes, so a crash during the commit leaves
/// what a crash of a direct bring-up could; the overlay then passes every
/// request through, and the stack is served over it.
pub fn bring_up_staged<T: Timing>(
    stack: Box<dyn Target>,
    data: Arc<dyn BlockDevice>,
    timing: T,
    seed: u64,
) -> Result<(Box<dyn Target>, Arc<StagedDevice>), String> {
    let staged = Arc::new(OverlayDevice::recording(data));
    let stack = bring_up_on(stack, staged.clone(), timing, seed)?;
    Ok((stack, staged))
}

/// [`bring_up_on`] over the volume's devices, naming `path` in a refusal.
fn bring_up_quiet(
    path: &Path,
    stack: Box<dyn Target>,
    data: Arc<dyn BlockDevice>,
) -> Result<Box<dyn Target>, VolumeError> {
    bring_up_on(stack, data, ZeroLatency::default(), 0).map_err(|e| err(path, e))
}

/// Each layer's one-line notice about how it opened (a pool's recorded
/// placement overriding the config's).
fn print_notices(path: &Path, stack: &dyn Target) {
    for st in stack.layer_statuses() {
        for (_, n) in st.config.iter().filter(|(k, _)| k == "notice") {
            eprintln!("layoutd: {}: {n}", path.display());
        }
    }
}

/// [`bring_up_quiet`], then [`print_notices`].
fn bring_up(
    path: &Path,
    stack: Box<dyn Target>,
    data: Arc<dyn BlockDevice>,
) -> Result<Box<dyn Target>, VolumeError> {
    let stack = bring_up_quiet(path, stack, data)?;
    print_notices(path, &*stack);
    Ok(stack)
}

/// Writes a new superblock holding `cfg` on every device in `paths` (one
/// device, or the members of a multi-device volume in order) and initialises
/// the stack.
pub fn format(paths: &[PathBuf], cfg: &StackConfig, opts: &FormatOptions) -> Result<Superblock, VolumeError> {
    assert!(!paths.is_empty(), "at least one device");
    if paths.len() > 255 {
        return Err(err(&paths[255], "a volume spans at most 255 devices"));
    }
    if !cfg.device.is_empty() {
        return Err(err(
            &paths[0],
            "bad config: [[device]] entries are written by `format` from its --device options; remove them",
        ));
    }
    let mut devs = Vec::with_capacity(paths.len());
    for path in paths {
        let dev = open_locked(path, opts.direct)?;
        let size = dev.size_bytes();
        if size < DEVICE_BYTES_MIN {
            return Err(err(path, format!("device is {size} bytes; layoutd needs at least {DEVICE_BYTES_MIN} (1 MiB of header plus 1 MiB of data)")));
        }
        devs.push(dev);
    }
    let mut cfg = cfg.clone();
    if paths.len() > 1 {
        cfg.device = devs.iter().map(|d| MemberConfig { size_bytes: d.size_bytes() }).collect();
    }
    let sizes: Vec<u64> = devs.iter().map(|d| d.size_bytes() - DATA_START_BYTES).collect();
    // Validate the whole config before touching any device.
    let stack = layoutd_targets::build_stack_members(&cfg, &sizes, OpenMode::format_from_uuid(&opts.uuid))
        .map_err(|e| err(&paths[0], format!("bad config: {e}")))?;
    if !opts.force {
        for (path, dev) in paths.iter().zip(&devs) {
            match read_superblock(path, dev) {
                Err(VolumeError { msg, .. }) if msg == SuperblockError::Unformatted.to_string() => {
                    crate::probe::refuse_foreign(path).map_err(|msg| err(path, msg))?
                }
                Ok(_) => {
                    return Err(err(path, "already holds a layoutd volume; pass --force to overwrite it"))
                }
                Err(e) => {
                    // Name what the foreign data is when libblkid knows it.
                    crate::probe::refuse_foreign(path).map_err(|msg| err(path, msg))?;
                    if e.msg.contains("--force") {
                        return Err(e);
                    }
                    return Err(err(path, format!("{}; pass --force to overwrite it", e.msg)));
                }
            }
        }
    }
    let devs: Vec<Arc<FileDevice>> = devs.into_iter().map(Arc::new).collect();
    let data = concat_data(&devs, &sizes, |d, n| Arc::new(SliceDevice::new(d, DATA_START_BYTES, n)));
    bring_up(&paths[0], Box::new(stack), data.clone())?;
    data.flush().map_err(|e| err(&paths[0], format!("flush failed: {e}")))?;
    let mut first = None;
    for (i, (path, dev)) in paths.iter().zip(&devs).enumerate() {
        let mut sb = Superblock {
            generation: 0,
            clean: true,
            device_size_bytes: dev.size_bytes(),
            data_start_bytes: DATA_START_BYTES,
            uuid: opts.uuid,
            config: cfg.clone(),
            member_index: i as u8,
        };
        for generation in [0, 1] {
            sb.generation = generation;
            write_superblock(path, dev, &sb)?;
        }
        first.get_or_insert(sb);
    }
    Ok(first.expect("one device at least"))
}

/// The members' data areas as one device.
fn concat_data(
    devs: &[Arc<FileDevice>],
    sizes: &[u64],
    slice: impl Fn(Arc<FileDevice>, u64) -> Arc<dyn BlockDevice>,
) -> Arc<dyn BlockDevice> {
    assert_eq!(devs.len(), sizes.len());
    let mut parts: Vec<Arc<dyn BlockDevice>> =
        devs.iter().zip(sizes).map(|(d, &n)| slice(d.clone(), n)).collect();
    if parts.len() == 1 {
        return parts.pop().expect("one");
    }
    Arc::new(ConcatDevice::new(parts))
}

/// Checks that `paths` are exactly the members of one volume, in order, and
/// returns each member's superblock.
fn check_members(paths: &[PathBuf], devs: &[FileDevice]) -> Result<Vec<Superblock>, VolumeError> {
    let sbs: Vec<Superblock> =
        paths.iter().zip(devs).map(|(p, d)| read_superblock(p, d)).collect::<Result<_, _>>()?;
    let first = &sbs[0];
    let count = first.config.device.len().max(1);
    if first.member_index != 0 {
        return Err(err(&paths[0], format!("is member {} of its volume, given first: give the --device options in the order they were formatted", first.member_index)));
    }
    if paths.len() < count {
        return Err(err(&paths[0], format!("this volume spans {count} devices; give all of them with --device, in order (member {} is missing)", paths.len())));
    }
    if paths.len() > count {
        return Err(err(
            &paths[count],
            format!(
                "is not part of this volume: the volume on {} spans {count} device(s)",
                paths[0].display()
            ),
        ));
    }
    for (i, ((path, sb), dev)) in paths.iter().zip(&sbs).zip(devs).enumerate() {
        if sb.uuid != first.uuid {
            return Err(err(path, format!("belongs to another volume than {}", paths[0].display())));
        }
        if usize::from(sb.member_index) != i {
            return Err(err(path, format!("is member {} of this volume, given as device {i}: give the --device options in the order they were formatted", sb.member_index)));
        }
        // The stack is built from member 0's list of the members' sizes:
        // each must be what that member's own superblock says.
        if let Some(listed) = first.config.device.get(i).filter(|m| m.size_bytes != sb.device_size_bytes) {
            return Err(err(
                path,
                format!(
                    "is listed by {} as {} bytes, but its own superblock says {}: the superblocks disagree \
                     (damaged metadata), refusing to serve",
                    paths[0].display(),
                    listed.size_bytes,
                    sb.device_size_bytes
                ),
            ));
        }
        if dev.size_bytes() < sb.device_size_bytes {
            return Err(err(
                path,
                format!(
                    "device is {} bytes but was formatted at {}: it shrank, refusing to serve",
                    dev.size_bytes(),
                    sb.device_size_bytes
                ),
            ));
        }
    }
    Ok(sbs)
}

/// Opens a formatted volume for serving: locks every member, checks the
/// superblocks, builds and recovers the stack, and marks the members dirty.
pub fn open(paths: &[PathBuf], direct: bool) -> Result<Volume, VolumeError> {
    open_with(paths, direct, false)
}

/// [`open`], optionally accepting the loss of flushed data that recovery
/// finds damaged (`serve --accept-loss`): the loss is counted in the
/// stack's status instead of the open being refused.
pub fn open_with(paths: &[PathBuf], direct: bool, accept_loss: bool) -> Result<Volume, VolumeError> {
    let (mut vol, overlay) = open_staged(paths, direct, accept_loss)?;
    vol.bring_up = commit(&overlay, &vol.members)?;
    print_notices(&paths[0], &*vol.stack);
    Ok(vol)
}

/// Writes the bring-up's writes to the members (in order, with their
/// flushes) and marks the members dirty, as a direct open does; `overlay`
/// passes every request through from then on.
fn commit(overlay: &StagedDevice, members: &[Member]) -> Result<OverlayStats, VolumeError> {
    let stats = replay(overlay, members)?;
    mark_all(members, false)?;
    Ok(stats)
}

/// [`StagedDevice::commit`], a failure naming member 0.
fn replay(overlay: &StagedDevice, members: &[Member]) -> Result<OverlayStats, VolumeError> {
    overlay.commit().map_err(|e| {
        err(
            &members[0].path,
            format!(
                "cannot write the changes of the recovery: {e}; the device is left as a crash during the \
                 recovery would leave it"
            ),
        )
    })
}

/// What [`open_members`] gives: member 0's superblock, the stack it
/// records (not yet brought up), the members and their data areas as one
/// device.
type Members = (Superblock, Box<dyn Target>, Vec<Arc<FileDevice>>, Arc<dyn BlockDevice>);

/// Checks that `devs` (opened from `paths`) are the members of one volume
/// and builds the stack their superblock records, to be opened with
/// `accept_loss`, over their data areas.
fn open_members(paths: &[PathBuf], devs: Vec<FileDevice>, accept_loss: bool) -> Result<Members, VolumeError> {
    let sb = check_members(paths, &devs)?.swap_remove(0);
    let sizes = member_data_bytes(&sb);
    let mode = OpenMode::Open { clean: sb.clean, accept_loss };
    let stack = layoutd_targets::build_stack_members(&sb.config, &sizes, mode)
        .map_err(|e| err(&paths[0], format!("the stored stack config is unusable: {e}")))?;
    let devs: Vec<Arc<FileDevice>> = devs.into_iter().map(Arc::new).collect();
    let data = concat_data(&devs, &sizes, |d, n| Arc::new(SliceDevice::new(d, DATA_START_BYTES, n)));
    Ok((sb, Box::new(stack), devs, data))
}

/// A volume brought up over its overlay, and the overlay.
type StagedVolume = (Volume, Arc<StagedDevice>);

/// Locks every member, checks the superblocks and brings the stack up
/// once over a recording overlay ([`bring_up_staged`]), which is the
/// volume's `data`: nothing is written until [`commit`]; dropped, the
/// devices are left as they were.
fn open_staged(paths: &[PathBuf], direct: bool, accept_loss: bool) -> Result<StagedVolume, VolumeError> {
    assert!(!paths.is_empty(), "at least one device");
    let devs: Vec<FileDevice> = paths.iter().map(|p| open_locked(p, direct)).collect::<Result<_, _>>()?;
    let (sb, stack, devs, data) = open_members(paths, devs, accept_loss)?;
    let (stack, overlay) =
        bring_up_staged(stack, data, ZeroLatency::default(), 0).map_err(|e| err(&paths[0], e))?;
    let members: Vec<Member> =
        paths.iter().zip(devs).map(|(p, d)| Member { path: p.clone(), device: d }).collect();
    let bring_up = OverlayStats::default();
    Ok((Volume { members, data: overlay.clone(), superblock: sb, stack, bring_up }, overlay))
}

/// Reads one device's superblock without locking or modifying it.
pub fn inspect(path: &Path) -> Result<Superblock, VolumeError> {
    let dev = open_read_only(path)?;
    read_superblock(path, &dev)
}

/// Checks that `paths` are the members of one formatted volume, in order,
/// without locking or modifying anything; returns member 0's superblock.
pub fn check(paths: &[PathBuf]) -> Result<Superblock, VolumeError> {
    let devs: Vec<FileDevice> = paths.iter().map(|p| open_read_only(p)).collect::<Result<_, _>>()?;
    Ok(check_members(paths, &devs)?.swap_remove(0))
}

/// Reads the superblocks and brings the stack up (running any recovery)
/// over a copy-on-write overlay, so counters reflect the volume's persistent
/// state while no device is ever written.
pub fn inspect_stack(paths: &[PathBuf]) -> Result<(Superblock, Box<dyn Target>), VolumeError> {
    let devs: Vec<FileDevice> = paths.iter().map(|p| open_read_only(p)).collect::<Result<_, _>>()?;
    let (sb, stack, _, data) = open_members(paths, devs, false)?;
    // Reads see the devices, writes stay in memory.
    let data: Arc<dyn BlockDevice> = Arc::new(OverlayDevice::new(data));
    let stack = bring_up_quiet(&paths[0], stack, data)?;
    print_notices(&paths[0], &*stack);
    Ok((sb, stack))
}

/// What [`run_offline`] leaves: the first step's result, the stack, the members.
type Offline<R> = (R, Box<dyn Target>, Vec<Member>);

/// What the statuses say against writing anything ([`run_offline`]).
type Verdict<'a> = &'a dyn Fn(&[layoutd_core::Status]) -> Option<String>;

/// Opens the volume offline, brought up over a recording overlay
/// ([`open_staged`]), and runs `first` on a harness over it: if `first`
/// refuses, returns the refusal with nothing written. Without a
/// `verdict`, `first` only submits (as [`Harness::message`] does: no
/// request reaches the device before the commit) and the bring-up is
/// committed (the devices get its writes, then the dirty mark). With
/// one, the work `first` started runs to its end over the overlay
/// (reads see the devices, writes stay in memory), the verdict reads the
/// statuses, and a reason it gives is returned with nothing written;
/// else the members are marked dirty and the overlay committed (the
/// bring-up's and the work's writes, in order, with their flushes, as a
/// direct run makes them; dirty first, since they are more than a
/// recovery's). Then every background job finishes (bounded), the stack
/// flushes and settles; returns `first`'s result and the stack, with the
/// volume still marked dirty (the caller marks it clean once satisfied).
fn run_offline<R>(
    paths: &[PathBuf],
    what: &str,
    first: impl FnOnce(&mut Harness<ZeroLatency>) -> Result<R, String>,
    verdict: Option<Verdict>,
) -> Result<Result<Offline<R>, String>, VolumeError> {
    let (vol, overlay) = open_staged(paths, false, false)?;
    let path = &paths[0];
    let mut h = Harness::new(vol.stack, vol.data.clone(), ZeroLatency::default(), 0);
    let r = match first(&mut h) {
        Ok(r) => r,
        Err(why) => return Ok(Err(why)),
    };
    match verdict {
        None => {
            assert_eq!(h.stats.lower_count, 0, "`first` only submits: nothing ran before the commit");
            commit(&overlay, &vol.members)?;
        }
        Some(verdict) => {
            drive_offline(&mut h, path, what, "nothing was written")?;
            if let Some(why) = verdict(&h.stack.layer_statuses()) {
                return Ok(Err(why));
            }
            mark_all(&vol.members, false)?;
            replay(&overlay, &vol.members)?;
        }
    }
    print_notices(path, &*h.stack);
    drive_offline(&mut h, path, what, "the device is left marked dirty")?;
    let flushed = h.flush();
    if let Err(e) = flushed.result {
        return Err(err(path, format!("the final flush failed ({e}); the device is left marked dirty")));
    }
    h.settle();
    Ok(Ok((r, h.into_stack(), vol.members)))
}

/// Drives `h` until its work is done, at most 100 million steps; past
/// that, an error naming `what` did not finish, and `left`.
fn drive_offline(
    h: &mut Harness<ZeroLatency>,
    path: &Path,
    what: &str,
    left: &str,
) -> Result<(), VolumeError> {
    let steps_max = 100_000_000;
    if h.drive_bounded(steps_max) == steps_max {
        return Err(err(path, format!("{what} did not finish within 100 million steps; {left}")));
    }
    Ok(())
}

/// Delivers a runtime command ([`Target::message`]) to the volume offline:
/// opens it (locked, recovering if needed), delivers `text`, lets the work
/// it starts and any other background work finish, flushes, and marks the
/// volume clean. Returns the stack's reply or refusal; a message the
/// stack refuses (unknown, or not possible now) leaves the device
/// untouched: it is delivered before the bring-up is committed.
pub fn message(paths: &[PathBuf], text: &str) -> Result<Result<String, String>, VolumeError> {
    Ok(match run_offline(paths, "the work the message started", |h| h.message(text), None)? {
        Ok((reply, _, members)) => {
            mark_clean(&members)?;
            Ok(reply)
        }
        Err(why) => Err(why),
    })
}

/// Drains all background work offline (for `dcd`: destages the whole log
/// home), checks that nothing is left dirty, flushes, and marks the volume
/// clean. Returns the stack's statuses afterwards. `opened` is called once
/// the volume is open and recovered (for a progress note: a refusal at
/// open stays one line).
pub fn destage(paths: &[PathBuf], opened: impl FnOnce()) -> Result<Vec<layoutd_core::Status>, VolumeError> {
    let ((), stack, members) = run_offline(
        paths,
        "background work",
        |_| {
            opened();
            Ok(())
        },
        None,
    )?
    .expect("accepted");
    if !stack.is_drained() {
        let statuses: Vec<String> = stack.layer_statuses().iter().map(|s| s.to_string()).collect();
        return Err(err(
            &paths[0],
            format!(
                "after draining, the stack still holds background work; the device is left marked dirty. \
                 Status: {}",
                statuses.join(" | ")
            ),
        ));
    }
    mark_clean(&members)?;
    Ok(stack.layer_statuses())
}

/// [`message`] with a dry run's answer first, from one bring-up: the
/// message's work runs to its end before anything is written
/// ([`run_offline`] with `verdict`); a refusal of the message, or a
/// reason `verdict` finds in the statuses then (`free-space`: the file
/// system scan's error), is returned with nothing written. Otherwise the
/// volume ends flushed and marked clean; returns the reply and the
/// statuses.
pub fn drain_checked(
    paths: &[PathBuf],
    message: &str,
    verdict: Verdict,
) -> Result<Result<(String, Vec<layoutd_core::Status>), String>, VolumeError> {
    let (reply, stack, members) =
        match run_offline(paths, "the work the message started", |h| h.message(message), Some(verdict))? {
            Ok(done) => done,
            Err(why) => return Ok(Err(why)),
        };
    mark_clean(&members)?;
    Ok(Ok((reply, stack.layer_statuses())))
}
