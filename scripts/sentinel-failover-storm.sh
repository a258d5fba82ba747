#!/usr/bin/env bash
# New `ferrisson lock` processes right after a manual Sentinel failover: do any two
# critical sections overlap?
#
# Starts a private group (1 master, 2 replicas, 3 sentinels on free loopback ports,
# down-after 1 s, failover-timeout 5 s) in a temporary directory; then RUNS times: waits
# until the group is settled, sends SENTINEL FAILOVER to the first sentinel, and as soon as
# any sentinel's GET-MASTER-ADDR-BY-NAME names the new master starts PROCS processes, each
# running `ferrisson lock --url redis+sentinel://s1,s2,s3/NAME --wait 60s LOCK -- <5 ms
# critical section>` SECTIONS times in a row. Each critical section logs its start and end
# (nanoseconds); a section that starts while another is inside is an overlap. Also shows
# where the acquires ran (the `evalsha` calls each server counted during the storm).
#
# usage: scripts/sentinel-failover-storm.sh [RUNS] [PROCS] [SECTIONS]   (defaults: 5 16 20)
# Needs redis-server and redis-cli (.ci/require-redis); builds the ferrisson binary unless
# FERRISSON_BIN names one (e.g. a build of another commit, to compare).
# Kills only the processes it started. Exit status 1 when any run had an overlap.
set -euo pipefail
cd "$(dirname "$0")/.."
. .ci/require-redis

runs="${1:-5}"
procs="${2:-16}"
sections="${3:-20}"
case "$runs$procs$sections" in *[!0-9]*) echo "usage: $0 [RUNS] [PROCS] [SECTIONS] (whole numbers)" >&2; exit 2 ;; esac

ferrisson="${FERRISSON_BIN:-}"
if [ -z "$ferrisson" ]; then
  cargo build --quiet --locked -p ferrisson-cli
  ferrisson="$PWD/target/debug/ferrisson"
fi
dir="$(mktemp -d)"
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
cli() { redis-cli -p "$1" "${@:2}"; }
name=storm

# The servers: server 0 is the first master.
ports=()
for i in 0 1 2; do
  port="$(free_port)"
  ports+=("$port")
  mkdir -p "$dir/s$i"
  args=(--port "$port" --bind 127.0.0.1 --dir "$dir/s$i" --save "" --appendonly no --repl-diskless-sync-delay 0)
  [ "$i" -gt 0 ] && args+=(--replicaof 127.0.0.1 "${ports[0]}")
  redis-server "${args[@]}" >"$dir/s$i.log" 2>&1 &
  pids+=($!)
done
sentinels=()
for i in 0 1 2; do
  port="$(free_port)"
  sentinels+=("$port")
  cat >"$dir/sentinel$i.conf" <<EOF
port $port
bind 127.0.0.1
dir $dir
sentinel monitor $name 127.0.0.1 ${ports[0]} 2
sentinel down-after-milliseconds $name 1000
sentinel failover-timeout $name 5000
EOF
  redis-server "$dir/sentinel$i.conf" --sentinel >"$dir/sentinel$i.log" 2>&1 &
  pids+=($!)
done
url="redis+sentinel://127.0.0.1:${sentinels[0]},127.0.0.1:${sentinels[1]},127.0.0.1:${sentinels[2]}/$name"

master_port_by() { cli "$1" SENTINEL GET-MASTER-ADDR-BY-NAME "$name" 2>/dev/null | sed -n 2p; }

# Settled: every sentinel names the same master, which says role:master, sees both
# replicas with their link up, and no sentinel has a failover in progress.
settled() {
  local m="" p
  for s in "${sentinels[@]}"; do
    p="$(master_port_by "$s")"
    [ -n "$p" ] || return 1
    [ -z "$m" ] || [ "$m" = "$p" ] || return 1
    m="$p"
    cli "$s" SENTINEL MASTER "$name" 2>/dev/null | grep -q failover_in_progress && return 1
    [ "$(cli "$s" SENTINEL MASTER "$name" | sed -n '/^num-slaves$/{n;p}')" = 2 ] || return 1
    # Each server's current role read by the sentinel (one that still has the last
    # demoted master reporting `master` aborts the next failover).
    [ "$(cli "$s" SENTINEL MASTER "$name" | sed -n '/^role-reported$/{n;p}')" = master ] || return 1
    [ "$(cli "$s" SENTINEL REPLICAS "$name" | sed -n '/^role-reported$/{n;p}' | grep -c '^slave$')" = 2 ] || return 1
  done
  cli "$m" INFO replication | grep -q '^role:master' || return 1
  [ "$(cli "$m" INFO replication | grep -c 'state=online')" = 2 ] || return 1
  for p in "${ports[@]}"; do
    [ "$p" = "$m" ] && continue
    cli "$p" INFO replication | grep -q "^master_port:$m" || return 1
    cli "$p" INFO replication | grep -q '^master_link_status:up' || return 1
  done
  echo "$m"
}
wait_settled() {
  local deadline=$((SECONDS + 60)) m
  until m="$(settled)"; do
    [ "$SECONDS" -lt "$deadline" ] || { echo "the group did not settle within 60 s" >&2; exit 1; }
    sleep 0.2
  done
  echo "$m"
}

# The critical section: logs its start and end, 5 ms apart.
cat >"$dir/section.sh" <<'EOF'
#!/bin/sh
echo "$(date +%s%N) B $$" >>"$1"
sleep 0.005
echo "$(date +%s%N) E $$" >>"$1"
EOF
chmod +x "$dir/section.sh"

worker() {
  local log="$1" status
  for _ in $(seq 1 "$sections"); do
    status=0
    "$ferrisson" lock --url "$url" --wait 60s "$name-lock" -- "$dir/section.sh" "$log" 2>>"$dir/ferrisson.err" || status=$?
    [ "$status" = 0 ] || echo "exit $status" >>"$dir/exits"
  done
}

total_overlaps=0
for run in $(seq 1 "$runs"); do
  old="$(wait_settled)"
  for p in "${ports[@]}"; do cli "$p" CONFIG RESETSTAT >/dev/null; done
  log="$dir/run$run.log"
  : >"$log"
  : >"$dir/exits"
  until [ "$(cli "${sentinels[0]}" SENTINEL FAILOVER "$name")" = OK ]; do sleep 0.05; done
  started=$SECONDS
  new=""
  until [ -n "$new" ]; do
    for s in "${sentinels[@]}"; do
      p="$(master_port_by "$s")"
      if [ -n "$p" ] && [ "$p" != "$old" ]; then new="$p"; break; fi
    done
    [ $((SECONDS - started)) -lt 30 ] || { echo "no sentinel named a new master within 30 s" >&2; exit 1; }
  done
  workers=()
  for _ in $(seq 1 "$procs"); do
    worker "$log" &
    workers+=($!)
  done
  for w in "${workers[@]}"; do wait "$w"; done
  read -r count overlaps < <(python3 - "$log" <<'EOF'
import sys
events = sorted((int(t), kind, pid) for t, kind, pid in (line.split() for line in open(sys.argv[1])))
inside, overlaps, starts = set(), 0, 0
for _, kind, pid in events:
    if kind == "B":
        starts += 1
        overlaps += bool(inside)
        inside.add(pid)
    else:
        inside.discard(pid)
print(starts, overlaps)
EOF
)
  calls=""
  for p in "${ports[@]}"; do
    n="$(cli "$p" INFO commandstats | sed -n 's/^cmdstat_evalsha:calls=\([0-9]*\),.*/\1/p')"
    role=""; [ "$p" = "$old" ] && role=" (old master)"; [ "$p" = "$new" ] && role=" (new master)"
    calls="$calls $p$role: ${n:-0};"
  done
  failed="$(wc -l <"$dir/exits")"
  echo "run $run: $count critical sections, $overlaps overlapping, $failed lock runs failed; evalsha calls:$calls"
  total_overlaps=$((total_overlaps + overlaps))
done
echo "total overlapping critical sections over $runs runs: $total_overlaps"
[ "$total_overlaps" = 0 ]
