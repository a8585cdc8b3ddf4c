#!/usr/bin/env bash
# Long-poll wake-up latency, one node against two: how long after a start
# is answered a worker's long poll (held on the same node, or on another
# node of the same database) returns the new task. Prints p50/p90/p99/max
# of N rounds for each case.
#
#   DW_DATABASE_URL=postgres://postgres@127.0.0.1:5433/bench \
#   DW_REDIS_URL=redis://127.0.0.1:6379/3 docs/bench-wakeups.sh [ROUNDS]
#
# The database and the Redis database should be empty and yours alone (the
# script creates its workflows in them and leaves them there). DWSERVER
# names a built dwserver (default target/release/dwserver); BENCH_PORT the
# first of the two loopback ports (default 18490). Needs python3.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${DW_DATABASE_URL:?set DW_DATABASE_URL to an empty PostgreSQL database}"
: "${DW_REDIS_URL:?set DW_REDIS_URL to an empty Redis database}"
rounds="${1:-200}"
dwserver="${DWSERVER:-target/release/dwserver}"
port="${BENCH_PORT:-18490}"
work="$(mktemp -d)"
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"' EXIT

for n in 0 1; do
  DW_SERVER_ID="bench-$n" DW_AUTH=none DW_BIND="127.0.0.1:$((port + n))" \
    DW_POLLING_CACHE_PATH="$work/node-$n" "$dwserver" >"$work/node-$n.log" 2>&1 &
  pids+=("$!")
done
for n in 0 1; do
  for _ in $(seq 300); do
    grep -q '^listening on ' "$work/node-$n.log" && break
    sleep 0.1
  done
  grep -q '^listening on ' "$work/node-$n.log" || { cat "$work/node-$n.log" >&2; exit 1; }
done
"$dwserver" --version 2>/dev/null || true

python3 - "$port" "$rounds" <<'EOF'
import http.client, json, sys, threading, time, uuid

port, rounds = int(sys.argv[1]), int(sys.argv[2])

def post(node, path, body):
    conn = http.client.HTTPConnection("127.0.0.1", port + node, timeout=120)
    conn.request("POST", path, json.dumps(body),
                 {"content-type": "application/json", "x-namespace": "default"})
    response = conn.getresponse()
    answer = json.loads(response.read() or b"null")
    conn.close()
    return response.status, answer

def one(start_on, poll_on):
    queue = "wake-" + uuid.uuid4().hex[:12]
    done = {}
    def poll():
        status, answer = post(poll_on, "/api/worker/workflow-tasks/poll", {
            "task_queue": queue, "worker_id": "bench", "timeout_seconds": 30,
            "poll_request_id": uuid.uuid4().hex})
        done["at"] = time.perf_counter()
        done["task"] = (answer or {}).get("task")
    thread = threading.Thread(target=poll)
    thread.start()
    time.sleep(0.05)  # the poll is held before the start
    status, body = post(start_on, "/api/workflows", {
        "workflow_id": "w-" + uuid.uuid4().hex, "workflow_type": "Bench", "task_queue": queue,
        "input": {"codec": "json", "blob": "[]"}})
    answered = time.perf_counter()
    assert status == 201, body
    thread.join()
    assert done["task"] is not None, "the poll timed out"
    return max(0.0, done["at"] - answered) * 1000

for name, start_on, poll_on in [("same node", 0, 0), ("other node", 0, 1)]:
    samples = sorted(one(start_on, poll_on) for _ in range(rounds))
    pick = lambda q: samples[min(len(samples) - 1, int(q * len(samples)))]
    print(f"{name:10s}: start answered -> poll answered, {rounds} rounds: "
          f"p50 {pick(0.5):.2f} ms, p90 {pick(0.9):.2f} ms, p99 {pick(0.99):.2f} ms, max {samples[-1]:.2f} ms")
EOF
for n in 0 1; do
  curl -s "http://127.0.0.1:$((port + n))/api/system/operator-metrics" |
    python3 -c 'import json,sys; print("node", sys.argv[1], "wake_relay:", json.load(sys.stdin)["cluster"].get("wake_relay"))' "$n"
done
