"""git-status: `git status` on a large real repository, with a remount
between runs.

The replication thesis (Lifchits, UBC 2008, shared/seeds/000_*), section
5.8: `git status` on a large source repository, repeated with the file
system remounted between runs; with replication the first run was 35 %
slower than on the plain disk and the fifth 45 % faster.

Here the repository is the Linux kernel tree of the Debian package
`linux-source` (apt-get install linux-source; the tarball is
/usr/src/linux-source-*.tar.xz):
  setup      unpack the tree (or only the top-level directories --dirs
             names) into the volume, cut Debian's "ignore everything at the
             top level" block off the top-level .gitignore (upstream's
             file), `git init`, `git add -A`,
             `git commit` (user.name/email set in the repository;
             gc.auto = 0, so the objects stay loose: `git status` reads the
             index, stats every tracked file and reads every directory, and
             with the commit's cache-tree in the index it does not need the
             objects), then sync
  status-K   for K = 1 .. --runs: `git status --porcelain` with cold caches
             (by default the rig's umount + drop_caches + mount); the
             output must be empty, the tree is clean
"""

import os
import subprocess
import time

import linux_source
from log import log

NAME = "git-status"
HELP = "`git status` on the Linux kernel tree (Debian linux-source), repeated with cold caches"
DESCRIPTION = __doc__

DEFAULTS = {
    "size": "4G",
    "config": None,  # plain linear: capture once, then replay through each stack in the simulator
    "emulate": None,  # captures run at tmpfs speed; bench/replica_postmark.py times them on the HDD model
    "mount_opts": "",  # kernel default (relatime)
}


def add_args(ap):
    g = ap.add_argument_group("git-status workload")
    linux_source.add_arg(g)
    g.add_argument("--dirs", default="all",
                   help="comma-separated top-level directories of the tree to unpack, or `all` "
                        "(default: %(default)s)")
    g.add_argument("--runs", type=int, default=5, help="`git status` phases (default: %(default)s)")
    g.add_argument("--no-preload-index", action="store_true",
                   help="set core.preloadIndex = false: one thread stats the files in index order, as git "
                        "did before 1.6.1 (the thesis's time); by default (git >= 2.1) up to 20 threads stat "
                        "them at once, in an order that changes from run to run")


def git(mnt, *args):
    p = subprocess.run(["git", "-C", os.path.join(mnt, "linux"), *args], capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)}: exit {p.returncode}: {p.stderr.strip()[-500:]}")
    return p.stdout


class Workload:
    def __init__(self, args):
        self.a = args
        self.tarball, self.top = linux_source.tarball(args.tarball, "git-status")
        self.dirs = [] if args.dirs == "all" else [d.strip("/ ") for d in args.dirs.split(",") if d.strip()]

    def params(self):
        return {"tarball": os.path.basename(self.tarball), "dirs": self.dirs or "all", "runs": self.a.runs,
                "preload_index": not self.a.no_preload_index,
                "git": subprocess.run(["git", "--version"], capture_output=True, text=True).stdout.strip()}

    def phases(self):
        """[(name, kind, drop caches before?, function(mnt) -> dict)]"""
        out = [("setup", "write", False, self.setup)]
        for k in range(1, self.a.runs + 1):
            out.append((f"status-{k}", "read", True, self.status))
        return out

    def setup(self, mnt):
        repo = os.path.join(mnt, "linux")
        os.makedirs(repo)
        t = time.monotonic()
        members = [f"{self.top}/{d}" for d in self.dirs]
        subprocess.run(["tar", "-xJf", self.tarball, "-C", repo, "--strip-components=1", *members], check=True)
        t_untar = time.monotonic() - t
        log(f"  unpacked in {t_untar:.1f} s")
        # Debian's tarball appends to the top-level .gitignore a block that
        # ignores everything at the top level (`/*`, `!/debian/`): git would
        # add nothing and `git status` would not walk the tree. Cut it off,
        # back to the upstream file.
        gi = os.path.join(repo, ".gitignore")
        if os.path.exists(gi):
            with open(gi) as fh:
                text = fh.read()
            cut = text.find("\n#\n# Debian packaging")
            if cut >= 0:
                with open(gi, "w") as fh:
                    fh.write(text[:cut + 1])
        git(mnt, "init", "-q")
        for k, v in (("user.name", "layoutd bench"), ("user.email", "bench@layoutd.invalid"), ("gc.auto", "0"),
                     ("core.preloadIndex", "false" if self.a.no_preload_index else "true")):
            git(mnt, "config", k, v)
        t = time.monotonic()
        git(mnt, "add", "-A")
        t_add = time.monotonic() - t
        log(f"  git add -A in {t_add:.1f} s")
        git(mnt, "commit", "-q", "-m", "import")
        files = len(git(mnt, "ls-files", "-z").split("\0")) - 1
        log(f"  committed {files} files")
        return {"files": files, "untar_seconds": round(t_untar, 2), "add_seconds": round(t_add, 2)}

    def status(self, mnt):
        out = git(mnt, "status", "--porcelain")
        if out.strip():
            raise RuntimeError(f"git status: the tree is not clean: {out[:300]}")
        return {"clean": True}
