//! The request path: bring-up, reads (zeroes for declared-free blocks,
//! replicas when a chain fits, originals otherwise), modifying requests
//! (maps updated at once, Table 4.1 through the overlap gate), flushes
//! (region record first when it changed), and completions.

use super::{meta, Held, LowerOp, Phase, Replica};
use crate::split::Assembly;
use bytes::Bytes;
use layoutd_core::metablock::MetaBlockCodec;
use layoutd_core::streams::base_run;
use layoutd_core::{Completion, Instant, IoError, Op, ReqId, Request};

impl Replica {
    pub(super) fn start_bringup(&mut self) {
        let rb = u64::from(self.args.meta_record_bytes);
        let off = self.args.meta_offset_bytes();
        match self.phase {
            Phase::Format { .. } => {
                // Both copies, so no record of an earlier format survives.
                for (copy, generation) in [(1u64, 1u64), (0, 2)] {
                    let empty = meta::RegionRecord { extents: Vec::new(), snapshot: 0 };
                    let b = meta::encode(self.args.meta_record_bytes, generation, self.geometry(), &empty)
                        .expect("an empty region fits");
                    self.emit(
                        LowerOp::FormatWrite,
                        Request::write(ReqId(0), off + copy * rb, Bytes::from(b)),
                    );
                }
                self.region.generation = 2;
            }
            Phase::Recover { .. } => {
                for copy in 0..2usize {
                    let req = Request::new(ReqId(0), Op::Read, off + copy as u64 * rb, rb as u32);
                    self.emit(LowerOp::MetaRead { copy }, req);
                }
            }
            _ => unreachable!("bring-up starts once"),
        }
    }

    fn bringup_done(&mut self, now: Instant) {
        self.phase = Phase::Serving;
        self.snap.last_at = Some(now);
        while let Some(req) = self.held.pop_front() {
            self.request(now, req);
        }
    }

    fn geometry(&self) -> (u64, u32) {
        (self.args.volume_blocks(), self.args.block_bytes)
    }

    fn recovered(&mut self, now: Instant, copies: [Option<Bytes>; 2], clean: bool) {
        let rb = u64::from(self.args.meta_record_bytes);
        let off = self.args.meta_offset_bytes();
        let codec = meta::codec(self.args.meta_record_bytes);
        let (Some(c0), Some(c1)) = (&copies[0], &copies[1]) else {
            self.phase = Phase::Failed(
                "replica: recovery needs the region record's bytes; the runtime runs in timing-only mode"
                    .into(),
            );
            return;
        };
        let picked = match codec.pick(c0, c1) {
            Ok(p) => p,
            Err((e0, e1)) => {
                self.phase = Phase::Failed(format!(
                    "replica: no readable region record at lower bytes {off} (copy 0: {e0}) or {} (copy 1: {e1}); \
                     if this device never held a replica layer with this config, format it (`layoutd format`); \
                     if it did, its metadata area is damaged and the volume cannot be opened safely",
                    off + rb
                ));
                return;
            }
        };
        match meta::decode(&picked.block.payload, self.args.volume_blocks(), self.args.block_bytes) {
            Ok(rec) => {
                for &(s, n) in &rec.extents {
                    self.space.declared.release(s, n);
                    self.space.free.release(s, n);
                    self.space.region.release(s, n);
                }
                self.region.generation = picked.block.generation;
                self.snap.generation = picked.block.generation.max(rec.snapshot);
                if clean && rec.snapshot != 0 && self.args.snapshot_bytes > 0 {
                    let buf = vec![0u8; (self.args.snapshot_bytes / 2) as usize];
                    let reads =
                        (self.args.snapshot_bytes / 2).div_ceil(u64::from(layoutd_core::REQUEST_BYTES_MAX));
                    self.phase = Phase::Loading {
                        generation: rec.snapshot,
                        buf,
                        reads_left: reads as u32,
                        error: None,
                    };
                    self.load_snapshot(rec.snapshot);
                } else {
                    self.bringup_done(now);
                }
            }
            Err(e) => {
                self.phase = Phase::Failed(format!(
                    "replica: region record copy {} at lower bytes {}: {e}; refusing to open",
                    picked.copy,
                    off + picked.copy as u64 * rb
                ))
            }
        }
    }

    pub(super) fn request(&mut self, now: Instant, req: Request) {
        match req.op {
            Op::Read => self.read(now, req),
            Op::Flush => self.flush(now, req),
            Op::Write | Op::Trim | Op::WriteZeroes => self.modify(now, req),
        }
    }

    /// Covering blocks of a byte range: `(first, count)`.
    fn blocks_of(&self, offset_bytes: u64, length_bytes: u64) -> (u64, u64) {
        let b = self.block();
        let first = offset_bytes / b;
        (first, (offset_bytes + length_bytes).div_ceil(b) - first)
    }

    fn read(&mut self, now: Instant, req: Request) {
        self.tick = self.tick.wrapping_add(1);
        self.counters.reads_count += 1;
        self.reclaim.wait_reads = self.reclaim.wait_reads.saturating_sub(1);
        let b = self.block();
        let (ba, n) = self.blocks_of(req.offset_bytes, u64::from(req.length_bytes));
        let key = self.new_key();
        let declared = self.space.declared.free_parts(ba, n);
        if !declared.is_empty() {
            self.read_with_zeroes(req, key, &declared);
            return;
        }
        if !req.offset_bytes.is_multiple_of(b) || !u64::from(req.length_bytes).is_multiple_of(b) {
            self.counters.reads_unaligned_count += 1;
            self.asm.insert(key, Assembly::new(req.id, Op::Read, req.length_bytes, 1));
            let lower = Request { background: false, ..req };
            self.emit(LowerOp::Piece { key, within: 0, gate_range: None }, lower);
            return;
        }
        self.read_policy(now, req, key, ba, n);
    }

    /// A read touching declared-free blocks: those bytes are zeroes, the
    /// rest is read from the originals.
    fn read_with_zeroes(&mut self, req: Request, key: u64, declared: &[(u64, u64)]) {
        let b = self.block();
        let (off, end) = (req.offset_bytes, req.end_bytes());
        let mut gaps = Vec::new();
        let mut pos = off;
        for &(s, l) in declared {
            let (zs, ze) = ((s * b).max(off), ((s + l) * b).min(end));
            if zs > pos {
                gaps.push((pos, zs - pos));
            }
            self.counters.reads_zero_bytes += ze - zs;
            pos = ze;
        }
        if pos < end {
            gaps.push((pos, end - pos));
        }
        let mut asm = Assembly::new(req.id, Op::Read, req.length_bytes, gaps.len() as u32);
        asm.put(0, &[]); // a zeroed buffer: the declared-free bytes
        if gaps.is_empty() {
            self.lower_io.upper_q.push_back(asm.finish());
            return;
        }
        self.asm.insert(key, asm);
        for (o, l) in gaps {
            let lower = Request { stream: req.stream, ..Request::new(ReqId(0), Op::Read, o, l as u32) };
            self.emit(LowerOp::Piece { key, within: (o - off) as u32, gate_range: None }, lower);
        }
    }

    fn read_policy(&mut self, now: Instant, req: Request, key: u64, ba: u64, n: u64) {
        let close_blocks = self.args.close_blocks;
        // The base stream holds the policy's state and decides what passes
        // through; a run split off it (streams.rs) adds its own recent
        // reads to what a chain may be close to.
        let (run, stream) = (req.stream, base_run(req.stream));
        let (close_count, committed, backing_off) = {
            let s = self.streams.get(stream);
            let backing_off = s.backoff_left > 0;
            s.backoff_left = s.backoff_left.saturating_sub(1);
            (s.close_count((ba, ba + n), close_blocks), s.committed_left > 0, backing_off)
        };
        let b = self.block();
        self.asm.insert(key, Assembly::new(req.id, Op::Read, req.length_bytes, 1));
        if !committed && close_count >= self.args.pass_through_close_count {
            self.counters.reads_sequential_count += 1;
            self.push_history(run, (ba, ba + n));
            let lower = Request { background: false, ..req };
            self.emit(LowerOp::Piece { key, within: 0, gate_range: None }, lower);
            return;
        }
        if let Some((loc, following)) = self.choose_chain(run, ba, n, close_count) {
            self.counters.reads_replica_count += 1;
            self.counters.reads_replica_bytes += n * b;
            self.counters.replicas_used_blocks += n;
            self.space.touch(loc, n, self.tick);
            self.streams.get(stream).used_blocks += n;
            self.push_history(run, (loc, loc + n));
            let held = self.streams.ahead_get(run, loc, n);
            if let Some(data) = held {
                self.counters.reads_readahead_count += 1;
                self.piece_done(key, 0, data, Ok(()));
                return;
            }
            // Read ahead only along a chain the stream follows: a read that
            // jumps into one (a random read that happens to hit a replica)
            // would pay for blocks nobody reads next, and every other
            // stream's request would wait behind that transfer.
            let max = self.args.readahead_blocks.min(u64::from(layoutd_core::REQUEST_BYTES_MAX) / b - n);
            let extra = if max == 0 || !following { 0 } else { self.chain_length(loc + n, max, true) };
            self.counters.readahead_read_blocks += extra;
            let lower = Request {
                stream: req.stream,
                ..Request::new(ReqId(0), Op::Read, loc * b, ((n + extra) * b) as u32)
            };
            let op = LowerOp::ReplicaRead { key, range: (loc, loc + n), stream: req.stream };
            let id = self.emit(op, lower);
            self.streams.ahead.read_issued(id, req.stream, loc, (loc, loc + n), loc + n + extra);
            self.gate.issued(id, (loc, loc + n + extra));
            return;
        }
        self.push_history(run, (ba, ba + n));
        let op = if !backing_off && self.may_replicate(now, stream) {
            self.counters.candidates_count += 1;
            LowerOp::CandidateRead { key, stream, orig: ba, blocks: n, stale: false }
        } else {
            LowerOp::Piece { key, within: 0, gate_range: None }
        };
        self.emit(op, Request { background: false, ..req });
    }

    /// Records a read in the history of `run` and of the base stream it
    /// was split off (one history when they are the same).
    fn push_history(&mut self, run: layoutd_core::StreamId, r: (u64, u64)) {
        let count = self.args.history_count;
        let stream = base_run(run);
        self.streams.get(stream).push_history(r, count);
        if run != stream {
            self.streams.get(run).push_history(r, count);
        }
    }

    fn modify(&mut self, now: Instant, req: Request) {
        let _ = now;
        self.snap.modify_since_flush = true;
        self.map_changed();
        let b = self.block();
        let (ba, n) = self.blocks_of(req.offset_bytes, u64::from(req.length_bytes));
        match req.op {
            Op::Write => self.counters.writes_count += 1,
            Op::Trim => self.counters.discards_count += 1,
            _ => self.counters.zeroes_count += 1,
        }
        let observed = self.note_conflicts(ba, n);
        let extra = self.update_maps(&req, ba, n);
        let (id, op, length_bytes, fua) = (req.id, req.op, req.length_bytes, req.fua);
        // The request itself goes below (its payload moved, not shared).
        let mut lower = std::mem::take(&mut self.lower_buf);
        lower.push(Request { background: false, ..req });
        lower.extend(extra);
        let key = self.new_key();
        let mut pieces = lower.len() as u32;
        // A write into the region leaves it once it has landed (before, a
        // crash must still find those blocks zeroed); a FUA write then
        // waits for the record that says so.
        let hits_region = op == Op::Write && !self.space.region.free_parts(ba, n).is_empty();
        if hits_region {
            self.region_drops.insert(key, (lower.len() as u32, (ba, n), fua));
            pieces += u32::from(fua);
        } else if fua && self.region.version > self.region.durable {
            self.region.waiters.push((key, self.region.version));
            pieces += 1;
        }
        self.asm.insert(key, Assembly::new(id, op, length_bytes, pieces));
        let _ = b;
        if !self.args.conflict_checks {
            self.issue_upper(key, lower);
        } else if let Some(Held::Upper { key, lower }) =
            self.gate.submit((ba, ba + n), Held::Upper { key, lower })
        {
            self.issue_upper(key, lower);
        } else {
            self.counters.conflicts_rr_count += observed.0;
            self.counters.conflicts_b_count += observed.1;
        }
        self.pump_region();
    }

    /// Table 4.1 for a modify of blocks `[ba, ba + n)` arriving now: marks
    /// pending replica writes of those originals stale (INV) and those into
    /// those blocks foiled (B); returns (RR, B) conflicts that hold it.
    fn note_conflicts(&mut self, ba: u64, n: u64) -> (u64, u64) {
        let over = |s: u64, l: u64| s < ba + n && ba < s + l;
        let mut b_held = 0;
        for p in self.pending.values_mut() {
            if over(p.orig, p.blocks) && p.valid {
                p.valid = false;
                self.counters.conflicts_inv_count += 1;
            }
            if over(p.loc, p.blocks) {
                p.valid = false;
                if p.issued {
                    b_held += 1;
                }
            }
        }
        // Replica reads in flight of these blocks (read-ahead included)
        // hold the modify (RR); one pass over the lower requests in flight:
        // candidate reads go stale.
        let rr = self.streams.ahead.reads_overlapping(ba, ba + n);
        for op in self.lower_io.lower.values_mut() {
            if let LowerOp::CandidateRead { orig, blocks, stale, .. } = op {
                if over(*orig, *blocks) {
                    *stale = true;
                    self.counters.conflicts_rc_count += 1;
                }
            }
        }
        self.counters.candidates_forgotten_count += self.streams.forget_candidates(ba, ba + n);
        (rr, b_held)
    }

    /// Updates every map for a modify of blocks `[ba, ba + n)` at once;
    /// returns the extra lower requests it needs (zero-fill of the rest of
    /// a region block a write covers in part; update propagation).
    fn update_maps(&mut self, req: &Request, ba: u64, n: u64) -> Vec<Request> {
        let b = self.block();
        let mut extra = self.propagation(req, ba, n);
        if extra.is_empty() {
            let gone = self.space.drop_replicas_of(ba, n);
            self.counters.replicas_invalidated_blocks += gone.iter().map(|g| g.1).sum::<u64>();
        }
        let living = self.space.drop_replicas_in(ba, n);
        self.counters.replicas_dropped_by_allocation_blocks += living.iter().map(|g| g.1).sum::<u64>();
        if req.op == Op::Write {
            // The rest of a declared-free block a write covers in part must
            // go on reading zeroes: it may hold replica bytes (the region)
            // or whatever the file system left there (a bitmap scan).
            for blk in [ba, ba + n - 1] {
                if !self.space.declared.is_free(blk, 1) {
                    continue;
                }
                let (bs, be) = (blk * b, (blk + 1) * b);
                for (s, e) in [(bs, req.offset_bytes.max(bs).min(be)), (req.end_bytes().max(bs).min(be), be)]
                {
                    if s < e {
                        extra.push(Request::new(ReqId(0), Op::WriteZeroes, s, (e - s) as u32));
                    }
                }
            }
            extra.dedup_by_key(|r| r.offset_bytes);
            self.space.declared.take_range(ba, n);
            self.space.free.take_range(ba, n);
            self.mark_written(ba, n);
        } else {
            let full_a = req.offset_bytes.div_ceil(b);
            let full_e = req.end_bytes() / b;
            if full_a < full_e {
                self.space.declared.release_range(full_a, full_e - full_a);
            }
            self.release_free(ba, n);
        }
        extra
    }

    /// Update propagation: a small block-aligned write over replicated
    /// originals is written to their replicas too, instead of invalidating
    /// them. Returns the replica writes (empty: not applicable).
    fn propagation(&mut self, req: &Request, ba: u64, n: u64) -> Vec<Request> {
        let b = self.block();
        let small = req.op == Op::Write && req.length_bytes <= self.args.propagate_bytes_max;
        if !small || !req.offset_bytes.is_multiple_of(b) || !u64::from(req.length_bytes).is_multiple_of(b) {
            return Vec::new();
        }
        let mut out = Vec::new();
        for layer in &self.space.reverse {
            for e in layer.overlapping(ba, n) {
                let at = ((e.start - ba) * b) as usize;
                let len = (e.length * b) as usize;
                let mut w = Request::new(ReqId(0), Op::Write, e.value * b, len as u32);
                w.data = req.data.as_ref().map(|d| d.slice(at..at + len));
                self.counters.replicas_propagated_blocks += e.length;
                out.push(w);
            }
        }
        out
    }

    /// Issues the lower requests of upper modify `key`, each registered in
    /// the gate so later replica writes wait for them.
    fn issue_upper(&mut self, key: u64, mut lower: Vec<Request>) {
        let b = self.block();
        for req in lower.drain(..) {
            let range = (req.offset_bytes / b, req.end_bytes().div_ceil(b));
            let id = self.emit(LowerOp::Piece { key, within: 0, gate_range: Some(range) }, req);
            self.gate.issued(id, range);
        }
        self.lower_buf = lower;
    }

    fn flush(&mut self, now: Instant, req: Request) {
        self.counters.flushes_count += 1;
        let key = self.new_key();
        let mut pieces = 1 + u32::from(self.snapshot_at_flush(now, key));
        if self.region.version > self.region.durable {
            self.region.waiters.push((key, self.region.version));
            pieces += 1;
        }
        self.asm.insert(key, Assembly::new(req.id, Op::Flush, 0, pieces));
        self.emit(
            LowerOp::Piece { key, within: 0, gate_range: None },
            Request::new(ReqId(0), Op::Flush, 0, 0),
        );
        self.pump_region();
    }

    /// Writes the region record if anything waits for a newer one.
    pub(super) fn pump_region(&mut self) {
        let r = &self.region;
        let replica_waits = self.deferred.iter().any(|k| self.pending[k].region_version > r.durable);
        let vouch_waits = self.snap.vouched != 0;
        if r.busy || r.durable >= r.version || (r.waiters.is_empty() && !replica_waits && !vouch_waits) {
            return;
        }
        let extents: Vec<(u64, u64)> = self.space.region.extents().collect();
        let generation = self.region.generation + 1;
        let rec = meta::RegionRecord { extents, snapshot: self.snap.vouched };
        let Some(block) = meta::encode(self.args.meta_record_bytes, generation, self.geometry(), &rec) else {
            self.region.last_error = Some(format!(
                "the region has {} extents; a record of {} bytes holds {}",
                rec.extents.len(),
                self.args.meta_record_bytes,
                meta::extents_max(self.args.meta_record_bytes)
            ));
            self.fail_region_waiters(self.region.version);
            return;
        };
        self.region.generation = generation;
        self.region.busy = true;
        let copy = MetaBlockCodec::copy_of(generation) as u64;
        let off = self.args.meta_offset_bytes() + copy * u64::from(self.args.meta_record_bytes);
        let mut w = Request::write(ReqId(0), off, Bytes::from(block));
        w.fua = true;
        let version = self.region.version;
        self.emit(LowerOp::MetaWrite { version }, w);
    }

    fn fail_region_waiters(&mut self, upto: u64) {
        let (done, keep): (Vec<_>, Vec<_>) = self.region.waiters.drain(..).partition(|w| w.1 <= upto);
        self.region.waiters = keep;
        for (key, _) in done {
            self.piece_done(key, 0, None, Err(IoError::Io));
        }
    }

    fn region_written(&mut self, version: u64, ok: bool) {
        self.region.busy = false;
        if !ok {
            self.region.last_error = Some(format!("region record write (version {version}) failed"));
            self.fail_region_waiters(version);
            return;
        }
        self.counters.region_writes_count += 1;
        self.region.durable = self.region.durable.max(version);
        let durable = self.region.durable;
        let (done, keep): (Vec<_>, Vec<_>) = self.region.waiters.drain(..).partition(|w| w.1 <= durable);
        self.region.waiters = keep;
        for (key, _) in done {
            self.piece_done(key, 0, None, Ok(()));
        }
    }

    pub(super) fn piece_done(
        &mut self,
        key: u64,
        within: u32,
        data: Option<Bytes>,
        result: Result<(), IoError>,
    ) {
        let asm = self.asm.get_mut(&key).expect("a piece of a known upper request");
        if asm.piece_done(within, data, result) {
            let asm = self.asm.remove(&key).expect("present");
            self.lower_io.upper_q.push_back(asm.finish());
        }
    }

    pub(super) fn completion(&mut self, now: Instant, op: LowerOp, c: Completion) {
        match op {
            LowerOp::MetaRead { copy } => {
                let Phase::Recover { copies, reads_left, clean } = &mut self.phase else { unreachable!() };
                copies[copy] = c.data.filter(|_| c.result.is_ok());
                *reads_left -= 1;
                if *reads_left == 0 {
                    let (copies, clean) = (std::mem::take(copies), *clean);
                    self.recovered(now, copies, clean);
                }
            }
            LowerOp::SnapRead { at } => {
                let Phase::Loading { generation, buf, reads_left, error } = &mut self.phase else {
                    unreachable!()
                };
                match (c.result, c.data) {
                    (Ok(()), Some(d)) => buf[at as usize..at as usize + d.len()].copy_from_slice(&d),
                    (Ok(()), None) => *error = Some(IoError::Io),
                    (Err(e), _) => *error = Some(e),
                }
                *reads_left -= 1;
                if *reads_left == 0 {
                    let (generation, buf, error) = (*generation, std::mem::take(buf), *error);
                    self.snapshot_loaded(generation, error.map_or(Ok(buf), Err));
                    self.bringup_done(now);
                }
            }
            LowerOp::SnapWrite => self.snapshot_written(c.result.is_ok()),
            LowerOp::Scan(what) => self.scan_read(what, c.result.map(|_| c.data)),
            LowerOp::FormatWrite => self.format_step(now, c.result),
            LowerOp::MetaWrite { version } => self.region_written(version, c.result.is_ok()),
            LowerOp::Piece { key, within, gate_range } => {
                if gate_range.is_some() {
                    assert!(self.gate.completed(c.id.0));
                    self.region_drop_step(key);
                }
                self.piece_done(key, within, c.data, c.result);
            }
            LowerOp::CandidateRead { key, stream, orig, blocks, stale } => {
                let data = c.data.clone();
                let ok = c.result.is_ok() && !stale;
                self.piece_done(key, 0, c.data, c.result);
                if ok {
                    self.candidate_read(now, stream, orig, blocks, data);
                }
            }
            LowerOp::ReplicaRead { key, range, stream } => {
                assert!(self.gate.completed(c.id.0));
                let b = self.block();
                let upper_bytes = ((range.1 - range.0) * b) as usize;
                if c.result.is_ok() && self.streams.ahead.read_end(c.id.0) > Some(range.1) {
                    self.streams.get(stream); // tracked (and seen) before it holds bytes
                }
                self.streams.ahead.read_done(c.id.0, c.result.is_ok(), c.data.as_ref(), upper_bytes);
                let c = Completion { data: c.data.map(|d| d.slice(..upper_bytes.min(d.len()))), ..c };
                if c.result.is_err() {
                    // Redo from the original: a replica is only a copy.
                    let b = self.block();
                    let asm_len = (range.1 - range.0) * b;
                    let orig = self.space.forward.get(range.0).map(|r| r.orig);
                    if let Some(orig) = orig {
                        let lower = Request::new(ReqId(0), Op::Read, orig * b, asm_len as u32);
                        self.emit(LowerOp::Piece { key, within: 0, gate_range: None }, lower);
                        return;
                    }
                }
                self.piece_done(key, 0, c.data, c.result);
            }
            LowerOp::ReplicaWrite { pendings } => {
                assert!(self.gate.completed(c.id.0));
                for pending in pendings {
                    self.replica_written(now, pending, c.result.is_ok());
                }
            }
        }
    }

    /// One lower piece of modify `key` landed; after the last, its blocks
    /// leave the region (and a FUA write waits for the record).
    fn region_drop_step(&mut self, key: u64) {
        let Some(entry) = self.region_drops.get_mut(&key) else { return };
        entry.0 -= 1;
        if entry.0 > 0 {
            return;
        }
        let (_, (ba, n), fua) = self.region_drops.remove(&key).expect("present");
        // Blocks declared free again meanwhile (a discard after the write)
        // stay: a replica may already be placed there.
        let mut taken = 0;
        for (s, l) in self.space.region.free_parts(ba, n) {
            let mut pos = s;
            for (ds, dl) in self.space.declared.free_parts(s, l).into_iter().chain([(s + l, 0)]) {
                if ds > pos {
                    taken += self.space.region.take_range(pos, ds - pos);
                }
                pos = ds + dl;
            }
        }
        if taken > 0 {
            self.region.version += 1;
        }
        if fua {
            self.region.waiters.push((key, self.region.version));
        }
    }

    fn format_step(&mut self, now: Instant, result: Result<(), IoError>) {
        let writes_left = match &mut self.phase {
            Phase::Format { writes_left } => writes_left,
            // The other copy's write failed first: the format has failed.
            Phase::Failed(_) => return,
            _ => unreachable!("a format completion after bring-up"),
        };
        if let Err(e) = result {
            self.phase =
                Phase::Failed(format!("replica: writing the region record during format failed: {e}"));
            return;
        }
        *writes_left -= 1;
        match *writes_left {
            1 => {
                self.emit(LowerOp::FormatWrite, Request::new(ReqId(0), Op::Flush, 0, 0));
            }
            0 => self.bringup_done(now),
            _ => {}
        }
    }

    /// After any input: releases what the gate lets go, issues replica
    /// writes that became ready, and writes the region record if needed.
    pub(super) fn after_change(&mut self, now: Instant) {
        while let Some((_, held)) = self.gate.pop_ready() {
            match held {
                Held::Upper { key, lower } => self.issue_upper(key, lower),
                Held::Replica { pendings } => self.issue_run_now(pendings),
            }
        }
        self.issue_ready_replicas(now);
        self.pump_region();
    }

    /// A lower write of blocks `[a, b)` is about to be issued: read-ahead
    /// bytes of those blocks, held or in flight, would be stale.
    pub(super) fn forget_ahead(&mut self, a: u64, b: u64) {
        self.counters.readahead_dropped_count += self.streams.ahead.forget(a, b);
    }

    pub(super) fn timeout(&mut self, now: Instant) {
        let t = self.args.queue_timeout_ms;
        for id in self.streams.ids() {
            let s = self.streams.peek_mut(id).expect("listed");
            if s.queue_since.is_some_and(|since| since.add_ms(t) <= now) {
                s.queue.clear();
                s.queue_since = None;
                self.counters.queues_cancelled_timeout_count += 1;
            }
            // A commit window's batch is written, not dropped, when it waits too long.
            if s.batch_since.is_some_and(|since| since.add_ms(t) <= now) {
                self.flush_batch(now, id);
            }
        }
    }
}
