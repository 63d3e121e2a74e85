//! Hard-disk service-time model: the bottom device of the layoutd simulator and
//! the delay source of live emulation.
//!
//! A [`Disk`] charges every request what a real drive would: controller
//! overhead (by command, cache hit or miss, after a read or after a write), a
//! seek from a seek curve (a measured table with interpolation, or Ruemmler and
//! Wilkes' `a + b*sqrt(d)` / `c + e*d` formula), rotational latency from the
//! platter's angular position when the seek ends, media transfer through zones
//! with their own sectors per track, head and cylinder switches with skew,
//! spares and slipped sectors in the logical-to-physical mapping, and write
//! settle. An on-board cache with segments and read-ahead serves read hits;
//! write-back caching is off unless the parameters turn it on. Requests queue
//! FIFO or under a seek-aware scheduler (C-LOOK or SPTF).
//!
//! Parameters come from built-in [`DiskParams::preset`]s (datasheet figures,
//! sources cited beside each constant) or from DiskSim parameter files
//! ([`DiskParams::from_diskspecs`]: a `.parv`, which also gives the host bus,
//! or a `.diskspecs`). [`validate`] replays a DiskSim validation
//! trace closed-loop and reports the demerit figure.
//!
//! # What this crate never does
//!
//! - It never reads the wall clock, sleeps, or spawns threads: time is a plain
//!   `u64` of nanoseconds on a virtual clock that the caller passes in.
//! - It never uses a global RNG: the model is deterministic (the `seed` given
//!   to [`Disk::new`] only seeds workload helpers; same inputs, same outputs).
//! - It never touches files except in the explicit loading functions
//!   ([`DiskParams::from_diskspecs`], [`validate`]) and [`write_cdf_svg`].
//! - It never stores data: it models timing only.
//! - It never allocates per request on the hot path (the queue grows only when
//!   the caller keeps more requests outstanding than ever before).
//! - It never depends on other layoutd crates.
//!
//! # Glossary
//!
//! - *LBA*: logical block address in 512-byte sectors, as the host sees it.
//! - *PBN*: physical position: cylinder, surface (head), sector on the track.
//! - *zone*: a band of cylinders with the same sectors per track.
//! - *skew*: angular offset of a track's first sector, so that sequential
//!   transfer survives a head or cylinder switch without a full revolution.
//! - *spare / slip*: sectors reserved for defects; a slipped (defective) sector
//!   is skipped and every later LBA of its sparing range moves one sector on.
//! - *segment*: one slice of the on-board buffer holding a contiguous LBA run.
//! - *read-ahead*: the drive keeps reading past a request into its segment
//!   until the next command arrives or the segment is full.

#![warn(missing_docs)]

mod cache;
mod diskspecs;
mod geometry;
mod model;
mod params;
mod plot;
mod presets;
mod queue;
mod report;
mod seek;

pub use model::Disk;
pub use params::{
    zone_media_mb_s, CacheParams, DiskParams, Interface, Overheads, ReadAheadScope, RequestData, SeekCurve,
    Zone,
};
pub use plot::write_cdf_svg;
pub use queue::Scheduler;
pub use report::{
    demerit_disksim_ms, demerit_ms, random_read_mean_ms, read_disksim_distribution, seek_curve_ms,
    sequential_read_mb_s, show_report, validate, ReplayedRequest, ShowReport, ValidateReport, ZoneRate,
};

use std::path::PathBuf;

/// 512 bytes: the sector size every address in this crate counts in.
pub const SECTOR_SIZE_BYTES: u64 = 512;

/// What a request asks the disk to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum DiskOp {
    /// Read sectors from the media (or the on-board cache).
    Read,
    /// Write sectors (to the media, or to the cache when write-back is on).
    Write,
    /// Complete once every cached write is on the media.
    Flush,
}

/// One request to the disk. `lba` and `sectors` count 512-byte sectors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DiskRequest {
    /// Caller's identifier, returned in the completion.
    pub id: u64,
    /// Read, write or flush.
    pub op: DiskOp,
    /// First sector (512 bytes each).
    pub lba: u64,
    /// Sector count; 0 only for a flush.
    pub sectors: u32,
}

/// A finished request and what it cost.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub struct DiskCompletion {
    /// The request's `id`.
    pub id: u64,
    /// The operation.
    pub op: DiskOp,
    /// When the request was submitted.
    pub arrival_ns: u64,
    /// When the disk began serving it (after any queueing).
    pub start_ns: u64,
    /// When the disk reported it done.
    pub complete_ns: u64,
    /// Served from the on-board buffer without positioning the head.
    pub cache_hit: bool,
    /// Cylinders the arm moved for this request (0 on a hit).
    pub seek_distance_cyl: u64,
    /// Time spent seeking (including head switch and write settle).
    pub seek_ns: u64,
    /// Time spent waiting for the first sector to rotate under the head.
    pub rotation_ns: u64,
    /// Sectors dropped because the request ran past the end of the disk
    /// (requests are clamped, never rejected, by [`Disk::submit`]).
    pub clamped_sectors: u32,
}

/// Everything that can go wrong: bad input, never a model invariant.
#[derive(Debug, thiserror::Error)]
pub enum HddError {
    /// Unknown preset name.
    #[error("unknown disk preset {name:?}; valid presets: {valid}")]
    UnknownPreset {
        /// The name asked for.
        name: String,
        /// Comma-separated valid names.
        valid: String,
    },
    /// A file could not be read.
    #[error("{path}: cannot read: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// A parameter or trace file is malformed or lacks what the model needs.
    #[error("{path}:{line}: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// 1-based line (0 when the problem is the file as a whole).
        line: u32,
        /// What is wrong and how to fix it.
        message: String,
    },
    /// Parameters that cannot describe a disk.
    #[error("invalid disk parameters: {0}")]
    Invalid(String),
    /// A request the disk cannot take.
    #[error("bad request: {0}")]
    BadRequest(String),
}
