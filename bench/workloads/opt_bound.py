#!/usr/bin/env python3
"""The best any layout could do on the `opt` benchmark's captures with this
disk model (issue 15's start-up and multi-day rows): an upper bound on the
speed-up, by replay (bench/results/opt/README.md, session 29, "Bound").

The held-out requests are rewritten so that the reads are laid out in the
order they are read, in one contiguous area, then the trace is replayed
closed-loop on wd800 through plain (the same disk, queue, think time and
home layout as the benchmark's plain; every other request untouched). The
area's place is swept (`--areas`, GiB of the volume) and the best place is
kept. Layouts:

- `tape`: every held-out read request gets the next bytes of the area, in
  trace order (a block read twice gets two copies): the reads form one
  sequential pass, the cheapest a disk can serve them. The bound.
- `first`: one copy per block, in first-read order; a read whose blocks
  lie apart then (a re-read, an overlap) is split into its contiguous
  pieces (same submit time).
- `first-prog`: `first` with a copy per program (start-ups): a block
  two programs read lies in each one's run, once per program.
- `train-prog` (start-ups): each program's blocks in run 1's first-read
  order, a copy per program; run 2's reads mapped there (split where
  needed), a read of a block run 1 did not read left home: the ideal plan
  trained on run 1.
- `train`: `train-prog` with one copy per block (all of run 1 in its
  first-read order).
- `tape-seen`: `tape` for the reads whose blocks were all read or written
  before the held-out part (run 1 / day 1: what a plan trained there can
  know; a written block counts, as opt's absorbed writes stay mapped in
  the region); the rest stay home. The bound for a layout learnt from the
  training.
- `tape-before`: `tape` for the reads whose blocks some earlier request
  read or wrote (what a loop planning before every request could have
  placed).
- `tape-rw`: `tape` with the held-out writes in the same pass (a write
  gets the next bytes too): a layout that also absorbs every write;
  `tape-seen-rw`, `tape-before-rw` (multi-day) the same for those.
- `-nw` (`tape-nw`, ...): the held-out writes left out of the replay and
  counted at the least time a write can take on wd800 (media transfer at
  the outer zone's rate and bus time: no seek, rotation or overhead), so
  that no placement of the writes can beat it (opt absorbs writes into
  free slots of its region, 2.5 ms each on the multi-day trace against 7
  ms home; a write in the read pass waits for the platter: wd800's write
  cache is off).

The bound is the fastest of these per capture (seed) and program.

Real start-ups: bench/traces/opt/real/capK, as bench/opt_real.py replays
them (one stream, 600 s before run 2); held out = run 2 of each program
(the reads between its marker reads); the figure is its disk-busy
seconds; opt's and plain's come from bench/results/opt/real/summary.json
(plain is replayed here too, as a check). Multi-day: the S = 0.5 traces
of seeds 1-4 (bench/traces/opt/variation/0.5/seedN); held out = days 2-4
(submit time >= 65.536 s); the figure is their requests-weighted mean
response (opt_report.held_out), against plain.toml.

    opt_bound.py [--layoutd L] [--captures 1 2 3] [--seeds 1 2 3 4]
                 [--areas 1 8 16 ...] [--jobs 2] [--skip-days]

Writes bench/results/opt/bound.md and bound.json.
"""
import argparse
import concurrent.futures
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "bench"))
sys.path.insert(0, os.path.join(ROOT, "bench/harness"))
sys.path.insert(0, HERE)
import capreplay  # noqa: E402
import opt_real  # noqa: E402
import opt_phases  # noqa: E402
import opt_variation  # noqa: E402
import opt_report  # noqa: E402
import tracefile  # noqa: E402

RES = os.path.join(ROOT, "bench/results/opt")
PLAIN = "bench/results/opt/plain.toml"
DAY_NS = int(65.536e9)
LAYOUTS = ("tape", "tape-rw", "tape-nw", "first-prog", "first", "train-prog", "train-prog-nw", "train", "tape-seen",
           "tape-before")
# The multi-day layouts: no `first` or `train` (a split request would
# change the per-request mean).
DAY_LAYOUTS = ("tape", "tape-rw", "tape-nw", "tape-seen", "tape-seen-nw", "tape-before", "tape-before-nw")
GIB = 1 << 30
blocks = opt_phases.blocks
median = opt_real.median
MEDIA_B_S, BUS_S_SECTOR = 61.0e6, 7.7e-6  # wd800's outer zone and bus (`layoutd disk show wd800`)


def write_floor_s(n):
    """The least disk time a write of n bytes can take on wd800: its media
    transfer at the outer zone's rate and its bus time, no seek, rotation
    or command overhead."""
    return n / MEDIA_B_S + (n + 511) // 512 * BUS_S_SECTOR
OPT_DAYS = ("opt", "opt-relay")  # configs under bench/results/opt whose multi-day figures are compared


def rows(path):
    """(line number from 1, the line's fields or None for a comment)."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        for k, line in enumerate(f, 1):
            yield k, line, (None if line.startswith("#") or not line.strip() else line.split())


def rewrite(src, dst, held, train, layout, area):
    """Writes `src` to `dst` with the held-out requests (held(line, fields)
    not None: the request's group, a program) laid out by `layout` in an
    area starting at byte `area`; `train`: {"seen": the blocks the training
    read, "order": {group: its blocks in the training's first-read order}}.
    Returns (requests moved, pieces added by splits, bytes of area used,
    {group: the left-out writes' least time, s})."""
    cursor, moved, extra = area, 0, 0
    wlb = {}  # group -> its left-out writes' least possible disk time, s (`-nw`)
    where = {}  # block -> its byte in the area (`first`, `first-prog`, `train-prog`)
    maps = {}  # group -> its `where` (`train-prog`: laid out before the held-out part)
    one_copy = layout in ("train", "train-nw")
    if layout.startswith("train"):
        for g, order in train["order"].items():
            if (g == "*") != one_copy:
                continue
            maps[g] = {}
            for b in order:
                maps[g][b] = cursor
                cursor += 4096
    before = set()  # blocks any earlier request read (`tape-before`)
    group = None
    with gzip.open(dst, "wt") as out:
        for k, line, p in rows(src):
            g = None if p is None else held(k, p)
            bs = blocks(int(p[4]), int(p[5])) if p is not None else ()
            if g is None or p[3] not in ("R", "W"):
                out.write(line)
                if p is not None and p[3] in ("R", "W"):
                    before.update(bs)
                continue
            if g != group and layout == "first-prog":
                where = {}
            if layout.startswith("train"):
                where = maps.get("*" if one_copy else g, {})
            group = g
            op, off, n = p[3], int(p[4]), int(p[5])
            if op == "W":
                home = not layout.endswith(("-rw", "-nw"))
            else:
                home = (layout.startswith("tape-seen") and not all(b in train["seen"] for b in bs)
                        or layout.startswith("tape-before") and not all(b in before for b in bs)
                        or layout.startswith("train") and not all(b in where for b in bs))
            before.update(bs)
            if home:
                out.write(line)
                continue
            moved += 1
            if op == "W" and layout.endswith("-nw"):
                # Left out; the group's writes are counted at their least
                # possible time instead.
                wlb[g] = wlb.get(g, 0.0) + write_floor_s(n)
                continue
            if layout.startswith("tape"):
                out.write(" ".join(p[:4] + [str(cursor + off % 4096), str(n)] + p[6:]) + "\n")
                cursor += len(bs) * 4096
                continue
            for b in bs:
                if b not in where:
                    where[b] = cursor
                    cursor += 4096
            # The request's bytes, block by block, in contiguous pieces.
            pieces, lo, hi = [], off, off + n
            for b in bs:
                a, e = max(lo, b * 4096), min(hi, (b + 1) * 4096)
                at = where[b] + a - b * 4096
                if pieces and pieces[-1][0] + pieces[-1][1] == at:
                    pieces[-1][1] += e - a
                else:
                    pieces.append([at, e - a])
            extra += len(pieces) - 1
            for at, m in pieces:
                out.write(" ".join(p[:4] + [str(at), str(m)] + p[6:]) + "\n")
    return moved, extra, cursor - area, wlb


# -- the real start-ups ---------------------------------------------------


def cap_setup(k, tmp):
    """(replay trace, export bytes, result.json, {run2 program: (line a,
    line b)}, what run 1 read (`rewrite`'s `train`), the request where
    opt plans) of capture k."""
    cap = opt_real.cap_dir(k)
    opt_real.TMP = tmp
    trace, plan_at, eb, result = opt_real.replay_trace(cap, 600.0)
    lines = {i: m["line"] for i, m in tracefile.markers(trace, eb).items()}
    win = {ph["name"]: (lines[ph["markers"][0]], lines[ph["markers"][1]]) for ph in result["phases"]}
    run1 = [(n[5:], w) for n, w in win.items() if n.startswith("run1-")]
    train = {"seen": set(), "order": {}}
    for i, _, p in rows(trace):
        g = next((n for n, (a, b) in run1 if a < i < b), None) if p and p[3] in ("R", "W") else None
        if g is not None and p[3] == "W":
            train["seen"].update(blocks(int(p[4]), int(p[5])))
        elif g is not None:
            order = train["order"].setdefault(g, {})  # a dict keeps the first-read order
            every = train["order"].setdefault("*", {})  # all of run 1, one copy a block
            for b in blocks(int(p[4]), int(p[5])):
                train["seen"].add(b)
                order.setdefault(b, None)
                every.setdefault(b, None)
    train["order"] = {g: list(o) for g, o in train["order"].items()}
    return trace, eb, result, {n[5:]: w for n, w in win.items() if n.startswith("run2-")}, train, plan_at


def cap_run(l, k, setup, layout, area_gib, tmp, cfg):
    trace, eb, result, run2, seen, _ = setup
    base = os.path.join(tmp, f"cap{k}-{layout}-{area_gib:g}")
    if layout == "plain":
        src, info = trace, (0, 0, 0, {})
    else:
        src = base + ".trace.gz"
        ws = list(run2.items())
        info = rewrite(trace, src, lambda i, p: next((n for n, (a, b) in ws if a < i < b), None), seen, layout,
                       int(area_gib * GIB))
        assert int(area_gib * GIB) + info[2] <= eb - (8 << 20), "the area runs into the marker reads"
    _, phases = capreplay.replay(l, src, cfg, opt_real.DISK, base, opt_real.cap_dir(k))
    if src != trace:
        os.unlink(src)
    return (k, layout, area_gib), {"busy_s": {p: phases[f"run2-{p}"]["busy_s"] + info[3].get(p, 0.0) for p in run2},
                                   "moved": info[0],
                                   "split_pieces": info[1], "area_bytes": info[2]}


def disk_detail(l, k, setup, tmp, cfg, area_gib):
    """Where run 2's disk time goes, at the disk model (`layoutd sim
    --record-disk`), under opt.toml (planned at request plan_at, as
    bench/opt_real.py) and under the `train-prog` and `tape` layouts at
    area_gib: {stack: {program: [disk requests, cache hits, seek s,
    rotation s, the rest of service s (transfer and overhead), service s]}}."""
    trace, eb, result, run2, train, plan_at = setup
    out = {}
    ws = list(run2.items())
    for name in ("opt", "train-prog", "tape"):
        base = os.path.join(tmp, f"dd-cap{k}-{name}")
        src, conf, extra = trace, opt_real.with_trace("bench/results/opt/opt.toml"), ["--message", f"@{plan_at}:plan"]
        if name != "opt":
            src, conf, extra = base + ".trace.gz", cfg, []
            rewrite(trace, src, lambda i, p: next((n for n, (a, b) in ws if a < i < b), None), train, name,
                    int(area_gib * GIB))
        subprocess.run([l, "sim", "--trace", src, *capreplay.ONE_STREAM, "--config", conf, "--disk", opt_real.DISK,
                        "--closed-loop", "--no-progress", "--record-trace", base + ".rec", "--record-disk",
                        base + ".disk", "--json", base + ".json", *extra], check=True, capture_output=True)
        marks = {i: m["submit_ns"] for i, m in tracefile.markers(base + ".rec", eb).items()}
        win = {ph["name"][5:]: (marks[ph["markers"][0]], marks[ph["markers"][1]]) for ph in result["phases"]
               if ph["name"].startswith("run2-")}
        acc = {p: [0, 0, 0.0, 0.0, 0.0, 0.0] for p in win}
        for line in open(base + ".disk"):
            f = line.split()
            if line.startswith("#") or len(f) < 10:
                continue
            arr, start, done = int(f[0]), int(f[1]), int(f[2])
            hit, seek, rot = int(f[6]), int(f[7]), int(f[8])
            for p, (a, b) in win.items():
                if a < arr < b:
                    c = acc[p]
                    c[0] += 1
                    c[1] += hit
                    c[2] += seek / 1e9
                    c[3] += rot / 1e9
                    c[4] += (done - start - seek - rot) / 1e9
                    c[5] += (done - start) / 1e9
        out[name] = acc
        for ext in (".rec", ".disk", ".json", ".trace.gz"):
            if os.path.exists(base + ext) and not (ext == ".trace.gz" and src == trace):
                os.unlink(base + ext)
    return out


# -- the multi-day held-out days ------------------------------------------


def day_setup(seed):
    trace = os.path.join(ROOT, f"bench/traces/opt/variation/0.5/seed{seed}/desktop-4days.trace.gz")
    seen = set()
    for _, _, p in rows(trace):
        if p and p[3] in ("R", "W") and int(p[0]) < DAY_NS:
            seen.update(blocks(int(p[4]), int(p[5])))
    return trace, {"seen": seen, "order": {}}


def day_run(l, seed, setup, layout, area_gib, tmp):
    trace, seen = setup
    base = os.path.join(tmp, f"s{seed}-{layout}-{area_gib:g}")
    if layout == "plain":
        src, info = trace, (0, 0, 0, {})
    else:
        src = base + ".trace.gz"
        info = rewrite(trace, src, lambda i, p: 0 if int(p[0]) >= DAY_NS else None, seen, layout, int(area_gib * GIB))
    subprocess.run([l, "sim", "--trace", src, "--format", "layoutd", "--closed-loop", "--disk", "wd800", "--seed",
                    "1", "--no-progress", "--json", base + ".json", "--config", os.path.join(ROOT, PLAIN),
                    "--record-trace", base + ".rec"], check=True, capture_output=True)
    ms = opt_report.held_out(json.load(open(base + ".json")))
    if layout.endswith("-nw"):
        # The held-out mean with the left-out writes at their least time.
        held = [int(p[1]) - int(p[0]) for _, _, p in rows(base + ".rec") if p and int(p[0]) >= DAY_NS]
        wr = sum(1 for _, _, p in rows(trace) if p and p[3] == "W" and int(p[0]) >= DAY_NS)
        ms = (sum(held) / 1e6 + info[3].get(0, 0.0) * 1e3) / (len(held) + wr)
    os.unlink(base + ".json")
    os.unlink(base + ".rec")
    if src != trace:
        os.unlink(src)
    return (seed, layout, area_gib), {"held_out_ms": ms, "moved": info[0], "area_bytes": info[2]}


def day_ops(l, seed, setup, area_gib, tmp):
    """{stack: (held-out reads' mean response ms, writes' mean ms)} of one
    seed: plain, `tape-before` at area_gib, and opt-relay.toml placed from
    day 1 planning every 1024 ms (as `placed.md`)."""
    trace, train = setup
    out = {}
    for name in ("plain", "tape-before", "opt-relay"):
        d = os.path.join(tmp, f"ops-{seed}-{name}")
        os.makedirs(d)
        src, conf = trace, PLAIN
        if name == "tape-before":
            src = os.path.join(d, "t.trace.gz")
            rewrite(trace, src, lambda i, p: 0 if int(p[0]) >= DAY_NS else None, train, name, int(area_gib * GIB))
        elif name == "opt-relay":
            plans = open(trace.replace(".trace.gz", ".plan-times")).read().split()
            conf, _, _ = opt_variation.placed(l, "bench/results/opt/opt-relay.toml", trace, plans[0], d)
            conf = opt_phases.continuous_config(conf, 1024, d)
        (up,) = opt_phases.run(l, conf, src, None, d, ("up",))
        rs = [(op, done - t) for t, done, op, _, _ in opt_phases.load(up) if t >= DAY_NS]
        out[name] = tuple(sum(x for o, x in rs if o == op) / 1e6 / max(1, sum(1 for o, _ in rs if o == op))
                          for op in "RW")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layoutd", default=os.environ.get("LAYOUTD", os.path.join(ROOT, "target/release/layoutd")))
    ap.add_argument("--captures", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4])
    ap.add_argument("--areas", type=float, nargs="+", default=[0.5] + list(range(2, 73, 2)),
                    help="the area's start, GiB of the volume (default: %(default)s)")
    ap.add_argument("--detail-area", type=float, default=36.0,
                    help="the area (GiB) of the disk-level comparison with opt (default: %(default)s, beside "
                    "opt.toml's region at 37 GiB)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--skip-days", action="store_true", help="the start-ups only")
    a = ap.parse_args()
    os.chdir(ROOT)  # opt_variation names the traces from the repository's root
    l = os.path.abspath(a.layoutd)
    tracefile.use(l)
    tmp = tempfile.mkdtemp(prefix="opt_bound-")
    opt_real.TMP = tmp
    cfg = opt_real.with_trace(PLAIN)
    caps = {k: cap_setup(k, tmp) for k in a.captures}
    jobs = [(k, "plain", 0) for k in caps] + [(k, lay, g) for k in caps for lay in LAYOUTS for g in a.areas]
    with concurrent.futures.ThreadPoolExecutor(a.jobs) as ex:
        real = dict(ex.map(lambda j: cap_run(l, j[0], caps[j[0]], j[1], j[2], tmp, cfg), jobs))
    detail = {k: disk_detail(l, k, caps[k], tmp, cfg, a.detail_area) for k in caps}
    days = {}
    if not a.skip_days:
        ds = {s: day_setup(s) for s in a.seeds}
        jobs = [(s, "plain", 0) for s in ds] + [(s, lay, g) for s in ds for lay in DAY_LAYOUTS for g in a.areas]
        with concurrent.futures.ThreadPoolExecutor(a.jobs) as ex:
            days = dict(ex.map(lambda j: day_run(l, j[0], ds[j[0]], j[1], j[2], tmp), jobs))
        # opt itself per seed, as bench/opt_sim.sh's placed.md runs it (the
        # region placed from day 1), as a speed-up over plain.toml.
        for c in OPT_DAYS:
            for s in ds:
                d = os.path.join(tmp, f"ov-{c}-{s}")
                os.makedirs(d)
                r = opt_variation.one(l, os.path.join("bench/results/opt", c + ".toml"), PLAIN, 0.5, s, d,
                                      continuous=(1024,), place=True)
                days[s, c, 0] = {"one_plan": r[2] * r[7][1], "continuous_1024": r[5][0] * r[7][1]}
        for s in ds:
            g = min(a.areas, key=lambda x: days[s, "tape-before", x]["held_out_ms"])
            days[s, "ops", g] = day_ops(l, s, ds[s], g, tmp)
    out = {"areas_gib": a.areas, "real": {f"cap{k}/{lay}/{g:g}": v for (k, lay, g), v in real.items()},
           "days": {f"seed{s}/{lay}/{g:g}": v for (s, lay, g), v in days.items()},
           "disk_detail": {f"cap{k}": v for k, v in detail.items()}}
    json.dump(out, open(os.path.join(RES, "bound.json"), "w"), indent=0)
    shutil.rmtree(tmp)
    report(real, days, detail, a)


def report(real, days, detail, a):
    summ = json.load(open(os.path.join(RES, "real/summary.json")))["runs"]
    caps = sorted({k for k, _, _ in real})
    progs = list(real[caps[0], "plain", 0]["busy_s"])
    L = ["# `opt`: the best any layout could do (an upper bound on the speed-up)", "",
         "`python3 bench/workloads/opt_bound.py` (bench/workloads/opt_bound.py says how; "
         "bench/results/opt/README.md, session 29, \"The bound\"). The held-out requests rewritten to a layout, "
         "replayed closed-loop on wd800 through `plain.toml` (same disk, queue, think time and home layout as "
         "the benchmark's plain; every other request untouched), the layout's area swept over "
         + ", ".join(f"{g:g}" for g in a.areas) + " GiB of the volume and the best kept. Layouts: `tape` every "
         "held-out read request in trace order, one sequential pass (copies allowed); `tape-rw` the held-out "
         "writes in the pass too; `tape-nw` the held-out writes at the least time a write can take on wd800 "
         "(transfer and bus, no seek or rotation); `first-prog` one copy per block and program in first-read "
         "order; `first` one copy per block; `train-prog` each program's blocks in run 1's first-read order, "
         "a copy per program, "
         "run 2's reads of blocks run 1 did not read left home (the ideal plan trained on run 1); `train` the same "
         "with one copy per block (run 1 in its first-read order); `tape-seen` "
         "`tape` for the reads whose blocks the training read or wrote, the rest home; `tape-before` `tape` for "
         "the reads whose blocks some earlier request read or wrote (what an online loop could have placed). "
         "**bound** = the fastest of these per capture (seed) and program. Deterministic simulated disk time.", ""]
    bounds = LAYOUTS

    def busy(k, lay, p, g=None):
        if lay in ("opt", "opt-relay") or lay.endswith("placed") or lay == "plain-summary":
            name = "plain" if lay == "plain-summary" else lay
            b = summ[f"cap{k}/one/{name}"]["busy_s"]
            return sum(b[f"run2-{q}"] for q in progs) if p == "all six" else b[f"run2-{p}"]
        if lay == "bound":
            return min(busy(k, x, p) for x in bounds)
        if g is None:  # the best area for this program (all six: the best one area for all)
            return min(busy(k, lay, p, x) for x in a.areas)
        b = real[k, lay, g]["busy_s"]
        return sum(b.values()) if p == "all six" else b[p]

    check = [(k, p, abs(busy(k, "plain", p, 0) - busy(k, "plain-summary", p))) for k in caps for p in progs]
    bad = [c for c in check if c[2] > 1e-3]
    cols = ["opt", "opt-relay", "opt-placed", "bound", "tape", "tape-rw", "tape-nw", "first-prog", "first",
            "train-prog", "train-prog-nw", "train",
            "tape-seen", "tape-before"]
    L += ["## Real start-ups, run 2 (held out): speed-up over plain, median of the captures (range)", "",
          f"Disk-busy seconds between the program's marker reads. plain replayed here equals `real/summary.json`'s "
          f"plain: {'yes' if not bad else 'NO ' + str(bad)}. opt, opt-relay, opt-placed: from `real/summary.json` "
          "(one stream; as `serve` gives the same figures), all against `plain.toml` (opt-placed's README "
          "column is against `plain-placed`). A layout's figure takes each program's best area (its run may "
          "lie anywhere); all six: the best single area.", "",
          "| program | plain s | opt s | bound s | " + " | ".join(cols) + " | bound/opt |",
          "| --- | ---: | ---: | ---: | " + " | ".join("---:" for _ in cols) + " | ---: |"]
    slow = []
    for p in progs + ["all six"]:
        def sp(lay):
            xs = [busy(k, "plain", p, 0) / busy(k, lay, p) for k in caps]
            return f"{median(xs):.2f}x ({min(xs):.2f}-{max(xs):.2f})"

        for k in caps:
            if busy(k, "bound", p) > busy(k, "opt", p) + 1e-9:
                slow.append((k, p, busy(k, "bound", p), busy(k, "opt", p)))
        b = "**" if p == "all six" else ""
        ratio = [busy(k, "opt", p) / busy(k, "bound", p) for k in caps]
        cells = [f"{median([busy(k, x, p, 0 if x == 'plain' else None) for k in caps]):.3f}"
                 for x in ("plain", "opt", "bound")] + [sp(x) for x in cols] + [
                     f"{median(ratio):.2f}x ({min(ratio):.2f}-{max(ratio):.2f})"]
        L.append(f"| {b}{p}{b} | " + " | ".join(f"{b}{c}{b}" for c in cells) + " |")
    L += ["", "Captures where the bound is slower than opt (capture, program, bound s, opt s): "
          + (", ".join(f"cap{k} {p} {x:.3f} > {y:.3f}" for k, p, x, y in slow) if slow else "none") + ".", "",
          "Per capture, bound / plain: " + "; ".join(
              f"cap{k} " + ", ".join(f"{p} {busy(k, 'plain', p, 0) / busy(k, 'bound', p):.2f}x"
                                     for p in progs + ["all six"]) for k in caps) + ".", "",
          "Best area (GiB) for `tape`: " + "; ".join(
              f"cap{k} " + ", ".join(f"{p} {min(a.areas, key=lambda g: busy(k, 'tape', p, g)):g}"
                                     for p in progs + ["all six"]) for k in caps) + ".", "",
          "`tape` at each area, all six, speed-up over plain per capture: " + "; ".join(
              f"{g:g} GiB " + "/".join(f"{busy(k, 'plain', 'all six', 0) / busy(k, 'tape', 'all six', g):.2f}"
                                       for k in caps) for g in a.areas) + ".", "",
          "Held-out requests moved / pieces added by splits / area MiB: " + "; ".join(
              f"{lay} " + ", ".join(f"cap{k} {real[k, lay, a.areas[0]]['moved']} / "
                                    f"{real[k, lay, a.areas[0]]['split_pieces']} / "
                                    f"{real[k, lay, a.areas[0]]['area_bytes'] >> 20}" for k in caps)
              for lay in LAYOUTS) + ".", ""]
    L += ["## Where run 2's disk time goes: opt against `train-prog` and `tape` (the disk model's record)", "",
          f"`layoutd sim --record-disk` of opt.toml (planned after run 1, as bench/opt_real.py) and of the "
          f"`train-prog` and `tape` layouts at {a.detail_area:g} GiB (beside opt's region), the disk requests "
          "that arrive in run 2's program windows, summed over the captures: requests (cache hits), seek, "
          "rotation, and the rest of the service time (transfer and overhead), seconds. Service times of "
          "overlapping requests add up, so a sum can exceed the disk-busy time.", "",
          "| program | " + " | ".join(f"{n}: requests (hits) / seek / rotation / rest" for n in detail[caps[0]]) + " |",
          "| --- | " + " | ".join("---:" for _ in detail[caps[0]]) + " |"]
    for p in progs + ["all six"]:
        cells = []
        for n in detail[caps[0]]:
            c = [sum(detail[k][n][q][i] for k in caps for q in (progs if p == "all six" else [p])) for i in range(6)]
            cells.append(f"{c[0]:.0f} ({c[1]:.0f}) / {c[2]:.3f} / {c[3]:.3f} / {c[4]:.3f}")
        b = "**" if p == "all six" else ""
        L.append(f"| {b}{p}{b} | " + " | ".join(f"{b}{x}{b}" for x in cells) + " |")
    L.append("")
    if days:
        seeds = sorted({s for s, _, _ in days})
        ops = {s: next(v for (s2, n, _), v in days.items() if s2 == s and n == "ops") for s in seeds}
        L += ["## Multi-day, S = 0.5, days 2-4 (held out): speed-up over `plain.toml`", "",
              "The held-out mean I/O time per request (`opt_report.held_out`), best area per seed and layout. "
              "`tape-seen`: the reads whose blocks day 1 read or wrote (a plan trained on day 1); `tape-before`: "
              "whose blocks any earlier request read or wrote (a loop planning before every request); `-rw`: the "
              "held-out writes in the pass too; `-nw`: the held-out writes at the least time a write can take "
              "(no seek or "
              "rotation). opt and opt-relay: `opt_variation.one` with the region placed from day 1 "
              "(`--place`, as `placed.md`), one plan after day 1 / continuous every 1024 ms, times the placed "
              "plain's factor so that they are over `plain.toml` too.", "",
              "| seed | plain ms | " + " | ".join(DAY_LAYOUTS) + " | " + " | ".join(
                  f"{c} one plan / every 1 s" for c in OPT_DAYS) + " | best area GiB (tape) |",
              "| --- | ---: | " + " | ".join("---:" for _ in DAY_LAYOUTS + OPT_DAYS) + " | ---: |"]
        med = {lay: [] for lay in DAY_LAYOUTS + OPT_DAYS}
        for s in seeds:
            pl = days[s, "plain", 0]["held_out_ms"]
            best = {lay: min(days[s, lay, g]["held_out_ms"] for g in a.areas) for lay in DAY_LAYOUTS}
            for lay in DAY_LAYOUTS:
                med[lay].append(pl / best[lay])
            for c in OPT_DAYS:
                med[c].append((days[s, c, 0]["one_plan"], days[s, c, 0]["continuous_1024"]))
            g = min(a.areas, key=lambda x: days[s, "tape", x]["held_out_ms"])
            L.append(f"| {s} | {pl:.3f} | " + " | ".join(f"{pl / best[lay]:.2f}x" for lay in DAY_LAYOUTS) + " | "
                     + " | ".join(f"{days[s, c, 0]['one_plan']:.2f}x / {days[s, c, 0]['continuous_1024']:.2f}x"
                                  for c in OPT_DAYS) + f" | {g:g} |")
        L.append("| **median** | | " + " | ".join(f"**{median(med[lay]):.2f}x**" for lay in DAY_LAYOUTS) + " | "
                 + " | ".join(f"**{median([x[0] for x in med[c]]):.2f}x / {median([x[1] for x in med[c]]):.2f}x**"
                              for c in OPT_DAYS) + " | |")
        L += ["", "Held-out mean response by op, reads / writes, ms (`tape-before` at its best area; opt-relay "
              "placed, continuous every 1024 ms): " + "; ".join(
                  f"seed {s} " + ", ".join(f"{n} {r:.2f} / {w:.2f}" for n, (r, w) in ops[s].items()) for s in seeds)
              + "."]
        L += ["", "`tape` at each area, speed-up per seed: " + "; ".join(
            f"{g:g} GiB " + "/".join(f"{days[s, 'plain', 0]['held_out_ms'] / days[s, 'tape', g]['held_out_ms']:.2f}"
                                     for s in seeds) for g in a.areas) + ".", ""]
    open(os.path.join(RES, "bound.md"), "w").write("\n".join(L))
    print("\n".join(L))


if __name__ == "__main__":
    main()
