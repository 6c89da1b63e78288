#!/usr/bin/env bash
# The CUDA path of shoal.torch on a GPU machine, in one go: its GPU tests,
# then CUDA all_reduce and DDP training against Gloo, side by side. Logs go
# under $OUT (default results/gpu). Steps run in order of importance and a
# step is skipped once the run has used BUDGET_S seconds (default 420), so
# that a short lease still returns what it measured.
#
#   bash scripts/gpu-bench.sh                                # on the GPU machine, shoal installed
#   bash .device-carry/remote.sh bash scripts/gpu-bench.sh   # there, from the wheel prepare.sh built
#
# STEPS picks steps by name (default: all): info tests allreduce chunks host ddp18 ddp50; TEST_K
# narrows the tests (pytest -k);
# DDP_ARGS adds arguments to the DDP runs (e.g. a small --batch-size --image-size --no-cuda to try it on a CPU)
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-results/gpu}
mkdir -p "$OUT"
BUDGET_S=${BUDGET_S:-420}
STEPS=${STEPS:-info tests allreduce chunks host ddp18 ddp50}
start=$(date +%s)
py=${PYTHON:-python3}

# step NAME SECONDS CMD...: runs CMD (at most SECONDS) into $OUT/NAME.log if NAME is
# asked for and the budget has room for it
step() {
    local name=$1 limit=$2
    shift 2
    case " $STEPS " in *" $name "*) ;; *) return 0 ;; esac
    local used=$(($(date +%s) - start))
    if [ $((used + 20)) -gt "$BUDGET_S" ]; then
        echo "== $name: skipped (used ${used}s of ${BUDGET_S}s)" | tee -a "$OUT/summary.log"
        return 0
    fi
    [ "$limit" -gt $((BUDGET_S - used)) ] && limit=$((BUDGET_S - used))
    echo "== $name (at ${used}s, limit ${limit}s): $*" | tee -a "$OUT/summary.log"
    timeout -k 5 "$limit" "$@" >"$OUT/$name.log" 2>&1
    echo "== $name: exit $? after $(($(date +%s) - start - used))s" | tee -a "$OUT/summary.log"
    tail -n 25 "$OUT/$name.log" >>"$OUT/summary.log"
}

info() {
    nvidia-smi --query-gpu=name,memory.total,driver_version,pcie.link.gen.max,pcie.link.width.max --format=csv
    nproc
    uptime
    "$py" -c 'import torch, shoal; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name(0)); print("shoal", shoal.__file__)'
}

# DDP on MODEL at 2 and 4 ranks, shoal then gloo, then the final parameters compared
ddp() {
    local model=$1 ranks
    for ranks in 2 4; do
        for backend in shoal gloo; do
            echo "--- $model $ranks ranks $backend"
            "$py" -m shoal.cli run -n "$ranks" -- "$py" examples/pytorch_synthetic_benchmark.py --backend "$backend" \
                --model "$model" --num-warmup-batches 5 --num-iters 5 ${DDP_ARGS:-} --save-params "/tmp/params-$model-$ranks-$backend.pt"
        done
        "$py" - "/tmp/params-$model-$ranks-shoal.pt" "/tmp/params-$model-$ranks-gloo.pt" <<'EOF'
import sys, torch
a, b = (torch.load(f) for f in sys.argv[1:3])
worst = max(((a[k].double() - b[k].double()).abs().max() / b[k].double().abs().max().clamp_min(1e-12)).item()
            for k in b if b[k].is_floating_point())
print(f"final parameters: largest difference relative to the tensor's largest value, shoal vs gloo: {worst:.3g}")
EOF
    done
}

export -f info ddp
export py
step info 30 bash -c info
workers=()
"$py" -c "import xdist" 2>/dev/null && workers=(-n 4) # pytest-xdist, where installed
step tests 200 "$py" -m pytest -q -p no:cacheprovider "${workers[@]}" tests/test_torch_cuda.py tests/test_torch_backend.py ${TEST_K:+-k "$TEST_K"}
step allreduce 200 "$py" examples/cuda_allreduce_bench.py --ranks 2,4 --sizes-mb 25,100 --rounds 2 --iters 10
step chunks 150 bash -c "for c in 1048576 16777216; do echo chunk \$c; SHOAL_TORCH_CUDA_CHUNK_BYTES=\$c $py examples/cuda_allreduce_bench.py --ranks 2,4 --sizes-mb 25,100 --backends shoal --iters 10; done"
step host 60 "$py" examples/cuda_allreduce_bench.py --device cpu --ranks 2 --sizes-mb 25,100 --iters 10
step ddp18 200 bash -c "ddp resnet18"
step ddp50 150 bash -c "ddp resnet50"
echo "== done after $(($(date +%s) - start))s" | tee -a "$OUT/summary.log"
