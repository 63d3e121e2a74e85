//! The pool's config keys and the on-disk layout they give.

use super::chunks::VOLUME_CHUNKS_MAX;
use super::place::{ChunkPlacement, Contiguous, NearestFree, Sliced};
use layoutd_core::config::{ArgReader, ConfigError};
use layoutd_core::metablock::HEADER_BYTES;

/// Bytes of one metadata block (checkpoint or journal).
pub const META_BLOCK_BYTES: u64 = 4096;
/// Bytes of one checkpoint extent record (`kind, length` and 24 bytes).
pub const EXTENT_RECORD_BYTES: u64 = 26;
/// Extent records in one checkpoint body block.
pub const EXTENTS_PER_BLOCK: u64 = (META_BLOCK_BYTES - HEADER_BYTES as u64) / EXTENT_RECORD_BYTES;
/// The most volumes (origin included) a pool holds: the volume table fits
/// the checkpoint's header block.
pub const VOLUMES_MAX_LIMIT: u64 = 40;
/// The most data chunks a pool holds (2 bytes of RAM each for the share
/// counts: 256 MiB at the limit; 8 TiB of 64 KiB chunks).
pub const DATA_CHUNKS_MAX: u64 = 1 << 27;
/// Slices of the built-in default placement (`sliced`).
pub const DEFAULT_SLICES: u64 = 30;
/// The longest volume name.
pub const NAME_BYTES_MAX: usize = 64;

/// Which placement policy.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum PlacementKind {
    /// Classic LVM2: copies after the origin, in order.
    Contiguous,
    /// The thesis: origin in slices with gaps.
    Sliced,
    /// Chunk-level nearest free.
    Nearest,
}

/// How the rest of a fresh chunk is zeroed on its first (partial) write
/// (`zero_new_chunks_with`).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum ZeroWith {
    /// Write-zeroes requests beside the data write (`"write-zeroes"`): a
    /// file or thin device may punch or zero-range them without writing.
    WriteZeroes,
    /// Zero bytes in the chunk's data write (`"write"`): one lower request
    /// for the chunk, joined with its neighbours'; the bytes are written.
    Write,
    /// Not at all (`"partial"`, the default since session 26): the chunk
    /// stays partial with no base, only its written sectors on disk, the
    /// rest read as zeroes from the metadata; zeroed as `WriteZeroes` when
    /// the checkpoint has no room for another partial record.
    Partial,
}

impl ZeroWith {
    const NAMES: [(&'static str, ZeroWith); 3] =
        [("write-zeroes", ZeroWith::WriteZeroes), ("write", ZeroWith::Write), ("partial", ZeroWith::Partial)];

    /// The config name.
    pub fn name(self) -> &'static str {
        Self::NAMES.iter().find(|(_, z)| *z == self).map(|(n, _)| *n).expect("every value is named")
    }
}

/// Parsed keys and the layout on the lower device.
#[derive(Clone, Debug)]
pub struct PoolConfig {
    /// Bytes of a chunk (the unit of allocation and copy).
    pub chunk_bytes: u64,
    /// Chunks of every volume (its virtual size).
    pub volume_chunks: u64,
    /// Volume slots (origin included).
    pub volumes_max: u64,
    /// The placement policy.
    pub placement: PlacementKind,
    /// Whether the config names the placement (`false`: the built-in
    /// default chose it).
    pub placement_named: bool,
    /// Slices (the `sliced` policy).
    pub slices: u64,
    /// Percent of the data area kept out of the origin's layout for copies.
    pub copy_share_percent: u64,
    /// Whether the idle-time defragmenter runs.
    pub defrag: bool,
    /// Whether the defragmenter puts a partial redirected origin chunk
    /// home composed (its written sectors and its base's rest), the base
    /// moved aside first, instead of leaving it to be filled where it is
    /// (`defrag_partial_home`).
    pub defrag_partial_home: bool,
    /// Whether the rest of a freshly allocated chunk is zeroed on its first
    /// (partial) write (dm-thin's default; `false` is its
    /// `skip_block_zeroing`: the rest reads what the device held).
    pub zero_new_chunks: bool,
    /// How that zeroing is done (`zero_new_chunks_with`).
    pub zero_with: ZeroWith,
    /// Whether the origin's first write to a shared chunk goes to a new
    /// chunk near it, leaving the old one to the snapshots
    /// (`origin_shared_write = "redirect"`, the default, as dm-thin: no
    /// commit to wait for, no read for a whole chunk) rather than copying
    /// the old data out and writing in place once that is durable
    /// (`"copy-out"`, classic LVM2 and the thesis: the origin keeps its
    /// layout).
    pub redirect_origin: bool,
    /// Journal blocks in the ring.
    pub journal_blocks: u64,
    /// Checkpoint body blocks per copy.
    pub body_blocks: u64,
    /// Data chunks.
    pub data_chunks: u64,
    /// Where the data area starts on the lower device.
    pub data_start_bytes: u64,
}

impl PoolConfig {
    /// Parses the keys against a lower device of `lower_bytes`.
    pub fn parse(mut args: ArgReader<'_>, lower_bytes: u64) -> Result<PoolConfig, ConfigError> {
        let chunk_bytes = args.size_opt("chunk_size")?.unwrap_or(64 << 10);
        if !chunk_bytes.is_power_of_two() || !(8 << 10..=1 << 20).contains(&chunk_bytes) {
            return Err(args
                .error(format!("key `chunk_size`: {chunk_bytes} bytes; a power of two from 8KiB to 1MiB")));
        }
        // A config that names no placement gets the built-in default for a
        // new pool, `sliced` 30 (or `nearest` where the volumes leave the
        // slices no gap), decided below once the layout is known; a pool's
        // header records its placement (format version 3), so an existing
        // pool keeps its own (docs/pool.md, "Default placement").
        let named = match args.str_opt("placement")? {
            None => None,
            Some("contiguous") => Some(PlacementKind::Contiguous),
            Some("sliced") => Some(PlacementKind::Sliced),
            Some("nearest") => Some(PlacementKind::Nearest),
            Some(other) => {
                return Err(args.error(format!(
                    "key `placement`: unknown policy `{other}` (contiguous, sliced, nearest)"
                )))
            }
        };
        let slices_key = args.u64_opt("slices")?;
        if slices_key.is_some() && named != Some(PlacementKind::Sliced) {
            return Err(args.error("key `slices`: only the `sliced` placement takes it"));
        }
        let slices = slices_key.unwrap_or(DEFAULT_SLICES);
        let volumes_max = args.u64_opt("volumes_max")?.unwrap_or(16);
        if !(1..=VOLUMES_MAX_LIMIT).contains(&volumes_max) {
            return Err(
                args.error(format!("key `volumes_max`: {volumes_max}; from 1 to {VOLUMES_MAX_LIMIT}"))
            );
        }
        let journal_blocks = args.u64_opt("journal_blocks")?.unwrap_or(64);
        if !(4..=8192).contains(&journal_blocks) {
            return Err(args.error(format!("key `journal_blocks`: {journal_blocks}; from 4 to 8192")));
        }
        let extents_per_chunk = args.u64_opt("metadata_extents_per_chunk")?.unwrap_or(2);
        if !(1..=64).contains(&extents_per_chunk) {
            return Err(
                args.error(format!("key `metadata_extents_per_chunk`: {extents_per_chunk}; from 1 to 64"))
            );
        }
        let copy_share = args.u64_opt("copy_share_percent")?;
        let volume_size = args.size_opt("volume_size")?;
        // On for `nearest` and for the built-in default (`sliced` 30 +
        // defrag, as `examples/pool.toml` recommends).
        let defrag = args.bool_opt("defrag")?.unwrap_or(named.is_none_or(|p| p == PlacementKind::Nearest));
        let defrag_partial_home = args.bool_opt("defrag_partial_home")?.unwrap_or(false);
        let zero_new_chunks = args.bool_opt("zero_new_chunks")?.unwrap_or(true);
        let zero_with = match args.str_opt("zero_new_chunks_with")? {
            None => ZeroWith::Partial,
            Some(name) => {
                ZeroWith::NAMES.iter().find(|(n, _)| *n == name).map(|&(_, z)| z).ok_or_else(|| {
                    args.error(format!(
                        "key `zero_new_chunks_with`: unknown `{name}` (write-zeroes, write, partial)"
                    ))
                })?
            }
        };
        let redirect_origin = match args.str_opt("origin_shared_write")?.unwrap_or("redirect") {
            "copy-out" => false,
            "redirect" => true,
            other => {
                return Err(
                    args.error(format!("key `origin_shared_write`: unknown `{other}` (copy-out, redirect)"))
                )
            }
        };
        // The layout: two checkpoint copies, the journal ring, then data.
        let chunks_bound = (lower_bytes / chunk_bytes).min(DATA_CHUNKS_MAX + 1);
        let body_blocks = (chunks_bound * extents_per_chunk + volumes_max).div_ceil(EXTENTS_PER_BLOCK);
        let meta_bytes = 2 * META_BLOCK_BYTES * (1 + body_blocks) + 2 * journal_blocks * META_BLOCK_BYTES;
        let data_start_bytes = meta_bytes.div_ceil(chunk_bytes) * chunk_bytes;
        let data_chunks = lower_bytes.saturating_sub(data_start_bytes) / chunk_bytes;
        if data_chunks < 4 {
            return Err(args.error(format!(
                "the lower device of {lower_bytes} bytes leaves {data_chunks} data chunks of {chunk_bytes} \
                 bytes after {data_start_bytes} bytes of metadata: give a larger device or smaller chunks"
            )));
        }
        if data_chunks > DATA_CHUNKS_MAX {
            return Err(args.error(format!(
                "the lower device of {lower_bytes} bytes makes {data_chunks} chunks of {chunk_bytes} bytes; \
                 a pool holds at most {DATA_CHUNKS_MAX}: give a larger `chunk_size`"
            )));
        }
        let volume_chunks = match (volume_size, copy_share) {
            (Some(_), Some(_)) => {
                return Err(args.error("give `volume_size` or `copy_share_percent`, not both"));
            }
            (Some(v), None) => {
                if v == 0 || v % chunk_bytes != 0 {
                    return Err(args.error(format!(
                        "key `volume_size`: {v} bytes; a positive multiple of the chunk ({chunk_bytes})"
                    )));
                }
                v / chunk_bytes
            }
            (None, share) => {
                let share = share.unwrap_or(20);
                if share >= 100 {
                    return Err(args.error(format!("key `copy_share_percent`: {share}; below 100")));
                }
                (data_chunks * (100 - share) / 100).max(1)
            }
        };
        if named == Some(PlacementKind::Contiguous) && volume_chunks > data_chunks {
            return Err(args.error(format!(
                "key `volume_size`: {} bytes is past the data area ({} bytes); `contiguous` lays the \
                 origin out in it",
                volume_chunks * chunk_bytes,
                data_chunks * chunk_bytes
            )));
        }
        if volume_chunks >= VOLUME_CHUNKS_MAX {
            return Err(args.error(format!(
                "key `volume_size`: {volume_chunks} chunks; at most {} (the reverse map keeps a 32-bit \
                 chunk number): give a larger `chunk_size`",
                VOLUME_CHUNKS_MAX - 1
            )));
        }
        if volume_chunks.checked_mul(chunk_bytes).and_then(|b| b.checked_mul(volumes_max)).is_none() {
            return Err(args.error("`volume_size` times `volumes_max` is past 2^64 bytes"));
        }
        let placement = match named {
            Some(p) => p,
            None if Sliced::new(DEFAULT_SLICES, data_chunks, volume_chunks).is_ok() => PlacementKind::Sliced,
            None => PlacementKind::Nearest,
        };
        let cfg = PoolConfig {
            chunk_bytes,
            volume_chunks,
            volumes_max,
            placement,
            placement_named: named.is_some(),
            slices,
            copy_share_percent: copy_share.unwrap_or(20),
            defrag,
            defrag_partial_home,
            zero_new_chunks,
            zero_with,
            redirect_origin,
            journal_blocks,
            body_blocks,
            data_chunks,
            data_start_bytes,
        };
        cfg.placement_policy().map_err(|e| args.error(e))?;
        args.finish()?;
        Ok(cfg)
    }

    /// The placement recorded in a pool's header (`None`: a header of
    /// version 1 or 2, which records none: the config's, or `nearest`, the
    /// built-in default of those versions, when the config names none) put
    /// in place of the config's: `Some(what the config said)` when that
    /// differs, for the notice.
    pub fn adopt_placement(&mut self, recorded: Option<(PlacementKind, u64)>) -> Option<String> {
        let was = self.placement_label();
        let (kind, slices) = match recorded {
            Some(r) => r,
            None if self.placement_named => return None,
            None => (PlacementKind::Nearest, self.slices),
        };
        self.placement = kind;
        if kind == PlacementKind::Sliced {
            self.slices = slices;
        }
        (self.placement_named && self.placement_label() != was).then_some(was)
    }

    /// The placement and its layout parameter, as the docs write it
    /// (`sliced` 30).
    pub fn placement_label(&self) -> String {
        match self.placement {
            PlacementKind::Contiguous => "`contiguous`".into(),
            PlacementKind::Sliced => format!("`sliced` {}", self.slices),
            PlacementKind::Nearest => "`nearest`".into(),
        }
    }

    /// The policy of `placement` (the config's, or the recorded one once open).
    pub fn placement_policy(&self) -> Result<Box<dyn ChunkPlacement>, String> {
        Ok(match self.placement {
            PlacementKind::Contiguous => Box::new(Contiguous::new(self.volume_chunks)),
            PlacementKind::Sliced => {
                Box::new(Sliced::new(self.slices, self.data_chunks, self.volume_chunks)?)
            }
            PlacementKind::Nearest => Box::new(NearestFree::new(self.data_chunks, self.volume_chunks)),
        })
    }

    /// Bytes of one volume.
    pub fn volume_bytes(&self) -> u64 {
        self.volume_chunks * self.chunk_bytes
    }

    /// Bytes of one checkpoint copy.
    pub fn checkpoint_copy_bytes(&self) -> u64 {
        META_BLOCK_BYTES * (1 + self.body_blocks)
    }

    /// Where checkpoint copy `c` (0 or 1) starts.
    pub fn checkpoint_at(&self, c: u64) -> u64 {
        c * self.checkpoint_copy_bytes()
    }

    /// Where the journal ring starts.
    pub fn journal_at(&self) -> u64 {
        2 * self.checkpoint_copy_bytes()
    }

    /// Bytes of the journal: two copies of the ring.
    pub fn journal_bytes(&self) -> u64 {
        2 * self.journal_blocks * META_BLOCK_BYTES
    }

    /// Where copy `copy` (0 or 1) of journal block `seq` goes.
    pub fn journal_block_at(&self, seq: u64, copy: u64) -> u64 {
        self.journal_at() + (copy * self.journal_blocks + seq % self.journal_blocks) * META_BLOCK_BYTES
    }

    /// The most extents a checkpoint holds.
    pub fn extents_max(&self) -> u64 {
        self.body_blocks * EXTENTS_PER_BLOCK
    }

    /// Where data chunk `p` starts on the lower device.
    pub fn chunk_at(&self, p: u64) -> u64 {
        self.data_start_bytes + p * self.chunk_bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(keys: &str, lower_bytes: u64) -> Result<PoolConfig, String> {
        let table: toml::Table = toml::from_str(keys).expect("toml");
        PoolConfig::parse(ArgReader::new("layer 1 (pool)", &table), lower_bytes).map_err(|e| e.0)
    }

    #[test]
    fn bad_keys_are_refused_naming_the_key_and_the_range() {
        let dev = 64 << 20;
        for (keys, want) in [
            ("chunk_size = \"4K\"", "key `chunk_size`: 4096 bytes; a power of two from 8KiB to 1MiB"),
            ("chunk_size = \"96K\"", "key `chunk_size`"),
            ("placement = \"best\"", "unknown policy `best` (contiguous, sliced, nearest)"),
            ("slices = 8", "only the `sliced` placement takes it"),
            (
                "zero_new_chunks_with = \"punch\"",
                "key `zero_new_chunks_with`: unknown `punch` (write-zeroes, write, partial)",
            ),
            (
                "origin_shared_write = \"in-place\"",
                "key `origin_shared_write`: unknown `in-place` (copy-out, redirect)",
            ),
            ("placement = \"sliced\"\nslices = 0", "`slices` = 0"),
            ("volumes_max = 0", "key `volumes_max`: 0; from 1 to 40"),
            ("journal_blocks = 2", "key `journal_blocks`"),
            ("volume_size = \"1M\"\ncopy_share_percent = 10", "not both"),
            ("volume_size = \"100K\"", "a positive multiple of the chunk"),
            ("copy_share_percent = 100", "below 100"),
            ("placement = \"contiguous\"\nvolume_size = \"1G\"", "past the data area"),
            ("placement = \"sliced\"\ncopy_share_percent = 0", "leaves no gap"),
            ("colour = \"blue\"", "unknown key `colour`"),
            ("chunk_size = \"8K\"\nvolume_size = \"32T\"", "a 32-bit chunk number"),
        ] {
            let e = parse(keys, dev).expect_err(keys);
            assert!(e.contains(want) && e.starts_with("layer 1 (pool)"), "{keys}: {e}");
        }
        let e = parse("chunk_size = \"8K\"", 1 << 41).expect_err("huge");
        assert!(e.contains("give a larger `chunk_size`"), "{e}");
        let e = parse("", 256 << 10).expect_err("tiny");
        assert!(e.contains("give a larger device or smaller chunks"), "{e}");
        let ok = parse("", dev).expect("defaults");
        assert_eq!((ok.chunk_bytes, ok.volumes_max, ok.placement), (64 << 10, 16, PlacementKind::Sliced));
        assert_eq!((ok.slices, ok.placement_named), (DEFAULT_SLICES, false));
        assert!(ok.defrag && ok.zero_new_chunks && ok.volume_chunks == ok.data_chunks * 80 / 100);
        let e = parse("placement = \"sliced\"\nvolume_size = \"1G\"", dev).expect_err("no gap");
        assert!(e.contains("leaves no gap") && e.contains("`placement = \"nearest\"`"), "{e}");
        assert!(ok.redirect_origin, "redirect is the default (dm-thin's way)");
        assert!(!parse("origin_shared_write = \"copy-out\"", dev).expect("copy-out").redirect_origin);
        assert!(ok.data_start_bytes >= ok.journal_at() + ok.journal_bytes());
    }

    #[test]
    fn the_built_in_default_is_sliced_30_with_defrag_or_nearest_where_the_slices_get_no_gap() {
        let dev = 64 << 20;
        let d = parse("", dev).expect("default");
        assert_eq!((d.placement, d.slices, d.defrag), (PlacementKind::Sliced, 30, true));
        assert_eq!(d.placement_policy().expect("lays out").name(), "sliced");
        // Overcommitted (volumes larger than the pool) and a pool with no
        // copy share: `sliced` would leave no gap, the default is `nearest`.
        for keys in ["volume_size = \"1G\"", "copy_share_percent = 0"] {
            let c = parse(keys, dev).expect(keys);
            assert_eq!(
                (c.placement, c.defrag, c.placement_named),
                (PlacementKind::Nearest, true, false),
                "{keys}"
            );
            let named = parse(&format!("{keys}\nplacement = \"sliced\""), dev).expect_err(keys);
            assert!(named.contains("leaves no gap"), "{keys}: {named}");
        }
        // Named policies keep their defaults (defrag on for `nearest` only).
        assert!(!parse("placement = \"sliced\"", dev).expect("sliced").defrag);
        assert!(!parse("placement = \"contiguous\"", dev).expect("contiguous").defrag);
        assert!(parse("placement = \"nearest\"", dev).expect("nearest").placement_named);
    }

    #[test]
    fn a_recorded_placement_replaces_the_configs_and_says_so_only_when_the_config_named_another() {
        let dev = 64 << 20;
        let mut c = parse("placement = \"contiguous\"", dev).expect("contiguous");
        let said = c.adopt_placement(Some((PlacementKind::Sliced, 8)));
        assert_eq!(
            (said.as_deref(), c.placement, c.slices),
            (Some("`contiguous`"), PlacementKind::Sliced, 8)
        );
        assert_eq!(c.placement_label(), "`sliced` 8");
        let mut same = parse("placement = \"sliced\"\nslices = 8", dev).expect("sliced");
        assert_eq!(same.adopt_placement(Some((PlacementKind::Sliced, 8))), None);
        let mut other_slices = parse("placement = \"sliced\"", dev).expect("sliced 30");
        assert_eq!(
            other_slices.adopt_placement(Some((PlacementKind::Sliced, 8))).as_deref(),
            Some("`sliced` 30")
        );
        // A silent config takes the recorded one without a word.
        let mut silent = parse("", dev).expect("default");
        assert_eq!(silent.adopt_placement(Some((PlacementKind::Nearest, 0))), None);
        assert_eq!(silent.placement, PlacementKind::Nearest);
        // No record (a version 2 header): the config's, or `nearest` if it names none.
        let mut silent = parse("", dev).expect("default");
        assert_eq!((silent.adopt_placement(None), silent.placement), (None, PlacementKind::Nearest));
        let mut named = parse("placement = \"contiguous\"", dev).expect("contiguous");
        assert_eq!((named.adopt_placement(None), named.placement), (None, PlacementKind::Contiguous));
    }
}
