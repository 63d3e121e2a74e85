#!/usr/bin/env python3
"""Two runtime event logs (LAYOUTD_EVENT_LOG: a live run's PATH.live and
its replay's PATH.sim) side by side, request by request.

Upper requests are matched by their order (a closed-loop replay of one
stream issues them in the recorded order). For each, the lower requests
emitted from its arrival to the next request's arrival (its own, and
background work in that gap) and its latency. Prints the first request
whose lower requests differ, and per window of requests the summed
latency, the lower reads, and how many lower reads continued the previous
one on disk (the disk's read-ahead serves those).

    bench/log_events_diff.py PATH.live PATH.sim [--from N] [--to N] [--window 500]
"""

import argparse


def load(path):
    """[(arrival ms, latency ms or None, [(kind, op, page, pages)])] per upper request."""
    reqs, by_id, cur = [], {}, None
    for line in open(path):
        f = line.split()
        t, k = float(f[0]), f[1]
        if k == "up":
            cur = [t, None, [], f[3]]
            by_id[f[2]] = cur
            reqs.append(cur)
        elif k == "done" and f[2] in by_id:
            r = by_id.pop(f[2])
            r[1] = t - r[0]
        elif k == "lo+" and cur is not None:
            cur[2].append((f[2], int(f[3]), int(f[4])))
    return reqs


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--from", dest="lo", type=int, default=0)
    ap.add_argument("--to", dest="hi", type=int, default=None)
    ap.add_argument("--window", type=int, default=500)
    args = ap.parse_args()
    A, B = load(args.a), load(args.b)
    n = min(len(A), len(B))
    hi = min(n, args.hi if args.hi is not None else n)
    print(f"upper requests: {len(A)} and {len(B)}; comparing {args.lo}..{hi}")
    first = next((i for i in range(args.lo, hi) if A[i][2] != B[i][2]), None)
    if first is not None:
        print(f"first request whose lower requests differ: {first} ({A[first][3]})")
        print("  a:", A[first][2][:12])
        print("  b:", B[first][2][:12])

    def stats(R, i, j):
        lat = sum(r[1] or 0 for r in R[i:j])
        reads = [x for r in R[i:j] for x in r[2] if x[0] == "Read"]
        cont = sum(1 for p, q in zip(reads, reads[1:]) if q[1] == p[1] + p[2])
        writes = sum(1 for r in R[i:j] for x in r[2] if x[0] == "Write")
        return lat, len(reads), cont, writes
    print(f"{'requests':>13} | {'a: ms':>8} {'reads':>6} {'cont':>5} {'wr':>4} | {'b: ms':>8} {'reads':>6} {'cont':>5} {'wr':>4}")
    for i in range(args.lo, hi, args.window):
        j = min(hi, i + args.window)
        sa, sb = stats(A, i, j), stats(B, i, j)
        print(f"{i:6}-{j:<6} | {sa[0]:8.0f} {sa[1]:6} {sa[2]:5} {sa[3]:4} | {sb[0]:8.0f} {sb[1]:6} {sb[2]:5} {sb[3]:4}")


if __name__ == "__main__":
    main()
