#!/bin/sh
# The DCD paper's benchmark (seeds/001, section 4) on ext4 over layoutd:
# results in bench/results/dcd/README.md.
#
#   bench/dcd_replay.sh            the simulator half: replay every committed
#                                  trace in bench/traces/dcd/ closed-loop in
#                                  `layoutd sim` (barracuda4g, fifo, depth 1)
#                                  through plain linear, dcd and dcd fua=log,
#                                  the figure-10 sweep, the histograms, and
#                                  the report (bench/results/dcd/)
#   bench/dcd_replay.sh --live     first the live runs (root, nbdkit, nbdfuse;
#                                  about 10 minutes), which replace the traces
#
# Environment: LAYOUTD (default target/release/layoutd).
set -eu
cd "$(dirname "$0")/.."
LAYOUTD=${LAYOUTD:-target/release/layoutd}
R=bench/results/dcd
T=bench/traces/dcd

if [ "${1:-}" = "--live" ]; then
    # regime "sync-meta": ext4 without a journal, mounted dirsync: directory
    # updates are synchronous in-place writes, as UFS's metadata updates were
    # in the paper. Regime "ext4": ext4 defaults (journal, ordered, delalloc).
    for regime in sync-meta ext4; do
        if [ $regime = sync-meta ]; then
            set -- --mkfs-opts="-O ^has_journal -E lazy_itable_init=1" --mount-opts dirsync
        else
            set -- --mkfs-opts="-E lazy_itable_init=1,lazy_journal_init=1" --mount-opts ""
        fi
        # plain: 3 GiB device; dcd: 64 MiB more for the log, so both exports
        # (and the ext4 on them) have exactly the same size and addresses.
        bench/run dcd-users --layoutd "$LAYOUTD" --emulate barracuda4g --size 3G "$@" \
            --replay --out $R/live/$regime-plain
        bench/run dcd-users --layoutd "$LAYOUTD" --emulate barracuda4g --size 3136M "$@" \
            --config examples/dcd.toml --replay --out $R/live/$regime-dcd
        # the same with `fua = "log"` (FUA writes appended to the log instead of
        # written home); the rig's loop device sends no FUA, see the README
        bench/run dcd-users --layoutd "$LAYOUTD" --emulate barracuda4g --size 3136M "$@" \
            --config $R/dcd-fua-log.toml --replay --out $R/live/$regime-dcd-fua-log
        for s in plain dcd dcd-fua-log; do
            mkdir -p $T
            mv $R/live/$regime-$s/trace.gz $T/$regime-$s.trace.gz
        done
    done
fi

python3 bench/workloads/dcd_report.py --layoutd "$LAYOUTD"
