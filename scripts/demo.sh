#!/usr/bin/env bash
# Sets up a virtual environment, builds shoal, and runs the demo: 4 local
# ranks allreduce, broadcast and allgather over shared memory, then over TCP.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
. .venv/bin/activate
pip install -q --upgrade pip
pip install -q maturin numpy
# an extension built before shoal became abi3 (_shoal.cpython-3XX-*.so)
# would shadow the new _shoal.abi3.so on import
rm -f python/shoal/_shoal.cpython-*.so
bash scripts/develop.sh  # the `wheel` profile, optimised by its own profile
shoal run -n 4 python examples/demo.py
SHOAL_TRANSPORT=tcp shoal run -n 4 python examples/demo.py
