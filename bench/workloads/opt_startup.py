"""opt-startup: cold start-ups of real programs installed on the volume.

The opt paper (shared/seeds/004_*, section 5): the I/O time of six
applications' cold-cache start-ups after one reconfiguration. Here the
programs are this machine's own, installed on the volume as a copy of the
needed part of /usr (and a few files of /etc) and run through `chroot`:

  setup          (before the measured server starts: the volume is
                 populated served without emulation, with its own trace,
                 then the rig restarts the server, as after a reboot, so an
                 `opt` profile starts empty) the copy of /usr's parts
                 (--usr), a few /etc files, /dev/null, zero, random and urandom; a git repository
                 of --repo-dirs of the Linux tree of the Debian package
                 `linux-source` under /src/linux (init, add, commit, a
                 second commit changing a few files, `git gc`); a small C
                 file; the free extents (dumpe2fs, unmounted)
  runK-PROGRAM   for K = 1, 2 and each program of PROGRAMS, in order, with
                 cold caches (umount + drop_caches + mount): the program in
                 the chroot
  reconfigure    between run 1 and run 2: on a stack with an `opt` layer,
                 `layoutd opt plan --socket` (trained on run 1 alone: the
                 server restarted after the setup) and `opt status` asked
                 every 0.2 s until the job is done (job_active=0); else
                 --idle seconds of nothing
  status         after run 2, on a stack with an `opt` layer: `opt status`
                 (its counters: reads from memory, read-behind, ...)

Run 1 trains, run 2 is the held-out evaluation. The volume is mounted with
`noatime`: with relatime the first run after the copy writes every inode's
access time once (an artefact of the fresh install, which a desktop's
programs installed long ago do not show) and run 2 would not.
"""

import os
import subprocess
import time

import linux_source
from log import log
from rig import sh

NAME = "opt-startup"
HELP = "cold start-ups of python, perl, gcc, git, man and tar|xz installed on the volume (chroot), twice"
DESCRIPTION = __doc__

# The wd800's capacity: the volume is the whole emulated disk, as the
# simulator's stacks (bench/results/opt/plain.toml, opt.toml) see it.
WD800_BYTES = 80026361856

DEFAULTS = {
    "size": str(WD800_BYTES),
    "config": None,  # give bench/results/opt/plain.toml or opt.toml (the replay's home layout)
    "emulate": None,  # the capture runs at tmpfs speed; bench/opt_real.py times it on the HDD model
    "mount_opts": "noatime",
}

# Parts of /usr (and /etc) the programs need, copied whole (cp -a): a
# directory's files land where ext4 puts a tree copied in this order.
USR = ["bin", "lib/x86_64-linux-gnu", "lib/python3", "lib/python3.11", "lib/gcc", "lib/git-core", "lib/groff",
       "lib/man-db", "lib/locale", "lib64", "libexec", "include", "share/perl", "share/perl5", "share/groff",
       "share/git-core", "share/man/man1"]
ETC = ["ld.so.cache", "ld.so.conf", "ld.so.conf.d", "passwd", "group", "manpath.config", "alternatives", "perl",
       "groff", "nsswitch.conf", "localtime", "locale.alias"]

HELLO = """#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    char buf[64];
    snprintf(buf, sizeof buf, "%d %s", argc, argv[0]);
    puts(buf);
    return strlen(buf) > 60 ? EXIT_FAILURE : EXIT_SUCCESS;
}
"""

# (name, argv in the chroot). Each is one cold start-up and its work.
PROGRAMS = [
    ("python", ["python3", "-c", "import json, decimal, email.parser, http.client, sqlite3, "
                "xml.etree.ElementTree, asyncio, argparse, unittest"]),
    ("perl", ["perl", "-MPOSIX", "-MData::Dumper", "-MFile::Find", "-MGetopt::Long", "-MStorable",
              "-MTime::Local", "-MList::Util", "-e", "print Dumper([POSIX::floor(2.5)])"]),
    ("gcc", ["gcc", "-O2", "-o", "/tmp/hello", "/src/hello.c"]),
    ("git", ["sh", "-c", "git -C /src/linux status --porcelain && git -C /src/linux log --stat -2"]),
    ("man", ["man", "-P", "cat", "tar"]),
    ("tar-xz", ["sh", "-c", "tar -cf - -C /src/linux kernel/sched | xz -1 -T1 > /tmp/sched.tar.xz"]),
]


def add_args(ap):
    g = ap.add_argument_group("opt-startup workload")
    linux_source.add_arg(g)
    g.add_argument("--repo-dirs", default="init,kernel,ipc,lib",
                   help="top-level directories of the tree in the git repository (default: %(default)s)")
    g.add_argument("--idle", type=float, default=10.0,
                   help="seconds of the reconfigure phase on a stack without `opt` (default: %(default)s)")
    g.add_argument("--setup-region", choices=("keep", "drop"), default="keep",
                   help="on a stack with `opt`: what the setup's writes leave in the OPT region for run 1. "
                        "`keep`: the blocks `absorb_writes` took (the copy's scattered small writes, ext4 "
                        "metadata: 4,000-6,000 slots) stay, dirty, where they were written, and a plan keeps "
                        "them there; `drop`: `layoutd opt drop --device` once the setup's server has stopped, "
                        "so run 1 starts with an empty region, as the replay of a capture (made on plain) "
                        "does (default: %(default)s)")
    g.add_argument("--plan-wait", type=float, default=1800.0,
                   help="longest wait for an opt reconfiguration to finish, a watchdog (default: %(default)s)")


def chroot(root, argv):
    env = ["env", "-i", "PATH=/usr/bin:/bin", "HOME=/tmp", "LANG=C"]
    p = subprocess.run(["chroot", root, *env, *argv], capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"chroot {' '.join(argv)}: exit {p.returncode}: {p.stderr.strip()[-500:]}")
    return p.stdout


class Workload:
    def __init__(self, args):
        self.a = args
        self.tarball, self.top = linux_source.tarball(args.tarball, "opt-startup")
        self.rig = None
        self.opt = bool(args.config) and 'target = "opt"' in open(args.config).read()

    def attach(self, rig):
        self.rig = rig

    def params(self):
        ver = lambda *c: subprocess.run(c, capture_output=True, text=True).stdout.splitlines()[0]  # noqa: E731
        return {"programs": [n for n, _ in PROGRAMS], "usr": USR, "repo_dirs": self.a.repo_dirs,
                "tarball": os.path.basename(self.tarball), "opt_stack": self.opt,
                "setup_region": self.a.setup_region if self.opt else None,
                "gcc": ver("gcc", "--version"), "python": ver("python3.11", "--version"),
                "git": ver("git", "--version")}

    def phases(self):
        out = []
        for k in (1, 2):
            out += [(f"run{k}-{n}", "read", True, lambda mnt, argv=argv: self.start(mnt, argv))
                    for n, argv in PROGRAMS]
            if k == 1:
                out.append(("reconfigure", "idle", False, self.reconfigure))
        if self.opt:
            out.append(("status", "idle", False, self.final_status))
        return out

    def between(self, rig):
        """Between the setup's server and the measured one (neither
        running): with --setup-region drop, empty the OPT region offline."""
        if not (self.opt and self.a.setup_region == "drop"):
            return {}
        t = time.monotonic()
        out = sh([rig.layoutd, "opt", "drop", "--device", rig.image]).stdout
        status = sh([rig.layoutd, "opt", "status", "--device", rig.image]).stdout
        log(f"  setup region dropped in {time.monotonic() - t:.1f} s: {out.strip()[-200:]}")
        return {"setup_region_drop": out.strip()[-1000:], "setup_region_status": status.strip()[-1000:]}

    def populate(self, mnt):
        root = os.path.join(mnt, "root")
        t = time.monotonic()
        for d in USR:
            dst = os.path.join(root, "usr", os.path.dirname(d))
            os.makedirs(dst, exist_ok=True)
            sh(["cp", "-a", os.path.join("/usr", d), dst])
        os.makedirs(os.path.join(root, "usr/sbin"), exist_ok=True)
        for link in ("bin", "lib", "lib64", "sbin"):
            os.symlink(f"usr/{link}", os.path.join(root, link))
        os.makedirs(os.path.join(root, "etc"))
        sh(["cp", "-a", *[os.path.join("/etc", e) for e in ETC if os.path.exists(os.path.join("/etc", e))],
            os.path.join(root, "etc")])
        os.makedirs(os.path.join(root, "dev"))
        for dev, minor in (("null", 3), ("zero", 5), ("random", 8), ("urandom", 9)):
            sh(["mknod", "-m", "666", os.path.join(root, "dev", dev), "c", "1", str(minor)])
        os.makedirs(os.path.join(root, "tmp"), mode=0o1777)
        t_copy = time.monotonic() - t
        src = os.path.join(root, "src")
        repo = os.path.join(src, "linux")
        os.makedirs(repo)
        with open(os.path.join(src, "hello.c"), "w") as fh:
            fh.write(HELLO)
        members = [f"{self.top}/{d.strip('/ ')}" for d in self.a.repo_dirs.split(",") if d.strip()]
        sh(["tar", "-xJf", self.tarball, "-C", repo, "--strip-components=1", *members])
        git = lambda *c: chroot(root, ["git", "-C", "/src/linux", *c])  # noqa: E731
        git("init", "-q")
        for k, v in (("user.name", "layoutd bench"), ("user.email", "bench@layoutd.invalid")):
            git("config", k, v)
        git("add", "-A")
        git("commit", "-q", "-m", "import")
        files = sorted(git("ls-files").split())
        for f in files[:: max(1, len(files) // 20)]:  # about 20 files changed in a second commit
            with open(os.path.join(repo, f), "a") as fh:
                fh.write("\n")
        git("commit", "-q", "-a", "-m", "touch")
        git("gc", "-q")
        os.sync()
        du = int(sh(["du", "-sb", root]).stdout.split()[0])
        free = self.free_extents()
        log(f"  setup: {du >> 20} MiB in the chroot ({t_copy:.1f} s copying /usr), {len(files)} files in git")
        return {"chroot_bytes": du, "repo_files": len(files), "copy_seconds": round(t_copy, 2),
                "free_extents": free}

    def free_extents(self):
        """The file system's free space after the setup, as [offset, length]
        byte extents of the volume (dumpe2fs's free block ranges, unmounted
        so the bitmaps are checkpointed): what `replica`'s ext scan would
        find at the next open, which the replay declares with discards (the
        simulator has no data to scan)."""
        self.rig.umount()
        out = sh(["dumpe2fs", self.rig.loop]).stdout
        self.rig.mount()
        bs = int(next(ln.split(":")[1] for ln in out.splitlines() if ln.startswith("Block size:")))
        ext = []
        for ln in out.splitlines():
            ln = ln.strip()
            if not ln.startswith("Free blocks:"):
                continue
            for r in ln.split(":", 1)[1].split(","):
                r = r.strip()
                if not r:
                    continue
                a, _, b = r.partition("-")
                a, b = int(a), int(b or a)
                if ext and ext[-1][0] + ext[-1][1] == a * bs:
                    ext[-1][1] += (b - a + 1) * bs
                else:
                    ext.append([a * bs, (b - a + 1) * bs])
        return ext

    def start(self, mnt, argv):
        out = chroot(os.path.join(mnt, "root"), argv)
        return {"output_bytes": len(out)}

    def final_status(self, mnt):
        """The opt target's counters after run 2 (reads from memory, read-behind, ...)."""
        st = sh([self.rig.layoutd, "opt", "status", "--socket", self.rig.sock]).stdout
        return {"status": st.strip()[-4000:]}

    def reconfigure(self, mnt):
        if not self.opt:
            time.sleep(self.a.idle)
            return {"idle_seconds": self.a.idle}
        l, sock = self.rig.layoutd, self.rig.sock
        t = time.monotonic()
        plan = sh([l, "opt", "plan", "--socket", sock]).stdout
        while True:
            st = sh([l, "opt", "status", "--socket", sock]).stdout
            if "job_active=0" in st:
                break
            if time.monotonic() - t > self.a.plan_wait:
                raise RuntimeError(f"opt: the reconfiguration did not finish in {self.a.plan_wait} s: {st[-400:]}")
            time.sleep(0.2)
        secs = time.monotonic() - t
        log(f"  reconfigured in {secs:.1f} s")
        return {"plan_output": plan.strip()[-2000:], "status": st.strip()[-4000:], "reconfigure_seconds": round(secs, 2)}
