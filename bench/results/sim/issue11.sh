#!/bin/sh
# Simulator benchmarks of issue 11: requests/s and peak RSS for the plain and
# dcd stacks, open and closed loop, on a 2M-request synthetic trace; and the
# --matrix mode's wall time from 1 to all cores. A benchmark, not a test.
#
#   cargo build --release -p layoutd-sim --examples
#   sh bench/results/sim/issue11.sh [OUT_DIR]      # default bench/results/sim/issue11
#
# B (examples dir), N (requests), TMPDIR may be set in the environment.
set -eu
B=${B:-target/release/examples}
N=${N:-2000000}
OUT=${1:-bench/results/sim/issue11}
TMP=${TMPDIR:-/tmp}
mkdir -p "$OUT"
T="$TMP/sim-issue11-$N.trace"
[ -s "$T" ] || "$B/gen_trace" "$N" layoutd 20000 > "$T"
printf 'stack\tmode\trequests\tuser_s\tsys_s\twall_s\treq_per_cpu_s\tmaxrss_kib\n'
for stack in plain dcd; do
  for mode in open closed; do
    set -- --trace "$T" --format layoutd --disk wd800 --no-progress --json "$OUT/$stack-$mode-$N.json"
    [ "$stack" = dcd ] && set -- "$@" --config examples/dcd.toml
    [ "$mode" = closed ] && set -- "$@" --closed-loop
    /usr/bin/time -f '%U %S %e %M' -o "$TMP/sim-issue11.time" "$B/sim" "$@" 2>/dev/null
    read -r user sys wall rss < "$TMP/sim-issue11.time"
    req=$(sed -n 's/^  "requests": \([0-9]*\),$/\1/p' "$OUT/$stack-$mode-$N.json")
    rate=$(awk -v r="$req" -v u="$user" -v s="$sys" 'BEGIN { printf "%.0f", r / (u + s) }')
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$stack" "$mode" "$req" "$user" "$sys" "$wall" "$rate" "$rss"
  done
done
# Matrix scaling: 2 traces x 2 stacks x 1 disk, 1 thread then every core.
M="$TMP/sim-issue11-matrix.toml"
H=$((N / 4))
T1="$TMP/sim-issue11-m1.trace"; T2="$TMP/sim-issue11-m2.trace"
[ -s "$T1" ] || "$B/gen_trace" "$H" layoutd 20000 8 64 1 > "$T1"
[ -s "$T2" ] || "$B/gen_trace" "$H" layoutd 20000 8 64 2 > "$T2"
cat > "$M" <<TOML
[[trace]]
name = "m1"
args = ["--trace", "$T1", "--format", "layoutd"]
[[trace]]
name = "m2"
args = ["--trace", "$T2", "--format", "layoutd"]
[[stack]]
name = "plain"
[[stack]]
name = "dcd"
args = ["--config", "examples/dcd.toml"]
[[disk]]
name = "wd800"
args = ["--disk", "wd800"]
TOML
# scale NAME FILE: run the matrix FILE with 1 job, then every core; print the
# wall and CPU time of each and check that the summaries are identical.
scale() {
  printf '\n%s_jobs\tcells\twall_s\tuser_s\tmaxrss_kib\n' "$1"
  for jobs in 1 $(nproc); do
    rm -rf "$TMP/sim-issue11-$1-$jobs"
    /usr/bin/time -f '%e %U %M' -o "$TMP/sim-issue11.time" "$B/sim" --matrix "$2" --out "$TMP/sim-issue11-$1-$jobs" --jobs "$jobs" > /dev/null 2>&1
    read -r wall user rss < "$TMP/sim-issue11.time"
    printf '%s\t4\t%s\t%s\t%s\n' "$jobs" "$wall" "$user" "$rss"
  done
  cmp "$TMP/sim-issue11-$1-1/summary.json" "$TMP/sim-issue11-$1-$(nproc)/summary.json" && echo "$1 summaries identical for 1 and $(nproc) jobs"
}
scale matrix "$M"
# Balanced matrix: 4 traces of equal size x the dcd stack, so every cell costs
# about the same and the wall time shows the scaling itself (the matrix above
# is bounded below by its two dcd cells, about 90 % of its work).
B4="$TMP/sim-issue11-balanced.toml"
: > "$B4"
for s in 1 2 3 4; do
  Ts="$TMP/sim-issue11-b$s.trace"
  [ -s "$Ts" ] || "$B/gen_trace" "$H" layoutd 20000 8 64 "$s" > "$Ts"
  printf '[[trace]]\nname = "b%s"\nargs = ["--trace", "%s", "--format", "layoutd"]\n' "$s" "$Ts" >> "$B4"
done
printf '[[stack]]\nname = "dcd"\nargs = ["--config", "examples/dcd.toml"]\n[[disk]]\nname = "wd800"\nargs = ["--disk", "wd800"]\n' >> "$B4"
scale balanced "$B4"
