//! The HDD model as the deterministic harness's bottom device: an
//! implementation of [`Timing`] over [`layoutd_hdd::Disk`], and a
//! [`NullDevice`] that stores nothing (timing-only replay).
//!
//! Mapping of ops onto the disk: reads are reads; writes and write-zeroes
//! are writes; a flush is a flush. A trim completes at once without
//! touching the arm (a hard disk has nothing to do for it). FUA needs no
//! extra work with the write cache off (every preset); with it on, a FUA
//! write is followed by nothing: noted in `docs/sim.md`.

use crate::hist::Histogram;
use crate::sample::Sampler;
use layoutd_core::{Instant, Op, Request, SECTOR_BYTES};
use layoutd_hdd::{Disk, DiskOp, DiskRequest};
use layoutd_runtime::det::Timing;
use rand_chacha::ChaCha8Rng;
use std::collections::VecDeque;

/// What the disk was asked to do, in the order it was asked (for tests).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DiskLogEntry {
    /// The op as the stack sent it.
    pub op: Op,
    /// Byte offset on the disk.
    pub offset_bytes: u64,
    /// Byte length.
    pub length_bytes: u32,
}

/// Disk-side counters and samples.
#[derive(Default)]
pub struct DiskStats {
    /// Requests the disk served (trims excluded).
    pub served_count: u64,
    /// Of those, served from the on-board buffer.
    pub cache_hit_count: u64,
    /// Trims completed without the arm.
    pub trims_count: u64,
    /// Seek distance of every media access, in cylinders.
    pub seek_cyl: Histogram,
    /// Disk service time (start to completion), ns.
    pub service_ns: Histogram,
    /// Sectors dropped because requests ran past the end of the disk.
    pub clamped_sectors: u64,
}

/// [`Timing`] backed by the HDD model.
pub struct HddTiming {
    disk: Disk,
    /// Trims, completing at the instant they were submitted (FIFO, times ascending).
    immediate: VecDeque<(Instant, u64)>,
    /// Counters and histograms.
    pub stats: DiskStats,
    /// Lower addresses against time, reads and writes, decimated.
    pub addresses: Sampler,
    /// When set, every submitted request is appended (tests only: unbounded).
    pub log: Option<Vec<DiskLogEntry>>,
    /// When set, every request the disk served is written out with its costs.
    pub record: Option<DiskRecord>,
    busy: BusyWindow,
}

/// `--record-disk`: the same record the live emulator writes
/// (`serve --record-disk`), so a replay and its live run compare line by line.
pub use layoutd_runtime::emulate::DiskRecord;

/// Disk busy time inside the window `[start, mark]`, where `start` is set
/// once (the trace's origin) and `mark` moves forward (each completion of
/// a trace request). The arm serves one request at a time, so the services
/// are disjoint intervals completing in order: the busy time up to the last
/// mark is the services completed by then, clipped to the start, plus the
/// part before the mark of the first service to complete after it.
#[derive(Default)]
struct BusyWindow {
    start_ns: u64,
    /// Services completed so far, clipped to `start_ns`.
    completed_ns: u64,
    mark_ns: u64,
    completed_at_mark_ns: u64,
    /// The part before the mark of the first service completed after it.
    straddling_ns: Option<u64>,
}

impl BusyWindow {
    fn served(&mut self, start_ns: u64, complete_ns: u64) {
        let from = start_ns.max(self.start_ns);
        let inside_ns = complete_ns.saturating_sub(from);
        self.completed_ns += inside_ns;
        if complete_ns <= self.mark_ns {
            self.completed_at_mark_ns += inside_ns;
        } else if self.straddling_ns.is_none() {
            self.straddling_ns = Some(self.mark_ns.saturating_sub(from));
        }
    }
}

impl HddTiming {
    /// Wraps `disk`; `samples_max` bounds the address-time sample.
    pub fn new(disk: Disk, samples_max: usize) -> HddTiming {
        HddTiming {
            disk,
            immediate: VecDeque::new(),
            stats: DiskStats::default(),
            addresses: Sampler::new(samples_max),
            log: None,
            record: None,
            busy: BusyWindow::default(),
        }
    }

    /// Busy time is counted from `now_ns` on (the trace's origin).
    pub fn start_busy_window(&mut self, now_ns: u64) {
        self.busy =
            BusyWindow { start_ns: now_ns, mark_ns: now_ns, straddling_ns: Some(0), ..Default::default() };
    }

    /// Moves the busy window's end to `now_ns` (a trace request completed).
    pub fn mark_busy_window(&mut self, now_ns: u64) {
        let b = &mut self.busy;
        debug_assert!(now_ns >= b.mark_ns);
        b.mark_ns = now_ns;
        b.completed_at_mark_ns = b.completed_ns;
        b.straddling_ns = None;
    }

    /// Disk busy time between the window's start and its last mark. Exact
    /// once every service that began before the mark has completed.
    pub fn busy_in_window_ns(&self) -> u64 {
        self.busy.completed_at_mark_ns + self.busy.straddling_ns.unwrap_or(0)
    }

    /// The disk model.
    pub fn disk(&self) -> &Disk {
        &self.disk
    }
}

impl Timing for HddTiming {
    fn submit(&mut self, now: Instant, req: &Request, tag: u64, _rng: &mut ChaCha8Rng) {
        if let Some(log) = &mut self.log {
            log.push(DiskLogEntry {
                op: req.op,
                offset_bytes: req.offset_bytes,
                length_bytes: req.length_bytes,
            });
        }
        let op = match req.op {
            Op::Read => DiskOp::Read,
            Op::Write | Op::WriteZeroes => DiskOp::Write,
            Op::Flush => DiskOp::Flush,
            Op::Trim => {
                self.stats.trims_count += 1;
                self.immediate.push_back((now, tag));
                return;
            }
        };
        if op != DiskOp::Flush {
            self.addresses.offer(now.as_ns(), req.offset_bytes, op == DiskOp::Write);
        }
        let lba = req.offset_bytes / SECTOR_BYTES;
        let sectors = (u64::from(req.length_bytes) / SECTOR_BYTES) as u32;
        if let Some(r) = &mut self.record {
            r.submitted(tag, req.offset_bytes, req.length_bytes);
        }
        self.disk.submit(now.as_ns(), DiskRequest { id: tag, op, lba, sectors });
    }

    fn next_completion(&self) -> Option<Instant> {
        let disk = self.disk.next_completion_ns().map(Instant::from_ns);
        match self.immediate.front() {
            None => disk,
            Some(&(trim, _)) => Some(disk.map_or(trim, |d| d.min(trim))),
        }
    }

    fn complete(&mut self, now: Instant, _rng: &mut ChaCha8Rng) -> Option<u64> {
        let disk_at = self.disk.next_completion_ns();
        if let Some(&(t, tag)) = self.immediate.front() {
            if t <= now && disk_at.is_none_or(|d| t.as_ns() <= d) {
                self.immediate.pop_front();
                return Some(tag);
            }
        }
        let done = self.disk.complete(now.as_ns())?;
        assert!(done.complete_ns <= now.as_ns(), "completion popped before it was due");
        self.stats.served_count += 1;
        self.stats.cache_hit_count += u64::from(done.cache_hit);
        self.stats.clamped_sectors += u64::from(done.clamped_sectors);
        self.stats.service_ns.record(done.complete_ns - done.start_ns);
        self.busy.served(done.start_ns, done.complete_ns);
        if let Some(r) = &mut self.record {
            r.completed(&done);
        }
        if !done.cache_hit && done.op != DiskOp::Flush {
            self.stats.seek_cyl.record(done.seek_distance_cyl);
        }
        Some(done.id)
    }

    fn busy(&self) -> bool {
        self.disk.busy() || !self.immediate.is_empty()
    }
}

/// A device that stores nothing (now in `layoutd_disk`, shared with the
/// runtime's memory tests).
pub use layoutd_disk::NullDevice;
