//! The on-board buffer: a fixed set of segments, each holding one contiguous
//! LBA run, with at most one read-ahead stream running at a time.
//!
//! A read-ahead stream is lazy: it records when and where it started and how
//! fast it reads, and its frontier at any later time is computed, so nothing
//! runs between commands. The model stops it (freezes the frontier) when the
//! arm is needed for something else.

/// One buffer segment. `start_lba..end_lba` holds valid data; while
/// `prefetching`, sectors from `end_lba` on arrive one per `sector_ns` from
/// `prefetch_start_ns`, up to `prefetch_limit_lba`.
#[derive(Clone, Copy, Debug, Default)]
pub struct Segment {
    valid: bool,
    start_lba: u64,
    end_lba: u64,
    prefetching: bool,
    prefetch_start_ns: u64,
    prefetch_limit_lba: u64,
    /// The arm may not leave before the prefetch reaches this LBA
    /// ("Minimum read-ahead").
    prefetch_min_lba: u64,
    sector_ns: u64,
    /// Write-back data not yet on the media until this time.
    dirty_until_ns: u64,
    /// Holds data a write left (reads may be refused it).
    write_data: bool,
    last_use: u64,
}

impl Segment {
    /// Data end at time `now_ns`, read-ahead included.
    fn frontier(&self, now_ns: u64) -> u64 {
        if !self.prefetching || now_ns <= self.prefetch_start_ns {
            return self.end_lba;
        }
        let arrived = (now_ns - self.prefetch_start_ns) / self.sector_ns;
        (self.end_lba + arrived).min(self.prefetch_limit_lba)
    }

    /// When sector `lba` (exclusive end) will have arrived, for a prefetching segment.
    fn arrival_ns(&self, end_lba: u64) -> u64 {
        assert!(self.prefetching);
        self.prefetch_start_ns + end_lba.saturating_sub(self.end_lba) * self.sector_ns
    }
}

/// How the buffer can serve a read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadLookup {
    /// All sectors are in the buffer now.
    Hit,
    /// The running read-ahead will bring the last sector at this time.
    Streaming {
        /// Arrival time of the request's last sector.
        ready_ns: u64,
    },
    /// The running read-ahead is about to bring the first sector: without
    /// "almost read hits" the command is a miss (its overhead), and then
    /// finds its data arriving (DiskSim picks the segment after the
    /// command overhead); with them, a streaming hit.
    Almost {
        /// Arrival time of the request's last sector.
        ready_ns: u64,
    },
    /// The first sectors are in the buffer, the rest is not coming: the
    /// cached part goes to the host at once while the media supplies the
    /// rest ("Immed transfer partial hit").
    Partial {
        /// First LBA not in the buffer.
        cached_end_lba: u64,
    },
    /// The media must be read.
    Miss,
}

/// Where a stopped read-ahead left the head, and when the arm is free.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stopped {
    /// LBA just past the last sector read.
    pub frontier_lba: u64,
    /// When the arm is free: at once, or after the sector under the head
    /// or the minimum read-ahead is done.
    pub free_ns: u64,
}

/// The segments and their LRU order.
pub struct Cache {
    segments: Vec<Segment>,
    segment_sectors: u64,
    /// The last segment takes every write and no read.
    dedicated_write_segment: bool,
    read_hits_on_write_data: bool,
    almost_read_hits: bool,
    partial_hits: bool,
    use_counter: u64,
}

impl Cache {
    /// A buffer of `segment_count` segments of `segment_sectors` each.
    pub fn new(
        segment_count: u32,
        segment_sectors: u32,
        dedicated_write_segment: bool,
        read_hits_on_write_data: bool,
        almost_read_hits: bool,
        partial_hits: bool,
    ) -> Cache {
        Cache {
            segments: vec![Segment::default(); segment_count as usize],
            segment_sectors: u64::from(segment_sectors.max(1)),
            dedicated_write_segment: dedicated_write_segment && segment_count >= 2,
            read_hits_on_write_data,
            almost_read_hits,
            partial_hits,
            use_counter: 0,
        }
    }

    /// Segments reads may use.
    fn read_segments(&self) -> usize {
        self.segments.len() - usize::from(self.dedicated_write_segment)
    }

    fn touch(&mut self, index: usize) {
        self.use_counter += 1;
        self.segments[index].last_use = self.use_counter;
    }

    /// Look up a read of `lba..lba+sectors` at `now_ns`: a hit needs its
    /// first sector in a segment, or, with "almost read hits", next in a
    /// running read-ahead (DiskSim: otherwise a miss); a running read-ahead that
    /// holds the first sector serves the rest as it arrives. Returns the
    /// segment used.
    pub fn lookup_read(&mut self, now_ns: u64, lba: u64, sectors: u64) -> (ReadLookup, Option<usize>) {
        let end = lba + sectors;
        for index in 0..self.read_segments() {
            let segment = self.segments[index];
            let reach = if segment.prefetching { segment.prefetch_limit_lba } else { segment.end_lba };
            // Cheap range test first: only a prefetching segment needs a division.
            if !segment.valid || lba < segment.start_lba || lba >= reach {
                continue;
            }
            if segment.write_data && !self.read_hits_on_write_data {
                continue;
            }
            let frontier = segment.frontier(now_ns);
            let window_start = segment.start_lba.max(frontier.saturating_sub(self.segment_sectors));
            let running = segment.prefetching && frontier < segment.prefetch_limit_lba;
            let almost = running && lba == frontier;
            if lba < window_start || (lba >= frontier && !almost) {
                continue;
            }
            if end <= frontier {
                self.touch(index);
                return (ReadLookup::Hit, Some(index));
            }
            if running {
                let ready_ns = segment.arrival_ns(end);
                assert!(ready_ns >= now_ns);
                self.touch(index);
                self.segments[index].prefetch_limit_lba = segment.prefetch_limit_lba.max(end);
                let lookup = if almost && !self.almost_read_hits {
                    ReadLookup::Almost { ready_ns }
                } else {
                    ReadLookup::Streaming { ready_ns }
                };
                return (lookup, Some(index));
            }
            if self.partial_hits && lba < frontier {
                return (ReadLookup::Partial { cached_end_lba: frontier }, Some(index));
            }
        }
        (ReadLookup::Miss, None)
    }

    /// The first LBA a segment holds (for the stream test of read-ahead).
    pub fn start_lba(&self, index: usize) -> u64 {
        self.segments[index].start_lba
    }

    /// Data end of a segment at `now_ns`, and whether its read-ahead runs.
    pub fn frontier(&self, index: usize, now_ns: u64) -> (u64, bool) {
        let segment = &self.segments[index];
        let frontier = segment.frontier(now_ns);
        (frontier, segment.prefetching && frontier < segment.prefetch_limit_lba)
    }

    /// Let a running read-ahead go on to `limit_lba` (never shortens it).
    pub fn raise_limit(&mut self, index: usize, limit_lba: u64) {
        let segment = &mut self.segments[index];
        if segment.prefetching {
            segment.prefetch_limit_lba = segment.prefetch_limit_lba.max(limit_lba);
        }
    }

    /// Start a read-ahead after a segment whose prefetch has stopped: the
    /// first new sector starts at `start_ns`.
    pub fn restart_prefetch(&mut self, index: usize, start_ns: u64, sector_ns: u64, limit_lba: u64) {
        assert!(sector_ns > 0);
        let segment = &mut self.segments[index];
        assert!(!segment.prefetching);
        if limit_lba > segment.end_lba {
            segment.prefetching = true;
            segment.prefetch_start_ns = start_ns;
            segment.prefetch_limit_lba = limit_lba;
            segment.prefetch_min_lba = segment.end_lba;
            segment.sector_ns = sector_ns;
        }
    }

    /// Forget a read's own data once it is sent ("Read-ahead over
    /// requested = -1"): the segment keeps only what lies past `end_lba`.
    pub fn drop_before(&mut self, index: usize, end_lba: u64) {
        let segment = &mut self.segments[index];
        segment.start_lba = segment.start_lba.max(end_lba);
        let reach = if segment.prefetching { segment.prefetch_limit_lba } else { segment.end_lba };
        segment.end_lba = segment.end_lba.max(segment.start_lba.min(reach));
        if !segment.prefetching && segment.start_lba >= segment.end_lba {
            segment.valid = false;
        }
    }

    /// Stop the running read-ahead when the arm is wanted at `now_ns`; it
    /// runs on to the end of the sector under the head unless
    /// `stop_in_sector`, and always to its minimum. Returns where the head
    /// is and when the arm is free, if one was running.
    pub fn stop_prefetch(&mut self, now_ns: u64, stop_in_sector: bool) -> Option<Stopped> {
        let segment = self.segments.iter_mut().find(|segment| segment.prefetching)?;
        let mut free_ns = now_ns;
        if segment.prefetch_min_lba > segment.end_lba {
            let min_lba = segment.prefetch_min_lba.min(segment.prefetch_limit_lba);
            free_ns = free_ns.max(segment.arrival_ns(min_lba));
        }
        let mut frontier = segment.frontier(free_ns);
        if !stop_in_sector && frontier < segment.prefetch_limit_lba && free_ns > segment.prefetch_start_ns {
            // Finish the sector being read.
            free_ns = segment.arrival_ns(frontier + 1);
            frontier += 1;
        }
        segment.end_lba = frontier;
        segment.prefetching = false;
        assert!(segment.start_lba <= segment.end_lba);
        // Whether the stream stopped now or filled its limit earlier, the
        // head sits just past the frontier.
        Some(Stopped { frontier_lba: frontier, free_ns })
    }

    /// Drop every segment overlapping `lba..lba+sectors` (its data is now
    /// stale) and pick one to refill, in a single pass: an invalid segment,
    /// else the least recently used one whose write-back data is on the media
    /// by `now_ns`, else the least recently used of all. A write uses the
    /// dedicated write segment when there is one; a read never does.
    fn replace(&mut self, now_ns: u64, lba: u64, sectors: u64, write: bool) -> Option<usize> {
        let end = lba + sectors;
        let reads = self.read_segments();
        let mut best: Option<(usize, (bool, bool, u64))> = None;
        for (index, segment) in self.segments.iter_mut().enumerate() {
            let segment_end = if segment.prefetching { segment.prefetch_limit_lba } else { segment.end_lba };
            if segment.valid && segment.start_lba < end && lba < segment_end {
                assert!(!segment.prefetching, "a read-ahead must be stopped before the arm moves");
                segment.valid = false;
            }
            if (index < reads) == (write && self.dedicated_write_segment) {
                continue;
            }
            // Lower is better: clean first, then invalid, then least recently used.
            let key = (segment.dirty_until_ns > now_ns, segment.valid, segment.last_use);
            if best.is_none_or(|(_, best_key)| key < best_key) {
                best = Some((index, key));
            }
        }
        best.map(|(index, _)| index)
    }

    /// Record a media read of `lba..lba+sectors` that ended at `end_ns`, with
    /// read-ahead continuing at one sector per `sector_ns` up to `limit_lba`
    /// (the arm may not leave before `min_lba`). `before_sectors` sectors
    /// before `lba` were read while waiting for it ("Read any free blocks").
    /// Returns the segment used.
    #[allow(clippy::too_many_arguments)]
    pub fn fill_read(
        &mut self,
        now_ns: u64,
        lba: u64,
        sectors: u64,
        end_ns: u64,
        sector_ns: u64,
        limit_lba: u64,
        min_lba: u64,
        before_sectors: u64,
    ) -> Option<usize> {
        assert!(sector_ns > 0);
        let index = self.replace(now_ns, lba, sectors, false)?; // None: cache disabled
        let end = lba + sectors;
        let limit = limit_lba.max(end);
        self.segments[index] = Segment {
            valid: true,
            start_lba: lba - before_sectors.min(lba),
            end_lba: end,
            prefetching: limit > end,
            prefetch_start_ns: end_ns,
            prefetch_limit_lba: limit,
            prefetch_min_lba: min_lba.clamp(end, limit),
            sector_ns,
            dirty_until_ns: 0,
            write_data: false,
            last_use: 0,
        };
        self.touch(index);
        Some(index)
    }

    /// Record written data; it is on the media from `dirty_until_ns` on.
    pub fn store_write(&mut self, now_ns: u64, lba: u64, sectors: u64, dirty_until_ns: u64) {
        let Some(index) = self.replace(now_ns, lba, sectors, true) else {
            return; // no segments: cache disabled
        };
        self.segments[index] = Segment {
            valid: true,
            start_lba: lba,
            end_lba: lba + sectors,
            prefetching: false,
            prefetch_start_ns: 0,
            prefetch_limit_lba: lba + sectors,
            prefetch_min_lba: lba + sectors,
            sector_ns: 1,
            dirty_until_ns,
            write_data: true,
            last_use: 0,
        };
        self.touch(index);
    }
}
