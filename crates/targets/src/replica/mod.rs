//! `replica`: repeated non-sequential reads become sequential through
//! replicas written into the file system's free space (Lifchits, *Improving
//! Disk Read Performance through Block-Level Replication into Free Space*,
//! UBC 2008), with what the thesis left open: Table 4.1's RR and B cases,
//! replica choice, idle-time replication, update propagation, a quota,
//! gradual reclamation with a thrash guard, and a durable region record.
//!
//! Glossary:
//! - *original*: a block of the volume, at its own address (1:1 below).
//! - *declared free*: a block the file system said is free (a discard or a
//!   write of zeroes from above, or the ext2/3/4 bitmaps). It reads back as
//!   zeroes until the file system writes it: the contract that makes a
//!   replica living there invisible to every reader.
//! - *replica*: a copy of an original in a declared-free block; a *chain*
//!   is a run of replicas covering one read, contiguous below.
//! - *region*: the declared-free blocks that may hold replica bytes on
//!   disk; persisted (see [`meta`]) so that after any crash those blocks
//!   still read as zeroes.
//! - *candidate*: a read whose blocks would be replicated; candidates wait
//!   in a per-stream *queue* until the commit decision (§4.1.3).
//! - *history*: a stream's last reads (lower blocks); *close*: under
//!   `close_blocks` apart.
//!
//! Layout: `| volume (1:1, = the lower device's first volume_bytes) | region
//! record copy 0 | copy 1 |`.
//!
//! Replicas are non-authoritative: the replica map lives in memory only
//! and starts empty at every open; the region (and with it the declared
//! free space that may hold replica bytes) is recovered. See
//! `docs/replica.md` for why, and for every config key and counter.

mod config;
mod dense;
pub mod ext;
mod meta;
mod persist;
mod replicate;
mod request;
mod scan;
mod space;
mod streams;

pub use config::{Args, Choice, When};

use crate::gate::OverlapGate;
use crate::split::Assembly;
use bytes::Bytes;
use layoutd_core::config::{ArgReader, ConfigError};
use layoutd_core::{Completion, Instant, IoError, OpenMode, Request, Status, Target};
use rustc_hash::FxHashMap;
use space::Space;
use std::collections::VecDeque;
use streams::Streams;

/// Why this target sent a lower request.
#[derive(Clone, Debug)]
enum LowerOp {
    /// Bring-up: reading region record copy `copy`.
    MetaRead { copy: usize },
    /// Bring-up (format): writing a first record.
    FormatWrite,
    /// A region record write of `version`.
    MetaWrite { version: u64 },
    /// A piece of upper request `key` (read, write, flush) at `within` bytes.
    Piece { key: u64, within: u32, gate_range: Option<(u64, u64)> },
    /// A read of an original that may become a replication candidate.
    /// `stale`: a modify of those blocks arrived while it was in flight
    /// (RC), so its bytes may be old and are never replicated.
    CandidateRead { key: u64, stream: layoutd_core::StreamId, orig: u64, blocks: u64, stale: bool },
    /// A replica read for upper request `key` from replica blocks `range`,
    /// registered in `streams.ahead` (the shared read-ahead), which says
    /// how far on it reads for `stream`'s read-ahead.
    ReplicaRead { key: u64, range: (u64, u64), stream: layoutd_core::StreamId },
    /// A replica write `pending` (see [`Pending`]).
    ReplicaWrite { pendings: Vec<u64> },
    /// A piece of a map snapshot.
    SnapWrite,
    /// Bring-up (clean): reading the snapshot copy from byte `at` of it.
    SnapRead { at: u64 },
    /// A free-space scan read.
    Scan(scan::ScanRead),
}

/// A replica write between its decision and its completion.
#[derive(Clone, Debug)]
struct Pending {
    orig: u64,
    blocks: u64,
    loc: u64,
    data: Option<Bytes>,
    stream: layoutd_core::StreamId,
    /// False once an upper write or discard made it stale (INV) or took
    /// its blocks (B).
    valid: bool,
    /// The region version that must be durable before it is issued.
    region_version: u64,
    issued: bool,
    /// When it was decided (idle mode: `replication_wait_max_ms` counts
    /// from here).
    decided_at: Instant,
}

/// An item the overlap gate holds back.
#[derive(Debug)]
enum Held {
    /// An upper modify (its key); its lower requests are prepared.
    Upper { key: u64, lower: Vec<Request> },
    /// A run of replica writes to consecutive blocks.
    Replica { pendings: Vec<u64> },
}

#[derive(Default)]
struct Counters {
    reads_count: u64,
    reads_sequential_count: u64,
    reads_replica_count: u64,
    reads_replica_bytes: u64,
    reads_zero_bytes: u64,
    reads_unaligned_count: u64,
    reads_readahead_count: u64,
    readahead_read_blocks: u64,
    readahead_dropped_count: u64,
    replicas_created_blocks: u64,
    replicas_used_blocks: u64,
    replicas_invalidated_blocks: u64,
    replicas_dropped_by_allocation_blocks: u64,
    replicas_propagated_blocks: u64,
    replicas_reclaimed_blocks: u64,
    replica_writes_cancelled_count: u64,
    candidates_count: u64,
    queues_committed_count: u64,
    queues_cancelled_noise_count: u64,
    queues_cancelled_timeout_count: u64,
    candidates_forgotten_count: u64,
    congestion_backoffs_count: u64,
    quota_stops_count: u64,
    memory_cap_stops_count: u64,
    no_space_count: u64,
    region_full_count: u64,
    reclaim_attempts_count: u64,
    reclaim_failures_count: u64,
    thrash_guard_count: u64,
    conflicts_rr_count: u64,
    conflicts_b_count: u64,
    conflicts_inv_count: u64,
    conflicts_rc_count: u64,
    region_writes_count: u64,
    snapshots_written_count: u64,
    snapshots_too_large_count: u64,
    writes_count: u64,
    discards_count: u64,
    zeroes_count: u64,
    flushes_count: u64,
    lower_errors_count: u64,
}

/// The region record writer: versions of the in-memory region and the
/// newest one durable.
#[derive(Default)]
struct RegionLog {
    version: u64,
    durable: u64,
    generation: u64,
    busy: bool,
    /// Upper requests (keys) waiting for `durable >= version`.
    waiters: Vec<(u64, u64)>,
    /// Why the last write failed, if it did.
    last_error: Option<String>,
}

/// Bring-up.
enum Phase {
    Format {
        writes_left: u32,
    },
    Recover {
        copies: [Option<Bytes>; 2],
        reads_left: u32,
        clean: bool,
    },
    /// Clean open: loading snapshot `generation`.
    Loading {
        generation: u64,
        buf: Vec<u8>,
        reads_left: u32,
        error: Option<IoError>,
    },
    Serving,
    Failed(String),
}

/// Reclamation state (§3.4).
#[derive(Default)]
struct Reclaim {
    /// Reads left before the next attempt.
    wait_reads: u64,
    /// The bottom share now considered, in tenths of a percent.
    bottom_permille: u32,
}

/// The replica target; see the module docs.
///
/// Memory bounds: the replica map is capped by `memory_bytes_max`;
/// `pending` by the candidates queued plus `congestion_in_flight_max`
/// writes and `pending_bytes_max` bytes;
/// `asm` and `lower` by the upper requests in flight; the gate by both.
pub struct Replica {
    args: Args,
    phase: Phase,
    space: Space,
    streams: Streams,
    region: RegionLog,
    snap: persist::Snap,
    scan: scan::Scan,
    lower_io: crate::lowerio::LowerIo<LowerOp>,
    /// Upper requests being answered, by key.
    asm: FxHashMap<u64, Assembly>,
    /// The lower-request vector of the last modify issued, kept for the
    /// next (no allocation per write).
    lower_buf: Vec<Request>,
    next_key: u64,
    /// Blocks of the replica writes in `pending` (their data is held in
    /// RAM until written): bounded by `pending_bytes_max`.
    pending_blocks: u64,
    /// Replica writes decided and not yet completed, by key.
    pending: FxHashMap<u64, Pending>,
    next_pending: u64,
    /// Replica writes waiting for the region record or for idle time, in order.
    deferred: VecDeque<u64>,
    gate: OverlapGate<Held>,
    /// The extent replicas are being written into: `[cursor, end)`.
    current: Option<(u64, u64)>,
    /// Reads seen: the LRU clock.
    tick: u32,
    reclaim: Reclaim,
    /// Upper writes into the region: (lower pieces left, blocks, fua).
    region_drops: FxHashMap<u64, (u32, (u64, u64), bool)>,
    /// The runtime reported idle since bring-up.
    idle_seen: bool,
    /// Deferred replica writes' idle time: `replication_idle_ms` without a
    /// request (counted from each request; idle before the first), or
    /// `replication_wait_max_ms` of waiting (the timer's maximum wait).
    replication_idle: layoutd_core::idle::IdleTimer,
    /// Deferred replica writes with keys up to this one were deferred when
    /// the oldest of them became due (maximum wait): they go out together,
    /// one sweep of the replica extent, idle time or not.
    overdue_through: Option<u64>,
    /// Held while bring-up runs.
    held: VecDeque<Request>,
    counters: Counters,
}

impl Replica {
    /// Parses the config over a lower device of `lower_bytes`.
    pub fn ctr(args: ArgReader<'_>, lower_bytes: u64, mode: OpenMode) -> Result<Replica, ConfigError> {
        let args = Args::parse(args, lower_bytes)?;
        Ok(Replica::new(args, mode))
    }

    fn new(args: Args, mode: OpenMode) -> Replica {
        let replication_idle = layoutd_core::idle::IdleTimer::new(layoutd_core::idle::IdleOptions {
            idle_at_start: true,
            restart_while_in_flight: false,
            starvation: None,
            wait_ns_max: (args.replication_wait_max_ms > 0)
                .then(|| args.replication_wait_max_ms.saturating_mul(1_000_000)),
        });
        let phase = match mode {
            OpenMode::Format { .. } => Phase::Format { writes_left: 3 },
            OpenMode::Open { clean, .. } => Phase::Recover { copies: [None, None], reads_left: 2, clean },
        };
        let mut r = Replica {
            space: Space::new(args.volume_blocks(), args.replicas_per_block_max),
            streams: Streams::new(args.streams_max, u64::from(args.block_bytes)),
            scan: scan::Scan::new(args.volume_blocks(), args.fs_scan),
            reclaim: Reclaim { bottom_permille: Self::bottom_start(&args), ..Reclaim::default() },
            args,
            phase,
            region: RegionLog::default(),
            snap: persist::Snap::default(),
            lower_io: crate::lowerio::LowerIo::default(),
            asm: FxHashMap::default(),
            lower_buf: Vec::new(),
            next_key: 0,
            pending: FxHashMap::default(),
            pending_blocks: 0,
            next_pending: 0,
            deferred: VecDeque::new(),
            gate: OverlapGate::new(),
            current: None,
            tick: 0,
            held: VecDeque::new(),
            idle_seen: false,
            replication_idle,
            overdue_through: None,
            region_drops: FxHashMap::default(),
            counters: Counters::default(),
        };
        r.start_bringup();
        r
    }

    fn bottom_start(args: &Args) -> u32 {
        if args.reclaim_growth {
            (args.reclaim_bottom_pct * 10 / 4).max(1)
        } else {
            args.reclaim_bottom_pct * 10
        }
    }

    /// Sends a request below, remembering why.
    fn emit(&mut self, op: LowerOp, req: Request) -> u64 {
        use layoutd_core::Op;
        let changes = (req.op != Op::Read && req.op != Op::Flush && self.args.readahead_blocks > 0)
            .then(|| (req.offset_bytes / self.block(), req.end_bytes().div_ceil(self.block())));
        if let Some((a, b)) = changes {
            self.forget_ahead(a, b);
        }
        let background = matches!(
            op,
            LowerOp::MetaWrite { .. }
                | LowerOp::ReplicaWrite { .. }
                | LowerOp::FormatWrite
                | LowerOp::SnapWrite
                | LowerOp::Scan(_)
        );
        let id = self.lower_io.emit(op, background, req);
        if let Some((a, b)) = changes {
            self.streams.ahead.write_issued(id, a, b);
        }
        id
    }

    fn new_key(&mut self) -> u64 {
        self.next_key += 1;
        self.next_key
    }

    fn block(&self) -> u64 {
        u64::from(self.args.block_bytes)
    }

    fn serving(&self) -> bool {
        matches!(self.phase, Phase::Serving)
    }

    /// Map bytes per replicated block (0 with none).
    fn bytes_per_replica_block(&self) -> u64 {
        self.space.map_bytes().checked_div(self.space.replica_blocks()).unwrap_or(0)
    }

    /// Checks every invariant of the maps (tests; O(size)).
    pub fn check_invariants(&self) {
        self.space.check();
        for p in self.pending.values() {
            assert!(
                self.space.free.free_parts(p.loc, p.blocks).is_empty(),
                "a pending replica write's blocks are taken"
            );
        }
    }
}

impl Target for Replica {
    fn name(&self) -> &'static str {
        "replica"
    }

    fn size_bytes(&self) -> u64 {
        self.args.volume_bytes
    }

    fn handle_request(&mut self, now: Instant, req: Request) {
        assert!(req.validate(self.size_bytes()).is_ok(), "stack validated it");
        self.replication_idle.request();
        self.replication_idle.arm(now, self.args.replication_idle_ms.saturating_mul(1_000_000));
        match &self.phase {
            Phase::Serving => self.request(now, req),
            Phase::Failed(_) => {
                self.lower_io.upper_q.push_back(Completion::err(req.id, layoutd_core::IoError::Io))
            }
            _ => self.held.push_back(req),
        }
    }

    fn handle_completion(&mut self, now: Instant, c: Completion) {
        let op = self.lower_io.take(c.id);
        // Read-ahead bytes read while a write was in flight may be old.
        self.counters.readahead_dropped_count += self.streams.ahead.write_done(c.id.0);
        if c.result.is_err() {
            self.counters.lower_errors_count += 1;
        }
        self.completion(now, op, c);
        self.after_change(now);
    }

    fn handle_timeout(&mut self, now: Instant) {
        self.replication_idle.timeout(now, false);
        if self.replication_idle.due_at(self.waiting_since()).is_some_and(|t| t <= now) {
            self.overdue_through = self.deferred.back().copied();
        }
        self.timeout(now);
        self.after_change(now);
    }

    fn handle_idle(&mut self, _now: Instant) {
        self.idle_seen = self.serving();
    }

    fn poll_lower(&mut self) -> Option<Request> {
        self.lower_io.lower_q.pop_front()
    }

    fn poll_upper(&mut self) -> Option<Completion> {
        self.lower_io.upper_q.pop_front()
    }

    fn poll_timeout(&self) -> Option<Instant> {
        // The idle wait matters only while replica writes or a snapshot wait for it.
        let idle = self
            .replication_idle
            .poll_timeout()
            .filter(|_| !self.deferred.is_empty() || self.snapshot_dirty());
        let due = self.replication_idle.due_at(self.waiting_since());
        [self.streams.deadline(self.args.queue_timeout_ms), idle, due].into_iter().flatten().min()
    }

    /// Serving only: a failed bring-up is not ready, so the runtime refuses
    /// the volume with the `error` status (it served every request an I/O
    /// error before, and `format` reported success).
    fn is_ready(&self) -> bool {
        matches!(self.phase, Phase::Serving)
    }

    /// Idle-time replica writes (`replication = "idle"`) and map
    /// snapshots, as class Replication.
    fn background_offer(&self, now: Instant) -> Option<layoutd_core::background::Offer> {
        use layoutd_core::background::{JobClass, Offer};
        let ready = self.deferred.iter().any(|k| self.pending[k].region_version <= self.region.durable);
        let overdue = self.deferred.front().is_some_and(|&k| self.overdue_through.is_some_and(|o| k <= o));
        let due = overdue || self.replication_idle.is_due(now, self.waiting_since());
        let ready = ready && self.args.replication == When::Idle && due;
        // The first scan waits for the runtime's first idle report, not just
        // the scheduler's: bring-up hands the stack over with nothing in flight.
        let scan = self.scan.wanted && !self.scan.running() && self.idle_seen;
        (self.serving() && (ready || scan || self.snapshot_due(now)))
            .then_some(Offer { class: JobClass::Replication })
    }

    fn background_step(&mut self, now: Instant) -> Option<u64> {
        let bytes = if self.snapshot_due(now) {
            self.start_snapshot(now)
        } else if self.scan.wanted && !self.scan.running() && self.idle_seen {
            self.start_scan()
        } else {
            self.step_replication(now)
        };
        self.pump_region();
        (bytes > 0).then_some(bytes)
    }

    fn is_drained(&self) -> bool {
        self.deferred.is_empty() && self.pending.is_empty() && !self.scan.wanted && !self.scan.running()
    }

    /// Blocks the file system declared free read as zeroes here whatever
    /// is below (reported as data); the rest live 1:1 below.
    fn map_extent(&self, offset_bytes: u64, length_bytes: u64) -> Vec<(Option<u64>, u64)> {
        let b = self.block();
        if !self.serving() || !offset_bytes.is_multiple_of(b) || !length_bytes.is_multiple_of(b) {
            return vec![(None, length_bytes)];
        }
        let (first, n) = (offset_bytes / b, length_bytes / b);
        let mut out = Vec::new();
        let mut pos = first;
        for (s, l) in self.space.declared.free_parts(first, n) {
            if s > pos {
                out.push((Some(pos * b), (s - pos) * b));
            }
            out.push((None, l * b));
            pos = s + l;
        }
        if pos < first + n {
            out.push((Some(pos * b), (first + n - pos) * b));
        }
        out
    }

    fn message(&mut self, now: Instant, msg: &str) -> Result<String, String> {
        match msg {
            "reclaim" if self.serving() => {
                self.reclaim.wait_reads = 0;
                Ok(match self.try_reclaim(now) {
                    Some((s, n)) => format!("reclaimed blocks [{s}, +{n})"),
                    None => "nothing reclaimed (no range qualifies)".into(),
                })
            }
            "free-space" if self.serving() && self.scan.written_dropped => Err(scan::WRITTEN_DROPPED.into()),
            "free-space" if self.serving() => {
                self.start_scan();
                Ok("scanning the ext2/3/4 bitmaps for free space".into())
            }
            "map" => {
                let shown: Vec<String> = self
                    .space
                    .forward
                    .iter()
                    .take(64)
                    .map(|e| format!("{}+{}->{}", e.start, e.length, e.value.orig))
                    .collect();
                Ok(format!("replica blocks {}: {}", self.space.replica_blocks(), shown.join(" ")))
            }
            "verify" => {
                self.check_invariants();
                Ok("maps consistent".into())
            }
            "reclaim" => Err("replica: not serving (bring-up failed or in progress)".into()),
            other => {
                Err(format!("replica: unknown message `{other}` (known: free-space, reclaim, map, verify)"))
            }
        }
    }

    fn status(&self) -> Status {
        let mut config = self.args.echo();
        if let Phase::Failed(e) = &self.phase {
            config.push(("error".into(), e.clone()));
        }
        if let Some(e) = &self.region.last_error {
            config.push(("last_region_error".into(), e.clone()));
        }
        if let Some(e) = &self.scan.error {
            config.push(("fs_scan_error".into(), e.clone()));
        }
        if let Some(note) = self.fs_block_note() {
            config.push(("fs_block_note".into(), note));
        }
        if let Some(e) = &self.snap.load_error {
            config.push(("snapshot_load_error".into(), e.clone()));
        }
        Status { target: "replica".into(), config, counters: self.counters() }
    }
}

impl Replica {
    /// Why a file system with smaller blocks than `block_bytes` gains
    /// little: its single-block reads are unaligned here and pass through.
    fn fs_block_note(&self) -> Option<String> {
        let fs = self.scan.fs_block_bytes;
        (fs != 0 && fs < self.args.block_bytes).then(|| {
            format!(
                "the file system's blocks are {fs} bytes, smaller than block_bytes {}: its \
                 single-block reads are unaligned here and pass through unreplicated \
                 (reads_unaligned_count); format the volume with block_bytes = {fs}, or the \
                 file system with {}-byte blocks (mkfs.ext4 -b {})",
                self.args.block_bytes, self.args.block_bytes, self.args.block_bytes
            )
        })
    }

    fn counters(&self) -> Vec<(String, u64)> {
        let c = &self.counters;
        let b = self.block();
        let kv = [
            ("reads_count", c.reads_count),
            ("reads_sequential_count", c.reads_sequential_count),
            ("reads_replica_count", c.reads_replica_count),
            ("reads_replica_bytes", c.reads_replica_bytes),
            ("reads_zero_bytes", c.reads_zero_bytes),
            ("reads_unaligned_count", c.reads_unaligned_count),
            ("reads_readahead_count", c.reads_readahead_count),
            ("readahead_read_blocks", c.readahead_read_blocks),
            ("readahead_dropped_count", c.readahead_dropped_count),
            ("writes_count", c.writes_count),
            ("discards_count", c.discards_count),
            ("zeroes_count", c.zeroes_count),
            ("flushes_count", c.flushes_count),
            ("candidates_count", c.candidates_count),
            ("queues_committed_count", c.queues_committed_count),
            ("queues_cancelled_noise_count", c.queues_cancelled_noise_count),
            ("queues_cancelled_timeout_count", c.queues_cancelled_timeout_count),
            ("candidates_forgotten_count", c.candidates_forgotten_count),
            ("replicas_created_blocks", c.replicas_created_blocks),
            ("replicas_used_blocks", c.replicas_used_blocks),
            ("replicas_invalidated_blocks", c.replicas_invalidated_blocks),
            ("replicas_dropped_by_allocation_blocks", c.replicas_dropped_by_allocation_blocks),
            ("replicas_propagated_blocks", c.replicas_propagated_blocks),
            ("replicas_reclaimed_blocks", c.replicas_reclaimed_blocks),
            ("replica_writes_cancelled_count", c.replica_writes_cancelled_count),
            ("congestion_backoffs_count", c.congestion_backoffs_count),
            ("quota_stops_count", c.quota_stops_count),
            ("memory_cap_stops_count", c.memory_cap_stops_count),
            ("no_space_count", c.no_space_count),
            ("region_full_count", c.region_full_count),
            ("reclaim_attempts_count", c.reclaim_attempts_count),
            ("reclaim_failures_count", c.reclaim_failures_count),
            ("thrash_guard_count", c.thrash_guard_count),
            ("reclaim_bottom_permille", u64::from(self.reclaim.bottom_permille)),
            ("conflicts_rr_count", c.conflicts_rr_count),
            ("conflicts_b_count", c.conflicts_b_count),
            ("conflicts_inv_count", c.conflicts_inv_count),
            ("conflicts_rc_count", c.conflicts_rc_count),
            ("region_writes_count", c.region_writes_count),
            ("fs_scan_runs_count", self.scan.runs_count),
            ("fs_scan_declared_blocks", self.scan.declared_blocks),
            ("fs_scan_free_blocks", self.scan.found_blocks),
            ("fs_block_bytes", u64::from(self.scan.fs_block_bytes)),
            ("snapshots_written_count", c.snapshots_written_count),
            ("snapshots_too_large_count", c.snapshots_too_large_count),
            ("snapshot_loaded_blocks", self.snap.loaded_blocks),
            ("snapshot_current_generation", self.snap.vouched),
            ("lower_errors_count", c.lower_errors_count),
            ("replica_blocks", self.space.replica_blocks()),
            ("replica_bytes", self.space.replica_blocks() * b),
            ("free_blocks_known", self.space.free.free_units()),
            ("declared_free_blocks", self.space.declared.free_units()),
            ("region_blocks", self.space.region.free_units()),
            ("region_extents", self.space.region.extent_count() as u64),
            ("map_bytes", self.space.map_bytes()),
            ("sets_bytes", self.space.sets_bytes() + self.scan.written.bytes()),
            ("memory_bytes", self.memory_bytes()),
            ("map_bytes_per_replica_block", self.bytes_per_replica_block()),
            ("pending_replica_writes", self.pending.len() as u64),
            ("deferred_replica_writes", self.deferred.len() as u64),
            ("pending_replica_bytes", self.pending_blocks * self.block()),
            ("candidates_queued", self.streams.queued_count() as u64),
            ("gate_waiting_count", self.gate.waiting_count() as u64),
        ];
        kv.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
    }
}
