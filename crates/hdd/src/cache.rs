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
    sector_ns: u64,
    /// Write-back data not yet on the media until this time.
    dirty_until_ns: u64,
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
    /// The media must be read.
    Miss,
}

/// The segments and their LRU order.
pub struct Cache {
    segments: Vec<Segment>,
    segment_sectors: u64,
    read_ahead_sectors_max: u64,
    use_counter: u64,
}

impl Cache {
    /// A buffer of `segment_count` segments of `segment_sectors` each.
    pub fn new(segment_count: u32, segment_sectors: u32, read_ahead_sectors_max: u32) -> Cache {
        Cache {
            segments: vec![Segment::default(); segment_count as usize],
            segment_sectors: u64::from(segment_sectors.max(1)),
            read_ahead_sectors_max: u64::from(read_ahead_sectors_max),
            use_counter: 0,
        }
    }

    fn touch(&mut self, index: usize) {
        self.use_counter += 1;
        self.segments[index].last_use = self.use_counter;
    }

    /// Look up a read of `lba..lba+sectors` at `now_ns`; a streaming hit
    /// extends the read-ahead so a sequential reader keeps streaming.
    pub fn lookup_read(&mut self, now_ns: u64, lba: u64, sectors: u64) -> ReadLookup {
        let end = lba + sectors;
        for index in 0..self.segments.len() {
            let segment = self.segments[index];
            let reach = if segment.prefetching { segment.prefetch_limit_lba } else { segment.end_lba };
            // Cheap range test first: only a prefetching segment needs a division.
            if !segment.valid || lba < segment.start_lba || lba > reach {
                continue;
            }
            let frontier = segment.frontier(now_ns);
            let window_start = segment.start_lba.max(frontier.saturating_sub(self.segment_sectors));
            if lba < window_start || lba > frontier {
                continue;
            }
            if end <= frontier {
                self.touch(index);
                self.extend(index, end);
                return ReadLookup::Hit;
            }
            let running = segment.prefetching && frontier < segment.prefetch_limit_lba;
            if running && end - frontier <= self.read_ahead_sectors_max.max(1) {
                self.touch(index);
                self.extend(index, end);
                let ready_ns = self.segments[index].arrival_ns(end);
                assert!(ready_ns >= now_ns);
                return ReadLookup::Streaming { ready_ns };
            }
        }
        ReadLookup::Miss
    }

    /// Keep reading ahead past a request that ends at `end_lba`.
    fn extend(&mut self, index: usize, end_lba: u64) {
        let segment = &mut self.segments[index];
        if segment.prefetching {
            let limit = end_lba + self.read_ahead_sectors_max;
            segment.prefetch_limit_lba = segment.prefetch_limit_lba.max(limit);
        }
    }

    /// Stop the running read-ahead at `now_ns`; returns the LBA just past the
    /// last sector read (where the head is), if one was running.
    pub fn stop_prefetch(&mut self, now_ns: u64) -> Option<u64> {
        let segment = self.segments.iter_mut().find(|segment| segment.prefetching)?;
        let frontier = segment.frontier(now_ns);
        segment.end_lba = frontier;
        segment.prefetching = false;
        assert!(segment.start_lba <= segment.end_lba);
        // Whether the stream stopped now or filled its limit earlier, the
        // head sits just past the frontier.
        Some(frontier)
    }

    /// Drop every segment overlapping `lba..lba+sectors` (its data is now
    /// stale) and pick one to refill, in a single pass: an invalid segment,
    /// else the least recently used one whose write-back data is on the media
    /// by `now_ns`, else the least recently used of all.
    fn replace(&mut self, now_ns: u64, lba: u64, sectors: u64) -> Option<usize> {
        let end = lba + sectors;
        let mut best: Option<(usize, (bool, bool, u64))> = None;
        for (index, segment) in self.segments.iter_mut().enumerate() {
            let segment_end = if segment.prefetching { segment.prefetch_limit_lba } else { segment.end_lba };
            if segment.valid && segment.start_lba < end && lba < segment_end {
                assert!(!segment.prefetching, "a read-ahead must be stopped before the arm moves");
                segment.valid = false;
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
    /// read-ahead continuing at one sector per `sector_ns`.
    /// `read_ahead` false: keep the data but do not read past it.
    pub fn fill_read(
        &mut self,
        now_ns: u64,
        lba: u64,
        sectors: u64,
        end_ns: u64,
        sector_ns: u64,
        read_ahead: bool,
    ) {
        assert!(sector_ns > 0);
        let Some(index) = self.replace(now_ns, lba, sectors) else {
            return; // no segments: cache disabled
        };
        let end = lba + sectors;
        let read_ahead_sectors = if read_ahead { self.read_ahead_sectors_max } else { 0 };
        let limit = (end + read_ahead_sectors).min(lba + self.segment_sectors).max(end);
        self.segments[index] = Segment {
            valid: true,
            start_lba: lba,
            end_lba: end,
            prefetching: limit > end,
            prefetch_start_ns: end_ns,
            prefetch_limit_lba: limit,
            sector_ns,
            dirty_until_ns: 0,
            last_use: 0,
        };
        self.touch(index);
    }

    /// Record written data; it is on the media from `dirty_until_ns` on.
    pub fn store_write(&mut self, now_ns: u64, lba: u64, sectors: u64, dirty_until_ns: u64) {
        let Some(index) = self.replace(now_ns, lba, sectors) else {
            return; // no segments: cache disabled
        };
        self.segments[index] = Segment {
            valid: true,
            start_lba: lba,
            end_lba: lba + sectors,
            prefetching: false,
            prefetch_start_ns: 0,
            prefetch_limit_lba: lba + sectors,
            sector_ns: 1,
            dirty_until_ns,
            last_use: 0,
        };
        self.touch(index);
    }
}
