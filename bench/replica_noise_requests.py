#!/usr/bin/env python3
"""Where a noise process's extra time goes, request by request: the noise
run of bench/replica_postmark.py (thesis Figure 5.5: the capture as process
1, a random 4 KiB read per process-1 read as process 2) replayed with plain
linear and with a replica stack, the second time also with the trace layer
below the replica layer (its lower requests). Process 2's requests are the
same in both replays (matched by their index); each one's response is set
against plain and grouped by the lower writes in flight while it waited
(replica writes, metadata writes at the volume's end, upper writes), or
none; reads answered without any lower request are counted apart.

Usage: bench/replica_noise_requests.py [--layoutd PATH] [--capture DIR]
       [--stack NAME] [--phase N]
(stack names as in bench/replica_postmark.py; phase N = the N-th phase of
the capture, 1 = read-1). Prints one table; simulated time, deterministic.
"""
import argparse
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
    a = ap.parse_args()
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


if __name__ == "__main__":
    main()
