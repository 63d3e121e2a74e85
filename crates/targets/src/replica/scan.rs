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
use layoutd_core::{Op, ReqId, Request};

/// Bitmap reads in flight at once.
const BITMAP_READS_MAX: u32 = 32;
/// The largest descriptor table read (bytes).
const GDT_BYTES_MAX: u64 = 32 << 20;

/// Why no scan runs after the written set was dropped.
pub(super) const WRITTEN_DROPPED: &str =
    "free-space scan: the set of blocks written since open outgrew memory_bytes_max \
     and was dropped; no scans until the next open (discards still count)";

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
    /// Blocks written from above since the open.
    pub written: Written,
    /// The written set outgrew `memory_bytes_max` and was dropped: no
    /// scan may declare anything until the next open.
    pub written_dropped: bool,
    /// The block size of the file system the last scan read (0: none yet).
    pub fs_block_bytes: u32,
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
            written: Written::new(blocks),
            written_dropped: false,
            fs_block_bytes: 0,
        }
    }

    pub fn running(&self) -> bool {
        matches!(self.phase, Phase::Reading { .. })
    }
}

/// Blocks per page of [`Written`] (a page is 4 KiB of bits: 128 MiB of
/// volume at 4 KiB blocks).
const WRITTEN_PAGE_BLOCKS: u64 = 4096 * 8;

/// The blocks written from above since the open: a set that only grows,
/// marked on every write and read only by a scan. A bitmap in pages made on
/// first touch, so marking a write is a few instructions (an extent map
/// paid two tree searches and an insert per scattered write) and memory is
/// 4 KiB per 128 MiB region of the volume written to (at 4 KiB blocks), plus
/// 8 bytes per region; at most the volume's size / 32,768.
pub(super) struct Written {
    pages: Vec<Option<Box<[u64; WRITTEN_PAGE_BLOCKS as usize / 64]>>>,
    blocks: u64,
}

impl Written {
    fn new(blocks: u64) -> Written {
        Written { pages: vec![None; blocks.div_ceil(WRITTEN_PAGE_BLOCKS) as usize], blocks }
    }

    /// Marks the blocks of `[start, start + length)` (clipped to the volume).
    pub fn mark(&mut self, start: u64, length: u64) {
        let end = (start + length).min(self.blocks);
        let mut b = start;
        while b < end {
            let page = self.pages[(b / WRITTEN_PAGE_BLOCKS) as usize]
                .get_or_insert_with(|| Box::new([0; WRITTEN_PAGE_BLOCKS as usize / 64]));
            let (w, off) = (((b % WRITTEN_PAGE_BLOCKS) / 64) as usize, b % 64);
            let n = (end - b).min(64 - off);
            page[w] |= (u64::MAX >> (64 - n)) << off;
            b += n;
        }
    }

    /// The marked runs of `[start, start + length)`, in order (a scan's
    /// once-per-open question: block by block, skipping untouched pages).
    pub fn runs(&self, start: u64, length: u64) -> Vec<(u64, u64)> {
        let end = (start + length).min(self.blocks);
        let mut out: Vec<(u64, u64)> = Vec::new();
        // (A skipped word or page may overshoot `end`: the loop stops.)
        let mut b = start;
        while b < end {
            if self.pages[(b / WRITTEN_PAGE_BLOCKS) as usize].is_none() {
                b = (b / WRITTEN_PAGE_BLOCKS + 1) * WRITTEN_PAGE_BLOCKS;
                continue;
            }
            let word = self.pages[(b / WRITTEN_PAGE_BLOCKS) as usize].as_ref().expect("checked")
                [((b % WRITTEN_PAGE_BLOCKS) / 64) as usize];
            if b % 64 == 0 && word == 0 {
                b += 64;
                continue;
            }
            if word >> (b % 64) & 1 == 1 {
                match out.last_mut() {
                    Some((s, n)) if *s + *n == b => *n += 1,
                    _ => out.push((b, 1)),
                }
            }
            b += 1;
        }
        out
    }

    /// The bytes marking `[start, start + length)` would allocate (pages
    /// not made yet).
    pub fn growth(&self, start: u64, length: u64) -> u64 {
        let end = (start + length).min(self.blocks);
        if start >= end {
            return 0;
        }
        let pages = (start / WRITTEN_PAGE_BLOCKS..=(end - 1) / WRITTEN_PAGE_BLOCKS)
            .filter(|&p| self.pages[p as usize].is_none())
            .count() as u64;
        pages * (WRITTEN_PAGE_BLOCKS / 8)
    }

    /// Frees every page (the set is given up).
    fn drop_pages(&mut self) {
        self.pages.iter_mut().for_each(|p| *p = None);
    }

    /// Memory held (bytes).
    pub fn bytes(&self) -> u64 {
        let page = WRITTEN_PAGE_BLOCKS / 8;
        self.pages.len() as u64 * 8 + self.pages.iter().flatten().count() as u64 * page
    }
}

impl Replica {
    /// Memory the caps count: the replica map, the block sets and the set
    /// of blocks written since open (`memory_bytes_max`).
    pub(super) fn memory_bytes(&self) -> u64 {
        self.space.map_bytes() + self.space.sets_bytes() + self.scan.written.bytes()
    }

    /// An upper write of `[ba, ba + n)`: marked for later scans. Past
    /// `memory_bytes_max` the set is dropped instead, and with it every
    /// scan until the next open: a scan without the set could declare
    /// free a block the file system allocated whose bitmap bit is not on
    /// disk yet (discards still declare free space).
    pub(super) fn mark_written(&mut self, ba: u64, n: u64) {
        if self.scan.written_dropped {
            return;
        }
        let growth = self.scan.written.growth(ba, n);
        if growth > 0 && self.memory_bytes() + growth > self.args.memory_bytes_max {
            self.scan.written.drop_pages();
            self.scan.written_dropped = true;
            self.scan.error = Some(WRITTEN_DROPPED.into());
            return;
        }
        self.scan.written.mark(ba, n);
    }

    /// Starts a scan now (a background step or the `free-space` message);
    /// returns the bytes of its first read.
    pub(super) fn start_scan(&mut self) -> u64 {
        if self.scan.running() {
            return 0;
        }
        if self.scan.written_dropped {
            self.scan.wanted = false;
            self.scan.runs_count += 1;
            self.scan.error = Some(WRITTEN_DROPPED.into());
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
        self.scan.fs_block_bytes = geo.block_bytes;
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
        if self.scan.written_dropped {
            // Dropped while this scan ran: its bitmaps may miss those writes.
            self.scan.runs_count += 1;
            return;
        }
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
            let written = self.scan.written.runs(a, e - a);
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

#[cfg(test)]
mod tests {
    use super::{Written, WRITTEN_PAGE_BLOCKS};

    #[test]
    fn written_growth_is_the_pages_a_mark_would_make() {
        let p = WRITTEN_PAGE_BLOCKS;
        let mut w = Written::new(3 * p + 10);
        let page = p / 8;
        assert_eq!(w.growth(p - 1, 2), 2 * page, "two pages touched");
        w.mark(p - 1, 2);
        assert_eq!(w.bytes(), 4 * 8 + 2 * page);
        assert_eq!(w.growth(0, 2 * p), 0, "both made");
        assert_eq!(w.growth(3 * p, 100), page, "clipped to the volume, one page");
        assert_eq!(w.growth(4 * p, 1), 0, "past the volume");
        w.drop_pages();
        assert_eq!((w.bytes(), w.runs(0, 3 * p + 10)), (4 * 8, vec![]));
    }

    #[test]
    fn written_runs_are_the_marked_blocks_merged_across_words_and_pages() {
        let p = WRITTEN_PAGE_BLOCKS;
        let mut w = Written::new(3 * p + 10);
        assert_eq!(w.runs(0, 3 * p + 10), vec![]);
        let before = w.bytes();
        w.mark(5, 1);
        w.mark(60, 10); // across a word
        w.mark(p - 2, 4); // across a page
        w.mark(3 * p + 8, 100); // clipped at the end
        assert_eq!(w.runs(0, 3 * p + 10), vec![(5, 1), (60, 10), (p - 2, 4), (3 * p + 8, 2)]);
        assert_eq!(w.runs(62, p), vec![(62, 8), (p - 2, 4)]);
        assert_eq!(w.runs(6, 54), vec![]);
        assert_eq!(w.bytes(), before + 3 * p / 8, "pages 0, 1 and 3 made");
    }
}
