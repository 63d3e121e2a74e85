//! Byte-mutation fuzzing of every on-disk decoder of the targets crate and
//! of the stack config (proptest-driven; a bounded pass runs in the default
//! test suite, `PROPTEST_CASES=100000 cargo test -p layoutd-targets --test
//! fuzz_decoders` runs a long one). The corpus is the valid encodings built
//! below plus proptest's saved regressions (`proptest-regressions/`).
//!
//! Two kinds of mutation: raw (random bytes anywhere: the crc must catch
//! them) and crafted (random values written into the fields, then the crc
//! recomputed, so the decoder's own range checks are what stands between
//! the bytes and the code that trusts them). The property: decoding never
//! panics, and whatever decodes re-encodes (the encoders assert their own
//! round trip, so a decoded value that no encoder would write is caught).

use layoutd_core::config::StackConfig;
use layoutd_core::OpenMode;
use layoutd_targets::opt::config::Geometry as OptGeometry;
use layoutd_targets::opt::meta::{encode_map, pick_map, JournalBlock, MapImage};
use layoutd_targets::seglog::{
    Checkpoint, Entry, FlushMark, Geometry, ReplayStep, ReplayWalk, SegmentHeader, Seq,
};
use proptest::prelude::*;

fn geo() -> Geometry {
    Geometry::new(0, 1 << 20, 1024, 8).expect("valid")
}

fn header() -> SegmentHeader {
    SegmentHeader {
        seq: Seq(77),
        boot: 3,
        slots_used: 2,
        payload_crc: Some(0xDEAD_BEEF),
        entries: vec![
            Entry::Slot { start_sector: 100, sector_count: 2, slot: 0 },
            Entry::Invalidate { start_sector: 90, sector_count: 300 },
            Entry::Slot { start_sector: 8, sector_count: 1, slot: 1 },
        ],
    }
}

fn checkpoint() -> Checkpoint {
    Checkpoint {
        generation: 9,
        boot: 4,
        replay_from_seq: Seq(10),
        resume_seq: Seq(12),
        durable_upto: Seq(11),
    }
}

/// Writes `value`'s low bytes at `at` (clipped to the buffer).
fn put(b: &mut [u8], at: usize, value: u64, width: usize) {
    for i in 0..width {
        if at + i < b.len() {
            b[at + i] = (value >> (8 * i)) as u8;
        }
    }
}

/// Recomputes a crc32c stored at `at` (28 in every metadata block), computed
/// over `len` bytes with the field taken as zero.
fn fix_crc(b: &mut [u8], at: usize, len: usize) {
    put(b, at, 0, 4);
    let crc = crc32c::crc32c(&b[..len]);
    put(b, at, u64::from(crc), 4);
}

/// Values that break naive arithmetic.
fn nasty() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(0u64),
        Just(1),
        Just(u64::MAX),
        Just(u64::MAX - 1),
        Just(1 << 62),
        Just((1 << 62) + 1),
        Just(u64::from(u32::MAX)),
        Just(u64::from(u16::MAX)),
        any::<u64>(),
    ]
}

/// (offset, value, width in bytes) field writes.
fn crafted_writes(len: usize) -> impl Strategy<Value = Vec<(usize, u64, usize)>> {
    prop::collection::vec((0..len, nasty(), prop_oneof![Just(2usize), Just(4), Just(8)]), 1..6)
}

fn raw_writes(len: usize) -> impl Strategy<Value = Vec<(usize, u8)>> {
    prop::collection::vec((0..len, any::<u8>()), 1..16)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn segment_headers_never_panic(raw in raw_writes(1024), crafted in crafted_writes(1024), fix in any::<bool>()) {
        let g = geo();
        let mut b = header().encode(&g);
        let n = b.len();
        for &(at, v) in &raw { b[at % n] = v; }
        for &(at, v, w) in &crafted { put(&mut b, at % n, v, w); }
        if fix {
            let len = g.header_bytes as usize;
            fix_crc(&mut b, 28, len);
        }
        if let Ok(h) = SegmentHeader::decode(&b, &g) {
            let _ = h.encode(&g);
            // A walk over it never panics either, whatever seq or boot it carries.
            let mut w = ReplayWalk::new(checkpoint(), &g);
            let payload = vec![0u8; g.payload_bytes() as usize];
            let _ = w.offer(Ok(h), Some(&payload));
        }
    }

    #[test]
    fn checkpoints_and_flush_marks_never_panic(raw in raw_writes(512), crafted in crafted_writes(512), fix in any::<bool>()) {
        let g = geo();
        for which in 0..2 {
            let mut b = if which == 0 {
                checkpoint().encode(&g)
            } else {
                FlushMark { generation: 5, boot: 2, durable_upto: Seq(40) }.encode(&g)
            };
            let n = b.len();
        for &(at, v) in &raw { b[at % n] = v; }
            for &(at, v, w) in &crafted { put(&mut b, at % n, v, w); }
            if fix { fix_crc(&mut b, 28, 512); }
            if which == 0 {
                if let Ok(ck) = Checkpoint::decode(&b, &g) {
                    let _ = ck.encode(&g);
                    // Walking from any accepted checkpoint never overflows.
                    let mut w = ReplayWalk::new(ck, &g);
                    while let Some(_loc) = w.next_location(&g) {
                        let h = header();
                        if let ReplayStep::Stop(_) = w.offer(Ok(h), None) { break; }
                    }
                }
            } else if let Ok(m) = FlushMark::decode(&b, &g) {
                let _ = m.encode(&g);
            }
        }
    }

    /// The `opt` map and journal blocks.
    #[test]
    fn opt_maps_and_journal_blocks_never_panic(raw in raw_writes(4096), crafted in crafted_writes(600), fix in any::<bool>()) {
        let g = OptGeometry::new(1 << 20, 256 << 10, 4 << 20, 4096, 4).expect("valid");
        let map = MapImage { runs: vec![(10, 3, 0), (100, 2, 5), (7, 1, 9)], extras: vec![(100, 2, 12)], dirty: vec![1, 9] };
        for which in 0..2 {
            let mut b = if which == 0 {
                let mut b = encode_map(&g, 3, &map);
                b.resize(g.map_bytes as usize, 0);
                b
            } else {
                JournalBlock { map_generation: 3, slots: vec![1, 2, 40], maps: vec![(9, 2, 5)] }.encode(7)
            };
            let n = b.len();
            for &(at, v) in &raw { b[at % n] = v; }
            for &(at, v, w) in &crafted { put(&mut b, at % n, v, w); }
            if fix { fix_crc(&mut b, 28, n); }
            if which == 0 {
                let blank = vec![0u8; n];
                if let Ok((generation, m, _)) = pick_map(&g, &b, &blank) {
                    let _ = encode_map(&g, generation, &m);
                }
            } else if let Ok(j) = JournalBlock::decode(&b, g.slot_count) {
                let _ = j.encode(1);
            }
        }
    }

    /// The stack config: mutated example configs over devices of any size
    /// either build or are refused with an error, never a panic.
    #[test]
    fn stack_configs_build_or_are_refused(
        which in 0..EXAMPLES.len(),
        raw in prop::collection::vec((any::<usize>(), any::<u8>()), 0..4),
        replace in prop::option::of((0..8usize, nasty())),
        device_bytes in prop_oneof![Just(0u64), Just(512), Just(3_000_000), Just(64 << 20), Just(1 << 40), Just(u64::MAX), any::<u64>()],
    ) {
        let mut text = EXAMPLES[which].to_string();
        // Replace the n-th number in the text by a nasty one.
        if let Some((n, v)) = replace {
            let spans: Vec<(usize, usize)> = number_spans(&text);
            if let Some(&(a, e)) = spans.get(n % spans.len().max(1)) {
                text.replace_range(a..e, &v.to_string());
            }
        }
        let mut bytes = text.into_bytes();
        for &(at, v) in &raw {
            if !bytes.is_empty() {
                let i = at % bytes.len();
                bytes[i] = v;
            }
        }
        if let Ok(text) = String::from_utf8(bytes) {
            if let Ok(cfg) = StackConfig::parse(&text, "fuzz") {
                let _ = layoutd_targets::build_stack(&cfg, device_bytes, OpenMode::Format);
                let _ = layoutd_targets::build_stack(&cfg, device_bytes, OpenMode::Open { clean: false, accept_loss: false });
            }
        }
    }
}

const EXAMPLES: [&str; 7] = [
    include_str!("../../../examples/opt.toml"),
    include_str!("../../../examples/linear.toml"),
    include_str!("../../../examples/pool.toml"),
    include_str!("../../../examples/trace.toml"),
    include_str!("../../../examples/dcd.toml"),
    include_str!("../../../examples/dcd-physical.toml"),
    "version = 1\n[[layer]]\ntarget = \"dcd\"\nlog_length = \"64KiB\"\nsegment_bytes = 4096\nslot_bytes = 512\nbuffer_count = 3\nbypass_bytes = 4096\npending_max = 16\n[[layer]]\ntarget = \"linear\"\n[[layer.segment]]\noffset = 4096\nlength = 65536\n[[layer.segment]]\noffset = 1048576\n",
];

/// Byte ranges of the decimal numbers in `text`.
fn number_spans(text: &str) -> Vec<(usize, usize)> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i].is_ascii_digit() {
            let a = i;
            while i < b.len() && b[i].is_ascii_digit() {
                i += 1;
            }
            out.push((a, i));
        } else {
            i += 1;
        }
    }
    out
}
