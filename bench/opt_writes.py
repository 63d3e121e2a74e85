#!/usr/bin/env python3
"""The writes of the real start-ups (issue 15, start-up row): what they are
in run 2 of the captures, what each costs under plain and opt, and the
configs that serve them otherwise, replayed as bench/opt_real.py does
(closed loop on wd800, one stream, the opt stacks planned at the
reconfigure marker, 600 s idle before run 2; deterministic).

Per program and stack: the disk-busy seconds of run 2 (speed-up over
plain) and its *write-busy* seconds (time with an upper write or flush
outstanding). `--multiday` adds the held-out multi-day figure of the
proposed configs (`opt_variation.one`, S = 0.5, seeds 1-4, the region
placed from day 1, continuous plans every 1024 ms).

The `-dcd-near` stacks are opt over a dcd whose 64 MiB log lies right
before the OPT region: a `linear` layer under the dcd maps the dcd's
first 64 MiB (its log) to the device at the region's offset, so the
region shrinks to 960 MiB and the home layout stays `plain.toml`'s (the
volume keeps its size: the captures' marker reads sit at its end). With
a region placed elsewhere (`--multiday`) the log moves with it.

Writes bench/results/opt/writes.md (tables above the notes marker; notes
below it kept), writes.json, and the -dcd-near configs at 37 GiB.

Usage: bench/opt_writes.py [--multiday] [--jobs 2]
"""
import argparse
import collections
import concurrent.futures
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
sys.path.insert(0, os.path.join(ROOT, "bench/harness"))
sys.path.insert(0, os.path.join(ROOT, "bench/workloads"))
import capreplay  # noqa: E402
import dcd_report  # noqa: E402
import opt_bound  # noqa: E402
import opt_real  # noqa: E402
import opt_variation  # noqa: E402
import readme  # noqa: E402
import tracefile  # noqa: E402

OUT = os.path.join(ROOT, "bench/results/opt")
MARK = "<!-- Notes below this line are written by hand and kept when bench/opt_writes.py regenerates this file. -->"
PROGS = ["python", "perl", "gcc", "git", "man", "tar-xz"]
GIB, MIB = 1 << 30, 1 << 20
LOG = 64 * MIB
# The dcd under the -dcd-near stacks: examples/dcd.toml's defaults but the
# log's place, and writes up to 512 KiB logged (tar-xz writes 316 KiB at
# once; a logged write must fit one segment).
DCD = {"segment_bytes": '"512KiB"', "bypass_bytes": '"512KiB"'}


def dcd_layers(log_at, rest_at, dcd=DCD):
    """A dcd over a linear layer that maps the dcd's 64 MiB log to the
    device at `log_at` and its data region to the device's `[0, log_at)`
    then from `rest_at` on: config lines."""
    return ["[[layer]]", 'target = "dcd"', "log_offset = 0", f"log_length = {LOG}",
            *(f"{k} = {v}" for k, v in dcd.items()),
            "[[layer]]", 'target = "linear"', "[[layer.segment]]", f"offset = {log_at}", f"length = {LOG}",
            "[[layer.segment]]", "offset = 0", f"length = {log_at}", "[[layer.segment]]", f"offset = {rest_at}"]


def near(config, offset):
    """The text of `config` (one opt layer, a 1 GiB region) over a dcd whose
    log lies at `offset`, the region right after it (960 MiB), the home
    layout that of a 1 GiB region at `offset`; the opt layer sends unmapped
    writes to the dcd (absorb_writes = false)."""
    keys = [ln for ln in open(os.path.join(ROOT, config)).read().splitlines()
            if ln.strip() and not ln.lstrip().startswith("#") and not ln.startswith(("version", "[[layer]]"))]
    assert 'opt_length = "1GiB"' in keys and 'target = "opt"' in keys, config
    keys = [ln for ln in keys if not ln.startswith(("opt_offset", "opt_length", "absorb_"))]
    text = ["version = 1", "[[layer]]", *keys, f"opt_offset = {offset}", f"opt_length = {GIB - LOG}",
            "absorb_writes = false", *dcd_layers(offset, offset + LOG)]
    return "\n".join(text) + "\n"


def write_near(name, config, offset, where):
    path = os.path.join(where, name + ".toml")
    head = (f"# Written by bench/opt_writes.py: {config}'s opt over a dcd whose 64 MiB log lies\n"
            "# right before the OPT region (a linear layer maps the dcd's log there);\n"
            "# the region 960 MiB, home as plain.toml's; writes up to 512 KiB logged.\n")
    open(path, "w").write(head + near(config, offset))
    return path


# (name, config, plans?): the stacks of the start-up table.
def stacks():
    s = [("plain", "bench/results/opt/plain.toml", False), ("opt", "bench/results/opt/opt.toml", True),
         ("opt-home", "bench/results/opt/opt-home.toml", True),
         ("opt-relay", "bench/results/opt/opt-relay.toml", True),
         ("opt-time", "bench/results/opt/opt-time.toml", True),
         ("opt-time-behind", "bench/results/opt/opt-time-behind.toml", True)]
    for n in ("opt", "opt-relay", "opt-time", "opt-time-behind"):
        p = write_near(f"{n}-dcd-near", f"bench/results/opt/{n}.toml", 37 * GIB, OUT)
        s.append((f"{n}-dcd-near", os.path.relpath(p, ROOT), True))
    return s


def load_disk(path):
    out = []
    for line in open(path):
        if not line.startswith("#"):
            f = line.split()
            out.append((int(f[0]), int(f[1]), int(f[2]), f[3], int(f[4]), int(f[5]), int(f[7]), int(f[8])))
    return out


def union(iv):
    """Seconds covered by the (start ns, end ns) intervals."""
    return dcd_report.union_ns(iv) / 1e9


def run(l, k, setup, name, config, plans, trace=None):
    """One replay of capture k: {program: {busy, wbusy, classes: {(upper op,
    disk op, where): [requests, seek s, rotation s, rest s]}}} for run 2."""
    t, plan_at, eb, result = setup
    trace = trace or t
    with tempfile.TemporaryDirectory() as tmp:
        base = os.path.join(tmp, "r")
        extra = ["--message", f"@{plan_at}:plan"] if plans else []
        subprocess.run([l, "sim", "--trace", trace, *capreplay.ONE_STREAM, "--config", opt_real.with_trace(config),
                        "--disk", opt_real.DISK, "--closed-loop", "--no-progress", "--record-trace", base + ".rec",
                        "--record-disk", base + ".disk", "--json", base + ".json", *extra], check=True,
                       capture_output=True)
        up = opt_real.load(base + ".rec")
        marks = {i: m["submit_ns"] for i, m in tracefile.markers(base + ".rec", eb).items()}
        disk = load_disk(base + ".disk")
    out = {}
    for ph in result["phases"]:
        if not ph["name"].startswith("run2-"):
            continue
        a, b = marks[ph["markers"][0]], marks[ph["markers"][1]]
        ups = [u for u in up if a < u[0] < b]
        cls = collections.defaultdict(lambda: [0, 0.0, 0.0, 0.0])
        for d in disk:
            if not a < d[0] < b:
                continue
            # The upper request it serves: the latest submitted one outstanding.
            owner = [u for u in ups if u[0] <= d[0] <= u[1]]
            where = "region" if opt_real.OPT0 - LOG <= d[4] < opt_real.OPT1 else "home"
            c = cls[(owner[-1][2] if owner else "-", d[3], where)]
            c[0] += 1
            c[1] += d[6] / 1e9
            c[2] += d[7] / 1e9
            c[3] += (d[2] - d[1] - d[6] - d[7]) / 1e9
        out[ph["name"][5:]] = {"busy": union([(u[0], u[1]) for u in ups]),
                               "wbusy": union([(u[0], u[1]) for u in ups if u[2] != "R"]),
                               "classes": {"/".join(key): v for key, v in cls.items()}}
    return out


def run2_windows(setup):
    """(the replay trace's lines, {program: (a, b)}): run 2's windows as
    the indices of the lines of each program's two marker reads
    (`tracefile.markers`, whose line numbers count from 1)."""
    trace, _, eb, result = setup
    lines = gzip.open(trace, "rt").readlines()
    at = {k: m["line"] - 1 for k, m in tracefile.markers(trace, eb).items()}
    return lines, {ph["name"][5:]: (at[ph["markers"][0]], at[ph["markers"][1]])
                   for ph in result["phases"] if ph["name"].startswith("run2-")}


def requests(lines, a, b):
    """The request lines strictly between lines a and b, split."""
    return [ln.split() for ln in lines[a + 1:b] if not ln.startswith("#") and ln.strip()]


def without_writes(setup, k, tmp):
    """The replay trace of capture k without run 2's writes and flushes (a
    ceiling: writes that cost nothing)."""
    lines, win = run2_windows(setup)
    a, b = win[PROGS[0]][0], win[PROGS[-1]][1]
    dst = os.path.join(tmp, f"cap{k}-nowrites.trace.gz")
    with gzip.open(dst, "wt") as f:
        for i, ln in enumerate(lines):
            if a < i < b and not ln.startswith("#") and ln.strip() and ln.split()[3] in ("W", "F"):
                continue
            f.write(ln)
    return dst


def anatomy(setup):
    """Run 2's writes and flushes of each program as recorded: [(op,
    offset, length)] per program."""
    lines, win = run2_windows(setup)
    return {p: [(r[3], int(r[4]), int(r[5])) for r in requests(lines, a, b) if r[3] != "R"]
            for p, (a, b) in win.items()}


def median(xs):
    return opt_real.median(xs)


# The bound's layouts replayed here, with the area that ends just before
# 37 GiB (where the -dcd-near stacks' log lies), through plain.toml or
# through the dcd alone with its log in plain's 1 GiB gap at 37 GiB.
BOUND_AREA_GIB = 36.875
BOUND = [("tape", "tape", "plain"), ("tape-rw", "tape-rw", "plain"), ("tape-nw", "tape-nw", "plain"),
         ("tape + dcd-near", "tape", "dcd"), ("tape-rw + dcd-near", "tape-rw", "dcd")]


def bound(l, caps):
    """{(capture, name): {program: run 2 busy s}} of the bound's `tape`
    layouts at BOUND_AREA_GIB, their writes home, in the pass, at their
    floor, or through a dcd whose log lies right after the area."""
    tmp = tempfile.mkdtemp(prefix="opt_writes-")
    keep = opt_real.TMP
    try:
        setups = {k: opt_bound.cap_setup(k, tmp) for k in caps}
        dcd = os.path.join(tmp, "dcd-near-plain.toml")
        open(dcd, "w").write("\n".join(["version = 1", *dcd_layers(37 * GIB, 38 * GIB)]) + "\n")
        cfgs = {"plain": opt_real.with_trace("bench/results/opt/plain.toml"), "dcd": opt_real.with_trace(dcd)}
        jobs = [(k, "plain", "plain", 0, "plain") for k in caps]
        jobs += [(k, n, lay, BOUND_AREA_GIB, c) for k in caps for n, lay, c in BOUND]
        out = {}
        for k, n, lay, g, c in jobs:
            r = opt_bound.cap_run(l, k, setups[k], lay, g, tmp, cfgs[c])[1]
            out[k, n] = r["busy_s"]
        return out
    finally:
        opt_real.TMP = keep
        shutil.rmtree(tmp)


# Placed from run 1 (bench/opt_real.py's `placed:` stacks): each against
# plain with the same home layout.
PLACED_CONFIGS = ("opt-time", "opt-time-behind")
PLACED = ("plain-placed",) + tuple(f"{n}{d}-placed" for n in PLACED_CONFIGS for d in ("", "-dcd-near"))
BASELINE = {n: "plain-placed" for n in PLACED[1:]}


def placed_stacks(l, k, setup, tmp):
    """(name, config, plans?) of the PLACED stacks for capture k: the
    region where `layoutd opt place` puts it from run 1 (the dcd's log
    right before it), and plain with that home layout."""
    trace, plan_at, eb, _ = setup
    run1 = opt_real.training(trace, plan_at, eb)
    out = []
    for n in PLACED_CONFIGS:
        config = f"bench/results/opt/{n}.toml"
        path, plain, offset = opt_variation.placed(l, config, run1, None, tmp, f"cap{k}-{n}-placed")
        near_path = write_near(f"cap{k}-{n}-dcd-near-placed", config, offset, tmp)
        out += [(f"{n}-placed", path, True), (f"{n}-dcd-near-placed", near_path, True)]
    return [(PLACED[0], plain, False)] + out


def multiday(l, configs, seeds=(1, 2, 3, 4), s=0.5, every=1024):
    """{name: [(seed, placed at, continuous speed-up over plain.toml)]}: each
    config of `configs` (name, single-layer opt config, near-dcd?) on the
    multi-day traces, the region placed from day 1 (the near-dcd stacks:
    the log at the placed offset, the region after it)."""
    out = {}
    orig = opt_variation.placed
    for name, config, dcd in configs:
        rows = []
        for seed in seeds:
            with tempfile.TemporaryDirectory() as tmp:
                def placed(layoutd, cfg, trace, until_ms, where, label="placed", config=config, dcd=dcd):
                    path, plain, offset = orig(layoutd, cfg, trace, until_ms, where, label)
                    if dcd:
                        path = write_near(label + "-dcd-near", config, offset, where)
                    return path, plain, offset
                opt_variation.placed = placed
                try:
                    r = opt_variation.one(l, os.path.join(ROOT, config), os.path.join(ROOT, "bench/results/opt/plain.toml"),
                                          s, seed, tmp, (every,), True)
                finally:
                    opt_variation.placed = orig
            offset, shift = r[7]
            rows.append((seed, offset, r[2] * shift, r[5][0] * shift))
        out[name] = rows
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--multiday", action="store_true", help="also the multi-day figure of the proposed configs")
    ap.add_argument("--jobs", type=int, default=2)
    a = ap.parse_args()
    l = opt_real.layoutd()
    tracefile.use(l)
    os.makedirs(opt_real.TMP, exist_ok=True)
    caps = [1, 2, 3]
    setups = {k: opt_real.replay_trace(opt_real.cap_dir(k), 600.0) for k in caps}
    st = stacks()
    with tempfile.TemporaryDirectory() as tmp:
        nw = {k: without_writes(setups[k], k, tmp) for k in caps}
        jobs = [(k, n, c, p, None) for k in caps for n, c, p in st]
        jobs += [(k, n + "/no-run2-writes", c, True, nw[k]) for k in caps for n, c, _ in st if n in ("opt", "opt-relay")]
        jobs += [(k, n, c, p, None) for k in caps for n, c, p in placed_stacks(l, k, setups[k], tmp)]
        with concurrent.futures.ThreadPoolExecutor(a.jobs) as ex:
            res = dict(zip([(j[0], j[1]) for j in jobs], ex.map(lambda j: run(l, j[0], setups[j[0]], *j[1:]), jobs)))
    md = multiday(l, [(n + d, f"bench/results/opt/{n}.toml", bool(d))
                      for n in ("opt", "opt-relay", "opt-time", "opt-time-behind")
                      for d in ("", "-dcd-near")]) if a.multiday else None
    bnd = bound(l, caps)
    anat = {k: anatomy(setups[k]) for k in caps}
    json.dump({"runs": {f"cap{k}/{n}": v for (k, n), v in res.items()}, "multiday": md,
               "anatomy": {f"cap{k}": v for k, v in anat.items()},
               "bound": {f"cap{k}/{n}": v for (k, n), v in bnd.items()}}, open(os.path.join(OUT, "writes.json"), "w"), indent=1)
    report(res, st, anat, md, caps, bnd)


def report(res, st, anat, md, caps, bnd):
    names = [n for n, _, _ in st] + list(PLACED) + [n + "/no-run2-writes" for n in ("opt", "opt-relay")]

    def busy(k, n, p):
        return sum(res[k, n][q]["busy"] for q in PROGS) if p == "all six" else res[k, n][p]["busy"]

    def wbusy(k, n, p):
        return sum(res[k, n][q]["wbusy"] for q in PROGS) if p == "all six" else res[k, n][p]["wbusy"]

    L = ["# `opt`: the writes of the real start-ups (issue 15, start-up row)", "",
         "`bench/opt_writes.py` (how: its docstring). The captures of bench/results/opt/real/ (run 2, held out), "
         "replayed as bench/opt_real.py does: closed loop on wd800, one stream, the opt stacks planned at the "
         "reconfigure marker (trained on run 1), 600 s idle before run 2. Deterministic simulated time.", "",
         "## Run 2: speed-up over plain, median of the captures (range); write-busy ms (median)", "",
         "Write-busy: the time an upper write or flush is outstanding in the program's window. "
         "`/no-run2-writes`: the stack on the trace without run 2's writes and flushes, over plain with them "
         "(a ceiling: writes that cost nothing). `-placed`: the region where `layoutd opt place` puts it from "
         "the capture's run 1 (the -dcd-near one with the dcd's log right before it), each against "
         "`plain-placed` (plain with the same home layout; its own row is against plain); `opt-time`: "
         "`plan_time_order` (bench/results/opt/opt-time.toml).", "",
         "| stack | " + " | ".join(PROGS) + " | all six |", "| --- |" + " ---: |" * (len(PROGS) + 1)]
    for n in names:
        cells = []
        for p in PROGS + ["all six"]:
            sp = [busy(k, BASELINE.get(n, "plain"), p) / busy(k, n, p) for k in caps]
            w = median([wbusy(k, n, p) for k in caps]) * 1e3
            cells.append(f"{median(sp):.2f}x ({min(sp):.2f}-{max(sp):.2f}), w {w:.0f}")
        L.append(f"| {n} | " + " | ".join(cells) + " |")
    L += ["", "## The bound's layout with its writes served four ways", "",
          f"bench/workloads/opt_bound.py's `tape` (every held-out read in one sequential pass) in an area at "
          f"{BOUND_AREA_GIB} GiB (it ends before 37 GiB), run 2's writes home (`tape`), in the pass "
          "(`tape-rw`), at their floor (`tape-nw`: transfer only), or through a dcd whose log lies at 37 GiB, in "
          "plain's unused gap right after the area (`+ dcd-near`, the dcd of the -dcd-near stacks); speed-up over "
          "plain, median of the captures (range).", "",
          "| layout | " + " | ".join(PROGS) + " | all six |", "| --- |" + " ---: |" * (len(PROGS) + 1)]
    for n, _, _ in BOUND:
        cells = []
        for p in PROGS + ["all six"]:
            b = lambda k, x: sum(bnd[k, x].values()) if p == "all six" else bnd[k, x][p]  # noqa: E731
            sp = [b(k, "plain") / b(k, n) for k in caps]
            cells.append(f"{median(sp):.2f}x ({min(sp):.2f}-{max(sp):.2f})")
        L.append(f"| {n} | " + " | ".join(cells) + " |")
    L += ["", "## Run 2's writes and flushes as recorded (per capture)", "",
          "Per program: writes (4 KiB blocks, largest write in KiB), flushes; FUA writes: none in any capture.", "",
          "| program | " + " | ".join(f"cap{k}" for k in caps) + " |", "| --- |" + " --- |" * len(caps)]
    for p in PROGS:
        cells = []
        for k in caps:
            ws = [x for x in anat[k][p] if x[0] == "W"]
            cells.append(f"{len(ws)} ({sum(x[2] for x in ws) // 4096} blocks, max {max(x[2] for x in ws) >> 10}), "
                         f"{sum(1 for x in anat[k][p] if x[0] == 'F')} F")
        L.append(f"| {p} | " + " | ".join(cells) + " |")
    L += ["", "## Where the write time goes (git and tar-xz, the captures summed)", "",
          "Disk requests that arrived while an upper write (W) or flush (F) was the latest outstanding upper "
          "request, by disk op and place (region: the OPT region and, for -dcd-near, the dcd log before it): "
          "requests, seek / rotation / rest (transfer and overhead) in ms.", ""]
    for p in ("git", "tar-xz"):
        L += [f"**{p}**", "", "| stack | class | requests | seek | rotation | rest |", "| --- | --- | ---: | ---: | ---: | ---: |"]
        for n, _, _ in st:
            agg = collections.defaultdict(lambda: [0, 0.0, 0.0, 0.0])
            for k in caps:
                for key, v in res[k, n][p]["classes"].items():
                    if not key.startswith("R/"):
                        for i in range(4):
                            agg[key][i] += v[i]
            for key in sorted(agg):
                c = agg[key]
                L.append(f"| {n} | {key} | {c[0]} | {c[1] * 1e3:.1f} | {c[2] * 1e3:.1f} | {c[3] * 1e3:.1f} |")
        L.append("")
    if md:
        L += ["## Multi-day, S = 0.5, held-out days 2-4, region placed from day 1, continuous plans every 1024 ms", "",
              "`opt_variation.one` as `python3 bench/workloads/opt_variation.py CONFIG --variations 0.5 --continuous "
              "1024 --place`; speed-up over `plain.toml`: one plan after day 1 / continuous (the share of the "
              "continuous gain one plan after day 1 has: (one - 1) / (continuous - 1)).", "",
              "| stack | " + " | ".join(f"seed {r[0]}" for r in next(iter(md.values()))) +
              " | median continuous | median share |",
              "| --- |" + " ---: |" * (len(next(iter(md.values()))) + 2)]
        for n, rows in md.items():
            share = [(r[2] - 1) / (r[3] - 1) for r in rows]
            L.append(f"| {n} | " + " | ".join(f"{r[2]:.2f}x / {r[3]:.2f}x ({100 * (r[2] - 1) / (r[3] - 1):.0f}%, "
                                               f"at {r[1] / GIB:.1f} GiB)" for r in rows)
                     + f" | {median([r[3] for r in rows]):.2f}x | {100 * median(share):.0f}% |")
        L.append("")
    L.append(MARK)
    readme.write_keeping_notes(os.path.join(OUT, "writes.md"), L, MARK)
    print("\n".join(L))


if __name__ == "__main__":
    main()
