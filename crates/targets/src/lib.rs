//! layoutd targets, one module each, and the stack builder that turns a
//! [`StackConfig`] into a [`Stack`].
//!
//! Targets never perform I/O, read clocks or draw unseeded randomness; see
//! [`layoutd_core::target`] for the surface they implement.
#![warn(missing_docs)]

pub mod dcd;
pub mod linear;
pub mod seglog;
mod split;
pub mod trace;

use layoutd_core::config::{ArgReader, ConfigError, StackConfig};
use layoutd_core::{OpenMode, Stack, Target};

/// The target types this build knows, with a one-line description each.
pub const TARGET_TYPES: &[(&str, &str)] = &[
    ("dcd", "Disk Caching Disk: small writes logged in segments, destaged home when idle, crash recovery by replay"),
    ("linear", "maps the volume onto one or more slices of the lower device (dm-linear)"),
    ("trace", "passes everything through and records each request (time, stream, op, offset, length)"),
];

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
        lower_bytes += m;
    }
    let mut layers: Vec<Box<dyn Target>> = Vec::with_capacity(cfg.layer.len());
    for (i, layer) in cfg.layer.iter().enumerate().rev() {
        let context = format!("layer {} ({})", i + 1, layer.target);
        let args = ArgReader::new(context, &layer.args);
        let target: Box<dyn Target> = match layer.target.as_str() {
            "dcd" => Box::new(dcd::Dcd::ctr(args, lower_bytes, &members, mode)?),
            "linear" => Box::new(linear::Linear::ctr(args, lower_bytes)?),
            "trace" => Box::new(trace::Trace::ctr(args, lower_bytes)?),
            other => {
                let known: Vec<&str> = TARGET_TYPES.iter().map(|t| t.0).collect();
                return Err(ConfigError(format!(
                    "layer {}: unknown target `{other}` (known: {})",
                    i + 1,
                    known.join(", ")
                )));
            }
        };
        lower_bytes = target.size_bytes();
        members = vec![(0, lower_bytes)];
        if lower_bytes == 0 {
            return Err(ConfigError(format!("layer {} ({}): exposes zero bytes", i + 1, layer.target)));
        }
        layers.push(target);
    }
    layers.reverse();
    Ok(Stack::new(layers))
}
