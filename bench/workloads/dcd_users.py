"""dcd-users: the DCD paper's N-user untar, copy and remove.

Nightingale, Hu & Yang (USENIX 1999, shared/seeds/001_*), section 4: "N-user
untar simulates one or more users concurrently and independently un-taring a
tar file to create a directory tree. N-user copy and N-user remove simulate
one or more users concurrently copying (using the `cp -r` command) or
removing (using the `rm -r` command) the entire directory tree created by the
N-user untar benchmark". Their tree: Apache 1.3.3, 31 subdirectories, 508
files, 4.9 MB; cold caches by unmount + mount between runs.

Here: the tree is a directory of the machine's /usr/include (default
`linux`, the linux-libc-dev headers: about 760 files in 29 directories,
4.7 MB), packed at run time into an uncompressed tarball with fixed order,
owner and mtime (`tar --sort=name --mtime=@0 --owner=0 --group=0
--numeric-owner --format=gnu`); its sha256, file count and bytes are in the
report. The tarball lives outside the volume (in --dir, i.e. tmpfs): untar
reads it from RAM and measures only the file system's work.

For each N in --users (default 1,2,4), three phases, caches cold before each
(umount + drop_caches + mount):
  untar-N   N `tar -xf` processes at once, user k into top-level dir nN-uK/
            (top-level, so ext4's Orlov allocator spreads the users' trees
            over the disk as separate users' home directories would be)
  copy-N    N `cp -r nN-uK nN-cK` at once
  remove-N  N `rm -r nN-uK` at once (the copies stay)
The phase ends when every process has exited; the harness then runs `sync`
and reports both (live s = processes + sync; `seconds` in result.json = the
processes alone, what the paper timed).
"""

import atexit
import hashlib
import os
import shutil
import subprocess
import tempfile

from log import log

NAME = "dcd-users"
HELP = "the DCD paper's N-user untar, copy (cp -r) and remove (rm -r) of a /usr/include tree, N = 1, 2, 4"
DESCRIPTION = __doc__

DEFAULTS = {
    "size": "3G",
    "config": None,  # plain linear stack; bench/dcd_replay.sh --live runs it again with examples/dcd.toml
    "emulate": "barracuda4g",  # the DCD paper's disk class (Seagate Barracuda, 4 GB)
    "mount_opts": "",
}


def add_args(ap):
    g = ap.add_argument_group("dcd-users workload")
    g.add_argument("--tree", default="/usr/include/linux",
                   help="directory packed into the tarball (default: %(default)s)")
    g.add_argument("--users", default="1,2,4", help="comma-separated N (default: %(default)s)")
    g.add_argument("--tarball", help="use this tarball instead of packing --tree (its sha256 is recorded)")


def _sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for b in iter(lambda: fh.read(1 << 20), b""):
            h.update(b)
    return h.hexdigest()


def _pkg_of(path):
    p = subprocess.run(["dpkg", "-S", path], capture_output=True, text=True)
    if p.returncode != 0:
        return None
    pkg = p.stdout.split(":")[0].strip()
    v = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", pkg], capture_output=True, text=True)
    return f"{pkg} {v.stdout.strip()}" if v.returncode == 0 else pkg


class Workload:
    def __init__(self, args):
        self.a = args
        self.users = [int(x) for x in args.users.split(",") if x.strip()]
        os.makedirs(args.dir, exist_ok=True)
        self.tmp = tempfile.mkdtemp(prefix="layoutd-dcd-users-tar-", dir=args.dir)
        atexit.register(shutil.rmtree, self.tmp, True)
        if args.tarball:
            self.tar = os.path.abspath(args.tarball)
            self.source = args.tarball
        else:
            tree = os.path.abspath(args.tree)
            self.tar = os.path.join(self.tmp, "tree.tar")
            subprocess.run(["tar", "-cf", self.tar, "--sort=name", "--mtime=@0", "--owner=0", "--group=0",
                            "--numeric-owner", "--format=gnu", "-C", os.path.dirname(tree), os.path.basename(tree)],
                           check=True)
            self.source = f"{tree} ({_pkg_of(tree) or 'package unknown'})"
        listing = subprocess.run(["tar", "-tvf", self.tar], capture_output=True, text=True, check=True).stdout
        self.files = sum(1 for ln in listing.splitlines() if ln.startswith("-"))
        self.dirs = sum(1 for ln in listing.splitlines() if ln.startswith("d"))
        self.tree_bytes = sum(int(ln.split()[2]) for ln in listing.splitlines() if ln.startswith("-"))
        self.sha = _sha256(self.tar)
        log(f"tarball {self.tar}: {self.files} files, {self.dirs} dirs, {self.tree_bytes} bytes, sha256 {self.sha}")

    def params(self):
        return {"users": self.users, "source": self.source, "tarball_sha256": self.sha,
                "tarball_bytes": os.path.getsize(self.tar), "files": self.files, "dirs": self.dirs,
                "tree_bytes": self.tree_bytes, "mean_file_bytes": round(self.tree_bytes / max(self.files, 1), 1),
                "tar_command": "tar -cf T --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner --format=gnu"}

    def phases(self):
        out = []
        for n in self.users:
            out.append((f"untar-{n}", "write", True, lambda m, n=n: self._par(m, n, "untar")))
            out.append((f"copy-{n}", "read+write", True, lambda m, n=n: self._par(m, n, "copy")))
            out.append((f"remove-{n}", "metadata", True, lambda m, n=n: self._par(m, n, "remove")))
        return out

    def _cmd(self, mnt, n, k, what):
        u = os.path.join(mnt, f"n{n}-u{k}")
        if what == "untar":
            return ["sh", "-c", f'mkdir "$1" && exec tar --no-same-owner -xf "$2" -C "$1"', "sh", u, self.tar]
        if what == "copy":
            return ["cp", "-r", u, os.path.join(mnt, f"n{n}-c{k}")]
        return ["rm", "-r", u]

    def _par(self, mnt, n, what):
        procs = [subprocess.Popen(self._cmd(mnt, n, k, what), stderr=subprocess.PIPE) for k in range(n)]
        errs = []
        for k, p in enumerate(procs):
            _, err = p.communicate()
            if p.returncode != 0:
                errs.append(f"user {k}: exit {p.returncode}: {err.decode(errors='replace').strip()[-300:]}")
        if errs:
            raise RuntimeError(f"{what}-{n}: " + "; ".join(errs))
        return {"users": n, "op": what}
