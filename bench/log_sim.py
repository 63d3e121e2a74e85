#!/usr/bin/env python3
"""The `log` benchmark's simulator half (issue 13, docs/log.md): the IO TEST
of SSR-LFS (seeds/003) on the HDD model of the paper's disk, plain `linear`
(in place) against `log` with each reclamation policy, at several
utilisations. Deterministic: rerunning gives the same figures.

Per utilisation, two traces (bench/workloads/log_iotest.py: 64 KiB files
created to 90% (or UTIL), random ones discarded down to UTIL, UPDATE_MIB of
random 4 KiB updates inside the remaining files, a flush, then the
remaining files read in address order; the second trace has IDLE_S
seconds without requests before the read), replayed closed loop by
`layoutd sim` through each stack of bench/workloads/log/ (the second only
through the `log` stacks: in place, idle time changes nothing). A phase's
time is its first submit to its last completion, from the stack's `trace`
layer. The idle work (re-sequencing, and the cleaning it needs) is the
second run's counters less the first's, and its disk time the second
run's disk busy seconds less the first's, corrected for the shorter read
phase (which runs alone at queue depth 1: its disk time is its span).

Writes bench/results/log/README.md (table above the analysis marker, which
is kept) and summary-DISK.json. Runs and traces go to bench/results/log/tmp/.

With --variant NAME --set KEY=VALUE..., only the idle runs of the `log`
stacks, with those keys added to the `log` layer (e.g. `--variant sliding
--set resequence_sliding=true`: sliding compaction, docs/log.md), against
the last full run's summary (its runs without idle, and its idle runs as
"before"): writes bench/results/log/variant-NAME-DISK.md and .json.

Usage: bench/log_sim.py [--disk st3160815as] [--utils 10,20,...,90,95]
                        [--update-mib 512] [--idle-s 3600] [--jobs 2]
                        [--variant NAME --set KEY=VALUE ...]
Needs target/release/layoutd (or target/debug/layoutd).
"""
import argparse, concurrent.futures, json, os, subprocess, sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench/harness"))
import readme  # noqa: E402
OUT = os.path.join(ROOT, "bench/results/log")
TMP = os.path.join(OUT, "tmp")
VOLUME = 1 << 30  # inside the log's exposed size over 1200 MiB (about 1.07 GiB)
STACKS = ["linear", "greedy", "cost-benefit", "age-threshold", "plugging", "ssr", "adaptive", "cost"]
MARKER = "<!-- analysis: kept when the table is regenerated -->"


def layoutd():
    """$LAYOUTD if set (e.g. a binary built from a variant), else the checkout's build."""
    if os.environ.get("LAYOUTD"):
        return os.environ["LAYOUTD"]
    for p in ("target/release/layoutd", "target/debug/layoutd"):
        if os.access(os.path.join(ROOT, p), os.X_OK):
            return os.path.join(ROOT, p)
    sys.exit("build layoutd first: cargo build --release -p layoutd")


def phases(rec):
    """Seconds per phase: setup (64 KiB writes, trims, first flush), update
    (4 KiB writes, second flush), read (64 KiB reads)."""
    spans, flushes = {}, 0
    for line in open(rec):
        if line.startswith("#") or not line.strip():
            continue
        sub, com, _s, op, _off, length, _f = line.split()
        sub, com = int(sub), int(com)
        if op == "F":
            flushes += 1
            key = "setup" if flushes == 1 else "update"
        elif op == "T" or (op == "W" and length == "65536"):
            key = "setup"
        elif op == "W":
            key = "update"
        else:
            key = "read"
        lo, hi = spans.get(key, (sub, com))
        spans[key] = (min(lo, sub), max(hi, com))
    return {k: (hi - lo) / 1e9 for k, (lo, hi) in spans.items()}


def stack_config(stack, variant=None):
    """The stack's config file; with a `variant` (name, [KEY=VALUE]), a copy
    in TMP whose `log` layer has those keys."""
    path = os.path.join(ROOT, "bench/workloads/log", stack + ".toml")
    if not variant:
        return path
    name, sets = variant
    text = open(path).read()
    assert 'target = "log"\n' in text, path
    keys = "".join(f"{k.strip()} = {v.strip()}\n" for k, v in (kv.split("=", 1) for kv in sets))
    os.makedirs(TMP, exist_ok=True)
    out = os.path.join(TMP, f"{stack}-{name}.toml")
    with open(out, "w") as fh:
        fh.write(text.replace('target = "log"\n', 'target = "log"\n' + keys, 1))
    return out


def run(l, disk, util, stack, idle, variant=None):
    trace = os.path.join(TMP, f"iotest-{util}{'-idle' if idle else ''}.trace")
    base = os.path.join(TMP, f"{disk}-{util}-{stack}{'-idle' if idle else ''}{'-' + variant[0] if variant else ''}")
    cmd = [l, "sim", "--trace", trace, "--format", "layoutd", "--config",
           stack_config(stack, variant), "--disk", disk, "--closed-loop",
           "--no-progress", "--record-trace", base + ".rec", "--json", base + ".json"]
    subprocess.run(cmd, check=True, capture_output=True)
    j = json.load(open(base + ".json"))
    log = next((x["counters"] for x in j["stack"]["layers"] if x["target"] == "log"), None)
    p = phases(base + ".rec")
    os.unlink(base + ".rec")
    return util, stack, idle, {"phases_s": p, "log": log, "disk_busy_s": j["disk_busy_seconds"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--disk", default="st3160815as")
    ap.add_argument("--utils", default="10,20,30,40,50,60,70,80,90,95")
    ap.add_argument("--update-mib", type=int, default=512)
    ap.add_argument("--idle-s", type=int, default=3600)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--variant", help="name of a variant of the log stacks (with --set)")
    ap.add_argument("--set", action="append", default=[], help="KEY=VALUE added to the log layer")
    a = ap.parse_args()
    utils = [int(u) for u in a.utils.split(",")]
    os.makedirs(TMP, exist_ok=True)
    l = layoutd()
    for u in utils:
        for idle, suffix in ((0, ""), (a.idle_s, "-idle")):
            subprocess.run([sys.executable, os.path.join(ROOT, "bench/workloads/log_iotest.py"),
                            os.path.join(TMP, f"iotest-{u}{suffix}.trace"), str(VOLUME), str(u),
                            str(a.update_mib), "1", str(idle)], check=True)
    if a.variant:
        return variant_main(l, a, utils)
    res = {}
    jobs = [(u, s, False) for u in utils for s in STACKS] + [(u, s, True) for u in utils for s in STACKS[1:]]
    with concurrent.futures.ThreadPoolExecutor(a.jobs) as ex:
        for util, stack, idle, r in ex.map(lambda j: run(l, a.disk, *j), jobs):
            res.setdefault(str(util), {})[stack + ("-idle" if idle else "")] = r
            print(f"{util:3}% {stack:14} {'idle ' if idle else ''}read {r['phases_s'].get('read', 0):9.2f} s",
                  file=sys.stderr)
    with open(os.path.join(OUT, f"summary-{a.disk}.json"), "w") as fh:
        json.dump({"disk": a.disk, "volume_bytes": VOLUME, "update_mib": a.update_mib, "idle_s": a.idle_s,
                   "runs": res}, fh, indent=1)
    report(res, a, utils)


def idle_cell(base, idle, lin):
    """An idle run's read (x linear without idle) and its idle work: slots
    re-sequenced + slots cleaned, disk busy seconds (see the README)."""
    t = idle["phases_s"]["read"]
    moved = idle["log"]["slots_resequence_count"] - base["log"]["slots_resequence_count"]
    cleaned = sum(idle["log"][k] - base["log"][k] for k in ("slots_cleaning_count", "slots_plugging_count"))
    # The read phase runs alone at queue depth 1: its disk time is its span.
    busy = idle["disk_busy_s"] - base["disk_busy_s"] + base["phases_s"]["read"] - t
    return f"{t:.1f} ({t / lin:.2f}x; {moved}+{cleaned}, {busy:.0f} s)"


def variant_main(l, a, utils):
    """The idle runs again with the variant's keys, against the last full
    run (bench/results/log/summary-DISK.json)."""
    before = json.load(open(os.path.join(OUT, f"summary-{a.disk}.json")))["runs"]
    logs = STACKS[1:]
    variant = (a.variant, a.set)
    res = {}
    with concurrent.futures.ThreadPoolExecutor(a.jobs) as ex:
        for util, stack, _idle, r in ex.map(lambda j: run(l, a.disk, *j, variant=variant),
                                            [(u, s, True) for u in utils for s in logs]):
            res.setdefault(str(util), {})[stack] = r
            print(f"{util:3}% {stack:14} {a.variant} read {r['phases_s'].get('read', 0):9.2f} s", file=sys.stderr)
    name = f"variant-{a.variant}-{a.disk}"
    with open(os.path.join(OUT, name + ".json"), "w") as fh:
        json.dump({"disk": a.disk, "idle_s": a.idle_s, "set": a.set, "runs": res}, fh, indent=1)
    keys = ", ".join(f"`{kv}`" for kv in a.set)
    sets = " ".join(f"--set {kv}" for kv in a.set)
    lines = [f"# `log`: sequential read after {a.idle_s} s idle, variant `{a.variant}` ({a.disk})", "",
             f"The IO TEST of README.md, its idle runs again with {keys} in the `log` layer. Reproduce: "
             f"`cargo build --release -p layoutd && bench/log_sim.py --variant {a.variant} {sets} --utils {a.utils}` "
             "(after a full `bench/log_sim.py`, whose summary gives the runs without idle and the \"before\" "
             "cells).", "",
             "Cells: read seconds (x linear without idle; slots re-sequenced + slots cleaned by the idle work, "
             "its disk busy seconds), README.md's idle run -> the variant's.", "",
             "| util | linear | " + " | ".join(logs) + " |", "| ---: | ---: | " + " | ".join("---:" for _ in logs) + " |"]
    for u in utils:
        b = before[str(u)]
        lin = b["linear"]["phases_s"]["read"]
        cells = [idle_cell(b[s], b[s + "-idle"], lin) + " -> " + idle_cell(b[s], res[str(u)][s], lin) for s in logs]
        lines.append(f"| {u}% | {lin:.1f} | " + " | ".join(cells) + " |")
    lines += ["", "Counters of the variant's runs (whole run): compact_evictions / compact_groups_home / "
              "compact_redirects / checkpoints", "", "| util | " + " | ".join(logs) + " |",
              "| ---: | " + " | ".join("---:" for _ in logs) + " |"]
    for u in utils:
        cells = []
        for s in logs:
            c = res[str(u)][s]["log"]
            cells.append(f"{c['compact_evictions_count']} / {c['compact_groups_home_count']} / "
                         f"{c['compact_redirects_count']} / {c['checkpoints_count']}")
        lines.append(f"| {u}% | " + " | ".join(cells) + " |")
    readme.write_keeping_notes(os.path.join(OUT, name + ".md"), lines + ["", MARKER], MARKER)
    print("\n".join(lines))


def update_wa(c, util):
    """The update phase's write amplification (see the report's note)."""
    created_slots = (VOLUME // 65536) * max(90, util) // 100 * 16
    total = sum(c[k] for k in ("slots_user_count", "slots_ssr_count", "slots_cleaning_count",
                               "slots_plugging_count"))
    user = c["slots_user_count"] + c["slots_ssr_count"]
    return (total - created_slots) / (user - created_slots)


def report(res, a, utils):
    cmd = "bench/log_sim.py" + ("" if a.disk == "st3160815as" else f" --disk {a.disk}") + \
        ("" if a.update_mib == 512 else f" --update-mib {a.update_mib}") + \
        ("" if a.utils == "10,20,30,40,50,60,70,80,90,95" else f" --utils {a.utils}") + \
        ("" if a.idle_s == 3600 else f" --idle-s {a.idle_s}")
    logs = STACKS[1:]
    lines = [f"# `log`: the IO TEST in the simulator ({a.disk})", "",
             f"A benchmark, not a test. Volume 1 GiB of 64 KiB files on the first 1200 MiB of the `{a.disk}` "
             f"model; {a.update_mib} MiB of random 4 KiB updates inside the remaining files, then a flush; "
             "closed loop, one stream, deterministic. `linear` updates in place; `log` (examples/log.toml's "
             "defaults: 512 KiB segments, 10% over-provisioning) with each policy.", "",
             f"Reproduce: `cargo build --release -p layoutd && {cmd}` (traces are generated by "
             "bench/workloads/log_iotest.py, seed 1).", "",
             "## Update phase: seconds (write amplification, slots cleaned or plugged / SSR slots)", "",
             "| util | linear | " + " | ".join(logs) + " | best log / linear | adaptive / best policy |",
             "| ---: | ---: | " + " | ".join("---:" for _ in logs) + " | ---: | ---: |"]
    for u in utils:
        r = res[str(u)]
        lin = r["linear"]["phases_s"]["update"]
        cells, times = [], {}
        for s in logs:
            c, t = r[s]["log"], r[s]["phases_s"]["update"]
            times[s] = t
            moved = c["slots_cleaning_count"] + c["slots_plugging_count"]
            cells.append(f"{t:.1f} ({update_wa(c, u):.2f}, {moved}/{c['slots_ssr_count']})")
        best = min(times.values())
        lines.append(f"| {u}% | {lin:.1f} | " + " | ".join(cells) +
                     f" | {best / lin:.2f} | {times['adaptive'] / best:.2f} |")
    lines += ["", "Write amplification of the update phase: slots written by any cause over slots of user "
              "data, less the create phase's (every slot of a created file, into fresh segments; nothing is "
              "cleaned before the updates). Counts from the whole run.", "",
              "## Sequential read of the remaining files after the updates: seconds (x linear)", "",
              "| util | linear | " + " | ".join(logs) + " |", "| ---: | ---: | " + " | ".join("---:" for _ in logs) + " |"]
    for u in utils:
        r = res[str(u)]
        lin = r["linear"]["phases_s"]["read"]
        lines.append(f"| {u}% | {lin:.1f} | " + " | ".join(
            f"{r[s]['phases_s']['read']:.1f} ({r[s]['phases_s']['read'] / lin:.2f}x)" for s in logs) + " |")
    lines += ["", f"## The same read after {a.idle_s} s without requests (idle re-sequencing): seconds (x linear "
              "without idle), and the idle work: slots re-sequenced + slots cleaned for it, disk busy seconds", "",
              "| util | linear | " + " | ".join(logs) + " |", "| ---: | ---: | " + " | ".join("---:" for _ in logs) + " |"]
    for u in utils:
        r = res[str(u)]
        lin = r["linear"]["phases_s"]["read"]
        cells = [idle_cell(r[s], r[s + "-idle"], lin) for s in logs]
        lines.append(f"| {u}% | {lin:.1f} | " + " | ".join(cells) + " |")
    readme.write_keeping_notes(os.path.join(OUT, "README.md"), lines + ["", MARKER], MARKER)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
