"""pool-kernel: the snapshot thesis's chapter-3 workloads on a real kernel tree.

Shah (UBC 2006, shared/seeds/002_*), §3.1 "kernel compile and grep" and
§3.3 "partial file system rewrite", on the Linux tree of the Debian package
`linux-source` (apt-get install linux-source):

  unpack            the whole tree into the origin's file system
  snapshot-1        a read-only snapshot: ext4 on a `pool` stack: fsfreeze,
                    `layoutd snapshot create --socket S --ro snap1` against
                    the running serve, a marker read, thaw, then the snapshot's
                    export mounted read-only (nbdfuse, losetup -r, mount -o
                    ro,noload); btrfs (on linear): `btrfs subvolume snapshot -r`
  build             cold caches, on the origin: `make tinyconfig`, then
                    `make -jN TARGETS` (default `init/ kernel/`), cut at
                    --build-seconds (say so in the report if it was)
  idle-1            --idle seconds with no request (a pool's defragmenter runs)
  grep-origin       cold caches: `grep -r` of a string that is nowhere, over the
  grep-snapshot     tree on the origin, then on the snapshot
  snapshot-2        §3.3: snap1 goes (ext4: export unmounted, `snapshot
                    delete`; btrfs: `subvolume delete`), the origin's files
                    are listed, a second read-only snapshot snap2 is taken
  rewrite           a seeded random --rewrite-share of the listed files, each
                    rewritten in place from its start: 4 KiB written, 8 KiB
                    skipped, to its end (the thesis's script skips 8K)
  idle-2            as idle-1
  grep-origin-2     cold caches: grep on the origin, then on snap2
  grep-snapshot-2

With --no-snapshots (the plain baseline, ext4 on `linear`: "build on the
origin vs on a plain volume") the snapshot phases and the snapshot greps are
skipped; snapshot-2 becomes `list` (the origin's files are listed for the
rewrite, nothing else), so every other phase runs as on a pool.

Each snapshot operation is followed by a marker read; the phase records
`[marker, message]` pairs in `messages`, which the simulator replays as
`layoutd sim --message @N:MESSAGE` (bench/pool_kernel.py).
"""

import glob
import os
import random
import subprocess
import time

import linux_source
from log import log
from rig import sh

NAME = "pool-kernel"
HELP = "the snapshot thesis's kernel unpack/build/grep and partial rewrite, with online snapshots"
DESCRIPTION = __doc__

DEFAULTS = {
    "size": "4G",
    "config": None,  # ext4 needs a pool stack (--config); btrfs runs on linear
    "emulate": None,  # captures run at tmpfs speed; bench/pool_kernel.py times them on the HDD model
    "mount_opts": "",
}

NOWHERE = "layoutd-pool-kernel-no-such-string"


def add_args(ap):
    g = ap.add_argument_group("pool-kernel workload")
    linux_source.add_arg(g)
    g.add_argument("--build-targets", default="init/ kernel/", help="make targets after tinyconfig (default: %(default)s)")
    g.add_argument("--build-jobs", type=int, default=2, help="make -j (default: %(default)s)")
    g.add_argument("--build-seconds", type=int, default=600, help="the build is cut here (default: %(default)s)")
    g.add_argument("--idle", type=int, default=30, help="seconds of the idle phases (default: %(default)s)")
    g.add_argument("--rewrite-share", type=float, default=0.1,
                   help="share of the files the partial rewrite picks (default: %(default)s)")
    g.add_argument("--seed", type=int, default=1, help="the rewrite's choice of files (default: %(default)s)")
    g.add_argument("--no-snapshots", action="store_true",
                   help="the plain baseline: skip snapshot-1, grep-snapshot, grep-snapshot-2 and the snapshots of "
                        "snapshot-2 (which becomes `list`), so ext4 runs on linear without --config")


class Workload:
    def __init__(self, args):
        self.a = args
        if args.fs == "ext4" and not args.config and not args.no_snapshots:
            raise SystemExit("pool-kernel: ext4 needs a pool stack for online snapshots (--config, e.g. "
                             "bench/workloads/pool/kernel/capture.toml); btrfs snapshots itself on linear")
        self.tarball, _ = linux_source.tarball(args.tarball, "pool-kernel")
        self.rig = None
        self.snap = None  # the mounted snapshot's tree

    def attach(self, rig):
        self.rig = rig

    def params(self):
        return {"tarball": os.path.basename(self.tarball), "build_targets": self.a.build_targets,
                "build_jobs": self.a.build_jobs, "build_seconds_max": self.a.build_seconds, "idle_seconds": self.a.idle,
                "rewrite_share": self.a.rewrite_share, "seed": self.a.seed, "snapshots": not self.a.no_snapshots,
                "gcc": subprocess.run(["gcc", "--version"], capture_output=True, text=True).stdout.splitlines()[0]}

    def phases(self):
        """[(name, kind, drop caches before?, function(mnt) -> dict)]"""
        idle = lambda mnt: time.sleep(self.a.idle) or {}  # noqa: E731
        if self.a.no_snapshots:
            return [("unpack", "write", False, self.unpack),
                    ("build", "write", True, self.build),
                    ("idle-1", "idle", False, idle),
                    ("grep-origin", "read", True, lambda mnt: self.grep(os.path.join(mnt, "linux"))),
                    ("list", "write", False, self.list_files),
                    ("rewrite", "write", False, self.rewrite),
                    ("idle-2", "idle", False, idle),
                    ("grep-origin-2", "read", True, lambda mnt: self.grep(os.path.join(mnt, "linux")))]
        return [("unpack", "write", False, self.unpack),
                ("snapshot-1", "write", False, lambda mnt: self.snapshot(mnt, "snap1", None)),
                ("build", "write", True, self.build),
                ("idle-1", "idle", False, idle),
                ("grep-origin", "read", True, lambda mnt: self.grep(os.path.join(mnt, "linux"))),
                ("grep-snapshot", "read", True, lambda mnt: self.grep(self.snap)),
                ("snapshot-2", "write", False, lambda mnt: self.snapshot(mnt, "snap2", "snap1")),
                ("rewrite", "write", False, self.rewrite),
                ("idle-2", "idle", False, idle),
                ("grep-origin-2", "read", True, lambda mnt: self.grep(os.path.join(mnt, "linux"))),
                ("grep-snapshot-2", "read", True, lambda mnt: self.grep(self.snap))]

    def unpack(self, mnt):
        tree = os.path.join(mnt, "linux")
        if self.rig.fs == "btrfs":
            sh(["btrfs", "subvolume", "create", tree])
        else:
            os.makedirs(tree)
        subprocess.run(["tar", "-xJf", self.tarball, "-C", tree, "--strip-components=1"], check=True)
        self.files = None
        n = sum(len(f) for _, _, f in os.walk(tree))
        log(f"  unpacked {n} files")
        return {"files": n}

    def _op(self, text):
        """A marker read right after a snapshot operation: where the replay delivers it."""
        return [self.rig.marker(text), text]

    def list_files(self, mnt):
        """snapshot-2's listing of the origin's files for the rewrite (alone: the --no-snapshots `list`)."""
        self.files = sorted(os.path.join(d, f) for d, _, fs in os.walk(os.path.join(mnt, "linux")) for f in fs)
        return {}

    def snapshot(self, mnt, name, drop):
        tree = os.path.join(mnt, "linux")
        msgs = []
        if drop:
            if self.rig.fs == "btrfs":
                sh(["btrfs", "subvolume", "delete", os.path.join(mnt, drop)])
            else:
                self.rig.detach_export(drop)
                sh([self.rig.layoutd, "snapshot", "delete", "--socket", self.rig.sock, drop])
            msgs.append(self._op(f"snapshot delete {drop}"))
            self.list_files(mnt)
        os.sync()
        if self.rig.fs == "btrfs":
            sh(["btrfs", "subvolume", "snapshot", "-r", tree, os.path.join(mnt, name)])
            msgs.append(self._op(f"snapshot create {name} ro"))
            self.snap = os.path.join(mnt, name)
        else:
            # ext4 frozen: the snapshot holds a clean file system (no journal to replay)
            sh(["fsfreeze", "-f", mnt])
            try:
                sh([self.rig.layoutd, "snapshot", "create", "--socket", self.rig.sock, "--ro", name])
                msgs.append(self._op(f"snapshot create {name} ro"))
            finally:
                sh(["fsfreeze", "-u", mnt])
            self.snap = os.path.join(self.rig.attach_export(name), "linux")
        return {"messages": msgs}

    def build(self, mnt):
        tree = os.path.join(mnt, "linux")
        sh(["make", "-s", "-C", tree, "tinyconfig"])
        t = time.monotonic()
        p = subprocess.run(["timeout", str(self.a.build_seconds), "make", "-s", "-C", tree, f"-j{self.a.build_jobs}",
                            *self.a.build_targets.split()], capture_output=True, text=True)
        secs = time.monotonic() - t
        if p.returncode not in (0, 124):
            raise RuntimeError(f"make exited {p.returncode}: {p.stderr.strip()[-800:]}")
        objs = len(glob.glob(os.path.join(tree, "**", "*.o"), recursive=True))
        log(f"  build {'cut at the limit' if p.returncode == 124 else 'done'} after {secs:.0f} s, {objs} objects")
        return {"build_completed": p.returncode == 0, "build_wall_seconds": round(secs, 1), "objects": objs}

    def grep(self, tree):
        p = subprocess.run(["grep", "-r", "--", NOWHERE, tree], capture_output=True, text=True,
                           env={**os.environ, "LC_ALL": "C"})
        if p.returncode != 1:  # 1: found nowhere, every file read
            raise RuntimeError(f"grep -r {tree} exited {p.returncode}: {(p.stdout + p.stderr).strip()[-500:]}")
        return {}

    def rewrite(self, mnt):
        rng = random.Random(self.a.seed)
        picked = rng.sample(self.files, int(len(self.files) * self.a.rewrite_share))
        writes = 0
        data = b"\x5a" * 4096
        for path in picked:
            if os.path.islink(path):
                continue
            size = os.path.getsize(path)
            fd = os.open(path, os.O_WRONLY)
            try:
                for off in range(0, size, 12288):
                    os.pwrite(fd, data[:min(4096, size - off)], off)
                    writes += 1
            finally:
                os.close(fd)
        log(f"  rewrote {len(picked)} of {len(self.files)} files, {writes} writes of up to 4 KiB")
        return {"files_rewritten": len(picked), "files_listed": len(self.files), "writes": writes}
