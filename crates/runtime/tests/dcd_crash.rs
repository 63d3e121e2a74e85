//! Crash properties of `dcd` beyond the per-sector rule of `crash_check`:
//!
//! - the prefix property: after a crash at *every* recorded point, the
//!   logged writes recovered are exactly a prefix of their acknowledged
//!   order, and that prefix holds every write flushed (or FUA) before it;
//! - the stale-resurrection hazard, constructed exactly: an old segment
//!   whose sector was superseded by a newer copy that has been destaged,
//!   with the newer segment's location reused, must not bring back the
//!   old copy; nor may a write home (bypass) over a destaged sector;
//! - recovery refuses corrupt metadata with a message, and bad configs
//!   fail with the key named.

use bytes::Bytes;
use layoutd_core::{Op, OpenMode, ReqId, Request};
use layoutd_disk::{BlockDevice, LogOp, MemDevice, Recorder};
use layoutd_runtime::det::{Harness, ZeroLatency};
use layoutd_runtime::testkit::{bring_up, stack_from_toml};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;
use std::sync::Arc;

mod tagged;
use tagged::{tag_of, tagged};

const S: u64 = 512;
/// 64 KiB log + 192 KiB data: small enough to check every cut point.
const DEVICE_BYTES: u64 = 256 << 10;

fn cfg(extra: &str) -> String {
    format!(
        "version = 1\n[[layer]]\ntarget = \"dcd\"\nlog_length = \"64KiB\"\nsegment_bytes = 4096\nslot_bytes = 512\n\
         buffer_count = 3\nbuffer_delay_ms = 5\nbypass_bytes = 4096\nidle_ms_max = 20\nidle_ms_min = 1\n{extra}"
    )
}

const SUBMIT: u64 = 1 << 62;
const COMPLETE: u64 = 1 << 63;

/// One logged write: first sector, sector count, FUA.
type W = (u64, u64, bool);

/// Runs small (logged) writes, flushes and FUA writes with up to `depth`
/// in flight, marking submissions and completions in the write log.
fn run_logged_workload(
    h: &mut Harness,
    log: &layoutd_disk::WriteLog,
    rng: &mut ChaCha8Rng,
    count: usize,
    depth: usize,
    fua: bool,
) -> Vec<Option<W>> {
    let hot = 48u64;
    let mut ops: Vec<Option<W>> = vec![None]; // index 0: the initial zeroes
    let mut in_flight: BTreeMap<u64, (u64, u64, u64)> = BTreeMap::new(); // upper id -> (op index, start, end)
    let mut issued = 0;
    while issued < count || !in_flight.is_empty() {
        let (start, n) = (rng.gen_range(0..hot), rng.gen_range(1..=7u64));
        let overlaps = in_flight.values().any(|&(_, a, b)| a < start + n && start < b);
        if issued < count && in_flight.len() < depth && !overlaps {
            let i = ops.len() as u64;
            issued += 1;
            let req = if rng.gen_bool(0.15) {
                ops.push(None);
                Request::new(ReqId(0), Op::Flush, 0, 0)
            } else {
                let mut data = Vec::new();
                (start..start + n).for_each(|s| data.extend_from_slice(&tagged(i, s)));
                let mut r = Request::write(ReqId(0), start * S, Bytes::from(data));
                r.fua = fua && rng.gen_bool(0.1);
                ops.push(Some((start, n, r.fua)));
                r
            };
            log.mark(SUBMIT | i);
            let (a, b) = if req.op == Op::Flush { (0, 0) } else { (start, start + n) };
            let id = h.submit(req);
            in_flight.insert(id.0, (i, a, b));
        } else {
            // Now and then let the device go quiet so idle destage runs.
            if rng.gen_bool(0.02) || in_flight.is_empty() {
                let t = h.now.add_ms(rng.gen_range(0..40));
                h.run_until(t);
            } else {
                assert!(h.step(), "stalled");
            }
        }
        for c in h.take_completions() {
            let (i, _, _) = in_flight.remove(&c.id.0).expect("submitted");
            assert_eq!(c.result, Ok(()));
            log.mark(COMPLETE | i);
        }
    }
    ops
}

/// Indices (in op order) of the writes that must survive a crash at the
/// end of `marks`: those completed before a completed flush was submitted,
/// and completed FUA writes.
fn must_survive(marks: &[(bool, u64)], ops: &[Option<W>]) -> u64 {
    let mut completed: Vec<u64> = Vec::new();
    let mut at_flush_submit: BTreeMap<u64, u64> = BTreeMap::new();
    let mut durable = 0u64;
    for &(submit, i) in marks {
        let is_flush = ops[i as usize].is_none();
        match (submit, is_flush) {
            (true, true) => {
                at_flush_submit.insert(i, completed.iter().copied().max().unwrap_or(0));
            }
            (true, false) => {}
            (false, true) => durable = durable.max(at_flush_submit[&i]),
            (false, false) => {
                completed.push(i);
                if ops[i as usize].is_some_and(|w| w.2) {
                    durable = durable.max(i);
                }
            }
        }
    }
    durable
}

/// The check: the image is exactly the state after writes `1..=m` for
/// one `m`, and `m` covers every write that had to survive.
fn check_prefix(image: &[Vec<u8>], ops: &[Option<W>], must: u64, cut: usize, seed: u64) -> u64 {
    let tags: Vec<u64> = image
        .iter()
        .enumerate()
        .map(|(s, b)| {
            tag_of(b, s as u64)
                .unwrap_or_else(|| panic!("sector {s}: bytes no write wrote (cut {cut}, seed {seed})"))
        })
        .collect();
    let m = tags.iter().copied().max().unwrap_or(0);
    for (s, &t) in tags.iter().enumerate() {
        let s = s as u64;
        let want = (1..=m)
            .rev()
            .find(|&i| ops[i as usize].is_some_and(|(a, n, _)| a <= s && s < a + n))
            .unwrap_or(0);
        assert_eq!(t, want, "sector {s} holds write {t}, but the prefix ending at write {m} says {want} (cut {cut}, seed {seed})");
    }
    assert!(
        m >= must,
        "recovered prefix ends at write {m}, but write {must} was flushed/FUA (cut {cut}, seed {seed})"
    );
    m
}

fn read_volume(h: &mut Harness, sectors: u64) -> Vec<Vec<u8>> {
    let c = h.read(0, (sectors * S) as u32);
    assert_eq!(c.result, Ok(()));
    let d = c.data.expect("data mode");
    d.chunks(S as usize).map(|c| c.to_vec()).collect()
}

/// A crash of a disk with a volatile write cache: everything up to the
/// last flush survives, each later completed write survives or not at random.
fn lossy_image(prefix: &[layoutd_disk::LogEntry], rng: &mut ChaCha8Rng) -> MemDevice {
    let dev = MemDevice::new(DEVICE_BYTES);
    let last_flush = prefix.iter().rposition(|e| e.op == LogOp::Flush).map_or(0, |i| i + 1);
    for (i, e) in prefix.iter().enumerate() {
        if i >= last_flush && rng.gen_bool(0.5) {
            continue;
        }
        match &e.op {
            LogOp::Write { offset_bytes, data } => dev.write_at(data, *offset_bytes).expect("mem"),
            LogOp::Trim { offset_bytes, length_bytes } => {
                dev.trim(*offset_bytes, *length_bytes).expect("mem")
            }
            LogOp::Zero { offset_bytes, length_bytes } => {
                dev.write_zeroes(*offset_bytes, *length_bytes).expect("mem")
            }
            LogOp::Flush | LogOp::Mark(_) => {}
        }
    }
    dev
}

fn prefix_case(config: &str, seed: u64, fua: bool, lossy: bool) -> (usize, u64) {
    let rec = Arc::new(Recorder::new(MemDevice::new(DEVICE_BYTES)));
    let log = rec.log();
    let stack = stack_from_toml(config, DEVICE_BYTES, OpenMode::format(1));
    let mut h = Harness::new(stack, rec.clone() as Arc<dyn BlockDevice>, ZeroLatency::reordering(), seed);
    bring_up(&mut h);
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let ops = run_logged_workload(&mut h, &log, &mut rng, 220, 1 + seed as usize % 4, fua);
    h.settle();
    let entries = log.entries();
    let mut marks: Vec<(bool, u64)> = Vec::new();
    let mut segments_recovered_max = 0u64;
    // Cuts inside the format leave an unformatted device (the superblock
    // is written after it); the checks start once the format has flushed.
    let formatted = entries.iter().position(|e| e.op == LogOp::Flush).expect("format flushes") + 1;
    for cut in 0..=entries.len() {
        if cut > 0 {
            if let LogOp::Mark(m) = entries[cut - 1].op {
                marks.push((m & SUBMIT != 0, m & !(SUBMIT | COMPLETE)));
                continue; // a mark changes nothing on the device
            }
        }
        if cut < formatted {
            continue;
        }
        let must = must_survive(&marks, &ops);
        let image = if lossy {
            Arc::new(lossy_image(&entries[..cut], &mut rng))
        } else {
            Arc::new(log.image_at(cut, DEVICE_BYTES, None).expect("replay"))
        };
        let mut r = Harness::new(
            stack_from_toml(config, DEVICE_BYTES, OpenMode::Open { clean: false, accept_loss: false }),
            image,
            ZeroLatency::default(),
            seed,
        );
        bring_up(&mut r);
        let sectors = r.stack.size_bytes() / S;
        let img = read_volume(&mut r, sectors.min(64));
        check_prefix(&img, &ops, must, cut, seed);
        let st = r.stack.status();
        let rec_count = st.counters.iter().find(|c| c.0 == "recovered_segments_count").expect("counter").1;
        segments_recovered_max = segments_recovered_max.max(rec_count);
    }
    (entries.len(), segments_recovered_max)
}

#[test]
fn a_crash_at_every_recorded_point_recovers_a_prefix_holding_every_flushed_write() {
    for seed in 0..6u64 {
        for (config, fua) in
            [(cfg(""), false), (cfg("fua = \"log\"\ndestage_policy = \"fewest-valid-first\"\n"), true)]
        {
            let (entries, recovered) = prefix_case(&config, seed, fua, false);
            eprintln!("seed {seed} fua {fua}: cut at each of {entries} log entries, up to {recovered} segments replayed");
            assert!(recovered >= 3, "recovery replayed too little to mean anything");
        }
    }
}

/// The same property on a disk that loses unflushed writes in any order
/// (not only a prefix of completions): durability may rest only on flushes.
#[test]
fn a_crash_that_drops_any_unflushed_writes_still_recovers_a_prefix() {
    for seed in 0..6u64 {
        for (config, fua) in
            [(cfg(""), false), (cfg("fua = \"log\"\ndestage_policy = \"oldest-first\"\n"), true)]
        {
            let (entries, recovered) = prefix_case(&config, seed, fua, true);
            eprintln!("seed {seed} fua {fua}: cut at each of {entries} log entries, up to {recovered} segments replayed");
            assert!(recovered >= 3, "recovery replayed too little to mean anything");
        }
    }
}

fn counter(h: &Harness, key: &str) -> u64 {
    let st = h.stack.status();
    st.counters.iter().find(|c| c.0 == key).unwrap_or_else(|| panic!("no counter {key}")).1
}

fn one_sector(h: &mut Harness, sector: u64, w: u64) {
    assert_eq!(h.write(sector * S, tagged(w, sector).to_vec()).result, Ok(()));
}

fn sector_tag(h: &mut Harness, sector: u64) -> u64 {
    let c = h.read(sector * S, S as u32);
    tag_of(&c.data.expect("data mode"), sector).expect("a written value")
}

/// Lets idle destage finish exactly one segment (last-written-first picks
/// the newest), then fails the next segment's destage writes so it stays
/// dirty and pins the ring's tail.
fn destage_newest_only(h: &mut Harness) {
    h.run_until(h.now.add_ms(10)); // the buffer delay passes, the log is written
    for _ in 0..100_000 {
        if counter(h, "destaged_segments_count") >= 1 {
            break;
        }
        if !h.step() {
            h.run_until(h.now.add_ms(100));
        }
    }
    assert_eq!(counter(h, "destaged_segments_count"), 1);
    h.fail_lower_writes = true;
    // The failed job still counts as finished; stop before idle retries it.
    while counter(h, "destaged_segments_count") < 2 {
        assert!(h.step(), "the next destage should have started");
    }
    assert!(counter(h, "lower_errors_count") >= 1);
    h.fail_lower_writes = false;
    assert_eq!(counter(h, "dirty_segments_count"), 1, "the older segment stays dirty");
}

fn crash_and_recover(config: &str, log: &layoutd_disk::WriteLog) -> Harness {
    let image = Arc::new(log.image_at(log.len(), DEVICE_BYTES, None).expect("replay"));
    let stack = stack_from_toml(config, DEVICE_BYTES, OpenMode::Open { clean: false, accept_loss: false });
    let mut h = Harness::new(stack, image, ZeroLatency::default(), 1);
    bring_up(&mut h);
    h
}

fn recording_harness(config: &str) -> (Harness, layoutd_disk::WriteLog) {
    let rec = Arc::new(Recorder::new(MemDevice::new(DEVICE_BYTES)));
    let log = rec.log();
    let mut h = Harness::new(
        stack_from_toml(config, DEVICE_BYTES, OpenMode::format(1)),
        rec,
        ZeroLatency::reordering(),
        7,
    );
    bring_up(&mut h);
    (h, log)
}

/// Segment A holds x=1 and y; segment B holds x=2 and is destaged first
/// (last-written-first), A stays dirty. The log then wraps until B's
/// location is reused. Replaying A after a crash must not bring back x=1.
#[test]
fn a_superseded_copy_is_not_resurrected_after_the_newer_segment_is_destaged_and_reused() {
    let config = cfg("");
    let (mut h, log) = recording_harness(&config);
    let (x, y) = (0u64, 8u64);
    one_sector(&mut h, x, 1);
    one_sector(&mut h, y, 2);
    assert_eq!(h.flush().result, Ok(()));
    one_sector(&mut h, x, 3);
    assert_eq!(h.flush().result, Ok(()));
    destage_newest_only(&mut h);
    assert_eq!(sector_tag(&mut h, x), 3);
    // Wrap the ring: 12 segments of 8 one-sector writes elsewhere.
    let b_location = seglog_location(1);
    for i in 0..12 * 8u64 {
        one_sector(&mut h, 100 + i % 200, 1000 + i);
        if i % 8 == 7 {
            assert_eq!(h.flush().result, Ok(()));
        }
    }
    let mut hdr = vec![0u8; 512];
    h.device.read_at(&mut hdr, b_location).expect("mem");
    let geo = layoutd_targets::seglog::Geometry::new(0, 64 << 10, 512, 8).expect("geometry");
    let reused = layoutd_targets::seglog::SegmentHeader::decode(&hdr, &geo).expect("a segment lives there");
    assert!(reused.seq.0 >= 13, "B's location (seq 1) was reused by seq {}", reused.seq.0);
    let mut r = crash_and_recover(&config, &log);
    assert_eq!(sector_tag(&mut r, x), 3, "x must keep the destaged newer value");
    assert_eq!(sector_tag(&mut r, y), 2);
}

/// Segment Z stays dirty (pins the tail); segment A with x=1 is destaged
/// but stays in the ring; x is then overwritten by a bypass write and
/// flushed. Replaying A must not bring back x=1: an invalidation record
/// written after the bypass voids it.
#[test]
fn a_destaged_copy_is_not_resurrected_over_a_later_write_home() {
    let config = cfg("");
    let (mut h, log) = recording_harness(&config);
    let (x, z) = (0u64, 300u64);
    one_sector(&mut h, z, 1);
    assert_eq!(h.flush().result, Ok(()));
    one_sector(&mut h, x, 2);
    assert_eq!(h.flush().result, Ok(()));
    destage_newest_only(&mut h);
    let big: Vec<u8> = (x..x + 8).flat_map(|s| tagged(3, s)).collect();
    assert_eq!(h.write(x * S, big).result, Ok(()));
    assert_eq!(h.flush().result, Ok(()));
    assert_eq!(counter(&h, "tail_seq"), 0, "Z still pins the tail, A is still in the ring");
    let mut r = crash_and_recover(&config, &log);
    assert_eq!(sector_tag(&mut r, x), 3, "the bypass write must win over the destaged log copy");
    assert_eq!(sector_tag(&mut r, z), 1);
    assert!(counter(&h, "invalidation_records_count") >= 1);
}

/// Byte offset of segment `loc`'s header in the tiny test log.
fn seglog_location(loc: u32) -> u64 {
    let geo = layoutd_targets::seglog::Geometry::new(0, 64 << 10, 512, 8).expect("geometry");
    geo.segment_offset_bytes(layoutd_targets::seglog::SegLoc(loc))
}
