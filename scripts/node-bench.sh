#!/usr/bin/env bash
# One node at 8 and 16 ranks (issue 31), in one go on the 16-core machine: shoal against
# OpenMPI and Gloo for each collective (`shoal bench`, roofline line included), then
# `shoal tune` and `shoal tune --check`. Logs go under $OUT (default results/node), plus
# bench.tgz with every results folder; steps run in order under a time budget
# (scripts/lib/budget.sh, BUDGET_S default 540), so a short lease still returns what it measured.
#
#   bash .device-carry/remote.sh bash scripts/node-bench.sh    # there, from the wheel prepare.sh built
#
# STEPS picks steps by name (default: all): info allreduce broadcast allgather reduce_scatter tune
# RANKS (default "8 16"), SIZES (default 8,4K,64K,1M,16M,64M), ROUNDS (default 2), AGAINST
# (default gloo,mpi), TUNE_SIZES (default 8,4K,64K,1M,16M), TUNE_REPEATS (default 5).
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-results/node}
mkdir -p "$OUT"
BUDGET_S=${BUDGET_S:-540}
STEPS=${STEPS:-info allreduce broadcast allgather reduce_scatter tune}
RANKS=${RANKS:-8 16}
SIZES=${SIZES:-8,4K,64K,1M,16M,64M}
export RANKS SIZES ROUNDS=${ROUNDS:-2} AGAINST=${AGAINST:-gloo,mpi} RESULTS=/tmp/node-bench
export TUNE_SIZES=${TUNE_SIZES:-8,4K,64K,1M,16M} TUNE_REPEATS=${TUNE_REPEATS:-5}
export py=${PYTHON:-python3}
mkdir -p "$RESULTS"

. scripts/lib/budget.sh

info() {
    nproc
    uptime
    lscpu | grep -E "Model name|^CPU\(s\)|Thread|NUMA node\(s\)"
    "$py" -m shoal.cli info | head -n 12
    mpirun --version | head -n 1
}

# COLLECTIVE at each rank count against the competitors
bench() {
    local collective=$1 n
    for n in $RANKS; do
        "$py" -m shoal.cli bench "$collective" -n "$n" --sizes "$SIZES" --against "$AGAINST" \
            --rounds "$ROUNDS" --no-plot --no-progress --out "$RESULTS/$collective-$n"
    done
}

# the tables that shoal tune measures at each rank count, then whether the tables in force lose
tune() {
    local ranks=${RANKS// /,}
    cd "$RESULTS" || return 1 # --check leaves its jobs' logs in the working directory
    "$py" -m shoal.cli tune -n "$ranks" --collectives allreduce,broadcast --sizes "$TUNE_SIZES" \
        --repeats "$TUNE_REPEATS" --out tune.txt --no-progress
    cat tune.txt
    "$py" -m shoal.cli tune -n "$ranks" --collectives allreduce,broadcast --sizes "$TUNE_SIZES" \
        --repeats 3 --check --no-progress
}

export -f info bench tune
step info 30 bash -c info
for collective in allreduce broadcast allgather reduce_scatter; do
    step "$collective" 200 bash -c "bench $collective"
done
step tune 240 bash -c tune
tar czf "$OUT/bench.tgz" -C "$RESULTS" .
budget_done
