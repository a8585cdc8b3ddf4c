#!/usr/bin/env bash
# What one describe costs a PostgreSQL node (docs/performance.md, "A
# describe in one round trip (session 19)"): the SDK client's `get_result`
# describes its workflow by id every 50 ms until it ends, so a workflow
# is described 10-50 times. Each DWSERVER binary given runs in turn, ROUNDS
# times (alternated: the machine's load moves between runs), one node on a
# fresh PostgreSQL database with one open workflow (no worker), which wrk
# describes (`GET /api/workflows/{id}`) over CONNECTIONS connections for
# DURATION seconds. Prints per binary and round: describes/s, CPU µs per describe of
# the node and of PostgreSQL (its postmaster and the processes it forked,
# /proc, when the server runs on this machine), PostgreSQL transactions per
# describe, and, with STRACE=1, the node's writes to PostgreSQL per
# describe (strace -f -yy: one write per command or pipeline sent, each a
# wait for the server; strace slows the node, so describes/s and CPU are
# then not comparable with a run without it).
#
#   DW_BENCH_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/postgres \
#   docs/bench-describes.sh DWSERVER...    # ROUNDS=2 DURATION=10 CONNECTIONS=8 STRACE=1
#
# BENCH_PORT: the node's port (18781). The database (dw_describes_<pid>) is
# dropped at the end.
set -euo pipefail
: "${DW_BENCH_POSTGRES_URL:?set DW_BENCH_POSTGRES_URL to a PostgreSQL server you may create databases on}"
[ "$#" -ge 1 ] || { echo "usage: $0 DWSERVER..." >&2; exit 1; }
rounds=${ROUNDS:-2}
secs=${DURATION:-10}
conns=${CONNECTIONS:-8}
port=${BENCH_PORT:-18781}
for tool in wrk psql curl; do
  command -v "$tool" >/dev/null || { echo "$tool is missing" >&2; exit 1; }
done
pg=$DW_BENCH_POSTGRES_URL
pg_port=$(python3 -c 'import sys, urllib.parse; print(urllib.parse.urlparse(sys.argv[1]).port or 5432)' "$pg")
work=$(mktemp -d)
node=
db=
cleanup() {
  [ -z "$node" ] || { kill "$node" 2>/dev/null || true; wait "$node" 2>/dev/null || true; }
  [ -z "$db" ] || psql -q "$pg" -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
postmaster=
if dir=$(psql -qAt "$pg" -c "SHOW data_directory" 2>/dev/null); then
  postmaster=$(head -1 "$dir/postmaster.pid" 2>/dev/null || true)
fi
postgres_ticks() { # the postmaster and every process it forked, ended ones included
  local total pid
  [ -n "$postmaster" ] && [ -r "/proc/$postmaster/stat" ] || { echo 0; return; }
  total=$(awk '{ print $14 + $15 + $16 + $17 }' "/proc/$postmaster/stat")
  for pid in $(pgrep -P "$postmaster"); do
    total=$((total + $(awk '{ print $14 + $15 }' "/proc/$pid/stat" 2>/dev/null || echo 0)))
  done
  echo "$total"
}
node_ticks() { awk '{ print $14 + $15 }' "/proc/$node/stat"; }
hz=$(getconf CLK_TCK)
echo "| round | dwserver | describes/s | node CPU µs/describe | PostgreSQL CPU µs/describe | transactions/describe | writes to PostgreSQL/describe |"
echo "| --- | --- | --- | --- | --- | --- | --- |"
for round in $(seq "$rounds"); do
  for bin in "$@"; do
    db=dw_describes_$$_$round
    url="${pg%/*}/$db"
    psql -q "$pg" -c "CREATE DATABASE $db" >/dev/null
    DW_SERVER_ID=describes DW_AUTH=none DW_BIND="127.0.0.1:$port" DW_DATABASE_URL="$url" \
      DW_POLLING_CACHE_PATH="$work/cache" "$bin" >"$work/node.log" 2>&1 &
    node=$!
    for _ in $(seq 600); do grep -q '^listening on ' "$work/node.log" && break; sleep 0.1; done
    base=http://127.0.0.1:$port
    curl -sf -o /dev/null -X POST "$base/api/workflows" -H 'content-type: application/json' \
      -d '{"workflow_id":"described","workflow_type":"Bench","task_queue":"describes","input":{"codec":"json","blob":"[1]"}}'
    # Every reader session prepares its statements before the count.
    wrk -t1 -c"$conns" -d2s "$base/api/workflows/described" >/dev/null
    xacts() { psql -qAt "$url" -c "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()"; }
    tracer=
    if [ -n "${STRACE:-}" ]; then
      strace -f -yy -qq -e trace=sendto,write,writev,sendmsg -o "$work/strace.txt" -p "$node" &
      tracer=$!
      sleep 1
    fi
    x0=$(xacts) n0=$(node_ticks) p0=$(postgres_ticks)
    out=$(wrk -t1 -c"$conns" -d"${secs}s" "$base/api/workflows/described")
    n1=$(node_ticks) p1=$(postgres_ticks) x1=$(xacts)
    if [ -n "$tracer" ]; then kill "$tracer"; wait "$tracer" 2>/dev/null || true; fi
    requests=$(awk '/requests in/ { print $1 }' <<<"$out")
    non2xx=$(awk '/Non-2xx/ { print $NF }' <<<"$out")
    [ -z "$non2xx" ] || { echo "$bin: $non2xx answers were not 2xx" >&2; exit 1; }
    writes=-
    [ -z "$tracer" ] || writes=$(grep -c ":$pg_port]>" "$work/strace.txt" || true)
    python3 - "$round" "$bin" "$requests" "$secs" "$hz" "$n0" "$n1" "$p0" "$p1" "$x0" "$x1" "$writes" <<'PY'
import sys
rnd, b, req, secs, hz, n0, n1, p0, p1, x0, x1, writes = sys.argv[1:]
req = int(req)
us = lambda a, z: round((int(z) - int(a)) / int(hz) * 1e6 / req, 1)
# Two of the transactions counted are this script's own reads of the counter.
x = round((int(x1) - int(x0) - 2) / req, 2)
w = "-" if writes == "-" else round(int(writes) / req, 2)
print(f"| {rnd} | {b} | {req / float(secs):,.0f} | {us(n0, n1)} | {us(p0, p1)} | {x} | {w} |")
PY
    kill "$node"; wait "$node" 2>/dev/null || true; node=
    psql -q "$pg" -c "DROP DATABASE $db WITH (FORCE)" >/dev/null; db=
  done
done
