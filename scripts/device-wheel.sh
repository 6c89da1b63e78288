#!/usr/bin/env bash
# For the lent 16-core GPU machine, which has no Rust: after
# `bash ../shared/gpu-machine/prepare.sh` has put a wheel built with the plain
# release profile in .device-carry/, replaces it by one built as the README's
# commands build the extension here: the whole-program-optimised `wheel`
# profile, and the profile-guided build by the profile `scripts/develop.sh`
# left in target/pgo (run develop.sh first, as test.sh and demo.sh do). Without
# such a profile, the `wheel` profile alone, and it says so. Small calls
# measured there then are of the build users get (docs/benchmarks.md, "The
# extension built by its profile").
set -euo pipefail
cd "$(dirname "$0")/.."
[ -d .device-carry ] || {
    echo "device-wheel.sh: no .device-carry/; run bash ../shared/gpu-machine/prepare.sh first"
    exit 1
}
py312=$(ls -d "$HOME"/.pyenv/versions/3.12*/bin/python3.12 2>/dev/null | head -n 1 || true)
[ -n "$py312" ] || py312=$(command -v python3.12)
profile=$(ls -t target/pgo/merged-*.profdata 2>/dev/null | head -n 1 || true)
flags=""
if [ -n "$profile" ]; then
    flags="-Cprofile-use=$PWD/$profile"
else
    echo "device-wheel.sh: no profile in target/pgo (run scripts/develop.sh first); the wheel profile alone"
fi
rm -f .device-carry/shoal-*.whl
CARGO_TARGET_DIR=target/pgo-device RUSTFLAGS="${RUSTFLAGS:-} $flags" \
    maturin build -q --profile wheel -i "$py312" -o .device-carry
ls .device-carry/shoal-*.whl
