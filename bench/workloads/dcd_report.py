#!/usr/bin/env python3
"""The simulator half and the report of the DCD benchmark (bench/dcd_replay.sh).

Inputs (committed): bench/traces/dcd/REGIME-STACK.trace.gz (the live runs'
recorded traces) and bench/results/dcd/live/REGIME-STACK/result.json (phase
times and the marker reads that cut each trace into phases).

Outputs under bench/results/dcd/:
  sim/REGIME/TRACE-via-STACK/PHASE.json  each phase slice replayed closed-loop
      (layoutd sim --closed-loop --disk barracuda4g --scheduler fifo
      --queue-depth 1 --seed 0) through linear, dcd and dcd with fua=log
  fig10.json, fig10_random_write_bw.svg   random-write bandwidth by request size
  fig11_write_response.svg, fig12_read_response.svg   response-time histograms
  phases_REGIME.svg, summary.json, README.md (generated part; the hand-written
  notes below the notes mark are kept)
"""

import argparse
import json
import os
import random
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.dirname(HERE)
ROOT = os.path.dirname(BENCH)
sys.path.insert(0, os.path.join(BENCH, "harness"))
sys.dont_write_bytecode = True

import replay  # noqa: E402
import svg  # noqa: E402
import readme  # noqa: E402
import tracefile  # noqa: E402
from log import log  # noqa: E402

RES = os.path.join(BENCH, "results", "dcd")
TRACES = os.path.join(BENCH, "traces", "dcd")
DISK = "barracuda4g"
REGIMES = {
    "sync-meta": "ext4 without journal (`mkfs -O ^has_journal`), mounted `dirsync`: synchronous in-place "
                 "directory updates, the paper's UFS regime",
    "ext4": "ext4 defaults (journal, data=ordered, delayed allocation), mounted with the kernel defaults",
}
STACKS = {  # name -> config for the simulator
    "linear": None,
    "dcd": os.path.join(ROOT, "examples", "dcd.toml"),
    "dcd-fua-log": os.path.join(RES, "dcd-fua-log.toml"),
}
VARIANTS = {  # simulator only: the plain run's trace through these
    "dcd-seg256k": os.path.join(RES, "variants", "dcd-seg256k.toml"),
    "dcd-seg1m": os.path.join(RES, "variants", "dcd-seg1m.toml"),
}
NOTES_MARK = "<!-- Notes below this line are written by hand and kept when bench/dcd_replay.sh regenerates this file. -->"
SIZES_KIB = [1, 2, 4, 8, 16, 32, 64, 128, 256]


def rel(p):
    return os.path.relpath(p, ROOT)


# -- simulator half ------------------------------------------------------------

def load_run(regime, stack):
    d = os.path.join(RES, "live", f"{regime}-{stack}")
    rj = os.path.join(d, "result.json")
    tr = os.path.join(TRACES, f"{regime}-{stack}.trace.gz")
    if not (os.path.exists(rj) and os.path.exists(tr)):
        return None
    return json.load(open(rj)), tr


def replay_all(sim, tmp):
    out = {}
    for regime in REGIMES:
        for tstack in ("plain", "dcd"):
            run = load_run(regime, tstack)
            if not run:
                continue
            r, tr = run
            pairs = [(p["name"], p["markers"][0], p["markers"][1]) for p in r["phases"]]
            stacks = dict(STACKS, **(VARIANTS if tstack == "plain" else {}))
            for sstack, cfg in stacks.items():
                d = os.path.join(RES, "sim", regime, f"{tstack}-trace-via-{sstack}")
                os.makedirs(d, exist_ok=True)
                for name, ma, mb in pairs:
                    t = os.path.join(tmp, f"{regime}-{tstack}-{name}.trace")
                    if not os.path.exists(t):
                        tracefile.in_phase(name, tracefile.cut, tr, r["rig"]["export_bytes"], ma, mb, t)
                    js = replay.run(sim, t, os.path.join(d, f"{name}.json"), DISK, cfg, 0, "fifo", 1)
                    out[(regime, tstack, sstack, name)] = js
    return out


def whole_replay(sim, tmp, regime, tstack, sstack):
    """Replays a whole recorded trace (mkfs, every phase, the remounts between
    them) closed-loop through STACK with a `trace` layer on top, so the dcd
    log carries over from phase to phase and destage runs in the gaps as it
    did live. Returns {phase: (live s, sim s)}, both measured the same way:
    from the completion of the phase's start marker read to the submission
    of its end marker read (the harness's phase brackets)."""
    run = load_run(regime, tstack)
    if not run:
        return {}
    r, tr = run
    cfg = os.path.join(tmp, f"trace-{sstack}.toml")
    with open(cfg, "w") as fh:
        fh.write('version = 1\n\n[[layer]]\ntarget = "trace"\n\n')
        if STACKS[sstack]:
            fh.write("".join(ln for ln in open(STACKS[sstack]) if not ln.startswith("version")))
        else:
            fh.write('[[layer]]\ntarget = "linear"\n')
    t = os.path.join(tmp, f"{regime}-{tstack}-whole.trace")
    tracefile.convert(tr, t)
    rec = os.path.join(tmp, f"{regime}-{tstack}-via-{sstack}-whole.rec")
    d = os.path.join(RES, "sim", regime)
    os.makedirs(d, exist_ok=True)
    cmd = [*sim, "--trace", t, "--format", "layoutd", "--disk", DISK, "--closed-loop", "--scheduler", "fifo",
           "--queue-depth", "1", "--seed", "0", "--config", cfg, "--record-trace", rec, "--no-progress",
           "--json", os.path.join(d, f"{tstack}-trace-via-{sstack}-whole.json")]
    import subprocess
    subprocess.run(cmd, check=True, capture_output=True)
    eb = r["rig"]["export_bytes"]
    ml, ms = tracefile.markers(tr, eb), tracefile.markers(rec, eb)
    gap = lambda m, a, b: round((m[b]["submit_ns"] - m[a]["complete_ns"]) / 1e9, 4)  # noqa: E731
    out = {}
    for p in r["phases"]:
        a, b = p["markers"]
        out[p["name"]] = (gap(ml, a, b), gap(ms, a, b))
    return out


def lower_traffic(sim, tmp, regime):
    """What dcd sent to the disk per phase in the whole-trace replay of the
    dcd run: the same replay as `whole_replay` with the `trace` layer moved
    below dcd (a pass-through layer takes no time, so the run is the same),
    cut into phases by the phase windows of the top-of-stack recording.
    Returns {phase: {log_w, log_r, home_w, home_r: (count, bytes)}}."""
    run = load_run(regime, "dcd")
    if not run:
        return {}
    r, tr = run
    top = os.path.join(tmp, f"{regime}-dcd-via-dcd-whole.rec")
    if not os.path.exists(top):
        return {}
    cfg = os.path.join(tmp, "dcd-over-trace.toml")
    with open(cfg, "w") as fh:
        fh.write("".join(open(STACKS["dcd"])))
        fh.write('\n[[layer]]\ntarget = "trace"\n\n[[layer]]\ntarget = "linear"\n')
    low = os.path.join(tmp, f"{regime}-dcd-lower.rec")
    t = os.path.join(tmp, f"{regime}-dcd-whole.trace")
    import subprocess
    subprocess.run([*sim, "--trace", t, "--format", "layoutd", "--disk", DISK, "--closed-loop", "--scheduler", "fifo",
                    "--queue-depth", "1", "--seed", "0", "--config", cfg, "--record-trace", low, "--no-progress",
                    "--json", os.path.join(tmp, "lower.json")], check=True, capture_output=True)
    m = tracefile.markers(top, r["rig"]["export_bytes"])
    log_end = 64 << 20  # examples/dcd.toml: log_offset 0, log_length 64 MiB
    lows = tracefile.read(low)
    out = {}
    for p in r["phases"]:
        a, b = p["markers"]
        t0, t1 = m[a]["complete_ns"], m[b]["submit_ns"]
        c = {k: [0, 0] for k in ("log_w", "log_r", "home_w", "home_r")}
        for x in lows:
            if t0 <= x.submit < t1 and x.op in ("R", "W"):
                k = ("log_" if x.off < log_end else "home_") + x.op.lower()
                c[k][0] += 1
                c[k][1] += x.len
        out[p["name"]] = c
    return out


# -- figure 10: random-write bandwidth by request size ---------------------------

def fig10(sim, tmp):
    """20 MiB of random writes per request size (as the paper), one at a time
    (closed loop, no think time), through a plain linear stack on the model."""
    cap = None
    rows = []
    for kib in SIZES_KIB:
        size = kib * 1024
        n = (20 << 20) // size
        rng = random.Random(kib)
        span = 4000 << 20  # inside the barracuda4g's 4.32 GB minus the superblock MiB
        t = os.path.join(tmp, f"rw{kib}k.trace")
        with open(t, "w") as fh:
            fh.write(tracefile.HEADER)
            for i in range(n):
                off = rng.randrange(0, (span - size) // 512) * 512
                fh.write(f"{2 * i} {2 * i + 2} 0 W {off} {size} -\n")
        js = replay.run(sim, t, os.path.join(tmp, f"rw{kib}k.json"), DISK, None, 0, "fifo", 1)
        cap = js["disk"].get("capacity_bytes", cap)
        sec = js["simulated_seconds"]
        rows.append({"request_kib": kib, "requests": n, "seconds": round(sec, 4),
                     "mb_s": round((20 << 20) / sec / 1e6, 4),
                     "ms_per_request": round(sec / n * 1000, 4)})
    by = {r["request_kib"]: r for r in rows}
    for r in rows:
        r["x_of_128k"] = round(by[128]["mb_s"] / r["mb_s"], 2)
    json.dump({"disk": DISK, "method": "20 MiB of uniformly random 512-aligned writes per size over the first "
               "4000 MiB, closed loop, fifo, queue depth 1, seed 0, plain linear stack", "rows": rows},
              open(os.path.join(RES, "fig10.json"), "w"), indent=1)
    svg.bars(os.path.join(RES, "fig10_random_write_bw.svg"),
             f"random-write bandwidth by request size ({DISK} model, layoutd sim)",
             [f"{k}K" for k in SIZES_KIB], [("MB/s", [r["mb_s"] for r in rows])], "MB/s")
    return rows


def bw_of(rows, nbytes):
    """MB/s of a random write of nbytes, interpolated in log2(size)."""
    import math
    kib = max(nbytes / 1024, SIZES_KIB[0])
    pts = [(r["request_kib"], r["mb_s"]) for r in rows]
    if kib >= pts[-1][0]:
        return pts[-1][1]
    for (k0, b0), (k1, b1) in zip(pts, pts[1:]):
        if k0 <= kib <= k1:
            f = (math.log2(kib) - math.log2(k0)) / (math.log2(k1) - math.log2(k0))
            return b0 + f * (b1 - b0)
    return pts[0][1]


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


def max_speedup(rows, recs, live_s, bypass=64 << 10):
    """The paper's derivation (sec. 4, "Maximum possible speedup") on the
    plain run's trace of one phase.

    W = time with at least one write outstanding (measured; with a depth-1
    FIFO disk that is the write service time plus reads queued behind
    writes), O = live phase time - W (reads alone, CPU, think time: DCD
    cannot shorten it). Per request size s, DCD's log writes are
    BW(128 KiB) / BW(s) times faster (figure 10); writes >= bypass go home
    as before (factor 1). S_w = the write-time-weighted speedup of W
    (harmonic: sum t_i / sum t_i / f_i, t_i = n_i s_i / BW(s_i)).
      bound       = live / (O + W / S_w)   (the paper's maximum)
      free_writes = live / O               (writes cost nothing at all)
    Destage is assumed to happen in idle time, as in the paper."""
    bw128 = bw_of(rows, 128 * 1024)
    t_plain = t_dcd = 0.0
    mix = {}
    for r in recs:
        if r.op != "W":
            continue
        t = r.len / (bw_of(rows, r.len) * 1e6)
        t_plain += t
        t_dcd += t if r.len >= bypass else r.len / (bw128 * 1e6)
        b = "<=4K" if r.len <= 4096 else "8K" if r.len <= 8192 else "12-60K" if r.len < bypass else "bypass"
        mix[b] = mix.get(b, 0) + 1
    if t_plain == 0:
        return None
    s_w = t_plain / t_dcd
    w = min(union_ns([(r.submit, r.complete) for r in recs if r.op == "W"]) / 1e9, live_s)
    o = live_s - w
    return {"write_busy_s": round(w, 3), "other_s": round(o, 3), "write_share": round(w / live_s, 3),
            "write_speedup_fig10": round(s_w, 2), "phase_bound": round(live_s / (o + w / s_w), 2),
            "free_writes_bound": round(live_s / o, 2) if o > 0 else None, "mix": mix}


# -- figures 11 and 12 -----------------------------------------------------------

def hist_svg(path, title, panels):
    """panels: [(label, [response ms], x_max_ms)], side by side, each with its
    own x scale (as the paper's figures), y = % of requests, 25 bins."""
    from xml.sax.saxutils import escape
    W, H = 460 * len(panels), 330
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{W / 2}" y="20" text-anchor="middle" font-size="15">{escape(title)}</text>']
    for pi, (label, vals, xmax) in enumerate(panels):
        x0, L, T, pw, ph = pi * 460, pi * 460 + 55, 50, 380, 220
        nb = 25
        cnt = [0] * nb
        over = 0
        for v in vals:
            b = int(v / xmax * nb)
            if b >= nb:
                over += 1
                b = nb - 1
            cnt[b] += 1
        n = max(len(vals), 1)
        pct = [100 * c / n for c in cnt]
        ymax = svg._nice_max(max(pct) if pct else 1)
        mean = sum(vals) / n if vals else 0
        out.append(f'<text x="{L + pw / 2}" y="{T - 10}" text-anchor="middle">{escape(label)}: {len(vals)} requests, '
                   f'mean {mean:.2f} ms, {100 * sum(1 for v in vals if v < 1) / n:.0f} % under 1 ms</text>')
        out.append(f'<rect x="{L}" y="{T}" width="{pw}" height="{ph}" fill="none" stroke="black"/>')
        for i in range(6):
            y = T + ph - ph * i / 5
            out.append(f'<text x="{L - 5}" y="{y + 4:.1f}" text-anchor="end">{svg._fmt(ymax * i / 5)}</text>')
            out.append(f'<text x="{L + pw * i / 5:.1f}" y="{T + ph + 15}" text-anchor="middle">{svg._fmt(xmax * i / 5)}</text>')
        for b, p in enumerate(pct):
            h = ph * p / ymax
            out.append(f'<rect x="{L + b * pw / nb:.1f}" y="{T + ph - h:.1f}" width="{pw / nb * 0.9:.1f}" '
                       f'height="{h:.1f}" fill="{svg.COLORS[pi % 2]}"><title>{p:.1f} %</title></rect>')
        out.append(f'<text x="{L + pw / 2}" y="{T + ph + 32}" text-anchor="middle">response time (ms)'
                   f'{f"; last bin includes {over} beyond" if over else ""}</text>')
        out.append(f'<text x="{x0 + 14}" y="{T + ph / 2}" transform="rotate(-90 {x0 + 14} {T + ph / 2})" '
                   f'text-anchor="middle">% of requests</text>')
    out.append("</svg>")
    open(path, "w").write("\n".join(out) + "\n")


def pick_xmax(vals):
    if not vals:
        return 1.0
    s = sorted(vals)
    return svg._nice_max(s[int(0.98 * (len(s) - 1))])


# -- report ------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layoutd", default=os.path.join(ROOT, "target/release/layoutd"))
    ap.add_argument("--hist-phase", default="copy-4", help="phase of figures 11/12 (paper: 4-user copy)")
    a = ap.parse_args()
    tracefile.use(os.path.abspath(a.layoutd))
    sim = replay.find_sim(os.path.abspath(a.layoutd))
    if not sim:
        sys.exit("no `layoutd sim`: cargo build --workspace --release")
    # a fixed scratch path, so the trace paths inside the JSON are the same on every run
    # (same traces, same JSON, byte for byte); removed at the end
    tmp = os.path.join(tempfile.gettempdir(), "layoutd-dcd-report")
    import shutil
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    log("figure 10 sweep")
    rows = fig10(sim, tmp)
    log("replaying the committed traces")
    sims = replay_all(sim, tmp)
    log("whole-trace replays (log state carried over)")
    whole = {(rg, st): whole_replay(sim, tmp, rg, st, "linear" if st == "plain" else "dcd")
             for rg in REGIMES for st in ("plain", "dcd")}
    lower = {rg: lower_traffic(sim, tmp, rg) for rg in REGIMES}
    summary = {"disk": DISK, "fig10": rows, "regimes": {}}
    L = ["# DCD benchmark: N-user untar, copy and remove on ext4 over layoutd", "",
         "Generated by `bench/dcd_replay.sh` (live half: `bench/dcd_replay.sh --live`). "
         "A benchmark, not a test: numbers as measured in one live run per stack. "
         "Hand-written analysis below the generated part.", ""]
    for regime, desc in REGIMES.items():
        runs = {s: load_run(regime, s) for s in ("plain", "dcd")}
        if not all(runs.values()):
            continue
        rp, tp = runs["plain"]
        rd, td = runs["dcd"]
        wins = {s: tracefile.windows(runs[s][1], runs[s][0]["rig"]["export_bytes"],
                                     [(p["name"], p["markers"][0], p["markers"][1]) for p in runs[s][0]["phases"]])
                for s in runs}
        p0 = rp["params"]
        L += [f"## Regime `{regime}`: {desc}", "",
              f"Tree: {p0['source']}, {p0['files']} files in {p0['dirs']} directories, {p0['tree_bytes']} bytes "
              f"(mean {p0['mean_file_bytes']} B); tarball sha256 `{p0['tarball_sha256']}` ({p0['tar_command']}). "
              f"Rig: `serve --emulate {rp['rig']['emulate']}`, plain = {rp['rig']['size']} device with one linear "
              f"target, dcd = {rd['rig']['size']} device with `{rel(rd['rig']['config'])}` (64 MiB log at the "
              f"front, the same 3 GiB - 1 MiB export), mkfs {' '.join(rp['rig']['mkfs_opts'])}, mount "
              f"{rp['rig']['mount_opts']}; e2fsck clean: plain {rp['rig'].get('fsck_clean')}, dcd {rd['rig'].get('fsck_clean')}. "
              f"Live runs started {rp['started']} and {rd['started']} (git {rp['git_head']}, {rd['git_head']}).", "",
              "| phase | plain live s (no sync) | dcd live s (no sync) | **live speedup** (no sync) | "
              "plain sim s | dcd sim s | **sim speedup** | plain trace via dcd sim s | dcd fua=log live s / sim s | "
              "write resp. ms plain / dcd (live) | read resp. ms plain / dcd (live) | plain write-busy share | "
              "max speedup (fig. 10) | if writes were free |",
              "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
        reg = summary["regimes"].setdefault(regime, {"phases": {}})
        for pp, pd in zip(rp["phases"], rd["phases"]):
            name = pp["name"]
            sp = sims.get((regime, "plain", "linear", name), {}).get("simulated_seconds")
            sd = sims.get((regime, "dcd", "dcd", name), {}).get("simulated_seconds")
            sx = sims.get((regime, "plain", "dcd", name), {}).get("simulated_seconds")
            sl = sims.get((regime, "dcd", "dcd-fua-log", name), {}).get("simulated_seconds")
            rfl = load_run(regime, "dcd-fua-log")
            lfl = next((q["live_seconds"] for q in rfl[0]["phases"] if q["name"] == name), None) if rfl else None

            def mean_resp(s, op):
                v = [(r.complete - r.submit) / 1e6 for r in wins[s][name] if r.op == op]
                return sum(v) / len(v) if v else 0.0
            wr = (mean_resp("plain", "W"), mean_resp("dcd", "W"))
            rr = (mean_resp("plain", "R"), mean_resp("dcd", "R"))
            ms = max_speedup(rows, wins["plain"][name], pp["live_seconds"])
            dcdc = sims.get((regime, "dcd", "dcd", name), {}).get("stack", {}).get("layers", [{}])[0].get("counters", {})
            reg["phases"][name] = {
                "live_plain_s": pp["live_seconds"], "live_dcd_s": pd["live_seconds"],
                "live_plain_nosync_s": pp["seconds"], "live_dcd_nosync_s": pd["seconds"],
                "sim_plain_s": sp, "sim_dcd_s": sd, "sim_plain_trace_via_dcd_s": sx, "sim_dcd_fua_log_s": sl, "live_dcd_fua_log_s": lfl,
                "write_resp_ms_live": [round(x, 3) for x in wr], "read_resp_ms_live": [round(x, 3) for x in rr],
                "requests": [len(wins["plain"][name]), len(wins["dcd"][name])],
                "max_speedup": ms, "sim_dcd_counters": dcdc}
            f = lambda v: f"{v:.2f}" if v is not None else "-"  # noqa: E731
            L.append(f"| {name} | {pp['live_seconds']:.2f} ({pp['seconds']:.2f}) | {pd['live_seconds']:.2f} "
                     f"({pd['seconds']:.2f}) | **{pp['live_seconds'] / pd['live_seconds']:.2f}x** "
                     f"({pp['seconds'] / max(pd['seconds'], 1e-3):.2f}x) | {f(sp)} | {f(sd)} | "
                     f"**{(sp / sd) if sp and sd else 0:.2f}x** | {f(sx)} | {f(lfl)} / {f(sl)} | {wr[0]:.2f} / {wr[1]:.2f} | "
                     f"{rr[0]:.2f} / {rr[1]:.2f} | {ms['write_share'] if ms else '-'} | {ms['phase_bound'] if ms else '-'}x | "
                     f"{ms['free_writes_bound'] if ms else '-'}x |")
        tl = sum(p["live_seconds"] for p in rp["phases"]), sum(p["live_seconds"] for p in rd["phases"])
        L.append(f"| **all phases** | {tl[0]:.2f} | {tl[1]:.2f} | **{tl[0] / tl[1]:.2f}x** | "
                 f"{sum(v['sim_plain_s'] or 0 for v in reg['phases'].values()):.2f} | "
                 f"{sum(v['sim_dcd_s'] or 0 for v in reg['phases'].values()):.2f} | | | | | | | | |")
        L.append("")
        wp, wd = whole.get((regime, "plain"), {}), whole.get((regime, "dcd"), {})
        if wp and wd:
            L += ["Whole-trace replay: each run's whole trace replayed as one (`sim/" + regime + "/*-whole.json`), so the "
                  "dcd log carries over from phase to phase and destage runs in the gaps between phases and inside "
                  "them, as it did live (the per-phase replays above start each phase with an empty log). Phase = start "
                  "marker's completion to end marker's submission, live and simulated alike (includes the sync):", "",
                  "| phase | plain live s | plain sim s | dcd live s | dcd sim s | live speedup | sim speedup |",
                  "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
            for name in wp:
                (lp, sp_), (ld, sd_) = wp[name], wd[name]
                reg["phases"][name]["whole_trace"] = {"plain_live": lp, "plain_sim": sp_, "dcd_live": ld, "dcd_sim": sd_}
                L.append(f"| {name} | {lp:.2f} | {sp_:.2f} | {ld:.2f} | {sd_:.2f} | {lp / ld:.2f}x | {sp_ / sd_:.2f}x |")
            L.append("")
        lt = lower.get(regime, {})
        if lt:
            L += ["What dcd sent to the disk in that whole-trace replay, per phase (a `trace` layer under dcd; "
                  "requests whose submission falls in the phase window; log region = the first 64 MiB). Home "
                  "writes are the bypassed writes plus destage writes; log reads are destage reads plus reads of "
                  "logged data. Compare with the phase's own counts (table above: absorbed and bypassed):", "",
                  "| phase | log writes (MiB) | log reads (MiB) | home writes (MiB) | home reads (MiB) |",
                  "| --- | ---: | ---: | ---: | ---: |"]
            for name, c in lt.items():
                reg["phases"].setdefault(name, {})["whole_trace_lower"] = c
                f2 = lambda k: f"{c[k][0]} ({c[k][1] / 2**20:.1f})"  # noqa: E731
                L.append(f"| {name} | {f2('log_w')} | {f2('log_r')} | {f2('home_w')} | {f2('home_r')} |")
            L.append("")
        L += ["Simulator-only variants (`variants/*.toml`): the plain run's trace replayed through dcd stacks "
              "with larger segments and bypass threshold (`segment_bytes` = `bypass_bytes` = 256 KiB or 1 MiB; "
              "every other key as examples/dcd.toml), against examples/dcd.toml (64 KiB bypass, 128 KiB segments). "
              "Seconds, and mean write response in ms:", "",
              "| phase | linear | dcd (example) | dcd-seg256k | dcd-seg1m |", "| --- | ---: | ---: | ---: | ---: |"]
        for name in reg["phases"]:
            cells = []
            for st in ("linear", "dcd", *VARIANTS):
                js = sims.get((regime, "plain", st, name))
                cells.append(f"{js['simulated_seconds']:.2f} s, {js['write_response_ms']['mean']:.2f} ms" if js else "-")
            L.append(f"| {name} | " + " | ".join(cells) + " |")
        L.append("")
        L += ["Plain run's writes by size (share of write requests; the paper's 4-user remove: 35 % 1 KB, "
              "15 % 2 KB, 50 % 8 KB), and W / O of the derivation:", "",
              "| phase | writes | <= 4 KiB | 8 KiB | 12-60 KiB | >= 64 KiB (bypassed by dcd) | W s | O s | S_w |",
              "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for name, v in reg["phases"].items():
            ms = v["max_speedup"]
            if not ms:
                continue
            m = ms["mix"]
            n = sum(m.values())
            pc = lambda k: f"{100 * m.get(k, 0) / n:.0f} %"  # noqa: E731
            L.append(f"| {name} | {n} | {pc('<=4K')} | {pc('8K')} | {pc('12-60K')} | {pc('bypass')} | "
                     f"{ms['write_busy_s']:.2f} | {ms['other_s']:.2f} | {ms['write_speedup_fig10']} |")
        L.append("")
        # dcd counters per phase (sim replay of the dcd run's trace through dcd)
        L += [f"dcd counters per phase (replay of the dcd run's trace through `examples/dcd.toml`, `sim/{regime}/dcd-trace-via-dcd/*.json`):", "",
              "| phase | writes absorbed | bypassed (>= 64 KiB) | fua writes | flushes | log segments written | "
              "destaged MiB | overwritten before destage MiB | forced destages | writes held | read hits RAM/log/data MiB |",
              "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
        for name, v in reg["phases"].items():
            c = v["sim_dcd_counters"]
            g = lambda k: c.get(k, 0)  # noqa: E731
            L.append(f"| {name} | {g('writes_absorbed_count')} | {g('writes_bypassed_count')} | {g('writes_fua_count')} | "
                     f"{g('flushes_count')} | {g('log_segments_written_count')} | {g('destaged_bytes') / 2**20:.1f} | "
                     f"{g('overwritten_before_destage_bytes') / 2**20:.1f} | {g('forced_destages_count')} | "
                     f"{g('writes_held_count')} | {g('read_ram_bytes') / 2**20:.1f} / {g('read_log_bytes') / 2**20:.1f} / "
                     f"{g('read_data_bytes') / 2**20:.1f} |")
        L.append("")
        # figures 11/12 and the phase chart
        hp = a.hist_phase if a.hist_phase in wins["plain"] else list(wins["plain"])[-1]
        for op, fig, word in (("W", 11, "write"), ("R", 12, "read")):
            vp = [(r.complete - r.submit) / 1e6 for r in wins["plain"][hp] if r.op == op]
            vd = [(r.complete - r.submit) / 1e6 for r in wins["dcd"][hp] if r.op == op]
            path = os.path.join(RES, f"fig{fig}_{word}_response_{regime}.svg")
            hist_svg(path, f"figure {fig}: {word} response times, {hp}, regime {regime} (live, from the traces)",
                     [("dcd", vd, pick_xmax(vd)), ("plain", vp, pick_xmax(vp))])
            L += [f"![figure {fig}: {word} response times]({os.path.basename(path)})", ""]
        cats = [p["name"] for p in rp["phases"]]
        series = [("plain live", [p["live_seconds"] for p in rp["phases"]]),
                  ("dcd live", [p["live_seconds"] for p in rd["phases"]]),
                  ("plain sim", [reg["phases"][c]["sim_plain_s"] for c in cats]),
                  ("dcd sim", [reg["phases"][c]["sim_dcd_s"] for c in cats])]
        svg.bars(os.path.join(RES, f"phases_{regime}.svg"), f"seconds per phase, regime {regime} (sync included)",
                 cats, series, "seconds")
        L += [f"![seconds per phase](phases_{regime}.svg)", ""]
    L += ["## Figure 10: random-write bandwidth by request size (disk model)", "",
          f"20 MiB of random writes per size, one at a time, through a plain linear stack on the `{DISK}` model "
          "(`layoutd sim`, synthetic traces written by `bench/workloads/dcd_report.py`; `fig10.json`).", "",
          "| request | MB/s | ms / request | 128 KiB is x faster |", "| ---: | ---: | ---: | ---: |"]
    for r in rows:
        L.append(f"| {r['request_kib']} KiB | {r['mb_s']:.3f} | {r['ms_per_request']:.2f} | {r['x_of_128k']} |")
    L += ["", "![figure 10](fig10_random_write_bw.svg)", "",
          "Max speedup column: the paper's derivation, per phase, from the plain run's trace. W = the time at least "
          "one write was outstanding (plain write-busy share = W / live), O = the rest of the live phase time (reads, "
          "CPU, think time), which DCD cannot shorten. A logged write of size s gets faster by BW(128 KiB) / BW(s) "
          "(the table above), a write >= 64 KiB (bypassed) not at all; S_w = total plain write time / total time "
          "at those speedups (time-weighted). Max = live / (O + W / S_w). *If writes were free* = live / O. "
          "Destage is assumed to happen in idle time, as in the paper.", "",
          "Commands: `bench/dcd_replay.sh` (simulator half from the committed traces, a few seconds) and "
          "`bench/dcd_replay.sh --live` (live runs first; root, nbdkit, nbdfuse, fuse3).", "", NOTES_MARK]
    json.dump(summary, open(os.path.join(RES, "summary.json"), "w"), indent=1, default=str)
    readme.write_keeping_notes(os.path.join(RES, "README.md"), L, NOTES_MARK)
    shutil.rmtree(tmp, ignore_errors=True)
    log(f"wrote {rel(os.path.join(RES, 'README.md'))}")


if __name__ == "__main__":
    main()
