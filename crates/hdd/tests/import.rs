//! What the DiskSim importer reads: zones ending on the cylinder count,
//! capacity from the zones, the host bus from a `.parv` topology, the
//! cache and prefetch parameters, and a warning for each parameter it
//! does not model.

use layoutd_hdd::{DiskParams, ReadAheadScope, RequestData};
use std::path::{Path, PathBuf};

fn validation_dir() -> PathBuf {
    std::env::var_os("LAYOUTD_DISK_VALIDATION_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/disk-validation"))
}

fn shipped(name: &str) -> String {
    std::fs::read_to_string(validation_dir().join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// The Barracuda's files, with `edit` applied to (diskspecs, model), in a
/// temporary directory; returns the directory.
fn barracuda_with(edit: impl Fn(&mut String, &mut String)) -> tempfile::TempDir {
    let (mut specs, mut model) = (shipped("barracuda.diskspecs"), shipped("barracuda.model"));
    edit(&mut specs, &mut model);
    let dir = tempfile::tempdir().unwrap();
    for (name, text) in [
        ("barracuda.diskspecs", specs),
        ("barracuda.model", model),
        ("barracuda.seek", shipped("barracuda.seek")),
        ("barracuda.parv", shipped("barracuda.parv")),
    ] {
        std::fs::write(dir.path().join(name), text).unwrap();
    }
    dir
}

fn load(path: &Path) -> DiskParams {
    DiskParams::from_diskspecs(path).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn a_zone_may_end_on_the_cylinder_count() {
    // hp_c2490a: 2629 cylinders declared, the last zone ends on cylinder
    // 2629. DiskSim does not check zones against the count (layout_g1).
    let params = load(&validation_dir().join("hp_c2490a.parv"));
    assert_eq!(params.zones.last().unwrap().last_cylinder, 2629);
    assert_eq!(params.cylinder_count, 2630);
    assert!(params.import_warnings.iter().any(|w| w.contains("Number of cylinders = 2629")));
}

#[test]
fn capacity_comes_from_the_zones_not_the_block_count() {
    let declared = load(&validation_dir().join("barracuda.diskspecs"));
    for count in ["1000", "9999999"] {
        let dir = barracuda_with(|_, model| {
            *model = model.replace("Block count = 4110000", &format!("Block count = {count}"))
        });
        let params = load(&dir.path().join("barracuda.diskspecs"));
        assert_eq!(params.sector_count, declared.sector_count, "Block count = {count}");
        assert_eq!(params.sector_count, params.mapped_sector_count());
        assert!(params.import_warnings.iter().any(|w| w.contains(&format!("Block count = {count}"))));
    }
    // DEC RZ26: one spare per track, counted under the front empty space
    // too, as DiskSim does: exactly the declared count.
    assert_eq!(load(&validation_dir().join("dec_rz26.parv")).sector_count, 2_050_860);
}

#[test]
fn the_bus_is_the_one_the_parv_puts_the_disk_on() {
    // The .parv names BUS0 (driver to controller, 0 ms) and BUS1
    // (controller to disk, 0.14841 ms per block).
    let parv = load(&validation_dir().join("hp_c2490a.parv"));
    assert_eq!((parv.bus_sector_ns, parv.bus_write_sector_ns), (148_410, 148_410));
    // The bare diskspecs has no bus: the disk's own rate (0) and a warning.
    let bare = load(&validation_dir().join("hp_c2490a.diskspecs"));
    assert_eq!(bare.bus_sector_ns, 0);
    assert!(bare.import_warnings.iter().any(|w| w.contains("no host bus")));
    assert!(!parv.import_warnings.iter().any(|w| w.contains("no host bus")));
    // Read and write times apart, and never below Bulk sector transfer time.
    let hp = load(&validation_dir().join("hp_c2247a.parv"));
    assert_eq!((hp.bus_sector_ns, hp.bus_write_sector_ns), (170_100, 186_860));
    let barracuda = load(&validation_dir().join("barracuda.parv"));
    assert_eq!(barracuda.bus_sector_ns, 134_000);
    // Swapping the topology's bus swaps the rate.
    let dir = barracuda_with(|_, _| {});
    let parv = shipped("barracuda.parv").replace(
        "Arbitration time = 0.0,\nRead block transfer time = 0.0,\nWrite block transfer time = 0.0,\nPrint stats =  1",
        "Arbitration time = 0.01,\nRead block transfer time = 0.5,\nWrite block transfer time = 0.25,\nPrint stats =  1",
    );
    std::fs::write(dir.path().join("barracuda.parv"), &parv).unwrap();
    assert!(parv.contains("Read block transfer time = 0.5"));
    let slow = load(&dir.path().join("barracuda.parv"));
    assert_eq!((slow.bus_sector_ns, slow.bus_write_sector_ns), (500_000, 250_000));
    assert_eq!(slow.interface.bus_arbitration_ns, 10_000);
}

#[test]
fn cache_and_prefetch_parameters_are_read_as_documented() {
    let barracuda = load(&validation_dir().join("barracuda.parv")).cache;
    assert_eq!(barracuda.read_ahead_scope, ReadAheadScope::SegmentFull);
    // "Read-ahead over requested = 1": prefetch may replace the data just returned.
    assert_eq!(barracuda.request_data, RequestData::Replaceable);
    let atlas = load(&validation_dir().join("atlas_III.parv")).cache;
    assert_eq!(atlas.read_ahead_scope, ReadAheadScope::NextTrack);
    // "= 0": it may not.
    assert_eq!(atlas.request_data, RequestData::Kept);
    let dec = load(&validation_dir().join("dec_rz26.parv"));
    assert_eq!(dec.cache.read_ahead_scope, ReadAheadScope::TrackEnd);
    assert!(dec.cache.dedicated_write_segment && dec.cache.read_ahead_on_idle_hit);
    assert!(dec.interface.zero_latency_read);
    // Loaded as the DiskSim 4.0 release runs it (no zero latency), and said so.
    assert!(dec.disksim_release_no_early_read);
    assert!(dec.import_warnings.iter().any(|w| w.contains("Immediate buffer read = 1")));
    let hp = load(&validation_dir().join("hp_c2247a.parv"));
    assert!(!hp.interface.zero_latency_read);
    assert!(!hp.import_warnings.iter().any(|w| w.contains("Immediate buffer read")));
    // Negative write settle is DiskSim's: writes settle sooner.
    assert_eq!(dec.write_settle_ns, -483_000);
    for (text, expected) in
        [("-1", RequestData::Dropped), ("0", RequestData::Kept), ("1", RequestData::Replaceable)]
    {
        let dir = barracuda_with(|specs, _| {
            *specs =
                specs.replace("Read-ahead over requested = 1", &format!("Read-ahead over requested = {text}"))
        });
        assert_eq!(load(&dir.path().join("barracuda.diskspecs")).cache.request_data, expected);
    }
    // "Read any free blocks" is parsed.
    let dir = barracuda_with(|specs, _| {
        *specs = specs.replace("Read any free blocks = 0", "Read any free blocks = 1")
    });
    assert!(load(&dir.path().join("barracuda.diskspecs")).cache.read_any_free_blocks);
    // "Buffer continuous read = 0" turns read-ahead off whatever its maximum.
    let dir = barracuda_with(|specs, _| {
        *specs = specs.replace("Buffer continuous read = 3", "Buffer continuous read = 0")
    });
    let off = load(&dir.path().join("barracuda.diskspecs")).cache;
    assert_eq!((off.read_ahead_scope, off.read_ahead_sectors_max), (ReadAheadScope::None, 0));
}

#[test]
fn unmodelled_and_unknown_parameters_are_warned_about_once_each() {
    let dir = barracuda_with(|specs, _| {
        *specs = specs
            .replace("Allow sneaky full read hits = 0", "Allow sneaky full read hits = 1")
            .replace("Print stats = 1,", "Print stats = 1,\n   Frobnicate level = 3,")
    });
    let params = load(&dir.path().join("barracuda.parv"));
    let about = |needle: &str| params.import_warnings.iter().filter(|w| w.contains(needle)).count();
    assert_eq!(about("Allow sneaky full read hits = 1"), 1, "{:#?}", params.import_warnings);
    assert_eq!(about("frobnicate level"), 1, "{:#?}", params.import_warnings);
    // At its neutral value an unmodelled feature is exact: no warning.
    assert_eq!(about("Allow sneaky partial"), 0);
    // Modelled parameters and those without effect on timing: none.
    assert_eq!(about("Read-ahead over requested"), 0);
    assert_eq!(about("Avg sectors per cylinder"), 0);
    assert!(params.import_warnings.iter().all(|w| !w.contains('\n')));
}

#[test]
fn a_parv_that_does_not_place_its_disk_says_what_is_missing() {
    let dir = barracuda_with(|_, _| {});
    let parv = shipped("barracuda.parv");
    // The topology's disk0 never instantiated.
    let orphan = parv.replace("instantiate [ disk0 ] as  SEAGATE_ST32171W", "");
    assert_ne!(orphan, parv);
    std::fs::write(dir.path().join("orphan.parv"), &orphan).unwrap();
    let message = DiskParams::from_diskspecs(&dir.path().join("orphan.parv")).unwrap_err().to_string();
    assert!(message.contains("orphan.parv") && message.contains("disk0"), "{message}");
    // The diskspecs not sourced: no block for the instantiated type.
    let unsourced = parv.replace("source barracuda.diskspecs", "");
    std::fs::write(dir.path().join("unsourced.parv"), &unsourced).unwrap();
    let message = DiskParams::from_diskspecs(&dir.path().join("unsourced.parv")).unwrap_err().to_string();
    assert!(message.contains("SEAGATE_ST32171W"), "{message}");
    // A topology that never closes is a syntax error at its line.
    let cut = &parv[..parv.find("] # end of system topology").unwrap()];
    std::fs::write(dir.path().join("cut.parv"), cut).unwrap();
    let message = DiskParams::from_diskspecs(&dir.path().join("cut.parv")).unwrap_err().to_string();
    assert!(message.contains("cut.parv:") && message.contains("topology"), "{message}");
}
