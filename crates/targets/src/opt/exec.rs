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
//! 3. `CopyIn`: each new run is read from home and written to its slots
//!    (gated); an upper write to its home blocks while it is being copied
//!    marks it stale: copied again (twice at most), else left out.
//! 4. `Commit`: a flush (the copies are durable before any map names
//!    them), then a map with the copied runs (FUA; writes to their home
//!    blocks wait meanwhile); runs written to since the flush was issued
//!    are left out. Then the runs are mapped: the switch.

use super::analyze::{master_graph, plan, Range, WEIGHT_UNIT};
use super::{LowerOp, Opt, Slot};
use layoutd_core::{Completion, Instant, Op, ReqId, Request};
use std::collections::{BTreeMap, VecDeque};

/// Copies of one run given up after this many stale attempts.
const COPY_TRIES_MAX: u8 = 3;
/// Copy chains (read, then write) in flight at once, copy-in or copy-home:
/// a foreground request arriving in idle time waits behind at most these.
const COPIES_IN_FLIGHT_MAX: u32 = 2;
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
    Writing,
    Done,
    /// In the map (live).
    Committed,
    Abandoned,
}

/// Home blocks `[home, home + count)` copied to slots `[slot, slot + count)`.
#[derive(Clone, Copy, Debug)]
struct CopyRun {
    home: u64,
    slot: u32,
    count: u32,
    state: RunState,
    stale: bool,
    tries: u8,
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
    /// Home block → run, to mark runs stale.
    by_home: BTreeMap<u64, u32>,
    /// Runs being copied.
    runs_in_flight: u32,
    /// Blocks copied (`Done`) and not committed yet.
    uncommitted_blocks: u64,
    /// A lower error: finish what is in flight, then give the job up.
    aborted: bool,
}

impl Job {
    fn in_flight(&self) -> u32 {
        self.home_in_flight + self.runs_in_flight
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
                j.runs_in_flight == 0
                    || (j.runs.iter().any(|r| r.state == RunState::Todo) && j.runs_in_flight < limit)
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
        let limit = COPIES_IN_FLIGHT_MAX;
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

    /// Starts one run's copy; with none in flight and a commit due, starts
    /// the commit (its flush); with nothing left, ends the job.
    fn step_copy_in(&mut self) -> Option<u64> {
        let b = self.geo.block_bytes;
        let j = self.job.as_mut().expect("a job");
        if j.runs_in_flight == 0 && Self::commit_due(j) {
            j.phase = JobPhase::CommitFlush;
            self.emit(LowerOp::JobFlush, Request::new(ReqId(0), Op::Flush, 0, 0));
            return Some(0);
        }
        if j.runs_in_flight == 0 && j.todo.is_empty() {
            self.finish_job();
            return Some(0);
        }
        if j.runs_in_flight >= COPIES_IN_FLIGHT_MAX || Self::commit_due(j) {
            return None;
        }
        let run = j.todo.pop_front()?;
        let r = &mut j.runs[run as usize];
        assert_eq!(r.state, RunState::Todo);
        r.state = RunState::Reading;
        r.stale = false;
        j.runs_in_flight += 1;
        let (home, len) = (r.home, u64::from(r.count) * b);
        let req = Request::new(ReqId(0), Op::Read, self.geo.home_bytes(home * b), len as u32);
        self.emit_gated(LowerOp::CopyInRead { run }, req);
        Some(len)
    }

    fn finish_job(&mut self) {
        self.job = None;
        self.changing.clear();
        self.counters.reconfigurations_count += 1;
    }

    /// A copy, copy-home or job flush completed.
    pub(super) fn job_completion(&mut self, _now: Instant, op: LowerOp, c: Completion) {
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
            LowerOp::CopyInWrite { run } => self.copy_write_done(run, failed),
            other => unreachable!("not job I/O: {other:?}"),
        }
    }

    fn copy_read_done(&mut self, run: u32, c: Completion) {
        let j = self.job.as_mut().expect("a job");
        let r = &mut j.runs[run as usize];
        assert_eq!(r.state, RunState::Reading);
        if c.result.is_err() || r.stale || j.aborted {
            j.runs_in_flight -= 1;
            Self::retry_or_abandon(run, r, &mut j.todo, &mut self.counters.copies_stale_count);
            return;
        }
        r.state = RunState::Writing;
        let (slot, count) = (r.slot, r.count);
        let len = u64::from(count) * self.geo.block_bytes;
        let mut req = Request::new(ReqId(0), Op::Write, self.geo.slot_offset_bytes(slot), len as u32);
        req.data = c.data;
        self.emit_gated(LowerOp::CopyInWrite { run }, req);
    }

    fn copy_write_done(&mut self, run: u32, failed: bool) {
        let j = self.job.as_mut().expect("a job");
        let r = &mut j.runs[run as usize];
        assert_eq!(r.state, RunState::Writing);
        j.runs_in_flight -= 1;
        if failed || r.stale {
            Self::retry_or_abandon(run, r, &mut j.todo, &mut self.counters.copies_stale_count);
            return;
        }
        r.state = RunState::Done;
        j.uncommitted_blocks += u64::from(r.count);
        self.counters.copies_count += 1;
        self.counters.copied_bytes += u64::from(r.count) * self.geo.block_bytes;
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
        for (_, &i) in j.by_home.range(..end).rev() {
            let r = &mut j.runs[i as usize];
            if r.home + u64::from(r.count) <= first {
                break;
            }
            r.stale = true;
            if r.state == RunState::Done {
                r.state = RunState::Abandoned;
                j.uncommitted_blocks -= u64::from(r.count);
                self.counters.copies_stale_count += 1;
            }
        }
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
                let image = self.image(&drop, &[]);
                self.write_map(image);
            }
            JobPhase::Commit => {
                let adds: Vec<(u64, u32, u32)> = j
                    .runs
                    .iter()
                    .filter(|r| r.state == RunState::Done && !r.stale)
                    .map(|r| (r.home, r.count, r.slot))
                    .collect();
                if adds.is_empty() {
                    j.phase = JobPhase::CopyIn;
                    return;
                }
                j.phase = JobPhase::CommitWrite;
                self.changing = adds.iter().map(|&(h, c, _)| (h, h + u64::from(c))).collect();
                let image = self.image(&[], &adds);
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
                    let home = self.slots[s as usize].home.expect("mapped");
                    assert!(!self.slots[s as usize].dirty, "only clean slots are dropped");
                    self.map.remove(home, 1);
                    self.slots[s as usize] = Slot::default();
                }
                self.counters.dropped_blocks_count += j.drop.len() as u64;
                self.journal_queue.retain(|s| j.drop.binary_search(s).is_err());
                j.phase = JobPhase::CopyIn;
                self.changing.clear();
            }
            JobPhase::CommitWrite => {
                for r in j.runs.iter_mut().filter(|r| r.state == RunState::Done && !r.stale) {
                    self.map.insert(r.home, u64::from(r.count), u64::from(r.slot));
                    for i in 0..r.count {
                        let s = &mut self.slots[(r.slot + i) as usize];
                        assert!(s.home.is_none(), "a committed slot was free");
                        *s = Slot { home: Some(r.home + u64::from(i)), ..Slot::default() };
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

    /// Analyzes the whole profile and plans now; applies the plan when
    /// `auto_apply` and no job runs. Returns a summary.
    pub(super) fn plan_now(&mut self, now: Instant) -> String {
        self.analyze_slice(usize::MAX);
        let mut units = 0;
        let m = master_graph(&self.analyzer, &mut units);
        let p = plan(&m, u64::from(self.geo.slot_count), self.args.edge_weight_min * WEIGHT_UNIT, &mut units);
        self.counters.planning_units += units;
        self.counters.plans_count += 1;
        self.analyzer.halve();
        self.counters.analysis_units = self.analyzer.units;
        self.requests_since_plan = 0;
        self.last_plan_at = now;
        let blocks: u64 = p.iter().map(|(s, e)| e - s).sum();
        let summary = format!(
            "plan: {} range(s), {blocks} block(s) of {} slots, from {} atoms and {} edges",
            p.len(),
            self.geo.slot_count,
            m.atoms.len(),
            m.edges.len()
        );
        self.planned = Some(p.clone());
        if self.args.auto_apply && self.job.is_none() {
            let started = self.start_job(now, p).unwrap_or_else(|e| e);
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
        self.start_job(now, p)
    }

    /// Starts a reconfiguration towards `ranges` (in region order).
    pub(super) fn start_job(&mut self, _now: Instant, ranges: Vec<Range>) -> Result<String, String> {
        if self.job.is_some() {
            return Err("opt: a reconfiguration is in progress".into());
        }
        let volume_blocks = self.geo.volume_blocks();
        let mut new: Vec<(u64, u32)> = Vec::new();
        'fill: for (s, e) in ranges {
            for h in s..e.min(volume_blocks) {
                if new.len() == self.geo.slot_count as usize {
                    break 'fill;
                }
                new.push((h, new.len() as u32));
            }
        }
        let mut keep = vec![false; self.slots.len()];
        let mut runs: Vec<CopyRun> = Vec::new();
        let boundary = self.geo.opt_offset_bytes / self.geo.block_bytes;
        for &(home, slot) in &new {
            if self.map.get(home) == Some(u64::from(slot)) {
                keep[slot as usize] = true;
                continue;
            }
            match runs.last_mut() {
                Some(r)
                    if r.home + u64::from(r.count) == home
                        && r.slot + r.count == slot
                        && home != boundary
                        && r.count < self.args.copy_blocks_per_step =>
                {
                    r.count += 1
                }
                _ => {
                    runs.push(CopyRun { home, slot, count: 1, state: RunState::Todo, stale: false, tries: 0 })
                }
            }
        }
        let drop: Vec<u32> = (0..self.slots.len() as u32)
            .filter(|&s| self.slots[s as usize].home.is_some() && !keep[s as usize])
            .collect();
        if drop.is_empty() && runs.is_empty() {
            self.counters.plans_unchanged_count += 1;
            return Ok("the plan matches the region's contents: nothing to do".into());
        }
        let reply = format!(
            "reconfiguring: {} block(s) kept, {} to copy in {} run(s), {} to drop",
            keep.iter().filter(|&&k| k).count(),
            runs.iter().map(|r| u64::from(r.count)).sum::<u64>(),
            runs.len(),
            drop.len()
        );
        let by_home: BTreeMap<u64, u32> = runs.iter().enumerate().map(|(i, r)| (r.home, i as u32)).collect();
        assert_eq!(by_home.len(), runs.len(), "a plan places each block once");
        let home_todo = drop.iter().copied().filter(|&s| self.slots[s as usize].dirty).collect();
        self.job = Some(Job {
            phase: JobPhase::CopyHome,
            drop,
            home_todo,
            home_done: Vec::new(),
            home_in_flight: 0,
            todo: (0..runs.len() as u32).collect(),
            runs,
            by_home,
            runs_in_flight: 0,
            uncommitted_blocks: 0,
            aborted: false,
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
