#!/usr/bin/env python3
"""Tables for bench/results/opt/README.md from the simulator's JSON files
(written by bench/opt_sim.sh): mean I/O time per day of the trace (the
phases, four a day), speedups on the held-out days, and the opt counters.

    opt_report.py RESULTS_DIR CPU_FILE
    opt_report.py --startup RESULTS_DIR
    opt_report.py --coverage TRACE.gz     (what a plan trained on day 1 could know)
    opt_report.py --seeds RESULTS_DIR SEED...  (every seed's speedups, and the medians;
                                               seed 1 in RESULTS_DIR, seed N in seeds/seedN,
                                               its traces in bench/traces/opt[/seedN])
"""
import gzip
import json
import sys

DAYS = 4
DAY_S = 65.536


def days(j, count=DAYS):
    """Per day: (requests, mean response ms), from the phases (each lies
    within one day: 16.384 s wide, days 65.536 s long)."""
    out = [[0, 0.0] for _ in range(count)]
    for p in j["phases"]["list"]:
        d = int(p["start_s"] // DAY_S)
        out[d][0] += p["requests"]
        out[d][1] += p["requests"] * p["response_ms_mean"]
    return [(n, s / max(n, 1)) for n, s in out]


def counters(j):
    for layer in j["stack"]["layers"]:
        if layer["target"] == "opt":
            return dict(layer["counters"])
    return {}


def startup(res):
    """The start-up experiment: day 2 repeats day 1 exactly."""
    print()
    print("Start-up after one reconfiguration (day 2 repeats day 1; plan at the end of day 1):")
    print()
    print("| run | day 1 | day 2 | speedup day 2 |")
    print("| --- | --- | --- | --- |")
    base = days(json.load(open(f"{res}/startup-plain.json")), 2)
    for r in ["plain", "opt"]:
        d = days(json.load(open(f"{res}/startup-{r}.json")), 2)
        print(f"| {r} | {d[0][1]:.2f} ms | {d[1][1]:.2f} ms | {base[1][1] / d[1][1]:.2f}x |")
    print()


def coverage(trace):
    """Per held-out day: the share of reads whose blocks were all read on
    day 1 (the training day), and on any earlier day: what a plan trained
    on them could have placed at most."""
    seen_day1, seen_before, today_blocks, rows = set(), set(), set(), {}
    today = 0
    for line in gzip.open(trace, "rt"):
        f = line.split()
        if line.startswith("#") or f[3] != "R":
            continue
        d = int(int(f[0]) / 1e9 // DAY_S)
        if d != today:
            seen_before |= today_blocks
            today_blocks, today = set(), d
        off, n = int(f[4]), int(f[5])
        blocks = set(range(off // 4096, (off + n + 4095) // 4096))
        r = rows.setdefault(d, [0, 0, 0])
        r[0] += 1
        r[1] += blocks <= seen_day1
        r[2] += blocks <= seen_before
        if d == 0:
            seen_day1 |= blocks
        today_blocks |= blocks
    print()
    print("Reads of each held-out day whose blocks training had seen (an upper bound on what a plan can place):")
    print()
    print("| day | reads | seen on day 1 | seen on any earlier day |")
    print("| --- | --- | --- | --- |")
    for d in sorted(k for k in rows if k > 0):
        n, a, b = rows[d]
        print(f"| {d + 1} | {n} | {100 * a / n:.0f}% | {100 * b / n:.0f}% |")


def held_out(j):
    """Requests-weighted mean response (ms) of days 2-4."""
    d = days(j)
    return sum(n * ms for n, ms in d[1:]) / sum(n for n, _ in d[1:])


def day1_coverage(trace):
    """Share of the held-out days' reads whose blocks day 1 read."""
    seen, reads, hits = set(), 0, 0
    for line in gzip.open(trace, "rt"):
        f = line.split()
        if line.startswith("#") or f[3] != "R":
            continue
        d = int(int(f[0]) / 1e9 // DAY_S)
        off, n = int(f[4]), int(f[5])
        blocks = set(range(off // 4096, (off + n + 4095) // 4096))
        if d == 0:
            seen |= blocks
        else:
            reads += 1
            hits += blocks <= seen
    return hits / reads


def seeds(res, names):
    """One row per seed of the generator, then the medians."""
    print()
    print("Every seed of the generator (held-out days 2-4 and the start-up day 2; plain mean / run mean):")
    print()
    print("| seed | opt-train-day1 | opt-daily | share of the daily gain after day 1 | start-up | held-out reads seen on day 1 |")
    print("| --- | --- | --- | --- | --- | --- |")
    rows = []
    for name in names:
        d = res if name == "1" else f"{res}/seeds/seed{name}"
        tdir = "bench/traces/opt" if name == "1" else f"bench/traces/opt/seed{name}"
        load = lambda r: json.load(open(f"{d}/{r}.json"))
        base = held_out(load("plain"))
        one, daily = base / held_out(load("opt-train-day1")), base / held_out(load("opt-daily"))
        sp = days(load("startup-plain"), 2)[1][1] / days(load("startup-opt"), 2)[1][1]
        share = (one - 1) / (daily - 1) if daily > 1 else float("nan")
        cov = day1_coverage(f"{tdir}/desktop-4days.trace.gz")
        rows.append((one, daily, share, sp, cov))
        print(f"| {name} | {one:.2f}x | {daily:.2f}x | {100 * share:.0f}% | {sp:.2f}x | {100 * cov:.0f}% |")
    med = [sorted(c)[len(c) // 2] if len(c) % 2 else sum(sorted(c)[len(c) // 2 - 1:len(c) // 2 + 1]) / 2
           for c in zip(*rows)]
    print(f"| median | {med[0]:.2f}x | {med[1]:.2f}x | {100 * med[2]:.0f}% | {med[3]:.2f}x | {100 * med[4]:.0f}% |")


def main():
    if sys.argv[1] == "--startup":
        return startup(sys.argv[2])
    if sys.argv[1] == "--coverage":
        return coverage(sys.argv[2])
    if sys.argv[1] == "--seeds":
        return seeds(sys.argv[2], sys.argv[3:])
    res, cpu_file = sys.argv[1], sys.argv[2]
    cpu = {}
    for line in open(cpu_file):
        name, user, system = line.split()
        cpu[name] = float(user) + float(system)
    runs = ["plain", "opt-train-day1", "opt-daily", "opt-noplan"]
    js = {r: json.load(open(f"{res}/{r}.json")) for r in runs}
    width = js["plain"]["phases"]["width_s"]
    assert abs(DAY_S / width - round(DAY_S / width)) < 1e-9, f"phases of {width} s do not divide a day"
    base = days(js["plain"])
    print("| run | day 1 (training) | day 2 | day 3 | day 4 | days 2-4 | speedup days 2-4 |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for r in runs:
        d = days(js[r])
        held = sum(n * ms for n, ms in d[1:]) / sum(n for n, _ in d[1:])
        held_base = sum(n * ms for n, ms in base[1:]) / sum(n for n, _ in base[1:])
        cells = [f"{ms:.2f} ms" for _, ms in d]
        print(f"| {r} | " + " | ".join(cells) + f" | {held:.2f} ms | {held_base / held:.2f}x |")
    print()
    print("Speedup by held-out day (plain mean / run mean):")
    print()
    print("| run | day 2 | day 3 | day 4 |")
    print("| --- | --- | --- | --- |")
    for r in runs[1:]:
        d = days(js[r])
        print(f"| {r} | " + " | ".join(f"{base[i][1] / d[i][1]:.2f}x" for i in range(1, DAYS)) + " |")
    print()
    print("| run | requests | simulated s | opt counters | CPU s of the sim process |")
    print("| --- | --- | --- | --- | --- |")
    keys = ["plans_count", "reconfigurations_count", "mapped_blocks_count", "copied_bytes", "read_opt_bytes",
            "written_opt_bytes", "dirty_copies_count", "copied_home_bytes", "analysis_units", "planning_units",
            "graph_vertices_count", "graph_edges_count", "indirection_pieces_per_request_milli",
            "extra_copies_count", "read_extra_count", "partial_reads_home_count"]
    for r in runs:
        c = counters(js[r])
        cs = ", ".join(f"{k}={c[k]}" for k in keys if k in c) or "-"
        print(f"| {r} | {js[r]['requests']} | {js[r]['simulated_seconds']:.1f} | {cs} | {cpu.get(r, float('nan')):.2f} |")


if __name__ == "__main__":
    main()
