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
/// 0..burst) at once, as a log re-sequencing pass reads its group's runs
/// (with `from_completion`: one read of page FIRST_PAGE first, and the
/// burst when it completes, as a pass that follows another). A client read
/// is two lower reads (pages CLIENT_PAGE and the next one). Notes the page
/// of each lower completion, in order (CLIENT_PAGE for both client reads).
struct Burst {
    burst: u64,
    from_completion: bool,
    started: bool,
    lower: VecDeque<Request>,
    upper: VecDeque<Completion>,
    /// Each lower request's page and client request, by lower id.
    pages: Vec<(u64, Option<ReqId>)>,
    completed: Arc<Mutex<Vec<u64>>>,
}

const FIRST_PAGE: u64 = 50;

impl Burst {
    fn emit(&mut self, page: u64, client: Option<ReqId>) {
        let id = self.pages.len() as u64;
        self.pages.push((page, client));
        self.lower.push_back(Request::new(ReqId(id), Op::Read, page * PAGE, PAGE as u32));
    }

    fn emit_burst(&mut self) {
        for page in 0..self.burst {
            self.emit(page, None);
        }
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
        self.emit(CLIENT_PAGE, Some(req.id));
        self.emit(CLIENT_PAGE + 1, Some(req.id));
    }
    fn handle_completion(&mut self, _now: Instant, c: Completion) {
        let (page, client) = std::mem::replace(&mut self.pages[c.id.0 as usize], (u64::MAX, None));
        if let Some(up) = client {
            if !self.pages.iter().any(|&(_, u)| u == Some(up)) {
                self.upper.push_back(Completion::ok(up));
            }
        }
        if page == FIRST_PAGE {
            self.emit_burst();
        }
        self.completed.lock().unwrap().push(page.min(CLIENT_PAGE));
    }
    fn handle_idle(&mut self, _now: Instant) {
        if !self.started {
            self.started = true;
            if self.from_completion {
                self.emit(FIRST_PAGE, None);
            } else {
                self.emit_burst();
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

/// A burst of 8 background reads at the first idle report (t = 0; with
/// `from_completion` at 10 ms, when the first read completes), a client
/// read at 15 ms.
fn run(dispatch: Option<LiveDispatch>, from_completion: bool) -> Run {
    let completed = Arc::new(Mutex::new(Vec::new()));
    let arrivals = Arc::new(Mutex::new(Vec::new()));
    let target = Burst {
        burst: 8,
        from_completion,
        started: false,
        lower: VecDeque::new(),
        upper: VecDeque::new(),
        pages: Vec::new(),
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
    assert_eq!(
        completed.lock().unwrap().len(),
        10 + usize::from(from_completion),
        "every lower read completes"
    );
    assert!(h.is_quiet());
    let arrivals = arrivals.lock().unwrap().clone();
    Run { background_before_client, arrivals }
}

#[test]
fn a_client_read_waits_only_for_the_background_reads_the_executor_threads_have_at_the_arm() {
    // Without the model, all 8 are queued at the arm at 0 ms: the client
    // waits for every one.
    assert_eq!(run(None, false).background_before_client, 8);
    // Live with 4 executor threads: at 15 ms read 0 is done and reads 1-4
    // are at the arm (read 4 arrived at 10 ms, when read 0's thread took
    // it); the client's first read queues behind those four.
    let four = run(Some(LiveDispatch::new(4)), false);
    assert_eq!(four.background_before_client, 5);
    let arrivals_of = |r: &Run, page: u64| r.arrivals.iter().filter(|a| a.0 == page).map(|a| a.1).next();
    assert_eq!(arrivals_of(&four, 4), Some(10), "the fifth read when the first completes");
    // One thread: one background read at the arm at a time.
    assert_eq!(run(Some(LiveDispatch::new(1)), false).background_before_client, 2);
}

#[test]
fn a_clients_own_lower_requests_reach_the_device_one_after_another() {
    let at =
        |r: &Run| -> Vec<u64> { r.arrivals.iter().filter(|a| a.0 >= CLIENT_PAGE).map(|a| a.1).collect() };
    let all_at_once = run(None, false);
    assert_eq!(at(&all_at_once), [15, 15], "both at the device when the request arrives");
    let live = run(Some(LiveDispatch::new(4)), false);
    let live_at = at(&live);
    assert_eq!(live_at[0], 15);
    assert!(live_at[1] > live_at[0], "the second when the first completed: {live_at:?}");
}

#[test]
fn requests_a_background_completion_emits_go_to_every_free_executor_thread() {
    // The burst emitted by the first read's completion at 10 ms: the
    // completing thread keeps one, the three free threads take three, so
    // four are at the arm at 10 ms and the client's first read (15 ms)
    // queues behind them: the first read and four of the burst before it.
    let four = run(Some(LiveDispatch::new(4)), true);
    let at_10: Vec<u64> = four.arrivals.iter().filter(|a| a.1 == 10).map(|a| a.0).collect();
    assert_eq!(at_10, [0, 1, 2, 3]);
    assert_eq!(four.background_before_client, 5);
    // One thread: one of the burst at the arm at a time.
    let one = run(Some(LiveDispatch::new(1)), true);
    assert_eq!(one.background_before_client, 2);
    assert_eq!(run(None, true).background_before_client, 9, "without the model, all of it");
}

#[test]
fn a_completion_reaches_the_stack_the_delivery_time_after_the_device_completes_it() {
    // No burst: the client's two reads alone, from 15 ms on the 10 ms arm.
    let finish = |delivery_ns: u64| -> (u64, Vec<(u64, u64)>) {
        let arrivals = Arc::new(Mutex::new(Vec::new()));
        let target = Burst {
            burst: 0,
            from_completion: false,
            started: true,
            lower: VecDeque::new(),
            upper: VecDeque::new(),
            pages: Vec::new(),
            completed: Arc::new(Mutex::new(Vec::new())),
        };
        let timing = OneArm { queue: VecDeque::new(), free_at: Instant::ZERO, arrivals: arrivals.clone() };
        let mut h = Harness::new(Box::new(target), Arc::new(MemDevice::new(1 << 20)), timing, 1);
        let mut d = LiveDispatch::new(4);
        d.delivery_ns = delivery_ns;
        h.dispatch = Some(d);
        h.run_until(Instant::ZERO.add_ns(15 * MS));
        assert!(h.read(0, 4096).result.is_ok());
        let done_ms = h.now.as_ns() / MS;
        let arrivals = arrivals.lock().unwrap().clone();
        (done_ms, arrivals)
    };
    // The first read completes on the device at 25 ms; the stack sees it
    // (and the thread sends the second read) at 25, or at 26 with 1 ms of
    // delivery; the second completes 10 ms later, seen as late again.
    assert_eq!(finish(0), (35, vec![(CLIENT_PAGE, 15), (CLIENT_PAGE + 1, 25)]));
    assert_eq!(finish(MS), (37, vec![(CLIENT_PAGE, 15), (CLIENT_PAGE + 1, 26)]));
}
