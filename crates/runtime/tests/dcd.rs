//! The `dcd` target under the oracle and the recorder crash check, with
//! tiny segments so that buffers fill, the ring wraps, destage and
//! recovery all happen many times per case. Prefix and stale-resurrection
//! checks live in `dcd_crash.rs`.

use layoutd_core::Op;
use layoutd_disk::{BlockDevice, MemDevice};
use layoutd_runtime::testkit::{
    crash_check, crash_check_open, crash_check_over, oracle_check, oracle_check_over, random_image,
    stack_from_toml, tags_shifted, Before, OpSpec,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const DEVICE_BYTES: u64 = 1 << 20;

/// A tiny logical DCD: 64 KiB log of 4 KiB segments (8 slots of 512 B),
/// 12 segments in the ring; writes under 4 KiB are logged.
/// [`tiny`] with destage only when forced: the idle threshold is 100 s.
fn quiet() -> String {
    tiny("")
        .replace("idle_ms_max = 20", "idle_ms_max = 100000")
        .replace("idle_ms_min = 1", "idle_ms_min = 100000")
}

pub fn tiny(extra: &str) -> String {
    format!(
        "version = 1\n[[layer]]\ntarget = \"dcd\"\nlog_length = \"64KiB\"\nsegment_bytes = 4096\nslot_bytes = 512\n\
         buffer_count = 2\nbuffer_delay_ms = 5\nbypass_bytes = 4096\nidle_ms_max = 20\nidle_ms_min = 1\n{extra}"
    )
}

fn stacks() -> Vec<(&'static str, String)> {
    vec![
        ("dcd-tiny", tiny("")),
        ("dcd-tiny-fua-log-fewest", tiny("fua = \"log\"\ndestage_policy = \"fewest-valid-first\"\n")),
        (
            "dcd-1k-slots-oldest-4-buffers",
            tiny("")
                .replace("segment_bytes = 4096\nslot_bytes = 512", "segment_bytes = 8192\nslot_bytes = 1024")
                .replace("buffer_count = 2", "buffer_count = 4")
                + "destage_policy = \"oldest-first\"\n",
        ),
        ("dcd-tiny-read-destage", tiny("read_fragmented = \"destage\"\n")),
        (
            "trace-over-dcd-log-at-the-end",
            "version = 1\n[[layer]]\ntarget = \"trace\"\n".to_string()
                + &tiny("log_offset = \"960KiB\"\ndata_offset = 0\ndata_length = \"960KiB\"\n")
                    .replace("version = 1\n", ""),
        ),
    ]
}

/// A file-system-like workload: mostly small writes to a hot range (so
/// they overwrite each other in RAM and in the log), reads of the same
/// range, some large writes, trims, flushes and FUA writes.
pub fn dcd_ops(rng: &mut ChaCha8Rng, count: usize, hot_sectors: u64, sectors_total: u64) -> Vec<OpSpec> {
    (0..count)
        .map(|_| {
            let (op, sectors) = match rng.gen_range(0..100) {
                0..=44 => (Op::Write, rng.gen_range(1..=7)),
                45..=49 => (Op::Write, rng.gen_range(8..=64)),
                50..=79 => (Op::Read, rng.gen_range(1..=32)),
                80..=89 => (Op::Flush, 0),
                90..=95 => (Op::Trim, rng.gen_range(1..=24)),
                _ => (Op::WriteZeroes, rng.gen_range(1..=24)),
            };
            let hot = rng.gen_bool(0.9);
            let sector = if hot { rng.gen_range(0..hot_sectors) } else { rng.gen_range(0..sectors_total) };
            OpSpec { op, sector, sectors, fua: rng.gen_bool(0.08), stream: rng.gen_range(0..4) }
        })
        .collect()
}

#[test]
fn dcd_reads_back_what_a_byte_array_would() {
    for (name, cfg) in stacks() {
        for seed in 0..24u64 {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let ops = dcd_ops(&mut rng, 500, 96 + seed * 16, DEVICE_BYTES / 512);
            let h = oracle_check(&cfg, DEVICE_BYTES, seed, &ops, 1 + (seed as usize % 6));
            assert_eq!(h.upper_outstanding_count(), 0, "{name} seed {seed}");
            let st = h.stack.layer_statuses().into_iter().find(|s| s.target == "dcd").expect("dcd layer");
            let get = |k: &str| st.counters.iter().find(|c| c.0 == k).map(|c| c.1).expect(k);
            if seed == 0 {
                eprintln!("{name}: {st}");
            }
            assert_eq!(get("dirty_segments_count"), 0, "settled means destaged ({name} seed {seed})");
            assert_eq!(get("log_sectors_mapped_count"), 0);
        }
    }
}

#[test]
fn dcd_crash_at_every_flush_and_random_points_keeps_flushed_data() {
    for (name, cfg) in stacks() {
        for seed in 0..4u64 {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let ops = dcd_ops(&mut rng, 250, 128, DEVICE_BYTES / 512);
            let cuts = crash_check(&cfg, DEVICE_BYTES, seed, &ops, 4, 30);
            eprintln!("{name} seed {seed}: {cuts} cut points checked");
            assert!(cuts > 20, "too few cut points: {cuts}");
        }
    }
}

/// `image`'s log region (where the dcd layer of `h` keeps its log) on an
/// otherwise blank device: what an earlier log leaves behind (its data
/// region is the volume's data, which a format leaves as it is).
fn log_region_of(h: &layoutd_runtime::det::Harness, image: &MemDevice) -> MemDevice {
    let st = h.stack.layer_statuses().into_iter().find(|s| s.target == "dcd").expect("dcd layer");
    let get = |k: &str| st.config.iter().find(|c| c.0 == k).map(|c| c.1.parse::<u64>().expect(k)).expect(k);
    let (at, len) = (get("log_offset"), get("log_length"));
    let out = MemDevice::new(DEVICE_BYTES);
    let mut buf = vec![0u8; len as usize];
    image.read_at(&mut buf, at).expect("read");
    out.write_at(&buf, at).expect("write");
    out
}

/// Format does not write the segments (format identities, seglog): the
/// log region may still hold an earlier log. Over an earlier format of
/// the same dcd that ran the same workload to its end (past any crash
/// point of the new run its segments carry the seqs the walk expects
/// next, at their locations, with valid crcs), over another dcd's log and
/// over random bytes, a new format brings none of it back at any crash
/// point: every sector holds a write of the new run submitted before the
/// cut, or zeroes.
#[test]
fn a_format_over_a_used_log_region_never_brings_back_what_it_held() {
    let all = stacks();
    for (i, (name, cfg)) in all.iter().enumerate() {
        let make = |mode| stack_from_toml(cfg, DEVICE_BYTES, mode);
        let ops = dcd_ops(&mut ChaCha8Rng::seed_from_u64(3), 40, 128, DEVICE_BYTES / 512);
        let first = Before { image: None, format_id: 0x1111 };
        let (h, same) = oracle_check_over(&make, DEVICE_BYTES, first, 3, &ops, 4, 0);
        let same = log_region_of(&h, &same);
        let (_, other_cfg) = &all[(i + 1) % all.len()];
        let other = |mode| stack_from_toml(other_cfg, DEVICE_BYTES, mode);
        let other_ops = dcd_ops(&mut ChaCha8Rng::seed_from_u64(4), 250, 96, DEVICE_BYTES / 512);
        let (_, other) = oracle_check_over(&other, DEVICE_BYTES, first, 4, &tags_shifted(&other_ops), 4, 0);
        let other = log_region_of(&h, &other);
        let random = log_region_of(&h, &random_image(DEVICE_BYTES, 5));
        for (what, image) in
            [("an earlier format", &same), ("another dcd", &other), ("random bytes", &random)]
        {
            let before = Before { image: Some(image), format_id: 0x2222 };
            let cuts = crash_check_over(&make, DEVICE_BYTES, before, 3, &ops, 4, 30, 0);
            eprintln!("{name} over {what}: {cuts} cut points");
            assert!(cuts > 20, "{name} over {what}: {cuts}");
        }
    }
}

#[path = "../../targets/tests/support/seglog_legacy.rs"]
mod seglog_legacy;

/// A [`quiet`] dcd formatted on a fresh device and written by `fill`,
/// then moved back to the blocks of the release before format identities.
fn legacy_dcd(fill: impl FnOnce(&mut layoutd_runtime::det::Harness)) -> std::sync::Arc<MemDevice> {
    use layoutd_runtime::det::{Harness, ZeroLatency};
    let dev = std::sync::Arc::new(MemDevice::new(DEVICE_BYTES));
    let format = layoutd_core::OpenMode::format(1);
    let mut h =
        Harness::new(stack_from_toml(&quiet(), DEVICE_BYTES, format), dev.clone(), ZeroLatency::default(), 1);
    h.bring_up().expect("formats");
    fill(&mut h);
    drop(h);
    let sizes: Vec<usize> = (1..=16).map(|k| k * 512).collect();
    let read = |b: &mut [u8]| dev.read_at(b, 0).expect("read");
    let write = |b: &[u8]| dev.write_at(b, 0).expect("write");
    assert!(seglog_legacy::downgrade_device(DEVICE_BYTES as usize, read, write, &sizes) >= 7);
    dev
}

/// A dcd log of the release before format identities (headers and
/// checkpoint of version 2, no format id) opens with this build: the
/// writes it held read back, it takes more, and from its first open on it
/// is written in the new versions with format id 0 (both checkpoint
/// copies at once, so a build before refuses it by its version instead of
/// falling back to an old copy); the next recovery walks version-2
/// headers and then version-3 ones in one ring.
#[test]
fn a_dcd_log_of_the_release_before_format_ids_opens_and_goes_on_in_the_new_versions() {
    use layoutd_runtime::det::{Harness, ZeroLatency};
    let text = quiet();
    let dev = legacy_dcd(|h| {
        for i in 0..20u64 {
            assert_eq!(h.write(i * 1024, vec![i as u8 + 1; 1024]).result, Ok(()));
        }
        assert_eq!(h.flush().result, Ok(()));
    });
    let version = || {
        let mut area = vec![0u8; 8192];
        dev.read_at(&mut area, 0).expect("read");
        (seglog_legacy::newest_checkpoint_version(&area), seglog_legacy::checkpoint_versions(&area))
    };
    assert_eq!(version(), (2, [2, 2]));
    let open = || {
        let mode = layoutd_core::OpenMode::Open { clean: false, accept_loss: false };
        let mut h =
            Harness::new(stack_from_toml(&text, DEVICE_BYTES, mode), dev.clone(), ZeroLatency::default(), 1);
        h.bring_up().expect("opens");
        h
    };
    let check = |h: &mut Harness, n: u64| {
        for i in 0..n {
            assert_eq!(h.read(i * 1024, 1024).data.as_deref(), Some(&vec![i as u8 + 1; 1024][..]), "{i}");
        }
    };
    let mut h = open();
    let v = layoutd_targets::seglog::CHECKPOINT_VERSION;
    assert_eq!(version(), (v, [v, v]), "both copies in the new version");
    let old_segments = counter(&h, "recovered_segments_count");
    assert!(old_segments >= 5, "{old_segments}");
    check(&mut h, 20);
    for i in 20..40u64 {
        assert_eq!(h.write(i * 1024, vec![i as u8 + 1; 1024]).result, Ok(()));
    }
    assert_eq!(h.flush().result, Ok(()));
    drop(h);
    assert_eq!(version(), (v, [v, v]));
    let mut h = open();
    assert!(counter(&h, "recovered_segments_count") > old_segments, "old and new headers in one walk");
    check(&mut h, 40);
}

/// A crash anywhere in the first open of a dcd log of the release before
/// format identities, with the last write before it torn or not, loses
/// nothing and never leaves an older checkpoint newest than the one the
/// open recovered from: the open rewrites that copy (in this build's
/// version) only once its new checkpoint, in the other copy, and its new
/// mark are durable. (Falling back one generation happens to lose nothing
/// on this image: a tail advance writes both copies, and the walk takes
/// segments of a newer boot; it would replay destaged segments again if
/// the release before had crashed between those two writes.)
#[test]
fn a_crash_in_the_first_open_of_a_dcd_log_of_the_release_before_format_ids_loses_nothing() {
    // 1 KiB writes over 40 KiB, logged, a flush every 10: the ring wraps
    // several times (each forced destage frees its tail: checkpoints).
    let data = |i: u64| vec![(i % 251) as u8 + 1; 1024];
    let writes = 300u64;
    let dev = legacy_dcd(|h| {
        for i in 0..writes {
            assert_eq!(h.write(i % 40 * 1024, data(i)).result, Ok(()));
            if i % 10 == 9 {
                assert_eq!(h.flush().result, Ok(()));
            }
        }
        assert!(counter(h, "destaged_segments_count") > 12, "the ring wrapped");
    });
    let text = quiet();
    let make = |mode| stack_from_toml(&text, DEVICE_BYTES, mode);
    let checkpoints =
        |d: &MemDevice| seglog_legacy::readable_checkpoints_on(|b| d.read_at(b, 0).expect("read"));
    let (checked, volume) = crash_check_open(&make, &dev, 0..8, &checkpoints);
    eprintln!("{checked} crash images");
    assert!(checked > 8 * 4, "{checked}");
    for (k, got) in volume.chunks(1024).enumerate() {
        let last = (0..writes).rev().find(|i| i % 40 == k as u64);
        assert_eq!(got, last.map_or(vec![0; 1024], data), "KiB {k}");
    }
}

/// A debugging tool, not a test:
/// `DCD_DEBUG=<stack index>,<seed> cargo test --test dcd dcd_debug_one -- --ignored --nocapture`
/// reruns one oracle case and prints the dcd status even if it fails.
#[test]
#[ignore = "debugging tool: set DCD_DEBUG=<stack index>,<seed> and run with --ignored"]
fn dcd_debug_one() {
    use layoutd_runtime::det::{Harness, ZeroLatency};
    use layoutd_runtime::testkit::{bring_up, run_oracle, stack_from_toml};
    let Ok(spec) = std::env::var("DCD_DEBUG") else { return };
    let v: Vec<u64> = spec.split(',').map(|x| x.parse().expect("index,seed")).collect();
    let (i, seed) = (v[0] as usize, v[1]);
    let cfg = &stacks()[i].1;
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let ops = dcd_ops(&mut rng, 500, 96 + seed * 16, DEVICE_BYTES / 512);
    let dev = std::sync::Arc::new(layoutd_disk::MemDevice::new(DEVICE_BYTES));
    let stack = stack_from_toml(cfg, DEVICE_BYTES, layoutd_core::OpenMode::format(1));
    let mut h = Harness::new(stack, dev, ZeroLatency::reordering(), seed);
    bring_up(&mut h);
    let depth = 1 + (seed as usize % 6);
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run_oracle(&mut h, &ops, depth, None)));
    for s in h.stack.layer_statuses() {
        eprintln!("{s}");
    }
    assert!(r.is_ok());
}

/// A stack formatted from `text` on a fresh memory device, brought up
/// (zero-latency device, seed 1).
fn formatted(text: &str) -> layoutd_runtime::det::Harness {
    use layoutd_runtime::det::{Harness, ZeroLatency};
    use layoutd_runtime::testkit::{bring_up, stack_from_toml};
    let dev = std::sync::Arc::new(layoutd_disk::MemDevice::new(DEVICE_BYTES));
    let mut h = Harness::new(
        stack_from_toml(text, DEVICE_BYTES, layoutd_core::OpenMode::format(1)),
        dev,
        ZeroLatency::default(),
        1,
    );
    bring_up(&mut h);
    h
}

/// A counter of any layer (the first that has it).
fn counter(h: &layoutd_runtime::det::Harness, key: &str) -> u64 {
    let layers = h.stack.layer_statuses();
    let found = layers.iter().flat_map(|st| st.counters.iter()).find(|c| c.0 == key);
    found.unwrap_or_else(|| panic!("no counter {key}")).1
}

fn build(text: &str, device_bytes: u64) -> Result<layoutd_core::Stack, String> {
    let cfg = layoutd_core::config::StackConfig::parse(text, "t.toml").map_err(|e| e.0)?;
    layoutd_targets::build_stack(&cfg, device_bytes, layoutd_core::OpenMode::format(1)).map_err(|e| e.0)
}

#[test]
fn dcd_bad_configs_fail_naming_the_key() {
    let cases = [
        (tiny("typo_key = 1\n"), "`typo_key`"),
        (tiny("").replace("bypass_bytes = 4096", "bypass_bytes = 8192"), "bypass_bytes"),
        (tiny("").replace("slot_bytes = 512", "slot_bytes = 1000"), "slot_bytes"),
        (tiny("destage_policy = \"random\"\n"), "destage_policy"),
        (tiny("fua = \"maybe\"\n"), "fua"),
        (tiny("data_offset = \"32KiB\"\n"), "overlaps"),
        (tiny("").replace("log_length = \"64KiB\"", "log_length = \"12KiB\""), "at least 2"),
        (tiny("").replace("idle_ms_min = 1", "idle_ms_min = 5000"), "idle_ms_min"),
        (tiny("").replace("buffer_count = 2", "buffer_count = 1"), "buffer_count"),
    ];
    for (text, want) in cases {
        let e = build(&text, DEVICE_BYTES).err().unwrap_or_else(|| panic!("accepted: {text}"));
        assert!(e.contains(want) && e.contains("dcd"), "{e:?} should name {want}");
    }
}

#[test]
fn the_example_config_formats_and_serves() {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/dcd.toml"))
        .expect("example");
    let device = 256u64 << 20;
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    let ops = dcd_ops(&mut rng, 300, 4096, device / 512);
    let h = oracle_check(&text, device, 3, &ops, 4);
    assert!(counter(&h, "writes_absorbed_count") > 50);
    assert_eq!(counter(&h, "segment_count"), 506, "64 MiB of 128 KiB + 1.5 KiB segments");
    assert_eq!(counter(&h, "dirty_segments_count"), 0);
}

#[test]
fn idle_destage_waits_for_the_threshold_and_a_request_restarts_the_wait() {
    let text = tiny("").replace("idle_ms_max = 20", "idle_ms_max = 1000");
    let mut h = formatted(&text);
    assert_eq!(h.write(0, vec![7u8; 1024]).result, Ok(()));
    assert_eq!(h.flush().result, Ok(()));
    let t0 = h.now;
    // 1 of 12 segments used: the threshold is 1000 * (1/1000)^(1/12) ms, about 562 ms.
    h.run_until(t0.add_ms(400));
    assert_eq!(counter(&h, "destaged_bytes"), 0, "too early");
    assert_eq!(h.read(0, 512).result, Ok(())); // a request: the idle period starts again
    h.run_until(t0.add_ms(900));
    assert_eq!(counter(&h, "destaged_bytes"), 0, "the read restarted the idle wait");
    h.run_until(t0.add_ms(1100));
    assert_eq!(counter(&h, "destaged_bytes"), 1024);
    assert_eq!(counter(&h, "read_log_bytes") + counter(&h, "read_ram_bytes"), 512);
}

#[test]
fn timing_only_mode_tracks_slots_without_bytes() {
    use layoutd_runtime::det::{Harness, ZeroLatency};
    use layoutd_runtime::testkit::{bring_up, stack_from_toml};
    let dev = std::sync::Arc::new(layoutd_disk::MemDevice::new(DEVICE_BYTES));
    let stack = stack_from_toml(&tiny(""), DEVICE_BYTES, layoutd_core::OpenMode::format(1));
    let mut h = Harness::new(stack, dev, ZeroLatency::reordering(), 5);
    h.with_data = false;
    bring_up(&mut h);
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    for spec in dcd_ops(&mut rng, 600, 128, DEVICE_BYTES / 512) {
        let sectors = u64::from(spec.sectors).min(DEVICE_BYTES / 512 - 128 - spec.sector % 1024);
        let mut req = layoutd_core::Request::new(
            layoutd_core::ReqId(0),
            spec.op,
            (spec.sector % 1024) * 512,
            (sectors * 512) as u32,
        );
        if spec.op == Op::Flush {
            req = layoutd_core::Request::new(layoutd_core::ReqId(0), Op::Flush, 0, 0);
        }
        req.fua = spec.fua && spec.op.is_modify();
        let c = h.call(req);
        assert_eq!(c.result, Ok(()));
        assert!(c.data.is_none(), "timing mode carries no bytes");
    }
    h.settle();
    assert!(counter(&h, "writes_absorbed_count") > 100);
    assert!(counter(&h, "log_segments_written_count") > 20);
    assert_eq!(counter(&h, "dirty_segments_count"), 0);
}

#[test]
fn a_clean_reopen_replays_the_live_log_and_a_corrupt_checkpoint_is_refused() {
    use layoutd_disk::BlockDevice;
    use layoutd_runtime::det::{Harness, ZeroLatency};
    use layoutd_runtime::testkit::{bring_up, stack_from_toml};
    let text = quiet();
    let dev = std::sync::Arc::new(layoutd_disk::MemDevice::new(DEVICE_BYTES));
    let mut h = Harness::new(
        stack_from_toml(&text, DEVICE_BYTES, layoutd_core::OpenMode::format(1)),
        dev.clone(),
        ZeroLatency::default(),
        1,
    );
    bring_up(&mut h);
    for i in 0..30u64 {
        assert_eq!(h.write(i * 1024, vec![i as u8 + 1; 1024]).result, Ok(()));
    }
    assert_eq!(h.flush().result, Ok(()));
    assert!(counter(&h, "dirty_segments_count") >= 7, "the log holds the writes, nothing destaged");
    drop(h);
    let mut r = Harness::new(
        stack_from_toml(
            &text,
            DEVICE_BYTES,
            layoutd_core::OpenMode::Open { clean: true, accept_loss: false },
        ),
        dev.clone(),
        ZeroLatency::default(),
        1,
    );
    bring_up(&mut r);
    assert_eq!(counter(&r, "boot_count"), 2);
    assert!(counter(&r, "recovered_segments_count") >= 7);
    for i in 0..30u64 {
        assert_eq!(r.read(i * 1024, 1024).data.as_deref(), Some(&vec![i as u8 + 1; 1024][..]));
    }
    drop(r);
    // Both checkpoint copies corrupt: recovery stops with a message, no panic.
    for copy in [0u64, 4096] {
        dev.write_at(&[0xFF; 16], copy + 20).expect("mem");
    }
    let mut bad = Harness::new(
        stack_from_toml(
            &text,
            DEVICE_BYTES,
            layoutd_core::OpenMode::Open { clean: false, accept_loss: false },
        ),
        dev,
        ZeroLatency::default(),
        1,
    );
    while bad.step() {}
    assert!(!bad.stack.is_ready());
    let st = bad.stack.status();
    let err = st.config.iter().find(|c| c.0 == "error").map(|c| c.1.clone()).expect("an error in the status");
    assert!(err.contains("no valid checkpoint") && err.contains("crc32c"), "{err}");
    let c = bad.read(0, 512);
    assert_eq!(c.result, Err(layoutd_core::IoError::Io));
}

/// A transient ENOSPC below (a full or thin host file system) used to put
/// the target in a failed state: every later request failed, reads of
/// never-written sectors included, until a restart, and "no space" was
/// never said. Now only the flush that depended on the failed segment
/// write gets the error, the cause is in the status, and the segment is
/// written again after a backoff.
#[test]
fn a_transient_enospc_fails_only_what_depends_on_it_and_the_write_is_retried() {
    use layoutd_core::IoError;
    let mut h = formatted(&quiet());
    assert_eq!(h.write(0, vec![1; 1024]).result, Ok(()));
    assert_eq!(h.flush().result, Ok(()));
    h.fail_lower_writes = true;
    h.lower_write_error = IoError::NoSpace;
    assert_eq!(h.write(4096, vec![2; 1024]).result, Ok(()), "absorbed into RAM");
    assert_eq!(h.flush().result, Err(IoError::NoSpace), "the flush that needed the segment write");
    // Nothing else is poisoned: reads of RAM, log and never-written sectors.
    let c = h.read(4096, 1024);
    assert_eq!((c.result, c.data.map(|d| d.to_vec())), (Ok(()), Some(vec![2; 1024])));
    let c = h.read(0, 1024);
    assert_eq!((c.result, c.data.map(|d| d.to_vec())), (Ok(()), Some(vec![1; 1024])));
    let c = h.read(65536, 512);
    assert_eq!((c.result, c.data.map(|d| d.to_vec())), (Ok(()), Some(vec![0; 512])));
    let st = h.stack.status();
    let why = st.config.iter().find(|(k, _)| k == "last_lower_error").map(|(_, v)| v.clone());
    assert!(
        why.as_deref().is_some_and(|w| w.contains("no space") && w.contains("segment")),
        "cause named: {why:?}"
    );
    // Space comes back: the backoff retries the segment, the next flush succeeds.
    h.fail_lower_writes = false;
    h.run_until(h.now.add_ms(5000));
    assert!(counter(&h, "lower_write_retries_count") >= 1);
    assert_eq!(h.flush().result, Ok(()));
    assert_eq!(counter(&h, "written_upto_seq"), counter(&h, "head_seq"), "every segment reached the log");
    let c = h.read(4096, 1024);
    assert_eq!(c.data.map(|d| d.to_vec()), Some(vec![2; 1024]));
}

/// NBD block status through a stack: a range with a newer copy in the log is
/// unknown (reported as data); elsewhere the dcd maps 1:1 to its data
/// region and the linear below maps on to the device; after destage the
/// written range maps home too.
#[test]
fn map_extent_goes_through_the_stack_and_never_hides_log_data() {
    let text = format!(
        "{}[[layer]]\ntarget = \"linear\"\n[[layer.segment]]\noffset = 4096\n",
        tiny("").replacen("version = 1\n", "version = 1\n[[layer]]\ntarget = \"trace\"\n", 1)
    );
    let mut h = formatted(&text);
    let data_offset = 64 << 10;
    let home = |o: u64| Some(4096 + data_offset + o);
    assert_eq!(h.stack.map_extent(8192, 4096), vec![(home(8192), 4096)]);
    assert_eq!(h.write(8192 + 1024, vec![7; 512]).result, Ok(()));
    assert_eq!(
        h.stack.map_extent(8192, 4096),
        vec![(home(8192), 1024), (None, 512), (home(8192 + 1536), 4096 - 1536)],
        "the sector in the log is unknown (data), the rest maps home"
    );
    assert_eq!(h.stack.map_extent(0, 8192), vec![(home(0), 8192)]);
    h.settle();
    assert_eq!(h.stack.map_extent(8192, 4096), vec![(home(8192), 4096)]);
    assert_eq!(h.stack.map_extent(u64::MAX - 511, 512), vec![(None, 512)]);
}

/// The `message` entry point: "destage" starts destage now (no idle wait),
/// routed by the stack to the layer that takes it; unknown messages and
/// layers are refused naming what is known; `is_drained` says when the log
/// is empty.
#[test]
fn message_destage_starts_destage_now_and_is_drained_says_when_done() {
    let text = quiet().replacen("version = 1\n", "version = 1\n[[layer]]\ntarget = \"trace\"\n", 1);
    let mut h = formatted(&text);
    assert!(h.stack.is_drained());
    for i in 0..20u64 {
        assert_eq!(h.write(i * 4096, vec![i as u8 + 1; 1024]).result, Ok(()));
    }
    assert_eq!(h.flush().result, Ok(()));
    assert!(!h.stack.is_drained(), "the log holds the writes");
    h.run_until(h.now.add_ms(1000));
    assert_eq!(counter(&h, "destaged_bytes"), 0, "the idle threshold is 100 s away");
    let now = h.now;
    let e = h.stack.message(now, "frobnicate").unwrap_err();
    assert!(e.contains("trace") && e.contains("known: destage"), "{e}");
    assert!(h.stack.message(now, "5:destage").unwrap_err().contains("the stack has 2"));
    assert!(h.stack.message(now, "1:destage").is_err(), "the trace layer takes no messages");
    let reply = h.stack.message(now, "2:destage").expect("dcd takes it");
    assert!(reply.contains("dirty segment"), "{reply}");
    h.run_until(h.now.add_ms(1000));
    assert!(counter(&h, "destaged_bytes") >= 20 * 1024, "destaged without the idle wait");
    assert!(h.stack.is_drained());
}

/// The background scheduler's rate limit (`[background] rate`), in virtual
/// time: with about one segment's worth of tokens per second, destage of
/// ten segments is spread over seconds; without it, done at once. (Virtual
/// time in the deterministic harness: an exact consequence of the token
/// bucket, not a performance bound.)
#[test]
fn the_background_rate_limit_spreads_destage_over_virtual_time() {
    let run = |limit: &str| {
        let text = format!("{}{limit}", tiny("").replace("idle_ms_max = 20", "idle_ms_max = 5"));
        let mut h = formatted(&text);
        for i in 0..80u64 {
            assert_eq!(h.write(i * 4096, vec![1; 512]).result, Ok(())); // 10 segments of 8 slots
        }
        assert_eq!(h.flush().result, Ok(()));
        let t0 = h.now;
        h.run_until(t0.add_ms(3000));
        let after_3s = counter(&h, "destaged_segments_count");
        h.run_until(t0.add_ms(30_000));
        let stack_counters = h.stack.status().counters;
        let throttled =
            stack_counters.iter().find(|c| c.0 == "background_throttled_count").expect("stack counter").1;
        (after_3s, counter(&h, "destaged_segments_count"), throttled)
    };
    let (unlimited_3s, unlimited_all, unlimited_throttled) = run("");
    assert_eq!((unlimited_3s, unlimited_all, unlimited_throttled), (10, 10, 0));
    let (limited_3s, limited_all, throttled) = run("[background]\nrate = \"8KiB\"\n");
    assert!((2..10).contains(&limited_3s), "about one segment a second: {limited_3s} after 3 s");
    assert_eq!(limited_all, 10, "and all of them in the end");
    assert!(throttled > 0);
}
