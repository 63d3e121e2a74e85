//! Replay: walking the log from the checkpoint's tail, segment by segment
//! in sequence order, deciding for each header read whether it belongs to
//! the log (apply it) or marks its end (stop).
//!
//! A header is applied only if it carries the checkpoint's format id (any
//! other is a leftover of an earlier use of the device: format does not
//! overwrite the region), has the expected seq (the segment with
//! seq `s` lives at location `s mod segment_count`, so anything else there
//! is older or a leftover), its crc and payload crc hold (a header with
//! used slots and no payload crc is refused: only the timing-only simulator
//! writes those, and it never recovers), and its boot fits:
//!
//! - boots never decrease along the walk: a run starts writing where the
//!   previous recovery ended, so a segment of an older run met after one of
//!   a newer run is a leftover past an earlier crash's end;
//! - before `resume_seq` a boot older than the checkpoint's; from it on the
//!   checkpoint's boot or a newer one. Newer happens when the checkpoint
//!   read is the older copy because the newest one is unreadable: the runs
//!   after it wrote segments the older copy does not know of, and they are
//!   part of the log.
//!
//! The walk stops at the first header that fails, so what is replayed is
//! always a contiguous run of seqs starting at the tail: a prefix of the
//! order segments were written in. Whether the part cut off held flushed
//! data is for the caller to judge (see [`super::FlushMark`]).

use super::{Checkpoint, Geometry, HeaderError, SegLoc, SegmentHeader, Seq};

/// Why the walk ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StopReason {
    /// The header did not decode (never written, torn, corrupt).
    Header(HeaderError),
    /// A valid header with another seq: the slot still holds an older segment.
    Seq(Seq),
    /// A segment of the right seq from another run (a leftover of a crash).
    Boot(u64),
    /// A segment of another format (its id): left by an earlier use of the
    /// device.
    Format(u64),
    /// The slots do not match the header's payload crc: a torn write.
    Payload,
    /// Every location has been walked.
    Full,
    /// A chained header (or the checkpoint) named no successor.
    End,
}

impl std::fmt::Display for StopReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StopReason::Header(e) => write!(f, "segment header: {e}"),
            StopReason::Seq(s) => write!(f, "the location holds seq {} instead", s.0),
            StopReason::Boot(b) => write!(f, "a segment of run {b}, a leftover of an earlier crash"),
            StopReason::Format(id) => {
                write!(f, "a segment of another format (id {id:#x}), left by an earlier use of the device")
            }
            StopReason::Payload => write!(f, "the slots do not match the header's payload crc32c"),
            StopReason::Full => write!(f, "every location was replayed"),
            StopReason::End => write!(f, "the last segment named no successor"),
        }
    }
}

/// What to do with one header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReplayStep {
    /// Part of the log: apply it and read the next one.
    Apply(SegmentHeader),
    /// The end of the log.
    Stop(StopReason),
}

/// The walk's state: where it is and what it expects.
pub struct ReplayWalk {
    checkpoint: Checkpoint,
    segment_count: u64,
    slot_bytes: usize,
    next: Seq,
    last_boot: u64,
    boot_max: u64,
    stopped: Option<StopReason>,
}

impl ReplayWalk {
    /// Starts at the checkpoint's tail.
    pub fn new(checkpoint: Checkpoint, geo: &Geometry) -> ReplayWalk {
        assert!(geo.segment_count >= 2);
        let next = checkpoint.replay_from_seq;
        ReplayWalk {
            last_boot: 0,
            boot_max: checkpoint.boot,
            checkpoint,
            segment_count: u64::from(geo.segment_count),
            slot_bytes: geo.slot_bytes as usize,
            next,
            stopped: None,
        }
    }

    /// The seq the next header must have.
    pub fn next_seq(&self) -> Seq {
        self.next
    }

    /// Where to read next, or `None` once the walk has stopped.
    pub fn next_location(&self, geo: &Geometry) -> Option<SegLoc> {
        if self.stopped.is_some() {
            return None;
        }
        Some(geo.location(self.next))
    }

    /// The largest boot counter met (the checkpoint's included).
    pub fn boot_max(&self) -> u64 {
        self.boot_max
    }

    /// Why the walk stopped, once it has.
    pub fn stopped(&self) -> Option<&StopReason> {
        self.stopped.as_ref()
    }

    /// Judges the header read at `next_location`, with the slots that
    /// follow it when the caller read them (`payload` covers at least the
    /// used slots).
    pub fn offer(
        &mut self,
        header: Result<SegmentHeader, HeaderError>,
        payload: Option<&[u8]>,
    ) -> ReplayStep {
        assert!(self.stopped.is_none(), "offer after the walk stopped");
        let step = self.judge(header, payload);
        match &step {
            ReplayStep::Apply(h) => {
                assert_eq!(h.seq, self.next);
                self.next = Seq(self.next.0 + 1);
                self.last_boot = h.boot;
                self.boot_max = self.boot_max.max(h.boot);
            }
            ReplayStep::Stop(r) => self.stopped = Some(r.clone()),
        }
        step
    }

    fn judge(&self, header: Result<SegmentHeader, HeaderError>, payload: Option<&[u8]>) -> ReplayStep {
        if self.next.0 - self.checkpoint.replay_from_seq.0 >= self.segment_count {
            return ReplayStep::Stop(StopReason::Full);
        }
        let h = match header {
            Ok(h) => h,
            Err(e) => return ReplayStep::Stop(StopReason::Header(e)),
        };
        if h.format_id != self.checkpoint.format_id {
            return ReplayStep::Stop(StopReason::Format(h.format_id));
        }
        if h.seq != self.next {
            return ReplayStep::Stop(StopReason::Seq(h.seq));
        }
        let boot_ok = if h.seq >= self.checkpoint.resume_seq {
            h.boot >= self.checkpoint.boot
        } else {
            h.boot < self.checkpoint.boot
        };
        if !boot_ok || h.boot < self.last_boot {
            return ReplayStep::Stop(StopReason::Boot(h.boot));
        }
        if !payload_holds(&h, payload, self.slot_bytes) {
            return ReplayStep::Stop(StopReason::Payload);
        }
        ReplayStep::Apply(h)
    }
}

/// Whether the slots a header covers match its payload crc (a header
/// without slots needs none; used slots without a crc are never trusted).
fn payload_holds(h: &SegmentHeader, payload: Option<&[u8]>, slot_bytes: usize) -> bool {
    if h.slots_used == 0 {
        return true;
    }
    match (h.payload_crc, payload) {
        (Some(crc), Some(p)) => h.covered_crc(p, slot_bytes) == Some(crc),
        _ => false,
    }
}

/// The summaries of one pass of a chained segment, read whole (`seg`: the
/// header area, then the slots), in the order they were written: the
/// header, then each summary the one before names with its continue link
/// (partial segments, see [`super::header`]). A summary of another format
/// than `format_id` ends the walk (a slot named by a continue link whose
/// part never reached the disk may hold one: format does not overwrite
/// the region). Each is offered to `judge`
/// with the slots (`seg` after the header area), which accepts it or says
/// why it does not belong. The walk ends at a summary without a continue
/// link (the segment's last), or at the first refused, undecodable or out
/// of order one (a continue link must name a later slot than the summary
/// holding it, so a walk never loops): then with the reason and the slot
/// it was in (`None`: the header area).
pub fn segment_summaries(
    seg: &[u8],
    geo: &Geometry,
    format_id: u64,
    mut judge: impl FnMut(SegmentHeader, &[u8]) -> Result<SegmentHeader, StopReason>,
) -> (Vec<SegmentHeader>, Option<(StopReason, Option<u16>)>) {
    let hb = geo.header_bytes as usize;
    let sb = geo.slot_bytes as usize;
    let payload = &seg[hb..];
    let mut out: Vec<SegmentHeader> = Vec::new();
    let mut at: Option<u16> = None;
    loop {
        let decoded = match at {
            None => SegmentHeader::decode(&seg[..hb], geo),
            Some(s) => SegmentHeader::decode_slot(&payload[s as usize * sb..(s as usize + 1) * sb], geo),
        };
        let judged = decoded.map_err(StopReason::Header).and_then(|h| match h {
            h if h.format_id != format_id => Err(StopReason::Format(h.format_id)),
            h => judge(h, payload),
        });
        let h = match judged {
            Ok(h) => h,
            Err(r) => return (out, Some((r, at))),
        };
        let next = h.continue_slot();
        out.push(h);
        match next {
            None => return (out, None),
            Some(n) if at.is_some_and(|a| n <= a) => {
                let why = format!("continue link to slot {n}, not after its own");
                return (out, Some((StopReason::Header(HeaderError::Malformed(why)), Some(n))));
            }
            Some(n) => at = Some(n),
        }
    }
}

/// Replay of a chained log (the `log` target): from the checkpoint's
/// `(next_loc, next_seq)`, each segment's last summary names the location
/// of the next (see [`super::ChainCheckpoint`]). A summary is applied only
/// if it carries the checkpoint's format id, has the segment's seq, the checkpoint's boot (the run that wrote
/// the checkpoint wrote everything after it; a recovery writes a checkpoint
/// with a new boot before writing anything) and a matching payload crc.
/// Within a segment the summaries of its parts are walked in order
/// ([`segment_summaries`]). The walk stops at the first that fails, or at
/// a segment naming no successor: what is replayed is a prefix of the
/// write order.
pub struct ChainWalk {
    boot: u64,
    format_id: u64,
    next: Option<(SegLoc, Seq)>,
    slot_bytes: usize,
    applied_count: u64,
    segment_count: u64,
    stopped: Option<StopReason>,
    stopped_in_slot: Option<u16>,
}

impl ChainWalk {
    /// Starts where the checkpoint says.
    pub fn new(ck: &super::ChainCheckpoint, geo: &Geometry) -> ChainWalk {
        let next = ck.next_loc.map(|l| (l, ck.next_seq));
        ChainWalk {
            boot: ck.boot,
            format_id: ck.format_id,
            next,
            slot_bytes: geo.slot_bytes as usize,
            applied_count: 0,
            segment_count: u64::from(geo.segment_count),
            stopped: if next.is_none() { Some(StopReason::End) } else { None },
            stopped_in_slot: None,
        }
    }

    /// Where to read next and the seq expected there, or `None` once stopped.
    pub fn next(&self) -> Option<(SegLoc, Seq)> {
        if self.stopped.is_some() {
            return None;
        }
        self.next
    }

    /// Why the walk stopped, once it has.
    pub fn stopped(&self) -> Option<&StopReason> {
        self.stopped.as_ref()
    }

    /// The slot whose summary stopped the walk, if it was a later part's
    /// (`None`: the header area, or not stopped by a summary).
    pub fn stopped_in_slot(&self) -> Option<u16> {
        self.stopped_in_slot
    }

    /// Segments of which at least the first summary was applied.
    pub fn applied_count(&self) -> u64 {
        self.applied_count
    }

    /// Judges the segment read whole at `next()`; returns the summaries to
    /// apply, in order (a prefix of its parts).
    pub fn offer_segment(&mut self, seg: &[u8], geo: &Geometry) -> Vec<SegmentHeader> {
        let (_, seq) = self.next().expect("offer while the walk is running");
        let (boot, slot_bytes) = (self.boot, self.slot_bytes);
        let judge = |h: SegmentHeader, payload: &[u8]| match h {
            h if h.seq != seq => Err(StopReason::Seq(h.seq)),
            h if h.boot != boot => Err(StopReason::Boot(h.boot)),
            h if !h.is_chained() => Err(StopReason::Header(HeaderError::Malformed(
                "a ring header where a chained one belongs".into(),
            ))),
            h if !payload_holds(&h, Some(payload), slot_bytes) => Err(StopReason::Payload),
            h => Ok(h),
        };
        let (applied, stop) = segment_summaries(seg, geo, self.format_id, judge);
        if !applied.is_empty() {
            // Seqs only grow and each location holds one pass, so a chain
            // longer than the log would have to revisit one.
            self.applied_count += 1;
            assert!(self.applied_count <= self.segment_count, "a chain longer than the log");
        }
        match stop {
            Some((r, slot)) => {
                self.stopped = Some(r);
                self.stopped_in_slot = slot;
            }
            None => {
                let last = applied.last().expect("a walk that did not stop applied a summary");
                self.next = last.next_location().map(|l| (l, Seq(seq.0 + 1)));
                if self.next.is_none() {
                    self.stopped = Some(StopReason::End);
                }
            }
        }
        applied
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::seglog::Entry;

    /// The format id of the logs these tests walk.
    const ID: u64 = 0x5eed;

    fn header(seq: u64, boot: u64, payload: &[u8]) -> SegmentHeader {
        SegmentHeader {
            seq: Seq(seq),
            boot,
            format_id: ID,
            slots_used: 1,
            payload_crc: Some(SegmentHeader::payload_crc_of(payload)),
            entries: vec![Entry::Slot { start_sector: seq, sector_count: 1, slot: 0 }],
        }
    }

    /// A walk from a boot-3 checkpoint with this tail and resume point.
    fn walk(replay_from: u64, resume: u64, geo: &Geometry) -> ReplayWalk {
        let ck = Checkpoint {
            generation: 1,
            boot: 3,
            replay_from_seq: Seq(replay_from),
            resume_seq: Seq(resume),
            durable_upto: Seq(0),
            format_id: ID,
        };
        ReplayWalk::new(ck, geo)
    }

    #[test]
    fn the_walk_applies_a_contiguous_run_and_stops_at_leftovers() {
        let geo = Geometry::new(0, 1 << 20, 512, 4).expect("valid");
        let mut w = walk(10, 12, &geo);
        let p = vec![7u8; 512];
        assert!(matches!(w.offer(Ok(header(10, 1, &p)), Some(&p)), ReplayStep::Apply(_)));
        assert!(matches!(w.offer(Ok(header(11, 2, &p)), Some(&p)), ReplayStep::Apply(_)));
        // seq 12 onwards was written by boot 3: a boot-2 header there is a leftover.
        assert_eq!(w.offer(Ok(header(12, 2, &p)), Some(&p)), ReplayStep::Stop(StopReason::Boot(2)));
        assert_eq!(w.next_seq(), Seq(12));
        // A newer run's segments (its checkpoint copy unreadable) belong to
        // the log; an older run's segment after them is a leftover.
        let mut w = walk(4, 5, &geo);
        assert!(matches!(w.offer(Ok(header(4, 2, &p)), Some(&p)), ReplayStep::Apply(_)));
        assert!(matches!(w.offer(Ok(header(5, 3, &p)), Some(&p)), ReplayStep::Apply(_)));
        assert!(matches!(w.offer(Ok(header(6, 4, &p)), Some(&p)), ReplayStep::Apply(_)));
        assert_eq!(w.boot_max(), 4);
        assert_eq!(w.offer(Ok(header(7, 3, &p)), Some(&p)), ReplayStep::Stop(StopReason::Boot(3)));
        // Used slots without a payload crc are never trusted.
        let mut w = walk(4, 4, &geo);
        let mut no_crc = header(4, 3, &p);
        no_crc.payload_crc = None;
        assert_eq!(w.offer(Ok(no_crc), Some(&p)), ReplayStep::Stop(StopReason::Payload));
        let mut w = walk(4, 4, &geo);
        assert_eq!(w.offer(Ok(header(3, 3, &p)), Some(&p)), ReplayStep::Stop(StopReason::Seq(Seq(3))));
        let mut w = walk(4, 4, &geo);
        let torn = vec![8u8; 512];
        assert_eq!(w.offer(Ok(header(4, 3, &p)), Some(&torn)), ReplayStep::Stop(StopReason::Payload));
        assert_eq!(w.next_location(&geo), None);
    }

    /// A segment written in three parts: the header (slot 0, continue to
    /// slot 1), a summary in slot 1 (slot 2, continue to slot 3), the last
    /// in slot 3 (slot 4, next segment 1); `geo` has 8 slots of 512 bytes.
    fn three_parts(geo: &Geometry, seq: u64, boot: u64) -> Vec<u8> {
        let (hb, sb) = (geo.header_bytes as usize, geo.slot_bytes as usize);
        let mut seg = vec![0u8; hb + 8 * sb];
        let parts: [(Option<u16>, u16, Entry); 3] = [
            (None, 0, Entry::Continue { slot: 1 }),
            (Some(1), 2, Entry::Continue { slot: 3 }),
            (Some(3), 4, Entry::Next { loc: Some(SegLoc(1)) }),
        ];
        for (at, data, link) in parts {
            let d = hb + data as usize * sb;
            seg[d..d + sb].fill(data as u8 + 1);
            let h = SegmentHeader {
                seq: Seq(seq),
                boot,
                format_id: ID,
                slots_used: 1,
                payload_crc: Some(SegmentHeader::payload_crc_of(&seg[d..d + sb])),
                entries: vec![
                    Entry::Slot { start_sector: u64::from(data), sector_count: 1, slot: data },
                    link,
                ],
            };
            match at {
                None => seg[..hb].copy_from_slice(&h.encode(geo)),
                Some(s) => {
                    let o = hb + s as usize * sb;
                    seg[o..o + sb].copy_from_slice(&h.encode_slot(geo));
                }
            }
        }
        seg
    }

    #[test]
    fn the_chain_walk_follows_a_segments_parts_and_stops_at_the_first_torn_one() {
        let geo = Geometry::new(0, 1 << 20, 512, 8).expect("valid");
        let ck = crate::seglog::ChainCheckpoint {
            generation: 1,
            boot: 2,
            next_seq: Seq(5),
            next_loc: Some(SegLoc(0)),
            format_id: ID,
            legacy_map: false,
            map_pages_written: 0,
            map_digest: Some(crate::seglog::MapDigest::default()),
            map_sketch: Some(crate::seglog::MapSketch::default()),
        };
        let slots_of = |hs: &[SegmentHeader]| -> Vec<u16> {
            hs.iter()
                .flat_map(|h| h.entries.iter())
                .filter_map(|e| if let Entry::Slot { slot, .. } = *e { Some(slot) } else { None })
                .collect()
        };
        let mut w = ChainWalk::new(&ck, &geo);
        let applied = w.offer_segment(&three_parts(&geo, 5, 2), &geo);
        assert_eq!(slots_of(&applied), vec![0, 2, 4]);
        assert_eq!(w.next(), Some((SegLoc(1), Seq(6))));
        // A torn summary in the middle (slot 1): the first part only, the
        // walk stops there (the segment counts as replayed).
        let hb = geo.header_bytes as usize;
        for (damage, why) in [(hb + 512 + 40, "summary"), (hb + 2 * 512 + 7, "payload")] {
            let mut seg = three_parts(&geo, 5, 2);
            seg[damage] ^= 1;
            let mut w = ChainWalk::new(&ck, &geo);
            assert_eq!(slots_of(&w.offer_segment(&seg, &geo)), vec![0], "{why}");
            assert_eq!(w.next(), None);
            assert_eq!(w.applied_count(), 1);
            assert_eq!(w.stopped_in_slot(), Some(1), "{why}");
            let want =
                if why == "payload" { StopReason::Payload } else { StopReason::Header(HeaderError::BadCrc) };
            assert_eq!(w.stopped(), Some(&want));
        }
        // A part of another seq (a leftover of an earlier pass) in the
        // named slot ends the walk too.
        let mut seg = three_parts(&geo, 5, 2);
        let old = three_parts(&geo, 4, 2);
        seg[hb + 3 * 512..hb + 4 * 512].copy_from_slice(&old[hb + 3 * 512..hb + 4 * 512]);
        let mut w = ChainWalk::new(&ck, &geo);
        assert_eq!(slots_of(&w.offer_segment(&seg, &geo)), vec![0, 2]);
        assert_eq!(w.stopped(), Some(&StopReason::Seq(Seq(4))));
        // A continue link back to an earlier slot is refused (no loop).
        let h = SegmentHeader {
            seq: Seq(5),
            boot: 2,
            format_id: ID,
            slots_used: 0,
            payload_crc: None,
            entries: vec![Entry::Continue { slot: 1 }],
        };
        let mut seg = three_parts(&geo, 5, 2);
        seg[hb + 3 * 512..hb + 4 * 512].copy_from_slice(&h.encode_slot(&geo));
        let (got, stop) = segment_summaries(&seg, &geo, ID, |h, _| Ok(h));
        assert_eq!(got.len(), 3);
        assert!(matches!(stop, Some((StopReason::Header(HeaderError::Malformed(_)), Some(1)))), "{stop:?}");
    }
}
