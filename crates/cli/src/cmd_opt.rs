//! `layoutd opt status|plan|apply|drop`: the `opt` target's commands,
//! offline (the device must not be served; there is no live control
//! channel yet).

use crate::cmd_volume::{distinct, names};
use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use layoutd_core::TraceRecord;
use layoutd_runtime::volume;
use std::path::PathBuf;

/// What to do.
#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum Action {
    /// Show the map, the job in progress and the counters (read-only).
    Status,
    /// Plan now from the profile (and `--trace`); applied at once when the config's `auto_apply` is on.
    Plan,
    /// Apply the newest plan (planning first if there is none) and run it to the end.
    Apply,
    /// Copy every dirty copy home and empty the region (safe before removing the layer).
    Drop,
}

#[derive(Args)]
#[command(
    after_help = "Examples:\n  layoutd opt status --device vol.img\n  layoutd opt apply --device vol.img --trace day1.trace   # learn from a captured trace, reorganise\n  layoutd opt drop --device vol.img\n\nThe profile lives in memory while a volume is served, so offline `plan` and `apply` learn from the requests of `--trace` (a layoutd trace, as `layoutd trace` writes). `plan`, `apply` and `drop` run the reconfiguration to the end, flush, and mark the volume clean; `status` changes nothing."
)]
pub struct OptArgs {
    /// status, plan, apply or drop.
    #[arg(value_enum)]
    action: Action,
    /// The device (repeat, in order, for every member of a multi-device volume).
    #[arg(long, value_name = "PATH", required = true)]
    device: Vec<PathBuf>,
    /// A layoutd trace whose requests are profiled first (plan and apply).
    #[arg(long, value_name = "FILE")]
    trace: Option<PathBuf>,
}

pub fn run(a: OptArgs) -> Result<()> {
    distinct(&a.device)?;
    volume::check(&a.device)?;
    if a.action == Action::Status {
        if a.trace.is_some() {
            bail!("--trace goes with plan or apply, not status");
        }
        let (_, mut stack) = volume::inspect_stack(&a.device)?;
        let reply = stack
            .message(layoutd_core::Instant::ZERO, "status")
            .map_err(|e| anyhow::anyhow!("{}: no opt layer answered: {e}", names(&a.device)))?;
        println!("{reply}");
        for s in stack.layer_statuses().iter().filter(|s| s.target == "opt") {
            println!("  {s}");
        }
        return Ok(());
    }
    let mut messages = match &a.trace {
        None => Vec::new(),
        Some(p) => profile_messages(p)?,
    };
    let profiled = messages.len();
    messages.push(
        match a.action {
            Action::Plan => "plan",
            Action::Apply => "apply",
            Action::Drop => "drop",
            Action::Status => unreachable!("handled above"),
        }
        .to_string(),
    );
    eprintln!("layoutd: {} on {} ({profiled} profiled requests) ...", messages[profiled], names(&a.device));
    let (replies, statuses) = volume::offline_messages(&a.device, &messages)?;
    println!("{}", replies.last().map_or("", String::as_str));
    println!("done; stack now:");
    for s in statuses {
        println!("  {s}");
    }
    Ok(())
}

/// One `profile` message per read or write of the trace.
fn profile_messages(path: &PathBuf) -> Result<Vec<String>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let r = TraceRecord::parse_line(line)
            .map_err(|e| anyhow::anyhow!("{}:{}: {e}", path.display(), i + 1))?;
        if r.op.is_modify() || r.op == layoutd_core::Op::Read {
            out.push(format!(
                "profile {} {} {} {}",
                r.submit.as_ns(),
                r.stream.0,
                r.offset_bytes,
                r.length_bytes
            ));
        }
    }
    Ok(out)
}
