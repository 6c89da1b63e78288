#!/usr/bin/env bash
# Sets up a virtual environment, builds shoal, and runs the whole test suite:
# the Rust unit tests (plans verified, kernels, store, transports) and the
# Python tests that launch real processes over shm and tcp.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
. .venv/bin/activate
pip install -q --upgrade pip
pip install -q maturin numpy pytest pytest-timeout
maturin develop --release -q
cargo test --release --workspace --exclude shoal-py
python -m pytest -q tests
