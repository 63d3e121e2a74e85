#!/usr/bin/env python3
"""Reads the runs of bench/pool_sim.sh (each run's JSON and the trace its
`trace` layer recorded) and writes bench/results/pool/report-DISK.md and
summary-DISK.json: per stack, the simulated time of each phase (first submit to
last completion of its requests, closed loop), the snapshot-read penalty,
and the pool's counters.

Usage: pool_report.py RUNS_DIR VOLUME_BYTES OUT_DIR DISK NAME...
"""
import json
import sys


def phases(rec_path, volume):
    groups = {}
    for line in open(rec_path):
        if line.startswith("#") or not line.strip():
            continue
        sub, com, _stream, op, off, length, _flags = line.split()
        sub, com, off, length = int(sub), int(com), int(off), int(length)
        if op == "W":
            key = "unpack" if length == 65536 else "rewrite"
        elif op == "R":
            key = "read_origin" if off < volume else "read_snapshot"
        else:
            continue
        lo, hi = groups.get(key, (sub, com))
        groups[key] = (min(lo, sub), max(hi, com))
    return {k: (hi - lo) / 1e9 for k, (lo, hi) in groups.items()}


def main():
    runs, volume, out, disk, names = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5:]
    summary = {}
    for name in names:
        j = json.load(open(f"{runs}/{name}.json"))
        p = phases(f"{runs}/{name}.rec", volume)
        pool = next((l for l in j["stack"]["layers"] if l["target"] == "pool"), None)
        summary[name] = {"phases_s": p, "pool": pool["counters"] if pool else None, "disk": j["disk"]}
    plain = summary.get("plain", {}).get("phases_s", {})
    rows = []
    for name, s in summary.items():
        p = s["phases_s"]
        c = s["pool"] or {}
        snap = (p["read_snapshot"] / p["read_origin"] - 1) * 100 if "read_snapshot" in p and c else None
        rewrite = (p["rewrite"] / plain["rewrite"] - 1) * 100 if plain and "rewrite" in p else None
        unpack = (p["unpack"] / plain["unpack"] - 1) * 100 if plain and "unpack" in p else None
        origin = (p["read_origin"] / plain["read_origin"] - 1) * 100 if plain else None
        snap_plain = (p["read_snapshot"] / plain["read_origin"] - 1) * 100 if plain and "read_snapshot" in p and c else None
        fmt = lambda v: "—" if v is None else f"{v:+.1f}%"
        rows.append(
            f"| {name} | {p.get('unpack', 0):.2f} | {p.get('rewrite', 0):.2f} | {p.get('read_origin', 0):.2f} | "
            f"{p.get('read_snapshot', 0) if c else 0:.2f} | {fmt(snap)} | {fmt(origin)} | {fmt(snap_plain)} | {fmt(rewrite)} | "
            f"{c.get('copy_distance_mean_chunks_milli', 0) / 1000 if c else 0:.1f} | "
            f"{c.get('defrag_moves_count', '—') if c else '—'} | "
            f"{c.get('metadata_bytes_per_chunk_milli', 0) / 1000 if c else 0:.1f} |"
        )
    with open(f"{out}/summary-{disk}.json", "w") as f:
        json.dump(summary, f, indent=1, sort_keys=True)
    with open(f"{out}/report-{disk}.md", "w") as f:
        f.write(
            "| stack | unpack s | rewrite s | read origin s | read snapshot s | snapshot vs origin read | "
            "origin read vs plain | snapshot read vs plain | rewrite vs plain | mean copy distance (chunks) | defrag moves | "
            "metadata bytes/chunk |\n|" + " --- |" * 12 + "\n" + "\n".join(rows) + "\n"
        )
    print(open(f"{out}/report-{disk}.md").read())


if __name__ == "__main__":
    main()
