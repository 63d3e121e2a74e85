"""layoutd trace files (docs/trace-format.md): read, cut into phases by
marker reads, summarize, write back."""

import gzip
import shutil

from rig import MARKER_AREA, MARKER_STRIDE

HEADER = "# layoutd-trace v1: submit_ns complete_ns stream op offset_bytes length_bytes flags\n"


class Rec:
    __slots__ = ("submit", "complete", "stream", "op", "off", "len", "flags", "line")

    def __init__(self, line):
        f = line.split()
        self.submit = int(f[0])
        self.complete = int(f[1])
        self.stream = f[2]
        self.op = f[3]
        self.off = int(f[4])
        self.len = int(f[5])
        self.flags = f[6]
        self.line = line if line.endswith("\n") else line + "\n"


def read(path):
    opener = gzip.open if path.endswith(".gz") else open
    out = []
    with opener(path, "rt") as fh:
        for line in fh:
            if line.startswith("#") or not line.strip():
                continue
            out.append(Rec(line))
    return out


def write(recs, path):
    with open(path, "w") as fh:
        fh.write(HEADER)
        for r in recs:
            fh.write(r.line)


def gzip_copy(src, dst):
    with open(src, "rb") as a, gzip.open(dst, "wb", compresslevel=9) as b:
        shutil.copyfileobj(a, b)


def marker_index(rec, export_bytes):
    """The marker number of a marker read, else None."""
    base = export_bytes - MARKER_AREA
    if rec.op != "R" or rec.off < base or rec.len != 4096:
        return None
    d = rec.off - base
    return d // MARKER_STRIDE if d % MARKER_STRIDE == 0 else None


def windows(recs, export_bytes, pairs):
    """pairs: [(name, start_marker, end_marker)]. Returns {name: [records
    strictly between the two markers, markers excluded]}; a marker missing from
    the trace raises."""
    pos = {}
    for i, r in enumerate(recs):
        k = marker_index(r, export_bytes)
        if k is not None:
            pos.setdefault(k, i)
    out = {}
    for name, a, b in pairs:
        if a not in pos or b not in pos:
            raise RuntimeError(f"phase {name}: marker {a if a not in pos else b} is not in the trace")
        out[name] = [r for r in recs[pos[a] + 1:pos[b]] if marker_index(r, export_bytes) is None]
    return out


def summarize(recs):
    """Counts, bytes, time span and response times of a list of records."""
    s = {"requests": len(recs), "reads": 0, "writes": 0, "flushes": 0, "trims": 0, "zeroes": 0,
         "read_bytes": 0, "written_bytes": 0}
    names = {"R": "reads", "W": "writes", "F": "flushes", "T": "trims", "Z": "zeroes"}
    resp = []
    seq_reads = 0
    prev_end = None
    streams = set()
    for r in recs:
        s[names.get(r.op, "other")] = s.get(names.get(r.op, "other"), 0) + 1
        streams.add(r.stream)
        if r.op == "R":
            s["read_bytes"] += r.len
            if prev_end == r.off:
                seq_reads += 1
            prev_end = r.off + r.len
        elif r.op in ("W", "Z"):
            s["written_bytes"] += r.len
        if r.op != "T":
            resp.append(r.complete - r.submit)
    s["streams"] = len(streams)
    if recs:
        s["span_seconds"] = round((max(r.complete for r in recs) - min(r.submit for r in recs)) / 1e9, 6)
    else:
        s["span_seconds"] = 0.0
    s["sequential_read_share"] = round(seq_reads / s["reads"], 4) if s["reads"] else 0.0
    s["mean_read_kib"] = round(s["read_bytes"] / s["reads"] / 1024, 2) if s["reads"] else 0.0
    if resp:
        resp.sort()
        s["response_ms"] = {"mean": round(sum(resp) / len(resp) / 1e6, 4),
                            "p50": round(resp[len(resp) // 2] / 1e6, 4),
                            "max": round(resp[-1] / 1e6, 4)}
    s["busy_seconds"] = round(busy_ns(recs) / 1e9, 6)
    s.update(think_stats(recs))
    return s


def busy_ns(recs):
    """Time at least one request was outstanding (union of [submit, complete])."""
    return union_ns((r.submit, r.complete) for r in recs)


def union_ns(intervals):
    """Total length of the union of (start, end) intervals."""
    total = 0
    cur_a = cur_b = None
    for a, b in sorted(intervals):
        if cur_b is None or a > cur_b:
            if cur_b is not None:
                total += cur_b - cur_a
            cur_a, cur_b = a, b
        else:
            cur_b = max(cur_b, b)
    if cur_b is not None:
        total += cur_b - cur_a
    return total


def think_stats(recs):
    """Gaps where nothing was outstanding: what closed-loop replay keeps as
    think time. Returns total seconds, count and mean in ms, and how many
    requests overlapped an earlier one of their stream."""
    last_complete = {}
    overlapped = 0
    for r in recs:
        lc = last_complete.get(r.stream)
        if lc is not None and r.submit < lc:
            overlapped += 1
        last_complete[r.stream] = max(lc or 0, r.complete)
    if not recs:
        return {"idle_seconds": 0.0, "overlapped_requests": 0}
    span = max(r.complete for r in recs) - min(r.submit for r in recs)
    return {"idle_seconds": round((span - busy_ns(recs)) / 1e9, 6), "overlapped_requests": overlapped}
