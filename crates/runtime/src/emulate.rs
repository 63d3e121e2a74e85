//! Live emulation: make a fast device (SSD, tmpfs) answer as slowly as a
//! modelled hard disk would. Each lower request is charged on one simulated
//! arm (FIFO, queue depth 1, like the papers' disks without NCQ) and its
//! completion is held back until the model says it would have finished.

use crate::live::Delay;
use layoutd_core::{Op, Request, SECTOR_BYTES};
use layoutd_hdd::{Disk, DiskOp, DiskParams, DiskRequest, Scheduler};
use std::collections::HashMap;
use std::sync::Mutex;

/// The HDD model as a live delay source.
pub struct HddEmulator {
    state: Mutex<State>,
    /// Added to every lower offset: the stack's bottom device starts past
    /// the superblock, and the model must see true physical addresses.
    physical_offset_bytes: u64,
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
        }
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
        loop {
            if let Some(t) = s.done_ns.remove(&id) {
                return t;
            }
            let t = s.disk.next_completion_ns().expect("the request just submitted is pending");
            let c = s.disk.complete(t).expect("a completion is due at its own instant");
            s.model_now_ns = s.model_now_ns.max(t);
            s.done_ns.insert(c.id, c.complete_ns);
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
        assert!(!extents.is_empty(), "at least one member");
        MemberEmulators {
            members: extents
                .iter()
                .map(|&(start, len)| (start, len, HddEmulator::new(params.clone(), physical_offset_bytes)))
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
