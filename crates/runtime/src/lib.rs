//! The runtimes that drive layoutd targets, and volume management.
//!
//! - [`det`]: the deterministic runtime. A virtual clock, a seeded RNG, and
//!   a bottom device whose timing is pluggable ([`det::Timing`]): zero
//!   latency with seeded reordering for tests, the HDD model for the
//!   simulator. Same inputs and seed, same outputs, byte for byte.
//! - [`live`]: the live runtime. Real I/O on a [`layoutd_disk::BlockDevice`]
//!   from the calling threads (their own I/O) and an I/O executor (the
//!   targets' background I/O), the wall clock, a timer thread.
//! - [`control`]: the control socket of a served volume (runtime commands
//!   from `layoutd message` and the commands built on it).
//! - [`volume`]: formatting, opening and inspecting a device: superblock,
//!   stack construction, clean-shutdown mark.
//! - [`probe`]: foreign data detection (libblkid) before `format` writes.
//!
//! Targets are the same code in both runtimes.
#![warn(missing_docs)]

/// A hash of the sources that decide the on-disk formats (core, disk,
/// targets, runtime; `build.rs`). `serve` hands its own to the nbdkit
/// plugin, which refuses to start if it was built from other sources.
pub const SOURCE_ID: &str = env!("LAYOUTD_SOURCE_ID");

pub mod control;
pub mod det;
pub mod emulate;
pub mod events;
pub mod live;
pub mod probe;
pub mod testkit;
pub mod testkit_volumes;
pub mod volume;
