//! The pool's metadata on the lower device, all through
//! [`layoutd_core::metablock`]:
//!
//! - two checkpoint copies, generation `g` in copy `g % 2`: a header block
//!   (geometry, journal start, the volume table) and body blocks of
//!   [`JournalRecord::ExceptionRange`] records (every volume's map as
//!   extents), every block carrying the checkpoint's generation;
//! - a ring of journal blocks, block `seq` at `seq % journal_blocks`, each
//!   a metablock of generation `seq` holding [`JournalRecord::Exception`]
//!   records (a chunk mapped, or unmapped with [`UNMAPPED`]).

use super::config::{PoolConfig, META_BLOCK_BYTES};
use layoutd_core::metablock::{JournalRecord, MetaBlockCodec, MetaError, Reader};

/// Checkpoint header blocks.
pub const HEADER_CODEC: MetaBlockCodec =
    MetaBlockCodec { magic: *b"LDPOOLCH", version: 1, block_bytes: META_BLOCK_BYTES as usize };
/// Checkpoint body blocks.
pub const BODY_CODEC: MetaBlockCodec =
    MetaBlockCodec { magic: *b"LDPOOLCB", version: 1, block_bytes: META_BLOCK_BYTES as usize };
/// Journal blocks.
pub const JOURNAL_CODEC: MetaBlockCodec =
    MetaBlockCodec { magic: *b"LDPOOLJN", version: 1, block_bytes: META_BLOCK_BYTES as usize };
/// The location of an unmapped chunk in a journal record.
pub const UNMAPPED: u64 = u64::MAX;
/// `parent` of a volume without one (the origin).
const NO_PARENT: u32 = u32::MAX;

/// One volume of the table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VolumeEntry {
    /// Its slot (0 = origin).
    pub slot: u32,
    /// Its name (the NBD export name).
    pub name: String,
    /// The volume it was taken of, if any.
    pub parent: Option<u32>,
    /// Whether writes are refused.
    pub read_only: bool,
}

/// A decoded checkpoint header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    /// The checkpoint's generation.
    pub generation: u64,
    /// The first journal sequence number after it.
    pub journal_start: u64,
    /// Body blocks written.
    pub body_blocks: u64,
    /// Extent records in the body.
    pub extents: u64,
    /// The volume table.
    pub volumes: Vec<VolumeEntry>,
}

/// One run of a volume's map: `(slot, first chunk, count, first location)`.
pub type Run = (u32, u64, u32, u64);

/// Encodes a whole checkpoint copy (header and the body blocks it uses).
pub fn encode_checkpoint(
    cfg: &PoolConfig,
    generation: u64,
    journal_start: u64,
    volumes: &[VolumeEntry],
    runs: &[Run],
) -> Vec<u8> {
    let per_block = super::config::EXTENTS_PER_BLOCK as usize;
    let body: Vec<&[Run]> = runs.chunks(per_block).collect();
    assert!(body.len() as u64 <= cfg.body_blocks, "checked against extents_max before");
    let mut p = Vec::new();
    for v in [cfg.chunk_bytes, cfg.volume_chunks, cfg.data_chunks, cfg.volumes_max] {
        p.extend(v.to_le_bytes());
    }
    p.extend(journal_start.to_le_bytes());
    p.extend((body.len() as u64).to_le_bytes());
    p.extend((runs.len() as u64).to_le_bytes());
    p.extend((volumes.len() as u32).to_le_bytes());
    for v in volumes {
        p.extend(v.slot.to_le_bytes());
        p.extend(v.parent.unwrap_or(NO_PARENT).to_le_bytes());
        p.push(u8::from(v.read_only));
        p.push(v.name.len() as u8);
        p.extend(v.name.as_bytes());
    }
    let mut out = HEADER_CODEC.encode(generation, &p).expect("the volume table fits a block");
    for block in body {
        let mut b = Vec::with_capacity(block.len() * 26);
        for &(volume, chunk, count, location) in block {
            JournalRecord::ExceptionRange { volume, chunk, count, location }.encode(&mut b);
        }
        out.extend(BODY_CODEC.encode(generation, &b).expect("sized to fit"));
    }
    out
}

fn malformed(s: String) -> MetaError {
    MetaError::Malformed(s)
}

/// Decodes and checks a checkpoint header against the config.
pub fn decode_header(cfg: &PoolConfig, block: &[u8]) -> Result<Header, MetaError> {
    let d = HEADER_CODEC.decode(block)?;
    let mut r = Reader::new(&d.payload);
    let geometry = [r.u64()?, r.u64()?, r.u64()?, r.u64()?];
    let want = [cfg.chunk_bytes, cfg.volume_chunks, cfg.data_chunks, cfg.volumes_max];
    if geometry != want {
        return Err(malformed(format!(
            "written for chunk/volume/data/slots {geometry:?}, the config gives {want:?} \
             (a pool's geometry cannot change: use the config it was formatted with)"
        )));
    }
    let (journal_start, body_blocks, extents) = (r.u64()?, r.u64()?, r.u64()?);
    if body_blocks > cfg.body_blocks || extents > body_blocks * super::config::EXTENTS_PER_BLOCK {
        return Err(malformed(format!("{body_blocks} body blocks / {extents} extents past the area")));
    }
    let n = r.u32()?;
    let mut volumes: Vec<VolumeEntry> = Vec::new();
    for _ in 0..n {
        let slot = r.u32()?;
        let parent = Some(r.u32()?).filter(|&p| p != NO_PARENT);
        let read_only = match r.u8()? {
            0 => false,
            1 => true,
            x => return Err(malformed(format!("volume {slot}: read-only flag {x}"))),
        };
        let len = usize::from(r.u8()?);
        let name = String::from_utf8(r.bytes(len)?.to_vec())
            .map_err(|_| malformed(format!("volume {slot}: name is not UTF-8")))?;
        if u64::from(slot) >= cfg.volumes_max || volumes.iter().any(|v| v.slot == slot || v.name == name) {
            return Err(malformed(format!("volume {slot} `{name}`: slot out of range or repeated")));
        }
        volumes.push(VolumeEntry { slot, name, parent, read_only });
    }
    if !volumes.iter().any(|v| v.slot == 0) {
        return Err(malformed("no origin volume (slot 0)".into()));
    }
    Ok(Header { generation: d.generation, journal_start, body_blocks, extents, volumes })
}

/// Decodes the body blocks (`bytes` from the first body block on) of a
/// checkpoint with `header`; `Err((block index, why))`.
pub fn decode_body(cfg: &PoolConfig, header: &Header, bytes: &[u8]) -> Result<Vec<Run>, (u64, MetaError)> {
    let mut runs = Vec::with_capacity(header.extents as usize);
    for i in 0..header.body_blocks {
        let at = (i * META_BLOCK_BYTES) as usize;
        let d = BODY_CODEC.decode(&bytes[at..at + META_BLOCK_BYTES as usize]).map_err(|e| (i + 1, e))?;
        if d.generation != header.generation {
            return Err((
                i + 1,
                malformed(format!("generation {} in a checkpoint of {}", d.generation, header.generation)),
            ));
        }
        for rec in JournalRecord::decode_all(&d.payload).map_err(|e| (i + 1, e))? {
            let JournalRecord::ExceptionRange { volume, chunk, count, location } = rec else {
                return Err((i + 1, malformed(format!("unexpected record {rec:?}"))));
            };
            let known = header.volumes.iter().any(|v| v.slot == volume);
            let in_range = chunk.checked_add(u64::from(count)).is_some_and(|e| e <= cfg.volume_chunks)
                && location.checked_add(u64::from(count)).is_some_and(|e| e <= cfg.data_chunks);
            if !known || !in_range {
                return Err((
                    i + 1,
                    malformed(format!(
                        "volume {volume} chunks {chunk}+{count} at {location}: unknown volume or out of range"
                    )),
                ));
            }
            runs.push((volume, chunk, count, location));
        }
    }
    if runs.len() as u64 != header.extents {
        return Err((
            0,
            malformed(format!("{} extents found, the header says {}", runs.len(), header.extents)),
        ));
    }
    Ok(runs)
}

/// Encodes journal block `seq` holding `records` (at most [`journal_capacity`]).
pub fn encode_journal(seq: u64, records: &[JournalRecord]) -> Vec<u8> {
    let mut p = Vec::with_capacity(records.len() * 22);
    records.iter().for_each(|r| r.encode(&mut p));
    JOURNAL_CODEC.encode(seq, &p).expect("sized by journal_capacity")
}

/// Exception records one journal block holds.
pub const fn journal_capacity() -> usize {
    JOURNAL_CODEC.payload_bytes_max() / 22
}

/// Decodes a journal block: `(seq, records)`.
pub fn decode_journal(block: &[u8]) -> Result<(u64, Vec<JournalRecord>), MetaError> {
    let d = JOURNAL_CODEC.decode(block)?;
    let recs = JournalRecord::decode_all(&d.payload)?;
    if let Some(r) = recs.iter().find(|r| !matches!(r, JournalRecord::Exception { .. })) {
        return Err(malformed(format!("unexpected record {r:?} in a journal block")));
    }
    Ok((d.generation, recs))
}
