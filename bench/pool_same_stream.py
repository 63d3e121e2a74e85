#!/usr/bin/env python3
"""The pool's goal rows on the live kernel captures, one request stream
through each stack (issue 14; bench/results/pool/README.md, session 25).

The live runs under bench/results/pool/live-kernel-* each ran one stack, so
"build on the origin vs on a plain volume" across two of them compares two
different request streams (the same `make` sends 8% more or fewer requests
from run to run). Here each live capture is replayed through plain `linear`
and through pool stacks of bench/workloads/pool/kernel/ (the configs of
bench/pool_kernel.py), closed-loop as one stream with the emulator's disk
model (wd800, fifo, depth 1):

  - the plain run (live-kernel-linear, no snapshots): the snapshot messages
    go where the pool runs made their snapshots (before the build; after the
    `list` phase, which is the pool run's snapshot-2);
  - a pool run: only the origin's requests (the snapshot export's reads are
    left out, as the plain volume has no snapshot), with its own messages.

Prints and writes bench/results/pool/same-stream.md (disk-busy seconds per
phase and the build / grep rows against plain). Deterministic.

Usage: bench/pool_same_stream.py [--stacks a,b,...]
"""
import argparse
import gzip
import json
import os
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench/harness"))
import capreplay  # noqa: E402
import readme  # noqa: E402
import tracefile  # noqa: E402

OUT = os.path.join(ROOT, "bench/results/pool")
STACK_DIR = os.path.join(ROOT, "bench/workloads/pool/kernel")
CAPTURES = ["live-kernel-linear", "live-kernel-sliced-30-redirect-defrag", "live-kernel-contiguous-redirect",
            "live-kernel-sliced-30-redirect-defrag-partial"]
# The plain run has no snapshot phases: where the pool runs made theirs, as
# (phase, before its first (0) or last (1) marker, message): snap1 before the
# build; snapshot-2 (here `list`) deletes snap1, lists the files, creates snap2.
PLAIN_SNAPSHOTS = [("build", 0, "snapshot create snap1 ro"), ("list", 0, "snapshot delete snap1"),
                   ("list", 1, "snapshot create snap2 ro")]
PHASES = ["unpack", "build", "grep-origin", "rewrite", "grep-origin-2"]
MARKER = "<!-- Notes below this line are written by hand and kept when bench/pool_same_stream.py rewrites this file. -->"


def origin_stream(src, dst, export_bytes):
    """The capture's origin requests (slot 0) as one stream."""
    with gzip.open(src, "rt") as f, gzip.open(dst, "wt") as o:
        for ln in f:
            if ln.startswith("#"):
                o.write(ln)
                continue
            p = ln.split()
            if int(p[4]) < export_bytes:
                o.write(" ".join(p[:2] + ["0"] + p[3:]) + "\n")


def phases_with_messages(result):
    """The run's phases; the plain run's get the pool runs' snapshot points."""
    plain = not result["params"].get("snapshots", True)
    out = []
    for p in result["phases"]:
        q = dict(p)
        if plain:
            q["messages"] = [[p["markers"][end], text] for name, end, text in PLAIN_SNAPSHOTS if name == p["name"]]
        out.append(q)
    return out


def replay(l, trace, stack, phases, eb, work):
    msgs = [] if stack == "plain" else tracefile.messages(trace, eb, phases)
    base = os.path.join(work, "sim")
    cmd = [l, "sim", "--trace", trace, "--format", "layoutd", "--disk", "wd800", "--closed-loop", "--scheduler", "fifo",
           "--queue-depth", "1", "--config", os.path.join(STACK_DIR, stack + ".toml"), "--record-trace", base + ".rec",
           "--json", base + ".json", "--no-progress", *[f"--message=@{n}:{t}" for n, t in msgs]]
    kept = [ph for ph in phases if ph["name"] in PHASES]
    j, cut = capreplay.run_cut(cmd, base, eb, [ph["markers"] for ph in kept])
    if j["errors_count"]:
        raise RuntimeError(f"{stack}: {j['errors_count']} requests failed: {j['first_errors']}")
    busy = {ph["name"]: c["busy_s"] for ph, c in zip(kept, cut)}
    pool = next((x["counters"] for x in j["stack"]["layers"] if x["target"] == "pool"), {})
    return {"busy": busy, "defrag_moves": pool.get("defrag_moves_count"), "messages": msgs}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--stacks", default="sliced-30-redirect-defrag,sliced-30-redirect-defrag-write-zeroes,"
                    "sliced-30-redirect,contiguous-redirect,contiguous-redirect-write-zeroes,"
                    "contiguous-redirect-defrag,nearest-redirect,nearest-redirect-nodefrag", help="pool stacks of bench/workloads/pool/kernel/ (default: %(default)s)")
    a = ap.parse_args()
    l = os.path.join(ROOT, "target/release/layoutd")
    tracefile.use(l)
    stacks = ["plain"] + [s for s in a.stacks.split(",") if s]
    res = {}
    with tempfile.TemporaryDirectory(prefix="pool-same-stream-") as work:
        for cap in CAPTURES:
            d = os.path.join(OUT, cap)
            result = json.load(open(os.path.join(d, "result.json")))
            eb = result["rig"]["export_bytes"]
            trace = os.path.join(work, cap + ".trace.gz")
            origin_stream(os.path.join(d, "trace.gz"), trace, eb)
            phases = phases_with_messages(result)
            for st in stacks:
                res.setdefault(cap, {})[st] = replay(l, trace, st, phases, eb, work)
                print(f"{cap} {st}: " + ", ".join(f"{k} {v:.2f}" for k, v in res[cap][st]["busy"].items()),
                      file=sys.stderr)
    with open(os.path.join(OUT, "same-stream.json"), "w") as fh:
        json.dump(res, fh, indent=1)
    L = ["# pool: the goal rows on the live captures, one request stream through each stack", "",
         "A benchmark, not a test. Each live capture of `live-kernel-*/` replayed closed-loop as one stream through "
         "plain `linear` and each pool stack of `bench/workloads/pool/kernel/` on wd800 (fifo, depth 1, as the "
         "emulator); the plain run gets the snapshot messages where the pool runs made their snapshots, a pool "
         "run's capture keeps only the origin's requests. Reproduce: `bench/pool_same_stream.py` (deterministic).",
         "", "Cells: disk-busy seconds of the phase (simulated); in parentheses against plain on the same capture.", ""]
    for cap, r in res.items():
        L += [f"## {cap}", "", "| stack | " + " | ".join(PHASES) + " | defrag moves |",
              "| --- | " + " | ".join("---:" for _ in PHASES) + " | ---: |"]
        for st in stacks:
            b, pb = r[st]["busy"], r["plain"]["busy"]
            cells = [f"{b[n]:.2f}" + ("" if st == "plain" else f" ({(b[n] / pb[n] - 1) * 100:+.1f}%)") for n in PHASES]
            L.append(f"| {st} | " + " | ".join(cells) + f" | {r[st]['defrag_moves'] if r[st]['defrag_moves'] is not None else '—'} |")
        L.append("")
    readme.write_keeping_notes(os.path.join(OUT, "same-stream.md"), L + [MARKER], MARKER)
    print("\n".join(L))


if __name__ == "__main__":
    main()
