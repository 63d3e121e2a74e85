//! Parsing the `replica` layer's keys into a typed [`Args`], one `parse_*`
//! step per concern; errors name the key. Defaults are the thesis's
//! constants (Lifchits 2008, §4.1.3).

use layoutd_core::config::{ArgReader, ConfigError};
use layoutd_core::{REQUEST_BYTES_MAX, SECTOR_BYTES};

/// Which replica chain a read uses when several cover it.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Choice {
    /// The thesis: the chain at the lowest block number.
    Lowest,
    /// The chain whose next blocks also match the stream's recent pattern
    /// longest (the longest run of replicas continuing it).
    Longest,
    /// The most recently used chain.
    Mru,
}

/// When committed replica writes are issued.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum When {
    /// The thesis: as soon as the queue commits.
    Inline,
    /// Deferred to idle time (the background scheduler, class Replication).
    Idle,
}

/// The parsed configuration.
#[derive(Clone, Debug)]
pub struct Args {
    /// The unit of replication and of the free map.
    pub block_bytes: u32,
    /// Bytes of the volume (the lower device minus the metadata area).
    pub volume_bytes: u64,
    /// Bytes of one copy of the region record (metadata area: two copies).
    pub meta_record_bytes: u32,
    /// Bytes of the map snapshot area (two copies); 0: no snapshot.
    pub snapshot_bytes: u64,
    /// Idle-time snapshots at most this often.
    pub snapshot_interval_ms: u64,
    /// Read requests kept per stream.
    pub history_count: u32,
    /// Two requests are close when their distance is under this.
    pub close_blocks: u64,
    /// A read close to at least this many history entries passes through.
    pub pass_through_close_count: u32,
    /// Candidates queued before the decision.
    pub queue_commit_count: u32,
    /// The queue is cancelled when at least this many of them are sequential.
    pub queue_sequential_cancel_count: u32,
    /// After a commit, replicate at least this many more reads.
    pub replicate_after_commit_count: u32,
    /// A queue that does not fill within this long is cancelled.
    pub queue_timeout_ms: u64,
    /// Replicas go into free extents at least this long.
    pub free_extent_blocks_min: u64,
    /// Replica writes in flight past which the lower queue counts as congested.
    pub congestion_in_flight_max: u32,
    /// Replica writes decided and not yet written hold at most this many
    /// bytes of data in RAM; past it the lower queue counts as congested.
    pub pending_bytes_max: u64,
    /// Reads without replication after congestion.
    pub congestion_backoff_reads: u32,
    /// Blocks reclaimed at once.
    pub reclaim_range_blocks: u64,
    /// A range is reclaimed only if more than this many of its blocks are candidates.
    pub reclaim_candidates_min: u64,
    /// The bottom share of the LRU that is a candidate, in percent.
    pub reclaim_bottom_pct: u32,
    /// Replicas older than this are candidates too.
    pub reclaim_age_max: u32,
    /// After a failed reclamation wait replicas/this many reads.
    pub reclaim_wait_divisor: u64,
    /// Grow the bottom share gradually (from a quarter of it) instead of fixed.
    pub reclaim_growth: bool,
    /// Stop reclaiming while reclaimed replicas were mostly still in use.
    pub thrash_guard: bool,
    /// Replica choice.
    pub replica_choice: Choice,
    /// When replica writes go.
    pub replication: When,
    /// With `replication = "idle"`: deferred replica writes wait until no
    /// request came for this long (0: whenever nothing is outstanding).
    pub replication_idle_ms: u64,
    /// With `replication = "idle"`: a deferred replica write that waited
    /// this long goes out at the next grant, idle time or not (0: never).
    pub replication_wait_max_ms: u64,
    /// Writes of at most this many bytes over a replicated block update its
    /// replicas instead of invalidating them (0: off, the thesis).
    pub propagate_bytes_max: u32,
    /// A stream that created this many replica blocks and read fewer than
    /// an eighth as many from replicas is stopped (0: off).
    pub stream_quota_blocks: u64,
    /// Committed candidates written together in one trip to the replica
    /// extent (0: `queue_commit_count`).
    pub write_batch_count: u32,
    /// The largest lower write that consecutive replica writes merge into
    /// (a disk without a write cache loses a rotation between two writes
    /// that follow each other; 1 MiB: the block layer's usual limit).
    pub write_run_bytes_max: u64,
    /// A replica read also reads up to this many replica blocks that follow
    /// its chain, and the stream's next reads of them are answered from
    /// memory (0: off, the thesis: one lower read per upper read).
    pub readahead_blocks: u64,
    /// Each stream writes its replicas into its own current extent (the
    /// thesis: one current extent for all, so concurrent streams'
    /// chains interleave).
    pub extent_per_stream: bool,
    /// Replicas one original block may have.
    pub replicas_per_block_max: u32,
    /// Map memory past which replication stops.
    pub memory_bytes_max: u64,
    /// Streams tracked (the least recently seen is recycled).
    pub streams_max: u32,
    /// Scan the ext2/3/4 bitmaps for free space once per open, in idle time.
    pub fs_scan: bool,
    /// Table 4.1's RR and B handling; off only for negative-control tests.
    pub conflict_checks: bool,
}

const KEYS_SMALL: [(&str, u64, u64); 14] = [
    // key, min, max
    ("history_count", 1, 4096),
    ("close_blocks", 1, 1 << 40),
    ("pass_through_close_count", 1, 4096),
    ("queue_commit_count", 1, 4096),
    ("queue_sequential_cancel_count", 1, 4096),
    ("replicate_after_commit_count", 0, 1 << 32),
    ("queue_timeout_ms", 1, 3_600_000),
    ("free_extent_blocks_min", 1, 1 << 40),
    ("congestion_in_flight_max", 1, 1 << 20),
    ("congestion_backoff_reads", 0, 1 << 32),
    ("reclaim_range_blocks", 1, 1 << 32),
    ("reclaim_age_max", 1, 255),
    ("reclaim_wait_divisor", 1, 1 << 32),
    ("streams_max", 1, 1 << 16),
];

impl Args {
    /// Reads every key; `lower_bytes` is the device below.
    pub fn parse(mut a: ArgReader<'_>, lower_bytes: u64) -> Result<Args, ConfigError> {
        let block_bytes = a.size_opt("block_bytes")?.unwrap_or(4096);
        if block_bytes < SECTOR_BYTES
            || !block_bytes.is_power_of_two()
            || block_bytes > u64::from(REQUEST_BYTES_MAX)
        {
            return Err(a.error(format!(
                "key `block_bytes`: {block_bytes} must be a power of two from 512 to {REQUEST_BYTES_MAX}"
            )));
        }
        let meta_record_bytes = a.size_opt("meta_record_bytes")?.unwrap_or(64 << 10);
        // A record (and each snapshot block) goes down as one request.
        if meta_record_bytes < 4096
            || meta_record_bytes > u64::from(REQUEST_BYTES_MAX)
            || !meta_record_bytes.is_multiple_of(block_bytes.max(4096))
        {
            return Err(a.error(format!(
                "key `meta_record_bytes`: {meta_record_bytes} must be at least 4096, at most \
                 {REQUEST_BYTES_MAX} (one request) and a multiple of block_bytes"
            )));
        }
        // A 64th of the device, at most 64 MiB (about 2.7 million replica
        // extents), in whole pairs of blocks; none on devices too small.
        let snapshot_default =
            (lower_bytes / 64).min(64 << 20) / (2 * meta_record_bytes) * (2 * meta_record_bytes);
        let snapshot_bytes = a.size_opt("snapshot_bytes")?.unwrap_or(snapshot_default);
        if !snapshot_bytes.is_multiple_of(2 * meta_record_bytes) {
            return Err(a.error(format!(
                "key `snapshot_bytes`: {snapshot_bytes} must be a multiple of twice meta_record_bytes (0: no snapshot)"
            )));
        }
        let snapshot_interval_ms = a.ms_opt("snapshot_interval_ms")?.unwrap_or(30_000);
        let meta_bytes = 2 * meta_record_bytes + snapshot_bytes;
        let volume_bytes = lower_bytes.saturating_sub(meta_bytes) / block_bytes * block_bytes;
        if volume_bytes < 2 * block_bytes {
            return Err(a.error(format!(
                "the device ({lower_bytes} bytes) is too small for the metadata area ({meta_bytes} bytes) and two blocks"
            )));
        }
        if volume_bytes / block_bytes >= u64::from(u32::MAX) {
            return Err(a.error(format!(
                "key `block_bytes`: the volume has {} blocks of {block_bytes} bytes; replica keeps block numbers in 32 bits (use larger blocks)",
                volume_bytes / block_bytes
            )));
        }
        let mut small = [0u64; KEYS_SMALL.len()];
        let defaults = [64, 1000, 8, 8, 4, 64, 2000, 1024, 64, 256, 1024, 250, 250, 256];
        for (i, (key, min, max)) in KEYS_SMALL.iter().enumerate() {
            let v = a.u64_opt(key)?.unwrap_or(defaults[i]);
            if v < *min || v > *max {
                return Err(a.error(format!("key `{key}`: {v} is outside {min}..={max}")));
            }
            small[i] = v;
        }
        let args = Args {
            block_bytes: block_bytes as u32,
            volume_bytes,
            meta_record_bytes: meta_record_bytes as u32,
            snapshot_bytes,
            snapshot_interval_ms,
            history_count: small[0] as u32,
            close_blocks: small[1],
            pass_through_close_count: small[2] as u32,
            queue_commit_count: small[3] as u32,
            queue_sequential_cancel_count: small[4] as u32,
            replicate_after_commit_count: small[5] as u32,
            queue_timeout_ms: small[6],
            free_extent_blocks_min: small[7],
            congestion_in_flight_max: small[8] as u32,
            congestion_backoff_reads: small[9] as u32,
            reclaim_range_blocks: small[10],
            reclaim_candidates_min: 0,
            reclaim_bottom_pct: 10,
            reclaim_age_max: small[11] as u32,
            reclaim_wait_divisor: small[12],
            reclaim_growth: false,
            thrash_guard: false,
            replica_choice: Choice::Lowest,
            replication: When::Inline,
            replication_idle_ms: 0,
            replication_wait_max_ms: 0,
            pending_bytes_max: 64 << 20,
            propagate_bytes_max: 0,
            stream_quota_blocks: 0,
            write_batch_count: 0,
            write_run_bytes_max: 1 << 20,
            readahead_blocks: 0,
            extent_per_stream: false,
            replicas_per_block_max: 4,
            memory_bytes_max: 64 << 20,
            streams_max: small[13] as u32,
            conflict_checks: true,
            fs_scan: true,
        };
        let args = Self::parse_reclaim(&mut a, args)?;
        let args = Self::parse_options(&mut a, args)?;
        a.finish()?;
        Ok(args)
    }

    fn parse_reclaim(a: &mut ArgReader<'_>, mut args: Args) -> Result<Args, ConfigError> {
        args.reclaim_candidates_min =
            a.u64_opt("reclaim_candidates_min")?.unwrap_or(args.reclaim_range_blocks / 2);
        if args.reclaim_candidates_min >= args.reclaim_range_blocks {
            return Err(a.error(format!(
                "key `reclaim_candidates_min`: {} must be below reclaim_range_blocks ({}): no range could ever qualify",
                args.reclaim_candidates_min, args.reclaim_range_blocks
            )));
        }
        let pct = a.u64_opt("reclaim_bottom_pct")?.unwrap_or(10);
        if !(1..=100).contains(&pct) {
            return Err(a.error(format!("key `reclaim_bottom_pct`: {pct} is outside 1..=100")));
        }
        args.reclaim_bottom_pct = pct as u32;
        args.reclaim_growth = a.bool_opt("reclaim_growth")?.unwrap_or(false);
        args.thrash_guard = a.bool_opt("thrash_guard")?.unwrap_or(false);
        if args.free_extent_blocks_min > args.reclaim_range_blocks {
            return Err(a.error(format!(
                "key `free_extent_blocks_min`: {} is past reclaim_range_blocks ({}): a reclaimed range could never be used",
                args.free_extent_blocks_min, args.reclaim_range_blocks
            )));
        }
        if args.queue_sequential_cancel_count > args.queue_commit_count {
            return Err(a.error(format!(
                "key `queue_sequential_cancel_count`: {} is past queue_commit_count ({}): the queue could never be cancelled",
                args.queue_sequential_cancel_count, args.queue_commit_count
            )));
        }
        Ok(args)
    }

    fn parse_options(a: &mut ArgReader<'_>, mut args: Args) -> Result<Args, ConfigError> {
        args.replica_choice = match a.str_opt("replica_choice")?.unwrap_or("lowest") {
            "lowest" => Choice::Lowest,
            "longest" => Choice::Longest,
            "mru" => Choice::Mru,
            other => {
                return Err(a.error(format!("key `replica_choice`: `{other}` (known: lowest, longest, mru)")))
            }
        };
        args.replication = match a.str_opt("replication")?.unwrap_or("inline") {
            "inline" => When::Inline,
            "idle" => When::Idle,
            other => return Err(a.error(format!("key `replication`: `{other}` (known: inline, idle)"))),
        };
        args.replication_idle_ms = a.ms_opt("replication_idle_ms")?.unwrap_or(0);
        args.replication_wait_max_ms = a.ms_opt("replication_wait_max_ms")?.unwrap_or(0);
        if args.replication_wait_max_ms > 0 && args.replication != When::Idle {
            return Err(a.error(format!(
                "key `replication_wait_max_ms`: {} has no effect with replication = \"inline\" (set replication = \"idle\")",
                args.replication_wait_max_ms
            )));
        }
        args.pending_bytes_max = a.size_opt("pending_bytes_max")?.unwrap_or(64 << 20);
        if args.pending_bytes_max < u64::from(args.block_bytes) {
            return Err(a.error(format!(
                "key `pending_bytes_max`: {} is below one block ({} bytes): no replica could ever be written",
                args.pending_bytes_max, args.block_bytes
            )));
        }
        if args.replication_idle_ms > 0 && args.replication != When::Idle {
            return Err(a.error(format!(
                "key `replication_idle_ms`: {} has no effect with replication = \"inline\" (set replication = \"idle\")",
                args.replication_idle_ms
            )));
        }
        let p = a.size_opt("propagate_bytes_max")?.unwrap_or(0);
        if p > 64 << 10 || !p.is_multiple_of(SECTOR_BYTES) {
            return Err(a.error(format!(
                "key `propagate_bytes_max`: {p} must be a multiple of 512 up to 64KiB (0: off)"
            )));
        }
        args.propagate_bytes_max = p as u32;
        args.stream_quota_blocks = a.u64_opt("stream_quota_blocks")?.unwrap_or(0);
        let w = a.u64_opt("write_batch_count")?.unwrap_or(0);
        if w > 4096 {
            return Err(
                a.error(format!("key `write_batch_count`: {w} is outside 0..=4096 (0: queue_commit_count)"))
            );
        }
        args.write_batch_count = w as u32;
        args.write_run_bytes_max = a.size_opt("write_run_bytes_max")?.unwrap_or(1 << 20);
        if args.write_run_bytes_max < u64::from(args.block_bytes)
            || args.write_run_bytes_max > u64::from(REQUEST_BYTES_MAX)
        {
            return Err(a.error(format!(
                "key `write_run_bytes_max`: {} is outside one block ({} bytes) to {REQUEST_BYTES_MAX}",
                args.write_run_bytes_max, args.block_bytes
            )));
        }
        args.extent_per_stream = a.bool_opt("extent_per_stream")?.unwrap_or(false);
        let ra_max = u64::from(REQUEST_BYTES_MAX / 2) / u64::from(args.block_bytes);
        args.readahead_blocks = a.u64_opt("readahead_blocks")?.unwrap_or(0);
        if args.readahead_blocks > ra_max {
            return Err(a.error(format!(
                "key `readahead_blocks`: {} is past {ra_max} (half the largest request, in blocks; 0: off)",
                args.readahead_blocks
            )));
        }
        let r = a.u64_opt("replicas_per_block_max")?.unwrap_or(4);
        if !(1..=16).contains(&r) {
            return Err(a.error(format!("key `replicas_per_block_max`: {r} is outside 1..=16")));
        }
        args.replicas_per_block_max = r as u32;
        args.memory_bytes_max = a.size_opt("memory_bytes_max")?.unwrap_or(64 << 20);
        if args.memory_bytes_max < 4096 {
            return Err(a.error("key `memory_bytes_max`: below 4096 bytes nothing could be replicated"));
        }
        args.fs_scan = match a.str_opt("fs_scan")?.unwrap_or("ext") {
            "ext" => true,
            "off" => false,
            other => return Err(a.error(format!("key `fs_scan`: `{other}` (known: ext, off)"))),
        };
        args.conflict_checks = match a.str_opt("conflict_checks")?.unwrap_or("on") {
            "on" => true,
            "off-unsafe-for-tests" => false,
            other => {
                return Err(a.error(format!(
                    "key `conflict_checks`: `{other}` (known: on; off-unsafe-for-tests removes Table 4.1's RR and B handling for negative-control tests)"
                )))
            }
        };
        Ok(args)
    }

    /// The lower byte offset of the metadata area (after the volume).
    pub fn meta_offset_bytes(&self) -> u64 {
        self.volume_bytes
    }

    /// The lower byte offset of snapshot copy `copy`.
    pub fn snapshot_offset_bytes(&self, copy: u64) -> u64 {
        self.volume_bytes + 2 * u64::from(self.meta_record_bytes) + copy * (self.snapshot_bytes / 2)
    }

    /// Blocks of the volume.
    pub fn volume_blocks(&self) -> u64 {
        self.volume_bytes / u64::from(self.block_bytes)
    }

    /// The configuration in config key names.
    pub fn echo(&self) -> Vec<(String, String)> {
        let choice = match self.replica_choice {
            Choice::Lowest => "lowest",
            Choice::Longest => "longest",
            Choice::Mru => "mru",
        };
        let when = match self.replication {
            When::Inline => "inline",
            When::Idle => "idle",
        };
        let kv = [
            ("block_bytes", self.block_bytes.to_string()),
            ("meta_record_bytes", self.meta_record_bytes.to_string()),
            ("snapshot_bytes", self.snapshot_bytes.to_string()),
            ("snapshot_interval_ms", self.snapshot_interval_ms.to_string()),
            ("history_count", self.history_count.to_string()),
            ("close_blocks", self.close_blocks.to_string()),
            ("pass_through_close_count", self.pass_through_close_count.to_string()),
            ("queue_commit_count", self.queue_commit_count.to_string()),
            ("queue_sequential_cancel_count", self.queue_sequential_cancel_count.to_string()),
            ("replicate_after_commit_count", self.replicate_after_commit_count.to_string()),
            ("queue_timeout_ms", self.queue_timeout_ms.to_string()),
            ("free_extent_blocks_min", self.free_extent_blocks_min.to_string()),
            ("congestion_in_flight_max", self.congestion_in_flight_max.to_string()),
            ("congestion_backoff_reads", self.congestion_backoff_reads.to_string()),
            ("reclaim_range_blocks", self.reclaim_range_blocks.to_string()),
            ("reclaim_candidates_min", self.reclaim_candidates_min.to_string()),
            ("reclaim_bottom_pct", self.reclaim_bottom_pct.to_string()),
            ("reclaim_age_max", self.reclaim_age_max.to_string()),
            ("reclaim_wait_divisor", self.reclaim_wait_divisor.to_string()),
            ("reclaim_growth", self.reclaim_growth.to_string()),
            ("thrash_guard", self.thrash_guard.to_string()),
            ("replica_choice", choice.to_string()),
            ("replication", when.to_string()),
            ("replication_idle_ms", self.replication_idle_ms.to_string()),
            ("replication_wait_max_ms", self.replication_wait_max_ms.to_string()),
            ("pending_bytes_max", self.pending_bytes_max.to_string()),
            ("propagate_bytes_max", self.propagate_bytes_max.to_string()),
            ("stream_quota_blocks", self.stream_quota_blocks.to_string()),
            ("write_batch_count", self.write_batch_count.to_string()),
            ("write_run_bytes_max", self.write_run_bytes_max.to_string()),
            ("readahead_blocks", self.readahead_blocks.to_string()),
            ("extent_per_stream", self.extent_per_stream.to_string()),
            ("replicas_per_block_max", self.replicas_per_block_max.to_string()),
            ("memory_bytes_max", self.memory_bytes_max.to_string()),
            ("streams_max", self.streams_max.to_string()),
            ("fs_scan", if self.fs_scan { "ext" } else { "off" }.to_string()),
            ("conflict_checks", if self.conflict_checks { "on" } else { "off-unsafe-for-tests" }.to_string()),
        ];
        kv.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
    }
}
