//! The oracle and crash checks must catch real bugs. Each test here runs
//! them on a deliberately broken target and expects them to fail.

use layoutd_core::{Completion, Instant, Op, OpenMode, Request, Status, Target};
use layoutd_runtime::testkit::{crash_check_with, oracle_check_with, random_ops};
use rand::SeedableRng;
use std::collections::{HashMap, VecDeque};

const DEVICE_BYTES: u64 = 1 << 20;

/// A pass-through with one planted bug.
struct Broken {
    bug: Bug,
    lower: VecDeque<Request>,
    upper: VecDeque<Completion>,
    early_acked: HashMap<u64, ()>,
}

#[derive(Clone, Copy)]
enum Bug {
    /// Writes to sector 7 land on sector 8.
    Misdirect,
    /// Writes and flushes are acknowledged before the device has them.
    AckBeforeDurable,
}

impl Target for Broken {
    fn name(&self) -> &'static str {
        "broken"
    }
    fn size_bytes(&self) -> u64 {
        DEVICE_BYTES
    }
    fn handle_request(&mut self, _now: Instant, mut req: Request) {
        match self.bug {
            Bug::Misdirect
                if req.op == Op::Write && req.offset_bytes == 7 * 512 && req.length_bytes == 512 =>
            {
                req.offset_bytes = 8 * 512;
            }
            Bug::AckBeforeDurable if matches!(req.op, Op::Write | Op::Flush) => {
                self.upper.push_back(Completion::ok(req.id));
                self.early_acked.insert(req.id.0, ());
                req.fua = false;
                if req.op == Op::Flush {
                    return;
                }
            }
            _ => {}
        }
        self.lower.push_back(req);
    }
    fn handle_completion(&mut self, _now: Instant, c: Completion) {
        if self.early_acked.remove(&c.id.0).is_none() {
            self.upper.push_back(c);
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

fn broken(bug: Bug) -> impl Fn(OpenMode) -> Box<dyn Target> {
    move |_| {
        Box::new(Broken { bug, lower: VecDeque::new(), upper: VecDeque::new(), early_acked: HashMap::new() })
    }
}

#[test]
#[should_panic(expected = "sector 7")]
fn oracle_catches_a_misdirected_write() {
    let ops: Vec<_> = [(Op::Write, 7), (Op::Read, 7)]
        .into_iter()
        .map(|(op, sector)| layoutd_runtime::testkit::OpSpec {
            op,
            sector,
            sectors: 1,
            fua: false,
            stream: 0,
        })
        .collect();
    oracle_check_with(&broken(Bug::Misdirect), DEVICE_BYTES, 1, &ops, 1);
}

#[test]
#[should_panic(expected = "after a crash")]
fn crash_check_catches_acknowledging_before_durable() {
    // With the bug, a flush completes while the writes it covers may still
    // be waiting below: some cut point must show an older value.
    let make = broken(Bug::AckBeforeDurable);
    for seed in 0..20 {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        // No reads: the oracle would see the stale data first; this must be
        // caught by the crash check alone.
        let ops: Vec<_> =
            random_ops(&mut rng, 200, 256, 8).into_iter().filter(|o| o.op != Op::Read).collect();
        crash_check_with(&make, DEVICE_BYTES, seed, &ops, 4, 50);
    }
}
