//! Reader tests on small hand-written samples of every format, compressed
//! files, options, and malformed lines.

use layoutd_core::Op;
use layoutd_sim::trace::formats::parse_device;
use layoutd_sim::{BlkAction, Fit, ReadOptions, TraceFormat, TraceReader, TraceReq};
use std::path::{Path, PathBuf};

const VOLUME_BYTES: u64 = 1 << 40;

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data").join(name)
}

fn read_all(
    path: &Path,
    format: TraceFormat,
    opts: ReadOptions,
    volume: u64,
) -> Result<Vec<TraceReq>, String> {
    let mut r = TraceReader::open(path, format, opts, volume).map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    while let Some(req) = r.next().map_err(|e| e.to_string())? {
        out.push(req);
    }
    Ok(out)
}

fn read(name: &str, format: TraceFormat) -> Vec<TraceReq> {
    read_all(&data(name), format, ReadOptions::default(), VOLUME_BYTES).expect("sample reads")
}

fn summary(v: &[TraceReq]) -> Vec<(u64, u64, Op, u64, u64)> {
    v.iter().map(|r| (r.submit_ns, r.stream, r.op, r.offset_bytes, r.length_bytes)).collect()
}

/// Writes `text` to a temp file and reads it, returning the error.
fn read_err(text: &str, format: TraceFormat) -> String {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.trace");
    std::fs::write(&path, text).unwrap();
    read_all(&path, format, ReadOptions::default(), VOLUME_BYTES).expect_err("malformed line is refused")
}

#[test]
fn msr_csv() {
    let v = read("sample.msr.csv", TraceFormat::Msr);
    assert_eq!(v.len(), 4);
    assert_eq!(v[0].submit_ns, 128166372003061629 * 100);
    assert_eq!(v[0].complete_ns, Some(128166372003061629 * 100 + 266300));
    assert_eq!((v[0].op, v[0].offset_bytes, v[0].length_bytes, v[0].device), (Op::Read, 3551498240, 4096, 1));
    assert_eq!(v[1].op, Op::Write);
    let disk0 = ReadOptions { device: Some(0), ..Default::default() };
    let only = read_all(&data("sample.msr.csv"), TraceFormat::Msr, disk0, VOLUME_BYTES).unwrap();
    assert_eq!(only.len(), 1);
    assert_eq!(only[0].line, 3);
    let e = read_err("128166372003061629,hm,1,Erase,0,512,1\n", TraceFormat::Msr);
    assert!(
        e.ends_with("bad.trace:1: Type must be Read or Write, found \"Erase\" (reading as --format msr)"),
        "{e}"
    );
}

#[test]
fn fiu_and_gzip() {
    let plain = read("sample.fiu.txt", TraceFormat::Fiu);
    let gz = read("sample.fiu.txt.gz", TraceFormat::Fiu);
    assert_eq!(plain, gz, "gzip is read transparently, by magic bytes");
    assert_eq!(
        summary(&plain),
        vec![
            (89967404265337, 4867, Op::Write, 5891736 * 512, 4096),
            (89967404299001, 4867, Op::Write, 5891744 * 512, 4096),
            (89967405000000, 1201, Op::Read, 1024 * 512, 8192),
            (89967406000000, 4867, Op::Read, 5891752 * 512, 4096),
        ]
    );
    let sda = ReadOptions { device: parse_device("8,0"), ..Default::default() };
    assert_eq!(read_all(&data("sample.fiu.txt"), TraceFormat::Fiu, sda, VOLUME_BYTES).unwrap().len(), 1);
    let e = read_err("1 2 proc 3 8 W 6 0\n", TraceFormat::Fiu);
    assert!(e.contains("bad.trace:1: expected 9 fields"), "{e}");
    let e = read_err("# comment\n1 2 proc x 8 W 6 0 h\n", TraceFormat::Fiu);
    assert!(e.contains("bad.trace:2: lba is not a whole number: \"x\""), "{e}");
}

#[test]
fn blkparse_text() {
    let d = read("sample.blkparse.txt", TraceFormat::Blkparse);
    assert_eq!(
        summary(&d),
        vec![
            (5000, 697, Op::Write, 223490 * 512, 4096),
            (104000, 1200, Op::Read, 1000 * 512, 8192),
            (204000, 1200, Op::Flush, 0, 0),
            (304000, 1200, Op::Trim, 4096 * 512, 4096),
        ]
    );
    let q = ReadOptions { blkparse_action: BlkAction::Q, ..Default::default() };
    let q = read_all(&data("sample.blkparse.txt"), TraceFormat::Blkparse, q, VOLUME_BYTES).unwrap();
    assert_eq!(summary(&q), vec![(300, 697, Op::Write, 223490 * 512, 4096)]);
    let e = read_err("  8,0 3 1 0.5 697 D W 100 - 8 [x]\n", TraceFormat::Blkparse);
    assert!(e.contains("bad.trace:1: expected `SECTOR + COUNT`"), "{e}");
    let e = read_err("  8,0 3 1 zero 697 D W 100 + 8 [x]\n", TraceFormat::Blkparse);
    assert!(e.contains("bad.trace:1: time is not a non-negative decimal"), "{e}");
}

#[test]
fn spc_and_zstd() {
    let plain = read("sample.spc.csv", TraceFormat::Spc);
    let zst = read("sample.spc.csv.zst", TraceFormat::Spc);
    assert_eq!(plain, zst, "zstd is read transparently, by magic bytes");
    assert_eq!(plain.len(), 4);
    assert_eq!(
        (plain[0].submit_ns, plain[0].offset_bytes, plain[0].length_bytes),
        (551_706_000, 20941264 * 512, 8192)
    );
    assert_eq!((plain[2].stream, plain[2].op), (1, Op::Read));
    let asu1 = ReadOptions { device: Some(1), ..Default::default() };
    assert_eq!(read_all(&data("sample.spc.csv"), TraceFormat::Spc, asu1, VOLUME_BYTES).unwrap().len(), 1);
    let e = read_err("0,1,512,X,0.5\n", TraceFormat::Spc);
    assert!(e.contains("bad.trace:1: op must be R or W"), "{e}");
}

#[test]
fn disksim_ascii() {
    let v = read("sample.disksim.txt", TraceFormat::Disksim);
    assert_eq!(
        summary(&v),
        vec![
            (0, 0, Op::Read, 1000 * 512, 4096),
            (1_500_000, 0, Op::Write, 2000 * 512, 8192),
            (2_250_000, 1, Op::Read, 3000 * 512, 4096)
        ]
    );
    let e = read_err("0.0 0 1000 8 1 9\n", TraceFormat::Disksim);
    assert!(e.contains("bad.trace:1: expected 5 fields"), "{e}");
}

#[test]
fn layoutd_records() {
    let v = read("sample.layoutd.txt", TraceFormat::Layoutd);
    assert_eq!(v.len(), 4);
    assert_eq!((v[1].complete_ns, v[1].fua, v[1].stream, v[1].line), (Some(9000), true, 1, 3));
    assert_eq!(v[2].op, Op::Flush);
    let e = read_err("1 2 3 X 0 512 -\n", TraceFormat::Layoutd);
    assert!(e.contains("bad.trace:1: unknown op \"X\""), "{e}");
    let e = read_err("5 2 3 R 0 512 -\n", TraceFormat::Layoutd);
    assert!(e.contains("before submit_ns"), "{e}");
}

#[test]
fn window_and_fitting() {
    let path = data("sample.disksim.txt");
    let window = ReadOptions { from_ns: Some(1_000_000), to_ns: Some(2_000_000), ..Default::default() };
    let w = read_all(&path, TraceFormat::Disksim, window, VOLUME_BYTES).unwrap();
    assert_eq!(w.len(), 1);
    assert_eq!(w[0].submit_ns, 1_500_000);
    let small = 1 << 20; // 1 MiB volume: every sample address is past it
    let e = read_all(&path, TraceFormat::Disksim, ReadOptions::default(), small).unwrap_err();
    assert!(e.contains("sample.disksim.txt:3: request at byte 1536000 (+4096) runs past the end"), "{e}");
    let modulo = ReadOptions { fit: Fit::Modulo, ..Default::default() };
    let m = read_all(&path, TraceFormat::Disksim, modulo, small).unwrap();
    assert_eq!(m[2].offset_bytes, (3000 * 512) % small);
    let scale = ReadOptions { fit: Fit::Scale, ..Default::default() };
    let s = read_all(&path, TraceFormat::Disksim, scale, small).unwrap();
    let span = 3000 * 512 + 4096;
    assert_eq!(s[0].offset_bytes, (1000 * 512 * small / span) / 512 * 512);
    assert!(s.iter().all(|r| r.offset_bytes + r.length_bytes <= small));
    assert!(s[0].offset_bytes < s[1].offset_bytes && s[1].offset_bytes < s[2].offset_bytes, "order kept");
}

#[test]
fn unknown_format_and_missing_file() {
    assert!(TraceFormat::from_name("csv").unwrap_err().contains(
        "valid formats: msr, fiu, blkparse, spc, disksim, layoutd, systor, tencent, alibaba, vscsi"
    ));
    let e = read_all(Path::new("/nonexistent/t.csv"), TraceFormat::Msr, ReadOptions::default(), VOLUME_BYTES)
        .unwrap_err();
    assert!(e.starts_with("/nonexistent/t.csv: cannot open"), "{e}");
}

/// Reads `text` as `format` with `opts`.
fn read_text(text: &str, format: TraceFormat, opts: ReadOptions) -> Result<Vec<TraceReq>, String> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.trace");
    std::fs::write(&path, text).unwrap();
    read_all(&path, format, opts, VOLUME_BYTES)
}

#[test]
fn timestamps_the_simulator_cannot_hold_are_refused_with_file_and_line() {
    // 18446744073709.551 ms is 2^64 ns less a little: it parses, but the
    // clock would wrap once service time is added.
    let e = read_err("0 0 100 8 1\n18446744073709.551 0 200 8 0\n", TraceFormat::Disksim);
    assert!(e.contains("bad.trace:2: timestamp is 18446744074 s after the trace's first request"), "{e}");
    // A time that does not fit 64 bits at all is an overflow, not "not a number".
    let e = read_err("0 0 100 8 1\n18446744073709551.616 0 200 8 0\n", TraceFormat::Disksim);
    assert!(e.contains("bad.trace:2: arrival 18446744073709551.616 overflows"), "{e}");
    // A completion too far after its submission (MSR ResponseTime).
    let e = read_err("100,h,0,Read,0,512,18446744073709551615\n", TraceFormat::Msr);
    assert!(e.contains("bad.trace:1: completion is"), "{e}");
    // Thirty years is still fine.
    let ok = read_text("0 0 100 8 1\n946080000000 0 200 8 0\n", TraceFormat::Disksim, ReadOptions::default());
    assert_eq!(ok.unwrap().len(), 2);
}

#[test]
fn blkparse_malformed_request_lines_are_errors() {
    let bad = [
        (
            "  8,0 1 1 1444645666.0 9 D R 1444645666 +\n",
            "expected `SECTOR + COUNT` after rwbs \"R\", found \"1444645666 +\"",
        ),
        ("  8,0 1 1 0.5 9 D R\n", "expected `SECTOR + COUNT` after rwbs \"R\", found \"\""),
        ("  8,0 1 1 0.5 9 D W 100 + 0 [x]\n", "zero-length W request"),
        ("  8,0 1 1 0.5 9 D XR 100 + 8 [x]\n", "unknown rwbs \"XR\""),
        (
            "  8,0 1 1 0.5 9 D R 99999999999999999999 + 8 [x]\n",
            "sector 99999999999999999999 overflows 64 bits",
        ),
        (
            "  8,0 1 1 0.5 9 D R 100 + 18446744073709551615 [x]\n",
            "sector count 18446744073709551615 x 512 bytes overflows",
        ),
        ("  8,0 1 1 0.5 9 D R 100 + 36028797018963967 [x]\n", "ends past 2^64 bytes (overflow)"),
        ("  8,0 1 1 0.5 99999999999999999999 D R 1 + 8 [x]\n", "pid 99999999999999999999 overflows 64 bits"),
    ];
    for (line, want) in bad {
        let e = read_err(line, TraceFormat::Blkparse);
        assert!(e.contains("bad.trace:1: ") && e.contains(want), "{line:?}: {e}");
    }
    // Still fine: other actions, flushes without a range, N events (no request).
    let ok = "  8,0 1 1 0.1 9 Q R 100 + 8 [x]\n  8,0 1 2 0.2 9 D FN [x]\n  8,0 1 3 0.3 9 D N 0 (12 34) [x]\n";
    let v = read_text(ok, TraceFormat::Blkparse, ReadOptions::default()).unwrap();
    assert_eq!(summary(&v), vec![(200_000_000, 9, Op::Flush, 0, 0)]);
}

#[test]
fn a_huge_length_is_an_error_not_a_small_request() {
    // 2^64 - 512 bytes at byte 4096: the end overflows; it used to wrap to 512 bytes.
    let e = read_err("0,8,18446744073709551104,r,0.5\n", TraceFormat::Spc);
    assert!(
        e.contains("bad.trace:1: request at byte 4096 of 18446744073709551104 bytes ends past 2^64"),
        "{e}"
    );
    // A length that fits is cut to 32 MiB and counted, as documented.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big.csv");
    std::fs::write(&path, "0,8,1099511627776,r,0.5\n").unwrap();
    let mut r = TraceReader::open(&path, TraceFormat::Spc, ReadOptions::default(), VOLUME_BYTES).unwrap();
    assert_eq!(r.next().unwrap().unwrap().length_bytes, 32 << 20);
    assert_eq!(r.counts().oversized_count, 1);
}

#[test]
fn a_device_that_matches_nothing_is_an_error_naming_the_devices() {
    let d9 = ReadOptions { device: parse_device("9,0"), ..Default::default() };
    let e = read_all(&data("sample.blkparse.txt"), TraceFormat::Blkparse, d9, VOLUME_BYTES).unwrap_err();
    assert!(
        e.ends_with(
            "sample.blkparse.txt: --device (--volume) 9,0 matches none of the 4 requests; the trace's devices are 8,0"
        ),
        "{e}"
    );
    let d7 = ReadOptions { device: Some(7), ..Default::default() };
    let e = read_all(&data("sample.msr.csv"), TraceFormat::Msr, d7, VOLUME_BYTES).unwrap_err();
    assert!(
        e.contains("--device (--volume) 7 matches none of the 4 requests; the trace's devices are 1 0"),
        "{e}"
    );
}

#[test]
fn msr_header_is_skipped_in_any_case() {
    let text = "timestamp,hostname,disknumber,type,offset,size,responsetime\n128166372003061629,hm,1,read,0,4096,10\n";
    let v = read_text(text, TraceFormat::Msr, ReadOptions::default()).unwrap();
    assert_eq!(v.len(), 1);
    assert_eq!(v[0].line, 2);
}

#[test]
fn systor_vdi_csv() {
    let v = read("sample.systor.csv", TraceFormat::Systor);
    // Header skipped; a blank IOType (no response seen) carries no request.
    assert_eq!(
        summary(&v),
        vec![
            (1456135200013118000, 4, Op::Read, 899056122368, 131072),
            (1456135200013519000, 4, Op::Write, 1048576, 4096),
            (1456135201500000000, 2, Op::Read, 8192, 8192),
        ]
    );
    assert_eq!(v[0].complete_ns, Some(1456135200013118000 + 806_000));
    assert_eq!((v[0].device, v[2].line), (4, 5));
    let lun2 = ReadOptions { device: Some(2), ..Default::default() };
    assert_eq!(
        read_all(&data("sample.systor.csv"), TraceFormat::Systor, lun2, VOLUME_BYTES).unwrap().len(),
        1
    );
    let e = read_err("1.5,0.1,X,0,0,4096\n", TraceFormat::Systor);
    assert!(
        e.contains("bad.trace:1: IOType must be R, W or blank, found \"X\" (reading as --format systor)"),
        "{e}"
    );
    let e = read_err("1.5,0.1,R,0,0\n", TraceFormat::Systor);
    assert!(e.contains("bad.trace:1: expected 6 fields"), "{e}");
    let e = read_err("1.5,-0.1,R,0,0,512\n", TraceFormat::Systor);
    assert!(e.contains("bad.trace:1: Response is not a non-negative decimal"), "{e}");
}

#[test]
fn tencent_cbs_csv() {
    let v = read("sample.tencent.csv", TraceFormat::Tencent);
    assert_eq!(
        summary(&v),
        vec![
            (1538323199 * 1_000_000_000, 1283, Op::Write, 1007912 * 512, 4096),
            (1538323199 * 1_000_000_000, 1283, Op::Read, 58592 * 512, 8192),
            (1538323200 * 1_000_000_000, 21, Op::Read, 2048 * 512, 4096),
            (1538323201 * 1_000_000_000, 1283, Op::Write, 1007920 * 512, 4096),
        ]
    );
    let vol = ReadOptions { device: parse_device("1283"), ..Default::default() };
    let only = read_all(&data("sample.tencent.csv"), TraceFormat::Tencent, vol, VOLUME_BYTES).unwrap();
    assert_eq!(only.iter().map(|r| r.line).collect::<Vec<_>>(), vec![1, 2, 4]);
    let e = read_err("1538323199,0,8,2,1\n", TraceFormat::Tencent);
    assert!(e.contains("bad.trace:1: IOType must be 0 (read) or 1 (write), found \"2\""), "{e}");
    let e = read_err("1538323199,0,8,0,1,9\n", TraceFormat::Tencent);
    assert!(e.contains("bad.trace:1: expected 5 fields"), "{e}");
    let e = read_err("1538323199,0,0,0,1\n", TraceFormat::Tencent);
    assert!(e.contains("bad.trace:1: zero-length request"), "{e}");
}

#[test]
fn alibaba_block_csv() {
    let v = read("sample.alibaba.csv", TraceFormat::Alibaba);
    assert_eq!(
        summary(&v),
        vec![
            (1577808000000626000, 0, Op::Read, 126703644672, 4096),
            (1577808000001626000, 0, Op::Write, 126703648768, 8192),
            (1577808000002000000, 3, Op::Write, 4096, 512),
            (1577808001000000000, 0, Op::Read, 0, 65536),
        ]
    );
    let e = read_err("0,D,0,4096,1\n", TraceFormat::Alibaba);
    assert!(
        e.contains("bad.trace:1: opcode must be R or W, found \"D\" (reading as --format alibaba)"),
        "{e}"
    );
    let e = read_err("x,R,0,4096,1\n", TraceFormat::Alibaba);
    assert!(e.contains("bad.trace:1: device_id is not a whole number: \"x\""), "{e}");
}

/// A VSCSI record laid out by hand from the format's structs (little-endian).
fn vscsi_record(version: u8, cmd: u16, len: u32, lbn: u64, ts_us: u64, rt_us: u64) -> Vec<u8> {
    let ver = u16::from(version) << 8;
    let mut r = Vec::new();
    if version == 1 {
        r.extend(7u32.to_le_bytes()); // sn
        r.extend(len.to_le_bytes());
        r.extend(1u32.to_le_bytes()); // nSG
        r.extend(cmd.to_le_bytes());
        r.extend(ver.to_le_bytes());
        r.extend(lbn.to_le_bytes());
        r.extend(ts_us.to_le_bytes());
        assert_eq!(r.len(), 32);
    } else {
        r.extend(cmd.to_le_bytes());
        r.extend(ver.to_le_bytes());
        r.extend(7u32.to_le_bytes()); // sn
        r.extend(len.to_le_bytes());
        r.extend(1u32.to_le_bytes()); // nSG
        r.extend(lbn.to_le_bytes());
        r.extend(ts_us.to_le_bytes());
        r.extend(rt_us.to_le_bytes());
        assert_eq!(r.len(), 40);
    }
    r
}

fn read_bytes(bytes: &[u8], format: TraceFormat) -> Result<Vec<TraceReq>, String> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.trace");
    std::fs::write(&path, bytes).unwrap();
    read_all(&path, format, ReadOptions::default(), VOLUME_BYTES)
}

#[test]
fn vscsi_binary_both_versions() {
    for version in [1u8, 2] {
        let mut file = Vec::new();
        file.extend(vscsi_record(version, 0x28, 4096, 1000, 5_000_000, 250)); // READ(10)
        file.extend(vscsi_record(version, 0x00, 0, 0, 5_000_100, 0)); // TEST UNIT READY: no request
        file.extend(vscsi_record(version, 0x2a, 8192, 2000, 5_001_000, 900)); // WRITE(10)
        file.extend(vscsi_record(version, 0x88, 512, 1 << 30, 6_000_000, 100)); // READ(16)
        let v = read_bytes(&file, TraceFormat::Vscsi).unwrap();
        assert_eq!(
            summary(&v),
            vec![
                (5_000_000_000, 0, Op::Read, 1000 * 512, 4096),
                (5_001_000_000, 0, Op::Write, 2000 * 512, 8192),
                (6_000_000_000, 0, Op::Read, (1 << 30) * 512, 512),
            ],
            "version {version}"
        );
        assert_eq!(v[1].line, 3, "records are counted as lines");
        let complete = if version == 2 { Some(5_000_000_000 + 250_000) } else { None };
        assert_eq!(v[0].complete_ns, complete);
        // A truncated last record is an error naming it.
        let e = read_bytes(&file[..file.len() - 5], TraceFormat::Vscsi).unwrap_err();
        assert!(e.contains("bad.trace:4: truncated record"), "{e}");
    }
    // A record of the other version inside a file is refused.
    let mut mixed = vscsi_record(2, 0x28, 4096, 1, 1, 1);
    mixed.extend(vscsi_record(2, 0x28, 4096, 1, 2, 1));
    let mut third = vscsi_record(2, 0x28, 4096, 1, 3, 1);
    third[3] = 3;
    mixed.extend(third);
    let e = read_bytes(&mixed, TraceFormat::Vscsi).unwrap_err();
    assert!(e.contains("bad.trace:3: record version 3 in a version 2 trace"), "{e}");
    // Text is not a VSCSI trace.
    let e = read_bytes(b"0 0 100 8 1\n1 0 200 8 0\n", TraceFormat::Vscsi).unwrap_err();
    assert!(e.contains("not a VSCSI trace"), "{e}");
}

#[test]
fn bzip2_and_xz_are_read_transparently() {
    use std::io::Write as _;
    let text = std::fs::read(data("sample.fiu.txt")).unwrap();
    let plain = read("sample.fiu.txt", TraceFormat::Fiu);
    let mut bz = bzip2::write::BzEncoder::new(Vec::new(), bzip2::Compression::best());
    bz.write_all(&text).unwrap();
    let mut xz = liblzma::write::XzEncoder::new(Vec::new(), 6);
    xz.write_all(&text).unwrap();
    for (name, bytes) in [("bzip2", bz.finish().unwrap()), ("xz", xz.finish().unwrap())] {
        assert_eq!(read_bytes(&bytes, TraceFormat::Fiu).unwrap(), plain, "{name}");
    }
}

#[test]
fn disksim_shaped_traces_in_other_units() {
    // MQSim writes DiskSim-shaped traces in ns; some tools write bytes.
    let text = "4851300 1 524288 16 0\n4864300 1 524304 16 1\n";
    let units = |t, s| ReadOptions {
        time_unit: Some(layoutd_sim::trace::TimeUnit::from_name(t).unwrap()),
        size_unit: Some(layoutd_sim::trace::SizeUnit::from_name(s).unwrap()),
        ..Default::default()
    };
    let ns = read_text(text, TraceFormat::Disksim, units("ns", "sectors")).unwrap();
    assert_eq!(
        summary(&ns),
        vec![(4851300, 1, Op::Write, 524288 * 512, 8192), (4864300, 1, Op::Read, 524304 * 512, 8192)]
    );
    let bytes = read_text("1.5 0 4096 1024 1\n", TraceFormat::Disksim, units("us", "bytes")).unwrap();
    assert_eq!(summary(&bytes), vec![(1500, 0, Op::Read, 4096, 1024)]);
    let s = read_text("2 0 1 1 1\n", TraceFormat::Disksim, units("s", "sectors")).unwrap();
    assert_eq!(s[0].submit_ns, 2_000_000_000);
    assert!(layoutd_sim::trace::TimeUnit::from_name("min").unwrap_err().contains("ns, us, ms or s"));
    assert!(layoutd_sim::trace::SizeUnit::from_name("kb").unwrap_err().contains("sectors or bytes"));
}

#[test]
fn fit_compact_keeps_distances_within_chunks_and_order() {
    const MIB: u64 = 1 << 20;
    // Three regions far apart on a 1 TiB address space: a sequential run
    // over a chunk boundary, a short seek, and a far one.
    let text = format!(
        "0,W,{a},4096,1\n0,W,{b},8192,2\n0,R,{c},4096,3\n0,R,{d},4096,4\n0,W,{e},4096,5\n",
        a = 500 * MIB - 4096,
        b = 500 * MIB,
        c = 500 * MIB + 65536,
        d = 900_000 * MIB + 12288,
        e = 3 * MIB + 512,
    );
    let volume = 16 * MIB;
    let compact = ReadOptions { fit: Fit::Compact, ..Default::default() };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("far.csv");
    std::fs::write(&path, text).unwrap();
    let v = read_all(&path, TraceFormat::Alibaba, compact, volume).unwrap();
    let offsets: Vec<u64> = v.iter().map(|r| r.offset_bytes).collect();
    // Touched chunks in order: 3, 499, 500, 900000 -> ranks 0, 1, 2, 3.
    assert_eq!(offsets, vec![2 * MIB - 4096, 2 * MIB, 2 * MIB + 65536, 3 * MIB + 12288, 512]);
    // The sequential run stays sequential, the short seek keeps its length.
    assert_eq!(offsets[0] + 4096, offsets[1]);
    assert_eq!(offsets[2] - offsets[1], 65536);
    // Too many touched chunks for the volume: an error, not a fold.
    let tiny = ReadOptions { fit: Fit::Compact, ..Default::default() };
    let e = read_all(&path, TraceFormat::Alibaba, tiny, 3 * MIB).unwrap_err();
    assert!(e.contains("--fit compact: the trace touches 4 chunks of 1 MiB"), "{e}");
}
