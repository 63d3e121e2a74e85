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

/// Unsigned integers of a fixed width (1 to 32 bits), packed into `u64`
/// words: `len * width / 8` bytes, rounded up to a word. The map (an entry
/// just wide enough for every slot id and [`UNMAPPED`]) and the per-slot
/// and per-segment bits are made of it.
#[derive(Clone, Debug)]
pub struct Packed {
    words: Vec<u64>,
    width: u32,
    len: u64,
}

impl Packed {
    /// `len` integers of `width` bits, each all ones (`ones`) or zero.
    pub fn new(len: u64, width: u32, ones: bool) -> Packed {
        assert!((1..=32).contains(&width));
        let words = (len * u64::from(width)).div_ceil(64) as usize;
        Packed { words: vec![if ones { u64::MAX } else { 0 }; words], width, len }
    }

    /// The width in bits.
    pub fn width(&self) -> u32 {
        self.width
    }

    /// How many integers.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn mask(&self) -> u64 {
        (1u64 << self.width) - 1
    }

    /// Integer `i`.
    pub fn get(&self, i: u64) -> u64 {
        assert!(i < self.len);
        let bit = i * u64::from(self.width);
        let (w, off) = ((bit / 64) as usize, (bit % 64) as u32);
        let mut v = self.words[w] >> off;
        if off + self.width > 64 {
            v |= self.words[w + 1] << (64 - off);
        }
        v & self.mask()
    }

    /// Sets integer `i` to `v` (which must fit).
    pub fn set(&mut self, i: u64, v: u64) {
        assert!(i < self.len && v >> self.width == 0);
        let bit = i * u64::from(self.width);
        let (w, off) = ((bit / 64) as usize, (bit % 64) as u32);
        let m = self.mask();
        self.words[w] = (self.words[w] & !(m << off)) | (v << off);
        if off + self.width > 64 {
            let hi = 64 - off;
            self.words[w + 1] = (self.words[w + 1] & !(m >> hi)) | (v >> hi);
        }
    }

    /// The words of a one-bit `Packed`: integer `i` is bit `i % 64` of
    /// word `i / 64` (a census reads every segment's bits in one pass).
    pub fn bit_words(&self) -> &[u64] {
        assert_eq!(self.width, 1, "the words of a one-bit Packed");
        &self.words
    }

    /// Sets every integer to zero.
    pub fn clear(&mut self) {
        self.words.fill(0);
    }

    /// Bytes of RAM it holds (its allocation, not its length).
    pub fn ram_bytes(&self) -> u64 {
        8 * self.words.capacity() as u64
    }
}

/// The map in RAM: per block, the slot id holding it or [`UNMAPPED`], in
/// entries of the fewest bits that hold every slot id and one more value
/// (all ones) for [`UNMAPPED`].
#[derive(Clone, Debug)]
pub struct SlotMap {
    p: Packed,
}

impl SlotMap {
    /// `blocks` unmapped blocks over a log of `slot_total` slots.
    pub fn new(blocks: u64, slot_total: u32) -> SlotMap {
        let width = 64 - u64::from(slot_total).leading_zeros();
        SlotMap { p: Packed::new(blocks, width, true) }
    }

    /// The slot holding `block`, or [`UNMAPPED`].
    pub fn get(&self, block: u64) -> u32 {
        let v = self.p.get(block);
        if v == (1u64 << self.p.width()) - 1 {
            UNMAPPED
        } else {
            v as u32
        }
    }

    /// Points `block` at `sid` (or [`UNMAPPED`]).
    pub fn set(&mut self, block: u64, sid: u32) {
        let v = if sid == UNMAPPED { (1u64 << self.p.width()) - 1 } else { u64::from(sid) };
        self.p.set(block, v);
    }

    /// Blocks.
    pub fn len(&self) -> u64 {
        self.p.len()
    }

    /// Whether the volume has no blocks.
    pub fn is_empty(&self) -> bool {
        self.p.is_empty()
    }

    /// Bits per entry.
    pub fn width(&self) -> u32 {
        self.p.width()
    }

    /// Bytes of RAM it holds.
    pub fn ram_bytes(&self) -> u64 {
        self.p.ram_bytes()
    }
}

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
    pub fn encode(&self, page: u32, map: &SlotMap, generation: u64) -> Vec<u8> {
        let r = self.blocks_of(page, map.len());
        let mut p = Vec::with_capacity(8 + 4 * r.clone().count());
        p.extend(page.to_le_bytes());
        p.extend(((r.end - r.start) as u32).to_le_bytes());
        for b in r {
            p.extend(map.get(b).to_le_bytes());
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
        let mut map = SlotMap::new(1500, 100);
        map.set(3, 7);
        map.set(1200, 99);
        let b = g.encode(1, &map, 5);
        let (gen, entries) = g.decode(1, &b, 1500).expect("valid");
        assert_eq!(gen, 5);
        assert_eq!(entries.len(), 1500 - 1014);
        assert_eq!(entries[1200 - 1014], 99);
        assert!(g.decode(0, &b, 1500).unwrap_err().to_string().contains("page 1"));
        let g2 = MapGeometry { slot_total: 99, ..g };
        let b = g2.encode(1, &map, 5);
        assert!(g2.decode(1, &b, 1500).unwrap_err().to_string().contains("slot 99"));
        assert_eq!(g.copy_offset_bytes(1, 1), 8192 + 3 * 4096);
    }

    #[test]
    fn packed_integers_of_every_width_read_back_across_word_edges() {
        for width in 1..=32u32 {
            let n = 200u64;
            let mut p = Packed::new(n, width, false);
            let val = |i: u64| (i * 2654435761) & ((1u64 << width) - 1);
            for i in 0..n {
                p.set(i, val(i));
            }
            for i in 0..n {
                assert_eq!(p.get(i), val(i), "width {width} index {i}");
            }
            p.set(77, 0);
            assert_eq!((p.get(76), p.get(77), p.get(78)), (val(76), 0, val(78)));
            assert_eq!(p.ram_bytes(), 8 * (n * u64::from(width)).div_ceil(64));
            if width == 1 {
                // `bit_words` holds the same values, bit i of word i / 64.
                let w = p.bit_words();
                assert!((0..n).all(|i| (w[i as usize / 64] >> (i % 64)) & 1 == p.get(i)));
            }
        }
        let mut m = SlotMap::new(10, 8);
        assert_eq!((m.width(), m.get(3)), (4, UNMAPPED));
        m.set(3, 7);
        m.set(4, 0);
        assert_eq!((m.get(2), m.get(3), m.get(4)), (UNMAPPED, 7, 0));
        m.set(3, UNMAPPED);
        assert_eq!(m.get(3), UNMAPPED);
    }

    mod fuzz {
        use super::*;
        use crate::fuzz_support::{self as f, config};
        use proptest::prelude::*;

        proptest! {
            #![proptest_config(config(512))]

            /// A map page copy with random bytes anywhere, or crafted
            /// numbers in its fields (crc fixed or not): refused, or
            /// exactly the page's entries, each a slot of the log or
            /// unmapped; never more allocated than the page holds.
            #[test]
            fn map_pages_never_panic(
                raw in f::raw_writes(PAGE_BYTES as usize),
                crafted in f::crafted_writes(64),
                fix in any::<bool>(),
                page in 0u32..2,
            ) {
                let g = MapGeometry { offset_bytes: 8192, page_count: 2, slot_total: 100 };
                let mut map = SlotMap::new(1500, 100);
                map.set(3, 7);
                map.set(1200, 99);
                let mut b = g.encode(page, &map, 5);
                f::mutate(&mut b, &raw, &crafted);
                if fix {
                    f::fix_crc(&mut b, 28, PAGE_BYTES as usize);
                }
                let (decoded, bytes) = f::largest_allocation(|| g.decode(page, &b, 1500));
                prop_assert!(bytes <= f::allocation_bound(b.len()));
                if let Ok((_, entries)) = decoded {
                    prop_assert_eq!(entries.len() as u64, g.blocks_of(page, 1500).count() as u64);
                    prop_assert!(entries.iter().all(|&e| e == UNMAPPED || e < 100));
                }
            }
        }
    }
}
