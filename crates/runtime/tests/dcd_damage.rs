//! Damaged metadata never costs flushed data quietly (issue: "damaged
//! metadata"). A crashed `dcd` volume gets one structure damaged at a time;
//! the rule for every case: the volume either opens with every flushed
//! write right (and what it recovered is a prefix of the acknowledged
//! order), or refuses with a message that names what is damaged and where,
//! having written nothing.
//!
//! - the matrix: each checkpoint copy, each flush-mark copy, each live
//!   segment header (one flipped bit) and each live segment's slots (64
//!   random bytes);
//! - the randomized version: one random 4 KiB block of the log region
//!   replaced by random bytes, many seeds;
//! - the exact cases the issue reproduced: a damaged newest checkpoint copy
//!   (398 of 400 flushed writes were lost, then old segments came back after
//!   a restart), and damage in the middle of the log (cut short silently);
//! - `accept_loss` opens a refused volume and counts what it gave up.

use layoutd_core::OpenMode;
use layoutd_disk::{BlockDevice, MemDevice, Recorder};
use layoutd_runtime::det::{Harness, ZeroLatency};
use layoutd_runtime::testkit::{bring_up, stack_from_toml};
use layoutd_targets::seglog::{Checkpoint, Geometry, SegLoc, SegmentHeader, CHECKPOINT_COPY_BYTES};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;
use std::sync::Arc;

mod tagged;
use tagged::{tag_of, tagged};

const S: u64 = 512;
/// 64 KiB log + 192 KiB data, as in `dcd_crash.rs`.
const DEVICE_BYTES: u64 = 256 << 10;
const LOG_BYTES: u64 = 64 << 10;
/// Volume sectors the workload writes.
const HOT_SECTORS: u64 = 48;

fn cfg() -> String {
    "version = 1\n[[layer]]\ntarget = \"dcd\"\nlog_length = \"64KiB\"\nsegment_bytes = 4096\nslot_bytes = 512\n\
     buffer_count = 3\nbuffer_delay_ms = 5\nbypass_bytes = 4096\nidle_ms_max = 100000\nidle_ms_min = 100000\n"
        .to_string()
}

fn geo() -> Geometry {
    Geometry::new(0, LOG_BYTES, 512, 8).expect("the test log's geometry")
}

/// A crashed volume: the device as it was when the run stopped (no clean
/// shutdown), which writes were issued (`writes[w]` = first sector, count),
/// and the newest write that a completed flush covered.
struct Crashed {
    image: MemDevice,
    writes: Vec<(u64, u64)>,
    flushed_upto: u64,
}

/// Small writes (all logged) with a flush after every few, one at a time,
/// never idle long enough to destage: the whole history stays in the log.
fn crashed_volume(seed: u64, writes_count: u64) -> Crashed {
    let rec = Arc::new(Recorder::new(MemDevice::new(DEVICE_BYTES)));
    let log = rec.log();
    let mut h = Harness::new(
        stack_from_toml(&cfg(), DEVICE_BYTES, OpenMode::format(1)),
        rec as Arc<dyn BlockDevice>,
        ZeroLatency::reordering(),
        seed,
    );
    bring_up(&mut h);
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut writes = vec![(0, 0)]; // write 0: the initial zeroes
    let mut flushed_upto = 0;
    for w in 1..=writes_count {
        let (start, n) = (rng.gen_range(0..HOT_SECTORS - 4), rng.gen_range(1..=4u64));
        let data: Vec<u8> = (start..start + n).flat_map(|s| tagged(w, s)).collect();
        assert_eq!(h.write(start * S, data).result, Ok(()));
        writes.push((start, n));
        if rng.gen_bool(0.25) {
            assert_eq!(h.flush().result, Ok(()));
            flushed_upto = w;
        }
    }
    // A few more writes in flight at the crash: sealed, maybe written.
    let image = log.image_at(log.len(), DEVICE_BYTES, None).expect("replay");
    Crashed { image, writes, flushed_upto }
}

fn copy(dev: &MemDevice) -> MemDevice {
    let out = MemDevice::new(DEVICE_BYTES);
    dev.copy_to(&out).expect("copy");
    out
}

fn read_all(dev: &MemDevice) -> Vec<u8> {
    let mut b = vec![0u8; DEVICE_BYTES as usize];
    dev.read_at(&mut b, 0).expect("read");
    b
}

/// Opens a (damaged) image; Ok(harness) once serving, Err(message) if
/// recovery refused.
fn open(image: MemDevice, accept_loss: bool) -> Result<Harness, String> {
    let stack = stack_from_toml(&cfg(), DEVICE_BYTES, OpenMode::Open { clean: false, accept_loss });
    let mut h = Harness::new(stack, Arc::new(image), ZeroLatency::default(), 1);
    for _ in 0..1_000_000u64 {
        if h.stack.is_ready() {
            return Ok(h);
        }
        if !h.step() {
            let st = h.stack.status();
            let err = st.config.iter().find(|(k, _)| k == "error").map(|(_, v)| v.clone());
            return Err(err.expect("a stalled bring-up says why"));
        }
    }
    panic!("bring-up never finished");
}

fn counter(h: &Harness, key: &str) -> u64 {
    h.stack.status().counters.iter().find(|c| c.0 == key).unwrap_or_else(|| panic!("no counter {key}")).1
}

/// The volume holds exactly writes `1..=m` for one `m`; returns `m`.
fn recovered_prefix(h: &mut Harness, writes: &[(u64, u64)], what: &str) -> u64 {
    let c = h.read(0, (HOT_SECTORS * S) as u32);
    assert_eq!(c.result, Ok(()), "{what}: read after recovery");
    let data = c.data.expect("data mode");
    let tags: Vec<u64> = (0..HOT_SECTORS)
        .map(|s| {
            let b = &data[(s * S) as usize..((s + 1) * S) as usize];
            tag_of(b, s).unwrap_or_else(|| panic!("{what}: sector {s} holds bytes no write wrote"))
        })
        .collect();
    let m = tags.iter().copied().max().unwrap_or(0);
    for (s, &t) in tags.iter().enumerate() {
        let s = s as u64;
        let want = (1..=m)
            .rev()
            .find(|&w| writes[w as usize].0 <= s && s < writes[w as usize].0 + writes[w as usize].1);
        assert_eq!(t, want.unwrap_or(0), "{what}: sector {s} is not the prefix ending at write {m}");
    }
    m
}

/// What one damaged open did.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    Opened,
    Refused,
}

/// Applies the rule to one damaged image: opens with every flushed write
/// (a prefix holding `flushed_upto`), or refuses naming `names` and
/// leaving the device untouched.
fn judge(c: &Crashed, damaged: MemDevice, what: &str, names: &[&str]) -> Outcome {
    let before = read_all(&damaged);
    let witness = copy(&damaged);
    match open(damaged, false) {
        Ok(mut h) => {
            let m = recovered_prefix(&mut h, &c.writes, what);
            assert!(
                m >= c.flushed_upto,
                "{what}: opened with writes up to {m}, but {} was flushed",
                c.flushed_upto
            );
            Outcome::Opened
        }
        Err(msg) => {
            assert!(
                names.iter().any(|n| msg.contains(n)) && msg.contains("offset"),
                "{what}: the refusal must name the damage ({names:?}) and its offset: {msg}"
            );
            assert!(read_all(&witness) == before, "{what}: a refused open wrote to the device");
            // Accepting the loss opens it, counted. What it holds is no
            // longer a prefix (segments past the damage may have been
            // destaged home already), but every sector holds a value some
            // write wrote.
            let mut h =
                open(witness, true).unwrap_or_else(|e| panic!("{what}: --accept-loss still refused: {e}"));
            assert!(counter(&h, "lost_segments_count") > 0, "{what}: the loss is counted");
            let r = h.read(0, (HOT_SECTORS * S) as u32);
            let data = r.data.expect("data mode");
            for s in 0..HOT_SECTORS {
                let b = &data[(s * S) as usize..((s + 1) * S) as usize];
                assert!(
                    tag_of(b, s).is_some(),
                    "{what}: after --accept-loss sector {s} holds bytes no write wrote"
                );
            }
            Outcome::Refused
        }
    }
}

/// Segment locations holding live segments of the crashed log (from the
/// tail an undamaged recovery starts at), in seq order.
fn live_segments(image: &MemDevice) -> Vec<(SegLoc, SegmentHeader)> {
    let g = geo();
    let tail = counter(&open(copy(image), false).expect("the undamaged image opens"), "tail_seq");
    let mut out: Vec<(SegLoc, SegmentHeader)> = (0..g.segment_count)
        .filter_map(|i| {
            let mut b = vec![0u8; g.header_bytes as usize];
            image.read_at(&mut b, g.segment_offset_bytes(SegLoc(i))).expect("read");
            SegmentHeader::decode(&b, &g).ok().filter(|h| h.seq.0 >= tail).map(|h| (SegLoc(i), h))
        })
        .collect();
    out.sort_by_key(|(_, h)| h.seq);
    out
}

fn damaged(image: &MemDevice, f: impl FnOnce(&MemDevice)) -> MemDevice {
    let d = copy(image);
    f(&d);
    d
}

fn flip_bit(dev: &MemDevice, offset: u64, bit: u8) {
    let mut b = [0u8; 1];
    dev.read_at(&mut b, offset).expect("read");
    b[0] ^= 1 << bit;
    dev.write_at(&b, offset).expect("write");
}

fn scribble(dev: &MemDevice, offset: u64, len: usize, rng: &mut ChaCha8Rng) {
    let junk: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
    dev.write_at(&junk, offset).expect("write");
}

#[test]
fn every_damaged_structure_opens_with_flushed_data_or_is_refused_by_name() {
    let g = geo();
    let mut outcomes: BTreeMap<&str, Vec<Outcome>> = BTreeMap::new();
    for seed in 0..4u64 {
        let c = crashed_volume(seed, 60);
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0xBAD);
        // Each copy of the checkpoint and of the flush mark.
        for copy_index in 0..2u64 {
            let at = copy_index * CHECKPOINT_COPY_BYTES;
            let d = damaged(&c.image, |d| flip_bit(d, at + 20, 3));
            outcomes.entry("checkpoint copy").or_default().push(judge(&c, d, "checkpoint", &["checkpoint"]));
            let at = g.mark_offset_bytes(copy_index);
            let d = damaged(&c.image, |d| flip_bit(d, at + 33, 0));
            outcomes.entry("flush mark copy").or_default().push(judge(&c, d, "flush mark", &["mark"]));
        }
        let segs = live_segments(&c.image);
        assert!(segs.len() >= 4, "seed {seed}: the log holds {} segments; the test needs more", segs.len());
        for (loc, h) in &segs {
            let at = g.segment_offset_bytes(*loc);
            let what = format!("seed {seed} header of segment {} (seq {})", loc.0, h.seq.0);
            let d = damaged(&c.image, |d| flip_bit(d, at + 17 + u64::from(loc.0 % 40), (loc.0 % 8) as u8));
            outcomes.entry("segment header").or_default().push(judge(&c, d, &what, &["segment"]));
            if h.slots_used > 0 {
                let what = format!("seed {seed} slots of segment {} (seq {})", loc.0, h.seq.0);
                let slots_bytes = u64::from(h.slots_used) * u64::from(g.slot_bytes);
                let within = rng.gen_range(0..slots_bytes.saturating_sub(64).max(1));
                let slot_at = g.slot_offset_bytes(*loc, 0) + within;
                let d = damaged(&c.image, |d| scribble(d, slot_at, 64, &mut rng));
                outcomes.entry("segment slots").or_default().push(judge(&c, d, &what, &["segment"]));
            }
        }
    }
    eprintln!("{outcomes:?}");
    // Not vacuous: damage to flushed segments was refused, and damage to a
    // single checkpoint or mark copy was survived.
    for key in ["segment header", "segment slots"] {
        assert!(outcomes[key].contains(&Outcome::Refused), "{key}: no damage was ever detected");
    }
    for key in ["checkpoint copy", "flush mark copy"] {
        assert!(
            outcomes[key].iter().all(|o| *o == Outcome::Opened),
            "{key}: one damaged copy must be survived"
        );
    }
}

#[test]
fn one_random_damaged_block_of_the_log_never_costs_flushed_data_quietly() {
    let mut refused = 0;
    let mut cases = 0;
    for seed in 0..48u64 {
        let c = crashed_volume(100 + seed, 20 + seed % 40);
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let block = rng.gen_range(0..LOG_BYTES / 4096);
        let d = damaged(&c.image, |d| scribble(d, block * 4096, 4096, &mut rng));
        let what = format!("seed {seed}, log block {block}");
        if judge(&c, d, &what, &["segment", "checkpoint"]) == Outcome::Refused {
            refused += 1;
        }
        cases += 1;
    }
    eprintln!("{refused} of {cases} damaged logs refused, the rest opened with every flushed write");
    assert!(refused > 0, "no damage was ever detected: the check is vacuous");
}

/// The first case, scaled: 8 MiB written and flushed, then 400
/// small writes and a flush, a crash, and one byte of the newer checkpoint
/// copy changed. Every flushed write must read back, and after new flushed
/// writes and a clean restart no older segment may come back.
#[test]
fn a_damaged_newest_checkpoint_copy_loses_nothing_and_resurrects_nothing() {
    const DEV: u64 = 48 << 20;
    let cfg = "version = 1\n[[layer]]\ntarget = \"dcd\"\nlog_length = \"8MiB\"\nidle_ms_max = 100000\nidle_ms_min = 100000\n";
    // Format, then open it as `serve` would (a new boot, its checkpoint in
    // the other copy), then the workload.
    let formatted = Arc::new(MemDevice::new(DEV));
    let mut f = Harness::new(
        stack_from_toml(cfg, DEV, OpenMode::format(1)),
        formatted.clone(),
        ZeroLatency::default(),
        2,
    );
    bring_up(&mut f);
    let rec = Arc::new(Recorder::new(copy_big(&formatted, DEV)));
    let stack = stack_from_toml(cfg, DEV, OpenMode::Open { clean: true, accept_loss: false });
    let mut h = Harness::new(stack, rec.clone(), ZeroLatency::reordering(), 3);
    bring_up(&mut h);
    let big = vec![0x5Au8; 8 << 20];
    assert_eq!(h.write(0, big).result, Ok(()));
    assert_eq!(h.flush().result, Ok(()));
    let block = |i: u64, v: u8| (i * 4096, vec![v; 4096]);
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    let mut want: BTreeMap<u64, u8> = BTreeMap::new();
    for w in 0..400u64 {
        let i = rng.gen_range(0..2048u64);
        let v = (w % 250) as u8 + 1;
        let (off, data) = block(i, v);
        assert_eq!(h.write(off, data).result, Ok(()));
        want.insert(i, v);
    }
    assert_eq!(h.flush().result, Ok(()));
    let image = copy_big(rec.inner(), DEV);
    // The newer checkpoint copy: the one with the higher generation.
    let dcd_geo = Geometry::new(0, 8 << 20, 4096, 32).expect("geometry");
    let gen_of = |copy_index: u64| {
        let mut b = vec![0u8; 512];
        image.read_at(&mut b, copy_index * CHECKPOINT_COPY_BYTES).expect("read");
        Checkpoint::decode(&b, &dcd_geo).expect("both copies valid before the damage").generation
    };
    let newer = if gen_of(0) > gen_of(1) { 0 } else { 1 };
    flip_bit(&image, newer * CHECKPOINT_COPY_BYTES + 30, 5);
    let check = |h: &mut Harness, want: &BTreeMap<u64, u8>, when: &str| {
        for (&i, &v) in want {
            let c = h.read(i * 4096, 4096);
            let d = c.data.expect("data mode");
            assert!(d.iter().all(|&x| x == v), "{when}: block {i} should hold {v}, holds {}", d[0]);
        }
    };
    let stack = stack_from_toml(cfg, DEV, OpenMode::Open { clean: false, accept_loss: false });
    let rec2 = Arc::new(Recorder::new(image));
    let mut r = Harness::new(stack, rec2.clone(), ZeroLatency::reordering(), 4);
    bring_up(&mut r);
    check(&mut r, &want, "after the damaged checkpoint");
    // New flushed writes over some of the same blocks, then a restart.
    for (n, (&i, _)) in want.clone().iter().enumerate().take(100) {
        let v = 251 + (n % 4) as u8;
        let (off, data) = block(i, v);
        assert_eq!(r.write(off, data).result, Ok(()));
        want.insert(i, v);
    }
    assert_eq!(r.flush().result, Ok(()));
    for clean in [true, false] {
        let image = copy_big(rec2.inner(), DEV);
        let stack = stack_from_toml(cfg, DEV, OpenMode::Open { clean, accept_loss: false });
        let mut r2 = Harness::new(stack, Arc::new(image), ZeroLatency::default(), 5);
        bring_up(&mut r2);
        check(&mut r2, &want, &format!("after new flushed writes and a restart (clean: {clean})"));
    }
}

fn copy_big(dev: &MemDevice, size: u64) -> MemDevice {
    let out = MemDevice::new(size);
    dev.copy_to(&out).expect("copy");
    out
}

/// The second case: damage in the middle of the live log, with
/// flushed segments after it, is refused by name (it used to be cut short
/// silently, the volume marked clean), and `accept_loss` counts the loss.
#[test]
fn damage_in_the_middle_of_the_log_is_refused_not_cut_short() {
    let g = geo();
    let c = crashed_volume(9, 60);
    let segs = live_segments(&c.image);
    let (loc, h) = &segs[segs.len() / 3];
    assert!(segs.len() >= 4);
    let mut rng = ChaCha8Rng::seed_from_u64(9);
    let d = damaged(&c.image, |d| scribble(d, g.slot_offset_bytes(*loc, 0), 64, &mut rng));
    let msg = open(d, false).err().expect("damage before flushed segments is refused");
    let expect = format!("segment {} (seq {})", loc.0, h.seq.0);
    assert!(msg.contains(&expect), "the message names {expect}: {msg}");
    assert!(msg.contains(&format!("offset {}", g.segment_offset_bytes(*loc))), "and its offset: {msg}");
    assert!(msg.contains("accept-loss"), "and says how to proceed: {msg}");
    let d = damaged(&c.image, |d| flip_bit(d, g.segment_offset_bytes(*loc) + 45, 2));
    assert!(open(d, false).is_err(), "one flipped header bit too");
}

/// Crafted metadata (hostile field values with a valid crc) in a crashed
/// log: checkpoint and mark copies, segment headers. Recovery refuses or
/// opens; it never panics, never wraps a size, and an opened volume serves
/// reads.
#[test]
fn crafted_log_metadata_with_a_valid_crc_is_refused_or_survived_never_obeyed_into_a_panic() {
    let g = geo();
    let nasty = [0u64, 1, 2, u64::MAX, u64::MAX - 1, 1 << 62, (1 << 62) + 1, u64::from(u32::MAX), 1 << 40];
    let mut opened = 0;
    for seed in 0..200u64 {
        let c = crashed_volume(seed % 8, 40);
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0xC4AF7);
        // (block offset, block length, crc offset within the block)
        let (at, len, crc_at) = match rng.gen_range(0..3) {
            0 => (rng.gen_range(0..2u64) * CHECKPOINT_COPY_BYTES, 512usize, 60usize),
            1 => (g.mark_offset_bytes(rng.gen_range(0..2u64)), 512, 60),
            _ => (
                g.segment_offset_bytes(SegLoc(rng.gen_range(0..g.segment_count))),
                g.header_bytes as usize,
                56,
            ),
        };
        let d = copy(&c.image);
        let mut b = vec![0u8; len];
        d.read_at(&mut b, at).expect("read");
        for _ in 0..rng.gen_range(1..4) {
            let field = rng.gen_range(0..len.min(128) / 4) * 4;
            let v = nasty[rng.gen_range(0..nasty.len())];
            let width = if rng.gen_bool(0.5) { 8 } else { 4 };
            for i in 0..width.min(len - field) {
                b[field + i] = (v >> (8 * i)) as u8;
            }
        }
        b[crc_at..crc_at + 4].fill(0);
        let crc = crc32c::crc32c(&b);
        b[crc_at..crc_at + 4].copy_from_slice(&crc.to_le_bytes());
        d.write_at(&b, at).expect("write");
        let witness = copy(&d);
        for (image, accept_loss) in [(d, false), (witness, true)] {
            if let Ok(mut h) = open(image, accept_loss) {
                let r = h.read(0, (HOT_SECTORS * S) as u32);
                assert_eq!(r.result, Ok(()), "seed {seed}: an opened volume serves reads");
                opened += 1;
            }
        }
    }
    assert!(opened > 0, "some crafted values are harmless (a stale field, a copy not picked)");
}
