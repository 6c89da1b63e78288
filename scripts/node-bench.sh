#!/usr/bin/env bash
# One node at 8 and 16 ranks (issue 31), in one go on the 16-core machine: shoal against
# OpenMPI and Gloo for each collective (`shoal bench`, roofline line included); at the largest
# rank count, automatic selection beside forced algorithms against OpenMPI; `shoal tune --check`
# (does the selector lose to shoal's best?); then `shoal tune` at each rank count. Logs go under
# $OUT (default results/node), plus bench.tgz with every results folder; steps run in order under
# a time budget (scripts/lib/budget.sh, BUDGET_S default 540), so a short lease still returns what
# it measured. Run N1 (docs/benchmarks.md, "One node, 8 and 16 ranks") needed about 200 s for
# allreduce at 8 and 16 ranks against both, 105 s for broadcast.
#
#   bash .device-carry/remote.sh bash scripts/node-bench.sh    # there, from the wheel prepare.sh built
#   (then scripts/device-wheel.sh rebuilt, here, as the README builds it)
#
# STEPS picks steps by name (default: all, in this order): info broadcast allreduce algos check
# allgather reduce_scatter tune
# RANKS (default "8 16"), SIZES (default 8,4K,64K,1M,16M,64M), ROUNDS (default 2), AGAINST
# (default gloo,mpi), ALGOS_AGAINST (the algos step's competitors, default mpi), TUNE_SIZES (default
# 8,4K,64K,1M,16M), TUNE_REPEATS (default 5).
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-results/node}
mkdir -p "$OUT"
BUDGET_S=${BUDGET_S:-540}
STEPS=${STEPS:-info broadcast allreduce algos check allgather reduce_scatter tune}
RANKS=${RANKS:-8 16}
SIZES=${SIZES:-8,4K,64K,1M,16M,64M}
export RANKS SIZES ROUNDS=${ROUNDS:-2} AGAINST=${AGAINST-gloo,mpi} ALGOS_AGAINST=${ALGOS_AGAINST-mpi}
export RESULTS=${RESULTS:-/tmp/node-bench}
export TUNE_SIZES=${TUNE_SIZES:-8,4K,64K,1M,16M} TUNE_REPEATS=${TUNE_REPEATS:-5}
export py=${PYTHON:-python3}
mkdir -p "$RESULTS"

. scripts/lib/budget.sh

info() {
    nproc
    uptime
    command -v perf || echo "no perf"
    lscpu | grep -E "Model name|^CPU\(s\)|Thread|NUMA node\(s\)"
    "$py" -m shoal.cli info | head -n 12
    mpirun --version | head -n 1
    # what calibration prices the model at, three jobs per rank count: the automatic choices follow it
    local n i
    for n in $RANKS; do
        for i in 1 2 3; do
            SHOAL_LOG=info "$py" -m shoal.cli run -n "$n" -- "$py" -c "import shoal; shoal.init()" 2>&1 |
                grep -o "calibrated.*" | sed "s/^/$n ranks: /"
        done
    done
}

# COLLECTIVE at each rank count against the competitors
bench() {
    local collective=$1 n
    for n in $RANKS; do
        "$py" -m shoal.cli bench "$collective" -n "$n" --sizes "$SIZES" --against "$AGAINST" \
            --rounds "$ROUNDS" --no-plot --no-progress --out "$RESULTS/$collective-$n"
    done
}

# the table shoal tune measures at each rank count (one run per count, so a cut-short step keeps
# the counts it finished); tune-N.json records the selector's pick beside each algorithm's time
tune() {
    local n
    for n in $RANKS; do
        "$py" -m shoal.cli tune -n "$n" --collectives allreduce,broadcast --sizes "$TUNE_SIZES" \
            --repeats "$TUNE_REPEATS" --out "$RESULTS/tune-$n.txt" --no-progress && cat "$RESULTS/tune-$n.txt"
    done
}

# at the largest rank count, automatic selection beside the algorithms that measured best (or
# that the model picked) on this machine, against OpenMPI
algos() {
    local n=${RANKS##* }
    "$py" -m shoal.cli bench broadcast -n "$n" --sizes "$SIZES" --against "$ALGOS_AGAINST" --rounds 1 --no-roofline \
        --algo auto,binomial,shm_read,topology_aware_pipelined_chain,scatter_allgather \
        --no-plot --no-progress --out "$RESULTS/broadcast-$n-algos"
    "$py" -m shoal.cli bench allreduce -n "$n" --sizes "$SIZES" --against "$ALGOS_AGAINST" --rounds 1 --no-roofline \
        --algo auto,shm_flat,recursive_doubling,rabenseifner,shm_sharded \
        --no-plot --no-progress --out "$RESULTS/allreduce-$n-algos"
}

# where the tables in force (the built-in cpus=16 rows) and the cost model lose to shoal's best
check() {
    local ranks=${RANKS// /,}
    cd "$RESULTS" || return 1 # it leaves its jobs' logs in the working directory
    "$py" -m shoal.cli tune -n "$ranks" --collectives allreduce,broadcast --sizes "$TUNE_SIZES" \
        --repeats 3 --check --no-progress
}

export -f info bench tune algos check
step info 40 bash -c info
step broadcast 110 bash -c "bench broadcast"
step allreduce 200 bash -c "bench allreduce"
step algos 90 bash -c algos
step check 100 bash -c check
step allgather 60 bash -c "bench allgather"
step reduce_scatter 60 bash -c "bench reduce_scatter"
step tune 140 bash -c tune
tar czf "$OUT/bench.tgz" -C "$RESULTS" .
budget_done
