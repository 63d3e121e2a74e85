//! Quick manual run: `cargo run --release -p layoutd-hdd --example disk_report -- show wd800`
//! or `... -- validate FILE.diskspecs FILE.trace [PLOT.svg] [--json]`,
//! or `... -- requests FILE.diskspecs FILE.trace` (every request, measured
//! beside model, then the median residual per request pair class),
//! or `... -- distribution FILE.parv FILE.trace DISKSIM.outv|DIST.txt` (DiskSim's
//! demerit of a distribution DiskSim printed, against the trace and this model).
//! `--early-read-as-parameter` (validate, requests, distribution): model
//! "Immediate buffer read" and "Read any free blocks" as the file sets them,
//! not as the DiskSim 4.0 release runs them
//! (`DiskParams::disksim_release_no_early_read`).

use layoutd_hdd::{
    demerit_disksim_ms, read_disksim_distribution, show_report, validate, write_cdf_svg, DiskParams,
    ReplayedRequest,
};
use std::collections::BTreeMap;
use std::path::Path;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let all: Vec<String> = std::env::args().skip(1).collect();
    let as_parameter = all.iter().any(|arg| arg == "--early-read-as-parameter");
    let args: Vec<String> = all.into_iter().filter(|arg| arg != "--early-read-as-parameter").collect();
    let load = |path: &str| -> Result<DiskParams, layoutd_hdd::HddError> {
        let mut params = DiskParams::from_diskspecs(Path::new(path))?;
        params.disksim_release_no_early_read = !as_parameter;
        Ok(params)
    };
    match args.first().map(String::as_str) {
        Some("show") => {
            let name = args.get(1).map(String::as_str).unwrap_or("wd800");
            let params = if name.ends_with(".diskspecs") || name.ends_with(".parv") {
                DiskParams::from_diskspecs(Path::new(name))?
            } else {
                DiskParams::preset(name)?
            };
            let report = show_report(&params);
            if args.iter().any(|arg| arg == "--json") {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                print!("{report}");
            }
        }
        Some("validate") if args.len() >= 3 => {
            let params = load(&args[1])?;
            let report = validate(&params, Path::new(&args[2]))?;
            if let Some(plot) = args.get(3).filter(|arg| *arg != "--json") {
                write_cdf_svg(&report, Path::new(plot))?;
            }
            if args.iter().any(|arg| arg == "--json") {
                // What `layoutd disk validate --json` prints.
                println!("{}", serde_json::to_string_pretty(&report)?);
                return Ok(());
            }
            print!("{report}");
            println!("  mapped sectors {} of {}", params.mapped_sector_count(), params.sector_count);
            for percent in [5usize, 10, 25, 40, 50, 60, 75, 90, 95, 99] {
                let at = |v: &[f64]| v[(percent * v.len()).div_ceil(100) - 1];
                println!("  p{percent:<3} measured {:>7.3}  model {:>7.3}", at(&report.measured_sorted_ms), at(&report.model_sorted_ms));
            }
        }
        Some("requests") if args.len() >= 3 => {
            let params = load(&args[1])?;
            let report = validate(&params, Path::new(&args[2]))?;
            println!("# index op lba sectors measured_ms model_ms model_hit seek_cyl");
            for (index, request) in report.requests.iter().enumerate() {
                println!(
                    "{index} {} {} {} {:.4} {:.4} {} {}",
                    if request.write { "W" } else { "R" },
                    request.lba,
                    request.sectors,
                    request.measured_ms,
                    request.model_ms,
                    u8::from(request.model_hit),
                    request.seek_distance_cyl
                );
            }
            print_pair_residuals(&report.requests, params.revolution_ns() as f64 / 1.0e6);
            print_access_diff(&report.requests);
        }
        Some("distribution") if args.len() >= 4 => {
            let params = load(&args[1])?;
            let report = validate(&params, Path::new(&args[2]))?;
            let disksim = read_disksim_distribution(Path::new(&args[3]))?;
            println!(
                "requests: trace {}, DiskSim's distribution {}",
                report.measured_sorted_ms.len(),
                disksim.len()
            );
            println!(
                "DiskSim's demerit, DiskSim's distribution vs the trace:  {:.4}",
                demerit_disksim_ms(&report.measured_sorted_ms, &disksim)
            );
            println!("DiskSim's demerit, this model vs the trace:             {:.4}", report.demerit_disksim_ms);
            println!(
                "DiskSim's demerit, this model vs DiskSim's distribution: {:.4}",
                demerit_disksim_ms(&disksim, &report.model_sorted_ms)
            );
        }
        _ => eprintln!(
            "usage: disk_report show PRESET|FILE.diskspecs [--json] | validate FILE.diskspecs FILE.trace [PLOT.svg] [--json] \
             | requests FILE.diskspecs FILE.trace | distribution FILE.parv FILE.trace DISKSIM.outv|DIST.txt \
             [--early-read-as-parameter]"
        ),
    }
    Ok(())
}

/// Measured minus model for every request, as DiskSim's validation output
/// prints it ("VALIDATE Trace access diff time"): mean, standard deviation
/// and counts in DiskSim's buckets. DiskSim's counts are matched when each
/// value is first truncated toward zero (so "< 1" holds -1 < x < 1), which
/// this does too: the line sets this model's residuals beside DiskSim's own,
/// request by request, in distribution.
fn print_access_diff(requests: &[ReplayedRequest]) {
    const BOUNDS: [f64; 9] = [-5.0, -1.0, 0.0, 1.0, 2.0, 5.0, 10.0, 11.0, 12.0];
    let mut counts = [0u32; BOUNDS.len() + 1];
    let (mut sum, mut squares) = (0.0, 0.0);
    for request in requests {
        let diff = request.measured_ms - request.model_ms;
        (sum, squares) = (sum + diff, squares + diff * diff);
        counts[BOUNDS.partition_point(|bound| *bound <= diff.trunc())] += 1;
    }
    let count = requests.len().max(1) as f64;
    let mean = sum / count;
    let deviation = (squares / count - mean * mean).max(0.0).sqrt();
    println!("# access diff (measured - model, ms): mean {mean:+.6} std.dev. {deviation:.6}");
    println!("# access diff counts  <-5 <-1 <0 <1 <2 <5 <10 <11 <12 12+: {counts:?}");
}

/// Per (previous op, op, kind) of media accesses (model misses), kind being
/// a seek, the same cylinder, or sequential to the previous request: the
/// median and mean of measured minus model over the requests within 0.7
/// revolution of each other, and how many the drive took about a
/// revolution longer (it just missed its sector and the model did not) or
/// shorter. With the platter's phase uniform, (longer - shorter) / count
/// revolutions is how much later the drive reached its first sector than
/// the model. The residuals say how long the steps after the media took,
/// relative to the previous request's.
fn print_pair_residuals(requests: &[ReplayedRequest], revolution_ms: f64) {
    #[derive(Default)]
    struct Class {
        residuals: Vec<f64>,
        drive_later: u32,
        model_later: u32,
    }
    let mut classes: BTreeMap<String, Class> = BTreeMap::new();
    for pair in requests.windows(2) {
        let (previous, request) = (&pair[0], &pair[1]);
        if request.model_hit {
            continue;
        }
        let op = |r: &ReplayedRequest| if r.write { 'W' } else { 'R' };
        let kind = if request.seek_distance_cyl > 0 {
            "seek"
        } else if previous.lba + u64::from(previous.sectors) == request.lba {
            "sequential"
        } else {
            "same cylinder"
        };
        let class = classes.entry(format!("{}->{} {kind}", op(previous), op(request))).or_default();
        let residual = request.measured_ms - request.model_ms;
        if residual > 0.7 * revolution_ms {
            class.drive_later += 1;
        } else if residual < -0.7 * revolution_ms {
            class.model_later += 1;
        } else {
            class.residuals.push(residual);
        }
    }
    println!("# pair kind: count, measured - model median and mean (ms), drive a revolution longer / shorter, implied lag (ms)");
    for (name, mut class) in classes {
        class.residuals.sort_by(f64::total_cmp);
        let count = class.residuals.len() as u32 + class.drive_later + class.model_later;
        let mean = class.residuals.iter().sum::<f64>() / class.residuals.len().max(1) as f64;
        let median = class.residuals.get(class.residuals.len() / 2).copied().unwrap_or(0.0);
        let lag =
            (f64::from(class.drive_later) - f64::from(class.model_later)) / f64::from(count) * revolution_ms;
        println!(
            "# {name:<20} {count:>5} {median:+.3} {mean:+.3} {:>4} {:>4} {lag:+.2}",
            class.drive_later, class.model_later
        );
    }
}
