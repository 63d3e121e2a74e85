//! On-disk formats of the segment log: the segment header and the
//! checkpoint. Both carry a magic, a format version, a sequence number and
//! a crc32c, which is checked before every write (the encoder re-decodes
//! its own output) and after every read. All integers are little endian.
//!
//! Segment header (`header_bytes`, sector aligned):
//! ```text
//! 0  magic u64 "LDSEGHD1"   8  version u32       12 header_bytes u32
//! 16 seq u64                24 boot u64
//! 32 slot_bytes u32         36 slot_count u32    40 entry_count u32
//! 44 slots_used u32         48 payload_crc u32   52 flags u32 (bit 0: payload_crc valid)
//! 56 header_crc u32 (crc32c of the header with this field zero)   60 reserved u32
//! 64 entries, 16 bytes each: start_sector u64, sector_count u32, kind u16, slot u16
//!    kind 1 = slot `slot` holds sectors [start, start+count)
//!    kind 2 = sectors [start, start+count) were overwritten outside the log
//! ```
//! Checkpoint (one 512-byte block per copy):
//! ```text
//! 0  magic u64 "LDSEGCK1"   8  version u32       12 slot_bytes u32
//! 16 generation u64         24 boot u64          32 replay_from_seq u64
//! 40 resume_seq u64         48 segment_count u32 52 slot_count u32
//! 56 header_bytes u32       60 crc u32 (crc32c of the block with this field zero)
//! 64 region_offset_bytes u64   72 durable_upto_seq u64   80.. zero
//! ```
//! `durable_upto_seq` (0 in checkpoints written before it existed): every
//! segment below it was durable when the checkpoint was written; the tail
//! advance that wrote it may have relied on segments up to there holding
//! the newest copy of a sector (see the dcd reclaim rule), so recovery
//! must reach it.
//! Flush mark (one 512-byte block per copy, 1024 bytes into each checkpoint
//! copy's 4 KiB): evidence that the log was durable up to a seq when a
//! client's flush or FUA write was acknowledged, so that recovery can tell
//! a torn tail (allowed to be cut off) from damage to flushed segments
//! (refused):
//! ```text
//! 0  magic u64 "LDSEGFM1"   8  version u32       12 reserved u32
//! 16 generation u64         24 boot u64          32 durable_upto_seq u64
//! 40 region_offset_bytes u64                     48 segment_count u32
//! 52 reserved u32           56 reserved u32      60 crc u32
//! ```
//!
//! Every decoded number is range-checked: sequence numbers, generations and
//! boot counters above [`SEQ_MAX`] are refused as malformed, so that no
//! arithmetic on them can overflow.

use super::{Geometry, Seq, ENTRY_BYTES, HEADER_FIXED_BYTES};

/// Format version of headers and checkpoints written by this build.
pub const FORMAT_VERSION: u32 = 1;
const HEADER_MAGIC: u64 = u64::from_le_bytes(*b"LDSEGHD1");
const CHECKPOINT_MAGIC: u64 = u64::from_le_bytes(*b"LDSEGCK1");
const MARK_MAGIC: u64 = u64::from_le_bytes(*b"LDSEGFM1");
/// Largest sequence number, generation or boot counter accepted from disk
/// (2^62: a segment a microsecond for 146,000 years). Larger values are
/// crafted or corrupt, and refusing them keeps every `+ 1` and every
/// `seq + segment_count` free of overflow.
pub const SEQ_MAX: u64 = 1 << 62;
/// Bytes of one encoded checkpoint.
pub const CHECKPOINT_BYTES: usize = 512;
const FLAG_PAYLOAD_CRC: u32 = 1;
const KIND_SLOT: u16 = 1;
const KIND_INVALIDATE: u16 = 2;

/// Why a header or checkpoint was not accepted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HeaderError {
    /// No magic: never written, zeroed, or something else lives here.
    NoMagic,
    /// The magic is there but the crc does not match: torn or corrupt.
    BadCrc,
    /// Written by another format version.
    Version(u32),
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
            HeaderError::Version(v) => write!(f, "format version {v}, this build reads {FORMAT_VERSION}"),
            HeaderError::Geometry(s) => write!(f, "geometry differs from the config: {s}"),
            HeaderError::Malformed(s) => write!(f, "malformed: {s}"),
        }
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
}

/// A segment header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SegmentHeader {
    /// Sequence number.
    pub seq: Seq,
    /// Boot counter of the run that wrote it.
    pub boot: u64,
    /// Slots written (a prefix of the segment).
    pub slots_used: u32,
    /// crc32c of the `slots_used` slots, when the writer had the bytes.
    pub payload_crc: Option<u32>,
    /// Entries in event order.
    pub entries: Vec<Entry>,
}

fn put_u16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_le_bytes());
}
fn put_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}
fn put_u64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}
fn get_u16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes(b[at..at + 2].try_into().expect("2 bytes"))
}
fn get_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}
fn get_u64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// crc32c of `b` with the 4 bytes at `at` taken as zero.
fn crc_without(b: &[u8], at: usize) -> u32 {
    let c = crc32c::crc32c(&b[..at]);
    let c = crc32c::crc32c_append(c, &[0u8; 4]);
    crc32c::crc32c_append(c, &b[at + 4..])
}

impl SegmentHeader {
    /// Encodes into `geo.header_bytes`; re-decodes the result so a bad
    /// header can never reach the disk.
    pub fn encode(&self, geo: &Geometry) -> Vec<u8> {
        assert!(self.entries.len() <= geo.entry_count_max as usize, "too many entries");
        assert!(self.slots_used <= geo.slot_count, "more slots used than exist");
        let mut b = vec![0u8; geo.header_bytes as usize];
        put_u64(&mut b, 0, HEADER_MAGIC);
        put_u32(&mut b, 8, FORMAT_VERSION);
        put_u32(&mut b, 12, geo.header_bytes);
        put_u64(&mut b, 16, self.seq.0);
        put_u64(&mut b, 24, self.boot);
        put_u32(&mut b, 32, geo.slot_bytes);
        put_u32(&mut b, 36, geo.slot_count);
        put_u32(&mut b, 40, self.entries.len() as u32);
        put_u32(&mut b, 44, self.slots_used);
        put_u32(&mut b, 48, self.payload_crc.unwrap_or(0));
        put_u32(&mut b, 52, if self.payload_crc.is_some() { FLAG_PAYLOAD_CRC } else { 0 });
        for (i, e) in self.entries.iter().enumerate() {
            let at = (HEADER_FIXED_BYTES + ENTRY_BYTES * i as u32) as usize;
            let (start, count, kind, slot) = match *e {
                Entry::Slot { start_sector, sector_count, slot } => {
                    (start_sector, sector_count, KIND_SLOT, slot)
                }
                Entry::Invalidate { start_sector, sector_count } => {
                    (start_sector, sector_count, KIND_INVALIDATE, 0)
                }
            };
            put_u64(&mut b, at, start);
            put_u32(&mut b, at + 8, count);
            put_u16(&mut b, at + 12, kind);
            put_u16(&mut b, at + 14, slot);
        }
        let crc = crc_without(&b, 56);
        put_u32(&mut b, 56, crc);
        assert_eq!(SegmentHeader::decode(&b, geo).as_ref(), Ok(self), "header round trip");
        b
    }

    /// Decodes and checks a header read from disk.
    pub fn decode(b: &[u8], geo: &Geometry) -> Result<SegmentHeader, HeaderError> {
        assert!(b.len() >= geo.header_bytes as usize, "caller reads a whole header");
        if get_u64(b, 0) != HEADER_MAGIC {
            return Err(HeaderError::NoMagic);
        }
        let hb = get_u32(b, 12);
        if hb != geo.header_bytes || crc_without(&b[..hb as usize], 56) != get_u32(b, 56) {
            return Err(HeaderError::BadCrc);
        }
        if get_u32(b, 8) != FORMAT_VERSION {
            return Err(HeaderError::Version(get_u32(b, 8)));
        }
        if get_u32(b, 32) != geo.slot_bytes || get_u32(b, 36) != geo.slot_count {
            return Err(HeaderError::Geometry(format!(
                "slots of {} x {} on disk, {} x {} configured",
                get_u32(b, 36),
                get_u32(b, 32),
                geo.slot_count,
                geo.slot_bytes
            )));
        }
        let entry_count = get_u32(b, 40);
        let slots_used = get_u32(b, 44);
        if entry_count > geo.entry_count_max || slots_used > geo.slot_count {
            return Err(HeaderError::Malformed(format!("{entry_count} entries, {slots_used} slots used")));
        }
        let entries =
            (0..entry_count).map(|i| decode_entry(b, i, geo, slots_used)).collect::<Result<Vec<_>, _>>()?;
        if get_u64(b, 16) > SEQ_MAX || get_u64(b, 24) > SEQ_MAX {
            return Err(HeaderError::Malformed(format!(
                "seq {} or boot {} past {SEQ_MAX}",
                get_u64(b, 16),
                get_u64(b, 24)
            )));
        }
        let payload_crc = (get_u32(b, 52) & FLAG_PAYLOAD_CRC != 0).then(|| get_u32(b, 48));
        Ok(SegmentHeader { seq: Seq(get_u64(b, 16)), boot: get_u64(b, 24), slots_used, payload_crc, entries })
    }

    /// crc32c of a segment's used slots, as stored in `payload_crc`.
    pub fn payload_crc_of(payload: &[u8]) -> u32 {
        crc32c::crc32c(payload)
    }
}

fn decode_entry(b: &[u8], i: u32, geo: &Geometry, slots_used: u32) -> Result<Entry, HeaderError> {
    let at = (HEADER_FIXED_BYTES + ENTRY_BYTES * i) as usize;
    let (start_sector, sector_count) = (get_u64(b, at), get_u32(b, at + 8));
    let (kind, slot) = (get_u16(b, at + 12), get_u16(b, at + 14));
    let bad = |what: &str| HeaderError::Malformed(format!("entry {i}: {what}"));
    if sector_count == 0 || start_sector.checked_add(u64::from(sector_count)).is_none() {
        return Err(bad("empty or overflowing range"));
    }
    match kind {
        KIND_SLOT if u32::from(slot) >= slots_used || sector_count > geo.slot_sectors() => {
            Err(bad("slot out of range"))
        }
        KIND_SLOT => Ok(Entry::Slot { start_sector, sector_count, slot }),
        KIND_INVALIDATE => Ok(Entry::Invalidate { start_sector, sector_count }),
        _ => Err(bad("unknown kind")),
    }
}

/// The common prelude of a 512-byte metadata block (checkpoint, flush
/// mark): magic at 0, version at 8, crc32c at 60 (taken as zero).
fn check_block(b: &[u8], magic: u64) -> Result<(), HeaderError> {
    if get_u64(b, 0) != magic {
        return Err(HeaderError::NoMagic);
    }
    if crc_without(b, 60) != get_u32(b, 60) {
        return Err(HeaderError::BadCrc);
    }
    if get_u32(b, 8) != FORMAT_VERSION {
        return Err(HeaderError::Version(get_u32(b, 8)));
    }
    Ok(())
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
}

impl Checkpoint {
    /// Encodes one copy (512 bytes); checked by re-decoding.
    pub fn encode(&self, geo: &Geometry) -> Vec<u8> {
        assert!(self.boot > 0, "boot counts from 1");
        let mut b = vec![0u8; CHECKPOINT_BYTES];
        put_u64(&mut b, 0, CHECKPOINT_MAGIC);
        put_u32(&mut b, 8, FORMAT_VERSION);
        put_u32(&mut b, 12, geo.slot_bytes);
        put_u64(&mut b, 16, self.generation);
        put_u64(&mut b, 24, self.boot);
        put_u64(&mut b, 32, self.replay_from_seq.0);
        put_u64(&mut b, 40, self.resume_seq.0);
        put_u32(&mut b, 48, geo.segment_count);
        put_u32(&mut b, 52, geo.slot_count);
        put_u32(&mut b, 56, geo.header_bytes);
        put_u64(&mut b, 64, geo.region_offset_bytes);
        put_u64(&mut b, 72, self.durable_upto.0);
        let crc = crc_without(&b, 60);
        put_u32(&mut b, 60, crc);
        assert_eq!(Checkpoint::decode(&b, geo).as_ref(), Ok(self), "checkpoint round trip");
        b
    }

    /// Decodes one copy and checks it against the configured geometry.
    pub fn decode(b: &[u8], geo: &Geometry) -> Result<Checkpoint, HeaderError> {
        assert!(b.len() >= CHECKPOINT_BYTES, "caller reads a whole checkpoint");
        let b = &b[..CHECKPOINT_BYTES];
        check_block(b, CHECKPOINT_MAGIC)?;
        let found = (get_u32(b, 12), get_u32(b, 48), get_u32(b, 52), get_u32(b, 56), get_u64(b, 64));
        let want =
            (geo.slot_bytes, geo.segment_count, geo.slot_count, geo.header_bytes, geo.region_offset_bytes);
        if found != want {
            return Err(HeaderError::Geometry(format!(
                "(slot_bytes, segment_count, slot_count, header_bytes, log offset) on disk {found:?}, configured {want:?}"
            )));
        }
        let ck = Checkpoint {
            generation: get_u64(b, 16),
            boot: get_u64(b, 24),
            replay_from_seq: Seq(get_u64(b, 32)),
            resume_seq: Seq(get_u64(b, 40)),
            durable_upto: Seq(get_u64(b, 72)),
        };
        if ck.boot == 0 {
            return Err(HeaderError::Malformed("boot counter is zero".into()));
        }
        for (name, v) in [
            ("generation", ck.generation),
            ("boot", ck.boot),
            ("replay_from_seq", ck.replay_from_seq.0),
            ("resume_seq", ck.resume_seq.0),
            ("durable_upto_seq", ck.durable_upto.0),
        ] {
            if v > SEQ_MAX {
                return Err(HeaderError::Malformed(format!("{name} {v} is past {SEQ_MAX}")));
            }
        }
        Ok(ck)
    }

    /// Picks the newest valid of the two copies (`area` holds both, copy 0
    /// first); the flag says one copy was unreadable. Errors report both
    /// copies.
    pub fn pick(area: &[u8], geo: &Geometry) -> Result<(Checkpoint, bool), String> {
        let copy = |i: usize| {
            let at = i * super::CHECKPOINT_COPY_BYTES as usize;
            Checkpoint::decode(&area[at..at + CHECKPOINT_BYTES], geo)
        };
        match (copy(0), copy(1)) {
            (Ok(a), Ok(b)) => Ok((if a.generation >= b.generation { a } else { b }, false)),
            (Ok(a), Err(_)) | (Err(_), Ok(a)) => Ok((a, true)),
            (Err(e0), Err(e1)) => Err(format!("no valid checkpoint: copy 0: {e0}; copy 1: {e1}")),
        }
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
        let mut b = vec![0u8; CHECKPOINT_BYTES];
        put_u64(&mut b, 0, MARK_MAGIC);
        put_u32(&mut b, 8, FORMAT_VERSION);
        put_u64(&mut b, 16, self.generation);
        put_u64(&mut b, 24, self.boot);
        put_u64(&mut b, 32, self.durable_upto.0);
        put_u64(&mut b, 40, geo.region_offset_bytes);
        put_u32(&mut b, 48, geo.segment_count);
        let crc = crc_without(&b, 60);
        put_u32(&mut b, 60, crc);
        assert_eq!(FlushMark::decode(&b, geo).as_ref(), Ok(self), "flush mark round trip");
        b
    }

    /// Decodes one copy and checks it against the configured geometry.
    pub fn decode(b: &[u8], geo: &Geometry) -> Result<FlushMark, HeaderError> {
        assert!(b.len() >= CHECKPOINT_BYTES, "caller reads a whole mark");
        let b = &b[..CHECKPOINT_BYTES];
        check_block(b, MARK_MAGIC)?;
        if (get_u64(b, 40), get_u32(b, 48)) != (geo.region_offset_bytes, geo.segment_count) {
            return Err(HeaderError::Geometry(format!(
                "flush mark of a log at {} with {} segments",
                get_u64(b, 40),
                get_u32(b, 48)
            )));
        }
        let m =
            FlushMark { generation: get_u64(b, 16), boot: get_u64(b, 24), durable_upto: Seq(get_u64(b, 32)) };
        if m.generation > SEQ_MAX || m.boot > SEQ_MAX || m.durable_upto.0 > SEQ_MAX {
            return Err(HeaderError::Malformed(format!("flush mark {m:?} has a number past {SEQ_MAX}")));
        }
        Ok(m)
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

    #[test]
    fn header_round_trips_and_any_flipped_bit_is_caught() {
        let g = geo();
        let h = SegmentHeader {
            seq: Seq(77),
            boot: 3,
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

    #[test]
    fn checkpoint_pick_prefers_the_newest_valid_copy() {
        let g = geo();
        let mk = |generation| Checkpoint {
            generation,
            boot: 2,
            replay_from_seq: Seq(5),
            resume_seq: Seq(9),
            durable_upto: Seq(7),
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
}
