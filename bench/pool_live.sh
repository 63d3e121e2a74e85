#!/bin/sh
# The pool benchmark's partial-rewrite workload (bench/pool_sim.sh) run live:
# `layoutd serve --emulate DISK` on a tmpfs file, driven by qemu-io over NBD
# one request at a time (closed loop, as the simulator replays it): 64 MiB
# unpacked in 64 KiB writes, an online snapshot, one 4 KiB write into each
# of a random quarter of the 64 KiB chunks (the simulator's trace, same
# seed), 30 s idle, then the tree read in 64 KiB reads on the origin and on
# the snapshot's export. qemu-io runs with `-t writeback`: the simulator's
# trace has no flushes (qemu-io's default writethrough sends one after
# every write, and each then commits the pool's journal). Prints wall
# seconds per phase; needs nbdkit, qemu-io and a release build. Not
# deterministic (wall clock).
#
#   bench/pool_live.sh [DISK] [STACKS...]     (default wd800; plain nearest contiguous)
#
# With RECORD=PREFIX each stack's requests, as served, are recorded to
# PREFIX-STACK.trace (`serve --record-trace`) for `bench/pool_sim.sh`
# (TRACE=...) to replay.
set -eu
cd "$(dirname "$0")/.."
DISK=${1:-wd800}
[ $# -gt 0 ] && shift
STACKS=${*:-plain nearest contiguous}
L=target/release/layoutd
DIR=${TMPDIR_LIVE:-/dev/shm}
DEV=$DIR/layoutd-pool-live.img
SOCK=$DIR/layoutd-pool-live.sock
CMDS=$(mktemp -d)
python3 - "$CMDS" <<'PY'
import random, sys
d = sys.argv[1]
K = 1024
tree = 64 << 20
rng = random.Random(1)  # bench/workloads/pool_trace.py's choice of chunks
chunks = list(range(tree // (64 * K)))
rng.shuffle(chunks)
def out(name, cmds):
    with open(f"{d}/{name}", "w") as f:
        f.write("\n".join(cmds) + "\n")
out("unpack", [f"write -P 7 {o} 64k" for o in range(0, tree, 64 * K)])
out("rewrite", [f"write -P 9 {c * 64 * K + rng.randrange(16) * 4 * K} 4k" for c in chunks[: len(chunks) // 4]])
out("read", [f"read {o} 64k" for o in range(0, tree, 64 * K)])
PY
phase() { # phase EXPORT FILE: runs the commands, prints seconds
    s=$(date +%s.%N)
    qemu-io -f raw -t writeback "nbd+unix:///$1?socket=$SOCK" < "$2" >/dev/null
    e=$(date +%s.%N)
    python3 -c "print(f'{$e - $s:.2f}')"
}
echo "| stack | unpack s | rewrite s | read origin s | read snapshot s |"
echo "| --- | --- | --- | --- | --- |"
for n in $STACKS; do
    rm -f "$DEV" "$SOCK"
    "$L" format --device "$DEV" --size 1400M --config "bench/workloads/pool/$n.toml" >/dev/null
    rec=""
    [ -z "${RECORD:-}" ] || { rec="$RECORD-$n.trace"; rm -f "$rec"; }
    "$L" serve --device "$DEV" --socket "$SOCK" --emulate "$DISK" ${rec:+--record-trace "$rec"} >/dev/null 2>&1 &
    SP=$!
    for _ in $(seq 200); do [ -S "$SOCK" ] && break; sleep 0.05; done
    u=$(phase "" "$CMDS/unpack")
    snap=""
    [ "$n" = plain ] || { "$L" snapshot create --socket "$SOCK" snap >/dev/null; snap=snap; }
    r=$(phase "" "$CMDS/rewrite")
    sleep 30
    o=$(phase "" "$CMDS/read")
    s="—"
    [ -z "$snap" ] || s=$(phase snap "$CMDS/read")
    echo "| $n | $u | $r | $o | $s |"
    kill "$SP"; wait "$SP" 2>/dev/null || true
done
rm -rf "$CMDS" "$DEV" "$SOCK"
