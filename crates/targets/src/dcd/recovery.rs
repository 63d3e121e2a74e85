//! Bringing the log up: formatting a new one, or recovering an existing
//! one by replaying segment headers from the checkpoint's tail, in seq
//! order, until the first header that is missing, torn, stale or from
//! another run (see [`crate::seglog::replay`]). Each phase is its own type.
//!
//! Format: both checkpoint copies (boot 1, tail 0, the format's id) and
//! both flush marks are written, then a flush. Nothing else: segments an
//! earlier use of the device left carry another format id and are never
//! replayed (seglog), so the region is not touched (before format
//! identities every segment header's first sector was zeroed: a write per
//! segment).
//!
//! Recovery, clean or not, reads only the live part of the ring: the
//! checkpoint, then the segments from the tail on; a clean open finds no
//! torn segment at the end, an unclean one may. Before serving, a new
//! checkpoint with the next boot and `resume_seq` = the replay end is
//! written with FUA, so leftovers past the end are never replayed later,
//! and a new flush mark saying the log is durable up to the replay end.
//! For a log of the version before format identities, once both are
//! durable, the copy recovered from is written again in this build's
//! version (`seglog::copy_version`), and then the log serves.
//!
//! Torn tail or damage: the walk stops at the first segment that does not
//! belong to the log. If the flush mark says the log was durable past that
//! point, a client was told those segments were safe: that is damage, not a
//! torn write, and the open is refused naming the segment, its offset and
//! why, unless the opener accepts the loss (`--accept-loss`), which is then
//! counted (`lost_segments_count`) and reported in the status.
//!
//! Boot counter: the new run's boot exceeds every boot that can be on
//! disk. With both checkpoint copies readable that is the newest copy's
//! boot; with one unreadable (torn or damaged), the unreadable one may
//! belong to a run one newer, whose segments the walk may not reach (a torn
//! first segment), so the new boot skips one.

use super::{Dcd, LowerOp, Phase, SegMeta, SegState, SlotMeta};
use crate::seglog::{
    Checkpoint, Entry, FlushMark, ReplayStep, ReplayWalk, SegLoc, SegmentHeader, Seq, StopReason,
    CHECKPOINT_AREA_BYTES,
};
use bytes::Bytes;
use layoutd_core::{Completion, Instant, Op, ReqId, Request, SECTOR_BYTES};

/// Formatting: the format's id, then the writes in flight before the
/// final flush.
pub(super) struct Formatting {
    format_id: u64,
    writes_left: u32,
    flushing: bool,
}

impl Formatting {
    pub(super) fn new(format_id: u64) -> Formatting {
        assert_ne!(format_id, crate::seglog::LEGACY_FORMAT_ID, "a new format has an identity");
        Formatting { format_id, writes_left: 0, flushing: false }
    }
}

/// Recovering: which read is outstanding.
pub(super) struct Recovering {
    clean: bool,
    accept_loss: bool,
    walk: Option<ReplayWalk>,
    checkpoint: Option<Checkpoint>,
    /// The checkpoint read is of the version before format identities:
    /// its copy is written again in this build's version once the new
    /// checkpoint and mark are durable.
    legacy: bool,
    /// One checkpoint copy did not decode.
    copy_unreadable: bool,
    mark: Option<FlushMark>,
    /// Writes before serving still in flight (new checkpoint and mark,
    /// then the legacy rewrite).
    finishing: Option<u32>,
}

impl Recovering {
    pub(super) fn new(clean: bool, accept_loss: bool) -> Recovering {
        Recovering {
            clean,
            accept_loss,
            walk: None,
            checkpoint: None,
            legacy: false,
            copy_unreadable: false,
            mark: None,
            finishing: None,
        }
    }
}

impl Dcd {
    pub(super) fn start_bringup(&mut self) {
        match &self.phase {
            Phase::Format(_) => self.format_start(),
            Phase::Recover(_) => {
                let req = Request::new(
                    ReqId(0),
                    Op::Read,
                    self.geo.region_offset_bytes,
                    CHECKPOINT_AREA_BYTES as u32,
                );
                self.emit(LowerOp::Bringup, req);
            }
            Phase::Serving | Phase::Failed(_) => panic!("bring-up runs once"),
        }
    }

    fn format_start(&mut self) {
        let Phase::Format(f) = &self.phase else { unreachable!() };
        let format_id = f.format_id;
        self.log.ring =
            super::Ring { boot: 1, format_id, ..super::Ring::new(self.geo.segment_count, Seq(0), Seq(0)) };
        let ck = |generation| Checkpoint {
            generation,
            boot: 1,
            replay_from_seq: Seq(0),
            resume_seq: Seq(0),
            durable_upto: Seq(0),
            format_id,
        };
        let mark = |generation| FlushMark { generation, boot: 1, durable_upto: Seq(0) };
        for generation in [0u64, 1] {
            let bytes = ck(generation).encode(&self.geo);
            let offset = self.geo.checkpoint_offset_bytes(generation);
            self.emit(LowerOp::Bringup, Request::write(ReqId(0), offset, Bytes::from(bytes)));
            let bytes = mark(generation).encode(&self.geo);
            let offset = self.geo.mark_offset_bytes(generation);
            self.emit(LowerOp::Bringup, Request::write(ReqId(0), offset, Bytes::from(bytes)));
        }
        self.log.ring.generation = 1;
        self.log.ring.mark_generation = 1;
        let Phase::Format(f) = &mut self.phase else { unreachable!() };
        f.writes_left = 4;
    }

    /// A bring-up request completed.
    pub(super) fn bringup_done(&mut self, now: Instant, c: Completion) {
        if let Err(e) = c.result {
            self.phase = Phase::Failed(format!(
                "dcd log at offset {}: bring-up I/O failed: {e}",
                self.geo.region_offset_bytes
            ));
            return;
        }
        match std::mem::replace(&mut self.phase, Phase::Serving) {
            Phase::Format(f) => self.format_step(f),
            Phase::Recover(r) => self.recover_step(r, c.data),
            other => panic!(
                "bring-up completion while {}",
                if matches!(other, Phase::Serving) { "serving" } else { "failed" }
            ),
        }
        let _ = now;
    }

    fn format_step(&mut self, mut f: Formatting) {
        if f.flushing {
            assert_eq!(f.writes_left, 0);
            self.phase = Phase::Serving;
            return;
        }
        assert!(f.writes_left > 0);
        f.writes_left -= 1;
        if f.writes_left == 0 {
            f.flushing = true;
            self.emit(LowerOp::Bringup, Request::new(ReqId(0), Op::Flush, 0, 0));
        }
        self.phase = Phase::Format(f);
    }

    fn recover_step(&mut self, mut r: Recovering, data: Option<Bytes>) {
        if let Some(left) = r.finishing {
            assert!(left > 0);
            if left > 1 {
                r.finishing = Some(left - 1);
                self.phase = Phase::Recover(r);
            } else if std::mem::take(&mut r.legacy) {
                // The copy recovered from, in this build's version (see
                // `seglog::copy_version`), only now that the new checkpoint
                // (the other copy) is durable: a crash that tears this
                // write leaves that one, never the copy before, whose
                // replay range may have been reused. Serving waits for it,
                // so no copy of the old version is left once this build
                // writes anything of its own.
                let ck = r.checkpoint.as_ref().expect("read before the walk");
                let req = Request::write(
                    ReqId(0),
                    self.geo.checkpoint_offset_bytes(ck.generation),
                    Bytes::from(ck.encode(&self.geo)),
                );
                self.emit(LowerOp::Bringup, Request { fua: true, ..req });
                r.finishing = Some(1);
                self.phase = Phase::Recover(r);
            } else {
                self.phase = Phase::Serving;
            }
            return;
        }
        let Some(data) = data else {
            self.phase = Phase::Failed(
                "dcd recovery needs the log's bytes; the runtime runs in timing-only mode".into(),
            );
            return;
        };
        let Some(walk) = r.walk.as_mut() else {
            match Checkpoint::pick(&data, &self.geo) {
                Ok((ck, copy_unreadable)) => {
                    r.walk = Some(ReplayWalk::new(ck.clone(), &self.geo));
                    r.legacy = crate::seglog::copy_version(&data, ck.generation)
                        != crate::seglog::CHECKPOINT_VERSION;
                    r.checkpoint = Some(ck);
                    r.copy_unreadable = copy_unreadable;
                    r.mark = FlushMark::pick(&data, &self.geo);
                    return self.recover_read_next(r);
                }
                Err(e) => {
                    let at = self.geo.region_offset_bytes;
                    self.phase = Phase::Failed(format!(
                        "dcd log at lower offset {at}: {e}; format the device or fix log_offset"
                    ));
                    return;
                }
            }
        };
        let hb = self.geo.header_bytes as usize;
        let header = SegmentHeader::decode(&data[..hb], &self.geo);
        let loc = self.geo.location(walk.next_seq());
        match walk.offer(header, Some(&data[hb..])) {
            ReplayStep::Apply(h) => match self.apply_replayed(loc, &h) {
                Ok(()) => self.recover_read_next(r),
                Err(e) => {
                    self.phase = Phase::Failed(format!("dcd log segment {} (seq {}): {e}", loc.0, h.seq.0))
                }
            },
            ReplayStep::Stop(_) => self.recover_finish(r),
        }
    }

    fn recover_read_next(&mut self, r: Recovering) {
        let walk = r.walk.as_ref().expect("walking");
        let loc = walk.next_location(&self.geo).expect("walk not stopped");
        let offset = self.geo.segment_offset_bytes(loc);
        let req = Request::new(ReqId(0), Op::Read, offset, self.geo.stride_bytes() as u32);
        self.emit(LowerOp::Bringup, req);
        self.phase = Phase::Recover(r);
    }

    /// The walk ended: judge where (torn tail or damage), persist a
    /// checkpoint for the new boot and a flush mark, then serve.
    fn recover_finish(&mut self, mut r: Recovering) {
        let ck = r.checkpoint.clone().expect("read before the walk");
        let walk = r.walk.as_ref().expect("walked");
        let end = walk.next_seq();
        assert!(end >= ck.replay_from_seq);
        assert!(end.0 - ck.replay_from_seq.0 <= u64::from(self.geo.segment_count));
        // What clients were told (the flush mark) and what a tail advance
        // relied on (the checkpoint) must both be reached.
        let flushed_upto = r.mark.as_ref().map_or(Seq(0), |m| m.durable_upto).max(ck.durable_upto);
        if flushed_upto > end {
            let stop = walk.stopped().cloned().unwrap_or(StopReason::Full);
            let loc = self.geo.location(end);
            let lost = flushed_upto.0 - end.0;
            let why = format!(
                "dcd log damaged: segment {} (seq {}) at lower offset {}: {stop}; the log's flush mark and \
                 checkpoint say it was durable up to seq {}, so {lost} flushed segment(s) from here on \
                 cannot be recovered",
                loc.0,
                end.0,
                self.geo.segment_offset_bytes(loc),
                flushed_upto.0
            );
            if !r.accept_loss {
                self.phase = Phase::Failed(format!(
                    "{why}; refusing to open (nothing was written). To serve it anyway and lose them, \
                     copy the device first, then use `layoutd serve --accept-loss`"
                ));
                return;
            }
            self.counters.lost_segments_count = lost;
            self.loss = Some(why);
        }
        let boot_step = if r.copy_unreadable { 2 } else { 1 };
        let boot = (ck.boot + boot_step).max(walk.boot_max() + 1);
        let mark_generation = r.mark.as_ref().map_or(0, |m| m.generation);
        self.log.ring = super::Ring {
            boot,
            format_id: ck.format_id,
            generation: ck.generation,
            mark_generation,
            ..super::Ring::new(self.geo.segment_count, ck.replay_from_seq, end)
        };
        let _ = r.clean;
        r.finishing = Some(2);
        self.phase = Phase::Recover(r);
        self.write_checkpoint(LowerOp::Bringup, ck.replay_from_seq, true);
        self.write_mark(LowerOp::Bringup, end);
    }

    /// Rebuilds the in-memory header and the lookup table from one replayed
    /// segment, applying its entries in order.
    fn apply_replayed(&mut self, loc: SegLoc, h: &SegmentHeader) -> Result<(), String> {
        let sectors_total = self.args.data_length_bytes / SECTOR_BYTES;
        let empty = SlotMeta { start_sector: 0, sector_count: 0, valid_mask: 0 };
        let mut seg = SegMeta {
            seq: h.seq,
            state: SegState::Dirty,
            slots: vec![empty; h.slots_used as usize],
            entries: h.entries.clone(),
            written: true,
            has_data: h.payload_crc.is_some(),
            ..SegMeta::free()
        };
        for e in &h.entries {
            let (start, count) = match *e {
                Entry::Slot { start_sector, sector_count, .. }
                | Entry::Invalidate { start_sector, sector_count } => (start_sector, u64::from(sector_count)),
                Entry::Next { .. } | Entry::Continue { .. } => {
                    return Err("a chain link in a ring log's header".into())
                }
            };
            if start + count > sectors_total {
                return Err(format!("entry {e:?} lies past the data region ({sectors_total} sectors)"));
            }
            if let Entry::Slot { slot, .. } = *e {
                if seg.slots[slot as usize].sector_count != 0 {
                    return Err(format!("slot {slot} appears twice"));
                }
                let mask = if count == 64 { u64::MAX } else { (1u64 << count) - 1 };
                seg.slots[slot as usize] =
                    SlotMeta { start_sector: start, sector_count: count as u32, valid_mask: mask };
                seg.valid_sectors += count as u32;
            } else {
                seg.has_invalidations = true;
            }
        }
        assert_eq!(self.log.segs[loc.0 as usize].state, SegState::Free, "each location is replayed once");
        self.log.segs[loc.0 as usize] = seg;
        for e in &h.entries {
            self.replay_entry(loc, h.seq, *e);
        }
        self.counters.recovered_segments_count += 1;
        Ok(())
    }

    fn replay_entry(&mut self, loc: SegLoc, seq: Seq, e: Entry) {
        match e {
            Entry::Slot { start_sector, sector_count, slot } => {
                self.map_slot(loc, slot, start_sector, sector_count, seq);
            }
            Entry::Invalidate { start_sector, sector_count } => {
                for (_, old) in self.lookup.remove_range(start_sector, u64::from(sector_count), |_| false) {
                    self.invalidate(old, Some(seq));
                }
                self.lookup.clear_visible(start_sector, u64::from(sector_count));
            }
            Entry::Next { .. } | Entry::Continue { .. } => unreachable!("refused by apply_replayed"),
        }
    }
}
