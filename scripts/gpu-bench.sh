#!/usr/bin/env bash
# The CUDA path of shoal.torch on a GPU machine, in one go: its GPU tests,
# then CUDA all_reduce and DDP training against Gloo, side by side. Logs go
# under $OUT (default results/gpu). Steps run in order of importance and a
# step is skipped once the run has used BUDGET_S seconds (default 420), so
# that a short lease still returns what it measured.
#
#   bash scripts/gpu-bench.sh                                # on the GPU machine, shoal installed
#   bash .device-carry/remote.sh bash scripts/gpu-bench.sh   # there, from the wheel prepare.sh built
#   (then scripts/device-wheel.sh rebuilt, here, as the README builds it)
#
# STEPS picks steps by name (default: all): info tests allreduce chunks host hostbench algos
# variants roofline profile ceiling ddp18 ddp50; TEST_K narrows the tests (pytest -k);
# BACKENDS (default shoal,gloo) are the backends the all_reduce and DDP steps compare, where
# shoal:ALGO is shoal with its host algorithm forced (SHOAL_ALGO=allreduce:ALGO); ROUNDS (default 2)
# are the all_reduce step's rounds;
# DDP_ARGS adds arguments to the DDP runs (e.g. a small --batch-size --image-size --no-cuda to try it on a CPU);
# MPS=1 shares the GPU through CUDA MPS for the whole run (the daemon started first, stopped last;
# the run stops if CUDA does not work under it)
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-results/gpu}
mkdir -p "$OUT"
BUDGET_S=${BUDGET_S:-420}
BACKENDS=${BACKENDS:-shoal,gloo}
STEPS=${STEPS:-info tests allreduce chunks host hostbench algos variants roofline profile ceiling ddp18 ddp50}
py=${PYTHON:-python3}

. scripts/lib/budget.sh

info() {
    nvidia-smi --query-gpu=name,memory.total,driver_version,pcie.link.gen.max,pcie.link.width.max --format=csv
    nproc
    uptime
    command -v nsys nvidia-cuda-mps-control perf || true
    "$py" -c 'import torch, shoal; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name(0)); print("shoal", shoal.__file__)'
}

# SHOAL_ALGO for a backend of $BACKENDS: allreduce:ALGO for shoal:ALGO, empty otherwise
forced_algo() {
    case $1 in shoal:*) echo "allreduce:${1#shoal:}" ;; esac
}

# DDP on MODEL at 2 and 4 ranks, each of $BACKENDS (shoal:ALGO forces shoal's host algorithm),
# then the final parameters of each against gloo's
ddp() {
    local model=$1 ranks backend
    for ranks in 2 4; do
        for backend in ${BACKENDS//,/ }; do
            echo "--- $model $ranks ranks $backend"
            SHOAL_ALGO=$(forced_algo "$backend") "$py" -m shoal.cli run -n "$ranks" -- "$py" examples/pytorch_synthetic_benchmark.py \
                --backend "${backend%%:*}" --model "$model" --num-warmup-batches 5 --num-iters 5 ${DDP_ARGS:-} \
                --save-params "/tmp/params-$model-$ranks-$backend.pt"
        done
        for backend in ${BACKENDS//,/ }; do
            [ "$backend" = gloo ] || "$py" - "$backend" "/tmp/params-$model-$ranks-$backend.pt" "/tmp/params-$model-$ranks-gloo.pt" <<'EOF'
import sys, torch
a, b = (torch.load(f) for f in sys.argv[2:4])
worst = max(((a[k].double() - b[k].double()).abs().max() / b[k].double().abs().max().clamp_min(1e-12)).item()
            for k in b if b[k].is_floating_point())
print(f"{sys.argv[1]} vs gloo, final parameters: largest difference relative to the tensor's largest value: {worst:.3g}")
EOF
        done
    done
}

# the compute-only ceiling of DDP on MODEL: each rank trains its replica alone, on the shared GPU
ceiling() {
    local model=$1 ranks
    for ranks in 2 4; do
        echo "--- $model $ranks ranks, no gradient exchange"
        "$py" -m shoal.cli run -n "$ranks" -- "$py" examples/pytorch_synthetic_benchmark.py --backend none \
            --model "$model" --num-warmup-batches 5 --num-iters 5 ${DDP_ARGS:-}
    done
}

# the host collectives behind a 4-rank CUDA all_reduce: every allreduce algorithm at the
# pipeline's chunk size and at whole-tensor sizes against Gloo and OpenMPI, and the allgather a
# GPU-side reduction would use instead (its roofline line is the host's memcpy bandwidth)
hostbench() {
    local common=(-n 4 --repeats 3 --no-plot --no-progress --timeout 90)
    "$py" -m shoal.cli bench allreduce "${common[@]}" --sizes 1M,4M,16M,64M --algo all --against gloo,mpi --out /tmp/hb-allreduce
    "$py" -m shoal.cli bench allgather "${common[@]}" --sizes 4M,16M,64M --against gloo,mpi --out /tmp/hb-allgather
}

# the CUDA all_reduce at 4 ranks with each host algorithm forced, then spinning waits
algos() {
    local a
    for a in ring rabenseifner shm_sharded shm_flat; do
        echo "algorithm $a"
        SHOAL_ALGO=allreduce:$a "$py" examples/cuda_allreduce_bench.py --ranks 4 --sizes-mb 25,100 --backends shoal --iters 10
    done
    echo "SHOAL_WAIT=spin"
    SHOAL_WAIT=spin "$py" examples/cuda_allreduce_bench.py --ranks 4 --sizes-mb 25,100 --backends shoal --iters 10
}

# at 4 ranks: the shared-memory transport without single-copy reads (the selector's algorithm),
# and shm_sharded at other chunk sizes
variants() {
    echo "SHOAL_SHM_CMA_BYTES=0"
    SHOAL_SHM_CMA_BYTES=0 "$py" examples/cuda_allreduce_bench.py --ranks 4 --sizes-mb 25,100 --backends shoal --iters 10
    local c
    for c in 1048576 16777216; do
        echo "shm_sharded, chunk $c"
        SHOAL_TORCH_CUDA_CHUNK_BYTES=$c "$py" examples/cuda_allreduce_bench.py --ranks 4 --sizes-mb 25,100 --backends shoal:shm_sharded --iters 10
    done
}

# one 4-rank ResNet-18 DDP run per backend of $BACKENDS with torch.profiler on 3 steps after the
# timed ones: each rank's top operators and rank 0's Chrome trace (gzipped) under $OUT/profile-BACKEND
profile() {
    local backend dir
    for backend in ${BACKENDS//,/ }; do
        echo "--- resnet18 4 ranks $backend, profiled"
        dir=$OUT/profile-${backend//:/-}
        SHOAL_ALGO=$(forced_algo "$backend") "$py" -m shoal.cli run -n 4 -- "$py" examples/pytorch_synthetic_benchmark.py \
            --backend "${backend%%:*}" --model resnet18 --num-warmup-batches 5 --num-iters 2 ${DDP_ARGS:-} \
            --profile "$dir"
        gzip -f "$dir/trace-rank0.json"
    done
}

# the host's copy bandwidth with 1, 4 and 8 processes copying at once
roofline() {
    local n
    for n in 1 4 8; do "$py" -m shoal.bench.roofline -n "$n"; done
}

export -f forced_algo info ddp ceiling hostbench algos variants profile roofline
export py BACKENDS OUT
if [ "${MPS:-0}" = 1 ]; then
    export CUDA_MPS_PIPE_DIRECTORY=/tmp/shoal-mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/shoal-mps-log
    mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
    nvidia-cuda-mps-control -d || exit 1
    trap 'echo quit | nvidia-cuda-mps-control' EXIT
    timeout 60 "$py" -c 'import torch; torch.ones(1, device="cuda")' || { echo "CUDA fails under MPS"; exit 1; }
    echo "== the GPU is shared through MPS" | tee -a "$OUT/summary.log"
fi
step info 30 bash -c info
workers=()
"$py" -c "import xdist" 2>/dev/null && workers=(-n 4) # pytest-xdist, where installed
step tests 200 "$py" -m pytest -q -p no:cacheprovider "${workers[@]}" tests/test_torch_cuda.py tests/test_torch_backend.py ${TEST_K:+-k "$TEST_K"}
step allreduce 200 "$py" examples/cuda_allreduce_bench.py --ranks 2,4 --sizes-mb 25,100 --rounds "${ROUNDS:-2}" --iters 10 --backends "$BACKENDS"
step chunks 150 bash -c "for c in 1048576 16777216; do echo chunk \$c; SHOAL_TORCH_CUDA_CHUNK_BYTES=\$c $py examples/cuda_allreduce_bench.py --ranks 2,4 --sizes-mb 25,100 --backends shoal --iters 10; done"
step host 60 "$py" examples/cuda_allreduce_bench.py --device cpu --ranks 2 --sizes-mb 25,100 --iters 10
step hostbench 120 bash -c hostbench
step algos 90 bash -c algos
step variants 60 bash -c variants
step roofline 40 bash -c roofline
step profile 100 bash -c profile
step ceiling 60 bash -c "ceiling resnet18"
step ddp18 200 bash -c "ddp resnet18"
step ddp50 150 bash -c "ddp resnet50"
budget_done
