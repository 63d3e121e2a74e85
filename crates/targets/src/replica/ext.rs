//! A small ext2/3/4 free-block reader: the superblock, the group
//! descriptors and the block bitmaps, as bytes the caller reads; no I/O.
//! Handles 1 KiB to 64 KiB blocks, 32- and 64-bit descriptors, flex_bg
//! (bitmaps anywhere), `BLOCK_UNINIT` groups (free = the group minus the
//! metadata that lives in it, as `ext4_init_block_bitmap` computes), sparse
//! superblock backups (`sparse_super`, `sparse_super2`), and checks
//! metadata_csum checksums (superblock, descriptors, bitmaps) when the file
//! system has them. Refuses what it does not understand (`meta_bg`,
//! bigalloc, a journal that needs recovery) rather than guess: a block
//! wrongly called free would read back as zeroes.
//!
//! Every field is range-checked; the parser is fuzzed (`tests` below).

/// Where the superblock is, and how many bytes of it are read.
pub const SUPERBLOCK_OFFSET_BYTES: u64 = 1024;
/// Bytes of the superblock.
pub const SUPERBLOCK_BYTES: usize = 1024;

const MAGIC: u16 = 0xEF53;
const INCOMPAT_RECOVER: u32 = 0x4;
const INCOMPAT_META_BG: u32 = 0x10;
const INCOMPAT_64BIT: u32 = 0x80;
const INCOMPAT_CSUM_SEED: u32 = 0x2000;
const RO_COMPAT_SPARSE_SUPER: u32 = 0x1;
const RO_COMPAT_BIGALLOC: u32 = 0x200;
const RO_COMPAT_METADATA_CSUM: u32 = 0x400;
const COMPAT_SPARSE_SUPER2: u32 = 0x200;
const BG_BLOCK_UNINIT: u16 = 0x2;

/// What the superblock says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// Bytes per file-system block.
    pub block_bytes: u32,
    /// Blocks in the file system.
    pub blocks_count: u64,
    /// The first block of group 0 (1 with 1 KiB blocks, else 0).
    pub first_data_block: u64,
    /// Blocks per group.
    pub blocks_per_group: u32,
    /// Groups.
    pub group_count: u32,
    /// Bytes per group descriptor.
    pub desc_size: u32,
    /// Blocks of inode table per group.
    pub inode_table_blocks: u64,
    /// Reserved GDT blocks after each descriptor-table copy.
    pub reserved_gdt_blocks: u32,
    sparse_super: bool,
    sparse_super2: Option<[u32; 2]>,
    /// metadata_csum's seed, when the file system has checksums.
    csum_seed: Option<u32>,
}

impl Geometry {
    /// Byte offset of the (primary) group descriptor table.
    pub fn gdt_offset_bytes(&self) -> u64 {
        (self.first_data_block + 1) * u64::from(self.block_bytes)
    }

    /// Blocks of the descriptor table.
    pub fn gdt_blocks(&self) -> u64 {
        (u64::from(self.group_count) * u64::from(self.desc_size)).div_ceil(u64::from(self.block_bytes))
    }

    /// First block of group `g`.
    pub fn group_start(&self, g: u32) -> u64 {
        self.first_data_block + u64::from(g) * u64::from(self.blocks_per_group)
    }

    /// Blocks in group `g` (the last may be short).
    pub fn group_blocks(&self, g: u32) -> u64 {
        (self.blocks_count - self.group_start(g)).min(u64::from(self.blocks_per_group))
    }

    /// Whether group `g` holds a superblock backup (and a descriptor copy).
    fn has_super(&self, g: u32) -> bool {
        if g == 0 {
            return true;
        }
        if let Some(b) = self.sparse_super2 {
            return b.contains(&g);
        }
        if !self.sparse_super || g == 1 {
            return true;
        }
        [3u32, 5, 7].iter().any(|&p| {
            let mut x = g;
            while x % p == 0 {
                x /= p;
            }
            x == 1
        })
    }
}

fn le16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

/// Linux's raw crc32c (no final inversion), as ext4 uses it.
fn crc32c_raw(seed: u32, data: &[u8]) -> u32 {
    !crc32c::crc32c_append(!seed, data)
}

/// Parses the superblock (`sb`: the 1024 bytes at byte 1024).
pub fn parse_superblock(sb: &[u8]) -> Result<Geometry, String> {
    if sb.len() < SUPERBLOCK_BYTES {
        return Err(format!("superblock: {} bytes, need {SUPERBLOCK_BYTES}", sb.len()));
    }
    if le16(sb, 56) != MAGIC {
        return Err(format!("no ext2/3/4 superblock (magic {:#06x}, want 0xef53)", le16(sb, 56)));
    }
    let (compat, incompat, ro) = (le32(sb, 92), le32(sb, 96), le32(sb, 100));
    let csum = ro & RO_COMPAT_METADATA_CSUM != 0;
    if csum && crc32c_raw(!0, &sb[..0x3FC]) != le32(sb, 0x3FC) {
        return Err("superblock checksum mismatch (corrupt)".into());
    }
    if incompat & INCOMPAT_RECOVER != 0 {
        return Err(
            "the journal needs recovery (mounted, or not cleanly unmounted): bitmaps may be stale".into()
        );
    }
    if incompat & INCOMPAT_META_BG != 0 {
        return Err("meta_bg descriptor layout is not supported".into());
    }
    if ro & RO_COMPAT_BIGALLOC != 0 {
        return Err("bigalloc (cluster bitmaps) is not supported".into());
    }
    let log = le32(sb, 24);
    if log > 6 {
        return Err(format!("block size 1024 << {log} is out of range"));
    }
    let block_bytes = 1024u32 << log;
    let is64 = incompat & INCOMPAT_64BIT != 0;
    let hi = if is64 { u64::from(le32(sb, 0x150)) } else { 0 };
    let blocks_count = u64::from(le32(sb, 4)) | hi << 32;
    let first_data_block = u64::from(le32(sb, 20));
    let blocks_per_group = le32(sb, 32);
    let inodes_per_group = le32(sb, 40);
    let inode_size = if le32(sb, 76) >= 1 { u32::from(le16(sb, 88)) } else { 128 };
    let desc_size = if is64 { u32::from(le16(sb, 0xFE)) } else { 32 };
    let sane = first_data_block == u64::from(block_bytes == 1024)
        && blocks_per_group >= 8
        && blocks_per_group <= 8 * block_bytes
        && blocks_per_group % 8 == 0
        && blocks_count > first_data_block
        && blocks_count < 1 << 48
        && (32..=1024).contains(&desc_size)
        && desc_size.is_power_of_two()
        && (128..=block_bytes).contains(&inode_size)
        && inodes_per_group > 0;
    if !sane {
        return Err(format!(
            "superblock fields out of range (blocks {blocks_count}, first {first_data_block}, per group \
             {blocks_per_group}, descriptor {desc_size} bytes, inode {inode_size} bytes)"
        ));
    }
    let group_count = (blocks_count - first_data_block).div_ceil(u64::from(blocks_per_group));
    let group_count = u32::try_from(group_count).map_err(|_| "too many groups".to_string())?;
    let csum_seed = csum.then(|| {
        if incompat & INCOMPAT_CSUM_SEED != 0 {
            le32(sb, 0x270)
        } else {
            crc32c_raw(!0, &sb[104..120])
        }
    });
    let inode_table_bytes = u64::from(inodes_per_group) * u64::from(inode_size);
    Ok(Geometry {
        block_bytes,
        blocks_count,
        first_data_block,
        blocks_per_group,
        group_count,
        desc_size,
        inode_table_blocks: inode_table_bytes.div_ceil(u64::from(block_bytes)),
        reserved_gdt_blocks: u32::from(le16(sb, 206)),
        sparse_super: ro & RO_COMPAT_SPARSE_SUPER != 0,
        sparse_super2: (compat & COMPAT_SPARSE_SUPER2 != 0).then(|| [le32(sb, 0x24C), le32(sb, 0x250)]),
        csum_seed,
    })
}

/// One group descriptor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Group {
    /// The block bitmap's block.
    pub block_bitmap: u64,
    /// The inode bitmap's block.
    pub inode_bitmap: u64,
    /// The inode table's first block.
    pub inode_table: u64,
    /// The bitmap is not initialised: every block not holding metadata is free.
    pub block_uninit: bool,
    bitmap_csum: u32,
}

/// Parses the descriptor table (`gdt`: `gdt_blocks()` blocks from
/// `gdt_offset_bytes()`).
pub fn parse_descriptors(geo: &Geometry, gdt: &[u8]) -> Result<Vec<Group>, String> {
    let ds = geo.desc_size as usize;
    if gdt.len() < geo.group_count as usize * ds {
        return Err(format!("descriptor table: {} bytes for {} groups", gdt.len(), geo.group_count));
    }
    let mut out = Vec::with_capacity(geo.group_count as usize);
    for g in 0..geo.group_count {
        let d = &gdt[g as usize * ds..(g as usize + 1) * ds];
        let hi = |at: usize| if ds >= 64 { u64::from(le32(d, at)) << 32 } else { 0 };
        if let Some(seed) = geo.csum_seed {
            let mut c = crc32c_raw(seed, &g.to_le_bytes());
            c = crc32c_raw(c, &d[..30]);
            c = crc32c_raw(c, &[0, 0]);
            c = crc32c_raw(c, &d[32..]);
            if (c & 0xFFFF) as u16 != le16(d, 30) {
                return Err(format!("group {g}: descriptor checksum mismatch (corrupt)"));
            }
        }
        let group = Group {
            block_bitmap: u64::from(le32(d, 0)) | hi(0x20),
            inode_bitmap: u64::from(le32(d, 4)) | hi(0x24),
            inode_table: u64::from(le32(d, 8)) | hi(0x28),
            block_uninit: le16(d, 18) & BG_BLOCK_UNINIT != 0,
            bitmap_csum: u32::from(le16(d, 24)) | if ds >= 64 { u32::from(le16(d, 0x38)) << 16 } else { 0 },
        };
        let inside = |b: u64, n: u64| {
            b > geo.first_data_block && b.checked_add(n).is_some_and(|e| e <= geo.blocks_count)
        };
        if !inside(group.block_bitmap, 1)
            || !inside(group.inode_bitmap, 1)
            || !inside(group.inode_table, geo.inode_table_blocks)
        {
            return Err(format!("group {g}: bitmap or inode table block out of range (corrupt)"));
        }
        out.push(group);
    }
    Ok(out)
}

/// Pushes the extent `[s, s + n)` clipped to `[lo, hi)`.
fn clip_into(out: &mut Vec<(u64, u64)>, s: u64, n: u64, lo: u64, hi: u64) {
    let (a, b) = (s.max(lo), (s + n).min(hi));
    if a < b {
        out.push((a, b - a));
    }
}

/// The blocks of group `g` holding metadata (superblock and descriptor
/// copies, and any group's bitmaps and inode table that lie in it), sorted.
fn metadata_in_group(geo: &Geometry, groups: &[Group], g: u32) -> Vec<(u64, u64)> {
    let (lo, hi) = (geo.group_start(g), geo.group_start(g) + geo.group_blocks(g));
    let mut used = Vec::new();
    if geo.has_super(g) {
        let n = 1 + geo.gdt_blocks() + u64::from(geo.reserved_gdt_blocks);
        clip_into(&mut used, lo, n, lo, hi);
    }
    for d in groups {
        clip_into(&mut used, d.block_bitmap, 1, lo, hi);
        clip_into(&mut used, d.inode_bitmap, 1, lo, hi);
        clip_into(&mut used, d.inode_table, geo.inode_table_blocks, lo, hi);
    }
    used.sort_unstable();
    used
}

/// The free blocks of group `g` as extents `(block, count)`: from its
/// bitmap (`bitmap`: one block, checked against its checksum), or for a
/// `BLOCK_UNINIT` group, the group minus its metadata.
pub fn group_free_extents(
    geo: &Geometry,
    groups: &[Group],
    g: u32,
    bitmap: Option<&[u8]>,
) -> Result<Vec<(u64, u64)>, String> {
    let (start, n) = (geo.group_start(g), geo.group_blocks(g));
    let d = &groups[g as usize];
    let mut out: Vec<(u64, u64)> = Vec::new();
    if d.block_uninit {
        let mut pos = start;
        for (s, l) in metadata_in_group(geo, groups, g) {
            if s > pos {
                out.push((pos, s - pos));
            }
            pos = pos.max(s + l);
        }
        if pos < start + n {
            out.push((pos, start + n - pos));
        }
        return Ok(out);
    }
    let bm = bitmap.ok_or_else(|| format!("group {g}: bitmap missing"))?;
    let bytes = geo.blocks_per_group as usize / 8;
    if bm.len() < bytes {
        return Err(format!("group {g}: bitmap of {} bytes, need {bytes}", bm.len()));
    }
    if let Some(seed) = geo.csum_seed {
        let c = crc32c_raw(seed, &bm[..bytes]);
        let mask = if geo.desc_size >= 64 { u32::MAX } else { 0xFFFF };
        if c & mask != d.bitmap_csum {
            return Err(format!(
                "group {g}: block bitmap at block {} fails its checksum (corrupt)",
                d.block_bitmap
            ));
        }
    }
    for i in 0..n {
        if bm[(i / 8) as usize] & (1 << (i % 8)) != 0 {
            continue;
        }
        match out.last_mut() {
            Some((s, l)) if *s + *l == start + i => *l += 1,
            _ => out.push((start + i, 1)),
        }
    }
    // Metadata is always in use, whatever a (damaged) bitmap says.
    for (s, l) in metadata_in_group(geo, groups, g) {
        if out.iter().any(|&(fs, fl)| fs < s + l && s < fs + fl) {
            return Err(format!(
                "group {g}: bitmap at block {} marks metadata free (corrupt)",
                d.block_bitmap
            ));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn synthetic_superblock(log: u32, blocks: u32, per_group: u32) -> Vec<u8> {
        let mut sb = vec![0u8; SUPERBLOCK_BYTES];
        sb[4..8].copy_from_slice(&blocks.to_le_bytes());
        sb[20..24].copy_from_slice(&u32::from(log == 0).to_le_bytes());
        sb[24..28].copy_from_slice(&log.to_le_bytes());
        sb[32..36].copy_from_slice(&per_group.to_le_bytes());
        sb[40..44].copy_from_slice(&64u32.to_le_bytes());
        sb[56..58].copy_from_slice(&MAGIC.to_le_bytes());
        sb[100..104].copy_from_slice(&RO_COMPAT_SPARSE_SUPER.to_le_bytes());
        sb
    }

    #[test]
    fn uninit_groups_are_free_but_their_metadata_and_sparse_backups() {
        let sb = synthetic_superblock(2, 3 * 8192, 8192);
        let geo = parse_superblock(&sb).unwrap();
        assert_eq!((geo.block_bytes, geo.group_count, geo.inode_table_blocks), (4096, 3, 2));
        assert!(geo.has_super(1) && !geo.has_super(2));
        let mut gdt = vec![0u8; 96];
        for g in 0..3u32 {
            let base = 10 + u64::from(g) * 4; // flex_bg-style: everything in group 0
            let d = &mut gdt[g as usize * 32..];
            d[0..4].copy_from_slice(&(base as u32).to_le_bytes());
            d[4..8].copy_from_slice(&(base as u32 + 1).to_le_bytes());
            d[8..12].copy_from_slice(&(base as u32 + 2).to_le_bytes());
            d[18..20].copy_from_slice(&BG_BLOCK_UNINIT.to_le_bytes());
        }
        let groups = parse_descriptors(&geo, &gdt).unwrap();
        // Group 0: superblock + 1 GDT block, then metadata at 10..22.
        assert_eq!(group_free_extents(&geo, &groups, 0, None).unwrap(), vec![(2, 8), (22, 8192 - 22)]);
        assert_eq!(group_free_extents(&geo, &groups, 1, None).unwrap(), vec![(8194, 8190)], "a backup");
        assert_eq!(group_free_extents(&geo, &groups, 2, None).unwrap(), vec![(16384, 8192)]);
    }

    #[test]
    fn bitmaps_give_free_runs_and_a_bitmap_freeing_metadata_is_corrupt() {
        let sb = synthetic_superblock(0, 8193, 8192);
        let geo = parse_superblock(&sb).unwrap();
        assert_eq!(geo.first_data_block, 1);
        let mut gdt = vec![0u8; 32];
        gdt[0..4].copy_from_slice(&3u32.to_le_bytes());
        gdt[4..8].copy_from_slice(&4u32.to_le_bytes());
        gdt[8..12].copy_from_slice(&5u32.to_le_bytes());
        let groups = parse_descriptors(&geo, &gdt).unwrap();
        let mut bm = vec![0xFFu8; 1024];
        bm[100] = !0b0000_0110; // blocks 1 + 801 and 1 + 802 free
        assert_eq!(group_free_extents(&geo, &groups, 0, Some(&bm)).unwrap(), vec![(802, 2)]);
        bm[0] = 0; // blocks 1..9: the superblock and metadata
        assert!(group_free_extents(&geo, &groups, 0, Some(&bm)).unwrap_err().contains("corrupt"));
    }

    #[test]
    fn refusals_name_the_reason() {
        let mut sb = synthetic_superblock(2, 8192, 8192);
        assert!(parse_superblock(&sb[..100]).is_err());
        sb[96] = INCOMPAT_RECOVER as u8;
        assert!(parse_superblock(&sb).unwrap_err().contains("recovery"));
        sb[96] = INCOMPAT_META_BG as u8;
        assert!(parse_superblock(&sb).unwrap_err().contains("meta_bg"));
        sb[96] = 0;
        sb[56] = 0;
        assert!(parse_superblock(&sb).unwrap_err().contains("magic"));
    }

    proptest! {
        #![proptest_config(crate::fuzz_support::config(512))]

        /// Hostile bytes never panic: every path returns a result, and the
        /// free extents lie inside their group.
        #[test]
        fn the_parser_never_panics_on_hostile_bytes(
            log in 0u32..4,
            blocks in 9u32..200_000,
            per_group in prop_oneof![Just(8192u32), 8u32..70_000],
            flips in prop::collection::vec((0usize..1024, any::<u8>()), 0..40),
            gdt in prop::collection::vec(any::<u8>(), 0..4096),
            bitmap in prop::collection::vec(any::<u8>(), 0..8192),
            uninit in any::<bool>(),
        ) {
            let mut sb = synthetic_superblock(log, blocks, per_group);
            for (at, v) in flips {
                if at != 56 && at != 57 {
                    sb[at] = v;
                }
            }
            let Ok(geo) = parse_superblock(&sb) else { return Ok(()) };
            let mut gdt = gdt;
            if uninit && gdt.len() >= 20 {
                gdt[18] |= BG_BLOCK_UNINIT as u8;
            }
            let Ok(groups) = parse_descriptors(&geo, &gdt) else { return Ok(()) };
            for g in 0..geo.group_count.min(4) {
                if let Ok(ext) = group_free_extents(&geo, &groups, g, Some(&bitmap)) {
                    for (s, n) in ext {
                        prop_assert!(s >= geo.group_start(g) && s + n <= geo.group_start(g) + geo.group_blocks(g));
                    }
                }
            }
        }
    }
}
