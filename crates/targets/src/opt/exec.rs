//! Planning and executing a reconfiguration: one [`Job`] at a time, each
//! step bounded (`copy_blocks_per_step` blocks), granted by the stack's
//! background scheduler as `Reorganisation` (so only in idle time, and
//! under `[background] rate`).
//!
//! A job goes through, in order (each a [`JobPhase`]):
//! 1. `CopyHome`: every dirty slot the new plan drops is read from OPT and
//!    written home (both through the overlap gate, so an upper write to
//!    the slot waits for the read and bumps the slot's version); then a
//!    flush; a slot whose version did not move is clean. Repeat until
//!    every dropped slot is clean.
//! 2. `Unmap`: a map without the dropped slots is written (FUA); writes to
//!    their home blocks wait meanwhile (a crash must never find the old map
//!    pointing at a slot whose home has moved on); then the slots are free.
//! 3. `CopyIn`: the new runs go in *batches* of about `copy_batch_blocks`
//!    blocks, in slot order: each run of a batch is read from home
//!    (`copies_in_flight` reads at once, issued in home order so the disk
//!    sweeps), and when the batch's reads are done its runs are written to
//!    their slots, adjacent slots in one write (gated). An upper write to a
//!    run's home blocks while it is being copied marks it stale: copied
//!    again (twice at most), else left out.
//! 4. `Commit`: a flush (the copies are durable before any map names
//!    them), then a map with the copied runs (FUA; writes to their home
//!    blocks wait meanwhile); runs written to since the flush was issued
//!    are left out. Then the runs are mapped: the switch.
//!
//! Slots are stable across plans: a block the new plan places that is
//! already in the region stays in its slot (nothing is copied for it); new
//! blocks go to free slots, next to the slot of the block the plan puts
//! before them when it is free. A block the new plan no longer places stays
//! mapped until its slot is needed (then every such slot is dropped at
//! once), so a program not run since the last plan keeps its copies.

use super::analyze::{master_graph, plan, plan_streams, Range, StreamPlan, WEIGHT_UNIT};
use super::free::FreeSlots;
use super::{LowerOp, Opt, Slot};
use bytes::Bytes;
use layoutd_core::{Completion, Instant, Op, ReqId, Request, REQUEST_BYTES_MAX};
use rustc_hash::FxHashMap;
use std::collections::{BTreeSet, VecDeque};

/// Copies of one run given up after this many stale attempts.
const COPY_TRIES_MAX: u8 = 3;
/// Copy-home chains (read, then write) in flight at once.
const COPIES_HOME_IN_FLIGHT_MAX: u32 = 2;
/// Copied blocks committed (flush, map write) at a time, so a long plan
/// goes live piece by piece instead of at its end.
const COMMIT_BLOCKS_MIN: u64 = 1024;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum JobPhase {
    CopyHome,
    HomeFlush,
    Unmap,
    UnmapWrite,
    CopyIn,
    CommitFlush,
    Commit,
    CommitWrite,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RunState {
    Todo,
    Reading,
    /// Read; its data waits for the batch's write.
    Read,
    Writing,
    Done,
    /// In the map (live).
    Committed,
    Abandoned,
}

/// Home blocks `[home, home + count)` copied to slots `[slot, slot + count)`.
#[derive(Clone, Debug)]
struct CopyRun {
    home: u64,
    slot: u32,
    count: u32,
    /// Extra copies of blocks with a primary (see `Opt::extras`).
    extra: bool,
    state: RunState,
    stale: bool,
    tries: u8,
    /// The home blocks read, until written (`Read`).
    data: Option<Bytes>,
}

/// One reconfiguration in progress.
pub(super) struct Job {
    pub(super) phase: JobPhase,
    /// Slots the new plan drops (sorted).
    drop: Vec<u32>,
    home_todo: VecDeque<u32>,
    /// `(slot, version)` copied home, clean once a flush completes.
    home_done: Vec<(u32, u32)>,
    home_in_flight: u32,
    runs: Vec<CopyRun>,
    /// Runs to copy (again), in slot order.
    todo: VecDeque<u32>,
    /// `(home block, run)` of every run, to mark runs stale (a block's
    /// primary and extra copies are different runs).
    by_home: BTreeSet<(u64, u32)>,
    /// The runs of the batch being copied (empty: none).
    batch: Vec<u32>,
    /// Runs of the batch still to read, in home order.
    batch_reads: VecDeque<u32>,
    reads_in_flight: u32,
    writes_in_flight: u32,
    /// Blocks copied (`Done`) and not committed yet.
    uncommitted_blocks: u64,
    /// A lower error: finish what is in flight, then give the job up.
    pub(super) aborted: bool,
    /// The region's free slots less the runs' slots: where writes are
    /// absorbed while the job runs (see `absorb.rs`).
    pub(super) absorb_free: FreeSlots,
}

impl Job {
    fn in_flight(&self) -> u32 {
        self.home_in_flight + self.reads_in_flight + self.writes_in_flight
    }

    /// Slot `s` (an extra copy) was freed outside the job (its primary
    /// turned dirty): it is no longer the job's to drop.
    pub(super) fn slot_freed(&mut self, s: u32) {
        self.drop.retain(|&d| d != s);
    }
}

impl Opt {
    /// Whether a granted step would do something now.
    pub(super) fn job_wants_step(&self) -> bool {
        let Some(j) = &self.job else { return false };
        let limit = self.args.copy_blocks_per_step;
        match j.phase {
            _ if j.aborted => j.in_flight() == 0,
            JobPhase::CopyHome => {
                j.home_in_flight < limit || (j.home_todo.is_empty() && j.home_in_flight == 0)
            }
            JobPhase::CopyIn => {
                j.batch.is_empty()
                    || (!j.batch_reads.is_empty() && j.reads_in_flight < self.args.copies_in_flight)
            }
            _ => false,
        }
    }

    /// One granted step; the bytes of I/O started.
    pub(super) fn job_step(&mut self) -> Option<u64> {
        let j = self.job.as_ref()?;
        if j.aborted {
            assert_eq!(j.in_flight(), 0);
            self.changing.clear();
            self.job = None;
            self.idle.work_done();
            return Some(0);
        }
        match j.phase {
            JobPhase::CopyHome => self.step_copy_home(),
            JobPhase::CopyIn => self.step_copy_in(),
            _ => None,
        }
    }

    /// Starts one copy home (a slot still dirty), or moves on when none is left.
    fn step_copy_home(&mut self) -> Option<u64> {
        let limit = COPIES_HOME_IN_FLIGHT_MAX;
        let b = self.geo.block_bytes;
        let mut bytes = 0;
        loop {
            let j = self.job.as_mut().expect("a job");
            if j.home_in_flight >= limit {
                break;
            }
            let Some(slot) = j.home_todo.pop_front() else { break };
            let s = self.slots[slot as usize];
            if !s.dirty {
                continue;
            }
            j.home_in_flight += 1;
            let req = Request::new(ReqId(0), Op::Read, self.geo.slot_offset_bytes(slot), b as u32);
            self.emit_gated(LowerOp::HomeRead { slot, version: s.version }, req);
            bytes += b;
            break;
        }
        let j = self.job.as_mut().expect("a job");
        if j.home_todo.is_empty() && j.home_in_flight == 0 {
            if !j.home_done.is_empty() {
                j.phase = JobPhase::HomeFlush;
                self.emit(LowerOp::JobFlush, Request::new(ReqId(0), Op::Flush, 0, 0));
                return Some(bytes);
            }
            let dirty: Vec<u32> = j.drop.iter().copied().filter(|&s| self.slots[s as usize].dirty).collect();
            if !dirty.is_empty() {
                j.home_todo.extend(dirty);
                return Some(bytes);
            }
            j.phase = if j.drop.is_empty() { JobPhase::CopyIn } else { JobPhase::Unmap };
            self.kick_meta();
            return Some(bytes);
        }
        (bytes > 0).then_some(bytes)
    }

    /// Whether the copies done so far are to be committed now: enough of
    /// them (the plan goes live piece by piece), or the last ones.
    fn commit_due(j: &Job) -> bool {
        j.uncommitted_blocks >= COMMIT_BLOCKS_MIN || (j.todo.is_empty() && j.uncommitted_blocks > 0)
    }

    /// With no batch in flight: starts the commit (its flush) when due,
    /// ends the job when nothing is left, or takes the next batch of runs
    /// (slot order). Then starts the batch's reads, up to `copies_in_flight`.
    fn step_copy_in(&mut self) -> Option<u64> {
        let b = self.geo.block_bytes;
        let (batch_blocks, reads_max) = (u64::from(self.args.copy_batch_blocks), self.args.copies_in_flight);
        let j = self.job.as_mut().expect("a job");
        if j.batch.is_empty() {
            if Self::commit_due(j) {
                j.phase = JobPhase::CommitFlush;
                self.emit(LowerOp::JobFlush, Request::new(ReqId(0), Op::Flush, 0, 0));
                return Some(0);
            }
            if j.todo.is_empty() {
                self.finish_job();
                return Some(0);
            }
            let mut blocks = 0;
            while blocks < batch_blocks {
                let Some(run) = j.todo.pop_front() else { break };
                blocks += u64::from(j.runs[run as usize].count);
                j.batch.push(run);
            }
            let mut reads = j.batch.clone();
            reads.sort_by_key(|&r| j.runs[r as usize].home);
            j.batch_reads = reads.into();
        }
        let mut started = Vec::new();
        while j.reads_in_flight < reads_max {
            let Some(run) = j.batch_reads.pop_front() else { break };
            let r = &mut j.runs[run as usize];
            assert_eq!(r.state, RunState::Todo);
            r.state = RunState::Reading;
            r.stale = false;
            j.reads_in_flight += 1;
            started.push((run, r.home, u64::from(r.count) * b));
        }
        let bytes: u64 = started.iter().map(|s| s.2).sum();
        for (run, home, len) in started {
            let req = Request::new(ReqId(0), Op::Read, self.geo.home_bytes(home * b), len as u32);
            self.emit_gated(LowerOp::CopyInRead { run }, req);
        }
        (bytes > 0).then_some(bytes)
    }

    fn finish_job(&mut self) {
        self.job = None;
        self.idle.work_done();
        self.changing.clear();
        self.counters.reconfigurations_count += 1;
    }

    /// A copy, copy-home or job flush completed.
    pub(super) fn job_completion(&mut self, now: Instant, op: LowerOp, c: Completion) {
        self.idle.progressed(now);
        let b = self.geo.block_bytes;
        let failed = c.result.is_err();
        let j = self.job.as_mut().expect("job I/O belongs to a job");
        if failed {
            j.aborted = true;
        }
        match op {
            LowerOp::HomeRead { slot, version } => {
                if failed {
                    j.home_in_flight -= 1;
                    return;
                }
                let home = self.slots[slot as usize].home.expect("a slot being copied home is mapped");
                let mut req = Request::new(ReqId(0), Op::Write, self.geo.home_bytes(home * b), b as u32);
                req.data = c.data;
                self.emit_gated(LowerOp::HomeWrite { slot, version }, req);
            }
            LowerOp::HomeWrite { slot, version } => {
                j.home_in_flight -= 1;
                if !failed {
                    j.home_done.push((slot, version));
                    self.counters.copied_home_bytes += b;
                }
            }
            LowerOp::JobFlush if j.phase == JobPhase::HomeFlush => {
                for (slot, version) in std::mem::take(&mut j.home_done) {
                    let s = &mut self.slots[slot as usize];
                    if !failed && s.version == version {
                        s.dirty = false;
                    }
                }
                j.phase = JobPhase::CopyHome;
            }
            LowerOp::JobFlush => {
                assert_eq!(j.phase, JobPhase::CommitFlush);
                if !failed {
                    j.phase = JobPhase::Commit;
                    self.kick_meta();
                }
            }
            LowerOp::CopyInRead { run } => self.copy_read_done(run, c),
            LowerOp::CopyInWrite { runs } => self.copy_write_done(&runs, failed),
            other => unreachable!("not job I/O: {other:?}"),
        }
    }

    fn copy_read_done(&mut self, run: u32, c: Completion) {
        let j = self.job.as_mut().expect("a job");
        j.reads_in_flight -= 1;
        let r = &mut j.runs[run as usize];
        assert_eq!(r.state, RunState::Reading);
        if c.result.is_err() || r.stale || j.aborted {
            Self::retry_or_abandon(run, r, &mut j.todo, &mut self.counters.copies_stale_count);
            j.batch.retain(|&x| x != run);
        } else {
            r.state = RunState::Read;
            r.data = c.data;
        }
        self.write_batch();
    }

    /// Once every read of the batch is done: writes its runs to their
    /// slots, adjacent slots in one write (stale runs go back to `todo`).
    fn write_batch(&mut self) {
        let b = self.geo.block_bytes;
        let j = self.job.as_mut().expect("a job");
        if !j.batch_reads.is_empty() || j.reads_in_flight > 0 || j.writes_in_flight > 0 {
            return;
        }
        let mut ready = Vec::new();
        for &run in &j.batch {
            let r = &mut j.runs[run as usize];
            assert_eq!(r.state, RunState::Read);
            if r.stale || j.aborted {
                r.data = None;
                Self::retry_or_abandon(run, r, &mut j.todo, &mut self.counters.copies_stale_count);
            } else {
                ready.push(run);
            }
        }
        ready.sort_by_key(|&r| j.runs[r as usize].slot);
        j.batch = ready.clone();
        let mut writes: Vec<Vec<u32>> = Vec::new();
        let max_blocks = u64::from(REQUEST_BYTES_MAX) / b;
        for run in ready {
            let r = &j.runs[run as usize];
            match writes.last_mut() {
                Some(w)
                    if {
                        let last = &j.runs[*w.last().expect("non-empty") as usize];
                        let first = &j.runs[w[0] as usize];
                        last.slot + last.count == r.slot
                            && u64::from(r.slot + r.count - first.slot) <= max_blocks
                    } =>
                {
                    w.push(run)
                }
                _ => writes.push(vec![run]),
            }
        }
        j.writes_in_flight = writes.len() as u32;
        self.counters.copy_writes_count += writes.len() as u64;
        let mut reqs = Vec::new();
        for w in writes {
            let slot = j.runs[w[0] as usize].slot;
            let blocks: u32 = w.iter().map(|&run| j.runs[run as usize].count).sum();
            // Data-less lower devices (the simulator's) return no bytes.
            let mut data = Some(Vec::with_capacity((u64::from(blocks) * b) as usize));
            for &run in &w {
                let r = &mut j.runs[run as usize];
                r.state = RunState::Writing;
                match (r.data.take(), data.as_mut()) {
                    (Some(d), Some(v)) => v.extend_from_slice(&d),
                    _ => data = None,
                }
            }
            let len = (u64::from(blocks) * b) as u32;
            let mut req = Request::new(ReqId(0), Op::Write, self.geo.slot_offset_bytes(slot), len);
            req.data = data.map(Bytes::from);
            reqs.push((w, req));
        }
        for (runs, req) in reqs {
            self.emit_gated(LowerOp::CopyInWrite { runs }, req);
        }
    }

    fn copy_write_done(&mut self, runs: &[u32], failed: bool) {
        let j = self.job.as_mut().expect("a job");
        j.writes_in_flight -= 1;
        for &run in runs {
            let r = &mut j.runs[run as usize];
            assert_eq!(r.state, RunState::Writing);
            if failed || r.stale {
                Self::retry_or_abandon(run, r, &mut j.todo, &mut self.counters.copies_stale_count);
                continue;
            }
            r.state = RunState::Done;
            j.uncommitted_blocks += u64::from(r.count);
            self.counters.copies_count += 1;
            self.counters.copied_bytes += u64::from(r.count) * self.geo.block_bytes;
        }
        if j.writes_in_flight == 0 {
            j.batch.clear();
        }
    }

    fn retry_or_abandon(run: u32, r: &mut CopyRun, todo: &mut VecDeque<u32>, stale_count: &mut u64) {
        *stale_count += 1;
        r.tries += 1;
        r.state = if r.tries >= COPY_TRIES_MAX { RunState::Abandoned } else { RunState::Todo };
        if r.state == RunState::Todo {
            todo.push_back(run);
        }
    }

    /// An upper write to home blocks `[first, end)`: copies of them in
    /// progress (or done, before the commit's map write) are stale.
    pub(super) fn mark_copies_stale(&mut self, (first, end): Range) {
        let Some(j) = self.job.as_mut() else { return };
        if !matches!(j.phase, JobPhase::CopyIn | JobPhase::CommitFlush | JobPhase::Commit) {
            return;
        }
        // Runs are at most `copy_blocks_per_step` long; runs of extra
        // copies overlap primary ones.
        let from = first.saturating_sub(u64::from(self.args.copy_blocks_per_step));
        for &(_, i) in j.by_home.range((from, 0)..(end, 0)) {
            let r = &mut j.runs[i as usize];
            if r.home + u64::from(r.count) <= first {
                continue;
            }
            r.stale = true;
            if r.state == RunState::Done {
                r.state = RunState::Abandoned;
                j.uncommitted_blocks -= u64::from(r.count);
                self.counters.copies_stale_count += 1;
            }
        }
    }

    /// The parts of home blocks `[first, end)` the job is to map (runs
    /// neither committed nor given up), in home order, overlaps merged.
    pub(super) fn job_copying(&self, (first, end): Range) -> Vec<Range> {
        let Some(j) = self.job.as_ref() else { return Vec::new() };
        let from = first.saturating_sub(u64::from(self.args.copy_blocks_per_step));
        let mut out: Vec<Range> = Vec::new();
        for &(_, i) in j.by_home.range((from, 0)..(end, 0)) {
            let r = &j.runs[i as usize];
            let (a, z) = (r.home.max(first), (r.home + u64::from(r.count)).min(end));
            if a >= z || matches!(r.state, RunState::Committed | RunState::Abandoned) {
                continue;
            }
            match out.last_mut() {
                Some(l) if a <= l.1 => l.1 = l.1.max(z),
                _ => out.push((a, z)),
            }
        }
        out
    }

    /// Whether the job waits for a map write.
    pub(super) fn job_wants_map_write(&self) -> bool {
        self.job.as_ref().is_some_and(|j| !j.aborted && matches!(j.phase, JobPhase::Unmap | JobPhase::Commit))
    }

    /// Issues the job's map write (metadata is idle).
    pub(super) fn job_map_write(&mut self) {
        let b = self.geo.block_bytes;
        let j = self.job.as_mut().expect("a job");
        match j.phase {
            JobPhase::Unmap => {
                let dirty: Vec<u32> =
                    j.drop.iter().copied().filter(|&s| self.slots[s as usize].dirty).collect();
                if !dirty.is_empty() {
                    // Written to since copied home: copy again first.
                    j.home_todo.extend(dirty);
                    j.phase = JobPhase::CopyHome;
                    return;
                }
                j.phase = JobPhase::UnmapWrite;
                let drop = j.drop.clone();
                self.changing = drop
                    .iter()
                    .map(|&s| self.slots[s as usize].home.expect("dropped slots are mapped"))
                    .map(|h| (h, h + 1))
                    .collect();
                let image = self.image(&drop, &[], &[]);
                self.write_map(image);
            }
            JobPhase::Commit => {
                let done = |r: &&CopyRun| r.state == RunState::Done && !r.stale;
                let adds: Vec<(u64, u32, u32)> = j
                    .runs
                    .iter()
                    .filter(done)
                    .filter(|r| !r.extra)
                    .map(|r| (r.home, r.count, r.slot))
                    .collect();
                // An extra copy goes live only beside a clean primary (one
                // written since was dirtied: the copy read home's old data).
                let added: crate::blockmap::BlockMap<u64> = {
                    let mut m = crate::blockmap::BlockMap::new();
                    adds.iter().for_each(|&(h, c, s)| drop(m.insert(h, u64::from(c), u64::from(s))));
                    m
                };
                let (map, slots) = (&self.map, &self.slots);
                let primary_clean = |h: u64| match map.get(h) {
                    Some(p) => !slots[p as usize].dirty,
                    None => added.get(h).is_some(),
                };
                let mut extra_adds = Vec::new();
                for r in j.runs.iter_mut().filter(|r| r.extra && r.state == RunState::Done && !r.stale) {
                    if (r.home..r.home + u64::from(r.count)).all(primary_clean) {
                        extra_adds.push((r.home, r.count, r.slot));
                    } else {
                        r.state = RunState::Abandoned;
                        j.uncommitted_blocks -= u64::from(r.count);
                        self.counters.copies_stale_count += 1;
                    }
                }
                if adds.is_empty() && extra_adds.is_empty() {
                    j.phase = JobPhase::CopyIn;
                    return;
                }
                j.phase = JobPhase::CommitWrite;
                self.changing =
                    adds.iter().chain(&extra_adds).map(|&(h, c, _)| (h, h + u64::from(c))).collect();
                let image = self.image(&[], &adds, &extra_adds);
                self.write_map(image);
            }
            other => unreachable!("no map write in {other:?}"),
        }
        let _ = b;
    }

    /// The job's map write is durable: apply it in memory.
    pub(super) fn job_map_written(&mut self) {
        let Some(j) = self.job.as_mut() else { return };
        match j.phase {
            JobPhase::UnmapWrite => {
                for &s in &j.drop {
                    let slot = self.slots[s as usize];
                    let home = slot.home.expect("mapped");
                    assert!(!slot.dirty, "only clean slots are dropped");
                    let layer = match slot.extra {
                        false => &mut self.map,
                        true => self
                            .extras
                            .iter_mut()
                            .find(|l| l.get(home) == Some(u64::from(s)))
                            .expect("a layer"),
                    };
                    layer.remove(home, 1);
                    self.slots[s as usize] = Slot::default();
                    self.free.add(s, 1);
                }
                self.extras.retain(|l| l.mapped_blocks() > 0);
                for l in &self.extras {
                    assert!(
                        l.iter().all(|e| self.map.range(e.start, e.length).iter().all(|p| p.2.is_some())),
                        "every extra copy has a primary"
                    );
                }
                self.counters.dropped_blocks_count += j.drop.len() as u64;
                self.journal_queue.retain(|s| j.drop.binary_search(s).is_err());
                j.phase = JobPhase::CopyIn;
                self.changing.clear();
            }
            JobPhase::CommitWrite => {
                for r in j.runs.iter_mut().filter(|r| r.state == RunState::Done && !r.stale) {
                    let (home, count, slot) = (r.home, u64::from(r.count), u64::from(r.slot));
                    if r.extra {
                        insert_extra(&mut self.extras, home, count, slot);
                    } else {
                        self.map.insert(home, count, slot);
                    }
                    self.free.remove(r.slot, r.count);
                    for i in 0..r.count {
                        let s = &mut self.slots[(r.slot + i) as usize];
                        assert!(s.home.is_none(), "a committed slot was free");
                        *s = Slot { home: Some(r.home + u64::from(i)), extra: r.extra, ..Slot::default() };
                    }
                    r.state = RunState::Committed;
                }
                self.changing.clear();
                j.uncommitted_blocks = 0;
                // More to copy, or nothing: the next step decides.
                j.phase = JobPhase::CopyIn;
            }
            // A checkpoint map write (the journal was full).
            _ => {}
        }
    }

    /// Takes up to `n` profile entries into the stream graphs.
    pub(super) fn analyze_slice(&mut self, n: usize) {
        let entries: Vec<_> = self.profile.take(n).collect();
        for e in entries {
            self.analyzer.add(e);
        }
        self.counters.analysis_units = self.analyzer.units;
    }

    /// Whether the automatic plan is due.
    pub(super) fn plan_due(&self, now: Instant) -> bool {
        let a = &self.args;
        let by_count = a.plan_interval_requests > 0 && self.requests_since_plan >= a.plan_interval_requests;
        let by_time = a.plan_interval_ms > 0
            && self.requests_since_plan > 0
            && now.ns_since(self.last_plan_at.min(now)) >= a.plan_interval_ms * 1_000_000;
        a.auto_apply && self.job.is_none() && (by_count || by_time)
    }

    /// How many times the weights halve at a plan now: once, or once per
    /// `weight_half_life_ms` passed since the last halving (at most 32:
    /// every weight is zero by then).
    fn halvings_due(&mut self, now: Instant) -> u32 {
        let life = self.args.weight_half_life_ms * 1_000_000;
        if life == 0 {
            return 1;
        }
        let k = now.ns_since(self.halved_at.min(now)) / life;
        self.halved_at = Instant::from_ns(self.halved_at.as_ns() + k * life);
        k.min(32) as u32
    }

    /// Analyzes the whole profile and plans now; applies the plan when
    /// `auto_apply` and no job runs. Returns a summary.
    pub(super) fn plan_now(&mut self, now: Instant) -> String {
        self.analyze_slice(usize::MAX);
        let mut units = 0;
        let (slots, weight_min) = (u64::from(self.geo.slot_count), self.args.edge_weight_min * WEIGHT_UNIT);
        let (p, from) = if self.args.plan_streams {
            let o = StreamPlan {
                capacity_blocks: slots,
                weight_min,
                copies_max: self.args.copies_max,
                pad_blocks: u64::from(self.args.plan_pad_blocks),
                place_written: self.args.plan_written,
                relay: self.args.plan_relay,
                time_order: self.args.plan_time_order,
            };
            let p = plan_streams(&self.analyzer, &o, &mut units);
            (p, format!("{} stream graph(s)", self.analyzer.stream_count()))
        } else {
            let m = master_graph(&self.analyzer, &mut units);
            let (copies, follow) = (self.args.copies_max, self.args.follow_streams);
            let p = plan(&m, slots, weight_min, copies, follow, &mut units);
            (p, format!("{} atoms and {} edges", m.atoms.len(), m.edges.len()))
        };
        self.counters.planning_units += units;
        self.counters.plans_count += 1;
        for _ in 0..self.halvings_due(now) {
            self.analyzer.halve();
        }
        self.counters.analysis_units = self.analyzer.units;
        self.requests_since_plan = 0;
        self.last_plan_at = now;
        let blocks: u64 = p.iter().map(|(s, e)| e - s).sum();
        let summary = format!(
            "plan: {} range(s), {blocks} block(s) of {} slots, from {from}",
            p.len(),
            self.geo.slot_count
        );
        self.planned = Some(p.clone());
        if self.args.auto_apply && self.job.is_none() {
            let started = self.start_job(now, p, true).unwrap_or_else(|e| e);
            return format!("{summary}; {started}");
        }
        summary
    }

    /// Applies the newest plan (planning first if there is none).
    pub(super) fn apply(&mut self, now: Instant) -> Result<String, String> {
        if self.job.is_some() {
            return Err("opt: a reconfiguration is in progress; apply again when it is done".into());
        }
        let p = match self.planned.clone() {
            Some(p) => p,
            None => {
                let auto = std::mem::replace(&mut self.args.auto_apply, false);
                self.plan_now(now);
                self.args.auto_apply = auto;
                self.planned.clone().expect("just planned")
            }
        };
        self.start_job(now, p, true)
    }

    /// Starts a reconfiguration towards `ranges` (in region order). Blocks
    /// already in the region stay in their slots; with `retain`, blocks the
    /// plan leaves out stay too until their slots are needed (without it,
    /// as for `drop`, they all go).
    pub(super) fn start_job(
        &mut self,
        now: Instant,
        ranges: Vec<Range>,
        retain: bool,
    ) -> Result<String, String> {
        if self.job.is_some() {
            return Err("opt: a reconfiguration is in progress".into());
        }
        let volume_blocks = self.geo.volume_blocks();
        let slot_count = self.geo.slot_count as usize;
        // `(home block, rank)`: the plan's `rank`-th copy of the block (0:
        // the primary). No extra copy of a dirty primary, none past
        // `copies_max`.
        let mut want: Vec<(u64, usize)> = Vec::new();
        let mut ranks: FxHashMap<u64, usize> = FxHashMap::default();
        'fill: for (s, e) in ranges {
            for h in s..e.min(volume_blocks) {
                if want.len() == slot_count {
                    break 'fill;
                }
                let r = ranks.entry(h).or_insert(0);
                *r += 1;
                let rank = *r - 1;
                let dirty = || self.map.get(h).is_some_and(|p| self.slots[p as usize].dirty);
                if rank < self.args.copies_max as usize && (rank == 0 || !dirty()) {
                    want.push((h, rank));
                }
            }
        }
        // Existing copies match the plan's by rank (primary first).
        let existing = |(h, rank): (u64, usize)| self.copies_of(h).nth(rank);
        // With `plan_moves_dirty`: dirty primaries out of the plan's order
        // (next to neither planned neighbour's slot) are moved.
        let mut moved: FxHashMap<u64, u64> = FxHashMap::default();
        if self.args.plan_moves_dirty {
            for (i, &(h, rank)) in want.iter().enumerate().filter(|(_, w)| w.1 == 0) {
                let Some(s) = existing((h, rank)).filter(|&s| self.slots[s as usize].dirty) else {
                    continue;
                };
                let beside = |j: Option<usize>, at: Option<u64>| {
                    j.and_then(|j| want.get(j)).and_then(|&w| existing(w)).is_some_and(|x| Some(x) == at)
                };
                if !beside(i.checked_sub(1), s.checked_sub(1)) && !beside(Some(i + 1), Some(s + 1)) {
                    moved.insert(h, s);
                }
            }
        }
        let copy_slot = |w: (u64, usize)| existing(w).filter(|_| w.1 > 0 || !moved.contains_key(&w.0));
        let mut keep = vec![false; slot_count];
        for &w in &want {
            if let Some(s) = copy_slot(w) {
                keep[s as usize] = true;
            }
        }
        // The plan's view of the free slots: the region's, plus the slots
        // it reclaims (still mapped until the job's unmap).
        let mut free = self.free.for_plan();
        let reclaim: Vec<u32> = (0..slot_count as u32)
            .filter(|&s| self.slots[s as usize].home.is_some() && !keep[s as usize])
            .collect();
        let mut reclaim = reclaim;
        let mut drop = Vec::new();
        if !retain {
            for &s in &reclaim {
                free.add(s, 1);
            }
            drop = std::mem::take(&mut reclaim);
        }
        // New blocks: each group of blocks adjacent in the plan goes next to
        // the slot of the block before it if free, else to the first free
        // slots that hold it from the cursor on; when none do, the slots of
        // blocks the plan left out are dropped, and at last a group is split.
        let mut new: Vec<(u64, u32, bool)> = Vec::new();
        let mut prev_slot: Option<u32> = None;
        let mut i = 0;
        while i < want.len() {
            if let Some(s) = copy_slot(want[i]) {
                prev_slot = Some(s as u32);
                i += 1;
                continue;
            }
            let mut k = i;
            while k < want.len() && copy_slot(want[k]).is_none() {
                k += 1;
            }
            while i < k {
                let n = (k - i) as u32;
                let at = match prev_slot.map(|p| p + 1).filter(|&p| free.take_at(p, n)) {
                    Some(p) => Some((p, n)),
                    None => free.take_fit(n).map(|p| (p, n)),
                };
                let at = match at {
                    Some(at) => at,
                    None if !reclaim.is_empty() => {
                        for &s in &reclaim {
                            free.add(s, 1);
                        }
                        drop = std::mem::take(&mut reclaim);
                        continue;
                    }
                    None => free.take_longest(n).expect("the plan fits the region"),
                };
                for x in 0..at.1 {
                    new.push((want[i].0, at.0 + x, want[i].1 > 0));
                    i += 1;
                }
                prev_slot = Some(at.0 + at.1 - 1);
            }
        }
        // A moved block's slot goes in this job whatever `retain` says: its
        // copy home (phase `CopyHome`) comes before its copy in from home
        // (`CopyIn`), as for any dirty slot a job drops.
        drop.extend(moved.values().map(|&s| s as u32));
        self.counters.moved_blocks_count += moved.len() as u64;
        drop.sort_unstable();
        drop.dedup();
        let kept = keep.iter().filter(|&&k| k).count();
        let mut runs: Vec<CopyRun> = Vec::new();
        let boundary = self.geo.opt_offset_bytes / self.geo.block_bytes;
        for &(home, slot, extra) in &new {
            match runs.last_mut() {
                Some(r)
                    if r.home + u64::from(r.count) == home
                        && r.slot + r.count == slot
                        && r.extra == extra
                        && home != boundary
                        && r.count < self.args.copy_blocks_per_step =>
                {
                    r.count += 1
                }
                _ => runs.push(CopyRun {
                    home,
                    slot,
                    count: 1,
                    extra,
                    state: RunState::Todo,
                    stale: false,
                    tries: 0,
                    data: None,
                }),
            }
        }
        if drop.is_empty() && runs.is_empty() {
            self.counters.plans_unchanged_count += 1;
            return Ok(format!(
                "the plan matches the region's contents: nothing to do ({kept} block(s) kept)"
            ));
        }
        let reply = format!(
            "reconfiguring: {kept} block(s) kept, {} to copy in {} run(s), {} to drop",
            new.len(),
            runs.len(),
            drop.len()
        );
        let by_home: BTreeSet<(u64, u32)> =
            runs.iter().enumerate().map(|(i, r)| (r.home, i as u32)).collect();
        let mut todo: Vec<u32> = (0..runs.len() as u32).collect();
        todo.sort_by_key(|&r| runs[r as usize].slot);
        let home_todo = drop.iter().copied().filter(|&s| self.slots[s as usize].dirty).collect();
        let absorb_free = self.free.without(runs.iter().map(|r| (r.slot, r.count)));
        self.idle.progressed(now);
        self.job = Some(Job {
            phase: JobPhase::CopyHome,
            drop,
            home_todo,
            home_done: Vec::new(),
            home_in_flight: 0,
            todo: todo.into(),
            runs,
            by_home,
            batch: Vec::new(),
            batch_reads: VecDeque::new(),
            reads_in_flight: 0,
            writes_in_flight: 0,
            uncommitted_blocks: 0,
            aborted: false,
            absorb_free,
        });
        Ok(reply)
    }

    /// A one-line description of the map and the job, for `status`.
    pub(super) fn describe(&self) -> String {
        let job = match &self.job {
            None => "no reconfiguration in progress".to_string(),
            Some(j) => format!(
                "reconfiguration in phase {:?}: {} slot(s) to drop, {} run(s) to copy ({} done)",
                j.phase,
                j.drop.len(),
                j.runs.len(),
                j.runs.iter().filter(|r| r.state == RunState::Done).count()
            ),
        };
        let plan = match &self.planned {
            None => "no plan yet".to_string(),
            Some(p) => format!(
                "newest plan: {} range(s), {} block(s)",
                p.len(),
                p.iter().map(|(s, e)| e - s).sum::<u64>()
            ),
        };
        format!(
            "map generation {}: {} block(s) mapped in {} run(s) of {} slot(s), {} dirty; {job}; {plan}",
            self.map_generation,
            self.map.mapped_blocks(),
            self.map.extent_count(),
            self.geo.slot_count,
            self.slots.iter().filter(|s| s.dirty).count()
        )
    }
}

/// Puts extra copies of home blocks `[home, home + count)` at slots from
/// `slot` into the first layer where none of them has a copy yet.
pub(super) fn insert_extra(
    extras: &mut Vec<crate::blockmap::BlockMap<u64>>,
    home: u64,
    count: u64,
    slot: u64,
) {
    let free = |l: &crate::blockmap::BlockMap<u64>| l.overlapping(home, count).is_empty();
    if !extras.iter().any(free) {
        extras.push(crate::blockmap::BlockMap::new());
    }
    let layer = extras.iter_mut().find(|l| free(l)).expect("a free layer");
    layer.insert(home, count, slot);
}
