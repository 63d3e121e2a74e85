//! The lower-request bookkeeping every target needs: why each lower
//! request was sent (looked up by id when it completes, never iterated),
//! and the queues the runtime drains after every input. One entry per
//! lower request in flight.

use layoutd_core::{Completion, ReqId, Request};
use rustc_hash::FxHashMap;
use std::collections::VecDeque;

/// Lower requests in flight by id, with what each was for (`O`), and the
/// outgoing lower and upper queues.
pub struct LowerIo<O> {
    /// Why each lower request in flight was sent.
    pub lower: FxHashMap<u64, O>,
    next_id: u64,
    /// Lower requests waiting for `poll_lower`.
    pub lower_q: VecDeque<Request>,
    /// Upper completions waiting for `poll_upper`.
    pub upper_q: VecDeque<Completion>,
}

impl<O> Default for LowerIo<O> {
    fn default() -> Self {
        LowerIo {
            lower: FxHashMap::default(),
            next_id: 0,
            lower_q: VecDeque::new(),
            upper_q: VecDeque::new(),
        }
    }
}

impl<O> LowerIo<O> {
    /// Queues `req` below, marked `background` or not, remembering `op`;
    /// returns its id.
    pub fn emit(&mut self, op: O, background: bool, mut req: Request) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        req.id = ReqId(id);
        req.background = background;
        assert!(self.lower.insert(id, op).is_none(), "lower ids are unique");
        self.lower_q.push_back(req);
        id
    }

    /// Why lower request `id` was sent (it completed).
    pub fn take(&mut self, id: ReqId) -> O {
        self.lower.remove(&id.0).expect("completion for a request this target sent")
    }
}
