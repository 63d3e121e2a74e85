//! Damaged-image fuzzing of every target's recovery: a small volume of
//! each persistent target (dcd, log, pool, opt, replica) is formatted and
//! written in the deterministic runtime, then one of its metadata blocks
//! on the lower device (found by scanning the image for the shared codec's
//! blocks: a magic and a crc32c that holds) gets random bytes or crafted
//! numbers (its crc fixed or not), is zeroed (a lost write) or replaced by
//! another intact block of its size (a misdirected or stale write), and
//! the volume is opened again, clean or not, with `accept_loss` or not. The property: bring-up either refuses
//! with a message or serves, and a served volume answers reads, a write
//! and a flush; no panic, no overflow, no hang (every loop is bounded).
//! The decoders' own fuzz tests (`fuzz_decoders`, the modules' `fuzz`)
//! stop at the decoded value; this one drives what recovery does with it.
//!
//! The control socket's path rides along: a served volume also gets a few
//! runtime messages (`layoutd message`, what the control socket passes to
//! `Target::message`), every target's commands with hostile numbers,
//! names and layer prefixes, and then its own `verify` where it has one:
//! a volume that opened must be consistent.
//!
//! The `log` also has images formatted over an earlier format's (whose
//! segments and map page copies, valid crcs, higher generations, stay
//! where the new format did not write) and images of the releases before
//! (written by this build, then moved back to their versions).
//!
//! A bounded pass in the default suite; `PROPTEST_CASES=20000 cargo test
//! -p layoutd-runtime --test fuzz_images` for a long one.

use layoutd_core::OpenMode;
use layoutd_disk::{BlockDevice, MemDevice};
use layoutd_runtime::det::{Harness, ZeroLatency};
use layoutd_runtime::testkit::{bring_up, stack_from_toml};
use proptest::prelude::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::sync::{Arc, OnceLock};

#[path = "../../core/tests/support/fuzz.rs"]
mod fuzz;
use fuzz::{config, crafted_writes, fix_crc, mutate, raw_writes};
#[path = "../../targets/tests/support/seglog_legacy.rs"]
mod seglog_legacy;
use seglog_legacy::Release;

/// One target's volume: its config and device size.
struct Kind {
    name: &'static str,
    config: &'static str,
    device_bytes: u64,
    /// Messages sent after the writes (a snapshot, a plan), best effort.
    messages: &'static [&'static str],
    /// What the device held before, or what the image is made into.
    earlier: Earlier,
}

/// How a kind's image comes about, besides a format over a blank device.
#[derive(Clone, Copy)]
enum Earlier {
    /// Formatted over a blank device.
    Blank,
    /// Formatted (another format id) over the image of an earlier format
    /// of the same config that ran another workload: the earlier format's
    /// segments, summaries and map pages (valid crcs) stay where the new
    /// one did not write.
    Format,
    /// Written by this build, then moved back to the versions of a release
    /// before (`seglog_legacy`): what this build opens from a volume of
    /// that release.
    Release(Release),
}

const LOG_CONFIG: &str = "version = 1\n[[layer]]\ntarget = \"log\"\nsegment_bytes = \"32KiB\"\n\
                          over_provision_pct = 20\npolicy = \"cost-benefit\"\nclean_batch_segments = 2\n\
                          free_segments_min = 1\nfree_segments_target = 3\ncheckpoint_segments = 6\n\
                          age_threshold_segments = 40\n";

/// The format id of [`Earlier::Format`]'s earlier format.
const EARLIER_FORMAT_ID: u64 = 0x5EED;

/// A `log` kind made by `earlier`.
const fn log_kind(name: &'static str, earlier: Earlier) -> Kind {
    Kind { name, config: LOG_CONFIG, device_bytes: 1 << 20, messages: &[], earlier }
}

/// The kinds, new ones at the end (the saved regressions name kinds by
/// index).
const KINDS: [Kind; 10] = [
    Kind {
        name: "dcd",
        config: "version = 1\n[[layer]]\ntarget = \"dcd\"\nlog_length = \"64KiB\"\nsegment_bytes = 4096\n\
                 slot_bytes = 512\nbuffer_count = 3\nbuffer_delay_ms = 5\nbypass_bytes = 4096\n",
        device_bytes: 256 << 10,
        messages: &[],
        earlier: Earlier::Blank,
    },
    log_kind("log", Earlier::Blank),
    Kind {
        name: "pool",
        config: "version = 1\n[[layer]]\ntarget = \"pool\"\nchunk_size = \"8K\"\nvolume_size = \"384K\"\n\
                 volumes_max = 4\njournal_blocks = 8\nplacement = \"nearest\"\norigin_shared_write = \"redirect\"\n",
        device_bytes: 2 << 20,
        messages: &["snapshot create s"],
        earlier: Earlier::Blank,
    },
    Kind {
        name: "opt",
        config: "version = 1\n[[layer]]\ntarget = \"opt\"\nopt_offset = \"512K\"\nopt_length = \"96K\"\n\
                 journal_blocks = 2\nedge_weight_min = 0\nplan_interval_requests = 8\ncopy_blocks_per_step = 4\n\
                 idle_ms = 0\nweight_half_life_ms = 0\nabsorb_writes = true\n",
        device_bytes: 1 << 20,
        messages: &[],
        earlier: Earlier::Blank,
    },
    Kind {
        name: "replica",
        config: "version = 1\n[[layer]]\ntarget = \"replica\"\nmeta_record_bytes = 4096\n",
        device_bytes: 8 << 20,
        messages: &[],
        earlier: Earlier::Blank,
    },
    log_kind("log over an earlier format", Earlier::Format),
    log_kind("log of the release before map ids", Earlier::Release(Release::BeforeMapIds)),
    log_kind("log of the release before format ids", Earlier::Release(Release::BeforeFormatIds)),
    log_kind("log of the release before the map digest", Earlier::Release(Release::BeforeMapDigest)),
    log_kind("log of the release before the map sketch", Earlier::Release(Release::BeforeMapSketch)),
];

/// A volume's image after a workload, and its metadata blocks.
struct Image {
    bytes: Vec<u8>,
    /// `(offset, length)` of every block of the shared codec found in it.
    blocks: Vec<(usize, usize)>,
}

/// Formats `k`, writes (small and large writes, some twice, flushes,
/// the kind's messages), lets it go idle, and returns the device's bytes
/// (a crash image: no clean shutdown).
fn build(k: &Kind) -> Image {
    let dev = Arc::new(MemDevice::new(k.device_bytes));
    let run = |format_id: u64, seeds: &[u64], writes: u64| {
        let stack = stack_from_toml(k.config, k.device_bytes, OpenMode::format(format_id));
        let size = stack.size_bytes();
        let mut h = Harness::new(stack, dev.clone() as Arc<dyn BlockDevice>, ZeroLatency::default(), 7);
        bring_up(&mut h);
        for &seed in seeds {
            assert_eq!(workload(&mut h, k, size, seed, writes), 0, "{}: a write or flush failed", k.name);
        }
    };
    if let Earlier::Format = k.earlier {
        // More writes and checkpoints than the new format makes: its map
        // pages carry higher generations.
        run(EARLIER_FORMAT_ID, &[12, 13, 14], 120);
        // Fewer writes: one checkpoint, so the map page's copy 0 is the
        // earlier format's still.
        run(1, &[11], 30);
    } else {
        run(1, &[11], 120);
    }
    let mut bytes = vec![0u8; k.device_bytes as usize];
    dev.read_at(&mut bytes, 0).expect("read the image");
    if let Earlier::Release(r) = k.earlier {
        // Both checkpoint copies, and (before map ids) the map pages too.
        let least = if matches!(r, Release::BeforeMapDigest | Release::BeforeMapSketch) { 2 } else { 3 };
        assert!(seglog_legacy::downgrade_image_to(&mut bytes, &[512, 4096], r) >= least, "{}", k.name);
    }
    let blocks = metadata_blocks(&bytes);
    Image { bytes, blocks }
}

/// Small and large writes (some twice), reads, flushes and the kind's
/// messages, then idle time: what builds an image, and what a reopened
/// one is put through to write its metadata again. Returns how many
/// writes and flushes failed.
fn workload(h: &mut Harness, k: &Kind, size: u64, seed: u64, writes: u64) -> usize {
    let mut failed = 0;
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let sectors = size / 512;
    for i in 0..writes {
        let n = if i % 10 == 0 { 16 } else { rng.gen_range(1..=8u64) };
        let at = rng.gen_range(0..sectors.min(512) - n);
        let data: Vec<u8> = (0..n * 512).map(|b| (b as u64 ^ (i * 131)) as u8).collect();
        failed += usize::from(h.write(at * 512, data).result.is_err());
        if i % 7 == 0 {
            failed += usize::from(h.flush().result.is_err());
        }
        if i % 5 == 0 {
            let _ = h.read(at * 512, 512 * n as u32);
        }
        if i == 60 {
            for m in k.messages.iter().chain(&["checkpoint", "destage", "plan", "apply"]) {
                let _ = h.message(m);
            }
        }
    }
    failed += usize::from(h.flush().result.is_err());
    h.drive_bounded(200_000);
    failed
}

/// Every block of the shared metadata codec in `b`: at a 512-byte
/// boundary, an `LD` magic of 8 printable bytes, and a crc32c (at 28, over
/// the block with it zeroed) that holds for one of the block sizes.
fn metadata_blocks(b: &[u8]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    for at in (0..b.len()).step_by(512) {
        let magic = &b[at..at + 8];
        if &magic[..2] != b"LD" || !magic.iter().all(|c| c.is_ascii_alphanumeric()) {
            continue;
        }
        let stored = u32::from_le_bytes(b[at + 28..at + 32].try_into().expect("4"));
        let mut len = 512;
        while at + len <= b.len() && len <= 1 << 20 {
            let blk = &b[at..at + len];
            let c = crc32c::crc32c_append(crc32c::crc32c(&blk[..28]), &[0; 4]);
            if crc32c::crc32c_append(c, &blk[32..]) == stored {
                out.push((at, len));
                break;
            }
            len += 512;
        }
    }
    out
}

fn image(which: usize) -> &'static Image {
    static IMAGES: [OnceLock<Image>; KINDS.len()] = [const { OnceLock::new() }; KINDS.len()];
    IMAGES[which].get_or_init(|| build(&KINDS[which]))
}

/// Opens a (damaged) image: `Ok(harness)` once serving, `Err(message)`
/// when bring-up refuses.
fn open(k: &Kind, bytes: &[u8], mode: OpenMode) -> Result<Harness, String> {
    let dev = Arc::new(MemDevice::new(k.device_bytes));
    dev.write_at(bytes, 0).expect("write the image");
    let mut h = Harness::new(stack_from_toml(k.config, k.device_bytes, mode), dev, ZeroLatency::default(), 3);
    h.bring_up().map(|()| h)
}

/// Every kind's image holds metadata blocks to damage, and opens again
/// undamaged (so the fuzz below starts from volumes that recover).
#[test]
fn every_image_has_metadata_and_recovers_undamaged() {
    for (i, k) in KINDS.iter().enumerate() {
        let img = image(i);
        assert!(img.blocks.len() >= 2, "{}: {} metadata blocks found", k.name, img.blocks.len());
        let mut h = open(k, &img.bytes, OpenMode::Open { clean: false, accept_loss: false })
            .unwrap_or_else(|e| panic!("{}: {e}", k.name));
        if let Earlier::Format = k.earlier {
            // The earlier format's blocks are left to damage and copy: a
            // map page copy (at a higher generation than the new format's
            // checkpoint) and segment headers.
            let id = EARLIER_FORMAT_ID.to_le_bytes();
            let earlier: Vec<&[u8]> = (img.blocks.iter())
                .filter(|&&(at, len)| img.bytes[at + 32..at + len].windows(8).step_by(4).any(|w| w == id))
                .map(|&(at, _)| &img.bytes[at..at + 8])
                .collect();
            assert!(earlier.contains(&&b"LDLOGMP1"[..]) && earlier.contains(&&b"LDSEGHD1"[..]), "{}", k.name);
        }
        assert_eq!(h.read(0, 4096).result, Ok(()), "{}", k.name);
    }
}

/// Every target's messages (and the stack's `N:` layer prefix), with
/// `{}` standing for a hostile number.
const MESSAGES: [&str; 27] = [
    "destage",
    "checkpoint",
    "clean",
    "plan",
    "apply",
    "drop",
    "status",
    "verify",
    "reclaim",
    "free-space",
    "map",
    "snapshot list",
    "snapshot sync",
    "snapshot create s1",
    "snapshot create s2 of s",
    "snapshot create s3 of origin ro",
    "snapshot delete s",
    "snapshot merge s",
    "snapshot delete origin",
    "snapshot merge origin",
    "snapshot create {}",
    "profile {} {} {} {}",
    "profile 5 1 {} 4096",
    "profile 5 {} 0 {}",
    "{}:plan",
    "{}:verify",
    "2:snapshot create {}",
];

fn hostile_number() -> impl Strategy<Value = String> {
    prop_oneof![
        fuzz::nasty().prop_map(|v| v.to_string()),
        Just("18446744073709551616".to_string()),
        Just("-1".to_string()),
        Just("0x10".to_string()),
        Just("".to_string()),
        "[a-z0-9._-]{0,70}",
    ]
}

/// `(message, numbers)`: the message with its `{}` filled in turn.
fn message() -> impl Strategy<Value = String> {
    (0..MESSAGES.len(), prop::collection::vec(hostile_number(), 4)).prop_map(|(i, n)| {
        let mut out = MESSAGES[i].to_string();
        for v in &n {
            out = out.replacen("{}", v, 1);
        }
        out
    })
}

/// Sends `m`, then lets the volume do what it started (bounded).
fn send(h: &mut Harness, m: &str) {
    let _ = h.message(m);
    h.drive_bounded(200_000);
}

/// The volume's own consistency check, for the targets that have one.
fn verify(h: &mut Harness, k: &Kind) -> Result<(), String> {
    if matches!(k.name, "opt" | "replica") {
        h.message("verify").map(|_| ()).map_err(|e| format!("{}: verify: {e}", k.name))?;
    }
    Ok(())
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn damaged_metadata_is_refused_or_served_never_a_panic(
        which in 0..KINDS.len(),
        block in any::<prop::sample::Index>(),
        other in any::<prop::sample::Index>(),
        raw in raw_writes(1 << 20),
        crafted in crafted_writes(256),
        use_raw in any::<bool>(),
        fix in any::<bool>(),
        clean in any::<bool>(),
        accept_loss in any::<bool>(),
        reads in prop::collection::vec(any::<u32>(), 1..4),
        damage in 0..5u8,
        messages in prop::collection::vec(message(), 0..4),
    ) {
        let k = &KINDS[which];
        let img = image(which);
        let (at, len) = img.blocks[block.index(img.blocks.len())];
        let mut bytes = img.bytes.clone();
        match damage {
            // Raw bytes anywhere in the block; crafted numbers in its
            // first bytes (the header and the payload's leading fields).
            0 | 1 => {
                let blk = &mut bytes[at..at + len];
                mutate(blk, if use_raw { &raw } else { &[] }, &crafted);
                if fix {
                    fix_crc(blk, 28, len);
                }
            }
            // A lost write that never reached the disk: the block is zeroes.
            2 => bytes[at..at + len].fill(0),
            // Another intact block of the same size written here (a
            // misdirected write, or an older copy): valid crc, wrong place.
            3 => {
                let same: Vec<usize> = img.blocks.iter().filter(|b| b.1 == len).map(|b| b.0).collect();
                let from = same[other.index(same.len())];
                bytes.copy_within(from..from + len, at);
            }
            // None: messages and I/O on the volume as written.
            _ => {}
        }
        match open(k, &bytes, OpenMode::Open { clean, accept_loss }) {
            Err(e) => prop_assert!(!e.trim().is_empty(), "{}: a refusal without a message", k.name),
            Ok(mut h) => {
                let v = verify(&mut h, k);
                prop_assert!(v.is_ok(), "opened inconsistent: {:?}", v);
                for m in &messages {
                    send(&mut h, m);
                }
                let size = h.stack.size_bytes();
                for r in reads {
                    let off = u64::from(r) % (size / 512) * 512;
                    let n = (size - off).min(8192) as u32;
                    let _ = h.read(off, n);
                }
                let _ = h.write(0, vec![0xA5; 4096]);
                let _ = h.flush();
                h.drive_bounded(200_000);
                let v = verify(&mut h, k);
                prop_assert!(v.is_ok(), "inconsistent after {:?}: {:?}", messages, v);
            }
        }
    }
}

/// Every metadata block of every image with its generation (the codec's
/// field at byte 16, crc fixed) set to the largest the codec reads (and
/// one less, and the largest it writes), and the first block of each kind
/// with each of its payload's first eight u64 fields set past the readable
/// generations (a sequence number, a journal start, a snapshot's
/// generation): the volume is refused, or serves a workload that writes its
/// metadata again (checkpoints, journal blocks, segments) without a
/// panic: a writer that continues from a decoded generation or sequence
/// must never be handed one it cannot write past.
#[test]
fn generations_at_the_limit_are_refused_or_written_past() {
    use layoutd_core::metablock::{GENERATION_MAX, GENERATION_READ_MAX};
    for (which, k) in KINDS.iter().enumerate() {
        let img = image(which);
        let mut kinds_seen: Vec<&[u8]> = Vec::new();
        for &(at, len) in &img.blocks {
            let mut edits: Vec<(usize, u64)> =
                [GENERATION_READ_MAX, GENERATION_READ_MAX - 1, GENERATION_MAX].map(|g| (16, g)).to_vec();
            let magic = &img.bytes[at..at + 8];
            if !kinds_seen.contains(&magic) {
                kinds_seen.push(magic);
                for field in (32..96).step_by(8) {
                    edits.extend([(field, GENERATION_READ_MAX + 1), (field, u64::MAX)]);
                }
            }
            for (field, v) in edits {
                let mut bytes = img.bytes.clone();
                fuzz::put(&mut bytes[at..at + len], field, v, 8);
                fix_crc(&mut bytes[at..at + len], 28, len);
                let Ok(mut h) = open(k, &bytes, OpenMode::Open { clean: false, accept_loss: true }) else {
                    continue;
                };
                let size = h.stack.size_bytes();
                let _ = workload(&mut h, k, size, 11, 120);
            }
        }
    }
}
