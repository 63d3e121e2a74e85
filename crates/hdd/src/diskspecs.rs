//! DiskSim parameter import: `.diskspecs`, the `.model` it sources, and the
//! `.seek` curve the model names.
//!
//! DiskSim's syntax is a tree of blocks: `type name { Key = value, ... }`,
//! where a value is a number, a word, `source FILE`, a nested `type { ... }`
//! block or a `[ ... ]` list; `#` starts a comment. Keys contain spaces and
//! are matched case-insensitively with runs of spaces collapsed. Only what the
//! model uses is read; everything else is ignored.

use crate::params::{ms_to_ns, CacheParams, DiskParams, Interface, Overheads, SeekCurve, Zone};
use crate::HddError;
use std::path::{Path, PathBuf};

/// Deepest block nesting accepted (DiskSim files nest 4 deep).
const NESTING_DEPTH_MAX: u32 = 16;

#[derive(Debug)]
enum Value {
    Number(f64),
    Word(String),
    Block(Block),
    List(Vec<Value>),
}

#[derive(Debug)]
struct Entry {
    key: String,
    value: Value,
    line: u32,
}

#[derive(Debug)]
struct Block {
    type_name: String,
    line: u32,
    entries: Vec<Entry>,
}

/// One parsed file: its path (for messages) and top-level blocks.
struct Document {
    path: PathBuf,
    blocks: Vec<Block>,
}

struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
    line: u32,
    path: &'a Path,
}

impl<'a> Cursor<'a> {
    fn error<T>(&self, message: impl Into<String>) -> Result<T, HddError> {
        Err(HddError::Parse { path: self.path.to_path_buf(), line: self.line, message: message.into() })
    }

    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.at).copied()
    }

    fn bump(&mut self) {
        if self.peek() == Some(b'\n') {
            self.line += 1;
        }
        self.at += 1;
    }

    /// Skip whitespace and `#` comments.
    fn skip_blank(&mut self) {
        while let Some(byte) = self.peek() {
            if byte == b'#' {
                while self.peek().is_some_and(|b| b != b'\n') {
                    self.bump();
                }
            } else if byte.is_ascii_whitespace() {
                self.bump();
            } else {
                break;
            }
        }
    }

    /// Text up to (not including) any of `stops`, trimmed.
    fn token(&mut self, stops: &[u8]) -> String {
        let start = self.at;
        while self.peek().is_some_and(|b| !stops.contains(&b)) {
            self.bump();
        }
        String::from_utf8_lossy(&self.bytes[start..self.at]).trim().to_string()
    }

    fn expect(&mut self, byte: u8) -> Result<(), HddError> {
        self.skip_blank();
        if self.peek() != Some(byte) {
            let found = self.peek().map_or("end of file".to_string(), |b| format!("{:?}", b as char));
            return self.error(format!("expected {:?}, found {found}", byte as char));
        }
        self.bump();
        Ok(())
    }

    /// Entries up to the closing brace (consumed).
    fn entries(&mut self, depth: u32) -> Result<Vec<Entry>, HddError> {
        if depth > NESTING_DEPTH_MAX {
            return self.error("blocks nest too deeply");
        }
        let mut entries = Vec::new();
        loop {
            self.skip_blank();
            match self.peek() {
                None => return self.error("unterminated block: missing '}'"),
                Some(b'}') => {
                    self.bump();
                    return Ok(entries);
                }
                Some(b',') => self.bump(),
                Some(_) => {
                    let line = self.line;
                    let key = normalize_key(&self.token(b"=}\n"));
                    if self.peek() != Some(b'=') {
                        return self.error(format!("expected 'Key = value' after {key:?}"));
                    }
                    self.bump();
                    let value = self.value(depth)?;
                    entries.push(Entry { key, value, line });
                }
            }
        }
    }

    fn value(&mut self, depth: u32) -> Result<Value, HddError> {
        self.skip_blank();
        if self.peek() == Some(b'[') {
            self.bump();
            let mut items = Vec::new();
            loop {
                self.skip_blank();
                match self.peek() {
                    None => return self.error("unterminated list: missing ']'"),
                    Some(b']') => {
                        self.bump();
                        return Ok(Value::List(items));
                    }
                    Some(b',') => self.bump(),
                    Some(_) => items.push(self.value(depth + 1)?),
                }
            }
        }
        let line = self.line;
        let text = self.token(b",}]{\n#");
        if self.peek() == Some(b'{') {
            self.bump();
            let entries = self.entries(depth + 1)?;
            return Ok(Value::Block(Block { type_name: text, line, entries }));
        }
        if text.is_empty() {
            return self.error("missing value after '='");
        }
        Ok(match text.parse::<f64>() {
            Ok(number) => Value::Number(number),
            Err(_) => Value::Word(text),
        })
    }
}

fn normalize_key(key: &str) -> String {
    key.split_whitespace().collect::<Vec<_>>().join(" ").to_ascii_lowercase()
}

fn read_text(path: &Path) -> Result<String, HddError> {
    std::fs::read_to_string(path).map_err(|source| HddError::Io { path: path.to_path_buf(), source })
}

/// Reads a named file: the file system, or embedded copies for presets.
pub type Reader<'r> = &'r dyn Fn(&Path) -> Result<String, HddError>;

fn parse_document(path: &Path, read: Reader) -> Result<Document, HddError> {
    let text = read(path)?;
    let mut cursor = Cursor { bytes: text.as_bytes(), at: 0, line: 1, path };
    let mut blocks = Vec::new();
    loop {
        cursor.skip_blank();
        if cursor.peek().is_none() {
            break;
        }
        let line = cursor.line;
        let header = cursor.token(b"{\n#");
        let type_name = header.split_whitespace().next().unwrap_or("").to_string();
        if type_name.is_empty() {
            return cursor.error("expected a block such as 'disksim_disk NAME {'");
        }
        cursor.expect(b'{')?;
        let entries = cursor.entries(0)?;
        blocks.push(Block { type_name: header, line, entries });
    }
    Ok(Document { path: path.to_path_buf(), blocks })
}

/// A block together with the file it came from, for messages.
struct Scope<'a> {
    path: &'a Path,
    block: &'a Block,
}

impl<'a> Scope<'a> {
    fn error<T>(&self, line: u32, message: impl Into<String>) -> Result<T, HddError> {
        Err(HddError::Parse { path: self.path.to_path_buf(), line, message: message.into() })
    }

    fn entry(&self, key: &str) -> Result<&'a Entry, HddError> {
        let wanted = normalize_key(key);
        match self.block.entries.iter().find(|entry| entry.key == wanted) {
            Some(entry) => Ok(entry),
            None => self.error(
                self.block.line,
                format!("block '{}' lacks `{key} = ...`; add it", self.block.type_name),
            ),
        }
    }

    fn number(&self, key: &str) -> Result<f64, HddError> {
        let entry = self.entry(key)?;
        match &entry.value {
            Value::Number(number) if number.is_finite() => Ok(*number),
            _ => self.error(entry.line, format!("`{key}` must be a number")),
        }
    }

    fn number_or(&self, key: &str, default: f64) -> Result<f64, HddError> {
        if self.entry(key).is_err() {
            return Ok(default);
        }
        self.number(key)
    }

    fn count(&self, key: &str, max: f64) -> Result<u64, HddError> {
        let entry = self.entry(key)?;
        let number = self.number(key)?;
        if number < 0.0 || number > max || number.fract() != 0.0 {
            return self.error(entry.line, format!("`{key}` must be a whole number in 0..={max}"));
        }
        Ok(number as u64)
    }

    fn word(&self, key: &str) -> Result<&'a str, HddError> {
        let entry = self.entry(key)?;
        match &entry.value {
            Value::Word(word) => Ok(word),
            _ => self.error(entry.line, format!("`{key}` must be a word or file name")),
        }
    }

    fn block(&self, key: &str) -> Result<Scope<'a>, HddError> {
        let entry = self.entry(key)?;
        match &entry.value {
            Value::Block(block) => Ok(Scope { path: self.path, block }),
            _ => self.error(entry.line, format!("`{key}` must be a `type {{ ... }}` block")),
        }
    }

    fn list(&self, key: &str) -> Result<(&'a [Value], u32), HddError> {
        let entry = self.entry(key)?;
        match &entry.value {
            Value::List(items) => Ok((items, entry.line)),
            _ => self.error(entry.line, format!("`{key}` must be a [ ... ] list")),
        }
    }

    fn numbers(&self, key: &str) -> Result<Vec<f64>, HddError> {
        let (items, line) = self.list(key)?;
        let mut numbers = Vec::with_capacity(items.len());
        for item in items {
            match item {
                Value::Number(number) => numbers.push(*number),
                _ => return self.error(line, format!("`{key}` must list numbers only")),
            }
        }
        Ok(numbers)
    }
}

fn find_block<'a>(document: &'a Document, type_prefix: &str) -> Result<Scope<'a>, HddError> {
    match document.blocks.iter().find(|block| block.type_name.starts_with(type_prefix)) {
        Some(block) => Ok(Scope { path: &document.path, block }),
        None => Err(HddError::Parse {
            path: document.path.clone(),
            line: 0,
            message: format!("no `{type_prefix} NAME {{ ... }}` block in this file"),
        }),
    }
}

fn sibling(of: &Path, name: &str) -> PathBuf {
    of.parent().unwrap_or(Path::new(".")).join(name)
}

/// Load a drive from a DiskSim `.diskspecs` file and the files it names.
pub fn load(path: &Path) -> Result<DiskParams, HddError> {
    load_with(path, &read_text)
}

/// Load a drive, reading every file through `read`.
pub fn load_with(path: &Path, read: Reader) -> Result<DiskParams, HddError> {
    let specs = parse_document(path, read)?;
    let disk = find_block(&specs, "disksim_disk")?;
    let model_entry = disk.entry("Model")?;
    let model_path = match &model_entry.value {
        Value::Word(word) if word.starts_with("source ") => sibling(path, word[7..].trim()),
        _ => return disk.error(model_entry.line, "`Model` must be `source FILE.model`"),
    };
    let model_document = parse_document(&model_path, read)?;
    let model = find_block(&model_document, "dm_disk")?;
    let name = disk.block.type_name.split_whitespace().nth(1).unwrap_or("disksim_disk");
    let mut params = DiskParams {
        name: name.to_string(),
        source: format!("DiskSim parameters {}", path.display()),
        rotation_rpm: 0.0,
        surface_count: model.count("Number of data surfaces", 64.0)? as u32,
        cylinder_count: model.count("Number of cylinders", 1.0e7)? as u32,
        sector_count: model.count("Block count", 1.0e13)?,
        zones: Vec::new(),
        seek: SeekCurve::Table { distance_cyl: Vec::new(), seek_ms: Vec::new() },
        head_switch_ns: 0,
        write_settle_ns: 0,
        overheads: overheads(&disk)?,
        bus_sector_ns: 0,
        bus_write_sector_ns: 0,
        interface: interface(&disk)?,
        cache: cache(&disk)?,
    };
    let (bus_read_ms, bus_write_ms) = bus_sector_ms(&specs, &disk, name)?;
    params.bus_sector_ns = ms_to_ns(bus_read_ms);
    params.bus_write_sector_ns = ms_to_ns(bus_write_ms);
    read_mechanics(&model, &mut params, read)?;
    params.zones = zones(&model.block("Layout Model")?, params.surface_count)?;
    params.finalize().map_err(|error| HddError::Parse {
        path: model_path.clone(),
        line: 0,
        message: error.to_string(),
    })?;
    Ok(params)
}

fn overheads(disk: &Scope) -> Result<Overheads, HddError> {
    let scale = disk.number_or("Time scale for overheads", 1.0)?;
    let fixed = disk.number_or("Per-request overhead time", 0.0)?;
    // The command overheads alone: the bus phases around the transfer are
    // modelled separately (see `interface`), as DiskSim's controller does.
    let get = |key: &str| -> Result<u64, HddError> { Ok(ms_to_ns((disk.number(key)? + fixed) * scale)) };
    Ok(Overheads {
        read_hit_after_read_ns: get("Read hit over. after read")?,
        read_hit_after_write_ns: get("Read hit over. after write")?,
        read_miss_after_read_ns: get("Read miss over. after read")?,
        read_miss_after_write_ns: get("Read miss over. after write")?,
        write_hit_after_read_ns: get("Write hit over. after read")?,
        write_hit_after_write_ns: get("Write hit over. after write")?,
        write_miss_after_read_ns: get("Write miss over. after read")?,
        write_miss_after_write_ns: get("Write miss over. after write")?,
    })
}

/// The bus phases DiskSim's disk controller charges around a transfer
/// (`disksim_diskctlr.c`: disconnect, reselect, data preparation,
/// completion, the HP-style extra write disconnect, minimum write seek).
fn interface(disk: &Scope) -> Result<Interface, HddError> {
    let scale = disk.number_or("Time scale for overheads", 1.0)?;
    let ns = |key: &str| -> Result<u64, HddError> { Ok(ms_to_ns(disk.number_or(key, 0.0)? * scale)) };
    let by_request = disk.number_or("Set watermark by reqsize", 1.0)? != 0.0;
    let read_water = disk.number_or("High (read) water mark", 0.0)?.clamp(0.0, 1.0);
    Ok(Interface {
        data_prep_ns: ns("Data preparation overhead")?,
        reselect_first_ns: ns("First reselect overhead")?,
        reselect_other_ns: ns("Other reselect overhead")?,
        read_completion_ns: ns("Read completion overhead")?,
        write_completion_ns: ns("Write completion overhead")?,
        read_disconnect_after_read_ns: ns("Read disconnect afterread")?,
        read_disconnect_after_write_ns: ns("Read disconnect afterwrite")?,
        write_disconnect_ns: ns("Write disconnect overhead")?,
        // "Set watermark by reqsize = 0" takes the fraction of the segment
        // instead (all four validation drives set 1); a whole-segment mark
        // is capped at the request, which a request smaller than a segment
        // reaches first anyway.
        read_watermark: if by_request { read_water } else { 1.0 },
        extra_write_disconnect: disk.number_or("Extra write disconnect", 0.0)? != 0.0
            && disk.number_or("Never disconnect", 0.0)? == 0.0,
        extradisc_command_ns: ns("Extradisc command overhead")?,
        extradisc_disconnect_ns: ns("Extradisc disconnect overhead")?,
        extradisc_inter_disconnect_ns: ns("Extradisc inter-disconnect delay")?,
        extradisc_second_disconnect_ns: ns("Extradisc 2nd disconnect overhead")?,
        extradisc_seek_delta_ns: ns("Extradisc seek delta")?,
        write_seek_min_ns: ns("Minimum seek delay")?,
    })
}

/// Host bus time per sector, read and write. DiskSim charges the larger of
/// the bus's block transfer time (a `disksim_bus` block, which lives in the
/// `.parv` that instantiates the disk) and the disk's own `Bulk sector
/// transfer time` (`disk_get_blktranstime`). A `disksim_bus` block in the
/// `.diskspecs` file itself is honoured; otherwise a drive whose DiskSim
/// validation bus is published is given that bus (see `VALIDATION_BUSES`).
fn bus_sector_ms(specs: &Document, disk: &Scope, name: &str) -> Result<(f64, f64), HddError> {
    let bulk = disk.number_or("Bulk sector transfer time", 0.0)?.max(0.0);
    let (mut read, mut write) = (0.0f64, 0.0f64);
    for block in specs.blocks.iter().filter(|block| block.type_name.starts_with("disksim_bus")) {
        let bus = Scope { path: &specs.path, block };
        read = read.max(bus.number_or("Read block transfer time", 0.0)?);
        write = write.max(bus.number_or("Write block transfer time", 0.0)?);
    }
    if read == 0.0 && write == 0.0 {
        if let Some(bus) = VALIDATION_BUSES.iter().find(|bus| bus.disk == name) {
            (read, write) = (bus.read_ms, bus.write_ms);
        }
    }
    Ok((read.max(bulk), write.max(bulk)))
}

/// A host bus DiskSim's own validation run of a drive used, published with
/// DiskSim but kept in the `.parv` file rather than the `.diskspecs`.
struct ValidationBus {
    disk: &'static str,
    read_ms: f64,
    write_ms: f64,
}

/// DiskSim 4.0, `valid/hp_c2247a.parv`, block `BUS1` (the bus between the
/// host adapter and the HP C2247A in DiskSim's validation of this trace):
/// `Read block transfer time = 0.17010`, `Write block transfer time =
/// 0.18686` ms per 512-byte block, about 3 MB/s. The `.diskspecs` sets
/// `Bulk sector transfer time = 0` because the bus carries the rate. The
/// drive's datasheet interface (fast SCSI-2, 10 MB/s burst, 0.051 ms per
/// sector) is the drive's limit, not the validation host's; see the
/// disk-validation README for both figures' results. The other three
/// validation drives' `.parv` buses are 0 and their `.diskspecs` carry the
/// rate in `Bulk sector transfer time`.
const VALIDATION_BUSES: &[ValidationBus] =
    &[ValidationBus { disk: "HP_C2247A_validate", read_ms: 0.170_10, write_ms: 0.186_86 }];

fn cache(disk: &Scope) -> Result<CacheParams, HddError> {
    let enabled = disk.number_or("Enable caching in buffer", 1.0)? != 0.0;
    let segment_sectors = disk.count("Segment size (in blks)", 1.0e7)? as u32;
    let continuous = disk.number_or("Buffer continuous read", 3.0)?;
    let read_ahead =
        if continuous == 0.0 { 0 } else { disk.count("Maximum read-ahead (blks)", 1.0e7)? as u32 };
    Ok(CacheParams {
        segment_count: if enabled { disk.count("Number of buffer segments", 256.0)? as u32 } else { 0 },
        segment_sectors,
        read_ahead_sectors_max: read_ahead.min(segment_sectors),
        // "Read-ahead over requested = 0": we read it as prefetching only for
        // sequential streams. This is fitted, not DiskSim's documented
        // meaning: on the Atlas III trace (the one drive with 0) a lone read
        // is not followed by read-ahead hits, while later reads of a run are.
        read_ahead_sequential_only: disk.number_or("Read-ahead over requested", 1.0)? == 0.0,
        // DiskSim "Fast write level" 1 and 2 both acknowledge writes from the buffer.
        write_cache: disk.number_or("Fast write level", 0.0)? != 0.0,
        write_segment_count: (disk.number_or("Maximum number of write segments", 1.0)? as u32).clamp(1, 64),
    })
}

fn read_mechanics(model: &Scope, params: &mut DiskParams, read: Reader) -> Result<(), HddError> {
    let mechanics = model.block("Mechanical Model")?;
    params.rotation_rpm = mechanics.number("Rotation speed (in rpms)")?;
    params.head_switch_ns = ms_to_ns(mechanics.number("Head switch time")?);
    params.write_settle_ns = ms_to_ns(mechanics.number_or("Add. write settling delay", 0.0)?);
    let seek_type = mechanics.word("Seek type")?;
    params.seek = match seek_type {
        "extracted" => {
            let file = mechanics.word("Full seek curve")?;
            parse_seek_file(&sibling(mechanics.path, file), &read(&sibling(mechanics.path, file))?)?
        }
        "hpl" | "hplplus10" => {
            let (values, line) = (
                mechanics.numbers("HPL seek equation values")?,
                mechanics.entry("HPL seek equation values")?.line,
            );
            if values.len() != 6 {
                return mechanics.error(
                    line,
                    "`HPL seek equation values` needs 6 numbers: boundary, a, b, c, e, single-cylinder",
                );
            }
            let first_ten_ms = if seek_type == "hplplus10" {
                mechanics.numbers("First ten seek times")?
            } else {
                Vec::new()
            };
            if !(first_ten_ms.is_empty() || first_ten_ms.len() == 10) {
                return mechanics.error(line, "`First ten seek times` needs exactly 10 numbers");
            }
            SeekCurve::Formula {
                boundary_cyl: values[0].max(0.0) as u32,
                short_a_ms: values[1],
                short_b_ms: values[2],
                long_c_ms: values[3],
                long_e_ms: values[4],
                first_ten_ms,
            }
        }
        other => {
            let line = mechanics.entry("Seek type")?.line;
            return mechanics.error(
                line,
                format!("seek type {other:?} is not supported; use extracted, hpl or hplplus10"),
            );
        }
    };
    Ok(())
}

fn zones(layout: &Scope, surface_count: u32) -> Result<Vec<Zone>, HddError> {
    let scheme = layout.count("Sparing scheme used", 10.0)?;
    let range_cylinders = layout.number_or("Rangesize for sparing", 1.0)?.max(1.0) as u64;
    let (items, line) = layout.list("Zones")?;
    let mut zones = Vec::with_capacity(items.len());
    for item in items {
        let Value::Block(block) = item else {
            return layout.error(line, "`Zones` must list `dm_layout_g1_zone { ... }` blocks");
        };
        let scope = Scope { path: layout.path, block };
        zones.push(zone(&scope, scheme, range_cylinders, surface_count)?);
    }
    Ok(zones)
}

fn zone(scope: &Scope, scheme: u64, range_cylinders: u64, surface_count: u32) -> Result<Zone, HddError> {
    let first_cylinder = scope.count("First cylinder number", 1.0e7)? as u32;
    let last_cylinder = scope.count("Last cylinder number", 1.0e7)? as u32;
    let sectors_per_track = scope.count("Blocks per track", 1.0e6)? as u32;
    let spares = scope.count("Number of spares", 1.0e9)?;
    let mut slips: Vec<u64> = scope.numbers("slips")?.iter().map(|slip| slip.max(0.0) as u64).collect();
    let tracks = u64::from(last_cylinder.saturating_sub(first_cylinder) + 1) * u64::from(surface_count);
    let spt = u64::from(sectors_per_track);
    let slip_count = slips.len() as u64;
    // DiskSim's sparing schemes (dm_layout_g1_spare_t) and the LBAs each
    // leaves in a zone (dm_layout_g1_compute_blksinband): where spares sit.
    let per_cylinder = u64::from(surface_count);
    let (spare_range_tracks, spare_sectors_per_range) = match scheme {
        0 => (0, 0),
        1 => {
            // Track sparing: spare and slipped units are whole tracks.
            slips = slips.iter().flat_map(|track| (track * spt)..((track + 1) * spt)).collect();
            (tracks, spares * spt)
        }
        // Per cylinder; 5 and 6 at the cylinder's front. 4 and 6 slip to
        // the zone's end, which DiskSim charges as `numslips` fewer LBAs;
        // here their slips stay within their cylinder (README).
        2 | 4 | 5 | 6 => (per_cylinder, spares),
        3 => (1, spares),
        // Spare sectors at the zone's end: only the slips cost LBAs.
        7 => (tracks, slip_count),
        8 => (range_cylinders * per_cylinder, spares),
        9 => (tracks, spares),
        _ => (tracks, spares + slip_count), // 10: spares and slips at the zone's end
    };
    let spare_range_tracks = if spare_sectors_per_range == 0 { 0 } else { spare_range_tracks };
    Ok(Zone {
        first_cylinder,
        last_cylinder,
        sectors_per_track,
        track_skew_sectors: scope.number_or("Skew for track switch", 0.0)?,
        cylinder_skew_sectors: scope.number_or("Skew for cylinder switch", 0.0)?,
        first_sector_offset_sectors: scope.number_or("Offset of first block", 0.0)?,
        front_empty_sectors: scope.number_or("Empty space at zone front", 0.0)?.max(0.0) as u64,
        spare_range_tracks,
        spare_sectors_per_range,
        spares_at_front: matches!(scheme, 5 | 6),
        slips,
        first_lba: 0,
        lba_count: 0,
    })
}

/// Parse a `.seek` file: a count line, then `distance, time_ms` per line.
fn parse_seek_file(path: &Path, text: &str) -> Result<SeekCurve, HddError> {
    let fail = |line: usize, message: String| HddError::Parse {
        path: path.to_path_buf(),
        line: line as u32 + 1,
        message,
    };
    let mut distance_cyl = Vec::new();
    let mut seek_ms = Vec::new();
    for (index, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') || line.contains(':') {
            continue; // blank, comment, or the "Seek distances measured: N" header
        }
        let mut fields = line.split(|c: char| c == ',' || c.is_whitespace()).filter(|f| !f.is_empty());
        let (Some(d), Some(t), None) = (fields.next(), fields.next(), fields.next()) else {
            return Err(fail(index, "expected `distance_in_cylinders, time_ms`".into()));
        };
        let d: u32 = d.parse().map_err(|_| fail(index, format!("distance {d:?} is not a whole number")))?;
        let t: f64 = t.parse().map_err(|_| fail(index, format!("time {t:?} is not a number")))?;
        if distance_cyl.last().is_some_and(|last| *last >= d) {
            return Err(fail(index, "distances must strictly ascend".into()));
        }
        distance_cyl.push(d);
        seek_ms.push(t);
    }
    if distance_cyl.len() < 2 {
        return Err(fail(0, "a seek curve needs at least two points".into()));
    }
    Ok(SeekCurve::Table { distance_cyl, seek_ms })
}
