//! The host bus and DiskSim's bus phases: closed-form costs of cache hits,
//! bus-bound streaming, fast-write overheads, the HP C2247A's extra write
//! disconnect and minimum write seek, and what the importer reads.

use layoutd_hdd::{
    sequential_read_mb_s, Disk, DiskCompletion, DiskOp, DiskParams, DiskRequest, RequestData, Scheduler,
};
use std::path::PathBuf;

fn validation_dir() -> PathBuf {
    std::env::var_os("LAYOUTD_DISK_VALIDATION_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/disk-validation"))
}

fn drive(specs: &str) -> DiskParams {
    DiskParams::from_diskspecs(&validation_dir().join(specs)).unwrap_or_else(|e| panic!("{e}"))
}

fn request(id: u64, op: DiskOp, lba: u64, sectors: u32) -> DiskRequest {
    DiskRequest { id, op, lba, sectors }
}

/// Serve one request on an idle disk; return the completion.
fn serve(disk: &mut Disk, now_ns: u64, request: DiskRequest) -> DiskCompletion {
    disk.submit(now_ns, request);
    let done_ns = disk.next_completion_ns().expect("in service");
    disk.complete(done_ns).expect("due")
}

/// Read `sectors` at `lba` (a miss), then re-read them 50 ms later (a hit
/// once the read-ahead has stopped); returns the hit's service time.
fn hit_ns(params: &DiskParams, sectors: u32) -> u64 {
    // Read-ahead may not push the request's own data out of its segment:
    // with no "Maximum read-ahead", DiskSim prefetches until the segment is
    // full from the request's first sector.
    let mut params = params.clone();
    params.cache.request_data = RequestData::Kept;
    params.cache.read_ahead_sectors_max = 0;
    let mut disk = Disk::new(params, Scheduler::Fifo, 1, 7);
    let miss = serve(&mut disk, 0, request(0, DiskOp::Read, 1000, sectors));
    assert!(!miss.cache_hit);
    let now_ns = miss.complete_ns + 50_000_000;
    let hit = serve(&mut disk, now_ns, request(1, DiskOp::Read, 1000, sectors));
    assert!(hit.cache_hit);
    hit.complete_ns - now_ns
}

#[test]
fn a_cache_hit_grows_with_the_bus_time_per_sector() {
    let mut params = DiskParams::preset("wd800").unwrap();
    for bus_ns in [10_000u64, 50_000, 170_000] {
        params.bus_sector_ns = bus_ns;
        let one = hit_ns(&params, 1);
        let eight = hit_ns(&params, 8);
        assert_eq!(eight - one, 7 * bus_ns, "bus {bus_ns} ns/sector");
    }
    params.bus_sector_ns = 10_000;
    let slow = hit_ns(&params, 8);
    params.bus_sector_ns = 20_000;
    assert_eq!(hit_ns(&params, 8) - slow, 8 * 10_000);
}

#[test]
fn a_bus_slower_than_the_media_makes_sequential_reads_bus_bound() {
    let mut params = DiskParams::preset("st3160815as").unwrap();
    let media_mb_s = sequential_read_mb_s(&params, 0, 8192);
    // A bus at a quarter of the media rate.
    let bus_mb_s = media_mb_s / 4.0;
    params.bus_sector_ns = (512.0 / bus_mb_s * 1.0e3).round() as u64;
    let measured = sequential_read_mb_s(&params, 0, 8192);
    // Bus-bound: at most the bus rate, and short of it only by the command
    // overhead between 128 KiB requests (0.2 ms on about 6.7 ms).
    assert!(
        measured <= bus_mb_s * 1.001 && measured >= bus_mb_s * 0.95,
        "bus {bus_mb_s:.1} MB/s, measured {measured:.1} MB/s"
    );
    // A bus faster than the media leaves the media rate.
    params.bus_sector_ns = (512.0 / (media_mb_s * 4.0) * 1.0e3).round() as u64;
    let fast = sequential_read_mb_s(&params, 0, 8192);
    assert!((fast / media_mb_s - 1.0).abs() < 0.05, "media {media_mb_s:.1}, measured {fast:.1}");
}

#[test]
fn the_hp_bus_and_bus_phases_are_imported() {
    let params = drive("hp_c2247a.parv");
    // The bus the .parv puts the disk on: BUS1 (DiskSim 4.0 valid/hp_c2247a.parv).
    assert_eq!(params.bus_sector_ns, 170_100);
    assert_eq!(params.bus_write_sector_ns, 186_860);
    let interface = &params.interface;
    assert_eq!(interface.data_prep_ns, 25_190);
    assert_eq!(interface.reselect_first_ns, 162_490);
    assert_eq!(interface.read_completion_ns, 56_650);
    assert!(interface.extra_write_disconnect);
    assert_eq!(interface.extradisc_inter_disconnect_ns, 428_850);
    assert_eq!(interface.write_seek_min_ns, 600_000);
    assert_eq!(interface.read_watermark, 0.75);
    // Command overheads alone: the bus phases are no longer folded in.
    assert_eq!(params.overheads.read_hit_after_read_ns, 953_430);
    // The layout maps exactly the declared block count (zone 0's front
    // empty space is outside its spare range, as in DiskSim).
    assert_eq!(params.mapped_sector_count(), params.sector_count);
    // The Cheetah carries its bus rate in the diskspecs.
    let cheetah = drive("cheetah9LP.diskspecs");
    assert_eq!((cheetah.bus_sector_ns, cheetah.bus_write_sector_ns), (105_000, 105_000));
    assert_eq!(cheetah.interface.write_seek_min_ns, 0);
}

#[test]
fn an_hp_read_hit_costs_overhead_prep_bus_and_completion() {
    let params = drive("hp_c2247a.parv");
    // Read hit overhead + data preparation + sectors x bus + completion:
    // 0.95343 + 0.02519 + n x 0.17010 + 0.05665 ms (disksim_diskctlr.c).
    for sectors in [1u32, 2, 6] {
        let expected = 953_430 + 25_190 + u64::from(sectors) * 170_100 + 56_650;
        assert_eq!(hit_ns(&params, sectors), expected, "{sectors} sectors");
    }
}

#[test]
fn fast_writes_pay_the_write_hit_overhead_and_the_bus() {
    // The Cheetah acknowledges writes from the buffer ("Fast write level =
    // 2"): DiskSim charges the write-hit overhead whether or not the data
    // overlaps the cache.
    let params = drive("cheetah9LP.diskspecs");
    let mut disk = Disk::new(params.clone(), Scheduler::Fifo, 1, 3);
    let first = serve(&mut disk, 0, request(0, DiskOp::Write, 5_000_000, 4));
    let after_read_ns = params.overheads.write_hit_after_read_ns + 4 * params.bus_write_sector_ns;
    assert_eq!(first.complete_ns, after_read_ns);
    let now_ns = first.complete_ns + 100_000_000;
    let second = serve(&mut disk, now_ns, request(1, DiskOp::Write, 9_000_000, 4));
    let after_write_ns = params.overheads.write_hit_after_write_ns + 4 * params.bus_write_sector_ns;
    assert_eq!(second.complete_ns - now_ns, after_write_ns);
}

#[test]
fn a_write_after_a_non_sequential_write_disconnects_twice() {
    let params = drive("hp_c2247a.parv");
    let interface = params.interface.clone();
    // Same target, same platter phase at arrival: once after a read, once
    // after a write elsewhere. The extra disconnect delays the data by
    // (extradisc command + disconnect + inter-disconnect) - write overhead.
    let run = |previous: DiskOp| {
        let mut disk = Disk::new(params.clone(), Scheduler::Fifo, 1, 11);
        let warm = serve(&mut disk, 0, request(0, previous, 500_000, 1));
        let now_ns = warm.complete_ns + 200_000_000;
        serve(&mut disk, now_ns, request(1, DiskOp::Write, 600_000, 8))
    };
    let after_read = run(DiskOp::Read);
    let after_write = run(DiskOp::Write);
    assert!(after_write.seek_ns >= interface.write_seek_min_ns);
    // Both positionings start from the same cylinder; only the phases differ.
    assert_eq!(after_read.seek_distance_cyl, after_write.seek_distance_cyl);
    // The data path alone bounds each: command, (extra disconnect and
    // reselection,) data at the bus rate, disconnect, reselect, completion.
    let bus_ns = 8 * params.bus_write_sector_ns;
    let plain_ns = params.overheads.write_miss_after_read_ns
        + interface.data_prep_ns
        + bus_ns
        + interface.write_disconnect_ns
        + interface.reselect_first_ns
        + interface.write_completion_ns;
    let extra_ns = interface.extradisc_command_ns
        + interface.extradisc_disconnect_ns
        + interface.extradisc_inter_disconnect_ns
        + interface.reselect_first_ns
        + interface.data_prep_ns
        + bus_ns
        + interface.extradisc_second_disconnect_ns
        + interface.reselect_other_ns
        + interface.write_completion_ns;
    assert!(extra_ns > plain_ns);
    assert!(after_read.complete_ns - after_read.start_ns >= plain_ns);
    assert!(after_write.complete_ns - after_write.start_ns >= extra_ns);
}

#[test]
fn a_write_positions_for_at_least_the_minimum_seek_delay() {
    let params = drive("hp_c2247a.parv");
    let mut disk = Disk::new(params.clone(), Scheduler::Fifo, 1, 5);
    let first = serve(&mut disk, 0, request(0, DiskOp::Write, 700_000, 1));
    // The same track again: no seek, no head switch, no settle, but the
    // drive's minimum seek delay.
    let again = serve(&mut disk, first.complete_ns, request(1, DiskOp::Write, 700_001, 1));
    assert_eq!(again.seek_distance_cyl, 0);
    assert_eq!(again.seek_ns, params.interface.write_seek_min_ns);
    // A read of the same track pays no positioning.
    let read = serve(&mut disk, again.complete_ns, request(2, DiskOp::Read, 700_010, 1));
    assert_eq!(read.seek_ns, 0);
}
