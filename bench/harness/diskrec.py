"""The emulated disk's own record (`serve --record-disk`, `layoutd sim
--record-disk`: one line per request the disk model served) and the
interval sums that set it against a trace's busy time."""
import gzip


def rows(path):
    """(arrival, start, complete, op, offset, length, hit, seek, rotation) per line, ns, in file order."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            a, s, c, op, off, n, hit, seek, rot, _ = line.split()
            yield int(a), int(s), int(c), op, int(off), int(n), hit == "1", int(seek), int(rot)


def union(iv):
    """The union of (start, end) intervals, as a sorted list of disjoint [start, end]."""
    out = []
    for a, b in sorted(iv):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return out


def overlap(u, v):
    """Total length of the intersection of two sorted disjoint interval lists."""
    i = j = 0
    total = 0
    while i < len(u) and j < len(v):
        lo, hi = max(u[i][0], v[j][0]), min(u[i][1], v[j][1])
        total += max(0, hi - lo)
        if u[i][1] < v[j][1]:
            i += 1
        else:
            j += 1
    return total


def served_within(busy, disk_rows):
    """ns of the busy intervals (a trace's requests' submit..complete) in
    which the disk was serving (its requests' start..complete)."""
    b = union(busy)
    if not b:
        return 0
    lo, hi = b[0][0], b[-1][1]
    return overlap(b, union([(r[1], r[2]) for r in disk_rows if r[2] >= lo and r[1] <= hi]))
