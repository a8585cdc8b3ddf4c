#!/usr/bin/env bash
# Workflow starts per second over HTTP on one SQLite dwserver, side by side
# with the raw SQLite commit rate at the same durability (one thread, one
# 2-row transaction per commit, WAL, synchronous=FULL: `loadgen raw`), in
# one run on the same disk, alternating: raw, server, raw, server, ... so
# every server phase has a raw phase just before and just after it, and a
# machine whose load moves moves both. With DWSERVER_BEFORE set, a second
# dwserver binary is measured in the same rounds (the two take turns going
# first), for before/after figures from one run.
#
#   docs/bench-starts.sh [SECONDS] [CONNECTIONS] [ROUNDS]    (defaults 10 32 3)
#
# Environment: DWSERVER (default: built here, release), DWSERVER_BEFORE (a
# second binary, optional), LOADGEN (default: built here), WRK_THREADS (2),
# BENCH_DIR (where the SQLite files go, default a new directory under
# $TMPDIR: put it on the disk you mean to measure).
#
# Each server phase: a fresh SQLite file, namespace "bench", wrk (apt install
# wrk) with docs/bench-starts.lua for SECONDS at CONNECTIONS. Printed per
# phase: starts/s, p50/p99, refused answers, runs stored / answered; the CPU
# per start of dwserver (all threads, from /proc), of its store writer
# thread alone, of the writer's syncer thread (which syncs the WAL and
# answers the callers; "-" for a binary without one), and of wrk; and, when
# `perf` may count system calls (root, or perf_event_paranoid <= -1),
# dwserver's fsync/fdatasync calls (all threads: the writer's own before
# the syncer existed, the syncer's and the checkpoints' since) and context
# switches per start. Per raw phase: commits/s, CPU per commit and fsyncs
# per commit.
# The summary gives, per binary, the median starts/s over the raw rate of
# its round, and the model of docs/performance.md ("Starts against raw
# SQLite"): what two idle cores could carry at the measured CPU per start.
set -euo pipefail
secs=${1:-10}
conns=${2:-32}
rounds=${3:-3}
threads=${WRK_THREADS:-2}
root=$(cd "$(dirname "$0")/.." && pwd)
target=${CARGO_TARGET_DIR:-$root/target}
for tool in wrk sqlite3 python3 curl /usr/bin/time; do
  command -v "$tool" >/dev/null || { echo "$tool is missing (wrk, sqlite3, curl and time are Debian packages)" >&2; exit 1; }
done
if [ -z "${DWSERVER:-}" ] || [ -z "${LOADGEN:-}" ]; then
  (cd "$root" && cargo build --release --locked -q -p dwengine --bin dwserver --example loadgen)
fi
after_bin=$(realpath "${DWSERVER:-$target/release/dwserver}")
loadgen=$(realpath "${LOADGEN:-$target/release/examples/loadgen}")
labels=(after)
declare -A binary=([after]="$after_bin")
if [ -n "${DWSERVER_BEFORE:-}" ]; then
  labels=(before after)
  binary[before]=$(realpath "$DWSERVER_BEFORE")
fi
if [ -n "${BENCH_DIR:-}" ]; then
  mkdir -p "$BENCH_DIR"
  work=$(mktemp -d "$BENCH_DIR/bench-starts.XXXXXX")
else
  work=$(mktemp -d)
fi
out=$work/results
mkdir -p "$out"
server_pid=
switches_pid=
cleanup() {
  [ -z "$switches_pid" ] || kill "$switches_pid" 2>/dev/null || true
  [ -z "$server_pid" ] || kill "$server_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
hz=$(getconf CLK_TCK)

# Whether perf may count this machine's system calls.
count_syscalls=no
if command -v perf >/dev/null &&
  perf stat -x, -e syscalls:sys_enter_fsync -o /dev/null true 2>/dev/null; then
  count_syscalls=yes
fi
syncs='syscalls:sys_enter_fsync,syscalls:sys_enter_fdatasync'

ticks() { awk '{print $14 + $15}' "$1"; } # user + system ticks of a stat file

raw_phase() { # NAME
  local f=$out/$1
  if [ "$count_syscalls" = yes ]; then
    perf stat -x, -e "task-clock,$syncs" -o "$f.perf" \
      "$loadgen" raw --dir "$work" --seconds "$secs" >"$f.rate"
  else
    /usr/bin/time -f '%U %S' -o "$f.time" \
      "$loadgen" raw --dir "$work" --seconds "$secs" >"$f.rate"
  fi
}

server_phase() { # NAME LABEL
  local f=$out/$1 bin=${binary[$2]} dir=$work/$1 writer= syncer= w0=0 w1=0 y0=0 y1=0
  mkdir -p "$dir"
  DW_SERVER_ID=bench DW_AUTH=none DW_BIND=127.0.0.1:0 \
    DW_DATABASE_PATH="$dir/runs.sqlite" DW_POLLING_CACHE_PATH="$dir/polling" \
    "$bin" >"$dir/stdout" 2>"$dir/stderr" &
  server_pid=$!
  for _ in $(seq 600); do
    grep -q '^listening on ' "$dir/stdout" 2>/dev/null && break
    kill -0 "$server_pid" 2>/dev/null || break
    sleep 0.05
  done
  local addr
  addr=$(sed -n 's/^listening on //p' "$dir/stdout")
  [ -n "$addr" ] || { cat "$dir/stderr" >&2; echo "dwserver did not start" >&2; exit 1; }
  curl -sf -X POST "http://$addr/api/namespaces" -H 'Content-Type: application/json' \
    -d '{"name":"bench"}' >/dev/null
  writer=$(grep -lx dwstore-writer /proc/"$server_pid"/task/*/comm 2>/dev/null | head -1 | cut -d/ -f5 || true)
  syncer=$(grep -lx dwstore-syncer /proc/"$server_pid"/task/*/comm 2>/dev/null | head -1 | cut -d/ -f5 || true)
  if [ "$count_syscalls" = yes ]; then
    perf stat -x, -e "context-switches,$syncs" -p "$server_pid" -o "$f.switches" &
    switches_pid=$!
  fi
  local c0 c1
  c0=$(ticks "/proc/$server_pid/stat")
  [ -z "$writer" ] || w0=$(ticks "/proc/$server_pid/task/$writer/stat")
  [ -z "$syncer" ] || y0=$(ticks "/proc/$server_pid/task/$syncer/stat")
  /usr/bin/time -f '%U %S' -o "$f.wrk-time" \
    wrk -t"$threads" -c"$conns" -d"${secs}s" --latency -s "$root/docs/bench-starts.lua" \
    "http://$addr" >"$f.wrk"
  c1=$(ticks "/proc/$server_pid/stat")
  [ -z "$writer" ] || w1=$(ticks "/proc/$server_pid/task/$writer/stat")
  [ -z "$syncer" ] || y1=$(ticks "/proc/$server_pid/task/$syncer/stat")
  if [ -n "$switches_pid" ]; then
    kill -INT "$switches_pid"
    wait "$switches_pid" || true
    switches_pid=
  fi
  # Starts in flight when wrk stopped are answered by now.
  sleep 0.5
  kill "$server_pid"
  wait "$server_pid" 2>/dev/null || true
  server_pid=
  local synced=-
  [ -z "$syncer" ] || synced=$((y1 - y0))
  echo "$2 $((c1 - c0)) $((w1 - w0)) $synced $(sqlite3 "$dir/runs.sqlite" 'SELECT COUNT(*) FROM runs')" >"$f.server"
  rm -rf "$dir"
}

echo "dwserver ($(printf '%s ' "${labels[@]}")): $(for l in "${labels[@]}"; do printf '%s=%s ' "$l" "${binary[$l]}"; done)" >&2
echo "SQLite files in $work; $rounds rounds of ${secs} s phases; fsyncs counted: $count_syscalls" >&2
phase=0
raw_phase "raw-0"
for round in $(seq "$rounds"); do
  order=("${labels[@]}")
  if [ $((round % 2)) = 0 ] && [ "${#labels[@]}" = 2 ]; then order=(after before); fi
  for label in "${order[@]}"; do
    phase=$((phase + 1))
    server_phase "server-$phase" "$label"
    echo "round $round: $label done" >&2
  done
  raw_phase "raw-$round"
done

python3 - "$out" "$secs" "$hz" "$rounds" "$conns" "$(nproc)" <<'PY'
import os, re, statistics, sys
out, secs, hz, rounds, conns, cores = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], int(sys.argv[6])

def read(name):
    path = os.path.join(out, name)
    return open(path).read() if os.path.exists(path) else None

def perf_counts(text):
    counts = {}
    for line in (text or "").splitlines():
        parts = line.split(",")
        if len(parts) > 2 and not line.startswith("#"):
            try:
                counts[parts[2]] = float(parts[0])
            except ValueError:
                pass
    return counts

def syncs(counts):
    got = [v for k, v in counts.items() if "sync" in k]
    return sum(got) if got else None

raw = {}
for r in range(rounds + 1):
    rate = float(read(f"raw-{r}.rate").strip())
    counts = perf_counts(read(f"raw-{r}.perf"))
    commits = rate * secs
    cpu = counts.get("task-clock")
    if cpu is None and read(f"raw-{r}.time"):
        u, s = read(f"raw-{r}.time").split()[-2:]
        cpu = (float(u) + float(s)) * 1000
    f = syncs(counts)
    raw[r] = rate
    print(f"raw {r}: {rate:,.0f} commits/s"
          + (f", CPU {cpu / commits:.3f} ms/commit" if cpu else "")
          + (f", {f / commits:.2f} fsyncs/commit" if f is not None else ""))

rows = {}
for name in sorted((n for n in os.listdir(out) if n.endswith(".server")), key=lambda n: int(n.split("-")[1].split(".")[0])):
    n = int(name.split("-")[1].split(".")[0])
    label, cpu_ticks, writer_ticks, syncer_ticks, stored = read(name).split()
    base = name[: -len(".server")]
    wrk = read(base + ".wrk")
    rate = float(re.search(r"Requests/sec:\s*([\d.]+)", wrk).group(1))
    answered = int(re.search(r"(\d+) requests in", wrk).group(1))
    lat = dict(re.findall(r"^\s*(50|99)%\s+(\S+)", wrk, re.M))
    bad = re.search(r"Non-2xx or 3xx responses:\s*(\d+)", wrk)
    u, s = read(base + ".wrk-time").split()[-2:]
    starts = max(1, answered)
    server_ms = int(cpu_ticks) * 1000 / hz / starts
    writer_ms = int(writer_ticks) * 1000 / hz / starts
    syncer_ms = None if syncer_ticks == "-" else int(syncer_ticks) * 1000 / hz / starts
    wrk_ms = (float(u) + float(s)) * 1000 / starts
    counted = perf_counts(read(base + ".switches"))
    f = syncs(counted)
    switched = counted.get("context-switches")
    rows.setdefault(label, []).append((n, rate, lat, bad, stored, answered, server_ms, writer_ms, syncer_ms, wrk_ms, f, switched))

# Phase n belongs to round ceil(n / labels); its raw rate is the mean of the
# raw phases before and after that round.
labels = len(rows)
print()
print(f"starts: wrk, {conns} connections, {secs} s per phase; {cores} cores")
print("| binary | phase | starts/s | p50 | p99 | non-2xx | runs stored / answered | dwserver CPU ms/start | writer ms/start | syncer ms/start | wrk ms/start | switches / start | starts per fsync | raw commits/s (round) | starts / raw |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
summary = {}
for label in ("before", "after"):
    for (n, rate, lat, bad, stored, answered, server_ms, writer_ms, syncer_ms, wrk_ms, f, switched) in rows.get(label, []):
        rnd = (n + labels - 1) // labels
        round_raw = (raw[rnd - 1] + raw[rnd]) / 2
        per_fsync = f"{answered / f:.1f}" if f else "-"
        print(f"| {label} | {n} | {rate:,.0f} | {lat.get('50', '?')} | {lat.get('99', '?')} | {bad.group(1) if bad else 0} "
              f"| {int(stored):,} / {answered:,} | {server_ms:.3f} | {writer_ms:.3f} | {'-' if syncer_ms is None else f'{syncer_ms:.3f}'} | {wrk_ms:.3f} "
              f"| {f'{switched / answered:.2f}' if switched else '-'} | {per_fsync} "
              f"| {round_raw:,.0f} | {rate / round_raw:.2f} |")
        summary.setdefault(label, []).append((rate, rate / round_raw, server_ms, writer_ms, wrk_ms))
print()
for label, got in summary.items():
    med = lambda i: statistics.median(g[i] for g in got)
    cpu = med(2) + med(4)
    ceiling = min(cores / cpu, 1 / med(3)) * 1000
    print(f"{label}: median {med(0):,.0f} starts/s, {med(1):.2f} x raw; CPU per start {med(2):.3f} ms (dwserver) + "
          f"{med(4):.3f} ms (wrk), writer {med(3):.3f} ms: {cores} idle cores carry at most "
          f"min({cores} / {cpu:.3f}, 1 / {med(3):.3f}) = {ceiling:,.0f} starts/s")
PY
