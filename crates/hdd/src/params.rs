//! Disk parameters: what a drive is, in plain data with units in every name.
//!
//! A `DiskParams` is built by a preset or the DiskSim importer, then
//! [`DiskParams::finalize`] checks it and derives each zone's LBA range. The
//! model never mutates parameters.

use crate::{HddError, SECTOR_SIZE_BYTES};
use serde::Serialize;

/// One band of cylinders with the same number of sectors per track.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Zone {
    /// First cylinder of the zone (inclusive).
    pub first_cylinder: u32,
    /// Last cylinder of the zone (inclusive).
    pub last_cylinder: u32,
    /// Physical sectors on every track of the zone (spares included).
    pub sectors_per_track: u32,
    /// Angular offset added at every track switch, in sectors.
    pub track_skew_sectors: f64,
    /// Extra angular offset added at every cylinder switch, in sectors.
    pub cylinder_skew_sectors: f64,
    /// Angular offset of the zone's first sector, in sectors.
    pub first_sector_offset_sectors: f64,
    /// Unused space at the zone's front ("Empty space at zone front",
    /// DiskSim's `deadspace`), in LBAs: with spares in every range it
    /// covers whole ranges, spares included (`g1_ltop_sectpertrackspare`).
    pub front_empty_sectors: u64,
    /// Tracks per sparing range (0: no spares). A range covering the whole
    /// zone starts after the zone's front empty space.
    pub spare_range_tracks: u64,
    /// Spare sectors reserved in every sparing range.
    pub spare_sectors_per_range: u64,
    /// Spares sit at the front of each range (DiskSim sparing schemes 5
    /// and 6) instead of at its end.
    pub spares_at_front: bool,
    /// Slipped (skipped) physical sectors, zone-relative, sorted ascending.
    pub slips: Vec<u64>,
    /// First LBA of the zone (derived by `finalize`).
    pub first_lba: u64,
    /// LBAs the zone holds (derived by `finalize`).
    pub lba_count: u64,
}

impl Zone {
    /// Tracks in the zone.
    pub fn track_count(&self, surface_count: u32) -> u64 {
        u64::from(self.last_cylinder - self.first_cylinder + 1) * u64::from(surface_count)
    }

    /// Physical sectors in one sparing range: the whole zone after its front
    /// empty space when unspared or spared per zone, else the range's tracks.
    pub fn range_physical_sectors(&self, surface_count: u32) -> u64 {
        let tracks = self.track_count(surface_count);
        if self.spare_range_tracks == 0 || self.spare_range_tracks >= tracks {
            (tracks * u64::from(self.sectors_per_track)).saturating_sub(self.front_empty_sectors)
        } else {
            self.spare_range_tracks * u64::from(self.sectors_per_track)
        }
    }

    /// LBAs in one full sparing range.
    pub fn range_usable_sectors(&self, surface_count: u32) -> u64 {
        self.range_physical_sectors(surface_count) - self.spare_sectors_per_range
    }

    /// LBAs the zone maps, as DiskSim counts them
    /// (`dm_layout_g1_compute_blksinband`): the physical sectors, less the
    /// front empty space, less the spares of every sparing range the zone
    /// spans (ranges under the empty space count too).
    fn derive_lba_count(&self, surface_count: u32) -> u64 {
        let tracks = self.track_count(surface_count);
        let after_front =
            (tracks * u64::from(self.sectors_per_track)).saturating_sub(self.front_empty_sectors);
        let ranges = if self.spare_range_tracks == 0 || self.spare_range_tracks >= tracks {
            1
        } else {
            tracks / self.spare_range_tracks
        };
        after_front.saturating_sub(ranges * self.spare_sectors_per_range)
    }
}

/// The seek curve: time to move the arm a given number of cylinders.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum SeekCurve {
    /// Measured points, linearly interpolated (and extrapolated past the last).
    Table {
        /// Seek distances in cylinders, strictly ascending, starting at >= 1.
        distance_cyl: Vec<u32>,
        /// Seek time at each distance.
        seek_ms: Vec<f64>,
    },
    /// Ruemmler and Wilkes: `a + b*sqrt(d)` below `boundary_cyl`, `c + e*d`
    /// from there on; `first_ten_ms`, when given, overrides d = 1..=10.
    Formula {
        /// Distance where the linear part takes over.
        boundary_cyl: u32,
        /// Short-seek constant `a`.
        short_a_ms: f64,
        /// Short-seek square-root coefficient `b`.
        short_b_ms: f64,
        /// Long-seek constant `c`.
        long_c_ms: f64,
        /// Long-seek per-cylinder coefficient `e`.
        long_e_ms: f64,
        /// Measured seek times for distances 1..=10 (empty: use the formula).
        first_ten_ms: Vec<f64>,
    },
}

/// Controller overheads per command, as DiskSim splits them.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Overheads {
    /// Read served from the cache, previous command a read.
    pub read_hit_after_read_ns: u64,
    /// Read served from the cache, previous command a write.
    pub read_hit_after_write_ns: u64,
    /// Read from the media, previous command a read.
    pub read_miss_after_read_ns: u64,
    /// Read from the media, previous command a write.
    pub read_miss_after_write_ns: u64,
    /// Write overlapping cached data, previous command a read.
    pub write_hit_after_read_ns: u64,
    /// Write overlapping cached data, previous command a write.
    pub write_hit_after_write_ns: u64,
    /// Write to uncached sectors, previous command a read.
    pub write_miss_after_read_ns: u64,
    /// Write to uncached sectors, previous command a write.
    pub write_miss_after_write_ns: u64,
}

impl Overheads {
    /// Every overhead set to one value.
    pub fn uniform(ns: u64) -> Overheads {
        Overheads {
            read_hit_after_read_ns: ns,
            read_hit_after_write_ns: ns,
            read_miss_after_read_ns: ns,
            read_miss_after_write_ns: ns,
            write_hit_after_read_ns: ns,
            write_hit_after_write_ns: ns,
            write_miss_after_read_ns: ns,
            write_miss_after_write_ns: ns,
        }
    }

    /// The overhead for a command given the previous command's kind.
    pub fn pick(&self, write: bool, hit: bool, after_write: bool) -> u64 {
        match (write, hit, after_write) {
            (false, true, false) => self.read_hit_after_read_ns,
            (false, true, true) => self.read_hit_after_write_ns,
            (false, false, false) => self.read_miss_after_read_ns,
            (false, false, true) => self.read_miss_after_write_ns,
            (true, true, false) => self.write_hit_after_read_ns,
            (true, true, true) => self.write_hit_after_write_ns,
            (true, false, false) => self.write_miss_after_read_ns,
            (true, false, true) => self.write_miss_after_write_ns,
        }
    }
}

/// How far a read's prefetch runs (DiskSim "Buffer continuous read").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ReadAheadScope {
    /// 0: no prefetching.
    None,
    /// 1: to the end of the track holding the request's last sector.
    TrackEnd,
    /// 2: to the end of the cylinder holding the request's last sector.
    CylinderEnd,
    /// 3: until the segment is full.
    SegmentFull,
    /// 4 (DiskSim's DEC scheme): to the end of the track holding the block
    /// after the request, one track further when the segment already
    /// reaches back before that track (a sequential stream). Not bounded by
    /// `read_ahead_sectors_max`.
    NextTrack,
}

/// Whether prefetched data may push a read's own data out of its segment
/// (DiskSim "Read-ahead over requested").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RequestData {
    /// 1: prefetched data may replace the data just returned to the host.
    Replaceable,
    /// 0: it may not. DiskSim applies this only when no maximum read-ahead
    /// is set: prefetch then stops when the segment is full from the
    /// request's first sector on.
    Kept,
    /// -1: the request's data leaves the segment once it is sent.
    Dropped,
}

/// The on-board buffer.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CacheParams {
    /// Number of buffer segments (0 disables the cache).
    pub segment_count: u32,
    /// Sectors one segment holds.
    pub segment_sectors: u32,
    /// Most sectors read ahead past a read's end (every scope but
    /// [`ReadAheadScope::NextTrack`]); 0: a segment past it.
    pub read_ahead_sectors_max: u32,
    /// Sectors read ahead past a read's end before the arm may serve the
    /// next request.
    pub read_ahead_sectors_min: u32,
    /// How far a read's prefetch runs.
    pub read_ahead_scope: ReadAheadScope,
    /// Whether prefetch may replace the request's own data.
    pub request_data: RequestData,
    /// A read served entirely from the buffer restarts the prefetch
    /// after its segment ("Read-ahead on idle hit").
    pub read_ahead_on_idle_hit: bool,
    /// Sectors of the target track passing under the head before the
    /// first requested one (rotational latency) go into an empty segment
    /// ("Read any free blocks").
    pub read_any_free_blocks: bool,
    /// Write-back caching: a write completes once its data is in the buffer.
    pub write_cache: bool,
    /// Most cached writes not yet on the media (write-back only).
    pub write_segment_count: u32,
    /// One segment is reserved for writes; reads never use it ("Use
    /// separate write segment").
    pub dedicated_write_segment: bool,
    /// Reads may hit data that writes left in the buffer ("Allow read hits
    /// on write data").
    pub read_hits_on_write_data: bool,
    /// A read whose first sector is the one a running read-ahead is about
    /// to bring is served from the stream ("Allow almost read hits");
    /// otherwise it is a miss and goes back to the media.
    pub almost_read_hits: bool,
    /// A read whose first sectors are in the buffer (and whose rest is not
    /// being prefetched) sends them at once and reads only the rest
    /// ("Immed transfer partial hit"); otherwise it reads all of it.
    pub partial_hits: bool,
    /// A prefetch stops at once when the arm is needed; otherwise it
    /// finishes the sector under the head first ("Stop prefetch in sector").
    pub stop_prefetch_in_sector: bool,
}

impl CacheParams {
    /// A plain buffer: `segment_count` segments, prefetch up to
    /// `read_ahead_sectors_max` past each read, sliding over data already
    /// returned and resumed by a hit once it has stopped, write-through.
    pub fn segmented(segment_count: u32, segment_sectors: u32, read_ahead_sectors_max: u32) -> CacheParams {
        CacheParams {
            segment_count,
            segment_sectors,
            read_ahead_sectors_max,
            read_ahead_sectors_min: 0,
            read_ahead_scope: ReadAheadScope::SegmentFull,
            request_data: RequestData::Replaceable,
            read_ahead_on_idle_hit: true,
            read_any_free_blocks: false,
            write_cache: false,
            write_segment_count: 1,
            dedicated_write_segment: false,
            read_hits_on_write_data: true,
            almost_read_hits: true,
            partial_hits: true,
            stop_prefetch_in_sector: true,
        }
    }
}

/// Everything the model needs to know about one drive.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DiskParams {
    /// Short name (preset name or DiskSim disk name).
    pub name: String,
    /// Where the figures come from.
    pub source: String,
    /// Spindle speed.
    pub rotation_rpm: f64,
    /// Recording surfaces (heads).
    pub surface_count: u32,
    /// Cylinders, including any not covered by a zone.
    pub cylinder_count: u32,
    /// Capacity in 512-byte sectors.
    pub sector_count: u64,
    /// Zones, outermost first, in ascending cylinder order.
    pub zones: Vec<Zone>,
    /// Seek curve.
    pub seek: SeekCurve,
    /// Time to switch heads within a cylinder.
    pub head_switch_ns: u64,
    /// Extra settle time before a write after a seek or head switch
    /// (DiskSim allows it to be negative: a write settles sooner than a read).
    pub write_settle_ns: i64,
    /// Controller overheads.
    pub overheads: Overheads,
    /// Host interface (bus) time per sector read: data leaves the buffer
    /// no faster than this, overlapped with the media transfer.
    pub bus_sector_ns: u64,
    /// Host interface (bus) time per sector written into the buffer.
    pub bus_write_sector_ns: u64,
    /// Bus phases around each command: disconnect, reselection, completion.
    pub interface: Interface,
    /// On-board buffer.
    pub cache: CacheParams,
    /// Replay reads as the DiskSim 4.0 release does: every read media
    /// access starts at its first requested sector, so "Immediate buffer
    /// read" (zero-latency reads, `Interface::zero_latency_read`) and "Read
    /// any free blocks" (`CacheParams::read_any_free_blocks`) are kept as
    /// read but take no effect. Both are DiskSim's `immed` access
    /// (`disk_buffer_seekdone` sets `immed` for either), and the release's
    /// validation runs show it never shortening a latency: the DEC RZ26,
    /// the Quantum Tornado and the IBM 18ES, the drives of its validation
    /// set that set either parameter, wait half a revolution on average with
    /// no zero-latency access, where the DiskSim 3.0-era tree reads them
    /// with less latency and more transfer. DiskSim's published figures are
    /// the release's. `from_diskspecs` sets it; `false` (presets) models the
    /// parameters (`bench/results/disk-validation/README.md`, session 22).
    pub disksim_release_no_early_read: bool,
    /// What the importer accepted without modelling it, one line each
    /// (empty for presets).
    pub import_warnings: Vec<String>,
}

/// The SCSI bus phases DiskSim charges around a command's data transfer
/// (`disksim_diskctlr.c`): after the command overhead a read miss or a
/// write disconnects, the drive reselects the host when data (or buffer
/// space) is ready, transfers at the bus rate, and sends a completion
/// message. All zero for a drive whose parameters fold them into the
/// command overheads.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Interface {
    /// Preparing each data transfer (DiskSim "Data preparation overhead").
    pub data_prep_ns: u64,
    /// Reselecting the host to transfer data ("First reselect overhead").
    pub reselect_first_ns: u64,
    /// Reselecting the host for a later phase of an extra-disconnect write
    /// ("Other reselect overhead").
    pub reselect_other_ns: u64,
    /// Completion message after a read ("Read completion overhead").
    pub read_completion_ns: u64,
    /// Completion message after a write ("Write completion overhead").
    pub write_completion_ns: u64,
    /// Disconnect after a read miss's command, previous command a read.
    pub read_disconnect_after_read_ns: u64,
    /// Disconnect after a read miss's command, previous command a write.
    pub read_disconnect_after_write_ns: u64,
    /// Disconnect after a write's data is in, before the media write ends.
    pub write_disconnect_ns: u64,
    /// Sectors in the buffer before a read miss reselects, as a fraction
    /// of the request ("High (read) water mark" with "Set watermark by
    /// reqsize = 1"); at least one sector.
    pub read_watermark: f64,
    /// The drive disconnects twice on a write that follows a
    /// non-sequential write ("Extra write disconnect").
    pub extra_write_disconnect: bool,
    /// Command overhead of such a write ("Extradisc command overhead").
    pub extradisc_command_ns: u64,
    /// Its first disconnect ("Extradisc disconnect overhead").
    pub extradisc_disconnect_ns: u64,
    /// Idle time between its first disconnect and reselection
    /// ("Extradisc inter-disconnect delay").
    pub extradisc_inter_disconnect_ns: u64,
    /// Its disconnect after the data is in ("Extradisc 2nd disconnect overhead").
    pub extradisc_second_disconnect_ns: u64,
    /// Extra delay before its positioning starts ("Extradisc seek delta").
    pub extradisc_seek_delta_ns: u64,
    /// Positioning for a write takes at least this long ("Minimum seek delay").
    pub write_seek_min_ns: u64,
    /// Bus arbitration, paid each time the drive reselects the host
    /// (the `disksim_bus` "Arbitration time").
    pub bus_arbitration_ns: u64,
    /// Zero-latency reads: a read's sectors on its first track are read in
    /// the order they pass under the head ("Immediate buffer read").
    pub zero_latency_read: bool,
}

impl DiskParams {
    /// Capacity in bytes.
    pub fn capacity_bytes(&self) -> u64 {
        self.sector_count * SECTOR_SIZE_BYTES
    }

    /// One revolution.
    pub fn revolution_ns(&self) -> u64 {
        assert!(self.rotation_rpm > 0.0);
        (60.0e9 / self.rotation_rpm).round() as u64
    }

    /// LBAs the zones can map (may differ slightly from `sector_count`;
    /// LBAs past the mapped range land on the last track).
    pub fn mapped_sector_count(&self) -> u64 {
        // Zones are contiguous in LBA order (finalize derives them so).
        self.zones.last().map_or(0, |zone| zone.first_lba + zone.lba_count)
    }

    /// Check the parameters and derive every zone's LBA range.
    pub fn finalize(&mut self) -> Result<(), HddError> {
        self.check_scalars()?;
        let mut next_lba = 0u64;
        let mut previous_last: Option<u32> = None;
        for (index, zone) in self.zones.iter_mut().enumerate() {
            check_zone(index, zone, previous_last)?;
            zone.slips.sort_unstable();
            zone.first_lba = next_lba;
            zone.lba_count = zone.derive_lba_count(self.surface_count);
            next_lba += zone.lba_count;
            previous_last = Some(zone.last_cylinder);
        }
        if next_lba == 0 {
            return Err(HddError::Invalid("the zones map no sectors".into()));
        }
        // DiskSim's zones name physical cylinders, inclusive, and are not
        // checked against "Number of cylinders" (layout_g1): a zone may end
        // on cylinder `Number of cylinders`. The arm reaches every zone.
        let zones_end = previous_last.map_or(0, |last| last + 1);
        self.cylinder_count = self.cylinder_count.max(zones_end);
        if self.sector_count == 0 {
            self.sector_count = next_lba;
        }
        check_seek(&self.seek)?;
        assert_eq!(self.mapped_sector_count(), next_lba);
        assert_eq!(self.zones.iter().map(|zone| zone.lba_count).sum::<u64>(), next_lba);
        Ok(())
    }

    fn check_scalars(&self) -> Result<(), HddError> {
        let fail = |what: &str| Err(HddError::Invalid(format!("{}: {what}", self.name)));
        if !(self.rotation_rpm >= 1000.0 && self.rotation_rpm <= 30000.0) {
            return fail("rotation_rpm must be within 1000..=30000");
        }
        if self.surface_count == 0 || self.surface_count > 64 {
            return fail("surface_count must be within 1..=64");
        }
        if self.cylinder_count == 0 {
            return fail("cylinder_count must be at least 1");
        }
        if self.zones.is_empty() {
            return fail("at least one zone is needed");
        }
        if self.cache.segment_count > 256 {
            return fail("cache segment_count must be at most 256");
        }
        if self.cache.segment_count > 0 && self.cache.segment_sectors == 0 {
            return fail("cache segment_sectors must be at least 1");
        }
        self.check_times()
    }

    /// Every time the model adds up, within [`PHASE_NS_MAX`]: a parameter
    /// file's huge (or overflowed to infinity) value is refused here, by
    /// name, not met as an overflow in the model's sums.
    fn check_times(&self) -> Result<(), HddError> {
        let (o, i) = (&self.overheads, &self.interface);
        let times = [
            ("read_hit_after_read_ns", o.read_hit_after_read_ns),
            ("read_hit_after_write_ns", o.read_hit_after_write_ns),
            ("read_miss_after_read_ns", o.read_miss_after_read_ns),
            ("read_miss_after_write_ns", o.read_miss_after_write_ns),
            ("write_hit_after_read_ns", o.write_hit_after_read_ns),
            ("write_hit_after_write_ns", o.write_hit_after_write_ns),
            ("write_miss_after_read_ns", o.write_miss_after_read_ns),
            ("write_miss_after_write_ns", o.write_miss_after_write_ns),
            ("head_switch_ns", self.head_switch_ns),
            ("write_settle_ns", self.write_settle_ns.unsigned_abs()),
            ("bus_sector_ns", self.bus_sector_ns),
            ("bus_write_sector_ns", self.bus_write_sector_ns),
            ("data_prep_ns", i.data_prep_ns),
            ("reselect_first_ns", i.reselect_first_ns),
            ("reselect_other_ns", i.reselect_other_ns),
            ("read_completion_ns", i.read_completion_ns),
            ("write_completion_ns", i.write_completion_ns),
            ("read_disconnect_after_read_ns", i.read_disconnect_after_read_ns),
            ("read_disconnect_after_write_ns", i.read_disconnect_after_write_ns),
            ("write_disconnect_ns", i.write_disconnect_ns),
            ("extradisc_command_ns", i.extradisc_command_ns),
            ("extradisc_disconnect_ns", i.extradisc_disconnect_ns),
            ("extradisc_inter_disconnect_ns", i.extradisc_inter_disconnect_ns),
            ("extradisc_second_disconnect_ns", i.extradisc_second_disconnect_ns),
            ("extradisc_seek_delta_ns", i.extradisc_seek_delta_ns),
            ("write_seek_min_ns", i.write_seek_min_ns),
            ("bus_arbitration_ns", i.bus_arbitration_ns),
        ];
        match times.iter().find(|t| t.1 > PHASE_NS_MAX) {
            Some((name, ns)) => Err(HddError::Invalid(format!(
                "{}: {name} of {ns} ns is past {} s (a drive's phase takes milliseconds)",
                self.name,
                PHASE_NS_MAX / 1_000_000_000
            ))),
            None => Ok(()),
        }
    }
}

/// The largest skew (or first block offset) of a zone, in sectors: a
/// skew past a revolution only adds whole turns, and a bound keeps the
/// angle a skew times the head switches give finite.
pub const SKEW_SECTORS_MAX: f64 = 1.0e9;

/// The longest time one phase of a request (an overhead, a seek, a bus
/// transfer of a sector) may be given: 10 s.
pub const PHASE_NS_MAX: u64 = 10_000_000_000;

fn check_zone(index: usize, zone: &Zone, previous_last: Option<u32>) -> Result<(), HddError> {
    let fail = |what: String| Err(HddError::Invalid(format!("zone {index}: {what}")));
    if zone.first_cylinder > zone.last_cylinder {
        return fail("first cylinder is after last cylinder".into());
    }
    if let Some(last) = previous_last {
        if zone.first_cylinder <= last {
            return fail("zones must be in ascending, non-overlapping cylinder order".into());
        }
    }
    if zone.sectors_per_track == 0 || zone.sectors_per_track > 1_000_000 {
        return fail("sectors per track must be within 1..=1000000".into());
    }
    let range_tracks = zone.spare_range_tracks;
    let range = range_tracks.max(1) * u64::from(zone.sectors_per_track);
    if range_tracks > 0 && zone.spare_sectors_per_range >= range {
        return fail("spares fill the whole sparing range".into());
    }
    for skew in [zone.track_skew_sectors, zone.cylinder_skew_sectors, zone.first_sector_offset_sectors] {
        if !(skew.is_finite() && (0.0..=SKEW_SECTORS_MAX).contains(&skew)) {
            return fail(format!(
                "skews and the first block's offset must be within 0..={SKEW_SECTORS_MAX} sectors"
            ));
        }
    }
    Ok(())
}

fn check_seek(seek: &SeekCurve) -> Result<(), HddError> {
    let fail = |what: &str| Err(HddError::Invalid(format!("seek curve: {what}")));
    match seek {
        SeekCurve::Table { distance_cyl, seek_ms } => {
            if distance_cyl.len() < 2 || distance_cyl.len() != seek_ms.len() {
                return fail("a table needs at least two (distance, time) points");
            }
            if distance_cyl[0] == 0 || distance_cyl.windows(2).any(|w| w[0] >= w[1]) {
                return fail("distances must start at 1 or more and strictly ascend");
            }
            if seek_ms.iter().any(|t| !(t.is_finite() && *t >= 0.0 && ms_to_ns(*t) <= PHASE_NS_MAX)) {
                return fail("seek times must be non-negative and at most 10 s");
            }
        }
        SeekCurve::Formula { first_ten_ms, .. } => {
            if !(first_ten_ms.is_empty() || first_ten_ms.len() == 10) {
                return fail("first_ten_ms must hold 0 or 10 values");
            }
        }
    }
    Ok(())
}

/// Milliseconds (as DiskSim and datasheets give them) to nanoseconds.
/// A value past `u64` (a parameter file's huge number, or its product with
/// a time scale overflowing to infinity) saturates to `u64::MAX`, which
/// [`DiskParams::finalize`] refuses.
pub(crate) fn ms_to_ns(ms: f64) -> u64 {
    (ms.max(0.0) * 1.0e6).round() as u64
}

/// Sustained media rate of a zone: a cylinder takes a revolution per
/// surface plus its head switches' track skews and one cylinder skew.
pub fn zone_media_mb_s(params: &DiskParams, zone_index: usize) -> f64 {
    let zone = &params.zones[zone_index];
    let surfaces = f64::from(params.surface_count);
    let spt = f64::from(zone.sectors_per_track);
    let revolution_s = 60.0 / params.rotation_rpm;
    let skew_sectors = (surfaces - 1.0) * zone.track_skew_sectors + zone.cylinder_skew_sectors;
    let cylinder_s = surfaces * revolution_s + skew_sectors * revolution_s / spt;
    surfaces * spt * SECTOR_SIZE_BYTES as f64 / cylinder_s / 1.0e6
}
