#!/usr/bin/env python3
"""Benchmark (not a test): issue 8's 4 KiB random write rows for `pool`
against `linear`, each served by `layoutd serve` from a file on tmpfs,
with the backing file either fresh (sparse: every first write to a page
allocates it) or pre-written whole before `layoutd format` (as the `file`
runs of bench/nbd_overhead.py leave `linear`'s image). Same client (fio's
nbd engine), 16 server threads, interleaved, repeated; medians.

The 48 MiB row also gives the server's CPU time (user + system, from
wait4) per write, startup included: on a loaded machine it swings less
than IOPS.

Usage: bench/pool_nbd_write.py [--seconds 3] [--repeats 3] [--dir /dev/shm] [--rows N]
Prints a markdown table (bench/results/nbd-overhead/pool.md keeps it).
Needs: target/release/layoutd, nbdkit, fio.
"""
import argparse, os, statistics, subprocess, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from nbd_overhead import LAYOUTD, ROOT, fio, start  # noqa: E402

ROWS = [  # name, QD, bytes to move (None: time-based)
    ("4 KiB random write, QD 16, 48 MiB", 16, "48M"),
    ("4 KiB random write, QD 16", 16, None),
    ("4 KiB random write, QD 1", 1, None),
]
WRITES_48M = 48 * 256
# pool-nozero: examples/pool.toml with zero_new_chunks = false.
STACKS = ["linear", "pool", "pool-nozero"]
FILES = ["fresh", "pre-written"]


def prepare(path, stack, how):
    if os.path.exists(path):
        os.unlink(path)
    if how == "pre-written":
        block = os.urandom(1 << 20)
        with open(path, "wb") as fh:
            for _ in range(1025):
                fh.write(block)
    cmd = [LAYOUTD, "format", "--device", path, "--size", "1025M"] + (["--force"] if how != "fresh" else [])
    if stack != "linear":
        config = os.path.join(ROOT, "examples", "pool.toml")
        if stack == "pool-nozero":
            with open(config) as fh:
                text = fh.read().replace("zero_new_chunks = true", "zero_new_chunks = false")
            assert "zero_new_chunks = false" in text
            config = path + ".toml"
            with open(config, "w") as fh:
                fh.write(text)
        cmd += ["--config", config]
    subprocess.run(cmd, check=True, capture_output=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--dir", default="/dev/shm")
    ap.add_argument("--rows", type=int, default=len(ROWS), help="only the first N rows")
    a = ap.parse_args()
    rows = ROWS[: a.rows]
    image = os.path.join(a.dir, "layoutd-pool-write.img")
    sock = os.path.join(a.dir, "layoutd-pool-write.sock")
    res = {}
    for name, depth, io_size in rows:
        for r in range(a.repeats):
            for how in FILES:
                for stack in STACKS:  # interleaved
                    prepare(image, stack, how)
                    p = start("layoutd-" + stack, image, sock)
                    try:
                        out = fio(sock, "randwrite", "4k", depth, a.seconds, "900M", io_size)
                    finally:
                        p.terminate()
                        # The server's CPU time (serve runs as nbdkit in this process).
                        _, _, ru = os.wait4(p.pid, 0)
                        p.returncode = 0
                    cpu_us = (ru.ru_utime + ru.ru_stime) * 1e6 / WRITES_48M if io_size else None
                    res.setdefault((name, how, stack), []).append((out["iops"], cpu_us))
                    print(f"{name:36} {how:11} {stack:6} run {r + 1}: {out['iops']:9.0f} IOPS"
                          + (f", server CPU {cpu_us:.1f} us per write" if cpu_us else ""), file=sys.stderr)
    os.unlink(image)
    if os.path.exists(image + ".toml"):
        os.unlink(image + ".toml")
    print("| workload | backing file | linear IOPS | pool IOPS | pool-nozero IOPS | pool / linear "
          "| pool-nozero / linear | server CPU per write: linear, pool, pool-nozero |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name, _, io_size in rows:
        for how in FILES:
            med = {st: statistics.median(x[0] for x in res[(name, how, st)]) for st in STACKS}
            cpu = "—"
            if io_size:
                cpu = ", ".join(f"{statistics.median(x[1] for x in res[(name, how, st)]):.1f}" for st in STACKS)
                cpu += " us"
            lin = med["linear"]
            print(f"| {name} | {how} | {lin:,.0f} | {med['pool']:,.0f} | {med['pool-nozero']:,.0f} "
                  f"| {100 * med['pool'] / lin:.0f}% | {100 * med['pool-nozero'] / lin:.0f}% | {cpu} |")


if __name__ == "__main__":
    main()
