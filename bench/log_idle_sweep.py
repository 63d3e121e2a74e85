#!/usr/bin/env python3
"""The `log` IO TEST on ext4 (bench/log_iotest_fs.py's committed captures):
the sequential read after the update phase as a function of the idle time
before it (issue 13's goal "sequential read after the update phase within
1.2x of plain"; docs/log.md, idle re-sequencing).

Per utilisation and `log` stack (--stacks, default adaptive and ssr), the
capture is replayed with IDLE seconds of think time inserted before the
read phase, for each IDLE of --idles; then, per stack and utilisation, the
shortest idle that brings the read within --goal x of ext4 in place is
narrowed down by bisection between the two grid points around it
(--refine steps). ext4 in place (`linear`) is replayed once per
utilisation (idle time changes nothing there).

With --variant NAME --set KEY=VALUE ..., the `log` stacks get those keys
(a variant of the idle work) and the results go to idle-sweep-NAME.*.

Cells: read seconds (x ext4 in place). Writes
bench/results/log/fs/idle-sweep[-NAME].md and .json.

Usage: bench/log_idle_sweep.py [--utils 10,...,95] [--idles 0,10,30,60,300,900,3600]
                               [--stacks adaptive,ssr] [--refine 4] [--goal 1.2] [--jobs 2]
                               [--variant NAME --set KEY=VALUE ...]
Needs target/release/layoutd (cargo build --workspace --release).
"""
import argparse
import concurrent.futures
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench/harness"))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import capreplay  # noqa: E402
import readme  # noqa: E402
import tracefile  # noqa: E402
from log_iotest_fs import DISK, OUT, TMP, capture_dir  # noqa: E402
from log_sim import MARKER, layoutd, stack_config  # noqa: E402

FS = "ext4"


def read_line(util):
    """The line of the capture's read phase's first marker, and the capture."""
    d = capture_dir(FS, util)
    src = os.path.join(d, "trace.gz")
    result = json.load(open(os.path.join(d, "result.json")))
    ph = {p["name"]: p["markers"] for p in result["phases"]}
    lines = {k: m["line"] for k, m in tracefile.markers(src, result["rig"]["export_bytes"]).items()}
    return src, lines[ph["read"][0]]


def run(l, util, stack, idle, configs):
    """The read phase's disk-busy seconds and the log's counters, `idle`
    seconds inserted before it."""
    src, line = read_line(util)
    tag = f"{FS}-{util}-idle{idle}"
    trace = os.path.join(TMP, tag + ".trace.gz")
    if not os.path.exists(trace):
        tmp = trace + f".{os.getpid()}.{stack}"
        tracefile.one_stream(src, tmp, gap_at_line=line, gap_ns=int(idle * 1e9))
        os.replace(tmp, trace)
    base = os.path.join(TMP, f"sweep-{tag}-{stack}{'-' + os.path.basename(configs[stack])[:-5]}")
    j, phases = capreplay.replay(l, trace, configs[stack], DISK, base, capture_dir(FS, util))
    counters = next((x["counters"] for x in j["stack"]["layers"] if x["target"] == "log"), None)
    return {"read_s": phases["read"]["busy_s"], "update_s": phases["update"]["busy_s"],
            "disk_busy_s": j["disk_busy_seconds"], "log": counters}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--utils", default="10,20,30,40,50,60,70,80,90,95")
    ap.add_argument("--idles", default="0,10,30,60,300,900,3600")
    ap.add_argument("--stacks", default="adaptive,ssr")
    ap.add_argument("--refine", type=int, default=4, help="bisection steps for the shortest idle (default: 4)")
    ap.add_argument("--goal", type=float, default=1.2)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--variant")
    ap.add_argument("--set", action="append", default=[])
    a = ap.parse_args()
    utils = [int(u) for u in a.utils.split(",")]
    idles = [float(x) for x in a.idles.split(",")]
    stacks = a.stacks.split(",")
    variant = (a.variant, a.set) if a.variant else None
    os.makedirs(TMP, exist_ok=True)
    l = layoutd()
    tracefile.use(l)
    res = {}
    # Each stack's config, written once (a variant's copy in a temporary file).
    configs = {s: stack_config(s, variant if s != "linear" else None) for s in ["linear", *stacks]}

    def go(jobs):
        with concurrent.futures.ThreadPoolExecutor(a.jobs) as ex:
            for (u, s, i), r in zip(jobs, ex.map(lambda j: run(l, *j, configs), jobs)):
                res.setdefault(str(u), {}).setdefault(s, {})[str(i)] = r
                print(f"{u:3}% {s:10} idle {i:7.1f} s read {r['read_s']:8.1f}", file=sys.stderr)

    go([(u, "linear", 0) for u in utils] + [(u, s, i) for u in utils for s in stacks for i in idles])
    # Bisection between the last grid idle that misses the goal and the first that meets it.
    bounds = {}
    for u in utils:
        lin = res[str(u)]["linear"]["0"]["read_s"]
        for s in stacks:
            pts = sorted((float(i), r["read_s"]) for i, r in res[str(u)][s].items())
            meet = [i for i, t in pts if t <= a.goal * lin]
            if not meet:
                continue
            hi = meet[0]
            lo = max([i for i, t in pts if i < hi] or [hi])
            bounds[(u, s)] = [lo, hi]
    for _ in range(a.refine):
        jobs = []
        for (u, s), (lo, hi) in bounds.items():
            if hi - lo > max(1.0, 0.05 * hi):
                jobs.append((u, s, round((lo + hi) / 2, 1)))
        if not jobs:
            break
        go(jobs)
        for u, s, mid in jobs:
            lin = res[str(u)]["linear"]["0"]["read_s"]
            if res[str(u)][s][str(mid)]["read_s"] <= a.goal * lin:
                bounds[(u, s)][1] = mid
            else:
                bounds[(u, s)][0] = mid
    name = "idle-sweep" + (f"-{a.variant}" if a.variant else "")
    with open(os.path.join(OUT, name + ".json"), "w") as fh:
        json.dump({"disk": DISK, "set": a.set, "goal": a.goal, "runs": res,
                   "shortest": {f"{u}/{s}": b for (u, s), b in bounds.items()}}, fh, indent=1)
    report(res, utils, idles, stacks, bounds, a, name)


def report(res, utils, idles, stacks, bounds, a, name):
    sets = " ".join(f"--set {kv}" for kv in a.set)
    cmd = "bench/log_idle_sweep.py" + (f" --variant {a.variant} {sets}" if a.variant else "") + \
        ("" if a.utils == "10,20,30,40,50,60,70,80,90,95" else f" --utils {a.utils}") + \
        ("" if a.stacks == "adaptive,ssr" else f" --stacks {a.stacks}") + \
        ("" if a.idles == "0,10,30,60,300,900,3600" else f" --idles {a.idles}")
    L = [f"# `log`: the read after the update phase against idle time (ext4 captures, {DISK})", "",
         "A benchmark, not a test. The committed ext4 IO TEST captures (README.md) replayed with IDLE "
         "seconds without requests inserted before the read phase; the read's disk-busy seconds (x ext4 in "
         "place, which idle time does not change)." + (f" Variant: {', '.join(f'`{kv}`' for kv in a.set)}."
                                                        if a.set else ""), "",
         f"Reproduce: `cargo build --workspace --release && {cmd}` (deterministic).", ""]
    for s in stacks:
        L += [f"## {s}: read seconds (x ext4 in place) after IDLE seconds", "",
              "| util | ext4 | " + " | ".join(f"{i:g} s" for i in idles) + f" | shortest idle to {a.goal}x |",
              "| ---: | ---: | " + " | ".join("---:" for _ in idles) + " | ---: |"]
        for u in utils:
            r = res[str(u)]
            lin = r["linear"]["0"]["read_s"]
            cells = [f"{r[s][str(i)]['read_s']:.1f} ({r[s][str(i)]['read_s'] / lin:.2f}x)" for i in idles]
            b = bounds.get((u, s))
            short = f"{b[0]:g}-{b[1]:g} s" if b and b[0] != b[1] else (f"{b[1]:g} s" if b else "not reached")
            L.append(f"| {u}% | {lin:.1f} | " + " | ".join(cells) + f" | {short} |")
        L.append("")
    L.append("Shortest idle: the read meets the goal after the upper bound and misses it after the lower "
             "(bisection between grid points; extra points in the JSON).")
    readme.write_keeping_notes(os.path.join(OUT, name + ".md"), L + ["", MARKER], MARKER)
    print("\n".join(L))


if __name__ == "__main__":
    main()
