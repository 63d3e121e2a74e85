#!/usr/bin/env python3
"""Checks the harness's pure parts without root or a server: cutting a trace
at marker reads and its summaries (through `layoutd trace`, so a built
layoutd is needed: cargo build -p layoutd, or LAYOUTD=PATH), the report
writer and the SVG plots. No timing is asserted.
Run: python3 bench/harness/selftest.py"""

import json
import os
import shutil
import sys
import tempfile

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

import replay  # noqa: E402
import runner  # noqa: E402
import svg  # noqa: E402
import tracefile  # noqa: E402
from rig import MARKER_AREA, MARKER_STRIDE, parse_size  # noqa: E402

EXPORT = 1 << 30


def line(s, c, op, off, ln, stream=0):
    """Times in ms."""
    return f"{s * 1000000} {c * 1000000} {stream} {op} {off} {ln} -\n"


def marker(k, t):
    return line(t, t + 100, "R", EXPORT - MARKER_AREA + k * MARKER_STRIDE, 4096)


POOL = """version = 1
[[layer]]
target = "pool"
volumes_max = 2
volume_size = "1GiB"
placement = "contiguous"
"""


def check_replay(d):
    """The replay of a run with state (a pool: origin written, a snapshot
    created online, the snapshot read through its own export, stream 1) is
    the whole run with its messages: the snapshot's read reaches the disk and
    nothing fails. Each phase replayed alone on a fresh stack (the design
    before session 25) fails it (EINVAL: no snapshot); without the message
    the replay refuses to report."""
    lines = [marker(0, 0), line(10, 20, "W", 0, 65536), line(20, 30, "F", 0, 0), marker(1, 40),
             marker(2, 50), marker(3, 60), marker(4, 70),
             marker(5, 80), line(90, 100, "R", EXPORT, 4096, 1), marker(6, 110)]
    path = os.path.join(d, "pool.trace")
    with open(path, "w") as fh:
        fh.write(tracefile.HEADER + "".join(lines))
    cfg = os.path.join(d, "pool.toml")
    with open(cfg, "w") as fh:
        fh.write(POOL)
    phases = [{"name": "write", "markers": [0, 1]},
              {"name": "snapshot", "markers": [2, 4], "messages": [[3, "snapshot create s ro"]]},
              {"name": "read-snapshot", "markers": [5, 6]}]
    sim = replay.find_sim(tracefile.layoutd())
    settings = {"size_bytes": 3 << 30, "emulate": "wd800", "config": cfg}
    rp = runner.replay_phases(sim, [0], "fifo", 1, settings, phases, path, EXPORT, d, d)
    assert rp["messages"] == [(5, "snapshot create s ro")], rp["messages"]  # before marker 3, the 6th record
    assert rp["device_offset_bytes"] == 1 << 20 and rp["device_bytes"] == (3 << 30) - (1 << 20), rp
    assert rp["whole_trace"]["reads_count"] == 8, rp["whole_trace"]  # 7 markers and the snapshot's read
    assert [p["sim"]["requests"] for p in phases] == [2, 0, 1], [p["sim"] for p in phases]
    assert phases[2]["sim"]["busy_seconds"] > 0, phases[2]["sim"]  # read from the disk, not answered as a hole
    try:
        replay.whole(sim, path, os.path.join(d, "no-message"), "wd800", cfg, 0, "fifo", 1, [], (1 << 20, (3 << 30) - (1 << 20)),
                     EXPORT, [[5, 6]])
        raise AssertionError("a replay whose requests fail must not be reported")
    except RuntimeError as e:
        assert "failed 1 requests" in str(e) and "EINVAL" in str(e), e
    # the old design: the read-snapshot phase alone on a fresh pool
    alone = os.path.join(d, "alone.trace")
    tracefile.cut(path, EXPORT, 5, 6, alone)
    js = replay.run(sim, alone, os.path.join(d, "alone.json"), "wd800", cfg)
    assert js["errors_count"] == 1, js["errors_count"]


def main():
    d = tempfile.mkdtemp(prefix="layoutd-bench-selftest-")
    try:
        check(d)
    finally:
        shutil.rmtree(d, ignore_errors=True)
    print("bench harness selftest: ok")


def check(d):
    lines = [line(0, 10, "W", 0, 4096), marker(0, 20),
             line(30, 40, "R", 8192, 4096), line(45, 60, "R", 12288, 8192), line(50, 70, "W", 4096, 4096),
             marker(1, 80), marker(2, 90), line(100, 110, "F", 0, 0),
             # a read in the marker area that is not on a marker slot is data, not a marker
             line(111, 112, "R", EXPORT - MARKER_AREA + 512, 4096), marker(3, 120)]
    path = os.path.join(d, "trace")
    with open(path, "w") as fh:
        fh.write(tracefile.HEADER + "".join(lines))
    recs = tracefile.read(path)
    assert [(r.submit, r.op, r.off, r.len) for r in recs][:2] == [(0, "W", 0, 4096), (20000000, "R", EXPORT - MARKER_AREA, 4096)]
    w = tracefile.windows(path, EXPORT, [("a", 0, 1), ("b", 2, 3)])
    assert [r.off for r in w["a"]] == [8192, 12288, 4096], w
    assert [r.op for r in w["b"]] == ["F", "R"]
    s = tracefile.stats(path, EXPORT, (0, 1))
    assert (s["reads"], s["writes"], s["read_bytes"], s["written_bytes"]) == (2, 1, 12288, 4096), s
    assert s["sequential_read_share"] == 0.5  # 12288 follows 8192+4096
    assert s["span_seconds"] == 0.040 and s["busy_seconds"] == 0.035 and s["idle_seconds"] == 0.005, s  # busy [30,40] + [45,70]
    assert s["overlapped_requests"] == 1, s  # the write at 50 overlaps the read 45..60
    assert sorted(m["index"] for m in s["markers"]) == [0, 1, 2, 3]
    cut = os.path.join(d, "a.trace")
    tracefile.cut(path, EXPORT, 0, 1, cut)  # what a phase's replay reads: the same records
    assert tracefile.stats(cut) == {k: v for k, v in s.items() if k != "markers"}
    try:
        tracefile.windows(path, EXPORT, [("c", 0, 7)])
        raise AssertionError("a missing marker must be an error")
    except RuntimeError as e:
        assert "phase c" in str(e) and "marker 7" in str(e), e
    assert parse_size("4G") == 4 << 30 and parse_size("512MiB") == 512 << 20 and parse_size("123") == 123
    svg.bars(os.path.join(d, "b.svg"), "t", ["x", "y"], [("live", [1.0, 2.5]), ("sim", [1.1, None])], "s")
    svg.address_time(os.path.join(d, "a.svg"), "t", recs, [("a", 20000000, 80000000)])
    for f in ("b.svg", "a.svg"):
        assert open(os.path.join(d, f)).read().startswith("<svg")
    ph = {"name": "a", "caches_dropped_before": True, "live_seconds": 1.0, "sync_seconds": 0.0,
          "trace": s, "loop_device": {"reads": 2, "writes": 1},
          "sim": {"span_seconds": 0.9, "busy_seconds": 0.02, "requests": 3},
          "sim_seconds_by_seed": {"0": 0.9, "1": 0.95}}
    r = {"workload": "w", "params": {"files": 1}, "command": "bench/run w", "started": "now", "git_head": "x",
         "machine": {"cpus": 1, "cpu": "c", "kernel": "k", "loadavg_at_start": [0], "loadavg_at_end": [0]},
         "rig": {"size": "1G", "config": None, "emulate": "wd800", "nbdfuse_connections": 1, "mkfs_opts": [],
                 "mount_opts": "", "cold": "remount", "fsck_clean": True, "server_marked_clean": True},
         "phases": [ph], "whole_trace": s,
         "replay": {"command": ["layoutd", "sim"], "disk": "wd800", "scheduler": "fifo", "queue_depth": 1,
                    "seed": 0, "seeds": [0, 1], "whole_trace": {"simulated_seconds": 1.0}}}
    runner.write_report(d, r)
    readme = os.path.join(d, "README.md")
    with open(readme, "a") as fh:
        fh.write("\nhand-written note\n")
    runner.write_report(d, r)  # regenerating keeps the notes
    text = open(readme).read()
    assert text.count("hand-written note") == 1 and "| **total** |" in text and "0.90 - 0.95" in text
    json.load(open(os.path.join(d, "result.json")))
    check_replay(d)


if __name__ == "__main__":
    main()
