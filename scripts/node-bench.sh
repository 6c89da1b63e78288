#!/usr/bin/env bash
# One node at 8 and 16 ranks (issue 31), in one go on the 16-core machine: shoal against
# OpenMPI and Gloo for each collective (`shoal bench`, roofline line included), then
# `shoal tune` at each rank count (its JSON names the selector's own pick beside each measured
# algorithm), and the wait policy's share: allreduce and broadcast at the largest rank count with
# SHOAL_WAIT=spin. Logs go under $OUT (default results/node), plus
# bench.tgz with every results folder; steps run in order under a time budget
# (scripts/lib/budget.sh, BUDGET_S default 540), so a short lease still returns what it measured.
#
#   bash .device-carry/remote.sh bash scripts/node-bench.sh    # there, from the wheel prepare.sh built
#
# STEPS picks steps by name (default: all, in this order): info allreduce broadcast tune wait
# allgather reduce_scatter
# RANKS (default "8 16"), SIZES (default 8,4K,64K,1M,16M,64M), ROUNDS (default 2), AGAINST
# (default gloo,mpi), TUNE_SIZES (default 8,4K,64K,1M,16M), TUNE_REPEATS (default 5).
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-results/node}
mkdir -p "$OUT"
BUDGET_S=${BUDGET_S:-540}
STEPS=${STEPS:-info allreduce broadcast tune wait allgather reduce_scatter}
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
    command -v perf || echo "no perf"
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

# the table shoal tune measures at each rank count (one run per count, so a cut-short step keeps
# the counts it finished); tune-N.json records the selector's pick beside each algorithm's time
tune() {
    local n
    for n in $RANKS; do
        "$py" -m shoal.cli tune -n "$n" --collectives allreduce,broadcast --sizes "$TUNE_SIZES" \
            --repeats "$TUNE_REPEATS" --out "$RESULTS/tune-$n.txt" --no-progress && cat "$RESULTS/tune-$n.txt"
    done
}

# the wait policy with as many ranks as cores: spinning instead of the default yield
wait_policy() {
    local collective n=${RANKS##* }
    for collective in allreduce broadcast; do
        SHOAL_WAIT=spin "$py" -m shoal.cli bench "$collective" -n "$n" --sizes 8,4K,64K,1M --against mpi \
            --rounds 1 --no-plot --no-progress --out "$RESULTS/$collective-$n-spin"
    done
}

export -f info bench tune wait_policy
step info 20 bash -c info
step allreduce 130 bash -c "bench allreduce"
step broadcast 130 bash -c "bench broadcast"
step tune 140 bash -c tune
step wait 60 bash -c wait_policy
step allgather 50 bash -c "bench allgather"
step reduce_scatter 50 bash -c "bench reduce_scatter"
tar czf "$OUT/bench.tgz" -C "$RESULTS" .
budget_done
