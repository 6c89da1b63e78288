#!/usr/bin/env bash
# Builds shoal's extension into the active virtual environment (as
# `maturin develop`), optimised by the profile of a short run of its own:
#   1. an instrumented build (target/pgo-generate) runs a workload of
#      collectives at 2 and 3 ranks over shared memory and TCP, from 8 bytes
#      to 1 MiB (`shoal bench`, about 20 s), each process writing a profile;
#   2. llvm-profdata, from rustup's llvm-tools, merges the profiles;
#   3. the final build (target/pgo-use) inlines and lays out the code by them.
# Profile-guided, a 1-rank 8-byte call took about 0.30 us in a Python loop
# instead of 0.41 (docs/benchmarks.md, "The extension built by its profile").
#
# `scripts/develop.sh --plain` (or no llvm-profdata and no rustup to add it,
# or a workload that fails) builds without a profile, as `maturin develop`.
set -euo pipefail
cd "$(dirname "$0")/.."

plain() {
    echo "develop.sh: $1; building without a profile"
    maturin develop -q
    exit 0
}

case "$*" in
    "") ;;
    --plain) plain "--plain given" ;;
    *)
        echo "develop.sh: unknown arguments '$*' (usage: scripts/develop.sh [--plain])" >&2
        exit 2
        ;;
esac
host=$(rustc -vV | sed -n 's/^host: //p')
profdata="$(rustc --print sysroot)/lib/rustlib/$host/bin/llvm-profdata"
if [ ! -x "$profdata" ] && command -v rustup >/dev/null; then
    rustup component add llvm-tools >/dev/null 2>&1 || true
fi
[ -x "$profdata" ] || plain "no $profdata (rustup component add llvm-tools)"

pgo="$PWD/target/pgo"
rm -rf "$pgo"
mkdir -p "$pgo/raw"
build() { # build TARGET_DIR RUSTFLAG
    CARGO_TARGET_DIR="$1" RUSTFLAGS="${RUSTFLAGS:-} $2" maturin develop -q
}

# The calls to optimise for: what `shoal bench` times is what users call
# (the Python methods, the selector's choices). Small calls run many times,
# so that the path every call takes, not the job's setup, is what the
# profile finds hot; mid sizes run their algorithms' copies and reductions.
workload() {
    local args=(--rounds 1 --repeats 3 --no-plot --no-progress --no-roofline)
    for c in allreduce broadcast allgather reduce_scatter alltoall reduce; do
        shoal bench "$c" -n 2 --sizes 8,256,4K --iters 20000 "${args[@]}" --out "$pgo/$c-small"
        shoal bench "$c" -n 2 --sizes 64K,1M "${args[@]}" --out "$pgo/$c-mid"
    done
    shoal bench allreduce -n 3 --sizes 8,4K,64K --iters 2000 "${args[@]}" --out "$pgo/allreduce-3"
    SHOAL_TRANSPORT=tcp shoal bench allreduce -n 2 --sizes 8,4K,64K --iters 2000 "${args[@]}" --out "$pgo/allreduce-tcp"
}

build target/pgo-generate "-Cprofile-generate=$pgo/raw"
if ! LLVM_PROFILE_FILE="$pgo/raw/%p-%m.profraw" workload >"$pgo/workload.log" 2>&1; then
    tail -20 "$pgo/workload.log"
    plain "the profiling workload failed (log: $pgo/workload.log)"
fi
"$profdata" merge -o "$pgo/merged.profdata" "$pgo"/raw/*.profraw
# Named by its content: cargo compares the flag, not the file it names, so
# a new profile under the same name would leave the last build in place.
profile="$pgo/merged-$(sha256sum "$pgo/merged.profdata" | cut -c1-16).profdata"
mv "$pgo/merged.profdata" "$profile"
build target/pgo-use "-Cprofile-use=$profile"
