//! `layoutd opt status|plan|apply|drop`: the `opt` target's commands, thin
//! wrappers over its messages, online (a running `serve`) or offline; and
//! `layoutd opt place`, which chooses the OPT region's place from a
//! profile (a trace) before `format`.

use crate::cmd_volume::CommandFlags;
use anyhow::{anyhow, bail, Context, Result};
use clap::{Args, ValueEnum};
use layoutd_core::config::{parse_size_str, ArgReader, StackConfig};
use layoutd_core::Op;
use layoutd_sim::{ReadOptions, TraceFormat, TraceReader};
use layoutd_targets::opt;
use std::path::PathBuf;

/// What to do.
#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum Action {
    /// Show the map, the reconfiguration in progress, the newest plan and the counters.
    Status,
    /// Plan now from the profile; applied at once when the config's `auto_apply` is on.
    Plan,
    /// Apply the newest plan (planning first if there is none).
    Apply,
    /// Copy every dirty copy home and empty the region (safe before removing the layer).
    Drop,
    /// Before `format`: choose the region's place (`opt_offset`) from a trace of the volume's use.
    Place,
}

#[derive(Args)]
#[command(
    after_help = "Examples:\n  layoutd opt status --socket /run/user/0/layoutd/vol.img.sock   # online\n  layoutd opt plan --control vol.ctl\n  layoutd opt drop --device vol.img                             # offline: runs the job to the end, marks clean\n\nThe profile lives in memory while the volume is served, so `plan` learns from what the running server saw; offline it starts empty (a plan then keeps nothing). The messages are `status`, `plan`, `apply` and `drop` (docs/opt.md); `layoutd message` sends them as well.\n\n`place` works on a config, not a volume: the region's place is fixed at `format` (the volume is the device minus the region, 1:1), so it is chosen before, from a trace of the volume's use (e.g. `layoutd serve --record-trace` of the volume under a plain stack): the region starts at the weighted median of the trace's reads (one each), which minimises the expected seek between the region and a read left home. Prints the `opt_offset`; with --out writes the config with it set, for `layoutd format --config`:\n  layoutd opt place --config opt.toml --trace day1.trace --size 80G --out opt-placed.toml"
)]
pub struct OptArgs {
    /// status, plan, apply or drop.
    #[arg(value_enum)]
    action: Action,
    #[command(flatten)]
    to: CommandFlags,
    #[command(flatten)]
    place: PlaceArgs,
}

/// `place`'s flags.
#[derive(Args)]
struct PlaceArgs {
    /// place: the stack's config (its `opt` layer must be the bottom one, over the device).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// place: the profile, a trace of the volume's use (volume addresses).
    #[arg(long, value_name = "FILE")]
    trace: Option<PathBuf>,
    /// place: the trace's format (as `layoutd sim --format`).
    #[arg(long, default_value = "layoutd")]
    format: String,
    /// place: the device's size (e.g. 80G), as `format` will see it.
    #[arg(long, value_name = "SIZE")]
    size: Option<String>,
    /// place: only the trace's requests submitted before this many ms (the training period).
    #[arg(long, value_name = "MS")]
    until_ms: Option<u64>,
    /// place: write the config with `opt_offset` set here.
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
}

pub fn run(a: OptArgs) -> Result<()> {
    if a.action == Action::Place {
        return place(&a.place);
    }
    let target = a.to.target()?;
    target.require_layer("opt")?;
    let text = match a.action {
        Action::Status => "status",
        Action::Plan => "plan",
        Action::Apply => "apply",
        Action::Drop => "drop",
        Action::Place => unreachable!("handled above"),
    };
    println!("{}", target.send(text)?);
    Ok(())
}

/// `layoutd opt place`: the `opt_offset` the trace's reads give, printed,
/// and with `--out` the config with it set.
fn place(p: &PlaceArgs) -> Result<()> {
    let (Some(config), Some(trace), Some(size)) = (&p.config, &p.trace, &p.size) else {
        bail!("`opt place` needs --config FILE, --trace FILE and --size SIZE");
    };
    let lower_bytes = parse_size_str(size).map_err(|e| anyhow!("--size: {e}"))?;
    let text = std::fs::read_to_string(config).with_context(|| format!("{}", config.display()))?;
    let mut cfg = StackConfig::parse(&text, &config.display().to_string())?;
    let Some(layer) = cfg.layer.last_mut().filter(|l| l.target == "opt") else {
        bail!(
            "{}: the bottom layer is not `opt`: `opt place` needs the region's device size",
            config.display()
        );
    };
    let (_, geo) = opt::config::Args::parse(ArgReader::new("opt", &layer.args), lower_bytes)?;
    let format = TraceFormat::from_name(&p.format).map_err(anyhow::Error::msg)?;
    let mut reader = TraceReader::open(trace, format, ReadOptions::default(), u64::MAX)?;
    let until_ns = p.until_ms.map_or(u64::MAX, |ms| ms.saturating_mul(1_000_000));
    let mut reads = Vec::new();
    while let Some(r) = reader.next()? {
        if r.submit_ns < until_ns && r.op == Op::Read && r.offset_bytes < geo.volume_bytes {
            reads.push((r.offset_bytes, 1));
        }
    }
    let count = reads.len();
    let Some(offset) = opt::place::region_offset(&mut reads, geo.volume_bytes, opt::place::PLACE_ALIGN_BYTES)
    else {
        bail!("{}: no read to place the region by (before --until-ms?)", trace.display());
    };
    println!(
        "opt_offset = {offset}  # {:.2} GiB: the weighted median of {count} reads; configured {} ({:.2} GiB)",
        offset as f64 / (1u64 << 30) as f64,
        geo.opt_offset_bytes,
        geo.opt_offset_bytes as f64 / (1u64 << 30) as f64
    );
    if let Some(out) = &p.out {
        layer.args.insert("opt_offset".into(), toml::Value::Integer(i64::try_from(offset)?));
        std::fs::write(out, cfg.to_toml()).with_context(|| format!("{}", out.display()))?;
    }
    Ok(())
}
