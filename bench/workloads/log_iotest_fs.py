"""log-iotest: the SSR-LFS paper's IO TEST on a real file system.

Oh, Kim, Lee & Noh (SYSTOR 2010, shared/seeds/003_*), the IO TEST: create
64 KiB files until the file system is 90% full, delete random ones down to
the target utilisation, then random updates of a fixed amount of file data.
Issue 13 adds a sequential read of the remaining files after the updates.
Phases (seeded, so two captures send the same file operations):

  create   64 KiB files (one write each, buffered; 256 a directory) until
           the file system is max(90, UTIL)% full, as df counts (used over
           used + available; looked at every 32 files, after a sync once it
           looks full; or until ENOSPC)
  delete   random files removed (seeded) until UTIL% remain; mount with
           `discard` (the default here) so the volume learns what was freed
  update   --update-mib of 4 KiB writes, O_DIRECT, each at a random block of
           a random remaining file (seeded): what reaches the volume is the
           updates themselves, in their order, not the page cache's writeback
  read     cold caches, then every remaining file read whole, in creation
           order (the file system allocated them in that order)

Files kept: those that leave UTIL% used, a file costing the blocks the
create phase used over its files (metadata included). ext4 is made with
`-m 0` (bench/log_iotest_fs.py passes it): no blocks reserved for root, so
"full" is all of its blocks; btrfs's "available" is its own estimate, net of
its metadata (DUP on one device). A file system that runs out of space in `update` (btrfs keeps a whole 64 KiB
extent allocated while any block of it is still referenced) stops the phase
and says how much it wrote (`update_bytes`, `enospc`).

Captured at tmpfs speed on plain linear; bench/log_iotest_fs.py replays the
captures on the HDD model through linear and each `log` policy.
"""

import errno
import mmap
import os
import random

from log import log

NAME = "log-iotest"
HELP = "the SSR-LFS paper's IO TEST (64 KiB files to 90%, delete to UTIL, 4 KiB random updates) and a read"
DESCRIPTION = __doc__

DEFAULTS = {
    "size": "1024M",
    "config": None,  # plain linear: capture once, replay through each stack in the simulator
    "emulate": None,  # tmpfs speed; bench/log_iotest_fs.py times the captures on the HDD model
    "mount_opts": "discard",
}

KIB = 1024
FILE = 64 * KIB
BLOCK = 4 * KIB
PER_DIR = 256
CHECK = 32  # files created between two looks at statvfs


def used_pct(st):
    """How full the file system says it is, as df's Use%: used blocks over
    used plus available to unprivileged users (ext4 is made with `-m 0`
    here, so that is all of its blocks; btrfs's available space is its own
    estimate, net of metadata)."""
    used = st.f_blocks - st.f_bfree
    return 100 * used / (used + st.f_bavail) if used + st.f_bavail else 100.0


def add_args(ap):
    g = ap.add_argument_group("log-iotest workload")
    g.add_argument("--util", type=int, default=90, help="target utilisation, percent (default: %(default)s)")
    g.add_argument("--update-mib", type=int, default=512,
                   help="MiB of 4 KiB random updates (default: %(default)s)")
    g.add_argument("--seed", type=int, default=1, help="seed of the deletes and updates (default: %(default)s)")


class Workload:
    def __init__(self, args):
        self.a = args
        self.files = []
        self.live = []

    def params(self):
        return {"util_pct": self.a.util, "fill_pct": max(90, self.a.util), "file_bytes": FILE,
                "update_mib": self.a.update_mib, "seed": self.a.seed,
                "files_created": len(self.files), "files_kept": len(self.live)}

    def phases(self):
        return [("create", "write", False, self.create), ("delete", "write", False, self.delete),
                ("update", "write", False, self.update), ("read", "read", True, self.read)]

    def path(self, mnt, i):
        return os.path.join(mnt, f"d{i // PER_DIR:03}", f"f{i:05}")

    def create(self, mnt):
        fill = max(90, self.a.util)
        st = os.statvfs(mnt)
        used0 = st.f_blocks - st.f_bfree
        data = bytes(range(256)) * (FILE // 256)
        log(f"  create: 64 KiB files to {fill}% full ({st.f_blocks} blocks of {st.f_frsize}, {used0} used)")
        n, enospc = 0, False

        def full():
            # Dirty data counts with the file system's worst-case
            # reservations (ext4 delalloc): so once statvfs says full, sync
            # and look again (a few syncs in all).
            if used_pct(os.statvfs(mnt)) < fill:
                return False
            os.sync()
            return used_pct(os.statvfs(mnt)) >= fill
        while not enospc and (n % CHECK or not full()):
            if n % PER_DIR == 0:
                os.makedirs(os.path.dirname(self.path(mnt, n)), exist_ok=True)
            try:
                with open(self.path(mnt, n), "wb") as fh:
                    fh.write(data)
            except OSError as e:
                if e.errno != errno.ENOSPC:
                    raise
                enospc = True
                if os.path.exists(self.path(mnt, n)):
                    os.unlink(self.path(mnt, n))
                continue
            n += 1
        self.files = list(range(n))
        os.sync()
        end = os.statvfs(mnt)
        used1 = end.f_blocks - end.f_bfree
        # Keep the files that leave UTIL% used: a file costs the blocks the
        # create phase used over its files (the file system's metadata too).
        per_file = (used1 - used0) / n if n else 1
        drop = max(0, -(-(used1 - self.a.util * (used1 + end.f_bavail) / 100) // per_file))
        self.keep = max(0, n - int(drop))
        log(f"  create: {n} files{' (ENOSPC)' if enospc else ''}, {used_pct(end):.1f}% used")
        return {"files": n, "enospc": enospc, "fs_blocks": st.f_blocks, "fs_block_bytes": st.f_frsize,
                "used_blocks_before": used0, "used_blocks_after": used1, "used_pct_after": round(used_pct(end), 2)}

    def delete(self, mnt):
        rng = random.Random(self.a.seed)
        order = list(self.files)
        rng.shuffle(order)
        for i in order[self.keep:]:
            os.unlink(self.path(mnt, i))
        self.live = sorted(order[:self.keep])
        os.sync()
        st = os.statvfs(mnt)
        log(f"  delete: {len(order) - self.keep} files, {self.keep} kept, {used_pct(st):.1f}% used")
        return {"files_deleted": len(order) - self.keep, "files_kept": self.keep,
                "used_blocks_after": st.f_blocks - st.f_bfree, "used_pct_after": round(used_pct(st), 2)}

    def update(self, mnt):
        rng = random.Random(self.a.seed + 1)
        buf = mmap.mmap(-1, BLOCK)  # page-aligned, as O_DIRECT wants
        buf.write(b"\xa5" * BLOCK)
        count = self.a.update_mib * KIB * KIB // BLOCK
        done, enospc = 0, False
        if self.live:
            for _ in range(count):
                f = self.live[rng.randrange(len(self.live))]
                off = rng.randrange(FILE // BLOCK) * BLOCK
                fd = os.open(self.path(mnt, f), os.O_WRONLY | os.O_DIRECT)
                try:
                    os.pwrite(fd, buf, off)
                except OSError as e:
                    if e.errno != errno.ENOSPC:
                        raise
                    enospc = True
                    break
                finally:
                    os.close(fd)
                done += 1
        log(f"  update: {done} writes of 4 KiB{' (ENOSPC, stopped)' if enospc else ''}")
        return {"update_writes": done, "update_bytes": done * BLOCK, "enospc": enospc}

    def read(self, mnt):
        total = 0
        for f in self.live:
            with open(self.path(mnt, f), "rb", buffering=0) as fh:
                while True:
                    b = fh.read(FILE)
                    if not b:
                        break
                    total += len(b)
        log(f"  read: {len(self.live)} files, {total} bytes")
        return {"read_bytes": total}
