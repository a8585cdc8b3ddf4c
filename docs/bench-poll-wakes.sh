#!/usr/bin/env bash
# Claims per workflow start with many long polls waiting, on PostgreSQL:
# one node (the in-process cache), then three nodes on one Redis database
# with the polls spread over them. Each poll that a start wakes runs a
# claim transaction (the store's write lock taken shared, a session);
# all but one of them find nothing. This counts them.
#
#   DW_BENCH_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/postgres \
#   DW_BENCH_REDIS_URL=redis://127.0.0.1:6379 docs/bench-poll-wakes.sh [POLLS] [STARTS]
#
# Defaults: 24 polls, 300 starts. POLLS workers each keep one workflow
# poll open (20 s; a poll that gets a task polls again at once and never
# completes it) on queue "q"; once all of them wait, STARTS workflows are
# started one after another (curl), round robin over the nodes, and the
# run ends when every task is leased. Printed per deployment: the time a
# start took until every task was leased, PostgreSQL's CPU a start (its
# processes, /proc, when it runs on this machine), the claims
# (the claim's candidate statement, from pg_stat_statements: the server
# must preload it) per start, those that found a task and those that found
# nothing, and each node's wake relay counts (published, received, and the
# single wake-ups a poll of the node took, `kept_here`, and the relayed
# ones it took or saw another node take, `taken_here`, `taken_elsewhere`).
# With DWSERVER_BEFORE set, a second binary runs the same phases first.
# LAYOUT=apart puts every poll on nodes 2 and 3 and sends every start to
# node 1 (so each start's wake-up must cross to the other nodes) instead
# of spreading both over the nodes (LAYOUT=spread, the default).
# DWSERVER names a built release binary (default: built here); a fresh
# database dw_wakes_<pid>_<deployment>_<binary> each, dropped at the end;
# Redis database BENCH_REDIS_DB (default 13, flushed); BENCH_PORT the
# nodes' first port (18690).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
# shellcheck source=docs/bench-lib.sh
. "$root/docs/bench-lib.sh"
: "${DW_BENCH_POSTGRES_URL:?set DW_BENCH_POSTGRES_URL to a PostgreSQL server you may create databases on}"
: "${DW_BENCH_REDIS_URL:?set DW_BENCH_REDIS_URL to a redis-server (redis://host:port)}"
polls=${1:-24}
layout=${LAYOUT:-spread}
case "$layout" in spread | apart) ;; *) echo "LAYOUT is spread or apart, not $layout" >&2; exit 2 ;; esac
starts=${2:-300}
port=${BENCH_PORT:-18690}
redis_db=${BENCH_REDIS_DB:-13}
for tool in psql redis-cli curl python3 ss; do
  command -v "$tool" >/dev/null || { echo "$tool is missing (postgresql-client, redis-tools, curl, python3, iproute2)" >&2; exit 1; }
done
if [ -z "${DWSERVER:-}" ]; then
  cargo build --release --locked -q -p dwengine --bin dwserver
fi
target=${CARGO_TARGET_DIR:-$root/target}
declare -A binary=([after]="$(realpath "${DWSERVER:-$target/release/dwserver}")")
labels=(after)
if [ -n "${DWSERVER_BEFORE:-}" ]; then
  binary[before]=$(realpath "$DWSERVER_BEFORE")
  labels=(before after)
fi
work=$(mktemp -d)
node_pids=()
poller_pids=()
databases=()
stop() {
  for pid in "${poller_pids[@]}" "${node_pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${poller_pids[@]}" "${node_pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  poller_pids=()
  node_pids=()
}
cleanup() {
  stop
  for db in "${databases[@]}"; do
    psql -q "$DW_BENCH_POSTGRES_URL" -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1 || true
  done
  rm -rf "$work"
}
trap cleanup EXIT
redis_host_port=${DW_BENCH_REDIS_URL#redis://}
redis_host_port=${redis_host_port%/}

# start_node BINARY N URL [ENV=VALUE...]: a node on port+N.
start_node() {
  local bin=$1 n=$2 url=$3
  shift 3
  # The wait caps let every poll wait (a refused one would poll again at once).
  env "$@" DW_SERVER_ID="wakes-$n" DW_AUTH=none DW_BIND="127.0.0.1:$((port + n))" \
    DW_LONG_POLL_MAX_WAITS_PER_NAMESPACE="$polls" DW_LONG_POLL_MAX_WAITS="$((polls + 64))" \
    DW_DATABASE_URL="$url" DW_POLLING_CACHE_PATH="$work/cache-$n" "$bin" >"$work/node-$n.log" 2>&1 &
  node_pids+=("$!")
  for _ in $(seq 600); do
    grep -q '^listening on ' "$work/node-$n.log" && return 0
    kill -0 "$!" 2>/dev/null || break
    sleep 0.1
  done
  cat "$work/node-$n.log" >&2
  echo "node $n did not start" >&2
  exit 1
}


# poller I BASE: one worker's workflow polls, one after another.
poller() {
  local i=$1 base=$2 n=0
  while :; do
    n=$((n + 1))
    curl -s -o /dev/null -X POST "$base/api/worker/workflow-tasks/poll" -H 'Content-Type: application/json' \
      -d "{\"task_queue\":\"q\",\"worker_id\":\"w$i\",\"poll_request_id\":\"p$i-$n\",\"timeout_seconds\":20}" || sleep 0.1
  done
}

# phase LABEL NAME NODES
phase() {
  local label=$1 name=$2 nodes=$3 db="dw_wakes_$$_${2//-/_}_$1" url n i waiting
  databases+=("$db")
  psql -q "$DW_BENCH_POSTGRES_URL" -c "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db" >/dev/null
  url="${DW_BENCH_POSTGRES_URL%/*}/$db"
  if [ "$nodes" = 1 ]; then
    start_node "${binary[$label]}" 1 "$url"
  else
    redis-cli -h "${redis_host_port%:*}" -p "${redis_host_port##*:}" -n "$redis_db" flushdb >/dev/null
    for n in $(seq "$nodes"); do
      start_node "${binary[$label]}" "$n" "$url" DW_REDIS_URL="${DW_BENCH_REDIS_URL%/}/$redis_db"
    done
  fi
  psql -qAt "$url" -c "CREATE EXTENSION IF NOT EXISTS pg_stat_statements" >/dev/null
  # poll_node I / start_node_of I: the node (1-based) of poll or start I.
  poll_node() { if [ "$layout" = apart ] && [ "$nodes" -gt 1 ]; then echo $((2 + ($1 - 1) % (nodes - 1))); else echo $((1 + ($1 - 1) % nodes)); fi; }
  start_node_of() { if [ "$layout" = apart ]; then echo 1; else echo $((1 + $1 % nodes)); fi; }
  for i in $(seq "$polls"); do
    poller "$i" "http://127.0.0.1:$((port + $(poll_node "$i")))" &
    poller_pids+=("$!")
  done
  # Every poll's connection is open (ss), then a second for each to run
  # its first look and wait.
  for _ in $(seq 600); do
    waiting=$(ss -Htn state established "( dport >= :$((port + 1)) and dport <= :$((port + nodes)) )" | wc -l)
    [ "$waiting" -ge "$polls" ] && break
    sleep 0.1
  done
  sleep 1
  psql -qAt "$url" -c "SELECT pg_stat_statements_reset()" >/dev/null
  local p0 t0
  p0=$(pg_ticks)
  t0=$(date +%s%N)
  for i in $(seq "$starts"); do
    curl -sf -o /dev/null -X POST "http://127.0.0.1:$((port + $(start_node_of "$i")))/api/workflows" \
      -H 'Content-Type: application/json' \
      -d "{\"workflow_id\":\"w-$i\",\"workflow_type\":\"Order\",\"task_queue\":\"q\",\"input\":{\"codec\":\"json\",\"blob\":\"[]\"}}"
  done
  for _ in $(seq 600); do
    [ "$(psql -qAt "$url" -c "SELECT COUNT(*) FROM dispatch_tasks WHERE kind = 'workflow' AND status = 'ready'")" = 0 ] && break
    sleep 0.1
  done
  echo "$(( ($(date +%s%N) - t0) / 1000000 ))" >"$work/$label-$name.ms"
  local p1
  p1=$(pg_ticks)
  if [ "$p0" != - ] && [ "$p1" != - ]; then echo "$((p1 - p0))" >"$work/$label-$name.pg"; else echo - >"$work/$label-$name.pg"; fi
  psql -qAt -F ' ' "$url" -c "SELECT calls, rows FROM pg_stat_statements
    WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
      AND query LIKE '%FOR UPDATE OF d SKIP LOCKED%'" >"$work/$label-$name.claims"
  for n in $(seq "$nodes"); do
    curl -s "http://127.0.0.1:$((port + n))/api/system/operator-metrics" |
      python3 -c 'import json,sys; r=json.load(sys.stdin)["cluster"]["wake_relay"]; print(r["published"], r["received"], r.get("kept_here", "-"), r.get("taken_here", "-"), r.get("taken_elsewhere", "-"))' \
      >>"$work/$label-$name.relay"
  done
  stop
}

for name in pg-1 pg-3; do
  for label in "${labels[@]}"; do
    phase "$label" "$name" "${name#pg-}"
  done
done

python3 - "$work" "$starts" "$polls" "$(getconf CLK_TCK)" "$layout" "${labels[@]}" <<'PY'
import sys
work, starts, polls, hz, layout, labels = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), sys.argv[5], sys.argv[6:]
where = "starts on node 1, polls on the others" if layout == "apart" else "both spread over the nodes"
print(f"{starts} starts one after another, {polls} workflow polls waiting ({where})")
print("| binary | deployment | ms a start, until leased | PostgreSQL CPU ms a start | claims / start | found a task | found nothing | relay per node: published / received / kept here / taken here / taken elsewhere |")
print("| --- | --- | --- | --- | --- | --- | --- | --- |")
for name in ("pg-1", "pg-3"):
    for label in labels:
        calls = rows = 0
        for line in open(f"{work}/{label}-{name}.claims"):
            c, r = line.split()
            calls, rows = calls + int(c), rows + int(r)
        relay = ", ".join(" / ".join(l.split()) for l in open(f"{work}/{label}-{name}.relay"))
        ms = int(open(f"{work}/{label}-{name}.ms").read()) / starts
        pg = open(f"{work}/{label}-{name}.pg").read().strip()
        pg = "-" if pg == "-" else f"{int(pg) * 1000 / hz / starts:.2f}"
        print(f"| {label} | {name} | {ms:.2f} | {pg} | {calls / starts:.2f} | {rows / starts:.2f} | {(calls - rows) / starts:.2f} | {relay} |")
PY
