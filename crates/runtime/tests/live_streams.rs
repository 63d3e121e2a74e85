//! The live runtime gives targets the stream ids the simulator gives them
//! (issue 8, item 7): the connection is the base stream, and interleaved
//! sequential runs within it get their own streams, by the same detector.

use layoutd_core::streams::Detector;
use layoutd_core::{Completion, Instant, Op, ReqId, Request, Status, StreamId, Target};
use layoutd_disk::MemDevice;
use layoutd_runtime::live::LiveVolume;
use std::sync::{Arc, Mutex};

/// Completes every request at once, noting the stream it came with.
struct Streams {
    seen: Arc<Mutex<Vec<StreamId>>>,
    done: Vec<Completion>,
}

impl Target for Streams {
    fn name(&self) -> &'static str {
        "streams"
    }
    fn size_bytes(&self) -> u64 {
        1 << 30
    }
    fn handle_request(&mut self, _now: Instant, req: Request) {
        self.seen.lock().unwrap().push(req.stream);
        self.done.push(Completion::ok(req.id));
    }
    fn handle_completion(&mut self, _now: Instant, _c: Completion) {}
    fn poll_lower(&mut self) -> Option<Request> {
        None
    }
    fn poll_upper(&mut self) -> Option<Completion> {
        self.done.pop()
    }
    fn status(&self) -> Status {
        Status::default()
    }
}

#[test]
fn live_requests_get_the_simulators_stream_ids() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let vol = LiveVolume::start(
        Box::new(Streams { seen: seen.clone(), done: Vec::new() }),
        Arc::new(MemDevice::new(1 << 20)),
        None,
        None,
    );
    // One connection (base stream 5) reading two files at once, then a
    // second connection.
    let mut reqs = Vec::new();
    for i in 0..4u64 {
        reqs.push((5u32, i * 4096));
        reqs.push((5, (512 << 20) + i * 4096));
    }
    reqs.push((6, 0));
    let mut sim = Detector::new(true);
    let want: Vec<StreamId> = reqs.iter().map(|&(c, o)| sim.classify(u64::from(c), o, 4096)).collect();
    for &(c, o) in &reqs {
        let mut r = Request::new(ReqId(0), Op::Read, o, 4096);
        r.stream = StreamId(c);
        assert_eq!(vol.submit(r).result, Ok(()));
    }
    let got = seen.lock().unwrap().clone();
    assert_eq!(got, want);
    assert_ne!(got[2], got[3], "the two interleaved runs are told apart");
    vol.stop();
}
