#!/usr/bin/env bash
# The full test matrix, on demand. CI (.ci/run) runs every primitive once on each Redis
# topology and every fault scenario 3 times; this runs all of it harder:
#
#   1. every primitive on one server, behind Sentinel and on a Cluster, plain and (Sentinel,
#      Cluster) with TLS and ACL users, ROUNDS times (each round starts its own servers:
#      fresh clusters form every time);
#   2. every fault scenario, ITERATIONS times each (the figures in docs/SAFETY.md);
#   3. the oversell lab on each topology, with its default load;
#   4. the seckill tests against SQLite, and PostgreSQL and MariaDB when reachable
#      (SECKILL_TEST_POSTGRES_URL / SECKILL_TEST_MYSQL_URL, defaults as in .ci/run).
#
# usage: scripts/full-matrix.sh [ROUNDS] [ITERATIONS]     (defaults: 5 and 100)
# Takes about an hour with the defaults on a 2-core machine; `scripts/full-matrix.sh 1 3`
# is a quick pass. Stops at the first failure.
set -euo pipefail
cd "$(dirname "$0")/.."
. .ci/require-redis

rounds="${1:-5}"
iterations="${2:-100}"
case "$rounds$iterations" in *[!0-9]*) echo "usage: $0 [ROUNDS] [ITERATIONS] (whole numbers)" >&2; exit 2 ;; esac

echo "== load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
cargo build --quiet --release --locked -p ferrisson-chaos
cargo test --quiet --locked -p ferrisson --test topologies --test topologies_secured --no-run

for round in $(seq 1 "$rounds"); do
  echo "== every primitive on every topology, round $round of $rounds"
  cargo test --quiet --locked -p ferrisson --test topologies --test topologies_secured
done

echo "== every fault scenario, $iterations iterations each"
target/release/ferrisson-chaos all --iterations "$iterations"

for topology in single sentinel cluster; do
  echo "== oversell lab on $topology"
  ./lab --topology "$topology"
done

if timeout 2 bash -c '</dev/tcp/127.0.0.1/5432' 2>/dev/null; then
  export SECKILL_TEST_POSTGRES_URL="${SECKILL_TEST_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/test}"
fi
if timeout 2 bash -c '</dev/tcp/127.0.0.1/3306' 2>/dev/null; then
  export SECKILL_TEST_MYSQL_URL="${SECKILL_TEST_MYSQL_URL:-mysql://root@127.0.0.1:3306/test}"
fi
echo "== seckill tests (sqlite${SECKILL_TEST_POSTGRES_URL:+, postgres}${SECKILL_TEST_MYSQL_URL:+, mariadb})"
cargo test --quiet --locked -p seckill -p seckill-lab

echo "== load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "full matrix passed: $rounds rounds of every primitive on 3 topologies, $iterations iterations of every fault scenario, the lab on 3 topologies"
