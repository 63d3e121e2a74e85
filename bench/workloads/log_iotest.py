#!/usr/bin/env python3
"""The IO TEST of SSR-LFS (seeds/003, section 5) as layoutd block traces, for
`layoutd sim` on `linear` and `log` stacks (bench/log_sim.sh).

Files are 64 KiB extents of the volume (what ext4 would allocate for them,
without the file system's own metadata). Phases, one stream, closed loop:
  1. create: 64 KiB files written in address order until FILL% of the
     volume is used (FILL = max(90, UTIL));
  2. delete: random files discarded (a trim of the file, as a file system
     mounted with `discard` sends) until UTIL% remain; then a flush;
  3. update: UPDATE_MIB of 4 KiB writes, each into a random block of a
     random remaining file (seeded); then a flush;
  4. IDLE_S seconds without requests (0: none; the log re-sequences
     scattered files in idle time);
  5. read: every remaining file, in address order, 64 KiB reads (the
     sequential read after the updates, beyond the paper).

A phase's time is its first submit to its last completion, as the stack's
`trace` layer records them (bench/workloads/log_report.py).

Usage: log_iotest.py OUT.trace VOLUME_BYTES UTIL_PCT UPDATE_MIB [SEED [IDLE_S]]
"""
import random
import sys

KIB = 1024
FILE = 64 * KIB
HEADER = "# layoutd-trace v1: submit_ns complete_ns stream op offset_bytes length_bytes flags"


def main():
    out, volume, util, update_mib = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    seed = int(sys.argv[5]) if len(sys.argv) > 5 else 1
    idle_s = float(sys.argv[6]) if len(sys.argv) > 6 else 0
    rng = random.Random(seed)
    files = volume // FILE
    lines = []
    t = 0

    def req(op, off, length):
        nonlocal t
        lines.append(f"{t} {t} 0 {op} {off} {length} -")
        t += 1000  # 1 µs of think time

    created = files * max(90, util) // 100
    for f in range(created):
        req("W", f * FILE, FILE)
    live = list(range(created))
    rng.shuffle(live)
    keep = files * util // 100
    for f in live[keep:]:
        req("T", f * FILE, FILE)
    live = live[:keep]
    req("F", 0, 0)
    for _ in range(update_mib * KIB // 4):
        f = live[rng.randrange(len(live))]
        req("W", f * FILE + rng.randrange(FILE // (4 * KIB)) * 4 * KIB, 4 * KIB)
    req("F", 0, 0)
    t += int(idle_s * 1e9)
    for f in sorted(live):
        req("R", f * FILE, FILE)
    with open(out, "w") as fh:
        fh.write(HEADER + "\n" + "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
