#!/usr/bin/env python3
"""Benchmark (not a test): what a 4 KiB random write costs the server, per
stack, on bench/nbd_overhead.py's 48 MiB row (tmpfs, 16 nbdkit threads,
fio's nbd engine over a Unix socket, 48 MiB of 4 KiB random writes in the
first 900 MiB of a freshly formatted 1025 MiB file), at QD 1 and QD 16.

Per run `perf stat -p PID` counts the server's CPU time (task-clock, user
and kernel, every thread, those the connection starts included), context
switches and CPU migrations while fio runs, and fio reports its own CPU:
so a stack's gap can be told apart as CPU per write or as waiting (a
thread that sleeps on a lock or a socket switches out). Runs of the stacks
are interleaved and repeated; medians are printed.

Usage: bench/nbd_write_cost.py [--repeats 3] [--dir /dev/shm] [--stacks linear,dcd,...] [--depths 1,16]
  --stacks: linear, a config in examples/ (dcd, replica, log, pool, opt), or
  file (nbdkit's file plugin). LAYOUTD_BIN=PATH serves with another build.
On a machine others load, `chrt -r 10 bench/nbd_write_cost.py ...` runs fio
and the server ahead of every normal process (seconds per run; the kernel
keeps 5% for the rest): runs then agree within about 5%, though the
server's CPU per write stays higher than on a quiet machine (the caches
are still shared with the rest), so shares of linear come out nearer
100% than in a quiet run.
Needs: a release build (cargo build --workspace --release), nbdkit, fio, perf.
"""
import argparse, json, os, statistics, subprocess, sys, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAYOUTD = os.environ.get("LAYOUTD_BIN") or os.path.join(ROOT, "target/release/layoutd")
EVENTS = "task-clock,context-switches,cpu-migrations"


def perf_counts(path):
    """task-clock (ms), context switches, migrations from `perf stat -x,`."""
    got = {}
    for line in open(path):
        f = line.strip().split(",")
        if len(f) > 2 and f[2] in EVENTS.split(","):
            got[f[2]] = float(f[0])
    return got


def run(stack, depth, d, io_size):
    img = os.path.join(d, f"layoutd-cost-{stack}.img")
    sock = os.path.join(d, f"layoutd-cost-{stack}.sock")
    for p in (img, sock):
        if os.path.exists(p):
            os.unlink(p)
    if stack == "file":  # nbdkit's own file plugin, for reference
        with open(img, "wb") as f:
            f.truncate(1025 << 20)
        cmd = ["nbdkit", "--foreground", "--threads", "16", "--unix", sock, "file", img]
    else:
        cfg = [] if stack == "linear" else ["--config", os.path.join(ROOT, "examples", stack + ".toml")]
        f = subprocess.run([LAYOUTD, "format", "--device", img, "--size", "1025M"] + cfg, capture_output=True, text=True)
        if f.returncode != 0:
            sys.exit(f"nbd_write_cost: layoutd format of {img} ({stack}) failed:\n{f.stderr.strip()}")
        cmd = [LAYOUTD, "serve", "--device", img, "--socket", sock, "--threads", "16"]
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(400):
            if os.path.exists(sock):
                break
            time.sleep(0.025)
        time.sleep(0.1)  # let the server's threads settle
        stat_out = img + ".perf"
        perf = subprocess.Popen(["perf", "stat", "-x,", "-e", EVENTS, "-p", str(p.pid), "-o", stat_out],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.2)  # perf attaches
        out = subprocess.run(["fio", "--name=b", "--ioengine=nbd", f"--uri=nbd+unix:///?socket={sock}",
                              "--rw=randwrite", "--bs=4k", f"--iodepth={depth}", "--size=900M",
                              f"--io_size={io_size}", "--output-format=json"],
                             check=True, capture_output=True, text=True).stdout
        perf.send_signal(2)
        perf.wait()
        c = perf_counts(stat_out)
        os.unlink(stat_out)
    finally:
        p.terminate()
        p.wait()
        for f in (img, sock + ".ctl"):
            if os.path.exists(f):
                os.unlink(f)
    job = json.loads(out[out.index("{"):])["jobs"][0]
    w = job["write"]
    n = w["total_ios"]
    secs = w["runtime"] / 1000 if w["runtime"] else n / w["iops"]
    return {"iops": w["iops"], "srv_cpu_us": 1e3 * c["task-clock"] / n,
            "srv_csw": c["context-switches"] / n, "srv_migr": c["cpu-migrations"] / n,
            "fio_cpu_us": 1e6 * secs * (job["usr_cpu"] + job["sys_cpu"]) / 100 / n}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--dir", default="/dev/shm")
    ap.add_argument("--stacks", default="linear,dcd,replica,log,pool,opt")
    ap.add_argument("--depths", default="1,16")
    ap.add_argument("--io-size", default="48M")
    ap.add_argument("--json", help="also write every run here")
    a = ap.parse_args()
    os.makedirs(a.dir, exist_ok=True)
    stacks = a.stacks.split(",")
    res = {}
    for depth in [int(x) for x in a.depths.split(",")]:
        for r in range(a.repeats):
            for st in stacks:  # interleaved
                x = run(st, depth, a.dir, a.io_size)
                res.setdefault((depth, st), []).append(x)
                print(f"QD{depth:<2} {st:8} run {r + 1}: {x['iops']:9.0f} IOPS", file=sys.stderr)
    keys = ["iops", "srv_cpu_us", "srv_csw", "srv_migr", "fio_cpu_us"]
    print("| QD | stack | IOPS | / linear | server CPU us/write | server context switches/write | "
          "server migrations/write | fio CPU us/write |")
    print("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for (depth, st), runs in res.items():
        med = {k: statistics.median(x[k] for x in runs) for k in keys}
        lin = statistics.median(x["iops"] for x in res[(depth, "linear")]) if (depth, "linear") in res else None
        share = f"{100 * med['iops'] / lin:.0f}%" if lin else "-"
        print(f"| {depth} | {st} | {med['iops']:,.0f} | {share} | {med['srv_cpu_us']:.2f} | "
              f"{med['srv_csw']:.2f} | {med['srv_migr']:.3f} | {med['fio_cpu_us']:.2f} |")
    if a.json:
        json.dump({f"QD{d} {s}": v for (d, s), v in res.items()}, open(a.json, "w"), indent=1)


if __name__ == "__main__":
    main()
