//! `layoutd sim` before the binary wires it: the very same `cmd_sim.rs`
//! the CLI compiles, behind a minimal parser.
//!
//! ```text
//! cargo run --release -p layoutd-sim --example sim -- --trace T --format spc --disk wd800 --json out.json
//! ```

#[path = "../../cli/src/cmd_sim.rs"]
mod cmd_sim;

use clap::Parser;

#[derive(Parser)]
#[command(name = "layoutd-sim")]
struct Cli {
    #[command(flatten)]
    args: cmd_sim::SimArgs,
}

fn main() {
    let cli = Cli::parse();
    if let Err(e) = cmd_sim::run(cli.args) {
        eprintln!("layoutd sim: error: {e:#}");
        std::process::exit(1);
    }
}
