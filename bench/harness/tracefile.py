"""layoutd trace files (docs/trace-format.md) through `layoutd trace`.

The trace format has one parser, layoutd's own: this module never reads a
trace line. It runs `layoutd trace stats` (summaries), `layoutd trace cut`
(a phase between two marker reads, see rig.marker) and `layoutd trace
convert --to jsonl` (records for the plots and the DCD report) and reads
their JSON. The binary is the one given to `use()` (bench/run --layoutd),
else $LAYOUTD, else the newer of target/release/layoutd and
target/debug/layoutd that has the `trace` subcommand.
"""

import gzip
import json
import os
import shutil
import subprocess

from rig import MARKER_AREA, MARKER_STRIDE

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
HEADER = "# layoutd-trace v1: submit_ns complete_ns stream op offset_bytes length_bytes flags\n"

_layoutd = None


def has_trace(layoutd):
    """Whether this layoutd binary has the `trace` subcommand."""
    try:
        return subprocess.run([layoutd, "trace", "--help"], capture_output=True).returncode == 0
    except OSError:
        return False


def use(layoutd):
    """Run `layoutd trace` from this binary."""
    global _layoutd
    _layoutd = layoutd


def layoutd():
    global _layoutd
    if _layoutd:
        return _layoutd
    env = os.environ.get("LAYOUTD")
    if env:
        _layoutd = env
        return env
    found = [p for p in (os.path.join(ROOT, "target", d, "layoutd") for d in ("release", "debug"))
             if os.access(p, os.X_OK) and has_trace(p)]
    if not found:
        raise RuntimeError("no layoutd binary with `layoutd trace`: cargo build -p layoutd (or set LAYOUTD)")
    _layoutd = max(found, key=os.path.getmtime)
    return _layoutd


def trace(*args):
    """Runs `layoutd trace ARGS`; its standard output. Raises with its error line."""
    cmd = [layoutd(), "trace", *[str(x) for x in args]]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(p.stderr.strip() or f"`{' '.join(cmd)}` exited {p.returncode}")
    return p.stdout


def marker_args(export_bytes, window=None):
    """Flags that name the harness's marker reads, and a (from, to) marker window."""
    a = ["--marker-base", export_bytes - MARKER_AREA, "--marker-stride", MARKER_STRIDE, "--marker-length", 4096,
         "--marker-count", MARKER_AREA // MARKER_STRIDE]  # beyond the area: a pool's snapshot volumes
    if window:
        a += ["--from-marker", window[0], "--to-marker", window[1]]
    return a


class Rec:
    """One request, as `layoutd trace convert --to jsonl` gives it."""
    __slots__ = ("submit", "complete", "stream", "op", "off", "len", "fua", "line")

    def __init__(self, d):
        self.submit = d["submit_ns"]
        self.complete = d["complete_ns"]
        self.stream = d["stream"]
        self.op = d["op"]
        self.off = d["offset_bytes"]
        self.len = d["length_bytes"]
        self.fua = d["fua"]
        self.line = d["line"]


def read(path, export_bytes=None, window=None):
    """The records of a trace (plain or compressed), in file order; with a
    marker window only those strictly between its two marker reads."""
    args = ["cut", path, *marker_args(export_bytes, window)] if window else ["convert", path]
    return [Rec(json.loads(ln)) for ln in trace(*args, "--to", "jsonl").splitlines()]


def in_phase(name, fn, *args):
    """fn(*args), its error prefixed with the phase's name."""
    try:
        return fn(*args)
    except RuntimeError as e:
        raise RuntimeError(f"phase {name}: {e}") from None


def windows(path, export_bytes, pairs):
    """pairs: [(name, start_marker, end_marker)]. Returns {name: [records
    strictly between the two markers, markers excluded]}; a marker missing
    from the trace raises."""
    return {name: in_phase(name, read, path, export_bytes, (a, b)) for name, a, b in pairs}


def cut(path, export_bytes, a, b, out):
    """Writes the records between marker reads a and b to `out` (layoutd format)."""
    trace("cut", path, *marker_args(export_bytes, (a, b)), "-o", out)


def convert(path, out):
    """Rewrites a trace (compressed or not) as a plain layoutd trace."""
    trace("convert", path, "-o", out)


def stats(path, export_bytes=None, window=None):
    """`layoutd trace stats --json`: counts, bytes, span, response times, busy
    and idle time (of the records between two markers with a window); with
    export_bytes also the marker reads found (`markers`)."""
    args = marker_args(export_bytes, window) if export_bytes is not None else []
    return json.loads(trace("stats", path, *args, "--json"))


def markers(path, export_bytes):
    """{marker number: {"submit_ns", "complete_ns", "line"}} of each marker's first read."""
    return {m["index"]: m for m in stats(path, export_bytes)["markers"]}


def messages(path, export_bytes, phases):
    """[(request index, text)] for `layoutd sim --message @N:TEXT`: each
    runtime message a phase sent (its `messages`, [marker k, text] pairs:
    sent just before marker read k) goes before that marker read."""
    lines = {k: m["line"] for k, m in markers(path, export_bytes).items()}
    index = {r.line: i for i, r in enumerate(read(path))}
    return [(index[lines[k]], text) for ph in phases for k, text in ph.get("messages", [])]


def gzip_copy(src, dst):
    with open(src, "rb") as a, gzip.open(dst, "wb", compresslevel=9) as b:
        shutil.copyfileobj(a, b)


def one_stream(src, dst, gap_at_line=None, gap_ns=0, stop_at_line=None):
    """Writes the trace `src` (plain or .gz) to `dst` (gzip) with every
    request's stream set to 0, in recorded order. For captures made before
    the trace layer recorded the base stream (commit 9461b99): they carry
    the live stream detector's run ids, about 8 per NBD connection, and a
    closed-loop replay would pace each as a stream of its own, drifting
    apart so that one phase's requests run in another's window (and the
    harness's marker reads no longer bracket the phases).

    With `gap_at_line` (a line number of `src`, 1 = its first line, as
    `stats`' markers give them) every request from that line on is moved
    `gap_ns` later: a closed-loop replay then has that much think time more
    before it (idle time inserted, e.g. before a read phase). With
    `stop_at_line` the requests from that line on are left out (a prefix)."""
    opener = gzip.open if src.endswith(".gz") else open
    with opener(src, "rt") as f, gzip.open(dst, "wt") as out:
        for n, line in enumerate(f, 1):
            if stop_at_line is not None and n >= stop_at_line:
                break
            if line.startswith("#") or not line.strip():
                out.write(line)
                continue
            p = line.split()
            if gap_at_line is not None and n >= gap_at_line:
                p[:2] = [str(int(t) + gap_ns) if t.isdigit() else t for t in p[:2]]
            out.write(" ".join(p[:2] + ["0"] + p[3:]) + "\n")
    return dst


def concat(first, second, dst, gap_ns):
    """Writes the requests of the trace `first` (plain or .gz), then those of
    `second` moved to start `gap_ns` after `first`'s last completion, to
    `dst` (gzip): a volume's history before a recorded run (e.g. the
    populate a staged workload served before restarting the server), so a
    replay starts the run from the state that history left. Returns the
    number of requests taken from `first`."""
    opener = lambda p: gzip.open(p, "rt") if p.endswith(".gz") else open(p)  # noqa: E731
    count, last = 0, 0
    with gzip.open(dst, "wt") as out:
        out.write(HEADER)
        with opener(first) as f:
            for line in f:
                if line.startswith("#") or not line.strip():
                    continue
                p = line.split()
                last = max([last] + [int(t) for t in p[:2] if t.isdigit()])
                out.write(line)
                count += 1
        with opener(second) as f:
            for line in f:
                if line.startswith("#") or not line.strip():
                    continue
                p = line.split()
                p[:2] = [str(int(t) + last + gap_ns) if t.isdigit() else t for t in p[:2]]
                out.write(" ".join(p) + "\n")
    return count
