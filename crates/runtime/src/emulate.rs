//! Live emulation: make a fast device (SSD, tmpfs) answer as slowly as a
//! modelled hard disk would. Each lower request is charged on one simulated
//! arm (FIFO, queue depth 1, like the papers' disks without NCQ) and its
//! completion is held back until the model says it would have finished.
//!
//! `serve --record-disk FILE` writes every request the model served, as
//! `layoutd sim --record-disk` does ([`DiskRecord`], one format): a live
//! run and its replay then compare request by request (arrival, start,
//! completion, buffer hit, seek, rotation).

use crate::live::Delay;
use layoutd_core::{Op, Request, SECTOR_BYTES};
use layoutd_hdd::{Disk, DiskCompletion, DiskOp, DiskParams, DiskRequest, Scheduler};
use std::collections::HashMap;
use std::io::Write;
use std::sync::{Arc, Mutex};

/// Every request a disk model served, one line each: `arrival_ns start_ns
/// complete_ns op offset_bytes length_bytes cache_hit seek_ns rotation_ns
/// distance_cyl` (op `R`, `W` or `F`), in completion order, after a
/// header line. Written by the simulator (`layoutd sim --record-disk`, on
/// its virtual clock) and by the live emulator (`serve --record-disk`, on
/// the runtime's clock, where arrival is when the lower request reached
/// the emulated disk).
pub struct DiskRecord {
    out: Box<dyn Write + Send>,
    /// Submitted requests' (offset, length) by tag, until they complete.
    pending: HashMap<u64, (u64, u32)>,
    write_failed: bool,
}

impl DiskRecord {
    /// The header line, first in the file.
    pub const HEADER: &'static str =
        "# arrival_ns start_ns complete_ns op offset_bytes length_bytes cache_hit seek_ns rotation_ns distance_cyl";

    /// Writes to `out`, the header first.
    pub fn new(mut out: Box<dyn Write + Send>) -> DiskRecord {
        let write_failed = writeln!(out, "{}", Self::HEADER).is_err();
        DiskRecord { out, pending: HashMap::new(), write_failed }
    }

    /// The request `tag` of `length_bytes` at `offset_bytes` went to the disk.
    pub fn submitted(&mut self, tag: u64, offset_bytes: u64, length_bytes: u32) {
        self.pending.insert(tag, (offset_bytes, length_bytes));
    }

    /// The disk completed `d` (submitted before with its `id` as the tag).
    pub fn completed(&mut self, d: &DiskCompletion) {
        let (offset, length) = self.pending.remove(&d.id).unwrap_or((0, 0));
        let op = match d.op {
            DiskOp::Read => 'R',
            DiskOp::Write => 'W',
            DiskOp::Flush => 'F',
        };
        let written = writeln!(
            self.out,
            "{} {} {} {op} {offset} {length} {} {} {} {}",
            d.arrival_ns,
            d.start_ns,
            d.complete_ns,
            u8::from(d.cache_hit),
            d.seek_ns,
            d.rotation_ns,
            d.seek_distance_cyl
        );
        if written.is_err() && !self.write_failed {
            self.write_failed = true;
            eprintln!("layoutd: writing the disk record failed; further lines are lost");
        }
    }

    /// Flushes the file.
    pub fn flush(&mut self) {
        let _ = self.out.flush();
    }
}

impl Drop for DiskRecord {
    fn drop(&mut self) {
        self.flush();
    }
}

/// A [`DiskRecord`] several emulated disks write to.
pub type SharedDiskRecord = Arc<Mutex<DiskRecord>>;

/// The HDD model as a live delay source.
pub struct HddEmulator {
    state: Mutex<State>,
    /// Added to every lower offset: the stack's bottom device starts past
    /// the superblock, and the model must see true physical addresses.
    physical_offset_bytes: u64,
    /// Where requests are recorded, if anywhere: with this emulator's
    /// tag base (distinct per member) and the offset its requests' own
    /// offsets start at on the volume's bottom device.
    record: Option<(SharedDiskRecord, u64, u64)>,
}

struct State {
    disk: Disk,
    next_id: u64,
    /// Completion instants computed ahead of their owner asking.
    done_ns: HashMap<u64, u64>,
    /// The latest instant the model has been advanced to.
    model_now_ns: u64,
}

impl HddEmulator {
    /// An emulator for `params`; `physical_offset_bytes` is where the
    /// stack's bottom device starts on the disk.
    pub fn new(params: DiskParams, physical_offset_bytes: u64) -> HddEmulator {
        HddEmulator {
            state: Mutex::new(State {
                disk: Disk::new(params, Scheduler::Fifo, 1, 0),
                next_id: 0,
                done_ns: HashMap::new(),
                model_now_ns: 0,
            }),
            physical_offset_bytes,
            record: None,
        }
    }

    /// Records every request this emulator serves in `record`: tags
    /// `tag_base + n`, offsets plus `offset_bytes`.
    pub fn with_record(mut self, record: SharedDiskRecord, tag_base: u64, offset_bytes: u64) -> HddEmulator {
        self.record = Some((record, tag_base, offset_bytes));
        self
    }
}

impl Delay for HddEmulator {
    fn completion_ns(&self, now_ns: u64, req: &Request) -> u64 {
        let op = match req.op {
            Op::Read => DiskOp::Read,
            Op::Write | Op::WriteZeroes => DiskOp::Write,
            Op::Flush => DiskOp::Flush,
            Op::Trim => return now_ns, // a hard disk has nothing to do for a discard
        };
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let id = s.next_id;
        s.next_id += 1;
        // FIFO on one arm: an arrival stamped later than the real one cannot
        // start earlier than the arm is free, so clamping keeps time monotonic
        // without changing any start time.
        let at_ns = now_ns.max(s.model_now_ns);
        let lba = (self.physical_offset_bytes + req.offset_bytes) / SECTOR_BYTES;
        let sectors = (u64::from(req.length_bytes) / SECTOR_BYTES) as u32;
        s.disk.submit(at_ns, DiskRequest { id, op, lba, sectors });
        let mut record = self.record.as_ref().map(|(r, base, offset)| {
            let mut r = r.lock().unwrap_or_else(|p| p.into_inner());
            r.submitted(base + id, offset + req.offset_bytes, req.length_bytes);
            (r, *base)
        });
        loop {
            if let Some(t) = s.done_ns.remove(&id) {
                return t;
            }
            let t = s.disk.next_completion_ns().expect("the request just submitted is pending");
            let c = s.disk.complete(t).expect("a completion is due at its own instant");
            s.model_now_ns = s.model_now_ns.max(t);
            s.done_ns.insert(c.id, c.complete_ns);
            if let Some((r, base)) = record.as_mut() {
                r.completed(&DiskCompletion { id: *base + c.id, ..c });
            }
        }
    }

    fn flush(&self) {
        if let Some((r, _, _)) = &self.record {
            r.lock().unwrap_or_else(|p| p.into_inner()).flush();
        }
    }
}

/// One emulated disk per member device of a multi-device volume: each
/// member has its own arm, and a request spanning members completes when
/// its last piece does.
pub struct MemberEmulators {
    /// `(start, length)` of each member on the volume's bottom device, with its disk.
    members: Vec<(u64, u64, HddEmulator)>,
}

impl MemberEmulators {
    /// One `params` disk per extent; `physical_offset_bytes` is where each
    /// member's data area starts on its disk.
    pub fn new(params: &DiskParams, extents: &[(u64, u64)], physical_offset_bytes: u64) -> MemberEmulators {
        Self::recording(params, extents, physical_offset_bytes, None)
    }

    /// As [`MemberEmulators::new`], recording every member's requests in
    /// `record` (offsets on the volume's bottom device), if given.
    pub fn recording(
        params: &DiskParams,
        extents: &[(u64, u64)],
        physical_offset_bytes: u64,
        record: Option<SharedDiskRecord>,
    ) -> MemberEmulators {
        assert!(!extents.is_empty(), "at least one member");
        MemberEmulators {
            members: extents
                .iter()
                .enumerate()
                .map(|(i, &(start, len))| {
                    let e = HddEmulator::new(params.clone(), physical_offset_bytes);
                    let e = match &record {
                        Some(r) => e.with_record(r.clone(), (i as u64) << 48, start),
                        None => e,
                    };
                    (start, len, e)
                })
                .collect(),
        }
    }
}

impl Delay for MemberEmulators {
    fn completion_ns(&self, now_ns: u64, req: &Request) -> u64 {
        if req.op == Op::Flush {
            return self.members.iter().map(|(_, _, e)| e.completion_ns(now_ns, req)).max().unwrap_or(now_ns);
        }
        let (first, end) = (req.offset_bytes, req.end_bytes());
        let mut due_ns = now_ns;
        for (start, len, e) in &self.members {
            let (lo, hi) = (first.max(*start), end.min(start + len));
            if lo < hi {
                let mut piece = Request::new(req.id, req.op, lo - start, (hi - lo) as u32);
                piece.fua = req.fua;
                due_ns = due_ns.max(e.completion_ns(now_ns, &piece));
            }
        }
        due_ns
    }

    fn flush(&self) {
        for (_, _, e) in &self.members {
            e.flush();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use layoutd_core::ReqId;

    #[test]
    fn random_reads_cost_milliseconds_and_a_busy_arm_queues() {
        let e = HddEmulator::new(DiskParams::preset("wd800").unwrap(), 1 << 20);
        let a = Request::new(ReqId(0), Op::Read, 40 << 30, 4096);
        let b = Request::new(ReqId(1), Op::Read, 1 << 30, 4096);
        let ta = e.completion_ns(0, &a);
        assert!(ta > 1_000_000 && ta < 40_000_000, "a random read takes ms, got {ta} ns");
        let tb = e.completion_ns(0, &b);
        assert!(tb > ta, "the second request waits for the arm: {tb} <= {ta}");
        let trim = Request::new(ReqId(2), Op::Trim, 0, 4096);
        assert_eq!(e.completion_ns(tb, &trim), tb);
    }

    #[test]
    fn members_have_their_own_arms() {
        let params = DiskParams::preset("wd800").unwrap();
        let one = MemberEmulators::new(&params, &[(0, 80 << 30)], 1 << 20);
        let two = MemberEmulators::new(&params, &[(0, 40 << 30), (40 << 30, 40 << 30)], 1 << 20);
        let a = Request::new(ReqId(0), Op::Read, 20 << 30, 4096);
        let b = Request::new(ReqId(1), Op::Read, 60 << 30, 4096);
        let (one_a, one_b) = (one.completion_ns(0, &a), one.completion_ns(0, &b));
        let (two_a, two_b) = (two.completion_ns(0, &a), two.completion_ns(0, &b));
        assert!(one_b > one_a, "one arm: the second read queues behind the first");
        assert!(two_b < one_b, "two arms: the second read does not wait for the first ({two_b} vs {one_b})");
        assert!(two_a > 0);
    }
}
