//! Parsing the `dcd` layer's keys into a typed [`Args`], one `parse_*`
//! step per concern; errors name the key.

use crate::seglog::Geometry;
use layoutd_core::config::{ArgReader, ConfigError};
use layoutd_core::{REQUEST_BYTES_MAX, SECTOR_BYTES};

/// What a FUA write does.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum FuaMode {
    /// The paper: write it straight to the data region (like a bypass).
    WriteThrough,
    /// Append it to the log and force the buffer out before completing.
    Log,
}

/// Which dirty segment idle destage picks next.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum PolicyKind {
    /// The paper: the most recently written segment first.
    LastWrittenFirst,
    /// The segment with the fewest valid sectors first.
    FewestValidFirst,
    /// The oldest segment first (frees ring space soonest).
    OldestFirst,
}

/// What a read whose sectors are spread over RAM, log and data does.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum ReadFragmented {
    /// Assemble it from all places (one lower read per contiguous piece).
    Assemble,
    /// The paper: destage the segments involved first, then read the data region.
    Destage,
}

/// The parsed configuration.
#[derive(Clone, Debug)]
pub struct Args {
    /// The log region (checkpoint plus segments) on the lower device.
    pub log_offset_bytes: u64,
    /// Its length.
    pub log_length_bytes: u64,
    /// The data region: the volume maps 1:1 onto it.
    pub data_offset_bytes: u64,
    /// Its length (the volume size).
    pub data_length_bytes: u64,
    /// Bytes of slots per segment (the header comes on top).
    pub segment_bytes: u64,
    /// Bytes per slot.
    pub slot_bytes: u32,
    /// RAM segment buffers.
    pub buffer_count: u32,
    /// A buffer that is not full is written after at most this long.
    pub buffer_delay_ms: u64,
    /// Writes of at least this many bytes go straight to the data region.
    pub bypass_bytes: u32,
    /// What a FUA write does.
    pub fua: FuaMode,
    /// Idle destage order.
    pub destage_policy: PolicyKind,
    /// Idle threshold with an empty log.
    pub idle_ms_max: u64,
    /// Idle threshold with a full log.
    pub idle_ms_min: u64,
    /// Fragmented reads.
    pub read_fragmented: ReadFragmented,
    /// Upper requests held while the log has no room.
    pub pending_max: u32,
}

/// The extent `(start, length)` of member device `index`, or the whole
/// lower device when no member is named.
fn member(
    a: &ArgReader<'_>,
    key: &str,
    index: Option<u64>,
    lower_bytes: u64,
    members: &[(u64, u64)],
) -> Result<(u64, u64), ConfigError> {
    let Some(i) = index else { return Ok((0, lower_bytes)) };
    members.get(i as usize).copied().ok_or_else(|| {
        a.error(format!(
            "key `{key}`: device {i} does not exist: this volume has {} device(s) (a volume spans several when formatted with several --device options)",
            members.len()
        ))
    })
}

/// Region offsets are relative to the member named by `log_device` /
/// `data_device` (physical DCD: log and data on different devices), or to
/// the whole lower device when none is named (logical DCD). Returns
/// absolute offsets on the lower device.
fn parse_regions(
    a: &mut ArgReader<'_>,
    lower_bytes: u64,
    members: &[(u64, u64)],
) -> Result<(u64, u64, u64, u64), ConfigError> {
    let log_device = a.u64_opt("log_device")?;
    let data_device = a.u64_opt("data_device")?;
    let (log_base, log_limit) = member(a, "log_device", log_device, lower_bytes, members)?;
    let (data_base, data_limit) = member(a, "data_device", data_device, lower_bytes, members)?;
    let separate = log_base != data_base || log_limit != data_limit;
    let log_offset_rel = a.size_opt("log_offset")?.unwrap_or(0);
    let default_log = if separate {
        log_limit.saturating_sub(log_offset_rel)
    } else {
        (log_limit / 8).min(64 << 20) / 4096 * 4096
    };
    let log_length = a.size_opt("log_length")?.unwrap_or(default_log);
    let data_offset_rel = a.size_opt("data_offset")?.unwrap_or(if separate {
        0
    } else {
        log_offset_rel.saturating_add(log_length)
    });
    let data_length = a.size_opt("data_length")?.unwrap_or(data_limit.saturating_sub(data_offset_rel));
    for (key, offset, length, limit) in
        [("log", log_offset_rel, log_length, log_limit), ("data", data_offset_rel, data_length, data_limit)]
    {
        if offset.checked_add(length).is_none_or(|e| e > limit) {
            return Err(a.error(format!(
                "{key} region {offset}+{length} runs past the end of its device ({limit} bytes)"
            )));
        }
    }
    let (log_offset, data_offset) = (log_base + log_offset_rel, data_base + data_offset_rel);
    for (k, v) in [
        ("log_offset", log_offset),
        ("log_length", log_length),
        ("data_offset", data_offset),
        ("data_length", data_length),
    ] {
        if v % SECTOR_BYTES != 0 {
            return Err(a.error(format!("key `{k}`: {v} is not a multiple of 512")));
        }
    }
    let end = |o: u64, l: u64| o.checked_add(l).filter(|&e| e <= lower_bytes);
    if log_length == 0 || end(log_offset, log_length).is_none() {
        return Err(a.error(format!("log region {log_offset}+{log_length} is empty or runs past the lower device ({lower_bytes} bytes)")));
    }
    if data_length == 0 || end(data_offset, data_length).is_none() {
        return Err(a.error(format!("data region {data_offset}+{data_length} is empty or runs past the lower device ({lower_bytes} bytes)")));
    }
    if log_offset < data_offset + data_length && data_offset < log_offset + log_length {
        return Err(a.error(format!(
            "log region {log_offset}+{log_length} overlaps data region {data_offset}+{data_length}"
        )));
    }
    Ok((log_offset, log_length, data_offset, data_length))
}

fn parse_segments(a: &mut ArgReader<'_>) -> Result<(u64, u32, u32, u64, u32), ConfigError> {
    let segment_bytes = a.size_opt("segment_bytes")?.unwrap_or(128 << 10);
    let slot_bytes = a.size_opt("slot_bytes")?.unwrap_or(4096);
    let buffer_count = a.u64_opt("buffer_count")?.unwrap_or(4);
    let buffer_delay_ms = a.ms_opt("buffer_delay_ms")?.unwrap_or(200);
    let bypass_bytes = a.size_opt("bypass_bytes")?.unwrap_or(64 << 10);
    if slot_bytes == 0
        || slot_bytes % SECTOR_BYTES != 0
        || slot_bytes > u64::from(crate::seglog::SLOT_BYTES_MAX)
    {
        return Err(a.error(format!(
            "key `slot_bytes`: {slot_bytes} must be a multiple of 512 up to {}",
            crate::seglog::SLOT_BYTES_MAX
        )));
    }
    if segment_bytes == 0 || segment_bytes % slot_bytes != 0 {
        return Err(a.error(format!(
            "key `segment_bytes`: {segment_bytes} must be a non-zero multiple of slot_bytes ({slot_bytes})"
        )));
    }
    if !(2..=64).contains(&buffer_count) {
        return Err(a.error(format!("key `buffer_count`: {buffer_count} must be between 2 and 64")));
    }
    if bypass_bytes < SECTOR_BYTES || bypass_bytes > segment_bytes {
        return Err(a.error(format!(
            "key `bypass_bytes`: {bypass_bytes} must be between 512 and segment_bytes ({segment_bytes}) so every logged write fits one segment"
        )));
    }
    Ok((segment_bytes, slot_bytes as u32, buffer_count as u32, buffer_delay_ms, bypass_bytes as u32))
}

fn parse_choice<T: Copy>(
    a: &mut ArgReader<'_>,
    key: &str,
    default: T,
    choices: &[(&str, T)],
) -> Result<T, ConfigError> {
    match a.str_opt(key)? {
        None => Ok(default),
        Some(s) => choices.iter().find(|c| c.0 == s).map(|c| c.1).ok_or_else(|| {
            let names: Vec<&str> = choices.iter().map(|c| c.0).collect();
            a.error(format!("key `{key}`: unknown value {s:?} (one of: {})", names.join(", ")))
        }),
    }
}

/// Most upper requests held while the log is full.
const PENDING_MAX_MAX: u64 = 1 << 20;

impl Args {
    /// Parses the layer's keys against a lower device of `lower_bytes`,
    /// made of the member devices `members` (`(start, length)` extents).
    pub fn parse(
        mut a: ArgReader<'_>,
        lower_bytes: u64,
        members: &[(u64, u64)],
    ) -> Result<(Args, Geometry), ConfigError> {
        let (log_offset_bytes, log_length_bytes, data_offset_bytes, data_length_bytes) =
            parse_regions(&mut a, lower_bytes, members)?;
        let (segment_bytes, slot_bytes, buffer_count, buffer_delay_ms, bypass_bytes) =
            parse_segments(&mut a)?;
        let fua = parse_choice(
            &mut a,
            "fua",
            FuaMode::WriteThrough,
            &[("write-through", FuaMode::WriteThrough), ("log", FuaMode::Log)],
        )?;
        let destage_policy = parse_choice(
            &mut a,
            "destage_policy",
            PolicyKind::LastWrittenFirst,
            &[
                ("last-written-first", PolicyKind::LastWrittenFirst),
                ("fewest-valid-first", PolicyKind::FewestValidFirst),
                ("oldest-first", PolicyKind::OldestFirst),
            ],
        )?;
        let read_fragmented = parse_choice(
            &mut a,
            "read_fragmented",
            ReadFragmented::Assemble,
            &[("assemble", ReadFragmented::Assemble), ("destage", ReadFragmented::Destage)],
        )?;
        let idle_ms_max = a.ms_opt("idle_ms_max")?.unwrap_or(1000);
        let idle_ms_min = a.ms_opt("idle_ms_min")?.unwrap_or(1);
        if idle_ms_min == 0 || idle_ms_min > idle_ms_max {
            return Err(a.error(format!(
                "keys `idle_ms_min` ({idle_ms_min}) and `idle_ms_max` ({idle_ms_max}): need 1 <= min <= max"
            )));
        }
        let pending_max = a.u64_opt("pending_max")?.unwrap_or(4096);
        if !(1..=PENDING_MAX_MAX).contains(&pending_max) {
            return Err(a.error(format!(
                "key `pending_max` = {pending_max}: must be between 1 and {PENDING_MAX_MAX} (upper requests \
                 held while the log is full; beyond it a request fails with ENOSPC)"
            )));
        }
        let pending_max = pending_max as u32;
        let slot_count = u32::try_from(segment_bytes / u64::from(slot_bytes))
            .map_err(|_| a.error(format!("key `segment_bytes` = {segment_bytes}: too many slots")))?;
        let geo = Geometry::new(log_offset_bytes, log_length_bytes, slot_bytes, slot_count)
            .map_err(|e| a.error(e))?;
        // Recovery reads a segment (header and slots) in one request.
        if geo.stride_bytes() > u64::from(REQUEST_BYTES_MAX) {
            return Err(a.error(format!(
                "key `segment_bytes` = {segment_bytes}: a segment with its header is {} bytes, but recovery \
                 reads it in one request of at most {REQUEST_BYTES_MAX} bytes; use a smaller segment_bytes",
                geo.stride_bytes()
            )));
        }
        if super::lookup::Lookup::new(geo.segment_count, geo.slot_count, geo.slot_sectors()).is_none() {
            return Err(a.error(format!(
                "key `log_length` = {log_length_bytes}: the log has {} segments of {slot_count} slots; a \
                 location in it must fit in 31 bits (about 2^31 log sectors), so use a shorter log_length \
                 or larger segment_bytes/slot_bytes",
                geo.segment_count
            )));
        }
        a.finish()?;
        let args = Args {
            log_offset_bytes,
            log_length_bytes,
            data_offset_bytes,
            data_length_bytes,
            segment_bytes,
            slot_bytes,
            buffer_count,
            buffer_delay_ms,
            bypass_bytes,
            fua,
            destage_policy,
            idle_ms_max,
            idle_ms_min,
            read_fragmented,
            pending_max,
        };
        assert!(geo.payload_bytes() == args.segment_bytes);
        assert!(u64::from(args.bypass_bytes) <= geo.payload_bytes());
        Ok((args, geo))
    }

    /// The config echoed back, in config key names.
    pub fn echo(&self) -> Vec<(String, String)> {
        let fua = match self.fua {
            FuaMode::WriteThrough => "write-through",
            FuaMode::Log => "log",
        };
        let policy = match self.destage_policy {
            PolicyKind::LastWrittenFirst => "last-written-first",
            PolicyKind::FewestValidFirst => "fewest-valid-first",
            PolicyKind::OldestFirst => "oldest-first",
        };
        let frag = match self.read_fragmented {
            ReadFragmented::Assemble => "assemble",
            ReadFragmented::Destage => "destage",
        };
        [
            ("log_offset", self.log_offset_bytes.to_string()),
            ("log_length", self.log_length_bytes.to_string()),
            ("data_offset", self.data_offset_bytes.to_string()),
            ("data_length", self.data_length_bytes.to_string()),
            ("segment_bytes", self.segment_bytes.to_string()),
            ("slot_bytes", self.slot_bytes.to_string()),
            ("buffer_count", self.buffer_count.to_string()),
            ("buffer_delay_ms", self.buffer_delay_ms.to_string()),
            ("bypass_bytes", self.bypass_bytes.to_string()),
            ("fua", fua.to_string()),
            ("destage_policy", policy.to_string()),
            ("idle_ms_max", self.idle_ms_max.to_string()),
            ("idle_ms_min", self.idle_ms_min.to_string()),
            ("read_fragmented", frag.to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }
}
