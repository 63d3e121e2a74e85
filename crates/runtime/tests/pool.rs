//! The `pool` target: each volume's own oracle with snapshots taken,
//! written, deleted and merged at random points; crash cuts checking every
//! volume; copy-on-write sharing, placement, thin allocation, bad input.

use layoutd_core::{Completion, Instant, IoError, Op, OpenMode, ReqId, Request, Stack, Status, Target};
use layoutd_disk::{BlockDevice, MemDevice, Recorder};
use layoutd_runtime::det::{Harness, ZeroLatency};
use layoutd_runtime::testkit::{bring_up, stack_from_toml};
use layoutd_runtime::testkit_volumes::{list_volumes, volumes_crash_check, volumes_oracle_check, Workload};
use std::collections::VecDeque;
use std::sync::Arc;

const DEVICE_BYTES: u64 = 2 << 20;

/// A small pool with `extra` keys; the origin's shared writes copy out
/// unless `extra` says otherwise (the tests written for copy-out name it,
/// since the default is redirect).
fn cfg(placement: &str, extra: &str) -> String {
    let mode =
        if extra.contains("origin_shared_write") { "" } else { "origin_shared_write = \"copy-out\"\n" };
    cfg_default(placement, &format!("{mode}{extra}"))
}

/// A small pool with `extra` keys and the defaults for the rest.
fn cfg_default(placement: &str, extra: &str) -> String {
    format!(
        "version = 1\n[[layer]]\ntarget = \"pool\"\nchunk_size = \"8K\"\nvolume_size = \"384K\"\nvolumes_max = 4\n\
         journal_blocks = 8\nplacement = \"{placement}\"\n{extra}"
    )
}

fn policies() -> Vec<String> {
    vec![
        cfg("contiguous", ""),
        cfg("sliced", "slices = 6\n"),
        cfg("nearest", ""),
        cfg("contiguous", "zero_new_chunks_with = \"write\"\n"),
        // The default: redirect.
        cfg_default("nearest", ""),
        cfg("sliced", "slices = 6\norigin_shared_write = \"redirect\"\n"),
        // Redirect, the partial chunks put home composed by the defragmenter.
        cfg_default("contiguous", "defrag = true\ndefrag_partial_home = true\n"),
        // Fresh chunks zeroed with write-zeroes (the default before
        // session 26 kept partial with no base; redirect, defrag).
        cfg_default("nearest", "zero_new_chunks_with = \"write-zeroes\"\n"),
        // The built-in default: `sliced` 30, redirect, defrag.
        cfg_default("nearest", "").replace("placement = \"nearest\"\n", ""),
    ]
}

#[test]
fn every_volume_reads_back_its_own_model_with_snapshots_at_random_points() {
    let (mut partial_redirects, mut fills, mut fill_runs, mut homed, mut fresh) = (0, 0, 0, 0, 0);
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
            if !c.contains("copy-out") {
                // The partial-chunk paths ran: redirects that wrote only
                // their own sectors, fills (idle or before a whole read),
                // some of runs of chunks.
                partial_redirects += counter(&h, "origin_partial_redirects_count");
                fills += counter(&h, "chunks_filled_count");
                fill_runs += counter(&h, "fill_runs_count");
                homed += counter(&h, "partial_chunks_composed_home_count");
            }
            fresh += counter(&h, "fresh_partial_chunks_count");
        }
    }
    assert!(
        partial_redirects > 20 && fills > 10 && fill_runs > 0 && homed > 0,
        "partial redirects {partial_redirects}, fills {fills} ({fill_runs} runs of chunks), {homed} put home composed"
    );
    assert!(fresh > 20, "fresh chunks kept partial: {fresh}");
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

/// A pool over [`EarlyAck`].
fn early_ack_pool(c: String) -> impl Fn(layoutd_core::OpenMode) -> Box<dyn Target> {
    move |mode| {
        let pool = stack_from_toml(&c, DEVICE_BYTES, mode);
        let below = EarlyAck {
            armed: !matches!(mode, layoutd_core::OpenMode::Format { .. }),
            format_fua: None,
            lower: VecDeque::new(),
            upper: VecDeque::new(),
            early: Default::default(),
            size: DEVICE_BYTES,
        };
        Box::new(Stack::new(vec![pool, Box::new(below)]))
    }
}

#[test]
#[should_panic(expected = "after a crash")]
fn the_volume_crash_check_catches_metadata_durable_before_its_copies() {
    // No reads, so that the oracle cannot see it first: only a crash cut
    // between a copy and the metadata naming it (or the origin write it
    // protects) shows it.
    crash_check_early_acked(cfg("nearest", "defrag = false\n"));
}

/// The volume crash check on a pool over [`EarlyAck`], reads left out.
fn crash_check_early_acked(c: String) {
    let make = early_ack_pool(c);
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

// ---- deterministic cases ----

const CHUNK: usize = 8 << 10;

fn harness(c: &str, device: u64) -> (Harness, Arc<MemDevice>) {
    let dev = Arc::new(MemDevice::new(device));
    let mut h = Harness::new(
        stack_from_toml(c, device, OpenMode::format(1)),
        dev.clone(),
        ZeroLatency::reordering(),
        1,
    );
    bring_up(&mut h);
    (h, dev)
}

fn reopen(c: &str, dev: &Arc<MemDevice>) -> Harness {
    let copy = Arc::new(MemDevice::new(dev.size_bytes()));
    dev.copy_to(&copy).expect("copy");
    let stack = stack_from_toml(c, dev.size_bytes(), OpenMode::Open { clean: false, accept_loss: false });
    Harness::new(stack, copy, ZeroLatency::default(), 2)
}

fn counter(h: &Harness, name: &str) -> u64 {
    let st = h.stack.status();
    st.counters.iter().find(|(k, _)| k == name).unwrap_or_else(|| panic!("no counter {name} in {st}")).1
}

fn volume_offset(h: &mut Harness, name: &str) -> u64 {
    let now = h.now;
    let (table, size) = list_volumes(&mut *h.stack, now);
    let slot = table.iter().find(|(_, n, _)| n == name).unwrap_or_else(|| panic!("no volume {name}")).0;
    slot as u64 * size
}

fn read(h: &mut Harness, at: u64, len: usize) -> Vec<u8> {
    let c = h.read(at, len as u32);
    assert_eq!(c.result, Ok(()));
    c.data.expect("data").to_vec()
}

fn ok(h: &mut Harness, msg: &str) -> String {
    h.message(msg).unwrap_or_else(|e| panic!("{msg}: {e}"))
}

/// On a `nearest` pool with volumes of 192 chunks (a free chunk every few
/// origin chunks): chunk `i` of the origin holds `i + 1`, a snapshot `s`,
/// then the first 512 bytes of every `step`-th chunk from `first` rewritten.
fn spread_pool_with_copies(
    extra: &str,
    n: u64,
    first: u64,
    step: usize,
) -> (String, Harness, Arc<MemDevice>) {
    let c = cfg("nearest", extra).replace("384K", "1536K");
    let (mut h, dev) = harness(&c, DEVICE_BYTES);
    for i in 0..n {
        assert_eq!(h.write(i * CHUNK as u64, vec![i as u8 + 1; CHUNK]).result, Ok(()));
    }
    ok(&mut h, "snapshot create s");
    for i in (first..n).step_by(step) {
        assert_eq!(h.write(i * CHUNK as u64, vec![0xEE; 512]).result, Ok(()));
    }
    (c, h, dev)
}

/// Reads both volumes of [`spread_pool_with_copies`] chunk by chunk.
fn check_spread_pool(h: &mut Harness, n: u64, first: u64, step: u64) {
    let s = volume_offset(h, "s");
    for i in 0..n {
        let mut want = vec![i as u8 + 1; CHUNK];
        assert_eq!(read(h, s + i * CHUNK as u64, CHUNK), want, "snapshot chunk {i}");
        if i >= first && (i - first) % step == 0 {
            want[..512].fill(0xEE);
        }
        assert_eq!(read(h, i * CHUNK as u64, CHUNK), want, "origin chunk {i}");
    }
}

#[test]
fn whole_chunk_reads_read_through_short_gaps_and_return_only_their_own_bytes() {
    // Whole-chunk reads read through the gaps and copies between a
    // volume's chunks (one lower read) and still return exactly its bytes.
    let (_, mut h, _) = spread_pool_with_copies("defrag = false\n", 24, 0, 5);
    assert_eq!(counter(&h, "read_through_bytes"), 0);
    check_spread_pool(&mut h, 24, 0, 5);
    assert!(counter(&h, "read_through_bytes") > 0, "{}", h.stack.status());
    // A partial read never reads through.
    let before = counter(&h, "read_through_bytes");
    assert_eq!(read(&mut h, 0, 4096), vec![0xEE; 512].into_iter().chain(vec![1; 3584]).collect::<Vec<u8>>());
    assert_eq!(counter(&h, "read_through_bytes"), before);
}

/// [`spread_pool_with_copies`], flushed, then quiet until the
/// defragmenter is done: every byte must read back the same, and so from
/// crash images taken every few steps on the way and at the end (no flush
/// after the writes': every move, and every stage of a line-up or of
/// putting an origin chunk back home, was made durable before the chunks
/// it freed were reused). Returns the mean copy distance at placement and
/// after (chunks x1000) and the jumps a sequential read of the origin makes.
fn defragment_spread_pool(extra: &str, n: u64, first: u64, step: u64) -> (u64, u64, u64) {
    let (c, mut h, dev) = spread_pool_with_copies(extra, n, first, step as usize);
    // The writes durable (a redirected one is, only once committed).
    assert_eq!(h.flush().result, Ok(()));
    let placed = counter(&h, "copy_distance_mean_chunks_milli");
    let mut images = 0;
    for i in 0u64.. {
        if !h.step() {
            break;
        }
        assert!(i < 10_000_000, "the defragmenter never settles");
        if i % 5 == 0 {
            let mut h2 = reopen(&c, &dev);
            bring_up(&mut h2);
            check_spread_pool(&mut h2, n, first, step);
            images += 1;
        }
    }
    eprintln!("{images} crash images checked on the way");
    assert!(images > 5, "crash images checked on the way: {images}");
    let now = counter(&h, "copies_distance_now_mean_chunks_milli");
    eprintln!("copy distance placed {placed}, after line-ups {now} (chunks x1000)");
    assert!(counter(&h, "defrag_moves_count") > 0, "{}", h.stack.status());
    check_spread_pool(&mut h, n, first, step);
    let mut h2 = reopen(&c, &dev);
    bring_up(&mut h2);
    check_spread_pool(&mut h2, n, first, step);
    (placed, now, counter(&h, "origin_jumps_count"))
}

#[test]
fn line_ups_put_copies_next_to_their_origin_chunk_once_quiet_and_keep_every_byte() {
    // Rewriting interior chunks sends their copies two or more chunks
    // away. Once no request has come for a while, the defragmenter shifts
    // the origin chunks between by one and brings each copy next to its
    // origin chunk.
    let (placed, now, _) = defragment_spread_pool("", 48, 2, 8);
    assert_eq!(now, 1000, "every copy next to its origin chunk (placed: {placed})");
    assert!(placed > 1000, "some copies land away from their origin chunk: {placed}");
}

#[test]
fn line_ups_shift_whatever_lies_between_a_far_copy_and_its_origin_chunk() {
    // Every other chunk rewritten: twice the copies the origin's gaps
    // hold, so most land several chunks away, past other copies. Line-ups
    // shift the chunks between (origin chunks and other copies alike,
    // named by the reverse map), the longer runs in two stages through a
    // free run.
    let (placed, now, jumps) = defragment_spread_pool("", 48, 0, 2);
    assert_eq!(jumps, 0, "the origin reads in line");
    assert_eq!(now, 1000, "every copy next to its origin chunk (placed: {placed})");
    assert!(placed > 3000, "copies land far: {placed}");
}

#[test]
fn a_fresh_chunk_is_zeroed_past_its_first_write_unless_zero_new_chunks_is_off() {
    // A chunk written whole, trimmed (freed once that is durable), then
    // written again in part: the same chunk comes back (the origin's
    // home). Zeroed, the rest reads zeroes; with `zero_new_chunks =
    // false` (dm-thin's skip_block_zeroing) the first write is one lower
    // write and the rest reads what the device held.
    for (zero, rest) in [(true, 0u8), (false, 0x11)] {
        let (mut h, _) = harness(&cfg("nearest", &format!("zero_new_chunks = {zero}\n")), DEVICE_BYTES);
        assert_eq!(h.write(0, vec![0x11; CHUNK]).result, Ok(()));
        assert_eq!(h.call(Request::new(ReqId(0), Op::Trim, 0, CHUNK as u32)).result, Ok(()));
        assert_eq!(h.flush().result, Ok(()));
        assert_eq!(h.write(0, vec![0x22; 512]).result, Ok(()));
        let mut want = vec![rest; CHUNK];
        want[..512].fill(0x22);
        assert_eq!(read(&mut h, 0, CHUNK), want, "zero_new_chunks = {zero}");
    }
}

#[test]
fn one_copy_serves_every_snapshot_and_the_origin_stays_in_place() {
    let c = cfg("contiguous", "");
    let (mut h, _) = harness(&c, DEVICE_BYTES);
    assert_eq!(h.write(0, vec![0xA1; CHUNK]).result, Ok(()));
    for s in ["s1", "s2", "s3"] {
        ok(&mut h, &format!("snapshot create {s}"));
    }
    assert_eq!(counter(&h, "chunks_shared_count"), 1, "four volumes, one data chunk");
    let allocated = counter(&h, "data_allocated_bytes");
    assert_eq!(h.write(512, vec![0xB2; 512]).result, Ok(()));
    assert_eq!(counter(&h, "chunks_copied_count"), 1, "one copy for the three snapshots");
    assert_eq!(counter(&h, "data_allocated_bytes"), allocated + CHUNK as u64);
    assert_eq!(h.write(4096, vec![0xC3; 512]).result, Ok(()));
    assert_eq!(counter(&h, "chunks_copied_count"), 1, "the chunk is the origin's alone now");
    for s in ["s1", "s2", "s3"] {
        let at = volume_offset(&mut h, s);
        assert_eq!(read(&mut h, at, CHUNK), vec![0xA1; CHUNK], "{s} keeps the old chunk");
    }
    let o = read(&mut h, 0, CHUNK);
    assert_eq!(
        (&o[..512], &o[512..1024], &o[4096..4608]),
        (&[0xA1; 512][..], &[0xB2; 512][..], &[0xC3; 512][..])
    );
    // A snapshot of a snapshot shares with it; writing the child copies for it alone.
    ok(&mut h, "snapshot delete s3");
    ok(&mut h, "snapshot create s4 of s1");
    let s4 = volume_offset(&mut h, "s4");
    assert_eq!(h.write(s4, vec![0xD4; 512]).result, Ok(()));
    let s1 = volume_offset(&mut h, "s1");
    assert_eq!(read(&mut h, s1, 512), vec![0xA1; 512]);
    assert_eq!(read(&mut h, s4, 1024)[..512], [0xD4; 512]);
    assert_eq!(read(&mut h, s4, 1024)[512..], [0xA1; 512]);
}

#[test]
fn a_full_chunk_overwrite_skips_the_read_only_when_no_snapshot_needs_it() {
    let c = cfg("nearest", "defrag = false\n");
    let (mut h, _) = harness(&c, DEVICE_BYTES);
    assert_eq!(h.write(0, vec![1; 2 * CHUNK]).result, Ok(()));
    ok(&mut h, "snapshot create s1");
    // The origin overwrites a whole shared chunk: the snapshot needs the old data.
    assert_eq!(h.write(0, vec![2; CHUNK]).result, Ok(()));
    assert_eq!(counter(&h, "copy_read_bytes"), CHUNK as u64, "the old chunk was read for the copy");
    // The snapshot overwrites a whole shared chunk: nobody needs a copy.
    let s1 = volume_offset(&mut h, "s1");
    assert_eq!(h.write(s1 + CHUNK as u64, vec![3; CHUNK]).result, Ok(()));
    assert_eq!(counter(&h, "copy_read_bytes"), CHUNK as u64, "no read for the snapshot's full overwrite");
    assert_eq!(counter(&h, "full_overwrite_read_skipped_count"), 1);
    assert_eq!(read(&mut h, CHUNK as u64, CHUNK), vec![1; CHUNK], "the origin keeps its chunk");
    assert_eq!(read(&mut h, s1, 2 * CHUNK), [vec![1; CHUNK], vec![3; CHUNK]].concat());
    // A partial snapshot write does read (read-modify-write of its own copy).
    ok(&mut h, "snapshot create s2");
    let s2 = volume_offset(&mut h, "s2");
    assert_eq!(h.write(s2, vec![4; 512]).result, Ok(()));
    assert_eq!(counter(&h, "copy_read_bytes"), 2 * CHUNK as u64);
}

#[test]
fn a_redirected_origin_write_leaves_the_old_chunk_to_the_snapshots_and_waits_for_no_commit() {
    let c =
        cfg("nearest", "defrag = false\norigin_shared_write = \"redirect\"\n[[layer]]\ntarget = \"trace\"\n");
    let (mut h, _) = harness(&c, DEVICE_BYTES);
    assert_eq!(h.write(0, vec![1; 2 * CHUNK]).result, Ok(()));
    ok(&mut h, "snapshot create s1");
    ok(&mut h, "snapshot create s2");
    assert_eq!(h.flush().result, Ok(()));
    h.settle();
    let commits = counter(&h, "commits_count");
    // A partial write: only its own sectors go into the new chunk (no
    // read of the old one); the rest still reads from the old chunk.
    lower_data_requests(&mut h);
    assert_eq!(h.write(512, vec![2; 512]).result, Ok(()));
    let lower = lower_data_requests(&mut h);
    assert_eq!(lower.len(), 1, "one lower request, the write's own: {lower:?}");
    assert_eq!((lower[0].0, lower[0].1 % CHUNK as u64, lower[0].2), (Op::Write, 512, 512), "{lower:?}");
    assert_eq!(counter(&h, "partial_chunks_count"), 1);
    // A whole-chunk write: nothing to read.
    assert_eq!(h.write(CHUNK as u64, vec![3; CHUNK]).result, Ok(()));
    assert_eq!(counter(&h, "commits_count"), commits, "no commit before the writes complete");
    assert_eq!(counter(&h, "origin_redirected_chunks_count"), 2);
    assert_eq!(counter(&h, "origin_partial_redirects_count"), 1);
    assert_eq!(counter(&h, "chunks_copied_count"), 0, "nothing copied out");
    assert_eq!(counter(&h, "copy_read_bytes"), 0, "no write read the old chunk");
    assert_eq!(counter(&h, "full_overwrite_read_skipped_count"), 1);
    let mut want = vec![1; 2 * CHUNK];
    want[512..1024].fill(2);
    want[CHUNK..].fill(3);
    // The partial chunk reads its written sector from itself, the rest
    // from the old chunk: the range from each, composed.
    lower_data_requests(&mut h);
    assert_eq!(read(&mut h, 0, CHUNK), want[..CHUNK].to_vec());
    let lower = lower_data_requests(&mut h);
    // (here side by side: joined into one lower read).
    assert!(lower.iter().all(|r| r.0 == Op::Read) && lower.len() <= 2, "{lower:?}");
    assert_eq!(lower.iter().map(|r| r.2).sum::<u32>(), 2 * CHUNK as u32, "{lower:?}");
    assert_eq!(read(&mut h, 0, 2 * CHUNK), want);
    assert_eq!(counter(&h, "partial_chunks_count"), 1, "not filled while requests keep coming");
    for s in ["s1", "s2"] {
        let at = volume_offset(&mut h, s);
        assert_eq!(read(&mut h, at, 2 * CHUNK), vec![1; 2 * CHUNK], "{s} keeps the old chunks");
    }
    assert_eq!(counter(&h, "chunks_shared_count"), 2, "the snapshots still share the old chunks");
    // The redirects' records (map changes) commit with the next flush.
    let partial_only = counter(&h, "commits_partial_only_count");
    assert_eq!(h.flush().result, Ok(()));
    assert_eq!(counter(&h, "commits_partial_only_count"), partial_only, "the redirects changed the maps");
    // The origin's chunks are its own now: written in place.
    let allocated = counter(&h, "data_allocated_bytes");
    assert_eq!(h.write(0, vec![4; 512]).result, Ok(()));
    want[..512].fill(4);
    // A sector newly written in the partial chunk: a commit of that alone.
    let commits = counter(&h, "commits_count");
    assert_eq!(h.flush().result, Ok(()));
    assert_eq!(counter(&h, "commits_count"), commits + 1);
    assert_eq!(counter(&h, "commits_partial_only_count"), partial_only + 1, "{}", h.stack.status());
    assert_eq!(counter(&h, "data_allocated_bytes"), allocated);
    assert_eq!(counter(&h, "origin_redirected_chunks_count"), 2);
    // Quiet: the partial chunk is filled from the old one (read whole,
    // the 14 sectors not written written), then reads whole.
    assert_eq!(counter(&h, "partial_chunks_count"), 1);
    h.settle();
    assert_eq!(counter(&h, "partial_chunks_count"), 0, "{}", h.stack.status());
    assert_eq!(counter(&h, "chunks_filled_count"), 1);
    assert_eq!(counter(&h, "copy_read_bytes"), CHUNK as u64);
    assert_eq!(counter(&h, "copy_written_bytes"), CHUNK as u64 - 1024);
    assert_eq!(read(&mut h, 0, 2 * CHUNK), want);
    for s in ["s1", "s2"] {
        let at = volume_offset(&mut h, s);
        assert_eq!(read(&mut h, at, 2 * CHUNK), vec![1; 2 * CHUNK], "{s} keeps the old chunks");
    }
    // A commit of no record (a snapshot made with nothing pending) is not
    // a partial chunks' one.
    assert_eq!(h.flush().result, Ok(()));
    let (commits, partial_only) = (counter(&h, "commits_count"), counter(&h, "commits_partial_only_count"));
    ok(&mut h, "snapshot create s3");
    h.settle();
    assert!(counter(&h, "commits_count") > commits, "{}", h.stack.status());
    assert_eq!(counter(&h, "commits_partial_only_count"), partial_only);
}

#[test]
fn once_quiet_the_defragmenter_puts_redirected_origin_chunks_back_home() {
    // Every third chunk rewritten with redirects: the origin's new chunks
    // land where there is room, some far, and the snapshot keeps the old
    // ones at the origin's homes. Once quiet, each snapshot chunk goes
    // aside (a free chunk within a line-up's reach) and the origin's chunk
    // home (a copy-out's layout, the copy made in idle time), then
    // line-ups bring copies nearer; every byte is kept, at crash images on
    // the way too. (Every other chunk rewritten fills the pool's free
    // chunks near the first homes: those stay away, see
    // `a_redirected_chunk_goes_home_only_where_the_snapshots_chunk_can_stay_near_it`.)
    let redirect = "origin_shared_write = \"redirect\"\n";
    let (placed, now, away) = defragment_spread_pool(redirect, 48, 0, 3);
    assert!(placed > 1000, "some of the origin's new chunks land away: {placed}");
    assert_eq!(away, 0, "the origin reads in line again");
    assert!(now < placed, "copies nearer than the origin's new chunks were: {now} vs {placed}");
}

#[test]
fn redirected_origin_chunks_go_back_home_when_quiet_even_with_no_flush() {
    // No flush: the pool commits the redirects itself once quiet (the old
    // chunks are held until then), then puts the origin's chunks back.
    let redirect = "origin_shared_write = \"redirect\"\n";
    let (_, mut h, _) = spread_pool_with_copies(redirect, 48, 0, 3);
    assert!(counter(&h, "origin_jumps_count") > 0, "{}", h.stack.status());
    let commits = counter(&h, "commits_count");
    let mut steps = 0u64;
    while h.step() {
        steps += 1;
        assert!(steps < 10_000_000, "the defragmenter never settles");
    }
    assert!(counter(&h, "commits_count") > commits);
    assert_eq!(counter(&h, "origin_jumps_count"), 0, "{}", h.stack.status());
    check_spread_pool(&mut h, 48, 0, 3);
}

#[test]
fn a_redirected_chunk_goes_home_only_where_the_snapshots_chunk_can_stay_near_it() {
    // A dense origin (`contiguous`, every chunk written: the only free
    // chunks are past its end). Putting lc 20's chunk home would move the
    // snapshot's chunk there past the end, 172+ chunks away: the jump out
    // and back would only move from the origin's read to the snapshot's.
    // So it stays redirected (its partial chunk filled where it is); lc
    // 180's goes home composed, its old chunk a few chunks away (a
    // line-up's reach), and every byte of both volumes is kept.
    let c =
        cfg("contiguous", "origin_shared_write = \"redirect\"\ndefrag = true\ndefrag_partial_home = true\n")
            .replace("384K", "1536K");
    let (mut h, _) = harness(&c, DEVICE_BYTES);
    let n = 192u64;
    for i in 0..n {
        assert_eq!(h.write(i * CHUNK as u64, vec![i as u8 + 1; CHUNK]).result, Ok(()));
    }
    ok(&mut h, "snapshot create s");
    for i in [20u64, 180] {
        assert_eq!(h.write(i * CHUNK as u64, vec![0xEE; 512]).result, Ok(()));
    }
    assert_eq!(counter(&h, "partial_chunks_count"), 2);
    assert_eq!(counter(&h, "origin_jumps_count"), 4, "{}", h.stack.status());
    h.settle();
    assert_eq!(counter(&h, "partial_chunks_count"), 0, "{}", h.stack.status());
    assert_eq!(counter(&h, "partial_chunks_composed_home_count"), 1, "{}", h.stack.status());
    assert_eq!(counter(&h, "chunks_filled_count"), 1, "{}", h.stack.status());
    assert_eq!(counter(&h, "origin_jumps_count"), 2, "lc 20 stays away: {}", h.stack.status());
    let s = volume_offset(&mut h, "s");
    for i in 0..n {
        let mut want = vec![i as u8 + 1; CHUNK];
        assert_eq!(read(&mut h, s + i * CHUNK as u64, CHUNK), want, "snapshot chunk {i}");
        if i == 20 || i == 180 {
            want[..512].fill(0xEE);
        }
        assert_eq!(read(&mut h, i * CHUNK as u64, CHUNK), want, "origin chunk {i}");
    }
}

#[test]
#[should_panic(expected = "after a crash")]
fn the_volume_crash_check_catches_a_redirected_origin_write_durable_before_its_data() {
    crash_check_early_acked(cfg("nearest", "defrag = false\norigin_shared_write = \"redirect\"\n"));
}

#[test]
fn merge_rolls_the_origin_back_and_delete_frees_what_only_the_snapshot_held() {
    let c = cfg("sliced", "slices = 6\n");
    let (mut h, dev) = harness(&c, DEVICE_BYTES);
    assert_eq!(h.write(0, vec![5; 3 * CHUNK]).result, Ok(()));
    ok(&mut h, "snapshot create keep");
    ok(&mut h, "snapshot create scratch ro");
    assert_eq!(h.write(0, vec![6; 3 * CHUNK]).result, Ok(()));
    let scratch = volume_offset(&mut h, "scratch");
    assert_eq!(h.write(scratch, vec![1; 512]).result, Err(IoError::ReadOnly), "read-only");
    let before = counter(&h, "data_allocated_bytes");
    ok(&mut h, "snapshot delete scratch");
    assert_eq!(h.flush().result, Ok(()));
    assert_eq!(counter(&h, "data_allocated_bytes"), before, "the copies are still keep's");
    ok(&mut h, "snapshot merge keep");
    assert_eq!(h.flush().result, Ok(()));
    assert_eq!(read(&mut h, 0, 3 * CHUNK), vec![5; 3 * CHUNK], "rolled back");
    assert_eq!(counter(&h, "volumes_count"), 1);
    assert_eq!(counter(&h, "data_allocated_bytes"), 3 * CHUNK as u64, "the origin's newer chunks are free");
    // And it all survives a reopen.
    h.settle();
    let mut h2 = reopen(&c, &dev);
    bring_up(&mut h2);
    assert_eq!(read(&mut h2, 0, 3 * CHUNK), vec![5; 3 * CHUNK]);
    assert_eq!(counter(&h2, "volumes_count"), 1);
}

#[test]
fn bad_snapshot_commands_say_why_in_one_line_and_change_nothing() {
    let c = cfg("nearest", "");
    let (mut h, _) = harness(&c, DEVICE_BYTES);
    assert_eq!(h.write(0, vec![9; CHUNK]).result, Ok(()));
    ok(&mut h, "snapshot create a");
    let cases = [
        ("snapshot create b of nosuch", "no volume named `nosuch`"),
        ("snapshot create a", "exists already"),
        ("snapshot create origin", "exists already"),
        ("snapshot delete origin", "origin cannot be deleted"),
        ("snapshot delete nosuch", "no volume named"),
        ("snapshot merge origin", "merge takes a snapshot"),
        ("snapshot create bad/name", "bad snapshot name"),
        ("snapshot create x of", "usage"),
        ("snapshot frobnicate", "usage"),
    ];
    for (msg, want) in cases {
        let e = h.message(msg).expect_err(msg);
        assert!(e.contains(want) && !e.contains('\n'), "{msg}: {e}");
    }
    ok(&mut h, "snapshot create b");
    ok(&mut h, "snapshot create c");
    let e = h.message("snapshot create d").expect_err("full");
    assert!(e.contains("volume slots are in use"), "{e}");
    let now = h.now;
    let (table, _) = list_volumes(&mut *h.stack, now);
    assert_eq!(table.iter().map(|t| t.1.as_str()).collect::<Vec<_>>(), ["origin", "a", "b", "c"]);
    assert_eq!(read(&mut h, 0, CHUNK), vec![9; CHUNK]);
}

#[test]
fn a_full_pool_fails_only_the_write_that_needs_space_with_enospc() {
    // Volumes of 2 MiB over a pool of well under 2 MiB of data: overcommitted.
    let c = "version = 1\n[[layer]]\ntarget = \"pool\"\nchunk_size = \"8K\"\nvolume_size = \"2M\"\nvolumes_max = 2\n\
             journal_blocks = 8\norigin_shared_write = \"copy-out\"\n";
    let (mut h, _) = harness(c, DEVICE_BYTES);
    let data = counter(&h, "data_bytes");
    let mut written = 0u64;
    let err = loop {
        let r = h.write(written, vec![7; CHUNK]).result;
        if r.is_err() {
            break r;
        }
        written += CHUNK as u64;
    };
    assert_eq!(err, Err(IoError::NoSpace));
    assert_eq!(written, data, "every data chunk was used first");
    assert_eq!(h.write(0, vec![8; CHUNK]).result, Ok(()), "an allocated chunk is still writable");
    assert_eq!(h.flush().result, Ok(()));
    assert_eq!(read(&mut h, 0, CHUNK), vec![8; CHUNK]);
    assert_eq!(read(&mut h, written + CHUNK as u64, 512), vec![0; 512], "unallocated reads zeroes");
    // A snapshot pins everything: the origin's next write needs a copy: ENOSPC, data intact.
    ok(&mut h, "snapshot create s");
    assert_eq!(h.write(CHUNK as u64, vec![1; 512]).result, Err(IoError::NoSpace));
    assert_eq!(read(&mut h, CHUNK as u64, 512), vec![7; 512]);
    ok(&mut h, "snapshot delete s");
    // Trimming frees space (once durable) for the next write.
    let trim = h.call(Request::new(ReqId(0), Op::Trim, 0, 4 * CHUNK as u32));
    assert_eq!(trim.result, Ok(()));
    assert_eq!(h.write(written, vec![3; CHUNK]).result, Ok(()), "space freed by the trim");
    assert_eq!(read(&mut h, 0, 512), vec![0; 512]);
    assert!(counter(&h, "nospace_count") >= 2);
}

#[test]
fn damaged_metadata_is_refused_naming_the_offset_and_nothing_is_changed() {
    let c = cfg("nearest", "defrag = false\n");
    let (mut h, dev) = harness(&c, DEVICE_BYTES);
    assert_eq!(h.write(0, vec![1; 4 * CHUNK]).result, Ok(()));
    ok(&mut h, "snapshot create s");
    // Two commits after the checkpoint: two journal blocks.
    assert_eq!(h.write(0, vec![2; CHUNK]).result, Ok(()));
    assert_eq!(h.flush().result, Ok(()));
    assert_eq!(h.write(CHUNK as u64, vec![2; CHUNK]).result, Ok(()));
    assert_eq!(h.flush().result, Ok(()));
    h.settle();
    let seq = counter(&h, "journal_next_seq");
    assert!(seq >= counter(&h, "journal_start_seq") + 2);
    let open_err = |dev: &Arc<MemDevice>| {
        let mut h = reopen(&c, dev);
        h.bring_up().err()
    };
    assert_eq!(open_err(&dev), None);
    let flip = |dev: &Arc<MemDevice>, at: u64| {
        let mut b = [0u8; 1];
        dev.read_at(&mut b, at).unwrap();
        b[0] ^= 0x40;
        dev.write_at(&b, at).unwrap();
    };
    // The newest checkpoint's body damaged: the older copy and the journal
    // after it still give the same volumes, or the open is refused; never
    // wrong data.
    // A journal block past a damaged one: refused, naming the block's offset.
    // One copy of a journal block damaged: the other copy serves.
    let damaged = journal_at(&h) + ((seq - 2) % 8) * 4096 + 100;
    let twin = damaged + 8 * 4096;
    flip(&dev, damaged);
    assert_eq!(open_err(&dev), None, "the other copy of the block serves");
    // Both copies of a journal block past which another is valid: refused,
    // naming the block's offset.
    flip(&dev, twin);
    let e = open_err(&dev).expect("refused");
    assert!(e.contains("lower offset") && e.contains("refusing to open"), "{e}");
    flip(&dev, damaged);
    flip(&dev, twin);
    assert_eq!(open_err(&dev), None, "restored, it opens: nothing was changed");
    // Both checkpoint headers damaged: refused, naming both offsets.
    flip(&dev, 40);
    let second = checkpoint_copy_bytes(&h);
    flip(&dev, second + 40);
    let e = open_err(&dev).expect("refused");
    assert!(e.contains("lower offset 0") && e.contains(&format!("lower offset {second}")), "{e}");
    flip(&dev, 40);
    flip(&dev, second + 40);
    let mut h2 = reopen(&c, &dev);
    bring_up(&mut h2);
    let s = volume_offset(&mut h2, "s");
    assert_eq!(read(&mut h2, s, CHUNK), vec![1; CHUNK]);
    assert_eq!(read(&mut h2, 0, 2 * CHUNK), vec![2; 2 * CHUNK]);
}

/// A journal block whose crc holds but whose version this build does not
/// read (a newer build's) is refused by its version, not taken for a torn
/// tail: that would end the journal there and drop its records (a build
/// before this one lost a newer one's snapshot that way).
#[test]
fn a_journal_block_of_a_newer_version_is_refused_not_taken_for_a_torn_tail() {
    let c = cfg("nearest", "defrag = false\n");
    let (mut h, dev) = harness(&c, DEVICE_BYTES);
    assert_eq!(h.write(0, vec![1; 2 * CHUNK]).result, Ok(()));
    assert_eq!(h.flush().result, Ok(()));
    h.settle();
    let start = counter(&h, "journal_start_seq");
    ok(&mut h, "snapshot create s");
    assert_eq!(h.flush().result, Ok(()));
    h.settle();
    assert!(counter(&h, "journal_next_seq") > start, "the snapshot is a journal record");
    // Both copies of the snapshot's journal block, rewritten as version 4 with a good crc.
    for at in [journal_at(&h) + (start % 8) * 4096, journal_at(&h) + (start % 8 + 8) * 4096] {
        let mut b = vec![0u8; 4096];
        dev.read_at(&mut b, at).unwrap();
        assert_eq!(&b[0..8], b"LDPOOLJN", "a journal block at {at}");
        b[8..12].copy_from_slice(&4u32.to_le_bytes());
        b[28..32].fill(0);
        let crc = crc32c::crc32c(&b);
        b[28..32].copy_from_slice(&crc.to_le_bytes());
        dev.write_at(&b, at).unwrap();
    }
    let mut h2 = reopen(&c, &dev);
    let e = h2.bring_up().expect_err("a newer version's journal block is refused");
    assert!(
        e.contains("format version 4") && e.contains("lower offset") && e.contains("newer layoutd"),
        "{e}"
    );
}

fn checkpoint_copy_bytes(h: &Harness) -> u64 {
    counter(h, "metadata_checkpoint_copy_bytes")
}

fn journal_at(h: &Harness) -> u64 {
    2 * checkpoint_copy_bytes(h)
}

#[test]
fn copies_land_nearer_their_origin_with_each_policy_and_defrag_moves_them_closer() {
    let workload = |c: &str| {
        let (mut h, _) = harness(c, DEVICE_BYTES);
        assert_eq!(h.write(0, vec![1; 48 * CHUNK]).result, Ok(()));
        ok(&mut h, "snapshot create s");
        for i in (0..48u64).step_by(3) {
            assert_eq!(h.write(i * CHUNK as u64, vec![2; 512]).result, Ok(()));
        }
        h.settle();
        (counter(&h, "copy_distance_mean_chunks_milli"), h)
    };
    let (contiguous, _) = workload(&cfg("contiguous", ""));
    let (sliced, _) = workload(&cfg("sliced", "slices = 6\n"));
    let (nearest, _) = workload(&cfg("nearest", "defrag = false\n"));
    eprintln!("mean copy distance (chunks x1000): contiguous {contiguous} sliced {sliced} nearest {nearest}");
    assert!(contiguous > sliced && sliced > nearest, "{contiguous} {sliced} {nearest}");
    // Defrag: with the space near the origin taken by a scratch snapshot's
    // chunks, copies go far; deleting it frees that space and the idle-time
    // defragmenter moves the copies back next to their origin.
    // The origin dense (no space kept out of its layout).
    let c = "version = 1\n[[layer]]\ntarget = \"pool\"\nchunk_size = \"8K\"\ncopy_share_percent = 0\n\
             volumes_max = 4\njournal_blocks = 8\nplacement = \"nearest\"\norigin_shared_write = \"copy-out\"\n";
    let (mut h, _) = harness(c, DEVICE_BYTES);
    assert_eq!(h.write(0, vec![1; 48 * CHUNK]).result, Ok(()));
    ok(&mut h, "snapshot create scratch");
    let scratch = volume_offset(&mut h, "scratch");
    for i in 0..48u64 {
        assert_eq!(h.write(scratch + i * CHUNK as u64, vec![3; CHUNK]).result, Ok(()));
    }
    ok(&mut h, "snapshot create s");
    for i in 0..48u64 {
        assert_eq!(h.write(i * CHUNK as u64, vec![2; 512]).result, Ok(()));
    }
    let before = counter(&h, "copies_distance_now_mean_chunks_milli");
    ok(&mut h, "snapshot delete scratch");
    assert_eq!(h.flush().result, Ok(()));
    h.settle();
    assert!(counter(&h, "defrag_moves_count") > 0, "{}", h.stack.status());
    let after = counter(&h, "copies_distance_now_mean_chunks_milli");
    eprintln!("copy distance before defrag {before}, after {after} (chunks x1000)");
    // The origin is dense over 0..48, the freed chunks are 48..96 and the
    // copies sat at 96..144: at best each moves 48 chunks nearer.
    assert_eq!((before, after), (72_000, 48_000), "the copies moved as near as the free space allows");
    let s = volume_offset(&mut h, "s");
    assert_eq!(read(&mut h, s, 48 * CHUNK), vec![1; 48 * CHUNK], "moves keep the contents");
}

#[test]
fn random_damage_to_the_metadata_never_panics_and_never_serves_wrong_bytes() {
    let c = cfg("nearest", "defrag = false\n");
    let (mut h, dev) = harness(&c, DEVICE_BYTES);
    assert_eq!(h.write(0, vec![1; 6 * CHUNK]).result, Ok(()));
    ok(&mut h, "snapshot create s");
    assert_eq!(h.write(0, vec![2; 3 * CHUNK]).result, Ok(()));
    assert_eq!(h.flush().result, Ok(()));
    h.settle();
    let meta = counter(&h, "metadata_area_bytes");
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let (mut refused, mut opened) = (0, 0);
    for _ in 0..60 {
        let copy = Arc::new(MemDevice::new(DEVICE_BYTES));
        dev.copy_to(&copy).unwrap();
        for _ in 0..4 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let at = x % meta;
            let mut b = [0u8; 1];
            copy.read_at(&mut b, at).unwrap();
            b[0] ^= 1 << (x >> 60 & 7);
            copy.write_at(&b, at).unwrap();
        }
        let stack = stack_from_toml(&c, DEVICE_BYTES, OpenMode::Open { clean: false, accept_loss: false });
        let mut h2 = Harness::new(stack, copy, ZeroLatency::default(), 3);
        match h2.bring_up() {
            Err(e) => {
                assert!(e.contains("pool:") && !e.contains('\n'), "{e}");
                refused += 1;
            }
            Ok(()) => {
                // Whatever it opened is a state the volumes were in: the
                // snapshot (if it exists) holds the old bytes.
                opened += 1;
                let now = h2.now;
                let (table, size) = list_volumes(&mut *h2.stack, now);
                if let Some(s) = table.iter().find(|t| t.1 == "s") {
                    let snap = read(&mut h2, s.0 as u64 * size, 6 * CHUNK);
                    assert!(snap.iter().all(|&b| b == 1), "the snapshot changed");
                }
                let o = read(&mut h2, 0, 6 * CHUNK);
                assert!(o[3 * CHUNK..].iter().all(|&b| b == 1), "the origin's untouched chunks");
            }
        }
    }
    eprintln!("{refused} refused, {opened} opened");
    assert!(refused > 0 && opened > 0);
}

#[test]
fn a_snapshot_taken_with_writes_in_flight_holds_those_completed_and_none_submitted_after() {
    let c = cfg("sliced", "slices = 6\n");
    let (mut h, _) = harness(&c, DEVICE_BYTES);
    assert_eq!(h.write(0, vec![1; CHUNK]).result, Ok(()));
    // In flight when the command comes: it completes before the snapshot
    // is taken (the pool waits for what is in flight, holds what comes after).
    let w2 = h.submit(Request::write(ReqId(0), CHUNK as u64, bytes::Bytes::from(vec![2u8; CHUNK])));
    let now = h.now;
    let reply = h.stack.message(now, "snapshot create s");
    assert!(reply.is_ok(), "{reply:?}");
    let w3 = h.submit(Request::write(ReqId(0), 2 * CHUNK as u64, bytes::Bytes::from(vec![3u8; CHUNK])));
    assert_eq!(h.wait_for(w2).result, Ok(()));
    assert_eq!(h.wait_for(w3).result, Ok(()));
    let s = volume_offset(&mut h, "s");
    let snap = read(&mut h, s, 3 * CHUNK);
    assert!(snap[..CHUNK].iter().all(|&b| b == 1) && snap[CHUNK..2 * CHUNK].iter().all(|&b| b == 2));
    assert!(snap[2 * CHUNK..].iter().all(|&b| b == 0), "a write submitted after the command is not in it");
    let origin = read(&mut h, 0, 3 * CHUNK);
    assert!(origin[2 * CHUNK..].iter().all(|&b| b == 3));
}

#[test]
fn a_pool_reopens_in_timing_only_mode_where_reads_bring_no_data() {
    // The simulator replays without data: recovery must not index into
    // bytes that never came (it sees a blank device and says so).
    let c = cfg("nearest", "");
    let (_, dev) = harness(&c, DEVICE_BYTES);
    let mut h = reopen(&c, &dev);
    h.with_data = false;
    let e = h.bring_up().expect_err("nothing to read in timing mode");
    assert!(e.contains("no checkpoint found"), "{e}");
}

#[test]
#[should_panic(expected = "expected write")]
fn the_volume_oracle_catches_a_stale_read() {
    let make = early_ack_pool(cfg("nearest", "defrag = false\n"));
    for seed in 0..10u64 {
        volumes_oracle_check(
            &make,
            DEVICE_BYTES,
            seed,
            Workload { count: 400, depth: 6, snapshot_every: 25, reads: true },
        );
    }
}

/// Lower requests `(op, offset, length)` the pool sent since the last
/// call, less the metadata commits (FUA journal writes, flushes).
fn lower_data_requests(h: &mut Harness) -> Vec<(Op, u64, u32)> {
    h.take_records()
        .iter()
        .filter(|r| !r.fua && r.op != Op::Flush)
        .map(|r| (r.op, r.offset_bytes, r.length_bytes))
        .collect()
}

#[test]
fn zero_new_chunks_with_write_sends_a_run_of_fresh_chunks_zeroes_included_as_one_write() {
    // 16 KiB at 4 KiB on a `contiguous` pool of 8 KiB chunks: the rest of
    // chunk 0 whole chunk 1, the start of chunk 2, all fresh. By default
    // one joined data write and write-zeroes over the head of chunk 0 and
    // the tail of chunk 2; with `zero_new_chunks_with = "write"` one write
    // of the 3 chunks, zeroes included. Either way the rest reads zeroes.
    let four = 4096usize;
    for (with, want) in [
        (
            "write-zeroes",
            vec![(Op::Write, four as u32 * 4), (Op::WriteZeroes, 4096), (Op::WriteZeroes, 4096)],
        ),
        ("write", vec![(Op::Write, 3 * CHUNK as u32)]),
        // Chunks 0 and 2 partial with no base: nothing zeroed.
        ("partial", vec![(Op::Write, four as u32 * 4)]),
    ] {
        let c =
            cfg("contiguous", &format!("zero_new_chunks_with = \"{with}\"\n[[layer]]\ntarget = \"trace\"\n"));
        let (mut h, _) = harness(&c, DEVICE_BYTES);
        lower_data_requests(&mut h);
        let data: Vec<u8> = (0..4 * four).map(|i| (i / 512) as u8 + 1).collect();
        assert_eq!(h.write(four as u64, data.clone()).result, Ok(()));
        let mut got: Vec<(Op, u32)> = lower_data_requests(&mut h).iter().map(|&(op, _, n)| (op, n)).collect();
        got.sort_by_key(|&(op, n)| (op != Op::Write, n));
        assert_eq!(got, want, "zero_new_chunks_with = {with}");
        let mut all = vec![0u8; 3 * CHUNK];
        all[four..5 * four].copy_from_slice(&data);
        assert_eq!(read(&mut h, 0, 3 * CHUNK), all, "zero_new_chunks_with = {with}");
    }
}

#[test]
fn a_fresh_chunk_kept_partial_writes_only_its_data_and_reads_zeroes_elsewhere_also_after_reopen() {
    // A 64 KiB chunk written whole with 0x11, trimmed (freed once
    // durable), then 4 KiB written at 8 KiB: the same chunk comes back
    // (the origin's home, the device still holding 0x11 there). With
    // `zero_new_chunks_with = "partial"` the write is one lower write of
    // 4 KiB and no write-zeroes (the default zeroes the 60 KiB around
    // it); the rest reads zeroes, with no lower read for a read of the
    // unwritten part alone, and so after a flush and a reopen. A second
    // write fills more; writing the rest makes the chunk whole.
    const C: usize = 64 << 10;
    for (with, zeroed) in [("write-zeroes", 60u64 << 10), ("partial", 0)] {
        let c = format!(
            "version = 1\n[[layer]]\ntarget = \"pool\"\nchunk_size = \"64K\"\nvolume_size = \"1M\"\n\
             volumes_max = 2\njournal_blocks = 8\nplacement = \"contiguous\"\nzero_new_chunks_with = \"{with}\"\n\
             [[layer]]\ntarget = \"trace\"\n"
        );
        let (mut h, dev) = harness(&c, 8 << 20);
        assert_eq!(h.write(0, vec![0x11; C]).result, Ok(()));
        assert_eq!(h.call(Request::new(ReqId(0), Op::Trim, 0, C as u32)).result, Ok(()));
        assert_eq!(h.flush().result, Ok(()));
        lower_data_requests(&mut h);
        assert_eq!(h.write(8 << 10, vec![0x22; 4096]).result, Ok(()));
        let reqs = lower_data_requests(&mut h);
        let zeroes: u64 = reqs.iter().filter(|r| r.0 == Op::WriteZeroes).map(|r| r.2 as u64).sum();
        let writes: Vec<u32> = reqs.iter().filter(|r| r.0 == Op::Write).map(|r| r.2).collect();
        assert_eq!((writes, zeroes), (vec![4096], zeroed), "{with}: {reqs:?}");
        let mut want = vec![0u8; C];
        want[8 << 10..12 << 10].fill(0x22);
        assert_eq!(read(&mut h, 0, C), want, "{with}");
        assert_eq!(read(&mut h, 32 << 10, 4096), vec![0u8; 4096], "{with}");
        if with == "partial" {
            let reads = lower_data_requests(&mut h);
            assert_eq!(reads.len(), 1, "only the whole-chunk read went down: {reads:?}");
            assert_eq!(counter(&h, "fresh_partial_chunks_count"), 1);
        }
        assert_eq!(h.flush().result, Ok(()));
        let mut h = reopen(&c, &dev);
        bring_up(&mut h);
        assert_eq!(read(&mut h, 0, C), want, "{with}, reopened");
        // More of it written, then the rest: whole, the same bytes.
        assert_eq!(h.write(0, vec![0x33; 4096]).result, Ok(()));
        want[..4096].fill(0x33);
        assert_eq!(read(&mut h, 0, C), want, "{with}, second write");
        assert_eq!(h.write(12 << 10, vec![0x44; C - (12 << 10)]).result, Ok(()));
        assert_eq!(h.write(4096, vec![0x55; 4096]).result, Ok(()));
        want[12 << 10..].fill(0x44);
        want[4096..8192].fill(0x55);
        assert_eq!(read(&mut h, 0, C), want, "{with}, written whole");
    }
}

#[test]
fn a_write_over_fresh_chunks_in_a_row_below_goes_down_as_one_request() {
    // 64 KiB chunks, a 1 MiB origin. `contiguous` puts the origin's
    // chunks in a row: a 256 KiB write over 4 fresh chunks is one lower
    // write, and reading them back one lower read. `sliced` with 8 slices
    // puts 2 origin chunks in each slice, with a gap after them: the same
    // write is 2 lower writes of 2 chunks each (the negative control:
    // pieces not in a row below stay apart).
    const C: u64 = 64 << 10;
    for (placement, extra, runs) in [("contiguous", "", 1usize), ("sliced", "slices = 8\n", 2)] {
        let c = format!(
            "version = 1\n[[layer]]\ntarget = \"pool\"\nchunk_size = \"64K\"\nvolume_size = \"1M\"\n\
             volumes_max = 2\njournal_blocks = 8\nplacement = \"{placement}\"\n{extra}\
             [[layer]]\ntarget = \"trace\"\n"
        );
        let (mut h, dev) = harness(&c, 8 << 20);
        lower_data_requests(&mut h);
        let data: Vec<u8> = (0..4 * C).map(|i| (i / 512) as u8).collect();
        assert_eq!(h.write(0, data.clone()).result, Ok(()));
        let writes = lower_data_requests(&mut h);
        assert_eq!(writes.len(), runs, "{placement}: {writes:?}");
        assert!(writes.iter().all(|&(op, _, n)| op == Op::Write && u64::from(n) == 4 * C / runs as u64));
        assert_eq!(read(&mut h, 0, data.len()), data, "{placement}");
        let reads = lower_data_requests(&mut h);
        assert_eq!(reads.len(), runs, "{placement}: {reads:?}");
        assert_eq!(counter(&h, "joined_pieces_count"), 2 * 4, "{placement}");
        assert_eq!(counter(&h, "joined_requests_count"), 2 * runs as u64, "{placement}");
        // Flushed and reopened, the chunks hold the same bytes.
        assert_eq!(h.flush().result, Ok(()));
        let mut h2 = reopen(&c, &dev);
        bring_up(&mut h2);
        assert_eq!(read(&mut h2, 0, data.len()), data, "{placement} reopened");
    }
}

#[test]
fn a_partial_chunk_reads_old_or_new_per_sector_at_every_crash_from_its_first_write_to_its_fill() {
    // One partial chunk (a fill of its own), then a run of four next to
    // each other over bases next to each other (one run fill: the run and
    // its bases read, composed, the run written whole).
    for n in [1usize, 4] {
        partial_chunks_crash_from_first_write_to_fill(n, false);
    }
}

#[test]
fn a_partial_chunk_put_home_composed_reads_old_or_new_per_sector_at_every_crash() {
    // `defrag_partial_home`: instead of the fill, the defragmenter moves
    // each base (the snapshot's chunk at the origin's home) aside, then
    // writes the partial chunk home composed (its sectors and its base's
    // rest), the partial chunk freed; one chunk, then four in a row.
    for n in [1usize, 4] {
        partial_chunks_crash_from_first_write_to_fill(n, true);
    }
}

/// Origin chunks `0..n` of 1s shared with a snapshot; then, redirected,
/// only sectors 1 and 5 of each written (partial), flushed; sector 9 of
/// each written, not flushed; then quiet: the fill copies the rest from
/// the old chunks (`home`: the defragmenter puts each chunk home composed
/// instead). At every cut of the write log from the snapshot on: the
/// snapshot reads 1s; each origin sector reads 1s or what was written to
/// it, the written-and-flushed ones their data once the flush completed,
/// the others 1s (never stale bytes of the new chunk).
fn partial_chunks_crash_from_first_write_to_fill(n: usize, home: bool) {
    let extra = if home { "defrag = true\ndefrag_partial_home = true\n" } else { "" };
    let c = cfg("contiguous", &format!("origin_shared_write = \"redirect\"\n{extra}"));
    let rec = Arc::new(Recorder::new(MemDevice::new(DEVICE_BYTES)));
    let log = rec.log();
    let make = |mode| stack_from_toml(&c, DEVICE_BYTES, mode);
    let mut h = Harness::new(
        make(OpenMode::format(1)),
        rec.clone() as Arc<dyn BlockDevice>,
        ZeroLatency::default(),
        7,
    );
    bring_up(&mut h);
    assert_eq!(h.write(0, vec![1; n * CHUNK]).result, Ok(()));
    ok(&mut h, "snapshot create s");
    assert_eq!(h.flush().result, Ok(()));
    let from = log.len();
    let value = |i: usize, v: u8| v + 3 * i as u8;
    for i in 0..n {
        let at = (i * CHUNK) as u64;
        assert_eq!(h.write(at + 512, vec![value(i, 2); 512]).result, Ok(()));
        assert_eq!(h.write(at + 5 * 512, vec![value(i, 3); 512]).result, Ok(()));
    }
    assert_eq!(counter(&h, "partial_chunks_count"), n as u64);
    assert_eq!(h.flush().result, Ok(()));
    let flushed = log.len();
    for i in 0..n {
        assert_eq!(h.write((i * CHUNK) as u64 + 9 * 512, vec![value(i, 4); 512]).result, Ok(()));
    }
    h.settle();
    if home {
        assert_eq!(counter(&h, "chunks_filled_count"), 0, "{}", h.stack.status());
        assert_eq!(counter(&h, "partial_chunks_composed_home_count"), n as u64, "{}", h.stack.status());
        // Each base aside, then each chunk home (then line-ups may bring
        // the snapshot's chunks next to the origin's).
        assert!(counter(&h, "defrag_moves_count") >= 2 * n as u64, "{}", h.stack.status());
        assert_eq!(counter(&h, "origin_jumps_count"), 0, "{}", h.stack.status());
    } else {
        assert_eq!(counter(&h, "chunks_filled_count"), n as u64, "{}", h.stack.status());
        assert_eq!(counter(&h, "fill_runs_count"), u64::from(n > 1), "{}", h.stack.status());
    }
    assert_eq!(counter(&h, "partial_chunks_count"), 0);
    // Filled: the origin reads the old chunks' bytes where nothing was
    // written, before and after the fill's record is made durable.
    let mut want = vec![1u8; n * CHUNK];
    for i in 0..n {
        for (sector, v) in [(1, value(i, 2)), (5, value(i, 3)), (9, value(i, 4))] {
            want[i * CHUNK + sector * 512..][..512].fill(v);
        }
    }
    assert_eq!(read(&mut h, 0, n * CHUNK), want, "{n} chunks filled");
    assert_eq!(h.flush().result, Ok(()));
    let all_flushed = log.len();
    let snap_at = volume_offset(&mut h, "s");
    let entries = log.len();
    assert!(entries > flushed + 2, "the fill and its record are in the log");
    for cut in from..=entries {
        let image = Arc::new(log.image_at(cut, DEVICE_BYTES, None).expect("replay"));
        let mut h = Harness::new(
            make(OpenMode::Open { clean: false, accept_loss: false }),
            image as Arc<dyn BlockDevice>,
            ZeroLatency::default(),
            7,
        );
        bring_up(&mut h);
        assert_eq!(read(&mut h, snap_at, n * CHUNK), vec![1; n * CHUNK], "snapshot after a crash at {cut}");
        let got = read(&mut h, 0, n * CHUNK);
        for (k, sector) in got.chunks(512).enumerate() {
            let (ci, i) = (k / (CHUNK / 512), k % (CHUNK / 512));
            let written = [(1usize, value(ci, 2)), (5, value(ci, 3)), (9, value(ci, 4))];
            let new = written.iter().find(|w| w.0 == i).map(|w| w.1);
            let must_be_new = cut >= flushed && (i != 9 || cut >= all_flushed);
            let fine = match new {
                Some(v) if must_be_new => sector.iter().all(|&b| b == v),
                Some(v) => sector.iter().all(|&b| b == v) || sector.iter().all(|&b| b == 1),
                None => sector.iter().all(|&b| b == 1),
            };
            assert!(
                fine,
                "{n} chunks: origin chunk {ci} sector {i} after a crash at log entry {cut} of {entries}: {:?}",
                &sector[..8]
            );
        }
    }
}

#[test]
fn a_pool_switches_between_copy_out_and_redirect_across_opens_keeping_every_volume() {
    // The mode is read at each open (a pool formatted without the key
    // before redirect became the default opens as redirect): copy-outs,
    // then partial chunks, then copy-outs over shared partial chunks, and
    // every volume reads its own bytes after each switch.
    let copy_out = cfg("contiguous", "");
    let redirect = cfg("contiguous", "origin_shared_write = \"redirect\"\n");
    let (mut h, dev) = harness(&copy_out, DEVICE_BYTES);
    let open = |c: &str| {
        let stack = stack_from_toml(c, DEVICE_BYTES, OpenMode::Open { clean: false, accept_loss: false });
        let mut h = Harness::new(stack, dev.clone() as Arc<dyn BlockDevice>, ZeroLatency::default(), 3);
        bring_up(&mut h);
        h
    };
    let n = 6;
    let mut origin = vec![1u8; n * CHUNK];
    let write =
        |h: &mut Harness, origin: &mut Vec<u8>, chunks: std::ops::Range<usize>, sector: usize, v: u8| {
            for i in chunks {
                let at = i * CHUNK + sector * 512;
                assert_eq!(h.write(at as u64, vec![v; 512]).result, Ok(()));
                origin[at..at + 512].fill(v);
            }
        };
    let check = |h: &mut Harness, origin: &[u8], snaps: &[(&str, &[u8])]| {
        assert_eq!(read(h, 0, n * CHUNK), origin, "origin");
        for (name, want) in snaps {
            let at = volume_offset(h, name);
            assert_eq!(read(h, at, n * CHUNK), *want, "{name}");
        }
    };
    assert_eq!(h.write(0, origin.clone()).result, Ok(()));
    ok(&mut h, "snapshot create s1");
    let s1 = origin.clone();
    write(&mut h, &mut origin, 0..3, 1, 2);
    assert_eq!(h.flush().result, Ok(()));
    assert_eq!(counter(&h, "chunks_copied_count"), 3);
    drop(h);
    let mut h = open(&redirect);
    check(&mut h, &origin, &[("s1", &s1)]);
    write(&mut h, &mut origin, 2..n, 3, 3);
    assert_eq!(counter(&h, "origin_partial_redirects_count"), 3, "{}", h.stack.status());
    assert_eq!(counter(&h, "partial_chunks_count"), 3);
    ok(&mut h, "snapshot create s2");
    let s2 = origin.clone();
    assert_eq!(h.flush().result, Ok(()));
    drop(h);
    let mut h = open(&copy_out);
    check(&mut h, &origin, &[("s1", &s1), ("s2", &s2)]);
    write(&mut h, &mut origin, 0..n, 5, 4);
    assert!(counter(&h, "chunks_copied_count") >= 4, "{}", h.stack.status());
    check(&mut h, &origin, &[("s1", &s1), ("s2", &s2)]);
    h.settle();
    assert_eq!(h.flush().result, Ok(()));
    drop(h);
    let mut h = open(&redirect);
    check(&mut h, &origin, &[("s1", &s1), ("s2", &s2)]);
}

/// Chunk `i` of a volume read whole: sector 1 `one`, sector 3 `three`, the rest `rest`.
fn chunk_with(one: u8, three: u8, rest: u8) -> Vec<u8> {
    let mut v = vec![rest; CHUNK];
    v[512..1024].fill(one);
    v[3 * 512..4 * 512].fill(three);
    v
}

#[test]
fn partial_chunks_keep_every_volume_through_a_second_snapshot_delete_and_merge() {
    // Five origin chunks of 7s, snapshot s1, sector 1 of each rewritten
    // with 9s (five partial chunks reading the rest from s1's chunks).
    let c = cfg("contiguous", "origin_shared_write = \"redirect\"\n");
    let (mut h, dev) = harness(&c, DEVICE_BYTES);
    assert_eq!(h.write(0, vec![7; 5 * CHUNK]).result, Ok(()));
    ok(&mut h, "snapshot create s1");
    for i in 0..5u64 {
        assert_eq!(h.write(i * CHUNK as u64 + 512, vec![9; 512]).result, Ok(()));
    }
    assert_eq!(counter(&h, "partial_chunks_count"), 5);
    // A second snapshot shares the partial chunks as they are.
    ok(&mut h, "snapshot create s2");
    let (s1, s2) = (volume_offset(&mut h, "s1"), volume_offset(&mut h, "s2"));
    assert_eq!(counter(&h, "partial_chunks_count"), 5, "nothing filled to take a snapshot");
    // The origin writes a shared partial chunk: it is filled first (its
    // sharer s2 reads the same), then the write is redirected off it.
    assert_eq!(h.write(3 * 512, vec![8; 512]).result, Ok(()));
    assert_eq!(counter(&h, "chunks_filled_count"), 1);
    let check = |h: &mut Harness, origin0: Vec<u8>, with_s1: bool| {
        assert_eq!(read(h, 0, CHUNK), origin0, "origin chunk 0");
        for i in 1..5u64 {
            assert_eq!(read(h, i * CHUNK as u64, CHUNK), chunk_with(9, 7, 7), "origin chunk {i}");
        }
        if with_s1 {
            assert_eq!(read(h, s1, 5 * CHUNK), vec![7; 5 * CHUNK], "s1");
        }
    };
    check(&mut h, chunk_with(9, 8, 7), true);
    for i in 0..5u64 {
        assert_eq!(read(&mut h, s2 + i * CHUNK as u64, CHUNK), chunk_with(9, 7, 7), "s2 chunk {i}");
    }
    // s1 deleted: the partial chunks still read from its old chunks.
    let allocated = counter(&h, "data_allocated_bytes");
    ok(&mut h, "snapshot delete s1");
    assert_eq!(h.flush().result, Ok(()));
    // Chunk 0's old chunk was s1's alone (the fill made its partial chunk
    // whole): freed. The other four are held by the partial chunks.
    assert_eq!(counter(&h, "data_allocated_bytes"), allocated - CHUNK as u64);
    check(&mut h, chunk_with(9, 8, 7), false);
    let mut h2 = reopen(&c, &dev);
    bring_up(&mut h2);
    check(&mut h2, chunk_with(9, 8, 7), false);
    assert_eq!(
        counter(&h2, "partial_chunks_count"),
        counter(&h, "partial_chunks_count"),
        "partial after a reopen"
    );
    // Merge s2: the origin rolls back to it (chunk 0 without the 8s).
    ok(&mut h, "snapshot merge s2");
    assert_eq!(h.flush().result, Ok(()));
    check(&mut h, chunk_with(9, 7, 7), false);
    // Quiet: every partial chunk filled, the old chunks freed once durable.
    h.settle();
    assert_eq!(h.flush().result, Ok(()));
    assert_eq!(counter(&h, "partial_chunks_count"), 0, "{}", h.stack.status());
    assert_eq!(counter(&h, "data_allocated_bytes"), 5 * CHUNK as u64, "only the origin's chunks are left");
    check(&mut h, chunk_with(9, 7, 7), false);
    let mut h2 = reopen(&c, &dev);
    bring_up(&mut h2);
    check(&mut h2, chunk_with(9, 7, 7), false);
}

#[test]
fn a_full_pool_fills_partial_chunks_to_free_their_old_chunks_before_failing_a_write() {
    // Half the pool written, a snapshot, then a sector of each chunk
    // rewritten (partial chunks, the other half of the pool): full. With
    // the snapshot deleted, the old chunks are held only by the partial
    // chunks reading from them: a write that needs space fills them and
    // gets it rather than ENOSPC.
    let c = "version = 1\n[[layer]]\ntarget = \"pool\"\nchunk_size = \"8K\"\nvolume_size = \"2M\"\nvolumes_max = 2\n\
             journal_blocks = 8\norigin_shared_write = \"redirect\"\ndefrag = false\n";
    let (mut h, _) = harness(c, DEVICE_BYTES);
    let n = counter(&h, "data_bytes") / CHUNK as u64 / 2;
    assert_eq!(h.write(0, vec![7; n as usize * CHUNK]).result.map_err(|e| (e, n)), Ok(()));
    ok(&mut h, "snapshot create s");
    let mut partial = 0;
    for i in 0..n {
        if h.write(i * CHUNK as u64 + 512, vec![9; 512]).result.is_err() {
            break;
        }
        partial += 1;
    }
    assert!(partial + 1 >= n, "{partial} of {n}");
    let mut far = n * CHUNK as u64;
    while h.write(far, vec![5; 512]).result.is_ok() {
        far += CHUNK as u64;
        assert!(far < 2 * n * CHUNK as u64 + 4 * CHUNK as u64, "a full pool");
    }
    assert_eq!(h.write(far, vec![5; 512]).result, Err(IoError::NoSpace), "the snapshot holds the old chunks");
    ok(&mut h, "snapshot delete s");
    assert_eq!(h.write(far, vec![5; 512]).result, Ok(()), "{}", h.stack.status());
    assert!(counter(&h, "chunks_filled_count") > 0);
    assert_eq!(read(&mut h, far, 512), vec![5; 512]);
    for i in 0..n {
        let want = if i < partial { chunk_with(9, 7, 7) } else { vec![7; CHUNK] };
        assert_eq!(read(&mut h, i * CHUNK as u64, CHUNK), want, "origin chunk {i}");
    }
}

#[test]
fn the_defragmenters_scan_ends_its_pass_on_a_pool_larger_than_one_scan_call() {
    // One scan call looks at up to 4096 chunks. With 12,288 mapped chunks
    // and nothing to move, a pass spans several calls; once it has looked
    // at every chunk it must stop, not rescan at every idle step (session
    // 23: before, a pass ended only within one call, so it never did here).
    let c = cfg("nearest", "").replace("384K", "96M");
    let (mut h, dev) = harness(&c, 128 << 20);
    let chunks = (96u64 << 20) / CHUNK as u64;
    for i in 0..chunks {
        assert_eq!(h.write(i * CHUNK as u64, vec![i as u8; CHUNK]).result, Ok(()));
    }
    assert_eq!(h.flush().result, Ok(()));
    // Opening a pool wakes the defragmenter (a scan after every open).
    let mut h = reopen(&c, &dev);
    bring_up(&mut h);
    // Background steps run after inputs, once quiet: reads (which wake
    // nothing) give it inputs, in batches, each batch then left quiet.
    let mut scans = Vec::new();
    for _ in 0..20 {
        for i in 0..16 {
            assert_eq!(read(&mut h, i * CHUNK as u64, CHUNK), vec![i as u8; CHUNK]);
        }
        h.settle();
        scans.push(counter(&h, "defrag_scans_count"));
    }
    assert!(scans[19] >= 3, "a pass over 12,288 chunks takes several calls: {scans:?}");
    assert_eq!(scans[18], scans[19], "the scan went on after a whole pass found nothing: {scans:?}");
}

// ---- the placement recorded in the header (format version 3) ----

/// A pool of 48 chunks (8 KiB) with `keys` naming its placement or not.
fn placed_cfg(keys: &str) -> String {
    format!(
        "version = 1\n[[layer]]\ntarget = \"pool\"\nchunk_size = \"8K\"\nvolume_size = \"384K\"\nvolumes_max = 4\n\
         journal_blocks = 8\n{keys}"
    )
}

fn status_value(h: &Harness, key: &str) -> Option<String> {
    h.stack.status().config.into_iter().find(|(k, _)| k == key).map(|(_, v)| v)
}

/// The header codec of the pool's checkpoint copies, as on the device
/// (version 3 records the placement after the geometry).
const HEADER_V3: layoutd_core::metablock::MetaBlockCodec =
    layoutd_core::metablock::MetaBlockCodec { magic: *b"LDPOOLCH", version: 3, block_bytes: 4096 };

/// Rewrites each checkpoint copy's header block on `dev` through `edit`
/// (its generation and payload; `None`: the block left as is): the codec
/// and the payload to write.
fn rewrite_headers(
    dev: &Arc<MemDevice>,
    copy_bytes: u64,
    edit: impl Fn(&mut Vec<u8>) -> layoutd_core::metablock::MetaBlockCodec,
) {
    for at in [0, copy_bytes] {
        let mut b = vec![0u8; 4096];
        dev.read_at(&mut b, at).unwrap();
        let Ok(d) = HEADER_V3.decode(&b) else { continue };
        let mut p = d.payload;
        let codec = edit(&mut p);
        dev.write_at(&codec.encode(d.generation, &p).expect("fits"), at).unwrap();
    }
}

/// The origin written whole (each chunk at its home), a snapshot, a few
/// chunks rewritten, flushed: `(harness, device, origin bytes)`.
fn written_pool(c: &str) -> (Harness, Arc<MemDevice>, Vec<u8>) {
    let (mut h, dev) = harness(c, DEVICE_BYTES);
    let origin: Vec<u8> = (0..48 * CHUNK).map(|i| (i / CHUNK) as u8 ^ (i % 251) as u8).collect();
    assert_eq!(h.write(0, origin.clone()).result, Ok(()));
    ok(&mut h, "snapshot create s");
    assert_eq!(h.flush().result, Ok(()));
    h.settle();
    (h, dev, origin)
}

/// Reopens `dev` under `c`, lets the defragmenter run out; the origin and
/// the snapshot read back `origin`. Returns the harness.
fn reopen_and_idle(c: &str, dev: &Arc<MemDevice>, origin: &[u8]) -> Harness {
    let mut h = reopen(c, dev);
    h.bring_up().expect("opens");
    let mut steps = 0u64;
    while h.step() {
        steps += 1;
        assert!(steps < 10_000_000, "the defragmenter never settles");
    }
    assert_eq!(read(&mut h, 0, origin.len()), origin);
    let s = volume_offset(&mut h, "s");
    assert_eq!(read(&mut h, s, origin.len()), origin);
    h
}

#[test]
fn the_placement_recorded_in_the_header_wins_over_a_conflicting_config() {
    // Formatted `sliced` 6: the origin's chunks at its homes. Opened with
    // a config naming `nearest` (other homes), or `sliced` 30: the recorded
    // placement serves, says so, and the defragmenter moves nothing (had
    // the config's homes been taken, it would move every origin chunk).
    let formatted = placed_cfg("placement = \"sliced\"\nslices = 6\n");
    let (_, dev, origin) = written_pool(&formatted);
    for (keys, said) in [
        ("placement = \"nearest\"\n", "the config's `nearest` is ignored"),
        ("placement = \"sliced\"\ndefrag = true\n", "the config's `sliced` 30 is ignored"),
        ("placement = \"contiguous\"\ndefrag = true\n", "the config's `contiguous` is ignored"),
    ] {
        let h = reopen_and_idle(&placed_cfg(keys), &dev, &origin);
        assert_eq!(status_value(&h, "placement").as_deref(), Some("sliced"), "{keys}");
        assert_eq!(status_value(&h, "slices").as_deref(), Some("6"), "{keys}");
        assert_eq!(status_value(&h, "defrag").as_deref(), Some("true"), "{keys}");
        let notice = status_value(&h, "notice").unwrap_or_else(|| panic!("{keys}: no notice"));
        assert!(
            notice.contains("placement `sliced` 6 is recorded") && notice.contains(said),
            "{keys}: {notice}"
        );
        assert_eq!(counter(&h, "defrag_moves_count"), 0, "{keys}: {}", h.stack.status());
        // The origin reads in line but at the 5 slice boundaries.
        assert_eq!(counter(&h, "origin_jumps_count"), 5, "{keys}");
    }
    // The config naming the recorded placement, or none: no notice.
    for keys in ["placement = \"sliced\"\nslices = 6\n", ""] {
        let h = reopen_and_idle(&placed_cfg(keys), &dev, &origin);
        assert_eq!(status_value(&h, "placement").as_deref(), Some("sliced"), "{keys}");
        assert_eq!(status_value(&h, "notice"), None, "{keys}");
        assert_eq!(counter(&h, "defrag_moves_count"), 0, "{keys}");
        assert_eq!(counter(&h, "origin_jumps_count"), 5, "{keys}");
    }
}

#[test]
fn a_new_pool_without_a_placement_is_sliced_30_and_keeps_it() {
    let silent = placed_cfg("");
    let (h, dev, origin) = written_pool(&silent);
    assert_eq!(status_value(&h, "placement").as_deref(), Some("sliced"));
    assert_eq!(status_value(&h, "slices").as_deref(), Some("30"));
    assert_eq!(status_value(&h, "defrag").as_deref(), Some("true"));
    let h = reopen_and_idle(&placed_cfg("placement = \"nearest\"\n"), &dev, &origin);
    assert_eq!(status_value(&h, "placement").as_deref(), Some("sliced"));
    assert_eq!(counter(&h, "defrag_moves_count"), 0);
    // Overcommitted (volumes past the pool): the slices would get no gap,
    // the default is `nearest`.
    let (h, _) =
        harness(&placed_cfg("volume_size = \"4M\"\n").replace("volume_size = \"384K\"\n", ""), DEVICE_BYTES);
    assert_eq!(status_value(&h, "placement").as_deref(), Some("nearest"));
}

#[test]
fn a_version_2_pool_opens_with_the_configs_placement_or_nearest_as_before() {
    // A pool formatted `nearest` by a version 2 build (no placement in the
    // header: built here by taking the fields out and writing version 2).
    let (h, dev, origin) = written_pool(&placed_cfg("placement = \"nearest\"\n"));
    let v2 = layoutd_core::metablock::MetaBlockCodec { version: 2, ..HEADER_V3 };
    rewrite_headers(&dev, checkpoint_copy_bytes(&h), |p| {
        p.drain(32..41);
        v2
    });
    let mut b = vec![0u8; 4096];
    dev.read_at(&mut b, 0).unwrap();
    assert!(matches!(HEADER_V3.decode(&b), Err(layoutd_core::metablock::MetaError::Version(2))));
    // A config naming no placement: `nearest`, the old built-in default
    // (not the new one: its homes would move every origin chunk).
    let mut h = reopen_and_idle(&placed_cfg(""), &dev, &origin);
    assert_eq!(status_value(&h, "placement").as_deref(), Some("nearest"));
    assert_eq!(status_value(&h, "notice"), None);
    assert_eq!(counter(&h, "defrag_moves_count"), 0, "{}", h.stack.status());
    // Its next checkpoint records it: a config naming another one no
    // longer changes it.
    ok(&mut h, "snapshot create t");
    assert_eq!(h.flush().result, Ok(()));
    h.settle();
    let image = Arc::new(MemDevice::new(DEVICE_BYTES));
    let mut all = vec![0u8; DEVICE_BYTES as usize];
    h.device.read_at(&mut all, 0).unwrap();
    image.write_at(&all, 0).unwrap();
    let again = reopen_and_idle(&placed_cfg("placement = \"contiguous\"\n"), &image, &origin);
    assert_eq!(status_value(&again, "placement").as_deref(), Some("nearest"));
    assert!(status_value(&again, "notice").is_some());
    // A config naming one: that one, as before (the old header cannot say
    // otherwise).
    let h = reopen_and_idle(&placed_cfg("placement = \"sliced\"\nslices = 6\n"), &dev, &origin);
    assert_eq!(status_value(&h, "placement").as_deref(), Some("sliced"));
    assert_eq!(status_value(&h, "notice"), None);
}

#[test]
fn a_corrupt_placement_field_is_refused_naming_the_offset() {
    let c = placed_cfg("placement = \"sliced\"\nslices = 6\n");
    let (h, healthy, origin) = written_pool(&c);
    let copy_bytes = checkpoint_copy_bytes(&h);
    for (code, slices) in [(9u8, 6u64), (1, 0), (1, 1 << 33), (2, 6)] {
        let dev = Arc::new(MemDevice::new(DEVICE_BYTES));
        healthy.copy_to(&dev).expect("copy");
        rewrite_headers(&dev, copy_bytes, |p| {
            p[32] = code;
            p[33..41].copy_from_slice(&slices.to_le_bytes());
            HEADER_V3
        });
        let e = reopen(&c, &dev).bring_up().expect_err("refused");
        assert!(
            e.contains("lower offset 0") && e.contains(&format!("lower offset {copy_bytes}")),
            "{code}/{slices}: {e}"
        );
        assert!(
            e.contains(&format!("placement code {code}")) && e.contains("at byte 64 of the header block"),
            "{e}"
        );
    }
    reopen_and_idle(&c, &healthy, &origin);
}
