//! The live runtime: the same targets, driven by real threads and real I/O.
//!
//! Design ("caller runs", for the caller's own work only): the thread that
//! submits a request (an nbdkit worker) locks the stack, hands it the
//! request, takes the lower requests the stack emits, unlocks, and performs
//! the ones done on its request's behalf itself; each completion goes back
//! in under the lock, which may emit more lower work. As soon as its own
//! completion is ready it returns, handing whatever is left to the I/O
//! executor. Lower requests a target marks `background` (log segment
//! writes, destage, checkpoints) go to the executor at once: no client
//! waits for I/O that is not its own (a 4 KiB write that seals a dcd
//! segment is acknowledged without waiting for the segment write), and the
//! common path of a pass-through stack still has no thread hand-off.
//!
//! The executor is a few threads with a queue; each performs what it takes
//! and the follow-up work its completions emit, one request at a time
//! (lower I/O is synchronous): when a completion emits several at once
//! (the reads of a log re-sequencing pass, a cleaning pass's victims),
//! the thread keeps the first and queues the rest for the other threads,
//! so they are at the device together as the target meant, not one after
//! another with the thread's turnaround between them (under `--emulate`
//! about 0.15 ms, which made strided reads miss a revolution each: a
//! 128-read pass took 1.1 s instead of 40 ms). The timer thread delivers
//! `handle_timeout` and hands the work to the executor, so it never blocks
//! on I/O. `handle_idle` is delivered when nothing is outstanding.
//!
//! If a target panics, the stack is poisoned and every later request fails
//! with EIO rather than touching state that may be inconsistent.

use crate::events::EventLog;
use layoutd_core::streams::Detector;
use layoutd_core::{Completion, Instant, IoError, Request, Target, TraceRecord};
use layoutd_disk::{execute_io, BlockDevice};
use rustc_hash::FxHashMap;
use std::collections::VecDeque;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::time::Duration;

/// Where trace records go.
pub type RecordSink = Box<dyn Write + Send>;

/// The text of a caught panic's payload.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "unknown panic".into())
}

/// Holds completions back, to emulate a slower device (see `emulate`).
pub trait Delay: Send + Sync {
    /// The runtime-clock instant (ns) at which `req`, issued at `now_ns`,
    /// should complete.
    fn completion_ns(&self, now_ns: u64, req: &Request) -> u64;

    /// Flushes whatever the delay source records (at [`LiveVolume::stop`]).
    fn flush(&self) {}
}

/// A stack being served.
pub struct LiveVolume {
    core: Mutex<Core>,
    device: Arc<dyn BlockDevice>,
    delay: Option<Arc<dyn Delay>>,
    epoch: std::time::Instant,
    timer_cv: Condvar,
    shutdown: AtomicBool,
    executor: Executor,
}

/// Threads of the I/O executor: background work of one volume is mostly a
/// few sequential streams (segment writes, destage); more threads only
/// matter with `--emulate`, where each sleeps for its request's service time.
pub const EXECUTOR_THREADS: usize = 4;

/// Lower requests waiting for an executor thread.
#[derive(Default)]
struct Executor {
    queue: Mutex<VecDeque<Request>>,
    cv: Condvar,
}

impl Executor {
    fn push_all(&self, work: impl IntoIterator<Item = Request>) {
        let mut q = self.queue.lock().unwrap_or_else(|p| p.into_inner());
        let before = q.len();
        q.extend(work);
        match q.len() - before {
            0 => {}
            1 => self.cv.notify_one(),
            _ => self.cv.notify_all(),
        }
    }
}

struct Core {
    stack: Box<dyn Target>,
    next_id: u64,
    waiters: FxHashMap<u64, Arc<Waiter>>,
    lower_in_flight_count: usize,
    records: Option<RecordSink>,
    records_write_failed: bool,
    /// The deadline the timer thread sleeps towards; wake it only when the
    /// stack wants an earlier one.
    timer_sleeps_until: Option<Instant>,
    /// Set once a target panicked: the stack's state is no longer trusted.
    failed: bool,
    /// Splits each connection's requests into streams, as the simulator
    /// does a trace's processes.
    detector: Detector,
    /// The debug event log (`LAYOUTD_EVENT_LOG`), if on.
    events: Option<EventLog>,
}

/// Where a submitter waits for its completion. With "caller runs", the
/// submitting thread usually completes its own request, so `finish` only
/// pays for a wake-up when someone is actually asleep.
#[derive(Default)]
struct Waiter {
    state: Mutex<WaiterState>,
    cv: Condvar,
}

#[derive(Default)]
struct WaiterState {
    done: Option<Completion>,
    sleeping: bool,
}

impl Waiter {
    fn wait(&self) -> Completion {
        let mut g = self.state.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if let Some(c) = g.done.take() {
                return c;
            }
            g.sleeping = true;
            g = self.cv.wait(g).unwrap_or_else(|p| p.into_inner());
        }
    }

    fn is_done(&self) -> bool {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).done.is_some()
    }

    fn finish(&self, c: Completion) {
        let mut g = self.state.lock().unwrap_or_else(|p| p.into_inner());
        assert!(g.done.is_none(), "completed twice");
        g.done = Some(c);
        if g.sleeping {
            self.cv.notify_one();
        }
    }
}

impl Core {
    /// Moves the stack's outputs: lower work into `work`, completions to
    /// their waiters, records to the sink.
    fn drain(&mut self, work: &mut VecDeque<Request>, now: Instant) {
        while let Some(r) = self.stack.poll_lower() {
            self.lower_in_flight_count += 1;
            if let Some(ev) = self.events.as_mut() {
                ev.lower(now, "lo+", &r);
            }
            work.push_back(r);
        }
        while let Some(c) = self.stack.poll_upper() {
            if let Some(ev) = self.events.as_mut() {
                ev.event(now, format_args!("done {}", c.id.0));
            }
            let w = self.waiters.remove(&c.id.0).expect("completion for a waiting request");
            w.finish(c);
        }
        while let Some(r) = self.stack.poll_record() {
            self.write_record(&r);
        }
    }

    fn write_record(&mut self, r: &TraceRecord) {
        if let Some(sink) = self.records.as_mut() {
            if writeln!(sink, "{}", r.to_line()).is_err() && !self.records_write_failed {
                self.records_write_failed = true;
                eprintln!("layoutd: writing the trace file failed; further records are lost");
            }
        }
    }

    /// Runs `f` on the stack and drains its outputs. A panic inside marks the
    /// volume failed and completes every waiting request with EIO, so no
    /// caller hangs and no later request touches the broken state.
    fn step(
        &mut self,
        work: &mut VecDeque<Request>,
        now: Instant,
        f: impl FnOnce(&mut dyn Target),
    ) -> Result<(), IoError> {
        if self.failed {
            return Err(IoError::Io);
        }
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            f(&mut *self.stack);
            self.drain(work, now);
            if let Some(ev) = self.events.as_mut() {
                ev.after(now, &*self.stack);
            }
        }));
        let Err(panic) = outcome else { return Ok(()) };
        let msg = panic_message(&*panic);
        eprintln!("layoutd: a target panicked ({msg}); the volume now fails every request with EIO");
        self.failed = true;
        work.clear();
        for (id, w) in self.waiters.drain() {
            w.finish(Completion::err(layoutd_core::ReqId(id), IoError::Io));
        }
        Err(IoError::Io)
    }

    /// Whether the timer thread must be woken to honour a new, earlier deadline.
    fn timer_needs_wake(&self) -> bool {
        match (self.stack.poll_timeout(), self.timer_sleeps_until) {
            (Some(want), Some(sleeping_until)) => want < sleeping_until,
            (Some(_), None) => true,
            (None, _) => false,
        }
    }

    fn quiet(&self) -> bool {
        self.waiters.is_empty() && self.lower_in_flight_count == 0
    }

    /// Delivers `handle_idle` if nothing is outstanding and no work is
    /// queued: after a lower completion, and after a request that completed
    /// without lower I/O (a read of unwritten blocks, a flush with nothing
    /// dirty). Without the second, the background scheduler stayed "busy"
    /// after such a request until some later lower completion, so idle
    /// work (re-sequencing, destage, replication) did not run in the gap
    /// the simulator gives it.
    fn idle_if_quiet(&mut self, work: &mut VecDeque<Request>, now: Instant) -> Result<(), IoError> {
        if self.quiet() && work.is_empty() {
            if let Some(ev) = self.events.as_mut() {
                ev.event(now, format_args!("idle"));
            }
            self.step(work, now, |stack| stack.handle_idle(now))?;
        }
        Ok(())
    }
}

impl LiveVolume {
    /// Serves `stack` over `device`. `records` receives trace records (the
    /// file gets the format header first); `delay`, if given, holds each
    /// lower completion back until the instant it names. Starts the timer thread.
    pub fn start(
        stack: Box<dyn Target>,
        device: Arc<dyn BlockDevice>,
        records: Option<RecordSink>,
        delay: Option<Arc<dyn Delay>>,
    ) -> Arc<LiveVolume> {
        let mut records = records;
        if let Some(sink) = records.as_mut() {
            let _ = writeln!(sink, "{}", TraceRecord::HEADER);
        }
        let vol = Arc::new(LiveVolume {
            core: Mutex::new(Core {
                stack,
                next_id: 0,
                waiters: FxHashMap::default(),
                lower_in_flight_count: 0,
                records,
                records_write_failed: false,
                timer_sleeps_until: None,
                failed: false,
                detector: Detector::new(true),
                events: EventLog::from_env("live"),
            }),
            device,
            delay,
            epoch: std::time::Instant::now(),
            timer_cv: Condvar::new(),
            shutdown: AtomicBool::new(false),
            executor: Executor::default(),
        });
        let weak = Arc::downgrade(&vol);
        std::thread::Builder::new()
            .name("layoutd-timer".into())
            .spawn(move || timer_loop(weak))
            .expect("spawn timer thread");
        for i in 0..EXECUTOR_THREADS {
            let weak = Arc::downgrade(&vol);
            std::thread::Builder::new()
                .name(format!("layoutd-io-{i}"))
                .spawn(move || executor_loop(weak))
                .expect("spawn executor thread");
        }
        vol
    }

    /// The size of the volume.
    pub fn size_bytes(&self) -> u64 {
        self.lock().map_or(0, |c| c.stack.size_bytes())
    }

    /// The current time on the runtime's clock.
    pub fn now(&self) -> Instant {
        Instant::from_ns(self.epoch.elapsed().as_nanos() as u64)
    }

    fn lock(&self) -> Result<MutexGuard<'_, Core>, IoError> {
        self.core.lock().map_err(|_| IoError::Io)
    }

    /// Runs one request to completion (blocking). The request's id is
    /// assigned here.
    pub fn submit(&self, mut req: Request) -> Completion {
        let waiter = Arc::new(Waiter::default());
        let mut work = VecDeque::new();
        {
            let mut core = match self.lock() {
                Ok(c) => c,
                Err(e) => return Completion::err(req.id, e),
            };
            if core.failed {
                return Completion::err(req.id, IoError::Io);
            }
            req.id = layoutd_core::ReqId(core.next_id);
            core.next_id += 1;
            req.stream = core.detector.classify(
                u64::from(req.stream.0),
                req.offset_bytes,
                u64::from(req.length_bytes),
            );
            core.waiters.insert(req.id.0, waiter.clone());
            let now = self.now();
            if let Some(ev) = core.events.as_mut() {
                ev.upper(now, &req);
            }
            // On failure the waiter has been completed with EIO.
            if core.step(&mut work, now, |stack| stack.handle_request(now, req)).is_ok() {
                let _ = core.idle_if_quiet(&mut work, now);
            }
            if core.timer_needs_wake() {
                self.timer_cv.notify_one();
            }
        }
        self.run_work(work, Some(&waiter));
        waiter.wait()
    }

    /// Performs lower I/O, feeding each completion back, until no work is
    /// left. With `own` (a client's thread): background requests, and
    /// everything once `own` is complete, go to the executor instead.
    fn run_work(&self, mut work: VecDeque<Request>, own: Option<&Waiter>) {
        while let Some(r) = work.pop_front() {
            if let Some(w) = own {
                if r.background {
                    self.executor.push_all([r]);
                    continue;
                }
                if w.is_done() {
                    self.executor.push_all(std::iter::once(r).chain(work.drain(..)));
                    return;
                }
            }
            let start = self.now();
            let due_ns = self.delay.as_ref().map(|d| d.completion_ns(start.as_ns(), &r));
            let (c, err) = execute_io(&*self.device, &r, true);
            if let Some(e) = err {
                eprintln!(
                    "layoutd: lower {:?} of {} bytes at data-area offset {} failed: {e}",
                    r.op, r.length_bytes, r.offset_bytes
                );
            }
            if let Some(due_ns) = due_ns {
                let wait_ns = due_ns.saturating_sub(self.now().as_ns());
                if wait_ns > 0 {
                    precise_sleeps();
                    std::thread::sleep(Duration::from_nanos(wait_ns));
                }
            }
            let Ok(mut core) = self.lock() else { return };
            assert!(core.lower_in_flight_count > 0);
            core.lower_in_flight_count -= 1;
            let now = self.now();
            if let Some(ev) = core.events.as_mut() {
                ev.event(
                    start,
                    format_args!(
                        "lo> {:?} {} due={:.3}",
                        r.op,
                        r.offset_bytes >> 12,
                        due_ns.unwrap_or(0) as f64 / 1e6
                    ),
                );
                ev.lower(now, "lo-", &r);
            }
            if core.step(&mut work, now, |stack| stack.handle_completion(now, c)).is_err() {
                return;
            }
            if core.idle_if_quiet(&mut work, now).is_err() {
                return;
            }
            if core.timer_needs_wake() {
                self.timer_cv.notify_one();
            }
            drop(core);
            if own.is_none() && work.len() > 1 {
                // An executor thread: one request of its own at a time,
                // the rest to the threads that are free.
                self.executor.push_all(work.drain(1..));
            }
        }
    }

    /// Delivers a runtime command to the stack ([`Target::message`]) between
    /// requests: every request completed before it has been seen by the
    /// stack, none after. Lower I/O the command starts goes to the executor.
    pub fn message(&self, text: &str) -> Result<String, String> {
        let mut work = VecDeque::new();
        let reply = {
            let mut core = self.lock().map_err(|_| "the volume's state is poisoned".to_string())?;
            let now = self.now();
            let mut reply =
                Err("the volume has failed (a target panicked); restart `layoutd serve`".to_string());
            if core.step(&mut work, now, |stack| reply = stack.message(now, text)).is_err() {
                return Err("the volume has failed (a target panicked); restart `layoutd serve`".into());
            }
            if core.timer_needs_wake() {
                self.timer_cv.notify_one();
            }
            reply
        };
        self.executor.push_all(work);
        reply
    }

    /// Where `[offset, offset + length)` lives on the bottom device, piece
    /// by piece ([`Target::map_extent`]); `None` pieces: report as data.
    pub fn map_extent(&self, offset: u64, length: u64) -> Vec<(Option<u64>, u64)> {
        match self.lock() {
            Ok(core) => core.stack.map_extent(offset, length),
            Err(_) => vec![(None, length)],
        }
    }

    /// Every layer's status, top first (the stack's own if it is a Stack).
    pub fn status(&self) -> Option<layoutd_core::Status> {
        self.lock().ok().map(|c| c.stack.status())
    }

    /// Stops the timer thread and flushes the trace sink. The caller
    /// flushes the stack first (submit a Flush) and writes the clean mark.
    pub fn stop(&self) {
        self.shutdown.store(true, Ordering::SeqCst);
        self.timer_cv.notify_all();
        self.executor.cv.notify_all();
        if let Ok(mut core) = self.lock() {
            if let Some(sink) = core.records.as_mut() {
                let _ = sink.flush();
            }
            if let Some(ev) = core.events.as_mut() {
                ev.flush();
            }
        }
        if let Some(d) = &self.delay {
            d.flush();
        }
    }
}

/// The timer slack (ns) of a thread that sleeps out emulated service
/// times: Linux lets a sleep overrun by the thread's slack (50 µs by
/// default) so that wake-ups can be batched; an emulated completion late
/// by that much lengthens every lower request by a fixed amount the model
/// does not have. Session 31, `opt-startup` run 2 on an `opt` stack: the
/// stack saw completions 0.083-0.096 ms (median) after the model's
/// instant with the default, 0.032-0.036 ms with 1 ns, and the time a
/// request was outstanding with the emulated disk idle fell from 0.32 s
/// to 0.14 s of 3.1 s (`bench/results/opt/real/README.md`). 1 ns is the
/// smallest the kernel takes.
pub const EMULATION_TIMER_SLACK_NS: u64 = 1;

/// Sets this thread's timer slack to [`EMULATION_TIMER_SLACK_NS`], once
/// per thread (nbdkit's workers and the executor's threads sleep here).
fn precise_sleeps() {
    thread_local! {
        static SET: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }
    if !SET.with(|s| s.replace(true)) {
        // SAFETY: PR_SET_TIMERSLACK takes a plain integer and changes only
        // the calling thread's slack.
        #[cfg(target_os = "linux")]
        unsafe {
            libc::prctl(libc::PR_SET_TIMERSLACK, EMULATION_TIMER_SLACK_NS as libc::c_ulong, 0, 0, 0);
        }
    }
}

/// Delivers timeouts. Holds only a weak reference so dropping the volume
/// ends the thread.
fn timer_loop(vol: Weak<LiveVolume>) {
    loop {
        let Some(v) = vol.upgrade() else { return };
        if v.shutdown.load(Ordering::SeqCst) {
            return;
        }
        let mut work = VecDeque::new();
        {
            let Ok(mut core) = v.lock() else { return };
            if core.failed {
                return;
            }
            let now = v.now();
            match core.stack.poll_timeout() {
                Some(t) if t <= now => {
                    if let Some(ev) = core.events.as_mut() {
                        ev.timeout(now, t);
                    }
                    if core.step(&mut work, now, |stack| stack.handle_timeout(now)).is_err() {
                        return;
                    }
                }
                next => {
                    let wait_ns = next.map_or(200_000_000, |t| t.ns_since(now)).min(200_000_000);
                    core.timer_sleeps_until = Some(now.add_ns(wait_ns));
                    let Ok((mut core, _)) = v.timer_cv.wait_timeout(core, Duration::from_nanos(wait_ns))
                    else {
                        return;
                    };
                    core.timer_sleeps_until = None;
                }
            }
        }
        v.executor.push_all(work);
    }
}

/// An executor thread: performs queued lower requests and what their
/// completions emit. Holds only a weak reference between requests, so
/// dropping the volume ends the thread; on `stop` it drains the queue first.
fn executor_loop(vol: Weak<LiveVolume>) {
    loop {
        let Some(v) = vol.upgrade() else { return };
        let next = {
            let mut q = v.executor.queue.lock().unwrap_or_else(|p| p.into_inner());
            if q.is_empty() && !v.shutdown.load(Ordering::SeqCst) {
                // Wake at least every 200 ms to notice a dropped volume.
                q = v
                    .executor
                    .cv
                    .wait_timeout(q, Duration::from_millis(200))
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
            }
            q.pop_front()
        };
        match next {
            Some(r) => v.run_work(VecDeque::from([r]), None),
            None if v.shutdown.load(Ordering::SeqCst) => return,
            None => {}
        }
    }
}
