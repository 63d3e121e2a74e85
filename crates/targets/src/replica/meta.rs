//! The region record: the one piece of `replica` metadata that must be
//! durable. It lists the blocks that may hold replica bytes on disk (the
//! *region*). Every such block was declared free by the file system and
//! has not been written by it since (as far as any flushed state goes), so
//! after any shutdown, clean or not, those blocks are free and read as
//! zeroes, whatever replica bytes they hold.
//!
//! Rules that keep the record exact enough:
//! - a block joins the region (record written with FUA, completed) before
//!   any replica write to it is issued;
//! - a file-system write to a region block leaves the region at once in
//!   memory, and the record without it is written (FUA) before the next
//!   upper flush, or the FUA write itself, completes. A crash before that
//!   loses only an unflushed write, which the durability rules allow.
//!
//! Layout at the end of the lower device, after the volume:
//! `| copy 0 (meta_record_bytes) | copy 1 (meta_record_bytes) |`, each a
//! [`MetaBlockCodec`] block; generation `g` goes to copy `g % 2`. Payload:
//! `volume_blocks u64, block_bytes u32, extent_count u32`, then per extent
//! `start u64, length u64`, sorted, disjoint, within the volume.

use layoutd_core::metablock::{MetaBlockCodec, MetaError, Reader};

/// The region record's codec for copies of `block_bytes`.
pub(crate) fn codec(block_bytes: u32) -> MetaBlockCodec {
    MetaBlockCodec { magic: *b"LDREPRG1", version: 1, block_bytes: block_bytes as usize }
}

const PAYLOAD_HEAD_BYTES: usize = 16;
const EXTENT_BYTES: usize = 16;

/// How many extents a record of `block_bytes` holds.
pub(crate) fn extents_max(block_bytes: u32) -> usize {
    (codec(block_bytes).payload_bytes_max() - PAYLOAD_HEAD_BYTES) / EXTENT_BYTES
}

/// Encodes the region; `None` if it has more extents than a record holds.
pub(crate) fn encode(
    record_bytes: u32,
    generation: u64,
    volume_blocks: u64,
    block_bytes: u32,
    extents: &[(u64, u64)],
) -> Option<Vec<u8>> {
    if extents.len() > extents_max(record_bytes) {
        return None;
    }
    let mut p = Vec::with_capacity(PAYLOAD_HEAD_BYTES + extents.len() * EXTENT_BYTES);
    p.extend_from_slice(&volume_blocks.to_le_bytes());
    p.extend_from_slice(&block_bytes.to_le_bytes());
    p.extend_from_slice(&(extents.len() as u32).to_le_bytes());
    for &(s, n) in extents {
        assert!(n > 0 && s + n <= volume_blocks, "region extent ({s}, {n}) within the volume");
        p.extend_from_slice(&s.to_le_bytes());
        p.extend_from_slice(&n.to_le_bytes());
    }
    Some(codec(record_bytes).encode(generation, &p).expect("the payload fits: counted above"))
}

/// Decodes a payload, checking it against this volume's geometry.
pub(crate) fn decode(
    payload: &[u8],
    volume_blocks: u64,
    block_bytes: u32,
) -> Result<Vec<(u64, u64)>, MetaError> {
    let mut r = Reader::new(payload);
    let (vb, bb, count) = (r.u64()?, r.u32()?, r.u32()?);
    if vb != volume_blocks || bb != block_bytes {
        return Err(MetaError::Malformed(format!(
            "written for {vb} blocks of {bb} bytes; this volume has {volume_blocks} of {block_bytes} (config changed?)"
        )));
    }
    let mut out: Vec<(u64, u64)> = Vec::with_capacity((count as usize).min(r.remaining() / EXTENT_BYTES));
    for i in 0..count {
        let (s, n) = (r.u64()?, r.u64()?);
        let end = s.checked_add(n).filter(|&e| n > 0 && e <= volume_blocks);
        let after_prev = out.last().is_none_or(|&(ps, pn)| ps + pn < s);
        if end.is_none() || !after_prev {
            return Err(MetaError::Malformed(format!(
                "region extent {i} ({s}, {n}) is out of order or range"
            )));
        }
        out.push((s, n));
    }
    if r.remaining() != 0 {
        return Err(MetaError::Malformed(format!("{} bytes after the last extent", r.remaining())));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn region_records_round_trip_and_refuse_damage() {
        let ext = vec![(0, 4), (10, 90)];
        let b = encode(4096, 7, 100, 4096, &ext).unwrap();
        let d = codec(4096).decode(&b).unwrap();
        assert_eq!(d.generation, 7);
        assert_eq!(decode(&d.payload, 100, 4096).unwrap(), ext);
        assert!(decode(&d.payload, 99, 4096).unwrap_err().to_string().contains("config changed"));
        let bad = encode(4096, 7, 100, 4096, &[(0, 4), (4, 1)]).unwrap(); // adjacent: not merged
        let d = codec(4096).decode(&bad).unwrap();
        assert!(decode(&d.payload, 100, 4096).is_err());
        let mut torn = b.clone();
        torn[100] ^= 1;
        assert_eq!(codec(4096).decode(&torn), Err(MetaError::BadCrc));
        let many: Vec<(u64, u64)> = (0..300).map(|i| (i * 2, 1)).collect();
        assert!(encode(4096, 1, 1000, 4096, &many).is_none(), "a 4 KiB record holds 253 extents");
    }
}
