//! The layoutd superblock: the first thing on a formatted device.
//!
//! ```text
//! device:  | copy A (16 KiB) | copy B (16 KiB) | reserved .. 1 MiB | stack data ...
//! copy:    0  magic "LAYOUTD\0"         8  format_version u32
//!          12 flags u32 (bit 0: clean)  16 generation u64
//!          24 device_size_bytes u64     32 data_start_bytes u64
//!          40 uuid [16]                 56 config_length_bytes u32
//!          60 config (TOML, UTF-8) ...  16380 crc32c of bytes 0..16380
//! ```
//!
//! Two copies are written alternately (generation even → A, odd → B), so a
//! write torn by a crash leaves the other copy intact; the valid copy with
//! the highest generation wins. A copy whose crc does not match is never
//! trusted.

use crate::config::{ConfigError, StackConfig};

/// Magic at offset 0 of every copy.
pub const MAGIC: [u8; 8] = *b"LAYOUTD\0";
/// On-disk format version written by this build.
pub const FORMAT_VERSION: u32 = 1;
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
const CONFIG_OFFSET: usize = 60;
const CRC_OFFSET: usize = SUPERBLOCK_BYTES - 4;
/// Longest config text that fits.
pub const CONFIG_BYTES_MAX: usize = CRC_OFFSET - CONFIG_OFFSET;
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
        let mut b = vec![0u8; SUPERBLOCK_BYTES];
        b[0..8].copy_from_slice(&MAGIC);
        b[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        let flags =
            (if self.clean { FLAG_CLEAN } else { 0 }) | (u32::from(self.member_index) << MEMBER_SHIFT);
        b[12..16].copy_from_slice(&flags.to_le_bytes());
        b[16..24].copy_from_slice(&self.generation.to_le_bytes());
        b[24..32].copy_from_slice(&self.device_size_bytes.to_le_bytes());
        b[32..40].copy_from_slice(&self.data_start_bytes.to_le_bytes());
        b[40..56].copy_from_slice(&self.uuid);
        b[56..60].copy_from_slice(&(text.len() as u32).to_le_bytes());
        b[CONFIG_OFFSET..CONFIG_OFFSET + text.len()].copy_from_slice(text.as_bytes());
        let crc = crc32c::crc32c(&b[..CRC_OFFSET]);
        b[CRC_OFFSET..].copy_from_slice(&crc.to_le_bytes());
        self.check_ranges().map_err(ConfigError)?;
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
            (Config(c), _) | (_, Config(c)) => Config(c),
            (Corrupt(x), Corrupt(y)) => Corrupt(format!("copy A: {x}; copy B: {y}")),
            (Corrupt(x), _) | (_, Corrupt(x)) => Corrupt(x),
            (Unformatted, other) => other,
        }
    }

    fn decode_copy(b: &[u8]) -> Result<Superblock, SuperblockError> {
        assert_eq!(b.len(), SUPERBLOCK_BYTES);
        let magic: [u8; 8] = b[0..8].try_into().expect("8 bytes");
        if magic != MAGIC {
            return Err(if b.iter().all(|&x| x == 0) {
                SuperblockError::Unformatted
            } else {
                SuperblockError::Foreign(magic)
            });
        }
        let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().expect("4 bytes"));
        let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes"));
        let crc_stored = u32_at(CRC_OFFSET);
        let crc_actual = crc32c::crc32c(&b[..CRC_OFFSET]);
        if crc_stored != crc_actual {
            return Err(SuperblockError::Corrupt(format!(
                "crc32c mismatch (stored {crc_stored:08x}, computed {crc_actual:08x})"
            )));
        }
        let version = u32_at(8);
        if version != FORMAT_VERSION {
            return Err(SuperblockError::Version(version));
        }
        let config_len = u32_at(56) as usize;
        if config_len > CONFIG_BYTES_MAX {
            return Err(SuperblockError::Corrupt(format!(
                "config length {config_len} exceeds {CONFIG_BYTES_MAX}"
            )));
        }
        let text = std::str::from_utf8(&b[CONFIG_OFFSET..CONFIG_OFFSET + config_len])
            .map_err(|_| SuperblockError::Corrupt("config is not UTF-8".into()))?;
        let sb = Superblock {
            generation: u64_at(16),
            clean: u32_at(12) & FLAG_CLEAN != 0,
            member_index: (u32_at(12) >> MEMBER_SHIFT) as u8,
            device_size_bytes: u64_at(24),
            data_start_bytes: u64_at(32),
            uuid: b[40..56].try_into().expect("16 bytes"),
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

    /// A copy with a valid crc but a field no honest writer produces.
    fn crafted(at: usize, value: u64) -> Vec<u8> {
        let mut b = sample(2).encode().unwrap();
        b[at..at + 8].copy_from_slice(&value.to_le_bytes());
        let crc = crc32c::crc32c(&b[..CRC_OFFSET]);
        b[CRC_OFFSET..].copy_from_slice(&crc.to_le_bytes());
        b
    }

    #[test]
    fn crafted_fields_with_a_valid_crc_are_refused_naming_the_field() {
        for (at, value, field) in [
            (16, u64::MAX - 1, "generation"),
            (24, 0, "device_size_bytes"),
            (24, 1 << 62, "device_size_bytes"),
            (32, 0, "data_start_bytes"),
            (32, 1 << 40, "data_start_bytes"),
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
        let img = both(crafted(32, 0), sample(3).encode().unwrap());
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
        let crc = crc32c::crc32c(&newer[..CRC_OFFSET]);
        newer[CRC_OFFSET..].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(
            Superblock::decode(&both(newer, vec![0; SUPERBLOCK_BYTES])),
            Err(SuperblockError::Version(9))
        );
    }
}
