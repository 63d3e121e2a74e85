//! The free-space scan: reads the ext2/3/4 superblock, descriptors and
//! block bitmaps of the file system on the volume (1:1 below, so straight
//! from the lower device) with [`super::ext`], and declares the free blocks
//! free. Runs once per open in idle time (`fs_scan = "ext"`), or when the
//! `free-space` message asks (the `layoutd free-space` command).
//!
//! Safety: a block called free reads back as zeroes, so the scan is
//! conservative. The reader refuses a file system whose journal needs
//! recovery (mounted ext3/4 included: its on-disk bitmaps lag behind the
//! journal), and blocks the volume has seen written since it was opened are
//! never declared free by a scan (their bitmap bit may not be on disk yet).
//! An unknown or corrupt file system is reported once (status
//! `fs_scan_error`) and declares nothing.

use super::ext::{self, Geometry, Group};
use super::{LowerOp, Replica};
use crate::alloc::FreeSpace;
use layoutd_core::{Op, ReqId, Request};

/// Bitmap reads in flight at once.
const BITMAP_READS_MAX: u32 = 32;
/// The largest descriptor table read (bytes).
const GDT_BYTES_MAX: u64 = 32 << 20;

/// Which scan read a lower read is.
#[derive(Clone, Copy, Debug)]
pub(super) enum ScanRead {
    Super,
    Descriptors,
    Bitmap(u32),
}

#[derive(Default)]
pub(super) enum Phase {
    #[default]
    Waiting,
    Reading {
        geo: Option<Geometry>,
        groups: Vec<Group>,
        next: u32,
        in_flight: u32,
        found: Vec<(u64, u64)>,
    },
}

/// Scan state.
pub(super) struct Scan {
    pub phase: Phase,
    /// A scan is wanted (once per open in idle time, or asked for).
    pub wanted: bool,
    pub error: Option<String>,
    pub runs_count: u64,
    pub declared_blocks: u64,
    /// Blocks the last scan found free (declared already or not).
    pub found_blocks: u64,
    /// Blocks written from above since the open ("free" = written).
    pub written: FreeSpace,
}

impl Scan {
    pub fn new(blocks: u64, enabled: bool) -> Scan {
        Scan {
            phase: Phase::Waiting,
            wanted: enabled,
            error: None,
            runs_count: 0,
            declared_blocks: 0,
            found_blocks: 0,
            written: FreeSpace::all_used(blocks),
        }
    }

    pub fn running(&self) -> bool {
        matches!(self.phase, Phase::Reading { .. })
    }
}

impl Replica {
    /// Starts a scan now (a background step or the `free-space` message);
    /// returns the bytes of its first read.
    pub(super) fn start_scan(&mut self) -> u64 {
        if self.scan.running() {
            return 0;
        }
        self.scan.wanted = false;
        self.scan.error = None;
        self.scan.phase =
            Phase::Reading { geo: None, groups: Vec::new(), next: 0, in_flight: 0, found: Vec::new() };
        let req = Request::new(ReqId(0), Op::Read, 0, 4096);
        self.emit(LowerOp::Scan(ScanRead::Super), req);
        4096
    }

    fn scan_failed(&mut self, e: String) {
        self.scan.phase = Phase::Waiting;
        self.scan.runs_count += 1;
        self.scan.error = Some(format!("free-space scan: {e}; no free space from it (discards still count)"));
    }

    /// A scan read completed.
    pub(super) fn scan_read(
        &mut self,
        what: ScanRead,
        data: Result<Option<bytes::Bytes>, layoutd_core::IoError>,
    ) {
        let data = match data {
            Ok(Some(d)) => d,
            Ok(None) => return self.scan_failed("the runtime runs in timing-only mode (no bytes)".into()),
            Err(e) => return self.scan_failed(format!("reading the volume failed ({e})")),
        };
        let step = match what {
            ScanRead::Super => self.scan_super(&data),
            ScanRead::Descriptors => self.scan_descriptors(&data),
            ScanRead::Bitmap(g) => self.scan_bitmap(g, &data),
        };
        match step {
            Err(e) => self.scan_failed(e),
            Ok(()) => self.scan_pump(),
        }
    }

    fn scan_super(&mut self, d: &[u8]) -> Result<(), String> {
        let at = ext::SUPERBLOCK_OFFSET_BYTES as usize;
        let geo = ext::parse_superblock(&d[at..at + ext::SUPERBLOCK_BYTES])?;
        let end = geo.blocks_count * u64::from(geo.block_bytes);
        if end > self.args.volume_bytes {
            return Err(format!("the file system ({end} bytes) is larger than the volume"));
        }
        let gdt_bytes = geo.gdt_blocks() * u64::from(geo.block_bytes);
        if gdt_bytes > GDT_BYTES_MAX {
            return Err(format!("descriptor table of {gdt_bytes} bytes is too large"));
        }
        let req = Request::new(ReqId(0), Op::Read, geo.gdt_offset_bytes(), gdt_bytes as u32);
        let Phase::Reading { geo: g, .. } = &mut self.scan.phase else { unreachable!("scanning") };
        *g = Some(geo);
        self.emit(LowerOp::Scan(ScanRead::Descriptors), req);
        Ok(())
    }

    fn scan_descriptors(&mut self, d: &[u8]) -> Result<(), String> {
        let Phase::Reading { geo: Some(geo), groups, .. } = &mut self.scan.phase else {
            unreachable!("scanning")
        };
        *groups = ext::parse_descriptors(geo, d)?;
        Ok(())
    }

    fn scan_bitmap(&mut self, g: u32, d: &[u8]) -> Result<(), String> {
        let Phase::Reading { geo: Some(geo), groups, in_flight, found, .. } = &mut self.scan.phase else {
            unreachable!("scanning")
        };
        *in_flight -= 1;
        found.extend(ext::group_free_extents(geo, groups, g, Some(d))?);
        Ok(())
    }

    /// Issues the next bitmap reads, or finishes.
    fn scan_pump(&mut self) {
        let Phase::Reading { geo: Some(geo), groups, next, in_flight, found } = &mut self.scan.phase else {
            return;
        };
        if groups.is_empty() {
            return; // waiting for the descriptors
        }
        let mut reads = Vec::new();
        let mut error = None;
        while *next < geo.group_count && *in_flight < BITMAP_READS_MAX {
            let g = *next;
            *next += 1;
            if groups[g as usize].block_uninit {
                match ext::group_free_extents(geo, groups, g, None) {
                    Ok(e) => found.extend(e),
                    Err(e) => error = Some(e),
                }
                continue;
            }
            *in_flight += 1;
            let bs = u64::from(geo.block_bytes);
            reads
                .push((g, Request::new(ReqId(0), Op::Read, groups[g as usize].block_bitmap * bs, bs as u32)));
        }
        let done = *next == geo.group_count && *in_flight == 0;
        let fs_block_bytes = u64::from(geo.block_bytes);
        if let Some(e) = error {
            return self.scan_failed(e);
        }
        for (g, r) in reads {
            self.emit(LowerOp::Scan(ScanRead::Bitmap(g)), r);
        }
        if done {
            let Phase::Reading { found, .. } = std::mem::take(&mut self.scan.phase) else { unreachable!() };
            self.scan_apply(fs_block_bytes, found);
        }
    }

    /// Declares the scan's free blocks free, except those written since open.
    fn scan_apply(&mut self, fs_block_bytes: u64, found: Vec<(u64, u64)>) {
        let b = self.block();
        let mut declared = 0;
        self.scan.found_blocks = 0;
        for (s, n) in found {
            let (a, e) = ((s * fs_block_bytes).div_ceil(b), ((s + n) * fs_block_bytes) / b);
            let e = e.min(self.args.volume_blocks());
            if a >= e {
                continue;
            }
            self.scan.found_blocks += e - a;
            let mut pos = a;
            let written = self.scan.written.free_parts(a, e - a);
            for (ws, wl) in written.into_iter().chain([(e, 0)]) {
                if ws > pos {
                    declared += self.space.declared.release_range(pos, ws - pos);
                    self.release_free(pos, ws - pos);
                }
                pos = ws + wl;
            }
        }
        self.scan.runs_count += 1;
        self.scan.declared_blocks += declared;
        self.map_changed();
    }

    /// Makes the declared blocks of `[s, s + n)` that hold no replica and
    /// no replica write allocatable.
    pub(super) fn release_free(&mut self, s: u64, n: u64) {
        for (a, l) in self.space.declared.free_parts(s, n) {
            let mut pos = a;
            for e in self.space.forward.overlapping(a, l) {
                if e.start > pos {
                    self.space.free.release_range(pos, e.start - pos);
                }
                pos = e.start + e.length;
            }
            if pos < a + l {
                self.space.free.release_range(pos, a + l - pos);
            }
        }
        let pending: Vec<(u64, u64)> = self.pending.values().map(|p| (p.loc, p.blocks)).collect();
        for (l, k) in pending {
            if l < s + n && s < l + k {
                self.space.free.take_range(l, k);
            }
        }
    }
}
