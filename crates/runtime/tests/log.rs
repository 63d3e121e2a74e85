//! The `log` target: the oracle and crash checks at high utilisation with
//! tiny segments (so cleaning, plugging and SSR run many times per case),
//! for every policy; the SSR crash rule (a hazard constructed exactly,
//! failing when the rule is switched off); the cleaner's logical order;
//! bad input (a spare space too small for one cleaning pass, a corrupt
//! checkpoint, a torn segment summary); the counters.

use layoutd_core::{Op, OpenMode, Target};
use layoutd_disk::{BlockDevice, LogOp, MemDevice, Recorder};
use layoutd_runtime::det::{Harness, ZeroLatency};
use layoutd_runtime::testkit::{
    bring_up, crash_check, crash_check_idle_with, crash_check_open, crash_check_over, open_image,
    oracle_check, oracle_check_idle_with, oracle_check_over, random_image, stack_from_toml, tags_shifted,
    Before, OpSpec,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::sync::Arc;

const DEVICE_BYTES: u64 = 1 << 20;
const POLICIES: [&str; 7] =
    ["greedy", "cost-benefit", "age-threshold", "plugging", "ssr", "adaptive", "cost"];

/// 4 KiB blocks, 8 per segment, 20% spare: about 30 segments.
fn cfg(policy: &str, extra: &str) -> String {
    format!(
        "version = 1\n[[layer]]\ntarget = \"log\"\nsegment_bytes = \"32KiB\"\nover_provision_pct = 20\n\
         policy = \"{policy}\"\nclean_batch_segments = 2\nfree_segments_min = 1\nfree_segments_target = 3\n\
         checkpoint_segments = 6\nage_threshold_segments = 40\n{extra}"
    )
}

fn counter(t: &dyn Target, name: &str) -> u64 {
    t.status().counters.iter().find(|c| c.0 == name).unwrap_or_else(|| panic!("no counter {name}")).1
}

/// Fills `fill_pct` of the volume in order, then `updates` random block
/// writes (some partial, some flushes, a few trims).
fn fill_then_update(volume_bytes: u64, fill_pct: u64, updates: usize, seed: u64) -> Vec<OpSpec> {
    let blocks = volume_bytes / 4096;
    let filled = blocks * fill_pct / 100;
    let mut ops: Vec<OpSpec> = (0..filled)
        .map(|b| OpSpec { op: Op::Write, sector: b * 8, sectors: 8, fua: false, stream: 0 })
        .collect();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    for _ in 0..updates {
        let b = rng.gen_range(0..filled);
        let op = match rng.gen_range(0..100) {
            0..=79 => OpSpec { op: Op::Write, sector: b * 8, sectors: 8, fua: false, stream: 1 },
            80..=87 => {
                OpSpec { op: Op::Write, sector: b * 8 + 3, sectors: 2, fua: rng.gen_bool(0.2), stream: 2 }
            }
            88..=91 => OpSpec { op: Op::Trim, sector: b * 8, sectors: 8, fua: false, stream: 3 },
            92..=95 => OpSpec { op: Op::Read, sector: b * 8, sectors: 24, fua: false, stream: 0 },
            _ => OpSpec { op: Op::Flush, sector: 0, sectors: 0, fua: false, stream: 0 },
        };
        ops.push(op);
    }
    ops
}

fn volume_bytes(policy: &str) -> u64 {
    stack_from_toml(&cfg(policy, ""), DEVICE_BYTES, OpenMode::format(1)).size_bytes()
}

#[test]
fn every_policy_reads_back_what_a_byte_array_would_at_95_pct() {
    for policy in POLICIES {
        let ops = fill_then_update(volume_bytes(policy), 95, 1500, 7);
        let h = oracle_check(&cfg(policy, ""), DEVICE_BYTES, 7, &ops, 4);
        let t = &*h.stack;
        let status = t.status().to_string();
        eprintln!("{policy}: {status}");
        assert!(counter(t, "checkpoints_count") > 5, "{policy}: {status}");
        let moved = counter(t, "slots_cleaning_count") + counter(t, "slots_plugging_count");
        match policy {
            "ssr" | "adaptive" | "cost" => assert!(counter(t, "slots_ssr_count") > 100, "{policy}: {status}"),
            "plugging" => assert!(counter(t, "slots_plugging_count") > 50, "{policy}: {status}"),
            _ => assert!(moved > 50 && counter(t, "segments_cleaned_count") > 10, "{policy}: {status}"),
        }
    }
}

#[test]
fn every_policy_keeps_flushed_data_at_any_crash_point_at_90_pct() {
    for policy in POLICIES {
        let ops = fill_then_update(volume_bytes(policy), 90, 400, 3);
        let cuts = crash_check(&cfg(policy, ""), DEVICE_BYTES, 3, &ops, 3, 30);
        eprintln!("{policy}: {cuts} cut points");
        assert!(cuts > 40, "{policy}: {cuts}");
    }
}

/// Random block writes with a flush after nearly every one (ext4's
/// synchronous writes): each flush writes a part of the open segment, so
/// the crash cuts fall inside chains of partial writes.
fn sync_writes(volume_bytes: u64, fill_pct: u64, writes: usize, seed: u64) -> Vec<OpSpec> {
    let blocks = volume_bytes / 4096 * fill_pct / 100;
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut ops = Vec::new();
    for _ in 0..writes {
        let b = rng.gen_range(0..blocks);
        let (sector, sectors) = if rng.gen_bool(0.1) { (b * 8 + 2, 3) } else { (b * 8, 8) };
        ops.push(OpSpec { op: Op::Write, sector, sectors, fua: rng.gen_bool(0.1), stream: 1 });
        if rng.gen_bool(0.9) {
            ops.push(OpSpec { op: Op::Flush, sector: 0, sectors: 0, fua: false, stream: 0 });
        }
    }
    ops
}

#[test]
fn flushed_data_survives_a_crash_inside_a_chain_of_partial_writes() {
    for policy in ["greedy", "ssr", "adaptive"] {
        let ops = sync_writes(volume_bytes(policy), 90, 300, 11);
        let h = oracle_check(&cfg(policy, ""), DEVICE_BYTES, 11, &ops, 2);
        let parts = counter(&*h.stack, "partial_writes_count");
        assert!(parts > 100, "{policy}: {parts} partial writes");
        let cuts = crash_check(&cfg(policy, ""), DEVICE_BYTES, 11, &ops, 2, 40);
        eprintln!("{policy}: {parts} partial writes, {cuts} cut points");
        assert!(cuts > 200, "{policy}: {cuts}");
    }
}

/// Format writes neither the segments nor the map pages (format
/// identities: seglog, `log::map`): the device may still hold what an
/// earlier use left there. Over an earlier format of the same log that ran
/// the same workload to its end (so past any crash point of the new run
/// its segments carry the seqs the new run expects next, at the locations
/// it names, with partial summaries in the slots its continue links name,
/// and its map pages sit where the new run's go, all crcs valid), over the
/// same moved back to the versions of the releases before (map pages
/// without an id, which a volume of those releases takes as its own),
/// over another log's segments and map pages (more checkpoints: higher
/// generations than the new run's) and over random bytes, a new format
/// brings none of it back at any crash point: every sector holds a write
/// of the new run submitted before the cut, or zeroes (the crash check
/// reads the whole volume after each cut, the first right after the
/// format).
#[test]
fn a_format_over_a_used_device_never_brings_back_what_it_held() {
    for policy in ["greedy", "ssr", "adaptive"] {
        let text = cfg(policy, "");
        let make = |mode| stack_from_toml(&text, DEVICE_BYTES, mode);
        let ops = sync_writes(volume_bytes(policy), 90, 150, 5);
        let first = Before { image: None, format_id: 0x1111 };
        let (_, same) = oracle_check_over(&make, DEVICE_BYTES, first, 5, &ops, 2, 0);
        let other_text =
            cfg("cost-benefit", "").replace("checkpoint_segments = 6", "checkpoint_segments = 2");
        let other_ops = fill_then_update(volume_bytes(policy), 90, 600, 6);
        let other = |mode| stack_from_toml(&other_text, DEVICE_BYTES, mode);
        let (_, other) = oracle_check_over(&other, DEVICE_BYTES, first, 6, &tags_shifted(&other_ops), 3, 0);
        let random = random_image(DEVICE_BYTES, 7);
        let older = |release| {
            let image = MemDevice::new(DEVICE_BYTES);
            same.copy_to(&image).expect("copy");
            assert!(downgraded_to(&image, &[512, 4096], release) > 0);
            image
        };
        let (before_map_ids, before_format_ids) =
            (older(seglog_legacy::Release::BeforeMapIds), older(seglog_legacy::Release::BeforeFormatIds));
        for (what, image) in [
            ("an earlier format", &*same),
            ("an earlier format of the release before", &before_map_ids),
            ("an earlier format of the release before format ids", &before_format_ids),
            ("another log", &*other),
            ("random bytes", &random),
        ] {
            let before = Before { image: Some(image), format_id: 0x2222 };
            let cuts = crash_check_over(&make, DEVICE_BYTES, before, 5, &ops, 2, 40, 0);
            eprintln!("{policy} over {what}: {cuts} cut points");
            assert!(cuts > 100, "{policy} over {what}: {cuts}");
        }
    }
}

/// Map pages an earlier format left, valid crcs, on a page the new run
/// never writes and at generations its checkpoints pass (so a copy judged
/// by generation alone would be taken as the page's newest): the earlier
/// format wrote the whole volume (two map pages) with few checkpoints,
/// the new one writes only the first page's blocks and checkpoints every
/// two segments. At every cut (the first right after the format) the
/// second page's blocks read zeroes, never the earlier format's slots;
/// also with the earlier format's pages moved back to the version before
/// map pages carried the id.
#[test]
fn a_format_never_takes_map_pages_an_earlier_format_left_at_lower_generations() {
    const DEV: u64 = 8 << 20;
    let few =
        cfg("greedy", "resequence = false\n").replace("checkpoint_segments = 6", "checkpoint_segments = 40");
    let many = cfg("greedy", "").replace("checkpoint_segments = 6", "checkpoint_segments = 2");
    let (make_few, make_many) =
        (|mode| stack_from_toml(&few, DEV, mode), |mode| stack_from_toml(&many, DEV, mode));
    let volume = make_many(OpenMode::format(1)).size_bytes();
    assert!((1015..=2028).contains(&(volume / 4096)), "{} blocks: two map pages", volume / 4096);
    let old_ops = tags_shifted(&fill_then_update(volume, 90, 0, 8));
    let first = Before { image: None, format_id: 0x1111 };
    let (h, earlier) = oracle_check_over(&make_few, DEV, first, 8, &old_ops, 2, 0);
    let old_checkpoints = counter(&*h.stack, "checkpoints_count");
    let new_ops = sync_writes(1000 * 4096, 100, 150, 9);
    let (h, _) = oracle_check_over(&make_many, DEV, first, 9, &new_ops, 2, 0);
    let new_checkpoints = counter(&*h.stack, "checkpoints_count");
    assert!(new_checkpoints > old_checkpoints + 2, "{new_checkpoints} vs {old_checkpoints} checkpoints");
    let older = MemDevice::new(DEV);
    earlier.copy_to(&older).expect("copy");
    assert!(downgraded_to(&older, &[512, 4096], seglog_legacy::Release::BeforeMapIds) > 2);
    for (what, image) in [("an earlier format", &*earlier), ("one of the release before", &older)] {
        let before = Before { image: Some(image), format_id: 0x2222 };
        let cuts = crash_check_over(&make_many, DEV, before, 9, &new_ops, 2, 10, 0);
        eprintln!(
            "over {what}: {cuts} cut points ({old_checkpoints} checkpoints before, {new_checkpoints} now)"
        );
        assert!(cuts > 100, "over {what}: {cuts} cut points");
    }
}

mod tagged;
use tagged::{tag_of, tagged};

#[path = "../../targets/tests/support/seglog_legacy.rs"]
mod seglog_legacy;

/// `dev` written back in the versions of `release` (before format
/// identities, whose format zeroed every header; before map pages carried
/// the id); the number of blocks rewritten.
fn downgraded_to(dev: &MemDevice, block_sizes: &[usize], release: seglog_legacy::Release) -> usize {
    let read = |b: &mut [u8]| dev.read_at(b, 0).expect("read");
    let write = |b: &[u8]| dev.write_at(b, 0).expect("write");
    seglog_legacy::downgrade_device_to(dev.size_bytes() as usize, read, write, block_sizes, release)
}

/// The versions of the checkpoint copies at the start of `dev`: the
/// newest's, and both.
fn checkpoint_version(dev: &MemDevice) -> (u32, [u32; 2]) {
    let mut area = vec![0u8; 8192];
    dev.read_at(&mut area, 0).expect("read");
    (seglog_legacy::newest_checkpoint_version(&area), seglog_legacy::checkpoint_versions(&area))
}

/// Checks that each chain checkpoint copy of this build's version on `dev`
/// (not `legacy_map`) records the sketch of the map pages' current copies
/// as of it (`seglog::MapSketch`): each page among `copies` (page,
/// generation, offset) with a copy at or below its generation counted
/// once, with the newest such copy's generation, and as many pages as its
/// `map_pages_written`. Returns how many copies it checked (with
/// `newest_only`, the newest alone: after damage or a crash the older
/// copy's map may have been written over).
fn checkpoints_sketch_the_map(dev: &MemDevice, copies: &[(u64, u64, u64)], newest_only: bool) -> usize {
    use layoutd_core::metablock::MetaBlockCodec;
    use layoutd_targets::seglog::sketch::{SketchCell, SKETCH_CELLS};
    use layoutd_targets::seglog::MapSketch;
    let v = layoutd_targets::seglog::CHAIN_FORMAT_VERSION;
    let codec = MetaBlockCodec { magic: *b"LDSEGCC1", version: v, block_bytes: 512 };
    // Whole copies only (a torn one is no copy).
    let page_codec = MetaBlockCodec { magic: *b"LDLOGMP1", version: 2, block_bytes: 4096 };
    let whole = |at: u64| {
        let mut b = vec![0u8; 4096];
        dev.read_at(&mut b, at).expect("read");
        page_codec.decode(&b).is_ok()
    };
    let copies: Vec<(u64, u64, u64)> = copies.iter().copied().filter(|c| whole(c.2)).collect();
    let mut decoded: Vec<_> = [0u64, 4096]
        .iter()
        .filter_map(|&at| {
            let mut b = vec![0u8; 512];
            dev.read_at(&mut b, at).expect("read");
            codec.decode(&b).ok()
        })
        .collect();
    decoded.sort_by_key(|d| std::cmp::Reverse(d.generation));
    decoded.truncate(if newest_only { 1 } else { 2 });
    let mut checked = 0;
    for d in decoded {
        let u32_at = |i: usize| u32::from_le_bytes(d.payload[i..i + 4].try_into().expect("4"));
        if u32_at(52) & 1 != 0 {
            continue;
        }
        let mut current = std::collections::BTreeMap::new();
        for &(p, g, _) in copies.iter().filter(|c| c.1 <= d.generation) {
            let e = current.entry(p).or_insert(g);
            *e = (*e).max(g);
        }
        let mut want = MapSketch::default();
        for (&p, &g) in &current {
            want.insert(p as u32);
            want.replace(p as u32, 0, g);
        }
        let mut got = MapSketch::default();
        for (i, c) in got.cells.iter_mut().enumerate().take(SKETCH_CELLS) {
            let f = |k: usize| u32_at(76 + 16 * i + 4 * k);
            *c = SketchCell { count: f(0), pages: f(1), check: f(2), generations: f(3) };
        }
        assert_eq!(u32_at(56) as usize, current.len(), "checkpoint {}: pages written", d.generation);
        assert_eq!(got, want, "checkpoint {}: the sketch of its map pages", d.generation);
        checked += 1;
    }
    checked
}

/// A log of the release before format identities (summaries of version 2,
/// checkpoint of version 3, no format id, map pages of version 1) or of
/// the release before map pages carried the id (checkpoint of version 4,
/// its format id, map pages of version 1) opens with this build: what it
/// held reads back (its map page of version 1, written by its checkpoint,
/// holds the first half of the blocks; the roll-forward walks its
/// summaries for the rest), it takes writes, cleans (the cleaner reads the
/// summaries of its victims), checkpoints (map pages of version 2 beside
/// those of version 1), and is written in the new versions, with its
/// format id (0 before identities), from its first open on (both
/// checkpoint copies at once, so an older build refuses it by its version
/// instead of falling back to an old copy); it reopens after a crash with
/// everything flushed.
#[test]
fn a_log_of_the_release_before_format_ids_opens_and_goes_on_in_the_new_versions() {
    for (release, old_version) in [
        (seglog_legacy::Release::BeforeFormatIds, 3),
        (seglog_legacy::Release::BeforeMapIds, 4),
        (seglog_legacy::Release::BeforeMapDigest, 5),
        (seglog_legacy::Release::BeforeMapSketch, 6),
    ] {
        let (image, cfg) = written_image(40, 0);
        let (summaries, pages) = (usize::from(old_version == 3) * 4, usize::from(old_version < 5));
        assert!(downgraded_to(&image, &[512, 4096], release) >= 2 + summaries + pages, "{release:?}");
        assert_eq!(checkpoint_version(&image), (old_version, [old_version, old_version]));
        opens_and_goes_on(image, &cfg, old_version >= 5);
    }
}

/// `sketched`: its map pages are of this build's version (not
/// `legacy_map`), so its checkpoints' sketches are checked.
fn opens_and_goes_on(image: MemDevice, cfg: &str, sketched: bool) {
    let dev = Arc::new(image);
    let open = || {
        let stack = stack_from_toml(cfg, DEVICE_BYTES, OpenMode::Open { clean: false, accept_loss: false });
        let mut h = Harness::new(stack, dev.clone() as Arc<dyn BlockDevice>, ZeroLatency::default(), 1);
        h.bring_up().expect("opens");
        h
    };
    let check = |h: &mut Harness<ZeroLatency>, version: &dyn Fn(u64) -> u64| {
        for b in 0..40 {
            let data = h.read(b * 4096, 4096).data.expect("data");
            assert_eq!(data, block_bytes(version(b), b), "block {b}");
        }
    };
    let mut h = open();
    let v = layoutd_targets::seglog::CHAIN_FORMAT_VERSION;
    assert_eq!(checkpoint_version(&dev), (v, [v, v]), "both copies in the new version");
    // Both: the bring-up checkpoint's and the copy recovered from,
    // rewritten (unless its map pages are of the version before).
    let checked = checkpoints_sketch_the_map(&dev, &map_page_copies(&dev), false);
    assert_eq!(checked, if sketched { 2 } else { 0 });
    assert!(counter(&*h.stack, "recovered_segments_count") >= 2, "the roll-forward read version-2 summaries");
    check(&mut h, &|_| 1);
    // The victims are segments of the release before.
    h.stack.message(h.now, "clean").expect("clean");
    assert_eq!(h.flush().result, Ok(()));
    assert!(counter(&*h.stack, "segments_cleaned_count") > 0);
    check(&mut h, &|_| 1);
    for round in 2..8 {
        for b in (0..40).filter(|b| b % round != 0) {
            assert_eq!(h.write(b * 4096, block_bytes(round, b)).result, Ok(()));
        }
        if round == 4 {
            h.stack.message(h.now, "checkpoint").expect("checkpoint");
        }
    }
    assert_eq!(h.flush().result, Ok(()));
    let newest = |b: u64| (2..8).rev().find(|r| b % r != 0).unwrap_or(1);
    check(&mut h, &newest);
    drop(h);
    assert_eq!(checkpoint_version(&dev), (v, [v, v]));
    check(&mut open(), &newest);
    let checked = checkpoints_sketch_the_map(&dev, &map_page_copies(&dev), false);
    assert_eq!(checked, if sketched { 2 } else { 0 });
}

/// A crash anywhere in the first open of a log of a release before
/// (before format identities; before map pages carried the id; before the
/// map's digest: chain checkpoint versions 3, 4 and 5), with the last write before it torn or not, loses
/// nothing: the open rewrites the checkpoint copy it recovered from (in
/// this build's version) only once its own checkpoint, in the other copy,
/// is durable, so a torn rewrite never leaves the copy before it, whose
/// chain the log has since overwritten, as the newest (checked: with the
/// newest copy destroyed the image is refused).
#[test]
fn a_crash_in_the_first_open_of_a_log_of_the_release_before_format_ids_loses_nothing() {
    for (release, version) in [
        (seglog_legacy::Release::BeforeFormatIds, 3),
        (seglog_legacy::Release::BeforeMapIds, 4),
        (seglog_legacy::Release::BeforeMapDigest, 5),
        (seglog_legacy::Release::BeforeMapSketch, 6),
    ] {
        crash_in_the_first_open_of_a_log_of(release, version);
    }
}

fn crash_in_the_first_open_of_a_log_of(release: seglog_legacy::Release, version: u32) {
    let cfg = cfg("greedy", "resequence = false\n")
        .replace("checkpoint_segments = 6", "checkpoint_segments = 1000");
    let (dev, mut h) = formatted(&cfg);
    // Every block once, then rounds over a hot few, with a checkpoint
    // every 10 rounds: the segments of an epoch die within it and are
    // reused after the checkpoint that ends the next one.
    let blocks = counter(&*h.stack, "volume_blocks_count") * 9 / 10;
    let newest = |b: u64| if b < 8 { 41 } else { 1 };
    for b in 0..blocks {
        assert_eq!(h.write(b * 4096, block_bytes(1, b)).result, Ok(()));
    }
    for round in 2..42 {
        if round % 10 == 0 && round <= 30 {
            h.stack.message(h.now, "checkpoint").expect("checkpoint");
        }
        for b in 0..8 {
            assert_eq!(h.write(b * 4096, block_bytes(round, b)).result, Ok(()));
        }
        assert_eq!(h.flush().result, Ok(()));
    }
    drop(h);
    assert!(downgraded_to(&dev, &[512, 4096], release) >= 2, "{release:?}: checkpoints and more");
    assert_eq!(checkpoint_version(&dev).1, [version, version], "{release:?}");
    let make = |mode| stack_from_toml(&cfg, DEVICE_BYTES, mode);
    let checkpoints =
        |d: &MemDevice| seglog_legacy::readable_checkpoints_on(|b| d.read_at(b, 0).expect("read"));
    let g = checkpoints(&dev).into_iter().max().expect("a checkpoint").0;
    let fallback = Arc::new(MemDevice::new(DEVICE_BYTES));
    dev.copy_to(&fallback).expect("copy");
    fallback.write_at(&[0xA5; 512], g % 2 * 4096).expect("write");
    let refused = open_image(&make, fallback, 0).err().expect("the copy before is stale");
    assert!(refused.contains("log damaged"), "{release:?}: {refused}");
    let (checked, volume) = crash_check_open(&make, &dev, 0..8, &checkpoints);
    eprintln!("{release:?}: {checked} crash images");
    assert!(checked > 8 * 8, "{release:?}: {checked}");
    for b in 0..blocks {
        let at = (b * 4096) as usize;
        assert_eq!(volume[at..at + 4096], block_bytes(newest(b), b)[..], "block {b}");
    }
}

/// Bytes of version `v` of 4 KiB block `b` (each sector tagged).
fn block_bytes(v: u64, b: u64) -> Vec<u8> {
    (b * 8..b * 8 + 8).flat_map(|s| tagged(v, s)).collect()
}

const HAZARD_DEVICE_BYTES: u64 = 256 << 10;

/// 4 blocks a segment, SSR as soon as the free segments are down to the
/// reserve, no automatic checkpoint; over-provisioning picked so that the
/// volume is whole segments and the reserve is what one fill leaves.
fn hazard_cfg(unsafe_reuse: bool) -> (String, u64) {
    for op in 30..70 {
        let base = format!(
            "version = 1\n[[layer]]\ntarget = \"log\"\nsegment_bytes = \"16KiB\"\nover_provision_pct = {op}\n\
             policy = \"ssr\"\nclean_batch_segments = 1\ncheckpoint_segments = 100000\n\
             test_unsafe_reuse_before_checkpoint = {unsafe_reuse}\n"
        );
        let probe = stack_from_toml(
            &format!("{base}free_segments_min = 1\n"),
            HAZARD_DEVICE_BYTES,
            OpenMode::format(1),
        );
        let (segs, volume) = (counter(&*probe, "segment_count"), counter(&*probe, "volume_blocks_count"));
        if volume % 4 == 0 && segs > volume / 4 + 2 {
            // After the fill, the free segments: one taken by the first
            // overwrites, then exactly the reserve left: SSR comes next.
            let min = segs - volume / 4 - 1;
            return (format!("{base}free_segments_min = {min}\n"), volume);
        }
    }
    panic!("no over-provisioning gives whole segments");
}

/// The SSR reuse hazard, built exactly: blocks mapped by a durable
/// checkpoint are overwritten (their new copies in segment Y, not
/// flushed), then SSR writes new blocks into holes. A crash that keeps
/// the later segment but loses Y (a disk may reorder unflushed writes)
/// must leave every block with a value it may hold: with the crash rule,
/// the freed slots were not reused, and the durable map's blocks still
/// read their old bytes; without it, one reads another block's bytes.
fn ssr_hazard(unsafe_reuse: bool) -> Result<u64, String> {
    let (cfg, volume) = hazard_cfg(unsafe_reuse);
    let rec = Arc::new(Recorder::new(MemDevice::new(HAZARD_DEVICE_BYTES)));
    let stack = stack_from_toml(&cfg, HAZARD_DEVICE_BYTES, OpenMode::format(1));
    let mut h = Harness::new(stack, rec.clone() as Arc<dyn BlockDevice>, ZeroLatency::default(), 1);
    bring_up(&mut h);
    for b in 0..volume {
        assert_eq!(h.write(b * 4096, block_bytes(1, b)).result, Ok(()));
    }
    h.stack.message(h.now, "checkpoint").expect("checkpoint message");
    assert_eq!(h.flush().result, Ok(()));
    // Y: the first block of four segments again (not flushed).
    let overwritten = [0u64, 4, 8, 12];
    for &b in &overwritten {
        assert_eq!(h.write(b * 4096, block_bytes(2, b)).result, Ok(()));
    }
    // Then new versions of two other blocks: into holes if SSR may reuse them.
    let (b3, b4) = (16u64, 20u64);
    assert_eq!(h.write(b3 * 4096, block_bytes(3, b3)).result, Ok(()));
    assert_eq!(h.write(b4 * 4096, block_bytes(4, b4)).result, Ok(()));
    h.drive_bounded(10_000);
    let ssr_slots = counter(&*h.stack, "slots_ssr_count");
    // The crash: what a disk may keep when Y is lost: every write before
    // the first flush that completed after Y's write, except Y's.
    let y_marker = tagged(2, 0);
    let entries = rec.log().entries();
    let is_y =
        |op: &LogOp| matches!(op, LogOp::Write { data, .. } if data.chunks(512).any(|c| c == y_marker));
    let y_at = entries.iter().position(|e| is_y(&e.op)).expect("Y was written");
    let flushed_at =
        entries[y_at..].iter().position(|e| e.op == LogOp::Flush).map_or(entries.len(), |i| y_at + i);
    let image = MemDevice::new(HAZARD_DEVICE_BYTES);
    let mut dropped = 0;
    for e in &entries[..flushed_at] {
        if let LogOp::Write { offset_bytes, data } = &e.op {
            if is_y(&e.op) {
                dropped += 1;
                continue;
            }
            image.write_at(data, *offset_bytes).expect("image write");
        }
    }
    assert_eq!(dropped, 1, "Y is one write");
    let stack =
        stack_from_toml(&cfg, HAZARD_DEVICE_BYTES, OpenMode::Open { clean: false, accept_loss: false });
    let mut h = Harness::new(stack, Arc::new(image) as Arc<dyn BlockDevice>, ZeroLatency::default(), 1);
    bring_up(&mut h);
    for b in 0..volume {
        let c = h.read(b * 4096, 4096);
        let data = c.data.expect("data");
        let allowed: Vec<u64> = match b {
            _ if overwritten.contains(&b) => vec![1, 2],
            _ if b == b3 => vec![1, 3],
            _ if b == b4 => vec![1, 4],
            _ => vec![1],
        };
        for (i, s) in (b * 8..b * 8 + 8).enumerate() {
            let got = tag_of(&data[i * 512..(i + 1) * 512], s);
            if !got.is_some_and(|v| allowed.contains(&v)) {
                return Err(format!(
                    "block {b} sector {s} holds {got:?} after the crash, allowed {allowed:?}"
                ));
            }
        }
    }
    Ok(ssr_slots)
}

#[test]
fn ssr_never_reuses_a_slot_freed_since_the_last_durable_checkpoint() {
    let ssr_slots = ssr_hazard(false).expect("with the crash rule every block reads a value it may hold");
    assert!(ssr_slots > 0, "SSR ran (into holes the rule allows)");
    // Negative control: the same run with the rule switched off reuses a
    // freed slot, and the crash shows it.
    let e = ssr_hazard(true).expect_err("without the crash rule the hazard corrupts a block");
    assert!(e.contains("holds"), "{e}");
}

/// A log formatted with `cfg` on a memory device, brought up.
fn formatted(cfg: &str) -> (Arc<MemDevice>, Harness<ZeroLatency>) {
    let dev = Arc::new(MemDevice::new(DEVICE_BYTES));
    let stack = stack_from_toml(cfg, DEVICE_BYTES, OpenMode::format(1));
    let mut h = Harness::new(stack, dev.clone() as Arc<dyn BlockDevice>, ZeroLatency::default(), 1);
    bring_up(&mut h);
    (dev, h)
}

/// A formatted device after `blocks` block writes and a flush, then
/// `unflushed` more writes (version 2) left unflushed; the image and the
/// config.
fn written_image(blocks: u64, unflushed: u64) -> (MemDevice, String) {
    // No idle re-sequencing: the image ends with the flushed segments (and
    // the `unflushed` writes), not with segments idle work wrote after them.
    let cfg = cfg("greedy", "resequence = false\n")
        .replace("checkpoint_segments = 6", "checkpoint_segments = 1000");
    let (dev, mut h) = formatted(&cfg);
    for b in 0..blocks {
        assert_eq!(h.write(b * 4096, block_bytes(1, b)).result, Ok(()));
        if b == blocks / 2 {
            h.stack.message(h.now, "checkpoint").expect("checkpoint");
        }
    }
    assert_eq!(h.flush().result, Ok(()));
    for b in 0..unflushed {
        assert_eq!(h.write(b * 4096, block_bytes(2, b)).result, Ok(()));
    }
    h.drive_bounded(10_000);
    let image = MemDevice::new(DEVICE_BYTES);
    dev.copy_to(&image).expect("copy");
    (image, cfg)
}

/// Opens `image`; on success checks that every flushed block reads
/// version 1 (or 2 where an unflushed write may have landed).
fn reopen(image: MemDevice, cfg: &str, blocks: u64, unflushed: u64) -> Result<(), String> {
    let stack = stack_from_toml(cfg, DEVICE_BYTES, OpenMode::Open { clean: false, accept_loss: false });
    let mut h = Harness::new(stack, Arc::new(image) as Arc<dyn BlockDevice>, ZeroLatency::default(), 1);
    h.bring_up()?;
    if let Some((_, e)) = h.stack.status().config.iter().find(|c| c.0 == "error") {
        return Err(e.clone());
    }
    for b in 0..blocks {
        let data = h.read(b * 4096, 4096).data.expect("data");
        let allowed: &[u64] = if b < unflushed { &[1, 2] } else { &[1] };
        for (i, s) in (b * 8..b * 8 + 8).enumerate() {
            let got = tag_of(&data[i * 512..(i + 1) * 512], s);
            assert!(
                got.is_some_and(|v| allowed.contains(&v)),
                "block {b} holds {got:?}, allowed {allowed:?}"
            );
        }
    }
    Ok(())
}

/// The summaries on the device as (seq, lower offset), newest last: the
/// segment headers (`in_slots` false), or those and the summaries of later
/// parts, which sit in slots (a later part of a segment lies further into
/// it, so (seq, offset) is the order they were written in).
fn summary_offsets(image: &MemDevice, in_slots: bool) -> Vec<(u64, u64)> {
    let cfg = cfg("greedy", "");
    let probe = stack_from_toml(&cfg, DEVICE_BYTES, OpenMode::format(1));
    let segs = counter(&*probe, "segment_count");
    let stride = 512 + 8 * 4096;
    let mut found = Vec::new();
    for l in 0..segs {
        let off = 8192 + l * stride;
        let slots = if in_slots { 0..8 } else { 0..0 };
        for at in std::iter::once(off).chain(slots.map(|s| off + 512 + s * 4096)) {
            let mut b = vec![0u8; 512];
            image.read_at(&mut b, at).expect("read");
            if &b[0..8] == b"LDSEGHD1" {
                found.push((u64::from_le_bytes(b[16..24].try_into().expect("8")), at));
            }
        }
    }
    found.sort_unstable();
    found
}

#[test]
fn bad_input_is_refused_with_one_clear_line_and_never_read_as_data() {
    // Spare space too small for one cleaning pass.
    let cfg_text = cfg("greedy", "").replace("over_provision_pct = 20", "over_provision_pct = 2");
    let parsed = layoutd_core::config::StackConfig::parse(&cfg_text, "test").expect("toml");
    let e =
        layoutd_targets::build_stack(&parsed, DEVICE_BYTES, OpenMode::format(1)).err().expect("refused").0;
    assert!(e.contains("over_provision_pct = 2") && e.contains("cleaning pass"), "{e}");

    // A clean image reopens with every flushed block.
    let (blocks, unflushed) = (60, 10);
    let (image, cfg) = written_image(blocks, unflushed);
    reopen(image, &cfg, blocks, unflushed).expect("an undamaged log recovers");

    // One corrupt checkpoint copy (either): the other one, and a longer
    // roll-forward, recover everything flushed.
    for copy in [0u64, 1] {
        let (image, cfg) = written_image(blocks, unflushed);
        image.write_at(&[0xAB; 16], copy * 4096 + 40).expect("damage");
        reopen(image, &cfg, blocks, unflushed).unwrap_or_else(|e| panic!("copy {copy} damaged: {e}"));
    }
    // Both: refused, naming where.
    let (image, cfg) = written_image(blocks, unflushed);
    image.write_at(&[0xAB; 16], 40).expect("damage");
    image.write_at(&[0xAB; 16], 4096 + 40).expect("damage");
    let e = reopen(image, &cfg, blocks, unflushed).expect_err("no checkpoint");
    assert!(e.contains("no valid checkpoint") && e.contains("offsets 0 and 4096"), "{e}");

    // A torn summary at the unflushed tail (the seal of the segment the
    // flush wrote a part of): cut off, flushed data intact.
    let (image, cfg) = written_image(blocks, unflushed);
    let newest = *summary_offsets(&image, true).last().expect("summaries");
    assert!(!summary_offsets(&image, false).contains(&newest), "the tail is a later part's summary");
    image.write_at(&[0xAB; 16], newest.1 + 100).expect("damage");
    reopen(image, &cfg, blocks, unflushed).expect("a torn tail is cut off");

    // A torn summary of a flushed segment after the checkpoint: refused,
    // naming the segment, not read as a shorter log.
    let (image, cfg) = written_image(blocks, 0);
    let newest = *summary_offsets(&image, false).last().expect("headers");
    image.write_at(&[0xAB; 16], newest.1 + 100).expect("damage");
    let e = reopen(image, &cfg, blocks, 0).expect_err("flushed data would be lost");
    assert!(e.contains("log damaged") && e.contains(&format!("lower offset {}", newest.1)), "{e}");

    // A log of the format before partial segments (checkpoint version 2):
    // refused in one line naming the version.
    let (image, cfg) = written_image(blocks, 0);
    for copy in [0u64, 1] {
        let mut b = vec![0u8; 512];
        image.read_at(&mut b, copy * 4096).expect("read");
        b[8..12].copy_from_slice(&2u32.to_le_bytes());
        b[28..32].fill(0);
        let crc = crc32c::crc32c(&b);
        b[28..32].copy_from_slice(&crc.to_le_bytes());
        image.write_at(&b, copy * 4096).expect("write");
    }
    let e = reopen(image, &cfg, blocks, 0).expect_err("an old format");
    assert!(e.contains("format version 2") && e.contains("older layoutd") && !e.contains('\n'), "{e}");
}

/// The current copy of a map page written before the checkpoint, damaged
/// (a flipped byte, or zeroed): the page was counted in the checkpoint
/// (`map_pages_written`), so the open is refused naming the page and its
/// offsets, not served with its blocks unmapped (before, it opened and
/// the blocks written before the checkpoint read zeroes). With the loss
/// accepted it opens, the page unmapped, and says so.
#[test]
fn a_damaged_map_page_written_before_the_checkpoint_is_refused() {
    let (blocks, unflushed) = (60, 0);
    for zero in [false, true] {
        let (image, cfg) = written_image(blocks, unflushed);
        let pages = map_page_copies(&image);
        assert_eq!(pages.len(), 1, "one page, written once: {pages:?}");
        let at = pages[0].2;
        let copy = damaged(&image, at, zero);
        let e = reopen(image, &cfg, blocks, unflushed).expect_err("a written map page is lost");
        let why = if zero { "blank" } else { "crc32c mismatch" };
        assert!(
            e.contains("log map: 1 page(s) written before checkpoint")
                && e.contains("page 0 at lower offsets")
                && e.contains(&at.to_string())
                && e.contains(why)
                && e.contains("--accept-loss")
                && !e.contains('\n'),
            "{e}"
        );
        let stack = stack_from_toml(&cfg, DEVICE_BYTES, OpenMode::Open { clean: false, accept_loss: true });
        let mut h = Harness::new(stack, Arc::new(copy) as Arc<dyn BlockDevice>, ZeroLatency::default(), 1);
        h.bring_up().expect("the loss accepted");
        let config = h.stack.status().config;
        assert!(config.iter().all(|c| c.0 != "error"), "{config:?}");
        let loss = config.iter().find(|c| c.0 == "accepted_loss").expect("the loss is reported");
        assert!(loss.1.contains("log map: 1 page(s)"), "{loss:?}");
        assert_eq!(counter(&*h.stack, "lost_map_pages_count"), 1);
    }
}

/// A volume whose first `twice` map pages are written by two checkpoints
/// (generations 2 and 3: the first 40 blocks of each in version 1, then
/// version 2) and whose next `once` pages are written once, before the
/// first (their first 8 blocks, version 1); flushed. The image, its size
/// and the config.
fn twice_written_image(twice: u64, once: u64) -> (MemDevice, u64, String) {
    let dev_bytes = if twice + once <= 1 { DEVICE_BYTES } else { (twice + once + 1) * (4 << 20) };
    let cfg = cfg("greedy", "resequence = false\n")
        .replace("checkpoint_segments = 6", "checkpoint_segments = 1000");
    let dev = Arc::new(MemDevice::new(dev_bytes));
    let stack = stack_from_toml(&cfg, dev_bytes, OpenMode::format(1));
    let blocks = stack.size_bytes() / 4096;
    assert!(blocks >= (twice + once - 1) * 1014 + 40, "{blocks} blocks for {} pages", twice + once);
    let mut h = Harness::new(stack, dev.clone() as Arc<dyn BlockDevice>, ZeroLatency::default(), 1);
    bring_up(&mut h);
    for v in 1..=2 {
        let once_blocks = (twice..twice + once).filter(|_| v == 1).flat_map(|p| p * 1014..p * 1014 + 8);
        for b in once_blocks.chain((0..twice).flat_map(|p| p * 1014..p * 1014 + 40)) {
            assert_eq!(h.write(b * 4096, block_bytes(v, b)).result, Ok(()));
        }
        h.stack.message(h.now, "checkpoint").expect("checkpoint");
    }
    assert_eq!(h.flush().result, Ok(()));
    drop(h);
    let image = MemDevice::new(dev_bytes);
    dev.copy_to(&image).expect("copy");
    (image, dev_bytes, cfg)
}

/// Damages the map page copy at `at` of `image` (the first 4 KiB zeroed,
/// or a byte flipped in its payload); returns a copy of the result.
fn damaged(image: &MemDevice, at: u64, zero: bool) -> MemDevice {
    if zero {
        image.write_at(&[0u8; 4096], at).expect("damage");
    } else {
        image.write_at(&[0xAB], at + 100).expect("damage");
    }
    let copy = MemDevice::new(image.size_bytes());
    image.copy_to(&copy).expect("copy");
    copy
}

/// The map page copies on `image` (of format id 1): (page, generation,
/// lower offset) each, by offset.
fn map_page_copies(image: &MemDevice) -> Vec<(u64, u64, u64)> {
    map_page_copies_from(image, 0)
}

/// [`map_page_copies`] at lower offsets `from` on.
fn map_page_copies_from(image: &MemDevice, from: u64) -> Vec<(u64, u64, u64)> {
    (from / 4096..image.size_bytes() / 4096)
        .filter_map(|i| {
            let mut b = vec![0u8; 40];
            image.read_at(&mut b, i * 4096).expect("read");
            let field = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().expect("8"));
            (&b[0..8] == b"LDLOGMP1").then(|| (field(32) ^ 1, field(16), i * 4096))
        })
        .collect()
}

/// The current copy of a map page written by two checkpoints, damaged (a
/// flipped byte, or zeroed): recovery would take the page's older copy,
/// whose mappings are stale (before session 29 the open succeeded and
/// blocks 0..40 read version 1, written over since). The checkpoint's
/// digests of the map (the sum of the current copies' generations, and
/// the sum weighted per page) fall short, so the open is refused in one
/// line naming the page, both copies' offsets and why each is unusable,
/// and `--accept-loss`; with pages written once beside it, whose other
/// copy is blank too (they could be stale as well, by the sum alone), the
/// weighted digest still names the damaged page alone. With the loss
/// accepted the volume opens with that page unmapped: its blocks read
/// zeroes, never version 1, and the pages written once keep their data;
/// the status says so; the page is written again before serving, so the
/// next open needs nothing. Two pages damaged: the digests single out
/// the pair (before session 30 the refusal said which cannot be told and
/// `--accept-loss` unmapped every page that could be stale, the pages
/// written once too). A forged digest that no set of pages explains,
/// beside pages that could be stale: which cannot be told, and every one
/// of them is unmapped.
#[test]
fn a_damaged_newer_copy_of_a_map_page_written_twice_is_refused_never_served_stale() {
    // A digest that no page's copies can explain (the newest checkpoint
    // copy's, crc made good): both copies of the page check out, so the
    // checkpoint is what is corrupt.
    let (image, dev_bytes, cfg) = twice_written_image(1, 0);
    let mut b = vec![0u8; 512];
    image.read_at(&mut b, 4096).expect("read");
    assert_eq!(u64::from_le_bytes(b[16..24].try_into().expect("8")), 3, "generation 3 in copy 1");
    let digest = u64::from_le_bytes(b[32 + 60..32 + 68].try_into().expect("8"));
    assert_eq!(digest, 3, "one page, its current copy of generation 3");
    b[32 + 60..32 + 68].copy_from_slice(&(digest + 1).to_le_bytes());
    b[28..32].fill(0);
    let crc = crc32c::crc32c(&b);
    b[28..32].copy_from_slice(&crc.to_le_bytes());
    image.write_at(&b, 4096).expect("write");
    let stack = stack_from_toml(&cfg, dev_bytes, OpenMode::Open { clean: false, accept_loss: true });
    let mut h = Harness::new(stack, Arc::new(image) as Arc<dyn BlockDevice>, ZeroLatency::default(), 1);
    let e = h.bring_up().err().expect("a corrupt checkpoint");
    assert!(e.contains("log checkpoint 3: the map's digest is 4") && e.contains("corrupt"), "{e}");
    // A forged digest beside four pages written once, which could be stale
    // (their other copy is blank): no set of them explains it, so which
    // cannot be told, and with the loss accepted every one is unmapped.
    let (image, dev_bytes, cfg) = twice_written_image(0, 4);
    image.read_at(&mut b, 4096).expect("read");
    assert_eq!(u64::from_le_bytes(b[16..24].try_into().expect("8")), 3, "generation 3 in copy 1");
    for at in [32 + 60, 32 + 68] {
        let v = u64::from_le_bytes(b[at..at + 8].try_into().expect("8"));
        b[at..at + 8].copy_from_slice(&(v + 1).to_le_bytes());
    }
    b[28..32].fill(0);
    let crc = crc32c::crc32c(&b);
    b[28..32].copy_from_slice(&crc.to_le_bytes());
    image.write_at(&b, 4096).expect("write");
    let dev = Arc::new(image);
    for accept_loss in [false, true] {
        let stack = stack_from_toml(&cfg, dev_bytes, OpenMode::Open { clean: false, accept_loss });
        let mut h = Harness::new(stack, dev.clone() as Arc<dyn BlockDevice>, ZeroLatency::default(), 1);
        match h.bring_up() {
            Err(e) => assert!(
                !accept_loss
                    && e.contains("4 pages have one usable copy")
                    && e.contains("which cannot be told"),
                "{e}"
            ),
            Ok(()) => {
                assert!(accept_loss);
                assert_eq!(counter(&*h.stack, "lost_map_pages_count"), 4);
                for b in (0..4).flat_map(|p| p * 1014..p * 1014 + 8) {
                    assert!(h.read(b * 4096, 4096).data.expect("data") == vec![0u8; 4096], "block {b}");
                }
            }
        }
    }
    // (pages written twice, of them damaged, pages written once, zeroed)
    let cases = [(1, 1, 0, false), (1, 1, 0, true), (1, 1, 4, false), (1, 1, 4, true), (2, 2, 2, false)];
    for (twice, bad, once, zero) in cases {
        let case = format!("{twice} pages written twice, {bad} damaged, {once} written once, zeroed {zero}");
        let (image, dev_bytes, cfg) = twice_written_image(twice, once);
        let copies = map_page_copies(&image);
        assert_eq!(copies.len() as u64, 2 * twice + once, "{case}: {copies:?}");
        let mut kept = None;
        let mut named = Vec::new();
        for p in 0..bad {
            let page: Vec<&(u64, u64, u64)> = copies.iter().filter(|c| c.0 == p).collect();
            assert_eq!(page.iter().map(|c| c.1).collect::<Vec<_>>(), [3, 2], "{case}: {copies:?}");
            let at = page[0].2;
            kept = Some(damaged(&image, at, zero));
            let why = if zero { "copy 0: blank (never written)" } else { "copy 0: crc32c mismatch" };
            named.push(format!("page {p} at lower offsets {} and {}: {why}", at, at + 4096));
        }
        let open = |dev: &Arc<MemDevice>, accept_loss: bool| {
            let stack = stack_from_toml(&cfg, dev_bytes, OpenMode::Open { clean: false, accept_loss });
            let mut h = Harness::new(stack, dev.clone() as Arc<dyn BlockDevice>, ZeroLatency::default(), 1);
            h.bring_up().map(|()| h)
        };
        let e = open(&Arc::new(image), false).err().expect("stale mappings would be served");
        assert!(
            e.contains("log map: the generations of the map pages' copies sum to")
                && named.iter().all(|n| e.contains(n))
                && e.contains("copy 1: generation 2")
                && e.contains("--accept-loss")
                && !e.contains('\n')
                && !e.contains("  "),
            "{case}: {e}"
        );
        // The damaged pages are named alone, pages written once (whose
        // other copy is blank) beside them or not.
        let candidates = twice + once;
        let named = match bad {
            1 => "page 0's current copy, of generation 3 by the map's digests, is damaged".to_string(),
            _ => "pages 0 and 1's current copies, of generations 3 and 3 by the map's digests, are damaged"
                .into(),
        };
        assert!(e.contains(&named), "{case}: {e}");
        assert_eq!(e.contains(&format!("clear the {once} other page(s)")), once > 0, "{case}: {e}");
        assert!(
            !e.contains("which cannot be told") && !e.contains("pages have one usable copy"),
            "{case}: {e}"
        );
        assert_eq!(e.contains("page 1 at"), bad == 2, "{case}: {e}");
        // Accepted: the damaged pages unmapped, never their stale
        // mappings; the others keep their data.
        let dev = Arc::new(kept.expect("damaged"));
        let mut h = open(&dev, true).unwrap_or_else(|e| panic!("{case}: the loss accepted: {e}"));
        let config = h.stack.status().config;
        let loss = config.iter().find(|c| c.0 == "accepted_loss").expect("the loss is reported");
        assert!(
            loss.1.contains("log map: the generations") && loss.1.contains("unmapped"),
            "{case}: {loss:?}"
        );
        let unmapped = bad;
        assert_eq!(counter(&*h.stack, "lost_map_pages_count"), unmapped, "{case}");
        // Each written block and what it reads: zeroes when unmapped.
        let expected = |p: u64| {
            let (n, v) = if p < twice { (40, 2) } else { (8, 1) };
            (p * 1014..p * 1014 + n)
                .map(move |b| (b, if p < unmapped { vec![0u8; 4096] } else { block_bytes(v, b) }))
        };
        for (b, want) in (0..candidates).flat_map(expected) {
            assert_eq!(h.read(b * 4096, 4096).data.expect("data"), want, "{case}: block {b}");
        }
        assert_eq!(h.write(50 * 4096, block_bytes(3, 50)).result, Ok(()));
        assert_eq!(h.flush().result, Ok(()));
        drop(h);
        // The pages were written again before serving: the next open (as
        // after a crash) needs nothing, and still reads no stale mapping.
        let mut h = open(&dev, false).unwrap_or_else(|e| panic!("{case}: reopened: {e}"));
        for (b, want) in (0..candidates).flat_map(expected) {
            assert_eq!(h.read(b * 4096, 4096).data.expect("data"), want, "{case}: block {b} reopened");
        }
        assert_eq!(h.read(50 * 4096, 4096).data.expect("data"), block_bytes(3, 50), "{case}");
    }
}

/// Map pages written once, their only copy damaged (a flipped byte, or
/// zeroed), beside pages written once that are whole: the pages have no
/// usable copy, so recovery counts them lost and, with `--accept-loss`,
/// unmaps them. The digests fall short by exactly those pages'
/// generations times their weights, so they clear every other page: the
/// whole pages written once (whose other copy is blank, as a damaged
/// current copy could look) keep their data. One page lost: before
/// session 29's review every other page was unmapped as possibly stale;
/// two or three: before session 30 (the digests were consulted for one
/// lost page only): data loss well past the damage the opener accepted.
#[test]
fn map_pages_lost_outright_cost_only_their_own_mappings_under_accept_loss() {
    for (lost, zero) in [(1, false), (1, true), (2, false), (2, true), (3, false), (3, true)] {
        let case = format!("{lost} pages lost, zeroed {zero}");
        let (image, dev_bytes, cfg) = twice_written_image(0, lost + 2);
        let copies = map_page_copies(&image);
        assert_eq!(copies.len() as u64, lost + 2, "{case}: one copy a page: {copies:?}");
        for p in 0..lost {
            damaged(&image, copies.iter().find(|c| c.0 == p).expect("page").2, zero);
        }
        let stack = stack_from_toml(&cfg, dev_bytes, OpenMode::Open { clean: false, accept_loss: true });
        let mut h = Harness::new(stack, Arc::new(image) as Arc<dyn BlockDevice>, ZeroLatency::default(), 1);
        h.bring_up().unwrap_or_else(|e| panic!("{case}: the loss accepted: {e}"));
        assert_eq!(counter(&*h.stack, "lost_map_pages_count"), lost, "{case}: only the damaged pages");
        for p in 0..lost + 2 {
            for b in p * 1014..p * 1014 + 8 {
                let want = if p < lost { vec![0u8; 4096] } else { block_bytes(1, b) };
                assert!(h.read(b * 4096, 4096).data.expect("data") == want, "{case}: page {p} block {b}");
            }
        }
    }
}

/// A sparse 160 GiB volume (one map page per 1014 blocks), formatted
/// and up: the device, its size, the config, its map pages and the
/// harness.
fn sparse_volume() -> (Arc<MemDevice>, u64, String, u64, Harness<ZeroLatency>) {
    let dev_bytes = 160 << 30;
    let cfg = cfg("greedy", "resequence = false\n")
        .replace("segment_bytes = \"32KiB\"", "segment_bytes = \"512KiB\"")
        .replace("checkpoint_segments = 6", "checkpoint_segments = 1000");
    let dev = Arc::new(MemDevice::with_chunk_bytes(dev_bytes, 4096));
    let stack = stack_from_toml(&cfg, dev_bytes, OpenMode::format(1));
    let pages = stack.size_bytes() / 4096 / 1014;
    let mut h = Harness::new(stack, dev.clone() as Arc<dyn BlockDevice>, ZeroLatency::default(), 1);
    bring_up(&mut h);
    (dev, dev_bytes, cfg, pages, h)
}

/// A sparsely written volume (160 GiB, about 32,700 map pages, 40 of
/// them written once, one block each, spread over the volume, by
/// checkpoint 202, and page 1 by checkpoints 2 to 201 and 203; flushed):
/// the device, its size, the config and the 40 pages.
fn sparse_image() -> (Arc<MemDevice>, u64, String, Vec<u64>) {
    let (dev, dev_bytes, cfg, pages, mut h) = sparse_volume();
    assert!(pages > 30_000, "{pages} map pages");
    let written: Vec<u64> = (0..40).map(|i| i * (pages / 40) + 3).collect();
    // Checkpoints 2 to 201 write page 1 alone, 202 the 40 pages, 203 page
    // 1 again: the 40 pages' copies are then older than the checkpoint,
    // beside a blank one (what a damaged newer copy could look like), and
    // five of them lost fall short by 1,010 generations, past what the
    // digests' search can weigh (1,010^4 sets of shortfalls > 2^29).
    for v in 1..=200 {
        assert_eq!(h.write(1014 * 4096, block_bytes(v, 1014)).result, Ok(()));
        h.stack.message(h.now, "checkpoint").expect("checkpoint");
    }
    for &p in &written {
        assert_eq!(h.write(p * 1014 * 4096, block_bytes(1, p * 1014)).result, Ok(()));
    }
    h.stack.message(h.now, "checkpoint").expect("checkpoint");
    assert_eq!(h.write(1014 * 4096, block_bytes(201, 1014)).result, Ok(()));
    h.stack.message(h.now, "checkpoint").expect("checkpoint");
    assert_eq!(h.flush().result, Ok(()));
    drop(h);
    // The map area is near the device's end (two copies a page).
    let copies = map_page_copies_from(&dev, dev_bytes - 4 * 41 * (pages / 40 + 1) * 4096);
    assert_eq!(checkpoints_sketch_the_map(&dev, &copies, false), 2, "both copies sketch the map");
    (dev, dev_bytes, cfg, written)
}

/// On a sparsely written volume ([`sparse_image`]) two, three or five
/// written pages' only copies zeroed (or a byte flipped): a zeroed copy
/// looks like the 32,700 pages never written, so before session 31 any
/// two of those could have been the lost ones (too many pairs for the
/// digests to weigh soundly) and `--accept-loss` unmapped all 40 written
/// pages (the 38 whole ones too: every block read zeroes). The
/// checkpoint's sketch of written pages (version 7) lists the lost pages
/// and their generations: the refusal names them, and with the loss
/// accepted only they are unmapped; the others read back their data, and
/// so after a reopen. Five lost pages of generation 202 need the
/// generations (the search over the listed pages' every generation
/// weighs too many sets). Two lost beside page 1's current copy damaged
/// (its older copy stale): page 1 is named and unmapped too, never
/// served stale, and the 38 others keep their data.
#[test]
fn lost_map_pages_on_a_sparse_volume_are_told_from_the_pages_never_written() {
    for (lost, zero, stale) in
        [(2, true, false), (3, true, false), (5, true, false), (2, false, false), (2, true, true)]
    {
        let case = format!("{lost} pages lost, zeroed {zero}, page 1's current copy damaged {stale}");
        let (dev, dev_bytes, cfg, written) = sparse_image();
        // The map area is near the device's end (two copies a page; the
        // pages written are `pages / 40` apart).
        let pages_max = 41 * (written[1] - written[0] + 1);
        let copies = map_page_copies_from(&dev, dev_bytes - 4 * pages_max * 4096);
        assert_eq!(copies.len(), 42, "{case}: one copy a page, two of page 1");
        // Every eighth written page, from the second.
        let gone: Vec<u64> = written.iter().copied().skip(1).step_by(8).take(lost).collect();
        for &p in &gone {
            let at = copies.iter().find(|c| c.0 == p).expect("page").2;
            match zero {
                true => dev.write_at(&[0u8; 4096], at).expect("damage"),
                false => dev.write_at(&[0xAB], at + 100).expect("damage"),
            }
        }
        if stale {
            // Its older copy (generation 201, block 1014 in version 199)
            // would serve a stale mapping.
            let newest = copies.iter().filter(|c| c.0 == 1).max_by_key(|c| c.1).expect("page 1");
            assert_eq!(newest.1, 203, "{case}");
            dev.write_at(&[0xAB], newest.2 + 100).expect("damage");
        }
        let open = |accept_loss: bool| {
            let stack = stack_from_toml(&cfg, dev_bytes, OpenMode::Open { clean: false, accept_loss });
            let mut h = Harness::new(stack, dev.clone() as Arc<dyn BlockDevice>, ZeroLatency::default(), 1);
            h.bring_up().map(|()| h)
        };
        let e = open(false).err().expect("written pages are lost");
        let pages: Vec<String> = gone.iter().map(u64::to_string).collect();
        let listed = match pages.split_last() {
            Some((last, rest)) => {
                format!("pages {} and {last}, told from the pages never written", rest.join(", "))
            }
            None => unreachable!(),
        };
        assert!(
            e.contains(&format!(
                "log map: {lost} page(s) written before checkpoint 203 have no readable copy"
            )) && e.contains(&listed)
                && e.contains(&format!("page {} at lower offsets", gone[0]))
                && e.contains("--accept-loss")
                && !e.contains('\n'),
            "{case}: {e}"
        );
        let mut h = open(true).unwrap_or_else(|e| panic!("{case}: the loss accepted: {e}"));
        let unmapped = lost as u64 + u64::from(stale);
        assert_eq!(counter(&*h.stack, "lost_map_pages_count"), unmapped, "{case}: only the lost pages");
        if stale {
            let loss =
                h.stack.status().config.into_iter().find(|c| c.0 == "accepted_loss").expect("reported");
            assert!(loss.1.contains("page 1's current copy, of generation 203"), "{case}: {loss:?}");
        }
        let reads = |h: &mut Harness<ZeroLatency>| {
            for &p in &written {
                let b = p * 1014;
                let want = if gone.contains(&p) { vec![0u8; 4096] } else { block_bytes(1, b) };
                assert!(h.read(b * 4096, 4096).data.expect("data") == want, "{case}: page {p} block {b}");
            }
            let want = if stale { vec![0u8; 4096] } else { block_bytes(201, 1014) };
            assert!(h.read(1014 * 4096, 4096).data.expect("data") == want, "{case}: page 1");
        };
        reads(&mut h);
        // The bring-up checkpoint counts and sketches the pages left.
        let copies = map_page_copies_from(&dev, dev_bytes - 4 * pages_max * 4096);
        assert_eq!(checkpoints_sketch_the_map(&dev, &copies, true), 1, "{case}");
        drop(h);
        reads(&mut open(false).unwrap_or_else(|e| panic!("{case}: reopened: {e}")));
    }
}

/// A lost page given the shortfall of a stale page beside it: on a
/// sparse volume page A (written by checkpoint 2) shares its cell of part
/// 0 with page 1 (written by checkpoints 3 and 4); A's only copy is
/// zeroed and page 1's current copy damaged (its older copy, 1
/// generation short, stale). The sketch lists A with generation 3 (its
/// own plus page 1's shortfall), which makes the digests' plain sum whole
/// but not the weighted one, so it is not taken as the whole answer: the
/// search finds page 1 stale and it is unmapped, never served stale.
#[test]
fn a_stale_page_sharing_a_cell_with_a_lost_one_is_still_unmapped() {
    use layoutd_targets::seglog::MapSketch;
    let (dev, dev_bytes, cfg, pages, mut h) = sparse_volume();
    let a = (2..pages)
        .find(|&p| MapSketch::cell_of(p as u32, 0) == MapSketch::cell_of(1, 0))
        .expect("a page in page 1's cell of part 0");
    for (v, b) in [(1, a * 1014), (1, 1014), (2, 1014)] {
        assert_eq!(h.write(b * 4096, block_bytes(v, b)).result, Ok(()));
        h.stack.message(h.now, "checkpoint").expect("checkpoint");
    }
    assert_eq!(h.flush().result, Ok(()));
    drop(h);
    let copies = map_page_copies_from(&dev, dev_bytes - 8 * (pages + 1) * 4096);
    let gens = |p: u64| -> Vec<u64> {
        let mut g: Vec<u64> = copies.iter().filter(|c| c.0 == p).map(|c| c.1).collect();
        g.sort_unstable();
        g
    };
    assert_eq!((gens(a), gens(1)), (vec![2], vec![3, 4]), "{copies:?}");
    let at = |p: u64, g: u64| copies.iter().find(|c| c.0 == p && c.1 == g).expect("copy").2;
    dev.write_at(&[0u8; 4096], at(a, 2)).expect("damage");
    dev.write_at(&[0xAB], at(1, 4) + 100).expect("damage");
    let open = |accept_loss: bool| {
        let stack = stack_from_toml(&cfg, dev_bytes, OpenMode::Open { clean: false, accept_loss });
        let mut h = Harness::new(stack, dev.clone() as Arc<dyn BlockDevice>, ZeroLatency::default(), 1);
        h.bring_up().map(|()| h)
    };
    let e = open(false).err().expect("refused");
    assert!(e.contains(&format!("page {a} at lower offsets")), "{e}");
    let mut h = open(true).unwrap_or_else(|e| panic!("the loss accepted: {e}"));
    let loss = h.stack.status().config.into_iter().find(|c| c.0 == "accepted_loss").expect("reported");
    assert!(loss.1.contains("page 1's current copy, of generation 4"), "{loss:?}");
    assert_eq!(counter(&*h.stack, "lost_map_pages_count"), 2, "{loss:?}");
    assert!(h.read(1014 * 4096, 4096).data.expect("data") == vec![0u8; 4096], "page 1 served stale");
}

/// The sketch's list is taken only as many as the count says are lost,
/// each without a usable copy: on the sparse volume with two pages
/// zeroed and the checkpoint's `map_pages_written` one more (its crc made
/// good), the sketch lists two pages where three are missing (as a
/// checkpoint rewritten after an accepted loss could); with a whole page
/// counted in it once more too, it lists three, one of them whole. The
/// refusal names no page by it either way.
#[test]
fn a_sketch_that_lists_fewer_pages_than_the_count_or_a_whole_one_is_not_taken() {
    for forge_whole in [false, true] {
        sketch_not_taken(forge_whole);
    }
}

fn sketch_not_taken(forge_whole: bool) {
    use layoutd_core::metablock::MetaBlockCodec;
    let (dev, dev_bytes, cfg, written) = sparse_image();
    let codec = MetaBlockCodec {
        magic: *b"LDSEGCC1",
        version: layoutd_targets::seglog::CHAIN_FORMAT_VERSION,
        block_bytes: 512,
    };
    // Checkpoint 203, in copy 1.
    let mut b = vec![0u8; 512];
    dev.read_at(&mut b, 4096).expect("read");
    let d = codec.decode(&b).expect("checkpoint 203");
    assert_eq!(d.generation, 203);
    let mut payload = d.payload.clone();
    let count = u32::from_le_bytes(payload[56..60].try_into().expect("4"));
    assert_eq!(count, 41, "the 40 pages and page 1");
    payload[56..60].copy_from_slice(&(count + 1).to_le_bytes());
    if forge_whole {
        // Page written[20] (whole) counted once more: its cells' count,
        // index and check.
        let p = written[20] as u32;
        for part in 0..3 {
            let at = 76 + 16 * layoutd_targets::seglog::MapSketch::cell_of(p, part);
            let mut field = |k: usize, f: &dyn Fn(u32) -> u32| {
                let v = u32::from_le_bytes(payload[at + 4 * k..at + 4 * k + 4].try_into().expect("4"));
                payload[at + 4 * k..at + 4 * k + 4].copy_from_slice(&f(v).to_le_bytes());
            };
            field(0, &|v| v.wrapping_add(1));
            field(1, &|v| v ^ p);
            field(2, &|v| v ^ layoutd_targets::seglog::MapSketch::check(p));
        }
    }
    dev.write_at(&codec.encode(203, &payload).expect("fits"), 4096).expect("write");
    let pages_max = 41 * (written[1] - written[0] + 1);
    let copies = map_page_copies_from(&dev, dev_bytes - 4 * pages_max * 4096);
    for p in [written[1], written[9]] {
        let at = copies.iter().find(|c| c.0 == p).expect("page").2;
        dev.write_at(&[0u8; 4096], at).expect("damage");
    }
    let stack = stack_from_toml(&cfg, dev_bytes, OpenMode::Open { clean: false, accept_loss: false });
    let mut h = Harness::new(stack, dev.clone() as Arc<dyn BlockDevice>, ZeroLatency::default(), 1);
    let e = h.bring_up().err().expect("refused");
    assert!(
        e.contains("3 page(s) written before checkpoint 203 have no readable copy")
            && !e.contains("told from the pages never written"),
        "forged whole page {forge_whole}: {e}"
    );
}

/// The other side of the case above: pages lost beside pages whose
/// current copy is damaged (their older copy stale) do not explain the
/// digests as the lost pages alone would, so with `--accept-loss` the
/// stale pages are unmapped too: their blocks read zeroes, never version
/// 1. The digests single the stale pages out beside the lost ones, so
/// the two whole pages written once keep their data (before session 30
/// they were unmapped as well).
#[test]
fn lost_map_pages_beside_stale_ones_never_let_the_stale_mappings_through() {
    for (stale, lost) in [(1, 1), (1, 2), (2, 1)] {
        let case = format!("{stale} stale, {lost} lost");
        let (image, dev_bytes, cfg) = twice_written_image(stale, lost + 2);
        let copies = map_page_copies(&image);
        for p in 0..stale {
            damaged(&image, copies.iter().find(|c| c.0 == p && c.1 == 3).expect("generation 3").2, false);
        }
        for p in stale..stale + lost {
            damaged(&image, copies.iter().find(|c| c.0 == p).expect("page").2, false);
        }
        let stack = stack_from_toml(&cfg, dev_bytes, OpenMode::Open { clean: false, accept_loss: true });
        let mut h = Harness::new(stack, Arc::new(image) as Arc<dyn BlockDevice>, ZeroLatency::default(), 1);
        h.bring_up().unwrap_or_else(|e| panic!("{case}: the loss accepted: {e}"));
        assert_eq!(
            counter(&*h.stack, "lost_map_pages_count"),
            stale + lost,
            "{case}: the lost and the stale"
        );
        let loss = h.stack.status().config.into_iter().find(|c| c.0 == "accepted_loss").expect("reported");
        assert!(loss.1.contains(&format!("the digests clear the 2 other page(s)")), "{case}: {loss:?}");
        for p in 0..stale + lost + 2 {
            let n = if p < stale { 40 } else { 8 };
            for b in p * 1014..p * 1014 + n {
                let want = if p < stale + lost { vec![0u8; 4096] } else { block_bytes(1, b) };
                assert!(h.read(b * 4096, 4096).data.expect("data") == want, "{case}: page {p} block {b}");
            }
        }
    }
}

/// Format writes the checkpoint area only (both checkpoint copies and
/// both flush marks, 512 bytes each, within the first 8 KiB), then a
/// flush: no map page, no segment. Opened, the volume reads zeroes.
#[test]
fn format_writes_the_checkpoint_area_only() {
    let rec = Arc::new(Recorder::new(random_image(DEVICE_BYTES, 3)));
    let stack = stack_from_toml(&cfg("greedy", ""), DEVICE_BYTES, OpenMode::format(1));
    let mut h = Harness::new(stack, rec.clone() as Arc<dyn BlockDevice>, ZeroLatency::default(), 1);
    bring_up(&mut h);
    let writes: Vec<(u64, usize)> = rec
        .log()
        .entries()
        .iter()
        .filter_map(|e| match &e.op {
            LogOp::Write { offset_bytes, data } => Some((*offset_bytes, data.len())),
            _ => None,
        })
        .collect();
    assert_eq!(writes.len(), 4, "{writes:?}");
    assert!(writes.iter().all(|&(o, n)| n == 512 && o + 512 <= 8192), "{writes:?}");
    assert_eq!(rec.log().entries().last().map(|e| e.op.clone()), Some(LogOp::Flush));
    drop(h);
    let stack =
        stack_from_toml(&cfg("greedy", ""), DEVICE_BYTES, OpenMode::Open { clean: true, accept_loss: false });
    let mut h = Harness::new(stack, rec as Arc<dyn BlockDevice>, ZeroLatency::default(), 1);
    bring_up(&mut h);
    let size = h.stack.size_bytes();
    let data = h.read(0, size as u32).data.expect("data");
    assert!(data.iter().all(|&b| b == 0), "a fresh format reads zeroes over random bytes");
}

/// Lower bytes written and the segments written into by `syncs` single
/// block writes each followed by a flush, on a fresh log.
fn sync_write_footprint(partial: bool, syncs: u64) -> (Vec<u64>, Vec<u64>, u64) {
    let cfg = cfg("greedy", &format!("resequence = false\npartial_segments = {partial}\n"));
    let rec = Arc::new(Recorder::new(MemDevice::new(DEVICE_BYTES)));
    let stack = stack_from_toml(&cfg, DEVICE_BYTES, OpenMode::format(1));
    let mut h = Harness::new(stack, rec.clone() as Arc<dyn BlockDevice>, ZeroLatency::default(), 1);
    bring_up(&mut h);
    let stride = 512 + 8 * 4096;
    let (mut bytes, mut segments) = (Vec::new(), Vec::new());
    for b in 0..syncs {
        let from = rec.log().len();
        assert_eq!(h.write(b * 4096, block_bytes(1, b)).result, Ok(()));
        assert_eq!(h.flush().result, Ok(()));
        let mut n = 0;
        for e in &rec.log().entries()[from..] {
            if let LogOp::Write { offset_bytes, data } = &e.op {
                n += data.len() as u64;
                if data.chunks(512).any(|c| c == tagged(1, b * 8)) {
                    segments.push((offset_bytes - 8192) / stride);
                }
            }
        }
        bytes.push(n);
    }
    (bytes, segments, counter(&*h.stack, "partial_writes_count"))
}

#[test]
fn a_flush_writes_the_new_part_and_the_next_write_goes_on_in_the_same_segment() {
    // 8-slot segments: 512 bytes of header, 32 KiB of slots.
    let (bytes, segments, parts) = sync_write_footprint(true, 3);
    // The first flush: header, the block's slot, the flush mark; each later
    // one: the part's summary slot and the block's slot (no mark: the
    // segment's seq was already marked durable).
    assert_eq!(bytes, vec![512 + 4096 + 512, 2 * 4096, 2 * 4096], "lower bytes per synchronous write");
    assert_eq!(segments, vec![0, 0, 0], "the blocks' segments");
    assert_eq!(parts, 3);
    // Negative control: with partial writes off each flush seals, and the
    // next write opens another segment.
    let (bytes, segments, parts) = sync_write_footprint(false, 3);
    assert_eq!(parts, 0);
    assert_eq!(segments.len(), 3);
    assert!(segments[0] != segments[1] && segments[1] != segments[2], "{segments:?} ({bytes:?})");
}

/// A fresh log after four single-block writes, each flushed (one segment:
/// the header's part, then three parts with their summaries in slots 1, 3
/// and 5); the image and the config.
fn four_parts() -> (MemDevice, String) {
    let cfg = cfg("greedy", "resequence = false\n");
    let (dev, mut h) = formatted(&cfg);
    for b in 0..4u64 {
        assert_eq!(h.write(b * 4096, block_bytes(1, b)).result, Ok(()));
        assert_eq!(h.flush().result, Ok(()));
    }
    assert_eq!(counter(&*h.stack, "partial_writes_count"), 3, "{}", h.stack.status());
    let image = MemDevice::new(DEVICE_BYTES);
    dev.copy_to(&image).expect("copy");
    (image, cfg)
}

/// Which of blocks 0..4 read version 1 after reopening `image` (the
/// others must read zeroes: never written).
fn blocks_recovered(image: MemDevice, cfg: &str) -> Vec<u64> {
    let stack = stack_from_toml(cfg, DEVICE_BYTES, OpenMode::Open { clean: false, accept_loss: false });
    let mut h = Harness::new(stack, Arc::new(image) as Arc<dyn BlockDevice>, ZeroLatency::default(), 1);
    h.bring_up().expect("opens");
    let mut kept = Vec::new();
    for b in 0..4u64 {
        let data = h.read(b * 4096, 4096).data.expect("data");
        if data == block_bytes(1, b) {
            kept.push(b);
        } else {
            assert!(data.iter().all(|&x| x == 0), "block {b} reads neither its bytes nor zeroes");
        }
    }
    kept
}

#[test]
fn a_torn_partial_summary_mid_chain_ends_recovery_there_keeping_the_parts_before() {
    let (image, cfg) = four_parts();
    let slot = |s: u64| 8192 + 512 + s * 4096;
    // The segment's summaries: the header, then slots 1, 3 and 5 (each
    // part's summary is the slot its predecessor named, before its data).
    let summaries = summary_offsets(&image, true);
    assert_eq!(summaries.iter().map(|s| s.1).collect::<Vec<_>>(), vec![8192, slot(1), slot(3), slot(5)]);
    assert_eq!(blocks_recovered(image, &cfg), vec![0, 1, 2, 3], "an intact chain recovers every part");
    // Tear the third part's summary (slot 3): the first two parts stay,
    // the walk stops there though the parts after it are intact.
    let (image, cfg) = four_parts();
    image.write_at(&[0xAB; 16], slot(3) + 100).expect("damage");
    assert_eq!(blocks_recovered(image, &cfg), vec![0, 1]);
    // A torn data slot of a part: its payload crc fails, the same cut.
    let (image, cfg) = four_parts();
    image.write_at(&[0xAB; 16], slot(4) + 100).expect("damage");
    assert_eq!(blocks_recovered(image, &cfg), vec![0, 1]);
}

/// The blocks each segment header written from log entry `from` on lists
/// (Slot entries, in entry order).
fn summaries_written(entries: &[layoutd_disk::LogEntry]) -> Vec<Vec<u64>> {
    let mut out = Vec::new();
    for e in entries {
        let LogOp::Write { data, .. } = &e.op else { continue };
        if data.len() < 64 || &data[0..8] != b"LDSEGHD1" {
            continue;
        }
        // Header version 3: entry_count u16 at payload offset 22.
        let entry_count = u16::from_le_bytes(data[54..56].try_into().expect("2")) as usize;
        let blocks = (0..entry_count)
            .filter_map(|i| {
                let at = 64 + 16 * i;
                let kind = u16::from_le_bytes(data[at + 12..at + 14].try_into().expect("2"));
                (kind == 1).then(|| u64::from_le_bytes(data[at..at + 8].try_into().expect("8")) / 8)
            })
            .collect();
        out.push(blocks);
    }
    out
}

/// Random rewrites scatter blocks over segments; trims make holes; then
/// cleaning passes. Returns the summaries the cleaner wrote.
fn cleaner_summaries(sorted: bool) -> Vec<Vec<u64>> {
    let cfg = cfg("greedy", &format!("clean_sorted = {sorted}\n"))
        .replace("checkpoint_segments = 6", "checkpoint_segments = 1000");
    let rec = Arc::new(Recorder::new(MemDevice::new(DEVICE_BYTES)));
    let stack = stack_from_toml(&cfg, DEVICE_BYTES, OpenMode::format(1));
    let mut h = Harness::new(stack, rec.clone() as Arc<dyn BlockDevice>, ZeroLatency::default(), 1);
    bring_up(&mut h);
    let volume = counter(&*h.stack, "volume_blocks_count") * 9 / 10;
    let mut order: Vec<u64> = (0..volume).collect();
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    for i in (1..order.len()).rev() {
        order.swap(i, rng.gen_range(0..=i));
    }
    for &b in &order {
        assert_eq!(h.write(b * 4096, block_bytes(1, b)).result, Ok(()));
    }
    for b in (0..volume).step_by(3) {
        let trim = layoutd_core::Request::new(layoutd_core::ReqId(0), Op::Trim, b * 4096, 4096);
        assert_eq!(h.call(trim).result, Ok(()));
    }
    h.stack.message(h.now, "checkpoint").expect("checkpoint");
    assert_eq!(h.flush().result, Ok(()));
    let from = rec.log().len();
    for _ in 0..3 {
        h.stack.message(h.now, "clean").expect("clean");
        assert_eq!(h.flush().result, Ok(()));
    }
    assert!(counter(&*h.stack, "segments_cleaned_count") >= 4);
    summaries_written(&rec.log().entries()[from..])
}

#[test]
fn the_cleaner_writes_the_blocks_it_moves_in_logical_order() {
    let sorted = cleaner_summaries(true);
    assert!(sorted.iter().map(|s| s.len()).sum::<usize>() >= 8, "{sorted:?}");
    for s in &sorted {
        assert!(s.windows(2).all(|w| w[0] < w[1]), "a cleaner summary out of order: {s:?}");
    }
    // Negative control: in victim order the scattered blocks stay scattered.
    let unsorted = cleaner_summaries(false);
    assert!(unsorted.iter().any(|s| s.windows(2).any(|w| w[0] > w[1])), "{unsorted:?}");
}

/// A lower read error fails the request that needed it and nothing else;
/// a write that fails twice is sent again and the flush succeeds; one
/// that keeps failing stops the target (acknowledged data would be left
/// only in RAM), naming the cause.
#[test]
fn a_lower_read_error_fails_only_its_request_and_failed_writes_are_retried() {
    use layoutd_core::IoError;
    let stack = stack_from_toml(&cfg("greedy", ""), DEVICE_BYTES, OpenMode::format(1));
    let mut h = Harness::new(stack, Arc::new(MemDevice::new(DEVICE_BYTES)), ZeroLatency::default(), 1);
    bring_up(&mut h);
    for b in 0..24u64 {
        assert_eq!(h.write(b * 4096, block_bytes(1, b)).result, Ok(()));
    }
    assert_eq!(h.flush().result, Ok(()));
    h.fail_lower_reads = true;
    assert_eq!(h.read(0, 4096).result, Err(IoError::Io), "a read of a slot on disk");
    assert_eq!(h.write(4096 + 512, vec![7; 512]).result, Err(IoError::Io), "a partial write's old bytes");
    h.fail_lower_reads = false;
    assert_eq!(counter(&*h.stack, "lower_read_errors_count"), 2);
    for b in 0..24u64 {
        assert_eq!(h.read(b * 4096, 4096).data.map(|d| d.to_vec()), Some(block_bytes(1, b)), "block {b}");
    }
    // Two failures, then the third attempt of the segment write succeeds.
    h.fail_lower_writes = true;
    h.lower_failures_left = Some(2);
    assert_eq!(h.write(0, block_bytes(2, 0)).result, Ok(()));
    let before = h.now;
    assert_eq!(h.flush().result, Ok(()));
    assert_eq!(counter(&*h.stack, "lower_retries_count"), 2);
    // Each retry waited its backoff (10 ms, then 20 ms) in virtual time.
    let waited_ns = h.now.ns_since(before);
    assert!(waited_ns >= 30_000_000, "the retries waited {waited_ns} ns");
    assert_eq!(h.read(0, 4096).data.map(|d| d.to_vec()), Some(block_bytes(2, 0)));
    // A write that keeps failing: the flush fails and the target stops.
    h.lower_failures_left = None;
    assert_eq!(h.write(4096, block_bytes(3, 1)).result, Ok(()), "absorbed into RAM");
    assert_eq!(h.flush().result, Err(IoError::Io));
    let st = h.stack.status();
    let error = st.config.iter().find(|(k, _)| k == "error").map(|(_, v)| v.clone()).unwrap_or_default();
    assert!(error.contains("write of segment") && error.contains("3 times"), "{error}");
}

/// Blocks 0..n in a random order (seeded), and the generator for more.
fn shuffled(n: u64, seed: u64) -> (Vec<u64>, ChaCha8Rng) {
    let mut order: Vec<u64> = (0..n).collect();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    for i in (1..order.len()).rev() {
        order.swap(i, rng.gen_range(0..=i));
    }
    (order, rng)
}

/// Writes every block of 90% of the volume in a random order (so each
/// group of 8 blocks, one segment's worth, lies in up to 8 segments),
/// flushes, lets the volume idle for a second, then reads each group
/// whole. Returns the lower requests each group's read took, and the
/// harness.
fn group_reads_after_idle(resequence: bool) -> (Vec<u64>, Harness<ZeroLatency>) {
    let cfg = cfg("greedy", &format!("resequence = {resequence}\nresequence_idle_ms = 10\n"));
    let stack = stack_from_toml(&cfg, DEVICE_BYTES, OpenMode::format(1));
    let mut h = Harness::new(stack, Arc::new(MemDevice::new(DEVICE_BYTES)), ZeroLatency::default(), 1);
    bring_up(&mut h);
    let groups = counter(&*h.stack, "volume_blocks_count") * 9 / 10 / 8;
    let (order, _) = shuffled(groups * 8, 9);
    for &b in &order {
        assert_eq!(h.write(b * 4096, block_bytes(1, b)).result, Ok(()));
    }
    assert_eq!(h.flush().result, Ok(()));
    // Requests kept coming: nothing was re-sequenced yet.
    assert_eq!(counter(&*h.stack, "resequence_passes_count"), 0);
    h.run_until(h.now.add_ms(1000));
    h.settle();
    let mut reads = Vec::new();
    for g in 0..groups {
        let before = h.stats.lower_count;
        let got = h.read(g * 8 * 4096, 8 * 4096).data.expect("data");
        let want: Vec<u8> = (g * 8..g * 8 + 8).flat_map(|b| block_bytes(1, b)).collect();
        assert_eq!(got.to_vec(), want, "group {g}");
        reads.push(h.stats.lower_count - before);
    }
    (reads, h)
}

#[test]
fn idle_resequencing_lays_scattered_groups_out_in_logical_order() {
    let (reads, h) = group_reads_after_idle(true);
    let status = h.stack.status().to_string();
    assert!(counter(&*h.stack, "resequence_passes_count") > 0, "{status}");
    assert_eq!(counter(&*h.stack, "groups_to_check_count"), 0, "{status}");
    // Segment writes share their buffer's bytes, and it is reused once they
    // are done. Not always: the harness holds a lower request until its
    // completion is handled, and when that opens the next segment with no
    // other buffer free, a new one is allocated.
    let written = counter(&*h.stack, "segments_written_count");
    assert!(written > 50, "{status}");
    assert!(counter(&*h.stack, "segment_buffers_allocated_count") * 4 < written, "{status}");
    // A group is at most two runs of slots (it may cross a segment).
    assert!(reads.iter().all(|&n| n <= 2), "{reads:?} {status}");
    // Negative control: without it, the groups stay scattered.
    let (scattered, _) = group_reads_after_idle(false);
    assert!(scattered.iter().sum::<u64>() > 3 * reads.iter().sum::<u64>(), "{scattered:?} against {reads:?}");
}

#[test]
fn a_segment_open_across_partial_writes_is_never_a_cleaning_victim() {
    // Segment 0 holds two live blocks of eight after two partial writes:
    // greedy's best victim, were it not open.
    let (_dev, mut h) = formatted(&cfg("greedy", "resequence = false\n"));
    for b in 0..2u64 {
        assert_eq!(h.write(b * 4096, block_bytes(1, b)).result, Ok(()));
        assert_eq!(h.flush().result, Ok(()));
    }
    h.stack.message(h.now, "clean").expect("clean");
    assert_eq!(h.flush().result, Ok(()));
    assert_eq!(h.write(2 * 4096, block_bytes(1, 2)).result, Ok(()));
    assert_eq!(h.flush().result, Ok(()));
    let status = h.stack.status().to_string();
    assert_eq!(counter(&*h.stack, "cleaning_passes_count"), 0, "{status}");
    assert_eq!(counter(&*h.stack, "segments_written_count"), 0, "still one open segment: {status}");
    assert_eq!(counter(&*h.stack, "partial_writes_count"), 3, "{status}");
    for b in 0..3u64 {
        assert_eq!(h.read(b * 4096, 4096).data.expect("data"), block_bytes(1, b));
    }
}

/// A memory device that remembers the offset and length of every read.
struct ReadLog {
    inner: MemDevice,
    reads: std::sync::Mutex<Vec<(u64, u64)>>,
}

impl BlockDevice for ReadLog {
    fn size_bytes(&self) -> u64 {
        self.inner.size_bytes()
    }
    fn read_at(&self, buf: &mut [u8], offset_bytes: u64) -> std::io::Result<()> {
        self.reads.lock().expect("lock").push((offset_bytes, buf.len() as u64));
        self.inner.read_at(buf, offset_bytes)
    }
    fn write_at(&self, buf: &[u8], offset_bytes: u64) -> std::io::Result<()> {
        self.inner.write_at(buf, offset_bytes)
    }
    fn flush(&self) -> std::io::Result<()> {
        self.inner.flush()
    }
    fn trim(&self, offset_bytes: u64, length_bytes: u64) -> std::io::Result<()> {
        self.inner.trim(offset_bytes, length_bytes)
    }
    fn write_zeroes(&self, offset_bytes: u64, length_bytes: u64) -> std::io::Result<()> {
        self.inner.write_zeroes(offset_bytes, length_bytes)
    }
}

/// Writes every block of 90% of the volume in a random order, updates a
/// third of them at random, flushes, idles for a second, then reads the
/// written blocks in order, one group (8 blocks) a request. Returns how
/// many lower reads of that sweep did not start where the previous one
/// ended (seeks), and the harness.
fn sweep_seeks_after_idle(sliding: bool, read_through: bool) -> (usize, Harness<ZeroLatency>) {
    let extra = format!(
        "resequence_idle_ms = 10\nresequence_sliding = {sliding}\nread_through_headers = {read_through}\n"
    );
    let cfg = cfg("adaptive", &extra).replace("over_provision_pct = 20", "over_provision_pct = 30");
    let stack = stack_from_toml(&cfg, DEVICE_BYTES, OpenMode::format(1));
    let dev = Arc::new(ReadLog { inner: MemDevice::new(DEVICE_BYTES), reads: Default::default() });
    let mut h = Harness::new(stack, dev.clone() as Arc<dyn BlockDevice>, ZeroLatency::default(), 1);
    bring_up(&mut h);
    let groups = counter(&*h.stack, "volume_blocks_count") * 9 / 10 / 8;
    let (order, mut rng) = shuffled(groups * 8, 5);
    let updates: Vec<u64> = (0..groups * 8 / 3).map(|_| rng.gen_range(0..groups * 8)).collect();
    for &b in order.iter().chain(&updates) {
        assert_eq!(h.write(b * 4096, block_bytes(1, b)).result, Ok(()));
    }
    assert_eq!(h.flush().result, Ok(()));
    h.run_until(h.now.add_ms(1000));
    h.settle();
    dev.reads.lock().expect("lock").clear();
    for g in 0..groups {
        let got = h.read(g * 8 * 4096, 8 * 4096).data.expect("data");
        let want: Vec<u8> = (g * 8..g * 8 + 8).flat_map(|b| block_bytes(1, b)).collect();
        assert_eq!(got.to_vec(), want, "group {g}");
    }
    let reads = dev.reads.lock().expect("lock").clone();
    let seeks = reads.windows(2).filter(|w| w[1].0 != w[0].0 + w[0].1).count();
    (seeks, h)
}

#[test]
fn sliding_compaction_lays_each_group_in_its_home_segment_so_a_sweep_reads_without_a_jump() {
    let (seeks, h) = sweep_seeks_after_idle(true, true);
    let status = h.stack.status().to_string();
    eprintln!("sliding: {seeks} seeks; {status}");
    assert!(counter(&*h.stack, "compact_evictions_count") > 0, "{status}");
    let groups = counter(&*h.stack, "compact_groups_home_count");
    assert!(groups > 10, "{status}");
    assert_eq!(counter(&*h.stack, "groups_to_check_count"), 0, "{status}");
    // Each read of a group's last slot went on through the next header.
    assert!(counter(&*h.stack, "read_throughs_count") >= groups, "{status}");
    assert_eq!(seeks, 0, "{status}");
    // Negative controls: re-sequencing without sliding leaves the groups
    // in segments that do not follow each other; without reading through,
    // every next group starts a header further on.
    let (scattered, h) = sweep_seeks_after_idle(false, true);
    assert!(counter(&*h.stack, "resequence_passes_count") > 0);
    assert!(scattered > 5, "{scattered} seeks without sliding compaction");
    let (skips, _) = sweep_seeks_after_idle(true, false);
    assert!(skips as u64 >= groups - 1, "{skips} seeks without reading through headers, {groups} groups");
}

/// Writes half the volume's blocks in a random order (so each group of 8
/// blocks lies in up to 8 segments), flushes, idles for a second with
/// packing re-sequencing taking up to `batch` groups a pass, then reads
/// each group whole (checking its bytes). Returns the lower reads of the
/// idle second, the most lower requests one group's read took, and the
/// harness. (The order the reads were sent in is not seen here: the
/// harness completes requests in flight together in its own order.)
fn batched_resequencing(batch: u32) -> (usize, u64, Harness<ZeroLatency>) {
    let extra =
        format!("resequence_idle_ms = 10\nresequence_sliding = false\nresequence_batch_groups = {batch}\n");
    let cfg = cfg("greedy", &extra).replace("over_provision_pct = 20", "over_provision_pct = 30");
    let stack = stack_from_toml(&cfg, DEVICE_BYTES, OpenMode::format(1));
    let dev = Arc::new(ReadLog { inner: MemDevice::new(DEVICE_BYTES), reads: Default::default() });
    let mut h = Harness::new(stack, dev.clone() as Arc<dyn BlockDevice>, ZeroLatency::default(), 1);
    bring_up(&mut h);
    let groups = counter(&*h.stack, "volume_blocks_count") / 2 / 8;
    let (order, _) = shuffled(groups * 8, 21);
    for &b in &order {
        assert_eq!(h.write(b * 4096, block_bytes(1, b)).result, Ok(()));
    }
    assert_eq!(h.flush().result, Ok(()));
    dev.reads.lock().expect("lock").clear();
    h.run_until(h.now.add_ms(1000));
    h.settle();
    let idle = dev.reads.lock().expect("lock").len();
    let mut most = 0;
    for g in 0..groups {
        let before = h.stats.lower_count;
        let got = h.read(g * 8 * 4096, 8 * 4096).data.expect("data");
        let want: Vec<u8> = (g * 8..g * 8 + 8).flat_map(|b| block_bytes(1, b)).collect();
        assert_eq!(got.to_vec(), want, "group {g}");
        most = most.max(h.stats.lower_count - before);
    }
    (idle, most, h)
}

#[test]
fn batched_resequencing_takes_several_groups_a_pass_with_fewer_reads() {
    let (reads, most, h) = batched_resequencing(8);
    let status = h.stack.status().to_string();
    eprintln!("batch 8: {reads} reads, {most} requests a group; {status}");
    let passes = counter(&*h.stack, "resequence_passes_count");
    assert!(passes > 0, "{status}");
    assert_eq!(counter(&*h.stack, "groups_to_check_count"), 0, "{status}");
    // Laid out in order: a group is at most two runs of slots.
    assert!(most <= 2, "{most} {status}");
    // Negative control: a group a pass, a read per run of adjacent slots.
    let (one_reads, one_most, one) = batched_resequencing(1);
    let one_passes = counter(&*one.stack, "resequence_passes_count");
    eprintln!("batch 1: {one_reads} reads, {one_passes} passes");
    assert!(one_most <= 2);
    // The same blocks moved, in a quarter of the passes or fewer, with
    // under half the reads (slots of several groups in one segment are
    // read together, through gaps of dead slots).
    assert_eq!(counter(&*h.stack, "slots_resequence_count"), counter(&*one.stack, "slots_resequence_count"));
    assert!(passes * 4 <= one_passes, "{passes} passes against {one_passes}");
    assert!(reads * 2 < one_reads, "{reads} lower reads against {one_reads}");
}

/// The oracle check, then the crash check (40 random cuts), of `cfg` over
/// `fill_pct` of the volume filled in order and 300 random updates
/// (`seed`), with an idle gap every `idle_every` ops (0: none). Returns the
/// oracle's harness and the crash check's cut points.
fn oracle_then_crash(
    cfg: &str,
    fill_pct: u64,
    seed: u64,
    idle_every: usize,
) -> (Harness<ZeroLatency>, usize) {
    let make = |mode| stack_from_toml(cfg, DEVICE_BYTES, mode);
    let volume_bytes = stack_from_toml(cfg, DEVICE_BYTES, OpenMode::format(1)).size_bytes();
    let ops = fill_then_update(volume_bytes, fill_pct, 300, seed);
    let h = oracle_check_idle_with(&make, DEVICE_BYTES, seed, &ops, 2, idle_every);
    let cuts = crash_check_idle_with(&make, DEVICE_BYTES, seed, &ops, 2, 40, idle_every);
    (h, cuts)
}

/// Batched re-sequencing (packing, several groups a pass) in the idle
/// gaps of the crash check: flushed data survives a crash at any point.
#[test]
fn flushed_data_survives_a_crash_at_any_point_of_batched_resequencing() {
    for policy in ["greedy", "ssr", "adaptive"] {
        let cfg =
            cfg(policy, "resequence_sliding = false\nresequence_batch_groups = 4\nresequence_idle_ms = 0\n")
                .replace("over_provision_pct = 20", "over_provision_pct = 30");
        let (h, cuts) = oracle_then_crash(&cfg, 60, 17, 5);
        let status = h.stack.status().to_string();
        eprintln!("{policy}, batched: {status}");
        let passes = counter(&*h.stack, "resequence_passes_count");
        assert!(passes > 5, "{policy}: {status}");
        // More than one group a pass on average (a group holds at most 8).
        assert!(counter(&*h.stack, "slots_resequence_count") > passes * 8, "{policy}: {status}");
        eprintln!("{policy}, batched: {cuts} cut points");
        assert!(cuts > 40, "{policy}: {cuts}");
    }
}

/// Writes blocks `from..to` in a random order, flushes and idles for a
/// second; returns the groups sliding compaction moved home in that idle
/// period.
fn groups_home_after_idle(h: &mut Harness<ZeroLatency>, from: u64, to: u64, seed: u64) -> u64 {
    let before = counter(&*h.stack, "compact_groups_home_count");
    let passes = counter(&*h.stack, "resequence_passes_count");
    let (order, _) = shuffled(to - from, seed);
    for b in order.into_iter().map(|i| from + i) {
        assert_eq!(h.write(b * 4096, block_bytes(1, b)).result, Ok(()));
    }
    assert_eq!(h.flush().result, Ok(()));
    h.run_until(h.now.add_ms(1000));
    h.settle();
    let status = h.stack.status().to_string();
    assert!(counter(&*h.stack, "resequence_passes_count") > passes, "re-sequencing ran: {status}");
    assert_eq!(counter(&*h.stack, "groups_to_check_count"), 0, "{status}");
    for b in from..to {
        assert_eq!(h.read(b * 4096, 4096).data.expect("data"), block_bytes(1, b), "block {b}");
    }
    counter(&*h.stack, "compact_groups_home_count") - before
}

/// The volume filled at random to 30%, idle, then on to 90%, idle (with
/// `extra` keys): the groups moved home in each idle period.
fn groups_home_at_30_then_90_pct(extra: &str) -> (u64, u64) {
    let cfg = cfg("adaptive", &format!("resequence_idle_ms = 10\n{extra}"))
        .replace("over_provision_pct = 20", "over_provision_pct = 30");
    let (_dev, mut h) = formatted(&cfg);
    let blocks = counter(&*h.stack, "volume_blocks_count");
    let (low, high) = (blocks * 30 / 100, blocks * 90 / 100);
    let at_low = groups_home_after_idle(&mut h, 0, low, 21);
    assert_eq!(counter(&*h.stack, "utilization_pct"), low * 100 / blocks);
    let at_high = groups_home_after_idle(&mut h, low, high, 22);
    assert_eq!(counter(&*h.stack, "utilization_pct"), high * 100 / blocks);
    (at_low, at_high)
}

#[test]
fn auto_sliding_packs_below_the_utilisation_threshold_and_slides_above() {
    // The default (`resequence_sliding = "auto"`, from 55%): packing at
    // 30%, sliding once the same volume is 90% full.
    let (low, high) = groups_home_at_30_then_90_pct("");
    eprintln!("auto: {low} groups home at 30%, {high} at 90%");
    assert_eq!(low, 0, "packed at 30%");
    assert!(high > 10, "slid at 90%: {high} groups home");
    // Negative controls: sliding always moves groups home at 30% too; a
    // threshold above 90% keeps packing at 90%.
    let (always, _) = groups_home_at_30_then_90_pct("resequence_sliding = true\n");
    assert!(always > 5, "{always} groups home at 30% with sliding on");
    let (_, above) = groups_home_at_30_then_90_pct("sliding_utilisation_min_percent = 95\n");
    assert_eq!(above, 0, "packed at 90% below a 95% threshold");
}

/// Fills 90% of the volume and updates it at random with idle gaps (every
/// 5th op), so sliding compaction (evictions from homes, checkpoints that
/// redirect the chain, groups moved home) runs between the requests and
/// the crash cuts fall inside it. With `"auto"`, the idle gaps of the
/// fill pack until the volume reaches the threshold and slide after.
#[test]
fn flushed_data_survives_a_crash_at_any_point_of_sliding_compaction() {
    for (policy, sliding) in
        [("greedy", "true"), ("ssr", "true"), ("adaptive", "true"), ("adaptive", "\"auto\"")]
    {
        let cfg = cfg(policy, &format!("resequence_sliding = {sliding}\nresequence_idle_ms = 0\n"))
            .replace("over_provision_pct = 20", "over_provision_pct = 30")
            .replace("free_segments_target = 3", "free_segments_target = 6");
        let (h, cuts) = oracle_then_crash(&cfg, 90, 13, 5);
        let status = h.stack.status().to_string();
        eprintln!("{policy}, sliding {sliding}: {status}");
        assert!(counter(&*h.stack, "compact_evictions_count") > 5, "{policy}: {status}");
        assert!(counter(&*h.stack, "compact_groups_home_count") > 5, "{policy}: {status}");
        eprintln!("{policy}, sliding {sliding}: {cuts} cut points");
        assert!(cuts > 40, "{policy}: {cuts}");
    }
}

/// A busy client (0.1 ms between requests) on a volume 60% full, updated
/// at random (so adaptive, with a free-segment target of 12 of about 30
/// segments, wants idle cleaning): the background passes run before the idle period
/// and after it. Returns (passes while requests kept coming, after a second
/// without requests).
fn idle_cleaning_passes(idle_ms: u64) -> (u64, u64) {
    let extra = format!("resequence = false\nresequence_idle_ms = {idle_ms}\n");
    let cfg = cfg("adaptive", &extra).replace("free_segments_target = 3", "free_segments_target = 12");
    let (_dev, mut h) = formatted(&cfg);
    let blocks = counter(&*h.stack, "volume_blocks_count") * 6 / 10;
    let (order, mut rng) = shuffled(blocks, 11);
    let updates: Vec<u64> = (0..blocks).map(|_| rng.gen_range(0..blocks)).collect();
    for &b in order.iter().chain(&updates) {
        assert_eq!(h.write(b * 4096, block_bytes(2, b)).result, Ok(()));
        // A client's think time: 0.1 ms between requests.
        h.run_until(h.now.add_ns(100_000));
    }
    let busy = counter(&*h.stack, "background_cleanings_count");
    h.run_until(h.now.add_ms(1000));
    h.settle();
    for b in 0..blocks {
        assert_eq!(h.read(b * 4096, 4096).data.expect("data"), block_bytes(2, b), "block {b}");
    }
    let status = h.stack.status().to_string();
    eprintln!("idle_ms {idle_ms}: {busy} passes while busy; {status}");
    (busy, counter(&*h.stack, "background_cleanings_count") - busy)
}

#[test]
fn idle_cleaning_waits_for_idle_time_not_for_the_gaps_between_requests() {
    let (busy, idle) = idle_cleaning_passes(100);
    assert_eq!(busy, 0, "no idle cleaning while requests keep coming");
    assert!(idle > 0, "idle cleaning after a second without requests");
    // Negative control: with no idle wait, it runs between the requests.
    let (gaps, _) = idle_cleaning_passes(0);
    assert!(gaps > 0, "{gaps} passes between requests without the idle wait");
}

/// The map with extents (`map_extents`, the default): a sequential fill
/// holds runs only, in less RAM than the flat map; random updates turn the
/// group flat; recovery (the last checkpoint's map pages and the
/// roll-forward of the segments after it) gives the same block for every
/// address. The flat map (`map_extents = false`) keeps every group flat
/// and flushed data at every crash point.
#[test]
fn the_map_holds_sequential_data_in_runs_and_recovers_to_the_same_blocks() {
    let cfg = cfg("greedy", "resequence = false\n");
    let flat_cfg = cfg.clone() + "map_extents = false\n";
    let flat = stack_from_toml(&flat_cfg, DEVICE_BYTES, OpenMode::format(1));
    let flat_ram = counter(&*flat, "map_ram_bytes");
    assert_eq!(counter(&*flat, "map_flat_groups_count"), counter(&*flat, "map_groups_count"));
    let (dev, mut h) = formatted(&cfg);
    let blocks = counter(&*h.stack, "volume_blocks_count") * 9 / 10;
    for b in 0..blocks {
        assert_eq!(h.write(b * 4096, block_bytes(1, b)).result, Ok(()));
    }
    assert_eq!(h.flush().result, Ok(()));
    let status = h.stack.status().to_string();
    assert_eq!(counter(&*h.stack, "map_flat_groups_count"), 0, "{status}");
    assert!(counter(&*h.stack, "map_ram_bytes") < flat_ram / 4, "{flat_ram} flat: {status}");
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    for i in 0..blocks * 2 {
        let b = rng.gen_range(0..blocks);
        assert_eq!(h.write(b * 4096, block_bytes(2 + i, b)).result, Ok(()));
        if i % 7 == 0 {
            assert_eq!(h.flush().result, Ok(()));
        }
        if i == blocks {
            h.stack.message(h.now, "checkpoint").expect("checkpoint");
        }
    }
    assert_eq!(h.flush().result, Ok(()));
    h.drive_bounded(10_000);
    let status = h.stack.status().to_string();
    assert_eq!(counter(&*h.stack, "map_flat_groups_count"), 1, "{status}");
    assert!(counter(&*h.stack, "map_ram_bytes") <= flat_ram, "{status}");
    let before: Vec<Vec<u8>> =
        (0..blocks).map(|b| h.read(b * 4096, 4096).data.expect("data").to_vec()).collect();
    let live = counter(&*h.stack, "live_blocks_count");
    let image = MemDevice::new(DEVICE_BYTES);
    dev.copy_to(&image).expect("copy");
    let stack = stack_from_toml(&cfg, DEVICE_BYTES, OpenMode::Open { clean: false, accept_loss: false });
    let mut h = Harness::new(stack, Arc::new(image) as Arc<dyn BlockDevice>, ZeroLatency::default(), 1);
    h.bring_up().expect("recovers");
    assert!(counter(&*h.stack, "recovered_segments_count") > 0, "{}", h.stack.status());
    assert_eq!(counter(&*h.stack, "live_blocks_count"), live);
    for (b, want) in before.iter().enumerate() {
        assert_eq!(&h.read(b as u64 * 4096, 4096).data.expect("data")[..], &want[..], "block {b}");
    }

    let ops = fill_then_update(volume_bytes("greedy"), 90, 400, 3);
    let cuts = crash_check(&flat_cfg, DEVICE_BYTES, 3, &ops, 3, 30);
    assert!(cuts > 40, "{cuts}");
}

/// `status` (what `layoutd message --socket S status` sends a running
/// volume) answers every layer's status and counters when no layer takes it
/// itself: the log's counters are readable online, not only in `inspect`.
#[test]
fn status_message_answers_every_layers_counters() {
    let text = cfg("adaptive", "") + "[[layer]]\ntarget = \"trace\"\n";
    let dev = Arc::new(MemDevice::new(DEVICE_BYTES));
    let mut h = Harness::new(
        stack_from_toml(&text, DEVICE_BYTES, OpenMode::format(1)),
        dev as Arc<dyn BlockDevice>,
        ZeroLatency::default(),
        1,
    );
    bring_up(&mut h);
    assert!(h.write(0, vec![7u8; 8192]).result.is_ok());
    assert!(h.flush().result.is_ok());
    let reply = h.message("status").expect("status is answered");
    let lines: Vec<&str> = reply.lines().collect();
    assert_eq!(lines.len(), 2, "{reply}");
    assert!(lines[0].starts_with("1: log ") && lines[0].contains(" slots_user_count=2"), "{reply}");
    assert!(lines[1].starts_with("2: trace"), "{reply}");
    assert!(h.message("1:status").is_err(), "a layer-addressed status goes to that layer only");
}

/// A volume of two map pages (8 MiB device) written by this build then
/// moved back to `release`'s versions (if any): version 1 of blocks 0..40
/// (the first page) and of the [`SECOND_PAGE`] blocks, the second page's
/// and half the first's before its one checkpoint (so each page has a
/// copy, of version 1 before map ids), the rest after (the roll-forward).
/// The image and config.
fn legacy_two_page_image(release: Option<seglog_legacy::Release>) -> (MemDevice, String) {
    let cfg = cfg("greedy", "resequence = false\n")
        .replace("checkpoint_segments = 6", "checkpoint_segments = 1000");
    let dev = Arc::new(MemDevice::new(TWO_PAGE_DEVICE_BYTES));
    let stack = stack_from_toml(&cfg, TWO_PAGE_DEVICE_BYTES, OpenMode::format(1));
    let volume_blocks = stack.size_bytes() / 4096;
    assert!(SECOND_PAGE.end <= volume_blocks, "{volume_blocks} blocks: two map pages");
    let mut h = Harness::new(stack, dev.clone() as Arc<dyn BlockDevice>, ZeroLatency::default(), 1);
    bring_up(&mut h);
    for b in SECOND_PAGE.chain(0..40) {
        assert_eq!(h.write(b * 4096, block_bytes(1, b)).result, Ok(()));
        if b == 20 {
            h.stack.message(h.now, "checkpoint").expect("checkpoint");
        }
    }
    assert_eq!(h.flush().result, Ok(()));
    drop(h);
    let image = MemDevice::new(TWO_PAGE_DEVICE_BYTES);
    dev.copy_to(&image).expect("copy");
    if let Some(release) = release {
        // Both checkpoint copies; before map ids the two pages too.
        let least = match release {
            seglog_legacy::Release::BeforeMapDigest | seglog_legacy::Release::BeforeMapSketch => 2,
            _ => 4,
        };
        assert!(downgraded_to(&image, &[512, 4096], release) >= least, "{release:?}");
    }
    (image, cfg)
}

const TWO_PAGE_DEVICE_BYTES: u64 = 8 << 20;
/// Blocks of the second map page (a page holds 1014) written once, by the
/// release before, and never after.
const SECOND_PAGE: std::ops::Range<u64> = 1014..1022;

/// A log of a release before ([`legacy_two_page_image`]; `None`: of this
/// build) opened by this build and put through rounds of writes (round `r` writes version `r`
/// of the blocks `b % r != 0` below 40, some rounds a checkpoint or a
/// cleaning pass, each ending with a flush), recorded; cut at every write
/// of the open (its new flush mark, the checkpoint in the new version,
/// the first checkpoint, whose map pages of version 2 go beside those of
/// version 1: the second page's is not rewritten), every flush point and
/// `random_cuts` seeded random points (`seed` also reorders the writes in
/// flight), and at every write of a map page again with that write torn
/// (its first sector only, or garbage: a checkpoint torn while writing a
/// page, the copy that does not hold the page's current version, beside
/// a current copy older than the checkpoint recovered from for the
/// second page on this build's volume; the map's digest must not take it
/// for damage). At every cut the volume opens again and each block reads the
/// version of the last round flushed before the cut, or of a later round
/// submitted before it (the second page's blocks: version 1); never an
/// older version (an old map page or checkpoint taken over a newer one,
/// or a page of version 1 no longer taken as the volume's), never bytes
/// no write wrote. Returns the cut points checked.
fn legacy_crash_check(release: Option<seglog_legacy::Release>, seed: u64, random_cuts: usize) -> usize {
    use layoutd_disk::Tear;
    const ROUNDS: u64 = 12;
    let dev_bytes = TWO_PAGE_DEVICE_BYTES;
    let (image, cfg) = legacy_two_page_image(release);
    let base = MemDevice::new(dev_bytes);
    image.copy_to(&base).expect("copy");
    let rec = Arc::new(Recorder::new(image));
    let log = rec.log();
    let open_mode = OpenMode::Open { clean: false, accept_loss: false };
    let stack = stack_from_toml(&cfg, dev_bytes, open_mode);
    let mut h = Harness::new(stack, rec.clone() as Arc<dyn BlockDevice>, ZeroLatency::reordering(), seed);
    h.bring_up().expect("the old release's volume opens");
    h.settle();
    let opened = log.len();
    // Per round: where its writes start and where its flush ended.
    let (mut starts, mut flushed) = (vec![0; ROUNDS as usize + 1], vec![0; ROUNDS as usize + 1]);
    // On this build's volume the second page's blocks are written again
    // in rounds 5 and 10: the checkpoints of rounds 8 and 12 write that
    // page over a current copy older than the checkpoint before (a torn
    // write of it then looks like damage to its newer copy, but for the
    // digest). A volume of a release before keeps them as that release
    // wrote them.
    let again = release.is_none();
    let written = |r: u64, b: u64| {
        r == 1 || (b < 40 && b % r != 0) || (again && SECOND_PAGE.contains(&b) && r % 5 == 0)
    };
    for r in 2..=ROUNDS {
        starts[r as usize] = log.len();
        for b in (0..40).chain(SECOND_PAGE).filter(|&b| written(r, b)) {
            assert_eq!(h.write(b * 4096, block_bytes(r, b)).result, Ok(()));
        }
        match r % 4 {
            0 => drop(h.stack.message(h.now, "checkpoint").expect("checkpoint")),
            1 => drop(h.stack.message(h.now, "clean").expect("clean")),
            _ => {}
        }
        assert_eq!(h.flush().result, Ok(()));
        flushed[r as usize] = log.len();
    }
    h.settle();
    let len = log.len();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut cuts: Vec<usize> = (0..=opened).chain(log.flush_points()).collect();
    cuts.extend((0..random_cuts).map(|_| rng.gen_range(0..=len)));
    cuts.push(len);
    let entries = log.entries();
    let page_writes: Vec<usize> = (1..=len)
        .filter(|&c| matches!(&entries[c - 1].op, LogOp::Write { data, .. } if data.starts_with(b"LDLOGMP1")))
        .collect();
    assert!(page_writes.len() >= 4, "{release:?}: {} map page writes", page_writes.len());
    eprintln!("{release:?}: {} map page writes, each also torn two ways", page_writes.len());
    cuts.extend(&page_writes);
    cuts.sort_unstable();
    cuts.dedup();
    let mut images: Vec<(usize, Option<Tear>)> = cuts.iter().map(|&c| (c, None)).collect();
    for &c in &page_writes {
        images.extend([(c, Some(Tear::FirstSector)), (c, Some(Tear::Garbage))]);
    }
    for &(cut, tear) in &images {
        let dev = match tear {
            None => log.image_at(cut, dev_bytes, Some(&base)).expect("replay"),
            Some(t) => log.image_torn_at(cut, dev_bytes, Some(&base), t).expect("replay").expect("a write"),
        };
        let stack = stack_from_toml(&cfg, dev_bytes, open_mode);
        let dev = Arc::new(dev);
        let mut h = Harness::new(stack, dev.clone() as Arc<dyn BlockDevice>, ZeroLatency::default(), seed);
        if let Err(e) = h.bring_up() {
            panic!(
                "{release:?} seed {seed}: cut {cut} of {len} (torn: {tear:?}; open ends at {opened}): refused: {e}"
            );
        }
        // The bring-up checkpoint's sketch is of the map as recovered
        // (not with map pages of the version before: `legacy_map`).
        let sketched = !matches!(
            release,
            Some(seglog_legacy::Release::BeforeMapIds | seglog_legacy::Release::BeforeFormatIds)
        );
        assert_eq!(
            checkpoints_sketch_the_map(&dev, &map_page_copies(&dev), true),
            usize::from(sketched),
            "{release:?}: cut {cut} (torn: {tear:?})"
        );
        let durable = (2..=ROUNDS).rev().find(|&r| flushed[r as usize] <= cut).unwrap_or(1);
        for b in (0..40).chain(SECOND_PAGE) {
            let newest = (1..=durable).rev().find(|&r| written(r, b)).expect("round 1 wrote every block");
            let mut allowed = vec![newest];
            allowed.extend((durable + 1..=ROUNDS).filter(|&r| written(r, b) && starts[r as usize] < cut));
            let data = h.read(b * 4096, 4096).data.expect("data");
            for (i, s) in (b * 8..b * 8 + 8).enumerate() {
                let got = tag_of(&data[i * 512..(i + 1) * 512], s);
                assert!(
                    got.is_some_and(|v| allowed.contains(&v)),
                    "{release:?} seed {seed}: cut {cut} of {len} (torn: {tear:?}; open ends at {opened}, round \
                     {durable} flushed): block {b} sector {s} holds {got:?}, allowed {allowed:?}"
                );
            }
        }
    }
    images.len()
}

/// [`legacy_crash_check`] for the releases before: a crash at any point
/// of the first open (the upgrade) or of the work after it keeps what the
/// old volume held and what was flushed since; and for a volume of this
/// build, a checkpoint torn while writing a map page (one written before,
/// its current copy intact) still opens.
#[test]
fn a_log_of_a_release_before_keeps_flushed_data_at_any_crash_point_of_its_upgrade_and_after() {
    use seglog_legacy::Release;
    for release in [
        Some(Release::BeforeMapSketch),
        Some(Release::BeforeMapDigest),
        Some(Release::BeforeMapIds),
        Some(Release::BeforeFormatIds),
        None,
    ] {
        let cuts = legacy_crash_check(release, 1, 30);
        eprintln!("{release:?}: {cuts} cut points");
        assert!(cuts > 40, "{release:?}: {cuts} cut points");
    }
}

/// Writes 60% of the volume's blocks in a random order with
/// `resequence_busy_user_blocks_per_pass = every` (idle time never comes:
/// `resequence_idle_ms` is an hour), flushes, then reads each group whole
/// (checking its bytes). Returns the lower requests of those reads and the
/// harness.
fn busy_resequencing(every: u64, extra: &str) -> (u64, Harness<ZeroLatency>) {
    let extra =
        format!("resequence_idle_ms = 3600000\nresequence_busy_user_blocks_per_pass = {every}\n{extra}");
    let cfg = cfg("adaptive", &extra).replace("over_provision_pct = 20", "over_provision_pct = 30");
    let (_dev, mut h) = formatted(&cfg);
    let groups = counter(&*h.stack, "volume_blocks_count") * 6 / 10 / 8;
    let (order, _) = shuffled(groups * 8, 23);
    for &b in &order {
        assert_eq!(h.write(b * 4096, block_bytes(1, b)).result, Ok(()));
    }
    assert_eq!(h.flush().result, Ok(()));
    let before = h.stats.lower_count;
    for g in 0..groups {
        let got = h.read(g * 8 * 4096, 8 * 4096).data.expect("data");
        let want: Vec<u8> = (g * 8..g * 8 + 8).flat_map(|b| block_bytes(1, b)).collect();
        assert_eq!(got.to_vec(), want, "group {g}");
    }
    (h.stats.lower_count - before, h)
}

#[test]
fn busy_resequencing_runs_beside_the_writes_within_its_budget_and_never_when_off() {
    let (reads, h) = busy_resequencing(4, "resequence_sliding = false\n");
    let status = h.stack.status().to_string();
    let busy = counter(&*h.stack, "resequence_busy_passes_count");
    assert!(busy > 10, "{status}");
    // No idle time came: every pass was a busy one.
    assert_eq!(counter(&*h.stack, "resequence_passes_count"), busy, "{status}");
    // At most one pass per 4 blocks of user writes.
    let user_blocks = counter(&*h.stack, "user_bytes") / 4096;
    assert!(busy <= user_blocks / 4, "{busy} passes for {user_blocks} blocks: {status}");
    // A pass passes over groups with a block in the open segment (it would
    // seal it part filled): the segments written are at least 85% full
    // on average (here 193 slots in 27 segments of 8; 204 in 32 without
    // that rule, 80%).
    let slots: u64 =
        ["slots_user_count", "slots_ssr_count", "slots_cleaning_count", "slots_resequence_count"]
            .iter()
            .map(|k| counter(&*h.stack, k))
            .sum();
    let segments = counter(&*h.stack, "segments_written_count") + 1;
    assert!(slots * 100 >= segments * 8 * 85, "{slots} slots in {segments} segments: {status}");
    // Negative control: off, nothing is re-sequenced while requests keep
    // coming, and the groups read in more requests.
    let (scattered, off) = busy_resequencing(0, "resequence_sliding = false\n");
    assert_eq!(counter(&*off.stack, "resequence_passes_count"), 0);
    assert_eq!(counter(&*off.stack, "resequence_busy_passes_count"), 0);
    assert!(reads * 3 < scattered * 2, "{reads} lower reads against {scattered} without");
}

#[test]
fn busy_resequencing_packs_and_leaves_sliding_compaction_to_idle_time() {
    // Sliding forced on: busy passes still pack (no home prepared or filled).
    let (_, mut h) = busy_resequencing(4, "resequence_sliding = true\n");
    let status = h.stack.status().to_string();
    assert!(counter(&*h.stack, "resequence_busy_passes_count") > 10, "{status}");
    assert_eq!(counter(&*h.stack, "compact_evictions_count"), 0, "{status}");
    assert_eq!(counter(&*h.stack, "compact_groups_home_count"), 0, "{status}");
    // A write touches the groups again; idle time then slides them home.
    let blocks = counter(&*h.stack, "volume_blocks_count") * 6 / 10 / 8 * 8;
    for b in (0..blocks).step_by(3) {
        assert_eq!(h.write(b * 4096, block_bytes(2, b)).result, Ok(()));
    }
    assert_eq!(h.flush().result, Ok(()));
    h.run_until(h.now.add_ms(3_700_000));
    h.settle();
    let status = h.stack.status().to_string();
    assert!(counter(&*h.stack, "compact_groups_home_count") > 0, "{status}");
    for b in 0..blocks {
        let v = if b % 3 == 0 { 2 } else { 1 };
        assert_eq!(h.read(b * 4096, 4096).data.expect("data"), block_bytes(v, b), "block {b}");
    }
}

/// Re-sequencing beside the writes (no idle time) in the oracle and crash
/// checks: flushed data survives a crash at any point.
#[test]
fn flushed_data_survives_a_crash_at_any_point_of_busy_resequencing() {
    for policy in ["greedy", "ssr", "adaptive"] {
        let cfg = cfg(policy, "resequence_idle_ms = 3600000\nresequence_busy_user_blocks_per_pass = 4\n")
            .replace("over_provision_pct = 20", "over_provision_pct = 30");
        let (h, cuts) = oracle_then_crash(&cfg, 60, 19, 0);
        let status = h.stack.status().to_string();
        eprintln!("{policy}, busy: {status}");
        assert!(counter(&*h.stack, "resequence_busy_passes_count") > 5, "{policy}: {status}");
        eprintln!("{policy}, busy: {cuts} cut points");
        assert!(cuts > 40, "{policy}: {cuts}");
    }
}

/// A busy pass passes over a group with a block in the open segment, so
/// while every marked group has one (a client rewriting one file), each
/// pass due finds nothing. It sweeps the groups once, then not again
/// until the open segment is sealed (or a block is trimmed): the groups
/// swept stay within one sweep per pass, seal and trim (here 1,198 for
/// 21 groups and 77 such events; the passes, segments and data the same
/// either way). Before session 30 every due point swept every group (one
/// a user block: 8,380).
#[test]
fn a_busy_pass_does_not_sweep_again_while_every_marked_group_is_in_the_open_segment() {
    let extra = "resequence_idle_ms = 3600000\nresequence_busy_user_blocks_per_pass = 1\nresequence_sliding = false\n";
    let cfg = cfg("adaptive", extra).replace("over_provision_pct = 20", "over_provision_pct = 30");
    let (_dev, mut h) = formatted(&cfg);
    let groups = counter(&*h.stack, "volume_blocks_count").div_ceil(8);
    for i in 0..400u64 {
        let b = i % 8;
        assert_eq!(h.write(b * 4096, block_bytes(i, b)).result, Ok(()));
    }
    assert_eq!(h.flush().result, Ok(()));
    let c = |k: &str| counter(&*h.stack, k);
    let status = h.stack.status().to_string();
    let sweeps = c("resequence_busy_passes_count") + c("segments_written_count") + c("trims_count") + 1;
    assert!(
        c("resequence_groups_swept_count") <= groups * sweeps,
        "{} groups swept, {groups} groups, {sweeps} sweeps due: {status}",
        c("resequence_groups_swept_count")
    );
    for b in 0..8u64 {
        let last = (0..400u64).filter(|i| i % 8 == b).max().expect("written");
        assert_eq!(h.read(b * 4096, 4096).data.expect("data").to_vec(), block_bytes(last, b), "block {b}");
    }
}
