"""Capture once live, replay through each stack in the simulator: the pieces
bench/log_fs.py and bench/pool_kernel.py share (their arguments, the
capture-or-check step, and one closed-loop replay cut into the capture's
phases)."""
import argparse
import json
import os
import subprocess
import sys

import tracefile


def parser(doc):
    """The common arguments: --fs, --no-capture, --jobs and bench/run's options after --."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fs", default="ext4,btrfs", help="file systems (default: %(default)s)")
    ap.add_argument("--no-capture", action="store_true", help="replay the committed captures only")
    ap.add_argument("--jobs", type=int, default=2, help="simulator runs at once (default: %(default)s)")
    ap.add_argument("run_args", nargs="*", help="passed to bench/run for the capture (after --)")
    return ap


def captures(a, who, capture, capture_dir):
    """The file systems of --fs; each captured with capture(fs, run_args),
    or with --no-capture checked to have a committed trace.gz in capture_dir(fs)."""
    fss = [f for f in a.fs.split(",") if f]
    for fs in fss:
        if not a.no_capture:
            capture(fs, a.run_args)
        elif not os.path.exists(os.path.join(capture_dir(fs), "trace.gz")):
            sys.exit(f"{who}: no capture for {fs} in {capture_dir(fs)}; run without --no-capture (as root)")
    return fss


ONE_STREAM = ("--format", "layoutd", "--no-stream-detect")


def run_cut(cmd, base, export_bytes, windows):
    """Runs the `layoutd sim` command `cmd` (it records to base.rec and writes
    base.json) and cuts its record at the harness's marker reads: returns (the
    simulator's JSON, [{"span_s", "busy_s", "requests"} per (from, to) marker
    window]). The one replay-and-cut step of every capture-then-replay script
    and of bench/run --replay. Failed requests are said on stderr (the JSON
    names the first in `first_errors`): such a replay is not the recorded run."""
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"`{' '.join(cmd)}` exited {p.returncode}: {p.stderr.strip()[-800:]}")
    j = json.load(open(base + ".json"))
    if j.get("errors_count"):
        print(f"replay {base}: {j['errors_count']} requests failed, first {j.get('first_errors')}", file=sys.stderr)
    try:
        cut = [tracefile.stats(base + ".rec", export_bytes, w) for w in windows]
    finally:
        os.unlink(base + ".rec")
    return j, [{"span_s": s["span_seconds"], "busy_s": s["busy_seconds"], "requests": s["requests"]} for s in cut]


def replay(l, trace, config, disk, base, capture_dir, extra=(), fmt=ONE_STREAM):
    """`layoutd sim` of `trace` closed-loop through `config` on `disk`, as one
    stream (or as `fmt`'s flags say), recording to base.rec; returns (the
    simulator's JSON, {phase: {"span_s", "busy_s", "requests"}}) with the
    phases cut at the capture's marker reads (capture_dir/result.json)."""
    cmd = [l, "sim", "--trace", trace, *fmt, "--config", config,
           "--disk", disk, "--closed-loop", "--no-progress", "--record-trace", base + ".rec", "--json", base + ".json",
           *extra]
    result = json.load(open(os.path.join(capture_dir, "result.json")))
    j, cut = run_cut(cmd, base, result["rig"]["export_bytes"], [ph["markers"] for ph in result["phases"]])
    return j, {ph["name"]: c for ph, c in zip(result["phases"], cut)}
