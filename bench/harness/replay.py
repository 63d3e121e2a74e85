"""Closed-loop replay of a captured trace in `layoutd sim`.

A live run is replayed whole, once, and cut into phases afterwards (`whole`):
the live stack, on the volume file's geometry, with the workload's runtime
messages (a pool's snapshot create/delete) at the marker read the capture
made right after each, as one stream in recorded order. Replaying each
phase's slice alone on a freshly formatted stack (what this harness did until
session 25) is wrong for any target with state: a pool's origin reads
unallocated chunks as zeros without touching the disk and its snapshot does
not exist (every read EINVAL), a DCD or log starts empty. Across NBD
connections (a pool's origin and snapshot exports) the closed loop keeps no
order: a stream's first request goes at its recorded time, however far the
other stream lags, so the snapshot's reads could run before the message that
creates it and overlap the origin's phase; one stream keeps the harness's
order.
"""

import json
import os
import subprocess

import capreplay

from log import log


def find_sim(layoutd):
    """argv prefix of the simulator: `layoutd sim` if the binary has it, else
    the `sim` example built from the same command module (layoutd_sim::command)
    (cargo build --release -p layoutd-sim --example sim); None if neither."""
    p = subprocess.run([layoutd, "sim", "--help"], capture_output=True, text=True)
    if p.returncode == 0:
        return [layoutd, "sim"]
    ex = os.path.join(os.path.dirname(layoutd), "examples", "sim")
    if os.access(ex, os.X_OK):
        return [ex]
    return None


def run(sim, trace, json_out, disk, config=None, seed=0, scheduler="fifo", queue_depth=1, report=None):
    """Replays `trace` closed-loop and returns the simulator's JSON."""
    cmd = [*sim, "--trace", trace, "--format", "layoutd", "--disk", disk, "--closed-loop",
           "--scheduler", scheduler, "--queue-depth", str(queue_depth), "--seed", str(seed),
           "--json", json_out, "--no-progress"]
    if config:
        cmd += ["--config", config]
    if report:
        cmd += ["--report", report]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"`{' '.join(cmd)}` exited {p.returncode}: {p.stderr.strip()}")
    log(f"sim: {p.stderr.strip().splitlines()[-1] if p.stderr.strip() else 'done'}")
    with open(json_out) as fh:
        return json.load(fh)


def command_text(sim, trace, json_out, disk, config=None, seed=0, scheduler="fifo", queue_depth=1):
    """The replay command as a copy-pasteable line using `layoutd sim`."""
    parts = ["target/release/layoutd sim" if sim and sim[-1] == "sim" and len(sim) == 2 else
             "target/release/examples/sim",
             f"--trace {trace} --format layoutd --disk {disk} --closed-loop",
             f"--scheduler {scheduler} --queue-depth {queue_depth} --seed {seed} --json {json_out}"]
    if config:
        parts.append(f"--config {config}")
    return " ".join(parts)


def whole(sim, trace, out_base, disk, config, seed, scheduler, queue_depth, messages, device, export_bytes, phases,
          live_dispatch=False, delivery_us=0):
    """Replays the live `trace` (already one stream) closed-loop through
    `config` on `device` = (offset, bytes) of `disk`, with `messages`
    [(request index, text)], recording to out_base.rec; returns (the
    simulator's JSON, [{"span_seconds", "busy_seconds", "requests"} of each
    phase of `phases` (their marker pairs)]); `live_dispatch`: lower
    requests reach the disk as `serve` submits them (--live-dispatch). A replay in which a request
    failed is not the run it replays: raises, naming the first failures."""
    cmd = [*sim, "--trace", trace, "--format", "layoutd", "--disk", disk, "--closed-loop",
           "--scheduler", scheduler, "--queue-depth", str(queue_depth), "--seed", str(seed),
           "--device-offset", str(device[0]), "--device-bytes", str(device[1]),
           "--record-trace", out_base + ".rec", "--json", out_base + ".json", "--no-progress",
           *[f"--message=@{n}:{text}" for n, text in messages]]
    if config:
        cmd += ["--config", config]
    if live_dispatch:
        cmd.append("--live-dispatch")
        if delivery_us:
            cmd += ["--live-delivery-us", str(delivery_us)]
    js, cut = capreplay.run_cut(cmd, out_base, export_bytes, phases)
    if js["errors_count"]:
        raise RuntimeError(f"the replay of {trace} failed {js['errors_count']} requests (first: "
                           f"{js.get('first_errors')}); it is not the recorded run")
    # Kept with the results: no path of this machine in it.
    js["trace"]["path"] = "trace.gz, as one stream"
    js["stack"]["config"] = f"{os.path.basename(config) if config else 'linear'} on {device[1]} bytes at byte {device[0]}"
    with open(out_base + ".json", "w") as fh:
        json.dump(js, fh, indent=1)
        fh.write("\n")
    return js, [{"span_seconds": c["span_s"], "busy_seconds": c["busy_s"], "requests": c["requests"]} for c in cut]
