#!/usr/bin/env python3
"""A multi-day desktop-like block trace for the `opt` benchmark (layoutd
trace format, docs/trace-format.md), deterministic from its seed.

Twelve "programs" (start-ups, a build, git, grep, an editor) each read a
fixed list of files in a fixed order: shared libraries (a third of the
files, drawn from one pool of 60 files in one library area, so programs
share them) and files scattered over the whole used area, as on an aged
file system; each file read in one to four partial reads, not always in
file order. Every day runs the daily programs (0-5 by default) and each other one with
probability one half, each a second time with probability one half, in a
random order, with an idle gap of 1-4 s between runs; every run skips 10%
of its reads, adds 5% of reads of files it has never read (variation from
day to day), and the build and the editor also write (object files, saved
documents) and flush. Each run is its own stream (its process). Days are
exactly DAY_S long, so the simulator's phases (16 of equal width over the
trace) fall four to a day; programs start only in the first 55% of a day,
the rest is idle ("the night").

The trace is what reaches the block layer under a page cache, as the
paper's profiler saw it: a read of blocks already cached makes no request,
and one that misses fetches from its first missing block with the kernel's
first read-ahead window (`readahead`, up to 128 KiB, within the file). The
cache is cold every morning (`--cold-runs`: before every run, the cold
start-up experiment).

Besides the trace, OUT.plan-times gets one line per day: the time of the
day's last request in ms after the trace's first request, where a
`layoutd sim --message TIME:plan` trains on that day (and those before).

Day-to-day variation (what a plan trained on day 1 cannot know) has
three sources, each a parameter: `--skip` (the share of a program's reads
a run leaves out), `--new` (the share of reads of files never read before,
anywhere on the volume) and `--occasional` (how many of the twelve programs
run only on some days, each with probability one half; the others run
every day). `--variation S` scales all three from the defaults (S = 1:
skip 0.10, new 0.05, 6 occasional programs; S = 0: every day runs every
program's full list, only the order and the repeats vary); an explicit
`--skip`, `--new` or `--occasional` overrides its share. The occasional
programs are the last ones, so the two that write (6 and 9) turn daily
as fewer are occasional (6 with 3-5 occasional, both with 2 or fewer):
a low variation writes more.

    opt_desktop.py OUT.trace [--days 4] [--seed 1] [--volume-gib 40] [--same-days] [--cold-runs]
                   [--variation 1] [--skip 0.10] [--new 0.05] [--occasional 6] [--shared 0.35]
                   [--tags OUT.tags]
"""
import argparse
import random

DAY_S = 65.536  # 2^16 ms: with 4 days, 16 phases of 16.384 s, 4 a day
BLOCK = 4096
GIB = 1 << 30


def program(rng, volume, libs, index, shared):
    """The ordered read list of one program's start-up: (file start,
    file blocks, first block read, blocks read) each; a file is a shared
    library with probability `shared`."""
    home = rng.randrange(GIB, volume - GIB) // BLOCK * BLOCK
    files = []
    for _ in range(rng.randrange(25, 70)):
        if rng.random() < shared:
            files.append(rng.choice(libs))  # a shared library
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
            reqs.append((start, blocks, o, n))
    return {"index": index, "reqs": reqs, "home": home, "writes": index in (6, 9)}


def readahead(n):
    """Blocks the kernel's first (synchronous) read-ahead of an n-block
    read fetches (Linux's get_init_ra_size with a 128 KiB window)."""
    p = 1 << (n - 1).bit_length()
    return min(32, 4 * p if p <= 1 else 2 * p)


def through_cache(cache, start, blocks, o, n):
    """The block request (offset, length) a file read of blocks [o, o+n)
    makes below a page cache holding `cache` (absolute blocks), or None
    when every block is cached; the fetched blocks join the cache."""
    first = start // BLOCK
    todo = [b for b in range(first + o, first + o + n) if b not in cache]
    if not todo:
        return None
    end = max(todo[0] + readahead(n), todo[-1] + 1)
    end = min(end, first + blocks)
    fetch = range(todo[0], end)
    cache.update(fetch)
    return (todo[0] * BLOCK, len(fetch) * BLOCK)


def run(rng, prog, volume, t_ns, stream, out, skip, new, cache):
    """One run of `prog` starting at t_ns; returns the time after it."""
    for start, blocks, o, n in prog["reqs"]:
        if rng.random() < skip:
            continue
        if rng.random() < new:
            extra = rng.randrange(0, volume - (64 << 10)) // BLOCK * BLOCK
            req = through_cache(cache, extra, 16, 0, rng.choice([1, 2, 4]))
            if req:
                out.append((t_ns, stream, "R") + req + ("new", prog["index"]))
            t_ns += rng.randrange(200_000, 2_000_000)
        req = through_cache(cache, start, blocks, o, n)
        if req:
            out.append((t_ns, stream, "R") + req + ("program", prog["index"]))
        t_ns += rng.randrange(200_000, 2_000_000)
    if prog["writes"]:
        for _ in range(rng.randrange(20, 60)):
            off = (prog["home"] + rng.randrange(0, 64 << 20)) // BLOCK * BLOCK
            out.append((t_ns, stream, "W", off, rng.choice([4096, 8192, 32768]), "write", prog["index"]))
            t_ns += rng.randrange(200_000, 1_000_000)
        out.append((t_ns, stream, "F", 0, 0, "write", prog["index"]))
        t_ns += 1_000_000
    return t_ns


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--days", type=int, default=4)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--volume-gib", type=int, default=40)
    ap.add_argument(
        "--variation", type=float, default=1.0, help="scale of skip, new and occasional (1: 0.10, 0.05, 6)"
    )
    ap.add_argument("--skip", type=float, help="share of a program's reads a run skips (0.10 x variation)")
    ap.add_argument("--new", type=float, help="share of reads of never-read files added (0.05 x variation)")
    ap.add_argument(
        "--occasional", type=int, help="programs (of 12) run only on some days (6 x variation, rounded)"
    )
    ap.add_argument(
        "--shared", type=float, default=0.35, help="share of a program's files drawn from the shared library pool"
    )
    ap.add_argument("--tags", help="also write each request's kind and program here, one line each")
    ap.add_argument("--same-days", action="store_true", help="every day runs every program once, in one order")
    ap.add_argument(
        "--cold-runs", action="store_true", help="drop the page cache before every run (cold start-ups)"
    )
    a = ap.parse_args()
    a.skip = 0.10 * a.variation if a.skip is None else a.skip
    a.new = 0.05 * a.variation if a.new is None else a.new
    a.occasional = round(6 * a.variation) if a.occasional is None else a.occasional
    assert 0 <= a.occasional <= 12, "--occasional: 0 to 12 programs"
    rng = random.Random(a.seed)
    volume = a.volume_gib * GIB
    lib_base = rng.randrange(2 * GIB, volume - 2 * GIB) // BLOCK * BLOCK
    libs = [
        ((lib_base + rng.randrange(-(512 << 20), 512 << 20)) // BLOCK * BLOCK, rng.randrange(2, 24))
        for _ in range(60)
    ]
    progs = [program(rng, volume, libs, i, a.shared) for i in range(12)]
    out = []
    stream = 1
    for day in range(a.days):
        t = int(day * DAY_S * 1e9) + 500_000_000
        end = int((day + 0.55) * DAY_S * 1e9)
        cache = set()  # the page cache, cold every morning
        if a.same_days:
            today = list(progs)
        else:
            daily = 12 - a.occasional
            today = [p for p in progs if p["index"] < daily or rng.random() < 0.5]
            today += [p for p in today if rng.random() < 0.5]  # run twice
            rng.shuffle(today)
        for p in today:
            if t >= end:
                break
            if a.cold_runs:
                cache = set()
            t = run(rng, p, volume, t, stream, out, a.skip, a.new, cache)
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
        for t, s, op, off, n, _, _ in out:
            f.write(f"{t} {t} {s} {op} {off} {n} -\n")
    if a.tags:
        with open(a.tags, "w") as f:
            f.write("# per request of the trace, in its order: kind (program, new, write) and program index\n")
            for r in out:
                f.write(f"{r[5]} {r[6]}\n")


if __name__ == "__main__":
    main()
