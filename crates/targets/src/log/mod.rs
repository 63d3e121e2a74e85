//! `log`: a log-structured block layout (Rosenblum & Ousterhout's LFS at
//! the block layer) with the mechanisms of SSR-LFS (Oh et al., SYSTOR
//! 2010): cleaning, hole-plugging, Slack Space Recycling and lazy map
//! updates. Every write goes to a new slot, never in place.
//!
//! Glossary:
//! - *block*: `block_bytes` of the volume; the volume is `volume_blocks`.
//! - *slot*: `block_bytes` on the lower device that holds one block;
//!   *segment*: a [`crate::seglog`] header and `slot_count` slots.
//!   A slot id is `segment * slot_count + slot`.
//! - *map*: block -> slot id, a flat `u32` per block in RAM; on disk in map
//!   pages written only at checkpoints ([`map`]).
//! - *summary*: a segment's header: the blocks its newly written slots
//!   hold, the blocks trimmed meanwhile, and the location of the segment
//!   written after it (a chained header: [`crate::seglog::ChainWalk`]). A
//!   segment written in parts (at flushes) has one summary per part: the
//!   header, then summaries in slots, each named by the one before.
//! - *hole*: a slot of a used segment that holds no live block. *SSR*:
//!   user writes go into holes; *plugging*: the cleaner's copies do;
//!   *cleaning*: copy a victim's live blocks elsewhere, so it comes free.
//! - *epoch*: the writes between two checkpoints; the checkpoint that ends
//!   epoch `e` has generation `e`.
//! - *eligible*: a segment whose holes may be written now: not written in
//!   this epoch (its header must survive until the checkpoint), and no slot
//!   of it freed in this epoch (**the crash rule**: a slot freed since the
//!   last durable checkpoint is never reused before the next one, since the
//!   durable map may still point there and a crash would read the new bytes).
//!
//! Lower device layout:
//! ```text
//! 0        4096     8192
//! | ck 0 | ck 1 | seg 0: header | slots | seg 1 | ... | map pages, two copies each |
//! ```
//!
//! Request path: a read that no queued or running write overlaps is served
//! at once, beside everything else (`request::direct_read`); writes, trims,
//! flushes and the log's own work run one at a time, in arrival order (a
//! stack of works: a write short of space runs a cleaning pass or a
//! checkpoint above itself, then resumes). Writes land in the open
//! segment's RAM buffer and complete; the segment is sealed (written with
//! its last summary) when full or at a checkpoint. Flush = write the part
//! of the open segment filled since its last write, with a summary of its
//! own, and keep the segment open (partial segments: each later part's
//! summary sits in the slot the part before named), wait for every segment
//! write, flush below, record a flush mark (the first flush of a segment).
//!
//! Recovery: the newest valid checkpoint, the map pages as of it, then the
//! chain of segments written after it, each summary (every part of a
//! segment) checked by format id, seq, boot and payload crc (format writes
//! only the checkpoint area: segments and map pages an earlier use of the
//! device left carry another format id); the first that fails
//! ends the log (a torn tail). If the
//! flush mark says a client was told a later segment was durable, that is
//! damage, and the open is refused (unless `--accept-loss`).

mod config;
pub mod map;
mod persist;
pub mod policy;
mod request;

pub use config::{Args, PolicyKind};

use crate::alloc::SegmentUsage;
use crate::seglog::{Entry, Geometry, SegLoc, Seq};
use layoutd_core::config::{ArgReader, ConfigError};
use layoutd_core::{Completion, Instant, OpenMode, Request, Status, Target};
use map::UNMAPPED;
use policy::{Census, Reclaim, SegInfo};
use rustc_hash::FxHashMap;
use std::collections::VecDeque;

/// Why this target sent a lower request.
#[derive(Clone, Debug)]
enum LowerOp {
    /// Format writes, recovery reads.
    Bringup,
    /// One part of a segment write.
    SegPart { loc: SegLoc },
    /// I/O of the work on top (reads, map pages, flushes, records, marks);
    /// its completion lands in `io[slot]`.
    Work { slot: usize },
    /// A piece of a read served beside the work stack (`request::DirectRead`):
    /// the read `key`, at `within` bytes of it; the lower read went on
    /// `through` bytes past the piece (the next segment's header, see
    /// `request::Log::read_through_bytes`), cut off on completion.
    Read { key: u64, within: u32, through: u32 },
}

impl LowerOp {
    fn is_background(&self) -> bool {
        matches!(self, LowerOp::SegPart { .. })
    }
}

/// A segment write waiting in the gate for reads of slots it overwrites.
struct GatedPart {
    loc: SegLoc,
    offset_bytes: u64,
    data: bytes::Bytes,
}

/// The segment taking writes.
struct OpenSeg {
    loc: SegLoc,
    seq: Seq,
    /// The slots to fill, in order (the holes when it was opened).
    holes: Vec<u16>,
    next_hole: usize,
    /// Whether it was opened with live blocks in it (SSR / plugging).
    holey: bool,
    /// The entries of the part not yet written (since the last partial write).
    entries: Vec<Entry>,
    /// Where that part's summary goes: the header area (`None`, the first
    /// part), or the slot the previous part's continue link named.
    summary_slot: Option<u16>,
    buf: usize,
}

/// A segment's RAM buffer, laid out as on disk (summary, then slots):
/// written into while the segment is open; while it is written below, the
/// lower writes share its bytes (slices, no copy), and it is taken back for
/// the next segment once they have all dropped them (else a new one).
enum SegBuf {
    Open(bytes::BytesMut),
    Written(bytes::Bytes),
}

impl SegBuf {
    fn bytes(&self) -> &[u8] {
        match self {
            SegBuf::Open(m) => m,
            SegBuf::Written(b) => b,
        }
    }

    fn open_mut(&mut self) -> &mut [u8] {
        match self {
            SegBuf::Open(m) => m,
            SegBuf::Written(_) => panic!("a buffer being written is not written into"),
        }
    }

    /// Whether it can take a segment without allocating.
    fn reusable(&self) -> bool {
        match self {
            SegBuf::Open(_) => true,
            SegBuf::Written(b) => b.is_unique(),
        }
    }

    /// Shares the bytes for the lower writes.
    fn freeze(&mut self) -> bytes::Bytes {
        let SegBuf::Open(m) = std::mem::replace(self, SegBuf::Written(bytes::Bytes::new())) else {
            panic!("only an open buffer is written")
        };
        let b = m.freeze();
        *self = SegBuf::Written(b.clone());
        b
    }

    /// Ready for the next segment: the same memory if the lower writes
    /// dropped it, else a new buffer of `len` bytes. Returns whether it
    /// had to allocate.
    fn reopen(&mut self, len: usize) -> bool {
        let SegBuf::Written(b) = std::mem::replace(self, SegBuf::Written(bytes::Bytes::new())) else {
            unreachable!("reopened twice")
        };
        let (m, new) = match b.try_into_mut() {
            Ok(m) => (m, false),
            Err(_) => (bytes::BytesMut::zeroed(len), true),
        };
        *self = SegBuf::Open(m);
        new
    }
}

/// A segment write in flight: a seal (its buffer is taken back when its
/// writes complete) or a partial write (`buf` None: its bytes are copies).
/// The writes of one location complete into its oldest entry first, so a
/// seal's entry empties only once every earlier partial write completed.
struct Sealed {
    loc: SegLoc,
    buf: Option<usize>,
    parts_left: u32,
}

/// One unit of serialized work. Only the top of the stack advances.
enum Work {
    /// An upper request.
    Upper(request::UpperWork),
    /// A cleaning pass.
    Clean(request::CleanWork),
    /// A checkpoint.
    Checkpoint(persist::CheckpointWork),
}

/// What a work waits for when it cannot go on.
#[derive(Debug, PartialEq, Eq)]
enum Blocked {
    /// Lower I/O of its own.
    Io,
    /// A RAM buffer (a segment write to finish).
    Buffer,
    /// A checkpoint (to name where the chain goes on, or to free holes).
    Checkpoint,
    /// Space for user writes: reclaim.
    Space,
}

#[derive(Default)]
struct Counters {
    user_bytes: u64,
    read_bytes: u64,
    slots_user_count: u64,
    slots_ssr_count: u64,
    slots_cleaning_count: u64,
    slots_plugging_count: u64,
    segments_written_count: u64,
    segments_cleaned_count: u64,
    cleaning_passes_count: u64,
    on_demand_cleanings_count: u64,
    background_cleanings_count: u64,
    checkpoints_count: u64,
    map_bytes_written: u64,
    summary_bytes_written: u64,
    flushes_count: u64,
    flush_marks_count: u64,
    trims_count: u64,
    rmw_count: u64,
    recovered_segments_count: u64,
    lost_segments_count: u64,
    /// Map pages whose mappings an opener accepted to lose
    /// (`--accept-loss`): pages written before the checkpoint with no
    /// readable copy, and pages the map's digest could not clear of
    /// serving stale mappings (unmapped).
    lost_map_pages_count: u64,
    /// Lower writes or flushes sent again after an error.
    lower_retries_count: u64,
    /// Lower reads that failed (each failed its own request, or ended a
    /// cleaning pass early).
    lower_read_errors_count: u64,
    /// Cleaning passes that found a victim's blocks by a pass over the map
    /// (its summary did not name every live slot: holes filled by SSR or
    /// plugging, or no data in timing-only mode).
    cleaner_map_scans_count: u64,
    /// Slots written by idle re-sequencing.
    slots_resequence_count: u64,
    /// Groups re-sequenced.
    resequence_passes_count: u64,
    /// Re-sequencing passes run while busy (of `resequence_passes_count`
    /// once done; `resequence_busy_user_blocks_per_pass`).
    resequence_busy_passes_count: u64,
    /// Groups re-sequencing's sweep stepped over (its cost: a bit each,
    /// and a marked group's blocks gathered from the map).
    resequence_groups_swept_count: u64,
    /// Segment buffers allocated anew: a lower write still held the old
    /// one's bytes when the buffer was needed again.
    segment_buffers_allocated_count: u64,
    /// Partial writes of an open segment (a flush, FUA write or full
    /// summary wrote the part filled since the last, and the segment
    /// stays open).
    partial_writes_count: u64,
    /// Slots taken by the summaries of partial writes' next parts.
    summary_slots_count: u64,
    /// Sliding compaction: home segments emptied for their group (a
    /// cleaning pass of that one segment).
    compact_evictions_count: u64,
    /// Sliding compaction: groups re-sequenced into their home segment.
    compact_groups_home_count: u64,
    /// Direct reads that went on through the next segment's header.
    read_throughs_count: u64,
    /// Sliding compaction: checkpoints that sealed an empty segment so that
    /// the chain goes on at the home (the segment named next was another).
    compact_redirects_count: u64,
}

enum Phase {
    Bringup(persist::Bringup),
    Serving,
    Failed(String),
}

/// The log target. Memory ([`Log::translation_ram_bytes`]): the map
/// (per group of blocks its runs, or entries of the fewest bits that hold
/// a slot id; see [`map::SlotMap`]), one live bit a slot,
/// 12 bytes and two bits a segment, 10 bytes a map page: under 4 bytes a
/// block up to 29-bit slot ids (1 TiB exposed; see docs/log.md); plus `buffer_count`
/// segment buffers. Every queue is bounded by the upper requests in flight
/// (the runtime bounds them) plus one stack of at most three works.
pub struct Log {
    args: Args,
    geo: Geometry,
    phase: Phase,
    map: map::SlotMap,
    /// Per slot: one bit, set while a block lives there (the cleaner finds
    /// which block from the segment's summary, checked against the map).
    live: map::Packed,
    usage: SegmentUsage,
    /// Per segment: one bit, written in this epoch.
    written_now: map::Packed,
    /// Per segment: one bit, a slot of it freed in this epoch.
    freed_now: map::Packed,
    /// The current epoch: the generation the next checkpoint gets.
    epoch: u64,
    boot: u64,
    /// The format's identity, stamped on every summary and checkpoint
    /// (seglog: replay takes only summaries carrying the checkpoint's) and
    /// map page (`map`: recovery takes only copies carrying it).
    format_id: u64,
    /// Map pages of the version before they carried the id are the
    /// volume's own (`seglog::ChainCheckpoint::legacy_map`).
    legacy_map: bool,
    /// Bring-up of a volume of the version before format identities: the
    /// checkpoint recovered from, to be written again in place in this
    /// build's version once the bring-up checkpoint is durable (see
    /// `seglog::copy_version`).
    legacy_rewrite: Option<crate::seglog::ChainCheckpoint>,
    next_seq: Seq,
    /// Where the next segment goes, as named by the last header or checkpoint.
    chain_next: Option<SegLoc>,
    head: SegLoc,
    open: Option<OpenSeg>,
    sealed: Vec<Sealed>,
    buffers: Vec<SegBuf>,
    buffers_free: Vec<usize>,
    /// Segment -> buffer holding its newly written slots (open or sealed).
    seg_buf: FxHashMap<u32, usize>,
    /// Per buffer: which slots it holds (written in this pass).
    buf_filled: Vec<Vec<bool>>,
    dirty_pages: Vec<bool>,
    /// Dirty map pages (`dirty_pages` set), kept by [`Log::set_page_dirty`].
    dirty_count: u32,
    /// Dirty map pages when the epoch's 1st, 2nd, 4th, ... 2^k-th segment
    /// was sealed: how many pages a checkpoint writes after that many
    /// segments of this workload (the cost estimate's checkpoint).
    dirty_at_pow2: Vec<u32>,
    /// Per map page: bit 0 the copy holding its current version; bit 1
    /// (`persist::PAGE_WRITTEN`) set once the page has a copy of this format
    /// (written by a checkpoint, or found usable by recovery).
    page_copy: Vec<u8>,
    /// Map pages with that bit set; goes into every checkpoint
    /// (`seglog::ChainCheckpoint::map_pages_written`).
    map_pages_written: u32,
    /// Per map page: the generation of its current copy (0 for a page
    /// with none), kept by `Log::set_page_generation`.
    page_generation: Vec<u64>,
    /// The digests of `page_generation` (`seglog::MapDigest`), in every
    /// checkpoint (`seglog::ChainCheckpoint::map_digest`).
    map_digest: crate::seglog::MapDigest,
    /// The sketch of the pages with `persist::PAGE_WRITTEN` set
    /// (`seglog::MapSketch`), in every checkpoint
    /// (`seglog::ChainCheckpoint::map_sketch`).
    map_sketch: crate::seglog::MapSketch,
    segments_since_checkpoint: u32,
    /// The flush mark: generation and how far it says the log is durable.
    mark_generation: u64,
    mark_upto: Seq,
    pending: VecDeque<request::Pending>,
    works: Vec<Work>,
    /// Completions of the top work's I/O, in issue order.
    io: Vec<Option<Completion>>,
    /// Victims of the cleaning pass running (not chosen as targets).
    cleaning: Vec<u32>,
    lower_io: crate::lowerio::LowerIo<LowerOp>,
    /// Writes and flushes in flight while serving, by lower id, with the
    /// attempts made: a failed one is parked and sent again after the
    /// shared backoff, up to [`LOWER_WRITE_ATTEMPTS`] in all, before the
    /// target stops.
    retryable: FxHashMap<u64, (Request, u32)>,
    /// Failed writes and flushes waiting for `backoff` to send them again,
    /// with the attempt they will be.
    parked: Vec<(LowerOp, Request, u32)>,
    backoff: crate::retry::Backoff,
    /// Reads served beside the work stack, by key (looked up, never
    /// iterated): one per such read in flight.
    reads: FxHashMap<u64, crate::split::Assembly>,
    next_read_key: u64,
    /// Lower ranges in flight (direct reads, segment writes): a segment
    /// write into holes waits for reads of those slots issued before it.
    gate: crate::gate::OverlapGate<GatedPart>,
    policy: Box<dyn Reclaim>,
    /// Whether any write came without data (timing-only simulation).
    timing_only: bool,
    loss: Option<String>,
    counters: Counters,
    /// The idle-cleaning decision, kept until something it depends on
    /// changes (`census_changed`): the stack asks after every input, and a
    /// census is a pass over every segment.
    idle_offer: std::cell::Cell<Option<bool>>,
    /// The last lower error, with what it was for: shown in the status.
    last_lower_error: Option<String>,
    /// Per group of `slot_count` blocks (aligned): one bit, a block of it
    /// was mapped elsewhere since re-sequencing last looked at it.
    group_dirty: map::Packed,
    group_dirty_count: u64,
    /// The group re-sequencing looks at next (a sweep over the volume).
    group_cursor: u64,
    /// A busy re-sequencing pass found every marked group with a block in
    /// the open segment (it passes over those): until that segment is
    /// sealed, a block is trimmed or an idle step runs, the next busy
    /// pass would find the same, so it does not sweep the groups again. A
    /// client write in between places its block in the open segment: a
    /// group it marks is passed over too.
    busy_sweep_futile: bool,
    /// Idle time for re-sequencing: `resequence_idle_ms` without a request
    /// (counted from each request; idle before the first), and nothing in
    /// flight when the wait ends (else it restarts then, so a long request
    /// is not taken for idle time).
    resequence_idle: layoutd_core::idle::IdleTimer,
    /// Sliding compaction is running (idle, `resequence_sliding`): segments
    /// go to `compact_home` or to the far end. Ends at the next request.
    compacting: bool,
    /// `resequence_sliding = "auto"`: whether this idle period's
    /// re-sequencing slides, decided at its first step from the
    /// utilisation (`Log::resequence_slides`). Cleared by each request.
    slides_this_idle: Option<bool>,
    /// The home segment sliding compaction prepares or fills.
    compact_home: Option<SegLoc>,
    /// The group whose home is being prepared, and the preparation steps
    /// taken for it (bounded: then it is re-sequenced wherever it fits).
    compact_group: Option<(u64, u32)>,
    /// Blocks of user writes since the last re-sequencing pass while busy
    /// (`Reclaim::resequence_busy_due`).
    busy_user_blocks: u64,
}

/// Attempts at a lower write or flush before the target stops (a write
/// that keeps failing would leave acknowledged data only in RAM).
const LOWER_WRITE_ATTEMPTS: u32 = 3;

/// What a lower request was for, for messages.
fn describe(op: &LowerOp) -> String {
    match op {
        LowerOp::Bringup => "bring-up request".into(),
        LowerOp::SegPart { loc } => format!("write of segment {}", loc.0),
        LowerOp::Work { .. } => "metadata, flush or read request".into(),
        LowerOp::Read { .. } => "read".into(),
    }
}

impl Log {
    /// Parses the config over a lower device of `lower_bytes`.
    pub fn ctr(args: ArgReader<'_>, lower_bytes: u64, mode: OpenMode) -> Result<Log, ConfigError> {
        let (args, geo) = Args::parse(args, lower_bytes)?;
        Ok(Log::new(args, geo, mode))
    }

    fn new(args: Args, geo: Geometry, mode: OpenMode) -> Log {
        let segs = geo.segment_count as usize;
        let slots = segs * geo.slot_count as usize;
        let pages = args.map.page_count as usize;
        let mut log = Log {
            policy: policy::make(
                args.policy,
                args.age_threshold_segments,
                args.ssr_slack_min_pct,
                args.resequence_busy_user_blocks_per_pass,
            ),
            map: map::SlotMap::new(args.volume_blocks, args.map.slot_total, args.map_extents),
            live: map::Packed::new(slots as u64, 1, false),
            usage: SegmentUsage::new(segs, geo.slot_count),
            written_now: map::Packed::new(segs as u64, 1, false),
            freed_now: map::Packed::new(segs as u64, 1, false),
            epoch: 1,
            boot: 1,
            format_id: crate::seglog::LEGACY_FORMAT_ID,
            legacy_map: false,
            legacy_rewrite: None,
            next_seq: Seq(0),
            chain_next: None,
            head: SegLoc(0),
            open: None,
            sealed: Vec::new(),
            buffers: (0..args.buffer_count)
                .map(|_| SegBuf::Open(bytes::BytesMut::zeroed(geo.stride_bytes() as usize)))
                .collect(),
            buffers_free: (0..args.buffer_count as usize).rev().collect(),
            seg_buf: FxHashMap::default(),
            buf_filled: vec![vec![false; geo.slot_count as usize]; args.buffer_count as usize],
            dirty_pages: vec![false; pages],
            dirty_count: 0,
            dirty_at_pow2: Vec::new(),
            page_copy: vec![0; pages],
            map_pages_written: 0,
            page_generation: vec![0; pages],
            map_digest: Default::default(),
            map_sketch: Default::default(),
            segments_since_checkpoint: 0,
            mark_generation: 0,
            mark_upto: Seq(0),
            pending: VecDeque::new(),
            works: Vec::new(),
            io: Vec::new(),
            cleaning: Vec::new(),
            lower_io: crate::lowerio::LowerIo::default(),
            retryable: FxHashMap::default(),
            parked: Vec::new(),
            backoff: crate::retry::Backoff::default(),
            reads: FxHashMap::default(),
            next_read_key: 0,
            gate: crate::gate::OverlapGate::new(),
            timing_only: false,
            loss: None,
            counters: Counters::default(),
            idle_offer: std::cell::Cell::new(None),
            last_lower_error: None,
            group_dirty: map::Packed::new(args.volume_blocks.div_ceil(u64::from(geo.slot_count)), 1, false),
            group_dirty_count: 0,
            group_cursor: 0,
            busy_sweep_futile: false,
            resequence_idle: layoutd_core::idle::IdleTimer::new(layoutd_core::idle::IdleOptions {
                idle_at_start: true,
                restart_while_in_flight: true,
                starvation: None,
                wait_ns_max: None,
            }),
            compacting: false,
            slides_this_idle: None,
            compact_home: None,
            compact_group: None,
            busy_user_blocks: 0,
            phase: Phase::Failed(String::new()),
            args,
            geo,
        };
        log.start_bringup(mode);
        log
    }

    /// Sends a request below, remembering why (and, for a write or flush
    /// while serving, the request, to send again if it fails); returns its id.
    fn emit(&mut self, op: LowerOp, req: Request) -> u64 {
        self.emit_attempt(op, req, 1)
    }

    fn emit_attempt(&mut self, op: LowerOp, req: Request, attempt: u32) -> u64 {
        let background = op.is_background();
        let keep = (self.serving() && req.op != layoutd_core::Op::Read).then(|| req.clone());
        let range = (req.offset_bytes, req.end_bytes());
        let segment_part = matches!(op, LowerOp::SegPart { .. });
        let id = self.lower_io.emit(op, background, req);
        if let Some(r) = keep {
            self.retryable.insert(id, (r, attempt));
        }
        if segment_part {
            self.gate.issued(id, range);
        }
        id
    }

    fn slot_id(&self, loc: SegLoc, slot: u32) -> u32 {
        assert!(slot < self.geo.slot_count);
        loc.0 * self.geo.slot_count + slot
    }

    fn split_slot(&self, sid: u32) -> (SegLoc, u32) {
        assert!(sid != UNMAPPED && u64::from(sid) < self.live.len());
        (SegLoc(sid / self.geo.slot_count), sid % self.geo.slot_count)
    }

    fn slot_offset_bytes(&self, sid: u32) -> u64 {
        let (loc, slot) = self.split_slot(sid);
        self.geo.slot_offset_bytes(loc, slot)
    }

    fn block_sectors(&self) -> u64 {
        u64::from(self.args.block_bytes) / layoutd_core::SECTOR_BYTES
    }

    fn page_of(block: u64) -> usize {
        (block / map::ENTRIES_PER_PAGE) as usize
    }

    /// Whether a segment's holes may be written now (see the glossary).
    fn eligible(&self, loc: u32) -> bool {
        let i = u64::from(loc);
        self.eligible_from(self.written_now.get(i) == 1, self.freed_now.get(i) == 1)
    }

    /// The crash rule on a segment's two epoch bits: not written in this
    /// epoch, and none of its slots freed in it.
    fn eligible_from(&self, written_now: bool, freed_now: bool) -> bool {
        !written_now && (self.args.unsafe_reuse || !freed_now)
    }

    /// Something the idle-cleaning decision depends on changed (which
    /// segments are free, busy or eligible, the epoch).
    fn census_changed(&self) {
        self.idle_offer.set(None);
    }

    /// What a segment's live count means to the census: empty, at most
    /// half live (a victim idle cleaning takes), full.
    fn usage_class(&self, seg: usize) -> (bool, bool, bool) {
        let v = self.usage.valid(seg);
        (v == 0, v * 2 <= self.geo.slot_count, v == self.geo.slot_count)
    }

    /// Points `block` at `sid` (or nowhere), freeing the slot it had.
    fn set_map(&mut self, block: u64, sid: u32) {
        let old = self.map.get(block);
        if old != UNMAPPED {
            let (loc, _) = self.split_slot(old);
            assert_eq!(self.live.get(u64::from(old)), 1, "a mapped slot is live");
            self.live.set(u64::from(old), 0);
            let before = self.usage_class(loc.0 as usize);
            self.usage.sub(loc.0 as usize, 1);
            self.freed_now.set(u64::from(loc.0), 1);
            if self.usage_class(loc.0 as usize) != before {
                self.census_changed();
            }
        }
        if sid != UNMAPPED {
            let (loc, _) = self.split_slot(sid);
            assert_eq!(self.live.get(u64::from(sid)), 0, "a slot holds one block");
            self.live.set(u64::from(sid), 1);
            // Into the open segment: busy, so not in what idle cleaning
            // looks at (free or victim); no census change.
            assert!(
                self.open.as_ref().is_some_and(|o| o.loc == loc),
                "slots are written in the open segment"
            );
            self.usage.add(loc.0 as usize, 1, self.next_seq.0);
        }
        self.map.set(block, sid);
        self.set_page_dirty(Self::page_of(block), true);
    }

    /// Marks map page `page` dirty or clean, keeping `dirty_count` in step.
    pub(super) fn set_page_dirty(&mut self, page: usize, dirty: bool) {
        if self.dirty_pages[page] != dirty {
            self.dirty_pages[page] = dirty;
            if dirty {
                self.dirty_count += 1;
            } else {
                self.dirty_count -= 1;
            }
        }
    }

    /// Map pages the checkpoint after a cleaning cycle of `segments`
    /// segments (a pass's victims refilled) would write: the dirty pages
    /// this epoch had after its first 2^k >= `segments` segments, or, in a
    /// younger epoch, the pages dirty now scaled to that many segments.
    fn checkpoint_pages_after(&self, segments: u32) -> u32 {
        let k = segments.max(1).next_power_of_two().trailing_zeros() as usize;
        match self.dirty_at_pow2.get(k) {
            Some(&n) => n,
            None => {
                let scaled = u64::from(self.dirty_count) * u64::from(segments)
                    / u64::from(self.segments_since_checkpoint + 1);
                scaled.min(u64::from(self.args.map.page_count)) as u32
            }
        }
    }

    /// A client wrote or trimmed `block`: its group is looked at again by
    /// re-sequencing. Only clients' changes count: the log's own moves
    /// (cleaning, re-sequencing) keep a group's order or are cleaned up by
    /// the next client change, and counting them could make idle work feed
    /// itself (cleaning for space moves blocks, which would need
    /// re-sequencing, which needs space).
    fn group_touched(&mut self, block: u64) {
        let group = block / u64::from(self.geo.slot_count);
        if self.group_dirty.get(group) == 0 {
            self.group_dirty.set(group, 1);
            self.group_dirty_count += 1;
        }
    }

    /// The segments as policies see them; `after_checkpoint` judges
    /// eligibility as it will be once the running checkpoint is durable.
    fn census(&self, after_checkpoint: bool) -> Census {
        // One pass over the per-segment state, then the few busy segments
        // marked: a census is made at every segment opened and sealed and
        // after each idle-offer change, so it must be cheap per segment.
        let (written, freed) = (self.written_now.bit_words(), self.freed_now.bit_words());
        let bit = |words: &[u64], i: usize| (words[i / 64] >> (i % 64)) & 1 == 1;
        let mut segs = Vec::with_capacity(self.geo.segment_count as usize);
        for l in 0..self.geo.segment_count {
            let i = l as usize;
            segs.push(SegInfo {
                loc: l,
                valid: self.usage.valid(i),
                written_at_seq: self.usage.written_at(i),
                // Once the checkpoint is durable, every segment is.
                eligible: after_checkpoint || self.eligible_from(bit(written, i), bit(freed, i)),
                busy: false,
            });
        }
        let open = self.open.as_ref().map(|o| o.loc.0);
        let busy = self.cleaning.iter().copied().chain(open).chain(self.chain_next.map(|c| c.0));
        for l in busy.chain(self.seg_buf.keys().copied()) {
            segs[l as usize].busy = true;
        }
        let mut c = Census {
            segs,
            slot_count: self.geo.slot_count,
            head: self.head.0,
            now_seq: self.next_seq.0,
            free_segments_min: self.args.free_segments_min,
            compacting: self.compacting,
            home: self.compact_home.map(|h| h.0),
            ssr_shape: None,
            checkpoint_pages: 0,
            clean_batch: self.args.clean_batch_segments,
        };
        // What the cost estimate weighs (only policies that consult it pay
        // for it): the SSR target's holes as the disk sees them, and the map
        // pages the checkpoint after a cleaning pass would write.
        if self.policy.weighs_ssr_against_cleaning() {
            c.ssr_shape = c.best_holes().map(|t| self.hole_shape(SegLoc(t)));
            c.checkpoint_pages = self.checkpoint_pages_after(self.args.clean_batch_segments);
        }
        c
    }

    /// Segment `loc`'s holes as the disk sees an SSR pass over them: the
    /// holes, and the stretches of live slots between two holes (each a
    /// separate lower write after it), split into those shorter than
    /// [`policy::ROTATION_MISS_BYTES`] (the write after one misses its
    /// sector and waits a rotation) and the slots of the longer ones (the
    /// disk passes over them).
    fn hole_shape(&self, loc: SegLoc) -> policy::HoleShape {
        let short_max = policy::ROTATION_MISS_BYTES.div_ceil(u64::from(self.args.block_bytes)) as u32;
        let mut shape = policy::HoleShape { holes: 0, short_gaps: 0, long_gap_slots: 0 };
        let mut live_run = None; // live slots since the last hole (None before the first)
        for s in 0..self.geo.slot_count {
            if self.live.get(u64::from(self.slot_id(loc, s))) == 0 {
                match live_run {
                    Some(n) if n > 0 && n < short_max => shape.short_gaps += 1,
                    Some(n) if n >= short_max => shape.long_gap_slots += n,
                    _ => {}
                }
                shape.holes += 1;
                live_run = Some(0);
            } else if let Some(n) = live_run.as_mut() {
                *n += 1;
            }
        }
        shape
    }

    /// Free segments (eligible, empty, not reserved).
    pub fn free_segments_count(&self) -> u64 {
        (0..self.geo.segment_count)
            .filter(|&l| {
                self.usage.valid(l as usize) == 0
                    && self.eligible(l)
                    && self.chain_next != Some(SegLoc(l))
                    && self.open.as_ref().is_none_or(|o| o.loc.0 != l)
            })
            .count() as u64
    }

    fn live_blocks(&self) -> u64 {
        (0..self.usage.len()).map(|i| u64::from(self.usage.valid(i))).sum()
    }

    /// RAM the translation keeps, in bytes, from the structures'
    /// allocations: the map, the live bits, the per-segment state and the
    /// per-map-page state (not the segment buffers, a fixed
    /// `buffer_count` segments, nor what is in flight).
    pub fn translation_ram_bytes(&self) -> u64 {
        self.map.ram_bytes()
            + self.live.ram_bytes()
            + self.usage.ram_bytes()
            + self.written_now.ram_bytes()
            + self.freed_now.ram_bytes()
            + self.dirty_pages.capacity() as u64
            + self.dirty_at_pow2.capacity() as u64 * 4
            + self.page_copy.capacity() as u64
            + 8 * self.page_generation.capacity() as u64
            + self.group_dirty.ram_bytes()
    }

    /// [`Log::translation_ram_bytes`] per volume block, in thousandths of a byte.
    fn ram_per_block_milli(&self) -> u64 {
        self.translation_ram_bytes() * 1000 / self.args.volume_blocks
    }

    /// Whether idle cleaning wants a pass (the policy's decision, cached
    /// until the census changes).
    fn wants_idle_cleaning(&self) -> bool {
        // The policy's wish, and only while two victims of at most half
        // live blocks exist (the census classes the cache follows): a pass
        // over them frees two segments and fills at most one, so idle work
        // ends even when the target is out of reach.
        let fresh = || {
            let c = self.census(false);
            let half_empty =
                c.segs.iter().filter(|s| !s.busy && s.valid > 0 && s.valid * 2 <= c.slot_count).count();
            self.policy.clean_when_idle(&c, self.args.free_segments_target) && half_empty >= 2
        };
        match self.idle_offer.get() {
            Some(cached) => {
                debug_assert_eq!(cached, fresh(), "a census change was not noted");
                cached
            }
            None => {
                let v = fresh();
                self.idle_offer.set(Some(v));
                v
            }
        }
    }

    fn serving(&self) -> bool {
        matches!(self.phase, Phase::Serving)
    }

    /// A lower I/O failed or metadata is bad: stop, failing what waits.
    fn fail(&mut self, why: String) {
        if matches!(self.phase, Phase::Failed(_)) {
            return;
        }
        self.phase = Phase::Failed(why);
        for w in std::mem::take(&mut self.works) {
            if let Work::Upper(u) = w {
                self.lower_io.upper_q.push_back(Completion::err(u.req.id, layoutd_core::IoError::Io));
            }
        }
        while let Some(p) = self.pending.pop_front() {
            if let request::Pending::Upper(r) = p {
                self.lower_io.upper_q.push_back(Completion::err(r.id, layoutd_core::IoError::Io));
            }
        }
    }
}

impl Target for Log {
    fn name(&self) -> &'static str {
        "log"
    }

    fn size_bytes(&self) -> u64 {
        self.args.volume_blocks * u64::from(self.args.block_bytes)
    }

    fn handle_request(&mut self, now: Instant, req: Request) {
        assert!(req.validate(self.size_bytes()).is_ok(), "stack validated it");
        self.resequence_idle.request();
        self.resequence_idle.arm(now, self.args.resequence_idle_ms.saturating_mul(1_000_000));
        self.compacting = false;
        self.slides_this_idle = None;
        if let Phase::Failed(_) = self.phase {
            self.lower_io.upper_q.push_back(Completion::err(req.id, layoutd_core::IoError::Io));
            return;
        }
        let req = match self.direct_read(req) {
            Ok(()) => return,
            Err(req) => req,
        };
        self.pending.push_back(request::Pending::Upper(req));
        self.pump();
    }

    fn handle_completion(&mut self, now: Instant, c: Completion) {
        let op = self.lower_io.take(c.id);
        if self.gate.completed(c.id.0) {
            self.release_gated();
        }
        let retry = self.retryable.remove(&c.id.0);
        if let LowerOp::Read { key, within, through } = op {
            // A failed read fails its request only.
            self.counters.lower_read_errors_count += u64::from(c.result.is_err());
            let mut c = c;
            c.data = c.data.map(|d| d.slice(..d.len() - through as usize));
            self.direct_read_done(key, within, c);
            return;
        }
        if let Err(e) = c.result {
            let what = format!("{}: {e}", describe(&op));
            self.last_lower_error = Some(what.clone());
            match (retry, &op) {
                (Some((req, attempt)), _) if attempt < LOWER_WRITE_ATTEMPTS && self.serving() => {
                    self.backoff.failed(now, what);
                    self.parked.push((op, req, attempt + 1));
                    return;
                }
                (None, LowerOp::Work { slot }) if self.serving() => {
                    // A read of the work on top: it fails that work only
                    // (`take_io` gives the error to it).
                    self.counters.lower_read_errors_count += 1;
                    self.io[*slot] = Some(c);
                    self.pump();
                    return;
                }
                _ => {}
            }
            let why = format!(
                "log: a lower {} failed ({e}){}; the volume stops taking requests",
                describe(&op),
                if self.serving() { format!(" {LOWER_WRITE_ATTEMPTS} times") } else { String::new() }
            );
            if matches!(self.phase, Phase::Bringup(_)) {
                self.phase = Phase::Failed(why);
            } else {
                self.fail(why);
            }
            return;
        }
        if retry.is_some() {
            self.backoff.succeeded();
        }
        // The request kept for a retry holds a segment write's bytes: drop
        // it now, so the buffer can be taken back for the next segment.
        drop(retry);
        match op {
            LowerOp::Bringup => self.bringup_done(c),
            LowerOp::SegPart { loc } => self.segment_part_done(loc),
            LowerOp::Work { slot } => {
                assert!(self.io[slot].is_none(), "one completion per request");
                self.io[slot] = Some(c);
            }
            LowerOp::Read { .. } => unreachable!("direct reads return above"),
        }
        self.pump();
    }

    fn poll_lower(&mut self) -> Option<Request> {
        self.lower_io.lower_q.pop_front()
    }

    fn poll_timeout(&self) -> Option<Instant> {
        let idle = self
            .resequence_idle
            .poll_timeout()
            .filter(|_| (self.args.resequence && self.group_dirty_count > 0) || self.wants_idle_cleaning());
        [idle, self.backoff.at()].into_iter().flatten().min()
    }

    /// The idle threshold passed: re-sequencing may start, unless work is
    /// still in progress (then the threshold counts again from now: the
    /// timer's in-flight rule). A parked failed write whose backoff is due
    /// is sent again.
    fn handle_timeout(&mut self, now: Instant) {
        if self.backoff.take_due(now) {
            for (op, req, attempt) in std::mem::take(&mut self.parked) {
                if self.serving() {
                    self.counters.lower_retries_count += 1;
                    self.emit_attempt(op, req, attempt);
                }
            }
        }
        let busy = !self.works.is_empty() || !self.pending.is_empty() || !self.reads.is_empty();
        self.resequence_idle.timeout(now, busy);
    }

    fn poll_upper(&mut self) -> Option<Completion> {
        self.lower_io.upper_q.pop_front()
    }

    /// A failed bring-up is not ready: the runtime refuses the open with
    /// the status's `error` (it was taken for ready, and `serve` and the
    /// offline commands served or flushed into EIO without saying why).
    fn is_ready(&self) -> bool {
        self.serving()
    }

    /// `checkpoint`: write a checkpoint now. `clean`: one cleaning pass now.
    fn message(&mut self, _now: Instant, msg: &str) -> Result<String, String> {
        if !self.serving() {
            return Err("log: not serving (bring-up failed or in progress)".into());
        }
        let reply = match msg {
            "checkpoint" => {
                self.pending.push_back(request::Pending::Checkpoint);
                "checkpoint queued".to_string()
            }
            "clean" => {
                self.pending.push_back(request::Pending::Clean);
                "cleaning pass queued".to_string()
            }
            other => return Err(format!("log: unknown message `{other}` (known: checkpoint, clean)")),
        };
        self.pump();
        Ok(reply)
    }

    /// Idle cleaning while free segments are short, one pass per step;
    /// else, once no request came for `resequence_idle_ms`, re-sequencing
    /// (one group per step) while free segments are above the reserve.
    fn background_offer(&self, now: Instant) -> Option<layoutd_core::background::Offer> {
        use layoutd_core::background::{JobClass, Offer};
        if !self.serving() || !self.works.is_empty() || !self.pending.is_empty() || !self.reads.is_empty() {
            return None;
        }
        // Idle cleaning waits for idle time as re-sequencing does (no
        // request for `resequence_idle_ms`): offered in the gaps between a
        // busy client's requests, its passes delay the requests after them.
        let idle = self.resequence_idle.is_idle(now);
        if (idle && self.wants_idle_cleaning()) || self.resequence_needs_space(now) {
            return Some(Offer { class: JobClass::Cleaning });
        }
        self.resequence_due(now).then_some(Offer { class: JobClass::Reorganisation })
    }

    fn background_step(&mut self, now: Instant) -> Option<u64> {
        use layoutd_core::background::JobClass;
        let class = self.background_offer(now)?.class;
        let bytes = if class == JobClass::Cleaning && self.resequence_needs_space(now) {
            self.resequence_make_space()?
        } else if class == JobClass::Cleaning {
            let victims = self.push_clean(false)?;
            self.counters.background_cleanings_count += 1;
            victims * self.geo.stride_bytes()
        } else {
            self.resequence_step(false)?
        };
        self.pump();
        Some(bytes)
    }

    fn is_drained(&self) -> bool {
        self.works.is_empty() && self.pending.is_empty() && self.sealed.is_empty() && self.reads.is_empty()
    }

    fn status(&self) -> Status {
        let c = &self.counters;
        let mut config = self.args.echo();
        if let Phase::Failed(e) = &self.phase {
            config.push(("error".into(), e.clone()));
        }
        if let Some(l) = &self.loss {
            config.push(("accepted_loss".into(), l.clone()));
        }
        if let Some(e) = &self.last_lower_error {
            config.push(("last_lower_error".into(), e.clone()));
        }
        let slots_total = c.slots_user_count
            + c.slots_ssr_count
            + c.slots_cleaning_count
            + c.slots_plugging_count
            + c.slots_resequence_count;
        let user_slots = c.slots_user_count + c.slots_ssr_count;
        let counters = [
            ("user_bytes", c.user_bytes),
            ("read_bytes", c.read_bytes),
            ("slots_user_count", c.slots_user_count),
            ("slots_ssr_count", c.slots_ssr_count),
            ("slots_cleaning_count", c.slots_cleaning_count),
            ("slots_plugging_count", c.slots_plugging_count),
            ("write_amplification_milli", (slots_total * 1000).checked_div(user_slots).unwrap_or(0)),
            ("segments_written_count", c.segments_written_count),
            ("segments_cleaned_count", c.segments_cleaned_count),
            ("cleaning_passes_count", c.cleaning_passes_count),
            ("on_demand_cleanings_count", c.on_demand_cleanings_count),
            ("background_cleanings_count", c.background_cleanings_count),
            ("checkpoints_count", c.checkpoints_count),
            ("map_bytes_written", c.map_bytes_written),
            ("summary_bytes_written", c.summary_bytes_written),
            (
                "map_bytes_per_user_mib",
                (c.map_bytes_written * (1 << 20)).checked_div(c.user_bytes).unwrap_or(0),
            ),
            ("flushes_count", c.flushes_count),
            ("flush_marks_count", c.flush_marks_count),
            ("trims_count", c.trims_count),
            ("rmw_count", c.rmw_count),
            ("recovered_segments_count", c.recovered_segments_count),
            ("lost_segments_count", c.lost_segments_count),
            ("lost_map_pages_count", c.lost_map_pages_count),
            ("live_blocks_count", self.live_blocks()),
            ("volume_blocks_count", self.args.volume_blocks),
            ("utilization_pct", self.live_blocks() * 100 / self.args.volume_blocks),
            ("free_segments_count", self.free_segments_count()),
            ("segment_count", u64::from(self.geo.segment_count)),
            ("slot_count", u64::from(self.geo.slot_count)),
            ("ram_bytes_per_block_milli", self.ram_per_block_milli()),
            ("map_ram_bytes", self.map.ram_bytes()),
            (
                "map_ram_bytes_per_mapped_block_milli",
                (self.map.ram_bytes() * 1000).checked_div(self.live_blocks()).unwrap_or(0),
            ),
            ("map_entry_bits", u64::from(self.map.width())),
            ("map_groups_count", self.map.group_count()),
            ("map_flat_groups_count", self.map.flat_group_count()),
            ("map_runs_count", self.map.run_count()),
            ("translation_ram_bytes", self.translation_ram_bytes()),
            ("cleaner_map_scans_count", self.counters.cleaner_map_scans_count),
            ("slots_resequence_count", c.slots_resequence_count),
            ("resequence_passes_count", c.resequence_passes_count),
            ("resequence_busy_passes_count", c.resequence_busy_passes_count),
            ("resequence_groups_swept_count", c.resequence_groups_swept_count),
            ("groups_to_check_count", self.group_dirty_count),
            ("segment_buffers_allocated_count", c.segment_buffers_allocated_count),
            ("partial_writes_count", c.partial_writes_count),
            ("summary_slots_count", c.summary_slots_count),
            ("compact_evictions_count", c.compact_evictions_count),
            ("compact_groups_home_count", c.compact_groups_home_count),
            ("compact_redirects_count", c.compact_redirects_count),
            ("read_throughs_count", c.read_throughs_count),
            ("lower_retries_count", self.counters.lower_retries_count),
            ("lower_read_errors_count", self.counters.lower_read_errors_count),
            ("epoch", self.epoch),
            ("boot_count", self.boot),
            ("next_seq", self.next_seq.0),
            ("held_count", self.pending.len() as u64),
            ("segments_in_flight_count", self.sealed.len() as u64),
        ];
        Status {
            target: "log".into(),
            config,
            counters: counters.into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The default geometry (examples/log.toml) over a lower device.
    fn args_over(lower_bytes: u64) -> (Args, Geometry) {
        let t = toml::Table::new();
        Args::parse(ArgReader::new("log", &t), lower_bytes).expect("the defaults are valid")
    }

    /// [`args_over`] with the flat map (`map_extents = false`).
    fn flat_args_over(lower_bytes: u64) -> (Args, Geometry) {
        let t: toml::Table = toml::from_str("map_extents = false").expect("toml");
        Args::parse(ArgReader::new("log", &t), lower_bytes).expect("valid")
    }

    /// What [`Log::translation_ram_bytes`] comes to for a geometry, without
    /// allocating it.
    fn projected_ram_bytes(args: &Args, geo: &Geometry) -> u64 {
        let words = |n: u64, bits: u64| (n * bits).div_ceil(64) * 8;
        let segs = u64::from(geo.segment_count);
        let slots = segs * u64::from(geo.slot_count);
        let pages = u64::from(args.map.page_count);
        let groups = args.volume_blocks.div_ceil(u64::from(geo.slot_count));
        map::SlotMap::ram_bytes_max(args.volume_blocks, args.map.slot_total)
            + words(slots, 1)
            + 12 * segs
            + 2 * words(segs, 1)
            + 10 * pages
            + words(groups, 1)
    }

    #[test]
    fn the_cost_estimate_sees_the_targets_short_live_stretches_and_a_cycles_map_pages() {
        let (args, geo) = args_over(64 << 20);
        let mut log = Log::new(args, geo, OpenMode::Open { clean: true, accept_loss: false });
        // Segment 3: live slots 0-1 (before the first hole: no stretch
        // between holes), 5 and 9-11 (short: under 16 KiB), 20-35 (16
        // slots: long) and 127 (after the last hole).
        let live: Vec<u32> = [0, 1, 5, 9, 10, 11].into_iter().chain(20..36).chain([127]).collect();
        for &s in &live {
            log.live.set(u64::from(log.slot_id(SegLoc(3), s)), 1);
        }
        let shape = log.hole_shape(SegLoc(3));
        assert_eq!(
            shape,
            policy::HoleShape { holes: 128 - live.len() as u32, short_gaps: 2, long_gap_slots: 16 }
        );
        // A cycle of 4 segments: the pages dirty when the epoch's 4th
        // segment was sealed, not those dirty now.
        log.dirty_at_pow2 = vec![3, 5, 9];
        log.dirty_count = 70;
        log.segments_since_checkpoint = 40;
        assert_eq!(log.checkpoint_pages_after(4), 9);
        assert_eq!(log.checkpoint_pages_after(3), 9, "the next power of two");
        assert_eq!(log.checkpoint_pages_after(2), 5);
        // A younger epoch (2 segments sealed, the third open): scaled.
        log.dirty_at_pow2 = vec![3, 5];
        log.dirty_count = 6;
        log.segments_since_checkpoint = 2;
        assert_eq!(log.checkpoint_pages_after(4), 8);
    }

    #[test]
    fn translation_ram_is_at_most_4_bytes_a_block_counted_from_the_allocations() {
        let open = OpenMode::Open { clean: true, accept_loss: false };
        for lower in [64u64 << 20, 1 << 30, 16 << 30] {
            // The flat map (every group flat) is the most the map holds:
            // the projection is its allocation, byte for byte.
            let (args, geo) = flat_args_over(lower);
            let projected = projected_ram_bytes(&args, &geo);
            let log = Log::new(args.clone(), geo, open);
            assert_eq!(log.translation_ram_bytes(), projected, "lower device of {lower} bytes");
            assert_eq!(log.map.flat_group_count(), log.map.group_count());
            let milli = log.ram_per_block_milli();
            assert!(milli <= 4000, "{milli} thousandths of a byte a block over {lower} bytes");
            let s = log.status();
            let counter = |k: &str| s.counters.iter().find(|(n, _)| n == k).map(|(_, v)| *v);
            assert_eq!(counter("ram_bytes_per_block_milli"), Some(milli));
            assert_eq!(counter("map_ram_bytes"), Some(log.map.ram_bytes()));
            // With extents an empty map holds 18 bytes a group.
            let (args, geo) = args_over(lower);
            let log = Log::new(args.clone(), geo, open);
            assert_eq!(log.map.ram_bytes(), 18 * args.volume_blocks.div_ceil(map::GROUP_BLOCKS));
            assert_eq!(log.map.flat_group_count(), 0);
        }
        // Too large to allocate in a test; the projection matched the
        // allocations above. 1 TiB exposed needs 29-bit entries and fits
        // the bound with every group flat. 30 bits (up to about 3.6 TiB)
        // fit it without the groups' 18 bytes (the flat map of sessions
        // before 24) and exceed it by those (17.6 thousandths) and by each
        // map page's generation (8 bytes a page of 1014 blocks: 7.9
        // thousandths, since session 29) with them.
        for (exposed, bits, milli_max) in
            [(1u64 << 40, 29u32, 4000), (3 << 40, 30, 4000 + 18_000 / 1024 + 8000 / 1014)]
        {
            let lower = exposed / 9 * 10 / 100 * 102;
            let (args, geo) = args_over(lower);
            assert!(args.volume_blocks * 4096 >= exposed);
            assert_eq!(64 - u64::from(args.map.slot_total).leading_zeros(), bits);
            let milli = projected_ram_bytes(&args, &geo) * 1000 / args.volume_blocks;
            assert!(milli <= milli_max, "{milli} thousandths of a byte a block over {lower} bytes");
        }
    }
}
