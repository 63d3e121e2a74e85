"""The Linux tree of the Debian package `linux-source`, which the
git-status, pool-kernel and opt-startup workloads unpack."""
import glob
import os


def add_arg(group):
    group.add_argument("--tarball", default=None,
                       help="the kernel source tarball (default: the newest /usr/src/linux-source-*.tar.xz)")


def tarball(given, who):
    """(the tarball: `given`, else the newest one installed; its top-level
    directory, e.g. linux-source-6.1). Exits naming `who` when there is none."""
    tb = given or max(glob.glob("/usr/src/linux-source-*.tar.xz"), default=None)
    if not tb or not os.path.exists(tb):
        raise SystemExit(f"{who}: no kernel tarball (apt-get install linux-source, or give --tarball)")
    return tb, os.path.basename(tb).split(".tar")[0]
