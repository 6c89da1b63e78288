#!/usr/bin/env bash
# Installs what `shoal bench` compares against, into the active virtual
# environment (or .venv/ of the repository if none is active):
#   - OpenMPI from the distribution (apt-get: openmpi-bin libopenmpi-dev),
#   - mpi4py, built against it,
#   - PyTorch (from PyPI, unless torch is already there) for the Gloo backend,
#   - matplotlib for the plots (the `bench` extra of shoal).
# `shoal bench` itself never installs anything; it names this script when a
# competitor is missing.
#
#   bash scripts/bench-deps.sh              # everything
#   bash scripts/bench-deps.sh mpi          # only OpenMPI + mpi4py
#   bash scripts/bench-deps.sh gloo plots   # only torch and matplotlib
set -euo pipefail
cd "$(dirname "$0")/.."

want=("$@")
[ ${#want[@]} -eq 0 ] && want=(mpi gloo plots)
has() { local x; for x in "${want[@]}"; do [ "$x" = "$1" ] && return 0; done; return 1; }

if [ -z "${VIRTUAL_ENV:-}" ]; then
    [ -d .venv ] || python3 -m venv .venv
    . .venv/bin/activate
fi
echo "bench-deps: installing into $(python -c 'import sys; print(sys.prefix)')"

if has mpi; then
    if ! command -v mpirun >/dev/null || ! command -v mpicc >/dev/null; then  # mpicc: libopenmpi-dev
        sudo=""
        [ "$(id -u)" -ne 0 ] && sudo="sudo"
        $sudo apt-get update
        DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y openmpi-bin libopenmpi-dev
    fi
    python -m pip install mpi4py
fi
if has gloo; then
    if python -c 'import torch' 2>/dev/null; then
        echo "bench-deps: torch $(python -c 'import torch; print(torch.__version__)') already installed"
    else
        python -m pip install torch
    fi
fi
if has plots; then
    python -m pip install 'matplotlib>=3.5'
fi
echo "bench-deps: done; try: shoal bench allreduce -n 2 --against gloo,mpi"
