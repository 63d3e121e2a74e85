//! On-disk formats of the segment log: the segment header, the checkpoint
//! and the flush mark. Each is a [`layoutd_core::metablock`] block (magic,
//! format version, generation, crc32c over the whole block, checked before
//! every write by re-decoding and after every read); below, the payloads,
//! little endian, offsets within the payload (the block header is 32 bytes).
//!
//! Segment header (`header_bytes`, sector aligned; the block's generation is
//! the segment's **seq**), version 3:
//! ```text
//! 0  boot u64               8  format_id u64
//! 16 slot_bytes u32         20 slot_count u16    22 entry_count u16
//! 24 slots_used u16         26 flags u16 (bit 0: payload_crc valid)
//! 28 payload_crc u32
//! 32 entries, 16 bytes each: start_sector u64, sector_count u32, kind u16, slot u16
//!    kind 1 = slot `slot` holds sectors [start, start+count)
//!    kind 2 = sectors [start, start+count) were overwritten outside the log
//!    kind 3 = chain link (the `log` target): the next segment of the log is
//!             at location `start` (`u32::MAX`: none named), count 1, slot 0
//!    kind 4 = continue link (the `log`'s partial segments): this segment
//!             goes on, its next summary is in slot `start`, count 1, slot 0
//! ```
//! A header with a link (exactly one, kind 3 or 4, the last entry) is
//! *chained*: its slots are any of the segment's (filled out of order, into
//! the holes of a used segment), `slots_used` counts its slot entries, and
//! the payload crc covers those slots in entry order. Without one, the
//! slots are the prefix `0..slots_used` and the crc covers that prefix
//! (`dcd`). A chained segment pass may be written in parts (partial
//! segments): the first part's summary is the header, each later part's
//! summary sits in a slot (a block of `slot_bytes`, same codec, fewer
//! entries: [`SegmentHeader::slot_entry_max`]) that the part before named
//! with its continue link; see [`super::replay::segment_summaries`].
//! Version 2 (before format identities) had the same fields in 32 bytes
//! without `format_id`: boot u64, slot_bytes, slot_count, entry_count,
//! slots_used, payload_crc, flags (u32 each); it is still read, as
//! format id 0 ([`LEGACY_FORMAT_ID`]).
//!
//! Checkpoint (one 512-byte block per copy; generation picks the copy),
//! version 3 (version 2: the same without `format_id`, read as id 0):
//! ```text
//! 0  boot u64               8  replay_from_seq u64   16 resume_seq u64
//! 24 durable_upto_seq u64   32 region_offset_bytes u64
//! 40 slot_bytes u32         44 slot_count u32        48 segment_count u32
//! 52 header_bytes u32       56 format_id u64
//! ```
//!
//! **Format identity.** `format_id` is a nonce the format was given
//! (`OpenMode::Format`), kept in the checkpoint and stamped on every
//! segment header and summary written under it; replay applies only
//! summaries carrying the checkpoint's. So whatever an earlier use of the
//! device left in the region (another log's segments with valid crcs, or
//! an earlier format of this one, which writes the same seqs at the same
//! places) is never walked into, and format writes the checkpoint area
//! only, not a sector per segment. Id 0 is a volume formatted before
//! identities (versions 2 / chain 3): its format zeroed every header, so
//! its headers of version 2 and 3 with id 0 are all its own; a new
//! format never uses 0. Such a volume is written in the new versions
//! (with id 0) from its first open by this build on.
//! `durable_upto_seq`: every segment below it was durable when the
//! checkpoint was written; the tail advance that wrote it may have relied on
//! segments up to there holding the newest copy of a sector (see the dcd
//! reclaim rule), so recovery must reach it.
//!
//! Flush mark (one 512-byte block per copy, 1024 bytes into each checkpoint
//! copy's 4 KiB): evidence that the log was durable up to a seq when a
//! client's flush or FUA write was acknowledged, so that recovery can tell
//! a torn tail (allowed to be cut off) from damage to flushed segments
//! (refused):
//! ```text
//! 0  boot u64               8  durable_upto_seq u64  16 region_offset_bytes u64
//! 24 segment_count u32
//! ```
//!
//! Every decoded number is range-checked: sequence numbers, generations and
//! boot counters above [`SEQ_MAX`] are refused as malformed, so that no
//! arithmetic on them can overflow. Format version 1 (before the shared
//! codec) is refused as another version. The chain checkpoint (the `log`
//! target's) is version [`CHAIN_FORMAT_VERSION`] (3 since partial segments,
//! 4 since format identities, 5 since the log's map pages carry the id,
//! 6 since it records the map's digest, 7 since it records the map's
//! sketch of written pages; 3 is read as id 0, 3 and 4 as
//! `legacy_map`, 3 to 5 without a digest, 3 to 6 without a sketch); a `log` volume of
//! version 2 is refused with a line saying so. A version newer than this
//! build's is refused naming both versions (an older build does the same
//! with these: by version, not as damage).

use super::sketch::{MapSketch, SketchCell, SKETCH_BYTES};
use super::{Geometry, Seq, ENTRY_BYTES, HEADER_FIXED_BYTES};
use layoutd_core::metablock::{
    Decoded, MetaBlockCodec, MetaError, Reader, GENERATION_MAX, GENERATION_READ_MAX, HEADER_BYTES,
};

/// Format version of segment headers (and summaries) written by this
/// build: 3 since format identities; 2 is still read (as id 0).
pub const HEADER_VERSION: u32 = 3;
/// Format version of the ring checkpoint (`dcd`'s) written by this build:
/// 3 since format identities; 2 is still read (as id 0).
pub const CHECKPOINT_VERSION: u32 = 3;
/// Format version of flush marks (unchanged by format identities).
pub const MARK_VERSION: u32 = 2;
/// The format identity of a volume formatted before identities existed.
pub const LEGACY_FORMAT_ID: u64 = 0;
const HEADER_MAGIC: [u8; 8] = *b"LDSEGHD1";
/// Bytes of one encoded checkpoint (or flush mark).
pub const CHECKPOINT_BYTES: usize = 512;
const CHECKPOINT_CODEC: MetaBlockCodec =
    MetaBlockCodec { magic: *b"LDSEGCK1", version: CHECKPOINT_VERSION, block_bytes: CHECKPOINT_BYTES };
const MARK_CODEC: MetaBlockCodec =
    MetaBlockCodec { magic: *b"LDSEGFM1", version: MARK_VERSION, block_bytes: CHECKPOINT_BYTES };
/// The version before format identities, read as [`LEGACY_FORMAT_ID`], of
/// headers and ring checkpoints (the chain checkpoint's is 3).
const LEGACY_VERSION: u32 = 2;
/// Largest sequence number, generation or boot counter accepted from disk
/// (2^61, the codec's [`GENERATION_READ_MAX`]: a segment a microsecond for
/// 73,000 years). Larger values are crafted or corrupt, and refusing them
/// keeps every `+ 1` and every `seq + segment_count` free of overflow and
/// every later header and checkpoint writable (at most [`GENERATION_MAX`]).
pub const SEQ_MAX: u64 = GENERATION_READ_MAX;
const FLAG_PAYLOAD_CRC: u32 = 1;
const KIND_SLOT: u16 = 1;
const KIND_INVALIDATE: u16 = 2;
const KIND_NEXT: u16 = 3;
const KIND_CONTINUE: u16 = 4;
/// The chain link's location when no successor is named.
const NEXT_NONE: u64 = u32::MAX as u64;
/// Payload bytes of a segment header before its entries.
const HEADER_PAYLOAD_FIXED_BYTES: usize = 32;
const _: () = assert!(HEADER_BYTES + HEADER_PAYLOAD_FIXED_BYTES == HEADER_FIXED_BYTES as usize);

/// Why a header or checkpoint was not accepted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HeaderError {
    /// No magic: never written, zeroed, or something else lives here.
    NoMagic,
    /// The magic is there but the crc does not match: torn or corrupt.
    BadCrc,
    /// Written by another format version than `reads`, the one this build
    /// reads for this kind of block.
    OtherVersion {
        /// The version on disk.
        found: u32,
        /// The version this build reads.
        reads: u32,
    },
    /// Written with another geometry than the one configured.
    Geometry(String),
    /// A field is out of range.
    Malformed(String),
}

impl std::fmt::Display for HeaderError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HeaderError::NoMagic => write!(f, "no magic (never written or not a layoutd segment log)"),
            HeaderError::BadCrc => write!(f, "crc32c mismatch (torn or corrupt)"),
            HeaderError::OtherVersion { found, reads } if found < reads => write!(
                f,
                "format version {found}, written by an older layoutd (this build reads {reads}): copy the \
                 data off with that build, then format the device"
            ),
            HeaderError::OtherVersion { found, reads } => {
                write!(f, "format version {found}, this build reads {reads}: upgrade layoutd")
            }
            HeaderError::Geometry(s) => write!(f, "geometry differs from the config: {s}"),
            HeaderError::Malformed(s) => write!(f, "malformed: {s}"),
        }
    }
}

impl From<MetaError> for HeaderError {
    fn from(e: MetaError) -> HeaderError {
        match e {
            MetaError::Blank | MetaError::Foreign(_) => HeaderError::NoMagic,
            MetaError::BadCrc => HeaderError::BadCrc,
            // Versions are judged by `decode_versioned`, before any `?`.
            MetaError::Version(found) => HeaderError::Malformed(format!("unexpected version {found}")),
            MetaError::Malformed(m) => HeaderError::Malformed(m),
        }
    }
}

/// Decodes `b` with `codec` (this build's version) or, if it holds one of
/// the versions `older`, with that version's codec; says which version.
/// Any other version is refused naming it and the one this build writes.
fn decode_versioned(
    codec: MetaBlockCodec,
    older: &[u32],
    b: &[u8],
    max: u64,
) -> Result<(Decoded, u32), HeaderError> {
    match codec.decode_versioned(b, max, |v| older.contains(&v)) {
        Ok((d, version)) => Ok((d, version)),
        Err(MetaError::Version(found)) => Err(HeaderError::OtherVersion { found, reads: codec.version }),
        Err(e) => Err(e.into()),
    }
}

/// One header entry, in the order the events happened.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Entry {
    /// Slot `slot` holds data sectors `[start_sector, start_sector + sector_count)`.
    Slot {
        /// First data sector.
        start_sector: u64,
        /// Sectors held (at most a slot's worth).
        sector_count: u32,
        /// Slot index within the segment.
        slot: u16,
    },
    /// Data sectors `[start_sector, +sector_count)` were overwritten outside
    /// the log (bypass, trim, write-through); older log copies are void.
    Invalidate {
        /// First data sector.
        start_sector: u64,
        /// Sectors.
        sector_count: u32,
    },
    /// The chain link of a chained header: where the segment written after
    /// this one lives (`None`: the next checkpoint names it).
    Next {
        /// Its location.
        loc: Option<super::SegLoc>,
    },
    /// The continue link of a chained header written as a part of its
    /// segment (a partial segment): the segment's next summary is in slot
    /// `slot` (a later slot than this summary's).
    Continue {
        /// The slot holding the next summary.
        slot: u16,
    },
}

/// A segment header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SegmentHeader {
    /// Sequence number.
    pub seq: Seq,
    /// Boot counter of the run that wrote it.
    pub boot: u64,
    /// The identity of the format it was written under
    /// ([`LEGACY_FORMAT_ID`] for version 2 headers).
    pub format_id: u64,
    /// Slots written (a prefix of the segment).
    pub slots_used: u32,
    /// crc32c of the `slots_used` slots, when the writer had the bytes.
    pub payload_crc: Option<u32>,
    /// Entries in event order.
    pub entries: Vec<Entry>,
}

fn header_codec(block_bytes: u32) -> MetaBlockCodec {
    MetaBlockCodec { magic: HEADER_MAGIC, version: HEADER_VERSION, block_bytes: block_bytes as usize }
}

// Version 3 keeps counts in u16 fields.
const _: () = assert!(2 * super::SLOT_COUNT_MAX <= u16::MAX as u32);

fn read_u16(r: &mut Reader<'_>) -> Result<u16, HeaderError> {
    Ok(u16::from_le_bytes(r.bytes(2)?.try_into().expect("2 bytes")))
}

/// Entries a summary block of `block_bytes` holds.
fn entry_max_in(block_bytes: u32) -> u32 {
    (block_bytes - HEADER_FIXED_BYTES) / ENTRY_BYTES
}

/// `v` if at most `max` ([`SEQ_MAX`] for what is read from disk,
/// [`GENERATION_MAX`] for an encoder's own round trip).
fn seq_in_range(name: &str, v: u64, max: u64) -> Result<u64, HeaderError> {
    if v > max {
        return Err(HeaderError::Malformed(format!("{name} {v} is past {max}")));
    }
    Ok(v)
}

impl SegmentHeader {
    /// Encodes into `geo.header_bytes`; re-decodes the result so a bad
    /// header can never reach the disk.
    pub fn encode(&self, geo: &Geometry) -> Vec<u8> {
        self.encode_in(geo, geo.header_bytes, geo.entry_count_max)
    }

    /// Entries a summary in a slot holds (a part of a segment after its
    /// first: see the module docs).
    pub fn slot_entry_max(geo: &Geometry) -> u32 {
        entry_max_in(geo.slot_bytes).min(geo.entry_count_max)
    }

    /// Encodes a summary that sits in a slot (`geo.slot_bytes`).
    pub fn encode_slot(&self, geo: &Geometry) -> Vec<u8> {
        self.encode_in(geo, geo.slot_bytes, SegmentHeader::slot_entry_max(geo))
    }

    /// Decodes a summary read from a slot.
    pub fn decode_slot(b: &[u8], geo: &Geometry) -> Result<SegmentHeader, HeaderError> {
        SegmentHeader::decode_in(b, geo, geo.slot_bytes, SegmentHeader::slot_entry_max(geo), SEQ_MAX)
    }

    fn encode_in(&self, geo: &Geometry, block_bytes: u32, entry_max: u32) -> Vec<u8> {
        assert!(self.entries.len() <= entry_max as usize, "too many entries");
        assert!(self.slots_used <= geo.slot_count, "more slots used than exist");
        let mut p =
            Vec::with_capacity(HEADER_PAYLOAD_FIXED_BYTES + self.entries.len() * ENTRY_BYTES as usize);
        p.extend(self.boot.to_le_bytes());
        p.extend(self.format_id.to_le_bytes());
        p.extend(geo.slot_bytes.to_le_bytes());
        for v in [geo.slot_count, self.entries.len() as u32, self.slots_used] {
            p.extend(u16::try_from(v).expect("counts fit u16 (SLOT_COUNT_MAX)").to_le_bytes());
        }
        let flags = if self.payload_crc.is_some() { FLAG_PAYLOAD_CRC } else { 0 };
        p.extend((flags as u16).to_le_bytes());
        p.extend(self.payload_crc.unwrap_or(0).to_le_bytes());
        assert_eq!(p.len(), HEADER_PAYLOAD_FIXED_BYTES);
        for e in &self.entries {
            let (start, count, kind, slot) = match *e {
                Entry::Slot { start_sector, sector_count, slot } => {
                    (start_sector, sector_count, KIND_SLOT, slot)
                }
                Entry::Invalidate { start_sector, sector_count } => {
                    (start_sector, sector_count, KIND_INVALIDATE, 0)
                }
                Entry::Next { loc } => (loc.map_or(NEXT_NONE, |l| u64::from(l.0)), 1, KIND_NEXT, 0),
                Entry::Continue { slot } => (u64::from(slot), 1, KIND_CONTINUE, 0),
            };
            p.extend(start.to_le_bytes());
            p.extend(count.to_le_bytes());
            p.extend(kind.to_le_bytes());
            p.extend(slot.to_le_bytes());
        }
        let b = header_codec(block_bytes).encode(self.seq.0, &p).expect("a header fits its geometry");
        let back = SegmentHeader::decode_in(&b, geo, block_bytes, entry_max, GENERATION_MAX);
        assert_eq!(back.as_ref(), Ok(self), "header round trip");
        b
    }

    /// Decodes and checks a header read from disk.
    pub fn decode(b: &[u8], geo: &Geometry) -> Result<SegmentHeader, HeaderError> {
        SegmentHeader::decode_in(b, geo, geo.header_bytes, geo.entry_count_max, SEQ_MAX)
    }

    fn decode_in(
        b: &[u8],
        geo: &Geometry,
        block_bytes: u32,
        entry_max: u32,
        max: u64,
    ) -> Result<SegmentHeader, HeaderError> {
        assert!(b.len() >= block_bytes as usize, "caller reads a whole header");
        let codec = header_codec(block_bytes);
        let (block, version) = decode_versioned(codec, &[LEGACY_VERSION], &b[..block_bytes as usize], max)?;
        let legacy = version == LEGACY_VERSION;
        let mut r = Reader::new(&block.payload);
        let boot = seq_in_range("boot", r.u64()?, max)?;
        let (format_id, slot_bytes, slot_count, entry_count, slots_used, crc, flags) = if legacy {
            let (slot_bytes, slot_count, entry_count, slots_used) = (r.u32()?, r.u32()?, r.u32()?, r.u32()?);
            let (crc, flags) = (r.u32()?, r.u32()?);
            (LEGACY_FORMAT_ID, slot_bytes, slot_count, entry_count, slots_used, crc, flags)
        } else {
            let (format_id, slot_bytes) = (r.u64()?, r.u32()?);
            let (slot_count, entry_count) = (read_u16(&mut r)?, read_u16(&mut r)?);
            let (slots_used, flags) = (read_u16(&mut r)?, read_u16(&mut r)?);
            let crc = r.u32()?;
            let wide = |v: u16| u32::from(v);
            (format_id, slot_bytes, wide(slot_count), wide(entry_count), wide(slots_used), crc, wide(flags))
        };
        if slot_bytes != geo.slot_bytes || slot_count != geo.slot_count {
            return Err(HeaderError::Geometry(format!(
                "slots of {slot_count} x {slot_bytes} on disk, {} x {} configured",
                geo.slot_count, geo.slot_bytes
            )));
        }
        if entry_count > entry_max || slots_used > geo.slot_count {
            return Err(HeaderError::Malformed(format!("{entry_count} entries, {slots_used} slots used")));
        }
        if flags & !FLAG_PAYLOAD_CRC != 0 {
            return Err(HeaderError::Malformed(format!("unknown flags {flags:#x}")));
        }
        if r.remaining() != entry_count as usize * ENTRY_BYTES as usize {
            return Err(HeaderError::Malformed(format!(
                "{entry_count} entries, but {} bytes of them",
                r.remaining()
            )));
        }
        let entries =
            (0..entry_count).map(|i| decode_entry(&mut r, i, geo)).collect::<Result<Vec<_>, _>>()?;
        check_slots(&entries, slots_used)?;
        let payload_crc = (flags & FLAG_PAYLOAD_CRC != 0).then_some(crc);
        Ok(SegmentHeader {
            seq: Seq(seq_in_range("seq", block.generation, max)?),
            boot,
            format_id,
            slots_used,
            payload_crc,
            entries,
        })
    }

    /// crc32c of a segment's used slots, as stored in `payload_crc`.
    pub fn payload_crc_of(payload: &[u8]) -> u32 {
        crc32c::crc32c(payload)
    }

    /// Whether this is a chained header (it ends with a chain or continue link).
    pub fn is_chained(&self) -> bool {
        matches!(self.entries.last(), Some(Entry::Next { .. } | Entry::Continue { .. }))
    }

    /// The slot of the segment's next summary, if this one was written as
    /// a part of its segment.
    pub fn continue_slot(&self) -> Option<u16> {
        match self.entries.last() {
            Some(Entry::Continue { slot }) => Some(*slot),
            _ => None,
        }
    }

    /// The location a chained header names for the next segment.
    pub fn next_location(&self) -> Option<super::SegLoc> {
        match self.entries.last() {
            Some(Entry::Next { loc }) => *loc,
            _ => None,
        }
    }

    /// crc32c of the slots this header covers, read from `payload` (the
    /// segment's slots, slot 0 first): the prefix of `slots_used` slots,
    /// or for a chained header its slot entries' slots in entry order.
    /// `None` if `payload` is too short.
    pub fn covered_crc(&self, payload: &[u8], slot_bytes: usize) -> Option<u32> {
        if !self.is_chained() {
            let used = self.slots_used as usize * slot_bytes;
            return (payload.len() >= used).then(|| crc32c::crc32c(&payload[..used]));
        }
        let mut crc = 0u32;
        for e in &self.entries {
            if let Entry::Slot { slot, .. } = *e {
                let at = slot as usize * slot_bytes;
                crc = crc32c::crc32c_append(crc, payload.get(at..at + slot_bytes)?);
            }
        }
        Some(crc)
    }
}

/// The slot rules: in a plain header every slot is below `slots_used`; a
/// chained one has one link, last, and `slots_used` distinct slots.
fn check_slots(entries: &[Entry], slots_used: u32) -> Result<(), HeaderError> {
    let is_link = |e: &Entry| matches!(e, Entry::Next { .. } | Entry::Continue { .. });
    let links = entries.iter().filter(|e| is_link(e)).count();
    let slots = entries.iter().filter_map(|e| match *e {
        Entry::Slot { slot, .. } => Some(slot),
        _ => None,
    });
    if links == 0 {
        return match slots.clone().find(|&s| u32::from(s) >= slots_used) {
            Some(s) => Err(HeaderError::Malformed(format!("slot {s} out of range ({slots_used} used)"))),
            None => Ok(()),
        };
    }
    if links > 1 || !entries.last().is_some_and(is_link) {
        return Err(HeaderError::Malformed("a chain link that is not the one last entry".into()));
    }
    let mut seen: Vec<u16> = slots.collect();
    let count = seen.len();
    seen.sort_unstable();
    seen.dedup();
    if seen.len() != count || count != slots_used as usize {
        return Err(HeaderError::Malformed(format!(
            "{count} slot entries ({} distinct) for {slots_used} slots used",
            seen.len()
        )));
    }
    Ok(())
}

fn decode_entry(r: &mut Reader<'_>, i: u32, geo: &Geometry) -> Result<Entry, HeaderError> {
    let (start_sector, sector_count) = (r.u64()?, r.u32()?);
    let kind = u16::from_le_bytes(r.bytes(2)?.try_into().expect("2 bytes"));
    let slot = u16::from_le_bytes(r.bytes(2)?.try_into().expect("2 bytes"));
    let bad = |what: &str| HeaderError::Malformed(format!("entry {i}: {what}"));
    if sector_count == 0 || start_sector.checked_add(u64::from(sector_count)).is_none() {
        return Err(bad("empty or overflowing range"));
    }
    match kind {
        KIND_SLOT if u32::from(slot) >= geo.slot_count || sector_count > geo.slot_sectors() => {
            Err(bad("slot out of range"))
        }
        KIND_SLOT => Ok(Entry::Slot { start_sector, sector_count, slot }),
        KIND_INVALIDATE => Ok(Entry::Invalidate { start_sector, sector_count }),
        KIND_NEXT if start_sector == NEXT_NONE && sector_count == 1 => Ok(Entry::Next { loc: None }),
        KIND_NEXT if start_sector < u64::from(geo.segment_count) && sector_count == 1 => {
            Ok(Entry::Next { loc: Some(super::SegLoc(start_sector as u32)) })
        }
        KIND_NEXT => Err(bad("chain link to a location outside the log")),
        KIND_CONTINUE if start_sector < u64::from(geo.slot_count) && sector_count == 1 => {
            Ok(Entry::Continue { slot: start_sector as u16 })
        }
        KIND_CONTINUE => Err(bad("continue link to a slot outside the segment")),
        _ => Err(bad("unknown kind")),
    }
}

/// The persisted checkpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Checkpoint {
    /// Bumped at every checkpoint write; picks the copy.
    pub generation: u64,
    /// Boot counter of the current run.
    pub boot: u64,
    /// Segments older than this are reclaimed and never replayed.
    pub replay_from_seq: Seq,
    /// The first seq written by run `boot`: segments from here on must
    /// carry `boot`, anything else there is a leftover of a crashed run.
    pub resume_seq: Seq,
    /// Every segment below this was durable when the checkpoint was written.
    pub durable_upto: Seq,
    /// The format's identity: only headers carrying it are replayed.
    pub format_id: u64,
}

impl Checkpoint {
    /// Encodes one copy (512 bytes); checked by re-decoding.
    pub fn encode(&self, geo: &Geometry) -> Vec<u8> {
        assert!(self.boot > 0, "boot counts from 1");
        let mut p = Vec::with_capacity(64);
        for v in [
            self.boot,
            self.replay_from_seq.0,
            self.resume_seq.0,
            self.durable_upto.0,
            geo.region_offset_bytes,
        ] {
            p.extend(v.to_le_bytes());
        }
        for v in [geo.slot_bytes, geo.slot_count, geo.segment_count, geo.header_bytes] {
            p.extend(v.to_le_bytes());
        }
        p.extend(self.format_id.to_le_bytes());
        let b = CHECKPOINT_CODEC.encode(self.generation, &p).expect("a checkpoint fits its block");
        let back = Checkpoint::decode_up_to(&b, geo, GENERATION_MAX);
        assert_eq!(back.as_ref(), Ok(self), "checkpoint round trip");
        b
    }

    /// Decodes one copy and checks it against the configured geometry.
    pub fn decode(b: &[u8], geo: &Geometry) -> Result<Checkpoint, HeaderError> {
        Checkpoint::decode_up_to(b, geo, SEQ_MAX)
    }

    fn decode_up_to(b: &[u8], geo: &Geometry, max: u64) -> Result<Checkpoint, HeaderError> {
        assert!(b.len() >= CHECKPOINT_BYTES, "caller reads a whole checkpoint");
        let (block, version) = decode_versioned(CHECKPOINT_CODEC, &[LEGACY_VERSION], b, max)?;
        let legacy = version == LEGACY_VERSION;
        let mut r = Reader::new(&block.payload);
        let boot = seq_in_range("boot", r.u64()?, max)?;
        let replay_from_seq = Seq(seq_in_range("replay_from_seq", r.u64()?, max)?);
        let resume_seq = Seq(seq_in_range("resume_seq", r.u64()?, max)?);
        let durable_upto = Seq(seq_in_range("durable_upto_seq", r.u64()?, max)?);
        let found = (r.u64()?, r.u32()?, r.u32()?, r.u32()?, r.u32()?);
        let want =
            (geo.region_offset_bytes, geo.slot_bytes, geo.slot_count, geo.segment_count, geo.header_bytes);
        if found != want {
            return Err(HeaderError::Geometry(format!(
                "(log offset, slot_bytes, slot_count, segment_count, header_bytes) on disk {found:?}, configured {want:?}"
            )));
        }
        let format_id = if legacy { LEGACY_FORMAT_ID } else { r.u64()? };
        if r.remaining() != 0 {
            return Err(HeaderError::Malformed(format!("{} bytes after the checkpoint", r.remaining())));
        }
        if boot == 0 {
            return Err(HeaderError::Malformed("boot counter is zero".into()));
        }
        Ok(Checkpoint {
            generation: block.generation,
            boot,
            replay_from_seq,
            resume_seq,
            durable_upto,
            format_id,
        })
    }

    /// Picks the newest valid of the two copies (`area` holds both, copy 0
    /// first); the flag says one copy was unreadable. Errors report both
    /// copies.
    pub fn pick(area: &[u8], geo: &Geometry) -> Result<(Checkpoint, bool), String> {
        pick_copy(area, |b| Checkpoint::decode(b, geo), |c| c.generation)
    }
}

/// Format version of the chain checkpoint (the `log` target's format):
/// 3 since partial segments (continue links), 4 since format identities
/// (3 is still read, as [`LEGACY_FORMAT_ID`]), 5 since the log's map pages
/// carry the format id (4 is still read; both as `legacy_map`), 6 since
/// it records the map's digest (5 is still read, without one), 7 since it
/// records the map's sketch of written pages (6 is still read, without
/// one); a version-2 `log` volume is refused (the old build reads it).
pub const CHAIN_FORMAT_VERSION: u32 = 7;
/// The chain checkpoint before format identities.
const CHAIN_LEGACY_VERSION: u32 = 3;
/// The chain checkpoint before map pages carried the format id.
const CHAIN_UNTAGGED_MAP_VERSION: u32 = 4;
/// The chain checkpoint before it recorded the map's digest (session 28's
/// release).
const CHAIN_UNDIGESTED_VERSION: u32 = 5;
/// The chain checkpoint before it recorded the map's sketch of written
/// pages (session 29's and 30's release).
const CHAIN_UNSKETCHED_VERSION: u32 = 6;
/// `flags` bit 0 of a chain checkpoint: [`ChainCheckpoint::legacy_map`].
const CHAIN_FLAG_LEGACY_MAP: u32 = 1;
const CHAIN_CHECKPOINT_CODEC: MetaBlockCodec =
    MetaBlockCodec { magic: *b"LDSEGCC1", version: CHAIN_FORMAT_VERSION, block_bytes: CHECKPOINT_BYTES };

/// The checkpoint of a chained log (the `log` target): segments are not
/// written in ring order but wherever the allocator puts them, each
/// header naming where the next one goes. The checkpoint says where the
/// first segment written after it goes and which seq it will carry;
/// replay follows the links from there ([`super::ChainWalk`]). Payload:
/// ```text
/// 0  boot u64     8 next_seq u64    16 next_loc u32 (u32::MAX: none)
/// 20 slot_bytes u32  24 slot_count u32  28 segment_count u32  32 header_bytes u32
/// 36 region_offset_bytes u64          44 format_id u64 (not in version 3)
/// 52 flags u32 (bit 0: legacy_map; from version 5)
/// 56 map_pages_written u32 (from version 5)
/// 60 map_digest.sum u64   68 map_digest.weighted u64 (from version 6)
/// 76 map_sketch: 24 cells of count u32, pages u32, check u32, generations u32
///    (from version 7)
/// ```
/// Stored in the same two copies as [`Checkpoint`] (generation `% 2`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChainCheckpoint {
    /// Bumped at every checkpoint write; picks the copy.
    pub generation: u64,
    /// Boot counter of the run that wrote it: segments replayed after it
    /// must carry the same boot (anything else is a leftover of a crash).
    pub boot: u64,
    /// The seq of the first segment written after this checkpoint.
    pub next_seq: Seq,
    /// Where that segment goes (`None`: nothing may be written before the
    /// next checkpoint, which will name it).
    pub next_loc: Option<super::SegLoc>,
    /// The format's identity: only summaries carrying it are replayed.
    pub format_id: u64,
    /// The volume was formatted before the log's map pages carried the
    /// format id (that format wrote every map page): its map pages of the
    /// older version, which carry no id, are its own. Set for every
    /// checkpoint of version 3 or 4 read, and kept from then on; a new
    /// format clears it, so such pages left by an earlier use of the
    /// device are never taken (`log::map`).
    pub legacy_map: bool,
    /// How many of the log's map pages had a copy written by this format
    /// at generations up to this one (monotonic: a page once written
    /// always keeps a current copy). Recovery refuses the volume when
    /// fewer pages have a usable copy (`log::persist`). Added to version
    /// 5 in the session it was introduced (no volume of 5 without it);
    /// read as 0 from versions 3 and 4 (`legacy_map`: every page counts).
    pub map_pages_written: u32,
    /// The map's digests ([`MapDigest`]) over the pages counted in
    /// `map_pages_written` (on a `legacy_map` volume: every page with a
    /// usable copy when it was upgraded, and every page written since).
    /// A page's older copy has a lower generation, so recovery taking it
    /// (the newer one damaged) sums to less: refused (`log::persist`).
    /// `None` from versions 3 to 5 (no check on the first open of such a
    /// volume); every checkpoint this build writes carries one.
    pub map_digest: Option<MapDigest>,
    /// The map's sketch of written pages ([`MapSketch`]) over the pages
    /// counted in `map_pages_written`: recovery lists from it which pages
    /// are lost when fewer have a usable copy (`log::persist`). `None`
    /// from versions 3 to 6; every checkpoint this build writes carries
    /// one.
    pub map_sketch: Option<MapSketch>,
}

/// The modulus of [`MapDigest::weighted`]: the prime 2^61 - 1.
pub const MAP_DIGEST_PRIME: u64 = (1 << 61) - 1;

/// The map's digests (chain checkpoint version 6), over the log's written
/// map pages: `sum`, the wrapping sum of the generation of each page's
/// current copy, and `weighted`, the sum of each page's
/// [`MapDigest::weight`] times that generation, modulo
/// [`MAP_DIGEST_PRIME`]. When one page's copy of generation `g + d` is
/// damaged and recovery takes its copy of generation `g`, `sum` falls
/// short by `d` and `weighted` by `weight(page) * d`: their quotient
/// names the page ([`MapDigest::single_shortfall`]). Both are kept as
/// pages are written, from the generation each page had and has
/// ([`MapDigest::replace`]), so they cost no RAM beyond it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MapDigest {
    /// The wrapping sum of the generations.
    pub sum: u64,
    /// The weighted sum, below [`MAP_DIGEST_PRIME`].
    pub weighted: u64,
}

/// `a * b` modulo [`MAP_DIGEST_PRIME`], any `a` and `b`: a Mersenne
/// prime's reduction (2^61 = 1), the same value as `%` at a fraction of
/// its cost (recovery's search of a shortfall makes millions:
/// `seglog::shortfall`).
pub(super) fn mul_mod(a: u64, b: u64) -> u64 {
    let p = u128::from(MAP_DIGEST_PRIME);
    let x = u128::from(a) * u128::from(b);
    let x = (x & p) + (x >> 61);
    let x = (x & p) + (x >> 61);
    (if x >= p { x - p } else { x }) as u64
}

/// `a + b` modulo [`MAP_DIGEST_PRIME`], both below it.
pub(super) fn add_mod(a: u64, b: u64) -> u64 {
    (a + b) % MAP_DIGEST_PRIME
}

/// `a - b` modulo [`MAP_DIGEST_PRIME`], both below it.
pub(super) fn sub_mod(a: u64, b: u64) -> u64 {
    add_mod(a, MAP_DIGEST_PRIME - b)
}

pub(super) fn pow_mod(mut base: u64, mut exp: u64) -> u64 {
    let mut r = 1;
    while exp > 0 {
        if exp & 1 == 1 {
            r = mul_mod(r, base);
        }
        base = mul_mod(base, base);
        exp >>= 1;
    }
    r
}

/// `a / b` modulo [`MAP_DIGEST_PRIME`], `b` not a multiple of it (Fermat).
pub(super) fn quotient(a: u64, b: u64) -> u64 {
    mul_mod(a, pow_mod(b % MAP_DIGEST_PRIME, MAP_DIGEST_PRIME - 2))
}

/// splitmix64's step and finalizer of `x` (the map's digest weights and
/// sketch places are made of it: part of the format).
pub(super) fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl MapDigest {
    /// Page `page`'s weight, in `[1, MAP_DIGEST_PRIME)`: splitmix64's
    /// finalizer of the index, reduced. Part of the format: a change
    /// needs a new checkpoint version.
    pub fn weight(page: u32) -> u64 {
        1 + splitmix64(u64::from(page)) % (MAP_DIGEST_PRIME - 1)
    }

    /// Page `page`'s current copy was of generation `old` (0: none) and
    /// is now of `new`.
    pub fn replace(&mut self, page: u32, old: u64, new: u64) {
        self.sum = self.sum.wrapping_sub(old).wrapping_add(new);
        let w = MapDigest::weight(page);
        let old = mul_mod(w, old % MAP_DIGEST_PRIME);
        self.weighted =
            add_mod(add_mod(self.weighted, MAP_DIGEST_PRIME - old), mul_mod(w, new % MAP_DIGEST_PRIME));
    }

    /// `self` (the copies recovery took) against `recorded` (the
    /// checkpoint's): the plain digest's shortfall and the weighted one's
    /// (modulo the prime), which the pages that fell short must add up to
    /// (`shortfall::explain`).
    pub fn shortfall(&self, recorded: &MapDigest) -> (u64, u64) {
        (recorded.sum.wrapping_sub(self.sum), sub_mod(recorded.weighted, self.weighted))
    }

    /// [`MapDigest::shortfall`]'s `d` and the weight a single page falling
    /// short by it would have (the weighted shortfall over `d`, modulo
    /// the prime); `None` when `d` is a multiple of the prime. With two
    /// pages short or more the quotient is some value no page is likely
    /// to have (`pages / 2^61`): the arithmetic `shortfall::explain`'s
    /// last page rests on.
    #[cfg(test)]
    fn single_shortfall(&self, recorded: &MapDigest) -> Option<(u64, u64)> {
        let (d, dw) = self.shortfall(recorded);
        let r = d % MAP_DIGEST_PRIME;
        (r != 0).then(|| (d, quotient(dw, r)))
    }
}

impl ChainCheckpoint {
    /// Encodes one copy; checked by re-decoding.
    pub fn encode(&self, geo: &Geometry) -> Vec<u8> {
        assert!(self.boot > 0, "boot counts from 1");
        let mut p = Vec::with_capacity(76 + SKETCH_BYTES);
        p.extend(self.boot.to_le_bytes());
        p.extend(self.next_seq.0.to_le_bytes());
        p.extend(self.next_loc.map_or(u32::MAX, |l| l.0).to_le_bytes());
        for v in [geo.slot_bytes, geo.slot_count, geo.segment_count, geo.header_bytes] {
            p.extend(v.to_le_bytes());
        }
        p.extend(geo.region_offset_bytes.to_le_bytes());
        p.extend(self.format_id.to_le_bytes());
        p.extend((if self.legacy_map { CHAIN_FLAG_LEGACY_MAP } else { 0 }).to_le_bytes());
        p.extend(self.map_pages_written.to_le_bytes());
        let digest = self.map_digest.expect("a checkpoint of this build carries the map's digests");
        p.extend(digest.sum.to_le_bytes());
        p.extend(digest.weighted.to_le_bytes());
        let sketch = self.map_sketch.expect("a checkpoint of this build carries the map's sketch");
        for c in &sketch.cells {
            for v in [c.count, c.pages, c.check, c.generations] {
                p.extend(v.to_le_bytes());
            }
        }
        let b = CHAIN_CHECKPOINT_CODEC.encode(self.generation, &p).expect("a checkpoint fits its block");
        let back = ChainCheckpoint::decode_up_to(&b, geo, GENERATION_MAX);
        assert_eq!(back.as_ref(), Ok(self), "chain checkpoint round trip");
        b
    }

    /// Decodes one copy and checks it against the configured geometry.
    pub fn decode(b: &[u8], geo: &Geometry) -> Result<ChainCheckpoint, HeaderError> {
        ChainCheckpoint::decode_up_to(b, geo, SEQ_MAX)
    }

    fn decode_up_to(b: &[u8], geo: &Geometry, max: u64) -> Result<ChainCheckpoint, HeaderError> {
        assert!(b.len() >= CHECKPOINT_BYTES, "caller reads a whole checkpoint");
        let older = [
            CHAIN_LEGACY_VERSION,
            CHAIN_UNTAGGED_MAP_VERSION,
            CHAIN_UNDIGESTED_VERSION,
            CHAIN_UNSKETCHED_VERSION,
        ];
        let (block, version) = decode_versioned(CHAIN_CHECKPOINT_CODEC, &older, b, max)?;
        let mut r = Reader::new(&block.payload);
        let boot = seq_in_range("boot", r.u64()?, max)?;
        let next_seq = Seq(seq_in_range("next_seq", r.u64()?, max)?);
        let loc = r.u32()?;
        let found = (r.u32()?, r.u32()?, r.u32()?, r.u32()?, r.u64()?);
        let want =
            (geo.slot_bytes, geo.slot_count, geo.segment_count, geo.header_bytes, geo.region_offset_bytes);
        if found != want {
            return Err(HeaderError::Geometry(format!(
                "(slot_bytes, slot_count, segment_count, header_bytes, log offset) on disk {found:?}, configured {want:?}"
            )));
        }
        let format_id = if version == CHAIN_LEGACY_VERSION { LEGACY_FORMAT_ID } else { r.u64()? };
        let flagged = version >= CHAIN_UNDIGESTED_VERSION;
        let legacy_map = match flagged {
            true => match r.u32()? {
                f if f & !CHAIN_FLAG_LEGACY_MAP != 0 => {
                    return Err(HeaderError::Malformed(format!("unknown flags {f:#x}")))
                }
                f => f & CHAIN_FLAG_LEGACY_MAP != 0,
            },
            false => true,
        };
        let map_pages_written = if flagged { r.u32()? } else { 0 };
        let map_digest = match version >= CHAIN_UNSKETCHED_VERSION {
            true => match (r.u64()?, r.u64()?) {
                (_, w) if w >= MAP_DIGEST_PRIME => {
                    return Err(HeaderError::Malformed(format!(
                        "weighted map digest {w} is not below 2^61 - 1"
                    )))
                }
                (sum, weighted) => Some(MapDigest { sum, weighted }),
            },
            false => None,
        };
        let map_sketch = match version == CHAIN_FORMAT_VERSION {
            true => {
                let mut sketch = MapSketch::default();
                for c in sketch.cells.iter_mut() {
                    *c = SketchCell {
                        count: r.u32()?,
                        pages: r.u32()?,
                        check: r.u32()?,
                        generations: r.u32()?,
                    };
                }
                Some(sketch)
            }
            false => None,
        };
        if r.remaining() != 0 || boot == 0 {
            return Err(HeaderError::Malformed(format!("boot {boot}, {} trailing bytes", r.remaining())));
        }
        let next_loc = match loc {
            u32::MAX => None,
            l if l < geo.segment_count => Some(super::SegLoc(l)),
            l => return Err(HeaderError::Malformed(format!("next_loc {l} outside the log"))),
        };
        Ok(ChainCheckpoint {
            generation: block.generation,
            boot,
            next_seq,
            next_loc,
            format_id,
            legacy_map,
            map_pages_written,
            map_digest,
            map_sketch,
        })
    }

    /// The newest valid of the two copies (`area` holds both, copy 0
    /// first); the flag says one copy was unreadable.
    pub fn pick(area: &[u8], geo: &Geometry) -> Result<(ChainCheckpoint, bool), String> {
        pick_copy(area, |b| ChainCheckpoint::decode(b, geo), |c| c.generation)
    }
}

/// The format version of the checkpoint copy in `area` (both copies, copy
/// 0 first) that holds generation `generation`. When the copy recovery
/// picked is of an older version (before format identities; for the
/// chain checkpoint, also before the log's map pages carried the id), the
/// recovering build writes it again in its own version (same generation
/// and fields: format id 0, `legacy_map`) once its new checkpoint, which
/// goes to the other copy, is durable (a crash that tore it earlier would
/// leave the copy before as the newest, whose replay range may have been
/// reused), and serves only after that: then no copy of the old version is
/// left, and an older build refuses the volume by its version instead of
/// falling back to a stale copy (or, for the log, to a map page of its
/// version older than the one this build wrote beside it).
pub fn copy_version(area: &[u8], generation: u64) -> u32 {
    let at = (generation % 2) as usize * super::CHECKPOINT_COPY_BYTES as usize;
    u32::from_le_bytes(area[at + 8..at + 12].try_into().expect("4 bytes"))
}

/// The newest valid of the two checkpoint copies in `area` (copy 0 first)
/// and whether one was unreadable; errors report both copies.
fn pick_copy<T>(
    area: &[u8],
    decode: impl Fn(&[u8]) -> Result<T, HeaderError>,
    generation: impl Fn(&T) -> u64,
) -> Result<(T, bool), String> {
    let copy = |i: usize| {
        let at = i * super::CHECKPOINT_COPY_BYTES as usize;
        decode(&area[at..at + CHECKPOINT_BYTES])
    };
    match (copy(0), copy(1)) {
        (Ok(a), Ok(b)) => Ok((if generation(&a) >= generation(&b) { a } else { b }, false)),
        (Ok(a), Err(_)) | (Err(_), Ok(a)) => Ok((a, true)),
        (Err(e0), Err(e1)) => Err(format!("no valid checkpoint: copy 0: {e0}; copy 1: {e1}")),
    }
}

/// Evidence that every segment below `durable_upto` was durable when a
/// client was told so (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlushMark {
    /// Bumped at every mark write; picks the copy (`generation % 2`).
    pub generation: u64,
    /// Boot counter of the run that wrote it.
    pub boot: u64,
    /// Every segment with a lower seq was durable.
    pub durable_upto: Seq,
}

impl FlushMark {
    /// Encodes one copy (512 bytes); checked by re-decoding.
    pub fn encode(&self, geo: &Geometry) -> Vec<u8> {
        let mut p = Vec::with_capacity(28);
        for v in [self.boot, self.durable_upto.0, geo.region_offset_bytes] {
            p.extend(v.to_le_bytes());
        }
        p.extend(geo.segment_count.to_le_bytes());
        let b = MARK_CODEC.encode(self.generation, &p).expect("a flush mark fits its block");
        let back = FlushMark::decode_up_to(&b, geo, GENERATION_MAX);
        assert_eq!(back.as_ref(), Ok(self), "flush mark round trip");
        b
    }

    /// Decodes one copy and checks it against the configured geometry.
    pub fn decode(b: &[u8], geo: &Geometry) -> Result<FlushMark, HeaderError> {
        FlushMark::decode_up_to(b, geo, SEQ_MAX)
    }

    fn decode_up_to(b: &[u8], geo: &Geometry, max: u64) -> Result<FlushMark, HeaderError> {
        assert!(b.len() >= CHECKPOINT_BYTES, "caller reads a whole mark");
        let (block, _) = decode_versioned(MARK_CODEC, &[], b, max)?;
        let mut r = Reader::new(&block.payload);
        let boot = seq_in_range("boot", r.u64()?, max)?;
        let durable_upto = Seq(seq_in_range("durable_upto_seq", r.u64()?, max)?);
        let (offset, segments) = (r.u64()?, r.u32()?);
        if (offset, segments) != (geo.region_offset_bytes, geo.segment_count) || r.remaining() != 0 {
            return Err(HeaderError::Geometry(format!(
                "flush mark of a log at {offset} with {segments} segments"
            )));
        }
        Ok(FlushMark { generation: block.generation, boot, durable_upto })
    }

    /// The newest valid of the two copies in the checkpoint area, if any.
    /// A missing or damaged mark only means less evidence, never an error.
    pub fn pick(area: &[u8], geo: &Geometry) -> Option<FlushMark> {
        (0..2u64)
            .filter_map(|g| {
                let at = (geo.mark_offset_bytes(g) - geo.region_offset_bytes) as usize;
                FlushMark::decode(&area[at..at + CHECKPOINT_BYTES], geo).ok()
            })
            .max_by_key(|m| m.generation)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn geo() -> Geometry {
        Geometry::new(0, 1 << 20, 1024, 8).expect("valid")
    }

    /// Found by `fuzz_images` (a checkpoint block's generation crafted to
    /// 2^62, crc fixed: accepted, and the next checkpoint write, 2^62 + 1,
    /// panicked in `encode`). What is read is at most `SEQ_MAX`, and what
    /// goes on from there can be written.
    #[test]
    fn what_continues_from_the_largest_readable_generation_can_be_written() {
        let g = geo();
        let ck = |generation| Checkpoint {
            generation,
            boot: 2,
            replay_from_seq: Seq(SEQ_MAX),
            resume_seq: Seq(SEQ_MAX),
            durable_upto: Seq(SEQ_MAX),
            format_id: 9,
        };
        assert_eq!(Checkpoint::decode(&ck(SEQ_MAX).encode(&g), &g).map(|c| c.generation), Ok(SEQ_MAX));
        for past in [SEQ_MAX + 1, GENERATION_MAX] {
            let b = ck(past).encode(&g);
            assert!(Checkpoint::decode(&b, &g).unwrap_err().to_string().contains("past"), "{past}");
        }
        let mark = FlushMark { generation: GENERATION_MAX, boot: 1, durable_upto: Seq(SEQ_MAX + 9) };
        assert!(FlushMark::decode(&mark.encode(&g), &g).is_err());
        let h = SegmentHeader {
            seq: Seq(SEQ_MAX + 1),
            boot: 1,
            format_id: 9,
            slots_used: 0,
            payload_crc: None,
            entries: vec![],
        };
        assert!(SegmentHeader::decode(&h.encode(&g), &g).is_err());
    }

    #[test]
    fn header_round_trips_and_any_flipped_bit_is_caught() {
        let g = geo();
        let h = SegmentHeader {
            seq: Seq(77),
            boot: 3,
            format_id: 9,
            slots_used: 2,
            payload_crc: Some(0xDEAD_BEEF),
            entries: vec![
                Entry::Slot { start_sector: 100, sector_count: 2, slot: 0 },
                Entry::Invalidate { start_sector: 90, sector_count: 300 },
                Entry::Slot { start_sector: 8, sector_count: 1, slot: 1 },
            ],
        };
        let b = h.encode(&g);
        assert_eq!(SegmentHeader::decode(&b, &g), Ok(h));
        for bit in [8 * 16, 8 * 70, 8 * 100 + 3] {
            let mut c = b.clone();
            c[bit / 8] ^= 1 << (bit % 8);
            assert_eq!(SegmentHeader::decode(&c, &g), Err(HeaderError::BadCrc));
        }
        assert_eq!(SegmentHeader::decode(&vec![0; g.header_bytes as usize], &g), Err(HeaderError::NoMagic));
        let other = Geometry::new(0, 1 << 20, 512, 8).expect("valid");
        assert!(matches!(
            SegmentHeader::decode(&b, &other),
            Err(HeaderError::BadCrc | HeaderError::Geometry(_))
        ));
    }

    /// A block with a payload field overwritten and its crc recomputed: what
    /// a crafted (not a damaged) block looks like.
    fn crafted(mut b: Vec<u8>, payload_at: usize, value: u64) -> Vec<u8> {
        let at = HEADER_BYTES + payload_at;
        b[at..at + 8].copy_from_slice(&value.to_le_bytes());
        b[28..32].fill(0);
        let crc = crc32c::crc32c(&b);
        b[28..32].copy_from_slice(&crc.to_le_bytes());
        b
    }

    #[test]
    fn crafted_checkpoint_and_header_fields_are_refused_naming_the_field() {
        let g = geo();
        let ck = Checkpoint {
            generation: 4,
            boot: 2,
            replay_from_seq: Seq(5),
            resume_seq: Seq(9),
            durable_upto: Seq(7),
            format_id: 9,
        };
        for (at, value, field) in [
            (0, u64::MAX, "boot"),
            (0, 0, "boot counter is zero"),
            (8, u64::MAX - 3, "replay_from_seq"),
            (16, SEQ_MAX + 1, "resume_seq"),
            (24, u64::MAX, "durable_upto_seq"),
            (32, 4096, "log offset"),
        ] {
            let e = Checkpoint::decode(&crafted(ck.encode(&g), at, value), &g).unwrap_err();
            assert!(e.to_string().contains(field), "{field}: {e}");
        }
        // The generation lives in the block header: past 2^62 it is refused.
        let mut b = ck.encode(&g);
        b[16..24].copy_from_slice(&(u64::MAX - 1).to_le_bytes());
        b[28..32].fill(0);
        let crc = crc32c::crc32c(&b);
        b[28..32].copy_from_slice(&crc.to_le_bytes());
        assert!(Checkpoint::decode(&b, &g).unwrap_err().to_string().contains("generation"));
        // A segment header's boot near 2^64.
        let h = SegmentHeader {
            seq: Seq(3),
            boot: 1,
            format_id: 9,
            slots_used: 0,
            payload_crc: None,
            entries: Vec::new(),
        };
        let e = SegmentHeader::decode(&crafted(h.encode(&g), 0, u64::MAX), &g).unwrap_err();
        assert!(e.to_string().contains("boot"), "{e}");
    }

    #[test]
    fn checkpoint_pick_prefers_the_newest_valid_copy() {
        let g = geo();
        let mk = |generation| Checkpoint {
            generation,
            boot: 2,
            replay_from_seq: Seq(5),
            resume_seq: Seq(9),
            durable_upto: Seq(7),
            format_id: 9,
        };
        let mut area = vec![0u8; 8192];
        area[..512].copy_from_slice(&mk(4).encode(&g));
        area[4096..4608].copy_from_slice(&mk(5).encode(&g));
        assert_eq!(Checkpoint::pick(&area, &g).expect("valid").0.generation, 5);
        area[4100] ^= 1; // tear the newer copy
        assert_eq!(Checkpoint::pick(&area, &g).expect("valid"), (mk(4), true));
        area[10] ^= 1;
        assert!(Checkpoint::pick(&area, &g).unwrap_err().contains("no valid checkpoint"));
    }

    /// The map's digests kept page by page match those summed from
    /// scratch; one page short names its weight and shortfall exactly,
    /// whatever the generations (also near 2^64, where the sum wraps);
    /// two pages short give a weight neither page has.
    #[test]
    fn one_page_short_is_named_by_the_two_digests_and_two_are_not() {
        let gens = [5u64, 9, 2, 1 << 62, u64::MAX - 3, 7, 7, 40];
        let scratch = |gens: &[u64]| {
            let mut d = MapDigest::default();
            for (p, &g) in gens.iter().enumerate() {
                d.replace(p as u32, 0, g);
            }
            d
        };
        let mut kept = scratch(&[0; 8]);
        for (p, &g) in gens.iter().enumerate() {
            kept.replace(p as u32, 0, g + 1);
            kept.replace(p as u32, g + 1, g);
        }
        let recorded = scratch(&gens);
        assert_eq!(kept, recorded);
        assert!(recorded.weighted < MAP_DIGEST_PRIME);
        assert_eq!(recorded.single_shortfall(&recorded), None, "no shortfall");
        for p in 0..gens.len() {
            for d in [1, gens[p] / 2, gens[p]] {
                let mut short = gens;
                short[p] -= d;
                let got = scratch(&short).single_shortfall(&recorded);
                assert_eq!(
                    got,
                    (d != 0).then_some((d, MapDigest::weight(p as u32))),
                    "page {p} short by {d}"
                );
            }
        }
        let mut two = gens;
        two[0] -= 1;
        two[1] -= 4;
        let (d, w) = scratch(&two).single_shortfall(&recorded).expect("a quotient");
        assert_eq!(d, 5);
        assert!((0..8).all(|p| MapDigest::weight(p) != w), "{w}");
        assert!((0..1000).all(|p| (1..MAP_DIGEST_PRIME).contains(&MapDigest::weight(p))));
        // The weights are part of the format (version 6 on): pinned, as
        // released (splitmix64 of the index, reduced).
        let pinned = [
            0x0220_a839_7b1d_cdbe,
            0x110a_2dec_8902_5cca,
            0x0f61_324e_2880_d25f,
            0x042a_0965_68ee_3683,
            0x13b1_3ba2_aff1_81c7,
        ];
        let weights = [0, 1, 1013, 235_714, u32::MAX].map(MapDigest::weight);
        assert_eq!(weights, pinned, "{weights:x?}");
    }
}
