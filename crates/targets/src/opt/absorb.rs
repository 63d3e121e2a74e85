//! Write absorption (`absorb_writes`): the unmapped blocks of a write of
//! whole blocks go to free slots of the OPT region instead of home,
//! mapped and dirty, a *gap* of slots past the end of the previous
//! absorbed write. With the drive's write cache off a write costs the
//! rotation to its sectors wherever it goes; the next slot right after the
//! previous write has just passed the head when the client's next write
//! arrives (a whole rotation to wait), a slot a little further on is about
//! to come under it. The gap is learnt from the absorbed writes' own
//! latencies ([`GAPS`], tried in turn, then the best mean, still trying
//! one in every [`TRY_EVERY`]).
//!
//! Crash rules. The new mapping is not on disk when the write completes:
//! a crash before the next flush forgets it and the block reads from home
//! again, which a write not yet flushed allows. An upper flush (one at a
//! time while absorbing) flushes below, then writes journal blocks naming
//! the runs written before it was issued (`MapUpdate` records: mapped and
//! dirty), FUA, then completes. A map write leaves out every mapping not
//! yet journaled (its data may not be durable); such runs go to a journal
//! block of the new generation. A FUA write to a block whose mapping is
//! not journaled waits for an internal flush. A job dropping an absorbed
//! slot copies it home first (it is dirty) and the journal then skips it.
//!
//! With `absorb_during_jobs` (session 27; off by default), writes are
//! absorbed while a job runs too, into the free
//! slots its copies do not go to (`Job::absorb_free`, taken at its start:
//! the region's free slots less its runs'); blocks the job is copying in
//! stay out (they go home and make the copy stale, as before), so a block
//! is never mapped by both. Without it every write during a job goes
//! home: with plans copying more (`plan_relay`), jobs run longer and more
//! writes pay a seek at home.
//!
//! What is absorbed (session 24): only writes that would cost a seek at
//! home. A write of more than `absorb_blocks_max` blocks, or one whose
//! first block follows the previous write's last (`absorb_sequential =
//! false`), streams at home and goes there; and absorption never leaves
//! fewer than `absorb_reserve_pct` of the slots free, so a bulk copy
//! through the volume cannot fill the region the plan needs (session 23's
//! live populate did: 246,711 of 257,902 slots).

use super::{LowerOp, Opt, Slot};
use crate::blockmap::outside;
use crate::opt::analyze::Range;
use layoutd_core::{Completion, IoError, Op, ReqId, Request};
use rustc_hash::FxHashMap;
use std::collections::VecDeque;

/// Gaps tried, in slots left free before an absorbed write.
pub const GAPS: [u64; 8] = [0, 4, 8, 16, 24, 32, 48, 64];
/// The first writes try each gap in turn, this many in all.
const TRY_FIRST: u64 = 40;
/// Afterwards one write in this many tries the next gap in turn.
const TRY_EVERY: u64 = 10;

/// Where an absorbed slot's mapping stands.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) enum Absorbed {
    /// Not absorbed, or its mapping is on disk (a map or journal names it).
    #[default]
    No,
    /// The absorbing write is in flight.
    Writing,
    /// Written; the mapping waits for a flush and a journal block.
    Written,
}

/// A run of absorbed blocks: `(home block, blocks, first slot)`.
pub(super) type Run = (u64, u32, u32);

/// The absorber's state.
#[derive(Default)]
pub(super) struct Absorber {
    /// Writes absorbed.
    pub(super) writes_count: u64,
    /// Blocks absorbed.
    pub(super) blocks_count: u64,
    /// Per gap: summed latency (ns) and writes.
    stats: [(u64, u64); GAPS.len()],
    /// The run `modify` just absorbed, and its gap, for its assembly.
    taken: Option<(usize, Vec<Run>)>,
    /// Per assembly key: when it started, its gap, its run.
    inflight: FxHashMap<u64, (u64, usize, Vec<Run>)>,
    /// Runs written, waiting for a flush.
    written: Vec<Run>,
    /// Runs flushed, waiting for a journal block.
    pub(super) journal: VecDeque<Run>,
    /// The flush in progress (`None` inside: an internal one, for a held
    /// FUA write), and whether its lower flush is done.
    flush: Option<(Option<ReqId>, bool)>,
    /// Upper flushes waiting for the one in progress.
    flush_waiting: VecDeque<ReqId>,
    /// The block after the previous upper write's last.
    last_write_end: Option<u64>,
    /// Writes left home: more than `absorb_blocks_max` blocks, continuing
    /// the previous write, or the region down to `absorb_reserve_pct`.
    pub(super) skipped_bulk_count: u64,
    pub(super) skipped_sequential_count: u64,
    pub(super) skipped_reserve_count: u64,
    /// Writes absorbed (some of their blocks) while a job ran.
    pub(super) during_job_count: u64,
}

impl Absorber {
    /// The gap for the next absorbed write.
    fn gap_index(&self) -> usize {
        let k = self.writes_count;
        if k < TRY_FIRST || k.is_multiple_of(TRY_EVERY) {
            return (k % GAPS.len() as u64) as usize;
        }
        self.best()
    }

    /// The gap with the lowest mean latency so far (untried ones first).
    pub(super) fn best(&self) -> usize {
        (0..GAPS.len())
            .min_by_key(|&i| self.stats[i].0.checked_div(self.stats[i].1).unwrap_or(0))
            .expect("gaps")
    }
}

impl Opt {
    /// Absorbs the unmapped blocks of `req` (blocks `[first, end)`, whole
    /// ones; it is about to go down) where free runs are found: maps them,
    /// dirty, mapping not on disk. The first run goes a gap past the
    /// previous absorbed write, the others of the request right after it.
    pub(super) fn absorb_try(&mut self, req: &Request, (first, end): Range) {
        let b = self.geo.block_bytes;
        if !self.args.absorb_writes
            || req.op != Op::Write
            || req.fua
            || self.job.as_ref().is_some_and(|j| j.aborted || !self.args.absorb_during_jobs)
            || !req.offset_bytes.is_multiple_of(b)
            || !u64::from(req.length_bytes).is_multiple_of(b)
        {
            return;
        }
        // Only writes that would cost a seek at home: not a bulk write, not
        // one going on from the previous write (both stream at home).
        let continues = self.absorber.last_write_end == Some(first);
        self.absorber.last_write_end = Some(end);
        let max = u64::from(self.args.absorb_blocks_max);
        if max > 0 && end - first > max {
            self.absorber.skipped_bulk_count += 1;
            return;
        }
        if continues && !self.args.absorb_sequential {
            self.absorber.skipped_sequential_count += 1;
            return;
        }
        // Blocks a running job is copying in stay out: the job maps them.
        let copying = self.job_copying((first, end));
        let mut unmapped = Vec::new();
        super::for_each_piece(&self.map, first, end - first, |start, n, slot| {
            if slot.is_none() {
                unmapped.extend(outside(start, start + n, &copying));
            }
        });
        if unmapped.is_empty() {
            return;
        }
        // The plan's share of the region stays free. While a job runs, only
        // slots its runs do not go to are free for writes.
        let want: u64 = unmapped.iter().map(|u| u.1).sum();
        let reserve = u64::from(self.geo.slot_count) * u64::from(self.args.absorb_reserve_pct) / 100;
        let free_count = match &self.job {
            Some(j) => j.absorb_free.free_count(),
            None => self.free.free_count(),
        };
        if free_count < reserve + want {
            self.absorber.skipped_reserve_count += 1;
            return;
        }
        if self.job.is_some() {
            self.absorber.during_job_count += 1;
        }
        // The region's free slots, next fit: their cursor is the slot after
        // the previous absorbed run.
        let i = self.absorber.gap_index();
        let mut gap = GAPS[i];
        let mut runs = Vec::new();
        for (home, n) in unmapped {
            let s = match self.job.as_mut() {
                Some(j) => j.absorb_free.take_fit_after(gap, n as u32).inspect(|&s| {
                    assert!(self.free.take_at(s, n as u32), "the job's free slots are the region's");
                }),
                None => self.free.take_fit_after(gap, n as u32),
            };
            let Some(s) = s else { break };
            let s = u64::from(s);
            gap = 0;
            for k in 0..n {
                let home = Some(home + k);
                self.slots[(s + k) as usize] =
                    Slot { home, dirty: true, absorbed: Absorbed::Writing, ..Slot::default() };
            }
            self.map.insert(home, n, s);
            self.absorber.blocks_count += n;
            runs.push((home, n as u32, s as u32));
        }
        if !runs.is_empty() {
            self.absorber.writes_count += 1;
            self.absorber.taken = Some((i, runs));
        }
    }

    /// The upper write of assembly `key` started (after `absorb_try`).
    pub(super) fn absorb_started(&mut self, key: u64) {
        if let Some((i, runs)) = self.absorber.taken.take() {
            self.absorber.inflight.insert(key, (self.now_ns, i, runs));
        }
    }

    /// The upper write of assembly `key` completed at `now_ns`.
    pub(super) fn absorb_done(&mut self, key: u64, now_ns: u64, ok: bool) {
        // Every upper request's completion comes here: no lookup when
        // nothing is absorbing.
        if self.absorber.inflight.is_empty() {
            return;
        }
        let Some((t, i, runs)) = self.absorber.inflight.remove(&key) else { return };
        if ok {
            let st = &mut self.absorber.stats[i];
            st.0 += now_ns.saturating_sub(t);
            st.1 += 1;
        }
        // Written (a failed write leaves its sectors undefined, as home would).
        for (home, n, slot) in runs {
            for k in 0..n {
                let x = &mut self.slots[(slot + k) as usize];
                if x.absorbed == Absorbed::Writing && x.home == Some(home + u64::from(k)) {
                    x.absorbed = Absorbed::Written;
                    push_block(&mut self.absorber.written, (home + u64::from(k), 1, slot + k));
                }
            }
        }
        if !self.held.is_empty() {
            self.release_held();
        }
    }

    /// Whether `slot`'s mapping is not on disk yet.
    pub(super) fn absorb_pending(&self, slot: u64) -> bool {
        self.slots[slot as usize].absorbed != Absorbed::No
    }

    /// An upper flush while absorbing (`id`), or an internal one (`None`).
    pub(super) fn absorb_flush(&mut self, id: Option<ReqId>) {
        if self.absorber.flush.is_some() {
            if let Some(id) = id {
                self.absorber.flush_waiting.push_back(id);
            }
            return;
        }
        self.absorber.flush = Some((id, false));
        let runs = std::mem::take(&mut self.absorber.written);
        self.emit(LowerOp::AbsorbFlush { runs }, Request::new(ReqId(0), Op::Flush, 0, 0));
    }

    /// The lower flush of the flush in progress completed.
    pub(super) fn absorb_flush_done(&mut self, runs: Vec<Run>, result: Result<(), IoError>) {
        let (id, _) = self.absorber.flush.take().expect("a flush in progress");
        if result.is_err() {
            self.absorber.written.splice(0..0, runs);
            return self.absorb_flush_end(id, result);
        }
        self.absorber.journal.extend(runs);
        self.absorber.flush = Some((id, true));
        if self.absorber.journal.is_empty() {
            return self.absorb_flush_end(id, Ok(()));
        }
        self.kick_meta();
    }

    /// Up to what fits beside `dirty` dirty records, the journaled runs'
    /// still-absorbed parts (a job may have dropped some since).
    pub(super) fn absorb_journal_runs(&mut self, dirty: usize) -> Vec<Run> {
        let mut out: Vec<Run> = Vec::new();
        while let Some(&(home, n, slot)) = self.absorber.journal.front() {
            let pieces: Vec<Run> = (0..n)
                .filter(|&k| {
                    let x = &self.slots[(slot + k) as usize];
                    x.absorbed == Absorbed::Written && x.home == Some(home + u64::from(k))
                })
                .fold(Vec::new(), |mut v: Vec<Run>, k| {
                    push_block(&mut v, (home + u64::from(k), 1, slot + k));
                    v
                });
            let room = (0..=pieces.len()).rev().find(|&k| super::meta::journal_fits(dirty, out.len() + k));
            let room = room.expect("no pieces always fit");
            self.absorber.journal.pop_front();
            if room < pieces.len() {
                // The rest waits for the next block, piece by piece.
                for &p in pieces[room..].iter().rev() {
                    self.absorber.journal.push_front(p);
                }
                out.extend_from_slice(&pieces[..room]);
                break;
            }
            out.extend(pieces);
        }
        out
    }

    /// A journal block naming `runs` is on disk.
    pub(super) fn absorb_journaled(&mut self, runs: &[Run]) {
        for &(home, n, slot) in runs {
            for k in 0..n {
                let x = &mut self.slots[(slot + k) as usize];
                if x.absorbed == Absorbed::Written && x.home == Some(home + u64::from(k)) {
                    x.absorbed = Absorbed::No;
                }
            }
        }
        if let Some((id, true)) = self.absorber.flush {
            if self.absorber.journal.is_empty() {
                self.absorber.flush = None;
                self.absorb_flush_end(id, Ok(()));
            }
        }
    }

    /// Completes flush `id` (if an upper one) and starts the next waiting.
    fn absorb_flush_end(&mut self, id: Option<ReqId>, result: Result<(), IoError>) {
        self.absorber.flush = None;
        if let Some(id) = id {
            self.lower_io.upper_q.push_back(Completion { id, result, data: None });
        }
        if let Some(next) = self.absorber.flush_waiting.pop_front() {
            self.absorb_flush(Some(next));
        }
        if !self.held.is_empty() {
            self.release_held();
        }
    }

    /// A FUA write touching `slots`: `true` if one's mapping is not on
    /// disk yet (the write waits; an internal flush is started).
    pub(super) fn absorb_holds_fua(&mut self, slots: &[u32]) -> bool {
        if !slots.iter().any(|&s| self.absorb_pending(u64::from(s))) {
            return false;
        }
        if self.absorber.flush.is_none() {
            self.absorb_flush(None);
        }
        true
    }
}

/// Appends one block's run to `runs`, joining it to the last run when it
/// continues it (home and slot both).
fn push_block(runs: &mut Vec<Run>, r: Run) {
    match runs.last_mut() {
        Some(l) if l.0 + u64::from(l.1) == r.0 && l.2 + l.1 == r.2 => l.1 += r.1,
        _ => runs.push(r),
    }
}
