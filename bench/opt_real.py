#!/usr/bin/env python3
"""The `opt` benchmark's start-up row on real programs (issue 15): cold
start-ups of python, perl, gcc, git, man and tar|xz installed on the volume
(a copy of /usr's parts, run through chroot: bench/workloads/opt_startup.py),
run twice, captured live, replayed closed-loop in `layoutd sim` on wd800
through plain, opt and replica side by side, and optionally confirmed live
under `--emulate wd800`. bench/results/opt/real/README.md.

Steps:
  1. capture (`--capture K ...`: capK again; `--capture` alone: each
     missing capK, K = 1 .. --captures; needs root): `bench/run
     opt-startup --config bench/results/opt/plain.toml --out
     bench/traces/opt/real/capK` (tmpfs speed: the disk time comes from the
     replay). Run 1 = training, run 2 = held-out evaluation, a marker read
     before and after each program.
  2. replay (always; deterministic, seconds): each capture with --gap-s
     seconds of think time inserted before run 2 (idle time for opt's
     copies; plain and replica have nothing to do in it), closed loop, on
     wd800, through each stack of STACKS (a `trace` layer on top), in two
     ways (MODES): with `--stream-detect`, so the simulator's stream
     detector refines the one stream as `serve` does live, and as the
     layoutd trace, one stream. The opt stacks get `plan` at the reconfigure phase's first
     marker read (trained on run 1 alone); the replica stacks get the
     setup's free extents as discards first. A program's figure is its
     disk-busy seconds (time with a request outstanding at the top of the
     stack between its marker reads). Then where opt's run 2 time goes (a
     `trace` layer below opt: each request's pieces in the region or home).
  3. live (with --live; needs root; minutes of wall time): `bench/run
     opt-startup --emulate wd800 --setup-region drop --record-disk` on
     plain.toml and on opt.toml (there the reconfigure phase runs `layoutd
     opt plan --socket` and waits for job_active=0; the OPT region is
     emptied after the setup, as in the replays), into bench/results/opt/real/NAME-STACK (--live-name,
     default live); every NAME-plain / NAME-opt pair found there is compared
     with the replay.

Writes bench/results/opt/real/README.md (tables above the notes marker; the
notes below it are kept) and summary.json.

Usage: bench/opt_real.py [--capture [K ...]] [--captures 3] [--live [--live-name NAME]] [--gap-s 600] [--jobs 2]
"""
import argparse
import collections
import concurrent.futures
import gzip
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench/harness"))
sys.path.insert(0, os.path.join(ROOT, "bench/workloads"))
import capreplay  # noqa: E402
import opt_variation  # noqa: E402
import readme  # noqa: E402
import tracefile  # noqa: E402

CAPS = os.path.join(ROOT, "bench/traces/opt/real")  # one capture per capN/
OUT = os.path.join(ROOT, "bench/results/opt/real")
TMP = os.path.join(OUT, "tmp")
DISK = "wd800"
MARK = "<!-- Notes below this line are written by hand and kept when bench/opt_real.py regenerates this file. -->"
OPT0, OPT1 = 37 << 30, 38 << 30  # the region of bench/results/opt/opt.toml
# A config PLACED + CONFIG (session 29): CONFIG with the region where
# `layoutd opt place` puts it from the capture's run 1 (the training
# run's requests, marker reads left out), per capture; PLACED alone: plain
# with that home layout, the baseline of the placed stacks (BASELINE).
PLACED = "placed:"
BASELINE = {"opt-placed": "plain-placed", "opt-relay-placed": "plain-placed", "opt-time-placed": "plain-placed",
            "opt-time-behind-placed": "plain-placed"}
# (name, config, plans at the reconfigure marker?, the free space declared
# first?). replica replicates into free space only: it learns it from an
# ext scan at open (live) or from discards; the simulator has no data to
# scan, so its replays start with a discard of each free extent the setup
# left (bench/workloads/opt_startup.py, free_extents).
STACKS = [("plain", "bench/results/opt/plain.toml", False, False),
          ("opt", "bench/results/opt/opt.toml", True, False),
          ("opt-run", "bench/results/opt/opt-run.toml", True, False),
          ("opt-home", "bench/results/opt/opt-home.toml", True, False),
          ("opt-ra", "bench/results/opt/opt-ra.toml", True, False),
          ("opt-relay", "bench/results/opt/opt-relay.toml", True, False),
          ("opt-time", "bench/results/opt/opt-time.toml", True, False),
          ("opt-relay-time", "bench/results/opt/opt-relay-time.toml", True, False),
          ("opt-time-behind", "bench/results/opt/opt-time-behind.toml", True, False),
          ("plain-placed", PLACED, False, False),
          ("opt-placed", PLACED + "bench/results/opt/opt.toml", True, False),
          ("opt-relay-placed", PLACED + "bench/results/opt/opt-relay.toml", True, False),
          ("opt-time-placed", PLACED + "bench/results/opt/opt-time.toml", True, False),
          ("opt-time-behind-placed", PLACED + "bench/results/opt/opt-time-behind.toml", True, False),
          ("replica", "examples/replica.toml", False, True),
          ("replica-all-goals", "examples/replica-all-goals.toml", False, True)]
# How the replay gives the stacks their streams: "serve" = the layoutd trace
# with `--stream-detect`, so the simulator's stream detector refines the one
# NBD connection as `serve` does live; "one" = the layoutd trace as recorded,
# one stream.
MODES = ("serve", "one")
FORMAT = {"serve": ("--format", "layoutd", "--stream-detect"), "one": capreplay.ONE_STREAM}
LIVE = [("plain", "bench/results/opt/plain.toml"), ("opt", "bench/results/opt/opt.toml")]
# The opt stacks a live pair NAME-plain / NAME-STACK may have been run with
# (by hand: `bench/run opt-startup --config CONFIG --emulate wd800 --out
# bench/results/opt/real/NAME-STACK`), each compared with its replay.
LIVE_OPT = ("opt", "opt-time", "opt-time-behind")


def layoutd():
    return os.environ.get("LAYOUTD", os.path.join(ROOT, "target/release/layoutd"))


def with_trace(config, below=None):
    """`config`'s layers with a `trace` layer on top, or (below = target)
    right under the layer of that target instead; the path of the copy."""
    lines = [ln for ln in open(os.path.join(ROOT, config)).read().splitlines()
             if ln.strip() and not ln.lstrip().startswith("#") and not ln.startswith("version")]
    body = "\n".join(lines) + "\n"
    if below is None:
        text = 'version = 1\n[[layer]]\ntarget = "trace"\n' + body
    else:
        text = "version = 1\n" + body + '[[layer]]\ntarget = "trace"\n'
        assert f'target = "{below}"' in body and body.count("[[layer]]") == 1, config
    name = os.path.basename(config).replace(".toml", "") + ("-down" if below else "") + ".toml"
    path = os.path.join(TMP, name)
    open(path, "w").write(text)
    return path


def cap_dir(k):
    return os.path.join(CAPS, f"cap{k}")


def capture(k):
    cmd = [os.path.join(ROOT, "bench/run"), "opt-startup", "--config", "bench/results/opt/plain.toml",
           "--out", os.path.relpath(cap_dir(k), ROOT)]
    print(f"capture: {' '.join(cmd)}", file=sys.stderr)
    subprocess.run(cmd, check=True, cwd=ROOT)


def replay_trace(cap, gap_s):
    """The capture with gap_s seconds before run 2, as one stream; the
    request index of the reconfigure phase's first marker read (where the
    opt stacks plan) and the export size."""
    src = os.path.join(cap, "trace.gz")
    result = json.load(open(os.path.join(cap, "result.json")))
    eb = result["rig"]["export_bytes"]
    ph = {p["name"]: p["markers"] for p in result["phases"]}
    lines = {k: m["line"] for k, m in tracefile.markers(src, eb).items()}
    plan_line, run2_line = lines[ph["reconfigure"][0]], lines[ph["reconfigure"][1]]
    n = 0
    with gzip.open(src, "rt") as f:
        for k, line in enumerate(f, 1):
            if k == plan_line:
                break
            if not line.startswith("#") and line.strip():
                n += 1
    dst = tracefile.one_stream(src, os.path.join(TMP, os.path.basename(cap) + ".trace.gz"), gap_at_line=run2_line,
                               gap_ns=int(gap_s * 1e9))
    return dst, n, eb, result


def with_free(trace, result):
    """`trace` with a discard of each free extent of the populated volume
    first (at most 32 MiB a request, as a request carries), at its first
    request's instant."""
    dst = trace.replace(".trace.gz", "-free.trace.gz")
    piece = 32 << 20
    with gzip.open(trace, "rt") as src, gzip.open(dst, "wt") as out:
        first = True
        for line in src:
            if first and not line.startswith("#") and line.strip():
                p = line.split()
                for off, n in result["rig"]["setup"]["free_extents"]:
                    for at in range(0, n, piece):
                        out.write(f"{p[0]} {p[0]} {p[2]} T {off + at} {min(piece, n - at)} -\n")
                first = False
            out.write(line)
    return dst


def training(trace, plan_at, eb):
    """The first `plan_at` requests of `trace` (run 1, what the opt stacks
    plan from), the harness's marker reads (the export's last 8 MiB) left
    out, as a trace file beside it."""
    dst = trace.replace(".trace.gz", "-run1.trace")
    n = 0
    with gzip.open(trace, "rt") as src, open(dst, "w") as out:
        for line in src:
            if line.startswith("#") or not line.strip():
                out.write(line)
                continue
            if n == plan_at:
                break
            n += 1
            if int(line.split()[4]) < eb - (8 << 20):
                out.write(line)
    return dst


def placed_configs(l, cap, trace, plan_at, eb):
    """{PLACED + CONFIG: the placed copy, PLACED: plain with its home
    layout} for capture `cap`."""
    run1 = training(trace, plan_at, eb)
    out, k = {}, os.path.basename(cap)
    for _, c, _, _ in STACKS:
        if c.startswith(PLACED) and c != PLACED:
            name = f"{k}-" + os.path.basename(c[len(PLACED):]).replace(".toml", "-placed")
            out[c], out[PLACED], _ = opt_variation.placed(l, c[len(PLACED):], run1, None, TMP, name)
    return out


def replay(l, name, config, plans, cap, trace, plan_at, mode):
    """One stack on the capture `cap`'s `trace` (made for `mode`)."""
    extra = ["--message", f"@{plan_at}:plan"] if plans else []
    base = os.path.join(TMP, f"{os.path.basename(cap)}-{name}-{mode}")
    j, phases = capreplay.replay(l, trace, with_trace(config), DISK, base, cap, extra, fmt=FORMAT[mode])
    layers = {x["target"]: x.get("counters", {}) for x in j["stack"]["layers"]}
    return (os.path.basename(cap), mode, name), {"busy_s": {k: v["busy_s"] for k, v in phases.items()},
                  "requests": {k: v["requests"] for k, v in phases.items()},
                  "counters": layers.get("opt") or layers.get("replica") or {}}


def load(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        rows = (line.split() for line in f if not line.startswith("#") and line.strip())
        return [(int(r[0]), int(r[1]), r[3], int(r[4]), int(r[5])) for r in rows]


def blocks(off, n):
    return range(off // 4096, (off + n + 4095) // 4096)


def breakdown(l, config, trace, plan_at, eb, result, mode):
    """Where run 2's time goes under `config` (an opt stack, planned at
    request plan_at): the same replay with the trace layer on top and one
    right below opt, each upper request joined to its lower pieces by
    submit time (the replay is deterministic). Returns {program: {class:
    [requests, sum of response ms]}}."""
    recs = {}
    fmt = FORMAT[mode]
    for where, cfg in (("up", with_trace(config)), ("down", with_trace(config, below="opt"))):
        rec = os.path.join(TMP, f"bd-{where}.trace")
        subprocess.run([l, "sim", "--trace", trace, *fmt, "--config", cfg,
                        "--disk", DISK, "--closed-loop", "--no-progress", "--record-trace", rec,
                        "--json", os.path.join(TMP, f"bd-{where}.json"), "--message", f"@{plan_at}:plan"],
                       check=True, capture_output=True)
        recs[where] = rec
    up = load(recs["up"])
    pieces = collections.defaultdict(list)
    for r in load(recs["down"]):
        pieces[r[0]].append(r)
    marks = {m["index"]: m["submit_ns"] for m in tracefile.stats(recs["up"], eb)["markers"]}
    phases = [(p["name"], marks[p["markers"][0]], marks[p["markers"][1]]) for p in result["phases"]]
    seen = {}  # block -> (index in run 1's reads, program) of its first read in run 1
    pos = {}  # (program, offset, length) -> index in run 1's reads of the request's first time
    succ = set()  # (program, (offset, length), (offset, length)): one read right after the other in run 1
    i = 0
    for name, a, b in phases:
        if name.startswith("run1-"):
            prev = None
            for t, _, op, off, n in up:
                if a < t < b and op == "R":
                    for x in blocks(off, n):
                        seen.setdefault(x, (i, name[5:]))
                    pos.setdefault((name[5:], off, n), i)
                    if prev:
                        succ.add((name[5:], prev, (off, n)))
                    prev = (off, n)
                    i += 1
    out = {}
    for name, a, b in phases:
        if not name.startswith("run2-"):
            continue
        c = collections.defaultdict(lambda: [0, 0.0])
        last = prev = None
        prog = name[5:]
        for t, done, op, off, n in up:
            if not a < t < b:
                continue
            ps = pieces.get(t, [])
            if op != "R":
                k = "writes" if op == "W" else "flushes and others"
            else:
                in_opt = [OPT0 <= p[3] < OPT1 for p in ps]
                from_opt = last is not None and OPT0 <= last < OPT1
                if ps and all(in_opt):
                    if from_opt and abs(ps[0][3] - last) <= 1 << 20:
                        k = "mapped: going on (within 1 MiB)"
                    elif not from_opt:
                        k = "mapped: seek in from home"
                    else:
                        # Why not right after the previous read: run 1 read the
                        # same pair in the same order, its blocks for the first
                        # time (a layout that could go on); or an earlier
                        # program of run 1 read them first (a shared file); or
                        # run 1 had another order.
                        i = pos.get((prog, off, n))
                        first = seen.get(off // 4096)
                        if i is not None and first and first[0] < i and first[1] != prog:
                            k = "mapped: seek within the region, an earlier program read it first"
                        elif (prog, prev, (off, n)) in succ:
                            k = "mapped: seek within the region, after the same read as in run 1"
                        else:
                            k = "mapped: seek within the region, another order than run 1"
                elif not any(in_opt):
                    trained = all(x in seen for x in blocks(off, n))
                    k = "home: " + ("run 1 read them" if trained else "run 1 never read them")
                else:
                    k = "split: region + home"
            c[k][0] += 1
            c[k][1] += (done - t) / 1e6
            if ps:
                last = ps[-1][3] + ps[-1][4]
            prev = (off, n) if op == "R" else None
        out[prog] = dict(c)
    for f in recs.values():
        os.unlink(f)
    return out


def live(name, stack, config):
    d = os.path.join(OUT, f"{name}-{stack}")
    # --setup-region drop: run 1 starts with an empty OPT region, as in the
    # replays (the captures were made on plain, so the setup's writes never
    # reached an opt region there); --record-disk: the emulated disk's own
    # record (disk.gz), for bench/opt_live_disk.py.
    cmd = [os.path.join(ROOT, "bench/run"), "opt-startup", "--config", config, "--emulate", DISK,
           "--setup-region", "drop", "--record-disk", "--out", os.path.relpath(d, ROOT)]
    print(f"live: {' '.join(cmd)}", file=sys.stderr)
    subprocess.run(cmd, check=True, cwd=ROOT)


def live_runs():
    """{NAME: {stack: (result.json, {phase: busy seconds})}} of every
    NAME-STACK live run in OUT (NAME: live, live2, ...)."""
    out = {}
    for d in sorted(os.listdir(OUT)):
        stack = next((st for st in sorted(("plain", *LIVE_OPT), key=len, reverse=True) if d.endswith("-" + st)), "")
        name = d[:-len(stack) - 1]
        p = os.path.join(OUT, d, "result.json")
        if stack and name.startswith("live") and os.path.exists(p):
            r = json.load(open(p))
            out.setdefault(name, {})[stack] = (r, {ph["name"]: ph["trace"]["busy_seconds"] for ph in r["phases"]})
    return out


def median(xs):
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--capture", type=int, nargs="*", metavar="K",
                    help="capture capK again for each K given (root); without K: the missing of 1..--captures")
    ap.add_argument("--captures", type=int, default=3, help="captures replayed (default: %(default)s)")
    ap.add_argument("--live", action="store_true", help="run the live confirmation under --emulate (root)")
    ap.add_argument("--live-name", default="live",
                    help="the live runs go to NAME-plain and NAME-opt (default: %(default)s)")
    ap.add_argument("--gap-s", type=float, default=600.0, help="idle seconds before run 2 (default: %(default)s)")
    ap.add_argument("--jobs", type=int, default=2)
    a = ap.parse_args()
    os.makedirs(TMP, exist_ok=True)
    l = layoutd()
    tracefile.use(l)
    caps = list(range(1, a.captures + 1))
    for k in caps:
        if (a.capture is not None and (k in a.capture or not a.capture)
                and (k in (a.capture or []) or not os.path.exists(os.path.join(cap_dir(k), "trace.gz")))):
            capture(k)
        if not os.path.exists(os.path.join(cap_dir(k), "trace.gz")):
            sys.exit(f"opt_real: no capture in {os.path.relpath(cap_dir(k), ROOT)}: run `sudo bench/opt_real.py "
                     f"--capture {k}`")
    if a.live:
        for stack, config in LIVE:
            live(a.live_name, stack, config)
    jobs, meta = [], {}
    for k in caps:
        cap = cap_dir(k)
        trace, plan_at, eb, result = replay_trace(cap, a.gap_s)
        free = with_free(trace, result)
        # The trace each (mode, free space declared?) replays, made once.
        traces = {("one", False): trace, ("one", True): free,
                  ("serve", False): trace, ("serve", True): free}
        meta[f"cap{k}"] = (traces, plan_at, eb, result)
        configs = placed_configs(l, cap, trace, plan_at, eb)
        jobs += [(n, configs.get(c, c), p, cap, traces[mode, f], plan_at, mode) for mode in MODES
                 for n, c, p, f in STACKS]
    with concurrent.futures.ThreadPoolExecutor(a.jobs) as ex:
        runs = dict(ex.map(lambda j: replay(l, *j), jobs))
    bd = {mode: {c: breakdown(l, "bench/results/opt/opt.toml", m[0][mode, False], m[1], m[2], m[3], mode)
                 for c, m in meta.items()} for mode in MODES}
    first = meta["cap1"][3]
    progs = [p["name"][5:] for p in first["phases"] if p["name"].startswith("run2-")]
    lives = live_runs()
    summary = {"disk": DISK, "gap_s": a.gap_s, "plan_at_request": {c: m[1] for c, m in meta.items()},
               "runs": {f"{c}/{m}/{n}": v for (c, m, n), v in runs.items()}, "breakdown_opt": bd,
               "live": {f"{n}-{st}": v[1] for n, runs_ in lives.items() for st, v in runs_.items()}}
    json.dump(summary, open(os.path.join(OUT, "summary.json"), "w"), indent=1)
    report(runs, bd, progs, lives, a, meta)


def report(runs, bd, progs, lives, a, meta):
    names = [n for n, _, _, _ in STACKS]
    caps = sorted(meta)
    tot = {(c, m, n): sum(runs[c, m, n]["busy_s"][f"run2-{p}"] for p in progs)
           for c in caps for m in MODES for n in names}

    def val(c, m, n, p):
        return tot[c, m, n] if p == "all six" else runs[c, m, n]["busy_s"][f"run2-{p}"]

    def base(n):
        return BASELINE.get(n, "plain")

    L = ["# `opt`: cold start-ups of real programs, captured and replayed (issue 15, start-up row)", "",
         "A benchmark, not a test. Six programs of this machine, installed on the volume as a copy of the "
         "needed parts of /usr (1.4 GiB) on ext4 and run through `chroot` "
         "(bench/workloads/opt_startup.py), each from cold caches (umount, drop_caches, mount), run 1 then "
         f"run 2; captured {len(caps)} times at tmpfs speed on `bench/results/opt/plain.toml` "
         "(bench/traces/opt/real/capK/: each capture populates a fresh volume, so ext4 places the files "
         "anew), then each replayed closed-loop in `layoutd sim` on `wd800`, the stacks side by side. The opt "
         "stacks plan once, at the reconfigure phase's first marker read (trained on run 1 alone), and "
         f"{a.gap_s:.0f} s of idle time are inserted before run 2 for the copies. A program's figure is its "
         "disk-busy seconds (a request outstanding at the top of the stack, between its marker reads). "
         "Deterministic.", "",
         "Two ways to give the stacks their streams: **as `serve` does** (the headline: the capture replayed "
         "with `--stream-detect`, so the simulator's stream detector splits the one NBD connection's "
         "interleaved sequential runs, as `serve` does live) and **one stream** (the layoutd trace as "
         "recorded, `--no-stream-detect`). `opt` keys its graphs by the base stream (`graph_stream = "
         "\"base\"`, the default since session 23: the connection, whatever runs the detector splits it "
         "into); `opt-run` by the detected run (`graph_stream = \"run\"`, the behaviour before); "
         "`opt-home` sends unmapped writes home (`absorb_writes = false`); `opt-ra` is `opt` reading ahead "
         "128 KiB along a planned sequence when a read resumes it after the disk went elsewhere (session 24's "
         "shared read-ahead, `readahead_when = \"resumed\"`); `opt-relay` is `opt` laying a sequence out anew "
         "when a run leaves it and reads following the sequences (session 25, `plan_relay`, `read_follow`); "
         "`opt-placed` and `opt-relay-placed` are `opt` and `opt-relay` with the region where `layoutd opt place` "
         "puts it from the capture's run 1 (session 29), each against `plain-placed`, plain with the same home "
         "layout (its own column is against `plain`); `opt-time`, `opt-relay-time` and `opt-time-placed` are "
         "`opt`, `opt-relay` and `opt-placed` with each stream's plan in the order it first made its requests "
         "(session 30, `plan_time_order`: on one connection each program's run as it read, a library it shares "
         "with an earlier program copied into its own sequence); `opt-time-behind` and `opt-time-behind-placed` "
         "are `opt-time` and `opt-time-placed` reading behind (session 31, `readbehind_bytes = 256K`: a read "
         "from the region that starts at most 256 KiB past where its stream's previous read from the region "
         "ended reads the skipped slots too and holds them, so a read of them next comes from memory).", "",
         "Reproduce: `cargo build --workspace --release && bench/opt_real.py` (the replay of the committed "
         "captures, under a minute; `sudo bench/opt_real.py --capture K` captures capK again, `--live` runs "
         "the live confirmation too).", ""]
    for m in MODES:
        L += [f"## Run 2 (held out), streams {'as `serve` gives them' if m == 'serve' else 'as one'}: speed-up "
              "over plain, median of the captures (range)", "",
              "| program | plain s (median) | " + " | ".join(names[1:]) + " |",
              "| --- | ---: | " + " | ".join("---:" for _ in names[1:]) + " |"]
        for p in progs + ["all six"]:
            cells = [f"{median([val(c, m, 'plain', p) for c in caps]):.3f}"]
            for n in names[1:]:
                sp = [val(c, m, base(n), p) / val(c, m, n, p) for c in caps]
                cells.append(f"{median(sp):.2f}x ({min(sp):.2f}-{max(sp):.2f})")
            b = "**" if p == "all six" else ""
            L.append(f"| {b}{p}{b} | " + " | ".join(f"{b}{x}{b}" for x in cells) + " |")
        L.append("")
    for c in caps:
        L += [f"## {c}: run 2 disk-busy seconds per program, as `serve` / one stream (speed-up over plain)", "",
              "| program | " + " | ".join(names) + " |", "| --- | " + " | ".join("---:" for _ in names) + " |"]
        for p in progs + ["all six"]:
            cells = []
            for n in names:
                cells.append(" / ".join(f"{val(c, m, n, p):.3f}" + ("" if n == "plain" else
                                                                      f" ({val(c, m, base(n), p) / val(c, m, n, p):.2f}x)")
                                        for m in MODES))
            b = "**" if p == "all six" else ""
            L.append(f"| {b}{p}{b} | " + " | ".join(cells) + " |")
        L += ["", "Run 1 (training, not a result), plain / opt as `serve`: " + ", ".join(
            f"{p} {runs[c, 'serve', 'plain']['busy_s']['run1-' + p]:.3f} / "
            f"{runs[c, 'serve', 'opt']['busy_s']['run1-' + p]:.3f}" for p in progs) + ". Requests (run 1 / run 2): " +
            ", ".join(f"{p} {runs[c, 'one', 'plain']['requests']['run1-' + p]} / "
                      f"{runs[c, 'one', 'plain']['requests']['run2-' + p]}" for p in progs) + ". opt: " +
            "; ".join(f"{'as `serve`' if m == 'serve' else 'one stream'} {co.get('copies_count')} copies, "
                      f"{co.get('copied_bytes', 0) >> 20} MiB copied, {co.get('extra_copies_count')} extra copies, "
                      f"{co.get('reconfigurations_count')} reconfiguration"
                      for m in MODES for co in [runs[c, m, 'opt']['counters']]) + ".", ""]
    L += ["## Where run 2's time goes under `opt` (all captures together)", "",
          "Each upper request of run 2 classed by its lower pieces (the same replay with a `trace` layer below "
          "`opt`, joined by submit time): all in the OPT region (mapped), none (home) or split; a mapped read by "
          "where the head came from (the previous request's last piece: within 1 MiB before it in the region, "
          "elsewhere in the region, or home), and a seek within the region by why the read is not where the "
          "previous one ended: run 1 read the same pair in the same order (the layout could have gone on), an "
          "earlier program read its blocks first (a shared file), or run 1 read in another order; a home read "
          "by whether run 1 read its blocks. Cells: requests, sum of response times in ms, and its share of "
          "the program's sum (response times overlap when more than one request is outstanding, so the sums "
          "exceed the disk-busy time).", ""]
    for m in MODES:
        agg = {p: collections.defaultdict(lambda: [0, 0.0]) for p in progs}
        for c in caps:
            for p in progs:
                for k, (n, ms) in bd[m][c][p].items():
                    agg[p][k][0] += n
                    agg[p][k][1] += ms
        classes = sorted({k for p in progs for k in agg[p]})
        L += [f"Streams {'as `serve` gives them' if m == 'serve' else 'as one'}:", "",
              "| class | " + " | ".join(progs) + " |", "| --- | " + " | ".join("---:" for _ in progs) + " |"]
        for k in classes:
            cells = []
            for p in progs:
                tot_ms = sum(v[1] for v in agg[p].values()) or 1
                cnt, ms = agg[p].get(k, [0, 0.0])
                cells.append(f"{cnt}, {ms:.0f} ({100 * ms / tot_ms:.0f}%)" if cnt else "-")
            L.append(f"| {k} | " + " | ".join(cells) + " |")
        L.append("")
    for name, lv in lives.items():
        ost = next((st for st in LIVE_OPT if st in lv), "opt")
        L += [f"## Live under `--emulate wd800` against the replay (`{name}-*`): run 2 disk-busy seconds", "",
              "Live: the trace layer `serve --record-trace` puts on top, between the program's marker reads "
              f"(`{name}-STACK/result.json`; each live run populates its own volume, so its files lie elsewhere "
              "than in any capture); replay: the median of the captures, as `serve` / one stream. A live run "
              "whose git commit predates `graph_stream` (session 23) keyed its graphs by the detected run, "
              "as `opt-run` does (with 8 runs a connection where the detector now keeps 32).", "",
              f"| program | plain live | plain replay | {ost} live | {ost} replay | {ost} speed-up live | replay "
              "| opt-run replay |",
              "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for p in progs + ["all six"]:
            k = f"run2-{p}"
            row = [p]
            vals = {}
            for st in ("plain", ost):
                v = lv.get(st)
                vals[st] = (sum(x for kk, x in v[1].items() if kk.startswith("run2-")) if p == "all six"
                            else v[1][k]) if v else None
                row += [f"{vals[st]:.3f}" if vals[st] is not None else "-",
                        " / ".join(f"{median([val(c, m, st, p) for c in caps]):.3f}" for m in MODES)]
            sp = f"{vals['plain'] / vals[ost]:.2f}x" if vals["plain"] and vals[ost] else "-"
            rs = [" / ".join(f"{median([val(c, m, 'plain', p) / val(c, m, n, p) for c in caps]):.2f}x"
                             for m in MODES) for n in (ost, "opt-run")]
            b = "**" if p == "all six" else ""
            L.append("| " + " | ".join(f"{b}{x}{b}" for x in row + [sp, *rs]) + " |")
        for st, v in lv.items():
            mach = v[0]["machine"]
            rec = next((ph for ph in v[0]["phases"] if ph["name"] == "reconfigure"), {})
            L += ["", f"`{name}-{st}/`: `{v[0]['command']}`, {v[0]['started']}, git {v[0]['git_head']}, load "
                  f"average {mach['loadavg_at_start'][0]} at the start, {mach['loadavg_at_end'][0]} at the end"
                  + (f"; the reconfiguration took {rec['reconfigure_seconds']} s live (`opt plan` to "
                     "job_active=0); its status: " + " ".join(
                         f"{x}" for x in rec["status"].split() if x.split("=")[0] in (
                             "copies_count", "copied_bytes", "extra_copies_count", "mapped_blocks_count"))
                     + ", " + rec["plan_output"].split(";")[0] if "reconfigure_seconds" in rec else "") + "."]
        L.append("")
    L.append(MARK)
    readme.write_keeping_notes(os.path.join(OUT, "README.md"), L, MARK)
    print("\n".join(L))


if __name__ == "__main__":
    main()
