//! Background work as step functions: idle detection, destage (one segment
//! per step, writes issued in data-address order), reclaiming the ring's
//! tail behind a persisted checkpoint, and the dispatch of lower
//! completions. Nothing here blocks or loops over unbounded work.
//!
//! Reclaim rule (what makes stale resurrection impossible): a segment's
//! location is reused only after a checkpoint with a tail past its seq is
//! durable *in both copies* (written twice, one copy after the other, so a
//! damaged newest copy that sends recovery to the older one never sends it
//! to a reused location), and the tail passes a segment only when (a) every sector in it
//! has gone home by destage or been superseded, (b) every segment holding a
//! superseding entry or invalidation record is written, and (c) a lower
//! flush issued after all of that has completed. Replay starts at the tail
//! and walks seqs in order, so every superseded copy it meets is followed
//! by the entry or record that supersedes it.

use super::policy::{Candidate, Scope};
use super::{
    Dcd, HomeDestageWrite, HomeOp, HomeUpperWrite, Invalidation, Job, Loc, LowerOp, PackedLoc, SegMeta,
    SegState, Waiter,
};
use crate::seglog::{Checkpoint, FlushMark, SegLoc, Seq};
use bytes::Bytes;
use layoutd_core::{Completion, Instant, Op, ReqId, Request, SECTOR_BYTES};

const S: u64 = SECTOR_BYTES;
/// Longest destage write, in sectors (keeps one write under 256 KiB).
const DESTAGE_RUN_SECTORS_MAX: usize = 512;

impl Dcd {
    /// The runtime saw no foreground work: arm the idle timer (unless it is
    /// already waiting or idle, or nothing waits for destage), whose
    /// threshold falls from `idle_ms_max` (empty log) to `idle_ms_min` (full).
    pub(super) fn idle(&mut self, now: Instant) {
        if !self.serving() || !self.destage.idle.can_arm() {
            return;
        }
        if !self.any_dirty_segment() {
            return;
        }
        self.destage.idle.arm(now, self.idle_threshold_ns());
    }

    /// `max * (min/max)^utilization`: 1 s when empty, 1 ms when full (defaults).
    pub fn idle_threshold_ns(&self) -> u64 {
        let used = self.log.ring.segments.in_use() as f64 / f64::from(self.geo.segment_count);
        assert!((0.0..=1.0).contains(&used));
        let (max, min) = (self.args.idle_ms_max as f64 * 1e6, self.args.idle_ms_min as f64 * 1e6);
        let t = max * (min / max).powf(used);
        assert!(t >= min - 1.0 && t <= max + 1.0);
        t as u64
    }

    pub(super) fn timeout(&mut self, now: Instant) {
        if self.log.buffer_deadline.is_some_and(|t| t <= now) {
            self.log.buffer_deadline = None;
            if let Some(loc) = self.log.open.filter(|l| !self.log.segs[l.0 as usize].entries.is_empty()) {
                self.seal(loc);
            }
        }
        self.destage.idle.timeout(now, false);
        if self.log.retry.backoff.take_due(now) {
            for loc in std::mem::take(&mut self.log.retry.segments) {
                self.counters.lower_write_retries_count += 1;
                self.write_sealed(loc);
            }
            if std::mem::take(&mut self.log.retry.checkpoint) {
                self.counters.lower_write_retries_count += 1;
            }
        }
    }

    /// A log write failed: waiters that depended on it get the error now
    /// (their data stays in RAM and is written again after a backoff), and
    /// nothing else is affected.
    fn log_write_failed(&mut self, now: Instant, what: String, err: layoutd_core::IoError) {
        let written = self.log.ring.written_upto;
        let (failed, waiting): (Vec<_>, Vec<_>) =
            std::mem::take(&mut self.acks.waiters).into_iter().partition(|w| w.upto > written);
        self.acks.waiters = waiting;
        for id in failed.into_iter().flat_map(|w| w.acks) {
            self.complete_upper(Completion::err(id, err));
        }
        self.log.retry.backoff.failed(now, format!("{what}: {err}"));
    }

    /// Dirty segments on disk with sectors still to move home, into
    /// `out`: all of them, or only the first from the end `scope` names.
    fn candidates(&self, scope: Scope, out: &mut Vec<Candidate>) {
        // Destaging a segment before every older one is durable could put
        // a write home whose predecessors a crash then loses.
        let (tail, end) = (self.log.ring.tail(), self.log.ring.head().min(self.log.ring.durable_upto));
        let count = u64::from(self.geo.segment_count);
        // Ring locations step by one and wrap (no division per segment).
        let first = u64::from(self.geo.location(tail).0);
        let candidate =
            |s: u64| {
                let at = first + (s - tail.0);
                let loc = SegLoc(if at >= count { at - count } else { at } as u32);
                let seg = &self.log.segs[loc.0 as usize];
                (seg.state == SegState::Dirty && seg.valid_sectors > 0 && !seg.destaging)
                    .then_some(Candidate { seq: Seq(s), loc, valid_sectors: seg.valid_sectors })
            };
        let seqs = tail.0..end.0.max(tail.0);
        out.clear();
        match scope {
            Scope::All => out.extend(seqs.filter_map(candidate)),
            Scope::Oldest => out.extend(seqs.filter_map(candidate).next()),
            Scope::Newest => out.extend(seqs.rev().filter_map(candidate).next()),
        }
    }

    /// Whether a destage step should start now.
    pub fn should_destage(&self, now: Instant) -> bool {
        self.serving()
            && self.destage.job.is_none()
            && (self.destage.idle.is_idle(now) || self.destage.forced)
    }

    /// Starts destaging one segment: the policy's pick when idle, the
    /// oldest when the log is full. Returns false if there is nothing to do
    /// (then idle destage ends until the next idle threshold has passed).
    pub fn step_destage(&mut self, now: Instant) -> bool {
        assert!(self.should_destage(now));
        // Forced: the oldest. The previous step's buffer: no allocation per step.
        let forced = !self.destage.idle.is_idle(now);
        let scope = if forced { Scope::Oldest } else { self.policy.scope() };
        let mut candidates = std::mem::take(&mut self.destage.candidates);
        self.candidates(scope, &mut candidates);
        let pick = match candidates[..] {
            [] => None,
            _ if forced => candidates.iter().min_by_key(|c| c.seq).copied(),
            _ => Some(self.policy.pick(&candidates)),
        };
        self.destage.candidates = candidates;
        let Some(pick) = pick else {
            if self.log.ring.durable_upto < self.log.ring.written_upto {
                self.flush_for_durability();
            } else {
                self.destage.idle.finish();
            }
            return false;
        };
        self.start_job(pick.loc, forced);
        true
    }

    /// Written segments exist that are not yet known durable: one flush.
    fn flush_for_durability(&mut self) {
        if self.log.ring.durable_flush_busy {
            return;
        }
        self.log.ring.durable_flush_busy = true;
        let upto = self.log.ring.written_upto;
        self.emit(
            LowerOp::DurableFlush(Box::new(Waiter { acks: Vec::new(), upto })),
            Request::new(ReqId(0), Op::Flush, 0, 0),
        );
    }

    /// A flush issued when `upto` was the written mark completed.
    fn durable(&mut self, upto: Seq) {
        assert!(upto <= self.log.ring.written_upto);
        self.log.ring.durable_upto = self.log.ring.durable_upto.max(upto);
    }

    fn start_job(&mut self, loc: SegLoc, forced: bool) {
        assert!(self.destage.job.is_none());
        let seg = &mut self.log.segs[loc.0 as usize];
        assert_eq!(seg.state, SegState::Dirty);
        assert!(!seg.destaging && seg.valid_sectors > 0);
        seg.destaging = true;
        let used = seg.slots.len() as u64 * u64::from(self.geo.slot_bytes);
        let job = Job {
            loc,
            seq: seg.seq,
            forced,
            read_done: false,
            runs_left: 0,
            writes_in_flight: 0,
            failed: false,
        };
        self.destage.job = Some(job);
        if forced {
            self.counters.forced_destages_count += 1;
        }
        let offset = self.geo.slot_offset_bytes(loc, 0);
        self.emit(LowerOp::DestageRead { loc }, Request::new(ReqId(0), Op::Read, offset, used as u32));
    }

    /// The segment's slots were read: queue its valid sectors home, sorted
    /// by data address and merged into runs.
    fn destage_read_done(&mut self, loc: SegLoc, c: Completion) {
        let job = self.destage.job.as_mut().expect("a job is running");
        assert_eq!(job.loc, loc);
        job.read_done = true;
        if c.result.is_err() {
            job.failed = true;
            return;
        }
        let seg = &self.log.segs[loc.0 as usize];
        let mut sectors: Vec<(u64, PackedLoc)> = Vec::with_capacity(seg.valid_sectors as usize);
        // Slots in data-address order, so the sectors usually come out
        // sorted already (the sort below then only checks).
        let mut order: Vec<u16> = (0..seg.slots.len() as u16).collect();
        order.sort_by_key(|&i| seg.slots[i as usize].start_sector);
        for slot in order {
            let meta = &seg.slots[usize::from(slot)];
            let base = self.lookup.pack(Loc { seg: loc, slot, within: 0 });
            let mut valid = meta.valid_mask;
            while valid != 0 {
                let w = valid.trailing_zeros();
                valid &= valid - 1;
                sectors.push((meta.start_sector + u64::from(w), base.within_plus(w)));
            }
        }
        assert_eq!(sectors.len(), seg.valid_sectors as usize);
        if !sectors.is_sorted_by_key(|s| s.0) {
            sectors.sort_unstable_by_key(|s| s.0);
        }
        let seq = seg.seq;
        let mut i = 0;
        while i < sectors.len() {
            let limit = sectors.len().min(i + DESTAGE_RUN_SECTORS_MAX);
            let j = i + 1 + sectors[i..limit].windows(2).take_while(|w| w[1].0 == w[0].0 + 1).count();
            let data = c.data.as_ref().map(|d| {
                let mut v = Vec::with_capacity((j - i) * S as usize);
                for &(_, p) in &sectors[i..j] {
                    let l = self.lookup.unpack(p);
                    let at = usize::from(l.slot) * self.geo.slot_bytes as usize
                        + usize::from(l.within) * S as usize;
                    v.extend_from_slice(&d[at..at + S as usize]);
                }
                Bytes::from(v)
            });
            let locs = sectors[i..j].iter().map(|s| s.1).collect();
            self.destage.job.as_mut().expect("running").runs_left += 1;
            self.home_submit(HomeOp::Destage { seq, first: sectors[i].0, locs, data });
            i = j;
        }
    }

    /// Issues a destage run, skipping sectors overwritten since it was read.
    pub(super) fn destage_issue(
        &mut self,
        seq: Seq,
        first: u64,
        mut locs: Vec<PackedLoc>,
        data: Option<Bytes>,
    ) {
        let job = self.destage.job.as_mut().expect("destage runs belong to the running job");
        assert!(job.runs_left > 0 && job.seq == seq);
        assert!(!locs.is_empty());
        job.runs_left -= 1;
        let mut runs = Vec::new();
        self.lookup.current_runs(first, &locs, |i, j| runs.push((i, j)));
        let whole = runs[..] == [(0, locs.len())];
        for (i, j) in runs {
            let (a, b) = (first + i as u64, first + j as u64);
            let slice = data.as_ref().map(|d| d.slice((i as u64 * S) as usize..(j as u64 * S) as usize));
            let mut req =
                Request::new(ReqId(0), Op::Write, self.args.data_offset_bytes + a * S, ((b - a) * S) as u32);
            req.data = slice;
            let piece = if whole { std::mem::take(&mut locs) } else { locs[i..j].to_vec() };
            let id = self
                .emit(LowerOp::HomeDestage(Box::new(HomeDestageWrite { seq, first: a, locs: piece })), req);
            self.home.gate.issued(id, (a, b));
            self.destage.job.as_mut().expect("running").writes_in_flight += 1;
        }
    }

    fn destage_write_done(&mut self, first: u64, locs: Vec<PackedLoc>, c: Completion) {
        let job = self.destage.job.as_mut().expect("a job is running");
        assert!(job.writes_in_flight > 0);
        job.writes_in_flight -= 1;
        if c.result.is_err() {
            job.failed = true;
            return;
        }
        let mut home = Invalidation::new(&mut self.log.segs, None);
        self.lookup.remove_if_run(first, &locs, |loc, n| home.add(loc, n));
        self.counters.destaged_bytes += home.finish() * S;
    }

    fn maybe_finish_job(&mut self) {
        let Some(job) = self.destage.job.as_ref() else { return };
        if !job.read_done || job.runs_left > 0 || job.writes_in_flight > 0 {
            return;
        }
        let job = self.destage.job.take().expect("present");
        let seg = &mut self.log.segs[job.loc.0 as usize];
        assert!(seg.destaging && seg.seq == job.seq);
        seg.destaging = false;
        assert!(job.failed || seg.valid_sectors == 0, "a finished destage leaves nothing valid");
        self.policy.complete(job.seq, !job.failed);
        self.counters.destaged_segments_count += 1;
        if job.failed {
            self.destage.idle.finish();
        }
        let _ = job.forced;
    }

    fn reclaimable(&self, seq: Seq) -> bool {
        let seg = &self.log.segs[self.geo.location(seq).0 as usize];
        assert_eq!(seg.seq, seq, "ring location holds the seq it should");
        seg.state == SegState::Dirty
            && seg.written
            && seg.valid_sectors == 0
            && seg.pins == 0
            && !seg.destaging
            && seg.superseded_seq_max.is_none_or(|s| s < self.log.ring.written_upto)
    }

    /// Moves the tail past reclaimable segments: flush, then checkpoint.
    pub(super) fn advance_tail(&mut self) {
        if self.log.ring.checkpoint_busy || self.log.retry.checkpoint {
            return;
        }
        let mut t = self.log.ring.tail();
        while t < self.log.ring.head() && self.reclaimable(t) {
            t = Seq(t.0 + 1);
        }
        if t == self.log.ring.tail() {
            return;
        }
        assert!(t <= self.log.ring.written_upto, "only written segments are reclaimed");
        self.log.ring.checkpoint_busy = true;
        let upto = self.log.ring.written_upto;
        self.emit(LowerOp::CheckpointFlush { tail: t, upto }, Request::new(ReqId(0), Op::Flush, 0, 0));
    }

    pub(super) fn write_checkpoint(&mut self, op: LowerOp, tail: Seq, fua: bool) {
        self.log.ring.generation += 1;
        let ck = Checkpoint {
            generation: self.log.ring.generation,
            boot: self.log.ring.boot,
            replay_from_seq: tail,
            resume_seq: self.log.ring.resume,
            durable_upto: self.log.ring.durable_upto,
            format_id: self.log.ring.format_id,
        };
        self.counters.checkpoints_written_count += 1;
        self.emit_metadata(op, self.geo.checkpoint_offset_bytes(ck.generation), ck.encode(&self.geo), fua);
    }

    /// Sends one metadata block write below.
    fn emit_metadata(&mut self, op: LowerOp, offset_bytes: u64, block: Vec<u8>, fua: bool) {
        let mut req = Request::write(ReqId(0), offset_bytes, Bytes::from(block));
        req.fua = fua;
        self.emit(op, req);
    }

    /// Writes a flush mark saying every seq below `upto` is durable.
    pub(super) fn write_mark(&mut self, op: LowerOp, upto: Seq) {
        self.log.ring.mark_generation += 1;
        let mark = FlushMark {
            generation: self.log.ring.mark_generation,
            boot: self.log.ring.boot,
            durable_upto: upto,
        };
        self.counters.flush_marks_written_count += 1;
        self.emit_metadata(op, self.geo.mark_offset_bytes(mark.generation), mark.encode(&self.geo), true);
    }

    /// Acknowledgements whose flush completed wait for a flush mark that
    /// covers them (one mark write at a time, covering every waiter).
    fn write_mark_if_needed(&mut self) {
        if self.log.ring.mark_busy {
            return;
        }
        let Some(upto) = self.acks.mark_waiters.iter().map(|w| w.upto).max() else { return };
        assert!(upto <= self.log.ring.durable_upto, "a mark never claims more than is durable");
        self.log.ring.mark_busy = true;
        self.write_mark(LowerOp::MarkWrite { upto }, upto);
    }

    /// A flush for acknowledgements completed: they go out now if the mark
    /// on disk already covers `upto`, else after the next mark.
    fn flushed_for(&mut self, acks: Vec<ReqId>, upto: Seq, result: Result<(), layoutd_core::IoError>) {
        if result.is_err() || upto <= self.log.ring.mark_upto {
            for id in acks {
                self.complete_upper(Completion { id, result, data: None });
            }
            return;
        }
        self.acks.mark_waiters.push(Waiter { acks, upto });
        self.write_mark_if_needed();
    }

    fn mark_written(&mut self, upto: Seq, result: Result<(), layoutd_core::IoError>) {
        assert!(self.log.ring.mark_busy);
        self.log.ring.mark_busy = false;
        if result.is_ok() {
            self.log.ring.mark_upto = self.log.ring.mark_upto.max(upto);
        }
        let mark_upto = self.log.ring.mark_upto;
        let (done, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut self.acks.mark_waiters)
            .into_iter()
            .partition(|w| result.is_err() || w.upto <= mark_upto);
        self.acks.mark_waiters = waiting;
        for w in done {
            let r = if w.upto <= mark_upto { Ok(()) } else { result };
            for id in w.acks {
                self.complete_upper(Completion { id, result: r, data: None });
            }
        }
        self.write_mark_if_needed();
    }

    /// The checkpoint is durable in both copies: segments before `tail`
    /// are free, and no readable copy can send a replay to them.
    fn tail_persisted(&mut self, tail: Seq) {
        assert!(tail > self.log.ring.tail() && tail <= self.log.ring.head());
        for s in self.log.ring.tail().0..tail.0 {
            let loc = self.geo.location(Seq(s));
            let seg = std::mem::replace(&mut self.log.segs[loc.0 as usize], SegMeta::free());
            assert!(seg.valid_sectors == 0 && seg.pins == 0);
            // Slots of consecutive sectors (a sequential write) in one pass.
            let mut run: Option<(u64, u64)> = None;
            for e in &seg.entries {
                if let crate::seglog::Entry::Slot { start_sector, sector_count, .. } = *e {
                    match &mut run {
                        Some((a, n)) if *a + *n == start_sector => *n += u64::from(sector_count),
                        _ => {
                            if let Some((a, n)) = run {
                                self.lookup.clear_visible_in(a, n, seg.seq);
                            }
                            run = Some((start_sector, u64::from(sector_count)));
                        }
                    }
                }
            }
            if let Some((a, n)) = run {
                self.lookup.clear_visible_in(a, n, seg.seq);
            }
        }
        self.log.ring.segments.release_below(tail.0);
        self.log.ring.checkpoint_busy = false;
    }

    /// Dispatches one lower completion.
    pub(super) fn completion(&mut self, now: Instant, op: LowerOp, c: Completion) {
        let failed = c.result.is_err();
        match op {
            LowerOp::Bringup => self.bringup_done(now, c),
            LowerOp::SegPreflush { loc } if !failed => self.write_segment(loc),
            LowerOp::SegWrite { loc } if !failed => self.segment_written(loc),
            LowerOp::SegPreflush { loc } | LowerOp::SegWrite { loc } => {
                let err = c.result.expect_err("failed");
                let what = format!(
                    "writing log segment {} at lower offset {}",
                    loc.0,
                    self.geo.segment_offset_bytes(loc)
                );
                self.log.retry.segments.push(loc);
                self.log_write_failed(now, what, err);
            }
            LowerOp::DurableFlush(w) => {
                let Waiter { acks, upto } = *w;
                if acks.is_empty() {
                    self.log.ring.durable_flush_busy = false;
                }
                if !failed {
                    self.durable(upto);
                }
                if !acks.is_empty() {
                    self.flushed_for(acks, upto, c.result);
                }
            }
            LowerOp::MarkWrite { upto } => self.mark_written(upto, c.result),
            LowerOp::ReadPiece { key, within_bytes, pin } => {
                if let Some(loc) = pin {
                    self.log.segs[loc.0 as usize].pins -= 1;
                }
                self.read_piece_done(key, within_bytes, c.data, c.result);
            }
            LowerOp::ReadWhole { id, pin } => {
                if let Some(loc) = pin {
                    self.log.segs[loc.0 as usize].pins -= 1;
                }
                self.complete_upper(Completion { id, ..c });
            }
            LowerOp::HomeUpper(h) => {
                let HomeUpperWrite { id, fua, start, count, arrival } = *h;
                assert!(self.home.gate.completed(c.id.0));
                self.home_upper_done(Completion { id, ..c }, fua, start, count, arrival);
                self.home_retry();
            }
            LowerOp::HomeDestage(d) => {
                let HomeDestageWrite { seq, first, locs } = *d;
                assert!(self.home.gate.completed(c.id.0));
                assert_eq!(
                    self.destage.job.as_ref().map(|j| j.seq),
                    Some(seq),
                    "destage writes belong to the job"
                );
                self.destage_write_done(first, locs, c);
                self.home_retry();
            }
            LowerOp::DestageRead { loc } => self.destage_read_done(loc, c),
            LowerOp::CheckpointFlush { tail, upto } if !failed => {
                self.durable(upto);
                self.write_checkpoint(LowerOp::CheckpointWrite { tail, second: false }, tail, true)
            }
            LowerOp::CheckpointWrite { tail, second: false } if !failed => {
                self.write_checkpoint(LowerOp::CheckpointWrite { tail, second: true }, tail, true)
            }
            LowerOp::CheckpointWrite { tail, second: true } if !failed => self.tail_persisted(tail),
            LowerOp::CheckpointFlush { .. } | LowerOp::CheckpointWrite { .. } => {
                let err = c.result.expect_err("failed");
                self.log.ring.checkpoint_busy = false;
                self.log.retry.checkpoint = true;
                let at = self.geo.region_offset_bytes;
                self.log
                    .retry
                    .backoff
                    .failed(now, format!("writing the log checkpoint at lower offset {at}: {err}"));
            }
        }
        self.maybe_finish_job();
    }

    /// Runs after every input: admit held requests, complete durable
    /// waiters, reclaim the tail, start background steps.
    pub(super) fn after_change(&mut self, now: Instant) {
        if !self.serving() {
            return;
        }
        self.flush_pending_invalidations(now);
        self.retry_pending(now);
        self.process_waiters();
        self.advance_tail();
        self.serve_waiting_reads(now);
    }

    /// `read_fragmented = "destage"`: destage what a fragmented read needs,
    /// then read it from where it now is.
    fn serve_waiting_reads(&mut self, now: Instant) {
        let Some(req) = self.destage.reads_waiting.front() else { return };
        let start = req.offset_bytes / S;
        let locs = self.lookup.get_range(start, u64::from(req.length_bytes) / S);
        let segs: Vec<SegLoc> = locs.iter().flatten().map(|l| l.seg).collect();
        let on_disk = segs.iter().find(|l| self.log.segs[l.0 as usize].state == SegState::Dirty).copied();
        match on_disk {
            None => {
                let req = self.destage.reads_waiting.pop_front().expect("front");
                self.read(now, req);
            }
            Some(loc) if self.destage.job.is_none() && !self.log.segs[loc.0 as usize].destaging => {
                if self.log.segs[loc.0 as usize].seq < self.log.ring.durable_upto {
                    self.start_job(loc, true);
                } else {
                    self.flush_for_durability();
                }
            }
            Some(_) => {}
        }
    }
}
