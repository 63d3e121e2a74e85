//! Feeds a recorded layoutd trace through the *live* emulator
//! (`layoutd_runtime::emulate::HddEmulator`, the code `serve --emulate` runs)
//! without a server, to tell apart what the model does from what the live
//! path adds.
//!
//! ```text
//! emucheck TRACE [--closed-loop] [--extra-think-ns N] [--preset wd800]
//! ```
//!
//! Default: every request is issued at its recorded submit time (what the
//! live emulator saw). `--closed-loop`: issued at the previous request's
//! model completion plus the recorded think time (plus `--extra-think-ns`),
//! as `layoutd sim --closed-loop` does for one stream. Prints the replay's
//! end time, summed response time and reads answered in under 1 ms (the
//! drive's buffer), next to the same figures of the recording.

use layoutd_core::{Op, ReqId, Request, TraceRecord};
use layoutd_runtime::emulate::HddEmulator;
use layoutd_runtime::live::Delay;
use std::io::BufRead;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut path = None;
    let (mut closed, mut extra, mut preset) = (false, 0u64, "wd800".to_string());
    let mut i = 0;
    while i < args.len() {
        match args[i].as_str() {
            "--closed-loop" => closed = true,
            "--extra-think-ns" => {
                i += 1;
                extra = args[i].parse().expect("--extra-think-ns N");
            }
            "--preset" => {
                i += 1;
                preset = args[i].clone();
            }
            p => path = Some(p.to_string()),
        }
        i += 1;
    }
    let path = path.expect("usage: emucheck TRACE [--closed-loop] [--extra-think-ns N] [--preset P]");
    let emu = HddEmulator::new(layoutd_hdd::DiskParams::preset(&preset).expect("preset"), 1 << 20);
    let file = std::io::BufReader::new(std::fs::File::open(&path).expect("trace"));
    let (mut fast_live, mut fast_model, mut resp_live, mut resp_model) = (0u64, 0u64, 0u64, 0u64);
    let (mut first, mut end_live, mut end_model) = (None, 0u64, 0u64);
    // (recorded submit, recorded complete, model issue, model completion) of the previous request
    let mut prev: Option<(u64, u64, u64, u64)> = None;
    for (n, line) in file.lines().enumerate() {
        let line = line.expect("read");
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let rec = TraceRecord::parse_line(&line).unwrap_or_else(|e| {
            eprintln!("emucheck: {path}:{}: {e}", n + 1);
            std::process::exit(1)
        });
        let (s, c) = (rec.submit.as_ns(), rec.complete.as_ns());
        let req = Request::new(ReqId(n as u64), rec.op, rec.offset_bytes, rec.length_bytes);
        let issue = match prev {
            Some((ps, pc, pissue, pdone)) if closed => {
                if s >= pc {
                    pdone + (s - pc) + extra
                } else {
                    pissue + (s - ps) // overlapped its predecessor: keep the interval
                }
            }
            _ => s,
        };
        let done = emu.completion_ns(issue, &req);
        prev = Some((s, c, issue, done));
        first.get_or_insert(s);
        end_live = end_live.max(c);
        end_model = end_model.max(done);
        resp_live += c - s;
        resp_model += done - issue;
        if rec.op == Op::Read {
            fast_live += u64::from(c - s < 1_000_000);
            fast_model += u64::from(done - issue < 1_000_000);
        }
    }
    let t0 = first.unwrap_or(0);
    println!(
        "recorded: span {:.3} s, responses {:.3} s, reads under 1 ms {}",
        (end_live - t0) as f64 / 1e9,
        resp_live as f64 / 1e9,
        fast_live
    );
    println!(
        "emulator ({}): span {:.3} s, responses {:.3} s, reads under 1 ms {}",
        if closed { format!("closed loop, +{extra} ns think") } else { "at recorded times".into() },
        (end_model - t0) as f64 / 1e9,
        resp_model as f64 / 1e9,
        fast_model
    );
}
