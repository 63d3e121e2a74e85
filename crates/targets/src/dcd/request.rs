//! The request path: absorbing writes into RAM segment buffers, sealing and
//! writing segments, flush/FUA durability, writes that go home (bypass,
//! trim, write-zeroes, write-through FUA) with their invalidation records,
//! and reads assembled from RAM, log and data region.

use super::config::{FuaMode, ReadFragmented};
use super::{
    Dcd, HomeOp, HomeUpperWrite, Loc, LowerOp, PendingInvalidation, SegMeta, SegState, SlotMeta, Waiter,
};
use crate::seglog::{Entry, SegLoc, SegmentHeader, Seq};
use crate::split::Assembly;
use bytes::Bytes;
use layoutd_core::{Completion, Instant, IoError, Op, ReqId, Request, SECTOR_BYTES};

const S: u64 = SECTOR_BYTES;

impl Dcd {
    /// Entry point for upper requests (validated by the stack).
    pub(super) fn request(&mut self, now: Instant, req: Request) {
        if let super::Phase::Failed(_) = self.phase {
            self.complete_upper(Completion::err(req.id, IoError::Io));
            return;
        }
        // Any request ends an idle period: stop idle destage after the current step.
        self.destage.idle.request();
        let must_wait = !self.serving() || (self.is_ordered(&req) && !self.pending.is_empty());
        if must_wait || !self.try_admit(now, &req) {
            self.hold(req);
        }
        self.after_change(now);
    }

    /// Writes that enter the log, and flushes, keep their order.
    fn is_ordered(&self, req: &Request) -> bool {
        req.op == Op::Flush || self.is_logged(req)
    }

    fn is_logged(&self, req: &Request) -> bool {
        let write_through = req.fua && self.args.fua == FuaMode::WriteThrough;
        req.op == Op::Write && req.length_bytes < self.args.bypass_bytes && !write_through
    }

    fn hold(&mut self, req: Request) {
        if self.pending.len() >= self.args.pending_max as usize {
            self.complete_upper(Completion::err(req.id, IoError::NoSpace));
            return;
        }
        if req.op == Op::Write {
            self.counters.writes_held_count += 1;
        }
        self.pending.push_back(req);
    }

    /// Serves `req` now if the log has room; false if it must wait.
    fn try_admit(&mut self, now: Instant, req: &Request) -> bool {
        assert!(self.serving());
        match req.op {
            Op::Read => {
                self.read(now, req.clone());
                true
            }
            Op::Flush => self.flush(now, req),
            Op::Write if self.is_logged(req) => self.absorb(now, req),
            _ => {
                self.home_upper(req.clone());
                true
            }
        }
    }

    /// Retries held requests in order; stops at the first that still waits.
    pub(super) fn retry_pending(&mut self, now: Instant) {
        while let Some(req) = self.pending.pop_front() {
            if !self.try_admit(now, &req) {
                self.pending.push_front(req);
                return;
            }
        }
        if self.home.pending_invalidations.is_empty() {
            self.destage.forced = false;
        }
    }

    /// Makes sure the open segment has room for `slots` slots and `entries`
    /// header entries, sealing it and opening the next if needed.
    fn ensure_room(&mut self, now: Instant, slots: u32, entries: u32) -> bool {
        assert!(slots <= self.geo.slot_count && entries <= self.geo.entry_count_max);
        if let Some(loc) = self.log.open {
            let seg = &self.log.segs[loc.0 as usize];
            let slots_ok = seg.slots.len() as u32 + slots <= self.geo.slot_count;
            if slots_ok && seg.entries.len() as u32 + entries <= self.geo.entry_count_max {
                return true;
            }
            self.seal(loc);
        }
        // Invalidation records (no slots) may take the last ring location:
        // the segments they pin are only reclaimed once the records are written.
        self.open_segment(now, slots == 0)
    }

    /// Pairs a free buffer with the next ring location.
    fn open_segment(&mut self, now: Instant, records: bool) -> bool {
        assert!(self.log.open.is_none());
        let limit = u64::from(self.geo.segment_count) - u64::from(!records);
        if self.log.ring.segments.in_use() >= limit {
            self.destage.forced = true;
            return false;
        }
        let Some(buf) = self.log.buffers_free.pop() else { return false };
        let (seq, unit) = self.log.ring.segments.allocate(limit).expect("the ring had room (checked above)");
        let (seq, loc) = (Seq(seq), SegLoc(unit as u32));
        debug_assert_eq!(loc, self.geo.location(seq));
        assert_eq!(self.log.segs[loc.0 as usize].state, SegState::Free, "ring location reused while live");
        // Room for a full segment's slots and their entries up front: most
        // segments fill, and growing both a push at a time cost several
        // reallocations per segment.
        let full = self.geo.slot_count as usize;
        self.log.segs[loc.0 as usize] = SegMeta {
            seq,
            state: SegState::Open { buf },
            slots: Vec::with_capacity(full),
            entries: Vec::with_capacity(full),
            ..SegMeta::free()
        };
        self.log.open = Some(loc);
        self.place_pending_invalidations(now);
        true
    }

    /// Seals the open segment and starts writing it.
    pub(super) fn seal(&mut self, loc: SegLoc) {
        assert_eq!(self.log.open, Some(loc));
        let seg = &mut self.log.segs[loc.0 as usize];
        let SegState::Open { buf } = seg.state else { panic!("sealing a segment that is not open") };
        seg.state = SegState::Sealed { buf };
        self.log.open = None;
        self.log.buffer_deadline = None;
        self.write_sealed(loc);
    }

    /// Starts writing a sealed segment (after a preflush if it carries
    /// invalidation records, so the home writes they describe are durable
    /// before the records can be). Also how a failed write is retried.
    pub(super) fn write_sealed(&mut self, loc: SegLoc) {
        if self.log.segs[loc.0 as usize].has_invalidations {
            self.emit(LowerOp::SegPreflush { loc }, Request::new(ReqId(0), Op::Flush, 0, 0));
        } else {
            self.write_segment(loc);
        }
    }

    pub(super) fn write_segment(&mut self, loc: SegLoc) {
        let seg = &self.log.segs[loc.0 as usize];
        let SegState::Sealed { buf } = seg.state else { panic!("writing a segment that is not sealed") };
        let used_bytes = seg.slots.len() * self.geo.slot_bytes as usize;
        let payload = &self.log.buffers[buf as usize][..used_bytes];
        assert!(seg.entries.len() <= self.geo.entry_count_max as usize, "too many entries");
        let length = self.geo.header_bytes as usize + payload.len();
        assert!(length as u64 <= self.geo.stride_bytes());
        self.counters.log_segments_written_count += 1;
        self.counters.log_written_bytes += length as u64;
        let offset = self.geo.segment_offset_bytes(loc);
        // Timing-only mode: no bytes to carry, only the length to charge
        // (the header is not even encoded).
        let req = if seg.has_data {
            let header = SegmentHeader {
                seq: seg.seq,
                boot: self.log.ring.boot,
                format_id: self.log.ring.format_id,
                slots_used: seg.slots.len() as u32,
                payload_crc: Some(SegmentHeader::payload_crc_of(payload)),
                entries: seg.entries.clone(),
            };
            let mut data = header.encode(&self.geo);
            debug_assert_eq!(data.len(), self.geo.header_bytes as usize);
            data.extend_from_slice(payload);
            Request::write(ReqId(0), offset, Bytes::from(data))
        } else {
            Request::new(ReqId(0), Op::Write, offset, length as u32)
        };
        self.emit(LowerOp::SegWrite { loc }, req);
    }

    /// A segment reached the log: its buffer is free, reads go to disk.
    pub(super) fn segment_written(&mut self, loc: SegLoc) {
        self.log.written(loc, &self.geo);
    }

    /// Takes a small write into the open buffer and acknowledges it.
    fn absorb(&mut self, now: Instant, req: &Request) -> bool {
        let sectors = u64::from(req.length_bytes) / S;
        let slot_sectors = u64::from(self.geo.slot_sectors());
        let slots = sectors.div_ceil(slot_sectors) as u32;
        // Records of earlier writes home must precede this write in the log.
        self.flush_pending_invalidations(now);
        if !self.home.pending_invalidations.is_empty() || !self.ensure_room(now, slots, slots) {
            return false;
        }
        let loc = self.log.open.expect("room was made");
        let start = req.offset_bytes / S;
        for k in 0..u64::from(slots) {
            let first = k * slot_sectors;
            let n = slot_sectors.min(sectors - first);
            let data = req.data.as_ref().map(|d| &d[(first * S) as usize..((first + n) * S) as usize]);
            self.append_slot(loc, start + first, n as u32, data);
        }
        self.counters.writes_absorbed_count += 1;
        self.counters.writes_absorbed_bytes += u64::from(req.length_bytes);
        if self.log.buffer_deadline.is_none() {
            self.log.buffer_deadline = Some(now.add_ms(self.args.buffer_delay_ms));
        }
        let seq = self.log.segs[loc.0 as usize].seq;
        if req.fua {
            self.counters.writes_fua_count += 1;
            self.seal(loc);
            self.acks.waiters.push(Waiter { acks: vec![req.id], upto: Seq(seq.0 + 1) });
        } else {
            self.complete_upper(Completion::ok(req.id));
            if self.log.segs[loc.0 as usize].slots.len() as u32 == self.geo.slot_count {
                self.seal(loc);
            }
        }
        true
    }

    fn append_slot(&mut self, loc: SegLoc, start: u64, n: u32, data: Option<&[u8]>) {
        assert!(n >= 1 && n <= self.geo.slot_sectors());
        let seg = &mut self.log.segs[loc.0 as usize];
        let SegState::Open { buf } = seg.state else { panic!("appending to a segment that is not open") };
        let slot = seg.slots.len() as u16;
        match data {
            Some(d) => {
                let at = slot as usize * self.geo.slot_bytes as usize;
                self.log.buffers[buf as usize][at..at + d.len()].copy_from_slice(d);
            }
            None => seg.has_data = false,
        }
        let valid_mask = if n == 64 { u64::MAX } else { (1u64 << n) - 1 };
        seg.slots.push(SlotMeta { start_sector: start, sector_count: n, valid_mask });
        seg.entries.push(Entry::Slot { start_sector: start, sector_count: n, slot });
        seg.valid_sectors += n;
        let seq = seg.seq;
        self.counters.overwritten_before_destage_bytes += self.map_slot(loc, slot, start, n, seq) * S;
    }

    /// FLUSH: seal the open buffer and complete once the log is durable up to it.
    fn flush(&mut self, now: Instant, req: &Request) -> bool {
        self.flush_pending_invalidations(now);
        if !self.home.pending_invalidations.is_empty() {
            return false;
        }
        let upto = match self.log.open {
            Some(loc) if !self.log.segs[loc.0 as usize].entries.is_empty() => {
                let seq = self.log.segs[loc.0 as usize].seq;
                self.seal(loc);
                Seq(seq.0 + 1)
            }
            Some(loc) => self.log.segs[loc.0 as usize].seq,
            None => self.log.ring.head(),
        };
        assert!(upto <= self.log.ring.head());
        self.counters.flushes_count += 1;
        self.acks.waiters.push(Waiter { acks: vec![req.id], upto });
        true
    }

    /// Issues one lower flush for every waiter whose segments are all written.
    pub(super) fn process_waiters(&mut self) {
        let written = self.log.ring.written_upto;
        if !self.acks.waiters.iter().any(|w| w.upto <= written) {
            return;
        }
        let (ready, waiting): (Vec<Waiter>, Vec<Waiter>) =
            std::mem::take(&mut self.acks.waiters).into_iter().partition(|w| w.upto <= written);
        self.acks.waiters = waiting;
        let acks: Vec<ReqId> = ready.into_iter().flat_map(|w| w.acks).collect();
        if !acks.is_empty() {
            self.emit(
                LowerOp::DurableFlush(Box::new(Waiter { acks, upto: written })),
                Request::new(ReqId(0), Op::Flush, 0, 0),
            );
        }
    }

    /// Where the log is now: a later log write compares greater.
    fn arrival_pos(&self) -> (Seq, u32) {
        match self.log.open {
            Some(loc) => {
                (self.log.segs[loc.0 as usize].seq, self.log.segs[loc.0 as usize].slots.len() as u32)
            }
            None => (self.log.ring.head(), 0),
        }
    }

    /// A write, trim or write-zeroes that goes straight to the data region.
    fn home_upper(&mut self, req: Request) {
        match req.op {
            Op::Write if req.fua => self.counters.writes_fua_count += 1,
            Op::Write => {}
            _ => self.counters.trims_count += 1,
        }
        if req.op == Op::Write {
            self.counters.writes_bypassed_count += 1;
            self.counters.writes_bypassed_bytes += u64::from(req.length_bytes);
        }
        let arrival = self.arrival_pos();
        self.home_submit(HomeOp::Upper { req, arrival });
    }

    fn home_range(op: &HomeOp) -> (u64, u64) {
        match op {
            HomeOp::Upper { req, .. } => (req.offset_bytes / S, req.end_bytes() / S),
            HomeOp::Destage { first, locs, .. } => (*first, first + locs.len() as u64),
        }
    }

    /// Writes home are ordered: one overlapping an earlier one waits for it.
    pub(super) fn home_submit(&mut self, op: HomeOp) {
        if let Some(op) = self.home.gate.submit(Self::home_range(&op), op) {
            self.home_issue(op);
        }
    }

    /// Issues waiting home writes that no longer overlap anything earlier.
    pub(super) fn home_retry(&mut self) {
        while let Some((_, op)) = self.home.gate.pop_ready() {
            self.home_issue(op);
        }
    }

    fn home_issue(&mut self, op: HomeOp) {
        let base = self.args.data_offset_bytes;
        match op {
            HomeOp::Upper { req, arrival } => {
                let (start, end) = (req.offset_bytes / S, req.end_bytes() / S);
                let lower = Request { offset_bytes: base + req.offset_bytes, ..req.clone() };
                let op = LowerOp::HomeUpper(Box::new(HomeUpperWrite {
                    id: req.id,
                    fua: req.fua,
                    start,
                    count: end - start,
                    arrival,
                }));
                let lower_id = self.emit(op, lower);
                self.home.gate.issued(lower_id, (start, end));
            }
            HomeOp::Destage { seq, first, locs, data } => self.destage_issue(seq, first, locs, data),
        }
    }

    /// A write home finished: drop older log copies of its range, and log an
    /// invalidation record if replay could otherwise bring one back.
    pub(super) fn home_upper_done(
        &mut self,
        c: Completion,
        fua: bool,
        start: u64,
        count: u64,
        arrival: (Seq, u32),
    ) {
        if let Err(e) = c.result {
            self.complete_upper(Completion::err(c.id, e));
            return;
        }
        let segs = &self.log.segs;
        let older = |l: Loc| {
            let seq = segs[l.seg.0 as usize].seq;
            seq < arrival.0 || (seq == arrival.0 && u32::from(l.slot) < arrival.1)
        };
        let removed = self.lookup.remove_range(start, count, |l| !older(l));
        let replay_visible = self.lookup.visible_in(start, count);
        if removed.is_empty() && !replay_visible {
            self.complete_upper(Completion::ok(c.id));
            return;
        }
        let fua_ack = fua.then_some(c.id);
        if fua_ack.is_none() {
            self.complete_upper(Completion::ok(c.id));
        }
        // Like a destage: the home write completed, so the flush before the
        // next checkpoint makes it durable; the segment needs no pin. The
        // record only matters while an older copy stays in the ring.
        for &(_, loc) in &removed {
            self.invalidate(loc, None);
        }
        self.home.pending_invalidations.push_back(PendingInvalidation { start, count, fua_ack });
    }

    /// Moves pending invalidation records into the open segment.
    pub(super) fn place_pending_invalidations(&mut self, now: Instant) {
        let Some(loc) = self.log.open else { return };
        let mut acks = Vec::new();
        while self.log.segs[loc.0 as usize].entries.len() < self.geo.entry_count_max as usize {
            let Some(p) = self.home.pending_invalidations.pop_front() else { break };
            self.lookup.clear_visible(p.start, p.count);
            let seg = &mut self.log.segs[loc.0 as usize];
            seg.entries.push(Entry::Invalidate { start_sector: p.start, sector_count: p.count as u32 });
            seg.has_invalidations = true;
            self.counters.invalidation_records_count += 1;
            acks.extend(p.fua_ack);
        }
        if !self.log.segs[loc.0 as usize].entries.is_empty() && self.log.buffer_deadline.is_none() {
            self.log.buffer_deadline = Some(now.add_ms(self.args.buffer_delay_ms));
        }
        if !acks.is_empty() {
            let seq = self.log.segs[loc.0 as usize].seq;
            self.seal(loc);
            self.acks.waiters.push(Waiter { acks, upto: Seq(seq.0 + 1) });
        }
    }

    /// Places pending records, opening a segment if needed.
    pub(super) fn flush_pending_invalidations(&mut self, now: Instant) {
        while !self.home.pending_invalidations.is_empty() {
            if self.log.open.is_some() {
                self.place_pending_invalidations(now);
            }
            if self.home.pending_invalidations.is_empty() || !self.ensure_room(now, 0, 1) {
                return;
            }
        }
    }
}

/// Where one run of a read comes from.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Source {
    Home,
    Ram { buf: u32, offset: u64 },
    Log { loc: SegLoc, offset: u64 },
}

impl Dcd {
    fn source(&self, sector: u64, loc: Option<Loc>) -> Source {
        let Some(l) = loc else { return Source::Home };
        let seg = &self.log.segs[l.seg.0 as usize];
        let within = u64::from(l.slot) * u64::from(self.geo.slot_bytes) + u64::from(l.within) * S;
        match seg.state {
            SegState::Open { buf } | SegState::Sealed { buf } => Source::Ram { buf, offset: within },
            SegState::Dirty => {
                Source::Log { loc: l.seg, offset: self.geo.slot_offset_bytes(l.seg, 0) + within }
            }
            SegState::Free => panic!("sector {sector} maps into a free segment"),
        }
    }

    /// Runs of the read: (first sector index in the request, sectors, source).
    fn read_runs(&self, req: &Request) -> Vec<(u64, u64, Source)> {
        let start = req.offset_bytes / S;
        let count = u64::from(req.length_bytes) / S;
        let mut runs: Vec<(u64, u64, Source)> = Vec::new();
        for (i, loc) in self.lookup.get_range(start, count).into_iter().enumerate() {
            let src = self.source(start + i as u64, loc);
            if let Some(last) = runs.last_mut() {
                let contiguous = match (last.2, src) {
                    (Source::Home, Source::Home) => true,
                    (Source::Ram { buf: a, offset: o }, Source::Ram { buf: b, offset: p }) => {
                        a == b && o + last.1 * S == p
                    }
                    (Source::Log { loc: a, offset: o }, Source::Log { loc: b, offset: p }) => {
                        a == b && o + last.1 * S == p
                    }
                    _ => false,
                };
                if contiguous {
                    last.1 += 1;
                    continue;
                }
            }
            runs.push((i as u64, 1, src));
        }
        assert_eq!(runs.iter().map(|r| r.1).sum::<u64>(), count);
        runs
    }

    /// A read: copy what is in RAM, read the rest from log and data region.
    pub(super) fn read(&mut self, now: Instant, req: Request) {
        let count = u64::from(req.length_bytes) / S;
        // The common case, nothing of it in the log: one read home.
        if !self.lookup.any_mapped(req.offset_bytes / S, count) {
            self.read_whole(&req, count, Source::Home);
            return;
        }
        let runs = self.read_runs(&req);
        let fragmented = runs.len() > 1 && runs.iter().any(|r| matches!(r.2, Source::Log { .. }));
        if fragmented {
            self.counters.reads_fragmented_count += 1;
            if self.args.read_fragmented == ReadFragmented::Destage {
                self.destage.reads_waiting.push_back(req);
                return;
            }
        }
        let _ = now;
        // One lower read covers it all: its completion is the answer, with
        // no assembly kept while it is queued below.
        if let [(0, n, src @ (Source::Home | Source::Log { .. }))] = runs[..] {
            self.read_whole(&req, n, src);
            return;
        }
        let key = self.reads.new_key();
        // No payload memory until a payload exists: in timing-only mode no
        // piece carries data and the buffer is never allocated.
        // Piece 0 is the request itself, answered below once every run is out.
        let mut asm = Assembly::new(req.id, Op::Read, req.length_bytes, 1);
        for &(first, n, src) in &runs {
            let at = (first * S) as usize;
            match src {
                Source::Ram { buf, offset } => {
                    self.counters.read_ram_bytes += n * S;
                    if self.log.ram_has_data(buf) {
                        let o = offset as usize;
                        asm.put(at, &self.log.buffers[buf as usize][o..o + (n * S) as usize]);
                    }
                }
                Source::Home | Source::Log { .. } => {
                    asm.add_pieces(1);
                    self.read_piece(key, req.offset_bytes, first, n, src);
                }
            }
        }
        self.reads.asms.insert(key, asm);
        self.read_piece_done(key, 0, None, Ok(()));
    }

    /// Serves read `req` (`n` sectors) with one lower read from `src`.
    fn read_whole(&mut self, req: &Request, n: u64, src: Source) {
        let (lower_offset, pin) = self.read_source(req.offset_bytes, 0, n, src);
        let lower = Request::new(ReqId(0), Op::Read, lower_offset, req.length_bytes);
        self.emit(LowerOp::ReadWhole { id: req.id, pin }, lower);
    }

    fn read_piece(&mut self, key: u64, offset_bytes: u64, first: u64, n: u64, src: Source) {
        let (lower_offset, pin) = self.read_source(offset_bytes, first, n, src);
        let within_bytes = (first * S) as u32;
        let req = Request::new(ReqId(0), Op::Read, lower_offset, (n * S) as u32);
        self.emit(LowerOp::ReadPiece { key, within_bytes, pin }, req);
    }

    /// Where `n` sectors from sector `first` of a read at `offset_bytes`
    /// are read below, pinning their segment if in the log; counted.
    fn read_source(&mut self, offset_bytes: u64, first: u64, n: u64, src: Source) -> (u64, Option<SegLoc>) {
        match src {
            Source::Home => {
                self.counters.read_data_bytes += n * S;
                (self.args.data_offset_bytes + offset_bytes + first * S, None)
            }
            Source::Log { loc, offset } => {
                self.counters.read_log_bytes += n * S;
                self.log.segs[loc.0 as usize].pins += 1;
                (offset, Some(loc))
            }
            Source::Ram { .. } => panic!("RAM runs are copied, not read"),
        }
    }

    /// One piece of a read answered (piece 0 is the request itself).
    pub(super) fn read_piece_done(
        &mut self,
        key: u64,
        within_bytes: u32,
        data: Option<Bytes>,
        result: Result<(), IoError>,
    ) {
        if let Some(c) = self.reads.piece_done(key, within_bytes, data, result) {
            self.complete_upper(c);
        }
    }
}
