#!/usr/bin/env python3
"""The `pool` benchmark on a real kernel tree (issue 14, docs/pool.md): the
snapshot thesis's chapter 3 (shared/seeds/002_*: §3.1 kernel build and grep,
§3.3 partial rewrite), captured live once per file system, then replayed
closed-loop in `layoutd sim` on the thesis's class of disk (wd800).

Steps:
  1. capture (skipped with --no-capture; needs root): the `pool-kernel`
     workload of bench/run (bench/workloads/pool_kernel.py: unpack, online
     snapshot, tinyconfig build, cold grep on origin and snapshot, second
     snapshot, partial rewrite, cold grep again), at tmpfs speed:
       ext4   served from a pool (bench/workloads/pool/kernel/capture.toml),
              snapshots by `layoutd snapshot create --socket`, the snapshot
              read through its own export;
       btrfs  on plain linear, snapshots by `btrfs subvolume snapshot -r`
              (the peer a user would pick instead);
  2. replay: each capture as one stream (tracefile.one_stream), through
     every stack of bench/workloads/pool/kernel/ (ext4) or plain linear
     (btrfs), `layoutd sim --closed-loop --disk wd800 --record-trace`; the
     snapshot operations go in with `--message @N:TEXT` at the marker read
     the capture made right after each; the simulated record is cut into
     phases at the harness's marker reads.

A phase's figure is its disk-busy seconds (time with a request outstanding
at the top of the stack; the capture's think time is left out, and so is
a pool's background work unless a request waits for it). Deterministic:
rerunning step 2 gives the same figures. Writes
bench/results/pool/kernel.md (the table above the notes marker; the notes
are kept) and kernel-summary.json; with another --disk, kernel-DISK.md and
kernel-summary-DISK.json.

Usage: bench/pool_kernel.py [--no-capture] [--fs ext4,btrfs] [--jobs 2] [--disk wd800] [-- bench/run options]
"""
import concurrent.futures
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench/harness"))
import capreplay  # noqa: E402
import readme  # noqa: E402
import tracefile  # noqa: E402

OUT = os.path.join(ROOT, "bench/results/pool")
TMP = os.path.join(OUT, "tmp")
STACK_DIR = os.path.join(ROOT, "bench/workloads/pool/kernel")
STACKS = {"ext4": ["plain", "contiguous", "sliced-30", "sliced-1024", "sliced-8192", "nearest",
                  "contiguous-redirect", "contiguous-redirect-defrag", "sliced-30-redirect-defrag", "sliced-8192-redirect",
                  "nearest-redirect"], "btrfs": ["plain"]}
CAPTURE = {"ext4": ["--config", os.path.join(STACK_DIR, "capture.toml"), "--size", "4G"],
           "btrfs": ["--size", "3G"]}
MARKER = "<!-- Notes below this line are written by hand and kept when bench/pool_kernel.py rewrites this file. -->"


def layoutd():
    for d in ("release", "debug"):
        p = os.path.join(ROOT, "target", d, "layoutd")
        if os.access(p, os.X_OK):
            return p
    sys.exit("pool_kernel: no target/release/layoutd (cargo build --release -p layoutd)")


def capture(fs, extra):
    cmd = [os.path.join(ROOT, "bench/run"), "pool-kernel", "--fs", fs, *CAPTURE[fs],
           "--out", os.path.join(OUT, f"kernel-{fs}"), *extra]
    print(f"capture: {' '.join(cmd)}", file=sys.stderr)
    subprocess.run(cmd, check=True)


def messages(trace, result):
    """Each snapshot operation goes before the marker read the capture made right after it."""
    return tracefile.messages(trace, result["rig"]["export_bytes"], result["phases"])


def replay(l, fs, stack, trace, msgs, disk):
    extra = [] if stack == "plain" else [f"--message=@{n}:{text}" for n, text in msgs]
    j, phases = capreplay.replay(l, trace, os.path.join(STACK_DIR, stack + ".toml"), disk,
                                 os.path.join(TMP, f"kernel-{fs}-{stack}-{disk}"), os.path.join(OUT, f"kernel-{fs}"),
                                 extra)
    pool = next((x["counters"] for x in j["stack"]["layers"] if x["target"] == "pool"), None)
    return fs, stack, {"phases": phases, "pool": pool, "simulated_seconds": j.get("simulated_seconds")}


def suffix(disk):
    """Output names: none for the thesis's disk, -DISK for another."""
    return "" if disk == "wd800" else f"-{disk}"


def pct(a, b):
    return f"{(a / b - 1) * 100:+.1f}%" if a and b else "—"


def report(res, fss, disk, cmd):
    L = ["# pool: the kernel-tree workload (thesis ch. 3), captured live, replayed on " + disk, "",
         "A benchmark, not a test. Each file system's run is captured once live at tmpfs speed "
         "(`bench/run pool-kernel`, details in `kernel-FS/README.md` and `result.json`), then replayed "
         f"closed-loop in `layoutd sim` on `{disk}` through each stack of `bench/workloads/pool/kernel/` "
         "(ext4) or plain `linear` (btrfs with its own snapshots). Deterministic.", "",
         f"Reproduce the simulator half: `{cmd} --no-capture` (the captures are committed as "
         "`kernel-FS/trace.gz`); the whole: `sudo " + cmd + "`.", "",
         "Cells: disk-busy seconds of the phase (simulated; the capture's think time is left out).", ""]
    for fs in fss:
        r = res[fs]
        stacks = STACKS[fs]
        names = [n for n in r[stacks[0]]["phases"] if not n.startswith("idle")]
        L += [f"## {fs}" + (" on a pool (online `layoutd snapshot create`)" if fs == "ext4" else
                              " on linear (`btrfs subvolume snapshot -r`)"), "",
              "| phase | " + " | ".join(stacks) + " |", "| --- | " + " | ".join("---:" for _ in stacks) + " |"]
        for n in names:
            L.append(f"| {n} | " + " | ".join(f"{r[s]['phases'][n]['busy_s']:.2f}" for s in stacks) + " |")
        L += ["", "| measure | " + " | ".join(stacks) + " | goal |",
              "| --- | " + " | ".join("---:" for _ in stacks) + " | --- |"]
        ph = lambda s, n: r[s]["phases"][n]["busy_s"]  # noqa: E731
        plain = res.get("ext4", {}).get("plain")  # the plain volume: ext4 on linear, no snapshot
        vs_plain = lambda n: lambda s: pct(ph(s, n), plain["phases"][n]["busy_s"]) if plain else "—"  # noqa: E731
        has_snap = lambda s: s != "plain" or fs == "btrfs"  # noqa: E731
        of = "" if fs == "ext4" else " (ext4's)"
        rows = [("grep on snapshot vs on origin",
                 lambda s: pct(ph(s, "grep-snapshot"), ph(s, "grep-origin")) if has_snap(s) else "—", "≤ +10%"),
                (f"build on origin vs plain volume{of}", vs_plain("build"), "≤ +5%"),
                ("partial rewrite: snapshot read vs origin read",
                 lambda s: pct(ph(s, "grep-snapshot-2"), ph(s, "grep-origin-2")) if has_snap(s) else "—", "≤ +15%"),
                (f"unpack vs plain volume{of}", vs_plain("unpack"), "—"),
                (f"rewrite vs plain volume{of}", vs_plain("rewrite"), "—"),
                (f"grep on origin vs plain volume{of}", vs_plain("grep-origin"), "—"),
                (f"partial rewrite: snapshot read vs plain volume's read{of}",
                 lambda s: pct(ph(s, "grep-snapshot-2"), plain["phases"]["grep-origin-2"]["busy_s"])
                 if plain and has_snap(s) else "—", "—"),
                ("metadata bytes per allocated chunk", lambda s: f"{r[s]['pool']['metadata_bytes_per_chunk_milli'] / 1000:.1f}"
                 if r[s]["pool"] else "—", "< 48"),
                ("mean copy distance (chunks)", lambda s: f"{r[s]['pool']['copy_distance_mean_chunks_milli'] / 1000:.1f}"
                 if r[s]["pool"] else "—", "—"),
                ("chunks copied / pool commits / defrag moves",
                 lambda s: f"{r[s]['pool']['chunks_copied_count']} / {r[s]['pool']['commits_count']} / "
                 f"{r[s]['pool']['defrag_moves_count']}" if r[s]["pool"] else "—", "—")]
        for label, f, goal in rows:
            L.append(f"| {label} | " + " | ".join(f(s) for s in stacks) + f" | {goal} |")
        L.append("")
    readme.write_keeping_notes(os.path.join(OUT, f"kernel{suffix(disk)}.md"), L + [MARKER], MARKER)
    print("\n".join(L))


def main():
    ap = capreplay.parser(__doc__)
    ap.add_argument("--disk", default="wd800", help="disk model (default: %(default)s)")
    a = ap.parse_args()
    os.makedirs(TMP, exist_ok=True)
    l = layoutd()
    tracefile.use(l)
    fss = capreplay.captures(a, "pool_kernel", capture, lambda fs: os.path.join(OUT, f"kernel-{fs}"))
    traces, msgs = {}, {}
    for fs in fss:
        traces[fs] = tracefile.one_stream(os.path.join(OUT, f"kernel-{fs}", "trace.gz"),
                                          os.path.join(TMP, f"kernel-{fs}.trace.gz"))
        msgs[fs] = messages(traces[fs], json.load(open(os.path.join(OUT, f"kernel-{fs}", "result.json"))))
        print(f"{fs}: messages {msgs[fs]}", file=sys.stderr)
    res = {}
    with concurrent.futures.ThreadPoolExecutor(a.jobs) as ex:
        for fs, stack, r in ex.map(lambda fs_s: replay(l, *fs_s, traces[fs_s[0]], msgs[fs_s[0]], a.disk),
                                   [(f, s) for f in fss for s in STACKS[f]]):
            res.setdefault(fs, {})[stack] = r
            print(f"{fs:6} {stack:12} busy {sum(p['busy_s'] for p in r['phases'].values()):9.1f} s", file=sys.stderr)
    with open(os.path.join(OUT, f"kernel-summary{suffix(a.disk)}.json"), "w") as fh:
        json.dump({"disk": a.disk, "messages": msgs, "runs": res}, fh, indent=1)
    cmd = "bench/pool_kernel.py" + ("" if a.fs == "ext4,btrfs" else f" --fs {a.fs}") + \
        ("" if a.disk == "wd800" else f" --disk {a.disk}")
    report(res, fss, a.disk, cmd)


if __name__ == "__main__":
    main()
