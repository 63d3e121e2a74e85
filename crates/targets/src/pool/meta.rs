//! The pool's metadata on the lower device, all through
//! [`layoutd_core::metablock`]:
//!
//! - two checkpoint copies, generation `g` in copy `g % 2`: a header block
//!   (geometry, journal start, the volume table) and body blocks of
//!   [`JournalRecord::ExceptionRange`] records (every volume's map as
//!   extents), every block carrying the checkpoint's generation;
//! - a ring of journal blocks, block `seq` at `seq % journal_blocks`, each
//!   a metablock of generation `seq` holding [`JournalRecord::Exception`]
//!   records (a chunk mapped, or unmapped with [`UNMAPPED`]);
//! - since version 2, in the body and the journal, the pool's own
//!   [`Record::Partial`] records (kind [`PARTIAL_KIND`], the same `kind,
//!   length, fields` framing as [`JournalRecord`]): a redirected data
//!   chunk's written sectors and the shared chunk the rest reads from.
//!   Version 1 blocks (no partial records) are still read.
//! - since version 3 of the body and journal blocks, a partial record's
//!   base may be [`NO_BASE`]: a fresh chunk kept partial (its unwritten
//!   sectors read as zeroes; `zero_new_chunks_with = "partial"`). A version
//!   2 block holding one is refused. A build before this version refuses
//!   a version 3 body block by its version, but took a version 3 journal
//!   block for a torn tail (dropping its records); since session 27 a
//!   journal block with a good crc that this build cannot read is refused.
//! - since version 3 of the header, the placement and its layout parameter (the slice count) after the
//!   geometry; a version 1 or 2 header records none ([`Header::placement`]
//!   `None`: the pool opens with the config's, or `nearest`, as before).

use super::config::{PlacementKind, PoolConfig, EXTENTS_PER_BLOCK, META_BLOCK_BYTES};
use super::partial::{Partial, Sectors, NO_BASE, SECTOR_WORDS};
use super::place::Sliced;
use layoutd_core::metablock::{
    Decoded, JournalRecord, MetaBlockCodec, MetaError, Reader, GENERATION_READ_MAX,
};

/// Checkpoint header blocks.
pub const HEADER_CODEC: MetaBlockCodec =
    MetaBlockCodec { magic: *b"LDPOOLCH", version: 3, block_bytes: META_BLOCK_BYTES as usize };
/// Where in a version 3 header block its placement code is (after the
/// metablock header and the four geometry fields); the slice count
/// follows it.
pub const PLACEMENT_OFFSET: usize = layoutd_core::metablock::HEADER_BYTES + 32;
/// A placement's code in the header.
fn placement_code(p: PlacementKind) -> u8 {
    match p {
        PlacementKind::Contiguous => 0,
        PlacementKind::Sliced => 1,
        PlacementKind::Nearest => 2,
    }
}
/// Checkpoint body blocks.
pub const BODY_CODEC: MetaBlockCodec =
    MetaBlockCodec { magic: *b"LDPOOLCB", version: 3, block_bytes: META_BLOCK_BYTES as usize };
/// Journal blocks.
pub const JOURNAL_CODEC: MetaBlockCodec =
    MetaBlockCodec { magic: *b"LDPOOLJN", version: 3, block_bytes: META_BLOCK_BYTES as usize };
/// The kind of a [`Record::Partial`] (past the core's record kinds).
pub const PARTIAL_KIND: u8 = 0x50;
/// Field bytes of a [`Record::Partial`]: chunk, base, the sector bitmap.
const PARTIAL_FIELD_BYTES: usize = 16 + 8 * SECTOR_WORDS;
/// A [`Record::Partial`]'s share of a checkpoint body block, in extent
/// records' room (it takes 50 bytes, two extents 52).
pub const PARTIAL_EXTENT_UNITS: u64 = 2;

/// Decodes a block of `codec`'s kind written by this version or an
/// earlier one (version 1: no partial records; a version 2 header: no
/// placement): the block and the version it was written in.
fn decode_versioned(codec: &MetaBlockCodec, block: &[u8]) -> Result<(Decoded, u32), MetaError> {
    codec.decode_versioned(block, GENERATION_READ_MAX, |v| (1..codec.version).contains(&v))
}

/// A record of the pool's journal or checkpoint body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Record {
    /// A core record (journal: `Exception`; body: `ExceptionRange`).
    Core(JournalRecord),
    /// Data chunk `chunk` is partly written: the sectors of `written`
    /// hold its data, the rest reads from the data chunk `base`
    /// ([`UNMAPPED`]: `chunk` is whole again, written or filled).
    Partial { chunk: u64, base: u64, written: Sectors },
}

impl Record {
    /// Appends the record (`kind, length, fields`).
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Record::Core(r) => r.encode(out),
            Record::Partial { chunk, base, written } => {
                out.push(PARTIAL_KIND);
                out.push(PARTIAL_FIELD_BYTES as u8);
                out.extend(chunk.to_le_bytes());
                out.extend(base.to_le_bytes());
                for w in written.words() {
                    out.extend(w.to_le_bytes());
                }
            }
        }
    }

    /// Encoded bytes.
    pub fn encoded_len(&self) -> usize {
        match self {
            Record::Core(JournalRecord::Exception { .. }) => EXCEPTION_RECORD_BYTES,
            Record::Core(JournalRecord::ExceptionRange { .. }) => super::config::EXTENT_RECORD_BYTES as usize,
            Record::Core(r) => {
                let mut v = Vec::new();
                r.encode(&mut v);
                v.len()
            }
            Record::Partial { .. } => 2 + PARTIAL_FIELD_BYTES,
        }
    }

    /// Every record of a payload, checked as [`JournalRecord::decode_all`]
    /// checks the core's.
    pub fn decode_all(payload: &[u8]) -> Result<Vec<Record>, MetaError> {
        let mut out = Vec::new();
        let mut i = 0;
        while i < payload.len() {
            let head = payload.get(i..i + 2).ok_or_else(|| malformed("a record's header is cut".into()))?;
            let (kind, len) = (head[0], usize::from(head[1]));
            let body = payload
                .get(i + 2..i + 2 + len)
                .ok_or_else(|| malformed(format!("record of kind {kind} runs past the payload")))?;
            if kind == PARTIAL_KIND {
                if len != PARTIAL_FIELD_BYTES {
                    return Err(malformed(format!(
                        "partial record of {len} bytes, not {PARTIAL_FIELD_BYTES}"
                    )));
                }
                let mut r = Reader::new(body);
                let (chunk, base) = (r.u64()?, r.u64()?);
                let mut words = [0u64; SECTOR_WORDS];
                for w in &mut words {
                    *w = r.u64()?;
                }
                out.push(Record::Partial { chunk, base, written: Sectors::from_words(words) });
            } else {
                let mut rs = JournalRecord::decode_all(&payload[i..i + 2 + len])?;
                out.push(Record::Core(rs.pop().expect("one record framed")));
            }
            i += 2 + len;
        }
        Ok(out)
    }
}

/// Bytes of an encoded `Exception` record.
const EXCEPTION_RECORD_BYTES: usize = 22;

/// A partial chunk `(chunk, state)` as its record.
pub fn partial_record(chunk: u64, p: &Partial) -> Record {
    Record::Partial { chunk, base: p.base, written: p.written }
}
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
    /// Records in the body (extents and partial chunks).
    pub extents: u64,
    /// The volume table.
    pub volumes: Vec<VolumeEntry>,
    /// The placement and its slice count (0 but for `sliced`); `None` in a
    /// header of version 1 or 2.
    pub placement: Option<(PlacementKind, u64)>,
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
    partials: &[Record],
) -> Vec<u8> {
    // Body blocks packed by room: an extent takes one unit, a partial
    // record `PARTIAL_EXTENT_UNITS`.
    let mut body: Vec<Vec<u8>> = Vec::new();
    let mut used = EXTENTS_PER_BLOCK;
    let records = runs
        .iter()
        .map(|&(volume, chunk, count, location)| {
            (Record::Core(JournalRecord::ExceptionRange { volume, chunk, count, location }), 1)
        })
        .chain(partials.iter().map(|r| (r.clone(), PARTIAL_EXTENT_UNITS)));
    for (r, units) in records {
        if used + units > EXTENTS_PER_BLOCK {
            body.push(Vec::new());
            used = 0;
        }
        used += units;
        r.encode(body.last_mut().expect("pushed"));
    }
    assert!(body.len() as u64 <= cfg.body_blocks, "checked against extents_max before");
    let mut p = Vec::new();
    for v in [cfg.chunk_bytes, cfg.volume_chunks, cfg.data_chunks, cfg.volumes_max] {
        p.extend(v.to_le_bytes());
    }
    p.push(placement_code(cfg.placement));
    let slices = if cfg.placement == PlacementKind::Sliced { cfg.slices } else { 0 };
    p.extend(slices.to_le_bytes());
    p.extend(journal_start.to_le_bytes());
    p.extend((body.len() as u64).to_le_bytes());
    p.extend(((runs.len() + partials.len()) as u64).to_le_bytes());
    p.extend((volumes.len() as u32).to_le_bytes());
    for v in volumes {
        p.extend(v.slot.to_le_bytes());
        p.extend(v.parent.unwrap_or(NO_PARENT).to_le_bytes());
        p.push(u8::from(v.read_only));
        p.push(v.name.len() as u8);
        p.extend(v.name.as_bytes());
    }
    let mut out = HEADER_CODEC.encode(generation, &p).expect("the volume table fits a block");
    for b in body {
        out.extend(BODY_CODEC.encode(generation, &b).expect("sized to fit"));
    }
    out
}

fn malformed(s: String) -> MetaError {
    MetaError::Malformed(s)
}

/// Decodes and checks a checkpoint header against the config.
pub fn decode_header(cfg: &PoolConfig, block: &[u8]) -> Result<Header, MetaError> {
    let (d, version) = decode_versioned(&HEADER_CODEC, block)?;
    let mut r = Reader::new(&d.payload);
    let geometry = [r.u64()?, r.u64()?, r.u64()?, r.u64()?];
    let want = [cfg.chunk_bytes, cfg.volume_chunks, cfg.data_chunks, cfg.volumes_max];
    if geometry != want {
        return Err(malformed(format!(
            "written for chunk/volume/data/slots {geometry:?}, the config gives {want:?} \
             (a pool's geometry cannot change: use the config it was formatted with)"
        )));
    }
    let placement = if version >= 3 { Some(decode_placement(cfg, &mut r)?) } else { None };
    let (journal_start, body_blocks, extents) = (r.u64()?, r.u64()?, r.u64()?);
    if journal_start > GENERATION_READ_MAX {
        // The journal's blocks are written with their seq as generation.
        return Err(malformed(format!("journal start {journal_start} is past {GENERATION_READ_MAX}")));
    }
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
    // A parent is another volume of the table (deleting a volume hands its
    // children its own parent), so `snapshot list` can look it up.
    if let Some(v) = volumes
        .iter()
        .find(|v| v.parent.is_some_and(|p| p == v.slot || !volumes.iter().any(|other| other.slot == p)))
    {
        return Err(malformed(format!(
            "volume {} `{}`: parent {} is not another volume of the table",
            v.slot,
            v.name,
            v.parent.expect("found by it")
        )));
    }
    Ok(Header { generation: d.generation, journal_start, body_blocks, extents, volumes, placement })
}

/// The placement fields of a version 3 header, checked against the
/// geometry (the policy they name must lay this pool out).
fn decode_placement(cfg: &PoolConfig, r: &mut Reader<'_>) -> Result<(PlacementKind, u64), MetaError> {
    let at = PLACEMENT_OFFSET;
    let kind = match r.u8()? {
        0 => PlacementKind::Contiguous,
        1 => PlacementKind::Sliced,
        2 => PlacementKind::Nearest,
        x => {
            return Err(malformed(format!(
                "placement code {x} at byte {at} of the header block (0 contiguous, 1 sliced, 2 nearest)"
            )))
        }
    };
    let slices = r.u64()?;
    let fits = match kind {
        PlacementKind::Sliced => Sliced::new(slices, cfg.data_chunks, cfg.volume_chunks).map(|_| ()),
        _ if slices != 0 => Err("only `sliced` has slices".into()),
        PlacementKind::Contiguous if cfg.volume_chunks > cfg.data_chunks => {
            Err("the volume is past the data area".into())
        }
        _ => Ok(()),
    };
    fits.map_err(|e| {
        malformed(format!(
            "placement code {} with {slices} slices at byte {at} of the header block: {e}",
            placement_code(kind)
        ))
    })?;
    Ok((kind, slices))
}

/// Decodes the body blocks (`bytes` from the first body block on) of a
/// checkpoint with `header`: its runs and its partial records;
/// `Err((block index, why))`.
pub fn decode_body(
    cfg: &PoolConfig,
    header: &Header,
    bytes: &[u8],
) -> Result<(Vec<Run>, Vec<Record>), (u64, MetaError)> {
    let mut runs = Vec::with_capacity(header.extents as usize);
    let mut partials = Vec::new();
    for i in 0..header.body_blocks {
        let at = (i * META_BLOCK_BYTES) as usize;
        let (d, version) = decode_versioned(&BODY_CODEC, &bytes[at..at + META_BLOCK_BYTES as usize])
            .map_err(|e| (i + 1, e))?;
        if d.generation != header.generation {
            return Err((
                i + 1,
                malformed(format!("generation {} in a checkpoint of {}", d.generation, header.generation)),
            ));
        }
        for rec in Record::decode_all(&d.payload).map_err(|e| (i + 1, e))? {
            let Record::Core(JournalRecord::ExceptionRange { volume, chunk, count, location }) = rec else {
                if partial_allowed(&rec, version) {
                    partials.push(rec);
                    continue;
                }
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
    if (runs.len() + partials.len()) as u64 != header.extents {
        return Err((
            0,
            malformed(format!(
                "{} extents and {} partial chunks found, the header says {} records",
                runs.len(),
                partials.len(),
                header.extents
            )),
        ));
    }
    Ok((runs, partials))
}

/// Whether a body or journal block of `version` may hold `rec` as a
/// partial record: none in version 1, one with a base in version 2, one
/// with [`NO_BASE`] (a fresh chunk kept partial) too since version 3.
fn partial_allowed(rec: &Record, version: u32) -> bool {
    match rec {
        Record::Partial { base, .. } => version >= 3 || (version == 2 && *base != NO_BASE),
        _ => false,
    }
}

/// The payloads of the journal blocks that hold `records`, in order,
/// each as full as it fits.
pub fn pack_journal(records: &[Record]) -> Vec<Vec<u8>> {
    let max = JOURNAL_CODEC.payload_bytes_max();
    let mut out: Vec<Vec<u8>> = Vec::new();
    for r in records {
        if out.last().is_none_or(|b| b.len() + r.encoded_len() > max) {
            out.push(Vec::with_capacity(max));
        }
        r.encode(out.last_mut().expect("pushed"));
    }
    out
}

/// Encodes journal block `seq` with a payload of [`pack_journal`].
pub fn encode_journal(seq: u64, payload: &[u8]) -> Vec<u8> {
    JOURNAL_CODEC.encode(seq, payload).expect("sized by pack_journal")
}

/// Decodes a journal block: `(seq, records)`.
pub fn decode_journal(block: &[u8]) -> Result<(u64, Vec<Record>), MetaError> {
    let (d, version) = decode_versioned(&JOURNAL_CODEC, block)?;
    let recs = Record::decode_all(&d.payload)?;
    let allowed = |r: &Record| match r {
        Record::Core(JournalRecord::Exception { .. }) => true,
        Record::Partial { .. } => partial_allowed(r, version),
        _ => false,
    };
    if let Some(r) = recs.iter().find(|r| !allowed(r)) {
        return Err(malformed(format!("unexpected record {r:?} in a journal block")));
    }
    Ok((d.generation, recs))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn partial() -> Record {
        let mut written = Sectors::default();
        written.set(1, 3);
        written.set(200, 1);
        Record::Partial { chunk: 7, base: 3, written }
    }

    #[test]
    fn records_round_trip_and_pack_into_journal_blocks_by_size() {
        let recs: Vec<Record> = (0..400u64)
            .map(|i| {
                if i % 3 == 0 {
                    partial()
                } else {
                    Record::Core(JournalRecord::Exception { volume: 1, chunk: i, location: i + 9 })
                }
            })
            .collect();
        assert_eq!(partial().encoded_len(), 50);
        let payloads = pack_journal(&recs);
        assert!(payloads.len() > 1);
        let mut back = Vec::new();
        for (seq, p) in payloads.iter().enumerate() {
            let encoded = p.len();
            assert!(encoded <= JOURNAL_CODEC.payload_bytes_max());
            let (s, r) = decode_journal(&encode_journal(seq as u64, p)).expect("decodes");
            assert_eq!(s, seq as u64);
            assert_eq!(r.iter().map(Record::encoded_len).sum::<usize>(), encoded);
            back.extend(r);
        }
        assert_eq!(back, recs);
    }

    #[test]
    fn version_1_blocks_are_read_but_may_not_hold_partial_records() {
        let v1 = MetaBlockCodec { version: 1, ..JOURNAL_CODEC };
        let mut p = Vec::new();
        JournalRecord::Exception { volume: 0, chunk: 4, location: 5 }.encode(&mut p);
        let (seq, recs) = decode_journal(&v1.encode(3, &p).expect("fits")).expect("a version 1 block reads");
        assert_eq!((seq, recs.len()), (3, 1));
        partial().encode(&mut p);
        let e = decode_journal(&v1.encode(3, &p).expect("fits")).expect_err("a partial record in version 1");
        assert!(e.to_string().contains("unexpected record"), "{e}");
        let v2 = MetaBlockCodec { version: 2, ..JOURNAL_CODEC };
        assert!(decode_journal(&v2.encode(3, &p).expect("fits")).is_ok(), "version 2 holds both");
        assert!(decode_journal(&JOURNAL_CODEC.encode(3, &p).expect("fits")).is_ok(), "and version 3");
        let v4 = MetaBlockCodec { version: 4, ..JOURNAL_CODEC };
        assert_eq!(decode_journal(&v4.encode(3, &p).expect("fits")), Err(MetaError::Version(4)));
    }

    #[test]
    fn only_version_3_blocks_may_hold_a_fresh_chunk_without_base() {
        let mut written = Sectors::default();
        written.set(0, 8);
        let mut p = Vec::new();
        Record::Partial { chunk: 9, base: NO_BASE, written }.encode(&mut p);
        let v2 = MetaBlockCodec { version: 2, ..JOURNAL_CODEC };
        let e = decode_journal(&v2.encode(5, &p).expect("fits")).expect_err("no base in version 2");
        assert!(e.to_string().contains("unexpected record"), "{e}");
        let (_, recs) =
            decode_journal(&JOURNAL_CODEC.encode(5, &p).expect("fits")).expect("version 3 reads it");
        assert!(matches!(recs[..], [Record::Partial { base: NO_BASE, .. }]));
        assert_eq!(JOURNAL_CODEC.version, 3);
        assert_eq!(BODY_CODEC.version, 3);
    }

    /// Found by `fuzz_images` (a crafted parent slot, crc fixed, then
    /// `snapshot list` indexed the volume table with it and panicked).
    #[test]
    fn a_parent_that_is_not_another_volume_is_refused() {
        let table: toml::Table = toml::from_str("").expect("toml");
        let cfg = PoolConfig::parse(layoutd_core::config::ArgReader::new("pool", &table), 64 << 20)
            .expect("the default pool");
        let vol =
            |slot, name: &str, parent| VolumeEntry { slot, name: name.into(), parent, read_only: false };
        let good = [vol(0, "origin", None), vol(2, "s", Some(0)), vol(1, "t", Some(2))];
        let b = encode_checkpoint(&cfg, 3, 0, &good, &[], &[]);
        assert_eq!(decode_header(&cfg, &b).expect("valid").volumes, good.to_vec());
        for (bad, why) in [(4_278_255_615, "past the table"), (3, "an empty slot"), (2, "itself")] {
            let vols = [vol(0, "origin", None), vol(2, "s", Some(bad))];
            let b = encode_checkpoint(&cfg, 3, 0, &vols, &[], &[]);
            let e = decode_header(&cfg, &b).expect_err(why);
            assert!(e.to_string().contains(&format!("parent {bad} is not another volume")), "{why}: {e}");
        }
    }

    /// Found by `fuzz_images` (a crafted journal start, crc fixed: the
    /// pool served until its next journal block's seq could not be
    /// encoded, `encode_journal` panicked).
    #[test]
    fn a_journal_start_past_the_readable_generations_is_refused() {
        let table: toml::Table = toml::from_str("").expect("toml");
        let cfg = PoolConfig::parse(layoutd_core::config::ArgReader::new("pool", &table), 64 << 20)
            .expect("the default pool");
        let vols = [VolumeEntry { slot: 0, name: "origin".into(), parent: None, read_only: false }];
        let ok = encode_checkpoint(&cfg, 3, GENERATION_READ_MAX, &vols, &[], &[]);
        assert_eq!(decode_header(&cfg, &ok).expect("at the limit").journal_start, GENERATION_READ_MAX);
        let b = encode_checkpoint(&cfg, 3, 0xFF00_0000_0000_0000, &vols, &[], &[]);
        let e = decode_header(&cfg, &b).expect_err("past the limit");
        assert!(e.to_string().contains("journal start 18374686479671623680 is past"), "{e}");
    }

    fn pool_cfg(keys: &str) -> PoolConfig {
        let table: toml::Table = toml::from_str(keys).expect("toml");
        PoolConfig::parse(layoutd_core::config::ArgReader::new("pool", &table), 64 << 20).expect("a pool")
    }

    /// `block` (a version 3 header) as a version 2 header: the same
    /// payload without the placement fields.
    pub(crate) fn as_version_2(block: &[u8]) -> Vec<u8> {
        let d = HEADER_CODEC.decode(block).expect("a version 3 header");
        let mut p = d.payload.clone();
        let at = PLACEMENT_OFFSET - layoutd_core::metablock::HEADER_BYTES;
        p.drain(at..at + 9);
        MetaBlockCodec { version: 2, ..HEADER_CODEC }.encode(d.generation, &p).expect("fits")
    }

    #[test]
    fn the_header_records_the_placement_and_a_version_2_header_records_none() {
        let vols = [VolumeEntry { slot: 0, name: "origin".into(), parent: None, read_only: false }];
        for (keys, want) in [
            ("placement = \"contiguous\"", (PlacementKind::Contiguous, 0)),
            ("placement = \"sliced\"\nslices = 8", (PlacementKind::Sliced, 8)),
            ("placement = \"nearest\"", (PlacementKind::Nearest, 0)),
            ("", (PlacementKind::Sliced, 30)),
        ] {
            let cfg = pool_cfg(keys);
            let b = encode_checkpoint(&cfg, 5, 2, &vols, &[], &[]);
            assert_eq!(decode_header(&cfg, &b).expect(keys).placement, Some(want), "{keys}");
            // Any config of the same geometry reads it: the header is the
            // pool's word, the caller decides what wins.
            let other = pool_cfg("placement = \"nearest\"");
            assert_eq!(decode_header(&other, &b).expect(keys).placement, Some(want), "{keys}");
            let old = decode_header(&cfg, &as_version_2(&b)).expect("a version 2 header reads");
            assert_eq!((old.placement, old.generation, old.journal_start), (None, 5, 2), "{keys}");
            assert_eq!(old.volumes, vols.to_vec());
        }
        let v4 = MetaBlockCodec { version: 4, ..HEADER_CODEC };
        let cfg = pool_cfg("");
        let d = HEADER_CODEC.decode(&encode_checkpoint(&cfg, 5, 2, &vols, &[], &[])).expect("v3");
        assert_eq!(decode_header(&cfg, &v4.encode(5, &d.payload).expect("fits")), Err(MetaError::Version(4)));
    }

    #[test]
    fn a_corrupt_placement_field_is_refused_naming_its_offset() {
        let vols = [VolumeEntry { slot: 0, name: "origin".into(), parent: None, read_only: false }];
        let cfg = pool_cfg("placement = \"sliced\"\nslices = 8");
        let good = encode_checkpoint(&cfg, 5, 2, &vols, &[], &[]);
        let crafted = |at: usize, bytes: &[u8]| {
            let mut b = good.clone();
            b[at..at + bytes.len()].copy_from_slice(bytes);
            b[28..32].fill(0);
            let crc = crc32c::crc32c(&b[..META_BLOCK_BYTES as usize]);
            b[28..32].copy_from_slice(&crc.to_le_bytes());
            decode_header(&cfg, &b).expect_err("crafted")
        };
        let e = crafted(PLACEMENT_OFFSET, &[7]);
        assert!(e.to_string().contains("placement code 7 at byte 64 of the header block"), "{e}");
        // Slices the geometry cannot lay out, and slices on a policy without.
        for (code, slices, why) in
            [(1u8, 0u64, "`slices` = 0"), (1, 1 << 40, "`slices` ="), (2, 8, "only `sliced`")]
        {
            let mut f = vec![code];
            f.extend(slices.to_le_bytes());
            let e = crafted(PLACEMENT_OFFSET, &f);
            let msg = e.to_string();
            assert!(msg.contains(&format!("placement code {code} with {slices} slices at byte 64")), "{msg}");
            assert!(msg.contains(why), "{why}: {msg}");
        }
        // Unfixed crc: refused by the block check first.
        let mut b = good.clone();
        b[PLACEMENT_OFFSET] = 2;
        assert!(decode_header(&cfg, &b).is_err());
    }

    #[test]
    fn a_partial_record_of_the_wrong_length_is_refused() {
        let mut p = Vec::new();
        partial().encode(&mut p);
        p[1] -= 8;
        p.truncate(p.len() - 8);
        assert!(Record::decode_all(&p).is_err());
        let mut cut = Vec::new();
        partial().encode(&mut cut);
        cut.truncate(30);
        assert!(Record::decode_all(&cut).is_err());
    }

    mod fuzz {
        use super::*;
        use crate::fuzz_support::{self as f, config};
        use layoutd_core::config::ArgReader;
        use proptest::prelude::*;

        fn cfg() -> PoolConfig {
            let table: toml::Table = toml::from_str("").expect("toml");
            PoolConfig::parse(ArgReader::new("pool", &table), 64 << 20).expect("the default pool")
        }

        /// The default pool's geometry under each placement the header
        /// records (`sliced` with the default 30 slices or a few).
        fn placed(which: u8, slices: u64) -> PoolConfig {
            let mut c = cfg();
            c.placement = [PlacementKind::Contiguous, PlacementKind::Sliced, PlacementKind::Nearest]
                [usize::from(which % 3)];
            c.slices = slices;
            c
        }

        fn volumes() -> Vec<VolumeEntry> {
            vec![
                VolumeEntry { slot: 0, name: "origin".into(), parent: None, read_only: false },
                VolumeEntry { slot: 2, name: "snap".into(), parent: Some(0), read_only: true },
            ]
        }

        proptest! {
            #![proptest_config(config(512))]

            /// A checkpoint copy (header and body blocks) mutated, each
            /// touched block's crc fixed or not: the header and body are
            /// refused or give runs within the geometry, of known volumes.
            #[test]
            fn checkpoints_never_panic(
                raw in f::raw_writes(3 * META_BLOCK_BYTES as usize),
                crafted in f::crafted_writes(3 * META_BLOCK_BYTES as usize),
                header_crafted in f::crafted_writes(128),
                fix in any::<bool>(),
                which in 0u8..3,
                slices in prop_oneof![Just(30u64), 1u64..64],
                old in any::<bool>(),
            ) {
                let cfg = placed(which, slices);
                let runs: Vec<Run> = (0..300).map(|i| (i as u32 % 2 * 2, i * 4, 2, i * 3)).collect();
                let mut b = encode_checkpoint(&cfg, 6, 40, &volumes(), &runs, &[partial()]);
                if old {
                    // A version 2 header (no placement fields) over the same body.
                    let v2 = super::as_version_2(&b[..META_BLOCK_BYTES as usize]);
                    b[..META_BLOCK_BYTES as usize].copy_from_slice(&v2);
                }
                f::mutate(&mut b, &raw, &crafted);
                f::mutate(&mut b[..META_BLOCK_BYTES as usize], &[], &header_crafted);
                if fix {
                    for block in b.chunks_mut(META_BLOCK_BYTES as usize) {
                        f::fix_crc(block, 28, META_BLOCK_BYTES as usize);
                    }
                }
                let mb = META_BLOCK_BYTES as usize;
                let (header, bytes) = f::largest_allocation(|| decode_header(&cfg, &b[..mb]));
                prop_assert!(bytes <= f::allocation_bound(mb));
                let Ok(h) = header else { return Ok(()) };
                prop_assert!(h.body_blocks <= cfg.body_blocks);
                // A recorded placement lays this geometry out (the caller
                // builds its policy from it).
                if let Some((kind, slices)) = h.placement {
                    let mut c = cfg.clone();
                    c.placement = kind;
                    c.slices = slices;
                    prop_assert!(c.placement_policy().is_ok(), "{kind:?} {slices}");
                    prop_assert!(kind == PlacementKind::Sliced || slices == 0);
                }
                // The caller reads the body blocks the header names.
                let mut body = b[mb..].to_vec();
                body.resize(h.body_blocks as usize * mb, 0);
                let (decoded, bytes) = f::largest_allocation(|| decode_body(&cfg, &h, &body));
                prop_assert!(bytes <= f::allocation_bound(body.len().max(b.len())));
                if let Ok((runs, _)) = decoded {
                    for (v, c, n, l) in runs {
                        prop_assert!(h.volumes.iter().any(|x| x.slot == v));
                        prop_assert!(c + u64::from(n) <= cfg.volume_chunks && l + u64::from(n) <= cfg.data_chunks);
                    }
                }
            }

            /// Journal blocks: refused, or their records only.
            #[test]
            fn journal_blocks_never_panic(
                raw in f::raw_writes(META_BLOCK_BYTES as usize),
                crafted in f::crafted_writes(META_BLOCK_BYTES as usize),
                fix in any::<bool>(),
            ) {
                let recs: Vec<Record> = (0..40u64)
                    .map(|i| if i % 7 == 0 { partial() } else {
                        Record::Core(JournalRecord::Exception { volume: 0, chunk: i, location: i + 9 })
                    })
                    .collect();
                let payload = pack_journal(&recs).swap_remove(0);
                let mut b = encode_journal(11, &payload);
                f::mutate(&mut b, &raw, &crafted);
                if fix {
                    f::fix_crc(&mut b, 28, META_BLOCK_BYTES as usize);
                }
                let (decoded, bytes) = f::largest_allocation(|| decode_journal(&b));
                prop_assert!(bytes <= f::allocation_bound(b.len()));
                if let Ok((_, recs)) = decoded {
                    // What decodes re-encodes to a payload of the same length.
                    let again: usize = recs.iter().map(Record::encoded_len).sum();
                    prop_assert!(again <= JOURNAL_CODEC.payload_bytes_max());
                }
            }
        }
    }
}
