#!/usr/bin/env python3
"""The held-out desktop experiment of bench/results/opt/README.md across the
generator's day-to-day variation (`opt_desktop.py --variation S`): for each
S and seed, the 4-day trace (committed under bench/traces/opt/variation/S/
seedN, S = 1 being the benchmark's own traces; made if missing) replayed
through plain, opt with one plan after day 1 and opt with a plan after
every day, as bench/opt_sim.sh does. Per S, the medians over the seeds of:

- the share of the held-out days' reads whose blocks day 1 read;
- the share of plain's held-out I/O time spent in reads of blocks day 1
  never read (u) and in writes and flushes (w: a plan moves neither), and
  1/(u + w): the speedup a plan trained on day 1 would give if every read
  it could place were free (the ceiling);
- the speedups (plain held-out mean / run's), the share of the daily
  plans' gain that one plan after day 1 gives, and the one plan's speedup
  of the held-out reads alone (writes and flushes left out of both
  means).

    opt_variation.py CONFIG [LAYOUTD] [--variations 0 0.25 0.5 0.75 1] [--seeds 1 2 3 4]
                     [--plain bench/results/opt/plain.toml] [--continuous MS ...] [--place]

`--continuous MS`: also the continuous loop, CONFIG with `plan_interval_ms
= MS` and told of no plan: the target plans on its own every MS of virtual
time that saw requests, in idle time (`idle_ms`), and copies in idle time;
every plan is trained on the requests before it, so the held-out days are
still evaluated only with plans made before each request. Per MS: its
speedup and the share of its gain that the one plan after day 1 gives;
then the share of plain's held-out I/O time in reads of blocks no earlier
request read (u': not even a loop planning before every request could
have placed them) and 1/u', the speedup if every other request were free.
`--place` (session 29): the OPT region where day 1's reads are, per
trace: `layoutd opt place` on the trace's requests before the first plan
time (day 1, the training period) sets CONFIG's `opt_offset`, and the
baseline is plain with the same home layout (the device minus the region
there); the held-out days are evaluated as without.
    opt_variation.py --kinds [--variations ...] [--seeds ...]

`--kinds`: what the held-out reads day 1 never read are (the generator's
own tags, `opt_desktop.py --tags`, of the same trace made again): reads of
files never read before (`--new`), reads of programs day 1 did not run,
and reads of programs it ran (a part a run skipped on day 1; of which
within 4 blocks of a block day 1 read: what `plan_pad_blocks = 4` places),
each as a share of all held-out reads; medians over the seeds.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import opt_phases
import opt_report


def trace_dir(s, seed):
    """Where the trace of variation `s`, seed `seed` lives (made if missing)."""
    if s == 1.0:
        return "bench/traces/opt" if seed == 1 else f"bench/traces/opt/seed{seed}"
    d = f"bench/traces/opt/variation/{s:g}/seed{seed}"
    if not os.path.exists(f"{d}/desktop-4days.trace.gz"):
        os.makedirs(d, exist_ok=True)
        subprocess.run(["python3", "bench/workloads/opt_desktop.py", f"{d}/desktop-4days.trace", "--days", "4",
                        "--seed", str(seed), "--variation", f"{s:g}"], check=True)
        subprocess.run(["gzip", "-9n", f"{d}/desktop-4days.trace"], check=True)
    return d


def shares(trace, up):
    """Shares of the held-out days' I/O time (`up`: the per-request record
    of a run) in reads of blocks day 1 never read, and in writes and
    flushes."""
    seen = set()
    for t, _, op, off, n in opt_phases.load(trace):
        if op == "R" and t < opt_phases.DAY_NS:
            seen.update(opt_phases.blocks(off, n))
    total = unseen = writes = 0.0
    for t, done, op, off, n in opt_phases.load(up):
        if t < opt_phases.DAY_NS:
            continue
        total += done - t
        if op != "R":
            writes += done - t
        elif not all(b in seen for b in opt_phases.blocks(off, n)):
            unseen += done - t
    return unseen / total, writes / total


def never_before(up):
    """Share of the held-out days' I/O time (`up`: plain's per-request
    record) in reads of blocks no earlier request read: what no loop,
    however continuous, can have placed before the read."""
    seen = set()
    total = unseen = 0.0
    for t, done, op, off, n in sorted(opt_phases.load(up)):
        bs = opt_phases.blocks(off, n)
        if t >= opt_phases.DAY_NS:
            total += done - t
            if op == "R" and not all(b in seen for b in bs):
                unseen += done - t
        if op == "R":
            seen.update(bs)
    return unseen / total


def read_mean(up):
    """Mean response (ns) of the held-out days' reads in `up`."""
    rs = [done - t for t, done, op, _, _ in opt_phases.load(up) if op == "R" and t >= opt_phases.DAY_NS]
    return sum(rs) / len(rs)


def disk_bytes(layoutd, disk="wd800"):
    """The simulated device's size in bytes (`layoutd disk show`)."""
    text = subprocess.run([layoutd, "disk", "show", disk], check=True, capture_output=True, text=True).stdout
    line = next(l for l in text.splitlines() if l.strip().startswith("capacity"))
    return int(line.split("(")[1].split()[0]) * 512


def placed(layoutd, config, trace, until_ms, out, name="placed"):
    """(`config` with `opt_offset` chosen by `layoutd opt place` from the
    trace's requests before `until_ms` (None: all of them), plain with the
    same home layout, the offset), written in `out` as NAME.toml and
    plain-NAME.toml."""
    size = disk_bytes(layoutd)
    path = os.path.join(out, f"{name}.toml")
    until = ["--until-ms", str(until_ms)] if until_ms is not None else []
    line = subprocess.run([layoutd, "opt", "place", "--config", config, "--trace", trace, "--size", str(size),
                           *until, "--out", path], check=True, capture_output=True, text=True).stdout
    offset = int(line.split()[2])
    length = next(l for l in open(config) if l.startswith("opt_length"))
    assert length.strip() == 'opt_length = "1GiB"', f"{config}: the baseline below assumes a 1 GiB region"
    plain = os.path.join(out, f"plain-{name}.toml")
    with open(plain, "w") as f:
        f.write(f'version = 1\n[[layer]]\ntarget = "linear"\n[[layer.segment]]\noffset = 0\nlength = {offset}\n'
                f"[[layer.segment]]\noffset = {offset + (1 << 30)}\n")
    return path, plain, offset


def one(layoutd, config, plain, s, seed, out, continuous=(), place=False):
    """(reads seen on day 1, (u, w), one-plan speedup, daily speedup, one-plan
    speedup of the reads alone, [continuous speedup per interval]) of one
    trace."""
    d = trace_dir(s, seed)
    trace = f"{d}/desktop-4days.trace.gz"
    plans = open(f"{d}/desktop-4days.plan-times").read().split()
    offset, plain0 = None, plain
    if place:
        config, plain, offset = placed(layoutd, config, trace, plans[0], out)
    (up,) = opt_phases.run(layoutd, plain, trace, None, out, ("up",))
    base = opt_report.held_out(json.load(open(os.path.join(out, "up.json"))))

    # A stack without opt (a baseline) is told of no plan.
    has_opt = 'target = "opt"' in open(config).read()

    def held_out(messages, config=config):
        cmd = [layoutd, "sim", "--trace", trace, "--format", "layoutd", "--closed-loop", "--disk", "wd800",
               "--seed", "1", "--no-progress", "--json", os.path.join(out, "opt.json"), "--config", config]
        for m in messages if has_opt else []:
            cmd += ["--message", f"{m}ms:plan"]
        subprocess.run(cmd, check=True, capture_output=True)
        return opt_report.held_out(json.load(open(os.path.join(out, "opt.json"))))

    os.makedirs(f"{out}/opt")
    (opt_up,) = opt_phases.run(layoutd, config, trace, plans[0] if has_opt else None, f"{out}/opt", ("up",))
    cont = [base / held_out([], opt_phases.continuous_config(config, ms, out)) for ms in continuous]
    # With `place`: (the offset, the baseline's held-out mean over plain's
    # with `plain`'s own home layout: multiply a speedup by it for one over
    # that plain).
    placing = (offset, held_out([], plain0) / base) if place else None
    return (opt_report.day1_coverage(trace), shares(trace, up), base / held_out(plans[:1]),
            base / held_out(plans[:3]), read_mean(up) / read_mean(opt_up), cont, never_before(up), placing)


def tags_of(s, seed, out, count):
    """The generator's (kind, program) of each request of the trace of
    variation `s`, seed `seed` (`count` requests), made again in `out`."""
    subprocess.run(["python3", "bench/workloads/opt_desktop.py", f"{out}/t.trace", "--days", "4", "--seed",
                    str(seed), "--variation", f"{s:g}", "--tags", f"{out}/t.tags"], check=True)
    tags = [tuple(l.split()) for l in open(f"{out}/t.tags") if not l.startswith("#")]
    assert len(tags) == count, f"variation {s:g} seed {seed}: not the trace of its seed and variation"
    return tags


def kinds(s, seed, out):
    """Shares of the held-out reads that day 1 never read, by kind: new
    file, program not run on day 1, program run on day 1 (and of those,
    within 4 blocks of a block day 1 read)."""
    trace = f"{trace_dir(s, seed)}/desktop-4days.trace.gz"
    rows = opt_phases.load(trace)
    tags = tags_of(s, seed, out, len(rows))
    seen, ran = set(), set()
    for (t, _, op, off, n), (kind, prog) in zip(rows, tags):
        if op == "R" and t < opt_phases.DAY_NS:
            seen.update(opt_phases.blocks(off, n))
            ran.add(prog)
    counts = [0, 0, 0, 0]
    reads = 0
    for (t, _, op, off, n), (kind, prog) in zip(rows, tags):
        if op != "R" or t < opt_phases.DAY_NS:
            continue
        reads += 1
        bs = opt_phases.blocks(off, n)
        if all(b in seen for b in bs):
            continue
        k = 0 if kind == "new" else 1 if prog not in ran else 2
        counts[k] += 1
        near = all(any(x in seen for x in range(b - 4, b + 5)) for b in bs)
        counts[3] += k == 2 and near
    return [c / reads for c in counts]


def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2] if len(xs) % 2 else (xs[len(xs) // 2 - 1] + xs[len(xs) // 2]) / 2


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("config")
    ap.add_argument("layoutd", nargs="?", default="target/release/layoutd")
    ap.add_argument("--variations", type=float, nargs="+", default=[0, 0.25, 0.5, 0.75, 1])
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4])
    ap.add_argument("--plain", default="bench/results/opt/plain.toml", help="the baseline's config")
    ap.add_argument("--continuous", type=int, nargs="+", default=[], metavar="MS",
                    help="also the continuous loop, planning every MS of virtual time")
    ap.add_argument("--place", action="store_true",
                    help="the region placed by `layoutd opt place` from each trace's day 1")
    if len(sys.argv) > 1 and sys.argv[1] == "--kinds":
        sys.argv[1:2] = ["-"]
        a = ap.parse_args()
        print("Held-out reads of blocks day 1 never read, by kind (share of all held-out reads; medians of seeds "
              f"{' '.join(map(str, a.seeds))}):")
        print()
        print("| variation | new files | programs day 1 did not run | programs day 1 ran "
              "| of which within 4 blocks of day 1's |")
        print("| --- | --- | --- | --- | --- |")
        for s in a.variations:
            with tempfile.TemporaryDirectory() as out:
                cols = list(zip(*[kinds(s, seed, out) for seed in a.seeds]))
            print(f"| {s:g} | " + " | ".join(f"{100 * median(c):.1f}%" for c in cols) + " |")
        return
    a = ap.parse_args()
    placing = ", the region placed from each trace's day 1 (`layoutd opt place`)" if a.place else ""
    print(f"Held-out days 2-4 against the generator's variation ({a.config}{placing}; medians of seeds "
          f"{' '.join(map(str, a.seeds))}, the range in brackets):")
    print()
    extra = "".join(f" | continuous, a plan every {ms} ms | share of its gain after day 1" for ms in a.continuous)
    if a.continuous:
        extra += " | plain I/O time in reads of blocks no earlier request read (u') | online ceiling 1/u'"
    if a.place:
        extra += (" | region placed at (GiB, per seed) | plain with that home layout against --plain's "
                  "(a speedup times it: one over --plain)")
    print("| variation | held-out reads seen on day 1 | plain I/O time in reads day 1 never read (u) "
          "| in writes and flushes (w) | ceiling 1/(u + w) | one plan after day 1 | a plan every day "
          f"| share of the daily gain after day 1 | reads alone, one plan{extra} |")
    print("| --- " * (9 + 2 * len(a.continuous) + 2 * bool(a.continuous) + 2 * a.place) + "|")
    gain_share = lambda one_plan, other: (one_plan - 1) / (other - 1) if other > 1 else float("nan")
    for s in a.variations:
        rows, offsets = [], []
        for seed in a.seeds:
            with tempfile.TemporaryDirectory() as out:
                cov, (u, w), one_plan, daily, reads, cont, u_online, offset = one(a.layoutd, a.config, a.plain, s,
                                                                                  seed, out, a.continuous, a.place)
            offsets.append(offset)
            row = [cov, u, w, 1 / (u + w), one_plan, daily, gain_share(one_plan, daily), reads]
            for c in cont:
                row += [c, gain_share(one_plan, c)]
            if cont:
                row += [u_online, 1 / u_online]
            rows.append(row)
        cols = list(zip(*rows))
        rng = lambda c, f: f"{f(median(c))} ({f(min(c))}-{f(max(c))})"
        pct = lambda x: f"{100 * x:.0f}%"
        times = lambda x: f"{x:.2f}x"
        fmts = [pct, pct, pct, times, times, times, pct, times] + [times, pct] * len(a.continuous)
        fmts += [pct, times] * bool(a.continuous)
        placed_at = ""
        if a.place:
            shift = [x[1] for x in offsets]
            placed_at = (f" | {' / '.join(f'{x[0] / (1 << 30):.1f}' for x in offsets)} | "
                         f"{median(shift):.3f}x ({min(shift):.3f}x-{max(shift):.3f}x)")
        print(f"| {s:g} | " + " | ".join(rng(c, f) for c, f in zip(cols, fmts)) + placed_at + " |")


if __name__ == "__main__":
    main()
