#!/usr/bin/env bash
# The etcd store's acceptance run: 16 processes x 20 critical sections under
# `ferrisson lock --url etcd://...` on a private etcd member (free ports, temp dir):
# no overlap (a mkdir marker), 320 distinct fencing tokens; then --wait running out
# while another process holds exits 75. Usage: cargo build -p ferrisson-cli && scripts/etcd-storm.sh
set -euo pipefail
BIN=${BIN:-target/debug/ferrisson}
D=$(mktemp -d /tmp/etcd-storm.XXXXXX)
port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
CP=$(port); PP=$(port)
etcd --name s1 --data-dir "$D/data" --listen-client-urls http://127.0.0.1:$CP --advertise-client-urls http://127.0.0.1:$CP \
  --listen-peer-urls http://127.0.0.1:$PP --initial-advertise-peer-urls http://127.0.0.1:$PP --initial-cluster s1=http://127.0.0.1:$PP \
  --heartbeat-interval 50 --election-timeout 500 --logger zap --log-level error 2>"$D/etcd.log" &
ETCD=$!
trap 'kill $ETCD 2>/dev/null; wait $ETCD 2>/dev/null; rm -rf "$D"' EXIT
until curl -fs http://127.0.0.1:$CP/health | grep -q '"health":"true"'; do sleep 0.05; done
URL=etcd://127.0.0.1:$CP
export D
section='mkdir "$D/inside" 2>/dev/null || echo overlap >> "$D/overlaps"; echo "$FERRISSON_FENCING_TOKEN" >> "$D/tokens"; sleep 0.01; rmdir "$D/inside"'
start=$(date +%s.%N)
for p in $(seq 16); do
  ( for i in $(seq 20); do "$BIN" lock --url "$URL" storm -- sh -c "$section" || echo "exit $?" >> "$D/failures"; done ) &
done
wait $(jobs -p | grep -v "^$ETCD$") 2>/dev/null || true
end=$(date +%s.%N)
echo "sections: $(wc -l < "$D/tokens"), distinct tokens: $(sort -u "$D/tokens" | wc -l), overlaps: $(cat "$D/overlaps" 2>/dev/null | wc -l), failures: $(cat "$D/failures" 2>/dev/null | wc -l), seconds: $(echo "$end - $start" | bc)"
# --wait runs out while another process holds: exit 75
"$BIN" lock --url "$URL" storm -- sleep 5 &
HOLDER=$!
until ETCDCTL_API=3 etcdctl --endpoints http://127.0.0.1:$CP get storm/ --prefix --keys-only | grep -q storm/; do sleep 0.05; done
set +e
"$BIN" lock --url "$URL" --wait 500ms storm -- true
echo "--wait 500ms while held: exit $?"
set -e
wait $HOLDER
