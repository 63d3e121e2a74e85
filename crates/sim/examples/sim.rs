//! `layoutd sim` without the rest of the binary: the same command module
//! (`layoutd_sim::command`) behind a minimal parser.
//!
//! ```text
//! cargo run --release -p layoutd-sim --example sim -- --trace T --format spc --disk wd800 --json out.json
//! ```

use layoutd_sim::command as cmd_sim;

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
