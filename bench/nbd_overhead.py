#!/usr/bin/env python3
"""Benchmark (not a test): layoutd's stacks served by `layoutd serve` against
nbdkit's own `file` plugin on tmpfs, same client (fio's nbd engine), same
nbdkit thread count, interleaved, repeated. Every server gets a fresh
file before each run: a sparse one for `file`, a freshly formatted one for
each layoutd stack (`--stacks`, default `linear,dcd`; `dcd` is
examples/dcd.toml; `linear` has no config). (Until session 22 `file` and
`linear` shared one file across all rows, so in the write rows after the
first they overwrote tmpfs pages earlier runs had allocated while every
target paid for allocating its pages: worth 10-15% to linear in the
48 MiB row; bench/results/nbd-overhead/targets.md, session 22.)

Usage: bench/nbd_overhead.py [--seconds 8] [--repeats 3] [--dir /dev/shm] [--stacks linear,dcd]
(LAYOUTD_BIN=PATH: serve with another build's `layoutd`, e.g. a copy of a baseline build.)
Writes bench/results/nbd-overhead/README.md and results.json.
Needs: a release build (cargo build --workspace --release), nbdkit, fio.
"""
import argparse, json, os, statistics, subprocess, sys, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# LAYOUTD_BIN: another build's binary (its plugin next to it), to compare builds.
LAYOUTD = os.environ.get("LAYOUTD_BIN") or os.path.join(ROOT, "target/release/layoutd")
OUT = os.path.join(ROOT, "bench/results/nbd-overhead")

NOTES_MARKER = "<!-- analysis: kept when the table is regenerated -->"

ROWS = [  # name, rw, block size, iodepth, bytes to move (None: time-based)
    ("4 KiB random read, QD 16", "randread", "4k", 16, None),
    ("4 KiB random write, QD 16", "randwrite", "4k", 16, None),
    # The foreground write path alone: 48 MiB fits dcd's 64 MiB log, so no
    # write waits for destage (the row above measures the sustained rate).
    ("4 KiB random write, QD 16, 48 MiB", "randwrite", "4k", 16, "48M"),
    ("4 KiB random read, QD 1", "randread", "4k", 1, None),
    ("4 KiB random write, QD 1", "randwrite", "4k", 1, None),
    ("1 MiB sequential read, QD 4", "read", "1m", 4, None),
    ("1 MiB sequential write, QD 4", "write", "1m", 4, None),
]


def wait_for(path, proc):
    for _ in range(400):
        if os.path.exists(path):
            return
        if proc.poll() is not None:
            sys.exit(f"server exited early with {proc.returncode}")
        time.sleep(0.025)
    sys.exit(f"{path} never appeared")


def start(kind, image, sock):
    if os.path.exists(sock):
        os.unlink(sock)
    if kind.startswith("layoutd"):
        cmd = [LAYOUTD, "serve", "--device", image, "--socket", sock, "--threads", "16"]
    else:
        cmd = ["nbdkit", "--foreground", "--threads", "16", "--unix", sock, "file", image]
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for(sock, p)
    return p


def fio(sock, rw, bs, depth, seconds, size, io_size=None):
    uri = f"nbd+unix:///?socket={sock}"
    cmd = ["fio", "--name=b", "--ioengine=nbd", f"--uri={uri}", f"--rw={rw}", f"--bs={bs}",
           f"--iodepth={depth}", f"--size={size}", "--output-format=json"]
    if io_size:
        cmd += [f"--io_size={io_size}"]
    else:
        cmd += ["--time_based", f"--runtime={seconds}", "--ramp_time=1"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    job = json.loads(out[out.index("{"):])["jobs"][0]
    side = job["read"] if "read" in rw else job["write"]
    return {"iops": side["iops"], "mib_s": side["bw_bytes"] / 2**20,
            "lat_us_mean": side["lat_ns"]["mean"] / 1000}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--dir", default="/dev/shm")
    ap.add_argument("--stacks", default="linear,dcd",
                    help="layoutd stacks: linear, or the name of a config in examples/ (dcd, ...)")
    a = ap.parse_args()
    stacks = [x for x in a.stacks.split(",") if x]
    sock = os.path.join(a.dir, "layoutd-bench.sock")
    size = "900M"  # inside every export (dcd's log takes 64 MiB of the file)
    results = {}
    kinds = ["nbdkit-file"] + [f"layoutd-{st}" for st in stacks]
    for name, rw, bs, depth, io_size in ROWS:
        for r in range(a.repeats):
            for kind in kinds:  # interleaved
                # Every server gets a fresh file: on tmpfs a write to a page
                # an earlier run allocated costs less than one that must
                # allocate it, so a shared file would favour its servers.
                served = os.path.join(a.dir, f"layoutd-bench-{kind}.img")
                if os.path.exists(served):
                    os.unlink(served)
                if kind == "nbdkit-file":
                    with open(served, "wb") as fh:
                        fh.truncate(1025 << 20)
                else:
                    stack = kind[len("layoutd-"):]
                    config = [] if stack == "linear" else ["--config", os.path.join(ROOT, "examples", stack + ".toml")]
                    subprocess.run([LAYOUTD, "format", "--device", served, "--size", "1025M"] + config,
                                   check=True, capture_output=True)
                p = start(kind, served, sock)
                try:
                    res = fio(sock, rw, bs, depth, a.seconds, size, io_size)
                finally:
                    p.terminate()
                    p.wait()
                os.unlink(served)
                results.setdefault(name, {}).setdefault(kind, []).append(res)
                print(f"{name:32} {kind:14} run {r + 1}: {res['iops']:10.0f} IOPS {res['mib_s']:8.1f} MiB/s", file=sys.stderr)
    write_report(results, a, kinds)


def write_report(results, a, kinds):
    cpu = subprocess.run(["sh", "-c", "grep -m1 'model name' /proc/cpuinfo | cut -d: -f2"], capture_output=True, text=True).stdout.strip()
    stacks = [k[len("layoutd-"):] for k in kinds if k.startswith("layoutd-")]
    lines = ["# NBD serving overhead: layoutd stacks vs nbdkit `file`", "",
             "A benchmark, not a test. Every server serves a file on tmpfs "
             f"(`{a.dir}`) with 16 nbdkit threads; the client is fio's nbd engine over a Unix socket "
             "(900 MiB region); "
             f"each cell is the median of {a.repeats} interleaved runs of {a.seconds} s (1 s ramp). "
             "Every server gets a fresh file before each run (sparse for `file`, freshly formatted for each "
             "layoutd stack). The \"48 MiB\" row moves 48 MiB "
             "instead (no ramp): it fits dcd's 64 MiB log, so it measures the foreground write path alone.", "",
             f"Machine: {os.cpu_count()} cores, {cpu}. Date: {time.strftime('%Y-%m-%d')}.", "",
             "| workload | nbdkit file | " + " | ".join(f"layoutd {st}" for st in stacks) + " | linear / file | "
             + " | ".join(f"{st} / linear" for st in stacks if st != "linear") + " |",
             "| --- | ---: | " + " | ".join("---:" for _ in stacks) + " | ---: | "
             + " | ".join("---:" for st in stacks if st != "linear") + " |"]
    for name, _, bs, _, _ in ROWS:
        med = {k: statistics.median(x["iops"] for x in results[name][k]) for k in kinds}
        unit = "MiB/s" if bs == "1m" else "IOPS"  # 1 MiB: IOPS == MiB/s
        f = med["nbdkit-file"]
        lin = med.get("layoutd-linear")
        cells = [f"{med['layoutd-' + st]:,.0f} {unit}" for st in stacks]
        ratio_file = f"{100 * lin / f:.0f}%" if lin else "-"
        ratios = [f"{100 * med['layoutd-' + st] / lin:.0f}%" if lin else "-" for st in stacks if st != "linear"]
        lines.append(f"| {name} | {f:,.0f} {unit} | " + " | ".join(cells) + f" | {ratio_file} | " + " | ".join(ratios) + " |")
    lines += ["", "Reproduce: `cargo build --workspace --release && bench/nbd_overhead.py`", "",
              "Raw numbers (every run): `results.json`."]
    readme = os.path.join(OUT, "README.md")
    notes = ""
    if os.path.exists(readme):  # keep the hand-written analysis below the marker
        old = open(readme).read()
        if NOTES_MARKER in old:
            notes = old[old.index(NOTES_MARKER):]
    with open(readme, "w") as fh:
        fh.write("\n".join(lines) + "\n\n" + (notes or NOTES_MARKER + "\n"))
    with open(os.path.join(OUT, "results.json"), "w") as fh:
        json.dump(results, fh, indent=1)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
