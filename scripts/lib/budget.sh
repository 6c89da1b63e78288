# Steps under a time budget, for the scripts that run on a lent machine (gpu-bench.sh,
# node-bench.sh): a step runs only if it is asked for and the budget has room for it, so a short
# lease still returns what was measured. Source it after setting OUT, BUDGET_S and STEPS.
#
#   step NAME SECONDS CMD...   runs CMD (at most SECONDS, less if the budget has less) into
#                              $OUT/NAME.log, and notes it and the log's last lines in $OUT/summary.log
budget_start=$(date +%s)

step() {
    local name=$1 limit=$2
    shift 2
    case " $STEPS " in *" $name "*) ;; *) return 0 ;; esac
    local used=$(($(date +%s) - budget_start))
    if [ $((used + 20)) -gt "$BUDGET_S" ]; then
        echo "== $name: skipped (used ${used}s of ${BUDGET_S}s)" | tee -a "$OUT/summary.log"
        return 0
    fi
    [ "$limit" -gt $((BUDGET_S - used)) ] && limit=$((BUDGET_S - used))
    echo "== $name (at ${used}s, limit ${limit}s): $*" | tee -a "$OUT/summary.log"
    # SIGINT, not TERM: shoal bench then reports the sizes it finished instead of nothing
    timeout -s INT -k 10 "$limit" "$@" >"$OUT/$name.log" 2>&1
    echo "== $name: exit $? after $(($(date +%s) - budget_start - used))s" | tee -a "$OUT/summary.log"
    tail -n 25 "$OUT/$name.log" >>"$OUT/summary.log"
}

budget_done() {
    echo "== done after $(($(date +%s) - budget_start))s" | tee -a "$OUT/summary.log"
}
