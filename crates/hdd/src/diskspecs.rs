//! DiskSim parameter import: a `.parv` and what it sources (the
//! `.diskspecs`), the `.model` a disk names, and the `.seek` curve the model
//! names.
//!
//! DiskSim's syntax is a tree of blocks: `type name { Key = value, ... }`,
//! where a value is a number, a word, `source FILE`, a nested `type { ... }`
//! block or a `[ ... ]` list; `#` starts a comment. Keys contain spaces and
//! are matched case-insensitively with runs of spaces collapsed. At the top
//! level a `.parv` also has `source FILE`, `instantiate [ NAMES ] as TYPE` and
//! `topology TYPE NAME [ ... ]`, which place the disk on its bus. Every
//! parameter of the disk's blocks is either modelled or, when set to a value
//! the model does not reproduce, reported in a one-line warning; the other
//! blocks of a `.parv` (statistics, driver, controller, workload) are read
//! only for the topology and the bus.

use crate::params::{
    ms_to_ns, CacheParams, DiskParams, Interface, Overheads, ReadAheadScope, RequestData, SeekCurve, Zone,
};
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

/// One parsed file: its path (for messages), its top-level blocks and, in
/// a `.parv`, the files it sources, the instances it names and its topology.
struct Document {
    path: PathBuf,
    blocks: Vec<Block>,
    /// `source FILE` lines, relative to this file's directory.
    sources: Vec<(String, u32)>,
    /// `instantiate [ names ] as TYPE_NAME`: (instance names, type name).
    instances: Vec<(Vec<String>, String)>,
    /// `topology TYPE NAME [ ... ]`: the component tree.
    topology: Option<Node>,
}

/// One component of a `.parv` topology: `disksim_bus bus1 [ ... ]`.
#[derive(Debug)]
struct Node {
    kind: String,
    name: String,
    children: Vec<Node>,
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

impl Cursor<'_> {
    /// A word: text up to whitespace or punctuation (none skipped before).
    fn word(&mut self) -> String {
        let start = self.at;
        while self.peek().is_some_and(|b| !b.is_ascii_whitespace() && !b"[]{},#".contains(&b)) {
            self.bump();
        }
        String::from_utf8_lossy(&self.bytes[start..self.at]).to_string()
    }

    /// A topology component: `TYPE NAME [ children ]`.
    fn node(&mut self, depth: u32) -> Result<Node, HddError> {
        if depth > NESTING_DEPTH_MAX {
            return self.error("topology nests too deeply");
        }
        self.skip_blank();
        let kind = self.word();
        self.skip_blank();
        let name = self.word();
        if kind.is_empty() || name.is_empty() {
            return self.error("expected `TYPE NAME [ ... ]` in the topology");
        }
        self.expect(b'[')?;
        let mut children = Vec::new();
        loop {
            self.skip_blank();
            match self.peek() {
                None => return self.error("unterminated topology: missing ']'"),
                Some(b']') => {
                    self.bump();
                    return Ok(Node { kind, name, children });
                }
                Some(b',') => self.bump(),
                Some(_) => children.push(self.node(depth + 1)?),
            }
        }
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
    let mut document = Document {
        path: path.to_path_buf(),
        blocks: Vec::new(),
        sources: Vec::new(),
        instances: Vec::new(),
        topology: None,
    };
    loop {
        cursor.skip_blank();
        if cursor.peek().is_none() {
            break;
        }
        let line = cursor.line;
        let start = cursor.at;
        match cursor.word().as_str() {
            "source" => {
                let file = cursor.token(b"\n#");
                if file.is_empty() {
                    return cursor.error("`source` needs a file name");
                }
                document.sources.push((file, line));
                continue;
            }
            "instantiate" => {
                cursor.expect(b'[')?;
                let names = cursor
                    .token(b"]")
                    .split([',', ' ', '\t', '\n'])
                    .filter(|n| !n.is_empty())
                    .map(String::from)
                    .collect();
                cursor.expect(b']')?;
                cursor.skip_blank();
                if cursor.word() != "as" {
                    return cursor.error("expected `instantiate [ NAMES ] as TYPE`");
                }
                cursor.skip_blank();
                let type_name = cursor.word();
                document.instances.push((names, type_name));
                continue;
            }
            "topology" => {
                document.topology = Some(cursor.node(0)?);
                continue;
            }
            _ => cursor.at = start,
        }
        let header = cursor.token(b"{\n#");
        let type_name = header.split_whitespace().next().unwrap_or("").to_string();
        if type_name.is_empty() {
            return cursor.error("expected a block such as 'disksim_disk NAME {'");
        }
        cursor.expect(b'{')?;
        let entries = cursor.entries(0)?;
        document.blocks.push(Block { type_name: header, line, entries });
    }
    Ok(document)
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

fn sibling(of: &Path, name: &str) -> PathBuf {
    of.parent().unwrap_or(Path::new(".")).join(name)
}

/// Deepest chain of `source` lines followed.
const SOURCE_DEPTH_MAX: u32 = 8;

/// Parse `path` and, depth first, every file it sources.
fn parse_all(path: &Path, read: Reader, documents: &mut Vec<Document>, depth: u32) -> Result<(), HddError> {
    let document = parse_document(path, read)?;
    if depth > SOURCE_DEPTH_MAX {
        return Err(HddError::Parse {
            path: path.to_path_buf(),
            line: 0,
            message: "`source` nests too deeply".into(),
        });
    }
    let sources: Vec<PathBuf> = document.sources.iter().map(|(file, _)| sibling(path, file)).collect();
    documents.push(document);
    for source in sources {
        parse_all(&source, read, documents, depth + 1)?;
    }
    Ok(())
}

/// The block `KIND NAME { ... }` (any name when `name` is None).
fn find_block<'a>(documents: &'a [Document], kind: &str, name: Option<&str>) -> Option<Scope<'a>> {
    documents.iter().find_map(|document| {
        document
            .blocks
            .iter()
            .find(|block| {
                let mut words = block.type_name.split_whitespace();
                words.next() == Some(kind) && name.is_none_or(|name| words.next() == Some(name))
            })
            .map(|block| Scope { path: &document.path, block })
    })
}

/// The path from the topology's root to the first disk: its components.
fn disk_path(node: &Node) -> Option<Vec<&Node>> {
    if node.kind == "disksim_disk" {
        return Some(vec![node]);
    }
    node.children.iter().find_map(|child| {
        let mut path = disk_path(child)?;
        path.insert(0, node);
        Some(path)
    })
}

/// The type an instance was created as (`instantiate [ disk0 ] as NAME`).
fn instance_type<'a>(documents: &'a [Document], instance: &str) -> Option<&'a str> {
    documents.iter().flat_map(|document| &document.instances).find_map(|(names, type_name)| {
        names.iter().any(|name| name == instance).then_some(type_name.as_str())
    })
}

/// Load a drive from a DiskSim `.diskspecs` file and the files it names.
pub fn load(path: &Path) -> Result<DiskParams, HddError> {
    load_with(path, &read_text)
}

/// Load a drive, reading every file through `read`. `path` is a
/// `.diskspecs` (a `disksim_disk` block) or a `.parv` (which sources the
/// diskspecs and places the disk on a bus in its topology).
pub fn load_with(path: &Path, read: Reader) -> Result<DiskParams, HddError> {
    let mut documents = Vec::new();
    parse_all(path, read, &mut documents, 0)?;
    let mut warnings = Vec::new();
    // With a topology: the disk it instantiates and the bus it sits on.
    let topology = documents.iter().find_map(|document| document.topology.as_ref());
    let placed = topology.and_then(disk_path);
    let (disk, bus) = match &placed {
        Some(components) => {
            let disk_node = components.last().expect("a path ends at its disk");
            let disk_type = instance_type(&documents, &disk_node.name).ok_or_else(|| HddError::Parse {
                path: path.to_path_buf(),
                line: 0,
                message: format!("the topology's disk `{}` is never instantiated", disk_node.name),
            })?;
            let disk =
                find_block(&documents, "disksim_disk", Some(disk_type)).ok_or_else(|| HddError::Parse {
                    path: path.to_path_buf(),
                    line: 0,
                    message: format!(
                        "no `disksim_disk {disk_type} {{ ... }}` block (is its diskspecs sourced?)"
                    ),
                })?;
            let bus_node = components.iter().rev().find(|node| node.kind == "disksim_bus");
            let bus = bus_node
                .and_then(|node| instance_type(&documents, &node.name))
                .and_then(|bus_type| find_block(&documents, "disksim_bus", Some(bus_type)));
            (disk, bus)
        }
        None => {
            let disk = find_block(&documents, "disksim_disk", None).ok_or_else(|| HddError::Parse {
                path: path.to_path_buf(),
                line: 0,
                message: "no `disksim_disk NAME { ... }` block in this file or the files it sources".into(),
            })?;
            (disk, find_block(&documents, "disksim_bus", None))
        }
    };
    check_entries(&disk, DISK_PARAMETERS, &mut warnings);
    let model_entry = disk.entry("Model")?;
    let model_document;
    let model = match &model_entry.value {
        Value::Word(word) if word.starts_with("source ") => {
            model_document = parse_document(&sibling(disk.path, word[7..].trim()), read)?;
            match model_document.blocks.iter().find(|block| block.type_name.starts_with("dm_disk")) {
                Some(block) => Scope { path: &model_document.path, block },
                None => {
                    return Err(HddError::Parse {
                        path: model_document.path.clone(),
                        line: 0,
                        message: "no `dm_disk NAME { ... }` block in this file".into(),
                    })
                }
            }
        }
        Value::Block(block) => Scope { path: disk.path, block },
        _ => {
            return disk
                .error(model_entry.line, "`Model` must be `source FILE.model` or a `dm_disk { ... }` block")
        }
    };
    check_entries(&model, MODEL_PARAMETERS, &mut warnings);
    let name = disk.block.type_name.split_whitespace().nth(1).unwrap_or("disksim_disk");
    let declared_sector_count = model.count("Block count", 1.0e13)?;
    let mut params = DiskParams {
        name: name.to_string(),
        source: format!("DiskSim parameters {}", path.display()),
        rotation_rpm: 0.0,
        surface_count: model.count("Number of data surfaces", 64.0)? as u32,
        cylinder_count: model.count("Number of cylinders", 1.0e7)? as u32,
        // DiskSim replaces the declared count by what the zones map
        // (layout_g1_load.c, checknumblocks): finalize derives it.
        sector_count: 0,
        zones: Vec::new(),
        seek: SeekCurve::Table { distance_cyl: Vec::new(), seek_ms: Vec::new() },
        head_switch_ns: 0,
        write_settle_ns: 0,
        overheads: overheads(&disk)?,
        bus_sector_ns: 0,
        bus_write_sector_ns: 0,
        interface: interface(&disk, bus.as_ref())?,
        cache: cache(&disk, &mut warnings)?,
        // What DiskSim's published figures come from: the 4.0 release.
        disksim_release_no_early_read: true,
        import_warnings: Vec::new(),
    };
    let (bus_read_ms, bus_write_ms) = bus_sector_ms(&disk, bus.as_ref(), &mut warnings)?;
    params.bus_sector_ns = ms_to_ns(bus_read_ms);
    params.bus_write_sector_ns = ms_to_ns(bus_write_ms);
    read_mechanics(&model, &mut params, read, &mut warnings)?;
    let layout = model.block("Layout Model")?;
    check_entries(&layout, LAYOUT_PARAMETERS, &mut warnings);
    params.zones = zones(&layout, params.surface_count, &mut warnings)?;
    let declared_cylinders = params.cylinder_count;
    params.finalize().map_err(|error| HddError::Parse {
        path: model.path.to_path_buf(),
        line: 0,
        message: error.to_string(),
    })?;
    if params.sector_count != declared_sector_count {
        warnings.push(format!(
            "`Block count = {declared_sector_count}`: the zones map {} blocks; using the zones' count, as DiskSim does",
            params.sector_count
        ));
    }
    if params.cylinder_count != declared_cylinders {
        warnings.push(format!(
            "`Number of cylinders = {declared_cylinders}`: the zones reach cylinder {}; the arm spans {} cylinders",
            params.cylinder_count - 1,
            params.cylinder_count
        ));
    }
    for (set, key) in [
        (params.interface.zero_latency_read, "Immediate buffer read"),
        (params.cache.read_any_free_blocks, "Read any free blocks"),
    ] {
        if set && params.disksim_release_no_early_read {
            warnings.push(format!(
                "`{key} = 1` takes no effect, as in the DiskSim 4.0 release: reads start at their first sector \
                 (`DiskParams::disksim_release_no_early_read`)"
            ));
        }
    }
    params.import_warnings = warnings;
    Ok(params)
}

/// What the importer does with a DiskSim parameter.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Use {
    /// Read and modelled.
    Modelled,
    /// No effect on service times (statistics, hints for host schedulers,
    /// parameters of seek or access types the file does not select).
    NoEffect,
    /// Not modelled: the model behaves as DiskSim does with this value;
    /// any other value is accepted with a warning.
    NotModelled(f64),
}

/// Every parameter of DiskSim 4.0's `disksim_disk` block (modules/disk.modspec).
pub(crate) const DISK_PARAMETERS: &[(&str, Use)] = &[
    ("Model", Use::Modelled),
    ("Scheduler", Use::NoEffect), // the host picks layoutd's queue discipline and depth
    ("Max queue length", Use::NoEffect),
    ("Bulk sector transfer time", Use::Modelled),
    ("Segment size (in blks)", Use::Modelled),
    ("Number of buffer segments", Use::Modelled),
    ("Print stats", Use::NoEffect),
    ("Per-request overhead time", Use::Modelled),
    ("Time scale for overheads", Use::Modelled),
    ("Hold bus entire read xfer", Use::NotModelled(1.0)),
    ("Hold bus entire write xfer", Use::NotModelled(1.0)),
    ("Allow almost read hits", Use::Modelled),
    ("Allow sneaky full read hits", Use::NotModelled(0.0)),
    ("Allow sneaky partial read hits", Use::NotModelled(0.0)),
    ("Allow sneaky intermediate read hits", Use::NotModelled(0.0)),
    ("Allow read hits on write data", Use::Modelled),
    ("Allow write prebuffering", Use::NotModelled(0.0)),
    ("Preseeking level", Use::NotModelled(0.0)),
    ("Never disconnect", Use::Modelled),
    ("Avg sectors per cylinder", Use::NoEffect),
    ("Maximum number of write segments", Use::Modelled),
    ("Use separate write segment", Use::Modelled),
    ("Low (write) water mark", Use::NotModelled(0.0)),
    ("High (read) water mark", Use::Modelled),
    ("Set watermark by reqsize", Use::Modelled),
    ("Calc sector by sector", Use::NoEffect),
    ("Enable caching in buffer", Use::Modelled),
    ("Buffer continuous read", Use::Modelled),
    ("Minimum read-ahead (blks)", Use::Modelled),
    ("Maximum read-ahead (blks)", Use::Modelled),
    ("Read-ahead over requested", Use::Modelled),
    ("Read-ahead on idle hit", Use::Modelled),
    ("Read any free blocks", Use::Modelled),
    ("Fast write level", Use::Modelled),
    ("Combine seq writes", Use::NotModelled(0.0)),
    ("Stop prefetch in sector", Use::Modelled),
    ("Disconnect write if seek", Use::NotModelled(0.0)),
    ("Write hit stop prefetch", Use::NotModelled(1.0)),
    ("Read directly to buffer", Use::NotModelled(1.0)),
    ("Immed transfer partial hit", Use::Modelled),
    ("Read hit over. after read", Use::Modelled),
    ("Read hit over. after write", Use::Modelled),
    ("Read miss over. after read", Use::Modelled),
    ("Read miss over. after write", Use::Modelled),
    ("Write hit over. after read", Use::Modelled),
    ("Write hit over. after write", Use::Modelled),
    ("Write miss over. after read", Use::Modelled),
    ("Write miss over. after write", Use::Modelled),
    ("Read completion overhead", Use::Modelled),
    ("Write completion overhead", Use::Modelled),
    ("Data preparation overhead", Use::Modelled),
    ("First reselect overhead", Use::Modelled),
    ("Other reselect overhead", Use::Modelled),
    ("Read disconnect afterread", Use::Modelled),
    ("Read disconnect afterwrite", Use::Modelled),
    ("Write disconnect overhead", Use::Modelled),
    ("Extra write disconnect", Use::Modelled),
    ("Extradisc command overhead", Use::Modelled),
    ("Extradisc disconnect overhead", Use::Modelled),
    ("Extradisc inter-disconnect delay", Use::Modelled),
    ("Extradisc 2nd disconnect overhead", Use::Modelled),
    ("Extradisc seek delta", Use::Modelled),
    ("Minimum seek delay", Use::Modelled),
    ("Immediate buffer read", Use::Modelled),
    ("Immediate buffer write", Use::NotModelled(0.0)),
];

/// The `dm_disk` block (diskmodel modules/disk.modspec).
pub(crate) const MODEL_PARAMETERS: &[(&str, Use)] = &[
    ("Block count", Use::Modelled),
    ("Number of data surfaces", Use::Modelled),
    ("Number of cylinders", Use::Modelled),
    ("Mechanical Model", Use::Modelled),
    ("Layout Model", Use::Modelled),
];

/// The `dm_layout_g1` block (modules/layout_g1.modspec).
pub(crate) const LAYOUT_PARAMETERS: &[(&str, Use)] = &[
    ("LBN-to-PBN mapping scheme", Use::NotModelled(0.0)),
    ("Sparing scheme used", Use::Modelled),
    ("Rangesize for sparing", Use::Modelled),
    ("Skew units", Use::Modelled),
    ("Zones", Use::Modelled),
];

/// A `dm_layout_g1_zone` block (modules/layout_g1_zone.modspec).
pub(crate) const ZONE_PARAMETERS: &[(&str, Use)] = &[
    ("First cylinder number", Use::Modelled),
    ("Last cylinder number", Use::Modelled),
    ("Blocks per track", Use::Modelled),
    ("Offset of first block", Use::Modelled),
    ("Skew units", Use::Modelled),
    ("Empty space at zone front", Use::Modelled),
    ("Skew for track switch", Use::Modelled),
    ("Skew for cylinder switch", Use::Modelled),
    ("Number of spares", Use::Modelled),
    ("slips", Use::Modelled),
    ("defects", Use::Modelled),
];

/// The `dm_mech_g1` block (modules/mech_g1.modspec).
pub(crate) const MECHANICS_PARAMETERS: &[(&str, Use)] = &[
    ("Access time type", Use::Modelled),
    ("Constant access time", Use::NoEffect), // only with access time type `constant`, refused
    ("Seek type", Use::Modelled),
    ("Average seek time", Use::NoEffect), // only seek types linear and curve use it, refused
    ("Constant seek time", Use::NoEffect), // only seek type constant, refused
    ("Single cylinder seek time", Use::NoEffect),
    ("Full strobe seek time", Use::NoEffect),
    ("Full seek curve", Use::Modelled),
    ("Add. write settling delay", Use::Modelled),
    ("Head switch time", Use::Modelled),
    ("Rotation speed (in rpms)", Use::Modelled),
    ("Percent error in rpms", Use::NotModelled(0.0)),
    ("First ten seek times", Use::Modelled),
    ("HPL seek equation values", Use::Modelled),
];

/// Warn, one line each, about parameters of `scope` that are not DiskSim's
/// or are set to a value the model does not reproduce.
fn check_entries(scope: &Scope, known: &[(&str, Use)], warnings: &mut Vec<String>) {
    let block = scope.block.type_name.split_whitespace().next().unwrap_or("");
    for entry in &scope.block.entries {
        let found = known.iter().find(|(key, _)| normalize_key(key) == entry.key);
        let at = format!("{}:{}", scope.path.display(), entry.line);
        match (found, &entry.value) {
            (None, _) => {
                warnings.push(format!("{at}: `{}` is not a DiskSim {block} parameter; ignored", entry.key))
            }
            (Some((key, Use::NotModelled(neutral))), Value::Number(value)) if value != neutral => warnings
                .push(format!(
                    "{at}: `{key} = {value}` is not modelled; the model behaves as with {neutral}"
                )),
            _ => {}
        }
    }
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
/// A drive that never disconnects pays no disconnect or reselection.
fn interface(disk: &Scope, bus: Option<&Scope>) -> Result<Interface, HddError> {
    let scale = disk.number_or("Time scale for overheads", 1.0)?;
    let connected = disk.number_or("Never disconnect", 0.0)? == 0.0;
    let ns = |key: &str| -> Result<u64, HddError> { Ok(ms_to_ns(disk.number_or(key, 0.0)? * scale)) };
    let phase = |key: &str| -> Result<u64, HddError> { Ok(if connected { ns(key)? } else { 0 }) };
    let by_request = disk.number_or("Set watermark by reqsize", 1.0)? != 0.0;
    let read_water = disk.number_or("High (read) water mark", 0.0)?.clamp(0.0, 1.0);
    let arbitration_ms = match bus {
        Some(bus) => bus.number_or("Arbitration time", 0.0)?,
        None => 0.0,
    };
    Ok(Interface {
        data_prep_ns: ns("Data preparation overhead")?,
        reselect_first_ns: phase("First reselect overhead")?,
        reselect_other_ns: phase("Other reselect overhead")?,
        read_completion_ns: ns("Read completion overhead")?,
        write_completion_ns: ns("Write completion overhead")?,
        read_disconnect_after_read_ns: phase("Read disconnect afterread")?,
        read_disconnect_after_write_ns: phase("Read disconnect afterwrite")?,
        write_disconnect_ns: phase("Write disconnect overhead")?,
        // "Set watermark by reqsize = 0" takes the fraction of the segment
        // instead (all six validation drives set 1); a whole-segment mark
        // is capped at the request, which a request smaller than a segment
        // reaches first anyway.
        read_watermark: if by_request { read_water } else { 1.0 },
        extra_write_disconnect: disk.number_or("Extra write disconnect", 0.0)? != 0.0 && connected,
        extradisc_command_ns: ns("Extradisc command overhead")?,
        extradisc_disconnect_ns: ns("Extradisc disconnect overhead")?,
        extradisc_inter_disconnect_ns: ns("Extradisc inter-disconnect delay")?,
        extradisc_second_disconnect_ns: ns("Extradisc 2nd disconnect overhead")?,
        extradisc_seek_delta_ns: ns("Extradisc seek delta")?,
        write_seek_min_ns: ns("Minimum seek delay")?,
        bus_arbitration_ns: if connected { ms_to_ns(arbitration_ms) } else { 0 },
        zero_latency_read: disk.number_or("Immediate buffer read", 0.0)? != 0.0,
    })
}

/// Host bus time per sector, read and write. DiskSim charges the larger of
/// the block transfer time of the bus the disk sits on (a `disksim_bus`
/// block in the `.parv` that places the disk in its topology) and the
/// disk's own `Bulk sector transfer time` (`disk_get_blktranstime`).
fn bus_sector_ms(
    disk: &Scope,
    bus: Option<&Scope>,
    warnings: &mut Vec<String>,
) -> Result<(f64, f64), HddError> {
    let bulk = disk.number_or("Bulk sector transfer time", 0.0)?.max(0.0);
    let Some(bus) = bus else {
        warnings.push(format!(
            "{}: no host bus (`disksim_bus`): load the drive's .parv to include it; using `Bulk sector transfer time = {bulk}` alone",
            disk.path.display()
        ));
        return Ok((bulk, bulk));
    };
    let read = bus.number_or("Read block transfer time", 0.0)?;
    let write = bus.number_or("Write block transfer time", 0.0)?;
    Ok((read.max(bulk), write.max(bulk)))
}

fn cache(disk: &Scope, warnings: &mut Vec<String>) -> Result<CacheParams, HddError> {
    let enabled = disk.number_or("Enable caching in buffer", 1.0)?;
    if enabled > 1.0 {
        warnings.push(format!("`Enable caching in buffer = {enabled}` is modelled as 1 (caching on)"));
    }
    let segment_sectors = disk.count("Segment size (in blks)", 1.0e7)? as u32;
    // DiskSim forces both read-ahead bounds to 0 without continuous read
    // (disk_postpass_perdisk); "Maximum read-ahead" bounds every scheme but
    // the DEC one (disk_buffer_get_max_readahead).
    let scope = match disk.count("Buffer continuous read", 4.0)? {
        0 => ReadAheadScope::None,
        1 => ReadAheadScope::TrackEnd,
        2 => ReadAheadScope::CylinderEnd,
        3 => ReadAheadScope::SegmentFull,
        _ => ReadAheadScope::NextTrack,
    };
    let (ra_min, ra_max) = if scope == ReadAheadScope::None {
        (0, 0)
    } else {
        let min = disk.count("Minimum read-ahead (blks)", 1.0e7)? as u32;
        (min, (disk.count("Maximum read-ahead (blks)", 1.0e7)? as u32).max(min))
    };
    let request_data = match disk.number_or("Read-ahead over requested", 1.0)? {
        value if value < 0.0 => RequestData::Dropped,
        0.0 => RequestData::Kept,
        _ => RequestData::Replaceable,
    };
    Ok(CacheParams {
        segment_count: if enabled != 0.0 {
            disk.count("Number of buffer segments", 256.0)? as u32
        } else {
            0
        },
        segment_sectors,
        read_ahead_sectors_max: ra_max,
        read_ahead_sectors_min: ra_min,
        read_ahead_scope: scope,
        request_data,
        read_ahead_on_idle_hit: disk.number_or("Read-ahead on idle hit", 0.0)? != 0.0,
        read_any_free_blocks: disk.number_or("Read any free blocks", 0.0)? != 0.0,
        // DiskSim "Fast write level" 1 and 2 both acknowledge writes from the buffer.
        write_cache: disk.number_or("Fast write level", 0.0)? != 0.0,
        write_segment_count: (disk.number_or("Maximum number of write segments", 1.0)? as u32).clamp(1, 64),
        dedicated_write_segment: disk.number_or("Use separate write segment", 0.0)? != 0.0,
        read_hits_on_write_data: disk.number_or("Allow read hits on write data", 1.0)? != 0.0,
        almost_read_hits: disk.number_or("Allow almost read hits", 0.0)? != 0.0,
        partial_hits: disk.number_or("Immed transfer partial hit", 0.0)? != 0.0,
        stop_prefetch_in_sector: disk.number_or("Stop prefetch in sector", 1.0)? != 0.0,
    })
}

fn read_mechanics(
    model: &Scope,
    params: &mut DiskParams,
    read: Reader,
    warnings: &mut Vec<String>,
) -> Result<(), HddError> {
    let mechanics = model.block("Mechanical Model")?;
    check_entries(&mechanics, MECHANICS_PARAMETERS, warnings);
    let access = mechanics.word("Access time type").unwrap_or("trackSwitchPlusRotation");
    if access != "trackSwitchPlusRotation" {
        warnings.push(format!(
            "{}: `Access time type = {access}` is not modelled; seeks and rotation are modelled in full",
            mechanics.path.display()
        ));
    }
    params.rotation_rpm = mechanics.number("Rotation speed (in rpms)")?;
    params.head_switch_ns = ms_to_ns(mechanics.number("Head switch time")?);
    // DiskSim adds the delta, negative or not, after a seek or head switch
    // (mech_g1: `seekwritedelta`, no range test).
    params.write_settle_ns = (mechanics.number_or("Add. write settling delay", 0.0)? * 1.0e6).round() as i64;
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

fn zones(layout: &Scope, surface_count: u32, warnings: &mut Vec<String>) -> Result<Vec<Zone>, HddError> {
    let units = |scope: &Scope, warnings: &mut Vec<String>| {
        if let Ok(unit) = scope.word("Skew units") {
            if unit != "sectors" {
                warnings.push(format!(
                    "{}: `Skew units = {unit}` is not modelled; skews are read as sectors",
                    scope.path.display()
                ));
            }
        }
    };
    units(layout, warnings);
    let scheme = layout.count("Sparing scheme used", 10.0)?;
    let range_cylinders = layout.number_or("Rangesize for sparing", 1.0)?.max(1.0);
    if range_cylinders > 1.0e7 {
        return layout.error(
            block_line(layout),
            format!("`Rangesize for sparing` of {range_cylinders} cylinders is past 10000000"),
        );
    }
    let range_cylinders = range_cylinders as u64;
    let (items, line) = layout.list("Zones")?;
    let mut zones = Vec::with_capacity(items.len());
    for item in items {
        let Value::Block(block) = item else {
            return layout.error(line, "`Zones` must list `dm_layout_g1_zone { ... }` blocks");
        };
        let scope = Scope { path: layout.path, block };
        check_entries(&scope, ZONE_PARAMETERS, warnings);
        units(&scope, warnings);
        if scope.list("defects").is_ok_and(|(defects, _)| !defects.is_empty()) {
            warnings.push(format!(
                "{}:{}: zone `defects` (remapped sectors) are not modelled; the sectors stay in place",
                scope.path.display(),
                block.line
            ));
        }
        zones.push(zone(&scope, scheme, range_cylinders, surface_count)?);
    }
    Ok(zones)
}

/// Most sectors a zone's slips may slip (they are kept one by one).
const SLIPPED_SECTORS_MAX: u64 = 1 << 20;

/// The line a block starts on, for errors about the block as a whole.
fn block_line(scope: &Scope) -> u32 {
    scope.block.line
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
    // A slip names a track (track sparing) or a sector of the zone; the
    // sectors they slip are kept one by one, so their count is bounded.
    let (unit, units) = if scheme == 1 { ("track", tracks) } else { ("sector", tracks * spt) };
    if let Some(&slip) = slips.iter().find(|&&slip| slip >= units) {
        return scope.error(block_line(scope), format!("slip {slip} is past the zone's {units} {unit}s"));
    }
    let slipped = if scheme == 1 { slip_count * spt } else { slip_count };
    if slipped > SLIPPED_SECTORS_MAX {
        return scope.error(
            block_line(scope),
            format!("{slipped} slipped sectors in a zone; at most {SLIPPED_SECTORS_MAX} are modelled"),
        );
    }
    let front_empty_sectors = scope.number_or("Empty space at zone front", 0.0)?.max(0.0) as u64;
    if front_empty_sectors >= tracks * spt {
        return scope.error(
            block_line(scope),
            format!("`Empty space at zone front` of {front_empty_sectors} sectors fills the zone"),
        );
    }
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
        front_empty_sectors,
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Loads the Barracuda's embedded files with `edit(file name, text)`
    /// applied.
    fn barracuda_with(edit: impl Fn(&str, String) -> String) -> Result<DiskParams, HddError> {
        let read = |path: &Path| -> Result<String, HddError> {
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            let text = match name {
                "barracuda.diskspecs" => include_str!("../data/barracuda.diskspecs"),
                "barracuda.model" => include_str!("../data/barracuda.model"),
                "barracuda.seek" => include_str!("../data/barracuda.seek"),
                _ => return Err(HddError::Invalid(format!("no file {name}"))),
            };
            Ok(edit(name, text.to_string()))
        };
        load_with(Path::new("barracuda.diskspecs"), &read)
    }

    /// Found by `tests/fuzz_diskspecs.rs`: each edit was imported and then
    /// overflowed (or failed an assertion) in the importer or the model;
    /// each is now refused with an error naming the value.
    #[test]
    fn huge_values_are_refused_by_name() {
        assert!(barracuda_with(|_, t| t).is_ok(), "the corpus imports");
        let cases: [(&str, &[(&str, &str)], &str); 6] = [
            (
                "barracuda.diskspecs",
                &[("Read completion overhead = 0.000000", "Read completion overhead = 18446744073709551615")],
                "read_completion_ns",
            ),
            (
                "barracuda.diskspecs",
                &[
                    ("Time scale for overheads = 1.000000", "Time scale for overheads = 1e300"),
                    ("Read completion overhead = 0.000000", "Read completion overhead = 1e300"),
                ],
                "ns is past",
            ),
            (
                "barracuda.model",
                &[("Sparing scheme used = 8", "Sparing scheme used = 1"), ("112508,", "1e19,")],
                "slip 10000000000000000000 is past",
            ),
            (
                "barracuda.model",
                &[("Rangesize for sparing = 6", "Rangesize for sparing = 1e19")],
                "Rangesize",
            ),
            (
                "barracuda.model",
                &[("Skew for track switch = 37.000000", "Skew for track switch = 1e300")],
                "skews",
            ),
            ("barracuda.seek", &[("1,\t1.94300", "1,\t1e300")], "seek times"),
        ];
        for (file, edits, want) in cases {
            let e = barracuda_with(|name, mut t| {
                if name == file {
                    for (from, to) in edits {
                        assert!(t.contains(from), "{from}");
                        t = t.replacen(from, to, 1);
                    }
                }
                t
            })
            .expect_err(want);
            assert!(e.to_string().contains(want), "{want}: {e}");
        }
    }
}
