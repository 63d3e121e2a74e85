//! The live runtime never makes a client wait for I/O that is not its own
//! (issue 8, item 9). A 4 KiB write whose absorption fills a dcd segment
//! used to be acknowledged only after the whole segment write (about 50 ms
//! under `--emulate`), so "immediate report" was lost for one write in 32.
//! Here the segment write is held below by a gate: the write that sealed the
//! segment must be acknowledged while the gate is still closed, and a flush
//! must wait for the gate. The test asserts the order of events, not time.

use layoutd_core::{Op, OpenMode, ReqId, Request};
use layoutd_disk::{BlockDevice, MemDevice};
use layoutd_runtime::det::{Harness, ZeroLatency};
use layoutd_runtime::live::LiveVolume;
use layoutd_runtime::testkit::{bring_up, stack_from_toml};
use std::io;
use std::sync::{mpsc, Arc, Condvar, Mutex};
use std::time::Duration;

const DEVICE_BYTES: u64 = 1 << 20;
/// The log region: writes below this offset are log writes.
const LOG_BYTES: u64 = 64 << 10;

/// What a test device does before a read or a write reaches memory.
trait Hook: Send + Sync {
    fn before_read(&self, _offset_bytes: u64) -> io::Result<()> {
        Ok(())
    }
    fn before_write(&self, _offset_bytes: u64) {}
}

/// A memory device with a [`Hook`] (its state reachable through `Deref`).
struct Hooked<H> {
    inner: MemDevice,
    hook: H,
}

impl<H> std::ops::Deref for Hooked<H> {
    type Target = H;
    fn deref(&self) -> &H {
        &self.hook
    }
}

impl<H: Hook> BlockDevice for Hooked<H> {
    fn size_bytes(&self) -> u64 {
        self.inner.size_bytes()
    }
    fn read_at(&self, buf: &mut [u8], offset_bytes: u64) -> io::Result<()> {
        self.hook.before_read(offset_bytes)?;
        self.inner.read_at(buf, offset_bytes)
    }
    fn write_at(&self, buf: &[u8], offset_bytes: u64) -> io::Result<()> {
        self.hook.before_write(offset_bytes);
        self.inner.write_at(buf, offset_bytes)
    }
    fn flush(&self) -> io::Result<()> {
        self.inner.flush()
    }
    fn trim(&self, offset_bytes: u64, length_bytes: u64) -> io::Result<()> {
        self.inner.trim(offset_bytes, length_bytes)
    }
    fn write_zeroes(&self, offset_bytes: u64, length_bytes: u64) -> io::Result<()> {
        self.inner.write_zeroes(offset_bytes, length_bytes)
    }
}

/// Log writes wait for a gate to open.
struct Gated {
    open: Mutex<bool>,
    cv: Condvar,
    /// Log writes that reached the device (after the gate).
    log_writes_done: Mutex<u64>,
}

impl Gated {
    fn set_open(&self, open: bool) {
        *self.open.lock().unwrap() = open;
        self.cv.notify_all();
    }
    fn log_writes_done(&self) -> u64 {
        *self.log_writes_done.lock().unwrap()
    }
}

impl Hook for Gated {
    fn before_write(&self, offset_bytes: u64) {
        if offset_bytes < LOG_BYTES {
            let mut open = self.open.lock().unwrap();
            while !*open {
                open = self.cv.wait(open).unwrap();
            }
            drop(open);
            *self.log_writes_done.lock().unwrap() += 1;
        }
    }
}

/// A watchdog for a call that would block forever without the fix; not a
/// performance bound.
fn within_a_minute<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || tx.send(f()).unwrap());
    rx.recv_timeout(Duration::from_secs(60)).expect("blocked: it waited for I/O that was not its own")
}

#[test]
fn the_write_that_seals_a_segment_is_acknowledged_before_the_segment_write() {
    // 8 one-sector slots per segment; idle destage far away.
    let cfg = "version = 1\n[[layer]]\ntarget = \"dcd\"\nlog_length = \"64KiB\"\nsegment_bytes = 4096\n\
               slot_bytes = 512\nbuffer_count = 4\nbuffer_delay_ms = 600000\nbypass_bytes = 4096\n\
               idle_ms_max = 600000\nidle_ms_min = 600000\n";
    let dev = Arc::new(Hooked {
        inner: MemDevice::new(DEVICE_BYTES),
        hook: Gated { open: Mutex::new(true), cv: Condvar::new(), log_writes_done: Mutex::new(0) },
    });
    let mut h = Harness::new(
        stack_from_toml(cfg, DEVICE_BYTES, OpenMode::format(1)),
        dev.clone(),
        ZeroLatency::default(),
        1,
    );
    bring_up(&mut h);
    let vol = LiveVolume::start(h.into_stack(), dev.clone(), None, None);
    let before = dev.log_writes_done();
    dev.set_open(false);
    // Eight 512-byte writes fill the segment; the eighth seals it and its
    // write is emitted during that request's step.
    for i in 0..8u64 {
        let v = vol.clone();
        let c = within_a_minute(move || {
            v.submit(Request::write(ReqId(0), i * 512, bytes::Bytes::from(vec![i as u8 + 1; 512])))
        });
        assert_eq!(c.result, Ok(()), "write {i}");
    }
    assert_eq!(
        dev.log_writes_done(),
        before,
        "every write was acknowledged with the segment write still held"
    );
    // A flush needs the segment write: it completes only once the gate opens.
    // (The flush thread notes how many log writes had passed the gate when
    // its flush returned: an order of events, not a time.)
    let (tx, rx) = mpsc::channel();
    let (v, d) = (vol.clone(), dev.clone());
    std::thread::spawn(move || {
        let c = v.submit(Request::new(ReqId(0), Op::Flush, 0, 0));
        tx.send((c, d.log_writes_done())).unwrap()
    });
    dev.set_open(true);
    let (flushed, log_writes_at_flush) =
        rx.recv_timeout(Duration::from_secs(60)).expect("the flush completes once the gate opens");
    assert_eq!(flushed.result, Ok(()));
    assert!(log_writes_at_flush > before, "the flush returned only after the segment reached the log");
    // And the data reads back.
    let c = vol.submit(Request::new(ReqId(0), Op::Read, 0, 4096));
    let want: Vec<u8> = (0..8u8).flat_map(|i| vec![i + 1; 512]).collect();
    assert_eq!(c.data.as_deref(), Some(&want[..]));
    vol.stop();
}

/// The live runtime delivers idle time after a request that completed
/// without lower I/O, as the simulator does. Before, only a lower
/// completion could deliver it: after a read of unwritten blocks (a log
/// answers it with zeroes, no I/O), the background scheduler stayed busy
/// and the log's idle re-sequencing never started (live runs re-sequenced a
/// third of what their replays did). Here the last request before the
/// pause is such a read; re-sequencing must start in the pause.
#[test]
fn idle_work_starts_after_a_request_that_needed_no_lower_io() {
    let cfg = "version = 1\n[[layer]]\ntarget = \"log\"\nsegment_bytes = \"32KiB\"\nover_provision_pct = 20\n\
               policy = \"greedy\"\nfree_segments_min = 1\nfree_segments_target = 2\nresequence_idle_ms = 1\n";
    let dev = Arc::new(MemDevice::new(DEVICE_BYTES));
    let mut h = Harness::new(
        stack_from_toml(cfg, DEVICE_BYTES, OpenMode::format(1)),
        dev.clone() as Arc<dyn BlockDevice>,
        ZeroLatency::default(),
        1,
    );
    bring_up(&mut h);
    let vol = LiveVolume::start(h.into_stack(), dev.clone() as Arc<dyn BlockDevice>, None, None);
    // Blocks 0..16 written backwards: their group is out of logical order.
    for block in (0..16u64).rev() {
        let c = vol.submit(Request::write(
            ReqId(0),
            block * 4096,
            bytes::Bytes::from(vec![block as u8 + 1; 4096]),
        ));
        assert_eq!(c.result, Ok(()), "write {block}");
    }
    assert_eq!(vol.submit(Request::new(ReqId(0), Op::Flush, 0, 0)).result, Ok(()));
    // The last request: a read of blocks never written (no lower I/O).
    let c = vol.submit(Request::new(ReqId(0), Op::Read, 64 * 4096, 4096));
    assert_eq!(c.data.as_deref(), Some(&[0u8; 4096][..]));
    let passes = |reply: &str| -> u64 {
        reply
            .split_whitespace()
            .find_map(|kv| kv.strip_prefix("resequence_passes_count="))
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no resequence_passes_count in {reply}"))
    };
    let v = vol.clone();
    let started = within_a_minute(move || loop {
        let n = passes(&v.message("status").expect("status"));
        if n > 0 {
            return n;
        }
        std::thread::sleep(Duration::from_millis(5));
    });
    assert!(started > 0);
    // The data is where it was written.
    for block in [0u64, 7, 15] {
        let c = vol.submit(Request::new(ReqId(0), Op::Read, block * 4096, 4096));
        assert_eq!(c.data.as_deref(), Some(&vec![block as u8 + 1; 4096][..]), "block {block}");
    }
    vol.stop();
}

/// The read at page 1 waits until the read at page 2 has started (or
/// gives up with an error after a minute: a watchdog, not a performance
/// bound).
struct Pair {
    second_started: Mutex<bool>,
    cv: Condvar,
}

impl Hook for Pair {
    fn before_read(&self, offset_bytes: u64) -> io::Result<()> {
        match offset_bytes / 4096 {
            1 => {
                let g = self.second_started.lock().unwrap();
                let (g, _) = self.cv.wait_timeout_while(g, Duration::from_secs(60), |s| !*s).unwrap();
                if !*g {
                    return Err(io::Error::other(
                        "the second read never started while the first was performed",
                    ));
                }
            }
            2 => {
                *self.second_started.lock().unwrap() = true;
                self.cv.notify_all();
            }
            _ => {}
        }
        Ok(())
    }
}

/// On `go`, one background read (page 0); its completion emits two more at
/// once (pages 1 and 2), as a log pass's completion emits the next pass's
/// reads. Counts the completions that succeeded.
struct FanOut {
    lower: std::collections::VecDeque<Request>,
    ok: Arc<Mutex<Vec<u64>>>,
}

impl FanOut {
    fn read(&mut self, page: u64) {
        let mut r = Request::new(ReqId(page), Op::Read, page * 4096, 4096);
        r.background = true;
        self.lower.push_back(r);
    }
}

impl layoutd_core::Target for FanOut {
    fn name(&self) -> &'static str {
        "fanout"
    }
    fn size_bytes(&self) -> u64 {
        DEVICE_BYTES
    }
    fn handle_request(&mut self, _now: layoutd_core::Instant, _req: Request) {
        unreachable!("no client requests in this test")
    }
    fn handle_completion(&mut self, _now: layoutd_core::Instant, c: layoutd_core::Completion) {
        if c.result.is_ok() {
            self.ok.lock().unwrap().push(c.id.0);
        }
        if c.id.0 == 0 {
            self.read(1);
            self.read(2);
        }
    }
    fn poll_lower(&mut self) -> Option<Request> {
        self.lower.pop_front()
    }
    fn poll_upper(&mut self) -> Option<layoutd_core::Completion> {
        None
    }
    fn message(&mut self, _now: layoutd_core::Instant, _msg: &str) -> Result<String, String> {
        self.read(0);
        Ok("started".into())
    }
    fn status(&self) -> layoutd_core::Status {
        layoutd_core::Status::default()
    }
}

/// Requests a background completion emits together reach the device
/// together (session 27): an executor thread used to perform them one
/// after another, so under `--emulate` each strided read of a log pass
/// arrived a thread turnaround (about 0.15 ms) after the one before and
/// missed a revolution. Here the first of the two cannot finish until the
/// second has started: with one thread performing both it never does.
#[test]
fn requests_a_background_completion_emits_together_are_performed_together() {
    let ok = Arc::new(Mutex::new(Vec::new()));
    let dev = Arc::new(Hooked {
        inner: MemDevice::new(DEVICE_BYTES),
        hook: Pair { second_started: Mutex::new(false), cv: Condvar::new() },
    });
    let vol = LiveVolume::start(
        Box::new(FanOut { lower: Default::default(), ok: ok.clone() }),
        dev as Arc<dyn BlockDevice>,
        None,
        None,
    );
    assert_eq!(vol.message("go").as_deref(), Ok("started"));
    let seen = ok.clone();
    let mut done = within_a_minute(move || loop {
        let v = seen.lock().unwrap().clone();
        if v.len() == 3 {
            return v;
        }
        std::thread::sleep(Duration::from_millis(5));
    });
    done.sort_unstable();
    assert_eq!(done, [0, 1, 2], "all three reads succeeded");
    vol.stop();
}
