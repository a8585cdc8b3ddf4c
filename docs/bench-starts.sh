#!/usr/bin/env bash
# Workflow starts per second over HTTP on one SQLite dwserver, beside the raw
# SQLite commit rate at the same durability (one thread, one 2-row
# transaction per commit, WAL, synchronous=FULL), side by side in one run:
# the raw loop runs half before and half after the HTTP phase, in the same
# directory (same disk). The HTTP load is wrk (apt install wrk) with
# docs/bench-starts.lua. Usage:
#   docs/bench-starts.sh [SECONDS] [CONNECTIONS] [WRK_THREADS]   (defaults 10 32 2)
# Prints the raw rate, wrk's report, the server's CPU per start, and the
# ratio HTTP / raw (docs/performance.md, "Starts against raw SQLite").
set -euo pipefail
secs=${1:-10}
conns=${2:-32}
threads=${3:-2}
root=$(cd "$(dirname "$0")/.." && pwd)
target=${CARGO_TARGET_DIR:-$root/target}
(cd "$root" && cargo build --release --locked -q -p dwengine --bin dwserver --example loadgen)
work=$(mktemp -d)
server_pid=
cleanup() { [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
half=$(( (secs + 1) / 2 ))
raw_before=$("$target/release/examples/loadgen" raw --dir "$work" --seconds "$half")

DW_SERVER_ID=bench DW_AUTH=none DW_BIND=127.0.0.1:0 \
  DW_DATABASE_PATH="$work/runs.sqlite" DW_POLLING_CACHE_PATH="$work/polling" \
  "$target/release/dwserver" > "$work/stdout" 2> "$work/stderr" &
server_pid=$!
for _ in $(seq 200); do grep -q '^listening on ' "$work/stdout" 2>/dev/null && break; sleep 0.05; done
addr=$(sed -n 's/^listening on //p' "$work/stdout")
base="http://$addr"
curl -sf -X POST "$base/api/namespaces" -H 'Content-Type: application/json' -d '{"name":"bench"}' > /dev/null
ticks() { awk '{print $14 + $15}' "/proc/$server_pid/stat"; }
cpu_before=$(ticks)
wrk -t"$threads" -c"$conns" -d"${secs}s" --latency -s "$root/docs/bench-starts.lua" "$base" | tee "$work/wrk"
cpu_after=$(ticks)
kill "$server_pid"; wait "$server_pid" 2>/dev/null || true; server_pid=
started=$(sqlite3 "$work/runs.sqlite" 'SELECT COUNT(*) FROM runs' 2>/dev/null || echo '?')

raw_after=$("$target/release/examples/loadgen" raw --dir "$work" --seconds "$half")
rate=$(sed -n 's/^Requests\/sec: *//p' "$work/wrk")
if grep -q 'Non-2xx' "$work/wrk"; then
  echo "WARNING: some starts were refused or failed (see wrk's Non-2xx line); the rate counts them" >&2
fi
hz=$(getconf CLK_TCK)
python3 - "$raw_before" "$raw_after" "$rate" "$cpu_before" "$cpu_after" "$hz" "$secs" "$started" <<'PY'
import sys
rb, ra, rate, c0, c1, hz, secs, started = sys.argv[1:]
raw = (float(rb) + float(ra)) / 2
rate = float(rate)
cpu_s = (int(c1) - int(c0)) / int(hz)
print(f"raw SQLite, 1 thread, 2-row tx, sync=FULL: {raw:.0f} commits/s (before {float(rb):.0f}, after {float(ra):.0f})")
print(f"HTTP starts (wrk): {rate:.0f}/s; runs in the store: {started}")
if rate > 0:
    print(f"dwserver CPU: {cpu_s:.1f} s in {secs} s, {1000 * cpu_s / (rate * int(secs)):.3f} ms per start")
print(f"ratio HTTP / raw: {rate / raw:.2f}")
PY
