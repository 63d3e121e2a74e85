#!/usr/bin/env python3
"""Where the held-out I/O time of the `opt` benchmark goes
(bench/results/opt/README.md): replays a seed's 4-day trace with one plan
after day 1 through the `opt` stack of CONFIG twice, with a `trace` layer
above `opt` (each request's response time) and one below (its lower
pieces), joins each request of days 2-4 to its pieces and classes it by
where it went (OPT region, home, split) and where the disk head came from
(the previous request's last piece): going on within 1 MiB in the region,
a seek within the region, a seek into it from home, home reads of blocks
the training day read or never read (after an OPT read: the seek back),
writes and flushes. Prints each class's count, mean and share of the
days' I/O time.

    opt_phases.py CONFIG TRACE_DIR [LAYOUTD] [--continuous MS]
        (e.g. bench/results/opt/opt.toml bench/traces/opt)

`--continuous MS`: CONFIG (which plans only when told) planning on its own
every MS of virtual time, in idle time, instead of once after day 1.
"""
import collections
import gzip
import os
import subprocess
import sys
import tempfile

DAY_NS = 65.536e9
OPT0, OPT1 = 37 << 30, 38 << 30  # the region of bench/results/opt/opt.toml


def load_streams(path):
    """(submit ns, complete ns, stream, op, offset, length) of each row of
    a layoutd trace."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        rows = (line.split() for line in f if not line.startswith("#"))
        return [(int(r[0]), int(r[1]), r[2], r[3], int(r[4]), int(r[5])) for r in rows]


def load(path):
    """The rows of `load_streams` without the stream."""
    return [r[:2] + r[3:] for r in load_streams(path)]


def blocks(off, n):
    return range(off // 4096, (off + n + 4095) // 4096)


def run(layoutd, config, trace, plan_ms, out, wheres=("up", "down")):
    """Replays `trace` with `config`'s layer plus a trace layer above
    (`up`) or below (`down`), planning at `plan_ms` (none if None);
    returns the recorded trace files, in the order of `wheres`."""
    body = [l for l in open(config).read().splitlines() if not l.startswith("#") and not l.startswith("version")]
    files = {}
    plan = [] if plan_ms is None else ["--message", f"{plan_ms}ms:plan"]
    for where in wheres:
        stack = "version = 1\n"
        stack += '[[layer]]\ntarget = "trace"\n' if where == "up" else ""
        stack += "\n".join(body) + "\n"
        stack += '[[layer]]\ntarget = "trace"\n' if where == "down" else ""
        toml = os.path.join(out, f"{where}.toml")
        open(toml, "w").write(stack)
        files[where] = os.path.join(out, f"{where}.trace")
        r = subprocess.run(
            [layoutd, "sim", "--trace", trace, "--format", "layoutd", "--closed-loop", "--disk", "wd800",
             "--seed", "1", "--no-progress", "--json", os.path.join(out, f"{where}.json"), "--config", toml,
             "--record-trace", files[where]] + plan,
            capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"layoutd sim with {toml} failed:\n{r.stderr}")
    return [files[w] for w in wheres]


def classes(trace, up, down):
    seen = set()
    for t, _, op, off, n in load(trace):
        if op == "R" and t < DAY_NS:
            seen.update(blocks(off, n))
    pieces = collections.defaultdict(list)
    for r in load(down):
        pieces[r[0]].append(r)
    c = collections.defaultdict(lambda: [0, 0.0])
    last = None
    for t, done, op, off, n in load(up):
        if t < DAY_NS:
            continue
        ps = pieces.get(t, [])
        if op != "R":
            k = "writes and flushes"
        else:
            in_opt = [OPT0 <= p[3] < OPT1 for p in ps]
            from_opt = last is not None and OPT0 <= last < OPT1
            if all(in_opt):
                if from_opt and abs(ps[0][3] - last) <= 1 << 20:
                    k = "OPT: going on (within 1 MiB)"
                else:
                    k = "OPT: seek within the region" if from_opt else "OPT: seek in from home"
            elif not any(in_opt):
                trained = all(b in seen for b in blocks(off, n))
                k = "home: " + ("trained" if trained else "never trained") + (", seek back from OPT" if from_opt else "")
            else:
                k = "split OPT + home"
        c[k][0] += 1
        c[k][1] += (done - t) / 1e6
        if ps:
            last = ps[-1][3] + ps[-1][4]
    return c


def continuous_config(config, ms, out):
    """A copy of `config` (which plans only when told) in `out`, planning
    on its own every `ms` of virtual time."""
    text = open(config).read()
    assert "\nplan_interval_ms = 0\n" in text, f"{config}: plans only when told (plan_interval_ms = 0)"
    path = os.path.join(out, f"continuous-{ms}.toml")
    with open(path, "w") as f:
        f.write(text.replace("\nplan_interval_ms = 0\n", f"\nplan_interval_ms = {ms}\n"))
    return path


def main():
    # `--continuous MS` (last): CONFIG planning on its own every MS of
    # virtual time instead of once after day 1.
    every = None
    if len(sys.argv) > 2 and sys.argv[-2] == "--continuous":
        every = int(sys.argv[-1])
        del sys.argv[-2:]
    config, tdir = sys.argv[1], sys.argv[2]
    layoutd = sys.argv[3] if len(sys.argv) > 3 else "target/release/layoutd"
    trace = os.path.join(tdir, "desktop-4days.trace.gz")
    plan_ms = open(os.path.join(tdir, "desktop-4days.plan-times")).readline().strip()
    with tempfile.TemporaryDirectory() as out:
        if every is not None:
            config, plan_ms = continuous_config(config, every, out), None
        c = classes(trace, *run(layoutd, config, trace, plan_ms, out))
    total = sum(v[1] for v in c.values())
    count = sum(v[0] for v in c.values())
    print(f"{tdir}: days 2-4, {count} requests, mean {total / count:.2f} ms")
    print()
    print("| class | requests | mean | share of the I/O time |")
    print("| --- | --- | --- | --- |")
    for k, (n, ms) in sorted(c.items(), key=lambda kv: -kv[1][1]):
        print(f"| {k} | {n} | {ms / n:.2f} ms | {100 * ms / total:.1f}% |")


if __name__ == "__main__":
    main()
