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
    let mut lower_bytes = device_bytes;
    let mut layers: Vec<Box<dyn Target>> = Vec::with_capacity(cfg.layer.len());
    for (i, layer) in cfg.layer.iter().enumerate().rev() {
        let context = format!("layer {} ({})", i + 1, layer.target);
        let args = ArgReader::new(context, &layer.args);
        let target: Box<dyn Target> = match layer.target.as_str() {
            "dcd" => Box::new(dcd::Dcd::ctr(args, lower_bytes, mode)?),
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
        if lower_bytes == 0 {
            return Err(ConfigError(format!("layer {} ({}): exposes zero bytes", i + 1, layer.target)));
        }
        layers.push(target);
    }
    layers.reverse();
    Ok(Stack::new(layers))
}
