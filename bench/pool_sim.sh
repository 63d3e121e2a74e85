#!/bin/sh
# The pool benchmark's simulator half, scaled down (docs/pool.md,
# bench/results/pool/README.md): a 64 MiB tree unpacked on the origin, a
# snapshot, a partial rewrite of a quarter of its chunks, 30 s idle, then
# the tree read on the origin and on the snapshot; on the HDD model, for
# each placement policy and a plain volume. Deterministic: rerunning gives
# the same figures.
#
#   bench/pool_sim.sh [DISK]        (default wd800; needs target/release/layoutd or target/debug/layoutd)
#   NAMES="plain nearest-redirect ..." bench/pool_sim.sh [DISK]
#                                   only those stacks of bench/workloads/pool/
#   TRACE=FILE OUT=DIR bench/pool_sim.sh [DISK]
#                                   replay a trace recorded live instead
#                                   (bench/pool_live.sh with RECORD=...; the
#                                   snapshot is taken before its first 4 KiB
#                                   write)
set -eu
cd "$(dirname "$0")/.."
DISK=${1:-wd800}
L=target/release/layoutd
[ -x "$L" ] || L=target/debug/layoutd
VOLUME=1073741824
OUT=${OUT:-bench/results/pool}
RUNS=$OUT/tmp/runs-$DISK
mkdir -p bench/traces/pool "$RUNS"
if [ -n "${TRACE:-}" ]; then
    AT=$(awk '!/^#/ { if ($4 == "W" && $6 == 4096) { print n; exit } n++ }' "$TRACE")
else
    TRACE=bench/traces/pool/partial_rewrite_64m.trace
    AT=$(python3 bench/workloads/pool_trace.py "$TRACE" 64 $VOLUME 1)
fi
NAMES=${NAMES:-"plain contiguous sliced-30 sliced-4096 nearest contiguous-redirect nearest-redirect sliced-30-redirect-defrag"}
for n in $NAMES; do
    msg=""
    [ "$n" = plain ] || msg="--message=@$AT:snapshot create snap"
    # shellcheck disable=SC2086
    "$L" sim --trace "$TRACE" --format layoutd --config "bench/workloads/pool/$n.toml" --disk "$DISK" \
        --closed-loop --no-progress --record-trace "$RUNS/$n.rec" --json "$RUNS/$n.json" ${msg:+"$msg"} 2>&1 | tail -1
done
python3 bench/workloads/pool_report.py "$RUNS" $VOLUME "$OUT" "$DISK" $NAMES
