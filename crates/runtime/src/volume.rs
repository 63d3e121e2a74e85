//! Formatting, opening, closing and inspecting a layoutd device.
//!
//! A formatted device holds the superblock (two copies) in its first MiB and
//! the stack's address space after it. `format` validates the config by
//! building the stack *before* writing anything, so bad input leaves the
//! device untouched; `open` refuses unformatted, foreign, corrupt, shrunken
//! or locked devices with a message naming the device; it marks the device
//! dirty until `close` writes the clean-shutdown mark.

use crate::det::{Harness, ZeroLatency};
use layoutd_core::config::StackConfig;
use layoutd_core::superblock::{
    Superblock, SuperblockError, DATA_START_BYTES, DEVICE_BYTES_MIN, SUPERBLOCK_BYTES,
};
use layoutd_core::{OpenMode, Target};
use layoutd_disk::{BlockDevice, FileDevice, OverlayDevice, SliceDevice};
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
    /// Overwrite a device that already holds data (layoutd or foreign).
    pub force: bool,
    /// Open with O_DIRECT.
    pub direct: bool,
    /// The volume's uuid (random bytes supplied by the caller).
    pub uuid: [u8; 16],
}

/// An open volume: the device, its superblock, and a ready stack.
pub struct Volume {
    /// The whole device.
    pub device: Arc<FileDevice>,
    /// The stack's bottom device: the data area past the superblock.
    pub data: Arc<dyn BlockDevice>,
    /// The superblock as read (with `clean` as found on open).
    pub superblock: Superblock,
    /// The stack, recovered and ready.
    pub stack: Box<dyn Target>,
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
    Superblock::decode(&buf).map_err(|e| err(path, e.to_string()))
}

fn write_superblock(path: &Path, dev: &FileDevice, sb: &Superblock) -> Result<(), VolumeError> {
    let bytes = sb.encode().map_err(|e| err(path, e.to_string()))?;
    dev.write_at(&bytes, Superblock::copy_offset_bytes(sb.generation))
        .and_then(|()| dev.flush())
        .map_err(|e| err(path, format!("cannot write the superblock: {e}")))
}

/// Drives a stack in the deterministic runtime over the real device until it
/// is ready (formatting or recovering its metadata), then returns it.
fn bring_up(
    path: &Path,
    mut stack: Box<dyn Target>,
    data: Arc<dyn BlockDevice>,
) -> Result<Box<dyn Target>, VolumeError> {
    if stack.is_ready() {
        return Ok(stack);
    }
    let mut h = Harness::new(stack, data, ZeroLatency::default(), 0);
    while !h.stack.is_ready() {
        if !h.step() {
            let statuses: Vec<String> = h.stack.layer_statuses().iter().map(|s| s.to_string()).collect();
            return Err(err(
                path,
                format!(
                    "the stack could not finish recovering its metadata; refusing to serve. Stack status: {}",
                    statuses.join(" | ")
                ),
            ));
        }
    }
    stack = h.into_stack();
    Ok(stack)
}

/// Writes a new superblock holding `cfg` and initialises the stack.
pub fn format(path: &Path, cfg: &StackConfig, opts: &FormatOptions) -> Result<Superblock, VolumeError> {
    let dev = FileDevice::open(path, opts.direct, true)
        .map_err(|e| err(path, e.to_string().replace(&format!("{}: ", path.display()), "")))?;
    let size = dev.size_bytes();
    if size < DEVICE_BYTES_MIN {
        return Err(err(path, format!("device is {size} bytes; layoutd needs at least {DEVICE_BYTES_MIN} (1 MiB of header plus 1 MiB of data)")));
    }
    let data_bytes = size - DATA_START_BYTES;
    // Validate the whole config before touching the device.
    let stack = layoutd_targets::build_stack(cfg, data_bytes, OpenMode::Format)
        .map_err(|e| err(path, format!("bad config: {e}")))?;
    if !opts.force {
        match read_superblock(path, &dev) {
            Err(VolumeError { msg, .. }) if msg == SuperblockError::Unformatted.to_string() => {}
            Ok(_) => return Err(err(path, "already holds a layoutd volume; pass --force to overwrite it")),
            Err(e) => return Err(err(path, format!("{}; pass --force to overwrite it", e.msg))),
        }
    }
    let mut sb = Superblock {
        generation: 0,
        clean: true,
        device_size_bytes: size,
        data_start_bytes: DATA_START_BYTES,
        uuid: opts.uuid,
        config: cfg.clone(),
    };
    let data: Arc<dyn BlockDevice> = Arc::new(SliceDevice::new(Arc::new(dev), DATA_START_BYTES, data_bytes));
    bring_up(path, Box::new(stack), data.clone())?;
    data.flush().map_err(|e| err(path, format!("flush failed: {e}")))?;
    let dev = FileDevice::open(path, false, false).map_err(|e| err(path, e.to_string()))?;
    for generation in [0, 1] {
        sb.generation = generation;
        write_superblock(path, &dev, &sb)?;
    }
    Ok(sb)
}

/// Opens a formatted device for serving: locks it, checks the superblock,
/// builds and recovers the stack, and marks the device dirty.
pub fn open(path: &Path, direct: bool) -> Result<Volume, VolumeError> {
    let dev = FileDevice::open(path, direct, true)
        .map_err(|e| err(path, e.to_string().replace(&format!("{}: ", path.display()), "")))?;
    let sb = read_superblock(path, &dev)?;
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
    let data_bytes = sb.device_size_bytes - sb.data_start_bytes;
    let stack = layoutd_targets::build_stack(&sb.config, data_bytes, OpenMode::Open { clean: sb.clean })
        .map_err(|e| err(path, format!("the stored stack config is unusable: {e}")))?;
    let device = Arc::new(dev);
    let data: Arc<dyn BlockDevice> =
        Arc::new(SliceDevice::new(device.clone(), sb.data_start_bytes, data_bytes));
    let stack = bring_up(path, Box::new(stack), data.clone())?;
    let mut dirty = sb.clone();
    dirty.generation += 1;
    dirty.clean = false;
    write_superblock(path, &device, &dirty)?;
    Ok(Volume { device, data, superblock: sb, stack })
}

/// Writes the clean-shutdown mark. Call after the stack has been flushed.
pub fn mark_clean(path: &Path, device: &FileDevice) -> Result<(), VolumeError> {
    let mut sb = read_superblock(path, device)?;
    sb.generation += 1;
    sb.clean = true;
    write_superblock(path, device, &sb)
}

/// Reads the superblock without locking or modifying the device.
pub fn inspect(path: &Path) -> Result<Superblock, VolumeError> {
    let dev = FileDevice::open_read_only(path).map_err(|e| err(path, e.to_string()))?;
    read_superblock(path, &dev)
}

/// Reads the superblock and brings the stack up (running any recovery) over
/// a copy-on-write overlay, so counters reflect the device's persistent state
/// while the device itself is never written.
pub fn inspect_stack(path: &Path) -> Result<(Superblock, Box<dyn Target>), VolumeError> {
    let dev = FileDevice::open_read_only(path).map_err(|e| err(path, e.to_string()))?;
    let sb = read_superblock(path, &dev)?;
    let data_bytes = sb.device_size_bytes.min(dev.size_bytes()) - sb.data_start_bytes;
    let stack = layoutd_targets::build_stack(&sb.config, data_bytes, OpenMode::Open { clean: sb.clean })
        .map_err(|e| err(path, format!("the stored stack config is unusable: {e}")))?;
    let base = SliceDevice::new(Arc::new(dev), sb.data_start_bytes, data_bytes);
    let data: Arc<dyn BlockDevice> = Arc::new(OverlayDevice::new(base));
    let stack = bring_up(path, Box::new(stack), data)?;
    Ok((sb, stack))
}

/// The value of counter `name` in any layer of `stack`, if some layer has it.
pub fn counter(stack: &dyn Target, name: &str) -> Option<u64> {
    stack.layer_statuses().iter().flat_map(|s| s.counters.clone()).find(|(k, _)| k == name).map(|(_, v)| v)
}

/// Drains all background work offline (for `dcd`: destages the whole log
/// home), checks that nothing is left dirty, flushes, and marks the device
/// clean. Returns the stack's statuses afterwards.
pub fn destage(path: &Path) -> Result<Vec<layoutd_core::Status>, VolumeError> {
    let vol = open(path, false)?;
    let mut h = Harness::new(vol.stack, vol.data, ZeroLatency::default(), 0);
    let steps_max = 100_000_000;
    if h.drive_bounded(steps_max) == steps_max {
        return Err(err(
            path,
            "background work did not finish within 100 million steps; the device is left marked dirty",
        ));
    }
    let flushed = h.flush();
    if let Err(e) = flushed.result {
        return Err(err(path, format!("the final flush failed ({e}); the device is left marked dirty")));
    }
    h.settle();
    let stack = h.into_stack();
    for name in ["dirty_segments_count", "log_utilization_pct"] {
        if let Some(v) = counter(&*stack, name).filter(|&v| v != 0) {
            return Err(err(
                path,
                format!("after draining, {name}={v}: the log is not empty; the device is left marked dirty"),
            ));
        }
    }
    mark_clean(path, &vol.device)?;
    Ok(stack.layer_statuses())
}
