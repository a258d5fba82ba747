#!/usr/bin/env bash
# The command's acceptance run on any store: PROCESSES processes (16) x SECTIONS critical
# sections (20) under `ferrisson lock --url URL storm -- ...`: no overlap (a mkdir
# marker inside the section) and, where the store gives fencing tokens, one distinct
# token per section; then `--wait 500ms` while another process holds the lock must exit
# 75 without running its command.
#
# Usage: cargo build -p ferrisson-cli && scripts/lock-storm.sh STORE
#   STORE is a URL, or one of:
#     postgres           the lock table on the machine's PostgreSQL (a table of the run's own)
#     postgres-advisory  PostgreSQL's advisory lock (?lock=advisory; no tokens)
#     mariadb            the lock table on the machine's MariaDB / MySQL
#     mariadb-advisory   MariaDB's GET_LOCK (?lock=advisory; no tokens)
#     zookeeper          a private ZooKeeper server (free port, temp dir, killed at the end)
#     etcd               a private etcd member (free ports, temp dir, killed at the end)
#   FERRISSON_TEST_POSTGRES_URL / FERRISSON_TEST_MYSQL_URL override the databases' URLs
#   (the run's lock table is dropped at the end with psql / mariadb when they are on PATH).
set -euo pipefail
BIN=${BIN:-target/debug/ferrisson}
PROCESSES=${PROCESSES:-16}
SECTIONS=${SECTIONS:-20}
STORE=${1:?usage: scripts/lock-storm.sh URL|postgres|postgres-advisory|mariadb|mariadb-advisory|zookeeper|etcd}
D=$(mktemp -d /tmp/lock-storm.XXXXXX)
SERVER=
cleanup() {
  case "$STORE" in
    postgres) psql -q "$pg" -c "DROP TABLE IF EXISTS $table; DROP SEQUENCE IF EXISTS ${table}_fence" 2>/dev/null || true ;;
    mariadb) mariadb -h 127.0.0.1 -u root test -e "DROP TABLE IF EXISTS $table, ${table}_fence" 2>/dev/null || true ;;
  esac
  if [ -n "$SERVER" ]; then kill "$SERVER" 2>/dev/null || true; wait "$SERVER" 2>/dev/null || true; fi
  rm -rf "$D"
}
trap cleanup EXIT
port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
pg=${FERRISSON_TEST_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/test}
my=${FERRISSON_TEST_MYSQL_URL:-mysql://root@127.0.0.1:3306/test}
table="ferrisson_storm_$$"
tokens_expected=yes
case "$STORE" in
  postgres) URL="$pg?table=$table" ;;
  mariadb) URL="$my?table=$table" ;;
  postgres-advisory) URL="$pg?lock=advisory"; tokens_expected=no ;;
  mariadb-advisory) URL="$my?lock=advisory"; tokens_expected=no ;;
  zookeeper)
    ZP=$(port)
    mkdir -p "$D/zk"
    printf 'tickTime=200\ndataDir=%s\nclientPort=%s\nclientPortAddress=127.0.0.1\nadmin.enableServer=false\n4lw.commands.whitelist=ruok\n' "$D/zk" "$ZP" > "$D/zoo.cfg"
    java -Xmx128m -XX:+UseSerialGC -Dzookeeper.admin.enableServer=false -Dzookeeper.log.dir="$D/zk" \
      -cp "${FERRISSON_ZOOKEEPER_JAR:-/usr/share/java/zookeeper.jar}" \
      org.apache.zookeeper.server.quorum.QuorumPeerMain "$D/zoo.cfg" >"$D/zk.log" 2>&1 &
    SERVER=$!
    until [ "$(exec 3<>/dev/tcp/127.0.0.1/"$ZP" && printf ruok >&3 && cat <&3)" = imok ] 2>/dev/null; do sleep 0.1; done
    URL=zk://127.0.0.1:$ZP ;;
  etcd)
    CP=$(port); PP=$(port)
    etcd --name s1 --data-dir "$D/etcd" --listen-client-urls http://127.0.0.1:$CP --advertise-client-urls http://127.0.0.1:$CP \
      --listen-peer-urls http://127.0.0.1:$PP --initial-advertise-peer-urls http://127.0.0.1:$PP --initial-cluster s1=http://127.0.0.1:$PP \
      --heartbeat-interval 50 --election-timeout 500 --logger zap --log-level error 2>"$D/etcd.log" &
    SERVER=$!
    until curl -fs http://127.0.0.1:$CP/health | grep -q '"health":"true"'; do sleep 0.05; done
    URL=etcd://127.0.0.1:$CP ;;
  *) URL=$STORE ;;
esac
export D
section='mkdir "$D/inside" 2>/dev/null || echo overlap >> "$D/overlaps"; echo "${FERRISSON_FENCING_TOKEN:-}" >> "$D/tokens"; sleep 0.01; rmdir "$D/inside"'
start=$(date +%s.%N)
workers=()
for _ in $(seq "$PROCESSES"); do
  ( for _ in $(seq "$SECTIONS"); do "$BIN" lock --url "$URL" storm -- sh -c "$section" || echo "exit $?" >> "$D/failures"; done ) &
  workers+=($!)
done
wait "${workers[@]}"
end=$(date +%s.%N)
sections=$(wc -l < "$D/tokens")
distinct=$(grep -v '^$' "$D/tokens" | sort -u | wc -l || true)
lines_in() { if [ -f "$1" ]; then wc -l < "$1"; else echo 0; fi; }
overlaps=$(lines_in "$D/overlaps")
failures=$(lines_in "$D/failures")
echo "store: $STORE; sections: $sections, distinct tokens: $distinct, overlaps: $overlaps, failures: $failures, seconds: $(echo "$end - $start" | bc)"
# The wait runs out while another process holds: exit 75, the command not run.
"$BIN" lock --url "$URL" storm -- sh -c 'touch "$D/held"; sleep 5' &
holder=$!
until [ -e "$D/held" ]; do sleep 0.05; done
set +e
"$BIN" lock --url "$URL" --wait 500ms storm -- touch "$D/ran"
waited=$?
set -e
wait "$holder"
echo "--wait 500ms while held: exit $waited, command run: $([ -e "$D/ran" ] && echo yes || echo no)"
want_tokens=$((PROCESSES * SECTIONS))
[ "$tokens_expected" = no ] && want_tokens=0
if [ "$sections" -ne $((PROCESSES * SECTIONS)) ] || [ "$overlaps" -ne 0 ] || [ "$failures" -ne 0 ] \
  || [ "$distinct" -ne "$want_tokens" ] || [ "$waited" -ne 75 ] || [ -e "$D/ran" ]; then
  echo "FAILED" >&2
  exit 1
fi
echo "passed"
