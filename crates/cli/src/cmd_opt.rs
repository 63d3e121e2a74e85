//! `layoutd opt status|plan|apply|drop`: the `opt` target's commands, thin
//! wrappers over its messages, online (a running `serve`) or offline.

use crate::cmd_volume::CommandFlags;
use anyhow::Result;
use clap::{Args, ValueEnum};

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
}

#[derive(Args)]
#[command(
    after_help = "Examples:\n  layoutd opt status --socket /run/user/0/layoutd/vol.img.sock   # online\n  layoutd opt plan --control vol.ctl\n  layoutd opt drop --device vol.img                             # offline: runs the job to the end, marks clean\n\nThe profile lives in memory while the volume is served, so `plan` learns from what the running server saw; offline it starts empty (a plan then keeps nothing). The messages are `status`, `plan`, `apply` and `drop` (docs/opt.md); `layoutd message` sends them as well."
)]
pub struct OptArgs {
    /// status, plan, apply or drop.
    #[arg(value_enum)]
    action: Action,
    #[command(flatten)]
    to: CommandFlags,
}

pub fn run(a: OptArgs) -> Result<()> {
    let target = a.to.target()?;
    target.require_layer("opt")?;
    let text = match a.action {
        Action::Status => "status",
        Action::Plan => "plan",
        Action::Apply => "apply",
        Action::Drop => "drop",
    };
    println!("{}", target.send(text)?);
    Ok(())
}
