//! The block map: in memory a flat `u32` per volume block (the slot that
//! holds it, [`UNMAPPED`] for none: reads as zeroes); on disk, map pages
//! written only at checkpoints (the paper's lazy indirect-block update at
//! block level: a write costs one slot, and its map entry reaches the disk
//! with the next checkpoint; until then the segment summary is what
//! recovery rolls forward from).
//!
//! Map page (a [`MetaBlockCodec`] block of 4 KiB; its generation is the
//! checkpoint generation that wrote it), payload:
//! ```text
//! 0 page_index u32   4 entry_count u32   8 entries u32 * entry_count
//! ```
//! Each page has two copies, adjacent: copy `c` of page `p` at
//! `offset + (2p + c) * 4096`. A page is written to the copy that does
//! not hold its current version, so a torn write leaves the current one;
//! recovery takes, per page, the newest valid copy whose generation is at
//! most the checkpoint's (a copy newer than the checkpoint belongs to a
//! checkpoint that never completed, and is rewritten before serving).

use layoutd_core::metablock::{MetaBlockCodec, MetaError, Reader, HEADER_BYTES};

/// A block with no slot: it reads as zeroes.
pub const UNMAPPED: u32 = u32::MAX;
/// Bytes of one map page copy.
pub const PAGE_BYTES: u64 = 4096;
/// Entries one page holds.
pub const ENTRIES_PER_PAGE: u64 = (PAGE_BYTES - HEADER_BYTES as u64 - 8) / 4;
const CODEC: MetaBlockCodec =
    MetaBlockCodec { magic: *b"LDLOGMP1", version: 1, block_bytes: PAGE_BYTES as usize };
const _: () = assert!(ENTRIES_PER_PAGE == 1014);

/// Where the map pages live.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MapGeometry {
    /// Start of the map area on the lower device.
    pub offset_bytes: u64,
    /// Pages (each in two copies).
    pub page_count: u32,
    /// Slots in the log (an entry must be below this or [`UNMAPPED`]).
    pub slot_total: u32,
}

impl MapGeometry {
    /// Where copy `copy` of page `page` lives.
    pub fn copy_offset_bytes(&self, page: u32, copy: u8) -> u64 {
        assert!(page < self.page_count && copy < 2);
        self.offset_bytes + (2 * u64::from(page) + u64::from(copy)) * PAGE_BYTES
    }

    /// One past the map area.
    pub fn end_bytes(&self) -> u64 {
        self.offset_bytes + 2 * u64::from(self.page_count) * PAGE_BYTES
    }

    /// The blocks page `page` covers.
    pub fn blocks_of(&self, page: u32, volume_blocks: u64) -> std::ops::Range<u64> {
        let start = u64::from(page) * ENTRIES_PER_PAGE;
        start..(start + ENTRIES_PER_PAGE).min(volume_blocks)
    }

    /// Encodes page `page` of `map` for checkpoint `generation`.
    pub fn encode(&self, page: u32, map: &[u32], generation: u64) -> Vec<u8> {
        let r = self.blocks_of(page, map.len() as u64);
        let mut p = Vec::with_capacity(8 + 4 * r.clone().count());
        p.extend(page.to_le_bytes());
        p.extend(((r.end - r.start) as u32).to_le_bytes());
        for &e in &map[r.start as usize..r.end as usize] {
            p.extend(e.to_le_bytes());
        }
        CODEC.encode(generation, &p).expect("a map page fits its block")
    }

    /// Decodes a page copy into `out` (the page's entries); returns its
    /// generation. Every entry is range-checked.
    pub fn decode(&self, page: u32, b: &[u8], volume_blocks: u64) -> Result<(u64, Vec<u32>), MetaError> {
        let block = CODEC.decode(b)?;
        let mut r = Reader::new(&block.payload);
        let (index, count) = (r.u32()?, r.u32()?);
        let want = self.blocks_of(page, volume_blocks);
        if index != page || u64::from(count) != want.end - want.start {
            return Err(MetaError::Malformed(format!(
                "page {index} with {count} entries where page {page} with {} belongs",
                want.end - want.start
            )));
        }
        let mut out = Vec::with_capacity(count as usize);
        for i in 0..count {
            let e = r.u32()?;
            if e != UNMAPPED && e >= self.slot_total {
                return Err(MetaError::Malformed(format!(
                    "entry {i} names slot {e}; the log has {}",
                    self.slot_total
                )));
            }
            out.push(e);
        }
        Ok((block.generation, out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_round_trip_and_refuse_misplaced_or_out_of_range_entries() {
        let g = MapGeometry { offset_bytes: 8192, page_count: 2, slot_total: 100 };
        let mut map = vec![UNMAPPED; 1500];
        map[3] = 7;
        map[1200] = 99;
        let b = g.encode(1, &map, 5);
        let (gen, entries) = g.decode(1, &b, 1500).expect("valid");
        assert_eq!(gen, 5);
        assert_eq!(entries.len(), 1500 - 1014);
        assert_eq!(entries[1200 - 1014], 99);
        assert!(g.decode(0, &b, 1500).unwrap_err().to_string().contains("page 1"));
        map[1200] = 100;
        let b = g.encode(1, &map, 5);
        assert!(g.decode(1, &b, 1500).unwrap_err().to_string().contains("slot 100"));
        assert_eq!(g.copy_offset_bytes(1, 1), 8192 + 3 * 4096);
    }
}
