//! `layoutd snapshot create|list|delete|merge`: thin wrappers over the
//! `pool` target's `snapshot ...` messages, online (a running `serve`'s
//! control socket) or offline (the device).

use crate::cmd_volume::CommandTarget;
use anyhow::{bail, Result};
use clap::{Args, Subcommand};
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[derive(Args)]
#[command(
    after_help = "Examples:\n  layoutd snapshot create --device pool.img nightly            # offline\n  layoutd snapshot create --socket vol.sock nightly --ro       # online, a running `layoutd serve`\n  layoutd snapshot create --socket vol.sock test1 --of nightly # a snapshot of a snapshot\n  layoutd snapshot list --socket vol.sock\n  layoutd snapshot merge --device pool.img nightly            # roll the origin back to it (as lvconvert --merge)\n  layoutd snapshot delete --device pool.img test1\n\nEach volume of a `pool` is an NBD export of its name (`nbdinfo --list`); the default export is the origin. Online, a snapshot holds exactly the writes completed before the command and none after; the command returns once the snapshot is durable."
)]
pub struct SnapshotArgs {
    #[command(subcommand)]
    cmd: SnapshotCmd,
    /// Offline: the pool's device (it must not be served).
    #[arg(long, value_name = "PATH", global = true, conflicts_with_all = ["socket", "control"])]
    device: Vec<PathBuf>,
    /// Online: the NBD Unix socket of a running `layoutd serve` (its control socket is <PATH>.ctl).
    #[arg(long, value_name = "PATH", global = true, conflicts_with = "control")]
    socket: Option<PathBuf>,
    /// Online: the control socket of a running `layoutd serve`.
    #[arg(long, value_name = "PATH", global = true)]
    control: Option<PathBuf>,
}

#[derive(Subcommand)]
enum SnapshotCmd {
    /// Take a snapshot of the origin (or of `--of VOLUME`).
    #[command(
        after_help = "Examples:\n  layoutd snapshot create --device pool.img nightly            # offline\n  layoutd snapshot create --socket vol.sock nightly --ro       # online, read-only\n  layoutd snapshot create --socket vol.sock test1 --of nightly # a snapshot of a snapshot\n\nDefault: writable, of the origin. The new volume is an NBD export of its name (`nbdinfo --list`)."
    )]
    Create {
        /// The new volume's name (its NBD export name).
        name: String,
        /// The volume to snapshot (default: the origin).
        #[arg(long, value_name = "VOLUME")]
        of: Option<String>,
        /// Read-only: writes to it fail.
        #[arg(long)]
        ro: bool,
    },
    /// List the pool's volumes: name, slot, offset, parent, mode, allocated bytes.
    #[command(
        after_help = "Examples:\n  layoutd snapshot list --device pool.img\n  layoutd snapshot list --socket vol.sock"
    )]
    List,
    /// Delete a snapshot (its chunks no other volume shares are freed).
    #[command(
        after_help = "Examples:\n  layoutd snapshot delete --device pool.img test1\n  layoutd snapshot delete --socket vol.sock test1"
    )]
    Delete {
        /// The snapshot.
        name: String,
    },
    /// Roll the origin back to a snapshot's contents; the snapshot goes.
    #[command(
        after_help = "Examples:\n  layoutd snapshot merge --device pool.img nightly   # the origin now reads as `nightly` did\n\nAs lvconvert --merge: the snapshot is gone afterwards."
    )]
    Merge {
        /// The snapshot.
        name: String,
    },
}

pub fn run(a: SnapshotArgs) -> Result<()> {
    let target = CommandTarget::from_flags(&a.device, &a.socket, &a.control)?;
    target.require_layer("pool")?;
    let text = match &a.cmd {
        SnapshotCmd::Create { name, of, ro } => format!(
            "snapshot create {name}{}{}",
            of.as_ref().map(|o| format!(" of {o}")).unwrap_or_default(),
            if *ro { " ro" } else { "" }
        ),
        SnapshotCmd::List => "snapshot list".into(),
        SnapshotCmd::Delete { name } => format!("snapshot delete {name}"),
        SnapshotCmd::Merge { name } => format!("snapshot merge {name}"),
    };
    let reply = target.send(&text)?;
    println!("{reply}");
    // Online, wait until the operation's checkpoint is on the disk
    // (offline, the device is flushed before the command returns).
    if matches!(target, CommandTarget::Online(_)) && !matches!(a.cmd, SnapshotCmd::List) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while target.send("snapshot sync").is_err() {
            if Instant::now() > deadline {
                bail!("`{text}` was accepted but is not durable after 60 s; check `layoutd snapshot list`");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    Ok(())
}
