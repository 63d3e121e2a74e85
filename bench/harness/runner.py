"""bench/run: the live bench harness (see `bench/run --help` and docs/bench.md)."""

import argparse
import datetime
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.dirname(HERE)
ROOT = os.path.dirname(BENCH)
sys.path.insert(0, BENCH)

import diskrec  # noqa: E402
import readme  # noqa: E402
import replay  # noqa: E402
import svg  # noqa: E402
import tracefile  # noqa: E402
from log import log  # noqa: E402
from rig import FILE_SYSTEMS, SUPERBLOCK_BYTES, Rig, drop_caches, parse_size, sync_fs  # noqa: E402
from workloads import WORKLOADS  # noqa: E402

NOTES_MARK = "<!-- Notes below this line are written by hand and kept when bench/run regenerates this file. -->"

TOP_HELP = """\
Runs a real file-system workload live on a layoutd volume and reports it.

For each run the harness
  1. formats a volume file (in --dir, default /dev/shm) with the workload's
     stack config (default: one plain linear target),
  2. serves it: layoutd serve --emulate PRESET (default wd800: every request
     waits for the HDD model's service time on one simulated arm) --record-trace,
  3. makes it a block device and a file system without the kernel nbd module:
     nbdfuse (one NBD connection) -> losetup --direct-io=on -> mkfs (ext4, or --fs btrfs) -> mount,
  4. runs the workload's phases, with `sync; echo 3 > /proc/sys/vm/drop_caches`
     (after umount + mount, by default) before each phase that asks for cold caches, and brackets every phase with
     two marker reads (outside the file system) that cut the recorded trace
     into phases,
  5. unmounts, runs e2fsck -fn (btrfs check --readonly), and tears down in reverse order (also on
     failure, Ctrl-C or SIGTERM),
  6. writes bench/results/NAME/: result.json, README.md (table), phases.svg,
     address_time.svg, trace.gz; with --replay also each phase replayed
     closed-loop in `layoutd sim` on the same disk model, side by side.

Progress goes to stderr. Needs root, nbdkit, nbdfuse (libnbd-bin), fuse3,
e2fsprogs, and a release build (cargo build --workspace --release).
"""

EXAMPLES = """\
examples:
  bench/run --list
  bench/run postmark-repeat                       # plain stack, --emulate wd800
  bench/run postmark-repeat --files 500 --reads 2 --out /tmp/pm-small
  bench/run postmark-repeat --replay --out bench/results/capture-replay
  bench/run postmark-repeat --config examples/trace.toml --emulate none --keep
"""


def parse(argv):
    common = argparse.ArgumentParser(add_help=False)
    g = common.add_argument_group("rig")
    g.add_argument("--dir", default="/dev/shm", help="where the volume file, socket and mount points live (default: %(default)s)")
    g.add_argument("--size", help="volume size, e.g. 4G (default: the workload's)")
    g.add_argument("--config", help="stack TOML for `layoutd format` (default: the workload's; plain linear if none)")
    g.add_argument("--emulate", help="HDD model preset for `serve --emulate`, or `none` (default: the workload's, wd800)")
    g.add_argument("--connections", type=int, default=1,
                   help="NBD connections nbdfuse opens (default: 1, so the trace has one stream in issue order)")
    g.add_argument("--no-direct-io", action="store_true", help="attach the loop device without --direct-io=on")
    g.add_argument("--fs", choices=sorted(FILE_SYSTEMS), help="file system to make (default: the workload's, ext4)")
    g.add_argument("--mount-opts", help="mount options, e.g. noatime (default: the workload's)")
    g.add_argument("--mkfs-opts",
                   help="extra mkfs options; give them as --mkfs-opts='...' (default for ext4: "
                        f"'{FILE_SYSTEMS['ext4']['default_mkfs_opts']}', for btrfs none; "
                        "the rig always mounts ext4 with noinit_itable, so no background inode-table zeroing runs "
                        "during the workload)")
    g.add_argument("--cold", choices=("remount", "drop"), default="remount",
                   help="how a phase that wants cold caches gets them: `drop` = sync; echo 3 > drop_caches; "
                        "`remount` = umount, drop_caches, mount (default: %(default)s; drop_caches alone leaves "
                        "journaled metadata that is not yet checkpointed in memory)")
    g.add_argument("--threads", type=int, default=16, help="nbdkit worker threads (default: %(default)s)")
    g.add_argument("--layoutd", default=os.path.join(ROOT, "target/release/layoutd"), help="the layoutd binary (default: %(default)s)")
    g.add_argument("--out", help="result directory (default: bench/results/NAME)")
    g.add_argument("--keep", action="store_true", help="keep the work directory (volume file, raw trace, logs)")
    g.add_argument("--record-disk", action="store_true",
                   help="with --emulate: also write disk.gz, every request the emulated disk served (`serve "
                        "--record-disk`, the format of `layoutd sim --record-disk`: arrival, start, completion, "
                        "hit, seek, rotation), to compare a live run with its replay request by request")
    g = common.add_argument_group("replay (capture-then-replay)")
    g.add_argument("--replay", action="store_true",
                   help="replay each phase's captured trace closed-loop in `layoutd sim` on the emulated disk and report both")
    g.add_argument("--sim-seeds", default="0",
                   help="comma-separated simulator seeds (platter phase at time 0); the first is reported, "
                        "all of them give the range (default: %(default)s)")
    g.add_argument("--sim-scheduler", default="fifo",
                   help="simulated disk scheduler (default: %(default)s, as the live emulator: FIFO, one arm)")
    g.add_argument("--sim-queue-depth", type=int, default=1, help="simulated disk queue depth (default: %(default)s, as live)")
    g.add_argument("--sim-dispatch", choices=("live", "device"), default="live",
                   help="how lower requests reach the simulated disk: `live` = as `serve` submits them, each "
                        "thread one at a time (`layoutd sim --live-dispatch`); `device` = all at once "
                        "(default: %(default)s)")
    g.add_argument("--sim-delivery-us", type=int, default=0,
                   help="with --sim-dispatch live: microseconds from a disk completion to the stack seeing it "
                        "(`layoutd sim --live-delivery-us`; the live runtime's wake-up, measured with "
                        "LAYOUTD_EVENT_LOG; default: %(default)s)")

    ap = argparse.ArgumentParser(prog="bench/run", description=TOP_HELP, epilog=EXAMPLES,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--list", action="store_true", help="list the workloads")
    ap.add_argument("--replay-only", metavar="DIR",
                    help="replay a committed run again (DIR/result.json and trace.gz, no live run, no root) with "
                         "this checkout's simulator and rewrite DIR's replay columns (hand notes kept)")
    ap.add_argument("--dispatch", choices=("live", "device"), default="live",
                    help="with --replay-only: as --sim-dispatch (default: %(default)s)")
    ap.add_argument("--delivery-us", type=int, default=0,
                    help="with --replay-only: as --sim-delivery-us (default: %(default)s)")
    ap.add_argument("--layoutd-binary", default=os.path.join(ROOT, "target/release/layoutd"),
                    help="with --replay-only: the layoutd binary (default: %(default)s)")
    sub = ap.add_subparsers(dest="name", metavar="NAME")
    for name, mod in WORKLOADS.items():
        sp = sub.add_parser(name, parents=[common], help=mod.HELP, description=mod.DESCRIPTION,
                            epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
        mod.add_args(sp)
    a = ap.parse_args(argv)
    if a.replay_only:
        replay_again(os.path.abspath(a.replay_only), os.path.abspath(a.layoutd_binary), a.dispatch, a.delivery_us)
        sys.exit(0)
    if a.list:
        for name, mod in WORKLOADS.items():
            print(f"{name:20} {mod.HELP}")
        sys.exit(0)
    if not a.name:
        ap.print_help()
        sys.exit(2)
    return a


def preflight(a):
    missing = []
    if os.geteuid() != 0:
        missing.append("root (losetup, mount and drop_caches need it)")
    for tool, pkg in (("nbdkit", "nbdkit"), ("nbdfuse", "libnbd-bin"), ("fusermount3", "fuse3"),
                      ("losetup", "mount"), *FILE_SYSTEMS[a.fs]["tools"]):
        if shutil.which(tool) is None:
            missing.append(f"{tool} (apt-get install {pkg})")
    if not os.access(a.layoutd, os.X_OK):
        missing.append(f"{a.layoutd} (cargo build --workspace --release)")
    elif not tracefile.has_trace(a.layoutd):
        missing.append(f"`layoutd trace` in {a.layoutd} (an older build: cargo build --workspace --release)")
    elif not os.path.exists(os.path.join(os.path.dirname(a.layoutd), "liblayoutd_nbd.so")) and \
            "LAYOUTD_NBD_PLUGIN" not in os.environ:
        missing.append("liblayoutd_nbd.so next to layoutd (cargo build --workspace --release)")
    for dev in ("/dev/fuse", "/dev/loop-control"):
        if not os.path.exists(dev):
            missing.append(dev)
    if missing:
        sys.exit("bench/run: missing: " + "; ".join(missing))


class Interrupted(BaseException):
    pass


_interrupted = False


def on_signal(signum, _frame):
    """First SIGINT/SIGTERM/SIGHUP: stop the workload (teardown follows in
    `finally`). Later ones only say so: teardown must not be cut short."""
    global _interrupted
    if _interrupted:
        log(f"{signal.Signals(signum).name} again: still tearing down, please wait")
        return
    _interrupted = True
    raise Interrupted(f"signal {signal.Signals(signum).name}")


def git_head():
    p = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return p.stdout.strip() or "unknown"


def repo_relative(path):
    """`path` relative to the checkout when it lies inside it (results never
    name a path of the machine they were made on), else as given."""
    if path and os.path.abspath(path).startswith(ROOT + os.sep):
        return os.path.relpath(path, ROOT)
    return path


def main(argv=None):
    a = parse(sys.argv[1:] if argv is None else argv)
    mod = WORKLOADS[a.name]
    d = dict(mod.DEFAULTS)
    size = a.size or d["size"]
    config = a.config if a.config is not None else d.get("config")
    if config in ("", "none", "linear"):
        config = None
    if config:
        config = os.path.abspath(config)
    emulate = a.emulate or d.get("emulate")
    if emulate == "none":
        emulate = None
    mount_opts = a.mount_opts if a.mount_opts is not None else d.get("mount_opts", "")
    a.fs = a.fs or d.get("fs", "ext4")
    fsd = FILE_SYSTEMS[a.fs]
    mount_opts = ",".join(o for o in [*fsd["mount_opts"], *mount_opts.split(",")] if o)
    mkfs_opts = ((fsd["default_mkfs_opts"] if a.mkfs_opts is None else a.mkfs_opts) + " " +
                 d.get("mkfs_opts", "")).split()
    out = os.path.abspath(a.out or os.path.join(BENCH, "results", a.name))
    a.layoutd = os.path.abspath(a.layoutd)
    tracefile.use(a.layoutd)
    preflight(a)
    sim = None
    if a.replay:
        sim = replay.find_sim(a.layoutd)
        if sim is None:
            sys.exit("bench/run: --replay needs `layoutd sim` or target/release/examples/sim "
                     "(cargo build --release -p layoutd-sim --example sim)")
        if not emulate:
            sys.exit("bench/run: --replay compares against the emulated disk; give --emulate PRESET")
    if config and '"trace"' in open(config).read():
        log("warning: the config has a trace layer and serve --record-trace adds another on top; "
            "every request is then recorded twice (known serve issue, see docs/bench.md)")
    wl = mod.Workload(a)
    os.makedirs(out, exist_ok=True)
    os.makedirs(a.dir, exist_ok=True)
    work = tempfile.mkdtemp(prefix=f"layoutd-bench-{a.name}-", dir=a.dir)
    trace_path = os.path.join(work, "trace")
    log(f"{a.name}: work dir {work}, results to {out}")
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, on_signal)

    # A workload with a `populate(mnt)` fills the volume first, served
    # without emulation and recorded to its own trace; then the rig restarts
    # (a fresh server, `emulate`, trace_path) and the phases run.
    staged = hasattr(wl, "populate")
    rig = Rig(a.layoutd, work, size, config, None if staged else emulate,
              os.path.join(work, "setup.trace") if staged else trace_path, a.connections, not a.no_direct_io,
              mkfs_opts, mount_opts, a.threads, a.fs)
    if a.record_disk:
        if not emulate:
            sys.exit("bench/run: --record-disk records the emulated disk; give --emulate too")
        rig.disk_record = os.path.join(work, "disk")
    phases = []
    error = None
    started = datetime.datetime.now().astimezone()
    loadavg0 = [round(x, 2) for x in os.getloadavg()]
    try:
        rig.up()
        if hasattr(wl, "attach"):  # workloads that drive the rig themselves (snapshots, exports)
            wl.attach(rig)
        if staged:
            t = time.monotonic()
            rig.facts["setup"] = wl.populate(rig.mnt)
            rig.facts["setup_seconds"] = round(time.monotonic() - t, 3)
            rig.restart(emulate, trace_path, getattr(wl, "between", None))
        for name, kind, cold, fn in wl.phases():
            ph = {"name": name, "kind": kind, "caches_dropped_before": cold}
            if cold:
                t = time.monotonic()
                if a.cold == "remount":
                    rig.remount()
                drop_caches(rig.mnt)
                ph["cold_seconds"] = round(time.monotonic() - t, 3)
            m0 = rig.marker(f"{name} start")
            ls0 = rig.loop_stat()
            log(f"phase {name}: running")
            t0 = time.monotonic()
            ph.update(fn(rig.mnt))
            t1 = time.monotonic()
            sync_fs(rig.mnt)
            t2 = time.monotonic()
            ls1 = rig.loop_stat()
            m1 = rig.marker(f"{name} end")
            ph["loop_device"] = {k: ls1[k] - ls0[k] for k in ls0}
            ph["seconds"] = round(t1 - t0, 4)
            ph["sync_seconds"] = round(t2 - t1, 4)
            ph["live_seconds"] = round(t2 - t0, 4)
            ph["markers"] = [m0, m1]
            log(f"phase {name}: {ph['seconds']:.2f} s + sync {ph['sync_seconds']:.2f} s")
            phases.append(ph)
        rig.umount()
        clean, text = rig.fsck()
        rig.facts["fsck_clean"] = clean
        log(f"{' '.join(fsd['fsck'])}: {'clean' if clean else 'PROBLEMS'}")
        if not clean:
            rig.facts["fsck_output"] = text[-2000:]
    except (Exception, KeyboardInterrupt, Interrupted) as e:  # noqa: BLE001
        error = f"{type(e).__name__}: {e}"
        log(f"FAILED: {error}")
    finally:
        failures = rig.down()
    if failures:
        log("teardown problems: " + "; ".join(failures))
    if error or failures:
        log(f"no results written; work dir {'kept' if a.keep else 'removed'}: {work}")
        tail = open(rig.serve_log).read().strip()[-1500:] if os.path.exists(rig.serve_log) else ""
        if tail:
            log("server log tail:\n" + tail)
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)
        sys.exit(1)

    try:
        result = analyze(a, wl, rig, phases, trace_path, out, work, sim, dict(
            size=size, size_bytes=parse_size(size), config=config, emulate=emulate,
            fs=a.fs, mount_opts=mount_opts, mkfs_opts=mkfs_opts,
            nbdfuse_connections=a.connections, nbdkit_threads=a.threads, cold=a.cold,
            loadavg_at_start=loadavg0), started)
    finally:
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            log(f"kept {work}")
    write_report(out, result)
    log(f"wrote {out}/README.md, result.json, phases.svg, address_time.svg, trace.gz")


def analyze(a, wl, rig, phases, trace_path, out, work, sim, rigsettings, started):
    log("reading the trace (layoutd trace)")
    eb = rig.export_bytes
    for p in phases:
        p["trace"] = tracefile.in_phase(p["name"], tracefile.stats, trace_path, eb, p["markers"])
    whole = tracefile.stats(trace_path)
    tracefile.gzip_copy(trace_path, os.path.join(out, "trace.gz"))
    if rig.disk_record and os.path.exists(rig.disk_record):
        tracefile.gzip_copy(rig.disk_record, os.path.join(out, "disk.gz"))
        rows = list(diskrec.rows(rig.disk_record))
        for p in phases:
            recs = tracefile.in_phase(p["name"], tracefile.read, trace_path, eb, p["markers"])
            busy = [(x.submit, x.complete) for x in recs if x.complete is not None]
            p["trace"]["emulated_disk_seconds"] = round(diskrec.served_within(busy, rows) / 1e9, 6)
    setup = os.path.join(work, "setup.trace")
    if os.path.exists(setup):  # a staged workload's populate, served without emulation
        tracefile.gzip_copy(setup, os.path.join(out, "setup.trace.gz"))
    epoch = whole["first_submit_ns"] or 0
    at = lambda t, k: epoch if t[k] is None else t[k]  # noqa: E731 - an empty phase: a band at the start
    bands = [(p["name"], at(p["trace"], "first_submit_ns"), at(p["trace"], "last_complete_ns")) for p in phases]
    svg.address_time(os.path.join(out, "address_time.svg"),
                     f"{a.name}: block address against time (live, {rigsettings['emulate'] or 'no emulation'})",
                     tracefile.read(trace_path), bands)
    sim_info = None
    if sim:
        sim_info = replay_phases(sim, [int(x) for x in a.sim_seeds.split(",") if x.strip()], a.sim_scheduler,
                                 a.sim_queue_depth, rigsettings, phases, trace_path, eb, out, work,
                                 dispatch=a.sim_dispatch, delivery_us=a.sim_delivery_us)
    phase_plot(out, a.name, phases)
    return {
        "workload": a.name,
        "params": wl.params(),
        "command": "bench/run " + " ".join(sys.argv[1:]),
        "started": started.isoformat(timespec="seconds"),
        "git_head": git_head(),
        "machine": {"cpus": os.cpu_count(), "kernel": platform.release(),
                    "cpu": cpu_model(), "loadavg_at_start": rigsettings.pop("loadavg_at_start"),
                    "loadavg_at_end": [round(x, 2) for x in os.getloadavg()]},
        "rig": {**rigsettings, **rig.facts, "export_bytes": rig.export_bytes,
                "config": repo_relative(rigsettings["config"])},
        "phases": phases,
        "whole_trace": whole,
        "markers": [{"index": k, "offset": off, "label": lab} for k, off, lab in rig.markers],
        "replay": sim_info,
    }


def phase_plot(out, name, phases):
    """phases.svg: the live wall time per phase, or with a replay the live
    trace span against the replay's."""
    if phases and "sim" in phases[0]:
        series = [("live (trace span)", [p["trace"]["span_seconds"] for p in phases]),
                  ("simulated, closed-loop replay", [p["sim"]["span_seconds"] for p in phases])]
    else:
        series = [("live (workload + sync)", [p["live_seconds"] for p in phases])]
    svg.bars(os.path.join(out, "phases.svg"), f"{name}: seconds per phase", [p["name"] for p in phases], series, "seconds")


def replay_again(out, layoutd, dispatch="live", delivery_us=0):
    """bench/run --replay-only DIR: the replay half of a committed run, again."""
    tracefile.use(layoutd)
    sim = replay.find_sim(layoutd)
    if sim is None:
        sys.exit(f"bench/run: {layoutd} has no `sim` (cargo build --workspace --release)")
    with open(os.path.join(out, "result.json")) as fh:
        r = json.load(fh)
    old = r.get("replay") or {}
    rig = r["rig"]
    settings = {"size_bytes": rig["size_bytes"], "emulate": rig["emulate"],
                "config": os.path.join(ROOT, rig["config"]) if rig.get("config") else None}
    if not settings["emulate"]:
        sys.exit("bench/run: --replay-only compares against the emulated disk; this run had no --emulate")
    work = tempfile.mkdtemp(prefix="layoutd-bench-replay-")
    try:
        r["replay"] = replay_phases(sim, old.get("seeds", [0]), old.get("scheduler", "fifo"), old.get("queue_depth", 1),
                                    settings, r["phases"], os.path.join(out, "trace.gz"), rig["export_bytes"], out, work,
                                    dispatch=dispatch, delivery_us=delivery_us)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    r["replay"]["rerun"] = (f"bench/run --replay-only {repo_relative(out)}"
                            + (" --dispatch device" if dispatch == "device" else "")
                            + (f" --delivery-us {delivery_us}" if delivery_us else "")
                            + f"` at git `{git_head()}")
    phase_plot(out, r["workload"], r["phases"])
    write_report(out, r)
    log(f"wrote {out}/README.md, result.json, phases.svg, sim/")


def replay_phases(sim, seeds, scheduler, queue_depth, rigsettings, phases, trace_path, eb, out, work, dispatch="live",
                  delivery_us=0):
    """The whole capture replayed once per seed (replay.whole: the live stack
    on the volume file's data area, the phases' runtime messages, one
    stream), cut into the phases at their marker reads; sets each phase's
    `sim` (the first seed's span, busy time and requests) and
    `sim_seconds_by_seed` (spans); returns the run's `replay` record."""
    simdir = os.path.join(out, "sim")
    if os.path.isdir(simdir):  # results of an earlier replay design (one file a phase) would be stale
        shutil.rmtree(simdir)
    os.makedirs(simdir)
    one = tracefile.one_stream(trace_path, os.path.join(work, "one-stream.trace.gz"))
    msgs = tracefile.messages(one, eb, phases)
    size_bytes = rigsettings["size_bytes"]
    device = (SUPERBLOCK_BYTES, size_bytes - SUPERBLOCK_BYTES)
    by_seed = []
    for seed in seeds:
        sfx = "" if seed == seeds[0] else f"-seed{seed}"
        js, cut = replay.whole(sim, one, os.path.join(simdir, f"whole{sfx}"), rigsettings["emulate"],
                               rigsettings["config"], seed, scheduler, queue_depth, msgs, device, eb,
                               [p["markers"] for p in phases], live_dispatch=dispatch == "live",
                               delivery_us=delivery_us)
        by_seed.append((seed, js, cut))
    for i, p in enumerate(phases):
        p["sim"] = by_seed[0][2][i]
        p["sim_seconds_by_seed"] = {str(sd): cut[i]["span_seconds"] for sd, _, cut in by_seed}
    return {"command": [repo_relative(c) for c in sim], "scheduler": scheduler, "queue_depth": queue_depth, "seed": seeds[0], "seeds": seeds,
            "dispatch": dispatch, "delivery_us": delivery_us, "disk": rigsettings["emulate"], "config": repo_relative(rigsettings["config"]),
            "design": "whole", "device_offset_bytes": device[0], "device_bytes": device[1], "messages": msgs,
            "whole_trace": sim_summary(by_seed[0][1])}


def sim_summary(js):
    keep = ("requests", "reads_count", "writes_count", "flushes_count", "read_bytes", "written_bytes",
            "simulated_seconds", "disk_busy_seconds", "disk_utilization", "response_ms")
    s = {k: js[k] for k in keep if k in js}
    d = js.get("disk", {})
    s["disk_cache_hits"] = d.get("cache_hits_count")
    s["disk_service_ms_mean"] = d.get("service_ms", {}).get("mean")
    return s


def cpu_model():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def mib(b):
    return b / 2**20


def write_report(out, r):
    with open(os.path.join(out, "result.json"), "w") as fh:
        json.dump(r, fh, indent=1)
        fh.write("\n")
    rig = r["rig"]
    p = r["params"]
    L = [f"# {r['workload']}", "",
         "A benchmark, not a test: one live run, numbers as measured. "
         f"Generated by `{r['command']}` on {r['started']} (git {r['git_head']}); "
         f"machine: {r['machine']['cpus']} CPUs, {r['machine']['cpu']}, Linux {r['machine']['kernel']}, "
         f"load average {r['machine']['loadavg_at_start'][0]} at the start and {r['machine']['loadavg_at_end'][0]} at the end "
         "(other work on the machine lengthens the live think time; the replay keeps what was recorded).", "",
         "Rig: " + ", ".join([
             f"{rig['size']} volume, stack `{os.path.relpath(rig['config'], ROOT) if rig['config'] else 'linear (default)'}`",
             f"`serve --emulate {rig['emulate']}`" if rig["emulate"] else "no emulation",
             f"nbdfuse -C {rig['nbdfuse_connections']}",
             f"loop direct I/O {'on' if rig.get('loop_direct_io') else 'off'}",
             f"mkfs.{rig.get('fs', 'ext4')} {' '.join(rig['mkfs_opts'])} ({rig.get('mkfs_seconds')} s)",
             f"mount options: {rig['mount_opts']}",
             "cold caches by " + ("umount + drop_caches + mount" if rig.get("cold") == "remount" else "sync + drop_caches"),
             f"{' '.join(FILE_SYSTEMS[rig.get('fs', 'ext4')]['fsck'])} after the run: "
             f"{'clean' if rig.get('fsck_clean') else 'NOT CLEAN'}",
             f"server stopped {'cleanly' if rig.get('server_marked_clean') else 'WITHOUT the clean mark'}"]
                         + ([f"loop device found detached by someone else and attached again before a remount: "
                             f"{', '.join(rig['loop_reattached'])}"] if rig.get("loop_reattached") else [])) + ".", "",
         "Workload: " + ", ".join(f"{k} = {v}" for k, v in p.items()) + ".", ""]
    has_sim = bool(r.get("replay"))
    multi = has_sim and len(r["replay"].get("seeds", [])) > 1
    head = ["phase", "caches", "live s", "of which sync s", "requests", "reads (loop dev)", "read MiB",
            "mean read KiB", "writes (loop dev)", "written MiB", "trace span s", "disk idle s"]
    emulated = all("emulated_disk_seconds" in ph["trace"] for ph in r["phases"])
    if emulated:
        head += ["emulated disk s"]
    if has_sim:
        head += ["sim span s", "sim / live span", "sim busy s", "sim / live busy"]
    if multi:
        head += [f"sim span s, {len(r['replay']['seeds'])} seeds"]
    L.append("| " + " | ".join(head) + " |")
    L.append("| --- | --- | " + " | ".join(["---:"] * (len(head) - 2)) + " |")
    tot_live = tot_sim = tot_live_busy = tot_sim_busy = 0.0
    ratio = lambda a, b: f"{a / b:.3f}" if b else "—"  # noqa: E731
    for ph in r["phases"]:
        t = ph["trace"]
        row = [ph["name"], "dropped" if ph["caches_dropped_before"] else "warm",
               f"{ph['live_seconds']:.2f}", f"{ph['sync_seconds']:.2f}", f"{t['requests']}",
               f"{t['reads']} ({ph['loop_device']['reads']})",
               f"{mib(t['read_bytes']):.1f}", f"{t['mean_read_kib']:.1f}",
               f"{t['writes']} ({ph['loop_device']['writes']})",
               f"{mib(t['written_bytes']):.1f}", f"{t['span_seconds']:.2f}", f"{t['idle_seconds']:.2f}"]
        if emulated:
            row.append(f"{t['emulated_disk_seconds']:.2f}")
        if has_sim:
            s, sb, lb = ph["sim"]["span_seconds"], ph["sim"]["busy_seconds"], t["span_seconds"] - t["idle_seconds"]
            tot_live += t["span_seconds"]
            tot_sim += s
            tot_live_busy += lb
            tot_sim_busy += sb
            row += [f"{s:.2f}", ratio(s, t["span_seconds"]), f"{sb:.2f}", ratio(sb, lb)]
            if multi:
                v = ph["sim_seconds_by_seed"].values()
                row.append(f"{min(v):.2f} - {max(v):.2f}")
        L.append("| " + " | ".join(row) + " |")
    if has_sim:
        L.append(f"| **total** | | | | | | | | | | **{tot_live:.2f}** | |{' |' if emulated else ''} **{tot_sim:.2f}** | **{ratio(tot_sim, tot_live)}** "
                 f"| **{tot_sim_busy:.2f}** | **{ratio(tot_sim_busy, tot_live_busy)}** |" + (" |" if multi else ""))
        w = r["replay"]["whole_trace"]
        rp = r["replay"]
        L += ["", f"Whole trace (mkfs, phases and the harness's gaps between them): "
                  f"live span {r['whole_trace']['span_seconds']:.2f} s, simulated {w['simulated_seconds']:.2f} s.", "",
              f"Replay: the whole trace once, as one stream, `layoutd sim --closed-loop --format layoutd --disk "
              f"{rp['disk']} --scheduler {rp['scheduler']} --queue-depth {rp['queue_depth']} --seed {rp['seed']} "
              f"--device-offset {rp.get('device_offset_bytes')} --device-bytes {rp.get('device_bytes')}"
              + (" --live-dispatch" if rp.get("dispatch") == "live" else "")
              + (f" --live-delivery-us {rp['delivery_us']}" if rp.get("delivery_us") else "")
              + (f" --config {rp['config']}" if rp.get("config") else "")
              + "".join(f" --message=@{n}:'{text}'" for n, text in rp.get("messages", []))
              + "` (the live stack on the volume file's data area; each runtime message before the marker read "
              "that followed it live), its own record cut into the phases at the marker reads "
              f"(`sim/whole.json`), run as `{' '.join(os.path.relpath(c, ROOT) if c.startswith(ROOT + '/') else c for c in rp['command'])}`"
              + (f"; replayed again by `{rp['rerun']}`" if rp.get("rerun") else "") + "."]
    L += ["", "Columns: *live s* is the workload's wall time plus the `sync` after it; *trace span* is first "
              "submission to last completion of the phase's requests as recorded by the trace layer; "
              "*disk idle* is the part of the span with no request outstanding (the think time closed-loop "
              "replay keeps); *(loop dev)* is what the loop device completed in the phase "
              "(/sys/block/loopN/stat), i.e. what ext4 sent before FUSE and NBD; *sim span* and *sim busy* "
              "are the same two measures of the phase in the replay's record, against the live trace span "
              "and the live busy time (trace span less disk idle)"
              + ("; *emulated disk* is the part of the live busy time in which the emulated disk was serving "
                 "(`disk.gz`, `serve --record-disk`): the rest of the busy time a request was outstanding with "
                 "the disk idle (the runtime's CPU, late wake-ups under load; `bench/opt_live_disk.py`)"
                 if emulated else "") + ".", "",
          "![seconds per phase](phases.svg)", "", "![address against time](address_time.svg)", "",
          f"Reproduce: `cargo build --workspace --release && {r['command']}`. The recorded trace is `trace.gz` "
          "(docs/trace-format.md; phases are cut at the marker reads listed in `result.json`).", "",
          NOTES_MARK]
    readme.write_keeping_notes(os.path.join(out, "README.md"), L, NOTES_MARK)
