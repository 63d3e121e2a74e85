//! One line parser per trace format. Each takes one line (without its
//! newline, never blank, never a `#` comment) and returns the request it
//! describes, `Ok(None)` for a line the format defines but that carries no
//! request (a blkparse event other than the selected action, a header), or
//! an error saying what is wrong with the line. No parser allocates.
//!
//! Units are converted here: every time becomes nanoseconds, every address
//! bytes. The formats are documented in `docs/trace-formats.md`.

use super::{BlkAction, TraceReq};
use layoutd_core::{Op, TraceRecord, SECTOR_BYTES};

type Parsed = Result<Option<TraceReq>, String>;

/// Splits on `sep` and names the field that is missing.
struct Fields<'a, I: Iterator<Item = &'a str>> {
    iter: I,
    index: usize,
    names: &'static [&'static str],
}

impl<'a, I: Iterator<Item = &'a str>> Fields<'a, I> {
    fn next(&mut self) -> Result<&'a str, String> {
        self.index += 1;
        match self.iter.next() {
            Some(f) => Ok(trim_fast(f)),
            None => Err(format!(
                "expected {} fields ({}), found {}",
                self.names.len(),
                self.names.join(" "),
                self.index - 1
            )),
        }
    }

    /// Refuses trailing fields, for formats with a fixed field count.
    fn finish(mut self) -> Result<(), String> {
        match self.iter.next() {
            Some(extra) => Err(format!(
                "expected {} fields ({}), found more: {extra:?}",
                self.names.len(),
                self.names.join(" ")
            )),
            None => Ok(()),
        }
    }

    fn num(&mut self) -> Result<u64, String> {
        let name = self.names.get(self.index).copied().unwrap_or("field");
        whole(name, self.next()?)
    }

    fn decimal_ns(&mut self, unit_ns: u64) -> Result<u64, String> {
        let name = self.names.get(self.index).copied().unwrap_or("field");
        decimal(name, self.next()?, unit_ns)
    }
}

/// `f` as a whole number; the error tells a number too large for 64 bits
/// from one that is not a number.
pub fn whole(name: &str, f: &str) -> Result<u64, String> {
    parse_u64(f).ok_or_else(|| {
        if !f.is_empty() && f.bytes().all(|b| b.is_ascii_digit()) {
            format!("{name} {f} overflows 64 bits (at most {})", u64::MAX)
        } else {
            format!("{name} is not a whole number: {f:?}")
        }
    })
}

/// `f` as a non-negative decimal in units of `unit_ns`, in ns; the error
/// tells overflow from a malformed number.
pub fn decimal(name: &str, f: &str, unit_ns: u64) -> Result<u64, String> {
    decimal_to_ns(f, unit_ns).ok_or_else(|| {
        let digits = f.bytes().filter(|b| *b == b'.').count() <= 1
            && f.bytes().any(|b| b.is_ascii_digit())
            && f.bytes().all(|b| b.is_ascii_digit() || b == b'.');
        if digits {
            format!("{name} {f} overflows the 64-bit nanosecond clock")
        } else {
            format!("{name} is not a non-negative decimal number: {f:?}")
        }
    })
}

/// `count` units of `unit` bytes, refusing overflow.
fn times(name: &str, count: u64, unit: u64) -> Result<u64, String> {
    count.checked_mul(unit).ok_or_else(|| format!("{name} {count} x {unit} bytes overflows 64 bits"))
}

/// Fields separated by runs of spaces and tabs: `split_ascii_whitespace`
/// without its per-byte closure calls (the reader's hottest loop).
struct Words<'a> {
    line: &'a str,
    pos: usize,
}

impl<'a> Iterator for Words<'a> {
    type Item = &'a str;

    fn next(&mut self) -> Option<&'a str> {
        let bytes = self.line.as_bytes();
        let blank = |b: &u8| *b == b' ' || *b == b'\t';
        let start = self.pos + bytes[self.pos..].iter().position(|b| !blank(b))?;
        let end = start + bytes[start..].iter().position(blank).unwrap_or(bytes.len() - start);
        self.pos = end;
        // Both ends are at ASCII bytes or the line's end: char boundaries.
        Some(&self.line[start..end])
    }
}

fn words(line: &str) -> Words<'_> {
    Words { line, pos: 0 }
}

/// `str::trim`, skipped when the ends are not whitespace (the common case).
fn trim_fast(f: &str) -> &str {
    let b = f.as_bytes();
    match (b.first(), b.last()) {
        (Some(x), Some(y)) if !x.is_ascii_whitespace() && !y.is_ascii_whitespace() => f,
        _ => f.trim(),
    }
}

fn fields<'a, I: Iterator<Item = &'a str>>(iter: I, names: &'static [&'static str]) -> Fields<'a, I> {
    Fields { iter, index: 0, names }
}

/// Parses decimal digits into a u64 (no sign, no spaces), refusing overflow.
/// Faster than `str::parse` on the short fields of trace lines.
pub fn parse_u64(s: &str) -> Option<u64> {
    let b = s.as_bytes();
    if b.is_empty() || b.len() > 20 {
        return None;
    }
    let mut v: u64 = 0;
    for &c in b {
        let d = c.wrapping_sub(b'0');
        if d > 9 {
            return None;
        }
        v = v.checked_mul(10)?.checked_add(u64::from(d))?;
    }
    Some(v)
}

/// Parses a non-negative decimal (`12`, `0.551706`, `3.`) in units of
/// `unit_ns` nanoseconds, exactly (no floating point), truncating digits
/// finer than a nanosecond.
pub fn decimal_to_ns(s: &str, unit_ns: u64) -> Option<u64> {
    assert!(unit_ns > 0);
    let (int, frac) = s.split_once('.').unwrap_or((s, ""));
    if int.is_empty() && frac.is_empty() {
        return None;
    }
    let all_digits = |t: &str| t.bytes().all(|b| b.is_ascii_digit());
    if !all_digits(int) || !all_digits(frac) {
        return None;
    }
    let whole: u64 = if int.is_empty() { 0 } else { int.parse().ok()? };
    let mut ns = whole.checked_mul(unit_ns)?;
    let mut scale = unit_ns;
    for b in frac.bytes() {
        scale /= 10;
        if scale == 0 {
            break;
        }
        ns = ns.checked_add(u64::from(b - b'0') * scale)?;
    }
    Some(ns)
}

fn req(submit_ns: u64, stream: u64, device: u64, op: Op, offset_bytes: u64, length_bytes: u64) -> TraceReq {
    TraceReq {
        line: 0,
        submit_ns,
        complete_ns: None,
        stream,
        device,
        op,
        offset_bytes,
        length_bytes,
        fua: false,
    }
}

/// MSR Cambridge: `Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime`.
/// Timestamp and ResponseTime in 100 ns units (Windows filetime); offset and
/// size in bytes; Type `Read` or `Write`. Stream and device: DiskNumber.
pub fn parse_msr(line: &str) -> Parsed {
    if is_header(line, "timestamp") {
        return Ok(None);
    }
    let names = &["Timestamp", "Hostname", "DiskNumber", "Type", "Offset", "Size", "ResponseTime"];
    let mut f = fields(line.split(','), names);
    let ticks = f.num()?;
    let _host = f.next()?;
    let disk = f.num()?;
    let op = match f.next()? {
        t if t.eq_ignore_ascii_case("read") => Op::Read,
        t if t.eq_ignore_ascii_case("write") => Op::Write,
        t => return Err(format!("Type must be Read or Write, found {t:?}")),
    };
    let offset = f.num()?;
    let size = f.num()?;
    let response_ticks = f.num()?;
    f.finish()?;
    let submit_ns = ticks.checked_mul(100).ok_or("Timestamp overflows the 64-bit nanosecond clock")?;
    let mut r = req(submit_ns, disk, disk, op, offset, size);
    r.complete_ns = Some(submit_ns.saturating_add(response_ticks.saturating_mul(100)));
    Ok(Some(r))
}

/// FIU / SRCMap: `ts pid process lba size op major minor hash`; ts in ns,
/// lba and size in 512-byte sectors, op `R` or `W`. Stream: pid.
pub fn parse_fiu(line: &str) -> Parsed {
    let names = &["ts", "pid", "process", "lba", "size", "op", "major", "minor", "hash"];
    let mut f = fields(words(line), names);
    let ts = f.num()?;
    let pid = f.num()?;
    let _process = f.next()?;
    let lba = f.num()?;
    let sectors = f.num()?;
    let op = read_or_write("op", f.next()?)?;
    let major = f.num()?;
    let minor = f.num()?;
    let _hash = f.next()?;
    f.finish()?;
    let offset = times("lba", lba, SECTOR_BYTES)?;
    Ok(Some(req(ts, pid, device_key(major, minor), op, offset, times("size", sectors, SECTOR_BYTES)?)))
}

/// The device key of `major,minor`, as `--device 8,0` selects it.
pub fn device_key(major: u64, minor: u64) -> u64 {
    (major << 20) | (minor & 0xF_FFFF)
}

/// Parses a `--device` value: `N` or `MAJOR,MINOR` (or `MAJOR:MINOR`).
pub fn parse_device(s: &str) -> Option<u64> {
    match s.split_once([',', ':']) {
        Some((a, b)) => Some(device_key(a.trim().parse().ok()?, b.trim().parse().ok()?)),
        None => s.trim().parse().ok(),
    }
}

/// blkparse default output:
/// `  8,0    3        1     0.000000000   697  Q  WS 223490 + 8 [kjournald]`.
/// Only events of `action` become requests; other actions are skipped
/// (`Ok(None)`, counted). An event of `action` must be a request: its rwbs
/// made of the letters blktrace writes (`F W D E R N A S M B`), and, for a
/// read, write or discard, `SECTOR + COUNT` with COUNT above 0. A flush
/// (`F` without R, W or D) needs no range; an `N` event (an operation that
/// is neither) carries no request. Stream: pid.
pub fn parse_blkparse(line: &str, action: BlkAction) -> Parsed {
    let mut it = line.split_ascii_whitespace();
    let Some(dev) = it.next() else { return Ok(None) };
    let Some((major, minor)) = dev.split_once(',') else {
        return Err(format!("first field must be the device MAJOR,MINOR, found {dev:?}"));
    };
    let (Ok(major), Ok(minor)) = (major.parse::<u64>(), minor.parse::<u64>()) else {
        return Err(format!("device must be MAJOR,MINOR numbers, found {dev:?}"));
    };
    let names = &["cpu", "sequence", "time", "pid", "action", "rwbs"];
    let mut f = fields(it.by_ref(), names);
    let _cpu = f.next()?;
    let _seq = f.next()?;
    let time_ns = f.decimal_ns(1_000_000_000)?;
    let pid = f.num()?;
    if f.next()? != action.code() {
        return Ok(None);
    }
    let rwbs = f.next()?;
    if let Some(c) = rwbs.chars().find(|c| !"FWDERNASMB".contains(*c)) {
        return Err(format!("unknown rwbs {rwbs:?}: {c:?} is none of F W D E R N A S M B"));
    }
    let device = device_key(major, minor);
    let op = if rwbs.contains('D') {
        Op::Trim
    } else if rwbs.contains('W') {
        Op::Write
    } else if rwbs.contains('R') {
        Op::Read
    } else if rwbs.contains('F') {
        return Ok(Some(req(time_ns, pid, device, Op::Flush, 0, 0)));
    } else {
        return Ok(None);
    };
    let range = (it.next(), it.next(), it.next());
    let (Some(sector), Some("+"), Some(count)) = range else {
        let found: Vec<&str> = [range.0, range.1, range.2].into_iter().flatten().collect();
        return Err(format!("expected `SECTOR + COUNT` after rwbs {rwbs:?}, found {:?}", found.join(" ")));
    };
    let sector = whole("sector", sector)?;
    let count = whole("sector count", count)?;
    if count == 0 {
        if rwbs.contains('F') {
            return Ok(Some(req(time_ns, pid, device, Op::Flush, 0, 0)));
        }
        return Err(format!("zero-length {rwbs} request (sector count 0)"));
    }
    let offset = times("sector", sector, SECTOR_BYTES)?;
    let mut r = req(time_ns, pid, device, op, offset, times("sector count", count, SECTOR_BYTES)?);
    r.fua = rwbs.contains('F') && op == Op::Write;
    Ok(Some(r))
}

/// Whether a blkparse line belongs to the summary printed after the events
/// (`CPU0 (8,0):`, `Total (8,0):`, `Throughput ...`, `Events ...`).
pub fn is_blkparse_summary_start(line: &str) -> bool {
    let t = line.trim_start();
    t.starts_with("CPU") || t.starts_with("Total (") || t.starts_with("Throughput")
}

/// UMass SPC: `asu,lba,size,op,ts[,...]`; lba in 512-byte blocks, size in
/// bytes, op `r`/`R`/`w`/`W`, ts in seconds. Stream and device: ASU.
pub fn parse_spc(line: &str) -> Parsed {
    let names = &["asu", "lba", "size", "op", "ts"];
    let mut f = fields(line.split(','), names);
    let asu = f.num()?;
    let lba = f.num()?;
    let size = f.num()?;
    let op = read_or_write("op", f.next()?)?;
    let ts = f.decimal_ns(1_000_000_000)?;
    let offset = times("lba", lba, SECTOR_BYTES)?;
    Ok(Some(req(ts, asu, asu, op, offset, size)))
}

/// DiskSim ASCII: `arrival_ms devno blkno size flags`; blkno and size in
/// 512-byte blocks; flags bit 0 set = read. Stream and device: devno.
/// `time_unit_ns` and `size_unit_bytes` override the units for traces of
/// the same shape written in other units (`--time-unit`, `--size-unit`).
pub fn parse_disksim(line: &str, time_unit_ns: u64, size_unit_bytes: u64) -> Parsed {
    let names = &["arrival", "devno", "blkno", "size", "flags"];
    let mut f = fields(words(line), names);
    let ts = f.decimal_ns(time_unit_ns)?;
    let devno = f.num()?;
    let blkno = f.num()?;
    let size = f.num()?;
    let flags = f.num()?;
    f.finish()?;
    let op = if flags & 1 == 1 { Op::Read } else { Op::Write };
    let offset = times("blkno", blkno, size_unit_bytes)?;
    Ok(Some(req(ts, devno, devno, op, offset, times("size", size, size_unit_bytes)?)))
}

/// `R` or `W` (either case) as an op; the error names the field.
fn read_or_write(name: &str, t: &str) -> Result<Op, String> {
    match t {
        "R" | "r" => Ok(Op::Read),
        "W" | "w" => Ok(Op::Write),
        t => Err(format!("{name} must be R or W, found {t:?}")),
    }
}

/// Whether `line` starts with `word`, in any case (a CSV header).
fn is_header(line: &str, word: &str) -> bool {
    line.get(..word.len()).is_some_and(|h| h.eq_ignore_ascii_case(word))
}

/// SNIA SYSTOR '17 VDI traces: `Timestamp,Response,IOType,LUN,Offset,Size`.
/// Timestamp in Unix seconds with a fraction (nine digits, exact to the
/// microsecond), Response in seconds (gives the completion), IOType `R`,
/// `W` or blank (no response was seen: the op is unknown, so the line
/// carries no request), LUN, Offset and Size in bytes. Stream and device: LUN.
pub fn parse_systor(line: &str) -> Parsed {
    if is_header(line, "timestamp") {
        return Ok(None);
    }
    let names = &["Timestamp", "Response", "IOType", "LUN", "Offset", "Size"];
    let mut f = fields(line.split(','), names);
    let submit_ns = f.decimal_ns(1_000_000_000)?;
    let response_ns = f.decimal_ns(1_000_000_000)?;
    let op = match f.next()? {
        "R" | "r" => Op::Read,
        "W" | "w" => Op::Write,
        "" => return Ok(None),
        t => return Err(format!("IOType must be R, W or blank, found {t:?}")),
    };
    let lun = f.num()?;
    let offset = f.num()?;
    let size = f.num()?;
    f.finish()?;
    let mut r = req(submit_ns, lun, lun, op, offset, size);
    r.complete_ns = Some(submit_ns.saturating_add(response_ns));
    Ok(Some(r))
}

/// Tencent CBS traces: `Timestamp,Offset,Size,IOType,VolumeID`. Timestamp
/// in Unix seconds, Offset and Size in 512-byte sectors, IOType `0` read or
/// `1` write. Stream and device: VolumeID.
pub fn parse_tencent(line: &str) -> Parsed {
    if is_header(line, "timestamp") {
        return Ok(None);
    }
    let names = &["Timestamp", "Offset", "Size", "IOType", "VolumeID"];
    let mut f = fields(line.split(','), names);
    let ts = f.decimal_ns(1_000_000_000)?;
    let offset = f.num()?;
    let size = f.num()?;
    let op = match f.next()? {
        "0" => Op::Read,
        "1" => Op::Write,
        t => return Err(format!("IOType must be 0 (read) or 1 (write), found {t:?}")),
    };
    let volume = f.num()?;
    f.finish()?;
    let offset = times("Offset", offset, SECTOR_BYTES)?;
    Ok(Some(req(ts, volume, volume, op, offset, times("Size", size, SECTOR_BYTES)?)))
}

/// Alibaba block traces (`io_traces.csv`): `device_id,opcode,offset,length,timestamp`.
/// opcode `R` or `W`, offset and length in bytes, timestamp in
/// microseconds. Stream and device: device_id.
pub fn parse_alibaba(line: &str) -> Parsed {
    if is_header(line, "device_id") {
        return Ok(None);
    }
    let names = &["device_id", "opcode", "offset", "length", "timestamp"];
    let mut f = fields(line.split(','), names);
    let device = f.num()?;
    let op = read_or_write("opcode", f.next()?)?;
    let offset = f.num()?;
    let length = f.num()?;
    let ts = f.decimal_ns(1_000)?;
    f.finish()?;
    Ok(Some(req(ts, device, device, op, offset, length)))
}

/// The two record layouts of CloudPhysics VSCSI traces (little-endian, as
/// libCacheSim reads them): version 1, 32 bytes `sn:u32 len:u32 nSG:u32
/// cmd:u16 ver:u16 lbn:u64 ts:u64`; version 2, 40 bytes `cmd:u16 ver:u16
/// sn:u32 len:u32 nSG:u32 lbn:u64 ts:u64 rt:u64`. `ver >> 8` is the version.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum VscsiVersion {
    /// 32-byte records without response time.
    V1,
    /// 40-byte records with response time.
    V2,
}

impl VscsiVersion {
    /// Bytes per record.
    pub fn record_bytes(self) -> usize {
        match self {
            VscsiVersion::V1 => 32,
            VscsiVersion::V2 => 40,
        }
    }

    /// The version of a file whose first bytes are `head` (at least one
    /// record; two when the file has them): every record tested must agree,
    /// as libCacheSim tests its first two.
    pub fn detect(head: &[u8]) -> Option<VscsiVersion> {
        let ver_at = |at: usize| head.get(at..at + 2).map(|b| u16::from_le_bytes([b[0], b[1]]) >> 8);
        let agree = |version: VscsiVersion, field: usize, want: u16| {
            let n = (head.len() / version.record_bytes()).clamp(0, 2);
            n > 0 && (0..n).all(|i| ver_at(i * version.record_bytes() + field) == Some(want))
        };
        if agree(VscsiVersion::V2, 2, 2) {
            Some(VscsiVersion::V2)
        } else if agree(VscsiVersion::V1, 14, 1) {
            Some(VscsiVersion::V1)
        } else {
            None
        }
    }
}

/// One VSCSI record. `cmd` is the SCSI opcode: READ(6/10/12/16) and
/// XDREAD are reads; WRITE(6/10/12/16), WRITE LONG, WRITE AND VERIFY and
/// the XDWRITE family are writes; any other command (TEST UNIT READY,
/// INQUIRY, ...) carries no request. lbn in 512-byte sectors, len in bytes,
/// ts and rt (version 2: the response time) in microseconds. Stream and
/// device: 0 (a VSCSI trace is one virtual disk).
pub fn parse_vscsi(rec: &[u8], version: VscsiVersion) -> Parsed {
    let u16_at = |at: usize| u16::from_le_bytes([rec[at], rec[at + 1]]);
    let u32_at = |at: usize| u32::from_le_bytes(rec[at..at + 4].try_into().expect("4 bytes"));
    let u64_at = |at: usize| u64::from_le_bytes(rec[at..at + 8].try_into().expect("8 bytes"));
    let (cmd, ver, len, lbn, ts_us, rt_us) = match version {
        VscsiVersion::V1 => (u16_at(12), u16_at(14), u32_at(4), u64_at(16), u64_at(24), None),
        VscsiVersion::V2 => (u16_at(0), u16_at(2), u32_at(8), u64_at(16), u64_at(24), Some(u64_at(32))),
    };
    let want = if version == VscsiVersion::V1 { 1 } else { 2 };
    if ver >> 8 != want {
        return Err(format!("record version {} in a version {want} trace (ver field {ver:#06x})", ver >> 8));
    }
    let op = match cmd {
        0x08 | 0x28 | 0x88 | 0xa8 | 0x2d => Op::Read,
        0x0a | 0x2a | 0x8a | 0xaa | 0x3f | 0x2e | 0x8e | 0xae | 0x9a | 0x9c => Op::Write,
        _ => return Ok(None),
    };
    let submit_ns = ts_us.checked_mul(1_000).ok_or("ts overflows the 64-bit nanosecond clock")?;
    let mut r = req(submit_ns, 0, 0, op, times("lbn", lbn, SECTOR_BYTES)?, u64::from(len));
    r.complete_ns = rt_us.map(|rt| submit_ns.saturating_add(rt.saturating_mul(1_000)));
    Ok(Some(r))
}

/// layoutd's own format, one [`layoutd_core::TraceRecord`] per line:
/// `submit_ns complete_ns stream op offset_bytes length_bytes flags`,
/// parsed by the one parser of that format, [`TraceRecord::parse_line`].
/// Stream: the recorded stream; device 0.
pub fn parse_layoutd(line: &str) -> Parsed {
    let t = TraceRecord::parse_line(line)?;
    let (submit_ns, complete_ns) = (t.submit.as_ns(), t.complete.as_ns());
    if complete_ns < submit_ns {
        return Err(format!("complete_ns {complete_ns} is before submit_ns {submit_ns}"));
    }
    let mut r = req(submit_ns, u64::from(t.stream.0), 0, t.op, t.offset_bytes, u64::from(t.length_bytes));
    r.complete_ns = Some(complete_ns);
    r.fua = t.fua;
    Ok(Some(r))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimals_are_exact() {
        assert_eq!(decimal_to_ns("0.551706", 1_000_000_000), Some(551_706_000));
        assert_eq!(decimal_to_ns("12", 1_000_000), Some(12_000_000));
        assert_eq!(decimal_to_ns("1.0000000019", 1_000_000_000), Some(1_000_000_001));
        assert_eq!(decimal_to_ns("3.5", 1_000_000), Some(3_500_000));
        assert_eq!(decimal_to_ns("-1", 1), None);
        assert_eq!(decimal_to_ns(".", 1), None);
        assert_eq!(decimal_to_ns("1e3", 1), None);
        assert_eq!(parse_u64("18446744073709551615"), Some(u64::MAX));
        assert_eq!(parse_u64("18446744073709551616"), None);
        assert_eq!(parse_u64("+1"), None);
        // layoutd lines: through the core's parser, plus the reader's own
        // check that a request completes after it was submitted.
        for line in ["1 2 3 R 0 512 -", "5\t9 0 W 4096 8192 F ", "7 7 1 F 0 0 -", "1 2 3 Z 1 2 -"] {
            assert!(matches!(parse_layoutd(line), Ok(Some(_))), "{line}");
        }
        for line in ["1 2 3 RR 0 512 -", "5 2 3 R 0 512 -", "1 2 3 R 0 512 - x", "1 2 3 R 0x 512 -", "1 2"] {
            assert!(parse_layoutd(line).is_err(), "{line}");
        }
        assert_eq!(parse_u64(""), None);
    }

    #[test]
    fn devices_parse() {
        assert_eq!(parse_device("8,0"), Some(8 << 20));
        assert_eq!(parse_device("8:16"), Some((8 << 20) | 16));
        assert_eq!(parse_device("3"), Some(3));
        assert_eq!(parse_device("x"), None);
    }
}
