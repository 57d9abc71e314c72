#!/usr/bin/env bash
# The CPU a profiled process's nrtprof threads take at a given rate of async executions
# (issue 38: <= 1% of one core at 10,000 a second). Runs bench/apps/exec_rate.cc --async RATE
# (nrta_execute_schedule, then nrta_is_completed of the one before, RATE times a second) under
# `nrtprof run` against a private nrtprofd, ROUNDS times, and prints each run's CPU of every
# thread of the process over the run less its first EXEC_RATE_CPU_FROM (1) seconds, from
# /proc/self/task/TID/schedstat: the flusher (nrtprof-flush), gRPC's threads, and their sum.
# With --sync, exec_rate's synchronous loop (nrt_execute as fast as the device lets it, at
# NRT_SIM_TIME_SCALE=0.2 about 10,000 a second here) instead, for comparison.
#
#   bench/apps/run_async_cpu.sh [--rounds N] [--seconds S] [--rate R] [--sync] [--no-build]
#
# NRT_SIM_TIME_SCALE defaults to 0.1 (async: each ~370 us execution holds its queue ~37 us, so
# the queue keeps up) and 0.2 with --sync; EXEC_RATE_TIMER_SLACK_NS=1. Prints figures; asserts
# nothing about time.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$ROOT" || exit 2
rounds=3
seconds=11
rate=10000
sync=0
build=1
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds="$2"; shift 2 ;;
    --seconds) seconds="$2"; shift 2 ;;
    --rate) rate="$2"; shift 2 ;;
    --sync) sync=1; shift ;;
    --no-build) build=0; shift ;;
    *) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 2 ;;
  esac
done
if [ "$build" = 1 ]; then
  bazel build --config=opt --noshow_progress //bench:exec_rate //shim:shim //daemon:nrtprofd \
    //client:nrtprof 2>&1 | grep -E '^(ERROR|WARNING)' >&2
  [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "run_async_cpu.sh: build failed" >&2; exit 1; }
fi
BIN="$ROOT/bazel-out/k8-opt/bin"
out="$(mktemp -d /tmp/nrtprof-async-cpu.XXXXXX)"
"$BIN/daemon/nrtprofd" --socket="$out/d.sock" --output_root="$out/captures" \
  --max_events_per_process=100000000 2>"$out/nrtprofd.log" &
daemon=$!
trap 'kill "$daemon" 2>/dev/null; wait "$daemon" 2>/dev/null' EXIT
for _ in $(seq 50); do [ -S "$out/d.sock" ] && break; sleep 0.1; done
export EXEC_RATE_TIMER_SLACK_NS=1
if [ "$sync" = 1 ]; then
  export NRT_SIM_TIME_SCALE="${NRT_SIM_TIME_SCALE:-0.2}"
  args=("$seconds")
else
  export NRT_SIM_TIME_SCALE="${NRT_SIM_TIME_SCALE:-0.1}"
  args=("$seconds" --async "$rate")
fi
echo "run_async_cpu.sh: $(date -u '+%F %T UTC'); $(uptime | sed 's/.*load/load/');" \
  "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) vCPUs;" \
  "NRT_SIM_TIME_SCALE=$NRT_SIM_TIME_SCALE; exec_rate ${args[*]}"
for ((r = 1; r <= rounds; r++)); do
  NRTPROF_ADDR="unix:$out/d.sock" "$BIN/client/nrtprof" run --out "$out/cap$r" -- \
    "$BIN/bench/exec_rate" "${args[@]}" >"$out/run$r.txt" 2>&1
  rate_line="$(grep -E '^(async scheduled|calls [0-9])' "$out/run$r.txt" | head -1)"
  flush="$(awk '$1 == "thread" && $2 == "nrtprof-flush" { s += $5 + 0 } END { printf "%.3f", s }' "$out/run$r.txt")"
  total="$(grep -oE 'nrtprof_threads_cpu_percent [0-9.]+' "$out/run$r.txt" | cut -d' ' -f2)"
  dropped="$(grep -oE '[0-9]+ dropped' "$out/run$r.txt" | head -1)"
  echo "round $r: flusher ${flush}% of a core, nrtprof threads (flusher + gRPC) ${total:-?}%;" \
    "${rate_line:-no rate line}; ${dropped:-?}"
done
echo "run_async_cpu.sh: $(uptime | sed 's/.*load/load/'); raw output in $out"
