#!/usr/bin/env bash
# Sets up a virtual environment, builds shoal, and runs the whole test suite:
# the Rust unit tests (plans verified, kernels, store, transports, switch) and
# the Python tests that launch real processes over shm, tcp, the aggregation
# switch and the network-namespace testbed.
#
# The optional extras (torch for the PyTorch backend and the Gloo comparison,
# matplotlib for bench plots) are installed best-effort: without them their
# tests are skipped with the reason, and the core's tests still run.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
. .venv/bin/activate
pip install -q --upgrade pip
pip install -q maturin numpy pytest pytest-timeout
timeout 1200 pip install -q matplotlib torch torchvision scikit-learn \
    || echo "test.sh: optional extras not installed; the tests that need them will be skipped"
maturin develop --release -q
cargo test --release --workspace --exclude shoal-py
python -m pytest -q tests
