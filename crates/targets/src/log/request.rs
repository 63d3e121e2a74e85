//! The request path: the work stack and its pump, reads, writes (with
//! read-modify-write of partial blocks), trims, flushes, the open segment
//! and its sealing, and the cleaning pass.

use super::config::Sliding;
use super::policy::Cause;
use super::{Blocked, Log, LowerOp, OpenSeg, Phase, Sealed, Work};
use crate::seglog::{segment_summaries, Entry, SegLoc, SegmentHeader};
use bytes::Bytes;
use layoutd_core::{Completion, Op, ReqId, Request};

/// What waits to run.
pub(super) enum Pending {
    /// An upper request.
    Upper(Request),
    /// A checkpoint asked for by message.
    Checkpoint,
    /// A cleaning pass asked for by message.
    Clean,
}

/// Where an upper request is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    Start,
    /// Reads issued (the request's own, or old bytes of partial blocks).
    Reading,
    /// Blocks being applied from `next_block` on.
    Applying,
    /// Flush or FUA: write the open segment's new part (or seal it).
    Sealing,
    /// Waiting for every segment write.
    Draining,
    /// The lower flush is in flight.
    Flushing,
    /// The flush mark is in flight.
    Marking,
}

/// An upper request in progress.
pub(super) struct UpperWork {
    pub(super) req: Request,
    stage: Stage,
    next_block: u64,
    /// Old bytes of partial blocks, by block (read-modify-write).
    old: Vec<(u64, Option<Bytes>)>,
    /// Reads of a read request: (io index, byte offset in the answer).
    pieces: Vec<(usize, u64)>,
    /// Bytes already known of a read (RAM buffers, zeroes).
    answer: Vec<u8>,
    /// Reclamation rounds run for this request (bounded).
    reclaim_rounds: u32,
    /// Space could not be made the policy's way: take any eligible segment.
    forced: bool,
}

impl UpperWork {
    fn new(req: Request) -> UpperWork {
        UpperWork {
            req,
            stage: Stage::Start,
            next_block: 0,
            old: Vec::new(),
            pieces: Vec::new(),
            answer: Vec::new(),
            reclaim_rounds: 0,
            forced: false,
        }
    }
}

/// A cleaning pass in progress: of victim segments, or (re-sequencing)
/// of one group of blocks.
pub(super) struct CleanWork {
    victims: Vec<SegLoc>,
    /// Re-sequencing: the groups whose live blocks `live` holds (in
    /// logical order), read by `runs`; empty for a cleaning pass.
    groups: Vec<u64>,
    /// Re-sequencing: per lower read, in disk order, its first slot id and
    /// its slot count (slots of one segment; dead slots between live ones
    /// are read through when the gap is small).
    runs: Vec<(u32, u32)>,
    issued: bool,
    read_done: bool,
    /// Live blocks to move: (block, slot id, bytes).
    live: Vec<(u64, u32, Option<Bytes>)>,
    next: usize,
    on_demand: bool,
}

impl Log {
    /// Runs works until the top one waits for I/O or nothing is left.
    pub(super) fn pump(&mut self) {
        let bringing_up = matches!(self.phase, Phase::Bringup(super::persist::Bringup::Finishing));
        if !self.serving() && !bringing_up {
            return;
        }
        loop {
            if self.works.is_empty() && !self.start_next() {
                return;
            }
            assert!(self.works.len() <= 4, "the work stack is bounded");
            let work = self.works.pop().expect("a work");
            let result = match work {
                Work::Upper(mut u) => self.step_upper(&mut u).map_err(|b| (b, Work::Upper(u))),
                Work::Clean(mut c) => self.step_clean(&mut c).map_err(|b| (b, Work::Clean(c))),
                Work::Checkpoint(mut k) => self.step_checkpoint(&mut k).map_err(|b| (b, Work::Checkpoint(k))),
            };
            match result {
                Ok(()) => {
                    if !self.serving() && !matches!(self.phase, Phase::Bringup(_)) {
                        return;
                    }
                    continue;
                }
                Err((blocked, work)) => {
                    self.works.push(work);
                    match blocked {
                        Blocked::Io | Blocked::Buffer => return,
                        Blocked::Checkpoint => self.works.push(Work::Checkpoint(Default::default())),
                        Blocked::Space => self.reclaim(),
                    }
                }
            }
        }
    }

    /// Starts the next pending item, or a due checkpoint; false if idle.
    fn start_next(&mut self) -> bool {
        if !self.serving() {
            return false;
        }
        if self.segments_since_checkpoint >= self.args.checkpoint_segments {
            self.works.push(Work::Checkpoint(Default::default()));
            return true;
        }
        if self.resequence_busy_due() {
            // The budget restarts whether or not a group needs the pass.
            self.busy_user_blocks = 0;
            if self.resequence_step(true).is_some() {
                self.counters.resequence_busy_passes_count += 1;
                return true;
            }
        }
        match self.pending.pop_front() {
            None => false,
            Some(Pending::Upper(req)) => {
                let w = UpperWork::new(req);
                self.works.push(Work::Upper(w));
                true
            }
            Some(Pending::Checkpoint) => {
                self.works.push(Work::Checkpoint(Default::default()));
                true
            }
            Some(Pending::Clean) => self.push_clean(false).is_some() || self.start_next(),
        }
    }

    /// A write is short of space: a checkpoint if one would free holes,
    /// else an on-demand cleaning pass, else let it take any segment.
    fn reclaim(&mut self) {
        let Some(Work::Upper(u)) = self.works.last_mut() else { panic!("only upper work waits for space") };
        u.reclaim_rounds += 1;
        let rounds = u.reclaim_rounds;
        let bound = 4 * self.geo.segment_count;
        if rounds > bound {
            u.forced = true;
            return;
        }
        let c = self.census(false);
        let quarantined = c.segs.iter().any(|s| !s.eligible && !s.busy && s.valid < c.slot_count);
        if quarantined {
            self.works.push(Work::Checkpoint(Default::default()));
        } else if self.push_clean(true).is_some() {
            self.counters.on_demand_cleanings_count += 1;
        } else if let Some(Work::Upper(u)) = self.works.last_mut() {
            u.forced = true;
        }
    }

    /// Issues a request for the top work; its completion lands in `io`.
    pub(super) fn work_io(&mut self, req: Request) -> usize {
        let slot = self.io.len();
        self.io.push(None);
        self.emit(LowerOp::Work { slot }, req);
        slot
    }

    /// The top work's completions, once all have come.
    pub(super) fn take_io(&mut self) -> Result<Vec<Completion>, Blocked> {
        if self.io.iter().any(|c| c.is_none()) {
            return Err(Blocked::Io);
        }
        Ok(std::mem::take(&mut self.io).into_iter().map(|c| c.expect("all came")).collect())
    }

    fn step_upper(&mut self, u: &mut UpperWork) -> Result<(), Blocked> {
        loop {
            match u.stage {
                Stage::Start => self.start_upper(u),
                Stage::Reading => {
                    let done = self.take_io()?;
                    if let Some(e) = done.iter().find_map(|c| c.result.err()) {
                        // A failed read fails this request only.
                        self.lower_io.upper_q.push_back(Completion::err(u.req.id, e));
                        return Ok(());
                    }
                    if u.req.op == Op::Read {
                        return self.finish_read(u, done);
                    }
                    for (i, c) in done.into_iter().enumerate() {
                        u.old[i].1 = c.data;
                    }
                    u.stage = Stage::Applying;
                }
                Stage::Applying => {
                    self.apply_blocks(u)?;
                    self.count_write(u);
                    if !u.req.fua {
                        self.lower_io.upper_q.push_back(Completion::ok(u.req.id));
                        return Ok(());
                    }
                    u.stage = Stage::Sealing;
                }
                Stage::Sealing => {
                    self.write_open_part();
                    u.stage = Stage::Draining;
                }
                Stage::Draining => {
                    if !self.sealed.is_empty() {
                        return Err(Blocked::Io);
                    }
                    self.work_io(Request::new(ReqId(0), Op::Flush, 0, 0));
                    u.stage = Stage::Flushing;
                }
                Stage::Flushing => {
                    self.take_io()?;
                    if !self.write_mark() {
                        self.lower_io.upper_q.push_back(Completion::ok(u.req.id));
                        return Ok(());
                    }
                    u.stage = Stage::Marking;
                }
                Stage::Marking => {
                    self.take_io()?;
                    self.lower_io.upper_q.push_back(Completion::ok(u.req.id));
                    return Ok(());
                }
            }
        }
    }

    fn count_write(&mut self, u: &UpperWork) {
        match u.req.op {
            Op::Write => {
                self.counters.user_bytes += u64::from(u.req.length_bytes);
                self.busy_user_blocks +=
                    u64::from(u.req.length_bytes).div_ceil(u64::from(self.args.block_bytes));
            }
            Op::Trim | Op::WriteZeroes => self.counters.trims_count += 1,
            Op::Read | Op::Flush => {}
        }
    }

    fn start_upper(&mut self, u: &mut UpperWork) {
        assert!(self.io.is_empty(), "a new work starts with no I/O of another");
        match u.req.op {
            Op::Flush => {
                self.counters.flushes_count += 1;
                u.stage = Stage::Sealing;
            }
            Op::Read => {
                self.start_read(u);
                u.stage = Stage::Reading;
            }
            Op::Write | Op::Trim | Op::WriteZeroes => {
                if u.req.op == Op::Write && u.req.data.is_none() {
                    self.timing_only = true;
                }
                self.start_rmw(u);
                u.next_block = u.req.offset_bytes / u64::from(self.args.block_bytes);
                u.stage = Stage::Reading;
            }
        }
    }

    /// Where the current bytes of a block are: RAM (a buffer), a lower
    /// offset, or nowhere (zeroes).
    fn block_source(&self, block: u64) -> Source {
        let sid = self.map.get(block);
        if sid == super::map::UNMAPPED {
            return Source::Zero;
        }
        let (loc, slot) = self.split_slot(sid);
        if let Some(&b) = self.seg_buf.get(&loc.0) {
            if self.buf_filled[b][slot as usize] {
                return Source::Ram(b, slot);
            }
        }
        Source::Disk(self.slot_offset_bytes(sid))
    }

    fn start_read(&mut self, u: &mut UpperWork) {
        for (off, n, out) in self.read_runs(u) {
            let i = self.work_io(Request::new(ReqId(0), Op::Read, off, n as u32));
            u.pieces.push((i, out));
        }
    }

    /// Fills `u.answer` with what RAM and zeroes give; returns the lower
    /// runs to read: (lower offset, length, offset in the answer).
    fn read_runs(&mut self, u: &mut UpperWork) -> Vec<(u64, u64, u64)> {
        let bs = u64::from(self.args.block_bytes);
        let (start, end) = (u.req.offset_bytes, u.req.end_bytes());
        u.answer = vec![0u8; u.req.length_bytes as usize];
        // Lower runs: (lower offset, length, offset in the answer).
        let mut runs: Vec<(u64, u64, u64)> = Vec::new();
        let mut pos = start;
        while pos < end {
            let block = pos / bs;
            let within = pos % bs;
            let n = (bs - within).min(end - pos);
            let out = pos - start;
            match self.block_source(block) {
                Source::Zero => {}
                Source::Ram(b, slot) => {
                    let at = self.geo.header_bytes as usize + (u64::from(slot) * bs + within) as usize;
                    u.answer[out as usize..(out + n) as usize]
                        .copy_from_slice(&self.buffers[b].bytes()[at..at + n as usize]);
                }
                Source::Disk(off) => match runs.last_mut() {
                    Some(r) if r.0 + r.1 == off + within && r.2 + r.1 == out => r.1 += n,
                    _ => runs.push((off + within, n, out)),
                },
            }
            pos += n;
        }
        self.counters.read_bytes += u64::from(u.req.length_bytes);
        runs
    }

    fn finish_read(&mut self, u: &mut UpperWork, done: Vec<Completion>) -> Result<(), Blocked> {
        let mut timing_only = false;
        for &(i, out) in &u.pieces {
            match &done[i].data {
                Some(d) => u.answer[out as usize..out as usize + d.len()].copy_from_slice(d),
                None => timing_only = true,
            }
        }
        let data = (!timing_only).then(|| Bytes::from(std::mem::take(&mut u.answer)));
        self.lower_io.upper_q.push_back(Completion { id: u.req.id, result: Ok(()), data });
        Ok(())
    }

    /// Reads the old bytes of the partial first and last blocks.
    fn start_rmw(&mut self, u: &mut UpperWork) {
        let bs = u64::from(self.args.block_bytes);
        let (start, end) = (u.req.offset_bytes, u.req.end_bytes());
        let mut partial: Vec<u64> = Vec::with_capacity(2);
        if start % bs != 0 || end - start < bs {
            partial.push(start / bs);
        }
        if end % bs != 0 && !partial.contains(&((end - 1) / bs)) {
            partial.push((end - 1) / bs);
        }
        for block in partial {
            self.counters.rmw_count += 1;
            match self.block_source(block) {
                Source::Zero => u.old.push((block, Some(Bytes::from(vec![0u8; bs as usize])))),
                Source::Ram(b, slot) => {
                    let at = self.geo.header_bytes as usize + (u64::from(slot) * bs) as usize;
                    let old = &self.buffers[b].bytes()[at..at + bs as usize];
                    u.old.push((block, Some(Bytes::copy_from_slice(old))));
                }
                Source::Disk(off) => {
                    self.work_io(Request::new(ReqId(0), Op::Read, off, bs as u32));
                    u.old.push((block, None));
                }
            }
        }
        // Reads land in `io` in issue order; blocks known already take no read.
        let reads: Vec<usize> = (0..u.old.len()).filter(|&i| u.old[i].1.is_none()).collect();
        let known: Vec<(u64, Option<Bytes>)> = u.old.iter().filter(|o| o.1.is_some()).cloned().collect();
        u.old = reads.iter().map(|&i| u.old[i].clone()).chain(known).collect();
    }

    /// Applies the request's blocks from `next_block` on; may stop for
    /// space, a buffer or a checkpoint and resume later.
    fn apply_blocks(&mut self, u: &mut UpperWork) -> Result<(), Blocked> {
        let bs = u64::from(self.args.block_bytes);
        let (start, end) = (u.req.offset_bytes, u.req.end_bytes());
        let last = (end - 1) / bs;
        while u.next_block <= last {
            let block = u.next_block;
            let (b0, b1) = (block * bs, (block + 1) * bs);
            let whole = start <= b0 && b1 <= end;
            if whole && u.req.op != Op::Write {
                self.ensure_open(Cause::User, false, u.forced)?;
                self.unmap_block(block);
            } else if whole {
                // A whole block of a write: the request's own bytes, placed
                // without a copy (none in timing-only mode).
                self.ensure_open(Cause::User, true, u.forced)?;
                let data = u.req.data.as_ref().map(|d| &d[(b0 - start) as usize..(b1 - start) as usize]);
                self.place(block, data, Cause::User);
            } else {
                self.ensure_open(Cause::User, true, u.forced)?;
                let bytes = self.compose(u, block, b0, b1);
                self.place(block, bytes.as_deref(), Cause::User);
            }
            u.next_block += 1;
        }
        Ok(())
    }

    /// The new bytes of a block the request covers in part: the request's
    /// over the old ones.
    fn compose(&self, u: &UpperWork, block: u64, b0: u64, b1: u64) -> Option<Vec<u8>> {
        let (start, end) = (u.req.offset_bytes, u.req.end_bytes());
        assert!(b0 < start || end < b1, "a whole block is placed from the request");
        let (lo, hi) = (start.max(b0), end.min(b1));
        let old = u.old.iter().find(|o| o.0 == block).expect("partial blocks were read");
        let mut out = old.1.as_ref()?.to_vec();
        let dst = &mut out[(lo - b0) as usize..(hi - b0) as usize];
        match (&u.req.data, u.req.op) {
            (Some(d), Op::Write) => dst.copy_from_slice(&d[(lo - start) as usize..(hi - start) as usize]),
            (None, Op::Write) => return None,
            _ => dst.fill(0),
        }
        Some(out)
    }

    /// Entries the summary of the open segment's current part holds.
    fn part_entry_max(&self, o: &OpenSeg) -> usize {
        match o.summary_slot {
            None => self.geo.entry_count_max as usize,
            Some(_) => SegmentHeader::slot_entry_max(&self.geo) as usize,
        }
    }

    /// Makes sure the open segment can take a slot (or an entry): a part
    /// whose summary is full is written (the segment goes on), a full
    /// segment is sealed and the next one opened.
    pub(super) fn ensure_open(&mut self, cause: Cause, need_slot: bool, forced: bool) -> Result<(), Blocked> {
        if let Some(o) = &self.open {
            let has_slot = o.next_hole < o.holes.len();
            let has_entry = o.entries.len() + 2 <= self.part_entry_max(o);
            if has_entry && (has_slot || !need_slot) {
                return Ok(());
            }
            if has_entry || !self.part_possible(o) {
                self.seal(cause, false);
            } else {
                self.write_part();
                return Ok(());
            }
        }
        let Some(loc) = self.chain_next else { return Err(Blocked::Checkpoint) };
        if cause == Cause::User && need_slot && !forced && !self.user_may_open(loc) {
            return Err(Blocked::Space);
        }
        // A free buffer no lower write still holds first (the completion
        // of a segment's last write may be running right now).
        let free = &self.buffers_free;
        let Some(last) = free.len().checked_sub(1) else { return Err(Blocked::Buffer) };
        let i = free.iter().rposition(|&b| self.buffers[b].reusable()).unwrap_or(last);
        let buf = self.buffers_free.swap_remove(i);
        if let super::SegBuf::Written(_) = self.buffers[buf] {
            let new = self.buffers[buf].reopen(self.geo.stride_bytes() as usize);
            self.counters.segment_buffers_allocated_count += u64::from(new);
        }
        self.open_segment(loc, buf);
        Ok(())
    }

    /// Whether user writes may take `loc` (the next segment) now: a free
    /// one only while the cleaner's reserve stays, one with holes only if
    /// the policy does SSR now.
    fn user_may_open(&self, loc: SegLoc) -> bool {
        let c = self.census(false);
        if self.usage.valid(loc.0 as usize) == 0 {
            c.free_count() >= self.args.free_segments_min
        } else {
            self.policy.user_holes(&c)
        }
    }

    fn open_segment(&mut self, loc: SegLoc, buf: usize) {
        assert!(self.open.is_none());
        assert!(self.eligible(loc.0), "segment {} opened while the crash rule forbids it", loc.0);
        let holes: Vec<u16> = (0..self.geo.slot_count)
            .filter(|&s| self.live.get(u64::from(self.slot_id(loc, s))) == 0)
            .map(|s| s as u16)
            .collect();
        assert!(!holes.is_empty(), "the next segment has room");
        let holey = holes.len() < self.geo.slot_count as usize;
        self.chain_next = None;
        self.census_changed();
        self.written_now.set(u64::from(loc.0), 1);
        assert!(self.seg_buf.insert(loc.0, buf).is_none());
        assert!(self.buf_filled[buf].iter().all(|f| !f));
        self.open = Some(OpenSeg {
            loc,
            seq: self.next_seq,
            holes,
            next_hole: 0,
            holey,
            entries: Vec::new(),
            summary_slot: None,
            buf,
        });
        self.next_seq.0 += 1;
        self.head = loc;
    }

    /// Writes `block` into the next hole of the open segment.
    pub(super) fn place(&mut self, block: u64, data: Option<&[u8]>, cause: Cause) {
        let bs = self.args.block_bytes as usize;
        let bsec = self.block_sectors();
        let o = self.open.as_mut().expect("ensure_open ran");
        let slot = o.holes[o.next_hole];
        o.next_hole += 1;
        o.entries.push(Entry::Slot { start_sector: block * bsec, sector_count: bsec as u32, slot });
        let (loc, buf, holey) = (o.loc, o.buf, o.holey);
        if let Some(d) = data {
            assert_eq!(d.len(), bs);
            let at = self.geo.header_bytes as usize + slot as usize * bs;
            self.buffers[buf].open_mut()[at..at + bs].copy_from_slice(d);
        }
        self.buf_filled[buf][slot as usize] = true;
        let sid = self.slot_id(loc, u32::from(slot));
        self.set_map(block, sid);
        if cause == Cause::User {
            self.group_touched(block);
        }
        let c = &mut self.counters;
        match (cause, holey) {
            (Cause::User, false) => c.slots_user_count += 1,
            (Cause::User, true) => c.slots_ssr_count += 1,
            (Cause::Cleaner, false) => c.slots_cleaning_count += 1,
            (Cause::Cleaner, true) => c.slots_plugging_count += 1,
            (Cause::Resequence, _) => c.slots_resequence_count += 1,
        }
    }

    /// Trims `block`: frees its slot and records that in the summary.
    fn unmap_block(&mut self, block: u64) {
        if self.map.get(block) == super::map::UNMAPPED {
            return;
        }
        self.set_map(block, super::map::UNMAPPED);
        self.group_touched(block);
        // Its group may have had its only block in the open segment.
        self.busy_sweep_futile = false;
        let bsec = self.block_sectors();
        let o = self.open.as_mut().expect("ensure_open ran");
        if let Some(Entry::Invalidate { start_sector, sector_count }) = o.entries.last_mut() {
            if *start_sector + u64::from(*sector_count) == block * bsec && *sector_count < u32::MAX / 2 {
                *sector_count += bsec as u32;
                return;
            }
        }
        o.entries.push(Entry::Invalidate { start_sector: block * bsec, sector_count: bsec as u32 });
    }

    /// Whether the open segment can be written in part now: partial
    /// writes on, and two holes left (one for the next part's summary, one
    /// for its data; with fewer the seal is as cheap).
    fn part_possible(&self, o: &OpenSeg) -> bool {
        self.args.partial_segments && o.holes.len() - o.next_hole >= 2
    }

    /// A flush or FUA write: the open segment's new part reaches the disk,
    /// as a partial write if the segment can go on, else sealed.
    fn write_open_part(&mut self) {
        let Some(o) = &self.open else { return };
        if o.entries.is_empty() && o.summary_slot.is_some() {
            return; // nothing since the last partial write
        }
        if self.part_possible(o) {
            self.write_part();
        } else {
            self.seal(Cause::User, false);
        }
    }

    /// Writes the open segment's part filled since its last write, with a
    /// summary ending in a continue link to the next hole (taken now: the
    /// next part's summary goes there); the segment stays open.
    fn write_part(&mut self) {
        let o = self.open.as_mut().expect("an open segment");
        let next = o.holes[o.next_hole];
        o.next_hole += 1;
        let mut entries = std::mem::take(&mut o.entries);
        entries.push(Entry::Continue { slot: next });
        let summary_at = o.summary_slot.replace(next);
        let (loc, seq, buf) = (o.loc, o.seq, o.buf);
        self.write_summary(loc, seq, buf, summary_at, entries, false);
        self.counters.partial_writes_count += 1;
        self.counters.summary_slots_count += 1;
    }

    /// Writes the open segment's last part and closes it: its new slots and
    /// its summary, naming the segment that goes next (chosen now; as it
    /// will be after the checkpoint when `after_checkpoint`).
    pub(super) fn seal(&mut self, cause: Cause, after_checkpoint: bool) {
        let o = self.open.take().expect("an open segment");
        self.busy_sweep_futile = false;
        let census = self.census(after_checkpoint);
        self.chain_next = self.policy.choose_next(&census, cause).map(SegLoc);
        self.census_changed();
        let mut entries = o.entries;
        entries.push(Entry::Next { loc: self.chain_next });
        self.write_summary(o.loc, o.seq, o.buf, o.summary_slot, entries, true);
        self.counters.segments_written_count += 1;
        self.segments_since_checkpoint += 1;
        if self.segments_since_checkpoint.is_power_of_two() {
            self.dirty_at_pow2.push(self.dirty_count);
        }
    }

    /// Writes a part of segment `loc`: the slots its `entries` name and its
    /// summary (in the header area, or in slot `summary_at`). A seal sends
    /// slices of the buffer (its last use in this pass); a partial write
    /// copies its bytes, so the buffer keeps taking writes.
    fn write_summary(
        &mut self,
        loc: SegLoc,
        seq: crate::seglog::Seq,
        buf: usize,
        summary_at: Option<u16>,
        entries: Vec<Entry>,
        seal: bool,
    ) {
        let filled: Vec<u16> = entries
            .iter()
            .filter_map(|e| if let Entry::Slot { slot, .. } = *e { Some(slot) } else { None })
            .collect();
        let mut header = SegmentHeader {
            seq,
            boot: self.boot,
            format_id: self.format_id,
            slots_used: filled.len() as u32,
            payload_crc: None,
            entries,
        };
        let hb = self.geo.header_bytes as usize;
        if !self.timing_only && !filled.is_empty() {
            let payload = &self.buffers[buf].bytes()[hb..];
            header.payload_crc = header.covered_crc(payload, self.geo.slot_bytes as usize);
        }
        let (at, encoded) = match summary_at {
            None => (0, header.encode(&self.geo)),
            Some(s) => (hb + s as usize * self.geo.slot_bytes as usize, header.encode_slot(&self.geo)),
        };
        let summary = (at, at + encoded.len());
        self.buffers[buf].open_mut()[summary.0..summary.1].copy_from_slice(&encoded);
        let ranges = self.segment_ranges(summary, filled);
        let base = self.geo.segment_offset_bytes(loc);
        let parts: Vec<(u64, Bytes)> = if seal {
            let whole = self.buffers[buf].freeze();
            ranges.into_iter().map(|(a, b)| (base + a as u64, whole.slice(a..b))).collect()
        } else {
            let bytes = self.buffers[buf].bytes();
            ranges.into_iter().map(|(a, b)| (base + a as u64, Bytes::copy_from_slice(&bytes[a..b]))).collect()
        };
        let parts_left = parts.len() as u32;
        for (offset_bytes, data) in parts {
            let range = (offset_bytes, offset_bytes + data.len() as u64);
            if let Some(p) = self.gate.submit(range, super::GatedPart { loc, offset_bytes, data }) {
                self.emit_part(p);
            }
        }
        self.sealed.push(Sealed { loc, buf: seal.then_some(buf), parts_left });
        self.counters.summary_bytes_written += encoded.len() as u64;
    }

    /// The byte ranges (within the segment) of a segment write: the
    /// summary's joined with the runs of new slots (a fresh segment's part
    /// is one write).
    fn segment_ranges(&self, summary: (usize, usize), filled: Vec<u16>) -> Vec<(usize, usize)> {
        let bs = self.geo.slot_bytes as usize;
        let hb = self.geo.header_bytes as usize;
        let mut ranges: Vec<(usize, usize)> =
            filled.into_iter().map(|s| (hb + s as usize * bs, hb + (s as usize + 1) * bs)).collect();
        ranges.push(summary);
        ranges.sort_unstable();
        let mut parts: Vec<(usize, usize)> = Vec::with_capacity(ranges.len());
        for r in ranges {
            match parts.last_mut() {
                Some(last) if last.1 == r.0 && r.1 - last.0 <= layoutd_core::REQUEST_BYTES_MAX as usize => {
                    last.1 = r.1
                }
                _ => parts.push(r),
            }
        }
        parts
    }

    /// Sends a segment write the gate let go.
    fn emit_part(&mut self, p: super::GatedPart) {
        self.emit(LowerOp::SegPart { loc: p.loc }, Request::write(ReqId(0), p.offset_bytes, p.data));
    }

    /// Sends the segment writes that no longer wait for a read.
    pub(super) fn release_gated(&mut self) {
        while let Some((_, p)) = self.gate.pop_ready() {
            self.emit_part(p);
        }
    }

    /// Serves a read beside the work stack when no write queued or running
    /// before it overlaps it: the sources of its blocks are known now
    /// (RAM, zeroes, or slots that cannot be rewritten before the read
    /// completes: a freed slot is reused only after a checkpoint, and a
    /// segment write waits in the gate for reads of its range). Gives the
    /// request back if it must take its turn.
    pub(super) fn direct_read(&mut self, req: Request) -> Result<(), Request> {
        if req.op != Op::Read || !self.serving() || self.write_ahead_overlaps(&req) {
            return Err(req);
        }
        let mut u = UpperWork::new(req);
        let runs = self.read_runs(&mut u);
        if runs.is_empty() {
            let data = Bytes::from(std::mem::take(&mut u.answer));
            self.lower_io.upper_q.push_back(Completion { id: u.req.id, result: Ok(()), data: Some(data) });
            return Ok(());
        }
        let key = self.next_read_key;
        self.next_read_key += 1;
        let mut asm = crate::split::Assembly::new(u.req.id, Op::Read, u.req.length_bytes, runs.len() as u32);
        if runs.len() > 1 || runs[0].1 != u64::from(u.req.length_bytes) {
            asm.put(0, &u.answer);
        }
        self.reads.insert(key, asm);
        for (off, n, out) in runs {
            let through = self.read_through_bytes(off + n);
            self.counters.read_throughs_count += u64::from(through > 0);
            let op = LowerOp::Read { key, within: out as u32, through: through as u32 };
            let id =
                self.lower_io.emit(op, false, Request::new(ReqId(0), Op::Read, off, (n + through) as u32));
            self.gate.issued(id, (off, off + n + through));
        }
        Ok(())
    }

    /// Bytes a direct read whose run ends at lower offset `end` reads on
    /// past it (`read_through_headers`): the next segment's header when
    /// the run ends at a segment's last slot. The next request of a
    /// sequential reader then starts where this one ended, instead of a
    /// header further on: a disk at queue depth one streams on instead of
    /// missing the sectors while the command turns around (one jump per
    /// segment otherwise, a lost rotation on some; ZFS reads through small
    /// gaps for the same reason, `zfs_vdev_read_gap_limit`).
    fn read_through_bytes(&self, end: u64) -> u64 {
        let first = self.geo.segment_offset_bytes(SegLoc(0));
        let stride = self.geo.stride_bytes();
        if !self.args.read_through_headers || end <= first || !(end - first).is_multiple_of(stride) {
            return 0;
        }
        let next = (end - first) / stride;
        if next >= u64::from(self.geo.segment_count) {
            return 0;
        }
        u64::from(self.geo.header_bytes)
    }

    /// Whether an upper write, trim or write-zeroes queued or running
    /// overlaps `req`.
    fn write_ahead_overlaps(&self, req: &Request) -> bool {
        let hits = |r: &Request| {
            matches!(r.op, Op::Write | Op::Trim | Op::WriteZeroes)
                && r.offset_bytes < req.end_bytes()
                && req.offset_bytes < r.end_bytes()
        };
        self.works.iter().any(|w| matches!(w, Work::Upper(u) if hits(&u.req)))
            || self.pending.iter().any(|p| matches!(p, Pending::Upper(r) if hits(r)))
    }

    /// A piece of a direct read answered.
    pub(super) fn direct_read_done(&mut self, key: u64, within: u32, c: Completion) {
        let asm = self.reads.get_mut(&key).expect("a direct read in flight");
        if asm.piece_done(within, c.data, c.result) {
            let done = self.reads.remove(&key).expect("present").finish();
            self.lower_io.upper_q.push_back(done);
        }
        self.pump();
    }

    /// One write of a segment completed; the last frees its buffer.
    pub(super) fn segment_part_done(&mut self, loc: SegLoc) {
        let i = self.sealed.iter().position(|s| s.loc == loc).expect("a part of a segment in flight");
        self.sealed[i].parts_left -= 1;
        if self.sealed[i].parts_left > 0 {
            return;
        }
        let s = self.sealed.remove(i);
        let Some(buf) = s.buf else { return }; // a partial write: the segment is still open
        assert_eq!(self.seg_buf.remove(&loc.0), Some(buf));
        self.census_changed();
        self.buf_filled[buf].fill(false);
        self.buffers_free.push(buf);
    }

    /// Queues a cleaning pass on the work stack: victims whose live blocks
    /// fit the space the cleaner may write. Returns the victim count.
    pub(super) fn push_clean(&mut self, on_demand: bool) -> Option<u64> {
        let c = self.census(false);
        let victims = self
            .fitting_victims(&c, self.policy.victims(&c, self.args.clean_batch_segments as usize, on_demand));
        self.push_victims(victims, on_demand)
    }

    /// Queues a cleaning pass over `victims` (none: nothing queued).
    /// Returns the victim count.
    fn push_victims(&mut self, victims: Vec<SegLoc>, on_demand: bool) -> Option<u64> {
        if victims.is_empty() {
            return None;
        }
        let n = victims.len() as u64;
        self.cleaning = victims.iter().map(|v| v.0).collect();
        self.census_changed();
        self.works.push(Work::Clean(CleanWork {
            victims,
            groups: Vec::new(),
            runs: Vec::new(),
            issued: false,
            read_done: false,
            live: Vec::new(),
            next: 0,
            on_demand,
        }));
        Some(n)
    }

    /// The first of `candidates`, as many as their live blocks fit the
    /// space the cleaner may write.
    fn fitting_victims(&self, c: &super::policy::Census, candidates: Vec<u32>) -> Vec<SegLoc> {
        let room_of =
            |s: &super::policy::SegInfo| if s.eligible && !s.busy { c.slot_count - s.valid } else { 0 };
        let mut room: u64 = c.segs.iter().map(|s| u64::from(room_of(s))).sum();
        if let Some(o) = &self.open {
            room += (o.holes.len() - o.next_hole) as u64;
        }
        if let Some(n) = self.chain_next {
            room += u64::from(c.slot_count - self.usage.valid(n.0 as usize));
        }
        let mut victims = Vec::new();
        for v in candidates {
            let live = u64::from(c.segs[v as usize].valid);
            // A victim's own holes stop counting as room once it is one.
            let own = u64::from(room_of(&c.segs[v as usize]));
            if live + own > room {
                break;
            }
            room -= live + own;
            victims.push(SegLoc(v));
        }
        victims
    }

    fn step_clean(&mut self, c: &mut CleanWork) -> Result<(), Blocked> {
        if !c.issued && !c.groups.is_empty() {
            return self.issue_group_reads(c);
        }
        if !c.issued {
            c.issued = true;
            // Summary and slots: the summary names the blocks of the slots
            // written in the segment's last pass.
            for &v in &c.victims {
                let off = self.geo.segment_offset_bytes(v);
                self.work_io(Request::new(ReqId(0), Op::Read, off, self.geo.stride_bytes() as u32));
            }
            return Err(Blocked::Io);
        }
        if !c.read_done {
            let done = self.take_io()?;
            c.read_done = true;
            if done.iter().any(|d| d.result.is_err()) {
                // A victim could not be read: no pass now (the next
                // reclamation chooses again). A group is left as it is
                // until a write touches it again.
                self.cleaning.clear();
                self.census_changed();
                for &g in &c.groups {
                    self.group_checked(g);
                }
                return Ok(());
            }
            if !c.groups.is_empty() {
                let bs = self.geo.slot_bytes as usize;
                // The live blocks and the runs in slot order, walked together.
                let mut order: Vec<usize> = (0..c.live.len()).collect();
                order.sort_unstable_by_key(|&i| c.live[i].1);
                let mut it = order.into_iter().peekable();
                let mut by_slot: Vec<usize> = (0..c.runs.len()).collect();
                by_slot.sort_unstable_by_key(|&r| c.runs[r].0);
                for r in by_slot {
                    let ((first, n), d) = (c.runs[r], &done[r]);
                    while let Some(&i) = it.peek() {
                        let sid = c.live[i].1;
                        if sid >= first + n {
                            break;
                        }
                        let k = (sid - first) as usize;
                        c.live[i].2 = d.data.as_ref().map(|d| d.slice(k * bs..(k + 1) * bs));
                        it.next();
                    }
                }
            } else {
                self.collect_live(c, done);
            }
        }
        let cause = if c.groups.is_empty() { Cause::Cleaner } else { Cause::Resequence };
        while c.next < c.live.len() {
            let (block, sid, _) = c.live[c.next];
            if self.map.get(block) == sid {
                self.ensure_open(cause, true, true)?;
                let data = c.live[c.next].2.take();
                self.place(block, data.as_deref(), cause);
            }
            c.next += 1;
        }
        if !c.groups.is_empty() {
            self.counters.resequence_passes_count += 1;
            for &g in &c.groups {
                self.group_checked(g);
            }
            if self.compacting {
                self.compact_pass_done(c.groups[0]);
            }
            return Ok(());
        }
        self.counters.cleaning_passes_count += 1;
        self.counters.segments_cleaned_count += c.victims.len() as u64;
        self.cleaning.clear();
        self.census_changed();
        if !c.on_demand {
            // Idle cleaning: a checkpoint makes the victims free segments
            // (the crash rule), so the next offer sees what was gained.
            self.works.push(Work::Checkpoint(Default::default()));
        }
        Ok(())
    }

    /// The live blocks of the victims, in logical order when configured
    /// (so blocks random updates scattered are laid out in order again).
    /// A victim's summary names the blocks of the slots its last pass
    /// wrote; each is taken if its slot is live and the map points there.
    /// Live slots the summary does not name (written by an earlier pass:
    /// SSR or plugging filled holes since; or the summary is unreadable)
    /// are found by one pass over the map for all such victims.
    fn collect_live(&mut self, c: &mut CleanWork, done: Vec<Completion>) {
        let bs = self.geo.slot_bytes as usize;
        let hb = self.geo.header_bytes as usize;
        let bsec = self.block_sectors();
        let mut unexplained: Vec<(SegLoc, Option<Bytes>)> = Vec::new();
        for (v, comp) in c.victims.iter().zip(done) {
            let before = c.live.len();
            // The summaries of the segment's last pass, every part of it.
            let summaries = comp.data.as_ref().map_or(Vec::new(), |d| {
                let mut seq = None;
                let same_pass = |h: SegmentHeader, _: &[u8]| match seq {
                    Some(s) if h.seq != s => Err(crate::seglog::StopReason::Seq(h.seq)),
                    _ => {
                        seq = Some(h.seq);
                        Ok(h)
                    }
                };
                segment_summaries(d, &self.geo, self.format_id, same_pass).0
            });
            for e in summaries.iter().flat_map(|h| h.entries.iter()) {
                let Entry::Slot { start_sector, slot, .. } = *e else { continue };
                let (block, sid) = (start_sector / bsec, self.slot_id(*v, u32::from(slot)));
                if block < self.map.len() && self.live.get(u64::from(sid)) == 1 && self.map.get(block) == sid
                {
                    c.live.push((
                        block,
                        sid,
                        comp.data.as_ref().map(|d| slot_data_at(d, hb, bs, u32::from(slot))),
                    ));
                }
            }
            if (c.live.len() - before) as u32 != self.usage.valid(v.0 as usize) {
                c.live.truncate(before);
                unexplained.push((*v, comp.data));
            }
        }
        if !unexplained.is_empty() {
            self.counters.cleaner_map_scans_count += 1;
            self.map.for_each_mapped(0..self.map.len(), |b, sid| {
                let (loc, s) = self.split_slot(sid);
                if let Some((_, d)) = unexplained.iter().find(|u| u.0 == loc) {
                    c.live.push((b, sid, d.as_ref().map(|d| slot_data_at(d, hb, bs, s))));
                }
            });
        }
        let want: u32 = c.victims.iter().map(|v| self.usage.valid(v.0 as usize)).sum();
        assert_eq!(c.live.len() as u32, want, "every live block of the victims is found");
        if self.args.clean_sorted {
            c.live.sort_by_key(|l| l.0);
        }
    }
}

impl Log {
    /// Whether idle re-sequencing is due: on, some group to look at, no
    /// request for `resequence_idle_ms`, and free segments to write into
    /// beyond the cleaner's reserve.
    pub(super) fn resequence_due(&self, now: layoutd_core::Instant) -> bool {
        self.args.resequence
            && self.group_dirty_count > 0
            && self.resequence_idle.is_idle(now)
            && self.free_segments_count() > u64::from(self.args.free_segments_min) + 2
    }

    /// Whether a re-sequencing pass is due beside the client's requests
    /// (the policy's budget of user blocks written since the last), with
    /// groups to look at and free segments beyond the cleaner's reserve.
    /// Not idle time: idle re-sequencing does the same work then.
    fn resequence_busy_due(&self) -> bool {
        self.args.resequence
            && self.group_dirty_count > 0
            && self.policy.resequence_busy_due(self.busy_user_blocks)
            && self.free_segments_count() > u64::from(self.args.free_segments_min) + 2
    }

    /// Whether re-sequencing waits only for free segments (the idle
    /// cleaning the policy asks for did not make enough).
    /// Only while the pass gains a free segment, so that idle work ends.
    pub(super) fn resequence_needs_space(&self, now: layoutd_core::Instant) -> bool {
        self.args.resequence
            && self.group_dirty_count > 0
            && self.resequence_idle.is_idle(now)
            && self.free_segments_count() <= u64::from(self.args.free_segments_min) + 2
            && self.space_gainable()
    }

    /// Whether idle work can make free segments: emptied segments wait
    /// for a checkpoint, or the next cleaning pass's victims hold at most
    /// one segment less of live blocks than their count (their live blocks
    /// fill fewer segments than the pass frees).
    fn space_gainable(&self) -> bool {
        let c = self.census(false);
        if c.segs.iter().any(|s| s.valid == 0 && !s.eligible && !s.busy) {
            return true;
        }
        let candidates = self.policy.victims(&c, self.args.clean_batch_segments as usize, false);
        let victims: Vec<u32> = self.fitting_victims(&c, candidates).iter().map(|v| v.0).collect();
        c.pass_gains(&victims)
    }

    /// Space for re-sequencing: a checkpoint if one would turn emptied
    /// segments into free ones (the crash rule), else a cleaning pass.
    /// Returns the bytes it reads, or `None` if neither can gain.
    pub(super) fn resequence_make_space(&mut self) -> Option<u64> {
        let c = self.census(false);
        if c.segs.iter().any(|s| s.valid == 0 && !s.eligible && !s.busy) {
            self.works.push(Work::Checkpoint(Default::default()));
            return Some(0);
        }
        let victims = self.push_clean(false)?;
        self.counters.background_cleanings_count += 1;
        Some(victims * self.geo.stride_bytes())
    }

    /// Re-sequencing found group `g` in order (or gave up on it): it is
    /// looked at again only once a write touches it.
    fn group_checked(&mut self, g: u64) {
        if self.group_dirty.get(g) == 1 {
            self.group_dirty.set(g, 0);
            self.group_dirty_count -= 1;
        }
    }

    /// One step of idle re-sequencing: the next group of `slot_count`
    /// blocks (aligned; a sweep over the groups a write touched) whose
    /// live blocks lie in runs of adjacent slots averaging under
    /// [`RESEQUENCE_RUN_BYTES`] is read and written again in logical order,
    /// into free segments first: a file that random updates scattered over
    /// many segments reads in one run again. Groups found in order are
    /// passed over. When sliding ([`Log::resequence_slides`]), every group not in its home
    /// segment in order is rewritten there, once [`Log::prepare_home`] has
    /// made the home ready. Returns the bytes it will move, or `None` if no
    /// group needs it.
    ///
    /// `busy`: a pass beside the client's requests
    /// ([`Log::resequence_busy_due`]): it packs (sliding compaction turns
    /// every segment's placement to the homes, which only idle time may),
    /// and passes over, still to look at, a group with a block in the open
    /// segment (its pass would seal the segment half filled).
    pub(super) fn resequence_step(&mut self, busy: bool) -> Option<u64> {
        if busy && self.busy_sweep_futile {
            return None;
        }
        self.busy_sweep_futile = false;
        let groups = self.group_dirty.len();
        let run_blocks = (RESEQUENCE_RUN_BYTES / u64::from(self.args.block_bytes)).max(2) as usize;
        let batch = self.args.resequence_batch_groups as usize;
        // A pass of several groups takes no more blocks than the free
        // segments beyond the reserve hold: past them its blocks would go
        // into holes, out of order.
        let room = if batch > 1 {
            let free = self.free_segments_count().saturating_sub(u64::from(self.args.free_segments_min) + 2);
            (free * u64::from(self.geo.slot_count)) as usize
        } else {
            usize::MAX
        };
        let mut taken: Vec<u64> = Vec::new();
        let mut live_all: Vec<(u64, u32, Option<Bytes>)> = Vec::new();
        for _ in 0..groups {
            if self.group_dirty_count == 0 || taken.first() == Some(&self.group_cursor) {
                break;
            }
            let g = self.group_cursor;
            self.group_cursor = (g + 1) % groups;
            self.counters.resequence_groups_swept_count += 1;
            if self.group_dirty.get(g) == 0 {
                continue;
            }
            let live = self.group_live(g);
            if busy
                && self
                    .open
                    .as_ref()
                    .is_some_and(|o| live.iter().any(|l| l.1 / self.geo.slot_count == o.loc.0))
            {
                continue;
            }
            let mut runs = 0usize;
            for (i, l) in live.iter().enumerate() {
                if i == 0 || !adjacent(live[i - 1].1, l.1, self.geo.slot_count) {
                    runs += 1;
                }
            }
            if !live.is_empty() && !busy && self.resequence_slides() {
                // Sliding: one group a pass, into its home.
                if self.group_at_home(g, &live) {
                    self.group_checked(g);
                    continue;
                }
                if let Some(bytes) = self.prepare_home(g) {
                    // This group again, once its home is ready.
                    self.group_cursor = g;
                    return Some(bytes);
                }
                taken.push(g);
                live_all = live;
                break;
            } else if runs < 2 || live.len() >= runs * run_blocks {
                self.group_checked(g);
                continue;
            }
            if !taken.is_empty() && live_all.len() + live.len() > room {
                // This group starts the next pass.
                self.group_cursor = g;
                break;
            }
            taken.push(g);
            live_all.extend(live);
            if taken.len() >= batch {
                break;
            }
        }
        if taken.is_empty() {
            // Busy: every group still marked has a block in the open
            // segment (the others were found in order and unmarked).
            self.busy_sweep_futile = busy;
            return None;
        }
        // Placed in logical order (the cursor may have wrapped).
        live_all.sort_unstable_by_key(|l| l.0);
        let bytes = live_all.len() as u64 * u64::from(self.args.block_bytes);
        self.works.push(Work::Clean(CleanWork {
            victims: Vec::new(),
            groups: taken,
            runs: if batch > 1 { self.disk_order_runs(&live_all) } else { self.adjacent_runs(&live_all) },
            issued: false,
            read_done: false,
            live: live_all,
            next: 0,
            on_demand: false,
        }));
        Some(bytes)
    }

    /// The lower reads of a one-group re-sequencing pass over `live` (in
    /// logical order): (first slot id, slot count), one per run of
    /// consecutive blocks in adjacent slots, in logical order.
    fn adjacent_runs(&self, live: &[(u64, u32, Option<Bytes>)]) -> Vec<(u32, u32)> {
        let mut runs: Vec<(u32, u32)> = Vec::new();
        for l in live {
            match runs.last_mut() {
                Some(r) if adjacent(r.0 + r.1 - 1, l.1, self.geo.slot_count) => r.1 += 1,
                _ => runs.push((l.1, 1)),
            }
        }
        runs
    }

    /// The lower reads of a re-sequencing pass of several groups
    /// (`resequence_batch_groups`) over `live`, in disk order:
    /// (first slot id, slot count), each within one segment, the dead slots
    /// of a gap of at most [`RESEQUENCE_READ_GAP_BYTES`] between two live
    /// slots read through (one request instead of two).
    fn disk_order_runs(&self, live: &[(u64, u32, Option<Bytes>)]) -> Vec<(u32, u32)> {
        let sc = self.geo.slot_count;
        let gap = (RESEQUENCE_READ_GAP_BYTES / u64::from(self.args.block_bytes)) as u32;
        let mut sids: Vec<u32> = live.iter().map(|l| l.1).collect();
        sids.sort_unstable();
        let mut runs: Vec<(u32, u32)> = Vec::new();
        for sid in sids {
            match runs.last_mut() {
                Some(r) if r.0 / sc == sid / sc && sid - (r.0 + r.1) <= gap => r.1 = sid + 1 - r.0,
                _ => runs.push((sid, 1)),
            }
        }
        runs
    }

    /// Whether re-sequencing slides groups into their homes (sliding
    /// compaction) or packs them into the next free segments. With
    /// `resequence_sliding = "auto"`, decided once per idle period, at its
    /// first step: sliding while the utilisation (live blocks over the
    /// volume's blocks) is at least `sliding_utilisation_min_percent`.
    /// Packing reads faster at low utilisation (the remaining files end up
    /// together), sliding above (groups in logical order, one sweep).
    /// Live blocks change only with requests, so a volume that fills up
    /// switches at its next idle period.
    fn resequence_slides(&mut self) -> bool {
        match self.args.resequence_sliding {
            Sliding::On => true,
            Sliding::Off => false,
            Sliding::Auto => {
                if self.slides_this_idle.is_none() {
                    let live_pct_x_volume = u128::from(self.live_blocks()) * 100;
                    let min = u128::from(self.args.sliding_utilisation_min_percent)
                        * u128::from(self.args.volume_blocks);
                    self.slides_this_idle = Some(live_pct_x_volume >= min);
                }
                self.slides_this_idle == Some(true)
            }
        }
    }

    /// Group `g`'s live blocks in logical order: (block, slot id, no bytes).
    fn group_live(&self, g: u64) -> Vec<(u64, u32, Option<Bytes>)> {
        let sc = u64::from(self.geo.slot_count);
        let mut live = Vec::new();
        self.map.for_each_mapped(g * sc..(g + 1) * sc, |b, sid| live.push((b, sid, None)));
        live
    }

    /// Whether group `g`'s `live` blocks all lie in its home segment
    /// (segment `g`), in logical order.
    fn group_at_home(&self, g: u64, live: &[(u64, u32, Option<Bytes>)]) -> bool {
        let sc = u64::from(self.geo.slot_count);
        live.iter().all(|l| u64::from(l.1) / sc == g) && live.windows(2).all(|w| w[0].1 < w[1].1)
    }

    /// Sliding compaction (`resequence_sliding`): group `g` goes to its
    /// home, segment `g` (groups are fewer than segments: the spare
    /// segments at the far end are no group's home), so that consecutive
    /// groups lie in consecutive segments and a sequential read is one
    /// sweep. One step towards the home being ready, each an existing
    /// mechanism: the home holds live blocks: a cleaning pass of it alone
    /// (its blocks go to the far end: `Census::compaction_next`), followed
    /// as every idle pass by a checkpoint; the home is empty but not
    /// eligible (the crash rule), or the chain names another segment next:
    /// a checkpoint (its seal names the home, see `step_checkpoint`).
    /// Returns the bytes of the work queued; `None` when the home is ready,
    /// or busy, or after [`COMPACT_PREPARE_STEPS_MAX`] steps for the group
    /// (it is then re-sequenced wherever the next segment is).
    fn prepare_home(&mut self, g: u64) -> Option<u64> {
        let h = SegLoc(u32::try_from(g).expect("a group index is a segment id"));
        assert!(h.0 < self.geo.segment_count, "groups are fewer than segments");
        let steps = match self.compact_group {
            Some((cg, n)) if cg == g => n,
            _ => 0,
        };
        self.compact_group = Some((g, steps + 1));
        self.compacting = true;
        self.compact_home = Some(h);
        let valid = self.usage.valid(h.0 as usize);
        let busy = self.open.as_ref().is_some_and(|o| o.loc == h)
            || self.seg_buf.contains_key(&h.0)
            || self.cleaning.contains(&h.0)
            || (valid > 0 && self.chain_next == Some(h));
        if busy || steps >= COMPACT_PREPARE_STEPS_MAX {
            return None;
        }
        if valid > 0 {
            let c = self.census(false);
            let victims = self.fitting_victims(&c, vec![h.0]);
            self.push_victims(victims, false)?;
            self.counters.compact_evictions_count += 1;
            return Some(self.geo.stride_bytes());
        }
        if self.eligible(h.0) && (self.open.is_some() || self.chain_next == Some(h)) {
            return None;
        }
        self.works.push(Work::Checkpoint(Default::default()));
        Some(0)
    }

    /// Whether a checkpoint's seal should first open and seal the segment
    /// the chain names next, empty, so that the chain goes on at the home
    /// (sliding compaction, nothing open, the home empty).
    pub(super) fn compact_redirect_wanted(&self) -> bool {
        let Some(h) = self.compact_home else { return false };
        self.compacting
            && self.open.is_none()
            && self.chain_next.is_some_and(|n| n != h)
            && self.usage.valid(h.0 as usize) == 0
            && !self.seg_buf.contains_key(&h.0)
            && !self.cleaning.contains(&h.0)
    }

    /// A sliding compaction pass of group `g` placed its blocks: counted if
    /// they are home; the home is sealed (the next group does not share
    /// it), naming the next dirty group's home if it is free.
    fn compact_pass_done(&mut self, g: u64) {
        if self.group_at_home(g, &self.group_live(g)) {
            self.counters.compact_groups_home_count += 1;
        }
        self.compact_group = None;
        if self.open.as_ref().is_some_and(|o| Some(o.loc) == self.compact_home) {
            let groups = self.group_dirty.len();
            let next = (g + 1..groups).find(|&n| self.group_dirty.get(n) == 1);
            self.compact_home = next.map(|n| SegLoc(n as u32));
            self.seal(Cause::Resequence, false);
        }
    }

    /// Re-sequencing: once none of the group's blocks is in a RAM buffer
    /// (the open segment is written first), one read per run of slots.
    fn issue_group_reads(&mut self, c: &mut CleanWork) -> Result<(), Blocked> {
        let sc = self.geo.slot_count;
        if self.compacting && self.open.as_ref().is_some_and(|o| Some(o.loc) != self.compact_home) {
            // Sliding compaction: the group starts at its home (the seal
            // names it next when it is free).
            self.seal(Cause::Resequence, false);
        }
        let in_ram = |log: &Log, sid: u32| log.seg_buf.contains_key(&(sid / sc));
        if c.live.iter().any(|l| in_ram(self, l.1)) {
            if self.open.as_ref().is_some_and(|o| c.live.iter().any(|l| l.1 / sc == o.loc.0)) {
                self.seal(Cause::Resequence, false);
            }
            // Resumed when the segment write completes.
            return Err(Blocked::Io);
        }
        c.issued = true;
        let bs = u64::from(self.args.block_bytes);
        for &(first, n) in &c.runs {
            let off = self.slot_offset_bytes(first);
            self.work_io(Request::new(ReqId(0), Op::Read, off, (u64::from(n) * bs) as u32));
        }
        Err(Blocked::Io)
    }
}

/// Re-sequencing rewrites a group whose live blocks lie in runs of
/// adjacent slots shorter than this on average (a 64 KiB read is about
/// where a disk's positioning time stops dominating).
pub(super) const RESEQUENCE_RUN_BYTES: u64 = 64 << 10;

/// A re-sequencing pass reads through a gap of dead slots up to this long
/// between two live slots of one segment (ZFS's `zfs_vdev_read_gap_limit`
/// default; a second request would wait for the disk to turn past it anyway).
pub(super) const RESEQUENCE_READ_GAP_BYTES: u64 = 32 << 10;

/// Preparation steps for one group's home (a cleaning pass, a checkpoint,
/// a checkpoint that redirects the chain) before sliding compaction
/// re-sequences the group wherever the next segment is.
const COMPACT_PREPARE_STEPS_MAX: u32 = 3;

/// Whether slot `b` follows slot `a` on disk (same segment, next slot).
fn adjacent(a: u32, b: u32, slot_count: u32) -> bool {
    b == a + 1 && b % slot_count != 0
}

/// Slot `s`'s bytes in a segment read whole (summary first).
fn slot_data_at(d: &Bytes, header_bytes: usize, slot_bytes: usize, s: u32) -> Bytes {
    let at = header_bytes + s as usize * slot_bytes;
    d.slice(at..at + slot_bytes)
}

/// Where a block's current bytes are.
enum Source {
    Zero,
    Ram(usize, u32),
    Disk(u64),
}
