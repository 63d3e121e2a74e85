"""Workloads for bench/run. A workload module defines NAME, HELP,
DESCRIPTION, DEFAULTS (rig settings it prefers: size, config, emulate,
mount_opts, optionally mkfs_opts), add_args(argparse group) and
Workload(args) with params() and phases() -> [(name, kind, drop caches
before?, fn(mount point) -> dict)]; optionally attach(rig) and populate(mount
point) -> dict (run served without emulation, with its own trace, before
the rig restarts the server for the phases). Register it in WORKLOADS below."""

from . import dcd_users, git_status, log_fs, log_iotest_fs, opt_startup, pool_kernel, postmark_repeat

WORKLOADS = {m.NAME: m for m in (postmark_repeat, dcd_users, log_fs, log_iotest_fs, git_status, pool_kernel, opt_startup)}
