#!/usr/bin/env python3
"""The `log` IO TEST: re-sequencing while busy against the sequential read
right after the update phase (issue 13's goal "sequential read after the
update phase within 1.2x of plain"; docs/log.md, "Re-sequencing while
busy").

`resequence_busy_user_blocks_per_pass = N` runs one packing re-sequencing
pass (the idle mechanism's) after every N blocks of user writes, beside the
client's requests. Per workload, utilisation and N, the trace is replayed
as it is (no idle time inserted before the read) through `log` with the
policy of --stack and that N (0: off, the default), and through `linear`
(in place) once. Two workloads:

- `ext4`: the committed ext4 IO TEST captures (bench/log_iotest_fs.py,
  bench/results/log/fs/capture-ext4-U): disk-busy seconds per phase, between
  the capture's marker reads; the update phase's write amplification from
  the update phase's start to the end of the run (a replay of the prefix
  before it, with the same N, subtracted);
- `block`: the generated block-level IO TEST (bench/log_sim.py's traces,
  bench/workloads/log_iotest.py, seed 1): phase spans; write amplification
  less the create phase's slots (bench/log_sim.py's rule);
- `fio`: the live fio capture of bench/results/log/live-fio (ext4, fio 4 KiB
  sync=1 on a 16 MiB file: sequential write, random write, sequential read,
  random read), replayed as its README does (`bench/run --replay-only`:
  live dispatch, 90 us delivery) with the key set; "update" is the random
  write phase, "read" the sequential read after it (phase spans); one
  utilisation (the file fills 1% of the volume); write amplification of
  the whole run (its sequential write phase included).

Write amplification here counts re-sequencing's slots too (the committed
tables' does not): they are writes the disk makes for the layout.

Cells: update seconds (x in place), write amplification with
re-sequencing, read seconds (x in place), busy passes. Writes
bench/results/log/busy-resequence.md and .json. Deterministic.

Usage: bench/log_busy_resequence.py [--workloads ext4,block,fio] [--utils 10,30,50,70,90,95]
                                    [--values 0,16,64,256,1024,4096] [--stack adaptive] [--jobs 2]
                                    [--name NAME --set KEY=VALUE ...]
Needs target/release/layoutd (cargo build --release -p layoutd).
"""
import argparse
import concurrent.futures
import json
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench/harness"))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import capreplay  # noqa: E402
import runner  # noqa: E402
import log_sim  # noqa: E402
import readme  # noqa: E402
import tracefile  # noqa: E402
from log_iotest_fs import DISK, TMP as FS_TMP, capture_dir  # noqa: E402

OUT = os.path.join(ROOT, "bench/results/log")
KEY = "resequence_busy_user_blocks_per_pass"
SLOTS = ("slots_user_count", "slots_ssr_count", "slots_cleaning_count", "slots_plugging_count",
         "summary_slots_count", "slots_resequence_count")


SETS = []  # --set KEY=VALUE: added to every `log` run (off included)


def variant(stack, n):
    if stack == "linear" or (n == 0 and not SETS):
        return None
    name = f"busy{n}" + "".join("-" + kv.replace("=", "") for kv in SETS)
    return (name, [f"{KEY}={n}", *SETS])


def config(stack, n):
    return log_sim.stack_config(stack, variant(stack, n))


def ext4_traces(util):
    d = capture_dir("ext4", util)
    src = os.path.join(d, "trace.gz")
    result = json.load(open(os.path.join(d, "result.json")))
    ph = {p["name"]: p["markers"] for p in result["phases"]}
    lines = {k: m["line"] for k, m in tracefile.markers(src, result["rig"]["export_bytes"]).items()}
    t = os.path.join(FS_TMP, f"ext4-{util}")
    base, prefix = t + ".trace.gz", t + "-prefix.trace.gz"
    if not os.path.exists(base):
        tracefile.one_stream(src, base)
    if not os.path.exists(prefix):
        tracefile.one_stream(src, prefix, stop_at_line=lines[ph["update"][0]])
    return base, prefix


def counters(j):
    return next((x["counters"] for x in j["stack"]["layers"] if x["target"] == "log"), None)


def run_ext4(l, util, stack, n):
    base, prefix = ext4_traces(util)
    v = variant(stack, n)
    tag = os.path.join(FS_TMP, f"busy-ext4-{util}-{stack}-{v[0] if v else n}")
    j, phases = capreplay.replay(l, base, config(stack, n), DISK, tag, capture_dir("ext4", util))
    r = {"update_s": phases["update"]["busy_s"], "read_s": phases["read"]["busy_s"], "log": counters(j)}
    if stack != "linear":
        cmd = [l, "sim", "--trace", prefix, "--format", "layoutd", "--no-stream-detect", "--config",
               config(stack, n), "--disk", DISK, "--closed-loop", "--no-progress", "--json", tag + "-prefix.json"]
        subprocess.run(cmd, check=True, capture_output=True)
        p = counters(json.load(open(tag + "-prefix.json")))
        d = {k: r["log"].get(k, 0) - p.get(k, 0) for k in SLOTS}
        user = d["slots_user_count"] + d["slots_ssr_count"]
        r["wa"] = sum(d.values()) / user
    return r


def run_block(l, util, stack, n):
    _, _, _, r = log_sim.run(l, DISK, util, stack, 0, variant(stack, n))
    out = {"update_s": r["phases_s"]["update"], "read_s": r["phases_s"]["read"], "log": r["log"]}
    if stack != "linear":
        c = r["log"]
        created = (log_sim.VOLUME // 65536) * max(90, util) // 100 * 16
        user = c["slots_user_count"] + c["slots_ssr_count"]
        out["wa"] = (sum(c.get(k, 0) for k in SLOTS) - created) / (user - created)
    return out


def run_fio(l, _util, stack, n):
    src = os.path.join(OUT, "live-fio", "linear" if stack == "linear" else stack)
    work = tempfile.mkdtemp(prefix="layoutd-busy-fio-")
    try:
        for f in ("result.json", "trace.gz"):
            shutil.copy(os.path.join(src, f), work)
        path = os.path.join(work, "result.json")
        r = json.load(open(path))
        v = variant(stack, n)
        if v:
            text = open(os.path.join(ROOT, r["rig"]["config"])).read()
            assert 'target = "log"\n' in text
            keys = "".join(f"{kv.split('=', 1)[0]} = {kv.split('=', 1)[1]}\n" for kv in v[1])
            r["rig"]["config"] = os.path.join(work, "config.toml")
            with open(r["rig"]["config"], "w") as fh:
                fh.write(text.replace('target = "log"\n', 'target = "log"\n' + keys, 1))
            json.dump(r, open(path, "w"))
        runner.replay_again(work, l, "live", 90)
        r = json.load(open(path))
        ph = {p["name"]: p["sim"] for p in r["phases"]}
        out = {"update_s": ph["fio-1-rand-write"]["span_seconds"], "read_s": ph["fio-1-seq-read"]["span_seconds"],
               "log": counters(json.load(open(os.path.join(work, "sim", "whole.json"))))}
        if stack != "linear":
            c = out["log"]
            user = c["slots_user_count"] + c["slots_ssr_count"]
            out["wa"] = sum(c.get(k, 0) for k in SLOTS) / user
        return out
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workloads", default="ext4,block")
    ap.add_argument("--utils", default="10,30,50,70,90,95")
    ap.add_argument("--values", default="0,16,64,256,1024,4096")
    ap.add_argument("--stack", default="adaptive")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--name", help="results go to busy-resequence-NAME.* (with --set)")
    ap.add_argument("--set", action="append", default=[], help="KEY=VALUE for every `log` run")
    a = ap.parse_args()
    SETS.extend(a.set)
    name = "busy-resequence" + (f"-{a.name}" if a.name else "")
    utils = [int(u) for u in a.utils.split(",")]
    values = [int(v) for v in a.values.split(",")]
    workloads = a.workloads.split(",")
    l = log_sim.layoutd()
    tracefile.use(l)
    os.makedirs(FS_TMP, exist_ok=True)
    os.makedirs(log_sim.TMP, exist_ok=True)
    if "block" in workloads:
        for u in utils:
            subprocess.run([sys.executable, os.path.join(ROOT, "bench/workloads/log_iotest.py"),
                            os.path.join(log_sim.TMP, f"iotest-{u}.trace"), str(log_sim.VOLUME), str(u),
                            "512", "1", "0"], check=True)
    if "ext4" in workloads:
        for u in utils:
            ext4_traces(u)
    runners = {"ext4": run_ext4, "block": run_block, "fio": run_fio}
    wutils = {w: [1] if w == "fio" else utils for w in workloads}
    jobs = [(w, u, "linear", 0) for w in workloads for u in wutils[w]] + \
        [(w, u, a.stack, n) for w in workloads for u in wutils[w] for n in values]
    res = {}
    with concurrent.futures.ThreadPoolExecutor(a.jobs) as ex:
        for (w, u, s, n), r in zip(jobs, ex.map(lambda j: runners[j[0]](l, *j[1:]), jobs)):
            res.setdefault(w, {}).setdefault(str(u), {})["linear" if s == "linear" else str(n)] = r
            print(f"{w:5} {u:3}% {s:9} N={n:5} update {r['update_s']:7.1f} read {r['read_s']:7.1f}"
                  + (f" wa {r['wa']:.2f}" if "wa" in r else ""), file=sys.stderr, flush=True)
    json.dump({"disk": DISK, "stack": a.stack, "key": KEY, "set": a.set, "runs": res},
              open(os.path.join(OUT, name + ".json"), "w"), indent=1)
    report(res, a, wutils, values, workloads, name)


def report(res, a, wutils, values, workloads, name):
    cmd = "bench/log_busy_resequence.py" + \
        ("" if a.workloads == "ext4,block" else f" --workloads {a.workloads}") + \
        ("" if a.utils == "10,30,50,70,90,95" else f" --utils {a.utils}") + \
        ("" if a.values == "0,16,64,256,1024,4096" else f" --values {a.values}") + \
        ("" if a.stack == "adaptive" else f" --stack {a.stack}") + \
        (f" --name {a.name}" if a.name else "") + "".join(f" --set {kv}" for kv in a.set)
    L = [f"# `log`: re-sequencing while busy against the read right after the updates ({DISK})", "",
         f"A benchmark, not a test. `{KEY} = N`: one packing re-sequencing pass after every N blocks of "
         f"user writes, beside the client's requests (0: off, the default). Stack `{a.stack}`; in place = "
         "`linear`. No idle time is inserted before the read (the ext4 captures keep their ~1 s remount gap). "
         "Write amplification counts re-sequencing's slots. See bench/log_busy_resequence.py for the rules."
         + (f" Every `log` run also has {', '.join(f'`{kv}`' for kv in a.set)}." if a.set else ""), "",
         f"Reproduce: `cargo build --release -p layoutd && {cmd}` (deterministic).", ""]
    names = {"ext4": "ext4 IO TEST captures (disk-busy seconds)",
             "block": "block-level IO TEST, generated (phase spans)",
             "fio": "live fio capture (live-fio/): random write, then sequential read (replay spans)"}
    for w in workloads:
        L += [f"## {names[w]}", "",
              "Cells: update s (x in place) / write amplification / read s (x in place) / busy passes.", "",
              "| util | in place: update, read | " + " | ".join(f"N = {n}" if n else "off" for n in values) + " |",
              "| ---: | ---: | " + " | ".join("---:" for _ in values) + " |"]
        for u in wutils[w]:
            r = res[w][str(u)]
            lin = r["linear"]
            cells = []
            for n in values:
                x = r[str(n)]
                cells.append(f"{x['update_s']:.1f} ({x['update_s'] / lin['update_s']:.2f}x) / {x['wa']:.2f} / "
                             f"{x['read_s']:.1f} ({x['read_s'] / lin['read_s']:.1f}x) / "
                             f"{x['log'].get('resequence_busy_passes_count', 0)}")
            L.append(f"| {u}% | {lin['update_s']:.1f}, {lin['read_s']:.1f} | " + " | ".join(cells) + " |")
        L.append("")
    marker = log_sim.MARKER
    path = os.path.join(OUT, name + ".md")
    readme.write_keeping_notes(path, L + ["", marker], marker)
    print("\n".join(L))


if __name__ == "__main__":
    main()
