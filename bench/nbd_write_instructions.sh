#!/bin/bash
# Benchmark (not a test): user-space instructions per 4 KiB random write
# of a stack served through nbdkit, counted by callgrind (deterministic
# enough to compare stacks on a loaded machine, where IOPS swing 2x).
# Issue 8's 48 MiB QD 16 write row of bench/nbd_overhead.py: the stack is
# formatted afresh on a 1025 MiB file, served with 16 threads, and fio's
# nbd engine writes IO_SIZE at random in the first 900 MiB; counting is
# on only while fio runs (startup and shutdown excluded). Kernel time is
# not counted: `strace -c -f -p PID` gives the syscalls per write.
#
# Usage: bench/nbd_write_instructions.sh STACK [IO_SIZE] [DIR]
#   STACK: linear, or a config in examples/ (dcd, replica, log, pool, opt)
#   IO_SIZE: default 48M (12,288 writes); DIR: default /dev/shm
# Prints: STACK, the writes, instructions in all, instructions per write.
# Needs: cargo build --release -p layoutd -p layoutd-nbd; valgrind, fio, nbdkit.
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
L=$ROOT/target/release/layoutd
s=$1
io=${2:-48M}
dir=${3:-/dev/shm}
tag=layoutd-instr-$s-$$
img=$dir/$tag.img
sock=$dir/$tag.sock
out=$dir/$tag.callgrind
cfg=()
[ "$s" != linear ] && cfg=(--config "$ROOT/examples/$s.toml")
"$L" format --device "$img" --size 1025M "${cfg[@]}" >/dev/null
valgrind --tool=callgrind --trace-children=yes --instr-atstart=no \
    --callgrind-out-file="$out.%p" "$L" serve --device "$img" --socket "$sock" --threads 16 \
    >/dev/null 2>"$out.log" &
vp=$!
for _ in $(seq 600); do [ -S "$sock" ] && break; sleep 0.05; done
callgrind_control -i on "$vp" >/dev/null
fio --name=b --ioengine=nbd --uri="nbd+unix:///?socket=$sock" --rw=randwrite --bs=4k \
    --iodepth=16 --size=900M --io_size="$io" --randseed=7 --output-format=terse >/dev/null
callgrind_control -i off "$vp" >/dev/null
kill -TERM "$vp"
wait "$vp" || true
writes=$(( $(numfmt --from=iec "$io") / 4096 ))
total=$(callgrind_annotate "$out.$vp" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}')
echo "$s writes=$writes instructions=$total per_write=$(( total / writes ))"
[ -n "${KEEP_CALLGRIND:-}" ] && echo "profile: $out.$vp" || rm -f "$out".*
rm -f "$img" "$sock" "$sock.ctl"
