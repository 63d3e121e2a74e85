//! Replication (§3.2, §4.1.3): the candidate queue and its commit
//! decision, replica placement in the current free extent, replica writes
//! (inline or in idle time), replica choice (§3.3) and reclamation (§3.4).

use super::streams::{close, Candidate};
use super::{Choice, Held, LowerOp, Pending, Replica, When};
use crate::blockmap::outside;
use bytes::Bytes;
use layoutd_core::streams::base_run;
use layoutd_core::{Instant, Op, ReqId, Request, StreamId};

/// Replica writes issued per background step in idle mode.
const IDLE_STEP_WRITES_MAX: usize = 16;

impl Replica {
    /// Whether a read of `stream` may become a candidate now.
    pub(super) fn may_replicate(&mut self, _now: Instant, stream: StreamId) -> bool {
        let quota = self.args.stream_quota_blocks;
        let s = self.streams.get(stream);
        if s.over_quota(quota) {
            self.counters.quota_stops_count += 1;
            return false;
        }
        if self.memory_bytes() >= self.args.memory_bytes_max {
            self.counters.memory_cap_stops_count += 1;
            return false;
        }
        true
    }

    /// The replica chain a read of `[ba, ba + n)` by `stream` uses, if
    /// any: one close to the history of its base stream or its own (a run
    /// split off the base, streams.rs), else (when the read seeks anyway, close to
    /// nothing) any; among several, by `replica_choice`. Also whether the
    /// chain picked is close to the stream's most recent read: the stream
    /// is *following* a chain, not jumping into one (with a long history a
    /// random read is close to some entry by chance).
    pub(super) fn choose_chain(
        &mut self,
        stream: StreamId,
        ba: u64,
        n: u64,
        close_count: u32,
    ) -> Option<(u64, bool)> {
        let chains = self.space.chains(ba, n);
        if chains.is_empty() {
            return None;
        }
        let close_blocks = self.args.close_blocks;
        let base = base_run(stream);
        let (run_history, run_last) = match self.streams.peek_mut(stream) {
            Some(r) if base != stream => (r.history.clone(), r.history.back().copied()),
            _ => (Default::default(), None),
        };
        let s = self.streams.get(base);
        let near: Vec<u64> = chains
            .iter()
            .map(|c| c.1)
            .filter(|&loc| {
                s.history.iter().chain(&run_history).any(|&h| close(h, (loc, loc + n), close_blocks))
            })
            .collect();
        let pool: Vec<u64> = if !near.is_empty() {
            near
        } else if close_count == 0 {
            chains.iter().map(|c| c.1).collect()
        } else {
            return None;
        };
        let pick = match self.args.replica_choice {
            Choice::Lowest => pool.iter().copied().min(),
            Choice::Mru => {
                pool.iter().copied().max_by_key(|&l| (self.space.forward.get(l).map(|r| r.used), l))
            }
            Choice::Longest => pool.iter().copied().max_by_key(|&l| {
                (self.chain_length(l, self.args.reclaim_range_blocks, false), std::cmp::Reverse(l))
            }),
        };
        assert!(pick.is_none_or(|l| pool.contains(&l)));
        let last = self.streams.get(base).history.back().copied();
        pick.map(|l| (l, last.iter().chain(&run_last).any(|&h| close(h, (l, l + n), close_blocks))))
    }

    /// Replica blocks in a row from `loc`, at most `max`; with `whole`,
    /// only whole map extents (runs of consecutive originals: a replicated
    /// read, or reads of consecutive blocks), so the count ends where a
    /// read ends rather than inside one.
    pub(super) fn chain_length(&self, loc: u64, max: u64, whole: bool) -> u64 {
        let mut n = 0;
        for (_, l, v) in self.space.forward.range(loc, max + u64::from(whole)) {
            if v.is_none() || (whole && n + l > max) {
                break;
            }
            n += l;
        }
        n.min(max)
    }

    /// A candidate read completed with `data`: queue it, or replicate it
    /// at once inside a commit window.
    pub(super) fn candidate_read(
        &mut self,
        now: Instant,
        stream: StreamId,
        orig: u64,
        blocks: u64,
        data: Option<Bytes>,
    ) {
        // The original may have been overwritten while the read was in flight.
        if !self.space.declared.free_parts(orig, blocks).is_empty() {
            return;
        }
        let batch_max = match self.args.write_batch_count {
            0 => self.args.queue_commit_count,
            n => n,
        } as usize;
        let s = self.streams.get(stream);
        if s.committed_left > 0 {
            // Inside a commit window: written in batches of
            // write_batch_count, each contiguous, so the arm visits the
            // replica extent once per batch rather than once per read.
            s.committed_left -= 1;
            if s.batch.is_empty() {
                s.batch_since = Some(now);
            }
            s.batch.push(Candidate { orig, blocks, data });
            if s.batch.len() >= batch_max || s.committed_left == 0 {
                self.flush_batch(now, stream);
            }
            return;
        }
        if s.queue.is_empty() {
            s.queue_since = Some(now);
        }
        s.queue.push(Candidate { orig, blocks, data });
        if s.queue.len() < self.args.queue_commit_count as usize {
            return;
        }
        let sequential = s.queue_sequential_count(self.args.close_blocks);
        let queue = std::mem::take(&mut s.queue);
        s.queue_since = None;
        if sequential >= self.args.queue_sequential_cancel_count {
            self.counters.queues_cancelled_noise_count += 1;
            return;
        }
        if self.congested() {
            self.counters.congestion_backoffs_count += 1;
            self.streams.get(stream).backoff_left = self.args.congestion_backoff_reads;
            return;
        }
        self.counters.queues_committed_count += 1;
        self.streams.get(stream).committed_left = self.args.replicate_after_commit_count;
        for c in queue {
            self.replicate(now, stream, c);
        }
    }

    /// Writes a stream's batch of committed candidates.
    pub(super) fn flush_batch(&mut self, now: Instant, stream: StreamId) {
        let s = self.streams.get(stream);
        let batch = std::mem::take(&mut s.batch);
        s.batch_since = None;
        for c in batch {
            self.replicate(now, stream, c);
        }
    }

    fn congested(&self) -> bool {
        self.pending.len() >= self.args.congestion_in_flight_max as usize
            || self.pending_blocks * self.block() >= self.args.pending_bytes_max
    }

    /// Places one candidate and records its replica write (issued when the
    /// region record covers its blocks, and in idle mode when granted).
    fn replicate(&mut self, now: Instant, stream: StreamId, c: Candidate) {
        if self.congested() {
            self.counters.congestion_backoffs_count += 1;
            let s = self.streams.get(stream);
            s.backoff_left = self.args.congestion_backoff_reads;
            s.committed_left = 0;
            return;
        }
        let Some(loc) = self.place(now, stream, c.orig, c.blocks) else { return };
        self.space.free.take(loc, c.blocks);
        let key = self.next_pending;
        self.next_pending += 1;
        let p = Pending {
            orig: c.orig,
            blocks: c.blocks,
            loc,
            data: c.data,
            stream,
            valid: true,
            region_version: self.region.version,
            issued: false,
            decided_at: now,
        };
        self.pending_blocks += p.blocks;
        self.pending.insert(key, p);
        self.deferred.push_back(key);
        self.pump_region();
    }

    /// Where `blocks` replicas of originals at `orig` go: the current
    /// extent (the stream's own with `extent_per_stream`) if they fit, else
    /// the largest free extent of at least `free_extent_blocks_min` not
    /// close to the originals and outside other streams' current extents
    /// (reclaiming if there is none), which joins the region.
    fn place(&mut self, now: Instant, stream: StreamId, orig: u64, blocks: u64) -> Option<u64> {
        if let Some((c, e)) = self.current_extent(stream) {
            if e - c >= blocks && self.space.free.is_free(c, blocks) && self.grow_region(c, blocks) {
                self.set_current_extent(stream, Some((c + blocks, e)));
                return Some(c);
            }
        }
        self.set_current_extent(stream, None);
        let mut pick = self.pick_extent(orig, blocks);
        if pick.is_none() && self.try_reclaim(now).is_some() {
            pick = self.pick_extent(orig, blocks);
        }
        let Some((s, l)) = pick else {
            self.counters.no_space_count += 1;
            return None;
        };
        let len = l.min(self.args.reclaim_range_blocks.max(blocks) * 8);
        if !self.grow_region(s, len) {
            return None;
        }
        self.set_current_extent(stream, Some((s + blocks, s + len)));
        Some(s)
    }

    fn current_extent(&mut self, stream: StreamId) -> Option<(u64, u64)> {
        if self.args.extent_per_stream {
            self.streams.get(stream).extent
        } else {
            self.current
        }
    }

    fn set_current_extent(&mut self, stream: StreamId, extent: Option<(u64, u64)>) {
        if self.args.extent_per_stream {
            self.streams.get(stream).extent = extent;
        } else {
            self.current = extent;
        }
    }

    /// Makes `[s, s + n)` part of the region (a new version, to be durable
    /// before any replica write there); false if the record would not
    /// hold it.
    fn grow_region(&mut self, s: u64, n: u64) -> bool {
        if self.space.region.free_parts(s, n) == [(s, n)] {
            return true;
        }
        if self.space.region.extent_count() + 1 > super::meta::extents_max(self.args.meta_record_bytes) {
            self.counters.region_full_count += 1;
            return false;
        }
        self.space.region.release_range(s, n);
        self.region.version += 1;
        true
    }

    fn pick_extent(&self, orig: u64, blocks: u64) -> Option<(u64, u64)> {
        let min = self.args.free_extent_blocks_min.max(blocks);
        let close_blocks = self.args.close_blocks;
        // Other streams' current extents (only with extent_per_stream: the
        // one shared extent was given up before this is called).
        let mut taken = self.streams.extents();
        taken.sort_unstable();
        self.space
            .free
            .extents()
            .flat_map(|(s, l)| outside(s, s + l, &taken))
            .filter(|&(s, l)| l >= min && !close((s, s + l), (orig, orig + blocks), close_blocks))
            .max_by_key(|&(s, l)| (l, std::cmp::Reverse(s)))
    }

    /// Since when the oldest deferred replica write not yet overdue waits
    /// (the idle timer's maximum wait counts from there).
    pub(super) fn waiting_since(&self) -> Option<Instant> {
        // Keys are pushed in increasing order: the ones past
        // `overdue_through` are a suffix.
        let first = match self.overdue_through {
            None => 0,
            Some(o) => self.deferred.partition_point(|&k| k <= o),
        };
        self.deferred.get(first).map(|k| self.pending[k].decided_at)
    }

    /// Inline mode: issues deferred replica writes, in order, whose region
    /// record is durable.
    pub(super) fn issue_ready_replicas(&mut self, _now: Instant) {
        if self.args.replication != When::Inline {
            return;
        }
        loop {
            let run = self.take_ready_run();
            if run.is_empty() {
                break;
            }
            self.submit_run(run);
        }
    }

    /// Idle mode: one granted background step.
    pub(super) fn step_replication(&mut self, _now: Instant) -> u64 {
        let mut bytes = 0;
        for _ in 0..IDLE_STEP_WRITES_MAX {
            let run = self.take_ready_run();
            if run.is_empty() {
                break;
            }
            bytes += run.iter().map(|k| self.pending[k].blocks).sum::<u64>() * self.block();
            self.submit_run(run);
        }
        bytes
    }

    /// The deferred replica writes at the front that are ready and whose
    /// blocks follow each other: one lower write (the thesis relied on the
    /// block layer's merging for this; a disk pays a rotation per write).
    fn take_ready_run(&mut self) -> Vec<u64> {
        let mut run: Vec<u64> = Vec::new();
        let mut end = None;
        let mut blocks = 0;
        while let Some(&k) = self.deferred.front() {
            let p = &self.pending[&k];
            let follows = end.is_none_or(|e| e == p.loc);
            let fits = (blocks + p.blocks) * self.block() <= self.args.write_run_bytes_max;
            if p.region_version > self.region.durable || !follows || (!run.is_empty() && !fits) {
                break;
            }
            end = Some(p.loc + p.blocks);
            blocks += p.blocks;
            run.push(k);
            self.deferred.pop_front();
        }
        run
    }

    fn submit_run(&mut self, run: Vec<u64>) {
        let first = &self.pending[&run[0]];
        let last = &self.pending[run.last().expect("a run")];
        let range = (first.loc, last.loc + last.blocks);
        if let Some(Held::Replica { pendings }) = self.gate.submit(range, Held::Replica { pendings: run }) {
            self.issue_run_now(pendings);
        }
    }

    /// Issues a run of replica writes (the gate let it go): the stale ones
    /// are dropped, the rest go as contiguous lower writes.
    pub(super) fn issue_run_now(&mut self, run: Vec<u64>) {
        let (valid, stale): (Vec<u64>, Vec<u64>) = run.into_iter().partition(|k| self.pending[k].valid);
        for k in stale {
            self.replica_written(Instant::ZERO, k, false);
        }
        let mut piece: Vec<u64> = Vec::new();
        for k in valid {
            let follows = piece.last().is_none_or(|l| {
                let p = &self.pending[l];
                p.loc + p.blocks == self.pending[&k].loc
            });
            if !follows {
                self.emit_run(std::mem::take(&mut piece));
            }
            piece.push(k);
        }
        if !piece.is_empty() {
            self.emit_run(piece);
        }
    }

    fn emit_run(&mut self, keys: Vec<u64>) {
        let b = self.block();
        let loc = self.pending[&keys[0]].loc;
        let blocks: u64 = keys.iter().map(|k| self.pending[k].blocks).sum();
        let mut data = Some(bytes::BytesMut::with_capacity((blocks * b) as usize));
        for k in &keys {
            let p = self.pending.get_mut(k).expect("pending");
            p.issued = true;
            match (p.data.take(), data.as_mut()) {
                (Some(d), Some(buf)) => buf.extend_from_slice(&d),
                _ => data = None,
            }
        }
        let mut w = Request::new(ReqId(0), Op::Write, loc * b, (blocks * b) as u32);
        w.data = data.map(|d| d.freeze());
        w.stream = self.pending[&keys[0]].stream;
        let id = self.emit(LowerOp::ReplicaWrite { pendings: keys }, w);
        self.gate.issued(id, (loc, loc + blocks));
    }

    /// A replica write finished (or was dropped before issue): record the
    /// replica if it is still valid, else give its blocks back.
    pub(super) fn replica_written(&mut self, _now: Instant, k: u64, ok: bool) {
        let p = self.pending.remove(&k).expect("a pending replica write");
        self.pending_blocks -= p.blocks;
        debug_assert_eq!(self.pending_blocks, self.pending.values().map(|p| p.blocks).sum::<u64>());
        let fresh = self.space.declared.free_parts(p.orig, p.blocks).is_empty();
        if ok && p.valid && fresh {
            self.map_changed();
            self.space.add_replica(p.orig, p.blocks, p.loc, self.tick);
            self.counters.replicas_created_blocks += p.blocks;
            self.streams.get(p.stream).created_blocks += p.blocks;
            return;
        }
        self.counters.replica_writes_cancelled_count += 1;
        for (s, l) in self.space.declared.free_parts(p.loc, p.blocks) {
            self.space.free.release_range(s, l);
        }
    }

    /// §3.4: from the bottom share of the LRU (and replicas older than
    /// `reclaim_age_max`), the `reclaim_range_blocks` range with the most
    /// candidates is reclaimed if more than `reclaim_candidates_min` are;
    /// otherwise every replica ages and the next attempt waits
    /// replicas / `reclaim_wait_divisor` reads. Returns the range reclaimed.
    pub(super) fn try_reclaim(&mut self, _now: Instant) -> Option<(u64, u64)> {
        let total = self.space.replica_blocks();
        if total == 0 || self.reclaim.wait_reads > 0 {
            return None;
        }
        self.counters.reclaim_attempts_count += 1;
        let threshold = self.lru_threshold(total);
        let age_max = self.args.reclaim_age_max as u8;
        let cands: Vec<(u64, u64)> = self
            .space
            .forward
            .iter()
            .filter(|e| e.value.used <= threshold || e.value.age > age_max)
            .map(|e| (e.start, e.length))
            .collect();
        let range = self.args.reclaim_range_blocks;
        let (best_start, best) = best_window(&cands, range);
        if best <= self.args.reclaim_candidates_min {
            self.reclaim_failed(total);
            return None;
        }
        let start = best_start.min(self.space.free.total_units().saturating_sub(range));
        if self.thrashing(start, range) {
            self.counters.thrash_guard_count += 1;
            self.reclaim.wait_reads = (total / self.args.reclaim_wait_divisor).max(1) * 4;
            return None;
        }
        self.map_changed();
        let dropped = self.space.drop_replicas_in(start, range);
        for &(s, l) in &dropped {
            self.space.free.release_range(s, l);
        }
        self.counters.replicas_reclaimed_blocks += dropped.iter().map(|d| d.1).sum::<u64>();
        self.reclaim.bottom_permille = Self::bottom_start(&self.args);
        Some((start, range))
    }

    /// The LRU tick at or under which a replica is in the bottom share.
    fn lru_threshold(&self, total: u64) -> u32 {
        let mut by_use: Vec<(u32, u64)> =
            self.space.forward.iter().map(|e| (e.value.used, e.length)).collect();
        by_use.sort_unstable();
        let want = (total * u64::from(self.reclaim.bottom_permille)).div_ceil(1000).max(1);
        let mut acc = 0;
        for (used, l) in by_use {
            acc += l;
            if acc >= want {
                return used;
            }
        }
        u32::MAX
    }

    fn reclaim_failed(&mut self, total: u64) {
        self.counters.reclaim_failures_count += 1;
        let aged: Vec<_> = self.space.forward.iter().collect();
        for e in aged {
            let rep = super::space::Rep { age: e.value.age.saturating_add(1), ..e.value };
            self.space.forward.insert(e.start, e.length, rep);
        }
        self.reclaim.wait_reads = (total / self.args.reclaim_wait_divisor).max(1);
        if self.args.reclaim_growth {
            let max = self.args.reclaim_bottom_pct * 10;
            self.reclaim.bottom_permille = (self.reclaim.bottom_permille * 2).min(max);
        }
    }

    /// Thrash guard (the thesis's future work): most of the replicas in
    /// the range are *young*, created or used within the last
    /// replica-count reads, so reclaiming them throws away replicas before
    /// they had a chance to be used: the active set exceeds free space.
    /// Then replication simply stops until the replicas age.
    fn thrashing(&self, start: u64, range: u64) -> bool {
        if !self.args.thrash_guard {
            return false;
        }
        let window = u32::try_from(self.space.replica_blocks()).unwrap_or(u32::MAX);
        let (mut young, mut all) = (0, 0);
        for e in self.space.forward.overlapping(start, range) {
            all += e.length;
            if self.tick.wrapping_sub(e.value.used) < window {
                young += e.length;
            }
        }
        all > 0 && young * 2 > all
    }
}

/// Of candidate extents `(start, length)` in address order, the window of
/// `range` blocks starting at a candidate with the most candidate blocks:
/// `(start, count)`.
fn best_window(cands: &[(u64, u64)], range: u64) -> (u64, u64) {
    let (mut best_start, mut best) = (0, 0);
    let (mut j, mut inside) = (0usize, 0u64);
    for i in 0..cands.len() {
        let end = cands[i].0 + range;
        while j < cands.len() && cands[j].0 + cands[j].1 <= end {
            inside += cands[j].1;
            j += 1;
        }
        // The extent straddling the window's end counts in part.
        let partial = cands.get(j).map_or(0, |c| end.saturating_sub(c.0).min(c.1));
        if inside + partial > best {
            (best_start, best) = (cands[i].0, inside + partial);
        }
        if j > i {
            inside -= cands[i].1;
        } else {
            j = i + 1;
        }
    }
    (best_start, best)
}

#[cfg(test)]
mod tests {
    use super::{best_window, outside};

    #[test]
    fn outside_cuts_the_taken_ranges_out() {
        assert_eq!(outside(0, 10, &[]), vec![(0, 10)]);
        assert_eq!(outside(0, 10, &[(2, 4), (8, 12)]), vec![(0, 2), (4, 4)]);
        assert_eq!(outside(5, 10, &[(0, 6)]), vec![(6, 4)]);
        assert_eq!(outside(5, 10, &[(0, 20)]), vec![]);
    }

    #[test]
    fn the_best_window_counts_candidate_blocks() {
        assert_eq!(best_window(&[], 8), (0, 0));
        assert_eq!(best_window(&[(0, 2), (4, 2), (20, 8)], 8), (20, 8));
        assert_eq!(best_window(&[(0, 2), (4, 2), (20, 3)], 8), (0, 4));
        assert_eq!(best_window(&[(0, 2), (6, 10)], 8), (6, 8), "a long extent fills the window");
        assert_eq!(best_window(&[(0, 6), (7, 10)], 8), (7, 8));
        assert_eq!(
            best_window(&[(0, 6), (7, 1), (20, 3)], 8),
            (0, 7),
            "the straddling extent counts in part"
        );
    }
}
