//! On-disk metadata of `replica`: the region record (must be durable) and
//! the map snapshot (an optimisation: replicas outliving a clean restart).
//!
//! **Region record.** It lists the blocks that may hold replica bytes on
//! disk (the *region*). Every such block was declared free by the file
//! system and has not been written by it since (as far as any flushed
//! state goes), so after any shutdown, clean or not, those blocks are free
//! and read as zeroes, whatever replica bytes they hold. Rules:
//! - a block joins the region (record written with FUA, completed) before
//!   any replica write to it is issued;
//! - a file-system write to a region block takes it out of the region once
//!   the write has landed, and the record without it is written (FUA)
//!   before the next upper flush, or the FUA write itself, completes. A
//!   crash before that loses only an unflushed write, which the
//!   durability rules allow.
//!
//! **Snapshot.** The replica map and the declared-free map, written in
//! blocks to one of two copies; the region record names the snapshot
//! generation that is *current* (nothing changed since it was taken), and
//! the first change after that clears the name (the cleared record is
//! written before the next flush completes). A clean open loads a named
//! snapshot; an unclean open never does (see `docs/replica.md`).
//!
//! Layout at the end of the lower device, after the volume:
//! `| record copy 0 | record copy 1 | snapshot copy 0 | snapshot copy 1 |`,
//! records of `meta_record_bytes`, snapshot copies of `snapshot_bytes / 2`
//! (blocks of `meta_record_bytes`); generation `g` goes to copy `g % 2`.
//!
//! Record payload: `volume_blocks u64, block_bytes u32, extent_count u32,
//! snapshot u64`, then per extent `start u64, length u64`, sorted,
//! disjoint, within the volume. Snapshot block payload: `index u32,
//! count u32`, then a slice of the stream `replica_extents u64,
//! declared_extents u64, (replica u64, length u64, original u64)...,
//! (start u64, length u64)...`.

use layoutd_core::metablock::{MetaBlockCodec, MetaError, Reader, GENERATION_READ_MAX};

/// The region record's codec for copies of `block_bytes`.
pub(crate) fn codec(block_bytes: u32) -> MetaBlockCodec {
    MetaBlockCodec { magic: *b"LDREPRG1", version: 1, block_bytes: block_bytes as usize }
}

/// The snapshot blocks' codec.
pub(crate) fn snapshot_codec(block_bytes: u32) -> MetaBlockCodec {
    MetaBlockCodec { magic: *b"LDREPSN1", version: 1, block_bytes: block_bytes as usize }
}

const PAYLOAD_HEAD_BYTES: usize = 24;
const EXTENT_BYTES: usize = 16;
const SNAP_HEAD_BYTES: usize = 8;

/// A decoded region record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct RegionRecord {
    pub extents: Vec<(u64, u64)>,
    /// The current snapshot's generation, 0 for none.
    pub snapshot: u64,
}

/// How many extents a record of `block_bytes` holds.
pub(crate) fn extents_max(block_bytes: u32) -> usize {
    (codec(block_bytes).payload_bytes_max() - PAYLOAD_HEAD_BYTES) / EXTENT_BYTES
}

/// Encodes the region; `None` if it has more extents than a record holds.
pub(crate) fn encode(
    record_bytes: u32,
    generation: u64,
    geometry: (u64, u32),
    rec: &RegionRecord,
) -> Option<Vec<u8>> {
    let (volume_blocks, block_bytes) = geometry;
    if rec.extents.len() > extents_max(record_bytes) {
        return None;
    }
    let mut p = Vec::with_capacity(PAYLOAD_HEAD_BYTES + rec.extents.len() * EXTENT_BYTES);
    p.extend_from_slice(&volume_blocks.to_le_bytes());
    p.extend_from_slice(&block_bytes.to_le_bytes());
    p.extend_from_slice(&(rec.extents.len() as u32).to_le_bytes());
    p.extend_from_slice(&rec.snapshot.to_le_bytes());
    for &(s, n) in &rec.extents {
        assert!(n > 0 && s + n <= volume_blocks, "region extent ({s}, {n}) within the volume");
        p.extend_from_slice(&s.to_le_bytes());
        p.extend_from_slice(&n.to_le_bytes());
    }
    Some(codec(record_bytes).encode(generation, &p).expect("the payload fits: counted above"))
}

fn extents(
    r: &mut Reader<'_>,
    count: u64,
    volume_blocks: u64,
    what: &str,
) -> Result<Vec<(u64, u64)>, MetaError> {
    let mut out: Vec<(u64, u64)> = Vec::with_capacity((count as usize).min(r.remaining() / EXTENT_BYTES));
    for i in 0..count {
        let (s, n) = (r.u64()?, r.u64()?);
        let end = s.checked_add(n).filter(|&e| n > 0 && e <= volume_blocks);
        let after_prev = out.last().is_none_or(|&(ps, pn)| ps + pn < s);
        if end.is_none() || !after_prev {
            return Err(MetaError::Malformed(format!(
                "{what} extent {i} ({s}, {n}) is out of order or range"
            )));
        }
        out.push((s, n));
    }
    Ok(out)
}

fn check_geometry(r: &mut Reader<'_>, volume_blocks: u64, block_bytes: u32) -> Result<(), MetaError> {
    let (vb, bb) = (r.u64()?, r.u32()?);
    if vb != volume_blocks || bb != block_bytes {
        return Err(MetaError::Malformed(format!(
            "written for {vb} blocks of {bb} bytes; this volume has {volume_blocks} of {block_bytes} (config changed?)"
        )));
    }
    Ok(())
}

/// Decodes a record payload, checking it against this volume's geometry.
pub(crate) fn decode(
    payload: &[u8],
    volume_blocks: u64,
    block_bytes: u32,
) -> Result<RegionRecord, MetaError> {
    let mut r = Reader::new(payload);
    check_geometry(&mut r, volume_blocks, block_bytes)?;
    let count = r.u32()?;
    let snapshot = r.u64()?;
    if snapshot > GENERATION_READ_MAX {
        // The next snapshot is written with a generation past it.
        return Err(MetaError::Malformed(format!(
            "snapshot generation {snapshot} is past {GENERATION_READ_MAX}"
        )));
    }
    let extents = extents(&mut r, u64::from(count), volume_blocks, "region")?;
    if r.remaining() != 0 {
        return Err(MetaError::Malformed(format!("{} bytes after the last extent", r.remaining())));
    }
    Ok(RegionRecord { extents, snapshot })
}

/// A map snapshot: replica extents `(replica, length, original)` in
/// replica order, and the declared-free extents.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Snapshot {
    pub replicas: Vec<(u64, u64, u64)>,
    pub declared: Vec<(u64, u64)>,
}

/// Encodes a snapshot into blocks of `block_bytes` (one buffer, the
/// blocks end to end); `None` if it needs more than `blocks_max` blocks.
pub(crate) fn encode_snapshot(
    block_bytes: u32,
    generation: u64,
    blocks_max: u64,
    snap: &Snapshot,
) -> Option<Vec<u8>> {
    let mut stream = Vec::with_capacity(16 + snap.replicas.len() * 24 + snap.declared.len() * 16);
    stream.extend_from_slice(&(snap.replicas.len() as u64).to_le_bytes());
    stream.extend_from_slice(&(snap.declared.len() as u64).to_le_bytes());
    for &(l, n, o) in &snap.replicas {
        for v in [l, n, o] {
            stream.extend_from_slice(&v.to_le_bytes());
        }
    }
    for &(s, n) in &snap.declared {
        stream.extend_from_slice(&s.to_le_bytes());
        stream.extend_from_slice(&n.to_le_bytes());
    }
    let c = snapshot_codec(block_bytes);
    let chunk = c.payload_bytes_max() - SNAP_HEAD_BYTES;
    let count = stream.len().div_ceil(chunk) as u64;
    if count > blocks_max || count > u64::from(u32::MAX) {
        return None;
    }
    let mut out = Vec::with_capacity(count as usize * block_bytes as usize);
    for (i, part) in stream.chunks(chunk).enumerate() {
        let mut p = Vec::with_capacity(SNAP_HEAD_BYTES + part.len());
        p.extend_from_slice(&(i as u32).to_le_bytes());
        p.extend_from_slice(&(count as u32).to_le_bytes());
        p.extend_from_slice(part);
        out.extend(c.encode(generation, &p).expect("fits: chunked to the payload"));
    }
    Some(out)
}

/// Decodes a snapshot copy (`bytes`: the copy from its start) written at
/// `generation`, checking every block and every extent.
pub(crate) fn decode_snapshot(
    bytes: &[u8],
    block_bytes: u32,
    generation: u64,
    volume_blocks: u64,
) -> Result<Snapshot, MetaError> {
    let c = snapshot_codec(block_bytes);
    let bb = block_bytes as usize;
    let mut stream = Vec::new();
    let mut count = 1u32;
    let mut i = 0u32;
    while i < count {
        let at = i as usize * bb;
        let block =
            bytes.get(at..at + bb).ok_or_else(|| MetaError::Malformed(format!("block {i} past the copy")))?;
        let d = c.decode(block)?;
        if d.generation != generation {
            return Err(MetaError::Malformed(format!(
                "block {i} is of generation {}, not {generation}",
                d.generation
            )));
        }
        let mut r = Reader::new(&d.payload);
        let (index, n) = (r.u32()?, r.u32()?);
        if index != i || (i > 0 && n != count) || n == 0 {
            return Err(MetaError::Malformed(format!("block {i} says it is {index} of {n}")));
        }
        count = n;
        stream.extend_from_slice(r.bytes(r.remaining())?);
        i += 1;
    }
    let mut r = Reader::new(&stream);
    let (nr, nd) = (r.u64()?, r.u64()?);
    let mut replicas: Vec<(u64, u64, u64)> = Vec::with_capacity((nr as usize).min(stream.len() / 24));
    for k in 0..nr {
        let (l, n, o) = (r.u64()?, r.u64()?, r.u64()?);
        let fits = |x: u64| x.checked_add(n).is_some_and(|e| n > 0 && e <= volume_blocks);
        let ordered = replicas.last().is_none_or(|&(pl, pn, _)| pl + pn <= l);
        if !fits(l) || !fits(o) || !ordered {
            return Err(MetaError::Malformed(format!(
                "replica extent {k} ({l}, {n}, {o}) is out of order or range"
            )));
        }
        replicas.push((l, n, o));
    }
    let declared = extents(&mut r, nd, volume_blocks, "declared-free")?;
    Ok(Snapshot { replicas, declared })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn region_records_round_trip_and_refuse_damage() {
        let rec = RegionRecord { extents: vec![(0, 4), (10, 90)], snapshot: 9 };
        let b = encode(4096, 7, (100, 4096), &rec).unwrap();
        let d = codec(4096).decode(&b).unwrap();
        assert_eq!(d.generation, 7);
        assert_eq!(decode(&d.payload, 100, 4096).unwrap(), rec);
        assert!(decode(&d.payload, 99, 4096).unwrap_err().to_string().contains("config changed"));
        let adjacent = RegionRecord { extents: vec![(0, 4), (4, 1)], snapshot: 0 };
        let bad = encode(4096, 7, (100, 4096), &adjacent).unwrap();
        assert!(decode(&codec(4096).decode(&bad).unwrap().payload, 100, 4096).is_err());
        let mut torn = b.clone();
        torn[100] ^= 1;
        assert_eq!(codec(4096).decode(&torn), Err(MetaError::BadCrc));
        let many = RegionRecord { extents: (0..300).map(|i| (i * 2, 1)).collect(), snapshot: 0 };
        assert!(encode(4096, 1, (1000, 4096), &many).is_none(), "a 4 KiB record holds 252 extents");
    }

    /// The record's snapshot generation sets the next snapshot's (one
    /// more): a crafted u64::MAX (crc valid) overflowed there, and anything
    /// past the readable generations made the snapshot unwritable.
    #[test]
    fn a_snapshot_generation_past_the_readable_ones_is_refused() {
        let at_limit = RegionRecord { extents: vec![(0, 4)], snapshot: GENERATION_READ_MAX };
        let b = encode(4096, 7, (100, 4096), &at_limit).unwrap();
        assert_eq!(decode(&codec(4096).decode(&b).unwrap().payload, 100, 4096).unwrap(), at_limit);
        for snapshot in [GENERATION_READ_MAX + 1, u64::MAX] {
            let b = encode(4096, 7, (100, 4096), &RegionRecord { extents: vec![], snapshot }).unwrap();
            let e = decode(&codec(4096).decode(&b).unwrap().payload, 100, 4096).unwrap_err();
            assert!(e.to_string().contains(&format!("snapshot generation {snapshot} is past")), "{e}");
        }
    }

    #[test]
    fn snapshots_round_trip_across_blocks_and_refuse_damage() {
        let snap = Snapshot {
            replicas: (0..400).map(|i| (1000 + i * 3, 2, i * 2)).collect(),
            declared: vec![(900, 2000)],
        };
        let b = encode_snapshot(4096, 5, 8, &snap).unwrap();
        assert_eq!(b.len(), 3 * 4096, "9.6 KB of stream in 4 KiB blocks");
        assert_eq!(decode_snapshot(&b, 4096, 5, 4000).unwrap(), snap);
        assert!(decode_snapshot(&b, 4096, 6, 4000).is_err(), "another generation");
        assert!(decode_snapshot(&b, 4096, 5, 2000).is_err(), "out of range");
        let mut torn = b.clone();
        torn[4096 + 50] ^= 1;
        assert!(decode_snapshot(&torn, 4096, 5, 4000).is_err());
        assert!(decode_snapshot(&b[..8192], 4096, 5, 4000).is_err(), "a block missing");
        assert!(encode_snapshot(4096, 5, 2, &snap).is_none());
    }

    mod fuzz {
        use super::*;
        use crate::fuzz_support::{self as f, config};
        use proptest::prelude::*;

        proptest! {
            #![proptest_config(config(512))]

            /// The region record: refused, or sorted disjoint extents
            /// within the volume; the count field never sizes an allocation.
            #[test]
            fn region_records_never_panic(
                raw in f::raw_writes(4096),
                crafted in f::crafted_writes(96),
                fix in any::<bool>(),
            ) {
                let rec = RegionRecord { extents: vec![(0, 4), (9, 1), (50, 40)], snapshot: 3 };
                let mut b = encode(4096, 7, (100, 4096), &rec).expect("fits");
                f::mutate(&mut b, &raw, &crafted);
                if fix {
                    f::fix_crc(&mut b, 28, 4096);
                }
                let (decoded, bytes) = f::largest_allocation(|| {
                    codec(4096).decode(&b).map(|d| decode(&d.payload, 100, 4096))
                });
                prop_assert!(bytes <= f::allocation_bound(b.len()));
                if let Ok(Ok(r)) = decoded {
                    prop_assert!(r.extents.windows(2).all(|w| w[0].0 + w[0].1 < w[1].0));
                    prop_assert!(r.extents.iter().all(|&(s, n)| n > 0 && s + n <= 100));
                    prop_assert!(encode(4096, 7, (100, 4096), &r).is_some());
                }
            }

            /// The map snapshot, its blocks mutated (each touched block's
            /// crc fixed or not): refused, or extents within the volume.
            #[test]
            fn snapshots_never_panic(
                raw in f::raw_writes(3 * 4096),
                crafted in f::crafted_writes(3 * 4096),
                fix in any::<bool>(),
            ) {
                let snap = Snapshot {
                    replicas: (0..400).map(|i| (1000 + i * 3, 2, i * 2)).collect(),
                    declared: vec![(900, 2000)],
                };
                let mut b = encode_snapshot(4096, 5, 8, &snap).expect("fits");
                f::mutate(&mut b, &raw, &crafted);
                if fix {
                    for block in b.chunks_mut(4096) {
                        f::fix_crc(block, 28, 4096);
                    }
                }
                let (decoded, bytes) = f::largest_allocation(|| decode_snapshot(&b, 4096, 5, 4000));
                prop_assert!(bytes <= f::allocation_bound(b.len()));
                if let Ok(s) = decoded {
                    prop_assert!(s.replicas.iter().all(|&(l, n, o)| n > 0 && l + n <= 4000 && o + n <= 4000));
                    prop_assert!(s.declared.iter().all(|&(st, n)| n > 0 && st + n <= 4000));
                }
            }
        }
    }
}
