#!/usr/bin/env python3
"""The replica target on the recorded Postmark-like repeated-read trace
(bench/results/postmark-repeat/trace.gz: ext4 on a 4 GiB volume, 8,000
files created, then read four times in one fixed order with cold caches),
replayed closed-loop on the WD800 model: plain linear vs replica (thesis
defaults) vs each beyond-thesis option, side by side, per read phase, and
the sequential-read bound of the same bytes.

Usage: bench/replica_postmark.py [--layoutd PATH] [--capture DIR] [--out DIR]
Writes OUT/result.json and OUT/README.md (default OUT: bench/results/replica).
--capture names another `bench/run postmark-repeat` capture to replay (its
trace.gz and result.json), e.g. bench/results/postmark-noatime (the thesis's
Figure 5.2: mounted noatime).
--stacks linear,replica,replica-tuned replays only those stacks (names from
STACKS below) and none of the Postmark-specific experiments (full disk, two
processes, noise, synthetic overhead, sequential bounds): per-phase span and
disk-busy tables only, with each phase's change against linear. It takes
the phase names of any `bench/run` capture, e.g. the git-status workload's
(bench/results/replica/git-status).

Besides each phase's span (what a user waits for, think time included), the
report gives its disk-busy time: the union of the intervals in which a request
was outstanding. The recorded think time (FUSE/loop/NBD round trips and the
workload's own CPU, about 0.4 ms per file) is kept by the closed-loop replay
and no layout can remove it, so the span's speed-up is bounded by it; the
busy time's speed-up is what the layout achieved.
"""
import argparse
import collections
import gzip
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "harness"))
import tracefile  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
CAPTURE = os.path.join(HERE, "results", "postmark-repeat")
TRACE = os.path.join(CAPTURE, "trace.gz")

# The options that close most of the gap on this trace, together.
TUNED = "close_blocks = 128\nwrite_batch_count = 64\nreadahead_blocks = 128\n"
# TUNED, plus: a read passes through only when close to the stream's most
# recent read (the thesis's "aggressive" variant of §3.2: history of 1,
# k = 1), and replica writes deferred until 100 ms without a request
# (holding up to 4096 writes, at most 64 MiB, meanwhile).
RECENT_IDLE = TUNED + ("history_count = 1\npass_through_close_count = 1\nreplication = \"idle\"\n"
                       "replication_idle_ms = 100\nreplication_wait_max_ms = 10000\ncongestion_in_flight_max = 4096\n")
# The thesis's future work for reclamation: gradual bottom share, thrash guard.
GROWTH_GUARD = "reclaim_growth = true\nthrash_guard = true\n"
# Consecutive replica writes (an overdue sweep) as one lower write of up to
# 16 MiB instead of 1 MiB pieces, each of which loses a rotation.
WRITE_RUN = "write_run_bytes_max = \"16MiB\"\n"


def example_keys(name):
    """The replica layer's keys of examples/NAME, one `key = value` a line
    (comments dropped)."""
    with open(os.path.join(HERE, "..", "examples", name)) as f:
        text = f.read().split('target = "replica"', 1)[1]
    lines = [line.split("#", 1)[0].strip() for line in text.splitlines()]
    return "".join(line + "\n" for line in lines if line)


# The one set measured against every goal row (the table "Against every
# goal" in the README): examples/replica-all-goals.toml, which is
# RECENT_IDLE + GROWTH_GUARD + WRITE_RUN.
ALL_GOALS = example_keys("replica-all-goals.toml")
assert sorted(ALL_GOALS.splitlines()) == sorted((RECENT_IDLE + GROWTH_GUARD + WRITE_RUN).splitlines()), ALL_GOALS
GOAL_STACK = "replica-all-goals"

STACKS = [
    ("linear", "version = 1\n[[layer]]\ntarget = \"trace\"\n[[layer]]\ntarget = \"linear\"\n"),
    ("replica", ""),
    ("replica-mru", "replica_choice = \"mru\"\n"),
    ("replica-longest", "replica_choice = \"longest\"\n"),
    ("replica-idle", "replication = \"idle\"\n"),
    ("replica-propagate", "propagate_bytes_max = \"8KiB\"\n"),
    ("replica-quota", "stream_quota_blocks = 4096\n"),
    ("replica-growth-guard", "reclaim_growth = true\nthrash_guard = true\n"),
    ("replica-batch64", "write_batch_count = 64\n"),
    ("replica-readahead128", "readahead_blocks = 128\n"),
    ("replica-close128", "close_blocks = 128\n"),
    ("replica-tuned", TUNED),
    ("replica-recent-idle", RECENT_IDLE),
    (GOAL_STACK, ALL_GOALS),
]
# Where the time of a phase goes (lower requests by kind) is shown for these.
BREAKDOWN = ["replica", "replica-tuned", "replica-recent-idle", GOAL_STACK]


def config(extra):
    if extra.startswith("version"):
        return extra
    return "version = 1\n[[layer]]\ntarget = \"trace\"\n[[layer]]\ntarget = \"replica\"\n" + extra


# Extra `layoutd sim` arguments for every replay (--stream-detect).
SIM_ARGS = []


def sim(layoutd, trace, cfg_text, tmp, name, streams=False):
    cfg = os.path.join(tmp, name + ".toml")
    with open(cfg, "w") as f:
        f.write(cfg_text)
    rec = os.path.join(tmp, name + ".trace")
    out = os.path.join(tmp, name + ".json")
    cmd = [layoutd, "sim", "--trace", trace, "--format", "layoutd", "--config", cfg, "--disk", "wd800",
           "--closed-loop", "--record-trace", rec, "--json", out, "--no-progress"] + SIM_ARGS
    subprocess.run(cmd, check=True, stderr=subprocess.DEVNULL)
    with open(out) as f:
        summary = json.load(f)
    records = []
    with open(rec) as f:
        for line in f:
            if line.startswith("#"):
                continue
            p = line.split()
            records.append((int(p[0]), int(p[1]), p[3], int(p[4]), int(p[5])) + ((int(p[2]),) if streams else ()))
    return summary, records


def stack_row(layoutd, trace, name, extra, markers, names, tmp):
    """One stack replayed on `trace`: per-phase span and disk-busy seconds,
    simulated seconds, counters, and for BREAKDOWN stacks the lower
    requests by kind."""
    summary, records = sim(layoutd, trace, config(extra), tmp, name)
    row = {
        "phases_s": dict(phase_spans(records, markers, names)),
        "phases_busy_s": dict(phase_busy(records, markers, names)),
        "simulated_s": summary["simulated_seconds"],
        "counters": counters(summary),
    }
    if name in BREAKDOWN:
        row["lower_by_kind"] = breakdown(layoutd, trace, extra, records, markers, names, tmp, name)
    return row


def breakdown(layoutd, trace, extra, upper, markers, names, tmp, name):
    """Lower requests of each phase by kind, with the disk-busy seconds
    each kind took: the same stack with the trace layer below the replica
    layer (the replay is deterministic, so its timings equal the upper
    run's; a lower read issued with an upper read at another offset is a
    replica read). Reads answered from read-ahead memory issue nothing."""
    cfg = "version = 1\n[[layer]]\ntarget = \"replica\"\n" + extra + "[[layer]]\ntarget = \"trace\"\n"
    _, lower = sim(layoutd, trace, cfg, tmp, name + "-lower")
    reads_at = {}
    for sub, _, op, off, _ in upper:
        if op == "R":
            reads_at.setdefault(sub, set()).add(off)
    writes_at = {}
    for sub, _, op, off, ln in upper:
        if op != "R":
            writes_at.setdefault(sub, []).append((off, off + ln))
    at = marker_times(upper, markers)
    volume = max(off + ln for _, _, _, off, ln in upper)
    out = {}
    for i, phase in enumerate(names):
        lo, hi = at[markers[2 * i]][1], at[markers[2 * i + 1]][0]
        kinds = {}
        end = lo
        for sub, comp, op, off, ln in sorted((r for r in lower if r[1] > lo and r[0] < hi), key=lambda r: r[1]):
            busy = max(0, min(comp, hi) - max(sub, end, lo))
            end = max(end, comp)
            if op == "R":
                ups = reads_at.get(sub, set())
                kind = "original reads" if off in ups or not ups else "replica reads"
            elif op in ("W", "Z", "T"):
                if off >= volume:
                    kind = "metadata writes"
                elif any(a <= off < b for a, b in writes_at.get(sub, [])):
                    kind = "upper writes"
                else:
                    kind = "replica writes"
            else:
                kind = "flushes"
            k = kinds.setdefault(kind, [0, 0])
            k[0] += 1
            k[1] += busy / 1e9
        out[phase] = kinds
    return out


def same_requests_trace(trace_gz, markers, phase_index, path):
    """The reads of one phase, in order and at their recorded sizes, laid
    end to end from 1 GiB: the sequential read of the same bytes in the
    same requests (a layout cannot merge requests the file system sends
    one at a time)."""
    reads = []
    with gzip.open(trace_gz, "rt") as src:
        inside = False
        for line in src:
            if line.startswith("#"):
                continue
            p = line.split()
            off = int(p[4])
            if p[3] == "R" and off in markers:
                inside = markers.index(off) == 2 * phase_index
                continue
            if inside and p[3] == "R":
                reads.append(int(p[5]))
    with open(path, "w") as f:
        f.write("# layoutd-trace v1: submit_ns complete_ns stream op offset_bytes length_bytes flags\n")
        pos = 1 << 30
        for ln in reads:
            f.write(f"0 0 0 R {pos} {ln} -\n")
            pos += ln
    return len(reads)


# Thesis Figure 5.3: the second process's copy of the capture, this many
# bytes higher (no block of the copy meets a block of the original).
SECOND_PROCESS_SHIFT = 520 << 20


def two_process_trace(trace_gz, path, shift):
    """Two Postmark processes at once: every request of the capture as
    process 1, and a copy `shift` bytes higher as process 2, at the same
    recorded instants (mkfs's discards once, as process 0). Closed-loop,
    each process keeps its own pacing and think time; the replica layer
    sees two streams, as the thesis's per-process histories did."""
    with gzip.open(trace_gz, "rt") as src, open(path, "w") as f:
        for line in src:
            if line.startswith("#"):
                f.write(line)
                continue
            p = line.split()
            if p[3] == "T":
                f.write(line)
                continue
            f.write(" ".join(p[:2] + ["1"] + p[3:]) + "\n")
            off = int(p[4]) + shift if p[3] != "F" else 0
            f.write(" ".join(p[:2] + ["2", p[3], str(off)] + p[5:]) + "\n")


def noise_trace(trace_gz, markers, path):
    """Thesis 5.5, a pattern with noise from another process: the capture
    as process 1, and as process 2 one 4 KiB read at a seeded random block
    of what the create phase wrote (never declared-free blocks, which read
    as zeroes without a disk access) at the instant of each of process 1's
    reads; never the same blocks twice in the same order, so process 2 has
    no pattern to replicate."""
    import random
    rng = random.Random(5)
    lines = []
    with gzip.open(trace_gz, "rt") as src:
        lines = [line for line in src if not line.startswith("#")]
    written = []
    inside = False
    for line in lines:
        p = line.split()
        off = int(p[4])
        if p[3] == "R" and off in markers:
            inside = markers.index(off) == 0
        elif inside and p[3] == "W":
            written.extend(range(off >> 12, (off + int(p[5])) >> 12))
    with open(path, "w") as f:
        f.write("# layoutd-trace v1: submit_ns complete_ns stream op offset_bytes length_bytes flags\n")
        for line in lines:
            p = line.split()
            if p[3] == "T":
                f.write(line)
                continue
            f.write(" ".join(p[:2] + ["1"] + p[3:]) + "\n")
            if p[3] == "R" and int(p[4]) not in markers:
                f.write(" ".join(p[:2] + ["2", "R", str(rng.choice(written) << 12), "4096", "-"]) + "\n")


def noise(layoutd, trace_gz, markers, names, tmp):
    """Per phase (process 1's markers): process 1's span and process 2's
    mean response in ms, for linear, replica and replica-tuned."""
    path = os.path.join(tmp, "noise.trace")
    noise_trace(trace_gz, markers, path)
    out = {}
    for name, extra in [("linear", None), ("replica", ""), ("replica-tuned", TUNED), ("replica-recent-idle", RECENT_IDLE),
                        (GOAL_STACK, ALL_GOALS)]:
        cfg = STACKS[0][1] if extra is None else config(extra)
        summary, with_streams = sim(layoutd, path, cfg, tmp, "noise-" + name, streams=True)
        records = [r[:5] for r in with_streams]
        p2, p2_count = noise_process_2(with_streams, markers, names)
        out[name] = {"process_1_s": dict(phase_spans(records, markers, names)), "process_2_mean_ms": p2,
                     "process_2_requests": p2_count, "counters": counters(summary)}
        print("noise", name, out[name]["process_1_s"], p2, file=sys.stderr)
    return out


def noise_process_2(with_streams, markers, names):
    """Process 2's mean response (ms) and request count per phase of a
    replay of the noise trace (records with their stream): the requests it
    issued between the end of the phase's start marker read and the start
    of its end marker read."""
    at = marker_times([r[:5] for r in with_streams], markers)
    # The simulator numbers streams itself: process 1 is the stream of
    # the marker reads, process 2 the other stream that reads.
    first = next(r[5] for r in with_streams if r[2] == "R" and r[3] == markers[0])
    others = collections.Counter(r[5] for r in with_streams if r[2] == "R" and r[5] != first)
    second = others.most_common(1)[0][0]
    p2, p2_count = {}, {}
    for i, phase in enumerate(names):
        lo, hi = at[markers[2 * i]][1], at[markers[2 * i + 1]][0]
        resp = [(c - a) / 1e6 for a, c, _, _, _, st in with_streams if st == second and lo <= a < hi]
        p2[phase] = sum(resp) / len(resp) if resp else 0.0
        p2_count[phase] = len(resp)
    return p2, p2_count


def two_processes(layoutd, trace_gz, markers, names, tmp):
    """Per process and phase: span seconds, for linear, replica and
    replica-tuned; and the disk-busy seconds of process 1's phases."""
    path = os.path.join(tmp, "two.trace")
    two_process_trace(trace_gz, path, SECOND_PROCESS_SHIFT)
    shifted = [m + SECOND_PROCESS_SHIFT for m in markers]
    out = {}
    for name, extra in [("linear", None), ("replica", ""), ("replica-extent-per-stream", "extent_per_stream = true\n"),
                        ("replica-tuned", TUNED), ("replica-recent-idle", RECENT_IDLE), (GOAL_STACK, ALL_GOALS),
                        ("replica-tuned-extent-per-stream", TUNED + "extent_per_stream = true\n")]:
        cfg = STACKS[0][1] if extra is None else config(extra)
        summary, records = sim(layoutd, path, cfg, tmp, "two-" + name)
        out[name] = {
            "process_1_s": dict(phase_spans(records, markers, names)),
            "process_2_s": dict(phase_spans(records, shifted, names)),
            "busy_s": dict(phase_busy(records, markers, names)),
            "counters": counters(summary),
        }
        print("two processes", name, out[name]["process_1_s"], out[name]["process_2_s"], file=sys.stderr)
    return out


def marker_times(records, markers):
    at = {}
    for submit, complete, op, off, _ in records:
        if op == "R" and off in markers and off not in at:
            at[off] = (submit, complete)
    return at


def phase_spans(records, markers, names):
    """Simulated seconds from each phase's start marker read to its end marker read."""
    at = marker_times(records, markers)
    spans = []
    for i, name in enumerate(names):
        s, e = markers[2 * i], markers[2 * i + 1]
        spans.append((name, (at[e][0] - at[s][1]) / 1e9))
    return spans


def phase_busy(records, markers, names):
    """Simulated seconds within each phase with at least one request
    outstanding (the union of [submit, complete] intervals)."""
    at = marker_times(records, markers)
    out = []
    for i, name in enumerate(names):
        lo, hi = at[markers[2 * i]][1], at[markers[2 * i + 1]][0]
        iv = sorted((max(a, lo), min(b, hi)) for a, b, _, off, _ in records if b > lo and a < hi)
        busy, end = 0, lo
        for a, b in iv:
            a = max(a, end)
            if b > a:
                busy += b - a
                end = b
        out.append((name, busy / 1e9))
    return out


def sequential_trace(path, total_bytes):
    with open(path, "w") as f:
        f.write("# layoutd-trace v1: submit_ns complete_ns stream op offset_bytes length_bytes flags\n")
        chunk = 128 << 10
        for i in range(0, total_bytes, chunk):
            f.write(f"0 0 0 R {(1 << 30) + i} {chunk} -\n")


def synthetic(path, kind):
    """fio-like overhead traces (Bonnie++ 5.6/5.7 stand-ins): 2 GiB of the
    4 GiB volume declared free by discards, then 1 GiB read sequentially in
    64 KiB requests, or 20,000 4 KiB reads at seeded random offsets in the
    other 2 GiB (no pattern repeats)."""
    import random
    rng = random.Random(7)
    with open(path, "w") as f:
        f.write("# layoutd-trace v1: submit_ns complete_ns stream op offset_bytes length_bytes flags\n")
        for i in range(64):
            f.write(f"0 0 0 T {(2 << 30) + i * (32 << 20)} {32 << 20} -\n")
        if kind == "sequential":
            for i in range(16384):
                f.write(f"0 0 0 R {i * 65536} 65536 -\n")
        else:
            for _ in range(20000):
                f.write(f"0 0 0 R {rng.randrange(0, (2 << 30) // 4096) * 4096} 4096 -\n")


SMALL_FREE_BYTES = 40 << 20
# A 95 % full 4 GiB volume: 5 % of it free.
FULL_95_FREE_BYTES = (4 << 30) // 20 // 4096 * 4096


def small_free_trace(trace, path, free_bytes):
    """The Postmark trace with mkfs's discards replaced by one discard of
    `free_bytes` past the files (the thesis's full-disk case, Figure 5.4:
    fewer free blocks than the pattern needs, so reclamation runs)."""
    with gzip.open(trace, "rt") as src, open(path, "w") as f:
        first = True
        for line in src:
            p = line.split()
            if not line.startswith("#") and p[3] == "T":
                if first:
                    # In pieces: a request carries at most 32 MiB (a longer
                    # one is cut short, and only its first 32 MiB is declared).
                    piece = 32 << 20
                    for at in range(0, free_bytes, piece):
                        f.write(f"{p[0]} {p[1]} {p[2]} T {(3 << 30) + at} {min(piece, free_bytes - at)} -\n")
                    first = False
                continue
            f.write(line)


def counters(summary):
    layers = summary["stack"]["layers"]
    for layer in layers:
        if layer["target"] == "replica":
            return dict(layer["counters"]) if isinstance(layer["counters"], list) else layer["counters"]
    return {}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layoutd", default=os.path.join(HERE, "..", "target", "release", "layoutd"))
    ap.add_argument("--capture", default=CAPTURE,
                    help="a `bench/run postmark-repeat` output directory to replay (default: %(default)s)")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "replica"))
    ap.add_argument("--one-stream", action="store_true",
                    help="replay every request as stream 0, in recorded order (see bench/harness/tracefile.py one_stream)")
    ap.add_argument("--stacks", default=None,
                    help="comma-separated stack names: replay only these, per-phase tables only (any capture)")
    ap.add_argument("--stream-detect", action="store_true",
                    help="split each stream's interleaved forward runs into streams of their own, as the live "
                         "runtime does (`layoutd sim --stream-detect`)")
    a = ap.parse_args()
    if a.stream_detect:
        SIM_ARGS.append("--stream-detect")
    trace_gz = os.path.join(a.capture, "trace.gz")
    meta_path = os.path.join(a.capture, "result.json")
    for path in (trace_gz, meta_path):
        if not os.path.exists(path):
            sys.exit(f"replica_postmark: {path} does not exist; --capture must name a directory written by "
                     "`bench/run postmark-repeat --out DIR` (it holds trace.gz and result.json)")
    with open(meta_path) as f:
        meta = json.load(f)
    markers = [m["offset"] for m in meta["markers"]]
    names = [p["name"] for p in meta["phases"]]
    read_bytes = [p["trace"]["read_bytes"] for p in meta["phases"]]
    if a.stacks:
        with tempfile.TemporaryDirectory() as tmp:
            if a.one_stream:
                trace_gz = tracefile.one_stream(trace_gz, os.path.join(tmp, "one-stream.trace.gz"))
            return phases_only(a, trace_gz, meta, markers, names)
    if a.one_stream:
        sys.exit("replica_postmark: --one-stream goes with --stacks")
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        small = os.path.join(tmp, "small-free.trace")
        small_free_trace(trace_gz, small, SMALL_FREE_BYTES)
        full95 = os.path.join(tmp, "full95.trace")
        small_free_trace(trace_gz, full95, FULL_95_FREE_BYTES)
        runs = [(n, e, trace_gz) for n, e in STACKS] + [
            (f"replica-{SMALL_FREE_BYTES >> 20}MiB-free", "", small),
            (f"replica-{SMALL_FREE_BYTES >> 20}MiB-free-growth-guard", GROWTH_GUARD, small),
            (f"replica-{SMALL_FREE_BYTES >> 20}MiB-free-tuned-growth-guard", TUNED + GROWTH_GUARD, small),
            (f"replica-{SMALL_FREE_BYTES >> 20}MiB-free-all-goals", ALL_GOALS, small),
            ("replica-95pct-full", "", full95),
            ("replica-95pct-full-tuned", TUNED, full95),
            ("replica-95pct-full-all-goals", ALL_GOALS, full95),
        ]
        for name, extra, trace in runs:
            rows[name] = stack_row(a.layoutd, trace, name, extra, markers, names, tmp)
            if "free" in name:
                c = rows[name]["counters"]
                print(name, {k: c.get(k) for k in ["replicas_reclaimed_blocks", "reclaim_attempts_count",
                                                   "reclaim_failures_count", "thrash_guard_count", "no_space_count"]},
                      file=sys.stderr)
            print(name, rows[name]["phases_s"], file=sys.stderr)
        overhead = {}
        for kind in ["sequential", "random"]:
            path = os.path.join(tmp, kind + ".trace")
            synthetic(path, kind)
            plain, _ = sim(a.layoutd, path, STACKS[0][1], tmp, kind + "-linear")
            rep, _ = sim(a.layoutd, path, config(""), tmp, kind + "-replica")
            quota, _ = sim(a.layoutd, path, config("stream_quota_blocks = 1024\n"), tmp, kind + "-quota")
            tuned, _ = sim(a.layoutd, path, config(TUNED), tmp, kind + "-tuned")
            goal, _ = sim(a.layoutd, path, config(ALL_GOALS), tmp, kind + "-all-goals")
            overhead[kind] = {"linear_s": plain["simulated_seconds"], "replica_s": rep["simulated_seconds"],
                              "replicas_created_blocks": counters(rep).get("replicas_created_blocks"),
                              "replica_quota_1024_s": quota["simulated_seconds"],
                              "quota_replicas_created_blocks": counters(quota).get("replicas_created_blocks"),
                              "replica_tuned_s": tuned["simulated_seconds"],
                              "replica_all_goals_s": goal["simulated_seconds"],
                              "all_goals_replicas_created_blocks": counters(goal).get("replicas_created_blocks")}
            print(kind, overhead[kind], file=sys.stderr)
        two = two_processes(a.layoutd, trace_gz, markers, names, tmp)
        noisy = noise(a.layoutd, trace_gz, markers, names, tmp)
        seq = os.path.join(tmp, "seq.trace")
        sequential_trace(seq, read_bytes[1])
        summary, _ = sim(a.layoutd, seq, STACKS[0][1], tmp, "sequential")
        bound = summary["simulated_seconds"]
        same = os.path.join(tmp, "same.trace")
        same_count = same_requests_trace(trace_gz, markers, 1, same)
        summary, _ = sim(a.layoutd, same, STACKS[0][1], tmp, "same-requests")
        bound_same = {"s": summary["simulated_seconds"], "requests": same_count}
    os.makedirs(a.out, exist_ok=True)
    capture = os.path.relpath(a.capture, os.path.join(HERE, ".."))
    result = {"trace": capture + "/trace.gz", "mount_options": meta.get("rig", {}).get("mount_opts"), "disk": "wd800", "closed_loop": True,
              "sequential_bound_s": bound, "sequential_bound_bytes": read_bytes[1], "stacks": rows,
              "sequential_same_requests_bound": bound_same, "overhead": overhead, "two_processes": two,
              "noise": noisy}
    with open(os.path.join(a.out, "result.json"), "w") as f:
        json.dump(result, f, indent=1, sort_keys=True)
    write_readme(a.out, names, rows, bound, bound_same, read_bytes[1], overhead, two, noisy, capture, meta)


def write_readme(out, names, rows, bound, bound_same, seq_bytes, overhead, two, noisy, capture, meta):
    base = rows["linear"]["phases_s"]
    w = meta.get("params", {})
    lines = ["# replica on the repeated-read Postmark trace (simulator)", "",
             "Generated by `bench/replica_postmark.py --capture " + capture + "".join(" " + x for x in SIM_ARGS) + "` (closed-loop replay on the WD800 "
             f"model of the ext4 trace recorded live in `{capture}/`: {w.get('files', '?')} files, "
             f"{w.get('total_bytes', 0) / 1e6:.1f} MB, created then read {w.get('reads', '?')} times in one order "
             f"with cold caches; mount options `{meta.get('rig', {}).get('mount_opts')}`, so atime updates are "
             f"{'off' if 'noatime' in (meta.get('rig', {}).get('mount_opts') or '') else 'on (relatime: read-1 writes atimes)'}). "
             "Seconds are simulated, from each phase's start marker to its end marker. Speed-up = linear / stack.", ""]
    head = ("| stack | " + " | ".join(names) +
            " | read-4 speed-up | replicas created (blocks) | used (blocks) | reads from replicas | reclaimed (blocks) |")
    lines += [head, "| --- |" + " ---: |" * (len(names) + 5)]
    for name, r in rows.items():
        c = r["counters"]
        cells = [f"{r['phases_s'][n]:.2f}" for n in names]
        sp = base["read-4"] / r["phases_s"]["read-4"]
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {sp:.1f}x | {c.get('replicas_created_blocks', '-')} | "
                     f"{c.get('replicas_used_blocks', '-')} | {c.get('reads_replica_count', '-')} | "
                     f"{c.get('replicas_reclaimed_blocks', '-')} |")
    last = names[-1]
    bbase = rows["linear"]["phases_busy_s"]
    lines += ["", "Disk-busy seconds per phase (the span minus the recorded think time, which the replay keeps and "
              "no layout removes):", "",
              "| stack | " + " | ".join(names) + f" | {last} busy speed-up |", "| --- |" + " ---: |" * (len(names) + 1)]
    for name, r in rows.items():
        b = r["phases_busy_s"]
        lines.append(f"| {name} | " + " | ".join(f"{b[n]:.2f}" for n in names) + f" | {bbase[last] / b[last]:.1f}x |")
    lines += ["", f"Sequential-read bound: {seq_bytes / 1e6:.1f} MB (read-2's bytes) read sequentially in 128 KiB "
              f"requests on the same model: {bound:.2f} s; in read-2's own {bound_same['requests']} requests, "
              f"laid end to end in order: {bound_same['s']:.2f} s (the WD800 model charges 0.2 ms of controller "
              "overhead per command, cache hits included).", ""]
    lines += breakdown_lines(rows, names)
    lines += [
              "Overhead without patterns (fio-like synthetic traces, 2 GiB declared free first):", "",
              "| workload | linear s | replica s | overhead | replicas created (blocks) | with stream_quota_blocks = 1024 | overhead | created | replica-tuned s | overhead | " + GOAL_STACK + " s | overhead | created |",
              "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for kind, o in overhead.items():
        pct = (o["replica_s"] / o["linear_s"] - 1) * 100
        qpct = (o["replica_quota_1024_s"] / o["linear_s"] - 1) * 100
        lines.append(f"| {kind} | {o['linear_s']:.2f} | {o['replica_s']:.2f} | {pct:+.2f}% | {o['replicas_created_blocks']} "
                     f"| {o['replica_quota_1024_s']:.2f} | {qpct:+.2f}% | {o['quota_replicas_created_blocks']} "
                     f"| {o['replica_tuned_s']:.2f} | {(o['replica_tuned_s'] / o['linear_s'] - 1) * 100:+.2f}% "
                     f"| {o['replica_all_goals_s']:.2f} | {(o['replica_all_goals_s'] / o['linear_s'] - 1) * 100:+.2f}% "
                     f"| {o['all_goals_replicas_created_blocks']} |")
    lines += ["", f"Two processes at once (thesis Figure 5.3): the capture as process 1 and a copy "
              f"{SECOND_PROCESS_SHIFT >> 20} MiB higher as process 2, at the same recorded instants, closed-loop per "
              "process; span seconds per phase of each, and the disk-busy seconds in process 1's phases:", "",
              "| stack | process | " + " | ".join(names) + " |", "| --- | --- |" + " ---: |" * len(names)]
    for name, r in two.items():
        for key, label in [("process_1_s", "1"), ("process_2_s", "2"), ("busy_s", "disk busy")]:
            lines.append(f"| {name} | {label} | " + " | ".join(f"{r[key][n]:.2f}" for n in names) + " |")
    lines += ["", "A pattern with noise (thesis Figure 5.5): the capture as process 1 and, as process 2, a 4 KiB read "
              "of a random block the create phase wrote at the instant of each of process 1's reads; process 1's "
              "span seconds and process 2's mean response (ms) per phase:", "",
              "| stack | process | " + " | ".join(names) + " |", "| --- | --- |" + " ---: |" * len(names)]
    for name, r in noisy.items():
        lines.append(f"| {name} | 1 (s) | " + " | ".join(f"{r['process_1_s'][n]:.2f}" for n in names) + " |")
        lines.append(f"| {name} | 2 (ms) | " + " | ".join(f"{r['process_2_mean_ms'][n]:.2f}" for n in names) + " |")
        lines.append(f"| {name} | 2 (requests) | " + " | ".join(str(r['process_2_requests'][n]) for n in names) + " |")
    lines += ["", f"Rerun: `cargo build -p layoutd && bench/replica_postmark.py --layoutd target/debug/layoutd --capture {capture} --out {os.path.relpath(out, os.path.join(HERE, '..'))}` "
              "(simulated time: the build profile does not change the numbers).", ""]
    lines += goals_lines(out, rows, overhead, two, noisy)
    write_keeping_notes(os.path.join(out, "README.md"), lines)


def load_sibling(out, *parts):
    """A result.json written by another run of this script into a
    directory under `out` (None if that run was not made)."""
    path = os.path.join(out, *parts, "result.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def goals_lines(out, rows, overhead, two, noisy):
    """Issue 12's goal rows for plain, the thesis's defaults and
    GOAL_STACK, side by side; the noatime and git-status rows come from
    their own runs' result.json under `out` (run those first: see the
    rerun commands). Empty when `out` has no git-status run under it."""
    noatime, git = load_sibling(out, "noatime"), load_sibling(out, "git-status")
    if git is None:
        return []
    stacks = ["replica", GOAL_STACK]
    pct = lambda a, b: f"{(a / b - 1) * 100:+.1f} %"
    span = lambda name: rows[name]["phases_s"]
    busy = lambda name: rows[name]["phases_busy_s"]
    lin, lin_busy = span("linear"), busy("linear")
    table = []

    def row(goal, target, cells, met):
        table.append(f"| {goal} | {target} | " + " | ".join(cells) + f" | {'yes' if met else '**no**'} |")

    cells = [pct(span(n)["read-1"], lin["read-1"]) for n in stacks]
    row("5.1 atime on, iteration 1", "≤ 10 % slower", cells, span(GOAL_STACK)["read-1"] <= 1.10 * lin["read-1"])
    cells = [f"{lin['read-3'] / span(n)['read-3']:.1f}x span, {lin_busy['read-3'] / busy(n)['read-3']:.1f}x busy"
             for n in stacks]
    row("5.1 atime on, iteration 3", "≥ 19x (span capped near 14x by the recorded think time)", cells,
        lin_busy["read-3"] / busy(GOAL_STACK)["read-3"] >= 19)
    if noatime:
        bound = noatime["sequential_bound_s"]
        nb = lambda n: max(noatime["stacks"][n]["phases_busy_s"][p] for p in ["read-2", "read-3", "read-4"])
        cells = [f"{nb(n) / bound:.2f}x" for n in stacks if n in noatime["stacks"]]
        row("5.2 noatime, iterations 2-4 (busy, worst)", f"≤ 1.5x a sequential read ({bound:.2f} s)", cells,
            GOAL_STACK in noatime["stacks"] and nb(GOAL_STACK) <= 1.5 * bound)
    one = lambda n: lin["read-4"] / span(n)["read-4"]
    tp = lambda n, k: two["linear"][k]["read-4"] / two[n][k]["read-4"]
    cells = [f"{min(tp(n, 'process_1_s'), tp(n, 'process_2_s')):.1f}x (one process {one(n):.1f}x)" for n in stacks]
    row("5.3 two processes, iteration 4 (the capture has 4)", "full speed: the one-process speed-up", cells,
        min(tp(GOAL_STACK, "process_1_s"), tp(GOAL_STACK, "process_2_s")) >= one(GOAL_STACK))
    full = {"replica": "replica-95pct-full", GOAL_STACK: "replica-95pct-full-all-goals"}
    cells = [f"{span(full[n])['read-4'] / span(n)['read-4']:.2f}x" for n in stacks]
    row("5.4 95 % full vs empty, iteration 4", "≤ 1.1x slower", cells,
        span(full[GOAL_STACK])["read-4"] <= 1.1 * span(GOAL_STACK)["read-4"])
    for label, res in [("", noisy), (" (noatime capture)", noatime and noatime.get("noise"))]:
        if not res or GOAL_STACK not in res:
            continue
        reads = [p for p in res["linear"]["process_2_mean_ms"] if p.startswith("read-")]
        ms = lambda n, p: res[n]["process_2_mean_ms"][p]
        worst_phase = lambda n: max(reads, key=lambda p: ms(n, p) / ms("linear", p))
        worst = lambda n: ms(n, worst_phase(n)) / ms("linear", worst_phase(n))
        cells = [f"{pct(worst(n), 1)} ({worst_phase(n)}: {ms(n, worst_phase(n)):.2f} vs "
                 f"{ms('linear', worst_phase(n)):.2f} ms, the worst read phase)" for n in stacks]
        row(f"5.5 noise, process 2's mean response{label}", "no worse than plain", cells, worst(GOAL_STACK) <= 1.0)
    for kind, key, limit in [("sequential", "replica_s", 0.5), ("random", "replica_s", 2.0)]:
        o = overhead[kind]
        cells = [pct(o["replica_s"], o["linear_s"]), pct(o["replica_all_goals_s"], o["linear_s"])]
        row(f"5.6/5.7 {kind} overhead", f"< {limit} %", cells,
            (o["replica_all_goals_s"] / o["linear_s"] - 1) * 100 < limit)
    for label, res in [("no preload, thesis's git", git), ("second capture", load_sibling(out, "git-status", "no-preload-2")),
                       ("preload index (git default)", load_sibling(out, "git-status", "preload"))]:
        if res is None or GOAL_STACK not in res["stacks"]:
            continue
        g = lambda n, p: res["stacks"][n]["phases_s"][p]
        cells = [f"{pct(g(n, 'status-1'), g('linear', 'status-1'))} / {pct(g(n, 'status-3'), g('linear', 'status-3'))}"
                 for n in stacks]
        met = g(GOAL_STACK, "status-1") <= 1.10 * g("linear", "status-1") and \
            g(GOAL_STACK, "status-3") <= 0.55 * g("linear", "status-3")
        row(f"5.8 git status, run 1 / run 3 ({label})", "≤ +10 % / ≤ -45 %", cells, met)
    return ["## Against every goal (issue 12), one configuration", "",
            f"`{GOAL_STACK}` = " + ", ".join(f"`{line}`" for line in ALL_GOALS.strip().split("\n")) +
            ". Figures from the tables above, `noatime/` and `git-status/` (span unless marked; + slower, - faster "
            "than plain linear; met: the goal holds for " + GOAL_STACK + ").", "",
            "| experiment (thesis figure) | goal | thesis defaults | " + GOAL_STACK + " | met |",
            "| --- | --- | ---: | ---: | --- |"] + table + [""]


def breakdown_lines(rows, names):
    """Per stack of BREAKDOWN that has it: its lower requests by kind, count
    and busy seconds, per phase."""
    lines = []
    for name in BREAKDOWN:
        lk = rows.get(name, {}).get("lower_by_kind")
        if not lk:
            continue
        kinds = sorted({k for ph in lk.values() for k in ph})
        lines += [f"Where the busy time of `{name}` goes: lower requests by kind, count / busy seconds:", "",
                  "| phase | " + " | ".join(kinds) + " |", "| --- |" + " ---: |" * len(kinds)]
        for ph in names:
            lines.append(f"| {ph} | " + " | ".join(
                f"{lk[ph][k][0]} / {lk[ph][k][1]:.2f}" if k in lk[ph] else "-" for k in kinds) + " |")
        lines.append("")
    return lines


def write_keeping_notes(path, lines):
    """Writes the generated lines, keeping a hand-written part of the old
    file that starts at a `<!-- Notes below` line."""
    keep = ""
    if os.path.exists(path):
        with open(path) as f:
            old = f.read()
        marker = "<!-- Notes below"
        if marker in old:
            keep = old[old.index(marker):]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n" + keep)


def phases_only(a, trace_gz, meta, markers, names):
    """--stacks: each named stack replayed on the capture, per-phase span
    and disk-busy seconds, each against linear's."""
    known = dict(STACKS)
    wanted = [n.strip() for n in a.stacks.split(",") if n.strip()]
    unknown = [n for n in wanted if n not in known]
    if unknown:
        sys.exit(f"replica_postmark: unknown stack(s) {unknown}; known: {', '.join(known)}")
    if "linear" not in wanted:
        wanted.insert(0, "linear")
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in wanted:
            rows[name] = stack_row(a.layoutd, trace_gz, name, known[name], markers, names, tmp)
            print(name, rows[name]["phases_s"], file=sys.stderr)
        # The last phase's reads in their own requests laid end to end: what
        # a perfect layout would still cost on the disk.
        same = os.path.join(tmp, "same.trace")
        count = same_requests_trace(trace_gz, markers, len(names) - 1, same)
        summary, _ = sim(a.layoutd, same, STACKS[0][1], tmp, "same-requests")
        bound = {"phase": names[-1], "requests": count, "busy_s": summary["simulated_seconds"],
                 "think_s": rows["linear"]["phases_s"][names[-1]] - rows["linear"]["phases_busy_s"][names[-1]]}
    os.makedirs(a.out, exist_ok=True)
    root = os.path.join(HERE, "..")
    capture = os.path.relpath(a.capture, root)
    with open(os.path.join(a.out, "result.json"), "w") as f:
        json.dump({"trace": capture + "/trace.gz", "mount_options": meta.get("rig", {}).get("mount_opts"),
                   "disk": "wd800", "closed_loop": True, "stacks": rows, "sequential_same_requests_bound": bound},
                  f, indent=1, sort_keys=True)
    lines = [f"# replica on the `{meta.get('workload', capture)}` capture (simulator)", "",
             f"Generated by `bench/replica_postmark.py --capture {capture} --out {os.path.relpath(a.out, root)} "
             f"--stacks {','.join(wanted)}{' --one-stream' if a.one_stream else ''}{' --stream-detect' if a.stream_detect else ''}`: closed-loop replay on the WD800 model of the trace recorded live in "
             f"`{capture}/` (mount options `{meta.get('rig', {}).get('mount_opts')}`). Seconds are simulated, from "
             "each phase's start marker to its end marker; in brackets, the change against linear "
             "(+ slower, - faster).", ""]
    for key, what in (("phases_s", "Span seconds per phase (what a user waits for, recorded think time included)"),
                      ("phases_busy_s", "Disk-busy seconds per phase (at least one request outstanding)")):
        base = rows["linear"][key]
        lines += [what + ":", "", "| stack | " + " | ".join(names) + " |", "| --- |" + " ---: |" * len(names)]
        for name, r in rows.items():
            lines.append(f"| {name} | " + " | ".join(
                f"{r[key][n]:.2f}" + ("" if name == "linear" or not base[n] else
                                      f" ({(r[key][n] / base[n] - 1) * 100:+.0f}%)") for n in names) + " |")
        lines.append("")
    lines += [f"Bound: {bound['phase']}'s {bound['requests']} reads in their own requests, laid end to end in "
              f"order, take {bound['busy_s']:.2f} s on the same model (the WD800 model charges 0.2 ms of controller "
              f"overhead per command); with linear's think time in that phase ({bound['think_s']:.2f} s, kept by "
              f"the closed-loop replay) a perfect layout's span would be about "
              f"{bound['busy_s'] + bound['think_s']:.2f} s.", ""]
    lines += ["Replica counters at the end of the replay:", "",
              "| stack | replicas created (blocks) | used (blocks) | reads from replicas | reclaimed (blocks) |",
              "| --- | ---: | ---: | ---: | ---: |"]
    for name, r in rows.items():
        c = r["counters"]
        if c:
            lines.append(f"| {name} | {c.get('replicas_created_blocks', '-')} | {c.get('replicas_used_blocks', '-')} "
                         f"| {c.get('reads_replica_count', '-')} | {c.get('replicas_reclaimed_blocks', '-')} |")
    lines.append("")
    lines += breakdown_lines(rows, names)
    write_keeping_notes(os.path.join(a.out, "README.md"), lines)


if __name__ == "__main__":
    main()
