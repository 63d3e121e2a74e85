#!/usr/bin/env python3
"""A multi-day desktop-like block trace for the `opt` benchmark (layoutd
trace format, docs/trace-format.md), deterministic from its seed.

Twelve "programs" (start-ups, a build, git, grep, an editor) each read a
fixed list of files in a fixed order: shared libraries in one library area
(a third of the files), the rest scattered over the whole used area, as on
an aged file system; each file read in one to four partial requests, not
always in file order. Every day runs the
daily programs (0-5) and each other one with probability one half, in a
random order, one to two runs each, with an idle gap of 1-4 s between runs;
every run skips 10% of its reads, adds 5% of reads of files it has never
read (variation from day to day), and the build and the editor also write
(object files, saved documents) and flush. Each run is its own stream (its
process). Days are exactly DAY_S long, so the simulator's phases (16 of
equal width over the trace) fall four to a day; programs start only in the
first 55% of a day, the rest is idle ("the night").

Besides the trace, OUT.plan-times gets one line per day: the time of the
day's last request in ms after the trace's first request, where a
`layoutd sim --message TIME:plan` trains on that day (and those before).

    opt_desktop.py OUT.trace [--days 4] [--seed 1] [--volume-gib 40]
"""
import argparse
import random

DAY_S = 65.536  # 2^16 ms: with 4 days, 16 phases of 16.384 s, 4 a day
BLOCK = 4096
GIB = 1 << 30


def program(rng, volume, lib_base, index):
    """The ordered request list (offset, length) of one program's start-up."""
    home = rng.randrange(GIB, volume - GIB) // BLOCK * BLOCK
    files = []
    for _ in range(rng.randrange(25, 70)):
        if rng.random() < 0.35:
            start = (lib_base + rng.randrange(-(512 << 20), 512 << 20)) // BLOCK * BLOCK
        else:
            start = rng.randrange(0, volume - (1 << 20)) // BLOCK * BLOCK
        files.append((start, rng.randrange(2, 24)))
    reqs = []
    for start, blocks in files:
        pieces = rng.randrange(1, 5)
        offsets = sorted(rng.sample(range(blocks), min(pieces, blocks)))
        if rng.random() < 0.3:
            rng.shuffle(offsets)  # not always in file order
        for o in offsets:
            n = rng.randrange(1, min(8, blocks - o) + 1)
            reqs.append((start + o * BLOCK, n * BLOCK))
    return {"index": index, "reqs": reqs, "home": home, "writes": index in (6, 9)}


def run(rng, prog, volume, t_ns, stream, out, skip, new):
    """One run of `prog` starting at t_ns; returns the time after it."""
    for off, length in prog["reqs"]:
        if rng.random() < skip:
            continue
        if rng.random() < new:
            extra = rng.randrange(0, volume - (64 << 10)) // BLOCK * BLOCK
            out.append((t_ns, stream, "R", extra, rng.choice([4096, 8192, 16384])))
            t_ns += rng.randrange(200_000, 2_000_000)
        out.append((t_ns, stream, "R", off, length))
        t_ns += rng.randrange(200_000, 2_000_000)
    if prog["writes"]:
        for _ in range(rng.randrange(20, 60)):
            off = (prog["home"] + rng.randrange(0, 64 << 20)) // BLOCK * BLOCK
            out.append((t_ns, stream, "W", off, rng.choice([4096, 8192, 32768])))
            t_ns += rng.randrange(200_000, 1_000_000)
        out.append((t_ns, stream, "F", 0, 0))
        t_ns += 1_000_000
    return t_ns


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--days", type=int, default=4)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--volume-gib", type=int, default=40)
    ap.add_argument("--skip", type=float, default=0.10, help="share of a program's reads a run skips")
    ap.add_argument("--new", type=float, default=0.05, help="share of reads of never-read files added")
    ap.add_argument("--same-days", action="store_true", help="every day runs every program once, in one order")
    a = ap.parse_args()
    rng = random.Random(a.seed)
    volume = a.volume_gib * GIB
    lib_base = rng.randrange(2 * GIB, volume - 2 * GIB) // BLOCK * BLOCK
    progs = [program(rng, volume, lib_base, i) for i in range(12)]
    out = []
    stream = 1
    for day in range(a.days):
        t = int(day * DAY_S * 1e9) + 500_000_000
        end = int((day + 0.55) * DAY_S * 1e9)
        if a.same_days:
            today = list(progs)
        else:
            today = [p for p in progs if p["index"] < 6 or rng.random() < 0.5]
            today = today * 2
            today = rng.sample(today, rng.randrange(len(today) // 2, len(today)))
        for p in today:
            if t >= end:
                break
            t = run(rng, p, volume, t, stream, out, a.skip, a.new)
            stream += 1
            t += rng.randrange(1_000_000_000, 4_000_000_000)
    out.sort(key=lambda r: r[0])
    first = out[0][0]
    with open(a.out.removesuffix(".trace") + ".plan-times", "w") as f:
        for day in range(a.days):
            last = max(r[0] for r in out if int(r[0] // (DAY_S * 1e9)) == day)
            f.write(f"{(last - first) // 1_000_000}\n")
    with open(a.out, "w") as f:
        f.write("# layoutd-trace v1: submit_ns complete_ns stream op offset_bytes length_bytes flags\n")
        for t, s, op, off, n in out:
            f.write(f"{t} {t} {s} {op} {off} {n} -\n")


if __name__ == "__main__":
    main()
