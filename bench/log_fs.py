#!/usr/bin/env python3
"""The `log` benchmark's file-system half (issue 13, docs/log.md): the
SSR-LFS paper's Postmark (medium and small files) and fio (4 KiB sync,
sequential and random write and read, 1 and 4 workers) on ext4 and btrfs,
captured once on a plain volume, then replayed closed-loop in `layoutd sim`
on the paper's disk model (`st3160815as`) through plain `linear` (the file
system in place) and through `log` with each reclamation policy.

Steps:
  1. capture (skipped with --no-capture when the captures exist): for each
     --fs, `bench/run log-fs --fs FS --size 1024M --out bench/results/log-fs/capture-FS`
     (tmpfs speed, no emulation: the disk time comes from the replay);
  2. replay: each captured trace.gz through bench/workloads/log/STACK.toml,
     as one stream (see one_stream), `layoutd sim --closed-loop --disk
     st3160815as --record-trace`; the simulated record is cut at the
     harness's marker reads into phases.

Per phase and stack the report gives the disk-busy seconds (time with at
least one request outstanding at the top of the stack: what the stack
costs, independent of the capture machine's think time) and the span (busy
plus the recorded think time), and for `log` the write amplification of the
whole replay (slots written for any cause over slots of user data) with the
cleaning / SSR counts. Deterministic: rerunning step 2 gives the same
figures. Writes bench/results/log-fs/README.md (table above the analysis
marker, which is kept) and summary.json.

Usage: bench/log_fs.py [--fs ext4,btrfs] [--no-capture] [--jobs 2] [-- bench/run options]
Needs root for the capture (see bench/run --help), and target/release/layoutd.
"""
import concurrent.futures
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench/harness"))
import capreplay  # noqa: E402
import readme  # noqa: E402
import tracefile  # noqa: E402
from log_sim import STACKS, MARKER, layoutd  # noqa: E402

OUT = os.path.join(ROOT, "bench/results/log-fs")
TMP = os.path.join(OUT, "tmp")
DISK = "st3160815as"
# The stacks of bench/workloads/log/ place the volume on the disk's first
# 1200 MiB; `log` exposes about 1.07 GiB of it, so the captured export must
# stay under that.
SIZE = "1024M"


def capture(fs, extra):
    out = os.path.join(OUT, f"capture-{fs}")
    cmd = [os.path.join(ROOT, "bench/run"), "log-fs", "--fs", fs, "--size", SIZE, "--out", out, *extra]
    print(f"capture: {' '.join(cmd)}", file=sys.stderr)
    subprocess.run(cmd, check=True)


def one_stream(fs):
    """The capture as one stream (tracefile.one_stream): captures made before
    the trace recorded the base stream carry the detector's run ids. As one
    stream every request waits for the one before it (queue depth 1, as one
    NBD connection of sync I/O mostly was), so the markers stay between the
    phases."""
    return tracefile.one_stream(os.path.join(OUT, f"capture-{fs}", "trace.gz"), os.path.join(TMP, f"{fs}.trace.gz"))


def replay(l, fs, stack, trace):
    j, phases = capreplay.replay(l, trace, os.path.join(ROOT, "bench/workloads/log", stack + ".toml"), DISK,
                                 os.path.join(TMP, f"{fs}-{stack}"), os.path.join(OUT, f"capture-{fs}"))
    counters = next((x["counters"] for x in j["stack"]["layers"] if x["target"] == "log"), None)
    return fs, stack, {"phases": phases, "log": counters, "simulated_seconds": j.get("simulated_seconds")}


def wa(c):
    """Slots written for any cause (the summaries of partial writes included)
    over slots of user data (the whole replay)."""
    user = c["slots_user_count"] + c["slots_ssr_count"]
    total = user + c["slots_cleaning_count"] + c["slots_plugging_count"] + c.get("summary_slots_count", 0)
    return total / user if user else float("nan")


def report(res, fss, cmd):
    logs = STACKS[1:]
    L = ["# `log`: Postmark and fio on ext4 and btrfs, replayed on the paper's disk", "",
         "A benchmark, not a test. Each file system's run is captured once live on a plain volume "
         f"(`bench/run log-fs`, {SIZE}, no emulation; capture details in `capture-FS/README.md`), then "
         f"replayed closed-loop in `layoutd sim` on `{DISK}` through plain `linear` (in place) and `log` "
         "with each policy (bench/workloads/log/). Deterministic.", "",
         f"Reproduce: `cargo build --release -p layoutd && {cmd}` (the replay half alone: add `--no-capture`; "
         "the captured traces are committed as `capture-FS/trace.gz`).", "",
         "Cells: disk-busy seconds of the phase (x linear). Busy = time with a request outstanding at the top "
         "of the stack; the recorded think time is left out, since it is the capture machine's, not the "
         "stack's.", ""]
    for fs in fss:
        r = res[fs]
        names = list(r["linear"]["phases"])
        L += [f"## {fs}", "", "| phase | linear | " + " | ".join(logs) + " |",
              "| --- | ---: | " + " | ".join("---:" for _ in logs) + " |"]
        for n in names:
            lin = r["linear"]["phases"][n]["busy_s"]
            cells = []
            for s in logs:
                b = r[s]["phases"][n]["busy_s"]
                cells.append(f"{b:.1f} ({b / lin:.2f}x)" if lin > 0 else f"{b:.1f}")
            L.append(f"| {n} | {lin:.1f} | " + " | ".join(cells) + " |")
        tot = {s: sum(p["busy_s"] for p in r[s]["phases"].values()) for s in STACKS}
        L.append("| **all phases** | **{:.1f}** | ".format(tot["linear"]) + " | ".join(
            f"**{tot[s]:.1f} ({tot[s] / tot['linear']:.2f}x)**" for s in logs) + " |")
        L += ["", "Whole replay, per policy: write amplification, partial writes' summary slots included (slots "
              "cleaned or plugged / SSR slots / partial writes):", "",
              "| " + " | ".join(logs) + " |", "| " + " | ".join("---:" for _ in logs) + " |",
              "| " + " | ".join(
                  f"{wa(r[s]['log']):.2f} ({r[s]['log']['slots_cleaning_count'] + r[s]['log']['slots_plugging_count']}"
                  f"/{r[s]['log']['slots_ssr_count']}/{r[s]['log'].get('partial_writes_count', 0)})"
                  for s in logs) + " |", ""]
    readme.write_keeping_notes(os.path.join(OUT, "README.md"), L + [MARKER], MARKER)
    print("\n".join(L))


def main():
    a = capreplay.parser(__doc__).parse_args()
    os.makedirs(TMP, exist_ok=True)
    l = layoutd()
    tracefile.use(l)
    fss = capreplay.captures(a, "log_fs", capture, lambda fs: os.path.join(OUT, f"capture-{fs}"))
    traces = {fs: one_stream(fs) for fs in fss}
    # File systems not replayed now keep their figures from the last run.
    summary = os.path.join(OUT, "summary.json")
    res = json.load(open(summary))["runs"] if os.path.exists(summary) else {}
    for fs in fss:
        res.pop(fs, None)
    with concurrent.futures.ThreadPoolExecutor(a.jobs) as ex:
        for fs, stack, r in ex.map(lambda fs_s: replay(l, *fs_s, traces[fs_s[0]]),
                                   [(f, s) for f in fss for s in STACKS]):
            res.setdefault(fs, {})[stack] = r
            busy = sum(p["busy_s"] for p in r["phases"].values())
            print(f"{fs:6} {stack:14} busy {busy:9.1f} s", file=sys.stderr)
    with open(summary, "w") as fh:
        json.dump({"disk": DISK, "runs": res}, fh, indent=1)
    fss = [f for f in ("ext4", "btrfs") if f in res] + [f for f in res if f not in ("ext4", "btrfs")]
    cmd = "sudo bench/log_fs.py" + ("" if a.fs == "ext4,btrfs" else f" --fs {a.fs}") + \
        (" -- " + " ".join(a.run_args) if a.run_args else "")
    report(res, fss, cmd)


if __name__ == "__main__":
    main()
