# Shell functions the benchmark scripts share (docs/bench-throughput.sh,
# docs/bench-poll-wakes.sh, docs/bench-sdk-cluster.sh,
# docs/bench-sdk-phases.sh, docs/bench-round-trips.sh); sourced by them,
# not run. They read DW_BENCH_POSTGRES_URL.

# pg_ticks: the PostgreSQL server's user + system ticks so far (its
# postmaster and every process it forked, the ended ones included), when
# the server runs on this machine; "-" otherwise.
pg_ticks() {
  local dir postmaster total pid
  dir=$(psql -qAt "$DW_BENCH_POSTGRES_URL" -c "SHOW data_directory" 2>/dev/null) || { echo -; return; }
  postmaster=$(head -1 "$dir/postmaster.pid" 2>/dev/null) || { echo -; return; }
  [ -n "$postmaster" ] && [ -r "/proc/$postmaster/stat" ] || { echo -; return; }
  total=$(awk '{print $14 + $15 + $16 + $17}' "/proc/$postmaster/stat")
  for pid in $(pgrep -P "$postmaster"); do
    total=$((total + $(awk '{print $14 + $15}' "/proc/$pid/stat" 2>/dev/null || echo 0)))
  done
  echo "$total"
}

# settle_writes: what earlier phases left to write goes to disk before the
# next is measured: the page cache's dirty pages (`sync`; a SQLite phase
# leaves hundreds of megabytes, which the kernel otherwise flushes 30 s
# later, in the middle of whatever runs then) and PostgreSQL's dirty
# buffers (`CHECKPOINT`, which also restarts its 5-minute clock, so no
# timed checkpoint and the full-page images after it fall inside the
# next phases). A role that may not run CHECKPOINT (it needs superuser
# or pg_checkpoint) skips it, saying so once. SETTLE_WRITES=off skips
# both (to measure what settling changes).
settle_writes() {
  [ "${SETTLE_WRITES:-on}" != off ] || return 0
  sync
  [ -n "${DW_BENCH_POSTGRES_URL:-}" ] || return 0
  if ! psql -q "$DW_BENCH_POSTGRES_URL" -c CHECKPOINT >/dev/null 2>&1 && [ -z "${settle_warned:-}" ]; then
    settle_warned=1
    echo "settle_writes: this role may not run CHECKPOINT; phases are measured without one before them" >&2
  fi
}

# scratch_database NAME: an empty database NAME on DW_BENCH_POSTGRES_URL's
# server (its name in $db, its URL in $url), a work directory ($work) and
# an empty list of background processes ($pids, for the caller to add
# to); on exit the processes are stopped, the database dropped and the
# directory removed.
scratch_database() {
  db=$1
  url="${DW_BENCH_POSTGRES_URL%/*}/$db"
  work=$(mktemp -d)
  pids=()
  trap scratch_cleanup EXIT
  psql -q "$DW_BENCH_POSTGRES_URL" -c "CREATE DATABASE $db" >/dev/null
}

scratch_cleanup() {
  local pid
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  psql -q "$DW_BENCH_POSTGRES_URL" -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1 || true
  rm -rf "$work"
}

# documented_haproxy PORT: docs/deployment.md's `haproxy ci` block, as CI
# runs it, with its ports moved: the balancer on PORT (which ends in 0),
# its three nodes on the next three.
documented_haproxy() {
  awk '/^```haproxy ci$/ { on = 1; next } /^```$/ { on = 0 } on' \
    "$(dirname "${BASH_SOURCE[0]}")/deployment.md" |
    sed -e "s/127\.0\.0\.1:18480/127.0.0.1:$1/" \
      -e "s/127\.0\.0\.1:1848\([1-3]\)/127.0.0.1:$(($1 / 10))\1/"
}
