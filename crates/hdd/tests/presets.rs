//! Closed-form expectations for every preset.

use layoutd_hdd::{
    random_read_mean_ms, seek_curve_ms, sequential_read_mb_s, show_report, zone_media_mb_s, Disk, DiskOp,
    DiskParams, DiskRequest, Scheduler,
};

fn presets() -> Vec<DiskParams> {
    DiskParams::preset_names().iter().map(|name| DiskParams::preset(name).expect("preset builds")).collect()
}

fn read(id: u64, lba: u64, sectors: u32) -> DiskRequest {
    DiskRequest { id, op: DiskOp::Read, lba, sectors }
}

/// Serve one request on an idle disk; return the completion.
fn serve(disk: &mut Disk, now_ns: u64, request: DiskRequest) -> layoutd_hdd::DiskCompletion {
    disk.submit(now_ns, request);
    let done_ns = disk.next_completion_ns().expect("in service");
    disk.complete(done_ns).expect("due")
}

#[test]
fn unknown_preset_lists_valid_names() {
    let error = DiskParams::preset("wd9999").unwrap_err().to_string();
    for name in DiskParams::preset_names() {
        assert!(error.contains(name), "{error}");
    }
}

#[test]
fn random_4k_reads_cost_seek_plus_half_rotation_plus_transfer() {
    for params in presets() {
        let report = show_report(&params);
        let mean_spt = params.mapped_sector_count() as f64
            / (params.zones.iter().map(|z| z.track_count(params.surface_count)).sum::<u64>() as f64);
        let revolution_ms = 60_000.0 / params.rotation_rpm;
        let transfer_ms = 8.0 / mean_spt * revolution_ms;
        let expected_ms = report.average_seek_ms + revolution_ms / 2.0 + transfer_ms;
        let measured_ms = random_read_mean_ms(&params, 600, 7);
        let error = (measured_ms - expected_ms).abs() / expected_ms;
        assert!(
            error < 0.10,
            "{}: random 4K read {measured_ms:.3} ms vs expected {expected_ms:.3} ms",
            params.name
        );
    }
}

#[test]
fn full_stroke_and_track_to_track_match_the_preset() {
    // (name, track-to-track ms, full-stroke ms) from the preset sources.
    let datasheet = [("wd800", 2.0, 21.0), ("st3160815as", 0.8, 17.0), ("modern7200", 0.6, 16.0)];
    for (name, track_ms, full_ms) in datasheet {
        let report = show_report(&DiskParams::preset(name).unwrap());
        assert!((report.track_to_track_seek_ms - track_ms).abs() < 0.01, "{name}: {report:?}");
        assert!(
            (report.full_stroke_seek_ms - full_ms).abs() / full_ms < 0.01,
            "{name}: {}",
            report.full_stroke_seek_ms
        );
    }
    // barracuda4g's seeks are DiskSim's measured ST32171W curve.
    let params = DiskParams::preset("barracuda4g").unwrap();
    let report = show_report(&params);
    assert!((report.track_to_track_seek_ms - 1.943).abs() < 0.001);
    let last_cylinder = u64::from(params.zones.last().unwrap().last_cylinder);
    assert!((report.full_stroke_seek_ms - seek_curve_ms(&params, last_cylinder)).abs() < 0.01);
}

#[test]
fn sequential_reads_reach_each_zones_media_rate() {
    for params in presets() {
        let zone_count = params.zones.len();
        for zone_index in [0, zone_count / 2, zone_count - 1] {
            let zone = &params.zones[zone_index];
            let expected = zone_media_mb_s(&params, zone_index);
            let sectors = (zone.lba_count / 2).min(32 * 1024);
            let measured = sequential_read_mb_s(&params, zone.first_lba, sectors);
            let error = (measured - expected).abs() / expected;
            assert!(error < 0.05, "{} zone {zone_index}: {measured:.1} MB/s vs {expected:.1}", params.name);
        }
    }
}

#[test]
fn reread_inside_the_read_ahead_window_is_a_cache_hit() {
    for params in presets() {
        let mut disk = Disk::new(params.clone(), Scheduler::Fifo, 1, 3);
        let lba = params.sector_count / 3;
        let first = serve(&mut disk, 0, read(0, lba, 8));
        assert!(!first.cache_hit);
        // Let read-ahead run for a few ms, then read just past the request.
        let later = first.complete_ns + 5_000_000;
        let ahead = serve(&mut disk, later, read(1, lba + 16, 8));
        assert!(ahead.cache_hit, "{}: read-ahead did not cover lba+16", params.name);
        assert_eq!(ahead.seek_distance_cyl, 0);
        let again = serve(&mut disk, ahead.complete_ns, read(2, lba, 8));
        assert!(again.cache_hit, "{}: re-read missed", params.name);
        assert!(again.complete_ns - again.start_ns < 2_000_000);
        let far = serve(&mut disk, again.complete_ns, read(3, lba / 2, 8));
        assert!(!far.cache_hit, "{}: a far read cannot hit", params.name);
    }
}

fn drain_random_queue(params: &DiskParams, scheduler: Scheduler) -> u64 {
    let mut disk = Disk::new(params.clone(), scheduler, 32, 11);
    let mut state = 0x1234_5678_u64;
    for id in 0..32 {
        state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let lba = (state >> 11) % (params.sector_count / 8) * 8;
        disk.submit(0, read(id, lba, 8));
    }
    let mut done = 0;
    let mut last_ns = 0;
    while let Some(at_ns) = disk.next_completion_ns() {
        let completion = disk.complete(at_ns).expect("due");
        assert!(completion.complete_ns >= last_ns);
        last_ns = completion.complete_ns;
        done += 1;
    }
    assert_eq!(done, 32);
    assert!(!disk.busy());
    last_ns
}

#[test]
fn seek_aware_schedulers_beat_fifo_on_a_random_queue_of_32() {
    for params in presets() {
        let fifo_ns = drain_random_queue(&params, Scheduler::Fifo);
        let clook_ns = drain_random_queue(&params, Scheduler::Clook);
        let sptf_ns = drain_random_queue(&params, Scheduler::Sptf);
        assert!(clook_ns < fifo_ns, "{}: C-LOOK {clook_ns} vs FIFO {fifo_ns}", params.name);
        assert!(sptf_ns < fifo_ns, "{}: SPTF {sptf_ns} vs FIFO {fifo_ns}", params.name);
    }
}

#[test]
fn same_inputs_give_same_outputs() {
    let params = DiskParams::preset("wd800").unwrap();
    let run = || {
        let mut disk = Disk::new(params.clone(), Scheduler::Sptf, 8, 5);
        let mut out = Vec::new();
        for id in 0..200u64 {
            let op = if id % 3 == 0 { DiskOp::Write } else { DiskOp::Read };
            disk.submit(
                id * 1_000_000,
                DiskRequest { id, op, lba: (id * 7_919_993) % params.sector_count, sectors: 8 },
            );
            while let Some(at_ns) = disk.next_completion_ns().filter(|at| *at <= id * 1_000_000) {
                out.push(disk.complete(at_ns).unwrap());
            }
        }
        while let Some(at_ns) = disk.next_completion_ns() {
            out.push(disk.complete(at_ns).unwrap());
        }
        out
    };
    let (first, second) = (run(), run());
    assert_eq!(first.len(), 200);
    assert_eq!(first, second);
}

#[test]
fn requests_past_the_end_are_clamped_by_submit_and_rejected_by_try_submit() {
    let params = DiskParams::preset("st3160815as").unwrap();
    let end = params.sector_count;
    let mut disk = Disk::new(params, Scheduler::Fifo, 1, 0);
    let completion = serve(&mut disk, 0, read(1, end - 4, 16));
    assert_eq!(completion.clamped_sectors, 12);
    let beyond = serve(&mut disk, completion.complete_ns, read(2, end + 100, u32::MAX));
    assert_eq!(beyond.clamped_sectors, u32::MAX);
    assert!(disk.try_submit(beyond.complete_ns, read(3, end - 4, 16)).is_err());
    assert!(disk.try_submit(beyond.complete_ns, read(4, u64::MAX, 1)).is_err());
    assert!(disk.try_submit(beyond.complete_ns, read(5, 0, 0)).is_err());
    assert!(!disk.busy());
    // The same when they wait behind the scheduler's depth (kept as
    // submitted, clamped when they move up).
    let at_ns = beyond.complete_ns;
    for r in [read(6, 0, 8), read(7, end - 4, 16), read(8, end + 100, 8)] {
        disk.submit(at_ns, r);
    }
    assert_eq!(disk.queue_len(), 2);
    let mut clamped = Vec::new();
    while let Some(t) = disk.next_completion_ns() {
        let c = disk.complete(t).unwrap();
        clamped.push((c.id, c.clamped_sectors));
    }
    assert_eq!(clamped, vec![(6, 0), (7, 12), (8, 8)]);
}

#[test]
fn write_cache_is_off_by_default_and_makes_writes_fast_when_on() {
    let mut params = DiskParams::preset("wd800").unwrap();
    assert!(!params.cache.write_cache);
    let write = DiskRequest { id: 1, op: DiskOp::Write, lba: params.sector_count / 2, sectors: 8 };
    let mut disk = Disk::new(params.clone(), Scheduler::Fifo, 1, 0);
    let through = serve(&mut disk, 0, write);
    assert!(!through.cache_hit);
    assert!(through.complete_ns - through.start_ns > 2_000_000, "a write-through write pays the seek");
    params.cache.write_cache = true;
    let mut disk = Disk::new(params, Scheduler::Fifo, 1, 0);
    let back = serve(&mut disk, 0, write);
    assert!(back.cache_hit);
    assert!(back.complete_ns - back.start_ns < 1_000_000);
    // A flush waits for the destage.
    let flush =
        serve(&mut disk, back.complete_ns, DiskRequest { id: 2, op: DiskOp::Flush, lba: 0, sectors: 0 });
    assert!(flush.complete_ns > back.complete_ns + 2_000_000);
}

/// Not a test of speed (never asserted): prints ns per request.
/// Run with `cargo test --release -p layoutd-hdd --test presets -- --ignored --nocapture`.
#[test]
#[ignore]
fn bench_ns_per_request() {
    for name in DiskParams::preset_names() {
        let params = DiskParams::preset(name).unwrap();
        for scheduler in [Scheduler::Fifo, Scheduler::Sptf] {
            let mut disk = Disk::new(params.clone(), scheduler, 32, 1);
            let count = 2_000_000u64;
            let mut state = 99u64;
            let started = std::time::Instant::now();
            let mut now_ns = 0;
            for id in 0..count {
                state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                let lba = (state >> 11) % (params.sector_count - 64);
                let op = if id % 4 == 0 { DiskOp::Write } else { DiskOp::Read };
                disk.submit(now_ns, DiskRequest { id, op, lba, sectors: 8 });
                if disk.queue_len() >= 16 {
                    now_ns = disk.next_completion_ns().unwrap();
                    disk.complete(now_ns);
                }
            }
            let ns = started.elapsed().as_nanos() as f64 / count as f64;
            println!("{name:<12} {scheduler:?}: {ns:.0} ns/request");
        }
    }
}
