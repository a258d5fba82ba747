#!/usr/bin/env bash
# Instructions the client executes per lock+unlock (acquire+release) pair, under callgrind:
# for every subject of the pair-cost bench, two runs of N and 2N pairs after the same
# warm-up, and (Ir(2N) - Ir(N)) / N. Only the bench process is counted (valgrind does not
# follow the private redis-server it starts).
#
# usage: scripts/pair-cost-callgrind.sh [N] [subjects...]
#
#   N         pairs of the shorter run (default 2000); the longer one runs 2N
#   subjects  default: floor simple lock semaphore expirable fair
#
# Runs on a current-thread runtime (the bench's --current-thread), whose counts repeat
# to within about 1.5% (the 2-worker runtime's varied by up to 10% under callgrind);
# PAIR_COST_RUNTIME=multi runs the bench's 2-worker runtime instead.
# Environment: PAIR_COST_TASKS=T spreads the pairs over T tasks on T keys (default 1);
# PAIR_COST_OUT=DIR keeps the callgrind files there (default /tmp/pair-cost-callgrind),
# named callgrind.<subject>.<pairs>, for callgrind_annotate; PAIR_COST_BIN=PATH runs that
# build of the bench instead of building this tree's (to measure another commit).
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
repo="$(git -C "$here" rev-parse --show-toplevel)"
n="${1:-2000}"
shift || true
subjects=("$@")
if [ ${#subjects[@]} -eq 0 ]; then
    subjects=(floor simple lock semaphore expirable fair)
fi
tasks="${PAIR_COST_TASKS:-1}"
runtime_flag=--current-thread
[ "${PAIR_COST_RUNTIME:-current}" = multi ] && runtime_flag=""
out="${PAIR_COST_OUT:-/tmp/pair-cost-callgrind}"
mkdir -p "$out"

cd "$repo"
bin="${PAIR_COST_BIN:-}"
[ -n "$bin" ] || bin="$(cargo bench -p ferrisson --bench pair_cost --no-run --message-format=json 2>/dev/null |
    sed -n 's/.*"executable":"\([^"]*pair_cost[^"]*\)".*/\1/p' | tail -n1)"
if [ -z "$bin" ] || [ ! -x "$bin" ]; then
    echo "could not build the pair_cost bench" >&2
    exit 1
fi

total_ir() {
    # The "summary:" line of a callgrind file: the run's total Ir.
    sed -n 's/^summary: \([0-9]*\).*/\1/p' "$1"
}

echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "| subject | Ir($n) | Ir($((2 * n))) | instructions/pair |"
echo "|---|---:|---:|---:|"
for subject in "${subjects[@]}"; do
    irs=()
    for pairs in "$n" "$((2 * n))"; do
        file="$out/callgrind.$subject.$pairs"
        valgrind --tool=callgrind --callgrind-out-file="$file" \
            "$bin" $runtime_flag --subject "$subject" --pairs "$pairs" --tasks "$tasks" \
            >"$file.log" 2>&1
        irs+=("$(total_ir "$file")")
    done
    echo "| $subject | ${irs[0]} | ${irs[1]} | $(((irs[1] - irs[0]) / n)) |"
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
