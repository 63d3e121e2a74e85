#!/usr/bin/env python3
"""The scaled-down snapshot workload of the thesis's chapter 3 (partial
rewrite, §3.3) as a layoutd trace, for `layoutd sim` on a `pool` stack.

Phases (one stream, replayed closed loop):
  1. unpack: the tree written sequentially on the origin (64 KiB writes);
  2. (the snapshot is taken here: `--message @N:"snapshot create snap"`,
     N printed on stdout);
  3. partial rewrite: 4 KiB written into a random quarter of the tree's
     64 KiB chunks, in random order (seeded);
  4. after 30 s idle, read ("grep") of the whole tree on the origin, then on the snapshot
     (volume slot 1 at VOLUME bytes), sequentially in 64 KiB reads.

Usage: pool_trace.py OUT TREE_MIB VOLUME_BYTES [SEED]
"""
import random
import sys

KIB = 1024


def main():
    out, tree_mib, volume = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    seed = int(sys.argv[4]) if len(sys.argv) > 4 else 1
    rng = random.Random(seed)
    tree = tree_mib << 20
    lines = []
    t = 0

    def req(op, off, length):
        nonlocal t
        lines.append(f"{t} {t} 0 {op} {off} {length} -")
        t += 1000  # 1 µs of think time between requests

    for off in range(0, tree, 64 * KIB):
        req("W", off, 64 * KIB)
    snapshot_at = len(lines)
    chunks = list(range(tree // (64 * KIB)))
    rng.shuffle(chunks)
    for c in chunks[: len(chunks) // 4]:
        req("W", c * 64 * KIB + rng.randrange(16) * 4 * KIB, 4 * KIB)
    t += 30 * 10**9  # 30 s idle before the reads: the defragmenter's time
    for base in (0, volume):
        for off in range(0, tree, 64 * KIB):
            req("R", base + off, 64 * KIB)
    with open(out, "w") as f:
        f.write("# layoutd-trace v1: submit_ns complete_ns stream op offset_bytes length_bytes flags\n")
        f.write("\n".join(lines) + "\n")
    print(snapshot_at)


if __name__ == "__main__":
    main()
