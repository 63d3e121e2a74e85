#!/usr/bin/env python3
"""Benchmark (not a test): layoutd's linear stack served by `layoutd serve`
against nbdkit's own `file` plugin on the same tmpfs file, same client (fio's
nbd engine), same nbdkit thread count, interleaved, repeated.

Usage: bench/nbd_overhead.py [--seconds 8] [--repeats 3] [--dir /dev/shm]
Writes bench/results/nbd-overhead/README.md and results.json.
Needs: a release build (cargo build --workspace --release), nbdkit, fio.
"""
import argparse, json, os, statistics, subprocess, sys, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAYOUTD = os.path.join(ROOT, "target/release/layoutd")
OUT = os.path.join(ROOT, "bench/results/nbd-overhead")

NOTES_MARKER = "<!-- analysis: kept when the table is regenerated -->"

ROWS = [  # name, rw, block size, iodepth
    ("4 KiB random read, QD 16", "randread", "4k", 16),
    ("4 KiB random write, QD 16", "randwrite", "4k", 16),
    ("4 KiB random read, QD 1", "randread", "4k", 1),
    ("4 KiB random write, QD 1", "randwrite", "4k", 1),
    ("1 MiB sequential read, QD 4", "read", "1m", 4),
    ("1 MiB sequential write, QD 4", "write", "1m", 4),
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
    if kind == "layoutd":
        cmd = [LAYOUTD, "serve", "--device", image, "--socket", sock, "--threads", "16"]
    else:
        cmd = ["nbdkit", "--foreground", "--threads", "16", "--unix", sock, "file", image]
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for(sock, p)
    return p


def fio(sock, rw, bs, depth, seconds, size):
    uri = f"nbd+unix:///?socket={sock}"
    cmd = ["fio", "--name=b", "--ioengine=nbd", f"--uri={uri}", f"--rw={rw}", f"--bs={bs}",
           f"--iodepth={depth}", f"--size={size}", "--time_based", f"--runtime={seconds}",
           "--ramp_time=1", "--output-format=json"]
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
    a = ap.parse_args()
    image = os.path.join(a.dir, "layoutd-bench.img")
    sock = os.path.join(a.dir, "layoutd-bench.sock")
    if os.path.exists(image):
        os.unlink(image)
    subprocess.run([LAYOUTD, "format", "--device", image, "--size", "1025M"], check=True, capture_output=True)
    # The file plugin serves the whole file, superblock included, and its
    # writes clobber it; restore layoutd's first MiB before each layoutd run.
    with open(image, "rb") as fh:
        header = fh.read(1 << 20)
    size = "1000M"  # inside both exports
    results = {}
    for name, rw, bs, depth in ROWS:
        for r in range(a.repeats):
            for kind in ("nbdkit-file", "layoutd"):  # interleaved, same file
                if kind == "layoutd":
                    with open(image, "r+b") as fh:
                        fh.write(header)
                p = start(kind, image, sock)
                try:
                    res = fio(sock, rw, bs, depth, a.seconds, size)
                finally:
                    p.terminate()
                    p.wait()
                results.setdefault(name, {}).setdefault(kind, []).append(res)
                print(f"{name:32} {kind:12} run {r + 1}: {res['iops']:10.0f} IOPS {res['mib_s']:8.1f} MiB/s", file=sys.stderr)
    os.unlink(image)
    write_report(results, a)


def write_report(results, a):
    cpu = subprocess.run(["sh", "-c", "grep -m1 'model name' /proc/cpuinfo | cut -d: -f2"], capture_output=True, text=True).stdout.strip()
    lines = ["# NBD serving overhead: layoutd linear vs nbdkit `file`", "",
             "A benchmark, not a test. Both servers serve the same file on tmpfs "
             f"(`{a.dir}`) with 16 nbdkit threads; the client is fio's nbd engine over a Unix socket; "
             f"each cell is the median of {a.repeats} interleaved runs of {a.seconds} s (1 s ramp).", "",
             f"Machine: {os.cpu_count()} cores, {cpu}. Date: {time.strftime('%Y-%m-%d')}.", "",
             "| workload | nbdkit file | layoutd linear | layoutd / file |", "| --- | ---: | ---: | ---: |"]
    for name, _, bs, _ in ROWS:
        f = statistics.median(x["iops"] for x in results[name]["nbdkit-file"])
        l = statistics.median(x["iops"] for x in results[name]["layoutd"])
        unit = "MiB/s" if bs == "1m" else "IOPS"
        fv, lv = (f, l) if bs != "1m" else (f, l)  # 1 MiB: IOPS == MiB/s
        lines.append(f"| {name} | {fv:,.0f} {unit} | {lv:,.0f} {unit} | {100 * l / f:.0f}% |")
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
