#!/usr/bin/env python3
"""Why a stream seeks within the OPT region (issue 15; bench/results/opt/
README.md, "What is left at S = 0.5"): replays a variation trace of
`opt_variation.py` through CONFIG with `trace` layers above and below `opt`
(as `opt_phases.py`), takes every held-out read served wholly from the
region whose disk head came from the region more than 1 MiB away (the
class "OPT: seek within the region" of `opt_phases.py`), and classes the
ones that follow a read of the same stream by what the program's earlier
runs (the generator's tags name the program, `opt_desktop.py --tags`) did
with the seek's two ends, the previous read's last block and the current
read's first:

- not the program's: no earlier run of the program requested the block
  the seek lands on (or leaves); the last column says how often another
  program's run requested it before (a shared library whose copies lie in
  that program's sequence: under a page cache, whichever program reads a
  library first in a day makes the request, and its read-ahead window
  starts where the cache ends);
- laid out apart: an earlier run read the two ends one right after the
  other (the transition was in the profile), yet the region has them more
  than 1 MiB apart; told apart by where that earlier run read them (both
  from the region next to each other: the copies this run read are
  others; both from the region apart; one from home);
- skipped between: an earlier run read them in this order with requests
  between whose blocks this run never requested: skipped by this run
  (`--skip`), or cached because another program read them first today;
- other order: an earlier run read the two ends the other way round, or
  with blocks between that this run reads elsewhere;
- not read together in one earlier run: each end by a different one.

Each class: requests, I/O time (the requests' response times), how many
seek backwards, and how many land on a block another program's run
requested before. The seeks that follow another stream's request (a run's
first read) are counted apart.

    opt_seeks.py CONFIG VARIATION SEED... [--layoutd PATH] [--continuous MS] [--place]
        (e.g. bench/results/opt/opt-relay.toml 0.5 1 2 3 4 --continuous 1024)

Without `--continuous`: one plan after day 1, as `opt_phases.py`. With
`--place`: the region where `layoutd opt place` puts it from day 1's reads
(as `opt_variation.py --place`).
"""
import argparse
import collections
import tempfile

import opt_phases
import opt_variation

MIB_BLOCKS = 256


def classify(trace_rows, tags, up, down, region=(opt_phases.OPT0, opt_phases.OPT1)):
    """Counts per class: [requests, ms, backwards, landing on another
    program's block]; `region`: the OPT region's lower bytes."""
    # The up record's requests are the trace's, in its order (a
    # closed-loop replay shifts the times, not the order); the stream is
    # the trace's.
    pieces = collections.defaultdict(list)
    for r in opt_phases.load_streams(down):
        pieces[r[0]].append(r)
    ups = sorted(opt_phases.load_streams(up))
    assert len(ups) == len(trace_rows), "the up record is not the trace's"
    reqs = []  # (trace index, up row with the trace's stream, pieces)
    for i, r in enumerate(ups):
        assert trace_rows[i][3:] == r[3:], f"up row {r} is not trace row {trace_rows[i]}"
        reqs.append((i, r[:2] + (trace_rows[i][2],) + r[3:], pieces.get(r[0], [])))
    # Each program's earlier runs: stream -> list of (block set, first block)
    # in order; and when each block was first requested each day.
    prog_of = {}
    runs = collections.defaultdict(list)  # program -> [stream, ...] in order
    for i, r in enumerate(trace_rows):
        kind, prog = tags[i]
        if r[2] not in prog_of:
            prog_of[r[2]] = prog
            runs[prog].append(r[2])
    reads_of = collections.defaultdict(list)  # stream -> [block sets of its reads, in order]
    for r in trace_rows:
        if r[3] == "R":
            reads_of[r[2]].append(set(opt_phases.blocks(r[4], r[5])))
    day_read = collections.defaultdict(set)  # day -> blocks requested so far (grows as we go)
    c = collections.defaultdict(lambda: [0, 0.0, 0, 0])
    last_piece = None  # (stream, lower end)
    last_of = {}  # stream -> (block set of its previous read, slot end)
    o0, o1 = region
    # Where each read of each stream was served: stream -> [(first lower
    # byte, last) or None (from home, wholly or in part)], in order.
    served = collections.defaultdict(list)
    for i, r, ps in reqs:
        t, done, stream, op, off, n = r
        bs = set(opt_phases.blocks(off, n))
        day = int(trace_rows[i][0] // opt_phases.DAY_NS)
        held_out = t >= opt_phases.DAY_NS
        if held_out and op == "R" and ps and all(o0 <= p[4] < o1 for p in ps) and last_piece is not None:
            from_stream, head = last_piece
            if o0 <= head < o1 and abs(ps[0][4] - head) > MIB_BLOCKS * 4096:
                back = ps[0][4] < head
                if from_stream != stream or stream not in last_of:
                    k = "another stream's request before"
                else:
                    k = cause(last_of[stream], bs, stream, prog_of, runs, reads_of, day_read[day], served)
                c[k][0] += 1
                c[k][1] += (done - t) / 1e6
                c[k][2] += back
                c[k][3] += others_read(min(bs), stream, prog_of, reads_of)
        if op == "R":
            day_read[day] |= bs
            last_of[stream] = bs
            in_opt = bool(ps) and all(o0 <= p[4] < o1 for p in ps)
            served[stream].append((ps[0][4], ps[-1][4] + ps[-1][5]) if in_opt else None)
        if ps:
            last_piece = (stream, ps[-1][4] + ps[-1][5])
    return c


def others_read(block, stream, prog_of, reads_of):
    """Whether a run of another program before `stream` requested `block`
    (streams are numbered in the order the runs start)."""
    return any(int(s) < int(stream) and prog_of[s] != prog_of[stream] and any(block in b for b in rs)
               for s, rs in reads_of.items())


def cause(prev, cur, stream, prog_of, runs, reads_of, read_today, served):
    """The class of a seek from the stream's read `prev` (block set) to
    `cur`, from what the program's earlier runs did."""
    # The seek goes from the previous read's last block to the current
    # one's first: an earlier run that read other blocks of the same files
    # (a read-ahead window placed otherwise) did not read this transition.
    prev, cur = {max(prev)}, {min(cur)}
    prog = prog_of[stream]
    earlier = [s for s in runs[prog][: runs[prog].index(stream)]]
    mine = set().union(*reads_of[stream])
    seen_prev = seen_cur = False
    kinds = set()
    for s in earlier:
        rs = reads_of[s]
        ip = [j for j, b in enumerate(rs) if b & prev]
        ic = [j for j, b in enumerate(rs) if b & cur]
        seen_prev |= bool(ip)
        seen_cur |= bool(ic)
        if not ip or not ic:
            continue
        # The nearest pair of positions in that run.
        j, k = min(((j, k) for j in ip for k in ic), key=lambda jk: abs(jk[1] - jk[0]))
        if k == j + 1 or k == j:
            kinds.add(apart(served[s], j, k))
        elif k > j:
            between = set().union(*rs[j + 1:k]) - prev - cur
            if between & mine:
                kinds.add("other order (blocks between read elsewhere in this run)")
            elif between <= read_today:
                kinds.add("skipped between: cached (another program read them today)")
            else:
                kinds.add("skipped between: not requested by this run")
        else:
            kinds.add("other order (read the other way before)")
    if not seen_cur:
        return "not the program's: the current read" + (" (nor the previous)" if not seen_prev else "")
    if not seen_prev:
        return "not the program's: the previous read"
    if not kinds:
        return "not read together in one earlier run"
    for k in APART + ["skipped between: not requested by this run",
              "skipped between: cached (another program read them today)",
              "other order (blocks between read elsewhere in this run)", "other order (read the other way before)"]:
        if k in kinds:
            return k
    raise AssertionError(kinds)


APART = [
    "laid out apart: the earlier run read both from the region, one right after the other there",
    "laid out apart: the earlier run read both from the region, apart there too",
    "laid out apart: the earlier run read one or both from home (or not yet served)",
]


def apart(served, j, k):
    """The sub-class of a pair an earlier run read one right after the
    other (its `j`-th and `k`-th reads; `served`: where its reads were
    served, as far as they were by now)."""
    if k >= len(served) or served[j] is None or served[k] is None:
        return APART[2]
    if abs(served[k][0] - served[j][1]) <= MIB_BLOCKS * 4096:
        return APART[0]
    return APART[1]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("config")
    ap.add_argument("variation", type=float)
    ap.add_argument("seeds", type=int, nargs="+")
    ap.add_argument("--layoutd", default="target/release/layoutd")
    ap.add_argument("--continuous", type=int, metavar="MS")
    ap.add_argument("--place", action="store_true", help="the region placed from each trace's day 1")
    a = ap.parse_args()
    total = collections.defaultdict(lambda: [0, 0.0, 0, 0])
    for seed in a.seeds:
        d = opt_variation.trace_dir(a.variation, seed)
        trace = f"{d}/desktop-4days.trace.gz"
        plan_ms = open(f"{d}/desktop-4days.plan-times").readline().strip()
        with tempfile.TemporaryDirectory() as out:
            config, region = a.config, (opt_phases.OPT0, opt_phases.OPT1)
            if a.place:
                config, _, at = opt_variation.placed(a.layoutd, config, trace, plan_ms, out)
                region = (at, at + (1 << 30))
            if a.continuous is not None:
                config, plan_ms = opt_phases.continuous_config(config, a.continuous, out), None
            rows = opt_phases.load_streams(trace)
            tags = opt_variation.tags_of(a.variation, seed, out, len(rows))
            up, down = opt_phases.run(a.layoutd, config, trace, plan_ms, out)
            for k, v in classify(rows, tags, up, down, region).items():
                for x in range(4):
                    total[k][x] += v[x]
    n = sum(v[0] for v in total.values())
    ms = sum(v[1] for v in total.values())
    mode = f"continuous every {a.continuous} ms" if a.continuous is not None else "one plan after day 1"
    mode += ", the region placed from day 1's reads" if a.place else ""
    print(f"Seeks within the OPT region, held-out days ({a.config}, {mode}, variation {a.variation:g}, "
          f"seeds {' '.join(map(str, a.seeds))} summed): {n} requests, {ms / 1000:.2f} s")
    print()
    print("| cause | requests | I/O time | share | backwards | landing on another program's block |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for k, (cnt, t, back, other) in sorted(total.items(), key=lambda kv: -kv[1][1]):
        print(f"| {k} | {cnt} | {t / 1000:.2f} s | {100 * t / ms:.0f}% | {back} | {other} |")


if __name__ == "__main__":
    main()
