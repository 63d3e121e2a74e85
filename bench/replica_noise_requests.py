#!/usr/bin/env python3
"""Where a noise process's extra time goes, request by request: the noise
run of bench/replica_postmark.py (thesis Figure 5.5: the capture as process
1, a random 4 KiB read per process-1 read as process 2) replayed with plain
linear and with a replica stack, the second time also with the trace layer
below the replica layer (its lower requests). Process 2's requests are the
same in both replays (matched by their index); each one's response is set
against plain and grouped by the lower writes in flight while it waited
(replica writes, metadata writes at the volume's end, upper writes), or
none; reads answered without any lower request are counted apart. A
second table splits each request's response by what the disk served while
it waited (its own read, process 1's reads of originals and of replicas,
replica writes, upper writes, metadata writes), per request, against
plain, with the own read's mean seek distance.

Usage: bench/replica_noise_requests.py [--layoutd PATH] [--capture DIR]
       [--stack NAME] [--phase N] [--stream-detect] [--fifo]
(stack names as in bench/replica_postmark.py; phase N = the N-th phase of
the capture, 1 = read-1). Prints two tables; simulated time, deterministic.
"""
import argparse
import bisect
import collections
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import replica_postmark as rp  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layoutd", default=os.path.join(rp.HERE, "..", "target", "release", "layoutd"))
    ap.add_argument("--capture", default=rp.CAPTURE)
    ap.add_argument("--stack", default=rp.GOAL_STACK)
    ap.add_argument("--phase", type=int, default=1)
    ap.add_argument("--stream-detect", action="store_true", help="as bench/replica_postmark.py --stream-detect")
    ap.add_argument("--fifo", action="store_true",
                    help="the disk serves one request at a time in arrival order, as the live emulator "
                         "(default: the simulator's CLOOK, depth 32, as bench/replica_postmark.py)")
    a = ap.parse_args()
    if a.stream_detect:
        rp.SIM_ARGS.append("--stream-detect")
    if a.fifo:
        rp.SIM_ARGS.extend(["--scheduler", "fifo", "--queue-depth", "1"])
    with open(os.path.join(a.capture, "result.json")) as f:
        meta = json.load(f)
    markers = [m["offset"] for m in meta["markers"]]
    names = [p["name"] for p in meta["phases"]]
    extra = dict(rp.STACKS)[a.stack]
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "noise.trace")
        rp.noise_trace(os.path.join(a.capture, "trace.gz"), markers, path)
        _, plain = rp.sim(a.layoutd, path, rp.STACKS[0][1], tmp, "plain", streams=True)
        _, upper = rp.sim(a.layoutd, path, rp.config(extra), tmp, "upper", streams=True)
        below = "version = 1\n[[layer]]\ntarget = \"replica\"\n" + extra + "[[layer]]\ntarget = \"trace\"\n"
        _, lower = rp.sim(a.layoutd, path, below, tmp, "lower", streams=True)
    # The simulator numbers streams itself: process 1 reads the markers.
    first = next(r[5] for r in upper if r[2] == "R" and r[3] == markers[0])
    second = collections.Counter(r[5] for r in upper if r[2] == "R" and r[5] != first).most_common(1)[0][0]
    mine = [r for r in upper if r[5] == second and r[2] == "R"]
    theirs = [r for r in plain if r[5] == second and r[2] == "R"]
    assert [r[3] for r in mine] == [r[3] for r in theirs], "process 2's requests differ between the replays"
    at = rp.marker_times([r[:5] for r in upper], markers)
    lo, hi = at[markers[2 * a.phase]][1], at[markers[2 * a.phase + 1]][0]
    volume = max(r[3] + r[4] for r in upper)
    upper_writes = [(r[3], r[3] + r[4]) for r in upper if r[2] in ("W", "Z")]

    def kind(r):
        if r[3] >= volume:
            return "metadata write"
        if any(s <= r[3] < e for s, e in upper_writes):
            return "upper write"
        return "replica write"

    writes = [(r[0], r[1], kind(r)) for r in lower if r[2] in ("W", "Z", "T")]
    issued = {r[0] for r in lower if r[5] == second and r[2] == "R"}
    groups = collections.defaultdict(lambda: [0, 0.0, 0.0])
    for m, t in zip(mine, theirs):
        if not lo <= m[0] < hi:
            continue
        met = sorted({k for s, c, k in writes if s < m[1] and c > m[0]})
        key = " + ".join(met) if met else ("none, no lower request" if m[0] not in issued else "none")
        g = groups[key]
        g[0] += 1
        g[1] += (m[1] - m[0]) / 1e6
        g[2] += (t[1] - t[0]) / 1e6
    print(f"{a.capture}, {a.stack}, {names[a.phase]}: process 2's requests by the lower writes in flight while they waited")
    print("| in flight | requests | mean ms | plain mean ms | sum against plain s |")
    print("| --- | ---: | ---: | ---: | ---: |")
    total = [0, 0.0, 0.0]
    for key, (n, ms, plain_ms) in sorted(groups.items()):
        print(f"| {key} | {n} | {ms / n:.2f} | {plain_ms / n:.2f} | {(ms - plain_ms) / 1e3:+.2f} |")
        total = [total[0] + n, total[1] + ms, total[2] + plain_ms]
    print(f"| all | {total[0]} | {total[1] / total[0]:.3f} | {total[2] / total[0]:.3f} | {(total[1] - total[2]) / 1e3:+.2f} |")
    print()
    where_it_went(plain, lower, upper, second, lo, hi, volume, upper_writes)


def served(records):
    """Each lower request's service interval on the one-armed disk: from
    the later of its submission and the previous completion to its own
    completion (records: submit, complete, op, offset, length, stream)."""
    out, prev = [], 0
    for r in sorted(records, key=lambda r: (r[1], r[0])):
        start = max(r[0], prev)
        out.append((start, r[1]) + tuple(r[2:]))
        prev = r[1]
    return out


def where_it_went(plain, lower, upper, second, lo, hi, volume, upper_writes):
    """Process 2's response time split by what the disk served while it
    waited: its own read, process 1's reads (of originals, of replicas),
    replica writes, upper writes (atime inode blocks, journal), metadata
    writes, or nothing (time in the layer); with its own read's mean seek
    distance from the request served before it. Plain: the linear replay
    (linear is 1:1, its upper requests are its lower ones)."""
    # The stream id process 2's reads carry below: that of the lower reads
    # completing its requests.
    ends = {r[1] for r in upper if r[5] == second and r[2] == "R"}
    p2_lower = collections.Counter(r[5] for r in lower if r[2] == "R" and r[1] in ends).most_common(1)[0][0]
    p1_blocks = {b for r in upper if r[5] != second and r[2] == "R" for b in range(r[3] >> 12, (r[3] + r[4] + 4095) >> 12)}

    def kind(r, own, p2):
        if own:
            return "own read"
        if r[2] == "R":
            who = "process 2, another lower read" if r[5] == p2 else "process 1"
            inside = all(b in p1_blocks for b in range(r[3] >> 12, (r[3] + r[4] + 4095) >> 12))
            return f"{who}: " + ("read of originals" if inside else "replica read")
        if r[2] == "F":
            return "flush"
        if r[3] >= volume:
            return "metadata write"
        if any(s <= r[3] < e for s, e in upper_writes):
            return "upper write (atime, journal)"
        return "replica write"

    def split(reqs, below, keep, p2):
        srv = served(below)
        starts = [s for s, *_ in srv]
        sums = collections.defaultdict(float)
        dist, ndist = 0, 0
        for j, (a, c, _, off, _, _) in enumerate(reqs):
            if j not in keep:
                continue
            busy = 0.0
            i = max(0, bisect.bisect_right(starts, a) - 1)
            while i < len(srv) and srv[i][0] < c:
                s, e, op, o, l, st = srv[i]
                ov = min(e, c) - max(s, a)
                if ov > 0:
                    # Its own lower read completes it (a replica read or a
                    # read-ahead if it was served from a replica).
                    k = kind(srv[i], op == "R" and e == c and a <= s, p2)
                    sums[k] += ov / 1e6
                    busy += ov / 1e6
                    if k == "own read" and i > 0:
                        pe = srv[i - 1][3] + srv[i - 1][4]
                        dist += abs(o - pe) >> 12
                        ndist += 1
                i += 1
            sums["nothing (in the layer, or the disk idle)"] += (c - a) / 1e6 - busy
        return sums, (dist / ndist if ndist else 0.0)

    mine = [r for r in upper if r[5] == second and r[2] == "R"]
    theirs = [r for r in plain if r[5] == second and r[2] == "R"]
    keep = {j for j, r in enumerate(mine) if lo <= r[0] < hi}
    n = len(keep)
    s_stack, d_stack = split(mine, lower, keep, p2_lower)
    s_plain, d_plain = split(theirs, plain, keep, second)
    print("Process 2's response by what the disk served while it waited (per request, ms):")
    print("| served | plain | stack | difference |")
    print("| --- | ---: | ---: | ---: |")
    for k in sorted(set(s_stack) | set(s_plain)):
        print(f"| {k} | {s_plain[k] / n:.3f} | {s_stack[k] / n:.3f} | {(s_stack[k] - s_plain[k]) / n:+.3f} |")
    print(f"| all | {sum(s_plain.values()) / n:.3f} | {sum(s_stack.values()) / n:.3f} | "
          f"{(sum(s_stack.values()) - sum(s_plain.values())) / n:+.3f} |")
    print(f"own read's mean seek distance from the request before it (blocks): plain {d_plain:.0f}, stack {d_stack:.0f}")


if __name__ == "__main__":
    main()
