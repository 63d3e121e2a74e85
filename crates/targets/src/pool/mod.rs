//! `pool`: an origin volume and copy-on-write snapshots of it (or of each
//! other) in one thin pool on one lower device, allocated in chunks, with
//! the copies placed next to their origin chunk (see `docs/pool.md`).
//!
//! Glossary: a *volume* is the origin (slot 0) or a snapshot (slots
//! `1..volumes_max`); an *lc* is a logical chunk within a volume; a *data
//! chunk* (`p`, `q`) is a chunk of the data area; a volume's *map* sends
//! its lcs to data chunks (extents, [`BlockMap`]); a data chunk mapped by
//! several volumes (always at the same lc) is *shared*.
//!
//! Addressing: the pool exposes `volumes_max` volumes laid end to end,
//! volume `s` at byte `s * volume_size`; the NBD layer maps export names
//! onto those ranges (`snapshot list` gives them). Nothing in the core or
//! the other targets knows about volumes.
//!
//! Writes: in place when the chunk is the writer's alone; the first write
//! of the origin to a shared chunk copies it once to a chunk the placement
//! chooses near it and moves every other sharer there (one copy for all),
//! makes that durable, then writes in place; a snapshot writing a shared
//! chunk gets its own chunk (read-modify-write, or no read for a whole
//! chunk). Unmapped chunks read as zeroes and are allocated on the first
//! write (thin); no free chunk gives ENOSPC on that write only.
//!
//! Durability: map changes become journal records once their data is
//! written; a commit flushes the device, then writes the records (FUA).
//! A flush commits; the origin's write over a copied chunk waits for the
//! commit of its copy; a chunk whose sharers changed is not written in
//! place, nor a freed chunk reused, before that change is durable. Snapshot
//! create/delete/merge write a checkpoint (the volume table and every map).

mod chunks;
mod config;
mod meta;
mod partial;
pub mod place;

pub use config::{PlacementKind, PoolConfig};
pub use meta::VolumeEntry;

use crate::alloc::{FreeSpace, Nearest, Placement};
use crate::blockmap::{BlockMap, Extent};
use crate::split::Assembly;
use bytes::{Bytes, BytesMut};
use chunks::ChunkTable;
use config::{ZeroWith, META_BLOCK_BYTES};
use layoutd_core::config::{ArgReader, ConfigError};
use layoutd_core::idle::{IdleOptions, IdleTimer};
use layoutd_core::metablock::{JournalRecord, MetaError};
use layoutd_core::{
    Completion, Instant, IoError, Op, OpenMode, ReqId, Request, Status, Target, REQUEST_BYTES_MAX,
};
use meta::{Header, Record, Run, UNMAPPED};
use partial::{Partial, Sectors, NO_BASE, SECTORS_MAX};
use place::ChunkPlacement;
use rustc_hash::{FxHashMap, FxHashSet};
use std::collections::{BTreeMap, VecDeque};

/// A request's piece in one chunk: `(slot, lc, offset in chunk, length)`.
type Piece = (u32, u64, u64, u64);

/// The bytes `[start, start + length)` from bring-up reads keyed by their
/// offset; zeroes where a read brought no data (timing-only mode).
fn gather(reads: &FxHashMap<u64, Bytes>, start: u64, length: u64) -> Vec<u8> {
    let mut out = vec![0u8; length as usize];
    for (&at, d) in reads {
        if at >= start && at < start + length {
            let o = (at - start) as usize;
            let n = d.len().min(out.len() - o);
            out[o..o + n].copy_from_slice(&d[..n]);
        }
    }
    out
}

/// The longest gap, in chunks, a whole-chunk read reads through to the
/// volume's next chunk ([`Pool::read_through`]).
const READ_THROUGH_CHUNKS_MAX: u64 = 2;

/// The most chunks a line-up shifts by one to put a copy next to its
/// origin chunk ([`Pool::line_up`]): each is one move made durable.
const LINE_UP_SHIFT_MAX: u64 = 64;

/// From this many moves on, a line-up goes in two stages of one commit
/// each rather than one move (and one commit) after the other
/// ([`Pool::line_up_stages`]).
const LINE_UP_STAGED_MIN: u64 = 3;

/// How long no upper request must have arrived before a line-up starts:
/// its moves (2 to 5, each made durable) would otherwise sit in front of
/// a closed-loop writer's next request.
const LINE_UP_QUIET_NS: u64 = 1_000_000_000;

/// Bytes of partial chunks one run fill takes (its buffer holds them and
/// their bases: twice this).
const FILL_RUN_BYTES_MAX: u64 = 4 << 20;

/// Bytes of a sector, the unit of a partial chunk's written map.
const SECTOR: u64 = 512;

/// Zeroes for unmapped reads (a chunk is at most 1 MiB).
static ZEROES: [u8; 1 << 20] = [0; 1 << 20];

struct Volume {
    entry: VolumeEntry,
    map: BlockMap<u64>,
}

/// One step of a chunk job.
enum Step {
    /// Decide what to do from the maps (the lc is locked).
    Plan,
    /// Read the piece from the lower device for the upper request, and
    /// `through` bytes after it that nobody asked for (see
    /// [`Pool::read_through`]).
    ReadUpper { at: u64, through: u64 },
    /// Zeroes for the upper request.
    Zeroes,
    /// Read the piece from each lower offset given, taking from each the
    /// ranges `(offset in the piece, length)` listed with it: a partial
    /// chunk's written sectors from it, the rest from its base.
    ReadParts(Vec<(u64, Vec<(u64, u64)>)>),
    /// Write the buffer's sectors that partial chunk `q` has not written
    /// into `q` (a fill; the buffer holds its base).
    WriteUnwritten { q: u64 },
    /// Write the piece's data at `at`.
    WriteUpper { at: u64 },
    /// Write the piece's data into the fresh data chunk `q` and zeroes
    /// (`WriteZeroes`, which a file or device may do without writing) over
    /// the rest of it, all at once.
    WriteFresh { q: u64 },
    /// Read `n` whole data chunks from `p` on into the job's buffer, from
    /// its chunk `at` on.
    ReadBuf { p: u64, n: u64, at: u64 },
    /// Put the piece's data into the buffer (a zeroed one if none).
    Patch,
    /// Write the buffer (`n` chunks) to data chunks `q..q + n`.
    WriteBuf { q: u64, n: u64 },
    /// A run fill's composition: the buffer holds the partial chunks
    /// `q..q + n` (read as they are) followed by their `n` bases; each
    /// chunk takes its base's sectors where it has written none, and the
    /// bases go from the buffer.
    Compose { q: u64, n: u64 },
    /// Change the maps and append the records.
    Apply(Change),
    /// Wait until every record appended so far is durable.
    Commit,
}

#[derive(Clone, Copy, Debug)]
enum Change {
    /// A fresh chunk for `slot`'s `lc`.
    Map { slot: u32, lc: u64, q: u64 },
    /// `slot`'s own copy of a shared chunk.
    Private { slot: u32, lc: u64, q: u64 },
    /// Every sharer of the origin's `p` but the origin moves to the copy `q`.
    CowOut { lc: u64, p: u64, q: u64 },
    /// `slot`'s `lc` unmapped.
    Unmap { slot: u32, lc: u64 },
    /// Every sharer of `p` moves to `q` (defragmentation).
    Move { lc: u64, p: u64, q: u64 },
    /// The origin's `lc` moves off the shared `p` to `q`, where only the
    /// piece `[coff, coff + len)` is written: `q` is partial, its base `p`.
    Redirect { lc: u64, p: u64, q: u64, coff: u64, len: u64 },
    /// A fresh chunk for `slot`'s `lc` where only `[coff, coff + len)` is
    /// written: `q` is partial with no base (the rest reads as zeroes).
    Fresh { slot: u32, lc: u64, q: u64, coff: u64, len: u64 },
    /// Partial chunk `q`'s bytes `[coff, coff + len)` are written.
    Written { q: u64, coff: u64, len: u64 },
}

/// What a line-up does ([`Pool::line_up`]): `(lc, from, to)` for each
/// chunk of the run in order from the origin chunk outward, then the copy;
/// the free chunk the run shifts into (`None`: into the copy's place).
struct LineUp {
    moves: Vec<(u64, u64, u64)>,
    free_end: Option<u64>,
}

struct Job {
    upper: Option<u64>,
    within: u32,
    slot: u32,
    lc: u64,
    coff: u64,
    len: u64,
    op: Op,
    data: Option<Bytes>,
    steps: VecDeque<Step>,
    buf: Option<Vec<u8>>,
    /// Chunks taken from the free space and not yet in a map.
    taken: Vec<u64>,
    /// A background job's locked lcs.
    locks: Vec<u64>,
    /// Where in the buffer (in chunks) the buffer read in flight goes.
    read_into: Option<u64>,
    read: Option<Bytes>,
    /// The reads of a [`Step::ReadParts`] in flight: each one's lower id
    /// and the ranges of the piece it gives.
    parts: Vec<(u64, Vec<(u64, u64)>)>,
    /// Lower requests of the current step still in flight, and the first
    /// error among those that completed.
    in_flight: u32,
    failed: Option<IoError>,
}

struct Upper {
    asm: Assembly,
    lcs: Vec<u64>,
}

#[derive(Clone, Copy)]
enum Owner {
    Job(u64),
    Commit,
    /// Bring-up I/O, by lower offset.
    Bring(u64),
    /// Several queued job requests sent as one ([`Pool::join_queued`]);
    /// its pieces are in `Pool::joined`.
    Joined,
}

enum CommitStage {
    Flushing,
    Writing { left: usize },
}

struct Commit {
    no: u64,
    stage: CommitStage,
    /// The encoded blocks, `(lower offset, bytes)`, in groups: a group is
    /// written together, the next once it is done (a journal block's two
    /// copies; a checkpoint's pieces).
    writes: VecDeque<Vec<(u64, Vec<u8>)>>,
    checkpoint: Option<(u64, u64)>,
    next_seq: u64,
}

enum Phase {
    Format,
    Recover { stage: u8, headers: Vec<Result<Header, MetaError>>, journal: Vec<u8>, tried: Vec<usize> },
    Serving,
    Failed(String),
}

enum Structural {
    Create { name: String, of: u32, read_only: bool },
    Delete { slot: u32 },
    Merge { slot: u32 },
}

#[derive(Default)]
struct Counters {
    chunks_copied: u64,
    copy_read_bytes: u64,
    copy_written_bytes: u64,
    copy_distance_sum: u64,
    copies_placed: u64,
    private_chunks: u64,
    origin_redirected: u64,
    full_overwrite_read_skipped: u64,
    allocated_chunks: u64,
    defrag_moves: u64,
    /// Calls of the defragmenter's scan ([`Pool::defrag_candidate`]).
    defrag_scans: u64,
    commits: u64,
    checkpoints: u64,
    journal_blocks: u64,
    nospace: u64,
    reads: u64,
    writes: u64,
    read_through_bytes: u64,
    joined_pieces: u64,
    joined_requests: u64,
    partial_redirects: u64,
    /// Commits whose records are all partial chunks' (sectors written
    /// into a partial chunk, a chunk made whole): no map change.
    partial_only_commits: u64,
    fresh_partial: u64,
    partial_homed: u64,
    chunks_filled: u64,
    /// Fills of more than one chunk at once (counted in `chunks_filled`).
    fill_runs: u64,
}

/// The pool target; see the module docs.
pub struct Pool {
    cfg: PoolConfig,
    place: Box<dyn ChunkPlacement>,
    vols: Vec<Option<Volume>>,
    /// Share counts and the reverse map (data chunk -> lc).
    chunks: ChunkTable,
    free: FreeSpace,
    phase: Phase,
    next_lower_id: u64,
    owners: FxHashMap<u64, Owner>,
    bring_left: usize,
    format_stage: u8,
    bring_reads: FxHashMap<u64, Bytes>,
    lower_q: VecDeque<Request>,
    /// A job request was queued since `lower_q` was last joined.
    join_due: bool,
    /// The pieces of each joined request in flight, by its id: `(id the
    /// piece was queued under, offset within the joined request, length)`.
    joined: FxHashMap<u64, Vec<(u64, u32, u32)>>,
    upper_q: VecDeque<Completion>,
    waiting: VecDeque<Request>,
    locked: FxHashSet<u64>,
    uppers: FxHashMap<u64, Upper>,
    jobs: FxHashMap<u64, Job>,
    next_job: u64,
    batch: Vec<Record>,
    /// Where in `batch` each partial chunk's record is (one per chunk: a
    /// later state replaces it in place).
    batch_partial: FxHashMap<u64, usize>,
    batch_no: u64,
    durable_no: u64,
    commit: Option<Commit>,
    commit_waiters: Vec<(u64, u64)>,
    held: FxHashMap<u64, u64>,
    frees: Vec<(u64, u64)>,
    want_checkpoint: bool,
    /// A commit wanted with nobody waiting for it (the defragmenter's,
    /// to make redirected writes durable when no flush comes).
    want_commit: bool,
    checkpoint_gen: u64,
    journal_start: u64,
    journal_seq: u64,
    structural: Option<Structural>,
    /// The batch whose commit makes the last snapshot operation durable.
    structural_batch: u64,
    defrag_pending: bool,
    defrag_cursor: (u32, u64),
    /// Times the defragmenter's scan wrapped past the last volume since it
    /// last found work or was woken ([`Pool::defrag_wake`]): at two, every
    /// chunk has been looked at since, and the scan stops. Counted across
    /// calls, since one call's budget covers only part of a large pool.
    defrag_wraps: u8,
    /// Moves left of a line-up ([`Pool::line_up`]), one per step, each once
    /// the one before is durable (its source chunk is the next one's target).
    defrag_plan: VecDeque<Vec<(u64, u64, u64)>>,
    /// Quiet for line-ups: [`LINE_UP_QUIET_NS`] without an upper request
    /// (counted from each request, and from bring-up).
    quiet: IdleTimer,
    /// A line-up was passed over for want of quiet: scan again after it.
    line_up_deferred: bool,
    /// Partly written chunks ([`partial`]) by data chunk; each holds a
    /// share of its base.
    partial: BTreeMap<u64, Partial>,
    /// How many partial chunks read from each base.
    based: FxHashMap<u64, u32>,
    /// The lcs of partial chunks being filled.
    filling: FxHashSet<u64>,
    /// Said on open when the header's recorded placement overrode the
    /// config's (status key `notice`; the runtime prints it).
    notice: Option<String>,
    counters: Counters,
}

impl Pool {
    /// Parses the config over a lower device of `lower_bytes`.
    pub fn ctr(args: ArgReader<'_>, lower_bytes: u64, mode: OpenMode) -> Result<Pool, ConfigError> {
        let cfg = PoolConfig::parse(args, lower_bytes)?;
        let place = cfg.placement_policy().map_err(ConfigError)?;
        let mut pool = Pool {
            vols: (0..cfg.volumes_max).map(|_| None).collect(),
            chunks: ChunkTable::new(cfg.data_chunks),
            free: FreeSpace::new(cfg.data_chunks),
            place,
            phase: Phase::Format,
            next_lower_id: 0,
            owners: FxHashMap::default(),
            bring_left: 0,
            format_stage: 0,
            bring_reads: FxHashMap::default(),
            lower_q: VecDeque::new(),
            join_due: false,
            joined: FxHashMap::default(),
            upper_q: VecDeque::new(),
            waiting: VecDeque::new(),
            locked: FxHashSet::default(),
            uppers: FxHashMap::default(),
            jobs: FxHashMap::default(),
            next_job: 0,
            batch: Vec::new(),
            batch_partial: FxHashMap::default(),
            batch_no: 1,
            durable_no: 0,
            commit: None,
            commit_waiters: Vec::new(),
            held: FxHashMap::default(),
            frees: Vec::new(),
            want_checkpoint: false,
            want_commit: false,
            checkpoint_gen: 0,
            journal_start: 0,
            journal_seq: 0,
            structural: None,
            structural_batch: 0,
            defrag_pending: false,
            defrag_cursor: (0, 0),
            defrag_wraps: 0,
            defrag_plan: VecDeque::new(),
            quiet: IdleTimer::new(IdleOptions::default()),
            line_up_deferred: false,
            partial: BTreeMap::new(),
            based: FxHashMap::default(),
            filling: FxHashSet::default(),
            notice: None,
            counters: Counters::default(),
            cfg,
        };
        pool.quiet.arm(Instant::ZERO, LINE_UP_QUIET_NS);
        match mode {
            OpenMode::Format { .. } => pool.start_format(),
            OpenMode::Open { .. } => pool.start_recovery(),
        }
        Ok(pool)
    }

    fn lower(&mut self, owner: Owner, mut req: Request) {
        req.id = ReqId(self.next_lower_id);
        self.next_lower_id += 1;
        self.owners.insert(req.id.0, owner);
        self.join_due |= matches!(owner, Owner::Job(_));
        self.lower_q.push_back(req);
    }

    /// What a queued request may be joined with: requests of the same
    /// upper request's jobs with the same op and background mark.
    fn join_key(&self, r: &Request) -> Option<(u64, Op, bool, bool)> {
        let Some(&Owner::Job(jid)) = self.owners.get(&r.id.0) else { return None };
        let upper = self.jobs.get(&jid)?.upper?;
        let joinable = matches!(r.op, Op::Read | Op::Write | Op::WriteZeroes) && !r.fua;
        joinable.then_some((upper, r.op, r.background, r.data.is_some()))
    }

    /// Sends the queued requests of one upper request's jobs that continue
    /// each other below (one starts where another ends, same op) as one
    /// request, up to `REQUEST_BYTES_MAX`: a write over several fresh
    /// chunks placed in a row, the chunk-by-chunk reads of a run, the
    /// copies of a run of shared chunks. Everything in the queue was
    /// issued together, none waiting for another (a write that must follow
    /// a copy or a commit is issued only once that is done), so joining
    /// them changes no order the crash rules depend on. A joined request's
    /// completion is handed to each piece as its own ([`Pool::split_joined`]).
    fn join_queued(&mut self) {
        if !self.queue_may_join() {
            return;
        }
        let queue = std::mem::take(&mut self.lower_q);
        let mut out: Vec<Request> = Vec::with_capacity(queue.len());
        // (key, end offset) -> the request in `out` ending there.
        let mut ends: FxHashMap<((u64, Op, bool, bool), u64), usize> = FxHashMap::default();
        // The pieces of each request of `out` that got joined: (id, within, length, data).
        let mut pieces: FxHashMap<usize, Vec<(u64, u32, u32, Option<Bytes>)>> = FxHashMap::default();
        for r in queue {
            let Some(key) = self.join_key(&r) else {
                out.push(r);
                continue;
            };
            let end = r.offset_bytes + u64::from(r.length_bytes);
            if let Some(i) = ends.remove(&(key, r.offset_bytes)) {
                let head = &mut out[i];
                if u64::from(head.length_bytes) + u64::from(r.length_bytes) <= u64::from(REQUEST_BYTES_MAX) {
                    let list = pieces
                        .entry(i)
                        .or_insert_with(|| vec![(head.id.0, 0, head.length_bytes, head.data.take())]);
                    list.push((r.id.0, head.length_bytes, r.length_bytes, r.data));
                    head.length_bytes += r.length_bytes;
                    ends.insert((key, end), i);
                    continue;
                }
            }
            ends.insert((key, end), out.len());
            out.push(r);
        }
        for (i, list) in pieces {
            let r = &mut out[i];
            if r.op == Op::Write && list[0].3.is_some() {
                let mut data = BytesMut::with_capacity(r.length_bytes as usize);
                for (_, _, _, d) in &list {
                    data.extend_from_slice(d.as_ref().expect("joined with its kind"));
                }
                r.data = Some(data.freeze());
            }
            r.id = ReqId(self.next_lower_id);
            self.next_lower_id += 1;
            self.owners.insert(r.id.0, Owner::Joined);
            self.counters.joined_pieces += list.len() as u64;
            self.counters.joined_requests += 1;
            self.joined.insert(r.id.0, list.into_iter().map(|(id, within, n, _)| (id, within, n)).collect());
        }
        self.lower_q = out.into();
    }

    /// Whether two queued requests continue each other (same op, one
    /// starting where the other ends): the cheap test that spares
    /// [`Pool::join_queued`]'s maps on the common queue of one request, or
    /// of a fresh chunk's data write and its two zero-fills around it.
    /// Past a few requests, the join decides.
    fn queue_may_join(&self) -> bool {
        let q = &self.lower_q;
        match q.len() {
            0 | 1 => false,
            2..=8 => q.iter().any(|a| q.iter().any(|b| a.op == b.op && a.end_bytes() == b.offset_bytes)),
            _ => true,
        }
    }

    /// A joined request completed: each piece's completion, as if it had
    /// been sent alone.
    fn split_joined(&mut self, c: Completion) -> Vec<Completion> {
        let list = self.joined.remove(&c.id.0).expect("pieces of a joined request");
        list.into_iter()
            .map(|(id, within, n)| Completion {
                id: ReqId(id),
                result: c.result,
                data: c.data.as_ref().map(|d| d.slice(within as usize..(within + n) as usize)),
            })
            .collect()
    }

    fn bring(&mut self, reqs: Vec<Request>) {
        self.bring_left = reqs.len();
        for r in reqs {
            self.lower(Owner::Bring(r.offset_bytes), r);
        }
    }

    // ---- format and recovery ----

    fn start_format(&mut self) {
        self.vols[0] = Some(Volume {
            entry: VolumeEntry { slot: 0, name: "origin".into(), parent: None, read_only: false },
            map: BlockMap::new(),
        });
        let zero = |at: u64, n: u64| Request::write(ReqId(0), at, Bytes::from(vec![0u8; n as usize]));
        let cfg = self.cfg.clone();
        let mut reqs =
            vec![zero(cfg.checkpoint_at(0), META_BLOCK_BYTES), zero(cfg.checkpoint_at(1), META_BLOCK_BYTES)];
        let ring = cfg.journal_bytes();
        let mut at = 0;
        while at < ring {
            let n = (ring - at).min(u64::from(REQUEST_BYTES_MAX));
            reqs.push(zero(cfg.journal_at() + at, n));
            at += n;
        }
        self.bring(reqs);
    }

    fn start_recovery(&mut self) {
        self.phase = Phase::Recover { stage: 0, headers: Vec::new(), journal: Vec::new(), tried: Vec::new() };
        let cfg = self.cfg.clone();
        let mut reqs = vec![
            Request::new(ReqId(0), Op::Read, cfg.checkpoint_at(0), META_BLOCK_BYTES as u32),
            Request::new(ReqId(0), Op::Read, cfg.checkpoint_at(1), META_BLOCK_BYTES as u32),
        ];
        let ring = cfg.journal_bytes();
        let mut at = 0;
        while at < ring {
            let n = (ring - at).min(u64::from(REQUEST_BYTES_MAX));
            reqs.push(Request::new(ReqId(0), Op::Read, cfg.journal_at() + at, n as u32));
            at += n;
        }
        self.bring(reqs);
    }

    fn bring_done(&mut self) {
        let reads = std::mem::take(&mut self.bring_reads);
        match &mut self.phase {
            Phase::Format if self.format_stage == 0 => {
                // The zeroes durable before the first checkpoint names the
                // journal empty.
                self.format_stage = 1;
                self.bring(vec![Request::new(ReqId(0), Op::Flush, 0, 0)]);
            }
            Phase::Format if self.format_stage == 1 => {
                self.format_stage = 2;
                let (gen, bytes) = self.encode_checkpoint();
                let at = self.cfg.checkpoint_at(gen % 2);
                self.checkpoint_gen = gen;
                let mut w = Request::write(ReqId(0), at, Bytes::from(bytes));
                w.fua = true;
                self.bring(vec![w]);
            }
            Phase::Format => {
                self.phase = Phase::Serving;
            }
            Phase::Recover { stage: 0, headers, journal, .. } => {
                let cfg = &self.cfg;
                *headers = (0..2)
                    .map(|c| {
                        let start = cfg.checkpoint_at(c);
                        meta::decode_header(cfg, &gather(&reads, start, META_BLOCK_BYTES))
                    })
                    .collect();
                *journal = gather(&reads, cfg.journal_at(), cfg.journal_bytes());
                self.read_next_checkpoint();
            }
            Phase::Recover { .. } => self.finish_recovery(reads),
            Phase::Serving | Phase::Failed(_) => {}
        }
    }

    /// Reads the body of the newest checkpoint copy not tried yet.
    fn read_next_checkpoint(&mut self) {
        let Phase::Recover { stage, headers, tried, .. } = &mut self.phase else { return };
        let candidate = (0..2usize)
            .filter(|c| !tried.contains(c))
            .filter_map(|c| headers[c].as_ref().ok().map(|h| (h.generation, c)))
            .max();
        let Some((_, c)) = candidate else {
            let why: Vec<String> = (0..2)
                .map(|c| match &headers[c] {
                    Err(e) => format!("copy {c} at lower offset {}: {e}", self.cfg.checkpoint_at(c as u64)),
                    Ok(_) => format!(
                        "copy {c} at lower offset {}: its body is damaged",
                        self.cfg.checkpoint_at(c as u64)
                    ),
                })
                .collect();
            let blank = headers.iter().all(|h| matches!(h, Err(MetaError::Blank)));
            let msg = if blank {
                format!(
                    "pool: no checkpoint found ({}): not a formatted pool; `layoutd format` it",
                    why.join("; ")
                )
            } else {
                format!(
                    "pool: metadata checkpoint unreadable ({}): refusing to open; nothing was changed. \
                     Restore the device from a backup, or reformat it (its data is lost)",
                    why.join("; ")
                )
            };
            self.phase = Phase::Failed(msg);
            return;
        };
        tried.push(c);
        *stage = 1;
        let h = headers[c].as_ref().expect("chosen");
        let body = h.body_blocks * META_BLOCK_BYTES;
        let start = self.cfg.checkpoint_at(c as u64) + META_BLOCK_BYTES;
        let mut reqs = Vec::new();
        let mut at = 0;
        while at < body {
            let n = (body - at).min(u64::from(REQUEST_BYTES_MAX));
            reqs.push(Request::new(ReqId(0), Op::Read, start + at, n as u32));
            at += n;
        }
        if reqs.is_empty() {
            self.finish_recovery(FxHashMap::default());
        } else {
            self.bring(reqs);
        }
    }

    fn finish_recovery(&mut self, reads: FxHashMap<u64, Bytes>) {
        let Phase::Recover { headers, journal, tried, .. } = &self.phase else { return };
        let c = *tried.last().expect("a copy was chosen");
        let header = headers[c].clone().expect("chosen");
        let journal = journal.clone();
        let start = self.cfg.checkpoint_at(c as u64) + META_BLOCK_BYTES;
        let body = gather(&reads, start, header.body_blocks * META_BLOCK_BYTES);
        let (runs, partials) = match meta::decode_body(&self.cfg, &header, &body) {
            Ok(r) => r,
            Err((i, e)) => {
                let at = start + (i.max(1) - 1) * META_BLOCK_BYTES;
                let Phase::Recover { headers, .. } = &mut self.phase else { unreachable!() };
                headers[c] = Err(MetaError::Malformed(format!("body block at lower offset {at}: {e}")));
                return self.read_next_checkpoint();
            }
        };
        // The placement the pool was laid out with wins over the config's
        // (its homes are where the origin's chunks are).
        let mut cfg = self.cfg.clone();
        let config_said = cfg.adopt_placement(header.placement);
        match cfg.placement_policy() {
            Ok(place) => {
                self.place = place;
                self.notice = config_said.map(|said| {
                    format!(
                        "pool: placement {} is recorded in the pool's metadata; the config's {said} is \
                         ignored (a pool's placement cannot change; name {} in the config to silence this)",
                        cfg.placement_label(),
                        cfg.placement_label()
                    )
                });
                self.cfg = cfg;
            }
            Err(e) => {
                self.phase = Phase::Failed(format!("pool: placement {}: {e}", cfg.placement_label()));
                return;
            }
        }
        match self.rebuild(&header, &runs, &partials, &journal) {
            Ok(()) => {
                self.checkpoint_gen = header.generation;
                self.phase = Phase::Serving;
                self.defrag_pending = true;
            }
            Err(e) => self.phase = Phase::Failed(e),
        }
    }

    /// A partial record's state, checked: `Ok(None)` for a chunk whole
    /// again.
    fn partial_of(&self, chunk: u64, base: u64, written: Sectors) -> Result<Option<Partial>, String> {
        let n = self.sectors_per_chunk();
        let ok = chunk < self.cfg.data_chunks
            && (base == UNMAPPED || base == NO_BASE || (base < self.cfg.data_chunks && base != chunk))
            && n <= SECTORS_MAX
            && !written.any_past(n);
        if !ok {
            return Err(format!(
                "partial data chunk {chunk} with base {base}: out of range or more sectors than a \
                 chunk has"
            ));
        }
        Ok((base != UNMAPPED).then_some(Partial { base, written }))
    }

    /// The maps from a checkpoint and the journal after it; checks that
    /// every data chunk belongs to one lc.
    fn rebuild(
        &mut self,
        header: &Header,
        runs: &[Run],
        partials: &[Record],
        journal: &[u8],
    ) -> Result<(), String> {
        self.vols = (0..self.cfg.volumes_max).map(|_| None).collect();
        self.partial.clear();
        for r in partials {
            let &Record::Partial { chunk, base, written } = r else { unreachable!("decode_body") };
            match self.partial_of(chunk, base, written) {
                Ok(Some(pt)) => _ = self.partial.insert(chunk, pt),
                r => {
                    return Err(format!(
                        "pool: checkpoint generation {}: {} (damaged metadata): refusing to open",
                        header.generation,
                        r.err().unwrap_or_else(|| format!("partial data chunk {chunk} marked whole"))
                    ))
                }
            }
        }
        for v in &header.volumes {
            self.vols[v.slot as usize] = Some(Volume { entry: v.clone(), map: BlockMap::new() });
        }
        for &(slot, chunk, count, loc) in runs {
            let vol = self.vols[slot as usize].as_mut().expect("checked by decode_body");
            vol.map.insert(chunk, u64::from(count), loc);
        }
        // The journal: blocks from `journal_start` on, in sequence, until
        // the first missing one (a torn tail); a valid block past a gap is
        // damage, not a torn tail.
        let cfg = self.cfg.clone();
        // Each block is written in two copies at once: either copy will do
        // (one lost to damage later is not a torn tail).
        let mut blocks: Vec<(u64, u64, Vec<Record>)> = Vec::new();
        for i in 0..2 * cfg.journal_blocks {
            let at = (i * META_BLOCK_BYTES) as usize;
            let lower = cfg.journal_at() + i * META_BLOCK_BYTES;
            match meta::decode_journal(&journal[at..at + META_BLOCK_BYTES as usize]) {
                Ok((seq, recs)) => {
                    if seq >= header.journal_start && seq % cfg.journal_blocks == i % cfg.journal_blocks {
                        blocks.push((seq, lower, recs));
                    }
                }
                // Never written, or torn: no block there.
                Err(e) if e.is_absent_or_torn() => {}
                // Whole but not readable by this build: taking it for a torn
                // tail would end the journal there and silently drop every
                // record from it on (an older build did that to a newer
                // one's snapshot).
                Err(e) => {
                    return Err(format!(
                        "pool: journal block at lower offset {lower}: {e}: refusing to open \
                         (written by a newer layoutd? open it with that one; otherwise damaged metadata)"
                    ))
                }
            }
        }
        blocks.sort_by_key(|b| b.0);
        blocks.dedup_by_key(|b| b.0);
        let mut next = header.journal_start;
        for (seq, at, recs) in &blocks {
            if *seq != next {
                return Err(format!(
                    "pool: journal block {seq} at lower offset {at} follows a missing block {next} \
                     (damaged metadata, not a torn write): refusing to open; restore from a backup"
                ));
            }
            for r in recs {
                let &Record::Core(JournalRecord::Exception { volume, chunk, location }) = r else {
                    let &Record::Partial { chunk, base, written } = r else { unreachable!("decode_journal") };
                    match self.partial_of(chunk, base, written) {
                        Ok(Some(pt)) => _ = self.partial.insert(chunk, pt),
                        Ok(None) => _ = self.partial.remove(&chunk),
                        Err(e) => {
                            return Err(format!(
                                "pool: journal block {seq} at lower offset {at}: {e} (damaged metadata): \
                                 refusing to open"
                            ))
                        }
                    }
                    continue;
                };
                let ok = (volume as usize) < self.vols.len()
                    && self.vols[volume as usize].is_some()
                    && chunk < cfg.volume_chunks
                    && (location == UNMAPPED || location < cfg.data_chunks);
                if !ok {
                    return Err(format!(
                        "pool: journal block {seq} at lower offset {at}: volume {volume} chunk {chunk} -> \
                         {location} is out of range (damaged metadata): refusing to open"
                    ));
                }
                let map = &mut self.vols[volume as usize].as_mut().expect("checked").map;
                if location == UNMAPPED {
                    map.remove(chunk, 1);
                } else {
                    map.insert(chunk, 1, location);
                }
            }
            next += 1;
        }
        self.journal_seq = next;
        self.journal_start = header.journal_start;
        // Reference counts and the free space, checking that no data chunk
        // is claimed by two lcs.
        let vols: Vec<&Volume> = self.vols.iter().flatten().collect();
        self.chunks = ChunkTable::census(cfg.data_chunks, vols.iter().map(|v| &v.map)).map_err(
            |(i, lc, p, other)| {
                format!(
                    "pool: volume `{}` chunk {lc} maps data chunk {p} (lower offset {}), which chunk \
                     {other} of another volume also maps (damaged metadata): refusing to open",
                    vols[i].entry.name,
                    cfg.chunk_at(p)
                )
            },
        )?;
        // A partial chunk no volume maps: its redirect's map record was
        // not durable (or it was unmapped since).
        let chunks = &self.chunks;
        self.partial.retain(|&q, _| chunks.refs(q) > 0);
        Self::add_bases(&cfg, &mut self.chunks, &self.partial)?;
        self.based.clear();
        for pt in self.partial.values().filter(|pt| pt.has_base()) {
            *self.based.entry(pt.base).or_default() += 1;
        }
        self.free = FreeSpace::new(cfg.data_chunks);
        for p in 0..cfg.data_chunks {
            if self.chunks.refs(p) > 0 {
                self.free.take(p, 1);
            }
        }
        Ok(())
    }

    /// Counts each partial chunk's share of its base into `t` (a census
    /// of the maps), checking that its base is not partial and belongs to
    /// the same lc.
    fn add_bases(
        cfg: &PoolConfig,
        t: &mut ChunkTable,
        partial: &BTreeMap<u64, Partial>,
    ) -> Result<(), String> {
        for (&q, pt) in partial.iter().filter(|(_, pt)| pt.has_base()) {
            let lc = t.lc(q).expect("partial chunks are mapped");
            let fault = if partial.contains_key(&pt.base) {
                Some(format!("reads from data chunk {}, partial itself", pt.base))
            } else if t.lc(pt.base).is_some_and(|l| l != lc) {
                Some(format!(
                    "at chunk {lc} reads from data chunk {}, which chunk {:?} maps",
                    pt.base,
                    t.lc(pt.base)
                ))
            } else {
                None
            };
            if let Some(f) = fault {
                return Err(format!(
                    "pool: partial data chunk {q} (lower offset {}) {f} (damaged metadata): refusing to open",
                    cfg.chunk_at(q)
                ));
            }
            match t.lc(pt.base) {
                None => t.map(pt.base, lc, 1),
                Some(_) => t.share(pt.base),
            }
        }
        Ok(())
    }

    // ---- requests ----

    fn serving(&self) -> bool {
        matches!(self.phase, Phase::Serving)
    }

    /// The [`Piece`]s of a byte range.
    fn pieces(&self, offset: u64, length: u64) -> Vec<Piece> {
        let (vb, c) = (self.cfg.volume_bytes(), self.cfg.chunk_bytes);
        let mut out = Vec::new();
        let mut o = offset;
        while o < offset + length {
            let slot = (o / vb) as u32;
            let w = o % vb;
            let n = (c - w % c).min(offset + length - o);
            out.push((slot, w / c, w % c, n));
            o += n;
        }
        out
    }

    /// A request's pieces (a flush: one empty piece) and the lcs they
    /// touch, sorted, once each.
    fn pieces_and_lcs(&self, req: &Request) -> (Vec<Piece>, Vec<u64>) {
        if req.op == Op::Flush {
            return (vec![(0, 0, 0, 0)], Vec::new());
        }
        let pieces = self.pieces(req.offset_bytes, u64::from(req.length_bytes));
        let mut l: Vec<u64> = pieces.iter().map(|p| p.1).collect();
        l.sort_unstable();
        l.dedup();
        (pieces, l)
    }

    fn admit(&mut self) {
        if !self.serving() {
            if let Phase::Failed(_) = self.phase {
                while let Some(r) = self.waiting.pop_front() {
                    self.upper_q.push_back(Completion::err(r.id, IoError::Io));
                }
            }
            return;
        }
        let mut claimed: FxHashSet<u64> = FxHashSet::default();
        let mut i = 0;
        while i < self.waiting.len() {
            if self.structural.is_some() {
                break;
            }
            let (pieces, lcs) = self.pieces_and_lcs(&self.waiting[i]);
            if lcs.iter().any(|lc| self.locked.contains(lc) || claimed.contains(lc)) {
                claimed.extend(lcs);
                i += 1;
                continue;
            }
            let req = self.waiting.remove(i).expect("in range");
            self.start(req, pieces, lcs);
        }
    }

    fn start(&mut self, mut req: Request, pieces: Vec<Piece>, lcs: Vec<u64>) {
        if req.validate(self.size_bytes()).is_err() {
            self.upper_q.push_back(Completion::err(req.id, IoError::Invalid));
            return;
        }
        self.locked.extend(lcs.iter().copied());
        match req.op {
            Op::Read => self.counters.reads += 1,
            Op::Flush => {}
            _ => self.counters.writes += 1,
        }
        let uid = req.id.0;
        self.uppers.insert(
            uid,
            Upper { asm: Assembly::new(req.id, req.op, req.length_bytes, pieces.len() as u32), lcs },
        );
        let mut within = 0u64;
        let first_jid = self.next_job;
        for (slot, lc, coff, len) in pieces {
            let data = match req.op {
                Op::Write => req.take_data_piece(within as usize, len as usize),
                Op::WriteZeroes | Op::Trim => Some(Bytes::from_static(&ZEROES[..len as usize])),
                _ => None,
            };
            let mut steps = VecDeque::new();
            steps.push_back(if req.op == Op::Flush { Step::Commit } else { Step::Plan });
            if req.fua && req.op.is_modify() {
                steps.push_back(Step::Commit);
            }
            self.new_job(Job {
                upper: Some(uid),
                within: within as u32,
                slot,
                lc,
                coff,
                len,
                op: req.op,
                data,
                steps,
                buf: None,
                taken: Vec::new(),
                locks: Vec::new(),
                read_into: None,
                read: None,
                parts: Vec::new(),
                in_flight: 0,
                failed: None,
            });
            within += len;
        }
        // The jobs just made have consecutive ids.
        for jid in first_jid..self.next_job {
            self.run_job(jid);
        }
    }

    fn new_job(&mut self, job: Job) -> u64 {
        let jid = self.next_job;
        self.next_job += 1;
        self.jobs.insert(jid, job);
        jid
    }

    /// Runs a job's steps until one waits (I/O or a commit) or it ends.
    fn run_job(&mut self, jid: u64) {
        loop {
            let Some(job) = self.jobs.get_mut(&jid) else { return };
            let Some(step) = job.steps.pop_front() else {
                return self.end_job(jid, Ok(()));
            };
            let bg = job.upper.is_none();
            let c = self.cfg.chunk_bytes;
            match step {
                Step::Plan => match self.plan(jid) {
                    Ok(steps) => {
                        let job = self.jobs.get_mut(&jid).expect("live");
                        for s in steps.into_iter().rev() {
                            job.steps.push_front(s);
                        }
                    }
                    Err(e) => return self.end_job(jid, Err(e)),
                },
                Step::Zeroes => job.read = Some(Bytes::from_static(&ZEROES[..job.len as usize])),
                Step::ReadParts(parts) => {
                    // `lower` numbers them in order from `next_lower_id`.
                    let (first, len) = (self.next_lower_id, job.len as u32);
                    job.in_flight = parts.len() as u32;
                    let ats: Vec<u64> = parts.iter().map(|p| p.0).collect();
                    job.parts =
                        parts.into_iter().zip(first..).map(|((_, ranges), id)| (id, ranges)).collect();
                    for at in ats {
                        self.lower(Owner::Job(jid), Request::new(ReqId(0), Op::Read, at, len));
                    }
                    return;
                }
                Step::WriteUnwritten { q } => {
                    let buf = job.buf.take();
                    let (at, n) = (self.cfg.chunk_at(q), c / SECTOR);
                    let runs: Vec<(u64, u64)> = self.partial[&q]
                        .written
                        .runs(0, n)
                        .into_iter()
                        .filter(|r| !r.2)
                        .map(|(f, k, _)| (f * SECTOR, k * SECTOR))
                        .collect();
                    job.in_flight = runs.len() as u32;
                    self.counters.chunks_filled += 1;
                    self.counters.copy_written_bytes += runs.iter().map(|r| r.1).sum::<u64>();
                    if runs.is_empty() {
                        continue;
                    }
                    let zeroes = !self.partial[&q].has_base();
                    for (o, k) in runs {
                        let op = if zeroes { Op::WriteZeroes } else { Op::Write };
                        let mut w = Request::new(ReqId(0), op, at + o, k as u32);
                        if !zeroes {
                            w.data = buf
                                .as_ref()
                                .map(|b| Bytes::copy_from_slice(&b[o as usize..(o + k) as usize]));
                        }
                        w.background = true;
                        self.lower(Owner::Job(jid), w);
                    }
                    return;
                }
                Step::ReadUpper { at, through } => {
                    let r = Request::new(ReqId(0), Op::Read, at, (job.len + through) as u32);
                    self.counters.read_through_bytes += through;
                    return self.lower(Owner::Job(jid), r);
                }
                Step::WriteUpper { at } => {
                    let mut r = Request::new(ReqId(0), Op::Write, at, job.len as u32);
                    r.data = job.data.take(); // its last use: no step after it patches
                    return self.lower(Owner::Job(jid), r);
                }
                Step::WriteFresh { q } => {
                    let (at, coff, len) = (self.cfg.chunk_at(q), job.coff, job.len);
                    let mut w = Request::new(ReqId(0), Op::Write, at + coff, len as u32);
                    w.data = job.data.take();
                    let zeroes = [(0, coff), (coff + len, c - coff - len)];
                    job.in_flight = 1 + zeroes.iter().filter(|z| z.1 > 0).count() as u32;
                    self.lower(Owner::Job(jid), w);
                    for (o, n) in zeroes {
                        if n > 0 {
                            self.lower(
                                Owner::Job(jid),
                                Request::new(ReqId(0), Op::WriteZeroes, at + o, n as u32),
                            );
                        }
                    }
                    return;
                }
                Step::ReadBuf { p, n, at } => {
                    let mut r = Request::new(ReqId(0), Op::Read, self.cfg.chunk_at(p), (n * c) as u32);
                    r.background = bg;
                    job.read_into = Some(at);
                    return self.lower(Owner::Job(jid), r);
                }
                Step::Patch => {
                    let (coff, len) = (job.coff as usize, job.len as usize);
                    if let Some(d) = &job.data {
                        let buf = job.buf.get_or_insert_with(|| vec![0u8; c as usize]);
                        buf[coff..coff + len].copy_from_slice(d);
                    }
                }
                Step::WriteBuf { q, n } => {
                    let mut r = Request::new(ReqId(0), Op::Write, self.cfg.chunk_at(q), (n * c) as u32);
                    r.data = job.buf.take().map(Bytes::from);
                    r.background = bg;
                    return self.lower(Owner::Job(jid), r);
                }
                Step::Compose { q, n } => {
                    if let Some(buf) = job.buf.as_mut() {
                        let (c, sec) = (c as usize, SECTOR as usize);
                        for (i, pq) in (q..q + n).enumerate() {
                            let runs = self.partial[&pq].written.runs(0, c as u64 / SECTOR);
                            let (own, base) = (i * c, (n as usize + i) * c);
                            for (f, k, _) in runs.into_iter().filter(|r| !r.2) {
                                let (f, k) = (f as usize * sec, k as usize * sec);
                                buf.copy_within(base + f..base + f + k, own + f);
                            }
                        }
                        buf.truncate(n as usize * c);
                    }
                }
                Step::Apply(change) => {
                    job.taken.clear();
                    self.apply(change);
                }
                Step::Commit => {
                    self.commit_waiters.push((self.batch_no, jid));
                    return;
                }
            }
        }
    }

    fn end_job(&mut self, jid: u64, result: Result<(), IoError>) {
        let job = self.jobs.remove(&jid).expect("live");
        for q in job.taken {
            self.free.release(q, 1);
        }
        match job.upper {
            Some(uid) => {
                let up = self.uppers.get_mut(&uid).expect("live upper");
                if up.asm.piece_done(job.within, job.read, result) {
                    let up = self.uppers.remove(&uid).expect("live");
                    for lc in &up.lcs {
                        self.locked.remove(lc);
                    }
                    self.upper_q.push_back(up.asm.finish());
                }
            }
            None => {
                for lc in &job.locks {
                    self.locked.remove(lc);
                    self.filling.remove(lc);
                }
            }
        }
    }

    /// Bytes to read past a whole-chunk read of `slot`'s `lc` at data chunk
    /// `p`: the chunks up to the volume's next lc, when that lies
    /// `READ_THROUGH_CHUNKS_MAX` chunks or fewer after `p` (a free chunk, a
    /// copy, another volume's). Skipping them costs a sequential reader at
    /// least the time they take to pass under the head, and on the drive
    /// model far more (its read-ahead does not serve a request past a gap:
    /// about 5.7 ms for a skipped 64 KiB chunk on wd800 against 1.2 ms for
    /// the next one in line); read, they keep the drive's stream in line.
    fn read_through(&self, slot: u32, lc: u64, p: u64) -> u64 {
        let next = self.vols[slot as usize].as_ref().and_then(|v| v.map.get(lc + 1));
        match next {
            Some(n) if n > p + 1 && n - p - 1 <= READ_THROUGH_CHUNKS_MAX => {
                (n - p - 1) * self.cfg.chunk_bytes
            }
            _ => 0,
        }
    }

    /// Where the origin's `lc` is (or belongs).
    fn origin_ref(&self, lc: u64) -> u64 {
        self.vols[0].as_ref().and_then(|v| v.map.get(lc)).unwrap_or_else(|| self.place.home(lc))
    }

    fn extents_count(&self) -> u64 {
        self.vols.iter().flatten().map(|v| v.map.extent_count() as u64).sum()
    }

    /// A free chunk for `slot`'s `lc`: `Err(None)` to wait for a commit
    /// that frees some, `Err(Some(NoSpace))` if there is none.
    fn take_chunk(&mut self, slot: u32, lc: u64, near: Option<u64>) -> Result<u64, Option<IoError>> {
        let room = self.meta_units() + 2 <= self.cfg.extents_max();
        let found = if !room {
            None
        } else if let Some(n) = near {
            self.place.place_copy(&self.free, n)
        } else if slot == 0 {
            self.place.place_origin(&self.free, lc)
        } else {
            let n = self.origin_ref(lc);
            self.place.place_copy(&self.free, n)
        };
        match found {
            Some(q) => {
                self.free.take(q, 1);
                Ok(q)
            }
            None if !self.frees.is_empty() || self.commit.is_some() || self.fills_to_free() => Err(None),
            None => {
                self.counters.nospace += 1;
                Err(Some(IoError::NoSpace))
            }
        }
    }

    fn plan(&mut self, jid: u64) -> Result<Vec<Step>, IoError> {
        let job = &self.jobs[&jid];
        let (slot, lc, coff, len, op) = (job.slot, job.lc, job.coff, job.len, job.op);
        let c = self.cfg.chunk_bytes;
        let Some(vol) = self.vols.get(slot as usize).and_then(|v| v.as_ref()) else {
            return Err(IoError::Invalid);
        };
        let (mapped, read_only) = (vol.map.get(lc), vol.entry.read_only);
        if op == Op::Read {
            return Ok(vec![match mapped {
                Some(p) if self.partial.contains_key(&p) => self.read_partial(p, coff, len),
                Some(p) => Step::ReadUpper {
                    at: self.cfg.chunk_at(p) + coff,
                    through: if coff == 0 && len == c { self.read_through(slot, lc, p) } else { 0 },
                },
                None => Step::Zeroes,
            }]);
        }
        if read_only {
            return Err(IoError::ReadOnly);
        }
        let full = coff == 0 && len == c;
        let zeroing = matches!(op, Op::Trim | Op::WriteZeroes);
        if zeroing && (full || mapped.is_none()) {
            if mapped.is_some() && self.meta_units() + 1 > self.cfg.extents_max() {
                self.counters.nospace += 1;
                return Err(IoError::NoSpace);
            }
            return Ok(match mapped {
                Some(_) => vec![Step::Apply(Change::Unmap { slot, lc })],
                None => Vec::new(),
            });
        }
        let Some(p) = mapped else {
            let q = match self.take_chunk(slot, lc, None) {
                Ok(q) => q,
                Err(None) => return Ok(vec![Step::Commit, Step::Plan]),
                Err(Some(e)) => return Err(e),
            };
            self.jobs.get_mut(&jid).expect("live").taken = vec![q];
            self.counters.allocated_chunks += 1;
            let target = if slot == 0 { self.place.home(lc) } else { self.origin_ref(lc) };
            self.placed(q, target);
            let at = self.cfg.chunk_at(q);
            return Ok(if full || !self.cfg.zero_new_chunks {
                vec![Step::WriteUpper { at: at + coff }, Step::Apply(Change::Map { slot, lc, q })]
            } else if self.cfg.zero_with == ZeroWith::Partial && self.partial_fits() {
                // Only the piece on disk; the rest reads as zeroes until written.
                self.counters.fresh_partial += 1;
                vec![
                    Step::WriteUpper { at: at + coff },
                    Step::Apply(Change::Fresh { slot, lc, q, coff, len }),
                ]
            } else if self.cfg.zero_with == ZeroWith::Write {
                // The data in a zeroed chunk, written whole.
                vec![Step::Patch, Step::WriteBuf { q, n: 1 }, Step::Apply(Change::Map { slot, lc, q })]
            } else {
                vec![Step::WriteFresh { q }, Step::Apply(Change::Map { slot, lc, q })]
            });
        };
        if self.chunks.refs(p) == 1 {
            let at = self.cfg.chunk_at(p) + coff;
            let mut steps = if self.held.contains_key(&p) {
                vec![Step::Commit, Step::WriteUpper { at }]
            } else {
                vec![Step::WriteUpper { at }]
            };
            if self.partial.contains_key(&p) {
                steps.push(Step::Apply(Change::Written { q: p, coff, len }));
            }
            return Ok(steps);
        }
        let needs_read = !full || (slot == 0 && !self.cfg.redirect_origin);
        if needs_read && self.partial.contains_key(&p) {
            // A shared partial chunk read whole: filled first (what its
            // unwritten sectors get is what every sharer reads there now).
            let mut steps = self.fill_steps(p);
            steps.push(Step::Plan);
            return Ok(steps);
        }
        // Shared.
        let q = match self.take_chunk(slot, lc, Some(p)) {
            Ok(q) => q,
            Err(None) => return Ok(vec![Step::Commit, Step::Plan]),
            Err(Some(e)) => return Err(e),
        };
        self.jobs.get_mut(&jid).expect("live").taken = vec![q];
        self.counters.copies_placed += 1;
        self.counters.copy_distance_sum += q.abs_diff(p);
        self.placed(q, p);
        if slot == 0 && !self.cfg.redirect_origin {
            // Copy out once for every sharer, make it durable, then write in place.
            self.counters.chunks_copied += 1;
            self.counters.copy_read_bytes += c;
            self.counters.copy_written_bytes += c;
            return Ok(vec![
                Step::ReadBuf { p, n: 1, at: 0 },
                Step::WriteBuf { q, n: 1 },
                Step::Apply(Change::CowOut { lc, p, q }),
                Step::Commit,
                Step::WriteUpper { at: self.cfg.chunk_at(p) + coff },
            ]);
        }
        // A snapshot's own chunk, or the origin's redirected one: the new
        // data goes to `q`, the sharers stay on `p` (nothing to wait for).
        match slot {
            0 => self.counters.origin_redirected += 1,
            _ => self.counters.private_chunks += 1,
        }
        let change = Step::Apply(Change::Private { slot, lc, q });
        Ok(if full {
            self.counters.full_overwrite_read_skipped += 1;
            vec![Step::WriteUpper { at: self.cfg.chunk_at(q) }, change]
        } else if slot == 0 && self.partial_fits() {
            // Only the piece into `q`; the rest reads from `p` until filled.
            self.counters.partial_redirects += 1;
            vec![
                Step::WriteUpper { at: self.cfg.chunk_at(q) + coff },
                Step::Apply(Change::Redirect { lc, p, q, coff, len }),
            ]
        } else {
            self.counters.copy_read_bytes += c;
            self.counters.copy_written_bytes += c;
            vec![Step::ReadBuf { p, n: 1, at: 0 }, Step::Patch, Step::WriteBuf { q, n: 1 }, change]
        })
    }

    /// 512-byte sectors in a chunk.
    fn sectors_per_chunk(&self) -> u64 {
        self.cfg.chunk_bytes / SECTOR
    }

    /// Whether a redirected chunk may be left partial: its chunk size has
    /// a written map, and the checkpoint has room for one more partial
    /// chunk (and a spare unit) besides the map record's 2.
    fn partial_fits(&self) -> bool {
        let need = 2 + meta::PARTIAL_EXTENT_UNITS + 1;
        self.sectors_per_chunk() <= SECTORS_MAX && self.meta_units() + need <= self.cfg.extents_max()
    }

    /// The checkpoint room the maps and the partial chunks take, in
    /// extent records (one spare for a partial record not fitting the end
    /// of a block).
    fn meta_units(&self) -> u64 {
        let n = self.partial.len() as u64;
        self.extents_count() + n * meta::PARTIAL_EXTENT_UNITS + u64::from(n > 0)
    }

    /// Whether `p` is partial or the base of one: not moved, not read
    /// whole.
    fn pinned(&self, p: u64) -> bool {
        self.partial.contains_key(&p) || self.based.contains_key(&p)
    }

    /// The read of `[coff, coff + len)` of partial chunk `q`: its written
    /// sectors from `q`, the rest from its base. Within one run, one read;
    /// else the range is read from both (two lower reads, each in line
    /// with the same reads of the chunks before and after it, which the
    /// pool joins: a sequential reader's base reads are one stream at the
    /// origin's homes) and composed.
    fn read_partial(&self, q: u64, coff: u64, len: u64) -> Step {
        let pt = &self.partial[&q];
        let runs = pt.written.runs(coff / SECTOR, len / SECTOR);
        if !pt.has_base() {
            // The unwritten sectors are zeroes: no read for them alone.
            return match runs[..] {
                [(_, _, false)] => Step::Zeroes,
                [(_, _, true)] => Step::ReadUpper { at: self.cfg.chunk_at(q) + coff, through: 0 },
                _ => {
                    let written: Vec<(u64, u64)> = runs
                        .iter()
                        .filter(|r| r.2)
                        .map(|&(f, n, _)| (f * SECTOR - coff, n * SECTOR))
                        .collect();
                    Step::ReadParts(vec![(self.cfg.chunk_at(q) + coff, written)])
                }
            };
        }
        if let [(_, _, written)] = runs[..] {
            let from = if written { q } else { pt.base };
            return Step::ReadUpper { at: self.cfg.chunk_at(from) + coff, through: 0 };
        }
        let take = |w: bool| -> Vec<(u64, u64)> {
            runs.iter().filter(|r| r.2 == w).map(|&(f, n, _)| (f * SECTOR - coff, n * SECTOR)).collect()
        };
        Step::ReadParts(vec![
            (self.cfg.chunk_at(pt.base) + coff, take(false)),
            (self.cfg.chunk_at(q) + coff, take(true)),
        ])
    }

    /// Appends partial chunk `q`'s record (its state now; a chunk no
    /// longer partial: whole), replacing the one already in the batch.
    /// A redirect's goes before its map record, so that a torn journal
    /// never names a partial chunk as whole.
    fn record_partial(&mut self, q: u64) {
        let r = match self.partial.get(&q) {
            Some(pt) => meta::partial_record(q, pt),
            None => Record::Partial { chunk: q, base: UNMAPPED, written: Sectors::default() },
        };
        match self.batch_partial.get(&q) {
            Some(&i) => self.batch[i] = r,
            None => {
                self.batch_partial.insert(q, self.batch.len());
                self.batch.push(r);
            }
        }
    }

    /// [`Pool::record_partial`], the record after every record already in
    /// the batch (after the map records that make it true: a torn journal
    /// never holds it without them).
    fn record_partial_last(&mut self, q: u64) {
        self.batch_partial.remove(&q);
        self.record_partial(q);
    }

    /// Partial chunk `q` is whole (written or filled): its share of its
    /// base goes.
    fn make_whole(&mut self, q: u64) {
        let pt = self.partial.remove(&q).expect("partial");
        if !pt.has_base() {
            self.record_partial(q);
            return;
        }
        match self.based.get_mut(&pt.base) {
            Some(n) if *n > 1 => *n -= 1,
            _ => _ = self.based.remove(&pt.base),
        }
        self.record_partial(q);
        self.unshare(pt.base);
        // Neither is pinned any more: the defragmenter may move them.
        self.defrag_wake(self.cfg.defrag);
    }

    /// Starts filling partial chunk `q` (its base's data into its
    /// unwritten sectors) unless its lc is busy; whether it started.
    fn start_fill(&mut self, q: u64) -> bool {
        let lc = self.chunks.lc(q).expect("a partial chunk is mapped");
        if self.locked.contains(&lc) {
            return false;
        }
        self.filling.insert(lc);
        let steps = self.fill_steps(q);
        self.background_job(vec![lc], steps.into(), Vec::new());
        true
    }

    /// The steps that fill partial chunk `q`: its base read, the sectors
    /// `q` has not written written from it, `q` whole (durable with the
    /// next commit; until then a crash leaves `q` partial, which reads the
    /// same).
    fn fill_steps(&mut self, q: u64) -> Vec<Step> {
        let (base, c) = (self.partial[&q].base, self.cfg.chunk_bytes);
        if base == NO_BASE {
            // Zeroes into its unwritten sectors (no read).
            return vec![Step::WriteUnwritten { q }, Step::Apply(Change::Written { q, coff: 0, len: c })];
        }
        self.counters.copy_read_bytes += c;
        vec![
            Step::ReadBuf { p: base, n: 1, at: 0 },
            Step::WriteUnwritten { q },
            Step::Apply(Change::Written { q, coff: 0, len: c }),
        ]
    }

    /// Starts filling the run of partial chunks from `q` on (each next
    /// data chunk partial, its lc free, at most [`FILL_RUN_BYTES_MAX`])
    /// as one job: the run read as it is (one lower read), its bases read
    /// (one read per run of consecutive bases), composed in the buffer,
    /// the run written whole (one lower write; a chunk's written sectors
    /// get the bytes they hold, read under the same lock), then each chunk
    /// whole (durable with the next commit, as a single fill). `q`'s lc
    /// must be free. The number of chunks it fills.
    fn start_fill_run(&mut self, q: u64) -> u64 {
        let run_max = (FILL_RUN_BYTES_MAX / self.cfg.chunk_bytes).max(1);
        let mut lcs = Vec::new();
        for &pq in self.partial.range(q..).map(|e| e.0) {
            let lc = self.chunks.lc(pq).expect("a partial chunk is mapped");
            if pq != q + lcs.len() as u64
                || !self.partial[&pq].has_base()
                || lcs.len() as u64 == run_max
                || self.locked.contains(&lc)
                || self.goes_home(pq)
            {
                break;
            }
            lcs.push(lc);
        }
        let n = lcs.len() as u64;
        if n <= 1 {
            self.start_fill(q);
            return 1;
        }
        let c = self.cfg.chunk_bytes;
        let mut steps = self.compose_steps(q, n);
        steps.push_back(Step::WriteBuf { q, n });
        steps.extend((q..q + n).map(|pq| Step::Apply(Change::Written { q: pq, coff: 0, len: c })));
        for pq in q..q + n {
            let runs = self.partial[&pq].written.runs(0, c / SECTOR);
            self.counters.copy_written_bytes +=
                runs.iter().filter(|r| !r.2).map(|r| r.1 * SECTOR).sum::<u64>();
        }
        self.counters.chunks_filled += n;
        self.counters.fill_runs += 1;
        self.filling.extend(lcs.iter().copied());
        self.background_job(lcs, steps, Vec::new());
        n
    }

    /// The steps that put the run of partial chunks `q..q + n` whole in
    /// the job's buffer: the run read as it is (one lower read), its bases
    /// (one read per run of consecutive bases), composed.
    fn compose_steps(&mut self, q: u64, n: u64) -> VecDeque<Step> {
        let bases: Vec<u64> = (q..q + n).map(|pq| self.partial[&pq].base).collect();
        self.counters.copy_read_bytes += 2 * n * self.cfg.chunk_bytes;
        let mut steps = VecDeque::from([Step::ReadBuf { p: q, n, at: 0 }]);
        let mut i = 0;
        while i < bases.len() {
            let k = (1..bases.len() - i).take_while(|&k| bases[i + k] == bases[i] + k as u64).count() + 1;
            steps.push_back(Step::ReadBuf { p: bases[i], n: k as u64, at: n + i as u64 });
            i += k;
        }
        steps.push_back(Step::Compose { q, n });
        steps
    }

    /// Runs a background job (a fill or a defragmentation stage) holding
    /// `locks` and the chunks `taken`.
    fn background_job(&mut self, locks: Vec<u64>, steps: VecDeque<Step>, taken: Vec<u64>) {
        self.locked.extend(locks.iter().copied());
        let jid = self.new_job(Job {
            upper: None,
            within: 0,
            slot: 0,
            lc: locks[0],
            coff: 0,
            len: self.cfg.chunk_bytes,
            op: Op::Write,
            data: None,
            steps,
            buf: None,
            taken,
            locks,
            read_into: None,
            read: None,
            parts: Vec::new(),
            in_flight: 0,
            failed: None,
        });
        self.run_job(jid);
    }

    /// Fills started or running whose base only they hold: space a commit
    /// will free (for a write that found none).
    fn fills_to_free(&mut self) -> bool {
        let candidates: Vec<u64> = self
            .partial
            .iter()
            .filter(|(_, pt)| pt.has_base() && self.chunks.refs(pt.base) == 1)
            .map(|(&q, _)| q)
            .collect();
        let mut any = false;
        for q in candidates {
            let lc = self.chunks.lc(q).expect("mapped");
            any |= self.filling.contains(&lc) || self.start_fill(q);
        }
        any
    }

    /// A chunk was placed at `q` for a place that wants `target`: only one
    /// further than the next chunk gives the defragmenter work (a fresh
    /// origin chunk at its home does not, so writing a new pool never
    /// starts a scan of the maps).
    fn placed(&mut self, q: u64, target: u64) {
        self.defrag_wake(self.cfg.defrag && q.abs_diff(target) > 1);
    }

    fn record(&mut self, slot: u32, lc: u64, location: u64) {
        self.batch.push(Record::Core(JournalRecord::Exception { volume: slot, chunk: lc, location }));
    }

    /// `p` lost a sharer: freed once that is durable if none is left,
    /// else not written in place until then.
    fn unshare(&mut self, p: u64) {
        if self.chunks.unshare(p) == 0 {
            self.frees.push((self.batch_no, p));
            if self.partial.contains_key(&p) {
                // Unmapped while partial: its share of its base goes too
                // (its record after the map records that unmap it: until
                // those are durable the map still reads it partial).
                self.batch_partial.remove(&p);
                self.make_whole(p);
            }
        } else {
            self.held.insert(p, self.batch_no);
        }
    }

    fn apply(&mut self, change: Change) {
        match change {
            Change::Map { slot, lc, q } => {
                let vol = self.vols[slot as usize].as_mut().expect("live volume");
                let old = vol.map.insert(lc, 1, q);
                assert!(old.is_empty(), "a fresh chunk for a mapped lc");
                self.chunks.map(q, lc, 1);
                self.record(slot, lc, q);
            }
            Change::Private { slot, lc, q } => {
                let vol = self.vols[slot as usize].as_mut().expect("live volume");
                let old = vol.map.insert(lc, 1, q);
                self.chunks.map(q, lc, 1);
                self.record(slot, lc, q);
                if let Some(e) = old.first() {
                    self.unshare(e.value);
                }
            }
            Change::CowOut { lc, p, q } | Change::Move { lc, p, q } => {
                let keep_origin = matches!(change, Change::CowOut { .. });
                let mut moved = 0u16;
                for s in 0..self.vols.len() {
                    if s == 0 && keep_origin {
                        continue;
                    }
                    let Some(vol) = self.vols[s].as_mut() else { continue };
                    if vol.map.get(lc) == Some(p) {
                        vol.map.insert(lc, 1, q);
                        moved += 1;
                        self.record(s as u32, lc, q);
                    }
                }
                self.chunks.map(q, lc, moved);
                if !keep_origin {
                    // Partial chunks reading from `p` read from `q` now
                    // (their records after the map records above).
                    let rebased: Vec<u64> =
                        self.partial.iter().filter(|(_, pt)| pt.base == p).map(|(&pq, _)| pq).collect();
                    for pq in rebased {
                        self.partial.get_mut(&pq).expect("partial").base = q;
                        self.based.remove(&p);
                        *self.based.entry(q).or_default() += 1;
                        self.chunks.share(q);
                        self.record_partial_last(pq);
                        self.unshare(p);
                    }
                }
                for _ in 0..moved {
                    self.unshare(p);
                }
                if !keep_origin {
                    self.counters.defrag_moves += 1;
                }
            }
            Change::Unmap { slot, lc } => {
                let vol = self.vols[slot as usize].as_mut().expect("live volume");
                let old = vol.map.remove(lc, 1);
                self.record(slot, lc, UNMAPPED);
                if let Some(e) = old.first() {
                    self.unshare(e.value);
                }
            }
            Change::Redirect { lc, p, q, coff, len } => {
                let mut written = Sectors::default();
                written.set(coff / SECTOR, len / SECTOR);
                self.partial.insert(q, Partial { base: p, written });
                *self.based.entry(p).or_default() += 1;
                self.record_partial(q);
                let vol = self.vols[0].as_mut().expect("the origin");
                let old = vol.map.insert(lc, 1, q);
                debug_assert_eq!(old.first().map(|e| e.value), Some(p));
                self.chunks.map(q, lc, 1);
                self.record(0, lc, q);
                // The origin's share of `p` is now `q`'s: `p`'s count stays.
            }
            Change::Fresh { slot, lc, q, coff, len } => {
                let mut written = Sectors::default();
                written.set(coff / SECTOR, len / SECTOR);
                self.partial.insert(q, Partial { base: NO_BASE, written });
                // Its record before its map record (as a redirect's).
                self.record_partial(q);
                self.apply(Change::Map { slot, lc, q });
            }
            Change::Written { q, coff, len } => {
                let n = self.sectors_per_chunk();
                let Some(pt) = self.partial.get_mut(&q) else { return };
                if !pt.written.set(coff / SECTOR, len / SECTOR) {
                    return;
                }
                if pt.written.all(n) {
                    self.make_whole(q);
                } else {
                    self.record_partial(q);
                }
            }
        }
    }

    // ---- commits ----

    fn volume_entries(&self) -> Vec<VolumeEntry> {
        self.vols.iter().flatten().map(|v| v.entry.clone()).collect()
    }

    /// The next checkpoint: `(generation, bytes)`.
    fn encode_checkpoint(&self) -> (u64, Vec<u8>) {
        let mut runs: Vec<Run> = Vec::new();
        for vol in self.vols.iter().flatten() {
            for e in vol.map.iter() {
                let mut off = 0;
                while off < e.length {
                    let n = (e.length - off).min(u64::from(u32::MAX));
                    runs.push((vol.entry.slot, e.start + off, n as u32, e.value + off));
                    off += n;
                }
            }
        }
        let partials: Vec<Record> = self.partial.iter().map(|(&q, pt)| meta::partial_record(q, pt)).collect();
        let gen = self.checkpoint_gen + 1;
        (
            gen,
            meta::encode_checkpoint(
                &self.cfg,
                gen,
                self.journal_seq,
                &self.volume_entries(),
                &runs,
                &partials,
            ),
        )
    }

    fn maybe_commit(&mut self) {
        if self.commit.is_some() || !self.serving() {
            return;
        }
        let wanted = self.want_checkpoint
            || self.want_commit
            || self.commit_waiters.iter().any(|&(need, _)| need > self.durable_no);
        if !wanted {
            return;
        }
        self.want_commit = false;
        let no = self.batch_no;
        self.batch_no += 1;
        let records = std::mem::take(&mut self.batch);
        if !records.is_empty() && records.iter().all(|r| matches!(r, Record::Partial { .. })) {
            self.counters.partial_only_commits += 1;
        }
        self.batch_partial.clear();
        let payloads = meta::pack_journal(&records);
        let blocks = payloads.len() as u64;
        let full = self.journal_seq + blocks - self.journal_start > self.cfg.journal_blocks;
        let mut writes = VecDeque::new();
        let mut checkpoint = None;
        let mut next_seq = self.journal_seq;
        if self.want_checkpoint || full {
            self.want_checkpoint = false;
            let (gen, bytes) = self.encode_checkpoint();
            let at = self.cfg.checkpoint_at(gen % 2);
            let mut group = Vec::new();
            let mut o = 0;
            while o < bytes.len() {
                let n = (bytes.len() - o).min(REQUEST_BYTES_MAX as usize);
                group.push((at + o as u64, bytes[o..o + n].to_vec()));
                o += n;
            }
            writes.push_back(group);
            checkpoint = Some((gen, self.journal_seq));
        } else {
            for payload in payloads {
                let block = meta::encode_journal(next_seq, &payload);
                writes.push_back(
                    (0..2).map(|c| (self.cfg.journal_block_at(next_seq, c), block.clone())).collect(),
                );
                next_seq += 1;
            }
        }
        self.commit = Some(Commit { no, stage: CommitStage::Flushing, writes, checkpoint, next_seq });
        self.lower(Owner::Commit, Request::new(ReqId(0), Op::Flush, 0, 0));
    }

    fn commit_io_done(&mut self, result: Result<(), IoError>) {
        if let Err(e) = result {
            self.phase = Phase::Failed(format!("pool: metadata commit failed below: {e}"));
            let waiters = std::mem::take(&mut self.commit_waiters);
            self.commit = None;
            for (_, jid) in waiters {
                self.end_job(jid, Err(IoError::Io));
            }
            return;
        }
        let commit = self.commit.as_mut().expect("a commit in flight");
        if let CommitStage::Writing { left } = commit.stage {
            if left > 1 {
                commit.stage = CommitStage::Writing { left: left - 1 };
                return;
            }
        }
        if commit.writes.is_empty() {
            let commit = self.commit.take().expect("in flight");
            return self.commit_done(commit);
        }
        // Journal blocks one at a time (a later block never durable before
        // an earlier one).
        let issue = commit.writes.pop_front().expect("checked");
        commit.stage = CommitStage::Writing { left: issue.len() };
        for (at, bytes) in issue {
            let mut w = Request::write(ReqId(0), at, Bytes::from(bytes));
            w.fua = true;
            w.background = true;
            self.lower(Owner::Commit, w);
        }
    }

    fn commit_done(&mut self, commit: Commit) {
        // The share counts and the reverse map against a fresh census.
        #[cfg(debug_assertions)]
        {
            let mut t = ChunkTable::census(self.cfg.data_chunks, self.vols.iter().flatten().map(|v| &v.map))
                .expect("one lc per data chunk");
            Self::add_bases(&self.cfg, &mut t, &self.partial).expect("partial chunks as they should be");
            assert_eq!(self.chunks, t);
        }
        self.counters.commits += 1;
        match commit.checkpoint {
            Some((gen, start)) => {
                self.counters.checkpoints += 1;
                self.checkpoint_gen = gen;
                self.journal_start = start;
            }
            None => {
                self.counters.journal_blocks += commit.next_seq - self.journal_seq;
                self.journal_seq = commit.next_seq;
            }
        }
        let no = commit.no;
        self.durable_no = no;
        let held_count = self.held.len();
        self.held.retain(|_, b| *b > no);
        // Chunks no longer held may be put back (`restore_home`).
        self.defrag_wake(self.cfg.defrag && self.held.len() < held_count);
        let (ready, later): (Vec<_>, Vec<_>) = self.frees.drain(..).partition(|&(b, _)| b <= no);
        self.frees = later;
        // Freed space may let the defragmenter move copies nearer.
        self.defrag_wake(self.cfg.defrag && !ready.is_empty());
        for (_, p) in ready {
            self.free.release(p, 1);
        }
        let (ready, later): (Vec<_>, Vec<_>) = self.commit_waiters.drain(..).partition(|&(n, _)| n <= no);
        self.commit_waiters = later;
        for (_, jid) in ready {
            self.run_job(jid);
        }
    }

    // ---- snapshots ----

    fn slot_named(&self, name: &str) -> Result<u32, String> {
        self.vols
            .iter()
            .flatten()
            .find(|v| v.entry.name == name)
            .map(|v| v.entry.slot)
            .ok_or_else(|| format!("pool: no volume named `{name}` (see `snapshot list`)"))
    }

    fn snapshot_message(&mut self, words: &[&str]) -> Result<String, String> {
        let usage = "pool: usage: snapshot create NAME [of VOLUME] [ro] | snapshot delete NAME | \
                     snapshot merge NAME | snapshot list | snapshot sync";
        if !self.serving() {
            return Err("pool: not serving (bring-up failed or in progress)".into());
        }
        match words {
            ["list"] => Ok(self.list()),
            ["sync"] => {
                if self.structural.is_none()
                    && !self.want_checkpoint
                    && self.durable_no >= self.structural_batch
                {
                    Ok("durable".into())
                } else {
                    Err("pool: the last snapshot operation is not durable yet; retry".into())
                }
            }
            _ if self.structural.is_some() => {
                Err("pool: a snapshot operation is in progress; retry when it is done".into())
            }
            ["create", name, rest @ ..] => {
                let (of, read_only) = match rest {
                    [] => ("origin", false),
                    ["ro"] => ("origin", true),
                    ["of", v] => (*v, false),
                    ["of", v, "ro"] => (*v, true),
                    _ => return Err(usage.into()),
                };
                let valid = !name.is_empty()
                    && name.len() <= config::NAME_BYTES_MAX
                    && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b));
                if !valid {
                    return Err(format!(
                        "pool: bad snapshot name `{name}`: 1 to {} letters, digits, `_`, `.` or `-`",
                        config::NAME_BYTES_MAX
                    ));
                }
                if self.slot_named(name).is_ok() {
                    return Err(format!("pool: a volume named `{name}` exists already"));
                }
                let of = self.slot_named(of)?;
                if !self.vols.iter().any(Option::is_none) {
                    return Err(format!(
                        "pool: all {} volume slots are in use (`volumes_max`): delete a snapshot first",
                        self.cfg.volumes_max
                    ));
                }
                let extents = self.vols[of as usize].as_ref().expect("named").map.extent_count() as u64;
                if self.meta_units() + extents + 2 > self.cfg.extents_max() {
                    return Err("pool: no room for the snapshot's map in the pool's metadata (ENOSPC)".into());
                }
                self.structural = Some(Structural::Create { name: name.to_string(), of, read_only });
                self.run_structural();
                Ok(format!(
                    "created snapshot `{name}` of `{}`",
                    self.vols[of as usize].as_ref().expect("live").entry.name
                ))
            }
            ["delete", name] => {
                let slot = self.slot_named(name)?;
                if slot == 0 {
                    return Err(
                        "pool: the origin cannot be deleted (delete the pool's device instead)".into()
                    );
                }
                self.structural = Some(Structural::Delete { slot });
                self.run_structural();
                Ok(format!("deleted `{name}`"))
            }
            ["merge", name] => {
                let slot = self.slot_named(name)?;
                if slot == 0 {
                    return Err("pool: merge takes a snapshot; the origin is what it rolls back".into());
                }
                self.structural = Some(Structural::Merge { slot });
                self.run_structural();
                Ok(format!(
                    "merged `{name}` into the origin (the origin now holds its contents; `{name}` is gone)"
                ))
            }
            _ => Err(usage.into()),
        }
    }

    fn list(&self) -> String {
        let vb = self.cfg.volume_bytes();
        let mut out = Vec::new();
        for v in self.vols.iter().flatten() {
            let parent = v
                .entry
                .parent
                .and_then(|p| self.vols[p as usize].as_ref())
                .map_or("-".to_string(), |p| p.entry.name.clone());
            out.push(format!(
                "{} slot={} offset_bytes={} size_bytes={} parent={} mode={} allocated_bytes={}",
                v.entry.name,
                v.entry.slot,
                u64::from(v.entry.slot) * vb,
                vb,
                parent,
                if v.entry.read_only { "ro" } else { "rw" },
                v.map.mapped_blocks() * self.cfg.chunk_bytes
            ));
        }
        out.join("\n")
    }

    /// Applies the pending snapshot operation once nothing is in flight.
    fn run_structural(&mut self) {
        if self.structural.is_none() || !self.jobs.is_empty() {
            return;
        }
        match self.structural.take().expect("checked") {
            Structural::Create { name, of, read_only } => {
                let slot = self.vols.iter().position(Option::is_none).expect("checked free") as u32;
                let map = self.vols[of as usize].as_ref().expect("live").map.clone();
                for e in map.iter() {
                    for p in e.value..e.value + e.length {
                        self.chunks.share(p);
                    }
                }
                self.vols[slot as usize] =
                    Some(Volume { entry: VolumeEntry { slot, name, parent: Some(of), read_only }, map });
            }
            Structural::Delete { slot } => self.drop_volume(slot),
            Structural::Merge { slot } => {
                let map = self.vols[slot as usize].as_ref().expect("live").map.clone();
                for e in map.iter() {
                    for p in e.value..e.value + e.length {
                        self.chunks.share(p);
                    }
                }
                let old = std::mem::replace(&mut self.vols[0].as_mut().expect("origin").map, map);
                for e in old.iter() {
                    for p in e.value..e.value + e.length {
                        self.unshare(p);
                    }
                }
                self.drop_volume(slot);
            }
        }
        self.want_checkpoint = true;
        self.structural_batch = self.batch_no;
        self.defrag_wake(self.cfg.defrag);
        self.maybe_commit();
    }

    fn drop_volume(&mut self, slot: u32) {
        let vol = self.vols[slot as usize].take().expect("live");
        for e in vol.map.iter() {
            for p in e.value..e.value + e.length {
                self.unshare(p);
            }
        }
        for v in self.vols.iter_mut().flatten() {
            if v.entry.parent == Some(slot) {
                v.entry.parent = vol.entry.parent;
            }
        }
    }

    // ---- defragmentation ----

    /// The next chunk worth moving: `(lc, from, to)`, scanning at most a
    /// bounded number of chunks from the cursor.
    fn defrag_candidate(&mut self, quiet: bool) -> Option<Vec<(u64, u64, u64)>> {
        let slots = self.cfg.volumes_max as u32;
        let n = self.cfg.volume_chunks;
        self.counters.defrag_scans += 1;
        let mut budget = 4096u64;
        let (mut s, mut lc) = self.defrag_cursor;
        while budget > 0 {
            if lc >= n {
                lc = 0;
                s += 1;
                if s >= slots {
                    self.defrag_wraps += 1;
                    if self.defrag_wraps >= 2 {
                        break;
                    }
                    s = 0;
                }
            }
            let Some(vol) = self.vols[s as usize].as_ref() else {
                lc = n;
                continue;
            };
            let Some(e) = vol.map.extent_at_or_after(lc).map(|e| {
                let skip = lc.saturating_sub(e.start);
                Extent { start: e.start + skip, length: e.length - skip, value: e.value + skip }
            }) else {
                lc = n;
                continue;
            };
            for i in 0..e.length.min(budget) {
                let (l, p) = (e.start + i, e.value + i);
                budget -= 1;
                if let Some(found) = self.defrag_chunk(quiet, s, l, p) {
                    self.defrag_wraps = 0;
                    return found;
                }
            }
            lc = e.start + e.length;
            if budget == 0 {
                self.defrag_cursor = (s, lc);
                return None;
            }
        }
        self.defrag_pending = false;
        self.defrag_cursor = (0, 0);
        self.defrag_wraps = 0;
        None
    }

    /// Work for the defragmenter may have appeared (when `cond`): scan
    /// again, and count a whole pass afresh from here, so that a chunk
    /// behind the cursor is not missed.
    fn defrag_wake(&mut self, cond: bool) {
        if cond {
            self.defrag_pending = true;
            self.defrag_wraps = 0;
        }
    }

    /// What the defragmenter does with `s`'s chunk `p` at `l`:
    /// `Some(moves)` ends the scan with them (`Some(None)`: a plan was
    /// made but its first stage must wait), `None` goes on to the next.
    #[allow(clippy::option_option)]
    fn defrag_chunk(&mut self, quiet: bool, s: u32, l: u64, p: u64) -> Option<Option<Vec<(u64, u64, u64)>>> {
        let partial_home = s == 0 && self.goes_home(p);
        if self.locked.contains(&l) || self.held.contains_key(&p) || (self.pinned(p) && !partial_home) {
            return None;
        }
        // A snapshot's chunk at its lc's home is where the origin's
        // layout put it (the origin's write was redirected away
        // from it): moving it after the origin's would take the
        // snapshot out of line too.
        if s != 0 && p == self.place.home(l) {
            return None;
        }
        let target = if s == 0 { self.place.home(l) } else { self.origin_ref(l) };
        if self.pinned(target) && !partial_home {
            return None;
        }
        let d = p.abs_diff(target);
        if s == 0 && d > 1 && self.chunks.lc(target) == Some(l) {
            // Snapshots hold the origin's home (a redirected write).
            if !quiet {
                self.line_up_deferred = true;
            } else if self.held.contains_key(&target) {
                // Its redirect not durable yet (no flush came):
                // commit now, idle, rather than wait for one.
                self.want_commit = true;
            } else if let Some(plan) = self.restore_home(l, p, target) {
                self.defrag_cursor = (s, l + 1);
                self.defrag_plan = plan;
                return Some(self.next_planned_stage().ok().flatten());
            }
            return None;
        }
        if d <= 1 || (s == 0 && (!self.free.is_free(target, 1) || self.has_copy(l, p))) {
            return None;
        }
        if let Some(q) = self.free.nearest_unit(target, 0, self.cfg.data_chunks) {
            if q.abs_diff(target) + 1 < d && (s != 0 || q == target) {
                self.defrag_cursor = (s, l + 1);
                return Some(Some(vec![(l, p, q)]));
            }
        }
        if s != 0 && !quiet {
            self.line_up_deferred = true;
        } else if s != 0 {
            if let Some(plan) = self.line_up(l, p, target).and_then(|u| self.line_up_stages(u)) {
                self.defrag_cursor = (s, l + 1);
                self.defrag_plan = plan;
                return Some(self.next_planned_stage().ok().flatten());
            }
        }
        None
    }

    /// The stages that put the origin's chunk `p` of `lc` back at its home
    /// `h`, which snapshots map at the same `lc` (a redirected write left
    /// the old chunk to them there): their chunk first to where the
    /// placement puts a copy of `h`, then the origin's home, the first
    /// durable before the second overwrites the chunk it freed. The
    /// origin's layout is then the one a copy-out keeps, the copy made in
    /// idle time instead of in front of the write. A partial chunk `p`
    /// (`defrag_partial_home`) goes the same way: the first stage moves
    /// its base `h` aside and rebases it there, the second writes it home
    /// composed as a fill composes it ([`Pool::move_steps`]). `None`: `h`
    /// is held (its change of sharers not durable yet) or there is no room.
    fn restore_home(&mut self, lc: u64, p: u64, h: u64) -> Option<VecDeque<Vec<(u64, u64, u64)>>> {
        assert_ne!(p, h, "the origin's chunk is away from its home");
        assert_eq!(self.chunks.lc(h), Some(lc), "snapshots map the home at the same lc");
        if self.locked.contains(&lc) {
            return None;
        }
        assert!(!self.held.contains_key(&h), "the home's sharers changed durably");
        let aside = self.aside_in_reach(h)?;
        // Partial chunks in a run over homes in a run go together (each
        // stage one write), up to one fill run's bytes, if their bases fit
        // a free run there.
        let mut n = 1;
        if self.partial.contains_key(&p) {
            let max = (FILL_RUN_BYTES_MAX / self.cfg.chunk_bytes).max(1);
            while n < max
                && self.goes_home(p + n)
                && self.chunks.lc(p + n) == Some(lc + n)
                && self.place.home(lc + n) == h + n
                && self.partial[&(p + n)].base == h + n
                && !self.locked.contains(&(lc + n))
                && !self.held.contains_key(&(h + n))
                && self.free.is_free(aside + n, 1)
            {
                n += 1;
            }
        }
        let moves = |from: u64, to: u64| (0..n).map(|i| (lc + i, from + i, to + i)).collect();
        Some(VecDeque::from([moves(h, aside), moves(p, h)]))
    }

    /// Where the snapshots' chunk at the origin's home `h` goes when the
    /// origin's chunk is put back there ([`Pool::restore_home`]): the free
    /// chunk nearest `h` within a line-up's reach ([`Pool::line_up_run_max`]
    /// chunks), which a line-up can then bring next to `h` so that both
    /// volumes read in line. `None` if there is none: the put-home would
    /// only move the jump out and back from the origin's read to the
    /// snapshots' (a layout without free chunks near the homes:
    /// `contiguous`, few slices), at the cost of the moves, so the
    /// origin's chunk stays where it is (and a partial one is filled there).
    fn aside_in_reach(&self, h: u64) -> Option<u64> {
        let reach = self.line_up_run_max();
        let hi = h.saturating_add(reach + 1).min(self.cfg.data_chunks);
        self.free.nearest_unit(h, h.saturating_sub(reach), hi)
    }

    /// Where a sequential read of the origin jumps: next lcs both mapped
    /// whose chunks are not in order within a read-through's gap
    /// ([`READ_THROUGH_CHUNKS_MAX`]). Redirected writes not put back yet
    /// make them; a copy-out or a line-up does not.
    fn origin_jumps_count(&self) -> u64 {
        let Some(origin) = self.vols[0].as_ref() else { return 0 };
        let mut jumps = 0;
        let mut last: Option<(u64, u64)> = None; // (lc, chunk) of the previous extent's end
        for e in origin.map.iter() {
            if let Some((lc, p)) = last {
                let q = e.value;
                if lc + 1 == e.start && (q <= p || q - p - 1 > READ_THROUGH_CHUNKS_MAX) {
                    jumps += 1;
                }
            }
            last = Some((e.start + e.length - 1, e.value + e.length - 1));
        }
        jumps
    }

    /// Whether a snapshot maps `lc` to a chunk of its own, not the
    /// origin's `p`: the origin's chunk then stays where it is, next to
    /// that copy, rather than going home (a line-up may have put it there).
    fn has_copy(&self, lc: u64, p: u64) -> bool {
        self.vols.iter().skip(1).flatten().any(|v| v.map.get(lc).is_some_and(|q| q != p))
    }

    /// Moves that put a snapshot's chunk `p` of `lc` next to the origin's
    /// chunk `h` there (a *line-up*): on one side of `h`, the chunks from
    /// `h`'s neighbour up to the first free chunk, or up to `p` itself,
    /// each shift one place away from `h` (whoever maps them: the reverse
    /// map names their lc), and the copy takes the place this frees next
    /// to `h`; a copy in the way of the shift first moves aside to a free
    /// chunk. At most [`LINE_UP_SHIFT_MAX`] chunks shift; of the two sides,
    /// the one with fewer moves. Both volumes then read in line but for
    /// one skipped chunk each (which reads read through), where the
    /// snapshot jumped out to the copy and back. No snapshot chunk that is
    /// shifted ends farther from its origin chunk than it was, so line-ups
    /// only ever bring copies nearer (and the defragmenter stops).
    fn line_up(&self, lc: u64, p: u64, h: u64) -> Option<LineUp> {
        let origin = &self.vols[0].as_ref()?.map;
        if p.abs_diff(h) <= 1 || origin.get(lc) != Some(h) {
            return None;
        }
        let plans = [true, false].map(|up| self.line_up_side(origin, lc, p, h, up));
        plans.into_iter().flatten().min_by_key(|l| l.moves.len())
    }

    /// The stages of moves that carry out a line-up; `None` if there is
    /// no room for them. A few moves go one after the other, each into
    /// the chunk the one before freed (each stage is made durable before
    /// the next: a chunk the durable maps still name is never
    /// overwritten). More go in two stages, each one commit: every chunk
    /// to a free run nearby, then each to its place.
    fn line_up_stages(&mut self, line_up: LineUp) -> Option<VecDeque<Vec<(u64, u64, u64)>>> {
        let LineUp { moves, free_end } = line_up;
        let n = moves.len() as u64;
        if n < LINE_UP_STAGED_MIN {
            // The last chunk of the run first (into the free chunk at its
            // end, or into the copy's place once the copy is aside).
            let mut stages: VecDeque<Vec<_>> = VecDeque::new();
            let (lc, p, to) = *moves.last().expect("the copy's move");
            let from = match free_end {
                Some(_) => p,
                None => {
                    let temp = self.free.nearest_unit(p, 0, self.cfg.data_chunks)?;
                    stages.push_back(vec![(lc, p, temp)]);
                    temp
                }
            };
            stages.extend(moves[..moves.len() - 1].iter().rev().map(|&m| vec![m]));
            stages.push_back(vec![(lc, from, to)]);
            return Some(stages);
        }
        // A free run for all of them, not the free chunk the run shifts into.
        if let Some(f) = free_end {
            self.free.take(f, 1);
        }
        let temp = Nearest.choose(&self.free, n, moves[0].1);
        if let Some(f) = free_end {
            self.free.release(f, 1);
        }
        let temp = temp?;
        // In the order of their places (a run of chunks): each stage is
        // then one write, and the second one read.
        let mut moves = moves;
        moves.sort_unstable_by_key(|m| m.2);
        let aside = moves.iter().zip(temp..).map(|(&(lc, from, _), t)| (lc, from, t)).collect();
        let placed = moves.iter().zip(temp..).map(|(&(lc, _, to), t)| (lc, t, to)).collect();
        Some(VecDeque::from([aside, placed]))
    }

    /// The most chunks a line-up shifts: [`LINE_UP_SHIFT_MAX`], fewer if
    /// a stage (the run and the copy) would not fit one lower request.
    fn line_up_run_max(&self) -> u64 {
        LINE_UP_SHIFT_MAX.min(u64::from(REQUEST_BYTES_MAX) / self.cfg.chunk_bytes - 1)
    }

    /// [`Pool::line_up`] on the side of `h` above it (`up`) or below.
    fn line_up_side(&self, origin: &BlockMap<u64>, lc: u64, p: u64, h: u64, up: bool) -> Option<LineUp> {
        let n = self.cfg.data_chunks;
        let away = |a: u64| if up { a.checked_add(1).filter(|&b| b < n) } else { a.checked_sub(1) };
        // The run of chunks to shift: `(lc, at)` from `h`'s neighbour on.
        let mut run: Vec<(u64, u64)> = Vec::new();
        let mut at = away(h)?;
        while at != p && !self.free.is_free(at, 1) {
            if run.len() as u64 >= self.line_up_run_max() {
                return None;
            }
            // A chunk taken but in no map (a move or write in flight, or
            // freed but not durably yet) stays where it is.
            let l = self.chunks.lc(at)?;
            if self.locked.contains(&l) || self.held.contains_key(&at) {
                return None;
            }
            run.push((l, at));
            at = away(at)?;
        }
        let shifted = |a: u64| if run.iter().any(|r| r.1 == a) { away(a) } else { Some(a) };
        for &(l, a) in &run {
            let o = origin.get(l);
            if o == Some(a) {
                continue; // the origin's chunk: it may leave its home
            }
            let (t, t_after) = match o {
                Some(o) => (o, shifted(o)?),
                None => (self.place.home(l), self.place.home(l)),
            };
            if away(a)?.abs_diff(t_after) > a.abs_diff(t).max(1) {
                return None;
            }
        }
        let mut moves = Vec::with_capacity(run.len() + 1);
        for &(l, a) in &run {
            moves.push((l, a, away(a)?));
        }
        moves.push((lc, p, away(h)?));
        Some(LineUp { moves, free_end: (at != p).then_some(at) })
    }

    /// The next stage of a line-up in progress: `Err(())` to wait (the
    /// stage before is in flight), `Ok(None)` if none is left or the maps
    /// changed under it (it is dropped; the scan finds what is left).
    fn next_planned_stage(&mut self) -> Result<Option<Vec<(u64, u64, u64)>>, ()> {
        if self.defrag_plan.is_empty() {
            return Ok(None);
        }
        if self.jobs.values().any(|j| j.upper.is_none()) {
            return Err(());
        }
        let stage = self.defrag_plan.pop_front().expect("checked");
        // With `defrag_partial_home` a stage may move bases (their partial
        // chunks rebased) or a run of partial chunks only (composed): a
        // partial chunk going home.
        let home = self.cfg.defrag_partial_home;
        let composed = self.composed_run(&stage).is_some();
        let valid = stage.iter().all(|&(lc, p, q)| {
            self.vols.iter().flatten().any(|v| v.map.get(lc) == Some(p))
                && self.free.is_free(q, 1)
                && !self.locked.contains(&lc)
                && !self.held.contains_key(&p)
                && if home { composed || !self.partial.contains_key(&p) } else { !self.pinned(p) }
        });
        if !valid {
            self.defrag_plan.clear();
            return Ok(None);
        }
        Ok(Some(stage))
    }

    /// The reads that put the chunks `moves` come from in a buffer, in
    /// order: a run of chunks one read; a partial chunk (a single move:
    /// one going home) read with its base and composed, as a run fill
    /// composes.
    fn move_steps(&mut self, moves: &[(u64, u64, u64)]) -> VecDeque<Step> {
        if let Some((q, n)) = self.composed_run(moves) {
            self.counters.partial_homed += n;
            return self.compose_steps(q, n);
        }
        let mut steps = VecDeque::new();
        let mut i = 0;
        while i < moves.len() {
            let mut k = 1;
            while i + k < moves.len() && moves[i + k].1 == moves[i].1 + k as u64 {
                k += 1;
            }
            steps.push_back(Step::ReadBuf { p: moves[i].1, n: k as u64, at: i as u64 });
            i += k;
        }
        steps
    }

    /// `(q, n)` if `moves` take the run of partial chunks `q..q + n`.
    fn composed_run(&self, moves: &[(u64, u64, u64)]) -> Option<(u64, u64)> {
        let q = moves.first()?.1;
        // (A fresh chunk's partial has no base to compose with: never.)
        let run = moves
            .iter()
            .zip(q..)
            .all(|(m, p)| m.1 == p && self.partial.get(&p).is_some_and(|pt| pt.has_base()));
        run.then_some((q, moves.len() as u64))
    }

    /// Whether the defragmenter puts partial chunk `q` home composed
    /// rather than leave it to a fill (`defrag_partial_home`): the
    /// origin's, more than one chunk from its home, its base the home (a
    /// redirected write), or its base already moved aside for it (a plan
    /// under way).
    fn goes_home(&self, q: u64) -> bool {
        if !(self.cfg.defrag && self.cfg.defrag_partial_home) {
            return false;
        }
        let (Some(pt), Some(lc)) = (self.partial.get(&q), self.chunks.lc(q)) else { return false };
        if !pt.has_base() {
            return false;
        }
        let home = self.place.home(lc);
        let origin = self.vols[0].as_ref().is_some_and(|o| o.map.get(lc) == Some(q));
        origin
            && q.abs_diff(home) > 1
            && (self.defrag_plan.iter().flatten().any(|m| m.1 == q)
                || pt.base == home && self.aside_in_reach(home).is_some())
    }

    /// The mean distance, in chunks ×1000, between each snapshot chunk
    /// not shared with the origin and the origin's chunk (or home) at its
    /// lc, now (after any defragmentation).
    fn copies_distance_now_milli(&self) -> u64 {
        let (mut sum, mut n) = (0u64, 0u64);
        for vol in self.vols.iter().skip(1).flatten() {
            for e in vol.map.iter() {
                for i in 0..e.length {
                    let target = self.origin_ref(e.start + i);
                    if target != e.value + i {
                        sum += (e.value + i).abs_diff(target);
                        n += 1;
                    }
                }
            }
        }
        (sum * 1000).checked_div(n).unwrap_or(0)
    }

    fn status_counters(&self) -> Vec<(String, u64)> {
        let k = &self.counters;
        let c = self.cfg.chunk_bytes;
        let allocated = self.cfg.data_chunks - self.free.free_units();
        let shared = self.chunks.shared_count();
        let extents = self.extents_count();
        let metadata_bytes = (1 + extents.div_ceil(config::EXTENTS_PER_BLOCK)) * META_BLOCK_BYTES;
        let mut v = vec![
            ("volumes_count".to_string(), self.vols.iter().flatten().count() as u64),
            ("data_bytes".into(), self.cfg.data_chunks * c),
            ("data_allocated_bytes".into(), allocated * c),
            ("data_free_bytes".into(), self.free.free_units() * c),
            ("metadata_area_bytes".into(), self.cfg.data_start_bytes),
            ("metadata_checkpoint_copy_bytes".into(), self.cfg.checkpoint_copy_bytes()),
            ("metadata_checkpoint_bytes".into(), metadata_bytes),
            ("metadata_extents_count".into(), extents),
            ("metadata_extents_max".into(), self.cfg.extents_max()),
            (
                "metadata_bytes_per_chunk_milli".into(),
                (extents * config::EXTENT_RECORD_BYTES * 1000).checked_div(allocated).unwrap_or(0),
            ),
            ("chunks_copied_count".into(), k.chunks_copied),
            ("copy_read_bytes".into(), k.copy_read_bytes),
            ("copy_written_bytes".into(), k.copy_written_bytes),
            ("chunks_shared_count".into(), shared),
            ("snapshot_private_chunks_count".into(), k.private_chunks),
            ("origin_redirected_chunks_count".into(), k.origin_redirected),
            ("full_overwrite_read_skipped_count".into(), k.full_overwrite_read_skipped),
            ("chunks_allocated_count".into(), k.allocated_chunks),
            (
                "copy_distance_mean_chunks_milli".into(),
                (k.copy_distance_sum * 1000).checked_div(k.copies_placed).unwrap_or(0),
            ),
            ("copies_distance_now_mean_chunks_milli".into(), self.copies_distance_now_milli()),
            ("origin_jumps_count".into(), self.origin_jumps_count()),
            ("defrag_moves_count".into(), k.defrag_moves),
            ("defrag_scans_count".into(), k.defrag_scans),
            ("commits_count".into(), k.commits),
            ("checkpoints_count".into(), k.checkpoints),
            ("journal_blocks_written_count".into(), k.journal_blocks),
            ("journal_start_seq".into(), self.journal_start),
            ("journal_next_seq".into(), self.journal_seq),
            ("nospace_count".into(), k.nospace),
            ("reads_count".into(), k.reads),
            ("writes_count".into(), k.writes),
            ("read_through_bytes".into(), k.read_through_bytes),
            ("joined_pieces_count".into(), k.joined_pieces),
            ("joined_requests_count".into(), k.joined_requests),
            ("origin_partial_redirects_count".into(), k.partial_redirects),
            ("commits_partial_only_count".into(), k.partial_only_commits),
            ("fresh_partial_chunks_count".into(), k.fresh_partial),
            ("partial_chunks_composed_home_count".into(), k.partial_homed),
            ("partial_chunks_count".into(), self.partial.len() as u64),
            ("chunks_filled_count".into(), k.chunks_filled),
            ("fill_runs_count".into(), k.fill_runs),
        ];
        for vol in self.vols.iter().flatten() {
            v.push((format!("volume_{}_allocated_bytes", vol.entry.name), vol.map.mapped_blocks() * c));
        }
        v
    }

    /// Whether partial chunks wait to be filled and the pool is quiet
    /// (idle time: [`LINE_UP_QUIET_NS`] without an upper request).
    fn fill_due(&self, now: Instant) -> bool {
        // A fresh chunk's zeroes are not written in idle time (that is
        // the write the partial chunk saves).
        // (`based` counts the partial chunks that have a base.)
        !self.based.is_empty() && self.quiet.is_idle(now)
    }

    fn pump(&mut self) {
        self.admit();
        self.run_structural();
        self.admit();
        self.maybe_commit();
    }
}

impl Target for Pool {
    fn name(&self) -> &'static str {
        "pool"
    }

    fn size_bytes(&self) -> u64 {
        self.cfg.volumes_max * self.cfg.volume_bytes()
    }

    fn handle_request(&mut self, now: Instant, req: Request) {
        self.quiet.request();
        self.quiet.arm(now, LINE_UP_QUIET_NS);
        self.waiting.push_back(req);
        self.pump();
    }

    fn handle_completion(&mut self, now: Instant, c: Completion) {
        let owner = self.owners.remove(&c.id.0).expect("completion of a request the pool sent");
        match owner {
            Owner::Bring(at) => {
                if let Err(e) = c.result {
                    self.phase =
                        Phase::Failed(format!("pool: metadata I/O failed below during bring-up: {e}"));
                } else if let Some(d) = c.data {
                    self.bring_reads.insert(at, d);
                }
                self.bring_left -= 1;
                if self.bring_left == 0 && !matches!(self.phase, Phase::Failed(_)) {
                    self.bring_done();
                }
            }
            Owner::Commit => self.commit_io_done(c.result),
            Owner::Joined => {
                for piece in self.split_joined(c) {
                    self.handle_completion(now, piece);
                }
            }
            Owner::Job(jid) => {
                let job = self.jobs.get_mut(&jid).expect("live job");
                if let Some(i) = job.parts.iter().position(|x| x.0 == c.id.0) {
                    // One part of a partial chunk's read: the ranges it gives.
                    if let Some(d) = &c.data {
                        let len = job.len as usize;
                        let buf = job.buf.get_or_insert_with(|| vec![0; len]);
                        for &(o, n) in &job.parts[i].1 {
                            let (o, n) = (o as usize, n as usize);
                            buf[o..o + n].copy_from_slice(&d[o..o + n]);
                        }
                    }
                }
                if job.in_flight > 1 {
                    // Not the last of the step's requests.
                    job.in_flight -= 1;
                    if let Err(e) = c.result {
                        job.failed.get_or_insert(e);
                    }
                    return self.pump();
                }
                job.in_flight = 0;
                if let Some(e) = c.result.err().or(job.failed.take()) {
                    return self.end_job(jid, Err(e));
                }
                if !job.parts.is_empty() {
                    job.parts.clear();
                    job.read = job.buf.take().map(Bytes::from);
                }
                match (job.read_into.take(), c.data) {
                    // A buffer read feeds the patch / write that follow.
                    (Some(at), Some(d)) => {
                        let o = (at * self.cfg.chunk_bytes) as usize;
                        let buf = job.buf.get_or_insert_with(Vec::new);
                        buf.resize(buf.len().max(o + d.len()), 0);
                        buf[o..o + d.len()].copy_from_slice(&d);
                    }
                    // An upper read, less what was read through after it.
                    (None, Some(d)) if job.read.is_none() => job.read = Some(d.slice(..job.len as usize)),
                    _ => {}
                }
                self.run_job(jid);
            }
        }
        self.pump();
    }

    fn poll_lower(&mut self) -> Option<Request> {
        if std::mem::take(&mut self.join_due) {
            self.join_queued();
        }
        self.lower_q.pop_front()
    }

    fn poll_timeout(&self) -> Option<Instant> {
        (self.line_up_deferred || !self.partial.is_empty()).then(|| self.quiet.poll_timeout()).flatten()
    }

    fn handle_timeout(&mut self, now: Instant) {
        self.quiet.timeout(now, false);
        if self.line_up_deferred && self.quiet.is_idle(now) {
            // Quiet long enough: scan again, line-ups included.
            self.line_up_deferred = false;
            self.defrag_wake(self.cfg.defrag);
        }
    }

    fn poll_upper(&mut self) -> Option<Completion> {
        self.upper_q.pop_front()
    }

    fn is_ready(&self) -> bool {
        self.serving()
    }

    fn status(&self) -> Status {
        let mut config = vec![
            ("chunk_size".to_string(), self.cfg.chunk_bytes.to_string()),
            ("volume_size".into(), self.cfg.volume_bytes().to_string()),
            ("volumes_max".into(), self.cfg.volumes_max.to_string()),
            ("placement".into(), self.place.name().to_string()),
            ("defrag".into(), self.cfg.defrag.to_string()),
            ("zero_new_chunks".into(), self.cfg.zero_new_chunks.to_string()),
            ("zero_new_chunks_with".into(), self.cfg.zero_with.name().to_string()),
            (
                "origin_shared_write".into(),
                (if self.cfg.redirect_origin { "redirect" } else { "copy-out" }).to_string(),
            ),
            ("journal_blocks".into(), self.cfg.journal_blocks.to_string()),
        ];
        if self.cfg.placement == PlacementKind::Sliced {
            config.push(("slices".into(), self.cfg.slices.to_string()));
        }
        config.extend(self.place.config());
        if let Some(n) = &self.notice {
            config.push(("notice".into(), n.clone()));
        }
        if let Phase::Failed(e) = &self.phase {
            config.push(("error".into(), e.clone()));
        }
        Status { target: "pool".into(), config, counters: self.status_counters() }
    }

    fn message(&mut self, _now: Instant, msg: &str) -> Result<String, String> {
        let words: Vec<&str> = msg.split_whitespace().collect();
        match words.as_slice() {
            ["snapshot", rest @ ..] => {
                let r = self.snapshot_message(rest);
                self.pump();
                r
            }
            _ => Err(format!("pool: unknown message `{msg}` (snapshot create|delete|merge|list)")),
        }
    }

    fn background_offer(&self, now: Instant) -> Option<layoutd_core::background::Offer> {
        use layoutd_core::background::{JobClass, Offer};
        let defrag = self.cfg.defrag && (self.defrag_pending || !self.defrag_plan.is_empty());
        ((defrag || self.fill_due(now)) && self.serving() && self.structural.is_none())
            .then_some(Offer { class: JobClass::Reorganisation })
    }

    fn background_step(&mut self, now: Instant) -> Option<u64> {
        if self.fill_due(now) {
            // One fill at a time, before any defragmentation (which
            // leaves partial chunks and their bases where they are).
            if self.jobs.values().any(|j| j.upper.is_none()) {
                return None;
            }
            // Partial chunks the defragmenter puts home are left to it.
            let q = self.partial.iter().filter(|(_, pt)| pt.has_base()).map(|(&q, _)| q).find(|&q| {
                !self.locked.contains(&self.chunks.lc(q).expect("a partial chunk is mapped"))
                    && !self.goes_home(q)
            });
            if let Some(q) = q {
                // Bytes moved: a fill reads its base and writes what its
                // chunk lacks; a run fill also reads the run as it is.
                let n = self.start_fill_run(q);
                return Some(if n > 1 { 3 } else { 2 } * n * self.cfg.chunk_bytes);
            }
            if self.partial.keys().all(|&q| !self.goes_home(q)) {
                return None;
            }
        }
        if !self.cfg.defrag {
            return None;
        }
        let (moves, planned) = match self.next_planned_stage() {
            Err(()) => return None,
            Ok(Some(m)) => (m, true),
            Ok(None) => {
                let found = self.defrag_candidate(self.quiet.is_idle(now));
                self.maybe_commit();
                let m = found?;
                (m, !self.defrag_plan.is_empty())
            }
        };
        // One job moves them all: the chunks they go to are a run (one
        // write), those they come from read a run at a time; a line-up's
        // stages are each made durable before the next reuses the chunks
        // they free.
        let q0 = moves[0].2;
        assert!(moves.iter().zip(q0..).all(|(m, q)| m.2 == q), "a stage goes to a run of chunks");
        let n = moves.len() as u64;
        let mut steps = self.move_steps(&moves);
        steps.push_back(Step::WriteBuf { q: q0, n });
        steps.extend(moves.iter().map(|&(lc, p, q)| Step::Apply(Change::Move { lc, p, q })));
        if planned {
            steps.push_back(Step::Commit);
        }
        self.free.take(q0, n);
        self.background_job(moves.iter().map(|m| m.0).collect(), steps, (q0..q0 + n).collect());
        Some(2 * n * self.cfg.chunk_bytes)
    }

    fn is_drained(&self) -> bool {
        self.jobs.is_empty() && self.commit.is_none() && self.batch.is_empty() && self.structural.is_none()
    }
}
