//! `layoutd sim` as the CLI parses and runs it: the command module the
//! binary uses (`layoutd_sim::command`), behind a minimal parser, for tests.

pub use layoutd_sim::command as cmd_sim;

use clap::Parser;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: cmd_sim::SimArgs,
}

/// Runs `layoutd sim ARGS`; the error as the binary would print it.
pub fn run(args: &[&str]) -> Result<(), String> {
    let cli =
        Cli::try_parse_from(std::iter::once("sim").chain(args.iter().copied())).map_err(|e| e.to_string())?;
    cmd_sim::run(cli.args).map_err(|e| format!("{e:#}"))
}
