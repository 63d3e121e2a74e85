//! `layoutd sim`: replay a block trace through a stack on the HDD model.
//!
//! The command's flags (clap) and what they run: flags become
//! [`crate::SimOptions`] and the engine does the work. The `layoutd` binary
//! uses this module as its `sim` subcommand; the `sim` example and the
//! tests drive the same code.

use crate::trace::{SizeUnit, TimeUnit};
use crate::{BlkAction, Fit, ReadOptions, SimOptions, TraceFormat};
use anyhow::{bail, Context};
use layoutd_core::config::StackConfig;
use layoutd_hdd::{DiskParams, Scheduler};
use std::path::PathBuf;

/// Flags of `layoutd sim`.
#[derive(clap::Args, Debug)]
#[command(
    about = "Replay a block trace through a layoutd stack on the HDD model, deterministically",
    after_help = "Examples:\n  \
layoutd sim --trace hm_0.csv.gz --format msr --device 0 --disk wd800 --fit scale --json hm0.json --report hm0/\n  \
layoutd sim --trace run.trace --format layoutd --config dcd.toml --disk wd800 --closed-loop --json dcd.json\n  \
layoutd sim --compare plain.json dcd.json --report cmp/\n  \
layoutd sim --matrix runs.toml --out results/ [--shard 0/4]\n\n\
Formats: msr (MSR Cambridge CSV), fiu (FIU/SRCMap), blkparse (default text output), spc (UMass SPC CSV), \
disksim (DiskSim ASCII; --time-unit, --size-unit for others of its shape), layoutd (recorded by the trace target), \
systor (SNIA SYSTOR '17 VDI CSV), tencent (Tencent CBS CSV), alibaba (Alibaba block traces CSV), \
vscsi (CloudPhysics VSCSI binary). gzip, zstd, bzip2 and xz files are read transparently.\n\
Same inputs and --seed give byte-identical JSON. See docs/sim.md and docs/trace-formats.md."
)]
pub struct SimArgs {
    /// The trace file (plain, gzip, zstd, bzip2 or xz).
    #[arg(long, required_unless_present_any = ["compare", "matrix"])]
    pub trace: Option<PathBuf>,
    /// Trace format: msr, fiu, blkparse, spc, disksim, layoutd, systor, tencent, alibaba or vscsi.
    #[arg(long, required_unless_present_any = ["compare", "matrix"])]
    pub format: Option<String>,
    /// Stack description (TOML); default: one linear target over the whole disk.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Built-in disk model: wd800, st3160815as, barracuda4g or modern7200 (`layoutd disk show NAME`).
    #[arg(long, conflicts_with = "diskspecs")]
    pub disk: Option<String>,
    /// DiskSim parameter file to build the disk model from.
    #[arg(long)]
    pub diskspecs: Option<PathBuf>,
    /// Disk queue scheduler: fifo, clook or sptf.
    #[arg(long, default_value = "clook")]
    pub scheduler: String,
    /// Requests the disk scheduler compares (tagged queue depth).
    #[arg(long, default_value_t = 32)]
    pub queue_depth: u32,
    /// Closed loop: each stream issues its next request when its previous
    /// completes, plus the recorded think time (default: open loop, at the
    /// recorded timestamps).
    #[arg(long)]
    pub closed_loop: bool,
    /// Lower requests reach the disk as the live runtime (`serve`) submits
    /// them: each of its threads one request at a time, a background step's
    /// requests through its 4 executor threads. Default: every request the
    /// stack emits is at the disk at once. For replays of live captures.
    #[arg(long)]
    pub live_dispatch: bool,
    /// With --live-dispatch: microseconds from a disk completion to the
    /// stack seeing it (the live runtime's wake-up and handling; measured
    /// with `LAYOUTD_EVENT_LOG`, `bench/log_events_diff.py`). Default 0.
    #[arg(long, default_value_t = 0, requires = "live_dispatch")]
    pub live_delivery_us: u64,
    /// Closed loop: most requests read ahead of the oldest unissued one.
    #[arg(long, default_value_t = 65536)]
    pub window: usize,
    /// Seed of the harness RNG and the platter's phase.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Keep one device or volume: a number (MSR disk, SPC ASU, DiskSim devno, SYSTOR LUN,
    /// Tencent VolumeID, Alibaba device_id) or MAJOR,MINOR (fiu, blkparse).
    #[arg(long, visible_alias = "volume", value_name = "ID")]
    pub device: Option<String>,
    /// Skip requests earlier than this many seconds after the first kept one.
    #[arg(long)]
    pub from_s: Option<f64>,
    /// Stop at this many seconds after the first kept request.
    #[arg(long)]
    pub to_s: Option<f64>,
    /// Addresses past the end of the volume: none (error), modulo, scale (squeeze the trace's span onto the
    /// volume), or compact (pack the 1 MiB chunks the trace touches together, in order: keeps spatial locality).
    #[arg(long, default_value = "none")]
    pub fit: String,
    /// With --fit scale: the trace's address span in bytes (default: a first pass over the file finds it).
    #[arg(long)]
    pub span_bytes: Option<u64>,
    /// disksim: the unit of arrival times, ns, us, ms (DiskSim's; default) or s.
    #[arg(long)]
    pub time_unit: Option<String>,
    /// disksim: the unit of block numbers and sizes, sectors (512 bytes; default) or bytes.
    #[arg(long)]
    pub size_unit: Option<String>,
    /// blkparse: the event to replay, D (issued to the device) or Q (queued by the file system).
    #[arg(long, default_value = "D")]
    pub blkparse_action: String,
    /// Do not split interleaved sequential runs into their own streams.
    #[arg(long)]
    pub no_stream_detect: bool,
    /// Split them in a layoutd trace too, as the live runtime did before
    /// recording it (the trace layer records each request's base stream);
    /// by default a layoutd trace's streams are replayed as recorded.
    #[arg(long, conflicts_with = "no_stream_detect")]
    pub stream_detect: bool,
    /// Write the JSON summary here (default: standard output).
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Write SVG plots and index.html into this directory.
    #[arg(long)]
    pub report: Option<PathBuf>,
    /// Write the requests the stack received to this file (layoutd format): the records of the
    /// stack's `trace` layer, or of one put on top when it has none (as `serve --record-trace` does).
    #[arg(long)]
    pub record_trace: Option<PathBuf>,
    /// The stack's bottom device is this many bytes of the disk (e.g. "4095MiB"), starting at
    /// --device-offset, instead of the whole disk: the geometry `serve --emulate` gives a volume
    /// file (its data area, the file's size less its 1 MiB superblock area, at byte 1 MiB of the
    /// emulated disk). A target that sizes itself from its device (pool slices, a DCD's data
    /// area) then has the live layout.
    #[arg(long, value_name = "BYTES")]
    pub device_bytes: Option<String>,
    /// With --device-bytes: where that device starts on the disk (default 0).
    #[arg(long, value_name = "BYTES", requires = "device_bytes")]
    pub device_offset: Option<String>,
    /// Write every request the disk model served to this file, one line each: arrival, start and
    /// completion ns, op, byte offset and length, cache hit (0/1), seek and rotation ns, seek
    /// distance in cylinders (the rest of start to completion is transfer and overhead).
    #[arg(long)]
    pub record_disk: Option<PathBuf>,
    /// Deliver a runtime command to the stack at a point of the trace (repeatable): `@N:TEXT` before
    /// request N (0-based), or `90s:TEXT` / `1500ms:TEXT` before the first request that long after
    /// the first one, in trace time. E.g. `--message @5000:"snapshot create s1"`, `--message 3600s:plan`.
    #[arg(long, value_name = "WHEN:TEXT")]
    pub message: Vec<String>,
    /// Never draw the progress bar (it is drawn only when stderr is a terminal).
    #[arg(long)]
    pub no_progress: bool,
    /// Print a side-by-side table of these JSON summaries (ratio columns against the first) and exit.
    /// With --report DIR: also write one HTML page drawing the runs over each other.
    #[arg(long, num_args = 2.., value_name = "JSON", conflicts_with_all = ["trace", "format", "json"])]
    pub compare: Vec<PathBuf>,
    /// Run every trace × stack × disk cell of this matrix file (TOML; see docs/sim.md) on all cores;
    /// each cell's JSON goes to OUT/cells/, one summary to OUT/summary.json and standard output.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["trace", "compare", "json", "report"], requires = "out")]
    pub matrix: Option<PathBuf>,
    /// --matrix: the output directory.
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// --matrix: run only the cells whose number is I modulo N (I from 0); merge with --summarize.
    #[arg(long, value_name = "I/N", requires = "matrix")]
    pub shard: Option<String>,
    /// --matrix: write the summary from the cell files already in OUT (after shards ran), run nothing.
    #[arg(long, requires = "matrix", conflicts_with = "shard")]
    pub summarize: bool,
    /// --matrix: cells run at once (default: every core).
    #[arg(long, value_name = "N", requires = "matrix")]
    pub jobs: Option<usize>,
}

/// A cell's flags parsed exactly as `layoutd sim`'s own.
#[derive(clap::Parser)]
#[command(name = "layoutd sim")]
struct CellCli {
    #[command(flatten)]
    args: SimArgs,
}

/// `layoutd sim --matrix FILE --out DIR [--shard I/N | --summarize] [--jobs N]`.
fn run_matrix(args: &SimArgs, path: &std::path::Path) -> anyhow::Result<()> {
    use crate::matrix::{run_parallel, summarize, Matrix, Shard};
    use clap::Parser as _;
    let matrix = Matrix::load(path)?;
    let out = args.out.clone().context("--matrix needs --out DIR")?;
    let shard = parse_opt(&args.shard, Shard::parse)?;
    if !args.summarize {
        let cells: Vec<_> =
            matrix.cells().into_iter().filter(|c| shard.is_none_or(|s| s.has(c.index))).collect();
        std::fs::create_dir_all(out.join("cells"))
            .with_context(|| format!("{}: cannot create", out.display()))?;
        let jobs = args.jobs.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
        let wall = std::time::Instant::now();
        run_parallel(&cells, jobs, |cell| {
            let argv = std::iter::once("layoutd sim".to_string()).chain(cell.args.iter().cloned());
            let cli = CellCli::try_parse_from(argv).map_err(|e| anyhow::anyhow!("{}", e.render()))?;
            if cli.args.matrix.is_some() || !cli.args.compare.is_empty() || cli.args.json.is_some() {
                bail!("a cell's flags may not hold --matrix, --compare or --json");
            }
            let mut opts = sim_options(&cli.args)?;
            opts.progress = false;
            let outcome = crate::simulate(&opts)?;
            let file = out.join(cell.file());
            std::fs::write(&file, crate::summary_json(&outcome.summary))
                .with_context(|| format!("{}: cannot write", file.display()))?;
            if let Some(dir) = &cli.args.report {
                crate::report::write_report(dir, &outcome)?;
            }
            Ok(())
        })?;
        eprintln!(
            "layoutd sim: {} cells on {} threads in {:.2} s wall",
            cells.len(),
            jobs.min(cells.len()).max(1),
            wall.elapsed().as_secs_f64()
        );
        if shard.is_some_and(|s| s.count > 1) {
            eprintln!(
                "layoutd sim: shard done; after every shard: --matrix {} --out DIR --summarize",
                path.display()
            );
            return Ok(());
        }
    }
    let (json, table) = summarize(&matrix, &out)?;
    let summary = out.join("summary.json");
    std::fs::write(&summary, json).with_context(|| format!("{}: cannot write", summary.display()))?;
    print!("{table}");
    Ok(())
}

fn disk_params(args: &SimArgs) -> anyhow::Result<DiskParams> {
    match DiskParams::named(args.disk.as_deref(), args.diskspecs.as_deref())? {
        Some(params) => Ok(params),
        None => bail!(
            "name the disk model: --disk PRESET ({}) or --diskspecs FILE",
            DiskParams::preset_names().join(", ")
        ),
    }
}

fn seconds_ns(flag: &str, s: Option<f64>) -> anyhow::Result<Option<u64>> {
    match s {
        Some(s) if !(s >= 0.0 && s.is_finite()) => {
            bail!("--{flag} must be a non-negative number of seconds, got {s}")
        }
        Some(s) => Ok(Some((s * 1e9).round() as u64)),
        None => Ok(None),
    }
}

fn read_options(args: &SimArgs) -> anyhow::Result<ReadOptions> {
    let fit = match args.fit.as_str() {
        "none" => Fit::None,
        "modulo" => Fit::Modulo,
        "scale" => Fit::Scale,
        "compact" => Fit::Compact,
        other => bail!("--fit must be none, modulo, scale or compact, got {other:?}"),
    };
    let blkparse_action = match args.blkparse_action.as_str() {
        "D" | "d" => BlkAction::D,
        "Q" | "q" => BlkAction::Q,
        other => bail!("--blkparse-action must be D or Q, got {other:?}"),
    };
    let device = match &args.device {
        Some(d) => Some(
            crate::trace::formats::parse_device(d)
                .with_context(|| format!("--device must be a number or MAJOR,MINOR, got {d:?}"))?,
        ),
        None => None,
    };
    Ok(ReadOptions {
        device,
        from_ns: seconds_ns("from-s", args.from_s)?,
        to_ns: seconds_ns("to-s", args.to_s)?,
        fit,
        span_bytes: args.span_bytes,
        compact_chunks: None,
        blkparse_action,
        time_unit: parse_opt(&args.time_unit, TimeUnit::from_name)?,
        size_unit: parse_opt(&args.size_unit, SizeUnit::from_name)?,
    })
}

/// An optional flag through its parser, whose error names the flag.
fn parse_opt<T>(v: &Option<String>, parse: fn(&str) -> Result<T, String>) -> anyhow::Result<Option<T>> {
    v.as_deref().map(parse).transpose().map_err(anyhow::Error::msg)
}

/// `--device-bytes` / `--device-offset`: a linear segment of the disk under
/// the stack, so the stack sees a device of that size at that place.
fn bound_device(opts: &mut SimOptions, bytes: &str, offset: &str) -> anyhow::Result<()> {
    let size = |flag: &str, v: &str| {
        layoutd_core::config::parse_size_str(v).map_err(|e| anyhow::anyhow!("--{flag}: {e}"))
    };
    let (bytes, offset) = (size("device-bytes", bytes)?, size("device-offset", offset)?);
    let disk_bytes = opts.disk.sector_count * layoutd_core::SECTOR_BYTES;
    if bytes == 0 || offset.checked_add(bytes).is_none_or(|end| end > disk_bytes) {
        bail!(
            "--device-offset {offset} + --device-bytes {bytes} must lie inside the disk's {disk_bytes} bytes"
        );
    }
    if !opts.stack.device.is_empty() {
        bail!("--device-bytes bounds one device; {} names member devices", opts.stack_origin);
    }
    let mut segment = toml::Table::new();
    for (k, v) in [("offset", offset), ("length", bytes)] {
        segment.insert(k.into(), toml::Value::Integer(i64::try_from(v).context("size past 2^63")?));
    }
    let mut args = toml::Table::new();
    args.insert("segment".into(), toml::Value::Array(vec![toml::Value::Table(segment)]));
    opts.stack.layer.push(layoutd_core::config::LayerConfig { target: "linear".into(), args });
    opts.stack_origin = format!("{} on {bytes} bytes at byte {offset} of the disk", opts.stack_origin);
    Ok(())
}

/// Builds the simulator's options from the flags.
pub fn sim_options(args: &SimArgs) -> anyhow::Result<SimOptions> {
    let trace = args.trace.clone().context("--trace FILE is required")?;
    let format = TraceFormat::from_name(args.format.as_deref().context("--format is required")?)
        .map_err(anyhow::Error::msg)?;
    if format != TraceFormat::Disksim && (args.time_unit.is_some() || args.size_unit.is_some()) {
        bail!("--time-unit and --size-unit apply to --format disksim (DiskSim-shaped traces) only");
    }
    let mut opts = SimOptions::new(trace, format, disk_params(args)?);
    if let Some(path) = &args.config {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("{}: cannot read", path.display()))?;
        opts.stack = StackConfig::parse(&text, &path.display().to_string())?;
        opts.stack_origin = path.display().to_string();
    }
    if let Some(bytes) = &args.device_bytes {
        bound_device(&mut opts, bytes, args.device_offset.as_deref().unwrap_or("0"))?;
    }
    opts.read = read_options(args)?;
    opts.scheduler = Scheduler::from_name(&args.scheduler)
        .with_context(|| format!("--scheduler must be fifo, clook or sptf, got {:?}", args.scheduler))?;
    if args.queue_depth == 0 || args.window == 0 {
        bail!("--queue-depth and --window must be at least 1");
    }
    opts.queue_depth = args.queue_depth;
    opts.closed_loop = args.closed_loop;
    opts.closed_loop_window = args.window;
    opts.live_dispatch = args.live_dispatch;
    opts.live_delivery_us = args.live_delivery_us;
    opts.seed = args.seed;
    opts.stream_detect = !args.no_stream_detect;
    opts.stream_detect_layoutd = args.stream_detect;
    opts.progress = !args.no_progress;
    opts.record_trace = args.record_trace.clone();
    opts.record_disk = args.record_disk.clone();
    opts.messages = args
        .message
        .iter()
        .map(|m| crate::messages::ScheduledMessage::parse(m))
        .collect::<Result<_, _>>()
        .map_err(anyhow::Error::msg)?;
    Ok(opts)
}

/// Runs `layoutd sim`.
pub fn run(args: SimArgs) -> anyhow::Result<()> {
    if let Some(path) = &args.matrix {
        return run_matrix(&args, path);
    }
    if !args.compare.is_empty() {
        print!("{}", crate::report::compare_table(&args.compare)?);
        if let Some(dir) = &args.report {
            let page = crate::report::write_compare_report(dir, &args.compare)?;
            eprintln!("layoutd sim: comparison report in {}", page.display());
        }
        return Ok(());
    }
    let opts = sim_options(&args)?;
    let wall = std::time::Instant::now();
    let outcome = crate::simulate(&opts)?;
    let wall_s = wall.elapsed().as_secs_f64();
    let s = &outcome.summary;
    eprintln!(
        "layoutd sim: {} requests in {:.3} simulated s (disk busy {:.3} s), mean response {:.3} ms, p99 {:.3} ms; \
         {:.2} s wall, {:.0} requests/s (seed {})",
        s.requests,
        s.simulated_seconds,
        s.disk_busy_seconds,
        s.response_ms.mean,
        s.response_ms.p99,
        wall_s,
        s.requests as f64 / wall_s.max(1e-9),
        opts.seed
    );
    if let Some(e) = s.first_errors.first() {
        eprintln!(
            "layoutd sim: WARNING: {} requests failed, the first a {} at {:.3} s of the trace: {} \
             (a replay with failed requests is not the recorded run: a volume or message missing?)",
            s.errors_count, e.op, e.trace_s, e.error
        );
    }
    let json = crate::summary_json(s);
    match &args.json {
        Some(path) => {
            std::fs::write(path, json).with_context(|| format!("{}: cannot write", path.display()))?
        }
        None => print!("{json}"),
    }
    if let Some(dir) = &args.report {
        let page = crate::report::write_report(dir, &outcome)?;
        eprintln!("layoutd sim: report in {}", page.display());
    }
    Ok(())
}
