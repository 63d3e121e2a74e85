//! Where the simulator's requests come from, and when they are issued.
//!
//! - [`OpenLoop`]: each request at its recorded time (relative to the
//!   trace's first request). Timestamps that go backwards are issued at the
//!   latest time seen and counted.
//! - [`ClosedLoop`]: each base stream (process, else device) issues its next
//!   request when its previous one completes, plus the recorded think time
//!   `next.submit - previous.complete`. A request the recording shows
//!   overlapping its predecessor (submitted before it completed: an
//!   asynchronous stream) is issued the same interval after the
//!   predecessor's issue instead, so queue depth is kept. Formats without
//!   completion times take think time as the gap between submissions.
//!   Requests are read ahead at most `window` records; a stream whose next
//!   request lies beyond the window waits for it (bounded memory; see
//!   `docs/sim.md`).

use crate::trace::{TraceError, TraceReader, TraceReq};
use rustc_hash::FxHashMap;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

/// A request ready to issue, with the key its issue is reported under.
#[derive(Clone, Copy, Debug)]
pub struct Issue {
    /// The request.
    pub req: TraceReq,
    /// Opaque to the engine: passed back to [`Source::issued`].
    pub key: u32,
}

/// A supplier of timed requests; times are ns on the simulator's clock.
pub trait Source {
    /// The instant of the next issue, if one is known now.
    fn peek_ns(&mut self) -> Result<Option<u64>, TraceError>;
    /// Takes the request whose instant `peek_ns` returned.
    fn pop(&mut self) -> Issue;
    /// The request popped with `key` was issued under the harness id `id`.
    fn issued(&mut self, key: u32, id: u64);
    /// The request issued under `id` completed at `now_ns`. The engine
    /// keeps nothing else per request for the source, so its memory per
    /// outstanding request stays small in open loop.
    fn completed(&mut self, id: u64, now_ns: u64);
    /// The reader underneath (progress, counts).
    fn reader(&self) -> &TraceReader;
    /// Issues whose recorded time went backwards (before the previous
    /// request in open loop, before the trace's first request in either
    /// mode) and were moved forward.
    fn clamped_count(&self) -> u64;
    /// Base streams seen.
    fn stream_count(&self) -> u64;
}

/// See the module docs.
pub struct OpenLoop {
    reader: TraceReader,
    origin_ns: u64,
    first_ns: Option<u64>,
    last_ns: u64,
    next: Option<(u64, TraceReq)>,
    clamped_count: u64,
}

impl OpenLoop {
    /// Issues `reader`'s requests from `origin_ns` on.
    pub fn new(reader: TraceReader, origin_ns: u64) -> OpenLoop {
        OpenLoop { reader, origin_ns, first_ns: None, last_ns: origin_ns, next: None, clamped_count: 0 }
    }
}

impl Source for OpenLoop {
    fn peek_ns(&mut self) -> Result<Option<u64>, TraceError> {
        if self.next.is_none() {
            if let Some(r) = self.reader.next()? {
                let first = *self.first_ns.get_or_insert(r.submit_ns);
                let mut at = self.origin_ns + r.submit_ns.saturating_sub(first);
                // Earlier than the first request (moved to the origin) or
                // than the one before it: moved forward, and counted.
                if r.submit_ns < first || at < self.last_ns {
                    self.clamped_count += 1;
                    at = self.last_ns;
                }
                self.last_ns = at;
                self.next = Some((at, r));
            }
        }
        Ok(self.next.map(|(at, _)| at))
    }

    fn pop(&mut self) -> Issue {
        let (_, req) = self.next.take().expect("pop after a successful peek");
        Issue { req, key: 0 }
    }

    fn issued(&mut self, _key: u32, _id: u64) {}

    fn completed(&mut self, _id: u64, _now_ns: u64) {}

    fn reader(&self) -> &TraceReader {
        &self.reader
    }

    fn clamped_count(&self) -> u64 {
        self.clamped_count
    }

    fn stream_count(&self) -> u64 {
        0
    }
}

/// The last issued request of a stream.
#[derive(Clone, Copy)]
struct Last {
    /// Its harness id, once issued.
    id: Option<u64>,
    submit_rec_ns: u64,
    complete_rec_ns: u64,
    issue_ns: u64,
    complete_ns: Option<u64>,
}

#[derive(Default)]
struct Stream {
    queue: VecDeque<(u64, TraceReq)>,
    last: Option<Last>,
    head_scheduled: bool,
}

/// See the module docs.
pub struct ClosedLoop {
    reader: TraceReader,
    origin_ns: u64,
    first_ns: Option<u64>,
    window: usize,
    buffered: usize,
    eof: bool,
    next_seq: u64,
    index: FxHashMap<u64, u32>,
    streams: Vec<Stream>,
    /// (issue instant, file sequence, stream index)
    ready: BinaryHeap<Reverse<(u64, u64, u32)>>,
    /// Stream by harness id of each stream's last request, while it is
    /// outstanding (at most one per stream): only it gates the stream's
    /// next request.
    last_ids: FxHashMap<u64, u32>,
    /// Requests recorded before the trace's first request (a stream's
    /// first, issued at the origin) or before their stream's previous one
    /// (issued with it).
    clamped_count: u64,
}

impl ClosedLoop {
    /// Replays `reader` closed-loop from `origin_ns`, reading ahead at most
    /// `window` requests.
    pub fn new(reader: TraceReader, origin_ns: u64, window: usize) -> ClosedLoop {
        assert!(window >= 1, "closed-loop window holds at least one request");
        ClosedLoop {
            reader,
            origin_ns,
            first_ns: None,
            window,
            buffered: 0,
            eof: false,
            next_seq: 0,
            index: FxHashMap::default(),
            streams: Vec::new(),
            ready: BinaryHeap::new(),
            last_ids: FxHashMap::default(),
            clamped_count: 0,
        }
    }

    fn fill(&mut self) -> Result<(), TraceError> {
        while !self.eof && self.buffered < self.window {
            let Some(r) = self.reader.next()? else {
                self.eof = true;
                break;
            };
            self.first_ns.get_or_insert(r.submit_ns);
            let next_index = self.streams.len() as u32;
            let s = *self.index.entry(r.stream).or_insert(next_index);
            if s == next_index {
                self.streams.push(Stream::default());
            }
            let seq = self.next_seq;
            self.next_seq += 1;
            self.streams[s as usize].queue.push_back((seq, r));
            self.buffered += 1;
            self.schedule_head(s);
        }
        Ok(())
    }

    /// Puts stream `s`'s first buffered request on the ready heap if its
    /// issue instant is known.
    fn schedule_head(&mut self, s: u32) {
        let stream = &mut self.streams[s as usize];
        if stream.head_scheduled {
            return;
        }
        let Some(&(seq, r)) = stream.queue.front() else { return };
        let at = match stream.last {
            None => {
                let first = self.first_ns.expect("set on first read");
                self.clamped_count += u64::from(r.submit_ns < first);
                self.origin_ns + r.submit_ns.saturating_sub(first)
            }
            Some(last) if r.submit_ns < last.complete_rec_ns => {
                // Recorded before its predecessor: issued with it, counted.
                self.clamped_count += u64::from(r.submit_ns < last.submit_rec_ns);
                last.issue_ns + r.submit_ns.saturating_sub(last.submit_rec_ns)
            }
            Some(last) => match last.complete_ns {
                Some(done) => done + (r.submit_ns - last.complete_rec_ns),
                None => return,
            },
        };
        stream.head_scheduled = true;
        self.ready.push(Reverse((at, seq, s)));
    }
}

impl Source for ClosedLoop {
    fn peek_ns(&mut self) -> Result<Option<u64>, TraceError> {
        self.fill()?;
        Ok(self.ready.peek().map(|Reverse((at, _, _))| *at))
    }

    fn pop(&mut self) -> Issue {
        let Reverse((at, seq, s)) = self.ready.pop().expect("pop after a successful peek");
        let stream = &mut self.streams[s as usize];
        let (queued_seq, req) = stream.queue.pop_front().expect("scheduled head is queued");
        assert_eq!(queued_seq, seq, "the heap holds each stream's head only");
        assert!(stream.head_scheduled);
        stream.head_scheduled = false;
        let complete_rec_ns = req.complete_ns.unwrap_or(req.submit_ns).max(req.submit_ns);
        // The previous request, if still outstanding, gates nothing now.
        if let Some(Last { id: Some(id), complete_ns: None, .. }) = stream.last {
            self.last_ids.remove(&id);
        }
        stream.last = Some(Last {
            id: None,
            submit_rec_ns: req.submit_ns,
            complete_rec_ns,
            issue_ns: at,
            complete_ns: None,
        });
        self.buffered -= 1;
        self.schedule_head(s);
        Issue { req, key: s }
    }

    fn issued(&mut self, key: u32, id: u64) {
        let last = self.streams[key as usize].last.as_mut().expect("issued after pop");
        assert!(last.id.is_none(), "issued twice");
        last.id = Some(id);
        let previous = self.last_ids.insert(id, key);
        assert!(previous.is_none(), "harness ids are unique");
    }

    fn completed(&mut self, id: u64, now_ns: u64) {
        // Only a stream's latest request gates its next; an earlier one
        // (overlapping, asynchronous) completing changes nothing.
        let Some(key) = self.last_ids.remove(&id) else { return };
        let last = self.streams[key as usize].last.as_mut().expect("a stream with an issued request");
        assert_eq!(last.id, Some(id));
        assert!(last.complete_ns.is_none(), "completed twice");
        last.complete_ns = Some(now_ns);
        self.schedule_head(key);
    }

    fn reader(&self) -> &TraceReader {
        &self.reader
    }

    fn clamped_count(&self) -> u64 {
        self.clamped_count
    }

    fn stream_count(&self) -> u64 {
        self.streams.len() as u64
    }
}
