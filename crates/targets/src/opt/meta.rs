//! The OPT region's metadata on disk: the reconfiguration map (two copies,
//! [`MetaBlockCodec`], generation `g` in copy `g % 2`) and the dirty-bit
//! journal (single [`MetaBlockCodec`] blocks of [`JournalRecord::Dirty`]
//! records, each stamped with the map generation it extends).
//!
//! Map payload: `slot_count u32, block_bytes u32, volume_blocks u64`, then
//! [`JournalRecord::MapUpdate`] runs (`upper` = home block, `lower` = slot)
//! and [`JournalRecord::Dirty`] records (`block` = slot). Journal payload:
//! `map_generation u64`, then `Dirty` records. Every decoded number is
//! range-checked against the geometry; a slot mapped twice, or a dirty bit
//! on an unmapped slot, is refused. With `absorb_writes` a journal block
//! also carries `MapUpdate` runs: home blocks written into free slots
//! (*absorbed*), mapped and dirty from that block on.
//!
//! *Extra copies* (`copies_max > 1`): the runs of a map come primaries
//! first; a run whose home blocks are all mapped by an earlier run is an
//! extra copy of them (clean, read-only: valid only while its primary is
//! clean), one whose home blocks are all unmapped is a primary, anything
//! else is refused, as is a dirty bit on an extra copy. A map without
//! extra copies reads as before.

use super::config::{Geometry, JOURNAL_BLOCK_BYTES, MAP_FIXED_BYTES};
use crate::blockmap::BlockMap;
use layoutd_core::metablock::{JournalRecord, MetaBlockCodec, MetaError, Reader, HEADER_BYTES};

/// The map's block kind for a payload of `payload_bytes`: the block is as
/// long as the payload needs (whole 4 KiB), so a map write costs what the
/// map holds, not the worst case its area is sized for.
pub fn map_codec(geo: &Geometry, payload_bytes: usize) -> MetaBlockCodec {
    let block = (HEADER_BYTES + payload_bytes).next_multiple_of(4096).min(geo.map_bytes as usize);
    MetaBlockCodec { magic: *b"LDOPTMAP", version: 1, block_bytes: block }
}

/// `image` as map generation `generation`, ready to write.
pub fn encode_map(geo: &Geometry, generation: u64, image: &MapImage) -> Vec<u8> {
    let payload = image.encode(geo);
    map_codec(geo, payload.len()).encode(generation, &payload).expect("the map fits its area")
}

/// Decodes one map copy's block (`b`: the copy's whole area); the block's
/// length comes from its own payload length field, which the crc covers.
fn decode_map_block(geo: &Geometry, b: &[u8]) -> Result<(u64, Vec<u8>), MetaError> {
    assert!(b.len() as u64 >= geo.map_bytes, "the caller reads the whole map area");
    let payload_bytes = u32::from_le_bytes(b[12..16].try_into().expect("4 bytes")) as usize;
    let codec = map_codec(geo, payload_bytes.min(geo.map_bytes as usize));
    codec.decode(b).map(|d| (d.generation, d.payload))
}

/// The newest of the two copies whose block is intact (a torn newest copy
/// falls back to the other), decoded: `(generation, map, copy)`. A copy
/// whose block is intact but whose map is malformed is refused, never
/// skipped: that is damage or another format, not a torn write.
pub fn pick_map(geo: &Geometry, c0: &[u8], c1: &[u8]) -> Result<(u64, MapImage, usize), String> {
    let ((generation, payload), copy) = match (decode_map_block(geo, c0), decode_map_block(geo, c1)) {
        (Ok(a), Ok(b)) if b.0 > a.0 => (b, 1),
        (Ok(a), _) => (a, 0),
        (Err(_), Ok(b)) => (b, 1),
        (Err(e0), Err(e1)) => return Err(format!("copy 0: {e0}; copy 1: {e1}")),
    };
    let map =
        MapImage::decode(&payload, geo).map_err(|e| format!("copy {copy} (generation {generation}): {e}"))?;
    Ok((generation, map, copy))
}

/// The journal's block kind.
pub const JOURNAL_CODEC: MetaBlockCodec =
    MetaBlockCodec { magic: *b"LDOPTJNL", version: 1, block_bytes: JOURNAL_BLOCK_BYTES as usize };

/// Dirty records one journal block holds.
pub const JOURNAL_RECORDS_MAX: usize = (JOURNAL_BLOCK_BYTES as usize - 32 - 8) / 11;

/// Whether a journal block holds `dirty` dirty records and `maps` map
/// runs (11 and 22 bytes each).
pub fn journal_fits(dirty: usize, maps: usize) -> bool {
    8 + 11 * dirty + 22 * maps <= JOURNAL_BLOCK_BYTES as usize - 32
}

/// A map as stored: runs of home blocks in slots, and dirty slots.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MapImage {
    /// `(home block, blocks, first slot)`: the primary copies.
    pub runs: Vec<(u64, u32, u32)>,
    /// Extra copies of primary-mapped home blocks, the same way.
    pub extras: Vec<(u64, u32, u32)>,
    /// Slots whose copy is newer than home.
    pub dirty: Vec<u32>,
}

impl MapImage {
    /// The payload bytes.
    pub fn encode(&self, geo: &Geometry) -> Vec<u8> {
        let mut out = Vec::with_capacity(MAP_FIXED_BYTES as usize + self.runs.len() * 22);
        out.extend(geo.slot_count.to_le_bytes());
        out.extend((geo.block_bytes as u32).to_le_bytes());
        out.extend(geo.volume_blocks().to_le_bytes());
        for &(home, count, slot) in self.runs.iter().chain(&self.extras) {
            JournalRecord::MapUpdate { upper: home, count, lower: u64::from(slot) }.encode(&mut out);
        }
        for &slot in &self.dirty {
            JournalRecord::Dirty { block: u64::from(slot), dirty: true }.encode(&mut out);
        }
        out
    }

    /// Decodes and checks a payload against `geo`.
    pub fn decode(payload: &[u8], geo: &Geometry) -> Result<MapImage, MetaError> {
        let bad = |s: String| MetaError::Malformed(s);
        let mut r = Reader::new(payload);
        let (slots, block, blocks) = (r.u32()?, r.u32()?, r.u64()?);
        if slots != geo.slot_count || u64::from(block) != geo.block_bytes || blocks != geo.volume_blocks() {
            return Err(bad(format!(
                "map of {slots} slots of {block} bytes over {blocks} blocks; the config gives {} of {} over {}",
                geo.slot_count,
                geo.block_bytes,
                geo.volume_blocks()
            )));
        }
        let rest = &payload[MAP_FIXED_BYTES as usize..];
        let mut image = MapImage::default();
        let mut homes: BlockMap<u64> = BlockMap::new();
        let mut used = vec![false; geo.slot_count as usize];
        let mut extra_slot = vec![false; geo.slot_count as usize];
        for rec in JournalRecord::decode_all(rest)? {
            match rec {
                JournalRecord::MapUpdate { upper, count, lower } => {
                    let slot_end = lower.checked_add(u64::from(count)).filter(|&e| e <= u64::from(slots));
                    let home_end = upper.checked_add(u64::from(count)).filter(|&e| e <= blocks);
                    let (Some(_), Some(_)) = (slot_end, home_end) else {
                        return Err(bad(format!("run {upper}+{count} -> slot {lower} is out of range")));
                    };
                    let mapped: u64 = homes
                        .range(upper, u64::from(count))
                        .iter()
                        .filter(|p| p.2.is_some())
                        .map(|p| p.1)
                        .sum();
                    let extra = mapped == u64::from(count);
                    if mapped > 0 && !extra {
                        return Err(bad(format!("home block range {upper}+{count} is partly mapped twice")));
                    }
                    for s in lower..lower + u64::from(count) {
                        if std::mem::replace(&mut used[s as usize], true) {
                            return Err(bad(format!("slot {s} is mapped twice")));
                        }
                        extra_slot[s as usize] = extra;
                    }
                    if extra {
                        image.extras.push((upper, count, lower as u32));
                    } else {
                        homes.insert(upper, u64::from(count), lower);
                        image.runs.push((upper, count, lower as u32));
                    }
                }
                JournalRecord::Dirty { block, dirty: true } => {
                    if block >= u64::from(slots) || !used[block as usize] {
                        return Err(bad(format!("dirty bit on slot {block}, which holds no block")));
                    }
                    if extra_slot[block as usize] {
                        return Err(bad(format!("dirty bit on slot {block}, an extra copy (always clean)")));
                    }
                    image.dirty.push(block as u32);
                }
                other => return Err(bad(format!("unexpected record in a map: {other:?}"))),
            }
        }
        Ok(image)
    }
}

/// One journal block: dirty slots under map generation `map_generation`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JournalBlock {
    /// The map generation these bits extend.
    pub map_generation: u64,
    /// Slots made dirty.
    pub slots: Vec<u32>,
    /// Absorbed writes: `(home block, blocks, first slot)` mapped (and
    /// dirty) from this block on; applied before `slots`.
    pub maps: Vec<(u64, u32, u32)>,
}

impl JournalBlock {
    /// The encoded block; `seq` is its own generation.
    pub fn encode(&self, seq: u64) -> Vec<u8> {
        assert!(journal_fits(self.slots.len(), self.maps.len()));
        let mut p = Vec::with_capacity(8 + self.slots.len() * 11 + self.maps.len() * 22);
        p.extend(self.map_generation.to_le_bytes());
        for &(upper, count, lower) in &self.maps {
            JournalRecord::MapUpdate { upper, count, lower: u64::from(lower) }.encode(&mut p);
        }
        for &s in &self.slots {
            JournalRecord::Dirty { block: u64::from(s), dirty: true }.encode(&mut p);
        }
        JOURNAL_CODEC.encode(seq, &p).expect("a journal block fits")
    }

    /// Decodes one block (`Err(Blank)` for a never-written one).
    pub fn decode(b: &[u8], slot_count: u32) -> Result<JournalBlock, MetaError> {
        let d = JOURNAL_CODEC.decode(b)?;
        let mut r = Reader::new(&d.payload);
        let map_generation = r.u64()?;
        let (mut slots, mut maps) = (Vec::new(), Vec::new());
        for rec in JournalRecord::decode_all(&d.payload[8..])? {
            match rec {
                JournalRecord::Dirty { block, dirty: true } if block < u64::from(slot_count) => {
                    slots.push(block as u32)
                }
                JournalRecord::MapUpdate { upper, count, lower }
                    if count > 0
                        && slots.is_empty()
                        && upper.checked_add(u64::from(count)).is_some()
                        && lower
                            .checked_add(u64::from(count))
                            .is_some_and(|e| e <= u64::from(slot_count)) =>
                {
                    maps.push((upper, count, lower as u32))
                }
                other => return Err(MetaError::Malformed(format!("journal record {other:?}"))),
            }
        }
        Ok(JournalBlock { map_generation, slots, maps })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn geo() -> Geometry {
        Geometry::new(1 << 20, 256 << 10, 4 << 20, 4096, 4).unwrap()
    }

    #[test]
    fn maps_round_trip_and_bad_ones_are_refused() {
        let g = geo();
        let m = MapImage { runs: vec![(10, 3, 0), (100, 2, 5)], extras: vec![], dirty: vec![1, 6] };
        assert_eq!(MapImage::decode(&m.encode(&g), &g), Ok(m));
        // Extra copies: home blocks a primary maps, written after it, twice even.
        let m = MapImage { runs: vec![(10, 3, 0)], extras: vec![(11, 2, 7), (10, 2, 9)], dirty: vec![0] };
        assert_eq!(MapImage::decode(&m.encode(&g), &g), Ok(m));
        let runs = |r: Vec<(u64, u32, u32)>, dirty: Vec<u32>| MapImage { runs: r, extras: vec![], dirty };
        for bad in [
            // Partly mapped twice: neither a primary nor an extra copy.
            runs(vec![(10, 3, 0), (12, 2, 7)], vec![]),
            runs(vec![(10, 3, 0), (20, 1, 2)], vec![]),
            runs(vec![(10, 3, g.slot_count - 1)], vec![]),
            runs(vec![(g.volume_blocks() - 1, 2, 0)], vec![]),
            runs(vec![(10, 1, 0)], vec![3]),
            // A dirty bit on an extra copy.
            MapImage { runs: vec![(10, 1, 0)], extras: vec![(10, 1, 1)], dirty: vec![1] },
        ] {
            assert!(MapImage::decode(&bad.encode(&g), &g).is_err(), "{bad:?}");
        }
        let other = Geometry::new(1 << 20, 512 << 10, 4 << 20, 4096, 4).unwrap();
        assert!(MapImage::decode(&MapImage::default().encode(&g), &other).is_err(), "another geometry");
        // Copies of any size: the newest valid one wins, a torn one falls back.
        let area = |gen, m: &MapImage| {
            let mut b = encode_map(&g, gen, m);
            b.resize(g.map_bytes as usize, 0xAB);
            b
        };
        let (old, new) = (
            area(4, &MapImage::default()),
            area(5, &MapImage { runs: vec![(1, 2, 3)], ..MapImage::default() }),
        );
        assert_eq!(pick_map(&g, &old, &new).unwrap().0, 5);
        let mut torn = new.clone();
        torn[40] ^= 1;
        assert_eq!(pick_map(&g, &old, &torn).unwrap().2, 0);
        assert!(pick_map(&g, &torn, &vec![0; g.map_bytes as usize]).is_err());
    }

    #[test]
    fn journal_blocks_round_trip_and_a_full_one_fits() {
        let maps = vec![(7, 2, 30), (100, 1, 3)];
        let j = JournalBlock { map_generation: 4, slots: vec![5, 30], maps };
        assert_eq!(JournalBlock::decode(&j.encode(2), 1000), Ok(j.clone()));
        assert!(JournalBlock::decode(&j.encode(2), 31).is_err(), "a map run past the region");
        let j = JournalBlock {
            map_generation: 9,
            slots: (0..JOURNAL_RECORDS_MAX as u32).collect(),
            maps: vec![],
        };
        let b = j.encode(3);
        assert_eq!(b.len(), JOURNAL_BLOCK_BYTES as usize);
        assert_eq!(JournalBlock::decode(&b, 1000), Ok(j));
        assert!(JournalBlock::decode(&b, 10).is_err(), "slot past the region");
        assert_eq!(JournalBlock::decode(&[0u8; 4096], 10), Err(MetaError::Blank));
        // Runs whose end overflows u64 are refused, not added (CI's fuzz
        // found `lower = u64::MAX`).
        for (upper, lower) in [(7, u64::MAX), (u64::MAX, 3), (u64::MAX - 1, u64::MAX - 1)] {
            let mut p = 4u64.to_le_bytes().to_vec();
            JournalRecord::MapUpdate { upper, count: 8, lower }.encode(&mut p);
            let b = JOURNAL_CODEC.encode(2, &p).expect("fits");
            assert!(JournalBlock::decode(&b, 1000).is_err(), "upper {upper} lower {lower}");
        }
    }
}
