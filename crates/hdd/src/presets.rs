//! Built-in drives, each with its sources written beside its figures.
//!
//! Datasheets give rotation speed, capacity, buffer size, average /
//! track-to-track / full-stroke seek and the sustained media rate; they do not
//! give zone tables, skews or controller overheads. Where a figure is assumed
//! rather than published, the comment says so. Synthetic presets get evenly
//! sized zones whose sustained rate falls linearly from the outer to the
//! inner figure, skews that just cover a head switch or a one-cylinder seek,
//! and a Ruemmler-Wilkes seek curve fitted to the three seek figures.

use crate::diskspecs;
use crate::params::{ms_to_ns, CacheParams, DiskParams, Interface, Overheads, Zone};
use crate::seek::fit_formula;
use crate::{HddError, SECTOR_SIZE_BYTES};
use std::path::Path;

/// Names accepted by [`DiskParams::preset`].
pub const PRESET_NAMES: &[&str] = &["wd800", "st3160815as", "barracuda4g", "modern7200"];

/// A datasheet-level description from which a full parameter set is built.
struct Datasheet {
    name: &'static str,
    source: &'static str,
    rotation_rpm: f64,
    surface_count: u32,
    sector_count: u64,
    outer_mb_s: f64,
    inner_mb_s: f64,
    zone_count: u32,
    track_to_track_ms: f64,
    full_stroke_ms: f64,
    average_seek_ms: f64,
    head_switch_ms: f64,
    write_settle_ms: f64,
    overhead_ms: f64,
    bus_mb_s: f64,
    cache_bytes: u64,
    segment_count: u32,
}

fn wd800() -> Datasheet {
    Datasheet {
        name: "wd800",
        source: "Western Digital WD800 Caviar SE (WD800JD), as used in Lifchits 2008 (seeds/000, sec. 5.1): \
                 7200 RPM, 9.5 ms average seek, 8 MB cache, 80 GB, 66.7 MB/s UDMA; \
                 WD Caviar SE spec sheet: 2.0 ms track-to-track, 21 ms full stroke",
        rotation_rpm: 7200.0,      // thesis sec. 5.1
        surface_count: 2,          // one 80 GB platter, two heads (WD800JD)
        sector_count: 156_301_488, // 80 GB drive LBA count (IDEMA: 97696368 + 1953504*(80-50))
        outer_mb_s: 61.0,          // assumed: typical measured outer rate of 80 GB/platter drives
        inner_mb_s: 33.0,          // assumed: about 0.55 x outer, as zoned recording gives
        zone_count: 16,            // assumed
        track_to_track_ms: 2.0,    // WD Caviar SE spec sheet (read)
        full_stroke_ms: 21.0,      // WD Caviar SE spec sheet
        average_seek_ms: 9.5,      // thesis sec. 5.1 (spec sheet: 8.9 read)
        head_switch_ms: 1.0,       // assumed (not published)
        write_settle_ms: 0.0,      // spec sheet's write seek exceeds read by ~1 ms; not modelled
        overhead_ms: 0.2,          // assumed controller overhead
        bus_mb_s: 66.7,            // thesis sec. 5.1: "66.7 MB/s UDMA"
        cache_bytes: 8 << 20,      // thesis sec. 5.1: 8 MB cache
        segment_count: 16,         // assumed
    }
}

fn st3160815as() -> Datasheet {
    Datasheet {
        name: "st3160815as",
        source: "Seagate Barracuda 7200.10 ST3160815AS (SSR-LFS slides, seeds/003, SYSTOR 2010); \
                 Barracuda 7200.10 product manual: 7200 RPM, 8 MB cache, 160 GB, SATA 3 Gb/s, \
                 8.5 ms average read seek, 0.8 ms track-to-track, 78 MB/s max sustained",
        rotation_rpm: 7200.0,      // product manual
        surface_count: 2,          // one 160 GB platter (7200.10 family)
        sector_count: 312_581_808, // 160 GB drive LBA count (product manual)
        outer_mb_s: 78.0,          // product manual: max sustained transfer rate
        inner_mb_s: 42.0,          // assumed: about 0.55 x outer
        zone_count: 24,            // assumed
        track_to_track_ms: 0.8,    // product manual (read)
        full_stroke_ms: 17.0,      // assumed: typical of 3.5" 7200 RPM drives of 2006
        average_seek_ms: 8.5,      // product manual (read)
        head_switch_ms: 0.8,       // assumed (not published)
        write_settle_ms: 0.2,      // manual: write seeks ~0.2 ms above reads (track-to-track)
        overhead_ms: 0.15,         // assumed controller overhead
        bus_mb_s: 300.0,           // SATA 3 Gb/s
        cache_bytes: 8 << 20,      // product manual: 8 MB
        segment_count: 16,         // assumed
    }
}

fn modern7200() -> Datasheet {
    Datasheet {
        name: "modern7200",
        source: "Seagate Exos 7E8 8 TB (ST8000NM000A) data sheet: 7200 RPM, 256 MB cache, \
                 249 MB/s max sustained, 4.16 ms average latency, SATA 6 Gb/s; seek figures are \
                 typical of the class (the data sheet gives none)",
        rotation_rpm: 7200.0,         // data sheet
        surface_count: 8,             // assumed: 4 platters, 8 heads
        sector_count: 15_628_053_168, // 8 TB drive LBA count (IDEMA LBA1-03)
        outer_mb_s: 249.0,            // data sheet: max sustained transfer rate
        inner_mb_s: 120.0,            // assumed: about half the outer rate
        zone_count: 32,               // assumed
        track_to_track_ms: 0.6,       // assumed: typical of current 3.5" drives
        full_stroke_ms: 16.0,         // assumed
        average_seek_ms: 8.5,         // assumed: typical quoted read seek for the class
        head_switch_ms: 0.5,          // assumed
        write_settle_ms: 0.1,         // assumed
        overhead_ms: 0.05,            // assumed controller overhead
        bus_mb_s: 600.0,              // SATA 6 Gb/s
        cache_bytes: 256 << 20,       // data sheet: 256 MB
        segment_count: 32,            // assumed
    }
}

/// Build a named preset.
pub fn preset(name: &str) -> Result<DiskParams, HddError> {
    let mut params = match name {
        "wd800" => from_datasheet(&wd800()),
        "st3160815as" => from_datasheet(&st3160815as()),
        "modern7200" => from_datasheet(&modern7200()),
        "barracuda4g" => barracuda4g()?,
        _ => return Err(HddError::UnknownPreset { name: name.to_string(), valid: PRESET_NAMES.join(", ") }),
    };
    params.finalize()?;
    Ok(params)
}

/// The DCD paper's disk (seeds/001: "a 4 GB, high performance Seagate
/// Barracuda"): the Barracuda 4LP ST34371W, which shares platters,
/// mechanism and electronics with the 2 GB ST32171W that DiskSim's validation
/// set measured, with 10 heads instead of 5. So: the ST32171W's DiskSim
/// parameters (embedded from shared/disk-validation, CMU PDL DiskSim 4.0
/// `valid/`) with the surface count doubled and write-back caching off (this
/// crate's default; the validation drive had it on).
fn barracuda4g() -> Result<DiskParams, HddError> {
    let read = |path: &Path| -> Result<String, HddError> {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        Ok(match name {
            "barracuda.diskspecs" => include_str!("../data/barracuda.diskspecs"),
            "barracuda.model" => include_str!("../data/barracuda.model"),
            "barracuda.seek" => include_str!("../data/barracuda.seek"),
            _ => {
                return Err(HddError::Invalid(format!("embedded file {name:?} missing")));
            }
        }
        .to_string())
    };
    let mut params = diskspecs::load_with(Path::new("barracuda.diskspecs"), &read)?;
    params.name = "barracuda4g".into();
    params.source = "Seagate Barracuda 4LP ST34371W class (DCD paper, seeds/001): DiskSim's measured \
                     ST32171W parameters (CMU PDL DiskSim 4.0 valid/barracuda.*) with 10 heads instead of 5"
        .into();
    params.surface_count = 10;
    params.sector_count = 0; // derive from the zones: about 8.2 M sectors, 4.2 GB
    params.cache.write_cache = false;
    // The preset states its departures here; the importer's notes about the
    // validation files (no .parv bus, declared block count) do not apply.
    params.import_warnings.clear();
    // The validation rig's host interface moved 0.134 ms per sector; the
    // ST34371W is an Ultra SCSI wide drive: 40 MB/s, 12.8 us per sector.
    params.bus_sector_ns = 12_800;
    params.bus_write_sector_ns = 12_800;
    for zone in &mut params.zones {
        // Spare ranges count tracks: keep the same spares per cylinder range.
        zone.spare_range_tracks *= 2;
        zone.spare_sectors_per_range *= 2;
    }
    Ok(params)
}

fn from_datasheet(sheet: &Datasheet) -> DiskParams {
    assert!(sheet.outer_mb_s >= sheet.inner_mb_s);
    assert!(sheet.zone_count >= 1);
    let revolution_ms = 60_000.0 / sheet.rotation_rpm;
    let zone_spt: Vec<u32> = (0..sheet.zone_count)
        .map(|index| {
            let fraction = f64::from(index) / f64::from((sheet.zone_count - 1).max(1));
            let mb_s = sheet.outer_mb_s + (sheet.inner_mb_s - sheet.outer_mb_s) * fraction;
            // A track takes a revolution plus its share of the cylinder's
            // switch skews: (surfaces - 1) head switches and one cylinder switch.
            let surfaces = f64::from(sheet.surface_count);
            let cylinder_switch_ms = sheet.track_to_track_ms.max(sheet.head_switch_ms);
            let skew_ms = ((surfaces - 1.0) * sheet.head_switch_ms + cylinder_switch_ms) / surfaces;
            let bytes_per_track = mb_s * 1.0e6 * (revolution_ms + skew_ms) / 1000.0;
            (bytes_per_track / SECTOR_SIZE_BYTES as f64).ceil() as u32
        })
        .collect();
    let spt_sum: u64 = zone_spt.iter().map(|spt| u64::from(*spt)).sum();
    let per_zone_cyl = sheet.sector_count.div_ceil(u64::from(sheet.surface_count) * spt_sum) as u32;
    let cylinder_count = per_zone_cyl * sheet.zone_count;
    let zones = zone_spt
        .iter()
        .enumerate()
        .map(|(index, spt)| {
            let sector_ms = revolution_ms / f64::from(*spt);
            Zone {
                first_cylinder: index as u32 * per_zone_cyl,
                last_cylinder: (index as u32 + 1) * per_zone_cyl - 1,
                sectors_per_track: *spt,
                track_skew_sectors: (sheet.head_switch_ms / sector_ms).ceil() + 1.0,
                cylinder_skew_sectors: (sheet.track_to_track_ms.max(sheet.head_switch_ms) / sector_ms).ceil()
                    + 1.0,
                first_sector_offset_sectors: 0.0,
                front_empty_sectors: 0,
                spare_range_tracks: 0,
                spare_sectors_per_range: 0,
                spares_at_front: false,
                slips: Vec::new(),
                first_lba: 0,
                lba_count: 0,
            }
        })
        .collect();
    let segment_sectors = (sheet.cache_bytes / SECTOR_SIZE_BYTES / u64::from(sheet.segment_count)) as u32;
    DiskParams {
        name: sheet.name.to_string(),
        source: sheet.source.to_string(),
        rotation_rpm: sheet.rotation_rpm,
        surface_count: sheet.surface_count,
        cylinder_count,
        sector_count: sheet.sector_count,
        zones,
        seek: fit_formula(
            cylinder_count,
            sheet.track_to_track_ms,
            sheet.full_stroke_ms,
            sheet.average_seek_ms,
        ),
        head_switch_ns: ms_to_ns(sheet.head_switch_ms),
        write_settle_ns: ms_to_ns(sheet.write_settle_ms) as i64,
        overheads: Overheads::uniform(ms_to_ns(sheet.overhead_ms)),
        bus_sector_ns: (SECTOR_SIZE_BYTES as f64 / sheet.bus_mb_s * 1.0e3).round() as u64,
        bus_write_sector_ns: (SECTOR_SIZE_BYTES as f64 / sheet.bus_mb_s * 1.0e3).round() as u64,
        interface: Interface::default(),
        cache: CacheParams::segmented(sheet.segment_count, segment_sectors, segment_sectors),
        disksim_release_no_early_read: false,
        import_warnings: Vec::new(),
    }
}

impl DiskParams {
    /// A built-in drive by name; the error lists the valid names.
    pub fn preset(name: &str) -> Result<DiskParams, HddError> {
        preset(name)
    }

    /// Names accepted by [`DiskParams::preset`].
    pub fn preset_names() -> &'static [&'static str] {
        PRESET_NAMES
    }

    /// A drive from a DiskSim `.parv` (which sources the `.diskspecs` and
    /// puts the disk on its host bus in its `topology`) or a bare
    /// `.diskspecs`, with the `.model` it sources and the `.seek` curve the
    /// model names (paths relative to each file). Errors name the file and
    /// line and say what to fix; parameters accepted without being modelled
    /// are listed in [`DiskParams::import_warnings`], one line each.
    pub fn from_diskspecs(path: &Path) -> Result<DiskParams, HddError> {
        diskspecs::load(path)
    }

    /// The drive a command names by a preset or a DiskSim file (at most
    /// one of them; `None` if neither), its import warnings printed on
    /// stderr, one `warning:` line each: what every command that takes a
    /// disk calls, so none accepts a parameter in silence.
    pub fn named(preset: Option<&str>, diskspecs: Option<&Path>) -> Result<Option<DiskParams>, HddError> {
        let params = match (preset, diskspecs) {
            (Some(name), None) => DiskParams::preset(name)?,
            (None, Some(path)) => DiskParams::from_diskspecs(path)?,
            (None, None) => return Ok(None),
            (Some(_), Some(path)) => {
                return Err(HddError::Parse {
                    path: path.to_path_buf(),
                    line: 0,
                    message: "a preset and a DiskSim file were both given; name one disk".into(),
                })
            }
        };
        for warning in &params.import_warnings {
            eprintln!("warning: {warning}");
        }
        Ok(Some(params))
    }
}
