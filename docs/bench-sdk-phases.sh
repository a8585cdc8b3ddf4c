#!/usr/bin/env bash
# Where a Rust SDK workflow's time goes, step by step, on one PostgreSQL
# node or three (docs/performance.md, "A workflow's steps on one node and
# on three (session 32)"). The Rust SDK phase of docs/bench-throughput.sh
# (two worker processes of RUST_WORKER_SLOTS slots, a starter keeping
# CONCURRENCY one-activity workflows in flight, each reading its result
# every RESULT_POLL_MS) on a fresh database, behind HAProxy in both cases
# (the `haproxy ci` block, with one server or three), so that every
# request is timed alike. Printed:
#   - per step of a workflow, from the store's own timestamps
#     (`dispatch_tasks.created_at_ms` and `attempt_started_at_ms`, the
#     history events' `recorded_at_ms`): how long its task waited in the
#     queue for a poll, and how long it was held (from its lease to the
#     event its completion recorded);
#   - per route, HAProxy's active time of a request (p50, p90, mean);
#   - CPU per completed workflow of the nodes, HAProxy, PostgreSQL (its
#     postmaster and children, when it runs here), redis-server (when it
#     runs here) and the SDK's processes, and how many of the machine's
#     cores were busy (/proc/stat);
#   - with pg_stat_statements loaded, the statements PostgreSQL spent
#     most time in (a lock function's time is its wait), how many
#     statements a completed workflow took, and with MOST_CALLED=N the N
#     statements called most, per completed workflow (compare two
#     configurations' lists to see what one of them adds).
#
#   DW_BENCH_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/postgres \
#   DW_BENCH_REDIS_URL=redis://127.0.0.1:6379 docs/bench-sdk-phases.sh NODES [SECONDS] [CONCURRENCY]
#
# NODES is 1 or 3. BALANCER=off (with one node) sends the SDK to the node
# itself, as docs/bench-throughput.sh's pg-1 does; ACTIVE_NODES=1 (with
# three) marks nodes 2 and 3 `backup` in HAProxy, so every request goes
# to node 1 while all three run on the shared Redis: the cluster's cost
# without any spreading of requests over nodes. STARTS_FIRST=SECONDS runs
# docs/bench-throughput.sh's starts phase (wrk, docs/bench-starts.lua, 32
# connections) that long before the SDK's, as that script does (its
# runs stay open on another namespace's queue); PYTHON_FIRST=SECONDS then
# runs its Python SDK phase (conformance/bench.py, CONCURRENCY in flight,
# the venv DW_CONFORMANCE_VENV names) that long, as that script does
# before the Rust SDK's. WARM_FIRST=SECONDS runs the Rust SDK's workflows
# that long before the measured phase, then `ANALYZE`s the database: the
# measured phase runs on plans made with statistics of real rows, as a
# deployment's do after its first minute, without a starts phase's
# leftovers. The nodes inherit this script's environment (for
# example DW_STORE_RUN_WRITER=on). PREPARE_SQL names a file of SQL run on
# the database once the nodes made its schema, before the workflows start
# (an experiment's change to the schema; docs/performance.md's session 32
# dropped the counter triggers this way to find what they cost).
# DWSERVER a release dwserver (default: built here);
# DW_CONFORMANCE_RUST_TARGET_DIR where the Rust SDK's bench is built
# (default target/conformance-rust); BENCH_PORT the balancer's port, the
# nodes on the next three (default 18780); BENCH_REDIS_DB (default 12,
# flushed). The database it makes (dw_sdk_phases_<pid>) is dropped at the
# end.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=docs/bench-lib.sh
. "$root/docs/bench-lib.sh"
: "${DW_BENCH_POSTGRES_URL:?set DW_BENCH_POSTGRES_URL to a PostgreSQL server you may create databases on}"
: "${DW_BENCH_REDIS_URL:?set DW_BENCH_REDIS_URL to a redis-server (redis://host:port)}"
nodes=${1:?NODES: 1 or 3}
secs=${2:-15}
concurrency=${3:-64}
case $nodes in 1 | 3) ;; *) echo "NODES is 1 or 3" >&2; exit 1 ;; esac
balancer=${BALANCER:-on}
case $balancer/$nodes in on/* | off/1) ;; *) echo "BALANCER is on, or off with one node" >&2; exit 1 ;; esac
active=${ACTIVE_NODES:-$nodes}
case $active/$nodes in 1/1 | 1/3 | 3/3) ;; *) echo "ACTIVE_NODES is 1, or 3 with three nodes" >&2; exit 1 ;; esac
port=${BENCH_PORT:-18780}
redis_db=${BENCH_REDIS_DB:-12}
slots=${RUST_WORKER_SLOTS:-8}
result_poll_ms=${RESULT_POLL_MS:-50}
queue=rust-bench
[ "$((port % 10))" = 0 ] || { echo "BENCH_PORT must end in 0 (the nodes take the next three)" >&2; exit 1; }
for tool in haproxy psql redis-cli python3 ${STARTS_FIRST:+wrk}; do
  command -v "$tool" >/dev/null || { echo "$tool is missing" >&2; exit 1; }
done
if [ -n "${PYTHON_FIRST:-}" ]; then
  venv=${DW_CONFORMANCE_VENV:-$root/target/conformance-venv}
  [ -x "$venv/bin/python" ] || { echo "PYTHON_FIRST: no Python SDK venv at $venv (conformance/run makes one; or set DW_CONFORMANCE_VENV)" >&2; exit 1; }
fi
if [ -n "${PREPARE_SQL:-}" ] && [ ! -r "$PREPARE_SQL" ]; then
  echo "PREPARE_SQL names no readable file: $PREPARE_SQL" >&2
  exit 1
fi
target=${CARGO_TARGET_DIR:-$root/target}
if [ -z "${DWSERVER:-}" ]; then
  (cd "$root" && cargo build --release --locked -q -p dwengine --bin dwserver)
fi
dwserver=$(realpath "${DWSERVER:-$target/release/dwserver}")
rust_target=${DW_CONFORMANCE_RUST_TARGET_DIR:-$root/target/conformance-rust}
CARGO_TARGET_DIR="$rust_target" cargo build --release --locked -q \
  --manifest-path "$root/conformance/rust/Cargo.toml" --bin bench
bench="$rust_target/release/bench"
redis=${DW_BENCH_REDIS_URL%/}
redis_host_port=${redis#redis://}

scratch_database dw_sdk_phases_$$
redis-cli -h "${redis_host_port%:*}" -p "${redis_host_port##*:}" -n "$redis_db" flushdb >/dev/null

for n in $(seq "$nodes"); do
  extra=()
  [ "$nodes" = 1 ] || extra=(DW_REDIS_URL="$redis/$redis_db")
  env "${extra[@]}" DW_SERVER_ID="sdk-phases-$n" DW_AUTH=none DW_BIND="127.0.0.1:$((port + n))" \
    DW_DATABASE_URL="$url" DW_POLLING_CACHE_PATH="$work/cache-$n" "$dwserver" >"$work/node-$n.log" 2>&1 &
  pids+=("$!")
  echo "$!" >>"$work/node.pids"
  for _ in $(seq 600); do grep -qs '^listening on ' "$work/node-$n.log" && break; sleep 0.1; done
  grep -qs '^listening on ' "$work/node-$n.log" || { cat "$work/node-$n.log" >&2; echo "node $n did not start" >&2; exit 1; }
done
# The documented block, its ports moved, every request logged with its
# active time (%Ta).
documented_haproxy "$port" |
  sed -e 's/^global$/global\n    log stdout format raw local0/' \
    -e 's/^defaults$/defaults\n    log global\n    log-format "%HM %HU %Ta"/' >"$work/haproxy.cfg"
[ "$nodes" = 3 ] || sed -i '/server node-[23] /d' "$work/haproxy.cfg"
[ "$active" = "$nodes" ] || sed -i -E 's/^( *server node-[23] .*)$/\1 backup/' "$work/haproxy.cfg"
haproxy_pid=
base=http://127.0.0.1:$((port + 1))
: >"$work/haproxy.log"
if [ "$balancer" = on ]; then
  haproxy -f "$work/haproxy.cfg" -db >"$work/haproxy.log" 2>&1 &
  pids+=("$!")
  haproxy_pid=$!
  base=http://127.0.0.1:$port
fi
for _ in $(seq 300); do
  [ "$(curl -s -o /dev/null -w '%{http_code}' "$base/api/ready")" = 200 ] && break
  sleep 0.2
done
[ -z "${PREPARE_SQL:-}" ] || psql -q -v ON_ERROR_STOP=1 "$url" -f "$PREPARE_SQL"
curl -sf -X POST "$base/api/namespaces" -H 'Content-Type: application/json' -d '{"name":"bench"}' >/dev/null
if [ -n "${STARTS_FIRST:-}" ]; then
  wrk -t2 -c32 -d"${STARTS_FIRST}s" -s "$root/docs/bench-starts.lua" "$base" >"$work/starts.wrk"
  echo "starts first: $(awk '/Requests\/sec/ { print $2 }' "$work/starts.wrk") starts/s for $STARTS_FIRST s" >"$work/starts"
fi
if [ -n "${PYTHON_FIRST:-}" ]; then
  (cd "$root/conformance" && "$venv/bin/python" bench.py "$base" --concurrency "$concurrency" \
    --seconds "$PYTHON_FIRST" --poll-interval-ms "$result_poll_ms") >"$work/python.json" 2>"$work/python.err" ||
    { cat "$work/python.err" >&2; echo "the Python SDK phase failed" >&2; exit 1; }
fi
settle_writes
workers=()
for i in 1 2; do
  "$bench" "$base" --role worker --queue "$queue" --worker-slots "$slots" 2>"$work/worker-$i.err" &
  pids+=("$!")
  workers+=("$!")
done
# starter SECONDS NAME: the SDK's starter for SECONDS against the workers,
# its JSON line in $work/NAME.json.
starter() {
  "$bench" "$base" --role starter --queue "$queue" --shape activity --concurrency "$concurrency" --seconds "$1" \
    --poll-interval-ms "$result_poll_ms" --worker-slots "$slots" \
    --worker-pids "$(IFS=,; echo "${workers[*]}")" >"$work/$2.json" 2>"$work/$2.err" ||
    { cat "$work/$2.err" "$work"/worker-*.err >&2; echo "the SDK run ($2) failed" >&2; exit 1; }
}
if [ -n "${WARM_FIRST:-}" ]; then
  starter "$WARM_FIRST" warm
  psql -q "$url" -c ANALYZE
  settle_writes
fi
statements=
if psql -q "$url" -c "CREATE EXTENSION IF NOT EXISTS pg_stat_statements" -c "SELECT pg_stat_statements_reset()" >/dev/null 2>&1; then
  statements=1
fi
redis_pid=$(redis-cli -h "${redis_host_port%:*}" -p "${redis_host_port##*:}" info server |
  awk -F: '/^process_id:/ { print $2 }' | tr -d '\r')
ticks() { # PID...: their user + system ticks so far
  local total=0 pid
  for pid in "$@"; do
    [ -r "/proc/$pid/stat" ] && total=$((total + $(awk '{ print $14 + $15 }' "/proc/$pid/stat")))
  done
  echo "$total"
}
snapshot() { # nodes haproxy postgres redis busy idle (ticks)
  local redis_ticks=-
  [ -z "$redis_pid" ] || [ ! -r "/proc/$redis_pid/stat" ] || redis_ticks=$(ticks "$redis_pid")
  local haproxy_ticks=-
  [ -z "$haproxy_pid" ] || haproxy_ticks=$(ticks "$haproxy_pid")
  echo "$(ticks $(cat "$work/node.pids")) $haproxy_ticks $(pg_ticks) $redis_ticks" \
    "$(awk '/^cpu / { print $2 + $3 + $4 + $7 + $8, $5 + $6 }' /proc/stat)"
}
snapshot >"$work/cpu-before"
starter "$secs" sdk
snapshot >"$work/cpu-after"
if [ -n "$statements" ]; then
  psql -qAt -F $'\t' "$url" -c "SELECT calls, total_exec_time, left(regexp_replace(query, '\s+', ' ', 'g'), 100)
    FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
    ORDER BY calls DESC" >"$work/calls"
fi
# The Rust SDK's runs alone (its queue): not the earlier phases'.
psql -qAt -F $'\t' "$url" -c "SELECT e.run_id, e.event_type, e.recorded_at_ms FROM history_events e
  JOIN runs r ON r.id = e.run_id WHERE r.task_queue = '$queue'" >"$work/events"
psql -qAt -F $'\t' "$url" -c "SELECT d.run_id, d.kind, d.id, d.created_at_ms, d.attempt_started_at_ms FROM dispatch_tasks d
  JOIN runs r ON r.id = d.run_id WHERE d.kind IN ('workflow', 'activity') AND r.task_queue = '$queue'" >"$work/tasks"
python3 - "$work" "$nodes" "$(getconf CLK_TCK)" "$balancer" "$active" "${MOST_CALLED:-0}" <<'PY'
import collections, json, statistics, sys
work, nodes, hz, balancer, active = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
most_called = int(sys.argv[6])
sdk = json.loads(open(f"{work}/sdk.json").read().strip().splitlines()[-1])
shape = "no balancer" if balancer == "off" else f"{active} active behind HAProxy"
if __import__("os").path.exists(f"{work}/starts"):
    print(open(f"{work}/starts").read().strip())
if __import__("os").path.exists(f"{work}/python.json"):
    python = json.loads(open(f"{work}/python.json").read().strip().splitlines()[-1])
    print(f"Python SDK first: {python['workflows_completed_per_second']} workflows/s for {python['seconds']} s")
print(f"{nodes} node(s), {shape}: {sdk['workflows_completed_per_second']} workflows/s, {sdk['completed']} completed, "
      f"{sdk['concurrency']} in flight, {sdk['seconds']} s, start p50 {sdk['start_latency_ms_p50']} ms")
before, after = (open(f"{work}/cpu-{w}").read().split() for w in ("before", "after"))
done = max(1, sdk["completed"])
def per_workflow(i):
    if "-" in (before[i], after[i]):
        return "-"
    return f"{1000 * (int(after[i]) - int(before[i])) / hz / done:.2f}"
busy, idle = (int(after[i]) - int(before[i]) for i in (4, 5))
print(f"CPU ms per completed workflow: nodes {per_workflow(0)}, HAProxy {per_workflow(1)}, "
      f"PostgreSQL {per_workflow(2)}, Redis {per_workflow(3)}, SDK {sdk['sdk_cpu_ms_per_workflow']}; "
      f"the machine's cores busy {(busy / max(1, busy + idle)) * (__import__('os').cpu_count() or 1):.2f}")
events = collections.defaultdict(dict)
for line in open(f"{work}/events"):
    run, kind, at = line.rstrip("\n").split("\t")
    events[run][kind] = int(at) if at else None
tasks = collections.defaultdict(list)
for line in open(f"{work}/tasks"):
    run, kind, task, created, leased = line.rstrip("\n").split("\t")
    tasks[run].append((int(task), kind, int(created), int(leased) if leased else None))
# The SDK's workflows complete; the starts phase's (STARTS_FIRST) stay open.
first = min(e["WorkflowStarted"] for e in events.values() if e.get("WorkflowStarted") and "WorkflowCompleted" in e)
steps = collections.defaultdict(list)
for run, e in events.items():
    # The first 3 s warm up; a workflow that did not finish has no last step.
    if None in e.values() or e.get("WorkflowStarted", first) - first < 3000 or "WorkflowCompleted" not in e:
        continue
    flows = sorted(t for t in tasks[run] if t[1] == "workflow")
    acts = [t for t in tasks[run] if t[1] == "activity"]
    if len(flows) != 2 or len(acts) != 1 or any(t[3] is None for t in flows + acts):
        continue
    for name, (_, _, created, leased), ended in (
        ("first workflow task", flows[0], e["ActivityScheduled"]),
        ("activity task", acts[0], e["ActivityCompleted"]),
        ("last workflow task", flows[1], e["WorkflowCompleted"]),
    ):
        steps[f"{name}: queued"].append(leased - created)
        steps[f"{name}: held"].append(ended - leased)
def row(name, v):
    v = sorted(v)
    return f"| {name} | {len(v)} | {v[len(v) // 2]} | {v[int(len(v) * 0.9)]} | {statistics.fmean(v):.1f} |"
print("| step (store timestamps, ms) | workflows | p50 | p90 | mean |")
print("| --- | --- | --- | --- | --- |")
for name, v in steps.items():
    print(row(name, v))
routes = collections.defaultdict(list)
for line in open(f"{work}/haproxy.log"):
    parts = line.split()
    if len(parts) != 3 or not parts[2].isdigit():
        continue
    path = parts[1].split("?")[0]
    if path.startswith("/api/workflows/"):
        path = "/api/workflows/{id}"
    elif "-tasks/" in path and not path.endswith("/poll"):
        path = path.rsplit("/", 2)[0] + "/{id}/" + path.rsplit("/", 1)[1]
    routes[f"{parts[0]} {path}"].append(int(parts[2]))
if routes:
    print("| route (HAProxy's active time, ms) | requests | p50 | p90 | mean |")
    print("| --- | --- | --- | --- | --- |")
    for name, v in sorted(routes.items(), key=lambda kv: -len(kv[1]))[:6]:
        print(row(name, v))
try:
    calls = [line.split("\t", 2) for line in open(f"{work}/calls").read().splitlines()]
except FileNotFoundError:
    calls = []
if calls:
    done = max(1, sdk["completed"])
    print("| statement (most time first) | calls | ms per completed workflow | mean ms |")
    print("| --- | --- | --- | --- |")
    for c, ms, text in sorted(calls, key=lambda row: -float(row[1]))[:8]:
        print(f"| {text.replace('|', '/')} | {c} | {float(ms) / done:.2f} | {float(ms) / int(c):.3f} |")
    print(f"statements per completed workflow: {sum(int(c) for c, _, _ in calls) / done:.1f}")
    if most_called > 0:
        print("| statement (most called first) | calls per completed workflow | mean ms |")
        print("| --- | --- | --- |")
        for c, ms, text in calls[:most_called]:
            print(f"| {text.replace('|', '/')} | {int(c) / done:.2f} | {float(ms) / int(c):.3f} |")
PY
