#!/usr/bin/env bash
# Workflow starts per second over HTTP and workflows completed per second
# with the Python SDK, side by side in one run, on three deployments:
#   sqlite-1  one node on a SQLite file (the in-process cache);
#   pg-1      one node on PostgreSQL (a fresh database; the in-process cache);
#   pg-3      three nodes on one PostgreSQL database and one Redis database
#             behind HAProxy, configured by docs/deployment.md's `haproxy ci`
#             block (as .ci/cluster runs it; only its ports are moved to
#             BENCH_PORT.. so a CI run beside it does not collide);
# and, before and after them, the raw SQLite commit rate at the same
# durability (`loadgen raw`: one thread, one 2-row transaction per commit,
# WAL, synchronous=FULL) in the same directory, for the issue's 3x target.
#
#   DW_BENCH_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/postgres \
#   DW_BENCH_REDIS_URL=redis://127.0.0.1:6379 docs/bench-throughput.sh [SECONDS] [CONNECTIONS] [SDK_CONCURRENCY]
#
# Defaults: 10 s per phase, 32 wrk connections, 64 SDK workflows in flight.
# Starts: wrk (apt install wrk) with docs/bench-starts.lua, one request one
# start, with ids of its own. Completed: conformance/bench.py (the published
# `durable-workflow` SDK: one Worker process, one Client keeping
# SDK_CONCURRENCY workflows of one activity in flight, each waiting for its
# result). Each deployment's phases get an empty store of their own
# (SDK_STORE=fresh: its SDK phases another one, not what its starts phase
# left): PostgreSQL databases dw_bench_<pid>_<deployment> (dropped at the
# end), Redis database BENCH_REDIS_DB (default 14, flushed). Also printed: the
# dwserver processes' CPU per start and per completed workflow (/proc),
# and, when the PostgreSQL server runs on this machine, its CPU per start
# (its postmaster and the processes it forked, /proc).
# SDKS="python rust" adds a phase with the published Rust SDK after the
# Python one on each deployment (conformance/rust/src/bin/bench.rs: two
# worker processes of RUST_WORKER_SLOTS slots, default 8, and a starter
# keeping SDK_CONCURRENCY workflows of one activity in flight; all three
# talk to the deployment's URL, so on pg-3 through the balancer), printed
# as a table of its own with PostgreSQL's CPU per workflow beside the nodes'.
# DWSERVER/LOADGEN name built release binaries (default: built here);
# DW_CONFORMANCE_VENV the Python SDK's venv (default target/conformance-venv);
# DW_CONFORMANCE_RUST_TARGET_DIR where the Rust SDK's bench is built
# (default target/conformance-rust);
# BENCH_PORT the balancer's port, the nodes take the next three (18580).
# RESULT_POLL_MS: how often each SDK client reads its workflow's result
# (default 50; the SDKs' own default is 500, a tenth of the describes).
# Before each deployment, what the earlier ones left to write is settled
# (docs/bench-lib.sh's settle_writes: `sync`, then `CHECKPOINT`), so none
# of it is flushed in the middle of another's phases; SETTLE_WRITES=off
# leaves it to the kernel's and PostgreSQL's own timers.
# STATEMENTS=1 (a server that preloads pg_stat_statements) also prints, per
# PostgreSQL deployment, the Rust SDK phase's most called statements, the
# indexes its scans read most entries of, and the tables it updated with
# how many of the updates were heap-only.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
# shellcheck source=docs/bench-lib.sh
. "$root/docs/bench-lib.sh"
: "${DW_BENCH_POSTGRES_URL:?set DW_BENCH_POSTGRES_URL to a PostgreSQL server you may create databases on}"
: "${DW_BENCH_REDIS_URL:?set DW_BENCH_REDIS_URL to a redis-server (redis://host:port)}"
secs=${1:-10}
conns=${2:-32}
concurrency=${3:-64}
port=${BENCH_PORT:-18580}
redis_db=${BENCH_REDIS_DB:-14}
venv=${DW_CONFORMANCE_VENV:-target/conformance-venv}
sdks=${SDKS:-python}
rust_slots=${RUST_WORKER_SLOTS:-8}
result_poll_ms=${RESULT_POLL_MS:-50}
sdk_store=${SDK_STORE:-shared}
case "$sdk_store" in fresh|shared) ;; *) echo "SDK_STORE is fresh or shared, not $sdk_store" >&2; exit 2 ;; esac
[ "$((port % 10))" = 0 ] || { echo "BENCH_PORT must end in 0 (the nodes take the next three)" >&2; exit 1; }
for tool in wrk haproxy psql redis-cli sqlite3 python3; do
  command -v "$tool" >/dev/null || { echo "$tool is missing" >&2; exit 1; }
done
[ -x "$venv/bin/python" ] || { echo "no Python SDK venv at $venv (conformance/run makes one; or set DW_CONFORMANCE_VENV)" >&2; exit 1; }
venv_python="$(cd "$venv" && pwd)/bin/python"
target=${CARGO_TARGET_DIR:-$root/target}
if [ -z "${DWSERVER:-}" ] || [ -z "${LOADGEN:-}" ]; then
  cargo build --release --locked -q -p dwengine --bin dwserver --example loadgen
fi
dwserver=$(realpath "${DWSERVER:-$target/release/dwserver}")
loadgen=$(realpath "${LOADGEN:-$target/release/examples/loadgen}")
rust_bench=
for sdk in $sdks; do
  case "$sdk" in
    python) ;;
    rust)
      rust_target=${DW_CONFORMANCE_RUST_TARGET_DIR:-$root/target/conformance-rust}
      CARGO_TARGET_DIR="$rust_target" cargo build --release --locked -q \
        --manifest-path "$root/conformance/rust/Cargo.toml" --bin bench
      rust_bench="$rust_target/release/bench"
      ;;
    *) echo "unknown SDK $sdk in SDKS (python, rust)" >&2; exit 2 ;;
  esac
done

work=$(mktemp -d)
node_pids=()
rust_worker_pids=()
haproxy_pid=
databases=()
stop_rust_workers() {
  for pid in "${rust_worker_pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${rust_worker_pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  rust_worker_pids=()
}
stop_nodes() {
  [ -z "$haproxy_pid" ] || { kill "$haproxy_pid" 2>/dev/null || true; wait "$haproxy_pid" 2>/dev/null || true; }
  haproxy_pid=
  for pid in "${node_pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${node_pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  node_pids=()
}
cleanup() {
  stop_rust_workers
  stop_nodes
  for db in "${databases[@]}"; do
    psql -q "$DW_BENCH_POSTGRES_URL" -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1 || true
  done
  rm -rf "$work"
}
trap cleanup EXIT
redis_host_port=${DW_BENCH_REDIS_URL#redis://}
redis_host_port=${redis_host_port%/}

# start_node N PORT [ENV=VALUE...]: a release dwserver in the background.
start_node() {
  local n=$1 bind=$2
  shift 2
  env "$@" DW_SERVER_ID="bench-$n" DW_AUTH=none DW_BIND="127.0.0.1:$bind" \
    DW_POLLING_CACHE_PATH="$work/cache-$n" "$dwserver" >"$work/node-$n.log" 2>&1 &
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

# fresh_database NAME: a new empty database, its URL in $url. Not run in a
# $(...) subshell: the name must reach `databases` here, for cleanup to drop it.
fresh_database() {
  databases+=("$1")
  psql -q "$DW_BENCH_POSTGRES_URL" -c "DROP DATABASE IF EXISTS $1" -c "CREATE DATABASE $1" >/dev/null
  url="${DW_BENCH_POSTGRES_URL%/*}/$1"
}

cpu_ticks() { # the nodes' user + system ticks so far
  local total=0 pid
  for pid in "${node_pids[@]}"; do
    total=$((total + $(awk '{print $14 + $15}' "/proc/$pid/stat")))
  done
  echo "$total"
}


# table_stats DATABASE: per index, its scans and the entries they read;
# per table, its updates and how many were heap-only (HOT); so far, as
# far as the servers' sessions have reported them (each at most a second
# late while it is busy): the Rust SDK phase's are the difference.
table_stats() {
  psql -qAt -F ' ' "${DW_BENCH_POSTGRES_URL%/*}/$1" \
    -c "SELECT 'index', indexrelname, idx_scan, idx_tup_read FROM pg_stat_user_indexes" \
    -c "SELECT 'table', relname, n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables" 2>/dev/null || true
}

# statements DATABASE: the statements PostgreSQL ran in DATABASE so far
# (pg_stat_statements, when the server preloads it; "-" otherwise).
statements() {
  psql -qAt "${DW_BENCH_POSTGRES_URL%/*}/$1" -c "CREATE EXTENSION IF NOT EXISTS pg_stat_statements" \
    -c "SELECT COALESCE(SUM(calls), 0) FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())" \
    2>/dev/null || echo -
}

# deploy NAME: settles what earlier phases left to write, gives deployment
# NAME (sqlite-1, pg-1, pg-3) an empty store and starts its nodes (and, for
# pg-3, the balancer); sets $base (its URL), $runs (a command printing the
# runs its store holds) and $database (its PostgreSQL database, or empty).
deploy() {
  settle_writes
  rm -rf "$work"/cache-*
  case "$1" in
    sqlite-1)
      rm -f "$work"/runs.sqlite*
      start_node 1 $((port + 1)) DW_DATABASE_PATH="$work/runs.sqlite"
      base="http://127.0.0.1:$((port + 1))" database=
      runs="sqlite3 '$work/runs.sqlite' 'SELECT COUNT(*) FROM runs'"
      ;;
    pg-1)
      database="dw_bench_$$_pg1"
      fresh_database "$database"
      start_node 1 $((port + 1)) DW_DATABASE_URL="$url"
      base="http://127.0.0.1:$((port + 1))"
      ;;
    pg-3)
      # Three PostgreSQL nodes on one Redis behind HAProxy, as documented.
      database="dw_bench_$$_pg3"
      fresh_database "$database"
      redis-cli -h "${redis_host_port%:*}" -p "${redis_host_port##*:}" -n "$redis_db" flushdb >/dev/null
      documented_haproxy "$port" >"$work/haproxy.cfg"
      haproxy -c -q -f "$work/haproxy.cfg"
      for n in 1 2 3; do
        start_node "$n" $((port + n)) DW_DATABASE_URL="$url" DW_REDIS_URL="${DW_BENCH_REDIS_URL%/}/$redis_db"
      done
      haproxy -f "$work/haproxy.cfg" -db >"$work/haproxy.log" 2>&1 &
      haproxy_pid=$!
      for _ in $(seq 300); do
        [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/api/ready")" = 200 ] && break
        sleep 0.2
      done
      base="http://127.0.0.1:$port"
      ;;
  esac
  [ -z "$database" ] || runs="psql -qAt '$url' -c 'SELECT COUNT(*) FROM runs'"
  curl -sf -X POST "$base/api/namespaces" -H 'Content-Type: application/json' \
    -d '{"name":"bench"}' >/dev/null
}

# measure_starts NAME: the starts phase on the deployment `deploy` started.
measure_starts() {
  local name=$1 before after s0=- s1=- p0=- p1=-
  [ -z "$database" ] || s0=$(statements "$database")
  [ -z "$database" ] || p0=$(pg_ticks)
  before=$(cpu_ticks)
  wrk -t2 -c"$conns" -d"${secs}s" --latency -s "$root/docs/bench-starts.lua" "$base" >"$work/$name.wrk"
  after=$(cpu_ticks)
  [ -z "$database" ] || p1=$(pg_ticks)
  [ -z "$database" ] || s1=$(statements "$database")
  if [ "$p0" != - ] && [ "$p1" != - ]; then echo "$((p1 - p0))" >"$work/$name.pg-cpu"; fi
  echo "$((after - before))" >"$work/$name.starts-cpu"
  # Starts in flight when wrk stopped have landed by now (or never will).
  sleep 1
  eval "$runs" >"$work/$name.runs"
  if [ "$s0" != - ] && [ "$s1" != - ]; then echo "$((s1 - s0))" >"$work/$name.statements"; fi
}

# measure_sdks NAME: the SDK phases (Python, then Rust) on the deployment
# `deploy` started.
measure_sdks() {
  local name=$1 before after s0=- s1=- p0=- p1=-
  case " $sdks " in
    *" python "*)
      before=$(cpu_ticks)
      (cd conformance && "$venv_python" bench.py "$base" --concurrency "$concurrency" \
        --seconds "$secs" --poll-interval-ms "$result_poll_ms") >"$work/$name.sdk" 2>"$work/$name.sdk-err" ||
        { cat "$work/$name.sdk-err" >&2; echo "$name: the SDK phase failed" >&2; exit 1; }
      after=$(cpu_ticks)
      echo "$((after - before))" >"$work/$name.sdk-cpu"
      ;;
  esac
  if [ -n "$rust_bench" ]; then
    local i
    for i in 1 2; do
      "$rust_bench" "$base" --role worker --worker-slots "$rust_slots" 2>"$work/$name.rust-worker-$i.err" &
      rust_worker_pids+=("$!")
    done
    if [ -n "$database" ] && [ -n "${STATEMENTS:-}" ]; then
      # The list printed at the end is this phase's alone.
      psql -qAt "${DW_BENCH_POSTGRES_URL%/*}/$database" -c "SELECT pg_stat_statements_reset()" >/dev/null 2>&1 || true
    fi
    [ -z "$database" ] || s0=$(statements "$database")
    [ -z "$database" ] || p0=$(pg_ticks)
    if [ -n "$database" ] && [ -n "${STATEMENTS:-}" ]; then table_stats "$database" >"$work/$name.rust-tables-0"; fi
    before=$(cpu_ticks)
    "$rust_bench" "$base" --role starter --shape activity --concurrency "$concurrency" \
      --seconds "$secs" --poll-interval-ms "$result_poll_ms" --worker-slots "$rust_slots" \
      --worker-pids "$(IFS=,; echo "${rust_worker_pids[*]}")" >"$work/$name.rust" 2>"$work/$name.rust-err" ||
      { cat "$work/$name.rust-err" "$work/$name".rust-worker-*.err >&2; echo "$name: the Rust SDK phase failed" >&2; exit 1; }
    after=$(cpu_ticks)
    [ -z "$database" ] || p1=$(pg_ticks)
    [ -z "$database" ] || s1=$(statements "$database")
    if [ "$s0" != - ] && [ "$s1" != - ]; then echo "$((s1 - s0))" >"$work/$name.rust-statements"; fi
    if [ -n "$database" ] && [ -n "${STATEMENTS:-}" ]; then
      # The phase's statements, most called first, with their execution
      # time (a lock function's is its wait): compare two deployments'.
      psql -qAt -F ' | ' "${DW_BENCH_POSTGRES_URL%/*}/$database" -c "SELECT calls, round(total_exec_time::numeric, 1), left(regexp_replace(query, '\s+', ' ', 'g'), 140) FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) ORDER BY calls DESC LIMIT 30" >"$work/$name.rust-top" 2>&1 || true
      table_stats "$database" >"$work/$name.rust-tables-1"
    fi
    stop_rust_workers
    echo "$((after - before))" >"$work/$name.rust-cpu"
    if [ "$p0" != - ] && [ "$p1" != - ]; then echo "$((p1 - p0))" >"$work/$name.rust-pg-cpu"; fi
  fi
  echo "$name: done" >&2
}

half=$(((secs + 1) / 2))
"$loadgen" raw --dir "$work" --seconds "$half" >"$work/raw-before"

# Each deployment's starts phase, then its SDK phases on what the starts
# phase left: runs that grow with the deployment's start rate (each with a
# workflow task nobody polls), and tables PostgreSQL has analyzed.
# SDK_STORE=fresh gives the SDK phases an empty store instead: no rows
# left, but plans made before PostgreSQL has any statistics
# (docs/performance.md, session 35, measures both).
for name in sqlite-1 pg-1 pg-3; do
  deploy "$name"
  measure_starts "$name"
  if [ "$sdk_store" = fresh ]; then
    stop_nodes
    deploy "$name"
  fi
  measure_sdks "$name"
  stop_nodes
done

"$loadgen" raw --dir "$work" --seconds "$half" >"$work/raw-after"
"$dwserver" --version 2>/dev/null || true
python3 - "$work" "$secs" "$(getconf CLK_TCK)" "$conns" "$concurrency" "$sdks" "$result_poll_ms" <<'PY'
import json, re, sys
work, secs, hz, conns, concurrency, sdks = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6].split()
result_poll = f"result read every {sys.argv[7]} ms"
read = lambda name: open(f"{work}/{name}").read()
rb, ra = float(read("raw-before")), float(read("raw-after"))
raw = (rb + ra) / 2
print(f"raw SQLite, 1 thread, 2-row tx per commit, WAL, synchronous=FULL: {raw:.0f} commits/s (before {rb:.0f}, after {ra:.0f})")
print(f"starts: wrk, {conns} connections, {secs} s" + (f"; completed: Python SDK, {concurrency} in flight, {result_poll}, {secs} s" if "python" in sdks else ""))
print("| deployment | starts/s | p50 | p99 | non-2xx | runs stored / answered | statements per start | CPU ms/start (nodes) | CPU ms/start (PostgreSQL) | starts / raw | completed/s | SDK start p50 | p99 | CPU ms/workflow (nodes) |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for name in ("sqlite-1", "pg-1", "pg-3"):
    wrk = read(f"{name}.wrk")
    rate = float(re.search(r"Requests/sec:\s*([\d.]+)", wrk).group(1))
    lat = dict(re.findall(r"^\s*(50|99)%\s+(\S+)", wrk, re.M))
    bad = re.search(r"Non-2xx or 3xx responses:\s*(\d+)", wrk)
    answered = int(re.search(r"(\d+) requests in", wrk).group(1))
    stored = int(read(f"{name}.runs").strip() or 0)
    try:
        per_start = f"{int(read(f'{name}.statements')) / max(1, stored):.1f}"
    except FileNotFoundError:
        per_start = "-"
    cpu = int(read(f"{name}.starts-cpu")) / hz
    try:
        pg_cpu = f"{1000 * int(read(f'{name}.pg-cpu')) / hz / max(1, rate * secs):.3f}"
    except FileNotFoundError:
        pg_cpu = "-"
    if "python" in sdks:
        sdk = json.loads(read(f"{name}.sdk").strip().splitlines()[-1])
        sdk_cpu = int(read(f"{name}.sdk-cpu")) / hz
        done = sdk["completed"]
        completed = (f"{sdk['workflows_completed_per_second']:,.1f} | {sdk['start_latency_ms_p50']} ms "
                     f"| {sdk['start_latency_ms_p99']} ms | {1000 * sdk_cpu / max(1, done):.2f}")
    else:
        completed = "- | - | - | -"
    print(f"| {name} | {rate:,.0f} | {lat.get('50', '?')} | {lat.get('99', '?')} | {bad.group(1) if bad else 0} "
          f"| {stored:,} / {answered:,} | {per_start} "
          f"| {1000 * cpu / max(1, rate * secs):.3f} | {pg_cpu} | {rate / raw:.2f} | {completed} |")
if "rust" in sdks:
    print(f"completed: Rust SDK (two worker processes and a starter), {concurrency} in flight, one activity each, {result_poll}, {secs} s")
    print("| deployment | completed/s | start p50 | p99 | CPU ms/workflow: nodes | PostgreSQL | SDK processes | statements/workflow |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for name in ("sqlite-1", "pg-1", "pg-3"):
        sdk = json.loads(read(f"{name}.rust").strip().splitlines()[-1])
        done = max(1, sdk["completed"])
        nodes = int(read(f"{name}.rust-cpu")) / hz
        try:
            pg = f"{1000 * int(read(f'{name}.rust-pg-cpu')) / hz / done:.2f}"
        except FileNotFoundError:
            pg = "-"
        try:
            statements = f"{int(read(f'{name}.rust-statements')) / done:.0f}"
        except FileNotFoundError:
            statements = "-"
        print(f"| {name} | {sdk['workflows_completed_per_second']:,.1f} | {sdk['start_latency_ms_p50']} ms "
              f"| {sdk['start_latency_ms_p99']} ms | {1000 * nodes / done:.2f} | {pg} | {sdk['sdk_cpu_ms_per_workflow']} | {statements} |")
    for name in ("pg-1", "pg-3"):
        try:
            top = read(f"{name}.rust-top")
        except FileNotFoundError:
            continue
        print(f"{name}: the Rust SDK phase's statements: calls | execution ms in all | statement")
        print(top)
    for name in ("pg-1", "pg-3"):
        try:
            tables = [read(f"{name}.rust-tables-{i}") for i in (0, 1)]
        except FileNotFoundError:
            continue
        def parse(text):
            rows = {}
            for line in text.splitlines():
                kind, rel, a, b = line.split(" ")
                rows[(kind, rel)] = (int(a), int(b))
            return rows
        first, last = (parse(t) for t in tables)
        moved = {k: (v[0] - first.get(k, (0, 0))[0], v[1] - first.get(k, (0, 0))[1]) for k, v in last.items()}
        indexes = sorted(((v[1], v[0], k[1]) for k, v in moved.items() if k[0] == "index" and v[0] > 0), reverse=True)[:8]
        print(f"{name}: the Rust SDK phase's index reads (most first): index | scans | entries read | per scan")
        for read_, scans, index in indexes:
            print(f"{index} | {scans} | {read_} | {read_ / scans:.1f}")
        updated = sorted(((v[0], v[1], k[1]) for k, v in moved.items() if k[0] == "table" and v[0] > 0), reverse=True)[:6]
        print(f"{name}: the Rust SDK phase's updates: table | updates | heap-only")
        for n, hot, table in updated:
            print(f"{table} | {n} | {hot}")
PY
