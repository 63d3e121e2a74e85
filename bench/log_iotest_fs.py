#!/usr/bin/env python3
"""The `log` benchmark's IO TEST on real file systems (issue 13, docs/log.md):
the SSR-LFS paper's IO TEST (64 KiB files created to 90% full, random ones
deleted down to the utilisation, random 4 KiB updates of a fixed amount of
file data) and a sequential read of the remaining files after it, on ext4
and btrfs, captured live on a plain volume at each utilisation, then
replayed closed-loop in `layoutd sim` on the paper's disk (`st3160815as`):
ext4 and btrfs in place (`linear`), ext4 on `log` with each policy, and
btrfs on `log` with the default policy. bench/log_sim.py is the same test
at block level (generated 64 KiB extents, no file system).

Steps:
  1. capture (skipped with --no-capture when the captures exist): for each
     --fs and utilisation, `bench/run log-iotest --fs FS --util U --size
     1024M --out bench/results/log/fs/capture-FS-U` (the workload:
     bench/workloads/log_iotest_fs.py; tmpfs speed, no emulation: the disk
     time comes from the replay);
  2. replay, each capture as one stream (tracefile.one_stream) through
     bench/workloads/log/STACK.toml: as captured; for the `log` stacks also
     with --idle-s seconds of think time inserted before the read phase's
     first request (the log re-sequences in idle time; in place, idle time
     changes nothing), and the prefix up to the update phase (its counters,
     subtracted, give the update phase's write amplification).

A phase's figure is its disk-busy seconds (time with a request outstanding
at the top of the stack, between the phase's marker reads; the capture
machine's think time is left out). Deterministic: rerunning step 2 gives the
same figures. Writes bench/results/log/fs/README.md (tables above the
analysis marker, which is kept), summary.json and the figures
update.svg, read.svg and read-idle.svg.

Usage: bench/log_iotest_fs.py [--fs ext4,btrfs] [--utils 10,...,95] [--no-capture]
                              [--idle-s 3600] [--jobs 2] [-- bench/run options]
Needs root for the capture (see bench/run --help), and target/release/layoutd.
"""
import concurrent.futures
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench/harness"))
import capreplay  # noqa: E402
import readme  # noqa: E402
import svg  # noqa: E402
import tracefile  # noqa: E402
from log_fs import DISK, SIZE  # noqa: E402
from log_sim import STACKS, MARKER, layoutd  # noqa: E402
from rig import FILE_SYSTEMS  # noqa: E402

OUT = os.path.join(ROOT, "bench/results/log/fs")
TMP = os.path.join(OUT, "tmp")
LOGS = STACKS[1:]
# btrfs on `log`: the default policy only (the table has btrfs in place).
BTRFS_STACKS = ["linear", "adaptive"]
PHASES = ("create", "delete", "update", "read")


def capture_dir(fs, util):
    return os.path.join(OUT, f"capture-{fs}-{util}")


# ext4 without blocks reserved for root, so that "90% full" (df's Use%) is 90% of its blocks.
MKFS = {"ext4": ["--mkfs-opts=-m 0 " + FILE_SYSTEMS["ext4"]["default_mkfs_opts"]]}


def capture(fs, util, extra):
    cmd = [os.path.join(ROOT, "bench/run"), "log-iotest", "--fs", fs, "--util", str(util), "--size", SIZE,
           *MKFS.get(fs, []), "--out", os.path.relpath(capture_dir(fs, util), ROOT), *extra]
    print(f"capture: {' '.join(cmd)}", file=sys.stderr)
    subprocess.run(cmd, check=True, cwd=ROOT)  # the results name the checkout's paths only


def traces(fs, util, idle_s):
    """The capture as one stream (`base`), with idle_s seconds before the
    read phase (`idle`), and up to the update phase (`prefix`)."""
    d = capture_dir(fs, util)
    src = os.path.join(d, "trace.gz")
    result = json.load(open(os.path.join(d, "result.json")))
    ph = {p["name"]: p["markers"] for p in result["phases"]}
    lines = {k: m["line"] for k, m in tracefile.markers(src, result["rig"]["export_bytes"]).items()}
    t = os.path.join(TMP, f"{fs}-{util}")
    return {"base": tracefile.one_stream(src, t + ".trace.gz"),
            "idle": tracefile.one_stream(src, t + "-idle.trace.gz", gap_at_line=lines[ph["read"][0]],
                                         gap_ns=int(idle_s * 1e9)),
            "prefix": tracefile.one_stream(src, t + "-prefix.trace.gz", stop_at_line=lines[ph["update"][0]])}


def replay(l, fs, util, stack, kind, trace):
    """One replay; (fs, util, stack, kind, {busy_s per phase, log counters, disk busy})."""
    base = os.path.join(TMP, f"{fs}-{util}-{stack}-{kind}")
    config = os.path.join(ROOT, "bench/workloads/log", stack + ".toml")
    if kind == "prefix":
        cmd = [l, "sim", "--trace", trace, "--format", "layoutd", "--no-stream-detect", "--config", config,
               "--disk", DISK, "--closed-loop", "--no-progress", "--json", base + ".json"]
        subprocess.run(cmd, check=True, capture_output=True)
        j, phases = json.load(open(base + ".json")), {}
    else:
        j, phases = capreplay.replay(l, trace, config, DISK, base, capture_dir(fs, util))
    counters = next((x["counters"] for x in j["stack"]["layers"] if x["target"] == "log"), None)
    return fs, util, stack, kind, {"busy_s": {k: v["busy_s"] for k, v in phases.items()}, "log": counters,
                                   "disk_busy_s": j["disk_busy_seconds"]}


SLOTS = ("slots_user_count", "slots_ssr_count", "slots_cleaning_count", "slots_plugging_count",
         "summary_slots_count")


def update_wa(run):
    """Slots written for any cause (summary slots of partial writes
    included, re-sequencing not) over slots of user data, from the update
    phase's start to the end of the run (the prefix's counters subtracted)."""
    c, p = run["base"]["log"], run["prefix"]["log"]
    d = {k: c.get(k, 0) - p.get(k, 0) for k in SLOTS}
    user = d["slots_user_count"] + d["slots_ssr_count"]
    return sum(d.values()) / user if user else float("nan")


def idle_cell(run, lin):
    """The read after idle (x ext4 in place) and the idle work: slots
    re-sequenced + slots cleaned, disk busy seconds (the idle run's disk
    time less the run without idle, with the read phases' difference put back)."""
    b, i = run["base"], run["idle"]
    t = i["busy_s"]["read"]
    moved = i["log"]["slots_resequence_count"] - b["log"]["slots_resequence_count"]
    cleaned = sum(i["log"][k] - b["log"][k] for k in ("slots_cleaning_count", "slots_plugging_count"))
    busy = i["disk_busy_s"] - b["disk_busy_s"] + b["busy_s"]["read"] - t
    return t, f"{t:.1f} ({t / lin:.2f}x; {moved}+{cleaned}, {busy:.0f} s)"


def head(extra=()):
    """A table's two header lines: the utilisation, the stacks, `extra` columns."""
    cols = ["util", "ext4", "btrfs", "btrfs/adaptive", *LOGS, *extra]
    return ["| " + " | ".join(cols) + " |", "| " + " | ".join("---:" for _ in cols) + " |"]


def enospc(fs, util):
    """'; ENOSPC after N MiB' if the capture's update phase ran out of space."""
    r = json.load(open(os.path.join(capture_dir(fs, util), "result.json")))
    up = next(p for p in r["phases"] if p["name"] == "update")
    return f"; ENOSPC after {up['update_bytes'] >> 20} MiB" if up.get("enospc") else ""


def report(res, utils, idle_s, cmd):
    e, bt = res.get("ext4", {}), res.get("btrfs", {})
    us = [u for u in utils if str(u) in e]
    L = ["# `log`: the IO TEST on ext4 and btrfs, captured and replayed on the paper's disk", "",
         "A benchmark, not a test. Per utilisation, the IO TEST (bench/workloads/log_iotest_fs.py: 64 KiB files "
         "created until the file system is 90% full, random ones deleted down to the utilisation, 512 MiB of "
         "random 4 KiB O_DIRECT updates inside the remaining files, then the remaining files read in creation "
         f"order with cold caches) is captured live on a plain {SIZE} volume (`bench/run log-iotest`, tmpfs "
         "speed, mounted with `discard`; `capture-FS-U/`), then replayed closed-loop in `layoutd sim` on "
         f"`{DISK}` through `linear` (in place) and `log` (examples/log.toml's defaults, 1200 MiB below) with "
         "each policy. Deterministic.", "",
         f"Reproduce: `cargo build --release -p layoutd && {cmd}` (the replay half alone: add `--no-capture`).",
         "", "Cells: disk-busy seconds of the phase, between its marker reads (x ext4 on linear). `btrfs` = "
         "btrfs on linear (in place); `btrfs/adaptive` = btrfs on `log` with the default policy.", "",
         "## Update phase: seconds (update write amplification, slots cleaned or plugged / SSR slots)", "",
         *head(["best log / ext4", "adaptive / best"])]

    def bcell(u, stack, phase, lin):
        r = bt.get(str(u), {}).get(stack)
        if not r:
            return "-"
        v = r["base"]["busy_s"][phase]
        return f"{v:.1f} ({v / lin:.2f}x{enospc('btrfs', u) if phase == 'update' else ''})"

    for u in us:
        r = e[str(u)]
        lin = r["linear"]["base"]["busy_s"]["update"]
        cells, times = [], {}
        for s in LOGS:
            c, t = r[s]["base"]["log"], r[s]["base"]["busy_s"]["update"]
            times[s] = t
            cells.append(f"{t:.1f} ({update_wa(r[s]):.2f}, {c['slots_cleaning_count'] + c['slots_plugging_count']}"
                         f"/{c['slots_ssr_count']})")
        best = min(times.values())
        L.append(f"| {u}% | {lin:.1f} | {bcell(u, 'linear', 'update', lin)} | {bcell(u, 'adaptive', 'update', lin)} | "
                 + " | ".join(cells) + f" | {best / lin:.2f} | {times['adaptive'] / best:.2f} |")
    L += ["", "## Sequential read of the remaining files right after the updates: seconds (x ext4 on linear)", "",
          *head()]
    for u in us:
        r = e[str(u)]
        lin = r["linear"]["base"]["busy_s"]["read"]
        L.append(f"| {u}% | {lin:.1f} | {bcell(u, 'linear', 'read', lin)} | {bcell(u, 'adaptive', 'read', lin)} | "
                 + " | ".join(f"{r[s]['base']['busy_s']['read']:.1f} ({r[s]['base']['busy_s']['read'] / lin:.2f}x)"
                              for s in LOGS) + " |")
    L += ["", f"## The same read after {idle_s} s without requests before it: seconds (x ext4 on linear), and the "
          "idle work: slots re-sequenced + slots cleaned for it, disk busy seconds", "",
          "In place, idle time changes nothing: the `ext4` and `btrfs` columns are the reads above.", "",
          *head()]
    for u in us:
        r = e[str(u)]
        lin = r["linear"]["base"]["busy_s"]["read"]
        ba = bt.get(str(u), {}).get("adaptive")
        L.append(f"| {u}% | {lin:.1f} | {bcell(u, 'linear', 'read', lin)} | "
                 f"{idle_cell(ba, lin)[1] if ba and 'idle' in ba else '-'} | "
                 + " | ".join(idle_cell(r[s], lin)[1] for s in LOGS) + " |")
    L += ["", "Update write amplification: slots written for any cause (partial writes' summary slots "
          "included, re-sequencing not) over slots of user data, from the update phase's first request to the "
          "end of the run (a replay of the capture's prefix before the update phase, subtracted). Counts: whole "
          "run.", "", "![update phase](update.svg)", "", "![read after the updates](read.svg)", "",
          f"![read after {idle_s} s idle](read-idle.svg)", ""]
    readme.write_keeping_notes(os.path.join(OUT, "README.md"), L + [MARKER], MARKER)
    print("\n".join(L))
    # Figures: five of the columns (the svg palette has six colours).
    cats = [f"{u}%" for u in us]
    shown = ["greedy", "plugging", "ssr", "adaptive"]

    def series(phase, kind):
        s = [("ext4", [e[str(u)]["linear"]["base"]["busy_s"][phase] for u in us]),
             ("btrfs", [bt[str(u)]["linear"]["base"]["busy_s"][phase] if str(u) in bt else None for u in us])]
        return s + [(f"ext4/{p}", [e[str(u)][p][kind]["busy_s"][phase] for u in us]) for p in shown]
    svg.bars(os.path.join(OUT, "update.svg"), "IO TEST on st3160815as: update phase, disk-busy seconds", cats,
             series("update", "base"), "seconds")
    svg.bars(os.path.join(OUT, "read.svg"), "sequential read right after the updates, disk-busy seconds", cats,
             series("read", "base"), "seconds")
    svg.bars(os.path.join(OUT, "read-idle.svg"), f"the read after {idle_s} s idle (log stacks), seconds", cats,
             series("read", "idle"), "seconds")


def main():
    ap = capreplay.parser(__doc__)
    ap.add_argument("--utils", default="10,20,30,40,50,60,70,80,90,95")
    ap.add_argument("--idle-s", type=int, default=3600)
    a = ap.parse_args()
    utils = [int(u) for u in a.utils.split(",")]
    os.makedirs(TMP, exist_ok=True)
    l = layoutd()
    tracefile.use(l)
    fss = []
    for u in utils:
        fss = capreplay.captures(a, "log_iotest_fs", lambda fs, extra, u=u: capture(fs, u, extra),
                                 lambda fs, u=u: capture_dir(fs, u))
    summary = os.path.join(OUT, "summary.json")
    res = json.load(open(summary))["runs"] if os.path.exists(summary) else {}
    jobs = []
    for fs in fss:
        for u in utils:
            t = traces(fs, u, a.idle_s)
            res.setdefault(fs, {}).pop(str(u), None)
            for s in (STACKS if fs == "ext4" else BTRFS_STACKS):
                jobs += [(fs, u, s, k, t[k]) for k in (("base",) if s == "linear" else ("base", "idle", "prefix"))]
    with concurrent.futures.ThreadPoolExecutor(a.jobs) as ex:
        for fs, u, s, k, r in ex.map(lambda j: replay(l, *j), jobs):
            res.setdefault(fs, {}).setdefault(str(u), {}).setdefault(s, {})[k] = r
            print(f"{fs:6} {u:3}% {s:14} {k:6} " + " ".join(f"{p} {v:8.1f}" for p, v in r["busy_s"].items()),
                  file=sys.stderr)
    with open(summary, "w") as fh:
        json.dump({"disk": DISK, "idle_s": a.idle_s, "runs": res}, fh, indent=1)
    cmd = "sudo bench/log_iotest_fs.py" + ("" if a.fs == "ext4,btrfs" else f" --fs {a.fs}") + \
        ("" if a.utils == "10,20,30,40,50,60,70,80,90,95" else f" --utils {a.utils}") + \
        ("" if a.idle_s == 3600 else f" --idle-s {a.idle_s}") + (" -- " + " ".join(a.run_args) if a.run_args else "")
    report(res, utils, a.idle_s, cmd)


if __name__ == "__main__":
    main()
