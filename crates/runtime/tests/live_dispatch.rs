//! The harness's model of the live runtime's submission
//! (`det::LiveDispatch`, `layoutd sim --live-dispatch`): live, each thread
//! has one lower request at the device at a time, so a client's read that
//! arrives while a background step's requests are being performed waits at
//! the arm only for the ones already there (one per executor thread), not
//! for the whole step; and a client's own requests reach the device one
//! after another. Without the model every emitted request is at the device
//! at once. Order only, on a one-arm FIFO device of 10 ms per request.

use layoutd_core::{Completion, Instant, Op, ReqId, Request, Status, Target};
use layoutd_disk::MemDevice;
use layoutd_runtime::det::{Harness, LiveDispatch, Timing};
use rand_chacha::ChaCha8Rng;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

const MS: u64 = 1_000_000;
const PAGE: u64 = 4096;
/// Where the client's reads go below (in pages); background reads go below it.
const CLIENT_PAGE: u64 = 100;

/// One arm, FIFO, 10 ms per request; notes each request's arrival (page, ms).
struct OneArm {
    queue: VecDeque<(u64, Instant)>,
    free_at: Instant,
    arrivals: Arc<Mutex<Vec<(u64, u64)>>>,
}

impl Timing for OneArm {
    fn submit(&mut self, now: Instant, req: &Request, tag: u64, _rng: &mut ChaCha8Rng) {
        self.arrivals.lock().unwrap().push((req.offset_bytes / PAGE, now.as_ns() / MS));
        self.queue.push_back((tag, now));
    }
    fn next_completion(&self) -> Option<Instant> {
        self.queue.front().map(|&(_, at)| at.max(self.free_at).add_ns(10 * MS))
    }
    fn complete(&mut self, now: Instant, _rng: &mut ChaCha8Rng) -> Option<u64> {
        self.free_at = now;
        self.queue.pop_front().map(|(tag, _)| tag)
    }
    fn busy(&self) -> bool {
        !self.queue.is_empty()
    }
}

/// At its first idle report, a background step of `burst` reads (pages
/// 0..burst) at once, as a log re-sequencing pass reads its group's runs.
/// A client read is two lower reads (pages CLIENT_PAGE and the next one).
/// Notes the page of each lower completion, in order.
struct Burst {
    burst: u64,
    started: bool,
    lower: VecDeque<Request>,
    upper: VecDeque<Completion>,
    next_lower: u64,
    /// Lower id -> (client request, lower reads of it still out).
    client: Vec<(u64, ReqId)>,
    completed: Arc<Mutex<Vec<u64>>>,
}

impl Burst {
    fn emit(&mut self, page: u64, background: bool) -> u64 {
        let id = self.next_lower;
        self.next_lower += 1;
        let mut r = Request::new(ReqId(id), Op::Read, page * PAGE, PAGE as u32);
        r.background = background;
        self.lower.push_back(r);
        id
    }
}

impl Target for Burst {
    fn name(&self) -> &'static str {
        "burst"
    }
    fn size_bytes(&self) -> u64 {
        1 << 20
    }
    fn handle_request(&mut self, _now: Instant, req: Request) {
        for page in [CLIENT_PAGE, CLIENT_PAGE + 1] {
            let id = self.emit(page, false);
            self.client.push((id, req.id));
        }
    }
    fn handle_completion(&mut self, _now: Instant, c: Completion) {
        let page = if let Some(i) = self.client.iter().position(|&(l, _)| l == c.id.0) {
            let (_, up) = self.client.swap_remove(i);
            if !self.client.iter().any(|&(_, u)| u == up) {
                self.upper.push_back(Completion::ok(up));
            }
            CLIENT_PAGE
        } else {
            c.id.0
        };
        self.completed.lock().unwrap().push(page);
    }
    fn handle_idle(&mut self, _now: Instant) {
        if !self.started {
            self.started = true;
            for page in 0..self.burst {
                self.emit(page, false);
            }
        }
    }
    fn poll_lower(&mut self) -> Option<Request> {
        self.lower.pop_front()
    }
    fn poll_upper(&mut self) -> Option<Completion> {
        self.upper.pop_front()
    }
    fn status(&self) -> Status {
        Status::default()
    }
}

struct Run {
    /// Background reads completed before the client's request.
    background_before_client: usize,
    /// (page, ms) of each lower request's arrival at the device.
    arrivals: Vec<(u64, u64)>,
}

/// A burst of 8 background reads at the first idle report (t = 0), a
/// client read at 15 ms.
fn run(dispatch: Option<LiveDispatch>) -> Run {
    let completed = Arc::new(Mutex::new(Vec::new()));
    let arrivals = Arc::new(Mutex::new(Vec::new()));
    let target = Burst {
        burst: 8,
        started: false,
        lower: VecDeque::new(),
        upper: VecDeque::new(),
        next_lower: 0,
        client: Vec::new(),
        completed: completed.clone(),
    };
    let timing = OneArm { queue: VecDeque::new(), free_at: Instant::ZERO, arrivals: arrivals.clone() };
    let mut h = Harness::new(Box::new(target), Arc::new(MemDevice::new(1 << 20)), timing, 1);
    h.dispatch = dispatch;
    assert!(h.idle_pending());
    h.step();
    h.run_until(Instant::ZERO.add_ns(15 * MS));
    assert!(!h.is_quiet(), "the burst is still being performed");
    let c = h.read(0, 4096);
    assert!(c.result.is_ok());
    let done = completed.lock().unwrap().clone();
    let background_before_client = done.iter().take_while(|&&p| p != CLIENT_PAGE).count();
    h.settle();
    assert_eq!(completed.lock().unwrap().len(), 10, "every lower read completes");
    assert!(h.is_quiet());
    let arrivals = arrivals.lock().unwrap().clone();
    Run { background_before_client, arrivals }
}

#[test]
fn a_client_read_waits_only_for_the_background_reads_the_executor_threads_have_at_the_arm() {
    // Without the model, all 8 are queued at the arm at 0 ms: the client
    // waits for every one.
    assert_eq!(run(None).background_before_client, 8);
    // Live with 4 executor threads: at 15 ms read 0 is done and reads 1-4
    // are at the arm (read 4 arrived at 10 ms, when read 0's thread took
    // it); the client's first read queues behind those four.
    let four = run(Some(LiveDispatch::new(4)));
    assert_eq!(four.background_before_client, 5);
    let arrivals_of = |r: &Run, page: u64| r.arrivals.iter().filter(|a| a.0 == page).map(|a| a.1).next();
    assert_eq!(arrivals_of(&four, 4), Some(10), "the fifth read when the first completes");
    // One thread: one background read at the arm at a time.
    assert_eq!(run(Some(LiveDispatch::new(1))).background_before_client, 2);
}

#[test]
fn a_clients_own_lower_requests_reach_the_device_one_after_another() {
    let at =
        |r: &Run| -> Vec<u64> { r.arrivals.iter().filter(|a| a.0 >= CLIENT_PAGE).map(|a| a.1).collect() };
    let all_at_once = run(None);
    assert_eq!(at(&all_at_once), [15, 15], "both at the device when the request arrives");
    let live = run(Some(LiveDispatch::new(4)));
    let live_at = at(&live);
    assert_eq!(live_at[0], 15);
    assert!(live_at[1] > live_at[0], "the second when the first completed: {live_at:?}");
}
