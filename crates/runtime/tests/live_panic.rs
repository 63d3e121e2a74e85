//! A target that panics must not hang anyone: every waiting request fails
//! with EIO, and every later request fails with EIO at once.

use layoutd_core::{Completion, Instant, IoError, Op, ReqId, Request, Status, Target};
use layoutd_disk::MemDevice;
use layoutd_runtime::live::LiveVolume;
use std::sync::{mpsc, Arc};
use std::time::Duration;

/// Holds the first request forever; panics on the second.
struct HoldThenPanic {
    held: Option<Request>,
    parked: mpsc::Sender<()>,
}

impl Target for HoldThenPanic {
    fn name(&self) -> &'static str {
        "hold-then-panic"
    }
    fn size_bytes(&self) -> u64 {
        1 << 20
    }
    fn handle_request(&mut self, _now: Instant, req: Request) {
        if self.held.is_some() {
            panic!("planted bug");
        }
        self.held = Some(req);
        self.parked.send(()).unwrap();
    }
    fn handle_completion(&mut self, _now: Instant, _c: Completion) {}
    fn poll_lower(&mut self) -> Option<Request> {
        None
    }
    fn poll_upper(&mut self) -> Option<Completion> {
        None
    }
    fn status(&self) -> Status {
        Status::default()
    }
}

#[test]
fn a_panicking_target_fails_waiters_and_later_requests_with_eio() {
    let (parked_tx, parked_rx) = mpsc::channel();
    let target = HoldThenPanic { held: None, parked: parked_tx };
    let vol = LiveVolume::start(Box::new(target), Arc::new(MemDevice::new(1 << 20)), None, None);
    let (tx, rx) = mpsc::channel();
    let v = vol.clone();
    std::thread::spawn(move || tx.send(v.submit(Request::new(ReqId(0), Op::Read, 0, 512))).unwrap());
    parked_rx.recv().unwrap(); // the first request is now held by the target
    let second = vol.submit(Request::new(ReqId(0), Op::Read, 512, 512));
    assert_eq!(second.result, Err(IoError::Io));
    // A watchdog, not a performance bound: without the fix this waits forever.
    let first =
        rx.recv_timeout(Duration::from_secs(60)).expect("the held request was never failed: it hangs");
    assert_eq!(first.result, Err(IoError::Io));
    let third = vol.submit(Request::new(ReqId(0), Op::Read, 0, 512));
    assert_eq!(third.result, Err(IoError::Io));
}
