//! `trace`: passes every request through unchanged and records it.
//!
//! Each request becomes one [`TraceRecord`] (submit time, completion time,
//! base stream, op, offset, length, FUA; the base stream, not the run the
//! stream detector found in it, so a replay detects the runs again), released through `poll_record` in
//! submit order once it and every earlier request have completed. The text
//! format is documented in `docs/trace-format.md`; `layoutd sim --format
//! layoutd` reads it.
//!
//! Config (`[[layer]] target = "trace"`):
//! ```toml
//! record_queue_max = 65536   # records held for the runtime to drain; past it they are dropped and counted
//! ```
//! Status: `trace records_count=.. records_dropped_count=.. in_flight_count=..`.

use layoutd_core::config::{ArgReader, ConfigError};
use layoutd_core::{Completion, Instant, ReqId, Request, Stack, Status, Target, TraceRecord};
use std::collections::{BTreeMap, VecDeque};

/// Records held for the runtime to drain by default.
pub const RECORD_QUEUE_MAX_DEFAULT: usize = 65536;

/// `stack` ready to record what a client sends it: as it is when it has a
/// `trace` layer (that one records), else with one put on top. Used by
/// `serve --record-trace` and `sim --record-trace`, so a recording is never
/// silently empty and never doubled.
pub fn recording(stack: Box<dyn Target>) -> Box<dyn Target> {
    if stack.layer_statuses().iter().any(|s| s.target == "trace") {
        return stack;
    }
    let size = stack.size_bytes();
    Box::new(Stack::new(vec![Box::new(Trace::new(size, RECORD_QUEUE_MAX_DEFAULT)), stack]))
}

/// The trace target.
pub struct Trace {
    size_bytes: u64,
    next_seq: u64,
    /// seq -> (upper id, record; complete == submit until it completes, done flag)
    pending: BTreeMap<u64, (ReqId, TraceRecord, bool)>,
    lower_q: VecDeque<Request>,
    upper_q: VecDeque<Completion>,
    records: VecDeque<TraceRecord>,
    record_queue_max: usize,
    records_count: u64,
    records_dropped_count: u64,
}

impl Trace {
    /// Parses the config over a lower device of `lower_bytes`.
    pub fn ctr(mut args: ArgReader<'_>, lower_bytes: u64) -> Result<Trace, ConfigError> {
        let record_queue_max = args.u64_opt("record_queue_max")?.unwrap_or(RECORD_QUEUE_MAX_DEFAULT as u64);
        if record_queue_max == 0 {
            return Err(args.error("`record_queue_max` must be at least 1"));
        }
        args.finish()?;
        Ok(Trace::new(lower_bytes, record_queue_max as usize))
    }

    /// A trace target over `size_bytes`.
    pub fn new(size_bytes: u64, record_queue_max: usize) -> Trace {
        Trace {
            size_bytes,
            next_seq: 0,
            pending: BTreeMap::new(),
            lower_q: VecDeque::new(),
            upper_q: VecDeque::new(),
            records: VecDeque::new(),
            record_queue_max,
            records_count: 0,
            records_dropped_count: 0,
        }
    }

    fn release_completed_prefix(&mut self) {
        while let Some(entry) = self.pending.first_entry() {
            if !entry.get().2 {
                return;
            }
            let (_, record, _) = entry.remove();
            if self.records.len() >= self.record_queue_max {
                self.records_dropped_count += 1;
            } else {
                self.records_count += 1;
                self.records.push_back(record);
            }
        }
    }
}

impl Target for Trace {
    fn name(&self) -> &'static str {
        "trace"
    }

    fn size_bytes(&self) -> u64 {
        self.size_bytes
    }

    /// Passes everything through: the bytes are where they are below.
    fn map_extent(&self, offset_bytes: u64, length_bytes: u64) -> Vec<(Option<u64>, u64)> {
        vec![(Some(offset_bytes), length_bytes)]
    }

    fn handle_request(&mut self, now: Instant, req: Request) {
        let seq = self.next_seq;
        self.next_seq += 1;
        let record = TraceRecord {
            submit: now,
            complete: now,
            stream: layoutd_core::streams::base_of(req.stream),
            op: req.op,
            offset_bytes: req.offset_bytes,
            length_bytes: req.length_bytes,
            fua: req.fua,
        };
        self.pending.insert(seq, (req.id, record, false));
        self.lower_q.push_back(Request { id: ReqId(seq), ..req });
    }

    fn handle_completion(&mut self, now: Instant, completion: Completion) {
        let entry = self.pending.get_mut(&completion.id.0).expect("completion of a traced request");
        assert!(!entry.2, "completed twice");
        entry.1.complete = now;
        entry.2 = true;
        self.upper_q.push_back(Completion { id: entry.0, ..completion });
        self.release_completed_prefix();
    }

    fn poll_lower(&mut self) -> Option<Request> {
        self.lower_q.pop_front()
    }

    fn poll_upper(&mut self) -> Option<Completion> {
        self.upper_q.pop_front()
    }

    fn poll_record(&mut self) -> Option<TraceRecord> {
        self.records.pop_front()
    }

    fn status(&self) -> Status {
        Status {
            target: "trace".into(),
            config: vec![("record_queue_max".into(), self.record_queue_max.to_string())],
            counters: vec![
                ("records_count".into(), self.records_count),
                ("records_dropped_count".into(), self.records_dropped_count),
                ("in_flight_count".into(), self.pending.len() as u64),
            ],
        }
    }
}
