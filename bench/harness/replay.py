"""Closed-loop replay of a captured trace in `layoutd sim`."""

import json
import os
import subprocess

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
