#!/bin/sh
# The opt paper's section 5 desktop experiment, scaled down, in the
# simulator: bench/results/opt/README.md.
#
#   bench/opt_sim.sh    generate the 4-day desktop-like trace if it is not
#                       committed yet (bench/workloads/opt_desktop.py, seed 1),
#                       replay it closed-loop on the wd800 model through
#                       plain, opt trained on day 1 only, opt replanning at
#                       the end of every day, and opt never planning; write the
#                       JSON, the CPU times and the tables (tables.md); then
#                       the start-up experiment: two identical days (every
#                       program once, no variation, the page cache dropped
#                       before every run), one plan at the end of day 1;
#                       what day 1 could teach (the held-out days' reads
#                       seen before); and the CPU of analysis, planning and the
#                       indirection measured on the same code (opt_cpu)
#
# Environment: LAYOUTD (default target/release/layoutd).
set -eu
cd "$(dirname "$0")/.."
LAYOUTD=${LAYOUTD:-target/release/layoutd}
R=bench/results/opt
T=bench/traces/opt/desktop-4days.trace.gz
if [ ! -f $T ]; then
    mkdir -p bench/traces/opt
    python3 bench/workloads/opt_desktop.py bench/traces/opt/desktop-4days.trace --days 4 --seed 1
    gzip -9n bench/traces/opt/desktop-4days.trace
fi
# When to plan: just before the last request of a day (then the night is
# idle time for the copies), trained on that day and the ones before.
set -- $(cat bench/traces/opt/desktop-4days.plan-times)
D1=$1 D2=$2 D3=$3
: > $R/cpu.txt
run() {
    name=$1
    shift
    /usr/bin/time -f "$name %U %S" -a -o $R/cpu.txt \
        "$LAYOUTD" sim --trace $T --format layoutd --closed-loop --disk wd800 --seed 1 \
        --no-progress --json $R/$name.json "$@"
}
run plain --config $R/plain.toml
run opt-train-day1 --config $R/opt.toml --message ${D1}ms:plan
run opt-daily --config $R/opt.toml --message ${D1}ms:plan --message ${D2}ms:plan --message ${D3}ms:plan
run opt-noplan --config $R/opt-noplan.toml
python3 bench/workloads/opt_report.py $R $R/cpu.txt > $R/tables.md
S=bench/traces/opt/startup-2days.trace.gz
if [ ! -f $S ]; then
    python3 bench/workloads/opt_desktop.py bench/traces/opt/startup-2days.trace --days 2 --seed 1 \
        --skip 0 --new 0 --same-days --cold-runs
    gzip -9n bench/traces/opt/startup-2days.trace
fi
S1=$(head -1 bench/traces/opt/startup-2days.plan-times)
for r in plain opt; do
    m=""
    [ $r = opt ] && m="--message ${S1}ms:plan"
    "$LAYOUTD" sim --trace $S --format layoutd --closed-loop --disk wd800 --seed 1 --no-progress \
        --json $R/startup-$r.json --config $R/$r.toml $m
done
python3 bench/workloads/opt_report.py --startup $R >> $R/tables.md
python3 bench/workloads/opt_report.py --coverage $T >> $R/tables.md
zcat $T > $R/.trace.tmp
cargo run -q --release -p layoutd-sim --example opt_cpu -- $R/.trace.tmp | tee -a $R/tables.md
rm -f $R/.trace.tmp
cat $R/tables.md
