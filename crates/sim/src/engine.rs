//! The discrete-event replay: a trace, a stack and the HDD model on the
//! deterministic harness.
//!
//! One loop ([`Replay::run`]) interleaves two kinds of events on the
//! virtual clock: the harness's own (disk completions, target timeouts,
//! idle) and the source's issues. At equal instants the harness goes first
//! (a completion at `t` is seen before a request issued at `t`), and an idle
//! event is delivered in every gap before the next issue, so targets' background
//! work competes with the trace for the simulated arm.

use crate::hist::{round6, Histogram, Summary};
use crate::messages::{MessageInfo, ScheduledMessage};
use crate::phases::{PhaseInfo, Phases};
use crate::sample::Point;
use crate::source::{ClosedLoop, OpenLoop, Source};
use crate::timing::{DiskLogEntry, HddTiming, NullDevice};
use crate::trace::{Fit, ReadCounts, ReadOptions, TraceFormat, TraceReader, TIME_SPAN_MAX_NS};
use anyhow::{bail, Context};
use layoutd_core::config::StackConfig;
use layoutd_core::streams::Detector;
use layoutd_core::{Completion, Op, OpenMode, ReqId, Request, Status, Target};
use layoutd_hdd::{Disk, DiskParams, Scheduler};
use layoutd_runtime::det::Harness;
use layoutd_targets::lowerio::IdTable;
use serde::Serialize;
use std::io::Write;
use std::num::NonZeroU64;
use std::path::PathBuf;
use std::sync::Arc;

/// Everything one simulation needs.
#[derive(Clone)]
pub struct SimOptions {
    /// The trace file.
    pub trace: PathBuf,
    /// Its format.
    pub format: TraceFormat,
    /// Device, window and fitting.
    pub read: ReadOptions,
    /// The stack to replay through.
    pub stack: StackConfig,
    /// Where the stack came from (a path, or `default linear`), for the JSON.
    pub stack_origin: String,
    /// The disk model.
    pub disk: DiskParams,
    /// The disk's scheduler.
    pub scheduler: Scheduler,
    /// Requests the disk's scheduler compares.
    pub queue_depth: u32,
    /// Closed-loop replay (else open-loop).
    pub closed_loop: bool,
    /// Closed loop: most requests read ahead.
    pub closed_loop_window: usize,
    /// Lower requests reach the disk as the live runtime submits them
    /// (`layoutd_runtime::det::LiveDispatch`: each thread one at a time),
    /// not all at once: for replays that predict a live run.
    pub live_dispatch: bool,
    /// With `live_dispatch`: µs from a disk completion to the stack seeing
    /// it (`LiveDispatch::delivery_ns`).
    pub live_delivery_us: u64,
    /// Seeds the harness RNG and the platter's phase.
    pub seed: u64,
    /// Split interleaved sequential runs into their own streams. Applied
    /// to a layoutd trace only with `stream_detect_layoutd`: traces
    /// recorded before the trace layer recorded base streams (9461b99)
    /// carry the live detector's run ids already.
    pub stream_detect: bool,
    /// Detect runs in a layoutd trace too (it records base streams: the
    /// targets then see the ids the live runtime gave them).
    pub stream_detect_layoutd: bool,
    /// Most address-time points kept for the plot.
    pub samples_max: usize,
    /// Draw a progress bar on stderr (only if it is a terminal).
    pub progress: bool,
    /// Write the records of any `trace` layer here (layoutd format).
    pub record_trace: Option<PathBuf>,
    /// Write every request the disk served here, with its costs (`--record-disk`).
    pub record_disk: Option<PathBuf>,
    /// Keep every request the disk sees (tests; unbounded memory).
    pub log_disk: bool,
    /// Runtime commands to deliver at points of the trace (`--message`).
    pub messages: Vec<ScheduledMessage>,
}

impl SimOptions {
    /// Options with defaults: default linear stack, C-LOOK with depth 32,
    /// open-loop, seed 0, stream detection on.
    pub fn new(trace: PathBuf, format: TraceFormat, disk: DiskParams) -> SimOptions {
        SimOptions {
            trace,
            format,
            read: ReadOptions::default(),
            stack: StackConfig::default_linear(),
            stack_origin: "default linear".into(),
            disk,
            scheduler: Scheduler::Clook,
            queue_depth: 32,
            closed_loop: false,
            closed_loop_window: 65536,
            live_dispatch: false,
            live_delivery_us: 0,
            seed: 0,
            stream_detect: true,
            stream_detect_layoutd: false,
            samples_max: 200_000,
            progress: false,
            record_trace: None,
            record_disk: None,
            log_disk: false,
            messages: Vec::new(),
        }
    }
}

/// The JSON written by `--json`: deterministic for identical inputs and seed.
#[derive(Clone, Debug, Serialize)]
pub struct SimSummary {
    /// The trace and how it was read.
    pub trace: TraceInfo,
    /// The disk and what it did.
    pub disk: DiskInfo,
    /// The stack's origin and its layers' status, top first.
    pub stack: StackInfo,
    /// The seed.
    pub seed: u64,
    /// Requests replayed (completed).
    pub requests: u64,
    /// Of those, reads.
    pub reads_count: u64,
    /// Writes (and write-zeroes).
    pub writes_count: u64,
    /// Flushes.
    pub flushes_count: u64,
    /// Trims.
    pub trims_count: u64,
    /// Bytes read.
    pub read_bytes: u64,
    /// Bytes written.
    pub written_bytes: u64,
    /// Requests that completed with an error.
    pub errors_count: u64,
    /// The first [`FIRST_ERRORS_MAX`] of them (absent when none failed): a
    /// replay whose requests fail is not the run it replays (a volume that
    /// does not exist in the replayed stack, a read past its end).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub first_errors: Vec<ErrorInfo>,
    /// From the first issue to the last completion.
    pub simulated_seconds: f64,
    /// Time the disk was serving a request (foreground or background)
    /// between the first issue and the last completion of a trace request.
    pub disk_busy_seconds: f64,
    /// Disk time spent bringing the stack up before the trace (format or
    /// recovery I/O).
    pub disk_busy_bringup_seconds: f64,
    /// Disk time spent after the last trace request completed: background
    /// requests still in flight when the trace ended. (The replay stops
    /// there; it does not drain background work such as a full destage.)
    pub disk_busy_after_trace_seconds: f64,
    /// `disk_busy_seconds / simulated_seconds`.
    pub disk_utilization: f64,
    /// Response time (issue to completion) of every request.
    pub response_ms: Summary,
    /// Of reads.
    pub read_response_ms: Summary,
    /// Of writes.
    pub write_response_ms: Summary,
    /// Harness events.
    pub harness: HarnessInfo,
    /// Response-time histograms for plots (`--compare --report`), ns.
    pub response_buckets: ResponseBuckets,
    /// Mean response by phase of the trace's own clock ([`crate::phases`]).
    pub phases: PhaseInfo,
    /// The `--message`s delivered, in order (absent when none was given).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub messages: Vec<MessageInfo>,
}

/// Response times of reads and writes as `[lowest ns, width ns, count]`,
/// 8 buckets per power of two ([`Histogram::coarse_buckets`]); a response
/// of 0 ns (acknowledged at once, from RAM) is the bucket `[0, 1, n]`.
#[derive(Clone, Debug, Default, Serialize, serde::Deserialize)]
pub struct ResponseBuckets {
    /// Of reads.
    pub read: Vec<[u64; 3]>,
    /// Of writes.
    pub write: Vec<[u64; 3]>,
}

/// See [`SimSummary::trace`].
#[derive(Clone, Debug, Serialize)]
pub struct TraceInfo {
    /// The path as given.
    pub path: String,
    /// Its format.
    pub format: TraceFormat,
    /// `open-loop` or `closed-loop`.
    pub mode: &'static str,
    /// How addresses were fitted.
    pub fit: Fit,
    /// Lines and requests read, skipped, repaired.
    pub counts: ReadCounts,
    /// Open loop: timestamps that went backwards (issued at the latest time seen).
    pub timestamps_clamped_count: u64,
    /// Base streams (closed loop) or detected stream ids' base streams.
    pub base_streams_count: u64,
}

/// See [`SimSummary::disk`].
#[derive(Clone, Debug, Serialize)]
pub struct DiskInfo {
    /// The model's name.
    pub model: String,
    /// `Fifo`, `Clook` or `Sptf`.
    pub scheduler: Scheduler,
    /// Requests the scheduler compares.
    pub queue_depth: u32,
    /// Capacity.
    pub capacity_bytes: u64,
    /// Requests served by the model (trims excluded).
    pub requests_count: u64,
    /// Of those, on-board buffer hits.
    pub cache_hits_count: u64,
    /// Trims completed without the arm.
    pub trims_count: u64,
    /// Mean seek distance over media accesses, in cylinders.
    pub seek_distance_cyl_mean: f64,
    /// Media accesses that did not move the arm.
    pub zero_seeks_count: u64,
    /// Service time (start to completion), queueing excluded.
    pub service_ms: Summary,
    /// Lower requests reached the disk as the live runtime submits them
    /// (`--live-dispatch`); omitted when off.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub live_dispatch: bool,
    /// `--live-delivery-us`; omitted when 0.
    #[serde(skip_serializing_if = "is_zero")]
    pub live_delivery_us: u64,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

/// See [`SimSummary::stack`].
#[derive(Clone, Debug, Serialize)]
pub struct StackInfo {
    /// Where the config came from.
    pub config: String,
    /// Every layer's `Target::layer_statuses`, top first.
    pub layers: Vec<LayerInfo>,
}

/// One layer's status, as JSON objects.
#[derive(Clone, Debug, Serialize)]
pub struct LayerInfo {
    /// Target type.
    pub target: String,
    /// Its config, echoed.
    pub config: serde_json::Map<String, serde_json::Value>,
    /// Its counters.
    pub counters: serde_json::Map<String, serde_json::Value>,
}

impl From<&Status> for LayerInfo {
    fn from(s: &Status) -> LayerInfo {
        let config = s.config.iter().map(|(k, v)| (k.clone(), v.clone().into())).collect();
        let counters = s.counters.iter().map(|(k, v)| (k.clone(), (*v).into())).collect();
        LayerInfo { target: s.target.clone(), config, counters }
    }
}

/// How many failed requests [`SimSummary::first_errors`] names.
pub const FIRST_ERRORS_MAX: usize = 8;

/// A request that completed with an error, in the JSON summary.
#[derive(Clone, Debug, Serialize)]
pub struct ErrorInfo {
    /// Its recorded submission, seconds after the trace's first request
    /// (to the phases' grain, [`Phases::GRAIN_NS`]).
    pub trace_s: f64,
    /// `R`, `W`, `F`, `T` or `Z`.
    pub op: String,
    /// The error.
    pub error: String,
}

/// See [`SimSummary::harness`].
#[derive(Clone, Debug, Serialize)]
pub struct HarnessInfo {
    /// Lower requests the stack sent to the disk.
    pub lower_requests_count: u64,
    /// Idle events delivered to the stack.
    pub idle_events_count: u64,
    /// Timeouts delivered to the stack.
    pub timeouts_count: u64,
}

/// A finished simulation: the JSON summary and what the report plots.
pub struct SimOutcome {
    /// The numbers.
    pub summary: SimSummary,
    /// Response time of every request, ns.
    pub response_ns: Histogram,
    /// Seek distance of every media access, cylinders.
    pub seek_cyl: Histogram,
    /// Disk addresses against time, decimated.
    pub addresses: Vec<Point>,
    /// Every request the disk saw, when `log_disk` was set.
    pub disk_log: Option<Vec<DiskLogEntry>>,
}

/// Per-request bookkeeping between issue and completion: 16 bytes, as an
/// open-loop overload keeps one per request of the trace (volumes are
/// counted at issue, the closed loop's stream by the source itself).
#[derive(Clone, Copy)]
struct Pending {
    issue_ns: u64,
    /// The op (its [`PENDING_OPS`] index + 1, so never zero) in the top
    /// [`PENDING_OP_BITS`] bits, below it the recorded submission after the
    /// trace's first request in [`Phases::GRAIN_NS`] (all the phases need).
    op_grain: NonZeroU64,
}

const _: () = assert!(std::mem::size_of::<Option<Pending>>() == 16);
const PENDING_OPS: [Op; 5] = [Op::Read, Op::Write, Op::Flush, Op::Trim, Op::WriteZeroes];
const PENDING_OP_BITS: u32 = 3;
const PENDING_GRAIN_BITS: u32 = u64::BITS - PENDING_OP_BITS;
const _: () = assert!(PENDING_OPS.len() < 1 << PENDING_OP_BITS);
// Every trace time the reader accepts fits below the op.
const _: () = assert!(TIME_SPAN_MAX_NS / Phases::GRAIN_NS < 1 << PENDING_GRAIN_BITS);

impl Pending {
    fn new(issue_ns: u64, trace_ns: u64, op: Op) -> Pending {
        let grain = trace_ns / Phases::GRAIN_NS;
        assert!(grain < 1 << PENDING_GRAIN_BITS, "trace time {trace_ns} ns past the reader's bound");
        let code = PENDING_OPS.iter().position(|o| *o == op).expect("every op listed") as u64 + 1;
        let op_grain = NonZeroU64::new(code << PENDING_GRAIN_BITS | grain).expect("op code is not zero");
        Pending { issue_ns, op_grain }
    }

    fn op(self) -> Op {
        PENDING_OPS[(self.op_grain.get() >> PENDING_GRAIN_BITS) as usize - 1]
    }

    /// The recorded submission, rounded down to the phases' grain.
    fn trace_ns(self) -> u64 {
        (self.op_grain.get() & ((1 << PENDING_GRAIN_BITS) - 1)) * Phases::GRAIN_NS
    }
}

/// Response-time and volume counters of completed requests.
#[derive(Default)]
struct Tally {
    all_ns: Histogram,
    read_ns: Histogram,
    write_ns: Histogram,
    reads_count: u64,
    writes_count: u64,
    flushes_count: u64,
    trims_count: u64,
    read_bytes: u64,
    written_bytes: u64,
    errors_count: u64,
    first_errors: Vec<ErrorInfo>,
}

/// One replay in progress.
struct Replay<'a> {
    h: Harness<HddTiming>,
    source: Box<dyn Source + 'a>,
    detector: Detector,
    /// Requests between issue and completion, by harness id (0, 1, 2, ...).
    pending: IdTable<Pending>,
    tally: Tally,
    phases: Phases,
    origin_ns: u64,
    last_completion_ns: u64,
    /// The disk's busy total when the trace started (after bring-up).
    busy_at_origin_ns: u64,
    records: Option<std::io::BufWriter<std::fs::File>>,
    progress: indicatif::ProgressBar,
    /// `--message`s not yet delivered, in the order given.
    messages_due: Vec<ScheduledMessage>,
    messages_done: Vec<MessageInfo>,
    /// Requests issued so far.
    issued_count: u64,
}

/// Runs one simulation.
pub fn simulate(opts: &SimOptions) -> anyhow::Result<SimOutcome> {
    let capacity_bytes = opts.disk.sector_count * layoutd_core::SECTOR_BYTES;
    let disk = Disk::new(opts.disk.clone(), opts.scheduler, opts.queue_depth, opts.seed);
    let mut timing = HddTiming::new(disk, opts.samples_max);
    if opts.log_disk {
        timing.log = Some(Vec::new());
    }
    if let Some(path) = &opts.record_disk {
        let file =
            std::fs::File::create(path).with_context(|| format!("{}: cannot create", path.display()))?;
        timing.record = Some(crate::timing::DiskRecord::new(Box::new(std::io::BufWriter::new(file))));
    }
    let mut stack: Box<dyn Target> = Box::new(
        layoutd_targets::build_stack(&opts.stack, capacity_bytes, OpenMode::format(1))
            .map_err(|e| anyhow::anyhow!("{}: {e}", opts.stack_origin))?,
    );
    if opts.record_trace.is_some() {
        stack = layoutd_targets::trace::recording(stack);
    }
    let volume_bytes = stack.size_bytes();
    let device = Arc::new(NullDevice::new(capacity_bytes));
    let mut h = Harness::new(stack, device, timing, opts.seed);
    h.with_data = false;
    h.events = layoutd_runtime::events::EventLog::from_env("sim");
    h.bring_up().map_err(|e| anyhow::anyhow!("{}: bring-up: {e}", opts.stack_origin))?;
    if opts.live_dispatch {
        let mut d = layoutd_runtime::det::LiveDispatch::new(layoutd_runtime::live::EXECUTOR_THREADS);
        d.delivery_ns = opts.live_delivery_us.saturating_mul(1000);
        h.dispatch = Some(d);
    }
    let origin_ns = h.now.as_ns();
    let busy_at_origin_ns = h.timing.disk().busy_ns_total();
    h.timing.start_busy_window(origin_ns);
    let reader = TraceReader::open(&opts.trace, opts.format, opts.read.clone(), volume_bytes)?;
    let progress = progress_bar(opts.progress, reader.file_bytes());
    let source: Box<dyn Source> = if opts.closed_loop {
        Box::new(ClosedLoop::new(reader, origin_ns, opts.closed_loop_window))
    } else {
        Box::new(OpenLoop::new(reader, origin_ns))
    };
    let records = match &opts.record_trace {
        Some(path) => Some(open_record_file(path)?),
        None => None,
    };
    let mut replay = Replay {
        h,
        source,
        detector: Detector::new(
            opts.stream_detect && (opts.format != TraceFormat::Layoutd || opts.stream_detect_layoutd),
        ),
        pending: IdTable::default(),
        tally: Tally::default(),
        phases: Phases::default(),
        origin_ns,
        last_completion_ns: origin_ns,
        busy_at_origin_ns,
        records,
        progress,
        messages_due: opts.messages.clone(),
        messages_done: Vec::new(),
        issued_count: 0,
    };
    replay.run()?;
    replay.progress.finish_and_clear();
    replay.finish(opts)
}

fn progress_bar(enabled: bool, file_bytes: u64) -> indicatif::ProgressBar {
    use std::io::IsTerminal;
    if !enabled || !std::io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::with_draw_target(
        Some(file_bytes),
        indicatif::ProgressDrawTarget::stderr_with_hz(4),
    );
    let style = indicatif::ProgressStyle::with_template(
        "{spinner} [{elapsed_precise}] {wide_bar} {bytes}/{total_bytes} ({eta}) {msg}",
    )
    .expect("valid template");
    bar.set_style(style);
    bar
}

fn open_record_file(path: &std::path::Path) -> anyhow::Result<std::io::BufWriter<std::fs::File>> {
    let file = std::fs::File::create(path).with_context(|| format!("{}: cannot create", path.display()))?;
    let mut w = std::io::BufWriter::new(file);
    writeln!(w, "{}", layoutd_core::TraceRecord::HEADER)?;
    Ok(w)
}

/// Steps past this many events after the trace ends mean a target never
/// settles (endless background work).
const TAIL_STEPS_MAX: u64 = 100_000_000;

impl Replay<'_> {
    fn run(&mut self) -> anyhow::Result<()> {
        let mut issued = 0u64;
        let mut tail_steps = 0u64;
        loop {
            let issue_at = self.source.peek_ns()?;
            let event_at = self.h.next_event().map(|t| t.as_ns());
            let step_first = self.h.idle_pending()
                || match (event_at, issue_at) {
                    (Some(e), Some(i)) => e <= i,
                    (Some(_), None) => {
                        self.h.upper_outstanding_count() > 0 || self.h.lower_in_flight_count() > 0
                    }
                    (None, _) => false,
                };
            if step_first {
                self.step()?;
                if issue_at.is_none() {
                    tail_steps += 1;
                    if tail_steps > TAIL_STEPS_MAX {
                        bail!("the stack did not settle within {TAIL_STEPS_MAX} events after the trace ended (seed {})", self.h.seed());
                    }
                }
                continue;
            }
            let Some(at) = issue_at else {
                if self.messages_due.is_empty() {
                    break;
                }
                self.deliver_messages(u64::MAX, u64::MAX)?;
                continue;
            };
            self.issue(at)?;
            issued += 1;
            if issued.is_multiple_of(65536) {
                self.progress.set_position(self.source.reader().bytes_read());
            }
        }
        assert_eq!(self.h.upper_outstanding_count(), 0, "every issued request completed");
        assert!(self.pending.is_empty());
        Ok(())
    }

    /// Delivers the due `--message`s (before request `index` at trace
    /// time `trace_ns`), in the order given; a refusal ends the replay.
    fn deliver_messages(&mut self, index: u64, trace_ns: u64) -> anyhow::Result<()> {
        let mut i = 0;
        while i < self.messages_due.len() {
            if !self.messages_due[i].due(index, trace_ns) {
                i += 1;
                continue;
            }
            let m = self.messages_due.remove(i);
            let now = self.h.now;
            let reply = self.h.message(&m.text).map_err(|e| {
                anyhow::anyhow!(
                    "--message {:?} (before request {}): the stack refused it: {e}",
                    m.spec,
                    self.issued_count
                )
            })?;
            self.collect();
            self.messages_done.push(MessageInfo {
                spec: m.spec,
                before_request: self.issued_count,
                sim_ns: now.as_ns().saturating_sub(self.origin_ns),
                reply,
            });
        }
        Ok(())
    }

    fn issue(&mut self, at_ns: u64) -> anyhow::Result<()> {
        let now = layoutd_core::Instant::from_ns(at_ns);
        self.h.now = self.h.now.max(now);
        let issue = self.source.pop();
        let r = issue.req;
        if !self.messages_due.is_empty() {
            let first_ns = self.source.reader().first_ns().unwrap_or(r.submit_ns);
            self.deliver_messages(self.issued_count, r.submit_ns.saturating_sub(first_ns))?;
        }
        self.issued_count += 1;
        let length_bytes = r.length_bytes as u32;
        let stream = self.detector.classify(r.stream, r.offset_bytes, r.length_bytes);
        let req =
            Request { fua: r.fua, stream, ..Request::new(ReqId(0), r.op, r.offset_bytes, length_bytes) };
        let issue_ns = self.h.now.as_ns();
        // Completions delivered during submit wait in the harness until
        // `collect`, so the bookkeeping can go in after the id is known.
        let id = self.h.submit(req);
        self.source.issued(issue.key, id.0);
        let first_ns = self.source.reader().first_ns().unwrap_or(r.submit_ns);
        let trace_ns = r.submit_ns.saturating_sub(first_ns);
        self.pending.insert(id.0, Pending::new(issue_ns, trace_ns, r.op));
        // Every issued request completes before the replay ends, so the
        // volumes are counted here rather than kept until completion.
        let t = &mut self.tally;
        match r.op {
            Op::Read => t.read_bytes += u64::from(length_bytes),
            Op::Write | Op::WriteZeroes => t.written_bytes += u64::from(length_bytes),
            Op::Flush | Op::Trim => {}
        }
        self.collect();
        Ok(())
    }

    fn step(&mut self) -> anyhow::Result<()> {
        let progressed = self.h.step();
        assert!(progressed, "a step was due");
        self.collect();
        if let Some(w) = &mut self.records {
            for r in self.h.take_records() {
                writeln!(w, "{}", r.to_line())?;
            }
        } else {
            drop(self.h.take_records());
        }
        Ok(())
    }

    fn collect(&mut self) {
        let now_ns = self.h.now.as_ns();
        while let Some(c) = self.h.pop_completion() {
            self.complete(c, now_ns);
        }
    }

    fn complete(&mut self, c: Completion, now_ns: u64) {
        let p = self.pending.remove(c.id.0).expect("completion of an issued request");
        let response_ns = now_ns - p.issue_ns;
        self.phases.record(p.trace_ns(), p.op(), response_ns);
        let t = &mut self.tally;
        t.all_ns.record(response_ns);
        if let Err(e) = &c.result {
            t.errors_count += 1;
            if t.first_errors.len() < FIRST_ERRORS_MAX {
                t.first_errors.push(ErrorInfo {
                    trace_s: p.trace_ns() as f64 / 1e9,
                    op: p.op().code().to_string(),
                    error: e.to_string(),
                });
            }
        }
        match p.op() {
            Op::Read => {
                t.reads_count += 1;
                t.read_ns.record(response_ns);
            }
            Op::Write | Op::WriteZeroes => {
                t.writes_count += 1;
                t.write_ns.record(response_ns);
            }
            Op::Flush => t.flushes_count += 1,
            Op::Trim => t.trims_count += 1,
        }
        self.last_completion_ns = self.last_completion_ns.max(now_ns);
        self.h.timing.mark_busy_window(now_ns);
        self.source.completed(c.id.0, now_ns);
    }
}

impl Replay<'_> {
    fn finish(self, opts: &SimOptions) -> anyhow::Result<SimOutcome> {
        let Replay {
            h,
            source,
            tally: t,
            phases,
            origin_ns,
            last_completion_ns,
            busy_at_origin_ns,
            mut records,
            detector,
            messages_done,
            ..
        } = self;
        if let Some(w) = &mut records {
            w.flush().context("cannot write the recorded trace")?;
        }
        let simulated_ns = last_completion_ns - origin_ns;
        let busy_total_ns = h.timing.disk().busy_ns_total();
        // Busy time inside [first issue, last completion] only: a service
        // running across either end is counted for its part inside.
        let disk_busy_ns = h.timing.busy_in_window_ns();
        let simulated_seconds = round6(simulated_ns as f64 / 1e9);
        let utilization =
            if simulated_ns == 0 { 0.0 } else { round6(disk_busy_ns as f64 / simulated_ns as f64) };
        let layers = h.stack.layer_statuses().iter().map(LayerInfo::from).collect();
        let base_streams_count =
            if opts.closed_loop { source.stream_count() } else { detector.base_count() as u64 };
        let trace = TraceInfo {
            path: opts.trace.display().to_string(),
            format: opts.format,
            mode: if opts.closed_loop { "closed-loop" } else { "open-loop" },
            fit: opts.read.fit,
            counts: source.reader().counts().clone(),
            timestamps_clamped_count: source.clamped_count(),
            base_streams_count,
        };
        let disk = disk_info(opts, &h.timing);
        let summary = SimSummary {
            trace,
            disk,
            stack: StackInfo { config: opts.stack_origin.clone(), layers },
            seed: opts.seed,
            requests: t.all_ns.count(),
            reads_count: t.reads_count,
            writes_count: t.writes_count,
            flushes_count: t.flushes_count,
            trims_count: t.trims_count,
            read_bytes: t.read_bytes,
            written_bytes: t.written_bytes,
            errors_count: t.errors_count,
            first_errors: t.first_errors,
            simulated_seconds,
            disk_busy_seconds: round6(disk_busy_ns as f64 / 1e9),
            disk_busy_bringup_seconds: round6(busy_at_origin_ns as f64 / 1e9),
            disk_busy_after_trace_seconds: round6(
                (busy_total_ns - busy_at_origin_ns - disk_busy_ns) as f64 / 1e9,
            ),
            disk_utilization: utilization,
            response_ms: t.all_ns.summary(1e6),
            read_response_ms: t.read_ns.summary(1e6),
            write_response_ms: t.write_ns.summary(1e6),
            harness: HarnessInfo {
                lower_requests_count: h.stats.lower_count,
                idle_events_count: h.stats.idle_count,
                timeouts_count: h.stats.timeout_count,
            },
            response_buckets: ResponseBuckets {
                read: t.read_ns.coarse_buckets(),
                write: t.write_ns.coarse_buckets(),
            },
            phases: phases.info(),
            messages: messages_done,
        };
        let mut timing = h.timing;
        Ok(SimOutcome {
            summary,
            response_ns: t.all_ns,
            seek_cyl: std::mem::take(&mut timing.stats.seek_cyl),
            addresses: timing.addresses.points().to_vec(),
            disk_log: timing.log.take(),
        })
    }
}

fn disk_info(opts: &SimOptions, timing: &HddTiming) -> DiskInfo {
    let stats = &timing.stats;
    let seeks_count = stats.seek_cyl.count();
    let seek_mean = if seeks_count == 0 { 0.0 } else { stats.seek_cyl.sum() as f64 / seeks_count as f64 };
    let zero_seeks_count = stats.seek_cyl.buckets().find(|b| b.0 == 0).map_or(0, |b| b.2);
    DiskInfo {
        model: opts.disk.name.clone(),
        scheduler: opts.scheduler,
        queue_depth: opts.queue_depth,
        capacity_bytes: opts.disk.sector_count * layoutd_core::SECTOR_BYTES,
        requests_count: stats.served_count,
        cache_hits_count: stats.cache_hit_count,
        trims_count: stats.trims_count,
        seek_distance_cyl_mean: round6(seek_mean),
        zero_seeks_count,
        service_ms: stats.service_ns.summary(1e6),
        live_dispatch: opts.live_dispatch,
        live_delivery_us: opts.live_delivery_us,
    }
}

/// The summary as pretty JSON with a trailing newline (what `--json` writes).
pub fn summary_json(summary: &SimSummary) -> String {
    let mut s = serde_json::to_string_pretty(summary).expect("summary serializes");
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pending_keeps_the_op_and_the_trace_time_at_the_phases_grain() {
        for (i, op) in PENDING_OPS.into_iter().enumerate() {
            let trace_ns = TIME_SPAN_MAX_NS - i as u64 * 1_234_567;
            let p = Pending::new(7, trace_ns, op);
            assert_eq!((p.issue_ns, p.op()), (7, op));
            assert_eq!(p.trace_ns(), trace_ns / Phases::GRAIN_NS * Phases::GRAIN_NS);
            assert!(p.trace_ns() <= trace_ns && trace_ns - p.trace_ns() < Phases::GRAIN_NS);
        }
        let p = Pending::new(0, 0, Op::Read);
        assert_eq!((p.op(), p.trace_ns()), (Op::Read, 0));
    }
}
