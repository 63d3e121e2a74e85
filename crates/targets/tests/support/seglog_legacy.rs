//! The seglog blocks (and the `log`'s map pages) of the releases before:
//! before format identities, segment headers and summaries of version 2,
//! ring checkpoints of version 2, chain checkpoints of version 3 (none
//! carries a format id); before the log's map pages carried the format
//! id, chain checkpoints of version 4; both wrote map pages of version 1
//! (page index and entry count, no id); before the chain checkpoint
//! recorded the log map's digest, chain checkpoints of version 5 (map
//! pages as this build's); before it recorded the map's sketch of
//! written pages, chain checkpoints of version 6. Made here from this build's
//! blocks by moving their fields back, so tests can build the image an
//! older release left and check that this build opens it. Uses only the
//! core codec (no target code), so unit tests and the runtime's tests
//! include it alike.

// Each includer uses part of it.
#![allow(dead_code)]

use layoutd_core::metablock::MetaBlockCodec;

const HEADER_MAGIC: [u8; 8] = *b"LDSEGHD1";
const CHECKPOINT_MAGIC: [u8; 8] = *b"LDSEGCK1";
const CHAIN_MAGIC: [u8; 8] = *b"LDSEGCC1";
const MAP_PAGE_MAGIC: [u8; 8] = *b"LDLOGMP1";

/// The release whose versions blocks are moved back to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Release {
    /// Before format identities (session 26).
    BeforeFormatIds,
    /// Before the log's map pages carried the format id (session 27).
    BeforeMapIds,
    /// Before the chain checkpoint recorded the log map's digest
    /// (session 28).
    BeforeMapDigest,
    /// Before the chain checkpoint recorded the log map's sketch of
    /// written pages (sessions 29 and 30).
    BeforeMapSketch,
}

/// `block` (a whole block: header, summary or checkpoint of this build) as
/// the release before format identities wrote it, or `None` if it is not
/// one.
pub fn downgrade_block(block: &[u8]) -> Option<Vec<u8>> {
    downgrade_block_to(block, Release::BeforeFormatIds, None)
}

/// `block` as `release` wrote it, or `None` if it is not one of the blocks
/// that release wrote otherwise. A map page is moved back only if it is a
/// page of format `format_id` (its page index is its owner field XOR the
/// id).
pub fn downgrade_block_to(block: &[u8], release: Release, format_id: Option<u64>) -> Option<Vec<u8>> {
    let magic: [u8; 8] = block.get(0..8)?.try_into().ok()?;
    let (new, old) = match (magic, release) {
        (HEADER_MAGIC | CHECKPOINT_MAGIC, Release::BeforeFormatIds) => (3, 2),
        (CHAIN_MAGIC, Release::BeforeFormatIds) => (7, 3),
        (CHAIN_MAGIC, Release::BeforeMapIds) => (7, 4),
        (CHAIN_MAGIC, Release::BeforeMapDigest) => (7, 5),
        (CHAIN_MAGIC, Release::BeforeMapSketch) => (7, 6),
        (MAP_PAGE_MAGIC, Release::BeforeFormatIds | Release::BeforeMapIds) => (2, 1),
        _ => return None,
    };
    let codec = MetaBlockCodec { magic, version: new, block_bytes: block.len() };
    let d = codec.decode(block).ok()?;
    let p = d.payload;
    let payload = if magic == MAP_PAGE_MAGIC {
        // v2: owner u64 (format id XOR page index), entries u32.
        // v1: page_index u32, entry_count u32, entries u32.
        let owner = u64::from_le_bytes(p.get(0..8)?.try_into().ok()?);
        let page = u32::try_from(owner ^ format_id?).ok()?;
        let mut q = page.to_le_bytes().to_vec();
        q.extend((((p.len() - 8) / 4) as u32).to_le_bytes());
        q.extend_from_slice(&p[8..]);
        q
    } else if magic == CHAIN_MAGIC {
        // v7: ..., format_id u64, flags u32, map_pages_written u32,
        // map_digest (sum u64, weighted u64), map_sketch (384 bytes); v6
        // without the sketch, v5 also without the digest, v4 also without
        // the two before, v3 also without the format id.
        p[..p.len() - 384 - [32, 24, 16, 0][old as usize - 3]].to_vec()
    } else if magic == HEADER_MAGIC {
        // v3: boot u64, format_id u64, slot_bytes u32, slot_count u16,
        // entry_count u16, slots_used u16, flags u16, payload_crc u32.
        // v2: boot u64, then slot_bytes, slot_count, entry_count,
        // slots_used, payload_crc, flags as u32.
        let u16_at = |o: usize| u32::from(u16::from_le_bytes([p[o], p[o + 1]]));
        let mut q = p[0..8].to_vec();
        q.extend_from_slice(&p[16..20]);
        for v in [u16_at(20), u16_at(22), u16_at(24)] {
            q.extend(v.to_le_bytes());
        }
        q.extend_from_slice(&p[28..32]);
        q.extend(u16_at(26).to_le_bytes());
        q.extend_from_slice(&p[32..]);
        q
    } else {
        // Checkpoints: the format id is the last field.
        p[..p.len() - 8].to_vec()
    };
    MetaBlockCodec { version: old, ..codec }.encode(d.generation, &payload).ok()
}

/// Downgrades every block found in `image` (at 512-byte steps, trying each
/// of `block_sizes` and 512) in place, to the release before format
/// identities; returns how many.
pub fn downgrade_image(image: &mut [u8], block_sizes: &[usize]) -> usize {
    downgrade_image_to(image, block_sizes, Release::BeforeFormatIds)
}

/// The format id of the first chain checkpoint of this build found in
/// `image` (at 512-byte steps; the id at payload offset 44).
fn chain_format_id(image: &[u8]) -> Option<u64> {
    let codec = MetaBlockCodec { magic: CHAIN_MAGIC, version: 7, block_bytes: 512 };
    (0..image.len() / 512).find_map(|i| {
        let d = codec.decode(&image[i * 512..i * 512 + 512]).ok()?;
        Some(u64::from_le_bytes(d.payload.get(44..52)?.try_into().ok()?))
    })
}

/// [`downgrade_image`] to `release`'s versions (map pages of the format
/// named by the image's chain checkpoint, if it holds one).
pub fn downgrade_image_to(image: &mut [u8], block_sizes: &[usize], release: Release) -> usize {
    let format_id = chain_format_id(image);
    let mut count = 0;
    let mut at = 0;
    while at + 512 <= image.len() {
        for &size in block_sizes.iter().chain(&[512]) {
            let Some(block) = image.get(at..at + size) else { continue };
            if let Some(old) = downgrade_block_to(block, release, format_id) {
                image[at..at + size].copy_from_slice(&old);
                count += 1;
                break;
            }
        }
        at += 512;
    }
    count
}

/// The version of the newer of the two checkpoint copies in a seglog
/// checkpoint area (8 KiB: copies at 0 and 4096; generation at 16).
pub fn newest_checkpoint_version(area: &[u8]) -> u32 {
    let field = |at: usize, n: usize| {
        u64::from_le_bytes({
            let mut b = [0u8; 8];
            b[..n].copy_from_slice(&area[at..at + n]);
            b
        })
    };
    let newest = if field(4096 + 16, 8) > field(16, 8) { 4096 } else { 0 };
    field(newest + 8, 4) as u32
}

/// The versions of both checkpoint copies of a seglog checkpoint area.
pub fn checkpoint_versions(area: &[u8]) -> [u32; 2] {
    let v = |at: usize| u32::from_le_bytes(area[at + 8..at + 12].try_into().expect("4 bytes"));
    [v(0), v(4096)]
}

/// The checkpoint copies of a seglog checkpoint area (ring or chain, at
/// 0 and 4096) whose blocks decode (magic, version and checksum) in this
/// build's version or an older one a release before wrote: (generation,
/// version) of each.
pub fn readable_checkpoints(area: &[u8]) -> Vec<(u64, u32)> {
    let copy = |at: usize| {
        let block = area.get(at..at + 512)?;
        // This build's version, and the older ones the releases before wrote.
        let (magic, new, old) = match block[0..8].try_into().ok()? {
            CHECKPOINT_MAGIC => (CHECKPOINT_MAGIC, 3, 2..=2),
            CHAIN_MAGIC => (CHAIN_MAGIC, 7, 3..=6),
            _ => return None,
        };
        let codec = MetaBlockCodec { magic, version: new, block_bytes: 512 };
        codec.decode_versioned(block, u64::MAX, |v| old.contains(&v)).ok().map(|(d, v)| (d.generation, v))
    };
    [0, 4096].into_iter().filter_map(copy).collect()
}

/// [`readable_checkpoints`] of the checkpoint area `read` fills (8 KiB).
pub fn readable_checkpoints_on(read: impl Fn(&mut [u8])) -> Vec<(u64, u32)> {
    let mut area = vec![0u8; 8192];
    read(&mut area);
    readable_checkpoints(&area)
}

/// Reads a whole device image, downgrades it ([`downgrade_image`]) and
/// writes it back; returns how many blocks were downgraded.
pub fn downgrade_device(
    size: usize,
    read: impl Fn(&mut [u8]),
    write: impl Fn(&[u8]),
    block_sizes: &[usize],
) -> usize {
    downgrade_device_to(size, read, write, block_sizes, Release::BeforeFormatIds)
}

/// [`downgrade_device`] to `release`'s versions.
pub fn downgrade_device_to(
    size: usize,
    read: impl Fn(&mut [u8]),
    write: impl Fn(&[u8]),
    block_sizes: &[usize],
    release: Release,
) -> usize {
    let mut bytes = vec![0u8; size];
    read(&mut bytes);
    let n = downgrade_image_to(&mut bytes, block_sizes, release);
    write(&bytes);
    n
}
