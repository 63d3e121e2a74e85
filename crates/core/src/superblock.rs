//! The layoutd superblock: the first thing on a formatted device.
//!
//! Each copy is a [`crate::metablock`] block of 16 KiB (magic `LAYOUTD\0`,
//! format version, generation, crc32c over the whole block) whose payload is:
//! ```text
//! device:  | copy A (16 KiB) | copy B (16 KiB) | reserved .. 1 MiB | stack data ...
//! payload: 0  flags u32 (bit 0: clean; bits 8..16: member index)   4 reserved u32 (0)
//!          8  device_size_bytes u64     16 data_start_bytes u64
//!          24 uuid [16]                 40 config_length_bytes u32
//!          44 config (TOML, UTF-8) ...
//! ```
//!
//! Two copies are written alternately (generation even → A, odd → B), so a
//! write torn by a crash leaves the other copy intact; the valid copy with
//! the highest generation wins. A copy whose crc does not match is never
//! trusted. Format version 1 (before the shared codec) is refused with the
//! way out named.

use crate::config::{ConfigError, StackConfig};
use crate::metablock::{MetaBlockCodec, MetaError, Reader, HEADER_BYTES};

/// Magic at offset 0 of every copy.
pub const MAGIC: [u8; 8] = *b"LAYOUTD\0";
/// On-disk format version written by this build.
pub const FORMAT_VERSION: u32 = 2;
/// Size of one superblock copy.
pub const SUPERBLOCK_BYTES: usize = 16 * 1024;
/// Where the stack's address space starts on the device.
pub const DATA_START_BYTES: u64 = 1 << 20;
/// The smallest device `format` accepts: the header plus 1 MiB of data.
pub const DEVICE_BYTES_MIN: u64 = DATA_START_BYTES + (1 << 20);

/// Largest generation accepted from disk: every open bumps it once, so
/// 2^62 is never reached honestly, and refusing more keeps `+ 1` safe.
pub const GENERATION_MAX: u64 = 1 << 62;
/// Largest device (or member) size accepted from disk: 2^60 bytes (1 EiB).
pub const DEVICE_BYTES_MAX: u64 = 1 << 60;
/// Most member devices of one volume (the member index is 8 bits).
pub const MEMBERS_MAX: usize = 256;

const FLAG_CLEAN: u32 = 1;
/// Bits 8..16 of the flags hold the member index (zero on one-device volumes,
/// so superblocks written before multi-device volumes decode unchanged).
const MEMBER_SHIFT: u32 = 8;
/// Payload bytes before the config text.
const CONFIG_OFFSET: usize = 44;
/// The codec of one copy.
const CODEC: MetaBlockCodec =
    MetaBlockCodec { magic: MAGIC, version: FORMAT_VERSION, block_bytes: SUPERBLOCK_BYTES };
/// Longest config text that fits.
pub const CONFIG_BYTES_MAX: usize = SUPERBLOCK_BYTES - HEADER_BYTES - CONFIG_OFFSET;
const _: () = assert!(2 * SUPERBLOCK_BYTES as u64 <= DATA_START_BYTES);
const _: () = assert!(DATA_START_BYTES.is_multiple_of(4096));

/// The decoded superblock.
#[derive(Clone, Debug, PartialEq)]
pub struct Superblock {
    /// Bumped on every rewrite; picks the newer copy.
    pub generation: u64,
    /// Whether the last `serve` shut down cleanly.
    pub clean: bool,
    /// Size of the device when formatted.
    pub device_size_bytes: u64,
    /// Where the stack's address space begins.
    pub data_start_bytes: u64,
    /// Identifies this volume.
    pub uuid: [u8; 16],
    /// The stack description.
    pub config: StackConfig,
    /// Which member device of the volume this superblock is on (0 for a
    /// one-device volume; the members are listed in `config.device`).
    pub member_index: u8,
}

/// Why a device's superblock cannot be used.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SuperblockError {
    /// All zeroes where a superblock should be.
    #[error("not formatted (no layoutd superblock; run `layoutd format --device ...` first)")]
    Unformatted,
    /// Something else is on the device.
    #[error("not a layoutd device (found foreign data at offset 0, magic {0:02x?}); refusing to touch it")]
    Foreign([u8; 8]),
    /// Layoutd magic, but neither copy checks out.
    #[error("superblock corrupt: {0}")]
    Corrupt(String),
    /// Written by a newer layoutd.
    #[error("superblock format version {0} is not supported by this build (reads version {FORMAT_VERSION}); upgrade layoutd")]
    Version(u32),
    /// Written by an older layoutd, in a format this build no longer reads.
    #[error("superblock format version {0} was written by an older layoutd (this build reads version {FORMAT_VERSION}): copy the data off with that build, then `layoutd format --force` this device")]
    Older(u32),
    /// The stored stack description does not parse.
    #[error("superblock holds a bad stack config: {0}")]
    Config(#[from] ConfigError),
}

impl Superblock {
    /// Encodes into one copy, `SUPERBLOCK_BYTES` long.
    pub fn encode(&self) -> Result<Vec<u8>, ConfigError> {
        let text = self.config.to_toml();
        if text.len() > CONFIG_BYTES_MAX {
            return Err(ConfigError(format!(
                "stack config is {} bytes; the superblock holds at most {CONFIG_BYTES_MAX}",
                text.len()
            )));
        }
        self.check_ranges().map_err(ConfigError)?;
        let mut p = Vec::with_capacity(CONFIG_OFFSET + text.len());
        let flags =
            (if self.clean { FLAG_CLEAN } else { 0 }) | (u32::from(self.member_index) << MEMBER_SHIFT);
        p.extend(flags.to_le_bytes());
        p.extend(0u32.to_le_bytes());
        p.extend(self.device_size_bytes.to_le_bytes());
        p.extend(self.data_start_bytes.to_le_bytes());
        p.extend(self.uuid);
        p.extend((text.len() as u32).to_le_bytes());
        assert_eq!(p.len(), CONFIG_OFFSET);
        p.extend(text.as_bytes());
        let b = CODEC.encode(self.generation, &p).map_err(|e| ConfigError(format!("superblock: {e}")))?;
        assert_eq!(Self::decode_copy(&b).as_ref().map(|s| s.generation), Ok(self.generation));
        Ok(b)
    }

    /// Byte offset of the copy that generation `generation` is written to.
    pub fn copy_offset_bytes(generation: u64) -> u64 {
        (generation % 2) * SUPERBLOCK_BYTES as u64
    }

    /// Decodes the two copies read from offset 0 (`2 * SUPERBLOCK_BYTES`
    /// bytes) and returns the newest valid one.
    pub fn decode(both: &[u8]) -> Result<Superblock, SuperblockError> {
        assert_eq!(both.len(), 2 * SUPERBLOCK_BYTES, "decode takes both copies");
        let (a, b) = both.split_at(SUPERBLOCK_BYTES);
        match (Self::decode_copy(a), Self::decode_copy(b)) {
            (Ok(x), Ok(y)) => Ok(if y.generation > x.generation { y } else { x }),
            (Ok(x), Err(_)) | (Err(_), Ok(x)) => Ok(x),
            (Err(ea), Err(eb)) => Err(Self::worse(ea, eb)),
        }
    }

    /// Of two failures, the one that tells the user the most.
    fn worse(a: SuperblockError, b: SuperblockError) -> SuperblockError {
        use SuperblockError::*;
        match (a, b) {
            (Unformatted, Unformatted) => Unformatted,
            (Foreign(m), _) => Foreign(m),
            (Version(v), _) | (_, Version(v)) => Version(v),
            (Older(v), _) | (_, Older(v)) => Older(v),
            (Config(c), _) | (_, Config(c)) => Config(c),
            (Corrupt(x), Corrupt(y)) => Corrupt(format!("copy A: {x}; copy B: {y}")),
            (Corrupt(x), _) | (_, Corrupt(x)) => Corrupt(x),
            (Unformatted, other) => other,
        }
    }

    fn decode_copy(b: &[u8]) -> Result<Superblock, SuperblockError> {
        assert_eq!(b.len(), SUPERBLOCK_BYTES);
        let block = CODEC.decode(b).map_err(|e| match e {
            MetaError::Blank => SuperblockError::Unformatted,
            MetaError::Foreign(m) => SuperblockError::Foreign(m),
            MetaError::Version(v) if v < FORMAT_VERSION => SuperblockError::Older(v),
            MetaError::Version(v) => SuperblockError::Version(v),
            other => SuperblockError::Corrupt(other.to_string()),
        })?;
        let corrupt = |e: MetaError| SuperblockError::Corrupt(e.to_string());
        let mut r = Reader::new(&block.payload);
        let flags = r.u32().map_err(corrupt)?;
        if r.u32().map_err(corrupt)? != 0 {
            return Err(SuperblockError::Corrupt("reserved field is not zero".into()));
        }
        let device_size_bytes = r.u64().map_err(corrupt)?;
        let data_start_bytes = r.u64().map_err(corrupt)?;
        let uuid: [u8; 16] = r.bytes(16).map_err(corrupt)?.try_into().expect("16 bytes");
        let config_len = r.u32().map_err(corrupt)? as usize;
        if config_len != r.remaining() {
            return Err(SuperblockError::Corrupt(format!(
                "config length {config_len}, but {} bytes follow",
                r.remaining()
            )));
        }
        let text = std::str::from_utf8(r.bytes(config_len).map_err(corrupt)?)
            .map_err(|_| SuperblockError::Corrupt("config is not UTF-8".into()))?;
        let sb = Superblock {
            generation: block.generation,
            clean: flags & FLAG_CLEAN != 0,
            member_index: (flags >> MEMBER_SHIFT) as u8,
            device_size_bytes,
            data_start_bytes,
            uuid,
            config: StackConfig::parse(text, "superblock")?,
        };
        sb.check_ranges().map_err(SuperblockError::Corrupt)?;
        Ok(sb)
    }

    /// Range-checks every number a crafted copy (valid crc) could set, so
    /// that nothing downstream can wrap, divide by zero or index past an
    /// end: the decoded superblock is refused instead, naming the field.
    fn check_ranges(&self) -> Result<(), String> {
        if self.generation > GENERATION_MAX {
            return Err(format!("generation {} is past {GENERATION_MAX}", self.generation));
        }
        if self.data_start_bytes != DATA_START_BYTES {
            return Err(format!(
                "data_start_bytes is {}; this format always starts data at {DATA_START_BYTES}",
                self.data_start_bytes
            ));
        }
        let size_ok = |n: u64| (DEVICE_BYTES_MIN..=DEVICE_BYTES_MAX).contains(&n);
        if !size_ok(self.device_size_bytes) {
            return Err(format!(
                "device_size_bytes {} is outside {DEVICE_BYTES_MIN}..={DEVICE_BYTES_MAX}",
                self.device_size_bytes
            ));
        }
        let members = &self.config.device;
        if members.len() > MEMBERS_MAX {
            return Err(format!("{} member devices; at most {MEMBERS_MAX}", members.len()));
        }
        if usize::from(self.member_index) >= members.len().max(1) {
            return Err(format!(
                "member index {} of a volume of {} device(s)",
                self.member_index,
                members.len().max(1)
            ));
        }
        for (i, m) in members.iter().enumerate() {
            if !size_ok(m.size_bytes) {
                return Err(format!(
                    "member {i} size {} is outside {DEVICE_BYTES_MIN}..={DEVICE_BYTES_MAX}",
                    m.size_bytes
                ));
            }
        }
        if let Some(m) = members.get(usize::from(self.member_index)) {
            if m.size_bytes != self.device_size_bytes {
                return Err(format!(
                    "member {} is listed as {} bytes but its own superblock says {}",
                    self.member_index, m.size_bytes, self.device_size_bytes
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(generation: u64) -> Superblock {
        Superblock {
            generation,
            clean: generation.is_multiple_of(3),
            device_size_bytes: 64 << 20,
            data_start_bytes: DATA_START_BYTES,
            uuid: [7; 16],
            config: StackConfig::default_linear(),
            member_index: 0,
        }
    }

    fn both(a: Vec<u8>, b: Vec<u8>) -> Vec<u8> {
        [a, b].concat()
    }

    #[test]
    fn newest_valid_copy_wins_and_torn_copy_is_ignored() {
        let (s4, s5) = (sample(4), sample(5));
        let img = both(s4.encode().unwrap(), s5.encode().unwrap());
        assert_eq!(Superblock::decode(&img).unwrap(), s5);
        let mut torn = img.clone();
        torn[SUPERBLOCK_BYTES + 100] ^= 0xff;
        assert_eq!(Superblock::decode(&torn).unwrap(), s4);
    }

    /// Recomputes a copy's crc32c (at 28, over the block with it zeroed).
    fn fix_crc(b: &mut [u8]) {
        b[28..32].fill(0);
        let crc = crc32c::crc32c(b);
        b[28..32].copy_from_slice(&crc.to_le_bytes());
    }

    /// A copy with a valid crc but a field no honest writer produces
    /// (`at` counts from the block's start: the payload starts at 32).
    fn crafted(at: usize, value: u64) -> Vec<u8> {
        let mut b = sample(2).encode().unwrap();
        b[at..at + 8].copy_from_slice(&value.to_le_bytes());
        fix_crc(&mut b);
        b
    }

    #[test]
    fn crafted_fields_with_a_valid_crc_are_refused_naming_the_field() {
        for (at, value, field) in [
            (16, u64::MAX - 1, "generation"),
            (40, 0, "device_size_bytes"),
            (40, 1 << 62, "device_size_bytes"),
            (48, 0, "data_start_bytes"),
            (48, 1 << 40, "data_start_bytes"),
        ] {
            let img = both(crafted(at, value), vec![0; SUPERBLOCK_BYTES]);
            match Superblock::decode(&img) {
                Err(SuperblockError::Corrupt(msg)) => assert!(msg.contains(field), "{field}: {msg}"),
                other => panic!("{field} = {value}: expected a refusal, got {other:?}"),
            }
        }
        // Member sizes of 0 and 1 PiB... past the limit, and a member index
        // past the member list.
        for (size, index) in [(0u64, 0u8), (1 << 61, 0), (64 << 20, 3)] {
            let mut sb = sample(2);
            sb.member_index = 0;
            sb.config.device = vec![crate::config::MemberConfig { size_bytes: 64 << 20 }; 2];
            sb.config.device[0].size_bytes = size;
            sb.member_index = index;
            assert!(sb.encode().is_err(), "encode refuses what decode would");
        }
        // The valid neighbour copy still wins over a crafted one.
        let img = both(crafted(48, 0), sample(3).encode().unwrap());
        assert_eq!(Superblock::decode(&img).unwrap(), sample(3));
    }

    #[test]
    fn unformatted_foreign_corrupt_and_version_are_told_apart() {
        let zero = vec![0u8; 2 * SUPERBLOCK_BYTES];
        assert_eq!(Superblock::decode(&zero), Err(SuperblockError::Unformatted));
        let mut foreign = zero.clone();
        foreign[0..4].copy_from_slice(b"\x7fELF");
        assert!(matches!(Superblock::decode(&foreign), Err(SuperblockError::Foreign(_))));
        let mut corrupt = both(sample(2).encode().unwrap(), vec![0; SUPERBLOCK_BYTES]);
        corrupt[70] ^= 1;
        assert!(matches!(Superblock::decode(&corrupt), Err(SuperblockError::Corrupt(_))));
        let mut newer = sample(2).encode().unwrap();
        newer[8..12].copy_from_slice(&9u32.to_le_bytes());
        fix_crc(&mut newer);
        assert_eq!(
            Superblock::decode(&both(newer, vec![0; SUPERBLOCK_BYTES])),
            Err(SuperblockError::Version(9))
        );
        let mut older = sample(2).encode().unwrap();
        older[8..12].copy_from_slice(&1u32.to_le_bytes());
        fix_crc(&mut older);
        let e = Superblock::decode(&both(older, vec![0; SUPERBLOCK_BYTES])).unwrap_err();
        assert_eq!(e, SuperblockError::Older(1));
        assert!(e.to_string().contains("format --force"), "{e}");
    }
}
