//! The `pool` target: each volume's own oracle with snapshots taken,
//! written, deleted and merged at random points; crash cuts checking every
//! volume; copy-on-write sharing, placement, thin allocation, bad input.

use layoutd_core::{Completion, Instant, Op, Request, Stack, Status, Target};
use layoutd_runtime::testkit::stack_from_toml;
use layoutd_runtime::testkit_volumes::{volumes_crash_check, volumes_oracle_check, Workload};
use std::collections::VecDeque;

const DEVICE_BYTES: u64 = 2 << 20;

fn cfg(placement: &str, extra: &str) -> String {
    format!(
        "version = 1\n[[layer]]\ntarget = \"pool\"\nchunk_size = \"8K\"\nvolume_size = \"384K\"\nvolumes_max = 4\n\
         journal_blocks = 8\nplacement = \"{placement}\"\n{extra}"
    )
}

fn policies() -> Vec<String> {
    vec![cfg("contiguous", ""), cfg("sliced", "slices = 6\n"), cfg("nearest", "")]
}

#[test]
fn every_volume_reads_back_its_own_model_with_snapshots_at_random_points() {
    for c in policies() {
        for seed in 0..4u64 {
            let make = |mode| stack_from_toml(&c, DEVICE_BYTES, mode);
            let (h, run) = volumes_oracle_check(
                &make,
                DEVICE_BYTES,
                seed,
                Workload { count: 600, depth: 6, snapshot_every: 25, reads: true },
            );
            assert!(
                run.snapshot_ops >= 5,
                "too few snapshot operations to mean anything: {}",
                run.snapshot_ops
            );
            assert!(run.reads_checked > 50);
            let st = h.stack.status();
            eprintln!("{st}");
        }
    }
}

#[test]
fn crash_cuts_keep_every_snapshot_and_every_flushed_write() {
    for c in policies() {
        for seed in 0..3u64 {
            let make = |mode| stack_from_toml(&c, DEVICE_BYTES, mode);
            let (cuts, snaps) = volumes_crash_check(
                &make,
                DEVICE_BYTES,
                seed,
                Workload { count: 250, depth: 4, snapshot_every: 20, reads: true },
                25,
            );
            eprintln!("seed {seed}: {cuts} cuts, {snaps} snapshot ops");
            assert!(cuts > 20 && snaps >= 3, "{cuts} cuts, {snaps} snapshot ops");
        }
    }
}

/// A pass-through below the pool that acknowledges writes and flushes
/// before the device has them: the pool's ordering (copy, then metadata,
/// then the origin write) is then lost. Armed once the format's FUA
/// checkpoint write has completed (the pool must exist to be crashed).
struct EarlyAck {
    armed: bool,
    format_fua: Option<u64>,
    lower: VecDeque<Request>,
    upper: VecDeque<Completion>,
    early: std::collections::HashSet<u64>,
    size: u64,
}

impl Target for EarlyAck {
    fn name(&self) -> &'static str {
        "early-ack"
    }
    fn size_bytes(&self) -> u64 {
        self.size
    }
    fn handle_request(&mut self, _now: Instant, req: Request) {
        if !self.armed && req.fua {
            self.format_fua = Some(req.id.0);
        }
        if self.armed && matches!(req.op, Op::Write | Op::Flush) {
            self.upper.push_back(Completion::ok(req.id));
            if req.op == Op::Flush {
                return;
            }
            self.early.insert(req.id.0);
        }
        self.lower.push_back(req);
    }
    fn handle_completion(&mut self, _now: Instant, c: Completion) {
        self.armed |= self.format_fua == Some(c.id.0);
        if !self.early.remove(&c.id.0) {
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

#[test]
#[should_panic(expected = "after a crash")]
fn the_volume_crash_check_catches_metadata_durable_before_its_copies() {
    // No reads, so that the oracle cannot see it first: only a crash cut
    // between a copy and the metadata naming it (or the origin write it
    // protects) shows it.
    let c = cfg("nearest", "defrag = false\n");
    let make = |mode| {
        let pool = stack_from_toml(&c, DEVICE_BYTES, mode);
        let below = EarlyAck {
            armed: mode != layoutd_core::OpenMode::Format,
            format_fua: None,
            lower: VecDeque::new(),
            upper: VecDeque::new(),
            early: Default::default(),
            size: DEVICE_BYTES,
        };
        Box::new(Stack::new(vec![pool, Box::new(below)])) as Box<dyn Target>
    };
    for seed in 0..10u64 {
        volumes_crash_check(
            &make,
            DEVICE_BYTES,
            seed,
            Workload { count: 250, depth: 4, snapshot_every: 20, reads: false },
            40,
        );
    }
}
