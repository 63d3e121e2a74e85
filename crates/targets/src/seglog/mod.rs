//! `seglog`: a circular log of fixed-size segments on a slice of the lower
//! device, with checksummed headers and a checkpoint, and the replay rule
//! that rebuilds it after a crash. Used by `dcd`; written so that a later
//! log-structured target can reuse it (it knows nothing about what the
//! slots mean beyond "this slot holds these data sectors").
//!
//! Glossary:
//! - *region*: the slice of the lower device the log occupies.
//! - *segment*: one header followed by `slot_count` slots of `slot_bytes`.
//! - *location* (`SegLoc`): the index of a segment within the region.
//! - *seq* (`Seq`): a segment's sequence number, contiguous and monotonic;
//!   the segment with seq `s` always lives at location `s mod segment_count`.
//! - *tail* (`replay_from_seq`): every segment older than it has been
//!   reclaimed; a persisted checkpoint records it. *head*: the next seq.
//! - *boot*: a counter bumped and persisted at every open; segments written
//!   since the last open carry it, so leftovers of a crashed run beyond the
//!   replay point can never be mistaken for new segments.
//! - *format id*: a nonce given at format, kept in the checkpoint and on
//!   every header; replay takes only headers carrying the checkpoint's, so
//!   segments an earlier use of the device left are never replayed and
//!   format need not overwrite them (see [`header`]).
//!
//! Region layout (offsets relative to the region start):
//! ```text
//! 0            4096         8192                    8192 + stride
//! +------------+------------+-----------------------+-----------------------+--
//! | checkpoint | checkpoint | seg 0: header | slots | seg 1: header | slots | ...
//! | copy 0     | copy 1     |                       |                       |
//! +------------+------------+-----------------------+-----------------------+--
//! ```
//! Checkpoint generation `g` lives in copy `g % 2`; the newest valid copy
//! wins, so a torn checkpoint write falls back to the previous one. Each
//! 4 KiB copy area also holds, 1 KiB in, one copy of the *flush mark*
//! ([`FlushMark`]): evidence of how far the log was durable when a client
//! was last told so, which is what lets recovery tell a torn tail from
//! damage to flushed segments.

pub mod header;
pub mod replay;
pub mod shortfall;
pub mod sketch;

pub use header::{
    copy_version, ChainCheckpoint, Checkpoint, Entry, FlushMark, HeaderError, MapDigest, SegmentHeader,
    CHAIN_FORMAT_VERSION, CHECKPOINT_VERSION, HEADER_VERSION, LEGACY_FORMAT_ID, MAP_DIGEST_PRIME, SEQ_MAX,
};
pub use replay::{segment_summaries, ChainWalk, ReplayStep, ReplayWalk, StopReason};
pub use sketch::MapSketch;

use layoutd_core::SECTOR_BYTES;

/// Bytes reserved for one checkpoint copy.
pub const CHECKPOINT_COPY_BYTES: u64 = 4096;
/// Bytes reserved at the start of the region for both checkpoint copies.
pub const CHECKPOINT_AREA_BYTES: u64 = 2 * CHECKPOINT_COPY_BYTES;
/// Where a flush mark lives within a checkpoint copy.
pub const MARK_WITHIN_COPY_BYTES: u64 = 1024;
/// Fixed part of a segment header, before the entries.
pub const HEADER_FIXED_BYTES: u32 = 64;
/// Bytes per header entry.
pub const ENTRY_BYTES: u32 = 16;
/// Largest slot: a slot's sectors are tracked in one `u64` mask.
pub const SLOT_BYTES_MAX: u32 = 64 * SECTOR_BYTES as u32;
/// Most slots per segment (slot indices are `u16`).
pub const SLOT_COUNT_MAX: u32 = 4096;

const _: () = assert!(CHECKPOINT_COPY_BYTES.is_multiple_of(SECTOR_BYTES));
const _: () = assert!(MARK_WITHIN_COPY_BYTES + 512 <= CHECKPOINT_COPY_BYTES && MARK_WITHIN_COPY_BYTES >= 512);
const _: () = assert!(HEADER_FIXED_BYTES.is_multiple_of(8));
const _: () = assert!(SLOT_BYTES_MAX / SECTOR_BYTES as u32 <= 64);
const _: () = assert!(SLOT_COUNT_MAX <= u16::MAX as u32);

/// A segment's sequence number.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Seq(pub u64);

/// A segment's location (index) within the log region.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SegLoc(pub u32);

/// The shape of a log region: where it is and how it is cut up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// Where the region starts on the lower device.
    pub region_offset_bytes: u64,
    /// How many segments fit.
    pub segment_count: u32,
    /// Bytes of one slot.
    pub slot_bytes: u32,
    /// Slots per segment.
    pub slot_count: u32,
    /// Entries a header can hold (slots plus invalidation records).
    pub entry_count_max: u32,
    /// Bytes of a header (fixed part plus entries, sector aligned).
    pub header_bytes: u32,
}

impl Geometry {
    /// Cuts `[region_offset_bytes, +region_bytes)` into segments of
    /// `slot_count` slots of `slot_bytes`. Errors say which value is wrong.
    pub fn new(
        region_offset_bytes: u64,
        region_bytes: u64,
        slot_bytes: u32,
        slot_count: u32,
    ) -> Result<Geometry, String> {
        if slot_bytes == 0 || u64::from(slot_bytes) % SECTOR_BYTES != 0 || slot_bytes > SLOT_BYTES_MAX {
            return Err(format!(
                "slot size {slot_bytes} must be a multiple of 512 between 512 and {SLOT_BYTES_MAX}"
            ));
        }
        if slot_count == 0 || slot_count > SLOT_COUNT_MAX {
            return Err(format!(
                "a segment must hold between 1 and {SLOT_COUNT_MAX} slots, not {slot_count}"
            ));
        }
        if !region_offset_bytes.is_multiple_of(SECTOR_BYTES) {
            return Err(format!("log offset {region_offset_bytes} must be a multiple of 512"));
        }
        let entry_count_max = (2 * slot_count).max(slot_count + 8);
        let fixed = u64::from(HEADER_FIXED_BYTES) + u64::from(ENTRY_BYTES) * u64::from(entry_count_max);
        let header_bytes = fixed.div_ceil(SECTOR_BYTES) * SECTOR_BYTES;
        let stride = header_bytes + u64::from(slot_bytes) * u64::from(slot_count);
        let usable = region_bytes.saturating_sub(CHECKPOINT_AREA_BYTES);
        let segment_count = usable / stride;
        if segment_count < 2 {
            return Err(format!(
                "log region of {region_bytes} bytes holds {segment_count} segment(s) of {stride} bytes (plus {CHECKPOINT_AREA_BYTES} of checkpoint); it needs at least 2"
            ));
        }
        let segment_count =
            u32::try_from(segment_count).map_err(|_| "log region holds too many segments".to_string())?;
        let g = Geometry {
            region_offset_bytes,
            segment_count,
            slot_bytes,
            slot_count,
            entry_count_max,
            header_bytes: header_bytes as u32,
        };
        assert!(g.region_end_bytes() <= region_offset_bytes + region_bytes);
        assert!(g.header_bytes >= HEADER_FIXED_BYTES);
        Ok(g)
    }

    /// Bytes from one segment's start to the next.
    pub fn stride_bytes(&self) -> u64 {
        u64::from(self.header_bytes) + self.payload_bytes()
    }

    /// Bytes of all slots of one segment.
    pub fn payload_bytes(&self) -> u64 {
        u64::from(self.slot_bytes) * u64::from(self.slot_count)
    }

    /// Sectors per slot.
    pub fn slot_sectors(&self) -> u32 {
        self.slot_bytes / SECTOR_BYTES as u32
    }

    /// One past the last byte the log uses.
    pub fn region_end_bytes(&self) -> u64 {
        self.region_offset_bytes + CHECKPOINT_AREA_BYTES + u64::from(self.segment_count) * self.stride_bytes()
    }

    /// Where a segment (its header) starts on the lower device.
    pub fn segment_offset_bytes(&self, loc: SegLoc) -> u64 {
        assert!(loc.0 < self.segment_count, "location {} outside the log", loc.0);
        self.region_offset_bytes + CHECKPOINT_AREA_BYTES + u64::from(loc.0) * self.stride_bytes()
    }

    /// Where slot `slot` of segment `loc` starts on the lower device.
    pub fn slot_offset_bytes(&self, loc: SegLoc, slot: u32) -> u64 {
        assert!(slot < self.slot_count);
        self.segment_offset_bytes(loc)
            + u64::from(self.header_bytes)
            + u64::from(slot) * u64::from(self.slot_bytes)
    }

    /// Where checkpoint generation `generation` is stored.
    pub fn checkpoint_offset_bytes(&self, generation: u64) -> u64 {
        self.region_offset_bytes + (generation % 2) * CHECKPOINT_COPY_BYTES
    }

    /// Where flush mark generation `generation` is stored: 1 KiB into the
    /// checkpoint copy of the same parity (the checkpoint itself takes 512
    /// bytes), so one damaged 4 KiB block costs one copy of each.
    pub fn mark_offset_bytes(&self, generation: u64) -> u64 {
        self.checkpoint_offset_bytes(generation) + MARK_WITHIN_COPY_BYTES
    }

    /// The location of the segment with sequence number `seq`.
    pub fn location(&self, seq: Seq) -> SegLoc {
        let loc = (seq.0 % u64::from(self.segment_count)) as u32;
        assert!(loc < self.segment_count);
        SegLoc(loc)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn geometry_lays_segments_end_to_end_and_refuses_nonsense() {
        let g = Geometry::new(4096, 1 << 20, 4096, 32).expect("valid");
        assert_eq!(g.header_bytes, 1088usize.div_ceil(512) as u32 * 512);
        assert_eq!(g.segment_offset_bytes(SegLoc(0)), 4096 + CHECKPOINT_AREA_BYTES);
        assert_eq!(g.segment_offset_bytes(SegLoc(1)), 4096 + CHECKPOINT_AREA_BYTES + g.stride_bytes());
        assert_eq!(g.location(Seq(u64::from(g.segment_count) + 1)), SegLoc(1));
        assert!(g.region_end_bytes() <= 4096 + (1 << 20));
        assert!(Geometry::new(0, 1 << 20, 1000, 4).unwrap_err().contains("multiple of 512"));
        assert!(Geometry::new(0, 1 << 20, 512, 0).unwrap_err().contains("slots"));
        assert!(Geometry::new(0, 20000, 4096, 32).unwrap_err().contains("at least 2"));
    }
}
