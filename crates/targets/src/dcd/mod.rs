//! `dcd`: a Disk Caching Disk (Hu & Yang; Nightingale, Hu & Yang, USENIX
//! 1999) — small writes are appended to RAM segment buffers, written to a
//! log region in whole segments, and destaged to their home in the data
//! region when the disk is idle; crash recovery replays segment headers.
//!
//! Glossary:
//! - *data region* ("data-disk"): where blocks live; the volume maps 1:1
//!   onto it, so a fully destaged data region is a plain disk.
//! - *log region* ("cache-disk"): a [`crate::seglog`] ring of segments.
//! - *segment*: header + slots; *slot*: `slot_bytes` of one logged write.
//! - *buffer*: a RAM copy of the open (or being-written) segment.
//! - *absorb*: take a write into a buffer and acknowledge it (immediate
//!   report). *bypass*: send a write (>= `bypass_bytes`), a trim, a
//!   write-zeroes or a write-through FUA write straight home.
//! - *invalidation record*: a header entry saying "these sectors were
//!   overwritten outside the log", so replay never resurrects the older
//!   log copy.
//! - *destage*: copy a segment's still-valid sectors home.
//! - *tail* / *head*: oldest live / next segment seq; the persisted
//!   checkpoint holds the tail.
//!
//! Logical DCD layout on the lower device (the paper's setup):
//! ```text
//! log_offset                             data_offset
//! | ckpt 0 | ckpt 1 | seg 0 | seg 1 | ... | data region (= the volume, 1:1) ... |
//! ```
//! Physical DCD (the log on its own device): `log_device = N` and
//! `data_device = N` place each region on member N of a multi-device volume
//! (see `docs/dcd.md`).
//!
//! Config (`[[layer]] target = "dcd"`; sizes as `4096`, `"64KiB"`):
//! ```toml
//! log_offset = 0                  # log region start (default 0)
//! log_length = "64MiB"            # default: 1/8 of the device, at most 64 MiB
//! data_offset = "64MiB"           # default: right after the log
//! data_length = "..."             # default: to the end of the device
//! segment_bytes = "128KiB"        # slots per segment, in bytes (header extra)
//! slot_bytes = "4KiB"             # the paper used 1 KiB
//! buffer_count = 4                # RAM segment buffers (2..=64)
//! buffer_delay_ms = 200           # a partial buffer is written after this long
//! bypass_bytes = "64KiB"          # writes this large go straight home
//! fua = "write-through"           # or "log": force the buffer out instead
//! destage_policy = "last-written-first" # or "fewest-valid-first", "oldest-first"
//! idle_ms_max = 1000              # idle threshold with an empty log ...
//! idle_ms_min = 1                 # ... falling to this with a full one
//! read_fragmented = "assemble"    # or "destage" (the paper's fallback)
//! pending_max = 4096              # upper requests held while the log is full
//! ```
//!
//! Status: `dcd <config> writes_absorbed_count writes_bypassed_count
//! log_segments_written_count read_ram_bytes read_log_bytes read_data_bytes
//! destaged_bytes overwritten_before_destage_bytes forced_destages_count
//! log_utilization_pct dirty_segments_count ...` (all `key=value`; see
//! [`Dcd::status`]). Draining: a runtime that keeps delivering idle events
//! and timeouts (as `Harness::settle` does) destages the whole log;
//! `dirty_segments_count=0` and `log_utilization_pct=0` then hold.

mod config;
mod destage;
mod lookup;
pub mod policy;
mod recovery;
mod request;

pub use config::{Args, FuaMode, PolicyKind, ReadFragmented};

use crate::alloc::SegmentRing;
use crate::seglog::{Entry, Geometry, SegLoc, Seq};
use bytes::Bytes;
use layoutd_core::config::{ArgReader, ConfigError};
use layoutd_core::idle::{IdleOptions, IdleTimer};
use layoutd_core::{Completion, Instant, OpenMode, ReqId, Request, Status, Target, SECTOR_BYTES};
use lookup::{Loc, Lookup, PackedLoc};
use rustc_hash::FxHashMap;
use std::collections::VecDeque;

/// Where a segment is in its life.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum SegState {
    /// Reclaimed; its location may be reused.
    Free,
    /// In RAM buffer `buf`, taking appends.
    Open { buf: u32 },
    /// In RAM buffer `buf`, being written to the log.
    Sealed { buf: u32 },
    /// On disk, in the log.
    Dirty,
}

/// One slot: which data sectors it holds and which are still current.
#[derive(Copy, Clone, Debug)]
struct SlotMeta {
    start_sector: u64,
    sector_count: u32,
    valid_mask: u64,
}

/// The in-memory segment header.
#[derive(Clone, Debug)]
struct SegMeta {
    seq: Seq,
    state: SegState,
    slots: Vec<SlotMeta>,
    entries: Vec<Entry>,
    valid_sectors: u32,
    /// The newest segment that holds a record superseding one of our sectors.
    superseded_seq_max: Option<Seq>,
    /// Reads in flight from this segment: while non-zero it is not reclaimed.
    pins: u32,
    destaging: bool,
    written: bool,
    has_invalidations: bool,
    has_data: bool,
}

impl SegMeta {
    fn free() -> SegMeta {
        SegMeta {
            seq: Seq(0),
            state: SegState::Free,
            slots: Vec::new(),
            entries: Vec::new(),
            valid_sectors: 0,
            superseded_seq_max: None,
            pins: 0,
            destaging: false,
            written: false,
            has_invalidations: false,
            has_data: true,
        }
    }
}

/// The ring's cursors: `tail <= head`, `durable_upto <= written_upto <= head`, all monotonic.
#[derive(Clone, Debug)]
struct Ring {
    /// Which segments are live: the tail (persisted; segments older are
    /// reclaimed) up to the head (the next seq to open).
    segments: SegmentRing,
    /// Every seq below this has been written to the log.
    written_upto: Seq,
    /// Every seq below this is durable (a flush completed after it was written).
    durable_upto: Seq,
    /// A flush issued only to advance `durable_upto` is in flight.
    durable_flush_busy: bool,
    boot: u64,
    /// The format's identity, stamped on every header and checkpoint
    /// (seglog: replay takes only headers carrying the checkpoint's).
    format_id: u64,
    resume: Seq,
    generation: u64,
    checkpoint_busy: bool,
    /// Generation of the newest flush mark written.
    mark_generation: u64,
    /// The newest flush mark on disk says every seq below this is durable.
    mark_upto: Seq,
    /// A flush mark write is in flight.
    mark_busy: bool,
}

impl Ring {
    /// A ring of `count` segments whose live seqs are `tail..head`, all of
    /// them written and durable, with no work in flight.
    fn new(count: u32, tail: Seq, head: Seq) -> Ring {
        Ring {
            segments: SegmentRing::new(u64::from(count), tail.0, head.0),
            written_upto: head,
            durable_upto: head,
            durable_flush_busy: false,
            boot: 0,
            format_id: crate::seglog::LEGACY_FORMAT_ID,
            resume: head,
            generation: 0,
            checkpoint_busy: false,
            mark_generation: 0,
            mark_upto: head,
            mark_busy: false,
        }
    }

    /// The oldest live seq.
    fn tail(&self) -> Seq {
        Seq(self.segments.tail())
    }

    /// The next seq to open.
    fn head(&self) -> Seq {
        Seq(self.segments.head())
    }
}

/// Why this target sent a lower request.
#[derive(Clone, Debug)]
enum LowerOp {
    Bringup,
    SegPreflush {
        loc: SegLoc,
    },
    SegWrite {
        loc: SegLoc,
    },
    /// Acknowledges `acks` (none: only advances durability) once the log
    /// is durable up to `upto`. Boxed, as are the other large variants:
    /// one is kept per lower request in flight, and an open-loop overload
    /// queues hundreds of thousands of reads, each costing the size of
    /// the largest variant.
    DurableFlush(Box<Waiter>),
    ReadPiece {
        key: u64,
        within_bytes: u32,
        pin: Option<SegLoc>,
    },
    /// A read served by this one lower read.
    ReadWhole {
        id: ReqId,
        pin: Option<SegLoc>,
    },
    HomeUpper(Box<HomeUpperWrite>),
    HomeDestage(Box<HomeDestageWrite>),
    DestageRead {
        loc: SegLoc,
    },
    CheckpointFlush {
        tail: Seq,
        upto: Seq,
    },
    /// `second`: the same tail written to the other copy, after which no
    /// readable copy names an older tail and the locations may be reused.
    CheckpointWrite {
        tail: Seq,
        second: bool,
    },
    MarkWrite {
        upto: Seq,
    },
}

/// An upper write sent home: sectors `start..start + count` of upper
/// request `id`, which arrived when the log was at `arrival`.
#[derive(Clone, Debug)]
struct HomeUpperWrite {
    id: ReqId,
    fua: bool,
    start: u64,
    count: u64,
    arrival: (Seq, u32),
}

/// A destage write of the job destaging segment `seq`: the sectors from
/// `first`, sector `first + k` read from log location `locs[k]`.
#[derive(Clone, Debug)]
struct HomeDestageWrite {
    seq: Seq,
    first: u64,
    locs: Vec<PackedLoc>,
}

// The common read path's ops (and every other op not boxed) fit in three
// words, so a queued read costs the lower-op table 24 bytes.
const _: () = assert!(std::mem::size_of::<LowerOp>() <= 24);
const _: () = assert!(std::mem::size_of::<Option<LowerOp>>() <= 24);

impl LowerOp {
    /// Work the target does for itself rather than for the upper request
    /// that was being handled: log segments (written when a buffer seals,
    /// which any write may trigger), destage, checkpoints and flushes that
    /// only advance durability. Reads for a client, its writes home, and
    /// the flushes and flush marks that acknowledge a client are not.
    fn is_background(&self) -> bool {
        match self {
            LowerOp::SegPreflush { .. }
            | LowerOp::SegWrite { .. }
            | LowerOp::HomeDestage(_)
            | LowerOp::DestageRead { .. }
            | LowerOp::CheckpointFlush { .. }
            | LowerOp::CheckpointWrite { .. } => true,
            LowerOp::DurableFlush(w) => w.acks.is_empty(),
            LowerOp::Bringup
            | LowerOp::ReadPiece { .. }
            | LowerOp::ReadWhole { .. }
            | LowerOp::HomeUpper(_)
            | LowerOp::MarkWrite { .. } => false,
        }
    }
}

/// A write home waiting for an overlapping one to finish.
enum HomeOp {
    Upper { req: Request, arrival: (Seq, u32) },
    Destage { seq: Seq, first: u64, locs: Vec<PackedLoc>, data: Option<Bytes> },
}

/// An invalidation record not yet placed in a segment.
struct PendingInvalidation {
    start: u64,
    count: u64,
    fua_ack: Option<ReqId>,
}

/// Upper requests waiting for the log to be durable up to `upto`.
#[derive(Clone, Debug)]
struct Waiter {
    acks: Vec<ReqId>,
    upto: Seq,
}

/// Lower write errors of the log's own writes (segments, checkpoints):
/// retried after the shared [`Backoff`](crate::retry::Backoff) instead of
/// failing the target, so a transient condition (ENOSPC on a thin or full
/// host file system, a hiccup) does not poison requests that do not depend
/// on the write. The data stays in RAM; dcd never gives up.
#[derive(Default)]
struct Retry {
    /// Sealed segments whose write failed, to write again when due.
    segments: Vec<SegLoc>,
    /// A checkpoint (tail advance) failed: try again when due.
    checkpoint: bool,
    backoff: crate::retry::Backoff,
}

/// Idle detection and the destage job in progress.
struct DestageState {
    /// Idle time for destage: armed at the runtime's idle report with
    /// [`Dcd::idle_threshold_ns`], cancelled by any request; idle destage
    /// runs while it is idle.
    idle: IdleTimer,
    forced: bool,
    job: Option<Job>,
    /// Reads waiting for a destage (`read_fragmented = "destage"`).
    reads_waiting: VecDeque<Request>,
    /// The candidates of the last step, kept for its allocation (at most
    /// one per segment).
    candidates: Vec<policy::Candidate>,
}

/// One segment being destaged.
struct Job {
    loc: SegLoc,
    seq: Seq,
    forced: bool,
    read_done: bool,
    runs_left: u32,
    writes_in_flight: u32,
    failed: bool,
}

#[derive(Default)]
struct Counters {
    writes_absorbed_count: u64,
    writes_absorbed_bytes: u64,
    writes_bypassed_count: u64,
    writes_bypassed_bytes: u64,
    writes_fua_count: u64,
    flushes_count: u64,
    trims_count: u64,
    log_segments_written_count: u64,
    log_written_bytes: u64,
    read_ram_bytes: u64,
    read_log_bytes: u64,
    read_data_bytes: u64,
    reads_fragmented_count: u64,
    destaged_bytes: u64,
    destaged_segments_count: u64,
    overwritten_before_destage_bytes: u64,
    forced_destages_count: u64,
    invalidation_records_count: u64,
    checkpoints_written_count: u64,
    recovered_segments_count: u64,
    lost_segments_count: u64,
    flush_marks_written_count: u64,
    lower_errors_count: u64,
    lower_write_retries_count: u64,
    writes_held_count: u64,
}

/// The bring-up phase (one type per state, see [`recovery`]).
enum Phase {
    Format(recovery::Formatting),
    Recover(recovery::Recovering),
    Serving,
    Failed(String),
}

/// The dcd target: the shared lookup table and the parts that own the rest
/// of its state: the segment log (`SegmentLog`), the home writer
/// (`HomeWriter`, on the shared overlap gate), the read assembler
/// (`ReadAssembler`, on the shared `Assembly`), durability
/// acknowledgements (`Acks`), the destager (`DestageState` and its
/// policy) and the shared lower I/O bookkeeping (`crate::lowerio`).
///
/// Memory bounds. The segment log is fixed by the geometry and
/// `buffer_count`; `lookup` grows with the sectors logged, at most the log's
/// capacity (see `docs/dcd.md`, Memory). Every in-flight collection is
/// bounded by the upper requests in flight, which the runtime bounds (live:
/// nbdkit's threads, 16 by default; the simulator's closed loop: its
/// window; an open-loop replay issues at trace times and bounds nothing, by
/// design): `pending` holds at most `pending_max` (beyond it a request
/// fails with ENOSPC); the acks at most one entry per flush or FUA write in
/// flight; the read assembler one per multi-piece read in flight; the home
/// writer one per write home in flight, plus one destage job's runs; the
/// lower I/O map the sum of all of these plus one destage job, one
/// checkpoint and one flush mark. The lower and upper queues are drained
/// after every input.
pub struct Dcd {
    args: Args,
    geo: Geometry,
    phase: Phase,
    /// Data sector -> newest log location (shared by every part below).
    lookup: Lookup,
    log: SegmentLog,
    home: HomeWriter,
    reads: ReadAssembler,
    acks: Acks,
    /// Lower requests in flight by id (the sum of every part's in-flight
    /// work), and the queues.
    io: crate::lowerio::LowerIo<LowerOp>,
    destage: DestageState,
    policy: Box<dyn policy::DestagePolicy>,
    /// Upper requests held while the log has no room (at most
    /// `pending_max`; beyond it a request fails with ENOSPC).
    pending: VecDeque<Request>,
    /// What recovery with `accept_loss` gave up, for the status.
    loss: Option<String>,
    counters: Counters,
}

/// The segment log: the ring of segments on disk, their in-memory headers,
/// the RAM buffers of the open and sealed ones, and the retry state of the
/// log's own writes. Fixed size: one entry per segment and `buffer_count`
/// buffers.
struct SegmentLog {
    segs: Vec<SegMeta>,
    buffers: Vec<Vec<u8>>,
    buffers_free: Vec<u32>,
    ring: Ring,
    /// The segment taking appends, if any.
    open: Option<SegLoc>,
    /// When the open segment is sealed even if not full.
    buffer_deadline: Option<Instant>,
    retry: Retry,
}

/// Writes home (bypass, trim, zeroes, destage) in order through the shared
/// overlap gate, and the invalidation records those writes owe the log.
/// Bounded by the writes home in flight (one per upper write being
/// bypassed, plus one destage job's runs).
struct HomeWriter {
    /// One that overlaps an earlier one in flight or waiting waits for it.
    gate: crate::gate::OverlapGate<HomeOp>,
    /// Invalidation records not yet placed in a segment.
    pending_invalidations: VecDeque<PendingInvalidation>,
}

/// Reads served from several places at once, assembled by key with the
/// shared [`crate::split::Assembly`]; one entry per such read in flight (a
/// read served by one lower read has none).
struct ReadAssembler {
    /// Looked up, never iterated.
    asms: FxHashMap<u64, crate::split::Assembly>,
    next_key: u64,
}

/// Acknowledgements waiting for durability: one entry per flush or FUA
/// write in flight.
struct Acks {
    /// Waiting for their segments to be written and flushed.
    waiters: Vec<Waiter>,
    /// Flushed, waiting for the flush mark that records it.
    mark_waiters: Vec<Waiter>,
}

impl SegmentLog {
    /// Segment `loc` reached the log: its buffer is free, reads go to disk,
    /// and the written mark moves past every written seq in order.
    fn written(&mut self, loc: SegLoc, geo: &Geometry) {
        let seg = &mut self.segs[loc.0 as usize];
        let SegState::Sealed { buf } = seg.state else {
            panic!("completion for a segment not being written")
        };
        seg.state = SegState::Dirty;
        seg.written = true;
        self.retry.backoff.succeeded();
        self.buffers_free.push(buf);
        assert!(self.buffers_free.len() <= self.buffers.len());
        while self.ring.written_upto < self.ring.head() {
            let s = &self.segs[geo.location(self.ring.written_upto).0 as usize];
            if s.seq != self.ring.written_upto || !s.written {
                break;
            }
            self.ring.written_upto = Seq(self.ring.written_upto.0 + 1);
        }
    }

    /// Whether RAM buffer `buf` holds its segment's bytes (not in
    /// timing-only mode).
    fn ram_has_data(&self, buf: u32) -> bool {
        self.segs.iter().any(|s| {
            matches!(s.state, SegState::Open { buf: b } | SegState::Sealed { buf: b } if b == buf)
                && s.has_data
        })
    }
}

impl ReadAssembler {
    /// A key for a new assembled read.
    fn new_key(&mut self) -> u64 {
        let key = self.next_key;
        self.next_key += 1;
        key
    }

    /// A piece of read `key` answered; its upper completion once every
    /// piece has.
    fn piece_done(
        &mut self,
        key: u64,
        within_bytes: u32,
        data: Option<Bytes>,
        result: Result<(), layoutd_core::IoError>,
    ) -> Option<Completion> {
        let asm = self.asms.get_mut(&key).expect("piece of a live read");
        asm.piece_done(within_bytes, data, result).then(|| self.asms.remove(&key).expect("present").finish())
    }
}

impl Dcd {
    /// Parses the config over a lower device of `lower_bytes`; `mode` says
    /// whether to format the log or recover it.
    pub fn ctr(
        args: ArgReader<'_>,
        lower_bytes: u64,
        members: &[(u64, u64)],
        mode: OpenMode,
    ) -> Result<Dcd, ConfigError> {
        let (args, geo) = Args::parse(args, lower_bytes, members)?;
        Ok(Dcd::new(args, geo, mode))
    }

    fn new(args: Args, geo: Geometry, mode: OpenMode) -> Dcd {
        assert!(geo.segment_count >= 2);
        assert!(args.buffer_count >= 2);
        let phase = match mode {
            OpenMode::Format { format_id } => Phase::Format(recovery::Formatting::new(format_id)),
            OpenMode::Open { clean, accept_loss } => {
                Phase::Recover(recovery::Recovering::new(clean, accept_loss))
            }
        };
        let buffers = (0..args.buffer_count).map(|_| vec![0u8; geo.payload_bytes() as usize]).collect();
        let lookup = Lookup::new(geo.segment_count, geo.slot_count, geo.slot_sectors())
            .expect("Args::parse checked that locations pack");
        let mut dcd = Dcd {
            policy: policy::make(args.destage_policy),
            log: SegmentLog {
                segs: vec![SegMeta::free(); geo.segment_count as usize],
                buffers,
                buffers_free: (0..args.buffer_count).rev().collect(),
                ring: Ring::new(geo.segment_count, Seq(0), Seq(0)),
                open: None,
                buffer_deadline: None,
                retry: Retry::default(),
            },
            args,
            geo,
            phase,
            lookup,
            home: HomeWriter {
                gate: crate::gate::OverlapGate::new(),
                pending_invalidations: VecDeque::new(),
            },
            reads: ReadAssembler { asms: FxHashMap::default(), next_key: 0 },
            acks: Acks { waiters: Vec::new(), mark_waiters: Vec::new() },
            io: crate::lowerio::LowerIo::default(),
            pending: VecDeque::new(),
            loss: None,
            destage: DestageState {
                idle: IdleTimer::new(IdleOptions::default()),
                forced: false,
                job: None,
                reads_waiting: VecDeque::new(),
                candidates: Vec::new(),
            },
            counters: Counters::default(),
        };
        dcd.start_bringup();
        dcd
    }

    /// Sends a request below, remembering why.
    fn emit(&mut self, op: LowerOp, req: Request) -> u64 {
        let background = op.is_background();
        self.io.emit(op, background, req)
    }

    fn complete_upper(&mut self, c: Completion) {
        self.io.upper_q.push_back(c);
    }

    /// Marks one sector of `loc` as no longer current. `superseder` is the
    /// segment whose record replaces it (None when it went home by destage).
    fn invalidate(&mut self, loc: Loc, superseder: Option<Seq>) {
        invalidate_mask(&mut self.log.segs, loc.seg, loc.slot, 1 << loc.within, superseder);
    }

    /// Maps slot `slot` of segment `loc`, holding sectors `start..start +
    /// n` logged in segment `seq`, and invalidates the copies it
    /// supersedes; returns how many it did.
    fn map_slot(&mut self, loc: SegLoc, slot: u16, start: u64, n: u32, seq: Seq) -> u64 {
        let mut dropped = Invalidation::new(&mut self.log.segs, Some(seq));
        self.lookup.set_run(start, n, Loc { seg: loc, slot, within: 0 }, seq, |old, n| dropped.add(old, n));
        dropped.finish()
    }

    /// Share of the ring between tail and head, in percent.
    pub fn log_utilization_pct(&self) -> u64 {
        let used = self.log.ring.segments.in_use();
        assert!(used <= u64::from(self.geo.segment_count));
        used * 100 / u64::from(self.geo.segment_count)
    }

    /// Whether any segment on disk still holds sectors to destage (the live
    /// part of the ring only, stopping at the first).
    fn any_dirty_segment(&self) -> bool {
        (self.log.ring.tail().0..self.log.ring.head().0).any(|s| {
            let seg = &self.log.segs[self.geo.location(Seq(s)).0 as usize];
            seg.state == SegState::Dirty && seg.valid_sectors > 0
        })
    }

    /// Segments on disk that still hold sectors to destage.
    pub fn dirty_segments_count(&self) -> u64 {
        self.log.segs.iter().filter(|s| s.state == SegState::Dirty && s.valid_sectors > 0).count() as u64
    }

    fn serving(&self) -> bool {
        matches!(self.phase, Phase::Serving)
    }
}

impl Target for Dcd {
    fn name(&self) -> &'static str {
        "dcd"
    }

    fn size_bytes(&self) -> u64 {
        self.args.data_length_bytes
    }

    fn handle_request(&mut self, now: Instant, req: Request) {
        assert!(req.validate(self.size_bytes()).is_ok(), "stack validated it");
        self.request(now, req);
    }

    fn handle_completion(&mut self, now: Instant, c: Completion) {
        let op = self.io.take(c.id);
        if c.result.is_err() {
            self.counters.lower_errors_count += 1;
        }
        self.completion(now, op, c);
        self.after_change(now);
    }

    fn handle_timeout(&mut self, now: Instant) {
        self.timeout(now);
        self.after_change(now);
    }

    fn handle_idle(&mut self, now: Instant) {
        self.idle(now);
    }

    fn poll_lower(&mut self) -> Option<Request> {
        self.io.lower_q.pop_front()
    }

    fn poll_upper(&mut self) -> Option<Completion> {
        self.io.upper_q.pop_front()
    }

    fn poll_timeout(&self) -> Option<Instant> {
        // Asked several times per event: no iterator chain.
        let earlier = |a: Option<Instant>, b: Option<Instant>| match (a, b) {
            (Some(x), Some(y)) => Some(x.min(y)),
            (x, None) | (None, x) => x,
        };
        earlier(
            earlier(self.log.buffer_deadline, self.destage.idle.poll_timeout()),
            self.log.retry.backoff.at(),
        )
    }

    fn is_ready(&self) -> bool {
        self.serving()
    }

    /// `destage`: start destaging now, as if the idle threshold had passed
    /// ([`IdleTimer::force`]: it still stops at the next request, and
    /// resumes once the next idle threshold has passed).
    fn message(&mut self, now: Instant, msg: &str) -> Result<String, String> {
        match msg {
            "destage" if self.serving() => {
                self.destage.idle.force(now);
                Ok(format!("destaging {} dirty segment(s)", self.dirty_segments_count()))
            }
            "destage" => Err("dcd: not serving (bring-up failed or in progress)".into()),
            other => Err(format!("dcd: unknown message `{other}` (known: destage)")),
        }
    }

    /// Destage, forced when writes wait for log room; granted by the
    /// stack's background scheduler, one segment per step.
    fn background_offer(&self, now: Instant) -> Option<layoutd_core::background::Offer> {
        use layoutd_core::background::{JobClass, Offer};
        self.should_destage(now).then_some(Offer {
            class: if self.destage.forced { JobClass::Forced } else { JobClass::Destage },
        })
    }

    fn background_step(&mut self, now: Instant) -> Option<u64> {
        if !self.step_destage(now) {
            return None;
        }
        let job = self.destage.job.as_ref()?;
        // The segment read and the writes home of its valid sectors.
        let valid = u64::from(self.log.segs[job.loc.0 as usize].valid_sectors) * SECTOR_BYTES;
        Some(self.geo.stride_bytes() + valid)
    }

    fn is_drained(&self) -> bool {
        self.dirty_segments_count() == 0 && self.log_utilization_pct() == 0
    }

    /// Sectors with a newer copy in the log (or a RAM buffer) are unknown
    /// (reported as data); the rest live at home, 1:1.
    fn map_extent(&self, offset_bytes: u64, length_bytes: u64) -> Vec<(Option<u64>, u64)> {
        let unknown = vec![(None, length_bytes)];
        let Some(end) = offset_bytes.checked_add(length_bytes).filter(|&e| e <= self.args.data_length_bytes)
        else {
            return unknown;
        };
        if !self.serving() || !offset_bytes.is_multiple_of(SECTOR_BYTES) || !end.is_multiple_of(SECTOR_BYTES)
        {
            return unknown;
        }
        let mut out = Vec::new();
        let mut pos = offset_bytes;
        for (s, n) in self.lookup.mapped_runs(offset_bytes / SECTOR_BYTES, length_bytes / SECTOR_BYTES) {
            let (a, b) = (s * SECTOR_BYTES, (s + n) * SECTOR_BYTES);
            if a > pos {
                out.push((Some(self.args.data_offset_bytes + pos), a - pos));
            }
            out.push((None, b - a));
            pos = b;
        }
        if pos < end {
            out.push((Some(self.args.data_offset_bytes + pos), end - pos));
        }
        out
    }

    fn status(&self) -> Status {
        let c = &self.counters;
        let mut config = self.args.echo();
        if let Phase::Failed(e) = &self.phase {
            config.push(("error".into(), e.clone()));
        }
        if let Some(e) = self.log.retry.backoff.last_error() {
            config.push(("last_lower_error".into(), e.to_string()));
        }
        if let Some(loss) = &self.loss {
            config.push(("accepted_loss".into(), loss.clone()));
        }
        let counters = [
            ("writes_absorbed_count", c.writes_absorbed_count),
            ("writes_absorbed_bytes", c.writes_absorbed_bytes),
            ("writes_bypassed_count", c.writes_bypassed_count),
            ("writes_bypassed_bytes", c.writes_bypassed_bytes),
            ("writes_fua_count", c.writes_fua_count),
            ("writes_held_count", c.writes_held_count),
            ("flushes_count", c.flushes_count),
            ("trims_count", c.trims_count),
            ("log_segments_written_count", c.log_segments_written_count),
            ("log_written_bytes", c.log_written_bytes),
            ("read_ram_bytes", c.read_ram_bytes),
            ("read_log_bytes", c.read_log_bytes),
            ("read_data_bytes", c.read_data_bytes),
            ("reads_fragmented_count", c.reads_fragmented_count),
            ("destaged_bytes", c.destaged_bytes),
            ("destaged_segments_count", c.destaged_segments_count),
            ("overwritten_before_destage_bytes", c.overwritten_before_destage_bytes),
            ("forced_destages_count", c.forced_destages_count),
            ("invalidation_records_count", c.invalidation_records_count),
            ("checkpoints_written_count", c.checkpoints_written_count),
            ("recovered_segments_count", c.recovered_segments_count),
            ("lost_segments_count", c.lost_segments_count),
            ("flush_marks_written_count", c.flush_marks_written_count),
            ("lower_errors_count", c.lower_errors_count),
            ("lower_write_retries_count", c.lower_write_retries_count),
            ("log_utilization_pct", self.log_utilization_pct()),
            ("dirty_segments_count", self.dirty_segments_count()),
            ("log_sectors_mapped_count", self.lookup.mapped_count()),
            ("segment_count", u64::from(self.geo.segment_count)),
            ("tail_seq", self.log.ring.tail().0),
            ("head_seq", self.log.ring.head().0),
            ("boot_count", self.log.ring.boot),
            ("written_upto_seq", self.log.ring.written_upto.0),
            ("held_count", self.pending.len() as u64),
            ("durability_waiters_count", self.acks.waiters.len() as u64),
            ("mark_waiters_count", self.acks.mark_waiters.len() as u64),
            ("home_waiting_count", self.home.gate.waiting_count() as u64),
            ("reads_waiting_count", self.destage.reads_waiting.len() as u64),
            ("invalidations_pending_count", self.home.pending_invalidations.len() as u64),
            ("buffers_free_count", self.log.buffers_free.len() as u64),
            ("open_segment_seq", self.log.open.map_or(u64::MAX, |l| self.log.segs[l.0 as usize].seq.0)),
        ];
        Status {
            target: "dcd".into(),
            config,
            counters: counters.into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
        }
    }
}

/// Marks the sectors `mask` of slot `slot` of segment `seg` as no longer
/// current, on the segment table alone (for callers that hold the lookup
/// table at the same time). `superseder` as in [`Dcd::invalidate`].
fn invalidate_mask(segs: &mut [SegMeta], seg: SegLoc, slot: u16, mask: u64, superseder: Option<Seq>) {
    let seg = &mut segs[seg.0 as usize];
    assert_ne!(seg.state, SegState::Free, "a mapped sector lives in a live segment");
    let slot = &mut seg.slots[usize::from(slot)];
    assert!(mask != 0 && slot.valid_mask & mask == mask, "invalidating a sector that is not valid");
    slot.valid_mask &= !mask;
    let n = mask.count_ones();
    assert!(seg.valid_sectors >= n);
    seg.valid_sectors -= n;
    if let Some(s) = superseder {
        assert!(s >= seg.seq, "a superseder is never older");
        seg.superseded_seq_max = seg.superseded_seq_max.max(Some(s));
    }
}

/// Locations to invalidate, gathered a slot at a time: a lookup update
/// hands back the copies it drops in runs of one slot, and the runs of
/// one slot clear their bits in one step. [`Self::finish`] applies the
/// last slot's.
struct Invalidation<'a> {
    segs: &'a mut [SegMeta],
    superseder: Option<Seq>,
    slot: (SegLoc, u16),
    mask: u64,
    count: u64,
}

impl<'a> Invalidation<'a> {
    fn new(segs: &'a mut [SegMeta], superseder: Option<Seq>) -> Invalidation<'a> {
        Invalidation { segs, superseder, slot: (SegLoc(0), 0), mask: 0, count: 0 }
    }

    /// Adds the `n` locations of one slot from `loc`.
    fn add(&mut self, loc: Loc, n: u32) {
        if (loc.seg, loc.slot) != self.slot {
            self.apply();
            self.slot = (loc.seg, loc.slot);
        }
        assert!(n >= 1 && u32::from(loc.within) + n <= 64);
        let bits = (u64::MAX >> (64 - n)) << loc.within;
        assert!(self.mask & bits == 0, "each location is dropped once");
        self.mask |= bits;
        self.count += u64::from(n);
    }

    fn apply(&mut self) {
        if self.mask != 0 {
            invalidate_mask(self.segs, self.slot.0, self.slot.1, self.mask, self.superseder);
            self.mask = 0;
        }
    }

    /// Applies what is gathered; returns the sectors invalidated.
    fn finish(mut self) -> u64 {
        self.apply();
        self.count
    }
}
