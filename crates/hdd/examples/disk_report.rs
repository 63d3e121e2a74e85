//! Quick manual run: `cargo run --release -p layoutd-hdd --example disk_report -- show wd800`
//! or `... -- validate FILE.diskspecs FILE.trace [PLOT.svg]`.

use layoutd_hdd::{show_report, validate, write_cdf_svg, DiskParams};
use std::path::Path;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
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
            let params = DiskParams::from_diskspecs(Path::new(&args[1]))?;
            let report = validate(&params, Path::new(&args[2]))?;
            print!("{report}");
            println!("  mapped sectors {} of {}", params.mapped_sector_count(), params.sector_count);
            for percent in [5usize, 10, 25, 40, 50, 60, 75, 90, 95, 99] {
                let at = |v: &[f64]| v[(percent * v.len()).div_ceil(100) - 1];
                println!("  p{percent:<3} measured {:>7.3}  model {:>7.3}", at(&report.measured_sorted_ms), at(&report.model_sorted_ms));
            }
            if let Some(plot) = args.get(3) {
                write_cdf_svg(&report, Path::new(plot))?;
            }
        }
        _ => eprintln!("usage: disk_report show PRESET|FILE.diskspecs [--json] | validate FILE.diskspecs FILE.trace [PLOT.svg]"),
    }
    Ok(())
}
