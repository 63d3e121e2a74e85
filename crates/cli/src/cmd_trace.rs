//! `layoutd trace`: summarize, cut and convert block traces.
//!
//! Every trace is read by the simulator's readers ([`layoutd_sim::TraceReader`]:
//! the same parse, decompression and `file:line` errors as `layoutd sim`), and
//! layoutd's format is written by [`TraceRecord::to_line`]. Nothing here parses
//! a trace line itself; the bench scripts call these commands instead of
//! reading traces on their own.
//!
//! Marker reads: the bench harness brackets each phase with a 4 KiB read of
//! marker slot `k` at byte `base + k * stride` (`bench/harness/rig.py`). A
//! cut keeps the requests strictly between the first read of marker `FROM`
//! and the first read of marker `TO`, leaving out every marker read.

use anyhow::{bail, Context};
use layoutd_core::{Instant, Op, StreamId, TraceRecord};
use layoutd_sim::trace::{SizeUnit, TimeUnit};
use layoutd_sim::{BlkAction, Fit, ReadOptions, TraceFormat, TraceReader, TraceReq};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::Write;
use std::path::{Path, PathBuf};

/// `layoutd trace ...`.
#[derive(clap::Subcommand, Debug)]
pub enum TraceCmd {
    /// Counts, bytes, time span, streams, busy and idle time, response times.
    #[command(after_help = concat!(
        "Examples:\n  layoutd trace stats run.trace\n  layoutd trace stats run.trace --json\n  \
layoutd trace stats hm_0.csv.gz --format msr --device 0\n  \
layoutd trace stats run.trace --marker-base 4285530112 --from-marker 2 --to-marker 3 --json\n\n\
Response times are complete_ns - submit_ns, in ms; trims are left out of `response_ms` (as the bench \
harness always did) but have their own entry in `response_ms_by_op`. Percentiles are the value at \
index floor(n * p / 100) of the sorted times (p50 is the upper median). busy_seconds is the time at \
least one request was outstanding, idle_seconds the rest of the span (what closed-loop replay keeps as \
think time); overlapped_requests counts requests submitted before an earlier request of their stream \
completed. With --marker-base the marker reads found are listed (`markers`); with --from-marker and \
--to-marker only the requests between them count.\n\n",
        "Formats: msr, fiu, blkparse, spc, disksim, layoutd (default), systor, tencent, alibaba, vscsi \
(as `layoutd sim`); compressed files are read transparently."
    ))]
    Stats(StatsArgs),
    /// Cut out the requests between two marker reads (the bench harness's phase brackets).
    #[command(after_help = "Examples:\n  \
layoutd trace cut run.trace --marker-base 4285530112 --from-marker 0 --to-marker 1 -o phase0.trace\n  \
layoutd trace cut trace.gz --marker-base 4285530112 --from-marker 4 --to-marker 5 --to jsonl\n\n\
A marker read is a read of --marker-length bytes (default 4096) at byte --marker-base + k * --marker-stride \
(default 65536): marker k. The bench harness puts marker 0 at the start of the export's last 8 MiB, so \
--marker-base is the export size minus 8388608 (4285530112 for a 4 GiB volume: its export is 4 GiB - 1 MiB). The cut keeps the requests strictly after the first read \
of --from-marker and before the first read of --to-marker, in file order, leaving out every marker read; \
times are kept as recorded (unless --rebase). A marker missing from the trace, or a --to-marker read before the \
--from-marker one, is an error and no output is left behind.")]
    Cut(CutArgs),
    /// Rewrite a trace of any format the simulator reads in layoutd's format (or DiskSim ASCII, or JSON lines).
    #[command(after_help = "Examples:\n  \
layoutd trace convert hm_0.csv.gz --format msr --device 0 --rebase -o hm_0.trace\n  \
layoutd trace convert run.trace -o copy.trace                 # layoutd -> layoutd: identical records\n  \
layoutd trace convert run.trace --to disksim -o run.disksim\n  \
layoutd trace convert run.trace --to jsonl | head             # one JSON object per request, for scripts\n\n\
Records are written as the simulator reads them: bytes and nanoseconds, offsets and lengths widened to \
whole 512-byte sectors, longer than 32 MiB cut to 32 MiB (both counted on stderr if any). Formats without \
completion times (all but msr, systor and layoutd) get complete_ns = submit_ns: no response times, and \
closed-loop replay treats every gap between requests as think time. Streams: the format's process or \
device (see docs/trace-formats.md). --to disksim writes `arrival_ms devno blkno size flags` in 512-byte \
sectors with reads and writes only; flushes, trims and write-zeroes are left out and counted on stderr.\n\n\
Formats: msr, fiu, blkparse, spc, disksim, layoutd (default), systor, tencent, alibaba, vscsi.")]
    Convert(ConvertArgs),
}

/// The input trace and how to read it.
#[derive(clap::Args, Debug)]
pub struct Input {
    /// The trace file (plain, gzip, zstd, bzip2 or xz).
    file: PathBuf,
    /// Its format: msr, fiu, blkparse, spc, disksim, layoutd, systor, tencent, alibaba or vscsi.
    #[arg(long, default_value = "layoutd")]
    format: String,
    /// Keep one device or volume: a number, or MAJOR,MINOR (fiu, blkparse), as `layoutd sim --device`.
    #[arg(long, value_name = "ID")]
    device: Option<String>,
    /// disksim: the unit of arrival times, ns, us, ms (default) or s.
    #[arg(long)]
    time_unit: Option<String>,
    /// disksim: the unit of block numbers and sizes, sectors (default) or bytes.
    #[arg(long)]
    size_unit: Option<String>,
    /// blkparse: the event to read, D (issued to the device; default) or Q (queued by the file system).
    #[arg(long, default_value = "D")]
    blkparse_action: String,
}

/// Marker reads and the window between two of them.
#[derive(clap::Args, Debug)]
pub struct MarkerArgs {
    /// Byte offset of marker 0 (bench harness: export size - 8 MiB).
    #[arg(long, value_name = "BYTES")]
    marker_base: Option<u64>,
    /// Bytes between marker k and marker k+1.
    #[arg(long, value_name = "BYTES", default_value_t = 65536)]
    marker_stride: u64,
    /// Length of a marker read.
    #[arg(long, value_name = "BYTES", default_value_t = 4096)]
    marker_length: u64,
    /// How many marker slots there are: only reads of markers 0 .. N-1 are
    /// marker reads (default: any slot from the base on; the bench harness
    /// has 128, its 8 MiB area: a pool's snapshot volumes lie beyond it).
    #[arg(long, value_name = "N", requires = "marker_base")]
    marker_count: Option<u64>,
    /// Keep the requests after the first read of this marker...
    #[arg(long, value_name = "K", requires = "marker_base")]
    from_marker: Option<u64>,
    /// ...and before the first read of this one.
    #[arg(long, value_name = "K", requires = "marker_base")]
    to_marker: Option<u64>,
}

/// Flags of `layoutd trace stats`.
#[derive(clap::Args, Debug)]
pub struct StatsArgs {
    #[command(flatten)]
    input: Input,
    #[command(flatten)]
    markers: MarkerArgs,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

/// What a trace is written as.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutFormat {
    /// layoutd's own format (docs/trace-format.md).
    Layoutd,
    /// DiskSim ASCII: arrival_ms devno blkno size flags (reads and writes only).
    Disksim,
    /// One JSON object per request: line, submit_ns, complete_ns, stream, op, offset_bytes, length_bytes, fua.
    Jsonl,
}

/// Where and how records are written.
#[derive(clap::Args, Debug)]
pub struct Output {
    /// Write here (default: standard output). Replaced if it exists.
    #[arg(short = 'o', long = "output", value_name = "OUT")]
    out: Option<PathBuf>,
    /// The output format.
    #[arg(long = "to", value_enum, default_value = "layoutd")]
    to: OutFormat,
    /// Times since the first written request's submission (default: as recorded).
    #[arg(long)]
    rebase: bool,
}

/// Flags of `layoutd trace cut`.
#[derive(clap::Args, Debug)]
pub struct CutArgs {
    #[command(flatten)]
    input: Input,
    #[command(flatten)]
    markers: MarkerArgs,
    #[command(flatten)]
    output: Output,
}

/// Flags of `layoutd trace convert`.
#[derive(clap::Args, Debug)]
pub struct ConvertArgs {
    #[command(flatten)]
    input: Input,
    #[command(flatten)]
    output: Output,
}

/// Runs `layoutd trace ...`.
pub fn run(cmd: TraceCmd) -> anyhow::Result<()> {
    match cmd {
        TraceCmd::Stats(a) => stats(a),
        TraceCmd::Cut(a) => {
            let window = window(&a.markers)?.context(
                "trace cut needs --marker-base BYTES, --from-marker K and --to-marker K (see --help)",
            )?;
            let sel = Selection { markers: Some(window.0), window: Some(window.1) };
            write_records(&a.input, &sel, &a.output)
        }
        TraceCmd::Convert(a) => write_records(&a.input, &Selection::default(), &a.output),
    }
}

/// How marker reads look.
#[derive(Clone, Copy, Debug)]
struct Markers {
    base: u64,
    stride: u64,
    length: u64,
    count: u64,
}

impl Markers {
    /// The marker number of a marker read, else `None`.
    fn index(&self, r: &TraceReq) -> Option<u64> {
        if r.op != Op::Read || r.offset_bytes < self.base || r.length_bytes != self.length {
            return None;
        }
        let d = r.offset_bytes - self.base;
        (d.is_multiple_of(self.stride) && d / self.stride < self.count).then_some(d / self.stride)
    }
}

/// The marker layout and the (from, to) window of the flags, if any.
fn window(a: &MarkerArgs) -> anyhow::Result<Option<(Markers, (u64, u64))>> {
    let Some(markers) = markers(a)? else { return Ok(None) };
    match (a.from_marker, a.to_marker) {
        (Some(from), Some(to)) => Ok(Some((markers, (from, to)))),
        (None, None) => Ok(None),
        _ => bail!("give both --from-marker and --to-marker, or neither"),
    }
}

fn markers(a: &MarkerArgs) -> anyhow::Result<Option<Markers>> {
    let Some(base) = a.marker_base else { return Ok(None) };
    if a.marker_stride == 0 || a.marker_length == 0 || a.marker_count == Some(0) {
        bail!("--marker-stride, --marker-length and --marker-count must be at least 1");
    }
    Ok(Some(Markers {
        base,
        stride: a.marker_stride,
        length: a.marker_length,
        count: a.marker_count.unwrap_or(u64::MAX),
    }))
}

/// Which records of a file are wanted.
#[derive(Default)]
struct Selection {
    markers: Option<Markers>,
    window: Option<(u64, u64)>,
}

/// A marker read as found in a trace (its first read).
#[derive(serde::Serialize, Clone, Copy, Debug)]
struct MarkerSeen {
    index: u64,
    line: u64,
    submit_ns: u64,
    complete_ns: Option<u64>,
}

/// What a read of a whole file found besides the selected records.
struct Scan {
    markers: Vec<MarkerSeen>,
    format: TraceFormat,
    reshaped: (u64, u64),
}

fn open(input: &Input) -> anyhow::Result<TraceReader> {
    let format = TraceFormat::from_name(&input.format).map_err(anyhow::Error::msg)?;
    if format != TraceFormat::Disksim && (input.time_unit.is_some() || input.size_unit.is_some()) {
        bail!("--time-unit and --size-unit apply to --format disksim only");
    }
    let opts = ReadOptions {
        device: parse_opt(&input.device, |d| {
            layoutd_sim::trace::formats::parse_device(d)
                .ok_or_else(|| format!("--device must be a number or MAJOR,MINOR, got {d:?}"))
        })?,
        fit: Fit::None,
        blkparse_action: match input.blkparse_action.as_str() {
            "D" | "d" => BlkAction::D,
            "Q" | "q" => BlkAction::Q,
            other => bail!("--blkparse-action must be D or Q, got {other:?}"),
        },
        time_unit: parse_opt(&input.time_unit, TimeUnit::from_name)?,
        size_unit: parse_opt(&input.size_unit, SizeUnit::from_name)?,
        ..ReadOptions::default()
    };
    Ok(TraceReader::open(&input.file, format, opts, u64::MAX)?)
}

/// An optional flag through its parser.
fn parse_opt<T>(v: &Option<String>, parse: impl Fn(&str) -> Result<T, String>) -> anyhow::Result<Option<T>> {
    v.as_deref().map(parse).transpose().map_err(anyhow::Error::msg)
}

/// Reads the whole file and hands `each` the selected records in file
/// order: every record, or with a window those strictly between the first
/// reads of its two markers, marker reads left out.
fn scan(
    input: &Input,
    sel: &Selection,
    mut each: impl FnMut(&TraceReq) -> anyhow::Result<()>,
) -> anyhow::Result<Scan> {
    let mut reader = open(input)?;
    let mut markers: Vec<MarkerSeen> = Vec::new();
    let mut seen = HashSet::new();
    let mut inside = false;
    while let Some(r) = reader.next()? {
        let k = sel.markers.and_then(|m| m.index(&r));
        if let Some(k) = k {
            if seen.insert(k) {
                markers.push(MarkerSeen {
                    index: k,
                    line: r.line,
                    submit_ns: r.submit_ns,
                    complete_ns: r.complete_ns,
                });
                if let Some((from, to)) = sel.window {
                    if k == from {
                        inside = from != to && !seen.contains(&to);
                    } else if k == to {
                        inside = false;
                    }
                }
            }
        }
        match sel.window {
            None => each(&r)?,
            Some(_) if inside && k.is_none() => each(&r)?,
            Some(_) => {}
        }
    }
    let counts = reader.counts();
    let scan =
        Scan { markers, format: reader.format(), reshaped: (counts.unaligned_count, counts.oversized_count) };
    if let Some((from, to)) = sel.window {
        let line = |k: u64| scan.markers.iter().find(|m| m.index == k).map(|m| m.line);
        let file = input.file.display();
        for k in [from, to] {
            if line(k).is_none() {
                let found: Vec<String> = scan.markers.iter().map(|m| m.index.to_string()).collect();
                bail!(
                    "{file}: marker {k} is not in the trace (marker reads found: {}; marker k is a {}-byte read \
                     at byte {} + k * {})",
                    if found.is_empty() { "none".to_string() } else { found.join(" ") },
                    sel.markers.map_or(0, |m| m.length),
                    sel.markers.map_or(0, |m| m.base),
                    sel.markers.map_or(0, |m| m.stride)
                );
            }
        }
        if line(to) < line(from) {
            bail!(
                "{file}:{}: marker {to} is read before marker {from} (line {}); nothing lies between them",
                line(to).unwrap_or(0),
                line(from).unwrap_or(0)
            );
        }
    }
    Ok(scan)
}

/// Writes records in one of the output formats.
struct Writer {
    out: Box<dyn Write>,
    to: OutFormat,
    rebase: bool,
    first_ns: Option<u64>,
    left_out: u64,
    path: String,
}

impl Writer {
    fn record(&mut self, r: &TraceReq) -> anyhow::Result<()> {
        let first = if self.rebase { *self.first_ns.get_or_insert(r.submit_ns) } else { 0 };
        let Some(submit) = r.submit_ns.checked_sub(first) else {
            bail!(
                "{}:{}: submitted before the first request; --rebase needs a trace in submission order",
                self.path,
                r.line
            )
        };
        let complete = r.complete_ns.unwrap_or(r.submit_ns) - first;
        let line = match self.to {
            OutFormat::Layoutd => {
                let what = |w: &str| {
                    format!("{}:{}: {w} does not fit the layoutd format (32 bits)", self.path, r.line)
                };
                TraceRecord {
                    submit: Instant::from_ns(submit),
                    complete: Instant::from_ns(complete),
                    stream: StreamId(u32::try_from(r.stream).map_err(|_| anyhow::anyhow!(what("stream")))?),
                    op: r.op,
                    offset_bytes: r.offset_bytes,
                    length_bytes: u32::try_from(r.length_bytes)
                        .map_err(|_| anyhow::anyhow!(what("length")))?,
                    fua: r.fua,
                }
                .to_line()
            }
            OutFormat::Disksim => {
                let flags = match r.op {
                    Op::Read => 1,
                    Op::Write => 0,
                    _ => {
                        self.left_out += 1;
                        return Ok(());
                    }
                };
                let sector = layoutd_core::SECTOR_BYTES;
                format!(
                    "{}.{:06} {} {} {} {flags}",
                    submit / 1_000_000,
                    submit % 1_000_000,
                    r.device,
                    r.offset_bytes / sector,
                    r.length_bytes / sector
                )
            }
            OutFormat::Jsonl => format!(
                "{{\"line\":{},\"submit_ns\":{submit},\"complete_ns\":{complete},\"stream\":{},\"op\":\"{}\",\
                 \"offset_bytes\":{},\"length_bytes\":{},\"fua\":{}}}",
                r.line,
                r.stream,
                r.op.code(),
                r.offset_bytes,
                r.length_bytes,
                r.fua
            ),
        };
        writeln!(self.out, "{line}").with_context(|| format!("{}: cannot write", self.path))
    }
}

/// `cut` and `convert`: the selected records to the output.
fn write_records(input: &Input, sel: &Selection, output: &Output) -> anyhow::Result<()> {
    let path = output.out.as_ref().filter(|p| p.as_os_str() != "-");
    if let Some(p) = path {
        if same_file(p, &input.file) {
            bail!("{}: the output would overwrite the input", p.display());
        }
    }
    let out: Box<dyn Write> = match path {
        Some(p) => Box::new(std::io::BufWriter::new(
            std::fs::File::create(p).with_context(|| format!("{}: cannot create", p.display()))?,
        )),
        None => Box::new(std::io::BufWriter::new(std::io::stdout().lock())),
    };
    let name = path.map_or("standard output".to_string(), |p| p.display().to_string());
    let mut w = Writer { out, to: output.to, rebase: output.rebase, first_ns: None, left_out: 0, path: name };
    let result = (|| -> anyhow::Result<Scan> {
        if w.to == OutFormat::Layoutd {
            writeln!(w.out, "{}", TraceRecord::HEADER)
                .with_context(|| format!("{}: cannot write", w.path))?;
        }
        let scan = scan(input, sel, |r| w.record(r))?;
        w.out.flush().with_context(|| format!("{}: cannot write", w.path))?;
        Ok(scan)
    })();
    let scan = match result {
        Ok(s) => s,
        Err(e) => {
            if let Some(p) = path {
                let _ = std::fs::remove_file(p);
            }
            return Err(e);
        }
    };
    let file = input.file.display();
    if w.left_out > 0 {
        eprintln!("layoutd trace: {file}: {} flushes, trims and write-zeroes left out (DiskSim ASCII has reads and writes only)", w.left_out);
    }
    if !scan.format.has_completion_time() && w.to != OutFormat::Disksim {
        eprintln!("layoutd trace: {file}: this format records no completion times; complete_ns = submit_ns");
    }
    let (unaligned, oversized) = scan.reshaped;
    if unaligned + oversized > 0 {
        eprintln!(
            "layoutd trace: {file}: {unaligned} requests widened to whole 512-byte sectors, {oversized} longer \
             than 32 MiB cut to 32 MiB (as `layoutd sim` reads them)"
        );
    }
    Ok(())
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

/// Response-time figures in ms.
#[derive(serde::Serialize, Debug)]
struct Response {
    mean: f64,
    p50: f64,
    p90: f64,
    p99: f64,
    max: f64,
}

impl Response {
    /// `None` for no samples; sorts `ns`.
    fn of(ns: &mut [u64]) -> Option<Response> {
        if ns.is_empty() {
            return None;
        }
        ns.sort_unstable();
        let n = ns.len();
        let at = |p: usize| ms(ns[(n * p / 100).min(n - 1)]);
        let sum: u128 = ns.iter().map(|&x| u128::from(x)).sum();
        Some(Response {
            mean: round(sum as f64 / n as f64 / 1e6, 4),
            p50: at(50),
            p90: at(90),
            p99: at(99),
            max: ms(ns[n - 1]),
        })
    }
}

fn ms(ns: u64) -> f64 {
    round(ns as f64 / 1e6, 4)
}

/// `x` rounded to `digits` decimals, half to even (as Python's `round`).
fn round(x: f64, digits: usize) -> f64 {
    format!("{x:.digits$}").parse().expect("a formatted float parses")
}

/// `layoutd trace stats --json`. Field names and rounding are those the
/// bench harness's reports have always used (`result.json`'s `trace`).
#[derive(serde::Serialize, Debug, Default)]
struct Summary {
    requests: u64,
    reads: u64,
    writes: u64,
    flushes: u64,
    trims: u64,
    zeroes: u64,
    read_bytes: u64,
    /// Writes and write-zeroes.
    written_bytes: u64,
    trimmed_bytes: u64,
    zeroed_bytes: u64,
    streams: u64,
    span_seconds: f64,
    sequential_read_share: f64,
    mean_read_kib: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    response_ms: Option<Response>,
    response_ms_by_op: BTreeMap<&'static str, Response>,
    busy_seconds: f64,
    idle_seconds: f64,
    overlapped_requests: u64,
    first_submit_ns: Option<u64>,
    last_complete_ns: Option<u64>,
    requests_without_completion_time: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    markers: Option<Vec<MarkerSeen>>,
}

/// Accumulates a [`Summary`] one record at a time.
#[derive(Default)]
struct Tally {
    s: Summary,
    resp: Vec<u64>,
    resp_by_op: HashMap<&'static str, Vec<u64>>,
    intervals: Vec<(u64, u64)>,
    streams: HashSet<u64>,
    last_complete: HashMap<u64, u64>,
    prev_read_end: Option<u64>,
    sequential_reads: u64,
}

impl Tally {
    fn add(&mut self, r: &TraceReq) {
        let s = &mut self.s;
        s.requests += 1;
        let len = r.length_bytes;
        match r.op {
            Op::Read => {
                s.reads += 1;
                s.read_bytes += len;
                if self.prev_read_end == Some(r.offset_bytes) {
                    self.sequential_reads += 1;
                }
                self.prev_read_end = Some(r.offset_bytes + len);
            }
            Op::Write => (s.writes, s.written_bytes) = (s.writes + 1, s.written_bytes + len),
            Op::WriteZeroes => {
                (s.zeroes, s.written_bytes, s.zeroed_bytes) =
                    (s.zeroes + 1, s.written_bytes + len, s.zeroed_bytes + len)
            }
            Op::Flush => s.flushes += 1,
            Op::Trim => (s.trims, s.trimmed_bytes) = (s.trims + 1, s.trimmed_bytes + len),
        }
        self.streams.insert(r.stream);
        let complete = match r.complete_ns {
            Some(c) => {
                let ns = c - r.submit_ns;
                if r.op != Op::Trim {
                    self.resp.push(ns);
                }
                self.resp_by_op.entry(op_name(r.op)).or_default().push(ns);
                c
            }
            None => {
                s.requests_without_completion_time += 1;
                r.submit_ns
            }
        };
        s.first_submit_ns = Some(s.first_submit_ns.map_or(r.submit_ns, |f| f.min(r.submit_ns)));
        s.last_complete_ns = Some(s.last_complete_ns.map_or(complete, |l| l.max(complete)));
        let lc = self.last_complete.entry(r.stream).or_insert(0);
        if *lc > r.submit_ns {
            s.overlapped_requests += 1;
        }
        *lc = (*lc).max(complete);
        self.intervals.push((r.submit_ns, complete));
    }

    fn finish(mut self) -> Summary {
        let mut s = self.s;
        s.streams = self.streams.len() as u64;
        let span = match (s.first_submit_ns, s.last_complete_ns) {
            (Some(a), Some(b)) => b - a,
            _ => 0,
        };
        let busy = union_ns(&mut self.intervals);
        s.span_seconds = round(span as f64 / 1e9, 6);
        s.busy_seconds = round(busy as f64 / 1e9, 6);
        s.idle_seconds = round((span - busy) as f64 / 1e9, 6);
        if s.reads > 0 {
            s.sequential_read_share = round(self.sequential_reads as f64 / s.reads as f64, 4);
            s.mean_read_kib = round(s.read_bytes as f64 / s.reads as f64 / 1024.0, 2);
        }
        s.response_ms = Response::of(&mut self.resp);
        s.response_ms_by_op =
            self.resp_by_op.iter_mut().filter_map(|(op, v)| Some((*op, Response::of(v)?))).collect();
        s
    }
}

fn op_name(op: Op) -> &'static str {
    match op {
        Op::Read => "read",
        Op::Write => "write",
        Op::Flush => "flush",
        Op::Trim => "trim",
        Op::WriteZeroes => "write_zeroes",
    }
}

/// Total length of the union of `[start, end]` intervals (sorts them).
fn union_ns(intervals: &mut [(u64, u64)]) -> u64 {
    intervals.sort_unstable();
    let mut total = 0;
    let mut cur: Option<(u64, u64)> = None;
    for &(a, b) in intervals.iter() {
        cur = match cur {
            Some((ca, cb)) if a <= cb => Some((ca, cb.max(b))),
            Some((ca, cb)) => {
                total += cb - ca;
                Some((a, b))
            }
            None => Some((a, b)),
        };
    }
    total + cur.map_or(0, |(a, b)| b - a)
}

fn stats(a: StatsArgs) -> anyhow::Result<()> {
    let window = window(&a.markers)?;
    let markers = markers(&a.markers)?;
    let sel = Selection { markers, window: window.map(|w| w.1) };
    let mut tally = Tally::default();
    let scan = scan(&a.input, &sel, |r| {
        tally.add(r);
        Ok(())
    })?;
    let mut s = tally.finish();
    if markers.is_some() {
        s.markers = Some(scan.markers);
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&s)?);
    } else {
        print!("{}", stats_text(&a.input.file, &s, window.map(|w| w.1)));
    }
    Ok(())
}

fn stats_text(file: &Path, s: &Summary, window: Option<(u64, u64)>) -> String {
    let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
    let mut t = format!("{}", file.display());
    if let Some((from, to)) = window {
        t += &format!(", between markers {from} and {to}");
    }
    t += &format!(
        ": {} requests, {} streams, span {:.6} s (busy {:.6} s, idle {:.6} s), {} overlapped an earlier request of their stream\n",
        s.requests, s.streams, s.span_seconds, s.busy_seconds, s.idle_seconds, s.overlapped_requests
    );
    t += &format!(
        "  reads         {:>10}  {:>12.3} MiB  mean {:.2} KiB, {:.1}% sequential\n",
        s.reads,
        mib(s.read_bytes),
        s.mean_read_kib,
        s.sequential_read_share * 100.0
    );
    t += &format!("  writes        {:>10}  {:>12.3} MiB\n", s.writes, mib(s.written_bytes - s.zeroed_bytes));
    t += &format!("  write-zeroes  {:>10}  {:>12.3} MiB\n", s.zeroes, mib(s.zeroed_bytes));
    t += &format!("  trims         {:>10}  {:>12.3} MiB\n", s.trims, mib(s.trimmed_bytes));
    t += &format!("  flushes       {:>10}\n", s.flushes);
    let resp = |name: &str, r: &Response| {
        format!(
            "  {name:<13} mean {:.4}  p50 {:.4}  p90 {:.4}  p99 {:.4}  max {:.4} ms\n",
            r.mean, r.p50, r.p90, r.p99, r.max
        )
    };
    if let Some(r) = &s.response_ms {
        t += "response times (complete - submit), trims left out:\n";
        t += &resp("all", r);
        for (op, r) in &s.response_ms_by_op {
            t += &resp(op, r);
        }
    }
    if s.requests_without_completion_time > 0 {
        t += &format!("  {} requests carry no completion time\n", s.requests_without_completion_time);
    }
    if let Some(m) = &s.markers {
        let list: Vec<String> = m.iter().map(|m| format!("{} (line {})", m.index, m.line)).collect();
        t += &format!("marker reads: {}\n", if list.is_empty() { "none".into() } else { list.join(", ") });
    }
    t
}
