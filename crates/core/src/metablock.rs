//! The metadata block codec: one on-disk shape for every piece of metadata
//! layoutd keeps (the superblock, target checkpoints, journals), so each
//! gets the same protection from one well-tested piece of code.
//!
//! A block of `block_bytes` (a multiple of 512):
//! ```text
//! 0  magic [8]              8  version u32         12 payload_bytes u32
//! 16 generation u64         24 reserved u32 (0)    28 crc32c u32
//! 32 payload (payload_bytes), then zeroes to the end of the block
//! ```
//! The crc32c covers the whole block with its own field taken as zero, so
//! a torn write, a flipped bit anywhere (padding included) or a block of
//! another size is caught. Blocks are kept in two copies; generation `g`
//! is written to copy `g % 2`, so a torn write leaves the other copy, and
//! [`MetaBlockCodec::pick`] takes the newest valid one and says whether the
//! other was readable (a reader must know when it fell back).
//!
//! Decoding checks, in order: magic (absent: never written, or another
//! kind of block), crc, version, the payload length, the reserved field,
//! and that the generation is at most [`GENERATION_READ_MAX`]. Blocks are
//! written with generations up to [`GENERATION_MAX`], twice that: a writer
//! that goes on from a decoded generation (the next checkpoint, journal
//! block or segment) has 2^61 blocks to write before it reaches a
//! generation it cannot encode, so a crafted or corrupt generation is
//! refused at the read, never met as a failed write later. What the
//! payload means is the caller's; its decoder range-checks every field
//! (see [`Reader`]), sequence numbers against [`GENERATION_READ_MAX`] too.
//!
//! [`JournalRecord`]s are the typed records the targets persist between
//! checkpoints: map updates, dirty bits, snapshot exceptions, segment usage.
//! A journal block's payload is a sequence of them; each is
//! `kind u8, length u8, fields...` and decodes only if its length and
//! every field are exactly as its kind defines.

/// Largest generation a block is written with (2^62).
pub const GENERATION_MAX: u64 = 1 << 62;
/// Largest generation (or sequence number) accepted from disk (2^61: a
/// block a microsecond for 73,000 years), half of [`GENERATION_MAX`] so
/// that whatever continues from it can be written.
pub const GENERATION_READ_MAX: u64 = GENERATION_MAX / 2;
/// Bytes before the payload.
pub const HEADER_BYTES: usize = 32;

/// Why a block was not accepted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MetaError {
    /// All zeroes: never written.
    Blank,
    /// Another magic: not this kind of block (the magic found).
    Foreign([u8; 8]),
    /// The crc does not match: torn or damaged.
    BadCrc,
    /// Written by another format version.
    Version(u32),
    /// A field is out of range (which, and why).
    Malformed(String),
}

impl MetaError {
    /// No block there: never written, another kind of block, or torn (its
    /// crc fails). Any other error is a whole block this build cannot read
    /// (a newer version, or damage under a good crc): a journal must not
    /// take it for its torn tail.
    pub fn is_absent_or_torn(&self) -> bool {
        matches!(self, MetaError::Blank | MetaError::Foreign(_) | MetaError::BadCrc)
    }
}

impl std::fmt::Display for MetaError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MetaError::Blank => write!(f, "blank (never written)"),
            MetaError::Foreign(m) => write!(f, "not this kind of block (magic {m:02x?})"),
            MetaError::BadCrc => write!(f, "crc32c mismatch (torn or damaged)"),
            MetaError::Version(v) => write!(f, "format version {v} is not one this build reads"),
            MetaError::Malformed(s) => write!(f, "malformed: {s}"),
        }
    }
}

/// One kind of block: its magic, the version written, and its size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MetaBlockCodec {
    /// Identifies the kind of block.
    pub magic: [u8; 8],
    /// The format version this build writes and reads.
    pub version: u32,
    /// Bytes of one copy (a multiple of 512).
    pub block_bytes: usize,
}

/// A decoded block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decoded {
    /// Its generation.
    pub generation: u64,
    /// The payload (without padding).
    pub payload: Vec<u8>,
}

/// The newest valid copy of two.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Picked {
    /// The block.
    pub block: Decoded,
    /// Which copy (0 or 1) it came from.
    pub copy: usize,
    /// Why the other copy was not readable, if it was not (a fallback or a
    /// lost copy the caller may want to report).
    pub other_error: Option<MetaError>,
}

fn crc_without(b: &[u8], at: usize) -> u32 {
    let c = crc32c::crc32c(&b[..at]);
    let c = crc32c::crc32c_append(c, &[0u8; 4]);
    crc32c::crc32c_append(c, &b[at + 4..])
}

impl MetaBlockCodec {
    /// The most payload a block holds.
    pub const fn payload_bytes_max(&self) -> usize {
        self.block_bytes - HEADER_BYTES
    }

    /// Which copy generation `generation` is written to.
    pub const fn copy_of(generation: u64) -> usize {
        (generation % 2) as usize
    }

    /// Encodes one copy; `Err` if the payload does not fit or the
    /// generation is out of range. Checked by decoding the result.
    pub fn encode(&self, generation: u64, payload: &[u8]) -> Result<Vec<u8>, MetaError> {
        assert!(self.block_bytes.is_multiple_of(512) && self.block_bytes > HEADER_BYTES);
        if payload.len() > self.payload_bytes_max() {
            return Err(MetaError::Malformed(format!(
                "payload of {} bytes; a block holds {}",
                payload.len(),
                self.payload_bytes_max()
            )));
        }
        if generation > GENERATION_MAX {
            return Err(MetaError::Malformed(format!("generation {generation} is past {GENERATION_MAX}")));
        }
        let mut b = vec![0u8; self.block_bytes];
        b[0..8].copy_from_slice(&self.magic);
        b[8..12].copy_from_slice(&self.version.to_le_bytes());
        b[12..16].copy_from_slice(&(payload.len() as u32).to_le_bytes());
        b[16..24].copy_from_slice(&generation.to_le_bytes());
        b[HEADER_BYTES..HEADER_BYTES + payload.len()].copy_from_slice(payload);
        let crc = crc_without(&b, 28);
        b[28..32].copy_from_slice(&crc.to_le_bytes());
        let back = self.decode_up_to(&b, GENERATION_MAX).map(|d| d.generation);
        assert_eq!(back, Ok(generation), "metadata block round trip");
        Ok(b)
    }

    /// Decodes and checks one copy (`block` is at least `block_bytes`); a
    /// generation past [`GENERATION_READ_MAX`] is refused.
    pub fn decode(&self, block: &[u8]) -> Result<Decoded, MetaError> {
        self.decode_up_to(block, GENERATION_READ_MAX)
    }

    /// [`MetaBlockCodec::decode_up_to`] of a block written in this codec's
    /// version or in an older one that `readable` accepts (its payload is
    /// then the caller's to read in that version's layout): the block and
    /// the version it was written in. Any other version is
    /// [`MetaError::Version`].
    pub fn decode_versioned(
        &self,
        block: &[u8],
        generation_max: u64,
        readable: impl Fn(u32) -> bool,
    ) -> Result<(Decoded, u32), MetaError> {
        match self.decode_up_to(block, generation_max) {
            Err(MetaError::Version(v)) if v != self.version && readable(v) => {
                Ok((MetaBlockCodec { version: v, ..*self }.decode_up_to(block, generation_max)?, v))
            }
            r => Ok((r?, self.version)),
        }
    }

    /// [`MetaBlockCodec::decode`] accepting generations up to
    /// `generation_max`: for a writer checking its own block's round trip
    /// (up to [`GENERATION_MAX`]); what is read from disk goes through
    /// `decode`.
    pub fn decode_up_to(&self, block: &[u8], generation_max: u64) -> Result<Decoded, MetaError> {
        assert!(block.len() >= self.block_bytes, "the caller reads a whole block");
        let b = &block[..self.block_bytes];
        let magic: [u8; 8] = b[0..8].try_into().expect("8 bytes");
        if magic != self.magic {
            return Err(if b.iter().all(|&x| x == 0) { MetaError::Blank } else { MetaError::Foreign(magic) });
        }
        let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().expect("4 bytes"));
        if crc_without(b, 28) != u32_at(28) {
            return Err(MetaError::BadCrc);
        }
        if u32_at(8) != self.version {
            return Err(MetaError::Version(u32_at(8)));
        }
        let payload_bytes = u32_at(12) as usize;
        if payload_bytes > self.payload_bytes_max() {
            return Err(MetaError::Malformed(format!("payload length {payload_bytes} past the block")));
        }
        if u32_at(24) != 0 {
            return Err(MetaError::Malformed("reserved field is not zero".into()));
        }
        let generation = u64::from_le_bytes(b[16..24].try_into().expect("8 bytes"));
        if generation > generation_max {
            return Err(MetaError::Malformed(format!("generation {generation} is past {generation_max}")));
        }
        Ok(Decoded { generation, payload: b[HEADER_BYTES..HEADER_BYTES + payload_bytes].to_vec() })
    }

    /// The newest valid of two copies; `Err` with both reasons if neither is.
    pub fn pick(&self, copy0: &[u8], copy1: &[u8]) -> Result<Picked, (MetaError, MetaError)> {
        match (self.decode(copy0), self.decode(copy1)) {
            (Ok(a), Ok(b)) => {
                let (block, copy) = if b.generation > a.generation { (b, 1) } else { (a, 0) };
                Ok(Picked { block, copy, other_error: None })
            }
            (Ok(a), Err(e)) => Ok(Picked { block: a, copy: 0, other_error: Some(e) }),
            (Err(e), Ok(b)) => Ok(Picked { block: b, copy: 1, other_error: Some(e) }),
            (Err(e0), Err(e1)) => Err((e0, e1)),
        }
    }
}

/// Reads little-endian fields off a payload, every read bounds-checked, so
/// a payload decoder cannot index past the end whatever the bytes say.
pub struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    /// Reads from the start of `b`.
    pub fn new(b: &'a [u8]) -> Reader<'a> {
        Reader { b, at: 0 }
    }

    /// The next `n` bytes.
    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8], MetaError> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.b.len()).ok_or_else(|| {
            MetaError::Malformed(format!(
                "field at byte {} runs past the payload ({} bytes)",
                self.at,
                self.b.len()
            ))
        })?;
        let s = &self.b[self.at..end];
        self.at = end;
        Ok(s)
    }

    /// The next u8.
    pub fn u8(&mut self) -> Result<u8, MetaError> {
        Ok(self.bytes(1)?[0])
    }

    /// The next u32.
    pub fn u32(&mut self) -> Result<u32, MetaError> {
        Ok(u32::from_le_bytes(self.bytes(4)?.try_into().expect("4 bytes")))
    }

    /// The next u64.
    pub fn u64(&mut self) -> Result<u64, MetaError> {
        Ok(u64::from_le_bytes(self.bytes(8)?.try_into().expect("8 bytes")))
    }

    /// Bytes left.
    pub fn remaining(&self) -> usize {
        self.b.len() - self.at
    }
}

/// A record a target persists between checkpoints.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JournalRecord {
    /// Upper blocks `[upper, upper + count)` now live at `lower` onwards.
    MapUpdate {
        /// First upper block.
        upper: u64,
        /// Blocks.
        count: u32,
        /// Where the first one lives.
        lower: u64,
    },
    /// Upper blocks `[upper, upper + count)` are no longer mapped (home again).
    MapRemove {
        /// First upper block.
        upper: u64,
        /// Blocks.
        count: u32,
    },
    /// A copy's dirty bit (OPT: the copy is newer than home).
    Dirty {
        /// The block.
        block: u64,
        /// Dirty or clean.
        dirty: bool,
    },
    /// A snapshot exception: `volume`'s chunk `chunk` lives at `location`.
    Exception {
        /// The volume (origin or snapshot) id.
        volume: u32,
        /// The chunk within the volume.
        chunk: u64,
        /// Where the chunk lives.
        location: u64,
    },
    /// A run of snapshot exceptions: `volume`'s chunks `[chunk, chunk +
    /// count)` live at `location` onwards (extent metadata: one record for
    /// a run whose locations continue each other).
    ExceptionRange {
        /// The volume (origin or snapshot) id.
        volume: u32,
        /// The first chunk within the volume.
        chunk: u64,
        /// Chunks in the run.
        count: u32,
        /// Where the first chunk lives.
        location: u64,
    },
    /// A segment's usage: `valid` units, last written at `written_at`.
    SegmentUsage {
        /// The segment.
        segment: u32,
        /// Valid units.
        valid: u32,
        /// When it was last written (the target's clock or sequence).
        written_at: u64,
    },
}

impl JournalRecord {
    const MAP_UPDATE: u8 = 1;
    const MAP_REMOVE: u8 = 2;
    const DIRTY: u8 = 3;
    const EXCEPTION: u8 = 4;
    const SEGMENT_USAGE: u8 = 5;
    const EXCEPTION_RANGE: u8 = 6;

    /// Appends the record (`kind, length, fields`) to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let mut f = Vec::with_capacity(24);
        let kind = match *self {
            JournalRecord::MapUpdate { upper, count, lower } => {
                f.extend(upper.to_le_bytes());
                f.extend(count.to_le_bytes());
                f.extend(lower.to_le_bytes());
                Self::MAP_UPDATE
            }
            JournalRecord::MapRemove { upper, count } => {
                f.extend(upper.to_le_bytes());
                f.extend(count.to_le_bytes());
                Self::MAP_REMOVE
            }
            JournalRecord::Dirty { block, dirty } => {
                f.extend(block.to_le_bytes());
                f.push(u8::from(dirty));
                Self::DIRTY
            }
            JournalRecord::Exception { volume, chunk, location } => {
                f.extend(volume.to_le_bytes());
                f.extend(chunk.to_le_bytes());
                f.extend(location.to_le_bytes());
                Self::EXCEPTION
            }
            JournalRecord::ExceptionRange { volume, chunk, count, location } => {
                f.extend(volume.to_le_bytes());
                f.extend(chunk.to_le_bytes());
                f.extend(count.to_le_bytes());
                f.extend(location.to_le_bytes());
                Self::EXCEPTION_RANGE
            }
            JournalRecord::SegmentUsage { segment, valid, written_at } => {
                f.extend(segment.to_le_bytes());
                f.extend(valid.to_le_bytes());
                f.extend(written_at.to_le_bytes());
                Self::SEGMENT_USAGE
            }
        };
        out.push(kind);
        out.push(f.len() as u8);
        out.extend(f);
    }

    /// Decodes the next record.
    pub fn decode(r: &mut Reader<'_>) -> Result<JournalRecord, MetaError> {
        let kind = r.u8()?;
        let len = usize::from(r.u8()?);
        let want = match kind {
            Self::MAP_UPDATE => 20,
            Self::MAP_REMOVE => 12,
            Self::DIRTY => 9,
            Self::EXCEPTION => 20,
            Self::SEGMENT_USAGE => 16,
            Self::EXCEPTION_RANGE => 24,
            other => return Err(MetaError::Malformed(format!("journal record of unknown kind {other}"))),
        };
        if len != want {
            return Err(MetaError::Malformed(format!(
                "journal record kind {kind} of {len} bytes, not {want}"
            )));
        }
        let rec = match kind {
            Self::MAP_UPDATE => {
                JournalRecord::MapUpdate { upper: r.u64()?, count: r.u32()?, lower: r.u64()? }
            }
            Self::MAP_REMOVE => JournalRecord::MapRemove { upper: r.u64()?, count: r.u32()? },
            Self::DIRTY => {
                let block = r.u64()?;
                let dirty = match r.u8()? {
                    0 => false,
                    1 => true,
                    x => return Err(MetaError::Malformed(format!("dirty bit {x}"))),
                };
                JournalRecord::Dirty { block, dirty }
            }
            Self::EXCEPTION => {
                JournalRecord::Exception { volume: r.u32()?, chunk: r.u64()?, location: r.u64()? }
            }
            Self::EXCEPTION_RANGE => JournalRecord::ExceptionRange {
                volume: r.u32()?,
                chunk: r.u64()?,
                count: r.u32()?,
                location: r.u64()?,
            },
            _ => JournalRecord::SegmentUsage { segment: r.u32()?, valid: r.u32()?, written_at: r.u64()? },
        };
        if let JournalRecord::MapUpdate { count: 0, .. }
        | JournalRecord::MapRemove { count: 0, .. }
        | JournalRecord::ExceptionRange { count: 0, .. } = rec
        {
            return Err(MetaError::Malformed("journal record of zero blocks".into()));
        }
        Ok(rec)
    }

    /// Decodes every record of a journal payload.
    pub fn decode_all(payload: &[u8]) -> Result<Vec<JournalRecord>, MetaError> {
        let mut r = Reader::new(payload);
        let mut out = Vec::new();
        while r.remaining() > 0 {
            out.push(JournalRecord::decode(&mut r)?);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CODEC: MetaBlockCodec = MetaBlockCodec { magic: *b"LDTEST01", version: 3, block_bytes: 512 };

    #[test]
    fn blocks_round_trip_and_every_flipped_bit_is_caught() {
        let b = CODEC.encode(7, b"hello").unwrap();
        assert_eq!(CODEC.decode(&b), Ok(Decoded { generation: 7, payload: b"hello".to_vec() }));
        for bit in (0..512 * 8).step_by(37) {
            let mut c = b.clone();
            c[bit / 8] ^= 1 << (bit % 8);
            assert!(CODEC.decode(&c).is_err(), "bit {bit} flipped and accepted");
        }
        assert_eq!(CODEC.decode(&[0u8; 512]), Err(MetaError::Blank));
        let other = MetaBlockCodec { version: 4, ..CODEC };
        assert_eq!(other.decode(&b), Err(MetaError::Version(3)));
        assert!(CODEC.encode(GENERATION_MAX + 1, b"").is_err());
        // Written up to GENERATION_MAX, read up to half of it: what goes on
        // from a decoded generation can always be written.
        let high = CODEC.encode(GENERATION_READ_MAX + 1, b"").expect("writable");
        assert!(matches!(CODEC.decode(&high), Err(MetaError::Malformed(m)) if m.contains("past")));
        assert_eq!(
            CODEC.decode(&CODEC.encode(GENERATION_READ_MAX, b"").unwrap()).unwrap().generation,
            GENERATION_READ_MAX
        );
        assert!(CODEC.encode(1, &[0u8; 481]).is_err());
    }

    #[test]
    fn pick_takes_the_newest_valid_copy_and_reports_the_other() {
        let (a, b) = (CODEC.encode(4, b"old").unwrap(), CODEC.encode(5, b"new").unwrap());
        let p = CODEC.pick(&a, &b).unwrap();
        assert_eq!((p.block.generation, p.copy, p.other_error), (5, 1, None));
        let mut torn = b.clone();
        torn[100] ^= 1;
        let p = CODEC.pick(&a, &torn).unwrap();
        assert_eq!(
            (p.block.payload.as_slice(), p.copy, p.other_error),
            (&b"old"[..], 0, Some(MetaError::BadCrc))
        );
        assert!(CODEC.pick(&torn, &[0u8; 512]).is_err());
    }

    #[test]
    fn journal_records_round_trip_and_malformed_ones_are_refused() {
        let recs = [
            JournalRecord::MapUpdate { upper: 10, count: 3, lower: 900 },
            JournalRecord::MapRemove { upper: 10, count: 1 },
            JournalRecord::Dirty { block: 77, dirty: true },
            JournalRecord::Exception { volume: 2, chunk: 5, location: 4096 },
            JournalRecord::SegmentUsage { segment: 9, valid: 30, written_at: 1234 },
            JournalRecord::ExceptionRange { volume: 3, chunk: 7, count: 40, location: 9000 },
        ];
        let mut payload = Vec::new();
        recs.iter().for_each(|r| r.encode(&mut payload));
        assert_eq!(JournalRecord::decode_all(&payload).unwrap(), recs.to_vec());
        let block = CODEC.encode(1, &payload).unwrap();
        assert_eq!(JournalRecord::decode_all(&CODEC.decode(&block).unwrap().payload).unwrap(), recs.to_vec());
        assert!(JournalRecord::decode_all(&payload[..payload.len() - 1]).is_err(), "truncated");
        assert!(JournalRecord::decode_all(&[9, 0]).is_err(), "unknown kind");
        assert!(JournalRecord::decode_all(&[3, 9, 0, 0, 0, 0, 0, 0, 0, 0, 2]).is_err(), "dirty bit 2");
        let mut zero = Vec::new();
        JournalRecord::MapRemove { upper: 1, count: 0 }.encode(&mut zero);
        assert!(JournalRecord::decode_all(&zero).is_err(), "zero blocks");
    }
}
