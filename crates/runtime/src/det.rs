//! The deterministic runtime: a hand-driven harness in the style of quinn's
//! `Pair`. It owns the stack, the bottom device, the virtual clock and the
//! queue of in-flight lower requests; [`Harness::step`] jumps to the next
//! event and handles it.
//!
//! Events, in order of precedence at equal times: a lower completion, a
//! target timeout, then (once the device has nothing in flight and no upper
//! request is outstanding) one `handle_idle` per transition to idle.
//!
//! Lower requests reach the device as soon as the stack emits them, unless
//! [`Harness::dispatch`] models the live runtime's submission
//! ([`LiveDispatch`]): each thread performs its lower requests one at a
//! time, so a client's request waits at the device only for what is
//! already there, not for everything a background step emitted.
//!
//! Faults are injected by editing fields: [`Harness::fail_lower_writes`],
//! [`Harness::fail_lower_reads`], [`Harness::lower_failures_left`],
//! the [`ZeroLatency`] reorder switch, or by cutting a recorder's log.

use bytes::Bytes;
use layoutd_core::{Completion, Instant, Op, ReqId, Request, Target, TraceRecord};
use layoutd_disk::{execute, BlockDevice};
use layoutd_targets::lowerio::IdTable;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rustc_hash::FxHashMap;
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

/// When lower requests complete. The harness executes a request against the
/// device at the moment it completes, so the order of completions is the
/// order in which data reaches the device.
pub trait Timing {
    /// A lower request (identified by `tag`) enters the device at `now`.
    fn submit(&mut self, now: Instant, req: &Request, tag: u64, rng: &mut ChaCha8Rng);
    /// The instant of the next completion, if anything is in flight.
    fn next_completion(&self) -> Option<Instant>;
    /// Pops the completion due at `now` (`now >= next_completion()`).
    fn complete(&mut self, now: Instant, rng: &mut ChaCha8Rng) -> Option<u64>;
    /// Whether anything is in flight.
    fn busy(&self) -> bool;
}

/// Completes requests at a fixed latency (zero by default). With `reorder`,
/// requests due at the same instant complete in a seeded random order, as a
/// real device may reorder anything in flight.
#[derive(Default)]
pub struct ZeroLatency {
    /// Added to every request.
    pub latency_ns: u64,
    /// Shuffle requests that are in flight together.
    pub reorder: bool,
    in_flight: BTreeMap<Instant, Vec<u64>>,
}

impl ZeroLatency {
    /// Zero latency, seeded reordering on.
    pub fn reordering() -> ZeroLatency {
        ZeroLatency { latency_ns: 0, reorder: true, in_flight: BTreeMap::new() }
    }
}

impl Timing for ZeroLatency {
    fn submit(&mut self, now: Instant, _req: &Request, tag: u64, _rng: &mut ChaCha8Rng) {
        self.in_flight.entry(now.add_ns(self.latency_ns)).or_default().push(tag);
    }

    fn next_completion(&self) -> Option<Instant> {
        self.in_flight.keys().next().copied()
    }

    fn complete(&mut self, now: Instant, rng: &mut ChaCha8Rng) -> Option<u64> {
        let mut entry = self.in_flight.first_entry()?;
        assert!(*entry.key() <= now, "completion popped before it was due");
        let tags = entry.get_mut();
        let i = if self.reorder { rng.gen_range(0..tags.len()) } else { 0 };
        let tag = tags.swap_remove(i);
        if tags.is_empty() {
            entry.remove();
        }
        Some(tag)
    }

    fn busy(&self) -> bool {
        !self.in_flight.is_empty()
    }
}

/// A lower request in flight, as the harness keeps it until it completes:
/// what executing it needs but its payload, which waits in
/// `Harness::payloads` (timing-only replays have none), so a queued request
/// costs 24 bytes.
struct InFlight {
    id: ReqId,
    offset_bytes: u64,
    length_bytes: u32,
    op: Op,
    fua: bool,
}

// An open-loop overload keeps one per queued lower request.
const _: () = assert!(std::mem::size_of::<Option<InFlight>>() <= 24);

impl InFlight {
    /// The request again, with `data` and what [`execute`] reads of it.
    fn into_request(self, data: Option<Bytes>) -> Request {
        Request {
            fua: self.fua,
            data,
            ..Request::new(self.id, self.op, self.offset_bytes, self.length_bytes)
        }
    }
}

/// The live runtime's submission of lower requests (`crates/runtime/src/
/// live.rs`), for a replay that predicts a live run. Live, lower I/O is
/// synchronous: each thread has one request at the device at a time.
/// Requests a client's request emits are performed by the client's thread
/// one after another until its own completion is ready (a `background`
/// one, and whatever is left after that, go to the executor); requests a
/// completion emits are performed next by the thread that completed it
/// (an executor thread keeps one and queues the rest); requests a
/// timeout, an idle report or a message emits go to the executor's queue,
/// which `threads` threads take one at a time. The
/// simulator without this model puts every emitted request at the device
/// at once: a background step of 16 reads is all queued at the arm ahead
/// of the next client read, where live the read waits for the one in
/// flight (`bench/results/log/live-fio/README.md`, session 27).
#[derive(Debug)]
pub struct LiveDispatch {
    /// Executor threads (live: [`crate::live::EXECUTOR_THREADS`]).
    pub threads: usize,
    /// How long after the device completes a request the stack sees it
    /// (live: the performing thread's wake-up after its emulated sleep and
    /// the handling before its next request; 0: at once). A replayed
    /// client's think time starts after it, as it did live.
    pub delivery_ns: u64,
    /// Requests waiting for an executor thread.
    queue: VecDeque<Request>,
    /// Each thread with work (a lane): its requests after the one at the
    /// device, and the client request it serves (`None`: an executor thread).
    lanes: FxHashMap<u64, Lane>,
    /// The lane of each request at the device, by tag.
    lane_of: FxHashMap<u64, u64>,
    next_lane: u64,
    /// Where the requests the current input emits go.
    context: Context,
}

#[derive(Debug, Default)]
struct Lane {
    waiting: VecDeque<Request>,
    client: Option<ReqId>,
    /// The client request is complete: what is left goes to the executor.
    client_done: bool,
}

#[derive(Copy, Clone, Debug)]
enum Context {
    /// The executor's queue (timeout, idle, message).
    Executor,
    /// A thread's own lane (its request, or the completion it handles).
    Lane(u64),
}

impl LiveDispatch {
    /// The live runtime's submission with `threads` executor threads.
    pub fn new(threads: usize) -> LiveDispatch {
        assert!(threads >= 1, "at least one executor thread");
        LiveDispatch {
            threads,
            delivery_ns: 0,
            queue: VecDeque::new(),
            lanes: FxHashMap::default(),
            lane_of: FxHashMap::default(),
            next_lane: 0,
            context: Context::Executor,
        }
    }

    /// Requests emitted and not yet at the device.
    fn held_count(&self) -> usize {
        self.queue.len() + self.lanes.values().map(|l| l.waiting.len()).sum::<usize>()
    }

    fn executor_lanes(&self) -> usize {
        self.lanes.values().filter(|l| l.client.is_none()).count()
    }
}

/// Counts the harness keeps about what it did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HarnessStats {
    /// Lower requests executed on the device.
    pub lower_count: u64,
    /// Idle events delivered.
    pub idle_count: u64,
    /// Timeouts delivered.
    pub timeout_count: u64,
}

/// The deterministic runtime.
pub struct Harness<T: Timing = ZeroLatency> {
    /// The stack under test.
    pub stack: Box<dyn Target>,
    /// The bottom device (data lands here when a lower request completes).
    pub device: Arc<dyn BlockDevice>,
    /// When lower requests complete.
    pub timing: T,
    /// The virtual clock.
    pub now: Instant,
    /// Fail every lower write while set, with `lower_write_error`.
    pub fail_lower_writes: bool,
    /// The error `fail_lower_writes` injects (EIO unless changed).
    pub lower_write_error: layoutd_core::IoError,
    /// Fail every lower read while set, with EIO.
    pub fail_lower_reads: bool,
    /// With `Some(n)`: only the next `n` requests the two switches above
    /// select fail (a transient error); `None`: all of them.
    pub lower_failures_left: Option<u32>,
    /// Whether reads return data (data mode) or not (timing mode).
    pub with_data: bool,
    rng: ChaCha8Rng,
    seed: u64,
    next_upper_id: u64,
    next_tag: u64,
    // By id, never iterated: no order can leak into results.
    lower: IdTable<InFlight>,
    /// The payloads of the requests in `lower` that carry one, by tag.
    payloads: FxHashMap<u64, Bytes>,
    upper_outstanding: IdTable<()>,
    completions: VecDeque<Completion>,
    records: Vec<TraceRecord>,
    idle_delivered: bool,
    /// What happened so far.
    pub stats: HarnessStats,
    /// The debug event log (see [`crate::events`]); `None`: off.
    pub events: Option<crate::events::EventLog>,
    /// How lower requests reach the device: `None`, at once; see [`LiveDispatch`].
    pub dispatch: Option<LiveDispatch>,
}

impl<T: Timing> Harness<T> {
    /// A harness over `stack` and `device` with `timing`, seeded by `seed`.
    pub fn new(stack: Box<dyn Target>, device: Arc<dyn BlockDevice>, timing: T, seed: u64) -> Harness<T> {
        Harness {
            stack,
            device,
            timing,
            now: Instant::ZERO,
            fail_lower_writes: false,
            lower_write_error: layoutd_core::IoError::Io,
            fail_lower_reads: false,
            lower_failures_left: None,
            with_data: true,
            rng: ChaCha8Rng::seed_from_u64(seed),
            seed,
            next_upper_id: 0,
            next_tag: 0,
            lower: IdTable::default(),
            payloads: FxHashMap::default(),
            upper_outstanding: IdTable::default(),
            completions: VecDeque::new(),
            records: Vec::new(),
            idle_delivered: false,
            stats: HarnessStats::default(),
            events: None,
            dispatch: None,
        }
    }

    /// Gives back the stack (after bring-up, or at the end of a test).
    pub fn into_stack(self) -> Box<dyn Target> {
        assert!(self.lower.is_empty() && self.held_count() == 0, "lower requests still in flight");
        self.stack
    }

    /// The seed, for "reproduce with --seed N" messages.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// Submits a request from above at the current time; returns its id.
    pub fn submit(&mut self, mut req: Request) -> ReqId {
        req.id = ReqId(self.next_upper_id);
        self.next_upper_id += 1;
        self.upper_outstanding.insert(req.id.0, ());
        self.idle_delivered = false;
        let id = req.id;
        if let Some(ev) = self.events.as_mut() {
            ev.upper(self.now, &req);
        }
        if let Some(d) = self.dispatch.as_mut() {
            let lane = d.next_lane;
            d.next_lane += 1;
            d.lanes.insert(lane, Lane { client: Some(id), ..Lane::default() });
            d.context = Context::Lane(lane);
        }
        self.stack.handle_request(self.now, req);
        self.drain();
        id
    }

    /// Takes every upper completion delivered so far.
    pub fn take_completions(&mut self) -> Vec<Completion> {
        self.completions.drain(..).collect()
    }

    /// Takes every trace record released so far.
    pub fn take_records(&mut self) -> Vec<TraceRecord> {
        std::mem::take(&mut self.records)
    }

    /// Upper requests not yet completed.
    pub fn upper_outstanding_count(&self) -> usize {
        self.upper_outstanding.len()
    }

    /// Lower requests in flight (at the device, or held by the
    /// [`LiveDispatch`] model).
    pub fn lower_in_flight_count(&self) -> usize {
        self.lower.len() + self.held_count()
    }

    fn held_count(&self) -> usize {
        self.dispatch.as_ref().map_or(0, LiveDispatch::held_count)
    }

    /// Puts `r` at the device now; with the dispatch model, as `lane`'s.
    fn put_at_device(&mut self, r: Request, lane: Option<u64>) {
        let tag = self.next_tag;
        self.next_tag += 1;
        if let (Some(d), Some(lane)) = (self.dispatch.as_mut(), lane) {
            d.lane_of.insert(tag, lane);
        }
        self.timing.submit(self.now, &r, tag, &mut self.rng);
        let Request { id, offset_bytes, length_bytes, op, fua, data, .. } = r;
        if let Some(data) = data {
            self.payloads.insert(tag, data);
        }
        self.lower.insert(tag, InFlight { id, offset_bytes, length_bytes, op, fua });
    }

    /// The dispatch model: a lane whose thread is free takes its next
    /// request (a client's thread hands what is left to the executor once
    /// its request is complete; an executor thread whose own work is done
    /// takes the executor's queue), and free executor threads take the queue.
    fn dispatch_advance(&mut self) {
        let Some(d) = self.dispatch.as_mut() else { return };
        let busy: rustc_hash::FxHashSet<u64> = d.lane_of.values().copied().collect();
        let mut lanes: Vec<u64> = d.lanes.keys().copied().filter(|l| !busy.contains(l)).collect();
        lanes.sort_unstable();
        let mut start: Vec<(Request, u64)> = Vec::new();
        for lane in lanes {
            let l = d.lanes.get_mut(&lane).expect("listed");
            if l.client_done {
                d.queue.extend(l.waiting.drain(..));
            }
            match l.waiting.pop_front() {
                Some(r) => start.push((r, lane)),
                None => {
                    d.lanes.remove(&lane);
                }
            }
        }
        while d.executor_lanes() < d.threads {
            let Some(r) = d.queue.pop_front() else { break };
            let lane = d.next_lane;
            d.next_lane += 1;
            d.lanes.insert(lane, Lane::default());
            start.push((r, lane));
        }
        d.context = Context::Executor;
        for (r, lane) in start {
            self.put_at_device(r, Some(lane));
        }
    }

    fn drain(&mut self) {
        while let Some(r) = self.stack.poll_lower() {
            if let Some(ev) = self.events.as_mut() {
                ev.lower(self.now, "lo+", &r);
            }
            match self.dispatch.as_mut() {
                None => self.put_at_device(r, None),
                Some(d) => match d.context {
                    // A client's thread performs its own requests; an
                    // executor thread one (the rest go to the queue).
                    Context::Lane(lane)
                        if (d.lanes[&lane].client.is_some() && !r.background)
                            || (d.lanes[&lane].client.is_none() && d.lanes[&lane].waiting.is_empty()) =>
                    {
                        d.lanes.get_mut(&lane).expect("a lane's input").waiting.push_back(r);
                    }
                    _ => d.queue.push_back(r),
                },
            }
        }
        while let Some(c) = self.stack.poll_upper() {
            if let Some(ev) = self.events.as_mut() {
                ev.event(self.now, format_args!("done {}", c.id.0));
            }
            if let Some(d) = self.dispatch.as_mut() {
                if let Some(l) = d.lanes.values_mut().find(|l| l.client == Some(c.id)) {
                    l.client_done = true;
                }
            }
            let submitted = self.upper_outstanding.remove(c.id.0);
            assert!(submitted.is_some(), "completion for unknown upper request {:?}", c.id);
            self.completions.push_back(c);
        }
        while let Some(r) = self.stack.poll_record() {
            self.records.push(r);
        }
        self.dispatch_advance();
        if let Some(ev) = self.events.as_mut() {
            ev.after(self.now, &*self.stack);
        }
    }

    /// Delivers a runtime command to the stack now ([`Target::message`]),
    /// then moves what it emitted, as after any other input.
    pub fn message(&mut self, text: &str) -> Result<String, String> {
        let reply = self.stack.message(self.now, text);
        self.drain();
        if self.lower_in_flight_count() > 0 || !self.upper_outstanding.is_empty() {
            self.idle_delivered = false;
        }
        reply
    }

    /// The instant of the next event, if any.
    pub fn next_event(&self) -> Option<Instant> {
        [self.next_delivery(), self.stack.poll_timeout()].into_iter().flatten().min()
    }

    /// When the next lower completion reaches the stack: when the device
    /// completes it, plus the dispatch model's delivery time.
    fn next_delivery(&self) -> Option<Instant> {
        let delay = self.dispatch.as_ref().map_or(0, |d| d.delivery_ns);
        self.timing.next_completion().map(|t| t.add_ns(delay))
    }

    /// Whether the next [`Harness::step`] will deliver an idle event (the
    /// harness is quiet and has not yet told the stack). A driver that
    /// injects requests at chosen instants steps while this holds, so
    /// targets see idle in every gap, as [`Harness::run_until`] does.
    pub fn idle_pending(&self) -> bool {
        self.is_quiet() && !self.idle_delivered
    }

    /// Takes the oldest upper completion delivered so far, if any (the
    /// allocation-free form of [`Harness::take_completions`]).
    pub fn pop_completion(&mut self) -> Option<Completion> {
        self.completions.pop_front()
    }

    /// Whether the device is idle and nothing is outstanding above.
    pub fn is_quiet(&self) -> bool {
        !self.timing.busy()
            && self.lower.is_empty()
            && self.held_count() == 0
            && self.upper_outstanding.is_empty()
    }

    /// Handles the next event. Returns false when there is nothing left to
    /// do: no completion, no timeout, and idle already delivered.
    pub fn step(&mut self) -> bool {
        if self.is_quiet() && !self.idle_delivered {
            self.idle_delivered = true;
            self.stats.idle_count += 1;
            if let Some(ev) = self.events.as_mut() {
                ev.event(self.now, format_args!("idle"));
            }
            self.stack.handle_idle(self.now);
            self.drain();
            return true;
        }
        let completion_at = self.next_delivery();
        let timeout_at = self.stack.poll_timeout();
        let completion_first = match (completion_at, timeout_at) {
            (Some(c), Some(t)) => c <= t,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (None, None) => return false,
        };
        if completion_first {
            self.now = self.now.max(completion_at.expect("some"));
            self.complete_one();
        } else {
            self.now = self.now.max(timeout_at.expect("some"));
            self.stats.timeout_count += 1;
            if let Some(ev) = self.events.as_mut() {
                ev.timeout(self.now, timeout_at.expect("some"));
            }
            self.stack.handle_timeout(self.now);
            self.drain();
            if self.lower_in_flight_count() > 0 || !self.upper_outstanding.is_empty() {
                self.idle_delivered = false;
            }
        }
        true
    }

    fn complete_one(&mut self) {
        let tag = self.timing.complete(self.now, &mut self.rng).expect("a completion was due");
        let data = if self.payloads.is_empty() { None } else { self.payloads.remove(&tag) };
        let req = self.lower.remove(tag).expect("timing completes what was submitted").into_request(data);
        self.stats.lower_count += 1;
        let selected =
            (self.fail_lower_writes && req.op.is_modify()) || (self.fail_lower_reads && req.op == Op::Read);
        let fail = selected && self.lower_failures_left != Some(0);
        if fail {
            if let Some(n) = self.lower_failures_left.as_mut() {
                *n -= 1;
            }
        }
        if let Some(ev) = self.events.as_mut() {
            ev.lower(self.now, "lo-", &req);
        }
        if let Some(d) = self.dispatch.as_mut() {
            let lane = d.lane_of.remove(&tag).expect("a request at the device has a lane");
            d.context = Context::Lane(lane);
        }
        let completion = if fail {
            let e = if req.op == Op::Read { layoutd_core::IoError::Io } else { self.lower_write_error };
            Completion::err(req.id, e)
        } else {
            execute(&*self.device, &req, self.with_data)
        };
        self.stack.handle_completion(self.now, completion);
        self.drain();
        if self.is_quiet() {
            self.idle_delivered = false;
        }
    }

    /// Steps at most `steps_max` times; returns the steps taken. Stops early
    /// when nothing is left to do.
    pub fn drive_bounded(&mut self, steps_max: u64) -> u64 {
        for i in 0..steps_max {
            if !self.step() {
                return i;
            }
        }
        steps_max
    }

    /// Steps until the upper request `id` completes (bounded), returning its
    /// completion. Other completions stay queued.
    pub fn wait_for(&mut self, id: ReqId) -> Completion {
        for _ in 0..10_000_000u64 {
            if let Some(i) = self.completions.iter().position(|c| c.id == id) {
                return self.completions.remove(i).expect("present");
            }
            assert!(self.step(), "request {id:?} can never complete (seed {})", self.seed);
        }
        panic!("request {id:?} did not complete within the step bound (seed {})", self.seed);
    }

    /// Submits and waits: a synchronous call for tests.
    pub fn call(&mut self, req: Request) -> Completion {
        let id = self.submit(req);
        self.wait_for(id)
    }

    /// Synchronous read of `length_bytes` at `offset_bytes`.
    pub fn read(&mut self, offset_bytes: u64, length_bytes: u32) -> Completion {
        self.call(Request::new(ReqId(0), Op::Read, offset_bytes, length_bytes))
    }

    /// Synchronous write.
    pub fn write(&mut self, offset_bytes: u64, data: Vec<u8>) -> Completion {
        self.call(Request::write(ReqId(0), offset_bytes, Bytes::from(data)))
    }

    /// Synchronous flush.
    pub fn flush(&mut self) -> Completion {
        self.call(Request::new(ReqId(0), Op::Flush, 0, 0))
    }

    /// Drives the stack until it is ready (format or recovery done). If it
    /// stalls, the error gives each layer's own reason (its `error=` status
    /// key, `target: reason`), or every layer's whole status when none says.
    pub fn bring_up(&mut self) -> Result<(), String> {
        for _ in 0..100_000_000u64 {
            if self.stack.is_ready() {
                return Ok(());
            }
            if !self.step() {
                let layers = self.stack.layer_statuses();
                let reasons: Vec<String> = layers
                    .iter()
                    .flat_map(|st| {
                        st.config.iter().filter(|(k, _)| k == "error").map(move |(_, v)| {
                            if v.starts_with(&st.target) {
                                v.clone()
                            } else {
                                format!("{}: {v}", st.target)
                            }
                        })
                    })
                    .collect();
                if reasons.is_empty() {
                    let all: Vec<String> = layers.iter().map(|s| s.to_string()).collect();
                    return Err(format!(
                        "the stack stalled before it was ready. Stack status: {}",
                        all.join(" | ")
                    ));
                }
                return Err(reasons.join("; "));
            }
        }
        Err("the stack did not become ready within 100 million steps".into())
    }

    /// Steps until nothing is left to do (bounded); returns steps taken.
    pub fn settle(&mut self) -> u64 {
        let steps = self.drive_bounded(10_000_000);
        assert!(steps < 10_000_000, "harness did not settle (seed {})", self.seed);
        steps
    }

    /// Advances the clock to `t` handling every event up to it.
    pub fn run_until(&mut self, t: Instant) {
        while self.next_event().is_some_and(|e| e <= t) || (self.is_quiet() && !self.idle_delivered) {
            self.step();
        }
        self.now = self.now.max(t);
    }
}
