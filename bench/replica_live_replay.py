#!/usr/bin/env python3
"""Live replay of the noise experiment (thesis Figure 5.5) with one NBD
connection per process: the noise trace of bench/replica_postmark.py (the
recorded ext4 Postmark capture as process 1, one 4 KiB read of a seeded
random block the create phase wrote per process-1 read as process 2, mkfs's
discards as process 0) sent to a real `layoutd serve --emulate wd800` over
NBD, each process on its own connection (so its own base stream, as a
kernel NBD client with per-process queues would give), each closed-loop in
wall-clock time exactly as `layoutd sim --closed-loop` paces a stream: the
next request goes out when the previous one completed plus the recorded
think time, or, where the recording shows it overlapping its predecessor,
the recorded interval after the predecessor's issue. Plain linear and the
replica stack run side by side (started together, each on its own server,
volume file and emulated disk), so both see the same machine load.

What it is: a live replay of a real ext4 capture against the real server
and the emulated disk in real time; not a live file system (the replayed
writes carry a fixed non-zero pattern, not ext4's bytes, so the free-space
map comes from the replayed discards only, as in the simulator).

Usage: bench/replica_live_replay.py [--layoutd PATH] [--capture DIR]
       [--stacks linear,replica-all-goals] [--pairs 2] [--out DIR]
Writes OUT/result.json and OUT/README.md (default OUT:
bench/results/replica/live-replay). Needs nbdkit and a release build
(cargo build --workspace --release), not root. The NBD client is the
protocol's fixed-newstyle subset in this file (stdlib only). Each pair
takes about as long as plain's replay (9 minutes at the default capture).
"""
import argparse
import collections
import datetime
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.dont_write_bytecode = True
import replica_postmark as rp  # noqa: E402

# The simulator's disk: the stack spans the whole WD800 (156,301,488
# sectors), so the replica layer's metadata and every offset sit where
# they sit in the replay.
WD800_BYTES = 156301488 * 512

# --- a minimal NBD client (fixed newstyle, NBD_OPT_EXPORT_NAME, simple replies)
NBD_OPTS_MAGIC = 0x49484156454F5054  # "IHAVEOPT"
NBD_REQUEST_MAGIC = 0x25609513
NBD_REPLY_MAGIC = 0x67446698
CMD = {"R": 0, "W": 1, "F": 3, "T": 4, "Z": 6}
CMD_FLAG_FUA = 1


def recv_exact(sock, n):
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:], n - got)
        if k == 0:
            raise ConnectionError("the server closed the connection")
        got += k
    return buf


class Connection:
    """One NBD connection: requests are sent by one thread (the stream's),
    replies read by a thread of their own, which stamps each request's
    completion (time.monotonic_ns) and wakes the sender."""

    def __init__(self, path):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(path)
        hello = recv_exact(self.sock, 18)
        if hello[:8] != b"NBDMAGIC" or struct.unpack(">Q", hello[8:16])[0] != NBD_OPTS_MAGIC:
            raise ConnectionError("not a newstyle NBD server")
        server_flags = struct.unpack(">H", hello[16:18])[0]
        no_zeroes = server_flags & 2
        self.sock.sendall(struct.pack(">I", 1 | no_zeroes))  # fixed newstyle (+ no zeroes)
        self.sock.sendall(struct.pack(">QII", NBD_OPTS_MAGIC, 1, 0))  # NBD_OPT_EXPORT_NAME ""
        info = recv_exact(self.sock, 10 + (0 if no_zeroes else 124))
        self.size, self.flags = struct.unpack(">QH", info[:10])
        self.done = {}  # cookie -> [event, complete_ns, error]
        self.lock = threading.Lock()
        self.failed = None
        self.reader = threading.Thread(target=self._read_replies, daemon=True)
        self.reader.start()

    def _read_replies(self):
        scratch = bytearray(rp_max_read())
        try:
            while True:
                head = recv_exact(self.sock, 16)
                magic, error, cookie = struct.unpack(">IIQ", head)
                if magic != NBD_REPLY_MAGIC:
                    raise ConnectionError(f"bad reply magic {magic:#x}")
                with self.lock:
                    slot = self.done[cookie]
                if slot[3] and not error:  # read: its data follows
                    view = memoryview(scratch)[:slot[3]]
                    got = 0
                    while got < slot[3]:
                        k = self.sock.recv_into(view[got:], slot[3] - got)
                        if k == 0:
                            raise ConnectionError("the server closed the connection")
                        got += k
                slot[1] = time.monotonic_ns()
                slot[2] = error
                slot[0].set()
        except (OSError, ConnectionError) as e:
            self.failed = e
            with self.lock:
                for slot in self.done.values():
                    slot[0].set()

    def send(self, cookie, op, offset, length, fua, data):
        slot = [threading.Event(), None, None, length if op == "R" else 0]
        with self.lock:
            self.done[cookie] = slot
        head = struct.pack(">IHHQQI", NBD_REQUEST_MAGIC, CMD_FLAG_FUA if fua else 0, CMD[op], cookie, offset, length)
        if op == "W":
            self.sock.sendmsg([head, data[:length]])
        else:
            self.sock.sendall(head)
        return slot

    def close(self):
        try:
            self.sock.sendall(struct.pack(">IHHQQI", NBD_REQUEST_MAGIC, 0, 2, 0, 0, 0))  # NBD_CMD_DISC
        finally:
            self.sock.close()


def rp_max_read():
    return 32 << 20


# --- closed-loop pacing, one thread per stream ---------------------------

def load_trace(path):
    """{stream: [(submit, complete, op, offset, length, fua)]} in file order, and the first submit."""
    streams = collections.defaultdict(list)
    first = None
    with open(path) as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            p = line.split()
            s, c = int(p[0]), int(p[1])
            first = s if first is None else min(first, s)
            streams[int(p[2])].append((s, c, p[3], int(p[4]), int(p[5]), p[6] == "F"))
    return dict(streams), first


def sleep_until(t_ns):
    d = t_ns - time.monotonic_ns()
    if d > 0:
        time.sleep(d / 1e9)


def run_stream(conn, records, t0, base, data, out, errors):
    """As `layoutd sim --closed-loop` paces one base stream (docs/sim.md)."""
    issued = []
    prev = None
    for i, (s, c, op, off, ln, fua) in enumerate(records):
        if prev is None:
            target = t0 + (s - base)
        elif s >= prev[1]:
            slot = prev[3]
            slot[0].wait()
            if slot[1] is None:
                break
            target = slot[1] + (s - prev[1])
        else:
            target = prev[2] + (s - prev[0])
        sleep_until(target)
        now = time.monotonic_ns()
        slot = conn.send(i + 1, op, off, ln, fua, data)
        issued.append((now, slot))
        prev = (s, c, now, slot)
    for _, slot in issued:
        slot[0].wait()
    bad = [(records[k][2], records[k][3], slot[2]) for k, (_, slot) in enumerate(issued) if slot[2]]
    if conn.failed or bad or len(issued) != len(records):
        errors.append(f"{conn.failed or ''} {len(bad)} requests failed {bad[:3]}; {len(issued)}/{len(records)} issued")
    out.extend((t - t0, slot[1] - t0) for t, slot in issued)


# --- one stack: format, serve, replay, stop (a worker process) -----------

STACK_CONFIGS = {
    "linear": "version = 1\n[[layer]]\ntarget = \"linear\"\n",
}


def stack_config(name):
    if name in STACK_CONFIGS:
        return STACK_CONFIGS[name]
    return "version = 1\n[[layer]]\ntarget = \"replica\"\n" + dict(rp.STACKS)[name]


def worker(a):
    """Formats a volume with the stack, serves it under --emulate, replays
    the trace with one connection per stream and writes the per-request
    issue/completion times (ns from the common start) as JSON."""
    work = a.work
    cfg = os.path.join(work, "stack.toml")
    with open(cfg, "w") as f:
        f.write(stack_config(a.stack))
    img, sock = os.path.join(work, "vol.img"), os.path.join(work, "vol.sock")
    subprocess.run([a.layoutd, "format", "--device", img, "--size", str(a.size), "--force", "--config", cfg],
                   check=True, capture_output=True)
    log = open(os.path.join(work, "serve.log"), "w")
    server = subprocess.Popen([a.layoutd, "serve", "--device", img, "--socket", sock, "--threads", "16",
                               "--emulate", a.emulate], stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while not os.path.exists(sock):
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the server did not start: " + open(log.name).read()[-500:])
            time.sleep(0.05)
        streams, base = load_trace(a.trace)
        conns = {k: Connection(sock) for k in sorted(streams)}
        data = bytes((i * 131 + 7) % 251 + 1 for i in range(1 << 20))  # never a zero byte
        results = {k: [] for k in streams}
        errors = []
        # Both stacks' workers start at the same wall-clock instant.
        sleep_until_wall(a.start_at)
        t0 = time.monotonic_ns()
        threads = [threading.Thread(target=run_stream, args=(conns[k], streams[k], t0, base, data, results[k], errors))
                   for k in streams]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for c in conns.values():
            c.close()
        if errors:
            raise RuntimeError("; ".join(errors))
    finally:
        if server.poll() is None:
            server.send_signal(signal.SIGTERM)
            server.wait(timeout=120)
        log.close()
    with open(os.path.join(work, "result.json"), "w") as f:
        json.dump({"streams": {str(k): v for k, v in results.items()}, "server_exit": server.returncode,
                   "counters": counters(log.name)}, f)


def sleep_until_wall(t):
    d = t - time.time()
    if d > 0:
        time.sleep(d)


# --- the measurement -----------------------------------------------------

def phases(trace_streams, times, markers, names):
    """Per phase (process 1's marker reads): process 1's span (s), process
    2's mean response (ms) and request count, cut as
    bench/replica_postmark.py cuts the simulator's records, and the
    responses of either process longer than STALL_MS."""
    recs = sorted((iss, comp, op, off, ln, k) for k in (1, 2)
                  for (s, c, op, off, ln, fua), (iss, comp) in zip(trace_streams[k], times[str(k)]))
    p2, p2_count = rp.noise_process_2(recs, markers, names)
    spans = dict(rp.phase_spans([r[:5] for r in recs], markers, names))
    at = rp.marker_times([r[:5] for r in recs], markers)
    out = {}
    for i, name in enumerate(names):
        lo, hi = at[markers[2 * i]][1], at[markers[2 * i + 1]][0]
        out[name] = {"process_1_s": spans[name], "process_2_mean_ms": p2[name], "process_2_requests": p2_count[name],
                     "stalls": sum(1 for r in recs if lo <= r[0] < hi and (r[1] - r[0]) / 1e6 > STALL_MS)}
    return out


# A response this long is the machine stalling (memory pressure, another
# job), not the disk: the WD800 model serves any request in well under it.
STALL_MS = 1000.0


def sim_reference(layoutd, trace, stacks, markers, names, tmp):
    """The same trace replayed closed-loop in `layoutd sim` (--stream-detect,
    as the live runtime detects): with the live emulator's scheduler (FIFO,
    one request at the disk) and with the simulator's default (CLOOK, depth
    32, what bench/replica_postmark.py's tables use). Process 2's mean
    response (ms) per phase."""
    out = {}
    for label, args in [("fifo-1", ["--scheduler", "fifo", "--queue-depth", "1"]), ("clook-32", [])]:
        rp.SIM_ARGS[:] = ["--stream-detect"] + args
        for name in stacks:
            cfg = rp.STACKS[0][1] if name == "linear" else rp.config(dict(rp.STACKS)[name])
            _, recs = rp.sim(layoutd, trace, cfg, tmp, f"sim-{label}-{name}", streams=True)
            p2, _ = rp.noise_process_2(recs, markers, names)
            spans = dict(rp.phase_spans([r[:5] for r in recs], markers, names))
            ph = {n: {"process_2_mean_ms": p2[n], "process_1_s": spans[n]} for n in names}
            out.setdefault(label, {})[name] = ph
    return out


def counters(serve_log):
    """The stack's counters at shutdown (the server's `final status` line):
    the replica layer's reads, replicas and queues."""
    keep = ("reads_", "replicas_", "queues_", "candidates_count", "fs_scan_error")
    with open(serve_log) as f:
        line = next((ln for ln in f if "final status:" in ln), "")
    pairs = (w.split("=", 1) for w in line.split() if "=" in w)
    return {k: (int(v) if v.isdigit() else v) for k, v in pairs if k.startswith(keep)}


def uptime():
    with open("/proc/loadavg") as f:
        return [float(x) for x in f.read().split()[:3]]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layoutd", default=os.path.join(HERE, "..", "target", "release", "layoutd"))
    ap.add_argument("--capture", default=rp.CAPTURE, help="a `bench/run postmark-repeat` capture (default: %(default)s)")
    ap.add_argument("--stacks", default=f"linear,{rp.GOAL_STACK}", help="stacks run side by side (default: %(default)s)")
    ap.add_argument("--pairs", type=int, default=2, help="runs of the stacks side by side (default: %(default)s)")
    ap.add_argument("--emulate", default="wd800")
    ap.add_argument("--size", type=int, default=WD800_BYTES,
                    help="volume bytes (default: the whole WD800, as the simulator's stack; a sparse file)")
    ap.add_argument("--dir", default="/dev/shm", help="where the volume files and sockets live (default: %(default)s)")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "replica", "live-replay"))
    ap.add_argument("--no-sim", action="store_true", help="skip the simulator reference (the same trace in `layoutd sim`)")
    ap.add_argument("--report", action="store_true", help="only rewrite OUT/README.md from OUT/result.json")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--stack", help=argparse.SUPPRESS)
    ap.add_argument("--trace", help=argparse.SUPPRESS)
    ap.add_argument("--work", help=argparse.SUPPRESS)
    ap.add_argument("--start-at", type=float, help=argparse.SUPPRESS)
    a = ap.parse_args()
    a.layoutd = os.path.abspath(a.layoutd)
    if a.worker:
        return worker(a)
    if a.report:
        with open(os.path.join(a.out, "result.json")) as f:
            return write_readme(a.out, json.load(f))
    if shutil.which("nbdkit") is None or not os.access(a.layoutd, os.X_OK):
        sys.exit("replica_live_replay: needs nbdkit and a release build (cargo build --workspace --release)")
    with open(os.path.join(a.capture, "result.json")) as f:
        meta = json.load(f)
    markers = [m["offset"] for m in meta["markers"]]
    names = [p["name"] for p in meta["phases"]]
    stacks = a.stacks.split(",")
    runs = []
    with tempfile.TemporaryDirectory(prefix="replica-live-replay-", dir=a.dir) as tmp:
        trace = os.path.join(tmp, "noise.trace")
        rp.noise_trace(os.path.join(a.capture, "trace.gz"), markers, trace)
        trace_streams, _ = load_trace(trace)
        for pair in range(a.pairs):
            load0 = uptime()
            start_at = time.time() + 3
            procs = {}
            for name in stacks:
                work = os.path.join(tmp, f"{pair}-{name}")
                os.makedirs(work)
                procs[name] = (work, subprocess.Popen(
                    [sys.executable, os.path.abspath(__file__), "--worker", "--layoutd", a.layoutd, "--stack", name,
                     "--trace", trace, "--work", work, "--start-at", str(start_at), "--emulate", a.emulate,
                     "--size", str(a.size)]))
            row = {"pair": pair + 1, "loadavg_start": load0, "stacks": {}}
            for name, (work, p) in procs.items():
                if p.wait() != 0:
                    sys.exit(f"replica_live_replay: the {name} worker failed (pair {pair + 1})")
                with open(os.path.join(work, "result.json")) as f:
                    res = json.load(f)
                row["stacks"][name] = {"phases": phases(trace_streams, res["streams"], markers, names),
                                       "server_exit": res["server_exit"], "counters": res["counters"]}
            row["loadavg_end"] = uptime()
            runs.append(row)
            with open(os.path.join(tmp, "runs.json"), "w") as f:
                json.dump(runs, f)
            print(json.dumps({n: {ph: round(v["process_2_mean_ms"], 3) for ph, v in s["phases"].items()}
                              for n, s in row["stacks"].items()}), "load", load0, row["loadavg_end"], file=sys.stderr)
        sim = None if a.no_sim else sim_reference(a.layoutd, trace, stacks, markers, names, tmp)
    os.makedirs(a.out, exist_ok=True)
    result = {"command": "bench/replica_live_replay.py " + " ".join(sys.argv[1:]),
              "capture": os.path.relpath(os.path.abspath(a.capture), os.path.join(HERE, "..")),
              "git_head": subprocess.run(["git", "-C", HERE, "rev-parse", "--short", "HEAD"],
                                         capture_output=True, text=True).stdout.strip(),
              "started": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
              "emulate": a.emulate, "size_bytes": a.size, "stacks": stacks, "names": names, "runs": runs,
              "sim": sim}
    with open(os.path.join(a.out, "result.json"), "w") as f:
        json.dump(result, f, indent=1)
    write_readme(a.out, result)


def write_readme(out, r):
    names = [n for n in r["names"] if n.startswith("read-")]
    base = r["stacks"][0]

    def pct(v, ref):
        return f"{100 * (v / ref - 1):+.2f} %"

    lines = ["# replica: the noise experiment replayed live, one NBD connection per process", "",
             "A benchmark, not a test: live runs, numbers as measured (wall clock, load-sensitive). "
             f"Generated by `{r['command']}` at git {r['git_head']} on {r['started']}.", "",
             f"The noise trace of `bench/replica_postmark.py` (capture `{r['capture']}` as process 1, a 4 KiB read of a "
             "random block the create phase wrote per process-1 read as process 2, mkfs's discards as process 0) "
             f"replayed closed-loop in wall-clock time against `layoutd serve --emulate {r['emulate']}`, each process "
             "on its own NBD connection (its own base stream); the stacks side by side (started together, one server, "
             f"volume file ({r['size_bytes']} bytes, sparse) and emulated disk each). A live replay of a real ext4 "
             "capture, not a live file system: writes carry a fixed non-zero pattern.", "",
             "Process 2's mean response (ms) per phase, client-side (NBD round trip included), and its change "
             f"against {base} in the same pair; load average (1 min) at the start and end of the pair. "
             f"A cell marked † had responses over {STALL_MS:.0f} ms (the machine stalled, not the disk) and says "
             "nothing about the stacks:", "",
             "| pair | load | stack | " + " | ".join(names) + " |", "| --- | --- | --- |" + " ---: |" * len(names)]
    for run in r["runs"]:
        ref = run["stacks"][base]["phases"]
        load = f"{run['loadavg_start'][0]:.1f} → {run['loadavg_end'][0]:.1f}"
        for name in r["stacks"]:
            ph = run["stacks"][name]["phases"]
            cells = []
            for n in names:
                v = ph[n]["process_2_mean_ms"]
                mark = "†" if ph[n]["stalls"] or ref[n]["stalls"] else ""
                d = "" if name == base else f" ({pct(v, ref[n]['process_2_mean_ms'])})"
                cells.append(f"{v:.3f}{d}{mark}")
            lines.append(f"| {run['pair']} | {load} | {name} | " + " | ".join(cells) + " |")
    lines += ["", "Process 1 (the Postmark pattern): span (s) per phase:", "",
              "| pair | stack | " + " | ".join(names) + " |", "| --- | --- |" + " ---: |" * len(names)]
    for run in r["runs"]:
        for name in r["stacks"]:
            ph = run["stacks"][name]["phases"]
            lines.append(f"| {run['pair']} | {name} | " +
                         " | ".join(f"{ph[n]['process_1_s']:.2f}{'†' if ph[n]['stalls'] else ''}" for n in names) + " |")
    if r.get("sim"):
        lines += ["", "The same trace in the simulator (`layoutd sim --closed-loop --stream-detect --disk wd800`, "
                  "deterministic): with the live emulator's scheduler (FIFO, one request at the disk) and with the "
                  "simulator's default (CLOOK, depth 32), which `bench/replica_postmark.py`'s tables use; process 2's "
                  "mean response (ms):", "",
                  "| scheduler | stack | " + " | ".join(names) + " |", "| --- | --- |" + " ---: |" * len(names)]
        for label, stacks in r["sim"].items():
            for name in r["stacks"]:
                ph, ref = stacks[name], stacks[base]
                lines.append(f"| {label} | {name} | " + " | ".join(
                    f"{ph[n]['process_2_mean_ms']:.3f}" +
                    ("" if name == base else f" ({pct(ph[n]['process_2_mean_ms'], ref[n]['process_2_mean_ms'])})")
                    for n in names) + " |")
    lines += ["", "Reproduce: `cargo build --workspace --release && " + r["command"] + "` (about 9 minutes a pair, "
              "plus a minute for the simulator reference)."]
    rp.write_keeping_notes(os.path.join(out, "README.md"), lines)


if __name__ == "__main__":
    main()
