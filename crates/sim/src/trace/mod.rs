//! Streaming block-trace readers.
//!
//! A [`TraceReader`] reads one line (or binary record) at a time into a
//! reused buffer, so a trace of any length is replayed in constant memory.
//! gzip, zstd, bzip2 and xz files are decompressed transparently, recognised by their magic bytes, not by
//! their names. Every request leaves as a [`TraceReq`] in bytes and
//! nanoseconds, whatever the format's units.
//!
//! Options ([`ReadOptions`]): keep one device (or ASU), keep a time window
//! (seconds after the first kept request), and fit addresses onto the
//! simulated volume ([`Fit`]). A malformed line stops the read with
//! `file:line: what is wrong` ([`TraceError`]); nothing is guessed.

pub mod formats;

use layoutd_core::{Op, REQUEST_BYTES_MAX, SECTOR_BYTES};
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The longest time the simulator's clock covers: a request may be at most
/// this long after the trace's first request, and complete at most this
/// long after it was submitted (10^18 ns, about 31.7 years). Later times
/// would overflow the clock once queueing and service are added, so they
/// stop the read with `file:line`.
pub const TIME_SPAN_MAX_NS: u64 = 1_000_000_000_000_000_000;

/// The trace formats `--format` accepts.
#[derive(Copy, Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TraceFormat {
    /// MSR Cambridge CSV.
    Msr,
    /// FIU / SRCMap text.
    Fiu,
    /// `blkparse` default text output.
    Blkparse,
    /// UMass (SPC) CSV.
    Spc,
    /// DiskSim ASCII input trace.
    Disksim,
    /// layoutd's own trace (`TraceRecord` lines).
    Layoutd,
    /// SNIA SYSTOR '17 VDI CSV.
    Systor,
    /// Tencent CBS CSV.
    Tencent,
    /// Alibaba block traces CSV.
    Alibaba,
    /// CloudPhysics VSCSI binary records (versions 1 and 2).
    Vscsi,
}

impl TraceFormat {
    /// Every format, with its `--format` name.
    pub const ALL: &'static [(&'static str, TraceFormat)] = &[
        ("msr", TraceFormat::Msr),
        ("fiu", TraceFormat::Fiu),
        ("blkparse", TraceFormat::Blkparse),
        ("spc", TraceFormat::Spc),
        ("disksim", TraceFormat::Disksim),
        ("layoutd", TraceFormat::Layoutd),
        ("systor", TraceFormat::Systor),
        ("tencent", TraceFormat::Tencent),
        ("alibaba", TraceFormat::Alibaba),
        ("vscsi", TraceFormat::Vscsi),
    ];

    /// Parses a `--format` name; the error lists the valid ones.
    pub fn from_name(name: &str) -> Result<TraceFormat, String> {
        let found = TraceFormat::ALL.iter().find(|(n, _)| n.eq_ignore_ascii_case(name));
        found.map(|(_, f)| *f).ok_or_else(|| {
            let names: Vec<&str> = TraceFormat::ALL.iter().map(|(n, _)| *n).collect();
            format!("unknown trace format {name:?}; valid formats: {}", names.join(", "))
        })
    }

    /// How `--device` names a device key of this format.
    pub fn device_name(self, key: u64) -> String {
        match self {
            TraceFormat::Fiu | TraceFormat::Blkparse => format!("{},{}", key >> 20, key & 0xF_FFFF),
            _ => key.to_string(),
        }
    }

    /// Whether records carry a completion time (so think time is exact).
    pub fn has_completion_time(self) -> bool {
        matches!(self, TraceFormat::Msr | TraceFormat::Layoutd | TraceFormat::Systor)
    }
}

/// `--time-unit`: the unit of a DiskSim-shaped trace's arrival times.
#[derive(Copy, Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TimeUnit {
    /// Nanoseconds (MQSim's traces).
    Ns,
    /// Microseconds.
    Us,
    /// Milliseconds (DiskSim's own unit, the default).
    Ms,
    /// Seconds.
    S,
}

impl TimeUnit {
    /// Parses `ns`, `us`, `ms` or `s`.
    pub fn from_name(name: &str) -> Result<TimeUnit, String> {
        match name {
            "ns" => Ok(TimeUnit::Ns),
            "us" => Ok(TimeUnit::Us),
            "ms" => Ok(TimeUnit::Ms),
            "s" => Ok(TimeUnit::S),
            other => Err(format!("--time-unit must be ns, us, ms or s, got {other:?}")),
        }
    }

    /// Nanoseconds per unit.
    pub fn ns(self) -> u64 {
        match self {
            TimeUnit::Ns => 1,
            TimeUnit::Us => 1_000,
            TimeUnit::Ms => 1_000_000,
            TimeUnit::S => 1_000_000_000,
        }
    }
}

/// `--size-unit`: the unit of a DiskSim-shaped trace's block numbers and sizes.
#[derive(Copy, Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SizeUnit {
    /// 512-byte sectors (DiskSim's own unit, the default).
    Sectors,
    /// Bytes.
    Bytes,
}

impl SizeUnit {
    /// Parses `sectors` or `bytes`.
    pub fn from_name(name: &str) -> Result<SizeUnit, String> {
        match name {
            "sectors" => Ok(SizeUnit::Sectors),
            "bytes" => Ok(SizeUnit::Bytes),
            other => Err(format!("--size-unit must be sectors or bytes, got {other:?}")),
        }
    }

    /// Bytes per unit.
    pub fn bytes(self) -> u64 {
        match self {
            SizeUnit::Sectors => SECTOR_BYTES,
            SizeUnit::Bytes => 1,
        }
    }
}

/// Which blkparse event becomes a request.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Default, serde::Serialize)]
pub enum BlkAction {
    /// `Q`: queued by the file system (what an upper layer sent).
    Q,
    /// `D`: issued to the driver (what the device saw); the default.
    #[default]
    D,
}

impl BlkAction {
    /// The action code in blkparse output.
    pub fn code(self) -> &'static str {
        match self {
            BlkAction::Q => "Q",
            BlkAction::D => "D",
        }
    }
}

/// One request as read from a trace, in bytes and nanoseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceReq {
    /// 1-based line in the trace file.
    pub line: u64,
    /// When it was issued, on the trace's own clock.
    pub submit_ns: u64,
    /// When it completed, where the format records it.
    pub complete_ns: Option<u64>,
    /// The process id where the format has one, else the device.
    pub stream: u64,
    /// The device (MAJOR<<20|MINOR, disk number, ASU, devno; 0 for layoutd).
    pub device: u64,
    /// What it does.
    pub op: Op,
    /// Where (0 for a flush).
    pub offset_bytes: u64,
    /// How much (0 for a flush).
    pub length_bytes: u64,
    /// Forced unit access.
    pub fua: bool,
}

/// How addresses beyond the simulated volume are handled.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Fit {
    /// Refuse them: `file:line: ... past the end of the volume`.
    #[default]
    None,
    /// `offset mod volume`, pulled back so the request ends inside.
    Modulo,
    /// `offset * volume / span`: the trace's address span is squeezed (or
    /// stretched) onto the volume, keeping relative distances. `span` is the
    /// trace's highest end address, found by a first pass over the file
    /// unless given.
    Scale,
    /// Keeps spatial locality: the volume is cut into chunks of
    /// [`COMPACT_CHUNK_BYTES`], the chunks the trace touches are found by a
    /// first pass, and they are packed together in address order. Every
    /// distance inside a chunk (sequential runs, short seeks) and the order
    /// of all addresses are kept; only address ranges the trace never
    /// touches are removed.
    Compact,
}

/// The chunk size of [`Fit::Compact`].
pub const COMPACT_CHUNK_BYTES: u64 = 1 << 20;

/// What to keep of a trace and how to fit it.
#[derive(Clone, Debug, Default)]
pub struct ReadOptions {
    /// Keep only this device (see [`formats::parse_device`]).
    pub device: Option<u64>,
    /// Skip requests earlier than this many ns after the first kept request.
    pub from_ns: Option<u64>,
    /// Stop at the first request this many ns or more after the first kept one.
    pub to_ns: Option<u64>,
    /// Address fitting.
    pub fit: Fit,
    /// For [`Fit::Scale`]: the trace's address span; found by a first pass if `None`.
    pub span_bytes: Option<u64>,
    /// For [`Fit::Compact`]: the touched chunks, ascending; found by a first pass.
    pub compact_chunks: Option<Arc<Vec<u64>>>,
    /// The blkparse event to replay.
    pub blkparse_action: BlkAction,
    /// disksim: the arrival time's unit (default ms).
    pub time_unit: Option<TimeUnit>,
    /// disksim: the block number's and size's unit (default sectors).
    pub size_unit: Option<SizeUnit>,
}

/// A problem with one line (or with the file as a whole when `line` is 0).
#[derive(Debug)]
pub struct TraceError {
    /// The trace file.
    pub path: PathBuf,
    /// 1-based line; 0 when the problem is not one line's.
    pub line: u64,
    /// What is wrong, and how to fix it where we know.
    pub message: String,
}

impl std::fmt::Display for TraceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.line == 0 {
            write!(f, "{}: {}", self.path.display(), self.message)
        } else {
            write!(f, "{}:{}: {}", self.path.display(), self.line, self.message)
        }
    }
}

impl std::error::Error for TraceError {}

/// Counts bytes read from the file (before decompression), for progress.
struct Counting<R> {
    inner: R,
    count: Arc<AtomicU64>,
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.count.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

/// Counts of lines that were read but not replayed, and of repairs made
/// on request of the options. Reported in the simulator's JSON.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct ReadCounts {
    /// Lines read, comments and blanks included.
    pub lines_count: u64,
    /// Requests returned.
    pub requests_count: u64,
    /// Requests of other devices.
    pub other_device_count: u64,
    /// Requests before the time window.
    pub before_window_count: u64,
    /// Lines that carry no request (blkparse events other than the selected one).
    pub non_request_lines_count: u64,
    /// Requests whose offset or length was not a multiple of 512 bytes
    /// (widened to whole sectors).
    pub unaligned_count: u64,
    /// Requests longer than 32 MiB (cut to 32 MiB).
    pub oversized_count: u64,
    /// Requests moved by `--fit`.
    pub fitted_count: u64,
}

/// A streaming reader of one trace file.
pub struct TraceReader {
    path: PathBuf,
    format: TraceFormat,
    opts: ReadOptions,
    volume_bytes: u64,
    input: Box<dyn BufRead>,
    buf: Vec<u8>,
    line: u64,
    in_blkparse_summary: bool,
    first_ns: Option<u64>,
    done: bool,
    bytes_read: Arc<AtomicU64>,
    file_bytes: u64,
    counts: ReadCounts,
    /// The first few devices of requests `--device` did not select.
    devices_seen: Vec<u64>,
    /// vscsi: the record layout, once the first records were read.
    vscsi: Option<formats::VscsiVersion>,
}

/// Reads into `buf` until it is full or the input ends; the bytes read.
fn read_up_to(input: &mut dyn Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match input.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

/// Devices named when `--device` matches nothing.
const DEVICES_NAMED_MAX: usize = 8;

/// Opens `path`, decompressing gzip, zstd, bzip2 or xz when its magic
/// bytes say so.
fn open_input(path: &Path, count: Arc<AtomicU64>) -> Result<(Box<dyn BufRead>, u64), TraceError> {
    let err = |message: String| TraceError { path: path.to_path_buf(), line: 0, message };
    let file = File::open(path).map_err(|e| err(format!("cannot open: {e}")))?;
    let file_bytes = file.metadata().map(|m| m.len()).unwrap_or(0);
    let mut raw = BufReader::with_capacity(1 << 16, Counting { inner: file, count });
    let magic = raw.fill_buf().map_err(|e| err(format!("cannot read: {e}")))?;
    let input: Box<dyn BufRead> = if magic.starts_with(&[0x1f, 0x8b]) {
        Box::new(BufReader::with_capacity(1 << 16, flate2::bufread::MultiGzDecoder::new(raw)))
    } else if magic.starts_with(b"BZh") {
        Box::new(BufReader::with_capacity(1 << 16, bzip2::bufread::MultiBzDecoder::new(raw)))
    } else if magic.starts_with(&[0xfd, b'7', b'z', b'X', b'Z', 0x00]) {
        Box::new(BufReader::with_capacity(1 << 16, liblzma::bufread::XzDecoder::new_multi_decoder(raw)))
    } else if magic.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
        let dec = zstd::stream::read::Decoder::with_buffer(raw)
            .map_err(|e| err(format!("cannot start zstd decompression: {e}")))?;
        Box::new(BufReader::with_capacity(1 << 16, dec))
    } else {
        Box::new(raw)
    };
    Ok((input, file_bytes))
}

impl TraceReader {
    /// Opens a trace for a volume of `volume_bytes`. With [`Fit::Scale`] and
    /// no span given, reads the file once first to find its span.
    pub fn open(
        path: &Path,
        format: TraceFormat,
        mut opts: ReadOptions,
        volume_bytes: u64,
    ) -> Result<TraceReader, TraceError> {
        assert!(volume_bytes >= SECTOR_BYTES, "volume must hold a sector");
        if opts.fit == Fit::Scale && opts.span_bytes.is_none() {
            opts.span_bytes = Some(scan(path, format, &opts, false)?.0);
        }
        if opts.fit == Fit::Compact && opts.compact_chunks.is_none() {
            let chunks = scan(path, format, &opts, true)?.1;
            let touched = chunks.len() as u64 * COMPACT_CHUNK_BYTES;
            if touched > volume_bytes {
                return Err(TraceError {
                    path: path.to_path_buf(),
                    line: 0,
                    message: format!(
                        "--fit compact: the trace touches {} chunks of {} MiB ({touched} bytes), more than the \
                         volume's {volume_bytes} bytes; use --fit scale or a larger disk",
                        chunks.len(),
                        COMPACT_CHUNK_BYTES >> 20
                    ),
                });
            }
            opts.compact_chunks = Some(Arc::new(chunks));
        }
        let bytes_read = Arc::new(AtomicU64::new(0));
        let (input, file_bytes) = open_input(path, bytes_read.clone())?;
        Ok(TraceReader {
            path: path.to_path_buf(),
            format,
            opts,
            volume_bytes,
            input,
            buf: Vec::with_capacity(256),
            line: 0,
            in_blkparse_summary: false,
            first_ns: None,
            done: false,
            bytes_read,
            file_bytes,
            counts: ReadCounts::default(),
            devices_seen: Vec::new(),
            vscsi: None,
        })
    }

    /// The file's size on disk (compressed), for progress.
    pub fn file_bytes(&self) -> u64 {
        self.file_bytes
    }

    /// Bytes of the file consumed so far (compressed).
    pub fn bytes_read(&self) -> u64 {
        self.bytes_read.load(Ordering::Relaxed)
    }

    /// What was read and skipped so far.
    pub fn counts(&self) -> &ReadCounts {
        &self.counts
    }

    /// The submission time of the first kept request, once it was read.
    pub fn first_ns(&self) -> Option<u64> {
        self.first_ns
    }

    /// The format being read.
    pub fn format(&self) -> TraceFormat {
        self.format
    }

    fn error(&self, message: impl Into<String>) -> TraceError {
        TraceError { path: self.path.clone(), line: self.line, message: message.into() }
    }

    /// The next request that passes the filters, fitted onto the volume.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Result<Option<TraceReq>, TraceError> {
        while !self.done {
            let Some(mut r) = self.next_raw()? else {
                self.done = true;
                self.check_device_matched()?;
                break;
            };
            if self.opts.device.is_some_and(|d| d != r.device) {
                self.counts.other_device_count += 1;
                if self.devices_seen.len() < DEVICES_NAMED_MAX && !self.devices_seen.contains(&r.device) {
                    self.devices_seen.push(r.device);
                }
                continue;
            }
            let first_ns = *self.first_ns.get_or_insert(r.submit_ns);
            let since_ns = r.submit_ns.saturating_sub(first_ns);
            self.check_times(&r, first_ns)?;
            if self.opts.from_ns.is_some_and(|from| since_ns < from) {
                self.counts.before_window_count += 1;
                continue;
            }
            if self.opts.to_ns.is_some_and(|to| since_ns >= to) {
                self.done = true;
                break;
            }
            self.shape(&mut r)?;
            self.counts.requests_count += 1;
            return Ok(Some(r));
        }
        Ok(None)
    }

    /// At the end of the file: a `--device` that matched no request is an
    /// error naming the devices the trace has (a run of 0 requests is never
    /// what was meant).
    fn check_device_matched(&self) -> Result<(), TraceError> {
        let Some(device) = self.opts.device else { return Ok(()) };
        if self.counts.requests_count > 0 || self.counts.other_device_count == 0 {
            return Ok(());
        }
        let names: Vec<String> = self.devices_seen.iter().map(|d| self.format.device_name(*d)).collect();
        let more = if self.devices_seen.len() == DEVICES_NAMED_MAX { ", ..." } else { "" };
        Err(TraceError {
            path: self.path.clone(),
            line: 0,
            message: format!(
                "--device (--volume) {} matches none of the {} requests; the trace's devices are {}{more}",
                self.format.device_name(device),
                self.counts.other_device_count,
                names.join(" ")
            ),
        })
    }

    /// Refuses times the simulator's clock cannot hold ([`TIME_SPAN_MAX_NS`]).
    fn check_times(&self, r: &TraceReq, first_ns: u64) -> Result<(), TraceError> {
        let seconds = |ns: u64| ns as f64 / 1e9;
        let since_ns = r.submit_ns.saturating_sub(first_ns);
        if since_ns > TIME_SPAN_MAX_NS {
            return Err(self.error(format!(
                "timestamp is {:.0} s after the trace's first request; the simulator covers at most \
                 {:.0} s (a wrong --format or --time-unit?)",
                seconds(since_ns),
                seconds(TIME_SPAN_MAX_NS)
            )));
        }
        if let Some(c) = r.complete_ns {
            let response_ns = c.saturating_sub(r.submit_ns);
            if response_ns > TIME_SPAN_MAX_NS {
                return Err(self.error(format!(
                    "completion is {:.0} s after submission; the simulator covers at most {:.0} s",
                    seconds(response_ns),
                    seconds(TIME_SPAN_MAX_NS)
                )));
            }
        }
        Ok(())
    }

    /// Aligns, cuts and fits `r` onto the volume.
    fn shape(&mut self, r: &mut TraceReq) -> Result<(), TraceError> {
        if r.op == Op::Flush {
            r.offset_bytes = 0;
            r.length_bytes = 0;
            return Ok(());
        }
        if r.length_bytes == 0 {
            return Err(self.error("zero-length request (only a flush may be empty)"));
        }
        let start = r.offset_bytes / SECTOR_BYTES * SECTOR_BYTES;
        let Some(end) =
            r.offset_bytes.checked_add(r.length_bytes).and_then(|e| e.checked_next_multiple_of(SECTOR_BYTES))
        else {
            return Err(self.error(format!(
                "request at byte {} of {} bytes ends past 2^64 bytes (overflow)",
                r.offset_bytes, r.length_bytes
            )));
        };
        if start != r.offset_bytes || end - start != r.length_bytes {
            self.counts.unaligned_count += 1;
        }
        let mut length = end - start;
        if length > u64::from(REQUEST_BYTES_MAX) {
            self.counts.oversized_count += 1;
            length = u64::from(REQUEST_BYTES_MAX);
        }
        let length = length.min(self.volume_bytes / SECTOR_BYTES * SECTOR_BYTES);
        let offset = self.fit_offset(start, length)?;
        assert!(offset % SECTOR_BYTES == 0 && offset + length <= self.volume_bytes);
        if offset != start {
            self.counts.fitted_count += 1;
        }
        r.offset_bytes = offset;
        r.length_bytes = length;
        Ok(())
    }

    fn fit_offset(&self, start: u64, length: u64) -> Result<u64, TraceError> {
        let volume = self.volume_bytes;
        let last_start = (volume - length) / SECTOR_BYTES * SECTOR_BYTES;
        match self.opts.fit {
            Fit::None if start.saturating_add(length) <= volume => Ok(start),
            Fit::None => Err(self.error(format!(
                "request at byte {start} (+{length}) runs past the end of the volume ({volume} bytes); \
                 select a device with --device, or use --fit modulo or --fit scale"
            ))),
            Fit::Modulo => Ok((start % volume / SECTOR_BYTES * SECTOR_BYTES).min(last_start)),
            Fit::Scale => {
                let span = self.opts.span_bytes.expect("span found at open").max(1);
                let scaled = (u128::from(start) * u128::from(volume) / u128::from(span)) as u64;
                Ok((scaled / SECTOR_BYTES * SECTOR_BYTES).min(last_start))
            }
            Fit::Compact => {
                let chunks = self.opts.compact_chunks.as_ref().expect("chunks found at open");
                let rank = chunks
                    .binary_search(&(start / COMPACT_CHUNK_BYTES))
                    .expect("the first pass saw every kept request");
                Ok(rank as u64 * COMPACT_CHUNK_BYTES + start % COMPACT_CHUNK_BYTES)
            }
        }
    }

    /// The next request of a VSCSI file (fixed-size binary records; `line`
    /// counts records). The version is told by the first two records.
    fn next_vscsi(&mut self) -> Result<Option<TraceReq>, TraceError> {
        let version = match self.vscsi {
            Some(v) => v,
            None => {
                let mut head = vec![0u8; 2 * formats::VscsiVersion::V2.record_bytes()];
                let got = read_up_to(&mut self.input, &mut head)
                    .map_err(|e| self.error(format!("read failed: {e}")))?;
                head.truncate(got);
                if head.is_empty() {
                    return Ok(None);
                }
                let Some(v) = formats::VscsiVersion::detect(&head) else {
                    return Err(self.error(
                        "not a VSCSI trace: the first records' ver fields are neither version 1 nor 2 \
                         (reading as --format vscsi)",
                    ));
                };
                let rest = std::mem::replace(&mut self.input, Box::new(std::io::empty()));
                self.input = Box::new(std::io::Cursor::new(head).chain(rest));
                self.vscsi = Some(v);
                v
            }
        };
        let n = version.record_bytes();
        loop {
            self.buf.resize(n, 0);
            let got = read_up_to(&mut self.input, &mut self.buf)
                .map_err(|e| self.error(format!("read failed: {e}")))?;
            if got == 0 {
                return Ok(None);
            }
            self.line += 1;
            self.counts.lines_count += 1;
            if got < n {
                return Err(
                    self.error(format!("truncated record: {got} of {n} bytes at the end of the file"))
                );
            }
            match formats::parse_vscsi(&self.buf, version) {
                Ok(Some(r)) => return Ok(Some(TraceReq { line: self.line, ..r })),
                Ok(None) => self.counts.non_request_lines_count += 1,
                Err(m) => return Err(self.error(format!("{m} (reading as --format vscsi)"))),
            }
        }
    }

    /// The next request of the file, unfiltered.
    fn next_raw(&mut self) -> Result<Option<TraceReq>, TraceError> {
        if self.format == TraceFormat::Vscsi {
            return self.next_vscsi();
        }
        loop {
            self.buf.clear();
            let n = self
                .input
                .read_until(b'\n', &mut self.buf)
                .map_err(|e| self.error(format!("read failed: {e}")))?;
            if n == 0 {
                return Ok(None);
            }
            self.line += 1;
            self.counts.lines_count += 1;
            let Ok(text) = std::str::from_utf8(&self.buf) else {
                return Err(self.error("line is not UTF-8 text (a binary or wrongly decompressed file?)"));
            };
            let text = text.trim_end_matches(['\n', '\r']);
            let trimmed = text.trim_start();
            if trimmed.is_empty() || trimmed.starts_with('#') {
                continue;
            }
            let parsed = match self.format {
                TraceFormat::Msr => formats::parse_msr(text),
                TraceFormat::Fiu => formats::parse_fiu(text),
                TraceFormat::Spc => formats::parse_spc(text),
                TraceFormat::Disksim => formats::parse_disksim(
                    text,
                    self.opts.time_unit.unwrap_or(TimeUnit::Ms).ns(),
                    self.opts.size_unit.unwrap_or(SizeUnit::Sectors).bytes(),
                ),
                TraceFormat::Systor => formats::parse_systor(text),
                TraceFormat::Tencent => formats::parse_tencent(text),
                TraceFormat::Alibaba => formats::parse_alibaba(text),
                TraceFormat::Vscsi => unreachable!("read as binary records"),
                TraceFormat::Layoutd => formats::parse_layoutd(text),
                TraceFormat::Blkparse => {
                    if self.in_blkparse_summary || formats::is_blkparse_summary_start(text) {
                        self.in_blkparse_summary = true;
                        continue;
                    }
                    formats::parse_blkparse(text, self.opts.blkparse_action)
                }
            };
            let line = self.line;
            match parsed {
                Ok(Some(r)) => return Ok(Some(TraceReq { line, ..r })),
                Ok(None) => self.counts.non_request_lines_count += 1,
                Err(message) => {
                    let hint = format!("{message} (reading as --format {})", self.format_name());
                    return Err(self.error(hint));
                }
            }
        }
    }

    fn format_name(&self) -> &'static str {
        TraceFormat::ALL.iter().find(|(_, f)| *f == self.format).map(|(n, _)| *n).expect("listed")
    }
}

/// One pass over the requests `opts` keeps: their highest end address (for
/// [`Fit::Scale`]) and, when `chunks` is set, the [`Fit::Compact`] chunks
/// they touch, ascending.
fn scan(
    path: &Path,
    format: TraceFormat,
    opts: &ReadOptions,
    chunks: bool,
) -> Result<(u64, Vec<u64>), TraceError> {
    // Unfitted addresses, exactly as the second pass sees them before fitting.
    let scan_opts = ReadOptions { fit: Fit::None, span_bytes: None, compact_chunks: None, ..opts.clone() };
    let mut reader = TraceReader::open(path, format, scan_opts, u64::MAX)?;
    let mut span = 0u64;
    let mut touched = std::collections::BTreeSet::new();
    while let Some(r) = reader.next()? {
        let end = r.offset_bytes.saturating_add(r.length_bytes);
        span = span.max(end);
        if chunks && r.length_bytes > 0 {
            touched.extend(r.offset_bytes / COMPACT_CHUNK_BYTES..=(end - 1) / COMPACT_CHUNK_BYTES);
        }
    }
    if span == 0 {
        return Err(TraceError { path: path.to_path_buf(), line: 0, message: "no request to fit".into() });
    }
    Ok((span, touched.into_iter().collect()))
}
