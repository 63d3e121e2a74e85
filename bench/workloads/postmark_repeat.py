"""postmark-repeat: the replication paper's modified Postmark, scaled down.

Lifchits (UBC 2008, shared/seeds/000_*), section 5.2: Postmark v1.51 made to
run only its read "transactions" on an existing file set (572,000 files, 4 GB,
100 subdirectories), with a fixed random seed so that every iteration reads
the same files in the same order; about 5,500 s per iteration on ext2 on a
WD800, flat across iterations, 19x faster by iteration 7 with replication.

Here: FILES files of uniform random size in Postmark's default range
(500 - 10,000 bytes, i.e. 9.77 KiB) spread over DIRS subdirectories are created
once (phase `create`, then sync), then READS phases each read every file
completely, in one fixed seeded pseudo-random order, with caches dropped before
each phase. Every read is checked against the CRC32 of what was written.

With --noise (the paper's Figure 5.5, a pattern with noise from a second
process): during each read phase a second thread reads one 4 KiB block of a
seeded random file of the set with O_DIRECT (past the page cache, as the
simulator's noise process reads a random block the create phase wrote) for
each file the first reads, never waiting for it (a backlog is kept, as the
closed-loop replay does); the phase reports the second thread's reads and
mean response time (`noise_reads`, `noise_mean_ms`).
"""

import mmap
import os
import queue
import random
import threading
import time
import zlib

from log import log

NAME = "postmark-repeat"
HELP = "modified Postmark: create small files once, then re-read them all in one fixed random order per phase"
DESCRIPTION = __doc__

# Rig defaults this workload chooses (the command line overrides them).
DEFAULTS = {
    "size": "4G",
    "config": None,  # plain linear stack
    "emulate": "wd800",
    "mount_opts": "",  # kernel default (relatime): the first read of a file updates its atime once
}


def add_args(ap):
    g = ap.add_argument_group("postmark-repeat workload")
    g.add_argument("--files", type=int, default=8000, help="files in the set (default: %(default)s)")
    g.add_argument("--dirs", type=int, default=100, help="subdirectories, as in the paper (default: %(default)s)")
    g.add_argument("--min-bytes", type=int, default=500, help="smallest file, Postmark's default (default: %(default)s)")
    g.add_argument("--max-bytes", type=int, default=10000, help="largest file, Postmark's default (default: %(default)s)")
    g.add_argument("--reads", type=int, default=4, help="read phases (iterations) after creation (default: %(default)s)")
    g.add_argument("--seed", type=int, default=1, help="seed of file sizes, placement, contents and read order (default: %(default)s)")
    g.add_argument("--noise", action="store_true",
                   help="a second thread reads a random 4 KiB block (O_DIRECT) per file read (paper Figure 5.5)")


class Workload:
    def __init__(self, args):
        self.a = args
        rng = random.Random(args.seed)
        self.files = []  # (relative path, size)
        for i in range(args.files):
            d = rng.randrange(args.dirs)
            size = rng.randint(args.min_bytes, args.max_bytes)
            self.files.append((f"s{d:03d}/f{i:06d}", size))
        self.order = list(range(args.files))
        random.Random(args.seed * 1000003 + 7).shuffle(self.order)
        self.crc = [None] * args.files
        self.noise_runs = 0

    def params(self):
        a = self.a
        total = sum(s for _, s in self.files)
        return {"files": a.files, "dirs": a.dirs, "min_bytes": a.min_bytes, "max_bytes": a.max_bytes,
                "reads": a.reads, "seed": a.seed, "noise": a.noise, "total_bytes": total,
                "mean_file_bytes": round(total / max(a.files, 1), 1)}

    def phases(self):
        """[(name, kind, drop caches before?, function(mnt) -> dict)]"""
        out = [("create", "write", False, self.create)]
        for k in range(1, self.a.reads + 1):
            out.append((f"read-{k}", "read", True, self.read_all))
        return out

    def create(self, mnt):
        rng = random.Random(self.a.seed ^ 0xC0FFEE)
        for d in range(self.a.dirs):
            os.makedirs(os.path.join(mnt, f"s{d:03d}"), exist_ok=True)
        written = 0
        t_next = time.monotonic() + 15
        for i, (rel, size) in enumerate(self.files):
            if time.monotonic() >= t_next:
                log(f"  {i}/{len(self.files)} files created")
                t_next += 15
            data = rng.randbytes(size)
            self.crc[i] = zlib.crc32(data)
            with open(os.path.join(mnt, rel), "wb") as fh:
                fh.write(data)
            written += size
        return {"files": len(self.files), "bytes": written}

    def noise(self, mnt, tokens, times):
        """The second process: one O_DIRECT 4 KiB read of a random block of a
        random file per token, until a None token."""
        self.noise_runs += 1
        rng = random.Random(self.a.seed * 7919 + self.noise_runs)  # another order each phase
        buf = mmap.mmap(-1, 4096)
        while tokens.get() is not None:
            rel, size = self.files[rng.randrange(len(self.files))]
            block = rng.randrange((size + 4095) // 4096)
            fd = os.open(os.path.join(mnt, rel), os.O_RDONLY | os.O_DIRECT)
            try:
                t = time.monotonic()
                os.preadv(fd, [buf], block * 4096)
                times.append(time.monotonic() - t)
            finally:
                os.close(fd)

    def read_all(self, mnt):
        if not self.a.noise:
            return self.read_files(mnt, None)
        tokens, times = queue.Queue(), []
        th = threading.Thread(target=self.noise, args=(mnt, tokens, times))
        th.start()
        try:
            out = self.read_files(mnt, tokens)
        finally:
            tokens.put(None)
            th.join()
        out.update(noise_reads=len(times), noise_mean_ms=round(1000 * sum(times) / max(len(times), 1), 3))
        return out

    def read_files(self, mnt, tokens):
        got = 0
        t_next = time.monotonic() + 15
        for n, i in enumerate(self.order):
            if time.monotonic() >= t_next:
                log(f"  {n}/{len(self.order)} files read")
                t_next += 15
            rel, size = self.files[i]
            with open(os.path.join(mnt, rel), "rb") as fh:
                data = fh.read()
            if len(data) != size or zlib.crc32(data) != self.crc[i]:
                raise RuntimeError(f"{rel}: read back {len(data)} bytes that differ from what was written")
            got += len(data)
            if tokens is not None:
                tokens.put(True)
        return {"files": len(self.order), "bytes": got}
