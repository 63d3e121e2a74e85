//! The disk: mechanism, buffer and queue on a virtual clock.
//!
//! Call order: [`Disk::submit`] any time; when [`Disk::next_completion_ns`]
//! is `Some(t)`, advance the clock to `t` and call [`Disk::complete`], which
//! pops the finished request and starts the next. Service is computed in full
//! when a request starts, so each call is O(queue depth + tracks touched).
//!
//! The arm has one timeline (`mechanism_free_ns`): reads, write-through
//! writes and write-back destages take it in turn. Read-ahead after a read
//! runs on the arm until the next command needs it.

use crate::cache::{Cache, ReadLookup};
use crate::geometry::{map, rotation_wait_ns, Pbn};
use crate::params::{DiskParams, ReadAheadScope, RequestData};
use crate::queue::{Pending, Queue, Scheduler};
use crate::seek::seek_ns;
use crate::{DiskCompletion, DiskOp, DiskRequest, HddError};

/// Most write-back writes tracked as not yet on the media.
const DESTAGE_SLOTS_MAX: usize = 64;

/// What one media access cost.
#[derive(Clone, Copy, Debug, Default)]
struct Access {
    end_ns: u64,
    seek_ns: u64,
    rotation_ns: u64,
    distance_cyl: u64,
    /// Zone of the last sector transferred.
    end_zone_index: u32,
    /// When the first `watermark` sectors of a read (as asked of
    /// `media_access`) are in the buffer in order.
    watermark_ns: u64,
    /// The earliest a read's data can all be on the bus if the bus were
    /// free from the start: each sector leaves one bus time after the later
    /// of its arrival in order and the previous sector's departure
    /// (DiskSim's held bus resumes as each sector is read,
    /// `disk_buffer_request_complete` requeues `outwait`). Sectors a
    /// zero-latency read took in ahead of the track's first one are in
    /// order only once the track's run ends.
    bus_floor_ns: u64,
}

/// What a media access feeds or is fed by besides the platter.
#[derive(Clone, Copy, Debug)]
enum Feed {
    /// A read: report when its first `watermark` sectors are in the
    /// buffer (0: not wanted).
    Read { watermark: u64 },
    /// A write: sector `i` (from 0) can be written once its data and the
    /// `buffered` first sectors' are in, the bus bringing one sector every
    /// `bus_ns` from `data_start_ns`.
    Write { data_start_ns: u64, bus_ns: u64, buffered: u64 },
}

impl Feed {
    /// When the data of sector `index` of a write is in the buffer.
    fn data_in_ns(self, index: u64) -> u64 {
        match self {
            Feed::Read { .. } => 0,
            Feed::Write { data_start_ns, bus_ns, buffered } => {
                data_start_ns + (index + 1).max(buffered) * bus_ns
            }
        }
    }
}

/// A hard disk: model, on-board cache and request queue.
pub struct Disk {
    params: DiskParams,
    scheduler: Scheduler,
    queue_depth: u32,
    revolution_ns: u64,
    /// Platter phase at time 0, from the seed: angle = (now + phase) / revolution.
    phase_ns: u64,
    queue: Queue,
    /// Per zone: sector time of a long sequential read (read-ahead pace).
    streaming_sector_ns: Vec<u64>,
    in_service: Option<DiskCompletion>,
    cache: Cache,
    head_cylinder: u32,
    head_surface: u32,
    mechanism_free_ns: u64,
    last_was_write: bool,
    /// LBA just past the previous write (extra-disconnect detection).
    last_write_end_lba: u64,
    last_arrival_ns: u64,
    /// End times of write-back destages, ascending (a ring would do; this is tiny).
    destage_end_ns: [u64; DESTAGE_SLOTS_MAX],
    destage_count: usize,
    busy_ns_total: u64,
    served_count: u64,
    hit_count: u64,
}

impl Disk {
    /// A disk in its initial state: idle, head on cylinder 0, cache empty.
    /// `queue_depth` bounds how many queued requests the scheduler compares
    /// (the drive's tagged queue); `seed` sets the platter's phase at time 0.
    pub fn new(params: DiskParams, scheduler: Scheduler, queue_depth: u32, seed: u64) -> Disk {
        assert!(params.mapped_sector_count() > 0, "DiskParams must be finalized");
        assert!(queue_depth >= 1, "queue_depth must be at least 1");
        let revolution_ns = params.revolution_ns();
        let cache = Cache::new(
            params.cache.segment_count,
            params.cache.segment_sectors,
            params.cache.dedicated_write_segment,
            params.cache.read_hits_on_write_data,
            params.cache.almost_read_hits,
            params.cache.partial_hits,
        );
        let streaming_sector_ns = (0..params.zones.len())
            .map(|index| {
                let mb_s = crate::params::zone_media_mb_s(&params, index);
                ((crate::SECTOR_SIZE_BYTES as f64 / mb_s * 1.0e3) as u64).max(1)
            })
            .collect();
        Disk {
            streaming_sector_ns,
            scheduler,
            queue_depth,
            revolution_ns,
            phase_ns: splitmix64(seed) % revolution_ns,
            queue: Queue::new(queue_depth),
            in_service: None,
            cache,
            head_cylinder: 0,
            head_surface: 0,
            mechanism_free_ns: 0,
            last_was_write: false,
            last_write_end_lba: u64::MAX,
            last_arrival_ns: 0,
            destage_end_ns: [0; DESTAGE_SLOTS_MAX],
            destage_count: 0,
            busy_ns_total: 0,
            served_count: 0,
            hit_count: 0,
            params,
        }
    }

    /// The parameters this disk runs with.
    pub fn params(&self) -> &DiskParams {
        &self.params
    }

    /// Enqueue a request at `now_ns` (times must not go backwards; an earlier
    /// time is taken as the latest seen). Requests running past the end of the
    /// disk are clamped, never rejected: the completion reports
    /// `clamped_sectors`. Use [`Disk::try_submit`] to reject them instead.
    pub fn submit(&mut self, now_ns: u64, request: DiskRequest) {
        let arrival_ns = now_ns.max(self.last_arrival_ns);
        self.last_arrival_ns = arrival_ns;
        self.queue.push(&self.params, request, arrival_ns);
        if self.in_service.is_none() {
            self.start_next(arrival_ns);
        }
    }

    /// Like [`Disk::submit`], but a request past the end of the disk, a
    /// read or write of zero sectors, or a flush with sectors is an error.
    pub fn try_submit(&mut self, now_ns: u64, request: DiskRequest) -> Result<(), HddError> {
        let end = request.lba.checked_add(u64::from(request.sectors));
        let capacity = self.params.sector_count;
        if request.op == DiskOp::Flush && request.sectors != 0 {
            return Err(HddError::BadRequest(format!("flush {} must have 0 sectors", request.id)));
        }
        if request.op != DiskOp::Flush && request.sectors == 0 {
            return Err(HddError::BadRequest(format!("request {} has 0 sectors", request.id)));
        }
        if end.is_none_or(|end| end > capacity) {
            return Err(HddError::BadRequest(format!(
                "request {} (lba {}, {} sectors) runs past the disk's {capacity} sectors",
                request.id, request.lba, request.sectors
            )));
        }
        self.submit(now_ns, request);
        Ok(())
    }

    /// When the request in service finishes, if any.
    pub fn next_completion_ns(&self) -> Option<u64> {
        self.in_service.map(|completion| completion.complete_ns)
    }

    /// Pop the finished request (if `now_ns` has reached its completion) and
    /// start the next queued one at the moment the disk became free.
    pub fn complete(&mut self, now_ns: u64) -> Option<DiskCompletion> {
        let done = self.in_service?;
        if now_ns < done.complete_ns {
            return None;
        }
        self.in_service = None;
        if self.queue.len() > 0 {
            self.start_next(done.complete_ns);
        }
        Some(done)
    }

    /// Anything queued or in service.
    pub fn busy(&self) -> bool {
        self.in_service.is_some() || self.queue.len() > 0
    }

    /// Total time a request was in service.
    pub fn busy_ns_total(&self) -> u64 {
        self.busy_ns_total
    }

    /// Requests waiting behind the one in service.
    pub fn queue_len(&self) -> usize {
        self.queue.len()
    }

    /// Requests served so far and how many were buffer hits.
    pub fn served_and_hit_count(&self) -> (u64, u64) {
        (self.served_count, self.hit_count)
    }

    fn start_next(&mut self, free_ns: u64) {
        assert!(self.in_service.is_none());
        let oldest_arrival_ns = self.queue.get(0).arrival_ns;
        let start_ns = free_ns.max(oldest_arrival_ns);
        let count = self.queue.candidates(start_ns, self.queue_depth);
        let index = match self.scheduler {
            Scheduler::Fifo => 0,
            Scheduler::Clook => self.queue.pick_clook(count, self.head_cylinder),
            Scheduler::Sptf => self.pick_sptf(count, start_ns),
        };
        let pending = self.queue.take(index, &self.params);
        let completion = self.serve(start_ns, &pending);
        assert!(completion.complete_ns >= completion.start_ns);
        self.busy_ns_total += completion.complete_ns - completion.start_ns;
        self.served_count += 1;
        self.hit_count += u64::from(completion.cache_hit);
        self.in_service = Some(completion);
    }

    fn pick_sptf(&self, count: usize, now_ns: u64) -> usize {
        let picked = (0..count)
            .min_by_key(|index| {
                let pending = self.queue.get(*index);
                let write = pending.request.op == DiskOp::Write;
                let (seek, rotation) = self.positioning_ns(now_ns, &pending.pbn, write);
                (seek + rotation, *index)
            })
            .expect("count >= 1");
        assert!(picked < count);
        picked
    }

    fn serve(&mut self, start_ns: u64, pending: &Pending) -> DiskCompletion {
        let request = pending.request;
        let mut completion = DiskCompletion {
            id: request.id,
            op: request.op,
            arrival_ns: pending.arrival_ns,
            start_ns,
            complete_ns: start_ns,
            cache_hit: false,
            seek_distance_cyl: 0,
            seek_ns: 0,
            rotation_ns: 0,
            clamped_sectors: pending.clamped_sectors,
        };
        match request.op {
            DiskOp::Flush => self.serve_flush(&mut completion),
            _ if request.sectors == 0 => {
                let write = request.op == DiskOp::Write;
                completion.complete_ns =
                    start_ns + self.params.overheads.pick(write, true, self.last_was_write);
            }
            DiskOp::Read => {
                self.serve_read(&mut completion, request.lba, u64::from(request.sectors), &pending.pbn)
            }
            DiskOp::Write => {
                self.serve_write(&mut completion, request.lba, u64::from(request.sectors), &pending.pbn)
            }
        }
        self.last_was_write = request.op == DiskOp::Write;
        completion
    }

    fn serve_flush(&mut self, completion: &mut DiskCompletion) {
        let overhead_ns = self.params.overheads.pick(true, true, self.last_was_write);
        completion.complete_ns = (completion.start_ns + overhead_ns).max(self.mechanism_free_ns);
        self.destage_count = 0;
    }

    /// A read, with DiskSim's bus phases (`disksim_diskctlr.c`): a hit
    /// transfers after the hit overhead and data preparation; a miss
    /// disconnects after the miss overhead, positions and reads, reselects
    /// once the read watermark is in the buffer, and sends the data at the
    /// bus rate, overlapped with the rest of the media transfer; a partial
    /// hit sends its buffered sectors at once and reads the rest. All end
    /// with the completion message. Each sets up the read-ahead that
    /// follows (`read_ahead_limit`).
    fn serve_read(&mut self, completion: &mut DiskCompletion, lba: u64, sectors: u64, pbn: &Pbn) {
        let now_ns = completion.start_ns;
        let bus_ns = self.params.bus_sector_ns;
        let interface = &self.params.interface;
        let (prep_ns, reselect_ns, done_ns) = (
            interface.data_prep_ns,
            interface.reselect_first_ns + interface.bus_arbitration_ns,
            interface.read_completion_ns,
        );
        let disconnect_ns = if self.last_was_write {
            interface.read_disconnect_after_write_ns
        } else {
            interface.read_disconnect_after_read_ns
        };
        let segment_sectors = u64::from(self.params.cache.segment_sectors.max(1));
        let watermark =
            ((sectors.min(segment_sectors) as f64 * interface.read_watermark) as u64).clamp(1, sectors);
        let (lookup, segment) = self.cache.lookup_read(now_ns, lba, sectors);
        let hit =
            matches!(lookup, ReadLookup::Hit | ReadLookup::Streaming { .. } | ReadLookup::Partial { .. });
        let command_ns = self.params.overheads.pick(false, hit, self.last_was_write);
        // DiskSim holds back any media access, a prefetch or the rest of a
        // partial hit, until the read-miss overhead has passed, hit or not
        // (`disk_read_arrive` sets `overhead_done`, `disk_check_hda` waits
        // for it before `disk_initiate_seek`).
        let mechanism_ready_ns = now_ns + self.params.overheads.pick(false, false, self.last_was_write);
        completion.cache_hit = hit;
        let end = lba + sectors;
        let (out_end_ns, segment) = match (lookup, segment) {
            (ReadLookup::Hit, Some(index)) => {
                self.read_ahead_after_hit(index, mechanism_ready_ns, lba, end);
                (now_ns + command_ns + prep_ns + sectors * bus_ns, Some(index))
            }
            (
                ReadLookup::Streaming { ready_ns: last_ns } | ReadLookup::Almost { ready_ns: last_ns },
                Some(index),
            ) => {
                let limit = self.read_ahead_limit(lba, end, self.cache.start_lba(index));
                self.cache.raise_limit(index, limit);
                ((now_ns + command_ns + prep_ns + sectors * bus_ns).max(last_ns + bus_ns), Some(index))
            }
            (ReadLookup::Partial { cached_end_lba }, Some(_)) => {
                // The cached sectors leave at once; the media reads the rest
                // from where the buffer ends (DiskSim BUFFER_PARTIAL with
                // "Immed transfer partial hit"), after the read-miss
                // overhead.
                let rest = end - cached_end_lba;
                let first = map(&self.params, cached_end_lba);
                let access = self.take_arm(
                    mechanism_ready_ns,
                    cached_end_lba,
                    rest,
                    &first,
                    Feed::Read { watermark: 0 },
                );
                fill_access(completion, &access);
                let segment =
                    self.fill_after_read(now_ns, lba, cached_end_lba, end, &access, cached_end_lba - lba);
                let cached_out_ns = now_ns + command_ns + prep_ns + (sectors - rest) * bus_ns;
                ((cached_out_ns + rest * bus_ns).max(access.bus_floor_ns), segment)
            }
            _ => {
                let access = self.take_arm(mechanism_ready_ns, lba, sectors, pbn, Feed::Read { watermark });
                fill_access(completion, &access);
                // "Read any free blocks": the sectors before the first
                // requested one that passed under the head while it waited
                // (not in the DiskSim 4.0 release: `disksim_release_no_early_read`).
                let before =
                    if self.params.cache.read_any_free_blocks && !self.params.disksim_release_no_early_read {
                        let passed = access.rotation_ns / self.sector_ns(pbn.zone_index);
                        passed.min(u64::from(pbn.sector)).min(segment_sectors.saturating_sub(sectors))
                    } else {
                        0
                    };
                let segment = self.fill_after_read(now_ns, lba, lba, end, &access, before);
                // The drive reselects once the watermark's sectors are in the
                // buffer, in order, head switches and all; the bus then holds
                // on, each sector leaving at the bus rate once it is read.
                let reselected_ns =
                    (mechanism_ready_ns + disconnect_ns).max(access.watermark_ns) + reselect_ns + prep_ns;
                ((reselected_ns + sectors * bus_ns).max(access.bus_floor_ns), segment)
            }
        };
        if let (Some(index), RequestData::Dropped) = (segment, self.params.cache.request_data) {
            self.cache.drop_before(index, end);
        }
        completion.complete_ns = out_end_ns + done_ns;
    }

    /// Record the media read of `from..end`, the part of the request
    /// `lba..end` the buffer lacked, with `before` sectors ahead of `from`
    /// already in the segment, and start the read-ahead that follows it.
    fn fill_after_read(
        &mut self,
        now_ns: u64,
        lba: u64,
        from: u64,
        end: u64,
        access: &Access,
        before: u64,
    ) -> Option<usize> {
        let streaming_sector_ns = self.streaming_sector_ns(access.end_zone_index);
        let limit = self.read_ahead_limit(lba, end, lba);
        let min_lba = end + u64::from(self.params.cache.read_ahead_sectors_min);
        self.cache.fill_read(
            now_ns,
            from,
            end - from,
            access.end_ns,
            streaming_sector_ns,
            limit,
            min_lba,
            before,
        )
    }

    /// A read hit lets a running read-ahead go on as far as this request
    /// would take it; on an idle arm it restarts the read-ahead when the
    /// drive reads ahead on idle hits ("Read-ahead on idle hit").
    fn read_ahead_after_hit(&mut self, index: usize, ready_ns: u64, lba: u64, end: u64) {
        let limit = self.read_ahead_limit(lba, end, self.cache.start_lba(index));
        let (frontier, running) = self.cache.frontier(index, ready_ns);
        if running {
            self.cache.raise_limit(index, limit);
            return;
        }
        if !self.params.cache.read_ahead_on_idle_hit
            || limit <= frontier
            || frontier >= self.params.sector_count
        {
            return;
        }
        // The prefetch starts once the arm is free and on the frontier's sector.
        if let Some(stopped) = self.cache.stop_prefetch(ready_ns, self.params.cache.stop_prefetch_in_sector) {
            self.place_head(stopped.frontier_lba);
        }
        let start_ns = ready_ns.max(self.mechanism_free_ns);
        let next = map(&self.params, frontier);
        let (seek, rotation) = self.positioning_ns(start_ns, &next, false);
        let sector_ns = self.streaming_sector_ns(next.zone_index);
        self.head_cylinder = next.cylinder;
        self.head_surface = next.surface;
        self.cache.restart_prefetch(index, start_ns + seek + rotation, sector_ns, limit);
    }

    /// How far a read of `lba..end` prefetches (exclusive LBA): DiskSim's
    /// `disk_buffer_get_max_readahead`. The DEC scheme ("Buffer continuous
    /// read = 4") runs to the end of the track holding the block after the
    /// request, one track further when the segment already reaches back
    /// before that track, and is not bounded by "Maximum read-ahead". The
    /// other schemes run "Maximum read-ahead" past the request's end; with
    /// no maximum, a segment past it, or, when prefetched data may not
    /// replace the request's ("Read-ahead over requested = 0"), until the
    /// segment is full from the request's first sector. Schemes 1 and 2
    /// also stop at the end of the track or cylinder (DiskSim's
    /// `disk_initiate_seek` refuses a background read's move). The segment
    /// keeps only its last `segment_sectors` (`disk_buffer_segment_wrap`),
    /// so a prefetch longer than the segment pushes the request's own data
    /// out. `segment_start` is the first LBA the segment holds.
    fn read_ahead_limit(&self, lba: u64, end: u64, segment_start: u64) -> u64 {
        let cache = &self.params.cache;
        let capacity = self.params.sector_count;
        let track_end = |at: u64| -> u64 { (at + map(&self.params, at).run_sectors).min(capacity) };
        let segment_sectors = u64::from(cache.segment_sectors.max(1));
        let (max, min) = (u64::from(cache.read_ahead_sectors_max), u64::from(cache.read_ahead_sectors_min));
        let planned = if cache.read_ahead_scope == ReadAheadScope::None {
            return end;
        } else if cache.read_ahead_scope == ReadAheadScope::NextTrack {
            if end >= capacity {
                return end;
            }
            let next = map(&self.params, end);
            let first = map(&self.params, segment_start);
            let on_track = track_end(end);
            if (first.cylinder, first.surface) != (next.cylinder, next.surface) {
                let request_zone = map(&self.params, lba).zone_index as usize;
                on_track + u64::from(self.params.zones[request_zone].sectors_per_track)
            } else {
                on_track
            }
        } else if max > 0 {
            end + max
        } else if cache.request_data == RequestData::Kept {
            let sectors = end - lba;
            if sectors >= segment_sectors || segment_sectors - sectors < min {
                end + min
            } else {
                lba + segment_sectors
            }
        } else {
            end + segment_sectors
        };
        let scope_end = match cache.read_ahead_scope {
            ReadAheadScope::TrackEnd => track_end(end - 1),
            ReadAheadScope::CylinderEnd => {
                let cylinder = map(&self.params, end - 1).cylinder;
                let mut at = track_end(end - 1);
                while at < capacity && map(&self.params, at).cylinder == cylinder {
                    at = track_end(at);
                }
                at
            }
            _ => u64::MAX,
        };
        planned.min(scope_end).max(end + min).min(capacity)
    }

    /// A write, with DiskSim's bus phases. The command overhead is the
    /// write-hit one when writes are acknowledged from the buffer (DiskSim
    /// "Fast write level" > 0) and the write-miss one otherwise
    /// (`disk_write_arrive`). Positioning starts after the command overhead,
    /// overlapped with the data transfer at the bus rate; the media never
    /// overtakes the data. A write-through write disconnects once its data
    /// is in and reselects to complete when the media write ends. A write
    /// that follows a non-sequential write, on a drive with "Extra write
    /// disconnect", first disconnects and reselects before taking its data.
    fn serve_write(&mut self, completion: &mut DiskCompletion, lba: u64, sectors: u64, pbn: &Pbn) {
        let now_ns = completion.start_ns;
        let write_cache = self.params.cache.write_cache;
        let command_ns = self.params.overheads.pick(true, write_cache, self.last_was_write);
        let interface = &self.params.interface;
        let extra = !write_cache
            && interface.extra_write_disconnect
            && self.last_was_write
            && lba != self.last_write_end_lba;
        let (mechanism_ready_ns, data_start_ns, disconnect_ns, reselect_ns) = if extra {
            let command_ns = interface.extradisc_command_ns;
            (
                now_ns + command_ns + interface.extradisc_seek_delta_ns,
                now_ns
                    + command_ns
                    + interface.extradisc_disconnect_ns
                    + interface.extradisc_inter_disconnect_ns
                    + interface.reselect_first_ns
                    + interface.bus_arbitration_ns
                    + interface.data_prep_ns,
                interface.extradisc_second_disconnect_ns,
                interface.reselect_other_ns + interface.bus_arbitration_ns,
            )
        } else {
            let data_start_ns = now_ns + command_ns + interface.data_prep_ns;
            let reselect_ns = interface.reselect_first_ns + interface.bus_arbitration_ns;
            (now_ns + command_ns, data_start_ns, interface.write_disconnect_ns, reselect_ns)
        };
        let done_ns = interface.write_completion_ns;
        self.last_write_end_lba = lba + sectors;
        let bus_ns = self.params.bus_write_sector_ns;
        let data_in_ns = data_start_ns + sectors * bus_ns;
        // Each sector goes to the media only once its data is in; a drive
        // with extra write disconnects also holds the media back until
        // min(request, 10) sectors are buffered (15 for a request of 45 or
        // more): DiskSim's `disk_buffer_block_available`.
        let buffered = match (interface.extra_write_disconnect, sectors) {
            (false, _) => 1,
            (true, 0..45) => sectors.min(10),
            (true, _) => 15,
        };
        let feed = Feed::Write { data_start_ns, bus_ns, buffered };
        if !write_cache {
            let access = self.take_arm(mechanism_ready_ns, lba, sectors, pbn, feed);
            fill_access(completion, &access);
            let end_ns = if access.end_ns <= data_in_ns {
                data_in_ns
            } else {
                access.end_ns.max(data_in_ns + disconnect_ns) + reselect_ns
            };
            completion.complete_ns = end_ns + done_ns;
            self.cache.store_write(now_ns, lba, sectors, 0);
            return;
        }
        // Write-back: acknowledge once the data is in the buffer and a write
        // slot is free; the destage takes the arm in its turn.
        let data_in_ns = data_in_ns.max(self.write_slot_free_ns(data_in_ns));
        let access = self.take_arm(mechanism_ready_ns, lba, sectors, pbn, feed);
        self.push_destage(access.end_ns);
        self.cache.store_write(now_ns, lba, sectors, access.end_ns);
        completion.cache_hit = true;
        completion.seek_distance_cyl = access.distance_cyl;
        completion.complete_ns = data_in_ns + done_ns;
    }

    /// When a write-back slot is free at or after `now_ns`.
    fn write_slot_free_ns(&mut self, now_ns: u64) -> u64 {
        let done = self.destage_end_ns[..self.destage_count].partition_point(|end| *end <= now_ns);
        self.destage_end_ns.copy_within(done..self.destage_count, 0);
        self.destage_count -= done;
        let slots = (self.params.cache.write_segment_count as usize).clamp(1, DESTAGE_SLOTS_MAX);
        if self.destage_count < slots {
            return now_ns;
        }
        self.destage_end_ns[self.destage_count - slots]
    }

    fn push_destage(&mut self, end_ns: u64) {
        if self.destage_count == DESTAGE_SLOTS_MAX {
            self.destage_end_ns.copy_within(1.., 0);
            self.destage_count -= 1;
        }
        if self.destage_count > 0 {
            assert!(self.destage_end_ns[self.destage_count - 1] <= end_ns);
        }
        self.destage_end_ns[self.destage_count] = end_ns;
        self.destage_count += 1;
    }

    /// Take the arm no earlier than `ready_ns`: stop any read-ahead there,
    /// then position and transfer (`media_access`).
    fn take_arm(&mut self, ready_ns: u64, lba: u64, sectors: u64, first: &Pbn, feed: Feed) -> Access {
        let mut start_ns = ready_ns.max(self.mechanism_free_ns);
        if let Some(stopped) = self.cache.stop_prefetch(start_ns, self.params.cache.stop_prefetch_in_sector) {
            self.place_head(stopped.frontier_lba);
            start_ns = start_ns.max(stopped.free_ns);
        }
        let access = self.media_access(start_ns, lba, sectors, first, feed);
        self.mechanism_free_ns = access.end_ns;
        access
    }

    /// The head sits just past `frontier_lba`, where a read-ahead stopped.
    fn place_head(&mut self, frontier_lba: u64) {
        let pbn = map(&self.params, frontier_lba.saturating_sub(1));
        self.head_cylinder = pbn.cylinder;
        self.head_surface = pbn.surface;
    }

    /// Time to reach `pbn`'s track from the head's: the seek (at least a
    /// head switch when it moves), or a head switch; a write adds the write
    /// settle when the head moved (DiskSim `dm_seek_time_g1`) and takes at
    /// least the minimum write seek ("Minimum seek delay").
    fn reposition_ns(&self, cylinder: u32, surface: u32, write: bool) -> u64 {
        let distance = u64::from(cylinder.abs_diff(self.head_cylinder));
        let moved = if distance > 0 {
            seek_ns(&self.params.seek, distance).max(self.params.head_switch_ns)
        } else if surface != self.head_surface {
            self.params.head_switch_ns
        } else {
            0
        };
        if !write {
            return moved;
        }
        let settled = if moved > 0 { moved.saturating_add_signed(self.params.write_settle_ns) } else { 0 };
        settled.max(self.params.interface.write_seek_min_ns)
    }

    /// Seek and rotational wait to reach `pbn` starting at `now_ns`.
    fn positioning_ns(&self, now_ns: u64, pbn: &Pbn, write: bool) -> (u64, u64) {
        let seek = self.reposition_ns(pbn.cylinder, pbn.surface, write);
        let rotation = self.rotation_wait(now_ns + seek, pbn.angle);
        (seek, rotation)
    }

    fn rotation_wait(&self, now_ns: u64, angle: f64) -> u64 {
        let wait = rotation_wait_ns(self.revolution_ns, now_ns + self.phase_ns, angle);
        // Sector times are rounded down, so a sector that is "just missed" by
        // a nanosecond or two is really on time: do not charge a revolution.
        if self.revolution_ns - wait < 1_000 {
            0
        } else {
            wait
        }
    }

    fn sector_ns(&self, zone_index: u32) -> u64 {
        let zone = &self.params.zones[zone_index as usize];
        (self.revolution_ns / u64::from(zone.sectors_per_track)).max(1)
    }

    /// Sector time of a long sequential read, head and cylinder switches
    /// (their skews) included: the zone's sustained media rate.
    fn streaming_sector_ns(&self, zone_index: u32) -> u64 {
        self.streaming_sector_ns[zone_index as usize]
    }

    /// Position on `lba` from the head's place at `start_ns` and transfer
    /// `sectors`, paying head and cylinder switches with the zone's skew
    /// (and the write settle after each, as DiskSim does for writes). A
    /// write's sector is written when it passes under the head with its data
    /// in the buffer (`Feed::Write`); one whose data is not in yet is
    /// missed, and the rest of the run waits a revolution for it (DiskSim's
    /// `disk_buffer_sector_done` checks `disk_buffer_block_available` at
    /// each sector). For a read, also when its first `watermark` sectors
    /// are in the buffer and how early the bus could have sent them all
    /// (`Access`).
    fn media_access(&mut self, start_ns: u64, lba: u64, sectors: u64, first: &Pbn, feed: Feed) -> Access {
        assert!(sectors >= 1);
        let (write, watermark) = match feed {
            Feed::Read { watermark } => (false, watermark),
            Feed::Write { .. } => (true, 0),
        };
        let mut pbn = *first;
        let seek = self.reposition_ns(pbn.cylinder, pbn.surface, write);
        let on_track_ns = (start_ns + seek).max(feed.data_in_ns(0));
        let first_sector_ns = on_track_ns + self.rotation_wait(on_track_ns, pbn.angle);
        let distance_cyl = u64::from(pbn.cylinder.abs_diff(self.head_cylinder));
        let (mut next_lba, mut remaining) = (lba, sectors);
        // Each track's part of the request starts with its first sector at
        // `run_first_ns`, or, for a zero-latency read, earlier
        // (`zero_latency_start`).
        let (mut run_on_track_ns, mut run_first_ns) = (on_track_ns, first_sector_ns);
        let bus_ns = if write { 0 } else { self.params.bus_sector_ns };
        let (mut watermark_ns, mut bus_floor_ns) = (0, 0);
        let mut now_ns;
        loop {
            let run = pbn.run_sectors.min(remaining);
            let early_sectors;
            (now_ns, early_sectors) =
                self.zero_latency_start(write, &pbn, run, run_on_track_ns, run_first_ns);
            let sector_ns = self.sector_ns(pbn.zone_index);
            // The run's sectors in order: the first `in_order` arrive one
            // sector time apart from `first_ns`, the early ones with the
            // last of them. A sector's departure is bounded by its arrival
            // plus the bus times of it and every later sector; within a run
            // the bound is largest at its first or its last in-order sector.
            let done = sectors - remaining;
            // Data that is all in before the run's first sector passes
            // misses nothing (arrivals and passes both only grow): skip
            // the per-sector check, the common case of a buffered write.
            if write && feed.data_in_ns(done + run - 1) > now_ns {
                for index in 0..run {
                    let passes_ns = now_ns + index * sector_ns;
                    let missed_ns = feed.data_in_ns(done + index).saturating_sub(passes_ns);
                    now_ns += missed_ns.div_ceil(self.revolution_ns) * self.revolution_ns;
                }
            }
            let (first_ns, in_order) = (now_ns + early_sectors * sector_ns, run - early_sectors);
            bus_floor_ns = bus_floor_ns
                .max(first_ns + sector_ns + (sectors - done) * bus_ns)
                .max(first_ns + in_order * sector_ns + (sectors - done - in_order + 1) * bus_ns);
            if (done + 1..=done + run).contains(&watermark) {
                watermark_ns = first_ns + (watermark - done).min(in_order) * sector_ns;
            }
            now_ns += run * sector_ns;
            remaining -= run;
            next_lba += run;
            if remaining == 0 {
                break;
            }
            let next = map(&self.params, next_lba);
            let mut switch_ns = if next.cylinder != pbn.cylinder {
                seek_ns(&self.params.seek, u64::from(next.cylinder.abs_diff(pbn.cylinder)))
                    .max(self.params.head_switch_ns)
            } else if next.surface != pbn.surface {
                self.params.head_switch_ns
            } else {
                0
            };
            if write && switch_ns > 0 {
                switch_ns = switch_ns.saturating_add_signed(self.params.write_settle_ns);
            }
            // A run that ends at a slip goes on along the same track: no
            // new landing, so no new zero-latency start.
            let same_track = (next.cylinder, next.surface) == (pbn.cylinder, pbn.surface);
            run_on_track_ns = if same_track { u64::MAX } else { now_ns + switch_ns };
            run_first_ns = now_ns + switch_ns + self.rotation_wait(now_ns + switch_ns, next.angle);
            pbn = next;
        }
        self.head_cylinder = pbn.cylinder;
        self.head_surface = pbn.surface;
        Access {
            end_ns: now_ns,
            seek_ns: seek,
            rotation_ns: first_sector_ns - (start_ns + seek),
            distance_cyl,
            end_zone_index: pbn.zone_index,
            watermark_ns,
            bus_floor_ns,
        }
    }

    /// When a track's run of `run` sectors, whose first sector comes under
    /// the head at `first_ns` after the head lands on the track at
    /// `on_track_ns`, starts reading, and how many of its sectors are read
    /// ahead of the first. A zero-latency read ("Immediate buffer read")
    /// landing in the run reads from the next sector boundary to the run's
    /// end, then from its first sector up to that boundary: one revolution
    /// from the boundary. DiskSim does this on every track of a read: its
    /// `disk_buffer_seekdone` asks `dm_latency_g1` and `g1_access_block`,
    /// which round the landing angle up to a sector start, at each landing.
    /// `inside` counts the run's sectors that start before that boundary,
    /// the one the head lands in included; landing in the first sector
    /// already pays off, landing in the last one does not. Never with
    /// `disksim_release_no_early_read` (the DiskSim 4.0 release).
    fn zero_latency_start(
        &self,
        write: bool,
        pbn: &Pbn,
        run: u64,
        on_track_ns: u64,
        first_ns: u64,
    ) -> (u64, u64) {
        if write
            || !self.params.interface.zero_latency_read
            || self.params.disksim_release_no_early_read
            || on_track_ns > first_ns
        {
            return (first_ns, 0);
        }
        let sector_ns = self.sector_ns(pbn.zone_index);
        let spt = u64::from(self.params.zones[pbn.zone_index as usize].sectors_per_track);
        let inside = spt.saturating_sub((first_ns - on_track_ns) / sector_ns);
        if inside > 0 && inside < run {
            (first_ns - (run - inside) * sector_ns, run - inside)
        } else {
            (first_ns, 0)
        }
    }
}

fn fill_access(completion: &mut DiskCompletion, access: &Access) {
    completion.seek_distance_cyl = access.distance_cyl;
    completion.seek_ns = access.seek_ns;
    completion.rotation_ns = access.rotation_ns;
}

/// SplitMix64: a fixed, well-mixed function of the seed (no global RNG).
pub(crate) fn splitmix64(seed: u64) -> u64 {
    let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}
