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
#                       seen before); the CPU of analysis, planning and the
#                       indirection measured on the same code (opt_cpu); then
#                       the held-out and start-up experiments again on the
#                       traces of other seeds of the same generator
#                       (bench/traces/opt/seedN/, generated if missing;
#                       results under seeds/seedN/) and a table of every
#                       seed with the medians; then where each seed's
#                       held-out I/O time goes (opt_phases.py, phases.md);
#                       why a stream seeks within the region at S = 0.5
#                       (opt_seeks.py, seeks.md);
#                       then the held-out experiment across the generator's
#                       day-to-day variation (opt_variation.py, traces under
#                       bench/traces/opt/variation/, made if missing) with
#                       opt.toml (one plan after day 1, a plan every day,
#                       and the continuous loop planning every 1, 4 and 16
#                       s of virtual time on its own), opt-capped.toml (the
#                       continuous loop with the copy rate and analysis
#                       budget turned down), opt-relay.toml (opt.toml laying
#                       sequences out anew and reads following them, the
#                       same four modes), opt-home.toml (session 22's
#                       opt.toml: unmapped writes home), opt-written.toml
#                       (session 21's: written ranges placed too), opt-padded.toml
#                       (plan_pad_blocks = 4) and opt-region20.toml (the
#                       region in the middle of the used area), dcd.toml
#                       and opt-dcd.toml (opt over a Disk Caching Disk that
#                       takes the writes), and what the reads day 1 never
#                       read are (variation.md); the same held-out days and
#                       the start-up with the region placed from day 1's
#                       reads (`layoutd opt place`; placed.md); last, the held-out time by
#                       op and by mapped or not, plain against opt,
#                       opt-home, opt-written and opt-dcd (opt_ops.py,
#                       ops.md); then the real start-ups' replays
#                       (bench/opt_real.py: the committed captures through
#                       every stack, real/README.md) and their writes with
#                       the stacks over a dcd beside the region
#                       (bench/opt_writes.py --multiday, writes.md);
#                       with BOUND=1 also the best any layout could do
#                       (bench/workloads/opt_bound.py, bound.md, ~10 min)
#
# Environment: LAYOUTD (default target/release/layoutd); SEEDS (default
# "2 3 4", the seeds besides 1); BOUND (1: run opt_bound.py too).
set -eu
cd "$(dirname "$0")/.."
LAYOUTD=${LAYOUTD:-target/release/layoutd}
SEEDS=${SEEDS:-"2 3 4"}
R=bench/results/opt

# traces SEED DIR: the 4-day and the start-up trace of SEED in DIR, made
# if missing.
traces() {
    mkdir -p $2
    if [ ! -f $2/desktop-4days.trace.gz ]; then
        python3 bench/workloads/opt_desktop.py $2/desktop-4days.trace --days 4 --seed $1
        gzip -9n $2/desktop-4days.trace
    fi
    if [ ! -f $2/startup-2days.trace.gz ]; then
        python3 bench/workloads/opt_desktop.py $2/startup-2days.trace --days 2 --seed $1 \
            --skip 0 --new 0 --same-days --cold-runs
        gzip -9n $2/startup-2days.trace
    fi
}

# experiments TRACE_DIR RESULT_DIR [noplan]: the held-out days (plain, one
# plan after day 1, a plan after every day; with `noplan`, opt never
# planning too) and the start-up experiment. The CPU time of each sim
# process goes to RESULT_DIR/cpu.txt.
experiments() {
    T=$1/desktop-4days.trace.gz
    mkdir -p $2
    : > $2/cpu.txt
    # When to plan: just before the last request of a day (then the night
    # is idle time for the copies), trained on that day and the ones before.
    D1=$(sed -n 1p $1/desktop-4days.plan-times)
    D2=$(sed -n 2p $1/desktop-4days.plan-times)
    D3=$(sed -n 3p $1/desktop-4days.plan-times)
    run() {
        name=$1
        shift
        /usr/bin/time -f "$name %U %S" -a -o $OUT/cpu.txt \
            "$LAYOUTD" sim --trace $T --format layoutd --closed-loop --disk wd800 --seed 1 \
            --no-progress --json $OUT/$name.json "$@"
    }
    OUT=$2
    run plain --config $R/plain.toml
    run opt-train-day1 --config $R/opt.toml --message ${D1}ms:plan
    run opt-daily --config $R/opt.toml --message ${D1}ms:plan --message ${D2}ms:plan --message ${D3}ms:plan
    if [ "${3:-}" = noplan ]; then
        run opt-noplan --config $R/opt-noplan.toml
    fi
    S=$1/startup-2days.trace.gz
    S1=$(head -1 $1/startup-2days.plan-times)
    for r in plain opt; do
        m=""
        [ $r = opt ] && m="--message ${S1}ms:plan"
        "$LAYOUTD" sim --trace $S --format layoutd --closed-loop --disk wd800 --seed 1 --no-progress \
            --json $2/startup-$r.json --config $R/$r.toml $m
    done
}

traces 1 bench/traces/opt
experiments bench/traces/opt $R noplan
T=bench/traces/opt/desktop-4days.trace.gz
python3 bench/workloads/opt_report.py $R $R/cpu.txt > $R/tables.md
python3 bench/workloads/opt_report.py --startup $R >> $R/tables.md
python3 bench/workloads/opt_report.py --coverage $T >> $R/tables.md
zcat $T > $R/.trace.tmp
cargo run -q --release -p layoutd-sim --example opt_cpu -- $R/.trace.tmp 262144 8 | tee -a $R/tables.md
rm -f $R/.trace.tmp
for s in $SEEDS; do
    traces $s bench/traces/opt/seed$s
    experiments bench/traces/opt/seed$s $R/seeds/seed$s
done
python3 bench/workloads/opt_report.py --seeds $R 1 $SEEDS >> $R/tables.md
# Where the held-out time goes (one plan after day 1), every seed.
for s in 1 $SEEDS; do
    t=bench/traces/opt
    [ $s = 1 ] || t=bench/traces/opt/seed$s
    python3 bench/workloads/opt_phases.py $R/opt.toml $t "$LAYOUTD"
    echo
done > $R/phases.md
# Why a stream seeks within the region (S = 0.5, seeds 1-4).
{
    python3 bench/workloads/opt_seeks.py $R/opt.toml 0.5 1 2 3 4 --layoutd "$LAYOUTD" --continuous 1024
    echo
    python3 bench/workloads/opt_seeks.py $R/opt-relay.toml 0.5 1 2 3 4 --layoutd "$LAYOUTD" --continuous 1024
    echo
    python3 bench/workloads/opt_seeks.py $R/opt-relay.toml 0.5 1 2 3 4 --layoutd "$LAYOUTD"
    echo
    python3 bench/workloads/opt_seeks.py $R/opt-relay.toml 0.5 1 2 3 4 --layoutd "$LAYOUTD" --continuous 1024 --place
} > $R/seeks.md
# The held-out experiment across the generator's variation, seeds 1-4.
{
    python3 bench/workloads/opt_variation.py $R/opt.toml "$LAYOUTD" --continuous 1024 4096 16384
    echo
    python3 bench/workloads/opt_variation.py $R/opt-capped.toml "$LAYOUTD" --continuous 4096
    echo
    python3 bench/workloads/opt_variation.py $R/opt-relay.toml "$LAYOUTD" --continuous 1024 4096 16384
    echo
    for c in opt-home opt-written opt-padded dcd opt-dcd; do
        python3 bench/workloads/opt_variation.py $R/$c.toml "$LAYOUTD"
        echo
    done
    python3 bench/workloads/opt_variation.py $R/opt-region20.toml "$LAYOUTD" --plain $R/plain-region20.toml
    echo
    python3 bench/workloads/opt_variation.py --kinds
} > $R/variation.md
# The region where day 1's reads are (`layoutd opt place`, session 29):
# the held-out days and the synthetic start-up, opt.toml and opt-relay.toml.
{
    for c in opt opt-relay; do
        python3 bench/workloads/opt_variation.py $R/$c.toml "$LAYOUTD" --continuous 1024 4096 16384 --place
        echo
    done
    for c in opt opt-relay; do
        python3 bench/workloads/opt_place.py $R/$c.toml "$LAYOUTD"
        echo
    done
} > $R/placed.md
# The held-out time by op and by mapped or not (one plan after day 1).
python3 bench/workloads/opt_ops.py $R/opt.toml "$LAYOUTD" \
    --also opt-home=$R/opt-home.toml opt-written=$R/opt-written.toml opt-dcd=$R/opt-dcd.toml > $R/ops.md
# The real start-ups (captures committed under bench/traces/opt/real/).
LAYOUTD="$LAYOUTD" python3 bench/opt_real.py > /dev/null
LAYOUTD="$LAYOUTD" python3 bench/opt_writes.py --multiday > /dev/null
if [ "${BOUND:-0}" = 1 ]; then
    python3 bench/workloads/opt_bound.py --layoutd "$LAYOUTD"
fi
cat $R/tables.md
