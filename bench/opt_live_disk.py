#!/usr/bin/env python3
"""Where a live `--emulate` run's time goes, against its replay, from the
emulated disk's own record (`bench/run ... --record-disk`: `serve
--record-disk`, the format of `layoutd sim --record-disk`).

    bench/opt_live_disk.py LIVE_DIR [--with-setup]

LIVE_DIR: a `bench/run opt-startup --emulate wd800 --record-disk` result
(result.json, trace.gz, disk.gz; setup.trace.gz for --with-setup). Its own
trace is replayed in `layoutd sim` as `bench/opt_real.py` replays a
capture (closed loop, wd800, the stream detector as `serve`, 600 s before
run 2, an opt stack planning at the reconfigure phase's first marker),
through the stack the run served (result.json's rig.config), recording the
disk. With --with-setup the populate's trace (served before the measured
server started) is replayed first, 30 days earlier (the measured server's
profile started empty: a day's half-life leaves the populate's edges
nothing), so the replay starts run 1 from the OPT region the populate left
(`opt-startup --setup-region keep`). For each run-2 program, live and
replayed:

  busy      the disk-busy time the benchmark reports (union of the upper
            requests' intervals, as recorded at the top of the stack)
  disk      the part of it in which the emulated disk was serving (union
            of its requests' start..completion intervals, clipped to busy)
  gap       busy - disk: an upper request was outstanding and the disk
            idle: the runtime's CPU before a lower request reaches the
            disk, a late wake-up after the model's completion, the turn
            between two lower requests of one upper (the simulator,
            without --live-dispatch --live-delivery-us, has none)
  lowers    requests the disk served, of them buffer hits, and the sums of
            their seek and rotation times
  pre/post  medians over upper requests served by one lower request: its
            arrival at the disk less the upper's submission, and the
            upper's completion less the disk's (ms)
  held      (an opt stack) the program's reads of OPT region slots not
            written since run 1 began (not a copy the reconfiguration
            made: a block the populate's writes left there), and the
            disk's service time of those reads
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "harness"))
sys.path.insert(0, HERE)
import diskrec  # noqa: E402
import opt_real  # noqa: E402
import tracefile  # noqa: E402

PROGS = ["python", "perl", "gcc", "git", "man", "tar-xz"]
GAP_S = 600.0  # before run 2, as bench/opt_real.py's replays
SETUP_GAP_NS = 30 * 86400 * 10**9


def region(result):
    """The OPT region's (offset, end) in bytes, from an `opt status` the run recorded, or None."""
    for ph in result["phases"]:
        st = ph.get("status", "")
        kv = dict(w.split("=", 1) for w in st.split() if "=" in w)
        if "opt_offset" in kv and "opt_length" in kv:
            return int(kv["opt_offset"]), int(kv["opt_offset"]) + int(kv["opt_length"])
    return None


def held_reads(rows, opt, since, lo, hi):
    """(count, service ns) of the reads in [lo, hi] of region blocks no
    request of `rows` from `since` on wrote before."""
    written, count, ns = set(), 0, 0
    for a, s, c, op, off, n, *_ in rows:
        if a > hi:
            break
        if a < since or not opt[0] <= off < opt[1]:
            continue
        blocks = range(off // 4096, (off + n + 4095) // 4096)
        if op == "W":
            written.update(blocks)
        elif op == "R" and a >= lo and not all(b in written for b in blocks):
            count, ns = count + 1, ns + c - s
    return count, ns


def analyse(trace, disk, result):
    eb = result["rig"]["export_bytes"]
    ph = {p["name"]: p for p in result["phases"]}
    rows = sorted(diskrec.rows(disk))
    opt = region(result)
    run1 = tracefile.read(trace, eb, ph["run1-" + PROGS[0]]["markers"])
    since = min(r.submit for r in run1)
    out = {}
    for p in PROGS:
        ups = [r for r in tracefile.read(trace, eb, ph["run2-" + p]["markers"]) if r.complete is not None]
        if not ups:
            continue
        lo, hi = min(r.submit for r in ups), max(r.complete for r in ups)
        busy = diskrec.union([(r.submit, r.complete) for r in ups])
        low = [d for d in rows if lo <= d[0] <= hi]
        served = diskrec.served_within(busy, rows)
        total = sum(b - a for a, b in busy)
        # Uppers served by exactly one lower request: pre and post.
        pre, post = [], []
        k = 0
        for r in sorted(ups, key=lambda r: r.submit):
            inside = []
            while k < len(low) and low[k][0] < r.submit:
                k += 1
            j = k
            while j < len(low) and low[j][0] <= r.complete:
                inside.append(low[j])
                j += 1
            if len(inside) == 1:
                pre.append(inside[0][0] - r.submit)
                post.append(r.complete - inside[0][2])
        out[p] = {"busy_s": total / 1e9, "disk_s": served / 1e9, "gap_s": (total - served) / 1e9,
                  "lowers": len(low), "hits": sum(d[6] for d in low), "seek_s": sum(d[7] for d in low) / 1e9,
                  "rotation_s": sum(d[8] for d in low) / 1e9,
                  "pre_ms": statistics.median(pre) / 1e6 if pre else None,
                  "post_ms": statistics.median(post) / 1e6 if post else None}
        if opt:
            n, ns = held_reads(rows, opt, since, lo, hi)
            out[p].update(held=n, held_s=ns / 1e9)
    return out


def show(name, res):
    keys = ["busy_s", "disk_s", "gap_s", "lowers", "hits", "seek_s", "rotation_s"]
    keys += ["held", "held_s"] if all("held" in v for v in res.values()) else []
    tot = {k: sum(v[k] for v in res.values()) for k in keys}
    for p, v in list(res.items()) + [("all", tot)]:
        prepost = (f" pre/post {v['pre_ms']:.3f}/{v['post_ms']:.3f} ms" if v.get("pre_ms") is not None else "")
        held = f" held {v['held']} ({v['held_s']:.3f} s)" if "held" in v else ""
        print(f"{name} {p:7} busy {v['busy_s']:.3f} s = disk {v['disk_s']:.3f} + gap {v['gap_s']:.3f} | "
              f"lowers {v['lowers']} hits {v['hits']} seek {v['seek_s']:.3f} s rotation {v['rotation_s']:.3f} s"
              + held + prepost)


def replay(live, with_setup):
    """Replays LIVE's trace (with the populate's first if `with_setup`)
    through its stack; the base of the sim's record (BASE.rec, BASE.disk)."""
    l = opt_real.layoutd()
    tracefile.use(l)
    os.makedirs(opt_real.TMP, exist_ok=True)
    name = os.path.basename(os.path.normpath(live)) + ("-with-setup" if with_setup else "")
    cap = live
    if with_setup:
        cap = os.path.join(opt_real.TMP, name)
        os.makedirs(cap, exist_ok=True)
        tracefile.concat(os.path.join(live, "setup.trace.gz"), os.path.join(live, "trace.gz"),
                         os.path.join(cap, "trace.gz"), SETUP_GAP_NS)
        shutil.copy(os.path.join(live, "result.json"), os.path.join(cap, "result.json"))
    trace, plan_at, _, result = opt_real.replay_trace(cap, GAP_S)
    config = result["rig"]["config"]
    opt = 'target = "opt"' in open(os.path.join(opt_real.ROOT, config)).read()
    base = os.path.join(opt_real.TMP, name + "-disk")
    cmd = [l, "sim", "--trace", trace, *opt_real.FORMAT["serve"], "--config", opt_real.with_trace(config),
           "--disk", opt_real.DISK, "--closed-loop", "--no-progress", "--record-trace", base + ".rec",
           "--json", base + ".json", "--record-disk", base + ".disk",
           *(["--message", f"@{plan_at}:plan"] if opt else [])]
    subprocess.run(cmd, check=True, capture_output=True)
    return base


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("live", help="a bench/run opt-startup --record-disk result directory")
    ap.add_argument("--with-setup", action="store_true", help="replay the populate (setup.trace.gz) first")
    a = ap.parse_args()
    result = json.load(open(os.path.join(a.live, "result.json")))
    show("live", analyse(os.path.join(a.live, "trace.gz"), os.path.join(a.live, "disk.gz"), result))
    base = replay(a.live, a.with_setup)
    show("sim ", analyse(base + ".rec", base + ".disk", result))
    for ext in (".rec", ".disk", ".json"):
        os.unlink(base + ext)


if __name__ == "__main__":
    main()
