#!/usr/bin/env python3
"""Lost map pages on a sparsely written `log` volume, served with --accept-loss.

Formats a sparse file as a `log` volume (examples/log.toml; 1 TiB by
default), writes one 4 KiB block (pattern 7) at the start of `--pages` map
pages spread over the volume through `serve --run` (qemu-io), opens it once
more (`message checkpoint`: the pages' copies are then older than the
checkpoint, beside a blank copy), damages the only copy of `--lost` of those
pages (`--damage zero`: its first 4 KiB zeroed; `flip`: a byte flipped), then:
serve without --accept-loss (the refusal's line), and with it, reading every
written block back with qemu-io's pattern check. Prints the pages unmapped
(`lost_map_pages_count`), the blocks read back and the open's wall time.
With --before-sketch both checkpoint copies are first moved back to
version 6 (session 30's, without the map's sketch of written pages; this
build reads it as that release did), for the figure before.

  cargo build --workspace --release
  bench/log_lost_pages.py [--size 1T] [--pages 40] [--lost 2] [--damage zero]

The sparse file lives in a temporary directory (--work to choose one) and
is removed at the end; it allocates a few MiB, never copied.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..")
PAGE_BLOCKS = 1014
MAGIC = b"LDLOGMP1"


def run(args, check=True):
    p = subprocess.run(args, capture_output=True, text=True)
    if check and p.returncode != 0:
        sys.exit(f"{' '.join(args[:3])}: exit {p.returncode}: {p.stderr}")
    return p


def crc32c(data):
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    c = 0xFFFFFFFF
    for b in data:
        c = table[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def before_sketch(path):
    """Both chain checkpoint copies (512 B, 4096 apart, where the log's
    region starts) moved back to version 6: the payload without its last
    384 bytes (the sketch)."""
    with open(path, "r+b") as f:
        head = f.read(4 << 20)
        first = next(o for o in range(0, len(head), 512) if head[o:o + 8] == b"LDSEGCC1")
        for at in (first, first + 4096):
            f.seek(at)
            b = bytearray(f.read(512))
            assert b[0:8] == b"LDSEGCC1" and int.from_bytes(b[8:12], "little") == 7, "a version-7 checkpoint"
            n = int.from_bytes(b[12:16], "little") - 384
            b[8:12] = (6).to_bytes(4, "little")
            b[12:16] = n.to_bytes(4, "little")
            b[32 + n:] = bytes(512 - 32 - n)
            b[28:32] = bytes(4)
            b[28:32] = crc32c(bytes(b)).to_bytes(4, "little")
            f.seek(at)
            f.write(b)


def map_copies(path):
    """Lower offsets of the map page copies (4 KiB blocks starting with the
    map's magic), found in the file's data extents only."""
    out = []
    with open(path, "rb") as f:
        fd, end, at = f.fileno(), os.fstat(f.fileno()).st_size, 0
        while at < end:
            try:
                at = os.lseek(fd, at, os.SEEK_DATA)
            except OSError:
                break
            stop = os.lseek(fd, at, os.SEEK_HOLE)
            at -= at % 4096
            while at < stop:
                f.seek(at)
                if f.read(8) == MAGIC:
                    out.append(at)
                at += 4096
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layoutd", default=os.path.join(ROOT, "target", "release", "layoutd"))
    ap.add_argument("--size", default="1T")
    ap.add_argument("--pages", type=int, default=40)
    ap.add_argument("--lost", type=int, default=2)
    ap.add_argument("--damage", choices=["zero", "flip"], default="zero")
    ap.add_argument("--work", default=None)
    ap.add_argument("--before-sketch", action="store_true")
    a = ap.parse_args()
    L = os.path.abspath(a.layoutd)
    units = {"G": 30, "T": 40}
    size = int(a.size[:-1]) << units[a.size[-1]]
    # Volume pages: 90% of the slots exposed, 1014 blocks a page; the
    # written pages spread evenly below that.
    spacing = int(size * 0.85 / 4096 / PAGE_BLOCKS / a.pages)
    pages = [i * spacing + 3 for i in range(a.pages)]
    with tempfile.TemporaryDirectory(dir=a.work, prefix="log-lost-pages-") as work:
        os.environ["XDG_RUNTIME_DIR"] = work
        dev = os.path.join(work, "vol.img")
        run([L, "format", "--device", dev, "--size", a.size, "--config", os.path.join(ROOT, "examples", "log.toml")])
        writes = " ".join(f"-c 'write -P 7 {p * PAGE_BLOCKS * 4096} 4k'" for p in pages)
        run([L, "serve", "--device", dev, "--run", f"qemu-io -f raw {writes} -c flush \"$uri\""])
        run([L, "message", "--device", dev, "checkpoint"])
        copies = map_copies(dev)
        print(f"{a.size} log, {a.pages} pages written (one block each), {len(copies)} map page copies on disk")
        # The copies in page order are the written pages' (one each); damage
        # every eighth from the second.
        gone = list(range(1, len(copies), 8))[: a.lost]
        with open(dev, "r+b") as f:
            for i in gone:
                if a.damage == "zero":
                    f.seek(copies[i])
                    f.write(bytes(4096))
                else:
                    f.seek(copies[i] + 100)
                    b = f.read(1)
                    f.seek(copies[i] + 100)
                    f.write(bytes([b[0] ^ 0xFF]))
        print(f"damaged ({a.damage}) the only copy of written pages {[pages[i] for i in gone]}")
        if a.before_sketch:
            before_sketch(dev)
            print("checkpoint copies moved back to version 6 (no sketch)")
        reads = " ".join(f"-c 'read -P 7 {p * PAGE_BLOCKS * 4096} 4k'" for p in pages)
        cmd = f"qemu-io -f raw {reads} \"$uri\""
        p = run([L, "serve", "--device", dev, "--run", cmd], check=False)
        lines = [x for x in p.stderr.splitlines() if "log map" in x]
        print(f"without --accept-loss: exit {p.returncode}: {lines[0][:400] if lines else p.stderr[:400]}")
        t = time.monotonic()
        p = run([L, "serve", "--device", dev, "--accept-loss", "--run", cmd], check=False)
        wall = time.monotonic() - t
        text = p.stdout + p.stderr
        failed = text.count("Pattern verification failed")
        lost = re.search(r"lost_map_pages_count[=: ]+(\d+)", text)
        print(
            f"--accept-loss: exit {p.returncode}, {wall:.1f} s (open, {a.pages} reads, close); "
            f"lost_map_pages_count {lost.group(1) if lost else '?'}; "
            f"{a.pages - failed} of {a.pages} blocks read back ({failed} read otherwise)"
        )


if __name__ == "__main__":
    main()
