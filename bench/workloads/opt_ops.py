#!/usr/bin/env python3
"""Where the held-out I/O time of the `opt` benchmark goes, by op and by
mapped or not (bench/results/opt/README.md, "Writes under opt"): for each
variation S and seed, days 2-4 of the 4-day trace replayed through plain,
opt with one plan after day 1 (CONFIG) and, with `--also`, further stacks
planned the same way (e.g. opt over a dcd). Each upper request is classed
by what the opt run did with it (its lower pieces, `opt_phases.run`'s
trace layer below opt: all in the OPT region, all home, or split) and by
its op; a home request is also told apart by whether day 1 touched its
blocks (read them, for a read; wrote them, for a write). Requests of
the runs are joined by (stream, index within the stream): the closed
loop moves submit times, not a stream's order. Per class: the median
over the seeds of its time as a share of plain's held-out I/O time (so
a column sums to about 1/speedup; medians of shares need not add up
exactly) and, in brackets, the median of the class's mean response; and
the request count.

    opt_ops.py CONFIG [LAYOUTD] [--also NAME=CONFIG ...] [--variations 0 0.5 1] [--seeds 1 2 3 4]
"""
import argparse
import collections
import os
import tempfile

import opt_phases
import opt_variation


def load_streams(path):
    """(stream, index within the stream) -> (submit, complete, op, offset,
    length), for a recorded trace."""
    out, seen = {}, collections.Counter()
    with open(path) as f:
        for line in f:
            if line.startswith("#"):
                continue
            r = line.split()
            s = int(r[2])
            out[(s, seen[s])] = (int(r[0]), int(r[1]), r[3], int(r[4]), int(r[5]))
            seen[s] += 1
    return out


def classify(trace, up, down):
    """(stream, index) -> class of each held-out request of the opt run."""
    read1, written1 = set(), set()
    for t, _, op, off, n in opt_phases.load(trace):
        if t < opt_phases.DAY_NS:
            (read1 if op == "R" else written1).update(opt_phases.blocks(off, n))
    pieces = collections.defaultdict(list)
    for r in opt_phases.load(down):
        pieces[r[0]].append(r)
    out = {}
    for key, (t, _, op, off, n) in load_streams(up).items():
        if t < opt_phases.DAY_NS:
            continue
        if op == "F":
            out[key] = "flush"
            continue
        kind = "read" if op == "R" else "write"
        in_opt = [opt_phases.OPT0 <= p[3] < opt_phases.OPT1 for p in pieces.get(t, [])]
        if in_opt and all(in_opt):
            out[key] = f"{kind}, mapped (OPT)"
        elif any(in_opt):
            out[key] = f"{kind}, split OPT + home"
        else:
            day1 = read1 if op == "R" else written1
            seen = all(b in day1 for b in opt_phases.blocks(off, n))
            verb = "read" if op == "R" else "wrote"
            out[key] = f"{kind}, home, day 1 {'' if seen else 'never '}{verb} it"
    return out


def times(up, classes):
    """Per class, (total response ms, count) of `up`'s held-out requests."""
    c = collections.defaultdict(lambda: [0.0, 0])
    for key, (t, done, *_rest) in load_streams(up).items():
        if key in classes:
            c[classes[key]][0] += (done - t) / 1e6
            c[classes[key]][1] += 1
    return c


def one(layoutd, config, also, s, seed, out):
    d = opt_variation.trace_dir(s, seed)
    trace = f"{d}/desktop-4days.trace.gz"
    plan = open(f"{d}/desktop-4days.plan-times").readline().strip()
    os.makedirs(f"{out}/plain")
    (plain_up,) = opt_phases.run(layoutd, "bench/results/opt/plain.toml", trace, None, f"{out}/plain", ("up",))
    os.makedirs(f"{out}/opt")
    up, down = opt_phases.run(layoutd, config, trace, plan, f"{out}/opt")
    classes = classify(trace, up, down)
    runs = {"plain": times(plain_up, classes), "opt": times(up, classes)}
    for name, c in also:
        os.makedirs(f"{out}/{name}")
        (u,) = opt_phases.run(layoutd, c, trace, plan, f"{out}/{name}", ("up",))
        runs[name] = times(u, classes)
    return runs


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("config")
    ap.add_argument("layoutd", nargs="?", default="target/release/layoutd")
    ap.add_argument("--also", nargs="*", default=[], help="NAME=CONFIG: more stacks, one plan after day 1")
    ap.add_argument("--variations", type=float, nargs="+", default=[0, 0.5, 1])
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4])
    a = ap.parse_args()
    also = [x.split("=", 1) for x in a.also]
    names = ["plain", "opt"] + [n for n, _ in also]
    print(f"Held-out days 2-4 by op and by where the opt run ({a.config}, one plan after day 1) served it; "
          f"each run's time in a class as a share of plain's held-out I/O time (in brackets: the class's "
          f"mean response; medians of seeds {' '.join(map(str, a.seeds))}; requests: median count):")
    for s in a.variations:
        per_seed = []
        for seed in a.seeds:
            with tempfile.TemporaryDirectory() as out:
                per_seed.append(one(a.layoutd, a.config, also, s, seed, out))
        keys = sorted({k for r in per_seed for k in r["plain"]}, key=lambda k: -sum(r["plain"][k][0] for r in per_seed))
        print()
        print(f"S = {s:g}:")
        print()
        print("| class | requests | " + " | ".join(names) + " |")
        print("| --- | --- | " + " | ".join("---" for _ in names) + " |")
        base = [sum(v[0] for v in r["plain"].values()) for r in per_seed]
        for k in keys + ["all"]:
            def cell(name):
                vs = [[sum(v[i] for v in r[name].values()) for i in (0, 1)] if k == "all" else r[name][k]
                      for r in per_seed]
                share = opt_variation.median([ms / b for (ms, _), b in zip(vs, base)])
                mean = opt_variation.median([ms / n for ms, n in vs if n])
                return f"{100 * share:.1f}% ({mean:.2f} ms)"
            n = opt_variation.median([r["plain"][k][1] if k != "all" else sum(v[1] for v in r["plain"].values())
                                      for r in per_seed])
            print(f"| {k} | {n:g} | " + " | ".join(cell(name) for name in names) + " |")


if __name__ == "__main__":
    main()
