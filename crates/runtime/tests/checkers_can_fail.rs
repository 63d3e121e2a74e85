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
    /// Sector [`REWRITTEN`]'s latest data, for [`Bug::RewriteInPlace`].
    kept: Option<bytes::Bytes>,
    internal_ids: u64,
}

#[derive(Clone, Copy)]
enum Bug {
    /// Writes to sector 7 land on sector 8.
    Misdirect,
    /// Writes and flushes are acknowledged before the device has them.
    AckBeforeDurable,
    /// Before each flush, sector 3's latest data is written again in place
    /// (a scrub or a metadata block rewritten with no second copy): a crash
    /// that tears that write loses data flushed long before.
    RewriteInPlace,
}

/// The sector [`Bug::RewriteInPlace`] rewrites.
const REWRITTEN: u64 = 3;

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
            Bug::RewriteInPlace if req.op.is_modify() => {
                let (start, n) = (req.offset_bytes / 512, u64::from(req.length_bytes) / 512);
                if (start..start + n).contains(&REWRITTEN) {
                    // Zeroes and discards leave nothing to rewrite.
                    let at = ((REWRITTEN - start) * 512) as usize;
                    self.kept = req.data.as_ref().map(|d| d.slice(at..at + 512));
                }
            }
            Bug::RewriteInPlace if req.op == Op::Flush => {
                if let Some(data) = self.kept.clone() {
                    self.internal_ids += 1;
                    let id = layoutd_core::ReqId(u64::MAX - self.internal_ids);
                    self.early_acked.insert(id.0, ());
                    self.lower.push_back(Request::write(id, REWRITTEN * 512, data));
                }
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
        Box::new(Broken {
            bug,
            lower: VecDeque::new(),
            upper: VecDeque::new(),
            early_acked: HashMap::new(),
            kept: None,
            internal_ids: 0,
        })
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

#[test]
#[should_panic(expected = "only a write in flight may be torn")]
fn crash_check_catches_durable_data_rewritten_in_place() {
    // Without tearing, every cut of this bug reads the right value (the
    // rewrite writes what the sector already holds): only a torn rewrite
    // shows the flushed data lost.
    let make = broken(Bug::RewriteInPlace);
    for seed in 0..20 {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let ops: Vec<_> = random_ops(&mut rng, 200, 64, 8).into_iter().filter(|o| o.op != Op::Read).collect();
        crash_check_with(&make, DEVICE_BYTES, seed, &ops, 4, 50);
    }
}
