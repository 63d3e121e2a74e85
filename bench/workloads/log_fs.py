"""log-fs: the SSR-LFS paper's file-system benchmarks, Postmark and fio.

Oh, Kim, Lee & Noh (SYSTOR 2010, shared/seeds/003_*), "Performance
Evaluation": Postmark with medium files (16 KiB - 256 KiB; 1,000
subdirectories, 100,000 files, 100,000 transactions) and small files (4 KiB -
16 KiB; 1,000 subdirectories, 500,000 files, 200,000 transactions); fio with
4 KiB requests in sync mode on a 1 GB file, sequential and random write and
read, 1 worker and 4 workers (the LIBU figures). Their disk: Seagate
ST3160815AS.

Here, scaled to fit a volume of a few GiB (--scale divides the Postmark
file and transaction counts and the subdirectories; --fio-mib is each fio
worker's file):
  postmark-medium   Postmark 1.51 (the Debian `postmark` binary), medium files
  postmark-small    the same, small files
  fio-J-PATTERN     for J in 1, 4 and PATTERN in seq-write, rand-write,
                    seq-read, rand-read: fio, psync engine, 4 KiB, sync=1
                    (O_SYNC writes), one file of --fio-mib per worker; the
                    read phases start with cold caches; the files are
                    deleted after each J.
  fio-J-idle        with --fio-idle-s S: S seconds without requests after
                    the random write (the idle work the issue's "read
                    after the update phase" row needs).
Postmark runs in a memory cgroup of --memory-mib (page cache included),
as on the paper's machine, whose file sets were far larger than its RAM:
without it this machine's page cache would absorb the whole file set and
Postmark would delete its files before any of them reached the disk.
Postmark deletes its files at the end of its run. Mount with `discard`
(the default here) so the layers below learn what the file system freed,
as a log-structured file system knows it itself.
"""

import json
import os
import shutil
import subprocess
import time

from log import log

NAME = "log-fs"
HELP = "the SSR-LFS paper's Postmark (medium and small files) and fio (4 KiB sync, 1 and 4 workers)"
DESCRIPTION = __doc__

DEFAULTS = {
    "size": "1G",
    "config": None,  # plain linear: capture once, then replay through each stack in the simulator
    "emulate": None,  # captures run at tmpfs speed; bench/log_fs.py times them on the HDD model
    "mount_opts": "discard",
}

PATTERNS = (("seq-write", "write"), ("rand-write", "randwrite"), ("seq-read", "read"), ("rand-read", "randread"))


def add_args(ap):
    g = ap.add_argument_group("log-fs workload")
    g.add_argument("--scale", type=int, default=50,
                   help="divide the paper's Postmark counts by this (default: %(default)s)")
    g.add_argument("--fio-mib", type=int, default=64, help="MiB of each fio worker's file (default: %(default)s)")
    g.add_argument("--fio-jobs", default="1,4", help="fio worker counts (default: %(default)s)")
    g.add_argument("--parts", default="postmark,fio", help="which parts to run (default: %(default)s)")
    g.add_argument("--fio-idle-s", type=float, default=0,
                   help="seconds of idle time (no requests) after each random write, as a phase of its own "
                        "(`fio-J-idle`), before the reads: the idle work a log does there (default: %(default)s)")
    g.add_argument("--seed", type=int, default=1, help="Postmark's seed (default: %(default)s)")
    g.add_argument("--memory-mib", type=int, default=64,
                   help="memory (page cache included) of Postmark's cgroup; 0: no limit (default: %(default)s)")


CGROUP_V2 = "/sys/fs/cgroup"
CGROUP_V1 = "/sys/fs/cgroup/memory"


def memory_cgroup(mib):
    """A fresh memory cgroup limited to `mib` MiB (v2 `memory.max`, or v1
    `memory.limit_in_bytes`), as (directory, file to write a pid into)."""
    for root, limit in ((CGROUP_V2, "memory.max"), (CGROUP_V1, "memory.limit_in_bytes")):
        if os.path.exists(os.path.join(root, "cgroup.procs")) and (
                root == CGROUP_V1 or "memory" in open(os.path.join(root, "cgroup.controllers")).read()):
            d = os.path.join(root, f"layoutd-bench-{os.getpid()}")
            os.makedirs(d, exist_ok=True)
            with open(os.path.join(d, limit), "w") as fh:
                fh.write(str(mib << 20))
            return d
    raise RuntimeError("no memory cgroup controller found (cgroup v2 with `memory`, or v1 at "
                       f"{CGROUP_V1}); run with --memory-mib 0 to run Postmark without a memory limit")


def run_limited(cmd, mib):
    """Runs cmd (capture output) inside a memory cgroup of `mib` MiB, or unlimited if mib is 0."""
    if not mib:
        return subprocess.run(cmd, capture_output=True, text=True)
    d = memory_cgroup(mib)
    procs = os.path.join(d, "cgroup.procs")

    def enter():
        with open(procs, "w") as fh:
            fh.write(str(os.getpid()))
    try:
        return subprocess.run(cmd, capture_output=True, text=True, preexec_fn=enter)
    finally:
        try:
            os.rmdir(d)
        except OSError as e:
            log(f"  warning: could not remove cgroup {d}: {e}")


# The paper's Postmark runs: (name, min bytes, max bytes, subdirectories, files, transactions).
POSTMARK = (("postmark-medium", 16 << 10, 256 << 10, 1000, 100_000, 100_000),
            ("postmark-small", 4 << 10, 16 << 10, 1000, 500_000, 200_000))


class Workload:
    def __init__(self, args):
        self.a = args
        for tool, pkg in (("postmark", "postmark"), ("fio", "fio")):
            if tool in args.parts and shutil.which(tool) is None:
                raise SystemExit(f"log-fs: {tool} is not installed (apt-get install {pkg})")
        self.jobs = [int(x) for x in args.fio_jobs.split(",") if x.strip()]

    def postmark_runs(self):
        s = self.a.scale
        return [(n, lo, hi, max(1, d // s), max(1, f // s), max(1, t // s)) for n, lo, hi, d, f, t in POSTMARK]

    def params(self):
        return {"scale": self.a.scale, "postmark": [
            {"phase": n, "min_bytes": lo, "max_bytes": hi, "subdirectories": d, "files": f, "transactions": t}
            for n, lo, hi, d, f, t in self.postmark_runs()],
            "fio_mib_per_worker": self.a.fio_mib, "fio_jobs": self.jobs, "seed": self.a.seed,
            "parts": self.a.parts, "postmark_memory_mib": self.a.memory_mib, "fio_idle_s": self.a.fio_idle_s}

    def phases(self):
        """[(name, kind, drop caches before?, function(mnt) -> dict)]"""
        out = []
        if "postmark" in self.a.parts:
            for run in self.postmark_runs():
                out.append((run[0], "write", False, lambda mnt, run=run: self.postmark(mnt, *run)))
        if "fio" in self.a.parts:
            for j in self.jobs:
                for name, rw in PATTERNS:
                    read = "read" in rw
                    out.append((f"fio-{j}-{name}", "read" if read else "write", read,
                                lambda mnt, j=j, rw=rw: self.fio(mnt, j, rw)))
                    if rw == "randwrite" and self.a.fio_idle_s > 0:
                        out.append((f"fio-{j}-idle", "write", False, lambda mnt: self.idle()))
                out.append((f"fio-{j}-delete", "write", False, lambda mnt, j=j: self.fio_delete(mnt, j)))
        return out

    def postmark(self, mnt, name, lo, hi, dirs, files, transactions):
        where = os.path.join(mnt, name)
        os.makedirs(where, exist_ok=True)
        cfg = os.path.join(os.path.dirname(mnt), f"{name}.pmrc")
        with open(cfg, "w") as fh:
            fh.write(f"set size {lo} {hi}\nset number {files}\nset transactions {transactions}\n"
                     f"set subdirectories {dirs}\nset location {where}\nset seed {self.a.seed}\n"
                     "set buffering false\nrun\nquit\n")
        log(f"  postmark: {files} files of {lo}-{hi} bytes in {dirs} dirs, {transactions} transactions")
        p = run_limited(["postmark", cfg], self.a.memory_mib)
        if p.returncode != 0:
            raise RuntimeError(f"postmark {cfg} exited {p.returncode}: {p.stderr.strip()[-500:]}")
        os.rmdir(where)
        return {"postmark_report": p.stdout.strip().splitlines()[-12:]}

    def fio(self, mnt, jobs, rw):
        where = os.path.join(mnt, f"fio-{jobs}")
        os.makedirs(where, exist_ok=True)
        cmd = ["fio", "--name=log-fs", f"--directory={where}", f"--size={self.a.fio_mib}M", "--bs=4k",
               f"--rw={rw}", "--ioengine=psync", "--sync=1", f"--numjobs={jobs}", "--group_reporting",
               "--randrepeat=1", "--output-format=json"]
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            raise RuntimeError(f"`{' '.join(cmd)}` exited {p.returncode}: {p.stderr.strip()[-500:]}")
        j = json.loads(p.stdout[p.stdout.index("{"):])["jobs"][0]
        side = j["read"] if "read" in rw else j["write"]
        return {"fio_command": " ".join(cmd), "fio_bytes": side["io_bytes"], "fio_iops_live": side["iops"]}

    def idle(self):
        log(f"  idle: {self.a.fio_idle_s:g} s without requests")
        time.sleep(self.a.fio_idle_s)
        return {"idle_seconds": self.a.fio_idle_s}

    def fio_delete(self, mnt, jobs):
        shutil.rmtree(os.path.join(mnt, f"fio-{jobs}"))
        return {}
