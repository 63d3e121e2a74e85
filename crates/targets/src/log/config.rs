//! Parsing the `log` layer's keys into a typed [`Args`] and cutting the
//! lower device into the segment region and the map area; errors name the
//! key.

use super::map::{MapGeometry, ENTRIES_PER_PAGE, PAGE_BYTES};
use crate::seglog::Geometry;
use layoutd_core::config::{ArgReader, ConfigError};
use layoutd_core::SECTOR_BYTES;

/// Which reclamation policy runs (see [`super::policy`]).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum PolicyKind {
    /// Cleaning, victim with the fewest live blocks.
    Greedy,
    /// Cleaning, victim by Sprite's (1 - u) * age / (1 + u).
    CostBenefit,
    /// Cleaning, greedy among segments older than `age_threshold_segments` (F2FS ATGC).
    AgeThreshold,
    /// The cleaner copies live blocks into holes of other segments (Matthews et al.).
    Plugging,
    /// Slack Space Recycling: new writes go into holes instead of cleaning.
    Ssr,
    /// The paper's rule (SSR unless the average slack is too small, then
    /// clean) where the cost estimate agrees that SSR is no dearer; greedy
    /// victims on demand, cost-benefit's when idle.
    Adaptive,
    /// Per decision, the cheaper of SSR and cleaning by an estimated cost.
    Cost,
}

impl PolicyKind {
    const NAMES: [(&'static str, PolicyKind); 7] = [
        ("greedy", PolicyKind::Greedy),
        ("cost-benefit", PolicyKind::CostBenefit),
        ("age-threshold", PolicyKind::AgeThreshold),
        ("plugging", PolicyKind::Plugging),
        ("ssr", PolicyKind::Ssr),
        ("adaptive", PolicyKind::Adaptive),
        ("cost", PolicyKind::Cost),
    ];

    /// The config name.
    pub fn name(self) -> &'static str {
        Self::NAMES.iter().find(|(_, k)| *k == self).map(|(n, _)| *n).expect("every kind is named")
    }
}

/// Whether idle re-sequencing slides groups into their home segments
/// (`resequence_sliding`).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Sliding {
    /// Never: groups are packed into the next free segments.
    Off,
    /// Always.
    On,
    /// Decided at the start of each idle period: slides while utilisation
    /// (live blocks over volume blocks) is at least
    /// `sliding_utilisation_min_percent`, packs below.
    Auto,
}

impl Sliding {
    /// The config value.
    pub fn name(self) -> &'static str {
        match self {
            Sliding::Off => "false",
            Sliding::On => "true",
            Sliding::Auto => "auto",
        }
    }
}

/// The parsed configuration.
#[derive(Clone, Debug)]
pub struct Args {
    /// Bytes of one volume block (= one slot).
    pub block_bytes: u32,
    /// Bytes of slots per segment (the header comes on top).
    pub segment_bytes: u64,
    /// Share of the slots kept spare, in percent.
    pub over_provision_pct: u64,
    /// Reclamation policy.
    pub policy: PolicyKind,
    /// ATGC: segments written fewer than this many segments ago are not
    /// cleaned while older ones exist.
    pub age_threshold_segments: u64,
    /// Victims per cleaning pass.
    pub clean_batch_segments: u32,
    /// Segments of space kept for the cleaner: user writes never take them.
    pub free_segments_min: u32,
    /// Idle (background) cleaning runs while fewer segments than this are free.
    pub free_segments_target: u32,
    /// Adaptive: SSR while the average slack of used segments is at least this.
    pub ssr_slack_min_pct: u64,
    /// A checkpoint is written after this many segments.
    pub checkpoint_segments: u32,
    /// RAM segment buffers (the open one and those being written).
    pub buffer_count: u32,
    /// Whether the cleaner writes the live blocks it moves in logical order.
    pub clean_sorted: bool,
    /// Whether a flush writes the open segment's new part and keeps the
    /// segment open (partial segments), instead of sealing it.
    pub partial_segments: bool,
    /// Whether idle time re-sequences fragmented groups of blocks (see
    /// `request::Log::resequence_step`).
    pub resequence: bool,
    /// Re-sequencing and idle cleaning wait for this long without a request.
    pub resequence_idle_ms: u64,
    /// Whether re-sequencing slides each group into its home segment
    /// (group g into segment g, its live blocks moved out first), so that
    /// consecutive groups lie in consecutive segments (see
    /// `request::Log::prepare_home`): always, never, or by utilisation.
    pub resequence_sliding: Sliding,
    /// `resequence_sliding = "auto"` slides at this utilisation (percent
    /// of the volume's blocks live) and above.
    pub sliding_utilisation_min_percent: u64,
    /// Groups one packing re-sequencing pass takes at most (their reads
    /// sent at once, in disk order; see `request::Log::resequence_step`).
    pub resequence_batch_groups: u32,
    /// Re-sequencing while busy: one packing pass (the idle mechanism's,
    /// run beside the client's requests) after every this many blocks of
    /// user writes; 0: off, only idle time re-sequences (see
    /// `policy::Reclaim::resequence_busy_due`).
    pub resequence_busy_user_blocks_per_pass: u64,
    /// Whether a read that ends at a segment's last slot reads on through
    /// the next segment's header (see `request::Log::read_through_bytes`).
    pub read_through_headers: bool,
    /// Whether the map holds sequentially written groups of blocks as runs
    /// (extents) instead of one entry a block (see `map::SlotMap`).
    pub map_extents: bool,
    /// TEST ONLY: let SSR reuse slots freed since the last durable
    /// checkpoint (breaks crash safety; exists so a test can show the rule
    /// matters).
    pub unsafe_reuse: bool,
    /// Blocks the volume exposes.
    pub volume_blocks: u64,
    /// Where the map pages live.
    pub map: MapGeometry,
}

impl Args {
    /// Parses the keys over a lower device of `lower_bytes`; returns the
    /// arguments and the segment geometry.
    pub fn parse(mut a: ArgReader<'_>, lower_bytes: u64) -> Result<(Args, Geometry), ConfigError> {
        let block_bytes = a.size_opt("block_bytes")?.unwrap_or(4096);
        if block_bytes == 0 || block_bytes % SECTOR_BYTES != 0 || block_bytes > 32768 {
            return Err(a.error(format!(
                "key `block_bytes`: {block_bytes} must be a multiple of 512 between 512 and 32768"
            )));
        }
        let block_bytes = block_bytes as u32;
        let segment_bytes = a.size_opt("segment_bytes")?.unwrap_or(512 << 10);
        let slot_count = segment_bytes / u64::from(block_bytes);
        if segment_bytes % u64::from(block_bytes) != 0
            || !(2..=4096).contains(&slot_count)
            || segment_bytes > 16 << 20
        {
            return Err(a.error(format!(
                "key `segment_bytes`: {segment_bytes} must be 2 to 4096 blocks of block_bytes = {block_bytes}, at most 16 MiB"
            )));
        }
        let over_provision_pct = a.u64_opt("over_provision_pct")?.unwrap_or(10);
        if !(1..=90).contains(&over_provision_pct) {
            return Err(
                a.error(format!("key `over_provision_pct`: {over_provision_pct} is not within 1..=90"))
            );
        }
        let policy = parse_policy(&mut a)?;
        let age_threshold_segments = a.u64_opt("age_threshold_segments")?.unwrap_or(256);
        let clean_batch_segments = bounded(&mut a, "clean_batch_segments", 4, 1, 64)?;
        let free_segments_min = bounded(&mut a, "free_segments_min", 2, 1, 1 << 20)?;
        let free_segments_target = bounded(&mut a, "free_segments_target", 8, 1, 1 << 20)?;
        let ssr_slack_min_pct = a.u64_opt("ssr_slack_min_pct")?.unwrap_or(10).min(100);
        let checkpoint_segments = bounded(&mut a, "checkpoint_segments", 64, 1, 1 << 20)?;
        let buffer_count = bounded(&mut a, "buffer_count", 4, 2, 64)?;
        let clean_sorted = a.bool_opt("clean_sorted")?.unwrap_or(true);
        let partial_segments = a.bool_opt("partial_segments")?.unwrap_or(true);
        let resequence = a.bool_opt("resequence")?.unwrap_or(true);
        let resequence_idle_ms = a.ms_opt("resequence_idle_ms")?.unwrap_or(100);
        let resequence_sliding = parse_sliding(&mut a)?;
        let sliding_utilisation_min_percent = a.u64_opt("sliding_utilisation_min_percent")?.unwrap_or(55);
        if sliding_utilisation_min_percent > 100 {
            return Err(a.error(format!(
                "key `sliding_utilisation_min_percent`: {sliding_utilisation_min_percent} is not within 0..=100"
            )));
        }
        let resequence_batch_groups = bounded(&mut a, "resequence_batch_groups", 1, 1, 4096)?;
        let resequence_busy_user_blocks_per_pass =
            a.u64_opt("resequence_busy_user_blocks_per_pass")?.unwrap_or(0);
        let read_through_headers = a.bool_opt("read_through_headers")?.unwrap_or(true);
        let map_extents = a.bool_opt("map_extents")?.unwrap_or(true);
        let unsafe_reuse = a.bool_opt("test_unsafe_reuse_before_checkpoint")?.unwrap_or(false);
        let (geo, map, volume_blocks) =
            cut(&a, lower_bytes, block_bytes, slot_count as u32, over_provision_pct)?;
        let args = Args {
            block_bytes,
            segment_bytes,
            over_provision_pct,
            policy,
            age_threshold_segments,
            clean_batch_segments,
            free_segments_min,
            free_segments_target,
            ssr_slack_min_pct,
            checkpoint_segments,
            buffer_count,
            clean_sorted,
            partial_segments,
            resequence,
            resequence_idle_ms,
            resequence_sliding,
            sliding_utilisation_min_percent,
            resequence_batch_groups,
            resequence_busy_user_blocks_per_pass,
            read_through_headers,
            map_extents,
            unsafe_reuse,
            volume_blocks,
            map,
        };
        args.check_spare(&a, &geo)?;
        a.finish()?;
        Ok((args, geo))
    }

    /// One cleaning pass must fit in the spare space: its victims' live
    /// blocks go somewhere before their segments come free.
    fn check_spare(&self, a: &ArgReader<'_>, geo: &Geometry) -> Result<(), ConfigError> {
        let slots = u64::from(geo.segment_count) * u64::from(geo.slot_count);
        let spare_segments = (slots - self.volume_blocks) / u64::from(geo.slot_count);
        let need = u64::from(self.free_segments_min) + u64::from(self.clean_batch_segments);
        if spare_segments < need {
            return Err(a.error(format!(
                "over_provision_pct = {} leaves {spare_segments} spare segment(s) of {} blocks; one cleaning \
                 pass needs at least {need} (free_segments_min = {} + clean_batch_segments = {}): raise \
                 over_provision_pct, or lower segment_bytes or clean_batch_segments",
                self.over_provision_pct, geo.slot_count, self.free_segments_min, self.clean_batch_segments
            )));
        }
        Ok(())
    }

    /// The config echoed back in key names.
    pub fn echo(&self) -> Vec<(String, String)> {
        let mut v: Vec<(String, String)> = [
            ("block_bytes", self.block_bytes.to_string()),
            ("segment_bytes", self.segment_bytes.to_string()),
            ("over_provision_pct", self.over_provision_pct.to_string()),
            ("policy", self.policy.name().to_string()),
            ("age_threshold_segments", self.age_threshold_segments.to_string()),
            ("clean_batch_segments", self.clean_batch_segments.to_string()),
            ("free_segments_min", self.free_segments_min.to_string()),
            ("free_segments_target", self.free_segments_target.to_string()),
            ("ssr_slack_min_pct", self.ssr_slack_min_pct.to_string()),
            ("checkpoint_segments", self.checkpoint_segments.to_string()),
            ("buffer_count", self.buffer_count.to_string()),
            ("clean_sorted", self.clean_sorted.to_string()),
            ("partial_segments", self.partial_segments.to_string()),
            ("resequence", self.resequence.to_string()),
            ("resequence_idle_ms", self.resequence_idle_ms.to_string()),
            ("resequence_sliding", self.resequence_sliding.name().to_string()),
            ("sliding_utilisation_min_percent", self.sliding_utilisation_min_percent.to_string()),
            ("resequence_batch_groups", self.resequence_batch_groups.to_string()),
            ("resequence_busy_user_blocks_per_pass", self.resequence_busy_user_blocks_per_pass.to_string()),
            ("read_through_headers", self.read_through_headers.to_string()),
            ("map_extents", self.map_extents.to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        if self.unsafe_reuse {
            v.push(("test_unsafe_reuse_before_checkpoint".into(), "true".into()));
        }
        v
    }
}

fn parse_policy(a: &mut ArgReader<'_>) -> Result<PolicyKind, ConfigError> {
    let Some(name) = a.str_opt("policy")? else { return Ok(PolicyKind::Adaptive) };
    PolicyKind::NAMES.iter().find(|(n, _)| *n == name).map(|(_, k)| *k).ok_or_else(|| {
        let known: Vec<&str> = PolicyKind::NAMES.iter().map(|(n, _)| *n).collect();
        a.error(format!("key `policy`: unknown policy `{name}` (known: {})", known.join(", ")))
    })
}

/// `resequence_sliding`: `true`, `false` or `"auto"` (the default).
fn parse_sliding(a: &mut ArgReader<'_>) -> Result<Sliding, ConfigError> {
    const KEY: &str = "resequence_sliding";
    let wrong = |a: &ArgReader<'_>, found: &str| {
        a.error(format!("key `{KEY}`: expected true, false or \"auto\", found {found}"))
    };
    match a.str_opt(KEY) {
        Ok(None) | Ok(Some("auto")) => Ok(Sliding::Auto),
        Ok(Some(s)) => Err(wrong(a, &format!("\"{s}\""))),
        Err(_) => match a.bool_opt(KEY) {
            Ok(Some(true)) => Ok(Sliding::On),
            Ok(Some(false)) => Ok(Sliding::Off),
            Ok(None) | Err(_) => Err(wrong(a, "neither a string nor a boolean")),
        },
    }
}

fn bounded(a: &mut ArgReader<'_>, key: &str, default: u32, min: u32, max: u32) -> Result<u32, ConfigError> {
    let v = a.u64_opt(key)?.unwrap_or(u64::from(default));
    if v < u64::from(min) || v > u64::from(max) {
        return Err(a.error(format!("key `{key}`: {v} is not within {min}..={max}")));
    }
    Ok(v as u32)
}

/// Cuts the lower device: the segment region from 0 (checkpoint copies,
/// then segments), then the map area (two copies of each map page).
fn cut(
    a: &ArgReader<'_>,
    lower_bytes: u64,
    block_bytes: u32,
    slot_count: u32,
    over_provision_pct: u64,
) -> Result<(Geometry, MapGeometry, u64), ConfigError> {
    // The map area is sized for every block the device could hold, so the
    // region left for segments is known before the segments are counted.
    let blocks_upper = lower_bytes / u64::from(block_bytes);
    let map_area_upper = blocks_upper.div_ceil(ENTRIES_PER_PAGE) * 2 * PAGE_BYTES + PAGE_BYTES;
    let region_bytes = lower_bytes.checked_sub(map_area_upper).filter(|&r| r > 0).ok_or_else(|| {
        a.error(format!("a lower device of {lower_bytes} bytes cannot hold a map area of {map_area_upper}"))
    })?;
    let geo = Geometry::new(0, region_bytes, block_bytes, slot_count).map_err(|e| a.error(e))?;
    let slots = u64::from(geo.segment_count) * u64::from(slot_count);
    let volume_blocks = slots * (100 - over_provision_pct) / 100;
    if volume_blocks == 0 || slots >= u64::from(u32::MAX) {
        return Err(a.error(format!(
            "the log would hold {slots} slots for {volume_blocks} blocks (at most 2^32 - 2)"
        )));
    }
    let map = MapGeometry {
        offset_bytes: geo.region_end_bytes().div_ceil(PAGE_BYTES) * PAGE_BYTES,
        page_count: volume_blocks.div_ceil(ENTRIES_PER_PAGE) as u32,
        slot_total: slots as u32,
    };
    assert!(map.end_bytes() <= lower_bytes, "the map area fits where it was sized");
    Ok((geo, map, volume_blocks))
}
