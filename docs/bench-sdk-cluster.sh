#!/usr/bin/env bash
# Where a Python SDK workflow's time and CPU go on one PostgreSQL node
# against three (docs/performance.md, "Why three nodes complete fewer SDK
# workflows than one"). One deployment per run:
#   pg1   one node on PostgreSQL, the SDK talking to it directly;
#   pg1h  the same node behind HAProxy (the `haproxy ci` block with one server);
#   pg1r  one node with Redis (the cluster's cache and wake relay) behind HAProxy;
#   pg3   three nodes on one database and one Redis behind HAProxy, as
#         docs/bench-throughput.sh's pg-3.
# docs/http-count-proxy.py sits in front of the SDK (requests by route);
# HAProxy logs every request (node, time until the answer) so the script
# prints, per route, how often each node served it and its time, and for
# the worker's polls how many were in flight at once and how much of the
# window its poll loops spent waiting for an answer. CPU per completed
# workflow of every process (/proc: nodes, HAProxy, PostgreSQL's postmaster
# and its children, redis-server when it runs here, the SDK's client and
# worker).
#
#   DW_BENCH_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/postgres \
#   DW_BENCH_REDIS_URL=redis://127.0.0.1:6379 docs/bench-sdk-cluster.sh MODE [SECONDS] [CONCURRENCY]
#
# DWSERVER a release dwserver (default: built here); DW_CONFORMANCE_VENV the
# Python SDK's venv (default target/conformance-venv); BENCH_PORT the
# balancer's port, nodes on the next three, the counting proxy on +5
# (default 18690); BENCH_REDIS_DB (default 13, flushed). The database it
# makes (dw_sdk_cluster_<pid>) is dropped at the end. EXTRA_WORKERS=N starts
# N more SDK Worker processes on the same queue (the SDK's Worker keeps one
# poll of each kind in flight, whatever its slots), counted as extra-worker-*.
# STATEMENTS=1, on a server with pg_stat_statements loaded
# (shared_preload_libraries) and the extension made in DW_BENCH_POSTGRES_URL's
# database: the statements this run's database executed during the SDK
# phase, per completed workflow (calls and mean time; the write lock's
# advisory-lock calls' mean is the time a transaction waited for it).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=docs/bench-lib.sh
. "$root/docs/bench-lib.sh"
: "${DW_BENCH_POSTGRES_URL:?set DW_BENCH_POSTGRES_URL to a PostgreSQL server you may create databases on}"
: "${DW_BENCH_REDIS_URL:?set DW_BENCH_REDIS_URL to a redis-server (redis://host:port)}"
mode=${1:?MODE: pg1, pg1h, pg1r or pg3}
secs=${2:-10}
concurrency=${3:-64}
port=${BENCH_PORT:-18690}
redis_db=${BENCH_REDIS_DB:-13}
venv=${DW_CONFORMANCE_VENV:-$root/target/conformance-venv}
case $mode in pg1 | pg1h | pg1r | pg3) ;; *) echo "MODE is pg1, pg1h, pg1r or pg3" >&2; exit 1 ;; esac
if [ -z "${DWSERVER:-}" ]; then
  (cd "$root" && cargo build --release --locked -q -p dwengine --bin dwserver)
fi
dwserver=$(realpath "${DWSERVER:-${CARGO_TARGET_DIR:-$root/target}/release/dwserver}")
redis=${DW_BENCH_REDIS_URL%/}
redis_host_port=${redis#redis://}

scratch_database dw_sdk_cluster_$$
redis-cli -h "${redis_host_port%:*}" -p "${redis_host_port##*:}" -n "$redis_db" flushdb >/dev/null

nodes=1
[ "$mode" = pg3 ] && nodes=3
for n in $(seq "$nodes"); do
  extra=()
  case $mode in pg1r | pg3) extra=(DW_REDIS_URL="$redis/$redis_db") ;; esac
  env "${extra[@]}" DW_SERVER_ID="sdk-cluster-$n" DW_AUTH=none DW_BIND="127.0.0.1:$((port + n))" \
    DW_DATABASE_URL="$url" DW_POLLING_CACHE_PATH="$work/cache-$n" "$dwserver" >"$work/node-$n.log" 2>&1 &
  pids+=("$!")
  echo "$!" >"$work/node-$n.pid"
  for _ in $(seq 600); do grep -q '^listening on ' "$work/node-$n.log" && break; sleep 0.1; done
done
target=127.0.0.1:$((port + 1))
if [ "$mode" != pg1 ]; then
  # The documented block, its ports moved, every request logged.
  documented_haproxy "$port" |
    sed -e 's/^global$/global\n    log stdout format raw local0/' \
      -e 's/^defaults$/defaults\n    log global\n    option httplog/' >"$work/haproxy.cfg"
  [ "$nodes" = 3 ] || sed -i '/server node-[23] /d' "$work/haproxy.cfg"
  haproxy -f "$work/haproxy.cfg" -db >"$work/haproxy.log" 2>&1 &
  pids+=("$!")
  echo "$!" >"$work/haproxy.pid"
  for _ in $(seq 300); do
    [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/api/ready")" = 200 ] && break
    sleep 0.2
  done
  target=127.0.0.1:$port
fi
python3 "$root/docs/http-count-proxy.py" $((port + 5)) "$target" "$work/counts.json" >/dev/null &
proxy=$!
pids+=("$proxy")
echo "$proxy" >"$work/proxy.pid"
for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$((port + 5))/api/ready" && break; sleep 0.1; done
curl -sf -X POST "http://127.0.0.1:$((port + 5))/api/namespaces" -H 'Content-Type: application/json' \
  -d '{"name":"bench"}' >/dev/null || true

for n in $(seq "${EXTRA_WORKERS:-0}"); do
  (cd "$root/conformance" && exec "$venv/bin/python" bench.py "http://127.0.0.1:$((port + 5))" --serve) 2>"$work/extra-worker-$n.err" &
  pids+=("$!")
  echo "$!" >"$work/extra-worker-$n.pid"
done

postmaster=
if dir=$(psql -qAt "$DW_BENCH_POSTGRES_URL" -c "SHOW data_directory" 2>/dev/null); then
  postmaster=$(head -1 "$dir/postmaster.pid" 2>/dev/null || true)
fi
redis_pid=$(redis-cli -h "${redis_host_port%:*}" -p "${redis_host_port##*:}" info server |
  awk -F: '/^process_id:/ { print $2 }' | tr -d '\r')
ticks() { # WHO PID: user + system ticks of one process
  [ -r "/proc/$2/stat" ] && echo "$1 $(awk '{ print $14 + $15 }' "/proc/$2/stat")"
}
snapshot() {
  local f total pid
  for f in "$work"/*.pid; do ticks "$(basename "$f" .pid)" "$(cat "$f")" || true; done
  [ -z "$redis_pid" ] || ticks redis "$redis_pid" || true
  if [ -n "$postmaster" ] && [ -r "/proc/$postmaster/stat" ]; then
    total=$(awk '{ print $14 + $15 + $16 + $17 }' "/proc/$postmaster/stat")
    for pid in $(pgrep -P "$postmaster"); do
      total=$((total + $(awk '{ print $14 + $15 }' "/proc/$pid/stat" 2>/dev/null || echo 0)))
    done
    echo "postgres $total"
  fi
}
statements() { # OUT: queryid, calls, total ms, text of this run's database's statements
  [ -n "${STATEMENTS:-}" ] || return 0
  psql -qAt -F $'\t' "$DW_BENCH_POSTGRES_URL" -c "SELECT queryid, calls, total_exec_time,
    left(regexp_replace(query, '\s+', ' ', 'g'), 110) FROM pg_stat_statements
    WHERE dbid = (SELECT oid FROM pg_database WHERE datname = '$db')" >"$1" ||
    { echo "STATEMENTS=1: pg_stat_statements cannot be read on DW_BENCH_POSTGRES_URL" >&2; exit 1; }
}
statements "$work/statements-before"
snapshot >"$work/cpu-before"
(cd "$root/conformance" && "$venv/bin/python" bench.py "http://127.0.0.1:$((port + 5))" \
  --concurrency "$concurrency" --seconds "$secs") >"$work/sdk.json" 2>"$work/sdk.err" ||
  { cat "$work/sdk.err" >&2; echo "the SDK run failed" >&2; exit 1; }
snapshot >"$work/cpu-after"
statements "$work/statements-after"
for f in "$work"/extra-worker-*.pid; do
  [ -e "$f" ] || continue
  kill "$(cat "$f")" 2>/dev/null || true
  wait "$(cat "$f")" 2>/dev/null || true
done
kill "$proxy"
wait "$proxy" 2>/dev/null || true
python3 - "$work" "$mode" "$(getconf CLK_TCK)" <<'PY'
import collections, datetime, json, re, statistics, sys
work, mode, hz = sys.argv[1], sys.argv[2], int(sys.argv[3])
sdk = json.loads(open(f"{work}/sdk.json").read().strip().splitlines()[-1])
counts = json.load(open(f"{work}/counts.json"))
done = sdk["completed"]
starts = counts.get("POST /api/workflows", 0)
print(f"{mode}: {sdk['workflows_completed_per_second']} workflows/s, {done} completed, "
      f"{sdk['concurrency']} in flight, {sdk['seconds']} s")
print("requests per start: " + ", ".join(
    f"{k} {v / max(1, starts):.1f}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1])
    if not k.startswith("status")))
read = lambda name: {w: int(t) for w, t in (l.split() for l in open(f"{work}/{name}"))}
before, after = read("cpu-before"), read("cpu-after")
cpu = {w: 1000 * (after[w] - before[w]) / hz / max(1, done) for w in before if w in after}
cpu["client"] = 1000 * sdk["sdk_client_cpu_seconds"] / max(1, done)
cpu["worker"] = 1000 * sdk["sdk_worker_cpu_seconds"] / max(1, done)
print("CPU ms per completed workflow: " + ", ".join(f"{w} {v:.1f}" for w, v in sorted(cpu.items()))
      + f"; all {sum(cpu.values()):.1f}")
def statements(name):
    rows = {}
    for l in open(f"{work}/{name}"):
        qid, calls, ms, text = l.rstrip("\n").split("\t", 3)
        c, m, _ = rows.get(qid, (0, 0.0, ""))
        rows[qid] = (c + int(calls), m + float(ms), text.replace("|", "\\|"))
    return rows
try:
    s0, s1 = statements("statements-before"), statements("statements-after")
except FileNotFoundError:
    s0 = s1 = None
if s1 is not None:
    ran = []
    for qid, (calls, ms, text) in s1.items():
        c0, m0, _ = s0.get(qid, (0, 0.0, ""))
        if calls > c0:
            ran.append((calls - c0, ms - m0, text))
    print(f"PostgreSQL statements per completed workflow: {sum(c for c, _, _ in ran) / max(1, done):.1f}, "
          f"executing {sum(m for _, m, _ in ran) / max(1, done):.1f} ms (of which waiting for the write lock: "
          f"{sum(m for _, m, t in ran if 'pg_advisory_xact_lock' in t) / max(1, done):.1f} ms)")
    print("| statement | calls per workflow | mean ms |")
    print("| --- | --- | --- |")
    for calls, ms, text in sorted(ran, key=lambda r: -r[0])[:15]:
        print(f"| {text} | {calls / max(1, done):.2f} | {ms / calls:.3f} |")
try:
    log = open(f"{work}/haproxy.log").read().splitlines()
except FileNotFoundError:
    sys.exit(0)
line = re.compile(r'\[(\S+)\] \S+ \S+/(\S+) (\S+) \d+ .*"(\S+) (\S+) ')
times, per_node, polls = collections.defaultdict(list), collections.Counter(), collections.defaultdict(list)
for l in log:
    m = line.search(l)
    if not m:
        continue
    at, node, timers, method, path = m.groups()
    t = [int(x) for x in timers.split("/")]
    p = re.sub(r"^/api/workflows/[^/]+", "/api/workflows/{id}", path)
    p = re.sub(r"(-tasks)/(?!poll$)[^/]+", r"\1/{id}", p)
    p = re.sub(r"/runs/[^/]+", "/runs/{run}", p)
    key = f"{method} {p}"
    times[key].append(t[-1])
    per_node[(key, node)] += 1
    kind = re.match(r"/api/worker/(workflow|activity)-tasks/poll$", path)
    if kind:
        began = datetime.datetime.strptime(at, "%d/%b/%Y:%H:%M:%S.%f").timestamp()
        polls[kind.group(1)].append((began, began + (t[0] + t[-1]) / 1000))
nodes = sorted({n for _, n in per_node})
print("| route | requests | per node | HAProxy's time to the answer: p50 | p90 | mean |")
print("| --- | --- | --- | --- | --- | --- |")
for key, v in sorted(times.items(), key=lambda kv: -len(kv[1]))[:8]:
    v.sort()
    spread = "/".join(str(per_node[(key, n)]) for n in nodes)
    print(f"| {key} | {len(v)} | {spread} | {v[len(v) // 2]} ms | {v[int(len(v) * 0.9)]} ms | {statistics.fmean(v):.1f} ms |")
for kind, spans in sorted(polls.items()):
    edges = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
    held = most = 0
    for _, d in edges:
        held += d
        most = max(most, held)
    busy = sum(e - s for s, e in spans)
    window = max(e for _, e in spans) - min(s for s, _ in spans)
    print(f"{kind} polls: {len(spans)}, at most {most} in flight at once, "
          f"in flight {busy:.1f} s of {window:.1f} s")
PY
