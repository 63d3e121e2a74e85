//! Parsing the `opt` layer's keys into a typed [`Args`] and the region
//! geometry; errors name the key.

use layoutd_core::config::{ArgReader, ConfigError};
use layoutd_core::metablock::HEADER_BYTES;
use layoutd_core::streams::base_of;
use layoutd_core::{StreamId, REQUEST_BYTES_MAX, SECTOR_BYTES};

/// Bytes of one journal block (a [`layoutd_core::metablock`] block).
pub const JOURNAL_BLOCK_BYTES: u64 = 4096;
/// Worst-case bytes of map per slot: one 22-byte run record and one
/// 11-byte dirty record (see `meta.rs`).
const MAP_BYTES_PER_SLOT: u64 = 33;
/// Fixed fields of the map payload.
pub const MAP_FIXED_BYTES: u64 = 16;

/// Which stream a profiled request's graph (and a read's choice among a
/// block's copies) belongs to (`graph_stream`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GraphStream {
    /// The base stream ([`base_of`]): the NBD connection live, the process
    /// (or device) in a replay. One graph holds the transitions between the
    /// sequential runs the detector tells apart within it (a process
    /// reading one file after another, or two at once), the paper's
    /// per-process graph. The default since session 23.
    Base,
    /// The detected run: one graph per sequential run of a base stream
    /// (the behaviour before session 23).
    Run,
}

impl GraphStream {
    /// The key of a request of stream `s`.
    pub fn key(self, s: StreamId) -> u32 {
        match self {
            GraphStream::Base => base_of(s).0,
            GraphStream::Run => s.0,
        }
    }

    fn name(self) -> &'static str {
        match self {
            GraphStream::Base => "base",
            GraphStream::Run => "run",
        }
    }
}

/// The parsed configuration.
#[derive(Clone, Debug)]
pub struct Args {
    /// Where the OPT region starts on the lower device.
    pub opt_offset_bytes: u64,
    /// Its length.
    pub opt_length_bytes: u64,
    /// The unit of the map and of copies.
    pub block_bytes: u64,
    /// Journal blocks between map rewrites.
    pub journal_blocks: u32,
    /// Most profile entries buffered before analysis takes them.
    pub profile_entries_max: u32,
    /// The stream a request is profiled under and reads its copies by.
    pub graph_stream: GraphStream,
    /// Most vertices (block ranges) in all stream graphs together.
    pub graph_vertices_max: u32,
    /// Most edges and skip edges in all stream graphs together.
    pub graph_edges_max: u32,
    /// Analysis work units (profile entries, edges visited) per background step.
    pub analysis_units_per_step: u32,
    /// A transition slower than this counts less (weight `think / gap`).
    pub think_time_ms: u64,
    /// The planner stops at vertices whose connectivity is below this.
    pub edge_weight_min: u64,
    /// Most copies of one block in the region (1: one slot per block; more:
    /// a block several streams read, a shared library, may get a copy in
    /// each stream's sequence; extra copies are clean and read-only).
    pub copies_max: u32,
    /// The plan grows a sequence by the edge the stream's skip edge
    /// confirms (`a -> b -> c` seen: after `a, b` comes `c`) before a
    /// heavier one another stream made (at a shared block).
    pub follow_streams: bool,
    /// Plan by laying out each stream's requests in its order, one stream
    /// after the other, an earlier run's layout reused when a stream reads
    /// on along it (`analyze::plan_streams`), instead of the paper's greedy
    /// over the merged graph; blocks repeat up to `copies_max` times.
    pub plan_streams: bool,
    /// With `plan_streams`: a request laid out takes along up to this many
    /// of its home neighbours on each side that no copy holds yet (the rest
    /// of its file, on a file system that keeps files together), so a read
    /// the profile never saw next to ones it saw is served from the region.
    pub plan_pad_blocks: u32,
    /// With `plan_streams`: lay out the ranges the stream wrote too (the
    /// paper profiles every request). Off: a written range stays home,
    /// where the stream's other writes go.
    pub plan_written: bool,
    /// With `plan_streams`: a stream whose requests leave the sequence it
    /// follows (read there by an earlier run) gets that sequence laid out
    /// anew, as extra copies, with its own requests where it read them
    /// (`analyze::plan_streams`); off: they go wherever the plan's next
    /// free slots are.
    pub plan_relay: bool,
    /// With `plan_streams`: each stream's requests in the order it took
    /// its transitions (each up to `analyze::SIGHTINGS_MAX` times: a run's
    /// reads in their order, a short path the stream came back to from
    /// elsewhere laid out again there, up to `copies_max`, a rerun of at
    /// least `analyze::JOIN_MIN` requests read where it lies) instead of
    /// the order of its graph's heaviest edges (`analyze::time_order`).
    pub plan_time_order: bool,
    /// A dirty block (an absorbed write, or a copy written since) that a
    /// plan places, whose slot lies next to neither the slot of the block
    /// the plan puts before it nor of the one after it, is moved into the
    /// plan's order: copied home and dropped, then copied in where the
    /// plan puts it (false: it stays in its slot, as every block does).
    pub plan_moves_dirty: bool,
    /// Reads choose among a block's copies by the stream's sequence: the
    /// stream's position in the region survives its reads from home, and
    /// a copy laid out right after the block the stream read last wins
    /// over a nearer one (`nearest_copy`).
    pub read_follow: bool,
    /// A read partly in OPT, partly home goes wholly home when its OPT
    /// blocks are clean (one seek instead of two).
    pub partial_reads_home: bool,
    /// The unmapped blocks of a write of whole blocks go to free slots of
    /// the region, a learnt gap past the previous write (`absorb`; off by
    /// default: it takes bulk writes too, see docs/opt.md).
    pub absorb_writes: bool,
    /// With `absorb_writes`: a write of more blocks than this goes home (a
    /// bulk write streams at home; 0: no limit).
    pub absorb_blocks_max: u32,
    /// With `absorb_writes`: absorb a write that continues the previous
    /// write (its first block right after that write's last) too; false (the
    /// default): it goes home, where it costs no seek.
    pub absorb_sequential: bool,
    /// With `absorb_writes`: absorption never takes the last this many
    /// percent of the region's slots (free slots kept for the plan).
    pub absorb_reserve_pct: u32,
    /// With `absorb_writes`: absorb while a reconfiguration runs too, into
    /// the free slots its copies do not go to; false (the default): every
    /// write goes home while a job runs.
    pub absorb_during_jobs: bool,
    /// Most blocks one copy read moves (a run of the plan; the rate is
    /// capped by `[background] rate`).
    pub copy_blocks_per_step: u32,
    /// Copy reads in flight at once (a foreground request arriving in
    /// idle time waits behind at most these).
    pub copies_in_flight: u32,
    /// Blocks read into memory before they are written to their slots in
    /// as few writes as the slots allow (a batch: memory for copies).
    pub copy_batch_blocks: u32,
    /// Plan after this many profiled requests (0: not by count).
    pub plan_interval_requests: u64,
    /// Plan after this much virtual time with new requests (0: not by time).
    pub plan_interval_ms: u64,
    /// The graphs' weights halve once per this much virtual time, counted
    /// at each plan (0: once at every plan, however often plans come, the
    /// behaviour before session 23). Default one day: patterns fade by
    /// age, not by how often the loop plans.
    pub weight_half_life_ms: u64,
    /// Plan and apply on their own (false: only on `plan` / `apply`).
    pub auto_apply: bool,
    /// Background work (analysis, planning, copies) starts only after this
    /// long without a request (0: whenever the runtime reports idle).
    pub idle_ms: u64,
    /// A read from the region that goes on along its planned sequence
    /// reads on this many bytes of the sequence's following slots (the
    /// shared read-ahead, `crate::readahead`; 0: off, the default).
    pub readahead_bytes: u64,
    /// Most bytes read ahead held in memory (the oldest go first).
    pub readahead_memory_bytes: u64,
    /// Which reads read ahead (`readahead_when`).
    pub readahead_when: ReadAheadWhen,
    /// A read from the region that starts at most this many bytes past
    /// where the stream's previous read from the region ended, with every
    /// slot between mapped and the disk's last request ended there, reads
    /// those slots too and holds them (the
    /// shared read-ahead's memory): the head passes over them anyway, and a
    /// stream that skips a stretch of its sequence (a program's read-ahead
    /// window taken before the reads it follows) reads it next. 0: off,
    /// the default.
    pub readbehind_bytes: u64,
}

/// Which reads from the region read ahead along their sequence.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadAheadWhen {
    /// A read that starts where the stream's previous read from the region
    /// ended, or up to `readahead_bytes` after it (it goes on).
    Following,
    /// A read that goes on (as `Following`) while the previous lower
    /// request ended elsewhere: the stream comes back to its sequence after
    /// the disk went elsewhere, so the drive is not reading on there.
    Resumed,
    /// Every read whose last piece is in the region.
    Always,
}

impl ReadAheadWhen {
    /// The config value.
    pub fn name(self) -> &'static str {
        match self {
            ReadAheadWhen::Following => "following",
            ReadAheadWhen::Resumed => "resumed",
            ReadAheadWhen::Always => "always",
        }
    }
}

/// Where things are on the lower device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// OPT region start.
    pub opt_offset_bytes: u64,
    /// OPT region length.
    pub opt_length_bytes: u64,
    /// The volume (the rest of the device).
    pub volume_bytes: u64,
    /// Block size.
    pub block_bytes: u64,
    /// Bytes of one map copy.
    pub map_bytes: u64,
    /// Journal blocks.
    pub journal_blocks: u32,
    /// Data slots in the region.
    pub slot_count: u32,
}

impl Geometry {
    /// Where map copy `copy` (0 or 1) lives.
    pub fn map_offset_bytes(&self, copy: usize) -> u64 {
        self.opt_offset_bytes + copy as u64 * self.map_bytes
    }

    /// Where journal block `i` lives.
    pub fn journal_offset_bytes(&self, i: u32) -> u64 {
        assert!(i < self.journal_blocks);
        self.opt_offset_bytes + 2 * self.map_bytes + u64::from(i) * JOURNAL_BLOCK_BYTES
    }

    /// Bytes of metadata at the start of the region.
    pub fn meta_bytes(&self) -> u64 {
        2 * self.map_bytes + u64::from(self.journal_blocks) * JOURNAL_BLOCK_BYTES
    }

    /// Where slot `slot` lives.
    pub fn slot_offset_bytes(&self, slot: u32) -> u64 {
        assert!(slot < self.slot_count, "slot {slot} of {}", self.slot_count);
        self.opt_offset_bytes + self.meta_bytes() + u64::from(slot) * self.block_bytes
    }

    /// Where volume byte `upper` lives at home (the volume skips the region).
    pub fn home_bytes(&self, upper: u64) -> u64 {
        assert!(upper < self.volume_bytes);
        if upper < self.opt_offset_bytes {
            upper
        } else {
            upper + self.opt_length_bytes
        }
    }

    /// The slots lower bytes `[offset, offset + length)` touch, if any.
    pub fn slots_of(&self, offset: u64, length: u64) -> Option<(u64, u64)> {
        let first = self.opt_offset_bytes + self.meta_bytes();
        let end = first + u64::from(self.slot_count) * self.block_bytes;
        let (a, z) = (offset.max(first), (offset + length).min(end));
        (a < z).then(|| ((a - first) / self.block_bytes, (z - first).div_ceil(self.block_bytes)))
    }

    /// Whole blocks of the volume (a partial last block is never mapped).
    pub fn volume_blocks(&self) -> u64 {
        self.volume_bytes / self.block_bytes
    }

    /// Computes the geometry, or says why the region cannot hold it.
    pub fn new(
        opt_offset_bytes: u64,
        opt_length_bytes: u64,
        lower_bytes: u64,
        block_bytes: u64,
        journal_blocks: u32,
    ) -> Result<Geometry, String> {
        let end = opt_offset_bytes.checked_add(opt_length_bytes).filter(|&e| e <= lower_bytes);
        if end.is_none() {
            return Err(format!(
                "`opt_offset` {opt_offset_bytes} + `opt_length` {opt_length_bytes} runs past the end of \
                 the lower device ({lower_bytes} bytes): the OPT region would overlap nothing but must fit"
            ));
        }
        if opt_length_bytes >= lower_bytes {
            return Err(format!(
                "`opt_length` {opt_length_bytes} leaves no volume on a device of {lower_bytes} bytes"
            ));
        }
        let upper_slots = opt_length_bytes / block_bytes;
        let map_payload = MAP_FIXED_BYTES + upper_slots * MAP_BYTES_PER_SLOT;
        let map_bytes = (HEADER_BYTES as u64 + map_payload).next_multiple_of(4096);
        if map_bytes > u64::from(REQUEST_BYTES_MAX) {
            return Err(format!(
                "the map of an OPT region of {opt_length_bytes} bytes in blocks of {block_bytes} needs \
                 {map_bytes} bytes, past one request ({REQUEST_BYTES_MAX}); raise `block_bytes` or lower `opt_length`"
            ));
        }
        let meta = 2 * map_bytes + u64::from(journal_blocks) * JOURNAL_BLOCK_BYTES;
        let slots = opt_length_bytes.saturating_sub(meta) / block_bytes;
        if slots == 0 {
            return Err(format!(
                "`opt_length` {opt_length_bytes} is too small for its map: two map copies of {map_bytes} \
                 bytes and {journal_blocks} journal blocks of {JOURNAL_BLOCK_BYTES} take {meta} bytes, \
                 leaving no block of {block_bytes}; give at least {} bytes",
                meta + block_bytes
            ));
        }
        let slot_count = u32::try_from(slots)
            .map_err(|_| format!("the OPT region holds {slots} blocks, past 2^32; raise `block_bytes`"))?;
        Ok(Geometry {
            opt_offset_bytes,
            opt_length_bytes,
            volume_bytes: lower_bytes - opt_length_bytes,
            block_bytes,
            map_bytes,
            journal_blocks,
            slot_count,
        })
    }
}

impl Args {
    /// Whether reads of the region are extended and the extra bytes held
    /// (read-ahead or read-behind): every lower write must then drop what
    /// is held of its slots.
    pub fn holds_reads(&self) -> bool {
        self.readahead_bytes > 0 || self.readbehind_bytes > 0
    }

    /// Reads every key (unknown keys are errors) and computes the geometry.
    pub fn parse(mut a: ArgReader<'_>, lower_bytes: u64) -> Result<(Args, Geometry), ConfigError> {
        let block_bytes = a.size_opt("block_bytes")?.unwrap_or(4096);
        if block_bytes < SECTOR_BYTES || !block_bytes.is_power_of_two() || block_bytes > 1 << 20 {
            return Err(a.error(format!(
                "key `block_bytes`: {block_bytes} must be a power of two from 512 to 1 MiB"
            )));
        }
        // 4% of the device, at most 1 GiB (a map of 256 Ki blocks of 4 KiB,
        // about 8 MiB per copy, rewritten at each reconfiguration).
        let default_length = (lower_bytes / 25).min(1 << 30).next_multiple_of(block_bytes);
        let opt_length_bytes = a.size_opt("opt_length")?.unwrap_or(default_length);
        let default_offset = (lower_bytes.saturating_sub(opt_length_bytes) / 2) / block_bytes * block_bytes;
        let opt_offset_bytes = a.size_opt("opt_offset")?.unwrap_or(default_offset);
        for (key, v) in [("opt_offset", opt_offset_bytes), ("opt_length", opt_length_bytes)] {
            if !v.is_multiple_of(block_bytes) {
                return Err(
                    a.error(format!("key `{key}`: {v} is not a multiple of `block_bytes` {block_bytes}"))
                );
            }
        }
        let journal_blocks = u32_key(&mut a, "journal_blocks", 16, 1, 4096)?;
        let args = Args {
            opt_offset_bytes,
            opt_length_bytes,
            block_bytes,
            journal_blocks,
            profile_entries_max: u32_key(&mut a, "profile_entries_max", 65536, 16, 1 << 24)?,
            graph_stream: match a.str_opt("graph_stream")?.unwrap_or("base") {
                "base" => GraphStream::Base,
                "run" => GraphStream::Run,
                other => {
                    return Err(a.error(format!("key `graph_stream`: {other:?} is not \"base\" or \"run\"")))
                }
            },
            graph_vertices_max: u32_key(&mut a, "graph_vertices_max", 65536, 4, 1 << 24)?,
            graph_edges_max: u32_key(&mut a, "graph_edges_max", 262144, 4, 1 << 26)?,
            analysis_units_per_step: u32_key(&mut a, "analysis_units_per_step", 4096, 1, 1 << 30)?,
            think_time_ms: a.ms_opt("think_time_ms")?.unwrap_or(100).max(1),
            edge_weight_min: a.u64_opt("edge_weight_min")?.unwrap_or(2),
            copies_max: u32_key(&mut a, "copies_max", 1, 1, 16)?,
            follow_streams: a.bool_opt("follow_streams")?.unwrap_or(false),
            plan_streams: a.bool_opt("plan_streams")?.unwrap_or(false),
            plan_pad_blocks: u32_key(&mut a, "plan_pad_blocks", 0, 0, 1024)?,
            plan_written: a.bool_opt("plan_written")?.unwrap_or(true),
            plan_relay: a.bool_opt("plan_relay")?.unwrap_or(false),
            plan_time_order: a.bool_opt("plan_time_order")?.unwrap_or(false),
            plan_moves_dirty: a.bool_opt("plan_moves_dirty")?.unwrap_or(false),
            read_follow: a.bool_opt("read_follow")?.unwrap_or(false),
            partial_reads_home: a.bool_opt("partial_reads_home")?.unwrap_or(false),
            absorb_writes: a.bool_opt("absorb_writes")?.unwrap_or(false),
            absorb_blocks_max: u32_key(&mut a, "absorb_blocks_max", 16, 0, 1 << 20)?,
            absorb_sequential: a.bool_opt("absorb_sequential")?.unwrap_or(false),
            absorb_reserve_pct: u32_key(&mut a, "absorb_reserve_pct", 50, 0, 100)?,
            absorb_during_jobs: a.bool_opt("absorb_during_jobs")?.unwrap_or(false),
            copy_blocks_per_step: u32_key(&mut a, "copy_blocks_per_step", 64, 1, 8192)?,
            copies_in_flight: u32_key(&mut a, "copies_in_flight", 4, 1, 64)?,
            copy_batch_blocks: u32_key(&mut a, "copy_batch_blocks", 256, 1, 1 << 16)?,
            plan_interval_requests: a.u64_opt("plan_interval_requests")?.unwrap_or(0),
            plan_interval_ms: a.ms_opt("plan_interval_ms")?.unwrap_or(600_000),
            weight_half_life_ms: a.ms_opt("weight_half_life_ms")?.unwrap_or(86_400_000),
            auto_apply: a.bool_opt("auto_apply")?.unwrap_or(true),
            idle_ms: a.ms_opt("idle_ms")?.unwrap_or(100),
            readahead_bytes: a.size_opt("readahead_bytes")?.unwrap_or(0),
            readahead_memory_bytes: a.size_opt("readahead_memory_bytes")?.unwrap_or(4 << 20),
            readbehind_bytes: a.size_opt("readbehind_bytes")?.unwrap_or(0),
            readahead_when: match a.str_opt("readahead_when")?.unwrap_or("following") {
                "following" => ReadAheadWhen::Following,
                "resumed" => ReadAheadWhen::Resumed,
                "always" => ReadAheadWhen::Always,
                other => {
                    return Err(a.error(format!(
                        "key `readahead_when`: {other:?} is not \"following\", \"resumed\" or \"always\""
                    )))
                }
            },
        };
        let ra_max = u64::from(layoutd_core::REQUEST_BYTES_MAX) / 2;
        if !args.readahead_bytes.is_multiple_of(block_bytes) || args.readahead_bytes > ra_max {
            return Err(a.error(format!(
                "key `readahead_bytes`: {} must be a multiple of `block_bytes` {block_bytes} up to {ra_max} (0: off)",
                args.readahead_bytes
            )));
        }
        if !args.readbehind_bytes.is_multiple_of(block_bytes) || args.readbehind_bytes > ra_max {
            return Err(a.error(format!(
                "key `readbehind_bytes`: {} must be a multiple of `block_bytes` {block_bytes} up to {ra_max} (0: off)",
                args.readbehind_bytes
            )));
        }
        if args.readbehind_bytes > args.readahead_memory_bytes {
            return Err(a.error(format!(
                "key `readahead_memory_bytes`: {} cannot hold one read-behind of `readbehind_bytes` {}",
                args.readahead_memory_bytes, args.readbehind_bytes
            )));
        }
        if args.readahead_bytes > args.readahead_memory_bytes {
            return Err(a.error(format!(
                "key `readahead_memory_bytes`: {} cannot hold one read-ahead of `readahead_bytes` {}",
                args.readahead_memory_bytes, args.readahead_bytes
            )));
        }
        if args.plan_pad_blocks > 0 && !args.plan_streams {
            return Err(a.error("key `plan_pad_blocks` pads the stream plan: it needs `plan_streams = true`"));
        }
        if !args.plan_written && !args.plan_streams {
            return Err(
                a.error("key `plan_written` is a stream plan's choice: it needs `plan_streams = true`")
            );
        }
        if args.plan_relay && !args.plan_streams {
            return Err(
                a.error("key `plan_relay` lays out stream plans anew: it needs `plan_streams = true`")
            );
        }
        if args.plan_time_order && !args.plan_streams {
            return Err(a.error(
                "key `plan_time_order` orders each stream's plan by time: it needs `plan_streams = true`",
            ));
        }
        a.finish()?;
        let geo = Geometry::new(opt_offset_bytes, opt_length_bytes, lower_bytes, block_bytes, journal_blocks)
            .map_err(|e| ConfigError(format!("layer (opt): {e}")))?;
        Ok((args, geo))
    }

    /// The config echoed back, in config key names.
    pub fn echo(&self) -> Vec<(String, String)> {
        let v = [
            ("opt_offset", self.opt_offset_bytes.to_string()),
            ("opt_length", self.opt_length_bytes.to_string()),
            ("block_bytes", self.block_bytes.to_string()),
            ("journal_blocks", self.journal_blocks.to_string()),
            ("profile_entries_max", self.profile_entries_max.to_string()),
            ("graph_stream", self.graph_stream.name().to_string()),
            ("graph_vertices_max", self.graph_vertices_max.to_string()),
            ("graph_edges_max", self.graph_edges_max.to_string()),
            ("analysis_units_per_step", self.analysis_units_per_step.to_string()),
            ("think_time_ms", self.think_time_ms.to_string()),
            ("edge_weight_min", self.edge_weight_min.to_string()),
            ("copies_max", self.copies_max.to_string()),
            ("follow_streams", self.follow_streams.to_string()),
            ("plan_streams", self.plan_streams.to_string()),
            ("plan_pad_blocks", self.plan_pad_blocks.to_string()),
            ("plan_written", self.plan_written.to_string()),
            ("plan_relay", self.plan_relay.to_string()),
            ("plan_time_order", self.plan_time_order.to_string()),
            ("plan_moves_dirty", self.plan_moves_dirty.to_string()),
            ("read_follow", self.read_follow.to_string()),
            ("partial_reads_home", self.partial_reads_home.to_string()),
            ("absorb_writes", self.absorb_writes.to_string()),
            ("absorb_blocks_max", self.absorb_blocks_max.to_string()),
            ("absorb_sequential", self.absorb_sequential.to_string()),
            ("absorb_reserve_pct", self.absorb_reserve_pct.to_string()),
            ("absorb_during_jobs", self.absorb_during_jobs.to_string()),
            ("copy_blocks_per_step", self.copy_blocks_per_step.to_string()),
            ("copies_in_flight", self.copies_in_flight.to_string()),
            ("copy_batch_blocks", self.copy_batch_blocks.to_string()),
            ("plan_interval_requests", self.plan_interval_requests.to_string()),
            ("plan_interval_ms", self.plan_interval_ms.to_string()),
            ("weight_half_life_ms", self.weight_half_life_ms.to_string()),
            ("auto_apply", self.auto_apply.to_string()),
            ("idle_ms", self.idle_ms.to_string()),
            ("readahead_bytes", self.readahead_bytes.to_string()),
            ("readahead_memory_bytes", self.readahead_memory_bytes.to_string()),
            ("readahead_when", self.readahead_when.name().to_string()),
            ("readbehind_bytes", self.readbehind_bytes.to_string()),
        ];
        v.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
    }
}

fn u32_key(a: &mut ArgReader<'_>, key: &str, default: u32, min: u32, max: u32) -> Result<u32, ConfigError> {
    let v = a.u64_opt(key)?.unwrap_or(u64::from(default));
    if v < u64::from(min) || v > u64::from(max) {
        return Err(a.error(format!("key `{key}`: {v} is outside {min}..={max}")));
    }
    Ok(v as u32)
}
