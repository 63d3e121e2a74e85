#!/usr/bin/env python3
"""RAM of the `log` target's map (issue 13: "at most 4 bytes of RAM per
4 KiB mapped block, less with extents for sequential data"), measured on
the IO TEST's ext4 captures (bench/log_iotest_fs.py; the replay half only,
deterministic): each capture replayed in `layoutd sim` on the `adaptive`
stack (bench/workloads/log/adaptive.toml) up to the start of the update
phase (the 64 KiB files created, the deleted ones trimmed) and up to the
start of the read phase (after the random 4 KiB updates), with the map's
extents (`map_extents = true`, the default) and flat (`false`). Reported
from the target's counters: map_ram_bytes per live (mapped) block, the
groups held flat, the runs.

The 1 TiB projection keeps each measured state's shape (the share of
groups flat, the runs a runs group holds) and prices it at 1 TiB exposed: 29-bit flat entries (3,712 bytes a flat
group of 1,024 blocks), 8 bytes a run, 18 bytes a group.

Usage: bench/log_map_ram.py [--utils 10,50,90,95] [--jobs 2]
Needs target/release/layoutd (cargo build --workspace --release).
Writes bench/results/log/map-ram.md and map-ram.json.
"""
import concurrent.futures
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench/harness"))
import tracefile  # noqa: E402
from log_fs import DISK  # noqa: E402
from log_iotest_fs import capture_dir  # noqa: E402
from log_sim import layoutd  # noqa: E402

OUT = os.path.join(ROOT, "bench/results/log")
TMP = os.path.join(OUT, "fs", "tmp")
STACK = os.path.join(ROOT, "bench/workloads/log/adaptive.toml")
TIB_BLOCKS = (1 << 40) // 4096
GROUP_BLOCKS = 1024


def prefix(util, phase):
    """The ext4 capture at `util` as one stream, up to `phase`'s first marker."""
    d = capture_dir("ext4", util)
    src = os.path.join(d, "trace.gz")
    result = json.load(open(os.path.join(d, "result.json")))
    ph = {p["name"]: p["markers"] for p in result["phases"]}
    lines = {k: m["line"] for k, m in tracefile.markers(src, result["rig"]["export_bytes"]).items()}
    return tracefile.one_stream(src, os.path.join(TMP, f"map-ext4-{util}-{phase}.trace.gz"),
                                stop_at_line=lines[ph[phase][0]])


def config(extents):
    """The adaptive stack, with `map_extents` set (written by `main` before the replays)."""
    return os.path.join(TMP, f"map-adaptive-{str(extents).lower()}.toml")


def write_config(extents):
    path = os.path.join(TMP, f"map-adaptive-{str(extents).lower()}.toml")
    text = open(STACK).read().replace('policy = "adaptive"\n',
                                       f'policy = "adaptive"\nmap_extents = {str(extents).lower()}\n')
    assert f"map_extents = {str(extents).lower()}" in text
    open(path, "w").write(text)
    return path


def replay(util, phase, trace, extents):
    base = os.path.join(TMP, f"map-ext4-{util}-{phase}-{extents}")
    cmd = [layoutd(), "sim", "--trace", trace, "--format", "layoutd", "--no-stream-detect", "--config",
           config(extents), "--disk", DISK, "--closed-loop", "--no-progress", "--json", base + ".json"]
    subprocess.run(cmd, check=True, capture_output=True)
    j = json.load(open(base + ".json"))
    c = next(x["counters"] for x in j["stack"]["layers"] if x["target"] == "log")
    keys = ("map_ram_bytes", "live_blocks_count", "volume_blocks_count", "map_groups_count",
            "map_flat_groups_count", "map_runs_count", "map_entry_bits")
    return util, phase, extents, {k: c[k] for k in keys}


def tib_projection(c):
    """Bytes per volume block at 1 TiB exposed with the same shape."""
    groups = TIB_BLOCKS // GROUP_BLOCKS
    flat_share = c["map_flat_groups_count"] / c["map_groups_count"]
    runs_groups = c["map_groups_count"] - c["map_flat_groups_count"]
    runs_per_group = c["map_runs_count"] / runs_groups if runs_groups else 0
    flat_bytes = (GROUP_BLOCKS * 29 + 63) // 64 * 8
    ram = groups * (flat_share * flat_bytes + (1 - flat_share) * 8 * runs_per_group + 18)
    return ram / TIB_BLOCKS


def main():
    args = sys.argv[1:]
    utils = [10, 50, 90, 95]
    jobs = 2
    while args:
        a = args.pop(0)
        if a == "--utils":
            utils = [int(u) for u in args.pop(0).split(",")]
        elif a == "--jobs":
            jobs = int(args.pop(0))
        else:
            sys.exit(__doc__)
    os.makedirs(TMP, exist_ok=True)
    for e in (True, False):
        write_config(e)
    runs = []
    with concurrent.futures.ThreadPoolExecutor(jobs) as ex:
        traces = {(u, ph): prefix(u, ph) for u in utils for ph in ("update", "read")}
        futs = [ex.submit(replay, u, ph, traces[u, ph], e) for u in utils for ph in ("update", "read")
                for e in (True, False)]
        for f in futs:
            runs.append(f.result())
    res = {f"{u}-{ph}-{e}": c for u, ph, e, c in runs}
    json.dump(res, open(os.path.join(OUT, "map-ram.json"), "w"), indent=1, sort_keys=True)
    lines = ["# `log`: map RAM on the IO TEST (ext4 captures, adaptive)", "",
             "Generated by `bench/log_map_ram.py` (deterministic replays of the committed captures). "
             "Bytes of map RAM (`map_ram_bytes`) per volume block (the issue's measure: 1 TiB in 1 GiB "
             "is 4 B a block) and per live block, with extents (`map_extents = true`, the default) and "
             "flat (`false`). States: at the update phase's first marker (files created to 90% full "
             "and the deletions made; the file system's discards of them are partly still to come, see "
             "the live blocks) and at the read phase's first marker (after the random 4 KiB updates).", "",
             "| util | state | live / volume blocks | extents: B/volume block (B/live block) | flat groups / "
             "groups | runs in runs groups | flat: B/volume block | 1 TiB projection, extents: B/volume block |",
             "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for u in utils:
        for ph, name in (("update", "update marker"), ("read", "read marker")):
            c, f = res[f"{u}-{ph}-True"], res[f"{u}-{ph}-False"]
            live, vol = c["live_blocks_count"], c["volume_blocks_count"]
            lines.append(f"| {u}% | {name} | {live} / {vol} | {c['map_ram_bytes'] / vol:.3f} "
                         f"({c['map_ram_bytes'] / live:.3f}) | "
                         f"{c['map_flat_groups_count']} / {c['map_groups_count']} | {c['map_runs_count']} | "
                         f"{f['map_ram_bytes'] / vol:.3f} | {tib_projection(c):.3f} |")
    open(os.path.join(OUT, "map-ram.md"), "w").write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
