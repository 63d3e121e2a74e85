//! `layoutd disk`: inspect the HDD model and validate it against real drives.

use anyhow::{bail, Context};
use layoutd_hdd::{show_report, validate, write_cdf_svg, DiskParams};
use std::path::PathBuf;

/// Inspect and validate the hard-disk model.
#[derive(Debug, clap::Subcommand)]
pub enum DiskCmd {
    /// Print a disk's parameters and the figures the model measures on it.
    ///
    /// The figures come from running the model, not from the parameters:
    /// random_read_4k_ms is the mean of 2000 uniformly random 4 KiB reads
    /// issued one at a time; full_stroke_seek_ms and track_to_track_seek_ms
    /// are the seek times charged moving from LBA 0 to the last LBA and to
    /// the next cylinder; outer_mb_s and inner_mb_s are back-to-back 128 KiB
    /// sequential reads at the start and end of the disk.
    #[command(after_help = "\
Presets: wd800 (WD800 Caviar SE, the replication paper's disk), st3160815as
(Seagate of the SSR-LFS slides), barracuda4g (Barracuda 4LP, the DCD paper's
disk), modern7200 (8 TB 7200 RPM). Each preset's sources are printed with it.

Examples:
  layoutd disk show wd800
  layoutd disk show modern7200 --json | jq .random_read_4k_ms
  layoutd disk show --parv shared/disk-validation/cheetah9LP.parv")]
    Show {
        /// Preset name (wd800, st3160815as, barracuda4g, modern7200).
        #[arg(value_name = "PRESET", conflicts_with = "diskspecs")]
        preset: Option<String>,
        /// Load the disk from a DiskSim .diskspecs file instead of a preset
        /// (its `Model = source X.model` and seek curve are read beside it),
        /// or from the .parv that sources it and puts it on its host bus.
        #[arg(long, visible_alias = "parv", value_name = "FILE")]
        diskspecs: Option<PathBuf>,
        /// Print JSON (keys include random_read_4k_ms, full_stroke_seek_ms,
        /// track_to_track_seek_ms, outer_mb_s, inner_mb_s, params).
        #[arg(long)]
        json: bool,
    },
    /// Replay a DiskSim validation trace and compare service times.
    ///
    /// The trace is replayed closed-loop, as it was measured: each request is
    /// issued the recorded gap after the previous one completes. The demerit
    /// figure is the root mean square of the horizontal distance between the
    /// measured and the model service-time CDFs at every 1% step (Ruemmler and
    /// Wilkes); DiskSim scores 0.09 to 0.38 ms on its own validation drives.
    #[command(after_help = "\
Trace lines: R|W Hit|Miss block_number block_count service_us next_gap_us
(512-byte blocks; service_us is what the real drive took).

Example:
  layoutd disk validate --parv shared/disk-validation/barracuda.parv \\
      --trace shared/disk-validation/barracuda.trace --plot barracuda-cdf.svg

Parameters the model does not reproduce are reported on stderr, one
`warning:` line each.")]
    Validate {
        /// The drive, as a DiskSim .parv (which sources the .diskspecs and
        /// defines the host bus the trace was measured through) or a bare
        /// .diskspecs (no host bus: a warning says so).
        #[arg(long, visible_alias = "parv", value_name = "FILE")]
        diskspecs: PathBuf,
        /// The validation trace measured on that drive.
        #[arg(long, value_name = "FILE")]
        trace: PathBuf,
        /// Print JSON (demerit_ms, measured_mean_ms, model_mean_ms, hit rates, ...).
        #[arg(long)]
        json: bool,
        /// Also draw the measured and model service-time CDFs to this SVG file.
        #[arg(long, value_name = "FILE")]
        plot: Option<PathBuf>,
    },
}

/// Run a `layoutd disk` subcommand.
pub fn run(cmd: DiskCmd) -> anyhow::Result<()> {
    match cmd {
        DiskCmd::Show { preset, diskspecs, json } => {
            let params = load(preset.as_deref(), diskspecs)?;
            let report = show_report(&params);
            if json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                print!("{report}");
            }
        }
        DiskCmd::Validate { diskspecs, trace, json, plot } => {
            let params = load(None, Some(diskspecs.clone()))?;
            let report = validate(&params, &trace)?;
            if let Some(path) = &plot {
                write_cdf_svg(&report, path)
                    .with_context(|| format!("writing the CDF plot {}", path.display()))?;
            }
            if json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                print!("{report}");
                if let Some(path) = &plot {
                    println!("  plot                   {}", path.display());
                }
            }
        }
    }
    Ok(())
}

/// The disk named by a preset or a `--diskspecs` file, its import warnings
/// printed ([`DiskParams::named`]).
pub fn load(preset: Option<&str>, diskspecs: Option<PathBuf>) -> anyhow::Result<DiskParams> {
    match DiskParams::named(preset, diskspecs.as_deref())? {
        Some(params) => Ok(params),
        None => {
            bail!("name a disk: a preset ({}) or --diskspecs FILE", DiskParams::preset_names().join(", "))
        }
    }
}
