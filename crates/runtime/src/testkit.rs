//! Reusable checks for any stack: the oracle (reads return exactly what a
//! plain array of bytes would) and the crash check (cut the recorded lower
//! write log anywhere, recover, and the durability rules hold).
//!
//! Workloads are random but well behaved, as a file system is: no two
//! in-flight requests overlap when one of them modifies, so every read has
//! exactly one right answer. Every sector a write covers carries a tag
//! (the op's sequence number and the sector number), so after a crash we
//! can tell which write put each sector there.

use crate::det::{Harness, Timing, ZeroLatency};
use crate::volume::{bring_up_on, bring_up_staged};
use bytes::Bytes;
use layoutd_core::config::StackConfig;
use layoutd_core::{Completion, Op, OpenMode, ReqId, Request, StreamId, Target, SECTOR_BYTES};
use layoutd_disk::{BlockDevice, LogOp, MemDevice, Recorder, Tear, WriteLog};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

const S: u64 = SECTOR_BYTES;

/// One operation of a generated workload.
#[derive(Clone, Debug)]
pub struct OpSpec {
    /// What to do.
    pub op: Op,
    /// Sector offset (wrapped into the volume).
    pub sector: u64,
    /// Sector count (clamped to the volume).
    pub sectors: u32,
    /// FUA flag (modifying ops only).
    pub fua: bool,
    /// Stream id.
    pub stream: u32,
}

/// A random op: 40% writes, 35% reads, 10% flushes, 8% trims, 7% write-zeroes.
pub(crate) fn random_op(rng: &mut ChaCha8Rng) -> Op {
    match rng.gen_range(0..100) {
        0..=39 => Op::Write,
        40..=74 => Op::Read,
        75..=84 => Op::Flush,
        85..=92 => Op::Trim,
        _ => Op::WriteZeroes,
    }
}

/// A proptest-free generator: `count` ops over a volume of `sectors_total`.
pub fn random_ops(rng: &mut ChaCha8Rng, count: usize, sectors_total: u64, sectors_max: u32) -> Vec<OpSpec> {
    (0..count)
        .map(|_| {
            let op = random_op(rng);
            // Mostly small, sometimes large requests.
            let sectors = if rng.gen_bool(0.1) {
                rng.gen_range(1..=sectors_max)
            } else {
                rng.gen_range(1..=16.min(sectors_max))
            };
            OpSpec {
                op,
                sector: rng.gen_range(0..sectors_total),
                sectors,
                fua: rng.gen_bool(0.1),
                stream: rng.gen_range(0..4),
            }
        })
        .collect()
}

/// Builds a stack from TOML text over a device of `device_bytes`.
pub fn stack_from_toml(toml_text: &str, device_bytes: u64, mode: OpenMode) -> Box<dyn Target> {
    let cfg = StackConfig::parse(toml_text, "test config").expect("test config parses");
    Box::new(layoutd_targets::build_stack(&cfg, device_bytes, mode).expect("test config builds"))
}

/// Drives `h` until its stack is ready ([`Harness::bring_up`]); panics
/// with the reason if it stalls.
pub fn bring_up<T: Timing>(h: &mut Harness<T>) {
    if let Err(e) = h.bring_up() {
        panic!("stack stalled before ready (seed {}): {e}", h.seed());
    }
}

/// The bytes a write with sequence `seq` puts at volume sector `sector`.
pub(crate) fn tagged_sector(seq: u64, sector: u64) -> [u8; S as usize] {
    let mut b = [0u8; S as usize];
    b[0..8].copy_from_slice(&seq.to_le_bytes());
    b[8..16].copy_from_slice(&sector.to_le_bytes());
    let mut x = seq.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ sector;
    for chunk in b[16..].chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        chunk.copy_from_slice(&x.to_le_bytes()[..chunk.len()]);
    }
    b
}

/// Which write (by seq, 0 = zeroes) a sector's bytes came from, if any.
pub(crate) fn sector_tag(bytes: &[u8], sector: u64) -> Option<u64> {
    if bytes.iter().all(|&b| b == 0) {
        return Some(0);
    }
    let seq = u64::from_le_bytes(bytes[0..8].try_into().expect("8"));
    (tagged_sector(seq, sector)[..] == *bytes).then_some(seq)
}

/// Per-sector history of modifying ops, for the oracle and the crash check.
#[derive(Default)]
struct Model {
    /// sector -> list of (seq, value tag) in submission order
    history: HashMap<u64, Vec<u64>>,
}

impl Model {
    fn current(&self, sector: u64) -> u64 {
        self.history.get(&sector).and_then(|h| h.last().copied()).unwrap_or(0)
    }
}

/// Submitted-but-not-completed ops, to keep the workload well behaved.
struct InFlight {
    by_id: BTreeMap<u64, (u64, u64, bool, OpSpec, u64)>, // id -> (start, end sectors, modifies, spec, seq)
}

impl InFlight {
    fn conflicts(&self, start: u64, end: u64, modifies: bool) -> bool {
        self.by_id.values().any(|&(s, e, m, _, _)| s < end && start < e && (m || modifies))
    }
}

/// What the crash check needs from a run: the log and the upper timeline.
pub struct Recorded {
    /// The lower write log (with marks for upper events).
    pub log: WriteLog,
    /// seq -> (op, first sector, sectors, fua)
    pub ops: Vec<(Op, u64, u32, bool)>,
}

pub(crate) const MARK_SUBMIT: u64 = 1 << 62;
pub(crate) const MARK_COMPLETE: u64 = 1 << 63;

/// Runs `ops` against the stack in `h` with up to `depth` requests in
/// flight, checking every read against the model. Marks upper submissions
/// and completions in `log` when given. Returns the ops by sequence number.
pub fn run_oracle<T: Timing>(
    h: &mut Harness<T>,
    ops: &[OpSpec],
    depth: usize,
    log: Option<&WriteLog>,
) -> Vec<(Op, u64, u32, bool)> {
    run_oracle_idle(h, ops, depth, log, 0)
}

/// [`run_oracle`] that also lets the stack see idle (background work may
/// start) before every `idle_every`-th op when nothing is in flight above,
/// as a file system's gaps do; 0: never (idle only once the ops are done).
pub fn run_oracle_idle<T: Timing>(
    h: &mut Harness<T>,
    ops: &[OpSpec],
    depth: usize,
    log: Option<&WriteLog>,
    idle_every: usize,
) -> Vec<(Op, u64, u32, bool)> {
    let sectors_total = h.stack.size_bytes() / S;
    let mut model = Model::default();
    let mut inflight = InFlight { by_id: BTreeMap::new() };
    let mut seqs: Vec<(Op, u64, u32, bool)> = vec![(Op::Flush, 0, 0, false)]; // seq 0 = initial zeroes
    let mut pending = ops.iter().cloned().peekable();
    while pending.peek().is_some() || !inflight.by_id.is_empty() {
        let next_fits = pending.peek().map(|spec| {
            let (start, end) = clamp(spec, sectors_total);
            inflight.by_id.len() < depth && !inflight.conflicts(start, end, spec.op.is_modify())
        });
        let idle_now = idle_every > 0 && seqs.len() % idle_every == 0 && inflight.by_id.is_empty();
        if next_fits == Some(true) && idle_now && h.idle_pending() {
            h.step();
        } else if next_fits == Some(true) {
            let spec = pending.next().expect("peeked");
            let seq = seqs.len() as u64;
            let (start, end) = clamp(&spec, sectors_total);
            seqs.push((spec.op, start, (end - start) as u32, spec.fua && spec.op.is_modify()));
            let req = build_request(&spec, seq, start, end);
            if spec.op.is_modify() {
                for s in start..end {
                    let tag = if spec.op == Op::Write { seq } else { 0 };
                    model.history.entry(s).or_default().push(tag);
                }
            }
            if let Some(l) = log {
                l.mark(MARK_SUBMIT | seq);
            }
            let id = h.submit(req);
            inflight.by_id.insert(id.0, (start, end, spec.op.is_modify(), spec, seq));
        } else {
            assert!(h.step(), "workload stalled with {} in flight (seed {})", inflight.by_id.len(), h.seed());
        }
        for c in h.take_completions() {
            let (start, end, _, spec, seq) =
                inflight.by_id.remove(&c.id.0).expect("completion of a submitted op");
            check_completion(&c, &spec, start, end, &model, h.seed());
            if let Some(l) = log {
                l.mark(MARK_COMPLETE | seq);
            }
        }
    }
    seqs
}

fn clamp(spec: &OpSpec, sectors_total: u64) -> (u64, u64) {
    if spec.op == Op::Flush {
        return (0, 0);
    }
    let start = spec.sector % sectors_total;
    let end = (start + u64::from(spec.sectors)).min(sectors_total);
    (start, end)
}

fn build_request(spec: &OpSpec, seq: u64, start: u64, end: u64) -> Request {
    // Base stream `spec.stream`, run 0: the id the stream detector gives a
    // request that continues no sequential run.
    let stream = StreamId(spec.stream * layoutd_core::streams::RUN_SLOTS);
    let mut req = if spec.op == Op::Flush {
        Request::new(ReqId(0), Op::Flush, 0, 0)
    } else {
        Request::new(ReqId(0), spec.op, start * S, ((end - start) * S) as u32)
    };
    if spec.op == Op::Write {
        let mut data = Vec::with_capacity(((end - start) * S) as usize);
        for s in start..end {
            data.extend_from_slice(&tagged_sector(seq, s));
        }
        req.data = Some(Bytes::from(data));
    }
    req.fua = spec.fua && spec.op.is_modify();
    req.stream = stream;
    req
}

fn check_completion(c: &Completion, spec: &OpSpec, start: u64, end: u64, model: &Model, seed: u64) {
    assert_eq!(c.result, Ok(()), "{spec:?} failed (seed {seed})");
    if spec.op != Op::Read {
        return;
    }
    let data = c.data.as_ref().unwrap_or_else(|| panic!("read returned no data (seed {seed})"));
    assert_eq!(data.len() as u64, (end - start) * S);
    for s in start..end {
        let at = ((s - start) * S) as usize;
        let got = sector_tag(&data[at..at + S as usize], s);
        let want = model.current(s);
        assert_eq!(got, Some(want), "sector {s}: read {got:?}, expected write #{want} (seed {seed})");
    }
}

/// Runs a random workload on a stack built from `toml_text` over a zero-
/// latency reordering device and checks every read. Returns the harness.
pub fn oracle_check(toml_text: &str, device_bytes: u64, seed: u64, ops: &[OpSpec], depth: usize) -> Harness {
    oracle_check_with(&|mode| stack_from_toml(toml_text, device_bytes, mode), device_bytes, seed, ops, depth)
}

/// Builds a stack for an open mode: how the checks make and remake stacks.
pub type MakeStack<'a> = &'a dyn Fn(OpenMode) -> Box<dyn Target>;

/// [`oracle_check`] for any stack factory.
pub fn oracle_check_with(
    make: MakeStack<'_>,
    device_bytes: u64,
    seed: u64,
    ops: &[OpSpec],
    depth: usize,
) -> Harness {
    oracle_check_idle_with(make, device_bytes, seed, ops, depth, 0)
}

/// [`oracle_check_with`] with idle gaps (see [`run_oracle_idle`]).
pub fn oracle_check_idle_with(
    make: MakeStack<'_>,
    device_bytes: u64,
    seed: u64,
    ops: &[OpSpec],
    depth: usize,
    idle_every: usize,
) -> Harness {
    oracle_check_over(make, device_bytes, Before::BLANK, seed, ops, depth, idle_every).0
}

/// What the device holds before the format under test, and that format's
/// identity: the checks below run on a device an earlier use left (its
/// bytes must never come back as data) as well as on a blank one.
#[derive(Clone, Copy)]
pub struct Before<'a> {
    /// The device's bytes before the format (`None`: zeroes).
    pub image: Option<&'a MemDevice>,
    /// The identity the stack is formatted with ([`OpenMode::format`]).
    pub format_id: u64,
}

impl Before<'_> {
    /// A blank device, format identity 1.
    pub const BLANK: Before<'static> = Before { image: None, format_id: 1 };

    /// A fresh device holding the image (or zeroes).
    fn device(&self, device_bytes: u64) -> MemDevice {
        let dev = MemDevice::new(device_bytes);
        if let Some(b) = self.image {
            b.copy_to(&dev).expect("copy the earlier image");
        }
        dev
    }
}

/// `ops` after as many one-sector reads: the same writes in the same
/// order, but each tagged with a number the unshifted run never uses (a
/// sector's tag is its write's position), so an earlier run's data is
/// told from a later run's of the same `ops`.
pub fn tags_shifted(ops: &[OpSpec]) -> Vec<OpSpec> {
    let read = OpSpec { op: Op::Read, sector: 0, sectors: 1, fua: false, stream: 0 };
    std::iter::repeat_n(read, ops.len()).chain(ops.iter().cloned()).collect()
}

/// A device of `device_bytes` holding seeded random bytes: a disk used
/// by something else before (see [`Before`]).
pub fn random_image(device_bytes: u64, seed: u64) -> MemDevice {
    let dev = MemDevice::new(device_bytes);
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut buf = vec![0u8; 1 << 16];
    let mut at = 0;
    while at < device_bytes {
        let n = (device_bytes - at).min(buf.len() as u64) as usize;
        rng.fill(&mut buf[..n]);
        dev.write_at(&buf[..n], at).expect("write");
        at += n as u64;
    }
    dev
}

/// [`oracle_check_idle_with`] on a device holding `before.image`, formatted
/// with `before.format_id`: reads return what was written since, zeroes
/// elsewhere. Returns the harness and the device (its bytes afterwards:
/// the image a later check can start from).
pub fn oracle_check_over(
    make: MakeStack<'_>,
    device_bytes: u64,
    before: Before<'_>,
    seed: u64,
    ops: &[OpSpec],
    depth: usize,
    idle_every: usize,
) -> (Harness, Arc<MemDevice>) {
    let dev = Arc::new(before.device(device_bytes));
    let stack = make(OpenMode::format(before.format_id));
    let mut h = Harness::new(stack, dev.clone() as Arc<dyn BlockDevice>, ZeroLatency::reordering(), seed);
    bring_up(&mut h);
    run_oracle_idle(&mut h, ops, depth, None, idle_every);
    h.settle();
    // A final full read-back through a fresh pass compares every sector.
    (h, dev)
}

/// Records a random workload through a [`Recorder`], then for every flush
/// point and `random_cuts` random points: replays the log prefix onto a
/// fresh device, reopens the stack (unclean), reads the whole volume and
/// checks the durability rules. Returns the number of cut points checked.
pub fn crash_check(
    toml_text: &str,
    device_bytes: u64,
    seed: u64,
    ops: &[OpSpec],
    depth: usize,
    random_cuts: usize,
) -> usize {
    crash_check_with(
        &|mode| stack_from_toml(toml_text, device_bytes, mode),
        device_bytes,
        seed,
        ops,
        depth,
        random_cuts,
    )
}

/// [`crash_check`] for any stack factory.
pub fn crash_check_with(
    make: MakeStack<'_>,
    device_bytes: u64,
    seed: u64,
    ops: &[OpSpec],
    depth: usize,
    random_cuts: usize,
) -> usize {
    crash_check_idle_with(make, device_bytes, seed, ops, depth, random_cuts, 0)
}

/// [`crash_check_with`] with idle gaps (see [`run_oracle_idle`]).
pub fn crash_check_idle_with(
    make: MakeStack<'_>,
    device_bytes: u64,
    seed: u64,
    ops: &[OpSpec],
    depth: usize,
    random_cuts: usize,
    idle_every: usize,
) -> usize {
    crash_check_over(make, device_bytes, Before::BLANK, seed, ops, depth, random_cuts, idle_every)
}

/// [`crash_check_idle_with`] on a device holding `before.image`, formatted
/// with `before.format_id`: after a crash at any point, nothing of the
/// earlier image comes back as data (a sector holds a write of this run
/// or zeroes, by the same rules).
#[allow(clippy::too_many_arguments)]
pub fn crash_check_over(
    make: MakeStack<'_>,
    device_bytes: u64,
    before: Before<'_>,
    seed: u64,
    ops: &[OpSpec],
    depth: usize,
    random_cuts: usize,
    idle_every: usize,
) -> usize {
    let rec = Arc::new(Recorder::new(before.device(device_bytes)));
    let log = rec.log();
    let stack = make(OpenMode::format(before.format_id));
    let mut h = Harness::new(stack, rec.clone() as Arc<dyn BlockDevice>, ZeroLatency::reordering(), seed);
    bring_up(&mut h);
    // A volume exists once format is done (the superblock is written after
    // it): cuts inside the format are not crashes of a volume.
    let formatted = log.len();
    let ops_by_seq = run_oracle_idle(&mut h, ops, depth, Some(&log), idle_every);
    h.settle();
    let entries = log.entries();
    let cuts = cut_points(&log, formatted, seed, random_cuts);
    for &cut in &cuts {
        check_cut(make, device_bytes, before.image, seed, &log, &entries[..cut], &ops_by_seq, None);
    }
    let torn = torn_cuts(&entries, formatted, &cuts);
    let mut checked = cuts.len();
    for (cut, tear) in torn {
        checked += usize::from(check_cut(
            make,
            device_bytes,
            before.image,
            seed,
            &log,
            &entries[..cut],
            &ops_by_seq,
            Some(tear),
        ));
    }
    checked
}

/// Crashes while opening the volume in `image` (unclean, as after a
/// crash): for each of `seeds`, records one open over a zero-latency
/// reordering device, as a volume opens ([`bring_up_on`]; and checks that
/// the open a volume makes, staged over an overlay and committed, makes
/// the same requests: [`check_staged_open`]), then at every point of its
/// writes, and again with
/// the last write before that point torn (each [`Tear`]), reopens the
/// device and reads the whole volume. `checkpoints` says which
/// checkpoint copies a device holds that decode: (generation, version)
/// each. At every crash image the newest of them must not be older than
/// on `image` (a crash may not leave recovery an older checkpoint than
/// the one it started from); the reopen must succeed, read what the
/// uninterrupted open reads (nothing is written above, so all of it was
/// flushed before) and leave no copy of another version than the
/// uninterrupted open leaves (an upgrade a crash cut short is finished by
/// the next open). Returns the number of crash images checked and the
/// volume's bytes.
pub fn crash_check_open(
    make: MakeStack<'_>,
    image: &MemDevice,
    seeds: std::ops::Range<u64>,
    checkpoints: &dyn Fn(&MemDevice) -> Vec<(u64, u32)>,
) -> (usize, Vec<u8>) {
    crash_check_open_with(make, image, seeds, Some(checkpoints), None)
}

/// [`crash_check_open`] for any stack, without reading its checkpoint
/// copies: at every crash point of the open (torn or not) the volume
/// reopens and its first `read_bytes` (a pool's first volume, say) read
/// what the uninterrupted open reads.
pub fn crash_check_open_reads(
    make: MakeStack<'_>,
    image: &MemDevice,
    seeds: std::ops::Range<u64>,
    read_bytes: u64,
) -> (usize, Vec<u8>) {
    crash_check_open_with(make, image, seeds, None, Some(read_bytes))
}

/// Which checkpoint copies a device holds that decode: (generation,
/// version) each.
type Checkpoints<'a> = &'a dyn Fn(&MemDevice) -> Vec<(u64, u32)>;

fn crash_check_open_with(
    make: MakeStack<'_>,
    image: &MemDevice,
    seeds: std::ops::Range<u64>,
    checkpoints: Option<Checkpoints<'_>>,
    read_bytes: Option<u64>,
) -> (usize, Vec<u8>) {
    let device_bytes = image.size_bytes();
    let read = |h: &mut Harness, when: &str| match read_bytes {
        Some(n) => read_first(h, n, when),
        None => read_volume(h, when),
    };
    let newest = |dev: &MemDevice| checkpoints.and_then(|c| c(dev).into_iter().max());
    let recovered_from = checkpoints.map(|_| newest(image).expect("the image holds a checkpoint").0);
    let copy = || {
        let dev = MemDevice::new(device_bytes);
        image.copy_to(&dev).expect("copy the image");
        dev
    };
    let opened = Arc::new(copy());
    let volume = read(&mut open_image(make, opened.clone(), 0).expect("the image opens"), "on the image");
    let version = checkpoints.map(|_| newest(&opened).expect("a checkpoint").1);
    let mut checked = 0;
    for seed in seeds {
        let rec = Arc::new(Recorder::new(copy()));
        let log = rec.log();
        let stack = make(OpenMode::Open { clean: false, accept_loss: false });
        bring_up_on(stack, rec, ZeroLatency::reordering(), seed).expect("the image opens");
        check_staged_open(make, copy(), seed, &log);
        for cut in 0..=log.len() {
            for tear in [None, Some(Tear::FirstSector), Some(Tear::Garbage)] {
                let Some(dev) = crash_image(&log, cut, device_bytes, Some(image), tear) else { continue };
                let at = format!("at cut {cut} of {} (torn: {tear:?}, seed {seed})", log.len());
                if let Some(recovered_from) = recovered_from {
                    let found = newest(&dev).map(|c| c.0);
                    assert!(
                        found >= Some(recovered_from),
                        "newest readable checkpoint {found:?}, older than generation {recovered_from} the open \
                         recovered from, {at}"
                    );
                }
                let dev = Arc::new(dev);
                let mut h = open_image(make, dev.clone(), seed)
                    .unwrap_or_else(|e| panic!("the volume does not reopen {at}: {e}"));
                assert!(read(&mut h, &at) == volume, "the volume reads otherwise than before the crash {at}");
                if let (Some(checkpoints), Some(version)) = (checkpoints, version) {
                    let left = checkpoints(&dev);
                    assert!(
                        left.iter().all(|c| c.1 == version),
                        "after the reopen the checkpoint copies are {left:?} (generation, version), not all of \
                         version {version}, {at}"
                    );
                }
                checked += 1;
            }
        }
    }
    (checked, volume)
}

/// Opens the volume on `dev` as a volume does ([`bring_up_staged`]: once,
/// over a recording overlay, then committed) with the same timing and
/// seed as the direct open recorded in `direct`: nothing reaches `dev`
/// before the commit, and the commit makes exactly the direct open's
/// requests (the same writes, trims, zeroes and flushes, in the same
/// order), so every crash image of the direct open, torn or not, is also
/// one of the commit's, and no other.
pub fn check_staged_open(make: MakeStack<'_>, dev: MemDevice, seed: u64, direct: &WriteLog) {
    let rec = Arc::new(Recorder::new(dev));
    let stack = make(OpenMode::Open { clean: false, accept_loss: false });
    let (_, staged) = bring_up_staged(stack, rec.clone(), ZeroLatency::reordering(), seed)
        .unwrap_or_else(|e| panic!("the staged open is refused (seed {seed}): {e}"));
    assert!(rec.log().is_empty(), "the staged open wrote before its commit (seed {seed})");
    staged.commit().expect("commit");
    let (got, want) = (rec.log().entries(), direct.entries());
    let first = got.iter().zip(&want).position(|(a, b)| a != b).unwrap_or(got.len().min(want.len()));
    assert!(
        got == want,
        "the commit made {} requests, the direct open {}; first difference at {first}: {:?} vs {:?} (seed {seed})",
        got.len(),
        want.len(),
        got.get(first).map(|e| brief(&e.op)),
        want.get(first).map(|e| brief(&e.op))
    );
}

/// A log entry without its data.
fn brief(op: &LogOp) -> String {
    match op {
        LogOp::Write { offset_bytes, data } => format!("write {offset_bytes}+{}", data.len()),
        other => format!("{other:?}"),
    }
}

/// Opens the volume on `dev` as after a crash (unclean, no loss
/// accepted) over a zero-latency device: the harness, or why the open
/// was refused.
pub fn open_image(make: MakeStack<'_>, dev: Arc<MemDevice>, seed: u64) -> Result<Harness, String> {
    let stack = make(OpenMode::Open { clean: false, accept_loss: false });
    let mut h = Harness::new(stack, dev as Arc<dyn BlockDevice>, ZeroLatency::default(), seed);
    // A refused open is not ready: bring-up returns its error.
    h.bring_up()?;
    Ok(h)
}

/// Every byte of the volume, read in 128 KiB requests; a failed read
/// panics naming `when`.
fn read_volume<T: Timing>(h: &mut Harness<T>, when: &str) -> Vec<u8> {
    let size = h.stack.size_bytes();
    read_first(h, size, when)
}

/// The first `size` bytes of the volume, as [`read_volume`].
fn read_first<T: Timing>(h: &mut Harness<T>, size: u64, when: &str) -> Vec<u8> {
    let chunk = 256 * S;
    let mut bytes = Vec::with_capacity(size as usize);
    let mut off = 0;
    while off < size {
        let len = chunk.min(size - off);
        let c = h.read(off, len as u32);
        assert_eq!(c.result, Ok(()), "read at volume offset {off} failed {when}");
        bytes.extend_from_slice(&c.data.expect("data mode"));
        off += len;
    }
    bytes
}

/// Where to cut a recorded log: right after the format (the volume reads
/// zeroes), every flush point after it, `random_cuts` seeded random
/// points, and the end.
pub(crate) fn cut_points(log: &WriteLog, formatted: usize, seed: u64, random_cuts: usize) -> Vec<usize> {
    let len = log.len();
    let mut cuts: Vec<usize> = log.flush_points().into_iter().filter(|&c| c >= formatted).collect();
    cuts.push(formatted);
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0xC0FFEE);
    cuts.extend((0..random_cuts).map(|_| rng.gen_range(formatted..=len)));
    cuts.push(len);
    cuts.sort_unstable();
    cuts.dedup();
    cuts
}

/// Where [`crash_check_over`] and the volumes' crash check also tear the
/// last write: the write just before each flush after `formatted` (a
/// commit record, a checkpoint, a journal block, or data) cut short at
/// its first sector and left unreadable; the last write of each of `cuts`
/// torn one way or the other (alternating, to bound the tests' time).
pub(crate) fn torn_cuts(
    entries: &[layoutd_disk::LogEntry],
    formatted: usize,
    cuts: &[usize],
) -> Vec<(usize, Tear)> {
    let before_flush = (formatted + 1..entries.len()).filter(|&i| {
        matches!(entries[i].op, LogOp::Flush) && matches!(entries[i - 1].op, LogOp::Write { .. })
    });
    let both = [Tear::FirstSector, Tear::Garbage];
    let mut torn: Vec<(usize, Tear)> = before_flush.flat_map(|cut| both.map(|t| (cut, t))).collect();
    torn.extend(cuts.iter().filter(|&&c| c > formatted).enumerate().map(|(k, &c)| (c, both[k % 2])));
    torn.sort_unstable_by_key(|&(cut, t)| (cut, t as u8));
    torn.dedup();
    torn
}

/// The device after the first `cut` entries of `log` over `base`, the last
/// torn as `tear` says; `None` if `tear` is given and that entry is no
/// write (or tearing would change nothing).
pub(crate) fn crash_image(
    log: &WriteLog,
    cut: usize,
    device_bytes: u64,
    base: Option<&MemDevice>,
    tear: Option<Tear>,
) -> Option<MemDevice> {
    match tear {
        None => Some(log.image_at(cut, device_bytes, base).expect("replay")),
        Some(t) => log.image_torn_at(cut, device_bytes, base, t).expect("replay"),
    }
}

/// What a sector read back after a crash holds: a write's tag (0: zeroes),
/// or, where the crash left a write unreadable ([`Tear::Garbage`]), the
/// tag of the write it tore (`torn` true): only a write still in flight
/// may read back so.
pub(crate) fn crash_sector_tag(bytes: &[u8], s: u64, tear: Option<Tear>) -> Option<(u64, bool)> {
    if let Some(got) = sector_tag(bytes, s) {
        return Some((got, false));
    }
    if tear != Some(Tear::Garbage) {
        return None;
    }
    let inverted: Vec<u8> = bytes.iter().map(|b| !b).collect();
    sector_tag(&inverted, s).map(|got| (got, true))
}

/// Whether a sector holding `got` (see [`crash_sector_tag`]) is allowed
/// when it may hold `allowed` (the newest durable value first, then the
/// writes in flight).
pub(crate) fn crash_sector_fine(got: Option<(u64, bool)>, allowed: &[u64]) -> bool {
    match got {
        Some((g, false)) => allowed.contains(&g),
        Some((g, true)) => allowed.get(1..).is_some_and(|in_flight| in_flight.contains(&g)),
        None => false,
    }
}

/// Checks one cut point: which values each sector may hold, and that it
/// does. With `tear`, the prefix's last entry, a write, lands torn (see
/// [`Tear`]); returns false if it is no write (nothing checked). An
/// unreadable sector ([`Tear::Garbage`]) may then read back through the
/// volume only where a write still in flight at the cut went: the sector
/// of a write not yet durable, never the durable value's.
#[allow(clippy::too_many_arguments)]
fn check_cut(
    make: MakeStack<'_>,
    device_bytes: u64,
    base: Option<&MemDevice>,
    seed: u64,
    log: &WriteLog,
    prefix: &[layoutd_disk::LogEntry],
    ops: &[(Op, u64, u32, bool)],
    tear: Option<Tear>,
) -> bool {
    let (submitted, durable_before) = upper_timeline(prefix, ops);
    let cut = prefix.len();
    let Some(image) = crash_image(log, cut, device_bytes, base, tear) else { return false };
    let at = match tear {
        None => format!("at cut {cut} (seed {seed})"),
        Some(t) => format!("at cut {cut}, its last write torn ({t:?}) (seed {seed})"),
    };
    let stack = make(OpenMode::Open { clean: false, accept_loss: false });
    let mut h = Harness::new(stack, Arc::new(image) as Arc<dyn BlockDevice>, ZeroLatency::default(), seed);
    bring_up(&mut h);
    let data = read_volume(&mut h, &format!("after recovery {at}"));
    for (s, bytes) in data.chunks(S as usize).enumerate() {
        let s = s as u64;
        let allowed = allowed_values(s, ops, &submitted, &durable_before);
        let got = crash_sector_tag(bytes, s, tear);
        assert!(
            crash_sector_fine(got, &allowed),
            "{} after a crash {at}; allowed {allowed:?} (newest durable write #{}; only a write in flight \
             may be torn)",
            match got {
                Some((g, false)) => format!("sector {s} holds write #{g}"),
                Some((g, true)) => format!("sector {s} reads back unreadable (torn) bytes of write #{g}"),
                None => format!("sector {s} holds bytes no write ever wrote"),
            },
            allowed[0]
        );
    }
    true
}

/// From the marks in the log prefix: which seqs were submitted, and the
/// seq boundary before which every completed modify is durable.
pub(crate) fn upper_timeline(
    prefix: &[layoutd_disk::LogEntry],
    ops: &[(Op, u64, u32, bool)],
) -> (Vec<bool>, Vec<bool>) {
    let mut submitted = vec![false; ops.len()];
    submitted[0] = true;
    let mut completed = vec![false; ops.len()];
    let mut durable = vec![false; ops.len()];
    durable[0] = true;
    let mut completed_at_flush_submit: HashMap<u64, Vec<u64>> = HashMap::new();
    for e in prefix {
        let LogOp::Mark(m) = e.op else { continue };
        let seq = m & !(MARK_SUBMIT | MARK_COMPLETE);
        if m & MARK_SUBMIT != 0 {
            submitted[seq as usize] = true;
            if ops[seq as usize].0 == Op::Flush {
                let done: Vec<u64> = (0..ops.len() as u64).filter(|&i| completed[i as usize]).collect();
                completed_at_flush_submit.insert(seq, done);
            }
        } else {
            completed[seq as usize] = true;
            let (op, _, _, fua) = ops[seq as usize];
            if fua {
                durable[seq as usize] = true;
            }
            if op == Op::Flush {
                for i in completed_at_flush_submit.remove(&seq).unwrap_or_default() {
                    durable[i as usize] = true;
                }
            }
        }
    }
    (submitted, durable)
}

/// A sector may hold the value of its newest durable write, or of any later
/// write submitted before the cut; nothing else.
fn allowed_values(s: u64, ops: &[(Op, u64, u32, bool)], submitted: &[bool], durable: &[bool]) -> Vec<u64> {
    let touches = |seq: usize| {
        let (op, start, n, _) = ops[seq];
        op.is_modify() && start <= s && s < start + u64::from(n)
    };
    let value = |seq: usize| if ops[seq].0 == Op::Write { seq as u64 } else { 0 };
    let history: Vec<usize> = (0..ops.len()).filter(|&i| i == 0 || touches(i)).collect();
    let newest_durable = history.iter().rposition(|&i| durable[i]).expect("seq 0 is durable");
    // The newest durable write is submitted: it comes first.
    history[newest_durable..].iter().filter(|&&i| submitted[i]).map(|&i| value(i)).collect()
}
