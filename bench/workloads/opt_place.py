#!/usr/bin/env python3
"""The synthetic start-up experiment of bench/opt_sim.sh (two identical
days, every program once from a cold page cache, one plan at the end of
day 1; day 2 held out) with the OPT region where the configs put it and
where `layoutd opt place` puts it from day 1's reads (session 29), per
seed of the generator: day 2's mean I/O time, plain over opt, each against
plain with its own home layout (the device minus the region there).

    opt_place.py CONFIG [LAYOUTD] [--seeds 1 2 3 4]

The held-out desktop days with the region placed: `opt_variation.py CONFIG
--place`. The real programs' start-ups: bench/opt_real.py (`-placed`
stacks).
"""
import argparse
import json
import os
import subprocess
import tempfile

import opt_report
import opt_variation


def day2(layoutd, trace, config, plan_ms, out):
    """Day 2's mean response (ms) of `trace` through `config`, planned at
    `plan_ms` (None: told of no plan)."""
    path = os.path.join(out, "run.json")
    cmd = [layoutd, "sim", "--trace", trace, "--format", "layoutd", "--closed-loop", "--disk", "wd800", "--seed",
           "1", "--no-progress", "--json", path, "--config", config]
    if plan_ms is not None:
        cmd += ["--message", f"{plan_ms}ms:plan"]
    subprocess.run(cmd, check=True, capture_output=True)
    return opt_report.days(json.load(open(path)), 2)[1][1]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("config")
    ap.add_argument("layoutd", nargs="?", default="target/release/layoutd")
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4])
    a = ap.parse_args()
    print(f"Synthetic start-up, day 2 after one plan ({a.config}): plain mean / opt mean, the region as "
          "configured and placed from day 1 (`layoutd opt place`):")
    print()
    print("| seed | as configured | placed | placed at (GiB) | plain with the placed home layout, against plain |")
    print("| --- | ---: | ---: | ---: | ---: |")
    rows = []
    for seed in a.seeds:
        d = "bench/traces/opt" if seed == 1 else f"bench/traces/opt/seed{seed}"
        trace = f"{d}/startup-2days.trace.gz"
        plan = int(open(f"{d}/startup-2days.plan-times").read().split()[0])
        with tempfile.TemporaryDirectory() as out:
            plain = day2(a.layoutd, trace, "bench/results/opt/plain.toml", None, out)
            fixed = plain / day2(a.layoutd, trace, a.config, plan, out)
            config, plain_placed, offset = opt_variation.placed(a.layoutd, a.config, trace, plan, out)
            base = day2(a.layoutd, trace, plain_placed, None, out)
            moved = base / day2(a.layoutd, trace, config, plan, out)
        rows.append((fixed, moved, base / plain))
        print(f"| {seed} | {fixed:.2f}x | {moved:.2f}x | {offset / (1 << 30):.1f} | {plain / base:.3f}x |")
    cols = list(zip(*rows))
    print(f"| median | {opt_variation.median(cols[0]):.2f}x | {opt_variation.median(cols[1]):.2f}x | | |")


if __name__ == "__main__":
    main()
