//! `layoutd`: format, serve, inspect and simulate layoutd volumes.

mod cmd_disk;
mod cmd_opt;
mod cmd_snapshot;
use layoutd_sim::command as cmd_sim;
mod cmd_trace;
mod cmd_volume;
mod endpoint;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "layoutd",
    version,
    about = "A self-optimizing block storage layer in user space",
    long_about = "layoutd sits between a file system and a disk and makes the disk faster by changing where \
                  blocks live. A volume is a stack of targets (linear, trace, ...) recorded in a superblock on \
                  the device, served over NBD through nbdkit, and the same target code runs in a deterministic \
                  simulator.",
    after_help = "Quick start:\n  truncate -s 1G vol.img\n  layoutd format --device vol.img\n  layoutd serve --device vol.img --run 'nbdinfo \"$uri\"'\n\nEach subcommand has its own --help with examples."
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Write a layoutd superblock and stack description onto a device.
    Format(cmd_volume::FormatArgs),
    /// Serve a formatted device over NBD (starts nbdkit with the layoutd plugin).
    Serve(cmd_volume::ServeArgs),
    /// Print a device's superblock and stack.
    Inspect(cmd_volume::InspectArgs),
    /// Drain background work offline: destage a `dcd` log home, flush, mark clean.
    Destage(cmd_volume::DestageArgs),
    /// Send a runtime command to a volume's targets, online (running serve) or offline.
    Message(cmd_volume::MessageArgs),
    /// Create, list, delete or merge the snapshots of a `pool` volume, online or offline.
    Snapshot(cmd_snapshot::SnapshotArgs),
    /// The `opt` target: status, plan, apply or drop the OPT region's contents.
    Opt(cmd_opt::OptArgs),
    /// Read an ext2/3/4 file system's free blocks into its `replica` layer (offline).
    FreeSpace(cmd_volume::FreeSpaceArgs),
    /// Inspect the HDD model's presets and validate it against real drives.
    #[command(subcommand)]
    Disk(cmd_disk::DiskCmd),
    /// Replay a block trace through a stack on the HDD model (deterministic simulator).
    Sim(Box<cmd_sim::SimArgs>),
    /// Summarize, cut (at marker reads) and convert block traces.
    #[command(subcommand)]
    Trace(cmd_trace::TraceCmd),
    /// List the target types this build knows.
    #[command(
        after_help = "Example:\n  layoutd targets\n\nEach target has a commented example config in examples/<target>.toml."
    )]
    Targets,
}

fn main() {
    // Behave like a Unix tool when the reader goes away (`layoutd inspect | head`):
    // die quietly on SIGPIPE instead of panicking on a failed print.
    // SAFETY: setting a signal disposition before any thread starts.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let cli = Cli::parse();
    let result = match cli.cmd {
        Cmd::Format(a) => cmd_volume::format(a),
        Cmd::Serve(a) => cmd_volume::serve(a),
        Cmd::Inspect(a) => cmd_volume::inspect(a),
        Cmd::Destage(a) => cmd_volume::destage(a),
        Cmd::Message(a) => cmd_volume::message(a),
        Cmd::Snapshot(a) => cmd_snapshot::run(a),
        Cmd::Opt(a) => cmd_opt::run(a),
        Cmd::FreeSpace(a) => cmd_volume::free_space(a),
        Cmd::Disk(c) => cmd_disk::run(c),
        Cmd::Sim(a) => cmd_sim::run(*a),
        Cmd::Trace(c) => cmd_trace::run(c),
        Cmd::Targets => {
            for t in layoutd_targets::TARGET_TYPES {
                println!("{:10} {}", t.name, t.about);
            }
            Ok(())
        }
    };
    if let Err(e) = result {
        eprintln!("layoutd: error: {}", message(&e));
        std::process::exit(1);
    }
}

/// The error and its causes joined by ": ", leaving out a cause whose text
/// the message already carries (an error that prints its source itself).
fn message(e: &anyhow::Error) -> String {
    let mut msg = e.to_string();
    for cause in e.chain().skip(1) {
        let c = cause.to_string();
        if !msg.contains(&c) {
            msg = format!("{msg}: {c}");
        }
    }
    msg
}
