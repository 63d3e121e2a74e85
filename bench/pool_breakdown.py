#!/usr/bin/env python3
"""Where a phase's disk time goes below the pool (bench/pool_kernel.py's
replay, one stack): the same closed-loop replay twice, once with the
`trace` layer above the pool (the phase's window, as pool_kernel.py cuts
it) and once with it moved under the pool (every lower request). Each
lower request of the window gets its exclusive disk time (completion
minus the later of its submission and the previous completion: the arm
serves one at a time) and a kind:

  meta-flush    a flush (a pool commit's, or the file system's passed down)
  meta-journal  a write to the metadata area (journal blocks, FUA)
  meta-ckpt     a non-FUA write to the metadata area (a checkpoint)
  copy-read     a data-area read inside an upper write (copy-on-write)
  copy-write    a data-area write that follows a copy read in the same
                upper write, before its commit (the copy)
  data-write    any other data-area write (the upper write's own data)
  zeroes        write-zeroes (the rest of a fresh chunk)
  data-read     a data-area read inside an upper read
  background    anything submitted while no upper request was outstanding

Each upper write is also classed by what went down for it (cow: a copy
read and a flush; fresh: write-zeroes; plain). Deterministic.

With --seeks, also where the phase's lower requests position (in the
order the disk serves them): each request's distance from the end of
the one before, in chunks, bucketed (in line, a read-through's skip of
1-2 chunks, near forward/back up to 64 chunks, far), with count and
exclusive disk time, split by whether it lands in the origin's area
(the first volume_size of the data area: `contiguous`'s homes) or
beyond it (`contiguous`'s copy area).

With --delta, also the same stream through plain `linear` (no pool),
and each upper request's latency there and here side by side (the
stream is the same request for request), summed by what the pool sent
down for it: a flush (the pool's commit), a write or read with a lower
request away from its lc's home (a redirected or copied chunk), one
wholly at home (a read split by the placement's layout, or after the
arm went away), or none of its own (joined with another's). Latency
sums count overlapping requests twice, so they exceed busy time; the
classes say where the difference goes, not how much busy time it is.

With --phase-counters, the pool's counters over the phase alone (two
more replays, cut at the phase's first and last marker).

Usage: bench/pool_breakdown.py STACK [--phase build] [--disk wd800] [--set KEY=VALUE ...] [--seeks]
         [--same-stream] [--delta] [--phase-counters] [--capture DIR]
  STACK: a name in bench/workloads/pool/kernel/ (contiguous, nearest, ...)
  --set: pool keys added to (or replacing) the stack's, e.g. --set chunk_size=16KiB
"""
import argparse
import collections
import json
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench/harness"))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import tracefile  # noqa: E402
import pool_kernel  # noqa: E402
import pool_same_stream  # noqa: E402

CAPTURE = os.path.join(ROOT, "bench/results/pool/kernel-ext4")


def configs(stack, sets, out):
    """(above, under): the stack's config with the pool keys of `sets`, the
    trace layer on top / moved under the pool."""
    text = open(os.path.join(pool_kernel.STACK_DIR, stack + ".toml")).read()
    layers = re.split(r"(?m)^(?=\[\[layer\]\])", text)
    head, layers = layers[0], layers[1:]
    for k, v in sets:
        i = next(i for i, l in enumerate(layers) if 'target = "pool"' in l)
        body = re.sub(rf"(?m)^{re.escape(k)} = .*\n", "", layers[i]).rstrip("\n")
        quoted = v if re.fullmatch(r"\d+|true|false", v) else f'"{v}"'
        layers[i] = body + f"\n{k} = {quoted}\n\n"
    assert 'target = "trace"' in layers[0], "the stack's top layer is the trace"
    # Under the pool (a stack with no pool: the same as above).
    under = layers[1:2] + layers[0:1] + layers[2:] if any('"pool"' in l for l in layers) else layers
    paths = []
    for name, ls in (("above", layers), ("under", under)):
        if ls is layers and name == "under":
            return paths + paths
        p = f"{out}-{name}.toml"
        with open(p, "w") as f:
            f.write(head + "".join(ls))
        paths.append(p)
    return paths


def run(l, trace, config, disk, msgs, rec, js, sched=()):
    cmd = [l, "sim", "--trace", trace, "--format", "layoutd", "--no-stream-detect", "--config", config,
           "--disk", disk, "--closed-loop", "--no-progress", "--record-trace", rec, "--json", js, *sched,
           *[f"--message=@{n}:{t}" for n, t in msgs]]
    subprocess.run(cmd, check=True, capture_output=True)
    return json.load(open(js))


def size_of(text, key, default):
    m = re.search(rf'(?m)^{key} = "?(\d+)(KiB|MiB|GiB)?"?', text)
    return int(m.group(1)) * {None: 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}[m.group(2)] if m else default


def seeks(lowers, excl, meta_end, config):
    """Prints the seek-distance buckets of the data-area requests (see the docs)."""
    chunk = size_of(config, "chunk_size", 64 * 2**10)
    area = meta_end + size_of(config, "volume_size", 1 << 62)
    served = sorted(lowers, key=lambda r: (r.complete, r.submit))
    rows = collections.defaultdict(lambda: [0, 0])
    prev_end = None
    for r in served:
        if r.op == "F":
            continue
        if prev_end is not None and r.off >= meta_end:
            d = (r.off - prev_end) / chunk
            if d == 0:
                b = "in line"
            elif 0 < d <= 2:
                b = "skip 1-2 chunks"
            elif 0 < d <= 64:
                b = "near forward (2-64)"
            elif -64 <= d < 0:
                b = "near back (<=64)"
            else:
                b = "far forward (>64)" if d > 0 else "far back (>64)"
            where = "origin area" if r.off < area else "beyond it"
            rows[(r.op, b, where)][0] += 1
            rows[(r.op, b, where)][1] += excl[r.line]
        elif prev_end is not None:
            rows[(r.op, "metadata", "")][0] += 1
            rows[(r.op, "metadata", "")][1] += excl[r.line]
        prev_end = r.off + r.len
    print("\n| op | distance from the request before | lands | requests | disk s | mean ms |")
    print("| --- | --- | --- | ---: | ---: | ---: |")
    for (op, b, where), (n, ns) in sorted(rows.items(), key=lambda kv: -kv[1][1]):
        print(f"| {op} | {b} | {where} | {n} | {ns / 1e9:.2f} | {ns / n / 1e6:.2f} |")


PHASE_KEYS = ["commits_partial_only_count", "origin_partial_redirects_count", "fresh_partial_chunks_count"]


def home_of(pool):
    """(home, spare): the origin's home data chunk of an lc, as
    `pool/place.rs` has it, and whether a data chunk lies where no home
    is (`sliced`'s gaps, `contiguous`'s copy area; `nearest` has none)."""
    cfg, cnt = pool["config"], pool["counters"]
    chunk = int(cfg["chunk_size"])
    data = cnt["data_bytes"] // chunk
    vol = int(cfg["volume_size"]) // chunk
    if cfg["placement"] == "sliced":
        slices, part = int(cfg["slices"]), int(cfg["slice_origin_chunks"])

        def spare(c):
            k = c * slices // data
            while (k + 1) * data // slices <= c:
                k += 1
            return c - k * data // slices >= part

        return (lambda lc: (lc // part) * data // slices + lc % part), spare
    if cfg["placement"] == "nearest":
        return (lambda lc: min(lc * data // max(vol, 1), data - 1)), (lambda c: False)
    return (lambda lc: lc), (lambda c: c >= vol)


def delta(uppers, plain, lowers, pool, meta_end):
    """Prints each upper request's latency against plain's, by class (see the docs)."""
    assert [(u.op, u.off, u.len) for u in uppers] == [(u.op, u.off, u.len) for u in plain], "not the same stream"
    chunk = int(pool["config"]["chunk_size"])
    home, spare = home_of(pool)
    served = sorted(lowers, key=lambda r: (r.complete, r.submit))
    before = {b.line: a for a, b in zip(served, served[1:])}

    def away(r, homes):
        return r.off < meta_end or (r.off - meta_end) // chunk not in homes

    def elsewhere(r):
        return r.op != "F" and (r.off < meta_end or spare((r.off - meta_end) // chunk))

    rows = collections.defaultdict(lambda: [0, 0, 0])
    i = 0
    for u, p in zip(uppers, plain):
        while i < len(lowers) and lowers[i].submit < u.submit:
            i += 1
        g = []
        while i < len(lowers) and lowers[i].submit <= u.complete:
            g.append(lowers[i])
            i += 1
        homes = {home(lc) for lc in range(u.off // chunk, (u.off + max(u.len, 1) - 1) // chunk + 1)}
        own = [r for r in g if r.op == u.op or (u.op == "W" and r.op == "Z")]
        if u.op == "F":
            c = "flush (with the pool's commit, if any)"
        elif not own:
            c = f"{u.op}: no lower request of its own (joined with another's, or zeroes)"
        elif any(away(r, homes) for r in own):
            c = f"{u.op}: a lower request away from its home (redirected / copied chunk)"
        elif before.get(own[0].line) is not None and elsewhere(before[own[0].line]):
            c = f"{u.op}: at home, right after a request to the metadata or where no home is"
        else:
            c = f"{u.op}: at home"
        row = rows[c]
        row[0] += 1
        row[1] += u.complete - u.submit
        row[2] += p.complete - p.submit
    print("\n| upper request (pool) | requests | latency s, pool | latency s, plain | difference s |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for c, (n, a, b) in sorted(rows.items(), key=lambda kv: -(kv[1][1] - kv[1][2])):
        print(f"| {c} | {n} | {a / 1e9:.2f} | {b / 1e9:.2f} | {(a - b) / 1e9:+.2f} |")
    a, b = sum(r[1] for r in rows.values()), sum(r[2] for r in rows.values())
    print(f"| total | {sum(r[0] for r in rows.values())} | {a / 1e9:.2f} | {b / 1e9:.2f} | {(a - b) / 1e9:+.2f} |")


def phase_counters(l, trace, config, disk, msgs, sched, window, eb, base):
    """The pool's counters at the phase's first and last marker read: the trace cut there, replayed."""
    import gzip
    lines = gzip.open(trace, "rt").read().splitlines(True)
    mk = tracefile.markers(trace, eb)
    out = []
    for m in window:
        stop = mk[m]["line"]
        cut = f"{base}-cut.trace.gz"
        with gzip.open(cut, "wt") as f:
            f.writelines(lines[:stop])
        n = sum(1 for x in lines[:stop] if not x.startswith("#"))
        j = run(l, cut, config, disk, [(k, t) for k, t in msgs if k < n], base + "-cut.rec", base + "-cut.json", sched)
        out.append(next(x["counters"] for x in j["stack"]["layers"] if x["target"] == "pool"))
        os.unlink(cut)
        os.unlink(base + "-cut.rec")
    return {k: v - out[0].get(k, 0) for k, v in out[1].items() if isinstance(v, int)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("stack")
    ap.add_argument("--phase", default="build")
    ap.add_argument("--disk", default="wd800")
    ap.add_argument("--set", action="append", default=[], help="KEY=VALUE pool key")
    ap.add_argument("--keep", action="store_true", help="keep the two record files (TMP/breakdown-*.rec)")
    ap.add_argument("--seeks", action="store_true", help="also bucket the lower requests by seek distance")
    ap.add_argument("--same-stream", action="store_true",
                    help="replay as bench/pool_same_stream.py does: the capture's origin requests only, fifo, "
                         "depth 1 (the emulator's model), the snapshot messages where its pool runs made them")
    ap.add_argument("--delta", action="store_true", help="also each upper request against plain's (see the docs)")
    ap.add_argument("--phase-counters", action="store_true", help="the pool's counters over the phase alone")
    ap.add_argument("--capture", default=CAPTURE,
                    help="the captured run (DIR/trace.gz, DIR/result.json; default: %(default)s); a live run of "
                         "bench/results/pool/live-kernel-* works too (its snapshot operations are in result.json)")
    a = ap.parse_args()
    sets = [s.split("=", 1) for s in a.set]
    os.makedirs(pool_kernel.TMP, exist_ok=True)
    l = pool_kernel.layoutd()
    tracefile.use(l)
    name = os.path.basename(os.path.normpath(a.capture))
    result = json.load(open(os.path.join(a.capture, "result.json")))
    eb = result["rig"]["export_bytes"]
    sched = ()
    if a.same_stream:
        trace = os.path.join(pool_kernel.TMP, f"{name}.origin.trace.gz")
        pool_same_stream.origin_stream(os.path.join(a.capture, "trace.gz"), trace, eb)
        msgs = tracefile.messages(trace, eb, pool_same_stream.phases_with_messages(result))
        sched = ("--scheduler", "fifo", "--queue-depth", "1")
    else:
        trace = tracefile.one_stream(os.path.join(a.capture, "trace.gz"),
                                     os.path.join(pool_kernel.TMP, f"{name}.trace.gz"))
        msgs = pool_kernel.messages(trace, result)
    base = os.path.join(pool_kernel.TMP, f"breakdown-{name}-{a.stack}-{a.disk}")
    above, under = configs(a.stack, sets, base)
    if above == under or "pool" not in open(above).read():
        msgs = []  # no pool: no snapshot operations (as pool_kernel.py's plain)
    run(l, trace, above, a.disk, msgs, base + "-above.rec", base + "-above.json", sched)
    j = run(l, trace, under, a.disk, msgs, base + "-under.rec", base + "-under.json", sched)
    ph = next(p for p in result["phases"] if p["name"] == a.phase)
    uppers = tracefile.read(base + "-above.rec", eb, ph["markers"])
    lowers = tracefile.read(base + "-under.rec")
    pool = next((x["counters"] for x in j["stack"]["layers"] if x["target"] == "pool"), {})
    meta_end = pool.get("metadata_area_bytes", 0)
    t0, t1 = min(u.submit for u in uppers), max(u.complete for u in uppers)
    lowers = sorted((r for r in lowers if t0 <= r.submit <= t1), key=lambda r: (r.complete, r.submit))
    excl, prev = {}, t0
    for r in lowers:
        excl[r.line] = max(0, r.complete - max(r.submit, prev))
        prev = max(prev, r.complete)
    lowers.sort(key=lambda r: (r.submit, r.line))
    uppers.sort(key=lambda u: u.submit)
    kinds = collections.defaultdict(lambda: [0, 0, 0])  # count, bytes, ns
    classes = collections.defaultdict(lambda: [0, 0])  # count, ns of the upper request
    i = 0
    groups = []
    for u in uppers:
        while i < len(lowers) and lowers[i].submit < u.submit:
            groups.append((None, [lowers[i]]))
            i += 1
        g = []
        while i < len(lowers) and lowers[i].submit <= u.complete:
            g.append(lowers[i])
            i += 1
        groups.append((u, g))
    groups += [(None, [r]) for r in lowers[i:]]
    # A copy's write is issued the instant its read completes (the pool
    # takes no simulated time): same length, chunk-aligned, elsewhere.
    by_submit = collections.defaultdict(list)
    for r in lowers:
        by_submit[r.submit].append(r)
    copies = set()
    for r in lowers:
        if r.op == "R" and r.off >= meta_end:
            w = next((w for w in by_submit[r.complete] if w.op == "W" and w.len == r.len and w.off != r.off), None)
            if w is not None:
                copies |= {r.line, w.line}
    for u, g in groups:
        for r in g:
            meta = r.off < meta_end
            if r.op == "F":
                k = "meta-flush"
            elif meta:
                k = "meta-journal" if r.fua else "meta-ckpt"
            elif r.line in copies:
                k = "copy-read" if r.op == "R" else "copy-write"
            elif u is None:
                k = "background-" + r.op
            elif r.op == "Z":
                k = "zeroes"
            elif r.op == "R":
                k = "data-read"
            elif r.op == "W":
                k = "data-write"
            else:
                k = "other-" + r.op
            kinds[k][0] += 1
            kinds[k][1] += r.len
            kinds[k][2] += excl[r.line]
        if u is not None:
            ops = {r.op for r in g}
            cow = any(r.line in copies for r in g)
            c = ("cow" if cow else "fresh" if "Z" in ops else "commit" if "F" in ops else "plain") + "-" + u.op
            classes[c][0] += 1
            classes[c][1] += u.complete - u.submit
    busy = sum(u.complete - u.submit for u in uppers)
    print(f"{a.stack} {' '.join(a.set)} phase {a.phase}: {len(uppers)} upper requests, busy {busy / 1e9:.2f} s, "
          f"{len(lowers)} lower requests")
    print("| kind | requests | MiB | disk s | share |")
    print("| --- | ---: | ---: | ---: | ---: |")
    tot = sum(v[2] for v in kinds.values())
    for k, (n, b, ns) in sorted(kinds.items(), key=lambda kv: -kv[1][2]):
        print(f"| {k} | {n} | {b / 2**20:.1f} | {ns / 1e9:.2f} | {ns / tot * 100:.1f}% |")
    print(f"| total | {sum(v[0] for v in kinds.values())} | | {tot / 1e9:.2f} | |")
    print()
    print("| upper class | requests | busy s | mean ms |")
    print("| --- | ---: | ---: | ---: |")
    for c, (n, ns) in sorted(classes.items(), key=lambda kv: -kv[1][1]):
        print(f"| {c} | {n} | {ns / 1e9:.2f} | {ns / n / 1e6:.2f} |")
    if a.seeks:
        seeks(lowers, excl, meta_end, open(under).read())
    keys = ["chunks_copied_count", "commits_count", "journal_blocks_written_count", "checkpoints_count",
            "full_overwrite_read_skipped_count", "origin_redirected_chunks_count", "partial_chunks_count",
            "chunks_filled_count", "defrag_moves_count", "partial_chunks_composed_home_count", "origin_jumps_count"]
    print("\ncounters (whole run): " + ", ".join(f"{k}={pool.get(k)}" for k in keys))
    pool_layer = next((x for x in j["stack"]["layers"] if x["target"] == "pool"), None)
    if a.delta and pool_layer is not None:
        pabove, _ = configs("plain", [], base + "-plain")
        run(l, trace, pabove, a.disk, [], base + "-plain.rec", base + "-plain.json", sched)
        plain = sorted(tracefile.read(base + "-plain.rec", eb, ph["markers"]), key=lambda u: (u.submit, u.line))
        delta(sorted(uppers, key=lambda u: (u.submit, u.line)), plain, lowers, pool_layer, meta_end)
        os.unlink(base + "-plain.rec")
    if a.phase_counters and pool_layer is not None:
        c = phase_counters(l, trace, under, a.disk, msgs, sched, ph["markers"], eb, base)
        print(f"\ncounters over the phase: " + ", ".join(f"{k}={c.get(k)}" for k in keys + PHASE_KEYS))
    for ext in () if a.keep else ("-above.rec", "-under.rec"):
        os.unlink(base + ext)


if __name__ == "__main__":
    main()
