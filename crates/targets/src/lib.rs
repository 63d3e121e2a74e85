//! layoutd targets, one module each, and the stack builder that turns a
//! [`StackConfig`] into a [`Stack`].
//!
//! Targets never perform I/O, read clocks or draw unseeded randomness; see
//! [`layoutd_core::target`] for the surface they implement.
#![warn(missing_docs)]

pub mod alloc;
pub mod blockmap;
pub mod dcd;
pub mod gate;
pub mod linear;
pub mod log;
pub mod lowerio;
pub mod opt;
pub mod pool;
mod readahead;
pub mod replica;
pub mod retry;
pub mod seglog;
mod split;
pub mod trace;

/// The fuzz tests' shared helpers (one copy for the workspace), for the
/// decoders fuzzed in their own modules (private formats).
#[cfg(test)]
#[path = "../../core/tests/support/fuzz.rs"]
mod fuzz_support;

use layoutd_core::config::{ArgReader, ConfigError, StackConfig};
use layoutd_core::{OpenMode, Stack, Target};

/// What a target's constructor gets: its config keys, the size of the
/// device below, the member extents of that device (the bottom layer of a
/// multi-device volume sees several; every other layer one), and whether
/// to format or recover.
pub struct TargetContext<'a> {
    /// The layer's own keys (unknown keys are errors once read).
    pub args: ArgReader<'a>,
    /// Bytes of the device below.
    pub lower_bytes: u64,
    /// `(start, length)` of each member device within the device below.
    pub members: &'a [(u64, u64)],
    /// Format or recover.
    pub mode: OpenMode,
}

/// One registered target type: the one place a new target is added
/// (`format`, `layoutd targets`, config validation and the stack builder
/// all read this table).
pub struct TargetType {
    /// The `target = "..."` name.
    pub name: &'static str,
    /// One line for `layoutd targets`.
    pub about: &'static str,
    /// Builds the target, or says which key is wrong.
    pub ctr: fn(TargetContext<'_>) -> Result<Box<dyn Target>, ConfigError>,
    /// What may sit above it in a stack.
    pub stacking: Stacking,
}

/// How a target type stacks ([`build_stack`] checks it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stacking {
    /// One device above, one below: any layer may sit above it.
    Layer,
    /// Passes every request through unchanged: it may sit above anything.
    PassThrough,
    /// Its upper address space is volumes side by side, each exported by
    /// name: a layer above would see them as one device (and put its
    /// metadata in a slot that may hold no volume), so only pass-through
    /// layers may sit above it.
    NamedVolumes,
}

/// The target types this build knows.
pub const TARGET_TYPES: &[TargetType] = &[
    TargetType {
        name: "dcd",
        about: "Disk Caching Disk: small writes logged in segments, destaged home when idle, crash recovery by replay",
        ctr: |c| Ok(Box::new(dcd::Dcd::ctr(c.args, c.lower_bytes, c.members, c.mode)?)),
        stacking: Stacking::Layer,
    },
    TargetType {
        name: "linear",
        about: "maps the volume onto one or more slices of the lower device (dm-linear)",
        ctr: |c| Ok(Box::new(linear::Linear::ctr(c.args, c.lower_bytes)?)),
        stacking: Stacking::Layer,
    },
    TargetType {
        name: "pool",
        about: "an origin and copy-on-write snapshots in one thin pool, copies placed next to their origin chunk",
        ctr: |c| Ok(Box::new(pool::Pool::ctr(c.args, c.lower_bytes, c.mode)?)),
        stacking: Stacking::NamedVolumes,
    },
    TargetType {
        name: "opt",
        about: "self-optimizing layout: profiles requests, plans correlated blocks into an OPT region, copies them there in idle time",
        ctr: |c| Ok(Box::new(opt::Opt::ctr(c.args, c.lower_bytes, c.mode)?)),
        stacking: Stacking::Layer,
    },
    TargetType {
        name: "log",
        about: "log-structured layout: out-of-place writes in segments, cleaning, hole-plugging, slack space recycling, lazy map",
        ctr: |c| Ok(Box::new(log::Log::ctr(c.args, c.lower_bytes, c.mode)?)),
        stacking: Stacking::Layer,
    },
    TargetType {
        name: "replica",
        about: "replicates repeated non-sequential reads, in access order, into blocks the file system declared free",
        ctr: |c| Ok(Box::new(replica::Replica::ctr(c.args, c.lower_bytes, c.mode)?)),
        stacking: Stacking::Layer,
    },
    TargetType {
        name: "trace",
        about: "passes everything through and records each request (time, stream, op, offset, length)",
        ctr: |c| Ok(Box::new(trace::Trace::ctr(c.args, c.lower_bytes)?)),
        stacking: Stacking::PassThrough,
    },
];

/// The registered type called `name`.
pub fn target_type(name: &str) -> Option<&'static TargetType> {
    TARGET_TYPES.iter().find(|t| t.name == name)
}

/// Builds a stack from `cfg` over a bottom device of `device_bytes`.
/// Layers are built bottom-up so each knows the size below it. Errors name
/// the layer and the key.
pub fn build_stack(cfg: &StackConfig, device_bytes: u64, mode: OpenMode) -> Result<Stack, ConfigError> {
    build_stack_members(cfg, &[device_bytes], mode)
}

/// [`build_stack`] over a bottom device made of member devices laid end to
/// end, `member_bytes` each (a multi-device volume). The bottom layer sees
/// the members' extents (for `dcd`'s `log_device` / `data_device`); layers
/// above see one device.
pub fn build_stack_members(
    cfg: &StackConfig,
    member_bytes: &[u64],
    mode: OpenMode,
) -> Result<Stack, ConfigError> {
    assert!(!member_bytes.is_empty(), "at least one device");
    let mut members: Vec<(u64, u64)> = Vec::with_capacity(member_bytes.len());
    let mut lower_bytes = 0u64;
    for &m in member_bytes {
        members.push((lower_bytes, m));
        lower_bytes = lower_bytes
            .checked_add(m)
            .ok_or_else(|| ConfigError("the member devices add up to more than 2^64 bytes".into()))?;
    }
    // Only pass-through layers above a target of named volumes (a pool);
    // an unknown target is named by the loop below.
    let stacking = |l: &layoutd_core::config::LayerConfig| target_type(&l.target).map(|t| t.stacking);
    if let Some(p) = cfg.layer.iter().position(|l| stacking(l) == Some(Stacking::NamedVolumes)) {
        if let Some((a, above)) = cfg.layer[..p]
            .iter()
            .enumerate()
            .find(|(_, l)| stacking(l).is_some_and(|s| s != Stacking::PassThrough))
        {
            return Err(ConfigError(format!(
                "layer {} ({}) sits above layer {} ({}): its volumes are exported by name, so only a \
                 `trace` layer may be above it; put `{}` below the {}",
                a + 1,
                above.target,
                p + 1,
                cfg.layer[p].target,
                above.target,
                cfg.layer[p].target
            )));
        }
    }
    let mut layers: Vec<Box<dyn Target>> = Vec::with_capacity(cfg.layer.len());
    for (i, layer) in cfg.layer.iter().enumerate().rev() {
        let context = format!("layer {} ({})", i + 1, layer.target);
        let args = ArgReader::new(context, &layer.args);
        let Some(ty) = target_type(&layer.target) else {
            let known: Vec<&str> = TARGET_TYPES.iter().map(|t| t.name).collect();
            return Err(ConfigError(format!(
                "layer {}: unknown target `{}` (known: {})",
                i + 1,
                layer.target,
                known.join(", ")
            )));
        };
        let target = (ty.ctr)(TargetContext { args, lower_bytes, members: &members, mode })?;
        lower_bytes = target.size_bytes();
        members = vec![(0, lower_bytes)];
        if lower_bytes == 0 {
            return Err(ConfigError(format!("layer {} ({}): exposes zero bytes", i + 1, layer.target)));
        }
        layers.push(target);
    }
    layers.reverse();
    let scheduler = cfg.background.as_ref().map(|b| b.scheduler()).transpose()?.unwrap_or_default();
    Ok(Stack::with_scheduler(layers, scheduler))
}
