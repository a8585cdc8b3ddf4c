# Shell functions the benchmark scripts share (docs/bench-throughput.sh,
# docs/bench-poll-wakes.sh); sourced by them, not run. They read
# DW_BENCH_POSTGRES_URL.

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
