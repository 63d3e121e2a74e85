#!/usr/bin/env python3
"""Where run 2's disk time goes on the real start-ups (issue 15), at the
disk: each capture of bench/traces/opt/real replayed as bench/opt_real.py
does (as `serve` gives the streams, planned at the reconfigure marker, the
same idle gap), through one stack, with `layoutd sim --record-disk` (every
request the disk model served, with its seek and rotation time). Per
program of run 2: the disk requests in the OPT region and home (reads and
writes), their seek, rotation and transfer time (the rest of start to
completion: media and bus transfer and command overhead), and on-board
cache hits. And the reads of the region the disk had to position for,
whose sectors lie within R bytes after the end of an earlier region read
of the same program's run 2 (one of the last 8): a read-ahead of R bytes
after that read would have carried them (if nothing dropped it).

Usage: bench/opt_real_disk.py [--config bench/results/opt/opt.toml] [--captures 3] [--json OUT]
"""
import argparse
import collections
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
sys.path.insert(0, os.path.join(ROOT, "bench/harness"))
import opt_real  # noqa: E402
import tracefile  # noqa: E402

AHEAD = (64 << 10, 128 << 10, 256 << 10, 1 << 20)
RECENT = 8


def disk_records(path):
    with open(path) as f:
        for line in f:
            if line.startswith("#"):
                continue
            p = line.split()
            yield {"arrival": int(p[0]), "start": int(p[1]), "done": int(p[2]), "op": p[3], "off": int(p[4]),
                   "len": int(p[5]), "hit": p[6] == "1", "seek": int(p[7]), "rot": int(p[8])}


def run(l, config, cap, opt0, opt1):
    trace, plan_at, eb, result = opt_real.replay_trace(cap, 600.0)
    base = os.path.join(opt_real.TMP, f"disk-{os.path.basename(cap)}")
    subprocess.run([l, "sim", "--trace", trace, *opt_real.FORMAT["serve"], "--config", opt_real.with_trace(config),
                    "--disk", opt_real.DISK, "--closed-loop", "--no-progress", "--record-trace", base + ".rec",
                    "--record-disk", base + ".disk", "--json", base + ".json", "--message", f"@{plan_at}:plan"],
                   check=True, capture_output=True)
    marks = {m["index"]: m["submit_ns"] for m in tracefile.stats(base + ".rec", eb)["markers"]}
    phases = [(p["name"][5:], marks[p["markers"][0]], marks[p["markers"][1]]) for p in result["phases"]
              if p["name"].startswith("run2-")]
    recs = sorted(disk_records(base + ".disk"), key=lambda r: r["arrival"])
    out = {}
    for prog, a, b in phases:
        c = collections.defaultdict(lambda: collections.Counter())
        recent = []
        for r in recs:
            if not a < r["arrival"] < b or r["op"] == "F":
                continue
            where = "region" if opt0 <= r["off"] < opt1 else "home"
            k = f"{where} {'read' if r['op'] == 'R' else 'write'}"
            if r["op"] == "R":
                k += ", drive-cache hit" if r["hit"] else ", positioned"
            svc = r["done"] - r["start"]
            x = c[k]
            x["n"] += 1
            x["hit"] += r["hit"]
            x["service_ns"] += svc
            x["seek_ns"] += r["seek"]
            x["rotation_ns"] += r["rot"]
            x["transfer_ns"] += svc - r["seek"] - r["rot"]
            x["bytes"] += r["len"]
            if where == "region" and r["op"] == "R":
                if not r["hit"]:
                    for ra in AHEAD:
                        if any(e <= r["off"] and r["off"] + r["len"] <= e + ra for e in recent):
                            y = c[f"carried by {ra >> 10} KiB"]
                            y["n"] += 1
                            y["service_ns"] += svc
                            y["seek_ns"] += r["seek"]
                            y["rotation_ns"] += r["rot"]
                recent = (recent + [r["off"] + r["len"]])[-RECENT:]
        c["all"]["busy_ns"] = sum(v["service_ns"] for k, v in c.items() if not k.startswith("carried"))
        out[prog] = {k: dict(v) for k, v in c.items()}
    for ext in (".rec", ".disk", ".json"):
        os.unlink(base + ext)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="bench/results/opt/opt.toml")
    ap.add_argument("--captures", type=int, default=3)
    ap.add_argument("--opt-offset-gib", type=float, default=37)
    ap.add_argument("--json")
    a = ap.parse_args()
    os.makedirs(opt_real.TMP, exist_ok=True)
    l = opt_real.layoutd()
    tracefile.use(l)
    opt0 = int(a.opt_offset_gib * (1 << 30))
    res = {f"cap{k}": run(l, a.config, opt_real.cap_dir(k), opt0, opt0 + (1 << 30)) for k in range(1, a.captures + 1)}
    if a.json:
        json.dump(res, open(a.json, "w"), indent=1)
    progs = list(res["cap1"])
    print(f"# {a.config}, run 2, disk time by where and what (ms, all captures summed)\n")
    print("| program | class | requests | MiB | service | seek | rotation | transfer+overhead | share of busy |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for p in progs + ["all six"]:
        ps = progs if p == "all six" else [p]
        agg = collections.defaultdict(collections.Counter)
        for c in res.values():
            for q in ps:
                for k, v in c[q].items():
                    agg[k].update(v)
        busy = agg["all"]["busy_ns"] or 1
        for k in sorted(k for k in agg if k != "all"):
            v = agg[k]
            mib = f"{v['bytes'] / 2**20:.1f}" if "bytes" in v else "-"
            tr = f"{v['transfer_ns'] / 1e6:.0f}" if "transfer_ns" in v else "-"
            print(f"| {p} | {k} | {v['n']} | {mib} | {v['service_ns'] / 1e6:.0f} | {v['seek_ns'] / 1e6:.0f} | "
                  f"{v['rotation_ns'] / 1e6:.0f} | {tr} | {100 * v['service_ns'] / busy:.0f}% |")
        print(f"| {p} | disk busy | | | {busy / 1e6:.0f} | | | | |")


if __name__ == "__main__":
    main()
