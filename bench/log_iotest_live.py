#!/usr/bin/env python3
"""The `log` IO TEST live and scaled down under `serve --emulate` (issue 13:
"confirmed scaled-down live under --emulate"), each live run beside the
simulator's replay of its own capture.

Per utilisation (--utils) and stack (ext4 on `linear`, ext4 on `log` with
the adaptive policy): `bench/run log-iotest` live on the disk model
(--emulate, default st3160815as: every request waits for the model's
service time on one arm, FIFO), a 257M volume file, stacks
bench/workloads/log/live-small-{linear,adaptive}.toml (ext4 of 238759936
bytes on both; the log's over-provisioning below it), --update-mib of
updates (default 112: the simulator's 512 MiB over 1 GiB, scaled to the
file system). Then each capture is replayed as one stream, closed loop
with its recorded think time, through the same stack in `layoutd sim` on
the same model with the live emulator's queue (FIFO, depth 1).

Cells: per phase the live span (first submit to last completion between
the phase's marker reads, as recorded by `serve --record-trace`) and the
replay's span; and both disk-busy seconds. Writes
bench/results/log/live-iotest/README.md (tables above the analysis marker,
which is kept) and summary.json; captures in live-iotest/STACK-U/.

Usage: sudo bench/log_iotest_live.py [--utils 50,90] [--update-mib 112]
                                     [--emulate st3160815as] [--no-capture]
Needs root for the capture, and a release build (cargo build --workspace --release).
"""
import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench/harness"))
import capreplay  # noqa: E402
import readme  # noqa: E402
import tracefile  # noqa: E402
from log_sim import MARKER, layoutd  # noqa: E402
from rig import FILE_SYSTEMS  # noqa: E402

OUT = os.path.join(ROOT, "bench/results/log/live-iotest")
TMP = os.path.join(OUT, "tmp")
STACKS = ["linear", "adaptive"]
SIZE = "257M"
# ext4 without blocks reserved for root (as bench/log_iotest_fs.py), and the
# default type's 4 KiB blocks (mke2fs makes a file system this small with 1 KiB ones).
MKFS = "-m 0 -T default " + FILE_SYSTEMS["ext4"]["default_mkfs_opts"]
PHASES = ("create", "delete", "update", "read")


def config(stack):
    return os.path.join(ROOT, "bench/workloads/log", f"live-small-{stack}.toml")


def capture_dir(stack, util):
    return os.path.join(OUT, f"{stack}-{util}")


def capture(stack, util, a):
    cmd = [os.path.join(ROOT, "bench/run"), "log-iotest", "--util", str(util), "--update-mib", str(a.update_mib),
           "--size", SIZE, "--config", os.path.relpath(config(stack), ROOT), "--emulate", a.emulate,
           f"--mkfs-opts={MKFS}", "--out", os.path.relpath(capture_dir(stack, util), ROOT)]
    print(f"live: {' '.join(cmd)}", file=sys.stderr)
    subprocess.run(cmd, check=True, cwd=ROOT)


def live_phases(util, stack):
    r = json.load(open(os.path.join(capture_dir(stack, util), "result.json")))
    return {p["name"]: {"span_s": p["trace"]["span_seconds"], "busy_s": p["trace"]["busy_seconds"],
                        "requests": p["trace"]["requests"]} for p in r["phases"]}, r


def sim_config(stack):
    """The live config with a `trace` layer on top (the simulator records the replay there)."""
    text = open(config(stack)).read()
    out = os.path.join(TMP, f"sim-{stack}.toml")
    with open(out, "w") as fh:
        fh.write(text.replace("version = 1\n", 'version = 1\n[[layer]]\ntarget = "trace"\n', 1))
    return out


def replay(l, util, stack, disk):
    d = capture_dir(stack, util)
    os.makedirs(TMP, exist_ok=True)
    base = os.path.join(TMP, f"{stack}-{util}")
    trace = tracefile.one_stream(os.path.join(d, "trace.gz"), base + ".trace.gz")
    j, ph = capreplay.replay(l, trace, sim_config(stack), disk, base, d,
                             extra=["--scheduler", "fifo", "--queue-depth", "1"])
    log = next((x["counters"] for x in j["stack"]["layers"] if x["target"] == "log"), None)
    return ph, log


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--utils", default="50,90")
    ap.add_argument("--update-mib", type=int, default=112)
    ap.add_argument("--emulate", default="st3160815as")
    ap.add_argument("--no-capture", action="store_true", help="replay the committed captures only")
    a = ap.parse_args()
    utils = [int(u) for u in a.utils.split(",")]
    l = layoutd()
    tracefile.use(l)
    if not a.no_capture:
        for u in utils:
            for s in STACKS:
                subprocess.run(["uptime"])
                capture(s, u, a)
                subprocess.run(["uptime"])
    res = {}
    for u in utils:
        for s in STACKS:
            live, r = live_phases(u, s)
            sim, log = replay(l, u, s, a.emulate)
            res.setdefault(str(u), {})[s] = {"live": live, "sim": sim, "log": log, "params": r["params"],
                                             "started": r["started"], "machine": r["machine"]}
            print(f"{u:3}% {s:9} " + " ".join(f"{p} live {live[p]['span_s']:7.1f} sim {sim[p]['span_s']:7.1f}"
                                              for p in PHASES), file=sys.stderr)
    with open(os.path.join(OUT, "summary.json"), "w") as fh:
        json.dump({"emulate": a.emulate, "update_mib": a.update_mib, "runs": res}, fh, indent=1)
    report(res, utils, a)


def report(res, utils, a):
    cmd = "sudo bench/log_iotest_live.py" + ("" if a.utils == "50,90" else f" --utils {a.utils}") + \
        ("" if a.update_mib == 112 else f" --update-mib {a.update_mib}") + \
        ("" if a.emulate == "st3160815as" else f" --emulate {a.emulate}")
    L = [f"# `log`: the IO TEST live, scaled down, under `--emulate {a.emulate}`", "",
         "A benchmark, not a test. ext4 (238759936 bytes, `-m 0`, mounted with `discard`) on `linear` and on "
         "`log` (policy adaptive, every other key at its default) served live with `layoutd serve --emulate "
         f"{a.emulate}`; the IO TEST of `fs/README.md` scaled to this volume: 64 KiB files to 90% full, random "
         f"deletes down to the utilisation, {a.update_mib} MiB of random 4 KiB O_DIRECT updates, the remaining "
         "files read in creation order after a remount (cold caches). Then each live capture replayed in "
         "`layoutd sim` through the same stack on the same model, one stream, closed loop with the recorded "
         "think time, FIFO at queue depth 1 (as the emulator).", "",
         f"Reproduce: `cargo build --workspace --release && {cmd}` (the replay half alone: add `--no-capture`).",
         "", "Cells: seconds from the phase's first request to its last completion (span, think time "
         "included) live / replayed (replay / live); and disk-busy seconds live / replayed.", "",
         "| util | stack | phase | requests | span live | span sim (x live) | busy live | busy sim (x live) |",
         "| ---: | --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    for u in utils:
        for s in STACKS:
            r = res[str(u)][s]
            for p in PHASES:
                lv, sm = r["live"][p], r["sim"][p]
                L.append(f"| {u}% | {s} | {p} | {lv['requests']} | {lv['span_s']:.1f} | {sm['span_s']:.1f} "
                         f"({sm['span_s'] / lv['span_s']:.2f}) | {lv['busy_s']:.1f} | {sm['busy_s']:.1f} "
                         f"({sm['busy_s'] / lv['busy_s']:.2f}) |")
    L += ["", "Log over linear, live and replayed, update and read phases (by span; by disk-busy seconds):", "",
          "| util | update live | update sim | read live | read sim | update busy live | update busy sim | "
          "read busy live | read busy sim |", "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for u in utils:
        r = res[str(u)]
        q = {(k, m): {p: r["adaptive"][k][p][m] / r["linear"][k][p][m] for p in ("update", "read")}
             for k in ("live", "sim") for m in ("span_s", "busy_s")}
        L.append("| " + " | ".join([f"{u}%"] + [f"{q[(k, m)][p]:.2f}x" for m in ("span_s", "busy_s")
                                                for p in ("update", "read") for k in ("live", "sim")]) + " |")
    L += ["", "Runs (started, UTC; load average at start -> end, 1 min): " + "; ".join(
        f"{s} {u}% {res[str(u)][s]['started']} ({res[str(u)][s]['machine']['loadavg_at_start'][0]:.1f} -> "
        f"{res[str(u)][s]['machine']['loadavg_at_end'][0]:.1f})" for u in utils for s in STACKS), ""]
    os.makedirs(OUT, exist_ok=True)
    readme.write_keeping_notes(os.path.join(OUT, "README.md"), L + [MARKER], MARKER)
    print("\n".join(L))


if __name__ == "__main__":
    main()
