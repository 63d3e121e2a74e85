#!/usr/bin/env python3
"""Idle work of `log`, live against the simulator, event by event.

A benchmark-side measurement, not a test. Drives one timed request
sequence through `layoutd serve --emulate PRESET` (live, over NBD) with
the live trace recorded, replays that trace closed-loop through
`layoutd sim` (fifo, queue depth 1, the emulator's disk), both with the
runtime's debug event log on (`LAYOUTD_EVENT_LOG`, crates/runtime/src/
events.rs), and compares the two logs: per gap between two client
requests, when the idle timer fired, when re-sequencing passes started
and ended, how long each client request took; then names the first gap
where the two differ.

The sequence: GROUPS groups (one every 4 MiB) of 16 blocks written
backwards (so each leaves a group to re-sequence), a flush, a marker read
of unwritten blocks, then a 4 KiB read every PERIOD ms (think time: the
client sleeps PERIOD ms after each completion) of blocks written above
(`--reads written`, as fio's random read after the update phase) or of
unwritten blocks (`--reads unwritten`: no lower I/O), then a quiet tail.

The replay runs twice: every emitted lower request at the disk at once
(the simulator's default), and as the live runtime submits them
(`--live-dispatch --live-delivery-us DELIVERY_US`).

Reproduce (root not needed; about 30 s; DIR is a scratch directory):

    cargo build --workspace --release
    bench/log_idle_events.py --out DIR
"""

import argparse
import os
import random
import shutil
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from replica_live_replay import Connection  # noqa: E402

ROOT = os.path.dirname(HERE)
LAYOUTD = os.path.join(ROOT, "target", "release", "layoutd")
CONFIG = os.path.join(ROOT, "bench", "workloads", "log", "live-adaptive.toml")
SIZE = "1201M"
DEVICE_OFFSET = 1 << 20  # the data area of a formatted volume file
GROUP_BYTES = 4 << 20
BLOCK = 4096


def live(args, d):
    img, sock = os.path.join(d, "vol.img"), os.path.join(d, "vol.sock")
    trace, events = os.path.join(d, "live.trace"), os.path.join(d, "events")
    subprocess.run([LAYOUTD, "format", "--device", img, "--size", SIZE, "--force", "--config", CONFIG],
                   check=True, capture_output=True)
    env = dict(os.environ, LAYOUTD_EVENT_LOG=events)
    srv = subprocess.Popen([LAYOUTD, "serve", "--device", img, "--socket", sock, "--emulate", args.disk,
                            "--record-trace", trace, "--force"],
                           stdout=open(os.path.join(d, "serve.log"), "w"), stderr=subprocess.STDOUT,
                           start_new_session=True, env=env)
    deadline = time.monotonic() + 30
    while "serving" not in open(os.path.join(d, "serve.log")).read():
        if time.monotonic() > deadline or srv.poll() is not None:
            raise SystemExit("serve did not start: " + open(os.path.join(d, "serve.log")).read())
        time.sleep(0.05)
    c = Connection(sock)
    cookie = [0]

    def req(op, off, n, data=b""):
        cookie[0] += 1
        s = c.send(cookie[0], op, off, n, False, data)
        s[0].wait()
        if s[2]:
            raise SystemExit(f"request {op} {off} failed: {s[2]}")

    data = bytes(range(256)) * 16
    written = []
    for g in range(args.groups):
        base = (g + 1) * GROUP_BYTES
        for b in reversed(range(16)):
            req("W", base + b * BLOCK, BLOCK, data)
            written.append(base + b * BLOCK)
    req("F", 0, 0)
    unwritten = (args.groups + 10) * GROUP_BYTES
    req("R", unwritten, BLOCK)  # the marker: the read phase starts here
    rng = random.Random(args.seed)
    for k in range(args.reads):
        time.sleep(args.period_ms / 1000)
        off = rng.choice(written) if args.read_kind == "written" else unwritten + (k + 1) * BLOCK
        req("R", off, BLOCK)
    time.sleep(args.tail_ms / 1000)
    c.close()
    srv.send_signal(signal.SIGTERM)
    srv.wait(timeout=120)
    return trace, events + ".live"


def replay(args, d, trace, live_dispatch):
    name = "sim-live-dispatch" if live_dispatch else "sim"
    events = os.path.join(d, name)
    env = dict(os.environ, LAYOUTD_EVENT_LOG=events)
    img_bytes = os.path.getsize(os.path.join(d, "vol.img"))
    subprocess.run([LAYOUTD, "sim", "--trace", trace, "--closed-loop", "--format", "layoutd", "--disk", args.disk,
                    "--scheduler", "fifo", "--queue-depth", "1", "--seed", "0",
                    "--device-offset", str(DEVICE_OFFSET), "--device-bytes", str(img_bytes - DEVICE_OFFSET),
                    "--config", CONFIG, "--no-progress", "--json", os.path.join(d, name + ".json")]
                   + (["--live-dispatch", "--live-delivery-us", str(args.delivery_us)] if live_dispatch else []),
                   check=True, capture_output=True, env=env)
    return events + ".sim"


def parse(path):
    """The event log as (ms, kind, fields), in time order."""
    out = []
    for line in open(path):
        f = line.split()
        out.append((float(f[0]), f[1], f[2:]))
    out.sort(key=lambda e: e[0])
    return out


def gaps(evs, marker_page):
    """From the marker read on: one entry per client request (its arrival
    relative to the marker, its service time) with what happened after
    its arrival until the next: timeouts, idle reports, passes ended,
    background lower requests emitted, and the first of those."""
    t0 = next(t for t, k, f in evs if k == "up" and f[1] == "Read" and int(f[2]) == marker_page)
    rows = []
    cur = None
    pending = {}
    last_passes = None
    for t, k, f in evs:
        if k == "cnt":
            passes = int(f[0].split("=")[1])
            if cur is not None and last_passes is not None and passes > last_passes:
                cur["pass_end"].append(round(t - t0, 1))
            last_passes = passes
        if t < t0:
            continue
        if k == "up":
            cur = {"at": round(t - t0, 1), "op": f[1], "service": None, "timeouts": [], "idles": 0,
                   "pass_end": [], "bg_first": None, "bg": 0}
            pending[f[0]] = (t, cur)
            rows.append(cur)
        elif k == "done" and f[0] in pending:
            start, row = pending.pop(f[0])
            row["service"] = round(t - start, 1)
        elif cur is None:
            continue
        elif k == "timeout":
            cur["timeouts"].append(round(t - t0, 1))
        elif k == "idle":
            cur["idles"] += 1
        elif k == "lo+" and f[-1] == "bg=1" or (k == "lo+" and cur["service"] is not None):
            cur["bg"] += 1
            if cur["bg_first"] is None:
                cur["bg_first"] = round(t - t0, 1)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="a scratch directory (the volume file and logs go here)")
    ap.add_argument("--disk", default="st3160815as")
    ap.add_argument("--groups", type=int, default=40)
    ap.add_argument("--reads", type=int, default=20)
    ap.add_argument("--period-ms", type=int, default=150)
    ap.add_argument("--tail-ms", type=int, default=500)
    ap.add_argument("--reads-of", dest="read_kind", choices=["written", "unwritten"], default="written")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--delivery-us", type=int, default=90,
                    help="the live-dispatch replay's --live-delivery-us (default: %(default)s)")
    ap.add_argument("--replay-only", action="store_true", help="replay the trace already in --out")
    args = ap.parse_args()
    d = args.out
    if not args.replay_only:
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        print("load:", open("/proc/loadavg").read().strip())
        trace, lev = live(args, d)
        print("load:", open("/proc/loadavg").read().strip())
    else:
        trace, lev = os.path.join(d, "live.trace"), os.path.join(d, "events.live")
    marker_page = (args.groups + 10) * GROUP_BYTES // BLOCK
    L = gaps(parse(lev), marker_page)
    for live_dispatch in (False, True):
        S = gaps(parse(replay(args, d, trace, live_dispatch)), marker_page)
        how = f" with --live-dispatch --live-delivery-us {args.delivery_us}" if live_dispatch else ""
        print(f"\n== live against the replay{how}")
        compare(L, S)


def compare(L, S):
    print(f"{'':>3} {'live: at':>9} {'svc':>6} {'timeouts':>20} {'passes ended':>22} |"
          f" {'sim: at':>9} {'svc':>6} {'timeouts':>20} {'passes ended':>22}")
    first = None
    for i, (a, b) in enumerate(zip(L, S)):
        def show(r):
            return (f"{r['at']:9.1f} {r['service'] or 0:6.1f} {','.join(map(str, r['timeouts']))[:20]:>20}"
                    f" {','.join(map(str, r['pass_end']))[:22]:>22}")
        print(f"{i:3} {show(a)} | {show(b)}")
        if first is None and (len(a["pass_end"]) != len(b["pass_end"]) or len(a["timeouts"]) != len(b["timeouts"])):
            first = i
    pl = sum(len(r["pass_end"]) for r in L)
    ps = sum(len(r["pass_end"]) for r in S)
    def svc(rows):
        v = [r["service"] for r in rows[1:] if r["service"] is not None]
        return sum(v) / max(1, len(v))
    print(f"passes ended from the marker on: live {pl}, sim {ps}; first gap that differs: {first};"
          f" mean read service ms: live {svc(L):.1f}, sim {svc(S):.1f};"
          f" last read at: live {L[-1]['at']:.0f} ms, sim {S[-1]['at']:.0f} ms")


if __name__ == "__main__":
    main()
