#!/usr/bin/env python3
"""Why the read right after the IO TEST's updates is slow on `log`: the disk
requests of the read phase (ext4 captures of bench/log_iotest_fs.py,
replayed on st3160815as), counted below the stack.

Per utilisation and stack (ext4 in place on `linear`, ext4 on `log` with the
given policies), with IDLE seconds before the read (--idles, default 0 and
3600): the capture is replayed twice, deterministically: through the
stack's config (its top `trace` layer gives the read phase's window in
simulated time), and through the same config with the `trace` layer moved
below the `log` (the lower requests). Of the lower requests submitted in
the read phase's window: reads, MiB read, seeks (a read that does not
start where the previous lower request ended), seeks per MiB of the
phase's upper reads, mean ms per lower read (busy seconds over reads).

Writes bench/results/log/fs/read-seeks.md and .json.

Usage: bench/log_read_seeks.py [--utils 10,50,90] [--stacks adaptive] [--idles 0,3600]
Needs target/release/layoutd.
"""
import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench/harness"))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import readme  # noqa: E402
import tracefile  # noqa: E402
from log_idle_sweep import FS, read_line  # noqa: E402
from log_iotest_fs import DISK, OUT, TMP, capture_dir  # noqa: E402
from log_sim import MARKER, layoutd  # noqa: E402


def lower_config(stack):
    """The stack's config with its `trace` layer below the `log`."""
    text = open(os.path.join(ROOT, "bench/workloads/log", stack + ".toml")).read()
    top = '[[layer]]\ntarget = "trace"\n'
    assert top in text
    text = text.replace(top, "", 1).replace('[[layer]]\ntarget = "linear"', top + '\n[[layer]]\ntarget = "linear"', 1)
    out = os.path.join(TMP, f"{stack}-lower-trace.toml")
    with open(out, "w") as fh:
        fh.write(text)
    return out


def trace_for(util, idle):
    src, line = read_line(util)
    t = os.path.join(TMP, f"{FS}-{util}-idle{float(idle)}.trace.gz")
    if not os.path.exists(t):
        tracefile.one_stream(src, t, gap_at_line=line, gap_ns=int(idle * 1e9))
    return t


def lower_stats(l, util, stack, idle):
    trace = trace_for(util, idle)
    d = capture_dir(FS, util)
    top = os.path.join(TMP, f"seeks-{util}-{stack}-{idle}-top")
    cfg = os.path.join(ROOT, "bench/workloads/log", stack + ".toml")
    # Top: keep the record to find the read window (between the read phase's markers).
    subprocess.run([l, "sim", "--trace", trace, "--format", "layoutd", "--no-stream-detect", "--config", cfg,
                    "--disk", DISK, "--closed-loop", "--no-progress", "--record-trace", top + ".rec", "--json",
                    top + ".json"], check=True, capture_output=True)
    result = json.load(open(os.path.join(d, "result.json")))
    eb = result["rig"]["export_bytes"]
    mk = tracefile.markers(top + ".rec", eb)
    rd = next(p for p in result["phases"] if p["name"] == "read")["markers"]
    lo, hi = mk[rd[0]]["complete_ns"], mk[rd[1]]["submit_ns"]
    up = tracefile.stats(top + ".rec", eb, rd)
    os.unlink(top + ".rec")
    if stack == "linear":
        rec_cfg = cfg
    else:
        rec_cfg = lower_config(stack)
    low = os.path.join(TMP, f"seeks-{util}-{stack}-{idle}-low")
    subprocess.run([l, "sim", "--trace", trace, "--format", "layoutd", "--no-stream-detect", "--config", rec_cfg,
                    "--disk", DISK, "--closed-loop", "--no-progress", "--record-trace", low + ".rec", "--json",
                    low + ".json"], check=True, capture_output=True)
    reads = seeks = nbytes = 0
    end = None
    dist = 0
    for line in open(low + ".rec"):
        if line.startswith("#") or not line.strip():
            continue
        sub, _com, _s, op, off, length = line.split()[:6]
        sub, off, length = int(sub), int(off), int(length)
        if sub < lo or sub > hi:
            end = off + length if op in ("R", "W") else end
            continue
        if op == "R":
            reads += 1
            nbytes += length
            if end is not None and off != end:
                seeks += 1
                dist += abs(off - end)
        if op in ("R", "W"):
            end = off + length
    os.unlink(low + ".rec")
    mib = up["read_bytes"] / 2**20 if up.get("read_bytes") else nbytes / 2**20
    return {"upper_read_mib": mib, "lower_reads": reads, "lower_read_mib": nbytes / 2**20, "seeks": seeks,
            "seeks_per_mib": seeks / mib if mib else 0, "busy_s": up["busy_seconds"],
            "ms_per_lower_read": 1000 * up["busy_seconds"] / reads if reads else 0,
            "mean_seek_mib": dist / seeks / 2**20 if seeks else 0}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--utils", default="10,50,90")
    ap.add_argument("--stacks", default="adaptive")
    ap.add_argument("--idles", default="0,3600")
    a = ap.parse_args()
    l = layoutd()
    tracefile.use(l)
    os.makedirs(TMP, exist_ok=True)
    res = {}
    rows = []
    for u in [int(x) for x in a.utils.split(",")]:
        runs = [("linear", 0)] + [(s, float(i)) for s in a.stacks.split(",") for i in a.idles.split(",")]
        for s, i in runs:
            r = lower_stats(l, u, s, i)
            res.setdefault(str(u), {})[f"{s}@{i:g}"] = r
            rows.append((u, s, i, r))
            print(u, s, i, r, file=sys.stderr)
    with open(os.path.join(OUT, "read-seeks.json"), "w") as fh:
        json.dump({"disk": DISK, "runs": res}, fh, indent=1)
    L = [f"# `log`: the read phase's disk requests (ext4 IO TEST captures, {DISK})", "",
         "A benchmark, not a test. The read phase of the committed ext4 captures replayed through ext4 in place "
         "and ext4 on `log`, with IDLE seconds before it; the lower requests (a `trace` layer below the `log`) "
         "submitted inside the read phase. A seek: a lower read that does not start where the previous lower "
         "request ended.", "",
         f"Reproduce: `cargo build --workspace --release && bench/log_read_seeks.py --utils {a.utils} --stacks "
         f"{a.stacks} --idles {a.idles}` (deterministic).", "",
         "| util | stack | idle | upper MiB read | lower reads | lower MiB | seeks | seeks per MiB | mean seek MiB "
         "| read busy s | ms per lower read |",
         "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for u, s, i, r in rows:
        L.append(f"| {u}% | {s} | {i:g} s | {r['upper_read_mib']:.0f} | {r['lower_reads']} | "
                 f"{r['lower_read_mib']:.0f} | {r['seeks']} | {r['seeks_per_mib']:.1f} | {r['mean_seek_mib']:.1f} | "
                 f"{r['busy_s']:.1f} | {r['ms_per_lower_read']:.2f} |")
    readme.write_keeping_notes(os.path.join(OUT, "read-seeks.md"), L + ["", MARKER], MARKER)
    print("\n".join(L))


if __name__ == "__main__":
    main()
