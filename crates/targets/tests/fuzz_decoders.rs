//! Byte-mutation fuzzing of the targets crate's public on-disk decoders
//! (the segment log's header, slot summary, checkpoints, flush mark and
//! chain checkpoint, with the ring and chain walks they drive; `log`'s map
//! pages; `opt`'s map and journal) and of the stack config. The private
//! formats (`pool`'s and `replica`'s metadata) are fuzzed in their modules
//! (`fuzz` tests), every target's recovery in `layoutd-runtime`'s
//! `fuzz_images`. A bounded pass runs in the default suite;
//! `PROPTEST_CASES=1000000 cargo test -p layoutd-targets --test
//! fuzz_decoders` runs a long one. The corpus is the valid encodings built
//! below plus proptest's saved regressions (`*.proptest-regressions`).
//!
//! Two kinds of mutation: raw (random bytes anywhere: the crc must catch
//! them) and crafted (random values written into the fields, then the crc
//! recomputed, so the decoder's own range checks are what stands between
//! the bytes and the code that trusts them). The property: decoding never
//! panics, whatever decodes re-encodes (the encoders assert their own
//! round trip, so a decoded value that no encoder would write is caught),
//! and no single allocation is larger than a small multiple of the input
//! (a crafted count is refused before it sizes anything).

use layoutd_core::config::StackConfig;
use layoutd_core::OpenMode;
use layoutd_targets::log::map::{MapGeometry, PageOwner, SlotMap, UNMAPPED};
use layoutd_targets::opt::config::Geometry as OptGeometry;
use layoutd_targets::opt::meta::{encode_map, pick_map, JournalBlock, MapImage};
use layoutd_targets::seglog::header::CHECKPOINT_BYTES;
use layoutd_targets::seglog::sketch::{SketchCell, SKETCH_CELLS};
use layoutd_targets::seglog::{
    ChainCheckpoint, ChainWalk, Checkpoint, Entry, FlushMark, Geometry, MapDigest, MapSketch, ReplayStep,
    ReplayWalk, SegLoc, SegmentHeader, Seq, MAP_DIGEST_PRIME,
};
use proptest::prelude::*;

#[path = "../../core/tests/support/fuzz.rs"]
mod fuzz;
#[path = "support/seglog_legacy.rs"]
mod seglog_legacy;
use fuzz::{
    allocation_bound, config, crafted_writes, fix_crc, largest_allocation, mutate, nasty, number_spans,
    raw_writes,
};
use seglog_legacy::{downgrade_block, downgrade_block_to, Release};

fn geo() -> Geometry {
    Geometry::new(0, 1 << 20, 1024, 8).expect("valid")
}

fn header() -> SegmentHeader {
    SegmentHeader {
        seq: Seq(77),
        boot: 3,
        format_id: 7,
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
        format_id: 7,
    }
}

/// The chained log's geometry: 8 slots of 512 bytes, a few segments.
fn chain_geo() -> Geometry {
    Geometry::new(0, 64 << 10, 512, 8).expect("valid")
}

/// A chained log as the `log` target writes it: location 0 holds seq 5 in
/// three parts (the header, summaries in slots 1 and 3, each naming the
/// next with a continue link), naming location 1, which holds seq 6 in
/// one part and names none. One buffer per location (header area, slots).
fn chain_disk(geo: &Geometry) -> Vec<Vec<u8>> {
    let (hb, sb) = (geo.header_bytes as usize, geo.slot_bytes as usize);
    let mut disk = vec![vec![0u8; hb + 8 * sb]; geo.segment_count as usize];
    let parts: [(usize, u64, Option<u16>, u16, Entry); 4] = [
        (0, 5, None, 0, Entry::Continue { slot: 1 }),
        (0, 5, Some(1), 2, Entry::Continue { slot: 3 }),
        (0, 5, Some(3), 4, Entry::Next { loc: Some(SegLoc(1)) }),
        (1, 6, None, 0, Entry::Next { loc: None }),
    ];
    for (loc, seq, at, data, link) in parts {
        let seg = &mut disk[loc];
        let d = hb + data as usize * sb;
        seg[d..d + sb].fill(data as u8 + 1);
        let h = SegmentHeader {
            seq: Seq(seq),
            boot: 2,
            format_id: 7,
            slots_used: 1,
            payload_crc: Some(SegmentHeader::payload_crc_of(&seg[d..d + sb])),
            entries: vec![
                Entry::Slot { start_sector: u64::from(data) * 3, sector_count: 1, slot: data },
                Entry::Invalidate { start_sector: 40, sector_count: 9 },
                link,
            ],
        };
        match at {
            None => seg[..hb].copy_from_slice(&h.encode(geo)),
            Some(s) => {
                let o = hb + s as usize * sb;
                seg[o..o + sb].copy_from_slice(&h.encode_slot(geo));
            }
        }
    }
    disk
}

/// `decode(b)`, checking that it allocated at most what its input bounds.
fn bounded<R>(b: &[u8], decode: impl FnOnce(&[u8]) -> R) -> Result<R, TestCaseError> {
    let (r, bytes) = largest_allocation(|| decode(b));
    prop_assert!(bytes <= allocation_bound(b.len()), "{bytes} bytes allocated decoding {} bytes", b.len());
    Ok(r)
}

proptest! {
    #![proptest_config(config(512))]

    #[test]
    fn segment_headers_never_panic(
        raw in raw_writes(1024),
        crafted in crafted_writes(1024),
        fix in any::<bool>(),
        legacy in any::<bool>(),
    ) {
        let g = geo();
        let mut b = header().encode(&g);
        if legacy {
            b = downgrade_block(&b).expect("a header");
        }
        mutate(&mut b, &raw, &crafted);
        if fix {
            let len = g.header_bytes as usize;
            fix_crc(&mut b, 28, len);
        }
        if let Ok(h) = bounded(&b, |b| SegmentHeader::decode(b, &g))? {
            let _ = h.encode(&g);
            // A walk over it never panics either, whatever seq or boot it carries.
            let mut w = ReplayWalk::new(checkpoint(), &g);
            let payload = vec![0u8; g.payload_bytes() as usize];
            let _ = w.offer(Ok(h), Some(&payload));
        }
    }

    #[test]
    fn checkpoints_and_flush_marks_never_panic(
        raw in raw_writes(512),
        crafted in crafted_writes(512),
        fix in any::<bool>(),
        legacy in any::<bool>(),
    ) {
        let g = geo();
        for which in 0..2 {
            let mut b = if which == 0 {
                let b = checkpoint().encode(&g);
                if legacy { downgrade_block(&b).expect("a checkpoint") } else { b }
            } else {
                FlushMark { generation: 5, boot: 2, durable_upto: Seq(40) }.encode(&g)
            };
            mutate(&mut b, &raw, &crafted);
            if fix { fix_crc(&mut b, 28, 512); }
            if which == 0 {
                if let Ok(ck) = bounded(&b, |b| Checkpoint::decode(b, &g))? {
                    let _ = ck.encode(&g);
                    // Walking from any accepted checkpoint never overflows.
                    let mut w = ReplayWalk::new(ck, &g);
                    while let Some(_loc) = w.next_location(&g) {
                        let h = header();
                        if let ReplayStep::Stop(_) = w.offer(Ok(h), None) { break; }
                    }
                }
            } else if let Ok(m) = bounded(&b, |b| FlushMark::decode(b, &g))? {
                let _ = m.encode(&g);
            }
        }
    }

    /// The `log` target's chained log: its checkpoint, and a walk over
    /// segments whose header or slot summaries (partial segments) carry
    /// the mutations, crc fixed or not; the walk ends, never panics, and
    /// applies only summaries that decode.
    #[test]
    fn chain_checkpoints_and_chain_walks_never_panic(
        raw in raw_writes(1 << 16),
        crafted in crafted_writes(1 << 16),
        ck_crafted in crafted_writes(CHECKPOINT_BYTES),
        fix in any::<bool>(),
        legacy in any::<bool>(),
        map_release in 0..5u8,
        digest in any::<u64>(),
        weighted in 0..MAP_DIGEST_PRIME,
        cells in proptest::collection::vec(any::<u32>(), SKETCH_CELLS * 4),
    ) {
        let g = chain_geo();
        let id = if legacy { 0 } else { 7 };
        // The checkpoint: of the release before format ids (version 3),
        // or with this id of the release before map ids (version 4), of
        // the release before the map's digest (version 5), of the release
        // before the map's sketch (version 6) or of this build (version
        // 7), its map pages of the version before (`legacy_map`) or not;
        // version 5 counts the map pages written, 6 also records the map's
        // digest, 7 also its sketch of written pages (any cells).
        let legacy_map = legacy || map_release == 1 || map_release == 2;
        let map_pages_written = if legacy || map_release == 2 { 0 } else { 2 };
        let mut map_sketch = MapSketch::default();
        for (c, v) in map_sketch.cells.iter_mut().zip(cells.chunks(4)) {
            *c = SketchCell { count: v[0], pages: v[1], check: v[2], generations: v[3] };
        }
        let ck = ChainCheckpoint { generation: 3, boot: 2, next_seq: Seq(5), next_loc: Some(SegLoc(0)), format_id: id, legacy_map, map_pages_written, map_digest: Some(MapDigest { sum: digest, weighted }), map_sketch: Some(map_sketch) };
        let mut b = ck.encode(&g);
        if legacy {
            b = downgrade_block(&b).expect("a chain checkpoint");
        } else if map_release == 2 {
            b = downgrade_block_to(&b, Release::BeforeMapIds, None).expect("a chain checkpoint");
        } else if map_release == 3 {
            b = downgrade_block_to(&b, Release::BeforeMapDigest, None).expect("a chain checkpoint");
        } else if map_release == 4 {
            b = downgrade_block_to(&b, Release::BeforeMapSketch, None).expect("a chain checkpoint");
        }
        mutate(&mut b, &[], &ck_crafted);
        if fix { fix_crc(&mut b, 28, CHECKPOINT_BYTES); }
        let ck = match bounded(&b, |b| ChainCheckpoint::decode(b, &g))? {
            // Versions before 6 carry no digest, before 7 no sketch; this
            // build writes both.
            Ok(c) => { let _ = ChainCheckpoint { map_digest: c.map_digest.or(Some(MapDigest::default())), map_sketch: c.map_sketch.or(Some(MapSketch::default())), ..c.clone() }.encode(&g); c }
            Err(_) => ck,
        };
        // Mutations land in the first two locations (where the chain is).
        let mut disk = chain_disk(&g);
        if legacy {
            let sizes = [g.header_bytes as usize, g.slot_bytes as usize];
            disk.iter_mut().for_each(|seg| { seglog_legacy::downgrade_image(seg, &sizes); });
        }
        let stride = disk[0].len();
        let (hb, sb) = (g.header_bytes as usize, g.slot_bytes as usize);
        let mut touched = Vec::new();
        let writes = raw.iter().map(|&(at, v)| (at, u64::from(v), 1)).chain(crafted.iter().copied());
        for (at, v, w) in writes {
            let at = at % (2 * stride);
            let (loc, off) = (at / stride, at % stride);
            fuzz::put(&mut disk[loc], off, v, w);
            // The summary block the write landed in: the header area or a slot.
            touched.push(if off < hb { (loc, 0, hb) } else { (loc, hb + (off - hb) / sb * sb, sb) });
        }
        if fix {
            for (loc, start, len) in touched {
                fix_crc(&mut disk[loc][start..start + len], 28, len);
            }
        }
        let mut w = ChainWalk::new(&ck, &g);
        let mut steps = 0;
        while let Some((loc, seq)) = w.next() {
            steps += 1;
            prop_assert!(steps <= g.segment_count, "the walk revisits a location");
            let applied = bounded(&disk[loc.0 as usize], |seg| w.offer_segment(seg, &g))?;
            for (i, h) in applied.into_iter().enumerate() {
                prop_assert_eq!(h.seq, seq);
                // What was applied re-encodes where it was read from.
                let _ = if i == 0 { h.encode(&g) } else { h.encode_slot(&g) };
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
            mutate(&mut b, &raw, &crafted);
            if fix { fix_crc(&mut b, 28, n); }
            if which == 0 {
                let blank = vec![0u8; n];
                if let Ok((generation, m, _)) = bounded(&b, |b| pick_map(&g, b, &blank))? {
                    let _ = encode_map(&g, generation, &m);
                }
            } else if let Ok(j) = bounded(&b, |b| JournalBlock::decode(b, g.slot_count))? {
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
        // 16 GiB at most among the fixed sizes: a `log` volume holds its
        // whole map in RAM (1 TiB: an 800 MiB map, 20 s to build here),
        // by design, and the default pass must stay fast.
        device_bytes in prop_oneof![Just(0u64), Just(512), Just(3_000_000), Just(64 << 20), Just(1 << 34), Just(u64::MAX), any::<u64>()],
    ) {
        let mut text = EXAMPLES[which].to_string();
        // Replace the n-th number in the text by a nasty one.
        if let Some((n, v)) = replace {
            let spans: Vec<(usize, usize)> = number_spans(text.as_bytes(), false);
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
                let _ = layoutd_targets::build_stack(&cfg, device_bytes, OpenMode::format(1));
                let _ = layoutd_targets::build_stack(&cfg, device_bytes, OpenMode::Open { clean: false, accept_loss: false });
            }
        }
    }
}

const EXAMPLES: [&str; 10] = [
    include_str!("../../../examples/log.toml"),
    include_str!("../../../examples/replica.toml"),
    include_str!("../../../examples/replica-all-goals.toml"),
    include_str!("../../../examples/opt.toml"),
    include_str!("../../../examples/linear.toml"),
    include_str!("../../../examples/pool.toml"),
    include_str!("../../../examples/trace.toml"),
    include_str!("../../../examples/dcd.toml"),
    include_str!("../../../examples/dcd-physical.toml"),
    "version = 1\n[[layer]]\ntarget = \"dcd\"\nlog_length = \"64KiB\"\nsegment_bytes = 4096\nslot_bytes = 512\nbuffer_count = 3\nbypass_bytes = 4096\npending_max = 16\n[[layer]]\ntarget = \"linear\"\n[[layer.segment]]\noffset = 4096\nlength = 65536\n[[layer.segment]]\noffset = 1048576\n",
];

/// The chained corpus is a whole chain: unmutated, the walk applies every
/// summary of both segments and ends where the last names no successor
/// (so the fuzz above starts from bytes that reach the deep paths).
#[test]
fn the_chain_corpus_walks_to_its_end() {
    let g = chain_geo();
    let disk = chain_disk(&g);
    let ck = ChainCheckpoint {
        generation: 3,
        boot: 2,
        next_seq: Seq(5),
        next_loc: Some(SegLoc(0)),
        format_id: 7,
        legacy_map: false,
        map_pages_written: 2,
        map_digest: Some(MapDigest { sum: 9, weighted: 9 }),
        map_sketch: Some(MapSketch::default()),
    };
    let mut w = ChainWalk::new(&ck, &g);
    let mut seqs = Vec::new();
    while let Some((loc, _)) = w.next() {
        seqs.extend(w.offer_segment(&disk[loc.0 as usize], &g).iter().map(|h| h.seq.0));
    }
    assert_eq!(seqs, vec![5, 5, 5, 6]);
    assert_eq!(w.stopped(), Some(&layoutd_targets::seglog::StopReason::End));
}

/// Blocks of the release before format identities (headers and ring
/// checkpoints of version 2, chain checkpoints of version 3) are read as
/// format id 0, field for field; that release's codecs (this build's with
/// the older version) refuse this build's blocks by their version number,
/// not as damage; a version newer than this build's is refused naming both.
#[test]
fn the_release_before_format_ids_is_read_as_id_0_and_refuses_these_blocks_by_version() {
    use layoutd_core::metablock::{MetaBlockCodec, MetaError};
    use layoutd_targets::seglog::{HeaderError, CHAIN_FORMAT_VERSION, CHECKPOINT_VERSION, HEADER_VERSION};
    let g = geo();
    let h = SegmentHeader { format_id: 0, ..header() };
    let ck = Checkpoint { format_id: 0, ..checkpoint() };
    let chain = ChainCheckpoint {
        generation: 3,
        boot: 2,
        next_seq: Seq(5),
        next_loc: None,
        format_id: 0,
        legacy_map: true,
        map_pages_written: 0,
        map_digest: Some(MapDigest::default()),
        map_sketch: Some(MapSketch::default()),
    };
    let old_h = downgrade_block(&h.encode(&g)).expect("a header");
    let old_ck = downgrade_block(&ck.encode(&g)).expect("a checkpoint");
    let old_chain = downgrade_block(&chain.encode(&g)).expect("a chain checkpoint");
    let version = |b: &[u8]| u32::from_le_bytes(b[8..12].try_into().expect("4"));
    assert_eq!((version(&old_h), version(&old_ck), version(&old_chain)), (2, 2, 3));
    assert_eq!(SegmentHeader::decode(&old_h, &g), Ok(h.clone()));
    assert_eq!(Checkpoint::decode(&old_ck, &g), Ok(ck.clone()));
    assert_eq!(
        ChainCheckpoint::decode(&old_chain, &g),
        Ok(ChainCheckpoint { map_digest: None, map_sketch: None, ..chain.clone() })
    );
    // A summary in a slot, chained (the log's partial segments).
    let cg = chain_geo();
    let disk = chain_disk(&cg);
    let (hb, sb) = (cg.header_bytes as usize, cg.slot_bytes as usize);
    let slot1 = &disk[0][hb + sb..hb + 2 * sb];
    let new = SegmentHeader::decode_slot(slot1, &cg).expect("a summary");
    let old = downgrade_block(slot1).expect("a summary");
    assert_eq!(SegmentHeader::decode_slot(&old, &cg), Ok(SegmentHeader { format_id: 0, ..new }));
    // The release before reads only its own versions.
    for (b, old_version, new_version) in [
        (h.encode(&g), 2, HEADER_VERSION),
        (ck.encode(&g), 2, CHECKPOINT_VERSION),
        (chain.encode(&g), 3, CHAIN_FORMAT_VERSION),
    ] {
        let magic: [u8; 8] = b[0..8].try_into().expect("8");
        let codec = MetaBlockCodec { magic, version: old_version, block_bytes: b.len() };
        assert_eq!(codec.decode(&b), Err(MetaError::Version(new_version)));
    }
    // A later version: refused by its number, saying to upgrade.
    let mut later = chain.encode(&g);
    later[8..12].copy_from_slice(&(CHAIN_FORMAT_VERSION + 1).to_le_bytes());
    fix_crc(&mut later, 28, CHECKPOINT_BYTES);
    let e = ChainCheckpoint::decode(&later, &g).unwrap_err();
    assert_eq!(e, HeaderError::OtherVersion { found: CHAIN_FORMAT_VERSION + 1, reads: CHAIN_FORMAT_VERSION });
    assert!(e.to_string().contains("upgrade layoutd"), "{e}");
    // The chain checkpoint of version 2 (before partial segments) stays refused.
    let mut older = old_chain.clone();
    older[8..12].copy_from_slice(&2u32.to_le_bytes());
    fix_crc(&mut older, 28, CHECKPOINT_BYTES);
    assert!(ChainCheckpoint::decode(&older, &g).unwrap_err().to_string().contains("older layoutd"));
}

/// The `log`'s map geometry the map page tests use: 1500 blocks (a full
/// page and a short one) over 100 slots.
fn map_geo() -> MapGeometry {
    MapGeometry { offset_bytes: 8192, page_count: 2, slot_total: 100 }
}

fn map_of(extents: bool) -> SlotMap {
    let mut map = SlotMap::new(1500, 100, extents);
    map.set(3, 7);
    map.set(1200, 99);
    map
}

proptest! {
    #![proptest_config(config(512))]

    /// A `log` map page copy (this build's version, or the release
    /// before's, which carries no format id) with random bytes anywhere,
    /// or crafted numbers in its fields (crc fixed or not), decoded for
    /// its own format, another, or a volume of the release before: refused,
    /// not the owner's, or exactly the page's entries, each a slot of the
    /// log or unmapped; never more allocated than the page holds.
    #[test]
    fn map_pages_never_panic(
        raw in raw_writes(4096),
        crafted in crafted_writes(64),
        fix in any::<bool>(),
        page in 0u32..2,
        extents in any::<bool>(),
        old in any::<bool>(),
        owner_id in prop_oneof![Just(9u64), any::<u64>()],
        legacy in any::<bool>(),
    ) {
        let g = map_geo();
        let mut b = g.encode(page, &map_of(extents), 5, 9);
        if old {
            b = downgrade_block_to(&b, Release::BeforeMapIds, Some(9)).expect("a map page");
        }
        mutate(&mut b, &raw, &crafted);
        if fix {
            fix_crc(&mut b, 28, 4096);
        }
        let owner = PageOwner { format_id: owner_id, legacy };
        if let Ok(Some((_, entries))) = bounded(&b, |b| g.decode(page, b, 1500, owner))? {
            prop_assert_eq!(entries.len() as u64, g.blocks_of(page, 1500).count() as u64);
            prop_assert!(entries.iter().all(|&e| e == UNMAPPED || e < 100));
        }
    }
}

/// Map pages of the release before (version 1: page index and entry
/// count, no format id) are read, entry for entry, on a volume of that
/// release (`legacy`) and are another format's on a volume formatted by
/// this build; that release's codec refuses this build's pages by their
/// version; chain checkpoints of that release (version 4) read with
/// `legacy_map` set, and it refuses this build's (version 6) by version;
/// so does the release before the map's digest (version 5, read without
/// one).
#[test]
fn the_release_before_map_ids_is_read_on_its_volumes_only_and_refuses_these_blocks_by_version() {
    use layoutd_core::metablock::{MetaBlockCodec, MetaError};
    use layoutd_targets::log::map::{PAGE_LEGACY_VERSION, PAGE_VERSION};
    use layoutd_targets::seglog::CHAIN_FORMAT_VERSION;
    let g = map_geo();
    for page in 0..2 {
        let new = g.encode(page, &map_of(true), 5, 9);
        let old = downgrade_block_to(&new, Release::BeforeMapIds, Some(9)).expect("a map page");
        let ours = g.decode(page, &new, 1500, PageOwner { format_id: 9, legacy: false }).expect("valid");
        assert!(ours.is_some());
        for format_id in [0, 9] {
            assert_eq!(g.decode(page, &old, 1500, PageOwner { format_id, legacy: true }), Ok(ours.clone()));
            assert_eq!(g.decode(page, &old, 1500, PageOwner { format_id, legacy: false }), Ok(None));
        }
        // A page of version 1 in the wrong place is refused on its volume.
        let e = g.decode(1 - page, &old, 1500, PageOwner { format_id: 9, legacy: true }).unwrap_err();
        assert!(e.to_string().contains("belongs"), "{e}");
        let codec = MetaBlockCodec { magic: *b"LDLOGMP1", version: PAGE_LEGACY_VERSION, block_bytes: 4096 };
        assert_eq!(codec.decode(&new), Err(MetaError::Version(PAGE_VERSION)));
    }
    let cg = chain_geo();
    let mut sketch = MapSketch::default();
    for p in [0, 7, 1013] {
        sketch.insert(p);
        sketch.replace(p, 0, 0x1_0000_0003 + u64::from(p));
    }
    let chain = ChainCheckpoint {
        generation: 3,
        boot: 2,
        next_seq: Seq(5),
        next_loc: None,
        format_id: 9,
        legacy_map: false,
        map_pages_written: 2,
        map_digest: Some(MapDigest { sum: 0x0123_4567_89ab_cdef, weighted: MAP_DIGEST_PRIME - 1 }),
        map_sketch: Some(sketch),
    };
    let new = chain.encode(&cg);
    let old = downgrade_block_to(&new, Release::BeforeMapIds, None).expect("a chain checkpoint");
    assert_eq!(u32::from_le_bytes(old[8..12].try_into().expect("4")), 4);
    assert_eq!(
        ChainCheckpoint::decode(&old, &cg),
        Ok(ChainCheckpoint {
            legacy_map: true,
            map_pages_written: 0,
            map_digest: None,
            map_sketch: None,
            ..chain.clone()
        })
    );
    let codec = MetaBlockCodec { magic: *b"LDSEGCC1", version: 4, block_bytes: CHECKPOINT_BYTES };
    assert_eq!(codec.decode(&new), Err(MetaError::Version(CHAIN_FORMAT_VERSION)));
    // The release before the map's digest (version 5): read field for
    // field, without a digest; it refuses this build's by the version.
    let v5 = downgrade_block_to(&new, Release::BeforeMapDigest, None).expect("a chain checkpoint");
    assert_eq!(u32::from_le_bytes(v5[8..12].try_into().expect("4")), 5);
    assert_eq!(
        ChainCheckpoint::decode(&v5, &cg),
        Ok(ChainCheckpoint { map_digest: None, map_sketch: None, ..chain.clone() })
    );
    let codec = MetaBlockCodec { magic: *b"LDSEGCC1", version: 5, block_bytes: CHECKPOINT_BYTES };
    assert_eq!(codec.decode(&new), Err(MetaError::Version(CHAIN_FORMAT_VERSION)));
    // The release before the map's sketch (version 6): read field for
    // field, without a sketch; it refuses this build's by the version.
    let v6 = downgrade_block_to(&new, Release::BeforeMapSketch, None).expect("a chain checkpoint");
    assert_eq!(u32::from_le_bytes(v6[8..12].try_into().expect("4")), 6);
    assert_eq!(ChainCheckpoint::decode(&v6, &cg), Ok(ChainCheckpoint { map_sketch: None, ..chain.clone() }));
    let codec = MetaBlockCodec { magic: *b"LDSEGCC1", version: 6, block_bytes: CHECKPOINT_BYTES };
    assert_eq!(codec.decode(&new), Err(MetaError::Version(CHAIN_FORMAT_VERSION)));
    // The sketch follows the digests (offset 76): 24 cells of four u32,
    // every bit kept; the payload ends with it.
    for (i, c) in sketch.cells.iter().enumerate() {
        let at = 32 + 76 + 16 * i;
        assert_eq!(new[at..at + 4], c.count.to_le_bytes());
        assert_eq!(new[at + 4..at + 8], c.pages.to_le_bytes());
        assert_eq!(new[at + 8..at + 12], c.check.to_le_bytes());
        assert_eq!(new[at + 12..at + 16], c.generations.to_le_bytes());
    }
    assert!(sketch.cells.iter().any(|c| c.generations != 0));
    assert_eq!(u32::from_le_bytes(new[12..16].try_into().expect("4")) as usize, 76 + SKETCH_CELLS * 16);
    // The digests are the last fields of the payload (offsets 60 and 68),
    // every bit kept; a weighted digest not below the prime is refused.
    assert_eq!(new[32 + 60..32 + 68], 0x0123_4567_89ab_cdefu64.to_le_bytes());
    assert_eq!(new[32 + 68..32 + 76], (MAP_DIGEST_PRIME - 1).to_le_bytes());
    for w in [MAP_DIGEST_PRIME, u64::MAX] {
        let mut over = new.clone();
        over[32 + 68..32 + 76].copy_from_slice(&w.to_le_bytes());
        fix_crc(&mut over, 28, CHECKPOINT_BYTES);
        let e = ChainCheckpoint::decode(&over, &cg).expect_err("out of range");
        assert!(e.to_string().contains("weighted map digest"), "{e}");
    }
    // Unknown flags are refused.
    let mut flagged = new.clone();
    flagged[32 + 52] = 2;
    fix_crc(&mut flagged, 28, CHECKPOINT_BYTES);
    assert!(ChainCheckpoint::decode(&flagged, &cg).unwrap_err().to_string().contains("flags"));
}
