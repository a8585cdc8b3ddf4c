#!/usr/bin/env bash
# Round trips a one-activity workflow costs a node (docs/performance.md,
# "Fewer round trips per step on a cluster node (session 18)"): NODES
# dwserver nodes (1: the in-process cache; 3: one Redis database shared)
# on a fresh PostgreSQL database, one workflow at a time driven over HTTP
# against node 1 by docs/bench-round-trips.py (start, workflow poll and
# completion, activity poll and completion, workflow poll and completion:
# no describes, so the counts do not move with latency). Prints per
# workflow: the time, PostgreSQL transactions (pg_stat_database), and,
# with STRACE=1, the nodes' writes to Redis and to PostgreSQL (strace -f
# -yy of every node thread: one write per command or pipeline sent, each a
# wait for the server), plus statements when pg_stat_statements is
# installed in the server's template1 (shared_preload_libraries).
#
#   DW_BENCH_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/postgres \
#   DW_BENCH_REDIS_URL=redis://127.0.0.1:6379 DWSERVER=target/release/dwserver \
#   STRACE=1 docs/bench-round-trips.sh NODES [WORKFLOWS]
#
# BENCH_PORT: node 1's port (18771; the others the next two); BENCH_REDIS_DB
# (default 11, flushed). The database (dw_trips_<pid>) is dropped at the end.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=docs/bench-lib.sh
. "$root/docs/bench-lib.sh"
: "${DW_BENCH_POSTGRES_URL:?set DW_BENCH_POSTGRES_URL to a PostgreSQL server you may create databases on}"
: "${DWSERVER:?set DWSERVER to a release dwserver}"
nodes=${1:?NODES: 1 or 3}
n=${2:-100}
port=${BENCH_PORT:-18771}
redis_db=${BENCH_REDIS_DB:-11}
[ "$nodes" = 1 ] || [ "$nodes" = 3 ] || { echo "NODES is 1 or 3" >&2; exit 1; }
if [ "$nodes" = 3 ]; then
  : "${DW_BENCH_REDIS_URL:?three nodes need DW_BENCH_REDIS_URL (redis://host:port)}"
  redis=${DW_BENCH_REDIS_URL%/}
  redis_host_port=${redis#redis://}
  redis_cli=(redis-cli -h "${redis_host_port%:*}" -p "${redis_host_port##*:}")
fi
scratch_database dw_trips_$$
[ "$nodes" = 1 ] || "${redis_cli[@]}" -n "$redis_db" flushdb >/dev/null
for i in $(seq "$nodes"); do
  extra=()
  [ "$nodes" = 1 ] || extra=(DW_REDIS_URL="$redis/$redis_db")
  env "${extra[@]}" DW_SERVER_ID="trips-$i" DW_AUTH=none DW_BIND="127.0.0.1:$((port + i - 1))" \
    DW_DATABASE_URL="$url" DW_POLLING_CACHE_PATH="$work/cache-$i" "$DWSERVER" >"$work/node-$i.log" 2>&1 &
  pids+=("$!")
  for _ in $(seq 600); do grep -q '^listening on ' "$work/node-$i.log" && break; sleep 0.1; done
done
base=http://127.0.0.1:$port
python3 "$root/docs/bench-round-trips.py" "$base" 5 >/dev/null # every session prepares its statements
statements() {
  psql -qAt "$url" -c "SELECT COALESCE(sum(calls), 0) FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid \
    WHERE d.datname = current_database() AND query NOT LIKE '%pg_stat%'" 2>/dev/null || echo none
}
psql -qAt "$url" -c "SELECT pg_stat_statements_reset()" >/dev/null 2>&1 || true
xacts() { psql -qAt "$url" -c "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()"; }
before=$(xacts)
if [ -n "${STRACE:-}" ]; then
  attach=()
  for p in "${pids[@]}"; do attach+=(-p "$p"); done
  strace -f -yy -qq -e trace=sendto,write,writev,sendmsg -o "$work/strace.txt" "${attach[@]}" &
  tracer=$!
  sleep 1
fi
timing=$(python3 "$root/docs/bench-round-trips.py" "$base" "$n")
if [ -n "${STRACE:-}" ]; then
  kill "$tracer"
  wait "$tracer" 2>/dev/null || true
fi
after=$(xacts)
stmts=$(statements)
python3 - "$n" "$nodes" "$timing" "$before" "$after" "$stmts" "$work/strace.txt" "${redis_host_port:-}" "$url" <<'PY'
import json, os, sys, urllib.parse
n, nodes, timing, before, after, stmts, trace, redis, url = sys.argv[1:]
n = int(n)
out = json.loads(timing)
# Two of the transactions counted are this script's own reads of the counter.
out["postgres_transactions"] = round((int(after) - int(before) - 2) / n, 2)
if stmts != "none":
    out["postgres_statements"] = round(int(stmts) / n, 1)
if os.path.exists(trace):
    pg = urllib.parse.urlparse(url)
    lines = open(trace).read().splitlines()
    count = lambda port: sum(1 for l in lines if f":{port}]>" in l)
    out["postgres_writes"] = round(count(pg.port or 5432) / n, 2)
    if redis:
        out["redis_writes"] = round(count(redis.rsplit(":", 1)[1]) / n, 2)
print(json.dumps({"nodes": int(nodes), "per_workflow": out}))
PY
