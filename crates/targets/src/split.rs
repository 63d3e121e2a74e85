//! Bookkeeping shared by targets that split one upper request into several
//! lower ones and join their completions (and read data) back together.

use bytes::{Bytes, BytesMut};
use layoutd_core::{Completion, IoError, Op, ReqId};
use std::collections::HashMap;

/// An upper request waiting for its lower pieces.
struct Joining {
    upper: ReqId,
    op: Op,
    pieces_left: u32,
    error: Option<IoError>,
    /// For reads in data mode: the assembled bytes, allocated when the
    /// first piece brings data (never in timing-only mode).
    data: Option<BytesMut>,
    /// A single piece that covered the whole request, passed up uncopied.
    whole: Option<Bytes>,
    length_bytes: u32,
    any_data: bool,
}

/// Maps lower ids to the upper request they belong to and joins results.
#[derive(Default)]
pub(crate) struct Joiner {
    next_lower_id: u64,
    /// lower id -> (slot, byte offset of the piece within the upper request)
    lower: HashMap<u64, (u64, u32)>,
    slots: HashMap<u64, Joining>,
    next_slot: u64,
}

impl Joiner {
    /// Starts an upper request that will be served by `pieces` lower ones.
    pub(crate) fn begin(&mut self, upper: ReqId, op: Op, length_bytes: u32, pieces: u32) -> u64 {
        assert!(pieces > 0, "a request has at least one piece");
        let slot = self.next_slot;
        self.next_slot += 1;
        let joining = Joining {
            upper,
            op,
            pieces_left: pieces,
            error: None,
            data: None,
            whole: None,
            length_bytes,
            any_data: false,
        };
        self.slots.insert(slot, joining);
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
        assert!(j.pieces_left > 0);
        j.pieces_left -= 1;
        match c.result {
            Err(e) => j.error = j.error.or(Some(e)),
            Ok(()) => {
                if let (Op::Read, Some(d)) = (j.op, c.data) {
                    let length = j.length_bytes as usize;
                    if within == 0 && d.len() == length && j.data.is_none() {
                        // One piece covers the whole request: pass the buffer up as is.
                        j.whole = Some(d);
                        j.any_data = true;
                        return self.finish_if_done(slot);
                    }
                    let buf = j.data.get_or_insert_with(|| BytesMut::zeroed(length));
                    let at = within as usize;
                    buf[at..at + d.len()].copy_from_slice(&d);
                    j.any_data = true;
                }
            }
        }
        self.finish_if_done(slot)
    }

    /// The upper completion of `slot`, once its last piece has answered.
    fn finish_if_done(&mut self, slot: u64) -> Option<Completion> {
        if self.slots.get(&slot).expect("live slot").pieces_left > 0 {
            return None;
        }
        let j = self.slots.remove(&slot).expect("present");
        Some(match j.error {
            Some(e) => Completion::err(j.upper, e),
            None => {
                let data: Option<Bytes> = if j.op == Op::Read && j.any_data {
                    j.whole.or_else(|| j.data.map(BytesMut::freeze))
                } else {
                    None
                };
                Completion { id: j.upper, result: Ok(()), data }
            }
        })
    }
}
