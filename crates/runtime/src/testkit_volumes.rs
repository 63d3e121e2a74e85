//! The oracle and the crash check for a target that holds several volumes
//! in its address space (the `pool`: volume `slot` at `slot *
//! volume_size`), taking, writing, deleting and merging snapshots at
//! random points through `Target::message`:
//!
//! - each volume has its own model: a snapshot starts as a copy of its
//!   parent's model, a merge makes the origin's model the snapshot's;
//! - every sector a write covers carries a tag of the write and of the
//!   sector's number *within its volume*, so a snapshot's copy of an
//!   origin sector reads as the origin's write;
//! - the crash check cuts the recorded lower write log anywhere, reopens,
//!   reads which volumes exist (the snapshot operations durable at the cut),
//!   reads every existing volume whole and checks each sector holds its
//!   newest durable value or a later submitted one, where a snapshot's
//!   creation (or a merge) counts as a durable write of every sector once
//!   the operation itself is durable.
//!
//! Workloads are well behaved as in [`crate::testkit`]: no two in-flight
//! requests overlap when one modifies; snapshot operations are sent with
//! nothing in flight (they are then followed by a flush, as `layoutd
//! snapshot` does).

use crate::det::{Harness, Timing, ZeroLatency};
use crate::testkit::{
    bring_up, crash_image, crash_sector_fine, crash_sector_tag, cut_points, random_op, sector_tag,
    tagged_sector, torn_cuts, upper_timeline, MakeStack, MARK_COMPLETE, MARK_SUBMIT,
};
use bytes::Bytes;
use layoutd_core::{Op, OpenMode, ReqId, Request, StreamId, Target, SECTOR_BYTES};
use layoutd_disk::{BlockDevice, MemDevice, Recorder, WriteLog};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

const S: u64 = SECTOR_BYTES;

/// The volumes a `snapshot list` reply names: `(slot, name, read_only)`.
pub fn list_volumes(stack: &mut dyn Target, now: layoutd_core::Instant) -> (Vec<(usize, String, bool)>, u64) {
    let reply = stack.message(now, "snapshot list").expect("snapshot list");
    let mut out = Vec::new();
    let mut size = 0;
    for line in reply.lines() {
        let mut words = line.split_whitespace();
        let name = words.next().expect("a name").to_string();
        let kv: HashMap<&str, &str> = words.filter_map(|w| w.split_once('=')).collect();
        let slot: usize = kv["slot"].parse().expect("slot");
        size = kv["size_bytes"].parse().expect("size");
        out.push((slot, name, kv["mode"] == "ro"));
    }
    out.sort();
    (out, size)
}

/// One entry of a volume's history at a sector.
#[derive(Clone, Debug)]
enum Entry {
    /// Upper op `seq` (a write's tag, or zeroes).
    Io(usize),
    /// Snapshot operation `j` set the whole volume to these values
    /// (absent: zeroes).
    Base(usize, Arc<HashMap<u64, u64>>),
}

#[derive(Clone, Debug)]
struct ModelVolume {
    name: String,
    read_only: bool,
    current: HashMap<u64, u64>,
    history: Vec<Entry>,
}

/// The shape of a random workload over volumes.
#[derive(Clone, Copy, Debug)]
pub struct Workload {
    /// Events (ops and snapshot operations).
    pub count: usize,
    /// Requests in flight at most.
    pub depth: usize,
    /// About one event in this many is a snapshot operation.
    pub snapshot_every: u32,
    /// Whether reads are issued (off for a crash check that must catch a
    /// bug by the cuts alone).
    pub reads: bool,
}

/// What a run did, for the crash check.
pub struct VolumesRun {
    /// seq -> (op, slot, first sector within the volume, sectors, fua).
    ops: Vec<(Op, usize, u64, u32, bool)>,
    /// The volume table after each snapshot operation (index 0: before any).
    tables: Vec<Vec<(usize, String)>>,
    /// Each incarnation: (slot, name) -> history.
    volumes: Vec<(usize, String, Vec<Entry>)>,
    /// Snapshot operations done.
    pub snapshot_ops: usize,
    /// Reads checked.
    pub reads_checked: usize,
}

/// Runs `count` random events on the stack in `h` (ops on random volumes,
/// and about one snapshot operation in `snapshot_every`), checking every
/// read against each volume's model. Marks upper events in `log` if given.
pub fn run_volumes<T: Timing>(
    h: &mut Harness<T>,
    seed: u64,
    w: Workload,
    log: Option<&WriteLog>,
) -> VolumesRun {
    let Workload { count, depth, snapshot_every, reads } = w;
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5A5A);
    let now = h.now;
    let (table, vol_bytes) = list_volumes(&mut *h.stack, now);
    let slots = (h.stack.size_bytes() / vol_bytes) as usize;
    let sectors = vol_bytes / S;
    let mut model: Vec<Option<ModelVolume>> = vec![None; slots];
    for (slot, name, ro) in &table {
        model[*slot] = Some(ModelVolume {
            name: name.clone(),
            read_only: *ro,
            current: HashMap::new(),
            history: vec![Entry::Base(0, Arc::new(HashMap::new()))],
        });
    }
    let mut run = VolumesRun {
        ops: vec![(Op::Flush, 0, 0, 0, false)],
        tables: vec![table.iter().map(|(s, n, _)| (*s, n.clone())).collect()],
        volumes: Vec::new(),
        snapshot_ops: 0,
        reads_checked: 0,
    };
    let mut inflight: BTreeMap<u64, (usize, u64, u64, bool, usize)> = BTreeMap::new(); // id -> slot, start, end, modifies, seq
    let mut names = 0;
    let mut done = 0;
    let check = |h: &mut Harness<T>,
                 inflight: &mut BTreeMap<u64, (usize, u64, u64, bool, usize)>,
                 model: &Vec<Option<ModelVolume>>,
                 run: &mut VolumesRun| {
        for c in h.take_completions() {
            let (slot, start, end, _, seq) = inflight.remove(&c.id.0).expect("submitted");
            let (op, ..) = run.ops[seq];
            assert_eq!(c.result, Ok(()), "op #{seq} {op:?} on volume {slot} failed (seed {seed})");
            if op == Op::Read {
                let data = c.data.expect("data mode");
                let vol = model[slot].as_ref().expect("a read of a live volume");
                for s in start..end {
                    let at = ((s - start) * S) as usize;
                    let got = sector_tag(&data[at..at + S as usize], s);
                    let want = vol.current.get(&s).copied().unwrap_or(0);
                    assert_eq!(
                        got,
                        Some(want),
                        "volume `{}` sector {s}: read {got:?}, expected write #{want} (op #{seq}, seed {seed})",
                        vol.name
                    );
                }
                run.reads_checked += 1;
            }
            if let Some(l) = log {
                l.mark(MARK_COMPLETE | seq as u64);
            }
        }
    };
    while done < count || !inflight.is_empty() {
        check(h, &mut inflight, &model, &mut run);
        if done >= count {
            assert!(h.step(), "stalled with {} in flight (seed {seed})", inflight.len());
            continue;
        }
        if rng.gen_ratio(1, snapshot_every) {
            // A snapshot operation, with nothing in flight.
            while !inflight.is_empty() {
                assert!(h.step(), "stalled (seed {seed})");
                check(h, &mut inflight, &model, &mut run);
            }
            done += 1;
            let live: Vec<usize> = (0..slots).filter(|&s| model[s].is_some()).collect();
            let snaps: Vec<usize> = live.iter().copied().filter(|&s| s != 0).collect();
            let free = (0..slots).find(|&s| model[s].is_none());
            let j = run.tables.len();
            let msg = match rng.gen_range(0..4) {
                0 | 1 if free.is_some() => {
                    let of = live[rng.gen_range(0..live.len())];
                    let ro = rng.gen_bool(0.3);
                    names += 1;
                    let name = format!("s{names}");
                    let slot = free.expect("checked");
                    let parent = model[of].as_ref().expect("live");
                    let (current, parent_name) = (parent.current.clone(), parent.name.clone());
                    model[slot] = Some(ModelVolume {
                        name: name.clone(),
                        read_only: ro,
                        history: vec![Entry::Base(j, Arc::new(current.clone()))],
                        current,
                    });
                    format!("snapshot create {name} of {parent_name}{}", if ro { " ro" } else { "" })
                }
                2 if !snaps.is_empty() => {
                    let s = snaps[rng.gen_range(0..snaps.len())];
                    let gone = model[s].take().expect("live");
                    run.volumes.push((s, gone.name.clone(), gone.history));
                    format!("snapshot delete {}", gone.name)
                }
                3 if !snaps.is_empty() => {
                    let s = snaps[rng.gen_range(0..snaps.len())];
                    let gone = model[s].take().expect("live");
                    let origin = model[0].as_mut().expect("origin");
                    origin.current = gone.current.clone();
                    origin.history.push(Entry::Base(j, Arc::new(gone.current.clone())));
                    run.volumes.push((s, gone.name.clone(), gone.history));
                    format!("snapshot merge {}", gone.name)
                }
                _ => continue,
            };
            h.message(&msg).unwrap_or_else(|e| panic!("{msg}: {e} (seed {seed})"));
            run.snapshot_ops += 1;
            run.tables
                .push((0..slots).filter_map(|s| model[s].as_ref().map(|v| (s, v.name.clone()))).collect());
            continue;
        }
        // An op on a random volume.
        let live: Vec<usize> = (0..slots).filter(|&s| model[s].is_some()).collect();
        let slot = live[rng.gen_range(0..live.len())];
        let op = random_op(&mut rng);
        let op = if op.is_modify() && model[slot].as_ref().expect("live").read_only { Op::Read } else { op };
        if op == Op::Read && !reads {
            continue;
        }
        let n = if rng.gen_bool(0.1) { rng.gen_range(1..=200u64) } else { rng.gen_range(1..=16u64) };
        let start = rng.gen_range(0..sectors);
        let end = (start + n).min(sectors);
        let fua = op.is_modify() && rng.gen_bool(0.1);
        let (gs, ge) = (slot as u64 * sectors + start, slot as u64 * sectors + end);
        let modifies = op.is_modify();
        let blocked = op != Op::Flush
            && inflight.values().any(|&(s2, a, b, m, _)| {
                let (ga, gb) = (s2 as u64 * sectors + a, s2 as u64 * sectors + b);
                ga < ge && gs < gb && (m || modifies)
            });
        if blocked || inflight.len() >= depth {
            assert!(h.step(), "stalled (seed {seed})");
            continue;
        }
        done += 1;
        let seq = run.ops.len();
        let mut req = if op == Op::Flush {
            run.ops.push((op, 0, 0, 0, false));
            Request::new(ReqId(0), Op::Flush, 0, 0)
        } else {
            run.ops.push((op, slot, start, (end - start) as u32, fua));
            Request::new(ReqId(0), op, gs * S, ((end - start) * S) as u32)
        };
        if op == Op::Write {
            let mut data = Vec::with_capacity(((end - start) * S) as usize);
            for s in start..end {
                data.extend_from_slice(&tagged_sector(seq as u64, s));
            }
            req.data = Some(Bytes::from(data));
        }
        req.fua = fua;
        req.stream = StreamId(rng.gen_range(0..4));
        if modifies {
            let vol = model[slot].as_mut().expect("live");
            for s in start..end {
                vol.current.insert(s, if op == Op::Write { seq as u64 } else { 0 });
            }
            vol.history.push(Entry::Io(seq));
        }
        if let Some(l) = log {
            l.mark(MARK_SUBMIT | seq as u64);
        }
        let id = h.submit(req);
        inflight.insert(id.0, (slot, start, end, modifies, seq));
    }
    for (s, v) in model.into_iter().enumerate() {
        if let Some(v) = v {
            run.volumes.push((s, v.name, v.history));
        }
    }
    run
}

/// [`run_volumes`] on a fresh stack over a zero-latency reordering device;
/// returns the harness and the run.
pub fn volumes_oracle_check(
    make: MakeStack<'_>,
    device_bytes: u64,
    seed: u64,
    w: Workload,
) -> (Harness, VolumesRun) {
    let dev = Arc::new(MemDevice::new(device_bytes));
    let mut h = Harness::new(make(OpenMode::format(1)), dev, ZeroLatency::reordering(), seed);
    bring_up(&mut h);
    let run = run_volumes(&mut h, seed, w, None);
    h.settle();
    (h, run)
}

/// Records a run through a [`Recorder`], then at every flush point and
/// `random_cuts` random points reopens the stack on the log prefix and
/// checks every existing volume whole. Returns `(cuts, snapshot ops)`.
pub fn volumes_crash_check(
    make: MakeStack<'_>,
    device_bytes: u64,
    seed: u64,
    w: Workload,
    random_cuts: usize,
) -> (usize, usize) {
    let rec = Arc::new(Recorder::new(MemDevice::new(device_bytes)));
    let log = rec.log();
    let mut h = Harness::new(
        make(OpenMode::format(1)),
        rec.clone() as Arc<dyn BlockDevice>,
        ZeroLatency::reordering(),
        seed,
    );
    bring_up(&mut h);
    let formatted = log.len();
    let run = run_volumes(&mut h, seed, w, Some(&log));
    h.settle();
    let entries = log.entries();
    let cuts = cut_points(&log, formatted, seed, random_cuts);
    let plain: Vec<(Op, u64, u32, bool)> = run.ops.iter().map(|&(op, _, s, n, f)| (op, s, n, f)).collect();
    let torn = torn_cuts(&entries, formatted, &cuts);
    let mut checked = 0;
    for (cut, tear) in cuts.iter().map(|&c| (c, None)).chain(torn.into_iter().map(|(c, t)| (c, Some(t)))) {
        let (submitted, durable) = upper_timeline(&entries[..cut], &plain);
        let Some(image) = crash_image(&log, cut, device_bytes, None, tear) else { continue };
        checked += 1;
        let image = Arc::new(image);
        let at = match tear {
            None => format!("at log entry {cut}"),
            Some(t) => format!("at log entry {cut}, its last write torn ({t:?})"),
        };
        let stack = make(OpenMode::Open { clean: false, accept_loss: false });
        let mut h = Harness::new(stack, image as Arc<dyn BlockDevice>, ZeroLatency::default(), seed);
        bring_up(&mut h);
        let now = h.now;
        let (table, vol_bytes) = list_volumes(&mut *h.stack, now);
        let table: Vec<(usize, String)> = table.into_iter().map(|(s, n, _)| (s, n)).collect();
        let candidates: Vec<usize> = (0..run.tables.len()).filter(|&k| run.tables[k] == table).collect();
        assert!(
            !candidates.is_empty(),
            "after a crash {at} the volumes are {table:?}, a table no snapshot operation left (seed \
             {seed})"
        );
        // Read every volume once; accept if some candidate state explains all.
        let mut contents: Vec<(usize, String, Vec<Option<(u64, bool)>>)> = Vec::new();
        for (slot, name) in &table {
            let mut tags = Vec::new();
            let mut off = 0;
            while off < vol_bytes {
                let len = (256 * S).min(vol_bytes - off);
                let c = h.read(*slot as u64 * vol_bytes + off, len as u32);
                assert_eq!(c.result, Ok(()), "read of `{name}` after a crash {at} failed (seed {seed})");
                let data = c.data.expect("data mode");
                for i in 0..len / S {
                    let s = off / S + i;
                    tags.push(crash_sector_tag(&data[(i * S) as usize..((i + 1) * S) as usize], s, tear));
                }
                off += len;
            }
            contents.push((*slot, name.clone(), tags));
        }
        let mut why = String::new();
        let ok = candidates.iter().any(|&k| {
            contents.iter().all(|(slot, name, tags)| {
                let hist = &run
                    .volumes
                    .iter()
                    .find(|(s, n, _)| s == slot && n == name)
                    .expect("a volume the run made")
                    .2;
                tags.iter().enumerate().all(|(s, got)| {
                    let allowed = allowed_values(hist, s as u64, k, &plain, &submitted, &durable);
                    let fine = crash_sector_fine(*got, &allowed);
                    if !fine && why.is_empty() {
                        why = format!(
                            "volume `{name}` sector {s} holds {got:?}; allowed {allowed:?} (state after \
                             snapshot op {k})"
                        );
                    }
                    fine
                })
            })
        });
        assert!(ok, "after a crash {at}: {why} (seed {seed}; only a write in flight may be torn)");
    }
    (checked, run.snapshot_ops)
}

/// The values sector `s` of a volume with `history` may hold when the
/// snapshot operations up to `k` are durable.
fn allowed_values(
    history: &[Entry],
    s: u64,
    k: usize,
    ops: &[(Op, u64, u32, bool)],
    submitted: &[bool],
    durable: &[bool],
) -> Vec<u64> {
    // (value, durable, submitted) of each entry that touches the sector.
    let touching: Vec<(u64, bool, bool)> = history
        .iter()
        .filter_map(|e| match e {
            Entry::Base(j, values) => (*j <= k).then(|| (values.get(&s).copied().unwrap_or(0), true, true)),
            Entry::Io(seq) => {
                let (op, start, n, _) = ops[*seq];
                (op.is_modify() && start <= s && s < start + u64::from(n))
                    .then(|| (if op == Op::Write { *seq as u64 } else { 0 }, durable[*seq], submitted[*seq]))
            }
        })
        .collect();
    let newest = touching.iter().rposition(|t| t.1).unwrap_or(0);
    touching[newest..].iter().filter(|t| t.2).map(|t| t.0).collect()
}
