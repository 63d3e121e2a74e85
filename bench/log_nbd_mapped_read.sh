#!/bin/sh
# Benchmark (not a test): 4 KiB random reads of *written* blocks through NBD,
# `linear` vs `log` (examples/log.toml). bench/nbd_overhead.py formats the
# log afresh before each row, so its read rows read unmapped blocks (zeroes,
# no lower I/O); this fills 256 MiB with 1 MiB writes first, then reads it
# at random, QD 16 and QD 1, 3 s each (fio's nbd engine, 16 nbdkit threads,
# tmpfs). Needs a release build, nbdkit and fio.
#
#   bench/log_nbd_mapped_read.sh [DIR]     (default /dev/shm)
set -eu
cd "$(dirname "$0")/.."
L=target/release/layoutd
DIR=${1:-/dev/shm}
IMG=$DIR/layoutd-mapped-read.img
SOCK=$DIR/layoutd-mapped-read.sock
fio_iops() {  # rw bs depth extra...
    rw=$1 bs=$2 qd=$3
    shift 3
    fio --name=b --ioengine=nbd "--uri=nbd+unix:///?socket=$SOCK" "--rw=$rw" "--bs=$bs" "--iodepth=$qd" \
        --size=256M --output-format=json "$@" 2>/dev/null |
        python3 -c "import json,sys; d=sys.stdin.read(); j=json.loads(d[d.index('{'):])['jobs'][0]; print(round(j['read' if 'read' in '$rw' else 'write']['iops']))"
}
for stack in linear log; do
    rm -f "$IMG" "$SOCK"
    if [ "$stack" = linear ]; then
        "$L" format --device "$IMG" --size 1025M >/dev/null
    else
        "$L" format --device "$IMG" --size 1025M --config examples/log.toml >/dev/null
    fi
    "$L" serve --device "$IMG" --socket "$SOCK" --threads 16 >/dev/null 2>&1 &
    pid=$!
    for _ in $(seq 200); do [ -S "$SOCK" ] && break; sleep 0.05; done
    fill=$(fio_iops write 1m 4)
    qd16=$(fio_iops randread 4k 16 --time_based --runtime=3 --ramp_time=1)
    qd1=$(fio_iops randread 4k 1 --time_based --runtime=3 --ramp_time=1)
    echo "$stack: fill $fill MiB/s, 4 KiB random read QD 16 $qd16 IOPS, QD 1 $qd1 IOPS"
    kill "$pid"
    wait "$pid" || true
done
rm -f "$IMG" "$SOCK"
