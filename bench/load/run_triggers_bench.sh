#!/usr/bin/env bash
# The trigger rules' cost beside the fold they run on (issue 41: <= 5% of the fold's CPU):
# nrtprof_triggers_bench built optimized, pinned to core 0, ROUNDS rounds of SECONDS of four
# synthetic RMSNorm processes' stream (about 145,000 events a second), folded every 5 s (nrtprofd
# --trigger_check_ms's default) with the issue's seven rules evaluated on each window.
#
#   bench/load/run_triggers_bench.sh              # 3 rounds of 60 s of stream time, ~2 minutes
#   ROUNDS=5 SECONDS_OF_STREAM=120 bench/load/run_triggers_bench.sh
#
# Prints figures; asserts nothing. Explained in BENCHMARKS.md ("Trigger rules").
set -euo pipefail

cd "$(dirname "$0")/../.."
ROUNDS=${ROUNDS:-3}
SECONDS_OF_STREAM=${SECONDS_OF_STREAM:-60}
bazel build --config=opt --symlink_prefix=/ //bench:nrtprof_triggers_bench >&2
bin="$(bazel info --config=opt bazel-bin 2>/dev/null)/bench/nrtprof_triggers_bench"
echo "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) CPUs; load average: $(cut -d' ' -f1-3 /proc/loadavg)"
for round in $(seq 1 "$ROUNDS"); do
  echo "-- round $round"
  taskset -c 0 "$bin" --seconds "$SECONDS_OF_STREAM" --processes 4 --fold_period_s 5
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
