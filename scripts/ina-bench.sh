#!/usr/bin/env bash
# The software switch's throughput from the wheel alone (issue 32, item 2: the 16-core machine
# has no Rust toolchain, so not the cargo example ina_bench): for each thread count, a real
# `shoal switch --threads T` on the loopback, and WORKERS ranks (`shoal bench allreduce --algo
# ina`, real processes) whose job names the switch T times (SHOAL_SWITCH: T trees, one switch job
# per tree, which the switch spreads over its threads). The figure is GB/s of worker input:
# WORKERS x bytes per rank / seconds per allreduce. Logs go under $OUT (default results/ina),
# steps run in order under a time budget (scripts/lib/budget.sh, BUDGET_S default 300).
#
#   bash .device-carry/remote.sh bash scripts/ina-bench.sh    # on the 16-core machine, from the wheel
#   prepare.sh built (then scripts/device-wheel.sh rebuilt, here, as the README builds it)
#   WORKERS=2 THREADS="1 2" SIZES=4M bash scripts/ina-bench.sh # a small try on 2 cores
#
# STEPS picks steps by name (default: info switch); WORKERS (default 8), THREADS (default
# "1 2 4 8"), SIZES (default 16M,64M), REPEATS (default 3); PORT (default 9870): the first switch
# listens on PORT, the next ones 10 ports further each (a switch of T threads takes T UDP ports).
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-results/ina}
mkdir -p "$OUT"
BUDGET_S=${BUDGET_S:-300}
STEPS=${STEPS:-info switch}
export WORKERS=${WORKERS:-8} THREADS=${THREADS:-1 2 4 8} SIZES=${SIZES:-16M,64M} REPEATS=${REPEATS:-3}
export PORT=${PORT:-9870}
export py=${PYTHON:-python3} OUT

. scripts/lib/budget.sh

info() {
    nproc
    uptime
    "$py" -m shoal.cli info | head -n 12
}

# one switch per thread count, WORKERS ranks through it, then GB/s of worker input per size
through_switch() {
    local t port=$PORT secret trees pid
    secret=$(mktemp)
    "$py" -c 'import secrets; print(secrets.token_hex(24))' >"$secret"
    for t in $THREADS; do
        "$py" -m shoal.cli switch --listen "127.0.0.1:$port" --threads "$t" --memory 256MiB \
            --secret-file "$secret" >"$OUT/switch-$t.log" 2>&1 &
        pid=$!
        for _ in $(seq 50); do # until it listens (at most 10 s)
            (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
            sleep 0.2
        done
        trees=$(for _ in $(seq "$t"); do printf '127.0.0.1:%s,' "$port"; done)
        echo "--- $WORKERS workers, switch --threads $t, SHOAL_SWITCH=${trees%,}"
        SHOAL_SWITCH=${trees%,} SHOAL_SWITCH_SECRET_FILE=$secret "$py" -m shoal.cli bench allreduce \
            -n "$WORKERS" --sizes "$SIZES" --algo ina --rounds 1 --repeats "$REPEATS" --no-plot \
            --no-progress --timeout 120 --out "$OUT/bench-$t"
        kill "$pid"
        wait "$pid" 2>/dev/null
        port=$((port + 10))
        "$py" - "$OUT/bench-$t/results.json" "$WORKERS" "$t" <<'EOF'
import json, sys
results, workers, threads = json.load(open(sys.argv[1])), int(sys.argv[2]), sys.argv[3]
for series in results["series"]:
    if series["algo"] != "ina" or series["status"] != "ok":
        print(f"switch threads {threads}: {series['name']} {series['status']} {series['failure'] or ''}")
        continue
    for r in series["results"]:
        gbps = workers * r["size"] / (r["time_us"] * 1e-6) / 1e9
        print(f"switch threads {threads}: {r['size'] / 2**20:g} MiB per worker, {r['time_us']:.0f} us, "
              f"{gbps:.2f} GB/s of worker input, errors {r['errors']}")
EOF
    done
    rm -f "$secret"
}

export -f info through_switch
step info 30 bash -c info
step switch 270 bash -c through_switch
budget_done
