//! Bookkeeping shared by targets that split one upper request into several
//! lower ones and join their completions (and read data) back together.

use bytes::{Bytes, BytesMut};
use layoutd_core::{Completion, IoError, Op, ReqId};
use rustc_hash::FxHashMap as HashMap;

/// One upper request being put together from pieces: lower completions
/// (with read data at their offset within the request) and bytes copied in
/// directly (a RAM buffer). Shared by every target that serves one upper
/// request with several lower ones (`linear` across segments, `dcd` from
/// RAM, log and home). No payload memory until a piece brings data (never
/// in timing-only mode); a single piece covering a whole read is passed up
/// without a copy.
pub(crate) struct Assembly {
    upper: ReqId,
    op: Op,
    length_bytes: u32,
    pieces_left: u32,
    error: Option<IoError>,
    data: Option<BytesMut>,
    whole: Option<Bytes>,
}

impl Assembly {
    /// An upper request of `length_bytes` waiting for `pieces` pieces.
    pub(crate) fn new(upper: ReqId, op: Op, length_bytes: u32, pieces: u32) -> Assembly {
        Assembly { upper, op, length_bytes, pieces_left: pieces, error: None, data: None, whole: None }
    }

    /// Expects `n` more pieces.
    pub(crate) fn add_pieces(&mut self, n: u32) {
        self.pieces_left += n;
    }

    /// Copies read bytes `d` to `at` within the request (not a piece).
    pub(crate) fn put(&mut self, at: usize, d: &[u8]) {
        if let Some(w) = self.whole.take() {
            self.buffer().copy_from_slice(&w);
        }
        self.buffer()[at..at + d.len()].copy_from_slice(d);
    }

    fn buffer(&mut self) -> &mut BytesMut {
        let length = self.length_bytes as usize;
        self.data.get_or_insert_with(|| BytesMut::zeroed(length))
    }

    /// A piece answered (`within`: its offset in the request); true once
    /// every piece has.
    pub(crate) fn piece_done(
        &mut self,
        within: u32,
        data: Option<Bytes>,
        result: Result<(), IoError>,
    ) -> bool {
        assert!(self.pieces_left > 0, "more pieces answered than expected");
        self.pieces_left -= 1;
        match (result, data) {
            (Err(e), _) => self.error = self.error.or(Some(e)),
            (Ok(()), Some(d)) if self.op == Op::Read => {
                if within == 0
                    && d.len() == self.length_bytes as usize
                    && self.data.is_none()
                    && self.whole.is_none()
                {
                    self.whole = Some(d);
                } else {
                    self.put(within as usize, &d);
                }
            }
            (Ok(()), _) => {}
        }
        self.pieces_left == 0
    }

    /// The upper completion (every piece has answered).
    pub(crate) fn finish(self) -> Completion {
        assert_eq!(self.pieces_left, 0, "finished before every piece answered");
        match self.error {
            Some(e) => Completion::err(self.upper, e),
            None => {
                let data = if self.op == Op::Read {
                    self.whole.or_else(|| self.data.map(BytesMut::freeze))
                } else {
                    None
                };
                Completion { id: self.upper, result: Ok(()), data }
            }
        }
    }
}

/// Maps lower ids to the upper request they belong to and joins results.
#[derive(Default)]
pub(crate) struct Joiner {
    next_lower_id: u64,
    /// lower id -> (slot, byte offset of the piece within the upper request)
    lower: HashMap<u64, (u64, u32)>,
    slots: HashMap<u64, Assembly>,
    next_slot: u64,
}

impl Joiner {
    /// Starts an upper request that will be served by `pieces` lower ones.
    pub(crate) fn begin(&mut self, upper: ReqId, op: Op, length_bytes: u32, pieces: u32) -> u64 {
        assert!(pieces > 0, "a request has at least one piece");
        let slot = self.next_slot;
        self.next_slot += 1;
        self.slots.insert(slot, Assembly::new(upper, op, length_bytes, pieces));
        slot
    }

    /// A fresh lower id for a piece of `slot` at `within_bytes` of the upper request.
    pub(crate) fn piece(&mut self, slot: u64, within_bytes: u32) -> ReqId {
        assert!(self.slots.contains_key(&slot), "piece of an unknown slot");
        let id = self.next_lower_id;
        self.next_lower_id += 1;
        assert!(id < 1 << 63, "joiner ids stay clear of linear's direct-id bit");
        self.lower.insert(id, (slot, within_bytes));
        ReqId(id)
    }

    /// Number of lower requests in flight.
    pub(crate) fn in_flight_count(&self) -> usize {
        self.lower.len()
    }

    /// Records a lower completion; returns the upper completion once every
    /// piece has answered.
    pub(crate) fn complete(&mut self, c: Completion) -> Option<Completion> {
        let (slot, within) = self.lower.remove(&c.id.0).expect("completion for a request this target sent");
        let j = self.slots.get_mut(&slot).expect("slot of a live piece");
        if !j.piece_done(within, c.data, c.result) {
            return None;
        }
        Some(self.slots.remove(&slot).expect("present").finish())
    }
}
