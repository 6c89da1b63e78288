#!/usr/bin/env bash
# Sets up a virtual environment, builds shoal, runs the static checks (ruff,
# mypy --strict, rustfmt, clippy: any finding fails the script before a test
# runs), then the whole test suite: the Rust unit tests (plans verified,
# kernels, store, transports, switch) and the Python tests that launch real
# processes over shm, tcp, the aggregation switch and the network-namespace
# testbed.
#
# The optional extras (torch for the PyTorch backend and the Gloo comparison,
# matplotlib for bench plots) are installed best-effort: without them their
# tests are skipped with the reason, and the core's tests still run.
#
# The torch backend's tests then run a second time on the oldest torch it
# supports (2.4), in a second virtual environment (.venv-torch24), set up
# best-effort in the same way.
set -euo pipefail
cd "$(dirname "$0")/.."
# UCX for the ucx transport's tests (tests/test_ucx.py, which skip with the
# reason where libucp cannot be loaded); shoal itself neither builds nor
# links against it, so this is best-effort
if ! ldconfig -p | grep -q 'libucp\.so\.0'; then
    if [ "$(id -u)" = 0 ] && timeout 600 bash -c 'apt-get update -q && apt-get install -y -q libucx0' >/dev/null; then
        echo "test.sh: installed libucx0 for the UCX tests"
    else
        echo "test.sh: libucx0 not installed (not root, or apt failed); the UCX tests will be skipped"
    fi
fi
python3 -m venv .venv
. .venv/bin/activate
pip install -q --upgrade pip
pip install -q maturin numpy pytest pytest-timeout 'ruff>=0.6' 'mypy>=1.11'
# expecttest: torch.testing._internal needs it (tests/test_torch_dist_suite.py runs torch's own test class)
timeout 1200 pip install -q matplotlib torch torchvision scikit-learn expecttest \
    || echo "test.sh: optional extras not installed; the tests that need them will be skipped"
# an extension built before shoal became abi3 (_shoal.cpython-3XX-*.so)
# would shadow the new _shoal.abi3.so on import
rm -f python/shoal/_shoal.cpython-*.so
bash scripts/develop.sh  # the `wheel` profile, optimised by its own profile

# static checks (settings in pyproject.toml; mypy reads the extension's types from _shoal.pyi)
ruff check python tests build_backend
ruff format --check python tests build_backend
mypy --strict python/shoal
cargo fmt --all --check
cargo clippy --release --workspace --all-targets -- -D warnings

cargo test --release --workspace --exclude shoal-py
# TEST_SHOAL_WHEEL: tests/test_packaging.py also builds the wheel (`pip wheel .`, about
# half a minute on top of this build) and runs a 2-rank job from it
TEST_SHOAL_WHEEL=1 python -m pytest -q tests

# torch 2.4: the oldest release the torch backend supports (docs/torch.md)
if timeout 1200 bash -c 'python3 -m venv .venv-torch24 && .venv-torch24/bin/pip install -q --upgrade pip &&
        .venv-torch24/bin/pip install -q maturin numpy pytest pytest-timeout \
            torch==2.4.1 torchvision==0.19.1 scikit-learn expecttest'; then
    (
        . .venv-torch24/bin/activate
        maturin develop -q
        python -m pytest -q tests/test_torch_backend.py tests/test_torch_cuda.py tests/test_torch_dist_suite.py
    )
else
    echo "test.sh: torch 2.4.1 could not be installed; the torch backend's tests ran on the newest torch only"
fi
