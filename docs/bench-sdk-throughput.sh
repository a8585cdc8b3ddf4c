#!/usr/bin/env bash
# Workflows completed per second with the published Rust SDK driving one
# release dwserver (a SQLite file, default settings, no tokens): WORKERS SDK
# worker processes serve one queue while one starter process keeps
# CONCURRENCY workflows in flight (the next starts as soon as one's result
# is read), for each workflow shape in turn, each on a fresh server:
#
#   activity      the workflow runs one activity and completes
#   timer-signal  the workflow sleeps 1 s (a durable timer), waits for the
#                 signal the starter sends right after the start, completes
#
# The programs are conformance/rust/src/bin/bench.rs (`--role worker`, and
# `--role starter`, which measures). Over each window it prints workflows/s,
# start p50/p99, and the CPU seconds per workflow of dwserver and of the SDK
# processes (starter + workers, from /proc/<pid>/stat), and their ratio
# (issue: dwserver's at most a quarter of the SDK's). Usage:
#
#   docs/bench-sdk-throughput.sh [SECONDS] [WORKERS]      (defaults 30 2)
#   SHAPES="activity timer-signal"    the shapes, in order (the default: both)
#   CONCURRENCY=64                    in flight for the activity shape
#   TIMER_CONCURRENCY=192             in flight for the timer-signal shape (each takes >= 1 s)
#   POLL_INTERVAL_MS=50               how often the starter asks for a result (the SDK's default is 500)
#   WORKER_SLOTS=8                    each worker's workflow and activity task slots (each)
#   DWSERVER=path                     an already built release dwserver
#   PERF=1                            record dwserver with perf (perf-SHAPE.data in the cwd)
#   COUNT_REQUESTS=1                  the SDK processes talk to dwserver through
#                                     docs/http-count-proxy.py, and the requests
#                                     of each kind per workflow started are printed
#
# Builds (release) dwserver in CARGO_TARGET_DIR (default target/) and the
# Rust SDK project in DW_CONFORMANCE_RUST_TARGET_DIR (default
# target/conformance-rust). Figures: docs/performance.md, "The Rust SDK's
# throughput: workers, shapes and dwserver's CPU".
set -euo pipefail
secs=${1:-30}
workers=${2:-2}
shapes=${SHAPES:-activity timer-signal}
concurrency=${CONCURRENCY:-64}
timer_concurrency=${TIMER_CONCURRENCY:-192}
poll_ms=${POLL_INTERVAL_MS:-50}
slots=${WORKER_SLOTS:-8}
root=$(cd "$(dirname "$0")/.." && pwd)
target=${CARGO_TARGET_DIR:-$root/target}
rust_target=${DW_CONFORMANCE_RUST_TARGET_DIR:-$root/target/conformance-rust}
if [ -z "${DWSERVER:-}" ]; then
  (cd "$root" && cargo build --release --locked -q -p dwengine --bin dwserver)
  DWSERVER="$target/release/dwserver"
fi
CARGO_TARGET_DIR="$rust_target" cargo build --release --locked -q \
  --manifest-path "$root/conformance/rust/Cargo.toml" --bin bench
bench="$rust_target/release/bench"

work=$(mktemp -d)
pids=()
stop_all() {
  # Only the processes this script started, by their ids, newest first
  # (the workers before the server they talk to).
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
    kill "${pids[i]}" 2>/dev/null || true
    wait "${pids[i]}" 2>/dev/null || true
  done
  pids=()
}
trap 'stop_all; rm -rf "$work"' EXIT

status=0
for shape in $shapes; do
  case "$shape" in
    activity) inflight=$concurrency ;;
    timer-signal) inflight=$timer_concurrency ;;
    *) echo "unknown shape $shape (activity, timer-signal)" >&2; exit 2 ;;
  esac
  data="$work/$shape"
  mkdir -p "$data"
  DW_SERVER_ID=bench DW_AUTH=none DW_BIND=127.0.0.1:0 \
    DW_DATABASE_PATH="$data/bench.sqlite" DW_POLLING_CACHE_PATH="$data/polling" \
    "$DWSERVER" >"$data/dwserver.out" 2>"$data/dwserver.err" &
  server=$!
  pids+=("$server")
  for _ in $(seq 200); do grep -qs '^listening on ' "$data/dwserver.out" && break; sleep 0.05; done
  addr=$(sed -n 's/^listening on //p' "$data/dwserver.out" | head -n1)
  [ -n "$addr" ] || { cat "$data/dwserver.out" "$data/dwserver.err" >&2; exit 1; }
  url="http://$addr"
  if [ -n "${COUNT_REQUESTS:-}" ]; then
    # The SDK processes go through the counting proxy; dwserver's CPU is
    # still its own (the proxy is a process of its own, not counted).
    proxy_port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    python3 "$root/docs/http-count-proxy.py" "$proxy_port" "$addr" "$work/$shape.requests.json" \
      >"$data/proxy.out" 2>&1 &
    pids+=("$!")
    for _ in $(seq 200); do grep -qs '^counting on ' "$data/proxy.out" && break; sleep 0.05; done
    url="http://127.0.0.1:$proxy_port"
  fi
  worker_pids=()
  for i in $(seq "$workers"); do
    "$bench" "$url" --role worker --worker-slots "$slots" 2>"$data/worker-$i.err" &
    worker_pids+=("$!")
    pids+=("$!")
  done
  perf_pid=
  if [ -n "${PERF:-}" ]; then
    perf record -F 499 --call-graph dwarf,32768 -o "perf-$shape.data" -p "$server" 2>"$data/perf.err" &
    perf_pid=$!
  fi
  echo "== $shape: $inflight in flight for $secs s, $workers workers x $slots slots, dwserver $DWSERVER on $addr" >&2
  "$bench" "$url" --role starter --shape "$shape" --concurrency "$inflight" \
    --seconds "$secs" --poll-interval-ms "$poll_ms" --worker-slots "$slots" --server-pid "$server" \
    --worker-pids "$(IFS=,; echo "${worker_pids[*]}")" >"$work/$shape.json" || status=1
  if [ -n "$perf_pid" ]; then kill -INT "$perf_pid"; wait "$perf_pid" || true; fi
  stop_all
  if grep -qs . "$data"/worker-*.err; then
    echo "-- worker stderr ($shape):" >&2
    tail -n 5 "$data"/worker-*.err >&2
  fi
done

echo "load average: $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) cores" >&2
python3 - "$work" "$workers" $shapes <<'EOF'
import json, sys
work, workers, shapes = sys.argv[1], sys.argv[2], sys.argv[3:]
rows = []
for shape in shapes:
    try:
        with open(f"{work}/{shape}.json") as f:
            rows.append(json.loads(f.read().strip().splitlines()[-1]))
    except (OSError, IndexError, ValueError):
        rows.append({"shape": shape})
def ratio(r):
    s, d = r.get("sdk_cpu_ms_per_workflow"), r.get("server_cpu_ms_per_workflow")
    return f"{d / s:.2f}" if s and d is not None else "-"
lines = [
    ("shape", lambda r: r["shape"]),
    ("SDK processes", lambda r: r.get("sdk_processes", "-")),
    ("workflows in flight", lambda r: r.get("concurrency", "-")),
    ("completed (failed)", lambda r: f"{r.get('completed', '-')} ({r.get('failed', '-')})"),
    ("workflows/s", lambda r: r.get("workflows_completed_per_second", "-")),
    ("start p50 ms", lambda r: r.get("start_latency_ms_p50", "-")),
    ("start p99 ms", lambda r: r.get("start_latency_ms_p99", "-")),
    ("SDK CPU ms/workflow", lambda r: r.get("sdk_cpu_ms_per_workflow", "-")),
    ("dwserver CPU ms/workflow", lambda r: r.get("server_cpu_ms_per_workflow", "-")),
    ("dwserver / SDK CPU", ratio),
]
for label, get in lines:
    print(f"{label:<26}" + "".join(f"{str(get(r)):>16}" for r in rows))
for r in rows:
    print(json.dumps(r))
for shape in shapes:
    try:
        with open(f"{work}/{shape}.requests.json") as f:
            counts = json.load(f)
    except (OSError, ValueError):
        continue
    started = counts.get("POST /api/workflows", 0)
    print(f"requests per workflow started ({shape}, {started} started, the whole run):")
    for kind, n in sorted(counts.items(), key=lambda kv: -kv[1]):
        if started and not kind.startswith("status"):
            print(f"  {n / started:8.2f}  {kind}  ({n})")
    print("  answers: " + ", ".join(f"{k.split()[1]} x{v}" for k, v in sorted(counts.items()) if k.startswith("status")))
EOF
exit "$status"
