//! `opt`: a self-optimizing block layer (Bhadkamkar, Burnett, Liptak,
//! Rangaswami, Hristidis, FIU TR-2007-01-01, the system that became BORG):
//! every request is *profiled*, per-stream access graphs are *analyzed*
//! into a master graph, a greedy *plan* places correlated blocks one after
//! the other in a dedicated OPT region, and the plan is *executed* by
//! copying those blocks there in idle time; from then on every request to a
//! mapped block goes to its OPT copy.
//!
//! Glossary:
//! - *volume*: the lower device minus the OPT region, 1:1 (*home*).
//! - *OPT region*: `opt_offset`/`opt_length`; map copies, journal, *slots*.
//! - *block*: `block_bytes` of the volume, the unit of the map and of copies.
//! - *map*: home block → slot, with a *dirty* bit per slot (the copy is
//!   newer than home). Persisted as a [`meta::MapImage`] (two copies, with a
//!   generation) and extended by the dirty-bit *journal*.
//! - *reconfiguration* (a *job*, see [`exec`]): copy home the dirty slots the
//!   new plan drops, unmap them (map write), copy the new blocks in, commit
//!   them (flush, map write). Granted by the background scheduler as class
//!   `Reorganisation`, one bounded step at a time.
//!
//! Layout on the lower device:
//! ```text
//! 0            opt_offset                                          end
//! | volume ... | map 0 | map 1 | journal | slot 0 | slot 1 | ... | volume ... |
//! ```
//!
//! Consistency (see `docs/opt.md`): a slot's copy changes only while its
//! dirty bit is durable: the first write to a clean slot is held until a
//! journal block naming the slot is written with FUA. So after a crash the
//! map plus the journal name exactly the slots whose copy may differ from
//! home, and every other copy equals home: reads return the latest flushed
//! data and the copy-back work is the slots really written.
//!
//! Config (`[[layer]] target = "opt"`), see `examples/opt.toml` and
//! [`config::Args`]. Status: `opt <config> <counters>` ([`Opt::status`]).
//! Messages: `plan`, `apply`, `drop`, `status`.

mod absorb;
pub mod analyze;
mod bringup;
pub mod config;
mod exec;
mod free;
pub mod meta;
pub mod place;

use crate::blockmap::BlockMap;
use crate::gate::OverlapGate;
use crate::readahead::ReadAhead;
use crate::split::Assembly;
use analyze::{Analyzer, Limits, Profile, ProfileEntry, Range};
use config::{Args, Geometry};
use layoutd_core::config::{ArgReader, ConfigError};
use layoutd_core::idle::{IdleOptions, IdleTimer, Starvation};
use layoutd_core::{
    Completion, Instant, IoError, Op, OpenMode, ReqId, Request, Status, Target, SECTOR_BYTES,
};
use rustc_hash::FxHashMap;
use std::collections::VecDeque;

/// Idle time for background work: `idle_ms` without a request (counted
/// from each request; idle before the first). A job that made no progress
/// for ten thresholds is starved: some client never leaves `idle_ms` of
/// quiet (a kernel thread zeroing inode tables writes every ~100 ms for
/// minutes after `mkfs.ext4`). Its steps then wait for a tenth of `idle_ms`
/// only: they take the gaps of a trickle, still not the gaps inside a burst.
const IDLE: IdleOptions = IdleOptions {
    idle_at_start: true,
    restart_while_in_flight: false,
    starvation: Some(Starvation { after_thresholds: 10, divisor: 10 }),
    wait_ns_max: None,
};

/// Streams whose last read position is kept (`Opt::read_last`); past it
/// the table starts over.
const READ_LAST_MAX: usize = 4096;

/// Read-ahead buffers a stream keeps (`readahead_memory_bytes` bounds them all).
const READ_AHEAD_PER_STREAM: usize = 8;

/// Of the copies of home blocks `[pos, pos + n)` (the primary at slot
/// `primary`, extra copies in `extras`; `home_of(slot)`: the block a slot
/// holds), the one whose slot is nearest to `last` (the primary on a tie):
/// `(its slot, blocks it holds in a row)`. The common case, a copy at
/// `last` itself (the stream reads on), costs no map lookup. With
/// `follow` (`read_follow`), a copy laid out at most
/// [`analyze::FOLLOW_AHEAD_BLOCKS`] slots after a copy of the block the
/// stream read last (the one before `last`) wins over the others: a
/// sequence an earlier run laid out going the same way, which the stream
/// then reads on along.
pub fn nearest_copy(
    home_of: impl Fn(u64) -> Option<u64>,
    extras: &[BlockMap<u64>],
    pos: u64,
    n: u64,
    primary: u64,
    last: u64,
    follow: bool,
) -> (u64, u64) {
    if home_of(last) == Some(pos) {
        let k = (1..n).find(|&i| home_of(last + i) != Some(pos + i)).unwrap_or(n);
        return (last, k);
    }
    // The block the stream read last: a copy laid out a little after a
    // copy of it continues the stream's sequence (a sequence made by a run
    // that went the same way).
    let prev = if follow { last.checked_sub(1).and_then(&home_of) } else { None };
    let follows = |slot: u64| {
        prev.is_some_and(|p| {
            (1..=analyze::FOLLOW_AHEAD_BLOCKS).any(|j| slot.checked_sub(j).and_then(&home_of) == Some(p))
        })
    };
    let mut best = (primary, n);
    let mut best_follows = follows(primary);
    for layer in extras {
        if let Some(e) = layer.extent_at_or_after(pos).filter(|e| e.start <= pos) {
            let slot = e.value + (pos - e.start);
            let f = follows(slot);
            if (f && !best_follows) || (f == best_follows && slot.abs_diff(last) < best.0.abs_diff(last)) {
                best = (slot, (e.start + e.length - pos).min(n));
                best_follows = f;
            }
        }
    }
    best
}

/// Pushes the home pieces of volume bytes `[a, z)` of a request at
/// `offset` (two when they straddle the region's start).
fn home_pieces(geo: &Geometry, a: u64, z: u64, offset: u64, out: &mut Vec<(u64, u32, u64, Option<u32>)>) {
    let cut = geo.opt_offset_bytes;
    if a < cut && cut < z {
        out.push((a, (a - offset) as u32, cut - a, None));
        out.push((geo.home_bytes(cut), (cut - offset) as u32, z - cut, None));
    } else {
        out.push((geo.home_bytes(a), (a - offset) as u32, z - a, None));
    }
}

/// A plan's ranges laid out from slot 0 in order, as maps from home block
/// to slot: layer 0 holds each block's first placement (the primary),
/// layer `k` its `k + 1`-th; and the slots used. For tools measuring a plan
/// outside the target (the target itself keeps slots that stay put).
pub fn plan_layers(ranges: &[Range]) -> (Vec<BlockMap<u64>>, u64) {
    let mut layers: Vec<BlockMap<u64>> = Vec::new();
    let mut slot = 0;
    for &(s, e) in ranges {
        for b in s..e {
            let k = layers.iter().position(|l| l.get(b).is_none()).unwrap_or(layers.len());
            if k == layers.len() {
                layers.push(BlockMap::new());
            }
            layers[k].insert(b, 1, slot);
            slot += 1;
        }
    }
    (layers, slot)
}

/// Walks blocks `[start, start + length)` of `map` piece by piece, calling
/// `f(first block, blocks, Some(slot of the first) | None)`; no allocation
/// (one or two ordered-map lookups a piece). The indirection of every
/// request.
pub fn for_each_piece(
    map: &BlockMap<u64>,
    start: u64,
    length: u64,
    mut f: impl FnMut(u64, u64, Option<u64>),
) {
    let end = start + length;
    let mut pos = start;
    while pos < end {
        let (n, slot) = match map.extent_at_or_after(pos) {
            Some(e) if e.start <= pos => {
                ((e.start + e.length).min(end) - pos, Some(e.value + (pos - e.start)))
            }
            Some(e) if e.start < end => (e.start - pos, None),
            _ => (end - pos, None),
        };
        assert!(n > 0, "a piece moves forward");
        f(pos, n, slot);
        pos += n;
    }
}

/// One slot of the region.
#[derive(Clone, Copy, Debug, Default)]
struct Slot {
    /// The home block it holds, if mapped.
    home: Option<u64>,
    /// The copy is newer than home, and the journal or map says so on disk.
    dirty: bool,
    /// A journal record making it dirty is queued or in flight.
    journal_pending: bool,
    /// Bumped by every upper write to the slot (a copy home compares it).
    version: u32,
    /// An extra copy of `home` (its primary is in `map`): clean and
    /// read-only, valid while the primary is clean.
    extra: bool,
    /// An absorbed write's slot whose mapping is not on disk yet.
    absorbed: absorb::Absorbed,
}

/// Why this target sent a lower request.
#[derive(Clone, Debug)]
enum LowerOp {
    /// Format or recovery I/O; `part` tells the recovery reads apart (3: not one).
    Bringup {
        part: usize,
    },
    /// A piece of an upper read or write.
    Piece {
        key: u64,
        within: u32,
    },
    /// A piece of an upper read of `bytes` bytes from the region that reads
    /// on along its sequence or back over the slots its stream skipped
    /// (registered in `Opt::ahead`); its own bytes, `own`'s, start at byte
    /// `at` of the lower read. `own`: the piece's own read (what a failed
    /// read is retried as: the extra slots must not fail a read of good ones).
    PieceAhead {
        key: u64,
        within: u32,
        at: u32,
        own: Request,
    },
    UpperFlush {
        id: ReqId,
    },
    /// The lower flush of an upper (or internal) flush while absorbing:
    /// `runs` were written before it was issued.
    AbsorbFlush {
        runs: Vec<absorb::Run>,
    },
    CopyInRead {
        run: u32,
    },
    /// One write of a batch: runs with adjacent slots, in slot order.
    CopyInWrite {
        runs: Vec<u32>,
    },
    HomeRead {
        slot: u32,
        version: u32,
    },
    HomeWrite {
        slot: u32,
        version: u32,
    },
    JobFlush,
    MapWrite {
        generation: u64,
    },
    JournalWrite {
        slots: Vec<u32>,
        maps: Vec<absorb::Run>,
    },
}

impl LowerOp {
    fn is_background(&self) -> bool {
        !matches!(
            self,
            LowerOp::Piece { .. }
                | LowerOp::PieceAhead { .. }
                | LowerOp::UpperFlush { .. }
                | LowerOp::AbsorbFlush { .. }
                | LowerOp::Bringup { .. }
        )
    }
}

#[derive(Default)]
struct Counters {
    read_opt_count: u64,
    read_opt_bytes: u64,
    written_opt_count: u64,
    written_opt_bytes: u64,
    read_home_bytes: u64,
    written_home_bytes: u64,
    flushes_count: u64,
    copies_count: u64,
    copy_writes_count: u64,
    copied_bytes: u64,
    copies_stale_count: u64,
    dirty_copies_count: u64,
    copied_home_bytes: u64,
    dropped_blocks_count: u64,
    reconfigurations_count: u64,
    plans_count: u64,
    plans_unchanged_count: u64,
    moved_blocks_count: u64,
    analysis_units: u64,
    planning_units: u64,
    indirection_lookups_count: u64,
    indirection_pieces_count: u64,
    map_writes_count: u64,
    journal_writes_count: u64,
    writes_held_count: u64,
    recovered_dirty_slots_count: u64,
    journal_blocks_unreadable_count: u64,
    read_extra_count: u64,
    extras_dropped_count: u64,
    partial_reads_home_count: u64,
    recovered_absorbed_blocks_count: u64,
    readahead_reads_count: u64,
    readahead_read_blocks: u64,
    readahead_hits_count: u64,
    readbehind_reads_count: u64,
    readbehind_read_blocks: u64,
    readahead_failed_count: u64,
}

/// The bring-up phase.
enum Phase {
    Format { writes_left: u32, flushing: bool },
    Recover(bringup::Recovering),
    Serving,
    Failed(String),
}

/// The `opt` target. Memory: the slot table and the map are fixed by the
/// region's size; the profile, the stream graphs and the plan by their
/// `_max` keys; in-flight collections by the upper requests in flight (one
/// entry each) plus one job's batch of `copy_batch_blocks` copies.
pub struct Opt {
    args: Args,
    geo: Geometry,
    phase: Phase,
    slots: Vec<Slot>,
    /// The slots no home block is mapped to (see [`free`]).
    free: free::FreeSlots,
    /// Home block → slot, for mapped blocks: the primary copy, which
    /// every write goes to.
    map: BlockMap<u64>,
    /// Extra copies (`copies_max > 1`): layer `k` maps home blocks to
    /// their `k + 1`-th copy. Invariant: every block of a layer has a clean
    /// primary in `map`; a primary's extra copies go when it turns dirty
    /// (its dirty bit durable, before the write), so reads of them never
    /// see data older than the latest acknowledged write.
    extras: Vec<BlockMap<u64>>,
    /// Per stream (keyed as the graphs are, `graph_stream`: the plan lays
    /// out one sequence per key, so the key's last read is where its
    /// sequence goes on): the slot after its last read from OPT (a read
    /// picks the copy nearest to it: the one continuing the sequence).
    read_last: FxHashMap<u32, u64>,
    /// The reads served from home, by where they are: the region's best
    /// place for this workload (`opt_offset_best` in `status`).
    home_reads: place::HomeReads,
    /// Generation of the newest map on disk.
    map_generation: u64,
    /// Journal blocks written under `map_generation`.
    journal_next: u32,
    /// A map or journal write is in flight (one at a time).
    meta_busy: bool,
    /// Slots waiting for a journal record.
    journal_queue: Vec<u32>,
    /// Upper writes waiting for a journal record or a map write.
    held: VecDeque<Request>,
    /// While a job's map write is in flight: home blocks whose mapping it
    /// changes (writes to them wait).
    changing: Vec<Range>,
    job: Option<exec::Job>,
    profile: Profile,
    analyzer: Analyzer,
    /// The newest plan (block ranges in region order).
    planned: Option<Vec<Range>>,
    requests_since_plan: u64,
    last_plan_at: Instant,
    /// Up to when the weights have halved (`weight_half_life_ms`).
    halved_at: Instant,
    /// Background work waits for idle time ([`IDLE`]); its starvation clock
    /// runs while a job exists, from when the job last started or made
    /// progress (a step, an I/O done).
    idle: IdleTimer,
    lower_io: crate::lowerio::LowerIo<LowerOp>,
    assemblies: FxHashMap<u64, Assembly>,
    /// The pieces vector of the last request, kept for the next one (no
    /// allocation per request).
    pieces_buf: Vec<(u64, u32, u64, Option<u32>)>,
    next_key: u64,
    /// Lower writes (and background reads) on overlapping sectors, in order.
    gate: OverlapGate<(LowerOp, Request)>,
    loss: Option<String>,
    counters: Counters,
    absorber: absorb::Absorber,
    /// Slots read ahead along the planned sequences (`readahead_bytes`),
    /// per stream keyed as the graphs are; dropped by every lower write of
    /// their slots.
    ahead: ReadAhead<u32>,
    /// Where the newest lower read or write ended (lower bytes).
    last_lower_end: u64,
    /// The virtual time of the newest request.
    now_ns: u64,
}

impl Opt {
    /// Parses the config over a lower device of `lower_bytes`.
    pub fn ctr(args: ArgReader<'_>, lower_bytes: u64, mode: OpenMode) -> Result<Opt, ConfigError> {
        let (args, geo) = Args::parse(args, lower_bytes)?;
        Ok(Opt::new(args, geo, mode))
    }

    fn new(args: Args, geo: Geometry, mode: OpenMode) -> Opt {
        assert!(geo.slot_count > 0);
        let limits = Limits {
            think_ns: args.think_time_ms * 1_000_000,
            vertices_max: args.graph_vertices_max as usize,
            edges_max: args.graph_edges_max as usize,
            sightings: args.plan_streams && args.plan_time_order,
        };
        let ahead = ReadAhead::new(geo.block_bytes, READ_AHEAD_PER_STREAM, args.readahead_memory_bytes);
        let phase = match mode {
            OpenMode::Format { .. } => Phase::Format { writes_left: 0, flushing: false },
            OpenMode::Open { accept_loss, .. } => Phase::Recover(bringup::Recovering::new(accept_loss)),
        };
        let mut opt = Opt {
            profile: Profile::new(args.profile_entries_max as usize),
            analyzer: Analyzer::new(limits),
            args,
            geo,
            phase,
            slots: vec![Slot::default(); geo.slot_count as usize],
            free: free::FreeSlots::new(geo.slot_count),
            map: BlockMap::new(),
            extras: Vec::new(),
            read_last: FxHashMap::default(),
            home_reads: place::HomeReads::new(geo.volume_bytes),
            map_generation: 0,
            journal_next: 0,
            meta_busy: false,
            journal_queue: Vec::new(),
            held: VecDeque::new(),
            changing: Vec::new(),
            job: None,
            planned: None,
            requests_since_plan: 0,
            last_plan_at: Instant::ZERO,
            halved_at: Instant::ZERO,
            idle: IdleTimer::new(IDLE),
            lower_io: crate::lowerio::LowerIo::default(),
            assemblies: FxHashMap::default(),
            pieces_buf: Vec::new(),
            next_key: 0,
            gate: OverlapGate::new(),
            loss: None,
            counters: Counters::default(),
            absorber: absorb::Absorber::default(),
            ahead,
            last_lower_end: 0,
            now_ns: 0,
        };
        opt.start_bringup();
        opt
    }

    /// Sends a request below, remembering why; returns its id. A write of
    /// slots first drops what was read ahead of them (and again when it
    /// completes, see [`crate::readahead`]).
    fn emit(&mut self, op: LowerOp, req: Request) -> u64 {
        assert!(req.validate(u64::MAX).is_ok() || req.op == Op::Flush, "a well-formed lower request");
        let background = op.is_background();
        let slots = (self.args.holds_reads() && req.op != Op::Read && req.op != Op::Flush)
            .then(|| self.geo.slots_of(req.offset_bytes, u64::from(req.length_bytes)))
            .flatten();
        if let Some((a, b)) = slots {
            self.ahead.forget(a, b);
        }
        if req.op != Op::Flush {
            self.last_lower_end = req.end_bytes();
        }
        let id = self.lower_io.emit(op, background, req);
        if let Some((a, b)) = slots {
            self.ahead.write_issued(id, a, b);
        }
        id
    }

    /// Sends a write (or a background read) through the overlap gate.
    fn emit_gated(&mut self, op: LowerOp, req: Request) {
        let range = (req.offset_bytes / SECTOR_BYTES, req.end_bytes() / SECTOR_BYTES);
        if let Some((op, req)) = self.gate.submit(range, (op, req)) {
            let id = self.emit(op, req);
            self.gate.issued(id, range);
        }
    }

    fn serving(&self) -> bool {
        matches!(self.phase, Phase::Serving)
    }

    /// Blocks `[first, end)` touched by bytes `[offset, offset + length)`.
    fn blocks_of(&self, offset: u64, length: u64) -> Range {
        let b = self.geo.block_bytes;
        (offset / b, (offset + length).div_ceil(b))
    }

    /// Where the bytes of an upper request live, piece by piece:
    /// `(lower offset, offset within the request, length, slot if in OPT)`.
    /// A read (`reader`: its stream) of a block with extra copies takes the
    /// copy nearest to where the stream's last read from OPT ended; writes
    /// go to the primary.
    fn pieces(&mut self, offset: u64, length: u64, reader: Option<u32>) -> Vec<(u64, u32, u64, Option<u32>)> {
        let b = self.geo.block_bytes;
        let (first, end) = self.blocks_of(offset, length);
        self.counters.indirection_lookups_count += 1;
        let mut out = std::mem::take(&mut self.pieces_buf);
        out.clear();
        let geo = self.geo;
        // The stream's last read from the region: for the choice among
        // extra copies, and for read-ahead's "goes on" test and read-behind.
        let choose = reader.filter(|_| !self.extras.is_empty() || self.args.holds_reads());
        let mut last = choose.and_then(|r| self.read_last.get(&r).copied());
        let (extras, mut from_extra, follow) = (&self.extras, 0, self.args.read_follow);
        let slots = &self.slots;
        let home_of = |s: u64| slots.get(s as usize).and_then(|x| x.home);
        for_each_piece(&self.map, first, end - first, |start, n, slot| {
            match slot {
                Some(s) => {
                    let mut pos = start;
                    while pos < start + n {
                        let (slot, k) = match (choose, last) {
                            (Some(_), Some(l)) => nearest_copy(
                                home_of,
                                extras,
                                pos,
                                start + n - pos,
                                s + (pos - start),
                                l,
                                follow,
                            ),
                            _ => (s + (pos - start), start + n - pos),
                        };
                        from_extra += u64::from(slot != s + (pos - start));
                        let a = (pos * b).max(offset);
                        let z = ((pos + k) * b).min(offset + length);
                        let lower = geo.slot_offset_bytes(slot as u32) + (a - pos * b);
                        // Copies that continue each other in the region: one piece.
                        match out.last_mut() {
                            Some((l, _, n, Some(_))) if *l + *n == lower => *n += z - a,
                            _ => out.push((lower, (a - offset) as u32, z - a, Some(slot as u32))),
                        }
                        last = Some(slot + k);
                        pos += k;
                    }
                }
                None => {
                    // With `read_follow` the stream's place in its
                    // sequence survives a read from home.
                    if !follow {
                        last = None;
                    }
                    home_pieces(
                        &geo,
                        (start * b).max(offset),
                        ((start + n) * b).min(offset + length),
                        offset,
                        &mut out,
                    );
                }
            }
        });
        // A read partly in OPT, partly home: all of it from home (one seek,
        // not two) when its OPT blocks are clean (home holds their bytes).
        let split = out.iter().any(|p| p.3.is_some()) && out.iter().any(|p| p.3.is_none());
        if split && reader.is_some() && self.args.partial_reads_home {
            let slots = &self.slots;
            let mut clean = true;
            for_each_piece(&self.map, first, end - first, |_, n, slot| {
                clean &= slot.is_none_or(|s| (s..s + n).all(|s| !slots[s as usize].dirty));
            });
            if clean {
                out.clear();
                home_pieces(&geo, offset, offset + length, offset, &mut out);
                if !self.args.read_follow {
                    last = None;
                }
                self.counters.partial_reads_home_count += 1;
            }
        }
        self.counters.indirection_pieces_count += out.len() as u64;
        self.counters.read_extra_count += from_extra;
        if let Some(r) = choose {
            if self.read_last.len() >= READ_LAST_MAX {
                self.read_last.clear();
            }
            match last {
                Some(l) => self.read_last.insert(r, l),
                None => self.read_last.remove(&r),
            };
        }
        assert_eq!(out.iter().map(|p| p.2).sum::<u64>(), length, "pieces cover the request");
        out
    }

    /// Checks the slot table against the free slots and the maps (tests,
    /// `verify`; O(slots)).
    fn verify(&self) -> Result<String, String> {
        if !self.free.matches(&self.slots) {
            return Err(format!(
                "opt: the free slots {:?} are not the unmapped ones {:?}",
                self.free.extents(),
                free::FreeSlots::unmapped(&self.slots).extents()
            ));
        }
        for (k, layer) in std::iter::once(&self.map).chain(&self.extras).enumerate() {
            for e in layer.iter() {
                for i in 0..e.length {
                    let slot = &self.slots[(e.value + i) as usize];
                    if slot.home != Some(e.start + i) || slot.extra != (k > 0) {
                        return Err(format!(
                            "opt: slot {} does not hold home block {}",
                            e.value + i,
                            e.start + i
                        ));
                    }
                }
            }
        }
        let mapped: u64 = std::iter::once(&self.map).chain(&self.extras).map(|l| l.mapped_blocks()).sum();
        if mapped + self.free.free_count() != u64::from(self.geo.slot_count) {
            return Err(format!(
                "opt: {mapped} mapped and {} free slots of {}",
                self.free.free_count(),
                self.geo.slot_count
            ));
        }
        Ok(format!("slots consistent: {mapped} mapped, {} free", self.free.free_count()))
    }

    /// Every copy of home block `h`: the primary first, then the extras.
    fn copies_of(&self, h: u64) -> impl Iterator<Item = u64> + '_ {
        self.map.get(h).into_iter().chain(self.extras.iter().filter_map(move |l| l.get(h)))
    }

    /// Drops the extra copies of home block `h` (its primary turned dirty,
    /// or goes): their slots are free.
    fn drop_extras(&mut self, h: u64) {
        for layer in &mut self.extras {
            for e in layer.remove(h, 1) {
                let s = &mut self.slots[e.value as usize];
                assert!(s.extra && s.home == Some(h), "an extra copy's slot names it");
                *s = Slot::default();
                self.free.add(e.value as u32, 1);
                self.counters.extras_dropped_count += 1;
                if let Some(j) = self.job.as_mut() {
                    j.slot_freed(e.value as u32);
                }
            }
        }
        self.extras.retain(|l| l.mapped_blocks() > 0);
    }

    fn request(&mut self, now: Instant, req: Request) {
        assert_eq!(
            self.idle.work_waiting(),
            self.job.is_some(),
            "the starvation clock runs while a job exists"
        );
        self.idle.request();
        self.now_ns = now.as_ns();
        self.idle.arm(now, self.args.idle_ms.saturating_mul(1_000_000));
        if req.op != Op::Flush && self.phase_is_live() {
            let (first, end) = self.blocks_of(req.offset_bytes, u64::from(req.length_bytes));
            self.profile.record(ProfileEntry {
                time_ns: now.as_ns(),
                block: first,
                blocks: (end - first) as u32,
                stream: self.args.graph_stream.key(req.stream),
                read: req.op == Op::Read,
            });
            self.requests_since_plan += 1;
        }
        match req.op {
            Op::Flush => {
                self.counters.flushes_count += 1;
                let id = req.id;
                if self.args.absorb_writes {
                    return self.absorb_flush(Some(id));
                }
                self.emit(LowerOp::UpperFlush { id }, Request::new(ReqId(0), Op::Flush, 0, 0));
            }
            Op::Read => self.read(req),
            Op::Write | Op::Trim | Op::WriteZeroes => {
                if let Err(req) = self.modify(req) {
                    self.counters.writes_held_count += 1;
                    self.held.push_back(req);
                    self.kick_meta();
                }
            }
        }
    }

    /// `profile TIME_NS STREAM OFFSET_BYTES LENGTH_BYTES`: a read seen
    /// elsewhere (a captured trace), profiled as if it had come here.
    fn profile_message(&mut self, rest: &str) -> Result<String, String> {
        let f: Vec<u64> = rest
            .split_ascii_whitespace()
            .map(|x| x.parse::<u64>().map_err(|_| format!("opt: profile: {x:?} is not a number")))
            .collect::<Result<_, _>>()?;
        let [time_ns, stream, offset, length] = f[..] else {
            return Err("opt: profile takes TIME_NS STREAM OFFSET_BYTES LENGTH_BYTES".into());
        };
        if length == 0 || offset.checked_add(length).is_none_or(|e| e > self.geo.volume_bytes) {
            return Err(format!("opt: profile: {offset}+{length} is not inside the volume"));
        }
        let (first, end) = self.blocks_of(offset, length);
        let stream = u32::try_from(stream).map_err(|_| "opt: profile: stream past 2^32".to_string())?;
        let blocks = u32::try_from(end - first).map_err(|_| "opt: profile: too long".to_string())?;
        self.profile.record(ProfileEntry { time_ns, block: first, blocks, stream, read: true });
        self.requests_since_plan += 1;
        Ok(String::new())
    }

    fn phase_is_live(&self) -> bool {
        self.serving()
    }

    /// Splits an upper request into pieces, starts its assembly and counts
    /// its bytes by where they go; returns the assembly key and the pieces.
    fn begin(&mut self, req: &Request) -> (u64, Vec<(u64, u32, u64, Option<u32>)>) {
        let reader = (req.op == Op::Read).then_some(self.args.graph_stream.key(req.stream));
        let pieces = self.pieces(req.offset_bytes, u64::from(req.length_bytes), reader);
        let key = self.next_key;
        self.next_key += 1;
        self.assemblies.insert(key, Assembly::new(req.id, req.op, req.length_bytes, pieces.len() as u32));
        if let Some(&(_, within, _, _)) = pieces.iter().find(|p| reader.is_some() && p.3.is_none()) {
            self.home_reads.add(req.offset_bytes + u64::from(within));
        }
        let c = &mut self.counters;
        for &(_, _, len, slot) in &pieces {
            match (req.op == Op::Read, slot.is_some()) {
                (true, true) => {
                    c.read_opt_count += 1;
                    c.read_opt_bytes += len;
                }
                (true, false) => c.read_home_bytes += len,
                (false, true) => {
                    c.written_opt_count += 1;
                    c.written_opt_bytes += len;
                }
                (false, false) => c.written_home_bytes += len,
            }
        }
        (key, pieces)
    }

    fn read(&mut self, req: Request) {
        if self.args.holds_reads() {
            return self.read_ahead(req);
        }
        let (key, pieces) = self.begin(&req);
        for &(lower, within, len, _) in &pieces {
            let r = Request { stream: req.stream, ..Request::new(ReqId(0), Op::Read, lower, len as u32) };
            self.emit(LowerOp::Piece { key, within }, r);
        }
        self.pieces_buf = pieces;
    }

    /// A read with `readahead_bytes`: a piece in the region whose slots a
    /// read-ahead of the stream holds is answered from memory; the last
    /// piece, if in the region and ending on a slot's end, reads on along
    /// the sequence: the following slots as long as they are mapped (a
    /// free slot ends the planned sequence), up to `readahead_bytes`, when
    /// the read goes on from where the stream's previous read from the
    /// region ended (`readahead_when`: also only when the lower request
    /// before it ended elsewhere, or for every read). With
    /// `readbehind_bytes`, the first piece, if in the region and starting
    /// on a slot's start at most that far past where the stream's previous
    /// read from the region ended, reads the mapped slots between too, when
    /// the disk's last request ended there (the head passes over them).
    fn read_ahead(&mut self, req: Request) {
        let stream = self.args.graph_stream.key(req.stream);
        let last = self.read_last.get(&stream).copied();
        let (key, pieces) = self.begin(&req);
        let b = self.geo.block_bytes;
        let ra_max = self.args.readahead_bytes / b;
        let base = self.geo.slot_offset_bytes(0);
        use config::ReadAheadWhen;
        let following = match (pieces.iter().find_map(|p| p.3), last) {
            _ if self.args.readahead_when == ReadAheadWhen::Always => true,
            (Some(s), Some(l)) => {
                (l..=l + ra_max).contains(&u64::from(s))
                    && (self.args.readahead_when == ReadAheadWhen::Following
                        || pieces[0].0 != self.last_lower_end)
            }
            _ => false,
        };
        let n = pieces.len();
        // Whether the disk read any of the request's pieces in the region.
        let mut region_read = false;
        for (i, &(lower, within, len, slot)) in pieces.iter().enumerate() {
            let r = Request { stream: req.stream, ..Request::new(ReqId(0), Op::Read, lower, len as u32) };
            if slot.is_none() {
                self.emit(LowerOp::Piece { key, within }, r);
                continue;
            }
            let (first, end) = ((lower - base) / b, (lower - base + len).div_ceil(b));
            if let Some(data) = self.ahead.get([stream], first, end - first) {
                self.counters.readahead_hits_count += 1;
                let at = (lower - base - first * b) as usize;
                let data = data.map(|d| d.slice(at..at + len as usize));
                let now_ns = self.now_ns;
                self.piece_done(now_ns, key, within, data, Ok(()));
                continue;
            }
            region_read = true;
            let mapped = |slots: &[Slot], k: u64| slots.get(k as usize).is_some_and(|s| s.home.is_some());
            // Slots one lower request has left beside the piece's own (none
            // for a piece of the longest request on no slot's start or end).
            let room = (u64::from(layoutd_core::REQUEST_BYTES_MAX) / b).saturating_sub(end - first);
            let mut behind = 0;
            if let (0, Some(l)) = (i, last) {
                let gap = first.saturating_sub(l);
                if (lower - base).is_multiple_of(b)
                    && gap * b <= self.args.readbehind_bytes
                    && self.last_lower_end == base + l * b
                    && gap <= room
                    && (l..first).all(|k| mapped(&self.slots, k))
                {
                    behind = gap;
                }
            }
            let mut extra = 0;
            if i + 1 == n && following && (lower - base + len).is_multiple_of(b) {
                let cap = ra_max.min(room - behind);
                while extra < cap && mapped(&self.slots, end + extra) {
                    extra += 1;
                }
            }
            if extra == 0 && behind == 0 {
                self.emit(LowerOp::Piece { key, within }, r);
                continue;
            }
            if extra > 0 {
                self.counters.readahead_reads_count += 1;
                self.counters.readahead_read_blocks += extra;
            }
            if behind > 0 {
                self.counters.readbehind_reads_count += 1;
                self.counters.readbehind_read_blocks += behind;
            }
            let (at, own) = ((behind * b) as u32, r.clone());
            let r = Request {
                offset_bytes: lower - behind * b,
                length_bytes: ((behind + extra) * b + len) as u32,
                ..r
            };
            let id = self.emit(LowerOp::PieceAhead { key, within, at, own }, r);
            self.ahead.read_issued(id, stream, first - behind, (first, end), end + extra);
        }
        // Served from memory alone while reading behind: the head did not
        // move, so the stream's place for the next read's read-behind (and
        // "goes on") stays where its last read from the disk left it.
        // Read-ahead alone keeps session 24's rule (the place moves on).
        if self.args.readbehind_bytes > 0 && !region_read && pieces.iter().any(|p| p.3.is_some()) {
            match last {
                Some(l) => self.read_last.insert(stream, l),
                None => self.read_last.remove(&stream),
            };
        }
        self.pieces_buf = pieces;
    }

    /// Piece `within` of upper request `key` is done; completes the request
    /// when it was the last.
    fn piece_done(
        &mut self,
        now_ns: u64,
        key: u64,
        within: u32,
        data: Option<bytes::Bytes>,
        result: Result<(), IoError>,
    ) {
        let a = self.assemblies.get_mut(&key).expect("assembly of a live piece");
        if a.piece_done(within, data, result) {
            let done = self.assemblies.remove(&key).expect("present").finish();
            self.absorb_done(key, now_ns, done.result.is_ok());
            self.lower_io.upper_q.push_back(done);
        }
    }

    /// Whether `[first, end)` touches a home range a map write in flight changes.
    fn touches_changing(&self, (first, end): Range) -> bool {
        self.changing.iter().any(|&(a, b)| a < end && first < b)
    }

    /// A write, trim or write-zeroes; `Err` gives it back to hold (its
    /// slots need a durable dirty bit first, or a map write changes them).
    fn modify(&mut self, req: Request) -> Result<(), Request> {
        let blocks = self.blocks_of(req.offset_bytes, u64::from(req.length_bytes));
        if self.touches_changing(blocks) {
            return Err(req);
        }
        let mut touched = Vec::new();
        for_each_piece(&self.map, blocks.0, blocks.1 - blocks.0, |_, n, slot| {
            if let Some(s) = slot {
                touched.extend((s..s + n).map(|s| s as u32));
            }
        });
        if req.fua && self.absorb_holds_fua(&touched) {
            return Err(req);
        }
        let mut clean = touched.iter().copied().filter(|&s| !self.slots[s as usize].dirty).peekable();
        if clean.peek().is_some() {
            let clean: Vec<u32> = clean.collect();
            for s in clean {
                let slot = &mut self.slots[s as usize];
                if !slot.journal_pending {
                    slot.journal_pending = true;
                    self.journal_queue.push(s);
                }
            }
            return Err(req);
        }
        for s in touched {
            let slot = &mut self.slots[s as usize];
            assert!(
                slot.dirty && slot.home.is_some(),
                "a slot is written only once its dirty bit is durable"
            );
            slot.version = slot.version.wrapping_add(1);
        }
        // The write goes down now: its unmapped blocks may go to the region.
        self.absorb_try(&req, blocks);
        self.mark_copies_stale(blocks);
        let (key, pieces) = self.begin(&req);
        self.absorb_started(key);
        let mut req = req;
        for &(lower, within, len, _) in &pieces {
            let data = req.take_data_piece(within as usize, len as usize);
            let r = Request {
                fua: req.fua,
                stream: req.stream,
                data,
                ..Request::new(ReqId(0), req.op, lower, len as u32)
            };
            self.emit_gated(LowerOp::Piece { key, within }, r);
        }
        self.pieces_buf = pieces;
        Ok(())
    }

    /// Retries held writes in order (after a journal or map write).
    fn release_held(&mut self) {
        let n = self.held.len();
        for _ in 0..n {
            let req = self.held.pop_front().expect("counted");
            if let Err(req) = self.modify(req) {
                self.held.push_back(req);
            }
        }
        self.kick_meta();
    }

    /// Starts the next metadata write if none is in flight: a queued job
    /// map write first, else a journal block (a map checkpoint first when
    /// the journal is full).
    fn kick_meta(&mut self) {
        if self.meta_busy || !self.serving() {
            return;
        }
        if self.job_wants_map_write() {
            return self.job_map_write();
        }
        if self.journal_queue.is_empty() && self.absorber.journal.is_empty() {
            return;
        }
        if self.journal_next == self.geo.journal_blocks {
            let image = self.image(&[], &[], &[]);
            return self.write_map(image);
        }
        let n = self
            .journal_queue
            .len()
            .min(meta::JOURNAL_RECORDS_MAX - 2 * usize::from(!self.absorber.journal.is_empty()));
        let slots: Vec<u32> = self.journal_queue.drain(..n).collect();
        let maps = self.absorb_journal_runs(slots.len());
        let block = meta::JournalBlock {
            map_generation: self.map_generation,
            slots: slots.clone(),
            maps: maps.clone(),
        };
        let offset = self.geo.journal_offset_bytes(self.journal_next);
        let seq = self.map_generation * u64::from(self.geo.journal_blocks) + u64::from(self.journal_next);
        let bytes = block.encode(seq.min(layoutd_core::metablock::GENERATION_MAX));
        self.journal_next += 1;
        self.meta_busy = true;
        self.counters.journal_writes_count += 1;
        let req = Request { fua: true, ..Request::write(ReqId(0), offset, bytes.into()) };
        self.emit(LowerOp::JournalWrite { slots, maps }, req);
    }

    /// The map as it stands, minus the slots in `drop`, plus `add` runs
    /// `(home, count, slot)` and `add_extras` (extra copies).
    fn image(&self, drop: &[u32], add: &[(u64, u32, u32)], add_extras: &[(u64, u32, u32)]) -> meta::MapImage {
        let mut image = meta::MapImage::default();
        for (k, layer) in std::iter::once(&self.map).chain(&self.extras).enumerate() {
            let runs = if k == 0 { &mut image.runs } else { &mut image.extras };
            for e in layer.iter() {
                for i in 0..e.length {
                    let (home, slot) = (e.start + i, (e.value + i) as u32);
                    // A mapping not journaled yet stays off disk (its data
                    // may not be durable).
                    if drop.binary_search(&slot).is_ok() || self.absorb_pending(u64::from(slot)) {
                        continue;
                    }
                    match runs.last_mut() {
                        Some((h, c, s)) if *h + u64::from(*c) == home && *s + *c == slot => *c += 1,
                        _ => runs.push((home, 1, slot)),
                    }
                    if self.slots[slot as usize].dirty {
                        image.dirty.push(slot);
                    }
                }
            }
        }
        image.runs.extend_from_slice(add);
        image.extras.extend_from_slice(add_extras);
        image
    }

    /// Writes `image` as the next map generation (FUA, the other copy).
    fn write_map(&mut self, image: meta::MapImage) {
        assert!(!self.meta_busy, "one metadata write at a time");
        self.meta_busy = true;
        let generation = self.map_generation + 1;
        self.emit_map(LowerOp::MapWrite { generation }, generation, &image);
    }

    /// Emits the map write of `generation` as `op`.
    fn emit_map(&mut self, op: LowerOp, generation: u64, image: &meta::MapImage) {
        let bytes = meta::encode_map(&self.geo, generation, image);
        let offset = self.geo.map_offset_bytes(layoutd_core::metablock::MetaBlockCodec::copy_of(generation));
        self.counters.map_writes_count += 1;
        let req = Request { fua: true, ..Request::write(ReqId(0), offset, bytes.into()) };
        self.emit(op, req);
    }

    fn meta_done(&mut self, op: LowerOp, result: Result<(), IoError>) {
        assert!(self.meta_busy);
        self.meta_busy = false;
        if let Err(e) = result {
            // The metadata write may not be on disk: nothing that relied on
            // it happens; the held writes fail rather than wait forever.
            self.phase =
                Phase::Failed(format!("opt metadata write failed: {e}; the OPT region is left as on disk"));
            while let Some(r) = self.held.pop_front() {
                self.lower_io.upper_q.push_back(Completion::err(r.id, IoError::Io));
            }
            return;
        }
        match op {
            LowerOp::JournalWrite { slots, maps } => {
                self.absorb_journaled(&maps);
                for s in slots {
                    let slot = &mut self.slots[s as usize];
                    slot.journal_pending = false;
                    if let (Some(h), false) = (slot.home, slot.dirty) {
                        slot.dirty = true;
                        self.counters.dirty_copies_count += 1;
                        self.drop_extras(h);
                    }
                }
            }
            LowerOp::MapWrite { generation } => {
                self.map_generation = generation;
                self.journal_next = 0;
                self.job_map_written();
            }
            _ => unreachable!("not a metadata write"),
        }
        self.release_held();
    }

    fn completion(&mut self, now: Instant, op: LowerOp, c: Completion) {
        match op {
            LowerOp::Bringup { part } => self.bringup_done(c, part),
            LowerOp::Piece { key, within } => self.piece_done(now.as_ns(), key, within, c.data, c.result),
            LowerOp::PieceAhead { key, within, at, own } => {
                let (at, end) = (at as usize, (at + own.length_bytes) as usize);
                self.ahead.read_done(c.id.0, c.result.is_ok(), c.data.as_ref(), end);
                if c.result.is_err() {
                    // The slots read behind or ahead may be the bad ones:
                    // the piece's own bytes are read again alone.
                    self.counters.readahead_failed_count += 1;
                    self.emit(LowerOp::Piece { key, within }, own);
                    return;
                }
                let data = c.data.map(|d| d.slice(at.min(d.len())..end.min(d.len())));
                self.piece_done(now.as_ns(), key, within, data, c.result)
            }
            LowerOp::UpperFlush { id } => {
                self.lower_io.upper_q.push_back(Completion { id, result: c.result, data: None })
            }
            LowerOp::AbsorbFlush { runs } => self.absorb_flush_done(runs, c.result),
            op @ (LowerOp::MapWrite { .. } | LowerOp::JournalWrite { .. }) => self.meta_done(op, c.result),
            op => self.job_completion(now, op, c),
        }
    }
}

impl Target for Opt {
    fn name(&self) -> &'static str {
        "opt"
    }

    fn size_bytes(&self) -> u64 {
        self.geo.volume_bytes
    }

    fn handle_request(&mut self, now: Instant, req: Request) {
        assert!(req.validate(self.size_bytes()).is_ok(), "stack validated it");
        match &self.phase {
            Phase::Serving => self.request(now, req),
            _ => self.lower_io.upper_q.push_back(Completion::err(req.id, IoError::Io)),
        }
    }

    fn handle_completion(&mut self, now: Instant, c: Completion) {
        let op = self.lower_io.take(c.id);
        self.ahead.write_done(c.id.0);
        if self.gate.completed(c.id.0) {
            self.completion(now, op, c);
            while let Some((range, (op, req))) = self.gate.pop_ready() {
                let id = self.emit(op, req);
                self.gate.issued(id, range);
            }
        } else {
            self.completion(now, op, c);
        }
    }

    fn poll_lower(&mut self) -> Option<Request> {
        self.lower_io.lower_q.pop_front()
    }

    fn poll_timeout(&self) -> Option<Instant> {
        self.idle.poll_timeout()
    }

    /// The idle threshold passed: background work may start.
    fn handle_timeout(&mut self, now: Instant) {
        self.idle.timeout(now, false);
    }

    fn poll_upper(&mut self) -> Option<Completion> {
        self.lower_io.upper_q.pop_front()
    }

    fn is_ready(&self) -> bool {
        self.serving()
    }

    fn message(&mut self, now: Instant, msg: &str) -> Result<String, String> {
        if !self.serving() {
            return Err("opt: not serving (bring-up failed or in progress)".into());
        }
        if let Some(rest) = msg.strip_prefix("profile ") {
            return self.profile_message(rest);
        }
        match msg {
            "plan" => Ok(self.plan_now(now)),
            "apply" => self.apply(now),
            "drop" => {
                self.start_job(now, Vec::new(), false).map(|s| format!("dropping the OPT region's contents: {s}"))
            }
            "status" => Ok(format!("{}\n{}", self.describe(), self.status())),
            "verify" => self.verify(),
            other => Err(format!(
                "opt: unknown message `{other}` (known: plan, apply, drop, status, verify, profile TIME_NS STREAM OFFSET LENGTH)"
            )),
        }
    }

    fn background_offer(&self, now: Instant) -> Option<layoutd_core::background::Offer> {
        use layoutd_core::background::{JobClass, Offer};
        let work = self.serving()
            && self.idle.is_idle(now)
            && (self.job_wants_step()
                || self.plan_due(now)
                || (!self.profile.is_empty() && self.job.is_none()));
        work.then_some(Offer { class: JobClass::Reorganisation })
    }

    fn background_step(&mut self, now: Instant) -> Option<u64> {
        if self.job_wants_step() {
            self.idle.progressed(now);
            return self.job_step();
        }
        if self.plan_due(now) {
            self.plan_now(now);
            return Some(0);
        }
        if !self.profile.is_empty() {
            self.analyze_slice(self.args.analysis_units_per_step as usize);
            return Some(0);
        }
        None
    }

    fn is_drained(&self) -> bool {
        self.job.is_none() && self.held.is_empty() && !self.meta_busy
    }

    /// Home pieces map to their home; OPT pieces are reported where their
    /// copy lives (it holds the volume's bytes).
    fn map_extent(&self, offset_bytes: u64, length_bytes: u64) -> Vec<(Option<u64>, u64)> {
        let end = offset_bytes.checked_add(length_bytes);
        if !self.serving() || end.is_none_or(|e| e > self.geo.volume_bytes) || self.job.is_some() {
            return vec![(None, length_bytes)];
        }
        let b = self.geo.block_bytes;
        let (first, last) = self.blocks_of(offset_bytes, length_bytes);
        let mut out = Vec::new();
        for (start, n, slot) in self.map.range(first, last - first) {
            let a = (start * b).max(offset_bytes);
            let z = ((start + n) * b).min(offset_bytes + length_bytes);
            match slot {
                Some(s) => out.push((Some(self.geo.slot_offset_bytes(s as u32) + a - start * b), z - a)),
                None if a < self.geo.opt_offset_bytes && self.geo.opt_offset_bytes < z => {
                    let cut = self.geo.opt_offset_bytes;
                    out.push((Some(a), cut - a));
                    out.push((Some(self.geo.home_bytes(cut)), z - cut));
                }
                None => out.push((Some(self.geo.home_bytes(a)), z - a)),
            }
        }
        out
    }

    fn status(&self) -> Status {
        let c = &self.counters;
        let mut config = self.args.echo();
        config.push(("slot_count".into(), self.geo.slot_count.to_string()));
        if let Phase::Failed(e) = &self.phase {
            config.push(("error".into(), e.clone()));
        }
        if let Some(l) = &self.loss {
            config.push(("accepted_loss".into(), l.clone()));
        }
        let requests = (c.indirection_lookups_count).max(1);
        let counters = [
            ("read_opt_count", c.read_opt_count),
            ("read_opt_bytes", c.read_opt_bytes),
            ("written_opt_count", c.written_opt_count),
            ("written_opt_bytes", c.written_opt_bytes),
            ("read_home_bytes", c.read_home_bytes),
            ("written_home_bytes", c.written_home_bytes),
            ("flushes_count", c.flushes_count),
            ("copies_count", c.copies_count),
            ("copy_writes_count", c.copy_writes_count),
            ("copied_bytes", c.copied_bytes),
            ("copies_stale_count", c.copies_stale_count),
            ("dirty_copies_count", c.dirty_copies_count),
            ("copied_home_bytes", c.copied_home_bytes),
            ("dropped_blocks_count", c.dropped_blocks_count),
            ("reconfigurations_count", c.reconfigurations_count),
            ("plans_count", c.plans_count),
            ("plans_unchanged_count", c.plans_unchanged_count),
            ("moved_blocks_count", c.moved_blocks_count),
            ("graph_vertices_count", self.analyzer.vertex_count() as u64),
            ("graph_edges_count", self.analyzer.edge_count() as u64),
            ("profile_entries_count", self.profile.len() as u64),
            ("profile_recorded_count", self.profile.recorded_count),
            ("profile_dropped_count", self.profile.dropped_count),
            ("analysis_units", c.analysis_units),
            ("planning_units", c.planning_units),
            ("indirection_lookups_count", c.indirection_lookups_count),
            ("indirection_pieces_count", c.indirection_pieces_count),
            ("indirection_pieces_per_request_milli", c.indirection_pieces_count * 1000 / requests),
            ("map_writes_count", c.map_writes_count),
            ("journal_writes_count", c.journal_writes_count),
            ("writes_held_count", c.writes_held_count),
            ("held_count", self.held.len() as u64),
            ("mapped_blocks_count", self.map.mapped_blocks()),
            ("map_runs_count", self.map.extent_count() as u64),
            ("dirty_slots_count", self.slots.iter().filter(|s| s.dirty).count() as u64),
            ("map_generation", self.map_generation),
            ("journal_blocks_used_count", u64::from(self.journal_next)),
            ("recovered_dirty_slots_count", c.recovered_dirty_slots_count),
            ("journal_blocks_unreadable_count", c.journal_blocks_unreadable_count),
            ("extra_copies_count", self.extras.iter().map(|l| l.mapped_blocks()).sum()),
            ("read_extra_count", c.read_extra_count),
            ("extras_dropped_count", c.extras_dropped_count),
            ("partial_reads_home_count", c.partial_reads_home_count),
            ("absorbed_writes_count", self.absorber.writes_count),
            ("absorbed_blocks_count", self.absorber.blocks_count),
            ("absorb_gap_blocks", absorb::GAPS[self.absorber.best()]),
            ("absorb_skipped_bulk_count", self.absorber.skipped_bulk_count),
            ("absorb_skipped_sequential_count", self.absorber.skipped_sequential_count),
            ("absorb_skipped_reserve_count", self.absorber.skipped_reserve_count),
            ("absorbed_during_job_count", self.absorber.during_job_count),
            ("recovered_absorbed_blocks_count", c.recovered_absorbed_blocks_count),
            ("readahead_reads_count", c.readahead_reads_count),
            ("readahead_read_blocks", c.readahead_read_blocks),
            ("readahead_hits_count", c.readahead_hits_count),
            ("readbehind_reads_count", c.readbehind_reads_count),
            ("readbehind_read_blocks", c.readbehind_read_blocks),
            ("readahead_failed_count", c.readahead_failed_count),
            ("readahead_dropped_count", self.ahead.dropped_count),
            ("readahead_evicted_count", self.ahead.evicted_count),
            ("readahead_held_blocks", self.ahead.held_blocks()),
            ("job_active", u64::from(self.job.is_some())),
            ("home_reads_count", self.home_reads.count()),
            (
                "opt_offset_best",
                self.home_reads
                    .best_offset(self.geo.volume_bytes, self.geo.block_bytes)
                    .unwrap_or(self.geo.opt_offset_bytes),
            ),
        ];
        Status {
            target: "opt".into(),
            config,
            counters: counters.into_iter().map(|(k, v)| (k.to_string(), v)).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_read_follows_the_copy_laid_out_after_the_block_it_read_last() {
        // Slots 3-4: blocks 150, 200 (the primary of 200, in a sequence
        // without 100); slot 10: 100; slots 48-50: 90, 100, 200 (an extra
        // copy of 200 laid out after a copy of 100). The stream read block
        // 100 at slot 10 (so `last` = 11) and now reads 200.
        let mut homes = vec![None; 64];
        for (s, h) in [(3, 150), (4, 200), (10, 100), (48, 90), (49, 100), (50, 200)] {
            homes[s] = Some(h);
        }
        let home_of = |s: u64| homes.get(s as usize).copied().flatten();
        let mut layer = BlockMap::new();
        layer.insert(200, 1, 50);
        let extras = vec![layer];
        // The nearest copy: the primary.
        assert_eq!(nearest_copy(home_of, &extras, 200, 1, 4, 11, false), (4, 1));
        // Following: the copy after the block read last, far as it is.
        assert_eq!(nearest_copy(home_of, &extras, 200, 1, 4, 11, true), (50, 1));
        // The stream's last read ended after an empty slot (nothing to
        // follow): the nearest again.
        assert_eq!(nearest_copy(home_of, &extras, 200, 1, 4, 14, true), (4, 1));
        // Reading on at `last` needs no choice.
        assert_eq!(nearest_copy(home_of, &extras, 150, 1, 3, 3, true), (3, 1));
    }
}
