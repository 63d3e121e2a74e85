"""The live rig: a served layoutd volume made into a mounted file system
(ext4 by default, or btrfs).

    layoutd format -> layoutd serve --emulate --record-trace -> nbdfuse -> losetup -> mkfs -> mount

Every step that succeeds pushes its undo onto a teardown stack; `Rig.down()`
runs the stack in reverse (umount, losetup -d, fusermount3 -u, SIGTERM to the
server) and never stops half way: each undo is tried, failures are reported
and the next one still runs. The server and nbdfuse run in their own sessions,
so a Ctrl-C in the terminal reaches only the harness, which then tears down in
order instead of the server vanishing under a mounted file system.
"""

import mmap
import os
import signal
import subprocess
import time

from log import log

MiB = 1 << 20
SUPERBLOCK_BYTES = 1 * MiB  # layoutd's first MiB; the export is the rest
MARKER_AREA = 8 * MiB  # tail of the export kept out of the loop device
MARKER_STRIDE = 64 * 1024  # distinct, far apart: no read-ahead can cover two

# How the rig makes and checks each file system it knows. `mkfs` is followed
# by the user's --mkfs-opts and the device; `fsck` (read-only) by the device;
# `mount_opts` are always added (ext4: no background inode-table zeroing
# during the workload); `tools` are (binary, Debian package) for preflight.
FILE_SYSTEMS = {
    "ext4": {"mkfs": ["mkfs.ext4", "-q", "-F"], "fsck": ["e2fsck", "-fn"], "mount_opts": ["noinit_itable"],
             "default_mkfs_opts": "-E lazy_itable_init=1,lazy_journal_init=1",
             "tools": [("mkfs.ext4", "e2fsprogs"), ("e2fsck", "e2fsprogs")]},
    "btrfs": {"mkfs": ["mkfs.btrfs", "-q", "-f"], "fsck": ["btrfs", "check", "--readonly"], "mount_opts": [],
              "default_mkfs_opts": "", "tools": [("mkfs.btrfs", "btrfs-progs"), ("btrfs", "btrfs-progs")]},
}


class Teardown:
    """A stack of named undo steps, run newest first, each one even if an earlier one failed."""

    def __init__(self):
        self.steps = []
        self.failures = []

    def push(self, name, fn):
        self.steps.append((name, fn))

    def run(self):
        while self.steps:
            name, fn = self.steps.pop()
            try:
                log(f"teardown: {name}")
                fn()
            except BaseException as e:  # noqa: BLE001 - keep tearing down whatever happens
                self.failures.append(f"{name}: {e}")
                log(f"teardown: {name} FAILED: {e}")


def sh(cmd, check=True, capture=True, timeout=None):
    """Runs an argv list; returns CompletedProcess. Raises with the command's output on failure."""
    p = subprocess.run(cmd, capture_output=capture, text=True, timeout=timeout)
    if check and p.returncode != 0:
        out = ((p.stdout or "") + (p.stderr or "")).strip()
        raise RuntimeError(f"`{' '.join(cmd)}` exited {p.returncode}: {out}")
    return p


def parse_size(s):
    """'4G', '512M', '1GiB', '123' -> bytes (binary units)."""
    s = str(s).strip()
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    num = s.rstrip("BbIi")
    if num and num[-1].upper() in units:
        return int(float(num[:-1]) * units[num[-1].upper()])
    return int(s)


def sync_fs(mnt):
    """Writes back the file system mounted at `mnt` only (syncfs: `sync -f`).
    A global sync also waits for every other file system on the machine,
    which on a shared machine (other benchmarks' FUSE mounts over emulated
    disks) once took 145 s after a phase that needed none: time counted to
    the phase, and idle time the stack under test got for free."""
    subprocess.run(["sync", "-f", mnt], check=True)


def drop_caches(mnt=None):
    """sync the file system at `mnt` (none: it is unmounted, so written
    back), then drop the page cache, dentries and inodes of every layer
    (ext4, the loop device, the FUSE file)."""
    if mnt is not None:
        sync_fs(mnt)
    with open("/proc/sys/vm/drop_caches", "w") as fh:
        fh.write("3\n")


class Rig:
    def __init__(self, layoutd, work, size, config, emulate, trace_path, connections, direct_io,
                 mkfs_opts, mount_opts, threads=16, fs="ext4"):
        if fs not in FILE_SYSTEMS:
            raise ValueError(f"file system {fs!r}: this rig knows {', '.join(FILE_SYSTEMS)}")
        self.fs = fs
        self.layoutd = layoutd
        self.work = work
        self.size = size
        self.config = config
        self.emulate = emulate
        self.trace_path = trace_path
        self.connections = connections
        self.direct_io = direct_io
        self.mkfs_opts = mkfs_opts
        self.mount_opts = mount_opts
        self.threads = threads
        self.image = os.path.join(work, "vol.img")
        self.sock = os.path.join(work, "vol.sock")
        self.fuse_dir = os.path.join(work, "fuse")
        self.fuse_file = os.path.join(self.fuse_dir, "nbd")
        self.mnt = os.path.join(work, "mnt")
        self.serve_log = os.path.join(work, "serve.log")
        self.fuse_log = os.path.join(work, "nbdfuse.log")
        self.teardown = Teardown()
        self.server = None
        self.fuse = None
        # With emulation: where `serve --record-disk` writes the emulated
        # disk's requests (set by the runner's --record-disk), else None.
        self.disk_record = None
        self.loop = None
        self.export_bytes = None
        self.markers = []  # (index, offset, label)
        self.exports = {}  # name -> teardown steps of attach_export
        self.facts = {}  # what the rig actually got (loop DIO, server exit, fsck...)

    # -- bring-up --------------------------------------------------------
    def up(self):
        os.makedirs(self.fuse_dir, exist_ok=True)
        os.makedirs(self.mnt, exist_ok=True)
        cmd = [self.layoutd, "format", "--device", self.image, "--size", str(self.size), "--force"]
        if self.config:
            cmd += ["--config", self.config]
        log(f"format: {' '.join(cmd[1:])}")
        sh(cmd)
        self._start_server()
        self._start_fuse()
        self._attach_loop()
        mkfs = FILE_SYSTEMS[self.fs]["mkfs"]
        log(f"{mkfs[0]} {' '.join(self.mkfs_opts)} {self.loop}")
        t0 = time.monotonic()
        sh([*mkfs, *self.mkfs_opts, self.loop])
        self.facts["mkfs_seconds"] = round(time.monotonic() - t0, 3)
        self.mount()
        log(f"mounted {self.fs} at {self.mnt} ({self.mount_opts or 'defaults'}), mkfs took {self.facts['mkfs_seconds']} s")

    def restart(self, emulate, trace_path, between=None):
        """Everything down (umount, loop, nbdfuse, server: a clean stop) and
        up again on the same volume file, without format or mkfs, serving
        with `emulate` and recording to `trace_path`: a volume populated at
        tmpfs speed (and with its own trace) is then measured from a fresh
        server, whose in-memory state (an `opt` profile, caches) starts
        empty, as after a reboot."""
        failures = self.down()
        if failures:
            raise RuntimeError("restart: " + "; ".join(failures))
        if between:  # the volume file alone, served by no one
            self.facts.update(between(self))
        self.teardown = Teardown()
        self.emulate = emulate
        self.trace_path = trace_path
        self._start_server()
        self._start_fuse()
        self._attach_loop()
        self.mount()
        log(f"restarted: serve {'--emulate ' + emulate if emulate else 'without emulation'}, mounted at {self.mnt}")

    def _start_server(self):
        if os.path.exists(self.sock):
            os.unlink(self.sock)
        cmd = [self.layoutd, "serve", "--device", self.image, "--socket", self.sock,
               "--threads", str(self.threads), "--record-trace", self.trace_path]
        if self.emulate:
            cmd += ["--emulate", self.emulate]
            if self.disk_record:
                cmd += ["--record-disk", self.disk_record]
        log(f"serve: {' '.join(cmd[1:])}")
        logf = open(self.serve_log, "w")
        self.server = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, start_new_session=True)
        logf.close()
        self.teardown.push("stop the server (SIGTERM: flush, clean mark)", self._stop_server)
        self._wait_for(lambda: os.path.exists(self.sock), self.server, "the server's socket", self.serve_log)

    def _start_fuse(self):
        cmd = ["nbdfuse", "-C", str(self.connections), self.fuse_file, "--unix", self.sock]
        log(f"nbdfuse: {' '.join(cmd[1:])}")
        logf = open(self.fuse_log, "w")
        self.fuse = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, start_new_session=True)
        logf.close()
        self.teardown.push(f"fusermount3 -u {self.fuse_dir}", self._stop_fuse)
        self._wait_for(lambda: os.path.exists(self.fuse_file), self.fuse, "the nbdfuse file", self.fuse_log)
        self.export_bytes = os.stat(self.fuse_file).st_size

    def _attach_loop(self):
        limit = self.export_bytes - MARKER_AREA
        cmd = ["losetup", "-f", "--show", f"--sizelimit={limit}"]
        if self.direct_io:
            cmd.append("--direct-io=on")
        cmd.append(self.fuse_file)
        self.loop = sh(cmd).stdout.strip()
        loop = self.loop
        self.teardown.push(f"losetup -d {loop}", lambda: sh(["losetup", "-d", loop]))
        dio = sh(["losetup", "-n", "-O", "DIO", self.loop]).stdout.strip()
        self.facts["loop_direct_io"] = dio == "1"
        self.facts["loop_device_bytes"] = limit
        log(f"loop: {self.loop} over {self.fuse_file} ({limit} bytes, direct I/O {'on' if dio == '1' else 'OFF'})")
        if self.direct_io and dio != "1":
            log("warning: the loop device refused direct I/O; its page cache sits above the FUSE file")

    @staticmethod
    def _wait_for(cond, proc, what, logfile, seconds=20):
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if cond():
                return
            if proc.poll() is not None:
                raise RuntimeError(f"{what} never appeared: the process exited {proc.returncode}; "
                                   f"log: {open(logfile).read().strip()}")
            time.sleep(0.025)
        raise RuntimeError(f"{what} did not appear within {seconds} s (log: {logfile})")

    # -- during the run ----------------------------------------------------
    def marker(self, label):
        """One 4 KiB O_DIRECT read of the export's tail area, which the loop
        device (and so ext4) never touches. Its distinct offset identifies
        `label` in the recorded trace, with the trace's own clock."""
        k = len(self.markers)
        base = self.export_bytes - MARKER_AREA
        off = base + k * MARKER_STRIDE
        if off + 4096 > self.export_bytes:
            raise RuntimeError("out of marker slots")
        fd = os.open(self.fuse_file, os.O_RDONLY | os.O_DIRECT)
        try:
            buf = mmap.mmap(-1, 4096)
            n = os.preadv(fd, [buf], off)
            if n != 4096:
                raise RuntimeError(f"marker read returned {n} bytes")
        finally:
            os.close(fd)
        self.markers.append((k, off, label))
        return k

    def attach_export(self, name, mount_opts="ro,noload"):
        """Mounts another export of the same server read-only (a pool's
        snapshot, `nbd+unix:///NAME`): its own nbdfuse (one connection),
        a read-only loop device of the same size as the origin's and a
        read-only mount (ext4: `noload`, no journal replay). Returns the
        mount point; `detach_export(name)` undoes it (so does teardown)."""
        d = os.path.join(self.work, f"fuse-{name}")
        f = os.path.join(d, "nbd")
        m = os.path.join(self.work, f"mnt-{name}")
        os.makedirs(d, exist_ok=True)
        os.makedirs(m, exist_ok=True)
        logf = open(os.path.join(self.work, f"nbdfuse-{name}.log"), "w")
        proc = subprocess.Popen(["nbdfuse", "-r", "-C", "1", f, f"nbd+unix:///{name}?socket={self.sock}"],
                                stdout=logf, stderr=subprocess.STDOUT, start_new_session=True)
        logf.close()

        def stop_fuse():
            sh(["fusermount3", "-u", d], check=False)
            proc.wait(timeout=10)
        self.teardown.push(f"export {name}: fusermount3 -u {d}", stop_fuse)
        self._wait_for(lambda: os.path.exists(f), proc, f"the nbdfuse file of export {name}", logf.name)
        cmd = ["losetup", "-f", "--show", "-r", f"--sizelimit={self.facts['loop_device_bytes']}"]
        if self.direct_io:
            cmd.append("--direct-io=on")
        loop = sh([*cmd, f]).stdout.strip()
        self.teardown.push(f"export {name}: losetup -d {loop}", lambda: sh(["losetup", "-d", loop]))
        sh(["mount", "-o", mount_opts, loop, m])
        self.teardown.push(f"export {name}: umount {m}", lambda: sh(["umount", m]))
        self.exports[name] = 3  # teardown steps: nbdfuse, loop, mount
        log(f"export {name}: {loop} mounted at {m} ({mount_opts})")
        return m

    def detach_export(self, name):
        """Unmounts an export mounted by attach_export and detaches its loop
        device and nbdfuse, newest first."""
        n = self.exports.pop(name)
        mine = [i for i, (step, _) in enumerate(self.teardown.steps) if step.startswith(f"export {name}: ")]
        assert len(mine) == n, mine
        for i in reversed(mine):
            step, fn = self.teardown.steps.pop(i)
            log(f"export {name}: {step.split(': ', 1)[1]}")
            fn()

    def mount(self):
        opts = ["-o", self.mount_opts] if self.mount_opts else []
        sh(["mount", *opts, self.loop, self.mnt])
        self.teardown.push(f"umount {self.mnt}", self._umount)

    def remount(self):
        """umount + mount: checkpoints the journal, so no metadata stays
        pinned in memory (drop_caches cannot free journaled buffers that
        are not yet checkpointed)."""
        self.umount()
        drop_caches()
        self._check_loop()
        self.mount()

    def _check_loop(self):
        """The loop device must still be ours: on a shared machine someone's
        `losetup -D` can detach it while the file system is unmounted. If
        so, attach again (and say so in the report)."""
        back = sh(["losetup", "-n", "-O", "BACK-FILE", self.loop], check=False).stdout.strip()
        if back == self.fuse_file:
            return
        log(f"warning: {self.loop} no longer maps {self.fuse_file} (now: {back or 'detached'}); attaching again")
        self.facts.setdefault("loop_reattached", []).append(self.loop)
        for i, (name, _) in enumerate(self.teardown.steps):
            if name.startswith("losetup -d"):
                del self.teardown.steps[i]
                break
        self._attach_loop()

    def loop_stat(self):
        """/sys/block/loopN/stat: (reads, read bytes, writes, written bytes)
        completed by the loop device, i.e. what ext4 sent down, before FUSE
        and NBD could split or merge it."""
        f = open(f"/sys/block/{os.path.basename(self.loop)}/stat").read().split()
        return {"reads": int(f[0]), "read_bytes": int(f[2]) * 512,
                "writes": int(f[4]), "written_bytes": int(f[6]) * 512}

    def fsck(self):
        """A read-only check of the unmounted file system (e2fsck -fn, or
        btrfs check --readonly); returns (clean, output)."""
        p = sh([*FILE_SYSTEMS[self.fs]["fsck"], self.loop], check=False)
        return p.returncode == 0, (p.stdout + p.stderr).strip()

    # -- teardown ------------------------------------------------------------
    def umount(self):
        """Unmounts now (for fsck), keeping the loop device."""
        for i, (name, fn) in enumerate(self.teardown.steps):
            if name.startswith("umount"):
                del self.teardown.steps[i]
                fn()
                return

    def _umount(self):
        for attempt in range(5):
            p = sh(["umount", self.mnt], check=False)
            if p.returncode == 0:
                return
            time.sleep(0.5 * (attempt + 1))
        sh(["umount", "-l", self.mnt])
        raise RuntimeError(f"{self.mnt} was busy; lazily unmounted")

    def _stop_fuse(self):
        sh(["fusermount3", "-u", self.fuse_dir], check=False)
        try:
            self.fuse.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.fuse.kill()
            self.fuse.wait()
            raise RuntimeError("nbdfuse did not exit after fusermount3 -u; killed")

    def _stop_server(self):
        if self.server.poll() is None:
            self.server.send_signal(signal.SIGTERM)
            try:
                self.server.wait(timeout=120)
            except subprocess.TimeoutExpired:
                self.server.kill()
                self.server.wait()
                raise RuntimeError("the server did not stop within 120 s of SIGTERM; killed")
        self.facts["server_exit"] = self.server.returncode
        text = open(self.serve_log).read()
        self.facts["server_marked_clean"] = "marked clean" in text
        if self.server.returncode != 0:
            raise RuntimeError(f"the server exited {self.server.returncode}: {text.strip()[-500:]}")

    def down(self):
        self.teardown.run()
        return self.teardown.failures
