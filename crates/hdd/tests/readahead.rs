//! The buffer's read-ahead parameters, each as DiskSim's parameter
//! reference defines it: how far a read prefetches, whether prefetched data
//! may replace the request's own, sectors read while waiting for the first
//! one, and zero-latency reads.

use layoutd_hdd::{
    Disk, DiskCompletion, DiskOp, DiskParams, DiskRequest, Interface, Overheads, ReadAheadScope, RequestData,
    Scheduler,
};

fn read(id: u64, lba: u64, sectors: u32) -> DiskRequest {
    DiskRequest { id, op: DiskOp::Read, lba, sectors }
}

fn serve(disk: &mut Disk, now_ns: u64, request: DiskRequest) -> DiskCompletion {
    disk.submit(now_ns, request);
    let done_ns = disk.next_completion_ns().expect("in service");
    disk.complete(done_ns).expect("due")
}

/// wd800 with one segment of `segment` sectors, reading ahead at most `max`.
fn drive(segment: u32, max: u32) -> DiskParams {
    let mut params = DiskParams::preset("wd800").unwrap();
    params.cache.segment_count = 1;
    params.cache.segment_sectors = segment;
    params.cache.read_ahead_sectors_max = max;
    params.cache.read_ahead_on_idle_hit = false;
    params
}

/// A zero-latency drive without read-ahead, bus time or bus overheads: a
/// read's completion is its media's end plus the command overhead.
fn zero_latency_drive() -> DiskParams {
    let mut params = drive(512, 0);
    params.cache.read_ahead_scope = ReadAheadScope::None;
    params.bus_sector_ns = 0;
    params.interface = Interface { zero_latency_read: true, ..Interface::default() };
    params
}

/// Read `first`, wait 50 ms (the read-ahead runs to its limit), then read
/// `then`: was it a buffer hit?
fn second_hits(params: &DiskParams, first: (u64, u32), then: (u64, u32)) -> bool {
    let mut disk = Disk::new(params.clone(), Scheduler::Fifo, 1, 3);
    let miss = serve(&mut disk, 0, read(0, first.0, first.1));
    assert!(!miss.cache_hit);
    serve(&mut disk, miss.complete_ns + 50_000_000, read(1, then.0, then.1)).cache_hit
}

#[test]
fn read_ahead_over_requested_decides_whether_the_request_data_stays() {
    let mut params = drive(64, 64);
    // 1: prefetched data may replace the data just returned: 64 sectors
    // past the request push it out of the 64-sector segment.
    params.cache.request_data = RequestData::Replaceable;
    assert!(!second_hits(&params, (10_000, 8), (10_000, 8)));
    assert!(second_hits(&params, (10_000, 8), (10_060, 8)));
    // 0: it may not, which DiskSim applies only to a drive with no
    // "Maximum read-ahead" (`disk_buffer_get_max_readahead`): the prefetch
    // then stops when the segment is full from the request's first sector.
    params.cache.request_data = RequestData::Kept;
    assert!(!second_hits(&params, (10_000, 8), (10_000, 8)));
    params.cache.read_ahead_sectors_max = 0;
    assert!(second_hits(&params, (10_000, 8), (10_000, 8)));
    assert!(second_hits(&params, (10_000, 8), (10_056, 8)));
    assert!(!second_hits(&params, (10_000, 8), (10_064, 8)));
    // 10_060..10_068 is only partly there: a partial hit, or a miss
    // without "Immed transfer partial hit".
    assert!(second_hits(&params, (10_000, 8), (10_060, 8)));
    params.cache.partial_hits = false;
    assert!(!second_hits(&params, (10_000, 8), (10_060, 8)));
    // With no maximum and replaceable data, a segment past the request.
    params.cache.partial_hits = true;
    params.cache.request_data = RequestData::Replaceable;
    assert!(second_hits(&params, (10_000, 8), (10_064, 8)));
    assert!(!second_hits(&params, (10_000, 8), (10_000, 8)));
    params.cache.read_ahead_sectors_max = 64;
    // -1: the request's data leaves the segment once sent.
    params.cache.request_data = RequestData::Dropped;
    assert!(!second_hits(&params, (10_000, 8), (10_000, 8)));
    assert!(second_hits(&params, (10_000, 8), (10_008, 8)));
}

#[test]
fn continuous_read_bounds_the_prefetch() {
    let mut params = drive(4096, 4096);
    let spt = u64::from(params.zones[0].sectors_per_track);
    // Sector 0 of the second track: one track past a read at LBA 0.
    let next_track = (spt, 1);
    params.cache.read_ahead_scope = ReadAheadScope::None;
    assert!(!second_hits(&params, (0, 1), (1, 1)));
    params.cache.read_ahead_scope = ReadAheadScope::TrackEnd;
    assert!(second_hits(&params, (0, 1), (spt - 1, 1)));
    assert!(!second_hits(&params, (0, 1), next_track));
    params.cache.read_ahead_scope = ReadAheadScope::SegmentFull;
    assert!(second_hits(&params, (0, 1), next_track));
    // The maximum read-ahead bounds every scope but the DEC scheme.
    params.cache.read_ahead_sectors_max = 16;
    assert!(second_hits(&params, (0, 1), (16, 1)));
    assert!(!second_hits(&params, (0, 1), (17, 1)));
    params.cache.read_ahead_scope = ReadAheadScope::NextTrack;
    assert!(second_hits(&params, (0, 1), (spt - 1, 1)));
    assert!(!second_hits(&params, (0, 1), next_track));
}

#[test]
fn the_dec_scheme_reads_to_the_track_end_and_the_segment_keeps_its_last_sectors() {
    // DiskSim's scheme 4 ignores "Maximum read-ahead"; a 64-sector segment
    // keeps the last 64 sectors read (`disk_buffer_segment_wrap`), so a read
    // far from its track's end loses its own data and its successors,
    // while the track's last sectors stay.
    let mut params = drive(64, 64);
    params.cache.read_ahead_scope = ReadAheadScope::NextTrack;
    params.cache.request_data = RequestData::Kept;
    let spt = u64::from(params.zones[0].sectors_per_track);
    assert!(spt > 200, "wd800's outer tracks are long");
    let start = 10 * spt;
    assert!(!second_hits(&params, (start, 8), (start + 8, 8)));
    assert!(!second_hits(&params, (start, 8), (start, 8)));
    assert!(second_hits(&params, (start, 8), (start + spt - 8, 8)));
    // Near the track's end, the successor is still in the segment.
    assert!(second_hits(&params, (start + spt - 40, 8), (start + spt - 32, 8)));
}

#[test]
fn read_any_free_blocks_keeps_what_passed_before_the_first_sector() {
    let mut params = drive(512, 0);
    params.cache.read_ahead_scope = ReadAheadScope::None;
    let spt = u64::from(params.zones[0].sectors_per_track);
    // The last sector of the track: the head lands before it on the track
    // and sees some of the sectors ahead of it pass.
    let target = spt - 1;
    let hits_before = |params: &DiskParams| {
        (0..8u64)
            .filter(|seed| {
                let mut disk = Disk::new(params.clone(), Scheduler::Fifo, 1, *seed);
                let miss = serve(&mut disk, 0, read(0, target, 1));
                serve(&mut disk, miss.complete_ns + 50_000_000, read(1, target - 1, 1)).cache_hit
            })
            .count()
    };
    assert_eq!(hits_before(&params), 0);
    params.cache.read_any_free_blocks = true;
    assert!(hits_before(&params) > 0);
    // As the DiskSim 4.0 release runs it: the parameter stays, nothing
    // before the first sector is kept.
    params.disksim_release_no_early_read = true;
    assert_eq!(hits_before(&params), 0);
}

#[test]
fn a_zero_latency_read_never_takes_longer_and_sometimes_less() {
    let mut params = drive(512, 0);
    params.cache.read_ahead_scope = ReadAheadScope::None;
    let spt = params.zones[0].sectors_per_track;
    // A bus four times the media rate: the data goes out in order, so the
    // early sectors only help once the bus has caught up with the media.
    params.bus_sector_ns = params.revolution_ns() / u64::from(spt) / 4;
    // Half-track reads at track starts, each on an idle disk, arriving at
    // different platter phases.
    let total = |params: &DiskParams| -> Vec<u64> {
        (0..200u64)
            .map(|id| {
                let mut disk = Disk::new(params.clone(), Scheduler::Fifo, 1, 5);
                let now_ns = id * 137_000;
                let done = serve(&mut disk, now_ns, read(id, (id * 7919 % 1000) * u64::from(spt), spt / 2));
                done.complete_ns - now_ns
            })
            .collect()
    };
    let plain = total(&params);
    params.interface.zero_latency_read = true;
    let zero_latency = total(&params);
    assert!(plain.iter().zip(&zero_latency).all(|(p, z)| z <= p));
    assert!(plain.iter().zip(&zero_latency).any(|(p, z)| z < p));
    // As the DiskSim 4.0 release runs it: the parameter stays, every read
    // waits for its first sector.
    params.disksim_release_no_early_read = true;
    assert_eq!(total(&params), plain);
}

#[test]
fn a_zero_latency_read_still_needs_a_revolution_for_a_whole_track() {
    // Every sector of a whole-track read passes under the head after it
    // lands, so the media takes at least one revolution from landing
    // (DiskSim rounds the landing point up to the next sector start; the
    // sector the head lands in is read on the next pass).
    let params = zero_latency_drive();
    let spt = params.zones[0].sectors_per_track;
    // One revolution in whole sector times (the model rounds a sector's
    // time down to the nanosecond).
    let revolution_ns = params.revolution_ns() / u64::from(spt) * u64::from(spt);
    let floor_ns = params.overheads.pick(false, false, false) + revolution_ns;
    for id in 0..300u64 {
        let mut disk = Disk::new(params.clone(), Scheduler::Fifo, 1, id);
        let now_ns = id * 7_919;
        let done = serve(&mut disk, now_ns, read(id, 0, spt));
        assert!(
            done.complete_ns - now_ns >= floor_ns,
            "arrival {now_ns}: {} ns, under {floor_ns}",
            done.complete_ns - now_ns
        );
    }
}

#[test]
fn a_zero_latency_read_starts_at_once_on_every_track_it_covers() {
    // DiskSim decides zero latency at each landing (`disk_buffer_seekdone`
    // runs after every seek and head switch of a read), not only the first:
    // a read of two whole tracks takes one revolution on each from its
    // landing there, whatever the platter's phase when the head reaches the
    // second track.
    let params = zero_latency_drive();
    let spt = params.zones[0].sectors_per_track;
    assert!(params.surface_count >= 2, "lba 0 .. 2 tracks stays on cylinder 0");
    let sector_ns = params.revolution_ns() / u64::from(spt);
    // Up to a sector to the first boundary on each track, one revolution
    // on each, and the head switch between them.
    let ceiling_ns = params.overheads.pick(false, false, false)
        + 2 * (params.revolution_ns() + sector_ns)
        + params.head_switch_ns;
    for id in 0..300u64 {
        let mut disk = Disk::new(params.clone(), Scheduler::Fifo, 1, id);
        let now_ns = id * 7_919;
        let done = serve(&mut disk, now_ns, read(id, 0, 2 * spt));
        assert!(
            done.complete_ns - now_ns <= ceiling_ns,
            "arrival {now_ns}: {} ns, over {ceiling_ns}",
            done.complete_ns - now_ns
        );
    }
}

#[test]
fn a_partial_hit_reads_the_rest_only_after_the_read_miss_overhead() {
    // DiskSim sets `overhead_done` to the read-miss overhead for every read,
    // hit or not (`disk_read_arrive`), and `disk_check_hda` holds the seek
    // until then: the buffered sectors leave after the (here shorter) hit
    // overhead, the rest is read no earlier than the miss overhead.
    let mut params = drive(512, 0);
    params.cache.read_ahead_scope = ReadAheadScope::None;
    params.cache.partial_hits = true;
    let miss_ns = 3 * params.revolution_ns();
    params.overheads = Overheads { read_miss_after_read_ns: miss_ns, ..Overheads::uniform(0) };
    let mut disk = Disk::new(params.clone(), Scheduler::Fifo, 1, 1);
    let first = serve(&mut disk, 0, read(0, 0, 8));
    assert!(!first.cache_hit);
    let now_ns = first.complete_ns + 1_000_000;
    let partial = serve(&mut disk, now_ns, read(1, 0, 16));
    assert!(partial.cache_hit);
    assert!(partial.complete_ns - now_ns >= miss_ns, "{} ns", partial.complete_ns - now_ns);
}

#[test]
fn a_read_reselects_when_its_watermark_is_in_the_buffer_not_after_an_average_sector() {
    // DiskSim reconnects once `watermark` sectors are in the buffer, in
    // order, and its held bus then sends each sector as it is read. With a
    // bus of 1/16 revolution a sector, a read whose watermark lies
    // before its head switch ends the bus time of all its sectors after
    // that watermark sector, however long the switch (the second track's
    // data is in long before the bus wants it).
    let mut params = drive(512, 0);
    params.cache.read_ahead_scope = ReadAheadScope::None;
    assert!(params.surface_count >= 2);
    let spt = params.zones[0].sectors_per_track;
    params.bus_sector_ns = params.revolution_ns() / 16;
    params.interface = Interface { read_watermark: 0.75, ..Interface::default() };
    // The last 40 sectors of track 0, then 10 on track 1: the watermark
    // (37 sectors) is on track 0.
    let request = read(0, u64::from(spt) - 40, 50);
    let took = |head_switch_ns: u64| -> u64 {
        let mut params = params.clone();
        params.head_switch_ns = head_switch_ns;
        let mut disk = Disk::new(params, Scheduler::Fifo, 1, 4);
        serve(&mut disk, 0, request).complete_ns
    };
    assert_eq!(took(500_000), took(2_000_000));
}

#[test]
fn a_write_starts_once_its_first_sector_is_in_even_when_the_bus_is_slower_than_the_media() {
    // DiskSim writes each sector as it passes under the head if its data
    // is in the buffer (`disk_buffer_block_available` at every sector) and
    // loses a revolution where the media overtakes the bus; it does not
    // hold the media back until the rest could stream behind it.
    let mut params = drive(512, 0);
    params.cache.write_cache = false;
    params.overheads = Overheads::uniform(0);
    params.interface = Interface::default();
    let spt = params.zones[0].sectors_per_track;
    let revolution_ns = params.revolution_ns();
    params.bus_write_sector_ns = 2 * revolution_ns / u64::from(spt);
    for id in 0..50u64 {
        let mut disk = Disk::new(params.clone(), Scheduler::Fifo, 1, id);
        let now_ns = id * 7_919;
        let done =
            serve(&mut disk, now_ns, DiskRequest { id, op: DiskOp::Write, lba: 0, sectors: 3 * spt / 2 });
        let first_in_ns = now_ns + params.bus_write_sector_ns;
        let first_sector_ns = now_ns + done.seek_ns + done.rotation_ns;
        assert!(
            first_sector_ns < first_in_ns + revolution_ns,
            "arrival {now_ns}: first sector at {first_sector_ns}"
        );
    }
}
