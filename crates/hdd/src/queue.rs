//! The request queue and the scheduling policies that pick from it.
//!
//! Requests wait in arrival order. A scheduler sees only the first
//! `queue_depth` that had arrived by the time the disk picks (the drive's
//! tagged queue); later ones wait in order behind them, as in a host queue.

use crate::geometry::{map, Pbn};
use crate::params::DiskParams;
use crate::{DiskOp, DiskRequest};
use std::collections::VecDeque;

/// How the disk picks the next request from its queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum Scheduler {
    /// First come, first served.
    Fifo,
    /// Circular LOOK: the nearest request at or beyond the arm's cylinder in
    /// ascending order, wrapping to the lowest cylinder.
    Clook,
    /// Shortest positioning time first: least seek plus rotation from now.
    Sptf,
}

impl Scheduler {
    /// Parse `fifo`, `clook` or `sptf`.
    pub fn from_name(name: &str) -> Option<Scheduler> {
        match name.to_ascii_lowercase().as_str() {
            "fifo" => Some(Scheduler::Fifo),
            "clook" | "c-look" => Some(Scheduler::Clook),
            "sptf" => Some(Scheduler::Sptf),
            _ => None,
        }
    }
}

/// A queued request among the first `depth`, with what scheduling needs.
#[derive(Clone, Copy, Debug)]
pub struct Pending {
    /// The request, clamped to the disk.
    pub request: DiskRequest,
    /// Submit time.
    pub arrival_ns: u64,
    /// Physical position of the first sector.
    pub pbn: Pbn,
    /// Sectors dropped by clamping.
    pub clamped_sectors: u32,
}

impl Pending {
    /// `request` as submitted at `arrival_ns`, clamped to the disk (a
    /// request running past its end loses the sectors beyond; a flush has
    /// none) and mapped to its physical position.
    fn new(params: &DiskParams, request: DiskRequest, arrival_ns: u64) -> Pending {
        let capacity = params.sector_count;
        let lba = request.lba.min(capacity);
        let end = request.lba.saturating_add(u64::from(request.sectors)).min(capacity);
        let sectors = if request.op == DiskOp::Flush { 0 } else { (end - lba) as u32 };
        let clamped_sectors = request.sectors.saturating_sub(sectors);
        let pbn = map(params, lba);
        Pending { request: DiskRequest { lba, sectors, ..request }, arrival_ns, pbn, clamped_sectors }
    }
}

/// A request waiting behind the first `depth`, as submitted: clamped and
/// mapped when it moves up, so a long host queue costs 32 bytes a request
/// (72 for a [`Pending`]).
#[derive(Clone, Copy, Debug)]
struct Waiting {
    request: DiskRequest,
    arrival_ns: u64,
}

const _: () = assert!(std::mem::size_of::<Waiting>() == 32);

/// FIFO storage for pending requests; grows only past its previous peak.
/// The first `depth` (all the scheduler ever compares) are kept whole; the
/// rest wait in a compact form, so a long host queue costs little memory.
pub struct Queue {
    /// The first `depth` requests (fewer only when nothing waits behind).
    pending: VecDeque<Pending>,
    /// The rest, in arrival order.
    waiting: VecDeque<Waiting>,
    depth: usize,
}

impl Queue {
    /// A queue whose scheduler compares at most `depth` requests.
    pub fn new(depth: u32) -> Queue {
        let depth = depth.max(1) as usize;
        Queue { pending: VecDeque::with_capacity(depth), waiting: VecDeque::new(), depth }
    }

    /// Requests waiting.
    pub fn len(&self) -> usize {
        self.pending.len() + self.waiting.len()
    }

    /// Append `request`, submitted at `arrival_ns`, in arrival order.
    pub fn push(&mut self, params: &DiskParams, request: DiskRequest, arrival_ns: u64) {
        let last_arrival_ns = match self.waiting.back() {
            Some(last) => Some(last.arrival_ns),
            None => self.pending.back().map(|last| last.arrival_ns),
        };
        if let Some(last_arrival_ns) = last_arrival_ns {
            assert!(last_arrival_ns <= arrival_ns);
        }
        if self.pending.len() < self.depth {
            self.pending.push_back(Pending::new(params, request, arrival_ns));
        } else {
            if self.waiting.len() == self.waiting.capacity() {
                // Grow by an eighth, not double: a host queue that peaks at
                // 200,000 requests holds room for about 225,000, not 262,144.
                self.waiting.reserve_exact(self.waiting.len() / 8 + 64);
            }
            self.waiting.push_back(Waiting { request, arrival_ns });
        }
    }

    /// Candidates the disk may pick from at `now_ns`: the first `depth` that
    /// have arrived (at least one, the oldest, when any is waiting).
    pub fn candidates(&self, now_ns: u64, depth: u32) -> usize {
        let arrived = self
            .pending
            .iter()
            .take(depth.max(1) as usize)
            .take_while(|pending| pending.arrival_ns <= now_ns)
            .count();
        arrived.max(usize::from(!self.pending.is_empty()))
    }

    /// The request at `index` (below `depth`).
    pub fn get(&self, index: usize) -> &Pending {
        &self.pending[index]
    }

    /// Remove and return the request at `index`; the first one waiting
    /// behind moves up, clamped and mapped on `params`.
    pub fn take(&mut self, index: usize, params: &DiskParams) -> Pending {
        let taken = self.pending.remove(index).expect("index within the candidates");
        if let Some(Waiting { request, arrival_ns }) = self.waiting.pop_front() {
            self.pending.push_back(Pending::new(params, request, arrival_ns));
        }
        taken
    }

    /// C-LOOK among the first `count`: the lowest cylinder at or past
    /// `head_cylinder`, else the lowest cylinder of all.
    pub fn pick_clook(&self, count: usize, head_cylinder: u32) -> usize {
        assert!(count >= 1 && count <= self.pending.len());
        let ahead = (0..count)
            .filter(|index| self.pending[*index].pbn.cylinder >= head_cylinder)
            .min_by_key(|index| (self.pending[*index].pbn.cylinder, *index));
        let picked = ahead.unwrap_or_else(|| {
            (0..count).min_by_key(|index| (self.pending[*index].pbn.cylinder, *index)).expect("count >= 1")
        });
        assert!(picked < count);
        picked
    }
}
