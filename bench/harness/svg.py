"""Plots written as SVG text directly (no dependencies)."""

from xml.sax.saxutils import escape

COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b"]


def _nice_max(v):
    if v <= 0:
        return 1.0
    import math
    e = 10 ** math.floor(math.log10(v))
    for m in (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10):
        if m * e >= v:
            return m * e
    return 10 * e


def _fmt(v):
    return f"{v:.0f}" if v >= 100 else f"{v:.1f}" if v >= 10 else f"{v:.2f}".rstrip("0").rstrip(".")


def bars(path, title, categories, series, ylabel):
    """Grouped bar chart. series: [(name, [value per category])]."""
    W, H, L, R, T, B = 760, 380, 70, 20, 40, 70
    pw, ph = W - L - R, H - T - B
    vmax = _nice_max(max([v for _, vs in series for v in vs if v is not None] or [1]))
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{W / 2}" y="22" text-anchor="middle" font-size="15">{escape(title)}</text>']
    for i in range(6):
        v = vmax * i / 5
        y = T + ph - ph * i / 5
        out.append(f'<line x1="{L}" y1="{y:.1f}" x2="{W - R}" y2="{y:.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{L - 6}" y="{y + 4:.1f}" text-anchor="end">{_fmt(v)}</text>')
    out.append(f'<text x="16" y="{T + ph / 2}" transform="rotate(-90 16 {T + ph / 2})" text-anchor="middle">{escape(ylabel)}</text>')
    n = max(len(categories), 1)
    gw = pw / n
    bw = gw * 0.8 / max(len(series), 1)
    for ci, cat in enumerate(categories):
        x0 = L + ci * gw + gw * 0.1
        for si, (_, vs) in enumerate(series):
            v = vs[ci]
            if v is None:
                continue
            h = ph * v / vmax
            x = x0 + si * bw
            out.append(f'<rect x="{x:.1f}" y="{T + ph - h:.1f}" width="{bw * 0.95:.1f}" height="{h:.1f}" fill="{COLORS[si % len(COLORS)]}"><title>{escape(cat)}: {v:.3f}</title></rect>')
            out.append(f'<text x="{x + bw * 0.47:.1f}" y="{T + ph - h - 3:.1f}" text-anchor="middle" font-size="10">{_fmt(v)}</text>')
        out.append(f'<text x="{L + ci * gw + gw / 2:.1f}" y="{T + ph + 16}" text-anchor="middle">{escape(cat)}</text>')
    out.append(f'<line x1="{L}" y1="{T + ph}" x2="{W - R}" y2="{T + ph}" stroke="black"/>')
    lx = L
    for si, (name, _) in enumerate(series):
        out.append(f'<rect x="{lx}" y="{H - 24}" width="12" height="12" fill="{COLORS[si % len(COLORS)]}"/>')
        out.append(f'<text x="{lx + 16}" y="{H - 14}">{escape(name)}</text>')
        lx += 24 + 7 * len(name)
    out.append("</svg>")
    with open(path, "w") as fh:
        fh.write("\n".join(out) + "\n")


def address_time(path, title, recs, bands=(), max_points=40000):
    """Block address (GiB) against time (s) for reads (blue) and writes (red),
    as in the papers' figures; bands: [(label, t0_ns, t1_ns)] shaded."""
    W, H, L, R, T, B = 900, 420, 70, 20, 40, 50
    pw, ph = W - L - R, H - T - B
    pts = [r for r in recs if r.op in ("R", "W", "Z")]
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{W / 2}" y="22" text-anchor="middle" font-size="15">{escape(title)}</text>']
    if not pts:
        out.append("</svg>")
        open(path, "w").write("\n".join(out))
        return
    t0 = min(r.submit for r in pts)
    tmax = max(r.submit for r in pts) - t0 or 1
    amax = _nice_max(max(r.off + r.len for r in pts) / 2**30)
    tnice = _nice_max(tmax / 1e9)
    sx = lambda t: L + pw * ((t - t0) / 1e9) / tnice  # noqa: E731
    sy = lambda a: T + ph - ph * (a / 2**30) / amax  # noqa: E731
    for label, a, b in bands:
        x1, x2 = sx(a), sx(b)
        out.append(f'<rect x="{x1:.1f}" y="{T}" width="{max(x2 - x1, 0.5):.1f}" height="{ph}" fill="#f3f3f3"/>')
        out.append(f'<text x="{(x1 + x2) / 2:.1f}" y="{T + 12}" text-anchor="middle" font-size="10" fill="#666">{escape(label)}</text>')
    for i in range(6):
        out.append(f'<text x="{L - 6}" y="{T + ph - ph * i / 5 + 4:.1f}" text-anchor="end">{_fmt(amax * i / 5)}</text>')
        out.append(f'<text x="{L + pw * i / 5:.1f}" y="{T + ph + 16}" text-anchor="middle">{_fmt(tnice * i / 5)}</text>')
    out.append(f'<text x="16" y="{T + ph / 2}" transform="rotate(-90 16 {T + ph / 2})" text-anchor="middle">address (GiB)</text>')
    out.append(f'<text x="{L + pw / 2}" y="{H - 8}" text-anchor="middle">time since the first request (s)</text>')
    out.append(f'<rect x="{L}" y="{T}" width="{pw}" height="{ph}" fill="none" stroke="black"/>')
    step = max(1, len(pts) // max_points)  # deterministic decimation
    for color, ops in (("#1f77b4", ("R",)), ("#d62728", ("W", "Z"))):
        d = []
        for r in pts[::step]:
            if r.op in ops:
                d.append(f"M{sx(r.submit):.1f} {sy(r.off):.1f}h1")
        if d:
            out.append(f'<path d="{"".join(d)}" stroke="{color}" stroke-width="1.5" fill="none" opacity="0.6"/>')
    out.append(f'<text x="{W - R - 110}" y="{T + 14}" fill="#1f77b4">reads</text><text x="{W - R - 60}" y="{T + 14}" fill="#d62728">writes</text>')
    out.append("</svg>")
    with open(path, "w") as fh:
        fh.write("\n".join(out) + "\n")
