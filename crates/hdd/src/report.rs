//! Reports for the CLI: `disk show` (figures measured by running the model)
//! and `disk validate` (closed-loop replay of a DiskSim validation trace).

use crate::model::{splitmix64, Disk};
use crate::params::{zone_media_mb_s, DiskParams, ReadAheadScope};
use crate::queue::Scheduler;
use crate::seek::{average_seek_ms, seek_ns};
use crate::{DiskOp, DiskRequest, HddError, SECTOR_SIZE_BYTES};
use serde::Serialize;
use std::fmt;
use std::path::{Path, PathBuf};

/// Random reads `show` issues to measure `random_read_4k_ms`.
const RANDOM_READ_COUNT: u64 = 2000;
/// Sectors per sequential measurement (4 MiB) and per request (128 KiB).
const SEQUENTIAL_SECTORS: u64 = 8192;
const SEQUENTIAL_REQUEST_SECTORS: u32 = 256;

/// One zone's sustained media rate (track and cylinder switches included).
#[derive(Clone, Debug, Serialize)]
pub struct ZoneRate {
    /// Zone index, outermost first.
    pub zone_index: u32,
    /// First cylinder.
    pub first_cylinder: u32,
    /// Last cylinder.
    pub last_cylinder: u32,
    /// First LBA of the zone.
    pub first_lba: u64,
    /// Sectors per track.
    pub sectors_per_track: u32,
    /// Sustained sequential media rate, from the geometry.
    pub media_mb_s: f64,
}

/// What `layoutd disk show` prints: the parameters and figures measured by
/// running the model.
#[derive(Clone, Debug, Serialize)]
pub struct ShowReport {
    /// Drive name.
    pub name: String,
    /// Where the figures come from.
    pub source: String,
    /// Capacity.
    pub capacity_bytes: u64,
    /// Spindle speed.
    pub rotation_rpm: f64,
    /// Mean service time of uniformly random, 4 KiB-aligned 4 KiB reads
    /// issued one at a time (model run).
    pub random_read_4k_ms: f64,
    /// Seek from the first to the last LBA's cylinder (model run).
    pub full_stroke_seek_ms: f64,
    /// Seek to the adjacent cylinder (model run).
    pub track_to_track_seek_ms: f64,
    /// Mean seek over uniformly random cylinder pairs (from the seek curve).
    pub average_seek_ms: f64,
    /// Half a revolution.
    pub average_rotation_ms: f64,
    /// Sequential 128 KiB reads at the start of the disk (model run).
    pub outer_mb_s: f64,
    /// Sequential 128 KiB reads at the end of the disk (model run).
    pub inner_mb_s: f64,
    /// Per-zone sustained media rates, from the geometry.
    pub zones: Vec<ZoneRate>,
    /// Every parameter.
    pub params: DiskParams,
}

/// Build the `show` report by running the model.
pub fn show_report(params: &DiskParams) -> ShowReport {
    let zones = (0..params.zones.len())
        .map(|index| {
            let zone = &params.zones[index];
            ZoneRate {
                zone_index: index as u32,
                first_cylinder: zone.first_cylinder,
                last_cylinder: zone.last_cylinder,
                first_lba: zone.first_lba,
                sectors_per_track: zone.sectors_per_track,
                media_mb_s: zone_media_mb_s(params, index),
            }
        })
        .collect();
    let last_start = params.sector_count.saturating_sub(SEQUENTIAL_SECTORS + 1);
    ShowReport {
        name: params.name.clone(),
        source: params.source.clone(),
        capacity_bytes: params.capacity_bytes(),
        rotation_rpm: params.rotation_rpm,
        random_read_4k_ms: random_read_mean_ms(params, RANDOM_READ_COUNT, 1),
        full_stroke_seek_ms: measured_seek_ms(params, params.sector_count - 1),
        track_to_track_seek_ms: measured_seek_ms(params, first_lba_past_cylinder_zero(params)),
        average_seek_ms: average_seek_ms(&params.seek, params.cylinder_count),
        average_rotation_ms: params.revolution_ns() as f64 / 2.0e6,
        outer_mb_s: sequential_read_mb_s(params, 0, SEQUENTIAL_SECTORS),
        inner_mb_s: sequential_read_mb_s(params, last_start, SEQUENTIAL_SECTORS),
        zones,
        params: params.clone(),
    }
}

/// Serve one request on an idle disk at `now_ns`; returns its completion.
fn serve_one(disk: &mut Disk, now_ns: u64, request: DiskRequest) -> crate::DiskCompletion {
    assert!(!disk.busy());
    disk.submit(now_ns, request);
    let done_ns = disk.next_completion_ns().expect("a submitted request is in service");
    let completion = disk.complete(done_ns).expect("completion is due");
    assert!(!disk.busy());
    completion
}

fn read(id: u64, lba: u64, sectors: u32) -> DiskRequest {
    DiskRequest { id, op: DiskOp::Read, lba, sectors }
}

/// Mean service time of `count` uniformly random 4 KiB reads, one at a time.
pub fn random_read_mean_ms(params: &DiskParams, count: u64, seed: u64) -> f64 {
    assert!(count > 0);
    let mut disk = Disk::new(params.clone(), Scheduler::Fifo, 1, seed);
    let blocks = params.sector_count / 8;
    let (mut now_ns, mut total_ns) = (0u64, 0u64);
    for id in 0..count {
        let lba = splitmix64(seed ^ id.wrapping_mul(0x2545_F491_4F6C_DD1D)) % blocks * 8;
        let completion = serve_one(&mut disk, now_ns, read(id, lba, 8));
        total_ns += completion.complete_ns - completion.start_ns;
        now_ns = completion.complete_ns;
    }
    total_ns as f64 / count as f64 / 1.0e6
}

/// Seek time the model charges going from LBA 0 to `target_lba`.
fn measured_seek_ms(params: &DiskParams, target_lba: u64) -> f64 {
    let mut disk = Disk::new(params.clone(), Scheduler::Fifo, 1, 0);
    let first = serve_one(&mut disk, 0, read(0, 0, 1));
    // Idle long enough for read-ahead to stop on the first cylinder.
    let second = serve_one(&mut disk, first.complete_ns, read(1, target_lba, 1));
    assert!(!second.cache_hit);
    second.seek_ns as f64 / 1.0e6
}

/// The first LBA on cylinder 1 or later (the mapping is monotonic).
pub fn first_lba_past_cylinder_zero(params: &DiskParams) -> u64 {
    let (mut lo, mut hi) = (0u64, params.mapped_sector_count() - 1);
    let first_cylinder = crate::geometry::map(params, 0).cylinder;
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if crate::geometry::map(params, mid).cylinder > first_cylinder {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    lo
}

/// Throughput of back-to-back sequential 128 KiB reads from `lba` over
/// `sectors`, not counting the first request's positioning.
pub fn sequential_read_mb_s(params: &DiskParams, lba: u64, sectors: u64) -> f64 {
    let count = sectors / u64::from(SEQUENTIAL_REQUEST_SECTORS);
    assert!(count >= 2);
    let mut disk = Disk::new(params.clone(), Scheduler::Fifo, 1, 0);
    let mut now_ns = 0;
    let mut first_done_ns = 0;
    for id in 0..count {
        let next = lba + id * u64::from(SEQUENTIAL_REQUEST_SECTORS);
        let completion = serve_one(&mut disk, now_ns, read(id, next, SEQUENTIAL_REQUEST_SECTORS));
        if id == 0 {
            first_done_ns = completion.complete_ns;
        }
        now_ns = completion.complete_ns;
    }
    let bytes = (count - 1) * u64::from(SEQUENTIAL_REQUEST_SECTORS) * SECTOR_SIZE_BYTES;
    bytes as f64 / ((now_ns - first_done_ns) as f64 / 1.0e9) / 1.0e6
}

impl fmt::Display for ShowReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let p = &self.params;
        writeln!(f, "disk {}", self.name)?;
        writeln!(f, "  source                  {}", self.source)?;
        writeln!(
            f,
            "  capacity                {:.2} GB ({} sectors)",
            self.capacity_bytes as f64 / 1e9,
            p.sector_count
        )?;
        writeln!(
            f,
            "  geometry                {} rpm, {} surfaces, {} cylinders, {} zones",
            self.rotation_rpm,
            p.surface_count,
            p.cylinder_count,
            p.zones.len()
        )?;
        // DiskSim's DEC scheme is not bounded by the maximum read-ahead.
        let read_ahead = match (p.cache.read_ahead_scope, p.cache.read_ahead_sectors_max) {
            (ReadAheadScope::NextTrack, _) => "to the track end".to_string(),
            (_, 0) => "a segment".to_string(),
            (_, max) => format!("at most {max} sectors"),
        };
        writeln!(
            f,
            "  cache                   {} segments x {} sectors, read-ahead {read_ahead} ({:?}, request data {:?}), write cache {}",
            p.cache.segment_count,
            p.cache.segment_sectors,
            p.cache.read_ahead_scope,
            p.cache.request_data,
            if p.cache.write_cache { "on" } else { "off" }
        )?;
        writeln!(
            f,
            "  head switch             {:.3} ms, write settle {:.3} ms, bus {:.1} us/sector",
            p.head_switch_ns as f64 / 1e6,
            p.write_settle_ns as f64 / 1e6,
            p.bus_sector_ns as f64 / 1e3
        )?;
        writeln!(f, "measured by running the model:")?;
        writeln!(f, "  random_read_4k_ms       {:.3}", self.random_read_4k_ms)?;
        writeln!(f, "  full_stroke_seek_ms     {:.3}", self.full_stroke_seek_ms)?;
        writeln!(f, "  track_to_track_seek_ms  {:.3}", self.track_to_track_seek_ms)?;
        writeln!(
            f,
            "  average_seek_ms         {:.3}  (seek curve, random cylinder pairs)",
            self.average_seek_ms
        )?;
        writeln!(f, "  average_rotation_ms     {:.3}", self.average_rotation_ms)?;
        writeln!(f, "  outer_mb_s              {:.1}", self.outer_mb_s)?;
        writeln!(f, "  inner_mb_s              {:.1}", self.inner_mb_s)?;
        writeln!(f, "zones (sustained media rate from the geometry):")?;
        for zone in &self.zones {
            writeln!(
                f,
                "  zone {:>2}  cyl {:>7}..={:<7} {:>5} sectors/track  {:>6.1} MB/s",
                zone.zone_index,
                zone.first_cylinder,
                zone.last_cylinder,
                zone.sectors_per_track,
                zone.media_mb_s
            )?;
        }
        Ok(())
    }
}

/// What `layoutd disk validate` prints.
#[derive(Clone, Debug, Serialize)]
pub struct ValidateReport {
    /// Drive name.
    pub name: String,
    /// The trace replayed.
    pub trace: PathBuf,
    /// Requests replayed.
    pub request_count: u64,
    /// RMS horizontal distance between the measured and model service-time
    /// CDFs at every 1% step (Ruemmler and Wilkes' demerit figure).
    pub demerit_ms: f64,
    /// Demerit relative to the measured mean.
    pub demerit_relative: f64,
    /// The demerit as DiskSim computes the figures it publishes
    /// ([`demerit_disksim_ms`]): both distributions bucketed as DiskSim's
    /// validation `statdefs` bucket "Physical access time", then compared
    /// at every 0.01% step (its `rms` tool). The figure to set beside
    /// DiskSim's published demerits.
    pub demerit_disksim_ms: f64,
    /// Mean measured service time.
    pub measured_mean_ms: f64,
    /// Mean model service time.
    pub model_mean_ms: f64,
    /// Mean measured read service time.
    pub measured_read_mean_ms: f64,
    /// Mean model read service time.
    pub model_read_mean_ms: f64,
    /// Mean measured write service time.
    pub measured_write_mean_ms: f64,
    /// Mean model write service time.
    pub model_write_mean_ms: f64,
    /// Reads the trace marks `Hit`, over all reads.
    pub measured_read_hit_rate: f64,
    /// Reads the model served from its buffer, over all reads.
    pub model_read_hit_rate: f64,
    /// Writes the model acknowledged from its buffer, over all writes.
    pub model_write_hit_rate: f64,
    /// Measured service times, sorted (for the plot).
    #[serde(skip)]
    pub measured_sorted_ms: Vec<f64>,
    /// Model service times, sorted (for the plot).
    #[serde(skip)]
    pub model_sorted_ms: Vec<f64>,
    /// Every request in trace order, measured beside model (for per-request
    /// analysis; `disk_report requests` prints them).
    #[serde(skip)]
    pub requests: Vec<ReplayedRequest>,
}

/// One replayed trace request: what the trace measured and what the model gave.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ReplayedRequest {
    /// A write (else a read).
    pub write: bool,
    /// First block.
    pub lba: u64,
    /// Blocks.
    pub sectors: u32,
    /// The drive's service time.
    pub measured_ms: f64,
    /// The model's service time.
    pub model_ms: f64,
    /// The model served it from its buffer.
    pub model_hit: bool,
    /// The model's seek distance.
    pub seek_distance_cyl: u64,
}

/// Longest service time or gap a validation trace line may give: one hour.
/// DiskSim's traces hold milliseconds; a larger figure is a damaged file, and
/// refusing it keeps the replay's nanosecond clock far from overflow.
const TRACE_TIME_US_MAX: f64 = 3.6e9;

/// The replay's clock stays below this, so the disk model's own sums of
/// a time and a service time cannot overflow.
const REPLAY_CLOCK_NS_MAX: u64 = 1 << 62;

/// One trace line.
struct TraceRecord {
    write: bool,
    hit: bool,
    lba: u64,
    sectors: u32,
    service_us: f64,
    gap_us: f64,
    /// 1-based line in the file.
    line: u32,
}

fn parse_trace(path: &Path) -> Result<Vec<TraceRecord>, HddError> {
    let text =
        std::fs::read_to_string(path).map_err(|source| HddError::Io { path: path.to_path_buf(), source })?;
    let mut records = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let fail = |message: &str| HddError::Parse {
            path: path.to_path_buf(),
            line: index as u32 + 1,
            message: message.to_string(),
        };
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.is_empty() {
            continue;
        }
        if fields.len() != 6 {
            return Err(fail("expected 6 fields: R|W Hit|Miss|Doub|Trip block count service_us next_gap_us"));
        }
        let write = match fields[0] {
            "R" => false,
            "W" => true,
            _ => return Err(fail("first field must be R or W")),
        };
        let time_us = |at: usize, what: &str| -> Result<f64, HddError> {
            match fields[at].parse::<f64>() {
                Ok(value) if value.is_finite() && (0.0..=TRACE_TIME_US_MAX).contains(&value) => Ok(value),
                _ => Err(fail(&format!(
                    "{what} {:?} is not a number of microseconds within 0..={TRACE_TIME_US_MAX}",
                    fields[at]
                ))),
            }
        };
        // DiskSim reads the block number and the count with `%ld` / `%d`:
        // integers, never fractions.
        let lba = fields[2]
            .parse::<u64>()
            .map_err(|_| fail(&format!("block number {:?} is not a non-negative integer", fields[2])))?;
        let sectors = match fields[3].parse::<u32>() {
            Ok(count) if (1..=65535).contains(&count) => count,
            _ => {
                return Err(fail(&format!("block count {:?} must be an integer within 1..=65535", fields[3])))
            }
        };
        records.push(TraceRecord {
            write,
            hit: fields[1] == "Hit",
            lba,
            sectors,
            service_us: time_us(4, "service time")?,
            gap_us: time_us(5, "gap")?,
            line: index as u32 + 1,
        });
    }
    if records.is_empty() {
        return Err(HddError::Parse {
            path: path.to_path_buf(),
            line: 0,
            message: "the trace has no requests".into(),
        });
    }
    Ok(records)
}

/// Replay a DiskSim validation trace closed-loop: each request is issued the
/// recorded gap after the previous one completes. Returns the demerit figure,
/// means and hit rates.
pub fn validate(params: &DiskParams, trace: &Path) -> Result<ValidateReport, HddError> {
    let records = parse_trace(trace)?;
    let mut disk = Disk::new(params.clone(), Scheduler::Fifo, 1, 0);
    let (mut now_ns, mut model_ms) = (0u64, Vec::with_capacity(records.len()));
    let mut requests = Vec::with_capacity(records.len());
    let mut hits = [0u64; 2];
    for (id, record) in records.iter().enumerate() {
        if record.lba.checked_add(u64::from(record.sectors)).is_none_or(|end| end > params.sector_count) {
            return Err(HddError::Parse {
                path: trace.to_path_buf(),
                line: record.line,
                message: format!(
                    "block {} + {} runs past the drive's {} sectors: wrong --diskspecs for this trace?",
                    record.lba, record.sectors, params.sector_count
                ),
            });
        }
        let op = if record.write { DiskOp::Write } else { DiskOp::Read };
        let completion = serve_one(
            &mut disk,
            now_ns,
            DiskRequest { id: id as u64, op, lba: record.lba, sectors: record.sectors },
        );
        let service_ms = (completion.complete_ns - now_ns) as f64 / 1.0e6;
        model_ms.push(service_ms);
        requests.push(ReplayedRequest {
            write: record.write,
            lba: record.lba,
            sectors: record.sectors,
            measured_ms: record.service_us / 1.0e3,
            model_ms: service_ms,
            model_hit: completion.cache_hit,
            seek_distance_cyl: completion.seek_distance_cyl,
        });
        hits[usize::from(record.write)] += u64::from(completion.cache_hit);
        // Each gap is at most an hour, so only a trace of millions of such
        // gaps can run past the clock; refuse it rather than wrap.
        let next_ns = completion.complete_ns.checked_add((record.gap_us * 1.0e3).round() as u64);
        now_ns = next_ns.filter(|ns| *ns <= REPLAY_CLOCK_NS_MAX).ok_or_else(|| HddError::Parse {
            path: trace.to_path_buf(),
            line: record.line,
            message: "the trace's gaps add up past the replay clock's range (2^62 ns, about 146 years)"
                .into(),
        })?;
    }
    let measured_ms: Vec<f64> = records.iter().map(|record| record.service_us / 1.0e3).collect();
    let mean = |values: &[f64], pick: &dyn Fn(usize) -> bool| -> f64 {
        let chosen: Vec<f64> =
            (0..values.len()).filter(|index| pick(*index)).map(|index| values[index]).collect();
        if chosen.is_empty() {
            0.0
        } else {
            chosen.iter().sum::<f64>() / chosen.len() as f64
        }
    };
    let is_read = |index: usize| !records[index].write;
    let is_write = |index: usize| records[index].write;
    let read_count = records.iter().filter(|record| !record.write).count().max(1) as f64;
    let write_count = records.iter().filter(|record| record.write).count().max(1) as f64;
    let mut report = ValidateReport {
        name: params.name.clone(),
        trace: trace.to_path_buf(),
        request_count: records.len() as u64,
        demerit_ms: 0.0,
        demerit_relative: 0.0,
        demerit_disksim_ms: 0.0,
        measured_mean_ms: mean(&measured_ms, &|_| true),
        model_mean_ms: mean(&model_ms, &|_| true),
        measured_read_mean_ms: mean(&measured_ms, &is_read),
        model_read_mean_ms: mean(&model_ms, &is_read),
        measured_write_mean_ms: mean(&measured_ms, &is_write),
        model_write_mean_ms: mean(&model_ms, &is_write),
        measured_read_hit_rate: records.iter().filter(|record| !record.write && record.hit).count() as f64
            / read_count,
        model_read_hit_rate: hits[0] as f64 / read_count,
        model_write_hit_rate: hits[1] as f64 / write_count,
        measured_sorted_ms: sorted(measured_ms),
        model_sorted_ms: sorted(model_ms),
        requests,
    };
    report.demerit_ms = demerit_ms(&report.measured_sorted_ms, &report.model_sorted_ms);
    report.demerit_relative = report.demerit_ms / report.measured_mean_ms.max(f64::MIN_POSITIVE);
    report.demerit_disksim_ms = demerit_disksim_ms(&report.measured_sorted_ms, &report.model_sorted_ms);
    Ok(report)
}

fn sorted(mut values: Vec<f64>) -> Vec<f64> {
    values.sort_by(f64::total_cmp);
    values
}

/// The value at percentile `percent` (nearest rank) of sorted `values`.
pub fn percentile(values: &[f64], percent: u32) -> f64 {
    assert!(!values.is_empty());
    assert!((1..=100).contains(&percent));
    let rank = (u64::from(percent) * values.len() as u64).div_ceil(100).max(1);
    values[rank as usize - 1]
}

/// Root mean square of the horizontal distance between two CDFs, taken at
/// every 1% step (1%..=100%).
pub fn demerit_ms(measured_sorted: &[f64], model_sorted: &[f64]) -> f64 {
    let sum: f64 = (1..=100)
        .map(|percent| {
            let distance = percentile(measured_sorted, percent) - percentile(model_sorted, percent);
            distance * distance
        })
        .sum();
    (sum / 100.0).sqrt()
}

/// Buckets of DiskSim's validation distributions (`valid/statdefs`,
/// "Physical access time" and "Trace access time": 1750 buckets, scale
/// 1000, `Start 0  step 1  grow 1`): bucket starts in microseconds, each
/// one more than the last plus 1% of it, rounded down (`stat_get_large_dist`).
const DISKSIM_BUCKETS: usize = 1750;

fn disksim_bucket_starts_us() -> Vec<i64> {
    let mut starts = Vec::with_capacity(DISKSIM_BUCKETS);
    let mut start = 0i64;
    for _ in 0..DISKSIM_BUCKETS {
        starts.push(start);
        start += 1 + start.abs() / 100;
    }
    starts
}

/// The distribution DiskSim prints for `values_ms` (`stat_update`,
/// `stat_print_large_dist`), up to the first point whose cumulative
/// fraction, printed with six decimals, reaches 1 (where `rms` stops
/// reading): (bucket start in ms, fraction of values below it).
fn disksim_distribution(values_ms: &[f64], starts_us: &[i64]) -> Vec<(f64, f64)> {
    let mut counts = vec![0u64; starts_us.len()];
    let last = starts_us.len() - 1;
    for value in values_ms {
        let micros = (value * 1000.0) as i64;
        // A value in [start k, start k+1) is counted in bucket k + 1.
        let bucket = if micros < 0 {
            0
        } else if micros >= starts_us[last - 1] {
            last
        } else {
            starts_us.partition_point(|start| *start <= micros)
        };
        counts[bucket] += 1;
    }
    let total = values_ms.len().max(1) as f64;
    let mut points = Vec::new();
    let mut cumulative = 0.0;
    for (start, count) in starts_us.iter().zip(&counts) {
        cumulative += *count as f64 / total;
        let printed = (cumulative * 1.0e6).round() / 1.0e6;
        points.push((*start as f64 / 1000.0, printed));
        if printed >= 1.0 {
            break;
        }
    }
    points
}

/// The demerit figure as DiskSim's validation computes it (`src/rms.c`
/// over the distributions of `valid/statdefs`): both service-time
/// distributions are bucketed (1 us buckets up to 0.1 ms, then 1% wider
/// each), and the horizontal distance between the two piecewise-linear
/// CDFs is taken at every 0.01% step from 0.01% to 100%; the result is the
/// RMS. Unlike [`demerit_ms`], the slowest request weighs one step in
/// 10,000, not one in 100.
pub fn demerit_disksim_ms(measured_ms: &[f64], model_ms: &[f64]) -> f64 {
    assert!(!measured_ms.is_empty() && !model_ms.is_empty());
    let starts = disksim_bucket_starts_us();
    let (one, two) = (disksim_distribution(measured_ms, &starts), disksim_distribution(model_ms, &starts));
    let at = |line: &[(f64, f64)], index: &mut usize, fraction: f64| -> f64 {
        while line[*index].1 < fraction {
            *index += 1;
        }
        let ((x0, y0), (x1, y1)) = (line[*index - 1], line[*index]);
        x0 + (fraction - y0) / (y1 - y0) * (x1 - x0)
    };
    let (mut index_one, mut index_two) = (0, 0);
    let (mut squares, mut count) = (0.0, 0u32);
    // Accumulated as rms.c does, so the last step is the same as its.
    let mut fraction = 0.0001f64;
    while fraction <= 1.0 {
        let distance = at(&one, &mut index_one, fraction) - at(&two, &mut index_two, fraction);
        squares += distance * distance;
        count += 1;
        fraction += 0.0001;
    }
    (squares / f64::from(count)).sqrt()
}

/// One value per request counted in a distribution DiskSim printed, read
/// from `path`: the "IOdriver Physical access time distribution" of an
/// `.outv` (what `rms.c` compares with the trace's), or, in a file without
/// that line, `BOUND COUNT` lines (`#` lines are comments). DiskSim counts
/// a value on the line of the first bucket bound above it, so each value is
/// put just under its line's bound: [`demerit_disksim_ms`] buckets it back
/// onto the same line, and its figure is the one `rms.c` computes from the
/// printed distribution.
pub fn read_disksim_distribution(path: &Path) -> Result<Vec<f64>, HddError> {
    /// Most requests a distribution may count (a validation run has
    /// thousands; each is kept as one value).
    const DISTRIBUTION_VALUES_MAX: usize = 1 << 24;
    const HEADER: &str = "IOdriver Physical access time distribution";
    let text =
        std::fs::read_to_string(path).map_err(|source| HddError::Io { path: path.to_path_buf(), source })?;
    let error = |line: usize, message: String| HddError::Parse {
        path: path.to_path_buf(),
        line: u32::try_from(line + 1).unwrap_or(u32::MAX),
        message,
    };
    let header = text.lines().position(|line| line.trim() == HEADER);
    let mut values = Vec::new();
    for (number, line) in text.lines().enumerate().skip(header.map_or(0, |at| at + 1)) {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut fields = line.split_whitespace();
        let bound_ms = fields.next().and_then(|field| field.parse::<f64>().ok());
        let count = fields.next().and_then(|field| field.parse::<usize>().ok());
        let (Some(bound_ms), Some(count)) = (bound_ms, count) else {
            if header.is_some() {
                break; // the next statistic of the .outv
            }
            return Err(error(number, format!("expected `BOUND_MS COUNT`, found `{line}`")));
        };
        let value_ms = if bound_ms > 0.0 { bound_ms - 0.0005 } else { -1.0 };
        // Each counted request becomes a value: a count is bounded before
        // it sizes anything.
        if count > DISTRIBUTION_VALUES_MAX - values.len() {
            return Err(error(
                number,
                format!("the counts add up past {DISTRIBUTION_VALUES_MAX} requests (`{line}`)"),
            ));
        }
        values.extend(std::iter::repeat_n(value_ms, count));
    }
    if values.is_empty() {
        return Err(error(0, format!("no distribution (neither `{HEADER}` nor `BOUND_MS COUNT` lines)")));
    }
    Ok(values)
}

impl fmt::Display for ValidateReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "validate {} against {}", self.name, self.trace.display())?;
        writeln!(f, "  requests               {}", self.request_count)?;
        writeln!(
            f,
            "  demerit_ms             {:.3}  ({:.1}% of the measured mean)",
            self.demerit_ms,
            self.demerit_relative * 100.0
        )?;
        writeln!(
            f,
            "  demerit_disksim_ms     {:.3}  (DiskSim's rms over its statdefs buckets)",
            self.demerit_disksim_ms
        )?;
        writeln!(
            f,
            "  mean_ms                measured {:.3}  model {:.3}",
            self.measured_mean_ms, self.model_mean_ms
        )?;
        writeln!(
            f,
            "  read_mean_ms           measured {:.3}  model {:.3}",
            self.measured_read_mean_ms, self.model_read_mean_ms
        )?;
        writeln!(
            f,
            "  write_mean_ms          measured {:.3}  model {:.3}",
            self.measured_write_mean_ms, self.model_write_mean_ms
        )?;
        writeln!(
            f,
            "  read_hit_rate          measured {:.3}  model {:.3}",
            self.measured_read_hit_rate, self.model_read_hit_rate
        )?;
        writeln!(f, "  write_hit_rate         model {:.3}", self.model_write_hit_rate)
    }
}

/// Seek time of the curve at `distance_cyl`, in ms (for reports and tests).
pub fn seek_curve_ms(params: &DiskParams, distance_cyl: u64) -> f64 {
    seek_ns(&params.seek, distance_cyl) as f64 / 1.0e6
}
